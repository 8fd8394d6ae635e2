"""Which clue names a crash when its traceback holds several: an outer frame that means "a
bare exception raised in here" (the argument resolution's, a phase's) gives way to a frame
deeper in the same call (`yields:`), which is nearer the raise and says what failed; a cause
line still wins over every frame, and another traceback's frames are no deeper call.

The chains are the engines' own (SGLang 0.5.23, vLLM 0.34.0, huggingface_hub 2.4.0,
transformers 5.19.0, read in their wheels): tests/fixtures/built/sglang-0523-gguf-download-cut.log
(a GGUF reference downloaded while the arguments resolve, cut short), the download under the
loader of built sglang-0523-download-disk-full.log, the DeepGEMM JIT inside the capture of
built sglang-0523-deepgemm-no-nvcc.log."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from logwatch.machine.crash import first_hint
from logwatch.machine.state import Crash, Evidence
from logwatch.rules.pack import PackError, load_pack
from test_gpu_unavailable import replay
from test_rulepack import minimal_pack, write

BUILT = FIXTURES / "built"
CUT = ("OSError: Consistency check failed: file should be of size 5027783488 but has size "
       "1853358080 (Qwen3-8B-Q4_K_M.gguf).")


def built(name: str) -> list[str]:
    return (BUILT / name).read_text().splitlines()


def test_a_download_cut_while_the_arguments_resolve_is_the_hub(tmp_path: Path) -> None:
    """`--model-path unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf`: the resolution downloads
    the file (model_path_hook.py:50 -> common.py:460 `hf_hub_download`) and the hub's
    `http_get` finds it short (file_download.py:491), no cause line of the hub's.  Before:
    `bad_argument` (frame_server_args, the earliest frame), the command line blamed for a
    network fault; still a startup that crashed at launch."""
    doc = replay(tmp_path, built("sglang-0523-gguf-download-cut.log"))
    assert doc["crash"]["reason"] == "hub_download_failed", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc
    assert doc["crash"]["line"] == CUT


def test_a_bare_exception_of_the_resolution_itself_is_still_the_command_line(
        tmp_path: Path) -> None:
    """The same traceback without the hub's frames, the resolution raising itself (a repo
    with several .gguf files, common.py:480): nothing is deeper than the argument
    resolution's frame, which names it."""
    lines = built("sglang-0523-gguf-download-cut.log")
    cut = next(i for i, x in enumerate(lines) if "huggingface_hub/" in x)
    own = ("ValueError: unsloth/Qwen3-8B-GGUF contains 2 .gguf files; name the one to serve:")
    doc = replay(tmp_path, lines[:cut] + [own])
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == ("bad_argument", "launching")
    assert doc["startups"] == 1


def test_a_network_fault_under_the_loader_is_the_hub(tmp_path: Path) -> None:
    """SGLang 0.5.23's TP0 downloading under its loader (`load_weights` ->
    `download_weights_from_hf` -> the hub's `http_get`), the connection dropped mid-body:
    the hub's frame, deeper, names it.  Before: `weight_loading_error` (the loader's frame
    the earliest), which sends on-call to the checkpoint's files."""
    lines = built("sglang-0523-download-disk-full.log")
    cut = [("httpx.RemoteProtocolError: peer closed connection without sending complete "
            "message body (incomplete chunked read)")
           if x == "OSError: [Errno 28] No space left on device" else x for x in lines
           if "UserWarning" not in x and "warnings.warn(" not in x]
    doc = replay(tmp_path, cut)
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == (
        "hub_download_failed", "downloading"), doc["crash"]


def test_a_jit_build_inside_the_capture_is_the_build(tmp_path: Path) -> None:
    """SGLang 0.5.23's DeepGEMM JIT compiles inside the capture's first batch
    (decode_cuda_graph_runner.py:598 -> deep_gemm_wrapper/compile_utils.py:256); its failure
    said in words of no rule (a bare RuntimeError) is the build's, as its own line is
    (`NVCC compiler is not executable`).  Before: `cuda_graph_capture_failed`."""
    lines = built("sglang-0523-deepgemm-no-nvcc.log")
    bare = ["RuntimeError: deep_gemm: kernel build returned 1" if "NVCC compiler is not" in x
            else x for x in lines]
    assert bare != lines
    assert replay(tmp_path, lines)["crash"]["reason"] == "kernel_compile_failed"
    doc = replay(tmp_path, bare)
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == (
        "kernel_compile_failed", "autotune"), doc["crash"]


