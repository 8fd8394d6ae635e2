"""Every real log in tests/fixtures/ against what a careful reader concludes (NAME.expect.json).

The fixtures are public pastes (sources in each sidecar and in fixtures/README.md).  Each
file is replayed with `--rules auto`, as a user would, and through the live path too.
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import FIXTURES
from logwatch.view import pipeline_view
from logwatch.pipeline import LogPipeline
from logwatch.app.replay import replay_file
from logwatch.rules.locate import choose_pack
from logwatch.sinks.summary import summary

CASES = sorted(p.name[: -len(".expect.json")] for p in FIXTURES.glob("*.expect.json"))

# Where the label contradicts its own file, the file wins; each entry says why.
LABEL_ERRATA = {
    # The file shows `Loading safetensors checkpoint shards:   4% Completed | 1/28` and the
    # label's own notes say "rank 0's unprefixed shard bar (1/28)", yet shards_* are null.
    "vllm-015": {"shards_total": 28, "shards_loaded_last": 1},
    # Labelled weight_loading_error from the thread's title ("loading checkpoints error");
    # the file shows a 0/62 shard bar, 'WorkerProc failed to start.' and frames of worker
    # start-up only: the same evidence as sglang-213 and vllm-202, labelled python_exception.
    "vllm-024": {"crash_reason": "python_exception"},
    # Only hub download bars are in the window (no engine line): the engine is the thread's
    # (vLLM); from the file, auto-detection falls back to the default pack.
    "vllm-205": {"engine": "sglang"},
}
# The TensorRT-LLM labels (fixtures/README.md) call KV-cache sizing `loading_other`: DESIGN.md's
# `allocating`, the name the packs use.
LABEL_VOCABULARY = {"loading_other": "allocating"}
# What phases that only move forward give where a TensorRT-LLM label shows a revisit (the
# spans of a repeated phase are issue 27's): trtllm-001 builds a TensorRT engine (autotune),
# then its MPI worker loads that engine (loading_shards again).
FORWARD_ONLY = {
    "trtllm-001": {"final_phase": "autotune"},
}
# phases_seen is not part of the verdict; these labels count a phase no line shows.
PHASES_SEEN_DIFFER = {
    # the worker's second version banner and its engine load come after the engine build
    "trtllm-001": ["launching", "loading_shards", "autotune"],
    # the wrapper script's wget lines match no rule (its `Fetching 37 files` bar does: the
    # startup begins downloading, then trtllm-serve's launch); the second KV-sizing pass
    # (allocating -> autotune -> cuda_graph again) is not a revisit in forward-only phases
    "trtllm-012": ["downloading", "launching", "loading_shards", "allocating", "autotune",
                   "cuda_graph", "ready"],
    # labelled [allocating, ready]: no KV-cache or allocation line is in the window.
    "vllm-021": ["ready"],
    # the crash of the start before ('Address already in use'), then a new start: the
    # summary's phases are the latest startup's, which is launching
    "vllm-207": ["launching"],
}


def label(name: str) -> dict:
    """The sidecar as written, its phase names in the packs' vocabulary."""
    exp = json.loads((FIXTURES / f"{name}.expect.json").read_text())
    exp["final_phase"] = LABEL_VOCABULARY.get(exp["final_phase"], exp["final_phase"])
    exp["phases_seen"] = [LABEL_VOCABULARY.get(p, p) for p in exp["phases_seen"]]
    return exp


def expectation(name: str) -> dict:
    exp = label(name)
    exp.update(LABEL_ERRATA.get(name, {}))
    exp.update(FORWARD_ONLY.get(name, {}))
    return exp


def contains_either(a: str | None, b: str | None) -> bool:
    return bool(a and b and (a in b or b in a))


