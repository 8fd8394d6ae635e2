"""Prometheus exposition: every DESIGN.md metric, read from the targets at scrape time.

A custom collector rather than metric objects updated on every line: the hot path stays
free of metric bookkeeping, a scrape sees one consistent snapshot, and every series exists
from the start (a dashboard sees 0, not "no data").  Series are never expired: a removed
target disappears on reload, nothing else does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Protocol

from prometheus_client.utils import floatToGoString

from .. import clock
from ..counters import DURATION_BUCKETS
from ..limits import REFUSED
from ..rules.pack import CRASH_REASONS, CRASHED, READY
from ..state.files import STATE_ERRORS
from ..view import TargetView
from .alerts.kinds import KIND_NAMES
from .alerts.model import AlertCounts

REFUSED_KINDS = ("ssh_frame", "ssh_protocol", "ssh_output")   # every series exists from the start
SERVING = {
    "gen_throughput": ("logwatch_gen_throughput_tokens_per_second",
                       "generation throughput from the serving log lines (tokens/s)"),
    "running_requests": ("logwatch_running_requests", "requests being decoded"),
    "queued_requests": ("logwatch_queued_requests", "requests waiting in the queue"),
    "token_usage": ("logwatch_token_usage_ratio", "KV cache token usage (0..1)"),
}


class AlertStats(Protocol):
    """What the alert delivery tells about itself (sent / failed per sink)."""

    def sink_kinds(self) -> dict[str, tuple[str, ...]]: ...

    def counts(self) -> AlertCounts: ...


_GO_FLOATS: dict[float, str] = {}


def _go_float(x: float) -> str:
    """`floatToGoString`, remembered: most samples are the same few values (0, 1, counts
    that did not move), and /metrics writes hundreds of thousands of them at 500 targets."""
    s = _GO_FLOATS.get(x)
    if s is not None and (x or math.copysign(1.0, x) > 0):   # -0.0 is a key of 0.0
        return s
    if len(_GO_FLOATS) >= 4096:
        _GO_FLOATS.clear()
    s = floatToGoString(x)
    if x or math.copysign(1.0, x) > 0:
        _GO_FLOATS[x] = s
    return s


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(pairs)) + "}"


@dataclass(frozen=True, slots=True)
class Counted:
    """The series of a target that move with every line (`COUNTED`), read without a view:
    at 500 serving targets nearly every target has new lines at every scrape, and building
    each one's view and all its samples again is most of a scrape."""

    lines: int
    bytes: int
    rule_matches: dict[str, int]     # read, never kept: the counts of this moment
    rules: tuple[str, ...]           # every rule of the pack (each series exists at 0)
    stats: dict[str, float] | None   # the serving values while ready, else None
    last_line_at: float | None


COUNTED = ("logwatch_lines_total", "logwatch_rule_matches_total",
           "logwatch_last_line_timestamp_seconds", *(fam for fam, _ in SERVING.values()),
           "logwatch_bytes_read_total")


def counted_of(v: TargetView) -> Counted:
    """`Counted` as a view has it."""
    return Counted(v.counters.lines, v.counters.bytes, v.counters.rule_matches, v.rules,
                   v.stats if v.phase == READY else None, v.last_line_at)


class CountedLines:
    """One target's `COUNTED` samples, a rule's line written again only when its count moved
    (a serving target moves one or two of its pack's ~60 rules between scrapes)."""

    def __init__(self, name: str) -> None:
        self.tl = f'target="{_esc(name)}"'
        self.one = "{" + self.tl + "}"
        self._rules: dict[str, tuple[int, str]] = {}

    def render(self, c: Counted) -> dict[str, str]:
        one, val = self.one, _go_float
        have = self._rules
        rules = []
        for rid in c.rules:
            n = c.rule_matches.get(rid, 0)
            line = have.get(rid)
            if line is None or line[0] != n:
                line = have[rid] = (n, f'logwatch_rule_matches_total{{rule="{_esc(rid)}",'
                                       f"{self.tl}}} {val(float(n))}\n")
            rules.append(line[1])
        out = {"logwatch_lines_total": f"logwatch_lines_total{one} {val(float(c.lines))}\n",
               "logwatch_rule_matches_total": "".join(rules),
               "logwatch_last_line_timestamp_seconds":
                   f"logwatch_last_line_timestamp_seconds{one} {val(c.last_line_at or 0.0)}\n"}
        for k, (fam, _) in SERVING.items():
            x = c.stats.get(k) if c.stats is not None else None
            out[fam] = f"{fam}{one} {val(float(x) if x is not None else math.nan)}\n"
        out["logwatch_bytes_read_total"] = \
            f"logwatch_bytes_read_total{one} {val(float(c.bytes))}\n"
        return out


