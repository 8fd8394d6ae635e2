"""Identity from the log: every startup, crash and alert has one id, whatever the daemon lives
through.

* SIGKILL 20 times while a log with two startups (ready, then a CUDA OOM) is written: every
  (startup, kind, status) reaches the receiver under one dedupe key, copies re-sent after a
  kill inside a delivery carry the same `Idempotency-Key`, and the crash is delivered.
* A corrupted or truncated checkpoint or outbox: the daemon starts, names the file it could
  not read, and does not send again an alert that was delivered.
* A rollback: a state_dir of a newer format is refused, untouched; a machine state with a
  newer version's fields continues.  A log copied to another inode while the daemon was
  stopped is read on from the saved position.
* The same startup gets the same id from a replay, from a re-read at another offset and
  after a restart (pure, no daemon).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from support.daemon import checkpoint, count_lines
from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    OOM_LINE, Got, Receiver, append, daemons, free_port, hook, outbox, receivers, sim_texts,
    target, wait_for, write_config,
)
from logwatch.machine import CrashSettled, StartupBegan
from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

KINDS = ["crashed", "stalled", "ready", "restarted"]


def two_startups() -> list[str]:
    """Startup 1 becomes ready and serves a little; startup 2 dies of a CUDA OOM."""
    first = sim_texts(serve_lines=3)
    second = sim_texts(crash="oom", start=1_767_265_200.0)   # an hour later, same log
    return first + second


def config(tmp_path: Path, rx: Receiver, **extra: Any) -> tuple[Path, int, Path, Path]:
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("t1", log, labels={"model": "Qwen3-235B"})],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": KINDS}],
                       checkpoint={"interval": "0.2s"}, **extra)
    return cfg, port, state, log


def by_identity(rx: Receiver) -> dict[tuple[str, str, str], set[tuple[str, str | None]]]:
    """(startup, kind, status) -> the (dedupe_key, Idempotency-Key) pairs it arrived with."""
    out: dict[tuple[str, str, str], set[tuple[str, str | None]]] = defaultdict(set)
    for g in rx.requests(hook()):
        d = g.json
        out[(d["startup"], d["kind"], d["status"])].add((d["dedupe_key"],
                                                        g.header("Idempotency-Key")))
    return out


def test_sigkill_20_times_every_alert_has_one_identity(tmp_path: Path, receivers, daemons) -> None:
    rng = random.Random(10)
    slow = threading.Event()
    seen: set[str | None] = set()

    def respond(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        # the first delivery of each alert is answered after 1 s: a kill in that second
        # lands inside the delivery (the daemon never reads the 200 and must send it again)
        key = got.header("Idempotency-Key")
        if slow.is_set() and key not in seen:
            seen.add(key)
            time.sleep(1.0)
        return 200, {}, b"ok"

    rx = receivers(respond)
    cfg, port, state, log = config(tmp_path, rx)
    texts = two_startups()
    done = threading.Event()

    def writer() -> None:      # the log is written over ~10 s, step by step
        pause = 10.0 / len(texts)
        for t in texts:
            append(log, t)
            time.sleep(pause)
        done.set()

    slow.set()
    d = daemons(cfg, port).start()
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    # the first run reads the log from its first startup and saves where it is; every later
    # run resumes there (one that finds no checkpoint would rightly attach at the latest)
    wait_for(lambda: (state / "positions" / "t1.json").exists(), 10, "a first checkpoint",
             alive=d.dead)
    kills = 0
    in_flight_kills = 0
    cut: set[int] = set()                 # requests unanswered when their sender died

    def new_in_flight() -> set[int]:
        return {id(g) for g in rx.requests() if g.status == 0} - cut

    while True:
        deadline = time.monotonic() + rng.uniform(0.05, 0.6)
        while time.monotonic() < deadline and not new_in_flight():
            time.sleep(0.01)                  # a kill at a random time, or inside a delivery
        flying = new_in_flight()
        if flying:
            in_flight_kills += 1
            cut |= flying
        d.kill9()
        kills += 1
        if kills == 20:
            break
        d.start()
    w.join(30)
    assert done.is_set(), "the writer did not finish"
    slow.clear()
    d.start()
    rx.wait(hook("crashed", "firing"), status=200, timeout=30, alive=d.dead,
            what="the crash alert after 20 kills")
    wait_for(lambda: not outbox(state), 20, "the outbox to empty", alive=d.dead)
    rx.assert_quiet(3.0, what="once everything was delivered")

    ids = by_identity(rx)
    crashes = [k for k in ids if k[1] == "crashed" and k[2] == "firing"]
    assert len(crashes) == 1, ids
    readies = [k for k in ids if k[1] == "ready" and k[2] == "firing"]
    assert len(readies) == 1, f"one ready (startup 1): {ids}"
    assert crashes[0][0] != readies[0][0], "the crash belongs to the second startup"
    for ident, pairs in ids.items():
        assert len(pairs) == 1, f"{ident} arrived under several keys: {pairs}"
        (key, idem), = pairs
        assert idem == f"{key}|{ident[2]}", (ident, key, idem)
    copies = {k: len(rx.requests(lambda g, k=k: hook(k[1], k[2])(g) and g.json["startup"] == k[0]))
              for k in ids}
    assert in_flight_kills >= 1, "no kill landed inside a delivery"
    assert max(copies.values()) >= 2, "a delivery cut by a kill was made again"
    crash = rx.requests(hook("crashed", "firing"))[0].json
    assert crash["details"]["reason"] == "cuda_oom"
    # the figures of the run (in the note): kills, kills inside a delivery, copies
    print(f"kills={kills} in_flight={in_flight_kills} alerts={len(ids)} "
          f"requests={sum(copies.values())} copies={sorted(copies.values())}")


def delivered_crash(tmp_path: Path, receivers, daemons):  # type: ignore[no-untyped-def]
    rx = receivers()
    cfg, port, state, log = config(tmp_path, rx)
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead)
    wait_for(lambda: not outbox(state), 10, "the outbox to empty", alive=d.dead)
    assert d.stop() == 0      # a clean stop writes the last checkpoint
    return rx, d, state


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("which", ["positions/t1.json", "alerts/state.json"])
def test_a_damaged_state_file_is_named_and_nothing_is_sent_again(tmp_path: Path, receivers,
                                                                 daemons, which: str,
                                                                 damage: str) -> None:
    rx, d, state = delivered_crash(tmp_path, receivers, daemons)
    f = state / which
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00\xffnot json{{")
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "crashed", "crashed again after the restart")
    wait_for(lambda: str(f) in d.stderr(), 10, f"the daemon naming {f}", alive=d.dead)
    if which.startswith("positions"):
        # no position: the log is read again, the crash decided again, and not sent
        rx.assert_not_sent_again(d, "crashed", since_start=True,
                                 what=f"after the restart with a {damage} {which}")
    else:
        # the position holds (with the alerts' marks): nothing is read again, nothing decided
        rx.assert_quiet(4.0, what=f"after the restart with a {damage} {which}")
    assert len(rx.requests(hook("crashed", "firing"))) == 1, rx.brief()


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_page_the_receiver_had_not_taken_survives_a_lost_alert_state(
        tmp_path: Path, receivers, daemons, damage: str) -> None:
    """The receiver down (503) at a crash: its page waits in `alerts/state.json`'s outbox.
    That file is then lost (deleted) or damaged, the daemon killed -9, the receiver back.
    Before, the checkpoint's marks said the crash was alerted: never delivered, nothing
    counted, and a deleted file not even named (the page lost unsaid).  Now the checkpoint
    carries the target's undelivered pages too: the crash is delivered after the restart,
    with the Idempotency-Key of its refused attempts, and the loss of the file is said.  A
    page delivered since is not carried: a second loss sends nothing again."""
    up = threading.Event()

    def down_until_up(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        return (200, {}, b"ok") if up.is_set() else (503, {}, b"down")

    rx = receivers(down_until_up)
    cfg, port, state, log = config(tmp_path, rx)
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, "".join(sim_texts(crash="oom")))
    refused = rx.wait(hook("crashed", "firing"), answered=True, timeout=30, alive=d.dead,
                      what="the crash page, refused")
    wait_for(lambda: ((checkpoint(state, "t1") or {}).get("extra") or {}).get("alerts_pending"),
             10, "a checkpoint carrying the undelivered page", alive=d.dead)
    d.kill9()
    f = state / "alerts" / "state.json"

    def lose() -> None:
        if damage == "deleted":
            f.unlink()
        else:
            f.write_bytes(f.read_bytes()[:40])
    lose()
    up.set()
    d.start()
    got = rx.wait(hook("crashed", "firing"), status=200, timeout=30, alive=d.dead,
                  what="the crash page after the restart")
    assert got[0].header("Idempotency-Key") == refused[0].header("Idempotency-Key")
    wait_for(lambda: str(f) in d.stderr() and "undelivered" in d.stderr(), 10,
             f"the loss of {f} said", alive=d.dead)
    wait_for(lambda: not outbox(state), 10, "the outbox to empty", alive=d.dead)
    wait_for(lambda: not ((checkpoint(state, "t1") or {}).get("extra") or {})
             .get("alerts_pending"), 10, "a checkpoint without the delivered page",
             alive=d.dead)
    d.kill9()
    lose()
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "crashed", "crashed after the second restart")
    rx.assert_quiet(3.0, what="after the second loss of the alert state")
    assert len(rx.requests(hook("crashed", "firing", "t1"))) == len(refused) + 1, rx.brief()


@pytest.mark.parametrize("counters", [[1], {"lines": "abc"}], ids=["a-list", "a-string-count"])
def test_a_checkpoints_counters_of_the_wrong_shape_start_over(tmp_path: Path, receivers,
                                                               daemons, counters: Any) -> None:
    """A checkpoint that reads but whose counters are not what this version writes.
    Before: a list kept the target from starting, for good (retried every 5 min at most, and
    absent from /api/status and /metrics); a count that was a string failed every /metrics
    scrape (500) for the whole fleet.  Now the counters start over, said once, and the
    position and alert marks are kept: the old crash is not sent again."""
    rx, d, state = delivered_crash(tmp_path, receivers, daemons)
    f = state / "positions" / "t1.json"
    doc = json.loads(f.read_text(encoding="utf-8"))
    doc["extra"]["counters"] = counters
    f.write_text(json.dumps(doc), encoding="utf-8")
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "crashed", "t1 back, crashed as it was")
    code, body = d.get("/metrics")
    assert code == 200 and 'logwatch_source_up{target="t1"} 1' in body, (code, body[:300])
    said = [e for e in d.log_events() if e.get("event", "").startswith("saved counters")]
    assert len(said) == 1, said
    rx.assert_quiet(2.0, what="after the restart with counters of the wrong shape")
    assert len(rx.requests(hook("crashed", "firing"))) == 1, rx.brief()


def state_files(state: Path) -> dict[str, bytes]:
    """Every file under the state_dir but the lock (its pid is the last starter's), by path."""
    return {str(p.relative_to(state)): p.read_bytes() for p in sorted(state.rglob("*"))
            if p.is_file() and p.name != "daemon.lock"}


def test_a_state_dir_of_a_newer_logwatch_is_refused_and_left_as_it_is(tmp_path: Path,
                                                                     receivers, daemons) -> None:
    """A rollback: a newer logwatch (checkpoint and alert state format 3, a field this
    version lacks) alerted a crash and stopped.  Before: each checkpoint was dropped as
    "unknown version 3" and alerts/state.json set aside as corrupt (the open alert lost,
    the crash decided again from the latest startup).  Now: exit 2, one line naming the
    state_dir, the files and their formats, and not one byte of the state_dir changed."""
    import json

    rx, d, state = delivered_crash(tmp_path, receivers, daemons)
    assert json.loads((state / "alerts" / "state.json").read_text())["open"], "an open alert"
    for which in ("positions/t1.json", "alerts/state.json"):
        doc = json.loads((state / which).read_text())
        (state / which).write_text(json.dumps({**doc, "version": 3, "added_in_3": {"x": 1}}))
    before = state_files(state)
    d.start(wait=False)
    wait_for(lambda: d.proc.poll() is not None, 15, "the daemon to refuse the state_dir")
    assert d.proc.returncode == 2, d.stderr()[-3000:]
    said = [ln for ln in d.stderr().splitlines() if "newer logwatch" in ln]
    assert len(said) == 1 and len(d.stderr().splitlines()) == 1, d.stderr()[-3000:]
    for part in (str(state), "positions/t1.json (checkpoint format 3, this version reads up to 2)",
                 "alerts/state.json (alert state format 3, this version reads up to 2)",
                 "run that version again", "move the state_dir aside"):
        assert part in said[0], (part, said[0])
    assert state_files(state) == before, "the state_dir was changed"
    assert len(rx.requests(hook("crashed", "firing"))) == 1, rx.brief()


def with_new_fields(state: dict[str, Any]) -> dict[str, Any]:
    """The machine state as a newer logwatch would write it: a field this version lacks in
    every object it keeps (the state, its crash and the crash's evidence, each span, progress
    bar, hint and rank)."""
    def grown(obj: dict[str, Any]) -> dict[str, Any]:
        return {**obj, "added_later": [1, "x"]}

    crash = grown(state["crash"])
    for k in ("cause", "marker", "marker_reason"):
        if isinstance(crash.get(k), dict):
            crash[k] = grown(crash[k])
    objects = {k: {n: grown(v) for n, v in state[k].items()} for k in ("progress", "hints", "ranks")}
    assert all(objects.values()), "the log has progress bars, hints and ranks"
    return grown({**state, **objects, "crash": crash, "spans": [grown(e) for e in state["spans"]]})


def test_a_machine_state_with_fields_of_a_newer_logwatch_continues(tmp_path: Path, receivers,
                                                                   daemons) -> None:
    """A rollback within checkpoint format 2: a newer logwatch added fields to the saved
    machine state.  Before: TypeError ("unexpected keyword argument"), the phase started
    over, the next startup numbered 1 and never paged `restarted`.  Now the fields are left
    out: crashed, startup 1 kept; the relaunch is startup 2, paged `restarted` once."""
    import json

    rx, d, state = delivered_crash(tmp_path, receivers, daemons)
    f = state / "positions" / "t1.json"
    doc = json.loads(f.read_text())
    doc["extra"]["state"] = with_new_fields(doc["extra"]["state"])
    f.write_text(json.dumps(doc))
    d.start()
    t = d.wait_target("t1", lambda t: t["phase"] == "crashed", "crashed, from the checkpoint")
    assert t["epoch"] == 1, t["epoch"]
    assert "unreadable" not in d.stderr(), d.stderr()[-3000:]
    append(state.parent / "server.log", "".join(sim_texts(start=1_767_265_200.0)))
    d.wait_target("t1", lambda t: t["phase"] == "ready", "the relaunch ready")
    rx.wait(hook("restarted", "firing"), status=200, timeout=20, alive=d.dead,
            what="the relaunch paged as a restart")
    assert d.target("t1")["epoch"] == 2
    assert len(rx.requests(hook("crashed", "firing"))) == 1, rx.brief()


def test_a_machine_state_of_the_wrong_shape_starts_the_phase_over(tmp_path: Path) -> None:
    """A saved state whose progress bars are a list, not an object: before, AttributeError
    out of `restore` (only TypeError, ValueError and KeyError were caught) and the target
    never started; now the phase starts over from the saved position."""
    from logwatch import log
    from logwatch.app.checkpoint import restore
    from logwatch.app.config import TargetConfig
    from logwatch.sources.base import Position
    from logwatch.state.positions import PositionStore

    store = PositionStore(tmp_path)
    store.save("t1", Position(10, 2, None, None, "x.log"),
               {"format": 2, "source": "x.log", "pack": "sglang",
                "state": {"phase": "loading", "progress": [["shards", 1]]}})
    got = restore(store, TargetConfig(name="t1", source="x.log", rules="sglang"), [],
                  log.get("test"))
    assert got.state is None and got.position is not None and got.position.offset == 10


def test_a_log_copied_to_another_inode_while_stopped_is_read_on_from_the_position(
        tmp_path: Path, receivers, daemons) -> None:
    """The daemon is stopped; its log becomes another inode holding the same bytes (cp and
    mv, as rsync or a move of the logs and the state_dir to another host leaves it; an NFS
    remount's new st_dev is the same case to the reader); the server then crashes while
    serving.  Restarted, the daemon reads on from its saved position: the crash paged once,
    no `restarted`, every line counted once.  Before: it started at the latest startup, took
    the crash for history (never paged), counted the startup's lines twice."""
    import os
    import shutil

    from support.receivers import serving_crash
    from support.daemon import count_lines

    rx = receivers()
    cfg, port, state, log = config(tmp_path, rx)
    append(log, "".join(sim_texts(serve_lines=3)))
    d = daemons(cfg, port).start()
    rx.wait(hook("ready", "firing"), status=200, timeout=20, alive=d.dead)
    n1 = count_lines(log)
    wait_for(lambda: checkpoint(state, "t1")["extra"]["counters"]["lines"] == n1, 10,
             f"a checkpoint at {n1} lines", alive=d.dead)
    assert d.stop() == 0
    shutil.copyfile(log, tmp_path / "server.log.tmp")
    os.replace(tmp_path / "server.log.tmp", log)          # the same bytes, another inode
    append(log, serving_crash())
    d.start()
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead,
            what="the crash written while the daemon was stopped")
    d.wait_metric("logwatch_lines_total", float(count_lines(log)), target="t1")
    rx.assert_quiet(2.0, what="after the crash")
    assert [len(rx.requests(hook(k, "firing"))) for k in ("ready", "crashed", "restarted")] \
        == [1, 1, 0], rx.brief()
    assert d.target("t1")["epoch"] == 1