def test_a_cause_line_still_wins_over_the_deeper_frame(tmp_path: Path) -> None:
    """The hub's own exception at the end of the cut download is the cause: it names the
    crash whichever frames came before it (cause lines over hints, as before)."""
    lines = built("sglang-0523-gguf-download-cut.log")
    enospc = [x if not x.startswith("OSError: Consistency") else
              "OSError: [Errno 28] No space left on device" for x in lines]
    assert replay(tmp_path, enospc)["crash"]["reason"] == "disk_full"


def _ev(reason: str, line: int, yields: bool = False) -> Evidence:
    return Evidence(reason, f"frame {line}", line, yields=yields)


def _crash(exceptions: list[int]) -> Crash:
    return Crash("python_exception", "launching", "", 0, 0.0, None,
                 exception_lines=exceptions)


def test_a_yielding_hint_gives_way_only_inside_its_own_traceback() -> None:
    """The hint after a yielding one wins where no exception line lies between them (one
    traceback); where one does, the later frame is another traceback's (another process, a
    chained exception) and the earliest hint stands; a hint that does not yield is never
    passed over; with nothing after it a yielding hint names the crash."""
    outer, inner = _ev("bad_argument", 10, yields=True), _ev("hub_download_failed", 20)
    assert first_hint([outer, inner], _crash([30])).reason == "hub_download_failed"
    assert first_hint([outer, inner], _crash([15])).reason == "bad_argument"
    assert first_hint([_ev("disk_full", 5), outer, inner], _crash([30])).reason == "disk_full"
    assert first_hint([outer], _crash([30])).reason == "bad_argument"
    both = [outer, _ev("weight_loading_error", 20, yields=True)]
    assert first_hint(both, _crash([30])).reason == "weight_loading_error"


def test_yields_is_a_hint_s_key(tmp_path: Path) -> None:
    """`yields` says how a hint ranks among hints: on a crash rule it is a pack error."""
    doc = minimal_pack()
    doc["rules"].append({"id": "boom", "pattern": "boom", "crash": "python_exception",
                         "yields": True, "samples": ["boom"]})
    with pytest.raises(PackError, match="yields"):
        load_pack(str(write(tmp_path, doc)))
    doc["rules"][-1] = {"id": "boom", "frame": ", in boom", "hint": "bad_argument",
                        "yields": True, "samples": ['  File "x.py", line 1, in boom']}
    assert load_pack(str(write(tmp_path, doc))).rule("boom").yields is True


MISSING = ("OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
           "'/models/Qwen3-8B'. Use `repo_type` argument if needed.")


def test_a_model_path_that_is_not_there_is_the_command_line(tmp_path: Path) -> None:
    """`vllm serve /models/Qwen3-8B` where nothing is mounted: the speculators check asks
    transformers for the config (arg_utils.py:2303 -> config.py:864), huggingface_hub
    refuses the path as a repo id before asking the hub (`HFValidationError`, the first of
    the chain) and transformers re-raises it (hub.py:595).  Before: `hub_download_failed`
    (the hub's error class the cause), though no hub was asked."""
    doc = replay(tmp_path, built("vllm-034-model-path-missing.log"))
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == ("bad_argument", "launching")
    assert doc["startups"] == 1 and doc["crash"]["line"] == MISSING
    assert "mount the path" in doc["meaning"]


def test_sglang_s_config_of_a_path_that_is_not_there_is_the_command_line(
        tmp_path: Path) -> None:
    """SGLang 0.5.23's ModelConfig, built while the arguments resolve, asks transformers for
    the config the same way (built sglang-0523-trust-remote-code.log's frames, the hub's
    traceback chained before them): the same words, the same reason, a startup that
    crashed at launch (nothing precedes the traceback).  Before: hub_download_failed."""
    vllm = built("vllm-034-model-path-missing.log")
    inner = vllm[2:vllm.index("The above exception was the direct cause of the following "
                              "exception:") + 2]
    lines = built("sglang-0523-trust-remote-code.log")
    end = next(i for i, x in enumerate(lines) if x.startswith("ValueError: "))
    doc = replay(tmp_path, inner + lines[:end - 1] + [MISSING])
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == ("bad_argument", "launching")
    assert doc["startups"] == 1


