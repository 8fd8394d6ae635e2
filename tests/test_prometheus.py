"""The daemon's /metrics as Prometheus sees it: `promtool check metrics` finds nothing to
complain about, and a real Prometheus (Debian's `prometheus`, installed by .ci/run) scrapes
the daemon while the simulator writes a log, and its query API shows the startup.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import ROOT
from support.daemon import (
    Daemon, count_lines, daemons, free_port, http_get, sim_texts, split_at, target_cfg,  # noqa: F401 (fixture)
    Prometheus, wait_for, write_config,
)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"

# DESIGN.md "Metrics": every family, with the sample names Prometheus stores for it.
DESIGN_SAMPLES = {
    "logwatch_phase": ["logwatch_phase"],
    "logwatch_phase_entered_timestamp_seconds": ["logwatch_phase_entered_timestamp_seconds"],
    "logwatch_ready": ["logwatch_ready"],
    "logwatch_shards_loaded": ["logwatch_shards_loaded"],
    "logwatch_shards_total": ["logwatch_shards_total"],
    "logwatch_shard_load_rate": ["logwatch_shard_load_rate"],
    "logwatch_startup_eta_seconds": ["logwatch_startup_eta_seconds"],
    "logwatch_startups_total": ["logwatch_startups_total"],
    "logwatch_crashes_total": ["logwatch_crashes_total"],
    "logwatch_startup_duration_seconds": ["logwatch_startup_duration_seconds_bucket",
                                          "logwatch_startup_duration_seconds_sum",
                                          "logwatch_startup_duration_seconds_count"],
    "logwatch_lines_total": ["logwatch_lines_total"],
    "logwatch_rule_matches_total": ["logwatch_rule_matches_total"],
    "logwatch_source_up": ["logwatch_source_up"],
    "logwatch_last_line_timestamp_seconds": ["logwatch_last_line_timestamp_seconds"],
    "logwatch_gen_throughput_tokens_per_second": ["logwatch_gen_throughput_tokens_per_second"],
    "logwatch_running_requests": ["logwatch_running_requests"],
    "logwatch_queued_requests": ["logwatch_queued_requests"],
    "logwatch_token_usage_ratio": ["logwatch_token_usage_ratio"],
    "logwatch_alerts_sent_total": ["logwatch_alerts_sent_total"],
    "logwatch_alert_failures_total": ["logwatch_alert_failures_total"],
    "logwatch_target_info": ["logwatch_target_info"],
}
# the labels DESIGN.md gives each family (besides `target`, which all but the alert ones carry)
DESIGN_LABELS = {
    "logwatch_phase": {"phase"},
    "logwatch_crashes_total": {"reason"},
    "logwatch_rule_matches_total": {"rule"},
    "logwatch_alerts_sent_total": {"sink", "kind"},
    "logwatch_alert_failures_total": {"sink"},
    "logwatch_target_info": {"engine", "source", "model"},
    "logwatch_startup_duration_seconds_bucket": {"le"},
}
NO_TARGET = {"logwatch_alerts_sent_total", "logwatch_alert_failures_total", "logwatch_alerts_dropped_total",
             "logwatch_alerts_repeated_total",
             "logwatch_state_errors_total", "logwatch_build_info",
             "logwatch_refused_total"}   # daemon-wide: no target


def test_binaries_installed() -> None:
    """CI installs Debian's prometheus (prometheus + promtool); a missing one is a failure."""
    for b in (PROMETHEUS, PROMTOOL):
        assert Path(b).exists() or shutil.which(Path(b).name), f"{b} is not installed"


# -- a. promtool ----------------------------------------------------------------------------

