"""The follow algorithm (sources/cursor.py) without any I/O: each decision from plain bytes.

A `Disk` stands in for the file system: files by inode, a path naming one of them (or none).
`answer` plays the source: it answers every Read / Look / Locate the cursor asks until the
cursor waits, polls or reopens, and returns that action with the events decided meanwhile.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from logwatch.sources.base import (
    HEAD_BYTES, TAIL_BYTES, Data, Opened, Position, Skipped, SourceState, digest, identity_of,
)
from logwatch.sources.cursor import (
    Action, Cursor, FindRotated, Hold, Locate, Look, PathFacts, Poll, Read, Reopen, Wait, drive,
    later_files,
)


@dataclass
class File:
    ino: int
    data: bytearray
    links: int = 1


@dataclass
class Disk:
    """One path, files by inode; `dev_ino=False` plays SFTP (no dev/inode, no link count)."""

    files: dict[int, File] = field(default_factory=dict)
    at_path: int | None = None
    dev_ino: bool = True
    located: tuple[int, int] = (0, 1)
    looks: int = 0
    heads: int = 0
    reads: list[Read] = field(default_factory=list)
    held: list[int] = field(default_factory=list)     # inodes held open (Hold), in order

    def create(self, data: bytes) -> File:
        f = File(max(self.files, default=10) + 1, bytearray(data))
        self.files[f.ino] = f
        self.at_path = f.ino
        return f

    def rename_away(self) -> None:
        self.at_path = None

    def unlink(self) -> None:
        assert self.at_path is not None
        self.files[self.at_path].links = 0
        self.at_path = None

    def facts(self, of: File, head: bool) -> PathFacts:
        self.looks += 1
        if self.at_path is None:
            return PathFacts(False, links=of.links if self.dev_ino else None)
        f = self.files[self.at_path]
        if self.dev_ino:
            return PathFacts(True, 1, f.ino, len(f.data))
        self.heads += head
        return PathFacts(True, size=len(f.data), head=bytes(f.data[:HEAD_BYTES]) if head else None)

    def open(self, cur: Cursor) -> tuple[File, Action, list[Any]]:
        """Open the path (as a source does) and answer until the cursor waits."""
        assert self.at_path is not None
        f = self.files[self.at_path]
        dev, ino = (1, f.ino) if self.dev_ino else (None, None)
        act = cur.opened(dev, ino, len(f.data), bytes(f.data[:HEAD_BYTES]))
        act, evs = self.answer(cur, act, f)
        return f, act, evs

    def answer(self, cur: Cursor, act: Action, f: File) -> tuple[Action, list[Any]]:
        while True:
            if isinstance(act, Read):
                self.reads.append(act)
                act = cur.got(bytes(f.data[act.pos: act.pos + act.n]))
            elif isinstance(act, Look):
                act = cur.looked(self.facts(f, act.head))
            elif isinstance(act, Locate):
                act = cur.located(*self.located)
            elif isinstance(act, Hold):
                ok = self.at_path == act.ino
                if ok:
                    self.held.append(act.ino)
                act = cur.held(ok, len(self.files[act.ino].data) if ok else 0)
            else:
                return act, cur.take_events()

    def reopen(self, cur: Cursor) -> tuple[File, Action, list[Any]]:
        """After Reopen: the first file held, else the path (as a source does)."""
        if not self.held:
            return self.open(cur)
        f = self.files[self.held.pop(0)]
        act = cur.opened(1, f.ino, len(f.data), bytes(f.data[:HEAD_BYTES]))
        act, evs = self.answer(cur, act, f)
        return f, act, evs

    def poll(self, cur: Cursor, f: File, now: float) -> tuple[Action, list[Any]]:
        return self.answer(cur, cur.poll(len(f.data), now), f)


def lines(a: int, b: int, tag: str = "x") -> bytes:
    return b"".join(f"{tag} line {i:05d} of a log, padded a bit\n".encode() for i in range(a, b + 1))


def data_of(evs: list[Any]) -> bytes:
    return b"".join(e.data for e in evs if isinstance(e, Data))


def opened(evs: list[Any]) -> list[tuple[str, int, int, bool]]:
    return [(e.reason, e.offset, e.line_number, e.new_file) for e in evs if isinstance(e, Opened)]


def contiguous(evs: list[Any]) -> None:
    """Every Data continues where the previous one (or the Opened) left off."""
    nxt = None
    for e in evs:
        if isinstance(e, Opened):
            nxt = e.offset
        elif isinstance(e, Data):
            assert e.offset == nxt, (e.offset, nxt)
            nxt = e.offset + len(e.data)


def position(cur: Cursor, offset: int, line: int, f: File) -> Position:
    lo = max(0, offset - TAIL_BYTES)
    return Position(offset, line, cur.identity, digest(bytes(f.data[lo:offset])), "t")


# ----------------------------------------------------------------------------------------------
# the start: attach, resume, or the latest startup

def test_first_attach_without_locator_reads_from_byte_0() -> None:
    disk = Disk()
    disk.create(lines(1, 10))
    cur = Cursor("/l")
    f, act, evs = disk.open(cur)
    assert act == Poll()
    assert opened(evs) == [("attach", 0, 1, True)]
    assert evs[0].identity == identity_of(1, f.ino, lines(1, 10))
    act, evs = disk.poll(cur, f, 0.0)
    assert isinstance(act, Wait)
    assert data_of(evs) == lines(1, 10) and cur.offset == len(lines(1, 10))
    assert cur.last == lines(1, 10)[-TAIL_BYTES:]


def first_run(content: bytes, upto: int) -> tuple[Disk, File, Position]:
    disk = Disk()
    f = disk.create(content)
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    return disk, f, position(cur, upto, 41, f)


def test_resume_when_identity_size_and_tail_fit() -> None:
    content = lines(1, 80)
    upto = len(lines(1, 40))
    disk, f, pos = first_run(content, upto)
    f.data += lines(81, 90)
    cur = Cursor("/l", saved=pos, can_locate=True)
    act = cur.opened(1, f.ino, len(f.data), bytes(f.data[:HEAD_BYTES]))
    # the tail hash is checked on the bytes just before the saved offset
    assert act == Read(upto - TAIL_BYTES, TAIL_BYTES)
    act = cur.got(bytes(f.data[upto - TAIL_BYTES: upto]))
    assert act == Poll()
    assert opened(cur.take_events()) == [("resume", upto, 41, False)]
    assert cur.last == bytes(f.data[upto - TAIL_BYTES: upto])
    act, evs = disk.poll(cur, f, 0.0)
    assert data_of(evs) == bytes(f.data[upto:])
    assert disk.reads[-1].pos == upto - TAIL_BYTES   # the read carries its truncation check


@pytest.mark.parametrize("change", ["other-head", "other-tail", "shorter", "copy-other-tail"])
def test_no_resume_when_the_saved_position_does_not_fit(change: str) -> None:
    content = lines(1, 80)
    upto = len(lines(1, 60))
    disk, f, pos = first_run(content, upto)
    if change == "other-head":
        f.data[:10] = b"Y" * 10
    elif change == "other-tail":
        f.data[upto - 20: upto - 1] = b"Z" * 19        # same first KiB
    elif change == "shorter":
        del f.data[upto - 1:]
    else:                                             # another file, our head, not our bytes
        f = disk.create(bytes(f.data[: upto - 20]) + b"Z" * 19 + bytes(f.data[upto - 1:]))
    disk.located = (len(lines(1, 30)), 31)
    cur = Cursor("/l", saved=pos, can_locate=True)
    _, act, evs = disk.open(cur)
    # at the latest startup the locator found, with the bytes before it for the next check
    assert opened(evs) == [("attach", len(lines(1, 30)), 31, True)]
    assert cur.last == bytes(f.data[len(lines(1, 30)) - TAIL_BYTES: len(lines(1, 30))])
    cur2 = Cursor("/l", saved=pos)                    # without a locator: byte 0
    _, _, evs = disk.open(cur2)
    assert opened(evs) == [("attach", 0, 1, True)]


@pytest.mark.parametrize("can_find", [True, False])
def test_a_copy_of_the_saved_file_at_the_path_resumes_at_the_position(can_find: bool) -> None:
    """The daemon was stopped; the log became another inode with the same bytes and more
    (cp + mv, rsync, the logs moved to another host, an NFS remount's new st_dev).  Its
    file is not beside it (FindRotated: not found); the file at the path begins as ours and
    holds our bytes before the position: resumed there, nothing read twice, nothing said
    lost.  Before: the latest startup, read again."""
    content = lines(1, 80)
    upto = len(lines(1, 60))
    disk, f, pos = first_run(content, upto)
    f = disk.create(bytes(f.data) + lines(81, 90))
    disk.located = (len(lines(1, 30)), 31)
    cur = Cursor("/l", saved=pos, can_locate=True, can_find=can_find)
    act = cur.opened(1, f.ino, len(f.data), bytes(f.data[:HEAD_BYTES]))
    if can_find:
        assert isinstance(act, FindRotated) and act.offset == upto
        act = cur.found(False)
    act, evs = disk.answer(cur, act, f)
    assert act == Poll()
    assert opened(evs) == [("resume", upto, 41, False)]
    assert not [e for e in evs if isinstance(e, Skipped)]
    assert cur.identity == identity_of(1, f.ino, bytes(f.data[:HEAD_BYTES]))   # the copy's now
    _, evs = disk.poll(cur, f, 0.0)
    assert data_of(evs) == bytes(f.data[upto:])


def test_resume_at_0_or_without_tail_hash_reads_nothing_to_decide() -> None:
    disk = Disk()
    f = disk.create(lines(1, 5))
    ident = identity_of(1, f.ino, bytes(f.data[:HEAD_BYTES]))
    cur = Cursor("/l", saved=Position(0, 1, ident, None))
    assert cur.opened(1, f.ino, len(f.data), bytes(f.data)) == Poll()
    assert opened(cur.take_events()) == [("resume", 0, 1, False)]


# ----------------------------------------------------------------------------------------------
# following: growth, truncation, the identity head

def test_growth_is_read_in_order_in_read_size_chunks() -> None:
    disk = Disk()
    f = disk.create(b"")
    cur = Cursor("/l", read_size=100)
    _, _, evs = disk.open(cur)
    assert cur.poll(0, 0.0) == Wait(0.0)              # nothing yet: no read at all
    f.data += lines(1, 20)
    act, evs2 = disk.poll(cur, f, 0.1)
    evs += evs2
    contiguous(evs)
    assert data_of(evs) == lines(1, 20)
    assert max(len(e.data) for e in evs if isinstance(e, Data)) == 100
    # each data read starts at most TAIL_BYTES before the Data it gave (its check) ...
    starts = [e.offset for e in evs if isinstance(e, Data)]
    data_reads = [r for r in disk.reads if r != Read(0, HEAD_BYTES)]
    assert [r.pos for r in data_reads] == [max(0, s - TAIL_BYTES) for s in starts]
    assert all(r.n <= 100 + TAIL_BYTES for r in data_reads)
    # ... and the head (empty at open) was completed once the file had grown past it
    assert Read(0, HEAD_BYTES) in disk.reads
    assert isinstance(act, Wait)


def test_truncated_shorter_than_the_offset() -> None:
    disk = Disk()
    f = disk.create(lines(1, 50))
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    f.data[:] = lines(1, 3, tag="new")
    _, evs = disk.poll(cur, f, 0.1)
    assert opened(evs) == [("truncated", 0, 1, True)]
    assert data_of(evs) == lines(1, 3, tag="new") and cur.truncations == 1
    assert cur.identity == identity_of(1, f.ino, lines(1, 3, tag="new"))
    contiguous(evs)


def test_truncated_and_rewritten_past_the_offset() -> None:
    """No shorter than our offset, but the bytes before it changed: read from byte 0, not
    the middle of the new content."""
    old = lines(1, 20)
    disk = Disk()
    f = disk.create(old)
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    f.data[:] = lines(1, 60, tag="NEW")
    _, evs = disk.poll(cur, f, 0.1)
    assert opened(evs) == [("truncated", 0, 1, True)]
    assert data_of(evs) == lines(1, 60, tag="NEW")


def test_same_size_rewrite_is_caught_by_the_periodic_check() -> None:
    old = lines(1, 20)
    disk = Disk()
    f = disk.create(old)
    cur = Cursor("/l", check_every=1.0)
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    f.data[:] = old.replace(b"x line", b"y line")
    n_reads = len(disk.reads)
    _, evs = disk.poll(cur, f, 0.5)                   # not due, no new byte: nothing read
    assert evs == [] and len(disk.reads) == n_reads
    _, evs = disk.poll(cur, f, 1.1)
    assert opened(evs) == [("truncated", 0, 1, True)] and data_of(evs) == bytes(f.data)


def test_a_partial_head_grows_to_head_bytes() -> None:
    disk = Disk()
    f = disk.create(b"short\n")
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    assert cur.identity is not None and cur.identity.head_len == 6
    f.data += lines(1, 100)
    disk.poll(cur, f, 0.1)
    assert cur.identity == identity_of(1, f.ino, bytes(f.data[:HEAD_BYTES]))
    assert cur.identity.head_len == HEAD_BYTES


def test_a_head_that_changed_is_not_taken_as_grown() -> None:
    first = lines(1, 15)                              # shorter than HEAD_BYTES
    assert TAIL_BYTES + 10 < len(first) < HEAD_BYTES
    disk = Disk()
    f = disk.create(first)
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    before = cur.identity
    f.data[:10] = b"Y" * 10       # before the tail window: not seen as a truncation ...
    f.data += lines(16, 100)
    _, evs = disk.poll(cur, f, 0.1)
    assert opened(evs) == [] and data_of(evs) == lines(16, 100)
    assert cur.identity == before  # ... and not taken as the same file's longer head


# ----------------------------------------------------------------------------------------------
# leaving the file: rotation, deletion

def test_rename_rotation_drains_the_old_file_then_reopens() -> None:
    disk = Disk()
    old = disk.create(lines(1, 10))
    cur = Cursor("/l", check_every=1.0)
    disk.open(cur)
    disk.poll(cur, old, 0.0)
    disk.rename_away()
    new = disk.create(lines(1, 5, tag="new"))
    old.data += lines(11, 12)                         # the writer still held the old file
    act, evs = disk.poll(cur, old, 0.2)               # not due: the path is not looked at
    assert isinstance(act, Wait) and disk.looks == 0 and data_of(evs) == lines(11, 12)
    size = len(old.data)
    old.data += lines(13, 14)                         # written after the stat below
    act, evs = disk.answer(cur, cur.poll(size, 1.5), old)
    assert act == Reopen("rotated") and cur.rotations == 1
    assert data_of(evs) == lines(13, 14)              # drained to its end
    assert disk.reads[-1] == Read(len(old.data), cur.read_size)   # until a read gave b""
    assert cur.identity is not None and cur.identity.ino == old.ino  # until the new one opens
    _, act, evs = disk.open(cur)
    assert opened(evs) == [("rotated", 0, 1, True)] and cur.identity.ino == new.ino
    _, evs = disk.poll(cur, new, 1.6)
    assert data_of(evs) == lines(1, 5, tag="new")


@pytest.mark.parametrize("same", [True, False, "middle"])
def test_a_log_replaced_by_a_copy_of_itself_reads_on_where_it_was(same: bool | str) -> None:
    """rsync (or any sync writing a temp file renamed over the log): a new inode holding our
    bytes and more.  Before, each sync read the log from byte 0 again (its startups and
    crashes counted once per sync, a false `restarted`).  A new file that only begins
    like ours is a new file, read from byte 0."""
    disk = Disk()
    old = disk.create(lines(1, 200))
    cur = Cursor("/l", check_every=1.0, rotate_wait=0.5)
    disk.open(cur)
    disk.poll(cur, old, 0.0)
    offset = cur.offset
    disk.rename_away()
    if same == "middle":
        # another launch of one server: the same banner (the first KiB), stamps of one width,
        # the same last lines; only the middle differs (a mark's window)
        body = bytearray(old.data)
        body[2100:2110] = b"Y" * 10
        copy = bytes(body) + lines(201, 205)
    else:
        copy = bytes(old.data) + lines(201, 205) if same else lines(1, 2) + lines(3, 50, tag="y")
    new = disk.create(copy)
    act, evs = disk.answer(cur, cur.poll(len(old.data), 1.5), old)
    act, evs = disk.answer(cur, cur.poll(len(old.data), 2.5), old)
    assert act == Reopen("rotated")
    _, act, evs = disk.open(cur)
    _, more = disk.poll(cur, new, 2.6)
    if same is True:
        assert [(r, o, n) for r, o, _, n in opened(evs)] == [("copied", offset, False)]
        assert cur.identity.ino == new.ino
        assert data_of(evs + more) == lines(201, 205)
    else:
        assert opened(evs) == [("rotated", 0, 1, True)]
        assert data_of(evs + more) == copy


@pytest.mark.parametrize("how,reason,said", [
    ("unlink", "recreated", "was deleted"), ("rename", "rotated", "was rotated away"),
])
def test_path_gone_is_said_once_then_a_new_file_ends_ours(how: str, reason: str,
                                                         said: str) -> None:
    disk = Disk()
    old = disk.create(lines(1, 10))
    cur = Cursor("/var/log/l", check_every=1.0)
    disk.open(cur)
    disk.poll(cur, old, 0.0)
    disk.unlink() if how == "unlink" else disk.rename_away()
    _, evs = disk.poll(cur, old, 1.1)
    assert evs == [SourceState(True, f"/var/log/l {said}; draining it, waiting for a new one")]
    looks = disk.looks
    old.data += lines(11, 11)
    act, evs = disk.poll(cur, old, 1.2)               # not due, but a missing path is watched
    assert disk.looks == looks + 1 and isinstance(act, Wait)
    assert evs == [Data(lines(11, 11), len(lines(1, 10)))]   # ours read on; said once
    disk.create(b"fresh\n")
    act, evs = disk.poll(cur, old, 1.3)
    assert act == Reopen(reason) and cur.rotations == 1
    _, _, evs = disk.open(cur)
    assert opened(evs) == [(reason, 0, 1, True)]


def test_without_dev_ino_same_size_is_ours_and_other_head_is_not() -> None:
    """SFTP: no inode, no link count.  The path as long as our file is ours; otherwise its
    head is compared with our identity."""
    disk = Disk(dev_ino=False)
    old = disk.create(lines(1, 40))
    cur = Cursor("/l", check_every=1.0)
    disk.open(cur)
    disk.poll(cur, old, 0.0)
    act, evs = disk.poll(cur, old, 1.1)               # same size: no head asked
    assert isinstance(act, Wait) and not evs and disk.looks == 1 and disk.heads == 0
    old.data += lines(41, 41)
    act = cur.poll(len(old.data) - 1, 2.2)            # the path grew after our stat
    act = cur.got(bytes(old.data[cur.offset - TAIL_BYTES: len(old.data) - 1]))  # type: ignore[operator]
    assert act == Look()
    assert cur.looked(PathFacts(True, size=len(old.data))) == Look(head=True)
    assert isinstance(cur.looked(PathFacts(True, size=len(old.data), head=bytes(old.data[:HEAD_BYTES]))),
                      Wait)
    disk.unlink()                                     # no link count: nothing said
    _, evs = disk.poll(cur, old, 3.3)
    assert not [e for e in evs if isinstance(e, SourceState)]
    assert cur.offset == len(old.data)
    disk.create(lines(1, 3, tag="other"))
    act, evs = disk.poll(cur, old, 3.4)
    assert act == Reopen("rotated") and not evs       # nothing left to drain


# ----------------------------------------------------------------------------------------------
# opened again after a lost connection

def test_reconnect_to_the_same_file_continues_at_the_offset() -> None:
    disk = Disk(dev_ino=False)
    f = disk.create(lines(1, 30))
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    offset = cur.offset
    f.data += lines(31, 35)
    cur.poll(len(f.data), 0.1)                        # a read is asked, the connection drops
    _, act, evs = disk.open(cur)
    assert [e for e in evs if isinstance(e, Opened)] == \
        [Opened(offset, 0, cur.identity, "reconnected", False)]  # type: ignore[arg-type]
    _, evs = disk.poll(cur, f, 0.2)
    assert data_of(evs) == lines(31, 35) and cur.rotations == 0


@pytest.mark.parametrize("change", ["replaced", "tail-changed"])
def test_reconnect_to_another_file_reads_it_from_0(change: str) -> None:
    disk = Disk(dev_ino=False)
    f = disk.create(lines(1, 30))
    cur = Cursor("/l")
    disk.open(cur)
    disk.poll(cur, f, 0.0)
    if change == "replaced":
        disk.create(lines(1, 40, tag="other"))
    else:
        f.data[-10:-1] = b"Q" * 9
    _, _, evs = disk.open(cur)
    assert opened(evs) == [("rotated", 0, 1, True)] and cur.rotations == 1


# ----------------------------------------------------------------------------------------------
# the protocol itself

def test_answers_out_of_turn_are_refused() -> None:
    cur = Cursor("/l")
    with pytest.raises(RuntimeError):
        cur.poll(10, 0.0)
    assert cur.opened(1, 2, 0, b"") == Poll()
    cur.take_events()
    with pytest.raises(RuntimeError):
        cur.got(b"x")
    with pytest.raises(RuntimeError):
        cur.looked(PathFacts(True))
    with pytest.raises(RuntimeError):
        cur.located(0, 1)


def test_wait_reports_how_long_the_log_has_been_quiet() -> None:
    disk = Disk()
    f = disk.create(b"a\n")
    cur = Cursor("/l", check_every=100)
    disk.open(cur)
    assert disk.poll(cur, f, 5.0)[0] == Wait(0.0)
    assert disk.poll(cur, f, 17.0)[0] == Wait(12.0)


class FakeIO:
    """`drive` against the Disk, as a source would run it."""

    def __init__(self, disk: Disk, f: File) -> None:
        self.disk, self.f = disk, f
        self.waits = 0
        self.closed = False

    async def read(self, pos: int, n: int) -> bytes:
        return bytes(self.f.data[pos: pos + n])

    async def size(self) -> int:
        return len(self.f.data)

    async def look(self, head: bool) -> PathFacts:
        return self.disk.facts(self.f, head)

    async def locate(self) -> tuple[int, int]:
        return self.disk.located

    async def wait(self, idle: float, within: float | None = None) -> None:
        self.waits += 1
        if self.waits == 2:
            self.disk.rename_away()
            self.disk.create(b"next\n")
        await asyncio.sleep(0.6)


def test_drive_runs_the_conversation_until_reopen() -> None:
    disk = Disk()
    f = disk.create(lines(1, 3))
    disk.located = (len(lines(1, 1)), 2)
    cur = Cursor("/l", can_locate=True, check_every=0.5)

    async def main() -> list[Any]:
        io = FakeIO(disk, f)
        return [ev async for ev in drive(cur, io, 1, f.ino, len(f.data), bytes(f.data))]

    evs = asyncio.run(main())
    assert opened(evs) == [("attach", len(lines(1, 1)), 2, True)]
    assert data_of(evs) == lines(2, 3)
    assert evs[-1] == Reopen("rotated")


# ----------------------------------------------------------------------------------------------
# a chain of rotations within rotate_wait (issue 30)

def test_renames_within_rotate_wait_are_held_and_read_each_in_order() -> None:
    """A renamed, B made (empty: logrotate `create`), B renamed and C made, all while A
    drains and the writer still writes A: B and C are held by inode as each is seen, then
    once a later file has bytes (the writer moved on) A is left at its end and B, then C,
    are read from byte 0.  Before, A was left only after rotate_wait and the path (C) was
    opened: B was lost."""
    disk = Disk()
    a = disk.create(lines(1, 10, "a"))
    cur = Cursor("/l", can_hold=True, check_every=1.0, rotate_wait=5.0)
    disk.open(cur)
    disk.poll(cur, a, 0.0)
    disk.rename_away()
    b = disk.create(b"")
    act, evs = disk.poll(cur, a, 1.1)                 # due: the path names B: held
    assert disk.held == [b.ino] and isinstance(act, Wait) and act.within == 0.1
    a.data += lines(11, 12, "a")                      # the writer has not reopened yet
    disk.rename_away()
    c = disk.create(b"")
    act, evs = disk.poll(cur, a, 1.2)                 # draining A: the path looked at again
    assert disk.held == [b.ino, c.ino] and isinstance(act, Wait)
    assert data_of(evs) == lines(11, 12, "a")
    b.data += lines(1, 5, "b")                        # the writer reopened: B (renamed) grows
    act, evs = disk.poll(cur, a, 1.3)                 # C (empty) says nothing yet: quiet < 5 s
    assert isinstance(act, Wait)
    c.data += lines(1, 3, "c")                        # and C: the writer is past A for good
    a_size = len(a.data)
    act, evs = disk.poll(cur, a, 1.4)
    assert act == Reopen("rotated") and disk.reads[-1] == Read(a_size, cur.read_size)
    f, act, evs = disk.reopen(cur)                    # B, not the path
    assert f is b and opened(evs) == [("rotated", 0, 1, True)]
    act, evs = disk.poll(cur, b, 1.5)
    assert data_of(evs) == lines(1, 5, "b")
    act, evs = disk.poll(cur, b, 2.6)                 # due: the path names C (held, has bytes)
    assert act == Reopen("rotated")
    f, act, evs = disk.reopen(cur)
    assert f is c and disk.held == []
    _, evs = disk.poll(cur, c, 2.7)
    assert data_of(evs) == lines(1, 3, "c") and cur.rotations == 2


def test_an_empty_next_file_leaves_ours_only_after_rotate_wait() -> None:
    disk = Disk()
    a = disk.create(lines(1, 10))
    cur = Cursor("/l", can_hold=True, check_every=1.0, rotate_wait=5.0)
    disk.open(cur)
    disk.poll(cur, a, 0.0)
    disk.rename_away()
    disk.create(b"")
    assert isinstance(disk.poll(cur, a, 1.1)[0], Wait)
    assert isinstance(disk.poll(cur, a, 4.9)[0], Wait)    # quiet since 0.0 (no new data)...
    assert disk.poll(cur, a, 5.2)[0] == Reopen("rotated")  # ... rotate_wait passed


def test_later_files_are_the_rotated_ones_written_after_ours_oldest_first() -> None:
    cands = [("l.1", 1, 30.0), ("l.3", 1, 5.0), ("l.2", 1, 20.0), ("l.4", None, 40.0)]
    assert later_files(10.0, cands) == ["l.2", "l.1"]     # l.3 older; l.4: no dev:inode
    assert later_files(None, cands) == []


def test_a_held_file_gone_after_a_reconnect_is_a_skip_of_its_size() -> None:
    """Held B had 300 bytes when the connection dropped; after it, the path names C and B is
    not found again beside it: a Skipped of B's size, said with the path."""
    disk = Disk()
    a = disk.create(lines(1, 10))
    cur = Cursor("/var/log/l", can_hold=True, can_find=True, check_every=1.0, rotate_wait=5.0)
    disk.open(cur)
    disk.poll(cur, a, 0.0)
    disk.rename_away()
    b = disk.create(b"")
    disk.poll(cur, a, 1.1)
    assert disk.held == [b.ino]
    cur._held[0].size = 300                           # seen at 300 bytes by a look
    disk.held.clear()                                 # the connection drops: handles gone
    disk.rename_away()
    c = disk.create(lines(1, 2, "c"))
    act = cur.opened(1, c.ino, len(c.data), bytes(c.data[:HEAD_BYTES]))
    assert isinstance(act, FindRotated) and act.identity.ino == a.ino
    act = cur.found(True, [])                         # A found again; B nowhere
    evs = cur.take_events()
    skipped = [e for e in evs if isinstance(e, Skipped)]
    assert len(skipped) == 1 and skipped[0].nbytes == 300
    assert "/var/log/l" in skipped[0].message and "removed before it was read" in skipped[0].message


@pytest.mark.parametrize("away", ["restart", "reconnect"])
def test_the_file_at_the_path_after_an_absence_is_held_with_the_rotated_ones(away: str) -> None:
    """While we were not reading (the daemon down: `restart`; the connection lost:
    `reconnect`) A was rotated twice: B beside it, C at the path.  A is found and drained,
    then B; C is rotated away meanwhile and D made.  C is read between B and D: it was held
    (Hold) when A was found.  Before, only B was held, the path was looked at a second after
    B was opened, named D by then, and C was never read (adv128's composite trial: 2,415
    lines of an SSH log rotated at 500 lines/s, after a restart under an SSH outage)."""
    disk = Disk()
    a = disk.create(lines(1, 10, "a"))
    first = Cursor("/l", can_hold=True, can_find=True, check_every=1.0, rotate_wait=5.0)
    disk.open(first)
    disk.poll(first, a, 0.0)
    a.data += lines(11, 12, "a")                       # written after the last read
    disk.rename_away()
    b = disk.create(lines(1, 5, "b"))
    disk.rename_away()
    c = disk.create(lines(1, 3, "c"))
    if away == "restart":
        cur = Cursor("/l", saved=position(first, 10 * len(lines(1, 1, "a")), 11, a),
                     can_hold=True, can_find=True, check_every=1.0, rotate_wait=5.0)
    else:
        cur = first
        disk.held.clear()
    act = cur.opened(1, c.ino, len(c.data), bytes(c.data[:HEAD_BYTES]))
    assert isinstance(act, FindRotated) and act.identity.ino == a.ino
    disk.held.append(b.ino)                           # the source holds B, found after A
    act, evs = disk.answer(cur, cur.found(True, [(1, b.ino, len(b.data))]), a)
    assert disk.held == [b.ino, c.ino]                # C too, as the path named it
    assert act == Reopen("rotated") and data_of(evs) == lines(11, 12, "a")
    disk.rename_away()                                # C rotated away while B is read
    d = disk.create(lines(1, 2, "d"))
    got = []
    for now in (0.1, 1.2, 2.3, 3.4, 4.5):
        f, act, evs = disk.reopen(cur)
        got.append(f.ino)
        while not isinstance(act, Reopen) and now < 9:
            act, more = disk.poll(cur, f, now)
            evs += more
            now += 1.1
        contiguous(evs)
        assert data_of(evs) == bytes(f.data), f"{f.ino}: read {len(data_of(evs))} bytes"
        if f is d:
            break
    assert got == [b.ino, c.ino, d.ino]
