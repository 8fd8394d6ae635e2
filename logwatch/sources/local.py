"""A local log file, followed like `tail -F`, without losing or repeating a byte.

The follow algorithm (where to start, truncation, rotation, drain) is the `Cursor`'s
(sources/cursor.py), shared with the SSH source; this module is its I/O: `os.pread` on an
open descriptor, `os.stat` of the path, and wakeups.  What that algorithm does here:

* The file may not exist yet: wait for it.
* Rename rotation: the open descriptor still reads the old file, so it is drained to its end,
  and read on until it has been quiet for `rotate_wait` (the server writes to it until it
  reopens its log), before the new file at the path is opened (from byte 0).
* Rotated while the daemon was down: the saved file is found again by dev:inode among the
  rotated names beside the path (`x.log.1`, `x.log-DATE`), its rest read, then the new file.
* Truncation (copytruncate, `> file`): the file is shorter than our offset, or the bytes just
  before our offset changed: restart at byte 0 of it.  What the writer appended between our
  last read and the truncation is lost; nothing else is.
* Delete and recreate: like a rotation once the new file appears.
* A pattern in the file name (`/logs/server-*.log`): the newest matching file, left for a
  newer one as for a rotation (sources/newest.py).
* Wakeups come from inotify through watchdog; a poll every `poll_interval` is the safety net
  (and the only mechanism when watchdog is unavailable or `poll=True`, e.g. on NFS).  A
  directory removed and created again is watched again (an inotify watch dies with its
  directory).
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import os
import stat
import threading
import time
from pathlib import Path
from typing import IO, Any, AsyncIterator, BinaryIO, Callable

from .. import log
from .base import (
    HEAD_BYTES, MAGIC_BYTES, Position, SourceEvent, SourceState, compressed_refusal,
    compression_of,
)
from .cursor import (
    ROTATE_WAIT, Cursor, CursorIO, FindRotated, FollowsWithCursor, Hold, PathFacts, Reopen,
    before_range, drive, is_ours, later_files, rotated_names,
)
from .newest import (Listing, Match, NewestFile, check_pattern, is_pattern, matching,
                     newest_first)
from .archive import MAX_ARCHIVES, compressed_rotated_names, pread, unpack

READ_SIZE = 1 << 20
CHECK_EVERY = 0.5      # seconds between "is the path still our file / was it rewritten" checks
StartFinder = Callable[[str], tuple[int, int]]
Wake = Callable[[bool], None]


class _Watcher:
    """One watchdog observer for the process and one watch per directory; an event is
    dispatched by path to the sources following that file (a dict lookup, so a directory
    holding hundreds of logs costs one call per event, not one per source)."""

    _lock = threading.Lock()
    _observer = None  # type: ignore[var-annotated]
    # directory -> (its watch, the (dev, ino) of the directory watched, callbacks by path)
    _dirs: dict[str, tuple[object, tuple[int, int], dict[str, list[Wake]]]] = {}
    # directory -> the subscribed paths that are patterns (an event's path is matched
    # against these; the others are found by a dict lookup)
    patterns: dict[str, frozenset[str]] = {}

    @staticmethod
    def dir_id(directory: str) -> tuple[int, int] | None:
        try:
            st = os.stat(directory)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    @classmethod
    def watching(cls, path: Path) -> tuple[int, int] | None:
        """The (dev, ino) of the directory the watch for `path` was put on (None: none)."""
        with cls._lock:
            entry = cls._dirs.get(str(path.parent))
            return entry[1] if entry is not None else None

    @classmethod
    def subscribe(cls, path: Path, wake: Wake) -> Callable[[], None] | None:
        """`wake(moved)` on every event of `path` (moved: created, moved or deleted, not
        merely written: the path may name another file now)."""
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a dependency
            return None
        target, directory = str(path), str(path.parent)
        now_id = cls.dir_id(directory)
        if now_id is None:
            return None
        with cls._lock:
            entry = cls._dirs.get(directory)
            if entry is not None and entry[1] != now_id:
                # the directory was removed and made again: its watch died with it
                try:
                    cls._observer.unschedule(entry[0])  # type: ignore[union-attr]
                except (KeyError, ValueError, RuntimeError, OSError):
                    pass
                del cls._dirs[directory]
                old_paths = entry[2]
                entry = None
            else:
                old_paths = {}
            if entry is None:
                by_path: dict[str, list[Wake]] = old_paths
                try:
                    if cls._observer is None:
                        obs = Observer()
                        obs.daemon = True
                        obs.start()
                        cls._observer = obs
                    watch = cls._observer.schedule(_handler(FileSystemEventHandler, directory,
                                                            by_path), directory, recursive=False)
                except (OSError, RuntimeError) as e:  # no inotify, too many watches, no dir yet
                    log.get("source.local").info("inotify unavailable, polling", path=target,
                                                 error=str(e))
                    return None
                entry = (watch, now_id, by_path)
                cls._dirs[directory] = entry
            cbs = entry[2].setdefault(target, [])
            if wake not in cbs:
                cbs.append(wake)
            cls._note_patterns(directory)
        return functools.partial(cls._unsubscribe, directory, target, wake)

    @classmethod
    def _note_patterns(cls, directory: str) -> None:
        """(Under the lock.)  The directory's pattern keys, again after a change."""
        e = cls._dirs.get(directory)
        keys = frozenset(k for k in e[2] if is_pattern(k)) if e is not None else frozenset()
        if keys:
            cls.patterns[directory] = keys
        else:
            cls.patterns.pop(directory, None)

    @classmethod
    def _unsubscribe(cls, directory: str, target: str, wake: Wake) -> None:
        """`wake` no longer called for `target`; the directory's watch ends with its last."""
        with cls._lock:
            e = cls._dirs.get(directory)
            if e is None:
                return
            cbs = e[2].get(target, [])
            if wake in cbs:
                cbs.remove(wake)
            if not cbs:
                e[2].pop(target, None)
            cls._note_patterns(directory)
            if not e[2]:
                del cls._dirs[directory]
                try:
                    cls._observer.unschedule(e[0])  # type: ignore[union-attr]
                except (KeyError, ValueError, RuntimeError):
                    pass


