"""Alert delivery: the outbox -> one worker per sink -> its receiver (router.py decides).

* An entry is marked `sending` (saved) before its POST and removed after the receiver's yes;
  every attempt carries `Idempotency-Key: <mark>`.  Retries with exponential backoff and
  jitter until the sink's `max_age` (1 h; `max_attempts` when set: 8 attempts ran out in
  about 4 minutes of a receiver's outage, `max_age` never came into play); 429 /
  Retry-After honoured, never past `max_age`, and for the sink: no retry of its other pages
  refused with a Retry-After goes before it either (up to `PACE_CAP`).  A delivery given up is counted as dropped.
* Per alert, one entry at a time: a resolution waits for its firing, whatever their retry
  times (a receiver back after an outage got `crashed resolved`, then `crashed firing`:
  Alertmanager kept the crash open for a server that served); when a firing is given up
  its queued resolution goes too.
* Per sink and target, in order: every page is tried once when it comes; one that failed
  waits behind its target's oldest waiting page (its retry, or the time a receiver asked
  with Retry-After, kept across a restart too); a success makes the sink's entries due at
  once, a restart every loaded entry (outbox.py).  Before, each kept its own backoff: a receiver back after an outage got the
  newest page first (its backoff the shortest) and older ones of the same target minutes
  later; pulling every entry to the failing one's next try spent the attempts of old
  pages on the retries of new ones (with `max_attempts: 20`, a crash page given up 6
  minutes into an outage); and holding untried pages behind a waiting one held a crash page
  for the whole `max_age` behind a page the receiver refused for good.
* Per sink, up to its `parallel` POSTs at once (4; Slack 1), each of another target: a
  slow receiver does not make a fleet's pages wait in one line.
* A delivery with no answer within the sink's `timeout` is *unknown* (the receiver may
  have processed it): it is sent again with the same Idempotency-Key at most
  `MAX_UNKNOWN` times.  One that never connected within it was not sent: an outage,
  retried as one.
* Alertmanager keeps alerts in memory and expects its clients to send them again: the open
  alerts an alertmanager sink was given are sent again every `resend` (5 min): a restarted
  Alertmanager has them back, and a crash open for a day does not lapse.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import re
from typing import Any, Callable

from ... import clock
from ... import log
from ...shown import visible_all
from .backoff import backoff
from .loop import as_open
from .model import FIRING, Alert, AlertCounts
from .outbox import QUEUED, SENDING, AlertStore, went_to
from .receivers import AlertmanagerSink, Outcome, Request, Sink, classify

MAX_UNKNOWN = 2                           # re-sends after deliveries that timed out
PACE_CAP = 60.0                           # the longest a Retry-After holds a sink's retries
STOP_GRACE = 5.0                          # a stop waits this long for POSTs under way


class Delivery:
    """The delivery workers, one per sink, over the router's outbox."""

    def __init__(self, store: AlertStore, sinks: Callable[[], list[Sink]],
                 counts: AlertCounts) -> None:
        self.store = store
        self.sinks = sinks                  # the router's sinks as they are now (reloads)
        self.counts = counts                # delivered, failed, dropped: the router's counts
        self.log = log.get("alerts")
        self.session: Any = None
        self.wake: dict[str, asyncio.Event] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._refreshed: dict[str, float] = {}    # alertmanager sink -> its last re-send
        self._posting: dict[str, set[asyncio.Task[None]]] = {}   # sink -> POSTs under way
        self.paced: dict[str, float] = {}         # sink -> no retry before (its Retry-After)
        self._closing = False

    async def start(self) -> None:
        self._closing = False
        self.session = client_session()
        self.start_workers()

    @property
    def started(self) -> bool:
        return self.session is not None

    def start_workers(self) -> None:
        """A worker per sink (a new sink's started, a removed one's cancelled)."""
        names = {s.name for s in self.sinks()}
        for sink in self.sinks():
            task = self._workers.get(sink.name)
            if task is None or task.done():
                self.wake[sink.name] = asyncio.Event()
                self._workers[sink.name] = asyncio.create_task(self._worker(sink),
                                                               name=f"alerts:{sink.name}")
            else:  # the sink object may have changed: the worker looks it up each round
                self.wake[sink.name].set()
        for name in list(self._workers):
            if name not in names:
                self._workers.pop(name).cancel()

    def poke(self, sink: str) -> None:
        ev = self.wake.get(sink)
        if ev is not None:
            ev.set()

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """A POST under way is let finish (up to `grace`): cut, the receiver may have it
        (Slack drops no copy) and the restarted daemon sends it again.  Before, a SIGTERM
        in the second a page was in flight (`systemctl restart`) posted it twice."""
        self._closing = True
        busy = [t for posts in self._posting.values() for t in posts]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        for t in [*self._workers.values(), *busy]:
            t.cancel()
        # each task's end awaited, whatever it ended with (cancelled, or a failure)
        await asyncio.gather(*self._workers.values(), *busy, return_exceptions=True)
        self._workers.clear()
        self._posting.clear()
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def _worker(self, sink: Sink) -> None:
        """Up to the sink's `parallel` POSTs at once, one per target (a target's pages
        stay in order).  Before, one at a time: 50 servers crashing together, a webhook
        answering in 5 s, the last page came 4 minutes later (20 of them: 103.6 s)."""
        wake = self.wake[sink.name]
        posts = self._posting.setdefault(sink.name, set())
        while not self._closing:
            now = clock.now()
            # the sink as configured now (a reload may have changed it)
            current = next((s for s in self.sinks() if s.name == sink.name), sink)
            busy = {str(e["alert"].get("target")) for e in self.store.outbox
                    if e["sink"] == sink.name and e.get("state") == SENDING}
            entry, wait = next_up(self.store.outbox, sink.name, now,
                                  self.paced.get(sink.name, 0.0), busy)
            if entry is not None and len(posts) >= current.parallel:
                entry, wait = None, 3600.0     # a POST's end wakes the worker
            if entry is None:
                if not posts and isinstance(current, AlertmanagerSink):
                    last = self._refreshed.setdefault(sink.name, now)
                    wait = min(wait, last + current.resend - now)
                    if wait <= 0:
                        await self._refresh(current, now)
                        continue
                wake.clear()
                with contextlib.suppress(TimeoutError):   # (not wait_for: it can drop a cancel)
                    async with asyncio.timeout(max(0.05, wait)):
                        await wake.wait()
                continue
            entry["state"] = SENDING         # phase 1: saved before the POST
            saving = self.store.save()
            task = asyncio.create_task(self._post(current, entry, saving))
            posts.add(task)
            # its end wakes this worker, and the one of the entry's sink as named now: a
            # reload that renamed it (a sink added above: `webhook-0` is `webhook-1`) moved
            # the server's next pages to a worker that found it busy and slept (up to 1 h)
            task.add_done_callback(lambda t, e=entry: (posts.discard(t), wake.set(),
                                                       self.poke(e["sink"])))

    async def _post(self, sink: Sink, entry: dict[str, Any], saving: int) -> None:
        await self.store.file.saved(saving)   # its `sending` on disk (written off the loop)
        outcome = await deliver(self.session, sink, Alert.from_json(entry["alert"]))
        # the sink as it is named now: a reload during the POST renamed it (`rebind` moved
        # the entry).  Before, the result was counted under the old name, which may be
        # another sink's now (`webhook-0`, added at the top): its sent_total counted a page
        # it never had.  An entry whose sink was removed meanwhile was dropped (and said).
        if not any(e["id"] == entry["id"] for e in self.store.outbox):
            return
        now_as = next((s for s in self.sinks() if s.name == entry["sink"]), sink)
        self._settle(now_as, entry, outcome)   # phase 2: removed once delivered

    def _settle(self, sink: Sink, entry: dict[str, Any], outcome: Outcome) -> None:
        alert = entry["alert"]
        if outcome.ok:
            self.store.outbox = [e for e in self.store.outbox if e["id"] != entry["id"]]
            self._waiting_until(sink.name, clock.now())    # it answers: the rest go now
            k = (sink.name, alert["kind"])
            self.counts.sent[k] = self.counts.sent.get(k, 0) + 1
            self.log.info("alert delivered", sink=sink.describe(), target=alert["target"],
                          kind=alert["kind"], status=alert["status"], attempts=entry["attempts"] + 1)
        else:
            self.counts.failed[sink.name] = self.counts.failed.get(sink.name, 0) + 1
            if give_up_or_retry(entry, outcome, sink, self.log):
                self._given_up(sink, entry)
            elif outcome.delay is not None:
                self._pace(sink.name, entry)
        self.store.save(urgent=outcome.ok)   # delivered: never sent again, even after a kill

    def _given_up(self, sink: Sink, entry: dict[str, Any]) -> None:
        """A delivery given up: counted as dropped; its resolution, queued behind it, goes
        too (the receiver never had the firing)."""
        alert = entry["alert"]
        gone = {entry["id"]} | ({e["id"] for e in self.store.outbox
                                 if e["sink"] == sink.name and e["alert"]["key"] == alert["key"]}
                                if alert["status"] == FIRING else set())
        self.store.outbox = [e for e in self.store.outbox if e["id"] not in gone]
        self.counts.dropped[alert["kind"]] = self.counts.dropped.get(alert["kind"], 0) + 1
        doc = self.store.open.get(alert["key"])
        if doc is not None and alert["status"] == FIRING and \
                not isinstance(sink, AlertmanagerSink) and doc.get("sinks") is not None:
            # its resolution is not for this receiver (Alertmanager keeps it: the
            # re-sends of open alerts are its retries)
            doc["sinks"] = [r for r in doc["sinks"]
                            if not (isinstance(r, dict) and r.get("name") == sink.name)]

    def _pace(self, sink: str, entry: dict[str, Any]) -> None:
        """The receiver answered Retry-After (Slack's 429): that is its pace, for every page
        of the sink it answered with one, so no retry of those goes before this one's (up
        to PACE_CAP: a page's own longer wait is its own).  Before, each page waited out only its own, then all went again
        at once: 50 crash pages to a rate-limited Slack took 837 POSTs, 787 answered 429."""
        until = min(entry["next_at"], clock.now() + PACE_CAP)
        self.paced[sink] = max(self.paced.get(sink, 0.0), until)

    def _waiting_until(self, sink: str, at: float) -> None:
        """None of `sink`'s entries waits past `at` (the receiver answered: the rest go now,
        oldest first).  But for one the receiver itself told when to come back (Retry-After):
        that time is kept."""
        for e in self.store.outbox:
            if e["sink"] == sink and e["next_at"] > at and not e.get("retry_after"):
                e["next_at"] = at

    async def _refresh(self, sink: AlertmanagerSink, now: float) -> None:
        """Send Alertmanager the open alerts it was given again (it keeps them in memory
        only, and expects its clients to repeat them); one whose firing is still queued is
        not open there yet.  A failure waits for the next round; not counted as sent."""
        self._refreshed[sink.name] = now
        queued = {e["alert"]["key"] for e in self.store.outbox if e["sink"] == sink.name}
        for doc in list(self.store.open.values()):
            if went_to(doc, sink) and doc["key"] not in queued and \
                    sink.wants(Alert.from_json(doc)):
                # a restart loop's alert says how many crashes it stands for by now
                outcome = await deliver(self.session, sink, as_open(doc, clock.now()))
                if not outcome.ok:
                    self.log.warning("open alerts not sent again to Alertmanager: next try "
                                     f"in {sink.resend:g}s", sink=sink.describe(),
                                     error=outcome.message)
                    return



