"""One target of the daemon: its source, follower, pipeline, counters and checkpoints.

A target runs as one asyncio task that only reads its source and feeds the pipeline; the
daemon's ticker calls `tick()` for stalls, crash settling and checkpoints.  A checkpoint
holds the read position together with the machine state and the counters, written at the
same moment, so a restarted daemon (even after kill -9) continues with the phase and the
counters it had, and counts no line twice.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import log
from .config import TargetConfig
from .follow import Follower
from .history import StartupHistory, startup_eta
from .machine import (
    Crashed, CrashRetracted, CrashUpdated, Event, Ready, Restarted, State, state_from_json,
    state_to_json,
)
from .pipeline import LogPipeline
from .positions import PositionStore
from .rulepack import CRASH_REASONS, CRASHED, RulePack, load_pack
from .sources import Opened, SourceState, make_source
from .sources.ssh import SSHPool

BATCH_INTERVAL = 0.1        # the daemon reads a growing local log at most 10 times a second
CRASH_SETTLE = 5.0          # a crash is final (counted, recorded) this long after its last update
DURABLE_EVERY = 30.0        # fsync checkpoints this often (each write is atomic anyway)
DURATION_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
                    5400.0, 7200.0, 10800.0)


@dataclass
class Counters:
    """Monotonic counters of one target (persisted in its checkpoint)."""

    lines: int = 0
    bytes: int = 0
    rule_matches: dict[str, int] = field(default_factory=dict)
    crashes: dict[str, int] = field(default_factory=lambda: {r: 0 for r in CRASH_REASONS})
    startups: int = 0
    reconnects: int = 0
    rotations: int = 0
    lines_cut: int = 0
    rule_errors: int = 0
    duration_buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    duration_sum: float = 0.0
    duration_count: int = 0
    crash_counted: str = ""      # the startup whose crash was counted last (count it once)
    bytes_until: int = 0         # offset in the current file up to which bytes are counted

    def observe_duration(self, secs: float) -> None:
        for i, b in enumerate(DURATION_BUCKETS):
            if secs <= b:
                self.duration_buckets[i] += 1
                break
        else:
            self.duration_buckets[-1] += 1
        self.duration_sum += secs
        self.duration_count += 1

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Counters":
        c = cls()
        for k, v in d.items():
            if hasattr(c, k):
                setattr(c, k, v)
        for r in CRASH_REASONS:
            c.crashes.setdefault(r, 0)
        if len(c.duration_buckets) != len(DURATION_BUCKETS) + 1:
            c.duration_buckets = [0] * (len(DURATION_BUCKETS) + 1)
        return c


class TargetRunner:
    def __init__(self, cfg: TargetConfig, *, store: PositionStore, state_dir: Any,
                 candidates: list[RulePack], start_pack: RulePack, pool: SSHPool,
                 on_events: Callable[["TargetRunner", list[Event]], None] | None = None,
                 checkpoint_interval: float = 5.0) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.store = store
        self.candidates = candidates
        self.start_pack = start_pack
        self.pool = pool
        self.on_events_cb = on_events or (lambda r, e: None)
        self.checkpoint_interval = checkpoint_interval
        self.history = StartupHistory(state_dir, cfg.name, cfg.labels.get("model", ""))
        self.log = log.get("target").bind(target=cfg.name)
        self.counters = Counters()
        self.task: asyncio.Task[None] | None = None
        self.follower: Follower | None = None
        self.pending_crash_until: float | None = None
        self.last_checkpoint = 0.0
        self.last_durable = 0.0
        self.dirty = False
        self.started_at = time.time()
        self.last_line_at: float | None = None
        self.restored_state: State | None = None
        self._counted_lines = 0
        self._counted_cut = 0
        self._counted_errors = 0
        self._counted_matches: dict[str, int] = {}
        self._seen_startups = 0
        self._setup()

    # -- setup ---------------------------------------------------------------------------------
    def _setup(self) -> None:
        position, extra = self.store.load(self.name)
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
        if isinstance(extra.get("last_line_at"), (int, float)):
            self.last_line_at = float(extra["last_line_at"])
        if extra.get("state") and pack is not None and position is not None:
            try:
                self.restored_state = state_from_json(extra["state"])
            except (TypeError, ValueError, KeyError) as e:
                self.log.warning("saved machine state unreadable: phase starts over", error=str(e))
        if self.restored_state is None:
            position = None if extra.get("state") is None and position is not None and pack is None \
                else position
        source = make_source(self.cfg.source, pack=None if self.cfg.from_start else self.start_pack,
                             start=position, ssh=self.cfg.ssh, pool=self.pool, poll=self.cfg.poll,
                             name=self.name, batch_interval=BATCH_INTERVAL)
        self.follower = Follower(self.name, source, self._new_pipeline, pack, self.candidates,
                                 on_events=self._on_events)

    def _new_pipeline(self, pack: RulePack) -> LogPipeline:
        pipe = LogPipeline(pack, stall_after=self.cfg.stall_after)
        self._counted_lines, self._counted_cut, self._counted_matches = 0, 0, {}
        self._counted_errors = 0
        if self.restored_state is not None:
            pipe.state = self.restored_state
            self._seen_startups = self.restored_state.startups
            if pipe.state.phase == CRASHED:  # counted before the restart? (_settle_crash knows)
                self.pending_crash_until = time.monotonic() + CRASH_SETTLE
            self.restored_state = None
        else:
            self._seen_startups = 0
        return pipe

    @property
    def pipe(self) -> LogPipeline | None:
        return self.follower.pipe if self.follower else None

    @property
    def engine(self) -> str:
        return self.pipe.pack.name if self.pipe else "auto"

    # -- running -------------------------------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"target:{self.name}")

    async def _run(self) -> None:
        assert self.follower is not None
        src = self.follower.source
        try:
            async for ev in src.events():
                if isinstance(ev, Opened) and ev.reason != "resume" and \
                        (ev.new_file or ev.offset < self.counters.bytes_until):
                    self._sync_counters()
                    self.counters.bytes_until = ev.offset  # another file: count from here
                was_up = self.follower.status.up
                self.follower.handle(ev)
                if isinstance(ev, SourceState):
                    if was_up and not ev.up:
                        self.counters.reconnects += 1
                    level = "warning" if not ev.up else "info"
                    getattr(self.log, level)("source", up=ev.up, message=ev.message)
                    if ev.fatal:
                        return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one target's failure never stops the others
            self.log.exception("target failed", error=repr(e))
            self.follower.status.up = False
            self.follower.status.message = f"failed: {e!r}"
        finally:
            await src.close()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self.pending_crash_until is not None:
            self._settle_crash()
        self.checkpoint(durable=True)

    def _sync_counters(self) -> None:
        f = self.follower
        assert f is not None
        pipe = f.pipe
        if pipe is not None:
            lines = pipe.counters.lines
            if lines != self._counted_lines:
                self.counters.lines += lines - self._counted_lines
                self._counted_lines = lines
                self.last_line_at = time.time()
                self.dirty = True
            if pipe.counters.rule_errors != self._counted_errors:
                self.counters.rule_errors += pipe.counters.rule_errors - self._counted_errors
                self._counted_errors = pipe.counters.rule_errors
            if pipe.lines_cut != self._counted_cut:
                self.counters.lines_cut += pipe.lines_cut - self._counted_cut
                self._counted_cut = pipe.lines_cut
            for rid, n in pipe.rule_matches.items():
                seen = self._counted_matches.get(rid, 0)
                if n != seen:
                    self.counters.rule_matches[rid] = self.counters.rule_matches.get(rid, 0) + n - seen
                    self._counted_matches[rid] = n
        # every byte of the log once: bytes read again after a restart (the unfinished line
        # after the saved position) are below `bytes_until` and not counted twice
        if f.next_offset is not None and f.next_offset > self.counters.bytes_until:
            self.counters.bytes += f.next_offset - self.counters.bytes_until
            self.counters.bytes_until = f.next_offset
        self.counters.rotations = max(self.counters.rotations, f.status.files - 1)

    def _on_events(self, events: list[Event]) -> None:
        self.dirty = True
        pipe = self.pipe
        for ev in events:
            if isinstance(ev, Restarted):
                self._end_of_startup(ev)
            elif isinstance(ev, (Crashed, CrashUpdated)):
                self.pending_crash_until = time.monotonic() + CRASH_SETTLE
            elif isinstance(ev, CrashRetracted):
                self.pending_crash_until = None
            elif isinstance(ev, Ready) and pipe is not None:
                if ev.took is not None:
                    self.counters.observe_duration(ev.took)
                self.history.record(pipe.state, "ready")
        if pipe is not None and pipe.state.startups > self._seen_startups:
            self.counters.startups += pipe.state.startups - self._seen_startups
            self._seen_startups = pipe.state.startups
        self.on_events_cb(self, events)

    def _startup_key(self) -> str:
        st = self.pipe.state if self.pipe else None
        first = st.history[0].at if st and st.history else 0.0
        return f"{st.epoch if st else 0}@{first:.3f}"

    def _end_of_startup(self, ev: Restarted) -> None:
        """A new startup began: count the crash of the one before if it was not yet."""
        self.pending_crash_until = None
        prev = ev.previous
        if prev is None or prev.phase != CRASHED or prev.crash is None:
            return
        key = f"{prev.epoch}@{prev.started_at or 0.0:.3f}"
        if self.counters.crash_counted == key:
            return
        self.counters.crash_counted = key
        reason = prev.crash.reason
        self.counters.crashes[reason] = self.counters.crashes.get(reason, 0) + 1
        self.history.record_durations(prev.durations, "crashed")
        self.dirty = True

    def _settle_crash(self) -> None:
        """Count and record a crash once its evidence stopped changing (once per startup,
        also when the daemon stops or restarts while it was settling)."""
        pipe = self.pipe
        self.pending_crash_until = None
        if pipe is None or pipe.state.phase != CRASHED or pipe.state.crash is None:
            return
        key = self._startup_key()
        if self.counters.crash_counted == key:
            return
        self.counters.crash_counted = key
        reason = pipe.state.crash.reason
        self.counters.crashes[reason] = self.counters.crashes.get(reason, 0) + 1
        self.history.record(pipe.state, "crashed")
        self.dirty = True

    def tick(self, now: float) -> list[Event]:
        self._sync_counters()
        events: list[Event] = []
        if self.follower is not None:
            events = self.follower.tick(now)
        if self.pending_crash_until is not None and time.monotonic() >= self.pending_crash_until:
            self._settle_crash()
        wall = time.monotonic()
        if self.dirty and wall - self.last_checkpoint >= self.checkpoint_interval:
            self.checkpoint(durable=wall - self.last_durable >= DURABLE_EVERY)
        return events

    def checkpoint(self, durable: bool = False) -> None:
        f = self.follower
        if f is None or f.pipe is None:
            return
        pos = f.position()
        if pos is None:
            return
        self._sync_counters()
        extra = {"source": self.cfg.source, "pack": f.pipe.pack.name,
                 "last_line_at": self.last_line_at,
                 "state": state_to_json(f.pipe.state), "counters": self.counters.to_json(),
                 "saved_at": time.time()}
        try:
            self.store.save(self.name, pos, extra, durable=durable)
        except OSError as e:
            self.log.error("cannot save the checkpoint", error=str(e))
            return
        now = time.monotonic()
        self.last_checkpoint = now
        if durable:
            self.last_durable = now
        self.dirty = False

    # -- views ---------------------------------------------------------------------------------
    def _previous_startup(self, st: State) -> dict[str, Any] | None:
        """The last finished startup before the current one (for the page's timeline)."""
        recs = self.history.records
        if not recs:
            return None
        finished_now = st.phase in ("ready", CRASHED) and st.history and \
            recs[-1].at >= st.history[0].at
        if finished_now:
            return recs[-2].to_json() if len(recs) > 1 else None
        return recs[-1].to_json()

    def eta(self, now: float) -> float:
        pipe = self.pipe
        if pipe is None:
            return float("nan")
        return startup_eta(pipe.pack, pipe.state, now, self.history.typical())

    def status_json(self, now: float) -> dict[str, Any]:
        f = self.follower
        pipe = self.pipe
        st = pipe.state if pipe else State()
        entered = st.phase_entered
        shards = st.progress.get("shards")
        eta = self.eta(now)
        pos = f.position() if f else None
        return {
            "name": self.name,
            "engine": self.engine,
            "source": self.cfg.source,
            "labels": dict(self.cfg.labels),
            "phase": st.phase,
            "epoch": st.epoch,
            "startups": self.counters.startups,
            "phase_entered_at": entered.at if entered else None,
            "in_phase_seconds": round(now - entered.at, 3) if entered else None,
            "phases_seen": st.phases_seen,
            "durations": st.durations(),
            "progress": {k: {"current": p.current, "total": p.total,
                             "rate": p.rate, "eta_seconds": p.remaining_seconds(now)}
                         for k, p in st.progress.items()},
            "shards": {"loaded": shards.current, "total": shards.total} if shards else None,
            "eta_seconds": None if eta != eta else round(eta, 1),
            "ready_line": st.ready_line,
            "crash": st.crash.to_json() if st.crash else None,
            "stalled": st.stalled,
            "stats": dict(st.stats),
            "history": [r.to_json() for r in self.history.records[-5:]],
            "previous_startup": self._previous_startup(st),
            "source_state": {"up": f.status.up if f else False,
                             "message": f.status.message if f else "",
                             "reconnects": self.counters.reconnects,
                             "offset": pos.offset if pos else None,
                             "line_number": pos.line_number if pos else None},
            "last_line": f.last_line if f else "",
            "last_line_at": self.last_line_at,
            "lines": self.counters.lines,
        }
