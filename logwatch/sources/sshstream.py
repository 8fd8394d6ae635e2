"""Remote file reads over one SSH exec channel per host, with the growth of followed files
pushed as it is written (the SSH source's preferred transport; SFTP is its fallback).

Polling a log over SFTP costs a stat and a read every poll interval per growing log, all of
it answered through asyncssh's SFTP client: at a few hundred logs per host that is most of
a core and the reads fall behind.  Here one small reader runs on the node, `python3 -c`
(sent with the command: nothing is installed there), on one exec session per connection
(`MaxSessions` counts one), and:

* answers requests from the daemon, one JSON line each on its stdin: open (a handle, with
  dev / inode / size / mtime / type / link count), fstat, stat, read at an offset, list a
  directory, look (what the path names now, our handle's link count, optionally the head),
  close.  Replies are framed `R <rid> <json-len> <data-len>\\n` + JSON + bytes; errors carry
  the errno name and become the SFTP exceptions the SSH source already handles
  (`SFTPNoSuchFile`, `SFTPPermissionDenied`, `SFTPFailure`), so the source code that drives
  the cursor is the same for both transports.  `grep` (where a log met for the first time
  has its latest startup) is a request too: the reader starts `grep -a -b -n -F` itself (no
  login shell, so no ~/.bashrc per target; at most 4 at once) and answers its last lines.
* follows "watched" handles: every period (20 ms for one watch, growing with their number
  up to 500 ms for 500: a frame per file per period, not per line; each frame costs the
  daemon a cursor cycle and a pipeline pass whatever its size, so at 500 logs 0.5 s took
  it from ~0.61 to ~0.51 of a core with lateness p99 0.45-0.61 s, within the 1 s promise),
  it fstats each watched handle and pushes what was appended since the watch's position,
  `D <h> <gen> <pos> <size> <len>\\n` + bytes.  Before each read it re-reads the TAIL_BYTES
  before the position and compares them with what it pushed last; a file that shrank or
  whose bytes changed gets a `T <h> <gen> <size>` and is no longer pushed: the cursor
  (sources/cursor.py) then finds the truncation with its own reads, as over SFTP.

The daemon side (`ExecFS`, `ExecFile`) keeps per handle the bytes pushed and not yet read.
The cursor still runs the whole follow algorithm: the stream only answers its steady-state
"what was appended" (size = the end of the pushed bytes, a read past what it was already
given = those bytes; the wait ends when a frame comes).  Everything else is a real request
to the node: the verify of the bytes before the offset, the look at the path (now with dev
and inode: rotation is told by identity, not only by head), the head, a drain past the pushed
bytes, the search for a rotated file.  A watch is re-established at the cursor's offset
whenever it was stopped (truncation, a read beyond the pushed bytes, more than MAX_BUFFERED
waiting: the backlog is then read by requests, as over SFTP).

Losing the channel (the reader killed, the connection dropped, sshd restarted, a request
unanswered for REQUEST_TIMEOUT) fails every pending request with `StreamLost`; the source
reconnects like after any lost connection and the cursor resumes at its exact offset (or
finds the rotated file by dev:inode).  No `python3` on the node (the command exits without
the greeting): the pool uses SFTP for that host.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import time
import zlib
from dataclasses import dataclass
from typing import Any

import asyncssh

from ..limits import REFUSED
from .base import TAIL_BYTES

GREETING = b"H logwatch-stream 1\n"
MARKER = "logwatch-stream"   # the reader's argv[1]: what `ps` shows on the node
START_TIMEOUT = 20.0      # seconds for the reader to greet (python start-up on a busy node)
REQUEST_TIMEOUT = 60.0    # a request unanswered this long: the channel is given up
MAX_BUFFERED = 4 << 20    # pushed bytes waiting per handle before its watch is paused
# Bounds on what the node sends (issue 29: a compromised node must not exhaust the daemon
# that watches every node).  An honest frame is at most a 4 MiB read (ssh.py's largest) or
# a 256 KiB push, plus its JSON; a header line is a few dozen bytes, a login script's line
# before the greeting rarely a few hundred.  More than that: the channel and its connection
# are dropped and counted (`limits.REFUSED`, logwatch_refused_total{what="ssh_frame"}).
MAX_FRAME = 8 << 20       # bytes of one frame's JSON and data together
MAX_LINE = 64 << 10       # bytes of a header line (or a line before the greeting)

# The reader on the node.  Python 3.5+, stdlib only; exits at EOF on its stdin.
REMOTE = r'''
import json, os, select, stat, subprocess, sys, time
TAIL = %(tail)d
MATCHES = 1000
CHUNK = 256 * 1024
GREPS = 4
fds, watches = {}, {}
greps, grep_queue = {}, []
out = []
ids = [0]
def send(b):
    out.append(b)
def flush():
    data = b"".join(out)
    del out[:]
    while data:
        n = os.write(1, data)
        data = data[n:]
def meta(st, **kw):
    kw.update(dev=st.st_dev, ino=st.st_ino, size=st.st_size, mtime=st.st_mtime,
              nlink=st.st_nlink, dir=stat.S_ISDIR(st.st_mode), now=time.time())
    return kw
def reply(rid, obj, data=b""):
    j = json.dumps(obj).encode()
    send(("R %%d %%d %%d\n" %% (rid, len(j), len(data))).encode() + j + data)
def op_open(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    ids[0] += 1
    h = ids[0]
    fds[h] = fd
    return meta(st, h=h), b""
def op_fstat(h):
    return meta(os.fstat(fds[h])), b""
def op_stat(path):
    return meta(os.stat(path)), b""
def op_read(h, pos, n):
    return {}, os.pread(fds[h], n, pos)
def op_list(path):
    return {"names": [os.fsdecode(n) for n in os.listdir(os.fsencode(path))]}, b""
def op_real(path):
    return {"path": os.path.realpath(path)}, b""
def op_home():
    try:
        import pwd
        home = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        home = os.path.expanduser("~")
    return {"path": os.path.realpath(home)}, b""
def op_match(path, pattern):
    import fnmatch
    files = []
    for n in os.listdir(path):
        if (pattern.startswith(".") or not n.startswith(".")) and fnmatch.fnmatchcase(n, pattern):
            try:
                st = os.stat(os.path.join(path, n))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                files.append([n, meta(st)])
    files.sort(key=lambda f: f[1]["mtime"], reverse=True)
    return {"files": files[:MATCHES]}, b""
def op_look(h, path, head):
    links = os.fstat(fds[h]).st_nlink
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return {"exists": False, "links": links}, b""
    try:
        st = os.fstat(fd)
        first = os.pread(fd, head, 0) if head else b""
    finally:
        os.close(fd)
    return meta(st, exists=True, links=links), first
def op_close(h):
    watches.pop(h, None)
    os.close(fds.pop(h))
    return {}, b""
def op_watch(h, gen, pos):
    if h in fds:
        watches[h] = [gen, pos, None]
    else:
        stop(h, gen, -1)
    return None
def op_unwatch(h):
    watches.pop(h, None)
    return None
def grep_start(rid, path, lits, keep):
    if len(greps) >= GREPS:
        grep_queue.append((rid, path, lits, keep))
        return
    env = dict(os.environ, LC_ALL="C")
    args = ["grep", "-a", "-b", "-n", "-F"]
    for lit in lits:
        args += ["-e", lit]
    try:
        p = subprocess.Popen(args + ["--", path], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    except OSError as e:
        import errno
        reply(rid, {"err": errno.errorcode.get(e.errno, "EIO"), "msg": str(e)})
        return
    greps[p.stdout.fileno()] = [p, rid, keep, b"", []]
def grep_read(fd):
    g = greps[fd]
    data = os.read(fd, 1 << 16)
    if data:
        lines = (g[3] + data).split(b"\n")
        g[3] = lines.pop()
        g[4] = (g[4] + lines)[-g[2]:]
        return
    del greps[fd]
    p = g[0]
    p.stdout.close()
    rc = p.wait()
    if g[3]:
        g[4] = (g[4] + [g[3]])[-g[2]:]
    reply(g[1], {"status": rc}, b"\n".join(g[4]))
    if grep_queue:
        grep_start(*grep_queue.pop(0))
OPS = {"open": op_open, "fstat": op_fstat, "stat": op_stat, "read": op_read, "list": op_list,
       "match": op_match, "real": op_real, "home": op_home, "look": op_look, "close": op_close, "watch": op_watch, "unwatch": op_unwatch}
def handle(line):
    req = json.loads(line.decode())
    rid, op, args = req[0], req[1], req[2:]
    if op == "grep":
        grep_start(rid, *args)
        return
    try:
        res = OPS[op](*args)
    except OSError as e:
        import errno
        if rid >= 0:
            reply(rid, {"err": errno.errorcode.get(e.errno, "EIO"), "msg": str(e)})
        return
    except (KeyError, ValueError, TypeError) as e:
        if rid >= 0:
            reply(rid, {"err": "EBADF", "msg": repr(e)})
        return
    if res is not None and rid >= 0:
        reply(rid, res[0], res[1])
def stop(h, gen, size):
    watches.pop(h, None)
    send(("T %%d %%d %%d\n" %% (h, gen, size)).encode())
def scan():
    for h, w in list(watches.items()):
        gen, pos, last = w
        fd = fds[h]
        try:
            size = os.fstat(fd).st_size
            if size == pos:
                continue
            if size < pos:
                stop(h, gen, size)
                continue
            back = len(last) if last is not None else 0
            data = os.pread(fd, back + min(size - pos, CHUNK), pos - back)
        except OSError:
            stop(h, gen, -1)
            continue
        if last is not None and data[:back] != last:
            stop(h, gen, size)
            continue
        chunk = data[back:]
        if not chunk:
            continue
        send(("D %%d %%d %%d %%d %%d\n" %% (h, gen, pos, size, len(chunk))).encode() + chunk)
        w[1] = pos + len(chunk)
        w[2] = ((last or b"") + chunk[-TAIL:])[-TAIL:]
def main():
    send(%(greeting)r)
    flush()
    buf = b""
    due = time.monotonic()
    while True:
        period = min(0.5, max(0.02, 0.001 * len(watches)))
        timeout = max(0.0, due - time.monotonic()) if watches else None
        ready = select.select([0] + list(greps), [], [], timeout)[0]
        for fd in ready:
            if fd != 0 and fd in greps:
                grep_read(fd)
        if 0 in ready:
            data = os.read(0, 1 << 16)
            if not data:
                return
            buf += data
            lines = buf.split(b"\n")
            buf = lines.pop()
            for line in lines:
                if line:
                    handle(line)
        now = time.monotonic()
        if watches and now >= due:
            scan()
            due = now + period
        elif not watches:
            due = now
        if out:
            flush()
try:
    main()
except (BrokenPipeError, KeyboardInterrupt):
    pass
''' % {"tail": TAIL_BYTES, "greeting": GREETING}


def remote_command(python: str = "python3") -> str:
    """The command line that starts the reader: no newline, nothing a shell would expand
    (it also runs under a non-POSIX login shell)."""
    packed = base64.b64encode(zlib.compress(REMOTE.encode(), 9)).decode()
    code = f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{packed}')))"
    return f"{python} -c {shlex.quote(code)} {MARKER}"


async def bounded_run(conn: Any, cmd: str, limit: int, timeout: float,
                      stdin: Any = asyncssh.PIPE) -> tuple[bytes, int | None]:
    """Run `cmd` on the node and read at most `limit` bytes of its output (asyncssh's
    `conn.run` keeps all of it: a node can send any amount); more than that is refused and
    counted (`limits.REFUSED`, what="ssh_output") and the command's channel closed.
    `stdin=asyncssh.DEVNULL`: the command reads an end at once (an account whose forced
    command is `internal-sftp` ends then, not at the timeout).
    Returns (stdout, exit status); raises asyncio.TimeoutError after `timeout`."""
    proc = await asyncio.wait_for(conn.create_process(cmd, encoding=None, stdin=stdin,
                                                      stderr=asyncssh.DEVNULL), timeout)
    out = bytearray()
    try:
        async def read_all() -> None:
            while True:
                chunk = await proc.stdout.read(1 << 16)
                if not chunk:
                    return
                out.extend(chunk)
                if len(out) > limit:
                    REFUSED.count("ssh_output")
                    raise OSError(f"refused: more than {limit >> 10} KiB of output")
        await asyncio.wait_for(read_all(), timeout)
        await asyncio.wait_for(proc.wait_closed(), timeout)
    finally:
        proc.close()
    return bytes(out), proc.exit_status


class StreamLost(OSError):
    """The exec channel of the reader ended (or stopped answering): the caller reconnects."""


class NoStream(Exception):
    """The reader did not start on the node (no python3 there, or it failed): use SFTP.
    `final`: it ended without starting (not merely slow to start): do not try it again."""

    def __init__(self, why: str, final: bool = True) -> None:
        super().__init__(why)
        self.final = final


@dataclass(frozen=True, slots=True)
class Attrs:
    """What a stat tells, named like asyncssh's SFTPAttrs where they overlap.  `skew`: this
    machine's wall clock less the node's at the stat (a node's clock minutes behind made a
    log written a second ago 'silent for 6 minutes: server probably dead' at attach)."""

    size: int
    mtime: float | None
    type: int
    dev: int | None = None
    ino: int | None = None
    nlink: int | None = None
    skew: float = 0.0


def _attrs(m: dict[str, Any]) -> Attrs:
    kind = asyncssh.FILEXFER_TYPE_DIRECTORY if m.get("dir") else asyncssh.FILEXFER_TYPE_REGULAR
    node_now = m.get("now")
    skew = time.time() - node_now if isinstance(node_now, (int, float)) else 0.0
    return Attrs(int(m["size"]), m.get("mtime"), kind, m.get("dev"), m.get("ino"), m.get("nlink"),
                 skew)


def _error(m: dict[str, Any]) -> Exception:
    err, msg = m.get("err", "EIO"), str(m.get("msg", ""))
    if err == "ENOENT" or err == "ENOTDIR":
        return asyncssh.SFTPNoSuchFile(msg)
    if err in ("EACCES", "EPERM"):
        return asyncssh.SFTPPermissionDenied(msg)
    return asyncssh.SFTPFailure(f"{err}: {msg}")


class _Session(asyncssh.SSHClientSession):  # type: ignore[misc]
    def __init__(self, fs: "ExecFS") -> None:
        self.fs = fs

    def data_received(self, data: bytes, datatype: Any) -> None:
        if datatype is None:
            self.fs._feed(data)
        else:
            self.fs.stderr = (self.fs.stderr + data)[-2000:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fs._lost(exc)


class _TooLarge(Exception):
    """A frame larger than the protocol allows (the text says how large)."""


def _data_frame(files: dict[int, Any], buf: bytearray, nl: int, head: list[bytes]) -> int | None:
    """`D id pos dev ino n` + n bytes: a file's data.  Where the next frame starts (None:
    not all here yet)."""
    n = int(head[5])
    if not 0 <= n <= MAX_FRAME:
        raise _TooLarge(f"a frame of {n} bytes (at most {MAX_FRAME >> 20} MiB)")
    if len(buf) < nl + 1 + n:
        return None
    f = files.get(int(head[1]))
    if f is not None:
        f._push(int(head[2]), int(head[3]), int(head[4]), bytes(buf[nl + 1:nl + 1 + n]))
    return nl + 1 + n


def _reply_frame(pending: dict[int, Any], buf: bytearray, nl: int,
                 head: list[bytes]) -> int | None:
    """`R id jn dn` + jn bytes of JSON + dn bytes of data: the reply to a request."""
    jn, dn = int(head[2]), int(head[3])
    if not (0 <= jn and 0 <= dn and jn + dn <= MAX_FRAME):
        raise _TooLarge(f"a frame of {jn + dn} bytes (at most {MAX_FRAME >> 20} MiB)")
    if len(buf) < nl + 1 + jn + dn:
        return None
    meta = json.loads(bytes(buf[nl + 1:nl + 1 + jn]))
    if not isinstance(meta, dict):
        raise ValueError("a reply that is not an object")
    data_ = bytes(buf[nl + 1 + jn:nl + 1 + jn + dn])
    waiting = pending.pop(int(head[1]), None)
    if waiting is not None:
        waiting[1].cancel()
        if not waiting[0].done():
            waiting[0].set_result((meta, data_))
    return nl + 1 + jn + dn


class ExecFS:
    """The reader on one connection: the part of asyncssh's SFTPClient the SSH source uses
    (open / stat / listdir), plus `look`, and the pushed growth of watched handles."""

    def __init__(self) -> None:
        self.chan: Any = None
        self.conn: Any = None     # the SSH connection (dropped when the node is refused)
        self.stderr = b""
        self.lost: str | None = None
        self._buf = bytearray()
        self._greeted: asyncio.Future[None] | None = None
        self._rid = 0
        self._pending: dict[int, tuple[asyncio.Future[tuple[dict[str, Any], bytes]],
                                       asyncio.TimerHandle]] = {}
        self._files: dict[int, ExecFile] = {}
        self._out: list[bytes] = []     # requests queued for this turn of the loop

    @classmethod
    async def start(cls, conn: Any, python: str = "python3",
                    timeout: float = START_TIMEOUT) -> "ExecFS":
        fs = cls()
        loop = asyncio.get_running_loop()
        fs._greeted = loop.create_future()
        fs.conn = conn
        fs.chan, _ = await conn.create_session(lambda: _Session(fs), remote_command(python),
                                               encoding=None)
        try:
            await asyncio.wait_for(asyncio.shield(fs._greeted), timeout)
        except (StreamLost, asyncio.TimeoutError) as e:
            fs.close()
            why = fs.stderr.decode("utf-8", "replace").strip() or str(e) or \
                f"no greeting within {timeout:.0f}s"
            # ended without greeting: no python3 there (final); slow: try again next time
            raise NoStream(why, final=isinstance(e, StreamLost)) from None
        return fs

    def close(self) -> None:
        if self.chan is not None:
            self._flush()          # an unwatch or close queued this turn still goes out
            self.chan.close()
        self._lost(None)

    # the wire ------------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self.lost is not None:
            return             # given up (refused, or ended): what still arrives is dropped
        buf = self._buf
        buf += data
        pos = 0
        try:
            while True:
                nl = buf.find(b"\n", pos, pos + MAX_LINE + 1)
                if nl < 0:
                    if len(buf) - pos > MAX_LINE:
                        self._refuse(f"a line of more than {MAX_LINE >> 10} KiB without its end")
                        return
                    break
                head = bytes(buf[pos:nl]).split()
                kind = head[0] if head else b""
                if self._greeted is not None and not self._greeted.done():
                    # before the greeting: whatever a login script printed, maybe with
                    # no line end of its own (a terminal title: `printf '\033]0;...\007'`)
                    if buf[pos:nl + 1].endswith(GREETING):
                        self._greeted.set_result(None)
                        self.stderr = b""   # a login script's banner: no later loss's cause
                    pos = nl + 1
                elif kind in (b"D", b"R"):
                    end = (_data_frame(self._files, buf, nl, head) if kind == b"D"
                           else _reply_frame(self._pending, buf, nl, head))
                    if end is None:
                        break          # the frame's body is not all here yet
                    pos = end
                elif kind == b"T":
                    f = self._files.get(int(head[1]))
                    if f is not None:
                        f._stopped(int(head[2]))
                    pos = nl + 1
                else:
                    self._refuse("unexpected output from the remote reader", "ssh_protocol")
                    return
        except _TooLarge as e:
            self._refuse(str(e))
            return
        except (ValueError, IndexError, UnicodeDecodeError, RecursionError):
            self._refuse("a malformed frame from the remote reader", "ssh_protocol")
            return
        del buf[:pos]

    def _refuse(self, why: str, what: str = "ssh_frame") -> None:
        """The node sent more (or other) than the protocol allows: drop the channel and its
        connection (a new one is made by the pool, as after any lost connection), count it,
        and free the buffer at once."""
        REFUSED.count(what)
        self._buf = bytearray()
        self._fail(f"refused: {why}")
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001
                pass

    def _lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            why = self.stderr.decode("utf-8", "replace").strip()[-300:]
            self.lost = f"the remote reader ended{': ' + why if why else ''}" + \
                        (f" ({exc})" if exc else "")
        err = StreamLost(self.lost)
        if self._greeted is not None and not self._greeted.done():
            self._greeted.set_exception(err)
            self._greeted.exception()      # retrieved: start() reports it
        for fut, timer in self._pending.values():
            timer.cancel()
            if not fut.done():
                fut.set_exception(err)
                fut.exception()   # retrieved: its caller may be gone (cancelled)
        self._pending.clear()
        for f in list(self._files.values()):
            f._wake()

    def _fail(self, why: str) -> None:
        self.lost = why
        if self.chan is not None:
            self.chan.close()
        self._lost(None)

    def _send(self, *req: Any) -> None:
        """Queue a request; the requests of one turn of the event loop go out in one write
        (hundreds of logs look at their paths every second: one SSH packet, encrypted once,
        rather than one each)."""
        if self.lost is not None:
            raise StreamLost(self.lost)
        self._out.append(json.dumps(req).encode() + b"\n")
        if len(self._out) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._flush)
            except RuntimeError:      # no loop running (a synchronous caller): now
                self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self.lost is None:
            self.chan.write(b"".join(out))

    async def call(self, op: str, *args: Any) -> tuple[dict[str, Any], bytes]:
        if self.lost is not None:
            raise StreamLost(self.lost)
        self._rid += 1
        rid = self._rid
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[dict[str, Any], bytes]] = loop.create_future()
        timer = loop.call_later(REQUEST_TIMEOUT, self._fail,
                                f"the remote reader did not answer {op} within {REQUEST_TIMEOUT:.0f}s")
        self._pending[rid] = (fut, timer)
        self._send(rid, op, *args)
        meta, data = await fut
        if "err" in meta:
            raise _error(meta)
        return meta, data

    # the SFTPClient subset -----------------------------------------------------------------

    async def open(self, path: str, mode: str = "rb") -> "ExecFile":
        meta, _ = await self.call("open", path)
        f = ExecFile(self, int(meta["h"]), path)
        self._files[f.h] = f
        return f

    async def stat(self, path: str) -> Attrs:
        return _attrs((await self.call("stat", path))[0])

    async def listdir(self, path: str) -> list[str]:
        return list((await self.call("list", path))[0]["names"])

    async def home(self) -> str:
        """The login's home directory, its passwd entry's (where sshd starts the session),
        symlinks resolved: not the reader's working directory, which a ~/.bashrc's
        `cd $SCRATCH` moves (nor $HOME, which an sshd's SetEnv may)."""
        return str((await self.call("home"))[0]["path"])

    async def realpath(self, path: str) -> str:
        """The path with its symlinks resolved, on the node (where a linked log is rotated)."""
        return str((await self.call("real", path))[0]["path"])

    async def matching(self, path: str, pattern: str) -> list[tuple[str, Attrs]]:
        """The regular files in directory `path` whose names match `pattern` (fnmatch,
        hidden ones only for a pattern starting with a dot), with a stat each: one request
        (a target's pattern, sources/newest.py); the 1,000 last modified (a reply stays far
        below MAX_FRAME however many outputs a directory holds)."""
        meta, _ = await self.call("match", path, pattern)
        return [(str(n), _attrs(m)) for n, m in meta["files"]]

    async def grep(self, path: str, literals: tuple[str, ...], keep: int = 50
                   ) -> tuple[int, bytes]:
        """`grep -a -b -n -F -e LIT... -- PATH` run by the reader (no login shell: nothing
        of ~/.bashrc, any shell), at most 4 at once per host; (exit status, its last `keep`
        lines)."""
        meta, data = await self.call("grep", path, list(literals), keep)
        return int(meta["status"]), data


class ExecFile:
    """An open file on the node (the descriptor keeps reading it after a rename or an unlink),
    like asyncssh's SFTPClientFile (read(n, pos), stat(), close()), plus the pushed growth
    (`watch_from`, `size`, `wait`)."""

    streams = True

    def __init__(self, fs: ExecFS, h: int, path: str) -> None:
        self.fs = fs
        self.h = h
        self.path = path
        self.closed = False
        self.gen = 0
        self.live = False        # pushes for this handle are coming
        self.base = 0            # offset of buf[0]
        self.buf = bytearray()   # pushed bytes from `base`
        self.given = 0           # the end of what reads were answered from buf
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = 0.0     # when the current wait times out (loop time)
        self._timer: asyncio.TimerHandle | None = None

    @property
    def end(self) -> int:
        return self.base + len(self.buf)

    # pushes --------------------------------------------------------------------------------

    def _push(self, gen: int, pos: int, size: int, data: bytes) -> None:
        if gen != self.gen or not self.live:
            return
        if pos != self.end:             # cannot happen; never guess: stop, re-watch
            self._pause()
            return
        self.buf += data
        if len(self.buf) > MAX_BUFFERED:
            self._pause()               # read on by requests until the backlog is gone
        self._wake()

    def _stopped(self, gen: int) -> None:
        if gen == self.gen:
            self.live = False
            self._wake()

    def _pause(self) -> None:
        self.live = False
        try:
            self.fs._send(-1, "unwatch", self.h)
        except StreamLost:
            pass

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def watch_from(self, pos: int, given: int) -> None:
        """Push what is appended from `pos` on (`given`: reads up to there were answered)."""
        self.gen += 1
        self.base, self.buf, self.given, self.live = pos, bytearray(), given, True
        self.fs._send(-1, "watch", self.h, self.gen, pos)

    async def wait(self, timeout: float) -> None:
        """Until a push comes, the watch stops, the channel ends, or `timeout`."""
        if self.fs.lost is not None:
            raise StreamLost(self.fs.lost)
        if self.live and self.end > self.given:
            return
        loop = asyncio.get_running_loop()
        fut = self._waiter = loop.create_future()
        self._deadline = deadline = loop.time() + timeout
        # one timer kept across waits (a push ends most waits long before their timeout: a
        # timer made and cancelled per wait was one per frame, 1,000 a second at 500 logs);
        # one due later than this deadline is replaced, an earlier one moves on when it fires
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._timed_out)
        try:
            await fut
        finally:
            self._waiter = None
        if self.fs.lost is not None:
            raise StreamLost(self.fs.lost)

    def _timed_out(self) -> None:
        self._timer = None
        if self._waiter is None or self._waiter.done():
            return
        loop = self._waiter.get_loop()
        if loop.time() >= self._deadline:
            self._wake()
        else:               # this wait's deadline is later than the one the timer was for
            self._timer = loop.call_at(self._deadline, self._timed_out)

    async def size(self) -> int:
        """The end of the pushed bytes while pushed (at least what was already read: a watch
        starts TAIL_BYTES before it), else the file's size now."""
        if self.live:
            return max(self.end, self.given)
        return (await self.stat()).size

    # the SFTPClientFile subset -------------------------------------------------------------

    async def read(self, n: int, pos: int) -> bytes:
        end = pos + n
        if self.base <= pos < self.end and end > self.given:
            # the appended bytes (and the ones just before them): pushed already
            stop = min(end, self.end)
            data = bytes(self.buf[pos - self.base:stop - self.base])
            self.given = max(self.given, stop)
            keep = self.given - TAIL_BYTES - self.base
            if keep > 0:
                del self.buf[:keep]
                self.base += keep
            return data
        _, data = await self.fs.call("read", self.h, pos, n)
        if self.live and pos + len(data) > self.end and end > self.given:
            self._pause()   # read past the pushes (a drain): re-watch from the new offset
        return data

    async def stat(self) -> Attrs:
        return _attrs((await self.fs.call("fstat", self.h))[0])

    async def look(self, head: int, path: str | None = None) -> tuple[dict[str, Any], bytes]:
        """What `path` (default: the path this handle was opened by) names now; a rotated
        file found again or held was opened by another name than the log's."""
        return await self.fs.call("look", self.h, path or self.path, head)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.live = False
        self._wake()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.fs._files.pop(self.h, None)
        if self.fs.lost is None:
            await self.fs.call("close", self.h)
