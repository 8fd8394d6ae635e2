"""Local-file, command and stdin sources, as the follower consumes them.

The promise under test (sources/base.py): a source reopens by itself and never drops or
repeats a byte of a file it can still see.  The only loss allowed is the copytruncate
window: what a writer appended after the watcher's last read and before the truncation.

No sleeps are used to synchronise: every wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import sys
import collections
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import structlog

from logwatch.rules.locate import startup_locator
from logwatch.follow import Follower
from logwatch.pipeline import LogPipeline
from logwatch.state.positions import PositionStore
from logwatch.rules.pack import load_pack
from logwatch.sources import (
    Data, Opened, SourceError, SourceState, make_source,
)
from logwatch.sources import command
from logwatch.sources.command import CommandSource
from logwatch.sources.local import LocalFileSource
from support.pump import EventPump

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

SGLANG = load_pack("sglang")
VLLM = load_pack("vllm")


def new_follower(source: Any) -> Follower:
    return Follower("test", source, lambda p: LogPipeline(p), SGLANG, [])


def wait_in_thread(pred: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `pred` from a plain thread until it holds (deadline: AssertionError)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


class Reader(EventPump):
    """Runs `source.events()` in a task, keeps every event, feeds a Follower if given."""

    def __init__(self, source: Any, follower: Follower | None = None,
                 on_event: Callable[[Any], None] | None = None) -> None:
        super().__init__(source, follower)
        self.on_event = on_event
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    async def __aenter__(self) -> "Reader":
        self.task = asyncio.create_task(self._pump())
        return self

    def seen(self, ev: Any) -> None:
        if self.on_event is not None:
            self.on_event(ev)

    async def _pump(self) -> None:
        try:
            await self.pump()
        except BaseException as e:  # noqa: BLE001 - surfaced by wait()
            self.error = e
            raise

    async def wait(self, pred: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not pred():
            if self.error is not None:
                raise AssertionError(f"source failed: {self.error!r}") from self.error
            assert self.task is not None
            if self.task.done():
                raise AssertionError(f"source ended while waiting for {what}; events: "
                                     f"{self.brief()}")
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; events: "
                                     f"{self.brief()}")
            await asyncio.sleep(0.01)

    async def wait_end(self, timeout: float = 10.0) -> None:
        await self.wait(lambda: self.task is not None and self.task.done(), timeout, "the end")

    def brief(self) -> list[str]:
        out = []
        for ev in self.events[-30:]:
            if isinstance(ev, Data):
                out.append(f"Data({len(ev.data)}B @ {ev.offset})")
            else:
                out.append(repr(ev))
        return out

    async def __aexit__(self, *exc: object) -> None:
        await self.source.close()
        assert self.task is not None
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout=2)
        except asyncio.TimeoutError:
            self.task.cancel()
        except BaseException:  # noqa: BLE001 - reported by the test itself
            pass
        if not self.task.done():
            self.task.cancel()
        try:
            await self.task
        except BaseException:  # noqa: BLE001
            pass

    # views (and EventPump's) ---------------------------------------------------------------
    def data_bytes(self) -> int:
        return sum(len(e.data) for e in self.events if isinstance(e, Data))

    def segments(self) -> list[tuple[Opened, bytes]]:
        """The bytes delivered per Opened; asserts each Data continues at the right offset."""
        segs: list[tuple[Opened, bytearray]] = []
        for ev in self.events:
            if isinstance(ev, Opened):
                segs.append((ev, bytearray()))
            elif isinstance(ev, Data):
                assert segs, "Data before any Opened"
                op, buf = segs[-1]
                assert ev.offset == op.offset + len(buf), \
                    f"Data at {ev.offset}, expected {op.offset + len(buf)} ({op.reason})"
                buf += ev.data
        return [(op, bytes(b)) for op, b in segs]

    def stream(self) -> bytes:
        """All bytes of a single-segment source (or of all segments, concatenated)."""
        return b"".join(b for _, b in self.segments())


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ----------------------------------------------------------------------------------------------
# 1. the fault test: rename rotation x2, copytruncate, delete + recreate, 100,000 lines

N_LINES = 100_000
BATCH = 100                       # lines per write(2)
PACE = 0.011                      # seconds between batches: 1000 batches, ~12-15 s in all
ROTATE1, COPYTRUNC, ROTATE2, RECREATE = 200, 400, 600, 800   # batch indices of the faults
LINE_RE = re.compile(rb"line (\d{6}) ")


def numbered_line(i: int) -> bytes:
    body = f"line {i:06d} "
    width = 60 + (i * 7919) % 41          # 60..100 bytes with the newline
    pad = chr(ord("a") + i % 26) * (width - len(body) - 1)
    return (body + pad + "\n").encode()


class Progress:
    """What the consumer has seen, read by the writer thread at its sync points."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.max_line = 0
        self.reasons: list[str] = []
        self.deleted_seen = False

    def snapshot_reasons(self) -> list[str]:
        with self.lock:
            return list(self.reasons)


