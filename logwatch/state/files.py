"""Files in `state_dir`: atomic JSON writes and collision-free per-target file names."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

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


def atomic_write_json(path: Path, doc: dict[str, Any], durable: bool = True) -> None:
    """Write-then-rename so a reader (or a crash) never sees half a file.  `durable` also
    fsyncs the file and its directory (survives power loss, not only a killed process)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
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


