"""vLLM 0.34 load formats, launch flags and pipeline stages an operator meets (helper adv75),
built from 0.34's own log statements in its order (tests/fixtures/built/README.md).  Each
test is one finding: the verdict logwatch gave before, and the truth."""

from __future__ import annotations

from conftest import FIXTURES
from logwatch.app.replay import replay_file

BUILT = FIXTURES / "built"


def replay(name: str):
    return replay_file(str(BUILT / name)).state


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
