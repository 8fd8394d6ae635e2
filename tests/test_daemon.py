"""`logwatch run`: the daemon as a real subprocess, read through /metrics, /healthz and
/api/status.  Reload (SIGHUP), restart after kill -9, clean stop (SIGTERM / SIGINT) and
broken targets next to healthy ones.

Logs are the simulator's script written by the test in pieces (no pauses: the test decides
when each piece arrives), so every step is synchronised by polling, never by sleeping.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import FIXTURES
from support.daemon import (
    Daemon, append, checkpoint, count_lines, daemons, free_port, sample, sim_texts,  # noqa: F401
    split_at, target_cfg, targets_in, wait_for, write_config,
)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

OOM = "torch.OutOfMemoryError: CUDA out of memory"


def lines_of(texts: list[str]) -> int:
    return sum(t.count("\n") for t in texts)


def wait_lines(d: Daemon, name: str, path: Path, timeout: float = 20.0) -> dict[str, Any]:
    """The target counted exactly the lines of its (no longer growing) log."""
    n = count_lines(path)
    t = d.wait_target(name, lambda t: t["lines"] >= n, f"lines >= {n}", timeout)
    assert t["lines"] == n, f"{name}: {t['lines']} lines counted, the log has {n}"
    d.wait_metric("logwatch_lines_total", float(n), target=name)
    return t


def wait_checkpoint(state_dir: Path, name: str, pred: Any, what: str,
                    timeout: float = 15.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        ck = checkpoint(state_dir, name)
        return ck if ck is not None and pred(ck) else None
    return wait_for(check, timeout, f"checkpoint of {name}: {what}")  # type: ignore[no-any-return]


# -- a. SIGHUP ------------------------------------------------------------------------------

def test_sighup_reload(tmp_path: Path, daemons: Any) -> None:
    a_log, b_log, c_log = (tmp_path / f"{n}.log" for n in "abc")
    a_log.write_text("".join(sim_texts(seed=1)), encoding="utf-8")
    c_log.write_text("".join(sim_texts(seed=3)), encoding="utf-8")
    b = sim_texts(seed=2, serve_lines=60)
    cut1 = split_at(b, "| 13/24 ") + 1          # B mid-shards at the reload
    cut2 = split_at(b, "fired up and ready") + 1  # B ready before the bad reload
    append(b_log, "".join(b[:cut1]))
    port = free_port()
    state = tmp_path / "state"
    cfg = tmp_path / "logwatch.yaml"
    write_config(cfg, port, state, [target_cfg("A", a_log),
                                    target_cfg("B", b_log, labels={"model": "m1"})])
    d: Daemon = daemons(cfg, port).start()
    d.wait_target("A", lambda t: t["phase"] == "ready", "ready")
    d.wait_target("B", lambda t: t["phase"] == "loading_shards" and t["shards"]["loaded"] == 12,
                  "loading_shards 12/24")
    wait_lines(d, "A", a_log)
    wait_lines(d, "B", b_log)

    # remove A, add C, change B's labels
    write_config(cfg, port, state, [target_cfg("B", b_log, labels={"model": "m2", "rack": "r7"}),
                                    target_cfg("C", c_log)])
    d.signal(signal.SIGHUP)
    st = wait_for(lambda: (lambda s: s if {t["name"] for t in s["targets"]} == {"B", "C"} else None)
                  (d.status()), 20, "targets B and C after SIGHUP", alive=d.dead)
    b_now = next(t for t in st["targets"] if t["name"] == "B")
    assert b_now["labels"] == {"model": "m2", "rack": "r7"}
    # B restarted from its checkpoint: same phase and epoch, same count, not waiting
    assert b_now["phase"] == "loading_shards" and b_now["epoch"] == 1, b_now
    assert b_now["startups"] == 1 and b_now["lines"] == lines_of(b[:cut1]), b_now
    m = d.metrics()
    assert "A" not in targets_in(m), "series of the removed target A are still exported"
    assert sample(m, "logwatch_target_info", target="B", model="m2", rack="r7") == 1.0
    assert sample(m, "logwatch_target_info", target="B", model="m1") is None
    # C reads its log
    d.wait_target("C", lambda t: t["phase"] == "ready", "ready")
    wait_lines(d, "C", c_log)
    # B continues: every line counted once, still one startup
    append(b_log, "".join(b[cut1:cut2]))
    d.wait_target("B", lambda t: t["phase"] == "ready", "ready")
    t = wait_lines(d, "B", b_log)
    assert t["startups"] == 1 and t["epoch"] == 1
    m = d.metrics()
    assert sample(m, "logwatch_startups_total", target="B") == 1.0
    assert sample(m, "logwatch_rule_matches_total", target="B", rule="server_args") == 1.0
    assert sample(m, "logwatch_shards_loaded", target="B") == 24.0

    # an invalid config: the reload fails, the old targets keep running
    good = cfg.read_text()
    bad = yaml.safe_load(good)
    bad["targets"] = [{**bad["targets"][0], "stall_after": "5x"}]  # and C removed
    cfg.write_text(yaml.safe_dump(bad), encoding="utf-8")
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in d.stderr(), 20, "'reload failed' in the daemon's log",
             alive=d.dead)
    assert "targets[0].stall_after" in d.stderr()
    assert d.get("/healthz")[0] == 200
    assert {t["name"] for t in d.status()["targets"]} == {"B", "C"}
    append(b_log, "".join(b[cut2:]))  # serving lines: B still reads
    wait_lines(d, "B", b_log)
    assert d.proc is not None and d.proc.poll() is None
    # the file caught mid-write (config management truncates, then writes): empty, then
    # cut after its first keys; before, both loaded as a fleet of none: every target stopped
    for n, (cut, says) in enumerate([("", "the file is empty"),
                                     (good[:good.index("targets:")], "targets: missing")]):
        cfg.write_text(cut, encoding="utf-8")
        d.signal(signal.SIGHUP)
        wait_for(lambda: d.stderr().count("reload failed") == n + 2, 20, f"reload {n} refused",
                 alive=d.dead)
        assert says in d.stderr().splitlines()[-1], d.stderr()[-500:]
        assert {t["name"] for t in d.status()["targets"]} == {"B", "C"}
    # another listen address or log_level is refused (a restart's), and so kept: restoring
    # the config is no change (before: the refused address was taken in, and restoring
    # warned again; a new log_level was ignored unsaid)
    moved = good.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}") + "log_level: error\n"
    assert moved != good
    reloaded = lambda: sum(e.get("event") == "reloaded" for e in d.log_events())  # noqa: E731
    for n, doc in enumerate([moved, good], start=reloaded() + 1):
        cfg.write_text(doc, encoding="utf-8")
        d.signal(signal.SIGHUP)
        wait_for(lambda: reloaded() == n, 20, f"reload {n}", alive=d.dead)
    assert d.stderr().count("listen address changes need a restart") == 1
    assert d.stderr().count("log_level changes need a restart") == 1   # (before: unsaid)


# -- b. restart after kill -9 ---------------------------------------------------------------

def test_restart_after_kill9_continues(tmp_path: Path, daemons: Any) -> None:
    """kill -9 mid-log, more lines while the daemon is down, restart: the phase and the
    counters continue from the checkpoint, no line is counted twice or lost, and the crash
    at the end of the log is counted once (also across a later restart)."""
    log = tmp_path / "server.log"
    texts = sim_texts(crash="oom", seed=4)
    cut1 = split_at(texts, "| 13/24 ") + 1
    cut2 = split_at(texts, "Running FlashInfer autotune")
    cut3 = split_at(texts, "Capture cuda graph begin") + 1
    append(log, "".join(texts[:cut1]))
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg("gpu1", log, labels={"model": "Qwen3"})])
    d: Daemon = daemons(cfg, port).start()
    d.wait_target("gpu1", lambda t: t["phase"] == "loading_shards", "loading_shards")
    wait_lines(d, "gpu1", log)
    n1 = count_lines(log)
    wait_checkpoint(state, "gpu1", lambda ck: ck["extra"]["counters"]["lines"] == n1 and
                    ck["extra"]["state"]["phase"] == "loading_shards", f"{n1} lines")
    d.kill9()

    append(log, "".join(texts[cut1:cut2]))  # written while the daemon is down
    d.start()
    first = d.target("gpu1")
    assert first is not None and first["phase"] != "waiting" and first["epoch"] == 1, first
    t = d.wait_target("gpu1", lambda t: t["phase"] == "allocating", "allocating")
    assert t["startups"] == 1
    wait_lines(d, "gpu1", log)

    append(log, "".join(texts[cut2:cut3]))
    d.wait_target("gpu1", lambda t: t["phase"] == "cuda_graph", "cuda_graph")
    wait_lines(d, "gpu1", log)
    append(log, "".join(texts[cut3:]))
    t = d.wait_target("gpu1", lambda t: t["phase"] == "crashed", "crashed")
    assert t["crash"]["reason"] == "cuda_oom" and t["crash"]["during"] == "cuda_graph", t["crash"]
    wait_lines(d, "gpu1", log)
    d.wait_metric("logwatch_crashes_total", 1.0, target="gpu1", reason="cuda_oom")
    m = d.metrics()
    assert sample(m, "logwatch_startups_total", target="gpu1") == 1.0
    assert sum(v for (n, ls), v in m.items() if n == "logwatch_crashes_total") == 1.0
    assert sample(m, "logwatch_rule_matches_total", target="gpu1", rule="server_args") == 1.0
    assert sample(m, "logwatch_shards_loaded", target="gpu1") == 24.0
    # the phases of the whole startup, across the restart
    assert t["phases_seen"][:3] == ["launching", "downloading", "loading_shards"], t["phases_seen"]

    # a clean restart later: nothing counted again
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    d.start()
    t = d.wait_target("gpu1", lambda t: t["phase"] == "crashed", "crashed after restart")
    assert t["lines"] == count_lines(log) and t["startups"] == 1
    m = d.metrics()
    assert sample(m, "logwatch_crashes_total", target="gpu1", reason="cuda_oom") == 1.0
    assert sample(m, "logwatch_lines_total", target="gpu1") == float(count_lines(log))


def test_a_pattern_target_follows_each_launch_file_across_a_restart(tmp_path: Path,
                                                                     daemons: Any) -> None:
    """`source: /jobs/job-*.out` (one log file per launch, as SLURM writes): the first
    launch's file appears and crashes (alerted, counted); the daemon is killed; the job is
    relaunched into job-2.out while it is down; restarted, the daemon reads the new file
    from byte 0 as the target's next startup: ready, 2 startups, the crash counted once."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "notes.txt").write_text("not a log\n")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg("job", jobs / "job-*.out")])
    d: Daemon = daemons(cfg, port).start()
    d.wait_target("job", lambda t: "matching" in str(t["source_state"]), "waiting for a match")
    first = jobs / "job-1.out"
    append(first, "".join(sim_texts(crash="oom", seed=4)))
    t = d.wait_target("job", lambda t: t["phase"] == "crashed", "the first launch's crash")
    assert t["crash"]["reason"] == "cuda_oom"
    n1 = count_lines(first)
    wait_checkpoint(state, "job", lambda ck: ck["extra"]["counters"]["lines"] == n1, f"{n1} lines")
    d.wait_metric("logwatch_crashes_total", 1.0, target="job", reason="cuda_oom")
    d.kill9()

    second = jobs / "job-2.out"
    append(second, "".join(sim_texts(seed=5)))      # relaunched while the daemon is down
    d.start()
    t = d.wait_target("job", lambda t: t["phase"] == "ready", "the relaunch ready")
    assert t["startups"] == 2, t
    n = n1 + count_lines(second)
    d.wait_target("job", lambda t: t["lines"] >= n, f"{n} lines")
    m = d.metrics()
    assert sample(m, "logwatch_lines_total", target="job") == float(n)
    assert sample(m, "logwatch_crashes_total", target="job", reason="cuda_oom") == 1.0
    assert sample(m, "logwatch_startups_total", target="job") == 2.0


