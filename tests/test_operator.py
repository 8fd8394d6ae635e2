"""What the operator sees (issue 32): a dead log is dead, a blind monitor says so, the
README's commands end with their documented exit, errors that say what is wrong.

Each test is a defect found by using logwatch as a first-time operator would; each failed
before its fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from logwatch.machine import State
from logwatch.view import silent_at_attach, silent_text
from support.daemon import daemons, target_cfg, write_config, free_port  # noqa: F401
from support.receivers import hook, receivers  # noqa: F401  (the fixture)
from support.sshd import sshd_server  # noqa: F401  (the fixture)

# `silent since 17:23`, or `Dec 07 23:51` once that was yesterday (a run after midnight)
SINCE = r"silent since (?:\w\w\w \d\d )?\d\d:\d\d"

STARTUP = ("launching", "downloading", "loading_shards")


def run_cli(*args: str, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def dead_log(tmp_path: Path, minutes_idle: float = 65) -> Path:
    """The issue's repro: a TP8 SGLang launch killed while loading its shards, 65 minutes
    ago (no traceback): the first 83 lines of a generated log, its mtime 65 minutes old."""
    start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 70 * 60))
    full = subprocess.run([sys.executable, str(ROOT / "bench" / "genlog.py"), "--lines", "3000",
                           "--seed", "3", "--tp", "8", "--crash", "none", "--start", start],
                          capture_output=True, check=True).stdout
    path = tmp_path / "mid.log"
    path.write_bytes(b"\n".join(full.split(b"\n")[:83]) + b"\n")   # head -83
    old = time.time() - minutes_idle * 60
    os.utime(path, (old, old))
    return path


# -- a dead log is dead ----------------------------------------------------------------------

def test_silent_at_attach_decides_by_the_files_last_write() -> None:
    st = State(phase="loading_shards")
    now = 10_000.0
    assert silent_at_attach(st, now - 3900, now, 600, STARTUP) == now - 3900
    assert silent_at_attach(st, now - 30, now, 600, STARTUP) is None        # still writing
    assert silent_at_attach(st, None, now, 600, STARTUP) is None            # no mtime (cmd:)
    assert silent_at_attach(st, now - 30, now, 2, STARTUP) is None          # a stall, not dead
    assert silent_at_attach(st, now - 90, now, 2, STARTUP) == now - 90
    assert silent_at_attach(State(phase="ready"), now - 3900, now, 600, STARTUP) is None
    assert silent_at_attach(State(phase="waiting"), now - 3900, now, 600, STARTUP) is None
    text = silent_text(now - 3900, now)
    assert re.fullmatch(r"silent since \d\d:\d\d \(1h05m00s\): server probably dead", text), text


@pytest.mark.integration
def test_watch_on_a_log_dead_for_an_hour_exits_3_probably_dead(tmp_path: Path) -> None:
    res = run_cli("watch", "--gpu", "off", "--timeout", "60s", str(dead_log(tmp_path)))
    assert res.returncode == 3, (res.stdout, res.stderr)
    last = [ln for ln in res.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d ", ln)][-1]
    assert re.search(SINCE + r" \(1h0[45]m\d\ds\): server probably dead$", last), \
        res.stdout
    assert "ready in ~" not in res.stdout, res.stdout        # no ETA for a dead server
    assert res.stderr == "", res.stderr                       # no log record in the terminal


@pytest.mark.integration
def test_a_dead_log_of_bar_lines_only_gets_no_eta_either(tmp_path: Path) -> None:
    """A log whose last lines are a checkpoint bar's frames, silent 70 min: before, watch
    printed `shards 161/163 0.10/s, ready in ~2m00s (rough)` before "probably dead" (the
    catch-up's lines shown before the machine's tick stalled it)."""
    path = tmp_path / "dead.log"
    path.write_text("".join(f"Loading safetensors checkpoint shards: 98% Completed | {n}/163 "
                            f"[31:{40 + n - 159}<00:40, 10.00s/it]\n" for n in (159, 160, 161)))
    old = time.time() - 70 * 60
    os.utime(path, (old, old))
    res = run_cli("watch", "--gpu", "off", "--probe", "off", "--timeout", "60s", str(path))
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert "probably dead" in res.stdout and "ready in ~" not in res.stdout, res.stdout


@pytest.mark.integration
def test_watch_on_a_fresh_mid_startup_log_still_shows_an_eta(tmp_path: Path) -> None:
    path = dead_log(tmp_path, minutes_idle=0)
    res = run_cli("watch", "--gpu", "off", "--timeout", "3s", str(path))
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert "probably dead" not in res.stdout and "ready in ~" in res.stdout, res.stdout
    assert "timed out after 3s in loading_shards" in res.stdout, res.stdout


@pytest.mark.integration
def test_the_daemon_says_a_dead_log_once_and_shows_no_eta(tmp_path: Path, daemons: Any) -> None:
    path = dead_log(tmp_path)
    port = free_port()
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state",
                       [target_cfg("node1", path, gpu="off")])
    d = daemons(cfg, port).start()
    t = d.wait_target("node1", lambda t: t["status"] == "silent", "silent")
    assert t["eta_seconds"] is None and t["phase"] == "loading_shards", t
    assert all(p["eta_seconds"] is None for p in t["progress"].values()), t["progress"]
    assert re.fullmatch(SINCE + r" \(1h0[45]m\d\ds\): server probably dead",
                        t["silent"]), t["silent"]
    said = [e for e in d.log_events() if "probably dead" in str(e.get("event"))]
    assert len(said) == 1, said
    # the daemon restarted: the same words (before, a plain `stalled` with no detail,
    # the header's 14 silent became 14 stalled with no server changed: helper adv25 M3)
    assert d.stop() == 0
    d = daemons(cfg, port).start()
    t = d.wait_target("node1", lambda t: t["source_state"]["state"] == "up", "reading again")
    assert t["status"] == "silent" and t["eta_seconds"] is None, t
    assert re.fullmatch(SINCE + r" \(1h0[45]m\d\ds\): server probably dead",
                        t["silent"]), t["silent"]
    with open(path, "a") as f:           # it writes again: not dead any more
        f.write("[2026-01-01 10:00:00 TP0] Load weight end. type=Qwen3ForCausalLM\n")
    t = d.wait_target("node1", lambda t: t["status"] != "silent", "alive again")
    assert t["silent"] is None, t



@pytest.mark.integration
def test_a_dead_log_that_wrote_again_and_stalled_is_not_silent_since_the_attach(
        tmp_path: Path, daemons: Any) -> None:
    """A log silent past its budget at attach ("silent since ...: probably dead") that
    writes again and later stalls again is stalled from its new line.  Before (helper
    adv37), the attach's silence was never dropped: 28 s after the new line the target
    was `silent` again, "silent since 06:28 (1h05m32s): server probably dead"."""
    path = dead_log(tmp_path)
    port = free_port()
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state",
                       [target_cfg("node1", path, gpu="off", stall_after=4)])
    d = daemons(cfg, port).start()
    d.wait_target("node1", lambda t: t["status"] == "silent", "silent")
    with open(path, "a") as f:
        f.write("[2026-01-01 10:00:00 TP0] Load weight end. type=Qwen3ForCausalLM\n")
    d.wait_target("node1", lambda t: t["status"] != "silent", "alive again")
    t = d.wait_target("node1", lambda t: t["stalled"], "stalled again", timeout=30)
    time.sleep(1.5)
    t = d.wait_target("node1", lambda t: t["stalled"], "stalled again")
    assert t["status"] == "stalled" and t["silent"] is None, (t["status"], t["silent"])

# -- the README's "things to try" --------------------------------------------------------------

# what each command of the list must print (a regex over stdout + stderr); a command added to
# the README without a line here fails the test, as does one of these missing from it
README_SHAPES = {
    "logwatch replay tests/fixtures/sglang-027.log":
        r"sglang-027\.log: crashed: cuda_oom during cuda_graph",
    "logwatch replay --json tests/fixtures/*.log | head -3":
        r"\A(\{\"file\": \"tests/fixtures/[^\n]*\}\n){3}\Z",
    "logwatch watch --last tests/fixtures/vllm-030.log":
        r"the latest startup in this log stopped .*\n.*stopped \(clean shutdown\)",
    "logwatch watch - < tests/fixtures/sglang-006.log":
        r"CRASHED: warmup_failed during loading_shards",
    "logwatch rules test sglang tests/fixtures/sglang-021.log":
        r"\d+ lines: \d+ matched, \d+ unmatched\n  shard_bar +\d",
    "logwatch run -c deploy/logwatch.example.yaml --check":
        r"2 problems:\n.*SLACK_WEBHOOK_URL is not set.*\n.*LOGWATCH_WEBHOOK_SECRET is not set",
    "SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T/B/x LOGWATCH_WEBHOOK_SECRET=s "
    "logwatch run -c deploy/logwatch.example.yaml --check":
        r"deploy/logwatch\.example\.yaml: ok \(4 targets, 3 alert sinks\)",
}



def test_a_log_that_served_hours_ago_is_not_read_as_serving_now(tmp_path: Path,
                                                               daemons: Any) -> None:  # noqa: F811
    """A first attach to a log whose last decode line was written two hours ago (its mtime):
    its figures are as old as that line, not as the moment they were read.  Before (adv32,
    regression of 4d48760): 2,812 tok/s and 66 running for the first minute after attach."""
    from logwatch.app.simulate import script
    t0 = time.time() - 7200
    path = tmp_path / "served.log"
    path.write_text("".join(s.text for s in script(start=t0, serve_lines=40)))
    os.utime(path, (t0 + 100, t0 + 100))
    port = free_port()
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state",
                       [target_cfg("node1", path, gpu="off")])
    d = daemons(cfg, port).start()
    t = d.wait_target("node1", lambda t: t["phase"] == "ready" and not t["catching_up"], "read")
    assert t["stats"].get("gen_throughput") == 0.0, t["stats"]
    assert "running_requests" not in t["stats"], t["stats"]


def readme_things_to_try() -> list[tuple[str, int]]:
    """(command, documented exit code) of each line of the README's "Things to try" block
    (continuation lines joined; `# exit N` in the comment, else 0)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("Things to try right away", 1)[1].split("\n\n", 2)[1]
    out, pending = [], ""
    for raw in block.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        cmd, _, comment = line.partition("  #")
        cmd = cmd.strip()
        if cmd.startswith(". "):
            continue                      # activating the venv
        m = re.match(r"\s*exit (\d+)", comment)
        out.append((cmd, int(m.group(1)) if m else 0))
    return out


