"""The crash-reason vocabulary is one list everywhere: the code, the README table, the Slack
message's sentence, the Grafana panel, the metrics' label values."""

from __future__ import annotations

import json

from conftest import ROOT
from logwatch.counters import Counters
from logwatch.rules.pack import CRASH_REASONS
from logwatch.rules.reasons import REASON_TEXT, reason_text
from logwatch.sinks.alerts.model import FIRING, RESOLVED, Alert
from logwatch.sinks.alerts.receivers import SlackSink
from logwatch.verdict import crash_text

NEW_2026 = ("startup_timeout", "shm_too_small", "hang", "disk_full",
            "discovery_unreachable")


def test_every_reason_has_its_sentence() -> None:
    assert set(REASON_TEXT) == set(CRASH_REASONS)
    assert all(REASON_TEXT[r].endswith(")") or REASON_TEXT[r].endswith(".") for r in CRASH_REASONS)
    assert reason_text("a_packs_own_reason") == ""
    for r in NEW_2026:
        assert r in CRASH_REASONS


def test_readme_table_and_grafana_panel_list_every_reason() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("### Crash reasons", 1)[1].split("\n## ", 1)[0]
    for r in CRASH_REASONS:
        assert f"| `{r}` | {REASON_TEXT[r]} |" in table, r
    dash = json.loads((ROOT / "deploy/grafana/logwatch-dashboard.json").read_text())
    panel = next(p for p in dash["panels"] if p.get("title") == "Crashes by reason (time range)")
    for r in CRASH_REASONS:
        assert r in panel["description"], r


def test_metrics_export_the_new_reasons_at_zero() -> None:
    c = Counters()
    for r in NEW_2026:
        assert c.crashes[r] == 0


def crash_alert(reason: str, status: str = FIRING) -> Alert:
    return Alert(key="k", kind="crashed", status=status, target="node-1", engine="sglang",
                 labels={}, epoch=1, summary=crash_text(reason, "launching", 1800.0),
                 details={"reason": reason, "line": "TimeoutError: <x> & y"})


def test_slack_crash_message_says_what_the_reason_means() -> None:
    sink = SlackSink("slack", {"type": "slack", "url": "http://127.0.0.1:9/hook"})
    body = json.loads(sink.request(crash_alert("shm_too_small")).body)
    texts = [b["text"]["text"] for b in body["blocks"] if b["type"] == "section"]
    assert any("--shm-size" in t for t in texts), texts
    # resolved alerts and other kinds carry no sentence
    body = json.loads(sink.request(crash_alert("shm_too_small", RESOLVED)).body)
    assert not any("--shm-size" in b.get("text", {}).get("text", "") for b in body["blocks"])
