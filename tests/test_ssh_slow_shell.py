"""SSH cost independent of the node's login shell (issue 30).

Many GPU nodes run conda or pyenv init in ~/.bashrc, and bash runs it for every command sshd
starts.  Before, every target's first attach ran its own `grep` command (a session and a
~/.bashrc each, 4 at a time per host): 500 targets behind a 0.3 s ~/.bashrc were ~14 s
behind.  Now the grep runs inside the one streamed reader per connection (started once): the
node's ~/.bashrc runs once per connection, whatever the number of targets.  And a tcsh login
shell (no `VAR=value cmd` syntax) still finds the latest startup; a ~/.bashrc that prints (a
banner, a terminal title with no line end) is read past, or named where it breaks SFTP.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from support.daemon import (  # noqa: F401
    daemons, free_port, sim_texts, target_cfg, wait_for, write_config,
)
from support.sshd import SFTP_SERVER, SSHServer

pytestmark = pytest.mark.integration

N = 20
LINES = re.compile(r'^logwatch_lines_total\{[^}]*\} (\S+)$', re.M)


def lines_counted(d: Any) -> float:
    """Every target's logwatch_lines_total, summed, from one scrape."""
    return sum(float(v) for v in LINES.findall(d.metrics_text()))


@pytest.mark.serial
def test_20_targets_behind_a_slow_bashrc_start_one_shell_and_keep_up(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    server = SSHServer(str(tmp_path / "sshd"), bashrc="sleep 0.3", max_sessions=10)
    server.start()
    try:
        logs = []
        texts = sim_texts(port=8000)
        old = "".join(texts)                  # a startup, ready: where each attach begins
        for i in range(N):
            log = tmp_path / f"node{i}.log"
            log.write_text(old * 3, encoding="utf-8")
            logs.append(log)
        ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
        port = free_port()
        cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
            target_cfg(f"t{i}", server.url(log), ssh=ssh, gpu=False, probe=False)
            for i, log in enumerate(logs)])
        t0 = time.monotonic()
        d = daemons(cfg, port).start()
        per_startup = old.count("\n")
        for i in range(N):                    # each attached at its latest startup
            d.wait_lines(f"t{i}", per_startup, timeout=30)
        attached = time.monotonic() - t0
        # then 20 lines a second for 3 s each: every line counted within 2 s of the end
        line = "[2026-01-01 00:00:00] Decode batch. #running-req: 1, #token: 10, gen throughput (token/s): 1.0\n"
        for _ in range(30):
            for log in logs:
                with open(log, "a", encoding="utf-8") as f:
                    f.write(line * 2)
            time.sleep(0.1)                   # the writers' pace (20 lines/s), not a sync
        end = time.monotonic()
        want = N * (per_startup + 60)
        wait_for(lambda: lines_counted(d) == want, 10, f"all {want} lines", interval=0.05,
                 alive=d.dead)
        late = time.monotonic() - end
        runs = server.bashrc_runs.read_text().count("run")
        assert runs == 1, f"~/.bashrc ran {runs} times for {N} targets on one connection"
        assert late < 2.0, f"{late:.2f}s behind at the end"
        assert attached < 15, attached
    finally:
        server.cleanup()



@pytest.mark.parametrize("transport", ["stream", "sftp"])
def test_a_tcsh_login_shell_still_finds_the_latest_startup(
        tmp_path: Path, daemons: Any, transport: str) -> None:  # noqa: F811
    """A node whose login shell is tcsh: `LC_ALL=C grep ...` is `LC_ALL=C: Command not
    found.` there (before: the log read from byte 0, old crashes paged again).  The first
    attach starts at the latest of 3 startups, over the streamed reader and over SFTP (where
    the grep is a command: `env LC_ALL=C grep`)."""
    server, d, texts = watch_node(tmp_path, daemons, startups=3, transport=transport,
                                  shell="/usr/bin/tcsh")
    try:
        d.wait_target("node", lambda t: t["phase"] == "ready", "ready")
        d.wait_lines("node", texts.count("\n"), timeout=20)     # the last startup only
        assert "Command not found" not in d.stderr()
        assert "remote grep failed" not in d.stderr()
    finally:
        server.cleanup()


BUSYBOX = "/usr/bin/busybox"    # the Debian package, installed by scripts/test-deps.sh


@pytest.mark.parametrize("grep", ["none", "busybox"])
def test_a_grep_that_fails_on_the_node_is_no_startup_found(
        tmp_path: Path, daemons: Any, grep: str) -> None:  # noqa: F811
    """A node without python3 (read over SFTP, the startup grep a command) whose login PATH
    has a grep that cannot run it: BusyBox's, without `-b` (exit 2), or none (127).  Before:
    `grep ... | tail -n 50` answered tail's 0, read as "no startup in the log": the log read
    from byte 0, 3 startups counted for 1.  Now grep's own status comes back, the failure is
    known, and the log is scanned over SFTP: the latest startup only."""
    assert os.path.exists(BUSYBOX), "scripts/test-deps.sh installs busybox"

    def node_grep(server: SSHServer) -> None:
        tool = server.dir / "nopython-bin" / "grep"
        tool.unlink()
        if grep == "busybox":
            tool.symlink_to(BUSYBOX)

    server, d, texts = watch_node(tmp_path, daemons, startups=3, python=False,
                                  prepare=node_grep)
    try:
        d.wait_target("node", lambda t: t["phase"] == "ready", "ready", timeout=30)
        d.wait_lines("node", texts.count("\n"), timeout=20)     # the last startup only
        assert d.metric("logwatch_startups_total", target="node") == 1.0
        assert "remote grep failed" in d.stderr()
    finally:
        server.cleanup()


