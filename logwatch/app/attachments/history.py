"""Startup history: each finished startup's phase durations (state/history.py), per target.

It records a startup when it gets ready or its crash settles (while catching up too: a
startup is recorded once, by its StartupId, whatever re-reads it), or, `incomplete`, when
another begins before it ended (killed while it loaded: before, the page's "previous" was
the ready launch before it, as if the killed one had never been), and it is the ETA's
basis (`typical`, `basis`: `Target` finds it among its attachments).  `watch --no-history`
leaves it out of the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...machine import CrashSettled, Event, Ready, StartupBegan, State, Stopped
from ...rules.pack import READY
from ...state.history import StartupHistory
from .base import Attachment, LiveTarget


@dataclass(frozen=True)
class HistoryPart:
    """The target view's history fields."""

    history: list[dict[str, Any]]          # the last 5 startups
    previous_startup: dict[str, Any] | None
    typical_total: float | None            # median launch-to-ready of past startups


class HistoryAttachment(Attachment):
    def __init__(self, state_dir: str | Path, name: str, model: str = "") -> None:
        self.history = StartupHistory(state_dir, name, model)
        self.target: LiveTarget | None = None
        # the startup under way and its durations as last seen (its state is the next one's
        # by the time another begins): recorded `incomplete` if another begins before it ends
        self.open: tuple[str, dict[str, float]] | None = None

    def bind(self, target: LiveTarget) -> None:
        self.target = target

    def start(self) -> None:
        self.history.start()

    async def close(self) -> None:
        await self.history.close()

    def on_events(self, events: list[Event], now: float) -> None:
        read_untimed = self._read_untimed()
        for ev in events:
            if isinstance(ev, StartupBegan):
                if self.open is not None and self.open[0] != ev.startup:
                    self.history.record_durations(self.open[1], "incomplete", self.open[0])
                self.open = (ev.startup, {})
            elif isinstance(ev, Ready):
                self.open = None
                # a log that began mid-startup (no launch: no took) is no typical startup:
                # before, its window (autotune, graphs 1m34s of a 4m33s start) became the
                # next ETA's basis, its missing phases as 0 s
                if ev.took is not None and not read_untimed:
                    self.history.record_durations(ev.durations, "ready", ev.startup or "",
                                                  total=ev.took)
            elif isinstance(ev, CrashSettled):
                self.open = None
                if not read_untimed:
                    self.history.record_durations(ev.durations, "crashed", ev.startup or "",
                                                  ev.crash.reason, ev.elapsed)
            elif isinstance(ev, Stopped):
                self.open = None
        pipe = self.target.pipe if self.target is not None else None
        if self.open is not None and pipe is not None and \
                pipe.state.startup_id == self.open[0]:
            self.open = (self.open[0], pipe.state.durations())

    def _read_untimed(self) -> bool:
        """A first attach reads a startup whose lines are not all stamped: its durations are
        the moments they were read (all at once), not how long its phases took.  Before, a
        log without stamps that got ready an hour before the attach was recorded
        `{"launching": 0.0, "loading_shards": 0.0}`, total 0.0: the next launch's ETA
        basis (`typical`) said its loading takes 0 s."""
        t = self.target
        pipe = t.pipe if t is not None else None
        return t is not None and t.catching_up and pipe is not None and \
            not pipe.state.timed_by_log

    def typical(self) -> dict[str, float]:
        """Median seconds per phase of the earlier ready startups (the ETA's basis)."""
        return self.history.typical()

    def basis(self) -> int:
        """How many earlier ready startups `typical` comes from."""
        return self.history.basis()

    def view(self, now: float) -> HistoryPart | None:
        pipe = self.target.pipe if self.target is not None else None
        if pipe is None:
            return None
        recs = self.history.records
        totals = [r.total for r in recs if r.outcome == READY and r.total]
        return HistoryPart([r.to_json() for r in recs[-5:]],
                           previous_startup(pipe.state, self.history), _median(totals))

    def key(self) -> Any:
        return len(self.history.records)


def previous_startup(st: State, history: StartupHistory) -> dict[str, Any] | None:
    """The last finished startup before the current one (for the page's timeline)."""
    recs = history.records
    if not recs:
        return None
    if st.startup_id is not None and recs[-1].startup == st.startup_id:
        return recs[-2].to_json() if len(recs) > 1 else None
    return recs[-1].to_json()


def _median(values: list[float]) -> float | None:
    """`statistics.median` (None for none), imported when first needed (it imports decimal
    and fractions: ~4 ms of a CLI start)."""
    if not values:
        return None
    import statistics
    return statistics.median(values)
