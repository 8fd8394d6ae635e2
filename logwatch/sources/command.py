"""Logs that come from a command (`docker logs -f NAME`, `kubectl logs -f POD`,
`journalctl -fu UNIT`) or from stdin.

A command that exits is started again with backoff.  Most of these commands print the log
again from some point when restarted (`docker logs -f` from the start, `journalctl -f` its
last lines); to avoid reading the same lines twice, the new output is compared with what
was already read (see `_Resync`).

What the first run prints before it first pauses is the log as it was when we looked (`docker
logs -f` prints the container's whole log, then follows it): with a start locator it is read
as a file met for the first time is, from its latest launch (`_history`).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from dataclasses import dataclass
from typing import AsyncIterator

from .. import log
from .base import (
    Data, Opened, SourceEvent, SourceState, StartLocator, compressed_refusal, compression_of,
)
from .ssh import Backoff

OVERLAP_PROBE = 64 * 1024    # the end of the previous output kept to recognise a reprint
OVERLAP_WINDOW = 1 << 20     # how much new output to buffer while looking
HISTORY_QUIET = 0.5          # seconds of pause that end the first run's printed history
HISTORY_HELD = 32 << 20      # bytes of it held, from its latest launch, while looking on


class CommandSource:
    def __init__(self, command: str | list[str], *, name: str | None = None,
                 restart: bool = True, locator: StartLocator | None = None) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("empty command")
        self.name = name or "cmd:" + " ".join(self.argv)
        self.restart = restart
        self.locator = locator
        self.log = log.get("source.command").bind(command=self.name)
        self._proc: asyncio.subprocess.Process | None = None
        self._closed = False
        self.restarts = 0

    async def close(self) -> None:
        self._closed = True
        if self._proc is not None and self._proc.returncode is None:
            try:
                self._proc.terminate()
            except ProcessLookupError:
                pass

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
            if first and self.locator is not None:
                async for ev in self._history(self._proc.stdout, stream, self.locator):
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
            yield SourceState(False, f"{self.argv[0]} exited with {code}; restarting in {delay:.1f}s",
                              error=True)
            await asyncio.sleep(delay)

    @staticmethod
    async def _history(out: asyncio.StreamReader, stream: "_Stream",
                       locator: StartLocator) -> AsyncIterator[SourceEvent]:
        """The first run's output up to its first pause (HISTORY_QUIET), read as a log met
        for the first time: from its latest launch (the launches before it not read: their
        crashes are not news), what it held history (`Opened.size`: the catch-up).  At most
        HISTORY_HELD bytes from the latest launch found so far are held while looking; past
        that, or at the pause, what is held is handed on and the run read as it comes."""
        scanner = locator.scanner()
        held, held_at, total, head = bytearray(), 0, 0, b""
        while len(held) <= HISTORY_HELD:
            try:
                chunk = await asyncio.wait_for(out.read(1 << 16), HISTORY_QUIET)
            except asyncio.TimeoutError:
                break
            if not chunk:
                break
            head += chunk[: max(0, 4096 - len(head))]
            scanner.feed(chunk)
            total += len(chunk)
            held += chunk
            at = scanner.so_far()[0]
            if at > held_at:        # a later launch: what came before it is not read
                del held[: at - held_at]
                held_at = at
        at, line = scanner.result()
        if at > held_at:
            del held[: at - held_at]
            held_at = at
        stream.head, stream.offset = head, held_at
        yield Opened(held_at, line, None, "attach", True, size=total)
        if held:
            yield stream.data(bytes(held))

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
                    chunk = await asyncio.wait_for(out.read(1 << 16), 0.5)
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
            if len(run_head) < 4096:
                run_head += chunk[: 4096 - len(run_head)]
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


@dataclass
class _Stream:
    """What a command source has handed on, across the command's runs."""

    offset: int = 0               # bytes of this stream handed on so far
    head: bytes = b""             # the first bytes of the first run's output
    tail: bytes = b""             # the last bytes handed on

    def data(self, chunk: bytes) -> Data:
        """`chunk`, handed on next."""
        out = Data(chunk, self.offset)
        self.offset += len(chunk)
        self.tail = (self.tail + chunk)[-OVERLAP_PROBE:]
        return out


class _Resync:
    """Drops the part of a restarted command's output that was already read.

    Two shapes: the command prints everything again (`docker logs -f`): its output starts
    with the same bytes as the first run, so exactly the `seen` bytes already read are
    skipped; or it prints the last lines again (`journalctl -f`, `tail -n N -f`): the longest
    start of the new output (in whole lines) that the old output ended with is skipped.
    Decided once the output pauses or exceeds what was kept of the old one.  Otherwise
    nothing is skipped (better a line twice than a line lost)."""

    def __init__(self, head: bytes, tail: bytes, seen: int) -> None:
        self.head, self.tail, self.seen = head, tail, seen
        self.buf = b""
        self.done = False
        self.skipping: int | None = None   # bytes still to drop in full-replay mode

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
            data, self.buf = self.buf, b""
            return self.feed(data)
        if len(self.buf) > len(self.tail) + OVERLAP_WINDOW:
            return self.settle()
        return b""

    def settle(self) -> bytes:
        """The output paused: skip the overlap with the end of the old output, if any."""
        self.done = True
        buf, self.buf = self.buf, b""
        if self.head and self.head.startswith(buf) and len(buf) <= self.seen:
            return b""  # a short log printed again, all of it already read
        best = 0
        pos = buf.find(b"\n")
        while pos >= 0 and pos < len(self.tail) + 1:
            k = pos + 1
            if self.tail.endswith(buf[:k]):
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
        if stat.S_ISREG(os.fstat(fd).st_mode):  # `< file.log`: a file, not a pipe
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
