"""Acceptance tests of the alerts (issue 5), end to end: the real daemon (`python -m logwatch
run -c CONFIG`) follows a log the test writes and sends its alerts to real HTTP receivers on
loopback ports, whose answers the tests program (500s, 429 + Retry-After, hangs)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    NCCL_LINE, OOM_LINE, T0, Got, Receiver, append, count_lines, daemons, serving_crash,
    free_port, hold, hook, outbox, receivers, sim_texts, split_at, target, wait_for, write_config,
)
from conftest import ROOT

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

WEBHOOK_KEYS = {"version", "kind", "status", "target", "engine", "labels", "epoch", "summary",
                "details", "excerpt", "starts_at", "ends_at", "dedupe_key", "generator_url",
                "startup"}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def crash_log() -> str:
    return "".join(sim_texts(crash="oom"))


def ready_log(start: float = T0) -> str:
    return "".join(sim_texts(start=start, serve_lines=0))


def ok_firing(rx: Receiver, kind: str, target_name: str | None = None) -> list[Got]:
    return [g for g in rx.requests(hook(kind, "firing", target_name)) if g.status == 200]


def setup(tmp_path: Path, alerts: list[dict[str, Any]], labels: dict[str, str] | None = None,
          config_extra: dict[str, Any] | None = None,
          **target_kw: Any) -> tuple[Path, int, Path, Path]:
    """A config with one target `t1` following tmp/server.log (empty, created now)."""
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("t1", log, labels=labels or {"model": "Qwen3-235B"}, **target_kw)],
                       alerts, **(config_extra or {}))
    return cfg, port, state, log


# -- 1. retries without slowing the reader; the documented webhook JSON --------------------------

def test_webhook_500_twice_then_200_delivers_once_and_reading_keeps_pace(tmp_path, receivers, daemons):
    held = threading.Event()
    seen = {"crashed": 0}
    lock = threading.Lock()

    def respond(got: Got, rx: Receiver):
        if not hook("crashed", "firing")(got):
            return 200, {}, b"ok"
        with lock:
            seen["crashed"] += 1
            n = seen["crashed"]
        if n == 1:
            return 500, {}, b"boom"
        if n == 2:  # failing slowly: held until the test has checked the reader
            hold(held, rx)
            return 500, {}, b"boom again"
        return 200, {}, b"ok"

    rx = receivers(respond)
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook/TOKEN-123"),
                                              "on": ["crashed", "stalled", "ready"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    d.wait_lines("t1", count_lines(log))
    # the first attempt failed, the second is hanging at the receiver: the reader goes on
    rx.wait(hook("crashed", "firing"), n=2, timeout=20, what="2 attempts", alive=d.dead)
    for batch in range(5):
        append(log, "".join(f"[2026-01-01 10:20:{batch:02d}] heartbeat {batch}.{i}\n"
                            for i in range(200)))
        d.wait_lines("t1", count_lines(log), timeout=5)
    assert seen["crashed"] == 2, "no new attempt while the second one is still in flight"
    held.set()
    got = rx.wait(hook("crashed", "firing"), n=3, timeout=20, what="3rd attempt", answered=True,
                  alive=d.dead)
    wait_for(lambda: not outbox(state), 10, "the outbox to empty")
    rx.assert_quiet(1.0, hook("crashed"), "after the crash alert was delivered")

    attempts = rx.requests(hook("crashed", "firing"))
    assert [g.status for g in attempts] == [500, 500, 200]
    assert len(ok_firing(rx, "crashed")) == 1
    assert all(g.method == "POST" and g.path == "/hook/TOKEN-123" for g in attempts)
    assert "TOKEN-123" not in d.stderr(), "the daemon's log never shows the URL path"
    bodies = [g.body for g in attempts]
    assert bodies[0] == bodies[1] == bodies[2], "a retry sends the same alert"

    body = got[2].json
    assert set(body) >= WEBHOOK_KEYS - {"ends_at", "generator_url"}, set(body) ^ WEBHOOK_KEYS
    assert body["version"] == 1
    assert body["kind"] == "crashed" and body["status"] == "firing"
    assert body["target"] == "t1" and body["engine"] == "sglang"
    assert body["labels"] == {"model": "Qwen3-235B"}
    assert isinstance(body["epoch"], int) and body["epoch"] >= 1
    assert "cuda_oom" in body["summary"] and "cuda_graph" in body["summary"], body["summary"]
    assert body["details"]["reason"] == "cuda_oom"
    assert body["details"]["during"] == "cuda_graph"
    assert OOM_LINE in body["details"]["line"], body["details"]
    assert "excerpt" not in body["details"]
    assert isinstance(body["excerpt"], list) and any(OOM_LINE in ln for ln in body["excerpt"])
    assert ISO.match(body["starts_at"]), body["starts_at"]
    assert body["ends_at"] is None
    assert isinstance(body["dedupe_key"], str) and body["dedupe_key"].startswith("t1|")
    assert got[2].header("Content-Type") == "application/json"
    # the failures and the delivery show in the metrics
    assert d.metric("logwatch_alerts_sent_total", sink="webhook-0", kind="crashed") == 1
    assert d.metric("logwatch_alert_failures_total", sink="webhook-0") == 2


# -- 2. HMAC signature ---------------------------------------------------------------------------

def test_webhook_hmac_signature_is_hmac_sha256_of_the_raw_body(tmp_path, receivers, daemons):
    secret = "s3cr3t-\u00e9-key"
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/signed"),
                                              "secret_env": "LW_TEST_HMAC", "on": ["crashed"]}])
    d = daemons(cfg, port, env={"LW_TEST_HMAC": secret}).start()
    append(log, crash_log())
    got = rx.wait(hook("crashed", "firing"), answered=True, alive=d.dead)[0]
    sig = got.header("X-Logwatch-Signature")
    assert sig is not None, got.headers
    want = "sha256=" + hmac.new(secret.encode(), got.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(sig, want), (sig, want)
    assert got.header("X-Logwatch-Event") == "crashed"
    assert secret not in d.stderr()


# -- 3. Slack: escaping, limits, Block Kit ------------------------------------------------------

EVIL = "<!channel> <https://evil|click> &"
EVIL_ESCAPED = "&lt;!channel&gt; &lt;https://evil|click&gt; &amp;"


def strings(x: Any) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for v in x.values() for s in strings(v)]
    if isinstance(x, list):
        return [s for v in x for s in strings(v)]
    return []


def check_block_kit(body: Any) -> None:
    assert isinstance(body, dict) and set(body) >= {"text", "blocks"}, body
    assert isinstance(body["text"], str) and body["text"]
    assert isinstance(body["blocks"], list) and 1 <= len(body["blocks"]) <= 50
    for b in body["blocks"]:
        assert b["type"] in ("section", "context", "header", "divider"), b
        if b["type"] == "section":
            assert b["text"]["type"] in ("mrkdwn", "plain_text"), b
            assert isinstance(b["text"]["text"], str) and 0 < len(b["text"]["text"]) <= 3000, \
                (b["type"], len(b["text"]["text"]))
        if b["type"] == "header":
            assert b["text"]["type"] == "plain_text" and len(b["text"]["text"]) <= 150
        if b["type"] == "context":
            assert 1 <= len(b["elements"]) <= 10
            for e in b["elements"]:
                assert e["type"] in ("mrkdwn", "plain_text", "image")
                if "text" in e:
                    assert len(e["text"]) <= 3000


def test_slack_escapes_log_text_and_keeps_to_block_kit_limits(tmp_path, receivers, daemons):
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "slack", "url": rx.url("/services/T/B/x"),
                                              "on": ["crashed"]}],
                                  # a label value can be hostile too (shown in the context block)
                                  labels={"model": "Qwen3-235B", "team": "<!here> & co"})
    d = daemons(cfg, port).start()
    head = [
        "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, port=30000)",
        "[2026-01-01 10:00:01 TP0] Init torch distributed begin.",
        "[2026-01-01 10:00:02 TP0] Load weight begin. avail mem=78.50 GB",
        "[2026-01-01 10:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    ]
    frames = [f'  File "/sgl-workspace/sglang/srt/layer{i:04d}.py", line {i}, in forward  # {EVIL} '
              + "x" * 40 for i in range(1000)]
    tail = [f"RuntimeError: {EVIL} boom", "", "```", f"{EVIL} ``` trailing"]
    append(log, "\n".join(head + frames + tail) + "\n")
    assert log.stat().st_size > 100_000
    got = rx.wait(lambda g: g.path == "/services/T/B/x", answered=True, alive=d.dead)[0]
    assert got.method == "POST"
    assert got.header("Content-Type") == "application/json"
    body = json.loads(got.body)   # valid JSON
    check_block_kit(body)
    texts = strings(body)
    joined = "\n".join(texts)
    assert "crashed" in body["text"]
    # the hostile text arrives escaped, and nothing arrives raw, anywhere in the message
    assert EVIL_ESCAPED in joined, joined[:3000]
    assert "RuntimeError: " + EVIL_ESCAPED in joined, "the root-cause line is shown"
    assert "&lt;!here&gt; &amp; co" in joined, "label values are escaped too"
    for s in texts:
        assert "<" not in s and ">" not in s, f"raw < or > in {s[:300]!r}"
        bad = [m.start() for m in re.finditer("&", s) if not re.match(r"&(amp|lt|gt);", s[m.start():])]
        assert not bad, f"raw & in {s[max(0, bad[0] - 40):bad[0] + 40]!r}"
    # the traceback's code fence cannot be closed early by the log's own ```
    for b in body["blocks"]:
        if b["type"] == "section" and "```" in b["text"]["text"]:
            t = b["text"]["text"]
            assert t.count("```") == 2, t[-300:]


def test_slack_shows_the_start_of_a_long_root_cause_line(tmp_path, receivers, daemons):
    """A crash whose exception line is longer than a Slack section (an exception that
    prints the server's arguments, a tensor, a config): the root cause block keeps the
    line's start, where the exception's name and message are, and says it was cut.
    Before, it kept the last 2,990 characters: the page showed only the arguments' end."""
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "slack", "url": rx.url("/services/T/B/x"),
                                              "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    args = ", ".join(f"option_{i}='{'v' * 30} & <more>'" for i in range(300))
    cause = f"ValueError: Invalid server arguments: ServerArgs({args})"
    assert len(cause) > 12_000
    append(log, "\n".join([
        "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1)",
        "[2026-01-01 10:00:01 TP0] Init torch distributed begin.",
        "[2026-01-01 10:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2712, in '
        "run_scheduler_process", cause,
        "[2026-01-01 10:00:04] Received sigquit from a child process. It usually means the "
        "child failed."]) + "\n")
    got = rx.wait(lambda g: g.path == "/services/T/B/x", answered=True, alive=d.dead)[0]
    body = json.loads(got.body)
    check_block_kit(body)
    (root,) = [b["text"]["text"] for b in body["blocks"]
               if b["type"] == "section" and b["text"]["text"].startswith("root cause: ")]
    assert root.startswith("root cause: ```ValueError: Invalid server arguments: ServerArgs("
                           "option_0="), root[:200]
    assert root.endswith("…```"), root[-100:]
    bad = [m.start() for m in re.finditer("&", root) if not re.match(r"&(amp|lt|gt);", root[m.start():])]
    assert not bad and "<" not in root, "cut where an escape is whole"


# -- 4. 429 + Retry-After -----------------------------------------------------------------------

@pytest.mark.parametrize("retry_after", [2, 3])
def test_429_retry_after_is_honoured(tmp_path, receivers, daemons, retry_after):
    calls = {"n": 0}

    def respond(got: Got, rx: Receiver):
        if "crashed" not in got.body.decode("utf-8", "replace"):
            return 200, {}, b"ok"
        calls["n"] += 1
        if calls["n"] == 1:
            return 429, {"Retry-After": str(retry_after)}, b"rate_limited"
        return 200, {}, b"ok"

    rx = receivers(respond)
    cfg, port, state, log = setup(tmp_path, [{"type": "slack", "url": rx.url("/services/T/B/y"),
                                              "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    first, second = rx.wait(lambda g: True, n=2, answered=True, timeout=25, alive=d.dead)[:2]
    assert (first.status, second.status) == (429, 200)
    gap = second.at - first.answered_at
    assert gap >= retry_after - 0.2, f"retried {gap:.2f}s after a 429 with Retry-After: {retry_after}"
    assert gap < retry_after + 3, f"waited {gap:.2f}s after Retry-After: {retry_after}"
    wait_for(lambda: not outbox(state), 10, "the outbox to empty")
    rx.assert_quiet(1.0, what="after the delivery")
    assert len([g for g in rx.requests() if g.status == 200]) == 1
    assert first.body == second.body


@pytest.mark.parametrize("retry_after", ["0", "-30", "Wed, 21 Oct 2015 07:28:00 GMT", "0.01"])
def test_a_retry_after_of_now_or_the_past_is_no_licence_to_hammer(tmp_path, receivers, daemons,
                                                                  retry_after):
    """A receiver (or a proxy in front of it) answering 429 with `Retry-After: 0`, a negative
    number, a date already past (its clock behind ours) or a sub-second fraction: each was
    taken as "retry now", and the worker posted the same page again as fast as the receiver
    answered (thousands of POSTs a minute, each with two saves of the state file), for the
    page's whole max_age.  Such a Retry-After says nothing to wait for: the sink's own
    backoff applies (the first retry 1-2 s later)."""
    window = 3.0
    opened: list[float] = []

    def respond(got: Got, rx: Receiver):
        if not hook("crashed", "firing")(got):
            return 200, {}, b"ok"
        opened.append(got.at) if not opened else None
        if got.at - opened[0] < window:
            return 429, {"Retry-After": retry_after}, b"rate_limited"
        return 200, {}, b"ok"

    rx = receivers(respond)
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    rx.wait(hook("crashed", "firing"), status=200, timeout=30, alive=d.dead)
    refused = rx.requests(lambda g: hook("crashed", "firing")(g) and g.status == 429)
    assert len(refused) <= 4, f"{len(refused)} POSTs answered 429 in {window:g}s: hammered"
    wait_for(lambda: not outbox(state), 10, "the outbox to empty")


# -- 5. kill -9 between detection and delivery ---------------------------------------------------

def outbox_has(state: Path, kind: str) -> bool:
    return any(e["alert"]["kind"] == kind and e["alert"]["status"] == "firing"
               for e in outbox(state))


RETRY_AFTER = 6


@pytest.mark.parametrize("failure", ["500-retry-after", "hanging", "not-listening"])
def test_kill9_before_delivery_delivers_exactly_once_after_restart(tmp_path, receivers, daemons,
                                                                   failure):
    healthy = threading.Event()
    hung = threading.Event()

    def respond(got: Got, rx: Receiver):
        if healthy.is_set():
            return 200, {}, b"ok"
        if failure == "hanging":
            hung.set()
            hold(healthy, rx)
            return 504, {}, b"too late: the sender was killed"
        return 500, {"Retry-After": str(RETRY_AFTER)}, b"down"

    if failure == "not-listening":
        rx = receivers(respond, port=free_port(), start=False)
    else:
        rx = receivers(respond)
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed", "stalled", "ready"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    wait_for(lambda: outbox_has(state, "crashed"), 20, "the crash alert in the outbox",
             alive=d.dead)
    if failure == "500-retry-after":    # one attempt failed; the next is due in RETRY_AFTER s
        first = rx.wait(hook("crashed"), answered=True, alive=d.dead)[0]
        # the answer is saved (queued, due in RETRY_AFTER) before the kill: a kill between the
        # answer and the save leaves it "sending", which is retried at once after a restart
        wait_for(lambda: any(e["alert"]["kind"] == "crashed" and e.get("state") == "queued"
                             and e.get("attempts", 0) >= 1 for e in outbox(state)), 10,
                 "the failed attempt saved in the outbox", alive=d.dead)
    elif failure == "hanging":          # an attempt is in flight, unanswered
        wait_for(hung.is_set, 10, "an attempt in flight", alive=d.dead)
    else:                               # the attempt was refused: counted as a failure
        wait_for(lambda: d.metric("logwatch_alert_failures_total", sink="webhook-0"), 10,
                 "a failed attempt", alive=d.dead)
    d.kill9()
    assert outbox_has(state, "crashed"), "the undelivered alert survived kill -9"
    healthy.set()
    if failure == "not-listening":
        rx.start()

    d.start()
    got = rx.wait(hook("crashed", "firing"), status=200, timeout=25, alive=d.dead,
                  what="the crash alert delivered after the restart")[0]
    if failure == "500-retry-after":
        assert got.at - first.answered_at >= RETRY_AFTER - 0.2, "Retry-After survives a restart"
    wait_for(lambda: not outbox(state), 10, "the outbox to empty", alive=d.dead)
    d.wait_target("t1", lambda t: t["phase"] == "crashed", "crashed")
    # (a fixed quiet time: whether the crash is read again depends on whether a checkpoint
    # past it was written before the kill, which the test does not control)
    rx.assert_quiet(3.5, what="after the delivery (second run)")
    assert len(ok_firing(rx, "crashed")) == 1, rx.brief()

    assert d.stop() == 0
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "crashed", "crashed")
    rx.assert_quiet(3.5, what="on the third run")
    assert len(ok_firing(rx, "crashed")) == 1, rx.brief()
    # nothing else was ever answered 200 (a hanging attempt's late 200 reached no one)
    assert [g for g in rx.requests() if g.status == 200 and not hook("crashed", "firing")(g)] == []


def test_kill9_while_the_crash_settles_still_alerts_after_restart(tmp_path, receivers, daemons):
    """The crash was read and checkpointed, but the daemon died in the ~2 s before its alert
    fired: the restarted daemon must still send it (the crash is in the restored state)."""
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed"]}],
                                  config_extra={"checkpoint": {"interval": "0.2s"}})
    d = daemons(cfg, port).start()
    append(log, crash_log())

    def crashed_checkpoint() -> bool:
        doc = json.loads((state / "positions" / "t1.json").read_text())
        return (doc["extra"]["state"]["phase"] == "crashed"
                and doc["position"]["offset"] == log.stat().st_size)

    # the whole log (the crash's last line included) was read and checkpointed
    wait_for(crashed_checkpoint, 10, "a checkpoint at the end of the log, in phase crashed",
             interval=0.01, alive=d.dead)
    assert not outbox_has(state, "crashed") and not rx.requests(), \
        "the test was too slow: the alert fired before the kill"
    d.kill9()
    d.start()
    rx.wait(hook("crashed", "firing"), answered=True, timeout=15, alive=d.dead,
            what="the crash alert after the restart")
    rx.assert_quiet(3.5, what="after the delivery")
    assert len(ok_firing(rx, "crashed")) == 1


# -- 6. stalled, resolved, ready; a crash suppresses an undelivered stall -------------------------

def stall_prefix() -> tuple[str, list[str]]:
    """Server args ... Load weight begin ... shard bar at 5/24; and the rest of the startup."""
    texts = sim_texts(serve_lines=0)
    cut = split_at(texts, "| 5/24 ")
    return "".join(texts[:cut + 1]), texts[cut + 1:]


def test_stalled_fires_then_resolves_when_ready(tmp_path, receivers, daemons):
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed", "stalled", "ready"]}],
                                  stall_after="2s")
    d = daemons(cfg, port).start()
    head, rest = stall_prefix()
    append(log, head)
    written = time.monotonic()
    d.wait_target("t1", lambda t: t["phase"] == "loading_shards", "loading_shards")
    fired = rx.wait(hook("stalled", "firing"), answered=True, timeout=15, alive=d.dead)[0]
    assert fired.at - written >= 1.9, "stalled only after stall_after (2s) of silence"
    f = fired.json
    assert f["details"]["phase"] == "loading_shards", f
    assert f["details"]["silent_for"] >= 2.0 - 0.01, f
    assert "loading_shards" in f["summary"]
    assert d.target("t1")["stalled"] is True

    append(log, "".join(rest))
    resolved = rx.wait(hook("stalled", "resolved"), answered=True, timeout=15, alive=d.dead)[0].json
    ready = rx.wait(hook("ready", "firing"), answered=True, timeout=15, alive=d.dead)[0].json
    assert resolved["dedupe_key"] == f["dedupe_key"]
    assert resolved["ends_at"] and ISO.match(resolved["ends_at"])
    assert resolved["starts_at"] == f["starts_at"]
    assert ready["details"]["took"] is not None
    assert ready["dedupe_key"] != f["dedupe_key"]
    wait_for(lambda: not outbox(state), 10, "the outbox to empty")
    rx.assert_quiet(1.0, what="after ready")
    assert sorted((g.json["kind"], g.json["status"]) for g in rx.requests()) == \
        [("ready", "firing"), ("stalled", "firing"), ("stalled", "resolved")], rx.brief()