def heads(entries: Any) -> list[dict[str, Any]]:
    """Of one sink's outbox, the entries that may go now: per alert key the oldest (a
    resolution waits for its firing, whatever their retry times)."""
    first: dict[str, dict[str, Any]] = {}
    for e in entries:
        k = e["alert"]["key"]
        if k not in first or e["id"] < first[k]["id"]:
            first[k] = e
    return list(first.values())


def next_up(outbox: list[dict[str, Any]], sink: str, now: float, paced_until: float = 0.0,
            busy: set[str] | frozenset[str] = frozenset()
            ) -> tuple[dict[str, Any] | None, float]:
    """The entry of `sink` to send now, else None and the seconds until one is due.  Every
    page is tried once when it comes (a receiver that refuses one payload for good, or asked
    one page to wait a day, holds no other); one that failed waits behind its target's oldest
    waiting page, so that a receiver back after an outage gets a server's pages in the order
    they were decided, and an outage spends the oldest page's attempts only (module doc).
    A retry of a page refused with a Retry-After goes no sooner than `paced_until` (the
    receiver's pace, `_settle`); one refused without (a 502, a refused connection) keeps its
    own backoff: a 429 for one server's page held another's crash page 60 s before.  None
    of a target in `busy` (one of its pages on its way) goes."""
    def due_at(e: dict[str, Any]) -> float:
        return max(e["next_at"], paced_until) if e.get("retry_after") else e["next_at"]
    mine = [e for e in heads(e for e in outbox if e["sink"] == sink)
            if str(e["alert"].get("target")) not in busy]
    first: dict[str, dict[str, Any]] = {}
    for e in mine:
        t = str(e["alert"].get("target"))
        if t not in first or e["id"] < first[t]["id"]:
            first[t] = e
    due = [e for e in mine if due_at(e) <= now and (not e.get("attempts") or
                                                       first[str(e["alert"].get("target"))] is e)]
    if due:
        return min(due, key=lambda e: e["id"]), 0.0
    if not first:
        return None, 3600.0
    return None, min(due_at(e) for e in first.values()) - now


