"""`logwatch alerts test`: send one sample alert to every sink of the config, now."""

from __future__ import annotations

import time
from typing import Callable

from ..sinks.alerts.model import FIRING, Alert
from ..sinks.alerts.policy import alert_key
from ..sinks.alerts.receivers import make_sinks
from ..sinks.alerts.router import deliver
from .config import Config

SAMPLE_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
               "total capacity of 79.11 GiB of which 1.12 GiB is free.")


def sample(kind: str, generator_url: str) -> Alert:
    details = {
        "crashed": {"reason": "cuda_oom", "during": "cuda_graph", "line": SAMPLE_LINE,
                    "line_number": 1200, "elapsed": 372.0,
                    "excerpt": ["[2026-12-02 10:06:12 TP1] Scheduler hit an exception: Traceback "
                                "(most recent call last):", "  ...", SAMPLE_LINE]},
        "stalled": {"phase": "loading_shards", "silent_for": 600.0},
        "slow": {"phase": "cuda_graph", "elapsed": 900.0, "typical": 400.0},
        "ready": {"took": 250.0, "slowest_phase": "loading_shards"},
        "restarted": {"line": "[2026-12-02 10:00:00] server_args=ServerArgs(...)"},
        "phase": {"phase": "loading_shards", "previous": "launching"},
    }[kind]
    summary = {"crashed": "crashed during cuda_graph after 6m12s: cuda_oom",
               "stalled": "stalled in loading_shards: no new line for 10m00s",
               "slow": "slow startup: 15m00s and still in cuda_graph (usually ready after 6m40s)",
               "ready": "ready in 4m10s (slowest phase: loading_shards 2m05s)",
               "restarted": "restarted (startup #2)", "phase": "phase loading_shards"}[kind]
    startup = f"test@{time.time():.0f}"
    return Alert(alert_key("logwatch-test", startup, kind), kind, FIRING, "logwatch-test",
                 "sglang", {"model": "example"}, 1, f"[test] {summary}", details, time.time(),
                 None, generator_url, startup)


async def send_test(cfg: Config, kind: str, out: Callable[[str], None] = print) -> int:
    sinks = make_sinks(list(cfg.alerts))
    if not sinks:
        out(f"{cfg.path}: no alert sinks configured (alerts: [...])")
        return 2
    import aiohttp
    failed = 0
    async with aiohttp.ClientSession() as session:   # only the delivery step: no outbox
        alert = sample(kind, f"http://{cfg.listen_host}:{cfg.listen_port}/")
        for s in sinks:
            outcome = await deliver(session, s, alert)
            status = "ok" if outcome.ok else "FAILED"
            failed += not outcome.ok
            out(f"{s.describe()}: {status} ({outcome.message})")
    return 0 if not failed else 1
