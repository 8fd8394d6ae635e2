"""A startup is a timeline: spans that repeat, overlap, and launches of several servers.

The startups are built from the engines' own statements (tests/fixtures/built/README.md):
each test is one row of issue 27's table.  Then the clock (one per log), the flapping that
"forward only" once fixed (on every fixture), and a property of the machine: any
interleaving of the ranks' lines gives the same spans, no duration is longer than the log,
and the total never counts overlapping time twice.
"""

from __future__ import annotations

import calendar
import os
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from logwatch.app.replay import replay_file
from logwatch.machine import PhaseChanged, state_from_json, state_to_json
from logwatch.pipeline import LogPipeline
from logwatch.rules.locate import choose_pack
from logwatch.rules.pack import READY, TERMINAL, load_pack
from logwatch.sinks.summary import timeline
from logwatch.view import pipeline_view

BUILT = FIXTURES / "built"
README_PHASES = {"launching", "loading_shards", "autotune", "allocating", "cuda_graph",
                 "ready"}


def replay(name: str):
    return replay_file(str(BUILT / name)).state


def main_phases(state) -> list[str]:
    return [sp.phase for sp in state.spans if not sp.beside]


def close(value: float, truth: float) -> bool:
    """Within 5% of what the stamps say."""
    return abs(value - truth) <= 0.05 * truth


def feed(lines: list[str], pack: str, year: int | None = None) -> LogPipeline:
    pipe = LogPipeline(load_pack(pack), year=year)
    now = 1_000.0
    pipe.feed("".join(x + "\n" for x in lines).encode(), now)
    pipe.finish(now)
    return pipe


# -- the table of issue 27, one row each --------------------------------------------------------

def test_vllm_034_default_path_repeats_autotune_and_allocating():
    st_ = replay("vllm-034-default.log")
    assert main_phases(st_) == ["launching", "loading_shards", "autotune", "allocating",
                                "autotune", "cuda_graph", "allocating", "ready"]
    d = st_.durations()
    # repeated phases are the sum of their spans: torch.compile 10:00:44 -> 10:01:24 and
    # JIT warmup + FlashInfer autotune 10:01:29 -> 10:04:00.456 (the capture bars begin)
    assert close(d["autotune"], 40 + 151.456), d
    # the profiling run after the compile's end (0.34 gpu_worker.py:732 profile_run: the
    # compile is its first forward) and the KV estimate, then the commit; before helper
    # adv77 the profiling run's 3 s were autotune
    assert close(d["allocating"], 5 + 7), d
    assert close(d["loading_shards"], 31), d
    assert close(d["cuda_graph"], 25.544), d
    assert st_.ready_in() == pytest.approx(273.0)       # ready at 4m33s
    assert st_.total() == pytest.approx(273.0)
    # TP1's copies of `JIT kernel warmup starting.` / `Memory after warmup` are mentions
    assert sum(1 for sp in st_.spans if sp.phase == "autotune") == 2


def test_flashinfer_year_stamps_among_vllm_yearless_ones_are_one_clock():
    st_ = replay("vllm-034-flashinfer-year.log")
    assert st_.ready_in() == pytest.approx(60.0)
    assert max(st_.durations().values()) <= 60.0
    assert st_.untrusted_stamps == 0
    # whatever year the file's time suggests for the year-less stamps
    lines = (BUILT / "vllm-034-flashinfer-year.log").read_text().splitlines()
    for year in (2019, 2026, 2031):
        other = feed(lines, "vllm", year=year).state
        assert other.ready_in() == pytest.approx(60.0), year
        assert other.durations() == st_.durations(), year


def test_dp_supervisor_is_one_launch_ready_when_every_server_is():
    """0.34's DP supervisor names its children `(APIServer_DP0 pid=N)` (dp_supervisor.py:260),
    says `Launching vLLM DP Servers` first (:399) and `Started DPSupervisor on` only once they
    all answer (:307, :363).  Before helper adv36 (the fixture had `(APIServer pid=N)` and the
    supervisor's line first): 4 startups, `still starting: launching` for good."""
    path = BUILT / "vllm-034-dp-supervisor.log"
    st_ = replay_file(str(path)).state
    assert st_.startups == 1 and st_.phase == READY
    assert "0.0.0.0:8002" in (st_.ready_line or ""), st_.ready_line
    assert st_.ready_in() == pytest.approx(55.0)
    assert sorted(st_.servers) == ["APIServer_DP0 pid=100", "APIServer_DP1 pid=101"]
    lines = path.read_text().splitlines()
    second = next(i for i, x in enumerate(lines) if "0.0.0.0:8002" in x)
    before = feed(lines[:second], "vllm").state
    assert before.phase != READY and before.startups == 1, "ready at the first server"


def test_dp_supervisor_launch_crashes_when_one_engine_crashes_and_names_it():
    lines = (BUILT / "vllm-034-dp-supervisor.log").read_text().splitlines()[:9] + [
        "(EngineCore_DP1 pid=151) ERROR 12-01 10:00:12 [core.py:1757] EngineCore failed to start.",
        "(EngineCore_DP1 pid=151) ERROR 12-01 10:00:12 [core.py:1757] torch.OutOfMemoryError: "
        "CUDA out of memory. Tried to allocate 2.00 GiB.",
    ]
    st_ = feed(lines, "vllm").state
    assert st_.startups == 1 and st_.phase == "crashed"
    assert st_.crash is not None and st_.crash.rank == "DP1" and st_.crash.reason == "cuda_oom"


# -- data-parallel replicas starting at their own paces -----------------------------------------

def _phase_moves(lines: list[str], pack: str) -> list[str]:
    """The phases a live reader announces, one line read a second."""
    pipe = LogPipeline(load_pack(pack))
    moves = []
    for i, x in enumerate(lines):
        moves += [e.new for e in pipe.feed((x + "\n").encode(), 1000.0 + i)
                  if isinstance(e, PhaseChanged)]
    return moves


def _replayed_dp(name: str):
    """A vLLM 0.34 DP startup replayed, its phases once each but the KV commit's."""
    st_ = replay(name)
    assert main_phases(st_) == ["launching", "loading_shards", "autotune", "allocating",
                                "cuda_graph", "allocating", "ready"]
    return st_, st_.durations()


def test_vllm_dp_engines_move_the_startup_when_the_slowest_does():
    """`vllm serve -dp 2`: engine core DP1 reads its weights 30 s longer than DP0, which
    compiles, sizes and captures meanwhile (0.34 v1/engine/core.py, one engine per DP rank).
    Before: DP0's capture and KV commit moved the startup, and DP1's own steps came back
    after them: cuda_graph, allocating, cuda_graph (re-entered); loading 11 s of 41."""
    path = BUILT / "vllm-034-dp2-slow-engine.log"
    st_, d = _replayed_dp(path.name)
    # DP1's `Model loading took` at 10:00:49, its capture 10:01:07 -> 10:01:18
    assert d["loading_shards"] == 41.0 and d["cuda_graph"] == 11.0, d
    assert st_.ready_in() == 83.0
    moves = _phase_moves(path.read_text().splitlines(), "vllm")
    assert moves == main_phases(st_), moves


def test_dense_vllm_dp_engines_with_tp_move_the_startup_when_the_slowest_does():
    """`vllm serve -dp 2 -tp 2` of a dense model: each engine core is reconfigured to DP 1
    (0.34 core.py:1727 `reconfigure_for_independent_dp_rank`), so both engines' workers
    print `(Worker_TP0 pid=N)`; DP1's read their weights 30 s longer.  Before: loading 32 s
    of 63, and DP1's capture bar after DP0's KV commit re-entered cuda_graph until ready
    (the commit then never came back: DP1's was a mention)."""
    path = BUILT / "vllm-034-dp2-tp2-dense.log"
    st_, d = _replayed_dp(path.name)
    # DP1's `Model loading took` at 10:01:11; its capture ends at 10:02:20, commit at :21
    assert d["loading_shards"] == 63.0 and d["allocating"] == 5.0, d
    assert sorted(st_.lanes) == ["TP0 pid=200", "TP0 pid=210", "TP1 pid=201", "TP1 pid=211"]
    # a daemon restarted mid-startup goes on from its checkpoint
    lines = path.read_text().splitlines()
    half = next(i for i, x in enumerate(lines) if "Worker_TP0 pid=200" in x and "capturing" in x)
    pipe = feed(lines[:half], "vllm")
    again = LogPipeline(load_pack("vllm"))
    again.state = state_from_json(state_to_json(pipe.state))
    again.feed("".join(x + "\n" for x in lines[half:]).encode(), 1_000.0)
    again.finish(1_000.0)
    assert again.state.durations() == d
    # when each worker process got further (the ETA's replica times), kept across it too
    assert again.state.lane_times == st_.lane_times and len(st_.lane_times) == 4
    slow = [(i, f) for i, f, _ in st_.lane_times["TP0 pid=210"]]
    assert slow[0] == (load_pack("vllm").phase_index("loading_shards"), False), slow
    bad = {"lane_times": {"TP0 pid=1": [[2, False, 1.0], ["x"], [1, 2, "3"]], "TP1": 5}}
    assert state_from_json(bad).lane_times == {"TP0 pid=1": [(2, False, 1.0)]}


@pytest.mark.parametrize("bar", [True, False])
def test_a_dense_vllm_replica_behind_is_named_in_its_workers_phase(bar: bool):
    """`-dp 2 -tp 2`, a dense model, cut at DP0's `init engine`; DP1's workers (pid 210,
    211) print nothing after `Loading model from scratch...` (with and without DP1's shard
    bar at 17/17).  EngineCore_DP1 prints its launch, then nothing until its workers
    captured, and those workers name no engine (`Worker_TP0`, 0.34 core.py:1727): by
    elimination they are DP1's.  Seen 10 minutes on, before: "DP1 still in launching
    10m01s after the other 1 replica finished it" while its workers loaded."""
    src = (BUILT / "vllm-034-dp2-tp2-dense.log").read_text().splitlines()
    end = next(i for i, x in enumerate(src) if "EngineCore_DP0" in x and "init engine" in x)
    lines = [x for i, x in enumerate(src[: end + 1])
             if not (re.search(r"pid=21[01]\)", x) and "Loading model" not in x)
             and (bar or "17/17 [00:60" not in x)]
    pipe = feed(lines, "vllm")
    assert pipe.state.phase == "loading_shards"
    view = pipeline_view("x", pipe, now=1000.0 + 600)
    assert view.rank_lag == "DP1 still in loading_shards 10m01s after the other 1 replica " \
        "finished it", view.rank_lag


def test_dense_engine_cores_behind_at_different_places_are_not_named_wrong():
    """Two dense engine cores still silent whose workers are in different phases: which is
    where is unknown, so neither is named (before: both "still in launching")."""
    from logwatch.machine import RankProgress, rank_lag
    idx = load_pack("vllm").phase_index
    phases = tuple(load_pack("vllm").phases)
    core = lambda ph, at: RankProgress(ph, ph != "launching", at, [(idx(ph), ph != "launching", at)])  # noqa: E731
    ranks = {"DP0": core("allocating", 100.0), "DP1": core("launching", 4.0),
             "DP2": core("launching", 4.0)}
    lanes = {f"TP{t} pid={p}": pos for p, pos in ((200, (5, True)), (210, (2, False)),
                                                   (220, (5, False))) for t in (0, 1)}
    assert rank_lag(ranks, idx, 900.0, apart=True, lanes=lanes, phases=phases) is None
    lanes.update({"TP0 pid=220": (2, False), "TP1 pid=220": (2, False)})  # both loading
    lag = rank_lag(ranks, idx, 900.0, apart=True, lanes=lanes, phases=phases)
    assert lag is not None and (lag.ranks, lag.phase) == (("DP1", "DP2"), "loading_shards")


def test_the_processes_kept_per_startup_are_bounded():
    """One `Worker_TP0` process per line, 1000 of them (untrusted input): 64 kept."""
    lines = [f"(Worker_TP0 pid={1000 + i}) INFO 12-01 10:00:{i % 60:02d} [model_runner.py:412] "
             "Loading model from scratch..." for i in range(1000)]
    st_ = feed(lines, "vllm").state
    assert len(st_.lanes) == 64 and len(st_.lane_times) == 64


