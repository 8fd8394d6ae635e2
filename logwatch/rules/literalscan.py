"""Where literals occur in a block of bytes: one pass for many literals at several GB/s.

Hyperscan where the `hyperscan` wheel is installed and can match a literal exactly as RE2
would; RE2 otherwise.  The rules' literal pass (matcher.py) finds every occurrence of the
non-stats rules' literals with it; framing (lines.py) asks whether a large block holds a
terminal fold's padding at all (`first_only`).  It imports nothing of logwatch, so both can
use it.

Compiling a Hyperscan database costs ~15 ms per pack (60 ms of a 0.6 s replay with four packs);
loading a serialised one costs microseconds.  So a database is kept in the cache directory the
caller names (`cache_dir`: the rules' pattern cache's), under a hash of everything it depends
on (Hyperscan's version, the machine, the expressions and flags).  A file that is missing,
unreadable or not a database of this Hyperscan is compiled again and rewritten: the cache can
only save time, never change a match.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Iterable

import re2

try:  # one pass for every rule literal at several GB/s; RE2 where the wheel does not install
    import hyperscan
except ImportError:  # pragma: no cover - exercised by forcing engine="re2" in the tests
    hyperscan = None


def _rx_literal(lit: str, ignore_case: bool) -> str:
    esc = re2.escape(lit) if hasattr(re2, "escape") else _escape(lit)
    return f"(?i:{esc})" if ignore_case else esc


def _escape(lit: str) -> str:
    return "".join("\\" + c if not (c.isalnum() or c == " " or ord(c) > 127) else c for c in lit)


# The ASCII letters RE2's case folding (UTF-8 mode) also matches outside ASCII: KELVIN SIGN
# and LATIN SMALL LETTER LONG S.  Hyperscan's HS_FLAG_CASELESS folds ASCII only, so these
# get their other form spelled out (every other ASCII character folds to ASCII only).
_UNICODE_FOLDS = {"k": "\u212a", "s": "\u017f"}
_HEX = tuple(f"\\x{b:02x}" for b in range(256))   # a byte as a Hyperscan escape


def _hs_literal(lit: str, ignore_case: bool) -> bytes | None:
    """`lit` as a Hyperscan expression matching what RE2 matches for `_rx_literal` (None
    when that cannot be promised: a case-insensitive literal with non-ASCII characters)."""
    if ignore_case and not lit.isascii():
        return None
    if not ignore_case or not any(c in _UNICODE_FOLDS for c in lit.lower()):
        return "".join(map(_HEX.__getitem__, lit.encode("utf-8"))).encode("ascii")
    out = []
    for ch in lit:
        fold = _UNICODE_FOLDS.get(ch.lower()) if ignore_case else None
        raw = "".join(f"\\x{b:02x}" for b in ch.encode("utf-8"))
        if fold is not None:
            other = "".join(f"\\x{b:02x}" for b in fold.encode("utf-8"))
            out.append(f"(?:{raw}|{other})")
        else:
            out.append(raw)
    return "".join(out).encode("ascii")


class Re2Literals:
    """Where the literals occur in a block: one RE2 alternation, leftmost matches."""

    engine = "re2"

    def __init__(self, parts: list[tuple[str, bool]]) -> None:
        opts = re2.Options()
        opts.max_mem = 64 << 20
        pattern = "|".join(sorted({_rx_literal(s, ci) for s, ci in parts}))
        self.rx = re2.compile(pattern.encode("utf-8"), opts)

    def positions(self, data: bytes) -> Iterable[int]:
        return (m.start() for m in self.rx.finditer(data))


class HyperscanLiterals:
    """Where the literals occur in a block: every occurrence, as the position of its last
    byte, in order (a literal holds no separator, so that byte is in its segment)."""

    engine = "hyperscan"

    def __init__(self, parts: list[tuple[str, bool]], first_only: bool = False,
                 cache_dir: Path | None = None) -> None:
        exprs, flags = [], []
        for s, ci in parts:
            expr = _hs_literal(s, ci)
            if expr is None:
                raise ValueError(f"no exact Hyperscan form for {s!r}")
            exprs.append(expr)
            flags.append((hyperscan.HS_FLAG_CASELESS if ci else 0) |
                         (hyperscan.HS_FLAG_SINGLEMATCH if first_only else 0))
        self.db = _cached_database(exprs, flags, cache_dir)
        self._local = threading.local()   # a scratch per thread (locate scans in a thread)
        self.id_bits = max(1, len(parts).bit_length())  # see `occurrences`

    def _scratch(self) -> "hyperscan.Scratch":
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self.db)
        return scratch

    def occurrences(self, data: bytes) -> list[int]:
        """Every occurrence as one int, `(position of its last byte) << id_bits | index of
        the literal in parts`, in order: which literals a segment holds, from the same pass
        (the matcher then tries only the rules they belong to)."""
        found: list[int] = []
        add = found.append
        bits = self.id_bits
        self.db.scan(data, match_event_handler=lambda i, _s, end, _f, _c:
                     add((end - 1) << bits | i), scratch=self._scratch())
        found.sort()   # by end already, ties in any order
        return found

    def positions(self, data: bytes) -> Iterable[int]:
        scratch = self._scratch()
        ends: list[int] = []
        add = ends.append
        self.db.scan(data, match_event_handler=lambda _id, _start, end, _f, _c: add(end - 1),
                     scratch=scratch)
        ends.sort()   # reported by end already; sorting a sorted list is one pass
        return ends


MAX_DATABASES = 32   # compiled databases kept in the cache directory


def _compile(exprs: list[bytes], flags: list[int]) -> "hyperscan.Database":
    db = hyperscan.Database()
    db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
    return db


def _cached_database(exprs: list[bytes], flags: list[int],
                     cache_dir: Path | None) -> "hyperscan.Database":
    """The compiled database of `exprs`, from `cache_dir` when it holds it (see the module's
    docstring), else compiled and saved there (atomically; a failed save is only a miss)."""
    if cache_dir is None:
        return _compile(exprs, flags)
    h = hashlib.sha256(f"{hyperscan.__version__}|{_machine()}|".encode())
    for e, f in zip(exprs, flags):
        h.update(e + b"\0" + str(f).encode() + b"\n")
    path = cache_dir / f"hyperscan-{h.hexdigest()[:32]}.db"
    try:
        return hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
    except (OSError, hyperscan.error, TypeError, ValueError):
        pass
    db = _compile(exprs, flags)
    tmp = None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        import tempfile    # (only when a database is written: not at every start)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".hyperscan-")
        with os.fdopen(fd, "wb") as f:
            f.write(hyperscan.dumpb(db))
        os.replace(tmp, path)
        tmp = None
        _prune(cache_dir)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return db


def _machine() -> str:
    """`platform.machine()` without importing `platform` (~2 ms of every start)."""
    try:
        return os.uname().machine
    except AttributeError:     # (no uname: Windows)
        import platform
        return platform.machine()


def _prune(cache_dir: Path) -> None:
    """Keep the newest MAX_DATABASES (edited packs leave old databases behind)."""
    dbs = sorted(cache_dir.glob("hyperscan-*.db"), key=lambda p: p.stat().st_mtime)
    for old in dbs[:-MAX_DATABASES]:
        old.unlink(missing_ok=True)


def literal_finder(parts: list[tuple[str, bool]], engine: str | None = None,
                   first_only: bool = False,
                   cache_dir: Path | None = None) -> Re2Literals | HyperscanLiterals | None:
    """A finder for (literal, ignore_case) `parts`: Hyperscan when it is installed and can
    match exactly what RE2 would, else RE2.  `engine` forces one ("re2" or "hyperscan").
    `first_only` (Hyperscan): each literal's first occurrence only (a presence test).
    `cache_dir`: where compiled Hyperscan databases are kept (None: compiled every time)."""
    if not parts:
        return None
    if engine != "re2" and hyperscan is not None:
        try:
            return HyperscanLiterals(parts, first_only, cache_dir)
        except (ValueError, hyperscan.error):
            if engine == "hyperscan":
                raise
    elif engine == "hyperscan":
        raise RuntimeError("the hyperscan module is not installed")
    return Re2Literals(parts)
