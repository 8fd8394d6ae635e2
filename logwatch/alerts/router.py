"""The alert router: machine events -> alerts -> per-sink delivery, exactly once.

* Kinds: `crashed` (sent once the crash's evidence settled, ~2 s: its traceback arrives
  after the announcement), `stalled`, `slow` (the startup overran its history by the
  target's `slow_factor`), `ready`, `restarted`, `phase`.  `ready` or a new startup resolves
  `stalled` / `slow`; a crash drops an undelivered `stalled` of its startup and resolves a
  delivered one; the next startup's `ready` resolves a `crashed`.
* Dedupe: every (alert key, status) is recorded in `state_dir/alerts/state.json` in the same
  atomic write that puts its deliveries in the outbox, so a SIGHUP or a restart never sends
  it again and a delivery interrupted by kill -9 is still made after the restart.
* Delivery: one worker per sink; retries with exponential backoff and jitter, bounded
  attempts and age; 429 / Retry-After honoured.  Nothing here blocks reading logs: the
  router only appends to the outbox.
* A per-target token bucket keeps a flapping server from flooding a channel.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import random
import statistics
import time
from pathlib import Path
from typing import Any

from .. import log
from ..machine import (
    CrashRetracted, CrashUpdated, Crashed, Event, PhaseChanged, Ready, Restarted, Stalled,
)
from ..positions import atomic_write_json
from ..rulepack import CRASHED
from ..summary import fmt_duration
from .model import FIRING, RESOLVABLE, Alert
from .sinks import Outcome, Request, Sink, classify, make_sinks

CRASH_SETTLE = 2.0
SLOW_FACTOR = 1.5
SLOW_MIN_SECONDS = 120.0
BUCKET_SIZE, BUCKET_REFILL = 20, 30.0     # 20 alerts, then one per 30 s, per target
SEEN_KEEP = 20000


class AlertStore:
    """Dedupe keys, open alerts and the outbox, persisted together."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir).expanduser() / "alerts" / "state.json"
        self.seen: dict[str, float] = {}
        self.open: dict[str, dict[str, Any]] = {}
        self.outbox: list[dict[str, Any]] = []
        self.log = log.get("alerts")
        self.load()

    def load(self) -> None:
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            if doc.get("version") != 1:
                raise ValueError("unknown version")
            self.seen = {str(k): float(v) for k, v in doc.get("seen", {}).items()}
            self.open = dict(doc.get("open", {}))
            self.outbox = list(doc.get("outbox", []))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError) as e:
            self.log.warning("alert state unreadable: starting without it", error=str(e))

    def save(self) -> None:
        if len(self.seen) > SEEN_KEEP:
            for k in sorted(self.seen, key=self.seen.get)[: len(self.seen) - SEEN_KEEP]:  # type: ignore[arg-type]
                del self.seen[k]
        atomic_write_json(self.path, {"version": 1, "seen": self.seen, "open": self.open,
                                      "outbox": self.outbox})