def test_a_dp_engine_crash_is_the_startup_crash_in_the_slow_engine_s_phase():
    """DP1 runs out of memory loading while DP0 already captured: the startup crashed
    loading (before: `cuda_oom during cuda_graph`, DP0's phase)."""
    src = (BUILT / "vllm-034-dp2-slow-engine.log").read_text().splitlines()
    lines = []
    for x in src:          # up to DP0's capture and KV commit; DP1 began its load
        if "EngineCore_DP0" in x and "GPU KV cache size" in x:
            break
        if ("EngineCore_DP1" not in x or "10:00:0" in x) and "5/5 [00:39" not in x:
            lines.append(x)
    tag = "(EngineCore_DP1 pid=151) ERROR 12-01 10:00:47 [core.py:1757] "
    lines += [tag + "EngineCore failed to start.",
              tag + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                    "GPU 1 has a total capacity of 79.19 GiB of which 1.02 GiB is free."]
    assert any("Graph capturing finished" in x for x in lines)
    st_ = feed(lines, "vllm").state
    assert st_.phase == "crashed" and st_.crash is not None
    assert (st_.crash.reason, st_.crash.rank, st_.crash.during) == \
        ("cuda_oom", "DP1", "loading_shards")
    assert st_.crash.ahead == ""     # the startup's own phase: no replica to name


@pytest.mark.parametrize("name,rank", [("sglang-0523-dp4-capture-oom.log", "DP1"),
                                       ("vllm-034-dp4-capture-oom.log", "DP2")])
def test_a_dp_replica_s_crash_ahead_of_the_slowest_is_placed_in_its_own_phase(name: str,
                                                                              rank: str):
    """`--dp 4`: one replica runs out of memory capturing its graphs while DP3 still reads
    its weights (the startup waits at loading_shards for it).  Before: `cuda_oom during
    loading_shards`, the slowest replica's phase, which points at the model's size, not at
    the capture's memory.  vLLM's DP2 had printed its KV cache size (its capture bar names
    no engine): the traceback's `capture_model` frame places it; live line by line the same."""
    path = BUILT / name
    st_ = replay(name)
    assert st_.phase == "crashed" and st_.crash is not None
    assert (st_.crash.reason, st_.crash.rank, st_.crash.during) == ("cuda_oom", rank, "cuda_graph")
    assert main_phases(st_) == ["launching", "loading_shards", "crashed"]
    pipe = LogPipeline(load_pack(name.split("-")[0]))
    for i, x in enumerate(path.read_text().splitlines()):
        pipe.feed((x + "\n").encode(), 1000.0 + i)
    assert pipe.state.crash is not None and pipe.state.crash.during == "cuda_graph"


@pytest.mark.parametrize("name,rank", [("sglang-0523-dp4-capture-oom.log", "DP1"),
                                       ("vllm-034-dp4-capture-oom.log", "DP2")])
def test_a_dp_replica_s_crash_ahead_is_said_with_its_replica_and_the_startup_s_phase(
        name: str, rank: str):
    """The same crash as an operator reads it: `replay`, `watch`'s summary, the `crashed`
    alert and `history` name the replica whose phase `during` is, and the startup's phase
    (the slowest replica's, where the phases line ends).  Before: `crashed: cuda_oom during
    cuda_graph` beside `phases launching > loading_shards > crashed`, and `history`'s
    `crashed: cuda_oom` beside durations that end at loading_shards.  The replay contract
    (`--json`) is as it was."""
    from logwatch.app.history import history_row, read_ledger
    from logwatch.machine import CrashSettled
    from logwatch.sinks.alerts.policy import AlertPolicy
    from logwatch.sinks.display import summary_block
    from logwatch.sinks.summary import human, summary
    pipe = replay_file(str(BUILT / name))
    view = pipeline_view(name, pipe)
    doc = summary(view)
    assert doc["phases_seen"] == ["launching", "loading_shards", "crashed"]
    assert set(doc["crash"]) == {"reason", "during", "line", "line_number", "excerpt"}
    said = f"crashed: cuda_oom during cuda_graph in {rank}"
    behind = "(the slowest replica still in loading_shards)"
    text = human(doc, view.ready_in, view.follower, view.crash)
    assert f"{said} {behind}" in text, text
    assert f"phases launching > loading_shards > crashed ({rank} in cuda_graph)" in text, text
    assert view.crash is not None and view.crash["text"].startswith(said)
    assert any(x.startswith("phases: ") and f"· crashed ({rank} in cuda_graph)" in x
               for x in summary_block(view)), summary_block(view)
    st_ = pipe.state
    settled = CrashSettled(st_.epoch, st_.startup_id, st_.crash, st_.durations(), 40.0)
    alert = next(d for d in AlertPolicy().observe(view, [settled])
                 if getattr(d, "kind", "") == "crashed")
    assert alert.summary == f"{said} after 40s {behind}", alert.summary
    assert (alert.details["replica"], alert.details["startup_phase"]) == (rank, "loading_shards")
    records: list = []
    read_ledger(str(BUILT / name), "auto", records.append)
    assert (records[0].during, records[0].replica) == ("cuda_graph", rank)
    assert history_row(records[0])[2] == f"crashed: cuda_oom ({rank} in cuda_graph)"


def _dp8_capture(k: int) -> list[tuple[int, str]]:
    """(second, line) of engine core DPk's steps in a `vllm serve -dp 8` (TP1): each
    loads and compiles, then captures from second 80 + 5k for 24 s (a frame for each of 67
    sizes)."""
    tag = f"(EngineCore_DP{k} pid={150 + k}) INFO 12-01 10:{{:02d}}:{{:02d}} "
    out = [(4, tag + "[core.py:154] Initializing a V1 LLM engine (v0.34.0) with config: "
               "model='Qwen/Qwen3-8B'"),
           (8, tag + "[model_runner.py:412] Loading model from scratch..."),
           (40, tag + "[model_runner.py:442] Model loading took 15.3 GiB memory and 32.0 seconds"),
           (41, tag + "[monitor.py:40] Starting torch.compile"),
           (78 + 5 * k, tag + "[gpu_worker.py:796] Available KV cache memory: 52.1 GiB")]
    out += [(80 + 5 * k + j * 24 // 67, f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): "
             f"{j * 100 // 67:3d}%|     | {j}/67 [00:{j * 24 // 67:02d}<00:00,  2.80it/s]")
            for j in range(68)]
    return out + [(105 + 5 * k, tag + "[model_runner.py:1217] Graph capturing finished in 25 secs"),
                  (106 + 5 * k, tag + "[extensible_kv_cache.py:694] Memory after warmup: 10.10 GiB "
                   "free, 52.10 GiB committed to the KV cache")]


def _dp8_lines() -> list[str]:
    """The eight engines' lines in the order of their seconds, engine by engine in each."""
    events = sorted((t, k, i, x) for k in range(8) for i, (t, x) in enumerate(_dp8_capture(k)))
    lines = [x.replace("{:02d}:{:02d}", f"{t // 60:02d}:{t % 60:02d}") for t, _, _, x in events]
    return lines + [READY_AT.format("12-01 10:02:25")]


def test_dp_engines_capture_bars_printed_at_once_keep_the_log_s_clock():
    """`vllm serve -dp 8`: the eight engine cores print their capture bars at once, their
    frames interleaved (one description, elapsed times 5 s apart).  Before: the clock read
    them as one bar begun again at each other engine's frame, and each moved it on by that
    frame's elapsed time: allocating 18m27s and cuda_graph 0.0 s of a startup ready in 2m21s."""
    st_ = feed(_dp8_lines(), "vllm").state
    d = st_.durations()
    assert st_.ready_in() == 141.0 and abs(sum(d.values()) - 141.0) <= 1.0, d   # from 10:00:04
    # DP7's capture: 10:01:55 to 10:02:19, its KV commit at :21, ready at :25
    assert 25.0 <= d["cuda_graph"] <= 31.0 and d["allocating"] <= 10.0, d


def test_sglang_dp_groups_move_the_startup_when_the_slowest_does():
    """SGLang `--dp 2`: group DP1 loads 40 s longer (each group its own schedulers, 0.5.23
    data_parallel_controller.py `Launch DP1 starting at GPU #1.`).  Before: loading 10 s,
    DP1's load timed as DP0's capture (cuda_graph 59 s)."""
    st_ = replay("sglang-0523-dp2.log")
    assert main_phases(st_) == ["launching", "loading_shards", "allocating", "cuda_graph",
                                "ready"]
    d = st_.durations()
    assert d["loading_shards"] == 50.0 and d["cuda_graph"] == 19.0, d


def _dp2_shard_bars() -> list[tuple[int, str]]:
    """(second, line) of SGLang `--dp 2` loading 17 shards: DP0 a shard every 2 s, DP1 every
    10 s, each group's untagged bar frames interleaved in one stream."""
    out = [(0, "[2026-12-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-32B', "
               "'tokenizer_path': 'Qwen/Qwen3-32B', 'dp_size': 2, 'port': 30000}")]
    out += [(6, f"[2026-12-01 10:00:06 DP{d}] Load weight begin. avail mem=78.92 GB")
            for d in range(2)]
    for step in (2, 10):
        out += [(6 + step * k, f"Loading safetensors checkpoint shards: {k * 100 // 17:3d}% "
                 f"Completed | {k}/17 [{step * k // 60:02d}:{step * k % 60:02d}<00:00,  "
                 f"{1 / step:.2f}it/s]") for k in range(18)]
    out += [(40, "[2026-12-01 10:00:40 DP0] Load weight end. elapsed=34.00 s, "
                 "type=Qwen3ForCausalLM, avail mem=47.61 GB, mem usage=31.31 GB.")]
    return sorted(out, key=lambda tx: tx[0])


def test_dp_groups_shard_bars_printed_at_once_show_the_slowest_s_count_and_eta():
    """Each `--dp` group prints its own shard bar, untagged, into one stream.  Before, the
    count flipped between them (5/17, 1/17, 6/17, ... 17/17 while DP1 had 3) and the rate
    and ETA were the fast group's: at 20 s, 7/17 and 2m03s to go (DP1 loads until 3m56s: its
    17 shards take 170 s).  Now the slowest group's bar: its count, its rate, its ETA."""
    pipe = LogPipeline(load_pack("sglang"))
    shown = []
    for t, x in _dp2_shard_bars():
        pipe.feed((x + "\n").encode(), 1000.0 + t)
        v = pipeline_view("x", pipe, 1000.0 + t)
        shown.append((t, v.shards.loaded if v.shards else None, v.eta_seconds))
    after = [(t, n, eta) for t, n, eta in shown if 16 < t <= 176]
    assert [n for _, n, _ in after] == sorted(n for _, n, _ in after)     # never back
    assert next(n for t, n, _ in shown if t == 40) == 3                 # DP1's, at DP0's end
    # DP1's last shard at 176 s: the ETA counts down to it, not to the fast group's 40 s
    assert all(eta is not None and eta >= 176 - t for t, _, eta in after), after
    # a daemon restarted mid-load goes on from its checkpoint: the bars apart still
    lines = _dp2_shard_bars()
    half = [tx for tx in lines if tx[0] <= 30]
    pipe = LogPipeline(load_pack("sglang"))
    for t, x in half:
        pipe.feed((x + "\n").encode(), 1000.0 + t)
    again = LogPipeline(load_pack("sglang"))
    again.state = state_from_json(state_to_json(pipe.state))
    for t, x in lines[len(half):]:
        again.feed((x + "\n").encode(), 1000.0 + t)
        v = pipeline_view("x", again, 1000.0 + t)
        assert (t, v.shards.loaded if v.shards else None, v.eta_seconds) in shown


def _bars_read(frames: list[int], total: int) -> tuple[list[int], list[int]]:
    from logwatch.machine.rates import replica_bar
    bars: list = []
    shown = [replica_bar(bars, c, total, None, None, float(i)).current   # type: ignore[union-attr]
             for i, c in enumerate(frames)]
    return shown, sorted(b.current for b in bars)


