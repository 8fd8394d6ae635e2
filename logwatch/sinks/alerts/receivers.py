"""Sinks: thin adapters that turn an `Alert` into one HTTP request, and a response into
ok / retry (with an optional delay) / give up.

* Slack incoming webhook: Block Kit; every piece of log text is escaped (`&`, `<`, `>`) so a
  log line cannot ping `<!channel>` or forge a link, and cut to Slack's limits; 429 honours
  Retry-After.
* Generic webhook: the versioned JSON of `model.webhook_body`; optional HMAC-SHA256 of the
  body in `X-Logwatch-Signature: sha256=<hex>`, keyed by a secret from the environment.
* Alertmanager v2: `POST /api/v2/alerts`; firing alerts carry endsAt 24 h after they are
  sent (the router sends the open ones again every few minutes), resolved ones endsAt = now,
  the kinds nothing resolves (ready, restarted, phase) endsAt EVENT_TTL after they are sent.
"""

from __future__ import annotations

import functools

import hashlib
import hmac
import json
import os
import re
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from ... import clock
from ...rules.reasons import reason_text
from ..display import fold_ranks   # the same line from 8 ranks: once, (x8 ranks)
from .kinds import DEFAULT_ON, kind_of, kinds_taken
from .model import FIRING, RESOLVED, Alert, iso, webhook_body

SLACK_TEXT = 3000      # a section's text
SLACK_HEADER = 150     # a header's plain text
FIRING_TTL = 24 * 3600.0
EVENT_TTL = 300.0      # a kind that nothing resolves (ready, restarted, phase) in Alertmanager
AM_RESEND = 300.0      # an alertmanager sink's default `resend`


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Outcome:
    ok: bool
    retry: bool
    delay: float | None = None     # seconds the receiver asked us to wait (Retry-After)
    message: str = ""
    unknown: bool = False          # no answer in time: the receiver may have it (or not)


def classify(status: int, headers: dict[str, str], body: str = "") -> Outcome:
    if 200 <= status < 300:
        return Outcome(True, False, message=str(status))
    retry_after = _retry_after(headers.get("Retry-After") or headers.get("retry-after"))
    if status == 429 or status >= 500 or status == 408:
        return Outcome(False, True, retry_after, f"HTTP {status}")
    return Outcome(False, False, message=f"HTTP {status}: {body[:200]}")


RETRY_AFTER_MIN = 1.0  # a shorter Retry-After asks for no wait: the sink's own backoff


def _retry_after(value: str | None) -> float | None:
    """The seconds a `Retry-After` asks for (a number, or an HTTP date), or None (the
    sink's own backoff) where it asks for no wait: 0, negative, a date already past (the
    receiver's clock behind ours), a fraction under RETRY_AFTER_MIN, NaN, garbage.  Before,
    those were "retry now": a 429 with `Retry-After: 0` was posted again as soon as it was
    answered, 61 POSTs in 3 s to a local receiver, for the page's whole max_age."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    return seconds if seconds >= RETRY_AFTER_MIN else None


class Sink:
    type = "sink"
    chat = False        # read by people, message by message (a loop's resolutions: one)
    parallel = 4        # POSTs at once, each of another target (delivery.py)

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.kinds = kinds_taken(spec.get("on") or DEFAULT_ON)
        self.selector = {k: re.compile(v) for k, v in (spec.get("targets") or {}).items()}
        self.timeout = float(spec.get("timeout", 10))
        # None: retried until max_age (8 attempts ran out in ~4 minutes of a receiver's outage)
        self.max_attempts: int | None = int(spec["max_attempts"]) if spec.get("max_attempts") \
            else None
        self.max_age = float(spec.get("max_age", 3600))

    @property
    def destination(self) -> str:
        """Who receives this sink's alerts, as a digest (a URL may hold a token: it is never
        stored): the sink across reloads, whatever its name or its place in the list."""
        where = self.spec.get("url") or f"${self.spec.get('url_env')}"
        return hashlib.sha256(f"{self.type} {where}".encode()).hexdigest()[:16]

    def url(self) -> str:
        if self.spec.get("url"):
            return str(self.spec["url"])
        env = str(self.spec.get("url_env"))
        value = os.environ.get(env, "")
        if not value:
            raise LookupError(f"environment variable {env} is not set")
        return value

    def wants(self, alert: Alert) -> bool:
        if alert.kind not in self.kinds:
            return False
        fields = {"name": alert.target, "target": alert.target, "engine": alert.engine,
                  **alert.labels}
        return all(k in fields and rx.fullmatch(str(fields[k])) for k, rx in self.selector.items())

    def request(self, alert: Alert) -> Request:
        raise NotImplementedError

    def describe(self) -> str:
        """How the sink shows in logs: never the URL (it can hold a token)."""
        where = f"${self.spec['url_env']}" if self.spec.get("url_env") else _redact(str(self.spec.get("url")))
        return f"{self.type} {self.name} -> {where}"


def _redact(url: str) -> str:
    m = re.match(r"^(https?://[^/]+)", url)
    return (m.group(1) + "/…") if m else "…"


# -- Slack -------------------------------------------------------------------------------------

def slack_escape(text: str) -> str:
    """Slack's own rule: only &, < and > are control characters in message text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _code(lines: list[str], budget: int, head: bool = False) -> str:
    """A code block of escaped lines within `budget`: an excerpt keeps its end (the latest
    lines), one line (`head`) its start, where the exception's name is: the root cause of
    a crash with a 70 KB line showed only its last 2,990 characters before."""
    body = "\n".join(slack_escape(ln).replace("```", "`\u200b``") for ln in lines)
    room = budget - 8
    if len(body) > room:
        body = re.sub(r"&[a-z]*$", "", body[:room - 1]) + "…" if head else body[-room:]
    return f"```{body}```"


