"""What an alert is, independent of where it goes.

An alert is identified by `key` = target + StartupId + kind (+ phase for `phase` alerts):
the same key is sent once firing and, for kinds that resolve, once resolved; `mark` =
key + status is what is sent once, and the `Idempotency-Key` header of every delivery of
it.  The StartupId comes from the log itself (machine.startup_id_of), so neither a SIGHUP,
a restart, a kill -9 nor a lost checkpoint gives the same alert another key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from ... import clock

FIRING, RESOLVED = "firing", "resolved"
SCHEMA_VERSION = 1
EXCERPT_LINES = 30
EXCERPT_CHARS = 6000


@dataclass
class Alert:
    key: str
    kind: str                 # a name of kinds.ALERT_KINDS
    status: str               # firing | resolved
    target: str
    engine: str
    labels: dict[str, str]
    epoch: int
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    starts_at: float = field(default_factory=clock.now)
    ends_at: float | None = None
    generator_url: str = ""
    startup: str = ""         # the StartupId the alert is about

    @property
    def mark(self) -> str:
        """What is delivered once: this key with this status (the Idempotency-Key)."""
        return f"{self.key}|{self.status}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Alert":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    @property
    def excerpt(self) -> list[str]:
        ex = self.details.get("excerpt") or []
        out, chars = [], 0
        for line in ex[-EXCERPT_LINES:]:
            line = line[:500]
            if chars + len(line) > EXCERPT_CHARS:
                break
            out.append(line)
            chars += len(line)
        return out

    def resolved(self, why: str, now: float | None = None) -> "Alert":
        now = clock.now() if now is None else now
        return Alert(self.key, self.kind, RESOLVED, self.target, self.engine, dict(self.labels),
                     self.epoch, f"resolved: {self.summary} ({why})",
                     {**self.details, "resolved_by": why}, self.starts_at, now,
                     self.generator_url, self.startup)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def webhook_body(alert: Alert) -> dict[str, Any]:
    """The documented, versioned JSON of the generic webhook (README "Alert payloads")."""
    return {
        "version": SCHEMA_VERSION,
        "kind": alert.kind,
        "status": alert.status,
        "target": alert.target,
        "engine": alert.engine,
        "labels": alert.labels,
        "epoch": alert.epoch,
        "startup": alert.startup,
        "summary": alert.summary,
        "details": {k: v for k, v in alert.details.items() if k != "excerpt"},
        "excerpt": alert.excerpt,
        "starts_at": iso(alert.starts_at),
        "ends_at": iso(alert.ends_at) if alert.ends_at else None,
        "dedupe_key": alert.key,
        "generator_url": alert.generator_url,
    }


@dataclass
class AlertCounts:
    """What the alert delivery tells about itself (its /metrics families): alerts delivered
    per (sink, kind), failed attempts per sink, and per kind the alerts the rate limit
    dropped and the decisions made before (not sent again)."""

    sent: dict[tuple[str, str], int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    repeated: dict[str, int] = field(default_factory=dict)