class LineCollector:
    """Turns Data into line numbers as they arrive (per Opened: no line spans two files)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.partial = b""
        self.delivered: list[int] = []
        self.fragments: list[tuple[str, bytes]] = []   # (reason of its segment, bytes)
        self.reason = ""

    def __call__(self, ev: Any) -> None:
        if isinstance(ev, Opened):
            if self.partial:
                self.fragments.append((self.reason, self.partial))
            self.partial = b""
            self.reason = ev.reason
            with self.progress.lock:
                self.progress.reasons.append(ev.reason)
        elif isinstance(ev, SourceState):
            if "was deleted" in ev.message:
                with self.progress.lock:
                    self.progress.deleted_seen = True
        elif isinstance(ev, Data):
            buf = self.partial + ev.data
            cut = buf.rfind(b"\n") + 1
            self.partial = buf[cut:]
            nums = [int(m.group(1)) for m in LINE_RE.finditer(buf[:cut])]
            assert len(nums) == buf[:cut].count(b"\n"), "a line without its number"
            self.delivered += nums
            if nums:
                with self.progress.lock:
                    self.progress.max_line = max(self.progress.max_line, nums[-1])


class FaultyWriter(threading.Thread):
    """Appends N_LINES numbered lines and does the four faults on the way."""

    def __init__(self, path: Path, progress: Progress) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.progress = progress
        self.error: BaseException | None = None
        self.written = 0                      # last line number written
        self.copytrunc_window: range = range(0)
        self.done = threading.Event()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write_batch(self, fd: int) -> None:
        first = self.written + 1
        last = min(N_LINES, self.written + BATCH)
        os.write(fd, b"".join(numbered_line(i) for i in range(first, last + 1)))
        self.written = last

    def _wait_reason(self, reason: str, count: int) -> None:
        try:
            wait_in_thread(lambda: self.progress.snapshot_reasons().count(reason) >= count, 20,
                           f"the source to report Opened(reason={reason!r}) x{count}")
        except AssertionError as e:
            raise AssertionError(f"{e}; reasons so far: {self.progress.snapshot_reasons()}") from None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - checked by the test
            self.error = e
        finally:
            self.done.set()

    def _run(self) -> None:
        fd = self._open()
        for b in range(N_LINES // BATCH):
            if b == ROTATE1:
                # (a) rename rotation: close, rename to .1, open a new file at the path
                os.close(fd)
                os.rename(self.path, f"{self.path}.1")
                fd = self._open()
            elif b == COPYTRUNC:
                self._wait_reason("rotated", 1)
                # (b) copytruncate.  Sync point: wait until the source has delivered every
                # line written so far; then write ONE more batch and copy + truncate at once.
                # Only that batch (the copytruncate window) may be lost.
                upto = self.written
                wait_in_thread(lambda: self.progress.max_line >= upto, 20,
                               f"the source to catch up to line {upto}")
                self._write_batch(fd)
                self.copytrunc_window = range(upto + 1, self.written + 1)
                shutil.copyfile(self.path, f"{self.path}.copy")
                os.ftruncate(fd, 0)
            elif b == ROTATE2:
                self._wait_reason("truncated", 1)
                os.close(fd)
                os.rename(self.path, f"{self.path}.2")
                fd = self._open()
            elif b == RECREATE:
                self._wait_reason("rotated", 2)
                # (c) delete, and create the file again once the source has seen it gone
                # (if both happened between two looks, it would rightly be a "rotation")
                os.close(fd)
                os.unlink(self.path)
                wait_in_thread(lambda: self.progress.deleted_seen, 20,
                               "the source to notice the deletion")
                fd = self._open()
            if self.written >= N_LINES:
                break
            self._write_batch(fd)
            time.sleep(PACE)   # pacing of the writer, not a synchronisation
        os.close(fd)


@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
def test_no_line_lost_or_repeated_through_rotation_truncation_and_recreation(
        tmp_path: Path, use_inotify: bool) -> None:
    path = tmp_path / "server.log"
    progress = Progress()
    collector = LineCollector(progress)
    writer = FaultyWriter(path, progress)

    async def main() -> Reader:
        source = LocalFileSource(str(path), use_inotify=use_inotify, rotate_wait=1.0)
        follower = new_follower(source)
        async with Reader(source, follower, on_event=collector) as reader:
            writer.start()
            await reader.wait(lambda: writer.done.is_set(), 60, "the writer to finish")
            assert writer.error is None, f"writer failed: {writer.error!r}"
            await reader.wait(lambda: progress.max_line >= N_LINES, 20,
                              f"line {N_LINES} (last seen {progress.max_line})")
        assert follower.status.gaps == 0, follower.status
        assert follower.status.overlaps == 0, follower.status
        return reader

    reader = run(main())
    writer.join(5)

    # the reasons: attach, then each fault exactly once as what it is
    reasons = collections.Counter(op.reason for op in reader.opened())
    assert reasons == {"attach": 1, "rotated": 2, "truncated": 1, "recreated": 1}, \
        [f"{op.reason}@{op.offset}" for op in reader.opened()]

    delivered = collector.delivered
    # no line repeated, strictly in order
    bad = [(a, b) for a, b in zip(delivered, delivered[1:]) if b <= a]
    assert not bad, f"lines out of order or repeated (first pairs): {bad[:10]}"
    # every line present except, possibly, the copytruncate window: the batch written after
    # the writer's sync point (the source had delivered everything before it) and before the
    # truncation
    window = set(writer.copytrunc_window)
    assert len(window) == BATCH
    missing = set(range(1, N_LINES + 1)) - set(delivered)
    assert missing <= window, f"lost outside the copytruncate window: {sorted(missing - window)[:20]}"
    # a partial line can only be the end of the truncated file, inside the window
    for reason, frag in collector.fragments:
        assert reason == "rotated", (reason, frag[:80])      # the file that got truncated
        m = LINE_RE.match(frag)
        assert m is None or int(m.group(1)) in window, frag[:80]
    assert not collector.partial

    # byte-exact: each segment is what that file held
    segs = reader.segments()
    assert [op.reason for op, _ in segs] == ["attach", "rotated", "truncated", "rotated",
                                             "recreated"]
    assert all(op.offset == 0 for op, _ in segs)
    assert segs[0][1] == Path(f"{path}.1").read_bytes()
    assert Path(f"{path}.copy").read_bytes().startswith(segs[1][1])
    assert segs[2][1] == Path(f"{path}.2").read_bytes()
    assert segs[4][1] == path.read_bytes()
    print(f"inotify={use_inotify}: {len(missing)} line(s) lost in the copytruncate window "
          f"{writer.copytrunc_window.start}..{writer.copytrunc_window.stop - 1}")


@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
def test_truncation_followed_at_once_by_more_than_was_read(tmp_path: Path,
                                                           use_inotify: bool) -> None:
    """`> server.log` (or copytruncate) and the restarted server writes more than the watcher
    had read before the source looks again: the file is no shorter than our offset, but the
    bytes before it changed.  The new content must be read from byte 0, not from the old
    offset (which would hand on the middle of the new file as if it continued the old one
    and lose its start)."""
    path = tmp_path / "server.log"
    old = b"".join(f"old line {i:04d} before the restart\n".encode() for i in range(60))
    new = b"".join(f"NEW line {i:04d} after the restart!!\n".encode() for i in range(150))
    assert len(new) > 2 * len(old)
    path.write_bytes(old)

    async def main() -> Reader:
        async with Reader(LocalFileSource(str(path), use_inotify=use_inotify)) as r:
            await r.wait(lambda: r.data_bytes() == len(old), 5, "the old content")
            with open(path, "r+b") as f:      # same inode: truncate, then the new server writes
                f.truncate(0)
                f.write(new)
            await r.wait(lambda: r.segments()[-1][1] == new, 5,
                         "the new content, read from byte 0 after an Opened")
        return r

    r = run(main())
    segs = r.segments()
    assert [(op.reason, op.offset, data) for op, data in segs] == \
        [("attach", 0, old), ("truncated", 0, new)], \
        [(op.reason, op.offset, data[:40], len(data)) for op, data in segs]


@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
def test_rename_rotation_seen_before_the_new_file_exists_is_a_rotation(
        tmp_path: Path, use_inotify: bool) -> None:
    """logrotate's `create` mode: rename the log away, create a new one a moment later.  If
    the source looks in between, the old file is not deleted (it lives on as .1): this is a
    rotation, not a deletion + recreation."""
    path = tmp_path / "server.log"
    path.write_bytes(b"old 1\nold 2\n")

    async def main() -> Reader:
        async with Reader(LocalFileSource(str(path), use_inotify=use_inotify,
                                          rotate_wait=1.0)) as r:
            await r.wait(lambda: r.data_bytes() == 12, 5, "the old file")
            n_states = len(r.states())
            with open(path, "ab") as f:
                f.write(b"old 3\n")       # written just before the rotation
            os.rename(path, f"{path}.1")
            # sync point: the source has looked at the path while it was missing
            await r.wait(lambda: len(r.states()) > n_states, 10,
                         "the source to notice the path is gone")
            path.write_bytes(b"new 1\n")
            await r.wait(lambda: r.data_bytes() == 24, 10, "the new file")
        return r

    r = run(main())
    segs = r.segments()
    assert [s for _, s in segs] == [b"old 1\nold 2\nold 3\n", b"new 1\n"]
    assert [op.reason for op, _ in segs] == ["attach", "rotated"], \
        ([op.reason for op, _ in segs], [s.message for s in r.states()])


# ----------------------------------------------------------------------------------------------
# 2. a file that does not exist yet

@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
@pytest.mark.parametrize("dir_exists", [True, False], ids=["dir-exists", "no-dir-yet"])
def test_waits_for_the_file_to_appear(tmp_path: Path, use_inotify: bool, dir_exists: bool) -> None:
    d = tmp_path / "logs"
    if dir_exists:
        d.mkdir()
    path = d / "server.log"

    async def main() -> None:
        async with Reader(LocalFileSource(str(path), use_inotify=use_inotify)) as r:
            await r.wait(lambda: bool(r.states()), 5, "a first state")
            first = r.states()[0]
            assert first.up is False and not first.fatal
            assert first.message == f"waiting for {path} to appear"
            assert not r.opened()
            d.mkdir(exist_ok=True)
            path.write_bytes(b"hello\nworld\n")
            await r.wait(lambda: r.data_bytes() >= 12, 10, "the data of the new file")
            op = r.opened()
            assert len(op) == 1 and op[0].reason == "attach" and op[0].offset == 0
            assert r.stream() == b"hello\nworld\n"
            assert r.states()[-1].up
            # said once, not at every poll
            assert sum("waiting for" in s.message for s in r.states()) == 1

    run(main())


# ----------------------------------------------------------------------------------------------
# 3. resume from a saved position

def lines_bytes(a: int, b: int, tag: str = "x") -> bytes:
    return b"".join(f"[2026-01-01 10:00:00] {tag} log line number {i:05d}\n".encode()
                    for i in range(a, b + 1))


async def read_until(source: Any, nbytes: int, follower: Follower | None = None) -> Reader:
    async with Reader(source, follower) as r:
        await r.wait(lambda: r.data_bytes() >= nbytes, 10, f"{nbytes} bytes")
    return r


def first_run(tmp_path: Path) -> tuple[Path, bytes, Any]:
    """Read a file that ends mid-line; save the follower's position; return it loaded."""
    path = tmp_path / "server.log"
    part1 = lines_bytes(1, 80) + b"[2026-01-01 10:00:00] x log line num"
    path.write_bytes(part1)
    source = LocalFileSource(str(path))
    follower = new_follower(source)
    r = run(read_until(source, len(part1), follower))
    assert r.stream() == part1
    pos = follower.position()
    assert pos is not None
    # after the last complete line, on the line after it
    assert pos.offset == len(lines_bytes(1, 80)) and pos.line_number == 81
    assert pos.tail_sha is not None and pos.identity is not None
    store = PositionStore(tmp_path / "state")
    store.save(str(path), pos, {"note": "first run"})
    loaded, extra = store.load(str(path))
    assert loaded == pos and extra == {"note": "first run"}
    return path, r.stream(), loaded


