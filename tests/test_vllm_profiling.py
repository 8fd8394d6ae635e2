"""vLLM 0.34's memory-profiling run and the torch.compile inside it.

0.34 compiles the model inside the first forward of the profiling run
(v1/worker/gpu_worker.py:732 `determine_available_memory` -> model_runner `profile_run`
-> `_dummy_run` -> compilation/decorators.py `__call__`): the compile ends
(`torch.compile took X s in total`, monitor.py:62), then the same dummy run executes
(decorators.py:711 `monitor_profiling_run`), the sampler's dummy run, and the KV cache is
sized (`Available KV cache memory`).  Without the AOT compile (`VLLM_DISABLE_COMPILE_CACHE=1`
turns it off: envs.py:400) the compile and the profiling run end together
(decorators.py:714 `torch.compile and initial profiling/warmup run together took`).
"""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES
from logwatch.app.replay import replay_file

BUILT = FIXTURES / "built"


def replay(path: Path):
    return replay_file(str(path)).state


def test_an_oom_in_the_profiling_run_after_the_compile_is_during_allocating():
    """Before (helper adv75's repro): `cuda_oom during autotune`, sending an operator to
    the compilation when the memory sizing failed; the 2 s after the compile were autotune."""
    st = replay(BUILT / "vllm-034-profile-oom.log")
    assert st.phase == "crashed"
    assert (st.crash.reason, st.crash.during) == ("cuda_oom", "allocating"), st.crash
    d = st.durations()
    assert d["autotune"] == 36.0 and d["allocating"] == 2.0, d     # 10:00:33-10:01:09-10:01:11


def test_the_compile_cache_off_line_ends_the_compile(tmp_path: Path):
    """`torch.compile and initial profiling/warmup run together took` matched no rule: the
    profiling run's end and the KV sizing were autotune, and an out-of-memory in the
    sampler's dummy run after it read `during autotune`."""
    lines = (BUILT / "vllm-034-compile-cache-off.log").read_text().splitlines()
    st = replay(BUILT / "vllm-034-compile-cache-off.log")
    assert st.phase == "ready"
    d = st.durations()
    assert d["allocating"] == 3.0 + 3.0 and d["autotune"] == 38.0 + 30.0, d
    end = next(i for i, ln in enumerate(lines) if "run together took" in ln)
    oom = ("(EngineCore pid=150) ERROR 12-01 10:01:12 [core.py:1757] {}")
    crashed = lines[:end + 1] + [oom.format(m) for m in (
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu/model_runner.py",'
        ' line 1090, in profile_run',
        "    self._dummy_sampler_run(sample_hidden_states)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB.")]
    path = tmp_path / "cache-off-oom.log"
    path.write_text("".join(x + "\n" for x in crashed))
    st = replay(path)
    assert (st.crash.reason, st.crash.during) == ("cuda_oom", "allocating"), st.crash
