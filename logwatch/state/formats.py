"""A state_dir written by a newer logwatch is refused, not read as damaged.

After an upgrade and a rollback (or a state_dir copied from a host that runs a newer
version), each store found a format it did not know and took it for damage: every checkpoint
was dropped ("unknown version 3": each target started over at its latest startup, a crash
already paged paged again) and `alerts/state.json` was set aside as corrupt (the open alerts
never resolved, the queued pages lost).  Nothing of that is damaged: the version that wrote
it reads it.  So the daemon checks the formats before any store opens, and refuses to start
(exit 2) naming the state_dir, the files and the formats, having changed none of them.

A file that is missing or does not parse is not this check's business: its store says so and
goes on, as for any other damage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .files import read_state_json

SHOWN = 3     # files named in the message; the rest counted


class StateDirNewer(Exception):
    """The state_dir holds files of a newer format than this version reads."""


@dataclass(frozen=True)
class StoreFormat:
    """Where one store keeps its files in a state_dir, and the newest format it reads."""
    name: str          # as the message says it: "checkpoint", "alert state", ...
    pattern: str       # glob under the state_dir
    reads: int         # the newest version this logwatch reads


@dataclass(frozen=True)
class NewerFile:
    """A file whose `version` is past what its store reads."""
    path: Path
    store: StoreFormat
    version: int


def _version(path: Path) -> int | None:
    """The file's integer `version` (`3.0` is 3); None where it has none or cannot be read
    (damage is the store's to report; a FIFO or a file too big is not read, files.py)."""
    try:
        doc = read_state_json(path)
    except (OSError, ValueError):
        return None
    v = doc.get("version") if isinstance(doc, dict) else None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def newer_files(state_dir: Path, stores: list[StoreFormat]) -> list[NewerFile]:
    """Every file of `stores` under `state_dir` written in a newer format than it reads.
    All are read: a newer version that ran a short while rewrote only the checkpoints of
    the targets that moved."""
    found: list[NewerFile] = []
    for store in stores:
        for path in sorted(state_dir.glob(store.pattern)):
            v = _version(path)
            if v is not None and v > store.reads:
                found.append(NewerFile(path, store, v))
    return found


def refusal(state_dir: Path, newer: list[NewerFile]) -> str:
    """The one message: the state_dir, the files and their formats, what to do."""
    shown = [f"{f.path.relative_to(state_dir)} ({f.store.name} format {f.version}, this version "
             f"reads up to {f.store.reads})" for f in newer[:SHOWN]]
    more = f" and {len(newer) - SHOWN} more" if len(newer) > SHOWN else ""
    return (f"state_dir {state_dir} was written by a newer logwatch: {', '.join(shown)}{more}. "
            "Nothing was changed: run that version again, or move the state_dir aside to start "
            "afresh (its alert marks, open alerts and queued pages are then lost: recent "
            "crashes paged again)")


def check_formats(state_dir: Path, stores: list[StoreFormat]) -> None:
    """Raise StateDirNewer (its message: `refusal`) when a newer logwatch wrote the
    state_dir; read only, so a refused start leaves every file as it was."""
    newer = newer_files(state_dir, stores)
    if newer:
        raise StateDirNewer(refusal(state_dir, newer))
