"""The ETA on real logs (scripts/eta_accuracy.py): how far predicted is from true remaining,
read at 25 / 50 / 75 % of launch -> ready and at each phase change, with `now` following
the log's own stamps.  The figures below were measured; a change that makes the ETA worse on
these logs fails here instead of going unnoticed (the README's "The ETA" paragraph quotes
the whole corpora's figures: `scripts/eta_accuracy.py`).
"""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("eta_accuracy", ROOT / "scripts" / "eta_accuracy.py")
assert spec is not None and spec.loader is not None
ea = importlib.util.module_from_spec(spec)
sys.modules["eta_accuracy"] = ea
spec.loader.exec_module(ea)

from logwatch.rules.pack import AgainSpec, load_pack, release_of  # noqa: E402

# one real start (trtllm-012, the only log of either corpus that goes from launch to ready
# with its lines stamped) and built ones of each engine and shape: a fixed list, so a new
# fixture does not move the figure
LOGS = ["trtllm-012.log", "built/trtllm-dynamo-worker.log", "built/vllm-034-default.log",
        "built/vllm-085-v1-tp2.log", "built/vllm-0191-tp2-cg-profile.log",
        "built/vllm-031-tp2-jit-warmup.log", "built/sglang-0523-download.log",
        "built/sglang-0523-pd-decode.log", "built/sglang-051-tp8-deepgemm.log",
        "built/sglang-0510-eagle-fastsafetensors.log"]


@pytest.fixture(scope="module")
def results() -> list:  # type: ignore[type-arg]
    out = [ea.measure(str(ROOT / "tests" / "fixtures" / name)) for name in LOGS]
    assert all(r is not None for r in out), [n for n, r in zip(LOGS, out) if r is None]
    return out


def test_first_start_figure_holds(results) -> None:  # type: ignore[no-untyped-def]
    """No history: measured 56 of 81 samples within 0.5x-2x (69 %), median ratio 1.25; 55
    before the base pack's `after_bar` (a finished capture bar read 0 s), 53 before vLLM's
    `again:`.  Bounds: at least 56 of 81, median between 1.0 and 1.4 (the first start errs
    long: the pack's typical launching and loading, 30 s and 120 s, for starts of a
    minute)."""
    s = ea.summary([x for r in results for x in r.first])
    assert s["samples"] == 81 and s["no_eta"] == 0, s
    assert sum(ea.within(x) for r in results for x in r.first) >= 56, s
    assert 1.0 <= s["median_ratio"] <= 1.4, s


def test_second_start_is_within_20_percent(results) -> None:  # type: ignore[no-untyped-def]
    """History from the first pass of the same log (tests/test_eta.py's promise, on real
    logs): every log's median ratio within 20 % of 1, every sample within 0.5x-2x."""
    for r in results:
        s = ea.summary(r.second)
        assert abs(s["median_ratio"] - 1.0) <= 0.20, (r.path, s)
        assert s["within_0.5x_2x"] == 1.0, (r.path, s)


def test_vllm_034_kv_estimate_counts_the_kernel_warmup(results) -> None:  # type: ignore[no-untyped-def]
    """The known miss: vLLM 0.34's first start at `Available KV cache memory` read 40 s left
    where 189 s were (x0.21): the JIT kernel warmup and FlashInfer's autotune after it, which
    0.34 runs by default (vllm.yaml `again:`), were not counted.  Now 100 s (x0.53)."""
    r = next(r for r in results if r.path.endswith("vllm-034-default.log"))
    kv = next(s for s in r.first if s.label == "-> allocating")
    assert kv.truth == pytest.approx(189.0) and kv.ratio >= 0.5, kv


def test_again_is_the_releases_that_run_it() -> None:
    """`again:` holds from the release that runs the phase again: vLLM 0.31's JIT warmup
    (kernel_warmup.py:172), not 0.28's (its `enable_jit_warmup` gates a few models' Triton
    warmups only) nor 0.8.5; not a launch that printed no version, nor `--enforce-eager`."""
    (spec_,) = load_pack("vllm").again
    assert spec_ == AgainSpec("autotune", "allocating", (0, 31), ("enforce_eager",))
    assert spec_.applies("0.34.0", {}) and spec_.applies("0.31.0rc1", {"model": "m"})
    assert not spec_.applies("0.28.0", {}) and not spec_.applies("0.8.5.post1", {})
    assert not spec_.applies(None, {})
    assert not spec_.applies("0.34.0", {"enforce_eager": True})
    assert release_of("v0.34.1") == (0, 34, 1) and release_of("dev") is None
    assert load_pack("sglang").again == () and load_pack("trtllm").again == ()


def test_eager_vllm_034_first_start_is_unchanged() -> None:
    """`--enforce-eager` turns 0.34's JIT warmup off (config/vllm.py:1715): its first start
    counts no second autotune (the pack's 60 s): 10 s left at its KV estimate, 7 s true."""
    r = ea.measure(str(ROOT / "tests" / "fixtures" / "built" / "vllm-034-eager.log"))
    assert r is not None
    kv = [s for s in r.first if s.phase == "allocating"]
    assert kv and all(math.isfinite(s.predicted) and s.predicted < 60.0 for s in kv), kv


