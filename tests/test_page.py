"""The status page, end to end, in a real headless Chromium (Debian `chromium`, driven by
Playwright): a person opening `/` sees the phase turn to ready, the shard bar reach k/N, the
crash reason and root-cause line of a crashed target, and log text shown as text."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from conftest import FIXTURES, ROOT

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
XSS = ('RuntimeError: <script>window.__xss=1</script><img src=x onerror="window.__xss=2"> '
       '& <b>not bold</b>')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(fn, timeout: float = 30.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as r:
        return json.loads(r.read())


def test_status_page_in_chromium(tmp_path: Path) -> None:
    assert os.path.exists(CHROMIUM), "install Debian chromium (.ci/run does)"
    port = free_port()
    good, bad = tmp_path / "good.log", tmp_path / "bad.log"
    good.write_text("")
    # a crashing startup whose last traceback line is an injection attempt
    bad.write_text("[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m')\n"
                   "[2026-01-01 10:00:05 TP0] Load weight begin. avail mem=78.50 GB\n"
                   + (FIXTURES / "sglang-027.log").read_text() + "\n" + XSS + "\n")
    cfg = tmp_path / "logwatch.yaml"
    cfg.write_text(f"listen: 127.0.0.1:{port}\nstate_dir: {tmp_path / 'state'}\ntargets:\n"
                   f"  - {{name: node-a, source: {good}, rules: sglang}}\n"
                   f"  - {{name: node-b, source: {bad}, rules: sglang}}\n")
    daemon = subprocess.Popen([sys.executable, "-m", "logwatch", "run", "-c", str(cfg)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    writer = None
    try:
        wait_until(lambda: _ok(port), what="the daemon's /healthz")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            a = page.locator("section[data-target='node-a']")
            b = page.locator("section[data-target='node-b']")
            expect(a.locator(".phase")).to_have_text("waiting", timeout=15000)
            # now the server starts: the page follows it to ready
            writer = subprocess.Popen([sys.executable, "-m", "logwatch.app.simulate", str(good),
                                       "--speed", "0.05"], cwd=ROOT)
            expect(a.locator(".phase")).to_have_text("ready", timeout=30000)
            expect(a.locator(".bar .txt")).to_contain_text("24/24 shards")
            fill = a.locator(".bar .fill").evaluate("e => e.style.width")
            assert fill == "100%"
            expect(a.locator(".timeline .tl")).to_have_count(1)
            # the crashed target: reason, root-cause line, excerpt behind a toggle
            expect(b.locator(".phase")).to_have_text("crashed")
            expect(b.locator(".crash .reason")).to_contain_text("crashed: cuda_oom during cuda_graph")
            expect(b.locator(".crash .line")).to_have_text("torch.OutOfMemoryError:")
            assert not b.locator(".crash pre").is_visible()
            b.locator(".crash summary").click()
            expect(b.locator(".crash pre")).to_contain_text("Traceback (most recent call last):")
            # log text is text: the injection is displayed literally and never runs
            expect(b.locator(".crash pre")).to_contain_text("<script>window.__xss=1</script>")
            expect(b.locator(".last")).to_contain_text('<img src=x onerror="window.__xss=2">')
            assert page.evaluate("() => window.__xss") is None
            assert page.locator("section .crash b").count() == 0
            assert page.locator("img").count() == 0
            expect(page.locator("#counts")).to_contain_text("2 targets")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "status-page.png"), full_page=True)
            browser.close()
        st = {t["name"]: t for t in status(port)["targets"]}
        assert st["node-a"]["phase"] == "ready" and st["node-b"]["crash"]["reason"] == "cuda_oom"
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
        daemon.terminate()
        daemon.wait(timeout=20)


def _ok(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_status_endpoint_escapes_nothing_itself_and_page_has_no_external_assets(tmp_path: Path) -> None:
    """The page is self-contained (works offline): no http(s) references to other hosts."""
    from logwatch.sinks.page import PAGE
    assert "<script src" not in PAGE and "<link" not in PAGE
    assert "http://" not in PAGE and "https://" not in PAGE
    assert "innerHTML" not in PAGE  # every log text goes through textContent
