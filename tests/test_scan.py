"""Block scan (Matcher.scan) against its definition: `match_line` on every line of `iter_lines`.

Exact mode must yield exactly the per-line reference's (rule id, text, line_number) sequence.
Collapse mode must yield the same sequence with every run of consecutive stats-rule hits (no
other hit in between) reduced to its first and last hit.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from logwatch.lines import Block, Framer, iter_lines
from logwatch.rules.matcher import Matcher
from logwatch.rules.pack import load_pack

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                       HealthCheck.data_too_large])
# costly to shrink: a failure is reported as found (the deterministic cases below are minimal)
NO_SHRINK = dict(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])
PACKS = ["sglang", "vllm", "trtllm"]
FIXTURE_FILES = sorted(FIXTURES.glob("*.log"))


@pytest.fixture(autouse=True, scope="module")
def _unbounded_patterns():
    """The scan and the reference must agree line for line; the per-line pattern budget is a
    guard against hostile input, not part of that definition, so a loaded machine must not
    make one of them time out where the other did not (tests that test the budget set their own)."""
    import logwatch.rules.matcher as matcher_mod
    saved = matcher_mod.PATTERN_TIMEOUT, matcher_mod.LINE_BUDGET
    matcher_mod.PATTERN_TIMEOUT = matcher_mod.LINE_BUDGET = 60.0
    yield
    matcher_mod.PATTERN_TIMEOUT, matcher_mod.LINE_BUDGET = saved


@functools.lru_cache(maxsize=None)
def matcher(name: str) -> Matcher:
    return Matcher(load_pack(name))


@functools.lru_cache(maxsize=None)
def genlog(seed: int, *extra: str, lines: int = 3000) -> bytes:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "genlog.py"), "--lines", str(lines),
         "--seed", str(seed), *extra],
        capture_output=True, check=True).stdout


GENLOG_ARGS = {
    1: ("--restarts", "1", "--crash", "oom"),
    2: ("--tp", "4", "--dp", "2", "--crash", "nccl"),
    3: (),
}


def block(data: bytes, offset: int = 0, line_number: int = 1) -> Block:
    return Block(data, offset, line_number, 0.0)


def framed(data: bytes) -> Block:
    """A block as the pipeline gets it: through the Framer (which removes ANSI codes, NULs)."""
    from logwatch.lines import Framer
    f = Framer()
    b = f.feed(data, 0.0)
    assert b is not None and f.flush(0.0) is None
    return b


def reference(m: Matcher, blk: Block) -> list[tuple]:
    """(rule, text, line_number, offset) of every line `match_line` matches, in order."""
    out = []
    for ln in iter_lines(blk, m.max_line_bytes):
        found = m.match_line(ln.text)
        if found is not None:   # a hit's text is the line without its wrappers (prefixes)
            out.append((found[0], m.unwrap(ln.text)[0], ln.line_number, ln.offset))
    return out


def key(hits) -> list[tuple[str, str, int]]:
    return [(h[0].id, h[1], h[2]) for h in hits]


def scanned(m: Matcher, blk: Block, collapse: bool = False) -> list[tuple]:
    return [(h.rule, h.text, h.line_number, h.offset) for h in m.scan(blk, collapse)]


def collapse_runs(hits: list[tuple]) -> list[tuple]:
    """Keep only the first and last hit of each run of consecutive stats-rule hits."""
    out: list[tuple] = []
    i = 0
    while i < len(hits):
        if not hits[i][0].stats:
            out.append(hits[i])
            i += 1
            continue
        j = i
        while j + 1 < len(hits) and hits[j + 1][0].stats:
            j += 1
        out.append(hits[i])
        if j > i:
            out.append(hits[j])
        i = j + 1
    return out


def check_block(m: Matcher, blk: Block) -> list[tuple]:
    """Assert exact and collapse mode against the reference; return the reference."""
    ref = reference(m, blk)
    # a fresh Block each time: scan records the newline count on the block
    exact = scanned(m, Block(blk.data, blk.offset, blk.line_number, 0.0))
    assert key(exact) == key(ref)
    assert [h[3] for h in exact] == [h[3] for h in ref]  # offsets too
    collapsed = scanned(m, Block(blk.data, blk.offset, blk.line_number, 0.0), True)
    assert key(collapsed) == key(collapse_runs(ref))
    return ref


def framed_blocks(data: bytes, size: int) -> list[Block]:
    f = Framer()
    out = []
    for i in range(0, len(data), size):
        b = f.feed(data[i:i + size], 0.0)
        if b is not None:
            out.append(b)
    b = f.flush(0.0)
    if b is not None:
        out.append(b)
    return out


# ----------------------------------------------------------------------------------------------
# exact mode on real logs

@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_exact_scan_equals_reference_on_fixture(path, pack):
    m = matcher(pack)
    data = path.read_bytes()
    ref = reference(m, block(data))
    got = scanned(m, block(data))
    assert key(got) == key(ref)
    assert [h[3] for h in got] == [h[3] for h in ref]
    if path.stem.startswith(pack):
        assert ref, "a fixture of this engine fires at least one rule"


@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_exact_scan_equals_reference_on_framed_fixture(path, pack):
    """The same through the Framer, in small chunks (blocks start mid physical line), as
    through the Framer in one piece: the Framer's own rewriting (a terminal copy's fold
    padding rejoined, lines.py `unfold_padding`: vllm-213's wrapped `Initializing a V0 LLM
    engine` line) is not the chunking's."""
    m = matcher(pack)
    data = path.read_bytes()
    whole = [k for b in framed_blocks(data, len(data)) for k in key(reference(m, b))]
    pieces = []
    for b in framed_blocks(data, 37):
        got = scanned(m, b)
        assert key(got) == key(reference(m, b))
        pieces += key(got)
    assert pieces == whole


@pytest.mark.integration
@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("seed", sorted(GENLOG_ARGS))
def test_exact_scan_equals_reference_on_genlog(seed, pack):
    m = matcher(pack)
    data = genlog(seed, *GENLOG_ARGS[seed])
    ref = reference(m, block(data))
    got = scanned(m, block(data))
    assert key(got) == key(ref)
    assert [h[3] for h in got] == [h[3] for h in ref]
    if pack == "sglang":
        ids = {h[0].id for h in ref}
        assert {"server_args", "load_weight_begin", "decode_batch", "ready"} <= ids


@pytest.mark.integration
@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("seed", sorted(GENLOG_ARGS))
def test_exact_scan_equals_reference_on_framed_genlog(seed, pack):
    m = matcher(pack)
    data = genlog(seed, *GENLOG_ARGS[seed])
    whole = key(reference(m, block(data)))
    pieces = []
    for b in framed_blocks(data, 4093):
        got = scanned(m, b)
        assert key(got) == key(reference(m, b))
        pieces += key(got)
        # the scan records the block's newline count; it must be right
        assert b.newlines() == b.data.count(b"\n")
    assert pieces == whole


# ----------------------------------------------------------------------------------------------
# generated logs: real lines shuffled and glued with random separators

def _lines_of(data: bytes) -> list[bytes]:
    return [ln for ln in re.split(rb"[\r\n]+", data) if ln.strip()]


POOL = sorted({ln for p in FIXTURE_FILES for ln in _lines_of(p.read_bytes())}
              | set(_lines_of(genlog(1, *GENLOG_ARGS[1])[:200_000]))
              | set(_lines_of(genlog(2, *GENLOG_ARGS[2])[-60_000:])))
STATS_POOL = [ln for ln in POOL if any(s in ln for s in (b"Decode batch", b"Prefill batch",
                                                           b"Avg generation throughput"))]
SEPARATORS = [b"\n", b"\n", b"\n", b"\r", b"\r\n", b"\n\n", b"", b" ", b"\x1b[0m\n",
              b"\r\x1b[1;36m"]

line_st = st.one_of(st.sampled_from(POOL), st.sampled_from(STATS_POOL))
log_st = st.lists(st.tuples(line_st, st.sampled_from(SEPARATORS)), max_size=60).map(
    lambda pairs: b"".join(a + b for a, b in pairs))


@pytest.mark.parametrize("pack", PACKS)
@settings(max_examples=200, **SETTINGS)
@given(data=log_st, line_number=st.integers(1, 10_000), offset=st.integers(0, 10**9))
def test_exact_scan_equals_reference_on_generated_logs(pack, data, line_number, offset):
    m = matcher(pack)
    blk = block(data, offset, line_number)
    ref = reference(m, blk)
    got = scanned(m, block(data, offset, line_number))
    assert key(got) == key(ref)
    assert [h[3] for h in got] == [h[3] for h in ref]


@pytest.mark.parametrize("pack", PACKS)
@settings(max_examples=200, **NO_SHRINK)
@given(data=log_st)
def test_collapse_scan_keeps_first_and_last_of_each_stats_run(pack, data):
    m = matcher(pack)
    ref = reference(m, block(data))
    got = scanned(m, block(data), True)
    assert key(got) == key(collapse_runs(ref))


@pytest.mark.integration
@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("seed", sorted(GENLOG_ARGS))
def test_collapse_scan_on_genlog(seed, pack):
    m = matcher(pack)
    data = genlog(seed, *GENLOG_ARGS[seed])
    ref = reference(m, block(data))
    got = scanned(m, block(data), True)
    assert key(got) == key(collapse_runs(ref))
    if pack == "sglang":
        assert len(got) < len(ref)  # there is something to collapse in a serving log


@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_collapse_scan_on_fixture(path, pack):
    check_block(matcher(pack), block(path.read_bytes()))


@functools.lru_cache(maxsize=None)
def re2_last_matcher(name: str) -> Matcher:
    """A matcher that finds the last stats line of a run with RE2's finditer, as it did
    before `bytes.rfind` per literal (the shipped packs' stats literals allow the latter)."""
    m = Matcher(load_pack(name))
    assert m._stats_bytes is not None
    m._stats_bytes = None
    return m


@pytest.mark.parametrize("pack", PACKS)
@settings(max_examples=200, **NO_SHRINK)
@given(data=log_st, line_number=st.integers(1, 10_000))
def test_last_stats_line_by_rfind_is_re2s(pack, data, line_number):
    got = scanned(matcher(pack), block(data, 0, line_number), True)
    assert got == scanned(re2_last_matcher(pack), block(data, 0, line_number), True)


@pytest.mark.integration
@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("seed", sorted(GENLOG_ARGS))
def test_last_stats_line_by_rfind_is_re2s_on_genlog(seed, pack):
    data = genlog(seed, *GENLOG_ARGS[seed])
    for start in (0, len(data) // 3):   # and from mid-line
        assert scanned(matcher(pack), block(data[start:]), True) == \
            scanned(re2_last_matcher(pack), block(data[start:]), True)


# ----------------------------------------------------------------------------------------------
# deterministic cases

DECODE = (b"[2026-11-30 10:07:52 TP0] Decode batch. #running-req: 2, #token: 4078, "
          b"token usage: 0.00, gen throughput (token/s): 447.31, #queue-req: 0\n")


def test_collapse_simple_run():
    m = matcher("sglang")
    data = b"".join(DECODE.replace(b"447.31", b"%d.00" % i) for i in range(10))
    got = scanned(m, block(data), True)
    assert [(h[0].id, h[2]) for h in got] == [("decode_batch", 1), ("decode_batch", 10)]
    assert "gen throughput (token/s): 9.00" in got[-1][1]


def test_collapse_long_run_ending_in_a_line_with_a_stats_literal_but_no_match():
    """The last stats line of a run longer than the search windows, behind a line that holds
    a stats literal but fires no rule and behind 100 KB without any literal."""
    m = matcher("sglang")
    fake = b"[2026-11-30 10:07:52] note: Decode batch [x] is not a stats record\n"
    assert m.match_line(fake.decode().strip()) is None
    data = b"".join(DECODE.replace(b"447.31", b"%d.00" % i) for i in range(4000)) + fake \
        + b"[2026-11-30 10:07:53] nothing to see\n" * 3000
    for mm in (m, re2_last_matcher("sglang")):
        got = scanned(mm, block(data), True)
        assert [(h[0].id, h[2]) for h in got] == [("decode_batch", 1), ("decode_batch", 4000)]
        assert "gen throughput (token/s): 3999.00" in got[-1][1]


def test_collapse_run_interrupted_by_a_real_hit():
    m = matcher("sglang")
    data = DECODE * 3 + b"[2026-11-30 10:07:53] The server is fired up and ready to roll!\n" \
        + DECODE * 3
    got = scanned(m, block(data), True)
    assert [(h[0].id, h[2]) for h in got] == [
        ("decode_batch", 1), ("decode_batch", 3), ("ready", 4), ("decode_batch", 5),
        ("decode_batch", 7)]


def test_collapse_run_not_broken_by_a_line_that_only_contains_a_rule_literal():
    """A line with a rule's literal (`Error`) that fires no rule is not a hit: the run goes on."""
    m = matcher("sglang")
    noise = b"[2026-11-30 10:07:52] WARNING: some Error here\n"
    assert m.match_line(noise.decode().strip()) is None
    data = DECODE * 3 + noise + DECODE * 3
    got = scanned(m, block(data), True)
    assert [(h[0].id, h[2]) for h in got] == [("decode_batch", 1), ("decode_batch", 7)]


def test_collapse_run_starting_in_a_segment_with_another_rules_literal():
    """A stats record glued after a tqdm frame starts the run; the next lines continue it."""
    m = matcher("sglang")
    bar = ("Capturing batches (bs=1 avail_mem=10.83 GB): 100%|██████████| 4/4 "
           "[00:24<00:00,  6.04s/it]").encode()
    data = bar + DECODE * 4
    ref = reference(m, block(data))
    assert [(h[0].id, h[2]) for h in ref] == [("capture_bar", 1)] + [
        ("decode_batch", i) for i in (1, 2, 3, 4)]
    got = scanned(m, block(data), True)
    assert [(h[0].id, h[2]) for h in got] == [
        ("capture_bar", 1), ("decode_batch", 1), ("decode_batch", 4)]


def test_scan_finds_a_literal_split_by_a_nul_byte():
    """The reference drops NULs before matching, so the scan must find this line too."""
    m = matcher("sglang")
    data = b"[2025-03-10 10:00:10 TP0] Load weight be\x00gin. avail mem=78.50 GB\n"
    ref = reference(m, framed(data))
    assert key(ref) == [("load_weight_begin",
                         "[2025-03-10 10:00:10 TP0] Load weight begin. avail mem=78.50 GB", 1)]
    assert key(scanned(m, framed(data))) == key(ref)


def test_scan_finds_a_literal_split_by_an_ansi_code():
    """uvicorn with colours prints the URL in bold, inside the `ready` rule's literal."""
    m = matcher("vllm")
    data = b"INFO:     Uvicorn running on \x1b[1mhttp://0.0.0.0:8000\x1b[0m (Press CTRL+C to quit)\n"
    ref = reference(m, framed(data))
    assert [h[0].id for h in ref] == ["ready"]
    assert key(scanned(m, framed(data))) == key(ref)


def test_scan_ansi_coloured_vllm_tag():
    m = matcher("vllm")
    line = (b"\x1b[1;36m(VllmWorker pid=1)\x1b[0;0m INFO 03-10 10:00:00 [loader.py:1] "
            b"Loading weights took 10.5 seconds\n")
    data = b"x\n" + line * 2
    check_block(m, block(data))


def test_scan_glued_record_after_tqdm_frame():
    m = matcher("sglang")
    data = ("Loading safetensors checkpoint shards:   2% Completed | 1/58 [00:00<00:56,  1.01it/s]"
            "Traceback (most recent call last):\n").encode()
    ref = check_block(m, block(data, 500, 7))
    assert [(h[0].id, h[2], h[3]) for h in ref] == [("shard_bar", 7, 500), ("traceback", 7, 500)]


def test_scan_line_numbers_with_cr_frames_and_offset_block():
    m = matcher("sglang")
    bar = ("\rLoading safetensors checkpoint shards:  %d%% Completed | %d/4 [00:01<00:03,  "
           "1.00it/s]")
    data = ("".join(bar % (25 * i, i) for i in range(1, 5)) + "\n" + "x\r\n" * 3
            + "[2025-10-06 10:00:22] The server is fired up and ready to roll!\n").encode()
    ref = check_block(m, block(data, 10, 100))
    assert [(h[0].id, h[2]) for h in ref] == [("shard_bar", 100)] * 4 + [("ready", 104)]


def test_scan_of_a_capped_line():
    """A literal beyond the cap is invisible to both the scan and the reference."""
    m = Matcher(load_pack("sglang"), max_line_bytes=64)
    data = b"y" * 100 + b" The server is fired up and ready to roll!\nThe server is fired up " \
        b"and ready to roll!\n"
    ref = check_block(m, block(data))
    assert [(h[0].id, h[2]) for h in ref] == [("ready", 2)]


def test_scan_empty_and_separator_only_blocks():
    m = matcher("sglang")
    for data in (b"", b"\n\n\n", b"\r\r\n", b"\x00\n"):
        b = block(data)
        assert list(m.scan(b)) == []
        assert list(m.scan(block(data), True)) == []
        assert b.newlines() == data.count(b"\n")


def test_a_rule_pattern_that_times_out_is_skipped_and_counted(monkeypatch) -> None:
    """Patterns run with a timeout: a line a pattern cannot finish in time fires no rule from
    that pattern (later rules are still tried) and is counted as a rule error."""
    import logwatch.rules.matcher as matcher_mod
    from logwatch.pipeline import LogPipeline
    monkeypatch.setattr(matcher_mod, "PATTERN_TIMEOUT", 1e-7)
    pipe = LogPipeline(load_pack("sglang"))
    line = b"[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=" + b"7" * 2_000_000 + b" GB\n"
    pipe.feed(line, 0.0)
    assert pipe.counters.rule_errors >= 1
    assert pipe.state.phase == "waiting"


# ----------------------------------------------------------------------------------------------
# the literal pass: Hyperscan (the default where the wheel installs) and RE2 (the fallback)
# must examine the same segments, so every hit is the same whichever one runs

from logwatch.rules import matcher as matcher_mod  # noqa: E402
from logwatch.rules.literalscan import literal_finder  # noqa: E402
from logwatch.lines import segment_bounds  # noqa: E402

ENGINES = ("hyperscan", "re2")


@functools.lru_cache(maxsize=None)
def engine_matcher(pack: str, engine: str) -> Matcher:
    m = Matcher(load_pack(pack), engine=engine)
    assert m._rare is not None and m._rare.engine == engine
    return m


def examined(finder, data: bytes) -> list[tuple[int, int]]:
    """The segments the scan looks at, in order (as `Matcher.scan` walks the positions)."""
    out: list[tuple[int, int]] = []
    for pos in finder.positions(data):
        if out and pos < out[-1][1]:
            continue
        out.append(segment_bounds(data, pos))
    return out


def engines_agree(pack: str, data: bytes, line_number: int = 1, offset: int = 0) -> list:
    hs, r2 = (engine_matcher(pack, e) for e in ENGINES)
    assert examined(hs._rare, data) == examined(r2._rare, data)
    for collapse in (False, True):
        got = [scanned(m, block(data, offset, line_number), collapse) for m in (hs, r2)]
        assert got[0] == got[1]
    return got[0]


def test_hyperscan_is_the_default_literal_pass():
    for pack in PACKS:
        assert matcher(pack)._rare.engine == "hyperscan"


@pytest.mark.parametrize("machine,wanted", [
    ("x86_64", True), ("AMD64", True), ("aarch64", True), ("arm64", True),
    ("ppc64le", False), ("armv7l", False)])
def test_hyperscan_is_installed_on_the_machines_its_wheels_exist_for(machine, wanted):
    """x86-64 and 64-bit ARM (Grace nodes: GH200, GB200) get Hyperscan from `pip install`
    (wheels 0.7+; tests/test_scan.py passes on aarch64 under qemu, scripts/check-aarch64.sh);
    a machine without a wheel does not try to build it (the import fails, RE2 does the pass)."""
    import tomllib

    from packaging.requirements import Requirement
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["dependencies"]
    hs = next(Requirement(d) for d in deps if Requirement(d).name == "hyperscan")
    assert hs.marker is not None
    assert hs.marker.evaluate({"platform_machine": machine}) is wanted


@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_engines_agree_on_fixture(path, pack):
    got = engines_agree(pack, path.read_bytes())
    if path.stem.startswith(pack):
        assert got


@pytest.mark.integration
@pytest.mark.parametrize("pack", PACKS)
@pytest.mark.parametrize("seed", sorted(GENLOG_ARGS))
def test_engines_agree_on_genlog(seed, pack):
    data = genlog(seed, *GENLOG_ARGS[seed])
    got = engines_agree(pack, data)
    assert engines_agree(pack, data[len(data) // 3:]) is not None  # starting mid-line
    if pack == "sglang":
        assert len(got) > 10


@pytest.mark.parametrize("pack", PACKS)
@settings(max_examples=150, **NO_SHRINK)
@given(data=log_st, line_number=st.integers(1, 10_000))
def test_engines_agree_on_generated_logs(pack, data, line_number):
    engines_agree(pack, data, line_number)


# literals with case folding: RE2 (UTF-8) folds k to KELVIN SIGN and s to LONG S, Hyperscan
# folds ASCII only; the Hyperscan form spells those two out
CASE_PARTS = [("kv cache", True), ("sigquit", True), ("oom", True), ("Decode batch", False),
              ("größe", False), ("a.b*c", False)]
PIECES = ["kv cache", "KV CACHE", "\u212aV cache", "Kv Cache", "\u212av ca", "sigquit",
          "\u017figquit", "SIGQUIT", "sig\u212auit", "oom", "OOM", "o\u212am", "Decode batch",
          "decode batch", "größe", "GRÖSSE", "a.b*c", "aXb*c", "\u212a", "\u017f", "x", " ",
          "\n", "\r", "é", "\x00"]
piece_st = st.lists(st.one_of(st.sampled_from(PIECES).map(str.encode),
                              st.binary(max_size=4)), max_size=40).map(b"".join)


@settings(max_examples=400, **SETTINGS)
@given(data=piece_st)
def test_engines_agree_on_case_folded_literals(data):
    hs, r2 = literal_finder(CASE_PARTS, "hyperscan"), literal_finder(CASE_PARTS, "re2")
    assert (hs.engine, r2.engine) == ENGINES
    assert examined(hs, data) == examined(r2, data)


@settings(max_examples=300, **SETTINGS)
@given(lit=st.text(st.sampled_from("abkKsS xé中😀\\.*()[]?^$|\u212a\u017f"), min_size=1),
       ci=st.booleans())
def test_hyperscan_literal_is_each_character_escaped(lit, ci):
    """`_hs_literal`: every UTF-8 byte as `\\xNN`, and a case-folded k or s with the other
    form RE2 folds it to (the fast path for literals without those is the same string)."""
    from logwatch.rules.literalscan import _UNICODE_FOLDS, _hs_literal
    if ci and not lit.isascii():
        assert _hs_literal(lit, ci) is None
        return

    def esc(c: str) -> str:
        return "".join(f"\\x{b:02x}" for b in c.encode())
    want = []
    for ch in lit:
        fold = _UNICODE_FOLDS.get(ch.lower()) if ci else None
        want.append(esc(ch) if fold is None else f"(?:{esc(ch)}|{esc(fold)})")
    assert _hs_literal(lit, ci) == "".join(want).encode()


def test_hyperscan_finds_the_unicode_case_folds_re2_finds():
    hs = literal_finder(CASE_PARTS)
    assert hs.engine == "hyperscan"
    for text in ("\u212aV CACHE", "\u017fIGQUIT", "SIGQUIT"):
        data = ("x\n" + text + "\ny").encode()
        assert examined(hs, data) == [(2, 2 + len(text.encode()))], text


def test_a_case_folded_non_ascii_literal_falls_back_to_re2():
    """Hyperscan cannot promise RE2's Unicode folding beyond ASCII: the pass stays on RE2."""
    parts = [("größe", True), ("oom", False)]
    assert literal_finder(parts).engine == "re2"
    with pytest.raises(ValueError):
        literal_finder(parts, "hyperscan")
    assert literal_finder([]) is None


@pytest.mark.integration
def test_replay_without_the_hyperscan_module_gives_the_same_result(monkeypatch):
    """Where `import hyperscan` fails, RE2 does the pass, and a replay ends the same: what
    it reports, and every rule's count when nothing is collapsed (with Hyperscan a collapsed
    replay skips the frames inside a bar's run: rules/bars.py)."""
    import io
    from logwatch.app.replay import replay_stream
    from logwatch.sinks.summary import summary
    from logwatch.view import pipeline_view

    data = genlog(1, *GENLOG_ARGS[1])

    def replay() -> tuple:
        matcher_mod._SHARED.clear()
        pipe = replay_stream(io.BytesIO(data), load_pack("sglang"))
        c = pipe.counters
        exact = replay_stream(io.BytesIO(data), load_pack("sglang"), collapse_stats=False)
        return (pipe.matcher._rare.engine, pipe.state.phase, c.lines, c.startups,
                sorted(exact.counters.rule_matches.items()), sorted(c.crashes.items()),
                summary(pipeline_view("x", pipe)))

    first = replay()
    from logwatch.rules import literalscan
    monkeypatch.setattr(literalscan, "hyperscan", None)
    second = replay()
    matcher_mod._SHARED.clear()
    assert (first[0], second[0]) == ENGINES
    assert first[1:] == second[1:]
    assert first[1] == "crashed" and first[4]


def test_a_segment_tries_only_the_rules_whose_literals_it_holds(monkeypatch):
    """The block pass names the literals of each segment; `_match` is then given those rules
    (and the stats rules) only, in pack order, and still fires what `match_line` fires."""
    m = Matcher(load_pack("sglang"))
    assert m._rare.engine == "hyperscan"
    line = b"[2026-03-17 07:16:46 TP0] Load weight begin. avail mem=78.50 GB\n"
    expected = [m.match_line(line.decode().strip())[0].id]
    tried: list[int] = []
    real = m._match

    def spy(text, stats_only, stamp, layers=(), checks=None):
        tried.append(len(checks) if checks is not None else -1)
        return real(text, stats_only, stamp, layers, checks)

    monkeypatch.setattr(m, "_match", spy)
    hits = list(m.scan(Block(line, 0, 1, 0.0)))
    assert [h.rule.id for h in hits] == expected
    stats = len(m.stats_rules)
    assert tried and all(0 < n <= stats + 3 for n in tried), (tried, len(m._checks))
    assert len(m._checks) > stats + 20   # (what it would try without the literal names)
    names = [c[0].id for c in m.checks_for(0)]
    assert names == [r.id for r in m.rules if r in m.stats_rules]
