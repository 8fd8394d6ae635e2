"""Per-target checkpoints in `state_dir`: where reading stopped, in which file.

One small JSON file per target, written atomically (temp file, fsync, rename, fsync of the
directory) and versioned.  A missing file means "first attach"; a corrupt or unknown-version
file is reported once and treated the same way (the safe restart point: the start of the
latest startup in the log, never byte 0 of a log full of old crashes, never its end).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from . import log
from .sources.base import Position

VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


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


class PositionStore:
    """Checkpoints of many targets under `state_dir/positions/`."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir).expanduser() / "positions"
        self.log = log.get("positions")

    def path(self, target: str) -> Path:
        return self.dir / (_SAFE.sub("_", target) + ".json")

    def load(self, target: str) -> tuple[Position | None, dict[str, Any]]:
        """The saved position and any extra state saved with it (None, {} if none)."""
        p = self.path(target)
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None, {}
        except (OSError, ValueError) as e:
            self.log.warning("position file unreadable, starting at the latest startup",
                             target=target, file=str(p), error=str(e))
            return None, {}
        try:
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("version") != VERSION:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            return Position.from_json(doc["position"]), dict(doc.get("extra") or {})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self.log.warning("position file corrupt, starting at the latest startup",
                             target=target, file=str(p), error=str(e))
            return None, {}

    def save(self, target: str, position: Position, extra: dict[str, Any] | None = None,
             durable: bool = True) -> None:
        atomic_write_json(self.path(target), {"version": VERSION, "target": target,
                                              "position": position.to_json(),
                                              "extra": extra or {}}, durable=durable)

    def forget(self, target: str) -> None:
        try:
            self.path(target).unlink()
        except FileNotFoundError:
            pass
