"""Which engine wrote a log, and where to start reading one met for the first time.

`detect_pack` picks the pack whose `detect` patterns match the first lines (`--rules auto`).
`StartupLocator` finds the latest startup in a log; sources get one as their start locator
(sources/base.py `StartLocator`), so they need nothing from the rules engine.

Not at its end (the watcher would know nothing about the server it joins) and not at byte 0
(every old crash in a week-long log would be reported again): at the physical line of the
last restart marker (`server_args=`, vLLM's version line), found with the same literal scan
as replay.  A log without any marker is read from its start.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Sequence

from ..lines import (
    CRI_RECORD, DEFAULT_MAX_LINE_BYTES, Block, JsonRecords, RecordForm, is_json_log_record,
    records_to_cri,
    join_partial_records, json_records_to_text, line_texts, split_glued,
)
from . import bounded
from .matcher import PATTERN_TIMEOUT, Matcher, PerPack, strip_wrappers
from .literalscan import literal_finder
from .args import parse_args_line
from .pack import (
    DetectPattern, Rule, RulePack, load_all_shipped, load_pack, record_forms,
)
from .patterns import cache_path


def _restart_matcher(pack: RulePack) -> Matcher | None:
    rules = tuple(r for r in pack.rules if r.restart)
    return Matcher(dataclasses.replace(pack, rules=rules)) if rules else None


# the matcher of a pack's restart markers, one per pack (500 targets starting would each
# compile the same one: ~0.6 ms and two Hyperscan databases apiece)
restart_matcher = PerPack(_restart_matcher)

LAUNCH_LINES = 200   # lines after a launch's first marker its other markers come within


class LaunchMarkers:
    """The restart markers of the launch a pack's markers began last: where it begins.

    One launch may print several: vLLM its version line, then its arguments (the machine
    reads them as one startup while it is still launching), each of its API servers its own
    (a DP supervisor's, `--api-server-count`: the pack's `servers:`, machine/servers.py);
    every node of a multi-node launch its own dump where they share one file untagged (`srun`
    without `--label`; the pack's `follower.nodes`, machine/follower.py `node_joins`).  The
    launch begins at the first of them, not at the last (read from there, a vLLM launch had
    no version, a supervised one one server, a head node's launch was its follower's).
    Processes of one stream (a wrapper's `proc`: compose's prefill and decode services) each
    print their own: another process's markers join the launch (machine/servers.py
    `proc_joins`); the same process printing its launch again is a new one."""

    def __init__(self, pack: RulePack) -> None:
        spec = pack.follower
        self.pack = pack
        self.spec = spec if spec is not None and spec.node_rank else None
        self.rules: set[str] = set()        # the markers the launch printed, per server
        self.line = -LAUNCH_LINES - 1       # the line of its first
        self.nodes: tuple[int, tuple[Any, ...]] | None = None  # node count, what they share
        self.ranks: set[int] = set()        # the nodes whose dump it printed
        self.procs: set[str] = set()        # the processes of one stream that printed one

    def joins(self, rule: Rule, text: str, line_number: int, proc: str = "") -> bool:
        """Is this marker (`rule` fired on `text`, unwrapped; `proc` the process its wrapper
        names) another of the launch found before?"""
        node = self._node(rule, text)
        if node is not None and node[1] == self.nodes and node[0] not in self.ranks:
            self.ranks.add(node[0])
            return True
        key = f"{proc}>{self.pack.server_of(text)}|{rule.id}"
        if proc and self.procs and proc not in self.procs:
            self.procs.add(proc)
            self.rules.add(key)
            return True
        if node is None and key not in self.rules and line_number - self.line <= LAUNCH_LINES:
            self.rules.add(key)
            return True
        self.rules, self.line = {key}, line_number
        self.procs = {proc} if proc else set()
        self.nodes, self.ranks = (node[1], {node[0]}) if node is not None else (None, set())
        return False

    def _node(self, rule: Rule, text: str) -> tuple[int, tuple[Any, ...]] | None:
        """(node rank, (node count, what the launch's nodes share)) of a dump that names a
        node of a launch of several; None for any other marker."""
        if self.spec is None or not rule.args:
            return None
        parsed = parse_args_line(text, rule.args_specs)
        node = self.spec.node_of(parsed.values) if parsed is not None else None
        if node is None:
            return None
        assert parsed is not None
        return node[0], (node[1], tuple(parsed.values.get(k) for k in self.spec.node_same))


class _PackMarkers:
    """One pack's restart markers and where the latest launch they show begins."""

    def __init__(self, pack: RulePack) -> None:
        self.pack = pack
        self.matcher = restart_matcher(pack)
        self.launch = LaunchMarkers(pack)
        self.best: tuple[int, int] | None = None

    def found(self, rule: Rule, text: str, offset: int, line_number: int, proc: str = "") -> None:
        if not self.launch.joins(rule, text, line_number, proc):
            self.best = (offset, line_number)


def _forms(packs: Sequence[RulePack]) -> tuple[RecordForm, ...]:
    """The record forms of several packs, each once (by logger name they do not collide)."""
    return tuple(dict.fromkeys(f for p in packs for f in record_forms(p)))


def _latest(markers: list[_PackMarkers]) -> tuple[int, int] | None:
    found = [m.best for m in markers if m.best is not None]
    return max(found) if found else None


class StartupFinder:
    """Fed a log from byte 0 in chunks, remembers where its latest launch begins: the first
    marker of the last launch any of the packs shows (each pack's markers fire only where
    its own engine's envelope puts them: `--rules auto` asks every shipped pack)."""

    def __init__(self, packs: Sequence[RulePack]) -> None:
        self.markers = [m for m in map(_PackMarkers, packs) if m.matcher is not None]
        self.records = _forms(packs)
        self.json = JsonRecords()   # Docker's / journald's records, as the framer reads them
        self.tail = b""
        self.offset = 0        # log offset of tail[0]
        self.line_number = 1   # line of tail[0]

    def feed(self, chunk: bytes) -> None:
        if not self.markers:
            return
        data = self.tail + chunk
        last = data.rfind(b"\n")
        if last < 0:
            if len(data) > 1 << 20:  # a megabyte without a newline: keep the end only
                self.offset += len(data) - (1 << 20)
                data = data[-(1 << 20):]
            self.tail = data
            return
        self._scan(data[: last + 1])
        self.tail = data[last + 1 :]

    def result(self) -> tuple[int, int]:
        if self.tail:
            self._scan(self.tail)
            self.tail = b""
        return self.so_far()

    def so_far(self) -> tuple[int, int]:
        """Where the latest launch of the whole lines fed so far begins ((0, 1): none)."""
        return _latest(self.markers) or (0, 1)

    def _scan(self, data: bytes) -> None:
        # as the framer reads them: journald's entries as lines (line for line; before, a
        # `cmd:journalctl -u sglang -f -o json -n 1000` was read from its first entry, and a
        # crash of an earlier launch in it paged and counted at the attach)
        read = json_records_to_text(self.json.read(data, forms=self.records) or data,
                                    self.records)[0]
        block = Block(read, self.offset, self.line_number, 0.0)
        for m in self.markers:
            assert m.matcher is not None
            for hit in m.matcher.scan(block):
                line_start = _line_start(data, hit.line_number - self.line_number) \
                    if read is not data else data.rfind(b"\n", 0, hit.block_pos) + 1
                m.found(hit.rule, hit.text, self.offset + line_start, hit.line_number, hit.proc)
        self.line_number += block.newlines()
        self.offset += len(data)


def _line_start(data: bytes, index: int) -> int:
    """Where the `index`-th line (from 0) of `data` starts."""
    pos = 0
    for _ in range(index):
        pos = data.index(b"\n", pos) + 1
    return pos


def latest_startup(packs: Sequence[RulePack], chunks: Iterable[bytes]) -> tuple[int, int]:
    """(byte offset, line number) of the line the latest launch begins at (its first
    restart marker), or (0, 1)."""
    finder = StartupFinder(packs)
    for chunk in chunks:
        finder.feed(chunk)
    return finder.result()


def restart_marker(pack: RulePack, text: str) -> tuple[Rule, str] | None:
    """The first restart marker of this (raw, possibly \\r-joined) line: its rule and the
    part of the line it fired on; None when it carries none."""
    matcher = restart_matcher(pack)
    if matcher is None:
        return None
    if '"levelname":' in text:     # a logging record as JSON, as the framer reads it
        text = json_records_to_text(text.encode("utf-8", "surrogateescape"),
                                    record_forms(pack))[0].decode("utf-8", "replace")
    for seg in text.replace("\r", "\n").split("\n"):
        for part in split_glued(seg):
            found = matcher.match_line(part)
            if found is not None:
                return found[0], part
    return None


class StartupLocator:
    """The latest startup of a log by its packs' restart markers (a source's start locator;
    several packs under `--rules auto`)."""

    def __init__(self, packs: Sequence[RulePack]) -> None:
        self.packs = tuple(packs)
        rules = [r for p in self.packs for r in p.rules if r.restart]
        lits = sorted({s for r in rules for s in (r.literals.strings if r.literals else ())})
        # a remote `grep -F` narrows the search unless a marker needs case folding
        usable = bool(lits) and not any(r.literals and r.literals.ignore_case for r in rules)
        self.grep_literals: tuple[str, ...] = tuple(lits) if usable else ()

    def scanner(self) -> StartupFinder:
        return StartupFinder(self.packs)

    def latest_start(self, lines: Iterable[tuple[int, int, str]]) -> tuple[int, int] | None:
        """Of some lines of the log, in its order ((byte offset, line number, text): a remote
        grep's), where the latest launch begins, as the scanner finds it; None when none
        carries a restart marker."""
        markers = [_PackMarkers(p) for p in self.packs]
        for offset, line_number, text in lines:
            for m in markers:
                found = restart_marker(m.pack, text)
                if found is not None:
                    rule, part = found
                    inner, proc, _ = m.matcher.unwrap(part) if m.matcher is not None \
                        else (part, "", ())
                    m.found(rule, inner, offset, line_number, proc)
        return _latest(markers)

    def in_file(self, path: str) -> tuple[int, int]:
        with open(path, "rb") as f:
            return latest_startup(self.packs, iter(lambda: f.read(4 << 20), b""))


def startup_locator(packs: RulePack | Sequence[RulePack] | None) -> StartupLocator | None:
    """The start locator of a pack (or of the packs `--rules auto` may read a log with); None
    when none has restart markers (read from byte 0)."""
    if packs is None:
        return None
    packs = (packs,) if isinstance(packs, RulePack) else tuple(packs)
    if not any(r.restart for p in packs for r in p.rules):
        return None
    return StartupLocator(packs)


def detect_pack(head: bytes, packs: Iterable[RulePack],
                complete_lines: bool = False) -> RulePack | None:
    """The pack whose `detect` patterns best match the first lines (None if none does).

    `complete_lines`: ignore a last line that may still be incomplete (live input)."""
    packs = list(packs)
    best: tuple[float, int] | None = None
    chosen: RulePack | None = None
    for i, (pack, score) in enumerate(zip(packs, detect_scores(head, packs, complete_lines))):
        if score > 0 and (best is None or (score, -i) > best):
            best, chosen = (score, -i), pack
    return chosen


def detect_scores(head: bytes, packs: list[RulePack], complete_lines: bool = False) -> list[float]:
    """Per pack, the weights of its `detect` patterns found in a line of `head` (wrappers
    removed)."""
    if complete_lines:
        head = head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]
    forms = _forms(packs)
    if is_json_log_record(head, forms):   # Docker's / journald's / a wrapper's JSON records,
        head = records_to_cri(head, forms)    # as the framer reads them
    if CRI_RECORD.match(head):     # the lines as the framer gives them: records rejoined
        head = join_partial_records(head, True, DEFAULT_MAX_LINE_BYTES)[0]
    # logging records as JSON, as the framer reads them (every pack's forms: by logger name)
    head = json_records_to_text(head, forms)[0]
    lines = line_texts(head)
    raw = "\n".join(lines)
    present = _literals_in(raw, tuple(sorted(
        {s for p in packs for d in p.detect if d.literals is not None
         and not d.literals.ignore_case for s in d.literals.strings})))
    # the server's lines, wrappers removed: once per distinct `prefixes` (packs extending
    # the same base share them), each line when a pattern first needs it
    views: dict[object, _Unwrapped] = {}
    scores = []
    for pack in packs:
        rx = pack.prefixes
        key = None if rx is None else rx.pattern     # (every pack pattern has REGEX_FLAGS)
        if key not in views:
            views[key] = _Unwrapped(lines, raw, present, rx)
        view = views[key]
        scores.append(sum(d.weight for d in pack.detect if view.detected(d)))
    return scores


class _Unwrapped:
    """The lines of a head as a pack's `prefixes` leave them, each unwrapped on first use.

    `unwrap` keeps a suffix of a line, so a literal in an unwrapped line is in the raw line:
    a pattern with required literals looks only at the raw lines holding one of them."""

    def __init__(self, lines: list[str], raw: str, present: frozenset[str] | None = None,
                 prefixes: object = None) -> None:
        self.lines = lines
        self.raw = raw        # the lines joined (literals hold no newline)
        self.present = present  # the case-sensitive detect literals in raw (None: not known)
        self.inner: list[str | None] = [None] * len(lines)
        self.prefixes = prefixes   # the `prefixes` of the packs this view serves

    def text(self, i: int) -> str:
        t = self.inner[i]
        if t is None:
            t = self.lines[i]
            if self.prefixes is not None:
                t = strip_wrappers(self.prefixes, t)[0]
            self.inner[i] = t
        return t

    def detected(self, d: DetectPattern) -> bool:
        """Whether `d` (a detect pattern) is found in one of the unwrapped lines, in line
        order as `any(search(line) for line in lines)` would.  (The lines a literal picks
        are few: they are unwrapped without a matcher's prefilters, which would cost more to
        build, for every pack, than they save here.)"""
        rx, lits = d.regex, d.literals
        if lits is None or lits.ignore_case:
            return any(_found(rx, self.text(i)) for i in range(len(self.lines)))
        strings = tuple(lits.strings)
        if self.present is not None:
            if not any(s in self.present for s in strings):
                return False
        elif not any(s in self.raw for s in strings):
            return False
        for i, line in enumerate(self.lines):
            if any(s in line for s in strings):
                t = self.text(i)
                if any(s in t for s in strings) and _found(rx, t):
                    return True
        return False


def _literals_in(raw: str, literals: tuple[str, ...]) -> frozenset[str] | None:
    """Which of `literals` (case-sensitive) occur in `raw`: one Hyperscan pass for all of
    them, where a `in` test each read the whole head once per literal (a 1 MiB head and
    the four packs' ~50 literals: ~20 ms of every `--rules auto` start).  None where
    Hyperscan is not installed (then each literal is looked for on its own)."""
    finder = _detect_finder(literals)
    occurrences = getattr(finder, "occurrences", None)
    if occurrences is None:
        return None
    bits = finder.id_bits  # type: ignore[union-attr]
    mask = (1 << bits) - 1
    # a substring of a str is a substring of its UTF-8 and back (UTF-8 is self-synchronising)
    return frozenset(literals[o & mask]
                     for o in occurrences(raw.encode("utf-8", "surrogatepass")))


@functools.lru_cache(maxsize=8)
def _detect_finder(literals: tuple[str, ...]) -> object:
    if not literals:
        return None
    return literal_finder([(s, False) for s in literals], first_only=True,
                          cache_dir=cache_path().parent)


def _found(rx: object, text: str) -> bool:
    try:
        return bounded.search(rx, text, PATTERN_TIMEOUT) is not None
    except TimeoutError:      # a hostile line votes for no pack
        return False


def fallback_pack(packs: list[RulePack]) -> RulePack:
    """The pack `--rules auto` takes when no `detect` pattern matches: the first that says
    `fallback: true` (sglang.yaml ships it), else the first pack."""
    return next((p for p in packs if p.fallback), packs[0])


def choose_pack(spec: str, head: bytes) -> RulePack:
    """`--rules`: a pack name or path, or `auto` (detect; the fallback pack when nothing
    matches)."""
    if spec != "auto":
        return load_pack(spec)
    packs = load_all_shipped()
    found = detect_pack(head, packs)
    if found is not None:
        return found
    return fallback_pack(packs)
