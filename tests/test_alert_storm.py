"""A fleet crashing at once with its receivers dead: the daemon keeps answering and reading.

Every decision and every delivery attempt changes the alert outbox.  Before (helper adv51),
each change rewrote the whole `alerts/state.json` on the event loop: 500 servers crashing
with one webhook refusing connections and one never answering, 4 MB a write, 514 writes in
40 s, /healthz 8.3 s late at worst and 388 ms at the median for the whole retry storm.
Now the file is written off the loop, at most once per SAVE_EVERY (state/coalesce.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from logwatch.app.alerttest import sample
from logwatch.sinks.alerts.router import AlertRouter
from logwatch.state.coalesce import encode_chunked

from support.daemon import (  # noqa: F401 (daemons: the fixture)
    append, count_lines, daemons, free_port, http_get, sim_texts, target_cfg, wait_for,
    write_config,
)
from support.receivers import hook, outbox, receivers  # noqa: F401 (receivers: the fixture)

N = 300          # servers: before, /healthz 3.4 s at worst at this size (p99 1.4 s)


@pytest.fixture
def silent_receiver() -> Iterator[int]:
    """A port that accepts connections and never reads or answers (a wedged receiver)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4096)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                return
    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()
    for c in held:
        c.close()


def t1_crash():
    """Target t1's crash, startup s1 (its alert key)."""
    a = sample("crashed", "http://127.0.0.1:9105/")
    a.target, a.key = "t1", "t1|s1|crashed"
    return a


def healthz_latencies(url: str, stop: threading.Event
                      ) -> tuple[list[tuple[float, float]], threading.Thread]:
    """GET /healthz every 20 ms in a thread until `stop`: (latency, when sent)."""
    got: list[tuple[float, float]] = []

    def run() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            code, _ = http_get(url, timeout=60)
            got.append((time.monotonic() - t0, t0))
            assert code == 200
            time.sleep(0.02)   # the probe's pace, not a synchronisation
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return got, th


def lines_read(d) -> float:
    """Lines the daemon has read, all targets together."""
    return sum(float(v) for v in re.findall(r"^logwatch_lines_total\{[^}]*\} (\S+)$",
                                            d.metrics_text(), re.M))


def failures(d, sink: str) -> float:
    m = re.search(rf'^logwatch_alert_failures_total\{{sink="{sink}"\}} (\S+)$',
                  d.metrics_text(), re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.integration
@pytest.mark.serial
def test_a_fleet_crashing_with_dead_receivers_does_not_stall_the_daemon(
        tmp_path: Path, daemons, silent_receiver: int) -> None:
    texts = sim_texts(crash="oom")
    cut = next(i for i, t in enumerate(texts) if "Scheduler hit an exception" in t)
    head, tail = "".join(texts[:cut]), "".join(texts[cut:])
    logs = []
    for i in range(N):
        p = tmp_path / f"s{i}.log"
        p.write_text(head)
        logs.append(p)
    port, state = free_port(), tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target_cfg(f"s{i}", p) for i, p in enumerate(logs)], checkpoint=None,
                       alerts=[{"type": "webhook", "url": f"http://127.0.0.1:{free_port()}/h",
                                "on": ["crashed"]},
                               {"type": "webhook", "on": ["crashed"], "timeout": "2s",
                                "url": f"http://127.0.0.1:{silent_receiver}/h"}])
    d = daemons(cfg, port).start()
    wait_for(lambda: d.metrics_text().count("logwatch_source_up{") >= N and
             len(re.findall(r"^logwatch_source_up\{[^}]*\} 1\.0$", d.metrics_text(), re.M)) >= N,
             120, f"{N} sources up", alive=d.dead, interval=0.5)
    stop = threading.Event()
    lat, th = healthz_latencies(d.base + "/healthz", stop)
    lines = count_lines(logs[0]) + tail.count("\n")
    try:
        crashed_at = time.monotonic()
        for p in logs:
            append(p, tail)
        # the crash lines of N logs read in one pass of the loop: not the alert state's
        # (2.3 s at worst under a load of 6 on 2 cores, the same before and after); the
        # crashes are decided seconds later (crash_settle), and paged from then on
        wait_for(lambda: lines_read(d) >= N * lines, 60, "the crash lines read",
                 alive=d.dead, interval=0.1)
        read_at = time.monotonic()
        # every crash paged and refused, then retried: the storm of outbox changes
        wait_for(lambda: failures(d, "webhook-0") >= 2 * N, 90,
                 "each page refused twice by the dead receiver", alive=d.dead, interval=0.5)
    finally:
        stop.set()
        th.join(60)
    lat = sorted((x, at) for x, at in lat if at >= read_at)
    worst = [f"{x:.2f}s at +{at - crashed_at:.1f}s" for x, at in lat[-5:]]
    assert lat[-1][0] < 1.0, f"/healthz worst {worst} (lines read at " \
        f"+{read_at - crashed_at:.1f}s), p99 {lat[int(len(lat) * .99)][0]:.2f}s ({len(lat)} probes)"
    # nothing lost on the way: each crash is an open alert with a page queued per sink
    d.stop()
    saved = json.loads((state / "alerts" / "state.json").read_text())
    assert len([k for k in saved["open"] if k.endswith("|crashed")]) == N
    per_sink = {s: len({e["alert"]["key"] for e in saved["outbox"] if e["sink"] == s})
                for s in ("webhook-0", "webhook-1")}
    assert per_sink["webhook-0"] == N, per_sink


