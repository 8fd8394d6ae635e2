"""Server arguments as data: the flags a launch ran with, parsed from its log line.

The launch ledger compares one startup with the previous one ("flags changed:
max_running_requests 64 -> 2048"), so the arguments the engine prints at startup have to become
a plain dict.  Where the arguments start and in which form (a repr or a command's words, with
the engine's flag aliases) is pack data (a rule's `args:`, `ArgsSpec`); the forms the shipped
packs read (reference/markers.md; the line may carry any envelope before them):

* SGLang `server_args=ServerArgs(model_path='...', tp_size=8, ...)` (0.3.0-0.5.17, a dataclass
  repr) and `server_args={'model_path': '...', ...}` (0.5.19+, a dict).
* vLLM `non-default args: {'model': '...', 'tensor_parallel_size': 8}` (0.10+).
* older vLLM `args: Namespace(host=None, port=8000, ...)` (<= 0.8).
* the launch command itself when a wrapper echoes it (`+ python3 -m sglang.launch_server
  --model-path X --tp 8`, `vllm serve MODEL --max-model-len 32768`).

The text is untrusted (anyone who can write to the log writes it), so it is never given to
`eval` or `ast.literal_eval`: a small tokenizer and a recursive-descent parser read the subset
of Python repr syntax that these dumps use, and turn everything they do not understand into
its raw text instead of failing.  Work is bounded: at most `MAX_INPUT` characters are read and
containers nest at most `MAX_DEPTH` deep; past either bound parsing stops and the result is
marked partial, exactly as for a log line that was cut in the middle.

Values come out as JSON-friendly plain data (they are stored and shown by the ledger):

* str, int, float, bool, None as themselves; `b'..'` as str; `inf` / `nan` as floats;
* lists as lists, tuples as tuples, dicts as dicts (keys that are not str / int / float /
  bool / None become their raw text), sets as lists sorted by (type name, repr) so that two
  dumps of the same set compare equal whatever their iteration order;
* a constructor call with keyword arguments, `SpeculativeConfig(method='eagle', num_tokens=3)`,
  as `{"__type__": "SpeculativeConfig", "method": "eagle", "num_tokens": 3}` (positional
  arguments, when there are also keywords or several of them, under `"__args__"`);
* a call with exactly one positional argument and no keywords, `PosixPath('/x')`, as that
  argument (`'/x'`): such calls are value wrappers (paths, secrets, frozensets), and unwrapping
  them lets a dump compare equal with the command line that set the value;
* an enum repr `<LoadFormat.AUTO: 'auto'>` as its value (`'auto'`); any other `<...>` repr
  (`<function serve at 0x7f..>`) as its raw text;
* a bare dotted name (`torch.bfloat16`) as that name, a string;
* anything else as the raw text of that one value (never failing the whole line).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_INPUT = 64 * 1024   # characters of a line read at most: a real dump is 5-15 KiB
MAX_DEPTH = 32          # nesting of containers / calls / enum reprs; real dumps nest 3-4 deep

# Keys that differ between any two launches and say nothing about the configuration.
# SGLang draws `random_seed` at random in ServerArgs.__post_init__ when it is not given, so two
# identical launches print different seeds.  `port` is kept: it is chosen by whoever launches
# the server, and a move to another port is a change worth a line.
IGNORED_KEYS: frozenset[str] = frozenset({"random_seed"})


@dataclass
class ParsedArgs:
    """The arguments found in one log line.

    `values` maps each flag to its value (see the module docstring for the value shapes).
    `partial` is True when the line ended (or a bound was hit) before the dump closed: the
    keys present are exactly those whose value was complete, so a cut line still gives the
    ledger what it holds without inventing a truncated value (`port=400` of `port=40000`).
    `source` says which form the line had: the spec's `source` label (`sglang_server_args`,
    `vllm_non_default`, `command_line`, ...).
    """

    values: dict[str, Any]
    partial: bool
    source: str
    complete: bool = False   # the spec's `complete`: the dump names every field


@dataclass(frozen=True)
class ArgsSpec:
    """Where a line holds the server's arguments and in which form: a pack rule's `args:`
    (engine knowledge as data: rules/sglang.yaml, vllm.yaml and trtllm.yaml carry theirs).

    `start` (a compiled pattern): the arguments begin where its first match in the line ends.
    `form`: `repr` (a dict or `Name(k=v, ...)` repr follows) or `command` (shell words follow,
    `--flag value`; the command word itself is where `start` matched, for the quotes or
    brackets around it).  For `command`: `aliases` maps a command-line spelling (dashes as
    underscores) to the name the engine's own dump uses, `positional` names a first bare word
    (`vllm serve MODEL`: `model`), `negatable` reads `--no-X` as `X: False`.  `source` labels
    the result (`ParsedArgs.source`).
    """

    start: Any
    form: str = "repr"
    aliases: dict[str, str] = field(default_factory=dict)
    positional: str | None = None
    negatable: bool = False
    source: str = ""
    # the dump names every field the engine has, set or not (SGLang's `server_args=`, vLLM's
    # `Namespace(...)`), unlike vLLM's `non-default args`: a field only one launch's dump
    # names is one only its engine version has, not a flag the operator changed
    complete: bool = False


ARGS_FORMS = ("repr", "command")


# --------------------------------------------------------------------------- finding the args

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

def parse_args_line(text: str, specs: tuple[ArgsSpec, ...]) -> ParsedArgs | None:
    """The server arguments held by one log line, or None when it holds none.

    `specs`: the rule's `args:` forms (pack data: where the arguments start and their form),
    tried in order; the first whose `start` is found decides.
    Never raises on any input, and reads at most `MAX_INPUT` characters of it.
    """
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", "replace")
    over = len(text) > MAX_INPUT
    text = text[:MAX_INPUT]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = text.rstrip("\r\n")
    return _parse_specs(text, specs, over)


def _parse_specs(text: str, specs: tuple[ArgsSpec, ...], over: bool) -> ParsedArgs | None:
    """The first of a rule's `args:` forms whose start is in the line, read in its form."""
    for spec in specs:
        try:
            m = spec.start.search(text, timeout=ARGS_START_TIMEOUT)
        except TimeoutError:        # a hostile line: no arguments in it
            continue
        if m is None:
            continue
        if spec.form == "command":
            parsed = _parse_command(text, m.start(), m.end(), spec.aliases, spec.positional,
                                    spec.negatable, over)
        else:
            values, partial = _Parser(text, m.end()).top()
            parsed = ParsedArgs(values, partial, "")
        parsed.source = spec.source or ("command_line" if spec.form == "command" else "repr")
        parsed.complete = spec.complete
        return parsed
    return None


