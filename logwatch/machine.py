"""The startup state machine: matched lines -> phases, epochs, progress, crash, ready, stall.

Pure: `StartupMachine.step(state, observation, now)` and `tick(state, now)` update `state`
in place and return the events that happened; no I/O, no clock of their own (`now` is the
wall clock of the caller, `Observation.log_time` the server's own timestamp if it had one).

Only the generic meaning of phases lives here; the engine knowledge comes from the pack:
* phases move forward in the pack's order; a marker of an earlier phase (another TP rank
  printing the same milestone late) changes nothing, a later one may skip phases;
* a rule with `reenter` may step back into an earlier phase while the current one is still
  empty (download bars after `Load weight begin`, before the first shard); a phase entered
  by a `provisional` rule is announced (PhaseChanged) only once confirmed (a later phase, its
  progress, a crash, PROVISIONAL_FOR seconds): a reenter before that takes its place, from
  the same moment, and the phases never flip back and forth;
* a restart marker starts a new epoch, unless the startup is still launching and has not
  printed that marker yet (vLLM prints a version line, then its args: one startup);
* a crash keeps collecting evidence after it began: the root-cause line is the exception
  line with the most specific reason (the first among equals, or the last of a chained
  exception), not the `Traceback` header, the engine's announcement or the trailing SIGQUIT;
  the reason is the most specific one found in cause lines, then announcements, then hints
  seen shortly before, then the pack's default for the phase it crashed in;
* tentative crash evidence (a bare traceback during startup) is retracted when a later
  phase marker shows the server carried on;
* serving stats lines are serving traffic only once the server is ready (SGLang's warmup
  request prints them before); in a log that shows no startup at all they mean ready;
* a startup is identified by the log itself, never by the clock: `StartupId` = the byte
  offset of its first line and a hash of that line, so a re-read after a restart, a `kill -9`
  or a lost checkpoint names the same startup, and alerts, history and counters keyed on it
  happen once;
* the machine owns crash settling: a crash is final (`CrashSettled`, once per startup) when
  its evidence has not changed for the pack's `crash_settle` seconds, when a new startup
  begins, or when the input ends (`settle`); a settled crash is never retracted or refined.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .rules.args import parse_args_line
from .rules.pack import (
    CRASHED, READY, SPECIFIC_RANK, STOPPED, TERMINAL, WAITING, Rule, RulePack, reason_rank,
)

HINT_WINDOW_LINES = 2000      # a hint this many lines before a crash still classifies it
RATE_SMOOTHING = 0.3          # EWMA weight of a new shard-rate sample
DEFAULT_STALL_AFTER = 300.0
PROVISIONAL_FOR = 2.0          # seconds a provisional phase waits to be replaced (wall clock)


@dataclass(slots=True)
class Observation:
    """A rule that fired on a line, as the machine sees it."""

    rule: Rule
    fields: dict[str, str]
    text: str
    line_number: int = 0
    log_time: float | None = None
    log_stamp: str | None = None
    own_time: bool = True      # False: log_time was carried forward from an earlier line
    offset: int = 0            # byte offset of the line's start in the log
    proc: str = ""             # the process a wrapper prefix named (compose service ...)


def startup_id_of(obs: Observation) -> str:
    """The identity of the startup whose first line is `obs`: `<hash of the line>@<offset>`.

    From the log alone (the line's bytes as framed, and where it is), so the same startup
    gets the same id whoever reads it, whenever: a daemon restarted after kill -9, a re-read
    after a lost checkpoint, `replay` of the same file."""
    h = hashlib.sha1(obs.text.encode("utf-8", "surrogatepass"), usedforsecurity=False)
    return f"{h.hexdigest()[:12]}@{obs.offset}"


# -- state --------------------------------------------------------------------------------------

@dataclass(slots=True)
class PhaseEntry:
    phase: str
    at: float                  # wall clock when observed
    log_time: float | None     # server timestamp when it had one
    log_stamp: str | None = None


def phase_left(typical: float, elapsed: float) -> float:
    """Seconds left in a phase that usually takes `typical` and has run for `elapsed`: it
    counts down to a tenth of `typical`, then grows by half of every further second (a phase
    running late is not about to end: the ETA grows in a stall instead of freezing)."""
    if typical <= 0:
        return 0.0             # nothing to scale by (a phase the history never saw)
    if elapsed <= 0.9 * typical:
        return typical - elapsed
    return 0.1 * typical + 0.5 * (elapsed - 0.9 * typical)


@dataclass(slots=True)
class ProgressState:
    """A named counter such as `shards`: k/N with a smoothed rate (items per second)."""

    current: int
    total: int
    rate: float | None = None
    updated_at: float = 0.0
    updated_log: float | None = None   # only when the frame had its own timestamp

    def remaining_seconds(self, now: float | None = None) -> float | None:
        """Seconds until the last item at the current rate, counted down since the last
        update; once the next item is late, it grows (phase_left): a stalled bar's
        ETA rises instead of sitting at 0."""
        if self.rate is None or self.rate <= 0 or self.total <= 0:
            return None
        left_items = max(self.total - self.current, 0)
        per = 1.0 / self.rate
        if now is None or left_items == 0:
            return left_items * per
        since = max(now - self.updated_at, 0.0)
        return (left_items - 1) * per + phase_left(per, since)


@dataclass(slots=True)
class Evidence:
    reason: str
    line: str
    line_number: int

    @property
    def rank(self) -> int:
        return reason_rank(self.reason)


@dataclass(slots=True)
class Crash:
    """What is known about a crash; refined while its traceback is still arriving."""

    reason: str
    during: str
    line: str
    line_number: int
    at: float
    log_time: float | None
    excerpt: list[str] = field(default_factory=list)
    confirmed: bool = False
    cause: Evidence | None = None
    marker: Evidence | None = None          # the first engine announcement
    marker_reason: Evidence | None = None   # the most specific announcement
    chain_pending: bool = False
    marker_tentative: bool = False          # the marker is a bare traceback header
    rank: str = ""                          # the rank whose line crashed first (`TP3`)

    def to_json(self) -> dict[str, object]:
        return {"reason": self.reason, "during": self.during, "line": self.line,
                "line_number": self.line_number, "at": self.at, "log_time": self.log_time,
                "excerpt": list(self.excerpt), "rank": self.rank}


@dataclass(slots=True)
class RankProgress:
    """How far one rank (`TP5`) got in this startup, from the phase markers it printed.

    `advances` holds (phase index, finished, time) each time it got further: a rank's
    position is (phase index, finished), and the others are compared with it (`rank_lag`).
    Times are the log's own clock when its line had one (rank-tagged lines do), else the
    wall clock, so a finished log read later still shows how long a rank was behind."""

    phase: str
    finished: bool
    at: float                  # when it got there
    advances: list[tuple[int, bool, float]] = field(default_factory=list)


@dataclass(slots=True)
class State:
    phase: str = WAITING
    epoch: int = 0
    startups: int = 0
    history: list[PhaseEntry] = field(default_factory=list)  # this epoch, in order
    restart_rules: set[str] = field(default_factory=set)  # restart markers of this epoch
    procs: set[str] = field(default_factory=set)  # processes (by prefix) launched in this epoch
    args: dict[str, Any] = field(default_factory=dict)  # the server's arguments (`args:` rules)
    args_partial: bool = False            # a line of them was cut: what was whole is kept
    progress: dict[str, ProgressState] = field(default_factory=dict)
    phase_progress: bool = False          # a progress event since the current phase began
    crash: Crash | None = None
    ready_line: str | None = None
    ready_at: float | None = None
    stats: dict[str, float] = field(default_factory=dict)
    hints: dict[str, Evidence] = field(default_factory=dict)
    last_activity: float | None = None
    last_log_time: float | None = None
    stalled: bool = False
    startup_id: str | None = None         # see startup_id_of (None before the first line)
    crash_settled: bool = False           # the crash is final (CrashSettled was emitted)
    crash_changed_at: float | None = None  # wall time its evidence last changed
    deferred: "PhaseChanged | None" = None  # the unannounced entry of a provisional phase
    endpoint: str | None = None           # the address the server said it listens on
    ranks: dict[str, RankProgress] = field(default_factory=dict)  # per rank tag, this startup

    @property
    def phases_seen(self) -> list[str]:
        out: list[str] = []
        for e in self.history:
            if e.phase not in out:
                out.append(e.phase)
        return out

    @property
    def phase_entered(self) -> PhaseEntry | None:
        return self.history[-1] if self.history else None

    def durations(self) -> dict[str, float]:
        """Seconds spent in each phase of this epoch (server clock if it has one)."""
        use_log = bool(self.history) and all(e.log_time is not None for e in self.history)
        out: dict[str, float] = {}
        for cur, nxt in zip(self.history, self.history[1:]):
            a = cur.log_time if use_log else cur.at
            b = nxt.log_time if use_log else nxt.at
            if a is not None and b is not None:
                out[cur.phase] = round(out.get(cur.phase, 0.0) + max(b - a, 0.0), 3)
        if self.history and self.phase not in (READY, *TERMINAL):
            cur = self.history[-1]
            a = cur.log_time if use_log else cur.at
            b = self.last_log_time if use_log else self.last_activity
            if a is not None and b is not None:
                out[cur.phase] = round(out.get(cur.phase, 0.0) + max(b - a, 0.0), 3)
        return out

    def epoch_start(self) -> PhaseEntry | None:
        return self.history[0] if self.history else None

    def ready_in(self) -> float | None:
        """Seconds from the startup's first line to ready (None unless ready after a startup
        that was seen: a log that begins while serving has no launch)."""
        start = self.epoch_start()
        if self.phase != READY or start is None or start.phase == READY or \
                self.history[-1].phase != READY:
            return None
        end = self.history[-1]
        return elapsed_since(start, end.at, end.log_time)


RANK_LAG_AFTER = 60.0   # seconds the other ranks must have been past a rank before it is named


@dataclass(frozen=True, slots=True)
class RankLag:
    """Ranks still at `phase` while every other rank got past it `for_seconds` ago."""

    ranks: tuple[str, ...]
    phase: str
    finished: bool             # they finished `phase` but went no further
    for_seconds: float
    others: int

    @property
    def text(self) -> str:
        """`TP5 still in cuda_graph 4m after the other 7 ranks finished it`."""
        from .units import fmt_duration
        who = ", ".join(self.ranks)
        where = f"at the end of {self.phase}" if self.finished else f"in {self.phase}"
        return (f"{who} still {where} {fmt_duration(self.for_seconds)} after the other "
                f"{self.others} rank{'s' if self.others != 1 else ''} "
                f"{'moved on' if self.finished else 'finished it'}")


def rank_clock(state: State, now: float) -> float:
    """Now on the clock rank times use: the log's (its last stamp, plus the wall time since
    its last line) when it has one."""
    if state.last_log_time is None:
        return now
    return state.last_log_time + max(0.0, now - (state.last_activity or now))


def rank_lag(ranks: dict[str, RankProgress], phase_index: Callable[[str], int], now: float,
             after: float = RANK_LAG_AFTER) -> RankLag | None:
    """The ranks that stayed behind: each other rank got past their position at least
    `after` seconds ago (`now` on `rank_clock`; a rank is never compared with ranks that never
    started).  The furthest-behind group is named when it is a minority (fewer than half the
    ranks): rank 0 alone prints some milestones (SGLang's autotune, the KV cache size), and
    the other ranks are then not behind it; None when all move together."""
    if len(ranks) < 2:
        return None
    pos = {r: (phase_index(p.phase), p.finished) for r, p in ranks.items()}
    behind = min(pos.values())
    stuck = sorted(r for r, p in pos.items() if p == behind)
    if 2 * len(stuck) >= len(ranks):
        return None
    passed_at = []
    for r, p in ranks.items():
        if pos[r] == behind:
            continue
        first = min((at for i, f, at in p.advances if (i, f) > behind), default=p.at)
        passed_at.append(first)
    since = now - max(passed_at)
    if since < after:
        return None
    p0 = ranks[stuck[0]]
    return RankLag(tuple(stuck), p0.phase, p0.finished, since, len(ranks) - len(stuck))


# -- events -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PhaseChanged:
    epoch: int
    old: str
    new: str
    at: float
    line: str
    startup: str | None         # the StartupId of the startup it belongs to


@dataclass(frozen=True, slots=True)
class StartupBegan:
    """A startup's first line (counted once per startup; `startup` is its StartupId)."""

    epoch: int
    startup: str
    line: str


@dataclass(frozen=True, slots=True)
class Restarted:
    """A new startup began in the same log (a crash of the one before has been settled
    just before, in the same list of events)."""

    epoch: int
    line: str
    startup: str | None = None


@dataclass(frozen=True, slots=True)
class Ready:
    epoch: int
    took: float | None
    slowest_phase: str | None
    line: str
    startup: str | None = None
    durations: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Crashed:
    epoch: int
    crash: Crash


@dataclass(frozen=True, slots=True)
class CrashSettled:
    """The crash of startup `startup` is final: alert it, count it, record it (once)."""

    epoch: int
    startup: str | None
    crash: Crash
    durations: dict[str, float]
    elapsed: float | None        # seconds from the startup's first line to the crash


@dataclass(frozen=True, slots=True)
class CrashUpdated:
    epoch: int
    crash: Crash


@dataclass(frozen=True, slots=True)
class CrashRetracted:
    epoch: int
    phase: str


@dataclass(frozen=True, slots=True)
class Stopped:
    epoch: int
    line: str


@dataclass(frozen=True, slots=True)
class Stalled:
    """A startup phase printed nothing for `silent_for` seconds (over its `budget`)."""

    epoch: int
    phase: str
    silent_for: float
    startup: str | None = None
    budget: float | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    epoch: int
    counter: str
    current: int
    total: int
    rate: float | None


@dataclass(frozen=True, slots=True)
class StatsUpdated:
    epoch: int
    values: dict[str, float]
    at: float | None = None      # the line's log time (else the wall clock): serving windows


Event = (PhaseChanged | StartupBegan | Restarted | Ready | Crashed | CrashUpdated | CrashSettled
         | CrashRetracted | Stopped | Stalled | Progress | StatsUpdated)


# -- the machine --------------------------------------------------------------------------------

_RATE = re.compile(r"^([\d.]+)\s*(s/|(?![KMGT]?i?B/s)[A-Za-z]*/s$)")   # not bytes/s


def parse_rate(text: str | None) -> float | None:
    """tqdm's rate field -> items per second, whatever tqdm's unit (`3.13it/s` -> 3.13,
    `10.19s/it` -> 0.098, `15.50profile/s`, `1.90s/file`)."""
    if not text:
        return None
    m = _RATE.match(text.strip())
    if m is None:
        return None
    v = float(m.group(1))
    if m.group(2) == "s/":          # seconds per item
        return 1.0 / v if v > 0 else None
    return v


class StartupMachine:
    def __init__(self, pack: RulePack, stall_after: float | dict[str, float] | None = None) -> None:
        self.pack = pack
        self.stall_after = stall_after
        self._startup = set(pack.startup_phases)

    # -- public API -------------------------------------------------------------------------
    def note_activity(self, state: State, now: float) -> None:
        """New bytes arrived (any line, matched or not): the log is alive."""
        state.last_activity = now
        state.stalled = False

    def step(self, state: State, obs: Observation, now: float) -> list[Event]:
        rule = obs.rule
        if obs.log_time is not None:
            state.last_log_time = obs.log_time
        events: list[Event] = []
        if state.deferred is not None and self._confirms(state, rule):
            events.append(state.deferred)
            state.deferred = None
        if rule.restart:
            self._restart(state, obs, now, events)
        if rule.args:
            parsed = parse_args_line(obs.text)
            if parsed is not None and parsed.values:
                # a new dict (never mutated in place): readers compare it by identity; a
                # launch command line first, the server's own dump after it wins
                state.args = {**state.args, **parsed.values}
                state.args_partial = state.args_partial or parsed.partial
        if rule.endpoint and obs.fields.get("url"):
            state.endpoint = obs.fields["url"]
        if self.pack.ranks and rule.phase and state.phase not in TERMINAL:
            self._rank(state, obs, now)
        if state.phase == CRASHED:
            self._while_crashed(state, obs, now, events)
            return events
        if state.phase == STOPPED:
            return events
        if rule.when is not None and state.phase not in rule.when:
            return events
        if rule.stop:
            self._enter(state, STOPPED, obs, now, events)
            events.append(Stopped(state.epoch, obs.text))
            return events
        if rule.crash:
            self._crash(state, obs, now, events)
            return events
        if rule.hint:
            ev = Evidence(rule.hint, obs.text, obs.line_number)
            state.hints.setdefault(rule.hint, ev)
        if rule.phase:
            self._advance(state, rule, obs, now, events)
        if rule.progress:
            self._progress(state, rule.progress, obs, now, events)
        if rule.stats:
            self._stats(state, obs, now, events)
        return events

    def _confirms(self, state: State, rule: Rule) -> bool:
        """Does this rule make the provisional phase real (anything but the same phase's
        marker from another rank, or an earlier phase's reenter that replaces it)?"""
        if rule.restart or rule.crash or rule.stop:
            return True
        if rule.progress and not (rule.phase and rule.reenter):
            return True
        if rule.phase is None:
            return False
        return self.pack.phase_index(rule.phase) > self.pack.phase_index(state.phase)

    def tick(self, state: State, now: float) -> list[Event]:
        """Time passed: a crash whose evidence stopped changing settles; a startup phase
        silent too long is stalled; a provisional phase nothing replaced is announced."""
        if state.deferred is not None and now - state.deferred.at >= PROVISIONAL_FOR:
            ev, state.deferred = state.deferred, None
            return [ev, *self.tick(state, now)]
        if state.phase == CRASHED and not state.crash_settled:
            changed = state.crash_changed_at
            if changed is None or now - changed >= self.pack.crash_settle:
                return self.settle(state)
            return []
        if state.stalled or state.phase not in self._startup or state.last_activity is None:
            return []
        budget = self.stall_budget(state.phase)
        silent = now - state.last_activity
        if silent >= budget:
            state.stalled = True
            return [Stalled(state.epoch, state.phase, silent, state.startup_id, budget)]
        return []

    def settle(self, state: State) -> list[Event]:
        """Make the current crash final now (the input ended, or a new startup begins)."""
        if state.phase != CRASHED or state.crash is None or state.crash_settled:
            return []
        state.crash_settled = True
        start = state.epoch_start()
        return [CrashSettled(state.epoch, state.startup_id, state.crash, state.durations(),
                             crash_elapsed(state.crash, start))]

    def stall_budget(self, phase: str) -> float:
        """Seconds of silence that make `phase` stalled: the target's setting (one value or
        per phase), else the pack's per-phase default."""
        if isinstance(self.stall_after, dict):
            if phase in self.stall_after:
                return self.stall_after[phase]
        elif self.stall_after is not None:
            return self.stall_after
        return self.pack.stall_after.get(phase, DEFAULT_STALL_AFTER)

    # -- transitions ------------------------------------------------------------------------
    def _entry(self, phase: str, obs: Observation, now: float) -> PhaseEntry:
        return PhaseEntry(phase, now, obs.log_time, obs.log_stamp)

    def _enter(self, state: State, phase: str, obs: Observation, now: float,
               events: list[Event]) -> None:
        old = state.phase
        if old == WAITING and state.startup_id is None:
            state.startup_id = startup_id_of(obs)
        if old == WAITING and phase != READY and phase not in TERMINAL and state.epoch == 0:
            state.epoch = 1
            state.startups += 1
            events.append(StartupBegan(state.epoch, state.startup_id, obs.text))  # type: ignore[arg-type]
        state.phase = phase
        state.phase_progress = False
        state.history.append(self._entry(phase, obs, now))
        events.append(PhaseChanged(state.epoch, old, phase, now, obs.text, state.startup_id))

    def _restart(self, state: State, obs: Observation, now: float, events: list[Event]) -> None:
        rid = obs.rule.id
        if obs.proc and state.procs and obs.proc not in state.procs:
            # another process of the same launch in one stream (prefill + decode servers of
            # one compose file): it joins this startup; its own restart is a new epoch
            state.procs.add(obs.proc)
            return
        if state.phase == WAITING or (state.phase == self._first_phase()
                                      and rid not in state.restart_rules):
            # the first args dump / version line of a startup that is still launching (a
            # launch prints several kinds: vLLM's version line, then its args)
            state.restart_rules.add(rid)
            if obs.proc:
                state.procs.add(obs.proc)
            if state.phase == WAITING:
                self._enter(state, self._first_phase(), obs, now, events)
            return
        # a new startup in the same log: the crash of the one before is final now
        events.extend(self.settle(state))
        startups, epoch = state.startups, state.epoch
        fresh = State(epoch=epoch + 1, startups=startups + 1, restart_rules={rid},
                      procs={obs.proc} if obs.proc else set(),
                      last_activity=state.last_activity, last_log_time=state.last_log_time,
                      startup_id=startup_id_of(obs))
        for slot in State.__slots__:  # type: ignore[attr-defined]
            setattr(state, slot, getattr(fresh, slot))
        state.history.append(self._entry(self._first_phase(), obs, now))
        state.phase = self._first_phase()
        sid = state.startup_id
        events.append(StartupBegan(state.epoch, sid, obs.text))  # type: ignore[arg-type]
        events.append(Restarted(state.epoch, obs.text, sid))
        events.append(PhaseChanged(state.epoch, WAITING, state.phase, now, obs.text, sid))

    def _rank(self, state: State, obs: Observation, now: float) -> None:
        """Per rank, how far it got: the phase of its latest marker (only forward)."""
        rank = self.pack.rank_of(obs.text)
        rule = obs.rule
        if not rank or rule.phase is None:
            return
        now = obs.log_time if obs.log_time is not None and obs.own_time else now
        pos = (self.pack.phase_index(rule.phase), rule.finishes)
        rp = state.ranks.get(rank)
        if rp is None:
            state.ranks[rank] = RankProgress(rule.phase, rule.finishes, now,
                                             [(pos[0], pos[1], now)])
            return
        if pos > (self.pack.phase_index(rp.phase), rp.finished):
            rp.phase, rp.finished, rp.at = rule.phase, rule.finishes, now
            rp.advances.append((pos[0], pos[1], now))

    def _first_phase(self) -> str:
        return self.pack.phases[0]

    def _advance(self, state: State, rule: Rule, obs: Observation, now: float,
                 events: list[Event]) -> None:
        target = rule.phase
        assert target is not None
        cur_i = self.pack.phase_index(state.phase)
        new_i = self.pack.phase_index(target)
        if new_i > cur_i:
            self._enter(state, target, obs, now, events)
            if rule.provisional and events and isinstance(events[-1], PhaseChanged):
                state.deferred = events.pop()     # announced once confirmed (or replaced)
            if target == READY:
                self._ready(state, obs, now, events)
        elif new_i < cur_i and rule.reenter and state.deferred is not None:
            # the provisional phase is replaced by this earlier one, from the same moment:
            # announced once, as the phase the startup went into
            e, old = state.history[-1], state.deferred.old
            state.history[-1] = PhaseEntry(target, e.at, e.log_time, e.log_stamp)
            state.phase, state.phase_progress = target, False
            d, state.deferred = state.deferred, None
            events.append(PhaseChanged(state.epoch, old, target, d.at, d.line, state.startup_id))
        elif new_i < cur_i and rule.reenter and not state.phase_progress and state.phase != READY:
            # the current phase was entered too early and is still empty: correct it
            if state.history and state.history[-1].phase == state.phase and \
                    sum(1 for e in state.history if e.phase == state.phase) == 1:
                state.history.pop()
            old = state.phase
            state.phase = target
            state.phase_progress = False
            state.history.append(self._entry(target, obs, now))
            events.append(PhaseChanged(state.epoch, old, target, now, obs.text, state.startup_id))

    def _ready(self, state: State, obs: Observation, now: float, events: list[Event]) -> None:
        state.ready_line = obs.text
        state.ready_at = now
        took = state.ready_in()
        durations = state.durations()
        slowest = max(durations, key=lambda p: durations[p]) if durations else None
        state.stalled = False
        events.append(Ready(state.epoch, took, slowest, obs.text, state.startup_id, durations))

    def _progress(self, state: State, name: str, obs: Observation, now: float,
                  events: list[Event]) -> None:
        if state.phase == READY:
            return  # e.g. a LoRA or weight update after startup: not startup progress
        try:
            cur = int(obs.fields["current"])
            total = int(obs.fields["total"])
        except (KeyError, ValueError):
            return
        prev = state.progress.get(name)
        rate = parse_rate(obs.fields.get("rate"))
        own_log = obs.log_time if obs.own_time else None
        if rate is None and prev is not None and cur > prev.current:
            if own_log is not None and prev.updated_log is not None:
                dt = own_log - prev.updated_log
            else:
                dt = now - prev.updated_at
            if dt > 0:
                rate = (cur - prev.current) / dt
        if rate is not None and prev is not None and prev.rate is not None and prev.total == total:
            rate = RATE_SMOOTHING * rate + (1 - RATE_SMOOTHING) * prev.rate
        state.progress[name] = ProgressState(cur, total, rate if rate is not None else
                                             (prev.rate if prev and prev.total == total else None),
                                             now, own_log)
        state.phase_progress = True
        events.append(Progress(state.epoch, name, cur, total, state.progress[name].rate))

    def _stats(self, state: State, obs: Observation, now: float, events: list[Event]) -> None:
        if state.phase == WAITING:
            # a log that starts while the server is already serving
            self._enter(state, READY, obs, now, events)
            self._ready(state, obs, now, events)
        if state.phase != READY:
            return  # warmup batches before ready are not serving traffic
        values: dict[str, float] = {}
        scale = obs.rule.scale
        for k, v in obs.fields.items():
            if v == "True" or v == "False":   # a flag of the batch (SGLang's `cuda graph:`)
                values[k] = 1.0 if v == "True" else 0.0
                continue
            try:
                x = float(v)   # (a number without `%`: most values, no copy made)
            except ValueError:
                try:
                    x = float(v.rstrip("%"))
                except ValueError:
                    continue
            values[k] = x * scale[k] if scale and k in scale else x
        if values:
            state.stats.update(values)
            events.append(StatsUpdated(state.epoch, values,
                                       obs.log_time if obs.log_time is not None else now))

    # -- crashes ----------------------------------------------------------------------------
    def _crash(self, state: State, obs: Observation, now: float, events: list[Event]) -> None:
        rule = obs.rule
        assert rule.crash is not None
        during = state.phase
        crash = Crash(reason=rule.crash, during=during, line=obs.text.rstrip(),
                      line_number=obs.line_number, at=now, log_time=obs.log_time)
        self._enter(state, CRASHED, obs, now, events)
        state.crash = crash
        state.crash_settled = False
        state.crash_changed_at = now
        self._evidence(state, crash, rule, rule.crash, obs)
        crash.rank = self.pack.rank_of(obs.text) if self.pack.ranks else ""
        events.append(Crashed(state.epoch, crash))

    def _while_crashed(self, state: State, obs: Observation, now: float,
                       events: list[Event]) -> None:
        crash = state.crash
        rule = obs.rule
        if crash is None or state.crash_settled:
            return  # a settled crash is final: alerted and counted as it was
        if rule.chain:
            crash.chain_pending = True
            return
        if rule.crash or rule.hint:
            if not crash.rank and self.pack.ranks:   # the first crash line had no rank tag
                crash.rank = self.pack.rank_of(obs.text)
            before = (crash.reason, crash.line, crash.confirmed)
            self._evidence(state, crash, rule, rule.crash or rule.hint, obs)  # type: ignore[arg-type]
            if (crash.reason, crash.line, crash.confirmed) != before:
                state.crash_changed_at = now
                events.append(CrashUpdated(state.epoch, crash))
            return
        if crash.confirmed or not rule.phase or rule.phase == crash.during:
            return
        if self.pack.phase_index(rule.phase) > self.pack.phase_index(crash.during):
            # the startup carried on: the traceback was not fatal
            state.crash = None
            state.crash_changed_at = None
            state.history = [e for e in state.history if e.phase != CRASHED]
            state.phase = crash.during
            events.append(CrashRetracted(state.epoch, crash.during))
            self._advance(state, rule, obs, now, events)

    def _evidence(self, state: State, crash: Crash, rule: Rule, reason: str,
                  obs: Observation) -> None:
        ev = Evidence(reason, obs.text.rstrip(), obs.line_number)
        if rule.hint:
            state.hints.setdefault(reason, ev)
        elif rule.marker:
            if crash.marker is None or (crash.marker_tentative and not rule.tentative):
                # the first announcement; an engine's own one replaces a bare `Traceback`
                crash.marker, crash.marker_reason = ev, ev
                crash.marker_tentative = rule.tentative
            elif crash.marker_reason is None or ev.rank > crash.marker_reason.rank:
                crash.marker_reason = ev
        else:
            best = crash.cause
            if best is None or ev.rank > best.rank or (ev.rank == best.rank and crash.chain_pending):
                crash.cause = ev
            crash.chain_pending = False
        if rule.crash and (not rule.tentative or reason_rank(reason) == SPECIFIC_RANK):
            crash.confirmed = True
        crash.reason = self._reason(state, crash)
        line = crash.cause or crash.marker
        if line is not None:
            crash.line, crash.line_number = line.line, line.line_number

    def _reason(self, state: State, crash: Crash) -> str:
        if crash.cause is not None and crash.cause.rank == SPECIFIC_RANK:
            return crash.cause.reason
        if crash.marker_reason is not None and crash.marker_reason.rank == SPECIFIC_RANK:
            return crash.marker_reason.reason
        first_line = min(e.line_number for e in (crash.cause, crash.marker) if e is not None) \
            if (crash.cause or crash.marker) else 0
        hints = [h for h in state.hints.values()
                 if h.rank == SPECIFIC_RANK and first_line - h.line_number <= HINT_WINDOW_LINES]
        if hints:
            return min(hints, key=lambda h: h.line_number).reason
        by_phase = self.pack.crash_by_phase.get(crash.during)
        if by_phase:
            return by_phase
        generic = [e for e in (crash.cause, crash.marker_reason) if e is not None]
        if crash.cause is not None and crash.marker_reason is not None and \
                crash.cause.line_number == crash.marker_reason.line_number:
            # the exception line IS the engine's announcement ("RuntimeError: Rank 0
            # scheduler died during initialization"): the announcement says more
            return crash.marker_reason.reason
        return max(generic, key=lambda e: e.rank).reason if generic else "unknown"


def elapsed_since(start: PhaseEntry | None, at: float, log_time: float | None) -> float | None:
    """Seconds from the startup's first line to a moment seen at `at` (wall) / `log_time`
    (server clock, used when both have one)."""
    if start is None:
        return None
    if start.log_time is not None and log_time is not None:
        return max(log_time - start.log_time, 0.0)
    return max(at - start.at, 0.0)


def crash_elapsed(crash: Crash, start: PhaseEntry | None) -> float | None:
    """Seconds from the startup's first line to the crash (server clock when it has one)."""
    return elapsed_since(start, crash.at, crash.log_time)


# -- checkpoints --------------------------------------------------------------------------------

def state_to_json(state: State) -> dict[str, object]:
    """The whole machine state as JSON (a daemon restart continues from it)."""
    import dataclasses

    def conv(v: object) -> object:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, dict):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, set):
            return sorted(v)  # type: ignore[type-var]
        return v

    return conv(state)  # type: ignore[return-value]


