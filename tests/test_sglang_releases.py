"""Older SGLang releases a fleet still runs (0.5.10, 0.5.17: tests/inventory/), as a user
meets them: whole startups built from the release's own statements in its order
(tests/fixtures/built/README.md).  Each test is one finding of scoring the packs against
those releases' source: the verdict logwatch gave before, and the truth."""

from __future__ import annotations

from conftest import FIXTURES
from logwatch.app.replay import replay_file

BUILT = FIXTURES / "built"


def test_the_pool_too_small_assertion_is_a_kv_cache_too_small():
    """The scheduler's `assert max_req_len > 0, "Memory pool size is too small"` (0.5.10
    managers/tp_worker.py:306, 0.5.23 :425): the KV pool holds no room for one request.
    Before: `python_exception`, an engine bug to the operator; the memory split is what
    is wrong (the `kv_cache_too_small` fix: raise --mem-fraction-static)."""
    st = replay_file(str(BUILT / "sglang-0510-pool-too-small.log")).state
    assert st.crash is not None
    assert (st.crash.reason, st.crash.during) == ("kv_cache_too_small", "allocating"), st.crash
    assert st.crash.line == "AssertionError: Memory pool size is too small"