def target_lines(v: TargetView) -> dict[str, str]:
    """Every per-target sample of one target but the `COUNTED` ones, by exposed family name
    (each value: its lines, newline-terminated).  Built only when the target changed
    (`MetricsCache`)."""
    t = v.name
    tl = f'target="{_esc(t)}"'
    one = "{" + tl + "}"
    out: dict[str, list[str]] = {}

    def add(fam: str, line: str) -> None:
        out.setdefault(fam, []).append(line)

    val = _go_float

    if v.gpu is not None:
        _gpu_lines(add, v.gpu, tl, one)
    add("logwatch_last_startup_seconds", f"logwatch_last_startup_seconds{one} "
        f"{val(v.last_startup_seconds if v.last_startup_seconds is not None else math.nan)}")
    pr = v.probe
    if pr is not None and pr.get("up") is not None:
        add("logwatch_probe_up", f"logwatch_probe_up{one} {val(1.0 if pr['up'] else 0.0)}")
        if pr.get("duration") is not None:
            add("logwatch_probe_duration_seconds",
                f"logwatch_probe_duration_seconds{one} {val(float(pr['duration']))}")
    _phase_lines(add, v, tl, one)
    sh = v.shards
    add("logwatch_shards_loaded", f"logwatch_shards_loaded{one} "
        f"{val(float(sh.loaded) if sh else 0.0)}")
    add("logwatch_shards_total", f"logwatch_shards_total{one} {val(float(sh.total) if sh else 0.0)}")
    add("logwatch_shards_to_load", f"logwatch_shards_to_load{one} "
        f"{val(float(sh.total) if sh else 0.0)}")
    add("logwatch_shard_load_rate", f"logwatch_shard_load_rate{one} "
        f"{val(float(sh.rate) if sh and sh.rate else 0.0)}")
    add("logwatch_startup_eta_seconds", f"logwatch_startup_eta_seconds{one} {val(v.eta_seconds)}")
    _counter_lines(add, v, tl, one)
    info = [("engine", v.engine), ("source", v.kind), ("target", t), *v.labels.items()]
    add("logwatch_target_info", f"logwatch_target_info{_labels(info)} 1.0")
    return {k: "\n".join(lines) + "\n" for k, lines in out.items()}


# how target_lines' parts add a sample: (family, its line)
Add = Callable[[str, str], None]


def _gpu_lines(add: Add, gpu: dict[str, Any], tl: str, one: str) -> None:
    """GPU telemetry: up, then each GPU's gauges and throttle reasons (while it answers)."""
    val = _go_float
    add("logwatch_gpu_up", f"logwatch_gpu_up{one} {val(1.0 if gpu.get('up') else 0.0)}")
    snap = gpu.get("snapshot") if gpu.get("up") else None
    for sample in (snap or {}).get("gpus", ()):
        idx = _esc(str(sample.get("index")))
        for name, _, key, scale in GPU_GAUGES:
            x = sample.get(key)
            if x is not None:
                add(name, f'{name}{{gpu="{idx}",{tl}}} {val(float(x) * scale)}')
        for reason, on in sorted((sample.get("throttled") or {}).items()):
            add("logwatch_gpu_throttled", f'logwatch_gpu_throttled{{gpu="{idx}",'
                f'reason="{_esc(reason)}",{tl}}} {val(float(on))}')