def test_replicas_bars_in_step_then_apart_and_an_end_printed_twice():
    """Two replicas' bars in step (each count printed by both) are two bars, and one that
    falls behind is not left stale: a count joins the furthest bar below it (taken as any
    bar not past it, the one behind stayed at 4 for good: shown 4/17 after both ended);
    both ending together end both."""
    shown, held = _bars_read([0, 0, 1, 1, 2, 2, 3, 4, 3, 4, 5, 5, 6, 6, 17, 17], 17)
    assert shown == [0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 4, 5, 5, 6, 6, 17] and held == [17, 17]
    shown, held = _bars_read([0, 0, 2, 1, 5, 2, 3, 5], 5)
    assert shown == [0, 0, 0, 1, 1, 2, 3, 5] and held == [5, 5]


def test_sglang_dp_attention_ranks_are_one_model_not_replicas():
    """With `--enable-dp-attention` the DP ranks are one TP group and rank 0 alone prints
    the KV pool, autotune and capture (scheduler.py's prefix `DP1 TP1`): compared as
    replicas, the startup would wait at allocating for steps DP1 never prints."""
    src = (BUILT / "sglang-0523-download.log").read_text().splitlines()
    lines = [src[0].replace("'tp_size': 2", "'tp_size': 2, 'dp_size': 2, "
                                            "'enable_dp_attention': True")]
    lines += [x.replace(" TP0]", " DP0 TP0]").replace(" TP1]", " DP1 TP1]") for x in src[1:]]
    want = main_phases(replay("sglang-0523-download.log"))
    assert main_phases(feed(lines, "sglang").state) == want
    lines[0] = lines[0].replace("True", "False")
    assert "cuda_graph" not in main_phases(feed(lines, "sglang").state)


def test_another_rank_s_capture_end_after_the_kv_commit_is_a_mention():
    """vLLM 0.34 commits the KV cache after the capture (allocating again): TP1's `Graph
    capturing finished` a second after TP0's commit re-entered cuda_graph (allocating 2 s of
    9, cuda_graph until ready)."""
    src = (BUILT / "vllm-034-default.log").read_text().splitlines()
    i = next(k for k, x in enumerate(src) if "Worker_TP1" in x and "capturing finished" in x)
    late = src.pop(i).replace("10:04:25", "10:04:26")
    src.insert(next(k for k, x in enumerate(src) if "Worker_TP0" in x and
                    "Memory after warmup" in x) + 1, late)
    st_, base = feed(src, "vllm").state, replay("vllm-034-default.log")
    assert main_phases(st_) == main_phases(base)
    assert st_.durations() == base.durations()
    # a headless DP node's workers: DP3's capture ends after DP2's commit (before: cuda_graph,
    # allocating 0 s, cuda_graph again until ready)
    assert main_phases(replay("vllm-034-headless-dp-tp2.log")) == [
        "launching", "loading_shards", "autotune", "allocating", "cuda_graph", "allocating",
        "ready"]


# -- a follower node of a multi-node launch ------------------------------------------------------

@pytest.mark.parametrize("name, took, last_rank", [
    ("sglang-0523-follower.log", 240.0, "TP15"), ("vllm-034-headless.log", 115.0, "Worker_TP3"),
    ("vllm-034-headless-dp.log", 51.0, "EngineCore_DP3"),
    ("vllm-034-headless-dp-tp2.log", 51.0, "EngineCore_DP3")])
def test_a_follower_node_is_ready_when_every_rank_of_it_finished_capturing(
        name: str, took: float, last_rank: str):
    """SGLang `--node-rank 1` and vLLM `--headless` nodes run no HTTP server and print no
    ready line: read as a head node's log they stayed in cuda_graph for good (and were paged
    `stalled`).  Ready once the last of their ranks finished capturing; not a rank sooner.
    A headless data-parallel node's engine cores size their KV cache after the capture (0.34's
    extensible KV cache) and then say they are up (`init engine ... took`): before helper
    adv36, that `GPU KV cache size` line left it `still starting: cuda_graph` for good.  With
    `-tp 2` the engine core's workers capture and it says only that it is up (`ends_rank`):
    before helper adv39, still starting for good."""
    path = BUILT / name
    pipe = replay_file(str(path))
    st_ = pipe.state
    assert st_.follower and st_.phase == READY and st_.startups == 1
    assert st_.ready_in() == pytest.approx(took) and last_rank in (st_.ready_line or "")
    lines = path.read_text().splitlines()
    last_end = max(i for i, x in enumerate(lines) if "graph end" in x or "capturing finished" in x)
    short = feed(lines[:last_end], pipe.pack.name).state
    # (a rank that captured may have committed its KV cache already: 0.34, allocating)
    assert short.follower and short.phase in ("cuda_graph", "allocating"), \
        "ready before its last rank"
    back = state_from_json(state_to_json(short))        # a daemon restart keeps it
    assert back.follower


def test_a_follower_that_serves_at_once_is_ready_without_a_quiet_window():
    """Node 1 of an SGLang `--enable-dp-attention` launch: each DP rank logs its own batches
    (`[... DP8 TP8 EP8] Decode batch.`), so under traffic from the moment the head serves the
    node never stays quiet 10 s.  Before helper adv36 it stayed `cuda_graph` while it served;
    its batches say its ranks' work is done: ready, at its last rank's capture end."""
    lines = [re.sub(r" TP(\d+)\]", lambda m: f" DP{m[1]} TP{m[1]} EP{m[1]}]", x)
             for x in (BUILT / "sglang-0523-follower.log").read_text().splitlines()]
    lines += [f"[2026-12-01 10:{s // 60:02d}:{s % 60:02d} DP8 TP8 EP8] Decode batch. "
              "#running-req: 2, #token: 4078, token usage: 0.00, gen throughput (token/s): "
              "447.31, #queue-req: 0" for s in range(241, 360, 3)]
    pipe = LogPipeline(load_pack("sglang"))
    t0 = calendar.timegm(time.strptime("2026-12-01 10:00:00", "%Y-%m-%d %H:%M:%S"))
    for line in lines:          # live: each line at its stamp, a tick before it
        m = re.search(r"10:(\d\d):(\d\d)", line)
        at = float(t0 + int(m[1]) * 60 + int(m[2])) if m else float(t0)
        pipe.tick(at)
        pipe.feed((line + "\n").encode(), at)
    st_ = pipe.state
    assert (st_.follower, st_.phase) == (True, READY), st_.phase
    assert st_.ready_in() == pytest.approx(240.0) and st_.stats.get("gen_throughput") == 447.31


def test_a_follower_with_a_draft_model_is_ready_after_its_draft_capture():
    """Speculative decoding (EAGLE, MTP): each rank loads the draft model and captures its
    graphs after the target's capture ended.  Ready at the draft's capture end, once the
    log stays quiet after it (live: FOLLOWER_QUIET; a replay: the input's end); a draft
    capture that never ends is a stall, not a ready; its OOM a crash during cuda_graph."""
    from logwatch.machine.follower import FOLLOWER_QUIET
    lines = (BUILT / "sglang-0523-follower.log").read_text().splitlines()
    ranks = range(8, 16)
    draft = [f"[2026-12-01 10:04:02 TP{r}] Load weight begin. avail mem=8.50 GB" for r in ranks] + \
        [f"[2026-12-01 10:04:20 TP{r}] Load weight end. elapsed=18.00 s, type=Eagle, avail "
         f"mem=6.50 GB, mem usage=2.00 GB." for r in ranks] + \
        [f"[2026-12-01 10:04:21 TP{r}] Capture draft decode CUDA graph begin. backend=flashinfer, "
         f"num_tokens_per_req=1, avail mem=6.40 GB" for r in ranks]
    end = [f"[2026-12-01 10:05:00 TP{r}] Capture draft decode CUDA graph end. bs=[1, 2, 4, 8], "
           f"elapsed=39.00 s, mem usage=0.30 GB, avail mem=6.10 GB." for r in ranks]
    st_ = feed(lines + draft + end, "sglang").state
    assert st_.phase == READY and st_.ready_in() == pytest.approx(300.0), st_.ready_in()
    assert "draft decode CUDA graph end" in (st_.ready_line or "")
    assert feed(lines + draft, "sglang").state.phase == "cuda_graph"       # a hang
    # live: not ready at the target's capture end while the draft's lines follow; ready only
    # once the log is quiet after the draft's capture end
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed("".join(x + "\n" for x in lines).encode(), 1000.0)
    assert pipe.tick(1000.0 + FOLLOWER_QUIET / 2) == [] and pipe.state.phase == "cuda_graph"
    pipe.feed("".join(x + "\n" for x in draft + end).encode(), 1006.0)
    assert pipe.state.phase == "cuda_graph"
    assert pipe.tick(1006.0 + FOLLOWER_QUIET - 1) == []
    events = pipe.tick(1006.0 + FOLLOWER_QUIET)
    assert pipe.state.phase == READY and any(type(e).__name__ == "Ready" for e in events)
    assert pipe.state.ready_in() == pytest.approx(300.0)     # at the line, by its stamp


def _without_graphs(name: str) -> list[str]:
    """A follower log as the node writes it with graphs off: no capture."""
    return [x for x in (BUILT / name).read_text().splitlines()
            if not re.search(r"Captur|capturing finished", x)]


def test_a_follower_with_graphs_off_is_ready_once_its_ranks_sized_their_kv_cache():
    """`--disable-cuda-graph` (SGLang: its `server_args` on every node say so) and
    `--enforce-eager` (vLLM: a headless node prints no arguments, but its config's "Cudagraph
    is disabled under eager mode"): no capture comes, and a rank's last step is its KV cache.
    Before: cuda_graph never began, the node stayed in allocating for good (`stalled`).
    Ready once every rank got there and the log stayed quiet; a rank still loading holds it
    back, and the same lines with graphs on are not ready (their capture is still to come)."""
    from logwatch.machine.follower import FOLLOWER_QUIET
    sg = _without_graphs("sglang-0523-follower.log")
    sg[0] = sg[0].replace("'trust_remote_code': True}",
                          "'trust_remote_code': True, 'disable_cuda_graph': True}")
    st_ = feed(sg, "sglang").state
    assert st_.follower and st_.phase == READY, st_.phase
    assert st_.ready_in() == pytest.approx(192.0) and "Memory pool end" in st_.ready_line
    late = [x for x in sg if not ("TP15]" in x and ("KV Cache" in x or "Memory pool" in x))]
    assert feed(late, "sglang").state.phase != READY, "a rank still loading"
    on = _without_graphs("sglang-0523-follower.log")
    assert feed(on, "sglang").state.phase != READY, "graphs on: the capture is still to come"
    vl = _without_graphs("vllm-034-headless.log")
    vl.insert(1, "(MainProcess pid=100) INFO 12-01 10:00:01 [vllm.py:1917] Cudagraph is "
                 "disabled under eager mode")
    st_ = feed(vl, "vllm").state
    assert st_.follower and st_.graphs_off and st_.phase == READY, st_.phase
    assert "committed to the KV cache" in st_.ready_line
    plain = [x for x in vl if "Memory after warmup" not in x]     # no extensible KV cache
    assert "Available KV cache memory" in (feed(plain, "vllm").state.ready_line or "")
    assert feed(vl[:1] + vl[2:], "vllm").state.phase != READY
    # live: ready only once the log stayed quiet after the last rank's KV cache
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed("".join(x + "\n" for x in sg).encode(), 1000.0)
    assert pipe.tick(1000.0 + FOLLOWER_QUIET - 1) == [] and pipe.state.phase == "allocating"
    pipe.tick(1000.0 + FOLLOWER_QUIET)
    assert pipe.state.phase == READY and pipe.state.ready_in() == pytest.approx(192.0)
    back = state_from_json(state_to_json(feed(vl[:3], "vllm").state))   # a daemon restart
    assert back.graphs_off