LINE_LABEL = {"crashed": "root cause: ", "ready": "ready line: ", "restarted": "startup line: "}


class SlackSink(Sink):
    type = "slack"
    chat = True
    parallel = 1        # one channel, about one message a second: in order, one at a time

    def request(self, alert: Alert) -> Request:
        kind = kind_of(alert.kind)
        icon = ":white_check_mark:" if alert.status == RESOLVED else (kind.slack_icon if kind else "")
        title = _cut(f"{alert.target}: {alert.summary}", SLACK_HEADER - 4)
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn",
                                         "text": _cut(f"{icon} *{slack_escape(title)}*", SLACK_TEXT)}},
        ]
        # the root-cause rule's own sentence (`meaning:`) where it has one, else the reason's
        meaning = str(alert.details.get("meaning") or "") or \
            reason_text(str(alert.details.get("reason") or ""))
        if meaning and alert.kind == "crashed" and alert.status == FIRING:
            blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                       "text": _cut(slack_escape(meaning), SLACK_TEXT)}})
        line = alert.details.get("line")
        if line and alert.status == FIRING:
            blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                       "text": _cut(LINE_LABEL.get(alert.kind, "line: ") + _code([line], SLACK_TEXT - 20, head=True), SLACK_TEXT)}})
        if alert.excerpt and alert.status == FIRING:
            blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                       "text": _code(fold_ranks(list(alert.excerpt), _rank_tags(alert.engine)), SLACK_TEXT)}})
        ctx = [f"engine {alert.engine}", f"startup #{alert.epoch}"] + \
              [f"{k}={v}" for k, v in sorted(alert.labels.items())]
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": _cut(slack_escape(" · ".join(ctx)), SLACK_TEXT)}]})
        body = {"text": _cut(slack_escape(f"{alert.target}: {alert.summary}"), 3000),
                "blocks": blocks}
        return Request(self.url(), json.dumps(body).encode(), {"Content-Type": "application/json"})


@functools.lru_cache(maxsize=16)
def _rank_tags(engine: str) -> tuple[str, ...]:
    """The engine's pack's `ranks:` patterns, which fold a crash excerpt's same line from
    every rank into one "(x8 ranks)" line in Slack; () when the pack cannot be loaded."""
    from ...rules.pack import PackError, load_pack
    try:
        return tuple(rx.pattern for rx in load_pack(engine).ranks)
    except (PackError, OSError, ValueError):
        return ()


# -- generic webhook ---------------------------------------------------------------------------

class WebhookSink(Sink):
    type = "webhook"

    def request(self, alert: Alert) -> Request:
        body = json.dumps(webhook_body(alert), ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "logwatch",
                   "X-Logwatch-Event": alert.kind}
        env = self.spec.get("secret_env")
        if env:
            secret = os.environ.get(str(env), "")
            if not secret:
                raise LookupError(f"environment variable {env} (the HMAC secret) is not set")
            sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            headers["X-Logwatch-Signature"] = f"sha256={sig}"
        return Request(self.url(), body, headers)


# -- Alertmanager ------------------------------------------------------------------------------

def am_labels(alert: Alert) -> dict[str, str]:
    kind = kind_of(alert.kind)
    labels = {"alertname": kind.alertname if kind else "Logwatch", "target": alert.target,
              "engine": alert.engine, "kind": alert.kind,
              "reason": str(alert.details.get("reason") or ""), "source": "logwatch"}
    for k, v in alert.labels.items():
        labels.setdefault(k, v)
    return labels


class AlertmanagerSink(Sink):
    type = "alertmanager"

    @property
    def resend(self) -> float:
        """Seconds between re-sends of the open alerts it was given (Alertmanager keeps
        alerts in memory only: a restart forgets them until they are sent again)."""
        return float(self.spec.get("resend", AM_RESEND))

    def request(self, alert: Alert) -> Request:
        base = self.url().rstrip("/")
        annotations = {"summary": alert.summary,
                       "excerpt": "\n".join(alert.excerpt),
                       "root_cause": str(alert.details.get("line") or ""),
                       # the crash's rank (its root-cause line's) and, where another printed
                       # first, that one: as the summary says them (annotations, not labels:
                       # a label is the alert's identity)
                       "rank": str(alert.details.get("rank") or ""),
                       "first_rank": str(alert.details.get("first_rank") or "")}
        # Alertmanager compares endsAt with its own clock: the wall's (logwatch's may be
        # taking up a step of the wall clock: clock.py)
        now = clock.wall()
        if alert.status == RESOLVED:
            ends = min(alert.ends_at or now, now)
        else:     # open a day unless it says when it ends (`alerts test`'s sample)
            kind = kind_of(alert.kind)
            # an event (ready, restarted, phase) is never resolved: it ends by itself, or
            # `LogwatchReady` stayed active a day, beside the same server's later crash
            ttl = FIRING_TTL if kind is None or kind.resolvable else EVENT_TTL
            ends = min(alert.ends_at or now + ttl, now + ttl)
        item = {"labels": am_labels(alert),
                "annotations": {k: v for k, v in annotations.items() if v},
                "startsAt": iso(alert.starts_at), "endsAt": iso(ends)}
        if alert.generator_url:
            item["generatorURL"] = alert.generator_url
        return Request(f"{base}/api/v2/alerts", json.dumps([item]).encode(),
                       {"Content-Type": "application/json"})


SINKS = {"slack": SlackSink, "webhook": WebhookSink, "alertmanager": AlertmanagerSink}


def make_sinks(specs: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> list[Sink]:
    return [SINKS[s["type"]](str(s.get("name") or f"{s['type']}-{i}"), s)
            for i, s in enumerate(specs)]
