"""The launch ledger: one record per startup, with its flags, phases, outcome and serving.

Users compare launches by hand ("I set --max-running-requests 2048 and --disable-cuda-graph:
880 -> 3,740 tok/s"); the log holds all of it.  `LedgerRecorder` reads the pipeline's events
(the same events the daemon and `watch` get) and the machine's state, and closes a
`StartupRecord` when the startup is over: the next startup began, or the input ended.
Pure: no I/O (the SQLite store is state/ledger.py, the commands app/history.py).

Serving windows: the stats lines after ready, the first `WARMUP` seconds of them marked as
warm-up and left out of the figures (JIT, graph replays and the first requests are not the
steady state), unless nothing else was seen.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from .machine import CrashSettled, Event, Ready, StartupBegan, State, StatsUpdated, Stopped
from .rules.advice import Advice, advice_lines
from .rules.args import changed_args, changed_text
from .rules.pack import READY, TERMINAL

WARMUP = 60.0          # seconds after ready that are warm-up, not the steady state
MAX_SAMPLES = 20_000   # serving samples kept per startup (a day of stats lines at 4/s)
OUTCOMES = ("ready", "crashed", "stopped", "incomplete")


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo), 3)


SERVING_KEYS = ("gen_throughput", "running_requests", "queued_requests", "token_usage",
                "cuda_graph")   # the values a serving summary reads


@dataclass
class ServingWindow:
    """The serving lines of one startup after ready: per sample its log time, the values the
    summary reads (`SERVING_KEYS`) and which of them the line had, as one flat array of
    floats (STRIDE a sample).

    Not a list of (time, values) tuples: a tuple that holds a dict stays tracked by the
    garbage collector for good, and 500 serving targets add 10,000 a second; they made a
    full collection of the daemon's heap every ~4 s (~0.2 s each, a stall every target's
    lines waited through), and 20,000 samples a startup at 500 targets were gigabytes."""

    STRIDE = 2 + len(SERVING_KEYS)   # time, the values (0.0 when absent), presence bits

    ready_at: float | None = None
    data: array = field(default_factory=lambda: array("d"))

    def __len__(self) -> int:
        return len(self.data) // self.STRIDE

    def add(self, at: float | None, values: dict[str, float]) -> None:
        if at is None or len(self.data) >= MAX_SAMPLES * self.STRIDE:
            return
        get = values.get
        g, r, q, u, c = (get("gen_throughput"), get("running_requests"),
                         get("queued_requests"), get("token_usage"), get("cuda_graph"))
        self.data.extend((at, 0.0 if g is None else g, 0.0 if r is None else r,
                          0.0 if q is None else q, 0.0 if u is None else u,
                          0.0 if c is None else c,
                          (g is not None) | (r is not None) << 1 | (q is not None) << 2
                          | (u is not None) << 3 | (c is not None) << 4))

    def summary(self) -> dict[str, Any]:
        """{gen_throughput: {p50, max}, running_requests, queued_requests, token_usage: {max},
        no_cuda_graph_share, samples, warmup_samples, warmup_only}."""
        n, data, stride = len(self), self.data, self.STRIDE
        if not n:
            return {}
        times = data[0::stride]
        start = self.ready_at if self.ready_at is not None else times[0]
        steady = [i for i, t in enumerate(times) if t - start >= WARMUP]
        warm = n - len(steady)
        use = steady or range(n)
        out: dict[str, Any] = {"samples": len(use), "warmup_samples": warm,
                               "warmup_only": not steady}

        def column(key: str) -> list[float]:
            k = SERVING_KEYS.index(key)
            bit = 1 << k
            return [data[i * stride + 1 + k] for i in use
                    if int(data[i * stride + stride - 1]) & bit]

        for key in ("gen_throughput", "running_requests", "queued_requests"):
            xs = column(key)
            if key == "gen_throughput":
                xs = [x for x in xs if x > 0]   # a decode line of an idle server says 0
            if xs:
                out[key] = {"p50": percentile(xs, 0.5), "max": max(xs)}
        usage = column("token_usage")
        if usage:
            out["token_usage"] = {"max": max(usage)}
        graphs = column("cuda_graph")
        if graphs:
            out["no_cuda_graph_share"] = round(sum(1 for g in graphs if g < 0.5) / len(graphs), 3)
        return out


@dataclass
class StartupRecord:
    """One startup, as `logwatch history --json` prints it (one object per line)."""

    startup: str | None
    index: int                        # 1-based, in this source
    started_at: float | None          # the startup's first line (log time when it has one)
    engine: str
    model: str | None
    args: dict[str, Any]
    args_partial: bool
    outcome: str                      # ready | crashed | stopped | incomplete
    reason: str | None = None
    durations: dict[str, float] = field(default_factory=dict)
    startup_seconds: float | None = None   # launch to ready (launch to the end if never ready)
    slowest_phase: str | None = None
    serving: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, list[Any]] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)
    gpu: dict[str, Any] | None = None
    started_stamp: str | None = None  # the first line's timestamp as the log printed it
    # the GPUs' total power per phase, "serving" for ready ({phase: {p50_w, max_w, samples}}):
    # the live runner's (silence.PhaseWatts); none for a log read from a file
    watts: dict[str, dict[str, float]] = field(default_factory=dict)
    # ready, then crashed or stopped: how long it served (log time); None: never ready, or
    # serving still.  Its startup_seconds and durations stay the launch's to ready.
    served_seconds: float | None = None
    # its args hold a dump of every field (SGLang's `server_args=`): see `launch_changes`
    args_complete: bool = False
    version: str | None = None        # the engine's version, where the launch printed it
    # phases read at a first attach from lines without a timestamp (tqdm's and the hub's
    # bars only): how long they took is unknown, so they are not in `durations` (nor is
    # `startup_seconds`), and `started_at` is the file's last write then, at the latest
    untimed: list[str] = field(default_factory=list)
    # crashed: the phase it crashed in (the crash's `during`), and the data-parallel replica
    # whose phase that was where it ran ahead of the startup's (`DP2` out of memory capturing
    # while DP3 still loaded: durations end at loading_shards, `during` cuda_graph)
    during: str | None = None
    replica: str | None = None
    # ready with a part of it failed (State.degraded: a PD prefill server's bootstrap server)
    degraded: str | None = None

    @property
    def got_ready(self) -> bool:
        return self.outcome == "ready" or self.served_seconds is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _served(ready: float | None, end: float | None) -> float | None:
    """Seconds served: from `ready` to `end` (the same clock; None when either is unknown)."""
    return round(max(end - ready, 0.0), 3) if ready is not None and end is not None else None


def model_of(args: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The model a launch serves: the first of the pack's `model_flags` it has."""
    for key in keys:
        v = args.get(key)
        if isinstance(v, str) and v:
            return v
        if isinstance(v, list) and v and isinstance(v[0], str):
            return v[0]
    return None


