"""A local log file, followed like `tail -F`, without losing or repeating a byte.

The follow algorithm (where to start, truncation, rotation, drain) is the `Cursor`'s
(sources/cursor.py), shared with the SSH source; this module is its I/O: `os.pread` on an
open descriptor, `os.stat` of the path, and wakeups.  What that algorithm does here:

* The file may not exist yet: wait for it.
* Rename rotation: the open descriptor still reads the old file, so it is drained to its end
  before the new file at the path is opened (from byte 0).
* Truncation (copytruncate, `> file`): the file is shorter than our offset, or the bytes just
  before our offset changed: restart at byte 0 of it.  What the writer appended between our
  last read and the truncation is lost; nothing else is.
* Delete and recreate: like a rotation once the new file appears.
* Wakeups come from inotify through watchdog; a poll every `poll_interval` is the safety net
  (and the only mechanism when watchdog is unavailable or `poll=True`, e.g. on NFS).
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import AsyncIterator, Callable

from .. import log
from .base import HEAD_BYTES, Position, SourceEvent, SourceState
from .cursor import Cursor, CursorIO, FollowsWithCursor, PathFacts, Reopen, drive

READ_SIZE = 1 << 20
CHECK_EVERY = 0.5      # seconds between "is the path still our file / was it rewritten" checks
StartFinder = Callable[[str], tuple[int, int]]


class _Watcher:
    """One watchdog observer for the process and one watch per directory; an event is
    dispatched by path to the sources following that file (a dict lookup, so a directory
    holding hundreds of logs costs one call per event, not one per source)."""

    _lock = threading.Lock()
    _observer = None  # type: ignore[var-annotated]
    _dirs: dict[str, tuple[object, dict[str, list[Callable[[], None]]]]] = {}

    @classmethod
    def subscribe(cls, path: Path, wake: Callable[[], None]) -> Callable[[], None] | None:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a dependency
            return None
        target, directory = str(path), str(path.parent)
        with cls._lock:
            entry = cls._dirs.get(directory)
            if entry is None:
                by_path: dict[str, list[Callable[[], None]]] = {}

                class Handler(FileSystemEventHandler):  # type: ignore[misc]
                    def on_any_event(self, event):  # type: ignore[no-untyped-def]
                        for p in (event.src_path, getattr(event, "dest_path", None)):
                            for cb in by_path.get(p, ()) if p else ():
                                cb()
                try:
                    if cls._observer is None:
                        obs = Observer()
                        obs.daemon = True
                        obs.start()
                        cls._observer = obs
                    watch = cls._observer.schedule(Handler(), directory, recursive=False)
                except (OSError, RuntimeError) as e:  # no inotify, too many watches, no dir yet
                    log.get("source.local").info("inotify unavailable, polling", path=target,
                                                 error=str(e))
                    return None
                entry = (watch, by_path)
                cls._dirs[directory] = entry
            entry[1].setdefault(target, []).append(wake)

        def unsubscribe() -> None:
            with cls._lock:
                e = cls._dirs.get(directory)
                if e is None:
                    return
                cbs = e[1].get(target, [])
                if wake in cbs:
                    cbs.remove(wake)
                if not cbs:
                    e[1].pop(target, None)
                if not e[1]:
                    del cls._dirs[directory]
                    try:
                        cls._observer.unschedule(e[0])  # type: ignore[union-attr]
                    except (KeyError, ValueError, RuntimeError):
                        pass
        return unsubscribe


class LocalFileSource(FollowsWithCursor):
    def __init__(self, path: str, *, start: Position | None = None,
                 find_start: StartFinder | None = None, poll_interval: float | None = None,
                 use_inotify: bool = True, name: str | None = None,
                 batch_interval: float = 0.0) -> None:
        # absolute, so inotify events (reported under the watched directory) match it
        self.path = Path(path).expanduser().absolute()
        self.name = name or str(self.path)
        self.start = start
        self.find_start = find_start
        self.use_inotify = use_inotify
        self.poll_interval = poll_interval
        # after reading, wait this long before the next read: lines written meanwhile are read
        # together (the daemon trades ~this much latency for throughput; `watch` uses 0)
        self.batch_interval = batch_interval
        self.log = log.get("source.local").bind(path=str(self.path))
        self.cursor = Cursor(str(self.path), saved=start, can_locate=find_start is not None,
                             read_size=READ_SIZE, check_every=CHECK_EVERY, logger=self.log)
        self._wake = asyncio.Event()
        self._closed = False
        self._unsubscribe: Callable[[], None] | None = None

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._unsubscribe:
            self._unsubscribe()
            self._unsubscribe = None

    def _subscribe(self) -> None:
        if self._unsubscribe is not None or not self.use_inotify or not self.path.parent.is_dir():
            return
        loop = asyncio.get_running_loop()

        def wake() -> None:
            loop.call_soon_threadsafe(self._wake.set)

        self._unsubscribe = _Watcher.subscribe(self.path, wake)

    async def _sleep(self) -> None:
        """Until a wakeup (inotify) or the poll interval, whichever comes first."""
        if self.batch_interval:
            await asyncio.sleep(self.batch_interval)
        interval = self.poll_interval or (1.0 if self._unsubscribe else 0.1)
        if not self._wake.is_set():
            timer = asyncio.get_running_loop().call_later(interval, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
        self._wake.clear()

    async def events(self) -> AsyncIterator[SourceEvent]:
        waiting_said = False
        while not self._closed:
            self._subscribe()
            try:
                f = open(self.path, "rb")
            except FileNotFoundError:
                if not waiting_said:
                    yield SourceState(False, f"waiting for {self.path} to appear")
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
                yield SourceState(True, f"reading {self.path}")
                # until the file is left (Reopen: open the path again) or the source closes
                async for ev in drive(self.cursor, _OpenFile(self, fd), st.st_dev, st.st_ino,
                                      st.st_size, os.pread(fd, HEAD_BYTES, 0)):
                    if not isinstance(ev, Reopen):
                        yield ev


class _OpenFile(CursorIO):
    """The cursor's I/O on one open local file: preads on its descriptor (which still reads
    it after a rename or unlink), a stat of the path, the source's wakeups."""

    def __init__(self, source: LocalFileSource, fd: int) -> None:
        super().__init__(source)
        self.fd = fd

    async def read(self, pos: int, n: int) -> bytes:
        return os.pread(self.fd, n, pos)

    async def size(self) -> int:
        return os.fstat(self.fd).st_size

    async def look(self, head: bool) -> PathFacts:
        # dev/inode always answer here: the head is never needed
        try:
            st = os.stat(self.source.path)
        except OSError:
            # still linked elsewhere: renamed away (rotation), not deleted
            return PathFacts(False, links=os.fstat(self.fd).st_nlink)
        return PathFacts(True, st.st_dev, st.st_ino, st.st_size)

    async def locate(self) -> tuple[int, int]:
        # a scan of the whole file (gigabytes, on a first attach): in a thread, so that the
        # daemon's endpoint and its other targets go on meanwhile
        finder = self.source.find_start
        if finder is None:
            return 0, 1
        return await asyncio.to_thread(finder, str(self.source.path))

    async def wait(self, idle: float) -> None:
        await self.source._sleep()