def test_crash_suppresses_an_undelivered_stall(tmp_path, receivers, daemons):
    def respond(got: Got, rx: Receiver):
        if hook("stalled")(got):
            return 500, {"Retry-After": "30"}, b"down for stalls"
        return 200, {}, b"ok"

    rx = receivers(respond)
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed", "stalled", "ready"]}],
                                  stall_after="2s")
    d = daemons(cfg, port).start()
    head, _ = stall_prefix()
    append(log, head)
    rx.wait(hook("stalled", "firing"), answered=True, timeout=15, alive=d.dead)
    assert outbox_has(state, "stalled")
    append(log, "\n[2026-01-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 412, in load_model\n'
                "    param.data.copy_(loaded_weight)\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                "capacity of 79.11 GiB of which 1.12 GiB is free.\n")
    crash = rx.wait(hook("crashed", "firing"), answered=True, timeout=15, alive=d.dead)[0].json
    assert crash["details"]["reason"] == "cuda_oom"
    assert crash["details"]["during"] == "loading_shards"
    rx.assert_quiet(2.0, hook("stalled"), "for the suppressed stall")
    stalls = rx.requests(hook("stalled"))
    assert [(g.json["status"], g.status) for g in stalls] == [("firing", 500)], \
        f"an undelivered stall is dropped, not sent nor resolved: {rx.brief(stalls)}"
    assert not any(e["alert"]["kind"] == "stalled" for e in outbox(state)), outbox(state)


def test_a_crash_resolves_a_stall_one_receiver_had_while_another_was_down(tmp_path,
                                                                        receivers, daemons):
    """Two sinks take `stalled`: the pager got the stall, the other receiver is down (503).
    The crash that follows drops the stall still queued for the down one (it never had it),
    and resolves it at the pager.  Before, the open stall was dropped with that entry: the
    pager never heard of it again (Alertmanager: LogwatchStalled active a day, beside the
    crash and the ready after it)."""
    pager = receivers()
    down = receivers(lambda got, rx: (503, {"Retry-After": "30"}, b"down"))
    cfg, port, state, log = setup(tmp_path, [
        {"type": "webhook", "url": pager.url("/pager"), "on": ["crashed", "stalled"]},
        {"type": "webhook", "url": down.url("/relay"), "on": ["stalled"]}], stall_after="2s")
    d = daemons(cfg, port).start()
    head, _ = stall_prefix()
    append(log, head)
    fired = pager.wait(hook("stalled", "firing"), answered=True, timeout=15, alive=d.dead)[0]
    down.wait(hook("stalled", "firing"), answered=True, timeout=15, alive=d.dead)
    append(log, "\n[2026-01-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 412, in load_model\n'
                "    param.data.copy_(loaded_weight)\n"
                f"{OOM_LINE}. GPU 0 has a total capacity of 79.11 GiB of which 1.12 GiB is free.\n")
    pager.wait(hook("crashed", "firing"), answered=True, timeout=15, alive=d.dead)
    got = pager.wait(hook("stalled", "resolved"), answered=True, timeout=10, alive=d.dead)
    assert got[0].json["dedupe_key"] == fired.json["dedupe_key"]
    wait_for(lambda: not outbox(state), 10, "the outbox to empty (the down one's stall dropped)")
    assert [g.json["status"] for g in down.requests(hook("stalled"))] == ["firing"], down.brief()


# -- 7. SIGHUP and restart send nothing twice ------------------------------------------------

def reloads(d) -> list[dict[str, Any]]:
    return [e for e in d.log_events() if e.get("event") == "reloaded"]


def test_sighup_and_restart_send_nothing_again(tmp_path, receivers, daemons):
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed", "stalled", "ready", "restarted"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    rx.wait(hook("crashed", "firing"), answered=True, timeout=15, alive=d.dead)
    append(log, ready_log(T0 + 600))
    for kind, status in (("ready", "firing"), ("crashed", "resolved")):
        rx.wait(hook(kind, status), answered=True, timeout=15, alive=d.dead)
    wait_for(lambda: not outbox(state), 10, "the outbox to empty")
    rx.assert_quiet(2.5, what="before the SIGHUP")
    sent = rx.brief()
    assert len(rx.requests(hook("crashed", "firing"))) == 1
    assert len(rx.requests(hook("ready", "firing"))) == 1

    d.signal(signal.SIGHUP)   # the same config
    wait_for(lambda: len(reloads(d)) == 1, 10, "the reload", alive=d.dead)
    rx.assert_quiet(3.0, what="after a SIGHUP with the same config")

    # a changed target restarts from its checkpoint: still nothing twice
    cfg.write_text(cfg.read_text().replace("rules: sglang", "rules: sglang\n  stall_after: 10m"))
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(reloads(d)) == 2, 10, "the second reload", alive=d.dead)
    assert reloads(d)[1].get("restarted") == ["t1"], reloads(d)[1]
    rx.assert_quiet(3.0, what="after a SIGHUP that restarted the target")

    assert d.stop() == 0
    d.start()
    d.wait_target("t1", lambda t: t["phase"] == "ready", "ready")
    rx.assert_quiet(3.5, what="after a daemon restart")
    assert rx.brief() == sent


