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
from typing import Any, Protocol

from .. import clock
from ..counters import Counters
from ..follow import Follower
from ..sources import Data, Opened, Skipped, SourceState
from .attachments.catchup import CatchUp, ResumedBytes
from .checkpoint import Checkpoints

SLICE = 64 * 1024           # bytes matched between two yields to the event loop ...
MIN_SLICE = 4 * 1024        # ... down to this when slices take longer than SLICE_TIME
SLICE_TIME = 0.05


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
        f.handle(ev)
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
    """A big chunk in slices, yielding to the loop between them: one target's hostile
    log (lines that make patterns work to their timeout) never holds the daemon (its
    HTTP endpoint, the other targets) for more than about one slice's matching."""
    i, size = 0, SLICE
    while i < len(ev.data) and not t.stop_reading:
        t0 = time.monotonic()
        t.follower.handle(Data(ev.data[i:i + size], ev.offset + i))
        i += size
        # slow slices (hostile lines) get smaller, fast ones grow back
        size = max(MIN_SLICE, size // 2) if time.monotonic() - t0 > SLICE_TIME \
            else min(SLICE, size * 2)
        await asyncio.sleep(0)


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
