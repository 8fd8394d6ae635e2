"""GPU telemetry beside a target's log: its host's nvidia-smi stream (telemetry/gpu/).

The stream is acquired from the owner's `GpuStreams` (one per host, shared by its targets)
when `plan_gpu` says so, and released when the target stops; a failure to start telemetry
is a warning, never the target's failure.  This attachment adds:
- the preflight: the GPUs that already held memory when a startup's first line arrived
  live (never read while catching up);
- `PhaseWatts`: the host's power per phase of the current startup (fed at each tick from
  the stream's new snapshots, each given to the phase current at its time);
- while a startup's log is silent for half its phase's stall budget or more, the silence's
  verdict (silence.py): hung, or slow while the GPUs work.
Its view is the stream's `to_dict()` plus those (`TargetView.gpu`); the ledger reads the
watts through `phase_watts` / `serving_sample` (the `Power` protocol of ledger.py).
This is the one module of app/ that knows the GPU stream's classes.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any

from ... import clock
from ...machine import Event, StartupBegan, State
from ...rules.gpus import GpuCountSpec
from ...rules.pack import READY, TERMINAL, WAITING
from ...silence import SERVING, PhaseWatts, silence_verdict
from ...telemetry.gpu import (
    GpuScope, GpuSnapshot, GpuStream, GpuStreams, log_named, plan_gpu, preflight_held,
    preflight_text,
)
from ...sources.ssh import SSHTarget
from .base import Attachment, LiveTarget

_GPU_N = re.compile(r"GPU (\d+)")      # a GPU gone from the loop (`gone_gpus`), by index


@dataclass(frozen=True)
class GpuPart:
    """The target view's `gpu` (None: telemetry off for this target)."""

    gpu: dict[str, Any] | None


def phase_at(st: State, at: float, history: list[Any] | None = None) -> str:
    """The phase the startup was in at wall time `at` (its main line's spans, by the wall
    time each was observed; `history`: st.history, when the caller has it already)."""
    history = st.history if history is None else history
    phase = history[0].phase if history else st.phase
    for e in history:
        if e.at > at:
            break
        phase = e.phase
    return phase


def launch_gpus(st: State, spec: GpuCountSpec | None) -> int | None:
    """The GPUs of this node the launch uses, as its args say (the pack's `gpus:`); None
    where unknown, or for several servers in one stream (a DP supervisor's, compose's
    prefill and decode): each printed its own args, merged in `st.args`."""
    if spec is None or len(st.servers) > 1 or st.supervised or len(st.procs) > 1:
        return None
    return spec.count(st.args, st.args_partial)