def test_restart_mid_bar_counts_no_byte_twice(tmp_path: Path, daemons: Any) -> None:
    """Stopped while a tqdm frame is still unfinished (held back by the framer, so the saved
    position is before it): after the restart the frame is read again from the log, and the
    byte counter must not count it twice (logwatch_bytes_read_total == the file's size)."""
    log = tmp_path / "server.log"
    texts = sim_texts(seed=10)
    cut = split_at(texts, "| 13/24 ") + 1
    append(log, "".join(texts[:cut]))
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target_cfg("gpu3", log)])
    d: Daemon = daemons(cfg, port).start()
    wait_lines(d, "gpu3", log)
    d.wait_metric("logwatch_bytes_read_total", float(log.stat().st_size), target="gpu3")
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    ck = checkpoint(state, "gpu3")
    assert ck is not None and ck["position"]["offset"] < log.stat().st_size  # the held frame
    append(log, "".join(texts[cut:]))
    d.start()
    d.wait_target("gpu3", lambda t: t["phase"] == "ready", "ready")
    wait_lines(d, "gpu3", log)
    m = d.metrics()
    assert sample(m, "logwatch_shards_loaded", target="gpu3") == 24.0
    assert sample(m, "logwatch_rule_matches_total", target="gpu3", rule="shard_bar") == 25.0
    size = log.stat().st_size
    got = sample(m, "logwatch_bytes_read_total", target="gpu3")
    assert got == float(size), f"logwatch_bytes_read_total {got}, the log has {size} bytes"