ARGS_START_TIMEOUT = 0.05   # seconds a pack's `start` pattern may take on one line


# --------------------------------------------------------------------------- tokenizer

class _Stop(Exception):
    """The text ended inside a value (a cut line) or a bound was reached: keep what was complete."""


class _TooDeep(_Stop):
    """Brackets nest past `MAX_DEPTH`: stop as for a cut line (never swallowed)."""


class _Bad(Exception):
    """This value is not a literal we read: the caller keeps its raw text instead."""


_WS = re.compile(r"\s*")
# quote bodies written as unrolled loops: linear, no backtracking blow-up on long or hostile text
_STR = re.compile(r"""([bBuUrR]{0,2})(?:'([^'\\\n]*(?:\\.[^'\\\n]*)*)'|"([^"\\\n]*(?:\\.[^"\\\n]*)*)")""")
_STR_START = re.compile(r"""[bBuUrR]{0,2}['"]""")
_NUM = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|(?i:inf(?:inity)?|nan))(?![\w.])")
_NAME = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*")
_ENUM = re.compile(r"<([^\W\d][\w.]*): (.*)>", re.S)
_RAW_RUN = re.compile(r"[^()\[\]{},'\"]+")
# `name=value,` where the value is a string without escapes, a number or a bare name: most of
# a ServerArgs dump, read in one call each (token by token the parser spends ~0.5 ms on a
# dump, and a restart loop prints one per startup); what `top` reads the same way slowly
_SIMPLE_KW = re.compile(r"\s*([^\W\d]\w*)\s*=(?!=)\s*(?:'([^'\\\n]*)'|\"([^\"\\\n]*)\"|("
                        + _NUM.pattern + ")|(" + _NAME.pattern + r"))(?:\s*(,)|(?=\s*\)))")
_PUNCT = frozenset("()[]{},:=")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
_CONSTANTS: dict[str, Any] = {"True": True, "False": False, "None": None,
                              "true": True, "false": False, "null": None}
_MAX_INT_DIGITS = 4000   # below Python's int <-> str conversion limit (4300)

_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "a": "\a",
            "b": "\b", "f": "\f", "v": "\v", "\n": ""}
_ESC = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.S)


