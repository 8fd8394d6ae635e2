"""vLLM 0.34 load formats, launch flags and pipeline stages an operator meets (helper adv75),
built from 0.34's own log statements in its order (tests/fixtures/built/README.md).  Each
test is one finding: the verdict logwatch gave before, and the truth."""

from __future__ import annotations

import calendar
import re

import pytest
from conftest import FIXTURES
from logwatch.app.replay import replay_file
from logwatch.eta import startup_eta
from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack

BUILT = FIXTURES / "built"
STAMP = re.compile(r" (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")


def replay(name: str):
    return replay_file(str(BUILT / name)).state


def stamp_of(line: str, last: float) -> float:
    """The epoch seconds of a vLLM line's `MM-DD HH:MM:SS` (2026), else `last` (a bar)."""
    m = STAMP.search(line)
    if m is None:
        return last
    return float(calendar.timegm((2026, *(int(g) for g in m.groups()))))


def test_a_load_format_0_34_has_no_loader_for_is_a_bad_argument():
    """`--load-format bitsandbytes` (0.34 dropped its bitsandbytes and GGUF loaders): the
    worker asks for the loader in `init_device` (gpu_worker.py:544 -> model_loader
    `get_model_loader`: ValueError `Load format ... is not supported`) and the engine core
    fails to start.  Before: `python_exception during launching`, an engine bug to the
    operator; the command line is what is wrong."""
    st = replay("vllm-034-load-format-bnb.log")
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("bad_argument", "launching"), st.crash
    assert "Load format `bitsandbytes` is not supported" in st.crash.line


def test_the_fastsafetensors_bar_is_the_loading_s_progress_not_the_shard_count():
    """`--load-format fastsafetensors`, TP2: the fastsafetensors package draws its own bar
    (0.5 parallel_loader.py `_consumer_worker`), one step per batch of world-size files: 9
    for Qwen3-32B's 17.  Before: no rule matched it, so no progress while loading, and a
    first-start ETA that counted the typical load's 120 s where the bar had 17 s left (220 s
    in all, 117 s now).  It is the loading's clock, not a shard count."""
    st = replay("vllm-034-fastsafetensors.log")
    assert st.phase == "ready" and "shards" not in st.progress, st.progress.keys()
    bar = st.progress["file_batches"]
    assert (bar.current, bar.total) == (9, 9)
    lines = (BUILT / "vllm-034-fastsafetensors.log").read_text().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if "| 4/9 [" in x)
    pipe = LogPipeline(load_pack("vllm"))
    t = 0.0
    for x in lines[:at + 1]:
        t = stamp_of(x, t)
        pipe.feed(x.encode(), t)
    # 5 of 9 batches left at 0.30/s: the bar's ~17 s, then the pack's typical later phases
    eta = startup_eta(pipe.pack, pipe.state, t, {})
    later = sum(v for k, v in pipe.pack.typical_seconds.items()
                if pipe.pack.phases.index(k) > pipe.pack.phases.index("loading_shards"))
    assert eta < later + 30, (eta, later)


def _eta_at(name: str, marker: str) -> tuple[float, float]:
    """(a first start's ETA, the true seconds left) at the first line holding `marker` of a
    built log, `now` its own stamp."""
    lines = (BUILT / name).read_text().splitlines(keepends=True)
    ready = next(stamp_of(x, 0.0) for x in lines if "Starting vLLM server" in x)
    pipe, t = LogPipeline(load_pack("vllm")), 0.0
    for x in lines:
        t = stamp_of(x, t)
        pipe.feed(x.encode(), t)
        if marker in x:
            return startup_eta(pipe.pack, pipe.state, t, {}), ready - t
    raise AssertionError(marker)


def test_an_eager_launch_s_eta_counts_no_capture_ahead():
    """`--enforce-eager`: no torch.compile, no JIT warmup, no capture (0.34 config/vllm.py:1709,
    :1917); the KV cache sized, it serves.  Before: the first start's ETA in allocating
    counted the capture's typical 30 s (40 s at the profiling run's end, 7 s left); the
    pack's `follower.eager.skips` says no capture comes, for a head as for a follower."""
    eta, left = _eta_at("vllm-034-eager.log", "Initial profiling/warmup run took")
    assert left == 7.0 and eta <= 10.0, eta
    st = replay("vllm-034-eager.log")
    assert st.phase == "ready" and "cuda_graph" not in st.phases_seen
    # graphs on, the same point counts the capture still
    eta, left = _eta_at("vllm-034-default.log", "Initial profiling/warmup run took")
    assert eta >= 30.0, eta