@pytest.mark.parametrize("how", ["kill9", "SIGTERM"])
def test_restart_while_crash_settles_counts_it_once(tmp_path: Path, daemons: Any,
                                                    how: str) -> None:
    """The daemon goes away after the crash was seen (and checkpointed) but before it
    settled and was counted (CRASH_SETTLE, 5 s): after the restart the crash is still
    counted, once.  kill -9, and a clean stop (e.g. `systemctl restart`) alike."""
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(crash="oom", seed=5)), encoding="utf-8")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target_cfg("gpu2", log)])
    d: Daemon = daemons(cfg, port).start()
    if how == "kill9":
        ck = wait_checkpoint(state, "gpu2", lambda ck: ck["extra"]["state"]["phase"] == "crashed",
                             "phase crashed")
        counted = ck["extra"]["counters"]["crashes"]["cuda_oom"]
        d.kill9()
    else:
        d.wait_target("gpu2", lambda t: t["phase"] == "crashed", "crashed")
        counted = sample(d.metrics(), "logwatch_crashes_total", target="gpu2", reason="cuda_oom")
        d.signal(signal.SIGTERM)
        assert d.wait_exit() == 0
        ck = checkpoint(state, "gpu2")
        assert ck is not None and ck["extra"]["state"]["phase"] == "crashed"
    assert counted == 0, "the crash settled before the stop: this test needs the settle window"
    d.start()
    t = d.wait_target("gpu2", lambda t: t["phase"] == "crashed", "crashed")
    assert t["lines"] == count_lines(log)
    d.wait_metric("logwatch_crashes_total", 1.0, target="gpu2", reason="cuda_oom", timeout=12)
    assert sum(v for (n, ls), v in d.metrics().items() if n == "logwatch_crashes_total") == 1.0


