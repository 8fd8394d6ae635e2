"""The alert router: policy -> outbox (delivery.py delivers it), each mark once.

* The policy (policy.py) turns the machine's events into alerts; the router puts each new
  mark (key + status) in the outbox (outbox.py) in the same atomic write that records it as
  seen, so a SIGHUP, a restart or a re-read of the log never sends it twice.  Nothing here
  blocks reading logs: the router only appends to the outbox.
* A resolution goes to the sinks its firing went to (not to one added at a reload since).
* A token bucket per target and sink keeps a flapping server from flooding a channel (one
  sink's `phase` alerts do not spend another's `stalled` page); `crashed` and resolutions
  are never held back by it, alerts that no sink takes cost nothing, and a dropped alert
  is counted (`logwatch_alerts_dropped_total{kind}`) and not marked sent.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ... import clock
from ... import log
from ...machine import Event, Stopped
from ...view import TargetView
from .delivery import Delivery
from .kinds import RESOLVABLE, kind_of
from .loop import (as_open, end_loop, fold, fold_stall, folds_into, hang_to_say, loop_speakers,
                   loop_words, open_crashes, owner, repage, said_hang, say_loop, stall_of_loop,
                   stall_over, stalls_of)
from .model import FIRING, Alert, AlertCounts
from .outbox import (MARKS_KEPT, QUEUED, AlertStore, keep_marks, sinks_record,
                     unrecord_dropped, went_to)
from .policy import SLOW_FACTOR, AlertPolicy, Decision, Resolve, startup_of
from .receivers import Sink, make_sinks

BUCKET_SIZE, BUCKET_REFILL = 20, 30.0     # 20 alerts, then one per 30 s, per target and sink


class AlertRouter:
    """The policy's decisions -> the outbox -> a delivery worker per sink (the module says how)."""

    def __init__(self, config: Any, state_dir: Path) -> None:
        self.log = log.get("alerts")
        self.store = AlertStore(state_dir, getattr(config, "alert_marks", MARKS_KEPT))
        self.sinks: list[Sink] = []
        self.policy = AlertPolicy(wants_phase=lambda: any("phase" in s.kinds for s in self.sinks))
        self._counts = AlertCounts()
        self._buckets = TokenBuckets()
        self.delivery = Delivery(self.store, lambda: self.sinks, self._counts)
        # entries are sent in the order of their ids: after the ones loaded, whatever the
        # wall clock says now (set back since the last run, new pages went before old ones)
        loaded = max((int(e.get("id", 0)) for e in self.store.outbox), default=0)
        self._ids = itertools.count(max(int(time.time() * 1000), loaded + 1))
        self.reconfigure(config)

    # -- setup ---------------------------------------------------------------------------------
    def reconfigure(self, config: Any) -> None:
        self.config = config
        self.sinks = make_sinks(list(config.alerts))
        keep_marks(self.store, getattr(config, "alert_marks", MARKS_KEPT))
        names = {s.name for s in self.sinks}       # a removed sink's series go with it
        c = self._counts
        c.sent = {k: n for k, n in c.sent.items() if k[0] in names}
        c.failed = {k: n for k, n in c.failed.items() if k in names}
        self.policy.generator_url = f"http://{config.listen_host}:{config.listen_port}/"
        dropped = self.store.rebind(self.sinks)      # their sink is gone
        for e in dropped:
            said_dropped(self.log, c.dropped, e)
        if unrecord_dropped(self.store.open, dropped):
            self.store.save()
        watched = {t.name for t in config.targets}   # removed at a reload, or while down:
        self._buckets.keep(watched, names)
        follow_renames(self.store, config, self.log)
        self._resolve_taken(self.store.take_open(lambda doc: owner(doc) not in watched),
                            "no longer watched: removed from the config",
                            "; this resolves the {n} since the last ready")
        if self.delivery.started:
            self.delivery.start_workers()

    async def start(self) -> None:
        self.store.file.start()          # saved off the loop from now on
        await self.delivery.start()
        if self.store.outbox:
            self.log.info("delivering alerts left from the last run", pending=len(self.store.outbox))

    async def stop(self) -> None:
        await self.delivery.stop()
        await self.store.file.close()    # the last changes written

    async def saved(self) -> None:
        """Until every decision made so far is on disk (before the targets' last
        checkpoints at a stop: they wait for their decisions, `marks_of`)."""
        await self.store.file.saved()

    def counts(self) -> AlertCounts:
        """The counts as they stand (copies: the caller may change them)."""
        c = self._counts
        return AlertCounts(dict(c.sent), dict(c.failed), dict(c.dropped), dict(c.repeated))

    def sink_kinds(self) -> dict[str, tuple[str, ...]]:
        return {s.name: tuple(s.kinds) for s in self.sinks}

    # -- events -> alerts ----------------------------------------------------------------------
    def observe(self, view: TargetView, events: list[Event]) -> None:
        """Each event's decisions in the order of the events: a clean stop between two
        crashes (read in one batch or not) ends the restart loop before the second."""
        for ev in events:
            if isinstance(ev, Stopped) and end_loop(self.store.open.values(), view.name):
                self.store.decided(view.name)     # its checkpoint waits for it (a kill -9)
                self.store.save()
            self._apply(self.policy.observe(view, [ev]))

    def observe_probe(self, view: TargetView) -> None:
        """A probe of the target's server answered (or did not): `unreachable` decisions."""
        self._apply(self.policy.probe(view))

    def observe_source(self, view: TargetView, grace: float) -> None:
        """The target's source failing or back: `source_down` decisions.  One open alert
        per target: a daemon restarted during an outage (a new outage start) says nothing
        new."""
        for d in self.policy.source(view, grace):
            if isinstance(d, Resolve) or not any(
                    owner(doc) == view.name and doc["kind"] == "source_down"
                    for doc in self.store.open.values()):
                self._apply([d])

    def tick(self, views: list[TargetView], slow_factor: dict[str, float]) -> None:
        for v in views:
            alert = self.policy.slow(v, slow_factor.get(v.name, SLOW_FACTOR))
            if alert is not None:
                self.fire(alert)
            if v.stalled:
                say_hang(self.store, self._ids, v, [s for s in self.sinks if s.chat],
                         self.delivery.poke)

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
                                        startup_of(a["key"]) == (r.only or "-"),
                                        decided_by=r.target)
        def resolves(doc: dict[str, Any]) -> bool:
            sid = startup_of(doc["key"])
            return owner(doc) == r.target and doc["kind"] in r.kinds and \
                (r.exclude is None or sid != r.exclude) and (r.only is None or sid == r.only)
        self._resolve_taken(self.store.take_open(resolves), r.why,
                            "; the {n} since the last ready are over")
        if "stalled" in r.kinds and stall_over(self.store.open.values(), r.target, lambda sid: (
                r.exclude is None or sid != r.exclude) and (r.only is None or sid == r.only)):
            self.store.decided(r.target)      # a loop's relaunch's stall, folded, is over
            self.store.save()

    def _resolve_taken(self, taken: list[dict[str, Any]], why: str, loop_note: str) -> None:
        """Resolve open alerts taken together; a restart loop's crashes (a ready, or the
        target removed) say it in one chat message per target and chat sink (`loop_speakers`);
        a webhook and Alertmanager get each key (before: one Slack message per crash)."""
        loops, speaks = loop_speakers(taken, [s for s in self.sinks if s.chat])
        for doc in taken:
            note = loop_note.format(n=loop_words(loops[owner(doc)])) if id(doc) in speaks \
                else ""
            self.fire(as_open(doc).resolved(why + note), doc,
                      chat=speaks.get(id(doc), set()) if owner(doc) in loops and
                      doc["kind"] == "crashed" else True)

    def marks_of(self, target: str) -> dict[str, float] | None:
        """The target's latest marks, for its checkpoint; None while one of its decisions is
        not on disk yet: a checkpoint past the lines that made it, then a kill -9, lost the
        page (the marks adopted as sent, the lines not read again)."""
        if self.store.unsaved(target):
            return None
        return self.store.marks_of(target)

    def adopt(self, marks: dict[str, float], pending: list[dict[str, Any]] | None = None) -> None:
        """A target's checkpoint at its start: its marks and pages (`restore_carried`)."""
        restore_carried(self, marks, pending or [])

    # -- the outbox ----------------------------------------------------------------------------
    def fire(self, alert: Alert, opened: dict[str, Any] | None = None,
             chat: bool | set[str] = True) -> None:
        """Put a new mark in the outbox for every sink that takes it (a resolution: those
        its firing went to, `opened` being the open alert it resolves; `chat`: the chat
        sinks, Slack, it goes to (True: every one), another resolution saying it for this
        one to the others)."""
        mark = alert.mark
        if mark in self.store.seen:
            # decided before (a log read again, a SIGHUP, a restart, a probe still failing):
            # not sent again, counted (what a test waits for instead of a quiet time)
            self._counts.repeated[alert.kind] = self._counts.repeated.get(alert.kind, 0) + 1
            return
        # a resolution goes where its firing went, whatever the sink takes now (README)
        sinks = [s for s in self.sinks if (not s.chat or chat is True or
                                           (isinstance(chat, set) and s.name in chat)) and
                 (s.wants(alert) if opened is None or opened.get("sinks") is None
                  else went_to(opened, s))]
        if alert.kind == "crashed" and alert.status == FIRING and \
                fold_crash(self.store, self._ids, alert, sinks, self.delivery.poke, self.log):
            return
        if alert.kind in ("stalled", "slow") and alert.status == FIRING and \
                (sinks := stall_in_loop(self.store, alert, sinks, self.log)) is None:
            return
        # decided by the log of the target the open alert is of now (renamed: not its own)
        self.store.mark(alert.target, mark, clock.now(),
                        owner(opened) if opened is not None else None)
        if not sinks and alert.kind not in RESOLVABLE:
            self.store.save()      # decided (never again), but nobody takes it: no token
            return
        kind = kind_of(alert.kind)
        if alert.status == FIRING and (kind is None or kind.rate_limited):
            allowed = [s for s in sinks if self._buckets.allow(f"{alert.target}\0{s.name}")]
            if len(allowed) < len(sinks):
                self._counts.dropped[alert.kind] = self._counts.dropped.get(alert.kind, 0) + 1
                self.log.warning("alert rate limit: dropped", target=alert.target,
                                 kind=alert.kind,
                                 sinks=[s.name for s in sinks if s not in allowed])
            sinks = allowed
            if not sinks:
                self.store.unmark(alert.target, mark)   # not sent: a later decision may
                return
        if alert.kind == "crashed" and alert.status == FIRING:
            say_loop(alert, self.store.open.values())
        if alert.kind in RESOLVABLE and alert.status == FIRING:
            self.store.open[alert.key] = {**alert.to_json(), "sinks": sinks_record(sinks),
                                          "source": source_of(self.config, alert.target)}
        enqueue(self.store, self._ids, alert, sinks, self.delivery.poke)
        self.store.save()
        self.log.info("alert", target=alert.target, kind=alert.kind, status=alert.status,
                      summary=alert.summary, sinks=[s.name for s in sinks])


