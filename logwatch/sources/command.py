"""Logs that come from a command (`docker logs -f NAME`, `kubectl logs -f POD`,
`journalctl -fu UNIT`) or from stdin.

A command that exits is started again with backoff.  Most of these commands print the log
again from some point when restarted (`docker logs -f` from the start, `journalctl -f` its
last lines); to avoid reading the same lines twice, the new output is compared with what
was already read (see `_Resync`).

What the first run prints before it first pauses (or, past HISTORY_LOOK seconds, before it
slows to a live server's pace: a busy server's output never pauses) is the log as it was when
we looked (`docker
logs -f` prints the container's whole log, then follows it): with a start locator it is read
as a file met for the first time is, from its latest launch; with a checkpoint (a daemon
restarted), on from where the last one stopped, once the output is the same up to there
(`_first_run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import sys
from dataclasses import dataclass
from typing import AsyncIterator

from .. import log
from ..shown import TERMINAL_ESCAPES
from .base import (
    TAIL_BYTES, Data, Opened, Position, SourceEvent, SourceState, StartLocator,
    compressed_refusal, compression_of, digest,
)
from .ssh import Backoff

LAST_WORDS = 1024   # bytes of a run's output kept for its exit's status (`last_words`)
_ESCAPES = re.compile(TERMINAL_ESCAPES.encode())   # a terminal's colours, titles (shown.py)

OVERLAP_PROBE = 64 * 1024    # the end of the previous output kept to recognise a reprint
OVERLAP_WINDOW = 1 << 20     # how much new output to buffer while looking
HISTORY_QUIET = 2.0          # seconds of pause that end the first run's printed history
HISTORY_FIRST = 15.0         # seconds its first byte may take (a command connecting)
HISTORY_LOOK = 5.0           # seconds after its first byte past which a live pace ends it: a
                             # busy server's output never pauses 2 s (stats lines several a
                             # second), while a reprinted log comes at a dump's pace ...
HISTORY_FAST = 64 << 10      # ... of this many bytes a second or more (`_Pace`), a slower
                             # pace over SLOW_WINDOWS seconds in a row ending it
SLOW_WINDOWS = 2
HISTORY_HELD = 32 << 20      # bytes of it held, from its latest launch, while looking on
HEAD_PROBE = 64 * 1024       # the first run's first bytes: a run printing them again replays
RESYNC_NEEDLE = 4096         # the last bytes read, found in a rerun's output: the old end
RESYNC_HELD = 32 << 20       # bytes of a rerun's output held while the old end is looked for
CLOSE_WAIT = 2.0             # seconds a terminated command has to exit before it is killed


class CommandSource:
    def __init__(self, command: str | list[str], *, name: str | None = None,
                 restart: bool = True, locator: StartLocator | None = None,
                 start: Position | None = None) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("empty command")
        self.name = name or "cmd:" + " ".join(self.argv)
        self.restart = restart
        self.locator = locator
        self.start = start     # a checkpoint's: where the last daemon stopped reading
        self.log = log.get("source.command").bind(command=self.name)
        self._proc: asyncio.subprocess.Process | None = None
        self._closed = False
        self.restarts = 0

    async def close(self) -> None:
        """Stop reading: the command is terminated and waited for (killed after CLOSE_WAIT).
        Its pipe is closed first, what it still holds dropped: 3.11's `wait()` waits for the
        pipe's end too, and a pipe left to the garbage collector (a chatty command's, never
        read to its end) was closed after the event loop: `Exception ignored ... Event loop
        is closed` at a daemon's stop."""
        self._closed = True
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):   # it had exited
            proc.terminate()
        transport = getattr(proc, "_transport", None)   # (3.11 has no public way to it)
        pipe = transport.get_pipe_transport(1) if transport is not None else None
        if pipe is not None:
            pipe.close()
        try:
            async with asyncio.timeout(CLOSE_WAIT):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def events(self) -> AsyncIterator[SourceEvent]:
        backoff = Backoff(base=1.0, cap=30.0)
        stream = _Stream()
        first = True
        while not self._closed:
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL)
            except (FileNotFoundError, PermissionError) as e:
                yield SourceState(False, f"cannot run {self.argv[0]}: {e.strerror}", fatal=True)
                return
            assert self._proc.stdout is not None
            yield SourceState(True, f"running {self.name}")
            started = asyncio.get_running_loop().time()
            resync = not first
            if first and (self.locator is not None or self.start is not None):
                async for ev in self._first_run(self._proc.stdout, stream):
                    yield ev
            elif first:
                yield Opened(0, 1, None, "attach", True)
            first = False
            async for data in self._read_run(self._proc.stdout, stream, resync):
                yield data
            code = await self._proc.wait()
            if self._closed or not self.restart:
                return
            if asyncio.get_running_loop().time() - started > 60:
                backoff.reset()
            delay = backoff.next()
            self.restarts += 1
            said = last_words(stream.run_tail)
            stream.run_tail = b""
            yield SourceState(False, f"{self.argv[0]} exited with {code}"
                              + (f" ({said})" if said else "")
                              + f"; restarting in {delay:.1f}s", error=True)
            await asyncio.sleep(delay)

    async def _first_run(self, out: asyncio.StreamReader,
                         stream: "_Stream") -> AsyncIterator[SourceEvent]:
        """The first run's output up to its first pause, or past HISTORY_LOOK seconds until it
        comes at a live pace (`_FirstOutput`, `_Pace`; a busy server's `docker logs -f` never
        pauses 2 s: before, it was held unread for hours, until 32 MiB): where a checkpoint
        is (a daemon restarted under a running command, which prints its log again), read on
        from it once the output is the same up to there; else read as a log met for the
        first time, from its latest launch, what it printed history (`Opened.size`)."""
        first = _FirstOutput(self.locator, self.start)
        loop = asyncio.get_running_loop()
        pace = _Pace()
        quiet = HISTORY_FIRST        # a command may take a while to connect (ssh, kubectl)
        while first.looking():
            try:
                chunk = await _read(out, quiet)
            except asyncio.TimeoutError:
                break
            if not chunk:
                break
            quiet = HISTORY_QUIET
            stream.run_tail = (stream.run_tail + chunk)[-LAST_WORDS:]
            first.feed(chunk)
            if pace.live(len(chunk), loop.time()):
                break       # never paused, but at a server's pace: the history is over
        stream.head = first.head
        if first.resumed is not None:
            pos = first.resumed
            stream.offset, stream.tail = pos.offset, first.before
            yield Opened(pos.offset, pos.line_number, None, "resume", False)
            if first.rest:
                yield stream.data(first.rest)
            return
        at, line = first.latest()
        stream.offset = at
        yield Opened(at, line, None, "attach", True, size=first.total)
        if first.held:
            yield stream.data(bytes(first.held))

    @staticmethod
    async def _read_run(out: asyncio.StreamReader, stream: "_Stream",
                        resync: bool = True) -> AsyncIterator[Data]:
        """One run's output, to its end.  A run after the first is resynced (`_Resync`): what
        the stream already handed on is dropped."""
        skip_state = _Resync(stream.head, stream.tail, stream.offset) \
            if resync and stream.offset else None
        run_head = b""
        while True:
            if skip_state is not None:
                try:  # a pause in the output settles the resync
                    chunk = await _read(out, 0.5)
                except asyncio.TimeoutError:
                    rest = skip_state.settle()
                    skip_state = None
                    if rest:
                        yield stream.data(rest)
                    continue
            else:
                chunk = await out.read(1 << 16)
            if not chunk:
                break
            stream.run_tail = (stream.run_tail + chunk)[-LAST_WORDS:]
            if len(run_head) < HEAD_PROBE:
                run_head += chunk[: HEAD_PROBE - len(run_head)]
            if skip_state is not None:
                chunk = skip_state.feed(chunk)
                if skip_state.done:
                    skip_state = None
                if not chunk:
                    continue
            yield stream.data(chunk)
        if skip_state is not None:
            rest = skip_state.flush()
            if rest:
                yield stream.data(rest)
        if run_head and not stream.head:
            stream.head = run_head  # the first run's first bytes