@pytest.mark.integration
def test_every_command_of_the_readme_ends_with_its_documented_exit_and_output() -> None:
    cmds = readme_things_to_try()
    assert {c for c, _ in cmds} == set(README_SHAPES), cmds
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLACK_WEBHOOK_URL", "LOGWATCH_WEBHOOK_SECRET")}   # a fresh shell
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for cmd, code in cmds:
        res = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        out = res.stdout + res.stderr
        assert res.returncode == code, (cmd, res.returncode, out[-2000:])
        shape = README_SHAPES[cmd]
        target = res.stdout if shape.startswith(r"\A") else out
        assert re.search(shape, target), (cmd, out[-2000:])
        assert "Traceback" not in res.stderr, (cmd, res.stderr[-2000:])


@pytest.mark.integration
def test_bare_logwatch_prints_its_help() -> None:
    res = run_cli()
    assert res.returncode == 2
    assert "COMMAND" in res.stderr and "watch" in res.stderr and "replay" in res.stderr, res.stderr
    assert "examples:" in res.stderr, res.stderr     # the help, not one error line


# -- a blind monitor says so ---------------------------------------------------------------------

@pytest.mark.integration
def test_a_refused_key_and_a_failing_command_alert_source_down_and_sighup_retries(
        tmp_path: Path, daemons: Any, receivers: Any, sshd_server: Any) -> None:  # noqa: F811
    """A refused SSH key (against the real test sshd) and a `cmd:` that keeps failing: each
    a `source_down` alert after its grace, `logwatch_source_state` fatal / error; a log not
    there yet is `waiting`, not alerted.  The key authorised and SIGHUP: it reads again and
    the alert resolves."""
    from support.daemon import parse_metrics, sample, wait_for
    rx = receivers()
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)],
                   check=True, capture_output=True, timeout=30)
    remote = tmp_path / "remote.log"
    remote.write_text("[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m', port=1)\n")
    port = free_port()
    ssh = {"known_hosts": str(sshd_server.known_hosts), "client_keys": [str(wrong)]}
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state", [
        target_cfg("refused", sshd_server.url(remote), ssh=ssh, gpu="off", probe="off",
                   source_down_after="2s"),
        target_cfg("failing", "cmd:sh -c 'echo no such pod >&2; exit 3'", gpu="off",
                   source_down_after="2s"),
        target_cfg("waiting", tmp_path / "not-yet.log", gpu="off", source_down_after="2s"),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["source_down"]}])
    d = daemons(cfg, port).start()
    for name in ("refused", "failing"):
        got = rx.wait(hook("source_down", "firing", name), timeout=30, alive=d.dead,
                      what=f"source_down of {name}")
        assert "cannot read the log for" in got[0].json["summary"], got[0].json
    m = d.metrics()
    assert sample(m, "logwatch_source_state", target="refused", state="fatal") == 1.0
    assert sample(m, "logwatch_source_state", target="failing", state="error") == 1.0
    assert sample(m, "logwatch_source_state", target="waiting", state="waiting") == 1.0
    assert sample(m, "logwatch_source_state", target="waiting", state="error") == 0.0
    assert sample(m, "logwatch_stalled", target="waiting") == 0.0
    assert sample(m, "logwatch_build_info") == 1.0
    rx.assert_quiet(1.0, hook("source_down", target="waiting"), "for a log not there yet")
    assert len(rx.requests(hook("source_down", "firing", "refused"))) == 1   # once
    # the key is authorised; SIGHUP tries the refused source again at once
    with open(sshd_server.authorized_keys, "a") as f:
        f.write(Path(str(wrong) + ".pub").read_text())
    d.signal(__import__("signal").SIGHUP)
    d.wait_target("refused", lambda t: t["source_state"]["state"] == "up", "reading again",
                  timeout=30)
    rx.wait(hook("source_down", "resolved", "refused"), timeout=30, alive=d.dead,
            what="source_down resolved")
    wait_for(lambda: sample(parse_metrics(d.metrics_text()), "logwatch_source_state",
                            target="refused", state="up") == 1.0, 10, "state up")