def _phase_lines(add: Add, v: TargetView, tl: str, one: str) -> None:
    """The current phase (one series per phase of the pack), when it and the startup began,
    the seconds in each phase, ready."""
    val = _go_float
    cur = v.phase
    for p in v.phases:
        add("logwatch_phase", f'logwatch_phase{{phase="{_esc(p)}",{tl}}} '
            f"{'1.0' if p == cur else '0.0'}")
    add("logwatch_phase_entered_timestamp_seconds",
        f"logwatch_phase_entered_timestamp_seconds{one} "
        f"{val(v.phase_entered_at if v.phase_entered_at is not None else v.started_at)}")
    # seconds in each phase of the current startup: the sum of the phase's spans (a phase
    # that came back counts both; one beside another counts its own time)
    for p, secs in v.durations.items():
        if p != READY:
            add("logwatch_phase_duration_seconds", f'logwatch_phase_duration_seconds{{'
                f'phase="{_esc(p)}",{tl}}} {val(float(secs))}')
    add("logwatch_startup_started_timestamp_seconds",
        f"logwatch_startup_started_timestamp_seconds{one} {val(v.startup_started_at or 0.0)}")
    add("logwatch_ready", f"logwatch_ready{one} {'1.0' if cur == READY else '0.0'}")
    # serving without a part of itself (a `degrades` line, before or after the ready): the
    # `degraded` of /api/status, for the shipped LogwatchServerDegraded rule
    add("logwatch_degraded", f"logwatch_degraded{one} "
        f"{'1.0' if v.serving_degraded else '0.0'}")
    reason = v.crash.get("reason") if cur == CRASHED and v.crash else None
    if reason:
        add("logwatch_crash_reason", f'logwatch_crash_reason{{reason="{_esc(str(reason))}",'
            f"{tl}}} 1.0")


def _counter_lines(add: Add, v: TargetView, tl: str, one: str) -> None:
    """Startups, crashes by reason, the startup-duration histogram, the source's state and
    counters."""
    val = _go_float
    cn = v.counters
    add("logwatch_startups_total", f"logwatch_startups_total{one} {val(float(cn.startups))}")
    for reason in (*CRASH_REASONS, *(r for r in cn.crashes if r not in CRASH_REASONS)):
        add("logwatch_crashes_total", f'logwatch_crashes_total{{reason="{_esc(reason)}",{tl}}} '
            f"{val(float(cn.crashes.get(reason, 0)))}")
    acc = 0
    name = "logwatch_startup_duration_seconds"
    for b, n in zip(DURATION_BUCKETS, cn.duration_buckets):
        acc += n
        add(name, f'{name}_bucket{{le="{_fmt(b)}",{tl}}} {val(float(acc))}')
    acc += cn.duration_buckets[-1]
    add(name, f'{name}_bucket{{le="+Inf",{tl}}} {val(float(acc))}')
    add(name, f"{name}_count{one} {val(float(acc))}")
    add(name, f"{name}_sum{one} {val(float(cn.duration_sum))}")
    add("logwatch_source_up", f"logwatch_source_up{one} {'1.0' if v.source_up else '0.0'}")
    for state in SOURCE_STATES:
        add("logwatch_source_state", f'logwatch_source_state{{state="{state}",{tl}}} '
            f"{'1.0' if v.source_state == state else '0.0'}")
    add("logwatch_stalled", f"logwatch_stalled{one} {'1.0' if v.stalled else '0.0'}")
    for fam, x in (("logwatch_source_reconnects_total", cn.reconnects),
                   ("logwatch_source_rotations_total", cn.rotations),
                   ("logwatch_bytes_skipped_total", cn.bytes_skipped),
                   ("logwatch_source_losses_total", cn.source_losses),
                   ("logwatch_lines_cut_total", cn.lines_cut),
                   ("logwatch_rule_errors_total", cn.rule_errors)):
        add(fam, f"{fam}{one} {val(float(x))}")


