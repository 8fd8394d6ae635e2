"""The server's own HTTP endpoint, probed where the log is.

A log that says "ready" is not a server that answers: SGLang's `/health` kept answering for
an hour after its scheduler died, `/v1/models` answers before warmup ends.  So the target's
server is asked directly, every `interval`, on the paths its pack names (`probe: paths:` in
rules/*.yaml), at the address its log printed (`Uvicorn running on http://0.0.0.0:30000`,
`Starting vLLM server on http://...`, or `host` / `port` of its arguments).

For an ssh:// target the request goes through the target's own SSH connection (an asyncssh
direct-tcpip channel to that host:port, as seen from the node): no route from the watcher
to the server's port is needed, and a port bound to 127.0.0.1 on the node is reachable.  A
local target is probed directly.  The HTTP is one `GET` with `Connection: close`; only the
status line is read (bounded), so a hostile or stuck endpoint costs one timeout.

The probe asks only the server (issue 29: log text is data).  An address from the log is a
hint for the port only: the host asked is the target's own (loopback, or the ssh:// target's
host name as written; a log naming any other host is probed on loopback at its port), and
the paths are the pack's (`probe: paths:`), never a path the log names.  Only the operator's
`probe: url:` names another host or path.  What answers is never shown: a status code, or
"not HTTP (N bytes)"; none of its bytes reach /api/status, the page or an alert.

A server started with an API key (`--api-key`, `VLLM_API_KEY`) answers 401 on `/v1/...`
without one; its `/health` stays open (SGLang's `decide_request_auth`, vLLM's
`AuthenticationMiddleware`: both let `/health` through).  The probe has no key and asks for
none: a 401 or 403 is the server answering at that path (`ANSWERED_WITHOUT_KEY`), so a
production server with a key is not paged `unreachable` forever, as long as one path
answered 2xx (its open `/health`): a key asked on every path is a gateway's word, not the
engine's (a proxy answers 401 for a dead backend too).

Pure parts (`parse_probe_config`, `endpoint_of`, `status_of`) are tested without I/O;
`Prober` is the asyncio edge.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import urlsplit

import asyncssh

from .. import clock
from ..units import parse_duration, parse_switch

STATUS_LINE_MAX = 256          # bytes of the answer read: the status line is all we need
_KEYS = ("url", "interval", "timeout", "fail_after")
WILDCARD_HOSTS = {"", "0.0.0.0", "::", "[::]", "*"}
# the arguments that make SGLang's and vLLM's uvicorn serve https (`--ssl-certfile`)
TLS_ARGS = ("ssl_certfile",)
# a path that asks for a key (the server's API key) answered: the server is there
ANSWERED_WITHOUT_KEY = {401: "needs a key", 403: "refused without a key"}


@dataclass(frozen=True)
class ProbeConfig:
    """A target's `probe:`: `auto` (default: the address the log names, the pack's paths),
    `false`, or a mapping {url, interval, timeout, fail_after}.  `url` (http://host:port/path,
    as seen from the node) replaces what the log says; its path is the one path probed."""

    mode: str = "auto"            # auto | off
    url: str | None = None
    interval: float = 10.0
    timeout: float = 5.0
    fail_after: float = 30.0      # the log says ready and the probe failed this long: alert

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "url": self.url, "interval": self.interval,
                "timeout": self.timeout, "fail_after": self.fail_after}


def parse_probe_config(value: Any, *, where: str = "probe") -> ProbeConfig:
    """A target's `probe:` value -> ProbeConfig; ValueError("KEY: message") when it is wrong."""
    switch = parse_switch(value, where=where, keys=_KEYS,
                          example="url, interval: 10s, timeout: 5s, fail_after: 30s",
                          short="url, interval, timeout, fail_after")
    if isinstance(switch, str):
        return ProbeConfig(mode="off") if switch == "off" else ProbeConfig()
    value = switch
    url = value.get("url")
    if url is not None:
        if not isinstance(url, str) or endpoint_of(url) is None:
            raise ValueError(f"{where}.url: expected http://HOST:PORT/PATH (the address as "
                             f"seen from the node), got {url!r}")
    durations: dict[str, float] = {}
    for key, default, low in (("interval", 10.0, 0.2), ("timeout", 5.0, 0.1),
                              ("fail_after", 30.0, 0.0)):
        raw = value.get(key)
        if raw is None:
            durations[key] = default
            continue
        try:
            d = parse_duration(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{where}.{key}: not a duration: {raw!r} (use e.g. 10s)") from None
        if d < low:
            raise ValueError(f"{where}.{key}: at least {low:g}s")
        durations[key] = d
    return ProbeConfig(url=url, **durations)


@dataclass(frozen=True)
class Endpoint:
    """Where to connect (as seen from the node) and the path to ask."""

    host: str
    port: int
    path: str = ""
    tls: bool = False     # https: the server's own certificate, not checked (see `http_get`)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _connect_host(host: str) -> str:
    """A server listening on every address answers on loopback."""
    host = host.strip()
    if host in WILDCARD_HOSTS:
        return "127.0.0.1"
    return host.strip("[]")


_HOSTPORT = re.compile(r"^\[?(?P<host>[^\[\]\s/]*?)\]?:(?P<port>\d{1,5})$")


def endpoint_of(url: str) -> Endpoint | None:
    """`http://0.0.0.0:8000`, `https://[::]:30000/x`, `0.0.0.0:30000` -> an Endpoint (None for
    unix sockets and what is not an address)."""
    url = url.strip().rstrip(".,)")
    if not url or url.startswith("unix:"):
        return None
    if "://" not in url:
        m = _HOSTPORT.match(url)
        if m is None:
            return None
        port = int(m.group("port"))
        return Endpoint(_connect_host(m.group("host")), port) if 0 < port < 65536 else None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https"):
        return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    host = parts.hostname or ""
    return Endpoint(_connect_host(host), port, parts.path if parts.path not in ("", "/") else "",
                    tls=parts.scheme == "https")


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def server_only(ep: Endpoint, own_hosts: tuple[str, ...] = ()) -> Endpoint:
    """What a probe may ask of an address the log gave: the target's own host (loopback, or
    one of `own_hosts`: the ssh:// target's host) at the log's port, and no path (the pack's
    paths are asked).  Any other host in the log is a hint for the port only."""
    host = ep.host if ep.host.lower() in LOOPBACK_HOSTS + tuple(h.lower() for h in own_hosts) \
        else "127.0.0.1"
    return Endpoint(host, ep.port, tls=ep.tls)


def endpoint_from_args(args: Mapping[str, Any]) -> Endpoint | None:
    """The server's `host` / `port` arguments (SGLang's server_args, vLLM's args)."""
    port = args.get("port")
    try:
        port = int(port) if port is not None and not isinstance(port, bool) else None
    except (TypeError, ValueError):
        return None
    if port is None or not 0 < port < 65536:
        return None
    host = args.get("host")
    tls = any(isinstance(args.get(k), str) and args.get(k) for k in TLS_ARGS)
    return Endpoint(_connect_host(host if isinstance(host, str) else ""), port, tls=tls)


def server_endpoint(said: str | None, args: Mapping[str, Any]) -> Endpoint | None:
    """Where the server listens by its log: the address it printed, else its arguments; https
    when the address says so, or (an address without a scheme: `Uvicorn running on
    0.0.0.0:30000 with 8 SO_REUSEPORT workers`) when its arguments do."""
    from_args = endpoint_from_args(args)
    ep = endpoint_of(said) if said else None
    if ep is None:
        return from_args
    if "://" not in said and from_args is not None and from_args.tls:   # type: ignore[operator]
        return Endpoint(ep.host, ep.port, ep.path, tls=True)
    return ep


def status_of(head: bytes) -> int | None:
    """The status code of an HTTP/1.x answer's first line (`HTTP/1.1 200 OK` -> 200)."""
    m = re.match(rb"HTTP/\d(?:\.\d)? (\d{3})\b", head)
    return int(m.group(1)) if m else None


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter] | tuple[Any, Any]
Connect = Callable[[str, int], Awaitable[Streams]]


