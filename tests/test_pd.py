"""SGLang 0.5.23 PD disaggregation: a prefill server whose KV bootstrap server could not
start (its port taken) serves on; that is said beside its ready, never a crash."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, ROOT
from logwatch.app.replay import replay_file
from logwatch.machine import state_from_json, state_to_json
from logwatch.rules.pack import READY
from logwatch.sinks.summary import human, summary
from logwatch.view import pipeline_view
from support.receivers import (  # noqa: F401
    append, daemons, free_port, hook, receivers, target, write_config,
)

BUILT = FIXTURES / "built"
TAKEN = BUILT / "sglang-0523-pd-bootstrap-port-taken.log"
NOTE = "KV bootstrap server down"


def test_a_bootstrap_server_whose_port_is_taken_is_said_beside_the_ready_not_a_crash():
    """0.5.23 disaggregation/common/conn.py `_run_server`: the thread logs `Server error:
    [Errno 98] ...` with its traceback and ends; the server loads, captures and says it is
    fired up at 1m02s.  Before: `crashed: port_in_use during launching` at 3 s."""
    pipe = replay_file(str(TAKEN))
    st, view = pipe.state, pipeline_view(TAKEN.name, pipe)
    assert st.phase == READY and st.crash is None, (st.phase, st.crash)
    assert st.degraded is not None and st.degraded.startswith(NOTE) and "line 2" in st.degraded
    back = state_from_json(state_to_json(st))                         # a daemon restart
    assert (back.degraded, back.degraded_line) == (st.degraded, st.degraded_line)
    assert st.degraded_line and "[Errno 98]" in st.degraded_line
    doc = summary(view)
    assert view.degraded == st.degraded and doc["phase"] == READY
    assert "degraded" not in doc      # DESIGN.md's `replay --json` keys are a contract
    assert f"ready after 1m02s ({NOTE}" in human(doc, view.ready_in, degraded=view.degraded)


def test_the_bootstrap_failure_does_not_hide_a_crash_that_follows(tmp_path):
    """The process dying after it (a rank out of memory while loading) is its crash."""
    lines = TAKEN.read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if "Load weight end" in x)
    oom = ("[2026-12-01 10:00:30 TP1] Scheduler hit an exception: Traceback (most recent call "
           "last):\n  File \"/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/"
           "scheduler.py\", line 6372, in run_scheduler_process\ntorch.OutOfMemoryError: CUDA "
           "out of memory. Tried to allocate 2.00 GiB.\n[2026-12-01 10:00:31] Received sigquit "
           "from a child process. It usually means the child failed.").split("\n")
    path = tmp_path / "prefill.log"
    path.write_text("\n".join(lines[:cut] + oom) + "\n")
    st = replay_file(str(path)).state
    assert st.crash is not None and st.crash.reason == "cuda_oom", st.crash
    assert "OutOfMemoryError" in st.crash.line


def test_a_port_taken_traceback_of_the_server_itself_is_still_a_crash(tmp_path):
    """Only the traceback logged with the bootstrap's message is the thread's: the same
    exception line far after it is the server's own."""
    lines = TAKEN.read_text().splitlines()
    head, thread = lines[:1], lines[1:12]
    later = ["[2026-12-01 10:00:05] ERROR:    [Errno 98] error while attempting to bind on "
             "address ('0.0.0.0', 30000): address already in use"]
    path = tmp_path / "prefill.log"
    path.write_text("\n".join(head + thread + ["filler"] * 50 + later) + "\n")
    st = replay_file(str(path)).state
    assert st.crash is not None and st.crash.reason == "port_in_use", st.crash
    assert "30000" in st.crash.line


