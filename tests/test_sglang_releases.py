"""Older SGLang releases a fleet still runs (0.4.6, 0.4.10, 0.5.1, 0.5.8, 0.5.10, 0.5.17:
tests/inventory/), as a user meets them: whole startups built from the release's own
statements in its order (tests/fixtures/built/README.md).  Each test is one finding of
scoring the packs against those releases' source: the verdict logwatch gave before, and the
truth."""

from __future__ import annotations

import calendar
import re
import time

import pytest

from conftest import FIXTURES
from logwatch.app.replay import replay_file
from logwatch.eta import startup_eta
from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack

BUILT = FIXTURES / "built"
STAMP = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
EAGLE = "sglang-0510-eagle-fastsafetensors.log"
READY_AT = float(calendar.timegm((2026, 3, 2, 10, 1, 43)))   # EAGLE's ready line


def fed_until(name: str, marker: str) -> tuple[LogPipeline, float]:
    """A pipeline fed a built SGLang log up to the first line holding `marker`, and the
    stamp it had reached (a bar has none: the last record's)."""
    pipe, t = LogPipeline(load_pack("sglang")), 0.0
    for line in (BUILT / name).read_text().splitlines(keepends=True):
        m = STAMP.search(line)
        if m:
            t = float(calendar.timegm(tuple(int(g) for g in m.groups())))
        pipe.feed(line.encode(), t)
        if marker in line:
            return pipe, t
    raise AssertionError(marker)


