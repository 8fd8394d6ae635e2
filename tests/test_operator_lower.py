"""The lower defects of issue 32 (what the operator sees), each a test that failed before
its fix: a log record that breaks `watch`'s live panel (and leaves its rows on the screen
after a reconnect), a config typo that hid a target's other errors, the serving figures of
an ended launch shown as current, caught-up lines timed by when they were read."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from logwatch import log
from logwatch.view import TargetView
from support.terminal import Tty


def panel_view(now: float, **kw: Any) -> TargetView:
    base: dict[str, Any] = dict(name="node1", engine="sglang", source="ssh://node1/x.log",
                                kind="ssh", labels={}, now=now, phase="loading_shards",
                                source_up=True, source_message="reading /x.log",
                                last_line="Loading safetensors checkpoint shards:  48% 40/83")
    return TargetView(**{**base, **kw})


@pytest.fixture
def structlog_restored() -> Iterator[None]:
    import structlog
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


# -- the live panel and the log records written while it runs ----------------------------------

def test_a_warning_while_the_panel_runs_is_printed_above_it_and_leaves_no_rows_behind(
        monkeypatch: pytest.MonkeyPatch, structlog_restored: None) -> None:
    """At an SSH reconnect the GPU stream says "gpu: connection lost" (structlog, stderr)
    while rich's Live owns the terminal.  Written to the stderr of setup's time, the record
    landed inside the panel; the next redraw erased from the wrong row: the warning was
    lost and the panel's top rows stayed on the screen after watch ended."""
    from logwatch.sinks.display import RichDisplay
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)       # stdout and stderr: one terminal
    log.setup("warning", json=False)             # as `logwatch watch` does, before the panel
    display = RichDisplay("node1", tty)
    display.console.width = 100
    display.start()
    try:
        for t in range(3):
            display.update(panel_view(1000.0 + t), [], 1000.0 + t)
            display.live.refresh()
            if t == 0:
                log.get("gpu").warning("gpu: connection lost", error="EOF", restart_in=1.0)
    finally:
        display.finish(panel_view(1003.0), "interrupted in loading_shards")
    rows = tty.screen()
    said = [r for r in rows if "gpu: connection lost" in r]
    assert len(said) == 1 and "error=EOF" in said[0], rows
    left = [r for r in rows if r.startswith(("target", "engine", "phase ", "source", "last line"))]
    assert not left, rows        # the panel is transient: none of its rows is left
    assert rows[-1].endswith("interrupted in loading_shards"), rows


# -- a config typo no longer hides the target's other errors ------------------------------------

def test_every_problem_of_one_target_is_reported_with_did_you_mean(tmp_path: Any) -> None:
    """A typo (`stal_after`) stopped the target's check at once: the operator fixed one
    error per run.  Now every problem of the target is one message naming the file, the key
    and what is wrong, the typo with its "did you mean"."""
    from logwatch.app.config import parse_config
    from logwatch.errors import ConfigErrors
    path = str(tmp_path / "logwatch.yaml")
    doc = {"targets": [{"name": "node-1", "source": "relative.log", "stal_after": "5m",
                        "sorce_down_after": "1m", "slow_factor": 0.5, "poll": "maybe",
                        "labels": {"1bad": "x", "ok": {"a": 1}}, "rotate_wait": "5x",
                        "ssh": {"conect_timeout": "5s", "keepalive_interval": "soon"},
                        "stall_after": {"loading_shards": "10x", "nophase": "1m"}}]}
    with pytest.raises(ConfigErrors) as info:
        parse_config(doc, path)
    got = {e.key: e.message for e in info.value.errors}
    assert set(got) == {
        "targets[0].stal_after", "targets[0].sorce_down_after", "targets[0].source",
        "targets[0].labels.1bad", "targets[0].labels.ok", "targets[0].stall_after.loading_shards",
        "targets[0].stall_after.nophase", "targets[0].slow_factor", "targets[0].ssh.conect_timeout",
        "targets[0].ssh.keepalive_interval", "targets[0].poll", "targets[0].rotate_wait"}, got
    assert got["targets[0].stal_after"].startswith("unknown key (did you mean stall_after?")
    assert got["targets[0].sorce_down_after"].startswith(
        "unknown key (did you mean source_down_after?")
    assert got["targets[0].ssh.conect_timeout"].startswith(
        "unknown key (did you mean connect_timeout?")
    text = str(info.value).splitlines()
    assert text[0] == "12 problems:", text
    assert all(line.startswith(f"  {path}: targets[0].") for line in text[1:]), text
    # one problem is still one message, and a good target still parses
    with pytest.raises(Exception) as one:
        parse_config({"targets": [{"name": "a", "source": "/x.log", "stal_after": "5m"}]}, path)
    assert type(one.value).__name__ == "ConfigError" and \
        str(one.value).startswith(f"{path}: targets[0].stal_after: unknown key (did you mean"), one
    cfg = parse_config({"targets": [{"name": "a", "source": "/x.log", "stall_after": "5m",
                                     "ssh": {"connect_timeout": "5s"}, "poll": "yes"}]}, path)
    t = cfg.targets[0]
    assert (t.stall_after, t.ssh.connect_timeout, t.poll) == (300.0, 5.0, True)


# -- the serving figures of an ended launch are not shown as current ---------------------------

def test_an_ended_launchs_serving_figures_are_not_shown_as_current() -> None:
    """`watch` waiting for a new startup (the latest one had ended before it attached) showed
    the old launch's `serving 3,718 tok/s · running 31` in its panel; `/api/status` kept a
    stopped or crashed launch's figures in `stats`.  They are that launch's (the ledger keeps
    them), not what serves now."""
    from rich.console import Console

    from logwatch.counters import Counters
    from logwatch.machine import State
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    from logwatch.sinks.display import RichDisplay
    from logwatch.view import SeenAtAttach, build_view
    serving = {"gen_throughput": 3718.0, "running_requests": 31.0}
    pipe = LogPipeline(load_pack("sglang"))

    def view(phase: str, seen: SeenAtAttach | None = None) -> TargetView:
        pipe.state = State(phase=phase, startup_id="s1", stats=dict(serving))
        return build_view(name="node1", source="x.log", kind="file", labels={}, now=1000.0,
                          pipe=pipe, counters=Counters(), history=None, seen_at_attach=seen)

    assert view("ready").stats == serving                 # the launch that serves now
    for ended in ("stopped", "crashed"):
        v = view(ended)
        assert v.stats == {} and v.to_json()["stats"] == {}, ended
    old = view("ready", SeenAtAttach("ready", "s1", 3 * 3600.0, 990.0))
    assert old.historic
    tty = Tty()
    Console(file=tty, width=120).print(RichDisplay("node1", tty)._render(old, 1000.0))
    shown = "\n".join(tty.screen())
    assert "waiting for a new startup" in shown and "tok/s" not in shown and \
        "running 31" not in shown, shown
    live = Tty()
    Console(file=live, width=120).print(RichDisplay("node1", live)._render(view("ready"), 1000.0))
    assert "3,718 tok/s · running 31" in "\n".join(live.screen())
