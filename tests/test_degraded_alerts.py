"""The `degraded` alert end to end: a real SGLang 0.5.23 PD prefill log whose KV transfer
times out while it serves (`pd_bootstrap_timeout`, a `degrades` rule), a real daemon, a
webhook, a Slack receiver and a REAL Alertmanager (Debian's prometheus-alertmanager).

What a user should see (README "Alerts"): `degraded while serving: ...` once per startup,
to the sinks that take `ready`; open while that startup serves on (nothing in the log says
the part came back: Alertmanager has it again at each `resend`, after its own restart and
the daemon's); resolved when the startup ends: its crash (after the crash page), a new
startup, a clean stop, the target taken out of the config.  Not paged again across a SIGHUP
or a daemon restart."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES
from support.receivers import (  # noqa: F401
    Daemon, Receiver, append, daemons, free_port, hook, receivers, reload_with, serving_crash,
    target, wait_for, write_config,
)
from test_alertmanager import Alertmanager, alertmanager, notified  # noqa: F401

pytestmark = pytest.mark.integration

TIMEOUT = FIXTURES / "built" / "sglang-0523-pd-bootstrap-timeout.log"
NOTE = "PD KV transfer failing: requests timed out bootstrapping"
LABELS = {"model": "Qwen3 <!channel> & co"}       # a label Slack must not read as a ping


def serving_then_degrade() -> tuple[str, str]:
    """The fixture's server up to its ready line, and what it logs serving on (the KV
    bootstrap timeouts, requests answered 500, then 200 again)."""
    lines = TIMEOUT.read_text().splitlines(keepends=True)
    cut = next(i for i, x in enumerate(lines) if "fired up and ready" in x) + 1
    return "".join(lines[:cut]), "".join(lines[cut:])


def sinks(rx: Receiver, am: Alertmanager) -> list[dict[str, Any]]:
    return [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]},
            {"type": "slack", "url": rx.url("/slack")},      # the default kinds
            {"type": "alertmanager", "url": am.base, "on": ["crashed", "ready"],
             "resend": "1s"}]


def slack(rx: Receiver, what: str) -> list[dict[str, Any]]:
    return [g.json for g in rx.requests(lambda g: g.path == "/slack") if what in g.json["text"]]


def wait_slack_resolved(rx: Receiver, d: Daemon) -> None:
    """Slack is its own sink, delivered beside the webhook: its resolution may come after the
    webhook's (CI once read Slack's three messages before its fourth came)."""
    rx.wait(lambda g: g.path == "/slack" and g.json["text"].startswith("p1: resolved:"),
            timeout=20, what="Slack's resolution", alive=d.dead)


def am_active(am: Alertmanager, name: str) -> list[dict[str, Any]]:
    return [a for a in am.alerts() if a["labels"].get("alertname") == name
            and a["status"]["state"] == "active"]


def check_firing(rx: Receiver, am: Alertmanager, d: Daemon) -> dict[str, Any]:
    """The degrade at each receiver, once, as README says; the webhook's JSON returned."""
    got = rx.wait(hook("degraded", "firing"), timeout=20, alive=d.dead)[0].json
    assert got["summary"].startswith(f"degraded while serving: {NOTE}"), got
    assert got["details"]["note"].startswith(NOTE) and got["ends_at"] is None, got
    line = got["details"]["line"]              # the line itself, as a crash's root cause
    assert line.startswith("[2026-12-01 10:07:20 TP0] Some requests timed out when "
                           "bootstrapping"), line
    assert got["dedupe_key"] == f"p1|{got['startup']}|degraded" and got["labels"] == LABELS
    said = wait_for(lambda: slack(rx, "degraded while serving"), 20, "Slack's degrade")[0]
    assert said["blocks"][0]["text"]["text"].startswith(":warning: *p1: degraded while serving")
    assert any(line[:60] in b.get("text", {}).get("text", "") for b in said["blocks"]), said
    context = said["blocks"][-1]["elements"][0]["text"]
    assert "&lt;!channel&gt; &amp; co" in context and "<!channel>" not in json.dumps(said)
    a = wait_for(lambda: notified(rx, "LogwatchDegraded", "firing"), 20, "AM's notification")[0]
    assert {k: a["labels"].get(k) for k in ("target", "kind", "engine", "model", "source")} == \
        {"target": "p1", "kind": "degraded", "engine": "sglang", "model": LABELS["model"],
         "source": "logwatch"}, a["labels"]
    assert a["annotations"]["summary"] == got["summary"], a["annotations"]
    assert a["annotations"]["root_cause"] == line, a["annotations"]
    return got


