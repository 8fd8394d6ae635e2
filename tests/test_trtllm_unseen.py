"""TensorRT-LLM failures the pack's 16 labelled logs do not show (helper adv87's unseen-input
trial): each test is a real start (trtllm-012, trtllm-001) cut where the failure happens,
then the lines TensorRT-LLM, its C++ runtime, TensorRT, Transformers and OpenMPI print for
it.  Each says the verdict before (36 statements, 27 right) and the truth."""

from __future__ import annotations

from conftest import FIXTURES
from logwatch.app.replay import replay_file

REAL = (FIXTURES / "trtllm-012.log").read_text(encoding="utf-8").split("\n")
ENGINE = (FIXTURES / "trtllm-001.log").read_text(encoding="utf-8").split("\n")
FAIL = "[12/20/2025-04:21:52] [TRT-LLM] [E] Failed to initialize executor on rank 0: "
TAIL = ["[12/20/2025-04:21:53] [TRT-LLM] [E] Executor worker returned error",
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/trtllm-serve", line 8, in <module>',
        "RuntimeError: Executor worker returned error"]


def replay_lines(tmp_path, lines: list[str]):
    path = tmp_path / "trtllm.log"
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return replay_file(str(path), "trtllm").state


def upto(marker: str, lines: list[str] = REAL) -> list[str]:
    """The real start up to and including its first line holding `marker`."""
    return lines[:next(i for i, ln in enumerate(lines) if marker in ln) + 1]


def test_the_cpp_runtime_s_failed_kv_cache_allocation_is_an_oom(tmp_path):
    """The C++ runtime's CUDA check (`CUDA runtime error in <call>: out of memory`) when the
    final KV-cache pool does not fit, on the executor's crash line and bare.  Before:
    `python_exception` (base's cuda_oom reads torch's wording only)."""
    cpp = "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, " \
          "mCudaStream->get()): out of memory (/src/tensorrt_llm/cpp/tensorrt_llm/runtime/" \
          "tllmBuffers.h:125)"
    frames = ["1       0x7f2b1c0b5e2a tensorrt_llm::common::throwRuntimeError(char const*, "
              "int, char const*) + 82"]
    head = upto("Estimated max memory in KV cache")
    for crash in ([FAIL + cpp] + frames + TAIL, ["RuntimeError: " + cpp]):
        st = replay_lines(tmp_path, head + crash)
        assert st.crash is not None, crash
        assert (st.crash.reason, st.crash.during) == ("cuda_oom", "allocating"), st.crash
        assert "cudaMallocAsync" in st.crash.line
    other = cpp.replace("out of memory", "an illegal memory access was encountered")
    st = replay_lines(tmp_path, head + [FAIL + other] + TAIL)
    assert st.crash is not None and st.crash.reason != "cuda_oom", st.crash


def test_a_model_architecture_trtllm_does_not_implement_is_the_command_line(tmp_path):
    """The PyTorch backend's model registry, and Transformers not knowing the checkpoint's
    model type: the model (or the versions) to change, said with the architecture.  Before:
    `python_exception`."""
    head = upto("Use 63.32 GB for model weights.")
    cases = {"Qwen3_5ForCausalLM": [FAIL + "Unknown architecture for AutoModelForCausalLM: "
                                    "Qwen3_5ForCausalLM"] + TAIL,
             "qwen3_5": ["ValueError: The checkpoint you are trying to load has model type "
                         "`qwen3_5` but Transformers does not recognize this architecture. This "
                         "could be because of an issue with the checkpoint, or because your "
                         "version of Transformers is out of date."]}
    for arch, crash in cases.items():
        st = replay_lines(tmp_path, head + crash)
        assert st.crash is not None and st.crash.reason == "bad_argument", st.crash
        assert f"({arch})" in st.crash.meaning, st.crash.meaning


def test_a_kernel_with_no_build_for_this_gpu_is_no_tuning_fault(tmp_path):
    """CUDA's `no kernel image is available` and TRT-LLM's `Only SM100 is supported by FP4
    block scale MOE` in the autotuner's first forward: the GPU, build or quantization to
    change.  Before: `autotune_failed` (the phase's default).  CUDA's is base's
    `gpu_unavailable` (the card and the build, as in SGLang and vLLM: test_gpu_unavailable.py),
    TRT-LLM's the quantization chosen (`bad_argument`)."""
    head = upto("[Autotuner] Autotuning process starts")
    for text, reason in (("CUDA error: no kernel image is available for execution on the device",
                          "gpu_unavailable"),
                         ("Only SM100 is supported by FP4 block scale MOE", "bad_argument")):
        st = replay_lines(tmp_path, head + [FAIL + text] + TAIL)
        assert st.crash is not None, text
        assert (st.crash.reason, st.crash.during) == (reason, "autotune"), st.crash
        assert "architecture" in st.crash.meaning


def test_mpirun_reporting_a_rank_it_lost_is_a_crash(tmp_path):
    """OpenMPI's `mpirun noticed that process rank N ... exited on signal 9 (Killed)` (the
    host's OOM killer while the weights load) ends the start.  Before: no crash, the start
    stayed `loading_shards`.  Another signal is a rank that died, and a rank's own cause
    printed above it (an NCCL error) stays the reason."""
    head = upto("Loading safetensors weights in parallel")
    mpi = "mpirun noticed that process rank 1 with PID 0 on node gpu-1 exited on signal {}."
    st = replay_lines(tmp_path, head + [mpi.format("9 (Killed)")])
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("host_oom_killed", "loading_shards")
    st = replay_lines(tmp_path, head + [mpi.format("11 (Segmentation fault)")])
    assert st.crash is not None and st.crash.reason == "child_process_died", st.crash
    nccl = FAIL + "[TensorRT-LLM][ERROR] Assertion failed: Failed, NCCL error " \
                  "../tensorrt_llm/runtime/ncclCommunicator.cpp:90 'unhandled system error'"
    st = replay_lines(tmp_path, head + [nccl, mpi.format("6 (Aborted)")])
    assert st.crash is not None and st.crash.reason == "nccl_error", st.crash


def test_an_engine_build_that_ran_out_of_memory_is_an_oom_and_one_that_recovered_serves(
        tmp_path):
    """The TensorRT-engine path (trtllm-001, 0.18) builds its engine; TensorRT's builder logs
    an allocation it could not make at [E] and may skip the tactic and go on.  A build that
    then fails (`Engine building failed, please check the error log.`) failed for memory.
    Before: `autotune_failed`; the same [E] lines before the engine loads are no crash."""
    head = upto("Building TRT-LLM engine", ENGINE)
    trt = ["[05/01/2025-14:44:40] [TRT] [E] [defaultAllocator.cpp::allocate::31] Error Code 1: "
           "Cuda Runtime (out of memory)",
           "[05/01/2025-14:44:40] [TRT] [E] [globWriter.cpp::makeResizableGpuMemory::433] "
           "Error Code 2: OutOfMemory (Requested size was 17179869184 bytes.)"]
    failed = ["Traceback (most recent call last):",
              '  File "/usr/local/lib/python3.12/dist-packages/tensorrt_llm/builder.py", '
              "line 1219, in build",
              "AssertionError: Engine building failed, please check the error log."]
    st = replay_lines(tmp_path, head + trt + failed)
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("cuda_oom", "autotune"), st.crash
    st = replay_lines(tmp_path, head + trt + ENGINE[len(head):])
    assert st.crash is None and st.phase == replay_lines(tmp_path, ENGINE).phase, st.phase
