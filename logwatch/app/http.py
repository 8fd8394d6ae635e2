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

from .. import __version__
from ..sinks.metrics import AlertStats, MetricsCache, MetricSource
from ..sinks.page import PAGE
from ..view import TargetView


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
        now = time.time()
        doc = {"version": __version__, "now": now, "config": daemon.config_path,
               "targets": [v.to_json() for v in daemon.views(now)]}
        return web.Response(text=json.dumps(_finite(doc)), content_type="application/json")

    async def history(request: web.Request) -> web.Response:
        name = request.query.get("target", "")
        recs = daemon.history(name)
        if recs is None:
            return web.json_response({"error": f"no target {name!r}"}, status=404)
        return web.Response(text=json.dumps(_finite({"target": name, "startups": recs})),
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