class ProbeUnavailable(Exception):
    """The probe could not be made (the SSH connection to the node is down): neither up nor
    down, and no alert.  `lasting`: it cannot be made from here at all (the node's sshd
    forbids forwarding), so the log's word is all there is."""

    def __init__(self, why: str, lasting: bool = False) -> None:
        super().__init__(why)
        self.lasting = lasting


async def http_get(connect: Connect, ep: Endpoint, path: str, timeout: float) -> int:
    """One GET; the status code.  Raises OSError-like errors when the port refuses.

    An https endpoint (a server started with `--ssl-certfile`) is asked over TLS on the same
    streams, local or an SSH channel alike (`TlsStreams`).  Its certificate is not checked:
    the probe asks the server on its own port whether it answers, and sends nothing secret."""
    async def go() -> int:
        reader, writer = await connect(ep.host, ep.port)
        if ep.tls:
            reader = writer = await TlsStreams.start(reader, writer)
        try:
            host = ep.address
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: logwatch-probe\r\n"
                         f"Accept: */*\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = b""
            while b"\n" not in head and len(head) < STATUS_LINE_MAX:
                chunk = await reader.read(STATUS_LINE_MAX - len(head))
                if not chunk:
                    break
                head += chunk if isinstance(chunk, bytes) else chunk.encode("latin-1")
            code = status_of(head)
            if code is None:      # its bytes are never shown: only how many there were
                raise ConnectionError(f"not HTTP ({len(head)} bytes)")
            return code
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass
    return await asyncio.wait_for(go(), timeout)


