"""The alert kinds: one registry, read by the config check, the router, every receiver,
`/metrics`, `logwatch alerts test` and the CLI (Alertmanager keeps a receiver's knowledge
beside the receiver; what a *kind* is belongs here, once).

A new kind is one `AlertKind(...)` line below plus the policy that decides it
(sinks/alerts/policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...verdict import crash_text


@dataclass(frozen=True)
class AlertKind:
    name: str
    resolvable: bool        # stays open until something resolves it (Alertmanager needs that)
    default_on: bool        # sent by a sink whose `on:` is not given
    rate_limited: bool      # the per-target token bucket may drop it (never a crash)
    slack_icon: str         # shown before the Slack title while firing
    alertname: str          # Alertmanager's `alertname` label
    sample_summary: str     # what `logwatch alerts test --kind NAME` sends
    sample_details: dict[str, Any] = field(default_factory=dict)
    # also sent by a sink whose `on:` names this kind: what was said in its alerts
    # (`degraded`: the ready server without a part of itself, as the `ready` alert says)
    with_kind: str = ""


SAMPLE_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
               "total capacity of 79.11 GiB of which 1.12 GiB is free.")

ALERT_KINDS: dict[str, AlertKind] = {k.name: k for k in (
    AlertKind("crashed", True, True, False, ":red_circle:", "LogwatchCrashed",
              crash_text("cuda_oom", "cuda_graph", 372.0),
              {"reason": "cuda_oom", "during": "cuda_graph", "line": SAMPLE_LINE,
               "line_number": 1200, "elapsed": 372.0,
               "excerpt": ["[2026-12-02 10:06:12 TP1] Scheduler hit an exception: Traceback "
                           "(most recent call last):", "  ...", SAMPLE_LINE]}),
    AlertKind("stalled", True, True, True, ":hourglass:", "LogwatchStalled",
              "stalled in loading_shards: no new line for 10m00s",
              {"phase": "loading_shards", "silent_for": 600.0}),
    AlertKind("slow", True, False, True, ":snail:", "LogwatchSlowStartup",
              "slow startup: 15m00s and still in cuda_graph (usually ready after 6m40s)",
              {"phase": "cuda_graph", "elapsed": 900.0, "typical": 400.0}),
    AlertKind("unreachable", True, False, True, ":no_entry:", "LogwatchUnreachable",
              "not answering for 45s: connection refused (http://127.0.0.1:30000/health)",
              {"url": "http://127.0.0.1:30000/health", "status": "connection refused",
               "down_for": 45.0, "never_answered": False}),
    AlertKind("source_down", True, True, True, ":see_no_evil:", "LogwatchSourceDown",
              "cannot read the log for 2m00s: cannot connect: permission denied (publickey)",
              {"state": "fatal", "message": "permission denied (publickey)", "down_for": 120.0}),
    AlertKind("ready", False, True, True, ":large_green_circle:", "LogwatchReady",
              "ready in 4m10s (slowest phase: loading_shards 2m05s)",
              {"took": 250.0, "slowest_phase": "loading_shards"}),
    # open while its startup serves on (a part that failed does not come back by itself):
    # resolved when the startup ends (policy.py)
    AlertKind("degraded", True, False, True, ":warning:", "LogwatchDegraded",
              "degraded while serving: KV bootstrap server down (its port taken): decode "
              "servers reach whoever holds that port, line 4120",
              {"note": "KV bootstrap server down (its port taken), line 4120",
               "line": "[2026-12-02 10:00:03] Server error: [Errno 98] error while attempting "
                       "to bind on address ('0.0.0.0', 8998): address already in use"},
              with_kind="ready"),
    AlertKind("restarted", False, False, True, ":arrows_counterclockwise:", "LogwatchRestarted",
              "restarted (startup #2)",
              {"line": "[2026-12-02 10:00:00] server_args=ServerArgs(...)"}),
    AlertKind("phase", False, False, True, ":arrow_right:", "LogwatchPhase",
              "phase loading_shards", {"phase": "loading_shards", "previous": "launching"}),
)}

KIND_NAMES: tuple[str, ...] = tuple(ALERT_KINDS)
DEFAULT_ON: tuple[str, ...] = tuple(k.name for k in ALERT_KINDS.values() if k.default_on)
RESOLVABLE: frozenset[str] = frozenset(k.name for k in ALERT_KINDS.values() if k.resolvable)


def kinds_taken(on: "list[str] | tuple[str, ...]") -> tuple[str, ...]:
    """The kinds a sink whose `on:` is `on` sends: those, and the kinds that go with one of
    them (`with_kind`: a sink on `[crashed, ready]` hears a degrade after the ready as it
    would have in the ready's alert)."""
    return tuple(on) + tuple(k.name for k in ALERT_KINDS.values()
                             if k.with_kind in on and k.name not in on)


def kind_of(name: str) -> AlertKind | None:
    return ALERT_KINDS.get(name)
