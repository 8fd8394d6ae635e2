"""Required literals: every string a pattern matches contains one of the literals returned.

The prefilter skips a rule on a line that contains none of its literals, so a literal that is
not really required makes a rule silently miss lines.  The property is checked with
hypothesis over every pattern of the shipped packs (and some synthetic ones), plus exact
expectations for a few.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import regex
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from logwatch.rules.literals import (
    MIN_LITERAL, Literals, anchored_head, required_literals, start_filters,
)
from logwatch.rules.matcher import Matcher
from logwatch.rules.pack import REGEX_FLAGS, load_pack

from conftest import FIXTURES


def _shipped_patterns() -> list[str]:
    out: list[str] = []
    for name in ("base", "sglang", "vllm", "trtllm"):
        for r in load_pack(name).rules:
            if r.pattern not in out:
                out.append(r.pattern)
    return out


def _generable(pattern: str) -> bool:
    """`from_regex` works on it (Python `re` syntax, nothing hypothesis rejects)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
            st.from_regex(pattern).validate()
    except Exception:  # noqa: BLE001 - filtered out up front, counted below
        return False
    return True


SHIPPED = _shipped_patterns()
COVERED = [p for p in SHIPPED if _generable(p)]

SYNTHETIC = [
    r"Load weight (?:begin|end)\. avail",
    r"Load weight(?: begin)? done\.",
    r"foo(?:bar)?bazqux",
    r"(?i)cuda (?:error|failure): out of memory",
    r"(?i:shutting down) server",
    r"(?:Killed|Terminated) process \d+ \((?P<name>\w+)\)",
    r"x{3}yz[.,]done",
    r"(?:abc)+def",
    r"Capture (?:cuda|CUDA) graph (?:begin|end)\.",
    r"(ab|cd)(ef|gh)(ij|kl)(mn|op)(qr|st)(uv|wx)",
    r"(?:^|\] )(?P<exc>\w+Error): ",
    r"Exception in (?P<component>(?:Model|Controller)(?:Tp|Dp|Pp)"
    r"(?:Server|Single|Multi|Worker|Manager)):",
    r"ERR(?P<code>[ab][cd][ef][gh][ij])",
    r"(?:alpha|beta|gamma|delta|epsilon|zeta|eta|theta|iota|kappa|lambda|mu|nu|xi|omicron|pi"
    r"|rho|sigma|tau|upsilon|phi|chi|psi|omega) failed",
    r"\] {3,}\S",
    r"(?:ab|cd){2,5}x",
    r"x{2,}y+z{3,4}",
]


def contains_one(lits: Literals, text: str) -> bool:
    hay = text.lower() if lits.ignore_case else text
    return any(s in hay for s in lits.strings)


def test_most_shipped_patterns_are_covered() -> None:
    assert len(SHIPPED) >= 60
    assert len(COVERED) >= 0.9 * len(SHIPPED), sorted(set(SHIPPED) - set(COVERED))


def test_every_shipped_pattern_has_literals() -> None:
    assert [p for p in SHIPPED if required_literals(p) is None] == []


PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _check_property(pattern: str, text: str) -> None:
    lits = required_literals(pattern)
    assume(lits is not None)
    # the rule runs with the `regex` module; from_regex follows `re`
    assume(regex.compile(pattern, REGEX_FLAGS).search(text) is not None)
    assert lits is not None
    assert contains_one(lits, text), (sorted(lits.strings), text)


@pytest.mark.parametrize("pattern", COVERED)
@PROPERTY
@given(data=st.data())
def test_shipped_pattern_matches_contain_a_literal(pattern: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(pattern), label="line")
    _check_property(pattern, text)


@pytest.mark.parametrize("pattern", SYNTHETIC)
@PROPERTY
@given(data=st.data())
def test_synthetic_pattern_matches_contain_a_literal(pattern: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(pattern), label="line")
    lits = required_literals(pattern)
    if lits is None:
        return
    _check_property(pattern, text)


