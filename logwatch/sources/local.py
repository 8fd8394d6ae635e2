"""A local log file, followed like `tail -F`, without losing or repeating a byte.

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
from typing import AsyncIterator, Callable, Iterator

from .. import log
from .base import (
    HEAD_BYTES, TAIL_BYTES, Data, FileIdentity, Opened, Position, SourceEvent, SourceState,
    digest, identity_of,
)

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


class LocalFileSource:
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
        self._wake = asyncio.Event()
        self._closed = False
        self._unsubscribe: Callable[[], None] | None = None
        self.rotations = 0
        self.truncations = 0
        self.current_identity: FileIdentity | None = None

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
        first = True
        reason_next = "attach"
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
                st = os.fstat(f.fileno())
                head = os.pread(f.fileno(), HEAD_BYTES, 0)
                ident = identity_of(st.st_dev, st.st_ino, head)
                offset, line_number, reason, new_file = 0, 1, reason_next, True
                if first:
                    first = False
                    offset, line_number, reason, new_file = self._initial(f, st, head)
                yield SourceState(True, f"reading {self.path}")
                yield Opened(offset, line_number, ident, reason, new_file)
                async for ev in self._follow(f, ident, offset):
                    if isinstance(ev, str):
                        reason_next = ev
                        break
                    yield ev

    def _initial(self, f, st, head: bytes) -> tuple[int, int, str, bool]:  # type: ignore[no-untyped-def]
        saved = self.start
        if saved is not None and saved.identity is not None and \
                saved.identity.matches(st.st_dev, st.st_ino, head) and \
                saved.offset <= st.st_size and self._tail_ok(f.fileno(), saved):
            return saved.offset, saved.line_number, "resume", False
        if saved is not None:
            self.log.info("saved position does not fit this file (replaced): starting at the "
                          "latest startup in it", saved_offset=saved.offset)
        if self.find_start is not None:
            off, line = self.find_start(str(self.path))
            return off, line, "attach", True
        return 0, 1, "attach", True

    @staticmethod
    def _tail_ok(fd: int, saved: Position) -> bool:
        if saved.tail_sha is None or saved.offset == 0:
            return True
        lo = max(0, saved.offset - TAIL_BYTES)
        return digest(os.pread(fd, saved.offset - lo, lo)) == saved.tail_sha

    async def _follow(self, f, ident: FileIdentity, offset: int) -> AsyncIterator[SourceEvent | str]:  # type: ignore[no-untyped-def]
        fd = f.fileno()
        self.current_identity = ident
        last = os.pread(fd, min(offset, TAIL_BYTES), max(0, offset - TAIL_BYTES)) if offset else b""
        checked = 0.0
        loop = asyncio.get_running_loop()
        while not self._closed:
            size = os.fstat(fd).st_size
            now = loop.time()
            check = now - checked >= CHECK_EVERY
            if check:
                checked = now
            rewritten = size < offset
            while not rewritten:
                # each read starts with the bytes before our offset: if they changed, the file
                # was truncated and written again (checked in the same syscall, for free)
                back = len(last)
                chunk = os.pread(fd, READ_SIZE + back, offset - back)
                if chunk[:back] != last:
                    rewritten = True
                    break
                chunk = chunk[back:]
                if not chunk:
                    break
                yield Data(chunk, offset)
                offset += len(chunk)
                last = (last + chunk)[-TAIL_BYTES:]
                if len(chunk) < READ_SIZE:
                    break
            if rewritten:
                self.truncations += 1
                self.log.warning("log truncated: reading it again from the start",
                                 offset=offset, size=size)
                offset, last = 0, b""
                head = os.pread(fd, HEAD_BYTES, 0)
                st = os.fstat(fd)
                ident = identity_of(st.st_dev, st.st_ino, head)
                self.current_identity = ident
                yield Opened(0, 1, ident, "truncated", True)
                continue
            if ident.head_len < HEAD_BYTES and offset > ident.head_len:
                # opened while shorter than an identity head: complete the identity now
                ident = identity_of(ident.dev, ident.ino, os.pread(fd, HEAD_BYTES, 0))
                self.current_identity = ident
            if not check:
                await self._sleep()
                continue
            # has the path moved on to another file?
            try:
                pst = os.stat(self.path)
            except OSError:
                pst = None
            if pst is not None and (pst.st_dev, pst.st_ino) != (ident.dev, ident.ino):
                for ev in _drain(fd, offset):  # what the old file still holds, then switch
                    yield ev
                self.rotations += 1
                self.log.info("log rotated: following the new file")
                yield "rotated"
                return
            if pst is None and not getattr(self, "_gone_said", False):
                self._gone_said = True
                # still linked elsewhere: renamed away (rotation), not deleted
                self._gone_reason = "rotated" if os.fstat(fd).st_nlink > 0 else "recreated"
                what = "was rotated away" if self._gone_reason == "rotated" else "was deleted"
                yield SourceState(True, f"{self.path} {what}; draining it, waiting for a new one")
            if pst is not None:
                self._gone_said = False
            await self._sleep()
            if pst is None:
                # deleted: a new file at the path ends this one
                try:
                    os.stat(self.path)
                except FileNotFoundError:
                    continue
                for ev in _drain(fd, offset):
                    yield ev
                self._gone_said = False
                self.rotations += 1
                yield getattr(self, "_gone_reason", "recreated")
                return


def _drain(fd: int, offset: int) -> Iterator[Data]:
    """Everything a file still holds from `offset` to its end (before leaving it)."""
    while True:
        chunk = os.pread(fd, READ_SIZE, offset)
        if not chunk:
            return
        yield Data(chunk, offset)
        offset += len(chunk)