def test_a_repo_the_hub_does_not_know_stays_the_hub_s(tmp_path: Path) -> None:
    """A well-formed id the hub answers for (`RepositoryNotFoundError`, transformers'
    `is not a local folder and is not a valid model identifier`) was asked of the hub:
    hub_download_failed, as before."""
    lines = built("vllm-034-model-path-missing.log")
    asked = [x for x in lines if "HFValidationError" not in x]
    asked[-1] = ("OSError: Qwen/Qwen3-8B-typo is not a local folder and is not a valid model "
                 "identifier listed on 'https://huggingface.co/models'")
    assert replay(tmp_path, asked)["crash"]["reason"] == "hub_download_failed"


def _cache_denied(with_inner: bool) -> list[str]:
    """`vllm serve Qwen/Qwen3-8B` as a user who cannot write the hub's cache: huggingface_hub
    2.4.0's makedirs (file_download.py:1233) raises PermissionError, transformers 5.19
    re-raises it in its words (utils/hub.py:582), under built
    vllm-034-model-path-missing.log's outer frames."""
    src = built("vllm-034-model-path-missing.log")
    sp = "/usr/local/lib/python3.12/dist-packages"
    cause = src.index("The above exception was the direct cause of the following exception:")
    inner = ["Traceback (most recent call last):",
             f'  File "{sp}/transformers/utils/hub.py", line 537, in cached_files',
             "    hf_hub_download(",
             f'  File "{sp}/huggingface_hub/file_download.py", line 1233, in '
             "_hf_hub_download_to_cache_dir",
             "    os.makedirs(os.path.dirname(blob_path), exist_ok=True)",
             "PermissionError: [Errno 13] Permission denied: "
             "'/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B'", ""] + src[cause:cause + 2]
    outer = src[cause + 2:-3] + [
        f'  File "{sp}/transformers/utils/hub.py", line 582, in cached_files',
        "    raise OSError(",
        "OSError: PermissionError at /root/.cache/huggingface/hub/models--Qwen--Qwen3-8B when "
        "downloading Qwen/Qwen3-8B. Check cache directory permissions. Common causes: 1) "
        "another user is downloading the same model (please wait); 2) a previous download "
        "was canceled and the lock file needs manual removal."]
    return src[:2] + (inner if with_inner else []) + outer


@pytest.mark.parametrize("with_inner", [True, False])
def test_a_hub_cache_the_server_cannot_write_says_so(tmp_path: Path, with_inner: bool) -> None:
    """transformers' own line is the cause (`hub_cache_not_writable`): hub_download_failed
    with the cache's fix as its sentence.  Before: the same reason from the hub's frame
    with the hub's sentence (token, gated repo, network); without the hub's traceback (a
    paste of the last one) `bad_argument`, the engine-args frame the only hint."""
    doc = replay(tmp_path, _cache_denied(with_inner))
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == (
        "hub_download_failed", "launching"), doc["crash"]
    assert doc["crash"]["line"].startswith("OSError: PermissionError at /root/.cache/")
    assert "HF_HOME" in doc["meaning"]


def test_a_crash_that_goes_on_printing_tracebacks_keeps_a_bounded_state() -> None:
    """A crashed server spewing the same traceback for good: the exception lines the crash
    keeps for `first_hint` stop at MAX_EXCEPTION_LINES (its state and checkpoint bounded),
    and the reason stays the first traceback's."""
    from logwatch.machine.crash import MAX_EXCEPTION_LINES
    from logwatch.pipeline import LogPipeline
    pipe = LogPipeline(load_pack("sglang"))
    text = "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m')\n"
    text += ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n") * 2000
    pipe.feed(text.encode(), 1000.0)
    crash = pipe.state.crash
    assert crash is not None and crash.reason == "cuda_oom"
    assert len(crash.exception_lines) == MAX_EXCEPTION_LINES


