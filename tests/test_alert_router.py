"""The router's decisions about the outbox, without a network: which sink gets which mark,
and in which order a sink's worker may send them (sinks/alerts/router.py, delivery.py).
The deliveries themselves, to real receivers and a real Alertmanager, are in
test_alert_faults.py and test_alertmanager.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from logwatch.app.alerttest import sample
from logwatch.sinks.alerts.delivery import give_up_or_retry, heads
from logwatch.sinks.alerts.model import FIRING
from logwatch.sinks.alerts.outbox import forget_marks
from logwatch.sinks.alerts.receivers import Outcome, make_sinks
from logwatch.sinks.alerts.router import BUCKET_SIZE, AlertRouter


def router(tmp_path: Path, sinks: list[dict[str, Any]]) -> AlertRouter:
    cfg = SimpleNamespace(alerts=sinks, listen_host="127.0.0.1", listen_port=9105,
                          targets=[SimpleNamespace(name="t1")])
    return AlertRouter(cfg, tmp_path)


def alert(kind: str, n: int = 0, target: str = "t1"):
    a = sample(kind, "http://127.0.0.1:9105/")
    a.target, a.key = target, f"{target}|s{n}|{kind}"
    return a


def queued(r: AlertRouter, sink: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in r.store.outbox if e["sink"] == sink and kind in (None, e["alert"]["kind"])]


def test_one_sinks_phase_alerts_do_not_spend_anothers_pages(tmp_path: Path) -> None:
    """Before, one token bucket per target: a sink taking `phase` alerts (automation)
    spent the tokens of the on-call sink's `stalled` and `ready` pages, dropped for good."""
    r = router(tmp_path, [{"type": "webhook", "name": "automation", "url": "http://127.0.0.1:9/a",
                           "on": ["phase"]},
                          {"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
                           "on": ["stalled", "ready"]}])
    for n in range(BUCKET_SIZE + 5):
        r.fire(alert("phase", n))
    r.fire(alert("stalled", 99))
    r.fire(alert("ready", 99))
    assert len(queued(r, "automation")) == BUCKET_SIZE          # its own budget, spent
    assert [e["alert"]["kind"] for e in queued(r, "oncall")] == ["stalled", "ready"]
    assert r.counts().dropped == {"phase": 5}


def test_a_resolution_goes_only_where_its_firing_went(tmp_path: Path) -> None:
    """A sink added at a reload got `stalled resolved` for a stall it never had."""
    first = [{"type": "webhook", "name": "a", "url": "http://127.0.0.1:9/a", "on": ["stalled"]}]
    r = router(tmp_path, first)
    r.fire(alert("stalled", 1))
    r.store.outbox.clear()                                        # delivered
    later = first + [{"type": "webhook", "name": "b", "url": "http://127.0.0.1:9/b",
                      "on": ["stalled"]}]
    r.reconfigure(SimpleNamespace(alerts=later, listen_host="127.0.0.1", listen_port=9105,
                                  targets=[SimpleNamespace(name="t1")]))
    doc = r.store.take_open(lambda d: True)[0]
    r.fire(alert("stalled", 1).resolved("lines again"), doc)
    assert [e["sink"] for e in r.store.outbox] == ["a"]


def test_a_resolution_follows_a_sink_whose_url_changed(tmp_path: Path) -> None:
    """A SIGHUP that changes a sink's URL (its destination digest): the crash's resolution
    went nowhere (the open alert named the old digest only), and the new URL never had it
    resolved.  Now found by name too, as a queued entry is; an alert opened before sinks
    were recorded goes to every sink that takes it."""
    r = router(tmp_path, [{"type": "webhook", "name": "hook", "url": "http://127.0.0.1:9/a",
                           "on": ["crashed"]}])
    r.fire(alert("crashed", 1))
    r.store.outbox.clear()
    r.reconfigure(SimpleNamespace(alerts=[{"type": "webhook", "name": "hook",
                                           "url": "http://127.0.0.1:9/b", "on": ["crashed"]}],
                                  listen_host="127.0.0.1", listen_port=9105,
                                  targets=[SimpleNamespace(name="t1")]))
    doc = r.store.take_open(lambda d: True)[0]
    r.fire(alert("crashed", 1).resolved("ready again"), doc)
    assert [e["sink"] for e in r.store.outbox] == ["hook"]
    old = {k: v for k, v in alert("crashed", 2).to_json().items()}   # no "sinks": before
    r.fire(alert("crashed", 2).resolved("ready again"), old)
    assert [e["alert"]["key"] for e in r.store.outbox][-1] == "t1|s2|crashed"