def test_the_startup_id_comes_from_the_log_not_the_clock() -> None:
    """Replay at two different times, and a read that starts at the second startup: the
    second startup has one id in all three."""
    pack = load_pack("sglang")
    data = "".join(two_startups()).encode()

    def ids(chunks: list[bytes], offset: int, now: float) -> list[str]:
        pipe = LogPipeline(pack, offset=offset)
        evs = []
        for c in chunks:
            evs += pipe.feed(c, now)
        evs += pipe.finish(now)
        return [e.startup for e in evs if isinstance(e, (StartupBegan, CrashSettled))]

    whole = ids([data], 0, 1000.0)
    assert len(whole) == 3, whole           # two startups began, one crash settled
    assert whole[1] == whole[2], "the crash carries its startup's id"
    split = ids([data[i:i + 777] for i in range(0, len(data), 777)], 0, 99999.0)
    assert split == whole, "another chunking, another clock: the same ids"
    second_at = data.index(b"server_args=", data.index(b"server_args=") + 1)
    second_at = data.rfind(b"\n", 0, second_at) + 1
    assert ids([data[second_at:]], second_at, 5.0) == whole[1:]


def test_a_version_1_state_dir_is_upgraded_in_place_and_nothing_is_sent_again(
        tmp_path: Path, receivers, daemons) -> None:
    """A daemon of checkpoint version 1 (startup ids from the clock, `node:1`-style names
    folded to `node_1`) alerted a crash and stopped; the upgraded daemon continues from its
    files: the same phase and counters, and the crash is not alerted again."""
    import json
    import os

    from logwatch.machine import state_to_json
    from logwatch.sources.base import TAIL_BYTES, Position, digest, identity_of

    rx = receivers()
    log = tmp_path / "server.log"
    data = "".join(sim_texts(crash="oom")).encode()
    log.write_bytes(data)
    port = free_port()
    state = tmp_path / "state"
    name = "node:1"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target(name, log, labels={"model": "Qwen3-235B"})],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": KINDS}],
                       checkpoint={"interval": "0.2s"})
    # what version 1 left: the machine state of the whole log, without the fields of
    # version 2, its first phase seen at a clock time, the crash counted under that time
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(data, 1_767_261_700.0)
    pipe.finish(1_767_261_700.0)
    doc = state_to_json(pipe.state)
    for k in ("startup_id", "crash_settled", "crash_changed_at"):
        doc.pop(k)
    # before spans: one entry per phase entered
    doc["history"] = [{k: e[k] for k in ("phase", "at", "log_time", "log_stamp")}
                      for e in doc.pop("spans")]
    at = doc["history"][0]["at"]
    st = os.stat(log)
    pos = Position(len(data), data.count(b"\n") + 1, identity_of(st.st_dev, st.st_ino, data),
                   digest(data[-TAIL_BYTES:]), str(log))
    counters = {"lines": data.count(b"\n"), "startups": 1, "crash_counted": f"1@{at:.3f}",
                "crashes": {"cuda_oom": 1}, "bytes": len(data), "bytes_until": len(data)}
    (state / "positions").mkdir(parents=True)
    (state / "positions" / "node_1.json").write_text(json.dumps(
        {"version": 1, "target": name, "position": pos.to_json(),
         "extra": {"source": str(log), "pack": "sglang", "state": doc, "counters": counters}}))
    (state / "alerts").mkdir()
    (state / "alerts" / "state.json").write_text(json.dumps(
        {"version": 1, "seen": {f"{name}|1@{at:.0f}|crashed|firing": at}, "open": {},
         "outbox": []}))

    d = daemons(cfg, port).start()
    t = d.wait_target(name, lambda t: t["phase"] == "crashed", "crashed, from the old checkpoint")
    assert t["source_state"]["offset"] == len(data), "it continued where version 1 stopped"
    assert d.metric("logwatch_crashes_total", target=name, reason="cuda_oom") == 1.0
    assert d.metric("logwatch_lines_total", target=name) == float(data.count(b"\n"))
    rx.assert_quiet(4.0, what="after the upgrade")
    assert rx.requests() == []
    assert d.stop() == 0
    assert (state / "positions" / "node%3A1.json").exists(), "written under the new name"


