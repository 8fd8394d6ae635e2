"""`logwatch watch TARGET`: follow one log until the server is ready or dead.

The replacement for `ssh host "sleep 30 && tail -30 server.log"` run by hand for ten
minutes.  Exit status: 0 ready, 1 crashed or stopped, 3 timed out or stalled, 2 usage or
configuration error (bad target, refused host key, unreadable file), 130 interrupted (Ctrl-C:
the summary is printed first).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ..machine import Event, Stalled
from ..rules.locate import restart_pack
from ..rules.pack import CRASHED, READY, STOPPED, load_all_shipped, load_pack
from ..sinks.display import attach_note, make_display
from ..sinks.summary import summary
from ..sources import SourceError
from ..sources.gpu import GpuConfig, GpuStreams
from ..state.ledger import LedgerStore
from ..sources.ssh import SSHOptions, default_pool
from ..state.history import watch_state_dir
from ..view import TargetView
from .config import TargetConfig
from .target import TargetRunner

EXIT_READY, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
EXIT_INTERRUPTED = 130      # Ctrl-C (SIGINT), after the summary, as shells report it
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
    last: bool = False           # report the latest startup in the log as it stands, and exit
    wait_for_file: bool = False  # a missing directory is waited for, not an error
    history: bool = True         # keep / use this TARGET's startup history (watch_state_dir)
    gpu: GpuConfig = field(default_factory=GpuConfig)   # nvidia-smi where the log is


def watch_runner(opts: WatchOptions, on_events: Callable[[TargetRunner, list[Event]], None]
                 | None = None) -> TargetRunner:
    """The target `watch` follows: the daemon's TargetRunner without positions, with the
    TARGET's startup history (keyed by the TARGET string) unless --no-history."""
    if opts.rules == "auto":
        candidates = [p for p in load_all_shipped() if p.detect]
        start_pack = restart_pack(candidates)
    else:
        pack = load_pack(opts.rules)
        candidates, start_pack = [pack], pack
    cfg = TargetConfig(name=opts.target, source=opts.target, rules=opts.rules,
                       stall_after=opts.stall_after, ssh=opts.ssh, poll=opts.poll,
                       from_start=opts.from_start, gpu=opts.gpu)
    runner = TargetRunner(cfg, store=None, state_dir=watch_state_dir() if opts.history else None,
                          candidates=candidates, start_pack=start_pack, pool=default_pool(),
                          on_events=on_events, batch_interval=0.0, log_sources=False,
                          gpu_streams=GpuStreams(default_pool()),
                          ledger=LedgerStore(watch_state_dir()) if opts.history else None)
    runner.report_history = opts.last
    return runner


async def run_watch(opts: WatchOptions, out: TextIO = sys.stdout) -> int:
    """Follow one target on the daemon's live loop (`TargetRunner`, memory only) with a
    terminal sink, until a verdict."""
    pending: list[Event] = []
    wake = asyncio.Event()

    def on_events(runner: TargetRunner, events: list[Event]) -> None:
        pending.extend(events)
        wake.set()
        if _final(runner) and not _historic(runner):
            runner.stop_reading = True   # the verdict is in: read no further than it

    try:
        runner = watch_runner(opts, on_events)
    except SourceError as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return EXIT_USAGE
    display = make_display(opts.target, sys.stderr if opts.json else out)
    interrupted: list[bool] = []

    def on_sigint() -> None:
        interrupted.append(True)
        wake.set()

    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError):  # not the main thread: Ctrl-C stays Python's
        pass
    started = time.monotonic()
    runner.start()
    display.start()
    outcome, code = "", EXIT_USAGE
    noted = False
    try:
        while True:
            try:
                await asyncio.wait_for(wake.wait(), timeout=TICK)
            except asyncio.TimeoutError:
                pass
            wake.clear()
            now = time.time()
            if interrupted:
                code = EXIT_INTERRUPTED
                outcome = f"interrupted {_where(runner.view(now))}"
                break
            ended = runner.ended.is_set() and not runner.stop_reading
            if ended:
                runner.finish(now)
            else:
                runner.tick(now)
            events, pending[:] = list(pending), []
            view = runner.view(now)
            display.update(view, events, now)
            status = runner.follower.status if runner.follower else None
            if ended and status is not None and status.fatal and \
                    view.phase not in (READY, CRASHED, STOPPED):
                print(f"logwatch: {opts.target}: {status.message}", file=sys.stderr)
                code, outcome = EXIT_USAGE, "the source failed (the reason is above)"
                break
            if view.historic and not noted:
                noted = True
                display.note(attach_note(view, now, last=opts.last))
            if opts.last and runner.attached and not runner.catching_up:
                runner.finish(now)       # the log as it stands: its last line, its crash final
                code, outcome = _last_verdict(runner, runner.view(now))
                break
            verdict = _verdict(runner, view, events)
            if verdict is not None:
                code, outcome = verdict
                break
            if ended:
                why = status.message if status is not None and status.fatal else "the log ended"
                code, outcome = EXIT_TIMEOUT, f"{why} {_where(view)}"
                break
            if opts.timeout is not None and time.monotonic() - started >= opts.timeout:
                code, outcome = EXIT_TIMEOUT, f"timed out after {opts.timeout:g}s {_where(view)}"
                break
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass
        await runner.stop()
        await default_pool().close()
    if runner.pipe is None and runner.follower is not None:
        runner.follower.decide_pack(time.time())
    view = runner.view(time.time())
    if opts.last:        # the ended startup is what was asked for: reported in full
        view = dataclasses.replace(view, seen_at_attach=None)
    display.finish(view, outcome)
    if opts.json:
        doc: dict[str, Any] = summary(view)
        print(json.dumps(doc, ensure_ascii=False), file=out, flush=True)
    return code


def _where(view: TargetView) -> str:
    return "while waiting for a new startup" if view.historic else f"in {view.phase}"


def _historic(runner: TargetRunner) -> bool:
    """The current startup is the one that had ended before watch attached."""
    s, pipe = runner.seen_at_attach, runner.pipe
    return s is not None and pipe is not None and pipe.state.startup_id == s.startup_id


def _last_verdict(runner: TargetRunner, view: TargetView) -> tuple[int, str]:
    """--last: the latest startup as the log has it now."""
    if view.phase == READY:
        return EXIT_READY, "ready"
    if view.phase == STOPPED:
        return EXIT_FAILED, "stopped (clean shutdown)"
    if view.phase == CRASHED:
        return EXIT_FAILED, "crashed"
    return EXIT_TIMEOUT, f"still starting: {view.phase}"


def _final(runner: TargetRunner) -> bool:
    """Ready, stopped, or crashed with the crash settled: nothing later changes the verdict."""
    pipe = runner.pipe
    if pipe is None:
        return False
    st = pipe.state
    return st.phase in (READY, STOPPED) or (st.phase == CRASHED and st.crash_settled)


def _verdict(runner: TargetRunner, view: TargetView,
             events: list[Event]) -> tuple[int, str] | None:
    if view.catching_up or view.historic:
        return None          # what the log held at attach is still being read, or is history
    if view.phase == READY:
        return EXIT_READY, "ready"
    if view.phase == STOPPED:
        return EXIT_FAILED, "stopped (clean shutdown)"
    if _final(runner):
        return EXIT_FAILED, "crashed"
    if any(isinstance(e, Stalled) for e in events):
        return EXIT_TIMEOUT, f"stalled in {view.phase}"
    return None
