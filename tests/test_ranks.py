"""Ranks (issue 16): how far each rank got, the rank that stays behind, the rank that crashed
first.

The log: a genlog SGLang startup with 8 TP ranks, cut after graph capture, where TP5 never
prints its `Capture cuda graph end.` (the other 7 do).  The view, the watch display, the
stalled alert and `watch` itself name TP5; a log where every rank finished names nobody; a
crash names the rank whose line crashed first (real fixtures, SGLang and vLLM).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT
from logwatch.app.replay import replay_file
from logwatch.machine import RankProgress, Stalled, rank_lag
from logwatch.machine.ranks import replica_took
from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack
from logwatch.sinks.alerts.policy import AlertPolicy
from logwatch.sinks.display import summary_block
from logwatch.view import pipeline_view

END = b"Capture cuda graph end"


def tp8_log(drop_rank: str | None = "TP5") -> bytes:
    """The 8-rank startup up to the last rank's capture end; `drop_rank`'s end line removed."""
    raw = subprocess.run([sys.executable, str(ROOT / "bench" / "genlog.py"), "--lines", "400",
                          "--seed", "3", "--tp", "8"], capture_output=True, check=True).stdout
    lines = raw.split(b"\n")
    last = max(i for i, ln in enumerate(lines) if END in ln)
    keep = [ln for ln in lines[: last + 1]
            if not (drop_rank and f"{drop_rank}] ".encode() + END in ln)]
    assert sum(END in ln for ln in keep) == (7 if drop_rank else 8)
    return b"\n".join(keep) + b"\n"


def pipe_of(data: bytes, pack: str = "sglang") -> LogPipeline:
    pipe = LogPipeline(load_pack(pack))
    pipe.feed(data, 1000.0)
    return pipe


@pytest.mark.integration
def test_the_rank_that_never_finishes_graph_capture_is_named() -> None:
    pipe = pipe_of(tp8_log())
    assert pipe.state.phase == "cuda_graph"
    assert pipeline_view("x", pipe, now=1000.0).rank_lag == ""   # the others just finished
    assert pipeline_view("x", pipe, now=1030.0).rank_lag == ""   # 30 s: not yet
    view = pipeline_view("x", pipe, now=1240.0)
    assert view.rank_lag == "TP5 still in cuda_graph 4m00s after the other 7 ranks finished it"
    assert set(view.ranks) == {f"TP{k}" for k in range(8)}
    assert view.ranks["TP5"] == {"phase": "cuda_graph", "finished": False,
                                 "at": view.ranks["TP5"]["at"]}
    assert all(view.ranks[f"TP{k}"]["finished"] for k in range(8) if k != 5)
    assert view.to_json()["rank_lag"] == view.rank_lag
    # the watch display's summary and the stalled alert name it
    assert f"ranks: {view.rank_lag}" in summary_block(view)
    decisions = AlertPolicy().observe(view, [Stalled(view.epoch, "cuda_graph", 900.0,
                                                     view.startup_id, 900.0)])
    alert = next(d for d in decisions if getattr(d, "kind", "") == "stalled")
    assert alert.summary == ("stalled in cuda_graph: no new line for 15m00s; "
                             "TP5 still in cuda_graph 4m00s after the other 7 ranks finished it")
    assert alert.details["ranks_behind"] == view.rank_lag
    # its endpoint answers all the while (a log at INFO whose ready line never came): said
    import dataclasses
    view = dataclasses.replace(view, probe={"up": True, "status": "200 /health, 200 /v1/models",
                                            "ok_startup": view.startup_id})
    alert = next(d for d in AlertPolicy().observe(view, [Stalled(
        view.epoch, "cuda_graph", 900.0, view.startup_id, 900.0)])
        if getattr(d, "kind", "") == "stalled")
    assert alert.summary.endswith("; yet its endpoint answers (200 /health, 200 /v1/models)")


@pytest.mark.integration
def test_ranks_that_all_finished_name_nobody() -> None:
    pipe = pipe_of(tp8_log(drop_rank=None))
    assert pipeline_view("x", pipe, now=5000.0).rank_lag == ""


@pytest.mark.integration
def test_rank_0_alone_ahead_is_not_the_others_lagging() -> None:
    """Only TP0 printed the capture end (the others' lines were not in the window): seven
    ranks are not "behind" one."""
    raw = tp8_log(drop_rank=None)
    lines = [ln for ln in raw.split(b"\n") if not (END in ln and b"TP0] " not in ln)]
    pipe = pipe_of(b"\n".join(lines))
    assert sum(p.finished for p in pipe.state.ranks.values()) == 1
    assert pipeline_view("x", pipe, now=5000.0).rank_lag == ""


def test_rank_lag_pure() -> None:
    idx = load_pack("sglang").phase_index

    def rp(phase: str, finished: bool, at: float, *adv: tuple[int, bool, float]) -> RankProgress:
        return RankProgress(phase, finished, at, list(adv) or [(idx(phase), finished, at)])

    g = idx("cuda_graph")
    ranks = {"TP0": rp("cuda_graph", True, 50.0, (g, False, 10.0), (g, True, 50.0)),
             "TP1": rp("cuda_graph", True, 60.0, (g, False, 10.0), (g, True, 60.0)),
             "TP2": rp("cuda_graph", False, 10.0)}
    assert rank_lag(ranks, idx, 100.0) is None            # 40 s since the last one passed
    lag = rank_lag(ranks, idx, 130.0)
    assert lag is not None and lag.ranks == ("TP2",) and lag.others == 2
    assert round(lag.for_seconds) == 70
    # everyone at the same place: nobody behind; one rank alone: nothing to compare with
    assert rank_lag({k: rp("cuda_graph", False, 10.0) for k in ("TP0", "TP1")}, idx, 999) is None
    assert rank_lag({"TP0": rp("launching", False, 0.0)}, idx, 999) is None
    # half of the ranks behind is not "one rank left behind" (rank 0 alone prints some
    # milestones): nobody is named
    ranks["TP3"] = rp("cuda_graph", False, 10.0)
    assert rank_lag(ranks, idx, 130.0) is None
    # two ranks behind three: both named, the others counted
    ranks["TP4"] = rp("cuda_graph", True, 60.0, (g, False, 10.0), (g, True, 60.0))
    lag = rank_lag(ranks, idx, 130.0)
    assert lag is not None and lag.ranks == ("TP2", "TP3") and lag.others == 3
    assert lag.text.startswith("TP2, TP3 still in cuda_graph 1m10s after the other 3 ranks")


def test_a_dp_replica_behind_the_others_is_named_even_when_half_the_ranks() -> None:
    """SGLang `--dp 2 --tp 2`: group DP1 still reads its weights (4/17) while DP0 sized its
    KV cache and captured: DP1's two ranks are half of four, and before nothing ever named
    them (ten minutes on: `rank_lag` ""), in the view, the watch summary or a stall alert."""
    data = (FIXTURES / "built" / "sglang-0523-dp2-tp2-stuck-load.log").read_bytes()
    pipe = pipe_of(data)
    assert pipe.state.phase == "loading_shards"
    assert pipeline_view("x", pipe, now=1000.0).rank_lag == ""     # 16 s since DP0 loaded
    # DP0's ranks ended their load at 10:00:36; the log's clock at 10:00:56 (DP1's bar, 00:50
    # after its 10:00:06 start), 10 minutes ago
    lag = pipeline_view("x", pipe, now=1600.0).rank_lag
    assert lag == "DP1 still in loading_shards 10m20s after the other 1 replica finished it"
    # with `--enable-dp-attention` the DP ranks are one model: half of them not named
    flagged = data.replace(b"'dp_size': 2,", b"'dp_size': 2, 'enable_dp_attention': True,")
    assert pipeline_view("x", pipe_of(flagged), now=1600.0).rank_lag == ""


def test_replica_lag_pure() -> None:
    """`--dp 2` (TP1): DP1 behind DP0 is named; within a replica, ranks as before."""
    idx = load_pack("sglang").phase_index
    g, ld = idx("cuda_graph"), idx("loading_shards")
    ranks = {"DP0": RankProgress("cuda_graph", True, 50.0, [(ld, False, 5.0), (g, True, 50.0)]),
             "DP1": RankProgress("loading_shards", False, 5.0, [(ld, False, 5.0)])}
    assert rank_lag(ranks, idx, 500.0) is None                      # half: as ranks, nobody
    lag = rank_lag(ranks, idx, 500.0, apart=True)
    assert lag is not None and (lag.ranks, lag.unit, lag.others) == (("DP1",), "replica", 1)
    assert round(lag.for_seconds) == 450                            # DP0 got past at 50 s
    ranks["DP1"] = RankProgress("cuda_graph", True, 60.0, [(g, True, 60.0)])
    assert rank_lag(ranks, idx, 500.0, apart=True) is None          # together again


def test_replica_took_pure() -> None:
    """What one replica took through each phase, from its ranks' advances (eta.py times the
    replicas behind by it): SGLang's DP0 of `--dp 2` (built sglang-0523-dp2) loaded 10 s,
    sized its KV cache 3 s, went past downloading and autotune (0 s) and captured 12 s, ending the capture
    without leaving it (its last phase: False).  A phase still under way has no time."""
    idx = load_pack("sglang").phase_index
    la, dl, ld, al, au, g = (idx(p) for p in ("launching", "downloading", "loading_shards",
                                              "allocating", "autotune", "cuda_graph"))
    dp0 = [(la, False, 3.0), (ld, False, 6.0), (al, False, 16.0), (al, True, 18.0),
           (g, False, 19.0), (g, True, 31.0)]
    assert replica_took([dp0]) == {la: (3.0, True), dl: (0.0, True), ld: (10.0, True),
                                   al: (3.0, True), au: (0.0, True), g: (12.0, False)}
    assert replica_took([dp0[:5]]) == {la: (3.0, True), dl: (0.0, True), ld: (10.0, True),
                                       al: (3.0, True), au: (0.0, True)}
    # its TP1 says only some steps (rank 0 alone sizes the KV cache): the replica is where
    # its furthest rank is, so TP1's late load end moves no phase's time
    tp1 = [(la, False, 3.0), (ld, False, 6.0), (al, False, 17.0), (g, True, 31.0)]
    assert replica_took([dp0, tp1]) == replica_took([dp0])
    # vLLM: the capture's first tagged line is its end (the bar names no engine): it began
    # at the KV estimate's end, 2 s after the estimate began, and took the 10 s after it
    vi = load_pack("vllm").phase_index
    va, vk, vg = vi("autotune"), vi("allocating"), vi("cuda_graph")
    eng = [(va, False, 19.0), (vk, False, 34.0), (vk, True, 36.0), (vg, True, 46.0)]
    assert replica_took([eng]) == {va: (15.0, True), vk: (2.0, True), vg: (10.0, False)}
    assert replica_took([]) == {}


@pytest.mark.parametrize("name,rank,pack", [
    ("sglang-009", "TP2", "sglang"), ("sglang-205", "DP7 TP7", "sglang"),
    ("vllm-024", "TP2_EP2", "vllm"), ("vllm-204", "TP6_EP6", "vllm"),
    ("vllm-212", "TP0", "vllm"),
])
def test_the_rank_that_crashed_first(name: str, rank: str, pack: str) -> None:
    pipe = pipe_of((FIXTURES / f"{name}.log").read_bytes(), pack)
    pipe.finish(1000.0)
    view = pipeline_view(name, pipe, now=1000.0)
    assert view.phase == "crashed"
    assert view.crash is not None and view.crash["rank"] == rank
    decisions = AlertPolicy().observe(view, [_settled(pipe)])
    alert = next(d for d in decisions if getattr(d, "kind", "") == "crashed")
    assert f"{rank} first" in alert.summary and alert.details["rank"] == rank


def _settled(pipe: LogPipeline):  # type: ignore[no-untyped-def]
    from logwatch.machine import CrashSettled
    st = pipe.state
    assert st.crash is not None
    return CrashSettled(st.epoch, st.startup_id, st.crash, st.durations(), None)


@pytest.mark.integration
def test_watch_names_the_rank_behind_when_it_stalls(tmp_path: Path) -> None:
    """`watch --stall-after 2s`: the stall verdict names TP5 (a quarter of the stall budget
    behind is enough to be named when the budget is that short)."""
    log = tmp_path / "server.log"
    log.write_bytes(tp8_log())
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(log), "--stall-after",
                          "2s", "--timeout", "60s", "--no-history", "--gpu", "off",
                          "--probe", "off"],
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert "ranks: TP5 still in cuda_graph" in res.stdout, res.stdout
    assert "after the other 7 ranks finished it" in res.stdout


@pytest.mark.parametrize("pack_name, lines", [
    ("sglang", ["[2025-10-06 10:00:05 TP0] Capture cuda graph begin.",
                "[2025-10-06 10:00:06 TP1] Capture cuda graph begin."]),
    ("vllm", ["(Worker_TP0 pid=81) INFO 10-03 10:00:05 [gpu_worker.py:9] Loading",
              "(Worker_TP1 pid=82) INFO 10-03 10:00:05 [gpu_worker.py:9] Loading"]),
    ("vllm", ["(VllmWorker rank=0 pid=81) INFO 10-03 10:00:05 [w.py:9] Loading",
              "(VllmWorker rank=1 pid=82) INFO 10-03 10:00:05 [w.py:9] Loading"]),
    ("trtllm", ["[TRT-LLM] [I] [batchmgr][RANK 0] Number of tokens per block: 32.",
                "[TRT-LLM] [I] [batchmgr][RANK 2] Number of tokens per block: 32."]),
    ("trtllm", ["[07/08/2025-19:47:14] [TRT-LLM] [RANK 0] [I] moe_load_balancer finalizing model...",
                "[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [I] moe_load_balancer finalizing model..."]),
])
def test_the_crash_excerpt_folds_ranks_by_the_packs_rank_tags(pack_name, lines) -> None:
    """The display's fold knows no engine's tags: the pack's `ranks:` name them."""
    from logwatch.rules.pack import load_pack
    from logwatch.sinks.display import fold_ranks
    tags = tuple(rx.pattern for rx in load_pack(pack_name).ranks)
    assert fold_ranks(lines + ["other"], tags) == [f"{lines[0]} (x2 ranks)", "other"]
    assert fold_ranks([lines[0], lines[1] + "!"], tags) == [lines[0], lines[1] + "!"]


