"""The alert policy: the machine's events (and the targets' views) -> alerts to fire.

Pure decisions, no I/O: `AlertPolicy.observe(view, events)` and `tick(views)` return the
alerts to fire (new firing ones, and resolutions of open ones); the router puts them in the
outbox, which sends each mark once.

* `crashed` on `CrashSettled` (the machine decided the crash is final), keyed on the
  crashed startup's id; it drops an undelivered `stalled` of the same startup (the outbox
  does that) and resolves a delivered one.
* `stalled` on `Stalled`; `slow` when a startup overran the typical startup by the target's
  `slow_factor`; `ready` resolves `stalled` / `slow`, and `crashed` of earlier startups; a
  new startup (`Restarted`) resolves `stalled` / `slow` of the ones before.
* `restarted` and `phase` for the sinks that ask for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from ...machine import CrashSettled, Event, PhaseChanged, Ready, Restarted, Stalled
from ...rules.pack import READY, TERMINAL, WAITING
from ...units import fmt_duration
from ...view import TargetView, gpu_activity
from .model import FIRING, Alert

SLOW_FACTOR = 1.5
SLOW_MIN_SECONDS = 120.0


def alert_key(target: str, startup: str | None, kind: str, extra: str = "") -> str:
    return f"{target}|{startup or '-'}|{kind}{('|' + extra) if extra else ''}"


def startup_of(key: str) -> str:
    return key.split("|")[1]


@dataclass
class Resolve:
    """Resolve the open alerts of `target` of these kinds (only / except one startup)."""

    target: str
    kinds: tuple[str, ...]
    why: str
    only: str | None = None
    exclude: str | None = None
    drop_undelivered: bool = False   # an undelivered one is dropped, not resolved


Decision = Alert | Resolve


class AlertPolicy:
    def __init__(self, generator_url: str = "",
                 wants_phase: Callable[[], bool] = lambda: False) -> None:
        self.generator_url = generator_url
        self.wants_phase = wants_phase

    def _alert(self, v: TargetView, kind: str, startup: str | None, summary: str,
               details: dict[str, Any], epoch: int, extra: str = "") -> Alert:
        return Alert(alert_key(v.name, startup, kind, extra), kind, FIRING, v.name, v.engine,
                     dict(v.labels), epoch, summary, details, time.time(), None,
                     self.generator_url, startup or "")

    def observe(self, v: TargetView, events: list[Event]) -> list[Decision]:
        out: list[Decision] = []
        for ev in events:
            if isinstance(ev, CrashSettled):
                c = ev.crash
                after = f" after {fmt_duration(ev.elapsed)}" if ev.elapsed else ""
                held = (v.gpu or {}).get("preflight") or ""
                out.append(Resolve(v.name, ("stalled", "slow"), "crashed", only=ev.startup,
                                   drop_undelivered=True))
                out.append(self._alert(v, "crashed", ev.startup,
                                       f"crashed during {c.during}{after}: {c.reason}"
                                       + (f" ({held})" if held else ""),
                                       {"reason": c.reason, "during": c.during, "line": c.line,
                                        "line_number": c.line_number, "elapsed": ev.elapsed,
                                        "excerpt": list(c.excerpt),
                                        **({"gpu_preflight": held} if held else {})}, ev.epoch))
            elif isinstance(ev, Ready):
                durations = {k: d for k, d in ev.durations.items() if k != READY}
                slow = ev.slowest_phase
                took = fmt_duration(ev.took) if ev.took is not None else "?"
                summ = f"ready in {took}" + (f" (slowest phase: {slow} "
                                             f"{fmt_duration(durations.get(slow))})"
                                             if slow in durations else "")
                out.append(self._alert(v, "ready", ev.startup, summ,
                                       {"took": ev.took, "durations": durations,
                                        "slowest_phase": slow, "line": ev.line}, ev.epoch))
                out.append(Resolve(v.name, ("stalled", "slow"), "ready"))
                out.append(Resolve(v.name, ("crashed",), "ready again", exclude=ev.startup))
            elif isinstance(ev, Restarted):
                out.append(Resolve(v.name, ("stalled", "slow"), "restarted", exclude=ev.startup))
                out.append(self._alert(v, "restarted", ev.startup,
                                       f"restarted (startup #{ev.epoch})", {"line": ev.line},
                                       ev.epoch))
            elif isinstance(ev, Stalled):
                gpu = gpu_activity(v.gpu, v.now)
                out.append(self._alert(v, "stalled", ev.startup,
                                       f"stalled in {ev.phase}: no new line for "
                                       f"{fmt_duration(ev.silent_for)}"
                                       + (f"; {gpu}" if gpu else ""),
                                       {"phase": ev.phase, "silent_for": ev.silent_for,
                                        "stall_after": ev.budget,
                                        **({"gpu": gpu} if gpu else {})}, ev.epoch))
            elif isinstance(ev, PhaseChanged) and self.wants_phase():
                out.append(self._alert(v, "phase", ev.startup, f"phase {ev.new}",
                                       {"phase": ev.new, "previous": ev.old}, ev.epoch,
                                       extra=ev.new))
        return out

    def slow(self, v: TargetView, slow_factor: float) -> Alert | None:
        """A startup that has taken `slow_factor` times the typical one (and 2 min at least)."""
        if v.phase in (WAITING, READY, *TERMINAL) or v.startup_started_at is None \
                or not v.typical_total:
            return None
        elapsed = v.now - v.startup_started_at
        if elapsed <= max(v.typical_total * slow_factor, SLOW_MIN_SECONDS):
            return None
        return self._alert(v, "slow", v.startup_id,
                           f"slow startup: {fmt_duration(elapsed)} and still in {v.phase} "
                           f"(usually ready after {fmt_duration(v.typical_total)})",
                           {"elapsed": elapsed, "typical": v.typical_total, "phase": v.phase},
                           v.epoch)
