"""Alert delivery under faults: the rate limit never eats a crash, a receiver that answers too
late gets a bounded number of copies (same Idempotency-Key), Retry-After never outlives
`max_age`.  A real daemon and real HTTP receivers on loopback.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from logwatch.pipeline import EXCERPT_BEFORE

from test_clock_step import libfaketime

from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    IN_FLIGHT, Got, Receiver, alert_state, append, crash_loop, daemons, down_until, free_port,
    hook, hung_launch, outbox, receivers, reload_with, sim_texts, target, wait_for,
    write_config,
)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


def one_target(tmp_path: Path, sink: dict[str, Any]) -> tuple[Path, int, Path, Path]:
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("t1", log, labels={"model": "Qwen3-235B"})], [sink])
    return cfg, port, state, log


def folded(state: Path, n: int) -> bool:
    """The open OOM alert of the loop stands for `n` crashes (folded: not paged)."""
    return any(d.get("crashes") == n and d["details"].get("reason") == "cuda_oom"
               for d in alert_state(state).get("open", {}).values())


def test_the_rate_limit_never_drops_a_crash_and_counts_what_it_drops(tmp_path, receivers,
                                                                     daemons) -> None:
    """A restart loop: 24 OOM crashes, then one of an NCCL error, 24 restarts between them
    (more than the 20 tokens).  The first crash is paged, the 23 repeats are folded into it,
    the new reason is paged though the restarts spent the target's tokens."""
    rx = receivers()
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed", "restarted"]})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")                   # read live: at attach only the latest startup counts
    append(log, crash_loop(25, nccl=(24,)))
    rx.wait(hook("crashed", "firing"), n=2, timeout=90, alive=d.dead,
            what="the first crash's page and the new reason's")
    wait_for(lambda: d.metric("logwatch_alerts_dropped_total", kind="restarted"), 10,
             "dropped restarted alerts counted", alive=d.dead)
    rx.assert_quiet(1.0, what="after the last crash")
    restarted = len(rx.requests(hook("restarted", "firing")))
    assert 20 <= restarted < 24, "the limit held back restarted alerts (20 tokens, then 1/30s)"
    assert d.metric("logwatch_alerts_dropped_total", kind="restarted") == float(24 - restarted)
    assert d.metric("logwatch_alerts_dropped_total", kind="crashed") == 0.0
    crashes = rx.requests(hook("crashed", "firing"))
    assert [g.json["details"]["reason"] for g in crashes] == ["cuda_oom", "nccl_error"]
    assert "(crash 25 since the last ready" in crashes[1].json["summary"], crashes[1].json
    assert folded(state, 24)
    for got, line in zip(crashes, ("CUDA out of memory", "NCCL error")):
        excerpt = got.json["excerpt"]  # its traceback, not the next launch's lines read with it
        assert any(line in x for x in excerpt)
        assert not any("server_args=" in x for x in excerpt[EXCERPT_BEFORE:]), excerpt


def test_a_receiver_that_answers_too_late_gets_a_bounded_number_of_copies(tmp_path, receivers,
                                                                           daemons) -> None:
    def late(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.5)                   # processed, but answered after the sink's timeout
        return 200, {}, b"ok"

    rx = receivers(late)
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"], "timeout": "0.3s"})
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    wait_for(lambda: "alert delivery unknown" in d.stderr(), 60, "the daemon gives up, saying "
             "the delivery is unknown", alive=d.dead)
    wait_for(lambda: not outbox(state), 10, "the outbox to empty", alive=d.dead)
    got = rx.requests(hook("crashed", "firing"))
    assert len(got) == 3, f"1 + 2 re-sends, not max_attempts (8): {rx.brief()}"
    assert len({g.header("Idempotency-Key") for g in got}) == 1


def test_retry_after_is_capped_by_max_age(tmp_path, receivers, daemons) -> None:
    first = threading.Event()

    def busy(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        if not first.is_set():
            first.set()
            return 429, {"Retry-After": "7200"}, b"slow down"
        return 200, {}, b"ok"

    rx = receivers(busy)
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"], "max_age": "3s"})
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    got = rx.wait(hook("crashed", "firing"), n=2, timeout=20, alive=d.dead, answered=True,
                  what="the retry, at max_age rather than after 2 hours")
    assert got[1].status == 200 and got[1].at - got[0].at < 4.0, rx.brief()


def test_a_resolution_never_overtakes_its_firing(tmp_path, receivers, daemons) -> None:
    """The firing refused once waits out its backoff; the relaunch's ready resolves it
    meanwhile.  Before, the resolution (due at once) went first and the firing after it:
    the receiver, and Alertmanager, kept a crash open for a server that served."""
    refused = threading.Event()

    def once_down(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        if got.json["status"] == "firing" and not refused.is_set():
            refused.set()
            return 503, {}, b"down"
        return 200, {}, b"ok"

    rx = receivers(once_down)
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"]})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, "".join(sim_texts(crash="oom")))
    rx.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, answered=True,
            what="the crash's first, refused, delivery")
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 3600, seed=2)))   # ready: resolves
    got = rx.wait(hook("crashed"), n=3, timeout=30, alive=d.dead, answered=True,
                  what="the firing again, and its resolution")
    assert [(g.json["status"], g.status) for g in got] == \
        [("firing", 503), ("firing", 200), ("resolved", 200)], rx.brief()