@PROPERTY
@given(data=st.data())
def test_packs_route_every_line_their_rules_match(data: st.DataObject) -> None:
    """End to end: a line some rule matches is routed to a rule by the prefilter path too."""
    name = data.draw(st.sampled_from(["sglang", "vllm"]), label="pack")
    pack = load_pack(name)
    rules = [r for r in pack.rules if r.pattern in COVERED]
    rule = data.draw(st.sampled_from(rules), label="rule")
    text = data.draw(st.from_regex(rule.pattern), label="line")
    assume("\n" not in text and "\r" not in text)
    assume(rule.regex.search(text) is not None)
    assume(not any(rx.search(text) for rx in pack.ignore))
    m = Matcher(pack)
    # a wrapper's prefix comes off first (srun's `0: `): the rule must match what is left
    assume(rule.regex.search(m.unwrap(text)[0]) is not None)
    if m.origin is not None:   # where the line comes from (rules/origin.py) decides too:
        assume(not m.origin.user_content(text))     # a client's text fires nothing
        if m.origin.is_anchored(rule):              # nor a marker inside a message
            assume(m.origin.at_position(text, rule.regex.search(text).start()))
    assert m.match_line(text) is not None, (rule.id, text)


# ----------------------------------------------------------------------------------------------
# Exact expectations

def test_alternation_expands_to_full_strings() -> None:
    lits = required_literals(r"Load weight (?:begin|end)\. avail")
    assert lits == Literals(frozenset({"Load weight begin. avail", "Load weight end. avail"}))
    assert lits.ignore_case is False


def test_small_class_and_alternation() -> None:
    lits = required_literals(r"Capture (?:cuda|CUDA) graph begin\.")
    assert lits is not None
    assert lits.strings == {"Capture cuda graph begin.", "Capture CUDA graph begin."}


def test_no_literal_worth_using() -> None:
    assert required_literals(r"\d+%") is None
    assert required_literals(r"ab|cd") is None  # shorter than MIN_LITERAL
    assert required_literals(r"(?:abcdef)?\d+") is None  # optional only
    assert required_literals(r"\w+: \d+") is None


def test_case_insensitive_flag() -> None:
    lits = required_literals(r"(?i)CUDA Error: out of memory")
    assert lits is not None
    assert lits.ignore_case is True
    assert lits.strings == {"cuda error: out of memory"}
    assert contains_one(lits, "RuntimeError: CUDA ERROR: Out Of Memory")


def test_scoped_case_insensitive_flag() -> None:
    lits = required_literals(r"(?i:shutting down) now")
    assert lits is not None and lits.ignore_case is True
    assert contains_one(lits, "SHUTTING DOWN now")


def test_case_sensitive_by_default() -> None:
    lits = required_literals(r"Shutting down")
    assert lits is not None and lits.ignore_case is False
    assert not contains_one(lits, "shutting down")


def test_optional_part_is_not_required() -> None:
    lits = required_literals(r"Load weight(?: begin)? done\.")
    assert lits is not None
    assert lits.strings == {"Load weight"}
    for line in ("Load weight done.", "Load weight begin done."):
        assert contains_one(lits, line)


def test_optional_group_between_runs() -> None:
    lits = required_literals(r"Memory pool(?: end)?\. avail mem=")
    assert lits is not None
    for line in ("Memory pool. avail mem=1", "Memory pool end. avail mem=1"):
        assert contains_one(lits, line)
    assert all(" end" not in s for s in lits.strings)


def test_required_group_contributes() -> None:
    lits = required_literals(r"\d+ (?P<what>Scheduler|Detokenizer) hit an exception")
    assert lits is not None
    assert all(len(s) >= MIN_LITERAL for s in lits.strings)
    assert contains_one(lits, "1 Scheduler hit an exception")
    assert contains_one(lits, "2 Detokenizer hit an exception")


def test_lookahead_content_is_in_the_line() -> None:
    pattern = r"Decode batch(?=.*?gen throughput \(token/s\): (?P<tput>[\d.]+))"
    line = "[10:00:00 TP0] Decode batch. #running-req: 2, gen throughput (token/s): 447.31"
    assert regex.search(pattern, line)
    lits = required_literals(pattern)
    assert lits is not None and contains_one(lits, line)
    assert required_literals(r"(?!abcdef)\d+") is None  # a negative lookahead requires nothing


def test_literal_with_newline_is_refused() -> None:
    assert required_literals("foo\nbar") is None


def test_invalid_pattern_gives_none() -> None:
    assert required_literals(r"(unclosed") is None


