"""The operator's relaunch loop: a server crashes (or is killed), is relaunched at once into the
same log, and `logwatch watch server.log` is run right after, as a person or a script does.

An appending relaunch (`>> server.log`, `nohup`) prints nothing for the seconds its imports
take: at that moment the log's latest startup is the one that just ended, and only the
process holding the file open for writing, started after that verdict, says a relaunch is
under way (logwatch/sources/writers.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from logwatch.app.simulate import script
from logwatch.sources.writers import file_writers, relaunched_writer

pytestmark = pytest.mark.integration  # subprocesses: `make test` only

# the relaunched server: holds the log open from its start (the shell's `>>`), prints its
# startup only when told (its imports), as a real one prints nothing for seconds
RELAUNCH = ("import sys\n"
            "sys.stdin.readline()\n"
            "sys.stdout.write(sys.argv[1])\n"
            "sys.stdout.flush()\n"
            "sys.stdin.readline()\n")


def _launch_text(crash: str | None, start: float, tp: int) -> str:
    return "".join(s.text for s in script(crash=crash, start=start, tp=tp, serve_lines=3))


def _relaunch(log: Path, text: str) -> subprocess.Popen[str]:
    """`python -m ... >> server.log 2>&1 &`: the shell opens the log appending, then execs."""
    return subprocess.Popen(["sh", "-c", f'exec "$0" -c "$1" "$2" >> "$3" 2>&1',
                             sys.executable, RELAUNCH, text, str(log)],
                            stdin=subprocess.PIPE, text=True)


def _watch(log: Path, state: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LOGWATCH_STATE_DIR": str(state)}
    return subprocess.Popen([sys.executable, "-m", "logwatch", "watch", str(log), "--json",
                             "--probe", "off", "--gpu", "off", "--timeout", "60s", *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env)


@pytest.mark.parametrize("ended", ["crashed", "ready"])
def test_an_appending_relaunch_not_yet_printed_is_watched_not_the_launch_before(
        tmp_path: Path, ended: str) -> None:
    """The launch before crashed 3 s ago (or was ready and killed -9: no line says so), the
    relaunch appends to the same log and has printed nothing yet; watch is run at once.  It
    waits for the relaunch's startup and exits on that one's verdict.  Before, it exited 1
    at once on the crash before (0 on the ready before): the verdict of a launch the
    operator had already replaced, which a script reads as the new launch's."""
    log, state = tmp_path / "server.log", tmp_path / "state"
    now = time.time()
    before = _launch_text("oom" if ended == "crashed" else None, now - 40, tp=4)
    log.write_text(before, encoding="utf-8")
    os.utime(log, (now - 3, now - 3))
    new = _launch_text(None, now, tp=2)
    server = _relaunch(log, new)
    try:
        p = _watch(log, state, "--no-history")
        assert p.stderr is not None and server.stdin is not None
        said = ""
        while "waiting for a new startup" not in said:
            line = p.stderr.readline()
            assert line, (p.wait(), said, p.stdout.read() if p.stdout else "")
            said += line
        assert "a relaunch" in said, said
        server.stdin.write("go\n")          # its imports are done: it prints its startup
        server.stdin.flush()
        out, err = p.communicate(timeout=60)
    finally:
        for proc in (server,):
            proc.kill()
            proc.wait()
    doc = json.loads(out.strip().splitlines()[-1])
    assert p.returncode == 0 and doc["phase"] == "ready", (p.returncode, doc, err[-800:])
    assert doc["ready_line"] in new and doc["ready_line"] not in before, doc["ready_line"]


def test_without_a_relaunch_the_fresh_crash_is_the_verdict(tmp_path: Path) -> None:
    """The same fresh crash, nothing writing the log since: watch reports it (exit 1), as
    README promises for a verdict less than a minute old."""
    log, state = tmp_path / "server.log", tmp_path / "state"
    log.write_text(_launch_text("oom", time.time() - 40, tp=4), encoding="utf-8")
    p = _watch(log, state, "--no-history")
    out, err = p.communicate(timeout=60)
    doc = json.loads(out.strip().splitlines()[-1])
    assert p.returncode == 1 and doc["crash"]["reason"] == "cuda_oom", (out, err[-800:])


