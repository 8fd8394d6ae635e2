"""The launch ledger live: the daemon records each startup in its SQLite store (served at
/api/history, shown as the page's launches table, `logwatch_last_startup_seconds`), and
`watch` says at ready how this launch differs from the one before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from support.daemon import daemons, free_port, target_cfg, write_config  # noqa: F401
from test_ledger import ARGS_1, ARGS_2, T0, launch

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


def test_the_daemon_records_launches_and_serves_them(tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    log = tmp_path / "server.log"
    log.write_text(launch(1, T0, ARGS_1, 880.0, minutes=2.5), encoding="utf-8")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg("node1", log, from_start=True, gpu=False)])
    d = daemons(cfg, port).start()
    d.wait_target("node1", lambda t: t["phase"] == "ready", "ready", timeout=30)
    with open(log, "a", encoding="utf-8") as f:
        f.write(launch(2, T0 + 3600, ARGS_2, 3740.0, minutes=2.5))

    def two() -> list[dict[str, Any]] | None:
        code, body = d.get("/api/history?target=node1")
        recs = json.loads(body)["startups"] if code == 200 else []
        return recs if len(recs) == 2 and recs[1]["outcome"] == "ready" else None
    from support.daemon import wait_for
    recs = wait_for(two, 30, "two startups in the ledger")
    assert recs[1]["changed"] == {"max_running_requests": [64, 2048],
                                  "disable_cuda_graph": [False, True]}
    assert recs[0]["args"]["max_running_requests"] == 64
    d.wait_metric("logwatch_last_startup_seconds", recs[1]["startup_seconds"], timeout=20,
                  target="node1")
    assert d.get("/api/history?target=nope")[0] == 404
    assert (tmp_path / "state" / "ledger.sqlite3").exists()
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                          "--target", "node1", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    docs = [json.loads(x) for x in res.stdout.splitlines()]
    assert [d["index"] for d in docs] == [1, 2] and docs[1]["changed"] == recs[1]["changed"]
    # renamed in the config since: its records are still read (before: "no target 'node1'")
    renamed = write_config(tmp_path / "renamed.yaml", port, tmp_path / "state",
                           [target_cfg("node1-h200", log, gpu=False)])
    said = {name: subprocess.run([sys.executable, "-m", "logwatch", "history", "-c",
                                  str(renamed), "--target", name, "--json"],
                                 capture_output=True, text=True, cwd=ROOT, timeout=60)
            for name in ("node1", "nope")}
    assert said["node1"].returncode == 0 and len(said["node1"].stdout.splitlines()) == 2
    assert "'node1' is not in" in said["node1"].stderr, said["node1"].stderr
    assert said["nope"].returncode == 2 and "no target 'nope'" in said["nope"].stderr
    # the page's launches table, in Chromium
    from playwright.sync_api import expect, sync_playwright
    from test_page import CHROME_ARGS, CHROMIUM
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        launches = page.locator("section[data-target='node1'] details.launches")
        launches.locator("summary").click()
        row = launches.locator("tr[data-startup='2']")
        expect(row).to_contain_text("max_running_requests 64 -> 2048", timeout=15_000)
        expect(row).to_contain_text("disable_cuda_graph False -> True")
        expect(launches.locator("tr[data-startup='1']")).to_contain_text("ready")
        # the page's script renders a flag's value as `history` does (args.flag_value_text)
        from logwatch.rules.args import flag_value_text
        for v in (None, True, 64, "/m/a", "", "None", "8", "a b", "it's", "C:\\x", [1, 2],
                  ["a", "b"], {"k": None, "x": True}):
            assert page.evaluate("v => flagText(v)", v) == flag_value_text(v), v
        page.screenshot(path=str(tmp_path / "launches.png"), full_page=True)
        browser.close()


def test_watch_at_ready_compares_with_the_previous_launch(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    env = {**__import__("os").environ, "LOGWATCH_STATE_DIR": str(tmp_path / "state")}

    def watch() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "logwatch", "watch", str(log),
                               "--gpu", "off", "--probe", "off", "--timeout", "60"], capture_output=True,
                              text=True, cwd=ROOT, env=env, timeout=90)
    log.write_text(launch(1, T0, ARGS_1, 880.0, minutes=0.5), encoding="utf-8")
    first = watch()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "vs the previous launch" not in first.stdout
    with open(log, "a", encoding="utf-8") as f:
        f.write(launch(2, T0 + 3600, ARGS_2, 3740.0, minutes=0.5))
    second = watch()
    assert second.returncode == 0, second.stdout + second.stderr
    line = next((ln for ln in second.stdout.splitlines() if "vs the previous launch" in ln), "")
    assert line, second.stdout
    assert "flags changed: max_running_requests 64 -> 2048, disable_cuda_graph False -> True" in line
    # the pack's advice on the launch is said with the verdict (it was only in `history --json`)
    advice = [ln for ln in second.stdout.splitlines() if "advice:" in ln]
    assert len(advice) == 1 and "CUDA graphs are off (disable_cuda_graph)" in advice[0], second.stdout
    assert "advice:" not in first.stdout, first.stdout


def test_a_restarted_daemon_keeps_the_serving_startup_s_record(tmp_path: Path,
                                                              daemons: Any) -> None:  # noqa: F811
    """kill -9 while the server serves, start again: the startup is still `ready` in the
    ledger, with its durations and flags (the new daemon resumes it, it does not start an
    'incomplete' record over it)."""
    import signal
    from support.daemon import wait_for
    log = tmp_path / "server.log"
    text = launch(1, T0, ARGS_1, 880.0, minutes=2.5)
    half = text.index("Decode batch", len(text) // 2)
    log.write_text(text[:half], encoding="utf-8")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg("node1", log, from_start=True, gpu=False)])
    d = daemons(cfg, port).start()

    def record() -> dict[str, Any] | None:
        code, body = d.get("/api/history?target=node1")
        recs = json.loads(body)["startups"] if code == 200 else []
        return recs[-1] if recs and recs[-1]["outcome"] == "ready" else None
    before = wait_for(record, 30, "the startup recorded as ready")
    from test_daemon import wait_checkpoint
    wait_checkpoint(tmp_path / "state", "node1", lambda ck: ck["extra"]["state"]["phase"] == "ready",
                    "ready")                # the restarted daemon goes on from there
    d.signal(signal.SIGKILL)
    d.wait_exit(timeout=20)
    d.start()
    with open(log, "a", encoding="utf-8") as f:
        f.write(text[half:])
    total = text.count("\n")
    d.wait_target("node1", lambda t: t["lines"] >= total, "the rest of the log read", timeout=30)
    d.signal(signal.SIGTERM)          # a clean stop saves the record as it stands
    assert d.wait_exit(timeout=30) == 0
    import sqlite3
    db = sqlite3.connect(tmp_path / "state" / "ledger.sqlite3")
    rows = [json.loads(r) for (r,) in db.execute("SELECT record FROM startups WHERE target='node1'")]
    assert len(rows) == 1, rows
    after = rows[0]
    assert after["outcome"] == "ready" and after["startup_seconds"] == before["startup_seconds"]
    assert after["durations"] == before["durations"] and after["args"] == before["args"]


def test_watch_without_history_still_says_the_launch_s_advice(tmp_path: Path) -> None:
    """The advice needs only the launch's arguments and its crash: `--no-history` (no
    ledger) said none for an OOM with mem_fraction_static 0.93."""
    from conftest import FIXTURES
    head = (FIXTURES / "sglang-018.log").read_text(encoding="utf-8").splitlines(keepends=True)
    i = next(n for n, line in enumerate(head) if "server_args=ServerArgs" in line)
    args = "".join(head[: i + 1]).replace("mem_fraction_static=0.78", "mem_fraction_static=0.93")
    crash = (FIXTURES / "sglang-027.log").read_text(encoding="utf-8")
    crash = crash[crash.rfind("\n", 0, crash.find("Traceback")) + 1:]
    log = tmp_path / "server.log"
    log.write_text(args + crash + "\n", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", "--last", str(log),
                          "--no-history", "--gpu", "off", "--probe", "off"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "advice: an out-of-memory crash with mem_fraction_static 0.93" in res.stdout, res.stdout
