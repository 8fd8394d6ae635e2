"""The real H200 start (issue 31), replayed: tests/fixtures/gpu/h200/startup-trace.csv (every
field logwatch asks for, one row a second) and startup-trace.log, on the same clock.

The start: 20 shards load (memory 0 -> 61 GiB, the log prints each), `Capture cuda graph
begin` and 45 s of silence with the GPU at 691 W of 700 W (slow, not hung), the capture end
and uvicorn lines, 35 s of silence with the GPU idle at 128 W (hung before the GPU), ready,
25 s of serving, a real torch CUDA OOM.

The pure tests read the trace at the log's own times; the live test runs the daemon and
`watch` on the log written at its offsets beside tests/tools/fake-nvidia-smi printing the
trace's rows on the same clock, time compressed 4x (tests/support/gpureplay.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from support.daemon import Daemon, free_port, target_cfg, wait_for, write_config
from support.receivers import hook, receivers  # noqa: F401 (receivers: the fixture)
from support.gpureplay import FAKE, TRACE_CSV, LogWriter, csv_times, log_pieces, make_clock, read_log
from logwatch.machine import Stalled
from logwatch.silence import PhaseWatts, Resumed, phase_watts_text, silence_verdict
from logwatch.telemetry.gpu import GpuSnapshot, learn_idle, parse_csv
from logwatch.view import TargetView

SNAPS = parse_csv(TRACE_CSV.read_text(encoding="utf-8"))   # `at`: the printed time, local


def at(hms: str) -> float:
    return time.mktime(time.strptime(f"2026-12-04 {hms}", "%Y-%m-%d %H:%M:%S"))


def verdict_at(since: str, now: float) -> Any:
    idle: dict[int, float] = {}
    for s in SNAPS:
        if s.at <= now:
            learn_idle(idle, s)
    return silence_verdict(SNAPS, at(since), now, idle)


# the log's silences (a line at `since`, the next one at `until`) and what the GPUs did
BUSY = ("15:56:43", "15:57:28")     # Capture cuda graph begin ... end: 691 W, util 99 %
IDLE = ("15:57:28", "15:58:03")     # Uvicorn running ... GET /model_info: 128 W, util 0 %


def test_the_trace_and_its_log_share_a_clock() -> None:
    rows = csv_times(TRACE_CSV.read_text(encoding="utf-8"))
    assert len(rows) == len(SNAPS) == 135
    assert [round(s.at, 3) for s in SNAPS] == [round(r, 3) for r in rows]
    pieces = log_pieces(read_log())
    assert "".join(p for _, p in pieces) == read_log()
    times = [t for t, _ in pieces]
    assert times == sorted(times) and rows[0] < times[0] < times[-1] < rows[-1]
    # the 21 progress segments between Load weight begin and end, a shard ~0.8 s apart
    bar = [t for t, p in pieces if p.startswith("Loading safetensors")]
    assert len(bar) == 21 and at("15:56:26") < bar[0] < bar[-1] < at("15:56:43")


@pytest.mark.parametrize("since, until", [BUSY, IDLE])
def test_no_silence_of_the_trace_reads_as_loading(since: str, until: str) -> None:
    """Memory did not move in either silence: at no second of them is the verdict
    "loading" (the old fixed 2-minute window said "loading" in the busy one)."""
    kinds = set()
    for t in range(int(at(since)) + 2, int(at(until))):
        v = verdict_at(since, t)
        assert v is not None
        assert "loading" not in v.text and "still moving" not in v.text, (t - at(since), v.text)
        kinds.add(v.kind)
    assert kinds == ({"busy"} if (since, until) == BUSY else {"idle", "partial"}), kinds


def test_the_busy_silence_is_slow_not_hung() -> None:
    v = verdict_at(BUSY[0], at(BUSY[0]) + 30)
    assert v.kind == "busy" and v.working
    assert v.text == "GPU busy (692 W of 700 W, util 99%, memory flat): slow, not hung", v.text
    assert v.gpus[0].mem_moved == 0 and v.gpus[0].samples == 30


def test_the_idle_silence_is_hung_before_the_gpu() -> None:
    v = verdict_at(IDLE[0], at(IDLE[0]) + 30)
    assert v.kind == "idle" and not v.working
    assert v.text.startswith("GPU idle (128 W of 700 W, idle 81 W; util 0%, memory flat): "
                             "hung before the GPU"), v.text
    # the board's idle power is learned from its own idle samples (81 W before the launch),
    # not taken as a fraction of the 700 W limit
    assert v.gpus[0].idle_learned and 80 < v.gpus[0].idle_w < 82


def test_memory_rising_is_loading() -> None:
    """Over the shards (no line for 10 s, say): memory rises 3 GiB a shard: loading."""
    v = verdict_at("15:56:30", at("15:56:40"))
    assert v.kind == "loading" and v.working
    assert re.match(r"GPU memory still moving \(\+1\d\.\d GiB in the last 5\.0s\): loading, not hung",
                    v.text), v.text
    # and the verdict reads the silence, not a fixed window: right after the last shard
    # (memory flat since), a silence of 20 s is not "loading"
    late = verdict_at("15:56:43", at("15:57:03"))
    assert late.kind == "busy"


def test_a_stuck_rank_is_named() -> None:
    """7 GPUs busy and 1 idle (the trace's busy and idle rows, as an 8-GPU host)."""
    busy = next(s for s in SNAPS if s.at >= at("15:57:00"))
    idle = next(s for s in SNAPS if s.at >= at("15:57:45"))
    t0 = at("15:57:00")
    snaps = [GpuSnapshot(t0 + i, tuple(dataclasses.replace(idle.gpus[0] if k == 5 else busy.gpus[0],
                                                           index=k) for k in range(8)))
             for i in range(20)]
    v = silence_verdict(snaps, t0, t0 + 20, {k: 81.0 for k in range(8)})
    assert v.kind == "stuck_rank" and v.named == (5,)
    assert v.text.startswith("GPU 5 idle (128 W"), v.text
    assert "while 7 GPUs are busy" in v.text and v.text.endswith("a stuck rank (GPU 5)")
    # one GPU working alone while 7 wait: named too, but that is not a hang
    snaps = [GpuSnapshot(t0 + i, tuple(dataclasses.replace(busy.gpus[0] if k == 0 else idle.gpus[0],
                                                           index=k) for k in range(8)))
             for i in range(20)]
    alone = silence_verdict(snaps, t0, t0 + 20, {k: 81.0 for k in range(8)})
    assert alone.kind == "mixed" and alone.named == (0,) and alone.working
    assert alone.text.startswith("GPU 0 busy alone (6"), alone.text


def test_watts_per_phase_of_the_trace() -> None:
    w = PhaseWatts("s1")
    spans = [("loading_shards", "15:56:26", "15:56:43"), ("cuda_graph", "15:56:43", "15:58:03"),
             ("serving", "15:58:03", "15:58:28")]
    for phase, a, b in spans:
        for s in SNAPS:
            if at(a) <= s.at < at(b):
                w.add(phase, s)
    got = w.summary()
    assert list(got) == ["loading_shards", "cuda_graph", "serving"]
    assert 125 < got["loading_shards"]["p50_w"] < 135 and got["loading_shards"]["memory_gib"] > 50
    assert got["cuda_graph"]["max_w"] > 690 and got["serving"]["p50_w"] > 680
    text = phase_watts_text(got)
    assert re.search(r"^loading_shards p50 12\d W / max 1\d\d W, memory \+\d\d\.\d GiB · "
                     r"cuda_graph p50 \d+ W / max 69\d W · serving p50 69\d W", text), text


def test_a_stall_ends_when_lines_come_and_a_new_silence_is_a_new_stall() -> None:
    """The policy: one alert per silence, keyed on where the log stopped; `Resumed`
    resolves it; the next silence fires again under its own key."""
    from logwatch.sinks.alerts.policy import AlertPolicy, Resolve
    p = AlertPolicy()

    def view(line: int, silence: Any) -> TargetView:
        return TargetView(name="n", engine="sglang", source="x", kind="file", labels={},
                          now=time.time(), phase="cuda_graph", startup_id="s1", line_number=line,
                          gpu={"up": True, "snapshot": {}, "silence": silence.to_json()})
    busy = verdict_at(BUSY[0], at(BUSY[0]) + 30)
    idle = verdict_at(IDLE[0], at(IDLE[0]) + 30)
    (first,) = p.observe(view(9, busy), [Stalled(1, "cuda_graph", 30.0, "s1", 30.0)])
    (end,) = p.observe(view(15, busy), [Resumed(1, "cuda_graph", 45.0, "s1")])
    (second,) = p.observe(view(15, idle), [Stalled(1, "cuda_graph", 30.0, "s1", 30.0)])
    assert "slow, not hung" in first.summary and "hung before the GPU" in second.summary
    assert first.key != second.key and first.key.endswith("|stalled|cuda_graph@L9")
    assert isinstance(end, Resolve) and end.kinds == ("stalled",) and end.only == "s1"
    assert "lines again after 45s" in end.why


# -- live: the daemon and watch on the replayed start ----------------------------------------

STEP = 0.25          # one trace row (a second) per 0.25 s: 4x
STALL = 6.0          # seconds: 24 s of the trace's time (the silences are 45 s and 35 s)


def _no_loading_in_silences(lines: list[str]) -> None:
    for ln in lines:
        if "stalled" in ln or "silent" in ln:
            assert "loading" not in ln and "still moving" not in ln, ln


@pytest.mark.integration
def test_the_h200_start_replayed_live(tmp_path: Path, receivers: Any) -> None:  # noqa: F811
    rx = receivers()
    log = tmp_path / "server.log"
    log.touch()
    clock = make_clock(STEP, lead=12.0)
    env = {**os.environ, **clock.env(), "LOGWATCH_STATE_DIR": str(tmp_path / "watch-state")}
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg("h200", log, stall_after=f"{STALL}s", probe=False,
                                   gpu={"command": str(FAKE), "interval": "250ms"})],
                       alerts=[{"type": "webhook", "url": rx.url("/hook"),
                                "on": ["crashed", "stalled", "ready"]}])
    d = Daemon(cfg, port, tmp_path, env=clock.env()).start()
    out = open(tmp_path / "watch.out", "w+", encoding="utf-8")
    watch = subprocess.Popen(
        [sys.executable, "-m", "logwatch", "watch", str(log), "--stall-after", f"{STALL}s",
         "--serve", "--gpu", str(FAKE), "--probe", "off", "--no-history", "--timeout", "120s"],
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    writer = LogWriter(log, clock)
    try:
        # both have their GPU stream before the launch line (the preflight reads it live)
        wait_for(lambda: d.target("h200")["gpu"]["snapshot"], 15, "the daemon's GPU samples",
                 alive=d.dead)
        wait_for(lambda: "source up" in (tmp_path / "watch.out").read_text(), 15,
                 "watch reading the log")
        launch = clock.wall(log_pieces(read_log())[0][0])
        assert time.time() < launch - 0.5, "the daemon started too slowly for the replay's clock"
        writer.start()
        code = watch.wait(timeout=clock.end - time.time() + 60)
        hooks = rx.wait(hook("crashed", "firing"), timeout=30, alive=d.dead)
        assert hooks
        status_crash = d.target("h200")["crash"]
    finally:
        writer.stop()
        if watch.poll() is None:
            watch.kill()
        d.stop()
    out.seek(0)
    text = out.read()
    lines = text.splitlines()
    assert code == 1, text

    # the daemon's alerts, in the order they were sent
    got = [(g.json["kind"], g.json["status"], g.json["summary"], g.json["dedupe_key"])
           for g in rx.requests(hook())]
    seq = [(k, s) for k, s, _, _ in got]
    assert seq == [("stalled", "firing"), ("stalled", "resolved"), ("stalled", "firing"),
                   ("stalled", "resolved"), ("ready", "firing"), ("crashed", "firing")], got
    busy, busy_end, idle, idle_end, _, crashed = [x[2] for x in got]
    assert "GPU busy (69" in busy and "slow, not hung" in busy, busy
    assert "lines again after" in busy_end and got[0][3] == got[1][3]
    assert "GPU idle (12" in idle and "hung before the GPU" in idle, idle
    assert got[2][3] != got[0][3], "a new silence is a new stall, with its own key"
    assert crashed.startswith("crashed: cuda_oom during ready"), crashed
    # /api/status (the page, `status`) says the alert's sentence, less the GPUs' preflight
    assert status_crash["text"] == crashed.split(";")[0] + ")", (status_crash["text"], crashed)
    assert "no GPU held memory before launch" in crashed, crashed
    for _, _, summary, _ in got:
        assert "loading" not in summary, summary

    # watch's plain output: the same story where the operator looks
    def first(pattern: str, after: int = 0) -> int:
        for i, ln in enumerate(lines[after:], after):
            if re.search(pattern, ln):
                return i
        raise AssertionError(f"no line {pattern!r} after line {after}:\n{text}")
    s1 = first(r"stalled: no new line for .* in cuda_graph; GPU busy \(69\d W of 700 W.*slow, not hung")
    r1 = first(r"resumed: lines again after .* of silence in cuda_graph", s1)
    s2 = first(r"stalled: no new line for .* in cuda_graph; GPU idle \(12\d W of 700 W, idle 8\d W"
               r".*hung before the GPU", r1)
    ready = first(r"phase ready", s2)
    crash = first(r"CRASHED: cuda_oom during ready", ready)
    # one crash sentence: watch says the time to the crash the alert says (not the startup's)
    after = re.search(r"after (\S+)$", lines[crash])
    assert after and f"during ready after {after.group(1)}" in crashed, (lines[crash], crashed)
    assert any(ln.strip().startswith("gpu: no GPU held memory before launch")
               for ln in lines[crash:crash + 5]), lines[crash:crash + 5]
    assert len([ln for ln in lines if re.search(r" gpu: GPU x1 \d+/700 W", ln)]) >= 4, text
    assert any(re.search(r"gpu: silent .* in cuda_graph: GPU busy", ln) for ln in lines[:r1]), text
    assert re.search(r"gpu power: .*cuda_graph p50 \d+ W / max 69\d W.* · serving p50 69\d W", text), text
    _no_loading_in_silences(lines)

    # the daemon's ledger keeps the watts per phase; `history` shows them
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                          "--target", "h200", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    (rec,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert rec["outcome"] == "crashed" and rec["reason"] == "cuda_oom"
    assert rec["watts"]["cuda_graph"]["max_w"] > 690 and rec["watts"]["serving"]["p50_w"] > 650
    assert rec["serving"]["warmup_only"] is True and rec["gpu"]["short"] is True
    table = subprocess.run([sys.executable, "-m", "logwatch", "history", "-c", str(cfg),
                            "--target", "h200"], capture_output=True, text=True, cwd=ROOT,
                           timeout=60).stdout
    assert re.search(r"cuda_graph 1m\d+s at \d+ W", table), table
    assert re.search(r"\d+ \(short\)", table), table
    cmp = subprocess.run([sys.executable, "-m", "logwatch", "compare", "-c", str(cfg),
                          "--target", "h200", "1", "1"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert re.search(r"cuda_graph +1m\d+s at 69\d W +1m\d+s at 69\d W", cmp.stdout), cmp


def test_watch_says_the_verdict_where_the_operator_looks() -> None:
    """The plain display (pure: views and a clock): the stall line carries the verdict, the
    GPUs' verdict comes every stall_after / 2 of a silence, `resumed:` when lines come, the
    power per phase at a phase change and in the summary; the panel has the same rows."""
    import io

    from logwatch.machine import PhaseChanged
    from logwatch.sinks.display import PlainDisplay, RichDisplay
    busy = verdict_at(BUSY[0], at(BUSY[0]) + 30)
    phases = {"loading_shards": {"p50_w": 129.0, "max_w": 131.0, "samples": 17, "memory_gib": 60.5}}
    t0 = 1_000.0

    def view(now: float, silence: Any = busy) -> TargetView:
        return TargetView(name="n", engine="sglang", source="x", kind="file", labels={}, now=now,
                          phase="cuda_graph", startup_id="s1", last_line_at=t0, stall_after=30.0,
                          gpu={"up": True, "snapshot": {"summary": "GPU x1 691/700 W (99%)"},
                               "silence": silence.to_json() if silence else None,
                               "phases": phases})
    out = io.StringIO()
    d = PlainDisplay("n", out)
    d.update(view(t0), [PhaseChanged(1, "loading_shards", "cuda_graph", t0, "x", "s1")], t0)
    for t in range(1, 61):
        events: list[Any] = [Stalled(1, "cuda_graph", 30.0, "s1", 30.0)] if t == 30 else []
        d.update(view(t0 + t), events, t0 + t)
    d.update(view(t0 + 61), [Resumed(1, "cuda_graph", 61.0, "s1")], t0 + 61)
    lines = [ln.split(" ", 1)[1] for ln in out.getvalue().splitlines()]
    assert lines[2] == "gpu: GPU x1 691/700 W (99%); loading_shards p50 129 W / max 131 W, " \
                       "memory +60.5 GiB", lines
    said = [ln for ln in lines if ln.startswith(("gpu: silent", "stalled", "resumed"))]
    assert [ln.split(":")[0] for ln in said] == ["gpu", "stalled", "gpu", "gpu", "resumed"], said
    assert [ln.split()[2] for ln in said if ln.startswith("gpu")] == ["15s", "45s", "1m00s"], said
    assert said[0] == f"gpu: silent 15s in cuda_graph: {busy.text}"
    assert said[1] == f"stalled: no new line for 30s in cuda_graph; {busy.text}"
    assert said[-1] == "resumed: lines again after 1m01s of silence in cuda_graph (the stall is over)"
    # no telemetry: the stall line as before, and no GPU lines
    out2 = io.StringIO()
    quiet = PlainDisplay("n", out2)
    plain = dataclasses.replace(view(t0 + 30), gpu=None)
    quiet.update(plain, [Stalled(1, "cuda_graph", 30.0, "s1", 30.0)], t0 + 30)
    assert out2.getvalue().splitlines()[-1].split(" ", 1)[1] == \
        "stalled: no new line for 30s in cuda_graph"
    # the panel
    from rich.console import Console
    panel = io.StringIO()
    rich = RichDisplay("n", panel)
    Console(file=panel, width=200).print(rich._render(view(t0 + 20), t0 + 20))
    text = panel.getvalue()
    assert "silence" in text and "slow, not hung" in text and "gpu power" in text, text


def test_a_gpu_that_cannot_be_read_is_said_once_not_at_every_phase() -> None:
    """`watch` on a node without nvidia-smi: before, "gpu: no nvidia-smi on host" after each
    of a startup's 7 phase lines; now once, and again only when it changes."""
    import io

    from logwatch.machine import PhaseChanged
    from logwatch.sinks.display import PlainDisplay
    out = io.StringIO()
    d = PlainDisplay("n", out)
    phases = ["waiting", "launching", "downloading", "loading_shards", "cuda_graph", "ready"]
    for i, (old, new) in enumerate(zip(phases, phases[1:])):
        status = "no nvidia-smi on host" if i < 3 else "NVIDIA driver not loaded"
        v = TargetView(name="n", engine="sglang", source="x", kind="file", labels={},
                       now=100.0 + i, phase=new, gpu={"up": False, "status": status})
        d.update(v, [PhaseChanged(1, old, new, 100.0 + i, "x", "s1")], 100.0 + i)
    said = [ln.split(" ", 1)[1] for ln in out.getvalue().splitlines() if " gpu: " in ln]
    assert said == ["gpu: no nvidia-smi on host", "gpu: NVIDIA driver not loaded"], said


def test_history_and_compare_show_the_watts_of_each_phase() -> None:
    """"autotune at 690 W": the live ledger's watts per phase, in `history` and `compare`;
    a serving window under a minute (a crash after 25 s of serving) is shown, marked short."""
    from logwatch.app.history import compare_text, history_table
    from logwatch.ledger import StartupRecord

    def rec(i: int, autotune: float, watts: float) -> StartupRecord:
        return StartupRecord(
            startup=f"s{i}", index=i, started_at=None, engine="sglang", model=None, args={},
            args_partial=False, outcome="crashed" if i == 2 else "ready",
            reason="cuda_oom" if i == 2 else None,
            durations={"loading_shards": 17.0, "autotune": autotune}, startup_seconds=60.0,
            slowest_phase="autotune",
            serving={"gen_throughput": {"p50": 3500.0, "max": 3600.0}, "samples": 20,
                     "warmup_samples": 20, "warmup_only": i == 2},
            watts={"loading_shards": {"p50_w": 129.0, "max_w": 131.0, "samples": 17},
                   "autotune": {"p50_w": watts, "max_w": watts + 4, "samples": 40},
                   "serving": {"p50_w": 691.0, "max_w": 695.0, "samples": 25}})
    a, b = rec(1, 41.0, 450.0), rec(2, 44.0, 690.0)
    table = history_table([a, b])
    assert "autotune 44s at 690 W" in table and "3500 (short)" in table, table
    assert "691 (short)" in table, table
    text = compare_text(a, b)
    assert re.search(r"autotune +41s at 450 W +44s at 690 W +\+3\.0s", text), text
    assert re.search(r"W serving p50 +691 W +691 W", text), text
