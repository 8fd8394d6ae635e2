"""logwatch -> a REAL Alertmanager (Debian's prometheus-alertmanager, installed by .ci/run) ->
a webhook receiver of the test.  A crashing startup fires LogwatchCrashed with our labels and
annotations; the next startup becoming ready resolves it, and Alertmanager says so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from support.receivers import (
    LOOP_EVERY, OOM_LINE, Receiver, alert_state, append, crash_loop, daemons,  # noqa: F401
    down_until, free_port, hook, http_get, hung_launch, receivers, reload_with, serving_crash,
    sim_texts, split_at, target, wait_for, write_config,
)
from conftest import ROOT

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")


class Alertmanager:
    def __init__(self, tmp: Path, webhook: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        cfg = tmp / "am.yml"
        cfg.write_text(yaml.safe_dump({
            "route": {"receiver": "hook", "group_wait": "1s", "group_interval": "1s",
                      "repeat_interval": "1h"},
            "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook,
                                                                 "send_resolved": True}]}],
        }))
        self.log = tmp / "am.log"
        self.start()

    def start(self) -> None:
        tmp = self.tmp
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(ALERTMANAGER), f"--config.file={tmp / 'am.yml'}",
                 f"--storage.path={tmp / 'am'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                 "--log.level=debug"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        wait_for(lambda: http_get(self.base + "/-/ready")[0] == 200, 20, "Alertmanager ready",
                 alive=self.dead)

    def dead(self) -> str | None:
        if self.proc.poll() is not None:
            return f"alertmanager exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
        return None

    def alerts(self) -> list[dict[str, Any]]:
        code, body = http_get(self.base + "/api/v2/alerts")
        assert code == 200, body
        return json.loads(body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def alertmanager(tmp_path: Path, receivers) -> Iterator[tuple[Alertmanager, Receiver]]:
    assert ALERTMANAGER.exists(), "prometheus-alertmanager is not installed (.ci/run installs it)"
    rx = receivers()
    am = Alertmanager(tmp_path, rx.url("/am"))
    yield am, rx
    am.stop()


def simulate(log: Path, *extra: str) -> None:
    """The simulator, as a user would run it, appending to `log` (compressed time)."""
    subprocess.run([sys.executable, "-m", "logwatch.app.simulate", str(log), "--speed", "0.03",
                    "--serve-lines", "3", *extra], cwd=ROOT, check=True, timeout=30,
                   stdin=subprocess.DEVNULL)


def notified(rx: Receiver, alertname: str, status: str) -> list[dict[str, Any]]:
    """Alerts in Alertmanager's notifications with this name and status."""
    out = []
    for g in rx.requests(lambda g: g.path == "/am"):
        for a in g.json.get("alerts", []):
            if a["labels"].get("alertname") == alertname and a["status"] == status:
                out.append(a)
    return out


def test_crash_fires_and_ready_resolves_through_a_real_alertmanager(tmp_path, alertmanager, daemons):
    am, rx = alertmanager
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("glm5-node1", log, labels={"model": "GLM-5-NVFP4"})],
                       [{"type": "alertmanager", "url": am.base, "on": ["crashed", "ready"]}])
    d = daemons(cfg, port).start()

    simulate(log, "--crash", "oom")
    firing = wait_for(lambda: notified(rx, "LogwatchCrashed", "firing"), 30,
                      "Alertmanager's firing notification", alive=d.dead)
    a = firing[0]
    labels = a["labels"]
    assert labels["alertname"] == "LogwatchCrashed"
    assert labels["target"] == "glm5-node1"
    assert labels["engine"] == "sglang"
    assert labels["kind"] == "crashed"
    assert labels["reason"] == "cuda_oom"
    assert labels["model"] == "GLM-5-NVFP4"
    assert "cuda_oom" in a["annotations"]["summary"], a["annotations"]
    assert OOM_LINE in a["annotations"].get("root_cause", ""), a["annotations"]
    assert a["generatorURL"].startswith(f"http://127.0.0.1:{port}/"), a
    assert a["startsAt"]
    note = next(g.json for g in rx.requests(lambda g: g.path == "/am"))
    assert note["receiver"] == "hook" and note["version"] == "4"

    # Alertmanager's own API lists it, active
    listed = [x for x in am.alerts() if x["labels"].get("alertname") == "LogwatchCrashed"]
    assert len(listed) == 1, am.alerts()
    assert listed[0]["status"]["state"] == "active"
    assert listed[0]["labels"]["target"] == "glm5-node1"
    assert listed[0]["labels"]["reason"] == "cuda_oom"
    assert "cuda_oom" in listed[0]["annotations"]["summary"]
    assert listed[0]["endsAt"] > listed[0]["startsAt"], "open until resolved"

    # a new startup of the same server becomes ready: the crash is resolved
    simulate(log)
    d.wait_target("glm5-node1", lambda t: t["phase"] == "ready", "ready")
    resolved = wait_for(lambda: notified(rx, "LogwatchCrashed", "resolved"), 30,
                        "Alertmanager's resolved notification", alive=d.dead)
    r = resolved[0]
    assert {k: r["labels"][k] for k in ("alertname", "target", "kind", "reason")} == \
        {"alertname": "LogwatchCrashed", "target": "glm5-node1", "kind": "crashed",
         "reason": "cuda_oom"}
    assert r["startsAt"] == a["startsAt"], "the same alert was resolved"
    wait_for(lambda: not [x for x in am.alerts() if x["labels"].get("alertname") == "LogwatchCrashed"],
             15, "the crash to leave Alertmanager's active alerts")
    # the ready alert went to Alertmanager too (the sink asked for it)
    wait_for(lambda: notified(rx, "LogwatchReady", "firing"), 15, "the ready notification")
    assert len({json.dumps(x["labels"], sort_keys=True)
                for x in notified(rx, "LogwatchCrashed", "firing")}) == 1


