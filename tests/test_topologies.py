"""Deployment topologies as operators run them (2026), built from the engines' own log
statements (tests/fixtures/built/README.md): what a launch that serves on prints after it is
ready, several rounds of weights, several servers and nodes.  Each test is one finding of
the topology review: the verdict logwatch gave before, and the truth."""

from __future__ import annotations

import pytest
from conftest import FIXTURES
from logwatch.app.replay import replay_file
from logwatch.rules.pack import READY

BUILT = FIXTURES / "built"


def replay(name: str):
    return replay_file(str(BUILT / name)).state


def env(proc: str, level: str, stamp: str, where: str, message: str) -> list[str]:
    """vLLM 0.34's NewLineFormatter: the envelope on every line of a record."""
    return [f"({proc}) {level} 12-01 {stamp} [{where}] {m}" for m in message.split("\n")]


def replay_lines(tmp_path, name: str, lines: list[str]):
    path = tmp_path / name
    path.write_text("".join(x + "\n" for x in lines))
    return replay_file(str(path)).state


# -- vLLM: a collective RPC that raised after ready is no crash --------------------------------

def test_vllm_lora_adapter_that_fails_to_load_after_ready_is_no_crash():
    """`POST /v1/load_lora_adapter` of a missing adapter on a TP2 server: each worker logs
    `WorkerProc hit an exception.` and its traceback (0.34 multiproc_executor.py:1223), the
    engine core `Invocation of add_lora method failed` (core.py:2055), the client gets a
    404, and the server serves on.  Before: `crashed: python_exception during ready`."""
    st = replay("vllm-034-lora-load-fail.log")
    assert st.phase == READY and st.crash is None


def test_vllm_worker_exception_that_kills_the_engine_after_ready_is_still_a_crash(tmp_path):
    """A forward pass that raised: the same worker line, then the engine core's fatal error
    and the API server's EngineDeadError (0.34 core.py:1759, async_llm.py:957)."""
    start = (BUILT / "vllm-034-default.log").read_text().splitlines()
    tb = ("WorkerProc hit an exception.\nTraceback (most recent call last):\n"
          '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu/model_runner.py", line 1500, in execute_model\n'
          "    hidden_states = self.model(...)\n"
          "torch.AcceleratorError: CUDA error: an illegal memory access was encountered")
    lines = start + env("Worker_TP0 pid=200", "ERROR", "10:06:00", "multiproc_executor.py:1223", tb) \
        + env("EngineCore pid=150", "ERROR", "10:06:00", "core.py:1759",
              "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
              '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 550, in get_response\n'
              "    raise RuntimeError(\n"
              "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered', please check the stack trace above for the root cause") \
        + env("APIServer pid=100", "ERROR", "10:06:01", "async_llm.py:957", "AsyncLLM output_handler failed.")
    st = replay_lines(tmp_path, "fatal.log", lines)
    assert st.crash is not None and st.crash.during == READY



def test_vllm_forward_pass_error_on_a_rank_that_is_not_the_output_rank_is_a_crash(tmp_path):
    """TP1 of TP2 runs out of memory in a forward pass after ready: it logs `WorkerProc hit
    an exception.` and its traceback (0.34 multiproc_executor.py:1223) and nothing more is
    said: only the output rank (TP0) answers the engine core, and it blocks in the
    all-reduce (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s, before the engine's fatal
    error).  After 9267fe6 the worker's line was a hint: `ready`, no page, for 5 minutes."""
    start = (BUILT / "vllm-034-default.log").read_text().splitlines()
    tb = ("WorkerProc hit an exception.\nTraceback (most recent call last):\n"
          '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 1215, in _execute_worker_rpc\n'
          "    output = func(*args, **kwargs)\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.06 GiB is free.")
    lines = start + env("Worker_TP1 pid=201", "ERROR", "10:06:00", "multiproc_executor.py:1223", tb)
    st = replay_lines(tmp_path, "tp1-oom.log", lines)
    assert st.crash is not None and (st.crash.reason, st.crash.during) == ("cuda_oom", READY)
    # the same worker lines, then the engine core's utility failure: a call's, served on
    util = env("EngineCore pid=150", "ERROR", "10:06:00", "core.py:2055",
               "Invocation of reload_weights method failed")
    st = replay_lines(tmp_path, "reload.log", lines + util)
    assert st.phase == READY and st.crash is None


def test_a_utility_failure_long_after_a_real_crash_does_not_take_it_back(tmp_path):
    """A real forward-pass crash (TP1's CUDA OOM, 10:06:00), then 14 minutes later by the
    log's stamps a LoRA sidecar's failed `add_lora` (another engine's: DP1).  Read in one
    go (replay, `watch --last`, the daemon's catch-up at attach) the crash was not yet
    settled when the utility line came: before (helper adv33 H2, a regression of 6eb619f)
    it was taken back, "ready", no page.  A call's failure takes back only the exceptions
    logged with it (within the crash's longest settle, 30 s)."""
    start = (BUILT / "vllm-034-default.log").read_text().splitlines()
    tb = ("WorkerProc hit an exception.\nTraceback (most recent call last):\n"
          '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 1215, in _execute_worker_rpc\n'
          "    output = func(*args, **kwargs)\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.06 GiB is free.")
    crash = env("Worker_TP1 pid=201", "ERROR", "10:06:00", "multiproc_executor.py:1223", tb)
    late = env("EngineCore_DP1 pid=151", "ERROR", "10:20:00", "core.py:2055",
               "Invocation of add_lora method failed")
    st = replay_lines(tmp_path, "late.log", start + crash + late)
    assert st.crash is not None and (st.crash.reason, st.crash.during) == ("cuda_oom", READY), \
        (st.phase, st.crash)
    # the same call's failure a few seconds on is the call's, as before
    soon = env("EngineCore pid=150", "ERROR", "10:06:03", "core.py:2055",
               "Invocation of add_lora method failed")
    st = replay_lines(tmp_path, "soon.log", start + crash + soon)
    assert st.phase == READY and st.crash is None