@pytest.mark.parametrize("name", CASES)
def test_fixture_verdict(name: str) -> None:
    exp = expectation(name)
    doc = summary(pipeline_view(f"{name}.log", replay_file(str(FIXTURES / f"{name}.log"))))
    assert doc["engine"] == exp["engine"]
    assert doc["phase"] == exp["final_phase"]
    assert doc["shards_total"] == exp["shards_total"]
    assert doc["shards_loaded"] == exp["shards_loaded_last"]
    if exp["crash_reason"] is None:
        assert doc["crash"] is None
    else:
        crash = doc["crash"]
        assert crash["reason"] == exp["crash_reason"]
        assert contains_either(crash["line"], exp["crash_line"]), crash["line"]
        lines = (FIXTURES / f"{name}.log").read_bytes().split(b"\n")
        physical = lines[crash["line_number"] - 1].decode("utf-8", "replace")
        assert crash["line"] in physical
        assert crash["excerpt"] and any(crash["line"] in x for x in crash["excerpt"])
    if exp["ready_line"]:
        assert contains_either(doc["ready_line"], exp["ready_line"])
    else:
        assert doc["ready_line"] is None
    assert doc["phases_seen"] == PHASES_SEEN_DIFFER.get(name, exp["phases_seen"])
    data = (FIXTURES / f"{name}.log").read_bytes()
    assert doc["lines"] == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


@pytest.mark.parametrize("name", CASES)
def test_live_path_agrees_with_replay(name: str) -> None:
    """Byte-by-byte-ish live feeding (exact stats) ends in the same verdict as replay."""
    data = (FIXTURES / f"{name}.log").read_bytes()
    pack = choose_pack("auto", data)
    pipe = LogPipeline(pack)
    now = time.time()
    for i in range(0, len(data), 97):
        pipe.feed(data[i : i + 97], now)
    pipe.finish(now)
    live = summary(pipeline_view("x", pipe))
    replayed = summary(pipeline_view("x", replay_file(str(FIXTURES / f"{name}.log"))))
    assert live == replayed


def _phase_moves(text: bytes, pack_name: str) -> list[tuple[str, str]]:
    from logwatch.machine import PhaseChanged
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack(pack_name))
    now = time.time()
    events = pipe.feed(text, now) + pipe.finish(now)
    return [(e.old, e.new) for e in events if isinstance(e, PhaseChanged)]


@pytest.mark.parametrize("name", CASES)
def test_phases_only_move_forward(name: str) -> None:
    """In every real log: each phase change goes forward in the pack's order (or ends the
    startup); a download inside weight loading is no loading_shards -> downloading flip.  The
    moves back: the server's launch after its wrapper's download (`prelaunch`: trtllm-012),
    and a line that begins a pass that comes back (a `begins` rule: TensorRT-LLM's memory
    profile after the estimation dry run's capture, trtllm-012, MARKERS.md §1)."""
    from logwatch.machine import PhaseChanged
    from logwatch.rules.pack import load_pack
    pack = load_pack(expectation(name)["engine"])
    order = pack.phases
    pipe = LogPipeline(pack)
    now = time.time()
    events = pipe.feed((FIXTURES / f"{name}.log").read_bytes(), now) + pipe.finish(now)
    begins = [r for r in pack.rules if r.begins]
    for e in events:
        if not isinstance(e, PhaseChanged):
            continue
        old, new = e.old, e.new
        if old in order and new in order and not (old in pack.prelaunch and new == order[0]) \
                and not any(r.phase == new and r.regex.search(e.line) for r in begins):
            assert order.index(new) > order.index(old), f"{name}: {old} -> {new}"


def test_sglang_download_inside_weight_loading_is_one_phase_with_its_own_time() -> None:
    """The simulator's SGLang startup downloads 3 files (7.5 s of the log's clock, tqdm bars
    without timestamps) right after `Load weight begin`, then loads 24 shards (15 s)."""
    from support.daemon import sim_texts
    from logwatch.rules.pack import load_pack
    text = "".join(sim_texts()).encode()
    moves = _phase_moves(text, "sglang")
    assert ("loading_shards", "downloading") not in moves, moves
    assert moves[:3] == [("waiting", "launching"), ("launching", "downloading"),
                         ("downloading", "loading_shards")], moves
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(text, time.time())
    d = pipe.state.durations()
    assert 6.0 <= d["downloading"] <= 9.0, d       # 7.5 s in truth
    assert 13.0 <= d["loading_shards"] <= 17.0, d  # 15.2 s in truth