# -- ready means serving -----------------------------------------------------------------------

def _ready_log(tmp_path: Path, port: int) -> Path:
    """A startup that got ready just now, serving on 127.0.0.1:`port` by its log."""
    from logwatch.app.simulate import script
    path = tmp_path / "server.log"
    path.write_text("".join(s.text for s in script(start=time.time() - 120, port=port,
                                                   serve_lines=2)))
    return path


@pytest.mark.integration
def test_watch_ready_in_log_but_not_answering_is_not_ready(tmp_path: Path) -> None:
    port = free_port()                       # nothing listens there
    path = _ready_log(tmp_path, port)
    res = run_cli("watch", "--gpu", "off", "--no-history", "--timeout", "4s", str(path))
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert re.search(rf"ready in log; waiting for http://127\.0\.0\.1:{port}\S* to answer", res.stdout), \
        res.stdout
    last = [ln for ln in res.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d ", ln)][-1]
    assert f"timed out after 4s: ready in log, not answering: connection refused (127.0.0.1:{port})" \
        in last, \
        res.stdout
    assert "READY" not in res.stdout, res.stdout
    # --probe off: the log's word
    res = run_cli("watch", "--gpu", "off", "--no-history", "--probe", "off", "--timeout", "30s",
                  str(path))
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "READY" in res.stdout and "waiting for" not in res.stdout, res.stdout


@pytest.mark.integration
def test_watch_ready_and_answering_exits_0(tmp_path: Path, receivers: Any) -> None:  # noqa: F811
    rx = receivers()                          # a real HTTP server answering 200
    path = _ready_log(tmp_path, rx.port)
    res = run_cli("watch", "--gpu", "off", "--no-history", "--timeout", "30s", str(path))
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert re.search(r"READY in", res.stdout), res.stdout
    assert rx.requests(), "the endpoint was never asked"


@pytest.mark.integration
def test_watch_ready_on_a_server_with_an_api_key_exits_0(tmp_path: Path,
                                                          receivers: Any) -> None:  # noqa: F811
    """A server started with `--api-key` (production's usual launch) answers 401 on /v1/...
    without the key and 200 on /health (vLLM's AuthenticationMiddleware and SGLang's
    decide_request_auth, 0.34.0 / 0.5.23).  The probe carries no key: that 401 is the server
    answering.  Before: "waiting for ... to answer" until the timeout, exit 3."""
    def keyed(got: Any, rx: Any) -> tuple[int, dict[str, str], bytes]:
        if got.path.startswith(("/v1", "/v2")) and \
                got.header("Authorization") != "Bearer sk-test":
            return 401, {}, b'{"error": "Unauthorized"}'
        return 200, {}, b"{}"

    rx = receivers(keyed)
    path = _ready_log(tmp_path, rx.port)
    res = run_cli("watch", "--gpu", "off", "--no-history", "--timeout", "20s", str(path))
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert re.search(r"READY in", res.stdout), res.stdout
    assert "200 /health, 401 /v1/models (needs a key)" in res.stdout, res.stdout
    assert {g.path for g in rx.requests()} == {"/health", "/v1/models"}


# -- logwatch status -c CFG ------------------------------------------------------------------

def test_fleet_table_puts_the_broken_targets_first() -> None:
    from logwatch.app.fleet import fleet_table
    doc = {"now": 1000.0, "targets": [
        {"name": "a-ready", "status": "ready", "phase": "ready", "ready_in_seconds": 200,
         "last_line_at": 990.0, "stats": {"gen_throughput": 3120.0},
         "source_state": {"up": True}},
        {"name": "b-loading", "status": "loading_shards", "phase": "loading_shards",
         "shards": {"loaded": 10, "total": 37}, "eta_seconds": 110, "source_state": {"up": True}},
        {"name": "c-crashed", "status": "crashed", "phase": "crashed",
         "crash": {"reason": "cuda_oom", "during": "cuda_graph"}, "source_state": {"up": True}},
        {"name": "d-key", "status": "error", "phase": "waiting",
         "source_state": {"up": False, "error": True, "fatal": True,
                          "message": "permission denied (publickey)"}},
        {"name": "e-later", "status": "waiting", "phase": "waiting",
         "source_state": {"up": False, "message": "waiting for /x.log to appear"}},
    ]}
    lines = fleet_table(doc)
    assert lines[0].split() == ["NAME", "STATUS", "PROGRESS", "LAST", "LINE", "DETAIL"]
    names = [ln.split()[0] for ln in lines[1:-1]]
    assert names == ["d-key", "c-crashed", "b-loading", "e-later", "a-ready"], lines
    assert "permission denied (publickey)" in lines[1] and "cuda_oom during cuda_graph" in lines[2]
    assert "10/37 shards · ETA 1m50s" in lines[3] and "3,120 tok/s" in lines[5]
    assert lines[-1] == "5 targets: 1 error, 1 crashed, 1 loading_shards, 1 ready, 1 waiting" \
        "  (2 need a look)", lines[-1]


def test_long_names_stay_told_apart_on_a_terminal() -> None:
    """A fleet of FQDNs alike but for the node: the middle cut printed
    `sglang-decode-node-…t-2.compute.internal` for node-17 (crashed) and node-18 (ready)
    alike (helper adv27 M7).  Now the domain they share is left out; names alike at both
    ends and differing in the middle keep their end cut apart."""
    from logwatch.app.fleet import NAME_MAX, fleet_table, short_names
    names = [f"sglang-decode-node-{i}.us-east-2.compute.internal" for i in (17, 18)]
    doc = {"now": 1000.0, "targets": [
        {"name": names[0], "status": "crashed", "phase": "crashed", "source_state": {"up": True},
         "crash": {"text": "crashed: cuda_oom during cuda_graph"}},
        {"name": names[1], "status": "ready", "phase": "ready", "ready_in_seconds": 80,
         "source_state": {"up": True}}]}
    lines = fleet_table(doc, 120)
    shown = [ln.split("   ")[0].strip() for ln in lines[1:3]]
    assert shown == ["sglang-decode-node-17…", "sglang-decode-node-18…"], lines
    middle = [f"{'a' * 25}-{i}-{'b' * 25}" for i in (1, 2)]     # alike at both ends
    out = short_names(middle)
    assert len(set(out)) == 2 and all(len(n) <= NAME_MAX for n in out), out
    one = ["x" * 60]                         # one long name: its middle cut, as before
    assert short_names(one) == [one[0][:19] + "…" + one[0][-20:]]
    assert short_names(["a", "b"]) == ["a", "b"]


def test_fleet_table_keeps_the_why_with_a_long_name_and_a_narrow_terminal() -> None:
    """One FQDN-style name widened every row and the fixed 160-column cut took every
    DETAIL off (`source: cannot run ... No such file or di`); COLUMNS was ignored (helper
    adv25 M1).  Now long names are shortened in their middle, a pipe gets whole rows, and
    a narrow terminal gets the DETAIL on its own line."""
    from logwatch.app.fleet import NAME_MAX, fleet_table
    fqdn = "sglang-node-07.rack-17.datacenter-frankfurt.example-corp.internal"
    why = "source: cannot run /nonexistent/bin/foo: No such file or directory"
    doc = {"now": 1000.0, "targets": [
        {"name": "broken-src", "status": "error", "phase": "waiting",
         "source_state": {"up": False, "error": True, "fatal": True,
                          "message": why.removeprefix("source: ")}},
        {"name": fqdn, "status": "ready", "phase": "ready", "ready_in_seconds": 80,
         "last_line_at": 990.0, "source_state": {"up": True}}]}
    piped = fleet_table(doc)                 # a script's pipe: nothing cut
    assert why in piped[1] and fqdn in piped[2], piped
    for cols in (80, 200):
        lines = fleet_table(doc, cols)
        assert all(len(ln) <= cols for ln in lines[:-1]), (cols, lines)
        assert max(len(ln.split("   ")[0]) for ln in lines[:-1]) <= NAME_MAX, lines
        assert why in "".join(ln.strip() for ln in lines), (cols, lines)
    import io
    import os
    import pty
    from logwatch.app.fleet import terminal_width
    assert terminal_width(io.StringIO()) is None          # a pipe: whole rows
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            os.environ["COLUMNS"] = "60"
            try:
                assert terminal_width(tty) == 60                # a terminal: COLUMNS
            finally:
                del os.environ["COLUMNS"]
    finally:
        os.close(master)
        os.close(slave)
    narrow = fleet_table(doc, 40)
    assert all(len(ln) <= 40 for ln in narrow[:-1]), narrow
    assert narrow[2] == "broken-src" and narrow[3].startswith("    source: cannot"), narrow


@pytest.mark.integration
def test_status_shows_the_daemons_fleet_bad_first(tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    from support.daemon import sim_texts
    ready, crashed = tmp_path / "ready.log", tmp_path / "crashed.log"
    ready.write_text("".join(sim_texts(start=time.time() - 100)))
    crashed.write_text("".join(sim_texts(start=time.time() - 100, crash="oom")))
    port = free_port()
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state", [
        target_cfg("n1-ready", ready, gpu="off", probe="off"),
        target_cfg("n2-crashed", crashed, gpu="off", probe="off"),
        target_cfg("n3-dead", dead_log(tmp_path), gpu="off", probe="off"),
        target_cfg("n4-later", tmp_path / "later.log", gpu="off"),
        target_cfg("n5-failing", "cmd:sh -c 'exit 7'", gpu="off"),
    ])
    d = daemons(cfg, port).start()
    d.wait_target("n2-crashed", lambda t: t["status"] == "crashed", "crashed")
    d.wait_target("n3-dead", lambda t: t["status"] == "silent", "silent")
    d.wait_target("n5-failing", lambda t: t["status"] == "error", "error")
    d.wait_target("n1-ready", lambda t: t["status"] == "ready", "ready")
    res = run_cli("status", "-c", str(cfg))
    assert res.returncode == 0, (res.stdout, res.stderr)
    rows = res.stdout.splitlines()
    names = [ln.split()[0] for ln in rows[1:-1]]
    assert names == ["n5-failing", "n2-crashed", "n3-dead", "n4-later", "n1-ready"], res.stdout
    assert "server probably dead" in rows[3] and "cuda_oom" in rows[2], res.stdout
    # the crash's one sentence, as /api/status has it (rank and time to the crash included)
    sentence = d.target("n2-crashed")["crash"]["text"]
    assert re.fullmatch(r"crashed: cuda_oom during cuda_graph after \S+ \(TP\d first\)", sentence)
    assert sentence.removeprefix("crashed: ") in rows[2], res.stdout
    assert rows[-1].startswith("5 targets: 1 error, 1 crashed, 1 silent"), rows[-1]
    d.stop()
    res = run_cli("status", "-c", str(cfg))
    assert res.returncode == 2 and "cannot ask the daemon at http://127.0.0.1:" in res.stderr, \
        res.stderr


