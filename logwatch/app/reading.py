"""The read loop of a live target (app/target.py `Target`): its source's events, fed in.

One asyncio task per target does only this: it takes the source's events, splits a chunk
at the attach boundary (what the log held when we attached is decided first: catch-up),
feeds big chunks in slices (yielding to the loop between them), and counts what the loop
sees: bytes (each once across restarts), skipped bytes, reconnects.  A target's failure
here never stops the others: it is logged, the source is marked fatal, the daemon retries.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from typing import Any, Protocol

from .. import clock
from ..counters import Counters
from ..follow import Follower
from ..sources import Data, Opened, Skipped, SourceState
from .attachments.catchup import CatchUp, ResumedBytes
from .checkpoint import Checkpoints

SLICE = 64 * 1024           # bytes matched between two yields to the event loop ...
MIN_SLICE = 4 * 1024        # ... down to this when slices take longer than SLICE_TIME
# A slice is matched alone in its loop iteration (Turns) and a request needs about three:
# 20 ms keeps /healthz within ~0.1 s of CPU however many targets are behind (at 50 ms, and
# each chunk's first slice at 64 KiB, ~0.25 s: 0.8 s on a loaded 2-core VM)
SLICE_TIME = 0.02
# SMALL CHUNKS: one of at most MIN_SLICE bytes (a live log's new lines, a short file at a
# first attach) is matched at once, without a turn: a turn each had 1,500 targets attaching
# one line each match one target an iteration (the suite's 1,500-target test found 456 of
# them past their launch line when all were up); a few KiB cost a few ms, and a target behind
# its log reads bigger chunks, which take turns.


class Turns:
    """The event loop's matching, one target's slice at a time, in the order they asked.

    Each target's read loop yields between its slices, but asyncio runs every ready
    callback once per loop iteration: with N targets behind their logs, one iteration
    matched a slice of each (60 targets: 60 slices, 2.5 s of matching), and an HTTP
    request, which needs a few iterations, waited 5-14 s.  Taking a turn here first, a
    slice is matched alone in its iteration (the next one in line gets its turn in the
    iteration after), so the endpoint waits a few slices, whatever the number of targets.
    No one waiting: the turn is taken at once (a lone target pays nothing).
    """

    def __init__(self) -> None:
        self._held = False
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def take(self) -> None:
        """Wait for this task's turn (FIFO); `give` must follow, before the next await."""
        if not self._held and not self._waiting:
            self._held = True
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.give()          # the turn came with the cancel: the next one's
            else:
                self._waiting.remove(fut)
            raise

    def give(self) -> None:
        """The turn to the next in line, whose task runs in the next loop iteration; none
        waiting, the turn is free from the next iteration on (freed now, every other target
        behind would take it in this one, each in its own callback: no bound at all)."""
        if not self._pass_on():
            asyncio.get_running_loop().call_soon(self._free)

    def _pass_on(self) -> bool:
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_result(None)
                return True
        return False

    def _free(self) -> None:
        if not self._pass_on():
            self._held = False


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Turns] = \
    weakref.WeakKeyDictionary()


def turns() -> Turns:
    """The running loop's Turns (one per loop: the tests run many loops)."""
    loop = asyncio.get_running_loop()
    t = _TURNS.get(loop)
    if t is None:
        t = _TURNS[loop] = Turns()
    return t


class Target(Protocol):
    """What the read loop uses of its target (app/target.py `Target`)."""

    follower: Follower
    counters: Counters
    catchup: CatchUp
    resumed_bytes: ResumedBytes
    checkpoints: Checkpoints
    log: Any
    log_sources: bool
    ended: asyncio.Event
    failed_at: float | None
    attached: bool
    stop_reading: bool
    last_line_at: float | None

    def count_bytes(self) -> None: ...

    def end_catch_up(self) -> None: ...

    def check_resumed(self) -> None: ...

    def hold_resume_times(self) -> None: ...


