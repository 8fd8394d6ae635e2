"""logrotate's `copytruncate` (sources/cursor.py): the log is copied to `server.log.1`, then
truncated in place, and its writer goes on writing the same descriptor.

This is how a server started as `python -m sglang.launch_server ... > server.log 2>&1`
gets its log rotated: it never reopens its stdout, so a rename would leave it writing the
renamed file for ever.  Two things used to go wrong, both measured on a log written 1,000
lines/s (tests/test_rotation_chain.py's writer, the local source's 100 ms read batch):

- the lines written between logwatch's last read and the truncation were lost (30 of 2,000),
  although the copy beside the log holds them;
- a writer that does not append (the shell's `>`, not `>>`) writes on at its old offset, so
  the truncated file begins with a hole of zeros as long as the old log: all of it was read
  again and handed to the rules (70,983 zero bytes for a 70 KB log; a 10 GB log's worth,
  over SSH too), and the first line after the hole was glued to the zeros (90 lost).

Now the copy is found by its bytes (its head and the bytes before our offset) and read from
our offset to its end; then the truncated file from its start, past a hole found in a few
small reads; a writer that left a hole tells exactly how much was written that neither the
file nor a copy still holds: said and counted.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
from hypothesis import given, settings, strategies as st

from logwatch.sources import Data, Opened, Position, Skipped
from logwatch.sources.base import HEAD_BYTES, TAIL_BYTES, digest
from logwatch.sources.cursor import (
    HOLE_PROBE, HOLE_SCAN, Action, Cursor, FindRotated, Poll, Read, Reopen, Wait, before_range,
    is_ours,
)
from logwatch.sources.local import LocalFileSource
from logwatch.sources.ssh import SSHPool
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)
from test_cursor import Disk, File, contiguous, data_of, lines, opened
from test_local_source import Reader, run
from test_rotation import WriterThread, loss, numbered, ssh_source


@dataclass
class CopyDisk(Disk):
    """A Disk with copies beside the path (what FindRotated looks at), as a source answers."""

    beside: list[File] = field(default_factory=list)
    finds: list[FindRotated] = field(default_factory=list)

    def copy(self, of: File, upto: int | None = None) -> File:
        """logrotate's copy of `of` (its first `upto` bytes), beside the path."""
        c = File(max(self.files, default=10) + 1, bytearray(of.data[:upto]))
        self.files[c.ino] = c
        self.beside.append(c)
        return c

    def answer(self, cur: Cursor, act: Action, f: File) -> tuple[Action, list[Any]]:
        act, evs = super().answer(cur, act, f)
        while isinstance(act, FindRotated):
            self.finds.append(act)
            lo, n = before_range(act)
            ours = next((c for c in self.beside if is_ours(
                act, 1 if act.identity.dev is not None else None, c.ino, len(c.data),
                bytes(c.data[:HEAD_BYTES]), bytes(c.data[lo:lo + n]))), None)
            if ours is not None:
                f = ours                       # the source reads the copy from now on
            act = cur.found(ours is not None, [])
            act, more = super().answer(cur, act, f)
            evs += more
        return act, evs


def follow(disk: CopyDisk, **kw: Any) -> tuple[Cursor, File]:
    cur = Cursor("/var/log/server.log", can_find=True, can_hold=True, **kw)
    f, _, _ = disk.open(cur)
    disk.poll(cur, f, 0.0)
    return cur, f


def until_reopen(disk: CopyDisk, cur: Cursor, f: File, now: float) -> list[Any]:
    """Poll; when the cursor leaves the copy (Reopen), open the path; poll until it waits."""
    act, evs = disk.poll(cur, f, now)
    for _ in range(3):
        if act == Reopen("truncated"):
            f, act, more = disk.open(cur)
        elif act == Poll():
            act, more = disk.poll(cur, f, now)
        else:
            break
        evs += more
    assert isinstance(act, Wait), act
    return evs


# ----------------------------------------------------------------------------------------------
# the cursor, with plain bytes

GAP = len(lines(131, 135))
NOT_READ = len(lines(101, 130))


