"""One hostile log never stalls the daemon: lines that drive patterns to their timeout cost at
most a bounded time each (`LINE_BUDGET`), are matched in slices between which the event loop
runs, and are counted in `logwatch_rule_errors_total`; /healthz answers at once and the
other targets keep their pace.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import yaml

import pytest

from support.daemon import (  # noqa: F401 (daemons: the fixture)
    append, daemons, free_port, http_get, sim_texts, target_cfg, wait_for, write_config,
)

# integration, and serial: /healthz and /metrics latency budgets hold on an otherwise idle machine
pytestmark = [pytest.mark.integration, pytest.mark.serial]

# a user pack with patterns that backtrack exponentially on the bait lines below
HOSTILE_PACK = {
    "name": "hostile", "extends": "sglang",
    "rules": [{"id": f"bait_{i}", "pattern": f"BAIT{i} .*(?:x|xx)+y", "crash": "unknown",
               "samples": [f"BAIT{i} xxy"]} for i in range(4)],
}


def probe(url: str) -> tuple[list[float], threading.Event, threading.Thread]:
    """GET `url` every 20 ms in a thread until the event is set: the latencies."""
    latencies: list[float] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            code, _ = http_get(url, timeout=60)
            assert code == 200
            latencies.append(time.monotonic() - t0)
            time.sleep(0.02)   # the probe's pace, not a synchronisation

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return latencies, stop, th


def test_a_hostile_log_does_not_hold_the_daemon(tmp_path: Path, daemons) -> None:
    pack = tmp_path / "hostile.yaml"
    pack.write_text(yaml.safe_dump(HOSTILE_PACK), encoding="utf-8")
    bad, good = tmp_path / "bad.log", tmp_path / "good.log"
    bad.write_text("")
    good.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("bad", bad, rules=str(pack)), target_cfg("good", good)])
    d = daemons(cfg, port).start()
    n = 60     # at the line budget, 3 s of matching at least: three times the /healthz bound
    # every line carries the literal of all four rules: 4 timeouts a line without a budget
    line = ("BAIT0 BAIT1 BAIT2 BAIT3 " + "x" * 40).encode()
    line = line + b"x" * (64 * 1024 - len(line) - 1) + b"\n"
    with open(bad, "ab") as f:
        f.write(line * n)
    latencies, stop, th = probe(f"http://127.0.0.1:{port}/healthz")
    append(good, "".join(sim_texts()))
    d.wait_target("good", lambda t: t["phase"] == "ready", "the other target ready", timeout=60)
    wait_for(lambda: d.metric("logwatch_lines_total", target="bad") == float(n), 90,
             "every hostile line read", alive=d.dead)
    stop.set()
    th.join(10)
    errors = d.metric("logwatch_rule_errors_total", target="bad") or 0
    assert errors >= n, f"the hostile lines are counted as rule errors: {errors}"
    assert len(latencies) >= 10
    worst = max(latencies)
    print(f"healthz: {len(latencies)} probes, worst {worst * 1000:.0f} ms, rule errors {errors:.0f}")
    assert worst < 1.0, f"/healthz waited {worst:.2f}s behind the hostile log"


def test_a_5gb_sparse_log_does_not_hold_metrics(tmp_path: Path, daemons) -> None:
    """A 5 GiB log (sparse: a hole, then a startup at its end) is scanned for its latest
    startup off the event loop: /metrics answers at once meanwhile, the startup is found."""
    big = tmp_path / "big.log"
    with open(big, "wb") as f:
        f.truncate(5 << 30)
    append(big, "".join(sim_texts()))
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg("big", big)])
    d = daemons(cfg, port).start()
    latencies, stop, th = probe(f"http://127.0.0.1:{port}/metrics")
    try:
        d.wait_target("big", lambda t: t["phase"] == "ready", "the startup at the end", timeout=120)
    finally:
        stop.set()
        th.join(60)
    assert len(latencies) >= 5
    worst = max(latencies)
    print(f"/metrics: {len(latencies)} probes, worst {worst * 1000:.0f} ms")
    assert worst < 1.0, f"/metrics waited {worst:.2f}s behind the 5 GiB log"
