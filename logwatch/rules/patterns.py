"""What loading a pack learns about each pattern, kept between runs.

Loading a pack compiles every pattern (to validate it and to read its named groups) and
works out the required literals of every rule (literals.py): for the shipped packs a tenth
of a second at every start, most of a short replay's fixed cost.  Both answers depend only
on the pattern, the `regex` module, the Python version (literals.py reads patterns with
`re`'s parser) and the analysis code, so they are kept in one file under the user's cache
directory ($XDG_CACHE_HOME/logwatch, else ~/.cache/logwatch), together with a key made of
all of these; a file with another key is ignored (and replaced at the next write).

The same file keeps each pack file's parsed document by the SHA-256 of its bytes (`doc`,
`put_doc`), when JSON gives it back equal: a start with unchanged packs neither parses YAML
nor imports PyYAML.

A pattern is recorded only once it has compiled, so a cached pattern is a valid one: a rule
whose pattern is found there compiles its regex when a line first needs it (`Rule.regex`),
and a bad pattern is never found there, so it is still compiled at load and reported as
before.  The file is written to a new file renamed over the old one; when the directory
cannot be written, or the file cannot be read or does not parse, everything is computed
as without it and nothing is said.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import regex

from ..state.files import atomic_write_json
from . import literals as _literals_module
from .literals import Literals, required_literals

FORMAT = 2           # 2: pack documents too
MAX_ENTRIES = 4096   # past this (many edited packs), a write keeps this run's patterns only
MAX_DOCS = 64        # pack documents kept (past this, a write keeps this run's only)
MISSING = object()   # `PatternCache.doc` of a file it does not hold
FILE_NAME = "patterns.json"


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "logwatch" / FILE_NAME


def cache_key(flags: int) -> str:
    """Everything an entry depends on besides its pattern."""
    try:
        with open(_literals_module.__file__, "rb") as f:
            analysis = hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        analysis = "?"
    return (f"{FORMAT}|regex {regex.__version__}|flags {int(flags)}|python "
            f"{'.'.join(map(str, sys.version_info[:3]))}|literals.py {analysis}")


class PatternCache:
    """Named groups and required literals per pattern (all patterns compiled with `flags`)."""

    def __init__(self, flags: int, path: Path | None = None) -> None:
        self.flags = flags
        self.path = path
        self.key = cache_key(flags)
        self.entries: dict[str, dict[str, Any]] = {}
        self.used: set[str] = set()
        self.docs: dict[str, Any] = {}          # pack documents by the SHA-256 of the file
        self.used_docs: set[str] = set()
        self.dirty = False
        self.loaded = False
        self.lock = threading.Lock()   # packs load in the daemon's reload thread too

    def _load(self) -> None:
        self.loaded = True
        path = self.path if self.path is not None else cache_path()
        self.path = path
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(doc, dict) and doc.get("key") == self.key and \
                isinstance(doc.get("patterns"), dict):
            self.entries = {p: e for p, e in doc["patterns"].items() if _valid(e)}
            if isinstance(doc.get("docs"), dict):
                self.docs = dict(doc["docs"])

    def _entry(self, pattern: str) -> dict[str, Any] | None:
        if not self.loaded:
            self._load()
        self.used.add(pattern)
        return self.entries.get(pattern)

    def groups(self, pattern: str, compile_: Any) -> tuple[str, ...]:
        """The named groups of `pattern`; on a miss `compile_(pattern)` (which raises
        `regex.error` for a bad one: nothing is recorded then)."""
        return self.compiled(pattern, compile_)[0]

    def compiled(self, pattern: str, compile_: Any) -> tuple[tuple[str, ...], int]:
        """The named groups of `pattern` and the flags it compiles with (the given ones and
        its own inline flags), as `groups` (so a pattern is known without compiling it)."""
        with self.lock:
            e = self._entry(pattern)
            if e is not None and "g" in e and "f" in e:
                return tuple(e["g"]), e["f"]
        rx = compile_(pattern)
        names, flags = tuple(rx.groupindex), int(rx.flags)
        with self.lock:
            entry = self.entries.setdefault(pattern, {})
            entry["g"], entry["f"] = list(names), flags
            self.dirty = True
        return names, flags

    def literals(self, pattern: str) -> Literals | None:
        """`required_literals(pattern)`, from the file when it has it."""
        with self.lock:
            e = self._entry(pattern)
            if e is not None and "l" in e:
                lit = e["l"]
                return None if lit is None else Literals(frozenset(lit[0]), lit[1])
        found = required_literals(pattern)
        with self.lock:
            self.entries.setdefault(pattern, {})["l"] = (
                None if found is None else [sorted(found.strings), found.ignore_case])
            self.dirty = True
        return found

    def doc(self, digest: str) -> Any:
        """The parsed document of a pack file whose bytes have this SHA-256 (MISSING if it
        was never kept).  A pack's validation reads it as it reads a parsed file."""
        with self.lock:
            if not self.loaded:
                self._load()
            self.used_docs.add(digest)
            return self.docs.get(digest, MISSING)

    def put_doc(self, digest: str, doc: Any) -> None:
        """Keep a parsed document, if JSON gives it back the same (YAML has dates, integer
        keys and NaN, which it would not)."""
        try:
            same = json.loads(json.dumps(doc, allow_nan=False)) == doc
        except (TypeError, ValueError):
            same = False
        if same:
            with self.lock:
                self.docs[digest] = doc
                self.dirty = True

    def save(self) -> None:
        """Write the file if this run learnt something (silently not, where it cannot)."""
        with self.lock:
            if not self.dirty or self.path is None:
                return
            self.dirty = False
            entries = self.entries
            if len(entries) > MAX_ENTRIES:
                entries = {p: e for p, e in entries.items() if p in self.used}
            entries = {p: dict(e) for p, e in entries.items()}
            docs = self.docs
            if len(docs) > MAX_DOCS:
                docs = {d: v for d, v in docs.items() if d in self.used_docs}
            docs = dict(docs)
        try:
            atomic_write_json(self.path, {"key": self.key, "patterns": entries, "docs": docs},
                              durable=False)
        except OSError:
            pass


def _valid(e: Any) -> bool:
    """An entry as `PatternCache` writes it (a damaged file must not reach the rules)."""
    if not isinstance(e, dict) or not set(e) <= {"g", "l", "f"}:
        return False
    if "f" in e and (not isinstance(e["f"], int) or isinstance(e["f"], bool)):
        return False
    g = e.get("g", [])
    if not isinstance(g, list) or not all(isinstance(x, str) for x in g):
        return False
    lit = e.get("l")
    return lit is None or (isinstance(lit, list) and len(lit) == 2 and isinstance(lit[1], bool)
                           and isinstance(lit[0], list) and bool(lit[0])
                           and all(isinstance(s, str) and s for s in lit[0]))