def coalesced_wake(loop: asyncio.AbstractEventLoop, moved: Callable[[], None],
                   written: Callable[[], None]) -> Wake:
    """A source's wake for watchdog's thread: `moved` (look at the path in the next cycle:
    a rename every few ms is seen) or `written` on the loop, one of each kind on its way
    at a time.  Each call_soon_threadsafe is a byte in the loop's self-pipe, which is also
    the signal wakeup fd; before, one per inotify event (an append: open, write, close): 60
    logs appended every 10 ms filled it, the SIGTERM's byte was refused and the signal lost
    (the daemon ran on at 100% CPU).  Cleared on the loop before the wake acts: an event
    after that is sent again, one before it is read by the wake."""
    pending = [False, False]

    def on_loop(was_moved: bool) -> None:
        pending[was_moved] = False
        (moved if was_moved else written)()

    def wake(was_moved: bool) -> None:
        if not pending[was_moved]:
            pending[was_moved] = True
            loop.call_soon_threadsafe(on_loop, was_moved)
    return wake


def _handler(base: type, directory: str, by_path: dict[str, list[Wake]]) -> Any:
    """The watchdog handler of one directory: each event wakes the sources of its path(s)
    (`moved`: created, moved or deleted, not merely written)."""

    class Handler(base):  # type: ignore[misc, valid-type]
        def on_any_event(self, event):  # type: ignore[no-untyped-def]
            if event.src_path == directory:
                # the directory itself went (its watch dies with it): every
                # source in it wakes, to poll until it is back and watch it again
                for cbs in list(by_path.values()):
                    for cb in list(cbs):
                        cb(True)
                return
            moved = event.event_type not in ("modified", "opened", "closed",
                                             "closed_no_write")
            for p in (event.src_path, getattr(event, "dest_path", None)):
                for cb in by_path.get(p, ()) if p else ():
                    cb(moved)
                # the targets naming the newest file matching a pattern (newest.py)
                for pattern in _Watcher.patterns.get(directory, ()) if p else ():
                    if fnmatch.fnmatchcase(p, pattern):
                        for cb in by_path.get(pattern, ()):
                            cb(moved)
    return Handler()


