"""What state_dir keeps of targets no longer in the config (`state_retention`): a fleet whose
names churn (a name per job, per redeploy) must not grow its state_dir for good."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from logwatch.app.config import ConfigError, load_config
from support.daemon import (  # noqa: F401 (daemons: a fixture)
    daemons, free_port, sim_texts, target_cfg, wait_for, write_config,
)

DAY = 86400.0


def ledger_targets(state: Path) -> set[str]:
    db = sqlite3.connect(state / "ledger.sqlite3")
    try:
        return {t for (t,) in db.execute("SELECT DISTINCT target FROM startups")}
    finally:
        db.close()


def stale(state: Path, name: str, age_days: float, ledger: bool = True) -> None:
    """A checkpoint, a startup history and two ledger rows of `name`, last written
    `age_days` ago (as a target removed that long ago leaves them)."""
    at = time.time() - age_days * DAY
    for folder, doc in (("positions", {"version": 2, "target": name, "position": {"offset": 0},
                                       "extra": {}}),
                        ("history", {"version": 1, "startups": []})):
        p = state / folder / f"{name}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc), encoding="utf-8")
        os.utime(p, (at, at))
    if ledger:
        db = sqlite3.connect(state / "ledger.sqlite3")
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS startups (target TEXT NOT NULL, startup TEXT "
                       "NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL, "
                       "PRIMARY KEY (target, startup))")
            db.executemany("INSERT INTO startups VALUES (?, ?, ?, ?)",
                           [(name, f"s{i}", i, json.dumps({"startup": f"s{i}", "index": i,
                                                           "started_at": at - 3600 + i}))
                            for i in (1, 2)])
        db.close()


@pytest.mark.integration
def test_the_state_of_targets_removed_long_ago_is_removed_at_start(tmp_path: Path,
                                                                   daemons) -> None:
    """Names removed 40 days ago (one a `node:1`, stored as `node%3A1`) lose their checkpoint,
    startup history and ledger rows; a name removed 2 days ago keeps them (put back, it
    resumes; `history --target` shows it); a watched target keeps its files however old.
    Before, nothing was ever removed (`PositionStore.forget` had no caller)."""
    state = tmp_path / "state"
    for name in ("gone-1", "node:1"):
        stale(state, name.replace(":", "%3A"), 40)
    db = sqlite3.connect(state / "ledger.sqlite3")
    with db:
        db.execute("UPDATE startups SET target='node:1' WHERE target='node%3A1'")
    db.close()
    stale(state, "recent", 2)
    stale(state, "live", 40, ledger=False)        # watched: never pruned, however old
    marks = {f"{n}|s1|crashed|firing": time.time() - 40 * DAY for n in ("gone-1", "recent", "live")}
    (state / "alerts").mkdir()
    (state / "alerts" / "state.json").write_text(json.dumps(
        {"version": 2, "seen": marks, "open": {}, "outbox": []}), encoding="utf-8")
    log = tmp_path / "live.log"
    log.write_text("".join(sim_texts(seed=1)), encoding="utf-8")
    port = free_port()
    cfg = write_config(tmp_path / "c.yaml", port, state, [target_cfg("live", log)])
    d = daemons(cfg, port).start()
    wait_for(lambda: not (state / "positions" / "gone-1.json").exists(), 15,
             "the 40-day-old checkpoint removed", alive=d.dead)
    said = wait_for(lambda: [e for e in d.log_events() if "no longer watched" in
                             e.get("event", "")], 10, "the pass said", alive=d.dead)
    assert sorted(said[0]["names"]) == ["gone-1", "node:1"], said
    left = {p.relative_to(state).as_posix() for p in state.rglob("*.json")}
    assert left >= {"positions/recent.json", "history/recent.json", "history/live.json"}, left
    assert not {"history/gone-1.json", "positions/node%3A1.json", "history/node%3A1.json"} & left
    assert ledger_targets(state) >= {"recent"} and not {"gone-1", "node:1"} & ledger_targets(state)
    assert said[0]["alert_marks"] == 1, said     # gone-1's marks with its state (adv134)
    assert d.stop() == 0
    seen = json.loads((state / "alerts" / "state.json").read_text("utf-8"))["seen"]
    assert not [m for m in seen if m.startswith("gone-1|")], seen
    assert {"recent|s1|crashed|firing", "live|s1|crashed|firing"} <= set(seen), seen


def test_state_retention_is_a_duration_in_days_or_zero(tmp_path: Path) -> None:
    def load(value: object) -> float:
        p = tmp_path / "c.yaml"
        p.write_text(json.dumps({"targets": [], "state_retention": value}), encoding="utf-8")
        return load_config(str(p)).state_retention

    assert load("30d") == 30 * DAY and load("12h") == 12 * 3600 and load(0) == 0.0
    for bad in ("soon", "-3d"):
        with pytest.raises(ConfigError, match="state_retention: not a duration"):
            load(bad)
    # shorter than a few of the passes that mark watched names: refused (adv43: `1m` removed a
    # name watched 2 s before a restart)
    for short in ("1m", "30s", "0.001d"):
        with pytest.raises(ConfigError, match="state_retention: .* is shorter than 10m"):
            load(short)
    assert load("10m") == 600.0


def test_alert_marks_is_a_whole_number_of_at_least_16(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"

    def marks(value: object) -> int:
        p.write_text(json.dumps({"targets": [], "alert_marks": value}), encoding="utf-8")
        return load_config(str(p)).alert_marks
    assert marks(64) == 64 and marks(1000) == 1000
    p.write_text(json.dumps({"targets": []}), encoding="utf-8")
    assert load_config(str(p)).alert_marks == 64
    for bad in (8, "64", 64.5, True, None):
        with pytest.raises(ConfigError, match=r"alert_marks: a whole number of at least 16"):
            marks(bad)


def test_a_name_watched_until_a_crash_is_kept(tmp_path: Path) -> None:
    """A watched target's files are marked watched at each pass: a quiet log's checkpoint is
    not rewritten (only what was read is), so its files stayed as old as its last line, and
    a daemon that died (kill -9) and came back without the name removed the checkpoint,
    history and ledger rows of a target watched until minutes before (helper adv37)."""
    from logwatch.state import retention
    state = tmp_path / "state"
    stale(state, "quiet", 40, ledger=False)
    now = time.time()
    forgot: list[dict[str, float]] = []

    def ledger(watched: set[str], before: float, seen: dict[str, float]) -> list[str]:
        forgot.append(seen)
        return []

    assert retention.prune(state, {"quiet"}, 30 * DAY, now, ledger) == []   # watched
    # the daemon died 5 h later and came back without "quiet"
    assert retention.prune(state, set(), 30 * DAY, now + 5 * 3600, ledger) == []
    assert (state / "positions" / "quiet.json").exists()
    assert (state / "history" / "quiet.json").exists()
    assert forgot[-1]["quiet"] >= now - 1, forgot    # the ledger's rows kept as long


def test_a_retention_shorter_than_the_pass_interval_is_passed_often_enough(
        tmp_path: Path) -> None:
    """Passes (which mark the watched names' files) come at least 4 times per
    `state_retention`: with `state_retention: 1h` they came every 6 h, so a daemon killed
    2 h after its last pass and started without a quiet name watched until then removed its
    state (helper adv40, cases/r1_retention_shorter_than_pass.sh)."""
    from logwatch.state import retention
    state = tmp_path / "state"
    stale(state, "quiet", 40, ledger=False)
    keep, now = 3600.0, time.time()
    every = retention.pass_every(keep)
    assert retention.prune(state, {"quiet"}, keep, now, lambda *a: []) == []   # a pass
    # killed just before the next pass; back without "quiet"
    assert retention.prune(state, set(), keep, now + every - 1, lambda *a: []) == []
    assert (state / "positions" / "quiet.json").exists()
    assert retention.pass_every(30 * DAY) == retention.EVERY
    assert retention.pass_every(0) == retention.EVERY and retention.pass_every(1) == 60.0