def test_resume_at_the_saved_offset_without_repeating_or_losing_bytes(tmp_path: Path) -> None:
    path, got1, pos = first_run(tmp_path)
    with open(path, "ab") as f:   # the server went on writing while we were away
        f.write(b"ber 00081\n" + lines_bytes(82, 150))
    full = path.read_bytes()

    source = LocalFileSource(str(path), start=pos)
    follower = new_follower(source)
    r = run(read_until(source, len(full) - pos.offset, follower))
    op = r.opened()
    assert len(op) == 1
    assert (op[0].reason, op[0].offset, op[0].line_number, op[0].new_file) == \
        ("resume", pos.offset, pos.line_number, False)
    got2 = r.stream()
    # what the first run handed to the rules + what the second run read == the file, exactly
    assert got1[:pos.offset] + got2 == full
    assert follower.status.gaps == 0 and follower.status.overlaps == 0
    assert follower.pipe is not None and follower.pipe.framer.line_number == 151


def _replace_other_same_size(path: Path, pos: Any) -> None:
    data = path.read_bytes()
    new = lines_bytes(1, 200, tag="y")[: len(data)]
    assert len(new) == len(data) and new[:50] != data[:50]
    tmp = path.with_suffix(".new")
    tmp.write_bytes(new)
    os.replace(tmp, path)


def _replace_other_bigger(path: Path, pos: Any) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_bytes(lines_bytes(1, 400, tag="y"))
    os.replace(tmp, path)


def _same_head_other_tail_in_place(path: Path, pos: Any) -> None:
    """Same inode, same first KiB, different bytes just before the saved offset."""
    with open(path, "r+b") as f:
        f.seek(pos.offset - 20)
        f.write(b"Z" * 19)
        f.seek(0, os.SEEK_END)
        f.write(lines_bytes(81, 90))


def _same_head_other_tail_new_file(path: Path, pos: Any) -> None:
    data = bytearray(path.read_bytes())
    data[pos.offset - 20: pos.offset - 1] = b"Z" * 19
    tmp = path.with_suffix(".new")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, path)


def _shorter_in_place(path: Path, pos: Any) -> None:
    """Same inode, same head, now shorter than the saved offset."""
    with open(path, "r+b") as f:
        f.truncate(pos.offset - 300)


@pytest.mark.parametrize("replace", [
    _replace_other_same_size, _replace_other_bigger, _same_head_other_tail_in_place,
    _same_head_other_tail_new_file, _shorter_in_place,
], ids=lambda f: f.__name__.strip("_"))
def test_a_replaced_file_is_not_resumed(tmp_path: Path, replace: Callable[[Path, Any], None]) -> None:
    path, _, pos = first_run(tmp_path)
    replace(path, pos)
    full = path.read_bytes()
    assert len(full) > 1024 + 300   # the head hash covers the first KiB only

    r = run(read_until(LocalFileSource(str(path), start=pos), len(full)))
    op = r.opened()
    assert len(op) == 1
    assert (op[0].reason, op[0].offset, op[0].line_number, op[0].new_file) == ("attach", 0, 1, True)
    assert r.stream() == full


def test_replaced_file_attaches_at_its_latest_startup(tmp_path: Path) -> None:
    path, _, pos = first_run(tmp_path)
    first = b"[2026-01-02 09:00:00] server_args=ServerArgs(model_path='a')\n" + lines_bytes(1, 30)
    second = b"[2026-01-02 09:10:00] server_args=ServerArgs(model_path='b')\n" + lines_bytes(1, 30)
    tmp = path.with_suffix(".new")
    tmp.write_bytes(first + second)
    os.replace(tmp, path)
    r = run(read_until(make_source(str(path), locator=startup_locator(SGLANG), start=pos), len(second)))
    op = r.opened()[0]
    assert (op.reason, op.offset, op.line_number) == ("attach", len(first), 32)
    assert r.stream() == second


CORRUPT = {
    "garbage": "{not json at all",
    "empty": "",
    "binary": "\x00\x00\x00\x00",
    "wrong-version": '{"version": 99, "target": "t", "position": {"offset": 5, "line_number": 2}}',
    "no-position": '{"version": 1, "target": "t"}',
    "position-not-object": '{"version": 1, "position": "abc"}',
    "offset-not-int": '{"version": 1, "position": {"offset": "ten"}}',
    "json-list": "[]",
    "json-null": "null",
    "identity-not-object": '{"version": 1, "position": {"offset": 1, "identity": "zz"}}',
}


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_corrupt_positions_file_means_first_attach_and_a_warning(tmp_path: Path,
                                                                 content: str) -> None:
    store = PositionStore(tmp_path)
    p = store.path("/var/log/server.log")
    p.parent.mkdir(parents=True)
    p.write_text(content, encoding="latin-1")
    with structlog.testing.capture_logs() as logs:
        got = store.load("/var/log/server.log")
    assert got == (None, {})
    warnings = [e for e in logs if e.get("log_level") == "warning"]
    assert warnings, logs
    assert "position file" in warnings[0]["event"]