async def run(t: Target) -> None:
    """Read the target's source until it ends, gives up or the owner stops reading."""
    src = t.follower.source
    try:
        async for ev in src.events():
            if await handle(t, ev):
                return
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - one target's failure never stops the others
        t.log.exception("target failed", error=repr(e))
        t.failed_at = clock.now()
        status = t.follower.status
        status.up, status.fatal, status.error = False, True, True
        status.message = f"failed: {e!r}"
    finally:
        await src.close()
        t.ended.set()


async def handle(t: Target, ev: object) -> bool:
    """One source event: the attach boundary, the bytes, the loop's counts.  True: the
    loop is over (the owner stopped reading, or the source gave up)."""
    f, counters = t.follower, t.counters
    if isinstance(ev, Opened):
        t.attached = True
        t.catchup.opened(ev)
        t.resumed_bytes.opened(ev)
        if ev.reason != "resume" and (ev.new_file or ev.offset < counters.bytes_until):
            t.count_bytes()
            counters.bytes_until = ev.offset  # another file: count from here
    if isinstance(ev, Data) and (cut := t.catchup.split(ev)) is not None:
        await feed_in_slices(t, cut[0])  # what came before the boundary is decided first
        t.count_bytes()
        t.end_catch_up()
        ev = cut[1]
    was_up = f.status.up
    if isinstance(ev, Data) and len(ev.data) > MIN_SLICE:
        await feed_in_slices(t, ev)
    else:
        f.handle(ev)         # a small chunk (a live log's last lines): no turn (SMALL CHUNKS)
    if isinstance(ev, Opened):
        t.end_catch_up()             # another file: what the catch-up read is all it gets
    if isinstance(ev, Data) and ev.data:
        t.last_line_at = clock.now()
        t.hold_resume_times()
        t.count_bytes()
        t.end_catch_up()
        t.check_resumed()
    if t.stop_reading:
        return True
    if isinstance(ev, Skipped):
        counters.bytes_skipped += ev.nbytes
        counters.source_losses += 1
        t.checkpoints.dirty = True
    if isinstance(ev, SourceState):
        if was_up and not ev.up:
            counters.reconnects += 1
        if t.log_sources:
            getattr(t.log, "warning" if not ev.up else "info")(
                "source", up=ev.up, message=ev.message)
        return ev.fatal
    return False


async def feed_in_slices(t: Target, ev: Data) -> None:
    """A big chunk in slices, yielding to the loop between them, each in its turn (Turns):
    one target's hostile log (lines that make patterns work to their timeout), or many
    targets behind their logs, never hold the daemon (its HTTP endpoint, the other
    targets) for more than about one slice's matching an iteration."""
    if len(ev.data) <= MIN_SLICE:         # (the part of a chunk before the attach boundary)
        t.follower.handle(ev)             # a small chunk: no turn (SMALL CHUNKS)
        return
    i, size = 0, _SIZES.get(t.follower, SLICE)   # where its last chunk's slices had come to
    while i < len(ev.data) and not t.stop_reading:
        gate = turns()
        await gate.take()
        t0 = time.monotonic()
        try:
            t.follower.handle(Data(ev.data[i:i + size], ev.offset + i))
        finally:
            gate.give()
        i += size
        # slow slices (hostile lines) get smaller, fast ones grow back
        size = max(MIN_SLICE, size // 2) if time.monotonic() - t0 > SLICE_TIME \
            else min(SLICE, size * 2)
        _SIZES[t.follower] = size
        await asyncio.sleep(0)


# each follower's slice size as its last chunk left it: a chunk's first slice at SLICE
# (64 KiB of milestones: ~80 ms) held the loop past SLICE_TIME at every read
_SIZES: weakref.WeakKeyDictionary[Follower, int] = weakref.WeakKeyDictionary()


def count_bytes(f: Follower, c: Counters) -> bool:
    """Every byte of the log once: bytes read again after a restart (the unfinished line
    after the saved position) are below `bytes_until` and not counted twice.  True when
    a count moved."""
    moved = False
    if f.next_offset is not None and f.next_offset > c.bytes_until:
        c.bytes += f.next_offset - c.bytes_until
        c.bytes_until = f.next_offset
        moved = True
    c.rotations = max(c.rotations, f.status.files - 1)
    return moved