def test_many_alternatives() -> None:
    words = [f"word{i:02d}" for i in range(40)]
    pattern = "(?:" + "|".join(words) + ") failed hard"
    lits = required_literals(pattern)
    assert lits is not None
    for w in words:
        assert contains_one(lits, f"{w} failed hard")


def test_alternatives_multiplied_inside_a_group() -> None:
    """2 x 3 x 5 = 30 combinations (more than MAX_SET) inside a named group, after a literal.
    The literals returned must still occur in a line the pattern matches."""
    pattern = (r"Exception in (?P<component>(?:Model|Controller)(?:Tp|Dp|Pp)"
               r"(?:Server|Single|Multi|Worker|Manager)):")
    line = "[10:00:30 TP0] Exception in ModelTpServer:"
    assert regex.search(pattern, line)
    lits = required_literals(pattern)
    assert lits is None or contains_one(lits, line), sorted(lits.strings)


def test_regex_module_syntax_is_respected() -> None:
    """Rules run with the `regex` module, where `[[:digit:]]` is a POSIX class; literals
    derived under `re`'s reading of the same text must not exclude what `regex` matches."""
    pattern = r"Error code [[:digit:]]+ reported"
    line = "Error code 42 reported"
    assert regex.compile(pattern, REGEX_FLAGS).search(line)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # re: "Possible nested set"
        lits = required_literals(pattern)
    assert lits is None or contains_one(lits, line), sorted(lits.strings)


def test_regex_only_syntax_gives_none_or_valid_literals() -> None:
    pattern = r"\p{Lu}\w+ died unexpectedly"
    line = "Ωmega died unexpectedly"
    assert regex.compile(pattern, REGEX_FLAGS).search(line)
    lits = required_literals(pattern)
    assert lits is None or contains_one(lits, line)


def test_shipped_rule_literals_are_in_their_samples() -> None:
    for name in ("sglang", "vllm", "trtllm"):
        for r in load_pack(name).rules:
            for s in r.samples:
                if s.matches:
                    assert contains_one(r.literals, s.line), (r.id, s.line)


def test_exact_literals_of_a_shipped_rule() -> None:
    r = load_pack("sglang").rule("load_weight_end")
    assert r.literals == Literals(frozenset({"Load weight end."}))
    r = load_pack("sglang").rule("ready")
    assert r.literals is not None
    assert r.literals.strings == {"The server is fired up and ready to roll!"}


def test_a_repeat_requires_its_minimum_copies() -> None:
    """`x{lo,}` starts and ends with lo copies: the base pack's `ignore: '\\] {3,}\\S'` gets
    a literal (it was searched on every serving line)."""
    assert required_literals(r"\] {3,}\S") == Literals(frozenset({"]   "}))
    assert required_literals(r"(?:ab|cd){2,5}x") == Literals(
        frozenset({"ababx", "abcdx", "cdabx", "cdcdx"}))
    assert required_literals(r"a{0,}bcd") == Literals(frozenset({"bcd"}))


# ----------------------------------------------------------------------------------------------
# Anchored heads: the first character a pattern anchored at the start needs

HEADED = [r"^\s{2,}\S", r"^[a-c\d]x", r"\A\d+:", r"^[^\]x]+y", r"^ {4}at "]


def test_anchored_heads() -> None:
    assert anchored_head(r"^\s{2,}\S") == r"[\s]"
    assert anchored_head(r"^[^\]x]+y") == r"[^\]x]"
    assert anchored_head(r"^ {4}at ") == r"\ "
    assert anchored_head(r"^(?P<Y>\d{4})-") == r"[\d]"     # into a group
    for no_head in (r"^a|b", r"(?m)^ab", r"^\s*x", r"^.a", r"x^", r"(?i)^abc",
                    r"^(?:a|bc)d", r"\d+"):
        assert anchored_head(no_head) is None, no_head


@pytest.mark.parametrize("pattern", HEADED)
@PROPERTY
@given(data=st.data())
def test_a_line_the_head_rejects_never_matches(pattern: str, data: st.DataObject) -> None:
    head = regex.compile(anchored_head(pattern), REGEX_FLAGS)
    full = regex.compile(pattern, REGEX_FLAGS)
    text = data.draw(st.one_of(st.from_regex(pattern), st.text(max_size=12)), label="line")
    if full.search(text) is not None:
        assert head.match(text, 0, 1) is not None, text


