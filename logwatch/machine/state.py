"""The machine's state: what one log has shown so far about its current startup.

Dataclasses only (plus the startup's identity and its elapsed times): `StartupMachine`
(startup.py) is the only writer; readers (the view, the ledger, the history) copy from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..rules.pack import READY, TERMINAL, WAITING, Rule, reason_rank
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

