"""The status page, end to end, in a real headless Chromium (Debian `chromium`, driven by
Playwright): a person opening `/` sees the phase turn to ready, the shard bar reach k/N, the
crash reason and root-cause line of a crashed target, and log text shown as text; the fleet
counts put broken sources, stalled and crashed targets first, in red; a ready row says how
long it took and its tokens/s, a crash when it happened, the previous startup how it ended,
on the same time scale as this one; "last line" is the latest meaningful line."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

import pytest

from conftest import FIXTURES, ROOT
from support.daemon import T0, append, daemons, sim_texts, split_at, target_cfg, write_config  # noqa: F401
from logwatch.follow import LastLine

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

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
    # no server answers behind these simulated logs: probe off (tests/test_probe.py has the
    # page's "ready in log, not answering")
    cfg.write_text(f"listen: 127.0.0.1:{port}\nstate_dir: {tmp_path / 'state'}\ntargets:\n"
                   f"  - {{name: node-a, source: {good}, rules: sglang, probe: false}}\n"
                   f"  - {{name: node-b, source: {bad}, rules: sglang, probe: false}}\n")
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


def test_a_daemon_that_stops_answering_is_said_on_the_page(tmp_path: Path) -> None:
    """A daemon that accepts connections and never answers (stopped, hung; a network that
    drops packets) left the page as it was, looking current: only the "updated" clock stood
    still (helper adv25 M4: 25 s under SIGSTOP).  Now each poll gives up after 5 s and the
    page says, past 6 s, since when it has no answer, the rows dimmed; back when it answers."""
    import signal
    port, daemon = _one_target_daemon(tmp_path, "node-a", FIXTURES / "sglang-003.log")
    try:
        with _page_showing_ready(port, "node-a", 15000) as page:
            expect(page.locator("#err")).to_have_text("")
            daemon.send_signal(signal.SIGSTOP)
            try:
                expect(page.locator("#err")).to_contain_text("no answer for", timeout=15000)
                expect(page.locator("#err")).to_contain_text("what is shown is from")
                expect(page.locator("body")).to_have_class(re.compile(r"\bstale\b"))
            finally:
                daemon.send_signal(signal.SIGCONT)
            expect(page.locator("#err")).to_have_text("", timeout=15000)
            expect(page.locator("body")).not_to_have_class(re.compile(r"\bstale\b"))
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)



@pytest.mark.parametrize("holds", [(5.5,), (8.0,), (2.5, 7.0)])
def test_a_slow_but_healthy_daemon_is_waited_for(tmp_path: Path, holds: tuple[float, ...]) -> None:
    """A daemon whose /api/status takes `hold` seconds (a big fleet on two busy cores), here
    through a proxy that holds each answer that long: the page shows its targets and never
    says it does not answer.  Before (adv32, regression of ac7c972): every poll was cut at
    5 s, the page never showed a target and said "no answer for N s" for good (5.5 s); then
    (adv33, left by 099f2b7) an 8 s daemon dimmed the rows and said "no answer for 7 s" at
    each poll's 6th second, taken back at its answer: a banner flapping every 8 s; then
    (helper adv37) answers of 2.5 s and 7 s in turn said it after every 2.5 s one (3 times in
    6 answers).  Once answers have come, the next polls wait twice the longest of the last
    ten's times before saying so."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    port, daemon = _one_target_daemon(tmp_path, "node-a", FIXTURES / "sglang-003.log")
    answered: list[float] = []
    asked = [0]

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{self.path}", timeout=10) as r:
                body, ctype = r.read(), r.headers["Content-Type"]
            if self.path.startswith("/api/status"):
                asked[0] += 1
                threading.Event().wait(holds[asked[0] % len(holds)])   # the slow answer
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if self.path.startswith("/api/status"):
                answered.append(time.monotonic())

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        with _page_showing_ready(proxy.server_port, "node-a", 30000) as page:
            # from the first answer on (its time is known now)
            page.evaluate("""() => {window.__stale = document.body.classList.contains('stale');
                new MutationObserver(() => {
                if (document.body.classList.contains('stale') ||
                    document.getElementById('err').textContent) window.__stale = true})
                .observe(document.body, {attributes: true, subtree: true, childList: true,
                                         characterData: true})}""")
            n = len(answered)
            more = 2 * len(holds)
            wait_until(lambda: len(answered) >= n + more, timeout=20 * more,
                       what=f"{more} more answers")
            assert page.evaluate("window.__stale") is False
    finally:
        proxy.shutdown()
        daemon.terminate()
        daemon.wait(timeout=20)


