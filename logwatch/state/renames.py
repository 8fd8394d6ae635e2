"""A target renamed keeps its state: its checkpoint and its startup history go with it.

A target whose name changed in the config (a typo fixed, a naming scheme) while its source
stayed is the same server.  Its open alerts follow it (sinks/alerts/router.py
`follow_renames`); its checkpoint (position, phase, counters) and its startup history (the
ETA's) follow it here, before it starts, at a reload or at a restart.  Before, the new name
was a first attach: the log was read again from its latest startup, as history or news by
when it was last written, and a crash written while that catch-up ran was skipped (a restart
loop renamed at a SIGHUP: the open alert counted 2 crashes of 3; CI, under load).

Only a match that cannot be another server's moves: the one name no longer watched whose
checkpoint has the very same source, taken by the one starting target of that source that
has no checkpoint of its own.  Anything else is left as it was (a first attach, as before).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from .files import read_state_json, save_state, target_file_name
from .positions import READABLE
from .retention import unwatched_files


def carry_renamed(state_dir: str | Path, starting: dict[str, str],
                  watched: set[str]) -> dict[str, str]:
    """Move to each target of `starting` (name -> source) that has no checkpoint the
    checkpoint and history of the one name not in `watched` whose checkpoint was of the same
    source; {old name: new name} of those moved.  Damaged or unreadable files are left alone
    (the stores say so when they read them)."""
    root = Path(state_dir).expanduser()
    wanted = {n: s for n, s in starting.items() if not _file(root, "positions", n).exists()}
    if not wanted:
        return {}
    found: dict[str, list[tuple[str, Path, dict[str, Any]]]] = {}
    for name, files in unwatched_files(root, watched).items():
        for path, _ in files:
            doc = _checkpoint(path) if path.parent.name == "positions" else None
            if doc is not None:
                found.setdefault(doc["extra"]["source"], []).append(
                    (str(doc.get("target") or name), path, doc))
    per_source = Counter(wanted.values())
    moved: dict[str, str] = {}
    for new, source in wanted.items():
        olds = found.get(source, [])
        if len(olds) != 1 or per_source[source] != 1:
            continue           # which one is this server's is not known
        old, path, doc = olds[0]
        if not save_state("positions", _file(root, "positions", new), {**doc, "target": new}):
            continue
        path.unlink(missing_ok=True)
        history, new_history = _file(root, "history", old), _file(root, "history", new)
        if history.exists() and not new_history.exists():
            try:
                os.replace(history, new_history)
            except OSError:
                pass           # the ETA starts without its history; the rest moved
        moved[old] = new
    return moved


def _file(root: Path, folder: str, target: str) -> Path:
    return root / folder / (target_file_name(target) + ".json")


def _checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at `path` when it is readable and says its source."""
    try:
        doc = read_state_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") not in READABLE:
        return None
    extra = doc.get("extra")
    if not isinstance(extra, dict) or not isinstance(extra.get("source"), str):
        return None
    return doc