def test_a_queued_alert_stays_with_its_receiver_across_renames_and_reorders(
        tmp_path, receivers, daemons):
    """A crash alert waits in the outbox for a receiver that is down.  The operator puts a
    new sink before it (so its default name `webhook-0` passes to the new one, which takes
    no alert of this target) and SIGHUPs: the alert still goes to its receiver, once, and
    not to the new sink.  Then a second crash waits, its sink is removed: dropped, said and
    counted.  Before: the first went to the new sink despite its filter, and a renamed or
    removed sink's alerts were emptied from the outbox with nothing said."""
    up = threading.Event()
    old = receivers(lambda got, rx: (200, {}, b"ok") if up.is_set() else (503, {}, b"down"))
    new = receivers()
    hooks = {"crashed": {"type": "webhook", "url": old.url("/hook"), "on": ["crashed"]},
             "other": {"type": "webhook", "url": new.url("/hook"), "on": ["crashed"],
                       "targets": {"name": "nomatch"}}}
    cfg, port, state, log = setup(tmp_path, [hooks["crashed"]])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    old.wait(hook("crashed", "firing"), timeout=15, alive=d.dead)     # refused: it waits
    assert [e["sink"] for e in outbox(state)] == ["webhook-0"]
    write_config(cfg, port, state, [target("t1", log, labels={"model": "Qwen3-235B"})],
                 alerts=[hooks["other"], hooks["crashed"]])
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(reloads(d)) == 1, 10, "the reload", alive=d.dead)
    assert [e["sink"] for e in outbox(state)] == ["webhook-1"]
    up.set()
    wait_for(lambda: not outbox(state), 30, "the alert delivered", alive=d.dead)
    assert len(ok_firing(old, "crashed")) == 1 and new.requests() == []
    # a second crash waits; its sink is removed
    up.clear()
    append(log, "".join(sim_texts(crash="oom", start=T0 + 600))   # another reason: paged
           .replace(OOM_LINE + ".", NCCL_LINE))
    wait_for(lambda: len(outbox(state)) == 1, 15, "the second crash queued", alive=d.dead)
    write_config(cfg, port, state, [target("t1", log, labels={"model": "Qwen3-235B"})],
                 alerts=[hooks["other"]])
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(reloads(d)) == 2, 10, "the second reload", alive=d.dead)
    assert outbox(state) == []
    dropped = [e for e in d.log_events() if e.get("event", "").startswith("undelivered alert")]
    assert [(e["sink"], e["kind"]) for e in dropped] == [("webhook-1", "crashed")], dropped
    assert d.metric("logwatch_alerts_dropped_total", kind="crashed") == 1.0
    assert d.metric("logwatch_alerts_sent_total", kind="crashed", sink="webhook-1") is None
    assert d.metric("logwatch_alert_failures_total", sink="webhook-1") is None


