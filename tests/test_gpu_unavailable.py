"""A GPU the engine cannot use (helper adv88's unseen-input trial): no GPU in the container, no
driver, a driver too old for the image's CUDA, an NVSwitch host without its fabric manager, a
CPU-only torch, a card the wheel has no kernels for.  Each is `gpu_unavailable` with its fix
(`meaning:`), in every engine, whether it comes before the launch line (a startup that crashed
at launch) or in a rank.  Before: `python_exception` (27 of 27 such logs), `during waiting`
with 0 startups where nothing came before it.  The strings are torch's, CUDA's, SGLang
0.5.23's and vLLM 0.34's own (paths of a pip install).  A GPU that works but is too old for the
quantization or the dtype asked is the command line (`bad_argument`), as is a logits processor
that touched CUDA."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from logwatch.app.replay import replay_file
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

SP = "/usr/local/lib/python3.12/dist-packages"
RUNPY = ["Traceback (most recent call last):",
         '  File "<frozen runpy>", line 198, in _run_module_as_main',
         f'  File "{SP}/sglang/launch_server.py", line 74, in <module>',
         "    server_args = prepare_server_args(sys.argv[1:])",
         f'  File "{SP}/torch/cuda/__init__.py", line 372, in _lazy_init']
NO_DRIVER = ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
             "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx")
TOO_OLD = ("RuntimeError: The NVIDIA driver on your system is too old (found version 12020). "
           "Please update your GPU driver by downloading and installing a new version from the "
           "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
           "https://pytorch.org to install a PyTorch version that has been compiled with your "
           "version of the CUDA driver.")
NO_KERNEL = ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on "
             "the device")
INFER = ("RuntimeError: Failed to infer device type, please set the environment variable "
         "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.")
ASYNC = ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
         "stacktrace below might be incorrect.")


def device_count(n: int, text: str) -> str:
    """torch's `_lazy_init` when cudaGetDeviceCount fails (torch/csrc/cuda/Module.cpp)."""
    return ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
            "functions before calling NumCudaDevices() that might have already set an error? "
            f"Error {n}: {text}")


# (name, the exception lines, a word of the fix): before SGLang's `server_args=`
BEFORE_LAUNCH = [
    ("no-driver", [NO_DRIVER], "--gpus"),
    ("no-gpus", ["RuntimeError: No CUDA GPUs are available"], "CUDA_VISIBLE_DEVICES"),
    # SGLang 0.5.23 utils/common.py:836 (ServerArgs sizing memory), :1125 (its device)
    ("no-nvidia-smi", ["RuntimeError: nvidia-smi not found. Ensure NVIDIA drivers are installed "
                       "and accessible."], "--gpus"),
    ("no-accelerator", ["RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or "
                        "platform plugin is available."], "--gpus"),
    ("driver-too-old", [TOO_OLD], "upgrade the driver"),
    ("803", [device_count(803, "system has unsupported display driver / cuda driver "
                               "combination")], "upgrade the driver"),
    ("804", [device_count(804, "forward compatibility was attempted on non supported HW")],
     "cuda-compat"),
    ("802", [device_count(802, "system not yet initialized")], "nvidia-fabricmanager"),
    ("cpu-torch", ["AssertionError: Torch not compiled with CUDA enabled"], "CUDA build"),
]


def replay(tmp_path: Path, lines: list[str], rules: str = "auto") -> dict:
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    st = replay_file(str(log), rules)
    doc = summary(pipeline_view(log.name, st))
    doc["meaning"] = st.state.crash.meaning if st.state.crash else ""
    return doc


@pytest.mark.parametrize("name,exc,fix", BEFORE_LAUNCH, ids=[c[0] for c in BEFORE_LAUNCH])
def test_a_gpu_the_launch_cannot_use_is_said_at_launch(tmp_path: Path, name: str,
                                                       exc: list[str], fix: str) -> None:
    doc = replay(tmp_path, RUNPY + exc)
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc
    assert fix in doc["meaning"], doc["meaning"]


