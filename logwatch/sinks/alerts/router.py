"""The alert router: policy -> outbox -> delivery workers -> receivers, each mark once.

* The policy (policy.py) turns the machine's events into alerts; the router puts each new
  mark (key + status) in the outbox (outbox.py) in the same atomic write that records it as
  seen, so a SIGHUP, a restart or a re-read of the log never sends it twice.
* Delivery: one worker per sink; an entry is marked `sending` (saved) before its POST and
  removed after the receiver's yes; every attempt carries `Idempotency-Key: <mark>`.
  Retries with exponential backoff and jitter, bounded attempts and age; 429 / Retry-After
  honoured.  Nothing here blocks reading logs: the router only appends to the outbox.
* A per-target token bucket keeps a flapping server from flooding a channel; `crashed`
  and resolutions are never held back by it, alerts that no sink takes cost nothing, and a
  dropped alert is counted (`logwatch_alerts_dropped_total{kind}`) and not marked sent.
* A delivery with no answer within the sink's `timeout` is *unknown* (the receiver may
  have processed it): it is sent again with the same Idempotency-Key at most
  `MAX_UNKNOWN` times, not `max_attempts`.  A Retry-After never pushes a retry past the
  sink's `max_age`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import time
from pathlib import Path
from typing import Any

from ... import log
from ...machine import Event
from ...shown import visible_all
from ...view import TargetView
from .kinds import RESOLVABLE, kind_of
from .model import FIRING, Alert, AlertCounts
from .outbox import QUEUED, SENDING, AlertStore
from .policy import SLOW_FACTOR, AlertPolicy, Decision, Resolve, startup_of
from .receivers import Outcome, Request, Sink, classify, make_sinks

BUCKET_SIZE, BUCKET_REFILL = 20, 30.0     # 20 alerts, then one per 30 s, per target
MAX_UNKNOWN = 2                           # re-sends after deliveries that timed out


class AlertRouter:
    """The policy's decisions -> the outbox -> a delivery worker per sink (the module says how)."""

    def __init__(self, config: Any, state_dir: Path) -> None:
        self.log = log.get("alerts")
        self.store = AlertStore(state_dir)
        self.sinks: list[Sink] = []
        self.policy = AlertPolicy(wants_phase=lambda: any("phase" in s.kinds for s in self.sinks))
        self._sent: dict[tuple[str, str], int] = {}
        self._failed: dict[str, int] = {}
        self._dropped: dict[str, int] = {}
        self._repeated: dict[str, int] = {}
        self._buckets = TokenBuckets()
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._session: Any = None
        self._ids = itertools.count(int(time.time() * 1000))
        self.reconfigure(config)

    # -- setup ---------------------------------------------------------------------------------
    def reconfigure(self, config: Any) -> None:
        self.config = config
        self.sinks = make_sinks(list(config.alerts))
        names = {s.name for s in self.sinks}       # a removed sink's series go with it
        self._sent = {k: n for k, n in self._sent.items() if k[0] in names}
        self._failed = {k: n for k, n in self._failed.items() if k in names}
        self.policy.generator_url = f"http://{config.listen_host}:{config.listen_port}/"
        for e in self.store.rebind(self.sinks):      # their sink is gone
            said_dropped(self.log, self._dropped, e)
        watched = {t.name for t in config.targets}   # removed at a reload, or while down:
        for doc in self.store.take_open(lambda doc: doc["target"] not in watched):
            self.fire(Alert.from_json(doc).resolved("no longer watched: removed from the config"))
        if self._session is not None:
            self._start_workers()

    async def start(self) -> None:
        import aiohttp
        self._session = aiohttp.ClientSession()
        self._start_workers()
        if self.store.outbox:
            self.log.info("delivering alerts left from the last run", pending=len(self.store.outbox))

    def _start_workers(self) -> None:
        for sink in self.sinks:
            task = self._workers.get(sink.name)
            if task is None or task.done():
                self._wake[sink.name] = asyncio.Event()
                self._workers[sink.name] = asyncio.create_task(self._worker(sink),
                                                               name=f"alerts:{sink.name}")
            else:  # the sink object may have changed: the worker looks it up each round
                self._wake[sink.name].set()
        for name in list(self._workers):
            if name not in {s.name for s in self.sinks}:
                self._workers.pop(name).cancel()

    async def stop(self) -> None:
        for t in self._workers.values():
            t.cancel()
        # each worker's end awaited, whatever it ended with (cancelled, or a failure)
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        self._workers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def counts(self) -> AlertCounts:
        """The counts as they stand (copies: the caller may change them)."""
        return AlertCounts(dict(self._sent), dict(self._failed), dict(self._dropped),
                           dict(self._repeated))

    def sink_kinds(self) -> dict[str, tuple[str, ...]]:
        return {s.name: tuple(s.kinds) for s in self.sinks}

    # -- events -> alerts ----------------------------------------------------------------------
    def observe(self, view: TargetView, events: list[Event]) -> None:
        self._apply(self.policy.observe(view, events))

    def observe_probe(self, view: TargetView) -> None:
        """A probe of the target's server answered (or did not): `unreachable` decisions."""
        self._apply(self.policy.probe(view))

    def observe_source(self, view: TargetView, grace: float) -> None:
        """The target's source failing or back: `source_down` decisions.  One open alert
        per target: a daemon restarted during an outage (a new outage start) says nothing
        new."""
        for d in self.policy.source(view, grace):
            if isinstance(d, Resolve) or not any(
                    doc["target"] == view.name and doc["kind"] == "source_down"
                    for doc in self.store.open.values()):
                self._apply([d])

    def tick(self, views: list[TargetView], slow_factor: dict[str, float]) -> None:
        for v in views:
            alert = self.policy.slow(v, slow_factor.get(v.name, SLOW_FACTOR))
            if alert is not None:
                self.fire(alert)

    def _apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if isinstance(d, Resolve):
                self._resolve(d)
            else:
                self.fire(d)

    def _resolve(self, r: Resolve) -> None:
        if r.drop_undelivered:
            # superseded (a crash after a stall): an undelivered alert is dropped, and needs
            # no resolution; a delivered one is resolved below
            self.store.drop_undelivered(lambda a: a["kind"] in r.kinds and
                                        a["target"] == r.target and a["status"] == FIRING and
                                        startup_of(a["key"]) == (r.only or "-"))
        def resolves(doc: dict[str, Any]) -> bool:
            sid = startup_of(doc["key"])
            return doc["target"] == r.target and doc["kind"] in r.kinds and \
                (r.exclude is None or sid != r.exclude) and (r.only is None or sid == r.only)
        for doc in self.store.take_open(resolves):
            self.fire(Alert.from_json(doc).resolved(r.why))

    def marks_of(self, target: str) -> dict[str, float]:
        return self.store.marks_of(target)

    def adopt(self, marks: dict[str, float]) -> None:
        self.store.adopt(marks)

    # -- the outbox ----------------------------------------------------------------------------
    def fire(self, alert: Alert) -> None:
        mark = alert.mark
        if mark in self.store.seen:
            # decided before (a log read again, a SIGHUP, a restart, a probe still failing):
            # not sent again, counted (what a test waits for instead of a quiet time)
            self._repeated[alert.kind] = self._repeated.get(alert.kind, 0) + 1
            return
        sinks = [s for s in self.sinks if s.wants(alert)]
        self.store.mark(alert.target, mark, time.time())
        if not sinks and alert.kind not in RESOLVABLE:
            self.store.save()      # decided (never again), but nobody takes it: no token
            return
        kind = kind_of(alert.kind)
        if alert.status == FIRING and (kind is None or kind.rate_limited) and \
                not self._buckets.allow(alert.target):
            self.store.unmark(alert.target, mark)   # not sent: a later decision may send it
            self._dropped[alert.kind] = self._dropped.get(alert.kind, 0) + 1
            self.log.warning("alert rate limit: dropped", target=alert.target, kind=alert.kind)
            return
        if alert.kind in RESOLVABLE and alert.status == FIRING:
            self.store.open[alert.key] = alert.to_json()
        now = time.time()
        for s in sinks:
            self.store.outbox.append({"id": next(self._ids), "sink": s.name,
                                      "dest": s.destination, "state": QUEUED,
                                      "alert": alert.to_json(), "attempts": 0,
                                      "first_at": now, "next_at": now})
        self.store.save()
        self.log.info("alert", target=alert.target, kind=alert.kind, status=alert.status,
                      summary=alert.summary, sinks=[s.name for s in sinks])
        for s in sinks:
            ev = self._wake.get(s.name)
            if ev is not None:
                ev.set()

    async def _worker(self, sink: Sink) -> None:
        wake = self._wake[sink.name]
        while True:
            now = time.time()
            mine = [e for e in self.store.outbox if e["sink"] == sink.name]
            due = [e for e in mine if e["next_at"] <= now]
            if not due:
                wait = min((e["next_at"] for e in mine), default=now + 3600) - now
                wake.clear()
                with contextlib.suppress(TimeoutError):   # (not wait_for: it can drop a cancel)
                    async with asyncio.timeout(max(0.05, wait)):
                        await wake.wait()
                continue
            entry = min(due, key=lambda e: e["id"])
            current = next((s for s in self.sinks if s.name == sink.name), sink)
            entry["state"] = SENDING         # phase 1: saved before the POST
            self.store.save()
            outcome = await deliver(self._session, current, Alert.from_json(entry["alert"]))
            self._settle(current, entry, outcome)   # phase 2: removed once delivered

    def _settle(self, sink: Sink, entry: dict[str, Any], outcome: Outcome) -> None:
        alert = entry["alert"]
        if outcome.ok:
            self.store.outbox = [e for e in self.store.outbox if e["id"] != entry["id"]]
            k = (sink.name, alert["kind"])
            self._sent[k] = self._sent.get(k, 0) + 1
            self.log.info("alert delivered", sink=sink.describe(), target=alert["target"],
                          kind=alert["kind"], status=alert["status"], attempts=entry["attempts"] + 1)
        else:
            self._failed[sink.name] = self._failed.get(sink.name, 0) + 1
            if give_up_or_retry(entry, outcome, sink, self.log):
                self.store.outbox = [e for e in self.store.outbox if e["id"] != entry["id"]]
        self.store.save()