class LedgerRecorder:
    """Builds the records of one source from its events, in order.

    `observe(events, state)` after each batch of events, which returns the records it
    closed; `finish(state)` at the end of the input.  `previous`: the last record of this
    source known before (the daemon's store), against which the first record's `changed` is
    computed.  A closed record is handed on, not kept: only the last is (the next one's
    `changed` needs it), so a server that restarts for weeks costs the same memory as one
    that started once (a 20,001-startup loop kept 450 MiB of records)."""

    def __init__(self, engine: str, previous: StartupRecord | None = None,
                 advice: tuple[Advice, ...] = (), model_flags: tuple[str, ...] = (),
                 previous_of: Callable[[str | None], StartupRecord | None] | None = None) -> None:
        self.engine = engine
        self.advice = advice            # the pack's `advice:` (engine knowledge as data)
        self.model_flags = model_flags  # the pack's `model_flags:`
        self.closed = 0                 # records closed so far
        self.previous = previous        # the last record closed (or known before)
        self.previous_of = previous_of  # the store's record before a startup (`_begin`)
        self._open: StartupRecord | None = None
        self._serving = ServingWindow()
        self._seen_args: dict[str, Any] | None = None   # the state's args object last copied
        self._gpu: list[tuple[float, float, float | None, tuple[str, ...]]] = []  # serving
        self._whole, self._written_at = False, None   # read_whole

    def observe(self, events: list[Event], state: State) -> list[StartupRecord]:
        """The records closed by these events (a new startup closes the one before).  Called
        after each step of the machine (`LogPipeline.on_step`), so `state` is the state right
        after these events."""
        if len(events) == 1 and type(events[0]) is StatsUpdated and self._open is not None:
            # a serving line (most steps): what the loop below does for it, without the loop
            self._serving.add(events[0].at, events[0].values)
            self._sync_open(state)
            return []
        closed: list[StartupRecord] = []
        for ev in events:
            if isinstance(ev, StartupBegan):
                if self._open is not None:
                    closed.append(self._close(state))
                self._begin(ev, state)
            elif self._open is None:
                if isinstance(ev, (Ready, StatsUpdated, CrashSettled, Stopped)):
                    self._begin(None, state)   # a log that shows no startup line
                else:
                    continue
            if isinstance(ev, Ready):
                rec = self._open
                assert rec is not None
                rec.outcome = "ready"
                rec.durations = _timed({k: v for k, v in ev.durations.items() if k != READY},
                                       rec.untimed)
                rec.startup_seconds = _took(ev.took, rec.untimed)
                rec.slowest_phase = ev.slowest_phase
                rec.degraded = state.degraded
                self._serving.ready_at = state.last_log_time
            elif isinstance(ev, StatsUpdated):
                self._serving.add(ev.at, ev.values)
            elif isinstance(ev, CrashSettled):
                rec = self._open
                assert rec is not None
                if rec.outcome == "ready":      # a crash while serving: not a slow startup
                    rec.served_seconds = _served(rec.startup_seconds, ev.elapsed)
                else:
                    rec.durations = _timed(dict(ev.durations), rec.untimed)
                    rec.startup_seconds = _took(ev.elapsed, rec.untimed)
                rec.outcome, rec.reason = "crashed", ev.crash.reason
                rec.during, rec.replica = ev.crash.during, ev.crash.ahead or None
            elif isinstance(ev, Stopped):
                rec = self._open
                assert rec is not None
                if rec.outcome == "incomplete":
                    rec.outcome = "stopped"
                elif rec.outcome == "ready" and state.last_log_time is not None \
                        and self._serving.ready_at is not None:
                    rec.served_seconds = _served(self._serving.ready_at, state.last_log_time)
        self._sync_open(state)
        return closed

    def _sync_open(self, state: State) -> None:
        rec = self._open
        if rec is not None and rec.startup == state.startup_id:
            self._sync_args(rec, state)
            rec.version = state.engine_version or rec.version
            if self._whole and state.spans:
                _mark_untimed(rec, state, self._written_at)
            if rec.outcome == "incomplete":   # kept: the next startup's reset would lose them
                rec.durations = _timed(state.durations(), rec.untimed)
            elif rec.outcome == "ready" and state.degraded:   # a part failed while it served
                rec.degraded = state.degraded

    def caught_up(self, state: State) -> None:
        """A first attach's lines are read and the state's spans retimed by the file's last
        write (machine `retime`).  The open startup starts no later than its retimed first
        line, and the phases whose spans have no stamp are `untimed`: before, a log of bars
        only (sglang-042, silent 50 minutes in loading_shards) was recorded as started when
        it was read, `loading_shards 0.0` (and a ready one `startup_seconds` ~0), where
        `watch` said `silent since 15:31` and `loading_shards 50m44s`."""
        rec = self._open
        if rec is not None and rec.startup == state.startup_id and state.spans:
            _mark_untimed(rec, state, None)

    def read_whole(self, written_at: float | None) -> None:
        """Every line is read at one moment (`logwatch history FILE`, offline: no catch-up
        step): every record's phases without a stamp are `untimed`, as `caught_up` marks
        the daemon's, and a stamp-less startup began by `written_at` (the file's last
        write; None: unknown) at the latest.  Before, sglang-042 read so was dated by the
        read time, `loading_shards: 0.0`, where the daemon's ledger said 15:31:46, untimed."""
        self._whole, self._written_at = True, written_at

    def resume(self, rec: StartupRecord) -> None:
        """Go on with a startup recorded before (a daemon restarted while it served): its
        outcome, durations and flags stay; serving samples start again."""
        self._open = StartupRecord(**{**rec.__dict__})
        self._serving = ServingWindow()
        self._gpu = []

    def add_gpu(self, snapshot: dict[str, Any]) -> None:
        """A GPU snapshot (the stream's `to_dict()["snapshot"]`) taken while the open startup
        serves: the record's `gpu` is summarised from them."""
        if self._open is None or self._open.outcome != "ready" or len(self._gpu) >= MAX_SAMPLES:
            return
        gpus = snapshot.get("gpus") or []
        power = sum(g.get("power_w") or 0.0 for g in gpus)
        limit = sum(g.get("power_limit_w") or 0.0 for g in gpus)
        utils = [g["util_ratio"] for g in gpus if g.get("util_ratio") is not None]
        # a tuple of strings, not a list: the sample is then not tracked by the garbage
        # collector (see ServingWindow)
        reasons = tuple(sorted({r for g in gpus for r in g.get("throttle_reasons") or []
                                if r != "idle"}))
        self._gpu.append((power, limit, sum(utils) / len(utils) if utils else None, reasons))

    def finish(self, state: State) -> list[StartupRecord]:
        """End of input: the open startup is closed as it stands."""
        if self._open is None:
            return []
        return [self._close(state)]

    def current(self, state: State) -> StartupRecord | None:
        """The open startup's record as it stands (the daemon saves it while it serves)."""
        if self._open is None:
            return None
        rec = StartupRecord(**{**self._open.__dict__})
        self._complete(rec, state)
        return rec

    # -- internals -----------------------------------------------------------------------------
    def _begin(self, ev: StartupBegan | None, state: State) -> None:
        startup = ev.startup if ev is not None else state.startup_id
        if self.closed == 0 and self.previous_of is not None:   # not itself, if read again
            self.previous = self.previous_of(startup)
        self._gpu = []
        self._open = StartupRecord(
            startup=startup,
            index=self.closed + 1,
            started_at=state.history[0].log_time if state.history and
            state.history[0].log_time is not None else
            (state.history[0].at if state.history else None),
            engine=self.engine, model=None, args={}, args_partial=False,
            outcome="incomplete",
            started_stamp=state.history[0].log_stamp if state.history else None)
        self._serving = ServingWindow()

    def _sync_args(self, rec: StartupRecord, state: State) -> None:
        if state.args and state.args is not self._seen_args:
            self._seen_args = state.args      # the machine replaces the dict when it changes
            rec.args = dict(state.args)
            rec.args_partial = state.args_partial
            rec.args_complete = state.args_complete
            rec.model = model_of(rec.args, self.model_flags)

    def _complete(self, rec: StartupRecord, state: State) -> None:
        if rec.outcome == "incomplete" and rec.startup == state.startup_id:
            rec.durations = _timed(state.durations(), rec.untimed)
            self._sync_args(rec, state)
        # a startup that served, even briefly, before it crashed or stopped keeps its figures
        # (a window shorter than WARMUP is marked `warmup_only`: shown as short)
        rec.serving = self._serving.summary() \
            if rec.outcome == "ready" or self._serving.ready_at is not None or len(self._serving) \
            else {}
        prev = self.previous
        if prev is not None:
            rec.changed = {k: [a, b] for k, (a, b) in launch_changes(prev, rec).items()}
        rec.advice = advice_lines(self.advice, rec.args, rec.outcome, rec.reason, rec.serving)
        if self._gpu:     # samples are taken while it serves: kept if it crashed after
            powers = [p for p, _, _, _ in self._gpu]
            utils = [u for _, _, u, _ in self._gpu if u is not None]
            rec.gpu = {"samples": len(self._gpu), "power_p50_w": percentile(powers, 0.5),
                       "power_max_w": max(powers), "power_limit_w": self._gpu[-1][1] or None,
                       "util_p50": percentile(utils, 0.5),
                       "throttle_reasons_seen": sorted({r for *_, rs in self._gpu for r in rs}),
                       "short": bool(rec.serving.get("warmup_only"))}

    def _close(self, state: State) -> StartupRecord:
        rec = self._open
        assert rec is not None
        self._complete(rec, state)
        self.closed += 1
        self.previous = rec
        self._open = None
        return rec