def sglang_rank(exc: list[str]) -> list[str]:
    """SGLang 0.5.23: the launch line, then TP0's scheduler dying as it takes its GPU."""
    return ["[2026-12-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
            "tp_size=1, port=30000)",
            "[2026-12-01 10:00:04 TP0] Init torch distributed begin.",
            "[2026-12-01 10:00:04 TP0] Scheduler hit an exception: Traceback (most recent "
            "call last):",
            f'  File "{SP}/sglang/srt/managers/scheduler.py", line 3120, in '
            "run_scheduler_process", *exc, "",
            "[2026-12-01 10:00:05] Received sigquit from a child process. It usually means the "
            "child failed."]


def vllm_core(exc: list[str]) -> list[str]:
    """vLLM 0.34: the API server's lines, then the engine core's traceback, each line in its
    envelope, and the API server's announcement."""
    core = "(EngineCore pid=150) "
    err = core + "ERROR 12-01 10:00:05 [core.py:1110] "
    return ["(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:18] vLLM server version 0.34.0, "
            "serving model Qwen/Qwen3-8B",
            core + "INFO 12-01 10:00:04 [core.py:154] Initializing a V1 LLM engine (v0.34.0) "
                   "with config: model='Qwen/Qwen3-8B'",
            err + "EngineCore failed to start.", err + "Traceback (most recent call last):",
            *[err + x for x in exc],
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause "
            "above. Failed core proc(s): {}"]


@pytest.mark.parametrize("lines,rules,fix", [
    (sglang_rank([NO_DRIVER]), "sglang", "--gpus"),
    (sglang_rank([NO_KERNEL, ASYNC]), "sglang", "built for this GPU"),
    (sglang_rank(["RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA "
                  "runtime version", ASYNC]), "sglang", "upgrade the driver"),
    (sglang_rank(["torch.AcceleratorError: CUDA error: forward compatibility was attempted on "
                  "non supported HW", ASYNC]), "sglang", "cuda-compat"),
    (sglang_rank(["RuntimeError: CUDA error: no CUDA-capable device is detected", ASYNC]),
     "sglang", "--gpus"),
    (vllm_core([NO_KERNEL, ASYNC]), "vllm", "built for this GPU"),
    (vllm_core(["RuntimeError: No CUDA GPUs are available"]), "vllm", "CUDA_VISIBLE_DEVICES"),
    (vllm_core([TOO_OLD]), "vllm", "upgrade the driver"),
    # the report's repro, `--rules vllm`
    (["vLLM API server version 0.34.0", "Traceback (most recent call last):", NO_KERNEL],
     "vllm", "built for this GPU"),
], ids=["sg-no-driver", "sg-no-kernel", "sg-insufficient", "sg-forward-compat", "sg-no-device",
        "vllm-no-kernel", "vllm-no-gpus", "vllm-too-old", "vllm-report"])
def test_a_rank_that_finds_no_usable_gpu_says_so(tmp_path: Path, lines: list[str],
                                                 rules: str, fix: str) -> None:
    doc = replay(tmp_path, lines, rules)
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc
    assert fix in doc["meaning"], doc["meaning"]


@pytest.mark.parametrize("lead", [[], ["(APIServer pid=1) INFO 12-01 10:00:00 [utils.py:326] "
                                       "vLLM API server version 0.34.0"]],
                         ids=["alone", "after-version"])
def test_vllm_finding_no_platform_is_a_startup_crashed_at_launch(tmp_path: Path,
                                                                 lead: list[str]) -> None:
    """vLLM 0.34 config/device.py:47: no platform plugin found a GPU (its debug lines only say
    why), so `--device auto` has no device type.  Before: `python_exception`, and with nothing
    before it `during waiting`, 0 startups."""
    doc = replay(tmp_path, lead + ["(APIServer pid=1) Traceback (most recent call last):",
                                   '(APIServer pid=1)   File "/usr/local/bin/vllm", line 10, in '
                                   "<module>", "(APIServer pid=1) " + INFER], "vllm")
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc
    assert "--gpus" in doc["meaning"], doc["meaning"]