class LocalFileSource(FollowsWithCursor):
    def __init__(self, path: str, *, start: Position | None = None,
                 find_start: StartFinder | None = None, poll_interval: float | None = None,
                 use_inotify: bool = True, name: str | None = None,
                 batch_interval: float = 0.0, rotate_wait: float = ROTATE_WAIT) -> None:
        # absolute, so inotify events (reported under the watched directory) match it
        self.path = Path(path).expanduser().absolute()
        self.name = name or str(self.path)
        # a pattern in the file name: the newest match is read (newest.py)
        self.newest: NewestFile | None = None
        if is_pattern(str(self.path)):
            check_pattern(str(self.path))
            self.newest = NewestFile()
        self.current: Path | None = None    # the file read (opened by its name) now
        self.start = start
        self.find_start = find_start
        self.use_inotify = use_inotify
        self.poll_interval = poll_interval
        # after reading, wait this long before the next read: lines written meanwhile are read
        # together (the daemon trades ~this much latency for throughput; `watch` uses 0)
        self.batch_interval = batch_interval
        self.log = log.get("source.local").bind(path=str(self.path))
        self.cursor = Cursor(str(self.path), saved=start, can_locate=find_start is not None,
                             can_find=True, can_hold=True, read_size=READ_SIZE,
                             check_every=CHECK_EVERY,
                             rotate_wait=rotate_wait, logger=self.log)
        self._wake = asyncio.Event()
        self._closed = False
        self._unsubscribe: Callable[[], None] | None = None
        self._no_inotify = False         # inotify refused (no support, no watches left)
        # descriptors of the files after ours (Cursor Hold), in the order they are read
        self._held: list[int] = []
        self._held_path: dict[int, Path] = {}   # the name each held file had (statuses)

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        for fd in self._held:
            os.close(fd)
        self._held.clear()
        self._held_path.clear()
        if self._unsubscribe:
            self._unsubscribe()
            self._unsubscribe = None

    def _subscribe(self) -> None:
        """Watch the directory (inotify), again if it was removed and made again since."""
        if not self.use_inotify or self._no_inotify:
            return
        here = _Watcher.dir_id(str(self.path.parent))
        if self._unsubscribe is not None:
            if here is not None and here == _Watcher.watching(self.path):
                return
            self._unsubscribe()          # the directory is gone, or another one now
            self._unsubscribe = None
            # what is at the path now is looked at in the next cycle, at once
            self.cursor.check_now()
            self._wake.set()
            if here is not None:
                self.log.info("the log's directory was made again: watching it again")
        if here is None:
            return                       # polled (fast) until the directory exists
        wake = coalesced_wake(asyncio.get_running_loop(), self._moved, self._wake.set)
        self._unsubscribe = _Watcher.subscribe(self.path, wake)
        # refused while the directory is there: no inotify here (polled from now on)
        self._no_inotify = self._unsubscribe is None and \
            _Watcher.dir_id(str(self.path.parent)) is not None

    def _moved(self) -> None:
        self.cursor.check_now()
        self._wake.set()

    async def _sleep(self, within: float | None = None) -> None:
        """Until a wakeup (inotify) or the poll interval (or `within`), whichever comes first."""
        self._subscribe()
        if self.batch_interval:
            await asyncio.sleep(self.batch_interval)
        if self._unsubscribe is not None:
            interval = self.poll_interval or 1.0
        elif self.use_inotify and not self._no_inotify:
            interval = 0.1               # the directory is missing: soon watched (again)
        else:
            interval = self.poll_interval or 0.1
        if within is not None:
            interval = min(interval, within)
        if not self._wake.is_set():
            timer = asyncio.get_running_loop().call_later(interval, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
        self._wake.clear()

    async def matches(self) -> Listing:
        """The files matching the target's pattern now (regular files, symlinks followed):
        the listing kept (NewestFile.cached), or a new one, made in a thread (a directory of
        100,000 SLURM outputs takes ~0.6 s of stats: not on the event loop)."""
        assert self.newest is not None
        try:     # before the listing: a file created after it changes the directory's mtime
            dir_mtime = os.stat(self.path.parent).st_mtime_ns
        except OSError:
            return Listing([])
        cached = self.newest.cached(dir_mtime, time.monotonic())
        if cached is not None:
            return cached
        t0 = time.monotonic()
        out = await asyncio.to_thread(self._listing)
        self.newest.keep(dir_mtime, t0, out, time.monotonic() - t0)
        return out

    def _listing(self) -> Listing:
        try:
            with os.scandir(self.path.parent) as it:
                names = [e.name for e in it]
        except OSError:
            return Listing([])
        rows = []
        for name in matching(self.path.name, names):
            try:
                st = os.stat(self.path.parent / name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                rows.append((st.st_mtime_ns, name, st.st_dev, st.st_ino))
        return Listing(newest_first(rows))

    async def named(self) -> Path | None:
        """The file the target names now: its path, or the newest match of its pattern."""
        if self.newest is None:
            return self.path
        m = self.newest.choose(await self.matches())
        return None if m is None else self.path.parent / m.name

    async def _open_next(self) -> BinaryIO:
        """After a Reopen the first file held (Cursor Hold), else the file the target names."""
        if self._held:
            fd = self._held.pop(0)
            self.current = self._held_path.pop(fd, None)
            return os.fdopen(fd, "rb")
        path = await self.named()
        if path is None:
            raise FileNotFoundError(str(self.path))
        f = open(path, "rb")
        self.current = path
        return f

    async def events(self) -> AsyncIterator[SourceEvent]:
        waiting_said = False
        while not self._closed:
            self._subscribe()
            try:
                f = await self._open_next()
            except FileNotFoundError:
                if not waiting_said:
                    what = f"a file matching {self.path}" if self.newest else str(self.path)
                    yield SourceState(False, f"waiting for {what} to appear")
                    waiting_said = True
                await self._sleep()
                continue
            except PermissionError as e:
                yield SourceState(False, f"cannot read {self.path}: {e.strerror}", fatal=True)
                return
            except IsADirectoryError:
                yield SourceState(False, f"{self.path} is a directory, not a log file", fatal=True)
                return
            waiting_said = False
            with f:
                fd = f.fileno()
                st = os.fstat(fd)
                kind = compression_of(os.pread(fd, MAGIC_BYTES, 0))
                if kind is not None:
                    yield SourceState(False, compressed_refusal(self.current or self.path, kind),
                                      fatal=True)
                    return
                yield SourceState(True, f"reading {self.current or self.path}")
                io = _OpenFile(self, fd)
                if self.newest is not None:
                    self.newest.read(_match_of(self.current, st))
                try:
                    # until the file is left (Reopen: open the path again) or the source closes
                    async for ev in drive(self.cursor, io, st.st_dev, st.st_ino, st.st_size,
                                          os.pread(fd, HEAD_BYTES, 0), st.st_mtime):
                        if not isinstance(ev, Reopen):
                            yield ev
                        elif self.newest is not None and self.newest.reading is not None \
                                and ev.reason != "truncated":
                            # drained and left: a pattern never names it again (a truncated
                            # file is not left: its copy was read, then it is read again)
                            self.newest.left(self.newest.reading)
                finally:
                    io.close()


def _beside(path: Path | None) -> list[tuple[Path, str]]:
    """(directory, name) where rotated copies of the log at `path` are: beside it, and beside
    the file it links to when it is a symlink."""
    if path is None:
        return []
    out = [(path.parent, path.name)]
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return out
    if (real.parent, real.name) != out[0]:
        out.append((real.parent, real.name))
    return out


def _open_if(path: Path, ask: Hold) -> tuple[int, int] | None:
    """`path` opened (its descriptor and size) if it is `ask`'s file (dev:inode), else None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) == (ask.dev, ask.ino):
        return fd, st.st_size
    os.close(fd)
    return None


def _find_unpacked(beside: list[tuple[Path, str]], ask: FindRotated) -> IO[bytes] | None:
    """Ours among the newest compressed copies of the log (`beside`: where its rotated
    copies are, `_beside`), unpacked (archive.py)."""
    try:
        paths = [d / n for d, base in beside
                 for n in compressed_rotated_names(base, os.listdir(d))]
        by_age = sorted(paths, key=lambda p: os.stat(p).st_mtime, reverse=True)
    except OSError:
        return None
    lo, n = before_range(ask)
    for archive_path in by_age[:MAX_ARCHIVES]:
        try:
            with open(archive_path, "rb") as f:
                out = unpack(f, lambda head: ask.identity.matches(None, None, head))
        except OSError:
            continue
        if out is None:
            continue
        size = os.fstat(out.fileno()).st_size
        if is_ours(ask, None, None, size, pread(out, 0, HEAD_BYTES), pread(out, lo, n)):
            return out
        out.close()
    return None


def _match_of(path: Path | None, st: os.stat_result) -> Match:
    """The Match of a file opened (`path` None: held, its name unknown: dev:inode tell it)."""
    return Match(path.name if path is not None else "", st.st_dev, st.st_ino, st.st_mtime_ns)


class _OpenFile(CursorIO):
    """The cursor's I/O on one open local file: preads on its descriptor (which still reads
    it after a rename or unlink), a stat of the path, the source's wakeups."""

    def __init__(self, source: LocalFileSource, fd: int) -> None:
        super().__init__(source)
        self.fd = fd
        self.found: int | None = None    # a rotated file found again: read instead of fd
        self.unpacked: IO[bytes] | None = None   # ... found compressed: its bytes (archive.py)

    def close(self) -> None:
        if self.unpacked is not None:
            self.unpacked.close()        # (its descriptor is `found`)
            self.unpacked = self.found = None
        if self.found is not None:
            os.close(self.found)
            self.found = None

    async def find_rotated(self, ask: FindRotated) -> tuple[bool, list[tuple[int, int, int]]]:
        """Our file among the rotated names beside the path, by dev:inode, head and tail; the
        rotated files written after it are held (Cursor Hold)."""
        path, newest = self.source.path, self.source.newest
        opened_now = newest.reading if newest is not None else None
        # the log's name, and the file it links to (the kubelet's /var/log/containers/X.log
        # -> /var/log/pods/.../0.log: rotated to 0.log.DATE beside its target, not the link)
        named = path if newest is None else \
            (path.parent / opened_now.name if opened_now is not None and opened_now.name
             else None)
        beside = _beside(named)
        cands: list[Path] = []
        try:
            # the newest matches but the one opened (read after ours); a copy is beside it
            if newest is not None and not ask.copy:
                cands = [path.parent / m.name for m in newest.newest_first(
                    await self.source.matches()) if opened_now is None or m.key != opened_now.key]
            for directory, base in beside:
                cands += [directory / n for n in rotated_names(base, os.listdir(directory))]
        except OSError:
            return False, []
        lo, n = before_range(ask)
        opened: dict[Path, tuple[int, os.stat_result]] = {}
        ours: Path | None = None
        for cand in dict.fromkeys(cands):
            try:
                fd = os.open(cand, os.O_RDONLY)
            except OSError:
                continue
            st = os.fstat(fd)
            opened[cand] = (fd, st)
            if ours is None and is_ours(ask, st.st_dev, st.st_ino, st.st_size,
                                        os.pread(fd, HEAD_BYTES, 0), os.pread(fd, n, lo)):
                ours = cand
        held: list[tuple[int, int, int]] = []
        if ours is not None:
            self.close()
            self.found = self.fd = opened.pop(ours)[0]
        if ours is not None and not ask.copy:
            if newest is not None:
                newest.read(_match_of(ours, os.fstat(self.fd)))
            later = later_files(os.fstat(self.fd).st_mtime,
                                [(str(k), v[1].st_dev, v[1].st_mtime) for k, v in opened.items()])
            for name in later:
                fd, st = opened.pop(Path(name))
                self.source._held.append(fd)
                self.source._held_path[fd] = Path(name)
                held.append((st.st_dev, st.st_ino, st.st_size))
        for fd, _ in opened.values():
            os.close(fd)
        if ours is None and beside:       # compressed at its rotation (archive.py)
            unpacked = await asyncio.to_thread(_find_unpacked, beside, ask)
            if unpacked is not None:
                self.close()
                self.unpacked = unpacked
                self.found = self.fd = unpacked.fileno()
                return True, []
        return ours is not None, held

    async def hold(self, ask: Hold) -> tuple[bool, int]:
        """Open the file the path names and keep it, if it is still `ask`'s; renamed away
        since the look (a rotation in between), among the rotated names beside the path
        (before, the hold failed and that file was never read)."""
        named = await self.source.named()
        got = _open_if(named, ask) if named is not None else None
        if got is None:
            try:
                cands = [d / n for d, base in _beside(named or self.source.path)
                         for n in rotated_names(base, os.listdir(d))]
            except OSError:
                cands = []
            for cand in cands:
                if (got := _open_if(cand, ask)) is not None:
                    named = cand
                    break
        if got is None or named is None:
            return False, 0
        fd, size = got
        self.source._held.append(fd)
        self.source._held_path[fd] = named
        return True, size

    async def read(self, pos: int, n: int) -> bytes:
        return os.pread(self.fd, n, pos)

    async def size(self) -> int:
        return os.fstat(self.fd).st_size

    async def look(self, head: bool) -> PathFacts:
        # dev/inode always answer here: the head is never needed
        try:
            named = await self.source.named()
            if named is None:
                raise FileNotFoundError(str(self.source.path))
            st = os.stat(named)
        except OSError:
            # still linked elsewhere: renamed away (rotation), not deleted
            return PathFacts(False, links=os.fstat(self.fd).st_nlink)
        if self.source.newest is not None:
            self.source.newest.wrote(_match_of(named, st))
        return PathFacts(True, st.st_dev, st.st_ino, st.st_size)

    async def locate(self) -> tuple[int, int]:
        # a scan of the whole file (gigabytes, on a first attach): in a thread, so that the
        # daemon's endpoint and its other targets go on meanwhile
        finder = self.source.find_start
        if finder is None:
            return 0, 1
        return await asyncio.to_thread(finder, str(self.source.current or self.source.path))

    async def wait(self, idle: float, within: float | None = None) -> None:
        await self.source._sleep(within)