def give_up_or_retry(entry: dict[str, Any], outcome: Outcome, sink: Sink, logger: Any) -> bool:
    """After a failed delivery of an outbox entry: True to give it up (said, as an error);
    else the entry is queued again at its next try (`next_at`: exponential backoff with
    jitter, or the receiver's Retry-After; a last try at the sink's max_age, never after)."""
    alert = entry["alert"]
    entry["attempts"] += 1
    if outcome.unknown:
        entry["unknown"] = entry.get("unknown", 0) + 1
    now = clock.now()
    left = entry["first_at"] + sink.max_age - now
    if entry.get("unknown", 0) > MAX_UNKNOWN:
        logger.error("alert delivery unknown: the receiver did not answer in time; "
                     "it may have it (each copy had the same Idempotency-Key)",
                     sink=sink.describe(), target=alert["target"], kind=alert["kind"],
                     timeout=sink.timeout, copies=entry["attempts"])
        return True
    if not outcome.retry or left <= 0 or \
            (sink.max_attempts is not None and entry["attempts"] >= sink.max_attempts):
        logger.error("alert not delivered: giving up", sink=sink.describe(),
                     target=alert["target"], kind=alert["kind"], error=outcome.message,
                     attempts=entry["attempts"])
        return True
    entry["state"] = QUEUED
    longest = backoff(entry["attempts"])
    delay = outcome.delay if outcome.delay is not None else \
        longest / 2 + random.uniform(0, longest / 2)
    delay = min(delay, left)        # a last try at max_age, never after it
    entry["next_at"] = now + delay
    entry["retry_after"] = outcome.delay is not None   # the receiver's time: kept (outbox.py)
    logger.warning("alert delivery failed: will retry", sink=sink.describe(),
                   target=alert["target"], kind=alert["kind"],
                   error=outcome.message, retry_in=round(delay, 1))
    return False