def test_the_writers_of_a_file_are_found_with_their_start(tmp_path: Path) -> None:
    """A process appending to the file is found, with a start time after the moment before
    it was started; a reader is not a writer; a verdict after its start finds no relaunch."""
    log = tmp_path / "server.log"
    log.write_text("x\n")
    st = log.stat()
    t0 = time.time() - 0.05          # /proc's start times are in clock ticks (10 ms)
    reader = subprocess.Popen(["sh", "-c", 'exec cat > /dev/null < "$0"', str(log)],
                              stdin=subprocess.DEVNULL)
    server = _relaunch(log, "")
    try:
        deadline = time.monotonic() + 10
        found: list[tuple[int, float]] = []
        while not found and time.monotonic() < deadline:
            found = file_writers(st.st_dev, st.st_ino)   # the shell's open, then its exec
        assert [pid for pid, _ in found] == [server.pid], found
        assert found[0][1] > t0 - 1.0
        assert relaunched_writer(st.st_dev, st.st_ino, t0 - 1.0, alive=False) == server.pid
        assert relaunched_writer(st.st_dev, st.st_ino, time.time() + 1.0, alive=False) is None
    finally:
        for proc in (server, reader):
            proc.kill()
            proc.wait()


def test_a_startup_watched_twice_keeps_its_changed_flags(tmp_path: Path) -> None:
    """`watch` run twice on a log whose latest startup just crashed (the second time at once
    after an appending relaunch, before it printed) reads that startup again.  Its ledger
    record keeps the flags it changed against the launch before.  Before, the second run
    compared it with itself and saved `changed` {}: `history --watched` showed no flag
    changed on any row of a `>>` loop."""
    log, state = tmp_path / "server.log", tmp_path / "state"
    now = time.time()
    log.write_text(_launch_text("oom", now - 90, tp=4), encoding="utf-8")
    env = {**os.environ, "LOGWATCH_STATE_DIR": str(state)}
    for k in range(3):
        if k == 1:                              # the relaunch with another TP size
            with open(log, "a", encoding="utf-8") as f:
                f.write(_launch_text("oom", now - 40, tp=2))
        p = _watch(log, state, *(["--last"] if k == 0 else []))
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1, (k, out, err[-800:])
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "--watched", str(log),
                          "--json"], cwd=ROOT, capture_output=True, text=True, env=env)
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["changed"] for r in rows] == [{}, {"tp_size": [4, 2]}], res.stdout


def test_a_truncating_loop_is_compared_from_what_watch_recorded(tmp_path: Path) -> None:
    """`> server.log` relaunches: the file holds the last launch only, so `compare FILE` has
    nothing to compare; it says how, and `compare --watched FILE` shows the changed flag.
    Before, there was no way but `history --watched` (no side by side)."""
    log, state = tmp_path / "server.log", tmp_path / "state"
    env = {**os.environ, "LOGWATCH_STATE_DIR": str(state)}
    now = time.time()
    for k, tp in enumerate((4, 2)):
        log.write_text(_launch_text("oom", now - 50 + 5 * k, tp=tp), encoding="utf-8")
        p = _watch(log, state)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1, (k, out, err[-800:])

    def compare(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "logwatch", "compare", *args], cwd=ROOT,
                              capture_output=True, text=True, env=env)
    res = compare(str(log))
    assert res.returncode == 1 and "1 startup(s): nothing to compare" in res.stdout, res
    assert f"logwatch compare --watched {log}" in res.stdout, res.stdout
    res = compare("--watched", str(log))
    assert res.returncode == 0 and "tp_size 4 -> 2" in res.stdout, (res.stdout, res.stderr)