def test_a_delivery_given_up_is_counted_as_dropped(tmp_path, receivers, daemons) -> None:
    """A receiver down past `max_age`: the page is lost, and now a metric says so (before,
    only `logwatch_alert_failures_total` moved, which a flaky receiver moves too)."""
    rx = receivers(lambda got, rx: (503, {}, b"down"))
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"], "max_age": "3s"})
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    wait_for(lambda: d.metric("logwatch_alerts_dropped_total", kind="crashed"), 30,
             "the crash alert given up and counted", alive=d.dead)
    assert "alert not delivered: giving up" in d.stderr()
    assert len(rx.requests(hook("crashed", "firing"))) >= 2, rx.brief()


def test_pages_queued_across_a_restart_arrive_in_the_order_decided(tmp_path, receivers,
                                                                  daemons) -> None:
    """The receiver is down (503).  Startup 1's crash is refused 4 times (its next try 8-16 s
    away); the daemon is restarted; startup 2 crashes, refused once (then it waits behind
    startup 1's); the receiver comes back.  The two pages arrive in the order they were
    decided.  Before: the loaded page kept the old process's backoff and the new one went
    first (its backoff the shortest), startup 2's crash before startup 1's."""
    up = threading.Event()
    rx = receivers(lambda got, rx: (200, {}, b"ok") if up.is_set() else (503, {}, b"down"))
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"]})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, "".join(sim_texts(crash="oom")))
    first = rx.wait(hook("crashed", "firing"), n=4, timeout=30, alive=d.dead, answered=True,
                    what="startup 1's crash refused 4 times")[0].json["startup"]
    assert d.stop() == 0
    assert [e["attempts"] for e in outbox(state)] == [4], outbox(state)
    d.start()
    append(log, crash_loop(1, nccl=(1,), first=1))   # another reason: a repeat is not paged
    rx.wait(lambda g: hook("crashed", "firing")(g) and g.json["startup"] != first, timeout=30,
            alive=d.dead, answered=True, what="startup 2's crash refused")
    up.set()
    got = rx.wait(lambda g: hook("crashed", "firing")(g) and g.status == 200, n=2, timeout=40,
                  alive=d.dead, what="both crashes delivered")
    assert got[0].json["startup"] == first, rx.brief()
    assert len({g.json["startup"] for g in got}) == 2, rx.brief()


@pytest.mark.parametrize("kind", ["webhook", "slack"])
def test_a_sigterm_during_a_delivery_lets_it_finish_and_it_is_not_sent_again(
        tmp_path, receivers, daemons, kind) -> None:
    """`systemctl restart` in the second a page is on its way (Slack's API answers in 0.5-2 s):
    the POST is let finish, so the restarted daemon does not send it again (Slack drops no
    copy).  Before, the stop cut the POST the receiver had already processed: the page
    posted twice (a relaunch's `ready` re-sent after a restart 1 s after a crash: 4 of 4)."""
    def slow(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.5)                   # the fault: a receiver that takes 1.5 s to answer
        return 200, {}, b"ok"

    rx = receivers(slow)
    cfg, port, state, log = one_target(tmp_path, {"type": kind, "url": rx.url("/hook"),
                                                  "on": ["crashed"]})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, "".join(sim_texts(crash="oom")))
    rx.wait(lambda g: True, 1, timeout=20, alive=d.dead, what="the crash page's POST")
    d.signal(15)                          # while the receiver processes it
    assert d.wait_exit(10) == 0
    wait_for(lambda: [g.status for g in rx.requests()] == [200], 5,
             "the POST answered 200, not cut by the stop")
    assert not outbox(state), "answered 200 during the stop: delivered, not left to send"
    d.start()
    d.wait_reading("t1")
    rx.assert_quiet(2.0, what="the delivered page sent again after the restart")
    assert len(rx.requests()) == 1