def _mark_untimed(rec: StartupRecord, state: State, written_at: float | None) -> None:
    """`rec` (the state's startup) as its log times say: started by its first line's time
    (`written_at` at the latest) where that line has no stamp, its phases of spans without
    a stamp `untimed` (out of `durations`, and `startup_seconds` unknown)."""
    hist = state.history
    if hist and hist[0].log_time is None and rec.started_at is not None:
        first = hist[0].at if written_at is None else min(hist[0].at, written_at)
        rec.started_at = min(rec.started_at, first)
    rec.untimed = sorted({sp.phase for sp in state.spans if sp.log_time is None
                          and sp.phase != READY and sp.phase not in TERMINAL})
    if rec.untimed:
        rec.durations = _timed(rec.durations, rec.untimed)
        rec.startup_seconds = None


def _timed(durations: dict[str, float], untimed: list[str]) -> dict[str, float]:
    """The durations the log's times say (not the `untimed` phases')."""
    return {k: v for k, v in durations.items() if k not in untimed} if untimed else durations


def _took(seconds: float | None, untimed: list[str]) -> float | None:
    """Launch to ready (or to the crash), unknown where a phase of it is `untimed`: a startup
    read at attach in a bar without stamps that got ready (or crashed) live after it was
    recorded `loading_shards 1h00m05s` and `untimed: ["loading_shards"]` at once (the
    phase's start is the file's last write at the latest, not a time the log gave)."""
    return None if untimed else seconds


