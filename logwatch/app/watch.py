"""`logwatch watch TARGET [TARGET ...]`: follow a launch until it is ready or dead.

The replacement for `ssh host "sleep 30 && tail -30 server.log"` run by hand for ten
minutes.  Several TARGETs (the nodes of a multi-node launch, prefill + decode servers) are
followed as one launch: one verdict for all of them.  Exit status: 0 ready (all of them),
1 crashed or stopped (as soon as one did, naming it), 3 timed out or stalled, 2 usage or
configuration error (bad target, refused host key, unreadable file), 130 interrupted (Ctrl-C:
the summary is printed first; with --serve, Ctrl-C after ready is 0).
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

from .. import clock
from ..machine import Event
from ..rules.pack import CRASHED, READY, STOPPED, WAITING, load_all_shipped, load_pack
from ..sinks.display import MultiDisplay, PlainDisplay, attach_note, make_display
from ..sinks.summary import NO_STARTUP, summary
from ..sources import SourceError
from ..telemetry.gpu import GpuConfig
from ..telemetry.probe import ProbeConfig
from ..state.ledger import LedgerStore
from ..sources.ssh import SSHOptions, default_pool
from ..state.history import watch_state_dir
from ..verdict import Exit, crash_text
from ..view import TargetView, gpu_activity, gpu_working, silent_text
from .config import TargetConfig
from .notify import notify_verdict
from .attachments import Attachment
from .attachments.gpu import GpuAttachment, GpuStreams
from .attachments.history import HistoryAttachment
from .attachments.ledger import LedgerAttachment
from .attachments.probe import ProbeAttachment
from .target import Target

# watch's names for the registry's statuses (verdict.py `Exit`: README "Exit codes")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_READY, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT, EXIT_INTERRUPTED = (
    Exit.OK, Exit.FAILED, Exit.USAGE, Exit.TIMEOUT, Exit.INTERRUPTED)
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
    targets: list[str] = field(default_factory=list)    # every TARGET (default: [target])
    probe: ProbeConfig = field(default_factory=ProbeConfig)  # the server's own endpoint
    notify: str | None = None    # a Slack / webhook URL, or "bell": one message at the verdict
    serve: bool = False          # after ready keep going until Ctrl-C or a crash

    @property
    def all_targets(self) -> list[str]:
        return self.targets or [self.target]


def watch_runner(opts: WatchOptions, on_events: Callable[[Target, list[Event]], None]
                 | None = None, target: str | None = None) -> Target:
    """A target `watch` follows: the daemon's live loop without positions, with the
    TARGET's startup history and ledger (keyed by the TARGET string) unless --no-history."""
    target = target or opts.target
    if opts.rules == "auto":
        candidates = [p for p in load_all_shipped() if p.detect]
    else:
        pack = load_pack(opts.rules)
        candidates = [pack]
    cfg = TargetConfig(name=target, source=target, rules=opts.rules,
                       stall_after=opts.stall_after, ssh=opts.ssh, poll=opts.poll,
                       from_start=opts.from_start, gpu=opts.gpu, probe=opts.probe,
                       wait_for_dir=opts.wait_for_file)
    return Target(cfg, store=None, candidates=candidates, pool=default_pool(),
                  attachments=watch_attachments(opts, target),
                  on_events=on_events, batch_interval=0.0, log_sources=False,
                  report_history=opts.last, keep_verdict=not opts.last)


def watch_attachments(opts: WatchOptions, target: str) -> list[Attachment]:
    """What hangs off a target of `watch` (app/attachments/): history and ledger in
    watch's own state dir (not with --no-history), the GPUs, the probe."""
    gpu = GpuAttachment(GpuStreams(default_pool()))
    if not opts.history:
        return [gpu, ProbeAttachment(default_pool())]
    return [HistoryAttachment(watch_state_dir(), target), gpu,
            LedgerAttachment(LedgerStore(watch_state_dir()), target, power=gpu),
            ProbeAttachment(default_pool())]