class TlsStreams:
    """TLS over a connection's reader and writer (`ssl.SSLObject` on memory BIOs), so the
    same code asks an https server through a local socket or an SSH direct-tcpip channel
    (asyncssh's streams cannot start TLS themselves).  Reads and writes as the writer and
    reader of `http_get` do."""

    def __init__(self, reader: Any, writer: Any) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._in, self._out)
        self._reader, self._writer = reader, writer

    @classmethod
    async def start(cls, reader: Any, writer: Any) -> "TlsStreams":
        streams = cls(reader, writer)
        while True:
            try:
                streams._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await streams._send()
                if not await streams._receive():
                    raise ConnectionError("closed during the TLS handshake") from None
            except ssl.SSLError as e:
                raise ConnectionError(f"TLS: {e.reason or e}") from None
        await streams._send()
        return streams

    async def _send(self) -> None:
        data = self._out.read()
        if data:
            self._writer.write(data)
            await self._writer.drain()

    async def _receive(self) -> bool:
        chunk = await self._reader.read(16384)
        if not chunk:
            self._in.write_eof()
            return False
        self._in.write(chunk if isinstance(chunk, bytes) else chunk.encode("latin-1"))
        return True

    def write(self, data: bytes) -> None:
        self._tls.write(data)

    async def drain(self) -> None:
        await self._send()

    async def read(self, n: int) -> bytes:
        while True:
            try:
                return self._tls.read(n)
            except ssl.SSLWantReadError:
                if not await self._receive():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    def close(self) -> None:
        self._writer.close()


@dataclass
class ProbeState:
    """What the probes said, as the view, the metrics and the alerts read it."""

    url: str = ""                      # what was probed last (host:port + paths)
    up: bool | None = None             # None: not probed yet, no address, or unavailable
    status: str = ""                   # "200 /health, 200 /v1/models" / "connection refused"
    duration: float | None = None      # seconds the last probe took (all its paths)
    last_at: float | None = None
    ok_at: float | None = None         # the last success
    ok_startup: str | None = None      # the startup the last success belongs to
    failing_since: float | None = None
    outage: int = 0                    # failure streaks so far (keys the unreachable alert)
    probes: int = 0
    note: str = ""                     # why there is no probe (no address in the log yet ...)
    blocked: bool = False              # it cannot be made from here (ProbeUnavailable.lasting)

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "up": self.up, "status": self.status,
                "duration": self.duration, "last_at": self.last_at, "ok_at": self.ok_at,
                "ok_startup": self.ok_startup, "failing_since": self.failing_since,
                "outage": self.outage, "probes": self.probes, "note": self.note,
                "blocked": self.blocked}


@dataclass
class ProbePlan:
    """What the target's log says to probe now (the runner builds it)."""

    endpoint: Endpoint | None
    paths: tuple[str, ...]
    startup: str | None = None