@pytest.mark.parametrize("name,truth", [("sglang-051-tp8-deepgemm.log", 7.0),
                                        ("sglang-0523-deepep-deepgemm.log", 8.0),
                                        ("sglang-0410-dp-attention-deepgemm.log", 9.0)])
def test_a_finished_capture_bar_reads_the_rest_of_its_phase(name: str, truth: float) -> None:
    """SGLang's capture bar under the DeepGEMM JIT ends 7 to 9 s before ready (the capture's
    end lines, the HTTP server, the warmup request): a first start read 0 s there (x0.00).
    Now a tenth of the capture's typical 60 s, 6 s, within 0.5x-2x; every first-start
    reading of these starts in the capture has an ETA above 0."""
    r = ea.measure(str(ROOT / "tests" / "fixtures" / "built" / name))
    assert r is not None
    end = [s for s in r.first if s.phase == "cuda_graph"][-1]
    assert end.truth == pytest.approx(truth) and ea.within(end), end
    assert all(s.predicted > 0 for s in r.first if s.phase == "cuda_graph"), r.first


@pytest.mark.parametrize("name", ["vllm-034-dp2-slow-engine.log", "vllm-034-dp2-tp2-dense.log"])
def test_the_kv_commit_after_the_capture_counts_no_kernel_warmup(name: str) -> None:
    """vLLM 0.34 runs its JIT warmup between the KV estimate and the capture (gpu_worker.py
    `kernel_warmup` before `capture_model`): at the KV commit after the capture (`allocating`
    again, 5 s before ready) it is not ahead.  These starts print no warmup line, and a
    first start counted the warmup's 60 s there: 68 and 70 s read.  Now 8 and 10 s."""
    r = ea.measure(str(ROOT / "tests" / "fixtures" / "built" / name))
    assert r is not None
    commit = [s for s in r.first if s.phase == "allocating"][-1]
    assert commit.truth == pytest.approx(5.0) and commit.predicted <= 10.0, commit


@pytest.mark.parametrize("name", ["sglang-0523-dp2.log", "vllm-034-dp2-slow-engine.log"])
def test_a_replica_behind_is_timed_by_the_replicas_ahead(name: str) -> None:
    """`--dp 2` starts whose DP1 loads 40 s after DP0 (the built starts): the startup is
    where DP1 is, and a first start read the pack's typical times for what DP1 had still to
    run, which DP0 had already run in 15 s (SGLang: allocating, the capture) and 27 s (vLLM:
    torch.compile, the KV estimate, the capture): 100 s read where 22 and 18 s were (x4.55,
    x5.56), eight readings of the two above 2x.  Now DP0's times (eta.py `_replicas_took`):
    every reading after the launch's first (220 s at the load's begin, where no replica is
    ahead yet) within 0.5x-2x."""
    r = ea.measure(str(ROOT / "tests" / "fixtures" / "built" / name))
    assert r is not None
    later = r.first[1:]
    assert len(later) >= 5 and all(ea.within(s) for s in later), later


def test_a_dense_model_s_replica_behind_is_timed_by_its_workers_ahead() -> None:
    """vLLM 0.34 `-dp 2 -tp 2` with a dense model: every engine's workers are `Worker_TP0`,
    `Worker_TP1` (core.py `reconfigure_for_independent_dp_rank`), told apart only by their
    processes, whose lanes recorded where each got, not when: no replica was timed, and a
    first start read the pack's typical times for what engine 1 had still to run after its
    compile, which engine 0 had run in 28 s: 100 s at its KV estimate where 33 s were (x3.03),
    61.5 s in its compile at 75 % where 36.5 s were.  Now the workers' processes ahead are
    timed (State.lane_times): 31 s and 35.9 s, every reading from engine 1's compile on within
    0.5x-2x, and the log's first-start median ratio 1.64 -> 1.34.  Two servers of one compose
    stream (`TP0 in qwen-1`) are no replicas of one model: still none times the other."""
    r = ea.measure(str(ROOT / "tests" / "fixtures" / "built" / "vllm-034-dp2-tp2-dense.log"))
    assert r is not None
    kv = next(s for s in r.first if s.label == "-> allocating")
    assert kv.truth == pytest.approx(33.0) and 0.8 <= kv.ratio <= 1.25, kv
    late = [s for s in r.first if s.at >= 71.0]
    assert len(late) >= 5 and all(ea.within(s) for s in late), late
    two = ea.measure(str(ROOT / "tests" / "fixtures" / "built" / "sglang-0523-two-servers.log"))
    assert two is not None
    cap = next(s for s in two.first if s.label == "-> cuda_graph")
    assert cap.predicted == pytest.approx(60.0), cap     # the pack's capture, not qwen-1's
