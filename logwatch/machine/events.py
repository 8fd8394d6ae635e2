"""What a machine step says happened: the events every consumer (counters, alerts, the
display, the ledger, history) reads instead of the state."""

from __future__ import annotations

from dataclasses import dataclass, field

from .state import Crash


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
    launch: str = ""             # its flags' digest (`launch_digest`): a relaunch with others
                                 # is not the restart loop (sinks/alerts/loop.py)
    launch_prefix: str = ""      # its first flags' digests (`launch_prefixes`), cut or not


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
    launch: str = ""             # its launch's flags, as `CrashSettled`'s: a relaunch of a
    launch_prefix: str = ""      # restart loop stalls into the loop's alert (alerts/loop.py)


@dataclass(frozen=True, slots=True)
class Degraded:
    """The ready server serves without a part of itself (`degrades` rules): at the ready
    where the part failed while it started (after `Ready`, whose notes say it too), else
    when it fails while serving.  `note`, the state's `degraded`.  Once per startup (its
    first note)."""

    epoch: int
    note: str
    startup: str | None = None
    line: str = ""               # the line that said it (clipped): the alert shows it


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
         | CrashRetracted | Stopped | Stalled | Degraded | Progress | StatsUpdated)

