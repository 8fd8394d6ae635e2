"""A target's monotonic counters (the Prometheus counters), persisted in its checkpoint.

One object per target, counted where things happen: the pipeline counts lines, matches,
rule errors and cut lines as it frames and matches; the live loop counts bytes (once each,
across restarts), reconnects and rotations; `count_events` counts startups, crashes and
startup durations from the machine's events.  Saved with the read position and the
machine state in one atomic checkpoint, so a restart neither loses nor repeats a count."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .machine import CrashSettled, Event, Ready, StartupBegan
from .rules.pack import CRASH_REASONS

# startups take from half a minute to two hours: fine steps where most of them are
DURATION_BUCKETS = (30.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 420.0, 600.0, 900.0, 1200.0,
                    1800.0, 2700.0, 3600.0, 5400.0, 7200.0)


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
    bytes_skipped: int = 0       # bytes a source knows it lost (a lower bound, see Skipped)
    source_losses: int = 0       # times a source knew it lost part of the log
    rule_errors: int = 0
    duration_buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    duration_sum: float = 0.0
    duration_count: int = 0
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
    def from_json(cls, d: Any) -> "Counters":
        """The counters a checkpoint saved; ValueError where they are not what `to_json`
        writes (a list, a count that is a string): the caller counts afresh.  Before, a
        string count failed every /metrics scrape of the fleet (500), and counters that were
        a list kept the target from starting, for good (and out of /api/status)."""
        if not isinstance(d, dict):
            raise ValueError(f"counters: not an object but {type(d).__name__}")
        c = cls()
        for k, v in d.items():
            if hasattr(c, k):
                setattr(c, k, _checked(k, getattr(c, k), v))
        for r in CRASH_REASONS:
            c.crashes.setdefault(r, 0)
        if len(c.duration_buckets) != len(DURATION_BUCKETS) + 1:
            # other bucket bounds (an older version): the histogram starts over, whole (a
            # counter reset to Prometheus), so that its count and sum match its buckets
            c.duration_buckets = [0] * (len(DURATION_BUCKETS) + 1)
            c.duration_sum, c.duration_count = 0.0, 0
        return c


def _checked(key: str, default: Any, v: Any) -> Any:
    """`v` when it has the shape of the field's `default` (numbers, dicts of numbers, a list
    of numbers), else ValueError naming the field."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x
    if isinstance(default, dict):
        ok = isinstance(v, dict) and all(isinstance(n, int) and not isinstance(n, bool)
                                         for n in v.values())
    elif isinstance(default, list):
        ok = isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool)
                                         for n in v)
    elif isinstance(default, float):
        ok = number(v)
    else:
        ok = isinstance(v, int) and not isinstance(v, bool)
    if not ok:
        raise ValueError(f"counters: {key} is {v!r:.40}")
    return v


def count_events(counters: Counters, events: list[Event],
                 counts_crash: Callable[[CrashSettled], bool] | None = None,
                 counts_took: Callable[[Ready], bool] | None = None) -> None:
    """Startups, settled crashes and startup durations, from the machine's events; a crash
    only where `counts_crash` says so (a live target's history is not counted), a duration
    only where `counts_took` says so (one the log cannot give is not observed)."""
    for ev in events:
        if isinstance(ev, StartupBegan):
            counters.startups += 1
        elif isinstance(ev, CrashSettled):
            if counts_crash is None or counts_crash(ev):
                count_crash(counters, ev)
        elif isinstance(ev, Ready) and ev.took is not None and \
                (counts_took is None or counts_took(ev)):
            counters.observe_duration(ev.took)


def count_crash(counters: Counters, ev: CrashSettled) -> None:
    reason = ev.crash.reason
    counters.crashes[reason] = counters.crashes.get(reason, 0) + 1
