"""A daemon restarted (SIGTERM, `kill -9`) while a line is shown cut: the writer paused inside
the line (`...Load weight be`), the log quiet past PARTIAL_LINE_QUIET, so the daemon read the
line as it stood; the daemon restarts; the rest (`gin. avail mem=...`) comes.  The restarted
daemon reads the whole line once: its phase is seen, the line counted once, a crash in it
paged once, whole.  Before, the checkpoint's offset was after the shown bytes: the rest was
read as a line of its own (tests/test_open_line_live.py: the same without a restart).

A real daemon (`logwatch run -c`), a local file and an SSH target on the test sshd.  The quiet
is the input here, not a synchronisation: the other waits poll a condition with a deadline."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from logwatch.pipeline import PARTIAL_LINE_QUIET
from support.daemon import Daemon, checkpoint, daemons, free_port, target_cfg, wait_for  # noqa: F401
from support.receivers import alert_state, hook, outbox, receivers, write_config  # noqa: F401  (the fixture)
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)
from test_open_line import AFTER, ARGS, LOAD, NCCL
from test_open_line_live import READY

pytestmark = pytest.mark.integration  # daemons, sshd, receivers: `make test` only

Stop = Callable[[Daemon], Any]


def reload_changed(d: Daemon) -> None:
    """The target's config changed (`stall_after`), SIGHUP: the daemon re-creates the target
    from its checkpoint, as at a restart."""
    doc = yaml.safe_load(d.config.read_text(encoding="utf-8"))
    doc["targets"][0]["stall_after"] = "30m"
    d.config.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    d.signal(signal.SIGHUP)
    wait_for(lambda: any(e.get("event") == "reloaded" for e in d.log_events()), 20, "reloaded",
             alive=d.dead)


STOPS: dict[str, Stop] = {"SIGTERM": Daemon.stop, "kill -9": Daemon.kill9,
                          "SIGHUP": reload_changed}


def source_of(where: str, log: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The daemon's target for `log`: the file itself, or the same file over the test sshd."""
    if where == "local":
        return target_cfg("t", log, probe=False, gpu=False)
    server: SSHServer = request.getfixturevalue("sshd_server")
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    return target_cfg("t", server.url(log), ssh=ssh, gpu=False, probe=False)


def restart_while_shown(d: Daemon, log: Path, state: Path, cut: bytes, stop: Stop,
                        lines: int) -> None:
    """Write `cut` (a line without its end), wait until the daemon has read it as a line
    (`lines` counted) and, before a `kill -9`, its checkpoint says so; stop the daemon."""
    with open(log, "ab") as f:
        f.write(cut)
    d.wait_lines("t", lines, timeout=PARTIAL_LINE_QUIET + 15)
    if stop is Daemon.kill9:
        wait_for(lambda: ((checkpoint(state, "t") or {}).get("extra", {}).get("counters") or {})
                 .get("lines") == lines, 15, "a checkpoint after the line shown", alive=d.dead)
    stop(d)


@pytest.mark.parametrize("where, how", [
    ("local", "SIGTERM"), ("ssh", "SIGTERM"), ("local", "kill -9"), ("ssh", "kill -9"),
    ("local", "SIGHUP")])
def test_a_restart_while_a_line_is_shown_cut_reads_it_whole_once(
        where: str, how: str, tmp_path: Path, daemons: Any, receivers: Any,  # noqa: F811
        request: pytest.FixtureRequest) -> None:
    """`...TP0] Load weight be` shown, the daemon stopped (SIGTERM: the checkpoint of a
    show that changed nothing is written at the stop), then `gin. avail mem=70.1 GB` and the
    ready line.  Before: no `loading_shards` (`launching 5.0s`), 4 lines.  The line shown
    whole but for its `\n` (a show that moved the phase: checkpointed), `kill -9`: before,
    the `\n` a line of its own.  A SIGHUP that re-creates the target (its config changed)
    restores it from the checkpoint: the same as SIGTERM."""
    rx = receivers()
    log, state, port = tmp_path / "server.log", tmp_path / "state", free_port()
    log.write_bytes(ARGS)
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [source_of(where, log, request)],
                       alerts=[{"type": "webhook", "url": rx.url(), "on": ["ready"]}],
                       checkpoint={"interval": "1s"})
    d = daemons(cfg, port).start()
    d.wait_target("t", lambda t: t["phase"] == "launching", "launching", timeout=30)
    cut = -1 if how == "kill -9" else 40     # all but its `\n` / `Load weight be`
    restart_while_shown(d, log, state, LOAD[:cut], STOPS[how], 2)
    with open(log, "ab") as f:
        f.write(LOAD[cut:] + READY)
    if how != "SIGHUP":
        d.start()
    rx.wait(hook("ready", "firing", "t"), timeout=30, alive=d.dead, what="ready")
    t = d.wait_target("t", lambda t: t["phase"] == "ready", "ready")
    assert t["lines"] == 3, t["lines"]
    assert d.metric("logwatch_rule_matches_total", target="t", rule="load_weight_begin") == 1
    got = d.get("/api/status")[1]
    assert '"loading_shards": 4.0' in got and '"launching": 1.0' in got, got[:3000]


