"""The lower defects of issue 32 (what the operator sees), each a test that failed before
its fix: a log record that breaks `watch`'s live panel (and leaves its rows on the screen
after a reconnect), a config typo that hid a target's other errors, the serving figures of
an ended launch shown as current, caught-up lines timed by when they were read."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from logwatch import log
from logwatch.view import TargetView
from support.daemon import daemons  # noqa: F401  (the fixture)
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
        pipe.state = State(phase=phase, startup_id="s1", stats=dict(serving),
                           stats_by={"": dict(serving)}, stats_seen={"": 995.0})
        return build_view(TargetView(name="node1", engine="auto", source="x.log", kind="file",
                                     labels={}, now=1000.0, counters=Counters(),
                                     seen_at_attach=seen), pipe)

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


# -- lines read long after they were written are timed by their stamps --------------------------

T0 = 1_767_261_600.0
STARTUP_LINES = [  # (seconds after T0, message): an SGLang launch, allocating when read
    (0, "server_args=ServerArgs(model_path='m', tp_size=1, port=30000, host='0.0.0.0')"),
    (5, "Init torch distributed begin."),
    (10, "Load weight begin. avail mem=78.84 GB"),
    (120, "Load weight end. type=Qwen3, dtype=torch.bfloat16, avail mem=17.66 GB, mem usage=61.18 GB."),
    (125, "KV Cache is allocated. #tokens: 30192, K size: 1.38 GB, V size: 1.38 GB"),
]


def stamped(lines: list[tuple[float, str]], t0: float = T0) -> bytes:
    import time as _time
    return "".join(f"[{_time.strftime('%Y-%m-%d %H:%M:%S', _time.localtime(t0 + t))}] {m}\n"
                   for t, m in lines).encode()


def test_a_first_attach_times_what_it_caught_up_on_by_the_stamps() -> None:
    """Attached 30 s after the last line of a launch that began 125 s before it (by its
    stamps), every line was timed when it was read: the page said `allocating · in phase
    0s`, the startup 0 s old (no `slow` alert, an ETA from scratch).  At the end of the
    catch-up the spans take their stamps, set on our clock by the file's last write."""
    from logwatch.counters import Counters
    from logwatch.machine import retime
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    from logwatch.view import build_view
    read_at = 5_000_000_000.0
    mtime = read_at - 30
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(stamped(STARTUP_LINES), read_at)
    retime(pipe.state, mtime)
    v = build_view(TargetView(name="n", engine="auto", source="x.log", kind="file", labels={},
                              now=read_at, counters=Counters()), pipe).to_json()
    assert v["phase"] == "allocating"
    assert v["in_phase_seconds"] == pytest.approx(35.0), v       # 125 - 120 + 30
    assert read_at - v["phase_entered_at"] == pytest.approx(35.0)
    spans = {s["phase"]: s for s in v["spans"]}
    assert spans["loading_shards"]["seconds"] == pytest.approx(110.0)
    st = pipe.state
    assert read_at - st.spans[0].at == pytest.approx(155.0)      # launched 125 + 30 s ago
    assert [read_at - sp.end_at for sp in st.spans if sp.end_at is not None] == \
        pytest.approx([145.0, 35.0])
    # never later than it was read, never moved by a file written after the read
    before = [sp.at for sp in st.spans]
    retime(st, read_at + 3600)
    assert [sp.at for sp in st.spans] == before


