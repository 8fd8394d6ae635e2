"""Startup history: the phase durations of past startups, per target.

Each finished startup (ready or crashed) of a target leaves its phase durations in
`state_dir/history/TARGET.json` (the last 20, tagged with the target's `model` label); the
ETA (eta.py) takes the per-phase medians of the ready ones (`StartupHistory.typical`).

In the daemon the file is written off the event loop (state/coalesce.py, `start` / `close`):
a write is two fsyncs and a rename, ~10 ms here (an NFS state_dir: more), and 60 targets
flooded with startups had the loop writing history for 12 of 80 s (/metrics 11-20 s late).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import clock, log
from ..machine import State
from .coalesce import CoalescedFile
from .files import legacy_file_name, read_state_json, set_aside, target_file_name
from .formats import StoreFormat
from ..rules.pack import READY, WAITING

KEEP = 20
VERSION = 1
FORMAT = StoreFormat("startup history", "history/*.json", VERSION)   # a newer one: formats.py


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
        self.file = CoalescedFile("history", self.path, self._snapshot, every=1.0)
        self.load()

    def _snapshot(self) -> dict[str, Any]:
        return {"version": VERSION, "startups": [r.to_json() for r in self.records]}

    def start(self) -> None:
        """Written by a task of the running loop from now on (at once before)."""
        self.file.start()

    async def close(self) -> None:
        """The last records written, the writer task ended."""
        await self.file.close()

    def load(self) -> None:
        """The file's startups; none when it is missing or unreadable.  A damaged one (not
        JSON, the wrong shape) is set aside as `NAME.json.corrupt` and said once: before, it
        was read as empty and overwritten by the next startup's record, the 20 it held gone
        without a word (and JSON nested too deep stopped the target's start); one without its
        `version` too (before, read as empty without a word and replaced, helper adv43).  One
        that cannot be read now (another user's 0600 file, EIO) or a newer logwatch's (`watch`
        of an older install beside a newer one) is no damage: said, and not written over by
        the next record (before, read as empty without a word and replaced: its 20 startups
        gone, helpers adv40, adv43)."""
        self.records, self._typical, self.unreadable = [], None, ""
        path = self.path if self.path.exists() or not self._legacy.exists() else self._legacy
        try:
            doc = read_state_json(path)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            version = doc.get("version")
            if version != VERSION:
                if _newer(version):   # a newer logwatch's (`watch` checks no formats): its own
                    self._left_alone(path, f"format {version}, this version reads {VERSION}")
                    return
                raise ValueError(f"unknown version {version!r}")
            self.records = [StartupRecord(float(r["at"]), str(r.get("model", "")),
                                          str(r["outcome"]), {k: float(v) for k, v in r["phases"].items()},
                                          _total(r.get("total")), str(r.get("startup") or ""),
                                          str(r.get("reason") or ""))
                            for r in doc.get("startups", [])]
        except FileNotFoundError:
            return            # none yet
        except OSError as e:  # not readable now (EACCES, EIO): not damage, nothing set aside,
            self._left_alone(path, e.strerror or str(e))    # and not written over (`record`)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.records = []
            log.get("history").error("startup history damaged: the ETA starts without it",
                                     file=str(path), kept_as=str(set_aside(path)),
                                     error=str(e) or type(e).__name__)

    def _left_alone(self, path: Path, why: str) -> None:
        """A history this run cannot read but that is no damage: said, and not written over
        by the next record (its startups are another run's, or another version's)."""
        self.unreadable = why
        log.get("history").error("startup history unreadable: the ETA starts without it, "
                                 "and it is not written over", file=str(path), error=why)

    def record(self, state: State, outcome: str) -> StartupRecord | None:
        """Remember a finished startup (when it became ready or its crash settled)."""
        reason = state.crash.reason if state.crash is not None and outcome != READY else ""
        return self.record_durations(state.durations(), outcome, state.startup_id or "", reason,
                                     state.total())

    def record_durations(self, durations: dict[str, float], outcome: str,
                         startup: str = "", reason: str = "",
                         total: float | None = None) -> StartupRecord | None:
        """`total`: the startup's wall time (launch to ready or crash); without it, the sum
        of the phases (which counts twice what ran beside another phase)."""
        durations = {p: d for p, d in durations.items() if p not in (READY, WAITING, "crashed",
                                                                     "stopped")}
        if not durations:
            return None
        if startup and any(r.startup == startup for r in self.records):
            return None   # already recorded (the log was read again after a restart)
        rec = StartupRecord(clock.now(), self.model, outcome, durations,
                            round(total if total is not None else sum(durations.values()), 3),
                            startup, reason)
        self.records = (self.records + [rec])[-KEEP:]
        self._typical = None
        if self.unreadable:   # the startups it holds are not lost to this one (kept in memory)
            return rec
        self.file.changed()
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
            import statistics     # (decimal, fractions: not at every start)
            self._typical = {p: statistics.median([r.phases.get(p, 0.0) for r in same])
                             for p in phases}
        return self._typical


def _newer(version: Any) -> bool:
    """Whether a history's `version` is a newer logwatch's format (`2`, `2.0`), not damage."""
    return isinstance(version, (int, float)) and not isinstance(version, bool) \
        and version > VERSION


def _total(value: Any) -> float | None:
    """A record's total seconds: a number or none (a string there was damage)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"total {value!r} is not a number")
    return float(value)


def watch_state_dir() -> Path:
    """Where `watch` keeps its startup history (keyed by the TARGET string), so a second
    watch of the same server has an ETA from the first: $LOGWATCH_STATE_DIR, else
    $XDG_STATE_HOME/logwatch, else ~/.local/state/logwatch."""
    if os.environ.get("LOGWATCH_STATE_DIR"):
        return Path(os.environ["LOGWATCH_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "logwatch"