def state_from_json(d: dict[str, object]) -> State:
    def ev(x: object) -> Evidence | None:
        return Evidence(**x) if isinstance(x, dict) else None  # type: ignore[arg-type]

    crash = None
    c = d.get("crash")
    if isinstance(c, dict):
        crash = Crash(**{**c, "cause": ev(c.get("cause")), "marker": ev(c.get("marker")),  # type: ignore[arg-type]
                         "marker_reason": ev(c.get("marker_reason")),
                         "excerpt": list(c.get("excerpt") or [])})
    st = State(
        phase=str(d.get("phase", WAITING)), epoch=int(d.get("epoch", 0)),  # type: ignore[arg-type]
        startups=int(d.get("startups", 0)),  # type: ignore[arg-type]
        history=[PhaseEntry(**e) for e in d.get("history", [])],  # type: ignore[arg-type, union-attr]
        restart_rules=set(d.get("restart_rules", [])),  # type: ignore[arg-type]
        procs=set(d.get("procs", [])),  # type: ignore[arg-type]
        args=dict(d.get("args") or {}),  # type: ignore[call-overload]
        args_partial=bool(d.get("args_partial", False)),
        progress={k: ProgressState(**v) for k, v in (d.get("progress") or {}).items()},  # type: ignore[union-attr, arg-type]
        phase_progress=bool(d.get("phase_progress", False)), crash=crash,
        ready_line=d.get("ready_line"), ready_at=d.get("ready_at"),  # type: ignore[arg-type]
        stats={k: float(v) for k, v in (d.get("stats") or {}).items()},  # type: ignore[union-attr]
        hints={k: Evidence(**v) for k, v in (d.get("hints") or {}).items()},  # type: ignore[union-attr, arg-type]
        last_activity=d.get("last_activity"), last_log_time=d.get("last_log_time"),  # type: ignore[arg-type]
        stalled=bool(d.get("stalled", False)),
        startup_id=d.get("startup_id"),  # type: ignore[arg-type]
        crash_settled=bool(d.get("crash_settled", False)),
        crash_changed_at=d.get("crash_changed_at"),  # type: ignore[arg-type]
        endpoint=d.get("endpoint"),  # type: ignore[arg-type]
        ranks={str(k): RankProgress(v["phase"], bool(v["finished"]), float(v["at"]),  # type: ignore[index]
                                    [(int(a), bool(b), float(c))
                                     for a, b, c in v.get("advances") or []])  # type: ignore[union-attr]
               for k, v in (d.get("ranks") or {}).items()},  # type: ignore[union-attr]
    )
    return st