# -- errors that say ---------------------------------------------------------------------------

def test_a_mistyped_file_names_the_nearest_names() -> None:
    import tempfile
    from logwatch.cli import target_problem
    with tempfile.TemporaryDirectory() as d:
        for n in ("server.log", "server.log.1", "notes.txt"):
            Path(d, n).write_text("x")
        problem = target_problem(os.path.join(d, "servr.log"))
        assert problem is not None
        assert problem.startswith(f"no such file: {d}/servr.log; in {d}: server.log"), problem
        assert f"(did you mean {d}/server.log?)" in problem and "--wait" in problem, problem
        assert target_problem(os.path.join(d, "servr.log"), wait_for_file=True) is None
        assert target_problem(os.path.join(d, "server.log")) is None


@pytest.mark.parametrize("command, op", [
    ("docker logs -f sglang", None), ("grep -v 'a|b' server.log", None),
    ("kubectl logs -f pod --tail=-1", None), ("sh -c 'tail -F x | grep -v GET'", None),
    ("docker logs -f x | grep -v GET", "|"), ("docker logs -f x 2>&1", ">&"),
    ("tail -F a.log > copy.log", ">"), ("cd /logs && tail -F x", "&&"), ("a; b", ";"),
    ("echo 'unclosed", None),
])
def test_a_command_s_shell_syntax_is_named(command: str, op: str | None) -> None:
    """`cmd:` runs its words without a shell: an unquoted operator is named, with the
    `sh -c` form to write instead (config: tests/test_config.py)."""
    from logwatch.sources.command import shell_syntax
    assert shell_syntax(command) == op