@pytest.mark.parametrize("copy,hole,gap,lost", [
    (True, False, False, 0),
    (True, True, False, 0),
    (True, True, True, GAP),
    (False, True, False, NOT_READ),
    (False, False, False, 0),
], ids=["append-copy", "hole-copy", "hole-copy-gap", "hole-no-copy", "append-no-copy"])
def test_copytruncate(copy: bool, hole: bool, gap: bool, lost: int) -> None:
    """Lines 1-100 read, 101-130 written, logrotate's copy (`copy`), 131-135 written in its
    gap (`gap`), the truncation, then 136-140 written at 0, or after the hole of a writer
    that does not append (`hole`).  Read: what the copy holds, then 136-140, never a zero.
    Said lost, to the byte: what the hole tells neither the file nor a copy still held (an
    appending writer tells nothing)."""
    disk = CopyDisk()
    f = disk.create(lines(1, 100))
    cur, f = follow(disk)
    f.data += lines(101, 130)
    if copy:
        disk.copy(f)
    if gap:
        f.data += lines(131, 135)
    w = len(f.data)                      # the writer's offset, kept after the truncation
    f.data[:] = (bytes(w) if hole else b"") + lines(136, 140)
    evs = until_reopen(disk, cur, f, 0.1)
    assert data_of(evs) == (lines(101, 130) if copy else b"") + lines(136, 140)
    assert opened(evs) == [("truncated", w if hole else 0, 1, True)]
    skipped = [e for e in evs if isinstance(e, Skipped)]
    assert sum(e.nbytes for e in skipped) == lost and len(skipped) == (lost > 0)
    assert all("copytruncate" in e.message and "/var/log/server.log" in e.message
               for e in skipped)
    assert cur.truncations == 1 and cur.rotations == 0
    assert disk.finds[0].copy and disk.finds[0].identity.dev is None


@pytest.mark.parametrize("can_find", [True, False], ids=["copy", "no-copy"])
@pytest.mark.parametrize("append", [True, False], ids=["append", "no-append"])
def test_a_truncated_log_still_empty_is_opened_with_its_first_bytes(can_find: bool,
                                                                     append: bool) -> None:
    """Seen at once (inotify wakes on the truncation): the log is empty when it is read
    again; the writer's next bytes come at 0 (append) or after a hole (not): the Opened
    is said with them, past the hole, and the zeros are never handed on."""
    disk = CopyDisk()
    f = disk.create(lines(1, 100))
    cur = Cursor("/var/log/server.log", can_find=can_find, can_hold=True)
    f, _, _ = disk.open(cur)
    disk.poll(cur, f, 0.0)
    f.data += lines(101, 130)
    disk.copy(f)
    w = len(f.data)
    f.data[:] = b""
    evs = until_reopen(disk, cur, f, 0.1)
    assert opened(evs) == [] and data_of(evs) == (lines(101, 130) if can_find else b"")
    f.data[:] = (b"" if append else bytes(w)) + lines(131, 140)
    more = until_reopen(disk, cur, f, 0.2)
    assert opened(more) == [("truncated", 0 if append else w, 1, True)]
    assert data_of(more) == lines(131, 140)
    skipped = [e.nbytes for e in evs + more if isinstance(e, Skipped)]
    assert skipped == ([] if can_find or append else [len(lines(101, 130))])
    contiguous(more)


def test_an_older_rotated_copy_is_not_taken_for_ours() -> None:
    """server.log.1 from an earlier rotation has other bytes before our offset: not ours."""
    disk = CopyDisk()
    f = disk.create(lines(1, 100))
    old = disk.copy(f)
    old.data[:] = lines(1, 300, tag="old")
    cur, f = follow(disk)
    f.data[:] = lines(1, 5, tag="new")
    evs = until_reopen(disk, cur, f, 0.1)
    assert data_of(evs) == lines(1, 5, tag="new")


def test_a_truncation_while_disconnected_reads_the_copy_on_reconnect() -> None:
    disk = CopyDisk()
    f = disk.create(lines(1, 100))
    cur, f = follow(disk)
    f.data += lines(101, 130)
    disk.copy(f)
    w = len(f.data)
    f.data[:] = bytes(w) + lines(131, 140)
    # the connection was lost meanwhile: the source opens the path again
    _, act, evs = disk.open(cur)
    assert act == Reopen("truncated")
    assert opened(evs) == [("reconnected", len(lines(1, 100)), 0, False)]
    f, act, more = disk.open(cur)
    evs += more
    act, more = disk.poll(cur, f, 0.1)
    evs += more
    assert data_of(evs) == lines(101, 140)
    assert cur.truncations == 1 and cur.rotations == 0


