"""Prometheus exposition: every DESIGN.md metric, read from the targets at scrape time.

A custom collector rather than metric objects updated on every line: the hot path stays
free of metric bookkeeping, a scrape sees one consistent snapshot, and every series exists
from the start (a dashboard sees 0, not "no data").  Series are never expired: a removed
target disappears on reload, nothing else does.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterator, Protocol

from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily, Metric,
)
from prometheus_client.registry import Collector

from ..counters import DURATION_BUCKETS
from ..rules.pack import CRASH_REASONS, READY
from ..state.files import STATE_ERRORS
from ..view import TargetView
from .alerts.config import KINDS
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

    def sent_counts(self) -> dict[tuple[str, str], int]: ...

    def failure_counts(self) -> dict[str, int]: ...

    def dropped_counts(self) -> dict[str, int]: ...


class LogwatchCollector(Collector):
    def __init__(self, views: Callable[[float], list[TargetView]],
                 alerts: Callable[[], AlertStats | None] = lambda: None) -> None:
        self.views = views
        self.alerts = alerts

    def describe(self) -> list[Metric]:
        return []  # no fixed description: collect() runs only at scrape time

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        views = self.views(now)
        g = GaugeMetricFamily
        c = CounterMetricFamily
        phase = g("logwatch_phase", "1 for the current phase of the target, 0 for the others",
                  labels=["target", "phase"])
        entered = g("logwatch_phase_entered_timestamp_seconds",
                    "when the current phase began (unix time)", labels=["target"])
        started = g("logwatch_startup_started_timestamp_seconds",
                    "when the current startup began (unix time; 0 before any)", labels=["target"])
        ready = g("logwatch_ready", "1 when the server is ready (serving)", labels=["target"])
        loaded = g("logwatch_shards_loaded", "checkpoint shards loaded", labels=["target"])
        # a gauge in meaning, typed counter so that the DESIGN.md name `logwatch_shards_total`
        # passes `promtool check metrics` (which rejects the _total suffix on other types)
        total = c("logwatch_shards", "checkpoint shards to load (the bar's N; exposed as a "
                  "counter only for its _total name)", labels=["target"])
        rate = g("logwatch_shard_load_rate", "shards loaded per second (smoothed)",
                 labels=["target"])
        eta = g("logwatch_startup_eta_seconds", "estimated seconds until ready (NaN when "
                "unknown)", labels=["target"])
        startups = c("logwatch_startups", "startups seen (new server processes in the log)",
                     labels=["target"])
        crashes = c("logwatch_crashes", "crashes by reason", labels=["target", "reason"])
        hist = HistogramMetricFamily("logwatch_startup_duration_seconds",
                                     "from launch to ready", labels=["target"])
        lines = c("logwatch_lines", "log lines read", labels=["target"])
        matches = c("logwatch_rule_matches", "lines matched, by rule", labels=["target", "rule"])
        up = g("logwatch_source_up", "1 while the source is connected / open", labels=["target"])
        last_line = g("logwatch_last_line_timestamp_seconds", "when the last line arrived",
                      labels=["target"])
        serving = {k: g(name, doc, labels=["target"]) for k, (name, doc) in SERVING.items()}
        bytes_read = c("logwatch_bytes_read", "log bytes read", labels=["target"])
        reconnects = c("logwatch_source_reconnects", "times the source went down and came back",
                       labels=["target"])
        rotations = c("logwatch_source_rotations", "log files switched to (rotation, truncation, "
                      "recreation)", labels=["target"])
        skipped = c("logwatch_bytes_skipped", "log bytes a source knows it could not read (a "
                    "log rotated away while disconnected, its old file gone): a lower bound",
                    labels=["target"])
        losses = c("logwatch_source_losses", "times a source knew it lost part of the log",
                   labels=["target"])
        cut = c("logwatch_lines_cut", "over-long lines truncated", labels=["target"])
        rule_errors = c("logwatch_rule_errors", "rule evaluations that failed (timeouts)",
                        labels=["target"])
        pos_age = g("logwatch_position_age_seconds", "seconds since the read position was saved",
                    labels=["target"])
        info = InfoMetricFamily("logwatch_target", "static labels of a target",
                                labels=["target", "engine", "source"])
        gpu_fams = GpuFamilies()
        last_startup = g("logwatch_last_startup_seconds", "launch to ready of the target's last "
                         "startup that got ready (NaN before any; the launch ledger)",
                         labels=["target"])
        probe_up = g("logwatch_probe_up", "the server's own endpoint answered the last probe "
                     "(2xx on every path of its pack; absent until probed)", labels=["target"])
        probe_time = g("logwatch_probe_duration_seconds", "how long the last probe of the "
                       "server's endpoint took", labels=["target"])
        for v in views:
            t = v.name
            cur = v.phase
            for p in v.phases:
                phase.add_metric([t, p], 1.0 if p == cur else 0.0)
            entered.add_metric([t], v.phase_entered_at if v.phase_entered_at is not None
                               else v.started_at)
            started.add_metric([t], v.startup_started_at or 0.0)
            ready.add_metric([t], 1.0 if cur == READY else 0.0)
            sh = v.shards
            loaded.add_metric([t], float(sh.loaded) if sh else 0.0)
            total.add_metric([t], float(sh.total) if sh else 0.0)
            rate.add_metric([t], float(sh.rate) if sh and sh.rate else 0.0)
            eta.add_metric([t], v.eta_seconds)
            cn = v.counters
            startups.add_metric([t], float(cn.startups))
            for reason in (*CRASH_REASONS, *(r for r in cn.crashes if r not in CRASH_REASONS)):
                crashes.add_metric([t, reason], float(cn.crashes.get(reason, 0)))
            buckets, acc = [], 0
            for b, n in zip(DURATION_BUCKETS, cn.duration_buckets):
                acc += n
                buckets.append((_fmt(b), float(acc)))
            buckets.append(("+Inf", float(acc + cn.duration_buckets[-1])))
            hist.add_metric([t], buckets, float(cn.duration_sum))
            lines.add_metric([t], float(cn.lines))
            for rid in v.rules:
                matches.add_metric([t, rid], float(cn.rule_matches.get(rid, 0)))
            up.add_metric([t], 1.0 if v.source_up else 0.0)
            last_line.add_metric([t], v.last_line_at or 0.0)
            for k, fam in serving.items():
                val = v.stats.get(k) if cur == READY else None
                fam.add_metric([t], float(val) if val is not None else math.nan)
            bytes_read.add_metric([t], float(cn.bytes))
            reconnects.add_metric([t], float(cn.reconnects))
            rotations.add_metric([t], float(cn.rotations))
            skipped.add_metric([t], float(cn.bytes_skipped))
            losses.add_metric([t], float(cn.source_losses))
            cut.add_metric([t], float(cn.lines_cut))
            rule_errors.add_metric([t], float(cn.rule_errors))
            pos_age.add_metric([t], v.checkpoint_age)
            info.add_metric([t, v.engine, v.kind], dict(v.labels))
            gpu_fams.add(t, v.gpu)
            last_startup.add_metric([t], v.last_startup_seconds
                                    if v.last_startup_seconds is not None else math.nan)
            pr = v.probe
            if pr is not None and pr.get("up") is not None:
                probe_up.add_metric([t], 1.0 if pr["up"] else 0.0)
                if pr.get("duration") is not None:
                    probe_time.add_metric([t], float(pr["duration"]))
        yield from gpu_fams.families()
        yield last_startup
        yield probe_up
        yield probe_time
        yield from (phase, entered, started, ready, loaded, total, rate, eta, startups, crashes, hist,
                    lines, matches, up, last_line, *serving.values(), bytes_read, reconnects,
                    rotations, skipped, losses, cut, rule_errors, pos_age, info)
        stats = self.alerts()
        sent = c("logwatch_alerts_sent", "alerts delivered", labels=["sink", "kind"])
        failed = c("logwatch_alert_failures", "alert deliveries that failed", labels=["sink"])
        dropped = c("logwatch_alerts_dropped", "alerts the per-target rate limit dropped (never "
                    "crashed ones)", labels=["kind"])
        if stats is not None:
            drops = stats.dropped_counts()
            for kind in KINDS:
                dropped.add_metric([kind], float(drops.get(kind, 0)))
            counts = stats.sent_counts()
            fails = stats.failure_counts()
            for sink, kinds in stats.sink_kinds().items():  # every series exists from the start
                for kind in kinds:
                    counts.setdefault((sink, kind), 0)
                fails.setdefault(sink, 0)
            for (sink, kind), n in sorted(counts.items()):
                sent.add_metric([sink, kind], float(n))
            for sink, n in sorted(fails.items()):
                failed.add_metric([sink], float(n))
        yield sent
        yield failed
        yield dropped
        errors = c("logwatch_state_errors", "writes to state_dir that failed (full or read-only "
                   "disk), by kind of file", labels=["kind"])
        for kind, n in sorted(STATE_ERRORS.counts.items()):
            errors.add_metric([kind], float(n))
        yield errors


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


class GpuFamilies:
    """The logwatch_gpu_* families, filled from each target's view (`TargetView.gpu`: its
    host's stream as a dict).  A value the board does not report is no series, not a 0."""

    def __init__(self) -> None:
        g = GaugeMetricFamily
        self.up = g("logwatch_gpu_up", "1 while the target's GPU telemetry (nvidia-smi on its "
                    "host) answers", labels=["target"])
        self.gauges = [(g(name, doc, labels=["target", "gpu"]), key, scale)
                       for name, doc, key, scale in GPU_GAUGES]
        self.throttled = g("logwatch_gpu_throttled", "1 per clock throttle reason active on "
                           "the GPU (idle, sw_power_cap, hw_slowdown, ...)",
                           labels=["target", "gpu", "reason"])

    def add(self, target: str, gpu: dict[str, Any] | None) -> None:
        if gpu is None:
            return
        self.up.add_metric([target], 1.0 if gpu.get("up") else 0.0)
        snap = gpu.get("snapshot") if gpu.get("up") else None
        for sample in (snap or {}).get("gpus", ()):
            idx = str(sample.get("index"))
            for fam, key, scale in self.gauges:
                val = sample.get(key)
                if val is not None:
                    fam.add_metric([target, idx], float(val) * scale)
            for reason, on in sorted((sample.get("throttled") or {}).items()):
                self.throttled.add_metric([target, idx, reason], float(on))

    def families(self) -> list[Metric]:
        return [self.up, *(f for f, _, _ in self.gauges), self.throttled]


def _fmt(b: float) -> str:
    return str(int(b)) if b == int(b) else str(b)
