"""The machine's state: what one log has shown so far about its current startup.

Dataclasses only (plus the startup's identity and its elapsed times): `StartupMachine`
(startup.py) is the only writer; readers (the view, the ledger, the history) copy from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..rules.pack import CRASHED, READY, STOPPED, TERMINAL, WAITING, Rule, reason_rank
from .ranks import RankProgress
from .rates import ProgressState


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
    cut: bool = False          # read before its end (`pipeline.cut_figures`): a rate is not
                               # measured from it


def startup_id_of(obs: Observation) -> str:
    """The identity of the startup whose first line is `obs`: `<hash of the line>@<offset>`.

    From the log alone (the line's bytes as framed, and where it is), so the same startup
    gets the same id whoever reads it, whenever: a daemon restarted after kill -9, a re-read
    after a lost checkpoint, `replay` of the same file."""
    h = hashlib.sha1(obs.text.encode("utf-8", "surrogatepass"), usedforsecurity=False)
    return f"{h.hexdigest()[:12]}@{obs.offset}"


# -- state --------------------------------------------------------------------------------------

@dataclass(slots=True)
class Span:
    """One stretch of a startup in one phase: from the line that opened it to the line that
    opened the next one (`end_*` None while it is the open one).

    A startup is a list of spans (`State.spans`, in the order they opened).  Only the
    machine creates them (startup.py): a phase marker that moves the startup opens a span on
    the main line and closes the one before; a `beside` rule opens one that runs beside the
    main line (weights loading while graphs capture) until its closing rule or the end of
    the startup.  A phase may have several spans: its duration is their sum.  Times are the
    wall clock (`at`) and the server's own clock (`log_time`) when the line had one."""

    phase: str
    at: float                  # wall clock when observed
    log_time: float | None     # server timestamp when it had one
    log_stamp: str | None = None
    line: str = ""             # the line that opened it (its first LINE_KEEP characters)
    end_at: float | None = None
    end_log: float | None = None
    beside: bool = False       # runs beside the main line (not the current phase)
    label: str = ""            # what a second span of its phase was (its rule's `label`)

    @property
    def open(self) -> bool:
        return self.end_at is None

    def close(self, at: float, log_time: float | None) -> None:
        self.end_at, self.end_log = at, log_time

    def seconds(self, use_log: bool, until: tuple[float | None, float | None]) -> float | None:
        """How long it lasted (an open span: until `until` = (wall, log))."""
        a = self.log_time if use_log else self.at
        b = (self.end_log if use_log else self.end_at) if not self.open else \
            (until[1] if use_log else until[0])
        if a is None or b is None:
            return None
        return max(b - a, 0.0)


PhaseEntry = Span      # the name a span had when a startup was one phase after another
LINE_KEEP = 300


@dataclass(slots=True)
class Evidence:
    reason: str
    line: str
    line_number: int
    meaning: str = ""          # its rule's own sentence (`meaning:`), filled from the line
    at_launch: bool = False    # its rule's `at_launch`: only a launch meets it, before its
                               # launch line (machine/startup.py `crashed_at_launch`)
    yields: bool = False       # its rule's `yields`: a hint that gives way to a later one
                               # (machine/crash.py `crash_reason`)
    who: str = ""              # the rank whose line (or record) it is (machine/crash.py
                               # `record_rank`), "" for none

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
    # the rank of the root-cause line (its tag, or its record's: machine/crash.py
    # `record_rank`), "" where it has none: the rank the crash names (`named_rank`)
    cause_rank: str = ""
    # the rank of the latest crash line and the process it came from: an untagged line with
    # no stamp of its own continues that record (SGLang's traceback under its tagged header)
    record_rank: str = ""
    record_proc: str = ""
    died: Evidence | None = None            # the first line saying a process died
    first_exception: int | None = None      # the line number of the first Python exception
    # the line numbers of its exception lines (cause lines): where one traceback ends, so
    # a hint after one is another traceback's (machine/crash.py `first_hint`)
    exception_lines: list[int] = field(default_factory=list)
    phase_done: bool = False                # the work of the phase it crashed in had ended
                                            # (State.phase_done): no `crash_by_phase` default
    reach: int = -1                         # the furthest phase (index) its frames may place it
                                            # in: its own DP replica's next phase, where that
                                            # replica had ended one the startup is behind
                                            # (machine/startup.py `_crash_phase`)
    # the replica whose own phase placed it (`DP2`), ahead of the startup's (the slowest
    # replica's, `startup_phase`): "" where the crash is in the startup's phase
    replica: str = ""
    startup_phase: str = ""
    # the process whose line crashed, where one stream has several (compose's `llama-1`: two
    # servers each with its own `TP1`); "" where it has one
    proc: str = ""
    # what the root-cause line's rule says the crash means (`meaning:`, machine/crash.py
    # `conclude`): said instead of the reason's sentence; "" where it has none
    meaning: str = ""

    def to_json(self) -> dict[str, object]:
        return {"reason": self.reason, "during": self.during, "line": self.line,
                "line_number": self.line_number, "at": self.at, "log_time": self.log_time,
                "excerpt": list(self.excerpt), "rank": self.named_rank,
                **({"first_rank": self.rank} if self.printed_first else {}),
                **({"replica": self.replica, "startup_phase": self.startup_phase}
                   if self.ahead else {}), **({"proc": self.proc} if self.proc else {}),
                **({"meaning": self.meaning} if self.meaning else {})}

    @property
    def named_rank(self) -> str:
        """The rank the crash names: its root-cause line's, where that line (or its record)
        carries a tag, else the first that printed.  On-call goes to that rank's GPU: eight
        ranks failing in one instant print in any order, and the first printer's bare
        `RuntimeError` is not where TP5's `CUDA out of memory` (the reason) happened."""
        return self.cause_rank or self.rank

    @property
    def printed_first(self) -> str:
        """The rank that printed first where it is not the one named ("" otherwise): said
        beside it (`root cause on TP5; TP3 printed first`), as a rank that died first may
        have made the others fail (the log cannot always tell)."""
        return self.rank if self.cause_rank and self.rank and self.rank != self.cause_rank \
            else ""

    @property
    def where(self) -> str:
        """What the crash sentence names it in: its replica ahead of the startup, else the
        process of several that crashed (`crashed: cuda_oom during loading_shards in
        llama-1`)."""
        return self.ahead or self.proc

    @property
    def ahead(self) -> str:
        """The replica that crashed ahead of the startup's phase (`DP2` out of memory
        capturing while DP3, the slowest, still loads: `during` is DP2's cuda_graph, the
        startup's phases end at loading_shards); "" where `during` is the startup's own."""
        return self.replica if self.replica and self.during != self.startup_phase else ""



@dataclass(slots=True)
class State:
    phase: str = WAITING
    epoch: int = 0
    startups: int = 0
    spans: list[Span] = field(default_factory=list)  # this startup's, in the order they opened
    restart_rules: set[str] = field(default_factory=set)  # restart markers of this epoch
    procs: set[str] = field(default_factory=set)  # processes (by prefix) launched in this epoch
    procs_waiting: set[str] = field(default_factory=set)  # those of them (not followers) whose
                                          # ready line has not come (machine/servers.py)
    args: dict[str, Any] = field(default_factory=dict)  # the server's arguments (`args:` rules)
    args_partial: bool = False            # a line of them was cut: what was whole is kept
    args_complete: bool = False           # a dump of every field (`ArgsSpec.complete`) is in them
    engine_version: str | None = None     # the version the launch printed (a rule's `version`)
    progress: dict[str, ProgressState] = field(default_factory=dict)
    # each data-parallel replica's bar of a progress name, read apart (machine/rates.py
    # `replica_bar`), checkpointed
    bars: dict[str, list[ProgressState]] = field(default_factory=dict)
    phase_progress: bool = False          # a progress event since the current phase began
    crash: Crash | None = None
    ready_line: str | None = None
    ready_at: float | None = None
    stats: dict[str, float] = field(default_factory=dict)  # the server's (merge_stats)
    stats_by: dict[str, dict[str, float]] = field(default_factory=dict)  # per engine/DP rank
    stats_seen: dict[str, float] = field(default_factory=dict)  # when each's latest was read
    hints: dict[str, Evidence] = field(default_factory=dict)
    last_activity: float | None = None
    last_log_time: float | None = None
    stalled: bool = False
    startup_id: str | None = None         # see startup_id_of (None before the first line)
    crash_settled: bool = False           # the crash is final (CrashSettled was emitted)
    crash_changed_at: float | None = None  # wall time its evidence last changed
    crash_read_at: float | None = None     # wall time its first line was read
    deferred: "PhaseChanged | None" = None  # the unannounced entry of a provisional phase
    endpoint: str | None = None           # the address the server said it listens on
    ranks: dict[str, RankProgress] = field(default_factory=dict)  # per rank tag, this startup
    # per process of a rank that names no replica (`TP0 pid=200`): how far it got (phase
    # index, finished); one tag in several processes is one process per replica (vLLM's
    # dense `-dp 2 -tp 2`: `Worker_TP0` in each engine)
    lanes: dict[str, tuple[int, bool]] = field(default_factory=dict)
    # per such process, when it got further (`RankProgress.advances`: phase index, finished,
    # time): a dense model's replica times for the ETA (eta.py `_replicas_took`)
    lane_times: dict[str, list[tuple[int, bool, float]]] = field(default_factory=dict)
    # per process id a rank tag gave: (the pack's `ranks:` pattern that first named it, the
    # rank it named): one process is one rank whatever its tag's form (`RulePack.rank_of`)
    rank_pids: dict[str, tuple[int, str]] = field(default_factory=dict)
    begun: set[str] = field(default_factory=set)  # `begins` rules that fired in this startup
    seen: set[str] = field(default_factory=set)   # rules an `unless_seen` names that matched
                                                  # in this startup (the pack's `watched`)
    servers: dict[str, bool] = field(default_factory=dict)  # server tag -> ready (this launch)
    supervised: bool = False              # a launcher of several servers began this launch
    ready_by_endpoint: bool = False       # a line said this launch's ready is its endpoint's
                                          # answer, no ready line (`ready_by_endpoint` rules)
    untrusted_stamps: int = 0             # stamps not used: they would run the clock backwards
    last_own_time: float | None = None    # the last stamp a line had of its own (trusted)
    clock_offset: float | None = None     # our clock minus the log's (the least seen: a line
                                          # read as it was written); see spans.event_time
    floating: float | None = None         # the current span began at an unstamped bar after a
                                          # silent phase: the log time of its latest line
    # a part of the server that failed while the server went on (`degrades` rules,
    # machine/degraded.py): said beside its ready, never a crash
    degraded: str | None = None
    degraded_line: str | None = None      # its line (clipped): the alert's, as a crash's line
    absorbing: str | None = None          # the reason of that part's traceback still to come
    absorbing_from: int = 0               # the line number of the `degrades` line
    follower: bool | None = None          # a follower node's launch (True), a head's (False),
                                          # not said (None): machine/follower.py
    follower_line: str | None = None      # the line every rank of a follower had ended at
    follower_log_time: float | None = None  # (its ready once the log stays quiet)
    graphs_off: bool = False              # a line said this launch captures no graphs (the
                                          # pack's `follower.eager.rules`)
    phase_done: bool = False              # the launch's latest phase marker ended the phase's
                                          # work on every rank (machine/crash.py note_phase_done)
    work_again_at: float | None = None    # when the phase's work last began again after that,
                                          # in the same phase (EAGLE's draft extend capture)
    nodes: set[int] = field(default_factory=set)  # the node ranks whose launch line this
                                          # launch of several nodes printed (follower.nodes)
    gpus: set[int] = field(default_factory=set)   # GPUs its lines name (NCCL's nvmlDev)
    gpu_buses: set[int] = field(default_factory=set)  # ... by PCI bus (NCCL's busId: the
                                          # host's, where nvmlDev is a container's own index)
    relaunched: bool = False              # a relaunch writes the log now (another engine's, or a
                                          # new file after the server was gone): its first
                                          # matched line begins a startup
    mid_startup: bool = False             # the log begins past this startup's launch (a window
                                          # of a longer log: `kubectl logs --tail`, a file
                                          # rotated mid-startup): no launch to time it from

    @property
    def server_gone(self) -> bool:
        """The server crashed (the crash final) or stopped: nothing more comes from it, so
        what the log shows next is a relaunch."""
        return self.phase == STOPPED or (self.phase == CRASHED and self.crash_settled)

    @property
    def history(self) -> list[Span]:
        """The main line's spans (what the phase was, one after another)."""
        return [s for s in self.spans if not s.beside]

    @property
    def phases_seen(self) -> list[str]:
        out: list[str] = []
        for e in self.spans:
            if e.phase not in out:
                out.append(e.phase)
        return out

    @property
    def phase_entered(self) -> Span | None:
        for s in reversed(self.spans):
            if not s.beside:
                return s
        return None

    def _use_log(self) -> bool:
        return bool(self.spans) and all(e.log_time is not None for e in self.spans)

    @property
    def timed_by_log(self) -> bool:
        """Its durations are the log's times (every span stamped), not when lines were read:
        a first attach reads a whole startup at one moment."""
        return self._use_log()

    def _until(self) -> tuple[float | None, float | None]:
        """Where an open span ends for now: the last line (it is still going on)."""
        return self.last_activity, self.last_log_time

    def durations(self) -> dict[str, float]:
        """Seconds spent in each phase of this startup: the sum of its spans (server clock if
        every span has one).  Spans beside the main line count for their own phase; the
        total wall time is `total()`, never the sum of these."""
        use_log = self._use_log()
        until = self._until()
        out: dict[str, float] = {}
        for sp in self.spans:
            if sp.phase == READY or sp.phase in TERMINAL:
                continue
            d = sp.seconds(use_log, until)
            if d is not None:
                out[sp.phase] = round(out.get(sp.phase, 0.0) + d, 3)
        return out

    def closed_seconds(self, phase: str) -> float:
        """Seconds of `phase` in its spans that have ended (a phase the startup is in again:
        the time it already had, which its typical duration includes)."""
        use_log = self._use_log()
        until = self._until()
        return sum(sp.seconds(use_log, until) or 0.0 for sp in self.spans
                   if sp.phase == phase and not sp.open and not sp.beside)

    def total(self) -> float:
        """Wall time the startup's spans cover (their union: overlapping spans once).  Ready
        and an end are points, not phases: before, an error after ready (a LoRA adapter that
        failed to load) kept ready's span counting, `total 6m10s` for a startup ready at
        4m33s."""
        use_log = self._use_log()
        until = self._until()
        cover: list[tuple[float, float]] = []
        for sp in self.spans:
            if sp.phase == READY or sp.phase in TERMINAL:
                continue
            a = sp.log_time if use_log else sp.at
            d = sp.seconds(use_log, until)
            if a is not None and d is not None:
                cover.append((a, a + d))
        total, reach = 0.0, None
        for a, b in sorted(cover):
            if reach is None or a > reach:
                total += b - a
                reach = b
            elif b > reach:
                total += b - reach
                reach = b
        return round(total, 3)

    def open_seconds(self) -> float:
        """Seconds the current main span covers so far by the log (0: none open): what the
        live figures (view.py `live_extra`) count on from."""
        entered = self.phase_entered
        if entered is None or not entered.open:
            return 0.0
        return entered.seconds(self._use_log(), self._until()) or 0.0

    def epoch_start(self) -> Span | None:
        return self.spans[0] if self.spans else None

    def launch_start(self) -> Span | None:
        """The startup's first span when the log has its launch (None for a log that begins
        mid-startup): what "ready in" and "crashed after" count from."""
        return None if self.mid_startup else self.epoch_start()

    def ready_in(self) -> float | None:
        """Seconds from the startup's first line to ready (None unless ready after a startup
        that was seen: a log that begins while serving, or mid-startup, has no launch;
        before, a window that began at graph capture read `READY in 1.0s`)."""
        start = self.launch_start()
        end = self.phase_entered
        if self.phase != READY or start is None or start.phase == READY or \
                end is None or end.phase != READY:
            return None
        return elapsed_since(start, end.at, end.log_time)


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

