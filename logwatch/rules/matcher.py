"""Matching: which rule (if any) a line fires, for single lines and for whole blocks.

`match_line` is the definition: a line an `ignore` pattern matches fires no rule but a
`frame:` rule (ignore patterns skip traceback lines, frame rules read them); otherwise
rules are tried in pack order, a rule whose required literals are absent is skipped without
running its regex, and the first match wins.

`scan` applies that definition to a block without looking at most of its lines.  One pass
over the block's raw bytes (Hyperscan; RE2 where the `hyperscan` wheel is missing or cannot
match a literal exactly as RE2 would) finds every occurrence of the literals of the non-stats
rules; only the segments they occur in are decoded and matched.  Both engines lead to the
same segments: a literal holds no separator, so each occurrence lies in one segment, and a
segment is examined once whichever of its occurrences is reported.  Stats rules (`stats:`), whose lines are
the bulk of a serving log, are found between those hits with a second RE2: every occurrence
in exact mode (live), or only the first and last of each run in `collapse_stats` mode
(replay), which is enough because a stats match only sets gauges (last value wins) or, as
the first serving line of a log that shows no startup, marks it ready.  In that mode a
progress bar's frames after the first are skipped too while they stay frames of that bar,
and only the last is matched (rules/bars.py says why that changes nothing replay reports).
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import regex

from . import bounded
from .literals import anchored_head, start_filters
from .bars import BarRun
from .literalscan import Re2Literals, literal_finder
from .origin import Origin
from ..lines import Block, iter_segments, segment_bounds, segment_text, split_glued
from .pack import REGEX_FLAGS, Rule, RulePack, pattern_literals
from .patterns import cache_path


NO_STAMP = object()   # `Hit.ts` when the timestamp was not looked for with the rule
STAMP_WITHIN = 512    # a line's own timestamp is near its start: the clock looks no further


@dataclass(slots=True)
class Hit:
    """A rule that fired on a line."""

    rule: Rule
    fields: dict[str, str]
    text: str
    line_number: int
    offset: int
    block_pos: int  # start of the segment in the block
    wrapped: tuple[str, ...] = ()  # the line as written, and as each wrapper came off it
    proc: str = ""     # the process a removed prefix named (compose service, Ray actor ...)
    ts: Any = NO_STAMP  # the pack's first timestamp format on `text`, when the rule's match
                        # found it too (`Joint`): (raw, the match's groups, (name, index) of
                        # the format's groups), or None for no match
    own_stamp: bool | None = None  # set by the pipeline once timed: the line had its own
                                   # stamp (a `BarRun` opens only at a frame without one)
    shared_bar: bool = False  # set with it: the clock placed the frame on one of several
                              # live bars of its description (no `BarRun` opens there)


def _literal_parts(rules: list[Rule]) -> list[tuple[str, bool]]:
    """(literal, ignore_case) of every required literal of `rules`, sorted."""
    return sorted({(s, r.literals.ignore_case)  # type: ignore[union-attr]
                   for r in rules for s in r.literals.strings})  # type: ignore[union-attr]


JOINT_AFTER = 256        # lines a rule is tried on with a stamp wanted before its Joint is made
                         # (~1 ms to compile, ~3 us saved a line: it pays after ~300 lines)
PATTERN_TIMEOUT = 0.05   # seconds a rule's regex may take on one line (then: no match, counted)
LINE_BUDGET = 0.05       # CPU seconds all the patterns together may take on one line
WITHHELD = "a request log line, withheld: what a client sent"   # an excerpt's stand-in
MAX_WRAPPERS = 4         # prefixes removed from one line at most (kubectl + compose + ...)
class PerPack:
    """A value built once per pack and remembered while the pack is (hundreds of targets
    share it; it holds no per-target state).  Reloads make new packs: beyond 64 the oldest
    is forgotten."""

    def __init__(self, build: Callable[..., Any]) -> None:
        self.build = build
        self._have: dict[tuple[Any, ...], tuple[RulePack, Any]] = {}

    def __call__(self, pack: RulePack, *args: Any) -> Any:
        key = (id(pack), *args)
        have = self._have.get(key)
        if have is None or have[0] is not pack:
            have = self._have[key] = (pack, self.build(pack, *args))
            if len(self._have) > 64:
                self._have.pop(next(iter(self._have)))
        return have[1]

    def clear(self) -> None:
        self._have.clear()


_SHARED = PerPack(lambda pack, max_line_bytes: Matcher(pack, max_line_bytes))


def shared_matcher(pack: RulePack, max_line_bytes: int = 64 * 1024) -> "Matcher":
    """One compiled matcher per pack (hundreds of targets share it; it holds no state)."""
    return _SHARED(pack, max_line_bytes)  # type: ignore[no-any-return]


# what may follow `(?` in a pattern that is joined with another (`_joint`): groups,
# lookarounds, atomic groups and scoped flags; anything else (a global inline flag, a
# reference to a group by number, recursion, a conditional, branch reset) keeps it apart
_JOINABLE_GROUP = regex.compile(r"[:=!>]|P<\w+>|<[=!]|<\w+>|[a-zA-Z^-]+:")
_UNJOINABLE = regex.compile(r"\\(?:[1-9]|g|G)")


def _joinable(rx: Any) -> bool:
    """Whether `rx` means the same inside a larger pattern, given the same flags."""
    pat = rx.pattern
    if not isinstance(pat, str) or rx.flags & regex.VERBOSE or _UNJOINABLE.search(pat):
        return False
    at = pat.find("(?")
    while at >= 0:
        if _JOINABLE_GROUP.match(pat, at + 2) is None:
            return False
        at = pat.find("(?", at + 2)
    return True


@dataclass(frozen=True, slots=True)
class Joint:
    r"""A rule's regex and the pack's first timestamp format in one regex call (a serving
    line needs both: one call, one pair of clock reads for its timeout, not two).

    `\A(?=[\s\S]*?(?:RULE))(?:(?=[\s\S]*?(?P<__ts>STAMP))|)` matched at the start of a
    line: the first lookahead finds the leftmost position where RULE matches, as
    `RULE.search` does (the same positions tried in the same order, the same preference
    inside), the second the leftmost match of STAMP, as `STAMP.search` does, or nothing.
    Lookarounds are atomic, so neither is tried again once it matched.  Only patterns that
    mean the same inside another are joined (`_joinable`: no global inline flags, numbered
    references or recursion; the same flags, not VERBOSE; no group name in common), and only
    for lines the clock reads whole (STAMP_WITHIN)."""

    rx: Any
    fields: tuple[tuple[str, int], ...]   # the rule's named groups: (name, index in groups())
    stamp: tuple[tuple[str, int], ...]    # the timestamp's named groups (the same)
    raw: int                              # the index of the whole timestamp (the same)


def _joint(rule_rx: Any, stamp_rx: Any) -> Joint | None:
    if rule_rx.flags != stamp_rx.flags or not _joinable(rule_rx) or not _joinable(stamp_rx):
        return None
    names, stamp_names = set(rule_rx.groupindex), set(stamp_rx.groupindex)
    if names & stamp_names or "__ts" in names | stamp_names:
        return None
    try:
        rx = regex.compile(rf"\A(?=[\s\S]*?(?:{rule_rx.pattern}))"
                           rf"(?:(?=[\s\S]*?(?P<__ts>{stamp_rx.pattern}))|)", rule_rx.flags)
    except (regex.error, OverflowError):
        return None
    gi = rx.groupindex
    return Joint(rx, tuple((k, gi[k] - 1) for k in rule_rx.groupindex),
                 tuple((k, gi[k] - 1) for k in stamp_rx.groupindex), gi["__ts"] - 1)


def strip_wrappers(prefixes: Any, text: str, may_wrap: Callable[[str], bool] | None = None
           ) -> tuple[str, str, tuple[str, ...], int]:
    """`text` without the wrappers `prefixes` (a pack's) match at its start, removed again
    and again (MAX_WRAPPERS at most); the process the first names; the line before each came
    off; and 1 when a match timed out (0 otherwise).  `may_wrap`: a cheap test that rules
    out lines no prefix can match (`Matcher._may_wrap`)."""
    proc = ""
    layers: tuple[str, ...] = ()
    for _ in range(MAX_WRAPPERS):
        if may_wrap is not None and not may_wrap(text):
            break
        try:
            m = bounded.match(prefixes, text, PATTERN_TIMEOUT)
        except TimeoutError:
            return text, proc, layers, 1
        if m is None or m.end() == 0:
            break
        if not proc:
            proc = (m.groupdict().get("proc") or "").strip()
        layers += (text,)
        text = text[m.end():]
    return text, proc, layers, 0


@functools.lru_cache(maxsize=256)
def char_test(cls: str | None, flags: int = REGEX_FLAGS) -> Callable[..., Any] | None:
    """`.match` of a one-character class (`literals.anchored_head`, a `StartFilter.head`),
    compiled with the flags of the pattern it comes from; None for no class."""
    return regex.compile(cls, flags).match if cls else None


class Matcher:
    """A compiled rule pack.

    Long because: the per-line hot path (literal prefilter, wrappers, the line budget, the
    joint timestamp) keeps its state in one object's attributes so that a line costs as few
    lookups and calls as it can; its parts are measured together (bench/run.py --only replay,
    BENCHMARKS.md), and a split costs a call per line.
    """

    def __init__(self, pack: RulePack, max_line_bytes: int = 64 * 1024,
                 engine: str | None = None) -> None:
        self.pack = pack
        self.max_line_bytes = max_line_bytes
        self.errors = 0          # pattern timeouts, all targets using this matcher
        self.rules = pack.rules
        self._checks: list[tuple[Rule, tuple[str, ...] | None, bool]] = []
        for r in self.rules:
            lits = tuple(sorted(r.literals.strings)) if r.literals else None
            self._checks.append((r, lits, bool(r.literals and r.literals.ignore_case)))
        # ignore patterns get a literal prefilter too (most candidate lines skip the regex),
        # or for one anchored at the start, a test of the line's first character
        self._ignore: list[tuple[tuple[str, ...] | None, Any, Any]] = []
        for rx in pack.ignore:
            lit = pattern_literals(rx.pattern)
            self._ignore.append((tuple(lit.strings) if lit and not lit.ignore_case else None,
                                 char_test(anchored_head(rx.pattern)), rx))
        self._ignore_by_head: dict[str, list[tuple[tuple[str, ...] | None, Any]]] = {}
        self.unfiltered = [r for r in self.rules if r.literals is None]
        self.stats_rules = [r for r in self.rules if r.stats and r.literals is not None]
        stats_ids = {id(r) for r in self.stats_rules}  # (a Rule compares every field: by id)
        self._stats_checks = [c for c in self._checks if id(c[0]) in stats_ids]
        self._has_frames = any(r.frame for r in pack.rules)
        # where a line comes from (origin.py): request logs fire nothing, anchored rules
        # fire at the message start only
        origin = Origin(pack)
        self.origin: Origin | None = origin if origin.active else None
        self._group_names: dict[int, tuple[tuple[str, int], ...]] = {}  # id(rule) -> names
        self._prefixes = pack.prefixes
        # a rule and the first timestamp format in one call, per rule (built when first used)
        self._stamp_rx = pack.timestamps[0].regex if pack.timestamps else None
        self._joints: dict[int, Joint | None] = {}
        self._joint_tries: dict[int, int] = {}     # lines a rule was tried on, until then
        self.joint_after = JOINT_AFTER             # (tests set 1: every line by its joint)
        # what a line must hold for one of the prefixes to match it (most lines have none)
        filters = start_filters(pack.prefixes.pattern) if pack.prefixes is not None else None
        self._wrap_filters = None if filters is None else [
            (char_test(f.head), tuple(sorted(f.chars)), tuple(sorted(f.literals)))
            for f in filters]
        self._wrap_by_head: dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]] = {}
        self._literal_passes(engine, stats_ids)

    def _literal_passes(self, engine: str | None, stats_ids: set[int]) -> None:
        """The block's passes: the rare rules' literals (Hyperscan, with which rules each
        literal belongs to) and the stats rules' (RE2 windows, every occurrence, `rfind`)."""
        rare = [r for r in self.rules if r.literals is not None and id(r) not in stats_ids]
        rare_parts = _literal_parts(rare)
        self._rare = literal_finder(rare_parts, engine, cache_dir=cache_path().parent)
        # which rules each literal of that pass belongs to (a bit per rule in `_checks`), so
        # a segment tries only the rules whose literals it holds (and the stats rules)
        rare_ids = {id(r) for r in rare}
        bits_of: dict[tuple[str, bool], int] = {}
        for i, (r, lits, ci) in enumerate(self._checks):
            if id(r) in rare_ids and lits is not None:
                for lit in lits:
                    bits_of[lit, ci] = bits_of.get((lit, ci), 0) | 1 << i
        self._part_rules = [bits_of[part] for part in rare_parts]
        self._stats_bits = sum(1 << i for i, c in enumerate(self._checks) if id(c[0]) in stats_ids)
        self._checks_by_bits: dict[int, list[tuple[Rule, tuple[str, ...] | None, bool]]] = {}
        # stats literals: searched between hits, a window at a time (RE2's search(pos, endpos))
        stats = _literal_parts(self.stats_rules)
        self._stats_rx = Re2Literals(stats).rx if stats else None
        # exact mode (live) wants every stats line: their positions in one pass over a block
        self._stats_all = literal_finder(stats, engine, cache_dir=cache_path().parent)
        self._stats_maxlen = max((len(s.encode("utf-8")) for s, _ in stats), default=0)
        # a gap shorter than every stats literal holds none (most gaps between two hits are
        # one newline: not searched, ~4 us a hit); a case-insensitive non-ASCII literal may
        # match text of another byte length, so it counts as 1
        self._stats_minlen = max(1, min((len(s.encode("utf-8")) if s.isascii() or not ci else 1
                                         for s, ci in stats), default=1))
        # the same literals for `bytes.rfind` (the last stats line of a run), where a byte
        # search finds what RE2 finds: ASCII, case-sensitive
        self._stats_bytes = (tuple(s.encode("ascii") for s, _ in stats)
                             if stats and all(s.isascii() and not ci for s, ci in stats) else None)

    # -- one line ------------------------------------------------------------------------------
    def unwrap(self, text: str) -> tuple[str, str, tuple[str, ...]]:
        """`text` without the wrappers the pack's `prefixes` describe, the process the
        first of them names ("" when none does), and the line as it was before each wrapper
        came off (empty when none did: the clock looks for a stamp in each, outermost first)."""
        if self._prefixes is None:
            return text, "", ()
        inner, proc, layers, timed_out = strip_wrappers(
            self._prefixes, text, None if self._wrap_filters is None else self._may_wrap)
        self.errors += timed_out
        return inner, proc, layers

    def _may_wrap(self, text: str) -> bool:
        """Whether one of the prefixes could match at the start of `text` (its first
        character, every character it needs, one of its literals): a line none could match
        costs no bounded match.  The alternatives a first character admits are kept."""
        first = text[:1]
        alts = self._wrap_by_head.get(first)
        if alts is None:
            alts = [(chars, lits) for head, chars, lits in self._wrap_filters
                    if head is None or head(first) is not None]
            if len(self._wrap_by_head) < 256:
                self._wrap_by_head[first] = alts
        for chars, lits in alts:    # loops, not all()/any(): this runs on every line
            for c in chars:
                if c not in text:
                    break
            else:
                if not lits:
                    return True
                for s in lits:
                    if s in text:
                        return True
        return False

    def match_line(self, text: str, stats_only: bool = False,
                   unwrapped: bool = False) -> tuple[Rule, dict[str, str]] | None:
        """The first rule that matches `text`.  `stats_only`: the caller knows no other
        rule's literal is in the line (a gap between hits), so only stats rules are tried.
        `unwrapped`: the caller has removed the prefixes already."""
        layers: tuple[str, ...] = ()
        if not unwrapped and self._prefixes is not None:
            text, _, layers = self.unwrap(text)
        found = self._match(text, stats_only, False, layers)
        return None if found is None else (found[0], found[1])

    def from_client(self, text: str) -> tuple[bool, str]:
        """Whether the line, as read, carries what a client sent (a request log's prompt,
        which may quote any engine's lines), and the process its wrapper names."""
        inner, proc, layers = self.unwrap(text)
        return self._user_content(inner, layers), proc

    def withheld(self, text: str) -> str | None:
        """What a crash excerpt shows for `text` where it carries what a client sent (a
        request log's prompt: SGLang `Receive: obj=...text='...'`, vLLM `Received request`):
        its envelope (the stamp, the process) and a note of what was left out; None for the
        server's own lines.  Excerpts go to Slack, webhooks, Alertmanager: a user's prompt
        next to a crash went there verbatim."""
        inner, _, layers = self.unwrap(text)
        if not self._user_content(inner, layers):
            return None
        keep = len(text) - len(inner) if text.endswith(inner) else 0
        if self.origin is not None:
            keep += self.origin.message_start(inner)[0]
        return f"{text[:keep]}[{WITHHELD} ({len(text) - keep} chars)]"

    def _user_content(self, text: str, layers: tuple[str, ...]) -> bool:
        """Whether the line carries what a client sent: as read, or as it was before any of
        its wrappers came off (a removed "glued output" prefix may be a request log whose
        prompt holds an engine record: `Receive: obj=...(EngineCore pid=2) ERROR ...`)."""
        origin = self.origin
        if origin is None:
            return False
        if origin.user_content(text):
            return True
        for layer in layers:
            if origin.user_content(layer):
                return True
        return False

    def checks_for(self, bits: int) -> list[tuple[Rule, tuple[str, ...] | None, bool]]:
        """The checks of the rules whose bit is set, and of every stats rule, in pack order
        (`_match`'s candidates for a segment whose literals the block pass named)."""
        bits |= self._stats_bits
        checks = self._checks_by_bits.get(bits)
        if checks is None:
            checks = [c for i, c in enumerate(self._checks) if bits >> i & 1]
            if len(self._checks_by_bits) < 4096:
                self._checks_by_bits[bits] = checks
        return checks

    def _match(self, text: str, stats_only: bool, stamp: bool, layers: tuple[str, ...] = (),
               checks: list[tuple[Rule, tuple[str, ...] | None, bool]] | None = None
               ) -> tuple[Rule, dict[str, str], Any] | None:
        """`match_line` on an unwrapped line (`layers`: the line before each wrapper came
        off), and with `stamp`, the pack's first timestamp format on it too where one regex
        call can do both (`Joint`; else NO_STAMP).  `checks`: the only rules that can fire
        (`checks_for`: a rule none of whose literals the line holds is skipped anyway, so
        this changes no outcome, only the cost: a pack of 200 rules tries 3, not 200).

        Long because: the loop over the rules of one line, with its budget clocks read
        lazily and its ignore check done once; each line passes here, and a helper call per
        rule tried would cost more than the loop does (the replay benchmark)."""
        lower: str | None = None
        ignored: bool | None = None  # evaluated once, when a rule's literal is first present
        started: float | None = None  # wall clock at the line's first regex (its budget)
        cpu_since: float | None = None  # CPU clock, read once the wall clock says it matters
        if stamp and (self._stamp_rx is None or len(text) > STAMP_WITHIN):
            stamp = False
        if checks is None:
            checks = self._stats_checks if stats_only else self._checks
        for rule, lits, ci in checks:
            if lits is not None:
                if ci:
                    if lower is None:
                        lower = text.lower()
                    hay = lower
                else:
                    hay = text
                for s in lits:
                    if s in hay:
                        break
                else:
                    continue
            if ignored is None:
                ignored, started = self._ignored(text)
                if self.origin is not None and self._user_content(text, layers):
                    return None      # what a client sent: not the server's own words
            if ignored and not rule.frame:
                if not self._has_frames:
                    return None
                continue         # an ignored line (traceback source) fires only frame rules
            if started is None:   # the line's first regex: its budget starts now, whole
                started, left = bounded.wall_clock(), LINE_BUDGET
            else:
                left, cpu_since = bounded.budget_left(LINE_BUDGET, started, cpu_since)
            if left <= 0:     # a hostile line: no more of its time goes to patterns
                self.errors += 1
                return None
            at = self.origin is not None and self.origin.is_anchored(rule)
            if stamp and not at:   # (an anchored rule's hit needs its position: no joint)
                joint = self._joints.get(id(rule), NO_STAMP)
                if joint is NO_STAMP:
                    # compiled (~1 ms) for a rule that keeps firing (the matcher is shared:
                    # at 500 live targets a serving rule gets there in well under a second),
                    # not for a replay's rules that fire a hundred times (the 2M-line genlog:
                    # 13 joints were 12 ms of its 0.37 s)
                    tries = self._joint_tries[id(rule)] = self._joint_tries.get(id(rule), 0) + 1
                    joint = None
                    if tries >= self.joint_after:
                        joint = self._joints[id(rule)] = _joint(rule.regex, self._stamp_rx)
                if joint is not None:
                    try:
                        m = bounded.match(joint.rx, text, min(PATTERN_TIMEOUT, left))
                    except TimeoutError:
                        pass     # the two apart, as without a joint (the rule alone may not)
                    else:
                        if m is None:
                            continue
                        groups = m.groups()
                        fields = {k: groups[i] for k, i in joint.fields if groups[i] is not None}
                        raw = groups[joint.raw]
                        return rule, fields, None if raw is None else (raw, groups, joint.stamp)
                    left, cpu_since = bounded.budget_left(LINE_BUDGET, started, cpu_since)
                    if left <= 0:
                        self.errors += 1
                        return None
            try:
                m = bounded.search(rule.regex, text, min(PATTERN_TIMEOUT, left))
            except TimeoutError:  # a pathological pattern on a pathological line: skip it
                self.errors += 1
                continue
            if m is not None:
                if at and not self.origin.at_position(text, m.start()):  # type: ignore[union-attr]
                    continue     # inside the message, not where the engine prints it
                return rule, self._fields(rule, m), NO_STAMP
        return None

    def _ignored(self, text: str) -> tuple[bool, float | None]:
        """Whether an `ignore` pattern matches `text`, and the wall clock when the first of
        them had to run (None when the prefilters ruled them all out: no clock was read)."""
        started: float | None = None
        first = text[:1]
        patterns = self._ignore_by_head.get(first)
        if patterns is None:   # the patterns whose first character class admits this one
            patterns = [(lits, rx) for lits, head, rx in self._ignore
                        if head is None or head(first, 0, 1) is not None]
            if len(self._ignore_by_head) < 256:
                self._ignore_by_head[first] = patterns
        for lits, rx in patterns:
            if lits is not None:
                for x in lits:          # a loop, not any(): this runs on every line
                    if x in text:
                        break
                else:
                    continue
            if started is None:
                started = bounded.wall_clock()
            try:
                if bounded.search(rx, text, PATTERN_TIMEOUT) is not None:
                    return True, started
            except TimeoutError:
                self.errors += 1
                return False, started
        return False, started

    def _fields(self, rule: Rule, m: Any) -> dict[str, str]:
        """The named groups a match set (`groupdict()` builds a dict of every group first,
        which costs more than the rest of a stats line's matching)."""
        names = self._group_names.get(id(rule))
        if names is None:
            names = self._group_names[id(rule)] = tuple(
                (k, i - 1) for k, i in rule.regex.groupindex.items())
        groups = m.groups()
        return {k: groups[i] for k, i in names if groups[i] is not None}

    # -- a block -------------------------------------------------------------------------------
    def scan(self, block: Block, collapse_stats: bool = False,
             bar_runs: bool = False) -> Iterator[Hit]:
        """The hits of a block, in order; `bar_runs`: skip the frames inside a run of one bar
        (rules/bars.py; a finished log's reading)."""
        if self.unfiltered:
            yield from self._scan_every_line(block)
            return
        scan = _BlockScan(self, block, collapse_stats)
        examined = 0      # end of the last segment looked at
        occurrences = getattr(self._rare, "occurrences", None)
        if occurrences is not None:    # Hyperscan: which literals, too
            data, found_at = block.data, occurrences(block.data)
            bits, n, i = self._rare.id_bits, len(found_at), 0  # type: ignore[union-attr]
            mask, part_rules = (1 << bits) - 1, self._part_rules
            run: BarRun | None = None    # the bar whose frames are skipped (bar_runs)
            while i < n:
                first = found_at[i] >> bits
                s, e = segment_bounds(data, first)
                rules = 0
                limit = e << bits          # every occurrence in this segment, at once
                while i < n and found_at[i] < limit:
                    rules |= part_rules[found_at[i] & mask]
                    i += 1
                if run is not None:
                    if scan.no_stats_before(run, e) and run.takes(data, s, e, rules):
                        continue     # a frame of the bar (its last is matched at the run's end)
                    yield from scan.end_run(run)
                    run = None
                found = scan.match_segment(s, e, checks=self.checks_for(rules))
                if not found or _serving_only(found):
                    continue  # a literal but no rule: it does not interrupt a run of stats
                yield from scan.stats_between(scan.cursor, s)
                hits = scan.emit(s, found)
                yield from scan.output(hits)     # (the pipeline has timed them when it resumes)
                scan.cursor = e
                if bar_runs:
                    run = BarRun.opened_by(hits, rules, data, s, first, e, self.max_line_bytes)
            if run is not None:
                yield from scan.end_run(run)
        elif self._rare is not None:
            for pos in self._rare.positions(block.data):
                if pos < examined:
                    continue  # another literal on a segment already looked at
                s, e = segment_bounds(block.data, pos)
                examined = e
                found = scan.match_segment(s, e)
                if not found or _serving_only(found):
                    continue  # a literal but no rule: it does not interrupt a run of stats
                yield from scan.stats_between(scan.cursor, s)
                yield from scan.output(scan.emit(s, found))
                scan.cursor = e
        yield from scan.stats_between(scan.cursor, len(block.data))
        yield from scan.flush()
        scan.finish()

    def _scan_every_line(self, block: Block) -> Iterator[Hit]:
        data = block.data
        for start, end, line_no in iter_segments(block):
            text = segment_text(data[start:end], self.max_line_bytes)
            for part in split_glued(text):
                inner, proc, layers = self.unwrap(part)
                found = self._match(inner, False, not layers, layers)
                if found is not None:
                    yield Hit(found[0], found[1], inner, line_no, block.raw_offset(start), start,
                              layers, proc, found[2])


def _serving_only(found: list[Found]) -> bool:
    """Only stats rules fired on a segment that holds another rule's literal (`(MainProcess
    pid=1) ... Engine 000: Avg prompt throughput`: `Process `): a line of its run of serving
    lines, which `_BlockScan.stats_between` reads as it reads the others (collapsed in a
    replay), not a hit that ends the run."""
    for f in found:
        if not f.rule.stats:
            return False
    return True


@dataclass(slots=True)
class Found:
    """A rule a part of a segment fired, before its position is known."""

    rule: Rule
    fields: dict[str, str]
    text: str
    wrapped: tuple[str, ...]
    proc: str
    ts: Any = NO_STAMP


class _BlockScan:
    """Position bookkeeping for one `Matcher.scan` (line numbers are counted incrementally)."""

    def __init__(self, matcher: Matcher, block: Block, collapse: bool) -> None:
        self.m = matcher
        self.block = block
        self.collapse = collapse
        self.pending: Hit | None = None
        self.data = block.data
        self.line_pos = 0
        self.line_no = block.line_number
        self.newlines_before = 0   # `\n` in data[:line_pos]
        self.in_run = False   # the last hit emitted was a stats hit (a run is open)
        self.cursor = 0       # end of the last segment that fired a rule (stats gaps start here)
        self._stats_at: list[int] | None = None  # exact mode: stats literal positions
        self._stats_next = 0                     # the first of them not passed yet

    def finish(self) -> None:
        """Record the block's newline count (counted up to the last hit already)."""
        if self.block.newline_count is None:
            self.block.newline_count = self.newlines_before + self._newlines(len(self.data))

    def _newlines(self, pos: int) -> int:
        """`\\n` in data[line_pos:pos]: counted there, or from the block's total when that
        is cheaper (a run of stats lines from a block's start to its end: its last line is
        found near the end, the total costs about half a `count` of the block, see
        `lines.count_newlines`, and is taken once)."""
        n = len(self.data)
        direct = pos - self.line_pos
        if direct <= n - pos + (0 if self.block.newline_count is not None else n // 2):
            return self.data.count(b"\n", self.line_pos, pos)
        return self.block.newlines() - self.newlines_before - self.data.count(b"\n", pos)

    def match_segment(self, start: int, end: int, stats_only: bool = False,
                      checks: list[tuple[Rule, tuple[str, ...] | None, bool]] | None = None
                      ) -> list[Found]:
        """The rules a segment fires (a glued record counts separately); `checks`: the
        only rules that can (`Matcher.checks_for`)."""
        text = segment_text(self.data[start:end], self.m.max_line_bytes)
        out = []
        for part in split_glued(text):
            inner, proc, layers = self.m.unwrap(part)
            found = self.m._match(inner, stats_only, not layers, layers, checks)
            if found is not None:
                out.append(Found(found[0], found[1], inner, layers, proc, found[2]))
        return out

    def emit(self, start: int, found: list[Found]) -> list[Hit]:
        """Hits for a segment at `start` (segments must be emitted in order)."""
        between = self._newlines(start)
        self.line_no += between
        self.newlines_before += between
        if self.block.joins:
            self.line_no += self.block.joins_in(self.line_pos, start)
        self.line_pos = start
        offset = self.block.raw_offset(start)
        return [Hit(f.rule, f.fields, f.text, self.line_no, offset, start, f.wrapped, f.proc, f.ts)
                for f in found]

    def output(self, hits: list[Hit]) -> Iterator[Hit]:
        """Pass hits on; when collapsing, hold back a run's stats hits but its first and last."""
        if not self.collapse:
            yield from hits
            return
        for hit in hits:
            if hit.rule.stats is None:
                yield from self.flush()
                self.in_run = False
                yield hit
            elif not self.in_run:
                self.in_run = True
                yield hit
            else:
                self.pending = hit  # the last of the run so far

    def end_run(self, run: BarRun) -> Iterator[Hit]:
        """The hits a bar run held back: its last frame's, or when that does not fire the
        run's rule alone, every skipped segment's (as without a run)."""
        if not run.skipped:
            return
        checks = self.m.checks_for(run.bits)
        s, e = run.skipped[-1]
        last = self.match_segment(s, e, checks=checks)
        if len(last) == 1 and last[0].rule is run.rule:
            segments = [(s, e, last)]
        else:
            segments = [(s, e, self.match_segment(s, e, checks=checks))
                        for s, e in run.skipped[:-1]] + [(s, e, last)]
        for s, e, found in segments:
            if found:
                yield from self.stats_between(self.cursor, s)
                yield from self.output(self.emit(s, found))
                self.cursor = e

    def flush(self) -> Iterator[Hit]:
        if self.pending is not None:
            yield self.pending
            self.pending = None

    def stats_between(self, lo: int, hi: int) -> Iterator[Hit]:
        """Stats hits in [lo, hi): every one, or when collapsing only the first (unless a run
        is already open) and the last."""
        rx = self.m._stats_rx
        if rx is None or hi - lo < self.m._stats_minlen:
            return
        if not self.collapse:
            yield from self._every_stats(lo, hi)
            return
        pos = lo
        while pos < hi and not (self.collapse and self.in_run):
            found = rx.search(self.data, pos, hi)
            if found is None:
                return
            s, e = segment_bounds(self.data, found.start())
            pos = e + 1
            matched = self.match_segment(s, e, stats_only=True)
            if matched:
                yield from self.output(self.emit(s, matched))
        if self.collapse and pos < hi:
            last = self._last(pos, hi)
            if last is not None:
                yield from self.output(self.emit(last[0], self.match_segment(*last, stats_only=True)))

    def _stats_positions(self) -> list[int]:
        """Exact mode: where the stats literals end in the block, from one pass of the
        literal finder (one call for a block, rather than one search per line)."""
        at = self._stats_at
        if at is None:
            finder = self.m._stats_all
            at = self._stats_at = list(finder.positions(self.data)) if finder else []
        return at

    def no_stats_before(self, run: BarRun, end: int) -> bool:
        """Whether a bar run may take the segment ending at `end`: in exact mode, only when
        no stats literal lies since the run's last frame (a serving line between two frames
        is read in its place, at the time the frames before it moved the clock to)."""
        if self.collapse:
            return True
        at = self._stats_positions()
        i = bisect_left(at, run.end)
        return i == len(at) or at[i] >= end

    def _every_stats(self, lo: int, hi: int) -> Iterator[Hit]:
        """Every stats hit in [lo, hi) (`_stats_positions`).  Windows come in order."""
        at = self._stats_positions()
        i, n, examined = self._stats_next, len(at), lo
        while i < n and at[i] < lo:
            i += 1
        while i < n and at[i] < hi:
            pos = at[i]
            i += 1
            if pos < examined:
                continue     # another literal in a segment already looked at
            s, e = segment_bounds(self.data, pos)
            examined = e
            matched = self.match_segment(s, e, stats_only=True)
            if matched:
                yield from self.output(self.emit(s, matched))
        self._stats_next = i

    def _last(self, lo: int, hi: int) -> tuple[int, int] | None:
        """The last segment in [lo, hi) that a stats rule matches.

        Searched backwards in windows from 4 KiB, growing 4x while empty (stats lines are
        dense where they occur: a few lines of one window answer, each rfind scans it);
        consecutive windows overlap by the longest literal so none is cut in two.  In a
        window, the last occurrence of any literal (`rfind` each) is in the segment of RE2's
        last match: a later occurrence that RE2 skipped overlaps that match.
        """
        data, rx, end, width = self.data, self.m._stats_rx, hi, 1 << 12
        overlap = self.m._stats_maxlen
        lits = self.m._stats_bytes
        while end > lo:
            start = max(lo, end - width)
            if lits is not None:
                best = max([data.rfind(s, start, end) for s in lits])
            else:
                best = -1
                for found in rx.finditer(data, start, end):  # type: ignore[union-attr]
                    best = found.start()
            if best < 0:
                if start == lo:
                    return None
                end, width = min(start + overlap, end), width * 4
                continue
            s, e = segment_bounds(data, best)
            text = segment_text(data[s:e], self.m.max_line_bytes)
            if any(self.m.match_line(p, stats_only=True) for p in split_glued(text)):
                return s, e
            end = s
        return None