@pytest.mark.integration
def test_the_daemon_alerts_the_ready_once_with_the_bootstrap_failure_and_records_it(
        tmp_path: Path, receivers: Any, daemons: Any) -> None:  # noqa: F811
    """A real daemon following the log, a webhook receiver: one `ready` alert that says the
    bootstrap server is down and the open `degraded` (test_degraded_alerts.py), no
    `crashed`; the ledger's record says it too.  Before: a `crashed` page (port_in_use) and
    no `ready`."""
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text(TAKEN.read_text())
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("p1", log, from_start=True)],
                       alerts=[{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}])
    d = daemons(cfg, port).start()
    got = rx.wait(hook("ready", "firing"), status=200, timeout=20, alive=d.dead)[0]
    assert NOTE in got.json["summary"], got.json["summary"]
    rx.wait(hook("degraded", "firing"), status=200, timeout=20, alive=d.dead)
    rx.assert_quiet(2.5, what="after the degrade")
    assert [g.json["kind"] for g in rx.requests()] == ["ready", "degraded"]
    # Prometheus sees it too (the shipped LogwatchServerDegraded rule)
    assert d.metric("logwatch_degraded", target="p1") == 1.0
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                          "--target", "p1", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout.splitlines()[-1])
    assert rec["outcome"] == "ready" and rec["degraded"].startswith(NOTE), rec


def _degraded_while_serving() -> tuple[str, str]:
    """TAKEN's server ready (its bootstrap thread's lines taken out), and those lines as
    logged two minutes on, while it serves (the thread's bind failing late)."""
    lines = TAKEN.read_text().splitlines()
    thread = [x.replace("10:00:03", "10:02:03") for x in lines[1:12]]
    return "\n".join(lines[:1] + lines[12:]) + "\n", "\n".join(thread) + "\n"


def test_a_bootstrap_failure_logged_while_serving_is_a_degrade_not_a_relaunch(tmp_path):
    """Its traceback's `OSError: [Errno 98] ...` is a line only a launch prints otherwise
    (`launch_only`): within the degrade's traceback it is no relaunch.  Before: a new
    startup, `crashed: port_in_use during launching`, the note lost."""
    serving, thread = _degraded_while_serving()
    path = tmp_path / "prefill.log"
    path.write_text(serving + thread)
    pipe = replay_file(str(path))
    st = pipe.state
    assert (st.phase, st.crash, st.epoch) == (READY, None, 1), (st.phase, st.crash, st.epoch)
    assert st.degraded is not None and st.degraded.startswith(NOTE), st.degraded
    assert "degraded" not in summary(pipeline_view(path.name, pipe))     # the contract's keys


@pytest.mark.integration
def test_a_degrade_while_serving_is_alerted_shown_and_recorded_not_paged_as_a_crash(
        tmp_path: Path, receivers: Any, daemons: Any) -> None:  # noqa: F811
    """The daemon reads the server ready, then the bootstrap failure logged while it serves:
    a `degraded` alert (to a sink on `[crashed, ready]`: it takes `degraded`), `/api/status` `degraded`, the history's record.  Before: `crashed:
    port_in_use during launching` paged, the target `crashed`, a second history record."""
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [target("p1", log)],
                       alerts=[{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}])
    d = daemons(cfg, port).start()
    d.wait_reading("p1")
    serving, thread = _degraded_while_serving()
    append(log, serving)
    rx.wait(hook("ready", "firing"), status=200, timeout=20, alive=d.dead)
    append(log, thread)
    got = rx.wait(hook("degraded", "firing"), status=200, timeout=20, alive=d.dead)[0]
    assert got.json["summary"].startswith(f"degraded while serving: {NOTE}"), got.json
    rx.assert_quiet(2.5, what="after the degrade")
    assert [g.json["kind"] for g in rx.requests()] == ["ready", "degraded"]
    t = d.target("p1")
    assert t is not None and t["phase"] == READY and t["degraded"].startswith(NOTE), t
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                          "--target", "p1", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(r["outcome"], (r["degraded"] or "")[:len(NOTE)]) for r in recs] == [("ready", NOTE)]


def test_a_missing_rdma_device_is_named_by_mooncake_s_line():
    """`--disaggregation-ib-device mlx5_0` on a node without it: Mooncake's glog `No matched
    device found: mlx5_0`, then SGLang's bare `RuntimeError: Mooncake Transfer Engine
    initialization failed.`  Before: `python_exception`, that RuntimeError the root cause."""
    st = replay_file(str(BUILT / "sglang-0523-pd-rdma-missing.log")).state
    assert st.crash is not None and st.crash.reason == "distributed_error", st.crash
    assert st.crash.line.endswith("No matched device found: mlx5_0") and st.crash.during == "launching"
    # what is wrong, in the rule's words (`meaning:`), not distributed_error's rendezvous
    assert st.crash.meaning.startswith("RDMA device mlx5_0 not found"), st.crash.meaning
    assert state_from_json(state_to_json(st)).crash.meaning == st.crash.meaning  # a restart


