"""A target whose loop dies of an unexpected error is isolated and retried: the daemon's
other targets go on, and the failed one is restarted from its checkpoint after a backoff.

The fault is injected (a source whose first reader raises): it stands for a bug nobody
knows yet, which is exactly the case the retry exists for; real faults the sources know
(a missing file, a dropped SSH session) are handled inside the source and never get here.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import yaml

import pytest

from support.daemon import free_port, sim_texts
import logwatch.app.daemon as daemon_mod
import logwatch.app.supervise as supervise_mod
from logwatch.app.config import load_config
from logwatch.sources import local as local_mod

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


def test_a_target_that_fails_is_retried_and_the_others_go_on(tmp_path: Path, monkeypatch) -> None:
    flaky, healthy = tmp_path / "flaky.log", tmp_path / "healthy.log"
    text = "".join(sim_texts(seed=9))
    flaky.write_text(text, encoding="utf-8")
    healthy.write_text(text, encoding="utf-8")
    cfg_path = tmp_path / "logwatch.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "state"),
        "targets": [{"name": "flaky", "source": str(flaky)},
                    {"name": "healthy", "source": str(healthy)}]}), encoding="utf-8")
    monkeypatch.setattr(supervise_mod, "RETRY_BASE", 0.3)
    real_events = local_mod.LocalFileSource.events
    calls = {"flaky": 0}

    def events(self):  # type: ignore[no-untyped-def]
        if str(self.path).endswith("flaky.log"):
            calls["flaky"] += 1
            if calls["flaky"] <= 2:        # fails twice, then works
                raise RuntimeError("injected: a bug nobody knows yet")
        return real_events(self)

    monkeypatch.setattr(local_mod.LocalFileSource, "events", events)

    async def run() -> dict[str, str]:
        d = daemon_mod.Daemon(load_config(cfg_path), str(cfg_path))
        await d.start()
        serve = asyncio.create_task(d.serve())
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                phases = {v.name: v.phase for v in d.views(time.time())}
                if phases.get("flaky") == "ready" and phases.get("healthy") == "ready":
                    return phases
                await asyncio.sleep(0.05)
            return {v.name: v.phase for v in d.views(time.time())}
        finally:
            d.request_stop()
            await serve
            await d.shutdown()

    phases = asyncio.run(run())
    assert phases == {"flaky": "ready", "healthy": "ready"}
    assert calls["flaky"] == 3     # failed twice (backoff 0.3 s, 0.6 s), the third run read it


def test_a_target_that_cannot_be_started_is_shown_as_error(tmp_path: Path, monkeypatch) -> None:
    """A target whose construction fails (an error nobody foresaw: injected here in its
    start) is shown as `error` in /api/status, the page and /metrics, saying why, until it
    starts.  Before (helper adv34 M3), only the daemon's log said so: it was in none of
    them, though the README says such a target is shown as `error`."""
    import aiohttp
    log = tmp_path / "a.log"
    log.write_text("".join(sim_texts(seed=3)), encoding="utf-8")
    cfg_path = tmp_path / "logwatch.yaml"
    port = free_port()
    cfg_path.write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{port}", "state_dir": str(tmp_path / "state"),
        "targets": [{"name": "broken", "source": str(log)}]}), encoding="utf-8")
    monkeypatch.setattr(supervise_mod, "RETRY_BASE", 1.5)
    real_target = daemon_mod.Target
    calls = {"n": 0}

    def target(cfg, **kw):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected: a bug nobody knows yet")
        return real_target(cfg, **kw)

    monkeypatch.setattr(daemon_mod, "Target", target)

    async def run() -> tuple[list[str], str, str]:
        d = daemon_mod.Daemon(load_config(cfg_path), str(cfg_path))
        await d.start()
        serve = asyncio.create_task(d.serve())
        try:
            v = d.views(time.time())
            seen = [f"{x.name} {x.status} {x.source_message}" for x in v]
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                    metrics = await r.text()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and \
                    [x.phase for x in d.views(time.time())] != ["ready"]:
                await asyncio.sleep(0.05)
            return seen, " ".join(f"{x.name} {x.phase}" for x in d.views(time.time())), metrics
        finally:
            d.request_stop()
            await serve
            await d.shutdown()

    seen, later, metrics = asyncio.run(run())
    assert 'logwatch_source_state{state="error",target="broken"} 1' in metrics, \
        [ln for ln in metrics.splitlines() if "broken" in ln][:20]
    assert seen == ["broken error not started: injected: a bug nobody knows yet (tried again "
                    "later)"], seen
    assert later == "broken ready" and calls["n"] == 2, (later, calls)


def test_a_target_not_started_exports_no_counter_at_0(tmp_path: Path) -> None:
    """A target that could not be started exports none of its counters: at 0 they were a
    reset after its last run's counts (a restart that failed, a daemon restarted), and the
    start after counted them all again: `increase(logwatch_crashes_total[10m]) > 0` (the
    shipped LogwatchServerCrashed) paged for a crash of days ago (helper adv37).  Its
    source state (error) is exported."""
    from logwatch.app.supervise import Unstarted
    from logwatch.sinks.metrics import MetricsCache
    cfg_path = tmp_path / "logwatch.yaml"
    cfg_path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "s"), "targets": [
        {"name": "a", "source": str(tmp_path / "a.log")}]}), encoding="utf-8")
    cfg = load_config(cfg_path).targets[0]
    text = MetricsCache().render([Unstarted(cfg, "boom", time.time())], None).decode()
    mine = [ln for ln in text.splitlines() if 'target="a"' in ln]
    assert 'logwatch_source_state{state="error",target="a"} 1.0' in mine, mine
    counters = [ln for ln in mine if ln.split("{")[0].endswith(("_total", "_bucket", "_count",
                                                                  "_sum"))]
    assert counters == [], counters
    assert not any(ln.startswith("logwatch_last_line_timestamp_seconds") for ln in mine)


def test_a_reload_tries_a_target_that_cannot_start_once(tmp_path: Path, monkeypatch) -> None:
    """A SIGHUP that adds (or changes) a target that cannot be started tries it once.
    Before (helper adv37), twice in the same reload: two 'target not started' lines, and its
    first retry 20 s later instead of 10 s ('attempt 3')."""
    log = tmp_path / "a.log"
    log.write_text("".join(sim_texts(seed=3)), encoding="utf-8")
    cfg_path = tmp_path / "logwatch.yaml"
    doc = {"listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "state"),
           "targets": []}
    cfg_path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    calls = {"n": 0}

    def target(cfg, **kw):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        raise RuntimeError("injected: cannot start")

    monkeypatch.setattr(daemon_mod, "Target", target)

    async def run() -> tuple[int, int]:
        d = daemon_mod.Daemon(load_config(cfg_path), str(cfg_path))
        await d.start()
        try:
            doc["targets"] = [{"name": "new", "source": str(log)}]
            cfg_path.write_text(yaml.safe_dump(doc), encoding="utf-8")
            await d.reload()
            return calls["n"], d.supervisor.retry["new"][0]
        finally:
            await d.shutdown()

    assert asyncio.run(run()) == (1, 1)


def test_a_target_removed_by_a_reload_leaves_no_supervision_behind(tmp_path: Path) -> None:
    """A removed target's refusal and outage records go at the reload: before, each name
    that ever failed stayed in the supervisor for the daemon's life (names that churn)."""
    log = tmp_path / "a.log"
    log.write_text("".join(sim_texts(seed=3)), encoding="utf-8")
    cfg_path = tmp_path / "logwatch.yaml"
    doc = {"listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "state"),
           "targets": [{"name": "job1", "source": str(log)}]}
    cfg_path.write_text(yaml.safe_dump(doc), encoding="utf-8")

    async def run() -> tuple[set[str], set[str], set[str]]:
        d = daemon_mod.Daemon(load_config(cfg_path), str(cfg_path))
        await d.start()
        try:
            sup = d.supervisor
            sup.fatal["job1"], sup.retry["job1"] = (2, 0.0), (1, 0.0)
            sup.source_down.add("job1")
            doc["targets"] = [{"name": "job2", "source": str(log)}]
            cfg_path.write_text(yaml.safe_dump(doc), encoding="utf-8")
            await d.reload()
            return set(sup.fatal), set(sup.retry), sup.source_down
        finally:
            await d.shutdown()

    assert asyncio.run(run()) == (set(), set(), set())


def test_an_unstarted_target_is_down_since_its_first_failure(tmp_path: Path, monkeypatch) -> None:
    """Each retry of a target that cannot start keeps the time of its first failure (its
    `source_down_since` in /api/status).  Before (helper adv37, low): each retry restarted
    it, a target down for an hour said "down since" its last retry."""
    cfg_path = tmp_path / "logwatch.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "state"),
        "targets": [{"name": "broken", "source": str(tmp_path / "a.log")}]}), encoding="utf-8")

    def target(cfg, **kw):  # type: ignore[no-untyped-def]
        raise RuntimeError("injected: cannot start")

    monkeypatch.setattr(daemon_mod, "Target", target)
    d = daemon_mod.Daemon(load_config(cfg_path), str(cfg_path))
    cfg = d.config.targets[0]
    now = [1000.0]
    monkeypatch.setattr(daemon_mod.clock, "now", lambda: now[0])
    d._start_target(cfg)
    now[0] = 1060.0               # its retry, a minute later
    d._start_target(cfg)
    view = d.unstarted["broken"].view(1200.0)
    assert view.source_down_since == 1000.0, view.source_down_since