def test_a_truncation_while_the_daemon_was_down_resumes_in_the_copy() -> None:
    disk = CopyDisk()
    f = disk.create(lines(1, 100))
    cur, f = follow(disk)
    upto = cur.offset
    assert upto is not None
    saved = Position(upto, 101, cur.identity, digest(bytes(f.data[upto - TAIL_BYTES:upto])), "t")
    f.data += lines(101, 130)
    disk.copy(f)
    w = len(f.data)
    f.data[:] = bytes(w) + lines(131, 140)
    cur = Cursor("/var/log/server.log", saved=saved, can_find=True, can_hold=True,
                 can_locate=True)
    _, act, evs = disk.open(cur)
    assert act == Reopen("truncated")
    assert opened(evs) == [("resume", upto, 101, False)]
    f, act, more = disk.open(cur)
    evs += more
    act, more = disk.poll(cur, f, 0.1)
    evs += more
    assert data_of(evs) == lines(101, 140)
    assert opened(evs)[-1] == ("truncated", w, 1, True)


@dataclass
class Sparse:
    """A file of `zeros` zero bytes, then `text`: reads without making the zeros."""

    zeros: int
    text: bytes
    reads: list[Read] = field(default_factory=list)

    def read(self, pos: int, n: int) -> bytes:
        self.reads.append(Read(pos, n))
        end = min(pos + n, self.zeros + len(self.text))
        if pos >= end:
            return b""
        z = max(0, min(end, self.zeros) - pos)
        return bytes(z) + self.text[max(0, pos - self.zeros):max(0, end - self.zeros)]


@settings(max_examples=300, deadline=None)
@given(zeros=st.one_of(st.integers(1, 3 * HOLE_SCAN), st.integers(1, 1 << 40)),
       text=st.binary(min_size=1, max_size=300).filter(
           lambda b: b[0] != 0 and bytes(HOLE_PROBE) not in b))
def test_the_hole_is_found_exactly_in_few_small_reads(zeros: int, text: bytes) -> None:
    """A hole of any size up to a TiB, then any text not starting with a zero (zero bytes
    in it, but fewer than HOLE_PROBE in a row): reading starts exactly at the text, in at
    most 90 reads of at most HOLE_SCAN bytes each."""
    f = Sparse(zeros, text)
    cur = Cursor("/l")
    act = cur.opened(1, 5, zeros + len(text), f.read(0, HEAD_BYTES))
    while isinstance(act, Read):
        act = cur.got(f.read(act.pos, act.n))
    assert act == Poll()
    assert cur.offset == zeros
    assert len(f.reads) <= 90 and max(r.n for r in f.reads) <= max(HOLE_SCAN, HEAD_BYTES)
    ev = cur.take_events()
    assert [(e.reason, e.offset) for e in ev if isinstance(e, Opened)] == [("attach", zeros)]


def test_a_file_of_zeros_only_is_read_from_its_end() -> None:
    f = Sparse(10 * HOLE_SCAN, b"")
    cur = Cursor("/l")
    act = cur.opened(1, 5, f.zeros, f.read(0, HEAD_BYTES))
    while isinstance(act, Read):
        act = cur.got(f.read(act.pos, act.n))
    assert cur.offset == f.zeros and HOLE_PROBE < HOLE_SCAN


# ----------------------------------------------------------------------------------------------
# the sources, with logrotate's own copytruncate

LINE = re.compile(rb"line (\d{6}) ")


class Writer(WriterThread):
    """A server writing numbered lines 1,000/s to `path` for `duration` s through one
    descriptor it never reopens, with the shell's `>>` (append) or `>` (not)."""

    def __init__(self, path: Path, append: bool, duration: float = 2.5) -> None:
        super().__init__()
        self.path, self.append, self.duration = path, append, duration

    def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC |
                     (os.O_APPEND if self.append else 0))
        start = tick = time.monotonic()
        while time.monotonic() - start < self.duration:
            first = self.written + 1
            os.write(fd, b"".join(numbered(i) for i in range(first, first + 10)))
            self.written += 10
            tick += 0.01
            time.sleep(max(0.0, tick - time.monotonic()))
        os.close(fd)