def last_words(tail: bytes, most: int = 160) -> str:
    """The last line a run printed, as text for its exit's status: `docker logs -f` of a
    container that is gone says `Error response from daemon: No such container: sglang` and
    exits 1; before, the status said only "docker exited with 1; restarting" for good."""
    text = _ESCAPES.sub(b"", tail).decode("utf-8", "replace").replace("\r", "\n")
    line = next((ln.strip() for ln in reversed(text.split("\n")) if ln.strip()), "")
    line = "".join(c if c.isprintable() else " " for c in line)
    return line if len(line) <= most else line[:most - 1] + "…"


def shell_syntax(command: str) -> str | None:
    """The first shell operator a `cmd:` command holds unquoted (`|`, `>`, `2>&1`, `&&`,
    `;`), or None.  The command runs without a shell (its words as argv): before, `cmd:docker
    logs -f x | grep -v health` ran `docker` with `|`, `grep`, ... as its arguments, silently."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        for token in lex:
            if token and all(c in "|&;<>()" for c in token):
                return token
    except ValueError:            # an unclosed quote: shlex.split says so at the run
        return None
    return None


def shell_note(command: str, op: str) -> str:
    """What to say of a `cmd:` command holding shell operator `op`."""
    argv0 = command.split()[0] if command.split() else command
    return (f"cmd: runs its command without a shell: {op!r} would be an argument of "
            f"{argv0!r}; for a pipeline or a redirection: cmd:sh -c {shlex.quote(command.strip())}")


async def _read(out: asyncio.StreamReader, within: float) -> bytes:
    """The command's next output; TimeoutError after `within` seconds.  Not `wait_for`: on
    Python 3.11 a cancel that meets a finished read is dropped (the read is returned), and a
    chatty command's read has nearly always finished: a stopped target read on, so a daemon
    sent SIGTERM never exited and restarted the commands the signal had killed."""
    async with asyncio.timeout(within):
        return await out.read(1 << 16)


class _Pace:
    """Whether a first run's output, past HISTORY_LOOK seconds, comes at a live server's pace
    (under HISTORY_FAST bytes a second, SLOW_WINDOWS seconds in a row) rather than a reprinted
    log's: `docker logs -f` of a busy server never pauses 2 s, and a long log reprinted by
    `kubectl logs -f` through an API server may take more than HISTORY_LOOK; a bare time cap
    read the rest of such a reprint live (its old crashes paged)."""

    def __init__(self) -> None:
        self.first: float | None = None     # the first byte came (loop time)
        self.since = 0.0                    # the window being measured began
        self.bytes = 0                      # ... and what came in it
        self.slow = 0                       # windows in a row under HISTORY_FAST

    def live(self, n: int, now: float) -> bool:
        if self.first is None:
            self.first = self.since = now
        self.bytes += n
        if now - self.first < HISTORY_LOOK or now - self.since < 1.0:
            return False
        self.slow = self.slow + 1 if self.bytes / (now - self.since) < HISTORY_FAST else 0
        self.since, self.bytes = now, 0
        return self.slow >= SLOW_WINDOWS


class _FirstOutput:
    """The first run's output while it is looked through (`CommandSource._first_run`).

    With a checkpoint's position (`resume`): the output up to its offset is counted (held
    only as below, for the case it is another log) and the bytes just before it are checked
    against the position's hash: the same stream (`docker logs -f` printing the container's
    log again) is read on from there.
    Otherwise, with a start locator: the latest launch found so far is held (at most
    HISTORY_HELD bytes; past them the looking ends), what came before it dropped.  A resume
    that fails past them (a new container printing more than that) starts at the output's
    end: the restored state goes on from there."""

    def __init__(self, locator: StartLocator | None, resume: Position | None) -> None:
        self.scanner = locator.scanner() if locator is not None else None
        self.resume = resume if resume is not None and resume.offset and resume.tail_sha \
            else None
        self.held, self.held_at, self.total, self.head = bytearray(), 0, 0, b""
        self.lines = 1                     # the line number at `total`
        self.truncated = False             # bytes past HISTORY_HELD were not held
        self.recent = b""                  # the last TAIL_BYTES of the output so far
        self.resumed: Position | None = None
        self.before = b""                  # the bytes up to the resumed position (its end)
        self.rest = b""                    # the bytes after it

    def looking(self) -> bool:
        return self.resumed is None and (len(self.held) <= HISTORY_HELD or
                                         self.resume is not None)

    def feed(self, chunk: bytes) -> None:
        start = self.total
        self.total += len(chunk)
        self.lines += chunk.count(b"\n")
        self.head += chunk[: max(0, HEAD_PROBE - len(self.head))]
        r = self.resume
        if r is not None and start < r.offset <= self.total:
            cut = r.offset - start
            before = (self.recent + chunk[:cut])[-min(r.offset, TAIL_BYTES):]
            if digest(before) == r.tail_sha:
                self.resumed, self.before, self.rest = r, before, chunk[cut:]
                return
            self.resume = None             # another log: read as one met for the first time
        self.recent = (self.recent + chunk)[-TAIL_BYTES:]
        if len(self.held) <= HISTORY_HELD and not self.truncated:
            self.held += chunk
        else:
            self.truncated = True
        if self.scanner is not None:
            self.scanner.feed(chunk)
            self._drop_before(self.scanner.so_far()[0])

    def latest(self) -> tuple[int, int]:
        """Where the latest launch of what was read begins (its bytes from there held)."""
        if self.truncated:
            self.held, self.held_at = bytearray(), self.total
            return self.total, self.lines
        if self.scanner is None:
            return 0, 1
        at, line = self.scanner.result()
        self._drop_before(at)
        return at, line

    def _drop_before(self, at: int) -> None:
        if at > self.held_at:        # a later launch: what came before it is not read
            del self.held[: at - self.held_at]
            self.held_at = at


@dataclass
class _Stream:
    """What a command source has handed on, across the command's runs."""

    offset: int = 0               # bytes of this stream handed on so far
    head: bytes = b""             # the first bytes of the first run's output
    tail: bytes = b""             # the last bytes handed on
    run_tail: bytes = b""         # the last bytes the current run printed (resynced or not)

    def data(self, chunk: bytes) -> Data:
        """`chunk`, handed on next."""
        out = Data(chunk, self.offset)
        self.offset += len(chunk)
        self.tail = (self.tail + chunk)[-OVERLAP_PROBE:]
        return out