def test_a_rejected_config_s_root_cause_is_pydantic_s_message_not_its_header(tmp_path):
    """`--quantization bitsandbytes` and a `.gguf` file (0.34 has neither): the API server's
    ModelConfig rejects them (config/model.py:1486; transformers_utils/config.py:948, no
    config.json), pydantic's `ValidationError: 1 validation error for ModelConfig` and under
    it the message.  Before: the root cause shown (watch, the page, replay) was the header,
    which names no argument; now the `Value error, ...` line, the header where pydantic
    gives no such line."""
    for name, said in (("vllm-034-quant-bnb.log", "Unknown quantization method: bitsandbytes"),
                       ("vllm-034-gguf.log", "Invalid repository ID or local directory")):
        st = replay(name)
        assert st.crash is not None and st.crash.reason == "bad_argument", (name, st.crash)
        assert said in st.crash.line and st.crash.line.lstrip().startswith("Value error, ")
    lines = (BUILT / "vllm-034-quant-bnb.log").read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if "validation error for ModelConfig" in x) + 1
    log = tmp_path / "int.log"
    log.write_text("\n".join(lines[:cut] + [
        "max_model_len", "  Input should be a valid integer, unable to parse string as an "
        "integer [type=int_parsing, input_value='40k', input_type=str]"]) + "\n")
    st = replay_file(str(log)).state
    assert st.crash is not None and st.crash.reason == "bad_argument"
    assert st.crash.line.endswith("1 validation error for ModelConfig")


@pytest.mark.parametrize("name, phase, crash", [
    ("vllm-034-pp2.log", "ready", None),
    ("vllm-034-pp2-ray.log", "ready", None),
    ("vllm-034-pp2-last-stage-oom.log", "crashed", ("cuda_oom", "allocating", "PP1")),
    ("vllm-034-pp2-capture-oom.log", "crashed", ("cuda_oom", "cuda_graph", "PP1")),
    ("vllm-034-compile-aot-hit.log", "ready", None),
    ("vllm-034-tensorizer-missing.log", "crashed", ("weight_loading_error", "loading_shards", "")),
    ("vllm-034-sleep.log", "ready", None),
    ("vllm-034-multimodal.log", "ready", None),
])
def test_the_shapes_that_held_keep_their_labels(name, phase, crash):
    """The built shapes logwatch read right when they were built (helper adv75; their truths
    in tests/fixtures/built/README.md): pipeline stages (mp and Ray over two nodes, the
    last stage out of memory profiling or capturing: PP1 named), a torch.compile AOT cache
    hit, a missing tensorizer file, sleep / wake / reload after ready (no phase moves back),
    a multimodal model's encoder profiling and processor warmup."""
    st = replay(name)
    assert st.phase == phase, (name, st.phase)
    got = st.crash and (st.crash.reason, st.crash.during, st.crash.rank)
    assert got == crash, (name, got)
    if phase == "ready":
        assert st.phases_seen == ["launching", "loading_shards", "autotune", "allocating",
                                  "cuda_graph", "ready"], st.phases_seen


def test_a_multimodal_encoder_s_profiling_is_allocating():
    """A multimodal model's profiling run (0.34 gpu_worker.py `determine_available_memory` ->
    model_runner `profile_run`) profiles its encoder first (model_runner.py:1075,
    `Encoder cache will be initialized with a budget of ...`), before the decoder's dummy run
    compiles.  An out-of-memory there (an image budget too large for the GPU) read `cuda_oom
    during autotune` before, torch.compile's phase (`-O0` would not help); now `during
    allocating`, the memory profiling it was."""
    st = replay("vllm-034-multimodal-encoder-oom.log")
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("cuda_oom", "allocating"), st.crash
    st = replay("vllm-034-multimodal.log")
    assert st.phase == "ready" and st.phases_seen[3] == "allocating", st.phases_seen