PP2_STUCK = FIXTURES / "built" / "vllm-034-pp2-stuck.log"


def test_a_stuck_pipeline_stage_of_two_is_named() -> None:
    """vLLM `-pp 2` (mp): PP0 loads its layers; PP1 (local rank 1: no `info_once` line, no
    bar) says only its distributed init, then hangs while loading (0.34 multiproc_executor.py
    :822, in the worker's constructor; the engine core waits for every worker's READY before
    the first collective RPC).  Before: no rank named (PP1 is half the ranks, and stages
    were not groups); the view, the watch summary and the stalled page now name it.  Before
    helper adv83 it was named `still in launching` and the startup read PP0's `autotune`:
    PP1 loads from its distributed init on, though only PP0 (local rank 0) says so."""
    pipe = pipe_of(PP2_STUCK.read_bytes(), "vllm")
    st = pipe.state
    assert st.phase == "loading_shards"
    assert pipeline_view("x", pipe, now=st.last_activity).rank_lag == ""    # 0 s: not yet
    view = pipeline_view("x", pipe, now=st.last_activity + 600.0)
    want = "PP1 still in loading_shards 10m00s after the other 1 stage finished it"
    assert view.rank_lag == want
    assert f"ranks: {want}" in summary_block(view)
    alert = next(d for d in AlertPolicy().observe(view, [Stalled(
        view.epoch, st.phase, 600.0, view.startup_id, 600.0)])
        if getattr(d, "kind", "") == "stalled")
    assert alert.summary.endswith(f"; {want}") and alert.details["ranks_behind"] == want


