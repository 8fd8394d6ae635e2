"""The daemon's HTTP endpoint (aiohttp, 127.0.0.1:9105 by default).

/metrics      Prometheus exposition (text format 0.0.4); ?target=NAME (repeatable): those
              targets' series only, without the daemon's own families
/healthz      200 "ok" while the daemon runs (503 once it is shutting down)
/api/status   JSON: every target's phase, progress, ETA, durations, last crash, source
/api/history  JSON: ?target=NAME, its launch ledger (one record per startup, oldest first)
/             the status page (a fleet view polling /api/status)
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from .. import clock
from .. import __version__
from ..shown import visible_all
from ..sinks.metrics import AlertStats, MetricsCache, MetricSource
from ..sinks.page import PAGE
from ..view import TargetView


# Bounds on clients (issue 29): a connection must send a whole request's headers within
# HTTP_IDLE_TIMEOUT of connecting or of its previous answer (aiohttp's keep-alive timer runs
# from the connection's start: it is the header timeout and the idle timeout in one), and
# header lines are bounded; thousands of idle or slow connections cost descriptors for
# seconds, never for good.
HTTP_IDLE_TIMEOUT = 15.0
HTTP_BACKLOG = 1024   # connections waiting to be accepted (aiohttp's 128 dropped the SYNs of
                      # a burst: each retried after 1 s, /healthz with them)
HTTP_LIMITS = {"keepalive_timeout": HTTP_IDLE_TIMEOUT, "max_line_size": 8190,
               "max_field_size": 8190}


class OncePerMinute:
    """The event loop's exception handler: each kind of message logged at most once a
    minute, with how many were left out (asyncio logged a traceback per failed accept when
    descriptors ran out: 154,042 of them in 35 s)."""

    EVERY = 60.0

    def __init__(self, logger: Any, clock: Any = time.monotonic) -> None:
        self.logger = logger
        self.clock = clock
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def __call__(self, loop: Any, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "event loop error")
        key = message[:200]
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.EVERY:
            self._left_out[key] = self._left_out.get(key, 0) + 1
            return
        if len(self._last) > 1000:
            self._last.clear()
            self._left_out.clear()
        self._last[key] = now
        exc = context.get("exception")
        self.logger.error(message, error=f"{type(exc).__name__}: {exc}" if exc else None,
                          left_out=self._left_out.pop(key, 0), every=f"{self.EVERY:.0f}s")


class Served(Protocol):
    """What the endpoint shows: the targets' views, the alert delivery, the daemon's state."""

    stopping: bool
    config_path: str

    def views(self, now: float) -> list[TargetView]: ...

    def metric_sources(self) -> list[MetricSource]: ...

    def alert_stats(self) -> AlertStats | None: ...

    def history(self, target: str) -> list[dict[str, Any]] | None: ...


def make_app(daemon: Served) -> web.Application:
    cache = MetricsCache()

    async def metrics(request: web.Request) -> web.Response:
        sources = daemon.metric_sources()
        wanted = request.query.getall("target", [])
        if not wanted:
            body = cache.render(sources, daemon.alert_stats())
        else:                    # ?target=A&target=B: those targets' series only
            by_name = {s.name: s for s in sources}
            unknown = [n for n in wanted if n not in by_name]
            if unknown:
                return web.Response(status=404, text=f"no target {unknown[0]!r}\n")
            chosen = [by_name[n] for n in dict.fromkeys(wanted)]
            body = cache.render(chosen, None, subset=True)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        if daemon.stopping:
            return web.Response(status=503, text="stopping\n")
        return web.Response(text="ok\n")

    async def status(_: web.Request) -> web.Response:
        now = clock.now()
        doc = {"version": __version__, "now": now, "config": daemon.config_path,
               "targets": [visible_all(v.to_json()) for v in daemon.views(now)]}
        return web.Response(text=json.dumps(_finite(doc)), content_type="application/json")

    async def history(request: web.Request) -> web.Response:
        name = request.query.get("target", "")
        recs = daemon.history(name)
        if recs is None:
            return web.json_response({"error": f"no target {name!r}"}, status=404)
        return web.Response(text=json.dumps(_finite({"target": name,
                                                     "startups": visible_all(recs)})),
                            content_type="application/json")

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/history", history)
    app.router.add_get("/", index)
    return app


def _finite(o: object) -> object:
    """JSON has no NaN: unknown numbers are null."""
    if isinstance(o, float) and o != o:
        return None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_finite(v) for v in o]
    return o