@contextlib.contextmanager
def _page_showing_ready(port: int, name: str, timeout_ms: int) -> Iterator[Any]:
    """Chromium on the status page at `port`, once it shows target `name` ready."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            expect(page.locator(f"section[data-target='{name}'] .phase")).to_have_text(
                "ready", timeout=timeout_ms)
            yield page
        finally:
            browser.close()


def _one_target_daemon(tmp_path: Path, name: str, fixture: Path) -> tuple[int, subprocess.Popen]:
    """`logwatch run` on a copy of `fixture` as one SGLang target (no probe: no server answers
    behind it), once its /healthz answers: (its port, its process)."""
    port = free_port()
    log = tmp_path / fixture.name
    log.write_bytes(fixture.read_bytes())
    cfg = tmp_path / "logwatch.yaml"
    cfg.write_text(f"listen: 127.0.0.1:{port}\nstate_dir: {tmp_path / 'state'}\ntargets:\n"
                   f"  - {{name: {name}, source: {log}, rules: sglang, probe: false}}\n")
    daemon = subprocess.Popen([sys.executable, "-m", "logwatch", "run", "-c", str(cfg)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _ok(port), what="the daemon's /healthz")
    except BaseException:
        daemon.kill()
        daemon.wait()
        raise
    return port, daemon


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


# -- issue 12.6: what a row and the header say --------------------------------------------------

def js_dur(s: float) -> str:
    """The page's `dur()`."""
    s = int(s + 0.5)
    if s < 60:
        return f"{s}s"
    m, r = divmod(s, 60)
    return f"{m}m{r:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def test_status_page_counts_ready_in_crash_time_throughput_previous_and_last_line(
        tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    assert os.path.exists(CHROMIUM)
    port = free_port()
    # restarted: a startup that crashed (cuda_oom in graph capture), then one that is ready
    # and serving
    restarted = tmp_path / "restarted.log"
    restarted.write_text("".join(sim_texts(crash="oom", download=False))
                         + "".join(sim_texts(start=T0 + 600, serve_lines=12)))
    crashed = tmp_path / "crashed.log"
    crashed.write_text("".join(sim_texts(crash="oom", download=False)))
    # stuck: the download finished, then the shard bar stops at 12/24 and nothing more comes
    stuck = tmp_path / "stuck.log"
    texts = sim_texts(shards=24)
    bar0 = split_at(texts, "checkpoint shards:   0%")
    stuck.write_text("".join(texts[:bar0]))
    broken = tmp_path / "a-directory"
    broken.mkdir()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("restarted", restarted, from_start=True, probe=False,
                   labels={"model": "qwen3-235b", "cluster": "eu-1"}),
        target_cfg("crashed", crashed, from_start=True, probe=False),
        target_cfg("stuck", stuck, from_start=True, stall_after="3s", probe=False),
        target_cfg("broken", broken, probe=False),
    ])   # (no server behind these simulated logs: probe off, see tests/test_probe.py)
    d = daemons(cfg, port).start()
    d.wait_target("stuck", lambda t: t["phase"] == "downloading", "the download")
    # the shard bar: one redraw per write, as tqdm writes them ("\rframe", the next frame's
    # "\r" ends it), each read before the next; then silence at 12/24
    assert "12/24" in texts[bar0 + 12] and texts[bar0 + 12].startswith("\r")
    for k in range(13):
        append(stuck, texts[bar0 + k])
        if k:
            d.wait_target("stuck", lambda t, k=k: (t["shards"] or {}).get("loaded") == k - 1,
                          f"shard frame {k - 1}")
    st = {t["name"]: t for t in d.status()["targets"]}
    ready = d.wait_target("restarted", lambda t: t["phase"] == "ready"
                          and t["previous_startup"] and t["stats"].get("gen_throughput"),
                          "the restarted target ready with its previous startup")
    assert ready["ready_in_seconds"] and ready["ready_in_seconds"] > 0
    prev = ready["previous_startup"]
    assert prev["outcome"] == "crashed" and prev["reason"] == "cuda_oom"
    assert st["crashed"]["crash"]["at"] > 0
    assert st["broken"]["source_state"]["error"] and st["broken"]["status"] == "error"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/")
        # header: error, stalled, crashed first, in red, each its own element
        for k in ("error", "stalled", "crashed"):
            expect(page.locator(f"#count-{k}")).to_have_text(f"1 {k}", timeout=20000)
            expect(page.locator(f"#count-{k}")).to_have_class("count bad")
        first = page.locator("#counts > span").evaluate_all("es => es.map(e => e.dataset.count)")
        assert first[:3] == ["error", "stalled", "crashed"]
        # the stalled target is counted as stalled, not in its phase; the broken source is no
        # longer "1 waiting"
        assert page.locator("#counts [data-count='loading_shards']").count() == 0
        assert page.locator("#counts [data-count='waiting']").count() == 0
        expect(page.locator("#count-targets")).to_have_text("4 targets")
        stuck_row = page.locator("section[data-target='stuck']")
        expect(stuck_row.locator(".phase")).to_have_text("loading_shards (stalled)")
        # last line: the moving shard bar, not the finished download bar before it
        expect(stuck_row.locator(".last")).to_contain_text("12/24")
        assert "100%" not in stuck_row.locator(".last").text_content()
        expect(page.locator("section[data-target='broken'] .src")).to_contain_text("is a directory")
        # the ready row: launch-to-ready, tokens/s, labels
        r = page.locator("section[data-target='restarted']")
        expect(r.locator(".since")).to_have_text("ready in " + js_dur(ready["ready_in_seconds"]))
        tps = d.target("restarted")["stats"]["gen_throughput"]
        expect(r.locator(".tps")).to_have_text(f"{int(tps + 0.5)} tok/s")
        expect(r.locator(".labels")).to_have_text("model=qwen3-235b cluster=eu-1")
        # the previous startup says it crashed, and why
        expect(r.locator(".tl[data-lane='previous'] .outcome")).to_have_text("crashed: cuda_oom")
        expect(r.locator(".tl[data-lane='previous'] .outcome")).to_have_class("outcome crashed")
        # both lanes on one time scale: rendered widths in the ratio of the totals
        widths = r.locator(".tl").evaluate_all(
            "ls => ls.map(l => ({lane: l.dataset.lane, lw: l.querySelector('.lane')"
            ".getBoundingClientRect().width, w: [...l.querySelectorAll('.seg')]"
            ".reduce((a, s) => a + s.getBoundingClientRect().width, 0)}))")
        by = {w["lane"]: w for w in widths}
        now_total = sum(v for v in ready["durations"].values() if v > 0)
        prev_total = sum(v for v in prev["phases"].values() if v > 0)
        assert now_total != prev_total
        want = now_total / prev_total
        got = by["now"]["w"] / by["previous"]["w"]
        assert abs(got / want - 1) < 0.05, (by, now_total, prev_total)
        longer = by["now"] if now_total > prev_total else by["previous"]
        assert abs(longer["w"] - longer["lw"]) <= 2          # the longer one is full width
        # the crash box: when it happened
        c = page.locator("section[data-target='crashed']")
        at = time.strftime("%H:%M:%S", time.localtime(st["crashed"]["crash"]["at"]))
        expect(c.locator(".crash .when")).to_have_text(
            re.compile(r"^crashed " + at + r", \d+[smhd] ago$"))
        shot = tmp_path / "status.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.exists() and shot.stat().st_size > 0