def test_a_head_node_is_not_ready_at_its_capture_end():
    """The same lines from node 0 (`node_rank` 0) are a head node's: its ready line comes."""
    lines = (BUILT / "sglang-0523-follower.log").read_text().splitlines()
    lines[0] = lines[0].replace("'node_rank': 1", "'node_rank': 0")
    st_ = feed(lines, "sglang").state
    assert st_.follower is False and st_.phase == "cuda_graph"


@pytest.mark.parametrize("labels", [("0: ", "1: "), ("gpu-node-0: ", "gpu-node-1: "),
                                    ("[1,0]<stdout>:", "[1,1]<stdout>:")])
@pytest.mark.parametrize("head_first", [True, False])
def test_both_nodes_in_one_srun_stream_wait_for_the_head_s_ready_line(
        head_first: bool, labels: tuple[str, str]):
    """`srun -N2 --label python -m sglang.launch_server ... --node-rank $SLURM_NODEID`
    writes both nodes to one file (`slurm-%j.out`), each line after its task's number: one
    launch of two processes.  Node 1's dump says follower, node 0's says head; the head's
    word wins, in either order: ready at "fired up", not at the last rank's capture.  The
    same with pdsh's node names (`pdsh -w gpu-node-[0-1] ...`) and Open MPI's
    `--tag-output` (before, its labels stayed: never ready)."""
    follower = (BUILT / "sglang-0523-follower.log").read_text().splitlines()
    head = [x.replace("'node_rank': 1", "'node_rank': 0") for x in follower]
    head = [labels[0] + re.sub(r" TP(\d+)\]", lambda m: f" TP{int(m.group(1)) - 8}]", x)
            for x in head]
    follower = [labels[1] + x for x in follower]
    both = [x for pair in zip(head, follower) for x in (pair if head_first else pair[::-1])]
    st_ = feed(both, "sglang").state
    assert st_.startups == 1 and st_.follower is False and st_.phase == "cuda_graph", \
        (st_.startups, st_.follower, st_.phase)
    st_ = feed(both + [f"{labels[0]}[2026-12-01 10:04:10] The server is fired up and ready "
                       "to roll!"], "sglang").state
    assert st_.phase == READY and "fired up" in (st_.ready_line or "")


def _two_nodes(head_first: bool = True, addr: str = "10.0.0.1:5000") -> list[str]:
    """Both nodes' lines of one SGLang launch as `srun -N2` without `--label` writes them to
    one file: untagged, interleaved (node 1's ranks TP8-15, node 0's TP0-7)."""
    follower = [x.replace("10.0.0.1:5000", addr)
                for x in (BUILT / "sglang-0523-follower.log").read_text().splitlines()]
    head = [re.sub(r" TP(\d+)\]", lambda m: f" TP{int(m.group(1)) - 8}]",
                   x.replace("'node_rank': 1", "'node_rank': 0")) for x in follower]
    return [x for pair in zip(head, follower) for x in (pair if head_first else pair[::-1])]


READY_LINE = "[2026-12-01 10:04:10] The server is fired up and ready to roll!"


@pytest.mark.parametrize("head_first", [True, False])
def test_both_nodes_unlabelled_in_one_file_are_one_launch(head_first: bool):
    """`srun -N2 python -m sglang.launch_server ... --node-rank $SLURM_NODEID` without
    `--label`: each node's `server_args` untagged in one file.  Node 1's dump is another node
    of the launch under way (as many nodes, the same `dist_init_addr`: the pack's
    `follower.nodes`), not a relaunch; the head's word wins: ready at "fired up".  Before:
    2 startups (a `restarted` alert), and with the head first, "ready" at node 1's capture
    end, as a follower, while nothing served."""
    both = _two_nodes(head_first)
    st_ = feed(both, "sglang").state
    assert (st_.startups, st_.follower, st_.phase) == (1, False, "cuda_graph")
    assert st_.nodes == {0, 1} and st_.args["node_rank"] == 0
    st_ = feed(both + [READY_LINE], "sglang").state
    assert st_.phase == READY and "fired up" in (st_.ready_line or "")
    assert state_from_json(state_to_json(feed(both[:1], "sglang").state)).nodes == \
        {0 if head_first else 1}


def test_unlabelled_nodes_relaunched_are_new_startups():
    """What stays a relaunch: both nodes again after a crash (2 startups, not 1 of 4
    nodes); node 0 again while the launch loads (a requeue: its node already printed); a
    dump of another launch (another `dist_init_addr`) or of a single-node launch."""
    both = _two_nodes()
    crash = "[2026-12-01 10:02:00 TP3] Scheduler hit an exception: torch.OutOfMemoryError: " \
            "CUDA out of memory"
    st_ = feed(both[:40] + [crash] + both, "sglang").state
    assert st_.startups == 2 and st_.nodes == {0, 1}
    st_ = feed(both[:40] + both[:1], "sglang").state
    assert st_.startups == 2 and st_.nodes == {0}
    st_ = feed(both[:1] + _two_nodes(addr="10.0.0.9:5000")[1:2], "sglang").state
    assert st_.startups == 2
    single = [x.replace("'nnodes': 2", "'nnodes': 1").replace("'node_rank': 1", "'node_rank': 0")
              for x in both[:2]]
    assert feed(single, "sglang").state.startups == 2


def test_a_daemon_attaching_to_unlabelled_nodes_starts_at_the_first_node_s_dump(tmp_path: Path):
    """The latest-startup locator (a daemon attaching; over SSH, its remote grep's lines)
    begins the launch at its first node's dump, not at node 1's after it (read from there,
    the launch was a follower's)."""
    from logwatch.rules.locate import latest_startup, startup_locator
    earlier = "[2026-11-30 09:00:00] server_args={'model_path': 'x', 'nnodes': 1, " \
              "'node_rank': 0}"
    lines = [earlier, *_two_nodes()]
    data = "".join(x + "\n" for x in lines).encode()
    want = (len(earlier) + 1, 2)
    assert latest_startup([load_pack("sglang")], [data]) == want
    loc = startup_locator(load_pack("sglang"))
    assert loc is not None
    grepped, off = [], 0
    for n, line in enumerate(lines, 1):
        if "server_args=" in line:
            grepped.append((off, n, line))
        off += len(line.encode()) + 1
    assert loc.latest_start(grepped) == want
    assert loc.latest_start(grepped[:1]) == (0, 1) and loc.latest_start([]) is None


@pytest.mark.parametrize("order", ["head_first", "headless_first", "headless_after_init"])
def test_a_vllm_head_and_its_headless_node_in_one_file_are_the_head_s_launch(order: str):
    """A `vllm serve --nnodes 2 --node-rank 0` head and its `--headless` node 1 writing one
    file (`srun` without `--label`): only an API server prints the version line and the
    arguments (the pack's `follower.head`), so the launch is the head's, in any order, and
    ready at the API server's line, not at the headless ranks' KV cache after the quiet
    window.  Before: a follower's launch, "ready" at the KV cache line (268 s) while nothing
    served (333 s)."""
    head = [x.replace("'tensor_parallel_size': 2", "'tensor_parallel_size': 4, 'nnodes': 2, "
                      "'node_rank': 0") for x in (BUILT / "vllm-034-default.log").read_text()
            .splitlines()]
    head = [re.sub(r"12-01 10:04:(3[1-9])", lambda m: f"12-01 10:05:{m.group(1)}", x)
            for x in head]       # the API server slow after the capture: quiet for 60 s
    node = (BUILT / "vllm-034-headless.log").read_text().splitlines()
    k = {"head_first": 2, "headless_first": 0, "headless_after_init": 7}[order]
    rest = [x for pair in zip(head[k:], node[1:]) for x in pair] + head[k + len(node) - 1:]
    lines = head[:k] + node[:1] + rest
    assert len(lines) == len(head) + len(node)
    pipe = LogPipeline(load_pack("vllm"))
    t0 = time.mktime(time.strptime("2026-12-01 10:00:00", "%Y-%m-%d %H:%M:%S"))
    stamp = re.compile(r" (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
    for line in lines:          # live, at the log's own pace, ticking through its silences
        m = stamp.search(line)
        at = t0 + (int(m[3]) - 10) * 3600 + int(m[4]) * 60 + int(m[5]) if m else None
        if at is not None:
            for t in range(int(pipe.state.last_log_time or at), int(at)):
                pipe.tick(float(t))
        pipe.feed((line + "\n").encode(), at if at is not None else t0)
    st_ = pipe.state
    assert (st_.startups, st_.follower, st_.phase) == (1, False, READY), \
        (st_.startups, st_.follower, st_.phase)
    assert "Starting vLLM server" in (st_.ready_line or "")


def test_a_requeued_node_after_a_silent_death_is_a_new_launch():
    """Node 1 of a launch printed its dump and died without a word (node 0 never printed);
    30 minutes later the requeue's node 0 dump: past the launch's stall budget
    (launching: 10m), a relaunch, not node 0 joining the dead launch.  Before: it joined,
    and the requeue read as a follower's launch ("ready" at node 1's capture end)."""
    both = _two_nodes(head_first=False)
    dead = [x for x in both[:6] if "'node_rank': 1" in x or " TP1" in x]
    late = [re.sub(r"^\[2026-12-01 10:", "[2026-12-01 11:", x) for x in _two_nodes()]
    st_ = feed(dead + late + [READY_LINE.replace("10:04", "11:04")], "sglang").state
    assert (st_.startups, st_.follower, st_.phase) == (2, False, READY)


SGLANG_LOGS = sorted(FIXTURES.glob("sglang-*.log")) + sorted(BUILT.glob("sglang-*.log"))
_SGLANG_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d )?(\d\d:\d\d:\d\d)( [^\]]*)?\]", re.M)


@pytest.mark.parametrize("path", SGLANG_LOGS, ids=lambda p: p.name)
def test_sglang_stamps_with_milliseconds_read_the_same(path: Path):
    """`SGLANG_LOG_MS=1` (0.5.23 utils/common.py `configure_logger`: `%(asctime)s.%(msecs)03d`)
    changes only the stamps: the same phases, verdict and durations.  Before, the download's
    marker did not match (`sglang-0523-download.log` lost its downloading phase)."""
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    ms = _SGLANG_STAMP.sub(lambda m: f"[{m.group(1) or ''}{m.group(2)}.123{m.group(3) or ''}]", text)
    plain, with_ms = feed(text.splitlines(), "sglang").state, feed(ms.splitlines(), "sglang").state
    assert with_ms.phases_seen == plain.phases_seen and with_ms.phase == plain.phase
    assert (with_ms.crash.reason if with_ms.crash else None) == \
        (plain.crash.reason if plain.crash else None)
    assert {k: round(v) for k, v in with_ms.durations().items()} == \
        {k: round(v) for k, v in plain.durations().items()}


def test_sglang_0523_silent_download_is_downloading():
    st_ = replay("sglang-0523-download.log")
    assert main_phases(st_)[:3] == ["launching", "downloading", "loading_shards"]
    d = st_.durations()
    # `Using model weights format` at 10:00:09; the shard bar ran its last 30 s before
    # `Load weight end` at 10:02:40: the silence before it was the download
    assert close(d["downloading"], 121.0), d
    assert close(d["loading_shards"], 30.0), d
    assert st_.ready_in() == pytest.approx(241.0)


def test_vllm_034_jit_warmup_failure_crashes_during_autotune():
    st_ = replay("vllm-034-jit-crash-generic.log")
    assert st_.phase == "crashed" and st_.crash is not None
    assert st_.crash.during == "autotune", st_.crash
    assert "RuntimeError: unexpected status 3" in st_.crash.line


def test_sglang_overlap_mode_loads_beside_capture_without_double_counting():
    st_ = replay("sglang-0523-overlap.log")
    beside = [sp for sp in st_.spans if sp.beside]
    assert [sp.phase for sp in beside] == ["loading_shards"]
    capture = next(sp for sp in st_.spans if sp.phase == "cuda_graph")
    assert beside[0].log_time < capture.log_time < beside[0].end_log, "not at the same time"
    d = st_.durations()
    assert close(d["loading_shards"], 4 + 45), d     # Load weight begin, then the prefetch
    assert sum(d.values()) > st_.total()               # the overlap is in both phases...
    assert st_.total() == pytest.approx(st_.ready_in()) == pytest.approx(60.0)  # ...once here
    assert main_phases(st_) == ["launching", "loading_shards", "allocating", "cuda_graph", "ready"]