def test_a_restarted_alertmanager_has_the_open_crash_back(tmp_path, alertmanager, daemons):
    """Alertmanager keeps alerts in memory and expects clients to send them again: after a
    restart the open crash was gone for good (logwatch sent it once, endsAt 24 h ahead)."""
    am, rx = alertmanager
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("n1", log)],
                       [{"type": "alertmanager", "url": am.base, "on": ["crashed"],
                         "resend": "1s"}])
    d = daemons(cfg, port).start()
    simulate(log, "--crash", "oom")

    def open_crash() -> list[dict[str, Any]]:
        return [x for x in am.alerts() if x["labels"].get("alertname") == "LogwatchCrashed"
                and x["status"]["state"] == "active"]
    wait_for(open_crash, 30, "the crash open in Alertmanager", alive=d.dead)
    am.stop()
    am.start()                      # the same port and storage: its alerts are gone
    back = wait_for(open_crash, 15, "the crash open again after the restart", alive=d.dead)
    assert back[0]["labels"]["target"] == "n1" and back[0]["labels"]["reason"] == "cuda_oom"
    assert back[0]["endsAt"] > back[0]["startsAt"]


def test_a_crash_given_up_while_alertmanager_was_down_reaches_it_when_back(
        tmp_path, alertmanager, daemons):
    """Alertmanager down past the sink's max_age while a server crashes: the delivery is
    given up, but the crash stays open, so the next re-send brings it to Alertmanager once
    it is back.  Before, a given-up firing left the open alert without its sink: the crash
    was never in Alertmanager (an outage over the default max_age, 1 h, lost it for good)."""
    am, rx = alertmanager
    am.stop()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [target("n1", log)],
                       [{"type": "alertmanager", "url": am.base, "on": ["crashed"],
                         "max_age": "2s", "resend": "1s"}])
    d = daemons(cfg, port).start()
    simulate(log, "--crash", "oom")
    wait_for(lambda: "alert not delivered: giving up" in d.stderr(), 30,
             "the delivery given up while Alertmanager is down", alive=d.dead)
    am.start()
    back = wait_for(lambda: [x for x in am.alerts()
                             if x["labels"].get("alertname") == "LogwatchCrashed"], 15,
                    "the crash in Alertmanager once it is back", alive=d.dead)
    assert back[0]["labels"]["target"] == "n1"