# -- c. SIGTERM / SIGINT, /healthz, /api/status ---------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_clean_stop_and_status(tmp_path: Path, daemons: Any, sig: int) -> None:
    logs = {n: tmp_path / f"{n}.log" for n in ("ok", "boom", "loading")}
    logs["ok"].write_text("".join(sim_texts(seed=6)), encoding="utf-8")
    logs["boom"].write_text("".join(sim_texts(crash="oom", seed=7)), encoding="utf-8")
    partial = sim_texts(seed=8)
    logs["loading"].write_text("".join(partial[: split_at(partial, "| 7/24 ") + 1]),
                               encoding="utf-8")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg(n, p) for n, p in logs.items()])
    d: Daemon = daemons(cfg, port).start()
    code, body = d.get("/healthz")
    assert (code, body.strip()) == (200, "ok")
    d.wait_target("ok", lambda t: t["phase"] == "ready", "ready")
    d.wait_target("boom", lambda t: t["phase"] == "crashed", "crashed")
    d.wait_target("loading", lambda t: (t["shards"] or {}).get("loaded") == 6, "shards 6/24")
    for n, p in logs.items():
        wait_lines(d, n, p)
    before = time.time()
    doc = d.status()
    assert isinstance(doc["targets"], list) and len(doc["targets"]) == 3
    st = {t["name"]: t for t in doc["targets"]}
    for n, t in st.items():
        for key in ("phase", "epoch", "progress", "eta_seconds", "durations", "crash",
                    "source_state", "last_line_at"):
            assert key in t, f"{n}: /api/status has no {key!r}"
        assert t["epoch"] == 1
        assert t["source_state"]["up"] is True
        assert t["source_state"]["offset"] == logs[n].stat().st_size or n == "loading", \
            (n, t["source_state"], logs[n].stat().st_size)
        assert isinstance(t["last_line_at"], float) and before - 60 < t["last_line_at"] <= before + 1
    ok, boom, loading = st["ok"], st["boom"], st["loading"]
    assert ok["phase"] == "ready" and ok["eta_seconds"] == 0 and ok["crash"] is None
    assert ok["durations"]["loading_shards"] > 0 and set(ok["durations"]) >= {
        "launching", "loading_shards", "allocating", "autotune", "cuda_graph"}, ok["durations"]
    assert ok["progress"]["shards"]["current"] == ok["progress"]["shards"]["total"] == 24
    crash = boom["crash"]
    assert boom["phase"] == "crashed" and crash["reason"] == "cuda_oom", crash
    assert crash["during"] == "cuda_graph" and crash["line"].startswith(OOM)
    assert isinstance(crash["excerpt"], list) and any(OOM in ln for ln in crash["excerpt"])
    assert any("Traceback" in ln for ln in crash["excerpt"]), crash["excerpt"]
    assert loading["phase"] == "loading_shards" and loading["crash"] is None
    assert loading["progress"]["shards"] == {**loading["progress"]["shards"],
                                             "current": 6, "total": 24}
    assert isinstance(loading["eta_seconds"], (int, float)) and loading["eta_seconds"] > 0
    # the held back frame "7/24" is not consumed yet: the offset is before it
    assert 0 < loading["source_state"]["offset"] < logs["loading"].stat().st_size

    d.signal(sig)
    assert d.wait_exit(timeout=20) == 0, d.stderr()[-3000:]
    assert "Traceback" not in d.stderr(), d.stderr()[-3000:]
    for n, p in logs.items():
        ck = checkpoint(state, n)
        assert ck is not None, f"no checkpoint for {n} in {state / 'positions'}"
        assert ck["version"] == 2 and ck["target"] == n
        assert ck["extra"]["counters"]["lines"] == count_lines(p)
        assert ck["extra"]["state"]["phase"] == st[n]["phase"]
        assert ck["position"]["offset"] == st[n]["source_state"]["offset"]
    assert checkpoint(state, "ok")["position"]["offset"] == logs["ok"].stat().st_size  # type: ignore[index]