def test_a_page_behind_one_in_flight_goes_when_it_ends_though_a_reload_renamed_its_sink(
        tmp_path, receivers, daemons):
    """A crash page on its way to a slow receiver, its resolution queued behind it (the
    relaunch's ready), and a SIGHUP that adds a sink at the top of `alerts:` (so the
    receiver's sink, named by its place, is `webhook-1` now): when the POST ends, the
    resolution goes.  Before, the end of a POST woke the worker of the sink's old name, and
    the new name's worker, which had found that server busy, slept until something else
    woke it: the resolution waited up to an hour (3600 s).  Both are counted under the
    sink's new name; before, the POST under way at the reload was counted under its old
    one, `webhook-0`, now the added sink's, which never had a crash page."""
    release = threading.Event()

    def respond(got: Got, rx: Receiver):
        if hook("crashed", "firing")(got):
            hold(release, rx)
        return 200, {}, b"ok"

    rx = receivers(respond)
    other = receivers()
    sink = {"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"], "timeout": "30s"}
    cfg, port, state, log = setup(tmp_path, [sink])
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, crash_log())
    rx.wait(hook("crashed", "firing"), timeout=30, alive=d.dead)       # held there
    append(log, ready_log(start=T0 + 3600))
    wait_for(lambda: any(e["alert"]["status"] == "resolved" for e in outbox(state)), 15,
             "the crash's resolution queued behind its firing", alive=d.dead)
    write_config(cfg, port, state, [target("t1", log, labels={"model": "Qwen3-235B"})],
                 alerts=[{"type": "webhook", "url": other.url("/other"), "on": ["ready"]}, sink])
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(reloads(d)) == 1, 10, "the reload", alive=d.dead)
    release.set()
    rx.wait(hook("crashed", "firing"), answered=True, timeout=10, alive=d.dead)
    got = rx.wait(hook("crashed", "resolved"), answered=True, timeout=10, alive=d.dead)
    assert got[0].json["dedupe_key"] == rx.requests()[0].json["dedupe_key"]
    assert len(rx.requests(hook("crashed", "firing"))) == 1, rx.brief()
    d.wait_metric("logwatch_alerts_sent_total", 2.0, sink="webhook-1", kind="crashed")
    assert d.metric("logwatch_alerts_sent_total", sink="webhook-0", kind="crashed") is None


