"""The follow algorithm of a file source, written once and without I/O.

LocalFileSource (os.pread, watchdog) and SSHFileSource (SFTP) follow a log the same way, so
that way lives here and the two cannot drift apart.  A `Cursor` holds where reading stands
(offset, the identity of the file, the bytes just before the offset) and decides, from facts
its source gives it, what to do next.  It never touches a file, a socket or a clock, so each
decision is tested with plain bytes (tests/test_cursor.py); the sources keep only their I/O.

The conversation (`drive` runs it; a source only answers what it is asked):

    opened(dev, ino, size, head)    a file was opened at the path
    -> Read(pos, n)                 read n bytes at pos of that file, then got(data)
    -> Locate()                     where does its latest startup begin: located(offset, line)
    -> Look(head)                   what does the path name now: looked(PathFacts)
    -> Poll() / Wait(idle)          (after the next wakeup) the file's size: poll(size, now)
    -> Reopen(reason)               the file is left and drained: open the path, opened(...)
    -> Hold(dev, ino)               keep the file the path names open, read it after ours: held(ok, size)
    -> FindRotated(identity, ...)   ours was rotated while we were not reading: found(ok, held)

after every call, take_events() hands out the Opened / Data / SourceState to yield.

Why it decides what it decides:

* Start: `resume` at a saved Position only if its identity, the file's size and the hash of
  the bytes before it all fit (a replaced file is never resumed in its middle), or, where
  another inode is at the path and ours is not found beside it (below), if that file begins
  as ours did and holds our bytes before the position: a copy (the logs moved to another
  host, an NFS remount's new st_dev, rsync while the daemon was stopped); otherwise the
  latest startup (Locate, when the source has a locator); otherwise byte 0.  The same
  path opened again after a lost connection is `reconnected` if it is still our file up to
  our offset, else a new file read from byte 0 (`rotated`).
* Truncation: every read starts with the TAIL_BYTES before our offset; if they changed, or
  the file is shorter than our offset, it was truncated and written again: `truncated`, from
  byte 0.  A file that does not grow is re-checked that way every `check_every`.  First a
  copy is looked for (FindRotated with `copy`: logrotate's `copytruncate` copied the log
  before truncating it, so the copy beside it holds what we had not read): found, it is
  read from our offset to its end, then the truncated file (Reopen).  The same happens when
  the truncation happened while we were not reading (same dev:inode, other bytes).
* A hole: a writer that does not append (`server > log`) writes on at its old offset after
  a truncation, so the file begins with zeros as long as what it had written.  Reading
  starts where they end, found in a few small reads (`_skip_hole`); that offset is exactly
  what the writer had written, so what neither our reading nor a copy reached is said lost
  to the byte (`_say_cut`).  The Opened of a truncated file still empty waits for its
  first bytes, which tell whether they are a hole.
* Rotation: every `check_every` the path is looked at.  Another file there (rename rotation,
  or a new file after a deletion): ours is read to its end (a descriptor / SFTP handle still
  reads a renamed or deleted file), and on while it grows, until it has been quiet for
  `rotate_wait` seconds (a server reopens its log a moment after logrotate renamed it, and
  writes to the old one meanwhile), or until a file after it has bytes (the writer moved
  on); then Reopen.  Nothing there: said once, and ours is read on until a file appears.
* A copy of ours: the file opened after ours was left begins as ours did, and holds our
  bytes before our offset and at each mark (a window at every power of two we read past):
  it replaced ours with our bytes and more (rsync's temp file renamed over the log), and is
  read on from our offset (`copied`), not again from byte 0.
* A chain of rotations: the file the path names when ours is left is held open at once
  (Hold, by dev:inode, where the source tells it), and while ours drains the path is looked
  at every cycle, each new file held behind the others; Reopen takes the first held file.
  So a log renamed every second while its writer reopens late loses no file in between.
* Rotated while we were not reading (a lost connection, a restart of the daemon): the path
  names another file, so ours is looked for among the rotated names beside it (FindRotated:
  the same identity, at least our offset long, the same bytes before our offset).  Found: it
  is drained from our offset, then the rotated files written after it (by mtime), then the
  new file is read from byte 0: the file the path named when we came back is held with the
  rotated ones (Hold), so a rotation while they drain does not step over it.  A file held
  before a lost connection that is neither found again nor at the path was removed unread: a
  `Skipped` with its size.  Not found: what it held
  past our offset is lost: a `Skipped` says so (with the bytes known to be unread), and the
  new file is read from byte 0.
* An identity taken while the file was shorter than HEAD_BYTES is completed as the file grows,
  if its first bytes are still the ones identified.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol

from .. import log
from .base import (
    ARCHIVE_SUFFIXES, HEAD_BYTES, TAIL_BYTES, Data, FileIdentity, Opened, Position, Skipped,
    SourceEvent, SourceState, digest, identity_of,
)


@dataclass(frozen=True, slots=True)
class Read:
    """Read `n` bytes at `pos` of the open file; answer `Cursor.got(data)` (fewer bytes at
    its end, b"" past it)."""

    pos: int
    n: int


@dataclass(frozen=True, slots=True)
class Locate:
    """Find where the latest startup begins in the open file; answer `Cursor.located`."""


@dataclass(frozen=True, slots=True)
class Look:
    """What does the path name now?  Answer `Cursor.looked(PathFacts)`.  `head`: neither
    dev/inode nor the size told; include the first HEAD_BYTES of the file at the path."""

    head: bool = False


@dataclass(frozen=True, slots=True)
class Poll:
    """Give the open file's size now: `Cursor.poll(size, now)`."""


@dataclass(frozen=True, slots=True)
class Wait(Poll):
    """Nothing to do before the next wakeup (inotify, poll interval); then as Poll.  `idle`:
    seconds since the last new byte (a source may poll a quiet log less often); `within`:
    wake by then at the latest (seconds), whatever the poll interval (a rotated file that
    becomes quiet is left on time)."""

    idle: float = 0.0
    within: float | None = None