@pytest.mark.integration
def test_the_crash_page_of_a_missing_rdma_device_says_so_not_a_rendezvous(
        tmp_path: Path, receivers: Any, daemons: Any) -> None:  # noqa: F811
    """A real daemon, a Slack receiver and a webhook one: the `crashed` message's sentence is
    the rule's (the device, where to look), the webhook's details carry it.  Before: Slack
    said `torch.distributed rendezvous failed (address, port, a rank that never joined).`"""
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text((BUILT / "sglang-0523-pd-rdma-missing.log").read_text())
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("p1", log, from_start=True)],
                       alerts=[{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]},
                               {"type": "slack", "url": rx.url("/slack"), "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    got = rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead)[0]
    assert got.json["details"]["meaning"].startswith("RDMA device mlx5_0 not found"), got.json
    slack = rx.wait(lambda g: g.path == "/slack", status=200, timeout=20, alive=d.dead)[0]
    texts = " ".join(b["text"]["text"] for b in slack.json["blocks"] if b["type"] == "section")
    assert "RDMA device mlx5_0 not found" in texts and "rendezvous" not in texts, texts


def _stamp_after(line: str, by: int) -> str:
    """`line` with its `[YYYY-mm-dd HH:MM:SS` stamp `by` seconds later, from 10:00:10 on."""
    import datetime as dt
    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line)
    if not m:
        return line
    t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    t += dt.timedelta(seconds=by if t.minute or t.second >= 10 else 0)
    return f"[{t:%Y-%m-%d %H:%M:%S}" + line[m.end():]


def _compose(*servers: tuple[str, Path, int]) -> list[str]:
    """Servers' logs in one docker compose stream (`name  | line`), in the order of their
    stamps (an unstamped bar goes with the line before it), each shifted `by` seconds."""
    rows = []
    for name, path, by in servers:
        at = ""
        for ln in path.read_text().splitlines():
            ln = _stamp_after(ln, by)
            at = ln[1:20] if ln.startswith("[") else at
            rows.append((at, len(rows), f"{name}  | {ln}"))
    return [r[2] for r in sorted(rows)]


def test_a_prefill_and_a_decode_server_in_one_stream_are_timed_by_the_slower(tmp_path):
    """docker compose's PD pair in one stream, the decode server's weights read 27 s longer:
    each server's ranks are `TP0`, `TP1`; the stream's prefix names the server, so the
    startup is where the slower server is (as DP replicas).  Before: loading 31 s (the
    prefill's), cuda_graph 46 s (the prefill's capture and the decode's load in it)."""
    lines = _compose(("prefill-1", BUILT / "sglang-0523-pd-prefill.log", 0),
                     ("decode-1", BUILT / "sglang-0523-pd-decode.log", 27))
    path = tmp_path / "compose.log"
    path.write_text("\n".join(lines) + "\n")
    pipe = replay_file(str(path))
    d = {k: round(v) for k, v in summary(pipeline_view("c", pipe))["durations"].items()}
    assert pipe.state.phase == READY
    assert (d["loading_shards"], d["allocating"], d["cuda_graph"]) == (58, 3, 19), d


def test_the_decode_server_dying_in_its_load_is_placed_in_its_load(tmp_path):
    """The same stream, the decode server out of memory while it still reads its weights
    (the prefill server fired up).  Before: `during cuda_graph` (the prefill's phase)."""
    lines = _compose(("prefill-1", BUILT / "sglang-0523-pd-prefill.log", 0),
                     ("decode-1", BUILT / "sglang-0523-pd-decode.log", 27))
    cut = next(i for i, x in enumerate(lines) if x.startswith("prefill-1") and "fired up" in x)
    oom = ["decode-1  | [2026-12-01 10:01:03 TP1] Scheduler hit an exception: Traceback (most "
           "recent call last):", "decode-1  | torch.OutOfMemoryError: CUDA out of memory."]
    path = tmp_path / "compose.log"
    path.write_text("\n".join(lines[:cut + 1] + oom) + "\n")
    crash = replay_file(str(path)).state.crash
    assert crash is not None and (crash.reason, crash.during) == ("cuda_oom", "loading_shards")