def test_a_receiver_that_never_accepts_the_connection_is_an_outage_not_a_lost_page(
        tmp_path, receivers, daemons) -> None:
    """A receiver whose accept queue is full (its process wedged, a relay overwhelmed; a
    host behind a firewall that drops is the same): the daemon's connect never completes,
    so the request is never written.  Before, that timeout read as "delivery unknown: it
    may have it" and the crash page was given up after 3 tries (39 s with the default 10 s
    timeout), though no copy existed.  Now it is an outage, retried until the receiver
    takes it."""
    import socket

    wedged = socket.socket()
    wedged.bind(("127.0.0.1", 0))
    wedged.listen(0)                       # never accepts: its queue fills at once
    port_rx = wedged.getsockname()[1]
    fillers = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port_rx))
        fillers.append(c)
    probe = socket.socket()
    probe.settimeout(0.3)
    with pytest.raises(OSError):           # the fault as the daemon meets it: no connection
        probe.connect(("127.0.0.1", port_rx))
    probe.close()

    cfg, port, state, log = one_target(tmp_path, {
        "type": "webhook", "url": f"http://127.0.0.1:{port_rx}/hook", "on": ["crashed"],
        "timeout": "0.5s", "max_age": "60s"})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, "".join(sim_texts(crash="oom")))
    wait_for(lambda: [e["attempts"] for e in outbox(state)] == [3]
             or "alert delivery unknown" in d.stderr(), 40,
             "3 attempts that could not connect", alive=d.dead)
    assert "alert delivery unknown" not in d.stderr(), "never connected: nothing was sent"
    assert "not connected within 0.5s" in d.stderr()
    for c in fillers + [wedged]:           # the receiver comes back on its port
        c.close()
    rx = receivers(port=port_rx)
    rx.wait(hook("crashed", "firing"), timeout=40, alive=d.dead, answered=True,
            what="the crash page, once the receiver accepts")
    assert d.metric("logwatch_alerts_dropped_total", kind="crashed") in (None, 0.0)


def test_a_restart_loop_ended_by_a_ready_is_one_slack_message_not_one_per_crash(
        tmp_path, receivers, daemons) -> None:
    """A server crashes 6 times in a restart loop (the 4th of an NCCL error), then comes
    up.  The first crash and the new reason are paged, the other 4 folded into the first;
    the ready resolves both: a webhook (automation) gets each open alert's resolution, the
    OOM's saying it stood for 5 crashes, Slack (people) one message, saying that the loop
    of 6 is over.  Before: 6 pages, and 6 `resolved:` messages in the channel at once (25
    after a loop of 25, 1 a second under Slack's rate limit)."""
    slack, hook_rx = receivers(), receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [target("t1", log)],
                       [{"type": "slack", "url": slack.url("/slack"), "on": ["crashed"]},
                        {"type": "webhook", "url": hook_rx.url("/hook"), "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, crash_loop(6, nccl=(3,)))
    hook_rx.wait(hook("crashed", "firing"), n=2, timeout=60, alive=d.dead, what="2 pages")
    wait_for(lambda: folded(tmp_path / "state", 5), 30, "the 6th crash folded", alive=d.dead)
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 6 * 3600, seed=99, serve_lines=0)))
    done = hook_rx.wait(hook("crashed", "resolved"), n=2, timeout=30, alive=d.dead,
                        what="each open crash alert resolved for the webhook")
    assert sorted(g.json["details"].get("crashes", 1) for g in done) == [1, 5], hook_rx.brief()

    def resolved(g: Got) -> bool:
        return g.json["text"].startswith("t1: resolved: ")
    slack.wait(resolved, timeout=10, alive=d.dead, what="Slack's resolution")
    wait_for(lambda: not outbox(tmp_path / "state"), 10, "every delivery done", alive=d.dead)
    msgs = slack.requests(resolved)
    assert len(msgs) == 1, f"{len(msgs)} resolution messages: {slack.brief(msgs)}"
    assert "the 6 crashes since the last ready are over" in msgs[0].json["text"], msgs[0].json
    assert len(slack.requests(lambda g: not resolved(g))) == 2, "the first crash, the new reason"
    assert len(hook_rx.requests(hook("crashed", "firing"))) == 2


def test_a_slow_receiver_gets_a_fleets_crash_pages_side_by_side(tmp_path, receivers,
                                                                daemons) -> None:
    """8 servers of one node crash at once (a power cut); the webhook takes 1.5 s to answer
    each page.  Pages of different servers go side by side (4 at once), each server's in
    order: the last page is in ~3 s.  Before, one POST at a time per sink: 12 s for 8, 4
    minutes for 50 servers' pages behind a receiver answering in 5 s."""
    def slow(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.5)
        return 200, {}, b"ok"

    rx = receivers(slow)
    logs = [tmp_path / f"node{i}.log" for i in range(8)]
    for p in logs:
        p.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target(f"node{i}", p) for i, p in enumerate(logs)],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    for i in range(8):
        d.wait_reading(f"node{i}")
    for i, p in enumerate(logs):
        append(p, "".join(sim_texts(crash="oom", seed=i)))
    got = rx.wait(hook("crashed", "firing"), n=8, timeout=60, alive=d.dead, answered=True,
                  what="the 8 crash pages")
    assert len({g.json["target"] for g in got}) == 8, rx.brief()
    at_once = max(sum(1 for h in got if h.at <= g.at < h.answered_at) for g in got)
    assert 2 <= at_once <= 4, f"{at_once} POSTs at once"
    span = max(g.answered_at for g in got) - min(g.at for g in got)
    assert span < 8 * 1.5 * 0.6, f"the last page {span:.1f}s after the first"