def test_last_line_skips_finished_bars_and_follows_redraws() -> None:
    """`last_line`: the latest line that is not a tqdm frame, unless the newest line is a
    bar still moving; a redraw that arrives alone (`\\rframe`, no terminator yet) counts."""
    f = LastLine()
    seen = []
    for chunk in ["[10:00:00 TP0] Load weight begin.\n",
                  "\rmodel-1.safetensors:  51%|█████     | 2.54G/4.98G [00:02<00:03, 1.2GB/s]",
                  "\rmodel-1.safetensors: 100%|██████████| 4.98G/4.98G [00:04<00:00, 1.2GB/s]\n",
                  "\rLoading safetensors checkpoint shards:  50% Completed | 12/24 [00:07<00:07,  1.60it/s]",
                  "\rLoading safetensors checkpoint shards: 100% Completed | 24/24 [00:15<00:00,  1.60it/s]",
                  "\n[10:00:20 TP0] Load weight ", "end. elapsed=15 s\n",
                  "x" * 10 + "\n" + "\rCapturing batches (bs=8 avail_mem=5.80 GB):  40%|████      | 4/10 [00:01<00:01,  2.40it/s]"
                  "[2026-03-17 07:16:46 TP0] glued after the bar\n"]:
        f.note(chunk.encode())
        seen.append(f.text)
    assert seen == [
        "[10:00:00 TP0] Load weight begin.",
        "model-1.safetensors:  51%|█████     | 2.54G/4.98G [00:02<00:03, 1.2GB/s]",
        "[10:00:00 TP0] Load weight begin.",          # the finished download bar is not kept
        "Loading safetensors checkpoint shards:  50% Completed | 12/24 [00:07<00:07,  1.60it/s]",
        "[10:00:00 TP0] Load weight begin.",          # finished: back to the last real line
        "[10:00:00 TP0] Load weight begin.",          # an unfinished line waits ...
        "[10:00:20 TP0] Load weight end. elapsed=15 s",   # ... for the chunk that ends it
        "[2026-03-17 07:16:46 TP0] glued after the bar",
    ]