def test_trtllm_s_kernel_with_no_build_for_the_card_reads_as_the_other_engines(
        tmp_path: Path) -> None:
    """CUDA's `no kernel image` in TensorRT-LLM's executor is base's rule (the card and the
    build), its `Only SM100 is supported by ...` still the quantization chosen
    (bad_argument)."""
    fail = ("[12/20/2025-04:21:52] [TRT-LLM] [E] Failed to initialize executor on rank 0: ")
    doc = replay(tmp_path, [fail + "CUDA error: no kernel image is available for execution on "
                                  "the device"], "trtllm")
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]
    doc = replay(tmp_path, [fail + "Only SM100 is supported by FP4 block scale MOE"], "trtllm")
    assert doc["crash"]["reason"] == "bad_argument", doc["crash"]


CUDA_INIT_WARNING = [
    f"{SP}/torch/cuda/__init__.py:182: UserWarning: CUDA initialization: The NVIDIA driver on "
    "your system is too old (found version 12020). Please update your GPU driver by downloading "
    "and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
    "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been "
    "compiled with your version of the CUDA driver. (Triggered internally at "
    "/pytorch/c10/cuda/CUDAFunctions.cpp:119.)",
    "  return torch._C._cuda_getDeviceCount() > 0"]


def test_torch_s_cuda_initialization_warning_is_no_crash_but_the_reason_of_one(
        tmp_path: Path) -> None:
    """torch.cuda.is_available() warns `UserWarning: CUDA initialization: <why>` and returns
    False: a server that goes on to serve is ready (without the warning rule the driver rule
    read its words: `crashed`), and a crash that follows with no cause of its own is
    `gpu_unavailable` (before: python_exception)."""
    served = (FIXTURES / "built" / "sglang-0523-download.log").read_text().splitlines()
    doc = replay(tmp_path, served[:1] + CUDA_INIT_WARNING + served[1:])
    assert doc["phase"] == "ready" and doc["crash"] is None, doc
    doc = replay(tmp_path, sglang_rank(["ValueError: device_count must be positive, got 0"])[:1]
                 + CUDA_INIT_WARNING
                 + sglang_rank(["ValueError: device_count must be positive, got 0"])[1:])
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]


def test_a_logits_processor_that_touches_cuda_on_import_is_no_missing_gpu(
        tmp_path: Path) -> None:
    """vLLM 0.34 loads a logits processor with CUDA_VISIBLE_DEVICES emptied (utils/
    torch_utils.py:342 `guard_cuda_initialization`): one that initialises CUDA as it is
    imported meets torch's `No CUDA GPUs are available`, re-raised as `CUDA initialization is
    blocked.`, then the loader's own error.  The node's GPUs are fine: not gpu_unavailable
    (which the first exception alone reads), the plugin (bad_argument, with its fix)."""
    loader = "(EngineCore pid=150) ERROR 12-01 10:00:05 [loader.py:112] "
    chain = ["", "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):"]
    lines = vllm_core(["RuntimeError: No CUDA GPUs are available", *chain,
                       "RuntimeError: CUDA initialization is blocked.", *chain,
                       "RuntimeError: Failed to load 0th LogitsProcessor plugin "
                       "my_pkg.procs:Dummy"])
    lines.insert(2, loader + "Failed to load 0th LogitsProcessor plugin my_pkg.procs:Dummy: "
                             "CUDA initialization is blocked.")
    doc = replay(tmp_path, lines, "vllm")
    assert doc["crash"]["reason"] == "bad_argument", doc["crash"]
    assert "logits processor" in doc["meaning"], doc["meaning"]


SMI = "RuntimeError: nvidia-smi failed (exit code {}: {})."


