"""Damaged state files: each store goes on without the file, says so, and a damaged
startup history is set aside, not overwritten.

Before: JSON nested past the parser's depth raised RecursionError in every store (none caught
it: a damaged `history/NAME.json` stopped the target's start and `watch` with a traceback);
a damaged history was read as empty and overwritten by the next startup's record (the 20 it
held gone without a word); `logwatch status` pointed at a port that answers something else
ended in a traceback.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
import structlog.testing

from logwatch.sinks.alerts.outbox import AlertStore
from logwatch.state import files
from logwatch.state.clockfile import CLOCK_FILE, adopt
from logwatch.state.files import target_file_name
from logwatch.state.history import StartupHistory
from logwatch.state.positions import PositionStore

ROOT = Path(__file__).resolve().parents[1]
DEEP = "[" * 200_000 + "]" * 200_000
GOOD = {"version": 1, "startups": [{"at": 1.0, "model": "m", "outcome": "ready",
                                    "phases": {"loading_shards": 30.0}, "total": 40.0}]}


def history_file(state: Path, name: str) -> Path:
    (state / "history").mkdir(parents=True, exist_ok=True)
    return state / "history" / (target_file_name(name) + ".json")


@pytest.mark.parametrize("damage", [DEEP, "{not json", '["a list"]',
                                    '{"version": 1, "startups": [{"at": "x"}]}',
                                    '{"version": 1, "startups": [{"at": 1, "outcome": "ready", '
                                    '"phases": {}, "total": "forty"}]}'])
def test_a_damaged_history_is_set_aside_and_the_next_record_does_not_lose_it(
        tmp_path: Path, damage: str) -> None:
    path = history_file(tmp_path, "gpu1")
    path.write_text(damage)
    history = StartupHistory(tmp_path, "gpu1")
    assert history.records == []
    aside = path.with_name(path.name + ".corrupt")
    assert aside.read_text() == damage and not path.exists()
    assert history.record_durations({"loading_shards": 12.0}, "ready", "s1", total=20.0)
    assert aside.read_text() == damage           # kept for a look, not overwritten
    assert [r.startup for r in StartupHistory(tmp_path, "gpu1").records] == ["s1"]


def test_a_history_damaged_again_keeps_the_first_copy_set_aside(tmp_path: Path) -> None:
    """Damaged at one start (20 startups set aside), damaged again at the next: both copies
    kept (at most files.ASIDE_KEPT).  Before, the second rename went over the first
    `.corrupt`: the 20 startups it held were gone (helper adv40, cases/h1)."""
    path = history_file(tmp_path, "gpu1")
    path.write_text(json.dumps(GOOD)[:-5])
    StartupHistory(tmp_path, "gpu1")
    path.write_text('{"version": 1, "startups": [')
    StartupHistory(tmp_path, "gpu1")
    first, second = path.with_name("gpu1.json.corrupt"), path.with_name("gpu1.json.corrupt.1")
    assert first.read_text() == json.dumps(GOOD)[:-5], first.read_text()
    assert second.read_text() == '{"version": 1, "startups": ['
    for n in range(2 * files.ASIDE_KEPT):
        path.write_text(f"damage {n}")
        StartupHistory(tmp_path, "gpu1")
    kept = sorted(p.name for p in path.parent.iterdir())
    assert len(kept) == files.ASIDE_KEPT and first.read_text() == json.dumps(GOOD)[:-5], kept


def test_alert_state_with_bad_entries_is_copied_aside_once_until_saved(tmp_path: Path) -> None:
    """Entries of the wrong shape: the file is copied aside as it was, once, however many
    starts read it before the next save; a copy of other bytes goes beside it."""
    (tmp_path / "alerts").mkdir()
    path = tmp_path / "alerts" / "state.json"
    path.write_text(json.dumps({"version": 1, "seen": {}, "open": {"bad": 5}, "outbox": []}))
    for _ in range(3):
        AlertStore(tmp_path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json", "state.json.corrupt"]
    path.write_text(json.dumps({"version": 1, "seen": {}, "open": {"bad": 6}, "outbox": []}))
    AlertStore(tmp_path)
    assert json.loads(path.with_name("state.json.corrupt").read_text())["open"] == {"bad": 5}
    assert json.loads(path.with_name("state.json.corrupt.1").read_text())["open"] == {"bad": 6}


def test_a_copy_aside_on_a_full_disk_leaves_no_empty_copy(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each start on a full disk wrote one more cut (empty) `state.json.corrupt.N`, taking a
    slot of the 10 kept: after 10 starts every later copy went over the tenth (helper adv43,
    cases/s1_full_disk_aside.py).  Now a copy that fails leaves nothing; the disk freed, one
    whole copy is made."""
    import errno
    (tmp_path / "alerts").mkdir()
    path = tmp_path / "alerts" / "state.json"
    doc = {"version": 1, "seen": {f"k{i}": 1.0 for i in range(500)}, "open": {"bad": 5},
           "outbox": []}
    path.write_text(json.dumps(doc))
    real_write, real_write_bytes = os.write, Path.write_bytes

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_bytes(self: Path, data: bytes) -> int:   # (the copy as written before)
        real_write_bytes(self, bytes(data)[:0])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files.os, "write", full)
    monkeypatch.setattr(Path, "write_bytes", full_bytes)
    for _ in range(3):
        AlertStore(tmp_path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]
    monkeypatch.setattr(files.os, "write", real_write)
    monkeypatch.setattr(Path, "write_bytes", real_write_bytes)
    AlertStore(tmp_path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json", "state.json.corrupt"]
    assert json.loads(path.with_name("state.json.corrupt").read_text()) == doc


def test_a_history_that_cannot_be_read_now_is_neither_set_aside_nor_written_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES (another user's 0600 file: root is not refused, so the read fails here by
    hand) is no damage: not set aside, said, and the next startup's record does not rename
    a one-startup file over it.  Before, it was read as empty without a word and replaced:
    its 20 startups gone (helper adv40, cases/h2)."""
    from logwatch.state import history as history_mod
    path = history_file(tmp_path, "gpu1")
    path.write_text(json.dumps(GOOD))

    def denied(p: Path) -> object:
        raise PermissionError(13, "Permission denied", str(p))
    monkeypatch.setattr(history_mod, "read_state_json", denied)
    with structlog.testing.capture_logs() as logs:
        history = StartupHistory(tmp_path, "gpu1")
    assert history.records == [] and history.unreadable == "Permission denied"
    assert history.record_durations({"loading_shards": 12.0}, "ready", "s1", total=20.0)
    assert json.loads(path.read_text()) == GOOD and not path.with_name("gpu1.json.corrupt").exists()
    assert [e["event"] for e in logs] == ["startup history unreadable: the ETA starts without "
                                          "it, and it is not written over"], logs


def test_a_good_history_is_read_and_a_newer_one_left_as_it_is(tmp_path: Path) -> None:
    path = history_file(tmp_path, "gpu1")
    path.write_text(json.dumps(GOOD))
    assert [r.total for r in StartupHistory(tmp_path, "gpu1").records] == [40.0]
    path.write_text(json.dumps({"version": 9, "startups": []}))
    assert StartupHistory(tmp_path, "gpu1").records == [] and path.exists()


@pytest.mark.parametrize("version", [2, 2.0])
def test_a_newer_logwatch_s_history_is_not_written_over(tmp_path: Path, version: float) -> None:
    """`watch` checks no formats (the daemon refuses a newer state_dir at start): an older
    install's watch beside a newer one read its history of 20 startups as empty, without a
    word, and its first ready replaced it with 1 (helper adv43, cases/s2_history_version.sh)."""
    path = history_file(tmp_path, "gpu1")
    newer = dict(GOOD, version=version, startups=GOOD["startups"] * 20)
    path.write_text(json.dumps(newer))
    with structlog.testing.capture_logs() as logs:
        history = StartupHistory(tmp_path, "gpu1")
    assert history.records == [] and history.unreadable
    assert history.record_durations({"loading_shards": 12.0}, "ready", "s1", total=20.0)
    assert json.loads(path.read_text()) == newer
    assert [e["event"] for e in logs] == ["startup history unreadable: the ETA starts without "
                                          "it, and it is not written over"], logs


@pytest.mark.parametrize("version", [None, "1", 0])
def test_a_history_without_its_version_is_damage_set_aside(tmp_path: Path,
                                                           version: object) -> None:
    """A history whose `version` is missing or not a format (a hand edit, a bit flip) was
    read as empty without a word and replaced by the next record (helper adv43): set aside."""
    path = history_file(tmp_path, "gpu1")
    doc = dict(GOOD, startups=GOOD["startups"] * 20)
    doc.pop("version") if version is None else doc.update(version=version)
    path.write_text(json.dumps(doc))
    history = StartupHistory(tmp_path, "gpu1")
    assert history.records == [] and not history.unreadable
    assert history.record_durations({"loading_shards": 12.0}, "ready", "s1", total=20.0)
    assert json.loads(path.with_name(path.name + ".corrupt").read_text()) == doc


def test_a_fifo_or_a_file_too_big_is_not_read(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO named like a history file would block the reader for ever; a file past the
    limit (a wrong bind mount) is not read whole."""
    fifo = history_file(tmp_path, "fifo")
    os.mkfifo(fifo)
    assert StartupHistory(tmp_path, "fifo").records == []
    monkeypatch.setattr(files, "MAX_STATE_FILE", 1000)
    big = history_file(tmp_path, "big")
    big.write_text(json.dumps({"version": 1, "startups": [GOOD["startups"][0]] * 100}))
    with pytest.raises(ValueError, match="larger than"):
        files.read_state_json(big)
    assert StartupHistory(tmp_path, "big").records == []


def test_every_store_goes_on_without_a_file_nested_too_deep(tmp_path: Path) -> None:
    """The checkpoint, the alert state and the saved clock: each read as absent (the alert
    state set aside, as for any other damage), none raises."""
    positions = PositionStore(tmp_path)
    positions.dir.mkdir(parents=True)
    positions.path("gpu1").write_text(DEEP)
    assert positions.load("gpu1") == (None, {})
    (tmp_path / "alerts").mkdir()
    (tmp_path / "alerts" / "state.json").write_text(DEEP)
    alerts = AlertStore(tmp_path)
    assert alerts.open == {} and (tmp_path / "alerts" / "state.json.corrupt").exists()
    (tmp_path / CLOCK_FILE).write_text(DEEP)
    adopt(tmp_path)


def test_watch_runs_beside_a_history_nested_too_deep(tmp_path: Path) -> None:
    """`logwatch watch` (its history keyed by the TARGET string) on a log that gets ready."""
    log = tmp_path / "server.log"
    log.write_text("[2026-12-04 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
                   "[2026-12-04 10:00:05] Load weight begin. avail mem=78.00 GB\n"
                   "[2026-12-04 10:01:00] The server is fired up and ready to roll!\n")
    state = tmp_path / "state"
    history_file(state, str(log)).write_text(DEEP)
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(log)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "LOGWATCH_STATE_DIR": str(state)})
    assert res.returncode == 0 and "Traceback" not in res.stderr, (res.stdout, res.stderr)
    assert "startup history damaged" in res.stderr, res.stderr


class _Answer(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_service() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.mark.parametrize("body", [DEEP, '{"targets": ["a", 1]}', '{"targets": 5}', "null"])
def test_status_at_a_port_answering_something_else_says_so(
        other_service: http.server.HTTPServer, body: str) -> None:
    _Answer.body = body.encode()
    url = f"http://127.0.0.1:{other_service.server_address[1]}"
    res = subprocess.run([sys.executable, "-m", "logwatch", "status", "--url", url],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr, (res.stdout, res.stderr)
    assert "not logwatch's /api/status" in res.stderr, res.stderr
