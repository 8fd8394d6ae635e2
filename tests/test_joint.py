"""The joint of a rule and the first timestamp format (`matcher.Joint`): one regex call for
both must give exactly what the two searches give apart, or not be made at all."""

from __future__ import annotations

import dataclasses

import pytest
import regex
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from logwatch.machine import Observation
from logwatch.pipeline import LogPipeline
from logwatch.rules.matcher import JOINT_AFTER, NO_STAMP, STAMP_WITHIN, Matcher, _joint
from logwatch.rules.pack import REGEX_FLAGS, load_all_shipped, load_pack


def apart(m: Matcher) -> Matcher:
    """The same matcher without joints: every rule and stamp searched on its own."""
    m._stamp_rx = None
    return m


def run(path, pack, joint: bool, chunk: int) -> tuple[list, list]:
    pipe = LogPipeline(pack)
    pipe.matcher = Matcher(pack) if joint else apart(Matcher(pack))
    pipe.matcher.joint_after = 1      # every line a rule is tried on goes by its joint
    seen: list = []
    step = pipe.machine.step

    def record(state, obs: Observation, now):   # every observation: rule, fields and stamp
        seen.append((obs.rule.id, obs.fields, obs.line_number, obs.log_time, obs.log_stamp,
                     obs.own_time))
        return step(state, obs, now)

    pipe.machine.step = record   # type: ignore[method-assign]
    data = path.read_bytes()
    events = []
    for i in range(0, len(data), chunk):
        events += pipe.feed(data[i:i + chunk], 1.0)
    events += pipe.finish(2.0)
    return seen, [type(e).__name__ for e in events]


LOGS = sorted(FIXTURES.glob("*.log"))


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_fixture_observations_the_same_with_and_without_joints(path) -> None:
    from logwatch.rules.locate import choose_pack
    pack = choose_pack("auto", path.read_bytes()[: 1 << 20])
    joint = run(path, pack, True, 4096)
    alone = run(path, pack, False, 4096)
    assert joint == alone
    assert joint[0], "no line of the fixture fired a rule"


def test_a_serving_line_takes_one_call_and_gets_its_stamp() -> None:
    pack = load_pack("sglang")
    m = Matcher(pack)
    line = ("[2026-12-02 10:00:07 TP0] Decode batch, #running-req: 12, #token: 3456, "
            "token usage: 0.35, cuda graph: True, gen throughput (token/s): 1234.56, "
            "#queue-req: 0")
    # the first lines of a rule: two calls (a replay's rules that fire a hundred times
    # compile no joint), then one
    assert m._match(line, False, True)[2] is NO_STAMP
    for _ in range(JOINT_AFTER - 2):
        assert m._match(line, False, True)[2] is NO_STAMP
    rule, fields, ts = m._match(line, False, True)
    assert rule.id == "decode_batch"
    assert fields == m.match_line(line)[1]
    raw, groups, names = ts
    assert raw == "[2026-12-02 10:00:07 TP0]"
    assert {k: groups[i] for k, i in names} == \
        {"Y": "2026", "m": "12", "d": "02", "H": "10", "M": "00", "S": "07", "f": None}
    # no stamp in the line: the joint says so (None), the clock does not look again
    assert m._match(line[26:], False, True)[2] is None
    # longer than the clock reads: no joint
    assert m._match(line + " " * STAMP_WITHIN, False, True)[2] is NO_STAMP


@pytest.mark.parametrize("pattern", [
    r"(?i)decode batch",               # a global inline flag would apply to the stamp too
    r"(\d+) and \1",                   # a numbered reference moves with the groups before it
    r"(?P<a>x)(?P=a)",                 # (any reference is kept apart)
    r"(?|(a)|(b))",                    # branch reset
    r"(a)?(?(1)b|c)",                  # conditional
    r"(a(?1)?b)",                      # recursion
    r"\Gabc",
    r"(?P<H>\d+) hours",               # a group name the stamp has
    r"(?P<__ts>x)",
])
def test_patterns_that_would_mean_something_else_are_not_joined(pattern: str) -> None:
    stamp = load_pack("sglang").timestamps[0].regex
    assert _joint(regex.compile(pattern, REGEX_FLAGS), stamp) is None


def test_other_flags_or_verbose_are_not_joined() -> None:
    stamp = load_pack("sglang").timestamps[0].regex
    assert _joint(regex.compile("abc", REGEX_FLAGS | regex.IGNORECASE), stamp) is None
    verbose = regex.compile("abc # a comment", REGEX_FLAGS | regex.VERBOSE)
    assert _joint(verbose, regex.compile(stamp.pattern, REGEX_FLAGS | regex.VERBOSE)) is None
    assert _joint(regex.compile(r"(?i:scoped) (?=look)(?<=k)(?>atomic)(?P<n>x)", REGEX_FLAGS),
                  stamp) is not None


def test_every_shipped_rule_of_a_pack_with_stamps_is_joined_or_kept_apart_knowingly() -> None:
    """The shipped packs join nearly every rule (the ones that are not say why here)."""
    apart_ids = []
    for pack in load_all_shipped():
        if not pack.timestamps:
            continue
        for rule in pack.rules:
            if _joint(rule.regex, pack.timestamps[0].regex) is None:
                apart_ids.append((pack.name, rule.id))
    assert len(apart_ids) <= 10, apart_ids


WORDS = st.sampled_from(["Decode batch", ", ", ". ", "#running-req: ", "token usage: ", "0.5",
                         "12", "[2026-12-02 10:00:07 TP0] ", "[10:00:07] ", "INFO 09-03 10:00:06 ",
                         "gen throughput (token/s): ", "cuda graph: True", "x", " ", "]", "[",
                         "\u00e9", "\t", "%"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(WORDS, max_size=14))
def test_joint_equals_the_two_searches(parts: list[str]) -> None:
    """On lines made of the engines' pieces, in any order: the rule's fields and the first
    format's match are exactly those of the two searches apart."""
    text = "".join(parts)
    for pack in (load_pack("sglang"), load_pack("vllm")):
        stamp = pack.timestamps[0].regex
        for rule in pack.rules:
            j = _joint(rule.regex, stamp)
            if j is None:
                continue
            m = j.rx.match(text)
            alone = rule.regex.search(text)
            assert (m is None) == (alone is None), (rule.id, text)
            if m is None:
                continue
            got = {k: m.groups()[i] for k, i in j.fields}
            assert got == {k: alone.group(k) for k in rule.regex.groupindex}, (rule.id, text)
            s = stamp.search(text[:STAMP_WITHIN])
            raw = m.groups()[j.raw]
            assert raw == (s.group(0) if s else None), (rule.id, text)
            if s:
                assert {k: m.groups()[i] for k, i in j.stamp} == s.groupdict()