# ----------------------------------------------------------------------------------------------
# Start filters: what a line must hold for a wrapper prefix to match at its start

PREFIX_PATTERNS = [load_pack("base").prefixes.pattern]  # type: ignore[union-attr]


def test_start_filters_of_the_shipped_prefixes() -> None:
    filters = start_filters(PREFIX_PATTERNS[0])
    assert filters is not None and len(filters) == 26
    # `aws logs tail`'s stream after its stamp: a digit first, a `/` in the line
    cloudwatch = filters[1]
    assert cloudwatch.head == r"[\d]" and "+00:00 " in cloudwatch.literals
    # logcli's stamp and labels: by a digit first, its pod label (or a closing brace)
    logcli_pod, logcli_labels = filters[2], filters[3]
    assert logcli_pod.head == logcli_labels.head == r"[\d]" and "pod=\"" in logcli_pod.literals
    assert logcli_labels.literals == {"} "}
    compose = filters[5]       # (after journald, CloudWatch's, logcli's and kubectl's stamps)
    assert compose.chars == {"|"} and compose.literals == {" |", "\t|"}
    # srun's task label: by its first character, a digit or a blank (the alternatives share
    # the group name `proc`, which the analysis reads past)
    kubectl_prefix = filters[6]    # `[pod/NAME/CONTAINER] `
    assert kubectl_prefix.head == r"\[" and "[pod/" in kubectl_prefix.literals
    # stern's `POD CONTAINER `: a lower-case letter or a digit first (a record's `[`, `(`,
    # level and a bar's capital are ruled out by it), a blank; the controller's pod a `-`
    stern_pod, stern = filters[7], filters[8]
    assert stern_pod.head == stern.head == "[a-z0-9]" and "-" in stern_pod.chars
    srun, srun_padded = filters[9], filters[10]
    assert srun.head == r"[\d]" and srun.literals == {": "}
    assert srun_padded.head == r"\ " and srun_padded.literals == {": "}
    # a node's name (pdsh): a lower-case letter first (`RuntimeError: ` is ruled out by it),
    # or an address; Open MPI's `[1,0]<stdout>:` by its stream's name
    pdsh, pdsh_address, mpi = filters[11], filters[12], filters[13]
    assert pdsh.head == "[a-z]" and pdsh_address.head == r"[\d]" and "." in pdsh_address.chars
    assert mpi.head == r"\[" and "]<stdout>:" in mpi.literals
    skypilot = filters[14]     # `(task, pid=N) `: by its `pid=` and `,`
    assert skypilot.head == r"\(" and "pid=" in skypilot.literals and "," in skypilot.chars
    ansi = filters[16]      # `[0;36m`: a line without an `m` is no colour code
    assert ansi.head == r"\[" and ansi.chars == {"[", "m"}
    # moreutils' `ts`: its month names, or a digit first
    ts_month, ts_time, ts_year = filters[18], filters[19], filters[20]
    assert "Dec " in ts_month.literals and len(ts_month.literals) == 12
    assert ts_time.head == ts_year.head == r"[\d]" and ":" in ts_time.chars
    # output glued before a record: a line that starts with the record itself (its `[` stamp,
    # its `(Proc pid=N)` tag) is ruled out by its first character, others by the record's literals
    quote = filters[22]        # a reply's `> `: by its first character
    assert quote.head == ">" and quote.literals == {"> "}
    glued_sglang, glued_vllm = filters[23], filters[24]
    assert glued_sglang.head == r"[^\[\s]" and glued_sglang.literals == {"] "}
    assert glued_vllm.head == r"[^\(\s]" and ") INFO " in glued_vllm.literals
    # VLLM_LOGGING_PREFIX before an untagged record: a record's level among the literals
    vllm_prefix = filters[25]
    assert "INFO " in vllm_prefix.literals and "-" in vllm_prefix.chars