def test_a_removed_targets_open_alerts_are_resolved_once(tmp_path, receivers, daemons):
    """An open alert (a crash, waiting for the next ready) of a target removed from the
    config: resolved at the reload, once, saying why; not again after a restart.  Before,
    it stayed open for ever (state.json's `open`), and no receiver heard of it again."""
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    rx.wait(hook("crashed", "firing"), answered=True, timeout=15, alive=d.dead)
    other = tmp_path / "other.log"
    other.write_text("")
    write_config(cfg, port, state, [target("t2", other)],
                 alerts=[{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}])
    d.signal(signal.SIGHUP)
    got = rx.wait(hook("crashed", "resolved", "t1"), answered=True, timeout=15, alive=d.dead)
    assert "no longer watched: removed from the config" in got[0].json["summary"], got[0].json
    assert d.stop() == 0
    d.start()
    d.wait_target("t2", lambda t: t["source_state"]["up"], "t2 reading")
    rx.assert_quiet(2.0, hook("crashed"), what="after a restart")
    assert len(rx.requests(hook("crashed", "resolved"))) == 1


def test_a_resolution_reaches_a_sink_routed_elsewhere_since_its_firing(tmp_path, receivers,
                                                                       daemons):
    """A crash paged to a sink; a SIGHUP routes the target away from it (`targets:`); the
    relaunch's ready resolves the crash: the receiver that had the firing gets its
    resolution.  Before, the sink no longer took the target, so the crash stayed open there
    for good (in Alertmanager until its endsAt, a day)."""
    rx = receivers()
    sinks = [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}]
    cfg, port, state, log = setup(tmp_path, sinks)
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, crash_log())
    rx.wait(hook("crashed", "firing"), answered=True, timeout=30, alive=d.dead)
    other = tmp_path / "other.log"
    other.write_text("")
    write_config(cfg, port, state, [target("t1", log, labels={"model": "Qwen3-235B"}),
                                    target("t2", other)],
                 alerts=[{**sinks[0], "targets": {"name": "t2"}}])
    d.signal(signal.SIGHUP)
    d.wait_target("t2", lambda t: t["source_state"]["up"], "t2 reading (the reload done)")
    append(log, ready_log(start=T0 + 3600))
    got = rx.wait(hook("crashed", "resolved"), answered=True, timeout=30, alive=d.dead)
    assert "ready again" in got[0].json["summary"], got[0].json


@pytest.mark.parametrize("how", ["sighup", "restart"])
def test_a_renamed_target_keeps_its_open_crash_neither_resolved_nor_paged_again(
        tmp_path, receivers, daemons, how):
    """A crashed server's target renamed in the config (a typo fixed, a naming scheme),
    its source unchanged, at a SIGHUP or across a restart: the crash stays open, is not
    paged again, and the next ready resolves it once, with the key the receiver had.
    Before: `resolved: ... (no longer watched: removed from the config)` while the server
    was still down, then the same crash paged again as `t1-renamed`.  The new name goes on
    from the old one's checkpoint (its lines counted on, none read again)."""
    rx = receivers()
    sinks = [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}]
    cfg, port, state, log = setup(tmp_path, sinks)
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    append(log, crash_log())
    fired = rx.wait(hook("crashed", "firing"), answered=True, timeout=30, alive=d.dead)[0]
    write_config(cfg, port, state, [target("t1-renamed", log, labels={"model": "Qwen3-235B"})],
                 alerts=sinks)
    if how == "sighup":
        d.signal(signal.SIGHUP)
    else:
        assert d.stop() == 0
        d.start()
    wait_for(lambda: [e for e in d.log_events() if e.get("event") ==
                      "target renamed: its checkpoint goes with it"
                      and (e["was"], e["now"]) == ("t1", "t1-renamed")],
             15, "the checkpoint carried to the new name", alive=d.dead)
    d.wait_lines("t1-renamed", count_lines(log), timeout=15)   # went on: nothing read again
    rx.assert_quiet(1.0, hook("crashed"), what="after the rename")
    append(log, ready_log(start=T0 + 3600))
    got = rx.wait(hook("crashed", "resolved"), answered=True, timeout=30, alive=d.dead)[0]
    assert "ready again" in got.json["summary"], got.json
    assert got.json["dedupe_key"] == fired.json["dedupe_key"], "the alert the receiver had"
    rx.assert_quiet(1.0, hook("crashed"), what="after the resolution")
    assert len(rx.requests(hook("crashed"))) == 2, rx.brief()


