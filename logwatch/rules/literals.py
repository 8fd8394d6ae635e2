"""Required literals of a regex: the prefilter that lets lines no rule can match cost nothing.

`required_literals(pattern)` returns a set of strings such that every match of `pattern`
contains at least one of them (or None when no useful set exists).  The block scanner looks
only for these literals (one linear pass of RE2 over a whole chunk) and runs the real `regex`
patterns on the few lines they occur in.  The analysis walks the parse tree of Python's own
regex parser: runs of literals are joined, small alternations and character classes
(`[.,]`, `(?:begin|end)`) are expanded, optional parts break a run, and a group that is
required contributes its own best set.
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass

try:  # Python 3.11+: the parser lives in re._parser
    from re import _parser as sre_parse  # type: ignore[attr-defined]
    from re import _constants as sre_c  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older layouts
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

# `regex`-module constructs `re` parses differently or not at all (POSIX classes, \p{..},
# branch reset, version flags, fuzzy matching, \m \M \G \X word/grapheme anchors).
_REGEX_ONLY = re.compile(r"\[\[:|\\[pPNXmMG]|\(\?\||\(\?[a-zA-Z]*V[01]|\{[eids]<")

MIN_LITERAL = 3      # shorter literals would occur on nearly every line
MAX_SET = 24         # cap on alternatives kept while expanding
MAX_CLASS = 6        # a character class up to this size is expanded

_LIT = sre_c.LITERAL
_IN = sre_c.IN
_BRANCH = sre_c.BRANCH
_SUB = sre_c.SUBPATTERN
_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None))
_AT = sre_c.AT
_ASSERT = sre_c.ASSERT
_ASSERT_NOT = sre_c.ASSERT_NOT
_ATOMIC = getattr(sre_c, "ATOMIC_GROUP", None)


@dataclass(frozen=True)
class Literals:
    """Any match contains one of `strings` (compared case-insensitively if `ignore_case`)."""

    strings: frozenset[str]
    ignore_case: bool = False

    @property
    def score(self) -> tuple[int, int]:
        return (min(len(s) for s in self.strings), -len(self.strings))


@functools.lru_cache(maxsize=1024)
def required_literals(pattern: str) -> Literals | None:
    """The best required-literal set of `pattern`, or None if it has none worth using."""
    tree = _parse(pattern)
    if tree is None:
        return None  # the rule runs everywhere
    ignore_case = bool(tree.state.flags & re.IGNORECASE) or _has_inline_ignorecase(tree)
    exact, best = _seq(list(tree))
    candidates = [c for c in (exact, best) if c]
    candidates = [c for c in candidates if min(len(s) for s in c) >= MIN_LITERAL]
    if not candidates:
        return None
    chosen = max(candidates, key=lambda c: (min(len(s) for s in c), -len(c)))
    strings = frozenset(s.lower() if ignore_case else s for s in chosen)
    if any("\n" in s or "\r" in s for s in strings):
        return None
    return Literals(strings, ignore_case)


_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P<\w+>")


def _parse(pattern: str) -> object | None:
    """Python's parse tree of `pattern`, or None for syntax the `regex` module reads
    differently from `re` or that `re` refuses (no guessing: no prefilter then)."""
    if _REGEX_ONLY.search(pattern):
        return None
    if "(?P=" not in pattern:   # a group's name never changes what it matches: the `regex`
        # module lets alternatives share one (`proc` in the wrappers of rules/base.yaml)
        pattern = _NAMED_GROUP.sub("(", pattern)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. "possible nested set" for [[:digit:]]
            return sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - `regex`-only syntax
        return None


def _has_inline_ignorecase(tree: object) -> bool:
    for op, av in _walk(tree):
        if op is _SUB and av[1] & re.IGNORECASE:
            return True
    return False


def _walk(items: object):  # type: ignore[no-untyped-def]
    for op, av in items:  # type: ignore[attr-defined]
        yield op, av
        if op is _SUB:
            yield from _walk(av[3])
        elif op is _BRANCH:
            for alt in av[1]:
                yield from _walk(alt)
        elif op in _REPEATS and op is not None:
            yield from _walk(av[2])
        elif op in (_ASSERT, _ASSERT_NOT):
            yield from _walk(av[1])
        elif _ATOMIC is not None and op is _ATOMIC:
            yield from _walk(av)


Set = frozenset[str]
EMPTY: Set = frozenset({""})


@dataclass(frozen=True)
class _Info:
    """What a node guarantees: `exact` (all it can match, if few), `best` (a required set
    inside it), `prefix` / `suffix` (exact sets every match starts / ends with)."""

    exact: Set | None
    best: Set | None
    prefix: Set
    suffix: Set


def _exact(e: Set) -> _Info:
    return _Info(e, None, e, e)


_OPAQUE = _Info(None, None, EMPTY, EMPTY)


def _better(a: Set | None, b: Set | None) -> Set | None:
    if not a:
        return b
    if not b:
        return a
    ka = (min(len(s) for s in a), -len(a))
    kb = (min(len(s) for s in b), -len(b))
    return a if ka >= kb else b


def _product(a: Set, b: Set) -> Set | None:
    if len(a) * len(b) > MAX_SET:
        return None
    return frozenset(x + y for x in a for y in b)


def _seq(items: list) -> tuple[Set | None, Set | None]:  # type: ignore[type-arg]
    info = _seq_info(items)
    return info.exact, _better(info.best, info.exact)


def _seq_info(items: list) -> _Info:  # type: ignore[type-arg]
    """Walk a sequence keeping the current run of exactly-known text.

    When joining would exceed MAX_SET alternatives the sequence stops being exactly known:
    what was accumulated so far is still a valid prefix (and a candidate), and a new run
    starts at the node that overflowed.
    """
    run: Set = EMPTY
    best: Set | None = None
    prefix: Set | None = None  # set once the sequence is no longer exactly known
    for op, av in items:
        node = _node(op, av)
        best = _better(best, node.best)
        if node.exact is not None:
            joined = _product(run, node.exact)
            if joined is not None:
                run = joined
                continue
            best = _better(best, run)
            if prefix is None:
                prefix = run
            run = node.exact
            continue
        head = _product(run, node.prefix)
        if head is None:
            best = _better(best, _better(run, node.prefix))
            if prefix is None:
                prefix = run
        else:
            best = _better(best, head)
            if prefix is None:
                prefix = head
        run = node.suffix
    best = _better(best, run)
    if prefix is None:  # every node was exact and the product stayed small
        return _Info(run, best, run, run)
    return _Info(None, best, prefix, run)


def _union(sets: list[Set]) -> Set | None:
    out: set[str] = set()
    for s in sets:
        out |= s
    return frozenset(out) if len(out) <= MAX_SET else None


def _node(op: object, av: object) -> _Info:
    if op is _LIT:
        return _exact(frozenset({chr(av)}))  # type: ignore[arg-type]
    if op is _IN:
        chars = []
        for iop, iav in av:  # type: ignore[attr-defined]
            if iop is not _LIT:
                return _OPAQUE
            chars.append(chr(iav))
        return _exact(frozenset(chars)) if len(chars) <= MAX_CLASS else _OPAQUE
    if op is _SUB:
        return _seq_info(list(av[3]))  # type: ignore[index]
    if _ATOMIC is not None and op is _ATOMIC:
        return _seq_info(list(av))  # type: ignore[arg-type]
    if op is _BRANCH:
        alts = [_seq_info(list(alt)) for alt in av[1]]  # type: ignore[index]
        exact = _union([a.exact for a in alts]) if all(a.exact is not None for a in alts) else None  # type: ignore[misc]
        choices = [_better(a.best, a.exact) for a in alts]
        best = None
        if all(c and min(len(s) for s in c) >= MIN_LITERAL for c in choices):
            best = _union(choices)  # type: ignore[arg-type]
        prefix = _union([a.prefix for a in alts]) or EMPTY
        suffix = _union([a.suffix for a in alts]) or EMPTY
        if exact is not None:
            return _Info(exact, best, exact, exact)
        return _Info(None, best, prefix, suffix)
    if op in _REPEATS and op is not None:
        lo, hi, sub = av  # type: ignore[misc]
        if lo == 0:
            return _OPAQUE
        info = _seq_info(list(sub))
        if info.exact is not None and lo <= 8:
            # `x{lo,hi}`: every match starts and ends with `lo` copies of what x matches
            # (all of it when lo == hi): `\] {3,}` requires `]   `
            acc: Set | None = EMPTY
            for _ in range(lo):
                acc = _product(acc, info.exact) if acc is not None else None
            if acc is not None:
                if lo == hi:
                    return _exact(acc)
                return _Info(None, _better(info.best, _better(acc, info.exact)), acc, acc)
        return _Info(None, _better(info.best, info.exact), info.prefix, info.suffix)
    if op is _AT:
        return _exact(EMPTY)
    if op is _ASSERT:
        info = _seq_info(list(av[1]))  # type: ignore[index]
        # a lookaround consumes nothing, but what it requires must be in the line
        return _Info(EMPTY, _better(info.best, info.exact), EMPTY, EMPTY)
    if op is _ASSERT_NOT:
        return _exact(EMPTY)
    return _OPAQUE


_CATEGORY_SOURCE = {
    sre_c.CATEGORY_SPACE: r"\s", sre_c.CATEGORY_NOT_SPACE: r"\S",
    sre_c.CATEGORY_DIGIT: r"\d", sre_c.CATEGORY_NOT_DIGIT: r"\D",
    sre_c.CATEGORY_WORD: r"\w", sre_c.CATEGORY_NOT_WORD: r"\W",
}


@functools.lru_cache(maxsize=256)
def anchored_head(pattern: str) -> str | None:
    """For a pattern anchored at the start of the text (`^...` or `\\A...`, no MULTILINE, no
    top-level alternation) whose first element consumes a character: that element as a
    one-character class, to be compiled with the same engine and flags (so `\\s` means what it
    means to the pattern).  A line whose first character it does not match cannot match the
    pattern: one cheap call instead of a bounded search (the `ignore: '^\\s{2,}\\S'` of the
    base pack is tried on every serving line).  None when no such head is known."""
    tree = _parse(pattern)
    if tree is None:
        return None
    if tree.state.flags & (re.MULTILINE | re.VERBOSE | re.IGNORECASE) or _has_inline_flags(tree):
        return None
    items = list(tree)
    if len(items) < 2 or items[0] != (_AT, sre_c.AT_BEGINNING) and \
            items[0] != (_AT, sre_c.AT_BEGINNING_STRING):
        return None
    return _head(items[1:])


def _has_inline_flags(tree: object) -> bool:
    for op, av in _walk(tree):
        if op is _SUB and (av[1] or av[2]):  # type: ignore[index]
            return True
    return False


def _one_char(op: object, av: object) -> str | None:
    """The regex source of a one-character node (a literal or a class), else None."""
    if op is _LIT:
        return re.escape(chr(av))  # type: ignore[arg-type]
    if op is not _IN:
        return None
    parts = []
    for iop, iav in av:  # type: ignore[attr-defined]
        if iop is _LIT:
            parts.append(re.escape(chr(iav)))
        elif iop is sre_c.RANGE:
            parts.append(f"{re.escape(chr(iav[0]))}-{re.escape(chr(iav[1]))}")
        elif iop is sre_c.CATEGORY and iav in _CATEGORY_SOURCE:
            parts.append(_CATEGORY_SOURCE[iav])
        elif iop is sre_c.NEGATE and not parts:
            parts.append("^")
        else:
            return None
    return "[" + "".join(parts) + "]" if parts and parts != ["^"] else None


@dataclass(frozen=True)
class StartFilter:
    """What one alternative of a pattern matched at the start of a text (`.match`) needs:
    its first character (`head`, a one-character class, None when unknown), every character
    in `chars`, and one of `literals` (empty: none known)."""

    head: str | None
    chars: frozenset[str]
    literals: frozenset[str]


@functools.lru_cache(maxsize=64)
def start_filters(pattern: str) -> tuple[StartFilter, ...] | None:
    """Per top-level alternative of `pattern` (used with `.match`: at the start of a text),
    what a text must hold for that alternative to match; a text no alternative's filter
    admits cannot match (the pack's wrapper `prefixes`, tried on every line, mostly fail).
    None when the pattern cannot be analysed (flags, `regex`-only syntax)."""
    tree = _parse(pattern)
    if tree is None:
        return None
    if tree.state.flags & (re.IGNORECASE | re.VERBOSE) or _has_inline_flags(tree):
        return None
    items = list(tree)
    alts = [list(a) for a in items[0][1][1]] if len(items) == 1 and items[0][0] is _BRANCH \
        else [items]
    out = []
    for alt in alts:
        exact, best = _seq(alt)
        lits = best or exact or frozenset()
        out.append(StartFilter(_head(alt), frozenset(_mandatory(alt)),
                               frozenset(s for s in lits if s)))
    return tuple(out)


def _head(items: list) -> str | None:  # type: ignore[type-arg]
    """The one-character class the first character of a match of `items` is in."""
    while items:
        op, av = items[0]
        if op is _AT or op is _ASSERT_NOT:
            return None          # an anchor or assertion first: not analysed
        if op is _SUB and not (av[1] or av[2]):  # type: ignore[index]
            items = list(av[3])  # type: ignore[index]
            continue
        if op in _REPEATS and op is not None:
            lo, _hi, sub = av  # type: ignore[misc]
            if lo < 1:
                return None
            items = list(sub)
            continue
        return _one_char(op, av)
    return None


def _mandatory(items: list) -> set[str]:  # type: ignore[type-arg]
    """Characters every match of the sequence `items` contains (lookarounds included:
    what they require is in the text too)."""
    out: set[str] = set()
    for op, av in items:
        if op is _LIT:
            out.add(chr(av))  # type: ignore[arg-type]
        elif op is _IN and len(av) == 1 and av[0][0] is _LIT:  # type: ignore[arg-type,index]
            out.add(chr(av[0][1]))  # type: ignore[index]
        elif op is _SUB:
            out |= _mandatory(list(av[3]))  # type: ignore[index]
        elif _ATOMIC is not None and op is _ATOMIC:
            out |= _mandatory(list(av))  # type: ignore[arg-type]
        elif op is _BRANCH:
            sets = [_mandatory(list(a)) for a in av[1]]  # type: ignore[index]
            out |= set.intersection(*sets) if sets else set()
        elif op in _REPEATS and op is not None and av[0] >= 1:  # type: ignore[index]
            out |= _mandatory(list(av[2]))  # type: ignore[index]
        elif op is _ASSERT:
            out |= _mandatory(list(av[1]))  # type: ignore[index]
    return out