def test_missing_positions_file_is_first_attach_without_warning(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        assert PositionStore(tmp_path).load("nothing-here") == (None, {})
    assert not [e for e in logs if e.get("log_level") == "warning"]


def test_positions_are_written_atomically(tmp_path: Path) -> None:
    from logwatch.sources.base import FileIdentity, Position
    store = PositionStore(tmp_path / "state")
    ident = FileIdentity(1, 2, 10, "ab" * 20)
    pos1 = Position(100, 5, ident, "cd" * 20, "ssh://h/x.log")
    pos2 = Position(200, 9, ident, None, "ssh://h/x.log")
    store.save("ssh://h/x.log", pos1)
    store.save("ssh://h/x.log", pos2, {"epoch": 2})
    assert [q.name for q in store.dir.iterdir()] == [store.path("ssh://h/x.log").name]
    assert store.load("ssh://h/x.log") == (pos2, {"epoch": 2})
    # a write that fails half way leaves the previous checkpoint and no temp file behind
    with pytest.raises(TypeError):
        store.save("ssh://h/x.log", pos1, {"bad": object()})
    assert [q.name for q in store.dir.iterdir()] == [store.path("ssh://h/x.log").name]
    assert store.load("ssh://h/x.log") == (pos2, {"epoch": 2})
    store.forget("ssh://h/x.log")
    assert list(store.dir.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# 4. first attach: at the latest startup

SG_START = "[2026-01-01 10:{m:02d}:00] server_args=ServerArgs(model_path='x')\n"
VL_START = ("(APIServer pid=1) INFO 10-03 10:{m:02d}:00 [api_server.py:1839] "
            "vLLM API server version 0.11.0\n")


def _startup_file(tmp_path: Path, marker: str | None, n_startups: int) -> tuple[Path, bytes, int, int]:
    body = []
    for k in range(n_startups):
        if marker is not None:
            body.append(marker.format(m=k))
        body += [f"[2026-01-01 10:{k:02d}:{s:02d}] startup {k} line {s}\n" for s in range(1, 6)]
    data = "".join(body).encode()
    path = tmp_path / "server.log"
    path.write_bytes(data)
    if marker is None or n_startups == 0:
        return path, data, 0, 1
    last = marker.format(m=n_startups - 1).encode()
    off = data.rindex(last)
    return path, data, off, data[:off].count(b"\n") + 1


@pytest.mark.parametrize("pack,marker,n", [
    (SGLANG, SG_START, 2), (SGLANG, SG_START, 3), (SGLANG, SG_START, 1), (SGLANG, None, 2),
    (VLLM, VL_START, 2), (VLLM, None, 1), (VLLM, SG_START, 2),
], ids=["sglang-2", "sglang-3", "sglang-1", "sglang-none", "vllm-2", "vllm-none",
        "vllm-pack-on-sglang-log"])
def test_first_attach_starts_at_the_latest_startup(tmp_path: Path, pack: Any, marker: str | None,
                                                   n: int) -> None:
    path, data, off, line = _startup_file(tmp_path, marker, n)
    if pack is VLLM and marker is SG_START:
        off, line = 0, 1       # the vLLM pack has no SGLang marker: read from the start
    r = run(read_until(make_source(str(path), locator=startup_locator(pack)), len(data) - off))
    op = r.opened()
    assert len(op) == 1
    assert (op[0].reason, op[0].offset, op[0].line_number) == ("attach", off, line)
    assert r.stream() == data[off:]
    first_data = next(e for e in r.events if isinstance(e, Data))
    assert first_data.offset == off


VL34_LAUNCH = ("(APIServer pid=1) INFO 12-01 10:{m:02d}:00 [startup.py:18] vLLM server version "
               "0.34.0, serving model Qwen/Qwen3-32B\n"
               "(APIServer pid=1) INFO 12-01 10:{m:02d}:00 [startup.py:96] non-default args: "
               "{{'model': 'Qwen/Qwen3-32B'}}\n")
TRT_START = "[12/20/2025-04:{m:02d}:04] [TRT-LLM] [I] Using LLM with PyTorch backend\n"
QUOTED = ("(APIServer pid=1) INFO 12-01 11:00:00 [request_logger.py:40] Received request "
          "chatcmpl-1: params: SamplingParams(n=1), prompt: 'my log: (APIServer pid=1) INFO "
          "12-01 10:00:00 [startup.py:18] vLLM server version 0.34.0, serving model x'\n")


@pytest.mark.parametrize("marker,tail", [
    (SG_START, ""), (VL_START, ""), (VL34_LAUNCH, ""), (VL34_LAUNCH, QUOTED), (TRT_START, ""),
], ids=["sglang", "vllm-0.11", "vllm-0.34", "vllm-prompt-quotes-a-launch", "trtllm"])
def test_first_attach_under_rules_auto_starts_at_the_latest_launch(
        tmp_path: Path, marker: str, tail: str) -> None:
    """`rules: auto` (the daemon's and `watch`'s default): the latest launch of any engine's
    log, found by every shipped pack's own markers, at its first line (vLLM 0.34 prints its
    version, then its arguments: the launch begins at the version line); a request log's
    prompt quoting a launch line is no launch.  Before, the packs' markers were read with
    SGLang's envelope: a vLLM or TensorRT-LLM log was read from byte 0 (every old startup
    again), and with `rules: vllm` a 0.34 launch began at its arguments, its version lost."""
    from logwatch.rules.pack import load_all_shipped
    path, data, off, line = _startup_file(tmp_path, marker, 3)
    if tail:
        data += tail.encode()
        path.write_bytes(data)
    auto = [p for p in load_all_shipped() if p.detect]
    r = run(read_until(make_source(str(path), locator=startup_locator(auto)), len(data) - off))
    assert (r.opened()[0].offset, r.opened()[0].line_number) == (off, line)
    if marker is VL34_LAUNCH:
        assert startup_locator(VLLM).in_file(str(path)) == (off, line)   # type: ignore[union-attr]


def test_first_attach_to_a_supervised_vllm_launch_starts_at_its_supervisor(
        tmp_path: Path) -> None:
    """vLLM's DP supervisor starts two API servers, each printing its version line and its
    arguments: one launch (the machine's `servers:`), which a daemon attaching reads from
    its supervisor's line.  Before: from the second server's last marker, the launch read as
    one server's, "ready" when the first of them served."""
    from logwatch.rules.pack import load_all_shipped
    one = (Path(__file__).parent / "fixtures" / "built" / "vllm-034-dp-supervisor.log").read_bytes()
    path = tmp_path / "server.log"
    path.write_bytes(one + one)
    want = (len(one), one.count(b"\n") + 1)
    for packs in ([VLLM], [p for p in load_all_shipped() if p.detect]):
        loc = startup_locator(packs)
        assert loc is not None and loc.in_file(str(path)) == want


def test_without_pack_first_attach_reads_from_byte_0(tmp_path: Path) -> None:
    path, data, _, _ = _startup_file(tmp_path, SG_START, 2)
    r = run(read_until(make_source(str(path)), len(data)))
    assert (r.opened()[0].offset, r.opened()[0].line_number) == (0, 1)
    assert r.stream() == data


# ----------------------------------------------------------------------------------------------
# 4b. a pattern: one log file per launch (sources/newest.py)

def _launch_file(d: Path, name: str, k: int, lines: int = 5, mtime: float | None = None) -> bytes:
    data = (SG_START.format(m=k) + "".join(f"[2026-01-01 10:{k:02d}:{s:02d}] launch {k} "
                                           f"line {s}\n" for s in range(1, lines + 1))).encode()
    (d / name).write_bytes(data)
    if mtime is not None:
        os.utime(d / name, (mtime, mtime))
    return data


@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
def test_a_pattern_follows_each_new_launch_file_once_and_in_order(tmp_path: Path,
                                                                   use_inotify: bool) -> None:
    """`/logs/server-*.log`: the newest match at attach (its latest startup), then every
    newer file a relaunch writes, from byte 0, the one before drained first; an older file
    written again, and the followed file deleted, never send it back to an old one."""
    d = tmp_path / "logs"
    d.mkdir()
    now = time.time()
    _launch_file(d, "server-1.log", 1, mtime=now - 300)          # an old launch: not read
    second = _launch_file(d, "server-2.log", 2, mtime=now - 200)
    pattern = str(d / "server-*.log")

    async def main() -> Reader:
        src = make_source(pattern, locator=startup_locator(SGLANG), poll=not use_inotify,
                          rotate_wait=0.3)
        async with Reader(src) as r:
            await r.wait(lambda: r.data_bytes() >= len(second), 10, "the newest at attach")
            with open(d / "server-2.log", "ab") as f:     # the launch goes on a little
                f.write(b"[2026-01-01 10:02:09] launch 2 last words\n")
            await r.wait(lambda: r.data_bytes() >= len(second) + 42, 10, "launch 2's tail")
            third = _launch_file(d, "server-3.log", 3)    # a relaunch: a new file
            await r.wait(lambda: len(r.opened()) == 2 and r.segments()[-1][1] == third, 10,
                         "the third launch's file")
            # the old launch writes again: left, never read again
            with open(d / "server-1.log", "ab") as f:
                f.write(b"[2026-01-01 10:01:59] launch 1 again\n")
            with open(d / "server-2.log", "ab") as f:
                f.write(b"[2026-01-01 10:02:59] launch 2 again\n")
            os.unlink(d / "server-3.log")                 # and the followed one goes
            fourth = _launch_file(d, "server-4.log", 4)
            await r.wait(lambda: len(r.opened()) == 3 and r.segments()[-1][1] == fourth, 10,
                         "the fourth launch's file")
        return r

    r = run(main())
    segs = r.segments()
    # the followed file deleted, then the next one written: "recreated" when a look fell
    # between the two (the path named nothing, and ours had no link left), else "rotated"
    assert [op.reason for op, _ in segs][:2] == ["attach", "rotated"]
    assert segs[2][0].reason in ("rotated", "recreated")
    assert [b.count(b"launch") for _, b in segs] == [6, 5, 5]
    assert b"launch 1" not in r.stream() and b"again" not in r.stream()
    assert segs[0][0].offset == 0 and all(op.new_file for op, _ in segs[1:])
    said = [s.message for s in r.states()]
    if segs[2][0].reason == "recreated":    # that look may say so (seen in a CI run)
        said = [m for m in said
                if m != f"{pattern} was deleted; draining it, waiting for a new one"]
    assert said == [f"reading {d / f'server-{k}.log'}" for k in (2, 3, 4)], said


def test_a_pattern_over_the_kubelet_s_container_links_follows_a_new_pod(
        tmp_path: Path) -> None:
    """A Kubernetes node: /var/log/containers/POD_NS_CONTAINER-ID.log links to the pod's
    log file; a new pod (a rollout, an evicted pod rescheduled here) is a new link.  The
    pattern over the links follows the new pod's log from its first record."""
    pods, links = tmp_path / "pods", tmp_path / "containers"
    links.mkdir()

    def pod(name: str, cid: str, records: list[str]) -> Path:
        d = pods / f"inference_{name}_0c1d" / "sglang"
        d.mkdir(parents=True)
        (d / "0.log").write_text("".join(f"2026-12-05T10:00:00.{k:09d}Z stderr F {r}\n"
                                         for k, r in enumerate(records)))
        (links / f"{name}_inference_sglang-{cid}.log").symlink_to(d / "0.log")
        return d / "0.log"

    old = pod("sglang-7d9f-abcde", "a1", ["[2026-12-05 10:00:00] old pod"])
    os.utime(old, (time.time() - 60, time.time() - 60))
    pattern = str(links / "sglang-*_inference_sglang-*.log")

    async def main() -> Reader:
        async with Reader(make_source(pattern, rotate_wait=0.2)) as r:
            await r.wait(lambda: b"old pod" in r.stream(), 10, "the old pod's log")
            new = pod("sglang-7d9f-fghij", "b2", ["[2026-12-05 10:05:00] new pod"])
            await r.wait(lambda: len(r.opened()) == 2 and r.segments()[-1][1] ==
                         new.read_bytes(), 10, "the new pod's log")
        return r

    r = run(main())
    assert [op.reason for op in r.opened()] == ["attach", "rotated"]


@pytest.mark.serial    # a latency bound: alone, after the parallel tier (Makefile)
def test_a_pattern_over_a_huge_directory_does_not_hold_the_event_loop(tmp_path: Path) -> None:
    """60,000 SLURM outputs (a listing's stats take ~0.4 s here) and a job finishing every
    50 ms (the directory changes each time): the listings run in a thread, at most a tenth of
    the time, so the event loop (the daemon's endpoint, its other targets) keeps its pace;
    the newest job's file is followed."""
    d = tmp_path / "jobs"
    d.mkdir()
    old = time.time() - 3600
    for i in range(60_000):
        p = d / f"slurm-{i}.out"
        p.write_bytes(b"")
        if i % 1000 == 0:
            os.utime(p, (old, old))

    async def main() -> tuple[Reader, float]:
        lags: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            loop = asyncio.get_running_loop()
            while not stop.is_set():
                t = loop.time()
                await asyncio.sleep(0.01)
                lags.append(loop.time() - t - 0.01)

        tick = asyncio.create_task(ticker())
        async with Reader(make_source(str(d / "slurm-*.out"), rotate_wait=0.2)) as r:
            await r.wait(lambda: bool(r.opened()), 30, "the newest output")
            for k in range(40):
                (d / f"slurm-{100_000 + k}.out").write_bytes(b"job %d\n" % k)
                await asyncio.sleep(0.05)
            last = d / "slurm-200000.out"
            last.write_bytes(b"the last job\n")
            await r.wait(lambda: r.segments()[-1][1] == b"the last job\n", 30, "the last job")
        stop.set()
        await tick
        return r, max(lags)

    r, worst = run(main())
    assert worst < 0.2, f"the event loop waited {worst:.2f}s behind a listing"


def test_a_pattern_with_no_file_yet_waits_for_the_first(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "notes.txt").write_bytes(b"not a match\n")
    pattern = str(d / "slurm-*.out")

    async def main() -> Reader:
        async with Reader(make_source(pattern)) as r:
            await r.wait(lambda: bool(r.states()), 5, "a first state")
            assert r.states()[0].message == f"waiting for a file matching {pattern} to appear"
            (d / "slurm-12.out").mkdir()        # a directory that matches is not a log
            data = _launch_file(d, "slurm-13.out", 1)
            await r.wait(lambda: r.data_bytes() >= len(data), 10, "the first match")
            assert r.states()[-1].message == f"reading {d / 'slurm-13.out'}"
        return r

    assert run(main()).stream().startswith(SG_START.format(m=1).encode())


def test_a_pattern_resumed_after_a_restart_reads_what_it_missed(tmp_path: Path) -> None:
    """The daemon stopped inside launch 1's file; launches 2 and 3 wrote their own files
    meanwhile: the rest of 1, all of 2, all of 3, in that order, nothing twice."""
    d = tmp_path / "logs"
    d.mkdir()
    now = time.time()
    first = _launch_file(d, "run-a.log", 1, mtime=now - 100)
    pattern = str(d / "run-*.log")
    source = make_source(pattern)
    follower = new_follower(source)
    run(read_until(source, len(first), follower))
    pos = follower.position()
    assert pos is not None and pos.offset == len(first)
    with open(d / "run-a.log", "ab") as f:
        f.write(b"[2026-01-01 10:01:30] launch 1 crashed while we were away\n")
    os.utime(d / "run-a.log", (now - 90, now - 90))
    second = _launch_file(d, "run-b.log", 2, mtime=now - 50)
    third = _launch_file(d, "run-c.log", 3, mtime=now - 10)

    async def main() -> Reader:
        async with Reader(make_source(pattern, start=pos, rotate_wait=0.2)) as r:
            await r.wait(lambda: r.stream().endswith(third), 10, "the newest file")
        return r

    r = run(main())
    assert r.stream() == b"[2026-01-01 10:01:30] launch 1 crashed while we were away\n" + \
        second + third
    assert [op.reason for op in r.opened()][0] == "resume"


# ----------------------------------------------------------------------------------------------
# 5. latency sanity (not a benchmark)

@pytest.mark.serial   # a 2 s latency budget
@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
def test_an_appended_line_arrives_promptly(tmp_path: Path, use_inotify: bool) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(b"first\n")

    async def main() -> None:
        async with Reader(LocalFileSource(str(path), use_inotify=use_inotify)) as r:
            await r.wait(lambda: r.data_bytes() == 6, 5, "the first line")
            t0 = time.monotonic()
            with open(path, "ab") as f:
                f.write(b"second line\n")
            await r.wait(lambda: r.data_bytes() == 18, 5, "the appended line")
            took = time.monotonic() - t0
            assert took < 2.0, f"an appended line took {took:.2f}s to arrive"
            last = [e for e in r.events if isinstance(e, Data)][-1]
            assert last.data.endswith(b"second line\n") and last.offset + len(last.data) == 18

    run(main())


@pytest.mark.parametrize("form", ["absolute", "relative-in-subdir", "bare-name-in-cwd"])
def test_inotify_wakes_the_source_for_every_path_form(tmp_path: Path, form: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With inotify the wakeup comes from the watcher, not from the safety-net poll (set to
    30 s here): `logwatch watch server.log` from the log's directory must be as prompt as an
    absolute path."""
    (tmp_path / "logs").mkdir()
    monkeypatch.chdir(tmp_path / "logs" if form == "bare-name-in-cwd" else tmp_path)
    target = {"absolute": str(tmp_path / "logs" / "server.log"),
              "relative-in-subdir": "logs/server.log",
              "bare-name-in-cwd": "server.log"}[form]
    real = tmp_path / "logs" / "server.log"
    real.write_bytes(b"first\n")

    async def main() -> None:
        async with Reader(LocalFileSource(target, poll_interval=30)) as r:
            await r.wait(lambda: r.data_bytes() == 6, 5, "the first line")
            with open(real, "ab") as f:
                f.write(b"second line\n")
            await r.wait(lambda: r.data_bytes() == 18, 5,
                         "the appended line (no inotify wakeup: only the 30 s poll would see it)")

    run(main())


# ----------------------------------------------------------------------------------------------
# 6. commands

def test_make_source_cmd_targets() -> None:
    from logwatch.sources import source_kind
    from logwatch.sources.command import StdinSource
    assert [source_kind(t) for t in ("-", "cmd:x", "ssh://h/x.log", "./-", "x.log")] == \
        ["stdin", "command", "ssh", "file", "file"]
    assert isinstance(make_source("-"), StdinSource)
    src = make_source("cmd:docker logs -f 'my server'")
    assert isinstance(src, CommandSource)
    assert src.argv == ["docker", "logs", "-f", "my server"]
    for bad in ("cmd:", "cmd:   "):
        with pytest.raises(SourceError):
            make_source(bad)


RESTART_RE = re.compile(r"exited with (-?\d+)(?: \(.*\))?; restarting in ([\d.]+)s")


def _restart_states(r: Reader) -> list[re.Match[str]]:
    return [m for s in r.states() if (m := RESTART_RE.search(s.message))]


def test_command_that_exits_is_restarted_with_backoff() -> None:
    async def main() -> None:
        src = make_source("cmd:printf 'a\\nb\\n'")
        async with Reader(src) as r:
            await r.wait(lambda: len(_restart_states(r)) >= 3, 15, "three restarts")
            assert src.restarts >= 3
            delays = [float(m.group(2)) for m in _restart_states(r)[:3]]
            codes = {m.group(1) for m in _restart_states(r)}
            # Backoff(base=1) with full jitter: [0.5, 1], [1, 2], [2, 4]
            assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0, \
                delays
            assert codes == {"0"}
            assert [s.up for s in r.states()[:3]] == [True, False, True]
            # the same two lines printed each run are handed on once
            assert r.stream() == b"a\nb\n"
            assert [(o.reason, o.offset) for o in r.opened()] == [("attach", 0)]

    run(main())


def test_a_command_that_fails_says_its_last_line() -> None:
    """`cmd:docker logs -f sglang` of a container that is gone prints its error and exits 1,
    again at every restart: the source's state quotes that last line (control characters
    out, cut to 160).  Before (helper adv30 M5): "docker exited with 1; restarting" for good,
    the why never said."""
    async def main() -> None:
        src = make_source("cmd:sh -c 'printf \"\\033[31mError response from daemon: No such "
                          "container: sglang\\033[0m\\n\\n\" >&2; exit 1'")
        async with Reader(src) as r:
            await r.wait(lambda: len(_restart_states(r)) >= 2, 15, "two restarts")
            said = [s.message for s in r.states() if RESTART_RE.search(s.message)]
            assert all(m.startswith("sh exited with 1 (Error response from daemon: No such "
                                    "container: sglang); restarting in ") for m in said), said

    run(main())


def _cmd_run(command: str, runs: int, between: Callable[[int], None] | None = None,
             timeout: float = 20, locator: Any = None) -> Reader:
    """Run a command source until it has exited `runs` times; `between(k)` after the k-th."""
    async def main() -> Reader:
        src = make_source(f"cmd:{command}", locator=locator)
        seen = [0]

        def on_event(ev: Any) -> None:
            if isinstance(ev, SourceState) and RESTART_RE.search(ev.message):
                seen[0] += 1
                if between is not None:
                    between(seen[0])   # runs before the source sleeps and starts it again

        follower = new_follower(src)
        async with Reader(src, follower, on_event) as r:
            await r.wait(lambda: seen[0] >= runs, timeout, f"{runs} runs")
        assert follower.status.gaps == 0 and follower.status.overlaps == 0
        return r

    return run(main())


def _numbered(a: int, b: int) -> bytes:
    return b"".join(f"log line {i:04d} of the server, some words to make it longer\n".encode()
                    for i in range(a, b + 1))


def test_command_printing_the_whole_log_again_gives_no_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(_numbered(1, 200))
    appended = [200]

    def grow(k: int) -> None:   # the container went on logging while we were not attached
        with open(path, "ab") as f:
            f.write(_numbered(appended[0] + 1, appended[0] + 7))
        appended[0] += 7

    r = _cmd_run(f"sh -c 'cat {path}; sleep 0.2'", 3, grow)
    # the 3 runs printed 200, 207 and 214 lines; the stream is the log once (through 214)
    assert r.stream() == _numbered(1, 214)


def test_a_command_s_printed_history_is_read_from_its_latest_launch(tmp_path: Path) -> None:
    """`docker logs -f` prints the container's whole log, then follows it: what the first run
    prints before it pauses is the log as it was when we looked, read as a file met for the
    first time is: from its latest launch (the launches before it not read), what it held
    history for the catch-up (`Opened.size`).  Before, from byte 0: every old launch's crash
    was read as news (a daemon paged it, then `restarted`)."""
    path, data, off, line = _startup_file(tmp_path, SG_START, 3)

    async def main() -> Reader:
        src = make_source(f"cmd:sh -c 'cat {path}; sleep 1'", locator=startup_locator(SGLANG))
        async with Reader(src) as r:
            await r.wait(lambda: len(_restart_states(r)) >= 1, 10, "the run to end")
            return r

    r = run(main())
    op = r.opened()
    assert [(o.reason, o.offset, o.line_number, o.size) for o in op] == \
        [("attach", off, line, len(data))]
    assert r.stream() == data[off:]


def test_a_command_printing_its_history_again_after_the_latest_launch(tmp_path: Path) -> None:
    """The runs after the first are resynced with what was read, the bytes before the
    latest launch included: each line once, none missing."""
    path, data, off, _ = _startup_file(tmp_path, SG_START, 3)
    grown = [data]

    def grow(k: int) -> None:
        more = f"[2026-01-01 11:00:{k:02d}] line written between runs {k}\n".encode()
        with open(path, "ab") as f:
            f.write(more)
        grown[0] += more

    r = _cmd_run(f"sh -c 'cat {path}; sleep 0.8'", 3, grow, locator=startup_locator(SGLANG))
    printed = grown[0][: grown[0].rindex(b"[2026-01-01 11:00:03]")]   # runs 2 and 3 printed
    assert r.stream() == printed[off:]


def test_a_command_that_connects_slowly_still_prints_history(tmp_path: Path) -> None:
    """A command that prints nothing for its first seconds (`kubectl`, `ssh` connecting),
    then the log's history: still read from the latest launch (before: the history ended at
    0.5 s of silence, before its first byte, and every old launch was read as news)."""
    path, data, off, line = _startup_file(tmp_path, SG_START, 3)

    async def main() -> Reader:
        src = make_source(f"cmd:sh -c 'sleep 1.5; cat {path}; sleep 1'",
                          locator=startup_locator(SGLANG))
        async with Reader(src) as r:
            await r.wait(lambda: len(_restart_states(r)) >= 1, 15, "the run to end")
            return r

    r = run(main())
    assert [(o.reason, o.offset, o.size) for o in r.opened()] == [("attach", off, len(data))]
    assert r.stream() == data[off:]


def test_a_busy_command_s_history_ends_though_its_output_never_pauses(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`docker logs -f` of a busy server: its history, then SGLang's decode line several a
    second (scheduler_components/metrics_reporter.py:934), never a 2 s pause.  The history
    ends HISTORY_LOOK seconds after the first byte all the same, read from its latest launch;
    what follows is read as it comes.  Before: held unread until a pause or 32 MiB (hours):
    the adv26 `cmd_busy` daemon read 0 lines in 45 s."""
    monkeypatch.setattr(command, "HISTORY_LOOK", 1.0, raising=False)
    path, data, off, _ = _startup_file(tmp_path, SG_START, 2)
    busy = tmp_path / "busy.sh"
    busy.write_text(f"cat {path}\nwhile :; do echo '[2026-01-01 11:00:00 TP0] Decode batch, "
                    "#running-req: 3, gen throughput (token/s): 1000.00'; sleep 0.1; done\n")

    async def main() -> tuple[Reader, float]:
        src = make_source(f"cmd:sh {busy}", locator=startup_locator(SGLANG))
        async with Reader(src) as r:
            t0 = time.monotonic()
            await r.wait(lambda: bool(r.opened()), 6, "the history's end")
            took = time.monotonic() - t0
            size = r.opened()[0].size or 0
            await r.wait(lambda: len(r.stream()) > size - off, 6, "lines after the history")
            return r, took

    r, took = run(main())
    op = r.opened()
    assert [(o.reason, o.offset) for o in op] == [("attach", off)] and op[0].size > len(data)
    assert took < 3.0, took
    assert r.stream().startswith(data[off:])


def test_a_long_reprint_at_a_dump_s_pace_is_history_whole(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`kubectl logs -f` of a long log through an API server: the reprint takes longer than
    HISTORY_LOOK, at a dump's pace, never pausing.  It is history whole: read from its latest
    launch, which comes after HISTORY_LOOK.  A bare time cap (the first form of the fix of a
    busy command, review of e6e7218) ended the history inside it: the attach fell on the old
    launch and the rest, its relaunch too, was read live."""
    monkeypatch.setattr(command, "HISTORY_LOOK", 1.0, raising=False)
    monkeypatch.setattr(command, "HISTORY_FAST", 64 << 10, raising=False)
    old = SG_START.format(m=0) + "[2026-01-01 10:00:05] startup 0 line 1\n"
    new = SG_START.format(m=30) + "[2026-01-01 10:30:05] startup 1 line 1\n"
    script = tmp_path / "reprint.py"
    script.write_text(
        "import sys, time\n"
        f"w = sys.stdout.write; w({old!r}); sys.stdout.flush()\n"
        "filler = '[2026-01-01 10:10:00] INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\\n'\n"
        "for _ in range(25):\n"       # 2.5 s at ~200 KiB/s: a dump's pace, past HISTORY_LOOK
        "    w(filler * 270); sys.stdout.flush(); time.sleep(0.1)\n"
        f"w({new!r}); sys.stdout.flush()\n"
        "while True:\n"
        "    w('[2026-01-01 10:31:00 TP0] Decode batch, #running-req: 3\\n'); sys.stdout.flush()\n"
        "    time.sleep(0.1)\n")

    async def main() -> Reader:
        src = make_source(f"cmd:{sys.executable} {script}", locator=startup_locator(SGLANG))
        async with Reader(src) as r:
            await r.wait(lambda: bool(r.opened()), 10, "the history's end")
            return r

    r = run(main())
    (op,) = r.opened()
    assert op.reason == "attach" and r.stream().startswith(new.encode()), \
        (op, r.stream()[:200])


def test_each_container_s_own_log_after_the_same_long_banner(tmp_path: Path) -> None:
    """`kubectl logs -f` prints the current container's log: every container of an NGC
    image starts with the same banner (license text, `set -x` echoes: several KiB).  A run
    that starts with the first run's first bytes is a reprint only if it matches that far
    (64 KiB): the new container's log is read whole.  Before (4 KiB), its first bytes, as
    many as had been read, were dropped as a reprint."""
    banner = b"".join(b"+ export OPTION_%d=value-%d-%s\n" % (i, i, b"z" * 60)
                      for i in range(80))                 # 6.4 KiB
    current = tmp_path / "current.log"
    current.write_bytes(_numbered(1, 20))
    runs = [banner + _numbered(1, 20)]

    def next_container(k: int) -> None:
        current.write_bytes(_numbered(100 * k, 100 * k + 20))
        runs.append(banner + _numbered(100 * k, 100 * k + 20))

    (tmp_path / "banner").write_bytes(banner)
    r = _cmd_run(f"sh -c 'cat {tmp_path}/banner; cat {current}; sleep 0.3'", 2, next_container)
    assert r.stream() == runs[0] + runs[1]


def test_command_printing_its_log_again_after_its_start_rotated_away(tmp_path: Path) -> None:
    """`docker logs -f` after Docker's json-file driver rotated (max-size, max-file): the
    rerun prints the log from a later point, not from the first run's first bytes.  The old
    end (its last 4 KiB) is found in the new output: only what follows is read.  Before, the
    whole reprint was read again (an old launch's crash paged again, its lines twice)."""
    path = tmp_path / "server.log"
    path.write_bytes(_numbered(1, 3000))
    appended = [3000]

    def rotate(k: int) -> None:     # the older half rotated away: what is kept is > 64 KiB
        kept = _numbered(appended[0] - 1499, appended[0])
        path.write_bytes(kept + _numbered(appended[0] + 1, appended[0] + 7))
        appended[0] += 7

    r = _cmd_run(f"sh -c 'cat {path}; sleep 0.2'", 3, rotate)
    assert r.stream() == _numbered(1, 3014)


def test_command_printing_the_whole_log_again_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(_numbered(1, 3000))   # bigger than a pipe read
    r = _cmd_run(f"sh -c 'cat {path}; sleep 0.2'", 2)
    assert r.stream() == _numbered(1, 3000)


def test_command_printing_the_last_lines_again_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(_numbered(1, 50))
    r = _cmd_run(f"tail -n 3 {path}", 3)
    assert r.stream() == _numbered(48, 50)


def test_command_printing_the_last_lines_again_of_a_growing_log(tmp_path: Path) -> None:
    """`tail -n 3` (like `journalctl -n 10 -f`) restarted after one new line: the new output
    repeats two lines already read; they must not be handed on twice, the new one must."""
    path = tmp_path / "server.log"
    path.write_bytes(_numbered(1, 50))
    n = [50]

    def grow(k: int) -> None:
        n[0] += 1
        with open(path, "ab") as f:
            f.write(_numbered(n[0], n[0]))

    r = _cmd_run(f"tail -n 3 {path}", 3, grow)
    # runs printed 48-50, 49-51, 50-52: the stream should be 48..52, each once
    got = r.stream()
    assert got == _numbered(48, 52), got.decode()


@pytest.mark.parametrize("rerun", [False, True], ids=["first-run", "rerun"])
def test_a_stop_that_meets_a_finished_read_still_stops_the_command(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rerun: bool) -> None:
    """A chatty command's next read has nearly always finished when the daemon's stop cancels
    its target: the cancel must end the reading all the same.  Before, `asyncio.wait_for`
    (Python 3.11) returned the finished read and dropped the cancel: the target read on, and
    a `logwatch run` sent SIGTERM never exited; it restarted the commands the signal had
    killed (2 of 10 stops of three `cat /dev/urandom` targets).  Here the cancel arrives
    exactly as a read finishes, in each read that has a timeout: the first run's history
    (read with a start locator) and a rerun's resync."""
    finished_read = asyncio.StreamReader.read
    stop: list[asyncio.Task[None]] = []

    async def read_then_stop(self: asyncio.StreamReader, n: int = -1) -> bytes:
        data = await finished_read(self, n)
        if stop:
            stop.pop().cancel()
        return data

    monkeypatch.setattr(asyncio.StreamReader, "read", read_then_stop)
    script = tmp_path / "chatty.sh"   # a line every 50 ms: the history (or resync) goes on
    script.write_text(("[ -e once ] || { touch once; echo first; exit; }\n" if rerun else "")
                      + "while :; do echo chatty; sleep 0.05; done\n", encoding="utf-8")

    async def main() -> None:
        src = make_source(f"cmd:sh -c 'cd {tmp_path} && exec sh {script}'",
                          locator=startup_locator(SGLANG))
        async with Reader(src) as r:
            runs = 2 if rerun else 1
            await r.wait(lambda: sum(s.up for s in r.states()) >= runs, 10, f"run {runs}")
            assert r.task is not None
            stop.append(r.task)
            await asyncio.wait({r.task}, timeout=5)
            assert r.task.done() and r.task.cancelled(), \
                f"the cancel was dropped: still reading; events: {r.brief()}"

    run(main())


def test_missing_executable_is_fatal() -> None:
    async def main() -> None:
        async with Reader(make_source("cmd:/nonexistent/logwatch-no-such-tool -f x")) as r:
            await r.wait_end(10)
            states = r.states()
            assert states and states[-1].fatal and not states[-1].up
            assert "cannot run /nonexistent/logwatch-no-such-tool" in states[-1].message
            assert not r.opened()

    run(main())


@pytest.mark.integration
@pytest.mark.serial    # a flood of 60 logs: beside 6 workers on 2 cores /metrics went unanswered 60 s
def test_a_sigterm_stops_the_daemon_while_its_logs_are_written_fast(tmp_path: Path) -> None:
    """Every inotify event of a watched log (an append is an open, a write and a close)
    woke the loop from watchdog's thread with `call_soon_threadsafe`: one byte in the
    loop's self-pipe each.  60 logs appended every 10 ms filled it faster than a busy loop
    read it, and the signal wakeup fd is that same pipe: the SIGTERM's byte was refused
    ("Exception ignored when trying to write to the signal wakeup fd: BlockingIOError"),
    the signal lost, the daemon running on at 100% CPU minutes later (systemd's kill -9)."""
    import signal
    import subprocess
    from support.daemon import Daemon, append, fleet_config, free_port, sim_texts, wait_for
    n = 60
    port = free_port()
    logs, cfg = fleet_config(tmp_path, n, port)
    d = Daemon(cfg, port, tmp_path).start()
    texts = sim_texts()
    stop = threading.Event()

    def feed() -> None:
        k = 0
        while not stop.is_set():
            for p in logs:
                append(p, texts[k % len(texts)])
            k += 1
            time.sleep(0.01)   # the writers' pace, not a synchronisation
    th = threading.Thread(target=feed, daemon=True)
    th.start()
    try:
        wait_for(lambda: (d.metric("logwatch_lines_total", target="s0") or 0) >= 200, 60,
                 "lines read", alive=d.dead)
        t0 = time.monotonic()
        d.signal(signal.SIGTERM)
        try:
            d.wait_exit(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"SIGTERM lost: still running {time.monotonic() - t0:.0f}s "
                                 f"later; {d.stderr()[-300:]}") from None
    finally:
        stop.set()
        th.join(10)
        d.cleanup()