@dataclass
class Watched:
    """One TARGET of a watch: its runner, its display, and its own verdict once it has one."""

    name: str
    runner: Target
    display: PlainDisplay
    pending: list[Event] = field(default_factory=list)
    noted: bool = False
    verdict: tuple[int, str] | None = None
    verdict_at: float | None = None
    fatal: bool = False          # its source failed before any verdict (exit 2)
    awaiting_said: bool = False  # "ready in log; waiting for the endpoint" said
    blocked_said: bool = False   # "the endpoint cannot be probed" said


async def run_watch(opts: WatchOptions, out: TextIO = sys.stdout) -> int:
    """Follow the targets on the daemon's live loop (`Target`, memory only) with a
    terminal sink, until one verdict for all of them."""
    names = opts.all_targets
    wake = asyncio.Event()
    screen = sys.stderr if opts.json else out
    multi = MultiDisplay(names, screen) if len(names) > 1 else None
    watched = await _watch_all(opts, names, screen, multi, wake)
    if watched is None:
        return EXIT_USAGE
    interrupted: list[bool] = []

    def on_sigint() -> None:
        interrupted.append(True)
        wake.set()

    loop = asyncio.get_running_loop()
    try:
        # Ctrl-C, and what a CI runner's timeout or cancel sends (SIGTERM) or a closed
        # terminal (SIGHUP): the summary and the --json object first (before, those two died
        # at 143 / 129 with nothing on stdout)
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_sigint)
    except (NotImplementedError, RuntimeError):  # not the main thread: Ctrl-C stays Python's
        pass
    for w in watched:
        w.runner.start()
    if multi is not None:
        multi.start()
    for w in watched:
        w.display.start()
    try:
        code, outcome = await _follow(watched, opts, wake, interrupted, multi)
    finally:
        try:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        except (NotImplementedError, RuntimeError):
            pass
        for w in watched:
            await w.runner.stop()
        await default_pool().close()
    await _report(watched, opts, code, outcome, out, screen, multi)
    return code


async def _watch_all(opts: WatchOptions, names: list[str], screen: TextIO,
                     multi: MultiDisplay | None, wake: asyncio.Event) -> list[Watched] | None:
    """One `Watched` per TARGET, its events waking the loop; None (said on stderr) when a
    TARGET cannot be followed (a bad target string, a refused host key)."""
    watched: list[Watched] = []

    def on_events_for(w_index: int) -> Callable[[Target, list[Event]], None]:
        def on_events(runner: Target, events: list[Event]) -> None:
            watched[w_index].pending.extend(events)
            wake.set()
            if _final(runner) and not _historic(runner) and \
                    not (opts.serve and runner.pipe is not None
                         and runner.pipe.state.phase == READY):
                runner.stop_reading = True   # the verdict is in: read no further than it
        return on_events

    try:
        for i, name in enumerate(names):
            runner = watch_runner(opts, on_events_for(i), target=name)
            display = multi.child(name) if multi is not None else make_display(name, screen)
            watched.append(Watched(name, runner, display))
    except SourceError as e:
        print(f"logwatch: {e}", file=sys.stderr)
        for w in watched:
            await w.runner.stop()
        return None
    return watched


async def _follow(watched: list[Watched], opts: WatchOptions, wake: asyncio.Event,
                  interrupted: list[bool], multi: MultiDisplay | None) -> tuple[int, str]:
    """Tick the targets (at least every TICK, at once on their events) until the launch's
    verdict, a timeout or Ctrl-C: (exit code, outcome)."""
    started = time.monotonic()
    serving = False
    while True:
        try:
            await asyncio.wait_for(wake.wait(), timeout=TICK)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        now = clock.now()
        if interrupted:
            if serving:
                return EXIT_READY, "served until interrupted"
            return EXIT_INTERRUPTED, "interrupted " + "; ".join(
                _where(w.runner.view(now)) if len(watched) == 1
                else f"{w.name} {_where(w.runner.view(now))}" for w in watched)
        views = [_step(w, opts, now, serving) for w in watched]
        if multi is not None:
            multi.refresh(views, now)
        result = _combine(watched, views, opts, serving)
        if result == "serve":
            serving = True
            for w in watched:
                w.display.note("serving (Ctrl-C to stop; --serve)")
            continue
        if result is not None:
            return result  # type: ignore[return-value]
        if opts.timeout is not None and time.monotonic() - started >= opts.timeout:
            # a crash seen and not yet final (its settle window) is still a crash: 1, as
            # --help says, not 3 beside a JSON that says crashed; one that had ended before
            # watch attached is history: no launch came, 3 (as after an old ready)
            crashed = any(v.phase == CRASHED and not v.historic for v in views)
            return (EXIT_FAILED if crashed else EXIT_TIMEOUT), \
                _timed_out(watched, views, opts.timeout)