def test_a_sink_sends_one_entry_per_alert_at_a_time() -> None:
    """A resolution queued behind its firing (the firing waiting out its backoff) is not
    eligible until the firing is gone, whatever their retry times."""
    firing = {"id": 1, "alert": {"key": "t1|s|crashed", "status": FIRING}, "next_at": 50.0}
    resolved = {"id": 2, "alert": {"key": "t1|s|crashed", "status": "resolved"}, "next_at": 0.0}
    other = {"id": 3, "alert": {"key": "t2|s|ready", "status": FIRING}, "next_at": 0.0}
    assert [e["id"] for e in heads([resolved, firing, other])] == [1, 3]
    assert [e["id"] for e in heads([resolved, other])] == [2, 3]


def test_delivery_is_retried_until_max_age_not_for_8_attempts() -> None:
    """8 attempts with backoff ran out in about 4 minutes; `max_age` (1 h) never came into
    play, and a 5-minute receiver outage lost the crash page."""
    sink = make_sinks([{"type": "webhook", "url": "http://127.0.0.1:9/h"}])[0]
    assert sink.max_attempts is None and sink.max_age == 3600
    import time
    entry = {"alert": alert("crashed").to_json(), "attempts": 0, "first_at": time.time(),
             "next_at": 0.0}

    class Quiet:
        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None
    down = Outcome(False, True, message="HTTP 503")
    for _ in range(12):
        assert give_up_or_retry(entry, down, sink, Quiet()) is False
    assert entry["next_at"] - time.time() <= 300.0 + 1         # the backoff's cap
    entry["first_at"] -= 3600                                    # an hour old: given up
    assert give_up_or_retry(entry, down, sink, Quiet()) is True
    capped = make_sinks([{"type": "webhook", "url": "http://127.0.0.1:9/h", "max_attempts": 3}])[0]
    entry = {**entry, "attempts": 2, "first_at": time.time()}
    assert give_up_or_retry(entry, down, capped, Quiet()) is True


def crash(n: int, reason: str = "cuda_oom", at: float = 0.0):
    a = alert("crashed", n)
    a.details["reason"] = reason
    a.starts_at = 1_767_261_600.0 + at
    return a


def test_a_restart_loop_pages_its_first_crash_and_each_new_reason_once(tmp_path: Path) -> None:
    """A server restarted every 20 s that crashes each time paged every crash (30 in 10
    minutes, 2,000 over a night), each open until a ready that may never come.  Now a
    crash of a reason already open is folded into that alert (counted, not paged); a
    crash of a new reason is paged and says it is part of a loop."""
    from logwatch.sinks.alerts.policy import Resolve
    r = router(tmp_path, [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
                           "on": ["crashed"]}])
    for n in range(3):
        r.fire(crash(n, at=20 * n))
    r.fire(crash(3, "nccl_error", at=60))
    r.fire(crash(4, at=80))
    pages = [e["alert"] for e in queued(r, "oncall")]
    assert [p["key"] for p in pages] == ["t1|s0|crashed", "t1|s3|crashed"]
    assert "since the last ready" not in pages[0]["summary"]
    assert pages[1]["summary"].endswith("(crash 4 since the last ready, the first 1m00s ago)")
    assert pages[1]["details"]["crashes_since_ready"] == 4
    assert {k: d["crashes"] for k, d in r.store.open.items() if "crashes" in d} == \
        {"t1|s0|crashed": 4}
    r.store.outbox.clear()                                       # delivered
    r._apply([Resolve("t1", ("crashed",), "ready again", exclude="s9")])   # a startup ready
    done = {e["alert"]["key"]: e["alert"] for e in queued(r, "oncall")}
    assert done["t1|s0|crashed"]["details"]["crashes"] == 4
    assert "crashes" not in done["t1|s3|crashed"]["details"]
    assert any("the 5 crashes since the last ready are over" in a["summary"]
               for a in done.values()), done
    r.fire(crash(10))                                            # a new loop: paged
    assert "since the last ready" not in queued(r, "oncall")[-1]["alert"]["summary"]