def test_sglang_weight_cache_daemons_load_before_the_launch_ends():
    st_ = replay("sglang-0523-weight-cache.log")
    launching = st_.spans[0]
    beside = [sp for sp in st_.spans if sp.beside]
    assert launching.phase == "launching" and len(beside) == 1
    assert beside[0].log_time - launching.log_time == pytest.approx(3.0)
    assert beside[0].end_log < launching.end_log       # loaded while still launching
    assert close(st_.durations()["loading_shards"], 87 + 8), st_.durations()
    assert st_.total() == pytest.approx(132.0) == st_.ready_in()


def test_vllm_download_is_reattributed_and_prefetch_is_loading_with_progress():
    pipe = replay_file(str(BUILT / "vllm-034-download-prefetch.log"))
    st_ = pipe.state
    assert main_phases(st_)[:3] == ["launching", "downloading", "loading_shards"]
    assert close(st_.durations()["downloading"], 143.2)
    assert (st_.progress["prefetch"].current, st_.progress["prefetch"].total) == (5, 5)
    assert (st_.progress["shards"].current, st_.progress["shards"].total) == (5, 5)


def test_vllm_download_is_announced_when_its_end_marker_arrives():
    lines = (BUILT / "vllm-034-download-prefetch.log").read_text().splitlines()
    pipe = LogPipeline(load_pack("vllm"))
    moves = []
    for i, line in enumerate(lines[:6]):
        moves += [(e.old, e.new) for e in pipe.feed((line + "\n").encode(), 1000.0 + 10 * i)
                  if isinstance(e, PhaseChanged)]
    assert ("downloading", "loading_shards") in moves, moves
    assert pipe.state.phase == "loading_shards"


def test_replay_timeline_prints_one_row_per_span():
    view = pipeline_view("x", replay_file(str(BUILT / "vllm-034-default.log")))
    rows = timeline(view).splitlines()
    assert [r.split()[0] for r in rows[:-1]] == ["launching", "loading_shards", "autotune",
                                                 "allocating", "autotune", "cuda_graph",
                                                 "allocating", "ready"]
    # loading ends at `Model loading took` (10:00:44), not the loader's `Loading weights
    # took` (10:00:43): a speculative draft loads between them (rules/vllm.yaml weights_loaded)
    assert "total 4m33s" in rows[-1] and "autotune 3m11s in all" in rows[-1]
    overlap = timeline(pipeline_view("y", replay_file(str(BUILT / "sglang-0523-overlap.log"))))
    assert "+loading_shards" in overlap, overlap


@pytest.mark.parametrize("name", ["vllm-034-default.log", "sglang-0523-overlap.log"])
def test_the_readme_s_timeline_examples_are_what_replay_prints(name: str):
    """The README shows `replay --timeline` of these two built logs; each of its rows is
    the row replay prints (before: the README said loading 31s, autotune 44s, 3m15s in
    all where replay printed 32s, 43s, 3m14s since the loading's end moved)."""
    readme = (ROOT / "README.md").read_text()
    head = readme.index(f"(tests/fixtures/built/{name})")
    shown = [ln.strip() for ln in readme[head:].split("\n\n", 2)[1].splitlines()]
    rows = timeline(pipeline_view("x", replay_file(str(BUILT / name)))).splitlines()
    printed = [r.strip() for r in rows]
    assert [r for r in shown if r.split()[0].lstrip("+") in README_PHASES or
            r.startswith("(total")] == printed


# -- one clock per log --------------------------------------------------------------------------

VL = "(APIServer pid=100) INFO {} [startup.py:18] vLLM server version 0.34.0, serving model m"
FI = "{} - INFO - autotuner.py:972 - flashinfer.jit: [Autotuner]: Autotuning process starts ..."
READY_AT = "(APIServer pid=100) INFO {} [entry.py:139] Starting vLLM server on http://0.0.0.0:8000"


@pytest.mark.parametrize("year", [2019, 2026, 2027])
def test_clock_over_new_year_with_mixed_formats(year):
    lines = [VL.format("12-31 23:59:50"), FI.format("2027-01-01 00:00:05,000"),
             READY_AT.format("01-01 00:00:20")]
    st_ = feed(lines, "vllm", year=year).state
    assert st_.ready_in() == pytest.approx(30.0)
    assert st_.untrusted_stamps == 0


def feed_written(lines: list[str], written: float) -> LogPipeline:
    """The lines through a pipeline as `replay` reads a file last written at `written`."""
    pipe = LogPipeline(load_pack("vllm"), written=written)
    pipe.feed("".join(x + "\n" for x in lines).encode(), 1_000.0)
    pipe.finish(1_000.0)
    return pipe


def test_a_december_log_read_in_january_is_of_the_year_before():
    """`cp` without -p gives a December log January's mtime (a pipe or a daemon in January:
    now's year): its year-less stamps were dated 11 months ahead, `history` said 2027-12-04
    for a launch of 2026-12-04.  No line is written after the file's last write."""
    lines = [VL.format("12-04 10:00:00"), READY_AT.format("12-04 10:01:00")]
    st_ = feed_written(lines, calendar.timegm((2027, 1, 5, 9, 0, 0))).state
    assert st_.spans[0].log_time == calendar.timegm((2026, 12, 4, 10, 0, 0))
    assert st_.ready_in() == pytest.approx(60.0)
    # a log of this year, written today: this year
    st_ = feed_written(lines, calendar.timegm((2026, 12, 4, 10, 5, 0))).state
    assert st_.spans[0].log_time == calendar.timegm((2026, 12, 4, 10, 0, 0))


def test_replay_dates_a_copied_december_log_by_its_mtime(tmp_path: Path):
    """The path a user takes: the file copied on 5 January (its mtime then), replayed."""
    log = tmp_path / "server.log"
    log.write_text(VL.format("12-04 10:00:00") + "\n" + READY_AT.format("12-04 10:01:00") + "\n")
    jan = calendar.timegm((2027, 1, 5, 9, 0, 0))
    os.utime(log, (jan, jan))
    st_ = replay_file(str(log)).state
    assert st_.spans[0].log_time == calendar.timegm((2026, 12, 4, 10, 0, 0))


def test_a_29_february_is_of_a_leap_year():
    """A log of 29 February read in a year that has none: the date rolled to 1 March, and
    the next day's lines went back a day (ready after 1m29s for 4m33s; cuda_graph 24 h)."""
    lines = [VL.format("02-29 23:58:00"), READY_AT.format("03-01 00:02:33")]
    st_ = feed_written(lines, calendar.timegm((2026, 12, 4, 10, 0, 0))).state
    assert st_.spans[0].log_time == calendar.timegm((2024, 2, 29, 23, 58, 0))
    assert st_.ready_in() == pytest.approx(273.0)


def test_a_clock_that_jumps_back_is_not_used_and_counted():
    lines = [VL.format("12-01 10:00:00"),
             "(EngineCore pid=1) INFO 12-01 10:00:30 [model_runner.py:412] Loading model from scratch...",
             "(EngineCore pid=1) INFO 12-01 09:00:40 [gpu_worker.py:796] Available KV cache memory: 1 GiB",
             READY_AT.format("12-01 10:01:00")]
    st_ = feed(lines, "vllm").state
    assert st_.untrusted_stamps == 1
    assert st_.ready_in() == pytest.approx(60.0)
    assert all(0 <= d <= 60.0 for d in st_.durations().values()), st_.durations()
    assert st_.total() <= 60.0


def test_a_stamp_years_ahead_is_not_used():
    lines = [VL.format("12-01 10:00:00"), FI.format("2026-12-01 10:00:10,000"),
             FI.format("2049-12-01 10:00:30,000"), READY_AT.format("12-01 10:01:00")]
    st_ = feed(lines, "vllm", year=2026).state
    assert st_.untrusted_stamps == 1
    assert st_.ready_in() == pytest.approx(60.0)
    assert max(st_.durations().values()) <= 60.0


def test_spans_survive_a_checkpoint():
    st_ = replay("sglang-0523-overlap.log")
    back = state_from_json(state_to_json(st_))
    assert back.spans == st_.spans and back.durations() == st_.durations()
    assert back.total() == st_.total()


# -- no flapping: on every fixture --------------------------------------------------------------

ALL_LOGS = sorted(FIXTURES.glob("*.log")) + sorted(BUILT.glob("*.log"))


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_only_a_line_that_begins_a_phase_moves_back_and_only_once(path: Path):
    """A rank repeating an earlier milestone is not a move back: every move to an earlier
    phase of the pack's order is made by a rule that begins its phase (or re-enters an
    empty one), each such rule at most once per startup; or by the server's launch line
    after its wrapper's download (the pack's `prelaunch`), to the first phase, once."""
    data = path.read_bytes()
    pack = choose_pack("auto", data)
    pipe = LogPipeline(pack)
    events = pipe.feed(data, time.time()) + pipe.finish(time.time())
    used: set[tuple[int, str]] = set()
    for e in events:
        if not isinstance(e, PhaseChanged) or e.old not in pack.phases or \
                e.new not in pack.phases or pack.phases.index(e.new) > pack.phases.index(e.old):
            continue
        rule = next(r for r in pack.rules if r.regex.search(e.line))
        launch = rule.restart and e.old in pack.prelaunch and e.new == pack.phases[0]
        assert rule.begins or rule.reenter or rule.closes_as or launch, \
            f"{path.name}: {e.old} -> {e.new} by {rule.id}"
        if launch:
            assert (e.epoch, "launch") not in used, f"{path.name}: launched twice"
            used.add((e.epoch, "launch"))
        if rule.begins:
            assert (e.epoch, rule.id) not in used, f"{path.name}: {rule.id} moved back twice"
            used.add((e.epoch, rule.id))


# -- the machine's property: ranks interleave, the spans do not change ----------------------------

def _streams(path: Path):
    """The log as segments between untagged lines; within a segment, one stream of stamped
    lines per rank (ranks print concurrently: their order in the file is the writer's)."""
    data = path.read_bytes().decode("utf-8", "surrogateescape")
    pack = choose_pack("auto", data.encode("utf-8", "surrogateescape"))
    pipe = LogPipeline(pack)
    segments: list[object] = []
    cur: dict[str, list[tuple[float, str]]] = {}
    for line in data.split("\n"):
        rank = pack.rank_of(line)
        stamp = pipe.clock.stamp(line) if rank else None
        if not rank or stamp is None or not stamp.own:
            if cur:
                segments.append(cur)
                cur = {}
            segments.append(line)
            continue
        cur.setdefault(rank, []).append((stamp.seconds, line))
    if cur:
        segments.append(cur)
    return pack, segments


def _interleave(segments: list[object], rnd: random.Random | None) -> bytes:
    """One interleaving: the ranks' lines merged in stamp order, equal stamps in any order
    (`rnd` None: the ranks' order)."""
    out: list[str] = []
    for seg in segments:
        if isinstance(seg, str):
            out.append(seg)
            continue
        heads = {r: list(v) for r, v in seg.items()}   # type: ignore[union-attr]
        while heads:
            low = min(v[0][0] for v in heads.values())
            ready = sorted(r for r, v in heads.items() if v[0][0] == low)
            r = rnd.choice(ready) if rnd is not None else ready[0]
            out.append(heads[r].pop(0)[1])
            if not heads[r]:
                del heads[r]
    return "\n".join(out).encode("utf-8", "surrogateescape")


def _spans(pack, data: bytes):
    """The spans that lasted (a zero-length one is two ranks' lines of the same second in
    one order: in the other, the second line is a mention of a phase already left)."""
    pipe = LogPipeline(pack)
    pipe.feed(data, 1_000.0)
    pipe.finish(1_000.0)
    s = pipe.state
    return s, [(sp.phase, sp.log_time, sp.end_log, sp.beside) for sp in s.spans
               if sp.end_log != sp.log_time or sp.phase in (READY, *TERMINAL)]


