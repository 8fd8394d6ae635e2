"""`watch` of a log whose line is cut mid-write and finished after a quiet of more than
PARTIAL_LINE_QUIET, over a local file and over SSH (a real sshd on 127.0.0.1): the line is read
whole once its newline comes, as a user meets it (tests/test_open_line.py: the same in the
pipeline).  The quiet is the input here, not a synchronisation: the other waits poll a
condition with a deadline."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from logwatch.pipeline import PARTIAL_LINE_QUIET
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)
from test_open_line import AFTER, ARGS, LOAD, NCCL

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

READY = b"[2026-12-04 10:00:05 TP0] The server is fired up and ready to roll!\n"


def wait_for_text(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)


def watch_a_line_cut_for_a_while(log: Path, target: str, tmp_path: Path, *opts: str) -> dict:
    """`watch --json` while `Load weight be` waits PARTIAL_LINE_QUIET + 3 s for `gin. ...`."""
    log.write_bytes(ARGS)
    err = tmp_path / "watch.err"
    with open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", target, "--json",
                                 "--rules", "sglang", "--timeout", "60", "--probe", "off", *opts],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=e,
                                stdin=subprocess.DEVNULL)
    try:
        wait_for_text(err, "phase launching", 30)
        with open(log, "ab") as f:
            f.write(LOAD[:40])                   # `...TP0] Load weight be`
        time.sleep(PARTIAL_LINE_QUIET + 3)       # the writer blocked mid-line
        with open(log, "ab") as f:
            f.write(LOAD[40:] + READY)
        out, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err.read_text())
    return json.loads(out)


def expect_whole(got: dict) -> None:
    # before: ["launching", "ready"], `launching` 5.0 s, and no loading phase
    assert got["phases_seen"] == ["launching", "loading_shards", "ready"], got
    assert got["durations"] == {"launching": 1.0, "loading_shards": 4.0}, got
    assert got["lines"] == 3, got


def test_watch_reads_a_line_finished_after_a_quiet_whole(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    expect_whole(watch_a_line_cut_for_a_while(log, str(log), tmp_path))


def test_watch_over_ssh_reads_a_line_finished_after_a_quiet_whole(
        sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    log = tmp_path / "server.log"
    expect_whole(watch_a_line_cut_for_a_while(
        log, sshd_server.url(log), tmp_path, "--known-hosts", str(sshd_server.known_hosts),
        "-i", str(sshd_server.client_key)))


def test_watch_pages_a_crash_line_cut_for_a_while_whole(tmp_path: Path) -> None:
    """`watch` of an exception line that waits, cut, until it is read as it stands after
    PARTIAL_LINE_QUIET (a crash), then ends: the crash it reports quotes the whole line, and
    its excerpt the line after it.  Before, `root cause (line 3): RuntimeError: NCCL error:
    unh`, the excerpt ending there."""
    log, err = tmp_path / "server.log", tmp_path / "watch.err"
    log.write_bytes(ARGS)
    with open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", str(log), "--json",
                                 "--rules", "sglang", "--timeout", "60", "--probe", "off"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=e,
                                stdin=subprocess.DEVNULL)
    try:
        wait_for_text(err, "phase launching", 30)
        with open(log, "ab") as f:
            f.write(LOAD + NCCL[:29])                # `RuntimeError: NCCL error: unh`
        # read after PARTIAL_LINE_QUIET as it stands: the crash; its end comes before the
        # crash settles (crash_settle later)
        wait_for_text(err, "phase crashed", 30)
        with open(log, "ab") as f:
            f.write(NCCL[29:] + b"\n" + AFTER)
        out, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    crash = json.loads(out)["crash"]
    assert crash["line"] == NCCL.decode(), crash
    assert crash["excerpt"][-2:] == [NCCL.decode(), AFTER.decode().strip()], crash