def test_a_restart_loop_of_150_crashes_keeps_one_open_alert_and_a_small_state(
        tmp_path: Path) -> None:
    """Before: 150 open crash alerts, 150 pages queued per sink, `alerts/state.json` at
    1.0 MB (2,000 crashes: 5.8 MB of open alerts; a fleet looping for days reached for the
    file's 64 MiB cap).  Now the marks grow, ~90 bytes a crash, up to the target's newest
    64 (`alert_marks`; before helper adv134, up to `seen`'s 20,000 of all targets)."""
    r = router(tmp_path, [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
                           "on": ["crashed"]}])
    for n in range(150):
        a = crash(n, at=20 * n)
        a.details["excerpt"] = [f"line {i} of the traceback " + "x" * 60 for i in range(30)]
        r.fire(a)
    assert len(r.store.open) == 1 and len(r.store.outbox) == 1
    assert r.store.open["t1|s0|crashed"]["crashes"] == 150
    assert [m for m in r.store.seen if m.startswith("t1|")] == \
        [f"t1|s{n}|crashed|firing" for n in range(150 - 64, 150)]    # the newest 64
    size = (tmp_path / "alerts" / "state.json").stat().st_size
    assert size < 30_000, size                    # 8 KB: the marks, ~90 bytes a crash


def test_a_relaunch_with_other_flags_is_paged_not_folded_into_the_loop(tmp_path: Path) -> None:
    """The loop's crashes carry their launch's flags digest (`details.launch`); an operator
    who relaunches with other flags and meets the same OOM is paged (before: folded into
    the loop's alert, no page), and that attempt's own repeats are folded into it."""
    r = router(tmp_path, [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
                           "on": ["crashed"]}])
    for n, launch in enumerate(("mem88", "mem88", "mem80", "mem80")):
        a = crash(n, at=20 * n)
        a.details["launch"] = launch
        r.fire(a)
    pages = [e["alert"] for e in queued(r, "oncall")]
    assert [p["key"] for p in pages] == ["t1|s0|crashed", "t1|s2|crashed"]
    assert pages[1]["summary"].endswith("(crash 3 since the last ready, the first 40s ago)")
    assert {k: d.get("crashes") for k, d in r.store.open.items()} == \
        {"t1|s0|crashed": 2, "t1|s2|crashed": 2}


def test_a_crash_long_after_the_loops_latest_is_paged_not_folded(tmp_path: Path) -> None:
    """A loop's crashes come minutes apart (a relaunch, a startup that crashes again); the
    server left down and relaunched the next day with the same flags, crashing the same
    way, is a new attempt: paged (before: folded into the day-old open alert, 0 pages)."""
    r = router(tmp_path, [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
                           "on": ["crashed"]}])
    r.fire(crash(0))
    r.fire(crash(1, at=1800))                                    # 30 min later: the loop
    r.fire(crash(2, at=1800 + 3600 + 1))                         # an hour after that: news
    r.fire(crash(3, at=1800 + 3600 + 60))                        # its own loop
    pages = [e["alert"] for e in queued(r, "oncall")]
    assert [p["key"] for p in pages] == ["t1|s0|crashed", "t1|s2|crashed"]
    assert {k: d.get("crashes") for k, d in r.store.open.items()} == \
        {"t1|s0|crashed": 2, "t1|s2|crashed": 2}