def test_target_names_never_share_a_state_file(tmp_path: Path) -> None:
    from logwatch.state.files import target_file_name
    from logwatch.state.positions import PositionStore
    from logwatch.sources.base import Position

    names = ["node:1", "node_1", "node.1", "node%3A1", "..", "gpü-1"]
    files = {target_file_name(n) for n in names}
    assert len(files) == len(names), files
    assert all("/" not in f and f not in (".", "..") for f in files)
    store = PositionStore(tmp_path)
    for i, n in enumerate(names):
        store.save(n, Position(i, 1, None, None, n))
    assert [store.load(n)[0].offset for n in names] == list(range(len(names)))  # type: ignore[union-attr]


@pytest.mark.integration
def test_kill_9_before_the_first_interval_checkpoint_keeps_the_startup_numbering(
        tmp_path: Path, daemons) -> None:
    """Issue 30: checkpoints every 60 s; the daemon attaches to a log with one startup, a
    second one begins, and the daemon is killed 1.5 s later.  A new startup is checkpointed
    at the next tick, so the restarted daemon resumes it as startup 2 (before: nothing was
    saved yet, it attached again at the latest startup and numbered it 1)."""
    log = tmp_path / "server.log"
    append(log, "".join(sim_texts()))
    port = free_port()
    from support.daemon import write_config as write_cfg, target_cfg
    cfg = write_cfg(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                    [target_cfg("t1", log, gpu=False, probe=False)],
                    checkpoint={"interval": "60s"})
    d = daemons(cfg, port).start()
    d.wait_target("t1", lambda t: t["phase"] == "ready" and t["epoch"] == 1, "startup 1 ready")
    append(log, "".join(sim_texts(start=2e9)))
    d.wait_target("t1", lambda t: t["epoch"] == 2, "startup 2")
    time.sleep(1.5)        # the kill comes 1.5 s after startup 2 began (the fault's timing)
    d.kill9()
    d.start()
    t = d.wait_target("t1", lambda t: t["phase"] == "ready", "ready after the restart")
    assert t["epoch"] == 2, t["epoch"]