def _families() -> list[tuple[str, str, str]]:
    """Every family: (exposed name, type, help), in exposition order.

    Long because: one table, a row per family; split, the exposition order would be spread
    over several functions.
    """
    fams = [("logwatch_gpu_up", "gauge", "1 while the target's GPU telemetry (nvidia-smi on its "
             "host) answers")]
    fams += [(name, "gauge", doc) for name, doc, _, _ in GPU_GAUGES]
    fams += [
        ("logwatch_gpu_throttled", "gauge", "1 per clock throttle reason active on the GPU "
         "(idle, sw_power_cap, hw_slowdown, ...)"),
        ("logwatch_last_startup_seconds", "gauge", "launch to ready of the target's last "
         "startup that got ready (NaN before any; the launch ledger)"),
        ("logwatch_probe_up", "gauge", "the server's own endpoint answered the last probe "
         "(2xx on every path of its pack, or 401 / 403 asking for its API key where another "
         "answered 2xx; absent until probed)"),
        ("logwatch_probe_duration_seconds", "gauge", "how long the last probe of the server's "
         "endpoint took"),
        ("logwatch_phase", "gauge", "1 for the current phase of the target, 0 for the others"),
        ("logwatch_phase_entered_timestamp_seconds", "gauge",
         "when the current phase began (unix time)"),
        ("logwatch_phase_duration_seconds", "gauge", "seconds in each phase of the current "
         "startup so far: the sum of the phase's spans"),
        ("logwatch_startup_started_timestamp_seconds", "gauge",
         "when the current startup began (unix time; 0 before any)"),
        ("logwatch_ready", "gauge", "1 when the server is ready (serving)"),
        ("logwatch_degraded", "gauge", "1 while the server serves without a part of itself "
         "(a degrades rule's line: SGLang PD's KV bootstrap server down or its KV "
         "transfers timing out, vLLM's NIXL transfers or KV loads failing; /api/status "
         "degraded)"),
        ("logwatch_crash_reason", "gauge", "1 for the reason of the crash the server is in "
         "now (no series unless crashed): the shipped LogwatchServerCrashed rule joins "
         "crashes_total on it"),
        ("logwatch_shards_loaded", "gauge", "checkpoint shards loaded"),
        # a gauge in meaning, typed counter so that the DESIGN.md name `logwatch_shards_total`
        # passes `promtool check metrics` (which rejects the _total suffix on other types);
        # kept for dashboards that use it, `logwatch_shards_to_load` is the same value, typed
        # as what it is (it goes down at a new startup of a smaller model: rate() is wrong)
        ("logwatch_shards_total", "counter", "deprecated: use logwatch_shards_to_load (a "
         "gauge; typed counter only for its _total name)"),
        ("logwatch_shards_to_load", "gauge", "checkpoint shards to load (the bar's N; 0 "
         "before a startup says)"),
        ("logwatch_shard_load_rate", "gauge", "shards loaded per second (smoothed)"),
        ("logwatch_startup_eta_seconds", "gauge", "estimated seconds until ready (NaN when "
         "unknown)"),
        ("logwatch_startups_total", "counter", "startups seen (new server processes in the log)"),
        ("logwatch_crashes_total", "counter", "crashes by reason"),
        ("logwatch_startup_duration_seconds", "histogram", "from launch to ready"),
        ("logwatch_lines_total", "counter", "log lines read"),
        ("logwatch_rule_matches_total", "counter", "lines matched, by rule"),
        ("logwatch_source_up", "gauge", "1 while the source is connected / open"),
        ("logwatch_source_state", "gauge", "1 for the source's state: up (reading), waiting "
         "(the log or its node is not there yet: not an error), error (failing, retried), "
         "fatal (refused: retried on SIGHUP and every few minutes)"),
        ("logwatch_stalled", "gauge", "1 while the current startup is stalled (a startup "
         "phase silent past its budget; its shard rate is stale then)"),
        ("logwatch_last_line_timestamp_seconds", "gauge", "when the last line arrived"),
        *((name, "gauge", doc) for name, doc in SERVING.values()),
        ("logwatch_bytes_read_total", "counter", "log bytes read"),
        ("logwatch_source_reconnects_total", "counter",
         "times the source went down and came back"),
        ("logwatch_source_rotations_total", "counter", "log files switched to (rotation, "
         "truncation, recreation)"),
        ("logwatch_bytes_skipped_total", "counter", "log bytes a source knows it could not read "
         "(a log rotated away while disconnected, its old file gone): a lower bound"),
        ("logwatch_source_losses_total", "counter",
         "times a source knew it lost part of the log"),
        ("logwatch_lines_cut_total", "counter", "over-long lines truncated"),
        ("logwatch_rule_errors_total", "counter", "rule evaluations that failed (timeouts)"),
        ("logwatch_position_age_seconds", "gauge", "seconds since the read position was saved"),
        ("logwatch_target_info", "gauge", "static labels of a target"),
    ]
    return fams