def test_the_pool_too_small_assertion_is_a_kv_cache_too_small():
    """The scheduler's `assert max_req_len > 0, "Memory pool size is too small"` (0.5.10
    managers/tp_worker.py:306, 0.5.23 :425): the KV pool holds no room for one request.
    Before: `python_exception`, an engine bug to the operator; the memory split is what
    is wrong (the `kv_cache_too_small` fix: raise --mem-fraction-static)."""
    st = replay_file(str(BUILT / "sglang-0510-pool-too-small.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("kv_cache_too_small", "allocating"), st.crash
    assert st.crash.line == "AssertionError: Memory pool size is too small"


def test_sglang_s_fastsafetensors_bar_is_the_loading_s_progress():
    """`--load-format fastsafetensors`, TP2: SGLang's own bar (0.5.10 :764 to 0.5.23 :1306
    model_loader/weight_utils.py), one step per batch of world-size files: 9 for
    Qwen3-32B's 17.  Before: no rule, no progress while loading, and a first start's ETA of
    the typical load (220 s at 4 of 9; 120 s now)."""
    pipe, t = fed_until(EAGLE, "| 4/9 [")
    assert pipe.state.phase == "loading_shards"
    bar = pipe.state.progress["file_batches"]
    assert (bar.current, bar.total) == (4, 9) and "shards" not in pipe.state.progress
    assert startup_eta(pipe.pack, pipe.state, t, {}) < 150


def test_an_eagle_draft_s_capture_is_capture_work_again():
    """0.5.10 builds the EAGLE draft after the target's whole init (managers/scheduler.py
    `init_model_worker`): the target's `Capture cuda graph end.`, then the draft's weights
    and `Capture draft cuda graph begin.` (speculative/eagle_worker.py:250), 21 s of
    capture.  Before: no rule read that begin, so the machine held the capture's work done
    (`phase_done`: a crash there got no capture default) through the draft's capture."""
    pipe, _ = fed_until(EAGLE, "TP1] Capture draft cuda graph begin.")
    assert pipe.state.phase == "cuda_graph" and not pipe.state.phase_done
    st = replay_file(str(BUILT / EAGLE)).state
    assert st.phase == "ready" and st.startups == 1


def test_0_5_8_s_two_line_scheduler_death_with_exit_code_minus_9_is_the_oom_killer():
    """0.5.8 reports a scheduler that died during init in two lines (entrypoints/engine.py:850
    `Rank 0 scheduler is dead. Please check if there are relevant logs.`, :853 `Exit code:
    -9`), then the EOFError of its pipe; 0.5.10 and later say it in one line, naming the OOM
    killer.  Before: `child_process_died` (nothing says why); -9 is SIGKILL, the kernel's
    OOM killer (a 32B checkpoint read on a host short of RAM)."""
    st = replay_file(str(BUILT / "sglang-058-load-oom-killed.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("host_oom_killed", "loading_shards"), st.crash
    assert st.crash.line == "[2026-02-10 10:00:23] Exit code: -9"
    assert st.phases_seen == ["launching", "loading_shards", "crashed"]


DRAFT_OOM = "sglang-0510-eagle-draft-oom.log"


def test_an_eagle_draft_s_load_after_the_capture_is_loading_again():
    """0.5.10 loads the draft's weights after the target's capture (each rank's own second
    `Load weight begin.`, after its `Capture cuda graph end.`): loading again, named
    `(draft model)` as 0.5.23's draft row is, then the draft's KV pool and capture.  Before:
    the load was capture (cuda_graph 53 s, phase `cuda_graph` while its shards loaded)."""
    pipe, _ = fed_until(EAGLE, "| 0/1 [")
    assert pipe.state.phase == "loading_shards"
    st = replay_file(str(BUILT / EAGLE)).state
    rows = [(sp.phase, sp.label, sp.end_log - sp.log_time) for sp in st.spans
            if sp.end_log is not None and sp.log_time is not None]
    assert rows[3:-1] == [("cuda_graph", "", 13.0), ("loading_shards", "draft model", 2.0),
                        ("allocating", "", 1.0), ("cuda_graph", "", 37.0)], rows
    assert st.durations()["cuda_graph"] == 50.0 and st.ready_in() == 103.0


def test_a_first_start_eta_in_the_draft_s_pass_comes_from_the_target_s_pass():
    """No history (the pack's `typical_seconds`): in the draft's second pass the default
    less what the target's pass spent was counted for each phase, and autotune's 30 s
    too, a phase both passes went without.  Before: 168 s at the draft's first bar frame
    and 85 s at its `Load weight begin.` (the target's finished bar read as the draft's
    load done), where 40 s were left; now the target's own times (loading 37 s, allocating
    2 s, capture 13 s): 52 s."""
    for marker in ("TP1] Load weight begin. avail mem=20.49", "| 0/1 ["):
        pipe, now = fed_until(EAGLE, marker)
        entered = pipe.state.phase_entered
        assert entered is not None and (entered.phase, entered.label) == ("loading_shards",
                                                                          "draft model")
        left = READY_AT - now
        assert abs(startup_eta(pipe.pack, pipe.state, now, {}) - left) <= 15, marker


def test_a_draft_s_capture_is_guessed_from_the_target_s_capture():
    """At the draft's `Capture draft cuda graph begin.` a first start guessed the pack's
    capture default less the target's 13 s (47 s); a second pass's phase is now guessed
    from its first pass, counted down from its own span's start (13 s, then 8 s 5 s on).
    Here that is short (this draft's capture, EAGLE's steps and its extend graph, took
    37 s), as it is long for the draft's load (37 s guessed, 2 s taken): both are this
    startup's own evidence, and the draft's capture bar takes over at its first frame."""
    pipe, now = fed_until(EAGLE, "TP1] Capture draft cuda graph begin.")
    assert startup_eta(pipe.pack, pipe.state, now, {}) == 13.0
    assert startup_eta(pipe.pack, pipe.state, now + 5, {}) == 8.0


def test_a_draft_s_extend_capture_after_its_capture_s_end_is_not_0_s_left():
    """0.5.10's EAGLE worker captures the draft's graphs, then its extend graphs
    (speculative/eagle_worker.py:250, :265), each between its own begin and end lines: the
    extend capture's begin is the capture's work begun again, 12 s of it, with no bar.
    Before: the draft capture's finished bar was the phase's clock through the extend
    capture, 16 s before ready: 0 s left read as the lines came (`watch`), 6 s here (its
    frames fed at the last stamp: a bar late); now the first pass's capture (13 s), counted
    down from that begin."""
    pipe, now = fed_until(EAGLE, "TP1] Capture draft extend cuda graph begin.")
    assert READY_AT - now == 16.0
    assert startup_eta(pipe.pack, pipe.state, now, {}) == 13.0
    assert startup_eta(pipe.pack, pipe.state, now + 6, {}) == 7.0


def test_a_first_start_eta_at_the_target_s_last_capture_frame_counts_the_draft_s_pass():
    """`speculative_algorithm='EAGLE'` in the launch's server_args: 0.5.10 loads and captures
    the draft after the target's capture (the pack's `drafts:`).  Before: 0 s left at the
    target's `10/10` frame, 43 s before ready; now the target's own load, KV pool and
    capture times again (39 s).  0.5.23's EAGLE3 loads its draft inside the first pass, and
    its ETA at the same point counts no second pass."""
    pipe, now = fed_live(EAGLE, "| 10/10 [")
    left = READY_AT - now
    assert pipe.state.phase == "cuda_graph" and left == 43.0
    assert abs(startup_eta(pipe.pack, pipe.state, now, {}) - left) <= 10
    pipe, now = fed_live("sglang-0523-eagle3.log", "| 52/52 [")
    assert startup_eta(pipe.pack, pipe.state, now, {}) < 30


def fed_live(name: str, marker: str) -> tuple[LogPipeline, float]:
    """`fed_until` as `watch` meets the log: each line at the time it was written, a bar
    frame's too (the time its own elapsed field places it at: the pipeline's
    `last_log_time` of a first read), not the last stamp's."""
    lines = (BUILT / name).read_text().splitlines(keepends=True)
    first, times = LogPipeline(load_pack("sglang")), []
    for line in lines:
        first.feed(line.encode(), 0.0)
        times.append(first.state.last_log_time or 0.0)
    pipe = LogPipeline(load_pack("sglang"))
    for line, t in zip(lines, times):
        pipe.feed(line.encode(), t)
        if marker in line:
            return pipe, t
    raise AssertionError(marker)


def test_a_crash_in_the_draft_s_load_is_during_loading():
    """The draft's weights run the GPU out of memory (`--mem-fraction-static 0.95` left
    1.5 GB after the target's capture): its traceback's `load_model` frame says where, and so
    does the timeline now (a `(draft model)` row up to the crash); the scheduler killed by the
    kernel there instead (0.5.10 entrypoints/engine.py:1186) says nothing of where: before,
    `host_oom_killed during cuda_graph`, the capture's advice for a load's failure."""
    st = replay_file(str(BUILT / DRAFT_OOM)).state
    assert st.crash is not None and (st.crash.reason, st.crash.during) == ("cuda_oom",
                                                                          "loading_shards")
    assert [(sp.phase, sp.label) for sp in st.spans][-2:] == [("loading_shards", "draft model"),
                                                             ("crashed", "")]
    lines = (BUILT / DRAFT_OOM).read_text().splitlines(keepends=True)
    cut = next(i for i, x in enumerate(lines) if "TP1] Load weight begin. avail mem=1.54" in x)
    killed = lines[:cut + 1] + [
        "[2026-03-02 10:01:10] Rank 0 scheduler died during initialization (exit code: -9). "
        "If exit code is -9 (SIGKILL), a common cause is the OS OOM killer.\n"]
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed("".join(killed).encode(), 0.0)
    pipe.finish(0.0)
    crash = pipe.state.crash
    assert crash is not None and (crash.reason, crash.during) == ("host_oom_killed",
                                                                  "loading_shards")


def _dp2(lines: list[str]) -> list[str]:
    """The TP2 log as `--dp 2` (tp 1 each): TP1's lines DP1's, 8 s later; a bar stays after
    the stamped line before it; in stamp order."""
    out, t = [], ""
    for i, line in enumerate(lines):
        m = STAMP.search(line)
        if m:
            stamp = calendar.timegm(tuple(int(g) for g in m.groups()))
            dp = "DP1" if " TP1]" in line else "DP0"
            stamp += 8 if dp == "DP1" else 0
            t = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
            tag = f" {dp} TP0" if " TP" in line[:26] else ""
            line = re.sub(r"^\[[^\]]*?(?: TP\d)?\]", f"[{t}{tag}]", line)
        out.append((t, i, line))
    return [x[2] for x in sorted(out)]


def test_a_replica_s_draft_waits_for_the_slowest_replica_s_capture():
    """`--dp 2`, DP1 8 s behind: DP0's draft loads while DP1 still captures the target's
    graphs; the startup is where the slowest replica is (pack `replicas:`), so cuda_graph
    until DP1's capture ends, then DP1's draft load.  (Checked while writing this: moving at
    DP0's draft read loading 7 s early; letting `reenter` act there dropped the capture span.)"""
    lines = _dp2((BUILT / EAGLE).read_text().splitlines(keepends=True))
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed("".join(lines).encode(), 0.0)
    pipe.finish(0.0)
    rows = [(sp.phase, sp.label, sp.end_log - sp.log_time) for sp in pipe.state.spans
            if sp.end_log is not None and sp.log_time is not None]
    assert rows[3:-1] == [("cuda_graph", "", 13.0), ("loading_shards", "draft model", 2.0),
                          ("allocating", "", 1.0), ("cuda_graph", "", 29.0)], rows


DP_ATTN = "sglang-0410-dp-attention-deepgemm.log"
TP8_051 = "sglang-051-tp8-deepgemm.log"

# DeepSeek-V3 starts whose DeepGEMM JIT compile runs inside the capture's first batch, from
# its hub id, weights cached.  name -> (log, ready in, autotune and cuda_graph seconds, the
# deepgemm bar's frame to stop at and its k/N, a line of the capture after it, whether the
# capture's bar replaces the bare one: 0.5.1's is named and stays, done, beside it)
DEEPGEMM_IN_CAPTURE: dict[str, tuple[str, float, tuple[float, float], str, tuple[int, int],
                                     str, bool]] = {
    # 0.4.10.post2, `--tp 8 --dp 8 --enable-dp-attention`: every rank tagged `DP3 TP3`
    # (managers/scheduler.py:2504), one model (not 8 replicas: `replicas: unless
    # enable_dp_attention`); `Using model weights format` after `Load weight begin.` on every
    # rank (weight_utils.py:274: a hub check, 4 s, part of the load: it was `downloading
    # 4.0s`, see the test below); 5 shapes in 12 min, each shape's configs compiled under
    # `thread_map` (deep_gemm_wrapper/compile_utils.py:297), a bar with no description on
    # every rank.  Before: no rule, no progress through the 12 minutes; now the autotune's
    # `deepgemm` progress.  The capture bar's bare first frame (cuda_graph_runner.py:468,
    # before `set_description`) is not it.
    "0.4.10-dp-attention": (DP_ATTN, 920.0, (728.0, 11.0), "| 110/221 [", (110, 221),
                            "  0%|          | 0/19 [", True),
    # 0.5.1.post3 (tests/inventory/sglang-0.5.1.post3.yaml), `--tp 8`: 0.4.10's order and words,
    # but 0.5.4's DeepGEMM JIT: only the node's first rank compiles
    # (layers/quantization/deep_gemm_wrapper/compile_utils.py:58 `_DO_COMPILE_ALL =
    # _IS_FIRST_RANK_ON_NODE`; in 0.4.10 every rank did), TP0's `Try DeepGEMM JIT Compiling
    # for` and one `DeepGEMM warmup` bar per shape over every M (:136, 16384 steps) while
    # TP1-TP7 wait in the capture's barrier, silent for 12 minutes.  The packs of 2c398a8
    # read it so already (held: no change).
    "0.5.1-first-rank-compiles": (TP8_051, 901.0, (711.0, 9.0), "| 8192/16384 [",
                                  (8192, 16384), "Capturing batches (bs=1 ", False),
}


@pytest.mark.parametrize("case", sorted(DEEPGEMM_IN_CAPTURE))
def test_a_deepgemm_compile_inside_the_capture_is_autotune_with_its_bar(case: str) -> None:
    """The compile is autotune inside the capture (its bar the `deepgemm` progress), the
    capture's last frame and `Capture cuda graph end.` cuda_graph; no download."""
    log, ready_in, (autotune, capture), bar_at, (k, n), capture_at, cleared = \
        DEEPGEMM_IN_CAPTURE[case]
    st = replay_file(str(BUILT / log)).state
    assert st.crash is None and st.startups == 1 and st.ready_in() == ready_in
    assert [sp.phase for sp in st.spans if not sp.beside] == [
        "launching", "loading_shards", "allocating", "cuda_graph", "autotune",
        "cuda_graph", "ready"]
    d = st.durations()
    assert "downloading" not in d and (d["loading_shards"], d["allocating"]) == (164.0, 5.0), d
    assert (d["autotune"], d["cuda_graph"]) == (autotune, capture), d
    assert (st.progress["shards"].current, st.progress["shards"].total) == (163, 163)
    pipe, _ = fed_until(log, bar_at)
    assert pipe.state.phase == "autotune"
    bar = pipe.state.progress["deepgemm"]
    assert (bar.current, bar.total) == (k, n)
    pipe, _ = fed_until(log, capture_at)
    assert pipe.state.phase == "cuda_graph"
    assert ("deepgemm" not in pipe.state.progress) == cleared


def test_0_5_1_s_quantization_without_vllm_is_a_missing_module_not_the_checkpoint():
    """SGLang 0.4.x .. 0.5.x run nine quantization methods on vLLM's operators; in an image
    without vllm the weights' load refuses the checkpoint's method: `ValueError: aqlm
    quantization requires some operators from vllm. Please install vllm by ...` (0.5.1.post3
    layers/quantization/__init__.py:131, via model_loader/weight_utils.py:139
    `get_quant_config`), then `Import error: No module named 'vllm'`, in the scheduler's
    traceback.  The checkpoint is fine; the image lacks a module.  Before: `weight_loading_error
    during loading_shards` (the load phase read the generic ValueError as the checkpoint's)."""
    st = replay_file(str(BUILT / "sglang-051-aqlm-no-vllm.log")).state
    assert st.crash is not None and st.startups == 1
    assert (st.crash.reason, st.crash.during) == ("import_error", "loading_shards"), st.crash
    assert st.crash.line.startswith("ValueError: aqlm quantization requires some operators from vllm.")


def _ready_at(name: str) -> float:
    """The stamp of a built log's ready line (its truth: the time left is up to it)."""
    ready = [sp for sp in replay_file(str(BUILT / name)).state.spans if sp.phase == "ready"]
    assert ready and ready[0].log_time is not None
    return ready[0].log_time


@pytest.mark.parametrize("name, marker", [(DP_ATTN, "| 110/221 ["),
                                          (TP8_051, "| 8192/16384 ["),
                                          ("sglang-0523-deepep-deepgemm.log", "2048/4096 [")])
def test_a_first_start_eta_in_a_deepgemm_compile_is_the_engine_s_own_typical(name, marker):
    """No history: the DeepGEMM JIT compile's first shape, half-way.  Its bar times that
    shape alone, and how many follow is in no line (each compiles at its GEMM's first
    forward: compile_utils.py `_deep_gemm_execution_hook`); the engine's `Entering DeepGEMM
    JIT Pre-Compile session` says `typically 10-20 mins` (the rule's `typical: 15m`).
    Before: 88 s (the bar's 70 s and the capture's default) where 11 minutes were left;
    now 15 minutes less the compile's time so far, and the capture's."""
    pipe, now = fed_until(name, marker)
    assert pipe.state.phase == "autotune"
    left, eta = _ready_at(name) - now, startup_eta(pipe.pack, pipe.state, now, {})
    assert left > 600 and 0.6 * left <= eta <= 1.5 * left, (eta, left)


def hub_start(init_end: str, bars: int) -> list[str]:
    """A TP1 start from a hub id in 0.4.10.post2's order (model_runner.py: distributed init,
    `Load weight begin.`; weight_utils.py:274 the format before snapshot_download), `bars`
    files fetched with huggingface_hub < 1.0's per-file bar (file_download.py http_get, 33 s
    each), then the shard bar and `Load weight end.` 13 s after the last line before."""
    head = ["[2025-08-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
            "tokenizer_path='Qwen/Qwen3-8B', tp_size=1, port=30000)",
            "[2025-08-01 10:00:04] Init torch distributed begin.",
            f"[2025-08-01 10:00:05] {init_end}",
            "[2025-08-01 10:00:06] Load weight begin. avail mem=78.50 GB",
            "[2025-08-01 10:00:06] Using model weights format ['*.safetensors']"]
    fetched = [f"model-0000{i}-of-00005.safetensors: 100%|██████████| 3.99G/3.99G "
               "[00:33<00:00, 120MB/s]" for i in range(1, bars + 1)]
    end = time.strftime("%H:%M:%S", time.gmtime(10 * 3600 + 19 + 33 * bars))
    return head + fetched + [
        "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]",
        "Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:10<00:00,  0.50it/s]",
        f"[2025-08-01 {end}] Load weight end. "
        "type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=63.10 GB, mem usage=15.40 GB."]


def phases_of(lines: list[str]) -> list[tuple[str, float]]:
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(("\n".join(lines) + "\n").encode(), 0.0)
    pipe.finish(0.0)
    return [(sp.phase, sp.end_log - sp.log_time) for sp in pipe.state.spans
            if not sp.beside and sp.end_log is not None and sp.log_time is not None]


def test_0_4_s_weights_format_on_a_cached_start_is_no_download():
    """0.4.x .. 0.5.2 log `Using model weights format` on every start from a hub id, cached
    or not (0.4.10.post2 weight_utils.py:274, no local-snapshot check before 0.5.3); their
    hub (< 1.0: transformers 4.x) draws a bar per file on a real download.  Told by their
    distributed init's end (`mem usage=` alone, 0.4.x .. 0.5.8).  Before: a cached start read
    `downloading 3.0s` (the hub check), the DP-attention one above 4.0 s.  A real download
    still reads downloading from its bars; 0.5.10+ (`elapsed=`, hub >= 1.0: no bars, the
    line only before a real download, weight_utils.py:692) from the line itself."""
    old = "Init torch distributed ends. mem usage=0.00 GB"
    assert phases_of(hub_start(old, 0))[1:] == [("loading_shards", 13.0)]
    assert phases_of(hub_start(old, 4))[1:] == [("downloading", 132.0 + 3.0),
                                                ("loading_shards", 10.0)]
    new = "Init torch distributed ends. elapsed=1.00 s, mem usage=0.00 GB"
    assert phases_of(hub_start(new, 0))[1][0] == "downloading"


def test_a_daemon_restarted_after_the_init_line_still_knows_the_release():
    """`State.seen` is checkpointed: a daemon killed after 0.4.10's `Init torch distributed
    ends. mem usage=` and started again from its checkpoint still reads the cached start's
    weights format as no download (a checkpoint without the key, or a hostile one, reads
    nothing seen)."""
    import json
    from logwatch.machine import state_from_json, state_to_json
    lines = hub_start("Init torch distributed ends. mem usage=0.00 GB", 0)
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(("\n".join(lines[:3]) + "\n").encode(), 0.0)
    again = LogPipeline(load_pack("sglang"))
    again.state = state_from_json(json.loads(json.dumps(state_to_json(pipe.state))))
    assert again.state.seen == {"dist_init_mem"}
    again.feed(("\n".join(lines[3:]) + "\n").encode(), 1.0)
    assert "downloading" not in [sp.phase for sp in again.state.spans]
    hostile = state_to_json(pipe.state)
    hostile.pop("seen")
    assert state_from_json(hostile).seen == set()


OOM_KILLED_046 = "sglang-046-tp4-load-oom-killed.log"
SIGKILLED = "Child process unexpectedly failed with an exit code 9. pid=4247"


def test_0_4_6_s_sigkilled_rank_while_loading_is_the_oom_killer():
    """SGLang 0.4.6.post5, TP4: the kernel kills TP2 while the shards load.  The main process's
    SIGCHLD handler says so (entrypoints/engine.py:517, os.waitpid's raw status: 9 is SIGKILL);
    the other ranks load on and fail in the KV sizing's all-reduce (gloo `Connection closed by
    peer`, model_runner.py:786).  Before: no rule for the handler's line, `kv_cache_too_small
    during allocating` (the all-reduce's `profile_max_num_token` frame), advice to raise
    --mem-fraction-static; now host_oom_killed during loading_shards, at the kill."""
    st = replay_file(str(BUILT / OOM_KILLED_046)).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("host_oom_killed", "loading_shards"), st.crash
    assert st.crash.line == f"[2025-06-02 12:00:28] {SIGKILLED}"


def _after_ready(*lines: str) -> LogPipeline:
    """The 0.4.10 DP-attention startup (ready), then `lines` stamped after it."""
    pipe = LogPipeline(load_pack("sglang"))
    text = (BUILT / DP_ATTN).read_text() + "".join(f"[2025-08-01 10:20:00] {x}\n" for x in lines)
    pipe.feed(text.encode(), 0.0)
    pipe.finish(0.0)
    return pipe


def test_0_4_6_s_sigchld_line_after_a_stop_is_no_crash():
    """SGLang's kill_process_tree SIGKILLs the children on a planned stop (and after a crash):
    the SIGCHLD line after the stop is no OOM kill.  While serving, with no stop before it,
    it is; an exit(1) (raw status 256) is a child that died."""
    st = _after_ready("SIGTERM received. signum=15 frame=None. Draining requests and shutting "
                      "down...", SIGKILLED).state
    assert st.phase == "stopped" and st.crash is None
    st = _after_ready(SIGKILLED).state
    assert st.crash is not None and (st.crash.reason, st.crash.during) == ("host_oom_killed",
                                                                           "ready")
    st = _after_ready(SIGKILLED.replace("code 9.", "code 256.")).state
    assert st.crash is not None and st.crash.reason == "child_process_died"


def test_a_first_start_eta_after_the_capture_counts_no_capture_again():
    """0.5.23 builds the HiCache host pool in the scheduler's init after the model worker's,
    capture included (managers/scheduler.py `init_model_worker`, then
    `kv_cache_builder.build_kv_cache`): `allocating` again after `cuda_graph`, and no rule
    can bring the capture back.  Before, the capture's typical 60 s less its 12 s was
    still counted ahead: 85 s at the pool's start and 117 s at the warmup's `Prefill
    batch`, 1 s before ready; now only allocating (the pack's 10 s less the first span's
    3 s, then growing as it runs late) and autotune (DeepGEMM's compile may still begin)."""
    name = "sglang-0523-hicache.log"
    typical = load_pack("sglang").typical_seconds
    pipe, now = fed_until(name, "TP1] Allocating kv hierarchical KV host pool")
    assert pipe.state.phase == "allocating" and pipe.state.closed_seconds("cuda_graph") == 12
    assert startup_eta(pipe.pack, pipe.state, now, {}) == \
        typical["allocating"] - 3 + typical["autotune"]
    pipe, now = fed_until(name, "Prefill batch")
    assert startup_eta(pipe.pack, pipe.state, now, {}) < 70
