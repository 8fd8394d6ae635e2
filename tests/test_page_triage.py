"""The page triages (issue 32): at 20 and at 200 targets the broken ones (error, crashed,
silent, stalled) are on the first screen, pinned above the healthy ones whatever their names;
`/` filters by name and label, a header count shows only its targets, a permalink opens the
page on its target, group by a label; checked in a real headless Chromium (screenshots in
tests/artifacts/)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect, sync_playwright

from support.daemon import daemons, free_port, sim_texts, target_cfg, write_config  # noqa: F401
from test_operator import dead_log
from test_page import ARTIFACTS, CHROME_ARGS, CHROMIUM

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

BROKEN = ("zz-crashed", "zz-dir", "zz-dead", "zz-stuck")   # named to sort last by name
VIEWPORT = {"width": 1280, "height": 800}


def fleet(tmp_path: Path, n: int) -> list[dict[str, Any]]:
    """n targets: n - 4 ready (fresh logs), a crash, a directory (error), a log dead for an
    hour (silent) and a startup that stops printing (stalled after 2 s)."""
    now = time.time()
    ready_text = "".join(sim_texts(start=now - 300, serve_lines=3))
    out = []
    for i in range(n - len(BROKEN)):
        p = tmp_path / f"node-{i:03d}.log"
        p.write_text(ready_text)
        out.append(target_cfg(f"node-{i:03d}", p, gpu="off", probe="off",
                              labels={"cluster": f"c{i % 3}", "model": "qwen3"}))
    crashed = tmp_path / "crashed.log"
    crashed.write_text("".join(sim_texts(start=now - 300, crash="oom")))
    stuck = tmp_path / "stuck.log"
    texts = sim_texts(start=now - 30)
    stuck.write_text("".join(t for t in texts[:12]))
    (tmp_path / "a-dir").mkdir()
    dead_dir = tmp_path / "dead"
    dead_dir.mkdir()
    out += [target_cfg("zz-crashed", crashed, gpu="off", probe="off", labels={"cluster": "c1"}),
            target_cfg("zz-dir", tmp_path / "a-dir", gpu="off", probe="off", labels={"cluster": "c2"}),
            target_cfg("zz-dead", dead_log(dead_dir), gpu="off", probe="off", labels={"cluster": "c0"}),
            target_cfg("zz-stuck", stuck, gpu="off", probe="off", stall_after="2s",
                       labels={"cluster": "c1"})]
    return out


def on_first_screen(page: Any, name: str) -> bool:
    box = page.locator(f"section[data-target='{name}']").bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + min(box["height"], 40) <= VIEWPORT["height"]


@pytest.mark.parametrize("n", [20, 200])
def test_the_broken_targets_are_on_the_first_screen(tmp_path: Path, daemons: Any, n: int) -> None:  # noqa: F811
    assert os.path.exists(CHROMIUM), "install Debian chromium (.ci/run does)"
    port = free_port()
    cfg = write_config(tmp_path / "cfg.yaml", port, tmp_path / "state", fleet(tmp_path, n))
    d = daemons(cfg, port).start(wait=False)
    d.wait_healthy(timeout=60)
    want = {"zz-crashed": "crashed", "zz-dir": "error", "zz-dead": "silent", "zz-stuck": "stalled"}
    for name, status in want.items():
        d.wait_target(name, lambda t, s=status: t["status"] == s, status, timeout=60)
    d.wait_target(f"node-{n - 5:03d}", lambda t: t["status"] == "ready", "ready", timeout=60)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"http://127.0.0.1:{port}/")
        expect(page.locator("#count-targets")).to_have_text(f"{n} targets", timeout=20000)
        for name, status in want.items():
            expect(page.locator(f"section[data-target='{name}']")).to_have_class(
                re.compile(r"\bbad\b"), timeout=10000)
        # a source in error says so in its status cell (before: "waiting", helper adv25 M5)
        expect(page.locator("section[data-target='zz-dir'] .phase")).to_have_text("source error")
        # pinned on top, worst first, whatever their names; all on the first screen
        order = page.eval_on_selector_all("#targets section", "s => s.map(e => e.dataset.target)")
        assert order[:4] == ["zz-dir", "zz-crashed", "zz-dead", "zz-stuck"], order[:8]
        for name in BROKEN:
            assert on_first_screen(page, name), name
        assert page.evaluate("() => document.body.classList.contains('compact')") == (n > 30)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"page-triage-{n}.png"))
        # `/` filters by name or label
        page.keyboard.press("/")
        page.keyboard.type("zz-de")
        expect(page.locator("#targets section:visible")).to_have_count(1)
        expect(page.locator("#shown")).to_have_text(f"1 of {n} shown")
        page.keyboard.press("Escape")
        expect(page.locator("#targets section:visible")).to_have_count(n)
        page.locator("#q").fill("cluster=c2")
        c2 = sum(1 for i in range(n - 4) if i % 3 == 2) + 1
        expect(page.locator("#targets section:visible")).to_have_count(c2)
        page.locator("#q").fill("")
        # a header count shows only its targets; again: every target
        page.locator("#count-crashed").click()
        expect(page.locator("#targets section:visible")).to_have_count(1)
        assert "status=crashed" in page.evaluate("() => location.hash")
        page.locator("#count-crashed").click()
        expect(page.locator("#targets section:visible")).to_have_count(n)
        # group by a label: a heading per cluster, the broken ones' groups first
        page.select_option("#group", "cluster")
        expect(page.locator("#targets .group")).to_have_count(3)
        first_group = page.locator("#targets .group").first.text_content() or ""
        assert "need a look" in first_group, first_group
        page.select_option("#group", "")
        # a permalink: the page opens on that target, highlighted, on screen
        far = f"node-{n - 5:03d}"
        page.goto(f"http://127.0.0.1:{port}/#target={far}")
        page.reload()
        row = page.locator(f"section[data-target='{far}']")
        expect(row).to_have_class(re.compile(r"\bfocus\b"), timeout=10000)
        assert on_first_screen(page, far) or n <= 20
        page.screenshot(path=str(ARTIFACTS / f"page-permalink-{n}.png"))
        browser.close()