def test_two_targets_that_swap_names_keep_each_servers_open_crash(tmp_path, receivers,
                                                                  daemons):
    """Two crashed servers whose targets swap names at a SIGHUP (the names were on the wrong
    logs): each crash is its server's, so it is not paged again under the other name, and
    the ready of the server first paged as `t1` resolves that page (its key).  Before, both
    names were still watched, so each open crash stayed with its name and not its server:
    both crashes paged again under the other name, and a ready of either server resolved
    the other one's crash."""
    rx = receivers()
    sinks = [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}]
    cfg, port, state, log1 = setup(tmp_path, sinks)
    log2 = tmp_path / "server2.log"
    log2.write_text("")
    write_config(cfg, port, state, [target("t1", log1), target("t2", log2)], alerts=sinks)
    d = daemons(cfg, port).start()
    d.wait_reading("t1")
    d.wait_reading("t2")
    append(log1, crash_log())
    append(log2, "".join(sim_texts(crash="oom", start=T0 + 600)))
    fired = {g.json["target"]: g.json for g in
             rx.wait(hook("crashed", "firing"), n=2, answered=True, timeout=30, alive=d.dead)}
    assert set(fired) == {"t1", "t2"}, rx.brief()
    write_config(cfg, port, state, [target("t1", log2), target("t2", log1)], alerts=sinks)
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(reloads(d)) == 1, 10, "the reload", alive=d.dead)
    d.wait_lines("t1", count_lines(log2), timeout=15)
    d.wait_lines("t2", count_lines(log1), timeout=15)
    rx.assert_quiet(1.5, hook("crashed"), what="after the swap")
    append(log1, ready_log(start=T0 + 3600))     # the server first paged as t1, now t2
    got = rx.wait(hook("crashed", "resolved"), answered=True, timeout=30, alive=d.dead)
    assert [g.json["dedupe_key"] for g in got] == [fired["t1"]["dedupe_key"]], rx.brief()
    rx.assert_quiet(1.0, hook("crashed"), what="after the resolution")
    assert len(rx.requests(hook("crashed"))) == 3, rx.brief()


def test_alert_state_entries_of_the_wrong_shape_are_left_out_not_a_crash_loop(
        tmp_path, receivers, daemons):
    """alerts/state.json that parses but holds entries this version never writes (an open
    alert that is a number, one without its target, an outbox entry without its sink: a
    hand edit, a bit flip, a partial restore).  Before, the daemon exited 1 at every start
    (`KeyError: 'target'`: a crash loop under systemd, every target unwatched); now those
    entries are left out and said, the file kept aside as it was, and the good open alert
    beside them still resolved once its target is removed."""
    rx = receivers()
    sinks = [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}]
    cfg, port, state, log = setup(tmp_path, sinks)
    d = daemons(cfg, port).start()
    append(log, crash_log())
    rx.wait(hook("crashed", "firing"), answered=True, timeout=15, alive=d.dead)
    assert d.stop() == 0
    path = state / "alerts" / "state.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert len(doc["open"]) == 1, doc["open"]
    doc["open"].update({"bad-number": 5, "bad-no-target": {"kind": "crashed", "key": "x"}})
    doc["outbox"].append({"id": 1, "alert": {"key": "y"}})
    path.write_text(json.dumps(doc), encoding="utf-8")
    other = tmp_path / "other.log"
    other.write_text("")
    write_config(cfg, port, state, [target("t2", other)], alerts=sinks)
    d.start()
    got = rx.wait(hook("crashed", "resolved", "t1"), answered=True, timeout=15, alive=d.dead)
    assert "no longer watched" in got[0].json["summary"], got[0].json
    said = [e for e in d.log_events() if "wrong shape" in e.get("event", "")]
    assert said and said[0]["open_left_out"] == 2 and said[0]["outbox_left_out"] == 1, said
    assert json.loads((state / "alerts" / "state.json.corrupt").read_text())["open"]["bad-number"] == 5
    assert d.stop() == 0


# -- 8. logwatch alerts test --------------------------------------------------------------------

def run_alerts_test(cfg: Path, kind: str = "crashed") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logwatch", "alerts", "test", "-c", str(cfg),
                           "--kind", kind], cwd=ROOT, capture_output=True, text=True, timeout=40,
                          stdin=subprocess.DEVNULL)


def test_alerts_test_sends_one_sample_per_sink_and_never_prints_the_url_path(tmp_path, receivers):
    fail = {"slack": 0}

    def slack(got: Got, rx: Receiver):
        return (fail["slack"] or 200), {}, b"ok" if not fail["slack"] else b"no"

    rs, rw = receivers(slack), receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    cfg = write_config(tmp_path / "logwatch.yaml", free_port(), tmp_path / "state",
                       [target("t1", log)],
                       [{"type": "slack", "url": rs.url("/services/T000/SECRET-TOKEN"),
                         "on": ["crashed"]},
                        {"type": "webhook", "url": rw.url("/hook?token=QUERY-TOKEN"),
                         "on": ["ready"]}])

    def no_secret(p: subprocess.CompletedProcess[str]) -> None:
        out = p.stdout + p.stderr
        for s in ("SECRET-TOKEN", "/services/T000", "QUERY-TOKEN", "token="):
            assert s not in out, f"{s!r} printed:\n{out}"

    p = run_alerts_test(cfg)
    assert p.returncode == 0, p.stdout + p.stderr
    no_secret(p)
    assert len(rs.requests()) == 1 and len(rw.requests()) == 1, (rs.brief(), rw.brief())
    assert rs.requests()[0].path == "/services/T000/SECRET-TOKEN"
    check_block_kit(rs.requests()[0].json)
    w = rw.requests()[0]
    assert w.path == "/hook?token=QUERY-TOKEN"
    assert w.json["kind"] == "crashed" and w.json["version"] == 1, "every sink gets the sample"
    assert "[test]" in w.json["summary"]

    for code in (500, 404):   # a sink fails: exit 1, still no URL path in the output
        fail["slack"] = code
        p = run_alerts_test(cfg)
        assert p.returncode == 1, (code, p.stdout + p.stderr)
        no_secret(p)
        assert len(rw.requests()) == 2 + (code == 404), "the other sink still gets its sample"

    # a sink that is not listening: exit 1, no URL path
    dead = free_port()
    cfg2 = write_config(tmp_path / "dead.yaml", free_port(), tmp_path / "state", [target("t1", log)],
                        [{"type": "slack", "url": f"http://127.0.0.1:{dead}/services/T000/SECRET-TOKEN"}])
    p = run_alerts_test(cfg2)
    assert p.returncode == 1, p.stdout + p.stderr
    no_secret(p)