def test_a_restart_loop_ended_by_removing_its_target_is_one_slack_message(
        tmp_path, receivers, daemons) -> None:
    """A server in a restart loop (4 crashes: one page, 3 folded into it) is taken out of
    the config at a SIGHUP (the operator gave up on it): the loop is resolved, `no longer
    watched`, one message for the loop in Slack and at the webhook, as after a ready.
    Before: one `resolved:` message per crash of the loop (25 after a loop of 25)."""
    slack, hook_rx = receivers(), receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    other = tmp_path / "other.log"
    other.write_text("")
    port = free_port()
    sinks = [{"type": "slack", "url": slack.url("/slack"), "on": ["crashed"]},
             {"type": "webhook", "url": hook_rx.url("/hook"), "on": ["crashed"]}]
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", log)], sinks)
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, crash_loop(4))
    hook_rx.wait(hook("crashed", "firing"), timeout=60, alive=d.dead, what="the first crash")
    wait_for(lambda: folded(tmp_path / "state", 4), 30, "4 crashes folded", alive=d.dead)
    write_config(cfg, port, tmp_path / "state", [target("t2", other)], sinks)
    d.signal(signal.SIGHUP)
    [gone] = hook_rx.wait(hook("crashed", "resolved"), timeout=30, alive=d.dead,
                          what="the loop resolved for the webhook")
    assert gone.json["details"]["crashes"] == 4 and \
        "this resolves the 4 crashes since the last ready" in gone.json["summary"], gone.json

    def resolved(g: Got) -> bool:
        return g.json["text"].startswith("t1: resolved: ")
    slack.wait(resolved, timeout=10, alive=d.dead, what="Slack's resolution")
    wait_for(lambda: not outbox(tmp_path / "state"), 15, "every delivery done", alive=d.dead)
    msgs = slack.requests(resolved)
    assert len(msgs) == 1, f"{len(msgs)} resolution messages: {slack.brief(msgs)}"
    text = msgs[0].json["text"]
    assert "no longer watched" in text and "this resolves the 4 crashes since the last ready" in text, text


def crash_pager(tmp_path: Path, receivers: Any, daemons: Any) -> tuple[Receiver, Any, Path, Path]:
    """A daemon reading target t1's log (returned, with its state dir), paging a webhook
    receiver (returned) its crashes."""
    rx = receivers()
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"]})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    return rx, d, state, log


def test_a_relaunch_with_other_flags_that_crashes_again_is_paged(tmp_path, receivers,
                                                                  daemons) -> None:
    """An operator answers a loop of OOM crashes by relaunching with a lower
    `--mem-fraction-static`, and it dies of an OOM again: news, paged (before: folded into
    the loop's open alert, no page at any receiver).  Its own repeats are folded into it."""
    rx, d, state, log = crash_pager(tmp_path, receivers, daemons)
    append(log, crash_loop(2))
    wait_for(lambda: folded(state, 2), 30, "the loop's repeat folded", alive=d.dead)
    lower = "mem_fraction_static=0.8,"
    append(log, crash_loop(2, first=2).replace("mem_fraction_static=0.88,", lower))
    pages = rx.wait(hook("crashed", "firing"), n=2, timeout=30, alive=d.dead,
                    what="the relaunch with other flags paged")
    wait_for(lambda: sum(d.get("crashes", 1) for d in alert_state(state)["open"].values()) == 4,
             30, "its repeat folded into it", alive=d.dead)
    rx.assert_quiet(1.0, what="after its repeat")
    assert len(rx.requests(hook("crashed", "firing"))) == 2
    assert "(crash 3 since the last ready" in pages[1].json["summary"], pages[1].json


def loop_counts(state: Path) -> tuple[int, int]:
    """The crashes and the stalls the target's open crash alerts stand for."""
    docs = [d for d in alert_state(state).get("open", {}).values() if d["kind"] == "crashed"]
    return sum(d.get("crashes", 1) for d in docs), sum(d.get("stalls", 0) for d in docs)


def loop_watched(tmp_path: Path, receivers: Any, daemons: Any,
                 more: list[dict[str, Any]] | None = None, on: tuple[str, ...] = (
                     "crashed", "stalled"), env: dict[str, str] | None = None,
                 **target_kw: Any) -> tuple[Any, Path, Path, Receiver, Receiver]:
    """A daemon reading an empty log `t1` (stall_after 2 s, or `target_kw`), paging Slack
    and a webhook (`on` these kinds; and the sinks `more`): the daemon, the log, the state
    dir, Slack, the webhook (`env`: the daemon's)."""
    slack, pager = receivers(), receivers()
    log, port, state = tmp_path / "server.log", free_port(), tmp_path / "state"
    log.write_text("")
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("t1", log, **{"stall_after": "2s", **target_kw})],
                       [{"type": "slack", "url": slack.url("/slack"), "on": list(on)},
                        {"type": "webhook", "url": pager.url("/pager"), "on": list(on)},
                        *(more or [])])
    d = daemons(cfg, port, env=env).start()
    d.wait_reading("t1")
    return d, log, state, slack, pager


