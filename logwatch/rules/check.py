"""`logwatch rules check` and `logwatch rules test`: rule packs are tested like code.

`check` loads a pack (schema errors are `PackError`s) and proves every sample line: it must
match its rule's pattern with the fields it declares, and the whole pack must route it to
that rule (no earlier rule steals it), and the rule's prefilter literal must occur in it.

`test` says what a pack makes of each line of a log: the rule, and its meaning
(`line_meaning`: phase begun, progress kind, crash reason, hint, stop, endpoint, stats),
the object `logwatch rules test --json` prints and CI of a user's own pack (or the engine
inventories, tests/inventory/) checks with `meaning_accepts`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

from ..lines import Framer, iter_lines
from .matcher import Matcher, shared_matcher
from .pack import Rule, RulePack, record_forms


@dataclass(frozen=True)
class SampleProblem:
    pack: str
    rule: str
    line: str
    message: str

    def __str__(self) -> str:
        return f"{self.pack}: rule '{self.rule}': samples: {self.message}: {self.line!r}"


def check_samples(pack: RulePack) -> list[SampleProblem]:
    matcher = Matcher(pack)
    problems: list[SampleProblem] = []
    for rule in pack.rules:
        for s in rule.samples:
            def bad(msg: str) -> None:
                problems.append(SampleProblem(rule.source, rule.id, s.line, msg))  # noqa: B023
            m = rule.regex.search(s.line)
            if not s.matches:
                if m is not None:
                    bad("matches, but the sample says it must not")
                continue
            if m is None:
                bad("does not match the pattern")
                continue
            got = {k: v for k, v in m.groupdict().items() if v is not None}
            for k, want in (s.fields or {}).items():
                if got.get(k) != want:
                    bad(f"field '{k}' is {got.get(k)!r}, the sample expects {want!r}")
            if rule.literals is not None:
                hay = s.line.lower() if rule.literals.ignore_case else s.line
                if not any(lit in hay for lit in rule.literals.strings):
                    bad(f"matches, but none of the prefilter literals "
                        f"{sorted(rule.literals.strings)} occurs in it")
                    continue
            routed = matcher.match_line(s.line)
            if routed is None or routed[0] is not rule:
                other = routed[0].id if routed else "no rule"
                bad(f"the pack routes it to {other!r} (an earlier rule wins); reorder the rules")
    return problems


def pack_warnings(pack: RulePack) -> list[str]:
    out = []
    for r in pack.rules:
        if r.literals is None:
            out.append(f"{r.source}: rule '{r.id}': pattern: no literal text could be derived, "
                       "so this rule runs on every line (slow); add `prefilter: [...]`")
        if not r.samples:
            out.append(f"{r.source}: rule '{r.id}': samples: none (add a real log line)")
    return out


@dataclass(frozen=True)
class LineVerdict:
    line_number: int
    text: str
    rule: str | None
    meaning: dict[str, Any] | None = None   # `meaning`; None when no rule matched


def meaning(rule: Rule | None, fields: dict[str, str] | None = None) -> dict[str, Any]:
    """What one rule's match says, as data: the keys a pack's user (or CI) asserts on.
    Line level: the rule's `when:` and the machine's phase order are not applied."""
    if rule is None:
        return {"rule": None}
    out: dict[str, Any] = {"rule": rule.id}
    for key in ("phase", "progress", "crash", "hint", "stats"):
        value = getattr(rule, key)
        if value is not None:
            out[key] = value
    for key in ("restart", "stop", "endpoint", "chain", "marker", "tentative", "begins"):
        if getattr(rule, key, False):
            out[key] = True
    for key in ("beside", "closes_as"):
        if getattr(rule, key, None):
            out[key] = getattr(rule, key)
    if fields:
        out["fields"] = dict(fields)
    return out


def line_meaning(pack: RulePack, line: str) -> dict[str, Any]:
    """What `pack` makes of one line (its prefixes removed first, as the daemon does)."""
    found = shared_matcher(pack).match_line(line)
    return meaning(*found) if found else meaning(None)


MEANING_WORDS = ("phase", "restart", "progress", "crash", "hint", "stop", "stats", "endpoint",
                 "info")


def meaning_accepts(expect: list[str], got: dict[str, Any]) -> bool:
    """Whether `got` (a `meaning`) is one of `expect`: `phase:P`, `restart`, `progress:K`,
    `crash:R` (`crash:*`: any reason), `hint:R`, `stop`, `stats`, `endpoint`, or `info` (no
    rule, or one with no crash / stop / restart and no phase but the `phase:` ones listed)."""
    phases = {e.split(":", 1)[1] for e in expect if e.startswith("phase:")}
    for e in expect:
        word, _, arg = e.partition(":")
        if word == "info":
            if got.get("rule") is None or not (
                    got.get("crash") or got.get("stop") or got.get("restart")
                    or (got.get("phase") and got["phase"] not in phases)):
                return True
        elif word in ("restart", "stop", "endpoint"):
            if got.get(word):
                return True
        elif word == "stats":
            if got.get("stats"):
                return True
        elif word == "crash":
            if got.get("crash") and arg in ("*", got["crash"]):
                return True
        elif word in ("phase", "progress", "hint"):
            if got.get(word) == arg:
                return True
    return False


def test_lines(pack: RulePack, f: BinaryIO) -> Iterator[LineVerdict]:
    """Which rule matched each line of a log (None: no rule did), streaming."""
    matcher = Matcher(pack)
    framer = Framer(max_line_bytes=matcher.max_line_bytes, records=record_forms(pack))
    blocks = (framer.feed(chunk, 0.0) for chunk in iter(lambda: f.read(1 << 20), b""))
    for block in itertools.chain(blocks, iter(lambda: framer.flush(0.0), None)):
        if block is None:
            continue
        for line in iter_lines(block, matcher.max_line_bytes):
            found = matcher.match_line(line.text)
            yield LineVerdict(line.line_number, line.text, found[0].id if found else None,
                              meaning(*found) if found else None)