def test_sigterm_with_chatty_commands_stops_them_and_exits_cleanly(tmp_path: Path,
                                                                  daemons: Any) -> None:
    """`cmd:` targets whose commands never pause (their next read always done, their pipe
    full): SIGTERM stops the daemon at once, no command started again, nothing printed at
    exit.  Before, a stop could hang for good, restarting the commands (the cancel dropped
    by `wait_for`: tests/test_local_source.py has the exact case), and each stop ended in
    `Exception ignored ... Event loop is closed` (a command's pipe closed after the loop)."""
    port = free_port()
    names = ("a", "b", "c")
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg(n, f"cmd:yes target {n} says hello") for n in names])
    d: Daemon = daemons(cfg, port).start()
    for n in names:
        d.wait_target(n, lambda t: t["source_state"]["up"], "its command running")
    d.signal(signal.SIGTERM)
    assert d.wait_exit(timeout=20) == 0, d.stderr()[-3000:]
    err = d.stderr()
    stopped = err.index('"logwatch stopped"')
    assert "Exception ignored" not in err and "Traceback" not in err, err[stopped - 200:]
    assert "restarting" not in err, [e for e in d.log_events() if "restarting" in str(e)]


# -- d. a broken target does not delay the others -------------------------------------------

def test_broken_targets_do_not_delay_healthy_ones(tmp_path: Path, daemons: Any) -> None:
    closed = free_port()                       # nothing listens here
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # accepts, never speaks SSH
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        healthy = tmp_path / "healthy.log"
        port = free_port()
        ssh_opts = {"known_hosts": str(tmp_path / "known_hosts"), "connect_timeout": "30s"}
        (tmp_path / "known_hosts").write_text("", encoding="utf-8")
        targets = [
            target_cfg("ssh-closed", f"ssh://root@127.0.0.1:{closed}/var/log/sglang.log",
                       ssh=ssh_opts),
            target_cfg("ssh-silent",
                       f"ssh://root@127.0.0.1:{silent.getsockname()[1]}/var/log/sglang.log",
                       ssh=ssh_opts),
            target_cfg("cmd-missing", "cmd:/nonexistent/bin/logwatch-test-no-such-command"),
            target_cfg("cmd-fails", "cmd:false"),
            target_cfg("a-directory", str(tmp_path)),
            target_cfg("healthy", healthy),
        ]
        cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", targets)
        d: Daemon = daemons(cfg, port).start()
        started = time.monotonic()
        healthy.write_text("".join(sim_texts(seed=9)), encoding="utf-8")
        d.wait_target("healthy", lambda t: t["phase"] == "ready", "ready", timeout=10)
        took = time.monotonic() - started
        wait_lines(d, "healthy", healthy)
        assert took < 10
        st = {t["name"]: t for t in d.status()["targets"]}
        assert set(st) == {t["name"] for t in targets}
        for n in ("ssh-closed", "ssh-silent", "cmd-missing", "a-directory"):
            assert st[n]["source_state"]["up"] is False, (n, st[n]["source_state"])
            assert st[n]["phase"] == "waiting", (n, st[n]["phase"])
        m = d.metrics()
        assert sample(m, "logwatch_source_up", target="healthy") == 1.0
        assert sample(m, "logwatch_source_up", target="ssh-closed") == 0.0
        assert sample(m, "logwatch_ready", target="healthy") == 1.0
        assert math.isnan(sample(m, "logwatch_startup_eta_seconds", target="ssh-closed"))  # type: ignore[arg-type]
        assert d.get("/healthz")[0] == 200
        # and it stops cleanly with targets still connecting
        d.signal(signal.SIGTERM)
        assert d.wait_exit(timeout=20) == 0, d.stderr()[-3000:]
    finally:
        silent.close()


def test_secrets_in_sources_are_never_served(tmp_path: Path, daemons: Any, monkeypatch) -> None:
    """A password in an ssh:// URL and a `${VAR}` in a `cmd:` source: /api/status and the
    page show the source as written, with the password redacted and the variable unexpanded."""
    monkeypatch.setenv("LOGWATCH_TEST_TOKEN", "tok-5ecret-value")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("remote", "ssh://deploy:hunter2pass@127.0.0.1:1/var/log/server.log",
                   ssh={"known_hosts": "none", "connect_timeout": "1s"}),
        target_cfg("cmd", "cmd:printf 'started%.0s\\n' ${LOGWATCH_TEST_TOKEN}"),
    ])
    d: Daemon = daemons(cfg, port).start()
    d.wait_target("cmd", lambda t: t["lines"] >= 1, "the command's line read")
    for path in ("/api/status", "/", "/metrics"):
        code, body = d.get(path)
        assert code == 200
        assert "hunter2pass" not in body and "tok-5ecret-value" not in body, path
    shown = {t["name"]: t["source"] for t in d.status()["targets"]}
    assert shown == {"remote": "ssh://deploy:***@127.0.0.1:1/var/log/server.log",
                     "cmd": "cmd:printf 'started%.0s\\n' ${LOGWATCH_TEST_TOKEN}"}


