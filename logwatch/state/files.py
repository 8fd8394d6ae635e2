"""Files in `state_dir`: atomic JSON writes and collision-free per-target file names."""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from .. import log

_KEEP = re.compile(r"[A-Za-z0-9_-]")
_LEGACY = re.compile(r"[^A-Za-z0-9._-]+")


def target_file_name(target: str) -> str:
    """A file name for a target that no other target name gives: letters, digits, `_` and
    `-` stay, every other character becomes `%XX` of its UTF-8 bytes (`node:1` ->
    `node%3A1`, `node_1` stays), so two names never share a checkpoint."""
    return "".join(c if _KEEP.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode())
                   for c in target)


def legacy_file_name(target: str) -> str:
    """The name used before version 2 (`node:1` and `node_1` both -> `node_1`): read once
    when upgrading in place, never written."""
    return _LEGACY.sub("_", target)


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                            "state")
    return Path(base) / "logwatch"


MAX_STATE_FILE = 64 << 20     # bytes: the largest state file read (the biggest written: ~2 MB)


def read_state_json(path: Path) -> Any:
    """A state file's JSON.  Damage of any shape is a ValueError the store reports (and
    goes on without the file): JSON nested past the parser's depth raised RecursionError,
    which no store caught (a damaged `history/NAME.json` stopped the target's start, and
    `watch` with a traceback); a file of gigabytes (a wrong bind mount) is not read whole.
    A missing file is FileNotFoundError, as before; one that is not a regular file (a
    FIFO named like a checkpoint) is not opened: it would block the reader."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError("not a regular file")
    with open(path, "rb") as f:
        data = f.read(MAX_STATE_FILE + 1)
    if len(data) > MAX_STATE_FILE:
        raise ValueError(f"larger than {MAX_STATE_FILE >> 20} MiB: not a state file")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


ASIDE_KEPT = 10      # damaged copies of one state file kept (NAME.corrupt, .corrupt.1, ...)


def _aside_names(path: Path) -> list[Path]:
    return [path.with_name(path.name + ".corrupt")] + \
        [path.with_name(f"{path.name}.corrupt.{n}") for n in range(1, ASIDE_KEPT)]


def aside_name(path: Path) -> Path:
    """Where a damaged `path` goes: `NAME.corrupt`, else the first free `NAME.corrupt.N`
    (the last one reused once ASIDE_KEPT are there).  Before, a file damaged again (at the
    next start: the same cause) was renamed over the first copy: the history of 20 startups
    set aside at one start was gone at the next."""
    names = _aside_names(path)
    return next((p for p in names if not os.path.lexists(p)), names[-1])


def set_aside(path: Path) -> Path:
    """Rename a damaged state file to `aside_name` (what it held kept for a look, the
    store starting without it); the path it now has (`path` if the rename failed)."""
    aside = aside_name(path)
    try:
        os.replace(path, aside)
    except OSError:
        return path
    return aside


def copy_aside(path: Path, data: bytes) -> Path:
    """Keep a copy of `data` (what `path` held) at `aside_name`, written then renamed: a copy
    that fails (a full disk) leaves no empty or cut `NAME.corrupt.N` behind.  Before, each
    start on a full disk left one more empty copy, taking a slot of ASIDE_KEPT (helper adv43).
    Raises OSError when the copy cannot be made."""
    for kept in _aside_names(path):              # kept at an earlier start: that one
        try:
            if kept.stat().st_size == len(data) and kept.read_bytes() == data:
                return kept
        except OSError:
            continue
    aside = aside_name(path)
    _write_then_rename(aside, data, durable=False)
    return aside


_TEMPS = itertools.count()


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new file beside `path` for a write-then-rename, named by this process and a count
    (`mkstemp` draws a random name in Python each time: a fifth of a checkpoint's cost at
    50 a second); `mkstemp` only when that name is taken (left by a dead process)."""
    tmp = f"{path.parent}/.{path.name}.{os.getpid()}.{next(_TEMPS)}.tmp"
    try:
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), tmp
    except FileExistsError:
        import tempfile   # (imported when first needed: ~2 ms of every CLI start)
        return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")


def remove_left_temps(path: Path) -> int:
    """Remove the temporary files of writes to `path` that a killed process left (a kill
    -9 in the middle of one; `_write_then_rename` removes its own otherwise), and return
    how many.  For a daemon holding state_dir (state/lock.py: their writer is gone).
    Before, each stayed for good: 1 kill -9 in 10 in a storm left a 3.7 MB alert state."""
    prefix, mine = f".{path.name}.", f".{path.name}.{os.getpid()}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return 0
    gone = 0
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp") and not name.startswith(mine):
            try:
                os.unlink(path.parent / name)
                gone += 1
            except OSError:
                pass
    return gone


def atomic_write_json(path: Path, doc: dict[str, Any], durable: bool = True) -> None:
    """Write-then-rename so a reader (or a crash) never sees half a file.  `durable` also
    fsyncs the file and its directory (survives power loss, not only a killed process)."""
    # encoded whole first (`json.dump` to a file runs the pure-Python encoder chunk by
    # chunk; a daemon of 500 targets checkpoints 100 times a second)
    atomic_write_bytes(path, json.dumps(doc, separators=(",", ":")).encode("utf-8"), durable)


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """`data` (a state file's encoded JSON) as `atomic_write_json` writes a document."""
    _write_then_rename(path, data, durable)
    if not durable:
        return
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _write_then_rename(path: Path, data: bytes, durable: bool) -> None:
    """`data` into a new file beside `path`, then renamed onto it (fsynced first where
    `durable`); the new file removed when that fails."""
    try:
        fd, tmp = _temp_beside(path)
    except FileNotFoundError:   # the directory is made on the first write (or again)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temp_beside(path)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise




class StateErrors:
    """Writes to state_dir that failed (a full or read-only disk), by kind of file.

    The daemon keeps working from memory: alerts keep flowing, checkpoints are tried again
    at the next interval.  One log line per kind says what and where, until a write of
    that kind succeeds again; `logwatch_state_errors_total{kind}` counts every failure."""

    KINDS = ("positions", "alerts", "history", "ledger")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {k: 0 for k in self.KINDS}
        self._reported: set[str] = set()

    @property
    def log(self) -> Any:   # on first use: one exists at import, before logging is set up
        return log.get("state")

    def failed(self, kind: str, path: Path, error: Exception) -> None:
        """Count and say (once per kind) a failed write: an OSError, or any other error of
        a store (sqlite3's have no `strerror`)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind not in self._reported:
            self._reported.add(kind)
            why = getattr(error, "strerror", None) or str(error) or type(error).__name__
            self.log.error(f"cannot save {kind} state in {path.parent}: {why}; going on "
                           "from memory", file=str(path))

    def succeeded(self, kind: str) -> None:
        if kind in self._reported:
            self._reported.discard(kind)
            self.log.info(f"saving {kind} state works again")


STATE_ERRORS = StateErrors()   # one per process: every target's files share the disk


def save_state(kind: str, path: Path, doc: dict[str, Any], durable: bool = True) -> bool:
    """`atomic_write_json`, with a failure counted and reported instead of raised."""
    try:
        atomic_write_json(path, doc, durable=durable)
    except OSError as e:
        STATE_ERRORS.failed(kind, path, e)
        return False
    STATE_ERRORS.succeeded(kind)
    return True
