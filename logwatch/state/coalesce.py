"""A state file written off the event loop, at most once per `every` seconds.

A store that changes many times a second (the alert outbox: every decision, every attempt
of every page) says `changed()`; a writer task takes a snapshot on the loop (shallow copies:
well under a millisecond for thousands of entries), encodes and writes it in a thread
(atomic: tmp + fsync + rename + directory fsync, as `atomic_write_json`), and writes again
`every` seconds later if anything changed meanwhile.  The first change after a quiet spell
is written at once; those that come while a write is under way or within `every` of the
last one go together in the next, but for an `urgent` one (a page delivered: its removal
on disk at once, so that a kill -9 right after the page does not send it again), which
is written right after the write under way.  `saved(gen)` waits until the state as it was at
`changed()` -> gen is on disk (or its write failed: counted, said, the daemon goes on from
memory, as before).

Before (helper adv51): every decision and every attempt rewrote the whole file on the loop:
500 servers crashing with a dead receiver, 4-6 MB a write, /healthz 5.7 s late, line reading
stalled while on-call was being paged.

Encoding holds the GIL (the C encoder does not let go of it): the document's top-level lists
and objects are encoded `CHUNK` items at a time, so the loop gets the GIL between chunks.
Without a running writer (a CLI, a test without a loop) `changed()` writes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any, Callable

from .. import log
from .files import STATE_ERRORS, atomic_write_bytes

CHUNK = 64          # items of a top-level list or object encoded at once (a few ms at most)
RETRY_FAILED = 5.0  # seconds: a failed write is tried again this late without a change


def encode_chunked(doc: dict[str, Any], chunk: int = CHUNK) -> bytes:
    """`json.dumps(doc, separators=(",", ":"))`, byte for byte, its top-level lists and
    objects encoded `chunk` items at a time, the GIL given up after each: the loop thread
    waits a chunk at most, not a switch interval after each of its own system calls."""
    encode = json.JSONEncoder(separators=(",", ":")).encode

    def dumps(value: Any) -> str:
        text = encode(value)
        time.sleep(0)     # the GIL to the loop thread now, not at the next switch (5 ms)
        return text
    out = []
    for key, value in doc.items():
        if isinstance(value, dict):
            items = list(value.items())
            body = ",".join(dumps(dict(items[i:i + chunk]))[1:-1]
                            for i in range(0, len(items), chunk))
            text = "{" + body + "}"
        elif isinstance(value, list):
            text = "[" + ",".join(dumps(value[i:i + chunk])[1:-1]
                                  for i in range(0, len(value), chunk)) + "]"
        else:
            text = dumps(value)
        out.append(dumps(str(key)) + ":" + text)
    return ("{" + ",".join(out) + "}").encode("utf-8")


class CoalescedFile:
    """One state file, written by a task off the loop (the module says how)."""

    def __init__(self, kind: str, path: Path, snapshot: Callable[[], dict[str, Any]],
                 every: float = 0.2) -> None:
        self.kind, self.path, self.every = kind, path, every
        self.snapshot = snapshot       # on the loop: a copy the thread may encode
        self.gen = 0                   # changes asked for
        self.saved_gen = 0             # changes written (or whose write failed)
        self._wake: asyncio.Event | None = None
        self._done: asyncio.Event | None = None     # set after each write, then replaced
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._hurry = asyncio.Event()   # the next write without the wait (or the stop)
        # the last write failed (a full disk): written again, at the stop too.  Before,
        # nothing wrote it until the next change: a disk full at a crash, freed, then a
        # clean stop left no alert state (the open crash lost: its resolution never sent)
        self.failed = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Write from a task of the running loop from now on."""
        if self.running:
            return
        self._closing = False
        self._hurry = asyncio.Event()   # the next write without the wait (or the stop)
        self._wake, self._done = asyncio.Event(), asyncio.Event()
        if self.saved_gen < self.gen:
            self._wake.set()
        self._task = asyncio.create_task(self._writer(), name=f"save:{self.kind}")

    def changed(self, urgent: bool = False) -> int:
        """The state changed: written soon (at once without a writer task).  `urgent`:
        without waiting out `every` (right after a write under way).  Its number, for
        `saved`."""
        self.gen += 1
        if self.running and self._wake is not None:
            self._wake.set()
            if urgent:
                self._hurry.set()
        else:
            self._write_now()
        return self.gen

    def unsaved(self, gen: int) -> bool:
        """Is change `gen` not written yet?"""
        return gen > self.saved_gen

    async def saved(self, gen: int | None = None) -> None:
        """Until change `gen` (the latest: None) is written, or its write failed."""
        gen = self.gen if gen is None else gen
        while self.unsaved(gen) and self.running and self._done is not None:
            await self._done.wait()

    async def close(self) -> None:
        """The last changes written, the task ended (a write under way is let finish: a
        second writer beside it could rename an older snapshot over a newer one); later
        changes are written at once."""
        self._closing = True
        self._hurry.set()
        task = self._task
        if task is not None and self._wake is not None:
            self._wake.set()
            await asyncio.gather(task, return_exceptions=True)
        self._task = None
        if self.saved_gen < self.gen or self.failed:
            self._write_now()

    def _write_now(self) -> None:
        gen = self.gen
        self._finish(gen, self._attempt(self.snapshot()))

    def _attempt(self, doc: dict[str, Any]) -> Exception | None:
        try:
            atomic_write_bytes(self.path, encode_chunked(doc))
        except Exception as e:  # noqa: BLE001 - a failed save must not end the writer
            return e
        return None

    def _finish(self, gen: int, error: Exception | None) -> None:
        self.saved_gen = max(self.saved_gen, gen)
        self.failed = error is not None
        if error is None:
            STATE_ERRORS.succeeded(self.kind)
            return
        STATE_ERRORS.failed(self.kind, self.path, error)
        if not isinstance(error, OSError):   # a bug, not the disk: said each time
            log.get("state").error("saving state failed", file=str(self.path),
                                   error=repr(error))

    async def _writer(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):   # (a failed write: tried again)
                async with asyncio.timeout(RETRY_FAILED if self.failed else None):
                    await self._wake.wait()
            self._wake.clear()
            if self.saved_gen < self.gen or self.failed:
                self._hurry.clear()        # (the changes so far are in this write)
                gen, doc = self.gen, self.snapshot()
                self._finish(gen, await asyncio.to_thread(self._attempt, doc))
                done, self._done = self._done, asyncio.Event()
                if done is not None:
                    done.set()
            if self._closing:
                return
            with contextlib.suppress(TimeoutError):   # what changes meanwhile: one write
                async with asyncio.timeout(self.every):
                    await self._hurry.wait()