def test_checkpoints_are_spread_over_many_targets() -> None:
    """At most CHECKPOINTS_PER_SECOND checkpoint files a second in all: a few targets keep the
    configured interval, 500 checkpoint every 20 s (each a rename in state_dir)."""
    from types import SimpleNamespace

    from logwatch.app.daemon import CHECKPOINTS_PER_SECOND, Daemon

    def spread(n: int, configured: float = 5.0) -> set[float]:
        fake = SimpleNamespace(config=SimpleNamespace(checkpoint_interval=configured),
                               runners={f"t{i}": SimpleNamespace(
                                   checkpoints=SimpleNamespace(interval=None))
                                        for i in range(n)})
        Daemon._spread_checkpoints(fake)  # type: ignore[arg-type]
        return {r.checkpoints.interval for r in fake.runners.values()}

    assert CHECKPOINTS_PER_SECOND == 25.0
    assert spread(3) == {5.0}
    assert spread(125) == {5.0}
    assert spread(500) == {20.0}
    assert spread(1000, configured=60.0) == {60.0}


def test_checkpoints_of_a_fleet_are_not_taken_together() -> None:
    """500 targets started together would write 500 checkpoints (and every 30 s fsync 500)
    in one pass of the loop, a stall of about a second: each target's slot in the interval
    comes from its name, spread over the whole interval, the same at every start."""
    from logwatch.app.target import checkpoint_phase

    phases = [checkpoint_phase(f"t{i:04d}") for i in range(500)]
    assert all(0.0 <= p < 1.0 for p in phases)
    tenths = [sum(1 for p in phases if k / 10 <= p < (k + 1) / 10) for k in range(10)]
    assert min(tenths) >= 25 and max(tenths) <= 75, tenths
    assert checkpoint_phase("t0001") == phases[1]


def test_the_daemon_follows_tensorrt_llm_logs_detected_by_its_pack(tmp_path: Path,
                                                                   daemons: Any) -> None:
    """The third engine through the daemon as a user runs it (`rules: auto`): a trtllm-serve
    start to ready (shards, phases timed by the log's clock), an NCCL crash with the rank
    that printed it, and the per-rank progress of a 2026 multi-rank log."""
    logs = {}
    for name, fixture in (("serve", "trtllm-012"), ("nccl", "trtllm-011"), ("kv", "trtllm-015")):
        logs[name] = tmp_path / f"{name}.log"
        append(logs[name], (FIXTURES / f"{fixture}.log").read_text(encoding="utf-8"))
    port = free_port()
    cfg = tmp_path / "logwatch.yaml"
    write_config(cfg, port, tmp_path / "state",
                 [target_cfg(n, p, rules="auto", gpu=False, probe=False) for n, p in logs.items()])
    d: Daemon = daemons(cfg, port).start()
    t = d.wait_target("serve", lambda t: t["phase"] == "ready", "ready")
    assert t["engine"] == "trtllm" and t["shards"] == {"loaded": 15, "total": 15}, t
    assert 40 <= t["durations"]["loading_shards"] <= 50, t["durations"]
    t = d.wait_target("nccl", lambda t: t["crash"] and t["crash"]["reason"] == "nccl_error",
                      "crashed: nccl_error")
    assert t["engine"] == "trtllm" and t["crash"]["rank"] == "RANK 0", t["crash"]
    t = d.wait_target("kv", lambda t: t["phase"] == "allocating" and len(t["ranks"]) == 2,
                      "allocating, two ranks")
    assert set(t["ranks"]) == {"RANK 0", "RANK 2"}, t["ranks"]
    m = wait_for(lambda: (lambda s: s if sample(s, "logwatch_crashes_total", reason="nccl_error",
                                                target="nccl") == 1.0 else None)(d.metrics()),
                 20, "the NCCL crash counted", alive=d.dead)
    assert sample(m, "logwatch_phase", phase="ready", target="serve") == 1.0