class MetricSource(Protocol):
    """A target as /metrics reads it: a cheap key that changes whenever any of its series
    but the `COUNTED` ones may have changed, its view (built only then), the `COUNTED` ones
    and its position's age (both read at every scrape).  `counted()` None: its counts are
    not known (a target that could not be started): none of its counters is exported, as
    0 they would be a reset (the next start's counts counted again by `increase()`)."""

    name: str

    def metrics_key(self, now: float) -> Hashable: ...

    def counted(self) -> Counted | None: ...

    def view(self, now: float) -> TargetView: ...

    def position_age(self) -> float: ...


class MetricsCache:
    """/metrics built incrementally: each target's samples are rendered when its key changes
    and reused otherwise, so a scrape of 1,000 targets that did not change joins strings;
    `logwatch_position_age_seconds` (moves every second) is written fresh, and the `COUNTED`
    series (they move with every line) from counts read at each scrape, without a view."""

    def __init__(self) -> None:
        self.families = _families()
        self._counted = frozenset(COUNTED)
        self._counters = frozenset(n for n, typ, _ in self.families if typ != "gauge")
        self._blocks: dict[str, tuple[Hashable, dict[str, str], CountedLines]] = {}
        self.rebuilt = 0          # target blocks rendered (tests and the bench read it)

    def render(self, sources: list[MetricSource], alerts: AlertStats | None,
               now: float | None = None, *, subset: bool = False) -> bytes:
        """The exposition of `sources`.  `subset` (``/metrics?target=``): those targets only,
        without the daemon's own families, and the other targets' blocks are kept for the
        next full scrape."""
        now = clock.now() if now is None else now
        blocks: list[tuple[dict[str, str], dict[str, str]]] = []
        fresh: dict[str, tuple[Hashable, dict[str, str], CountedLines]] = {}
        for src in sources:
            key, counted = src.metrics_key(now), src.counted()
            have = self._blocks.get(src.name)
            if have is None or have[0] != key:
                lines = target_lines(src.view(now))
                if counted is None:    # counts not known: no counter series (not a reset)
                    lines = {k: v for k, v in lines.items() if k not in self._counters}
                have = (key, lines, have[2] if have is not None else CountedLines(src.name))
                self.rebuilt += 1
            fresh[src.name] = have
            blocks.append((have[1], have[2].render(counted) if counted is not None else {}))
        if subset:
            self._blocks.update(fresh)
        else:
            self._blocks = fresh      # removed targets are forgotten
        ages = "".join(f'logwatch_position_age_seconds{{target="{_esc(s.name)}"}} '
                       f"{floatToGoString(s.position_age())}\n" for s in sources)
        parts: list[str] = []
        for name, typ, doc in self.families:
            parts.append(f"# HELP {name} {_help(doc)}\n# TYPE {name} {typ}\n")
            if name == "logwatch_position_age_seconds":
                parts.append(ages)
                continue
            for b in (c for _, c in blocks) if name in self._counted else (b for b, _ in blocks):
                text = b.get(name)
                if text:
                    parts.append(text)
        if not subset:
            parts.append(_global_lines(alerts))
        return "".join(parts).encode("utf-8")


SOURCE_STATES = ("up", "waiting", "error", "fatal")


def _build_info() -> str:
    """`logwatch_build_info{version, python}` 1: which logwatch answers this scrape."""
    import platform
    from .. import __version__
    return ("# HELP logwatch_build_info the logwatch version and Python that run this daemon\n"
            "# TYPE logwatch_build_info gauge\n"
            f'logwatch_build_info{{python="{_esc(platform.python_version())}",'
            f'version="{_esc(__version__)}"}} 1.0\n')