def raw_http_server(answer: bytes) -> tuple[int, threading.Event]:
    """A loopback TCP server that answers every connection with `answer` (raw bytes)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                c.settimeout(2)
                try:
                    c.recv(65536)
                    c.sendall(answer)
                except OSError:
                    pass
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1], stop


def test_alerts_test_never_prints_the_url_path_even_when_the_http_client_fails(tmp_path, receivers):
    """aiohttp's own errors (a redirect loop, a malformed response from a broken proxy) carry
    the full request URL in their message: the report must not print it."""
    loop = receivers(lambda g, rx: (302, {"Location": g.path}, b""))
    bad_port, stop = raw_http_server(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n")
    try:
        log = tmp_path / "server.log"
        log.write_text("")
        cfg = write_config(tmp_path / "logwatch.yaml", free_port(), tmp_path / "state",
                           [target("t1", log)],
                           [{"type": "webhook", "url": loop.url("/services/T000/SECRET-TOKEN")},
                            {"type": "slack",
                             "url": f"http://127.0.0.1:{bad_port}/services/T000/SECRET-TOKEN"}])
        p = run_alerts_test(cfg)
    finally:
        stop.set()
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert len(out.strip().splitlines()) == 2, out
    assert "SECRET-TOKEN" not in out and "/services/T000" not in out, out


def test_daemon_log_never_shows_the_url_path_when_the_http_client_fails(tmp_path, receivers,
                                                                         daemons):
    loop = receivers(lambda g, rx: (302, {"Location": g.path}, b""))
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "on": ["crashed"],
                                              "url": loop.url("/services/T000/SECRET-TOKEN"),
                                              "max_attempts": 1}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    wait_for(lambda: d.metric("logwatch_alert_failures_total", sink="webhook-0"), 20,
             "the failed delivery", alive=d.dead)
    wait_for(lambda: "alert not delivered" in d.stderr(), 5, "the failure logged")
    err = d.stderr()
    assert "SECRET-TOKEN" not in err and "/services/T000" not in err, \
        [ln for ln in err.splitlines() if "SECRET-TOKEN" in ln]


# -- 9. routing ---------------------------------------------------------------------------------

def test_routing_by_kind_and_by_target_labels(tmp_path, receivers, daemons):
    only_ready, glm_only, everything = receivers(), receivers(), receivers()
    logs = {n: tmp_path / f"{n}.log" for n in ("glm", "qwen")}
    for p in logs.values():
        p.write_text("")
    port = free_port()
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("glm", logs["glm"], labels={"model": "GLM-5-NVFP4"}),
                        target("qwen", logs["qwen"], labels={"model": "Qwen3-235B"})],
                       [{"type": "webhook", "name": "ready-only", "url": only_ready.url("/r"),
                         "on": ["ready"]},
                        {"type": "webhook", "name": "glm", "url": glm_only.url("/g"),
                         "targets": {"model": "GLM-.*"}},
                        {"type": "webhook", "name": "all", "url": everything.url("/a"),
                         "on": ["crashed", "stalled", "ready"]}])
    d = daemons(cfg, port).start()
    for p in logs.values():
        append(p, crash_log())
    for n in logs:
        everything.wait(hook("crashed", "firing", n), answered=True, timeout=15, alive=d.dead)
    for p in logs.values():
        append(p, ready_log(T0 + 600))
    for n in logs:
        everything.wait(hook("ready", "firing", n), answered=True, timeout=15, alive=d.dead)
        only_ready.wait(hook("ready", "firing", n), answered=True, timeout=15, alive=d.dead)
    glm_only.wait(hook("ready", "firing", "glm"), answered=True, timeout=15, alive=d.dead)
    glm_only.wait(hook("crashed", "firing", "glm"), answered=True, timeout=15, alive=d.dead)
    wait_for(lambda: not outbox(state), 10, "the outbox to empty")
    for rx in (only_ready, glm_only, everything):
        rx.assert_quiet(0.5)

    assert sorted((g.json["kind"], g.json["target"]) for g in only_ready.requests()) == \
        [("ready", "glm"), ("ready", "qwen")], only_ready.brief()
    assert {g.json["target"] for g in glm_only.requests()} == {"glm"}, glm_only.brief()
    assert {(g.json["kind"], g.json["status"]) for g in glm_only.requests()} >= \
        {("crashed", "firing"), ("ready", "firing")}
    assert {g.json["target"] for g in everything.requests(hook("crashed", "firing"))} == \
        {"glm", "qwen"}


# -- extra: a crash followed at once by a new startup ------------------------------------------

def crash_then_restart_at_once(tmp_path, receivers, daemons):
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed", "ready"]}])
    d = daemons(cfg, port).start()
    append(log, crash_log())
    d.wait_target("t1", lambda t: t["phase"] == "crashed", "crashed")
    append(log, ready_log(T0 + 600))   # the supervisor's new server, within a second or two
    rx.wait(hook("ready", "firing"), answered=True, timeout=15, alive=d.dead)
    d.wait_target("t1", lambda t: t["phase"] == "ready", "ready")
    return rx, d


def test_crash_followed_at_once_by_a_restart_is_still_alerted(tmp_path, receivers, daemons):
    """A supervisor restarts the server at once: the new `server_args=` arrives inside the
    router's 2 s crash-settle window.  The crash must still be alerted."""
    rx, d = crash_then_restart_at_once(tmp_path, receivers, daemons)
    rx.wait(hook("crashed", "firing"), answered=True, timeout=5, alive=d.dead,
            what="the crash alert of the first startup")


def test_crash_followed_at_once_by_a_restart_is_still_counted(tmp_path, receivers, daemons):
    rx, d = crash_then_restart_at_once(tmp_path, receivers, daemons)
    assert d.metric("logwatch_startups_total", target="t1") == 2
    assert d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom") == 1


@pytest.mark.parametrize("ended", ["crashed", "ready"])
def test_a_startup_that_ended_before_the_daemon_attached_is_history(tmp_path, receivers, daemons,
                                                                    ended):
    """The log's latest startup ended 36 minutes before the daemon first read it: shown as
    seen at attach, never alerted; the next startup in the same log is news again."""
    rx = receivers()
    cfg, port, state, log = setup(tmp_path, [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed", "ready"]}])
    append(log, crash_log() if ended == "crashed" else ready_log())
    old = time.time() - 36 * 60
    os.utime(log, (old, old))
    d = daemons(cfg, port).start()
    t = d.wait_target("t1", lambda t: t.get("seen_at_attach"), "the ended startup, seen at attach")
    seen = t["seen_at_attach"]
    assert seen["phase"] == ended and seen["ago"] >= 36 * 60 - 5, seen
    assert seen["startup_id"] == t["startup_id"]
    assert t["catching_up"] is False
    rx.assert_quiet(3.5, what="for a startup that ended before the attach")  # > crash settling
    assert rx.requests() == []

    append(log, ready_log(start=T0 + 7200))        # the server is launched again
    got = rx.wait(hook("ready", "firing"), status=200, timeout=20, alive=d.dead)[0]
    assert got.json["details"]["took"] is not None
    t = d.wait_target("t1", lambda t: t["phase"] == "ready" and not t["seen_at_attach"],
                      "the new startup ready")
    rx.assert_quiet(1.0, what="after the new startup's ready")
    assert [(g.json["kind"], g.json["status"]) for g in rx.requests()] == [("ready", "firing")]


@pytest.mark.parametrize("rules", ["sglang", "auto"])
def test_a_command_s_printed_history_is_not_news(tmp_path, receivers, daemons, rules):
    """`cmd:docker logs -f NAME` prints the container's whole log, then follows it (here
    `tail -n +1 -f`): what it printed before its first pause is read as a log met for the
    first time, from its latest launch.  An old launch's crash in it is not paged, nor a
    `restarted`; a crash written later is.  Before: the old crash paged at once, then
    `restarted`, and the latest launch's lines after them."""
    rx = receivers()
    log = tmp_path / "container.log"
    log.write_text(crash_log() + ready_log(T0 + 3600))
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", f"cmd:tail -n +1 -f {log}", rules=rules)],
                       [{"type": "webhook", "url": rx.url("/hook"),
                         "on": ["crashed", "restarted"]}])
    d = daemons(cfg, port).start()
    t = d.wait_target("t1", lambda t: t["phase"] == "ready" and not t["catching_up"],
                      "the latest launch, ready")
    assert t["startups"] == 1 and t["lines"] == ready_log(T0 + 3600).count("\n")
    rx.assert_quiet(3.5, what="for the launches the command printed before we looked")
    append(log, serving_crash())
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead)
    rx.assert_quiet(1.0, what="after the new crash")
    assert [g.json["kind"] for g in rx.requests()] == ["crashed"]