RANKED = ["sglang-024.log", "sglang-030.log", "sglang-211.log", "sglang-214.log",
          "built/sglang-0523-download.log", "built/vllm-034-default.log",
          "built/vllm-034-dp-supervisor.log", "built/sglang-0523-weight-cache.log",
          "built/sglang-0510-eagle-fastsafetensors.log", "built/sglang-0510-eagle-draft-oom.log"]


@pytest.mark.parametrize("name", RANKED)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_any_interleaving_of_rank_lines_gives_the_same_spans(name: str, seed: int):
    pack, segments = _streams(FIXTURES / name)
    base_state, base = _spans(pack, _interleave(segments, None))
    state, spans = _spans(pack, _interleave(segments, random.Random(seed)))
    assert spans == base
    # no duration is longer than the log, and the total counts overlapping time once
    times = [sp.log_time for sp in state.spans if sp.log_time is not None]
    times += [state.last_log_time] if state.last_log_time is not None else []
    if times:
        span_of_log = max(times) - min(times)
        assert all(d <= span_of_log + 1e-6 for d in state.durations().values())
        assert state.total() <= span_of_log + 1e-6
    d = state.durations()
    if d:
        assert max(d.values()) - 1e-6 <= state.total() <= sum(d.values()) + 1e-6
    assert state.phase == base_state.phase


@pytest.mark.parametrize("name", RANKED)
def test_the_interleavings_really_reorder_rank_lines(name: str):
    """The property above is not vacuous: the ranks' lines of these logs do come out in
    other orders."""
    _, segments = _streams(FIXTURES / name)
    base = _interleave(segments, None)
    assert any(_interleave(segments, random.Random(seed)) != base for seed in range(20)), name


def test_vllm_download_replayed_reads_launching_downloading_loading_once():
    """Replayed (no wall time passes), the provisional `Loading model from scratch...` is
    announced as what it turned out to be: no loading_shards -> downloading flip."""
    data = (BUILT / "vllm-034-download-prefetch.log").read_bytes()
    pipe = LogPipeline(load_pack("vllm"))
    events = pipe.feed(data, 1000.0) + pipe.finish(1000.0)
    moves = [(e.old, e.new) for e in events if isinstance(e, PhaseChanged)]
    assert moves[:3] == [("waiting", "launching"), ("launching", "downloading"),
                         ("downloading", "loading_shards")], moves


def test_a_download_time_without_a_load_line_keeps_launching():
    """`Time spent downloading weights` right after the launch lines (no `Loading model`
    line in the window): only its last `seconds` are the download; launching stays."""
    lines = [VL.format("12-01 10:00:00"),
             "(EngineCore pid=1) INFO 12-01 10:03:00 [weight_utils.py:568] Time spent "
             "downloading weights for m: 150.000000 seconds",
             READY_AT.format("12-01 10:04:00")]
    st_ = feed(lines, "vllm").state
    assert main_phases(st_) == ["launching", "downloading", "loading_shards", "ready"]
    assert st_.durations() == {"launching": 30.0, "downloading": 150.0, "loading_shards": 60.0}


def test_watch_says_what_runs_beside_the_current_phase():
    """`watch`'s plain output, line by line through SGLang's overlap mode: the loading that
    runs beside the phases is said when it begins and when it ends, and the end's summary
    gives the startup's wall time, not the phases' sum."""
    import io
    from logwatch.sinks.display import PlainDisplay
    out = io.StringIO()
    disp = PlainDisplay("overlap", out)
    pipe = LogPipeline(load_pack("sglang"))
    for i, line in enumerate((BUILT / "sglang-0523-overlap.log").read_text().splitlines()):
        now = 1000.0 + i
        events = pipe.feed((line + "\n").encode(), now)
        disp.update(pipeline_view("overlap", pipe, now), events, now)
    disp.finish(pipeline_view("overlap", pipe, 1100.0), "ready")
    text = out.getvalue()
    assert "loading_shards beside loading_shards" in text, text   # beside capture-safe prep
    assert "loading_shards beside: done (45s)" in text, text
    assert "phase allocating (loading_shards took 4.0s)" in text, text   # its own span
    assert "READY in 1m00s" in text and "(total 1m00s)" in text, text


def test_watch_read_at_once_says_how_long_each_span_it_left_took():
    """The lines `watch` reads at once (the attach's catch-up, `watch - < log`, --last) come
    as one batch of phase changes: each "took" is the span that change left.  Before, each
    took its phase's latest span: `phase allocating (autotune took 2m31s)` for vLLM 0.34's
    first autotune of 43 s, `phase autotune (allocating took 7.0s)` for a 2 s estimate (a
    watch of the same log as it was written said 43s and 2.0s)."""
    import io
    from logwatch.sinks.display import PlainDisplay
    text = (BUILT / "vllm-034-default.log").read_text()
    lines = text.splitlines()
    out = {}
    for batch in ("once", "paced"):
        buf = io.StringIO()
        disp = PlainDisplay("x", buf)
        pipe = LogPipeline(load_pack("vllm"))
        steps = [(text, 10_000.0)] if batch == "once" else \
            [(ln + "\n", 10_000.0 + _built_seconds(ln)) for ln in lines]
        for chunk, now in steps:
            events = pipe.feed(chunk.encode(), now)
            disp.update(pipeline_view("x", pipe, now), events, now)
        out[batch] = [ln[9:] for ln in buf.getvalue().splitlines() if ln[9:].startswith("phase ")]
    assert out["once"] == out["paced"], out
    assert out["once"][3:6] == ["phase allocating (autotune took 40s)",
                                "phase autotune (allocating took 5.0s)",
                                "phase cuda_graph (autotune took 2m31s)"], out["once"]


def test_eta_on_a_second_vllm_034_start_counts_the_phases_that_come_back():
    """The ETA from the first start's spans (autotune 3m15s = compile + JIT warmup and
    autotune; allocating 9 s = estimate + commit): on the second start, at the KV estimate
    (allocating, before the JIT warmup begins autotune again) and inside the second autotune,
    it is within 20% of the true time left (ready at 273 s)."""
    from logwatch.eta import startup_eta
    pack = load_pack("vllm")
    lines = (BUILT / "vllm-034-default.log").read_text().splitlines()
    first = feed(lines, "vllm").state
    typical = first.durations()
    stamps = [_built_seconds(x) for x in lines]
    pipe = LogPipeline(pack)
    t0 = 10_000.0
    checks = {}
    for line, at in zip(lines, stamps):
        now = t0 + at
        pipe.feed((line + "\n").encode(), now)
        if pipe.state.phase in ("allocating", "autotune") and 87 <= at <= 200:
            checks[(pipe.state.phase, at)] = startup_eta(pack, pipe.state, now, typical)
    assert any(p == "allocating" for p, _ in checks), checks
    for (p, at), eta in checks.items():
        truth = 273.0 - at
        assert abs(eta - truth) <= 0.2 * truth, (p, at, eta, truth)


def test_a_first_start_eta_does_not_count_a_phase_already_done_again():
    """No history (the pack's typical seconds, `rough`): vLLM 0.34 goes back to allocating
    after its graph capture (the KV cache's commit, 7 s before ready).  Before, the capture
    (typical 30 s) was counted again as a phase still ahead: the ETA rose from 5 s in the
    capture to 38 s at the last phase, 8 s before ready; now what the capture had of its
    typical time is done (12 s: within the allocating's typical 10 s of the truth)."""
    from logwatch.eta import startup_eta
    pack = load_pack("vllm")
    lines = (BUILT / "vllm-034-default.log").read_text().splitlines()
    pipe = LogPipeline(pack)
    t0, seen = 10_000.0, []
    for line in lines:
        at = _built_seconds(line)
        pipe.feed((line + "\n").encode(), t0 + at)
        if pipe.state.phase != READY:
            seen.append((pipe.state.phase, at, startup_eta(pack, pipe.state, t0 + at, {})))
    last = [(at, eta) for p, at, eta in seen if p == "allocating" and at > 260]
    assert last, seen
    at, eta = last[0]
    assert abs(eta - (273.0 - at)) <= pack.typical_seconds["allocating"], (at, eta)


def test_vllm_034_s_second_autotune_is_no_second_model_s_pass():
    """vLLM 0.34 comes back to autotune (the JIT warmup after the KV estimate) in one
    model's init: a first start keeps the pack's autotune default less what the compile
    had of it, not the compile's own time as for SGLang's draft pass (eta.py
    `_second_pass`): taken as one, compile-mm-encoder's median error rose from 10 s to
    55 s.  Here 43 s at the warmup's start, where 53 s were left (30 s of warmup, 20 s of
    capture); taken as a second pass it read 34 s further off."""
    from logwatch.eta import startup_eta
    pack = load_pack("vllm")
    lines = (BUILT / "vllm-034-compile-mm-encoder.log").read_text().splitlines()
    pipe, t0 = LogPipeline(pack), 10_000.0
    for line in lines:
        at = _built_seconds(line)
        pipe.feed((line + "\n").encode(), t0 + at)
        if "JIT kernel warmup starting" in line:
            break
    assert pipe.state.phase == "autotune" and pipe.state.closed_seconds("autotune") > 0
    left = 143.0 - at      # ready at 10:02:23
    assert abs(startup_eta(pack, pipe.state, t0 + at, {}) - left) <= 15, left


def _built_seconds(line: str) -> float:
    """Seconds after 10:00:00 of a built line's stamp (unstamped lines: the last one's)."""
    import re as _re
    m = _re.search(r"(\d\d):(\d\d):(\d\d)", line)
    if m is not None:
        _built_seconds.last = (int(m.group(1)) - 10) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
    return float(getattr(_built_seconds, "last", 0))


def test_phase_duration_metric_is_the_sum_of_the_phase_spans():
    from logwatch.sinks.metrics import target_lines
    lines = target_lines(pipeline_view("x", replay_file(str(BUILT / "vllm-034-default.log"))))
    got = {ln.split('phase="')[1].split('"')[0]: float(ln.rsplit(" ", 1)[1])
           for ln in lines["logwatch_phase_duration_seconds"].splitlines()}
    assert got == pytest.approx({"launching": 12.0, "loading_shards": 32.0,
                                 "autotune": 191.456, "allocating": 12.0, "cuda_graph": 25.544})


def test_dp_supervisor_launch_names_the_api_server_that_crashed():
    lines = (BUILT / "vllm-034-dp-supervisor.log").read_text().splitlines()[:9] + [
        "(APIServer_DP1 pid=101) ERROR 12-01 10:00:12 [launcher.py:299] OSError: [Errno 98] "
        "Address already in use"]
    st_ = feed(lines, "vllm").state
    assert st_.startups == 1 and st_.phase == "crashed" and st_.crash is not None
    assert (st_.crash.reason, st_.crash.rank) == ("port_in_use", "APIServer_DP1 pid=101")


def test_weights_format_without_a_download_leaves_no_downloading_span():
    """SGLang before 0.5.23 logs `Using model weights format` on every load: when the shard
    bar runs all the time until the next stamped line, nothing was downloaded."""
    lines = (BUILT / "sglang-0523-download.log").read_text().splitlines()
    end = next(i for i, x in enumerate(lines) if "Load weight end" in x)
    local = lines[:end] + [lines[end].replace("10:02:40", "10:00:40"),
                           "[2026-12-01 10:00:50] The server is fired up and ready to roll!"]
    st_ = feed(local, "sglang").state
    assert main_phases(st_) == ["launching", "loading_shards", "allocating", "ready"], st_.spans
    assert "downloading" not in st_.phases_seen
    assert st_.durations()["loading_shards"] == pytest.approx(31.0)   # 10:00:09 -> 10:00:40


