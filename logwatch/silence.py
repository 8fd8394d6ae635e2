"""Hung or slow?  What the GPUs did while the log said nothing, in one verdict.

A startup that prints nothing for minutes is either working (a CUDA graph capture, an
autotune, weights copied in: slow, not hung) or stuck (a collective waiting on a dead rank, a
deadlock on the CPU side).  The log cannot tell; the GPUs can.  The verdict reads the
silence itself: the GPU snapshots taken since the last line (its last `VERDICT_WINDOW`
seconds when it is longer), per GPU:

- memory: gained `MEMORY_MOVING` or more over the recent half of that span -> `loading`
  (weights or the KV cache still arriving; memory that fell is no loading: a rank that
  exited gave it back, and "GPU 3 freed 61 GiB: its process exited?" is said);
- power at `AT_LIMIT` of the enforced limit or more -> `busy` (a board its operator capped
  at 300 W works at 290 W);
- utilisation at or above `SPIN_UTIL` while the power stays below `SPIN_CEILING` of the
  board's range above its idle power -> `spinning` (a kernel resident but doing nothing: an
  NCCL collective waiting for a rank: likely hung), or `throttled` when a `SLOWDOWN` reason
  holds the clocks down (a power brake runs work at near idle power too: slow or hung, it
  cannot tell); the range is up to the board's default limit (TDP) when the enforced one is
  capped below it (the chip's idle and spin power do not move with a cap);
- utilisation at or above `SPIN_UTIL` with the power or the limit unknown -> `unclear`
  (busy cannot be told from spinning);
- power at or above `BUSY_POWER` of that range, or utilisation at or above `WORK_UTIL` ->
  `busy` (slow, not hung);
- utilisation at most `IDLE_UTIL` and power within `NEAR_IDLE` of the range above idle ->
  `idle` (nothing reaches the GPU: hung before it, or waiting on the CPU side);
- anything else -> `partial`.

Idle power is the board's own: the lowest power the stream has seen it draw while idle
(`GpuStream.idle_w`, samples at utilisation <= `IDLE_UTIL`); a board never seen idle is
taken at `IDLE_FALLBACK` of its power limit.  Medians over the span, not the latest sample:
the first second after a line often still shows the work that printed it.

Only the server's GPUs are read (telemetry/gpu/scope.py), and of those, a GPU that holds no
memory (`EMPTY`) only when all do: an unused GPU idle beside a busy TP=4 is no stuck rank.
When the GPUs disagree, the ones that differ are named: 7 busy and 1 idle is a stuck rank
(`stuck_rank`, naming the idle GPU), and so is 7 spinning and 1 idle (the ranks in the
collective spin, the one that never came is idle); 1 busy and 7 idle is one rank working
alone (`mixed`).  Otherwise the kind of most GPUs; a tie goes to the first in `KINDS`.

Pure: snapshots in, a `SilenceVerdict` out; the runner computes it for its view, the alert
policy and `watch` read its text.  `PhaseWatts` keeps the power of each phase of a startup
for `watch`'s summary and the launch ledger.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .telemetry.gpu import IDLE_UTIL, GpuSample, GpuSnapshot
from .units import fmt_duration

GIB = 1024 ** 3
VERDICT_WINDOW = 60.0        # seconds of the silence read (its last minute when longer)
MEMORY_MOVING = 0.5 * GIB    # per GPU, gained within the recent half of the span: still loading
WORK_UTIL = 0.5              # utilisation of a GPU doing work (even at low power)
SPIN_UTIL = 0.9              # utilisation of a kernel that is resident ...
SPIN_CEILING = 0.35          # ... below this share of the range above idle power: spinning
BUSY_POWER = 0.5             # power at this share of the range above idle (or more): busy
AT_LIMIT = 0.9               # power at this share of the enforced limit (or more): busy (a
                             # board capped by its operator at 300 W works at 290 W)
NEAR_IDLE = 0.15             # power within this share of the range above idle: at idle
IDLE_FALLBACK = 0.15         # a board never seen idle: its idle power taken as this x limit
EMPTY = 0.25 * GIB           # a GPU holding less runs no process: never a stuck rank
FREED = 2 * GIB              # memory a GPU gave back in the span worth a word (a rank exited?)
#: clock-event reasons that hold a working board's clocks and power down (a PSU lost, heat):
#: its kernels run slowly at near idle power, which reads like a collective spinning
SLOWDOWN = frozenset({"hw_slowdown", "hw_power_brake", "sw_thermal", "hw_thermal"})
# kinds that say "slow, not hung"; `throttled` is neither (it cannot tell: `watch` gives it up
# as it does a silence without telemetry: a hung collective on a node with a lasting
# hw_slowdown was followed for good, review of 023bf1f, adv27 M2)
WORKING = ("loading", "busy")
NOT_WORKING = ("idle", "spinning")      # kinds that say "hung" when the others work
#: every kind, in the order that breaks a tie between as many GPUs of each: working before
#: hung (a verdict that says hung needs a majority), then the more specific sign first
#: (spinning: a collective waiting, before idle); never set order (it moved with the
#: PYTHONHASHSEED, and a restarted daemon said another verdict)
KINDS = ("loading", "busy", "throttled", "spinning", "idle", "partial", "unclear", "unknown")


@dataclass(frozen=True)
class GpuActivity:
    """One GPU over the span read: medians of power and utilisation, memory movement."""

    index: int
    kind: str                      # one of KINDS
    power_w: float | None
    limit_w: float | None
    idle_w: float | None           # the board's idle power (learned, or IDLE_FALLBACK x limit)
    idle_learned: bool
    util: float | None
    mem_moved: float               # bytes gained over the span (last - lowest, 0 when it fell)
    mem_recent: float              # bytes gained over its recent half
    samples: int
    mem_used: float | None = None  # bytes at the span's end
    mem_freed: float = 0.0         # bytes given back: the span's peak - its end
    throttle: tuple[str, ...] = () # SLOWDOWN reasons active in half the samples or more
    sm_clock_hz: float | None = None
    tdp_w: float | None = None     # the board's default power limit

    @property
    def empty(self) -> bool:
        """Holds no memory: no process of any server runs on it."""
        return self.mem_used is not None and self.mem_used < EMPTY

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind,
                "power_w": _r(self.power_w), "limit_w": _r(self.limit_w),
                "idle_w": _r(self.idle_w), "idle_learned": self.idle_learned,
                "util": _r(self.util, 3), "mem_moved_gib": round(self.mem_moved / GIB, 2),
                "mem_recent_gib": round(self.mem_recent / GIB, 2), "samples": self.samples,
                "mem_used_gib": None if self.mem_used is None else round(self.mem_used / GIB, 2),
                "mem_freed_gib": round(self.mem_freed / GIB, 2),
                "throttle": list(self.throttle), "tdp_w": _r(self.tdp_w)}


@dataclass(frozen=True)
class SilenceVerdict:
    """What the GPUs did during a silence: `kind` (a GpuActivity kind, or `stuck_rank` /
    `mixed` when they disagree), the words (`text`), the span read and the GPUs named."""

    kind: str
    text: str
    since: float                   # the silence began (wall clock)
    start: float                   # the span read: [start, now]
    now: float
    gpus: tuple[GpuActivity, ...] = ()
    named: tuple[int, ...] = ()    # the GPUs that differ from the others (a stuck rank)

    @property
    def working(self) -> bool:
        """The GPUs are working (loading or busy): slow, not hung."""
        return self.kind in WORKING or self.kind == "mixed"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "since": round(self.since, 3),
                "span_seconds": round(self.now - self.start, 1),
                "silent_seconds": round(self.now - self.since, 1),
                "working": self.working, "named": list(self.named),
                "gpus": [g.to_json() for g in self.gpus]}


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _gained(points: list[tuple[float, float]]) -> float:
    """Bytes held at the last point above the lowest before it (0 when it fell: memory given
    back by a rank that exited, or a health check's GiB freed again, is no loading; a KV
    cache freed then allocated again larger is: review of 023bf1f, adv27 M3)."""
    return max(0.0, points[-1][1] - min(m for _, m in points)) if len(points) >= 2 else 0.0


def classify(power: float | None, limit: float | None, idle: float | None,
             util: float | None, mem_recent: float, *, tdp: float | None = None,
             throttle: Iterable[str] = ()) -> str:
    """One GPU's kind from its medians (see the module docstring for the thresholds).
    `tdp`: the board's default limit, whose range above idle judges spinning when an
    operator capped the enforced `limit` below it; `throttle`: the SLOWDOWN reasons active."""
    if mem_recent >= MEMORY_MOVING:
        return "loading"
    top = max(limit, tdp) if limit and tdp else limit
    span = (top - idle) if top and idle is not None and top > idle else None
    if util is not None and util >= SPIN_UTIL and (power is None or span is None):
        return "unclear"                    # busy or spinning: only the power can tell
    if power is not None and limit and power >= AT_LIMIT * limit:
        return "busy"
    if util is not None and util >= SPIN_UTIL and power is not None and span is not None \
            and idle is not None and power < idle + SPIN_CEILING * span:
        # the clocks held down by the board run work at near idle power too
        return "throttled" if SLOWDOWN & set(throttle) else "spinning"
    if power is not None and span is not None and idle is not None and \
            power >= idle + BUSY_POWER * span:
        return "busy"
    if util is not None and util >= WORK_UTIL:
        return "busy"
    near_idle = power is None or span is None or idle is None or \
        power <= idle + NEAR_IDLE * span
    if (util is None or util <= IDLE_UTIL) and near_idle and (util is not None or power is not None):
        return "idle"
    if util is None and power is None:
        return "unknown"
    return "partial"


def _throttle(samples: list[tuple[float, GpuSample]]) -> tuple[str, ...]:
    """The SLOWDOWN reasons active in half the samples or more (sorted)."""
    known = [g.throttle_reasons for _, g in samples if g.throttle_mask is not None]
    return tuple(sorted(r for r in SLOWDOWN if 2 * sum(r in rs for rs in known) >= len(known) > 0))


def activity(index: int, samples: list[tuple[float, GpuSample]], start: float, now: float,
             idle_w: float | None) -> GpuActivity:
    """GPU `index` over its samples in [start, now] ((at, sample), oldest first)."""
    powers = [g.power_w for _, g in samples if g.power_w is not None]
    utils = [g.util_ratio for _, g in samples if g.util_ratio is not None]
    limits = [g.power_limit_w for _, g in samples if g.power_limit_w]
    tdps = [g.power_default_limit_w for _, g in samples if g.power_default_limit_w]
    clocks = [g.sm_clock_hz for _, g in samples if g.sm_clock_hz is not None]
    mem = [(at, float(g.mem_used_bytes)) for at, g in samples if g.mem_used_bytes is not None]
    mid = now - (now - start) / 2
    before = [p for p in mem if p[0] < mid]
    recent = ([before[-1]] if before else []) + [p for p in mem if p[0] >= mid]
    limit, tdp = (limits[-1] if limits else None), (tdps[-1] if tdps else None)
    learned = idle_w is not None
    idle = idle_w if learned else (IDLE_FALLBACK * limit if limit else None)
    power, util = _median(powers), _median(utils)
    moved, moving = _gained(mem), _gained(recent)
    throttle = _throttle(samples)
    kind = classify(power, limit, idle, util, moving, tdp=tdp, throttle=throttle)
    return GpuActivity(index, kind, power, limit, idle, learned, util, moved, moving,
                       len(samples), mem_used=mem[-1][1] if mem else None,
                       mem_freed=max(m for _, m in mem) - mem[-1][1] if mem else 0.0,
                       throttle=throttle, sm_clock_hz=_median(clocks), tdp_w=tdp)


def silence_verdict(snapshots: Iterable[GpuSnapshot], since: float, now: float,
                    idle_w: dict[int, float] | None = None,
                    window: float = VERDICT_WINDOW,
                    gone: Sequence[str] = ()) -> SilenceVerdict | None:
    """The verdict on the silence that began at `since` (wall clock, the same clock as the
    snapshots' `at`), read over its last `window` seconds.  None without a snapshot in it.
    `gone`: the GPUs nvidia-smi no longer reports (`GpuStream.missing`), said after it."""
    start = max(since, now - window)
    per_gpu: dict[int, list[tuple[float, GpuSample]]] = {}
    for s in snapshots:
        if start <= s.at <= now:
            for g in s.gpus:
                per_gpu.setdefault(g.index, []).append((s.at, g))
    if not per_gpu:
        return None
    idle_w = idle_w or {}
    gpus = tuple(activity(i, per_gpu[i], start, now, idle_w.get(i)) for i in sorted(per_gpu))
    kind, text, named = _words(gpus, now - start)
    if gone:      # a GPU fallen off the bus: the rank on it is dead, whatever the rest do
        text += f"; not answering: {'; '.join(gone)[:240]} (fallen off the bus? Xid 79)"
    return SilenceVerdict(kind, text, since, start, now, gpus, named)


# -- words ------------------------------------------------------------------------------------

def _which(gpus: Sequence[GpuActivity]) -> str:
    """"GPU 3", "GPUs 3, 5" (the indexes of a few GPUs)."""
    idx = [str(g.index) for g in gpus]
    return f"GPU {idx[0]}" if len(idx) == 1 else f"GPUs {', '.join(idx)}"


def _subject(gpus: Sequence[GpuActivity]) -> str:
    return "GPU" if len(gpus) == 1 else f"{len(gpus)} GPUs"


def _mean(xs: Iterable[float | None]) -> float | None:
    vs = [x for x in xs if x is not None]
    return sum(vs) / len(vs) if vs else None


def _watts(gpus: Sequence[GpuActivity], idle: bool = False) -> str:
    """"691 W of 700 W" (per GPU: the mean of the GPUs' medians; "each" for several)."""
    power, limit = _mean(g.power_w for g in gpus), _mean(g.limit_w for g in gpus)
    if power is None:
        return "power unknown"
    out = f"{power:.0f} W" + (f" of {limit:.0f} W" if limit else "")
    out += " each" if len(gpus) > 1 else ""
    if idle:
        idle_w = _mean(g.idle_w for g in gpus if g.idle_learned)
        if idle_w is not None:
            out += f", idle {idle_w:.0f} W"
    return out


def _util(gpus: Sequence[GpuActivity]) -> str:
    u = _mean(g.util for g in gpus)
    return "" if u is None else f"util {u:.0%}"


def _memory(gpus: Sequence[GpuActivity], span: float) -> str:
    moved = max((g.mem_moved for g in gpus), default=0.0)
    if moved >= MEMORY_MOVING:
        return f"memory +{moved / GIB:.1f} GiB early on, flat for the last {fmt_duration(span / 2)}"
    return "memory flat"


def _throttle_text(gpus: Sequence[GpuActivity]) -> str:
    """"hw_power_brake, hw_slowdown; SM 345 MHz"."""
    reasons = sorted({r for g in gpus for r in g.throttle})
    sm = _mean(g.sm_clock_hz for g in gpus)
    return ", ".join(reasons) + (f"; SM {sm / 1e6:.0f} MHz" if sm is not None else "")


def _kind_text(kind: str, gpus: Sequence[GpuActivity], span: float) -> str:
    who = _subject(gpus)
    util = _util(gpus)
    mem = _memory(gpus, span)
    if kind == "loading":
        recent = max(g.mem_recent for g in gpus)
        return (f"GPU memory still moving (+{recent / GIB:.1f} GiB in the last "
                f"{fmt_duration(span / 2)}): loading, not hung")
    if kind == "busy":
        return f"{who} busy ({_watts(gpus)}, {util + ', ' if util else ''}{mem}): slow, not hung"
    if kind == "throttled":
        return (f"{who} throttled ({_throttle_text(gpus)}) at {util or 'full util'} and "
                f"{_watts(gpus)}, {mem}: the board holds the clocks down, so busy cannot be "
                "told from waiting (slow if the work runs on)")
    if kind == "unclear":
        known = "power" if any(g.power_w is not None for g in gpus) else ""
        return (f"{who} at {util}, {known + ' of an unknown limit' if known else 'power unknown'}"
                f", {mem}: cannot tell busy from spinning (a collective waiting)")
    if kind == "spinning":
        return (f"{who} at {util or 'full util'} but near idle power ({_watts(gpus, idle=True)}), "
                f"{mem}: likely hung (a collective waiting: NCCL / graph capture)")
    if kind == "idle":
        return (f"{who} idle ({_watts(gpus, idle=True)}; {util + ', ' if util else ''}{mem}): "
                "hung before the GPU, or waiting on the CPU side")
    if kind == "partial":
        return f"{who} {util + ', ' if util else ''}{_watts(gpus)}, {mem}: neither busy nor idle"
    return f"{who}: no power or utilisation reported"


def _stuck(stopped: Sequence[GpuActivity], others: Sequence[GpuActivity], doing: str
           ) -> tuple[str, str, tuple[int, ...]]:
    """A minority `stopped` while the `others` do `doing` ("busy", "spin in a collective"):
    a stuck rank, named."""
    what = "idle" if all(g.kind == "idle" for g in stopped) else "near idle power"
    util = _util(stopped)
    n = len(others)
    text = (f"{_which(stopped)} {what} ({_watts(stopped)}{', ' + util if util else ''}) "
            f"while {n} GPU{'s' if n > 1 else ''} {'are' if n > 1 else 'is'} {doing} "
            f"({_watts(others)}): a stuck rank ({_which(stopped)})")
    return "stuck_rank", text, tuple(g.index for g in stopped)


def _disagree(gpus: Sequence[GpuActivity]) -> tuple[str, str, tuple[int, ...]] | None:
    """GPUs that differ, named: a minority stopped while the others work (or all spin in a
    collective: the rank that never came is idle) is a stuck rank; one rank working while
    more wait is `mixed`."""
    working = [g for g in gpus if g.kind in WORKING]
    stopped = [g for g in gpus if g.kind in NOT_WORKING]
    if working and stopped:
        if len(stopped) <= len(working):
            return _stuck(stopped, working, "busy")
        text = (f"{_which(working)} busy alone ({_watts(working)}) while {len(stopped)} GPUs "
                f"wait ({_watts(stopped)}): one rank working, the others waiting for it "
                "(slow, not hung, unless it never ends)")
        return "mixed", text, tuple(g.index for g in working)
    spinning = [g for g in gpus if g.kind == "spinning"]
    idle = [g for g in gpus if g.kind == "idle"]
    if spinning and idle and len(idle) < len(spinning):
        return _stuck(idle, spinning, "spinning in a collective")
    return None


def _freed(gpus: Sequence[GpuActivity]) -> str:
    """"; GPU 3 freed 61 GiB: its process exited?" (memory given back during the silence)."""
    gone = [g for g in gpus if g.mem_freed >= FREED and g.kind != "loading"]
    if not gone:
        return ""
    most = max(g.mem_freed for g in gone) / GIB
    if len(gone) == 1:
        return f"; {_which(gone)} freed {most:.0f} GiB: its process exited?"
    return f"; {_which(gone)} freed up to {most:.0f} GiB each: their processes exited?"


def _words(gpus: tuple[GpuActivity, ...], span: float) -> tuple[str, str, tuple[int, ...]]:
    """(kind, text, GPUs named) for the GPUs together.  GPUs that hold no memory (unused,
    or a rank that exited) are left out while any other holds some: an unused GPU idle is
    no stuck rank, and it does not outvote the server's."""
    held = [g for g in gpus if not g.empty]
    pool = held if held and len(held) < len(gpus) else list(gpus)
    out = _disagree(pool)
    if out is None:
        kinds = [g.kind for g in pool]
        kind = max(KINDS, key=lambda k: (kinds.count(k), -KINDS.index(k)))
        same = [g for g in pool if g.kind == kind]
        text = _kind_text(kind, same, span)
        if len(same) < len(pool):
            others = [g for g in pool if g.kind != kind]
            text += f" ({_which(others)}: {', '.join(k for k in KINDS if k in kinds and k != kind)})"
        out = (kind, text, ())
    kind, text, named = out
    left = [g for g in gpus if g not in pool and g.mem_freed < FREED]
    if left:
        text += f" ({_which(left)} hold{'s' if len(left) == 1 else ''} no memory: not read)"
    return kind, text + _freed(gpus), named


# -- the power of each phase ------------------------------------------------------------------

SERVING = "serving"          # the ready phase's name in the per-phase watts
PHASE_SAMPLES = 2048         # values kept per phase (then every other one: a fixed memory)


@dataclass
class _Series:
    values: list[float] = field(default_factory=list)
    stride: int = 1
    seen: int = 0
    peak: float = 0.0
    mem_first: float | None = None   # the GPUs' memory in use at the phase's first sample
    mem_last: float | None = None    # ... and at its latest

    def add(self, w: float) -> None:
        self.peak = max(self.peak, w)
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        self.values.append(w)
        if len(self.values) >= PHASE_SAMPLES:
            self.values = self.values[::2]
            self.stride *= 2


class PhaseWatts:
    """The server's GPUs' total power (the host's until they are known) during each phase of one startup (`startup`): p50 and max
    per phase, for `watch`'s summary and the launch ledger ("autotune at 690 W").  Bounded:
    at most PHASE_SAMPLES values per phase (the max is exact)."""

    def __init__(self, startup: str | None) -> None:
        self.startup = startup
        self._series: dict[str, _Series] = {}
        self.limit_w: float | None = None
        self.gpus = 0
        self.last_at: float | None = None   # the last snapshot added (each is added once)

    def add(self, phase: str, snap: GpuSnapshot) -> None:
        self.last_at = snap.at if self.last_at is None else max(self.last_at, snap.at)
        total = snap.total_power_w
        if total is None:
            return
        limits = [g.power_limit_w for g in snap.gpus if g.power_limit_w]
        if limits:
            self.limit_w = sum(limits)
        self.gpus = max(self.gpus, snap.count)
        series = self._series.setdefault(phase, _Series())
        series.add(total)
        mem = [g.mem_used_bytes for g in snap.gpus if g.mem_used_bytes is not None]
        if mem:
            series.mem_last = float(sum(mem))
            if series.mem_first is None:
                series.mem_first = series.mem_last

    def summary(self) -> dict[str, dict[str, float]]:
        """{phase: {p50_w, max_w, samples, gpus (the total's GPUs), memory_gib (the change over
        the phase)}} in the order the phases came."""
        out: dict[str, dict[str, float]] = {}
        for phase, s in self._series.items():
            if s.values:
                out[phase] = {"p50_w": round(statistics.median(s.values), 1),
                              "max_w": round(s.peak, 1), "samples": s.seen,
                              "gpus": self.gpus}
                if s.mem_first is not None and s.mem_last is not None:
                    out[phase]["memory_gib"] = round((s.mem_last - s.mem_first) / GIB, 1)
        return out


def phase_watts_text(phases: dict[str, dict[str, float]] | None) -> str:
    """"loading_shards p50 129 W / max 130 W · cuda_graph p50 691 W / max 694 W", and "(total
    of 4 GPUs)" for several: the watts are the sum over the server's GPUs, not one board's."""
    if not phases:
        return ""
    n = max((int(v.get("gpus") or 0) for v in phases.values()), default=0)
    total = f" (total of {n} GPUs)" if n > 1 else ""
    def one(p: str, v: dict[str, float]) -> str:
        mem = v.get("memory_gib")
        moved = f", memory {mem:+.1f} GiB" if mem is not None and abs(mem) >= MEMORY_MOVING / GIB \
            else ""
        return f"{p} p50 {v['p50_w']:.0f} W / max {v['max_w']:.0f} W{moved}"
    return " · ".join(one(p, v) for p, v in phases.items()) + total


# -- the end of a stall -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Resumed:
    """Lines came again after a stall: the stall is over (its alert resolves).  Emitted by the
    live runner beside the machine's events (the machine only forgets its `stalled` flag); a
    new silence must last `stall_after` again to be a new stall, with its own alert."""

    epoch: int
    phase: str
    silent_for: float
    startup: str | None = None