def test_lines_read_at_a_reconnect_are_timed_by_their_stamps() -> None:
    """An SSH connection down for two minutes: the lines written meanwhile are read at the
    reconnect.  The phase they began is placed at its stamp (on our clock by the lines read
    as they were written), not at the reconnect; a line read on time stays at its read."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    offset = 3 * 3600.0 + 0.4      # the server's stamps vs our clock (its zone), read 0.4 s late
    pipe = LogPipeline(load_pack("sglang"))
    for t, msg in STARTUP_LINES[:3]:                       # read as they were written
        pipe.feed(stamped([(t, msg)]), T0 + t + offset)
    entered = pipe.state.phase_entered
    assert entered is not None and entered.phase == "loading_shards"
    assert entered.at == T0 + 10 + offset                  # on time: its read time
    reconnect = T0 + 10 + 130 + offset                     # the outage ends 130 s later
    pipe.feed(stamped(STARTUP_LINES[3:]), reconnect)
    st = pipe.state
    assert st.phase == "allocating"
    assert reconnect - st.phase_entered.at == pytest.approx(20.0, abs=0.01)   # 140 - 120 s
    assert reconnect - st.history[1].end_at == pytest.approx(20.0, abs=0.01)


@pytest.mark.integration
def test_watch_attached_mid_startup_shows_how_long_the_phase_has_run(tmp_path: Any) -> None:
    """The live runner (watch's and the daemon's) on a file: at the end of its first
    attach's catch-up the view says how long the phase has really run (before: 0 s)."""
    import asyncio
    import os
    import time as _time

    from logwatch.app.watch import WatchOptions, watch_runner
    from logwatch.telemetry.gpu import GpuConfig
    from logwatch.telemetry.probe import ProbeConfig
    path = tmp_path / "server.log"
    now = _time.time()
    path.write_bytes(stamped(STARTUP_LINES, t0=now - 30 - 125))
    os.utime(path, (now - 30, now - 30))   # its last line written 30 s ago, as stamped

    async def attach() -> dict[str, Any]:
        opts = WatchOptions(target=str(path), rules="sglang", history=False,
                            gpu=GpuConfig(mode="off"), probe=ProbeConfig(mode="off"))
        runner = watch_runner(opts)
        runner.start()
        try:
            deadline = _time.monotonic() + 20
            while not (runner.attached and not runner.catching_up and runner.pipe is not None
                       and runner.pipe.state.phase == "allocating"):
                assert _time.monotonic() < deadline, "not attached in 20 s"
                runner.tick(_time.time())
                await asyncio.sleep(0.02)
            return runner.view(_time.time()).to_json()
        finally:
            await runner.stop()

    v = asyncio.run(attach())
    in_phase = v["in_phase_seconds"]
    assert 34.0 <= in_phase <= 45.0, v          # 5 s of the phase in the log + 30 s since
    assert v["durations"]["allocating"] >= 34.0, v


# -- the daemon's ledger has the serving figures of a finished log's last startup ----------------

@pytest.mark.integration
def test_the_daemons_ledger_has_the_tok_s_of_a_finished_logs_last_startup(
        tmp_path: Any, daemons: Any) -> None:  # noqa: F811
    """`history FILE` said 3718 tok/s, `history -c` (the daemon's ledger) blank: the daemon
    attached to a finished log saved the startup's record at its ready line, before the
    serving lines read right after it, and saved it again only a minute later (or at its
    stop).  The end of the catch-up saves it with what was read."""
    import json
    import os
    import subprocess
    import sys
    import time as _time

    from conftest import ROOT
    from support.daemon import free_port, target_cfg, wait_for, write_config
    from test_ledger import ARGS_1, T0, launch
    log = tmp_path / "server.log"
    log.write_text(launch(1, T0, ARGS_1, 3718.0, minutes=3), encoding="utf-8")
    old = _time.time() - 2 * 3600
    os.utime(log, (old, old))            # a finished log: its server stopped writing long ago
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", str(log), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    from_file = json.loads(res.stdout.splitlines()[-1])["serving"]["gen_throughput"]["p50"]
    assert abs(from_file - 3718.0) < 3718.0 * 0.03, res.stdout
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg("node1", log, gpu=False)])
    d = daemons(cfg, port).start()

    def served() -> dict[str, Any] | None:
        code, body = d.get("/api/history?target=node1")
        recs = json.loads(body)["startups"] if code == 200 else []
        return recs[-1] if recs and recs[-1].get("serving", {}).get("gen_throughput") else None
    rec = wait_for(served, 20, "the serving figures in the daemon's ledger (before: 60 s)")
    assert rec["serving"]["gen_throughput"]["p50"] == from_file, rec
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                          "--target", "node1"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert res.returncode == 0 and f"{from_file:.0f}" in res.stdout.splitlines()[-1], res.stdout