@PROPERTY
@given(data=st.data())
def test_a_line_a_prefix_matches_passes_the_start_filters(data: st.DataObject) -> None:
    """A line the prefixes match at its start is never ruled out by the filters (drawn from
    each alternative, as the wrapper then the rest of a line)."""
    pack = load_pack("base")
    m = Matcher(pack)
    # (Python's `re`, which draws, refuses a group name two alternatives share: unnamed here)
    pattern = re.sub(r"\(\?P<\w+>", "(", pack.prefixes.pattern)  # type: ignore[union-attr]
    prefix = data.draw(st.from_regex(pattern, fullmatch=True), label="prefix")
    rest = data.draw(st.sampled_from(["", "[2026-12-02 10:00:00] Decode batch, #token: 1",
                                      "INFO 12-02 x", "plain"]), label="rest")
    text = prefix + rest
    # drawn by `re`'s rules; the `regex` module may read a Unicode class differently
    # (`\w` and '²'): the property is about what the prefixes really match
    if pack.prefixes.match(text) is not None:  # type: ignore[union-attr]
        assert m._may_wrap(text), text


def test_serving_lines_skip_the_prefix_match() -> None:
    m = Matcher(load_pack("sglang"))
    decode = ("[2026-12-02 10:00:00 TP0] Decode batch, #running-req: 3, #token: 1000, token "
              "usage: 0.33, cuda graph: True, gen throughput (token/s): 555.00, #queue-req: 0")
    assert not m._may_wrap(decode)
    for wrapped in ("vllm2-1  | INFO 12-02 x", "[0;36m[2026-12-02 10:00:00] x",
                    "Aug 18 14:15:04 host python3[28059]: [2026", "   [2026-01-01 x",
                    "(SGLangEngine pid=4711) [2025-01-01 x",
                    "2024-10-23T19:30:00.974109209Z [2026-12-02 10:00:00] x"):
        assert m._may_wrap(wrapped), wrapped
        assert m.unwrap(wrapped)[0] != wrapped, wrapped


def test_cloudwatch_and_skypilot_wrappers_come_off_and_name_their_process() -> None:
    """`aws logs tail`'s stream and SkyPilot's task tag come off, naming the stream or node;
    a stamped line whose message begins with a path (`x.py:128: UserWarning`) or a level keeps
    it: a CloudWatch stream has no `:` and a `/`."""
    m = Matcher(load_pack("vllm"))
    record = "INFO 08-18 14:15:04 [api_server.py:1] Starting vLLM API server"
    assert m.unwrap(f"2025-08-18T14:15:04.123000+00:00 AllTraffic/i-0abc12 {record}")[:2] == (
        record, "AllTraffic/i-0abc12")
    assert m.unwrap(f"(task, pid=4120) {record}")[:2] == (record, "task")
    assert m.unwrap(f"(worker1, rank=1, pid=2399, ip=10.0.0.2) {record}")[:2] == (record, "worker1")
    for message in ("/usr/lib/python3/dist-packages/torch/x.py:128: UserWarning: y", record,
                    "(APIServer pid=1) " + record):
        assert m.unwrap(f"2025-08-18T14:15:04.123000+00:00 {message}")[0] == message
    # vLLM's own tags (no comma after the name) stay: they name the rank
    assert m.unwrap(f"(RayWorkerWrapper pid=4120, ip=10.0.0.2) {record}")[0].startswith("(Ray")


@pytest.mark.parametrize("name", ["vllm-027", "vllm-207", "vllm-209"])
def test_vllm_s_own_logging_prefix_comes_off_its_records(name: str, tmp_path: Path) -> None:
    """`VLLM_LOGGING_PREFIX` (vLLM 0.6.4 on) puts any text before each record, tagged or not:
    read as the plain log (before, vllm-027 never ready, vllm-207 `crashed` while launching)."""
    from test_wrappers import verdict, wrapped_copy
    record = re.compile(r"^(\([\w.-]+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d ")
    src = FIXTURES / f"{name}.log"
    for prefix in ("[node-a] ", "vllm 0 > "):
        dst = tmp_path / f"{name}.prefixed.log"
        wrapped_copy(src, dst, lambda ln: prefix + ln if record.match(ln) else ln)
        assert dst.read_text(errors="replace").count(prefix) >= 3
        assert verdict(dst, True) == verdict(src, True)
    m = Matcher(load_pack("vllm"))
    # a record itself, and a line merely holding one later, keep their text
    for text in ("INFO 01-09 07:33:46 launcher.py:19] Available routes are:",
                 "Traceback (most recent call last) INFO 01-09 07:33:46 x"):
        assert m.unwrap(text)[0] == text