class AlertRouter:
    def __init__(self, config: Any, state_dir: Path) -> None:
        self.log = log.get("alerts")
        self.store = AlertStore(state_dir)
        self.sinks: list[Sink] = []
        self.generator_url = ""
        self._sent: dict[tuple[str, str], int] = {}
        self._failed: dict[str, int] = {}
        self._pending_crash: dict[str, tuple[float, int]] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._session: Any = None
        self._ids = itertools.count(int(time.time() * 1000))
        self.dropped = 0
        self.reconfigure(config)

    # -- setup ---------------------------------------------------------------------------------
    def reconfigure(self, config: Any) -> None:
        self.config = config
        self.sinks = make_sinks(list(config.alerts))
        self.generator_url = f"http://{config.listen_host}:{config.listen_port}/"
        names = {s.name for s in self.sinks}
        before = len(self.store.outbox)
        self.store.outbox = [e for e in self.store.outbox if e["sink"] in names]
        if len(self.store.outbox) != before:
            self.store.save()
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
        for t in self._workers.values():
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self._workers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def sent_counts(self) -> dict[tuple[str, str], int]:
        return dict(self._sent)

    def failure_counts(self) -> dict[str, int]:
        return dict(self._failed)

    # -- events -> alerts ----------------------------------------------------------------------
    @staticmethod
    def startup_id(runner: Any) -> str:
        st = runner.pipe.state if runner.pipe else None
        first = st.history[0].at if st and st.history else 0.0
        return f"{st.epoch if st else 0}@{first:.0f}"

    def _key(self, runner: Any, kind: str, extra: str = "") -> str:
        return f"{runner.name}|{self.startup_id(runner)}|{kind}{('|' + extra) if extra else ''}"

    def _alert(self, runner: Any, kind: str, summary: str, details: dict[str, Any],
               key: str | None = None, epoch: int | None = None) -> Alert:
        st = runner.pipe.state if runner.pipe else None
        if epoch is None:
            epoch = st.epoch if st else 0
        return Alert(key or self._key(runner, kind), kind, FIRING, runner.name, runner.engine,
                     dict(runner.cfg.labels), epoch, summary, details,
                     time.time(), None, self.generator_url)

    def observe(self, runner: Any, events: list[Event]) -> None:
        st = runner.pipe.state if runner.pipe else None
        for ev in events:
            if isinstance(ev, (Crashed, CrashUpdated)):
                self._pending_crash[runner.name] = (time.monotonic() + CRASH_SETTLE, ev.epoch)
            elif isinstance(ev, CrashRetracted):
                self._pending_crash.pop(runner.name, None)
            elif isinstance(ev, Ready) and st is not None:
                durations = {k: v for k, v in st.durations().items() if k != "ready"}
                slow = ev.slowest_phase
                took = fmt_duration(ev.took) if ev.took is not None else "?"
                summ = f"ready in {took}" + (f" (slowest phase: {slow} "
                                             f"{fmt_duration(durations.get(slow))})" if slow in durations else "")
                self.fire(self._alert(runner, "ready", summ,
                                      {"took": ev.took, "durations": durations,
                                       "slowest_phase": slow, "line": ev.line}))
                self._resolve(runner.name, ("stalled", "slow"), "ready")
                self._resolve(runner.name, ("crashed",), "ready again", exclude=self.startup_id(runner))
            elif isinstance(ev, Restarted):
                prev = ev.previous
                if runner.name in self._pending_crash and prev is not None and \
                        prev.phase == CRASHED and prev.crash is not None:
                    # the crash had not settled yet: tell it now, as the startup it ended
                    self._pending_crash.pop(runner.name, None)
                    sid = f"{prev.epoch}@{prev.started_at or 0.0:.0f}"
                    self._fire_crash_of(runner, prev.crash, sid, prev.epoch,
                                        _elapsed(prev.crash, prev.started_at, prev.log_started))
                self._pending_crash.pop(runner.name, None)
                self._resolve(runner.name, ("stalled", "slow"), "restarted",
                              exclude=self.startup_id(runner))
                self.fire(self._alert(runner, "restarted", f"restarted (startup #{ev.epoch})",
                                      {"line": ev.line}))
            elif isinstance(ev, Stalled):
                budget = runner.pipe.machine.stall_budget(ev.phase) if runner.pipe else None
                self.fire(self._alert(runner, "stalled",
                                      f"stalled in {ev.phase}: no new line for "
                                      f"{fmt_duration(ev.silent_for)}",
                                      {"phase": ev.phase, "silent_for": ev.silent_for,
                                       "stall_after": budget}))
            elif isinstance(ev, PhaseChanged) and any("phase" in s.kinds for s in self.sinks):
                self.fire(self._alert(runner, "phase", f"phase {ev.new}",
                                      {"phase": ev.new, "previous": ev.old},
                                      key=self._key(runner, "phase", ev.new)))

    def tick(self, now: float, runners: list[Any]) -> None:
        by_name = {r.name: r for r in runners}
        mono = time.monotonic()
        for r in runners:
            # a crash nobody alerted yet (e.g. the daemon was restarted while it settled)
            st = r.pipe.state if r.pipe else None
            if st is not None and st.phase == CRASHED and r.name not in self._pending_crash \
                    and f"{self._key(r, 'crashed')}|{FIRING}" not in self.store.seen:
                self._pending_crash[r.name] = (mono + CRASH_SETTLE, st.epoch)
        for name, (deadline, epoch) in list(self._pending_crash.items()):
            if mono < deadline:
                continue
            del self._pending_crash[name]
            r = by_name.get(name)
            if r is None or r.pipe is None or r.pipe.state.phase != CRASHED or r.pipe.state.crash is None:
                continue
            self._fire_crash(r)
        for r in runners:
            self._check_slow(r, now)

    def _fire_crash(self, r: Any) -> None:
        st = r.pipe.state
        start = st.history[0] if st.history else None
        self._fire_crash_of(r, st.crash, self.startup_id(r), st.epoch,
                            _elapsed(st.crash, start.at if start else None,
                                     start.log_time if start else None))

    def _fire_crash_of(self, r: Any, c: Any, sid: str, epoch: int, elapsed: float | None) -> None:
        after = f" after {fmt_duration(elapsed)}" if elapsed else ""
        summary = f"crashed during {c.during}{after}: {c.reason}"
        # a crash supersedes a stall of the same startup: an undelivered one is dropped (and
        # needs no resolution), a delivered one is resolved
        def undelivered_stall(e: dict[str, Any]) -> bool:
            a = e["alert"]
            return a["kind"] == "stalled" and a["target"] == r.name and \
                a["key"].split("|")[1] == sid and a["status"] == FIRING
        dropped = {e["alert"]["key"] for e in self.store.outbox if undelivered_stall(e)}
        if dropped:
            self.store.outbox = [e for e in self.store.outbox if not undelivered_stall(e)]
            for key in dropped:
                self.store.open.pop(key, None)
            self.store.save()
        self._resolve(r.name, ("stalled", "slow"), "crashed", only=sid)
        self.fire(self._alert(r, "crashed", summary,
                              {"reason": c.reason, "during": c.during, "line": c.line,
                               "line_number": c.line_number, "elapsed": elapsed,
                               "excerpt": list(c.excerpt)},
                              key=f"{r.name}|{sid}|crashed", epoch=epoch))

    def _check_slow(self, r: Any, now: float) -> None:
        pipe = r.pipe
        if pipe is None or pipe.state.phase not in pipe.pack.startup_phases or not pipe.state.history:
            return
        totals = [rec.total for rec in r.history.records if rec.outcome == "ready" and rec.total]
        if not totals:
            return
        typical = statistics.median(totals)
        elapsed = now - pipe.state.history[0].at
        factor = float(getattr(r.cfg, "slow_factor", SLOW_FACTOR))
        if elapsed > max(typical * factor, SLOW_MIN_SECONDS):
            key = self._key(r, "slow")
            if f"{key}|{FIRING}" in self.store.seen:
                return
            self.fire(self._alert(r, "slow", f"slow startup: {fmt_duration(elapsed)} and still in "
                                             f"{pipe.state.phase} (usually ready after "
                                             f"{fmt_duration(typical)})",
                                  {"elapsed": elapsed, "typical": typical,
                                   "phase": pipe.state.phase}, key=key))

    def _resolve(self, target: str, kinds: tuple[str, ...], why: str,
                 exclude: str | None = None, only: str | None = None) -> None:
        for key, doc in list(self.store.open.items()):
            if doc["target"] != target or doc["kind"] not in kinds:
                continue
            sid = key.split("|")[1]
            if (exclude is not None and sid == exclude) or (only is not None and sid != only):
                continue
            del self.store.open[key]
            self.fire(Alert.from_json(doc).resolved(why))

    # -- the outbox ----------------------------------------------------------------------------
    def fire(self, alert: Alert) -> None:
        mark = f"{alert.key}|{alert.status}"
        if mark in self.store.seen:
            return
        sinks = [s for s in self.sinks if s.wants(alert)]
        self.store.seen[mark] = time.time()
        if alert.status == FIRING and not self._allow(alert.target):
            self.dropped += 1
            self.log.warning("alert rate limit: dropped", target=alert.target, kind=alert.kind)
            self.store.save()
            return
        if alert.kind in RESOLVABLE and alert.status == FIRING:
            self.store.open[alert.key] = alert.to_json()
        now = time.time()
        for s in sinks:
            self.store.outbox.append({"id": next(self._ids), "sink": s.name,
                                      "alert": alert.to_json(), "attempts": 0,
                                      "first_at": now, "next_at": now})
        self.store.save()
        self.log.info("alert", target=alert.target, kind=alert.kind, status=alert.status,
                      summary=alert.summary, sinks=[s.name for s in sinks])
        for s in sinks:
            ev = self._wake.get(s.name)
            if ev is not None:
                ev.set()

    def _allow(self, target: str) -> bool:
        now = time.monotonic()
        tokens, at = self._buckets.get(target, (float(BUCKET_SIZE), now))
        tokens = min(float(BUCKET_SIZE), tokens + (now - at) / BUCKET_REFILL)
        if tokens < 1.0:
            self._buckets[target] = (tokens, now)
            return False
        self._buckets[target] = (tokens - 1.0, now)
        return True

    async def _worker(self, sink: Sink) -> None:
        wake = self._wake[sink.name]
        while True:
            now = time.time()
            mine = [e for e in self.store.outbox if e["sink"] == sink.name]
            due = [e for e in mine if e["next_at"] <= now]
            if not due:
                wait = min((e["next_at"] for e in mine), default=now + 3600) - now
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), timeout=max(0.05, wait))
                except asyncio.TimeoutError:
                    pass
                continue
            entry = min(due, key=lambda e: e["id"])
            current = next((s for s in self.sinks if s.name == sink.name), sink)
            outcome = await self._deliver(current, Alert.from_json(entry["alert"]))
            self._settle(current, entry, outcome)

    async def _deliver(self, sink: Sink, alert: Alert) -> Outcome:
        try:
            req: Request = sink.request(alert)
        except LookupError as e:  # a missing secret or URL variable: nothing to retry
            return Outcome(False, False, message=str(e))
        import aiohttp
        try:
            async with self._session.post(req.url, data=req.body, headers=req.headers,
                                          timeout=aiohttp.ClientTimeout(total=sink.timeout)) as resp:
                text = await resp.text()
                return classify(resp.status, dict(resp.headers), scrub_urls(text))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            # client errors quote the URL, which can hold a token: never show its path
            return Outcome(False, True, message=scrub_urls(f"{type(e).__name__}: {e}"))

    def _settle(self, sink: Sink, entry: dict[str, Any], outcome: Outcome) -> None:
        alert = entry["alert"]
        if outcome.ok:
            self.store.outbox = [e for e in self.store.outbox if e["id"] != entry["id"]]
            k = (sink.name, alert["kind"])
            self._sent[k] = self._sent.get(k, 0) + 1
            self.log.info("alert delivered", sink=sink.describe(), target=alert["target"],
                          kind=alert["kind"], status=alert["status"], attempts=entry["attempts"] + 1)
        else:
            entry["attempts"] += 1
            age = time.time() - entry["first_at"]
            if not outcome.retry or entry["attempts"] >= sink.max_attempts or age >= sink.max_age:
                self.store.outbox = [e for e in self.store.outbox if e["id"] != entry["id"]]
                self._failed[sink.name] = self._failed.get(sink.name, 0) + 1
                self.log.error("alert not delivered: giving up", sink=sink.describe(),
                               target=alert["target"], kind=alert["kind"], error=outcome.message,
                               attempts=entry["attempts"])
            else:
                backoff = min(300.0, 2.0 ** entry["attempts"])
                delay = outcome.delay if outcome.delay is not None else \
                    backoff / 2 + random.uniform(0, backoff / 2)
                entry["next_at"] = time.time() + delay
                self._failed[sink.name] = self._failed.get(sink.name, 0) + 1
                self.log.warning("alert delivery failed: will retry", sink=sink.describe(),
                                 target=alert["target"], kind=alert["kind"],
                                 error=outcome.message, retry_in=round(delay, 1))
        self.store.save()


def _elapsed(crash: Any, started_at: float | None, log_started: float | None) -> float | None:
    """Seconds from the startup's first line to the crash (server clock when it has one)."""
    if log_started is not None and crash.log_time is not None:
        return crash.log_time - log_started
    if started_at is not None:
        return crash.at - started_at
    return None


_URL = re.compile(r"(https?://[^/\s'\"]+)/[^\s'\"]*")


def scrub_urls(text: str) -> str:
    """Keep scheme and host of URLs, drop path and query (Slack tokens live there)."""
    return _URL.sub(lambda m: m.group(1) + "/…", text)
