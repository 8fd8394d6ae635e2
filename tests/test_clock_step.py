"""Clocks as hosts have them: a wall clock set while logwatch runs, a node's clock behind.

The real fault, by libfaketime (installed by scripts/test-deps.sh): `watch` runs with its
wall clock set 10 minutes on (or back) while it follows a startup; its monotonic clock is the
real one (FAKETIME_DONT_FAKE_MONOTONIC), as a stepped host's is.  Before logwatch/clock.py,
a step on was a 10-minute silence (`stalled`, exit 3, for a server loading normally) and a
step back put every stall 10 minutes late.  And an SSH node whose clock is 6 minutes behind
(the streamed reader on the node runs under libfaketime): its log, written a second ago, was
'silent for 6 minutes: server probably dead' at attach, and stalled.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from support.daemon import (  # noqa: F401
    daemons, free_port, sim_texts, split_at, target_cfg, wait_for, write_config,
)
from support.sshd import SSHServer

pytestmark = pytest.mark.integration


def libfaketime() -> str:
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    assert found, "libfaketime is missing: scripts/test-deps.sh installs the faketime package"
    return found[0]


class SteppedWatch:
    """`logwatch watch LOG` whose wall clock the test sets (`step`)."""

    def __init__(self, tmp: Path, log: Path, *args: str) -> None:
        self.spec = tmp / "faketime.spec"
        self.spec.write_text("+0\n")
        self.err = tmp / "watch.out"    # the display (stdout) and stderr
        env = {**os.environ, "LD_PRELOAD": libfaketime(), "FAKETIME_NO_CACHE": "1",
               "FAKETIME_TIMESTAMP_FILE": str(self.spec), "FAKETIME_DONT_FAKE_MONOTONIC": "1",
               "LOGWATCH_STATE_DIR": str(tmp / "state")}
        with open(self.err, "w") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "logwatch", "watch", str(log), "--probe", "off",
                 "--gpu", "off", "--no-history", *args],
                cwd=ROOT, env=env, stdout=e, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def text(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def wait_text(self, what: str) -> None:
        wait_for(lambda: what in self.text(), 30, what, interval=0.05,
                 alive=lambda: None if self.proc.poll() is None else self.text()[-800:])

    def step(self, seconds: int) -> None:
        self.spec.write_text(f"{seconds:+d}\n")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _startup(tmp_path: Path) -> tuple[Path, list[str], int]:
    log = tmp_path / "server.log"
    log.write_text("")
    texts = sim_texts()
    return log, texts, split_at(texts, "Loading safetensors checkpoint shards")


def _append(log: Path, text: str) -> None:
    with open(log, "a", encoding="utf-8") as f:
        f.write(text)


def test_the_wall_clock_set_10_minutes_on_is_no_silence(tmp_path: Path) -> None:
    log, texts, shards = _startup(tmp_path)
    w = SteppedWatch(tmp_path, log, "--stall-after", "20s", "--timeout", "60s")
    try:
        w.wait_text("source up")
        _append(log, "".join(texts[:shards]))
        w.wait_text("phase ")
        w.step(+600)
        for t in texts[shards:shards + 6]:     # the server goes on at its pace
            _append(log, t)
            time.sleep(0.5)                    # the writer's pace, not a sync
        _append(log, "".join(texts[shards + 6:]))
        code = w.proc.wait(timeout=60)
    finally:
        w.stop()
    out = w.text()
    assert "stalled" not in out, out[-1500:]
    assert code == 0 and "READY" in out, (code, out[-1500:])


def test_the_wall_clock_set_10_minutes_back_still_stalls_on_time(tmp_path: Path) -> None:
    log, texts, shards = _startup(tmp_path)
    w = SteppedWatch(tmp_path, log, "--stall-after", "4s", "--timeout", "60s")
    try:
        w.wait_text("source up")
        _append(log, "".join(texts[:shards + 2]))
        w.wait_text("phase ")
        w.step(-600)
        stepped = time.monotonic()
        code = w.proc.wait(timeout=60)         # the server says nothing more
        took = time.monotonic() - stepped
    finally:
        w.stop()
    out = w.text()
    silent = re.search(r"stalled: no new line for ([\d.]+)s", out)
    assert code == 3 and silent, (code, out[-1500:])
    # 4 s of silence, measured at most 5% short while the step is taken up (a tick late at
    # most); not 10 minutes late (before: --timeout's 60 s came first)
    assert 4.0 <= float(silent.group(1)) < 5.5, silent.group(0)
    assert took < 20.0, f"watch ended {took:.1f}s after the step"


@pytest.mark.parametrize("transport", ["auto", "sftp"])
def test_a_node_whose_clock_is_behind_is_not_a_dead_server_at_attach(
        tmp_path: Path, daemons: Any, transport: str) -> None:  # noqa: F811
    """The node's clock 6 minutes behind: its file times and its programs' clock (the
    streamed reader's python3, `date`).  The log was written a second ago; the target's
    stall budget is 5 minutes.  Over SFTP (no time in its attributes) the mtime was taken
    as it was, before: `silent since ...: server probably dead` and a stall at attach."""
    behind = 360
    bin_dir = tmp_path / "nodebin"
    bin_dir.mkdir()
    for tool in ("python3", "date"):
        found = shutil.which(tool)
        assert found is not None
        wrapper = bin_dir / tool
        wrapper.write_text(f"#!/bin/sh\nexec env LD_PRELOAD={libfaketime()} FAKETIME=-{behind} "
                           f"FAKETIME_DONT_FAKE_MONOTONIC=1 {found} \"$@\"\n")
        wrapper.chmod(0o755)
    server = SSHServer(str(tmp_path / "sshd"), bashrc=f"export PATH={bin_dir}:$PATH")
    server.start()
    try:
        log = tmp_path / "node.log"
        texts = sim_texts()
        shards = split_at(texts, "Loading safetensors checkpoint shards")
        log.write_text("".join(texts[:shards + 3]), encoding="utf-8")
        written = time.time() - 1.0
        os.utime(log, (written - behind, written - behind))    # by the node's clock
        ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
        port = free_port()
        cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
            target_cfg("node", server.url(log), ssh={**ssh, "transport": transport}, gpu=False,
                       probe=False, stall_after="5m")])
        d = daemons(cfg, port).start()
        d.wait_target("node", lambda t: t.get("phase") == "loading_shards", "loading_shards")
        assert server.bashrc_runs.read_text().count("run") >= 1    # the node's programs ran
        time.sleep(2.5)   # a window for what must not happen: two ticks would take a stall
        t = d.target("node")
        assert t is not None and t["stalled"] is False, t
        assert "probably dead" not in d.stderr(), d.stderr()[-1500:]
    finally:
        server.cleanup()


def test_a_daemon_restarted_while_a_step_is_taken_up_sees_no_silence(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """The daemon's wall clock set 10 minutes on, the daemon restarted 2 s later (a deploy):
    the new process goes on with the old one's clock (state_dir/clock.json), so the target's
    last line, saved on that clock, is seconds old, not 10 minutes (before: `stalled: no new
    line for 10m08s` at the restart, for a log silent 6 s)."""
    spec = tmp_path / "faketime.spec"
    spec.write_text("+0\n")
    env = {"LD_PRELOAD": libfaketime(), "FAKETIME_NO_CACHE": "1",
           "FAKETIME_TIMESTAMP_FILE": str(spec), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    log, texts, shards = _startup(tmp_path)
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("t", log, gpu=False, probe=False, stall_after="5m")])
    d = daemons(cfg, port, env=env).start()
    _append(log, "".join(texts[:shards + 2]) + "\n")     # (the bar's last frame ended)
    d.wait_target("t", lambda t: t.get("phase") == "loading_shards", "loading_shards")
    d.wait_lines("t", "".join(texts[:shards + 2]).count("\n") + 1)
    spec.write_text("+600\n")
    wait_for(lambda: (tmp_path / "state" / "clock.json").exists(), 10, "the clock saved")
    d.stop()
    d.start()
    d.wait_target("t", lambda t: t.get("phase") == "loading_shards", "loading_shards again")
    # a window for what must not happen: past the source's resume grace (2 s) and a tick,
    # a stall would be taken (it was, 10m08s, before)
    time.sleep(6.0)
    t = d.target("t")
    assert t is not None and t["stalled"] is False, t
    assert "stalled" not in d.stderr(), d.stderr()[-1500:]