def test_a_copytruncate_while_the_daemon_is_down_is_read_from_the_copy(tmp_path: Path,
                                                                         daemons: Any) -> None:
    """A server started as `... > server.log` (one descriptor, never reopened, no append);
    the daemon is killed -9 while it loads; logrotate's copytruncate runs while it is down,
    the server writes on at its old offset (a hole in front) and crashes.  Restarted, the
    daemon reads the rest of the old log from server.log.1, then the new one past the
    hole: every line counted once, the crash once, nothing lost (before: the lines in the
    copy were skipped and a hole's zeros read)."""
    import os
    import shutil
    import subprocess
    if shutil.which("logrotate") is None:
        raise AssertionError("logrotate is not installed: scripts/test-deps.sh installs it")
    texts = sim_texts(crash="oom", seed=6, serve_lines=40)
    cut, rotate_at = 70, split_at(texts, "Capture cuda graph bs") + 1    # (lines end there)
    log = tmp_path / "server.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)   # the shell's `>`
    try:
        os.write(fd, "".join(texts[:cut]).encode())
        port = free_port()
        state = tmp_path / "state"
        cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target_cfg("gpu6", log)])
        d: Daemon = daemons(cfg, port).start()
        n1 = lines_of(texts[:cut])
        wait_checkpoint(state, "gpu6", lambda ck: ck["extra"]["counters"]["lines"] == n1,
                        f"{n1} lines")
        d.kill9()
        os.write(fd, "".join(texts[cut:rotate_at]).encode())
        conf = tmp_path / "logrotate.conf"
        conf.write_text(f"{log} {{\n  copytruncate\n  rotate 2\n}}\n")
        subprocess.run(["logrotate", "-f", "-s", str(tmp_path / "lr.state"), str(conf)],
                       check=True, capture_output=True, timeout=30)
        os.write(fd, "".join(texts[rotate_at:]).encode())
    finally:
        os.close(fd)
    assert log.read_bytes()[:1] == b"\0"                           # the hole
    d.start()
    t = d.wait_target("gpu6", lambda t: t["phase"] == "crashed", "the crash")
    assert t["crash"]["reason"] == "cuda_oom" and t["startups"] == 1, t
    n = lines_of(texts)
    d.wait_target("gpu6", lambda t: t["lines"] >= n, f"{n} lines")
    d.wait_metric("logwatch_crashes_total", 1.0, target="gpu6", reason="cuda_oom")  # settled
    m = d.metrics()
    assert sample(m, "logwatch_lines_total", target="gpu6") == float(n)
    assert not sample(m, "logwatch_source_losses_total", target="gpu6")


def test_another_engine_relaunched_into_the_log_is_read_by_its_own_pack(tmp_path: Path,
                                                                        daemons: Any) -> None:
    """One path, two engines, as an engineer comparing them relaunches (`vllm serve ... >
    server.log`, killed while loading, then `python -m sglang.launch_server ... >
    server.log`).  Before, the first engine's pack stayed for the target's life: SGLang's
    CUDA OOM was never seen, no alert.  Now the truncated file's head decides the pack
    again; and a log replaced by another engine's while the daemon is down is read by that
    engine's pack, not by the one its checkpoint names."""
    log = tmp_path / "server.log"
    append(log, (FIXTURES / "vllm-006.log").read_text(encoding="utf-8"))
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg("node", log, rules="auto", gpu=False, probe=False)])
    d: Daemon = daemons(cfg, port).start()
    t = d.wait_target("node", lambda t: t["engine"] == "vllm" and t["phase"] == "loading_shards",
                      "vLLM loading")
    before = t["startups"]                            # (vllm-006 shows no launch line: 0)
    with log.open("w", encoding="utf-8") as f:       # `>`: the same file, truncated
        f.write("".join(sim_texts(crash="oom")))
    t = d.wait_target("node", lambda t: t["crash"] and t["crash"]["reason"] == "cuda_oom",
                      "crashed: cuda_oom")
    assert t["engine"] == "sglang" and t["startups"] == before + 1, t
    d.wait_metric("logwatch_crashes_total", 1.0, target="node", reason="cuda_oom")
    wait_checkpoint(state, "node", lambda ck: ck["extra"]["pack"] == "sglang", "pack sglang")
    d.kill9()

    log.unlink()                                      # replaced while the daemon is down
    append(log, (FIXTURES / "built" / "vllm-034-default.log").read_text(encoding="utf-8"))
    d.start()
    t = d.wait_target("node", lambda t: t["phase"] == "ready", "ready")
    assert t["engine"] == "vllm" and t["startups"] == before + 2, t
    m = d.metrics()
    assert sample(m, "logwatch_crashes_total", target="node", reason="cuda_oom") == 1.0


