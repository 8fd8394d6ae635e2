"""One live target: its source, follower, pipeline, counters and checkpoints.

The one live loop of logwatch: the daemon runs one per configured target, `watch` one per
TARGET argument (without a state_dir: no checkpoints, no history).  A target runs as one
asyncio task that only reads its source and feeds the pipeline; the owner's ticker calls
`tick()` for stalls, crash settling (the machine's) and checkpoints.
A checkpoint holds the read position together with the machine state (its StartupId and
whether its crash settled) and the counters, written at the same moment, so a restarted
daemon (even after kill -9) continues with the phase and the counters it had, and counts
no line, startup or crash twice.  Every sink reads the target through `view()`.

Checkpoint format 2 (`extra.format`): the state carries `startup_id`.  A format-1 checkpoint
(before StartupId) is upgraded in place: its startup keeps the id the alerts of that
version were keyed on, so nothing is alerted again.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any, Callable

from .. import log
from ..counters import Counters
from ..follow import Follower
from ..ledger import LedgerRecorder, StartupRecord, vs_previous_text
from ..machine import (
    CrashSettled, Event, Ready, Stalled, StartupBegan, State, StatsUpdated, Stopped, retime,
    state_from_json, state_to_json,
)
from ..pipeline import LogPipeline
from ..sinks.metrics import Counted
from ..rules.locate import startup_locator
from ..rules.pack import (
    CRASHED, READY as READY_PHASE, STOPPED, TERMINAL, WAITING, RulePack, load_pack,
)
from ..silence import SERVING, PhaseWatts, Resumed, silence_verdict
from ..sources import Data, Opened, Skipped, SourceState, make_source
from ..telemetry.gpu import GpuStream, GpuStreams, plan_gpu, preflight_held, preflight_text
from ..telemetry.probe import (
    Endpoint, ProbePlan, Prober, endpoint_from_args, endpoint_of, local_connect, ssh_connect,
)
from ..sources.ssh import SSHPool, SSHTarget
from ..eta import EtaSmoother
from ..state.history import StartupHistory
from ..state.ledger import LedgerStore
from ..state.positions import PositionStore
from ..view import (
    SeenAtAttach, TargetView, build_view, seen_at_attach, silent_at_attach, silent_text,
)
from .config import TargetConfig

BATCH_INTERVAL = 0.1        # the daemon reads a growing local log at most 10 times a second
DURABLE_EVERY = 30.0        # fsync checkpoints this often (each write is atomic anyway)
LEDGER_EVERY = 60.0   # seconds between saves of a serving startup's ledger record
FORMAT = 2                  # checkpoint format (see the module docstring)
SLICE = 64 * 1024           # bytes matched between two yields to the event loop ...
MIN_SLICE = 4 * 1024        # ... down to this when slices take longer than SLICE_TIME
SLICE_TIME = 0.05


def upgrade_state(state: State, counters: dict[str, Any]) -> State:
    """A format-1 machine state: give its startup the id format 1 keyed alerts on
    (`epoch@first-seen`, whole seconds) and settle its crash if format 1 had counted it."""
    first = state.history[0].at if state.history else 0.0
    if state.startup_id is None and state.history:
        state.startup_id = f"{state.epoch}@{first:.0f}"
    if state.phase == CRASHED and counters.get("crash_counted") == f"{state.epoch}@{first:.3f}":
        state.crash_settled = True
    return state


def phase_at(st: State, at: float, history: list[Any] | None = None) -> str:
    """The phase the startup was in at wall time `at` (its main line's spans, by the wall
    time each was observed; `history`: st.history, when the caller has it already)."""
    history = st.history if history is None else history
    phase = history[0].phase if history else st.phase
    for e in history:
        if e.at > at:
            break
        phase = e.phase
    return phase


def checkpoint_phase(name: str) -> float:
    """Where in its checkpoint interval a target checkpoints, in [0, 1): from its name, so
    a fleet started together spreads its writes (and the same target keeps its slot)."""
    return (zlib.crc32(name.encode("utf-8", "surrogatepass")) % 997) / 997


class TargetRunner:
    def __init__(self, cfg: TargetConfig, *, store: PositionStore | None, state_dir: Any | None,
                 candidates: list[RulePack], start_pack: RulePack, pool: SSHPool,
                 on_events: Callable[["TargetRunner", list[Event]], None] | None = None,
                 checkpoint_interval: float = 5.0,
                 alert_marks: Callable[[str], dict[str, float]] | None = None,
                 batch_interval: float = BATCH_INTERVAL, log_sources: bool = True,
                 gpu_streams: GpuStreams | None = None,
                 ledger: LedgerStore | None = None,
                 on_probe: Callable[["TargetRunner"], None] | None = None,
                 probe: bool = True) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.store = store
        self.candidates = candidates
        self.start_pack = start_pack
        self.pool = pool
        self.on_events_cb = on_events or (lambda r, e: None)
        self.checkpoint_interval = checkpoint_interval
        self.history = StartupHistory(state_dir, cfg.name, cfg.labels.get("model", "")) \
            if state_dir is not None else None
        self.batch_interval = batch_interval
        self.log_sources = log_sources    # watch shows the source state on its display instead
        self.ended = asyncio.Event()      # the source ended (a command exited, a fatal error)
        self.stop_reading = False         # set by the owner: the verdict is in (watch)
        self.log = log.get("target").bind(target=cfg.name)
        self.failed_at: float | None = None   # its loop died of an unexpected error (retried)
        self.counters = Counters()
        self.task: asyncio.Task[None] | None = None
        self.follower: Follower | None = None
        self.last_checkpoint = 0.0
        # targets started together would checkpoint together: at 500, every interval 500
        # renames, and every DURABLE_EVERY 500 fsyncs, in one pass of the loop (a stall of
        # about a second); each target's checkpoints are offset by a share of the interval
        # taken from its name
        phase = checkpoint_phase(cfg.name)
        started = time.monotonic()
        self._next_checkpoint = started + phase * checkpoint_interval
        self._next_durable = started + phase * DURABLE_EVERY
        self.dirty = False
        self._checkpoint_now = False       # a new startup: checkpointed at the next tick
        self.started_at = time.time()
        self.last_line_at: float | None = None
        self.restored_state: State | None = None
        self.alert_marks = alert_marks
        self.saved_alert_marks: dict[str, float] = {}   # what its checkpoint says was alerted
        # a first attach: the bytes before `attach_end` were written before we looked; their
        # events are held until the end of them says whether they are news (see view.py
        # seen_at_attach): a startup that had ended is shown as such, never alerted
        self.attach_end: int | None = None
        self.attach_mtime: float | None = None
        self.catching_up = False
        self.attached = False             # the source has opened the log
        self._held: list[Event] = []
        self.seen_at_attach: SeenAtAttach | None = None
        self.silent_since: float | None = None   # a startup silent past its budget at attach
        self.report_history = False       # the owner wants an ended startup's events too
        self.eta = EtaSmoother()
        self.gpu_streams = gpu_streams    # None: no GPU telemetry (replay, tests)
        self.gpu: GpuStream | None = None
        self.preflight: list[tuple[int, float]] = []   # GPUs that held memory at launch
        self.preflight_read = False        # ... read at this startup's launch line (live)
        self.phase_watts = PhaseWatts(None)   # the GPUs' power per phase of this startup
        self._watts_seen = -1              # the GPU stream's version last given to it
        # the stall under way: when its silence began, and the Stalled that said it; lines
        # coming again end it
        self._stall: tuple[float, Stalled] | None = None
        self._gpu_final: dict[str, Any] | None = None   # the GPU view when it stopped
        self.ledger = ledger               # the launch ledger's store (None: not kept)
        self.recorder: LedgerRecorder | None = None
        self.last_startup_seconds: float | None = None  # the last startup that got ready
        self.vs_previous = ""              # at ready: this launch against the one before
        self._ledger_saved = 0.0
        self._gpu_seen = -1                # the GPU stream's version last given to the ledger
        self.on_probe = on_probe or (lambda r: None)
        self._events = 0                   # event batches seen (the /metrics key)
        self._rule_ids: tuple[Any, tuple[str, ...]] = (None, ())   # pack, its rule ids
        self.prober: Prober | None = self._make_prober() if probe else None
        self._setup()

    # -- setup ---------------------------------------------------------------------------------
    def _setup(self) -> None:
        position, extra = self.store.load(self.name) if self.store is not None else (None, {})
        if extra.get("source") not in (None, self.cfg.source):
            self.log.info("source changed since the last run: starting afresh")
            position, extra = None, {}
        pack: RulePack | None = None
        if self.cfg.rules != "auto":
            pack = load_pack(self.cfg.rules)
        elif extra.get("pack"):
            pack = next((p for p in self.candidates if p.name == extra["pack"]), None)
        if extra.get("counters"):
            self.counters = Counters.from_json(extra["counters"])
        if isinstance(extra.get("alerts_seen"), dict):
            self.saved_alert_marks = {str(k): float(v) for k, v in extra["alerts_seen"].items()
                                      if isinstance(v, (int, float))}
        if isinstance(extra.get("last_line_at"), (int, float)):
            self.last_line_at = float(extra["last_line_at"])
        if extra.get("state") and pack is not None and position is not None:
            try:
                self.restored_state = state_from_json(extra["state"])
                if extra.get("format") != FORMAT:
                    self.restored_state = upgrade_state(self.restored_state,
                                                        extra.get("counters") or {})
            except (TypeError, ValueError, KeyError) as e:
                self.log.warning("saved machine state unreadable: phase starts over", error=str(e))
        if self.restored_state is None:
            position = None if extra.get("state") is None and position is not None and pack is None \
                else position
        source = make_source(self.cfg.source,
                             locator=None if self.cfg.from_start else startup_locator(self.start_pack),
                             start=position, ssh=self.cfg.ssh, pool=self.pool, poll=self.cfg.poll,
                             name=self.name, batch_interval=self.batch_interval,
                             rotate_wait=self.cfg.rotate_wait)
        self.follower = Follower(self.name, source, self._new_pipeline, pack, self.candidates,
                                 on_events=self._on_events)

    def _new_pipeline(self, pack: RulePack) -> LogPipeline:
        pipe = LogPipeline(pack, stall_after=self.cfg.stall_after, counters=self.counters)
        if self.restored_state is not None:
            pipe.state = self.restored_state
            self.restored_state = None
            st = pipe.state
            if st.stalled:               # stalled when the daemon stopped: still a stall
                self._stall = (st.last_activity or time.time(),
                               Stalled(st.epoch, st.phase, 0.0, st.startup_id))
        if self.ledger is not None:
            self.recorder = LedgerRecorder(pack.name, previous=self._previous_record(pipe.state),
                                           advice=pack.advice, model_flags=pack.model_flags)
            stored = self._stored_record(pipe.state.startup_id)
            if stored is not None:        # restarted mid-startup or while serving
                self.recorder.resume(stored)
            pipe.on_step = self._ledger_step
        return pipe

    # -- the launch ledger -----------------------------------------------------------------------
    def _previous_record(self, state: State, exclude: str | None = None) -> StartupRecord | None:
        """The last recorded startup of this target that is not the current one."""
        assert self.ledger is not None
        current = exclude or state.startup_id
        for rec in reversed(self.ledger.records(self.name, 3)):
            if rec.startup != current:
                if rec.outcome == "ready" and self.last_startup_seconds is None:
                    self.last_startup_seconds = rec.startup_seconds
                return rec
        return None

    def _stored_record(self, startup: str | None) -> StartupRecord | None:
        assert self.ledger is not None
        if startup is None:
            return None
        return next((r for r in reversed(self.ledger.records(self.name, 3))
                     if r.startup == startup), None)

    def _ledger_step(self, events: list[Event], state: State) -> None:
        rec = self.recorder
        if rec is None or self.ledger is None:
            return
        for closed in rec.observe(events, state):
            self._save_record(closed)
        if len(events) == 1 and type(events[0]) is StatsUpdated:
            return      # a serving line (most steps): nothing to save
        if any(isinstance(e, (Ready, CrashSettled, Stopped)) for e in events):
            cur = rec.current(state)
            if cur is not None:
                self._save_record(cur)
                if cur.outcome == "ready" and any(isinstance(e, Ready) for e in events):
                    prev = self._previous_record(state, exclude=cur.startup)
                    self.vs_previous = vs_previous_text(prev, cur) if prev is not None else ""

    def _save_record(self, rec: StartupRecord) -> None:
        assert self.ledger is not None
        if rec.startup is not None and rec.startup == self.phase_watts.startup:
            rec.watts = self.phase_watts.summary()
        self.ledger.save(self.name, rec)
        self._ledger_saved = time.monotonic()
        if rec.outcome == "ready" and rec.startup_seconds is not None:
            self.last_startup_seconds = rec.startup_seconds

    def save_ledger(self) -> None:
        """The open startup as it stands (while it serves, and when the target stops)."""
        pipe = self.pipe
        if self.recorder is None or self.ledger is None or pipe is None:
            return
        cur = self.recorder.current(pipe.state)
        if cur is not None:
            self._save_record(cur)

    @property
    def pipe(self) -> LogPipeline | None:
        return self.follower.pipe if self.follower else None

    # -- the server's endpoint ----------------------------------------------------------------
    def _make_prober(self) -> Prober | None:
        """`probe:` auto probes ssh:// targets through their connection and local files
        directly; a cmd: target only with an explicit `url` (its server may be anywhere)."""
        cfg = self.cfg.probe
        kind = self.cfg.kind
        if not cfg.enabled or kind == "stdin" or (kind == "command" and not cfg.url):
            return None
        ssh = SSHTarget.parse(self.cfg.source) if kind == "ssh" else None
        connect = ssh_connect(self.pool, ssh, self.cfg.ssh) if ssh is not None else local_connect()
        return Prober(cfg, connect, self._probe_plan, on_result=lambda p: self.on_probe(self),
                      own_hosts=(ssh.host,) if ssh is not None else ())

    def _probe_plan(self) -> ProbePlan:
        """Where the server listens, by what its log says now (or the configured url)."""
        pipe = self.pipe
        paths = pipe.pack.probe_paths if pipe is not None else ()
        startup = pipe.state.startup_id if pipe is not None else None
        if self.cfg.probe.url:
            return ProbePlan(endpoint_of(self.cfg.probe.url), paths, startup)
        if pipe is None or self.catching_up or self._ended_at_attach(startup):
            return ProbePlan(None, paths, startup)   # a server that ended is not probed
        st = pipe.state
        ep: Endpoint | None = endpoint_of(st.endpoint) if st.endpoint else None
        if ep is None:
            ep = endpoint_from_args(st.args)
        if ep is None and self.prober is not None:
            self.prober.state.note = "no address in the log yet (host/port, `Uvicorn running on`)"
        return ProbePlan(ep, paths, startup)

    def _ended_at_attach(self, startup: str | None) -> bool:
        """`startup` is the one that had crashed or stopped before we attached: history.  One
        that was ready then is a server up before us: probed, its stats read, its crash
        alerted from the first read (its address from the whole startup, caught up on)."""
        s = self.seen_at_attach
        return s is not None and s.startup_id == startup and s.phase != READY_PHASE

    # -- running -------------------------------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"target:{self.name}")
        self._start_gpu()
        if self.prober is not None:
            self.prober.start()

    def _start_gpu(self) -> None:
        """nvidia-smi where the log is (the target's `gpu:`), shared with the host's other
        targets; a failure here is a GPU status, never the target's."""
        if self.gpu_streams is None:
            return
        where = plan_gpu(self.cfg.gpu, self.cfg.kind)
        if where is None:
            return
        try:
            ssh = (SSHTarget.parse(self.cfg.source), self.cfg.ssh) if where == "ssh" else None
            self.gpu = self.gpu_streams.acquire(self.cfg.gpu, ssh)
        except Exception as e:  # noqa: BLE001 - telemetry never stops the log
            self.log.warning("gpu telemetry not started", error=str(e))

    async def _run(self) -> None:
        assert self.follower is not None
        src = self.follower.source
        try:
            async for ev in src.events():
                if isinstance(ev, Opened):
                    self.attached = True
                if isinstance(ev, Opened) and ev.reason == "attach" and ev.size is not None \
                        and self.attach_end is None and ev.size > ev.offset:
                    self.attach_end, self.attach_mtime = ev.size, ev.mtime
                    self.catching_up = True
                if isinstance(ev, Data) and self.catching_up and self.attach_end is not None \
                        and ev.offset < self.attach_end < ev.offset + len(ev.data):
                    # the attach boundary inside a chunk: what came before it is decided first
                    cut = self.attach_end - ev.offset
                    await self._feed_in_slices(Data(ev.data[:cut], ev.offset))
                    self._count_bytes()
                    self._end_catch_up()
                    ev = Data(ev.data[cut:], self.attach_end)
                if isinstance(ev, Opened) and ev.reason != "resume" and \
                        (ev.new_file or ev.offset < self.counters.bytes_until):
                    self._count_bytes()
                    self.counters.bytes_until = ev.offset  # another file: count from here
                was_up = self.follower.status.up
                if isinstance(ev, Data) and len(ev.data) > MIN_SLICE:
                    await self._feed_in_slices(ev)
                else:
                    self.follower.handle(ev)
                if isinstance(ev, Data) and ev.data:
                    self.last_line_at = time.time()
                    self._count_bytes()
                    self._end_catch_up()
                    self._check_resumed()
                if self.stop_reading:
                    return
                if isinstance(ev, Skipped):
                    self.counters.bytes_skipped += ev.nbytes
                    self.counters.source_losses += 1
                    self.dirty = True
                if isinstance(ev, SourceState):
                    if was_up and not ev.up:
                        self.counters.reconnects += 1
                    if self.log_sources:
                        level = "warning" if not ev.up else "info"
                        getattr(self.log, level)("source", up=ev.up, message=ev.message)
                    if ev.fatal:
                        return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one target's failure never stops the others
            self.log.exception("target failed", error=repr(e))
            self.failed_at = time.time()
            self.follower.status.up = False
            self.follower.status.fatal = True
            self.follower.status.error = True
            self.follower.status.message = f"failed: {e!r}"
        finally:
            await src.close()
            self.ended.set()

    async def _feed_in_slices(self, ev: Data) -> None:
        """A big chunk in slices, yielding to the loop between them: one target's hostile
        log (lines that make patterns work to their timeout) never holds the daemon (its
        HTTP endpoint, the other targets) for more than about one slice's matching."""
        assert self.follower is not None
        i, size = 0, SLICE
        while i < len(ev.data) and not self.stop_reading:
            t0 = time.monotonic()
            self.follower.handle(Data(ev.data[i:i + size], ev.offset + i))
            i += size
            # slow slices (hostile lines) get smaller, fast ones grow back
            size = max(MIN_SLICE, size // 2) if time.monotonic() - t0 > SLICE_TIME \
                else min(SLICE, size * 2)
            await asyncio.sleep(0)

    def finish(self, now: float) -> None:
        """The source ended: the unfinished last line is a line, a crash is final."""
        if self.follower is not None:
            self.follower.finish(now)

    async def stop(self) -> None:
        self.save_ledger()
        if self.prober is not None:
            await self.prober.stop()
        if self.gpu is not None and self.gpu_streams is not None:
            self._gpu_final = self._gpu_view(time.time())   # watch's summary still reads it
            gpu, self.gpu = self.gpu, None
            await self.gpu_streams.release(gpu)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self.checkpoint(durable=True)

    def _count_bytes(self) -> None:
        """Every byte of the log once: bytes read again after a restart (the unfinished line
        after the saved position) are below `bytes_until` and not counted twice."""
        f = self.follower
        assert f is not None
        if f.next_offset is not None and f.next_offset > self.counters.bytes_until:
            self.counters.bytes += f.next_offset - self.counters.bytes_until
            self.counters.bytes_until = f.next_offset
            self.dirty = True
        self.counters.rotations = max(self.counters.rotations, f.status.files - 1)

    def _end_catch_up(self) -> None:
        """Once the bytes before the attach offset are through the rules: were they news?"""
        f, pipe = self.follower, self.pipe
        if not self.catching_up or f is None or pipe is None or self.attach_end is None or \
                f.next_offset is None or f.next_offset < self.attach_end:
            return
        self.catching_up = False
        held, self._held = self._held, []
        now = time.time()
        retime(pipe.state, self.attach_mtime)   # what it held is timed by its stamps
        self.eta = EtaSmoother()                # (an ETA of the read time is not held to)
        self.save_ledger()    # the serving figures read with it (the Ready save had none)
        self.seen_at_attach = seen_at_attach(pipe.state, self.attach_mtime, now)
        if self.seen_at_attach is None:
            self._silent_at_attach(pipe, now)
        if self.seen_at_attach is not None:
            s = self.seen_at_attach
            self.log.info("the latest startup in the log had ended before it was read: "
                          "history, not alerted", phase=s.phase, ago=round(s.ago),
                          startup=s.startup_id)
            if not self.report_history:
                return
        if held:
            self.on_events_cb(self, held)
        if self.prober is not None:
            self.prober.poke()         # a server up before us: probed from now on

    def _resumed(self, now: float) -> list[Event]:
        """[Resumed] when a stall is under way and lines came again (the machine forgot its
        `stalled`): the stall is over.  Not when those lines crashed it: the crash decides
        (an undelivered stall alert is then dropped, not resolved)."""
        pipe = self.pipe
        if self._stall is None or pipe is None or pipe.state.stalled:
            return []
        since, stall = self._stall
        self._stall = None
        st = pipe.state
        if st.phase in TERMINAL:
            return []
        return [Resumed(stall.epoch, stall.phase, max(0.0, (st.last_activity or now) - since),
                        stall.startup)]

    def _check_resumed(self) -> None:
        """After new bytes or a tick: a stall that lines ended is said (see `_resumed`)."""
        if self._stall is not None and self.pipe is not None and not self.pipe.state.stalled:
            self._on_events([])

    def _silent_at_attach(self, pipe: LogPipeline, now: float) -> None:
        """A startup whose log went silent longer ago than its phase's stall budget: its
        silence is counted from the file's last write, not from when we read it, so the
        machine's next tick stalls it (one `Stalled`: one alert, watch's exit 3) and the
        view says "silent since ...: server probably dead" instead of an ETA."""
        st = pipe.state
        since = silent_at_attach(st, self.attach_mtime, now,
                                 pipe.machine.stall_budget(st.phase), pipe.pack.startup_phases)
        if since is None:
            return
        self.silent_since = since
        st.last_activity = min(st.last_activity or since, since)
        if self.log_sources:          # the daemon says it once; watch says it as its verdict
            self.log.warning(silent_text(since, now), phase=st.phase, startup=st.startup_id)

    def _on_events(self, events: list[Event]) -> None:
        now = time.time()
        resumed = self._resumed(now)
        if resumed:
            events = [*resumed, *events]
        for ev in events:
            if isinstance(ev, Stalled):
                self._stall = (now - ev.silent_for, ev)
        if not events:
            return
        self.dirty = True
        for e in events:   # serving values move only the series /metrics reads at every scrape
            if type(e) is not StatsUpdated:
                self._events += 1
                break
        if self.prober is not None and any(isinstance(e, (Ready, StartupBegan)) for e in events):
            self.prober.poke()         # ask at once: the verdict beside the log's
        if self.gpu is not None and not self.catching_up and \
                any(isinstance(e, StartupBegan) for e in events):
            # read live at the launch line: memory the GPUs already hold is not this server's
            gpu = self.gpu.to_dict()
            self.preflight = preflight_held(gpu)
            self.preflight_read = bool(gpu.get("up") and gpu.get("snapshot"))
        pipe = self.pipe
        for ev in events:
            if self.history is None:
                break
            if isinstance(ev, Ready) and pipe is not None:
                self.history.record_durations(ev.durations, "ready", ev.startup or "",
                                              total=ev.took)
            elif isinstance(ev, CrashSettled):
                self.history.record_durations(ev.durations, "crashed", ev.startup or "",
                                              ev.crash.reason, ev.elapsed)
        if self.catching_up:
            self._held.extend(events)
            return
        if any(isinstance(e, StartupBegan) for e in events):
            # a new startup is checkpointed at the next tick, not a whole interval later: a
            # kill -9 meanwhile would attach again at this startup and number it 1
            self._checkpoint_now = True
        historic = self.seen_at_attach.startup_id if self.seen_at_attach and \
            not self.report_history and self._ended_at_attach(self.seen_at_attach.startup_id) \
            else None
        if historic is not None:   # what still comes of the ended startup (its crash settling)
            events = [e for e in events if getattr(e, "startup", None) != historic]
            if not events:
                return
        self.on_events_cb(self, events)

    def tick(self, now: float) -> None:
        """Stalls and crash settling (the machine's, through the follower), checkpoints.
        The events go to the daemon's sinks through `on_events` like those of new lines."""
        self._count_bytes()
        if self.follower is not None:
            self.follower.tick(now)
            self._end_catch_up()
            self._check_resumed()
        wall = time.monotonic()
        self._add_watts()
        if self.recorder is not None and self.pipe is not None and \
                self.pipe.state.phase == READY_PHASE:
            gpu = self.gpu
            if gpu is not None and gpu.up and gpu.latest is not None and gpu.version != self._gpu_seen:
                self._gpu_seen = gpu.version
                self.recorder.add_gpu(gpu.latest.to_dict())   # watts while it serves
            if wall - self._ledger_saved >= LEDGER_EVERY:
                self.save_ledger()     # the serving figures of a startup still serving
        if self.dirty and (wall >= self._next_checkpoint or self._checkpoint_now):
            self.checkpoint(durable=wall >= self._next_durable)

    def _add_watts(self) -> None:
        """The GPU snapshots that arrived since the last tick, to the phase they came in
        (`phase_watts`, a new one for each startup; the ready phase is "serving")."""
        gpu, pipe = self.gpu, self.pipe
        if gpu is None or pipe is None or gpu.version == self._watts_seen or self.catching_up:
            return
        self._watts_seen = gpu.version
        st = pipe.state
        if st.phase in (WAITING, *TERMINAL) or st.startup_id is None or not gpu.up:
            return
        if self.phase_watts.startup != st.startup_id:
            self.phase_watts = PhaseWatts(st.startup_id)
        last = self.phase_watts.last_at
        history = st.history
        began = history[0].at if history else None
        for snap in gpu.snapshots:
            if (last is None or snap.at > last) and (began is None or snap.at >= began):
                phase = phase_at(st, snap.at, history)
                self.phase_watts.add(SERVING if phase == READY_PHASE else phase, snap)

    def checkpoint(self, durable: bool = False) -> None:
        f = self.follower
        if f is None or f.pipe is None or self.store is None:
            return
        pos = f.position()
        if pos is None:
            return
        self._count_bytes()
        extra = {"format": FORMAT, "source": self.cfg.source, "pack": f.pipe.pack.name,
                 "last_line_at": self.last_line_at,
                 "state": state_to_json(f.pipe.state), "counters": self.counters.to_json(),
                 "alerts_seen": self.alert_marks(self.name) if self.alert_marks else {},
                 "saved_at": time.time()}
        if not self.store.save(self.name, pos, extra, durable=durable):
            return        # the disk refused it: counted, said once, tried again next time
        now = time.monotonic()
        self.last_checkpoint = now
        self._checkpoint_now = False
        if now >= self._next_checkpoint:   # (one out of turn keeps the target's phase)
            self._next_checkpoint = now + self.checkpoint_interval
        if durable:
            self._next_durable = now + DURABLE_EVERY
        self.dirty = False

    # -- the view ------------------------------------------------------------------------------
    def metrics_key(self, now: float) -> tuple[Any, ...]:
        """Changes whenever a series of this target but the `COUNTED` ones (lines, bytes,
        rule matches, serving values: read at every scrape) may have: its counts of faults,
        its events but serving updates, its source's state, a GPU sample, a probe; while a
        startup runs, every 5 s (the ETA counts down).  /metrics renders the target again
        only then."""
        c, f, pipe = self.counters, self.follower, self.pipe
        st = pipe.state if pipe is not None else None
        starting = self.starting()
        return (c.rotations, c.reconnects, c.bytes_skipped, c.source_losses, c.lines_cut,
                c.rule_errors, c.startups, self._events, id(pipe),
                st.phase if st is not None else None, st.stalled if st is not None else None,
                f.status.up if f else None, f.status.error if f else None,
                f.status.fatal if f else None, self.silent_since,
                self.gpu.version if self.gpu is not None else None,
                self.prober.state.probes if self.prober is not None else None,
                self.last_startup_seconds, self.catching_up,
                int(now // 5) if starting else None)

    def starting(self) -> bool:
        """A startup is under way (not waiting, serving, crashed or stopped)."""
        pipe = self.pipe
        return pipe is not None and \
            pipe.state.phase not in (WAITING, READY_PHASE, CRASHED, STOPPED)

    def position_age(self) -> float:
        return max(0.0, time.monotonic() - self.last_checkpoint) if self.last_checkpoint else 0.0

    def counted(self) -> Counted:
        """What /metrics reads of this target at every scrape (see `sinks.metrics.Counted`)."""
        pipe = self.pipe
        st = pipe.state if pipe is not None else None
        rules = self._rule_ids
        if pipe is not None and rules[0] is not pipe.pack:
            rules = self._rule_ids = (pipe.pack, tuple(r.id for r in pipe.pack.rules))
        return Counted(self.counters.lines, self.counters.bytes, self.counters.rule_matches,
                       rules[1] if pipe is not None else (),
                       st.stats if st is not None and st.phase == READY_PHASE else None,
                       self.last_line_at)

    def view(self, now: float) -> TargetView:
        f = self.follower
        pos = f.position() if f else None
        return build_view(
            name=self.name, source=self.cfg.display_source, kind=self.cfg.kind,
            labels=self.cfg.labels,
            now=now, pipe=self.pipe, counters=self.counters,
            source_up=bool(f and f.status.up), source_message=f.status.message if f else "",
            source_fatal=bool(f and f.status.fatal), source_error=bool(f and f.status.error),
            source_state=f.status.state if f else "waiting",
            source_down_since=f.status.outage(now) if f else None,
            source_notice=f.status.notice if f else "",
            history=self.history, offset=pos.offset if pos else None,
            line_number=pos.line_number if pos else None, last_line=f.last_line if f else "",
            last_line_at=self.last_line_at, started_at=self.started_at,
            checkpoint_age=self.position_age(), catching_up=self.catching_up,
            seen_at_attach=self.seen_at_attach, eta_smoother=self.eta,
            gpu=self._gpu_view(now), last_startup_seconds=self.last_startup_seconds,
            vs_previous=self.vs_previous,
            probe=self.prober.to_dict() if self.prober is not None else None,
            silent_since=self.silent_since)

    def _gpu_view(self, now: float) -> dict[str, Any] | None:
        """The stream's state, the preflight, the power per phase of this startup and, while
        the log of a startup is silent, the silence's verdict (silence.py)."""
        gpu = self.gpu
        if gpu is None:
            return self._gpu_final
        pipe = self.pipe
        out = {**gpu.to_dict(), "preflight": preflight_text(self.preflight),
               "preflight_read": self.preflight_read,
               "phases": self.phase_watts.summary()
               if pipe is not None and self.phase_watts.startup == pipe.state.startup_id else {},
               "silence": None}
        st = pipe.state if pipe is not None else None
        # only a silence of half the phase's stall budget or more gets a verdict (a startup
        # that prints every second has no silence to judge)
        if st is not None and pipe is not None and gpu.up and st.last_activity is not None \
                and st.phase not in (WAITING, READY_PHASE, *TERMINAL) and not self.catching_up \
                and now - st.last_activity >= pipe.machine.stall_budget(st.phase) / 2:
            verdict = silence_verdict(gpu.snapshots, st.last_activity, now, gpu.idle_w)
            out["silence"] = verdict.to_json() if verdict is not None else None
        return out
