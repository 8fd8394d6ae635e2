"""Launch advice as data: a pack's `advice:` list, checked against one launch's flags.

The launch ledger adds a line of advice where flags interact in a way users trip on
("batches above 160 run without CUDA graphs ..."): engine knowledge, so each pack says it
for its own flags.  An entry is a few conditions, all of which must hold, and a sentence:

  - id: graphs_below_batch
    when: {lt: [cuda_graph_max_bs, max_running_requests]}
    say: 'batches above {cuda_graph_max_bs:g} run without CUDA graphs (...)'

Conditions (`when`):
  lt: [A, B]             flags A and B are both numbers and A < B
  any_true: [A, ...]     one of these flags is true; `{flag}` names the first that is
  any_false: [A, ...]    one of these flags is false (set, and off); `{flag}` as above
  not_true: [A, ...]     none of these flags is set to a true value
  ge: [[A, ...], X]      the first of these flags present is a number >= X; `{flag}`, `{value}`
  stat_ge: [S, X]        the serving statistic S (a fraction) is >= X
  crashed: REASON        the launch crashed with this reason

A flag is named as the engine's dump names it, or by a path into a config the dump prints as
a mapping (`cuda_graph_config.decode.max_bs`: SGLang 0.5.23 resolves its decode graphs' largest
batch there); in `any_true` / `any_false` / `not_true` / `ge`, `PATH=VALUE` is true where that
flag has that value (`cuda_graph_config.decode.backend=disabled`).  An engine that renamed a
flag is followed with `flags:`, a name's places in the order tried (the first that holds a
value, not None, is used):

  flags: {graph_max_bs: [cuda_graph_max_bs, cuda_graph_max_bs_decode,
                         cuda_graph_config.decode.max_bs]}

and the template has `{graph_max_bs}` (the value) and `{graph_max_bs_flag}` (where it was
found), so the advice names the flag of the engine version that launched.

`say` is a `str.format` template over the flags the conditions name, `{flag}` / `{value}` (the
flag an `any_true` or `ge` found) and the statistics `stat_ge` names.  Loading a pack checks
every template against its conditions, so a typo fails `rules check`, not a launch.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

CONDITIONS = ("lt", "any_true", "any_false", "not_true", "ge", "stat_ge", "crashed")


class AdviceError(ValueError):
    """A broken entry: the message names what is wrong; the key says where."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Advice:
    id: str
    say: str
    lt: tuple[str, str] | None = None
    any_true: tuple[str, ...] = ()
    any_false: tuple[str, ...] = ()
    not_true: tuple[str, ...] = ()
    ge: tuple[tuple[str, ...], float] | None = None
    stat_ge: tuple[str, float] | None = None
    crashed: str | None = None
    flags: tuple[tuple[str, tuple[str, ...]], ...] = ()   # `flags:` name -> places tried

    def find(self, args: dict[str, Any], name: str) -> tuple[str, Any]:
        """Where the flag `name` is in this launch's args and its value: the first of its
        `flags:` places holding one (None when none does)."""
        places = dict(self.flags).get(name, (name,))
        for place in places:
            value = flag_at(args, place)
            if value is not None:
                return place, value
        return places[-1], None

    def text(self, args: dict[str, Any], outcome: str, reason: str | None,
             serving: dict[str, Any]) -> str | None:
        """The sentence for this launch, or None when a condition does not hold."""
        fields: dict[str, Any] = {}
        if self.crashed is not None and (outcome != "crashed" or reason != self.crashed):
            return None
        if self.lt is not None:
            (fa, a), (fb, b) = (self.find(args, k) for k in self.lt)
            if not (_number(a) and _number(b) and a < b):
                return None
            fields.update({self.lt[0]: a, self.lt[1]: b,
                           f"{self.lt[0]}_flag": fa, f"{self.lt[1]}_flag": fb})
        for names, want in ((self.any_true, True), (self.any_false, False)):
            if names:
                found = next((f for f, v in (self.find(args, k) for k in names)
                              if v is want), None)
                if found is None:
                    return None
                fields["flag"] = found
        if any(self.find(args, k)[1] for k in self.not_true):
            return None
        if self.ge is not None:
            flags, least = self.ge
            key, value = next(((f, v) for f, v in (self.find(args, k) for k in flags)
                               if v is not None), (flags[-1], None))
            if not (_number(value) and value >= least):
                return None
            fields.update({"flag": key, "value": value})
        if self.stat_ge is not None:
            name, least = self.stat_ge
            share = serving.get(name)
            if not (isinstance(share, float) and share >= least):
                return None
            fields[name] = share
        return self.say.format(**fields)