def test_promtool_check_metrics(tmp_path: Path, daemons: Any) -> None:
    """Targets waiting, loading shards, ready and crashed (plus an `auto` one still waiting):
    `promtool check metrics` prints nothing and exits 0."""
    logs = {n: tmp_path / f"{n}.log" for n in ("waiting", "auto_waiting", "loading", "ready",
                                             "crashed")}
    full = sim_texts()
    oom = sim_texts(crash="oom", seed=1)
    # a tqdm frame is complete when the next one begins (`\r`): write up to frame 13
    half = full[: split_at(full, "| 13/24 ") + 1]
    logs["loading"].write_text("".join(half), encoding="utf-8")
    logs["ready"].write_text("".join(full), encoding="utf-8")
    logs["crashed"].write_text("".join(oom), encoding="utf-8")
    port = free_port()
    targets = [target_cfg(n, p, labels={"model": "Qwen3-235B", "node": n})
               for n, p in logs.items()]
    targets[1]["rules"] = "auto"
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", targets)
    d: Daemon = daemons(cfg, port).start()
    d.wait_target("loading", lambda t: t["phase"] == "loading_shards"
                  and (t["shards"] or {}).get("loaded") == 12, "loading_shards at 12/24")
    d.wait_target("ready", lambda t: t["phase"] == "ready" and t["stats"], "ready, serving stats")
    d.wait_target("crashed", lambda t: t["phase"] == "crashed", "crashed")
    # the crash is counted once it settled (5 s): the reason series then carries a 1
    d.wait_metric("logwatch_crashes_total", 1.0, target="crashed", reason="cuda_oom")
    for n in ("waiting", "auto_waiting"):
        assert d.target(n)["phase"] == "waiting"  # type: ignore[index]
    body = d.metrics_text()
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                         text=True, timeout=30)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", ""), \
        f"promtool check metrics: exit {res.returncode}\n{res.stdout}{res.stderr}"


# -- b. a real Prometheus -------------------------------------------------------------------