def test_a_silent_sglang_download_has_the_download_stall_budget():
    """While the hub download prints nothing, the startup is in `downloading` (stall budget
    30 min), not in `loading_shards` (10 min): 15 silent minutes are no stall."""
    lines = (BUILT / "sglang-0523-download.log").read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if "Using model weights format" in x) + 2
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed("".join(x + "\n" for x in lines[:cut]).encode(), 1000.0)
    assert pipe.state.phase == "downloading"
    assert pipe.machine.tick(pipe.state, 1000.0 + 15 * 60) == []
    stalled = pipe.machine.tick(pipe.state, 1000.0 + 31 * 60)
    assert [type(e).__name__ for e in stalled] == ["Stalled"] and stalled[0].phase == "downloading"


@pytest.mark.parametrize("path", sorted(BUILT.glob("*.log")), ids=lambda p: p.name)
def test_built_startups_live_in_small_chunks_agree_with_replay(path: Path):
    """Fed 97 bytes at a time (lines cut anywhere), each built startup ends with the same
    spans, durations and verdict as its replay."""
    data = path.read_bytes()
    pipe = LogPipeline(choose_pack("auto", data))
    for i in range(0, len(data), 97):
        pipe.feed(data[i:i + 97], 1000.0)
    pipe.finish(1000.0)
    replayed = replay_file(str(path)).state
    assert [(s.phase, s.log_time, s.end_log, s.beside) for s in pipe.state.spans] == \
        [(s.phase, s.log_time, s.end_log, s.beside) for s in replayed.spans]
    assert pipe.state.durations() == replayed.durations()
    assert pipe.state.phase == replayed.phase


def test_a_new_startup_months_later_starts_its_own_clock():
    """The same log, a server started again eight months later: the new startup's stamps
    are its clock (a restart marker may start one), its durations are its own."""
    lines = [VL.format("01-05 10:00:00"), READY_AT.format("01-05 10:01:00"),
             VL.format("09-05 10:00:00"),
             "(EngineCore pid=1) INFO 09-05 10:00:30 [model_runner.py:412] Loading model from scratch...",
             READY_AT.format("09-05 10:02:00")]
    st_ = feed(lines, "vllm", year=2026).state
    assert st_.startups == 2 and st_.untrusted_stamps == 0
    assert st_.ready_in() == pytest.approx(120.0)
    assert st_.durations() == {"launching": 30.0, "loading_shards": 90.0}


def test_every_rank_reporting_its_download_time_reattributes_once():
    """vLLM TP2: both workers print `Time spent downloading weights`, the second a few
    seconds later (and once more after the weights loaded): one downloading span, no move
    back, the loading span intact."""
    w = "(Worker_TP{} pid=20{}) INFO 12-01 {} [weight_utils.py:568] Time spent downloading " \
        "weights for m: 143.200000 seconds"
    lines = [VL.format("12-01 10:00:00"),
             "(Worker_TP0 pid=200) INFO 12-01 10:00:08 [model_runner.py:412] Loading model from scratch...",
             w.format(0, 0, "10:02:31"), w.format(1, 1, "10:02:34"),
             "(Worker_TP0 pid=200) INFO 12-01 10:02:44 [default_loader.py:544] Loading weights took 13.00 seconds",
             "(Worker_TP0 pid=200) INFO 12-01 10:02:44 [model_runner.py:442] Model loading took 15.3 GiB memory and 156.01 seconds",
             w.format(1, 1, "10:02:45"),
             READY_AT.format("12-01 10:03:00")]
    st_ = feed(lines, "vllm").state
    assert main_phases(st_) == ["launching", "downloading", "loading_shards", "autotune", "ready"]
    assert st_.durations() == pytest.approx({"launching": 8.0, "downloading": 143.0,
                                             "loading_shards": 13.0, "autotune": 16.0})


def test_a_log_that_begins_with_a_download_time_is_not_a_crash_of_logwatch():
    line = "(EngineCore pid=1) INFO 12-01 10:02:31 [weight_utils.py:568] Time spent " \
           "downloading weights for m: 143.2 seconds"
    st_ = feed([line, READY_AT.format("12-01 10:03:00")], "vllm").state
    assert st_.phase == READY and main_phases(st_)[0] == "loading_shards"


def test_a_log_that_begins_with_an_unstamped_bar_keeps_the_log_clock():
    """A log (or an excerpt) whose first matched line is a tqdm frame without a stamp: that
    span opens before the log's clock has a stamp.  The spans after it are timed by their
    stamps all the same; before, the one unstamped span sent every duration to the wall
    clock, all 0.0 in a replay (all lines read at once), and vllm-208's 14 s of torch.compile
    (`Model loading took` 21:47:46 -> `Available KV cache memory` 21:48:00) read 0.0 s."""
    lines = ["Loading safetensors checkpoint shards:   0% Completed | 0/3 [00:00<?, ?it/s]",
             "Loading safetensors checkpoint shards: 100% Completed | 3/3 [00:01<00:00,  2.50it/s]",
             "(EngineCore_0 pid=1) INFO 10-26 21:47:45 [default_loader.py:267] Loading weights took 1.27 seconds",
             "(EngineCore_0 pid=1) INFO 10-26 21:47:46 [gpu_model_runner.py:1975] Model loading took 7.6785 GiB and 2.195456 seconds",
             "(EngineCore_0 pid=1) INFO 10-26 21:47:50 [backends.py:549] Dynamo bytecode transform time: 3.70 s",
             "(EngineCore_0 pid=1) INFO 10-26 21:48:00 [gpu_worker.py:276] Available KV cache memory: 18.38 GiB"]
    st_ = feed(lines, "vllm").state
    assert main_phases(st_) == ["loading_shards", "autotune", "allocating"]
    assert st_.durations() == {"loading_shards": 0.0, "autotune": 14.0, "allocating": 0.0}
    # vllm-208: the compile to its `torch.compile takes` (21:47:59), then the profiling run
    # (allocating; before helper adv94 `takes` kept autotune: 14 s and 0 s)
    d208 = replay_file(str(FIXTURES / "vllm-208.log")).state.durations()
    assert (d208["autotune"], d208["allocating"]) == (13.0, 1.0)
    # read as it was written: the unstamped span keeps the time it took on the wall clock
    pipe = LogPipeline(load_pack("vllm"))
    for line, now in zip(lines, (1000.0, 1001.0, 1001.5, 1002.5, 1006.5, 1016.5)):
        pipe.feed((line + "\n").encode(), now)
    assert pipe.state.durations() == {"loading_shards": 2.5, "autotune": 14.0, "allocating": 0.0}


@pytest.mark.parametrize("engine, lines", [
    ("sglang", ["usage: launch_server.py [-h] --model-path MODEL_PATH",
                "launch_server.py: error: unrecognized arguments: --tp-szie 8"]),
    ("sglang", ["[2026-12-01 11:00:00] ERROR:    [Errno 98] error while attempting to bind on "
                "address ('0.0.0.0', 30000): address already in use"]),
    ("vllm", ["vllm serve: error: argument --max-model-len: invalid human_readable_int value: "
              "'abc'"]),
])
def test_a_relaunch_that_dies_before_its_launch_line_is_not_the_server_s_crash(
        engine: str, lines: list[str]):
    """A launch appended (`>>`) to the log of a server that was ready (still serving, or
    killed without a word) dies at once: argparse refuses its command line, or its port is
    the serving server's.  Only a launch prints such a line (the rule's `launch_only`): a new
    startup that crashed in launching, the ready one left ready.  Before: "crashed:
    bad_argument during ready", a crash page for the server that served."""
    ready = (BUILT / ("sglang-0523-download.log" if engine == "sglang"
                      else "vllm-034-default.log")).read_text().splitlines()
    st_ = feed(ready, engine).state
    assert st_.phase == READY and st_.startups == 1
    st_ = feed(ready + lines, engine).state
    assert (st_.startups, st_.phase) == (2, "crashed")
    assert st_.crash is not None and st_.crash.during == "launching", st_.crash
    assert feed(["x: error: unrecognized arguments: --y"], engine).state.phase == "crashed"


@pytest.mark.parametrize("engine, log", [
    ("sglang", "sglang-0523-download.log"), ("vllm", "vllm-034-default.log")])
def test_a_wrapper_s_download_before_the_server_is_one_startup(engine: str, log: str):
    """An entrypoint script that downloads the model, then starts the server
    (`huggingface-cli download M && vllm serve M`; trtllm-012's README wrapper): its hub bar
    begins a startup in downloading, and the server's launch line that follows begins the
    server in it (the pack's `prelaunch`): one startup, no `Restarted` (before: 2 startups
    and a `restarted` alert on every such launch)."""
    lines = ["Downloading Hugging Face model: Qwen/Qwen3-32B...",
             "Fetching 37 files: 100%|██████████| 37/37 [00:40<00:00,  1.09s/it]",
             "Starting the server..."] + (BUILT / log).read_text().splitlines()
    pipe = LogPipeline(load_pack(engine))
    events = pipe.feed(("\n".join(lines) + "\n").encode(), time.time())
    events += pipe.finish(time.time())
    st_ = pipe.state
    assert (st_.startups, st_.phase) == (1, READY), (st_.startups, st_.phase)
    assert not [e for e in events if type(e).__name__ == "Restarted"]
    assert st_.phases_seen[:2] == ["downloading", "launching"]
    # a launch line after a startup that printed its own is a relaunch, as before
    twice = lines + (BUILT / log).read_text().splitlines()
    assert feed(twice, engine).state.startups == 2


# -- a silence after a bar, read live -----------------------------------------------------------

GAP_AFTER_BAR = [   # (read at, line): SGLang 0.5.x, the shards loaded, then 3 h of nothing
    (0, "[2026-12-04 10:00:00] server_args={'model_path': 'Qwen/Qwen3-32B', 'tp_size': 2}"),
    (9, "[2026-12-04 10:00:09 TP0] Load weight begin. avail mem=138.92 GB"),
    (9, "[2026-12-04 10:00:09 TP0] Using model weights format ['*.safetensors']"),
    (9, "Loading safetensors checkpoint shards:   0% Completed | 0/17 [00:00<?, ?it/s]"),
    (23, "Loading safetensors checkpoint shards:  47% Completed | 8/17 [00:14<00:16,  0.56it/s]"),
    (39, "Loading safetensors checkpoint shards: 100% Completed | 17/17 [00:30<00:00,  0.56it/s]"),
    (10960, "[2026-12-04 13:02:40 TP0] Load weight end. elapsed=151.20 s, type=Qwen3ForCausalLM"),
    (10961, "[2026-12-04 13:02:41 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1105920"),
]


@pytest.mark.parametrize("live", [True, False])
def test_a_silence_after_a_bar_read_live_is_the_bar_phase(live: bool):
    """The shards loaded in 30 s, then a rank stuck for 3 h before `Load weight end`.  Read
    as it was written, our clock saw the bar begin right after the download's line: the 3 h
    were loading_shards' (as the stall alert said), not a download's (the ledger and the
    ready alert said `slowest phase: downloading 3h`).  Read at once (replay), nothing says
    where the unseen time went: the download's, as before."""
    pipe = LogPipeline(load_pack("sglang"), year=2026)
    for at, line in GAP_AFTER_BAR:
        pipe.feed((line + "\n").encode(), 1_000.0 + (at if live else 20_000))
    d = pipe.state.durations()
    if live:
        assert "downloading" not in d and d["loading_shards"] == pytest.approx(10951, abs=2), d
    else:
        assert d["downloading"] == pytest.approx(10921, abs=2) and d["loading_shards"] == \
            pytest.approx(30, abs=2), d


def test_a_line_read_late_after_a_bar_is_put_back_to_when_it_was_written():
    """A real 3 h download, the bar's 30 s read live, then the next lines read 1 h late (an
    SSH outage): the hour they waited is no time of the bar's (the second pass on the rule
    above: loading_shards 1h00m31s, the download 2 h)."""
    lines = GAP_AFTER_BAR[:3] + [(10800 + at, line) for at, line in GAP_AFTER_BAR[3:6]] + [
        (3600 + 10840, "[2026-12-04 13:00:40 TP0] Load weight end. elapsed=151.20 s, type=Q"),
        (3600 + 10841, "[2026-12-04 13:00:41 TP0] KV Cache is allocated. dtype: torch.bfloat16")]
    pipe = LogPipeline(load_pack("sglang"), year=2026)
    for at, line in lines:
        pipe.feed((line + "\n").encode(), 1_000.0 + at)
    d = pipe.state.durations()
    assert d["downloading"] == pytest.approx(10800, abs=2), d
    assert d["loading_shards"] == pytest.approx(31, abs=2), d