def check_still_open(rx: Receiver, am: Alertmanager, d: Daemon) -> None:
    """Open in Alertmanager for as long as the startup serves: a day ahead (not the 5
    minutes of an event, which Alertmanager ends with a `resolved` notification while the
    server is still degraded), and back after Alertmanager's restart (the re-sends)."""
    listed = wait_for(lambda: am_active(am, "LogwatchDegraded"), 15, "open in AM", alive=d.dead)
    starts, ends = (datetime.fromisoformat(listed[0][k].replace("Z", "+00:00")).timestamp()
                    for k in ("startsAt", "endsAt"))
    assert ends - starts > 3600, listed[0]          # a day ahead, not 5 minutes on
    am.stop()
    am.start()                          # the same port and storage: its alerts are gone
    wait_for(lambda: am_active(am, "LogwatchDegraded"), 15, "the degrade back after AM's "
             "restart", alive=d.dead)
    assert not notified(rx, "LogwatchDegraded", "resolved")


@dataclass
class Watched:
    """A daemon watching one target, p1, on an empty log: what a SIGHUP needs again."""

    d: Daemon
    log: Path
    cfg: Path
    port: int
    state: Path
    targets: list[dict[str, Any]]
    alerts: list[dict[str, Any]]

    def reload(self) -> None:
        reload_with(self.d, self.cfg, self.port, self.state, self.targets, self.alerts, 1)


def watch_p1(tmp_path: Path, am: Alertmanager, rx: Receiver, daemons: Any) -> Watched:  # noqa: F811
    """A daemon reading p1's empty log, sending to the three receivers (`sinks`)."""
    log, port, state = tmp_path / "server.log", free_port(), tmp_path / "state"
    log.write_text("")
    targets, alerts = [target("p1", log, labels=LABELS)], sinks(rx, am)
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, targets, alerts)
    d = daemons(cfg, port).start()
    d.wait_reading("p1")
    return Watched(d, log, cfg, port, state, targets, alerts)


def test_a_degrade_is_paged_once_kept_open_and_resolved_by_the_crash_after_its_page(
        tmp_path: Path, alertmanager: Any, daemons: Any) -> None:  # noqa: F811
    """Before: LogwatchDegraded was an event (endsAt 5 min after its one send): never sent
    again, gone from a restarted Alertmanager, `resolved` by Alertmanager 5 minutes on while
    the server was still degraded; and active beside the same startup's crash, the webhook
    and Slack never told it was over."""
    am, rx = alertmanager
    p1 = watch_p1(tmp_path, am, rx, daemons)
    d, log = p1.d, p1.log
    ready, degrade = serving_then_degrade()
    append(log, ready)
    rx.wait(hook("ready", "firing"), timeout=20, alive=d.dead)
    assert d.metric("logwatch_degraded", target="p1") == 0.0
    append(log, degrade)
    fired = check_firing(rx, am, d)
    assert d.metric("logwatch_degraded", target="p1") == 1.0    # LogwatchServerDegraded
    check_still_open(rx, am, d)
    p1.reload()                                             # a SIGHUP: not paged again
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    d.start()                                               # a restart: not paged again
    d.wait_reading("p1")
    am.stop()
    am.start()                          # re-sent by the restarted daemon
    wait_for(lambda: am_active(am, "LogwatchDegraded"), 15, "re-sent after the restart",
             alive=d.dead)
    assert len(rx.requests(hook("degraded"))) == 1 and len(slack(rx, "degraded")) == 1
    append(log, serving_crash("2026-12-01 10:20:00"))
    check_crash_ends_degrade(rx, am, d, fired)


def check_crash_ends_degrade(rx: Receiver, am: Alertmanager, d: Daemon,
                             fired: dict[str, Any]) -> None:
    """The crash is paged; the degrade it ended is resolved after it, at every receiver."""
    rx.wait(hook("degraded", "resolved"), timeout=30, alive=d.dead)
    kinds = [(g.json["kind"], g.json["status"]) for g in rx.requests(hook())]
    assert kinds == [("ready", "firing"), ("degraded", "firing"), ("crashed", "firing"),
                     ("degraded", "resolved")], kinds
    res = rx.requests(hook("degraded", "resolved"))[0].json
    assert res["dedupe_key"] == fired["dedupe_key"] and res["ends_at"], res
    assert res["details"]["resolved_by"] == "crashed", res
    wait_slack_resolved(rx, d)
    texts = [g.json["text"] for g in rx.requests(lambda g: g.path == "/slack")]
    assert [t.split(":")[1].strip() for t in texts] == [
        "ready in 1m02s (slowest phase", "degraded while serving", "crashed", "resolved"], texts
    assert texts[-1].startswith(f"p1: resolved: degraded while serving: {NOTE}"), texts[-1]
    wait_for(lambda: notified(rx, "LogwatchDegraded", "resolved"), 20, "AM's resolution")
    wait_for(lambda: not am_active(am, "LogwatchDegraded"), 15, "the degrade over in AM")
    assert am_active(am, "LogwatchCrashed"), am.alerts()
    assert d.metric("logwatch_degraded", target="p1") == 0.0
    assert d.target("p1")["degraded"] is None     # the crash is what it is now (the page's)
    for sink in ("webhook-0", "slack-1", "alertmanager-2"):    # this run's: the resolution
        wait_for(lambda: d.metric("logwatch_alerts_sent_total", kind="degraded",
                                  sink=sink) == 1.0, 10, f"the resolution counted ({sink})")