# a banner, then a terminal title with no line end of its own (what the reader's greeting
# then shares its line with)
PRINTING_BASHRC = 'echo "Welcome to gpu-node-17"; printf "\\033]0;gpu-node-17\\007"'


def watch_node(tmp_path: Path, daemons: Any, *, startups: int = 1,  # noqa: F811
               transport: str = "auto", gpu: Any = False,
               prepare: Callable[[SSHServer], None] | None = None,
               **server_kw: Any) -> tuple[SSHServer, Any, str]:
    """An sshd configured by `server_kw` (and by `prepare` before it starts), a log there of
    `startups` startups, and a daemon reading it (target "node") with `transport` and `gpu`:
    (the sshd, the daemon, the text of one startup)."""
    server = SSHServer(str(tmp_path / "sshd"), **server_kw)
    if prepare is not None:
        prepare(server)
    server.start()
    log = tmp_path / "server.log"
    texts = "".join(sim_texts(port=8000))
    log.write_text(texts * startups, encoding="utf-8")
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)],
           "transport": transport}
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node", server.url(log), ssh=ssh, gpu=gpu, probe=False)])
    try:
        return server, daemons(cfg, port).start(), texts
    except BaseException:
        server.cleanup()
        raise


def test_a_bashrc_that_prints_does_not_hold_up_the_streamed_reader(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """Before, the reader's greeting had to be a line of its own: after a title with no line
    end it was never seen, and each connection waited 20 s for it (then `transport: stream`
    gave up: "did not start").  Now the first attach reads the log at once."""
    server, d, texts = watch_node(tmp_path, daemons, transport="stream",
                                  bashrc=PRINTING_BASHRC)
    try:
        d.wait_target("node", lambda t: t["phase"] == "ready", "ready", timeout=8)
        d.wait_lines("node", texts.count("\n"), timeout=8)
        assert "did not start" not in d.stderr()
        assert server.bashrc_runs.read_text().count("run") == 1
    finally:
        server.cleanup()


def test_sftp_broken_by_a_bashrc_that_prints_is_named_with_what_it_printed(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """sshd runs an `sftp-server` subsystem through the login shell, so a banner comes
    before the first SFTP packet.  Before: "cannot connect: SFTPBadMessage: Max packet size
    exceeded", retried for ever.  Now one fatal message names the text and the fix."""
    server, d, _ = watch_node(tmp_path, daemons, transport="sftp", bashrc=PRINTING_BASHRC,
                              sftp=SFTP_SERVER)
    try:
        t = d.wait_target("node", lambda t: t["source_state"]["fatal"], "the fatal state",
                          timeout=10)
        said = t["source_state"]["message"]
        assert "login shell prints text ('Welcome to gpu-node-17')" in said, said
        assert "[[ $- == *i* ]] || return" in said and "transport: auto" in said, said
        assert "SFTPBadMessage" not in d.stderr()
    finally:
        server.cleanup()


def test_an_sftp_only_account_is_read_over_sftp_and_its_gpu_not_asked_again_and_again(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """sshd's `ForceCommand internal-sftp` refuses every command: the streamed reader and
    the grep fail, and the log is read (from its latest startup) over SFTP.  nvidia-smi
    cannot run there: said once and asked again after the long wait (before: "nvidia-smi
    exited with 1", restarted and warned about every few seconds)."""
    fake = Path(__file__).parent / "tools" / "fake-nvidia-smi"
    server, d, texts = watch_node(tmp_path, daemons, startups=2, force_command="internal-sftp",
                                  gpu={"command": str(fake), "interval": "250ms"})
    try:
        d.wait_target("node", lambda t: t["phase"] == "ready", "ready", timeout=30)
        d.wait_lines("node", texts.count("\n"), timeout=10)    # the last startup only
        t = d.wait_target("node", lambda t: (t.get("gpu") or {}).get("status", "")
                          .startswith("the SSH account allows SFTP only"), "the GPU status")
        time.sleep(2)   # a window to see none restarted (the old backoff was 0.3-2 s)
        said = [e for e in d.log_events() if "SFTP only" in e.get("event", "")]
        assert len(said) == 1, said
        assert not any("nvidia-smi exited" in e.get("event", "") for e in d.log_events())
        assert "Traceback" not in d.stderr(), t
    finally:
        server.cleanup()
