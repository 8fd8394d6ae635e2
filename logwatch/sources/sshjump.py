"""A node behind a bastion: the ssh config's `ProxyJump` hops, opened here rather than by
asyncssh, so that a hop that fails is named as the hop.

asyncssh opens a Host's `ProxyJump` itself, inside `connect()`, and what a hop raises comes
out as if the node had raised it: a bastion whose host key is not in known_hosts was said as
"WARNING: the host key of gpu-node-17 has CHANGED ... this may be a man-in-the-middle" (the
node's key was trusted: its known_hosts entry was found, the refusal taken for the node's),
and a key the bastion refused as "SSH authentication to gpu-node-17 failed".  Each hop is
opened as asyncssh opens it (its own Host block of the same ssh config, `user@host:port`
as written, the previous hop as its tunnel: OpenSSH's order too), and what fails there is
wrapped with the hop (`JumpFailed`): fatal where the cause is (`JumpRefused`), retried
where it is not (`JumpLost`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

import asyncssh

from .sshfail import FatalSSH, too_many_keys

# what a hop raises that retrying does not cure (as for the node itself)
HOP_FATAL = (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied, FatalSSH)


@dataclass(frozen=True)
class Hop:
    """One hop of a ProxyJump, `[user@]host[:port]` as the config writes it."""

    host: str
    port: int | None = None
    user: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Hop":
        """`[user@]host[:port]`, or the ssh URI OpenSSH takes too, `ssh://[user@]host[:port]`
        (before: its user read as "ssh://root", the bastion's login refused for it)."""
        text = text.strip()
        uri = text[:6].lower() == "ssh://"
        if uri:
            text = text[6:].rstrip("/")
        user, at, host = text.rpartition("@")
        if uri:
            user = unquote(user)
        port: int | None = None
        if host.startswith("[") and "]:" in host:          # [v6]:port
            host, _, p = host[1:].partition("]:")
            port = int(p) if p.isdigit() else None
        elif host.count(":") == 1:     # (an IPv6 address alone has several)
            host, _, p = host.partition(":")
            port = int(p) if p.isdigit() else None
        return cls(host.strip("[]"), port, user if at else None)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and self.port else self.host
        return f"{self.user + '@' if self.user else ''}{host}" + \
            (f":{self.port}" if self.port else "")


def proxy_command_first(config: Any) -> bool:
    """The host's `ProxyCommand` (`none` too) comes before its `ProxyJump` in the ssh config.
    OpenSSH takes whichever of the two comes first and drops the other (`ssh -G` shows
    only it): a node's own ProxyCommand before a `Host *` default ProxyJump.  asyncssh
    always took the ProxyJump, a way `ssh` never takes.  (Its config keeps the first value
    of each option in the order they were met.)"""
    order = list(getattr(config, "_options", None) or ())
    return "ProxyCommand" in order and "ProxyJump" in order and \
        order.index("ProxyCommand") < order.index("ProxyJump")


def jump_hops(config: Any) -> list[Hop]:
    """The hops of the host's `ProxyJump` in the loaded ssh config (none: `ProxyJump none`,
    no such line, no config, or a ProxyCommand before it: `proxy_command_first`)."""
    if config is None or proxy_command_first(config):
        return []
    value = config.get("ProxyJump")
    if not isinstance(value, str):
        return []
    return [Hop.parse(h) for h in value.split(",") if h.strip()]


class JumpFailed(Exception):
    """Connecting through the ProxyJump `hop` failed with `cause`; `to`: where the hop was
    asked to forward to, where that failed (a ChannelOpenError: `forward_failed`)."""

    def __init__(self, hop: Hop, cause: BaseException, to: str | None = None) -> None:
        super().__init__(f"{hop}: {cause}")
        self.hop = hop
        self.cause = cause
        self.to = to


class JumpRefused(JumpFailed, FatalSSH):
    """The hop refused us for good: its host key, or our key."""


class JumpLost(JumpFailed, OSError):
    """The hop could not be reached, or dropped us: retried like the node itself."""


def forward_failed(hop: Hop, e: asyncssh.ChannelOpenError, to: str) -> JumpFailed:
    """The hop logged us in and did not forward to `to` (the next hop, or the node): its
    sshd refuses to (`AllowTcpForwarding no`: fatal) or could not connect there (retried).
    Before: "ChannelOpenError: open failed", retried for ever, the hop never named."""
    if e.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
        return JumpRefused(hop, e, to)
    return JumpLost(hop, e, to)


class JumpLoop(FatalSSH):
    """The hop's own ProxyJump leads back to it: a `Host *` ProxyJump met by the jump host
    itself, with no `ProxyJump none` in its block (`ssh` loops the same way); asyncssh
    recursed until RecursionError, which ended the target with only that said."""


class ProxyLost(OSError):
    """The ssh config's `ProxyCommand` (`command`, as run) ended before the node's SSH server
    answered: `cause` is only "Connection lost" (asyncssh reads the command's stderr as the
    connection's bytes: what it said, "Host key verification failed.", is not kept), so the
    command is named, to be run by hand.  Retried like a host down."""

    def __init__(self, command: str, cause: BaseException) -> None:
        super().__init__(f"{command}: {cause}")
        self.command = command
        self.cause = cause


async def open_jumps(hops: list[Hop],
                     own: Callable[[Hop, bool], Awaitable[dict[str, Any]]] | None = None,
                     **kw: Any) -> Any | None:
    """A connection through `hops`, in order (None: no hops), to tunnel the node's through;
    closing it closes the hops before it.  `kw`: the ssh config paths (`config`), the
    timeouts and keepalives of the node's connection, and `known_hosts` where the caller
    decides it; `own(hop, first)`: what the caller decides per hop (its config read once,
    its own known_hosts, its keys, `tunnel=None` where its ProxyCommand comes first), over
    `kw`."""
    conn: Any = None
    prev: Hop | None = None
    try:
        for hop in hops:
            try:
                hop_kw = dict(kw, **(await own(hop, conn is None) if own is not None
                                     else {}))
                way = hop_kw.pop("tunnel", ())   # the first hop's own: None, its ProxyCommand
                nxt = await asyncssh.connect(hop.host, hop.port or (),
                                             username=hop.user or (), tunnel=conn or way,
                                             **hop_kw)
            except HOP_FATAL as e:
                raise JumpRefused(hop, e) from e
            except asyncssh.DisconnectError as e:
                if too_many_keys(e):       # a refused login, as the node's (TooManyKeys)
                    raise JumpRefused(hop, e) from e
                raise JumpLost(hop, e) from e
            except asyncssh.ChannelOpenError as e:
                if prev is None:
                    raise JumpLost(hop, e) from e
                raise forward_failed(prev, e, str(hop)) from e
            except RecursionError:
                raise JumpRefused(hop, JumpLoop(str(hop))) from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
                raise JumpLost(hop, e) from e
            nxt.set_tunnel(conn)
            conn, prev = nxt, hop
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn
