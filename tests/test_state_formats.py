"""The format check a daemon makes of its state_dir before any store reads it
(state/formats.py): what it refuses, and what it must not choke on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from logwatch.state.formats import StateDirNewer, StoreFormat, check_formats

CHECKPOINTS = StoreFormat("checkpoint", "positions/*.json", 2)


def state_dir(tmp_path: Path) -> Path:
    (tmp_path / "positions").mkdir()
    (tmp_path / "positions" / "a.json").write_text(json.dumps({"version": 2}))
    return tmp_path


def test_a_newer_format_is_refused_also_written_as_a_float(tmp_path: Path) -> None:
    """`{"version": 3.0}` is format 3 (before: not refused, then dropped as corrupt)."""
    d = state_dir(tmp_path)
    (d / "positions" / "b.json").write_text('{"version": 3.0}')
    with pytest.raises(StateDirNewer, match=r"positions/b.json \(checkpoint format 3"):
        check_formats(d, [CHECKPOINTS])


def test_what_is_not_a_state_file_is_passed_over(tmp_path: Path) -> None:
    """A FIFO named like a checkpoint (the start hung on it, with no word), JSON nested too
    deep (RecursionError: the daemon died with a traceback), a directory: none is a newer
    format; damage is the store's to report."""
    d = state_dir(tmp_path)
    os.mkfifo(d / "positions" / "fifo.json")
    (d / "positions" / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "positions" / "dir.json").mkdir()
    check_formats(d, [CHECKPOINTS])      # returns: nothing newer
