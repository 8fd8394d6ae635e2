"""Matching: which rule (if any) a line fires, for single lines and for whole blocks.

`match_line` is the definition: a line an `ignore` pattern matches fires no rule but a
`frame:` rule (ignore patterns skip traceback lines, frame rules read them); otherwise
rules are tried in pack order, a rule whose required literals are absent is skipped without
running its regex, and the first match wins.

`scan` applies that definition to a block without looking at most of its lines.  One RE2 pass
over the block's raw bytes finds every occurrence of the literals of the non-stats rules; only
the segments they occur in are decoded and matched.  Stats rules (`stats:`), whose lines are
the bulk of a serving log, are found between those hits with a second RE2: every occurrence
in exact mode (live), or only the first and last of each run in `collapse_stats` mode
(replay), which is enough because a stats match only sets gauges (last value wins) or, as
the first serving line of a log that shows no startup, marks it ready.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import re2

from . import bounded
from .literals import required_literals
from ..lines import Block, iter_segments, segment_bounds, segment_text, split_glued
from .pack import Rule, RulePack


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


def _rx_literal(lit: str, ignore_case: bool) -> str:
    esc = re2.escape(lit) if hasattr(re2, "escape") else _escape(lit)
    return f"(?i:{esc})" if ignore_case else esc


def _escape(lit: str) -> str:
    return "".join("\\" + c if not (c.isalnum() or c == " " or ord(c) > 127) else c for c in lit)


PATTERN_TIMEOUT = 0.05   # seconds a rule's regex may take on one line (then: no match, counted)
LINE_BUDGET = 0.05       # CPU seconds all the patterns together may take on one line
MAX_WRAPPERS = 4         # prefixes removed from one line at most (kubectl + compose + ...)
_SHARED: dict[int, tuple[RulePack, int, "Matcher"]] = {}


def shared_matcher(pack: RulePack, max_line_bytes: int = 64 * 1024) -> "Matcher":
    """One compiled matcher per pack (hundreds of targets share it; it holds no state)."""
    key = id(pack)
    have = _SHARED.get(key)
    if have is None or have[0] is not pack or have[1] != max_line_bytes:
        have = (pack, max_line_bytes, Matcher(pack, max_line_bytes))
        _SHARED[key] = have
        if len(_SHARED) > 64:  # reloads make new packs: forget the oldest
            _SHARED.pop(next(iter(_SHARED)))
    return have[2]


class Matcher:
    """A compiled rule pack."""

    def __init__(self, pack: RulePack, max_line_bytes: int = 64 * 1024) -> None:
        self.pack = pack
        self.max_line_bytes = max_line_bytes
        self.errors = 0          # pattern timeouts, all targets using this matcher
        self.rules = pack.rules
        self._checks: list[tuple[Rule, tuple[str, ...] | None, bool]] = []
        for r in self.rules:
            lits = tuple(sorted(r.literals.strings)) if r.literals else None
            self._checks.append((r, lits, bool(r.literals and r.literals.ignore_case)))
        # ignore patterns get a literal prefilter too (most candidate lines skip the regex)
        self._ignore = []
        for rx in pack.ignore:
            lit = required_literals(rx.pattern)
            self._ignore.append((tuple(lit.strings) if lit and not lit.ignore_case else None, rx))
        self.unfiltered = [r for r in self.rules if r.literals is None]
        self.stats_rules = [r for r in self.rules if r.stats and r.literals is not None]
        self._stats_checks = [c for c in self._checks if c[0] in self.stats_rules]
        self._has_frames = any(r.frame for r in pack.rules)
        self._prefixes = pack.prefixes
        rare = [r for r in self.rules if r.literals is not None and r not in self.stats_rules]
        self._rare_rx = self._alternation(rare)
        self._stats_rx = self._alternation(self.stats_rules)
        self._stats_maxlen = max((len(s.encode("utf-8")) for r in self.stats_rules
                                  for s in r.literals.strings), default=0)  # type: ignore[union-attr]

    @staticmethod
    def _alternation(rules: list[Rule]) -> object | None:
        parts = sorted({_rx_literal(s, r.literals.ignore_case)  # type: ignore[union-attr]
                        for r in rules for s in r.literals.strings})  # type: ignore[union-attr]
        if not parts:
            return None
        opts = re2.Options()
        opts.max_mem = 64 << 20
        return re2.compile("|".join(parts).encode("utf-8"), opts)

    # -- one line ------------------------------------------------------------------------------
    def unwrap(self, text: str) -> tuple[str, str, tuple[str, ...]]:
        """`text` without the wrappers the pack's `prefixes` describe, the process the
        first of them names ("" when none does), and the line as it was before each wrapper
        came off (empty when none did: the clock looks for a stamp in each, outermost first)."""
        rx = self._prefixes
        if rx is None:
            return text, "", ()
        proc = ""
        layers: tuple[str, ...] = ()
        for _ in range(MAX_WRAPPERS):
            try:
                m = bounded.match(rx, text, PATTERN_TIMEOUT)
            except TimeoutError:
                self.errors += 1
                break
            if m is None or m.end() == 0:
                break
            if not proc:
                proc = (m.groupdict().get("proc") or "").strip()
            layers += (text,)
            text = text[m.end():]
        return text, proc, layers

    def match_line(self, text: str, stats_only: bool = False,
                   unwrapped: bool = False) -> tuple[Rule, dict[str, str]] | None:
        """The first rule that matches `text`.  `stats_only`: the caller knows no other
        rule's literal is in the line (a gap between hits), so only stats rules are tried.
        `unwrapped`: the caller has removed the prefixes already."""
        if not unwrapped and self._prefixes is not None:
            text = self.unwrap(text)[0]
        lower: str | None = None
        ignored: bool | None = None  # evaluated once, when a rule's literal is first present
        started: float | None = None  # CPU clock at the line's first regex (its budget)
        for rule, lits, ci in (self._stats_checks if stats_only else self._checks):
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
            if started is None:
                started = bounded.cpu_clock()
            if ignored is None:
                try:
                    ignored = any((lits is None or any(x in text for x in lits)) and
                                  bounded.search(rx, text, PATTERN_TIMEOUT) is not None
                                  for lits, rx in self._ignore)
                except TimeoutError:
                    self.errors += 1
                    ignored = False
            if ignored and not rule.frame:
                if not self._has_frames:
                    return None
                continue         # an ignored line (traceback source) fires only frame rules
            left = LINE_BUDGET - (bounded.cpu_clock() - started)
            if left <= 0:     # a hostile line: no more of its time goes to patterns
                self.errors += 1
                return None
            try:
                m = bounded.search(rule.regex, text, min(PATTERN_TIMEOUT, left))
            except TimeoutError:  # a pathological pattern on a pathological line: skip it
                self.errors += 1
                continue
            if m is not None:
                return rule, {k: v for k, v in m.groupdict().items() if v is not None}
        return None

    # -- a block -------------------------------------------------------------------------------
    def scan(self, block: Block, collapse_stats: bool = False) -> Iterator[Hit]:
        """The hits of a block, in order."""
        if self.unfiltered:
            yield from self._scan_every_line(block)
            return
        scan = _BlockScan(self, block, collapse_stats)
        cursor = 0        # end of the last segment that fired a rule (stats gaps start here)
        examined = 0      # end of the last segment looked at
        if self._rare_rx is not None:
            for m in self._rare_rx.finditer(block.data):
                pos = m.start()
                if pos < examined:
                    continue  # another literal on a segment already looked at
                s, e = segment_bounds(block.data, pos)
                examined = e
                found = scan.match_segment(s, e)
                if not found:
                    continue  # a literal but no rule: it does not interrupt a run of stats
                yield from scan.stats_between(cursor, s)
                yield from scan.output(scan.emit(s, found))
                cursor = e
        yield from scan.stats_between(cursor, len(block.data))
        yield from scan.flush()
        scan.finish()

    def _scan_every_line(self, block: Block) -> Iterator[Hit]:
        data = block.data
        for start, end, line_no in iter_segments(block):
            text = segment_text(data[start:end], self.max_line_bytes)
            for part in split_glued(text):
                inner, proc, layers = self.unwrap(part)
                found = self.match_line(inner, unwrapped=True)
                if found is not None:
                    yield Hit(found[0], found[1], inner, line_no, block.raw_offset(start), start,
                              layers, proc)


@dataclass(slots=True)
class Found:
    """A rule a part of a segment fired, before its position is known."""

    rule: Rule
    fields: dict[str, str]
    text: str
    wrapped: tuple[str, ...]
    proc: str


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
        self.in_run = False   # the last hit emitted was a stats hit (a run is open)

    def finish(self) -> None:
        """Record the block's newline count (counted up to the last hit already)."""
        self.block.newline_count = (self.line_no - self.block.line_number
                                    - self.block.joins_in(0, self.line_pos)
                                    + self.data.count(b"\n", self.line_pos))

    def match_segment(self, start: int, end: int, stats_only: bool = False) -> list[Found]:
        """The rules a segment fires (a glued record counts separately)."""
        text = segment_text(self.data[start:end], self.m.max_line_bytes)
        out = []
        for part in split_glued(text):
            inner, proc, layers = self.m.unwrap(part)
            found = self.m.match_line(inner, stats_only, unwrapped=True)
            if found is not None:
                out.append(Found(found[0], found[1], inner, layers, proc))
        return out

    def emit(self, start: int, found: list[Found]) -> list[Hit]:
        """Hits for a segment at `start` (segments must be emitted in order)."""
        self.line_no += self.data.count(b"\n", self.line_pos, start)
        if self.block.joins:
            self.line_no += self.block.joins_in(self.line_pos, start)
        self.line_pos = start
        offset = self.block.raw_offset(start)
        return [Hit(f.rule, f.fields, f.text, self.line_no, offset, start, f.wrapped, f.proc)
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

    def flush(self) -> Iterator[Hit]:
        if self.pending is not None:
            yield self.pending
            self.pending = None

    def stats_between(self, lo: int, hi: int) -> Iterator[Hit]:
        """Stats hits in [lo, hi): every one, or when collapsing only the first (unless a run
        is already open) and the last."""
        rx = self.m._stats_rx
        if rx is None or lo >= hi:
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

    def _last(self, lo: int, hi: int) -> tuple[int, int] | None:
        """The last segment in [lo, hi) that a stats rule matches.

        Searched backwards in growing windows (stats lines are dense where they occur);
        consecutive windows overlap by the longest literal so none is cut in two.
        """
        data, rx, end, width = self.data, self.m._stats_rx, hi, 1 << 16
        overlap = self.m._stats_maxlen
        while end > lo:
            start = max(lo, end - width)
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