# -- speculative decoding: the draft model's shards are a second round -------------------------

def test_a_draft_model_s_shard_bar_does_not_replace_the_target_s_count():
    """SGLang EAGLE3 (the draft runner loads after the target's weights, before the KV pool)
    and vLLM's draft model (loaded after the target's `Loading weights took`): each prints a
    second shard bar, `1/1`.  Before: `shards 1/1` for the 17- and 30-shard targets."""
    for name, total in (("sglang-0523-eagle3.log", 17), ("vllm-034-spec-draft.log", 30)):
        st = replay(name)
        assert st.phase == READY
        bar = st.progress["shards"]
        assert (bar.current, bar.total) == (total, total), name


def test_an_sglang_draft_that_loads_before_the_kv_pool_is_timed_as_loading():
    """SGLang 0.5.23 builds the speculative draft worker right after the target's weights
    and before any KV pool (managers/scheduler.py init_model_worker: init_tp_model_worker,
    maybe_init_draft_worker, then init_memory_pools): a NextN (MTP) draft reads the whole
    checkpoint again, its own `Load weight begin.` .. `Load weight end.`.  Before: those
    2m30s were `allocating` (2m35s for a sizing that takes 4 s), the ETA and the slowest
    phase wrong.  The second round of shards does not replace the target's count."""
    st = replay("sglang-0523-nextn.log")
    assert st.phase == READY
    d = st.durations()
    assert d["loading_shards"] == 302.0 and d["allocating"] == 4.0, d
    bar = st.progress["shards"]
    assert (bar.current, bar.total) == (17, 17)


def _live_changes(lines: list[str]) -> list[tuple[str, str]]:
    """The phase changes a daemon following these lines announces, in order."""
    from logwatch.machine import PhaseChanged
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    pipe, changes = LogPipeline(load_pack("sglang")), []
    for i, x in enumerate(lines):
        changes += [(e.old, e.new) for e in pipe.feed((x + "\n").encode(), 1000.0 + i)
                    if isinstance(e, PhaseChanged)]
    return changes


def test_a_straggler_rank_s_target_load_end_between_draft_loads_still_ends_in_allocating(tmp_path):
    """TP1's own `Load weight end.` (the target's) read after TP0's draft began: the draft
    loads on, and the last rank's draft end opens the KV sizing.  TP0's draft steps back
    (its group's barrier passed); TP1's late end is its own first arrival, no move on: it
    flipped allocating / loading_shards again (live) once TP0's draft alone stepped back."""
    lines = (BUILT / "sglang-0523-nextn.log").read_text().splitlines()
    tp1_end = next(i for i, x in enumerate(lines) if "TP1] Load weight end. elapsed=151" in x)
    moved = lines.pop(tp1_end)
    draft = next(i for i, x in enumerate(lines) if "TP0] Load weight begin. avail mem=107" in x)
    lines.insert(draft + 1, moved)
    assert _live_changes(lines)[2:6] == [("loading_shards", "allocating"), ("allocating", "loading_shards"),
                                         ("loading_shards", "allocating"), ("allocating", "autotune")]
    st = replay_lines(tmp_path, "interleaved.log", lines)
    d = st.durations()
    assert st.phase == READY and d["loading_shards"] == 302.0 and d["allocating"] == 4.0, d


def test_a_draft_loaded_by_two_dp_replicas_steps_back_once(tmp_path):
    """`--dp 2 --tp 2` with a NextN draft: each replica is its own TP group, and each loads
    its draft after its own group's barrier (0.5.23 load_model_utils.py
    dist_barrier_after_load), DP0's three seconds before DP1 ends its target's load.
    Before: every group's end and draft flipped the phase again, live `phase allocating`,
    `phase loading_shards`, `phase allocating`, `phase loading_shards` for one draft load
    (the timeline three loading_shards rows).  Now the phase steps back once, when every
    rank has ended its target's load."""
    src = (BUILT / "sglang-0523-nextn.log").read_text().splitlines()
    lines = [src[0].replace("'tp_size': 2", "'tp_size': 2, 'dp_size': 2")]
    ranks = [f"DP{d} TP{t}" for d in (0, 1) for t in (0, 1)]
    lines += [f"[2026-12-01 10:00:0{s} {r}] {m}" for s, m in (
        (4, "Init parallel begin."), (8, "Init parallel ends. elapsed=4.10 s"),
        (9, "Load weight begin. avail mem=138.92 GB")) for r in ranks]
    lines.append(next(x for x in src if "| 17/17 [00:30" in x))
    end = ("Load weight end. elapsed=151.20 s, type=Glm4MoeForCausalLM, quant=fp8, fmt=e4m3, "
           "avail mem=107.61 GB, mem usage=31.31 GB.")
    for dp, (ended, draft) in enumerate(((40, 41), (44, 44))):
        lines += [f"[2026-12-01 10:02:{ended} DP{dp} TP{t}] {end}" for t in (0, 1)]
        lines += [f"[2026-12-01 10:02:{draft} DP{dp} TP{t}] Load weight begin. avail mem=107.61 GB"
                  for t in (0, 1)]
    lines.append(next(x for x in src if "| 17/17 [02:30" in x))
    lines += [f"[2026-12-01 10:05:11 {r}] Load weight end. elapsed=150.52 s, "
              f"type=Glm4MoeForCausalLMNextN, avail mem=106.71 GB, mem usage=0.90 GB." for r in ranks]
    kv = next(i for i, x in enumerate(src) if "KV Cache is allocated" in x)
    # each group's TP0 sizes its KV pool and captures (each replica is its own TP group)
    lines += [y for x in src[kv:] for y in ([x.replace(" TP0]", f" DP{d} TP0]") for d in (0, 1)]
                                             if " TP0]" in x else [x])]
    changes = _live_changes(lines)
    assert changes[2:6] == [("loading_shards", "allocating"), ("allocating", "loading_shards"),
                            ("loading_shards", "allocating"), ("allocating", "autotune")], changes
    d = replay_lines(tmp_path, "dp2.log", lines).durations()
    assert d["loading_shards"] == 302.0 and d["allocating"] == 4.0, d


