"""The daemon with SSH targets against a real sshd (tests/support/sshd.py) and a real webhook
receiver (tests/support/receivers.py): what an SSH fault does to the pages an operator gets.

Nothing here sleeps to synchronise: the receiver's `wait` and the daemon's `wait_target` poll
with a deadline; `assert_quiet` windows are the bounded negative checks (a page that must
not come has no event to wait for).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.daemon import (  # noqa: F401
    checkpoint, daemons, free_port, sim_texts, split_at, target_cfg, wait_for, write_config,
)
from support.receivers import hook, receivers  # noqa: F401  (the fixture)
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers: `make test` only


def ssh_target(server: SSHServer, name: str, path: Path, **kw: Any) -> dict[str, Any]:
    """A daemon target reading `path` on the test sshd, without GPU stream or probe."""
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    return target_cfg(name, server.url(path), ssh=ssh, gpu=False, probe=False, **kw)


def test_a_job_directory_made_later_is_waited_for_and_its_crash_paged(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """A job's own directory is made when the job starts (`/jobs/job-8/server.log`).  The
    daemon waits for it as for a local one, and the crash the job writes is paged at once.
    Before: "no such directory" was fatal, tried again after 120 s (FATAL_RETRY_BASE), a
    `source_down` page meanwhile, and the crash written in those 2 minutes was read as
    history: never paged."""
    rx = receivers()
    job = tmp_path / "jobs" / "job-8"
    job.parent.mkdir()
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        ssh_target(sshd_server, "job", job / "server.log", source_down_after="2s"),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["crashed", "source_down"]}])
    d = daemons(cfg, port).start()
    t = d.wait_target("job", lambda t: "no such directory yet" in t["source_state"]["message"],
                      "waiting for the job's directory", timeout=30)
    assert t["source_state"]["state"] == "waiting", t["source_state"]
    job.mkdir()
    (job / "server.log").write_text("".join(sim_texts(crash="oom")), encoding="utf-8")
    t0 = time.monotonic()
    got = rx.wait(hook("crashed", "firing", "job"), timeout=30, alive=d.dead, what="the crash")
    took = time.monotonic() - t0
    assert "cuda_oom" in got[0].json["summary"], got[0].json
    assert took < 15, took
    rx.assert_quiet(3.0, hook("source_down"), "for a directory not made yet")
    assert len(rx.requests(hook("crashed", "firing", "job"))) == 1   # once


class Server:
    """The inference server writing its log on the node: a line every `every` seconds from a
    thread while `writing` is set (it keeps loading while the network is down)."""

    def __init__(self, log: Path, every: float = 0.3) -> None:
        self.log, self.every = log, every
        self.writing = threading.Event()
        self.done = threading.Event()
        self.lines = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(self.every):
            if self.writing.is_set():
                self.lines += 1
                with open(self.log, "a", encoding="utf-8") as f:
                    f.write(f"[2026-01-01 10:00:05 TP0] loading layer {self.lines}\n")

    def start(self) -> "Server":
        self.writing.set()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)


def test_no_stall_page_while_the_node_cannot_be_read_and_one_at_once_after(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """sshd down (the connection lost, reconnects refused) for three stall budgets while the
    server loads on and writes: no `stalled` page (the outage is `source_down`'s; before, a
    `stalled` page blamed the server for the network, resolved at the reconnect), and none
    once its lines are read again.  Then the server goes silent and the node is unreachable
    again for longer than the budget: the `stalled` page comes once the log is read again,
    within seconds, not during the outage and not a budget later."""
    rx = receivers()
    log = tmp_path / "server.log"
    texts = sim_texts()
    log.write_text("".join(texts[:17]), encoding="utf-8")    # up to "Load weight begin"
    port = free_port()
    budget = 3.0
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        ssh_target(sshd_server, "node", log, stall_after=f"{budget:g}s"),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["stalled", "source_down"]}])
    d = daemons(cfg, port).start()
    server = Server(log).start()
    try:
        d.wait_target("node", lambda t: t["source_state"]["state"] == "up" and
                      t["phase"] not in ("waiting", "launching"), "loading", timeout=30)
        outage(sshd_server, d, rx, 3 * budget)
        lines = server.lines
        d.wait_target("node", lambda t: t["source_state"]["state"] == "up" and
                      t["source_state"]["line_number"] > 17 + lines, "the outage's lines read",
                      timeout=30)
        rx.assert_quiet(budget / 2, hook("stalled"), "once read again")
        # the server goes silent, then the node can not be reached for longer than the budget
        server.writing.clear()
        outage(sshd_server, d, rx, 2 * budget)
        d.wait_target("node", lambda t: t["source_state"]["state"] == "up", "up again",
                      timeout=30)
        back = time.monotonic()
        rx.wait(hook("stalled", "firing", "node"), timeout=15, alive=d.dead, what="the stall")
        assert time.monotonic() - back < 4.0, time.monotonic() - back
        assert len(rx.requests(hook("stalled", "firing"))) == 1
    finally:
        server.stop()


def test_a_server_that_hangs_mid_bar_while_the_daemon_is_down_is_stalled_at_the_restart(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """The daemon is killed -9 just after a shard bar's frame came (a bar's last frame has no
    line end until the next redraw: read again from the saved offset at the restart); the
    server writes nothing more, and the daemon is down for twice `stall_after`.  At the
    restart the log has been silent for longer than the budget: the `stalled` page comes at
    once and says the whole silence.  Before, the frame read again was a new line to the
    machine (its quiet flush counted as activity at the restart): the page came one budget
    after the restart and said "no new line for 4.1s" (in a 48-target scene, 8.8 s after the
    restart, "no new line for 8.1s" after 22 s of silence)."""
    rx = receivers()
    log = tmp_path / "server.log"
    texts = sim_texts(shards=400)
    k = split_at(texts, "| 10/400")           # frames up to 9/400; 9's \r ends frame 8
    log.write_text("".join(texts[:k]), encoding="utf-8")
    port = free_port()
    budget = 4.0
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [
        ssh_target(sshd_server, "node", log, stall_after=f"{budget:g}s"),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["stalled"]}])
    d = daemons(cfg, port).start()
    d.wait_target("node", lambda t: (t["progress"].get("shards") or {}).get("current") == 8,
                  "frame 8 read", timeout=30)
    with open(log, "a", encoding="utf-8") as f:
        f.write(texts[k])                      # frame 10 (ends frame 9), then nothing more

    def saved() -> Any:
        st = ((checkpoint(state, "node") or {}).get("extra") or {}).get("state") or {}
        return ((st.get("progress") or {}).get("shards") or {}).get("current") == 9
    wait_for(saved, 10, "a checkpoint with frame 9", interval=0.05, alive=d.dead)
    d.kill9()                                  # frame 10 not yet read as a line
    killed = time.monotonic()
    rx.assert_quiet(2 * budget, hook("stalled"), "while the daemon is down")
    d.start()
    back = time.monotonic()
    got = rx.wait(hook("stalled", "firing", "node"), timeout=20, alive=d.dead, what="the stall")
    late = time.monotonic() - back
    assert late < 3.0, f"stalled {late:.1f}s after the restart"
    said = float(re.search(r"no new line for ([\d.]+)s", got[0].json["summary"]).group(1))
    assert said >= time.monotonic() - killed - 3.0 - 1.0, got[0].json["summary"]
    assert len(rx.requests(hook("stalled", "firing"))) == 1


def test_a_node_down_pages_source_down_once_per_outage(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """README Alerts, `source_down`: "One per outage", resolved once the log reads again.
    The node's sshd stopped (its connection dropped, each reconnect refused) for longer than
    `source_down_after` and several retries: one page, however many retries fail; sshd back,
    one resolution, and the lines written meanwhile read.  (Before, only a refused key and a
    failing command were tested; a host down is the usual outage.)"""
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(serve_lines=5)), encoding="utf-8")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        ssh_target(sshd_server, "node", log, source_down_after="2s"),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["source_down"]}])
    d = daemons(cfg, port).start()
    size = log.stat().st_size
    d.wait_target("node", lambda t: t["source_state"]["state"] == "up" and
                  t["source_state"]["offset"] == size, "the log read", timeout=30)
    lines = d.metric("logwatch_lines_total", target="node") or 0.0
    sshd_server.stop()
    rx.wait(hook("source_down", "firing", "node"), timeout=30, alive=d.dead,
            what="source_down for the node down")
    def refused() -> int:
        return sum(1 for e in d.log_events() if e.get("event") == "source" and
                   "cannot connect" in str(e.get("message")))
    tries = refused()
    with open(log, "a", encoding="utf-8") as f:
        f.write("written while the node could not be read\n")
    wait_for(lambda: refused() >= tries + 2, 30, "two more reconnects refused", alive=d.dead)
    assert len(rx.requests(hook("source_down", "firing"))) == 1, rx.brief()
    sshd_server.start()
    rx.wait(hook("source_down", "resolved", "node"), timeout=90, alive=d.dead,
            what="source_down resolved once the log reads again")
    d.wait_lines("node", int(lines) + 1, timeout=30)
    rx.assert_quiet(1.0, hook("source_down"), "after the outage")
    assert [g.json["status"] for g in rx.requests(hook("source_down"))] == \
        ["firing", "resolved"], rx.brief()


def outage(sshd: SSHServer, d: Any, rx: Any, seconds: float) -> None:
    """sshd stopped (every connection dropped, new ones refused) for `seconds`, during which
    no `stalled` page may come; then started again on its port."""
    sshd.stop()
    d.wait_target("node", lambda t: t["source_state"]["state"] == "error", "the outage seen",
                  timeout=15)
    try:
        rx.assert_quiet(seconds, hook("stalled"), "while the node cannot be read")
    finally:
        sshd.start()


def test_a_relaunch_with_the_same_first_kib_is_read_over_sftp(tmp_path: Path, daemons: Any,
                                                              receivers: Any) -> None:  # noqa: F811
    """Over SFTP (no inode to tell files apart) the log removed and written again by a
    relaunch whose first KiB is the same (an engine that stamps nothing at start): before,
    its heads matched, the path was taken for ours, and the deleted file's handle was read on
    for good: the relaunch's crash never paged.  Now a path shorter than what was read of
    ours is another file: read, its crash paged."""
    from support.sshd import SFTP_SERVER
    server = SSHServer(str(tmp_path / "sshd"), sftp=SFTP_SERVER)
    server.start()
    try:
        rx = receivers()
        log = tmp_path / "server.log"
        ready = "".join(sim_texts(serve_lines=40))
        log.write_text(ready)
        port = free_port()
        t = ssh_target(server, "n", log)
        t["ssh"]["transport"] = "sftp"
        cfg = write_config(tmp_path / "c.yaml", port, tmp_path / "state", [t], alerts=[
            {"type": "webhook", "url": rx.url(), "on": ["crashed"]}])
        d = daemons(cfg, port).start()
        d.wait_target("n", lambda t: t["phase"] == "ready", "ready", timeout=40)
        log.unlink()
        crash = "".join(sim_texts(crash="oom"))
        assert crash[:1024] == ready[:1024] and len(crash) < len(ready)   # the case
        log.write_text(crash)
        rx.wait(hook("crashed", "firing", "n"), timeout=30, alive=d.dead, what="the crash")
    finally:
        server.cleanup()


@pytest.mark.serial    # /healthz under 1 s throughout, a writer at 500 lines/s
def test_a_daemon_killed_during_an_ssh_outage_under_a_running_fleet(
        tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """Issue 30's faults together, as an operator's restart meets them (adv128's composite
    trial, smallest): a node whose ~/.bashrc takes 0.3 s and prints a conda banner on
    stderr, MaxSessions 10; on it a server up an hour before the attach (probed), one whose
    log is renamed every 3 s at 500 lines/s (the writer reopening 1 s late), one that
    crashes while the daemon is down.  sshd stopped, the daemon killed -9 and started again
    while it is down (systemd's restart), sshd back.  Every line counted once (no loss said
    either), the crash paged once, nothing else paged (no `unreachable` for the outage, no
    `ready` of history), the server probed up, /healthz under 1 s whenever it answered."""
    from support.receivers import Receiver, serving_crash
    from test_rotation_chain import RenamingWriter

    banner = 'sleep 0.3\necho "==> WARNING: A newer version of conda exists. <==" >&2'
    server = SSHServer(str(tmp_path / "sshd"), bashrc=banner, max_sessions=10)
    server.start()
    rx = receivers()
    an_hour_ago = time.time() - 3600
    logs, apps, texts = {}, {}, {}
    for name in ("up", "rot", "crash"):
        apps[name] = free_port()
        texts[name] = "".join(sim_texts(seed=len(name), port=apps[name]))
        logs[name] = tmp_path / f"{name}.log"
        logs[name].write_text(texts[name], encoding="utf-8")
        os.utime(logs[name], (an_hour_ago, an_hour_ago))
    https = {n: Receiver(port=apps[n]).start() for n in ("up", "crash")}
    probe = {"interval": "1s", "timeout": "2s", "fail_after": "3s"}
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        {**ssh_target(server, n, logs[n]), "probe": probe if n != "rot" else False}
        for n in logs],
        alerts=[{"type": "webhook", "url": rx.url(),
                 "on": ["crashed", "ready", "restarted", "unreachable", "stalled"]}])
    d = daemons(cfg, port).start()
    worst = [0.0]
    done = threading.Event()

    def poll() -> None:          # /healthz whenever the daemon is up (the poller's pace)
        while not done.is_set():
            if d.dead() is None:
                t0 = time.monotonic()
                try:
                    if d.get("/healthz")[0] == 200:
                        worst[0] = max(worst[0], time.monotonic() - t0)
                except OSError:
                    pass         # not listening yet: the restart
            done.wait(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    writer = RenamingWriter(logs["rot"], duration=14.0, rate=500, every=3.0, late=1.0)
    try:
        for n in logs:
            d.wait_lines(n, texts[n].count("\n"), timeout=30)
        poller.start()
        writer.start()
        wait_for(lambda: writer.rotations >= 1 and writer.written > 2000, 20, "two rotations")
        server.stop()                                          # the SSH outage
        d.kill9()
        crash = serving_crash()
        with open(logs["crash"], "a", encoding="utf-8") as f:  # while the daemon is down
            f.write(crash)
        https.pop("crash").close()
        d.start()
        d.wait_target("rot", lambda t: t["source_state"]["state"] != "up", "the outage seen")
        server.start()
        writer.join(timeout=40)
        assert writer.error is None and writer.rotations >= 4, (writer.error, writer.rotations)
        want = {"up": texts["up"].count("\n"), "crash": (texts["crash"] + crash).count("\n"),
                "rot": texts["rot"].count("\n") + writer.written}
        for n, lines in want.items():
            d.wait_lines(n, lines, timeout=30)
        got = rx.wait(hook("crashed", "firing", "crash"), timeout=30, alive=d.dead,
                      what="the crash")
        d.wait_metric("logwatch_probe_up", 1.0, timeout=15, target="up")
        rx.assert_quiet(2.0, what="after the crash")
        assert [(g.json["kind"], g.json["target"]) for g in rx.requests()] == \
            [("crashed", "crash")], rx.brief()
        assert "cuda_oom" in got[0].json["summary"], got[0].json
        for n in logs:
            assert not d.metric("logwatch_source_losses_total", target=n), n
            assert not d.metric("logwatch_bytes_skipped_total", target=n), n
        assert worst[0] < 1.0, f"/healthz took {worst[0]:.2f}s"
    finally:
        done.set()
        for h in https.values():
            h.close()
        server.cleanup()