def test_a_restart_loop_whose_launches_stall_before_they_crash_pages_its_first_stall_only(
        tmp_path, receivers, daemons) -> None:
    """4 launches of a restart loop each hang past `stall_after` (2 s) in CUDA graph
    capture, then die of an OOM; then a launch is ready.  The first stall is paged (no
    crash yet: it may be the only sign), resolved by its crash, paged; the relaunches'
    stalls are counted in the loop's open crash alert, not paged, and its resolution says
    them.  A sink on `[stalled]` alone, which never had the crash, still gets each stall.
    Before: the pager and Slack got 9 notifications each for one broken server (4 stalls,
    4 resolutions, 1 crash)."""
    stalls = receivers()
    d, log, state, slack, pager = loop_watched(
        tmp_path, receivers, daemons,
        [{"type": "webhook", "url": stalls.url("/stalls"), "on": ["stalled"]}])
    for i in range(4):
        head, rest = hung_launch(i)
        append(log, head)
        d.wait_target("t1", lambda t: t.get("stalled"), f"launch {i + 1} stalled", timeout=30)
        # decided for every sink at once: the one on `[stalled]` alone has each
        stalls.wait(hook("stalled", "firing"), n=i + 1, alive=d.dead, what=f"stall {i + 1}")
        append(log, rest)
        wait_for(lambda: loop_counts(state)[0] == i + 1, 30, f"crash {i + 1}", alive=d.dead)
    wait_for(lambda: not outbox(state), 15, "every delivery done", alive=d.dead)
    assert [(g.json["kind"], g.json["status"]) for g in pager.requests()] == [
        ("stalled", "firing"), ("stalled", "resolved"), ("crashed", "firing")], pager.brief()
    assert len(slack.requests()) == 3, slack.brief()
    assert len(stalls.requests(hook("stalled", "resolved"))) == 4, stalls.brief()
    assert loop_counts(state) == (4, 3)
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 5 * 3600, seed=99, serve_lines=0)))
    [done] = pager.wait(hook("crashed", "resolved"), timeout=30, alive=d.dead, what="the ready")
    assert (done.json["details"]["crashes"], done.json["details"]["stalls"]) == (4, 3), done.json
    over = "the 4 crashes and 3 stalls since the last ready are over"
    assert over in slack.wait(lambda g: "resolved: crashed" in g.json["text"], alive=d.dead,
                              what="Slack's resolution")[0].json["text"]
    wait_for(lambda: not outbox(state), 15, "every delivery done", alive=d.dead)
    assert len(slack.requests()) == 4 and len(pager.requests()) == 4, slack.brief()


@pytest.mark.parametrize("again", [True, False], ids=["crash-again", "ready-next"])
def test_a_sink_removed_while_its_crash_page_is_queued_and_added_again_is_paged_at_the_next_crash(
        tmp_path, receivers, daemons, again) -> None:
    """Slack answers 503 to a loop's crash page; a SIGHUP takes Slack out of the config
    (its queued page dropped), a later one puts it back, answering now.  The loop's next
    crash pages Slack (the open alert, "crash 2 of it"), and the ready resolves it there;
    with no crash in between, Slack gets no resolution of a page it never had.  Before:
    the open alert still named Slack: not paged at the next crash, and the ready's
    resolution was the first Slack heard of the loop."""
    up = threading.Event()
    slack, pager = receivers(down_until(up)), receivers()
    log, port, state = tmp_path / "server.log", free_port(), tmp_path / "state"
    log.write_text("")
    sinks = [{"type": "slack", "url": slack.url("/slack"), "on": ["crashed"]},
             {"type": "webhook", "url": pager.url("/pager"), "on": ["crashed"]}]
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target("t1", log)], sinks)
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, crash_loop(1))
    slack.wait(lambda g: True, answered=True, status=503, alive=d.dead, what="Slack's 503")
    reload_with(d, cfg, port, state, [target("t1", log)], sinks[1:], 1)    # Slack out
    reload_with(d, cfg, port, state, [target("t1", log)], sinks, 2)        # and back
    wait_for(lambda: not outbox(state), 10, "Slack's queued page dropped", alive=d.dead)
    up.set()
    if again:
        append(log, crash_loop(1, first=1))
        [page] = slack.wait(lambda g: g.json["text"].startswith("t1: crashed"), answered=True,
                            status=200, alive=d.dead, what="the loop's next crash at Slack")
        assert "(crash 2 of it since the last ready)" in page.json["text"], page.json
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 3 * 3600, seed=99, serve_lines=0)))
    pager.wait(hook("crashed", "resolved"), timeout=30, alive=d.dead, what="the ready")
    wait_for(lambda: not outbox(state), 10, "every delivery done", alive=d.dead)
    slack.assert_quiet(IN_FLIGHT, what="after the ready")
    had = [g.json["text"].split(": ")[1] for g in slack.requests(lambda g: g.status == 200)]
    assert had == (["crashed", "resolved"] if again else []), slack.brief()


