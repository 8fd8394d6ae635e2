"""Per-target checkpoints in `state_dir`: where reading stopped, in which file.

One small JSON file per target, written atomically (temp file, fsync, rename, fsync of the
directory) and versioned.  A missing file means "first attach"; a corrupt or unknown-version
file is reported once and treated the same way (the safe restart point: the start of the
latest startup in the log, never byte 0 of a log full of old crashes, never its end).  A
newer version's checkpoints never get here: the daemon refuses that state_dir (formats.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import log
from ..sources.base import Position
from .files import legacy_file_name, read_state_json, save_state, target_file_name
from .formats import StoreFormat

VERSION = 2
READABLE = (1, 2)    # version 1: before StartupId (upgraded in place on load)
FORMAT = StoreFormat("checkpoint", "positions/*.json", VERSION)   # a newer one: formats.py


class PositionStore:
    """Checkpoints of many targets under `state_dir/positions/`."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir).expanduser() / "positions"
        self.log = log.get("positions")

    def path(self, target: str) -> Path:
        return self.dir / (target_file_name(target) + ".json")

    def _read(self, target: str) -> tuple[Path, Any]:
        """The checkpoint's path and JSON; a checkpoint written before version 2 (under the
        old, colliding file name) is read when it names this very target."""
        p = self.path(target)
        try:
            return p, read_state_json(p)
        except FileNotFoundError:
            old = self.dir / (legacy_file_name(target) + ".json")
            if old == p:
                raise
            doc = read_state_json(old)
            if not isinstance(doc, dict) or doc.get("target") != target:
                raise FileNotFoundError(str(p)) from None
            return old, doc

    def load(self, target: str) -> tuple[Position | None, dict[str, Any]]:
        """The saved position and any extra state saved with it (None, {} if none)."""
        p = self.path(target)
        try:
            p, doc = self._read(target)
        except FileNotFoundError:
            return None, {}
        except (OSError, ValueError) as e:
            self.log.warning("position file unreadable, starting at the latest startup",
                             target=target, file=str(p), error=str(e))
            return None, {}
        try:
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("version") not in READABLE:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            return Position.from_json(doc["position"]), dict(doc.get("extra") or {})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self.log.warning("position file corrupt, starting at the latest startup",
                             target=target, file=str(p), error=str(e))
            return None, {}

    def save(self, target: str, position: Position, extra: dict[str, Any] | None = None,
             durable: bool = True) -> bool:
        """False when the disk refused it (counted in STATE_ERRORS; tried again later)."""
        return save_state("positions", self.path(target),
                          {"version": VERSION, "target": target, "position": position.to_json(),
                           "extra": extra or {}}, durable=durable)

    def forget(self, target: str) -> None:
        try:
            self.path(target).unlink()
        except FileNotFoundError:
            pass