@functools.lru_cache(maxsize=1)
def _sent_trace() -> Any:
    """An aiohttp trace that marks a request written (its `trace_request_ctx["sent"]`): a
    timeout before that is no unknown delivery (`deliver`)."""
    import aiohttp

    async def sent(session: Any, ctx: Any, params: Any) -> None:
        if isinstance(ctx.trace_request_ctx, dict):
            ctx.trace_request_ctx["sent"] = True
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(sent)
    return trace


def client_session() -> Any:
    """The HTTP session of the alert sinks: `deliver` on it tells a request never written
    (an outage) from one with no answer (unknown).  On another session every timeout is
    unknown."""
    import aiohttp
    return aiohttp.ClientSession(trace_configs=[_sent_trace()])


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
    traced = _sent_trace() in getattr(session, "trace_configs", ())
    wrote = {"sent": False}        # set by the trace once the request's headers are written
    try:
        async with session.post(req.url, data=req.body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=sink.timeout),
                                trace_request_ctx=wrote) as resp:
            text = await resp.text()
            return classify(resp.status, dict(resp.headers), scrub_urls(text))
    except asyncio.TimeoutError as e:
        if traced and not wrote["sent"]:
            # the request was never written (no connection: a receiver whose accept queue
            # is full, a host behind a firewall that drops): no copy exists, an outage
            # retried until max_age like a refused connection.  Before, "delivery unknown",
            # given up after 3 tries (~40 s of an outage): the crash page lost
            return Outcome(False, True, message=f"not connected within {sink.timeout:g}s")
        return Outcome(False, True, message=f"no answer within {sink.timeout:g}s", unknown=True)
    except (aiohttp.ClientError, OSError) as e:
        # client errors quote the URL, which can hold a token: never show its path
        return Outcome(False, True, message=scrub_urls(f"{type(e).__name__}: {e}"))


_URL = re.compile(r"(https?://[^/\s'\"]+)/[^\s'\"]*")


def scrub_urls(text: str) -> str:
    """Keep scheme and host of URLs, drop path and query (Slack tokens live there)."""
    return _URL.sub(lambda m: m.group(1) + "/…", text)
