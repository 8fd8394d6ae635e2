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