def record_from_json(d: dict[str, Any]) -> StartupRecord:
    """A record read back (the store, `history --json` output)."""
    known = {f for f in StartupRecord.__dataclass_fields__}
    return StartupRecord(**{k: v for k, v in d.items() if k in known})


def launch_changes(prev: StartupRecord, cur: StartupRecord) -> dict[str, tuple[Any, Any]]:
    """The flags that changed from launch `prev` to `cur` (`changed_args`).  Only the flags both
    show are compared where a dump was cut (it lacks its tail), and where one is a dump of
    every field (SGLang's `server_args=`, vLLM's `Namespace(...)`): a field the other does not
    name is one only that dump's engine version has (SGLang 0.5.21 -> 0.5.23 added 28), or
    one at its default (a launch command line names only the flags given), not a flag the
    operator changed.  A new engine version (vLLM's version line) comes first, as
    `engine version` (no flag has a space in its name): the flags may be the same and the
    startup two minutes longer."""
    out: dict[str, tuple[Any, Any]] = {}
    if prev.version and cur.version and prev.version != cur.version:
        out[ENGINE_VERSION] = (prev.version, cur.version)
    if prev.args and cur.args:
        common = prev.args_partial or cur.args_partial or prev.args_complete or cur.args_complete
        out.update(changed_args(prev.args, cur.args, common_only=common))
    return out