@dataclass(frozen=True, slots=True)
class Reopen:
    """Our file was left (rotated, recreated) and read to its end: close it and open the
    first file held (`Hold`), or the path when none is; `Cursor.opened` then reads it from
    byte 0 for this `reason`."""

    reason: str


@dataclass(frozen=True, slots=True)
class Hold:
    """The path names `dev`:`ino`, a file after ours (a rename rotation, a new file after a
    deletion, a symlink swapped): open the path now and keep that file open behind the ones
    already held, to be read from byte 0 once the files before it are drained.  However
    many rotations happen while ours is drained, each file is read (an open descriptor reads
    a renamed or deleted file).  Answer `Cursor.held(ok, size)`: ok False when the path
    names another file by the time it is opened (it is looked at again)."""

    dev: int
    ino: int


@dataclass(frozen=True, slots=True)
class FindRotated:
    """The path names another file, and ours, `identity`, was left while we were not reading:
    look for it among the rotated names beside the path (`rotated_names`), a file that
    `is_ours` (identity, at least `offset` bytes, `tail_sha` the hash of the bytes just before
    `offset`); answer `Cursor.found(ok, held)`.  When ok, the source's reads go to that file
    until the Reopen that follows its drain, and the rotated files written after it
    (`later_files`: more rotations happened meanwhile) are held, in that order, as by `Hold`:
    `held` is their (dev, ino, size)."""

    identity: FileIdentity
    offset: int
    tail_sha: str | None
    # logrotate's `copytruncate`: ours was copied, then truncated in place.  The copy is
    # another inode holding our bytes: told by its head and the bytes before `offset` only
    # (`identity` carries no dev:inode), and nothing is held after it.
    copy: bool = False


Action = Read | Locate | Look | Poll | Reopen | FindRotated | Hold

# names a rotated copy of a log is given beside it: `x.log.1`, `x.log-20261202`, `x.log.old`;
# compressed ones are looked into after these (sources/archive.py)
MAX_CANDIDATES = 20


def rotated_names(base: str, names: list[str]) -> list[str]:
    """The names in a directory that may be rotated copies of the log called `base`
    (logrotate's numbered and dated names, Python's RotatingFileHandler), not compressed."""
    out = []
    for n in names:
        if n == base or not n.startswith(base) or n[len(base)] not in ".-_":
            continue
        if n.lower().endswith(ARCHIVE_SUFFIXES):
            continue
        out.append(n)
    return sorted(out)[:MAX_CANDIDATES]


def is_ours(ask: FindRotated, dev: int | None, ino: int | None, size: int, head: bytes,
            before: bytes) -> bool:
    """Is a candidate of FindRotated our file?  `before`: its bytes at `before_range(ask)`."""
    if size < ask.offset or not ask.identity.matches(dev, ino, head):
        return False
    return ask.tail_sha is None or ask.offset == 0 or digest(before) == ask.tail_sha


def later_files(ours_mtime: float | None,
                candidates: list[tuple[str, int | None, float | None]]) -> list[str]:
    """The rotated files written after ours (`candidates`: name, dev, mtime; ours and files
    without dev:inode left out by the caller), oldest first: the order they were the log in.
    A writer moves on from a file for good, so a file last written after ours was last
    written came after it; one whose mtime is not after ours is older (already read)."""
    if ours_mtime is None:
        return []
    later = [(m, n) for n, dev, m in candidates if dev is not None and m is not None
             and m > ours_mtime]
    return [n for _, n in sorted(later)]


def before_range(ask: FindRotated) -> tuple[int, int]:
    """(pos, n): the bytes of a candidate `is_ours` compares."""
    lo = max(0, ask.offset - TAIL_BYTES)
    return lo, ask.offset - lo


@dataclass(frozen=True, slots=True)
class PathFacts:
    """The answer to Look: what the path names now.  `links` is the link count of the file
    we read, for a missing path: >0 it was renamed away, 0 deleted, None the source cannot
    tell (SFTP has no link count: then nothing is said about it)."""

    exists: bool
    dev: int | None = None
    ino: int | None = None
    size: int | None = None
    head: bytes | None = None
    links: int | None = None


@dataclass(slots=True)
class HeldFile:
    """A file after ours that the source holds open (`Hold`): its dev:inode and the largest
    size seen of it (more than 0: the writer has moved on to it, so every file before it is
    complete once drained)."""

    dev: int
    ino: int
    size: int


GONE_LOOK = 0.1        # seconds between looks while the path names nothing
MAX_HELD = 64          # files held at once (a rotation every few ms would exhaust descriptors)

# what a pending Read is for: the answer in got() goes to `_got_<purpose>`
_READS = frozenset({"resume", "last", "reconnect", "data", "truncated", "head", "verify", "drain",
                    "hole", "hole_end", "copied", "copied_mark", "saved_copy"})
MARK_FIRST, MARK_BYTES = 1024, 256   # the first mark of what was read, the bytes it digests
ROTATE_WAIT = 5.0      # seconds a rotated file must stay quiet before it is left (Vector's)
# A writer that does not append (`server > log`, not `>>`) writes on at its old offset after
# a truncation: the file then begins with a hole of zeros as long as what it had written.
HOLE_PROBE = 64        # bytes a probe reads: all zero = still inside the hole (no log's
                       # text holds so many zero bytes in a row)
HOLE_STEP = 64 << 10   # the first probe's distance past the head; doubled until past the hole
HOLE_SCAN = 64 << 10   # the hole's end is known to this much: read it byte by byte