def test_alerts_test_reaches_alertmanager_marked_and_ends_by_itself(tmp_path, alertmanager):
    """`logwatch alerts test` through a real Alertmanager: the sample is notified (the route
    works), labelled `test="true"` (a route or silence can tell it from a real crash), and
    ends within TEST_ENDS_AFTER.  Before: active in Alertmanager for 24 h with a real
    crash's labels, never resolved (helper adv25 M8)."""
    from datetime import datetime
    from logwatch.app.alerttest import TEST_ENDS_AFTER
    am, rx = alertmanager
    log = tmp_path / "server.log"
    log.write_text("")
    cfg = write_config(tmp_path / "logwatch.yaml", free_port(), tmp_path / "state",
                       [target("t1", log)], [{"type": "alertmanager", "url": am.base}])
    p = subprocess.run([sys.executable, "-m", "logwatch", "alerts", "test", "-c", str(cfg)],
                       cwd=ROOT, capture_output=True, text=True, timeout=40,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    fired = wait_for(lambda: notified(rx, "LogwatchCrashed", "firing"), 20,
                     "the test crash notified by Alertmanager", alive=am.dead)
    assert fired[0]["labels"]["test"] == "true"
    (active,) = am.alerts()
    ends = datetime.fromisoformat(active["endsAt"].replace("Z", "+00:00")).timestamp()
    assert ends - time.time() <= TEST_ENDS_AFTER + 5, active["endsAt"]


def test_a_ready_event_ends_by_itself_and_is_not_active_beside_a_later_crash(
        tmp_path, alertmanager, daemons):
    """An alertmanager sink without `on:` takes `ready` (the default kinds), which nothing
    resolves.  Before, LogwatchReady was sent with endsAt a day ahead: a server that
    crashed an hour after it served was `LogwatchReady` and `LogwatchCrashed` at once in
    Alertmanager (its API, inhibitions, dashboards) until the next day.  Now an event ends
    EVENT_TTL after it is sent; the crash stays open until resolved."""
    from datetime import datetime
    from logwatch.sinks.alerts.receivers import EVENT_TTL, FIRING_TTL
    am, rx = alertmanager
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [target("n1", log)],
                       [{"type": "alertmanager", "url": am.base}])
    d = daemons(cfg, port).start()
    simulate(log)
    wait_for(lambda: notified(rx, "LogwatchReady", "firing"), 30, "the ready notification",
             alive=d.dead)
    append(log, serving_crash())
    wait_for(lambda: notified(rx, "LogwatchCrashed", "firing"), 30, "the crash notification",
             alive=d.dead)

    def ends_in(name: str) -> float:
        (a,) = [x for x in am.alerts() if x["labels"]["alertname"] == name]
        return datetime.fromisoformat(a["endsAt"].replace("Z", "+00:00")).timestamp() - time.time()
    assert ends_in("LogwatchReady") <= EVENT_TTL + 5, "an event ends by itself"
    assert ends_in("LogwatchCrashed") > FIRING_TTL - 60, "the crash stays open"


def test_a_restart_loop_is_one_alert_per_reason_in_alertmanager_and_at_a_webhook(
        tmp_path, alertmanager, receivers, daemons):
    """A server in a restart loop: 40 OOM crashes, then one of an NCCL error, then it
    comes up.  Before: 41 pages at the webhook, 41 open alerts (re-sent to Alertmanager
    one by one at every `resend`, all one alert there), 41 resolutions.  Now: the webhook
    is paged for the first crash and for the new reason; Alertmanager has the loop's
    OOM alert, its summary counting the crashes (re-sent); the ready resolves both."""
    am, am_rx = alertmanager
    hook_rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target("n1", log)],
                       [{"type": "alertmanager", "url": am.base, "on": ["crashed"],
                         "resend": "1s"},
                        {"type": "webhook", "url": hook_rx.url("/hook"), "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    d.wait_reading("n1")
    append(log, crash_loop(40))

    def crashed() -> list[dict[str, Any]]:
        return [x for x in am.alerts() if x["labels"].get("alertname") == "LogwatchCrashed"
                and x["status"]["state"] == "active"]
    wait_for(lambda: [x for x in crashed() if "40 crashes of it since the last ready"
                      in x["annotations"]["summary"]], 60,
             "the loop's count in Alertmanager", alive=d.dead)
    assert len(alert_state(state)["open"]) == 1
    append(log, crash_loop(1, nccl=(40,), first=40))
    hook_rx.wait(hook("crashed", "firing"), n=2, timeout=30, alive=d.dead, what="2 pages")
    wait_for(lambda: len(crashed()) == 2, 15, "the NCCL crash in Alertmanager", alive=d.dead)
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 41 * 3600, seed=99, serve_lines=0)))
    wait_for(lambda: not crashed(), 30, "the loop resolved in Alertmanager", alive=d.dead)
    done = hook_rx.wait(hook("crashed", "resolved"), n=2, timeout=30, alive=d.dead,
                        what="both resolved at the webhook")
    assert sorted(g.json["details"].get("crashes", 1) for g in done) == [1, 40]
    pages = hook_rx.requests(hook("crashed", "firing"))
    assert [g.json["details"]["reason"] for g in pages] == ["cuda_oom", "nccl_error"]
    # Alertmanager notifies the whole group at each change, so an alert shows up in more than
    # one notification as timing allows: count the distinct alerts it paged, not the entries.
    paged = {json.dumps(a["labels"], sort_keys=True)
             for a in notified(am_rx, "LogwatchCrashed", "firing")}
    assert len(paged) <= 2, am_rx.brief()