HUB_CAUSES = [  # transformers 5.19 utils/hub.py's re-raises (first lines), where vLLM 0.34's
    # speculators check (engine/arg_utils.py:2303) reads the config before ModelConfig
    ("not-found-private-typo", "OSError: Qwen/Qwen3-8B-Instrct is not a local folder and is not "
     "a valid model identifier listed on 'https://huggingface.co/models'"),
    ("gated", "OSError: You are trying to access a gated repo."),
    ("unreachable", "OSError: We couldn't connect to 'https://huggingface.co' to load the files, "
     "and couldn't find them in the cached files."),
]


@pytest.mark.parametrize("line", [c[1] for c in HUB_CAUSES], ids=[c[0] for c in HUB_CAUSES])
def test_the_hub_s_causes_end_before_vllm_s_pydantic_message(tmp_path: Path, line: str) -> None:
    """vLLM 0.34 asks transformers for the config before its pydantic ModelConfig, whose
    `Invalid repository ID or local directory specified` drops the chain: a repo not found,
    private or typo'd, a gated one and the hub unreachable end there in transformers' words,
    each hub_download_failed (the last traceback alone, under the engine-args frame)."""
    lines = built("vllm-034-model-path-missing.log")
    cause = lines.index("The above exception was the direct cause of the following exception:")
    last = lines[:2] + lines[cause + 2:-1] + [line]
    doc = replay(tmp_path, last)
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == (
        "hub_download_failed", "launching"), doc["crash"]


def test_vllm_s_pydantic_message_names_the_model_path_it_read_no_config_at(
        tmp_path: Path) -> None:
    """What passes the speculators check and ends in pydantic's message is a path or repo
    that exists and holds no config.json (built vllm-034-gguf.log: a single .gguf file):
    bad_argument as before, now with the sentence that says so and, for releases before
    0.11 (no such check), that the log cannot tell the hub's causes from it."""
    doc = replay(tmp_path, built("vllm-034-gguf.log"))
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == ("bad_argument", "launching")
    assert "Invalid repository ID or local directory" in doc["crash"]["line"]
    assert doc["meaning"].startswith(
        "vLLM read no model config at /models/Qwen3-8B-Q4_K_M.gguf.")
    assert "the log cannot tell which" in doc["meaning"]


def _trtllm_autotune_crash(deeper: list[str]) -> list[str]:
    """trtllm-012.log (TensorRT-LLM 1.1, PyTorch backend) to FlashInfer's JIT of `norm` in
    the autotune, then a bare exception under the autotuner's frames and `deeper` ones."""
    head = (FIXTURES / "trtllm-012.log").read_text().splitlines()
    head = head[:next(i for i, x in enumerate(head) if "Loading JIT ops: norm" in x) + 1]
    sp = "/usr/local/lib/python3.12/dist-packages"
    return head + [
        "Traceback (most recent call last):",
        f'  File "{sp}/tensorrt_llm/_torch/pyexecutor/py_executor_creator.py", line 522, '
        "in create_py_executor",
        f'  File "{sp}/tensorrt_llm/_torch/autotuner.py", line 402, in choose_one',
        "    runner.forward(inputs, tactic=tac)",
        *deeper,
        "RuntimeError: Ninja build failed."]


def test_a_jit_build_under_tensorrt_llm_s_autotuner_is_the_build(tmp_path: Path) -> None:
    """trtllm.yaml's frame_trt_autotune `yields` as base's frame_autotune does: FlashInfer's
    JIT (flashinfer/jit/core.py build_and_load, cpp_ext.py run_ninja) deeper in the same
    traceback names the crash.  Before: autotune_failed, the autotuner's frame the earliest
    hint; without the deeper frames it still is."""
    fi = "/usr/local/lib/python3.12/dist-packages/flashinfer/jit"
    jit = [f'  File "{fi}/core.py", line 309, in build_and_load',
           f'  File "{fi}/cpp_ext.py", line 344, in run_ninja',
           "    raise RuntimeError(msg) from e"]
    doc = replay(tmp_path, _trtllm_autotune_crash(jit), "trtllm")
    assert doc["crash"]["reason"] == "kernel_compile_failed", doc["crash"]
    assert replay(tmp_path, _trtllm_autotune_crash([]), "trtllm")["crash"]["reason"] == \
        "autotune_failed"
    assert load_pack("trtllm").rule("frame_trt_weights").yields
