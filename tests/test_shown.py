"""Text shown to people is made visible once (issue 29, logwatch/shown.py): RTL overrides,
zero-width, backspace, BEL and C1 control characters from a log line reach Slack, webhooks,
/api/status and the page, and `watch`'s terminal as escapes (`\\u202e`), never raw; Slack's
own escaping of `<!channel>` and links stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from support.daemon import daemons, free_port, sim_texts  # noqa: F401
from logwatch.shown import VisibleOut, visible, visible_all
from test_origin_daemon import start_with_hooks

# RLO, ZWSP, ZWJ, LRI/PDI, BOM, backspace, BEL, ESC, DEL, a C1 CSI, the line separator
HIDDEN = "\u202e\u200b\u200d\u2066\u2069\ufeff\x08\x07\x1b\x7f\x9b\u2028"
SPOOF = ("torch.OutOfMemoryError: CUDA out of memory. <!channel> <https://evil.example|docs> "
         "see \u202egnp.exe\u200b ok\x08\x07 \u2066x\u2069\ufeff \x1b[2K\x9b1m\x7f end\u2028")


def raw_hidden(text: str) -> list[str]:
    return [c for c in HIDDEN if c in text]


def test_visible_escapes_what_changes_the_display_and_keeps_the_rest() -> None:
    assert visible("plain text, ünïcødé, 中文, emoji 🙂\ttab\nnewline") == \
        "plain text, ünïcødé, 中文, emoji 🙂\ttab\nnewline"
    shown = visible(SPOOF)
    assert raw_hidden(shown) == [], raw_hidden(shown)
    for esc in ("\\u202e", "\\u200b", "\\u2066", "\\u2069", "\\ufeff", "\\x08", "\\x07",
                "\\x1b", "\\x9b", "\\x7f", "\\u2028"):
        assert esc in shown, esc
    assert visible("a\nb", newlines=False) == "a\\x0ab"
    d = {"k": ["ok", ("\u202e",)], "n": 1}
    assert visible_all(d) == {"k": ["ok", ("\\u202e",)], "n": 1}
    same = {"k": ["ok"]}
    assert visible_all(same) is same


def test_terminal_plain_output_shows_escapes() -> None:
    import io
    buf = io.StringIO()
    out = VisibleOut(buf)
    print("line one " + SPOOF, file=out)
    assert raw_hidden(buf.getvalue()) == [] and "\\u202e" in buf.getvalue()
    assert buf.getvalue().endswith("\n")


def _log(tmp_path: Path) -> Path:
    texts = sim_texts(seed=3, crash="oom", port=free_port())
    for i, t in enumerate(texts):
        if "torch.OutOfMemoryError" in t:
            texts[i] = t.replace("torch.OutOfMemoryError: CUDA out of memory.", SPOOF, 1)
            break
    else:
        raise AssertionError("no OOM line in the simulated crash")
    log = tmp_path / "server.log"
    log.write_text("".join(texts), encoding="utf-8")
    return log


@pytest.mark.integration
def test_spoofing_characters_are_escaped_in_slack_webhook_status_page_and_terminal(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect, sync_playwright
    from test_page import CHROME_ARGS, CHROMIUM
    log = _log(tmp_path)
    d, hook, slack = start_with_hooks(tmp_path, daemons, log, ["crashed"], False)
    port = d.port
    try:
        got = hook.wait(lambda g: g.json["kind"] == "crashed", timeout=40, what="crashed")
        sent = slack.wait(lambda g: True, timeout=20, what="the Slack alert")
        # webhook: the JSON's text fields hold the escapes, not the characters
        body = got[0].body.decode("utf-8")
        assert raw_hidden(json.dumps(got[0].json, ensure_ascii=False)) == []
        line = got[0].json["details"]["line"]
        assert "\\u202egnp.exe\\u200b" in line and "\\x08\\x07" in line, line
        assert "\\u202e" in "\n".join(got[0].json["excerpt"])
        assert raw_hidden(body) == []
        # Slack: the same, and its own escaping of mentions and links still there
        slack_text = json.dumps(sent[0].json, ensure_ascii=False)
        assert raw_hidden(slack_text) == [] and "\\\\u202egnp.exe" in slack_text, slack_text
        assert "&lt;!channel&gt;" in slack_text and "<!channel>" not in slack_text
        assert "<https://evil" not in slack_text
        # /api/status (what the page renders)
        t = d.target("node")
        assert t is not None and t["crash"] is not None
        assert "\\u202egnp.exe" in t["crash"]["line"], t["crash"]["line"]
        _, status_body = d.get("/api/status")
        assert raw_hidden(json.loads(status_body) and status_body) == []
        assert raw_hidden(json.dumps(json.loads(status_body), ensure_ascii=False)) == []
        # the page, in Chromium: the escape is on screen, the override is not
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            sec = page.locator("section[data-target='node']")
            expect(sec.locator(".crash .line")).to_contain_text("\\u202egnp.exe", timeout=15000)
            text = sec.inner_text()
            assert raw_hidden(text) == [], raw_hidden(text)
            browser.close()
    finally:
        hook.close()
        slack.close()
    # watch's terminal (plain output, as in CI): escapes, not the characters
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(log), "--rules",
                          "sglang"], cwd=ROOT, capture_output=True, timeout=120,
                         env={**os.environ, "NO_COLOR": "1"})
    out = res.stdout.decode("utf-8")
    assert res.returncode == 1, (res.returncode, out[-2000:], res.stderr[-2000:])
    assert "\\u202egnp.exe\\u200b" in out, out[-2000:]
    assert raw_hidden(out) == [], raw_hidden(out)