@pytest.mark.integration
def test_page_timeline_draws_spans_and_what_ran_beside_them(tmp_path: Path) -> None:
    """SGLang's overlap mode (tests/fixtures/built): the `now` lane has one segment per span
    of the main line, and the weights that loaded while graphs were captured are on a lane
    of their own, placed where they began; the lanes share one scale (the startup's wall
    time, not the sum of the phases)."""
    port, daemon = _one_target_daemon(tmp_path, "overlap",
                                      FIXTURES / "built" / "sglang-0523-overlap.log")
    try:
        t = wait_until(lambda: next((x for x in status(port)["targets"]
                                     if x["phase"] == "ready"), None), what="ready")
        assert [s["phase"] for s in t["spans"] if s["beside"]] == ["loading_shards"]
        assert t["total_seconds"] == 60.0 and sum(t["durations"].values()) > 60.0
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            r = page.locator("section[data-target='overlap']")
            now = r.locator(".tl[data-lane='now'] .seg")
            expect(now).to_have_count(4)
            assert [c.split()[1] for c in now.evaluate_all("ss => ss.map(s => s.className)")] == \
                ["launching", "loading_shards", "allocating", "cuda_graph"]
            beside = r.locator(".tl[data-lane='beside'] .seg")
            expect(beside).to_have_count(2)               # the time before it, then the span
            assert beside.nth(1).get_attribute("class") == "seg loading_shards"
            w = r.locator(".tl").evaluate_all(
                "ls => ls.map(l => [...l.querySelectorAll('.seg')].map(s => "
                "s.getBoundingClientRect()))")
            now_left, gap, side = w[0][0]["x"], w[1][0], w[1][1]
            lane_w = sum(b["width"] for b in w[0])            # 60 s of wall time
            assert abs((side["x"] - now_left) / lane_w - 10 / 60) < 0.02     # began at +10 s
            assert abs(side["width"] / lane_w - 45 / 60) < 0.02               # lasted 45 s
            assert gap["width"] > 0
            browser.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


@pytest.mark.parametrize("fixture, lines, selector, said", [
    # a PD prefill server whose KV bootstrap port was taken: ready, one part of it failed
    ("sglang-0523-pd-bootstrap-port-taken.log", [], ".degraded",
     "degraded: KV bootstrap server down"),
    # a crash whose rule says what it means and how to fix it (`meaning:`)
    ("sglang-0523-download.log",
     ["[2026-12-01 10:00:20 TP1] Scheduler hit an exception: Traceback (most recent call last):",
      "AssertionError: 8 is not divisible by 3", "",
      "[2026-12-01 10:00:21] Received sigquit from a child process. It usually means the child "
      "failed."], ".crash .meaning",
     "A size the model splits across GPUs (8) is not divisible by the parallel size asked for"),
])
def test_the_page_says_a_degrade_and_what_a_crash_means(tmp_path: Path, fixture: str,
                                                       lines: list[str], selector: str,
                                                       said: str) -> None:
    """What /api/status had and the page never showed: a server ready with a part of it
    failed (`degraded`), and the sentence a crash's rule gives with its fix (`meaning`)."""
    src = (FIXTURES / "built" / fixture).read_text().splitlines()
    if lines:
        src = src[:next(i for i, x in enumerate(src) if "Load weight begin" in x)] + lines
    log = tmp_path / "src" / fixture
    log.parent.mkdir()
    log.write_text("\n".join(src) + "\n")
    port, daemon = _one_target_daemon(tmp_path, "node-a", log)
    try:
        wait_until(lambda: next((x for x in status(port)["targets"]
                                 if x["phase"] in ("ready", "crashed")), None), what="a verdict")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            box = page.locator(f"section[data-target='node-a'] {selector}")
            expect(box).to_be_visible()
            expect(box).to_contain_text(said)
            browser.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


def test_a_degraded_server_that_crashed_shows_its_crash_not_the_degrade(tmp_path: Path) -> None:
    """A PD prefill server degraded while serving (its KV transfers timing out), then its
    scheduler dying: the row says the crash, not `degraded` (the degrade was that startup's,
    in its history); /api/status and `logwatch_degraded` say the same.  Before: the crashed
    row still said `degraded: PD KV transfer failing ...` under its crash box."""
    from support.receivers import serving_crash
    src = (FIXTURES / "built" / "sglang-0523-pd-bootstrap-timeout.log").read_text()
    log = tmp_path / "src" / "prefill.log"
    log.parent.mkdir()
    log.write_text(src + serving_crash("2026-12-01 10:20:00"))
    port, daemon = _one_target_daemon(tmp_path, "node-a", log)
    try:
        t = wait_until(lambda: next((x for x in status(port)["targets"]
                                     if x["phase"] == "crashed"), None), what="the crash")
        assert t["degraded"] is None, t["degraded"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert 'logwatch_degraded{target="node-a"} 0.0' in r.read().decode()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            row = page.locator("section[data-target='node-a']")
            expect(row.locator(".crash")).to_contain_text("cuda_oom")
            expect(row.locator(".degraded")).to_be_hidden()
            browser.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)
