"""The launch ledger of a target: one record per startup (ledger.py), kept in the store.

It follows the machine step by step (`LogPipeline.on_step`: the arguments as they were at
each step), saves a startup's record when it gets ready, crashes or stops (or a part of it
fails while it serves: `Degraded`, in the record's `degraded`), every
LEDGER_EVERY seconds while it serves (with the GPUs' serving figures) and when the target
stops; a daemon restarted mid-startup goes on with the stored record.  Its view: the last
ready startup's launch-to-ready and, at ready, this launch against the one before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from ...ledger import LedgerRecorder, StartupRecord, vs_previous_text
from ...machine import CrashSettled, Degraded, Event, Ready, State, StatsUpdated, Stopped
from ...pipeline import LogPipeline
from ...rules.pack import READY
from ...state.ledger import LedgerStore
from .base import Attachment

LEDGER_EVERY = 60.0   # seconds between saves of a serving startup's ledger record


class Power(Protocol):
    """What the ledger reads of the GPUs (gpu.py `GpuAttachment`)."""

    def phase_watts(self, startup: str | None) -> dict[str, dict[str, float]] | None: ...

    def serving_sample(self, seen: int) -> tuple[int, dict[str, Any]] | None: ...


@dataclass(frozen=True)
class LedgerPart:
    """The target view's ledger fields."""

    last_startup_seconds: float | None   # launch to ready of the last ready startup
    vs_previous: str                     # at ready: this launch against the one before
    advice: tuple[str, ...]              # the pack's advice on this launch (ready or ended)


class LedgerAttachment(Attachment):
    def __init__(self, store: LedgerStore, name: str, power: Power | None = None) -> None:
        self.store = store
        self.name = name
        self.power = power
        self.pipe: LogPipeline | None = None
        self.recorder: LedgerRecorder | None = None
        self.last_startup_seconds: float | None = None
        self.vs_previous = ""
        self._advice: tuple[str | None, tuple[str, ...]] = (None, ())   # (its startup, lines)
        self._saved = 0.0
        self._gpu_seen = -1                # the GPU stream's version last given to it

    def on_pipeline(self, pipe: LogPipeline) -> None:
        if self.recorder is not None and self.pipe is not None and pipe.state is self.pipe.state:
            # another engine's pipeline of the same log: the open record goes on (closed by
            # the new engine's first startup); the records begun after it are the new one's
            self.pipe, pipe.on_step = pipe, self._step
            self.recorder.engine, self.recorder.advice = pipe.pack.name, pipe.pack.advice
            self.recorder.model_flags = pipe.pack.model_flags
            return
        self.pipe = pipe
        state = pipe.state
        self.recorder = LedgerRecorder(
            pipe.pack.name, previous=self._previous(state), advice=pipe.pack.advice,
            model_flags=pipe.pack.model_flags,
            previous_of=lambda startup: self._previous(state, exclude=startup))
        stored = self._stored(pipe.state.startup_id)
        if stored is not None:        # restarted mid-startup or while serving
            self.recorder.resume(stored)
        pipe.on_step = self._step

    def _previous(self, state: State, exclude: str | None = None) -> StartupRecord | None:
        """The last recorded startup of this target that is not the current one."""
        current = exclude or state.startup_id
        for rec in reversed(self.store.records(self.name, 3)):
            if rec.startup != current:
                if rec.got_ready and self.last_startup_seconds is None:
                    self.last_startup_seconds = rec.startup_seconds
                return rec
        return None

    def _stored(self, startup: str | None) -> StartupRecord | None:
        if startup is None:
            return None
        return next((r for r in reversed(self.store.records(self.name, 3))
                     if r.startup == startup), None)

    def _step(self, events: list[Event], state: State) -> None:
        rec = self.recorder
        if rec is None:
            return
        for closed in rec.observe(events, state):
            self._save(closed)
        if len(events) == 1 and type(events[0]) is StatsUpdated:
            return      # a serving line (most steps): nothing to save
        if any(isinstance(e, (Ready, CrashSettled, Stopped, Degraded)) for e in events):
            cur = rec.current(state)
            if cur is not None:
                self._save(cur)
                self._advice = (cur.startup, tuple(cur.advice))
                if cur.outcome == "ready" and any(isinstance(e, Ready) for e in events):
                    prev = self._previous(state, exclude=cur.startup)
                    self.vs_previous = vs_previous_text(prev, cur) if prev is not None else ""

    def _save(self, rec: StartupRecord) -> None:
        watts = self.power.phase_watts(rec.startup) if self.power is not None else None
        if watts is not None:
            rec.watts = watts
        self.store.save(self.name, rec)
        self._saved = time.monotonic()
        if rec.got_ready and rec.startup_seconds is not None:
            self.last_startup_seconds = rec.startup_seconds

    def save(self) -> None:
        """The open startup as it stands (while it serves, and when the target stops)."""
        if self.recorder is None or self.pipe is None:
            return
        cur = self.recorder.current(self.pipe.state)
        if cur is not None:
            self._save(cur)

    def tick(self, now: float) -> None:
        """While the startup serves: the GPUs' samples, and its record every LEDGER_EVERY."""
        if self.recorder is None or self.pipe is None or self.pipe.state.phase != READY:
            return
        sample = self.power.serving_sample(self._gpu_seen) if self.power is not None else None
        if sample is not None:
            self._gpu_seen = sample[0]
            self.recorder.add_gpu(sample[1])   # watts while it serves
        if time.monotonic() - self._saved >= LEDGER_EVERY:
            self.save()     # the serving figures of a startup still serving

    def caught_up(self, now: float) -> None:
        """The serving figures read with the catch-up (the save at its ready line had none):
        a daemon attached to a finished log has them at once, not a minute later; its times
        as the catch-up retimed them (LedgerRecorder.caught_up)."""
        if self.recorder is not None and self.pipe is not None:
            self.recorder.caught_up(self.pipe.state)
        self.save()

    def view(self, now: float) -> LedgerPart:
        startup, advice = self._advice
        current = self.pipe is not None and startup == self.pipe.state.startup_id
        return LedgerPart(self.last_startup_seconds, self.vs_previous, advice if current else ())

    def key(self) -> Any:
        return self.last_startup_seconds

    async def close(self) -> None:
        self.save()
