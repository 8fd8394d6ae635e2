"""One live target: source -> follower -> pipeline, its checkpoints, its tick, its view.

The one live loop of logwatch: the daemon runs one per configured target, `watch` one per
TARGET argument (without a store: no checkpoints).  A target runs as one asyncio task that
only reads its source and feeds the pipeline; the owner's ticker calls `tick()` for
stalls, crash settling (the machine's), the ETA and checkpoints.  Everything else a target
has hangs off it as an `Attachment` (app/attachments/: history, ledger, GPU, probe; the
catch-up of a first attach is one every target has), in the list its owner builds.
Every sink reads the target through `view()`, which changes nothing (app/checkpoint.py
says what a checkpoint holds).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Protocol, Sequence, TypeVar, runtime_checkable

from .. import clock
from .. import log
from ..counters import Counters, count_crash
from ..eta import EtaSmoother, startup_eta
from ..follow import Follower
from ..machine import (
    CrashSettled, Event, Ready, Stalled, StartupBegan, State, StatsUpdated, current_stats,
)
from ..pipeline import LogPipeline
from ..rules.locate import startup_locator
from ..rules.pack import CRASHED, READY, STOPPED, TERMINAL, WAITING, RulePack
from ..silence import Resumed
from ..sinks.metrics import Counted
from ..sources import make_source
from ..sources.ssh import SSHPool
from ..state.positions import PositionStore
from ..view import TargetView, build_view, copy_counters
from .attachments import Attachment
from .attachments.catchup import CatchUp, ResumedBytes, relaunched
from .attachments.probe import ProbeAttachment
from . import reading
from .checkpoint import Checkpoints, checkpoint_phase, restore
from .config import TargetConfig

__all__ = ["Target", "TargetRunner", "checkpoint_phase"]

BATCH_INTERVAL = 0.1        # the daemon reads a growing local log at most 10 times a second
A = TypeVar("A")


@runtime_checkable
class EtaBasis(Protocol):
    """An attachment the ETA takes its typical phase durations from (history)."""

    def typical(self) -> dict[str, float]: ...

    def basis(self) -> int: ...


@dataclass(frozen=True)
class EtaPart:
    """The target view's ETA: smoothed by `tick`, only read by `view`."""

    eta_seconds: float
    eta_basis: int


class LiveEta:
    """Seconds until ready, held from jumping (eta.py `EtaSmoother`): the target's `tick`
    moves the smoother (`step`), its view only reads where it would be now (`part`)."""

    def __init__(self, basis: EtaBasis | None) -> None:
        self.basis = basis
        self.smoother = EtaSmoother()

    def _raw(self, pipe: LogPipeline, now: float) -> tuple[float, dict[str, float] | None]:
        typical = self.basis.typical() if self.basis is not None else None
        return startup_eta(pipe.pack, pipe.state, now, typical), typical

    def step(self, pipe: LogPipeline, now: float, dead: bool) -> None:
        st = pipe.state
        if st.stalled and dead:     # silent since before the attach: no ETA
            return
        if st.phase in (WAITING, READY, *TERMINAL):   # no startup under way: nothing to
            self.smoother(st.phase, math.nan, now)     # hold (a serving target's tick)
            return
        self.smoother(st.phase, self._raw(pipe, now)[0], now)

    def part(self, pipe: LogPipeline, now: float) -> EtaPart:
        raw, typical = self._raw(pipe, now)
        return EtaPart(self.smoother.peek(pipe.state.phase, raw, now),
                       self.basis.basis() if self.basis is not None and typical else 0)


class Stalls:
    """The stall under way (when its silence began, the Stalled that said it): lines coming
    again end it.  The machine only clears `State.stalled` on new bytes, so the target says
    `Resumed` before the events of the bytes that ended it (not when they crashed it: the
    crash decides, an undelivered stall alert is then dropped, not resolved)."""

    def __init__(self) -> None:
        self.current: tuple[float, Stalled] | None = None

    def restored(self, st: State) -> None:
        if st.stalled:               # stalled when the daemon stopped: still a stall
            self.current = (st.last_activity or clock.now(),
                            Stalled(st.epoch, st.phase, 0.0, st.startup_id))

    def over(self, st: State) -> bool:
        return self.current is not None and not st.stalled

    def resumed(self, st: State | None, now: float) -> list[Event]:
        if self.current is None or st is None or st.stalled:
            return []
        (since, stall), self.current = self.current, None
        if st.phase in TERMINAL:
            return []
        return [Resumed(stall.epoch, stall.phase, max(0.0, (st.last_activity or now) - since),
                        stall.startup)]

    def note(self, events: list[Event], now: float) -> None:
        for ev in events:
            if isinstance(ev, Stalled):
                self.current = (now - ev.silent_for, ev)