def as_given(seconds: float) -> str:
    """A --timeout as a person writes it: `20m`, `1h30m`, `45s` (before: `1200s`)."""
    whole = int(seconds)
    if whole != seconds or whole < 60 or whole % 60:
        return f"{seconds:g}s"
    h, m = divmod(whole // 60, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m else "")


def _timed_out(watched: list[Watched], views: list[TargetView], timeout: float) -> str:
    """--timeout's outcome: where the target was (each one not ready, for a launch)."""
    if len(watched) == 1:
        return f"timed out after {as_given(timeout)}" + (": " if _deaf(views[0]) else " ") + \
            _where(views[0])
    return f"timed out after {as_given(timeout)}: " + "; ".join(
        f"{w.name} {_where(v)}" for w, v in zip(watched, views)
        if w.verdict is None or w.verdict[0] != EXIT_READY)


async def _report(watched: list[Watched], opts: WatchOptions, code: int, outcome: str,
                  out: TextIO, screen: TextIO, multi: MultiDisplay | None) -> None:
    """The verdict: the display's summary, the --json lines, the --notify message."""
    final_views: list[TargetView] = []
    for w in watched:
        r = w.runner
        if r.pipe is None and r.follower is not None:
            r.follower.decide_pack(clock.now())
        view = r.view(clock.now())
        if opts.last:        # the ended startup is what was asked for: reported in full
            view = dataclasses.replace(view, seen_at_attach=None)
        final_views.append(view)
    if multi is not None:
        multi.finish(final_views, outcome)
    else:
        watched[0].display.finish(final_views[0], outcome)
    if opts.json:
        for view in final_views:
            doc: dict[str, Any] = summary(view)
            print(json.dumps(doc, ensure_ascii=False), file=out, flush=True)
    if opts.notify:
        await notify_verdict(opts.notify, code, outcome, final_views, screen)


def _step(w: Watched, opts: WatchOptions, now: float, serving: bool) -> TargetView:
    """One tick of one target: feed its display, and settle its own verdict."""
    runner = w.runner
    ended = runner.ended.is_set() and not runner.stop_reading
    if ended:
        runner.finish(now)
    else:
        runner.tick(now)
    events, w.pending[:] = list(w.pending), []
    view = runner.view(now)
    w.display.update(view, events, now)
    if w.verdict is not None and not serving:
        return view
    status = runner.follower.status if runner.follower else None
    if ended and status is not None and status.fatal and \
            view.phase not in (READY, CRASHED, STOPPED):
        print(f"logwatch: {w.name}: {status.message}", file=sys.stderr)
        w.fatal = True
        w.verdict = (EXIT_USAGE, "the source failed (the reason is above)")
        return view
    if status is not None and not runner.attached and status.error and \
            status.cause in ("dns", "refused"):
        # the first connection: a mistyped host or port, not an outage to wait out
        print(f"logwatch: {w.name}: {status.message.split('; retrying')[0]}", file=sys.stderr)
        w.fatal = True
        w.verdict = (EXIT_USAGE, "the source failed (the reason is above)")
        return view
    if view.historic and not w.noted and _settled(runner):
        w.noted = True
        w.display.note(attach_note(view, now, last=opts.last))
    if opts.last and runner.attached and not runner.catching_up:
        if w.verdict is None:
            runner.finish(now)   # the log as it stands: its last line, its crash final
            view = runner.view(now)
            if view.historic and not w.noted:
                w.noted = True
                w.display.note(attach_note(view, now, last=True))
            w.verdict = _last_verdict(runner, view)
            w.verdict_at = now
        return view
    verdict = _held_for_the_endpoint(w, runner, view, _verdict(runner, view, events))
    if serving and verdict is not None and verdict[0] == EXIT_READY:
        return view          # still serving
    if verdict is not None:
        w.verdict, w.verdict_at = verdict, now
        return view
    if ended:
        why = status.message if status is not None and status.fatal else "the log ended"
        w.verdict, w.verdict_at = (EXIT_TIMEOUT, f"{why} {_where(view)}"), now
    return view


def _combine(watched: list[Watched], views: list[TargetView], opts: WatchOptions,
             serving: bool) -> tuple[int, str] | str | None:
    """One verdict for the launch: a failed source (2) or a crashed / stopped target (1) ends
    it at once, naming which and when; a stall or an ended log (3) too; all ready is 0 (or,
    with --serve, the start of serving)."""
    single = len(watched) == 1

    def named(w: Watched, text: str) -> str:
        if single:
            return text
        at = time.strftime("%H:%M:%S", time.localtime(w.verdict_at)) if w.verdict_at else ""
        return f"{w.name} {text}" + (f" at {at}" if at else "")

    for w in watched:
        if w.fatal:
            return EXIT_USAGE, named(w, w.verdict[1]) if w.verdict else "the source failed"
    failed = [w for w in watched if w.verdict is not None and w.verdict[0] == EXIT_FAILED]
    if failed:
        first = min(failed, key=lambda w: w.verdict_at or 0.0)
        return EXIT_FAILED, named(first, first.verdict[1])  # type: ignore[index]
    if serving:
        return None
    stuck = [w for w in watched if w.verdict is not None and w.verdict[0] == EXIT_TIMEOUT]
    if stuck:
        first = min(stuck, key=lambda w: w.verdict_at or 0.0)
        return EXIT_TIMEOUT, named(first, first.verdict[1])  # type: ignore[index]
    if all(w.verdict is not None and w.verdict[0] == EXIT_READY for w in watched):
        if opts.serve and not opts.last:
            return "serve"
        return EXIT_READY, "ready" if single else f"all {len(watched)} ready"
    return None


def _settled(runner: Target) -> bool:
    """The crash of the startup (if it crashed) is final: its reason will not change (the
    attach note names it; an unfinished last line is read when the crash settles)."""
    pipe = runner.pipe
    return pipe is None or pipe.state.phase != CRASHED or pipe.state.crash_settled


def _where(view: TargetView) -> str:
    if view.historic:
        return "while waiting for a new startup"
    if _deaf(view):
        status = (view.probe or {}).get("status")
        return "ready in log, not answering" + (f": {status}" if status else "")
    return f"in {view.phase}"


def _deaf(view: TargetView) -> bool:
    """Ready in the log, and the probe of its endpoint never answered for this startup."""
    return view.phase == READY and not view.historic and view.status == "unreachable"


def _held_for_the_endpoint(w: Watched, runner: Target, view: TargetView,
                           verdict: tuple[int, str] | None) -> tuple[int, str] | None:
    """Ready means serving: a ready verdict waits until the endpoint answers (or --probe
    off, or it cannot be probed from here); what it waits for is said once."""
    if (view.probe or {}).get("blocked") and not w.blocked_said:
        w.blocked_said = True
        w.display.note(f"the endpoint cannot be probed: {view.probe['status']}; the log's "
                       "word stands")
    if verdict is None or verdict[0] != EXIT_READY or not _awaiting_endpoint(runner, view):
        return verdict
    if not w.awaiting_said:
        w.awaiting_said = True
        probe = runner.part(ProbeAttachment)
        ep = probe.plan().endpoint if probe is not None else None
        url = (view.probe or {}).get("url") or \
            (f"http://{ep.address}{ep.path}" if ep is not None else "its endpoint")
        w.display.note(f"ready in log; waiting for {url} to answer (--probe off: the "
                       f"log's word is enough)")
    return None


def _awaiting_endpoint(runner: Target, view: TargetView) -> bool:
    """Ready in the log, a probe runs and knows where the server listens, and no probe of
    this startup has answered yet: not ready for `watch ... && run_benchmark`."""
    probe = runner.part(ProbeAttachment)
    if probe is None or probe.prober is None or view.historic:
        return False
    if probe.plan().endpoint is None:
        return False             # no address in the log: the log's word is all there is
    p = view.probe or {}
    if p.get("blocked"):
        return False             # the node forbids the probe's way there: the same
    return not (p.get("ok_at") and p.get("ok_startup") == view.startup_id)


def _historic(runner: Target) -> bool:
    """The current startup is the one that had ended before watch attached."""
    s, pipe = runner.catchup.seen_at_attach, runner.pipe
    return s is not None and pipe is not None and pipe.state.startup_id == s.startup_id


def _last_verdict(runner: Target, view: TargetView) -> tuple[int, str]:
    """--last: the latest startup as the log has it now."""
    if view.phase == READY:
        return EXIT_READY, "ready"
    if view.phase == STOPPED:
        return EXIT_FAILED, "stopped (clean shutdown)"
    if view.phase == CRASHED:
        return EXIT_FAILED, "crashed"
    if view.phase == WAITING and not view.counters.startups:
        return EXIT_TIMEOUT, NO_STARTUP
    if view.silent_since is not None:
        # silent past its phase's budget by the file's last write: said whether or not a
        # tick came before this verdict (before, of two logs silent 19 minutes in
        # cuda_graph one said it was stalled and the other only "still starting")
        return EXIT_TIMEOUT, f"stalled in {view.phase}; {silent_text(view.silent_since, view.now)}"
    return EXIT_TIMEOUT, f"still starting: {view.phase}"


def _final(runner: Target) -> bool:
    """Ready, stopped, or crashed with the crash settled: nothing later changes the verdict."""
    pipe = runner.pipe
    if pipe is None:
        return False
    st = pipe.state
    return st.phase in (READY, STOPPED) or (st.phase == CRASHED and st.crash_settled)


def _verdict(runner: Target, view: TargetView,
             events: list[Event]) -> tuple[int, str] | None:
    if view.catching_up or view.historic:
        return None          # what the log held at attach is still being read, or is history
    if view.phase == READY:
        return EXIT_READY, "ready"
    if view.phase == STOPPED:
        return EXIT_FAILED, "stopped (clean shutdown)"
    if _final(runner):
        return EXIT_FAILED, crash_text((view.crash or {}).get("reason"))
    if view.stalled and view.silent_since is not None and not gpu_working(view.gpu):
        if runner.first_probe_pending():
            return None      # dead at attach: the endpoint's first word before that verdict
        return EXIT_TIMEOUT, silent_text(view.silent_since, view.now)   # (not gives_up's)
    if view.stalled and gives_up(view):
        verdict = gpu_activity(view.gpu)
        return EXIT_TIMEOUT, f"stalled in {view.phase}" + \
            (f" ({view.rank_lag})" if view.rank_lag else "") + (f"; {verdict}" if verdict else "")
    return None


GIVE_UP = 2.0     # watch gives up on a silence of GIVE_UP x stall_after, unless the GPUs work


def gives_up(view: TargetView) -> bool:
    """A stall is news, not the end: watch says it (with the GPUs' verdict) and follows on,
    since lines may come again (the stall is then over).  It gives up (exit 3) once the
    silence has lasted GIVE_UP x stall_after while the GPUs are not working through it
    (loading or busy: slow, not hung, followed until --timeout)."""
    if view.stall_after is None or view.last_line_at is None:
        return True
    if gpu_working(view.gpu):
        return False
    return view.now - view.last_line_at >= GIVE_UP * view.stall_after
