"""What `state_dir` keeps of targets that are no longer watched: for `state_retention`.

A target removed from the config (or renamed to a name of another source: state/renames.py
moves a plain rename's files to the new name) leaves its
checkpoint (`positions/NAME.json`), its startup history (`history/NAME.json`) and its
launch-ledger rows.  They are kept `state_retention` (default 30 days) after the name was
last watched, so a target put back resumes where it was and `history --target OLD-NAME`
still shows it; then they are removed.  Before, nothing was ever removed: a fleet whose
names churn (a name per job or per redeploy) grew its state_dir by ~20 KB a name plus its
ledger rows, for good, and each start read every stale checkpoint (20,000 names: 200 MB,
4.6 s before /healthz).

A name is last watched at the newest of its files' mtimes and its newest ledger record's
start; a name in the config is never pruned, whatever its age, and each pass sets its files'
mtimes to the pass's time (`mark_watched`): a checkpoint is written only when something was
read (and at a clean stop), so a quiet log's stayed as old as its last line, and a daemon
that died (kill -9, OOM, power) and came back without the name removed the state of a target
watched until minutes before (helper adv37).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable
from urllib.parse import unquote

from .files import legacy_file_name, target_file_name

DEFAULT = 30 * 86400.0      # seconds
EVERY = 6 * 3600.0          # how often the daemon prunes, besides at its start
FOLDERS = ("positions", "history")


def name_of(file: Path) -> str:
    """The target a `positions/` or `history/` file belongs to (`target_file_name` undone)."""
    return unquote(file.name[: -len(".json")], errors="surrogateescape")


def unwatched_files(state_dir: Path, watched: set[str]) -> dict[str, list[tuple[Path, float]]]:
    """Per target name not in `watched`: its files and their mtimes.  A file under a name
    `watched` may yet read (a checkpoint of before version 2, by its legacy name) is no
    other target's."""
    keep = {target_file_name(n) for n in watched} | {legacy_file_name(n) for n in watched}
    out: dict[str, list[tuple[Path, float]]] = {}
    for folder in FOLDERS:
        try:
            entries = list(os.scandir(state_dir / folder))
        except OSError:
            continue
        for e in entries:
            if not e.name.endswith(".json") or e.name.startswith(".") \
                    or e.name[: -len(".json")] in keep:
                continue
            try:
                if not e.is_file(follow_symlinks=False):
                    continue
                mtime = e.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            path = Path(e.path)
            out.setdefault(name_of(path), []).append((path, mtime))
    return out


def pass_every(keep: float) -> float:
    """Seconds between passes: EVERY, or a quarter of `keep` where that is shorter (at least
    a minute).  A pass marks the watched names' files, so a daemon killed just before its next
    pass left them as old as the gap: 6 h under `state_retention: 1h`, and its start without
    a name watched until the kill removed that name's state (helper adv40)."""
    return min(EVERY, max(MIN_EVERY, keep / 4)) if keep > 0 else EVERY


MIN_EVERY = 60.0


def mark_watched(state_dir: Path, watched: set[str], now: float) -> None:
    """The files of the names `watched` are as new as `now`: watched until this pass."""
    for folder in FOLDERS:
        for name in watched:
            for stem in {target_file_name(name), legacy_file_name(name)}:
                try:
                    os.utime(state_dir / folder / f"{stem}.json", (now, now),
                             follow_symlinks=False)
                except OSError:
                    pass       # none (not written yet), or a read-only state_dir


def prune(state_dir: Path, watched: set[str], keep: float, now: float,
          forget_ledger: Callable[[set[str], float, dict[str, float]], list[str]]) -> list[str]:
    """Remove the files and ledger rows of the names not in `watched` last watched more than
    `keep` seconds before `now`; the names pruned.  `forget_ledger(watched, before, seen)`:
    the ledger's part (its rows of the unwatched names whose newest start and `seen` time
    are both before `before`; the names it removed)."""
    if keep <= 0:
        return []
    before = now - keep
    mark_watched(state_dir, watched, now)
    files = unwatched_files(state_dir, watched)
    seen = {name: max(m for _, m in fs) for name, fs in files.items()}
    gone = set(forget_ledger(watched, before, seen))
    for name, fs in files.items():
        if seen[name] >= before:
            continue
        for path, _ in fs:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                break        # a read-only state_dir: tried again at the next pass
        else:
            gone.add(name)
    return sorted(gone)