def source_of(config: Any, target: str) -> str | None:
    """The target's source, as a digest (it may hold a password)."""
    return next((source_digest(getattr(t, "source", t.name)) for t in config.targets
                 if t.name == target), None)


def restore_carried(router: AlertRouter, marks: dict[str, float],
                    pending: list[dict[str, Any]]) -> None:
    """Where `alerts/state.json` was lost or unreadable (its outbox with it), the pages a
    target's checkpoint carries as undelivered are queued again, to the sinks that had them
    to take, and their open alerts opened again (a ready resolves them); a sink gone since:
    dropped and counted.  The loss is said once, with the file.  Before, the marks alone
    took a page still waiting for a receiver as sent: lost, and a deleted file not named."""
    store = router.store
    store.adopt(marks)
    if store.loaded or not (marks or pending):
        return
    if not store.said_lost:
        store.said_lost = True
        router.log.warning("alert state lost or unreadable: the undelivered pages the "
                           "targets' checkpoints carry are sent again (same Idempotency-Key); "
                           "what they record as alerted is not", file=str(store.path))
    by_dest = {s.destination: s for s in router.sinks}
    back = store.restore_pending([e for e in pending if e.get("dest") in by_dest], router._ids)
    for e in back:
        alert, sink = e["alert"], by_dest[e["dest"]]
        if alert.get("kind") in RESOLVABLE and alert.get("status") == FIRING:
            doc = store.open.setdefault(alert["key"], {
                **alert, "sinks": [], "source": source_of(router.config, str(alert.get("target")))})
            if not went_to(doc, sink):
                doc["sinks"] = [*doc["sinks"], *sinks_record([sink])]
        router.delivery.poke(sink.name)
    if back:
        store.save()
        router.log.warning("undelivered alerts carried by a checkpoint queued again",
                           pages=[f"{e['alert']['key']}|{e['alert']['status']} -> {e['sink']}"
                                  for e in back])
    for e in pending:
        a = e.get("alert")
        if isinstance(a, dict) and e.get("dest") not in by_dest and \
                all(isinstance(x, str) for x in (e.get("sink"), a.get("kind"), a.get("target"))):
            said_dropped(router.log, router._counts.dropped, e)