def test_a_loop_pages_a_receiver_again_that_never_had_its_open_alert(tmp_path: Path) -> None:
    """A receiver down for its `max_age` when the loop's first crash came (the page given
    up): the next crash of the loop pages it, under the open alert's key (its resolution
    will match), and only it; the receiver that had it gets nothing new."""
    r = router(tmp_path, [{"type": "webhook", "name": "a", "url": "http://127.0.0.1:9/a",
                           "on": ["crashed"]},
                          {"type": "webhook", "name": "b", "url": "http://127.0.0.1:9/b",
                           "on": ["crashed"]}])
    r.fire(crash(0))
    r.delivery._given_up(r.sinks[1], queued(r, "b")[0])
    r.store.outbox.clear()                                       # a's delivered
    r.fire(crash(1, at=20))
    assert queued(r, "a") == []
    [again] = queued(r, "b")
    assert again["alert"]["key"] == "t1|s0|crashed" and again["alert"]["details"]["crashes"] == 2
    assert "(crash 2 of it since the last ready)" in again["alert"]["summary"]
    r.store.outbox.clear()
    r.fire(crash(2, at=40))
    assert r.store.outbox == []                                  # both have it now


def test_a_loops_end_reaches_slack_though_its_last_crash_page_was_given_up(
        tmp_path: Path) -> None:
    """A restart loop's crashes are resolved in one Slack message, the last crash's.  Where
    Slack never had that crash (its page given up: Slack down then), the message was never
    sent: the channel that had the loop's first crashes never heard it was over.  Now the
    latest crash Slack had says it; the webhook still gets each key."""
    from logwatch.sinks.alerts.policy import Resolve
    r = router(tmp_path, [{"type": "slack", "url": "http://127.0.0.1:9/s", "on": ["crashed"]},
                          {"type": "webhook", "url": "http://127.0.0.1:9/w", "on": ["crashed"]}])
    slack = r.sinks[0]
    for n, reason in enumerate(("cuda_oom", "cuda_oom", "nccl_error", "port_in_use")):
        r.fire(crash(n, reason, at=20 * n))
    last = next(e for e in queued(r, slack.name) if e["alert"]["key"] == "t1|s3|crashed")
    r.delivery._given_up(slack, last)              # Slack down when the last crash came
    r.store.outbox.clear()                         # the others delivered
    r._apply([Resolve("t1", ("crashed",), "ready again", exclude="s9")])
    told = queued(r, slack.name)
    assert [e["alert"]["key"] for e in told] == ["t1|s2|crashed"], told
    assert "(ready again; the 4 crashes since the last ready are over)" in \
        told[0]["alert"]["summary"]
    assert sorted(e["alert"]["key"] for e in queued(r, r.sinks[1].name)) == \
        ["t1|s0|crashed", "t1|s2|crashed", "t1|s3|crashed"]


# -- a sink's order, on a clock of the test's -------------------------------------------------

class Outage:
    """A webhook sink's outbox driven by `next_up` and `Delivery._settle` on the test's clock
    (the worker's two steps, without its HTTP): who is sent when, what is given up."""

    def __init__(self, tmp_path: Path, monkeypatch: Any, **spec: Any) -> None:
        from logwatch import clock
        from logwatch.sinks.alerts.delivery import Delivery
        from logwatch.sinks.alerts.model import AlertCounts
        from logwatch.sinks.alerts.outbox import AlertStore
        self.t = 1000.0
        monkeypatch.setattr(clock, "now", lambda: self.t)
        self.store = AlertStore(tmp_path)
        self.sink = make_sinks([{"type": "webhook", "url": "http://x/h", "name": "w", **spec}])[0]
        self.delivery = Delivery(self.store, lambda: [self.sink], AlertCounts())
        self.sent: list[tuple[float, str]] = []
        self.tries: dict[str, int] = {}

    def add(self, kind: str, key: str, target: str = "t") -> None:
        self.store.outbox.append({"id": len(self.tries) + len(self.store.outbox) + 1,
                                  "sink": "w", "attempts": 0, "state": "queued",
                                  "first_at": self.t, "next_at": self.t,
                                  "alert": {"kind": kind, "key": key, "target": target,
                                            "status": FIRING}})

    def run_until(self, end: float, answer: Any, every: Any = None) -> None:
        from logwatch.sinks.alerts.delivery import next_up
        while self.t < end:
            if every is not None:
                every(self)
            while True:
                entry, _ = next_up(self.store.outbox, "w", self.t,
                                   self.delivery.paced.get("w", 0.0))
                if entry is None:
                    break
                out = answer(self, entry)
                key = entry["alert"]["key"]
                self.tries[key] = self.tries.get(key, 0) + 1
                if out.ok:
                    self.sent.append((self.t, key))
                self.delivery._settle(self.sink, entry, out)
            self.t += 0.25