TWO = BUILT / "sglang-0523-two-servers.log"


def _two_servers() -> list[str]:
    """TWO as it is built: two unrelated servers of one compose file (not a PD pair), the
    TP2 launch of sglang-0523-download.log as `llama-1` (ready at 4m01s) and the server of
    sglang-0523-pd-decode.log as `qwen-1` (ready at 1m02s)."""
    return _compose(("llama-1", BUILT / "sglang-0523-download.log", 0),
                    ("qwen-1", BUILT / "sglang-0523-pd-decode.log", 0))


def test_two_unrelated_servers_in_one_stream_are_ready_when_the_slower_is():
    """A server with no PD role (no `disaggregation_mode`) prints a ready line as any server
    not a follower node does, and the launch waits for it.  Before: `ready after 1m02s`, at
    the qwen server's ready line, while llama still read its weights (its ready at 4m01s)."""
    assert TWO.read_text().splitlines() == _two_servers()
    pipe = replay_file(str(TWO))
    view = pipeline_view(TWO.name, pipe)
    doc = summary(view)
    assert (doc["phase"], doc["startups"], round(view.ready_in or 0)) == (READY, 1, 241), doc
    assert doc["ready_line"].endswith("10:04:01] The server is fired up and ready to roll!")
    assert round(doc["durations"]["loading_shards"]) == 151, doc["durations"]   # llama's
    assert "ready after 4m01s" in human(doc, view.ready_in)


def test_at_the_first_server_s_ready_the_launch_is_where_the_slower_is(tmp_path):
    """Cut at qwen's ready line: still starting, in llama's phase (its weights), llama
    waited for."""
    lines = _two_servers()
    cut = next(i for i, x in enumerate(lines) if x.startswith("qwen-1") and "fired up" in x)
    path = tmp_path / "two.log"
    path.write_text("\n".join(lines[:cut + 1]) + "\n")
    st = replay_file(str(path)).state
    assert (st.phase, st.procs_waiting) == ("loading_shards", {"llama-1"}), st.phase


def test_the_second_server_crashing_is_the_launch_s_crash_and_named(tmp_path):
    """After qwen's ready, llama runs out of memory reading its weights: the launch crashed,
    in llama's load, and the sentence names llama (each server has a `TP1`)."""
    lines = _two_servers()
    cut = next(i for i, x in enumerate(lines) if x.startswith("qwen-1") and "fired up" in x)
    oom = ["llama-1  | [2026-12-01 10:01:30 TP1] Scheduler hit an exception: Traceback (most "
           "recent call last):", "llama-1  | torch.OutOfMemoryError: CUDA out of memory.",
           "llama-1  | [2026-12-01 10:01:31] Received sigquit from a child process. It "
           "usually means the child failed."]
    path = tmp_path / "two.log"
    path.write_text("\n".join(lines[:cut + 1] + oom) + "\n")
    pipe = replay_file(str(path))
    crash = pipe.state.crash
    assert crash is not None and (crash.reason, crash.during, crash.proc, crash.rank) == \
        ("cuda_oom", "loading_shards", "llama-1", "TP1"), crash
    view = pipeline_view(path.name, pipe)
    said = human(summary(view), view.ready_in, crash=view.crash)
    assert "crashed: cuda_oom during loading_shards in llama-1" in said, said
    from logwatch.verdict import crash_sentence      # `/api/status`'s, the alert's
    assert crash_sentence(view.crash) == \
        "crashed: cuda_oom during loading_shards in llama-1 (TP1 first)", view.crash
    assert state_from_json(state_to_json(pipe.state)).crash.proc == "llama-1"  # a restart
    assert "proc" not in summary(view)["crash"]    # DESIGN.md's `replay --json` keys