def fold_crash(store: AlertStore, ids: Iterator[int], alert: Alert, sinks: list[Sink],
               poke: Callable[[str], None], logger: Any) -> bool:
    """A crash of a restart loop, of a reason whose alert is open: folded into it, not
    paged (loop.py), but to a receiver whose page of that alert was given up, or a sink
    added since (`fold`).  False: no such alert, it is paged."""
    doc = folds_into(store.open.values(), alert)
    if doc is None:
        return False
    store.mark(alert.target, alert.mark, clock.now())
    missing = fold(doc, alert, sinks)
    enqueue(store, ids, repage(doc, alert), missing, poke)
    store.save()
    logger.info("crash folded into its open alert (a restart loop)", alert=doc["key"],
                crashes=doc["crashes"], paged=[s.name for s in missing])
    return True


def stall_in_loop(store: AlertStore, alert: Alert, sinks: list[Sink],
                  logger: Any) -> list[Sink] | None:
    """A stall of a restart loop's relaunch (`stall_of_loop`: a crash of the target is
    open, no ready since) is no new incident for the sinks that have the loop's crash
    alert: it is counted in that alert (`fold_stall`: its re-sends and its resolution say
    it), not paged to them.  The `sinks` still to page (those that never had the loop's
    crash: a sink on `[stalled]` alone); None where none is left (decided: marked).
    Before, each relaunch that hung before it crashed paged `stalled` and its resolution:
    4 launches, 9 notifications for one broken server (4 stalls, 4 resolutions, 1 crash),
    and Alertmanager's LogwatchStalled flapped at each launch."""
    doc = stall_of_loop(store.open.values(), alert)
    if doc is None:
        return sinks
    loop = open_crashes(store.open.values(), owner(doc))
    rest = [s for s in sinks if not any(went_to(d, s) for d in loop)]
    fold_stall(doc, alert)
    logger.info(f"{alert.kind} of a restart loop's relaunch: counted in the loop's open "
                "alert", alert=doc["key"], stalls=stalls_of(doc), slows=stalls_of(doc, "slows"),
                paged=[s.name for s in rest])
    if rest:
        return rest
    store.mark(alert.target, alert.mark, clock.now())
    store.save()
    return None