@pytest.mark.parametrize("target, said", [
    ("http://gpu-1:8000/logs/server.log",
     "http://gpu-1:8000/logs/server.log: http:// is not read (a local path, "
     "ssh://[user@]host[:port]/abs/path, cmd:COMMAND or -); a log served over HTTP: "
     "'cmd:curl -sSN http://gpu-1:8000/logs/server.log'"),
    ("sftp://root@gpu-1/var/log/server.log",
     "sftp://root@gpu-1/var/log/server.log: sftp:// is not read; did you mean "
     "ssh://root@gpu-1/var/log/server.log?"),
    ("file:///var/log/server.log", "file:///var/log/server.log: file:// is not read; give "
                                   "the path: /var/log/server.log"),
])
def test_a_url_watch_does_not_read_says_what_to_write(target: str, said: str) -> None:
    """Before: "http://x/y.log looks like scp's host:path; did you mean ssh://http//x/y.log?"."""
    from logwatch.cli import target_problem
    assert target_problem(target) == said


@pytest.mark.parametrize("target, tail", [
    # a query: its `?` was read as a glob ("... does not exist (the directory of ...)"), and
    # its `&` unquoted is a shell operator that cmd: refuses
    ("http://gpu-1:8000/logs/server.log?since=0&follow=1",
     """a log served over HTTP: 'cmd:curl -sSN "http://gpu-1:8000/logs/server.log?since=0&follow=1"'"""),
    # an IPv6 host's brackets were read as a pattern ("a literal [ is written [[]")
    ("sftp://root@[fe80::1]:2222/var/log/server.log",
     "did you mean ssh://root@[fe80::1]:2222/var/log/server.log?"),
    ("SSH://gpu-1/var/log/server.log", "write the scheme in lower case: ssh://gpu-1/var/log/server.log"),
    ("file://localhost/var/log/server.log", "give the path: /var/log/server.log"),
    ("file:///var/log/my%20server.log", "give the path: '/var/log/my server.log'"),
    ("file://gpu-1/var/log/server.log", "another machine's file: ssh://gpu-1/var/log/server.log"),
])
def test_a_url_suggestion_is_one_that_works(target: str, tail: str) -> None:
    """What watch suggests for a URL it does not read can be pasted as it is (helper adv33
    L, left by ff0ed57): before, a query's URL got "... does not exist", its cmd:curl
    suggestion was refused by cmd:'s shell check, SSH:// was "ssh:// is not read",
    file://localhost/p gave the path "localhost/p"."""
    import shlex
    from logwatch.cli import target_problem
    from logwatch.sources.command import shell_syntax
    said = target_problem(target)
    assert said is not None and said.endswith(tail), said
    if "cmd:curl" in tail:
        word = shlex.split(said.rsplit(": ", 1)[1])[0]
        assert word.startswith("cmd:") and shell_syntax(word[4:]) is None, word
        assert shlex.split(word[4:])[-1] == target