class Cursor:
    """Where reading a followed file stands, and what to do next (see the module doc).

    `offset` is the next byte to read, `line_number` the line reading (re)started at (the
    Opened's), `identity` the file's, `last` the bytes just before `offset`.  `saved`: the
    Position to resume at; `can_locate`: the source can answer Locate; `can_find`: it can
    answer FindRotated; `rotate_wait`: how long a rotated file must be quiet to be left.

    Long because: one state machine, the follow algorithm of the module doc written once; its
    steps (start, resume, truncation, rotation, a chain, rotated while away) answer each
    other's questions and share the offset, the identity and the held files, and each is
    tested with plain bytes (tests/test_cursor.py).
    """

    def __init__(self, path: str, *, saved: Position | None = None, can_locate: bool = False,
                 can_find: bool = False, can_hold: bool = False, read_size: int = 1 << 20,
                 check_every: float = 1.0, rotate_wait: float = 0.0,
                 logger: Any | None = None) -> None:
        self.path = path
        self.saved = saved
        self.can_locate = can_locate
        self.can_find = can_find
        self.can_hold = can_hold
        self.read_size = read_size
        self.check_every = check_every
        self.rotate_wait = rotate_wait
        self.log = logger if logger is not None else log.get("source.cursor").bind(path=path)
        self.offset: int | None = None       # None: not positioned in any file yet
        self.line_number = 1
        self.identity: FileIdentity | None = None
        self.last = b""
        self.rotations = 0
        self.truncations = 0
        self._events: list[SourceEvent] = []
        self._doing = ""                     # what the pending Read / Look / Locate is for
        self._file: FileIdentity | None = None   # identity of the file just opened
        self._begin: tuple[int, int, str, bool] = (0, 1, "attach", True)
        self._switch: str | None = None      # Reopen was asked: the next file is a new one
        self._marks: dict[int, str] = {}     # what we read of this file, at powers of two
        self._checking: list[int] = []       # marks still to compare in a file replacing ours
        self._gone: str | None = None        # the path names nothing: rotated / recreated
        self._leaving = "rotated"            # why the file being drained is left
        self._left = False                   # ours was left: read on until quiet, then Reopen
        self._drain_after = False            # once positioned, drain (a found rotated file)
        self._seen = 0                       # the largest size of our file seen
        self._mtime: float | None = None     # the opened file's modification time
        self._held: list[HeldFile] = []      # files after ours, held open by the source
        self._holding: tuple[int, int] = (0, 0)   # the pending Hold's dev:inode
        self._hold_size = 0                  # and the path's size when it was seen
        self._resume_after_hold = False      # that Hold came first at a restart (found())
        self._lost_held: list[HeldFile] = []  # held when the connection was lost
        self._head = b""                     # the first bytes of the file just opened
        self._copying = False                # draining the copy of a truncated file
        # at a truncation, where our reading of the old bytes ended (in the file or its
        # copy): a writer that leaves a hole tells how much more it had written (lost)
        self._cut: int | None = None
        self._hole = (0, -1)                 # the hole search: (all zero before, not zero at)
        # the Opened of a truncated file still empty: said with its first bytes, which may
        # be a hole's zeros (then it is said past them)
        self._pending: Opened | None = None
        # the current poll cycle: read, complete the head, verify, look, wait
        self._size = 0
        self._now = 0.0
        self._phase = "done"
        self._due = False
        self._got = False
        self._verified = False
        self._checked: float | None = None
        self._data_at: float | None = None

    def take_events(self) -> list[SourceEvent]:
        """The events decided since the last call, in order."""
        out, self._events = self._events, []
        return out

    # opening ------------------------------------------------------------------------------

    def opened(self, dev: int | None, ino: int | None, size: int, head: bytes,
               mtime: float | None = None) -> Action:
        """A file was opened at the path (first time, after Reopen, after a lost connection):
        decide where to read it from.  `mtime`: its modification time (epoch seconds)."""
        self._doing, self._phase = "", "done"
        self._mtime = mtime
        self._file = identity_of(dev, ino, head)
        self._head = head
        self._pending = None
        self._size = size
        self._left = False
        if self._switch is not None:
            reason, self._switch = self._switch, None
            if reason == "rotated" and self._may_be_our_copy(head, size):
                # replaced by a copy of itself and more (rsync, a sync's temp file renamed
                # over the log): ours up to our offset?  Then read on from there
                return self._ask(Read(self.offset - len(self.last), len(self.last)), "copied")
            return self._start(0, 1, reason, True)
        if self.offset is None:
            saved = self.saved
            if saved is not None and saved.identity is not None and \
                    saved.identity.matches(dev, ino, head) and saved.offset <= size:
                if saved.tail_sha is None or saved.offset == 0:
                    return self._start(saved.offset, saved.line_number, "resume", False)
                lo = max(0, saved.offset - TAIL_BYTES)
                return self._ask(Read(lo, saved.offset - lo), "resume")
            if saved is not None and saved.identity is not None and self.can_find and \
                    saved.offset > 0:
                if self._same_inode(saved.identity):
                    # truncated in place while the daemon was down: a copy beside it?
                    self._cut = saved.offset
                    return self._ask(self._copy_search(saved.identity, saved.offset,
                                                       saved.tail_sha), "find_saved_copy")
                # rotated while the daemon was down?  The rest of ours may be beside the path
                return self._ask(FindRotated(saved.identity, saved.offset, saved.tail_sha),
                                 "find_saved")
            if self._may_be_saved_copy():
                return self._ask(self._saved_tail(), "saved_copy")
            return self._not_resumed()
        assert self.identity is not None
        # opened again after a lost connection: the files held went with it
        self._lost_held += self._held
        self._held = []
        # still our file, up to our offset?
        if self.identity.matches(dev, ino, head) and size >= self.offset:
            if not self.last:
                return self._reconnected()
            return self._ask(Read(self.offset - len(self.last), len(self.last)), "reconnect")
        return self._left_while_away()

    def found(self, ok: bool, held: list[tuple[int, int, int]] | tuple[()] = ()) -> Action:
        """The answer to FindRotated: our file was found (the source reads it now) or not;
        `held`: (dev, ino, size) of the later rotated files the source now holds."""
        if self._doing in ("find_copy", "find_saved_copy", "find_reconnect_copy"):
            return self._found_copy(ok)
        self._held = [HeldFile(*h) for h in held] if ok else []
        if self._doing == "find_saved":
            saved = self.saved
            assert saved is not None
            if not ok:
                if self._may_be_saved_copy():
                    return self._ask(self._saved_tail(), "saved_copy")
                return self._saved_file_gone()
            self.log.info("the log was rotated since the position was saved: reading the rest "
                          "of the rotated file, then the new one", saved_offset=saved.offset,
                          rotated_after=len(self._held))
            at_path, self._file, self._drain_after = self._file, saved.identity, True
            if self._hold_at_path(at_path):
                self._resume_after_hold = True
                return self._ask(Hold(self._holding[0], self._holding[1]), "hold")
            return self._start(saved.offset, saved.line_number, "resume", False)
        self._expect("find_reconnect")
        assert self.offset is not None
        self._count_vanished()
        if ok:
            self.log.info("the log was rotated while disconnected: reading the rest of the "
                          "rotated file, then the new one", offset=self.offset,
                          rotated_after=len(self._held))
            self._gone = None
            self._events.append(Opened(self.offset, 0, self.identity, "reconnected", False))
            self._leaving, self._left = "rotated", True
            if self._hold_at_path(self._file):
                return self._ask(Hold(self._holding[0], self._holding[1]), "hold")
            return self._ask(Read(self.offset, self.read_size), "drain")
        unread = max(0, self._seen - self.offset)
        self._events.append(Skipped(unread, (
            f"{self.path} was rotated while disconnected and the old file was not found beside "
            f"it (removed, or in an archive that does not decode): what it held after byte "
            f"{self.offset} is lost"
            + (f" (at least {unread} bytes)" if unread else ""))))
        return self._replaced()

    def _hold_at_path(self, at_path: FileIdentity | None) -> bool:
        """Ours was found beside the path (rotated while we were not reading): the file the
        path named when it was opened is the last of the chain, to be held like the rotated
        files found after ours (True: `_holding` set, a Hold to ask).  Before, only those
        were held and the path was opened by name once they were drained; a rotation
        meanwhile (a server renaming its log every few seconds) put the next file there, and
        the one between was never read: 2,415 lines of a log rotated at 500 lines/s, after a
        restart under an SSH outage, lost without a word (adv128)."""
        if not (self.can_hold and at_path is not None and at_path.dev is not None and
                at_path.ino is not None and len(self._held) < MAX_HELD):
            return False
        key = (at_path.dev, at_path.ino)
        ours = self.saved.identity if self.offset is None and self.saved else self.identity
        if (ours is not None and key == (ours.dev, ours.ino)) or \
                any((h.dev, h.ino) == key for h in self._held):
            return False
        self._holding, self._hold_size = key, self._size
        return True

    def _saved_file_gone(self) -> Action:
        """The saved position's file is neither at the path nor beside it, and the file at the
        path is not a copy of it: what it held past the position is unread."""
        saved = self.saved
        assert saved is not None
        self._events.append(Skipped(0, (
            f"{self.path} is another file than the one the saved position was in, and "
            f"that one is not beside it any more (removed, or in an archive that does "
            f"not decode): "
            f"what it held after byte {saved.offset}, if anything, is unread")))
        self.log.warning("the file of the saved position is gone: what it held after "
                         "the position, if anything, is unread", offset=saved.offset)
        return self._not_resumed()

    def _may_be_saved_copy(self) -> bool:
        """The file at the path is another inode (or the same inode on another st_dev) than
        the saved position's, but begins as that file did and is at least as long as the
        position: a copy of it (the logs and state_dir moved to another host, an NFS remount,
        rsync while the daemon was stopped)?  The bytes before the position tell (read next)."""
        saved = self.saved
        return saved is not None and saved.identity is not None and \
            saved.tail_sha is not None and 0 < saved.offset <= self._size and \
            saved.identity.head_len > 0 and saved.identity.matches(None, None, self._head)

    def _saved_tail(self) -> Read:
        """The bytes before the saved position, whose hash it carries."""
        assert self.saved is not None
        lo = max(0, self.saved.offset - TAIL_BYTES)
        return Read(lo, self.saved.offset - lo)

    def _got_saved_copy(self, data: bytes) -> Action:
        """The bytes before the saved position are the saved file's too: the file at the path
        is a copy of it and more; resume at the position (the running daemon reads a copy on
        the same way: `copied`).  Before, it started at the latest startup: a crash written
        while the daemon was stopped was taken for history and never paged, the startup
        read again was a false `restarted`, its lines counted twice."""
        saved = self.saved
        assert saved is not None
        if digest(data) != saved.tail_sha:
            return self._saved_file_gone() if self.can_find else self._not_resumed()
        self.log.info("the log is another file holding the saved file's bytes up to the saved "
                      "position (a copy: moved, synced or remounted): reading on from there",
                      saved_offset=saved.offset)
        return self._start(saved.offset, saved.line_number, "resume", False, data)

    def _count_vanished(self) -> None:
        """The files held before the connection was lost that are neither held again nor the
        file at the path now: rotated away and removed unread, each a `Skipped` of its size."""
        lost, self._lost_held = self._lost_held, []
        here = {(h.dev, h.ino) for h in self._held}
        if self._file is not None and self._file.dev is not None:
            here.add((self._file.dev, self._file.ino))
        for h in lost:
            if (h.dev, h.ino) in here:
                continue
            msg = (f"a rotated file of {self.path} (inode {h.ino}, at least {h.size} bytes) was "
                   "removed before it was read (while disconnected): its lines are lost")
            self.log.warning("a rotated file was removed before it was read", inode=h.ino,
                             nbytes=h.size)
            self._events.append(Skipped(h.size, msg))

    def _last_sha(self) -> str | None:
        """The hash of the bytes before our offset, as FindRotated compares them."""
        return digest(self.last) if self.last else None

    def _same_inode(self, ident: FileIdentity) -> bool:
        """Is the file just opened the file `ident` was taken from (by dev:inode)?"""
        f = self._file
        return f is not None and f.dev is not None and ident.dev is not None and \
            (f.dev, f.ino) == (ident.dev, ident.ino)

    def _copy_search(self, ident: FileIdentity, offset: int, tail_sha: str | None
                     ) -> FindRotated:
        """FindRotated for a copy of the file `ident`: its bytes, another inode."""
        return FindRotated(FileIdentity(None, None, ident.head_len, ident.head_sha), offset,
                           tail_sha, copy=True)

    def _found_copy(self, ok: bool) -> Action:
        """The answer to a copy search (a truncation seen live, after a lost connection, or
        while the daemon was down): found, the copy is read from our offset to its end, then
        the truncated file from its start; not found, the truncated file at once (where a
        writer that left a hole tells what was lost: `_say_cut`)."""
        doing = self._doing
        if doing == "find_saved_copy":
            saved = self.saved
            assert saved is not None
            if not ok:     # (or deleted, and its inode given to the new log): as before
                self._cut = None
                return self._ask(FindRotated(saved.identity, saved.offset, saved.tail_sha),
                                 "find_saved")
            self.log.info("the log was truncated since the position was saved "
                          "(copytruncate): reading the rest of the copy, then the log",
                          saved_offset=saved.offset)
            self._file, self._drain_after, self._copying = saved.identity, True, True
            self.truncations += 1
            return self._start(saved.offset, saved.line_number, "resume", False)
        assert self.offset is not None
        if doing == "find_reconnect_copy":
            if not ok:     # (or deleted, and its inode given to the new log): as before
                self._cut = None
                return self._rotated_while_away()
            self.truncations += 1
            self._count_vanished()
            self._gone = None
            self._events.append(Opened(self.offset, 0, self.identity, "reconnected", False))
        if not ok:
            return self._ask(Read(0, HEAD_BYTES), "truncated")
        self.log.info("the log was truncated after a copy of it was made (copytruncate): "
                      "reading the rest of the copy first", offset=self.offset)
        self._leaving, self._left, self._copying = "truncated", True, True
        return self._ask(Read(self.offset, self.read_size), "drain")

    def _left_while_away(self) -> Action:
        if self.can_find and self.identity is not None and self._same_inode(self.identity):
            # the same file, truncated while we were not reading: a copy beside it?
            assert self.offset is not None
            self._cut = self.offset
            return self._ask(self._copy_search(self.identity, self.offset, self._last_sha()),
                             "find_reconnect_copy")
        return self._rotated_while_away()

    def _rotated_while_away(self) -> Action:
        if self.can_find:
            assert self.identity is not None and self.offset is not None
            return self._ask(FindRotated(self.identity, self.offset, self._last_sha()),
                             "find_reconnect")
        return self._replaced()

    def located(self, offset: int, line_number: int) -> Action:
        """The answer to Locate: the latest startup begins at `offset`, on `line_number`."""
        self._expect("locate")
        return self._start(offset, line_number, "attach", True)

    def _got_resume(self, data: bytes) -> Action:
        assert self.saved is not None
        if digest(data) == self.saved.tail_sha:
            return self._start(self.saved.offset, self.saved.line_number, "resume", False, data)
        return self._not_resumed()

    def _not_resumed(self) -> Action:
        if self.saved is not None:
            self.log.info("saved position does not fit this file (replaced): starting at the "
                          "latest startup in it", saved_offset=self.saved.offset)
        if self.can_locate:
            return self._ask(Locate(), "locate")
        return self._start(0, 1, "attach", True)

    def _may_be_our_copy(self, head: bytes, size: int) -> bool:
        """The file opened after ours was left begins as ours did (the head's hash) and is
        at least as long as what we read: it may hold our bytes (their tail is read next)."""
        ident = self.identity
        return ident is not None and self.offset is not None and self.offset > 0 and \
            size >= self.offset and ident.head_len > 0 and \
            len(self.last) > 0 and ident.matches(None, None, head)

    def _got_copied(self, data: bytes) -> Action:
        """The bytes before our offset in the file that replaced ours: the same, and the
        same at each mark (`_remember`: a window at every power of two we read past), it is a
        copy of ours (and more): read on from our offset, nothing again.  Before, each sync
        of an rsync-delivered log read it from byte 0 again: its startups and crashes
        counted once per sync, a false `restarted`.  A new log that only begins and ends as
        ours did (a fixed banner, stamps of one width) differs at a mark: read from byte 0."""
        assert self.offset is not None
        if data != self.last:
            return self._start(0, 1, "rotated", True)
        self._checking = sorted(p for p in self._marks if p + MARK_BYTES <= self.offset)
        return self._check_mark()

    def _check_mark(self) -> Action:
        assert self.offset is not None
        if self._checking:
            return self._ask(Read(self._checking[0], MARK_BYTES), "copied_mark")
        self.log.info("the log was replaced by a copy of itself and more (a new inode, the "
                      "same bytes up to where it was read): reading on", offset=self.offset)
        return self._start(self.offset, self.line_number, "copied", False, last=self.last)

    def _got_copied_mark(self, data: bytes) -> Action:
        pos = self._checking.pop(0)
        if digest(data) != self._marks[pos]:
            self._checking = []
            return self._start(0, 1, "rotated", True)
        return self._check_mark()

    def _remember(self, chunk: bytes) -> None:
        """Marks of what we read (a digest of MARK_BYTES at every power of two from
        MARK_FIRST): what a file that replaces ours must hold to be a copy of it."""
        assert self.offset is not None
        start, end = self.offset, self.offset + len(chunk)
        p = MARK_FIRST
        while p + MARK_BYTES <= end:
            if p >= start:
                self._marks[p] = digest(chunk[p - start: p - start + MARK_BYTES])
            p *= 2

    def _got_reconnect(self, data: bytes) -> Action:
        return self._reconnected() if data == self.last else self._left_while_away()

    def _reconnected(self) -> Action:
        assert self.offset is not None
        self._count_vanished()
        self._gone, self._doing = None, ""
        self._events.append(Opened(self.offset, 0, self.identity, "reconnected", False))
        return Poll()

    def _replaced(self) -> Action:
        self.log.warning("the log changed while disconnected (rotated or replaced): reading "
                         "the new file from its start")
        self.rotations += 1
        return self._start(0, 1, "rotated", True)

    def _start(self, offset: int, line_number: int, reason: str, new_file: bool,
               last: bytes | None = None) -> Action:
        """Read from `offset` of the file just opened, once the bytes before it are known
        (from its start: past the hole it may begin with, `_skip_hole`)."""
        self._begin = (offset, line_number, reason, new_file)
        if offset == 0 and self._head[:1] == b"\0":
            return self._skip_hole(self._head)
        if last is None and offset > 0:
            lo = max(0, offset - TAIL_BYTES)
            return self._ask(Read(lo, offset - lo), "last")
        return self._got_last(last or b"")

    def _skip_hole(self, first: bytes) -> Action:
        """The file's `first` bytes begin with a zero: read from where the zeros end."""
        zeros = len(first) - len(first.lstrip(b"\0"))
        if zeros < len(first):
            return self._past_hole(zeros)
        self._hole = (zeros, -1)
        return self._probe_hole()

    def _probe_hole(self) -> Action:
        """The file begins with zeros (a non-appending writer after a truncation): find
        where they end in a few small reads (doubling, then halving), not by reading them."""
        lo, hi = self._hole
        if hi < 0:
            return self._ask(Read(max(HOLE_STEP, 2 * lo), HOLE_PROBE), "hole")
        if hi - lo <= HOLE_SCAN:
            return self._ask(Read(lo, max(0, hi - lo)), "hole_end")
        return self._ask(Read((lo + hi) // 2, HOLE_PROBE), "hole")

    def _got_hole(self, data: bytes) -> Action:
        lo, hi = self._hole
        pos = max(HOLE_STEP, 2 * lo) if hi < 0 else (lo + hi) // 2
        zeros = len(data) - len(data.lstrip(b"\0"))
        if len(data) == HOLE_PROBE and zeros == HOLE_PROBE:
            self._hole = (pos + len(data), hi)        # zero up to here (zero in between)
        else:
            self._hole = (lo, pos + zeros)            # not zero at pos + zeros (or the end)
        return self._probe_hole()

    def _got_hole_end(self, data: bytes) -> Action:
        lo, _ = self._hole
        return self._past_hole(lo + len(data) - len(data.lstrip(b"\0")))

    def _past_hole(self, end: int) -> Action:
        """The zeros end at `end`: read from there (said: the writer should append)."""
        offset, line_number, reason, new_file = self._begin
        self.log.warning("the log begins with zeros (a hole): its writer does not append "
                         "(`>` instead of `>>`, or no O_APPEND), so after a truncation it "
                         "writes on at its old offset; skipped to the first byte written",
                         zeros=end)
        self._head = b""
        return self._start(end, line_number, reason, new_file)

    def _got_last(self, data: bytes) -> Action:
        offset, line_number, reason, new_file = self._begin
        self.offset, self.line_number, self.last = offset, line_number, data[-TAIL_BYTES:]
        if reason != "copied":
            self._marks = {}       # of another file (a copy keeps them: the same bytes)
        self.identity, self._gone, self._doing = self._file, None, ""
        self._seen = self._size
        told = reason in ("attach", "resume")   # what lies before `size` was written before
        ev = Opened(offset, line_number, self.identity, reason, new_file,
                    self._size if told else None, self._mtime if told else None)
        if reason == "truncated" and offset == 0 and self._size == 0:
            self._pending = ev      # its first bytes tell whether it begins with a hole
        else:
            if reason == "truncated":
                self._say_cut(offset)
            self._cut = None
            self._events.append(ev)
        if self._drain_after:
            self._drain_after = False
            self._leaving, self._left = "truncated" if self._copying else "rotated", True
            return self._ask(Read(offset, self.read_size), "drain")
        return Poll()

    def _say_cut(self, start: int) -> None:
        """The truncated file is read from `start`.  A writer that does not append left a
        hole of `start` bytes: it had written that much before the truncation, so what our
        reading (of the file, then of its copy) did not reach is known, lost, and said.  An
        appending writer tells nothing: what it wrote between our last read and the
        truncation (one read batch) is lost unknown, unless a copy held it."""
        cut, self._cut = self._cut, None
        if cut is None or start <= cut:
            return
        lost = start - cut
        self.log.warning("the log was truncated before all of it was read, and no copy beside "
                         "it holds the rest: lost", nbytes=lost)
        self._events.append(Skipped(lost, (
            f"{self.path} was truncated (logrotate copytruncate) before {lost} bytes of it were "
            f"read, and no copy beside it holds them: lost")))

    # following ----------------------------------------------------------------------------

    def poll(self, size: int, now: float) -> Action:
        """The open file is `size` bytes long at `now` (monotonic seconds): a new cycle."""
        if self.offset is None:
            raise RuntimeError("poll() before the cursor is positioned in a file")
        self._size, self._now = size, now
        self._seen = max(self._seen, size)
        if self._checked is None:
            self._checked = now
        if self._data_at is None:
            self._data_at = now
        self._due = now - self._checked >= self.check_every
        if self._due:
            self._checked = now
        self._phase, self._got, self._verified = "read", False, False
        return self._next()

    def check_now(self) -> None:
        """Look at the path (and verify our bytes) in the next cycle, not `check_every` after
        the last look: the source knows something changed (its directory came back)."""
        self._checked = float("-inf")

    def got(self, data: bytes) -> Action:
        """The answer to Read: the bytes read."""
        if self._doing not in _READS:
            raise RuntimeError(f"got() while no Read is pending (doing {self._doing!r})")
        handler = getattr(self, "_got_" + self._doing)
        result: Action = handler(data)
        return result

    def looked(self, facts: PathFacts) -> Action:
        """The answer to Look: is the path still our file?"""
        self._expect("look")
        ident = self.identity
        assert ident is not None
        if self._left:
            # draining a rotated file: every cycle, the path is looked at for the next one
            return self._chain(facts) or self._ask(Read(self.offset or 0, self.read_size),
                                                   "drain")
        if not facts.exists:
            if self._gone is None:
                self._gone = "recreated" if facts.links == 0 else "rotated"
                if facts.links is not None:
                    what = "was rotated away" if self._gone == "rotated" else "was deleted"
                    self._events.append(SourceState(
                        True, f"{self.path} {what}; draining it, waiting for a new one"))
            return self._next()
        if ident.dev is not None and facts.dev is not None:
            other = (facts.dev, facts.ino) != (ident.dev, ident.ino)
        elif facts.size == self._size:
            other = False      # no inode to compare: as long as ours is taken to be ours
        elif facts.head is None:
            return self._ask(Look(head=True), "look")
        elif len(facts.head) < ident.head_len:
            other = (facts.size or 0) < self._size   # too short to compare heads
        else:
            # the same first bytes, but shorter than what we read of ours: another file (a
            # relaunch whose first KiB is the same: an engine that stamps nothing; before,
            # over SFTP the deleted file's handle was read on for good, the new log never)
            other = not ident.matches(None, None, facts.head) or \
                (facts.size or 0) < (self.offset or 0)
        if not other:
            self._gone = None
            return self._next()
        self._leaving, self._left = self._gone or "rotated", True
        return self._chain(facts) or self._ask(Read(self.offset or 0, self.read_size), "drain")

    def _chain(self, facts: PathFacts) -> Action | None:
        """The path names a file after ours: hold it if it is new to us (Hold), note its size
        if it is held already.  None: nothing to hold (no dev:inode to tell files apart, the
        path names nothing or ours, MAX_HELD reached)."""
        if not (self.can_hold and facts.exists and facts.dev is not None and
                facts.ino is not None):
            return None
        ident = self.identity
        if ident is not None and (facts.dev, facts.ino) == (ident.dev, ident.ino):
            return None
        for h in self._held:
            if (h.dev, h.ino) == (facts.dev, facts.ino):
                h.size = max(h.size, facts.size or 0)
                return None
        if len(self._held) >= MAX_HELD:
            return None
        self._holding = (facts.dev, facts.ino)
        self._hold_size = facts.size or 0
        return self._ask(Hold(facts.dev, facts.ino), "hold")

    def held(self, ok: bool, size: int = 0) -> Action:
        """The answer to Hold: the file was opened and is held (`size` now), or the path
        named another one by then (looked at again in the next cycle)."""
        self._expect("hold")
        if ok:
            dev, ino = self._holding
            self._held.append(HeldFile(dev, ino, max(size, self._hold_size)))
            self.log.info("the log was rotated: holding the new file until the old one is "
                          "drained", inode=ino, held=len(self._held))
        if self._resume_after_hold:          # (the file at the path at a restart: found())
            self._resume_after_hold = False
            saved = self.saved
            assert saved is not None
            return self._start(saved.offset, saved.line_number, "resume", False)
        return self._ask(Read(self.offset or 0, self.read_size), "drain")

    def _next(self) -> Action:
        """The rest of the cycle: read what is new, complete the head, verify, look, wait."""
        assert self.offset is not None and self.identity is not None
        if self._phase == "read":
            if self._size < self.offset:
                return self._truncated()
            if self._size > self.offset:
                back = len(self.last)
                n = min(self.read_size, self._size - self.offset)
                return self._ask(Read(self.offset - back, back + n), "data")
            self._phase = "head"
        if self._phase == "head":
            self._phase = "verify"
            if self._got and self.identity.head_len < HEAD_BYTES and \
                    self.offset > self.identity.head_len:
                return self._ask(Read(0, HEAD_BYTES), "head")
        if self._phase == "verify":
            self._phase = "look"
            if self._left:           # a rotated file: nothing to verify
                self._phase = "done"
                if self.can_hold:    # the path, for the file after the next one
                    return self._ask(Look(), "look")
                return self._leave_when_quiet()
            if self._due and self.last and not self._verified:
                return self._ask(Read(self.offset - len(self.last), len(self.last)), "verify")
        if self._phase == "look":
            self._phase = "done"
            if self._due or self._gone is not None:
                return self._ask(Look(), "look")
        self._doing = ""
        idle = self._now - (self._data_at if self._data_at is not None else self._now)
        # the path names nothing (a rename, the writer not reopened yet): look again soon,
        # the next file may be renamed away again within a second
        return Wait(idle, within=GONE_LOOK if self._gone is not None else None)

    def _got_data(self, data: bytes) -> Action:
        # the read began with the bytes before our offset: changed means rewritten
        back = len(self.last)
        if data[:back] != self.last:
            return self._truncated()
        chunk = data[back:]
        if not chunk:          # shorter than it was a moment ago: the next cycle will tell
            self._phase = "head"
            return self._next()
        if self._pending is not None:
            # the first bytes of a truncated file that was empty: a hole, or the new log
            opening, self._pending = self._pending, None
            if chunk[:1] == b"\0":
                self._begin = (0, opening.line_number, opening.reason, opening.new_file)
                self._file = self.identity
                return self._skip_hole(chunk)
            self._cut = None
            self._events.append(opening)
        self._take(chunk)
        self._got = self._verified = True
        return self._next()

    def _got_verify(self, data: bytes) -> Action:
        if data != self.last:
            return self._truncated()
        self._verified = True
        return self._next()

    def _truncated(self) -> Action:
        self.truncations += 1
        self.log.warning("log truncated: reading it again from the start",
                         offset=self.offset, size=self._size)
        assert self.offset is not None and self.identity is not None
        self._cut = self.offset
        if self.can_find and self.offset > 0 and not self._left:
            # logrotate's copytruncate: what we had not read yet is in the copy beside it
            return self._ask(self._copy_search(self.identity, self.offset, self._last_sha()),
                             "find_copy")
        return self._ask(Read(0, HEAD_BYTES), "truncated")

    def _got_truncated(self, data: bytes) -> Action:
        assert self.identity is not None
        self.identity = identity_of(self.identity.dev, self.identity.ino, data)
        self.offset, self.line_number, self.last = 0, 1, b""
        ev = Opened(0, 1, self.identity, "truncated", True)
        if not data or data[:1] == b"\0":
            # empty, or a hole (the writer does not append): said with its first bytes
            self._pending = ev
        else:
            self._cut = None
            self._events.append(ev)
        self._phase = "read"
        return self._next()

    def _got_head(self, data: bytes) -> Action:
        ident = self.identity
        assert ident is not None
        if ident.matches(ident.dev, ident.ino, data):   # grown, not replaced: a longer head
            self.identity = identity_of(ident.dev, ident.ino, data)
        return self._next()

    def _got_drain(self, data: bytes) -> Action:
        if data:
            self._take(data)
            return self._ask(Read(self.offset or 0, self.read_size), "drain")
        return self._leave_when_quiet()

    def _leave_when_quiet(self) -> Action:
        """Ours was left and read to its end: Reopen once it has been quiet `rotate_wait`
        (the writer reopened its log), or at once when a file held after it has bytes (the
        writer moved on to it: a writer never goes back, so what was read is all of ours;
        only asked after a drain read that followed that sight), else read on at the next
        wakeup."""
        if self._copying:
            # a copy is complete when its original is truncated: back to the original
            self._copying = False
            self.log.info("the copy was read to its end: reading the truncated log from its "
                          "start", offset=self.offset)
            self._cut = self.offset
            self._switch, self._gone, self._doing, self._left = "truncated", None, "", False
            return Reopen("truncated")
        quiet = self._now - (self._data_at if self._data_at is not None else self._now)
        moved_on = any(h.size > 0 for h in self._held)
        if quiet < self.rotate_wait and not moved_on:
            self._doing = ""
            # the path is looked at each cycle meanwhile (can_hold): often, not to miss a file
            soon = GONE_LOOK if self.can_hold else 0.5
            return Wait(quiet, within=min(soon, self.rotate_wait - quiet))
        self.rotations += 1
        self.log.info("log rotated: following the new file", reason=self._leaving,
                      held=len(self._held))
        if self._held:
            self._held.pop(0)        # the source opens that one, not the path
        self._switch, self._gone, self._doing, self._left = self._leaving, None, "", False
        return Reopen(self._leaving)

    # helpers ------------------------------------------------------------------------------

    def _take(self, chunk: bytes) -> None:
        assert self.offset is not None
        if self._pending is not None:          # (read by a drain: said as it is)
            self._events.append(self._pending)
            self._pending = self._cut = None
        self._events.append(Data(chunk, self.offset))
        if len(chunk) >= MARK_BYTES:
            self._remember(chunk)
        self.offset += len(chunk)
        self.last = (self.last + chunk[-TAIL_BYTES:])[-TAIL_BYTES:]
        self._data_at = self._now

    def _ask(self, action: Action, doing: str) -> Action:
        self._doing = doing
        return action

    def _expect(self, doing: str) -> None:
        if self._doing != doing:
            raise RuntimeError(f"answer for {doing!r} while doing {self._doing!r}")


class FileIO(Protocol):
    """What `drive` needs of a source for the file it has open: its I/O, nothing more."""

    @property
    def closed(self) -> bool: ...

    async def read(self, pos: int, n: int) -> bytes: ...

    async def size(self) -> int: ...

    async def look(self, head: bool) -> PathFacts: ...

    async def locate(self) -> tuple[int, int]: ...

    async def find_rotated(self, ask: FindRotated) -> tuple[bool, list[tuple[int, int, int]]]:
        ...

    async def hold(self, ask: Hold) -> tuple[bool, int]: ...

    async def wait(self, idle: float, within: float | None = None) -> None: ...


async def drive(cursor: Cursor, io: FileIO, dev: int | None, ino: int | None, size: int,
                head: bytes, mtime: float | None = None) -> AsyncIterator[SourceEvent | Reopen]:
    """Run `cursor` on the file `io` has just opened (`dev`, `ino`, `size`, `head` of it)
    until the source closes or the file is left: then a last `Reopen` says why, and the
    source opens the path again and drives again.  I/O errors propagate (a source that
    reconnects calls `drive` again: the cursor remembers where it was)."""
    action = cursor.opened(dev, ino, size, head, mtime)
    while True:
        for ev in cursor.take_events():
            yield ev
        if io.closed:
            return
        if isinstance(action, Read):
            action = cursor.got(await io.read(action.pos, action.n))
        elif isinstance(action, Look):
            action = cursor.looked(await io.look(action.head))
        elif isinstance(action, Locate):
            action = cursor.located(*await io.locate())
        elif isinstance(action, FindRotated):
            action = cursor.found(*await io.find_rotated(action))
        elif isinstance(action, Hold):
            action = cursor.held(*await io.hold(action))
        elif isinstance(action, Reopen):
            yield action
            return
        else:
            if isinstance(action, Wait):
                await io.wait(action.idle, action.within)
            action = cursor.poll(await io.size(), time.monotonic())


class CursorIO:
    """The base of a source's I/O adapter for `drive`: which source it serves, and whether
    that source was closed (the conversation ends then)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    @property
    def closed(self) -> bool:
        return bool(self.source._closed)


class FollowsWithCursor:
    """What a source that follows a file with a `Cursor` tells about its reading."""

    cursor: Cursor

    @property
    def current_identity(self) -> FileIdentity | None:
        """The identity of the file being read (its head grows to HEAD_BYTES as it does)."""
        return self.cursor.identity

    @property
    def rotations(self) -> int:
        return self.cursor.rotations

    @property
    def truncations(self) -> int:
        return self.cursor.truncations