def test_pipeline_stages_load_together() -> None:
    """vLLM `-pp 2` (mp): PP1 (local rank 1) says nothing of its load but its end (`Model
    loading took`, 4 s after PP0's), and compiles only once every stage loaded (the engine
    core's first collective RPC).  Before helper adv83 its load was left out (a stage still
    `launching`): loading_shards ended at PP0's load, 32 s (over Ray, where PP1 says it
    loads, 36 s); now 36 s both ways."""
    for name in ("vllm-034-pp2.log", "vllm-034-pp2-ray.log"):
        st = replay_file(str(FIXTURES / "built" / name)).state
        assert st.phase == "ready" and st.durations()["loading_shards"] == 36.0, name


def test_a_stage_s_crash_ahead_of_the_others_is_in_its_own_phase() -> None:
    """vLLM `-pp 2`: PP1 compiles in 26 s and runs out of memory in its profiling run
    (`_dummy_sampler_run`, allocating) while PP0 still compiles.  The startup is where the
    slowest stage is (autotune); the crash is where PP1 was.  Before helper adv83 it read
    `cuda_oom during autotune`: the crashing line's group was looked up without its stage
    (machine/ranks.py `replica_reach`), and `[backbone] torch.compile took` (0.34's tag on
    the model's own compile) did not end the compile."""
    st = replay_file(str(FIXTURES / "built" / "vllm-034-pp2-profile-oom-ahead.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during, st.crash.rank) == ("cuda_oom", "allocating", "PP1")
    assert st.crash.startup_phase == "autotune"


@pytest.mark.integration
def test_watch_names_the_stuck_pipeline_stage_when_it_stalls() -> None:
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(PP2_STUCK),
                          "--stall-after", "2s", "--timeout", "60s", "--no-history",
                          "--gpu", "off", "--probe", "off"],
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert "ranks: PP1 still in loading_shards" in res.stdout, res.stdout
    assert "after the other 1 stage finished it" in res.stdout


def test_page_status_and_watch_name_the_root_cause_s_rank(tmp_path: Path) -> None:
    """Eight ranks failing at once, TP3 printing first, TP5's line the out of memory (the
    built log of tests/test_interleaved_ranks.py): the alert's sentence, its details, the
    Slack message, the webhook body, Alertmanager's annotations and `/api/status`'s crash
    name TP5 as the root cause's rank and TP3 as the first that printed, in the same words
    (verdict.py `rank_notes`); no Alertmanager label names a rank (a label is the alert's
    identity)."""
    import json

    from logwatch.sinks.alerts.receivers import AlertmanagerSink, SlackSink, WebhookSink
    from test_interleaved_ranks import FIRST, engine_core, launch, mixed, traceback
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    records = [traceback(r, False, oom if r == 5 else "RuntimeError: profile run failed")
               for r in FIRST]
    data = ("\n".join(launch() + mixed(records, "round") + engine_core()) + "\n").encode()
    pipe = pipe_of(data, "vllm")
    pipe.finish(1000.0)
    view = pipeline_view("tp8", pipe, now=1000.0)
    said = "(root cause on TP5; TP3 printed first)"
    assert view.crash is not None and said in view.crash["text"], view.crash
    assert (view.crash["rank"], view.crash["first_rank"]) == ("TP5", "TP3")
    alert = next(d for d in AlertPolicy().observe(view, [_settled(pipe)])
                 if getattr(d, "kind", "") == "crashed")
    assert said in alert.summary, alert.summary
    assert (alert.details["rank"], alert.details["first_rank"]) == ("TP5", "TP3")
    url = {"url": "http://127.0.0.1:9/hook"}
    slack = json.loads(SlackSink("s", {"type": "slack", **url}).request(alert).body)
    assert said in slack["text"]
    hook = json.loads(WebhookSink("w", {"type": "webhook", **url}).request(alert).body)
    assert said in json.dumps(hook) and '"first_rank": "TP3"' in json.dumps(hook)
    am = json.loads(AlertmanagerSink("a", {"type": "alertmanager", **url}).request(alert).body)
    assert am[0]["annotations"]["rank"] == "TP5" and am[0]["annotations"]["first_rank"] == "TP3"
    assert said in am[0]["annotations"]["summary"] and "rank" not in am[0]["labels"]


@pytest.mark.integration
def test_watch_names_the_root_cause_s_rank(tmp_path: Path) -> None:
    """`watch` on the same log: its summary names TP5 and TP3 as the alert does."""
    from test_interleaved_ranks import FIRST, engine_core, launch, mixed, traceback
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    records = [traceback(r, False, oom if r == 5 else "RuntimeError: profile run failed")
               for r in FIRST]
    log = tmp_path / "tp8.log"
    log.write_text("\n".join(launch() + mixed(records, "stagger") + engine_core()) + "\n")
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(log), "--timeout",
                          "60s", "--no-history", "--gpu", "off", "--probe", "off"],
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "  rank of the root cause: TP5 (TP3 printed first)" in res.stdout, res.stdout
    assert "first rank to crash" not in res.stdout