def _nextn_ranks(ranks: list[str], ended: set[str], args: str, heads: list[str]) -> list[str]:
    """sglang-0523-nextn.log's load with these ranks, only `ended` printing their target's
    `Load weight end.`; each of `heads` (a TP group's rank 0) sizes its pool and captures."""
    src = (BUILT / "sglang-0523-nextn.log").read_text().splitlines()
    lines = [src[0].replace("'tp_size': 2", "'tp_size': 2" + args)]
    lines += [f"[2026-12-01 10:00:0{s} {r}] {m}" for s, m in (
        (4, "Init parallel begin."), (8, "Init parallel ends. elapsed=4.10 s"),
        (9, "Load weight begin. avail mem=138.92 GB")) for r in ranks]
    lines.append(next(x for x in src if "| 17/17 [00:30" in x))
    lines += [f"[2026-12-01 10:02:40 {r}] Load weight end. elapsed=151.20 s, type=Glm4MoeForCausalLM,"
              " avail mem=107.61 GB, mem usage=31.31 GB." for r in ranks if r in ended]
    lines += [f"[2026-12-01 10:02:41 {r}] Load weight begin. avail mem=107.61 GB" for r in ranks]
    lines.append(next(x for x in src if "| 17/17 [02:30" in x))
    lines += [f"[2026-12-01 10:05:11 {r}] Load weight end. elapsed=150.52 s, "
              "type=Glm4MoeForCausalLMNextN, avail mem=106.71 GB, mem usage=0.90 GB." for r in ranks]
    kv = next(i for i, x in enumerate(src) if "KV Cache is allocated" in x)
    return lines + [y for x in src[kv:] for y in ([x.replace(" TP0]", f" {h}]") for h in heads]
                                                   if " TP0]" in x else [x])]


_DPA = [f"DP{d} TP{d * 2 + t} EP{d * 2 + t}" for d in (0, 1) for t in (0, 1)]


@pytest.mark.parametrize("ranks, lost, args", [
    ([f"TP{i}" for i in range(8)], [f"TP{i}" for i in range(1, 8)], ", 'tp_size': 8"),
    ([f"TP{i}" for i in range(8, 16)], ["TP9"], ", 'nnodes': 2, 'node_rank': 1"),
    ([f"DP{d} TP{t}" for d in (0, 1) for t in (0, 1)], ["DP0 TP1"], ", 'dp_size': 2"),
    (_DPA, [_DPA[3]], ", 'dp_size': 2, 'enable_dp_attention': True"),
], ids=["tp8-only-tp0-ends", "tp16-node1-tp9-lost", "dp2-a-rank-lost", "dp-attention-a-rank-lost"])
def test_an_sglang_draft_is_timed_as_loading_when_a_rank_s_end_is_missing(tmp_path, ranks, lost, args):
    """A rank that never prints its target's `Load weight end.` (its line lost, TP > 0
    printing less, another node's log): the draft's load was timed as allocating (2m35s,
    DP2 2m31s, for a 4 s sizing).  Its group's draft begins after the group's barrier
    (0.5.23 load_model_utils.py dist_barrier_after_load): the ranks that did print say so."""
    heads = [r for r in ranks if r.endswith(" TP0")] if args == ", 'dp_size': 2" else ranks[:1]
    st = replay_lines(tmp_path, "lost.log", _nextn_ranks(ranks, set(ranks) - set(lost), args, heads))
    d = st.durations()
    assert st.phase == READY and d["allocating"] == 4.0 and d["loading_shards"] >= 296.0, d
    assert [e.phase for e in st.history].count("loading_shards") == 2


def test_sglang_lora_adapters_loaded_before_the_kv_pool_are_timed_as_loading(tmp_path):
    """`--enable-lora --lora-paths a1 a2 a3` (0.5.23): after the target's `Load weight end.`
    each rank builds its LoRA manager (`Using triton as backend of LoRA kernels.`) and reads
    every adapter (DefaultModelLoader: a 1/1 shard bar each, 50 s apiece here) before the KV
    pool.  Before: those 2m33s were `allocating` (2m35s for a sizing of 1 s); now loading,
    and the adapters' bars leave the checkpoint's shard count alone."""
    src = (BUILT / "sglang-0523-nextn.log").read_text().splitlines()
    head = src[0].replace("'speculative_algorithm': 'EAGLE'",
                          "'speculative_algorithm': None, 'enable_lora': True")
    draft = next(i for i, x in enumerate(src) if "Load weight begin. avail mem=107" in x)
    kv = next(i for i, x in enumerate(src) if "KV Cache is allocated" in x)
    lines = [head] + src[1:draft]
    lines += [f"[2026-12-01 10:02:41 TP{r}] Using triton as backend of LoRA kernels." for r in (0, 1)]
    lines += ["Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
              "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:50<00:00, 50.0s/it]"] * 3
    lines += [x for x in src[kv:] if "draft" not in x.lower()]
    st = replay_lines(tmp_path, "lora.log", lines)
    d = st.durations()
    assert st.phase == READY and d["loading_shards"] == 305.0 and d["allocating"] == 1.0, d
    bar = st.progress["shards"]
    assert (bar.current, bar.total) == (17, 17)