def say_hang(store: AlertStore, ids: Iterator[int], v: TargetView, chats: list[Sink],
             poke: Callable[[str], None]) -> None:
    """A loop's relaunch still stalled a stall budget after its stall was folded into the
    loop's open crash alert (`hang_to_say`): the chat sinks that had that alert get it
    once more, saying the relaunch hangs (`as_open`: `(its relaunch since stalled in
    cuda_graph 4m ago)`).  A webhook's firing is sent once per key (its Idempotency-Key);
    Alertmanager's re-sends say it already."""
    now = clock.now()
    for doc in open_crashes(store.open.values(), v.name):
        if hang_to_say(doc, v.startup_id, now):
            said_hang(doc)
            enqueue(store, ids, as_open(doc, now), [s for s in chats if went_to(doc, s)], poke)
            store.save()


def enqueue(store: AlertStore, ids: Iterator[int], alert: Alert, sinks: list[Sink],
            poke: Callable[[str], None]) -> None:
    """An outbox entry per sink, its worker woken (the caller saves)."""
    now = clock.now()
    for s in sinks:
        store.outbox.append({"id": next(ids), "sink": s.name, "dest": s.destination,
                             "state": QUEUED, "alert": alert.to_json(), "attempts": 0,
                             "first_at": now, "next_at": now})
        poke(s.name)