def test_a_named_pipe_says_how_to_read_it(tmp_path: Path) -> None:
    """Before: `watch FIFO` printed a daemon's JSON log line and `OSError(29, 'Illegal
    seek')`, exit 2."""
    from logwatch.cli import target_problem
    fifo = tmp_path / "server.fifo"
    os.mkfifo(fifo)
    assert target_problem(str(fifo)) == (f"{fifo} is a named pipe (FIFO): a target is a file "
                                         f"read by offset; read the pipe as a stream: "
                                         f"logwatch watch - < {fifo}")


@pytest.mark.integration
def test_watch_exits_2_on_a_mistyped_file_and_waits_only_with_wait(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("")
    res = run_cli("watch", "--gpu", "off", str(tmp_path / "sever.log"), "--timeout", "20s")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(res.stderr.splitlines()) == 1 and "did you mean" in res.stderr, res.stderr
    res = run_cli("watch", "--gpu", "off", str(tmp_path / "sever.log"), "--wait",
                  "--timeout", "1s")
    assert res.returncode == 3 and "to appear" in res.stdout, (res.stdout, res.stderr)


@pytest.mark.integration
@pytest.mark.parametrize("host,said", [("no-such-host.invalid", "no such host: no-such-host.invalid"),
                                       ("127.0.0.1:{closed}", "connection refused by 127.0.0.1:")])
def test_watch_exits_2_at_once_on_a_dns_typo_or_a_closed_port(host: str, said: str) -> None:
    url = f"ssh://root@{host.format(closed=free_port())}/var/log/x.log"
    t0 = time.monotonic()
    res = run_cli("watch", "--gpu", "off", url, "--timeout", "60s")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert time.monotonic() - t0 < 30
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and said in lines[0], res.stderr
    assert "gaierror" not in res.stdout + res.stderr and "Errno" not in lines[0], res.stderr


@pytest.mark.integration
def test_the_daemon_shows_a_dns_typo_as_the_sources_error(tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    port = free_port()
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state", [
        target_cfg("typo", "ssh://root@no-such-host.invalid/var/log/x.log", gpu="off",
                   probe="off")])
    d = daemons(cfg, port).start()
    t = d.wait_target("typo", lambda t: t["status"] == "error", "error")
    assert "no such host: no-such-host.invalid" in t["source_state"]["message"], t["source_state"]
    assert "Traceback" not in d.stderr() and "gaierror" not in d.stderr(), d.stderr()[-2000:]