@pytest.mark.integration
@pytest.mark.parametrize("log, rows", [
    ("sglang-0523-lora-start.log", [("loading_shards", "32s", ""),
                                    ("loading_shards", "32s", "(LoRA adapters)")]),
    ("sglang-0523-nextn.log", [("loading_shards", "2m32s", ""),
                               ("loading_shards", "2m30s", "(draft model)")]),
])
def test_the_timeline_names_the_second_load_of_the_weights(log, rows):
    """`logwatch replay --timeline`: the target's weights, then (0.5.23 model_runner.py
    `initialize`: `maybe_init_lora_manager` after `load_model`, before any KV pool) the
    `--lora-paths` adapters, or (scheduler.py `init_model_worker`) the draft model: two
    `loading_shards` rows, the second named by its rule's `label`.  Before: two rows alike,
    `loading_shards 32s` twice, read as a glitch; the phases have no word for adapters,
    and one row for both would hide which of them took the time."""
    import subprocess
    import sys
    from conftest import ROOT
    res = subprocess.run([sys.executable, "-m", "logwatch", "replay", "--timeline",
                          str(BUILT / log)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    got = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("  loading_shards ")]
    assert [(r[0], r[4], " ".join(r[5:])) for r in got] == rows, res.stdout

# -- vLLM's gRPC server: its own ready line ---------------------------------------------------

def test_a_vllm_grpc_server_is_ready_when_its_grpc_server_starts():
    """`vllm serve --grpc` (0.34 entrypoints/cli/serve.py -> launchers/grpc_server.py
    `serve_grpc`) starts no uvicorn: no route table, no `Starting vLLM server on`, no
    `Application startup complete.`; it says `vLLM gRPC server started on 0.0.0.0:50051`
    and serves (its stats lines follow).  Before: `still starting: allocating` for good
    (watch timed out, no ready alert, a phase gauge stuck while it served 31 requests)."""
    st = replay("vllm-034-grpc.log")
    assert st.phase == READY, st.phase
    assert st.ready_line is not None and "gRPC server started on" in st.ready_line
    assert st.args.get("grpc") is True and st.args.get("tensor_parallel_size") == 2


def test_a_vllm_grpc_server_stopped_by_a_signal_is_stopped(tmp_path):
    """Its SIGTERM handler's `Received shutdown signal` (grpc_server.py:267) is a stop; the
    `finally`'s `Shutting down vLLM gRPC server...` is not (it precedes a crash's
    traceback too)."""
    lines = (BUILT / "vllm-034-grpc.log").read_text().splitlines()
    stop = "(MainProcess pid=100) INFO 12-01 10:09:00 [grpc_server.py:{}] {}"
    st = replay_lines(tmp_path, "stop.log", lines + [
        stop.format(267, "Received shutdown signal"),
        stop.format(278, "Shutting down vLLM gRPC server...")])
    assert st.phase == "stopped" and st.crash is None


# -- load formats: a streaming loader's bar counts tensors, not shards --------------------------

def test_the_run_ai_streamer_s_tensor_count_is_not_the_shard_count(tmp_path):
    """`--load-format runai_streamer`: the Run:ai Model Streamer's bar counts tensors (0.34
    model_loader/weight_utils.py `runai_safetensors_weights_iterator`: `total=total_tensors`,
    SGLang 0.5.23 alike), 707 of them for Qwen3-32B's 17 files.  Before: `shards 707/707`
    (the view, replay --json, logwatch_shards_*).  It is the loading's progress."""
    st = replay("vllm-034-runai.log")
    assert st.phase == READY and "shards" not in st.progress, st.progress.keys()
    bar = st.progress["tensors"]
    assert (bar.current, bar.total) == (707, 707)
    # vLLM's InstantTensor loader counts bytes (`31.2G/61.0G`): loading, no counter
    lines = [x for x in (BUILT / "vllm-034-runai.log").read_text().splitlines()
             if "Runai Model Streamer" not in x or "0/707" in x]
    at = next(i for i, x in enumerate(lines) if "0/707" in x)
    lines[at] = ("Loading safetensors using InstantTensor loader:  51% Completed | "
                 "31.2G/61.0G [00:10<00:09, 3.12GB/s]")
    st = replay_lines(tmp_path, "instant.log", lines)
    assert st.phase == READY and not {"shards", "tensors"} & set(st.progress)


# -- vLLM's Ray executor: a remote node's worker is a rank ---------------------------------------

def test_a_ray_worker_on_another_node_is_named_by_its_rank():
    """Ray forwards an actor's output behind `(RayWorkerProc pid=N, ip=10.0.0.2) `, then the
    worker's own `(Worker_TP2 pid=N)`.  Before: the remote node's ranks were no ranks (the
    rank lag never saw them) and its crash named none."""
    st = replay("vllm-034-ray-remote-oom.log")
    assert st.crash is not None and st.crash.reason == "cuda_oom"
    assert st.crash.rank == "TP2"
    assert sorted(st.ranks) == ["TP0", "TP1", "TP2", "TP3"]


# -- vLLM: the engine up, its API server fails: no capture failure ------------------------------

def _no_extensible_kv(lines: list[str]) -> list[str]:
    """vllm-034-default.log as `--no-enable-extensible-kv-cache` prints it: the KV cache sized
    before the capture (0.34 v1/engine/core.py:383), no commit after it."""
    kv = next(x for x in lines if "GPU KV cache size" in x).replace("10:04:28", "10:01:28")
    out = [x for x in lines if "extensible_kv_cache" not in x and "GPU KV cache size" not in x
           and "CUDA graph pool" not in x]
    at = max(i for i, x in enumerate(out) if "Available KV cache memory" in x) + 1
    return out[:at] + [kv] + out[at:]


def test_an_api_server_that_fails_after_the_engine_is_up_is_no_capture_failure(tmp_path):
    """TP2 without the extensible KV cache: both workers finished capturing, the engine core
    is up (`init engine ... took`, core.py:452), then the API server loads a `--chat-template`
    path that does not exist (launchers/api_server/app_state.py:67; renderers/chat_utils/
    chat_template.py:93) and dies.  Before helper adv36: `crashed: cuda_graph_capture_failed
    during cuda_graph` (the phase's default reason); the template's ValueError is a Python
    exception.  A rank that crashes while capturing is still a capture failure."""
    start = _no_extensible_kv((BUILT / "vllm-034-default.log").read_text().splitlines())
    up = [x for x in start[:next(i for i, x in enumerate(start) if "Supported tasks" in x) + 1]]
    tb = ["Traceback (most recent call last):",
          '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/launchers/api_server/app_state.py", line 67, in init_app_state',
          "    resolved_chat_template = load_chat_template(args.chat_template)",
          "ValueError: The supplied chat template (/t/tool.jinja) looks like a file path, but it "
          "failed to be opened. Reason: [Errno 2] No such file or directory: '/t/tool.jinja'"]
    st = replay_lines(tmp_path, "template.log", up + tb)
    assert st.crash is not None and st.crash.reason == "python_exception", st.crash
    assert "chat template" in st.crash.line
    one_left = [x for x in up if not ("Worker_TP1" in x and "capturing finished" in x)]
    cut = max(i for i, x in enumerate(one_left) if "capturing finished" in x) + 1
    st = replay_lines(tmp_path, "capture.log", one_left[:cut] + env(
        "Worker_TP1 pid=201", "ERROR", "10:04:25", "multiproc_executor.py:1091",
        "WorkerProc failed to start.\nTraceback (most recent call last):\n"
        "RuntimeError: CUDA error: operation not permitted when stream is capturing"))
    assert st.crash is not None and st.crash.reason == "cuda_graph_capture_failed", st.crash


# -- vLLM pipeline parallel: a later stage that crashes while the first one moved on -------------

def test_a_pipeline_stage_that_crashes_while_loading_is_placed_in_loading(tmp_path):
    """`-tp 2 -pp 2`: rank 0 prints the shard bar (0.34 weight_utils.py:875) and PP0 goes on to
    torch.compile (`Loading weights took`, `Model loading took`, `Starting torch.compile`)
    while PP1, whose stage holds the lm_head, is still reading its weights and runs out of
    memory (`WorkerProc failed to start.`, multiproc_executor.py:1091, `in load_model`).
    Before helper adv36: `cuda_oom during autotune`, as if torch.compile had; the frame of its
    own traceback places it (base.yaml `during:`).  A later traceback's frames (another
    rank's) do not move it again, and a frame after ready (a LoRA adapter) does not either."""
    start = (BUILT / "vllm-034-default.log").read_text().splitlines()
    cut = next(i for i, x in enumerate(start) if "Starting torch.compile" in x) + 1
    tb = ("WorkerProc failed to start.\nTraceback (most recent call last):\n"
          '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 822, in __init__\n'
          "    self.worker.load_model()\n"
          '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 412, in load_model\n'
          "    self.model_runner.load_model(load_dummy_weights=load_dummy_weights)\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB.")
    lines = [x.replace("Worker_TP", "Worker_PP0_TP") for x in start[:cut]] + env(
        "Worker_PP1_TP1 pid=203", "ERROR", "10:00:46", "multiproc_executor.py:1091", tb) + env(
        "EngineCore pid=150", "ERROR", "10:00:47", "core.py:1757",
        "EngineCore failed to start.\nTraceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/weight_utils.py", line 280, in download_weights_from_hf\n'
        "Exception: WorkerProc initialization failed due to an exception in a background process.")
    st = replay_lines(tmp_path, "pp.log", lines)
    assert st.crash is not None and st.phases_seen[-2] == "autotune"
    assert (st.crash.reason, st.crash.during, st.crash.rank) == \
        ("cuda_oom", "loading_shards", "PP1_TP1"), st.crash
    served = (BUILT / "vllm-034-lora-load-fail.log").read_text().splitlines()
    ready = next(i for i, x in enumerate(served) if "Application startup complete" in x) + 1
    st = replay_lines(tmp_path, "after.log", served[:ready] + env(
        "EngineCore pid=150", "ERROR", "10:06:00", "core.py:1759",
        "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py", line 591, in load_weights\n'
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"))
    assert st.crash is not None and st.crash.during == READY, st.crash


V0_TP2 = [
    "INFO 03-19 10:52:50 api_server.py:912] vLLM API server version 0.6.6.post1",
    "INFO 03-19 10:53:00 model_runner.py:1094] Starting to load model m...",
    "(VllmWorkerProcess pid=4001) INFO 03-19 10:53:00 model_runner.py:1094] Starting to load model m...",
    "INFO 03-19 10:53:06 model_runner.py:1099] Loading model weights took 7.5 GiB",
    "(VllmWorkerProcess pid=4001) INFO 03-19 10:53:06 model_runner.py:1099] Loading model weights took 7.5 GiB",
    "INFO 03-19 10:53:10 distributed_gpu_executor.py:57] # GPU blocks: 27000, # CPU blocks: 4096",
    "INFO 03-19 10:53:12 model_runner.py:1415] Capturing cudagraphs for decoding. This may lead "
    "to unexpected consequences if the model is not static.",
    "(VllmWorkerProcess pid=4001) INFO 03-19 10:53:12 model_runner.py:1415] Capturing cudagraphs "
    "for decoding. This may lead to unexpected consequences if the model is not static.",
    "(VllmWorkerProcess pid=4001) INFO 03-19 10:53:30 model_runner.py:1535] Graph capturing "
    "finished in 18 secs, took 0.30 GiB"]
V0_TB = ["Traceback (most recent call last):",
         '  File "/usr/lib/python3/dist-packages/vllm/layers/custom.py", line 80, in forward',
         "    return torch.ops._C.custom_op(x)",
         "RuntimeError: custom_op: invalid configuration argument"]


def test_a_rankless_worker_that_finished_capturing_leaves_the_capture_failure_of_the_driver(
        tmp_path):
    """vLLM V0 (0.4-0.7) TP2: the worker's lines carry `(VllmWorkerProcess pid=N)`, no rank,
    the driver's none; the worker finished capturing, the driver failed capturing with a bare
    RuntimeError.  Since b53c3f3 (a rankless phase end was the phase's work over) the crash
    read `python_exception`; it is the capture that failed.  Without ranks only a line that
    says the engine is up (`ends_rank`) ends the phase's work."""
    st = replay_lines(tmp_path, "v0.log", V0_TP2 + V0_TB)
    assert st.crash is not None and st.crash.during == "cuda_graph"
    assert st.crash.reason == "cuda_graph_capture_failed", st.crash
    up = "INFO 03-19 10:53:31 llm_engine.py:431] init engine (profile, create kv cache, " \
         "warmup model) took 25.99 seconds"
    st = replay_lines(tmp_path, "v0-up.log", V0_TP2 + [up] + V0_TB)
    assert st.crash is not None and st.crash.reason == "python_exception", st.crash


def test_trtllm_serve_failing_after_its_executor_is_up_is_no_capture_failure(tmp_path):
    """trtllm-012 (a real gpt-oss start) to its executor's last line, `Setting PyTorch memory
    fraction` (MARKERS.md: the executor is up), then trtllm-serve's OpenAIServer failing on a
    `--chat-template` path that does not open.  Before (helper adv42, older than b53c3f3):
    `cuda_graph_capture_failed during cuda_graph`: the executor's end line ended no rank of a
    rankless log; now it says the engine is up (`ends_rank`)."""
    real = (FIXTURES / "trtllm-012.log").read_text(encoding="utf-8").split("\n")
    up = next(i for i, ln in enumerate(real) if "Setting PyTorch memory fraction" in ln)
    tb = ["Traceback (most recent call last):",
          '  File "/usr/local/lib/python3.12/dist-packages/tensorrt_llm/serve/openai_server.py", '
          'line 98, in __init__',
          "    self.chat_template = load_chat_template(chat_template)",
          "ValueError: The supplied chat template (/templates/gpt-oss.jinja) looks like a file "
          "path, but it failed to be opened."]
    st = replay_lines(tmp_path, "trtllm.log", real[:up + 1] + tb)
    assert st.crash is not None and st.crash.reason == "python_exception", st.crash


def test_trtllm_failing_to_create_its_final_kv_cache_after_the_dry_run_is_no_capture_failure(
        tmp_path):
    """TensorRT-LLM sizes its KV cache with a dry run (autotune and CUDA-graph warmup on a
    small cache), then profiles memory and creates the final cache (MARKERS.md §1: the
    phases come back, allocating > autotune > cuda_graph twice).  trtllm-012 (a real start)
    to its memory profile, then trtllm-005's real report (the final KV cache could not be
    created).  Before: `cuda_oom during cuda_graph`, and a bare exception there
    `cuda_graph_capture_failed`: the profile's first line did not bring the pass back."""
    real = (FIXTURES / "trtllm-012.log").read_text(encoding="utf-8").split("\n")
    report = (FIXTURES / "trtllm-005.log").read_text(encoding="utf-8").split("\n")
    cut = next(i for i, ln in enumerate(real) if "Estimated max memory in KV cache" in ln) + 1
    st = replay_lines(tmp_path, "kv.log", real[:cut] + report)
    assert st.crash is not None and (st.crash.reason, st.crash.during) == \
        ("cuda_oom", "allocating"), st.crash
    tb = ["Traceback (most recent call last):",
          '  File "/usr/local/lib/python3.12/dist-packages/tensorrt_llm/_torch/pyexecutor/'
          'py_executor_creator.py", line 640, in create_py_executor',
          "    kv_cache_creator.build_managers(resources)",
          "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: mMaxAttentionWindow > 0"]
    st = replay_lines(tmp_path, "bare.log", real[:cut] + tb)
    assert st.crash is not None and st.crash.reason != "cuda_graph_capture_failed", st.crash
    # the start that serves: both passes on its timeline, the capture only the capture
    st = replay_lines(tmp_path, "ready.log", real)
    assert st.phase == READY
    assert [s.phase for s in st.spans][-6:] == ["autotune", "cuda_graph", "allocating",
                                               "autotune", "cuda_graph", READY]



def test_a_vllm_draft_model_is_timed_as_loading():
    """vLLM 0.34 loads a speculative draft model after the target's `Loading weights took`
    (the loader's line, info_once: the node's first rank only) and before `Model loading
    took` (every worker: v1/worker/gpu/model_runner.py load_model, :442).  Before: loading
    ended at the first, and the draft's load was timed as autotune (3 s here; a NextN / MTP
    draft reading the target's checkpoint again: minutes).  The target's shard count stays
    (30/30, not the draft's 1/1)."""
    st = replay("vllm-034-spec-draft.log")
    assert st.phase == READY
    d = st.durations()
    # autotune: the compile only (the profiling run after it is allocating since helper adv77)
    assert d["loading_shards"] == 91 + 3 and d["autotune"] == 34, d
    assert (st.progress["shards"].current, st.progress["shards"].total) == (30, 30)


# -- SGLang PD disaggregation: a prefill server no decode server can find ----------------------

def test_a_prefill_server_that_cannot_register_with_its_bootstrap_server_is_flagged(tmp_path):
    """`--disaggregation-mode prefill` (TP2): after the capture each rank registers with the
    bootstrap server (0.5.23 managers/scheduler.py init_disaggregation ->
    disaggregation/common/conn.py register_to_bootstrap): 5 tries (`Prefill register attempt
    N/5 failed: ...`, :1652), then `Prefill instance failed to register to bootstrap server
    after 5 retries` (:1661) and it starts on: the PD warmup uses a fake bootstrap host
    (entrypoints/http_server.py:2505), so it says "fired up", but no decode server can find
    it and it never tries again.  Before: `ready after 4m31s`, nothing flagged."""
    lines = (BUILT / "sglang-0523-download.log").read_text().splitlines()
    lines[0] = lines[0].replace("}", ", 'disaggregation_mode': 'prefill', "
                                     "'disaggregation_bootstrap_port': 8998}")
    cut = next(i for i, x in enumerate(lines) if "max_total_num_tokens" in x)
    err = ("HTTPConnectionPool(host='127.0.0.1', port=8998): Max retries exceeded with url: "
           "/route (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at "
           "0x7f2a1c0d5e50>: Failed to establish a new connection: [Errno 111] Connection "
           "refused'))")
    reg = [f"[2026-12-01 {t} {r}] Prefill register attempt {n + 1}/5 failed: {err}"
           for n, t in enumerate(("10:03:56", "10:03:58", "10:04:02", "10:04:09", "10:04:22"))
           for r in ("TP0", "TP1")]
    reg += [f"[2026-12-01 10:04:27 {r}] Prefill instance failed to register to bootstrap "
            "server after 5 retries" for r in ("TP0", "TP1")]
    tail = ["[2026-12-01 10:04:29] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
            "[2026-12-01 10:04:30] Start of pd disaggregation warmup ...",
            "[2026-12-01 10:04:31] Disaggregation warmup requests completed for all 1 DP ranks",
            "[2026-12-01 10:04:31] End of disaggregation warmup",
            "[2026-12-01 10:04:31] The server is fired up and ready to roll!"]
    st = replay_lines(tmp_path, "prefill.log", lines[:cut] + reg + tail)
    assert st.crash is not None and st.crash.reason == "distributed_error", (st.phase, st.crash)
    assert "failed to register to bootstrap server" in st.crash.line
    # registered at the second try: it serves
    ok = [x for x in reg if "attempt 1/5" in x]
    st = replay_lines(tmp_path, "prefill-ok.log", lines[:cut] + ok + tail)
    assert st.phase == READY and st.crash is None


# -- SGLang 0.5.23 command lines the engine refuses: bad_argument, in the rule's words -------

def test_a_context_length_above_the_model_s_is_the_command_line_not_an_exception():
    """`--context-length 262144` for a 40960 model: 0.5.23 configs/model_config.py:1313
    raises while the arguments are resolved (an arg hook builds the ModelConfig), before
    any `server_args=` dump.  Before: `python_exception`; vLLM's twin was bad_argument."""
    st = replay("sglang-0523-context-length-too-long.log")
    assert st.crash is not None and st.crash.reason == "bad_argument", st.crash
    assert st.crash.meaning.startswith("--context-length 262144 is longer than the model's own "
                                       "(40960"), st.crash.meaning


def test_the_same_words_as_a_warning_are_no_crash(tmp_path):
    """With SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 the same message is logged as a
    warning (no `To allow overriding this maximum`) and the server starts."""
    src = (BUILT / "sglang-0523-lora-start.log").read_text().splitlines()
    warn = ("[2026-12-01 10:00:01] Warning: User-specified context_length (262144) is greater "
            "than the derived context_length (40960). This may lead to incorrect model outputs "
            "or CUDA errors. Note that the derived context_length may differ from "
            "max_position_embeddings in the model's config.")
    st = replay_lines(tmp_path, "warned.log", src[:1] + [warn] + src[1:])
    assert st.phase == READY and st.crash is None, st.crash


@pytest.mark.parametrize("name", ["sglang-0523-arg-hook-refused.log",
                                  "vllm-034-engine-args-refused.log"])
def test_a_bare_exception_while_the_arguments_resolve_is_the_command_line_at_launch(name):
    """SGLang 0.5.23's arg hooks (`resolve_once` -> arg_groups/parallel_hook.py:128, `DeepSeek
    V3.2 prefill CP does not support --cp-strategy zigzag`) and vLLM 0.34's
    `create_engine_config` (arg_utils.py:2418, hybrid and external DP load balancing
    together) refuse the command line with a bare ValueError (the packs' frame rules, `hint:
    bad_argument`, `at_launch`).  Before: `python_exception`, SGLang's `during waiting` with
    0 startups."""
    st = replay(name)
    assert st.crash is not None and (st.crash.reason, st.crash.during) == (
        "bad_argument", "launching"), st.crash
    assert st.startups == 1 and st.crash.line.startswith("ValueError: ")


def test_the_serve_command_s_own_checks_refuse_the_command_line_at_launch(tmp_path):
    """`vllm serve ... --enable-auto-tool-choice` without `--tool-call-parser`: 0.34
    entrypoints/common/cli_args.py:563 `validate_parsed_serve_args` raises a bare TypeError
    before any engine config.  Before: `python_exception`."""
    src = (BUILT / "vllm-034-engine-args-refused.log").read_text().splitlines()
    head = src[:src.index("Traceback (most recent call last):") + 6]   # to main.py `main`
    tail = ['  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py", '
            'line 159, in cmd',
            "    validate_parsed_serve_args(args)",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/common/cli_args.py",'
            ' line 563, in validate_parsed_serve_args',
            '    raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")',
            "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"]
    st = replay_lines(tmp_path, "tool-choice.log", head + tail)
    assert st.crash is not None and (st.crash.reason, st.crash.during) == (
        "bad_argument", "launching"), st.crash
    assert st.crash.line.startswith("TypeError: Error: --enable-auto-tool-choice")


def test_a_cause_of_its_own_inside_the_engine_args_still_wins(tmp_path):
    """The hub's refusal met while the engine config is built (its model config fetched) is
    the hub's, not the command line's: a cause line wins over the frame's hint."""
    src = (BUILT / "vllm-034-engine-args-refused.log").read_text().splitlines()
    gated = ("huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-65) "
             "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/"
             "resolve/main/config.json.")
    st = replay_lines(tmp_path, "gated.log", src[:-1] + [gated])
    assert st.crash is not None and st.crash.reason == "hub_download_failed", st.crash


def test_the_same_bare_exception_in_a_scheduler_is_no_argument_error(tmp_path):
    """A scheduler's own ValueError (its traceback passes through no argument resolution)
    stays `python_exception`: the frame, not the words, says where it was raised."""
    src = (BUILT / "sglang-0523-arg-hook-refused.log").read_text().splitlines()
    body = [x for x in src if "server_args.py" not in x and "resolve_once" not in x]
    st = replay_lines(tmp_path, "scheduler.log", body)
    assert st.crash is not None and st.crash.reason == "python_exception", st.crash


def test_fa3_on_a_gpu_it_does_not_run_on_is_the_command_line(tmp_path):
    """`--attention-backend fa3` on Blackwell: attention_registry.py:243's assert in each
    scheduler.  Before: `python_exception` with the assert as the root cause."""
    src = (BUILT / "sglang-0523-lora-start.log").read_text().splitlines()
    cut = next(i for i, x in enumerate(src) if "KV Cache is allocated" in x)
    crash = ["[2026-12-01 10:01:13 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/layers/attention/'
             'attention_registry.py", line 243, in create_flashattention_v3_backend',
             "AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use "
             "`--attention-backend flashinfer`.",
             "[2026-12-01 10:01:14] Received sigquit from a child process. It usually means the "
             "child failed."]
    st = replay_lines(tmp_path, "fa3.log", src[:cut] + crash)
    assert st.crash is not None and st.crash.reason == "bad_argument", st.crash
    assert st.crash.meaning.startswith("--attention-backend fa3 runs on Ampere"), st.crash.meaning


def test_a_model_with_its_own_code_loaded_without_trust_remote_code_is_the_command_line():
    """transformers 5.19 (0.5.23's pin) dynamic_module_utils.py:788: a repository with its
    own code and no --trust-remote-code; a server cannot answer the y/N prompt.  Before:
    `python_exception`.  The rule is base.yaml's: vLLM and TensorRT-LLM load configs alike."""
    st = replay("sglang-0523-trust-remote-code.log")
    assert st.crash is not None and st.crash.reason == "bad_argument", st.crash
    assert "moonshotai/Kimi-K3" in st.crash.line and "--trust-remote-code" in st.crash.meaning


def test_vllm_s_api_server_meets_the_same_words(tmp_path):
    """The same ValueError under vLLM 0.34's API server prefix."""
    lines = ["(APIServer pid=1) INFO 12-01 10:00:00 [utils.py:253] non-default args: "
             "{'model': 'moonshotai/Kimi-K3'}",
             "(APIServer pid=1) Traceback (most recent call last):",
             "(APIServer pid=1) ValueError: The repository moonshotai/Kimi-K3 contains custom code "
             "which must be executed to correctly load the model. You can inspect the repository "
             "content at https://hf.co/moonshotai/Kimi-K3 ."]
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    st = replay_file(str(path), "vllm").state
    assert st.crash is not None and st.crash.reason == "bad_argument", st.crash


# -- the command line asking what the model or the node cannot give -----------------------------

SCHED = '  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py", ' \
        'line 3201, in run_scheduler_process'
SIGQUIT = "[2026-12-01 10:00:21] Received sigquit from a child process. It usually means the " \
          "child failed."
WORKER = "(Worker_TP1 pid=202) ERROR 12-01 10:00:30 [multiproc_executor.py:750] "


def _sglang_scheduler_crash(exception: list[str]) -> tuple[str, str, list[str]]:
    return ("sglang-0523-download.log", "Load weight begin",
            ["[2026-12-01 10:00:20 TP1] Scheduler hit an exception: Traceback (most recent call "
             "last):", SCHED, *exception, "", SIGQUIT])


@pytest.mark.parametrize("base, cut_at, crash, meaning", [
    # SGLang 0.5.23 distributed/utils.py:70 `ensure_divisibility`, as each rank builds its
    # layers (`--tp-size 3` for Qwen3-32B's 64 query heads and 8 KV heads)
    (*_sglang_scheduler_crash([
        '  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/distributed/utils.py", '
        'line 70, in ensure_divisibility', "AssertionError: 8 is not divisible by 3"]),
     "A size the model splits across GPUs (8) is not divisible by the parallel size asked for (3)"),
    # SGLang 0.5.23 model_loader/utils.py:155: neither SGLang nor Transformers has the class
    (*_sglang_scheduler_crash([
        "ValueError: Cannot find model module. 'FooForCausalLM' is not a registered model in "
        "the Transformers library (only relevant if the model is meant to be in Transformers) "
        "and 'AutoModel' is not present in the model config's 'auto_map' (relevant if the "
        "model is custom)."]),
     "Neither this engine version nor its Transformers fallback implements FooForCausalLM"),
    # `--tp-size 4` on a node whose CUDA_VISIBLE_DEVICES shows 2 GPUs: torch's set_device
    (*_sglang_scheduler_crash([
        "torch.AcceleratorError: CUDA error: invalid device ordinal",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect."]),
     "A rank was given a GPU this process does not see"),
    # vLLM 0.34 config/model.py:1580, before any engine starts: the API server's traceback
    ("vllm-034-default.log", "Initializing a V1 LLM engine",
     ["Traceback (most recent call last):", '  File "/usr/local/bin/vllm", line 10, in <module>',
      "ValueError: Total number of attention heads (64) must be divisible by tensor parallel "
      "size (3)."],
     "The model has 64 attention heads, which --tensor-parallel-size 3 does not divide"),
    # vLLM 0.34 models/registry.py:1329
    ("vllm-034-default.log", "Loading model from scratch",
     ["(EngineCore_DP0 pid=201) ERROR 12-01 10:00:30 [core.py:1110] ValueError: Model "
      "architectures ['FooForCausalLM'] are not supported for now. Supported architectures: "
      "dict_keys(['LlamaForCausalLM'])"],
     "This engine version has no implementation of the model's architecture ('FooForCausalLM')"),
    ("vllm-034-default.log", "Loading model from scratch",
     [WORKER + "WorkerProc failed to start.", WORKER + "Traceback (most recent call last):",
      WORKER + "torch.AcceleratorError: CUDA error: invalid device ordinal"],
     "A rank was given a GPU this process does not see"),
])
def test_the_command_line_asking_what_the_model_or_node_cannot_give_is_bad_argument(
        tmp_path, base: str, cut_at: str, crash: list[str], meaning: str) -> None:
    """A parallel size that does not divide the model's heads, an architecture the engine
    does not implement, more ranks than visible GPUs: each the command line (or the model
    chosen), said with its fix.  Before: `python_exception`, as if the engine had a bug."""
    src = (BUILT / base).read_text().splitlines()
    cut = next(i for i, x in enumerate(src) if cut_at in x)
    st = replay_lines(tmp_path, "crash.log", src[:cut] + crash)
    assert st.crash is not None and st.crash.reason == "bad_argument", st.crash
    assert st.crash.meaning.startswith(meaning), st.crash.meaning