def test_alertmanager_added_mid_loop_at_a_rename_gets_the_loops_alert_and_its_end(
        tmp_path, alertmanager, receivers, daemons):
    """A loop paged at a webhook; a SIGHUP renames the target (t1 -> t1b, a new label) and
    adds Alertmanager.  The next crash pages Alertmanager the open alert, which the ready
    resolves.  Before: the page carried the new name and labels, the re-sends and the
    resolution the open alert's: two alerts in Alertmanager, the page's active for 24 h
    after the server was ready again."""
    am, hook_rx = alertmanager[0], receivers()
    webhook = {"type": "webhook", "url": hook_rx.url("/hook"), "on": ["crashed"]}
    (log, port, state), cfg = [tmp_path / "server.log", free_port(), tmp_path / "state"], \
        tmp_path / "logwatch.yaml"
    log.write_text("")
    d = daemons(write_config(cfg, port, state, [target("t1", log)], [webhook]), port).start()
    d.wait_reading("t1")
    append(log, crash_loop(2))
    hook_rx.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, what="the first crash")
    write_config(cfg, port, state, [target("t1b", log, labels={"team": "ml"})],
                 [webhook, {"type": "alertmanager", "url": am.base, "on": ["crashed"],
                            "resend": "1s"}])
    d.signal(signal.SIGHUP)
    d.wait_target("t1b", lambda t: t, "the target renamed")
    append(log, crash_loop(1, first=2))
    wait_for(lambda: [x for x in am.alerts() if "3 crashes" in x["annotations"]["summary"]],
             30, "the loop in Alertmanager", alive=d.dead)
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 3 * 3600, seed=99, serve_lines=0)))
    hook_rx.wait(hook("crashed", "resolved"), timeout=30, alive=d.dead, what="the ready")

    def active() -> list[dict[str, Any]]:
        return [(x["labels"]["target"], x["labels"].get("team")) for x in am.alerts()
                if x["labels"].get("alertname") == "LogwatchCrashed"
                and x["status"]["state"] == "active"]
    try:
        wait_for(lambda: not active(), 15, "no crash active in Alertmanager after the ready",
                 alive=d.dead)
    except AssertionError as e:
        raise AssertionError(f"{e}: {active()}") from None


def test_a_restart_loop_whose_launches_stall_is_one_stall_and_one_crash_in_alertmanager(
        tmp_path, alertmanager, daemons):
    """3 launches of a restart loop each hang past `stall_after` (2 s), then die of an
    OOM.  Alertmanager gets the first stall (resolved by its crash) and the loop's crash,
    whose re-sends say that its relaunch stalled; the relaunches' stalls are no alert of
    their own.  Before: LogwatchStalled fired and resolved again at every launch."""
    am, am_rx = alertmanager
    log, port, state = tmp_path / "server.log", free_port(), tmp_path / "state"
    log.write_text("")
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("n1", log, stall_after="2s")],
                       [{"type": "alertmanager", "url": am.base, "on": ["crashed", "stalled"],
                         "resend": "1s"}])
    d = daemons(cfg, port).start()
    d.wait_reading("n1")

    def active(name: str) -> list[dict[str, Any]]:
        return [x for x in am.alerts() if x["labels"].get("alertname") == name
                and x["status"]["state"] == "active"]
    for i in range(3):
        head, rest = hung_launch(i)
        append(log, head)
        d.wait_target("n1", lambda t: t.get("stalled"), f"launch {i + 1} stalled", timeout=30)
        if i == 0:
            wait_for(lambda: active("LogwatchStalled"), 15, "the first stall", alive=d.dead)
        else:
            wait_for(lambda: [x for x in active("LogwatchCrashed") if "its relaunch since "
                              "stalled in cuda_graph" in x["annotations"]["summary"]], 15,
                     f"the loop's alert saying stall {i + 1}", alive=d.dead)
            assert not active("LogwatchStalled"), active("LogwatchStalled")
        append(log, rest)
        wait_for(lambda: sum(x.get("crashes", 1) for x in alert_state(state)["open"].values()
                             if x["kind"] == "crashed") == i + 1, 30, f"crash {i + 1}",
                 alive=d.dead)
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 5 * 3600, seed=99, serve_lines=0)))
    wait_for(lambda: notified(am_rx, "LogwatchCrashed", "resolved"), 30,
             "the loop's resolution notified", alive=d.dead)
    stalls = {a["startsAt"] for a in notified(am_rx, "LogwatchStalled", "firing")}
    assert len(stalls) <= 1, f"LogwatchStalled fired {len(stalls)} times: {am_rx.brief()}"
    assert len(active("LogwatchCrashed")) == len(active("LogwatchStalled")) == 0