def test_vs_the_previous_launch_says_what_it_served() -> None:
    from logwatch.ledger import StartupRecord, served_text, vs_previous_text
    prev = StartupRecord("a@0", 1, 0.0, "sglang", "m", {"tp_size": 8}, False, "ready",
                         durations={"loading_shards": 60.0}, startup_seconds=100.0,
                         serving={"gen_throughput": {"p50": 3718.4, "max": 4000.0}},
                         gpu={"power_p50_w": 5120.0, "power_limit_w": 5600.0})
    cur = StartupRecord("b@9", 2, 10.0, "sglang", "m", {"tp_size": 8}, False, "ready",
                        durations={"loading_shards": 70.0}, startup_seconds=110.0)
    assert served_text(prev) == "3,718 tok/s p50 at 5,120 W p50"
    assert served_text(cur) == ""
    text = vs_previous_text(prev, cur)
    assert text.startswith("vs the previous launch: +10s") and \
        text.endswith("; same flags; the previous served 3,718 tok/s p50 at 5,120 W p50"), text


# -- the lower items ---------------------------------------------------------------------------

def test_slack_folds_the_same_line_from_eight_ranks() -> None:
    import json as _json
    from logwatch.sinks.alerts.model import Alert
    from logwatch.sinks.alerts.receivers import make_sinks
    slack = make_sinks([{"type": "slack", "url": "http://127.0.0.1:9/slack"}])[0]
    excerpt = [f"[2026-01-01 10:00:0{i} TP{i}] Scheduler hit an exception: Traceback (most "
               "recent call last):" for i in range(8)] + ["torch.OutOfMemoryError: CUDA out of memory"]
    alert = Alert("n|s|crashed", "crashed", "firing", "n", "sglang", {}, 1, "crashed: cuda_oom",
                  {"line": excerpt[-1], "excerpt": excerpt})
    text = _json.dumps(_json.loads(slack.request(alert).body))
    assert text.count("Scheduler hit an exception") == 1 and "(x8 ranks)" in text, text


