"""vLLM 0.34's multi-modal encoder on its own (helper adv83): an encoder-only instance
(`--mm-encoder-only`) and a compiled encoder (`compile_mm_encoder`), each built from 0.34's
own log statements in its order (tests/fixtures/built/README.md).  Each test is one finding:
what logwatch read before, and the truth from the log's stamps."""

from __future__ import annotations

from conftest import FIXTURES
from logwatch.app.replay import replay_file
from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack

BUILT = FIXTURES / "built"


def replay(name: str):
    return replay_file(str(BUILT / name)).state


def test_an_encoder_only_instance_s_capture_is_cuda_graph():
    """`--mm-encoder-only -cc.cudagraph_mm_encoder=true`: no KV cache, so no profiling run
    (0.34 v1/engine/core.py `_initialize_kv_caches`: `has_kv_cache` false); the JIT warmup,
    then the encoder's graphs, captured with no bar and no begin line (encoder_cudagraph.py
    warns only past 64 graphs) and timed by `Encoder graph capturing finished in 40 secs`
    (mm_encoder_model_runner.py:95).  Before: that line matched no rule, the 40 s capture
    was autotune (55 s) and no cuda_graph was seen; now its seconds are cuda_graph."""
    st = replay("vllm-034-mm-encoder-only.log")
    assert st.phase == "ready"
    assert st.phases_seen == ["launching", "loading_shards", "autotune", "cuda_graph", "ready"]
    d = st.durations()
    assert (d["autotune"], d["cuda_graph"]) == (14.0, 43.0), d


def test_an_encoder_only_capture_reads_autotune_until_its_end_line():
    """While it captures, an encoder-only instance has said nothing since the JIT warmup:
    the phase shown live is autotune until `Encoder graph capturing finished`, which then
    relabels its seconds (a rule cannot see a capture no line announces)."""
    pipe = LogPipeline(load_pack("vllm"))
    lines = (BUILT / "vllm-034-mm-encoder-only.log").read_bytes().splitlines(keepends=True)
    end = next(i for i, x in enumerate(lines) if b"Encoder graph capturing finished" in x)
    for i, line in enumerate(lines[:end + 1]):
        pipe.feed(line, now=float(i))
        if i == end - 1:
            assert pipe.state.phase == "autotune", pipe.state.phase
    assert pipe.state.phase == "cuda_graph"


def test_the_decoder_s_compile_after_a_compiled_encoder_is_autotune():
    """`compile_mm_encoder`: the profiling run profiles the encoder first (encoder_runner.py
    :131), each encoder class compiling and running once under its own tag
    (`[Qwen2_5_VisionBlock] Starting torch.compile` .. `Initial profiling/warmup run took`,
    compilation/decorators.py:434 `_compile_tag`), then the decoder compiles under
    `[backbone] ` (backends.py:808 `model_tag`).  Before: the first encoder class's
    profiling run read allocating, and the other encoder compiles and the decoder's (34 s)
    stayed there: allocating 56 s in all, autotune 34 s; `[backbone] torch.compile took`
    did not end the compile.  Now autotune 1m21s (15 s of encoder compiles, the decoder's
    34 s, the JIT warmup's 30 s), allocating 9 s (the profiling run, the KV commit)."""
    st = replay("vllm-034-compile-mm-encoder.log")
    assert st.phase == "ready"
    d = st.durations()
    assert (d["autotune"], d["allocating"]) == (81.0, 9.0), d