ENGINE_VERSION = "engine version"   # `changed`'s key for a launch on another engine version


def vs_previous_text(prev: StartupRecord, cur: StartupRecord) -> str:
    """`watch` at ready: "vs the previous launch: +2m10s (autotune 41s, new); flags changed:
    max_running_requests 64 -> 2048, disable_cuda_graph False -> True"."""
    from .units import fmt_duration
    parts: list[str] = []
    a, b = prev.startup_seconds, cur.startup_seconds
    head = "vs the previous launch"
    if a is not None and b is not None:
        sign = "+" if b >= a else "-"
        notes = [f"{p} {fmt_duration(d)}, new" for p, d in cur.durations.items()
                 if p not in prev.durations and d >= 1.0]
        deltas = sorted(((d - prev.durations[p], p) for p, d in cur.durations.items()
                         if p in prev.durations), key=lambda x: -abs(x[0]))
        notes += [f"{p} {'+' if dd >= 0 else '-'}{fmt_duration(abs(dd))}"
                  for dd, p in deltas[:2] if abs(dd) >= max(1.0, 0.1 * abs(b - a))]
        parts.append(f"{head}: {sign}{fmt_duration(abs(b - a))}"
                     + (f" ({'; '.join(notes[:2])})" if notes else ""))
    else:
        parts.append(f"{head} ({prev.outcome})")
    changed = launch_changes(prev, cur)
    version = changed.pop(ENGINE_VERSION, None)
    if version:
        parts.append(f"engine version {version[0]} -> {version[1]}")
    if changed:
        parts.append("flags changed: " + changed_text(changed, limit=6, width=40))
    elif prev.args and cur.args:
        parts.append("same flags")
    served = served_text(prev)
    if served:
        parts.append(f"the previous served {served}")
    return "; ".join(parts)


def served_text(rec: StartupRecord) -> str:
    """"2,113 tok/s p50 at 5,120 W p50": what a launch served (the ledger's p50s), the figures
    a launch is compared on; "" when it never served."""
    g = (rec.serving or {}).get("gen_throughput") or {}
    tps = f"{g['p50']:,.0f} tok/s p50" if g.get("p50") is not None else ""
    w = (rec.gpu or {}).get("power_p50_w")
    watts = f"{w:,.0f} W p50" if w is not None else ""
    return f"{tps} at {watts}" if tps and watts else tps or watts