def test_the_chunked_encoding_is_json_dumps_byte_for_byte() -> None:
    doc = {"version": 2, "seen": {f"t{i}|s|crashed|firing": i + 0.5 for i in range(200)},
           "open": {}, "outbox": [{"id": i, "alert": {"summary": "ü\u202e\n"}} for i in range(130)],
           "none": None}
    assert encode_chunked(doc, chunk=64) == \
        json.dumps(doc, separators=(",", ":")).encode("utf-8")


def test_a_checkpoint_never_carries_a_mark_the_alert_state_lacks(tmp_path: Path) -> None:
    """The file is written off the loop now: a target's checkpoint (its marks, a position
    past the crash) written before the decision is on disk, then a kill -9, would take the
    page as sent and never read the crash again (a lost page).  `marks_of` says None
    until then (the checkpoint waits a tick)."""
    cfg = SimpleNamespace(alerts=[{"type": "webhook", "url": "http://127.0.0.1:9/h",
                                   "on": ["crashed"]}], listen_host="127.0.0.1",
                          listen_port=9105, targets=[SimpleNamespace(name="t1")])
    path = tmp_path / "alerts" / "state.json"

    def on_disk() -> set[str]:
        return set(json.loads(path.read_text())["seen"]) if path.exists() else set()

    async def go() -> None:
        r = AlertRouter(cfg, tmp_path)
        await r.start()
        r.fire(t1_crash())
        marks = r.marks_of("t1")
        assert marks is None or set(marks) <= on_disk(), (marks, on_disk())
        await r.saved()
        assert r.marks_of("t1") == {"t1|s1|crashed|firing": r.store.seen["t1|s1|crashed|firing"]}
        assert "t1|s1|crashed|firing" in on_disk()
        await r.stop()
    asyncio.run(go())


