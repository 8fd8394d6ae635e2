"""Older vLLM releases a fleet still runs (0.31.0, October 2026, 0.25.1, July 2026, 0.19.1,
0.13.0, December 2025, 0.11.0, October 2025, 0.9.2, July 2025, and 0.8.5.post1, April 2025:
tests/inventory/vllm-0.31.0.yaml, vllm-0.25.1.yaml, vllm-0.19.1.yaml, vllm-0.13.0.yaml,
vllm-0.11.0.yaml, vllm-0.9.2.yaml, vllm-0.8.5.post1.yaml),
as a user meets them: whole startups built from the release's own statements in its order and
envelope (tests/fixtures/built/README.md).  Each test is one finding of scoring the packs
against the release's source: the verdict logwatch gave before, and the truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from logwatch.app.replay import replay_file
from logwatch.rules.check import line_meaning
from logwatch.rules.pack import load_pack

BUILT = FIXTURES / "built"
DEEPGEMM = "vllm-011-tp2-fp8-deepgemm.log"
CUTEDSL = "vllm-0251-mla-cutedsl.log"
JIT_031 = "vllm-031-tp2-jit-warmup.log"
CG_PROFILE = "vllm-0191-tp2-cg-profile.log"
V1_092 = "vllm-092-v1-tp2.log"


# Warmups after the KV cache is sized and before the capture, each a finding of one release's
# inventory: each is autotune again, so the startup reads `launching > loading_shards >
# autotune > allocating > autotune > cuda_graph > ready`.  name -> (log, durations, ready in)
SECOND_AUTOTUNE: dict[str, tuple[str, dict[str, float], float]] = {
    # 0.31 is 0.28's order with 0.34's JIT warmup: the engine core prints `GPU KV cache size`
    # after the profiling run (no extensible KV cache), then each worker's kernel_warmup opens
    # with `JIT kernel warmup starting.` (kernel_warmup.py:172, on by default), FlashInfer's
    # autotune follows, then the V2 runner's capture; no KV commit after it (0.34 commits the
    # KV cache after the capture: allocating twice).  Every line is 0.31's (its file:line, its
    # `(Worker_TP0 pid=N)` record tag); the packs read it right as they are.  compile 10:00:44
    # -> 10:01:24; profiling and the KV sizing -> 10:01:30; JIT warmup and FlashInfer autotune
    # -> 10:04:01; the capture's bars (15 + 9 s) and engine up to 10:04:31
    "0.31-jit-warmup": (JIT_031, {"launching": 12, "loading_shards": 32, "autotune": 40 + 151.5,
                                  "allocating": 6, "cuda_graph": 29.5}, 271.0),
    # 0.25.1 compiles the FA4 MLA prefill kernels with CuTeDSL before serving
    # (kernel_config.enable_cutedsl_warmup, on by default; an MLA model on Blackwell), the last
    # step of kernel_warmup: `Warming up CuTeDSL compile_units=6 names=['fa4_mla_prefill'].`
    # .. `CuTeDSL warmup compiled 6 units in 48.30 s.` (model_executor/warmup/
    # cutedsl_warmup.py:102, :110).  Before: no rule read either line, and the capture's span
    # took the compile's 48 s (allocating 3 s, cuda_graph 1m05s for a 14 s capture).
    # torch.compile 10:00:19 -> 10:00:52; profiling and the KV estimate -> 10:00:56; the
    # CuTeDSL compile -> 10:01:44; the capture's bars (8 + 6 s) and engine up to 10:02:00
    "0.25-cutedsl": (CUTEDSL, {"launching": 6, "loading_shards": 13, "autotune": 33 + 48,
                               "allocating": 4, "cuda_graph": 16}, 120.0),
    # 0.19.1 autotunes FlashInfer in kernel_warmup (Hopper and Blackwell) and prints no line of
    # its own for it: only FlashInfer's `[Autotuner]: Autotuning process starts ...` .. `ends`
    # (flashinfer 0.6.6 autotuner.py:262, :268), on each worker's stderr behind its
    # `(Worker_TP0 pid=N)` tag.  Before: the tagged FlashInfer stamps were unread and its
    # autotuner named autotune without beginning it, so the KV allocation's and the autotune's
    # seconds were the capture's (allocating 8 s, cuda_graph 33 s for a 24 s capture).
    # torch.compile 10:00:44 -> 10:01:24; the profiling run, the CUDA graph memory profile
    # and the KV sizing -> 10:01:34.123; FlashInfer's autotune -> 10:01:37.470; the capture's
    # bars (15 + 9 s) and engine up -> 10:02:05
    "0.19-flashinfer": (CG_PROFILE, {"launching": 12.0, "loading_shards": 32.0,
                                     "autotune": 40.0 + 3.3, "allocating": 10.1,
                                     "cuda_graph": 27.5}, 125.0),
    # 0.11 warms DeepGEMM up (VLLM_USE_DEEP_GEMM=1 by default; a block-FP8 model on Hopper),
    # one bar per weight shape on every rank: `DeepGemm(fp8_gemm_nt) warmup (W=torch.Size([5120,
    # 5120])): ...`.  Before: no rule read them, and the capture's span took the warmup's 37 s
    # (cuda_graph 66 s).  The startup's first line is 0.11's `vLLM API server version 0.11.0`.
    # compile 10:00:43 -> 10:01:22; the KV estimate -> 10:01:26; the warmup's bars (8 + 6 + 14
    # + 9 s, the ranks side by side); capture and the sampler warmup to ready at 10:02:32
    "0.11-deepgemm": (DEEPGEMM, {"launching": 11, "loading_shards": 32, "autotune": 39 + 37,
                                 "allocating": 4, "cuda_graph": 29}, 152.0),
}


@pytest.mark.parametrize("case", sorted(SECOND_AUTOTUNE))
def test_a_warmup_after_the_kv_sizing_is_autotune_again(case: str) -> None:
    """Each release's warmup after the KV sizing reads as a second autotune, timed as its own
    (the durations from the log's stamps), the capture only the capture's."""
    log, durations, ready_in = SECOND_AUTOTUNE[case]
    st = replay_file(str(BUILT / log)).state
    assert [sp.phase for sp in st.spans if not sp.beside] == [
        "launching", "loading_shards", "autotune", "allocating", "autotune", "cuda_graph",
        "ready"]
    assert {k: round(v, 1) for k, v in st.durations().items()} == durations
    assert st.ready_in() == ready_in
    assert st.startups == 1 and st.crash is None


def _in_turn(tmp_path: Path, between: str = "") -> Path:
    """The DeepGEMM startup with TP0's four warmup bars printed before TP1's four, not
    interleaved, and `between` them (a stamped line, or nothing)."""
    lines = (BUILT / DEEPGEMM).read_text(encoding="utf-8").splitlines(keepends=True)
    bars = [ln for ln in lines if "DeepGemm(fp8_gemm_nt) warmup" in ln]
    at = lines.index(bars[0])
    rest = [ln for ln in lines if ln not in bars]
    tp0 = [ln for ln in bars if "Worker_TP0" in ln]
    tp1 = [ln for ln in bars if "Worker_TP1" in ln]
    log = tmp_path / "in-turn.log"
    log.write_text("".join(rest[:at] + tp0 + [between] + tp1 + rest[at:]), encoding="utf-8")
    return log


def test_0_11_s_warmup_bars_of_one_rank_after_the_other_s_are_one_wall_clock_span(
        tmp_path: Path):
    """The bars carry no stamp: the clock places each frame at its bar's start plus its
    elapsed time.  Printed one rank's after the other's, each rank's bar of a weight shape
    began with the other's, as printed side by side.  Before: eight bars end to end,
    autotune 1m14s, the capture placed 8 s after ready (cuda_graph 0 s) and the phases
    summing to 2m40s for a startup ready at 2m32s."""
    side = replay_file(str(BUILT / DEEPGEMM)).state
    st = replay_file(str(_in_turn(tmp_path))).state
    assert st.durations() == side.durations()
    assert sum(st.durations().values()) == st.ready_in() == 152.0
    assert [sp.log_time for sp in st.spans] == [sp.log_time for sp in side.spans]


def test_a_bar_placed_after_a_later_stamped_line_ends_there(tmp_path: Path):
    """A stamped line between the two ranks' bars (TP1's then begin at it: no telling they
    ran beside TP0's) puts TP1's 37 s past ready at 10:02:32, stamped: the spans the clock
    placed after that stamp end at it, so the phases still sum to the wall time.  Before:
    autotune 1m14s, cuda_graph 0 s opening 8 s after ready, 2m40s in all."""
    kv = "(Worker_TP0 pid=200) INFO 10-21 10:02:03 [gpu_worker.py:298] Available KV cache memory: 33.42 GiB\n"
    st = replay_file(str(_in_turn(tmp_path, kv))).state
    assert sum(st.durations().values()) == st.ready_in() == 152.0
    assert st.durations()["cuda_graph"] == 0.0
    assert max(sp.log_time for sp in st.spans) == st.spans[-1].log_time    # ready's


def test_a_caret_line_of_the_crash_excerpt_keeps_its_indent():
    """The engine core's traceback (`[core.py:708]`, then the source line, then its carets
    indented to the call: 27 spaces) as the crash excerpt shows it (`watch`, the alert).
    Before: the indent was taken for a terminal's padding of a folded row and removed
    (`[core.py:708]^^^^...`), the carets pointing at the prefix; the JSON form kept it."""
    raw = (BUILT / "vllm-011-gpu-busy.log").read_text(encoding="utf-8").splitlines()
    carets = [ln for ln in replay_file(str(BUILT / "vllm-011-gpu-busy.log")).state.crash.excerpt
              if ln.rstrip().endswith("^")]
    assert len(carets) >= 4 and all(ln in raw for ln in carets), carets
    assert any(ln.endswith("[core.py:708]" + " " * 27 + "^" * 27) for ln in carets)


def test_0_11_s_gpu_short_of_free_memory_at_start_is_a_gpu_memory_crash():
    """0.11 refuses to start a worker whose GPU has less free memory than
    --gpu-memory-utilization asks for (v1/worker/gpu_worker.py:188 `init_device`: another
    process holds 18 GiB of GPU 1); later releases only log it.  The rank fails before its
    log prefix is set (multiproc_executor.py:430 then :433), so its traceback has no
    `(Worker_TP1 pid=N)` tag.  Before: python_exception, as if vLLM had a bug."""
    st = replay_file(str(BUILT / "vllm-011-gpu-busy.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("cuda_oom", "launching"), st.crash
    assert "Free memory on device (61.23/79.19 GiB) on startup" in st.crash.line
    assert st.phases_seen == ["launching", "crashed"]



FORK = "vllm-011-fork-tp2.log"


def reads_as_the_deepgemm_startup(name: str):
    """`name`, DEEPGEMM's launch in another envelope or another release's words, read as that
    launch: the same phases, times and ready."""
    st = replay_file(str(BUILT / name)).state
    old = replay_file(str(BUILT / DEEPGEMM)).state
    assert [sp.phase for sp in st.spans if not sp.beside] == [
        sp.phase for sp in old.spans if not sp.beside]
    assert {k: round(v) for k, v in st.durations().items()} == {
        "launching": 11, "loading_shards": 32, "autotune": 39 + 37, "allocating": 4,
        "cuda_graph": 29}
    assert st.ready_in() == old.ready_in() == 152.0
    return st


def test_0_11_forked_workers_nested_tags_time_as_spawned_ones():
    """`VLLM_WORKER_MULTIPROC_METHOD=fork` (the CLI sets spawn only when unset,
    entrypoints/utils.py:162): the engine core, forked from the decorated API server
    (api_server.py:1881), and its workers, forked from it, keep their parents' stdout
    wrappers (utils/__init__.py:3460 `_add_prefix` wraps what it finds): a worker's line is
    `(APIServer pid=100) (EngineCore_DP0 pid=150) (Worker_TP0 pid=200) ...`.  The same
    startup as DEEPGEMM's, times and all.  Before: a DeepGEMM bar's description with three
    tags passed 120 characters, no frame was placed by its elapsed time, and the warmup's
    37 s went to the capture (autotune 0 s, cuda_graph 66 s)."""
    fork = reads_as_the_deepgemm_startup(FORK)
    assert (fork.progress["shards"].current, fork.progress["shards"].total) == (17, 17)


def test_0_11_forked_tp1_capture_oom_is_tp1s():
    """The forked launch with TP1 out of memory in its capture: its traceback under three
    tags, then the engine core's `EngineCore failed to start.` under two.  The first rank to
    crash is TP1 (the innermost tag), not the engine core's DP0 before it.  Before: the
    same crash, but the capture began at the KV sizing (cuda_graph 43 s for 6 s)."""
    st = replay_file(str(BUILT / "vllm-011-fork-tp2-capture-oom.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during, st.crash.rank) == ("cuda_oom", "cuda_graph", "TP1")
    assert st.crash.line.startswith(
        "(APIServer pid=100) (EngineCore_DP0 pid=150) (Worker_TP1 pid=201) ERROR ")
    assert "torch.OutOfMemoryError: CUDA out of memory" in st.crash.line
    assert {k: round(v) for k, v in st.durations().items()} == {
        "launching": 11, "loading_shards": 32, "autotune": 39 + 37, "allocating": 4,
        "cuda_graph": 6}
    assert (st.progress["shards"].current, st.progress["shards"].total) == (17, 17)

# vLLM 0.13.0 (December 2025): 0.11's startup order and envelope in 0.16's words

DEEPGEMM_13 = "vllm-013-tp2-fp8-deepgemm.log"


def test_0_13_s_bracketed_deepgemm_bars_are_the_warmup_not_the_capture(tmp_path: Path):
    """0.13 ends each DeepGEMM warmup bar's description with a bracket (deep_gemm_warmup.py
    :204 `DeepGemm(fp8_gemm_nt) warmup (W=torch.Size([5120, 5120])) [all tokens]`, the
    default VLLM_DEEP_GEMM_WARMUP=full; `[relaxed]`; the grouped kernel's `[64 values,
    block_m=128]`, :269).  The same launch as DEEPGEMM's in 0.13's words (`Model loading
    took ... GiB memory`, `compile range (1, 8192)`, `Supported tasks:`): the same phases and
    times.  Before: no frame matched past the bracket, so the warmup's 37 s went to the
    capture (cuda_graph 66 s) and, mid-warmup, the phase was allocating with no progress."""
    reads_as_the_deepgemm_startup(DEEPGEMM_13)
    lines = (BUILT / DEEPGEMM_13).read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if "[all tokens]:  50%" in x)
    half = tmp_path / "mid-warmup.log"
    half.write_text("".join(lines[:at + 1]), encoding="utf-8")
    mid = replay_file(str(half)).state
    assert mid.phase == "autotune"
    assert (mid.progress["deepgemm"].current, mid.progress["deepgemm"].total) == (4096, 8192)


# vLLM 0.8.5.post1 (April 2025): V1 by default, V0 beside it (VLLM_USE_V1=0, or a fallback)

def test_0_8_s_v0_engine_profiles_memory_right_after_the_weights():
    """V0 (worker/model_runner.py) compiles nothing by default: after `Model loading took`
    the worker profiles memory (worker.py determine_num_available_blocks), sizes the cache,
    then captures.  Before: the model runner's line read as V1's, the 5 s before `Memory
    profiling takes` as a compile (autotune 5 s, allocating 4 s)."""
    st = replay_file(str(BUILT / "vllm-085-v0-tp2.log")).state
    assert [sp.phase for sp in st.spans if not sp.beside] == [
        "launching", "loading_shards", "allocating", "cuda_graph", "ready"]
    assert {k: round(v) for k, v in st.durations().items()} == {
        "launching": 26, "loading_shards": 41, "allocating": 9, "cuda_graph": 22}
    assert st.ready_in() == 98.0
    assert st.startups == 1 and st.crash is None


V0_WORKER = "(VllmWorkerProcess pid=1301) INFO 05-01 12:09:00 [multiproc_worker_utils.py:259] "
V0_HTTP_DOWN = ["INFO 05-01 12:09:00 [launcher.py:79] Shutting down FastAPI HTTP server.",
                "INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
                "INFO:     Application shutdown complete."]
V0_KILLING = ("INFO 05-01 12:09:00 [multiproc_worker_utils.py:124] "
              "Killing local vLLM worker processes")
V0_ENDS = {
    # Ctrl-C: SIGINT to the whole group; the worker's task loop ends on KeyboardInterrupt
    # (multiproc_worker_utils.py:259 `Worker exiting`), the driver's WorkerMonitor sees it
    # exit (:124), the API server's loop handler cancels uvicorn (launcher.py:79)
    "ctrl-c": [V0_WORKER + "Worker exiting", V0_KILLING, *V0_HTTP_DOWN],
    # SIGTERM to the API server (docker stop): its handler first, then
    # build_async_engine_client's `engine_process.terminate()` (api_server.py:276): the
    # engine's `KeyboardInterrupt("MQLLMEngine terminated")`, its workers sent _TERMINATE
    "sigterm": [*V0_HTTP_DOWN, V0_WORKER + "Worker exiting"],
    # --disable-frontend-multiprocessing: the AsyncLLMEngine's loop cancelled at exit
    # (async_llm_engine.py:65)
    "in-process": [*V0_HTTP_DOWN,
                   "INFO 05-01 12:09:01 [async_llm_engine.py:65] Engine is gracefully shutting down."],
    # a worker killed while serving: the monitor's own lines, then uvicorn stops (the
    # watchdog's `should_exit`, launcher.py:107): still the crash
    "killed": ["ERROR 05-01 12:05:00 [multiproc_worker_utils.py:120] Worker VllmWorkerProcess "
               "pid 1301 died, exit code: -9", V0_KILLING.replace("12:09", "12:05"),
               *V0_HTTP_DOWN[1:], "INFO:     Finished server process [1200]"],
}


def test_0_8_s_v0_stop_after_ready_is_a_stop_and_its_crash_a_crash(tmp_path: Path):
    """V0's own stop lines (`Worker exiting`, `Killing local vLLM worker processes`, `Engine
    is gracefully shutting down.`) are info: the API server's launcher and uvicorn print
    theirs on SIGINT and SIGTERM alike, in 0.8.5's order above, so the stop reads `stopped`
    as V1's does; the monitor's lines after a worker's death (also after a stop's) leave
    the crash a crash.  (Helper adv102's review: held, no change.)"""
    ready = (BUILT / "vllm-085-v0-tp2.log").read_text(encoding="utf-8")
    got = {}
    for name, tail in V0_ENDS.items():
        path = tmp_path / f"{name}.log"
        path.write_text(ready + "\n".join(tail) + "\n", encoding="utf-8")
        st = replay_file(str(path)).state
        got[name] = (st.phase, st.crash.reason if st.crash else None)
    assert got == {"ctrl-c": ("stopped", None), "sigterm": ("stopped", None),
                   "in-process": ("stopped", None), "killed": ("crashed", "host_oom_killed")}


def test_0_8_s_v0_kv_refusal_is_kv_cache_too_small():
    """V0's own words for a KV cache that cannot hold one max-length request (worker.py:566
    `raise_if_cache_size_invalid`), logged by the engine process and raised again by the
    API server's `Engine process failed to start`.  Before: python_exception."""
    st = replay_file(str(BUILT / "vllm-085-v0-kv-too-small.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("kv_cache_too_small", "allocating"), st.crash
    assert "The model's max seq len (131072) is larger than" in st.crash.line
    assert st.phases_seen == ["launching", "loading_shards", "allocating", "crashed"]


def test_0_8_s_v1_engine_captures_silently():
    """0.8.5's V1: `(VllmWorker rank=N pid=N)` tags, no capture begin line nor bar; the
    silent capture is closed by `Graph capturing finished in 22 secs`."""
    reads_as_the_0_8_v1_startup("vllm-085-v1-tp2.log")


def reads_as_the_0_8_v1_startup(name: str):
    """`name`, 0.8.5's V1 `-tp 2` launch (or it in a later release's words): its phases, times
    and ready."""
    st = replay_file(str(BUILT / name)).state
    assert [sp.phase for sp in st.spans if not sp.beside] == [
        "launching", "loading_shards", "autotune", "allocating", "cuda_graph", "ready"]
    assert {k: round(v) for k, v in st.durations().items()} == {
        "launching": 25, "loading_shards": 42, "autotune": 43, "allocating": 4,
        "cuda_graph": 23}
    assert st.ready_in() == 137.0
    return st


# vLLM 0.9.2 (July 2025): 0.8.5's envelope (no decorate_logs), V1 by default, V0 beside it

def test_0_9_s_v1_capture_bar_behind_the_worker_tag_is_the_capture(tmp_path: Path):
    """0.9.2's V1 capture has no begin line (as 0.8.5's) but rank 0 draws V0's `Capturing CUDA
    graph shapes` bar (v1/worker/gpu_model_runner.py:2309, is_global_first_rank) on its stderr,
    behind `(VllmWorker rank=0 pid=N) ` (executor/multiproc_worker_utils.py:263 `_add_prefix`)
    and then tqdm's `\r` redraws, one physical line.  The 0.8.5 V1 launch in 0.9.2's words
    (`non-default args:`, cli_args.py:325; `Starting vLLM API server 0 on`): the same phases
    and times, and the capture now shows its progress mid-way (0.8.5: allocating, silent)."""
    st = reads_as_the_0_8_v1_startup(V1_092)
    assert (st.progress["cuda_graph"].current, st.progress["cuda_graph"].total) == (67, 67)
    text = (BUILT / V1_092).read_bytes().decode("utf-8")  # keeps tqdm's carriage returns
    cut = text.index("\r", text.index("| 30/67 "))
    mid_log = tmp_path / "mid-capture.log"
    mid_log.write_text(text[:cut] + "\n", encoding="utf-8")
    mid = replay_file(str(mid_log)).state
    assert mid.phase == "cuda_graph"
    assert (mid.progress["cuda_graph"].current, mid.progress["cuda_graph"].total) == (30, 67)


def test_0_9_s_neuron_loader_retry_is_no_crash():
    """The Neuron loader logs the error of a compiled artifact it cannot load at WARNING and
    compiles again (0.9.2 model_loader/neuronx_distributed.py:189 `logger.warning("Exception:
    %s", e)`, then `Failed to load the model from %s, Recompiling...`).  Before: base's
    exception_line read `] Exception: ` as python_exception.  A bare `Exception:` summary line or
    an ERROR record's still is one."""
    pack = load_pack("vllm")
    retry = ("(VllmWorker rank=0 pid=200) WARNING 07-01 10:00:00 [neuronx_distributed.py:189] "
             "Exception: [Errno 2] No such file or directory: '/models/neuron/model.pt'")
    assert line_meaning(pack, retry) == {"rule": None}
    for line in ("Exception: Error setting CUDA_VISIBLE_DEVICES: local range: [2, 4)",
                 "(VllmWorker rank=0 pid=200) ERROR 07-01 10:00:00 [core.py:522] Exception: boom"):
        assert line_meaning(pack, line)["crash"] == "python_exception", line


# vLLM 0.7.3 (February 2025): V0 by default (V1 with VLLM_USE_V1=1), the envelope before 0.8
# (`INFO 02-20 10:00:00 file.py:N] `, no `[`), only the workers tagged, in ANSI cyan

V1_073 = "vllm-073-v1-tp2.log"


def test_0_7_s_v1_engine_core_prints_untagged():
    """0.7.3's V1 (`VLLM_USE_V1=1`): the engine core prints untagged (no `(EngineCore_0 pid=N)`
    before 0.8), its workers `(VllmWorker rank=N pid=N)` in ANSI cyan (executor/
    multiproc_worker_utils.py:259 `_add_prefix`); the runner says `Loading model weights took`
    (v1/worker/gpu_model_runner.py:1060), the engine core `# GPU blocks:` (v1/core/
    kv_cache_utils.py:522); the capture is silent, closed by `Graph capturing finished`.  The
    0.8.5 V1 launch in 0.7.3's words: the same phases and times (the packs read it as they are)."""
    st = reads_as_the_0_8_v1_startup(V1_073)
    assert st.startups == 1 and st.crash is None
    assert "\x1b[1;36m(VllmWorker rank=0 pid=1500)\x1b[0;0m " in (BUILT / V1_073).read_text("utf-8")


V073_FATAL = {
    # the API server's SIGUSR1 handler (v1/engine/core_client.py:191): the engine core, or a
    # worker through it, hit an exception; it kills its own process tree
    "CRITICAL 02-20 14:01:52 core_client.py:191] Got fatal signal from worker processes, shutting "
    "down. See stack trace above for root cause issue.": "child_process_died",
    # the engine core's (v1/executor/multiproc_executor.py:49, its name misspelt): a worker
    # failed outside an RPC (its start, its message queue) and sent SIGUSR1
    "CRITICAL 02-20 14:01:52 multiproc_executor.py:49] MulitprocExecutor got fatal signal from "
    "worker processes, shutting down. See stack trace above for root cause issue.": "child_process_died",
    # the API server's output loop (v1/engine/async_llm.py:289), then kill_process_tree
    "ERROR 02-20 14:05:00 async_llm.py:289] EngineCore output handler hit an error: Resource "
    "temporarily unavailable": "child_process_died",
}


def test_0_7_s_v1_fatal_signal_lines_are_deaths():
    """0.7.3's V1 passes a death up by SIGUSR1, each process saying so in its own words (0.8
    replaced them: `Worker proc %s died unexpectedly`, `AsyncLLM output_handler failed.`).
    Before: no rule read any of them (the crash below had no `died` evidence).  A worker's profile-run OOM (tests/fixtures/built/vllm-073-v1-profile-oom.log:
    `WorkerProc hit an exception: %s`, the `%s` printed as is, multiproc_executor.py:374; the
    engine core's `EngineCore hit an exception: Traceback ...`, core.py:291, one record; the API
    server's fatal signal) is still the OOM, rank 1's, now with the death beside it."""
    pack = load_pack("vllm")
    got = {line: line_meaning(pack, line).get("crash") for line in V073_FATAL}
    assert got == V073_FATAL
    st = replay_file(str(BUILT / "vllm-073-v1-profile-oom.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during, st.crash.rank) == ("cuda_oom", "allocating", "rank=1")
    assert st.crash.died is not None and "Got fatal signal" in st.crash.died.line
    assert st.phases_seen == ["launching", "loading_shards", "autotune", "allocating", "crashed"]


V0_073 = "vllm-073-v0-start.log"


def test_0_7_s_v0_start_reads_in_v0_s_order():
    """0.7.3's default engine, V0, `vllm serve Qwen/Qwen2.5-32B-Instruct -tp 2`: the API server
    starts the engine process and builds its own config (api_server.py:209, :220), the engine
    (`Initializing a V0 LLM engine`, llm_engine.py:234) starts rank 1 (`(VllmWorkerProcess
    pid=N)` in ANSI cyan) and loads on both ranks (`Loading model weights took`, worker/
    model_runner.py:1115), profiles memory (worker.py:267, one record of three lines joined by
    `\\r\\n` and the prefix), sizes the cache (`# cuda blocks:`, executor_base.py:111), captures
    (model_runner.py:1434, rank 0's bar), `init engine ... took`, then the API server.  Read
    right by the packs as they are: V0 compiles nothing, the capture's 35 graphs counted."""
    st = replay_file(str(BUILT / V0_073)).state
    assert [sp.phase for sp in st.spans if not sp.beside] == [
        "launching", "loading_shards", "allocating", "cuda_graph", "ready"]
    assert {k: round(v) for k, v in st.durations().items()} == {
        "launching": 22, "loading_shards": 41, "allocating": 9, "cuda_graph": 22}
    assert st.ready_in() == 94.0
    assert st.startups == 1 and st.crash is None
    assert (st.progress["shards"].current, st.progress["shards"].total) == (17, 17)
    assert (st.progress["cuda_graph"].current, st.progress["cuda_graph"].total) == (35, 35)
    text = (BUILT / V0_073).read_bytes().decode("utf-8")
    assert "\x1b[1;36m(VllmWorkerProcess pid=1301)\x1b[0;0m INFO 02-20 10:01:08 worker.py:267] " \
           "Memory profiling takes 4.58 seconds\r\n" in text


def test_0_7_s_v0_cuda_oom_in_the_profile_run_and_in_the_capture():
    """V0's two out-of-memory places at start: rank 1's profile run (worker.py:229
    `profile_run`, its `Exception in worker VllmWorkerProcess while processing method
    determine_num_available_blocks.` and traceback behind its tag, multiproc_worker_utils.py:242;
    the engine process re-raises it from `output.get()` and logs it bare, `logger.exception(e)`,
    engine/multiprocessing/engine.py:400) and rank 0's capture (model_runner.py:1552, the
    engine process's record alone, rank 1 waits).  Both end in `Process SpawnProcess-1:` and the
    API server's `Engine process failed to start.` (api_server.py:233)."""
    got = {}
    for name in ("vllm-073-v0-profile-oom.log", "vllm-073-v0-capture-oom.log"):
        st = replay_file(str(BUILT / name)).state
        assert st.crash is not None and st.startups == 1, name
        got[name] = (st.crash.reason, st.crash.during, st.phases_seen[-2])
    assert got == {"vllm-073-v0-profile-oom.log": ("cuda_oom", "allocating", "allocating"),
                   "vllm-073-v0-capture-oom.log": ("cuda_oom", "cuda_graph", "cuda_graph")}
    st = replay_file(str(BUILT / "vllm-073-v0-profile-oom.log")).state
    # the cause is rank 1's own line (V0's worker tag names no rank: `(VllmWorkerProcess pid=N)`)
    assert st.crash.line.startswith("(VllmWorkerProcess pid=1301) ERROR 02-20 10:01:06 "
                                    "multiproc_worker_utils.py:242] torch.OutOfMemoryError: ")
    st = replay_file(str(BUILT / "vllm-073-v0-capture-oom.log")).state
    assert (st.progress["cuda_graph"].current, st.progress["cuda_graph"].total) == (2, 35)