def test_a_follower_node_beside_its_head_is_not_waited_for(tmp_path):
    """A follower node (`--node-rank 1`: no HTTP server, no ready line) in the stream of a
    server: the launch is ready at the server's ready line, not held for the follower."""
    lines = _compose(("head-1", BUILT / "sglang-0523-download.log", 0),
                     ("node1-1", BUILT / "sglang-0523-follower.log", 0))
    path = tmp_path / "nodes.log"
    path.write_text("\n".join(lines) + "\n")
    st = replay_file(str(path)).state
    assert (st.phase, st.startups, st.procs_waiting) == (READY, 1, set()), st.phase
    assert st.ready_line is not None and st.ready_line.endswith("ready to roll!")


def test_another_server_going_on_does_not_take_back_a_bare_traceback(tmp_path):
    """llama's bare traceback (no engine announcement: unconfirmed) while it reads its
    weights, then only qwen's lines: qwen's later phases say nothing of llama.  Before:
    taken back at qwen's `Load weight end.` (a later phase), `loading_shards` and no crash."""
    lines = _two_servers()
    at = next(i for i, x in enumerate(lines) if x.startswith("llama-1") and "Load weight begin" in x)
    tb = ["llama-1  | [2026-12-01 10:00:20] Traceback (most recent call last):",
          'llama-1  |   File "/usr/local/lib/python3.11/dist-packages/sglang/srt/model_loader/'
          'loader.py", line 412, in load_model',
          "llama-1  | KeyError: 'model.layers.12.mlp.gate_proj.weight'"]
    path = tmp_path / "two.log"
    path.write_text("\n".join(lines[:at + 2] + tb + [x for x in lines[at + 2:]
                                                    if x.startswith("qwen-1")]) + "\n")
    crash = replay_file(str(path)).state.crash
    assert crash is not None and (crash.during, crash.proc, crash.confirmed) == \
        ("loading_shards", "llama-1", False), crash
    # llama's own later line does take it back (it lives)
    path.write_text("\n".join(lines[:at + 2] + tb + lines[at + 2:]) + "\n")
    assert replay_file(str(path)).state.phase == READY


TIMEOUT = BUILT / "sglang-0523-pd-bootstrap-timeout.log"
TIMEOUT_NOTE = "PD KV transfer failing: requests timed out bootstrapping"


def test_requests_that_time_out_bootstrapping_are_said_while_the_server_serves_on():
    """0.5.23 disaggregation/common/conn.py:2397 `_check_bootstrap_timeout`: 300 s after a
    request's KV transfer should have been set up, each rank says so once (`warning_once`)
    and fails it with 500 (prefill.py `handle_bootstrap_failure`); the server serves on.
    Before: no rule, `ready after 1m02s` and nothing said."""
    pipe = replay_file(str(TIMEOUT))
    st, view = pipe.state, pipeline_view(TIMEOUT.name, pipe)
    assert st.phase == READY and st.crash is None, (st.phase, st.crash)
    assert st.degraded is not None and st.degraded.startswith(TIMEOUT_NOTE), st.degraded
    assert st.degraded.endswith("line 47"), st.degraded          # TP0's, the first
    assert view.degraded == st.degraded
    assert f"ready after 1m02s ({TIMEOUT_NOTE}" in human(summary(view), view.ready_in,
                                                         degraded=view.degraded)


def test_a_decode_server_whose_kv_never_arrives_is_said_while_it_serves_on(tmp_path):
    """conn.py:2895 `_check_waiting_timeout`, the decode side: the same, its own words."""
    lines = (BUILT / "sglang-0523-pd-decode.log").read_text().splitlines()
    lines.append("[2026-12-01 10:07:20 TP0] Some requests fail to receive KV Cache transfer done "
                 "signal after bootstrapping. If a greater mean TTFT is acceptable, you can "
                 "'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to relax the "
                 "timeout condition. ")
    path = tmp_path / "decode.log"
    path.write_text("\n".join(lines) + "\n")
    st = replay_file(str(path)).state
    assert st.phase == READY and st.crash is None, (st.phase, st.crash)
    assert st.degraded is not None and "no KV cache from the prefill server" in st.degraded
