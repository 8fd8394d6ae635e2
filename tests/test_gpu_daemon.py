"""GPU telemetry in the daemon, over a real sshd: `gpu.command` runs the replay stand-in
`tests/tools/fake-nvidia-smi` (the real H200 capture, byte for byte) on the SSH target's
host, over the target's own connection.  /metrics shows the 8 GPUs, their 700 W limit and
the software power cap during the load rows; `promtool check metrics` is clean; a host
without nvidia-smi is `logwatch_gpu_up 0` with a status that says so; /api/status and the
page carry the telemetry."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from support.daemon import daemons, free_port, parse_metrics, sim_texts, target_cfg, write_config  # noqa: F401
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

FAKE = ROOT / "tests" / "tools" / "fake-nvidia-smi"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), v) for (n, labels), v in parse_metrics(text).items() if n == name]


def test_gpu_telemetry_over_ssh_in_metrics_status_and_page(sshd_server: SSHServer,  # noqa: F811
                                                           tmp_path: Path, daemons: Any) -> None:
    server = sshd_server
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=9)), encoding="utf-8")
    port = free_port()
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    gpu = {"command": f"env FAKE_NVSMI_GPUS=8 {FAKE}", "interval": "500ms", "timeout": "5s"}
    missing = {"command": "/nonexistent/bin/nvidia-smi", "interval": "1s", "timeout": "5s"}
    other = tmp_path / "other.log"
    other.write_text("".join(sim_texts(seed=9)), encoding="utf-8")
    Path(f"{other}.off").write_text("".join(sim_texts(seed=9)), encoding="utf-8")
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node1", server.url(log), ssh=ssh, gpu=gpu),
        target_cfg("nogpu", str(other), gpu=missing),
        target_cfg("off", f"{other}.off", gpu=False),   # (one log under two names: refused)
    ])
    d = daemons(cfg, port).start()
    d.wait_metric("logwatch_gpu_up", 1.0, timeout=30, target="node1")
    # the load rows of the capture: 694 W of 700 W, software power cap (0x4)
    deadline = time.monotonic() + 40
    capped: list[Any] = []
    while time.monotonic() < deadline:
        text = d.metrics_text()
        power = series(text, "logwatch_gpu_power_watts")
        capped = [lb for lb, v in series(text, "logwatch_gpu_throttled")
                  if lb.get("reason") == "sw_power_cap" and v == 1.0 and lb["target"] == "node1"]
        if len({lb["gpu"] for lb, _ in power if lb["target"] == "node1"}) == 8 and capped:
            break
        time.sleep(0.2)
    assert {lb["gpu"] for lb, _ in power if lb["target"] == "node1"} == {str(i) for i in range(8)}
    assert capped, "no GPU showed the software power cap during the load rows"
    limits = {v for lb, v in series(text, "logwatch_gpu_power_limit_watts") if lb["target"] == "node1"}
    assert limits == {700.0}
    assert all(0.0 <= v <= 1.0 for _, v in series(text, "logwatch_gpu_utilization_ratio"))
    assert {lb["target"] for lb, _ in series(text, "logwatch_gpu_up")} == {"node1", "nogpu"}
    # promtool: the exposition is clean
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    # a host without nvidia-smi: 0 and a status, not a retry storm
    d.wait_metric("logwatch_gpu_up", 0.0, timeout=20, target="nogpu")
    t = d.target("nogpu")
    assert t is not None and t["gpu"]["status"] == "no nvidia-smi on host", t["gpu"]
    assert t["gpu"]["restarts"] <= 1
    # /api/status: the host's summary and the power history for the sparkline
    t = d.target("node1")
    assert t is not None and t["gpu"]["up"] is True
    summary = t["gpu"]["snapshot"]["summary"]
    assert summary.startswith("GPU x8 ") and "W" in summary, summary
    assert len(t["gpu"]["power_history_w"]) >= 1
    assert d.target("off")["gpu"] is None  # type: ignore[index]
    # the page (headless Chromium): the GPU line with its power sparkline; the host without
    # nvidia-smi says so; the target with gpu off shows no GPU line
    from playwright.sync_api import expect, sync_playwright
    from test_page import CHROME_ARGS, CHROMIUM
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        node = page.locator("section[data-target='node1'] .gpu")
        expect(node).to_contain_text("GPU x8", timeout=15_000)
        page.wait_for_function("document.querySelectorAll(\"section[data-target='node1'] "
                               ".spark i\").length >= 2", timeout=15_000)
        expect(page.locator("section[data-target='nogpu'] .gpu")).to_contain_text(
            "no nvidia-smi on host", timeout=15_000)
        expect(page.locator("section[data-target='off'] .gpu")).to_be_hidden()
        page.screenshot(path=str(tmp_path / "gpu-page.png"), full_page=True)
        browser.close()
    # the launch ledger keeps the watts of the serving startup (saved when the daemon stops)
    d.signal(signal.SIGTERM)
    assert d.wait_exit(timeout=30) == 0
    db = sqlite3.connect(tmp_path / "state" / "ledger.sqlite3")
    (doc,) = db.execute("SELECT record FROM startups WHERE target='node1'").fetchone()
    gpu = json.loads(doc)["gpu"]
    assert gpu["samples"] >= 1 and gpu["power_limit_w"] == 5600.0, gpu
    assert 8 * 80 <= gpu["power_p50_w"] <= 8 * 700 and gpu["power_max_w"] >= gpu["power_p50_w"]