def advice_lines(entries: tuple[Advice, ...], args: dict[str, Any], outcome: str,
                 reason: str | None, serving: dict[str, Any]) -> list[str]:
    """The advice of one launch, in the pack's order."""
    out = []
    for entry in entries:
        line = entry.text(args, outcome, reason, serving)
        if line is not None:
            out.append(line)
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float))


def flag_at(args: dict[str, Any], place: str) -> Any:
    """The value at `place` in a launch's args: a flag, a dotted path into the mappings the
    dump printed (`cuda_graph_config.decode.max_bs`), or `PATH=VALUE` (True where the value
    there prints as VALUE, else None).  None where there is nothing."""
    path, eq, want = place.partition("=")
    value: Any = args
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if eq:
        return True if value is not None and str(value) == want else None
    return value


def parse_advice(d: Any) -> Advice:
    """One `advice:` entry from the pack's YAML; `AdviceError` names the key at fault."""
    if not isinstance(d, dict) or set(d) - {"id", "when", "say", "description", "flags"}:
        raise AdviceError("", "an entry is {id: NAME, when: {CONDITION: ...}, say: TEMPLATE}")
    rid, when, say = d.get("id"), d.get("when"), d.get("say")
    if not isinstance(rid, str) or not rid:
        raise AdviceError("id", "missing or empty")
    if not isinstance(say, str) or not say:
        raise AdviceError("say", "missing or empty (the sentence, a str.format template)")
    if not isinstance(when, dict) or not when:
        raise AdviceError("when", f"a mapping of conditions ({', '.join(CONDITIONS)})")
    for k in when:
        if k not in CONDITIONS:
            raise AdviceError(f"when.{k}", f"unknown condition (known: {', '.join(CONDITIONS)})")
    flags = d.get("flags") or {}
    if not isinstance(flags, dict) or not all(
            _name(k) and isinstance(v, list) and v and all(_place(x) for x in v)
            for k, v in flags.items()):
        raise AdviceError("flags", "a mapping {name: [flag or path, ...]} (the places tried)")
    kw, names = _conditions(when)
    names |= {f"{k}_flag" for k in flags if kw.get("lt") and k in kw["lt"]}
    for _, field, _, _ in string.Formatter().parse(say):
        if field is not None and field.split(".")[0].split("[")[0] not in names:
            raise AdviceError("say", f"'{{{field}}}' is not a field of this entry's conditions "
                              f"(fields: {', '.join(sorted(names)) or 'none'})")
    return Advice(id=rid, say=say, flags=tuple((k, tuple(v)) for k, v in flags.items()), **kw)


def _conditions(when: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """An entry's `when:` read into Advice's fields, and the template fields they give."""
    kw: dict[str, Any] = {}
    names: set[str] = set()
    if "lt" in when:
        v = when["lt"]
        if not (isinstance(v, list) and len(v) == 2 and all(_name(x) for x in v)):
            raise AdviceError("when.lt", "two flag names: [A, B] (A < B)")
        kw["lt"] = (v[0], v[1])
        names |= set(v)
    if "any_true" in when and "any_false" in when:
        raise AdviceError("when", "any_true or any_false, not both (each names {flag})")
    for key in ("any_true", "any_false", "not_true"):
        if key in when:
            v = when[key]
            if not (isinstance(v, list) and v and all(_place(x) for x in v)):
                raise AdviceError(f"when.{key}", "a list of flag names")
            kw[key] = tuple(v)
    if "any_true" in when or "any_false" in when:
        names.add("flag")
    if "ge" in when:
        v = when["ge"]
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], list) and v[0]
                and all(_place(x) for x in v[0]) and _number(v[1]) and not isinstance(v[1], bool)):
            raise AdviceError("when.ge", "[[flag, ...], number]")
        kw["ge"] = (tuple(v[0]), float(v[1]))
        names |= {"flag", "value"}
    if "stat_ge" in when:
        v = when["stat_ge"]
        if not (isinstance(v, list) and len(v) == 2 and _name(v[0]) and _number(v[1])
                and not isinstance(v[1], bool)):
            raise AdviceError("when.stat_ge", "[statistic, number]")
        kw["stat_ge"] = (v[0], float(v[1]))
        names.add(v[0])
    if "crashed" in when:
        if not _name(when["crashed"]):
            raise AdviceError("when.crashed", "a crash reason")
        kw["crashed"] = when["crashed"]
    return kw, names


def _place(x: Any) -> bool:
    """A flag, a dotted path into the dump's mappings, either with `=VALUE`."""
    if not isinstance(x, str):
        return False
    path, eq, want = x.partition("=")
    return all(p.isidentifier() for p in path.split(".")) and (not eq or bool(want))


def _name(x: Any) -> bool:
    return isinstance(x, str) and x.isidentifier()