def _global_lines(stats: AlertStats | None) -> str:
    """The daemon's own families (alert delivery, state_dir errors): small, always fresh."""
    sent: list[str] = []
    failed: list[str] = []
    dropped: list[str] = []
    repeated: list[str] = []
    if stats is not None:
        c = stats.counts()
        drops, repeats, counts, fails = c.dropped, c.repeated, c.sent, c.failed
        for kind in KIND_NAMES:
            dropped.append(f'logwatch_alerts_dropped_total{{kind="{kind}"}} '
                           f"{floatToGoString(float(drops.get(kind, 0)))}")
            repeated.append(f'logwatch_alerts_repeated_total{{kind="{kind}"}} '
                            f"{floatToGoString(float(repeats.get(kind, 0)))}")
        for sink, kinds in stats.sink_kinds().items():  # every series exists from the start
            for kind in kinds:
                counts.setdefault((sink, kind), 0)
            fails.setdefault(sink, 0)
        for (sink, kind), n in sorted(counts.items()):
            sent.append(f'logwatch_alerts_sent_total{{kind="{_esc(kind)}",sink="{_esc(sink)}"}} '
                        f"{floatToGoString(float(n))}")
        for sink, n in sorted(fails.items()):
            failed.append(f'logwatch_alert_failures_total{{sink="{_esc(sink)}"}} '
                          f"{floatToGoString(float(n))}")
    errors = [f'logwatch_state_errors_total{{kind="{_esc(kind)}"}} {floatToGoString(float(n))}'
              for kind, n in sorted(STATE_ERRORS.counts.items())]
    refused = [f'logwatch_refused_total{{what="{_esc(what)}"}} {floatToGoString(float(n))}'
               for what, n in sorted({**{w: 0 for w in REFUSED_KINDS},
                                      **REFUSED.counts}.items())]
    out = [_build_info()]
    for name, doc, lines in (
            ("logwatch_alerts_sent_total", "alerts delivered", sent),
            ("logwatch_alert_failures_total", "alert deliveries that failed", failed),
            ("logwatch_alerts_dropped_total", "alerts not delivered: the rate limit dropped "
             "them (never crashed ones), their delivery was given up (max_age), or their "
             "sink was removed", dropped),
            ("logwatch_alerts_repeated_total", "alert decisions made before (a log read again, "
             "a SIGHUP, a restart, a probe still failing): not sent again", repeated),
            ("logwatch_state_errors_total", "writes to state_dir that failed (full or read-only "
             "disk), by kind of file", errors),
            ("logwatch_refused_total", "connections dropped for sending more than a bound "
             "allows (ssh_frame: a reader frame over 8 MiB; ssh_protocol: not the protocol; "
             "ssh_output: a remote command's answer over its cap)",
             refused)):
        out.append(f"# HELP {name} {_help(doc)}\n# TYPE {name} counter\n")
        out.extend(line + "\n" for line in lines)
    return "".join(out)


# logwatch_gpu_*: (name, help, the sample's key, scale to base units)
GPU_GAUGES = (
    ("logwatch_gpu_power_watts", "GPU power draw (W)", "power_w", 1.0),
    ("logwatch_gpu_power_limit_watts", "GPU power limit in force (W)", "power_limit_w", 1.0),
    ("logwatch_gpu_power_default_limit_watts", "GPU default power limit, the TDP (W)",
     "power_default_limit_w", 1.0),
    ("logwatch_gpu_utilization_ratio", "GPU utilisation (0-1)", "util_ratio", 1.0),
    ("logwatch_gpu_memory_used_bytes", "GPU memory used", "mem_used_bytes", 1.0),
    ("logwatch_gpu_memory_total_bytes", "GPU memory in all", "mem_total_bytes", 1.0),
    ("logwatch_gpu_sm_clock_hertz", "GPU SM clock", "sm_clock_hz", 1.0),
    ("logwatch_gpu_sm_clock_max_hertz", "GPU SM clock maximum", "sm_clock_max_hz", 1.0),
    ("logwatch_gpu_temperature_celsius", "GPU temperature", "temperature_c", 1.0),
)


def _fmt(b: float) -> str:
    return str(int(b)) if b == int(b) else str(b)