class Prober:
    """Probes one target's server every `cfg.interval`; calls `on_result` after each probe."""

    def __init__(self, cfg: ProbeConfig, connect: Connect, plan: Callable[[], ProbePlan],
                 on_result: Callable[["Prober"], None] | None = None,
                 own_hosts: tuple[str, ...] = ()) -> None:
        self.cfg = cfg
        self.own_hosts = own_hosts     # the target's own host names (ssh://HOST/...)
        self.connect = connect
        self.plan = plan
        self.on_result = on_result or (lambda p: None)
        self.state = ProbeState(note="waiting for the server's address in the log")
        self.task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopped = False

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="probe")

    def poke(self) -> None:
        """Probe now (the log just named the address, or said ready)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop probing.  The flag, not only the cancellation, ends the loop: Python 3.11's
        `wait_for` can swallow a cancel that meets a wake-up, and stop must not hang."""
        self._stopped = True
        self._wake.set()
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=self.cfg.timeout + 1.0)

    async def _run(self) -> None:
        while not self._stopped:
            try:
                await asyncio.wait_for(self._wake.wait(), self.cfg.interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if self._stopped:
                return
            plan = self.plan()
            if plan.endpoint is None:
                continue
            await self.probe_once(plan)
            self.on_result(self)

    async def probe_once(self, plan: ProbePlan) -> ProbeState:
        st = self.state
        assert plan.endpoint is not None
        ep = plan.endpoint
        if self.cfg.url:            # the operator's own address and path
            paths = (ep.path,) if ep.path else (plan.paths or ("/health",))
        else:                       # the log's: its port, the target's host, the pack's paths
            ep = server_only(ep, self.own_hosts)
            paths = plan.paths or ("/health",)
        st.url = f"{ep.scheme}://{ep.address}" + ("" if len(paths) > 1 else paths[0])
        st.note, st.blocked = "", False
        now = clock.now()
        t0 = time.monotonic()
        codes: list[str] = []
        ok: bool | None = True
        served = False          # a path answered 2xx: a key asked on every path is a gateway's
        for path in paths:
            left = max(self.cfg.timeout - (time.monotonic() - t0), 0.05)
            try:
                code = await http_get(self.connect, ep, path, left)
            except ProbeUnavailable as e:
                ok, codes, st.blocked = None, [str(e)], e.lasting
                break
            except asyncio.TimeoutError:
                ok = False
                codes.append(f"no answer in {self.cfg.timeout:g}s on {path}")
                break
            except (OSError, ConnectionError, EOFError) as e:
                ok = False
                codes.append(_short_error(e) + f" ({ep.address})")
                break
            except Exception as e:  # noqa: BLE001 - asyncssh channel errors and the like
                ok = False
                codes.append(_short_error(e) + f" ({ep.address})")
                break
            codes.append(path_status(code, path))
            served = served or 200 <= code < 300
            if not answering(code):
                ok = False
        if ok and not served:
            ok = False          # (401 on /health too: not the engine's open /health)
        st.duration = time.monotonic() - t0
        st.last_at = now
        st.status = ", ".join(codes)
        st.probes += 1
        if ok is None:
            st.up = None
            return st
        if ok:
            st.ok_at, st.ok_startup = now, plan.startup
            st.failing_since = None
        elif st.failing_since is None:
            st.failing_since = now
            st.outage += 1
        st.up = ok
        return st

    def to_dict(self) -> dict[str, Any]:
        return {**self.state.to_dict(), "interval": self.cfg.interval,
                "fail_after": self.cfg.fail_after}


def answering(code: int) -> bool:
    """Does this status say the server answers at that path: 2xx, or a request for the key
    it was started with (the probe carries none)?"""
    return 200 <= code < 300 or code in ANSWERED_WITHOUT_KEY


def path_status(code: int, path: str) -> str:
    """`200 /health`; `401 /v1/models (needs a key)`."""
    why = ANSWERED_WITHOUT_KEY.get(code)
    return f"{code} {path}" + (f" ({why})" if why else "")


def _short_error(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if isinstance(e, ConnectionRefusedError) or "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0][:120]


def local_connect() -> Connect:
    async def connect(host: str, port: int) -> Streams:
        return await asyncio.open_connection(host, port)
    return connect


def ssh_connect(pool: Any, target: Any, opts: Any) -> Connect:
    """Through the target's own SSH connection: a direct-tcpip channel to host:port on the
    node (the pool's shared connection; a broken one makes the probe unavailable)."""
    async def connect(host: str, port: int) -> Streams:
        try:
            conn, _ = await pool.get(target, opts)
        except Exception as e:  # noqa: BLE001 - the log's source reports SSH trouble
            raise ProbeUnavailable(f"no SSH connection to {target.host}: {_short_error(e)}") \
                from None
        try:
            return await conn.open_connection(host, port)
        except asyncssh.ChannelOpenError as e:
            if e.code != asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
                raise                # the node could not connect: the server's answer
            # sshd's policy (AllowTcpForwarding no, PermitOpen): says nothing of the server
            raise ProbeUnavailable(
                f"the sshd of {target.host} forbids port forwarding, so {host}:{port} "
                "cannot be asked through SSH (allow it in its sshd_config: "
                f"`AllowTcpForwarding local`, or `PermitOpen {host}:{port}`)",
                lasting=True) from None
    return connect
