"""A renamed target's checkpoint and history go with it (state/renames.py), and only where
the old name is certainly the same server's."""

from __future__ import annotations

import json
from pathlib import Path

from logwatch.sources.base import Position
from logwatch.state.history import StartupHistory
from logwatch.state.positions import PositionStore
from logwatch.state.renames import carry_renamed

SRC = "/srv/node1/server.log"


def checkpoint(state: Path, name: str, source: str, offset: int = 4096) -> None:
    PositionStore(state).save(name, Position(offset, 40, None, None, source),
                              {"format": 2, "source": source, "pack": "sglang"})


def history(state: Path, name: str) -> None:
    StartupHistory(state, name).record_durations({"loading_shards": 60.0}, "ready", "s1")


def test_a_renamed_target_takes_its_old_names_checkpoint_and_history(tmp_path: Path) -> None:
    checkpoint(tmp_path, "node1", SRC)
    history(tmp_path, "node1")
    moved = carry_renamed(tmp_path, {"node1-a100": SRC}, {"node1-a100"})
    assert moved == {"node1": "node1-a100"}
    pos, extra = PositionStore(tmp_path).load("node1-a100")
    assert pos is not None and pos.offset == 4096 and extra["source"] == SRC
    assert PositionStore(tmp_path).load("node1") == (None, {})
    doc = json.loads(PositionStore(tmp_path).path("node1-a100").read_text())
    assert doc["target"] == "node1-a100"
    assert [r.startup for r in StartupHistory(tmp_path, "node1-a100").records] == ["s1"]
    assert not (tmp_path / "history" / "node1.json").exists()


def test_nothing_moves_where_the_old_name_is_not_certainly_this_servers(tmp_path: Path) -> None:
    """Two old names of that source, two new targets of it, a target that has its own
    checkpoint, an old name still watched (a swap), another source, a damaged checkpoint:
    each left as it was (a first attach, as before)."""
    checkpoint(tmp_path, "a", SRC)
    checkpoint(tmp_path, "b", SRC)
    assert carry_renamed(tmp_path, {"c": SRC}, {"c"}) == {}
    PositionStore(tmp_path).forget("b")
    assert carry_renamed(tmp_path, {"c": SRC, "d": SRC}, {"c", "d"}) == {}
    assert carry_renamed(tmp_path, {"c": "/srv/other.log"}, {"c"}) == {}
    assert carry_renamed(tmp_path, {"c": SRC}, {"a", "c"}) == {}, "a is still watched"
    checkpoint(tmp_path, "c", "/srv/other.log", offset=7)
    assert carry_renamed(tmp_path, {"c": SRC}, {"c"}) == {}, "c has its own"
    assert PositionStore(tmp_path).load("c")[0].offset == 7
    PositionStore(tmp_path).path("a").write_text("{not json")
    assert carry_renamed(tmp_path, {"e": SRC}, {"e"}) == {}
    assert PositionStore(tmp_path).path("a").read_text() == "{not json"


def test_a_name_with_odd_characters_is_carried_under_its_own_file_name(tmp_path: Path) -> None:
    checkpoint(tmp_path, "node:1/a", SRC)
    assert carry_renamed(tmp_path, {"node 1": SRC}, {"node 1"}) == {"node:1/a": "node 1"}
    assert PositionStore(tmp_path).load("node 1")[0] is not None