def kubectl_stamped(text: str, at: float) -> str:
    """`text`'s lines as `kubectl logs --timestamps` prints them, the first written at `at`
    (a wall time), each 10 ms after the one before."""
    return "".join(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at + i * 0.01)) +
                   f".{int((at + i * 0.01) % 1 * 1e9):09d}Z " + line
                   for i, line in enumerate(text.splitlines(True)))


@pytest.mark.parametrize("age", [2 * 86400.0, 0.0, 90.0])
def test_a_command_s_old_crash_dated_by_its_wrapper_s_stamps_is_history(tmp_path, receivers,
                                                                         daemons, age):
    """`cmd:kubectl logs -f --timestamps POD` whose latest startup crashed two days ago: a
    command has no file time, so its absolute RFC 3339 stamps (`...Z`) date the log's last
    write.  Before, the crash was paged as news and counted at the first attach (idle 0, a
    gap of 0 with the crash the last line).  A crash stamped seconds ago is paged, once; so is
    one stamped 90 s ago (the node's clock may be behind ours: STAMP_CLOCK_MARGIN)."""
    rx = receivers()
    log = tmp_path / "pod.log"
    text = crash_log()
    log.write_text(kubectl_stamped(text, time.time() - age - text.count("\n") * 0.01))
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", f"cmd:tail -n +1 -f {log}")],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    if age > 3600:
        t = d.wait_target("t1", lambda t: t.get("seen_at_attach"), "the old crash, seen at attach")
        assert t["seen_at_attach"]["phase"] == "crashed", t["seen_at_attach"]
        assert t["seen_at_attach"]["ago"] >= age - 400, t["seen_at_attach"]
        rx.assert_quiet(3.5, what="for a crash of two days ago")      # > crash settling
        assert rx.requests() == []
        assert not d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom")
    else:
        rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead)
        rx.assert_quiet(1.0, what="after the fresh crash")
        assert [g.json["kind"] for g in rx.requests()] == ["crashed"]
        assert d.metric("logwatch_crashes_total", target="t1", reason="cuda_oom") == 1


def test_a_busy_command_s_history_is_read_and_its_endpoint_waits_for_it(tmp_path, receivers,
                                                                        daemons):
    """`cmd:kubectl logs -f POD` of a busy server: its history (an old launch that crashed,
    then the one that serves), then a decode line every 0.2 s (SGLang under load:
    scheduler_components/metrics_reporter.py:934), never a 2 s pause.  The history ends
    HISTORY_LOOK (5 s) after its first byte; the endpoint, answering all along, says nothing
    while it is held.  Before (adv26 cmd_busy, k8s_cmd): 0 lines read; `ready (no ready line
    in the log; the endpoint answers)` for no launch, then `restarted` and a second `ready`."""
    rx, health = receivers(), receivers()
    log = tmp_path / "container.log"
    log.write_text(crash_log() + ready_log(T0 + 3600))
    busy = tmp_path / "busy.sh"
    busy.write_text(f"cat {log}\nwhile :; do echo '[2026-01-01 11:00:47 TP0] Decode batch, "
                    "#running-req: 3, gen throughput (token/s): 1000.00, #queue-req: 0'; "
                    "sleep 0.2; done\n")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", f"cmd:sh {busy}", probe={
                           "url": health.url("/health"), "interval": "1s", "timeout": "1s"})],
                       [{"type": "webhook", "url": rx.url("/hook"),
                         "on": ["crashed", "restarted", "ready"]}])
    d = daemons(cfg, port).start()
    t = d.wait_target("t1", lambda t: t["lines"] > ready_log().count("\n") + 3, "lines read",
                      timeout=15)
    assert t["startups"] == 1 and t["phase"] == "ready", t
    got = rx.wait(hook("ready", "firing"), status=200, timeout=10, alive=d.dead)[0]
    assert "endpoint answers" not in got.json["summary"], got.json["summary"]
    rx.assert_quiet(2.5, what="after the latest launch's ready")
    assert [g.json["kind"] for g in rx.requests()] == ["ready"]


def test_a_daemon_restarted_under_a_command_reads_on_where_it_stopped(tmp_path, receivers,
                                                                     daemons):
    """A daemon stopped and started again under `cmd:docker logs -f NAME` (here `tail -n +1
    -f`), which prints the whole log again: read on from the checkpoint once the output is
    the same up to it (the hash of the bytes before it): every line once, one startup, each
    alert once.  Before: the reprint read again on top of the restored state: 2 startups,
    twice the lines, a false `restarted` and `ready`."""
    rx = receivers()
    log = tmp_path / "container.log"
    log.write_text(ready_log(T0))
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", f"cmd:tail -n +1 -f {log}")],
                       [{"type": "webhook", "url": rx.url("/hook"),
                         "on": ["crashed", "restarted", "ready"]}])
    d = daemons(cfg, port).start()
    first = d.wait_target("t1", lambda t: t["phase"] == "ready" and not t["catching_up"],
                          "ready")["lines"]       # (from the launch line: the latest startup)
    append(log, "".join(f"[2026-01-01 10:30:{i:02d}] serving line {i}\n" for i in range(5)))
    truth = first + 5
    d.wait_target("t1", lambda t: t["lines"] == truth, "every line")
    assert d.stop() == 0
    append(log, "".join(f"[2026-01-01 10:31:{i:02d}] written while down {i}\n" for i in range(5)))
    d.start()
    truth += 5
    t = d.wait_target("t1", lambda t: t["lines"] >= truth, "the lines written while down")
    rx.assert_quiet(2.5, what="after the daemon's restart")
    t = d.target("t1")
    assert t is not None and (t["lines"], t["startups"], t["phase"]) == (truth, 1, "ready"), t
    assert d.metric("logwatch_lines_total", target="t1") == truth
    append(log, serving_crash())
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead)
    # the first start's `ready` (a command's history has no file time to date it: news), once
    assert [g.json["kind"] for g in rx.requests()] == ["ready", "crashed"]


def test_slow_startup_is_judged_only_while_a_startup_runs() -> None:
    """`slow`: a startup past slow_factor x its usual time (2 min at least).  The daemon asks
    only for the targets whose startup is under way (`Target.starting`); a serving,
    crashed or waiting target is never slow."""
    from logwatch.sinks.alerts.policy import AlertPolicy
    from logwatch.view import TargetView

    def view(phase: str, elapsed: float) -> TargetView:
        return TargetView(name="node1", engine="sglang", source="node1.log", kind="file",
                          labels={}, now=10_000.0, phase=phase, source_up=True,
                          source_message="", startup_id="abc@0",
                          startup_started_at=10_000.0 - elapsed, typical_total=200.0)

    policy = AlertPolicy()
    alert = policy.slow(view("cuda_graph", 400.0), 1.5)
    assert alert is not None and alert.kind == "slow"
    assert "slow startup: 6m40s and still in cuda_graph (usually ready after 3m20s)" in \
        alert.summary, alert.summary
    assert policy.slow(view("cuda_graph", 250.0), 1.5) is None     # within 1.5x
    for phase in ("waiting", "ready", "crashed", "stopped"):
        assert policy.slow(view(phase, 400.0), 1.5) is None, phase
