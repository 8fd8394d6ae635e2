"""`logwatch watch TARGET`: follow one log until the server is ready or dead.

The replacement for `ssh host "sleep 30 && tail -30 server.log"` run by hand for ten
minutes.  Exit status: 0 ready, 1 crashed or stopped, 3 timed out or stalled, 2 usage or
configuration error (bad target, refused host key, unreadable file).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from . import log
from .display import make_display
from .follow import Follower
from .machine import CrashUpdated, Crashed, Stalled
from .pipeline import LogPipeline
from .rulepack import CRASHED, READY, STOPPED, RulePack, load_all_shipped, load_pack
from .sources import SourceError, SourceState, make_source
from .sources.ssh import SSHOptions
from .sources.start import restart_pack
from .summary import summary

EXIT_READY, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
CRASH_SETTLE = 1.5   # seconds to keep reading after a crash: its traceback is still arriving
TICK = 0.25


@dataclass
class WatchOptions:
    target: str
    rules: str = "auto"
    timeout: float | None = None
    stall_after: float | None = None
    json: bool = False
    ssh: SSHOptions = field(default_factory=SSHOptions)
    poll: bool = False
    from_start: bool = False


async def run_watch(opts: WatchOptions, out: TextIO = sys.stdout) -> int:
    if opts.rules == "auto":
        candidates = load_all_shipped()
        candidates = [p for p in candidates if p.detect]
        pack: RulePack | None = None
        start_pack = restart_pack(candidates)
    else:
        pack = load_pack(opts.rules)
        candidates = [pack]
        start_pack = pack
    try:
        source = make_source(opts.target, pack=None if opts.from_start else start_pack,
                             ssh=opts.ssh, poll=opts.poll)
    except SourceError as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return EXIT_USAGE

    def new_pipeline(p: RulePack) -> LogPipeline:
        return LogPipeline(p, stall_after=opts.stall_after)

    follower = Follower(opts.target, source, new_pipeline, pack, candidates)
    display = make_display(opts.target, sys.stderr if opts.json else out)
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=64)
    END = object()

    async def pump() -> None:
        try:
            async for ev in source.events():
                await queue.put(ev)
        except Exception as e:  # noqa: BLE001 - reported as a fatal source state
            log.get("watch").error("source failed", error=repr(e))
            await queue.put(SourceState(False, f"source failed: {e!r}", fatal=True))
        finally:
            await queue.put(END)

    started = time.monotonic()
    task = asyncio.create_task(pump())
    display.start()
    outcome, code = "", EXIT_USAGE
    settle_until: float | None = None
    try:
        while True:
            try:
                ev = await asyncio.wait_for(queue.get(), timeout=TICK)
            except asyncio.TimeoutError:
                ev = None
            now = time.time()
            if ev is END:
                follower.finish(now)
                code, outcome = _verdict(follower, "the log ended")
                break
            events = follower.handle(ev, now) if ev is not None else []
            events += follower.tick(now)
            display.update(follower, events, now)
            if isinstance(ev, SourceState) and ev.fatal:
                follower.finish(now)
                st = follower.pipe.state if follower.pipe else None
                if st is not None and st.phase in (READY, CRASHED, STOPPED):
                    code, outcome = _verdict(follower, ev.message)
                else:
                    print(f"logwatch: {opts.target}: {ev.message}", file=sys.stderr)
                    code, outcome = EXIT_USAGE, ev.message
                break
            if any(isinstance(e, (Crashed, CrashUpdated)) for e in events):
                settle_until = time.monotonic() + CRASH_SETTLE
            phase = follower.pipe.state.phase if follower.pipe else "waiting"
            if phase == READY:
                code, outcome = EXIT_READY, "ready"
                break
            if phase == STOPPED:
                code, outcome = EXIT_FAILED, "stopped (clean shutdown)"
                break
            if phase == CRASHED and settle_until is not None and time.monotonic() >= settle_until:
                # nothing more is coming: an unfinished last line (the exception message
                # without its newline) is all there is of it, so read it as a line
                follower.finish(time.time())
                code, outcome = EXIT_FAILED, "crashed"
                break
            if any(isinstance(e, Stalled) for e in events):
                code, outcome = EXIT_TIMEOUT, f"stalled in {phase}"
                break
            if opts.timeout is not None and time.monotonic() - started >= opts.timeout:
                code, outcome = EXIT_TIMEOUT, f"timed out after {opts.timeout:g}s in {phase}"
                break
    finally:
        task.cancel()
        await source.close()
        try:
            await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001
            pass
        from .sources.ssh import default_pool
        await default_pool().close()
    display.finish(follower, outcome)
    if opts.json:
        if follower.pipe is None:
            follower.decide_pack(time.time())
        assert follower.pipe is not None
        doc: dict[str, Any] = summary(opts.target, follower.pipe)
        print(json.dumps(doc, ensure_ascii=False), file=out, flush=True)
    return code


def _verdict(follower: Follower, why: str) -> tuple[int, str]:
    phase = follower.pipe.state.phase if follower.pipe else "waiting"
    if phase == READY:
        return EXIT_READY, "ready"
    if phase in (CRASHED, STOPPED):
        return EXIT_FAILED, phase
    return EXIT_TIMEOUT, f"{why} in {phase}"