def test_an_unknown_config_key_says_did_you_mean(tmp_path: Path) -> None:
    from logwatch.app.config import ConfigError, load_config
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("targets:\n  - {name: a, source: /tmp/x.log, stal_after: 5m}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert "targets[0].stal_after: unknown key (did you mean stall_after?" in str(e.value)


@pytest.mark.integration
def test_history_reads_the_launches_watch_recorded(tmp_path: Path) -> None:
    from support.daemon import sim_texts
    env = {**os.environ, "LOGWATCH_STATE_DIR": str(tmp_path / "state")}
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(start=time.time() - 100)))
    res = run_cli("watch", "--gpu", "off", "--probe", "off", "--timeout", "30s", str(log), env=env)
    assert res.returncode == 0, (res.stdout, res.stderr)
    res = run_cli("history", "--watched", str(log), env=env)
    assert res.returncode == 0, (res.stdout, res.stderr)
    rows = res.stdout.splitlines()
    assert rows[0].split()[:4] == ["#", "when", "outcome", "startup"], res.stdout
    assert len(rows) == 2 and rows[1].split()[3] == "ready", res.stdout
    res = run_cli("history", "--watched", str(tmp_path / "other.log"), env=env)
    # nothing recorded: 1, as the exit table says (before: 0)
    assert res.returncode == 1 and "no startup recorded for" in res.stdout, res.stdout


@pytest.mark.integration
def test_a_refused_source_is_tried_again_on_the_slow_timer(tmp_path: Path) -> None:
    """The daemon's timer, with its clock passed in: a source refused (a directory where the
    log should be: fatal) is scheduled, not retried before its time, restarted after it, and
    reads once the path is a log."""
    import asyncio
    from logwatch.app import daemon as dmod
    from logwatch.app import supervise as smod
    from logwatch.app.config import load_config
    path = tmp_path / "server.log"
    path.mkdir()
    cfg = write_config(tmp_path / "cfg.yaml", free_port(), tmp_path / "state",
                       [target_cfg("n", path, gpu="off", probe="off")])

    async def main() -> None:
        d = dmod.Daemon(load_config(cfg), str(cfg))
        d._load_packs()
        d._start_target(d.config.targets[0])
        first = d.runners["n"]
        await asyncio.wait_for(first.ended.wait(), 20)
        assert first.follower is not None and first.follower.status.state == "fatal"
        now = time.time()
        assert await d.supervisor.retry_refused(d.runners, d.config.targets, now) == []  # scheduled
        assert await d.supervisor.retry_refused(
            d.runners, d.config.targets, now + smod.FATAL_RETRY_BASE - 1) == []   # not yet
        path.rmdir()
        path.write_text("[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m')\n")
        assert await d.supervisor.retry_refused(
            d.runners, d.config.targets, now + smod.FATAL_RETRY_BASE + 1) == ["n"]
        second = d.runners["n"]
        assert second is not first
        deadline = time.monotonic() + 20
        while not (second.follower and second.follower.status.state == "up"):
            assert time.monotonic() < deadline, second.follower.status if second.follower else None
            await asyncio.sleep(0.05)
        await d.shutdown()

    asyncio.run(main())
