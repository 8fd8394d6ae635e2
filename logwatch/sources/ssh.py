"""A log on another machine, read over SSH by byte offset, with nothing installed there.

Two transports, one follow algorithm:

* The streamed reader (sources/sshstream.py, the default where the node has `python3`): one
  small reader per connection, started with `python3 -c` on one exec session, pushes what is
  appended to every followed file as it is written and answers reads by offset, stats (with
  dev:inode) and looks at the path.  One session per host whatever the number of logs
  (`MaxSessions 10` leaves room for the GPU stream and the startup grep), no SFTP subsystem
  needed, and no per-log polling from here (BENCHMARKS.md "SSH streamed reads").
* SFTP (the fallback: no python3 there, or `transport: sftp`): reads by offset, polled every
  `poll_interval`.

Why reads by offset and not a remote `tail -F`: a read names its offset, so after any
reconnect the next byte is exactly the one after the last byte received (no loss, no
repeat), and an open handle (SFTP's, or the reader's descriptor) keeps reading a file that
was renamed away, so a rotation is drained to its end before the new file is opened.  The
first attach also runs `grep` there to find the latest startup without downloading the
whole log.

* `~/.ssh/config`, `~/.ssh/known_hosts` and `~/.ssh/id_*` apply as with OpenSSH (asyncssh),
  and so do the system's `/etc/ssh/ssh_config` and `/etc/ssh/ssh_known_hosts`, which
  asyncssh alone does not read; overridden by explicit options.  Host keys are verified: an unknown or changed key is
  refused with a message saying how to trust it; `known_hosts: none` turns verification off
  and warns every time.
* Keepalives detect a dead peer; reconnects back off exponentially with jitter.
* Targets on the same host share one connection and one reader (`SSHPool`): the streamed
  one, or an SFTP session.  A killed reader costs a reconnect of the sources, not the
  connection: the pool starts another reader on it.

The follow algorithm (resume / attach / reconnect, truncation, rotation with drain) is the
`Cursor`'s (sources/cursor.py), shared with the local source; this module is its I/O: reads
and stats through either transport (the streamed reader mimics the part of the SFTP client
used here), the pushed growth as the cursor's wait / size / read of appended bytes,
reconnects, and the remote grep for the first attach.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import posixpath
import random
import re
import shlex
import time
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator
from urllib.parse import quote, unquote, urlsplit

import asyncssh
from asyncssh.config import ConfigParseError

from .. import log
from .base import (
    HEAD_BYTES, Data, Opened, Position, SourceError, SourceEvent, SourceState,
    StartLocator, compressed_refusal, compression_of,
)
from .sshstream import Attrs, ExecFile, ExecFS, NoStream, StreamLost, bounded_run
from .sshfail import (
    BadSSHFile, FatalSSH, NoSFTPSubsystem, NoStreamReader, SFTPEnded, SFTPNotClean, TooManyKeys,
    locked_keys, config_parse_why, no_key_offered, skip_system_config, ssh_config_paths,
    ssh_file_problems, too_many_keys,
)
from .sshjump import (
    Hop, JumpFailed, JumpLoop, ProxyLost, forward_failed, jump_hops, open_jumps,
    proxy_command_first,
)
from .newest import Listing, Match, NewestFile, check_pattern, is_pattern, matching
from .archive import (
    HEAD_PROBE, MAX_ARCHIVES, MAX_UNPACKED, compressed_rotated_names, head_of, pread, unpack,
)
from .cursor import (
    ROTATE_WAIT, Cursor, CursorIO, FindRotated, FollowsWithCursor, Hold, PathFacts, Reopen,
    before_range, drive, is_ours, later_files, rotated_names,
)

READ_SIZE = 256 * 1024
_UNSAFE_USER = re.compile(r"""[;|&$`'"<>(){}\[\]*?!#~\s\x00-\x1f\x7f]""")
GREP_MAX = 4 << 20        # bytes of the startup grep's answer (50 lines): more is refused
TRANSPORTS = ("auto", "stream", "sftp")
IDENTITY_EVERY = 1.0      # seconds between checks that the path is still our file


@dataclass(frozen=True)
class SSHTarget:
    host: str
    path: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, url: str) -> "SSHTarget":
        """`ssh://[user@]host[:port]/absolute/path`.  Everything after the host is the path:
        a `?` or `#` there is part of a file name or pattern, not a URL's query."""
        rest = url[len("ssh://"):] if url.startswith("ssh://") else ""
        netloc, slash, tail = rest.partition("/")
        parts = urlsplit("ssh://" + netloc)
        if not url.startswith("ssh://") or not parts.hostname or "?" in netloc or "#" in netloc:
            raise SourceError(f"not an ssh:// URL: {url!r} (use ssh://[user@]host[:port]/abs/path)")
        path = unquote(slash + tail)
        if not path.startswith("/") or path == "/":
            raise SourceError(f"{url!r}: the path must be absolute, e.g. ssh://host/var/log/x.log")
        try:
            port = parts.port
        except ValueError:
            raise SourceError(f"{url!r}: bad port") from None
        user = unquote(parts.username) if parts.username else None
        if user is not None and (not user or _UNSAFE_USER.search(user)):
            # never a login name; in the `cmd: ssh ...` advice or a ProxyCommand's %r it
            # would be shell text
            raise SourceError(f"{url!r}: the user name {user!r} has a character no login "
                              "name has (; | & $ ` quotes, spaces, ...)")
        # an IPv6 zone (`[fe80::1%25eth0]`) is percent-encoded in a URL
        return cls(unquote(parts.hostname), path, user, port)

    @property
    def in_home(self) -> str | None:
        """`ssh://host/~/server.log` names a file in the login's home directory (as sftp and
        curl read it): the path under it, which only the node can complete (`at_home`)."""
        return self.path[3:] if self.path.startswith("/~/") else None

    def at_home(self, home: str) -> "SSHTarget":
        """This target with a path under `~/` made absolute in `home`."""
        rest = self.in_home
        return self if rest is None else replace(self, path=posixpath.join(home, rest))

    def __str__(self) -> str:
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        host = f"[{quote(self.host, safe=':')}]" if ":" in self.host else self.host
        return f"ssh://{who}{host}{port}{self.path}"


@dataclass(frozen=True)
class SSHOptions:
    """Explicit settings; anything left None comes from ~/.ssh/config and OpenSSH defaults."""

    known_hosts: str | None = None        # a path; "none" disables host key checking (warns)
    client_keys: tuple[str, ...] | None = None
    config: tuple[str, ...] | None = None
    username: str | None = None
    port: int | None = None
    connect_timeout: float = 15.0
    keepalive_interval: float = 5.0
    keepalive_count_max: int = 3
    poll_interval: float = 0.1            # SFTP poll while the log is active
    idle_poll_interval: float = 0.5       # ... and after 10 s without new bytes
    # "auto": the streamed reads (sources/sshstream.py) where the node has python3, else
    # SFTP; "stream" or "sftp": only that one
    transport: str = "auto"

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise TypeError(f"transport: one of {', '.join(TRANSPORTS)}, not {self.transport!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SSHOptions":
        d = dict(d or {})
        keys = d.pop("client_keys", None)
        cfg = d.pop("config", None)
        return cls(client_keys=tuple(keys) if keys is not None else None,
                   config=tuple([cfg] if isinstance(cfg, str) else cfg) if cfg is not None else None,
                   **d)


def _connect_kwargs(target: SSHTarget, opts: SSHOptions) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "connect_timeout": opts.connect_timeout,
        "keepalive_interval": opts.keepalive_interval,
        "keepalive_count_max": opts.keepalive_count_max,
        # the ssh config's options for an interactive login are not for these sessions:
        # `RequestTTY force` put each on a pty (the reader's frames never greeted, SFTP's
        # packets mangled: the source stayed "starting" for good) and `RemoteCommand` ran
        # in place of SFTP.  True: asyncssh's default, a pty only where a terminal type is
        # asked (the GPU stream's, gpu/proc.py)
        "request_pty": True,
        "command": None,
        # nor the forwardings (`Host *` / `ForwardAgent yes`, common): `ssh` forwards the
        # agent for one interactive session, logwatch's connections stay up for months on
        # every node watched, and a root there could use the daemon's agent (its keys to
        # every other node) all along; nothing logwatch runs needs an agent or a display
        "agent_forwarding": False,
        "x11_forwarding": False,
    }
    user = target.user or opts.username
    if user:
        kw["username"] = user
    port = target.port or opts.port
    if port:
        kw["port"] = port
    if opts.known_hosts is not None:
        kh = opts.known_hosts
        kw["known_hosts"] = None if kh.lower() == "none" else _expand(kh)
    if opts.client_keys is not None:
        kw["client_keys"] = [_expand(k) for k in opts.client_keys]
        # the named keys are the keys (IdentitiesOnly): asyncssh offered an agent's keys
        # first, and an agent of 6 keys used up sshd's MaxAuthTries before the named one
        # was tried ("Too many authentication failures", for ever)
        kw["agent_path"] = None
    kw["config"] = ssh_config_paths(opts.config)      # (the system's too, as ssh reads it)
    return kw


# OpenSSH's default GlobalKnownHostsFile: where a fleet's host keys are put for every user
# (by its configuration management, FreeIPA, ...); asyncssh reads it only when the ssh
# config names it, and then drops ~/.ssh/known_hosts
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")


def global_known_hosts(cfg: Any | None) -> list[str]:
    """The system-wide known_hosts files that exist: the ssh config's GlobalKnownHostsFile,
    else OpenSSH's default."""
    named = cfg.get("GlobalKnownHostsFile") if cfg is not None else None
    return [str(f) for f in (named or GLOBAL_KNOWN_HOSTS) if os.path.isfile(_expand(str(f)))]


def default_known_hosts(cfg: Any | None) -> Any:
    """The known_hosts `ssh` checks where no option names one: the user's (the config's
    UserKnownHostsFile, else ~/.ssh/known_hosts) and the global ones; `()` (asyncssh's own
    choice, the same files) where no global file exists.  Before, a host whose key was in
    /etc/ssh/ssh_known_hosts, which `ssh` takes, was refused with the advice to append its
    key to ~/.ssh/known_hosts."""
    glob = global_known_hosts(cfg)
    if not glob:
        return ()
    user = [str(f) for f in (cfg.get("UserKnownHostsFile") if cfg is not None else None)
            or USER_KNOWN_HOSTS]
    return [_expand(f) for f in user if os.path.exists(_expand(f))] + \
        [_expand(f) for f in glob]


def present_identities(cfg: Any | None) -> dict[str, Any]:
    """The connection's keys and certificates where the ssh config names an `IdentityFile`
    or `CertificateFile` that does not exist: the named ones that do (`{}`: leave them to
    asyncssh, all there or none named).  `ssh` skips a missing one ("no such identity");
    asyncssh read each and raised FileNotFoundError, "cannot connect: FileNotFoundError: ...
    id_work" retried for ever (a `Host *` naming a laptop's keys, the system config's
    defaults).  A key with a passphrase is still skipped (ignore_encrypted, as for the
    config's own keys); no key left: asyncssh's default keys and the agent."""
    out: dict[str, Any] = {}
    for option, arg in (("IdentityFile", "client_keys"), ("CertificateFile", "client_certs")):
        named = [str(k) for k in (cfg.get(option) if cfg is not None else None) or ()]
        there = [_expand(k) for k in named if os.path.isfile(_expand(k))]
        if len(there) < len(named):
            out[arg] = there
    if "client_keys" in out:
        out["ignore_encrypted"] = True
    return out


def environment_agent(cfg: Any | None) -> dict[str, Any]:
    """`IdentityAgent SSH_AUTH_SOCK`: the agent that variable names, as `ssh` reads it (a
    host kept to the usual agent where `Host *` names another, 1Password's).  asyncssh took
    the words as a path and offered no agent key ("... names SSH_AUTH_SOCK, which is gone"
    of a running agent)."""
    if cfg is not None and cfg.get("IdentityAgent") == "SSH_AUTH_SOCK":
        return {"agent_path": os.environ.get("SSH_AUTH_SOCK") or None}
    return {}


async def read_config(host: str, kw: dict[str, Any], hop: bool = False
                      ) -> tuple[Any, dict[str, Any]]:
    """The ssh config as a connection to `host` with `kw` reads it (its Host and Match
    blocks applied; read once, in a thread, as asyncssh.connect reads it), and what to give
    asyncssh.connect beside `kw` so that it does not read it again.  Before, each connection
    read it twice (`host_config` here, on the event loop, then asyncssh), four times through
    a bastion: an ssh config of 8,000 Host blocks (a fleet's, generated) costs 0.3 s a read,
    and a `Match exec` runs its command each time.  asyncssh reads it again where it must
    (`Match final`, CanonicalizeHostname: a second pass), and for a `hop` whose own
    ProxyJump asyncssh opens (the first hop: each later one goes through the one before).
    The keys are loaded by connect (`present_identities` first): `client_keys` must be in
    what is given to it."""
    first = await asyncssh.SSHClientConnectionOptions.construct(
        host=host, **dict(kw, client_keys=kw.get("client_keys")))
    cfg = first.config
    again = cfg.has_match_final() or bool(cfg.get("CanonicalizeHostname")) or \
        (hop and isinstance(cfg.get("ProxyJump"), str) and not proxy_command_first(cfg))
    return cfg, {"options": first, "config": kw["config"] if again else None}


async def _login(host: str, **kw: Any) -> asyncssh.SSHClientConnection:
    """asyncssh.connect, with sshd's "Too many authentication failures" as the refused login
    it is (TooManyKeys: fatal)."""
    try:
        return await asyncssh.connect(host, **kw)
    except asyncssh.DisconnectError as e:
        if too_many_keys(e):
            raise TooManyKeys(e.code, e.reason, e.lang) from e
        raise


async def _connect(target: SSHTarget, opts: SSHOptions) -> asyncssh.SSHClientConnection:
    """The connection to the target, through the ssh config's ProxyJump hops opened here
    (sshjump.py: a hop's failure is said as the hop's, not the node's)."""
    kw = _connect_kwargs(target, opts)
    cfg, once = await read_config(target.host, kw)
    kw.update(once)
    if "known_hosts" not in kw and (files := default_known_hosts(cfg)):
        kw["known_hosts"] = files
    if opts.client_keys is None:
        kw["client_keys"] = ()            # asyncssh's own choice: the config's, the defaults
        kw.update(present_identities(cfg), **environment_agent(cfg))
    hops = jump_hops(cfg)
    if proxy_command_first(cfg):
        kw["tunnel"] = None           # not asyncssh's ProxyJump: the ProxyCommand, as ssh
    if not hops:
        try:
            return await _login(target.host, **kw)
        except (asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError) as e:
            proxy = cfg.get("ProxyCommand")
            if proxy:
                raise ProxyLost(proxy if isinstance(proxy, str) else shlex.join(proxy),
                                e) from e
            raise
    # a hop is checked as its own Host block says (as OpenSSH does), but `known_hosts: none`
    # turns checking off for the whole way (it warns)
    hop_kw = {k: kw[k] for k in ("connect_timeout", "keepalive_interval", "keepalive_count_max")}
    hop_kw["config"] = ssh_config_paths(opts.config)
    if "known_hosts" in kw and kw["known_hosts"] is None:
        hop_kw["known_hosts"] = None

    async def own(hop: Hop, first: bool) -> dict[str, Any]:
        """The hop's config read once, its keys as its own Host block names them, and (no
        `known_hosts: none`) its own known_hosts files and the global ones."""
        hcfg, out = await read_config(hop.host, dict(hop_kw, port=hop.port or (),
                                                     username=hop.user or ()), hop=first)
        out["client_keys"] = ()
        out.update(present_identities(hcfg), **environment_agent(hcfg))
        if proxy_command_first(hcfg):
            out["tunnel"] = None
        if "known_hosts" not in hop_kw:
            # its own files and the global ones, whatever the node's option names (the
            # node's: before, with one given, a hop was checked without the global file and
            # its key found there was said CHANGED, a man-in-the-middle)
            out["known_hosts"] = default_known_hosts(hcfg)
        return out
    jump = await open_jumps(hops, own, **hop_kw)
    try:
        conn = await _login(target.host, tunnel=jump, **kw)
    except asyncssh.ChannelOpenError as e:     # the last hop did not forward to the node
        jump.close()
        raise forward_failed(hops[-1], e, address(target, opts)) from e
    except BaseException:
        jump.close()
        raise
    conn.set_tunnel(jump)          # closing the node's connection closes the hops
    return conn


def _expand(p: str) -> str:
    import os
    return os.path.expanduser(p)


class SSHPool:
    """Shares one SSH connection per (user, host, port, options), and on it one file reader:
    the streamed reader (`ExecFS`, one exec session) where the node has python3, else one
    SFTP session (`transport` in the options decides)."""

    def __init__(self) -> None:
        self._conns: dict[tuple[Any, ...], tuple[asyncssh.SSHClientConnection, Any]] = {}
        self._locks: dict[tuple[Any, ...], asyncio.Lock] = {}
        self._exec: dict[tuple[Any, ...], asyncio.Semaphore] = {}
        self._no_stream: dict[tuple[Any, ...], str] = {}   # why the reader cannot start
        self._stream_failed: dict[tuple[Any, ...], str] = {}   # why it did not, last time
        self._skews: dict[tuple[Any, ...], float] = {}   # an SFTP node's clock (node_skew)
        self.connects = 0
        self.streams = 0          # readers started

    def exec_slot(self, target: SSHTarget, opts: SSHOptions) -> asyncio.Semaphore:
        """Remote commands share the connection's session limit (OpenSSH MaxSessions is 10
        by default): at most a few at once per connection."""
        return self._exec.setdefault(self.key(target, opts), asyncio.Semaphore(4))

    def skew(self, target: SSHTarget, opts: SSHOptions) -> float:
        """This machine's wall clock less the node's, as read when its SFTP session began
        (0 for a streamed reader: its stats carry their own, `Attrs.skew`)."""
        return self._skews.get(self.key(target, opts), 0.0)

    @staticmethod
    def key(target: SSHTarget, opts: SSHOptions) -> tuple[Any, ...]:
        return (target.user, target.host, target.port, opts)

    async def get(self, target: SSHTarget, opts: SSHOptions) -> tuple[Any, Any]:
        key = self.key(target, opts)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            have = self._conns.get(key)
            if have is not None and not have[0].is_closed():
                if not isinstance(have[1], ExecFS) or have[1].lost is None:
                    return have
                # the reader ended, the connection is up: start another one on it
                try:
                    fs = await self._start_stream(key, have[0], opts)
                except BaseException:
                    self.drop(target, opts, have[0])
                    raise
                if fs is not None:
                    self._conns[key] = (have[0], fs)
                    return self._conns[key]
                self.drop(target, opts, have[0])
            if opts.known_hosts is not None and opts.known_hosts.lower() == "none":
                log.get("source.ssh").warning("host key verification is OFF for this target "
                                              "(known_hosts: none): anyone on the path can read "
                                              "your logs", host=target.host)
            for bad in ssh_file_problems(opts.client_keys, opts.known_hosts, opts.config):
                raise bad
            try:
                conn = await _connect(target, opts)
            except ConfigParseError as e:      # "FILE line N: ...": ours, or ~/.ssh/config
                if opts.config is not None or not skip_system_config(str(e)):
                    raise BadSSHFile("config", str(e).partition(" line ")[0],
                                     config_parse_why(str(e))) from None
                log.get("source.ssh").warning(
                    "the system's ssh config has a line logwatch cannot read (ssh can): it is "
                    "left out until it changes", error=str(e))
                conn = await _connect(target, opts)
            try:
                reader = await self._start_stream(key, conn, opts)
                if reader is None:
                    reader = await self._start_sftp(key, conn, target)
                    self._skews[key] = await node_skew(conn)
            except BaseException:
                conn.close()
                raise
            self.connects += 1
            self._conns[key] = (conn, reader)
            return conn, reader

    async def _start_stream(self, key: tuple[Any, ...], conn: Any,
                            opts: SSHOptions) -> ExecFS | None:
        """The streamed reader on `conn`; None: use SFTP (not wanted, or no python3 there)."""
        if opts.transport == "sftp" or (opts.transport == "auto" and key in self._no_stream):
            return None
        try:
            fs = await ExecFS.start(conn)
        except NoStream as e:
            self._stream_failed[key] = str(e)
            if e.final:
                self._no_stream[key] = str(e)
            if opts.transport == "stream":
                raise NoStreamReader(key[1], str(e)) from None
            log.get("source.ssh").info("no streamed reader on this host (python3?): reading "
                                       "over SFTP", host=key[1], reason=str(e))
            return None
        self.streams += 1
        return fs

    async def _start_sftp(self, key: tuple[Any, ...], conn: Any, target: SSHTarget) -> Any:
        try:
            return await conn.start_sftp_client()
        except asyncssh.ChannelOpenError as e:
            if e.reason == "Session request failed":
                # the session opened, the "sftp" subsystem request was refused
                raise NoSFTPSubsystem(target.host, self._stream_failed.get(key)) from e
            raise
        except asyncssh.SFTPConnectionLost as e:
            if conn.is_closed():
                raise             # the connection dropped: an outage, tried again
            # the subsystem ended before a word on a connection still up: the login shell
            # exits before any command (the reader's failure was not python3's: tried again)
            self._no_stream.pop(key, None)
            raise SFTPEnded(target.host, self._stream_failed.get(key)) from e
        except asyncssh.SFTPBadMessage as e:
            # sshd runs an `sftp-server` subsystem through the login shell: a ~/.bashrc
            # that prints ("Welcome to ...") puts its text before the first SFTP packet
            raise SFTPNotClean(target.host, await login_prints(conn),
                               self._stream_failed.get(key)) from e

    def drop_reader(self, target: SSHTarget, opts: SSHOptions, reader: Any) -> None:
        """The streamed reader ended (the connection may live on): the next `get` starts
        another one; the connection is dropped only if it is closed too."""
        have = self._conns.get(self.key(target, opts))
        if have is not None and have[1] is reader and have[0].is_closed():
            self.drop(target, opts, have[0])

    def drop(self, target: SSHTarget, opts: SSHOptions, conn: Any) -> None:
        key = self.key(target, opts)
        have = self._conns.get(key)
        if have is not None and have[0] is conn:
            del self._conns[key]
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass

    async def close(self) -> None:
        for conn, reader in list(self._conns.values()):
            if isinstance(reader, ExecFS):
                reader.close()
            conn.close()
        for conn, _ in list(self._conns.values()):
            try:
                await asyncio.wait_for(conn.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        self._conns.clear()


_DEFAULT_POOL: SSHPool | None = None


def default_pool() -> SSHPool:
    global _DEFAULT_POOL
    if _DEFAULT_POOL is None:
        _DEFAULT_POOL = SSHPool()
    return _DEFAULT_POOL


@dataclass
class Backoff:
    """Exponential backoff with full jitter, reset after a healthy period."""

    base: float = 0.5
    cap: float = 30.0
    attempt: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next(self) -> float:
        delay = min(self.cap, self.base * (2 ** self.attempt))
        self.attempt += 1
        return delay / 2 + self.rng.uniform(0, delay / 2)

    def reset(self) -> None:
        self.attempt = 0


LOGIN_PRINTS_MAX = 4 << 10     # bytes read of what a login script prints
_NODE_NOW = re.compile(rb"(?m)^(\d{9,12})(?:\.(\S{1,9}))?[ \t\r]*$")


async def node_skew(conn: Any) -> float:
    """This machine's wall clock less the node's, for a node read over SFTP, whose file
    attributes carry no time of the node (the streamed reader's stats do: `Attrs.skew`).  A
    file's mtime is on the node's clock: a node 20 minutes behind made a log written a second
    ago read as silent for 20 minutes at attach ("silent since ...: server probably dead",
    a stall alerted, phase and total times 20 minutes long).  One `date` per connection; 0
    where no number comes back (an SFTP-only account, no `date`)."""
    try:
        out, _ = await bounded_run(conn, "date +%s.%N", LOGIN_PRINTS_MAX, 5,
                                   stdin=asyncssh.DEVNULL)
    except (OSError, asyncssh.Error, asyncio.TimeoutError):
        return 0.0
    found = _NODE_NOW.findall(out)      # the last number line: a login script may print
    if not found:
        return 0.0
    whole, frac = found[-1]
    # no %N (BusyBox, BSD): the node's second began up to 1 s before, its middle counts
    now = int(whole) + (int(frac) / 10 ** len(frac) if frac.isdigit() else 0.5)
    return time.time() - now


async def login_prints(conn: Any) -> str:
    """The first line a session's login scripts print on stdout (run only after SFTP failed
    on it, to name the cause), made safe to show; "" if nothing could be read."""
    try:
        out, _ = await bounded_run(conn, "true", LOGIN_PRINTS_MAX, 10)
    except (OSError, asyncssh.Error, asyncio.TimeoutError):
        return ""
    for raw in out.splitlines():
        text = re.sub(r"[\x00-\x1f\x7f]+", " ", raw.decode("utf-8", "replace")).strip()
        if text:
            return text[:80] + ("..." if len(text) > 80 else "")
    return ""


_FATAL = (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied, FatalSSH)


def known_keys(known_hosts: str, target: SSHTarget) -> list[Any]:
    """The keys `known_hosts` trusts for the target's host (empty: an unknown host)."""
    try:
        kh = asyncssh.read_known_hosts(_expand(known_hosts))
        return list(kh.match(target.host, target.host, target.port)[0])
    except (OSError, ValueError, asyncssh.Error):
        return []


def host_config(target: SSHTarget, opts: SSHOptions) -> Any | None:
    """The ssh config as the connection reads it for the target (`ssh_config_paths`), its
    Host and Match blocks applied; None where it cannot be read."""
    import getpass
    from asyncssh.config import SSHClientConfig
    paths = ssh_config_paths(opts.config)
    port: Any = target.port or opts.port
    try:
        return SSHClientConfig.load(None, paths, False, False, False, getpass.getuser(),
                                    target.user or opts.username or (), target.host,
                                    port or ())
    except (OSError, ValueError, KeyError, ConfigParseError, asyncssh.Error):
        return None


def resolved(target: SSHTarget, opts: SSHOptions) -> tuple[SSHTarget, list[str]]:
    """The target as the connection resolves it through the ssh config (a Host alias's
    HostName and Port, or its HostKeyAlias: the name known_hosts is searched by), and the
    known_hosts files it checks (the option, else the config's UserKnownHostsFile, else
    ~/.ssh/known_hosts)."""
    cfg = host_config(target, opts)
    port: Any = target.port or opts.port
    host = target.host
    files = [opts.known_hosts] if opts.known_hosts is not None else []
    if cfg is not None:
        host = str(cfg.get("HostKeyAlias") or cfg.get("Hostname") or host)
        port = port or cfg.get("Port")
        files = files or [str(f) for f in cfg.get("UserKnownHostsFile") or ()]
    port = int(port) if port and int(port) != 22 else None
    return replace(target, host=host, port=port), files or ["~/.ssh/known_hosts"]


def explain_host_key(e: asyncssh.HostKeyNotVerifiable, target: SSHTarget,
                     opts: SSHOptions) -> str:
    """A host key refused: unknown (how to add it after checking), or CHANGED (known_hosts
    trusts another key for the host: never the advice to append), for the host and port the
    ssh config resolves an alias to, in the known_hosts files it names (before: an alias's
    changed key got the advice to append it, the alias looked up as a host)."""
    real, files = resolved(target, opts)
    name = f"[{real.host}]:{real.port}" if real.port else real.host
    shown = target.host if real.host == target.host else f"{target.host} ({name})"
    if all(os.path.realpath(_expand(f)) == "/dev/null" for f in files):
        return (f"host key of {shown} is not trusted: its known_hosts is /dev/null (the ssh "
                "config's UserKnownHostsFile: with `StrictHostKeyChecking no` `ssh` takes any "
                "key, logwatch does not): give logwatch a known_hosts holding the node's key "
                "(--known-hosts FILE / ssh.known_hosts), or set known_hosts: none to skip "
                "verification (insecure)")
    if opts.known_hosts is None:        # ssh's global files too (default_known_hosts)
        files = files + global_known_hosts(host_config(target, opts))
    trusted = [(f, keys) for f in files if (keys := known_keys(f, real))]
    if trusted:
        # the host is known with another key: a reinstalled host, or someone in between;
        # appending the new key (the advice for an unknown host) would hide that
        where, known = trusted[0]
        prints = ", ".join(sorted({k.get_fingerprint() for k in known}))
        return (f"WARNING: the host key of {shown} has CHANGED: {where} trusts "
                f"{prints} for {name}, and the server presented another key. If the host was "
                f"reinstalled, verify its new key out of band, then remove the old one "
                f"(`ssh-keygen -R '{name}' -f {where}`) and add the new one; otherwise do "
                "not connect: this may be a man-in-the-middle")
    port = f"-p {real.port} " if real.port else ""
    return (f"host key of {shown} is not trusted ({e.reason}); check its "
            f"fingerprint and add it to {files[0]} (e.g. `ssh-keyscan {port}{real.host} "
            f">> {files[0]}`), or set known_hosts: none to skip verification (insecure)")


def explain_way(e: JumpFailed | ProxyLost, target: SSHTarget, opts: SSHOptions) -> str:
    """A ProxyJump hop's own cause, said for the hop: its host key and login are checked as
    its Host block says (the target's known_hosts and keys are the node's); a ProxyCommand
    that ended, named (before: "ConnectionLost: Connection lost", retried for ever)."""
    if isinstance(e, ProxyLost):
        return (f"the ssh config's ProxyCommand for {target.host} (`{e.command}`) ended before "
                f"the node's SSH server answered ({type(e.cause).__name__}): run it by hand "
                "to see why (a bastion's host key or login, a proxy down)")
    way = f"the jump host {e.hop} (the ssh config's ProxyJump for {target.host})"
    if e.to is not None and isinstance(e.cause, asyncssh.ChannelOpenError):
        if e.cause.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
            return (f"{way} logged us in and refuses to forward to {e.to} ({e.cause.reason}): "
                    "its sshd has `AllowTcpForwarding no` (or a PermitOpen leaving that "
                    "address out), which ProxyJump needs: allow it there for this login")
        return (f"{way} could not connect to {e.to} ({e.cause.reason}): no SSH server there, "
                "or not reachable from the jump host")
    hop = SSHTarget(e.hop.host, target.path, e.hop.user, e.hop.port)
    own = replace(opts, known_hosts=None, client_keys=None, username=None, port=None)
    if isinstance(e.cause, asyncssh.PermissionDenied) or too_many_keys(e.cause):
        return f"through {way}: " + explain_login(e.cause, hop, own, hop=True)
    return f"through {way}: " + explain(e.cause, hop, own)


def explain_login(e: asyncssh.DisconnectError, target: SSHTarget, opts: SSHOptions,
                  hop: bool = False) -> str:
    """The login refused: a key offered by itself that has a passphrase (skipped), or no key
    offered at all (no key file, no agent: before, "... or set up ~/.ssh/config" to one whose
    config named its agent's key), or too many keys offered (an agent's, before the host's
    own: before, "ProtocolError: Too many authentication failures" alone), or the keys
    offered were not accepted.  `hop`: a ProxyJump hop's, whose keys only its Host block
    names (before, it was told to give -i / ssh.client_keys, the node's keys only)."""
    name_it = ("name its key in its Host block of the ssh config (IdentityFile: -i / "
               "ssh.client_keys name the node's keys only)" if hop else
               "give a key file (-i / ssh.client_keys)")
    if too_many_keys(e):
        return (f"SSH authentication to {target.host} failed ({e.reason}): its sshd stops "
                "a login after MaxAuthTries keys (6 by default), and more were offered (an "
                "ssh-agent's keys come before the host's own): set `IdentitiesOnly yes` for "
                "the host in the ssh config, " + (f"and {name_it}" if hop else "or name its "
                "key (-i / ssh.client_keys: then only the named keys are offered)"))
    who = (target.host, target.port or opts.port, target.user or opts.username, opts.config)
    locked = [] if opts.client_keys else locked_keys(*who)
    if locked:
        return (f"SSH authentication to {target.host} failed ({e.reason}): "
                f"{', '.join(locked)} has a passphrase, which logwatch cannot ask for "
                f"(the key was skipped): load it into ssh-agent for the daemon's user "
                f"(`ssh-add {locked[0]}`), or give a key without one")
    none = None if opts.client_keys else no_key_offered(*who)
    if none:
        return (f"SSH authentication to {target.host} failed ({e.reason}): {none}. "
                f"{name_it[0].upper()}{name_it[1:]}, or set SSH_AUTH_SOCK to a running "
                "agent's socket for the daemon (systemd: Environment=SSH_AUTH_SOCK=...)")
    if hop:
        return (f"SSH authentication to {target.host} failed ({e.reason}); {name_it}, or "
                "load it into ssh-agent")
    return (f"SSH authentication to {target.host} failed ({e.reason}); give a key with "
            "--ssh-key / ssh.client_keys or set up ~/.ssh/config")


def explain(e: BaseException, target: SSHTarget, opts: SSHOptions) -> str:
    if isinstance(e, (JumpFailed, ProxyLost)):
        return explain_way(e, target, opts)
    if isinstance(e, JumpLoop):
        return (f"the ssh config's ProxyJump for {target.host} leads back to itself (a `Host *` "
                "ProxyJump applies to the jump host too; `ssh` loops the same way): add "
                f"`ProxyJump none` to the Host block of {target.host}, above the `Host *` one "
                "(the first value wins)")
    if isinstance(e, asyncssh.HostKeyNotVerifiable):
        return explain_host_key(e, target, opts)
    if isinstance(e, NoSFTPSubsystem):
        nopy = (f"; the streamed reader did not start either (python3 there? {e.no_stream})"
                if e.no_stream else "")
        return (f"the SSH server on {target.host} has no SFTP subsystem (logging in works, "
                f"reading files does not{nopy}): add `Subsystem sftp internal-sftp` to its "
                "/etc/ssh/sshd_config and reload sshd, or follow the log with a command "
                f"source instead (`cmd: ssh {target.host} tail -n +1 -F {target.path}`)")
    if isinstance(e, BadSSHFile):
        return f"cannot use {e}"
    if isinstance(e, SFTPNotClean):
        said = f" ({e.printed!r})" if e.printed else ""
        other = (f"; the streamed reader, which does not mind it, did not start (python3 "
                 f"there? {e.no_stream})" if e.no_stream else
                 " (the streamed reader does not mind it: transport: auto, with python3 on "
                 "the node)")
        return (f"SFTP to {target.host} fails: the login shell prints text{said} before "
                f"SFTP begins{other}. A ~/.bashrc or /etc/bash.bashrc that prints for "
                "non-interactive shells breaks SFTP: print only in interactive shells "
                "(`[[ $- == *i* ]] || return` before the output), or set "
                "`Subsystem sftp internal-sftp` in the node's sshd_config")
    if isinstance(e, SFTPEnded):
        said = (f": it said {e.said!r}" if e.said else
                " (what it said on stderr: `ssh HOST true` shows it)")
        return (f"every session on {target.host} ends before it runs anything, SFTP's too: "
                f"the login shell exits at start{said}. A ~/.bashrc with `set -e` and a line "
                "that fails (a missing `source .../conda.sh`), or an `exit` in it, ends every "
                "ssh command: fix it on the node (`[ -f FILE ] && . FILE`)")
    if isinstance(e, NoStreamReader):
        return (f"the streamed reader did not start on {target.host} (transport: stream "
                f"needs python3 there): {e.why}; use transport: auto to fall back to SFTP")
    if isinstance(e, asyncssh.PermissionDenied) or too_many_keys(e):
        return explain_login(e, target, opts)
    if isinstance(e, asyncssh.Error):
        return f"{type(e).__name__}: {e.reason}"
    cause = connect_cause(e)
    if cause == "dns":
        return (f"no such host: {address(target, opts, port=False)} "
                f"({getattr(e, 'strerror', None) or e}; a typo?)")
    if cause == "refused":
        return f"connection refused by {address(target, opts)} (no SSH server there?)"
    if isinstance(e, (TimeoutError, asyncio.TimeoutError)) and not str(e):
        # (before: "TimeoutError: ", nothing said)
        return (f"no answer from {address(target, opts)} within "
                f"{opts.connect_timeout:g}s (the host hung or down, or the packets dropped on "
                "the way)")
    return f"{type(e).__name__}: {e}"


def address(target: SSHTarget, opts: SSHOptions, port: bool = True) -> str:
    """Where a connection to the target goes: `host:port`, or for a Host alias of the ssh
    config the alias and its HostName and Port (`gpu-7 (10.0.3.7:2222)`).  Before, the
    alias and port 22 were said ("connection refused by bastion:22") for a Host block whose
    Port is another: the operator sent to look at a port never tried."""
    cfg = host_config(target, opts)
    host = str(cfg.get("Hostname") or target.host) if cfg is not None else target.host
    number = target.port or opts.port or (cfg.get("Port") if cfg is not None else None) or 22
    where = (f"[{host}]:{number}" if ":" in host else f"{host}:{number}") if port else host
    return where if host == target.host else f"{target.host} ({where})"


def connect_cause(e: BaseException) -> str:
    """"dns" / "refused" for the connect failures that are a typo far more often than an
    outage (watch stops at once on them before its first connection), else ""."""
    if isinstance(e, JumpFailed):
        e = e.cause
    if isinstance(e, socket.gaierror):
        return "dns"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    return ""


def _written(attrs: Any, sftp_skew: float = 0.0) -> float | None:
    """The file's mtime on this machine's wall clock: the node's moved by its clock's offset
    (`Attrs.skew`, from the streamed reader; over SFTP, `sftp_skew`: `node_skew`)."""
    if attrs.mtime is None:
        return None
    return attrs.mtime + getattr(attrs, "skew", sftp_skew)


class SSHFileSource(FollowsWithCursor):
    def __init__(self, url: str, *, options: SSHOptions | None = None,
                 start: Position | None = None, locator: StartLocator | None = None,
                 pool: SSHPool | None = None, name: str | None = None,
                 rotate_wait: float = ROTATE_WAIT, wait_for_dir: bool = True) -> None:
        self.target = SSHTarget.parse(url)
        self.wait_for_dir = wait_for_dir     # False: a missing directory is refused (missing)
        # a pattern in the file name: the newest match is read (newest.py)
        self.newest: NewestFile | None = None
        if is_pattern(self.target.path):
            check_pattern(self.target.path)
            self.newest = NewestFile()
        self.current: str | None = None     # the path of the file read (opened by name) now
        self.opts = options or SSHOptions()
        self.name = name or str(self.target)
        self.start = start
        self.locator = locator
        self.pool = pool or default_pool()
        self.log = log.get("source.ssh").bind(target=str(self.target))
        self._closed = False
        self._wake = asyncio.Event()
        self._streaming: ExecFile | None = None   # the pushed file being waited on
        # where reading stands survives reconnects: the cursor is the source's, not a session's
        self.cursor = Cursor(self.target.path, saved=start, can_locate=locator is not None,
                             can_find=True, can_hold=True, read_size=READ_SIZE,
                             check_every=IDENTITY_EVERY,
                             rotate_wait=rotate_wait, logger=self.log)
        self.reconnects = 0
        # open handles of the files after ours (Cursor Hold), in the order they are read;
        # they go with the connection (the cursor then looks for them again)
        self._held: list[Any] = []
        self._held_path: dict[int, str] = {}    # the name each held file had (statuses)

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._streaming is not None:
            self._streaming._wake()
        held, self._held, self._held_path = self._held, [], {}
        for h in held:
            try:
                await h.close()
            except (OSError, asyncssh.Error):
                pass

    async def events(self) -> AsyncIterator[SourceEvent]:
        backoff = Backoff()
        waiting_said = False
        while not self._closed:
            try:
                conn, sftp = await self.pool.get(self.target, self.opts)
            except _FATAL as e:
                yield SourceState(False, explain(e, self.target, self.opts), fatal=True)
                return
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
                delay = backoff.next()
                yield SourceState(False, f"cannot connect: {explain(e, self.target, self.opts)}; "
                                         f"retrying in {delay:.1f}s", error=True,
                                  cause=connect_cause(e))
                await self._sleep(delay)
                continue
            healthy_since = time.monotonic()
            try:
                async for ev in self._follow(conn, sftp):
                    if isinstance(ev, SourceState) and not ev.up and not ev.fatal:
                        waiting_said = True
                    elif waiting_said and isinstance(ev, (Data, Opened)):
                        waiting_said = False
                    yield ev
                    if isinstance(ev, SourceState) and ev.fatal:
                        return
                return
            except (OSError, asyncssh.Error, asyncio.TimeoutError, EOFError) as e:
                self._held = []          # handles of the lost connection / reader
                self._held_path = {}
                if self._closed:
                    return
                if isinstance(e, StreamLost):
                    self.pool.drop_reader(self.target, self.opts, sftp)
                else:
                    self.pool.drop(self.target, self.opts, conn)
                if time.monotonic() - healthy_since > 2:
                    backoff.reset()  # it was working: come back fast (but never hammer)
                delay = backoff.next()
                self.reconnects += 1
                yield SourceState(False, f"connection lost ({explain(e, self.target, self.opts)}); "
                                         f"reconnecting in {delay:.1f}s", error=True)
                await self._sleep(delay)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):   # (not wait_for: it can drop a cancel)
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        self._wake.clear()

    async def named(self, sftp: Any) -> str | None:
        """The file the target names now: its path, or the newest match of its pattern
        (`/~/rest`: made absolute by `_follow` first, `login_home`)."""
        if self.newest is None:
            return self.target.path
        m = self.newest.choose(await remote_matches(sftp, self.target.path, self.newest))
        return None if m is None else posixpath.join(posixpath.dirname(self.target.path), m.name)

    async def _open(self, sftp: Any) -> AsyncIterator[SourceEvent | Any]:
        """Open the path, waiting (with a message, said again only when it changes) while
        it, or its directory, does not exist."""
        said = ""
        while not self._closed:
            try:
                path = await self.named(sftp)
                if path is None:
                    raise asyncssh.SFTPNoSuchFile("no file matches")
                f = await sftp.open(path, "rb")
                self.current = path
                yield f
                return
            except asyncssh.SFTPNoSuchFile:
                state = await missing(sftp, self)
                if state.fatal:
                    yield state
                    return
                if state.message != said:
                    yield state
                    said = state.message
                await self._sleep(1.0)
            except asyncssh.SFTPPermissionDenied:
                yield SourceState(False, f"permission denied reading {self.target.path} on "
                                         f"{self.target.host}", fatal=True)
                return
            except asyncssh.SFTPFailure as e:
                yield SourceState(False, f"cannot open {self.target.path} on "
                                         f"{self.target.host}: {e.reason}", fatal=True)
                return

    async def _follow(self, conn: Any, sftp: Any) -> AsyncIterator[SourceEvent]:
        """Read the path on one connection: open it, let the cursor read it, and open it
        again when the cursor leaves it (rotation); connection errors propagate."""
        say_up = True
        if self.target.in_home is not None:
            self.target = self.target.at_home(await login_home(self, conn, sftp))
            self.cursor.path = self.target.path
        while not self._closed:
            f = self._held.pop(0) if self._held else None   # after a Reopen: a held file
            if f is not None:
                self.current = self._held_path.pop(id(f), None)
            else:
                async for item in self._open(sftp):
                    if isinstance(item, SourceState):
                        yield item
                        say_up = True
                        if item.fatal:
                            return
                    else:
                        f = item
            if f is None:
                return
            io = _RemoteFile(self, conn, sftp, f)
            try:
                attrs = await f.stat()
                if attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY:
                    yield SourceState(False, f"{self.target.path} is a directory", fatal=True)
                    return
                head = await f.read(HEAD_BYTES, 0)
                kind = compression_of(head)
                if kind is not None:
                    yield SourceState(False, compressed_refusal(self.target.path, kind),
                                      fatal=True)
                    return
                if say_up or self.newest is not None:
                    yield SourceState(True, f"reading {self.target}" if self.newest is None
                                      or self.current is None else
                                      f"reading {self.current} on {self.target.host}")
                    say_up = False
                if self.newest is not None:
                    self.newest.read(Match(posixpath.basename(self.current or ""),
                                           getattr(attrs, "dev", None),
                                           getattr(attrs, "ino", None),
                                           int((attrs.mtime or 0) * 1_000_000_000)))
                async for ev in drive(self.cursor, io, getattr(attrs, "dev", None),
                                      getattr(attrs, "ino", None), attrs.size or 0, head,
                                      _written(attrs, self.pool.skew(self.target, self.opts))):
                    if not isinstance(ev, Reopen):
                        yield ev
                    elif self.newest is not None and self.newest.reading is not None \
                            and ev.reason != "truncated":
                        # drained and left: a pattern never names it again (a truncated file
                        # is not left: its copy was read, then it is read again)
                        self.newest.left(self.newest.reading)
            finally:
                for handle in {id(f): f, id(io.f): io.f}.values():
                    try:
                        await handle.close()
                    except (OSError, asyncssh.Error):
                        pass

# the login's home directory by its passwd entry, for SFTP (no reader there to ask): through
# `sh -c` so that tcsh, csh and fish login shells run it too
HOME_CMD = """sh -c 'getent passwd "$(id -u)" | cut -d: -f6'"""


async def login_home(source: SSHFileSource, conn: Any, sftp: Any) -> str:
    """The login's home directory on the node, where `ssh://host/~/rest` lies: its passwd
    entry's, not the readers' working directory, which a ~/.bashrc `cd $SCRATCH` moves (both
    start through the login shell; before, `realpath(".")` read $SCRATCH/rest, another file).
    The streamed reader asks the passwd database; over SFTP `getent` is run, and where no
    command runs (an SFTP-only account: internal-sftp, no shell, so no `cd` either) or it
    answers nothing (no getent: BusyBox), SFTP's own working directory is taken."""
    if isinstance(sftp, ExecFS):
        return await sftp.home()
    try:
        async with source.pool.exec_slot(source.target, source.opts):
            out, status = await bounded_run(conn, HOME_CMD, 4096, 10)
        home = out.decode("utf-8", "replace").strip()
        if status == 0 and home.startswith("/"):
            return str(await sftp.realpath(home))
        why = f"getent answered {home[:80]!r}, exit status {status}"
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
        why = str(e) or type(e).__name__
    # said: a ~/.bashrc that cds elsewhere would move what ~/ names (the wrong file, read)
    source.log.warning("the login's home directory is not known on the node: ~/ is taken as "
                       "SFTP's working directory", error=why)
    return str(await sftp.realpath("."))


async def missing(sftp: Any, source: SSHFileSource) -> SourceState:
    """What to say of a path that names no file: waiting for it, or for its directory (a
    job's own directory, `/jobs/job-8/`, is made when the job starts: waited for as a local
    target's is; before, refused and tried again only after 2 minutes, by when the job's
    crash was history), or refused where `source.wait_for_dir` is off (`watch` without
    --wait: a typo far more often than a job to come)."""
    target = source.target
    parent = posixpath.dirname(target.path) or "/"
    try:
        await sftp.stat(parent)
    except asyncssh.SFTPNoSuchFile:
        if not source.wait_for_dir:
            return SourceState(False, f"no such directory on {target.host}: {parent}",
                               fatal=True)
        return SourceState(False, f"waiting for {parent} (no such directory yet) to appear "
                                  f"on {target.host}")
    what = f"a file matching {target.path}" if source.newest else target.path
    return SourceState(False, f"waiting for {what} to appear on {target.host}")


GREP_STATUS = b"logwatch-grep "    # the line after the grep's: its own exit status


def grep_command(lits: list[str] | tuple[str, ...], path: str) -> str:
    """The startup grep as one command for any login shell (sh, bash, tcsh, csh, fish), its
    lines then grep's own exit status (`grep_status`): `grep ... | tail` alone answers tail's
    status, 0 for a grep that did not run (BusyBox grep has no -b: 2; no grep in the login
    PATH: 127), and that read as "no startup here", the log from byte 0, old crashes counted
    again.  `env`: a csh login shell has no `VAR=value cmd`; the script in single quotes and
    the words after it: nothing there for the login shell to expand, but a `!` (csh history)."""
    words = " ".join(f"-e {_csh_safe(shlex.quote(s))}" for s in lits)
    return ("env LC_ALL=C sh -c '{ grep -a -b -n -F \"$@\"; echo \"" + GREP_STATUS.decode()
            + "$?\"; } | tail -n 51' sh " + f"{words} -- {_csh_safe(shlex.quote(path))}")


def grep_status(out: bytes) -> tuple[bytes, int | None]:
    """`grep_command`'s output: the grep's lines, and its exit status (None: none said)."""
    body, _, last = out.rstrip(b"\n").rpartition(b"\n")
    said = last[len(GREP_STATUS):] if last.startswith(GREP_STATUS) else b""
    return body, int(said) if said.isdigit() else None


def _csh_safe(quoted: str) -> str:
    """A shlex-quoted word that csh and tcsh read the same: a `!` taken out of the single
    quotes and escaped (their history substitution happens inside single quotes too)."""
    return quoted.replace("!", "'\\!'")


async def find_start(source: SSHFileSource, conn: Any, f: Any) -> tuple[int, int]:
    """The latest startup of the log `source` reads: `grep -b -n` on the remote side,
    verified here."""
    loc = source.locator
    assert loc is not None
    lits = loc.grep_literals
    path = source.current or source.target.path
    if lits:
        try:
            if isinstance(f, ExecFile):
                # the streamed reader runs it: no session, no login shell per target
                status, out = await asyncio.wait_for(f.fs.grep(path, lits), 60)
            else:
                async with source.pool.exec_slot(source.target, source.opts):
                    out, ssh_status = await bounded_run(conn, grep_command(lits, path),
                                                        GREP_MAX, 60)
                # (an account for SFTP only refuses the command: exit 1, no status line)
                out, status = grep_status(out) if ssh_status == 0 else (out, None)
            ran = status in (0, 1)      # grep's own: 1 is "no line matched"
            if not ran:
                source.log.info("remote grep failed; scanning the log instead",
                                error=f"grep's exit status {status}")
            if ran:
                found = []
                for raw in out.splitlines():
                    lineno, _, rest = raw.partition(b":")
                    off, _, text = rest.partition(b":")
                    if lineno.isdigit() and off.isdigit():
                        found.append((int(off), int(lineno), text.decode("utf-8", "replace")))
                return loc.latest_start(found) or (0, 1)
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
            source.log.info("remote grep failed; scanning the log instead", error=str(e))
    finder = loc.scanner()
    pos = 0
    while True:
        data = await f.read(4 << 20, pos)
        if not data:
            return finder.result()
        finder.feed(data)
        pos += len(data)


async def remote_matches(sftp: Any, pattern: str, newest: NewestFile) -> Listing:
    """The files on the node matching a target's pattern now: the streamed reader lists and
    stats them in one request, SFTP reads the directory with its attributes (no command
    either way); kept while the directory is unchanged (`NewestFile.cached`)."""
    parent, name = posixpath.split(pattern)
    parent = parent or "/"
    try:
        dir_mtime = (await sftp.stat(parent)).mtime
    except asyncssh.SFTPNoSuchFile:
        return Listing([])  # the directory is gone: nothing matches (said where it matters)
    now = time.monotonic()
    cached = newest.cached(dir_mtime, now)
    if cached is not None:
        return cached
    if isinstance(sftp, ExecFS):
        found = await sftp.matching(parent, name)
        kept = set(matching(name, [n for n, _ in found]))    # (archives left out here)
        found = [(n, a) for n, a in found if n in kept]
    else:
        entries = {str(e.filename): e.attrs for e in await sftp.readdir(parent)}
        found = []
        for n in matching(name, list(entries)):
            a = entries[n]
            if a.type == asyncssh.FILEXFER_TYPE_SYMLINK:     # readdir tells the link's own
                try:
                    a = await sftp.stat(posixpath.join(parent, n))
                except asyncssh.SFTPError:
                    continue
            found.append((n, a))
    out = Listing.of(Match(n, getattr(a, "dev", None), getattr(a, "ino", None),
                           int((a.mtime or 0) * 1_000_000_000))
                     for n, a in found if a.type == asyncssh.FILEXFER_TYPE_REGULAR)
    newest.keep(dir_mtime, now, out, time.monotonic() - now)
    return out


async def remote_beside(sftp: Any, path: str | None) -> list[tuple[str, str]]:
    """(directory, name) where rotated copies of the log at `path` are on the node: beside
    it, and beside the file it links to (the kubelet's /var/log/containers links)."""
    if path is None:
        return []
    out = [(posixpath.dirname(path) or "/", posixpath.basename(path))]
    try:
        real = str(await sftp.realpath(path))
    except (asyncssh.SFTPError, OSError):
        return out
    there = (posixpath.dirname(real) or "/", posixpath.basename(real))
    return out if there == out[0] else out + [there]


async def find_unpacked(sftp: Any, beside: list[tuple[str, str]], ask: FindRotated
                        ) -> Any | None:
    """Ours among the newest compressed copies of the log on the node (`beside`:
    `remote_beside`), fetched and unpacked here (archive.py): the first MiB of each tells
    whether it is ours before the rest is fetched.  A handle-like `Unpacked`, or None."""
    try:
        paths = [posixpath.join(d, n) for d, base in beside
                 for n in compressed_rotated_names(base, [str(x) for x in
                                                          await sftp.listdir(d)])]
        ages = [(await sftp.stat(p)).mtime or 0 for p in paths]
    except asyncssh.SFTPError:
        return None
    lo, n = before_range(ask)
    for _, name in sorted(zip(ages, paths), reverse=True)[:MAX_ARCHIVES]:
        try:
            f = await sftp.open(name, "rb")
        except asyncssh.SFTPError:
            continue
        copy = None
        try:
            head = head_of(await f.read(HEAD_PROBE, 0))
            if head is None or not ask.identity.matches(None, None, head):
                continue
            copy = tempfile.TemporaryFile()
            pos = 0
            while pos <= MAX_UNPACKED:
                data = await f.read(READ_SIZE, pos)
                if not data:
                    break
                copy.write(data)
                pos += len(data)
        except asyncssh.SFTPError:
            if copy is not None:
                copy.close()
            continue
        finally:
            try:
                await f.close()
            except (OSError, asyncssh.Error):
                pass
        with copy:
            copy.seek(0)
            out = await asyncio.to_thread(unpack, copy,
                                          lambda h: ask.identity.matches(None, None, h))
        if out is None:
            continue
        size = os.fstat(out.fileno()).st_size
        if is_ours(ask, None, None, size, pread(out, 0, HEAD_BYTES), pread(out, lo, n)):
            return Unpacked(out)
        out.close()
    return None


class Unpacked:
    """A rotated log unpacked from its archive (a local temporary file) behind the calls the
    cursor's I/O makes of an SFTP file handle: read(n, pos), stat(), close()."""

    def __init__(self, f: Any) -> None:
        self.f = f

    async def read(self, n: int, pos: int) -> bytes:
        return pread(self.f, pos, n)

    async def stat(self) -> Attrs:
        st = os.fstat(self.f.fileno())
        return Attrs(st.st_size, st.st_mtime, asyncssh.FILEXFER_TYPE_REGULAR)

    async def close(self) -> None:
        self.f.close()


class _RemoteFile(CursorIO):
    """The cursor's I/O on one open SFTP handle (which still reads a file renamed away):
    reads by offset, stats, a look at the path, the remote grep, the poll pacing."""

    def __init__(self, source: SSHFileSource, conn: Any, sftp: Any, f: Any) -> None:
        super().__init__(source)
        self.conn = conn
        self.sftp = sftp
        self.f = f

    async def read(self, pos: int, n: int) -> bytes:
        data: bytes = await self.f.read(n, pos)
        return data

    async def size(self) -> int:
        if isinstance(self.f, ExecFile):
            return await self.f.size()
        return (await self.f.stat()).size or 0

    async def look(self, head: bool) -> PathFacts:
        """The path's size, and its first bytes when asked (SFTP has no inode to compare;
        the streamed reader tells dev, inode and our file's link count)."""
        # a pattern naming nothing now: the pattern itself, which names no file either
        path = await self.source.named(self.sftp) or self.source.target.path
        if isinstance(self.f, ExecFile):
            m, first = await self.f.look(HEAD_BYTES if head else 0, path)
            if not m["exists"]:
                return PathFacts(False, links=m.get("links"))
            self._wrote(path, m.get("dev"), m.get("ino"), m.get("mtime"))
            return PathFacts(True, m["dev"], m["ino"], m["size"], first if head else None)
        try:
            attrs = await self.sftp.stat(path)
            self._wrote(path, None, None, attrs.mtime)
            if not head:
                return PathFacts(True, size=attrs.size or 0)
            nf = await self.sftp.open(path, "rb")
        except asyncssh.SFTPNoSuchFile:
            return PathFacts(False)   # deleted: the handle is read on until a new file appears
        try:
            first = await nf.read(HEAD_BYTES, 0)
        finally:
            await nf.close()
        return PathFacts(True, size=attrs.size or 0, head=first)

    def _wrote(self, path: str, dev: int | None, ino: int | None, mtime: float | None) -> None:
        """A look's fresh mtime of the file a pattern names (NewestFile.wrote)."""
        if self.source.newest is not None and mtime is not None:
            self.source.newest.wrote(Match(posixpath.basename(path), dev, ino,
                                           int(mtime * 1_000_000_000)))

    async def locate(self) -> tuple[int, int]:
        return await find_start(self.source, self.conn, self.f)

    async def find_rotated(self, ask: FindRotated) -> tuple[bool, list[tuple[int, int, int]]]:
        """Our file among the rotated names beside the path, by its head, its size and the
        bytes before our offset (and dev:inode, which only the streamed reader tells); the
        rotated files written after it are held (streamed reader only: by dev:inode)."""
        newest = self.source.newest
        try:
            names, beside = await self._rotated_candidates(matches=not ask.copy)
        except asyncssh.SFTPError:
            return False, []
        lo, n = before_range(ask)
        cands: dict[str, tuple[Any, Any]] = {}
        ours: Any = None
        for name in dict.fromkeys(names):
            try:
                cand = await self.sftp.open(name, "rb")
            except asyncssh.SFTPError:
                continue
            try:
                attrs = await cand.stat()
                cands[name] = (cand, attrs)
                if ours is None and is_ours(
                        ask, getattr(attrs, "dev", None), getattr(attrs, "ino", None),
                        attrs.size or 0, await cand.read(HEAD_BYTES, 0),
                        await cand.read(n, lo) if n else b""):
                    ours = name
            except asyncssh.SFTPError:
                pass
        held: list[tuple[int, int, int]] = []
        if ours is not None:
            self.f, attrs = cands.pop(ours)   # read from now on; _follow closes both handles
        if ours is not None and not ask.copy:    # (a copy: the truncated log is read next)
            if newest is not None:
                newest.read(Match(posixpath.basename(ours), getattr(attrs, "dev", None),
                                  getattr(attrs, "ino", None),
                                  int((attrs.mtime or 0) * 1_000_000_000)))
            later = later_files(attrs.mtime, [(k, getattr(a, "dev", None), a.mtime)
                                              for k, (_, a) in cands.items()])
            for name in later:
                cand, a = cands.pop(name)
                self.source._held.append(cand)
                self.source._held_path[id(cand)] = name
                held.append((a.dev, a.ino, a.size or 0))
        for cand, _ in cands.values():
            try:
                await cand.close()
            except (OSError, asyncssh.Error):
                pass
        if ours is None and beside:       # compressed at its rotation (archive.py)
            unpacked = await find_unpacked(self.sftp, beside, ask)
            if unpacked is not None:
                self.f = unpacked                 # read from now on; _follow closes it
                return True, []
        return ours is not None, held

    async def _rotated_candidates(self, matches: bool = True
                                  ) -> tuple[list[str], list[tuple[str, str]]]:
        """The paths FindRotated looks at (a pattern's newest matches but the one opened,
        unless not `matches`, then the rotated names beside the log and beside the file it
        links to), and those places (`remote_beside`)."""
        path, newest = self.source.target.path, self.source.newest
        parent = posixpath.dirname(path) or "/"
        opened_now = newest.reading if newest is not None else None
        named = path if newest is None else \
            (posixpath.join(parent, opened_now.name) if opened_now is not None and
             opened_now.name else None)
        beside = await remote_beside(self.sftp, named)
        names: list[str] = []
        if newest is not None and matches:     # the one opened is read after ours
            found = await remote_matches(self.sftp, path, newest)
            names = [posixpath.join(parent, m.name) for m in newest.newest_first(found)
                     if opened_now is None or m.key != opened_now.key]
        for directory, base in beside:
            names += [posixpath.join(directory, n) for n in rotated_names(
                base, [str(x) for x in await self.sftp.listdir(directory)])]
        return names, beside

    async def hold(self, ask: Hold) -> tuple[bool, int]:
        """Open the file the path names and keep it, if it is still `ask`'s (only asked
        where a look told dev:inode: the streamed reader); renamed away since the look (a
        rotation between the look and this, several round trips apart), among the rotated
        names beside the path: before, the hold failed and that file was never read (one
        file of a log renamed every 3 s lost, unsaid, after a restart under an SSH outage)."""
        try:
            named = await self.source.named(self.sftp)
            got = await self._open_if(named, ask) if named is not None else None
            if got is None:
                names, _ = await self._rotated_candidates(matches=False)
                for name in names:
                    if (got := await self._open_if(name, ask)) is not None:
                        named = name
                        break
        except asyncssh.SFTPError:
            return False, 0
        if got is None:
            return False, 0
        f, size = got
        self.source._held.append(f)
        self.source._held_path[id(f)] = named
        return True, size

    async def _open_if(self, name: str, ask: Hold) -> tuple[Any, int] | None:
        """`name` opened (the handle and its size) if it is `ask`'s file (dev:inode)."""
        try:
            f = await self.sftp.open(name, "rb")
        except asyncssh.SFTPNoSuchFile:
            return None
        attrs = await f.stat()
        if (getattr(attrs, "dev", None), getattr(attrs, "ino", None)) == (ask.dev, ask.ino):
            return f, attrs.size or 0
        await f.close()
        return None

    async def wait(self, idle: float, within: float | None = None) -> None:
        if isinstance(self.f, ExecFile) and not self.f.closed:
            # pushed: wake when the file grows, and at least every IDENTITY_EVERY (the
            # cursor's look and verify are due then)
            cursor = self.source.cursor
            if not self.f.live and cursor.offset is not None:
                self.f.watch_from(cursor.offset - len(cursor.last), cursor.offset)
            self.source._streaming = self.f
            try:
                await self.f.wait(IDENTITY_EVERY if within is None else
                                  min(IDENTITY_EVERY, within))
            finally:
                self.source._streaming = None
            return
        opts = self.source.opts
        interval = opts.idle_poll_interval if idle > 10 else opts.poll_interval
        await self.source._sleep(interval if within is None else min(interval, within))
