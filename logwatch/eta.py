"""The startup ETA: seconds until ready, from the current phase and the typical ones.

    remaining shards at the current (smoothed) rate            while loading shards
  + what is typically left of the current phase                otherwise
  + the typical duration of every phase still ahead

where "typical" is the median over past startups of the same model on this target (a phase
a startup skipped counts as 0 s; state/history.py), and the pack's `typical_seconds` on a
first start.
"""

from __future__ import annotations

import math

from .machine import State, phase_left
from .rules.pack import READY, RulePack


MAX_ETA_STEP = 0.30     # an ETA moves at most this fraction between two updates in a phase


class EtaSmoother:
    """Keeps an ETA from jumping: within one phase each value is held to within
    MAX_ETA_STEP of where the previous one, counted down since, would be."""

    def __init__(self) -> None:
        self._last: tuple[str, float, float] | None = None   # (phase, eta, at)

    def peek(self, phase: str, eta: float, now: float) -> float:
        """The value `eta` would be held to now, without remembering it: a view reads this,
        so how often a target is read (/metrics, /api/status, alerts) never moves its ETA."""
        if math.isnan(eta):
            return eta
        last = self._last
        if last is not None and last[0] == phase and eta > 0:
            expect = max(last[1] - max(now - last[2], 0.0), 0.0)
            eta = min(max(eta, expect * (1 - MAX_ETA_STEP)), max(expect * (1 + MAX_ETA_STEP),
                                                                 expect + 1.0))
        return eta

    def __call__(self, phase: str, eta: float, now: float) -> float:
        """Hold `eta` (see `peek`) and remember it: the live target's `tick` calls this."""
        eta = self.peek(phase, eta, now)
        self._last = None if math.isnan(eta) else (phase, eta, now)
        return eta


def _progress_of(pack: RulePack, phase: str) -> list[str]:
    """The progress counters the pack's rules report in `phase` (its bars)."""
    return list(dict.fromkeys(r.progress for r in pack.rules if r.progress and r.phase == phase))


def startup_eta(pack: RulePack, state: State, now: float,
                typical: dict[str, float] | None = None) -> float:
    """Seconds until ready (0 when ready, NaN when there is nothing to base it on)."""
    phase = state.phase
    if phase == READY:
        return 0.0
    if phase not in pack.startup_phases:
        return math.nan
    typ = typical if typical else {}
    defaults = pack.typical_seconds
    have_history = bool(typ)

    def typical_of(p: str) -> float | None:
        if have_history:
            return typ.get(p, 0.0)
        return defaults.get(p)

    eta = 0.0
    known = False
    entered = state.phase_entered
    # a phase the startup is in again (vLLM 0.34's second autotune) has already had some of
    # its typical time (a typical duration is the sum of a phase's spans)
    elapsed = max(0.0, now - entered.at) + state.closed_seconds(phase) \
        if entered is not None else 0.0
    # the current phase's own bar (shards, files fetched, autotuner, graph capture), if moving
    bar_left = next((left for left in (state.progress[n].remaining_seconds(now)
                                       for n in _progress_of(pack, phase) if n in state.progress)
                     if left is not None), None)
    t_phase = typical_of(phase)
    if bar_left is not None:
        # the bar is the phase's own clock; a phase that goes on after its bar (capture,
        # then its end lines) is known from history: whichever ends later
        eta += max(bar_left, t_phase - elapsed) if have_history and t_phase else bar_left
        known = True
    else:
        t = typical_of(phase)
        if t is not None:
            eta += phase_left(t, elapsed)
            known = True
    for p in _ahead(pack, state, phase):
        t = typical_of(p)
        if t is None:
            if not have_history:
                return eta if known else math.nan
            continue
        # (what a phase that came already, out of order, had of its typical time is done:
        # on a first start too; before, vLLM 0.34's allocating after its graph capture
        # counted the capture's typical 30 s again, the ETA rising from 27 s to 38 s)
        eta += max(t - state.closed_seconds(p), 0.0)
        known = True
    if have_history:
        eta += _coming_back(pack, state, phase, typ)
    return eta if known else math.nan


def _ahead(pack: RulePack, state: State, phase: str) -> list[str]:
    """The startup phases after `phase`, but those the launch never enters: with graphs off
    (vLLM `--enforce-eager`) the capture (`follower.eager.skips`; before, a first start's
    ETA in allocating counted the capture's typical 30 s: 40 s where 7 s were left)."""
    skipped = pack.follower.skipped(state.args, state.graphs_off) if pack.follower \
        else frozenset()
    later = pack.phases[pack.phases.index(phase) + 1:]
    return [p for p in later[:later.index(READY)] if p not in skipped]


def _coming_back(pack: RulePack, state: State, phase: str, typ: dict[str, float]) -> float:
    """What earlier phases still have of their typical time when a rule of the pack can
    still bring them back in this startup (a `begins` rule that has not fired: vLLM 0.34's
    JIT warmup, autotune again after the KV estimate).  From history only: a first start
    has no sum of spans to go by."""
    out = 0.0
    earlier = pack.phases[: pack.phases.index(phase)]
    for p in earlier:
        if any(r.begins and r.phase == p and r.id not in state.begun for r in pack.rules):
            out += max(typ.get(p, 0.0) - state.closed_seconds(p), 0.0)
    return out
