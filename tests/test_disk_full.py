"""A full disk kills a start wherever it happens, and is its own reason, `disk_full`: a
checkpoint downloaded onto the root disk, torch.compile's / Triton's / a JIT's cache, a file
written at start.  Before, the crash read as whatever phase it was in (weight_loading_error
through the loader's frames, hub_download_failed, autotune_failed while compiling,
bad_argument inside SGLang's argument resolution), each a wrong fix.  /dev/shm filling stays
`shm_too_small`.  The words are the sources' own: CPython's ENOSPC, huggingface_hub 2.4.0's
`_check_disk_space` warning (file_download.py:773), the frames of SGLang 0.5.23 and
huggingface_hub 2.4.0 (tests/fixtures/built/sglang-0523-download-disk-full.log)."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from logwatch.rules.reasons import reason_text
from test_gpu_unavailable import replay
from test_origin import sglang_request_lines

SP = "/usr/local/lib/python3.11/dist-packages"
ENOSPC = "OSError: [Errno 28] No space left on device"
BUILT = FIXTURES / "built"


def built(name: str) -> list[str]:
    return (BUILT / name).read_text().splitlines()


def test_a_hub_download_that_fills_the_disk_is_disk_full(tmp_path: Path) -> None:
    """The built startup: SGLang 0.5.23's TP0 downloading Qwen3-32B (hub frames under the
    loader's `load_weights`), huggingface_hub's warning that the file does not fit, then the
    write failing with ENOSPC.  Before: `weight_loading_error during downloading` (the
    loader's frame the first hint)."""
    doc = replay(tmp_path, built("sglang-0523-download-disk-full.log"))
    assert doc["crash"]["reason"] == "disk_full", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("downloading", 1), doc
    assert doc["crash"]["line"] == ENOSPC
    assert "HF_HOME" in reason_text("disk_full")


def test_enospc_alone_is_the_cause_and_the_hub_warning_alone_a_hint(tmp_path: Path) -> None:
    """Without the warning the ENOSPC line names the crash by itself; with the warning and a
    download that then fails otherwise (no cause line of its own), the warning is the reason
    (the earliest hint, before the loader's and the hub's frames); with neither, the hub's
    frame (the network dropped the download)."""
    lines = built("sglang-0523-download-disk-full.log")
    no_warning = [x for x in lines if "UserWarning" not in x and "warnings.warn(" not in x]
    assert len(no_warning) == len(lines) - 2
    assert replay(tmp_path, no_warning)["crash"]["reason"] == "disk_full"
    other = [("httpx.RemoteProtocolError: peer closed connection without sending complete "
              "message body (incomplete chunked read)") if x == ENOSPC else x for x in lines]
    assert replay(tmp_path, other)["crash"]["reason"] == "disk_full"
    # neither: the frames say what failed, the hub's under the loader's (its load_weights
    # `yields`: tests/test_crash_precedence.py); before, weight_loading_error
    neither = [x for x in other if "UserWarning" not in x and "warnings.warn(" not in x]
    assert replay(tmp_path, neither)["crash"]["reason"] == "hub_download_failed"


INDUCTOR = [  # torch 2.x inductor writing its FX graph cache (frames' line numbers not checked)
    '  File "/usr/local/lib/python3.12/dist-packages/torch/_inductor/codecache.py", line 1421, '
    "in _save_graph",
    '  File "/usr/local/lib/python3.12/dist-packages/torch/_inductor/codecache.py", line 489, '
    "in write_atomic",
]


def vllm_compile_failing(exc: str) -> list[str]:
    """vLLM 0.34's TP2 startup (vllm-034-default.log) up to torch.compile, then a worker's
    compile failing: its traceback, the engine core's re-raise, the API server's."""
    start = built("vllm-034-default.log")[:22]
    w = "(Worker_TP0 pid=200) ERROR 12-01 10:01:05 [multiproc_executor.py:1223] "
    c = "(EngineCore pid=150) ERROR 12-01 10:01:05 [core.py:1757] "
    short = exc.split(": ", 1)[1]
    return start + [
        w + "WorkerProc hit an exception.", w + "Traceback (most recent call last):",
        *[w + f for f in INDUCTOR], w + exc,
        c + "EngineCore failed to start.", c + "Traceback (most recent call last):",
        c + f"RuntimeError: Worker failed with error '{short}', please check the stack trace "
            "above for the root cause",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}"]


@pytest.mark.parametrize("exc", [
    ENOSPC + ": '/root/.cache/vllm/torch_compile_cache/5f1d2c3a/rank_0_0/backbone/"
             "inductor_cache/fxgraph/ab/tmp3k2j1x'",
    "OSError: [Errno 122] Disk quota exceeded: '/tmp/torchinductor_root/triton/0/tmpq1'",
], ids=["enospc", "quota"])
def test_a_compile_cache_write_that_fails_is_disk_full(tmp_path: Path, exc: str) -> None:
    """torch.compile's cache write during vLLM's compile (inductor frames, autotune phase).
    Before: `autotune_failed` (the phase's default)."""
    doc = replay(tmp_path, vllm_compile_failing(exc), "vllm")
    assert doc["crash"]["reason"] == "disk_full", doc["crash"]
    assert doc["crash"]["during"] == "autotune", doc["crash"]


def test_a_full_disk_while_sglang_resolves_its_arguments_is_no_bad_argument(
        tmp_path: Path) -> None:
    """SGLang's argument resolution fetching the model's config from the hub
    (frame_server_args, a bad_argument hint, at launch) on a full disk: disk_full, a
    startup that crashed at launch."""
    lines = ["Traceback (most recent call last):",
             '  File "<frozen runpy>", line 198, in _run_module_as_main',
             f'  File "{SP}/sglang/launch_server.py", line 74, in <module>',
             f'  File "{SP}/sglang/srt/server_args.py", line 710, in prepare_server_args',
             f'  File "{SP}/sglang/srt/server_args.py", line 512, in __post_init__',
             f'  File "{SP}/huggingface_hub/file_download.py", line 464, in http_get',
             ENOSPC]
    doc = replay(tmp_path, lines, "sglang")
    assert doc["crash"]["reason"] == "disk_full", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc
    # the same frames with a bare ValueError are the hub's, raised in its deeper frame
    # (huggingface_hub 2.4.0 file_download.py:381, `http_get` refusing a file over 50 GB
    # without hf_xet; tests/test_crash_precedence.py); before, bad_argument.  Without the
    # hub's frame the resolution raised it: the command line
    doc = replay(tmp_path, lines[:-1] + ["ValueError: bad value"], "sglang")
    assert doc["crash"]["reason"] == "hub_download_failed", doc["crash"]
    doc = replay(tmp_path, lines[:-2] + ["ValueError: bad value"], "sglang")
    assert doc["crash"]["reason"] == "bad_argument", doc["crash"]


@pytest.mark.parametrize("line", [
    ENOSPC + ": '/dev/shm/psm_3f9a2c1e'",
    "RuntimeError: unable to write to file </torch_3207_2745210931_0>: No space left on "
    "device (28)",
    "RuntimeError: Insufficient space in /dev/shm for shm_broadcast: 1024 MiB required, 64 "
    "MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
], ids=["enospc-dev-shm", "torch-shm-tensor", "vllm-shm-broadcast"])
def test_dev_shm_filling_is_still_shm_too_small(tmp_path: Path, line: str) -> None:
    lines = built("sglang-0523-download-disk-full.log")
    lines = [line if x == ENOSPC else x for x in lines if "UserWarning" not in x
             and "warnings.warn(" not in x]
    doc = replay(tmp_path, lines)
    assert doc["crash"]["reason"] == "shm_too_small", doc["crash"]


def test_the_words_in_a_prompt_after_ready_are_no_crash(tmp_path: Path) -> None:
    """A client's prompt quoting the words (SGLang --log-requests, every form) is user
    content; the server's own ENOSPC after ready (a request's write) with no death after it
    is only a hint: the server serves on."""
    served = built("sglang-0523-download.log")
    prompt = f"why does my job fail with {ENOSPC}: '/data/x' and huggingface_hub's " \
             "UserWarning: Not enough free disk space to download the file."
    doc = replay(tmp_path, served + sglang_request_lines(prompt, "[2026-12-01 10:05:00] "))
    assert (doc["phase"], doc["crash"]) == ("ready", None), doc["crash"]
    doc = replay(tmp_path, served + [f"[2026-12-01 10:05:00 TP0] {ENOSPC}: '/tmp/trace.json'",
                                     "[2026-12-01 10:05:10 TP0] Decode batch, #running-req: 1, "
                                     "#token: 90, token usage: 0.00, cuda graph: True, gen "
                                     "throughput (token/s): 41.20, #queue-req: 0,"])
    assert (doc["phase"], doc["crash"]) == ("ready", None), doc["crash"]