def test_a_receivers_outage_spends_no_attempts_of_the_oldest_page(tmp_path: Path,
                                                                  monkeypatch: Any) -> None:
    """`max_attempts: 20`, the receiver down 25 minutes, a crash page first and a new page
    every 2 minutes: before, every failure pulled the sink's entries to the failing one's
    next try, and the crash page's 20 attempts went in 6 minutes: given up, 10 pages lost.
    Now each later page is tried once when it comes, then waits behind it; after the outage
    all go, in order."""
    o = Outage(tmp_path, monkeypatch, max_attempts=20)
    o.add("crashed", "A")
    up_at = 1000 + 25 * 60

    added = [0]

    def every(o: Outage) -> None:
        if o.t < up_at and o.t >= 1000 + 120 * (added[0] + 1):
            added[0] += 1
            o.add("stalled", f"K{added[0]:02d}")

    o.run_until(1000 + 3600, lambda o, e: Outcome(True, False) if o.t >= up_at else
                Outcome(False, True, None, "HTTP 503"), every)
    assert o.delivery.counts.dropped == {}, o.delivery.counts.dropped
    assert o.sent and o.sent[0][1] == "A" and o.sent[0][0] >= up_at, o.sent[:3]
    assert [k for _, k in o.sent] == sorted((k for _, k in o.sent), key=lambda k: (k != "A", k))
    assert len(o.sent) == 1 + added[0] == 13, o.sent
    # each later page tried when it came, then once more behind A: sent
    assert all(n == 2 for k, n in o.tries.items() if k != "A"), o.tries