def logrotate(log: Path, state: Path, *extra: str) -> None:
    conf = log.parent / "logrotate.conf"
    conf.write_text(f"{log} {{\n  copytruncate\n  rotate 3\n  missingok\n" +
                    "".join(f"  {x}\n" for x in extra) + "}\n")
    subprocess.run(["logrotate", "-f", "-s", str(state), str(conf)], check=True,
                   capture_output=True, timeout=30)


def delivered(r: Reader) -> tuple[list[int], bytes]:
    data = b"".join(e.data for e in r.events if isinstance(e, Data))
    return [int(m.group(1)) for m in LINE.finditer(data)], data


def read_all_1600(main: Callable[[], Awaitable[Reader]], fd: int) -> Reader:
    """Run `main` (the writer's `fd` closed after it): lines 1-1,600 read once, in order, no
    zero byte, nothing skipped (the 500 written just before the copytruncate too)."""
    try:
        r = run(main())
    finally:
        os.close(fd)
    nums, data = delivered(r)
    assert nums == list(range(1, 1601)) and b"\0" not in data
    assert not [e for e in r.events if isinstance(e, Skipped)]
    return r


def check(r: Reader, writer: Writer, what: str) -> None:
    """Every line read once, in order, no zero byte handed on.  A line logrotate lost
    itself (written between its copy and its truncation: its copy and fsync take a few ms,
    one or two of the writer's 10-line batches at most) is counted to the byte when the
    writer left a hole; an appending writer tells nothing of it."""
    nums, data = delivered(r)
    lost, dup = loss(nums, writer.written)
    gone = sorted(set(range(1, writer.written + 1)) - set(nums))
    skipped = sum(e.nbytes for e in r.events if isinstance(e, Skipped))
    print(f"{what}: {lost} of {writer.written} lost, {skipped} bytes counted")
    assert dup == 0 and b"\0" not in data and nums == sorted(nums)
    if not writer.append:
        assert skipped == sum(len(numbered(i)) for i in gone)


async def through_copytruncate(r: Reader, log: Path, writer: Writer, *extra: str) -> None:
    await r.wait(lambda: any(isinstance(e, Opened) for e in r.events), 20, "the first Opened")
    writer.start()
    await r.wait(lambda: writer.written >= 1000, 20, "1,000 lines written")
    await asyncio.to_thread(logrotate, log, log.parent / "state", *extra)
    await r.wait(lambda: not writer.is_alive(), 30, "the writer")
    assert writer.error is None
    await r.wait(lambda: writer.written in delivered(r)[0], 30, "the last line")


@pytest.mark.parametrize("append", [True, False], ids=["append", "no-append"])
def test_local_copytruncate_reads_every_line_and_no_zero(tmp_path: Path, append: bool) -> None:
    """Debian's logrotate (copytruncate) under a server writing 1,000 lines/s: every line
    read that logrotate did not lose itself, none twice, no zero byte handed on; what it
    lost between its copy and its truncation (a writer without append tells) is counted."""
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    writer = Writer(log, append)

    async def main() -> Reader:
        async with Reader(LocalFileSource(str(log), batch_interval=0.1)) as r:
            await through_copytruncate(r, log, writer)
            return r

    check(run(main()), writer, f"local, append={append}")


@pytest.mark.parametrize("compress,pattern", [(False, False), (True, False), (False, True)],
                         ids=["plain", "compress", "pattern"])