def test_sinks_removed_while_a_crash_page_is_queued_and_added_again(
        tmp_path, alertmanager, receivers, daemons):
    """Alertmanager down and Slack answering 503 when a server crashes; a SIGHUP takes both
    out of the config (their queued pages dropped), a later one puts them back, up.
    Alertmanager has the open crash back at its next re-send (the re-sends are its
    retries), and the ready resolves it there; Slack, which never had the page, gets no
    resolution.  Before: Slack's first message was `resolved:` of a crash it never had."""
    am, _ = alertmanager
    am.stop()
    up = threading.Event()
    slack, pager = receivers(down_until(up)), receivers()
    log, port, state = tmp_path / "server.log", free_port(), tmp_path / "state"
    log.write_text("")
    sinks = [{"type": "webhook", "url": pager.url("/pager"), "on": ["crashed"]},
             {"type": "alertmanager", "url": am.base, "on": ["crashed"], "resend": "1s"},
             {"type": "slack", "url": slack.url("/slack"), "on": ["crashed"]}]
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target("n1", log)], sinks)
    d = daemons(cfg, port).start()
    d.wait_reading("n1")
    append(log, crash_loop(1))
    wait_for(lambda: {e["sink"].split("-")[0] for e in alert_state(state).get("outbox", [])
                      if e["attempts"]} == {"alertmanager", "slack"}, 15,
             "Alertmanager's and Slack's pages refused", alive=d.dead)
    reload_with(d, cfg, port, state, [target("n1", log)], sinks[:1], 1)   # both out
    am.start()
    up.set()
    reload_with(d, cfg, port, state, [target("n1", log)], sinks, 2)       # and back, up

    def crashed() -> list[dict[str, Any]]:
        return [x for x in am.alerts() if x["labels"].get("alertname") == "LogwatchCrashed"
                and x["status"]["state"] == "active"]
    wait_for(crashed, 15, "the open crash re-sent to Alertmanager", alive=d.dead)
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 3 * 3600, seed=99, serve_lines=0)))
    pager.wait(hook("crashed", "resolved"), timeout=30, alive=d.dead, what="the ready")
    wait_for(lambda: not crashed(), 15, "the crash resolved in Alertmanager", alive=d.dead)
    wait_for(lambda: not alert_state(state)["outbox"], 10, "every delivery done", alive=d.dead)
    assert not slack.requests(lambda g: g.status == 200), slack.brief()


def test_a_loops_relaunch_that_stalled_and_went_on_is_not_said_stalled_in_alertmanager(
        tmp_path, alertmanager, daemons):
    """A restart loop's relaunch hangs mid shard load past `stall_after` (2 s), counted in
    the loop's open crash alert (its re-sends say `its relaunch since stalled in
    loading_shards`), then loads on into its CUDA graph capture.  The re-sends stop saying
    it stalled (`details.stalls` still counts it).  Before: they said `since stalled in
    loading_shards ...ago` until the loop's next crash or ready, while the relaunch ran."""
    am, _ = alertmanager
    log, port, state = tmp_path / "server.log", free_port(), tmp_path / "state"
    log.write_text("")
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("n1", log, stall_after={"loading_shards": "2s"})],
                       [{"type": "alertmanager", "url": am.base, "on": ["crashed", "stalled"],
                         "resend": "1s"}])
    d = daemons(cfg, port).start()
    d.wait_reading("n1")

    def summary() -> str:
        return " | ".join(x["annotations"]["summary"] for x in am.alerts()
                          if x["labels"].get("alertname") == "LogwatchCrashed"
                          and x["status"]["state"] == "active")
    append(log, crash_loop(1))
    wait_for(lambda: "cuda_oom" in summary(), 30, "the loop's crash", alive=d.dead)
    texts = sim_texts(crash="oom", start=1_767_261_600.0 + LOOP_EVERY, seed=1)
    hang, on = split_at(texts, "Completed | 6/24"), split_at(texts, "Capture cuda graph begin")
    append(log, "".join(texts[:hang + 1]))
    wait_for(lambda: "since stalled in loading_shards" in summary(), 30,
             "the relaunch's stall said in the loop's alert", alive=d.dead)
    append(log, "".join(texts[hang + 1:on + 1]))
    d.wait_target("n1", lambda t: t["phase"] == "cuda_graph" and not t.get("stalled"),
                  "the relaunch loading on", timeout=30)
    wait_for(lambda: "stalled" not in summary(), 15,
             "the re-sends to stop saying the relaunch stalled", alive=d.dead)
    assert "cuda_oom" in summary()
    assert [x.get("stalls") for x in alert_state(state)["open"].values()] == [1]
