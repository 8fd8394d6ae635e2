"""The live path against replay on whole-startup fixtures (tests/fixtures/built/): a log the
server writes as it goes, followed by the real daemon with a real webhook receiver, gives
the operator what `logwatch replay` says of the finished file: the ready alert once with the
same ready time, or the crash alert once with the same reason, phase (`during`), root-cause
line and first rank; /api/status's phase and durations at each phase change and at the end;
the ledger row (`logwatch history`).  These fixtures were checked with replay only; the
lines are written in chunks cut at replay's phase changes, so the daemon reads the startup
progress, not one blob.  Held when written (helper adv104): no mismatch, also line by line."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from logwatch.app.history import run_history, run_history_store
from logwatch.app.replay import replay_file, replay_stream
from logwatch.machine import PhaseChanged
from logwatch.rules.pack import load_pack
from logwatch.view import pipeline_view
from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    append, daemons, free_port, hook, receivers, target, write_config,
)

BUILT = Path(__file__).parent / "fixtures" / "built"
FIXTURES = ["sglang-0410-dp-attention-deepgemm.log", "sglang-046-tp4-load-oom-killed.log",
            "sglang-0523-tp-memory-unbalanced.log", "vllm-085-v0-tp2.log",
            "vllm-085-v0-kv-too-small.log", "vllm-011-fork-tp2.log",
            "vllm-011-fork-tp2-capture-oom.log"]


def phase_cuts(path: Path, engine: str) -> list[tuple[int, str]]:
    """(lines up to and including a phase change's line, the phase it entered), in order,
    as replay reads the file; the last cut is the whole file (its final phase)."""
    texts = path.read_text(encoding="utf-8").splitlines(keepends=True)
    changes: list[tuple[str, str]] = []
    with open(path, "rb") as f:
        replay_stream(f, load_pack(engine), on_step=lambda evs, _s: changes.extend(
            (e.line.rstrip(), e.new) for e in evs if isinstance(e, PhaseChanged)))
    cuts: list[tuple[int, str]] = []
    at = 0
    for line, new in changes:
        while at < len(texts) and texts[at].rstrip() != line:
            at += 1
        if at < len(texts):
            if cuts and cuts[-1][0] == at + 1:
                cuts.pop()              # one line changed it twice: the last phase counts
            cuts.append((at + 1, new))
    return cuts + [(len(texts), cuts[-1][1] if cuts else "waiting")]


def ledger_rows(out: list[str]) -> list[dict[str, Any]]:
    """`history --json` rows without what names the input (the file, the target)."""
    rows = [json.loads(s) for s in out]
    return [{k: v for k, v in r.items() if k not in ("file", "target")} for r in rows]


def expected(path: Path) -> dict[str, Any]:
    """Replay's verdict of the whole file, as the alert, /api/status and the ledger say it."""
    view = pipeline_view(path.name, replay_file(str(path)))
    crash = view.crash
    rows: list[str] = []
    run_history([str(path)], "auto", True, rows.append)
    return {"phase": view.phase, "durations": dict(view.durations),
            "ready_in": view.ready_in, "ledger": ledger_rows(rows),
            "crash": None if crash is None else {
                "reason": crash["reason"], "during": crash["during"],
                "line_number": crash["line_number"], "rank": crash.get("rank") or None}}


def follow(tmp_path: Path, src: Path, engine: str, d_make: Any, rx: Any) -> tuple[Any, Path]:
    """The daemon following an empty log that gets `src`'s lines, cut at each phase change;
    after each chunk /api/status is polled until it shows the phase replay entered there."""
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", log, rules=engine)],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["ready", "crashed"]}])
    d = d_make(cfg, port).start()
    d.wait_reading("t1")
    texts = src.read_text(encoding="utf-8").splitlines(keepends=True)
    done = 0
    for upto, phase in phase_cuts(src, engine):
        append(log, "".join(texts[done:upto]))
        done = upto
        d.wait_lines("t1", done)
        d.wait_target("t1", lambda t, p=phase: t["phase"] == p, f"{phase} after line {done}")
    return d, tmp_path / "state"


def test_a_crash_line_without_a_tag_takes_no_rank_from_a_victim_seconds_later() -> None:
    """sglang-046: the main process's SIGCHLD line (12:00:28, no rank tag) is the root cause;
    TP0's gloo failure 22 s later is a victim's.  A daemon following the log as it was written
    settles the crash in between (crash_settle, 2 s) and pages no rank; replay gave it TP0's,
    `(TP0 first)` (and the rank killed was TP2).  An untagged crash line still takes the rank
    of its own record's next lines (vllm-011-gpu-busy: DP0, the same second)."""
    def crash(name: str) -> dict[str, Any]:
        return pipeline_view(name, replay_file(str(BUILT / name))).crash or {}
    c = crash("sglang-046-tp4-load-oom-killed.log")
    assert (c["reason"], c["line_number"], c["rank"]) == ("host_oom_killed", 26, ""), c
    assert crash("vllm-011-gpu-busy.log")["rank"] == "DP0"


@pytest.mark.integration
@pytest.mark.parametrize("name", FIXTURES)
def test_the_daemon_following_a_built_startup_says_what_replay_says(
        tmp_path: Path, receivers, daemons, name: str) -> None:  # noqa: F811 (fixtures)
    src = BUILT / name
    engine = "vllm" if name.startswith("vllm") else "sglang"
    want = expected(src)
    rx = receivers()
    d, state = follow(tmp_path, src, engine, daemons, rx)
    kind = "ready" if want["crash"] is None else "crashed"
    page = rx.wait(hook(kind, "firing"), answered=True, alive=d.dead)[0].json["details"]
    t = d.wait_target("t1", lambda t: t["phase"] == want["phase"], "the final phase")
    assert (t["phase"], t["durations"]) == (want["phase"], want["durations"]), t
    if kind == "ready":
        assert page["took"] == want["ready_in"] == t["ready_in_seconds"], (page, want)
    else:
        got = {k: page.get(k) for k in ("reason", "during", "line_number", "rank")}
        assert got == want["crash"], got
        assert {k: t["crash"][k] for k in ("reason", "during", "line_number")} == \
            {k: want["crash"][k] for k in ("reason", "during", "line_number")}, t["crash"]
    assert d.stop() == 0
    assert [g.json["kind"] for g in rx.requests(hook())] == [kind], rx.brief()
    rows: list[str] = []
    run_history_store(state, "t1", True, rows.append)
    assert ledger_rows(rows) == want["ledger"]