@pytest.mark.parametrize("append", [True, False], ids=["append", "no-append"])
def test_local_what_was_not_read_at_the_truncation_is_read_from_the_copy(
        tmp_path: Path, append: bool, compress: bool, pattern: bool) -> None:
    """500 lines written right after a read, then logrotate's copytruncate before the next
    read (the daemon reads a busy log in batches; 2 s here): all 500 read from the copy,
    then the new lines (before: the 500 lost, and nothing said).  With `compress` the copy
    is `server-1.log.1.gz` by then: read from the archive.  A pattern target
    (`server-*.log`) reads the truncated file on: it was not left."""
    log = tmp_path / "server-1.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_APPEND if append else 0))
    os.write(fd, b"".join(numbered(i) for i in range(1, 1001)))

    async def main() -> Reader:
        source = str(tmp_path / "server-*.log") if pattern else str(log)
        async with Reader(LocalFileSource(source, batch_interval=2.0)) as r:
            await r.wait(lambda: 1000 in delivered(r)[0], 20, "the first 1,000 lines")
            os.write(fd, b"".join(numbered(i) for i in range(1001, 1501)))
            await asyncio.to_thread(logrotate, log, tmp_path / "state",
                                    *(["compress"] if compress else []))
            os.write(fd, b"".join(numbered(i) for i in range(1501, 1601)))
            await r.wait(lambda: 1600 in delivered(r)[0], 20, "the new lines")
            return r

    read_all_1600(main, fd)
    copy = Path(f"{log}.1.gz" if compress else f"{log}.1")
    assert copy.exists() and not (compress and Path(f"{log}.1").exists())


def test_a_restart_after_a_copytruncate_resumes_in_the_copy(tmp_path: Path) -> None:
    """The daemon is down across the copytruncate: on restart the rest of the old log is
    read from server.log.1 (it was counted lost before), then the new log."""
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        f.write(b"".join(numbered(i) for i in range(1, 1001)))

    async def first() -> Position:
        src = LocalFileSource(str(log))
        async with Reader(src) as r:
            await r.wait(lambda: 1000 in delivered(r)[0], 20, "the first 1,000 lines")
        assert src.cursor.offset is not None
        return Position(src.cursor.offset, 1001, src.cursor.identity,
                        digest(src.cursor.last), "t")

    saved = run(first())
    with open(log, "ab") as f:
        f.write(b"".join(numbered(i) for i in range(1001, 1501)))
    logrotate(log, tmp_path / "state")
    with open(log, "ab") as f:
        f.write(b"".join(numbered(i) for i in range(1501, 1601)))

    async def second() -> Reader:
        async with Reader(LocalFileSource(str(log), start=saved)) as r:
            await r.wait(lambda: 1600 in delivered(r)[0], 20, "the new log")
            return r

    r = run(second())
    assert delivered(r)[0] == list(range(1001, 1601))
    assert not [e for e in r.events if isinstance(e, Skipped)]


@pytest.mark.parametrize("transport", ["stream", "sftp"])
@pytest.mark.parametrize("append", [True, False], ids=["append", "no-append"])
def test_ssh_copytruncate_reads_every_line_and_no_zero(
        tmp_path: Path, sshd_server: SSHServer, transport: str, append: bool) -> None:  # noqa: F811
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    writer = Writer(log, append)

    async def main() -> Reader:
        pool = SSHPool()
        try:
            async with Reader(ssh_source(sshd_server, log, pool, transport)) as r:
                await through_copytruncate(r, log, writer)
                return r
        finally:
            await pool.close()

    check(run(main()), writer, f"ssh {transport}, append={append}")


@pytest.mark.parametrize("transport", ["stream", "sftp"])
def test_ssh_a_copytruncate_during_an_outage_reads_the_copy(
        tmp_path: Path, sshd_server: SSHServer, transport: str) -> None:  # noqa: F811
    """sshd down; 500 lines written, logrotate's copytruncate, 100 more (with `>`: after
    the hole); sshd back: the 500 read from server.log.1, then the 100 (before, over the
    streamed reader: the same inode with other bytes, the 500 counted lost)."""
    log = tmp_path / "server.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)     # the shell's `>`
    os.write(fd, b"".join(numbered(i) for i in range(1, 1001)))

    async def main() -> Reader:
        pool = SSHPool()
        try:
            async with Reader(ssh_source(sshd_server, log, pool, transport)) as r:
                await r.wait(lambda: 1000 in delivered(r)[0], 20, "the first 1,000 lines")
                await asyncio.to_thread(sshd_server.stop)
                os.write(fd, b"".join(numbered(i) for i in range(1001, 1501)))
                await asyncio.to_thread(logrotate, log, tmp_path / "state")
                os.write(fd, b"".join(numbered(i) for i in range(1501, 1601)))
                await asyncio.to_thread(sshd_server.start)
                await r.wait(lambda: 1600 in delivered(r)[0], 40, "the new lines")
                return r
        finally:
            await pool.close()

    read_all_1600(main, fd)