class _Resync:
    """Drops the part of a restarted command's output that was already read.

    Three shapes: the command prints everything again (`docker logs -f`): its output starts
    with the same bytes as the first run, so exactly the `seen` bytes already read are
    skipped; it prints the log again from a later point (Docker's json-file driver rotated
    its start away, `kubectl logs` of a rotated container log): the last bytes read
    (`RESYNC_NEEDLE` of them) are found in the new output, and what follows them is new; or
    it prints the last lines again (`journalctl -f`, `tail -n N -f`): the longest start of
    the new output (in whole lines) that the old output ended with is skipped.  Decided once
    the old end is found, the output pauses, or it exceeds what may be held.  Otherwise
    nothing is skipped (better a line twice than a line lost)."""

    def __init__(self, head: bytes, tail: bytes, seen: int) -> None:
        self.head, self.tail, self.seen = head, tail, seen
        self.buf = bytearray()
        self.done = False
        self.skipping: int | None = None   # bytes still to drop in full-replay mode
        # the old output's end, looked for in the new (too short to be proof: not looked for)
        self.needle = tail[-RESYNC_NEEDLE:] if len(tail) >= 512 else b""
        self.searched = 0                  # the new output looked through for it so far

    def feed(self, chunk: bytes) -> bytes:
        if self.skipping is not None:
            if len(chunk) <= self.skipping:
                self.skipping -= len(chunk)
                return b""
            out = chunk[self.skipping:]
            self.skipping = None
            self.done = True
            return out
        self.buf += chunk
        n = min(len(self.head), len(self.buf))
        if self.head and n >= min(len(self.head), 256) and self.buf[:n] == self.head[:n]:
            if len(self.buf) < len(self.head):
                return b""  # not sure yet
            self.skipping = self.seen
            data, self.buf = bytes(self.buf), bytearray()
            return self.feed(data)
        if self.needle:
            at = self.buf.find(self.needle, max(0, self.searched - len(self.needle) + 1))
            self.searched = len(self.buf)
            if at >= 0:                    # the old end: what follows it is new
                self.done = True
                out, self.buf = bytes(self.buf[at + len(self.needle):]), bytearray()
                return out
        if len(self.buf) > (RESYNC_HELD if self.needle else len(self.tail) + OVERLAP_WINDOW):
            return self.settle()
        return b""

    def settle(self) -> bytes:
        """The output paused: skip the overlap with the end of the old output, if any."""
        self.done = True
        buf, self.buf = bytes(self.buf), bytearray()
        if self.head and self.head.startswith(buf) and len(buf) <= self.seen:
            return b""  # a short log printed again, all of it already read
        best = 0
        pos = buf.find(b"\n")
        while pos >= 0 and pos < len(self.tail) + 1:
            k = pos + 1
            if buf[:k].strip() and self.tail.endswith(buf[:k]):   # (a blank line is no proof)
                best = k
            pos = buf.find(b"\n", k)
        return buf[best:]

    def flush(self) -> bytes:
        return self.settle()