class GpuAttachment(Attachment):
    saved_as = "gpu"        # the scope, kept across a daemon restart (`saved`, `resume`)

    def __init__(self, streams: GpuStreams) -> None:
        self.streams = streams
        self.target: LiveTarget | None = None
        self.stream: GpuStream | None = None
        self.preflight: list[tuple[int, float]] = []   # GPUs that held memory at launch
        self.preflight_read = False        # ... read at this startup's launch line (live)
        self.watts = PhaseWatts(None)      # the GPUs' power per phase of this startup
        self.scope = GpuScope()            # the server's GPUs (telemetry/gpu/scope.py)
        self._watts_seen = -1              # the stream's version last given to it
        self._final: dict[str, Any] | None = None   # the view when it stopped (watch's summary)
        self._resumed: dict[str, Any] | None = None  # the scope the daemon before learned

    def bind(self, target: LiveTarget) -> None:
        self.target = target

    def start(self) -> None:
        """nvidia-smi where the log is (the target's `gpu:`), shared with the host's other
        targets; a failure here is a GPU status, never the target's."""
        assert self.target is not None
        cfg = self.target.cfg
        self.scope = GpuScope(cfg.gpu.devices)
        where = plan_gpu(cfg.gpu, cfg.kind)
        if where is None:
            self._resumed = None     # no GPU read: nothing to go on from, nothing kept
            return
        try:
            ssh = (SSHTarget.parse(cfg.source), cfg.ssh) if where == "ssh" else None
            self.stream = self.streams.acquire(cfg.gpu, ssh)
        except Exception as e:  # noqa: BLE001 - telemetry never stops the log
            self.target.log.warning("gpu telemetry not started", error=str(e))

    def on_events(self, events: list[Event], now: float) -> None:
        if self.stream is None or self.target is None or self.target.catching_up or \
                not any(isinstance(e, StartupBegan) for e in events):
            return
        # read live at the launch line: memory the GPUs already hold is not this server's
        gpu = self.stream.to_dict()
        self.preflight = preflight_held(gpu)
        self.preflight_read = bool(gpu.get("up") and gpu.get("snapshot"))

    def tick(self, now: float) -> None:
        """The snapshots that arrived since the last tick, to the phase they came in (a new
        `PhaseWatts` for each startup; the ready phase is "serving")."""
        gpu, pipe = self.stream, self.target.pipe if self.target is not None else None
        if gpu is None or pipe is None or gpu.version == self._watts_seen or \
                self.target is None or self.target.catching_up:
            return
        self._watts_seen = gpu.version
        st = pipe.state
        if st.phase in (WAITING, *TERMINAL) or st.startup_id is None or not gpu.up:
            return
        history = st.history
        began = history[0].at if history else None
        if self.watts.startup != st.startup_id:
            self.watts = PhaseWatts(st.startup_id)
            if not self._resume_scope(st.startup_id):
                self.scope.begin(next((s for s in reversed(gpu.snapshots)
                                       if began is not None and s.at < began), None))
        self.scope.expect = launch_gpus(st, pipe.pack.gpus)
        # the GPUs its lines name (NCCL's nvmlDev and busId), as nvidia-smi's indexes
        self.scope.hint = log_named(st.gpus, st.gpu_buses,
                                    gpu.snapshots[-1] if gpu.snapshots else None)
        last = self.watts.last_at
        changed = False
        for snap in gpu.snapshots:
            if (last is None or snap.at > last) and (began is None or snap.at >= began):
                changed = self.scope.see(snap) or changed
                self._add_watts(st, snap, history)
        if changed:      # the server's GPUs are known now: its phases' power is theirs only
            self.watts = PhaseWatts(st.startup_id)
            for snap in gpu.snapshots:
                if began is None or snap.at >= began:
                    self._add_watts(st, snap, history)

    def saved(self) -> dict[str, Any] | None:
        """The scope learned for the startup under way (none chosen by `devices`); the one
        the daemon before saved, as it was, until the first GPU sample takes it up.  Before,
        a checkpoint written from the lines read in between (nvidia-smi hung or slow after the
        restart) had none: a second restart began afresh, every GPU the server's for good."""
        if self.scope.devices:
            return None
        if self._resumed is not None:
            return self._resumed
        if self.watts.startup is None:
            return None
        return {"startup": self.watts.startup, "scope": self.scope.saved()}

    def resume(self, doc: dict[str, Any]) -> None:
        self._resumed = doc

    def _resume_scope(self, startup: str) -> bool:
        """The scope the daemon before learned for `startup`, if it saved one: a server
        already past its weights gains nothing more, so a restarted daemon that began afresh
        counted every GPU of the node for good."""
        doc, self._resumed = self._resumed, None
        if doc is None or doc.get("startup") != startup or self.scope.devices:
            return False
        try:
            if not isinstance(doc.get("scope"), dict):
                raise ValueError("gpu scope: not an object")
            self.scope.resume(doc["scope"])
        except (ValueError, TypeError, ArithmeticError) as e:   # a baseline of Infinity:
            if self.target is not None:                          # OverflowError in int()
                self.target.log.warning("saved gpu scope unreadable: learning it again",
                                        error=str(e))
            return False
        return True

    def _add_watts(self, st: State, snap: GpuSnapshot, history: list[Any]) -> None:
        phase = phase_at(st, snap.at, history)
        self.watts.add(SERVING if phase == READY else phase, self.scope.select(snap))

    # -- what the ledger reads (ledger.py `Power`) --------------------------------------------
    def phase_watts(self, startup: str | None) -> dict[str, dict[str, float]] | None:
        """The power per phase of `startup`, if it is the one measured."""
        return self.watts.summary() if startup is not None and startup == self.watts.startup \
            else None

    def serving_sample(self, seen: int) -> tuple[int, dict[str, Any]] | None:
        """(version, the latest snapshot of the server's GPUs) of a stream that is up, when
        its version is not `seen` (the one the caller has)."""
        gpu = self.stream
        if gpu is None or not gpu.up or gpu.latest is None or gpu.version == seen:
            return None
        return gpu.version, self.scope.select(gpu.latest).to_dict()

    # -- the view ----------------------------------------------------------------------------
    def view(self, now: float) -> GpuPart:
        return GpuPart(self._view(now) if self.stream is not None else self._final)

    def _view(self, now: float) -> dict[str, Any]:
        """The stream's state, the preflight, the power per phase of this startup and, while
        the log of a startup is silent, the silence's verdict (silence.py)."""
        gpu = self.stream
        assert gpu is not None and self.target is not None
        pipe = self.target.pipe
        out = {**gpu.to_dict(), "preflight": preflight_text(self.scope.held(self.preflight)),
               "scope": self.scope.to_json(),
               "preflight_read": self.preflight_read,
               "phases": self.watts.summary()
               if pipe is not None and self.watts.startup == pipe.state.startup_id else {},
               "silence": None}
        st = pipe.state if pipe is not None else None
        # only a silence of half the phase's stall budget or more gets a verdict (a startup
        # that prints every second has no silence to judge)
        if st is not None and pipe is not None and gpu.up and st.last_activity is not None \
                and st.phase not in (WAITING, READY, *TERMINAL) and not self.target.catching_up \
                and now - st.last_activity >= pipe.machine.stall_budget(st.phase) / 2:
            snaps = [self.scope.select(s) for s in gpu.snapshots if s.at >= now - 120.0]
            gone = [m for m in gpu.missing if not (n := _GPU_N.fullmatch(m)) or
                    self.scope.chosen_index(int(n.group(1)))]
            verdict = silence_verdict(snaps, st.last_activity, now, gpu.idle_w, gone=gone)
            out["silence"] = verdict.to_json() if verdict is not None else None
        return out

    def key(self) -> Any:
        return self.stream.version if self.stream is not None else None

    async def close(self) -> None:
        if self.stream is None:
            return
        self._final = self._view(clock.now())   # watch's summary still reads it
        stream, self.stream = self.stream, None
        await self.streams.release(stream)