def test_a_crash_line_shown_cut_and_settled_is_not_paged_again_after_kill_9(
        tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """`RuntimeError: NCCL error: unh` shown (a crash, settled and paged as it stood: the
    server may be dead), `kill -9`, then the rest of the line and the next one.  The
    restarted daemon reads them as the crash's: no second page, 4 lines.  Before, the rest
    was a fifth line."""
    rx = receivers()
    log, state, port = tmp_path / "server.log", tmp_path / "state", free_port()
    log.write_bytes(ARGS + LOAD)
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg("t", log, probe=False, gpu=False)],
                       alerts=[{"type": "webhook", "url": rx.url(), "on": ["crashed"]}],
                       checkpoint={"interval": "1s"})
    d = daemons(cfg, port).start()
    d.wait_target("t", lambda t: t["phase"] == "loading_shards", "loading", timeout=30)
    with open(log, "ab") as f:
        f.write(NCCL[:29])
    rx.wait(hook("crashed", "firing", "t"), timeout=30, alive=d.dead, what="the crash")
    # a delivery cut by the kill (its 2xx's removal from the outbox not on disk yet) is
    # made again after the restart, with the same Idempotency-Key (README): the case here
    # is a kill after the delivery is done, the crash's open alert on disk
    wait_for(lambda: any(k.endswith("|crashed") for k in alert_state(state).get("open", {}))
             and not outbox(state), 15, "the delivery done on disk", alive=d.dead)
    restart_while_shown(d, log, state, b"", Daemon.kill9, 3)
    with open(log, "ab") as f:
        f.write(NCCL[29:] + b"\n" + AFTER)
    d.start()
    d.wait_lines("t", 4, timeout=20)
    rx.assert_quiet(3.0, hook("crashed"), "after the restart")
    assert len(rx.requests(hook("crashed", "firing", "t"))) == 1
    assert d.target("t")["lines"] == 4


def test_a_crash_line_shown_cut_and_unsettled_is_paged_whole_after_kill_9(
        tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """The same crash line shown cut, `kill -9` before the crash settles (a pack that waits
    12 s for a crash to settle, so the kill is not a race), then the rest and the next line:
    one page, its line and excerpt whole, 4 lines.  Before: `line: RuntimeError: NCCL
    error: unh`, the excerpt ending there, 5 lines."""
    rx = receivers()
    log, state, port = tmp_path / "server.log", tmp_path / "state", free_port()
    pack = tmp_path / "slow.yaml"
    pack.write_text("name: slow\nextends: sglang\ncrash_settle: 12s\n", encoding="utf-8")
    log.write_bytes(ARGS + LOAD)
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg("t", log, probe=False, gpu=False, rules=str(pack))],
                       alerts=[{"type": "webhook", "url": rx.url(), "on": ["crashed"]}],
                       checkpoint={"interval": "1s"})
    d = daemons(cfg, port).start()
    d.wait_target("t", lambda t: t["phase"] == "loading_shards", "loading", timeout=30)
    restart_while_shown(d, log, state, NCCL[:29], Daemon.kill9, 3)
    with open(log, "ab") as f:
        f.write(NCCL[29:] + b"\n" + AFTER)
    d.start()
    got = rx.wait(hook("crashed", "firing", "t"), timeout=40, alive=d.dead, what="the crash")
    assert got[0].json["details"]["line"] == NCCL.decode(), got[0].json
    assert got[0].json["excerpt"][-2:] == [NCCL.decode(), AFTER.decode().strip()], got[0].json
    assert d.target("t")["lines"] == 4
    rx.assert_quiet(2.0, hook("crashed"), "after the first page")
    assert len(rx.requests(hook("crashed", "firing", "t"))) == 1