def said_dropped(logger: Any, dropped: dict[str, int], entry: dict[str, Any]) -> None:
    """An undelivered alert dropped because its sink is no longer configured: counted
    (`logwatch_alerts_dropped_total`) and logged."""
    a = entry["alert"]
    dropped[a["kind"]] = dropped.get(a["kind"], 0) + 1
    logger.warning("undelivered alert dropped: its sink is no longer configured",
                   sink=entry["sink"], target=a["target"], kind=a["kind"])


class TokenBuckets:
    """A token bucket per target: BUCKET_SIZE alerts, then one per BUCKET_REFILL seconds."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, target: str) -> bool:
        now = time.monotonic()
        tokens, at = self._buckets.get(target, (float(BUCKET_SIZE), now))
        tokens = min(float(BUCKET_SIZE), tokens + (now - at) / BUCKET_REFILL)
        if tokens < 1.0:
            self._buckets[target] = (tokens, now)
            return False
        self._buckets[target] = (tokens - 1.0, now)
        return True


def give_up_or_retry(entry: dict[str, Any], outcome: Outcome, sink: Sink, logger: Any) -> bool:
    """After a failed delivery of an outbox entry: True to give it up (said, as an error);
    else the entry is queued again at its next try (`next_at`: exponential backoff with
    jitter, or the receiver's Retry-After; a last try at the sink's max_age, never after)."""
    alert = entry["alert"]
    entry["attempts"] += 1
    if outcome.unknown:
        entry["unknown"] = entry.get("unknown", 0) + 1
    now = time.time()
    left = entry["first_at"] + sink.max_age - now
    if entry.get("unknown", 0) > MAX_UNKNOWN:
        logger.error("alert delivery unknown: the receiver did not answer in time; "
                     "it may have it (each copy had the same Idempotency-Key)",
                     sink=sink.describe(), target=alert["target"], kind=alert["kind"],
                     timeout=sink.timeout, copies=entry["attempts"])
        return True
    if not outcome.retry or entry["attempts"] >= sink.max_attempts or left <= 0:
        logger.error("alert not delivered: giving up", sink=sink.describe(),
                     target=alert["target"], kind=alert["kind"], error=outcome.message,
                     attempts=entry["attempts"])
        return True
    entry["state"] = QUEUED
    backoff = min(300.0, 2.0 ** entry["attempts"])
    delay = outcome.delay if outcome.delay is not None else \
        backoff / 2 + random.uniform(0, backoff / 2)
    delay = min(delay, left)        # a last try at max_age, never after it
    entry["next_at"] = now + delay
    logger.warning("alert delivery failed: will retry", sink=sink.describe(),
                   target=alert["target"], kind=alert["kind"],
                   error=outcome.message, retry_in=round(delay, 1))
    return False


async def deliver(session: Any, sink: Sink, alert: Alert) -> Outcome:
    """One POST of `alert` to `sink`, with `Idempotency-Key: <mark>` (the same on every
    attempt and after a restart, so a receiver can drop a copy it already has).  What the
    sink sends is the alert with its text made visible (shown.py: RTL overrides, zero-width
    and control characters escaped), for every sink alike."""
    try:
        req: Request = sink.request(visible_all(alert))
    except LookupError as e:  # a missing secret or URL variable: nothing to retry
        return Outcome(False, False, message=str(e))
    import aiohttp
    headers = {**req.headers, "Idempotency-Key": alert.mark}
    try:
        async with session.post(req.url, data=req.body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=sink.timeout)) as resp:
            text = await resp.text()
            return classify(resp.status, dict(resp.headers), scrub_urls(text))
    except asyncio.TimeoutError:
        return Outcome(False, True, message=f"no answer within {sink.timeout:g}s", unknown=True)
    except (aiohttp.ClientError, OSError) as e:
        # client errors quote the URL, which can hold a token: never show its path
        return Outcome(False, True, message=scrub_urls(f"{type(e).__name__}: {e}"))


_URL = re.compile(r"(https?://[^/\s'\"]+)/[^\s'\"]*")


def scrub_urls(text: str) -> str:
    """Keep scheme and host of URLs, drop path and query (Slack tokens live there)."""
    return _URL.sub(lambda m: m.group(1) + "/…", text)