class _Hook(BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        _Hook.received.append(self.rfile.read(n))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a: Any) -> None:
        pass


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A daemon following a log the simulator writes, scraped every second by Prometheus."""
    tmp = tmp_path_factory.mktemp("prom")
    hook = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    port = free_port()
    log = tmp / "sim.log"
    cfg = write_config(
        tmp / "logwatch.yaml", port, tmp / "state",
        [target_cfg("sim", log, labels={"model": "Qwen3-235B"})],
        alerts=[{"type": "webhook", "name": "hook",
                 "url": f"http://127.0.0.1:{hook.server_address[1]}/hook",
                 "on": ["crashed", "stalled", "ready", "phase"]}])
    d = Daemon(cfg, port, tmp)
    prom: Prometheus | None = None
    sim: subprocess.Popen[bytes] | None = None
    try:
        d.start()
        prom = Prometheus(tmp, port)
        wait_for(lambda: http_get(prom.base + "/-/ready")[0] == 200, 30, "prometheus ready",  # type: ignore[union-attr]
                 alive=prom.dead)
        # Prometheus scrapes the daemon before the log exists (target waiting) ...
        wait_for(lambda: prom.value('up{job="logwatch"}') == 1.0, 30, "first scrape",  # type: ignore[union-attr]
                 alive=prom.dead)
        # ... and while the simulator writes the log
        with open(tmp / "simulate.out", "wb") as out:
            sim = subprocess.Popen([sys.executable, "-m", "logwatch.app.simulate", str(log),
                                    "--speed", "0.1"], cwd=ROOT, stdin=subprocess.PIPE,
                                   stdout=out, stderr=out)
        assert sim.stdin is not None
        sim.stdin.close()
        yield {"daemon": d, "prom": prom, "sim": sim, "log": log, "hook": _Hook}
    finally:
        if sim is not None and sim.poll() is None:
            sim.kill()
            sim.wait(timeout=10)
        if prom is not None:
            prom.stop()
        d.cleanup()
        hook.shutdown()
        hook.server_close()


def test_prometheus_sees_the_startup(scraped: dict[str, Any]) -> None:
    prom: Prometheus = scraped["prom"]
    d: Daemon = scraped["daemon"]
    scraped["sim"].wait(timeout=40)
    assert scraped["sim"].returncode == 0

    def done() -> bool:
        return (prom.value('logwatch_phase{target="sim",phase="ready"}') == 1.0
                and prom.value('logwatch_shards_total{target="sim"}') == 24.0
                and prom.value('logwatch_shards_loaded{target="sim"}') == 24.0
                and prom.value('logwatch_startups_total{target="sim"}') == 1.0)
    try:
        wait_for(done, 30, "Prometheus: ready, shards 24/24, one startup", alive=prom.dead)
    except AssertionError as e:
        seen = {q: prom.query(q) for q in ('logwatch_phase{target="sim"} == 1',
                                            'logwatch_shards_loaded', 'logwatch_shards_total',
                                            'logwatch_startups_total')}
        raise AssertionError(f"{e}\n{json.dumps(seen)[:3000]}") from None
    # the other phases are 0, the shard gauges agree in PromQL too, no crash
    assert prom.value('sum(logwatch_phase{target="sim"})') == 1.0
    assert prom.query('logwatch_shards_loaded{target="sim"} == logwatch_shards_total{target="sim"}')
    assert prom.value('logwatch_ready{target="sim"}') == 1.0
    assert prom.value('sum(logwatch_crashes_total{target="sim"})') == 0.0
    assert prom.value('logwatch_startup_eta_seconds{target="sim"}') == 0.0
    assert prom.value('logwatch_startup_duration_seconds_count{target="sim"}') == 1.0
    # lines: every line of the finished log, once
    lines = count_lines(scraped["log"])
    wait_for(lambda: prom.value('logwatch_lines_total{target="sim"}') == float(lines), 15,
             f"logwatch_lines_total == {lines}", alive=prom.dead)
    assert d.proc is not None and d.proc.poll() is None


def test_every_design_metric_reaches_prometheus(scraped: dict[str, Any]) -> None:
    """Every family of DESIGN.md's table is stored by Prometheus under the name Prometheus
    gives it (counters with _total, the histogram's _bucket/_sum/_count), with its labels;
    every series but the alert ones carries `target`.  A webhook sink is configured, so
    the per-sink alert series exist too (the collector promises every series from the start)."""
    prom: Prometheus = scraped["prom"]
    d: Daemon = scraped["daemon"]
    wait_for(lambda: prom.value('logwatch_phase{target="sim",phase="ready"}') == 1.0, 45,
             "ready in Prometheus", alive=prom.dead)
    # one more scrape after ready (serving gauges have values by then)
    wait_for(lambda: prom.value('logwatch_running_requests{target="sim"} >= 0') is not None, 15,
             "serving gauges", alive=prom.dead)
    exposition = d.metrics_text()
    names = prom.names()
    missing = {fam: [s for s in samples if s not in names]
               for fam, samples in DESIGN_SAMPLES.items()}
    missing = {f: s for f, s in missing.items() if s}
    not_exposed = [f for f in missing if f"\n{DESIGN_SAMPLES[f][0]}" not in exposition]
    assert not missing, (f"DESIGN.md metrics Prometheus never stored: {missing}; "
                         f"of those, absent from the /metrics samples: {not_exposed}; "
                         f"webhook requests received: {len(scraped['hook'].received)}")
    for name, labels in DESIGN_LABELS.items():
        series = prom.query(f'{{__name__="{name}"}}')
        assert series, name
        for s in series:
            assert labels <= set(s["metric"]), f"{name}: labels {sorted(s['metric'])}"
    for s in prom.query('{__name__=~"logwatch_.+", target=""}'):
        assert s["metric"]["__name__"] in NO_TARGET, f"series without target: {s['metric']}"
    info = prom.query('logwatch_target_info{target="sim"}')
    assert len(info) == 1 and info[0]["metric"]["engine"] == "sglang" \
        and info[0]["metric"]["source"] == "file" \
        and info[0]["metric"]["model"] == "Qwen3-235B", info