def test_a_degrade_ends_with_its_startup_a_relaunch_a_clean_stop_or_the_target_removed(
        tmp_path: Path, receivers: Any, daemons: Any) -> None:  # noqa: F811
    """Three degraded servers: p1 relaunched (and ready again), p2 stopped cleanly (SIGTERM),
    p3 taken out of the config at a SIGHUP.  Each degrade is resolved, once, saying why;
    before, none was ever resolved (an event that ended by itself in Alertmanager)."""
    rx = receivers()
    logs = {n: tmp_path / f"{n}.log" for n in ("p1", "p2", "p3")}
    for log in logs.values():
        log.write_text("")
    port, state = free_port(), tmp_path / "state"
    alerts = [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}]
    targets = [target(n, log) for n, log in logs.items()]
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, targets, alerts)
    d = daemons(cfg, port).start()
    for n, log in logs.items():
        d.wait_reading(n)
        append(log, "".join(serving_then_degrade()))
    rx.wait(hook("degraded", "firing"), n=3, timeout=20, alive=d.dead)
    assert [d.metric("logwatch_degraded", target=n) for n in logs] == [1.0] * 3
    ready, _ = serving_then_degrade()
    append(logs["p1"], ready.replace("2026-12-01 10:0", "2026-12-01 11:0"))   # relaunched
    append(logs["p2"], "[2026-12-01 10:30:00] SIGTERM received. signum=None frame=None. "
                       "Draining requests and shutting down...\n")
    rx.wait(hook("ready", "firing", "p1"), n=2, timeout=20, alive=d.dead)
    reload_with(d, cfg, port, state, targets[:2], alerts, 1)
    got = rx.wait(hook("degraded", "resolved"), n=3, timeout=20, alive=d.dead)
    why = {g.json["target"]: g.json["details"]["resolved_by"] for g in got}
    assert why == {"p1": "restarted", "p2": "stopped",
                   "p3": "no longer watched: removed from the config"}, why
    rx.assert_quiet(1.0, hook("degraded"), "after the resolutions")
    assert [d.metric("logwatch_degraded", target=n) for n in ("p1", "p2")] == [0.0, 0.0]
    assert [d.target(n)["degraded"] for n in ("p1", "p2")] == [None, None]   # as the gauge
    assert len(rx.requests(hook("degraded"))) == 6


TAKEN = FIXTURES / "built" / "sglang-0523-pd-bootstrap-port-taken.log"
TAKEN_NOTE = "KV bootstrap server down (its port taken)"


def test_a_degrade_logged_before_the_ready_is_the_same_open_alert_fired_at_the_ready(
        tmp_path: Path, alertmanager: Any, daemons: Any) -> None:  # noqa: F811
    """The bootstrap port taken while the server starts, then its ready: the `ready` page and
    one open `degraded` (as for a degrade after the ready), at every receiver, never again
    across a SIGHUP, a clean restart or a kill -9 restart; resolved by the crash.  Before:
    the ready's note only, an event: nothing open in Alertmanager 5 minutes on, the webhook
    and Slack never told the degrade was over."""
    am, rx = alertmanager
    p1 = watch_p1(tmp_path, am, rx, daemons)
    d, log = p1.d, p1.log
    append(log, TAKEN.read_text())
    got = rx.wait(hook("degraded", "firing"), timeout=20, alive=d.dead)[0].json
    assert got["summary"].startswith(f"degraded while serving: {TAKEN_NOTE}"), got
    assert got["dedupe_key"] == f"p1|{got['startup']}|degraded", got
    assert got["details"]["line"].startswith("[2026-12-01 10:00:03] Server error: [Errno 98]")
    assert [g.json["kind"] for g in rx.requests(hook())] == ["ready", "degraded"]
    wait_for(lambda: notified(rx, "LogwatchDegraded", "firing"), 20, "AM's notification")
    check_still_open(rx, am, d)
    p1.reload()                                             # a SIGHUP
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    d.start()                                               # a clean restart
    d.wait_reading("p1")
    d.kill9()
    d.start()                                               # a kill -9 restart
    d.wait_reading("p1")
    rx.assert_quiet(2.0, hook("degraded"), "after the restarts")
    assert len(rx.requests(hook("degraded"))) == 1 and len(slack(rx, "degraded")) == 1
    assert len(notified(rx, "LogwatchDegraded", "firing")) >= 1
    assert d.metric("logwatch_degraded", target="p1") == 1.0
    append(log, serving_crash("2026-12-01 10:20:00"))
    res = rx.wait(hook("degraded", "resolved"), timeout=30, alive=d.dead)[0].json
    assert res["details"]["resolved_by"] == "crashed" and res["dedupe_key"] == got["dedupe_key"]
    wait_for(lambda: not am_active(am, "LogwatchDegraded"), 15, "the degrade over in AM")
    wait_slack_resolved(rx, d)
    texts = [g.json["text"] for g in rx.requests(lambda g: g.path == "/slack")]
    assert [t.split(":")[1].split()[0] for t in texts] == [
        "ready", "degraded", "crashed", "resolved"], texts