def test_an_mtime_days_before_the_lines_is_no_year_change():
    """A file restored with `touch -d` (or from an archive) whose mtime is a few days before
    its lines: still their year (the rule above dated it a year early)."""
    lines = [VL.format("12-01 10:00:00"), READY_AT.format("12-01 10:01:00")]
    st_ = feed_written(lines, calendar.timegm((2026, 11, 25, 12, 0, 0))).state
    assert st_.spans[0].log_time == calendar.timegm((2026, 12, 1, 10, 0, 0))


def test_a_given_year_is_the_year():
    """`year=` (a caller that knows it) is not moved by today's date."""
    st_ = feed(["(APIServer pid=100) INFO 12-20 10:00:00 [startup.py:18] vLLM server version "
                "0.34.0, serving model m"], "vllm", year=2026).state
    assert st_.spans[0].log_time == calendar.timegm((2026, 12, 20, 10, 0, 0))


def test_a_log_on_a_socket_is_dated_by_now_not_1969():
    """stdin a socket (its fstat's mtime 0): dated 1969-12-01 before; now it is now's year."""
    import socket
    from logwatch.app.replay import replay_stream
    a, b = socket.socketpair()
    with a, b:
        b.sendall((VL.format("12-01 10:00:00") + "\n").encode())
        b.shutdown(socket.SHUT_WR)
        with a.makefile("rb") as f:
            st_ = replay_stream(f, load_pack("vllm")).state
    assert time.gmtime(st_.spans[0].log_time).tm_year >= 2026


def test_sglang_hicache_host_pool_after_the_capture_is_allocating():
    """`--enable-hierarchical-cache`: the scheduler pins its host pool after the capture
    (0.5.23 managers/scheduler.py: `init_model_worker`, then `build_kv_cache`).  Before, the
    78 s of pinning 200 GB were the capture's: cuda_graph 1m35s for a 12 s capture."""
    st_ = replay("sglang-0523-hicache.log")
    assert main_phases(st_) == ["launching", "loading_shards", "allocating", "cuda_graph",
                                "allocating", "ready"]
    d = st_.durations()
    assert d["cuda_graph"] == 12.0 and d["allocating"] == 3.0 + 83.0, d
    assert st_.ready_in() == pytest.approx(138.0)


def test_sglang_hicache_host_pool_too_big_crashes_while_allocating_not_capturing():
    """`Not enough host memory available ... reduce the size of the hierarchical cache`
    (mem_cache/pool_host/base.py:252), raised after the capture ended: before, `during
    cuda_graph`."""
    st_ = replay("sglang-0523-hicache-host-oom.log")
    assert st_.phase == "crashed" and st_.crash is not None
    assert st_.crash.during == "allocating", st_.crash
    assert st_.crash.line.startswith("ValueError: Not enough host memory available.")


def test_sglang_pipeline_stages_move_the_startup_when_the_slowest_does():
    """`--pp-size 2 --tp 4`: stage 1 (`PP1 TP0`..) reads its layers 20 s longer, and every
    rank waits for it before the KV cache is sized (0.5.23 kv_cache_configurator.py:3003, a
    minimum over the world group).  Before, stage 0's `Load weight end.` moved the startup
    on: loading 1m20s (truth 1m40s), allocating 23 s (truth 3 s)."""
    st_ = replay("sglang-0523-pp2.log")
    assert main_phases(st_) == ["launching", "loading_shards", "allocating", "cuda_graph",
                                "ready"]
    d = st_.durations()
    assert d["loading_shards"] == 100.0 and d["allocating"] == 3.0, d


def test_sglang_last_pipeline_stage_oom_is_the_startup_s_crash_while_loading():
    """Stage 1 (the lm_head) runs out of memory while it loads, stage 0 loaded and waits:
    the startup never left loading (before: `launching > loading_shards > allocating`)."""
    st_ = replay("sglang-0523-pp2-last-stage-oom.log")
    assert st_.crash is not None and st_.crash.reason == "cuda_oom"
    assert st_.crash.during == "loading_shards"
    assert main_phases(st_) == ["launching", "loading_shards", "crashed"]


def test_sglang_deepgemm_jit_inside_the_capture_is_autotune():
    """DeepEP + DeepGEMM (DeepSeek-V3, TP8 EP8): the JIT pre-compile runs at the capture's
    first batch (0.5.23 compile_utils.py `_deep_gemm_execution_hook`), 11m45s of the 11m49s
    from `Capture cuda graph begin.` to its end.  Before, all of it read cuda_graph (11m56s)."""
    st_ = replay("sglang-0523-deepep-deepgemm.log")
    assert main_phases(st_) == ["launching", "loading_shards", "allocating", "cuda_graph",
                                "autotune", "cuda_graph", "ready"]
    d = st_.durations()
    assert close(d["autotune"], 707.0) and d["cuda_graph"] < 15.0, d
    assert st_.ready_in() == pytest.approx(971.0)


def test_sglang_deepgemm_without_nvcc_is_a_kernel_compile_failure():
    """sgl-deep-gemm's `NVCC compiler is not executable` (an image without the CUDA toolkit)
    raised inside the capture: before, `cuda_graph_capture_failed during cuda_graph`."""
    st_ = replay("sglang-0523-deepgemm-no-nvcc.log")
    assert st_.crash is not None
    assert (st_.crash.reason, st_.crash.during) == ("kernel_compile_failed", "autotune")


def test_a_span_opened_by_a_bar_placed_after_the_last_stamp_shows_no_stamp():
    """The capture bar after DeepGEMM's compile carries the last stamp (10:13:41, the last
    `Try DeepGEMM JIT Compiling`), but its frames place it at +16m03s: before, the timeline
    showed `cuda_graph 2026-12-01 10:13:41 +16m03s`.  A bar at its carried stamp keeps it."""
    rows = timeline(pipeline_view("x", replay_file(str(BUILT / "sglang-0523-deepep-deepgemm.log"))))
    capture = [r.split() for r in rows.splitlines() if r.split()[:1] == ["cuda_graph"]]
    assert [r[1] for r in capture] == ["2026-12-01", "-"], rows
    assert capture[1][2] == "+16m03s", rows
    lines = (BUILT / "sglang-0523-download.log").read_text().splitlines()
    lines = [x for x in lines if "CUDA graph begin" not in x]   # the bar opens it
    rows = timeline(pipeline_view("y", feed(lines, "sglang")))
    assert "cuda_graph      2026-12-01 10:03:42" in rows, rows


_STAMPS = ["2026-11-30 10:00:11", "2026-11-30 10:00:11.5", "2026-11-30 23:59:59",
           "2026-12-01 00:00:01", "1999-01-01 10:00:11", "10:00:11", "00:00:02",
           "2026-02-29 10:00:00", "2027-01-01 10:00:11"]


@given(st.lists(st.tuples(st.sampled_from(_STAMPS), st.sampled_from(["", " TP0", " TP3"])),
                max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_stamp_taken_again_for_its_fields_is_what_reading_it_afresh_gives(
        lines: list[tuple[str, str]]) -> None:
    """Another rank's line in the same second is the last stamp again (`LogClock._stamped`
    keeps the fields it came from): the same as computing it, after an outlier year, a
    time-only stamp, midnight, an invalid date."""
    from logwatch.rules.pack import load_pack
    from logwatch.rules.timestamps import LogClock
    formats = load_pack("sglang").timestamps
    kept, fresh = LogClock(formats, 2026), LogClock(formats, 2026)
    for stamp, rank in lines:
        line = f"[{stamp}{rank}] Load weight begin."
        fresh._fields = None      # every stamp computed from its fields
        a, b = kept.stamp(line), fresh.stamp(line)
        assert (a is None) == (b is None)
        assert a is None or b is None or (a.seconds, a.text, a.own) == (b.seconds, b.text, b.own)


def test_sglang_tp_memory_imbalance_is_a_gpu_memory_shortfall():
    """`--tp 2` with another process holding memory on GPU 1: the rank whose GPU has more
    free memory than the group's minimum / 0.9 refuses to start (0.5.23 bootstrap.py:450,
    0.4's model_runner.py `init_torch_distributed`).  Read as vLLM 0.11's free-memory refusal
    is: cuda_oom; before, python_exception."""
    st_ = replay("sglang-0523-tp-memory-unbalanced.log")
    assert st_.crash is not None
    assert (st_.crash.reason, st_.crash.during) == ("cuda_oom", "launching"), st_.crash
    assert st_.crash.line.startswith("RuntimeError: The memory capacity is unbalanced.")


def test_the_total_is_the_startup_s_wall_time_whatever_comes_after_ready():
    """A LoRA adapter that fails to load 1m27s after ready (vLLM 0.34, its worker's and
    engine core's tracebacks): the startup's total is still launch to ready.  Before, ready's
    span counted on to the last line, `total 6m10s` for a startup ready at 4m33s (the
    timeline's last row, /api/status `total_seconds`, the page)."""
    st_ = replay("vllm-034-lora-load-fail.log")
    assert st_.ready_in() == pytest.approx(273.0)
    assert st_.total() == pytest.approx(273.0)
    rows = timeline(pipeline_view("x", replay_file(str(BUILT / "vllm-034-lora-load-fail.log"))))
    assert "(total 4m33s" in rows, rows


def test_the_first_replica_s_bar_begun_before_the_others_is_one_of_the_bars():
    """SGLang `--dp 2`: DP0 prints its first shard frame before DP1's `Load weight begin.`
    (each DP replica's rank 0 draws its own bar).  That frame was read while one replica had
    begun, as the only bar; DP1's frames then began the bars read apart, and DP0's end
    continued DP1's: `5/5`, 0 s left in the load, while DP1 loaded 40 s more (built
    sglang-0523-dp2: 21 s read at 39 s, 39 s true).  Now DP0's bar is one of them: after its
    end the count is DP1's, 0/5, then its frames' rate times the load."""
    stamp = "[2026-12-01 10:00:{:02d}{}] {}"
    lines = [(0, stamp.format(0, "", "server_args={'model_path': 'Qwen/Qwen3-8B', "
                                     "'dp_size': 2, 'port': 30000}")),
             (3, stamp.format(3, " DP0", "Init parallel begin.")),
             (3, stamp.format(3, " DP1", "Init parallel begin.")),
             (6, stamp.format(6, " DP0", "Load weight begin. avail mem=78.92 GB")),
             (6, "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]"),
             (6, stamp.format(6, " DP1", "Load weight begin. avail mem=78.92 GB")),
             (6, "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]"),
             (16, "Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:10<00:00,  "
                  "0.50it/s]"),
             (16, stamp.format(16, " DP0", "Load weight end. elapsed=10.00 s, "
                                           "type=Qwen3ForCausalLM, avail mem=62.61 GB, "
                                           "mem usage=16.31 GB.")),
             (26, "Loading safetensors checkpoint shards:  20% Completed | 1/5 [00:20<01:20,  "
                  "0.05it/s]")]
    pipe = LogPipeline(load_pack("sglang"))
    shown = {}
    for t, x in lines:
        pipe.feed((x + "\n").encode(), 1000.0 + t)
        v = pipeline_view("x", pipe, 1000.0 + t)
        shown[t] = (v.shards.loaded if v.shards else None, v.eta_seconds)
    assert pipe.state.phase == "loading_shards"
    assert shown[16][0] == 0 and shown[26][0] == 1
    # at DP1's frame, its 4 shards left at 0.05/s: 80 s, with the phases after
    assert shown[26][1] is not None and shown[26][1] >= 80.0
    bar = pipe.state.progress["shards"]
    assert (bar.current, bar.total) == (1, 5)
