"""The daemon's supervision of its targets: isolate a failure, retry it, say an outage.

- A target whose loop died of an unexpected error (or that could not start) is restarted
  from its checkpoint after a backoff (RETRY_BASE, doubling to RETRY_MAX); the others go on.
- A source that gave up (a refused key, permission denied) is tried
  again on a slow timer (FATAL_RETRY_BASE doubling to FATAL_RETRY_MAX) and at once on SIGHUP.
- `source_down`: the targets with an outage are handed to the alert policy every
  SOURCE_CHECK_EVERY seconds (one open per target, resolved when the source is up again).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from .. import log
from ..counters import Counters
from ..view import TargetView
from .config import TargetConfig
from .target import Target

RETRY_BASE = 10.0     # a failed target is tried again after this, doubling ...
RETRY_MAX = 300.0     # ... up to this (and counts as healthy again after this long up)
INF = float("inf")
FATAL_RETRY_BASE = 120.0   # a source refused once (a key, a permission) is tried again after
FATAL_RETRY_MAX = 900.0    # this, doubling up to this; and at once on SIGHUP
SOURCE_CHECK_EVERY = 2.0   # `source_down`: the targets with an outage, this often


def refused(r: Target) -> bool:
    """Its source gave up: the loop ended; nothing reads the log until it is tried again."""
    return r.ended.is_set() and r.failed_at is None and r.follower.status.fatal


class Supervisor:
    """Which targets to start again, and when.  `restart(cfg)`: stop the target of that
    name (if running) and start it from `cfg` (the daemon's)."""

    def __init__(self, restart: Callable[[TargetConfig], Awaitable[None]]) -> None:
        self.restart = restart
        self.log = log.get("daemon")
        # targets that failed (an error while starting, or their loop died): name ->
        # (failures so far, when to try again); retried with backoff, the others go on
        self.retry: dict[str, tuple[int, float]] = {}
        # targets whose source was refused (fatal): name -> (tries so far, when to try again)
        self.fatal: dict[str, tuple[int, float]] = {}
        self.source_down: set[str] = set()   # targets with an outage seen (or alerted)

    def schedule_retry(self, name: str, now: float) -> float:
        """Backoff for a target that failed: 10 s, doubling, at most 5 min between tries."""
        failures = self.retry.get(name, (0, 0.0))[0] + 1
        delay = min(RETRY_MAX, RETRY_BASE * 2 ** (failures - 1))
        self.retry[name] = (failures, now + delay)
        return delay

    def forget(self, names: list[str]) -> None:
        """Targets a reload removed: their retries, refusals and outages go with them (each
        name that ever failed was kept for the daemon's life: a fleet whose names churn, a
        name per job; adv134's trial)."""
        for name in names:
            self.retry.pop(name, None)
            self.fatal.pop(name, None)
            self.source_down.discard(name)

    def pending(self, runners: Mapping[str, Target]) -> bool:
        return bool(self.retry) or any(r.failed_at is not None for r in runners.values())

    async def retry_failed(self, runners: Mapping[str, Target],
                           targets: list[TargetConfig], now: float) -> None:
        """Isolate and retry: a target whose loop died is restarted (from its checkpoint)
        after its backoff; one that could not start is started again."""
        for name, r in list(runners.items()):
            if r.failed_at is not None and self.retry.get(name, (0, INF))[1] == INF:
                delay = self.schedule_retry(name, now)
                self.log.warning("target failed: retrying", target=name, retry_in=f"{delay:.0f}s")
            elif r.failed_at is None and name in self.retry and r.attached \
                    and now - r.started_at > RETRY_MAX:
                del self.retry[name]   # healthy for a while: the next failure starts over
        by_name = {t.name: t for t in targets}
        for name, (failures, due) in list(self.retry.items()):
            runner = runners.get(name)
            if name not in by_name:
                del self.retry[name]   # removed by a reload
                continue
            if due > now or (runner is not None and runner.failed_at is None):
                continue
            self.retry[name] = (failures, INF)   # scheduled again only if it fails again
            await self.restart(by_name[name])
            self.log.info("target restarted", target=name, attempt=failures + 1)

    async def retry_refused(self, runners: Mapping[str, Target], targets: list[TargetConfig],
                            now: float, force: bool = False) -> list[str]:
        """A source refused once is tried again on a slow timer (FATAL_RETRY_BASE,
        doubling) and, with `force` (SIGHUP), at once: the key fixed, the file made readable."""
        by_name = {t.name: t for t in targets}
        retried = []
        for name, r in list(runners.items()):
            if not refused(r):
                if r.follower.status.state == "up":
                    self.fatal.pop(name, None)      # reading: the next refusal starts over
                continue
            tries, due = self.fatal.get(name, (0, INF))
            if due == INF:
                delay = min(FATAL_RETRY_MAX, FATAL_RETRY_BASE * 2 ** tries)
                self.fatal[name] = (tries, now + delay)
                self.log.warning("source refused: trying again later", target=name,
                                 error=r.follower.status.message, retry_in=f"{delay:.0f}s")
                if not force:
                    continue
            elif due > now and not force:
                continue
            if name not in by_name:
                continue
            self.fatal[name] = (tries + 1, INF)
            await self.restart(by_name[name])
            retried.append(name)
            self.log.info("refused source: trying again", target=name, attempt=tries + 2,
                          why="SIGHUP" if force else "timer")
        return retried

    def check_sources(self, runners: Mapping[str, Target], alerts: Any, now: float) -> None:
        """`source_down` decisions for the targets with an outage (or one alerted)."""
        for name, r in list(runners.items()):
            status = r.follower.status
            out = status.outage(now)
            if out is None and name not in self.source_down:
                continue
            alerts.observe_source(r.view(now), r.cfg.source_down_after)
            if out is not None:
                self.source_down.add(name)
            elif status.state == "up":
                self.source_down.discard(name)


class Unstarted:
    """A target that could not be started (an error nobody foresaw while building it), as
    /api/status, the page and /metrics show it until it starts: `error`, saying why.
    Before, it was in none of them (only the daemon's log said so), though the README says
    such a target is shown as `error` (helper adv34 M3)."""

    def __init__(self, cfg: TargetConfig, error: str, at: float) -> None:
        self.cfg, self.name, self.error, self.at = cfg, cfg.name, error, at

    def view(self, now: float) -> TargetView:
        cfg = self.cfg
        return TargetView(name=self.name, engine="auto", source=cfg.display_source,
                          kind=cfg.kind, labels=dict(cfg.labels), now=now, counters=Counters(),
                          source_message=f"not started: {self.error} (tried again later)",
                          source_error=True, source_state="error",
                          source_down_since=self.at, started_at=self.at)

    def metrics_key(self, now: float) -> Any:
        return ("unstarted", self.error, self.at)

    def counted(self) -> Counted | None:
        """None: its counts are not known (its checkpoint is not read), so no counter
        series.  Before, each was 0: a reset after the counts of its last run, which the
        next start counted again (`increase(logwatch_crashes_total[10m]) > 0` paged)."""
        return None

    def position_age(self) -> float:
        return 0.0
