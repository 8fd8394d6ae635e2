"""A state_dir the daemon cannot write (a full 64 KiB tmpfs, a read-only one): the daemon
keeps running, the crash alert is still sent, every refused write is counted in
`logwatch_state_errors_total{kind}`, and each kind of error is said once, with the place.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    append, daemons, free_port, hook, receivers, sim_texts, target, wait_for, write_config,
)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


def mounted_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of `size` at `mnt` (the tests run as root, in CI too)."""
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs."""
    yield from mounted_tmpfs(tmp_path / "tmpfs", "64k")


def fill(directory: Path) -> None:
    """Write a file in `directory` until ENOSPC: its filesystem is full."""
    import os
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass                                   # ENOSPC: full
    finally:
        os.close(fd)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_an_unwritable_state_dir_does_not_stop_the_daemon_or_its_alerts(
        tmp_path: Path, small_tmpfs: Path, receivers, daemons, fault: str) -> None:
    state = small_tmpfs / "state"
    for sub in ("positions", "alerts", "history"):
        (state / sub).mkdir(parents=True)
    if fault == "full":
        fill(small_tmpfs)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("t1", log, labels={"model": "Qwen3-235B"})],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}],
                       checkpoint={"interval": "0.2s"})
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead,
            what="the crash alert, with no state saved")
    wait_for(lambda: (d.metric("logwatch_state_errors_total", kind="positions") or 0) >= 2, 10,
             "refused checkpoints counted", alive=d.dead)
    assert (d.metric("logwatch_state_errors_total", kind="alerts") or 0) >= 1
    err = d.stderr()
    why = "No space left on device" if fault == "full" else "Read-only file system"
    for kind in ("positions", "alerts"):
        said = [ln for ln in err.splitlines() if f"cannot save {kind} state in" in ln]
        assert len(said) == 1, f"{kind}: said {len(said)} times\n{err[-3000:]}"
        assert why in said[0] and str(state) in said[0], said[0]
    assert d.get("/healthz")[0] == 200
    t = d.target("t1")
    assert t is not None and t["phase"] == "crashed"
    assert d.stop() == 0


@pytest.fixture
def tmpfs_2m(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: room for a ledger, filled by the test."""
    yield from mounted_tmpfs(tmp_path / "tmpfs2m", "2m")


@pytest.mark.integration
def test_state_dir_filling_up_while_running_keeps_the_target_and_its_crash_alert(
        tmp_path: Path, tmpfs_2m: Path, receivers, daemons) -> None:
    """Issue 30: the disk fills while the daemon runs (the ledger open, a startup ready).  The
    next startup crashes: every ledger write fails (SQLite's "database or disk is full", an
    error without `strerror`: before, an AttributeError in the target loop, which died 5
    times in 173 s, the crash alert never sent, /api/status "ready").  Now the crash alert is
    delivered, the target never fails, /api/status says crashed, and the ledger's failures
    are counted under kind="ledger" (a series there from the start) and said once."""
    state = tmpfs_2m / "state"
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target("t1", log)],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}],
                       checkpoint={"interval": "0.2s"})
    d = daemons(cfg, port).start()
    assert d.metric("logwatch_state_errors_total", kind="ledger") == 0.0
    append(log, "".join(sim_texts()))
    rx.wait(hook("ready", "firing"), status=200, timeout=20, alive=d.dead, what="ready")
    wait_for(lambda: (state / "ledger.sqlite3").exists(), 10, "the ledger", alive=d.dead)
    fill(tmpfs_2m)
    append(log, "".join(sim_texts(crash="oom", start=2e9)))
    rx.wait(hook("crashed", "firing"), status=200, timeout=30, alive=d.dead,
            what="the crash alert, on a full disk")
    wait_for(lambda: (d.metric("logwatch_state_errors_total", kind="ledger") or 0) >= 1, 15,
             "the ledger's failures counted", alive=d.dead)
    t = d.target("t1")
    assert t is not None and t["phase"] == "crashed" and t["status"] == "crashed", t
    err = d.stderr()
    assert "target failed" not in err and "AttributeError" not in err, err[-3000:]
    said = [ln for ln in err.splitlines() if "cannot save ledger state in" in ln]
    assert len(said) == 1 and "full" in said[0], err[-3000:]
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0


@pytest.mark.integration
# not serial: the daemon under test is idle but for the lock (one target, one startup), and
# /healthz under 1 s holds beside the parallel tier's load; its 30 s then overlap other tests
def test_a_ledger_locked_30s_by_another_process_does_not_freeze_the_daemon(
        tmp_path: Path, receivers, daemons) -> None:
    """Another process holds the ledger's write lock for 30 s (an `sqlite3` shell left in a
    transaction, a backup): /healthz answers within 1 s throughout, the ready alert of a
    startup meanwhile is delivered at once, and the record is written once the lock goes."""
    import sys
    import time
    state = tmp_path / "state"
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target("t1", log)],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}])
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead, what="crashed")
    db = state / "ledger.sqlite3"
    wait_for(lambda: db.exists(), 10, "the ledger", alive=d.dead)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"db = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(30)\n"
        "db.execute('COMMIT')\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()
        append(log, "".join(sim_texts(start=2e9)))
        worst = 0.0
        while time.monotonic() - locked_at < 28:
            t0 = time.monotonic()
            code, _ = d.get("/healthz")
            worst = max(worst, time.monotonic() - t0)
            assert code == 200
            time.sleep(0.2)        # the pace of the checks, not a synchronisation
        print(f"/healthz worst {worst * 1000:.0f} ms while the ledger was locked")
        assert worst < 1.0, f"/healthz took {worst:.2f}s while the ledger was locked"
        assert len(rx.requests(hook("ready", "firing"))) == 1, \
            "the ready alert waited for the ledger"
    finally:
        holder.wait(40)
    import json as _json

    def ready_recorded() -> bool:
        code, body = d.get("/api/history?target=t1")
        return code == 200 and any(r.get("outcome") == "ready"
                                   for r in _json.loads(body).get("startups", _json.loads(body))
                                   if isinstance(r, dict))
    wait_for(ready_recorded, 30, "the ready record, once the lock is gone", alive=d.dead)
    assert "target failed" not in d.stderr()
    assert d.stop() == 0


@pytest.mark.integration
def test_a_corrupt_ledger_is_set_aside_and_named_in_one_line(tmp_path: Path) -> None:
    import sys
    from conftest import ROOT
    state = tmp_path / "state"
    state.mkdir()
    (state / "ledger.sqlite3").write_bytes(b"this is not an SQLite database\n" * 100)
    cfg = write_config(tmp_path / "logwatch.yaml", free_port(), state,
                       [target("t1", tmp_path / "server.log")], [])
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                          "--target", "t1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert "Traceback" not in res.stderr, res.stderr
    said = [ln for ln in lines if "set aside as ledger.sqlite3.corrupt" in ln and "history" not in ln
            or "set aside as ledger.sqlite3.corrupt; no startup recorded for t1" in ln]
    assert said and str(state / "ledger.sqlite3") in said[-1], lines
    assert res.returncode == 1
    assert (state / "ledger.sqlite3.corrupt").read_bytes().startswith(b"this is not")