def follow_renames(store: AlertStore, config: Any, logger: Any) -> None:
    """A target renamed (its source now under one other name) keeps its open alerts:
    they are the new name's to resolve (`watched_as`), and the marks of the old name
    are the new one's too, so the log read again under the new name pages nothing
    twice.  The alerts keep their key and target: a resolution matches the firing the
    receiver had.  Before, a rename at a reload (or a restart) resolved every open
    alert ("no longer watched") while the server was still down, then paged its crash
    again under the new name.  The source decides, not whether the old name is still
    watched: two targets that swap names (or a name given to another log while its
    own log gets a new name) each keep their server's alerts; before, both crashes
    were paged again under the other name and a ready resolved the other server's."""
    names: dict[str, list[str]] = {}
    for t in config.targets:
        names.setdefault(source_digest(getattr(t, "source", t.name)), []).append(t.name)
    moved: dict[str, str] = {}
    for doc in store.open.values():
        now_as = names.get(str(doc.get("source")), [])
        if len(now_as) != 1 or now_as[0] == owner(doc):
            continue       # its source gone, watched twice, or still under its name
        logger.info("target renamed: its open alert goes with it", alert=doc["key"],
                    was=owner(doc), now=now_as[0])
        moved[owner(doc)] = now_as[0]
        doc["watched_as"] = now_as[0]
    if moved:              # all at once: in a swap, each name gets the other's own marks
        store.carry_marks(moved)
        store.save()


def source_digest(source: Any) -> str:
    return hashlib.sha256(str(source).encode()).hexdigest()[:16]


def said_dropped(logger: Any, dropped: dict[str, int], entry: dict[str, Any]) -> None:
    """An undelivered alert dropped because its sink is no longer configured: counted
    (`logwatch_alerts_dropped_total`) and logged."""
    a = entry["alert"]
    dropped[a["kind"]] = dropped.get(a["kind"], 0) + 1
    logger.warning("undelivered alert dropped: its sink is no longer configured",
                   sink=entry["sink"], target=a["target"], kind=a["kind"])


class TokenBuckets:
    """A token bucket per key (a target and a sink): BUCKET_SIZE alerts, then one per
    BUCKET_REFILL seconds."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    def keep(self, targets: set[str], sinks: set[str]) -> None:
        """Only the buckets of targets and sinks still configured (a reload): before, each
        name that ever had an alert kept its bucket for the daemon's life (a fleet whose
        names churn, a name per job)."""
        self._buckets = {k: v for k, v in self._buckets.items()
                         if k.split("\0", 1)[0] in targets and k.split("\0", 1)[-1] in sinks}

    def allow(self, target: str) -> bool:
        now = time.monotonic()
        tokens, at = self._buckets.get(target, (float(BUCKET_SIZE), now))
        tokens = min(float(BUCKET_SIZE), tokens + (now - at) / BUCKET_REFILL)
        if tokens < 1.0:
            self._buckets[target] = (tokens, now)
            return False
        self._buckets[target] = (tokens - 1.0, now)
        return True