def _old_crashed_log(path: Path, serving_lines: int) -> None:
    """A startup that served (`serving_lines` batch lines) and crashed 3 days ago: history at
    a first attach, never paged nor counted."""
    old = time.time() - 3 * 86400
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(old + 600))
    batch = (f"[{stamp} TP0] Decode batch, #running-req: 3, #token: 2700, token usage: 0.01, "
             "cuda graph: True, gen throughput (token/s): 1234.00, #queue-req: 0\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(sim_texts(seed=1, serve_lines=3, start=old)))
        for _ in range(serving_lines // 1000):
            f.write(batch * 1000)
        f.write(f"[{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sglang/srt/managers/scheduler.py", line 100, in event_loop\n'
                "    self.run_batch(batch)\n"
                f"{OOM_LINE}\n"
                f"[{stamp}] Received sigquit from a child process. It usually means the child "
                "failed.\n")
    os.utime(path, (old + 700, old + 700))


def _paging_daemon(tmp_path: Path, log: Path, rx, daemons):
    """A daemon (checkpoints every 1 s: support.daemon's config) on `log` as t1, crashes
    paged to `rx`: (the daemon, its state_dir)."""
    from support.daemon import write_config as write_cfg
    port, state = free_port(), tmp_path / "state"
    cfg = write_cfg(tmp_path / "logwatch.yaml", port, state,
                    [target("t1", log, gpu=False, probe=False)],
                    alerts=[{"type": "webhook", "url": rx.url(), "on": ["crashed"]}])
    return daemons(cfg, port).start(), state


@pytest.mark.parametrize("when", ["during", "after"])
def test_kill_9_around_the_first_attach_catch_up_pages_no_history(
        tmp_path: Path, receivers, daemons, when: str) -> None:
    """A daemon started on a fleet whose log holds a long startup that crashed 3 days ago,
    killed -9 `during` its first attach's catch-up (checkpoints every 1 s), or just `after`
    it (before the crash, read in the catch-up, settles ~2 s later).  The restarted daemon
    still takes that crash for history: no page, `logwatch_crashes_total` 0.  Before: a
    checkpoint 5 MB into a 95 MB log resumed the rest as news (paged "crashed: cuda_oom
    during ready after 10m00s", counted 1); and the checkpoint just after the catch-up held
    the crash unsettled, which settled as news at the restart (paged, counted)."""
    rx = receivers()
    log = tmp_path / "server.log"
    _old_crashed_log(log, 300_000 if when == "during" else 2_000)
    d, state = _paging_daemon(tmp_path, log, rx, daemons)
    if when == "during":
        seen = time.monotonic()
        d.wait_target("t1", lambda t: t["catching_up"] and t["lines"] > 0, "catching up")
        # two checkpoint intervals into the catch-up (a 48 MB log: ~8 s of it here)
        wait_for(lambda: time.monotonic() - seen > 2.5 or not d.target("t1")["catching_up"],
                 10, "2.5 s of catch-up", interval=0.05, alive=d.dead)
        assert d.target("t1")["catching_up"], "the catch-up ended too soon to test"
    else:
        def saved_unsettled() -> bool:
            st = ((checkpoint(state, "t1") or {}).get("extra") or {}).get("state") or {}
            return st.get("phase") == "crashed"
        wait_for(saved_unsettled, 20, "the checkpoint after the catch-up", interval=0.02,
                 alive=d.dead)
        st = checkpoint(state, "t1")["extra"]["state"]            # type: ignore[index]
        assert not st["crash_settled"], "the crash settled before the kill: too late to test"
    d.kill9()
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "crashed" and not t["catching_up"] and
                  t["crash"] is not None, "crashed, caught up", timeout=60)
    wait_for(lambda: ((checkpoint(state, "t1") or {}).get("extra") or {}).get("state", {})
             .get("crash_settled"), 20, "the crash settled", alive=d.dead)
    rx.assert_quiet(2.0, hook("crashed"), "a page for a crash of 3 days ago")
    assert not rx.requests(hook("crashed")), [g.json["summary"] for g in rx.requests()]
    assert d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom") == 0.0


def test_a_log_truncated_during_the_first_attach_catch_up_reads_the_relaunch_live(
        tmp_path: Path, receivers, daemons) -> None:
    """The log truncated while a first attach catches up on it (a relaunch's `>` redirect,
    no copy kept): the rest of the attach's bytes will never come, so the catch-up ends
    there and the relaunch that crashes is news (paged, counted, checkpointed).  Before, the
    catch-up waited for the new log to pass the old one's size (47 MB here): the relaunch's
    crash held for good, `catching_up` true, no page, `logwatch_crashes_total` 0, and no
    checkpoint written."""
    rx = receivers()
    log = tmp_path / "server.log"
    _old_crashed_log(log, 300_000)
    with open(log, "r+b") as f:      # the startup served until the relaunch: no crash, recent
        f.truncate(f.read().rfind(b"Scheduler hit an exception"))
    d, state = _paging_daemon(tmp_path, log, rx, daemons)
    d.wait_target("t1", lambda t: t["catching_up"] and t["lines"] > 0, "catching up")
    with open(log, "w", encoding="utf-8") as f:          # `> server.log`: the relaunch
        f.write("".join(sim_texts(crash="oom", start=time.time())))
    assert d.target("t1")["catching_up"], "the catch-up ended too soon to test"
    got = rx.wait(hook("crashed"), timeout=30, what="the relaunch's crash paged",
                  alive=d.dead)
    assert "cuda_oom" in json.dumps(got[0].json), got[0].json
    t = d.target("t1")
    assert not t["catching_up"] and t["phase"] == "crashed" and t["epoch"] == 2, t
    assert d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom") == 1.0
    wait_for(lambda: ((checkpoint(state, "t1") or {}).get("extra") or {}).get("state", {})
             .get("phase") == "crashed", 10, "the relaunch checkpointed", alive=d.dead)


def _catch_up_checkpoint(state: Path, after: int) -> int | None:
    """The offset of a checkpoint written while the first attach catches up, past `after`."""
    doc = checkpoint(state, "t1") or {}
    mid = (((doc.get("extra") or {}).get("attachments") or {}).get("catchup") or {})
    offset = (doc.get("position") or {}).get("offset")
    return offset if mid.get("catching_up") and isinstance(offset, int) and offset > after \
        else None


def test_kill_9_through_a_first_attach_catch_up_goes_on_from_its_checkpoint(
        tmp_path: Path, receivers, daemons) -> None:
    """A daemon killed -9 again and again while its first attach catches up on a 48 MB log
    (systemd restarting it, the OOM killer) goes on from its last checkpoint each time: the
    catch-up ends, each line is counted once, the crash of 3 days ago is still history (no
    page, `logwatch_crashes_total` 0), and a relaunch's crash written after it pages once.
    Before, no checkpoint was written while catching up: each start read the log again from
    its latest startup, and a daemon killed every 2 s never got through a 95 MB one."""
    rx = receivers()
    log = tmp_path / "server.log"
    _old_crashed_log(log, 300_000)
    d, state = _paging_daemon(tmp_path, log, rx, daemons)
    at = 0
    for _ in range(3):     # killed each time a new checkpoint of the catch-up is on disk
        at = wait_for(lambda: _catch_up_checkpoint(state, at), 20,
                      f"a catch-up checkpoint past {at}", interval=0.02, alive=d.dead)
        d.kill9()
        d.start()
    assert at > 1 << 20, at
    d.wait_target("t1", lambda t: t["phase"] == "crashed" and not t["catching_up"],
                  "caught up", timeout=60)
    d.wait_metric("logwatch_lines_total", float(count_lines(log)), target="t1")
    assert d.metric("logwatch_bytes_read_total", target="t1") == float(log.stat().st_size)
    wait_for(lambda: ((checkpoint(state, "t1") or {}).get("extra") or {}).get("state", {})
             .get("crash_settled"), 20, "the old crash settled", alive=d.dead)
    assert d.target("t1")["seen_at_attach"]["reason"] == "cuda_oom"
    rx.assert_quiet(1.0, hook("crashed"), "a page for a crash of 3 days ago")
    assert d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom") == 0.0
    append(log, "".join(sim_texts(crash="oom", start=time.time())))     # a relaunch, live
    got = rx.wait(hook("crashed"), timeout=30, what="the relaunch's crash", alive=d.dead)
    rx.assert_quiet(2.0, hook("crashed"), "a second page")
    assert len(rx.requests(hook("crashed"))) == 1 and "cuda_oom" in got[0].json["summary"]
    d.wait_metric("logwatch_crashes_total", 1.0, target="t1", reason="cuda_oom")


def test_a_damaged_catch_up_checkpoint_attaches_afresh_and_pages_no_history(
        tmp_path: Path, receivers, daemons) -> None:
    """A daemon killed -9 while its first attach caught up, its checkpoint's catch-up then
    unreadable (an event that does not read back: another version's fields, a damaged
    file): the log is attached afresh, as the checkpoint's docstring says, and the crash of
    3 days ago is still history (no page, `logwatch_crashes_total` 0).  Before, the catch-up
    was dropped but its position kept: the rest of the log was read as live lines and the
    old crash paged ("crashed: cuda_oom during ready after 9m59s") and counted."""
    rx = receivers()
    log = tmp_path / "server.log"
    _old_crashed_log(log, 300_000)
    d, state = _paging_daemon(tmp_path, log, rx, daemons)
    wait_for(lambda: _catch_up_checkpoint(state, 0), 20, "a catch-up checkpoint",
             interval=0.02, alive=d.dead)
    d.kill9()
    path = state / "positions" / "t1.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    held = doc["extra"]["attachments"]["catchup"]["catching_up"]["held"]
    held[0]["epoch"] = "1"
    path.write_text(json.dumps(doc), encoding="utf-8")
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "crashed" and not t["catching_up"],
                  "caught up", timeout=60)
    wait_for(lambda: ((checkpoint(state, "t1") or {}).get("extra") or {}).get("state", {})
             .get("crash_settled"), 20, "the old crash settled", alive=d.dead)
    rx.assert_quiet(3.0, hook("crashed"), "a page for a crash of 3 days ago")
    assert d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom") == 0.0
    assert d.metric("logwatch_bytes_read_total", target="t1") == float(log.stat().st_size)