@pytest.mark.integration
@pytest.mark.serial
def test_a_delivered_page_is_off_the_disk_outbox_at_once(tmp_path: Path, receivers,
                                                          daemons) -> None:
    """The file is written at most every SAVE_EVERY, but a delivered page's removal goes at
    once: a kill -9 right after the receiver's 200 must not send it again after the restart
    (within the writing, it is: with the same Idempotency-Key).  Coalesced like the rest,
    the removal came ~0.2 s after the 200, the `sending` write just before the POST
    holding it back: a kill in that time paged the crash twice."""
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port, state = free_port(), tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target_cfg("t1", log)],
                       checkpoint=None, alerts=[{"type": "webhook", "url": rx.url("/hook"),
                                                 "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, "".join(sim_texts(crash="oom")))
    got = wait_for(lambda: [g for g in rx.requests(hook("crashed", "firing")) if g.status],
                   30, "the crash page answered", interval=0.002, alive=d.dead)[0]
    wait_for(lambda: not outbox(state), 5, "the delivered page off the outbox on disk",
             interval=0.002, alive=d.dead)
    took = time.monotonic() - got.answered_at
    assert took < 0.1, f"the delivered page left the outbox on disk {took:.3f}s after the 200"
    d.kill9()
    d.start()
    d.wait_reading("t1")
    rx.assert_quiet(2.0, what="after the kill -9 and restart")
    assert len(rx.requests(hook("crashed", "firing"))) == 1, rx.brief()


def test_a_store_at_its_mark_cap_saves_without_sorting_every_mark(tmp_path: Path) -> None:
    """A fleet that has run a while keeps SEEN_KEEP marks; each save trimmed the oldest one
    over the cap by sorting all 20,000 (0.8 ms as a restart adopts them, 2.4 ms in no
    order), on the loop, for every decision and every delivery attempt: 1,200 saves took
    about 1 s.  Trimmed in batches now."""
    from logwatch.sinks.alerts.outbox import SEEN_KEEP, SEEN_SLACK, AlertStore

    async def go() -> float:
        store = AlertStore(tmp_path)
        for t in range(500):       # as a restart finds them: each target's checkpoint's marks
            store.adopt({f"t{t}|s{j}|crashed|firing": 1.7e9 + 3600 * j + t
                         for j in range(SEEN_KEEP // 500)})
        store.file.start()
        t0 = time.perf_counter()
        for i in range(1200):      # past SEEN_KEEP + SEEN_SLACK: one batch trimmed (50
            t = f"t{i % 50}"       # targets: each within its own 64, alert_marks)
            store.mark(t, f"{t}|n{i}|crashed|firing", 1.8e9 + i)
            store.save()
        took = time.perf_counter() - t0
        await store.file.close()
        assert SEEN_KEEP <= len(store.seen) <= SEEN_KEEP + SEEN_SLACK
        return took
    took = asyncio.run(go())
    assert took < 0.1, f"1,200 saves at the cap took {took:.3f}s on the loop"
    assert "t49|n1199|crashed|firing" in json.loads((tmp_path / "alerts" / "state.json")
                                                  .read_text())["seen"]


def test_a_renamed_targets_checkpoint_waits_for_the_resolution_its_log_decided(
        tmp_path: Path) -> None:
    """A target renamed (its log now under another name) resolves its old name's open
    alerts: the resolution is decided by the new name's log (a ready line), but its mark is
    the old name's.  The new name's checkpoint (a position past the ready) did not wait for
    it: written before the resolution was on disk, then a kill -9, the restarted daemon
    had the crash open, the ready behind its position, and never resolved it."""
    from logwatch.sinks.alerts.policy import Resolve
    hooks = [{"type": "webhook", "url": "http://127.0.0.1:9/h", "on": ["crashed"]}]
    before = SimpleNamespace(alerts=hooks, listen_host="127.0.0.1", listen_port=9105,
                             targets=[SimpleNamespace(name="t1", source="/srv/a.log")])
    after = SimpleNamespace(alerts=hooks, listen_host="127.0.0.1", listen_port=9105,
                            targets=[SimpleNamespace(name="t2", source="/srv/a.log")])
    path = tmp_path / "alerts" / "state.json"

    def resolved_on_disk() -> bool:
        return any(m.endswith("|resolved") for m in json.loads(path.read_text())["seen"])

    async def go() -> None:
        r = AlertRouter(before, tmp_path)
        await r.start()
        r.fire(t1_crash())
        r.reconfigure(after)                  # t1's log is t2 now: the crash is t2's
        await r.saved()
        assert r.marks_of("t2") is not None
        r._apply([Resolve("t2", ("crashed",), "ready again")])
        assert r.store.open == {}, "the crash was not resolved"
        marks = r.marks_of("t2")              # t2's checkpoint, past the ready line
        assert marks is None or resolved_on_disk(), \
            "t2's checkpoint went before the resolution its log decided was on disk"
        await r.saved()
        assert resolved_on_disk() and r.marks_of("t2") is not None
        await r.stop()
    asyncio.run(go())


def test_a_checkpoint_waits_for_the_undelivered_pages_its_log_dropped(tmp_path: Path) -> None:
    """A crash supersedes the stall page still queued (dropped undelivered, no mark): the
    checkpoint past the crash line went before the drop was on disk, and a kill -9 then
    sent the stale stall page after the restart."""
    from logwatch.sinks.alerts.policy import Resolve
    cfg = SimpleNamespace(alerts=[{"type": "webhook", "url": "http://127.0.0.1:9/h",
                                   "on": ["stalled"]}], listen_host="127.0.0.1",
                          listen_port=9105, targets=[SimpleNamespace(name="t1")])
    path = tmp_path / "alerts" / "state.json"

    async def go() -> None:
        r = AlertRouter(cfg, tmp_path)
        r.fire(dataclasses.replace(sample("stalled", "http://127.0.0.1:9105/"),
                                   target="t1", key="t1|s1|stalled"))
        await r.start()                       # (started after: the page stays queued)
        await r.saved()
        assert r.marks_of("t1") is not None
        r._apply([Resolve("t1", ("stalled",), "crashed", only="s1", drop_undelivered=True)])
        assert r.store.outbox == []
        marks = r.marks_of("t1")
        assert marks is None or json.loads(path.read_text())["outbox"] == [], \
            "t1's checkpoint went before the drop of its stall page was on disk"
        await r.saved()
        assert r.marks_of("t1") is not None
        await r.stop()
    asyncio.run(go())


def test_a_rate_limited_alert_does_not_let_the_checkpoint_pass_an_unsaved_crash(
        tmp_path: Path) -> None:
    """A restart loop: each crash settles as the next startup begins, its `restarted` page
    decided in the same batch.  Once the target's token bucket was empty (20 pages), the
    `restarted` mark was taken back (rate limit), and its change number, never saved,
    replaced the crash's in `_decided`: `unsaved` took it as "never to be", and the
    checkpoint (the crash mark, a position past it) went before the crash was on disk: a
    kill -9 then, and the crash was never paged."""
    from logwatch.sinks.alerts.router import BUCKET_SIZE
    cfg = SimpleNamespace(alerts=[{"type": "webhook", "url": "http://127.0.0.1:9/h",
                                   "on": ["crashed", "restarted"]}], listen_host="127.0.0.1",
                          listen_port=9105, targets=[SimpleNamespace(name="t1")])
    path = tmp_path / "alerts" / "state.json"

    def alert(kind: str, startup: str):
        a = sample(kind, "http://127.0.0.1:9105/")
        return dataclasses.replace(a, target="t1", key=f"t1|{startup}|{kind}")

    async def go() -> None:
        r = AlertRouter(cfg, tmp_path)
        await r.start()
        for i in range(BUCKET_SIZE):          # the loop so far: the bucket spent
            r.fire(alert("restarted", f"s{i}"))
        await r.saved()
        assert r.marks_of("t1") is not None
        crash = alert("crashed", "s20")
        r.fire(crash)                         # settled as the next startup begins ...
        r.fire(alert("restarted", "s21"))     # ... whose page the rate limit drops
        assert crash.mark in r.store.seen and "t1|s21|restarted|firing" not in r.store.seen
        marks = r.marks_of("t1")
        assert marks is None or crash.mark in json.loads(path.read_text())["seen"], \
            "t1's checkpoint carries the crash mark before the crash is on disk"
        await r.saved()
        assert crash.mark in (r.marks_of("t1") or {})
        await r.stop()
    asyncio.run(go())


@pytest.mark.integration
def test_the_unfinished_write_a_killed_daemon_left_is_removed_at_the_start(
        tmp_path: Path, daemons) -> None:
    """A kill -9 in the middle of a write of the alert state (one kill in 10 in a storm:
    written back to back, 4 MB each) leaves its temporary file.  Before, it stayed for
    good, one more for each such kill; the next daemon removes it (the state_dir lock
    says no other writer is alive), and only it: the state itself and other files stay."""
    log = tmp_path / "server.log"
    log.write_text("")
    port, state = free_port(), tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [target_cfg("t1", log)],
                       checkpoint=None, alerts=[{"type": "webhook", "on": ["crashed"],
                                                 "url": f"http://127.0.0.1:{free_port()}/h"}])
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    d.kill9()
    alerts = state / "alerts"
    alerts.mkdir(parents=True, exist_ok=True)
    left = alerts / ".state.json.4194000.17.tmp"      # as a killed writer leaves it
    left.write_bytes(b'{"version":2,"seen":{' + b"x" * 3_000_000)
    other = alerts / "notes.txt"
    other.write_text("the operator's")
    d.start()
    wait_for(lambda: not left.exists(), 20, "the unfinished write removed", alive=d.dead)
    assert other.read_text() == "the operator's"
    assert [e["event"] for e in d.log_events()].count(
        "removed the unfinished writes of the alert state a killed process left") == 1
    d.stop()


def test_a_failed_write_of_the_alert_state_is_written_once_the_disk_takes_it(
        tmp_path: Path) -> None:
    """A write that failed (a full disk, a directory gone wrong) marked its changes saved,
    and nothing wrote the state again until the next change: the disk freed, then a clean
    stop, and state.json was missing the crash (measured with a real daemon on a full
    tmpfs: no alert state at all after the SIGTERM; the open crash lost, its resolution
    never sent).  Now it is tried again (RETRY_FAILED) and at the stop."""
    from logwatch.sinks.alerts.outbox import AlertStore
    from logwatch.state.coalesce import RETRY_FAILED
    path = tmp_path / "alerts" / "state.json"

    def on_disk() -> set[str]:
        return set(json.loads(path.read_text())["seen"]) if path.exists() else set()

    async def go(stop_at_once: bool) -> None:
        store = AlertStore(tmp_path)
        (tmp_path / "alerts").write_text("")    # where the directory should be: writes fail
        store.file.start()
        store.mark("t1", "t1|s1|crashed|firing", 1.8e9)
        await store.file.saved(store.save())
        assert store.file.failed and not path.exists()
        (tmp_path / "alerts").unlink()          # the disk takes writes again
        if not stop_at_once:
            deadline = time.monotonic() + RETRY_FAILED + 10
            while "t1|s1|crashed|firing" not in on_disk():
                assert time.monotonic() < deadline, "the failed write never tried again"
                await asyncio.sleep(0.05)
        await store.file.close()
        assert "t1|s1|crashed|firing" in on_disk()
    asyncio.run(go(stop_at_once=True))
    shutil.rmtree(tmp_path / "alerts")
    asyncio.run(go(stop_at_once=False))