@pytest.mark.parametrize("exc,fix", [
    # SGLang 0.5.23 utils/common.py:813: nvidia-smi's own words in ServerArgs, before
    # `server_args=`; its torch fallback's (`Found no NVIDIA driver`) on the same line
    ([SMI.format(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                    "driver. Make sure that the latest NVIDIA driver is installed and running")],
     "--gpus"),
    ([SMI.format(18, "Failed to initialize NVML: Driver/library version mismatch")[:-2]
      + "). torch.cuda.mem_get_info() fallback also failed: " + NO_DRIVER[len("RuntimeError: "):]],
     "reboot the host"),
    (["pynvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found"], "--gpus"),
    # Triton at import with no GPU backend (triton/runtime/driver.py)
    (["RuntimeError: 0 active drivers ([]). There should only be one."], "--gpus"),
    (["RuntimeError: Failed to get device count: CUDA_ERROR_NO_DEVICE: no CUDA-capable device "
      "is detected"], "--gpus"),
], ids=["smi-no-driver", "smi-mismatch", "nvml-no-library", "triton-no-driver", "cuda-python"])
def test_the_other_programs_words_for_no_usable_gpu(tmp_path: Path, exc: list[str],
                                                    fix: str) -> None:
    """nvidia-smi, NVML, Triton and cuda-python say it in their own words; a driver upgraded
    without a reboot has its own fix, though torch's `Found no NVIDIA driver` follows on the
    line.  Before: python_exception (`during waiting`, 0 startups), the mismatch the
    container's fix."""
    doc = replay(tmp_path, RUNPY + exc)
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc
    assert fix in doc["meaning"], doc["meaning"]


def test_trtllm_s_cpp_runtime_finding_no_gpu_is_gpu_unavailable(tmp_path: Path) -> None:
    """The C++ runtime's CUDA check (`CUDA runtime error in ::cudaGetDeviceCount(...): no
    CUDA-capable device is detected`) on the executor's crash line.  Before:
    python_exception."""
    doc = replay(tmp_path, ["[12/20/2025-04:21:52] [TRT-LLM] [E] Failed to initialize executor "
                            "on rank 0: [TensorRT-LLM][ERROR] CUDA runtime error in "
                            "::cudaGetDeviceCount(&count): no CUDA-capable device is detected "
                            "(/src/tensorrt_llm/cpp/include/tensorrt_llm/common/cudaUtils.h:265)"],
                 "trtllm")
    assert doc["crash"]["reason"] == "gpu_unavailable", doc["crash"]
    assert "--gpus" in doc["meaning"], doc["meaning"]


QUANT = ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum "
         "capability: 89. Current capability: 80.")


@pytest.mark.parametrize("lines,rules,fix", [
    # vLLM 0.34 config/vllm.py:893, as the API server builds its config (an A100 for FP8)
    (["(APIServer pid=1) Traceback (most recent call last):", "(APIServer pid=1) " + QUANT],
     "vllm", "compute capability 89 or more, and this one is 80"),
    # SGLang 0.5.23 model_loader/loader.py:260, in the rank loading the model
    (sglang_rank([QUANT]), "sglang", "compute capability 89 or more, and this one is 80"),
    # vLLM 0.34 compressed_tensors.py:411
    (vllm_core(["RuntimeError: Quantization scheme is not supported for the current GPU. Min "
                "capability: 89. Current capability: 75."]), "vllm", "this one is 75"),
    # vLLM 0.34 platforms/cuda.py:691 (a T4 for a bfloat16 model)
    (["(APIServer pid=1) Traceback (most recent call last):",
      "(APIServer pid=1) ValueError: Bfloat16 is only supported on GPUs with compute capability "
      "of at least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 "
      "instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half."],
     "vllm", "(Tesla T4)"),
], ids=["vllm-quant", "sglang-quant", "vllm-ct-scheme", "vllm-bf16"])
def test_a_quantization_or_dtype_the_gpu_is_too_old_for_is_the_command_line(
        tmp_path: Path, lines: list[str], rules: str, fix: str) -> None:
    """The GPU works; the command line (or the checkpoint) asks what it lacks: bad_argument,
    with the capabilities.  Before: python_exception."""
    doc = replay(tmp_path, lines, rules)
    assert doc["crash"]["reason"] == "bad_argument", doc["crash"]
    assert doc["startups"] == 1, doc
    assert fix in doc["meaning"], doc["meaning"]