class StdinSource:
    name = "-"

    def __init__(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True

    async def events(self) -> AsyncIterator[SourceEvent]:
        import stat
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
        # `< file.log`: a file, not a pipe; `< /dev/null` (a CI job's stdin): a device the
        # event loop cannot wait on (epoll refuses it: before, a traceback, then watch hung)
        if stat.S_ISREG(mode) or stat.S_ISBLK(mode) or (stat.S_ISCHR(mode) and not os.isatty(fd)):
            yield SourceState(True, "reading stdin (a file)")
            yield Opened(0, 1, None, "attach", True)
            offset = 0
            while not self._closed:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    yield SourceState(False, "stdin closed")
                    return
                if offset == 0 and (refused := _compressed(chunk)) is not None:
                    yield refused
                    return
                yield Data(chunk, offset)
                offset += len(chunk)
                await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        protocol = asyncio.StreamReaderProtocol(reader)
        await loop.connect_read_pipe(lambda: protocol, os.fdopen(sys.stdin.fileno(), "rb", 0,
                                                                 closefd=False))
        yield SourceState(True, "reading stdin")
        yield Opened(0, 1, None, "attach", True)
        offset = 0
        while not self._closed:
            chunk = await reader.read(1 << 16)
            if not chunk:
                yield SourceState(False, "stdin closed")
                return
            if offset == 0 and (refused := _compressed(chunk)) is not None:
                yield refused
                return
            yield Data(chunk, offset)
            offset += len(chunk)


def _compressed(head: bytes) -> SourceState | None:
    """The fatal state for a compressed stream on stdin (a rotated log, finished), or None."""
    kind = compression_of(head)
    if kind is None:
        return None
    return SourceState(False, compressed_refusal("stdin", kind, "-"), fatal=True)