def _now_stamped(path: Path) -> str:
    """A built log with its stamps moved to end now (a launch written as it happens)."""
    import datetime as dt
    import re
    text = path.read_text(encoding="utf-8")
    stamps = [dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S")
              for s in re.findall(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", text)]
    shift = dt.datetime.now().replace(microsecond=0) - max(stamps)
    return re.sub(r"(?<=\[)(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)",
                  lambda m: (dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") + shift)
                  .strftime("%Y-%m-%d %H:%M:%S"), text)


def test_a_follower_node_is_alerted_ready_never_stalled_nor_probed(tmp_path: Path,
                                                                    daemons: Any) -> None:
    """Node 1 of a 2-node SGLang launch (`--node-rank 1`) captures its graphs, then waits in
    silence for node 0's requests: no HTTP server, no ready line.  Before: cuda_graph for
    good, a `stalled` page after stall_after ("GPU idle: hung before the GPU"), every
    silence.  Now: ready once its last rank finished capturing, said a follower's, and not
    probed (the port in its arguments is node 0's to serve)."""
    from support.receivers import Receiver, hook
    log = tmp_path / "node1.log"
    log.write_text("")
    rx = Receiver().start()
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node1", log, gpu=False, stall_after="2s",
                   probe={"interval": "1s", "timeout": "1s", "fail_after": "2s"}),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["ready", "stalled", "unreachable"]}])
    d: Daemon = daemons(cfg, port).start()
    try:
        d.wait_target("node1", lambda t: t["source_state"]["state"] == "up", "reading")
        append(log, _now_stamped(FIXTURES / "built" / "sglang-0523-follower.log"))
        got = rx.wait(hook("ready", "firing", "node1"), timeout=30, alive=d.dead, what="ready")
        assert "a follower node: the head node serves" in got[0].json["summary"], got[0].json
        t = d.wait_target("node1", lambda t: t["probe"]["probes"] == 0 and "follower" in
                          (t["probe"]["verdict"] or ""), "the probe says why it does not ask")
        assert t["phase"] == "ready" and t["follower"] is True and t["status"] == "ready", t
        rx.assert_quiet(5.0, lambda g: hook("stalled")(g) or hook("unreachable")(g),
                        "a stalled or unreachable page for a follower waiting for requests")
        assert d.target("node1")["probe"]["probes"] == 0     # type: ignore[index]
    finally:
        rx.close()


def test_a_follower_ready_before_the_attach_is_history_not_alerted_nor_dead(
        tmp_path: Path, daemons: Any) -> None:
    """The same follower node's log, its last line (the last rank's capture) written 20
    minutes before the daemon first attached.  A follower is ready once its log stays quiet
    after that line; the quiet had passed before the read.  Before: the catch-up's end said
    "silent since ...: server probably dead" (cuda_graph, its budget long spent), then a
    tick made it ready: a `ready in 4m00s` alert for a startup 20 minutes old, where any
    other server's log ready then is history, not alerted."""
    from support.receivers import Receiver, hook
    log = tmp_path / "node1.log"
    log.write_text(_now_stamped(FIXTURES / "built" / "sglang-0523-follower.log"))
    old = time.time() - 20 * 60
    os.utime(log, (old, old))
    rx = Receiver().start()
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node1", log, gpu=False, probe=False),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["ready", "stalled", "crashed"]}])
    d: Daemon = daemons(cfg, port).start()
    try:
        t = d.wait_target("node1", lambda t: t["phase"] == "ready", "ready")
        assert t["follower"] is True and t["stalled"] is False, t
        wait_for(lambda: "history, not alerted" in d.stderr(), 10, "the attach's history note",
                 alive=d.dead)
        assert "probably dead" not in d.stderr(), d.stderr()[-2000:]
        rx.assert_quiet(3.0, hook("ready"), "a ready alert for a follower ready 20 minutes ago")
    finally:
        rx.close()


def test_a_second_daemon_on_the_same_state_dir_is_refused(tmp_path: Path, daemons: Any) -> None:
    """Two configs on a host both take the default state_dir: before, the second daemon
    overwrote the first's positions and alert marks and paged an hour-old crash the first
    had judged history.  Now it is refused at its start, one line naming the first's pid,
    exit 2; once the first is gone (kill -9 too: the kernel drops the lock), one starts."""
    import subprocess
    import sys
    state = tmp_path / "state"
    log = tmp_path / "server.log"
    append(log, "".join(sim_texts(seed=3)))
    port = free_port()
    cfg = write_config(tmp_path / "a.yaml", port, state, [target_cfg("a", log)])
    d: Daemon = daemons(cfg, port).start()
    other = write_config(tmp_path / "b.yaml", free_port(), state, [target_cfg("b", log)])
    res = subprocess.run([sys.executable, "-m", "logwatch", "run", "-c", str(other)],
                         capture_output=True, text=True, timeout=30)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert str(state) in lines[0] and "in use by another logwatch daemon" in lines[0], lines[0]
    assert d.proc is not None and f"pid {d.proc.pid}" in lines[0], lines[0]
    assert d.target("a") is not None        # the first serves on
    d.kill9()
    d.start()
    assert d.target("a") is not None