def test_trtllm_pack_meets_its_acceptance_bar() -> None:
    """The TensorRT-LLM pack, judged against the labels as written (no entry above): final
    phase >= 15/16, crash verdict 16/16, crash reason >= 7/9, shards 16/16."""
    names = [n for n in CASES if n.startswith("trtllm-")]
    assert len(names) == 16
    final = verdict = reason = crashes = shards = 0
    for name in names:
        exp = label(name)
        doc = summary(pipeline_view(f"{name}.log", replay_file(str(FIXTURES / f"{name}.log"))))
        assert doc["engine"] == "trtllm", name
        final += doc["phase"] == exp["final_phase"]
        verdict += (doc["crash"] is None) == (exp["crash_reason"] is None)
        if exp["crash_reason"] is not None:
            crashes += 1
            reason += doc["crash"] is not None and doc["crash"]["reason"] == exp["crash_reason"]
        shards += (doc["shards_total"], doc["shards_loaded"]) == \
            (exp["shards_total"], exp["shards_loaded_last"])
    assert final >= 15 and verdict == 16 and shards == 16, (final, verdict, shards)
    assert crashes == 9 and reason >= 7, (reason, crashes)


def test_trtllm_log_is_not_taken_for_sglang_before_its_first_line() -> None:
    """Live `--rules auto` decides at the first pack that scores: the wrapper and `datasets`
    lines before trtllm-serve's first line (`[2025-12-20 04:19:59] INFO config.py:54: ...`)
    score for no engine, and the version banner makes it TensorRT-LLM."""
    from logwatch.rules.locate import detect_pack
    from logwatch.rules.pack import load_all_shipped
    lines = (FIXTURES / "trtllm-012.log").read_bytes().split(b"\n")
    packs = load_all_shipped()
    before = b"\n".join(lines[:37]) + b"\n"
    assert b"INFO config.py:54:" in before and b"TensorRT-LLM" not in before
    assert detect_pack(before, packs, complete_lines=True) is None
    found = detect_pack(b"\n".join(lines[:39]) + b"\n", packs, complete_lines=True)
    assert found is not None and found.name == "trtllm"


def test_trtllm_serve_refusing_its_command_line_is_its_crash() -> None:
    """click refusing trtllm-serve's options prints three lines and nothing of TensorRT-LLM
    (MARKERS.md section 2): under `--rules auto` its `Usage: trtllm-serve` line names the
    engine, so the refusal is read as TensorRT-LLM's `bad_argument` (before: taken for
    SGLang, `waiting`, no crash).  And C++'s `std::terminate` message under `  what():  `
    is read, not skipped as a traceback's quoted code: an MPI failure is `distributed_error`."""
    import tempfile
    from pathlib import Path
    from logwatch.app.replay import replay_file
    with tempfile.TemporaryDirectory() as d:
        click = Path(d) / "click.log"
        click.write_text("Usage: trtllm-serve serve [OPTIONS] MODEL\nTry 'trtllm-serve serve "
                         "--help' for help.\n\nError: No such option: --model\n")
        st = replay_file(str(click)).state
        assert st.crash is not None and st.crash.reason == "bad_argument"
        mpi = Path(d) / "mpi.log"
        mpi.write_text("[TensorRT-LLM] TensorRT-LLM version: 1.2.0\n"
                       "[12/01/2025-10:00:00] [TRT-LLM] [I] Using LLM with PyTorch backend\n"
                       "terminate called after throwing an instance of "
                       "'tensorrt_llm::common::TllmException'\n"
                       "  what():  [TensorRT-LLM][ERROR] Assertion failed: Failed: MPI error "
                       "/src/cpp/tensorrt_llm/common/mpiUtils.cpp:281 (MPI_ERR_OTHER)\n")
        st = replay_file(str(mpi)).state
        assert st.crash is not None and st.crash.reason == "distributed_error", st.crash


def test_a_bare_line_after_an_unstamped_bar_is_placed_at_the_bars_end() -> None:
    """TensorRT-LLM's weights load under tqdm bars without stamps and end with a bare print
    (`Model init total -- 49.14s`): that line is where the clock stands, after the 46 s bar,
    not at the stamp before the bar, so loading_shards takes its 46 s (trtllm-012 shows
    04:20:21 `Use 63.32 GB for model weights.` and 04:21:09 the next stamped line).
    allocating is both sizing passes: 3 s before the dry run, 2 s after its capture."""
    doc = summary(pipeline_view("x", replay_file(str(FIXTURES / "trtllm-012.log"))))
    assert doc["durations"]["loading_shards"] == pytest.approx(46.0, abs=1.0)
    assert doc["durations"]["allocating"] == pytest.approx(5.0, abs=1.0)