def ready_ends_loop(d: Any, log: Path, slack: Receiver, pager: Receiver,
                    words: str) -> dict[str, Any]:
    """A launch gets ready (5 h after the loop's first, by its stamps): the webhook's
    resolution of the loop's crash (its JSON) and Slack's say `words ... are over`."""
    append(log, "".join(sim_texts(start=1_767_261_600.0 + 5 * 3600, seed=99, serve_lines=0)))
    [done] = pager.wait(hook("crashed", "resolved"), timeout=30, alive=d.dead, what="the ready")
    over = f"{words} since the last ready are over"
    assert over in done.json["summary"], done.json
    assert over in slack.wait(lambda g: "resolved: crashed" in g.json["text"], alive=d.dead,
                              what="Slack's resolution")[0].json["text"]
    return done.json


def test_one_crash_and_its_relaunchs_stall_are_said_at_the_ready(tmp_path, receivers,
                                                                  daemons) -> None:
    """A loop of one crash (paged) and a relaunch that hangs past `stall_after` (counted in
    the crash's open alert), then a launch is ready: the resolution says both, in Slack and
    the webhook.  Before: `details.stalls: 1` and no word of the stall (a loop said itself
    only from 2 crashes on)."""
    d, log, state, slack, pager = loop_watched(tmp_path, receivers, daemons)
    append(log, crash_loop(1))
    pager.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, what="the crash")
    append(log, hung_launch(1)[0])
    wait_for(lambda: loop_counts(state) == (1, 1), 30, "the stall folded", alive=d.dead)
    done = ready_ends_loop(d, log, slack, pager, "the 1 crash and 1 stall")
    assert done["details"]["stalls"] == 1, done


def test_a_relaunch_that_hangs_for_good_after_the_loops_crash_is_said_once_in_chat(
        tmp_path, receivers, daemons) -> None:
    """A loop's crash (paged), then its relaunch hangs past `stall_after` (2 s) and prints
    nothing more: its stall is folded into the open crash alert; a stall budget later,
    still silent, Slack has the crash alert once more, saying the relaunch hangs; the
    webhook (one firing per key) has nothing more.  Before: Slack heard nothing after the
    crash page while the server hung."""
    d, log, state, slack, pager = loop_watched(tmp_path, receivers, daemons)
    append(log, crash_loop(1))
    pager.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, what="the crash")
    append(log, hung_launch(1)[0])
    [_, said] = slack.wait(lambda g: True, n=2, timeout=30, alive=d.dead, what="the hang said")
    assert "crashed: cuda_oom" in said.json["text"] and \
        "its relaunch since stalled in cuda_graph" in said.json["text"], said.json
    wait_for(lambda: not outbox(state), 15, "every delivery done", alive=d.dead)
    slack.assert_quiet(5.5, what="after the hang was said (a tick of the daemon's checks)")
    assert len(pager.requests()) == 1 and len(slack.requests()) == 2, pager.brief()