def _unescape(body: str) -> str:
    """Python string escapes -> characters, by hand (no `eval`).

    Unknown escapes keep their backslash, as Python does; code points that are not valid
    characters (surrogates, > U+10FFFF) become U+FFFD so the value can always be stored as UTF-8.
    """
    if "\\" not in body:
        return body

    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e in _ESCAPES:
            return _ESCAPES[e]
        if e[0] in "xuU" and len(e) > 1:
            cp = int(e[1:], 16)
        elif e[0] in "01234567":
            cp = int(e, 8)
        else:
            return "\\" + e
        if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            return "\ufffd"
        return chr(cp)

    return _ESC.sub(one, body)


class _Parser:
    """Recursive descent over a Python-repr-like value, reading tokens lazily from `pos`.

    Tokens: strings, numbers, (dotted) names, the punctuation `()[]{},:=`, and whole `<...>`
    reprs (balanced).  Every element of a container is parsed with a fallback: if it is not a
    literal we know, or is not followed by `,` or the container's closer, its raw text up to
    the next `,` / closer at its own bracket depth is kept instead.  Running off the end of the
    text raises `_Stop`, which only the top level catches (the line was cut).

    Long because: a recursive-descent parser whose methods share one cursor and one
    token stream (reading lazily is what lets a cut line be parsed up to where it ends); its
    parts are small methods already.
    """

    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.n = len(text)
        self.pos = pos

    # -- tokens

    def _skip_ws(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        """The next punctuation character ('' at the end, 'x' for anything else)."""
        p = self._skip_ws(self.pos)
        if p >= self.n:
            return ""
        c = self.text[p]
        return c if c in _PUNCT else "x"

    def take(self, c: str) -> None:
        p = self._skip_ws(self.pos)
        assert self.text[p] == c
        self.pos = p + 1

    def _angle_end(self, p: int) -> int:
        """The end of the balanced `<...>` starting at p (strings inside are skipped)."""
        depth = 0
        text, n = self.text, self.n
        while p < n:
            c = text[p]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
                if depth == 0:
                    return p + 1
            elif c in "'\"":
                m = _STR.match(text, p)
                if m is not None:
                    p = m.end()
                    continue
            p += 1
        raise _Stop

    # -- values

    def value(self, depth: int) -> Any:
        """The value at the cursor; `depth` is the number of brackets open around it (the
        dump's own included), and opening one more past `MAX_DEPTH` stops the parse."""
        text = self.text
        p = self._skip_ws(self.pos)
        if p >= self.n:
            raise _Stop
        c = text[p]
        if c in "([{<" and depth >= MAX_DEPTH:
            raise _TooDeep
        if c in "'\"" or (c in "bBuUrR" and _STR_START.match(text, p)):
            m = _STR.match(text, p)
            if m is None:       # a quote that never closes: repr strings hold no raw newline,
                raise _Stop     # so the line was cut inside it
            self.pos = m.end()
            prefix, body = m.group(1), m.group(2) if m.group(2) is not None else m.group(3)
            return body if "r" in prefix.lower() else _unescape(body)
        m = _NUM.match(text, p)
        if m is not None:
            self.pos = m.end()
            return _number(m.group())
        m = _NAME.match(text, p)
        if m is not None:
            name = m.group()
            self.pos = m.end()
            if self.peek() == "(":
                if depth >= MAX_DEPTH:
                    raise _TooDeep
                self.take("(")
                return self._call(name, depth + 1)
            if name in _CONSTANTS:
                return _CONSTANTS[name]
            return name
        if c == "[":
            self.pos = p + 1
            return self._sequence("]", depth + 1)
        if c == "(":
            self.pos = p + 1
            items = self._sequence(")", depth + 1, tuple_=True)
            return items
        if c == "{":
            self.pos = p + 1
            return self._braces(depth + 1)
        if c == "<":
            end = self._angle_end(p)
            self.pos = end
            return self._angle(text[p:end], depth + 1)
        raise _Bad

    def _angle(self, raw: str, depth: int) -> Any:
        """`<Enum.MEMBER: value>` -> value; any other `<...>` repr -> its raw text."""
        m = _ENUM.fullmatch(raw)
        if m is None:
            return raw
        sub = _Parser(m.group(2), 0)
        try:
            v = sub.value(depth)
        except _TooDeep:
            raise
        except (_Bad, _Stop):   # the repr is complete (balanced); its inner text is just odd
            return raw
        if sub._skip_ws(sub.pos) != sub.n:
            return raw
        return v

    def raw(self) -> str:
        """Skip one unreadable value: its text up to the next `,` or unmatched closer."""
        text, n = self.text, self.n
        start = p = self.pos
        depth = 0
        while p < n:
            m = _RAW_RUN.match(text, p)
            if m is not None:
                p = m.end()
                continue
            c = text[p]
            if c in "'\"":
                ms = _STR.match(text, p)
                p = ms.end() if ms is not None else p + 1
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif c == "," and depth == 0:
                break
            p += 1
        else:
            raise _Stop
        self.pos = p
        return text[start:p].strip()

    def element(self, depth: int, closer: str) -> Any:
        """One container element, or its raw text when it is not a literal we read."""
        start = self.pos
        try:
            v = self.value(depth)
            if self.peek() in (",", closer):
                return v
        except _Bad:
            pass
        self.pos = start
        return self.raw()

    def _after_element(self, closer: str) -> bool:
        """Consume `,` (True: more may follow) or the closer (False); anything else is bad."""
        c = self.peek()
        if c == ",":
            self.take(",")
            return True
        if c == closer:
            self.take(closer)
            return False
        if c == "":
            raise _Stop
        raise _Bad

    def _sequence(self, closer: str, depth: int, tuple_: bool = False) -> Any:
        items: list[Any] = []
        comma = False
        while True:
            c = self.peek()
            if c == closer:
                self.take(closer)
                break
            if c == "":
                raise _Stop
            items.append(self.element(depth, closer))
            comma = self._after_element(closer)
            if not comma:
                break
        if not tuple_:
            return items
        if len(items) == 1 and not comma:
            return items[0]          # `(x)` is x; a 1-tuple prints as `(x,)`
        return tuple(items)

    def _key(self, depth: int) -> tuple[Any, bool]:
        """A dict key and whether it parsed; a key we cannot read becomes its raw text."""
        start = self.pos
        try:
            k = self.value(depth)
            if self.peek() == ":":
                return _plain_key(k, self.text[start:self.pos]), True
        except _Bad:
            pass
        self.pos = start
        return None, False

    def _raw_entry(self, out: dict[Any, Any]) -> None:
        """An unreadable `key: value` entry: split its raw text at the first colon."""
        text = self.raw()
        k, sep, v = text.partition(":")
        out[k.strip().strip("'\"")] = v.strip() if sep else None

    def _braces(self, depth: int) -> Any:
        """`{...}`: a dict (`{}` included) or a set, decided by what follows the first element.

        The first element is parsed once and reused: re-parsing it to try the other reading
        would double the work at every level of a hostile `{{{{...}}}}`.
        """
        if self.peek() == "}":
            self.take("}")
            return {}
        start = self.pos
        try:
            first = self.value(depth)
            after = self.peek()
        except _Bad:
            after = None
        out: dict[Any, Any] = {}
        if after == ":":
            self._dict_entries(out, depth, _plain_key(first, self.text[start:self.pos]), True)
        elif after in (",", "}"):
            return self._set_rest(first, depth)
        else:
            self.pos = start
            self._dict_entries(out, depth, None, False)
        return out

    def _set_rest(self, first: Any, depth: int) -> list[Any]:
        items = [first]
        while self._after_element("}"):
            if self.peek() == "}":
                self.take("}")
                break
            items.append(self.element(depth, "}"))
        return _set_list(items)

    def _dict_entries(self, out: dict[Any, Any], depth: int, key: Any = None,
                      have_key: bool | None = None) -> None:
        while True:
            if have_key is None:
                c = self.peek()
                if c == "}":
                    self.take("}")
                    return
                if c == "":
                    raise _Stop
                key, have_key = self._key(depth)
            if have_key:
                self.take(":")
                out[key] = self.element(depth, "}")
            else:
                self._raw_entry(out)
            have_key = None
            if not self._after_element("}"):
                return

    def _kw_name(self) -> str | None:
        """`name=` (not `==`) at the cursor: consume it and return the name."""
        p = self._skip_ws(self.pos)
        m = _NAME.match(self.text, p)
        if m is None or "." in m.group():
            return None
        q = self._skip_ws(m.end())
        if q < self.n and self.text[q] == "=" and self.text[q + 1:q + 2] != "=":
            self.pos = q + 1
            return m.group()
        return None

    def _call_items(self, depth: int, out: dict[str, Any], args: list[Any]) -> None:
        while True:
            c = self.peek()
            if c == ")":
                self.take(")")
                return
            if c == "":
                raise _Stop
            name = self._kw_name()
            if name is not None:
                out[name] = self.element(depth, ")")
            else:
                args.append(self.element(depth, ")"))
            if not self._after_element(")"):
                return

    def _call(self, name: str, depth: int) -> Any:
        kwargs: dict[str, Any] = {}
        args: list[Any] = []
        self._call_items(depth, kwargs, args)
        if name in ("set", "frozenset") and not kwargs and len(args) <= 1:
            return _set_list(args[0]) if args else []
        if not kwargs and len(args) == 1:
            return args[0]
        out: dict[str, Any] = {"__type__": name}
        if args:
            out["__args__"] = args
        out.update(kwargs)
        return out

    # -- the top level

    def _simple_items(self, out: dict[str, Any]) -> bool | None:
        """Read the `name=value` items `_SIMPLE_KW` reads from the cursor: None when it
        reads none (the parser reads the item), True when the cursor is then past a comma,
        False when the closer follows."""
        text = self.text
        m = _SIMPLE_KW.match(text, self.pos)
        if m is None:
            return None
        while m is not None:
            out[m.group(1)] = _simple_value(m)
            self.pos = m.end()
            if m.group(6) is None:
                return False
            m = _SIMPLE_KW.match(text, self.pos)
        return True

    def top(self) -> tuple[dict[str, Any], bool]:
        """The dump starting at `pos` (`Name(k=v, ...)` or `{k: v, ...}`) and whether it is partial.

        Entries are committed one at a time, so a cut (or a bound) loses only the entry it
        falls in.  A stray character where `,` or the closer should be is skipped, not fatal.
        """
        p = self._skip_ws(self.pos)
        is_dict = self.text.startswith("{", p)
        if is_dict:
            self.pos = p + 1
        else:
            m = _NAME.match(self.text, p)
            self.pos = m.end() + 1 if m else p  # past `ServerArgs(` / `Namespace(`
        closer = "}" if is_dict else ")"
        out: dict[str, Any] = {}
        args: list[Any] = []
        while True:
            try:
                c = self.peek()
                if c == closer:
                    return self._finish(out, args), False
                if c == "":
                    return self._finish(out, args), True
                if is_dict:
                    key, ok = self._key(1)
                    if ok:
                        self.take(":")
                        out[key] = self.element(1, closer)
                    else:
                        self._raw_entry(out)
                else:
                    read = self._simple_items(out)
                    if read is None:
                        name = self._kw_name()
                        if name is not None:
                            out[name] = self.element(1, closer)
                        else:
                            args.append(self.element(1, closer))
                    elif read:
                        continue     # past a comma
                if not self._after_element(closer):
                    return self._finish(out, args), False
            except _Stop:
                return self._finish(out, args), True
            except _Bad:
                self.pos = self._skip_ws(self.pos) + 1   # a stray closer: step over it

    @staticmethod
    def _finish(out: dict[Any, Any], args: list[Any]) -> dict[str, Any]:
        if args:
            out.setdefault("__args__", args)
        return out


def _simple_value(m: re.Match[str]) -> Any:
    """The value a `_SIMPLE_KW` match read, as `_Parser.value` reads it."""
    if m.group(2) is not None:
        return m.group(2)
    if m.group(3) is not None:
        return m.group(3)
    if m.group(4) is not None:
        return _number(m.group(4))
    name = m.group(5)
    return _CONSTANTS[name] if name in _CONSTANTS else name


def _number(s: str) -> Any:
    low = s.lower().lstrip("+-")
    if low in ("inf", "infinity", "nan"):
        return float(s)
    if "." in s or "e" in low:
        return float(s)
    if len(s) > _MAX_INT_DIGITS:
        return s
    return int(s)


def _plain_key(k: Any, raw: str) -> Any:
    """Dict keys stay as parsed when they are scalars; others become their raw text (JSON keys)."""
    if k is None or isinstance(k, (str, int, float, bool)):
        return k
    return raw.strip()


def _set_list(items: Any) -> list[Any]:
    items = list(items) if isinstance(items, (list, tuple)) else [items]
    return sorted(items, key=lambda v: (type(v).__name__, repr(v)))


# --------------------------------------------------------------------------- command lines

_OPENERS = {'"': '"', "'": "'", "[": "]", "(": ")", "{": "}", "`": "`"}
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")


def _opener_before(text: str, start: int, module: bool) -> str | None:
    """The closing character matching what opens the command word, if anything.

    A command echoed inside `[...]` (`arguments: [python -m sglang.launch_server ... --port
    40024], ports: ...`), quotes or a subshell ends at the matching closer, not at line end.
    The command word is the one holding `start` (`vllm serve`: `[/usr/bin/vllm`), or for
    `python -m X` (`start` at `-m`) the interpreter, found by stepping back over its own
    options (`python3 -u -m`).
    """
    j = start
    if not module:
        k = start
        while k > 0 and not text[k - 1].isspace() and start - k < 4096:
            k -= 1
        return _OPENERS.get(text[k]) if k < len(text) else None
    for _ in range(6):
        while j > 0 and text[j - 1].isspace():
            j -= 1
        k = j
        while k > 0 and not text[k - 1].isspace() and j - k < 4096:
            k -= 1
        word = text[k:j]
        if not word:
            return None
        if word.startswith("-"):
            j = k
            continue
        return _OPENERS.get(word[0])
    return None


def _shell_words(text: str, pos: int, end_char: str | None) -> tuple[list[str], bool]:
    """Shell-like words from `pos`: quotes and backslashes honoured, stopping at the end of
    the command (`;`, `|`, `&`, redirections, a backquote, a comment, an unmatched closer or
    `end_char`).  Returns the words and whether a quote was left open (the line was cut).

    Long because: one left-to-right scan of shell quoting (quotes, backslashes,
    nesting depth, the operators that end a command) whose state is the loop's locals; split
    in pieces it would pass that state around on every character.
    """
    words: list[str] = []
    cur: list[str] = []
    have = False
    depth = 0
    n = len(text)
    i = pos
    cut = False

    def flush() -> None:
        nonlocal cur, have
        if have:
            words.append("".join(cur))
        cur, have = [], False

    while i < n:
        c = text[i]
        if c.isspace():
            flush()
            i += 1
            continue
        if end_char is not None and c == end_char and depth == 0:
            break
        if c == "\\":
            if i + 1 < n:
                cur.append(text[i + 1])
                have = True
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                cur.append(text[i + 1:])
                have, cut = True, True
                i = n
                break
            cur.append(text[i + 1:j])
            have = True
            i = j + 1
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`':
                    cur.append(text[j + 1])
                    j += 2
                    continue
                cur.append(text[j])
                j += 1
            have = True
            if j >= n:
                cut = True
            i = j + 1
            continue
        if c in ";|&<>`":
            if c in "<>" and have and "".join(cur).isdigit():
                cur, have = [], False     # `2>&1`: the 2 is a file descriptor, not a value
            break
        if c == "#" and not have:
            break
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        cur.append(c)
        have = True
        i += 1
    flush()
    return words, cut


def _is_flag(word: str) -> bool:
    return len(word) > 1 and word[0] == "-" and not _FLOAT.fullmatch(word)


def _typed(word: str) -> Any:
    """A command-line value with its likely type: int, float, bool, JSON / repr literal, or str."""
    if _INT.fullmatch(word) and len(word) <= _MAX_INT_DIGITS:
        return int(word)
    if _FLOAT.fullmatch(word):
        return float(word)
    low = word.lower()
    if low in ("true", "false"):
        return low == "true"
    if word[:1] in "[{":      # `--speculative-config '{"method": "eagle"}'`, `--cuda-graph-bs [1,2]`
        p = _Parser(word, 0)
        try:
            v = p.value(1)
            if p._skip_ws(p.pos) == p.n:
                return v
        except (_Bad, _Stop):
            pass
    return word


def _parse_command(text: str, start: int, end: int, aliases: dict[str, str],
                   positional: str | None, negatable: bool, over: bool) -> ParsedArgs:
    """`--flag value` / `--flag=value` / bare `--flag` -> {flag_with_underscores: value}.

    A flag takes the words after it up to the next flag: none -> True, one -> that value,
    several -> a list (`--cuda-graph-bs 1 2 4`).  Without the engine's argparse schema a bare
    boolean flag followed by a stray positional would take it as its value; real launch lines
    put the model first (`vllm serve MODEL --flag ...`: `positional` names it), which is
    handled.  With `negatable`, `--no-X` (vLLM's BooleanOptionalAction) becomes `X: False`,
    as vLLM's `non-default args` prints it.  Repeated flags: the last wins.  A dotted flag
    (vLLM's `--compilation-config.mode 3`, `-cc.cudagraph_mode FULL`) sets that key of the
    config, as vLLM merges it (`_put`); only the name before the dot is an alias or has its
    dashes read as underscores.
    """
    end_char = _opener_before(text, start, module=text.startswith("-m", start))
    words, cut = _shell_words(text, end, end_char)
    values: dict[str, Any] = {}
    i = 0
    if positional and words and not _is_flag(words[0]):
        values[positional] = words[0]
        i = 1
    key: str | None = None
    pending: list[Any] = []

    def commit() -> None:
        if key is not None:
            _put(values, key, True if not pending else pending[0] if len(pending) == 1
                 else list(pending))

    while i < len(words):
        w = words[i]
        i += 1
        if w == "--":
            break
        if _is_flag(w):
            commit()
            name, eq, val = _attached(w, aliases).lstrip("-").partition("=")
            name, dot, sub = name.partition(".")
            name = name.replace("-", "_")
            pending = []
            if negatable and name.startswith("no_") and not eq and name[3:] and not dot:
                key = None
                values[aliases.get(name[3:], name[3:])] = False
                continue
            key = aliases.get(name, name) + dot + sub
            if eq:
                _put(values, key, _typed(val))
                key = None
            continue
        if key is not None:
            pending.append(_typed(w))
    commit()
    return ParsedArgs(values, cut or over, "command_line")


def _attached(word: str, aliases: dict[str, str]) -> str:
    """A one-letter option with its value written onto it as `-X=VALUE`: argparse reads
    `-O3` as `-O 3` (vLLM's `-O0`, `-O3`, the spelling its docs use: `optimization_level`),
    where `-O3` is no option of its own."""
    if word.startswith("--") or len(word) < 3 or word[2] in "=.":
        return word
    name = word[1:].partition("=")[0].partition(".")[0].replace("-", "_")
    if name in aliases or word[1] not in aliases:
        return word
    return f"-{word[1]}={word[2:]}"


def _put(values: dict[str, Any], key: str, value: Any) -> None:
    """`values[key] = value`; a dotted key `cfg.a.b` sets `values['cfg']['a']['b']`, as vLLM's
    FlexibleArgumentParser builds `--compilation-config '{"a": {"b": ...}}'` from it."""
    head, dot, rest = key.partition(".")
    if not dot or not head or not rest:
        values[key] = value
        return
    parts = rest.split(".")
    d = values
    for p in [head, *parts[:-1]]:
        nxt = d.get(p)
        if not isinstance(nxt, dict):
            nxt = d[p] = {}
        d = nxt
    d[parts[-1]] = value


# --------------------------------------------------------------------------- comparing launches

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _canon(v: Any) -> Any:
    """A comparable form: bools apart from ints (False is not 0 here), NaN equal to NaN,
    lists equal to tuples, and object addresses in raw reprs (`<function f at 0x7f..>`),
    which change on every launch, ignored."""
    if isinstance(v, bool):
        return ("__bool__", v)
    if isinstance(v, float) and math.isnan(v):
        return ("__nan__",)
    if isinstance(v, str):
        return _ADDRESS.sub(" at 0x?", v) if " at 0x" in v else v
    if isinstance(v, (list, tuple)):
        return ("__seq__", tuple(_canon(x) for x in v))
    if isinstance(v, dict):
        return ("__dict__", tuple(sorted(((repr(k), _canon(x)) for k, x in v.items()),
                                         key=lambda kv: kv[0])))
    return v


def flag_value_text(v: Any, width: int = 0) -> str:
    """A flag's value as the engine prints it in its arguments line (`None`, `True`, `64`,
    `[1, 2]`), a plain string bare unless that would hide what it is (empty, spaces, a comma,
    or the text of another literal: `''`, `'None'`); cut to `width` characters (0: whole)."""
    if isinstance(v, str):
        plain = v and not any(c.isspace() or c in ",'\"" for c in v) \
            and v not in _CONSTANTS and not _NUM.fullmatch(v)
        text = v if plain else repr(v)
    else:
        text = repr(v)
    return text if not width or len(text) <= width else text[: width - 1] + "…"


def changed_text(changed: dict[str, Any], limit: int = 4, width: int = 24) -> str:
    """"max_running_requests 64 -> 2048, disable_cuda_graph False -> True (+2 more)": the
    one rendering of `changed_args` (watch at ready, `history`, `compare`; the page's script
    mirrors it)."""
    if not changed:
        return ""
    parts = [f"{k} {flag_value_text(a, width)} -> {flag_value_text(b, width)}"
             for k, (a, b) in list(changed.items())[:limit]]
    more = f" (+{len(changed) - limit} more)" if len(changed) > limit else ""
    return ", ".join(parts) + more


def changed_args(old: dict[str, Any], new: dict[str, Any], *,
                 ignore: Iterable[str] = IGNORED_KEYS,
                 common_only: bool = False) -> dict[str, tuple[Any, Any]]:
    """The flags whose values differ between two launches: {flag: (old, new)}.

    A flag present on one side only counts, with None for the missing side (a flag added or
    dropped is a change), unless `common_only` (use it when one side is partial: a cut dump
    lacks keys that the launch did have).  Keys in `ignore` (by default `IGNORED_KEYS`, values
    that differ on every launch) never count.  Order: the new launch's keys first, then those
    only the old one had.

    A config given as a mapping on both sides (vLLM's `--compilation-config` /
    `--speculative-config`, SGLang's resolved `cuda_graph_config`) is compared key by key, the
    change named by its path: `speculative_config.num_speculative_tokens 3 -> 5`, not the two
    whole dicts (which a line cuts before the key that moved).
    """
    skip = frozenset(ignore)
    out: dict[str, tuple[Any, Any]] = {}
    keys = list(new) + [k for k in old if k not in new]
    for k in keys:
        if k in skip:
            continue
        in_old, in_new = k in old, k in new
        if common_only and not (in_old and in_new):
            continue
        a, b = old.get(k), new.get(k)
        if in_old and in_new and _canon(a) == _canon(b):
            continue
        _changes(str(k), a, b, out, 0)
    return out


def launch_digest(args: dict[str, Any]) -> str:
    """A short digest of a launch's flags, equal for two launches that `changed_args` finds
    no change between (`IGNORED_KEYS` aside, lists equal to tuples); "" for a launch whose
    flags were never printed.  A restart loop relaunches with the same flags; an operator
    who answers it with other flags (a lower `--mem-fraction-static` after an OOM) makes a
    new attempt, whose crash is news (sinks/alerts/loop.py)."""
    if not args:
        return ""
    kept = {k: v for k, v in args.items() if k not in IGNORED_KEYS}
    return hashlib.sha256(repr(_whole(_canon(kept))).encode()).hexdigest()[:16]


LAUNCH_STEP = 32        # flags a `launch_prefixes` digest covers more than the one before
MAX_PREFIXES = 32       # digests kept: a launch's first 1,024 flags


def launch_prefixes(args: dict[str, Any]) -> str:
    """Digests of a launch's first `LAUNCH_STEP`, 2 x `LAUNCH_STEP`, ... flags in the order
    printed (`IGNORED_KEYS` aside), comma-separated; "" for fewer.  Two dumps cut apart (a
    line cap, whose cut moves with `random_seed`'s digits) compare on the longest run of
    flags both have whole: a relaunch with another `--mem-fraction-static` (SGLang's 23rd
    flag) digests apart from the loop's though both dumps were cut at 8 KiB.  Before, a
    cut dump told no flags (`launch_digest` not taken): every relaunch of a loop logged
    through syslog was folded, whatever its flags."""
    h = hashlib.sha256()
    out: list[str] = []
    kept = [(k, v) for k, v in args.items() if k not in IGNORED_KEYS]
    for i, (k, v) in enumerate(kept[:LAUNCH_STEP * MAX_PREFIXES], 1):
        h.update(repr((k, _whole(_canon(v)))).encode())
        if i % LAUNCH_STEP == 0:
            out.append(h.copy().hexdigest()[:8])
    return ",".join(out)


def _whole(v: Any) -> Any:
    """`_canon`'s form with whole floats as ints: `8` and `8.0` compare equal, and must
    digest alike (bools are tagged apart by `_canon`)."""
    if isinstance(v, tuple):
        return tuple(_whole(x) for x in v)
    return int(v) if isinstance(v, float) and v.is_integer() else v


MAX_PATH_DEPTH = 8   # nested configs compared key by key this deep; below, as whole values


def _changes(path: str, a: Any, b: Any, out: dict[str, tuple[Any, Any]], depth: int) -> None:
    """`a` and `b` differ: record the change at `path`, or below it where both are mappings."""
    if not (isinstance(a, dict) and isinstance(b, dict)) or depth >= MAX_PATH_DEPTH:
        out[path] = (a, b)
        return
    for k in list(b) + [k for k in a if k not in b]:
        x, y = a.get(k), b.get(k)
        if k in a and k in b and _canon(x) == _canon(y):
            continue
        _changes(f"{path}.{k}", x, y, out, depth + 1)
