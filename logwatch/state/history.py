"""Startup history and the startup ETA.

Each finished startup (ready or crashed) of a target leaves its phase durations in
`state_dir/history/TARGET.json` (the last 20, tagged with the target's `model` label).  The
ETA while starting is:

    remaining shards at the current (smoothed) rate            while loading shards
  + what is typically left of the current phase                otherwise
  + the typical duration of every phase still ahead

where "typical" is the median over past startups of the same model on this target (a phase
a startup skipped counts as 0 s), and the pack's `typical_seconds` on a first start.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..machine import State, phase_left
from .files import legacy_file_name, save_state, target_file_name
from ..rules.pack import READY, WAITING, RulePack

KEEP = 20
VERSION = 1


@dataclass
class StartupRecord:
    at: float
    model: str
    outcome: str
    phases: dict[str, float]
    total: float | None
    startup: str = ""         # its StartupId: a startup is recorded once, whatever re-reads it
    reason: str = ""          # why it crashed (outcome "crashed"; "" before it was recorded)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "model": self.model, "outcome": self.outcome,
                "phases": self.phases, "total": self.total, "startup": self.startup,
                "reason": self.reason}


class StartupHistory:
    def __init__(self, state_dir: str | Path, target: str, model: str = "") -> None:
        folder = Path(state_dir).expanduser() / "history"
        self.path = folder / (target_file_name(target) + ".json")
        self._legacy = folder / (legacy_file_name(target) + ".json")   # before version 2
        self.model = model
        self.records: list[StartupRecord] = []
        self._typical: dict[str, float] | None = None
        self.load()

    def load(self) -> None:
        try:
            path = self.path if self.path.exists() or not self._legacy.exists() else self._legacy
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("version") != VERSION:
                return
            self.records = [StartupRecord(float(r["at"]), str(r.get("model", "")),
                                          str(r["outcome"]), {k: float(v) for k, v in r["phases"].items()},
                                          r.get("total"), str(r.get("startup") or ""),
                                          str(r.get("reason") or ""))
                            for r in doc.get("startups", [])]
        except (OSError, ValueError, KeyError, TypeError):
            self.records = []
        self._typical = None

    def record(self, state: State, outcome: str) -> StartupRecord | None:
        """Remember a finished startup (when it became ready or its crash settled)."""
        reason = state.crash.reason if state.crash is not None and outcome != READY else ""
        return self.record_durations(state.durations(), outcome, state.startup_id or "", reason)

    def record_durations(self, durations: dict[str, float], outcome: str,
                         startup: str = "", reason: str = "") -> StartupRecord | None:
        durations = {p: d for p, d in durations.items() if p not in (READY, WAITING, "crashed",
                                                                     "stopped")}
        if not durations:
            return None
        if startup and any(r.startup == startup for r in self.records):
            return None   # already recorded (the log was read again after a restart)
        rec = StartupRecord(time.time(), self.model, outcome, durations,
                            round(sum(durations.values()), 3), startup, reason)
        self.records = (self.records + [rec])[-KEEP:]
        self._typical = None
        save_state("history", self.path, {"version": VERSION,
                                          "startups": [r.to_json() for r in self.records]})
        return rec

    def basis(self) -> int:
        """How many earlier ready startups `typical` comes from (0: none, the ETA is rough)."""
        ready = [r for r in self.records if r.outcome == READY]
        return len([r for r in ready if r.model == self.model] or ready)

    def typical(self) -> dict[str, float]:
        """Median seconds per phase over the ready startups of this model (any if none)."""
        if self._typical is None:
            ready = [r for r in self.records if r.outcome == READY]
            same = [r for r in ready if r.model == self.model] or ready
            phases = {p for r in same for p in r.phases}
            self._typical = {p: statistics.median([r.phases.get(p, 0.0) for r in same])
                             for p in phases}
        return self._typical


def watch_state_dir() -> Path:
    """Where `watch` keeps its startup history (keyed by the TARGET string), so a second
    watch of the same server has an ETA from the first: $LOGWATCH_STATE_DIR, else
    $XDG_STATE_HOME/logwatch, else ~/.local/state/logwatch."""
    if os.environ.get("LOGWATCH_STATE_DIR"):
        return Path(os.environ["LOGWATCH_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "logwatch"


MAX_ETA_STEP = 0.30     # an ETA moves at most this fraction between two updates in a phase


class EtaSmoother:
    """Keeps an ETA from jumping: within one phase each value is held to within
    MAX_ETA_STEP of where the previous one, counted down since, would be."""

    def __init__(self) -> None:
        self._last: tuple[str, float, float] | None = None   # (phase, eta, at)

    def __call__(self, phase: str, eta: float, now: float) -> float:
        if math.isnan(eta):
            self._last = None
            return eta
        last = self._last
        if last is not None and last[0] == phase and eta > 0:
            expect = max(last[1] - max(now - last[2], 0.0), 0.0)
            eta = min(max(eta, expect * (1 - MAX_ETA_STEP)), max(expect * (1 + MAX_ETA_STEP),
                                                                 expect + 1.0))
        self._last = (phase, eta, now)
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
    elapsed = max(0.0, now - entered.at) if entered is not None else 0.0
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
    idx = pack.phases.index(phase)
    for p in pack.phases[idx + 1:]:
        if p == READY:
            break
        t = typical_of(p)
        if t is None:
            if not have_history:
                return eta if known else math.nan
            continue
        eta += t
        known = True
    return eta if known else math.nan