def test_a_receiver_that_asks_to_wait_gets_the_pages_in_order(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    """A receiver rate-limiting the whole hook (429, `Retry-After: 30`) to a crash page and
    the ready page after it: before, the ready page's own wait could end first.  Now the
    ready page, refused too, waits behind the crash page: the crash at 30 s, then the ready."""
    o = Outage(tmp_path, monkeypatch)
    o.add("crashed", "A")
    o.add("ready", "B")
    o.run_until(1100, lambda o, e: Outcome(False, True, 1030.0 - o.t, "HTTP 429")
                if o.t < 1030 else Outcome(True, False))
    assert [k for _, k in o.sent] == ["A", "B"], o.sent
    assert o.sent[0][0] == pytest.approx(1030, abs=0.5)


def test_a_rate_limited_receiver_is_not_hammered_with_retries(tmp_path: Path,
                                                               monkeypatch: Any) -> None:
    """50 servers of one node crash in the same second; the sink is a Slack webhook, which
    takes about one message a second and answers the rest 429 `Retry-After: 1`.  Its
    Retry-After is the pace of the whole sink: before, each page waited out only its own,
    then all went again at once (1,275 POSTs here; the live daemon: 837, 787 of them 429,
    for 50 pages).  Now each page is tried when it comes, then the retries go one per
    pace."""
    o = Outage(tmp_path, monkeypatch)
    for i in range(50):
        o.add("crashed", f"C{i:02d}", target=f"node{i}")
    last_ok = [-1.0]

    def slack(o: Outage, e: dict[str, Any]) -> Outcome:
        if o.t - last_ok[0] < 1.0:
            return Outcome(False, True, 1.0, "HTTP 429")
        last_ok[0] = o.t
        return Outcome(True, False)

    o.run_until(1000 + 300, slack)
    assert len(o.sent) == 50 and o.delivery.counts.dropped == {}, o.sent
    assert o.sent[-1][0] <= 1000 + 60, "about one a second, as the receiver takes them"
    posts = sum(o.tries.values())
    assert posts <= 50 + 2 * 50, f"{posts} POSTs for 50 pages"


def test_a_page_asked_to_wait_a_day_holds_no_other(tmp_path: Path, monkeypatch: Any) -> None:
    """One page answered 429 with `Retry-After: 86400` (the receiver's word for it alone):
    a crash page after it goes at once, not a day later."""
    o = Outage(tmp_path, monkeypatch, max_age=4 * 86400)
    o.add("phase", "P")
    o.add("crashed", "C")
    o.run_until(1010, lambda o, e: Outcome(False, True, 86400.0, "HTTP 429")
                if e["alert"]["key"] == "P" else Outcome(True, False))
    assert o.sent == [(1000.0, "C")], o.sent


def test_a_huge_max_attempts_is_a_number_not_an_overflow() -> None:
    """`max_attempts: 5000`: `--check` and the daemon died of OverflowError (2.0 ** 1025);
    a receiver down 85 h under `max_age: 4d` ended its sink's worker the same way."""
    from logwatch.sinks.alerts.backoff import BACKOFF_CAP, backoff, outage_outlasted
    assert backoff(1025) == backoff(5000) == BACKOFF_CAP
    assert outage_outlasted(5000) == pytest.approx(outage_outlasted(9) + 4991 * 0.75 * 300)
    assert outage_outlasted(8) == pytest.approx(sum(0.75 * 2.0 ** n for n in range(1, 8)))


def test_a_page_refused_for_good_holds_no_other(tmp_path: Path, monkeypatch: Any) -> None:
    """The receiver answers 500 to one page, every time (a relay whose route for it is
    down), and takes the rest: the pages decided after it, its own server's crash page too,
    go at once (the crash page waited out the refused one's `max_age`, 1 h, before)."""
    o = Outage(tmp_path, monkeypatch)
    o.add("ready", "P", target="a")
    o.add("crashed", "C", target="b")
    o.add("crashed", "R", target="a")
    o.run_until(1060, lambda o, e: Outcome(False, True, None, "HTTP 500")
                if e["alert"]["key"] == "P" else Outcome(True, False))
    assert [k for _, k in o.sent] == ["C", "R"] and o.sent[-1][0] == 1000.0, o.sent


def test_new_entries_come_after_the_loaded_ones_whatever_the_clock(tmp_path: Path) -> None:
    """The ids that order a sink's entries started at the wall clock's milliseconds: after a
    restart on a clock set back, new pages went before the old ones (a resolution before its
    firing).  They start after the loaded ones."""
    r = router(tmp_path, [{"type": "webhook", "name": "w", "url": "http://127.0.0.1:9/w"}])
    r.store.outbox.append({"id": 10**16, "sink": "w", "attempts": 1, "state": "queued",
                           "first_at": 0.0, "next_at": 0.0,
                           "alert": alert("crashed").to_json()})
    r.store.save()
    again = router(tmp_path, [{"type": "webhook", "name": "w", "url": "http://127.0.0.1:9/w"}])
    assert next(again._ids) == 10**16 + 1


def test_a_retry_after_for_one_servers_page_holds_no_other_servers_crash_page(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A receiver rate-limits one server's pages (429 `Retry-After: 3600`, a per-alert limit
    of a paging gateway) and answers another server's crash page 502 once (a blip): the
    crash page's retry goes on its own backoff (1-2 s), not after the other page's pace.
    Before, every retry of the sink waited the 429's pace (60 s): the crash page came a
    minute late.  A page refused with a Retry-After of its own still follows the pace (the
    Slack case, test above)."""
    o = Outage(tmp_path, monkeypatch)
    o.add("stalled", "X", target="x")
    o.add("crashed", "Y", target="y")
    tries = {"Y": 0}

    def gateway(o: Outage, e: dict[str, Any]) -> Outcome:
        if e["alert"]["key"] == "X":
            return Outcome(False, True, 3600.0, "HTTP 429")
        tries["Y"] += 1
        return Outcome(False, True, None, "HTTP 502") if tries["Y"] == 1 else Outcome(True, False)

    o.run_until(1000 + 120, gateway)
    assert [k for _, k in o.sent] == ["Y"], o.sent
    assert o.sent[0][0] <= 1000 + 2.5, f"the crash page at +{o.sent[0][0] - 1000:.1f}s"


def test_a_loop_crash_whose_launch_flags_are_unknown_is_folded(tmp_path: Path) -> None:
    """A crash of the loop whose flags were not read (`details.launch` absent: a cut dump,
    the launch line before an attach) is no new attempt: folded into the loop's open alert
    of its reason (before: paged again, its "" unlike the loop's digest)."""
    r = router(tmp_path, [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
                           "on": ["crashed"]}])
    for n, launch in enumerate(("", "mem88", "", "mem88")):
        a = crash(n, at=20 * n)
        if launch:
            a.details["launch"] = launch
        r.fire(a)
    assert [e["alert"]["key"] for e in queued(r, "oncall")] == ["t1|s0|crashed"]
    assert {k: d.get("crashes") for k, d in r.store.open.items()} == {"t1|s0|crashed": 4}


def reload_cfg(sinks: list[dict[str, Any]], names: list[str], **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(alerts=sinks, listen_host="127.0.0.1", listen_port=9105,
                           targets=[SimpleNamespace(name=n) for n in names], **kw)


def test_a_target_keeps_its_newest_alert_marks_not_every_mark_of_its_history(
        tmp_path: Path) -> None:
    """A server restarting every few seconds makes a few marks a startup (restarted,
    crashed, its resolution, ready); every one was kept up to 20,000 in all, the whole file
    rewritten up to 5 times a second: adv134's fleet of 40 (500 startups a minute) grew
    `alerts/state.json` to 1.1 MB in 11 minutes and the daemon's CPU from 24 to 37 s a
    minute at the same load.  Now each target keeps its newest `alert_marks` (64: what
    its checkpoint carries), and a log read again still finds them."""
    hook = [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
             "on": ["crashed"]}]
    r = router(tmp_path, hook)
    for n in range(1000):             # `restarted`: decided, taken by no sink (no tokens)
        r.fire(alert("restarted", n))
        r.fire(alert("restarted", n, target="t2"))
    mine = [m for m in r.store.seen if m.startswith("t1|")]
    assert mine == [f"t1|s{n}|restarted|firing" for n in range(1000 - 64, 1000)], len(mine)
    assert len(r.store.seen) == 128
    r.fire(alert("restarted", 999))                   # the latest startup read again
    assert r.counts().repeated == {"restarted": 1}
    assert list(r.marks_of("t1") or {}) == mine       # its checkpoint's, the same
    size = (tmp_path / "alerts" / "state.json").stat().st_size
    assert size < 15_000, size                        # 1000 of each: 96 KB before
    r.reconfigure(reload_cfg(hook, ["t1", "t2"], alert_marks=16))   # fewer, at a reload
    assert len([m for m in r.store.seen if m.startswith("t1|")]) == 16
    again = router(tmp_path, hook)                    # a restart: as it was saved
    assert sorted(again.store.seen) == sorted(r.store.seen)


def test_a_removed_target_leaves_no_rate_limit_and_its_marks_go_with_its_state(
        tmp_path: Path) -> None:
    """A fleet whose names churn (a name per job): each name that ever had an alert kept
    its rate-limit bucket for the daemon's life, and its marks until 20,000 of them.  A
    removed name's bucket goes at the reload; its marks stay while its checkpoint does
    (put back, it pages nothing twice) and go when `state_retention` prunes its state."""
    hook = [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/o",
             "on": ["ready"]}]
    r = router(tmp_path, hook)
    for job in range(50):
        name = f"job-{job}"
        r.reconfigure(reload_cfg(hook, ["t1", name]))
        for n in range(3):
            r.fire(alert("ready", n, target=name))
        r.store.outbox.clear()                         # delivered
    r.reconfigure(reload_cfg(hook, ["t1"]))
    assert r._buckets._buckets == {}, list(r._buckets._buckets)[:3]
    assert len(r.store.seen) == 150                    # kept: their checkpoints have them
    r.fire(alert("ready", 2, target="job-49"))         # put back, its log read again
    assert r.counts().repeated == {"ready": 1} and r.store.outbox == []
    assert forget_marks(r.store, {f"job-{j}" for j in range(49)}) == 147   # retention
    assert sorted(r.store.seen) == [f"job-49|s{n}|ready|firing" for n in range(3)]
    assert r.marks_of("job-0") == {}
    again = router(tmp_path, hook)
    assert sorted(again.store.seen) == sorted(r.store.seen)
