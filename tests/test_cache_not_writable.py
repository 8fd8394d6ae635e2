"""A compiled-kernel cache the server cannot write (a read-only home or root filesystem in a
container, a cache another user made) is `kernel_compile_failed` with the cache's fix as its
sentence (base.yaml `jit_cache_not_writable`): CPython's EACCES / EROFS on the path each
cache's makedirs names.  Before, vLLM 0.34's torch.compile cache (compilation/backends.py:1096),
inductor's and Triton's read `autotune_failed` (the phase's), and FlashInfer's, made at its
import (jit/core.py:18), `kernel_compile_failed during waiting` with 0 startups.  The hub's
cache keeps its own rule (`hub_cache_not_writable`, hub_download_failed)."""
from __future__ import annotations

from pathlib import Path

import pytest

import test_disk_full
from test_gpu_unavailable import replay

SP = "/usr/local/lib/python3.12/dist-packages"
EACCES = "PermissionError: [Errno 13] Permission denied: "
EROFS = "OSError: [Errno 30] Read-only file system: "
VLLM_CACHE = [  # vLLM 0.34 VllmBackend.__call__ making its torch.compile cache dir
    f'  File "{SP}/vllm/compilation/backends.py", line 1096, in __call__',
    "    os.makedirs(cache_dir, exist_ok=True)",
    '  File "<frozen os>", line 215, in makedirs',
    '  File "<frozen os>", line 225, in makedirs',
]
TRITON = [  # Triton's FileCacheManager making its cache dir (line numbers not checked)
    f'  File "{SP}/triton/runtime/cache.py", line 62, in __init__',
    "    os.makedirs(self.cache_dir, exist_ok=True)",
    '  File "<frozen os>", line 225, in makedirs',
]
FLASHINFER_IMPORT = [  # SGLang 0.5.23 importing FlashInfer, whose jit/core.py makes its dir
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    f'  File "{SP}/sglang/launch_server.py", line 7, in <module>',
    f'  File "{SP}/flashinfer/__init__.py", line 23, in <module>',
    f'  File "{SP}/flashinfer/jit/core.py", line 18, in <module>',
    "    os.makedirs(jit_env.FLASHINFER_WORKSPACE_DIR, exist_ok=True)",
    '  File "<frozen os>", line 225, in makedirs',
]


def compile_failing(frames: list[str], exc: str) -> list[str]:
    """test_disk_full's vLLM 0.34 TP2 startup failing in torch.compile, with these frames."""
    saved = test_disk_full.INDUCTOR
    test_disk_full.INDUCTOR = frames
    try:
        return test_disk_full.vllm_compile_failing(exc)
    finally:
        test_disk_full.INDUCTOR = saved


@pytest.mark.parametrize("frames,exc", [
    (VLLM_CACHE, EACCES + "'/root/.cache/vllm'"),
    (VLLM_CACHE, EROFS + "'/root/.cache/vllm'"),
    (TRITON, EACCES + "'/root/.triton'"),
    (test_disk_full.INDUCTOR, EROFS + "'/tmp/torchinductor_root/fxgraph'"),
], ids=["vllm-eacces", "vllm-erofs", "triton", "inductor"])
def test_a_compile_cache_not_writable_is_the_cache_not_the_autotune(
        tmp_path: Path, frames: list[str], exc: str) -> None:
    doc = replay(tmp_path, compile_failing(frames, exc), "vllm")
    assert doc["crash"]["reason"] == "kernel_compile_failed", doc["crash"]
    assert doc["crash"]["during"] == "autotune"
    assert doc["crash"]["line"].endswith(exc)
    path = exc.split(": ", 2)[2].strip("'")
    assert doc["meaning"].startswith(f"The kernel / compile cache {path} is not writable")
    assert "TRITON_CACHE_DIR" in doc["meaning"]


@pytest.mark.parametrize("exc", [EACCES, EROFS], ids=["eacces", "erofs"])
def test_flashinfer_s_cache_not_writable_at_import_is_a_startup_that_crashed_at_launch(
        tmp_path: Path, exc: str) -> None:
    doc = replay(tmp_path, FLASHINFER_IMPORT + [exc + "'/root/.cache/flashinfer'"], "sglang")
    assert (doc["phase"], doc["startups"]) == ("crashed", 1)
    assert (doc["crash"]["reason"], doc["crash"]["during"]) == (
        "kernel_compile_failed", "launching")
    assert "FLASHINFER_WORKSPACE_BASE" in doc["meaning"]


def test_the_hub_s_cache_and_a_full_disk_keep_their_reasons(tmp_path: Path) -> None:
    """A PermissionError on the hub's cache is not a kernel cache's; ENOSPC in the
    torch.compile cache stays disk_full (its rule comes first)."""
    hub = EACCES + "'/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B'"
    assert replay(tmp_path, compile_failing(VLLM_CACHE, hub), "vllm")["crash"]["reason"] \
        == "autotune_failed"
    full = "OSError: [Errno 28] No space left on device: '/root/.cache/vllm/torch_compile_cache'"
    assert replay(tmp_path, compile_failing(VLLM_CACHE, full), "vllm")["crash"]["reason"] \
        == "disk_full"


def test_a_read_only_hub_cache_has_the_cache_s_sentence(tmp_path: Path) -> None:
    """transformers 5.19 re-raises the hub cache's EROFS as it came (utils/hub.py:586, not
    rewrapped as its PermissionError is): hub_download_failed as before, now with the
    cache's fix (HF_HOME) as its sentence, not the hub's token or network."""
    hub = [f'  File "{SP}/transformers/utils/hub.py", line 537, in cached_files',
           f'  File "{SP}/huggingface_hub/file_download.py", line 1233, in '
           "_hf_hub_download_to_cache_dir",
           "    os.makedirs(os.path.dirname(blob_path), exist_ok=True)"]
    exc = EROFS + "'/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B'"
    doc = replay(tmp_path, FLASHINFER_IMPORT[:3] + hub + [exc], "vllm")
    assert doc["crash"]["reason"] == "hub_download_failed", doc["crash"]
    assert "HF_HOME" in doc["meaning"]
