"""The alert kinds are one registry (sinks/alerts/kinds.py): the config check, the router,
every receiver, /metrics, `alerts test` and the CLI read it, so a kind cannot be known to one
of them and missing from another (before: 8 lists, `unreachable` missing from 3, and two
different defaults for a sink's `on:`)."""

from __future__ import annotations

import json

import pytest

from logwatch.app.alerttest import sample
from logwatch.cli import build_parser
from logwatch.sinks.alerts.config import validate_alerts
from logwatch.sinks.alerts.kinds import ALERT_KINDS, DEFAULT_ON, KIND_NAMES, RESOLVABLE
from logwatch.sinks.alerts.receivers import am_labels, make_sinks

SPECS = [{"type": "slack", "url": "http://127.0.0.1:9/slack", "on": list(KIND_NAMES)},
         {"type": "webhook", "url": "http://127.0.0.1:9/hook", "on": list(KIND_NAMES)},
         {"type": "alertmanager", "url": "http://127.0.0.1:9/am", "on": list(KIND_NAMES)}]


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_kind_renders_for_every_receiver(kind: str) -> None:
    alert = sample(kind, "http://127.0.0.1:9105/")
    spec = ALERT_KINDS[kind]
    slack, webhook, am = make_sinks(SPECS)
    assert all(s.wants(alert) for s in (slack, webhook, am))
    title = json.loads(slack.request(alert).body)["blocks"][0]["text"]["text"]
    assert title.startswith(spec.slack_icon + " *") and "[test]" in title
    assert json.loads(webhook.request(alert).body)["kind"] == kind
    assert am_labels(alert)["alertname"] == spec.alertname != "Logwatch"
    assert json.loads(am.request(alert).body)[0]["labels"]["kind"] == kind


def test_the_registry_names_each_thing_once() -> None:
    assert len({k.alertname for k in ALERT_KINDS.values()}) == len(ALERT_KINDS)
    assert len({k.slack_icon for k in ALERT_KINDS.values()}) == len(ALERT_KINDS)
    assert "unreachable" in RESOLVABLE and "ready" not in RESOLVABLE
    assert not ALERT_KINDS["crashed"].rate_limited, "the rate limit never drops a crash"


def test_a_sink_without_on_takes_the_documented_default() -> None:
    assert DEFAULT_ON == ("crashed", "stalled", "source_down", "ready")   # README "Alerts"
    spec = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
    validate_alerts("logwatch.yaml", [spec])
    # `ready` brings `degraded` (the ready server without a part of itself)
    assert make_sinks([spec])[0].kinds == (*DEFAULT_ON, "degraded")


def test_alerts_test_offers_every_kind() -> None:
    args = build_parser().parse_args(["alerts", "test", "--kind", "unreachable"])
    assert args.kind == "unreachable"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["alerts", "test", "--kind", "nonsense"])