def test_a_relaunch_that_stalls_an_hour_after_the_loops_crash_is_the_loop(
        tmp_path, receivers, daemons) -> None:
    """A loop's crash (paged); its relaunch, 10 minutes on by the log, stalls, decided 2 h
    later by the daemon's clock (stepped: libfaketime; a big model's load before its hang):
    the stall is the loop's, timed from the relaunch's launch by the log, and folded.
    Before: timed from when it was decided, 2 h after the crash: paged as news."""
    spec = tmp_path / "faketime.spec"
    spec.write_text("+0\n")
    d, log, state, slack, pager = loop_watched(
        tmp_path, receivers, daemons, stall_after="1h",
        env={"LD_PRELOAD": libfaketime(), "FAKETIME_NO_CACHE": "1",
             "FAKETIME_TIMESTAMP_FILE": str(spec), "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    append(log, crash_loop(1))
    pager.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, what="the crash")
    append(log, hung_launch(1)[0])
    d.wait_target("t1", lambda t: t.get("phase") == "cuda_graph", "the relaunch")
    spec.write_text("+7200\n")
    wait_for(lambda: pager.requests(hook("stalled")) or any(str(e.get("event")).startswith(
        "stalled of a restart loop") for e in d.log_events()), 30, "the stall", alive=d.dead)
    pager.assert_quiet(IN_FLIGHT, what="after the stall")
    assert len(pager.requests()) == 1, pager.brief()


def test_a_restart_loop_whose_launches_are_slow_pages_its_first_slow_startup_only(
        tmp_path, receivers, daemons) -> None:
    """A ready startup (the target's usual time), then 4 launches of a restart loop each
    run past `slow_factor` x that (the daemon's clock stepped 2 h on in each: libfaketime)
    and die of an OOM; then a launch is ready.  The first `slow` is paged, resolved by its
    crash, which is paged; the relaunches' are counted in the loop's open crash alert (as
    its stalls are), and its resolution says them.  Before: 9 notifications each to the
    pager and Slack (4 slow, 4 resolutions, 1 crash), as stalls were before."""
    spec = tmp_path / "faketime.spec"
    spec.write_text("+0\n")
    d, log, state, slack, pager = loop_watched(
        tmp_path, receivers, daemons, on=("crashed", "slow"), stall_after="24h",
        env={"LD_PRELOAD": libfaketime(), "FAKETIME_NO_CACHE": "1",
             "FAKETIME_TIMESTAMP_FILE": str(spec), "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    append(log, "".join(sim_texts(start=1_767_261_600.0 - 3600, seed=98, serve_lines=0)))
    d.wait_target("t1", lambda t: t.get("phase") == "ready", "the usual startup", timeout=30)
    def decided(kind: str, folded: str) -> int:    # paged, or counted in the loop's alert
        # (by the daemon's log: under libfaketime its state file is not saved)
        return len(pager.requests(hook(kind, "firing"))) + len(
            [e for e in d.log_events() if str(e.get("event")).startswith(folded)])
    for i in range(4):
        head, rest = hung_launch(i)
        append(log, head)
        d.wait_target("t1", lambda t: t.get("phase") == "cuda_graph", f"launch {i + 1}")
        spec.write_text(f"+{7200 * (i + 1)}\n")
        wait_for(lambda: decided("slow", "slow of a restart loop") == i + 1, 30,
                 f"launch {i + 1} slow", alive=d.dead)
        append(log, rest)
        wait_for(lambda: decided("crashed", "crash folded") == i + 1, 30, f"crash {i + 1}",
                 alive=d.dead)
    pager.assert_quiet(IN_FLIGHT, what="after the loop")
    assert [(g.json["kind"], g.json["status"]) for g in pager.requests()] == [
        ("slow", "firing"), ("slow", "resolved"), ("crashed", "firing")], pager.brief()
    assert len(slack.requests()) == 3, slack.brief()
    done = ready_ends_loop(d, log, slack, pager, "the 4 crashes and 3 slow startups")
    assert done["details"]["slows"] == 3, done


def test_a_crash_after_a_clean_stop_and_a_relaunch_is_paged(tmp_path, receivers,
                                                            daemons) -> None:
    """OOM; the operator's relaunch is stopped by Ctrl-C (a clean `stopped`); the next
    launch, the same flags, dies of the OOM again: paged, "crash 2 since the last ready"
    (before: folded into the first crash's open alert, 1 page for the 2 crashes); a
    daemon killed -9 and started again keeps it so."""
    rx, d, state, log = crash_pager(tmp_path, receivers, daemons)
    append(log, crash_loop(1))
    rx.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, what="the first crash")
    launch = "".join(sim_texts(start=1_767_261_600.0 + 600, seed=5)[:20])
    append(log, launch + "[2026-01-01 10:15:00] KeyboardInterrupt\n")
    d.wait_target("t1", lambda t: t.get("phase") == "stopped", "the launch stopped")
    d.kill9()                  # (the stop saved, or read again: the checkpoint waits for it)
    d.start()
    append(log, crash_loop(1, first=2))
    pages = rx.wait(hook("crashed", "firing"), n=2, timeout=30, alive=d.dead,
                    what="the crash after the stop paged")
    assert "(crash 2 since the last ready" in pages[1].json["summary"], pages[1].json
    assert len(alert_state(state)["open"]) == 2



@pytest.mark.parametrize("later, clock_on, pages", [(11 * 3600, "", 2), (300, "+2h", 1)],
                         ids=["relaunched-the-next-day", "the-loop-read-after-2h-down"])
def test_a_crash_read_after_the_daemon_was_down_is_timed_by_the_log(
        tmp_path, receivers, daemons, later, clock_on, pages) -> None:
    """The daemon is stopped after a loop's first crash (paged); the next crash, of the same
    flags, is read when it starts again.  Relaunched 11 h on by the log's stamps: a new
    attempt, paged, "the first 11h00m00s ago" (before: decided seconds after the first,
    folded into the day-old alert: 1 page for both).  5 minutes on by the log, but read
    with the daemon's clock 2 h on (libfaketime: it was down 2 h): the loop, folded
    (before: 2 pages)."""
    rx, d, state, log = crash_pager(tmp_path, receivers, daemons)
    append(log, crash_loop(1))
    rx.wait(hook("crashed", "firing"), timeout=30, alive=d.dead, what="the first crash")
    d.stop()
    append(log, "".join(sim_texts(crash="oom", start=1_767_261_600.0 + later, seed=1)))
    if clock_on:
        d.env.update({"LD_PRELOAD": libfaketime(), "FAKETIME": clock_on,
                      "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    d.start()
    wait_for(lambda: len(rx.requests(hook("crashed", "firing"))) == 2 or any(
        e.get("event", "").startswith("crash folded") for e in d.log_events()), 30,
        "the second crash paged or folded", alive=d.dead)
    rx.assert_quiet(1.0, what="after the second crash")
    got = rx.requests(hook("crashed", "firing"))
    assert len(got) == pages, rx.brief()
    if pages == 2:     # how long ago by the log too (before: "the first 2s ago")
        assert "(crash 2 since the last ready, the first 11h00m00s ago)" in \
            got[1].json["summary"], got[1].json

SYSLOG_CAP = 8192   # rsyslog's default maxMessageSize: a longer message is cut there


def cut_dumps(text: str, seeds: tuple[int, ...]) -> str:
    """`text`'s launches (crash_loop's), each server_args dump a long one, as SGLang 0.5.23
    prints it, with the `random_seed` it drew (`random.randint(0, 1 << 30)`: 8 to 10 digits)
    near its start, and cut at `SYSLOG_CAP` characters: the same command, whose cut falls a
    character earlier or later as the seed's width moves it."""
    parts = text.split("server_args=ServerArgs(")
    assert len(parts) == len(seeds) + 1, len(parts)
    out = parts[0]
    for seed, rest in zip(seeds, parts[1:]):
        line, tail = rest.split("\n", 1)
        stamp = out[out.rfind("\n") + 1:]
        out += dump(seed, line)[: SYSLOG_CAP - len(stamp)] + "\n" + tail
    return out


def dump(seed: int, rest: str, stamp: int = len("[2026-01-01 10:00:00] ")) -> str:
    """A long dump (900 flags), its `download_dir` of a length that puts a 9-digit seed's
    cut right after a flag's comma (the worst place: a seed a digit wider loses the flag)."""
    def whole(seed: int, pad: int) -> str:
        fields = "".join(f"flag_{i:03d}={i}, " for i in range(900))
        return f"server_args=ServerArgs(random_seed={seed}, download_dir='{'d' * pad}', {fields}"
    pad = next(k for k in range(16) if whole(123456789, k)[SYSLOG_CAP - stamp - 1] == ",")
    return whole(seed, pad) + rest


def test_a_restart_loop_whose_args_dumps_are_cut_pages_once(tmp_path, receivers,
                                                            daemons) -> None:
    """A restart loop of one command logged through syslog, whose 8 KiB cap cuts SGLang's
    args dump: each relaunch's cut keeps one flag more or less as its random seed's digits
    move it.  One page, the loop's 3 crashes folded into it (before: the launches digested
    apart, `details.launch`, and the relaunch with the wider seed was paged again)."""
    rx = receivers()
    cfg, port, state, log = one_target(tmp_path, {"type": "webhook", "url": rx.url("/hook"),
                                                  "on": ["crashed"]})
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, cut_dumps(crash_loop(3), (123456789, 1012345678, 234567891)))
    rx.wait(hook("crashed", "firing"), n=1, timeout=30, alive=d.dead, what="the loop paged")
    wait_for(lambda: folded(state, 3), 30, "the loop's 3 crashes in one alert", alive=d.dead)
    rx.assert_quiet(1.0, what="after the loop")
    assert len(rx.requests(hook("crashed", "firing"))) == 1


def cut_after(text: str, seeds: tuple[int, ...]) -> str:
    """`text`'s launches (crash_loop's), each server_args dump as long as SGLang 0.5.23's
    (its flags, then 900 more, the `random_seed` it drew among them) and cut at
    `SYSLOG_CAP` characters: the first flags whole, the cut moved by the seed's width."""
    parts = text.split("server_args=ServerArgs(")
    out = parts[0]
    for seed, rest in zip(seeds, parts[1:]):
        line, tail = rest.split("\n", 1)
        stamp = out[out.rfind("\n") + 1:]
        more = "".join(f", flag_{i:03d}={i}" for i in range(900))
        whole = f"server_args=ServerArgs({line[:-1]}, random_seed={seed}{more})"
        out += whole[: SYSLOG_CAP - len(stamp)] + "\n" + tail
    return out


def test_a_relaunch_with_other_flags_is_paged_though_syslog_cuts_its_dump(
        tmp_path, receivers, daemons) -> None:
    """A restart loop logged through rsyslog (8 KiB: SGLang's args dump cut at each launch,
    where its random seed's width moves the cut); the operator relaunches with a lower
    `--mem-fraction-static` (a flag the cut leaves whole), and it dies of the OOM again:
    paged (before: a cut dump told no flags, `details.launch` none: folded, 1 page for the
    4 crashes).  Each launch's repeat is folded: 2 pages."""
    rx, d, state, log = crash_pager(tmp_path, receivers, daemons)
    seeds = (123456789, 1012345678, 234567891, 98765432)
    text = crash_loop(2) + crash_loop(2, first=2).replace("mem_fraction_static=0.88,",
                                                         "mem_fraction_static=0.8,")
    append(log, cut_after(text, seeds))
    rx.wait(hook("crashed", "firing"), n=2, timeout=30, alive=d.dead,
            what="the relaunch with other flags paged")
    wait_for(lambda: sum(d.get("crashes", 1) for d in alert_state(state)["open"].values()) == 4,
             30, "each launch's repeat folded", alive=d.dead)
    rx.assert_quiet(1.0, what="after the loop")
    assert len(rx.requests(hook("crashed", "firing"))) == 2, rx.brief()