class Target:
    """The live loop of one target (see the module docstring); its attachments get every
    event, tick and close, and their views make up its view.

    Long because: the loop, its events and the face /metrics reads (metrics_key, counted)
    share one object's state; every side feature is already an attachment."""

    def __init__(self, cfg: TargetConfig, *, store: PositionStore | None,
                 candidates: list[RulePack], pool: SSHPool,
                 attachments: Sequence[Attachment] = (),
                 on_events: Callable[["Target", list[Event]], None] | None = None,
                 checkpoint_interval: float = 5.0,
                 alert_marks: Callable[[str], dict[str, float] | None] | None = None,
                 alert_pending: Callable[[str], list[dict[str, Any]]] | None = None,
                 batch_interval: float = BATCH_INTERVAL, log_sources: bool = True,
                 report_history: bool = False, keep_verdict: bool = False) -> None:
        self.cfg, self.name = cfg, cfg.name
        self.on_events_cb = on_events or (lambda r, e: None)
        self.alert_marks = alert_marks
        self.alert_pending = alert_pending   # its undelivered pages, in its checkpoint
        self.log_sources = log_sources    # watch shows the source state on its display instead
        self.log = log.get("target").bind(target=cfg.name)
        self.ended = asyncio.Event()      # the source ended (a command exited, a fatal error)
        self.stop_reading = False         # set by the owner: the verdict is in (watch)
        self.keep_verdict = keep_verdict  # watch: a crash is not read over by a relaunch
        self.failed_at: float | None = None   # its loop died of an unexpected error (retried)
        self.attached = False             # the source has opened the log
        self.started_at = clock.now()
        self.task: asyncio.Task[None] | None = None
        self.checkpoints = Checkpoints(store, cfg.name, checkpoint_interval)
        self.catchup = CatchUp(report_history=report_history, log_sources=log_sources)
        if keep_verdict and cfg.kind == "file":     # watch: a relaunch not yet printed
            self.catchup.judge_attach = relaunched(cfg.source)
        self.attachments: list[Attachment] = [self.catchup, *attachments]
        self.resumed_bytes = ResumedBytes()   # read again at a restart: written before
        self.eta = LiveEta(next((a for a in attachments if isinstance(a, EtaBasis)), None))
        self.stalls = Stalls()
        self._events = 0                  # event batches seen (the /metrics key)
        self._held_stall: list[Event] = []   # a stall at attach, until the first probe
        self._rule_ids: tuple[Any, tuple[str, ...]] = (None, ())   # pack, its rule ids
        for a in self.attachments:
            a.bind(self)
        restored = restore(store, cfg, candidates, self.log)
        self.counters: Counters = restored.counters
        self.saved_alert_marks = restored.alert_marks   # what its checkpoint says was alerted
        self.saved_alert_pending = restored.alert_pending   # ... and not delivered
        self.last_line_at = restored.last_line_at
        self._restored_state, self._restored_shown = restored.state, restored.shown
        if restored.state is not None:     # silent since before the first attach, and still
            self.catchup.silent_since = restored.silent_since
        for a in self.attachments:
            kept = restored.kept.get(getattr(a, "saved_as", ""))
            if kept is not None:
                a.resume(kept)
        # where a log met for the first time is read from: its latest launch, by the markers
        # of the target's pack (every candidate's under `rules: auto`)
        packs = [restored.pack] if cfg.rules != "auto" and restored.pack else candidates
        source = make_source(cfg.source, locator=None if cfg.from_start else
                             startup_locator(packs), start=restored.position, ssh=cfg.ssh,
                             pool=pool, poll=cfg.poll, name=self.name,
                             batch_interval=batch_interval, rotate_wait=cfg.rotate_wait,
                             wait_for_dir=cfg.wait_for_dir)
        self.follower = Follower(self.name, source, self._new_pipeline, restored.pack,
                                 candidates, on_events=self._on_events,
                                 redetect=cfg.rules == "auto")

    def _new_pipeline(self, pack: RulePack, carry: LogPipeline | None = None) -> LogPipeline:
        """The pipeline of `pack`: the first (the restored state in it), or another engine's
        that carries `carry`'s state and position on (Follower's `redetect`)."""
        pipe = LogPipeline(pack, stall_after=self.cfg.stall_after, counters=self.counters)
        pipe.counts_crash = self.counts_crash
        pipe.counts_took = self.counts_took
        pipe.keep_final = self._news if self.keep_verdict else None
        if carry is not None:
            pipe.carry_on(carry)
        elif self._restored_state is not None:
            pipe.state, self._restored_state = self._restored_state, None
            pipe.shown = self._restored_shown or pipe.shown
            self.stalls.restored(pipe.state)
        for a in self.attachments:
            a.on_pipeline(pipe)
        return pipe

    def _news(self, st: State) -> bool:
        """The startup of `st` is news: read live, not the one that had ended at attach."""
        seen = self.catchup.seen_at_attach
        return not self.catching_up and (seen is None or seen.startup_id != st.startup_id)

    # -- what the attachments and the owner read -----------------------------------------------
    @property
    def pipe(self) -> LogPipeline | None:
        return self.follower.pipe

    @property
    def catching_up(self) -> bool:
        return self.catchup.catching_up

    def ended_at_attach(self, startup: str | None) -> bool:
        return self.catchup.ended_at_attach(startup)

    def part(self, kind: type[A]) -> A | None:
        """Its attachment of this class (None: not in its list)."""
        return next((a for a in self.attachments if isinstance(a, kind)), None)


    # -- events and ticks ----------------------------------------------------------------------
    def _on_events(self, events: list[Event], news: bool = True) -> None:
        now = clock.now()
        resumed = self.stalls.resumed(self.pipe.state if self.pipe else None, now)
        if resumed:
            events = [*resumed, *events]
        self.stalls.note(events, now)
        if not events:
            return
        self.checkpoints.dirty = True
        if any(type(e) is not StatsUpdated for e in events):
            self._events += 1   # serving values move only the series read at every scrape
        for a in self.attachments:
            a.on_events(events, now)
        if not self.catching_up and any(isinstance(e, StartupBegan) for e in events):
            # a new startup is checkpointed at the next tick, not a whole interval later: a
            # kill -9 meanwhile would attach again at this startup and number it 1
            self.checkpoints.now = True
        events = self.catchup.admit(events)
        if events and self._silent_since_attach() and self.first_probe_pending():
            # silent at attach: "probably dead" waits for the endpoint's first word
            self._held_stall += [e for e in events if isinstance(e, Stalled)]
            events = [e for e in events if not isinstance(e, Stalled)]
        if events and news:
            self.on_events_cb(self, events)

    def probed(self, now: float, answers: bool, said: str) -> None:
        """A probe reported (attachments/probe.py).  Where the server answers and its log
        never said ready, that is the ready (`LogPipeline.endpoint_answers`); for a log
        silent past its budget when we attached (a server at WARNING, serving for an hour)
        it is history, not news: no `ready` alert, and the `stalled` ("probably dead") held
        until this first answer is dropped.  Else that stall goes out now."""
        held, self._held_stall = self._held_stall, []
        # not before the source opened: a command's printed history, still held, may hold
        # this very launch (before: ready by endpoint, then `restarted` and a second ready)
        if self.pipe is None or self.catching_up or not self.attached:
            self._held_stall = held
            return
        events = self.pipe.endpoint_answers(now, said) if answers else []
        if events:
            self._on_events(events, news=not self._silent_since_attach())
        elif held and not (answers and self.pipe.state.phase == READY):
            self.on_events_cb(self, held)

    def _silent_since_attach(self) -> bool:
        """The log was silent past its budget when we attached, and nothing came since (the
        catch-up set its activity back to its last write; a new byte moves it on)."""
        since, st = self.catchup.silent_since, self.pipe.state if self.pipe else None
        return since is not None and st is not None and st.last_activity is not None and \
            st.last_activity <= since

    def first_probe_pending(self) -> bool:
        """A probe knows where the server listens and has not reported yet: a log silent
        for an hour is not "probably dead" before its endpoint is asked."""
        probe = self.part(ProbeAttachment)
        return probe is not None and probe.first_pending()

    def hold_resume_times(self) -> None:
        """What a restart read again, or was written while the daemon was down, is as old as
        the file's last write then (ResumedBytes); not while a catch-up resumed from its
        checkpoint is read: its end dates what it held (a log quiet for days read as silent
        while being read stalled before the catch-up said whether it was news)."""
        if self.catching_up:
            return
        self.last_line_at = self.resumed_bytes.hold(self.pipe, self.follower.next_offset,
                                                    self.last_line_at)

    def check_resumed(self) -> None:
        """After new bytes or a tick: a stall that lines ended is said (see `Stalls`)."""
        if self.pipe is not None and self.stalls.over(self.pipe.state):
            self._on_events([])

    def end_catch_up(self) -> None:
        """Once the bytes before the attach offset are read: the held events that are news
        go to the owner, the attachments hear that the live part begins."""
        held = self.catchup.end(self.pipe, self.follower.next_offset)
        if held is None:
            return                  # not over (or no catch-up)
        for ev in self.catchup.held_crashes:   # a crash that had ended before is not counted
            if not self.catchup.ended_at_attach(ev.startup):
                count_crash(self.counters, ev)
        self.catchup.held_crashes = []
        mtime = self.catchup.attach_mtime
        if mtime is not None and self.last_line_at is not None:
            # what it held was written by the file's last write, not when we read it: the
            # log's silence counts from there (before, a log silent for 10 minutes read
            # "no new line for 1m00s" a minute after the attach, and the panel no age)
            self.last_line_at = min(self.last_line_at, mtime)
        self.eta.smoother = EtaSmoother()   # an ETA of the read time is not held to
        now = clock.now()
        for a in self.attachments:
            a.caught_up(now)
        if held:
            self.on_events_cb(self, held)

    def tick(self, now: float) -> None:
        """Stalls and crash settling (the machine's, through the follower), the attachments'
        ticks, the ETA's step, checkpoints.  The events go to the owner through
        `on_events` like those of new lines."""
        self.count_bytes()
        self.follower.tick(now)
        self.hold_resume_times()
        self.end_catch_up()
        self.check_resumed()
        self.catchup.lapse(self.pipe)    # a line since the silence at attach: it is over
        for a in self.attachments:
            a.tick(now)
        if self.pipe is not None:
            self.eta.step(self.pipe, now, dead=self.catchup.silent_since is not None)
        if self.checkpoints.due(time.monotonic(), self.follower.next_offset
                                if self.catching_up else None):
            self.checkpoint(durable=time.monotonic() >= self.checkpoints.next_durable)

    # -- reading (app/reading.py) ----------------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(reading.run(self), name=f"target:{self.name}")
        for a in self.attachments:
            a.start()

    def count_bytes(self) -> None:
        """Every byte of the log once (app/reading.py `count_bytes`)."""
        if reading.count_bytes(self.follower, self.counters):
            self.checkpoints.dirty = True

    def finish(self, now: float) -> None:
        """The source ended: the unfinished last line is a line, a crash is final."""
        self.follower.finish(now)

    def halt_reading(self) -> None:
        """Read no more (the daemon stops): what was read is decided and checkpointed by
        `stop`, the rest is read after the restart."""
        self.stop_reading = True
        if self.task is not None:
            self.task.cancel()

    async def stop(self) -> None:
        for a in reversed(self.attachments):   # last-first: see attachments/base.py
            try:
                await a.close()
            except Exception as e:  # noqa: BLE001 - the others still close
                self.log.warning("attachment did not close", error=repr(e))
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self.checkpoint(durable=True)

    def checkpoint(self, durable: bool = False) -> None:
        """Position and state to the store.  While a first attach catches up, with the
        catch-up as it stands (CatchUp.saved: its end, the events it holds): what the log
        held then is decided history or news at its end, and a restart goes on catching up
        from the checkpoint, not as if the rest were written live (a checkpoint 5 MB into a
        95 MB startup that crashed 3 days ago, then `kill -9`, read the other 90 MB as news
        and paged that crash); none where the catch-up cannot be said (CatchUp.resumable)."""
        if self.checkpoints.store is None or not self.catchup.resumable():
            return              # watch: no checkpoints
        self.count_bytes()
        self.checkpoints.write(self.follower, self.cfg.source, self.counters, self.last_line_at,
                               self.alert_marks(self.name) if self.alert_marks else {}, durable,
                               self.catchup.silent_since if self._silent_since_attach() else None,
                               self._kept(),
                               self.alert_pending(self.name) if self.alert_pending else None)

    def _kept(self) -> dict[str, dict[str, Any]]:
        """What the attachments keep across a daemon restart, by their `saved_as`."""
        kept = {}
        for a in self.attachments:
            name = getattr(a, "saved_as", "")
            doc = a.saved() if name else None
            if doc is not None:
                kept[name] = doc
        return kept

    # -- the view ------------------------------------------------------------------------------
    def view(self, now: float) -> TargetView:
        """What is known of the target at `now`; reading it changes nothing."""
        return build_view(self._base_view(now), self.pipe,
                          [*(a.view(now) for a in self.attachments),
                           self.eta.part(self.pipe, now) if self.pipe is not None else None])

    def _base_view(self, now: float) -> TargetView:
        """The loop's own part: the config, the source's state, the counters."""
        f = self.follower
        st, pos = f.status, f.position()
        return TargetView(
            name=self.name, engine="auto", source=self.cfg.display_source, kind=self.cfg.kind,
            labels=dict(self.cfg.labels), now=now, counters=copy_counters(self.counters),
            source_up=st.up, source_message=st.message, source_fatal=st.fatal,
            source_error=st.error or st.fatal, source_notice=st.notice, source_state=st.state,
            source_down_since=st.outage(now), offset=pos.offset if pos else None,
            line_number=pos.line_number if pos else None, last_line=f.last_line,
            last_line_at=self.last_line_at, started_at=self.started_at,
            checkpoint_age=self.position_age())

    def metrics_key(self, now: float) -> tuple[Any, ...]:
        """Changes whenever a series of this target but the `COUNTED` ones (lines, bytes,
        rule matches, serving values: read at every scrape) may have: its counts of faults,
        its events but serving updates, its source's state, an attachment's key (a GPU
        sample, a probe); while a startup runs, every 5 s (the ETA counts down).  /metrics
        renders the target again only then."""
        c, st, status = self.counters, self.follower.status, self.pipe.state if self.pipe else None
        keys: tuple[Hashable, ...] = tuple(a.key() for a in self.attachments)
        return (c.rotations, c.reconnects, c.bytes_skipped, c.source_losses, c.lines_cut,
                c.rule_errors, c.startups, self._events, id(self.pipe),
                status.phase if status is not None else None,
                status.stalled if status is not None else None,
                st.up, st.error, st.fatal, keys, sum(c.crashes.values()),
                int(now // 5) if self.starting() else None)

    def counts_crash(self, ev: CrashSettled) -> bool:
        """Whether the pipeline counts this settled crash now (`logwatch_crashes_total`): not
        while catching up (held: counted at its end if news), never the crash that had ended
        before logwatch attached (history: no page, so no `increase()` for a rule either;
        before, a target added with a 3-hour-old crash fired LogwatchServerCrashed)."""
        if self.catchup.catching_up:
            self.catchup.held_crashes.append(ev)
            return False
        return not self.catchup.ended_at_attach(ev.startup)

    def counts_took(self, ev: Ready) -> bool:
        """Whether a Ready's launch-to-ready is observed (`logwatch_startup_duration_seconds`):
        not one read while catching up from lines not all stamped, read at one moment (its
        `took` is the read time's, ~0; the ledger says `untimed`).  Before, a stamp-less log
        that got ready an hour before the attach added `_count 1 _sum 0.0`; nor the Ready,
        read live, of a startup so read (from the file's last write: `_sum 3604.9`).  A
        stamp-less startup watched live is timed by the read time, rightly: counted."""
        pipe, untimed = self.pipe, self.catchup.untimed_startup
        if untimed is not None and ev.startup == untimed:
            return False
        return not (self.catchup.catching_up and pipe is not None
                    and not pipe.state.timed_by_log)

    def starting(self) -> bool:
        """A startup is under way (not waiting, serving, crashed or stopped)."""
        pipe = self.pipe
        return pipe is not None and pipe.state.phase not in (WAITING, READY, CRASHED, STOPPED)

    def position_age(self) -> float:
        return self.checkpoints.age()

    def counted(self) -> Counted:
        """What /metrics reads of this target at every scrape (see `sinks.metrics.Counted`)."""
        pipe = self.pipe
        st = pipe.state if pipe is not None else None
        rules = self._rule_ids
        if pipe is not None and rules[0] is not pipe.pack:
            rules = self._rule_ids = (pipe.pack, tuple(r.id for r in pipe.pack.rules))
        return Counted(self.counters.lines, self.counters.bytes, self.counters.rule_matches,
                       rules[1] if pipe is not None else (),
                       current_stats(st, clock.now()) if st is not None and st.phase == READY
                       else None,
                       self.last_line_at)


TargetRunner = Target   # the name before the attachments (issue 33): kept for one release
