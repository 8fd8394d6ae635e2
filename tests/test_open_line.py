"""A line read before its end: the unfinished last line a quiet log shows (`tick` after
PARTIAL_LINE_QUIET, a first attach to a file long unwritten), and the last bytes of a file.

A line cut mid-write (a server blocked mid-print: its stdout pipe full, a C extension holding
the GIL; NFS; a log copied while written) and finished after the quiet is read whole: the
rule that needs the whole line fires, once; what the unfinished line said is not said again,
and its lines are counted once.  A bar frame cut before its end gives no figure of the cut.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT
from logwatch.lines import Framer
from logwatch.machine import Crashed, CrashSettled, PhaseChanged, Progress
from logwatch.pipeline import PARTIAL_LINE_QUIET, LogPipeline
from logwatch.rules.locate import choose_pack
from logwatch.rules.matcher import shared_matcher
from logwatch.rules.pack import load_pack

SGLANG = load_pack("sglang")
ARGS = b"[2026-12-04 10:00:00] server_args=ServerArgs(model_path='m')\n"
LOAD = b"[2026-12-04 10:00:01 TP0] Load weight begin. avail mem=70.1 GB\n"
OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
BAR = "Loading safetensors checkpoint shards: {p}% Completed | {c}/5 [00:0{c}<00:01, {r}it/s]"


def of(events: list[object], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def quiet_after(pipe: LogPipeline, t: float) -> list[object]:
    """A tick once the log has been quiet PARTIAL_LINE_QUIET (and a second: read once)."""
    events = pipe.tick(t + PARTIAL_LINE_QUIET + 1)
    assert pipe.tick(t + PARTIAL_LINE_QUIET + 2) == []
    return events


@pytest.mark.parametrize("cuts", [(14,), (14, 40), (1, 30, 52)])
def test_a_line_finished_after_a_quiet_is_read_whole(cuts: tuple[int, ...]) -> None:
    """`Load weight be`, 6 s, `gin. avail mem=70.1 GB`: before, two lines, neither the
    marker: the loading phase was missed (and `launching` took its time)."""
    pipe = LogPipeline(SGLANG)
    pipe.feed(ARGS, 0.0)
    t, pieces = 1.0, [LOAD[a:b] for a, b in zip((0, *cuts), (*cuts, len(LOAD)))]
    events: list[object] = []
    for piece in pieces[:-1]:
        events += pipe.feed(piece, t)
        events += quiet_after(pipe, t)
        t += PARTIAL_LINE_QUIET + 3
    assert pipe.state.phase == "launching" and pipe.counters.lines == 2
    events += pipe.feed(pieces[-1] + b"next\n", t) + pipe.tick(t + 1)
    assert [(e.old, e.new) for e in of(events, PhaseChanged)] == [("launching", "loading_shards")]
    assert pipe.counters.rule_matches["load_weight_begin"] == 1
    assert pipe.counters.lines == 3
    assert pipe.resume_at() == (len(ARGS) + len(LOAD) + len(b"next\n"), 4)


def test_what_the_unfinished_line_said_is_not_said_again_when_it_ends() -> None:
    """A crash line without its newline, read after each quiet: cut inside its marker, no
    crash yet; once the marker is whole, the crash (a server killed mid-line says no
    more); if its writer was only slow, the rest of it is no second crash, no second
    match, no second line.  Before, the pieces were lines of their own: the crash line
    read `ryError: CUDA out of memory. ...`."""
    pipe = LogPipeline(SGLANG)
    pipe.feed(ARGS + LOAD, 0.0)
    assert not of(pipe.feed(OOM[:15], 1.0) + quiet_after(pipe, 1.0), Crashed)
    crashed = of(pipe.feed(OOM[15:60], 10.0) + quiet_after(pipe, 10.0), Crashed)
    assert [c.crash.line for c in crashed] == [OOM[:60].decode()]
    assert pipe.counters.lines == 3
    events = pipe.feed(OOM[60:] + b"\n", 20.0) + pipe.tick(21.0)
    assert not of(events, Crashed) and pipe.counters.rule_matches["cuda_oom"] == 1
    assert pipe.counters.lines == 3
    pipe.finish(30.0)
    assert pipe.counters.lines == 3


def test_a_traceback_that_pauses_mid_line_keeps_its_excerpt_whole() -> None:
    """The crash's excerpt shows the line cut as it stands while the log is quiet, and
    the whole line and what follows once the writer goes on.  Before, the excerpt ended at
    `  File "y.py", li`: the cuda_oom crash's excerpt without its own line."""
    pipe = LogPipeline(SGLANG)
    pipe.feed(ARGS + LOAD, 0.0)
    pipe.feed(b'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
              b'  File "y.py", li', 1.0)
    quiet_after(pipe, 1.0)
    assert pipe.state.crash is not None and pipe.state.crash.excerpt[-1] == '  File "y.py", li'
    pipe.feed(b"ne 2, in f\n" + OOM + b"\n", 20.0)
    pipe.tick(40.0)
    crash = pipe.state.crash
    assert crash is not None and crash.reason == "cuda_oom"
    assert crash.excerpt[-3:] == ['  File "x.py", line 1, in <module>',
                                  '  File "y.py", line 2, in f', OOM.decode()]


def test_a_bar_frame_shown_after_a_quiet_is_taken_once_and_its_cut_rate_not_at_all() -> None:
    """The tick reads a stalled bar's last `\\r` frame (the progress shows while the bar
    waits); the next frame continues the bar, the shown one is not taken again.  A frame cut
    inside its rate field gives its count, not a rate measured from it; the whole frame,
    once it ends, gives tqdm's rate (one match of the rule all the same)."""
    pipe = LogPipeline(SGLANG)
    pipe.feed(ARGS + LOAD, 0.0)
    frame2 = BAR.format(p=40, c=2, r="2.00").encode()
    frame3 = BAR.format(p=60, c=3, r="1.50").encode()
    events = pipe.feed(b"\r" + frame2, 1.0) + quiet_after(pipe, 1.0)
    assert [(e.current, e.rate) for e in of(events, Progress)] == [(2, 2.0)]
    cut = len(frame3) - len(b"50it/s]")
    events = pipe.feed(b"\r" + frame3[:cut], 10.0) + quiet_after(pipe, 10.0)
    assert [(e.current, e.rate) for e in of(events, Progress)] == [(3, 2.0)]
    events = pipe.feed(frame3[cut:] + b"\r", 20.0)
    assert [(e.current, round(e.rate, 3)) for e in of(events, Progress)] == [(3, 1.85)]
    assert pipe.counters.rule_matches["shard_bar"] == 2, pipe.counters.rule_matches
    assert pipe.counters.lines == 3


NCCL_TB = (b"Traceback (most recent call last):\n"
           b'  File "pynccl_wrapper.py", line 329, in NCCL_CHECK\n'
           b'    raise RuntimeError(f"NCCL error: {error_str}")\n')
NCCL = b"RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
AFTER = b"[2026-12-04 10:00:09] Received sigquit from a child process. It usually means the child failed.\n"


def test_a_crash_line_shown_cut_is_whole_in_the_crash_once_its_end_comes() -> None:
    """`RuntimeError: NCCL error: unh` read after the quiet; its end and the next line come
    before the crash settles: the settled crash (the page) quotes the whole line, and its
    excerpt goes on past it.  Before, both ended at `unh`."""
    pipe = LogPipeline(SGLANG)
    crashed = of(pipe.feed(ARGS + LOAD + NCCL_TB + NCCL[:29], 1.0) + quiet_after(pipe, 1.0),
                 Crashed)
    assert len(crashed) == 1 and crashed[0].crash.line == "RuntimeError: NCCL error: unh"
    pipe.feed(NCCL[29:] + b"\n" + AFTER, 8.0)
    settled = of(pipe.tick(30.0), CrashSettled)
    assert len(settled) == 1 and settled[0].crash.reason == "nccl_error"
    assert settled[0].crash.line == NCCL.decode()
    assert settled[0].crash.excerpt[-2:] == [NCCL.decode(), AFTER.decode().strip()]
    assert pipe.counters.rule_matches["nccl_error"] == 1 and pipe.counters.lines == 7


def test_a_cause_the_cut_line_gave_is_the_whole_lines() -> None:
    """TensorRT-LLM's `[E] Error executing load_single_module with args (..., Lin` cut: read
    as it stands, a weight loading error; whole, the line says CUDA out of memory, and so
    does the crash.  Before, the cut's cause stayed (`weight_loading_error`)."""
    line = (b"[07/23/2025-06:37:06] [TRT-LLM] [RANK 1] [E] Error executing load_single_module "
            b"with args ('model.layers.29.mlp.gate_up_proj', Linear()): CUDA out of memory. "
            b"Tried to allocate 126.00 MiB.\n")
    pipe = LogPipeline(load_pack("trtllm"))
    pipe.feed(line[:110], 1.0)
    quiet_after(pipe, 1.0)
    assert pipe.state.crash is not None and pipe.state.crash.reason == "weight_loading_error"
    pipe.feed(line[110:], 8.0)
    settled = of(pipe.tick(40.0), CrashSettled)
    assert [(c.crash.reason, c.crash.line) for c in settled] == [("cuda_oom", line.decode().strip())]


def test_an_attach_reads_the_unfinished_line_and_then_its_end_whole() -> None:
    """A first attach to a file quiet for long reads its unfinished last line with the rest
    (CatchUp.end: `read_open_line`); the writer goes on later: the whole line is read."""
    pipe = LogPipeline(SGLANG)
    pipe.feed(ARGS + LOAD[:40], 0.0)
    pipe.read_open_line(0.0)
    pipe.feed(LOAD[40:], 1.0)
    assert pipe.state.phase == "loading_shards"
    assert pipe.counters.lines == 2


def last_bar(data: bytes) -> tuple[object, str, int, int] | None:
    """The pack, the bar's counter, and where the file's last bar frame starts and ends."""
    pack = choose_pack("auto", data[:65536])
    matcher, framer = shared_matcher(pack, 64 * 1024), Framer()
    found = None
    for block in (framer.feed(data, 0.0), framer.flush(0.0)):
        for hit in matcher.scan(block) if block is not None else ():
            if hit.rule.progress and "%" in hit.text:
                found = hit
    if found is None:
        return None
    ends = [e for e in (data.find(b"\n", found.offset), data.find(b"\r", found.offset)) if e >= 0]
    return pack, found.rule.progress, found.offset, min(ends, default=len(data))


def counter_after(pack: object, data: bytes, name: str) -> tuple[int, int, float | None] | None:
    pipe = LogPipeline(pack)  # type: ignore[arg-type]
    pipe.feed(data, 1000.0)
    pipe.read_open_line(1000.5)
    p = pipe.state.progress.get(name)
    return None if p is None else (p.current, p.total, p.rate)


def test_a_bar_frame_cut_at_any_byte_gives_no_figure_of_the_cut() -> None:
    """Every log of tests/fixtures with a bar, cut at every byte of its last frame and read
    as a quiet file's last line: the bar reads as before the frame or as the whole frame,
    count and rate.  Before, 119 of 2,810 cuts read otherwise (`667/1` of `667/1417`; a rate
    of 0.669/s measured against the frame before, where tqdm said 10.00s/it)."""
    bad, cuts = [], 0
    for path in sorted((ROOT / "tests" / "fixtures").glob("*.log")):
        data = path.read_bytes()
        found = last_bar(data)
        if found is None:
            continue
        pack, name, start, end = found
        before, whole = counter_after(pack, data[:start], name), counter_after(pack, data[:end], name)
        for cut in range(start + 1, end):
            cuts += 1
            got = counter_after(pack, data[:cut], name)
            if not _reads_as(got, before, whole):
                bad.append((path.name, data[start:cut][-30:], got, before, whole))
    assert cuts > 2000 and not bad, bad[:5]



def _reads_as(got: tuple | None, before: tuple | None, whole: tuple | None) -> bool:
    """The count of `before` or `whole`, and the rate of one of them (none: before had none)."""
    if got is None:
        return before is None
    sides = [x for x in (before, whole) if x is not None]
    return any(got[:2] == x[:2] for x in sides) and (
        any(got[2] == x[2] for x in sides) or (got[2] is None and (before or (0, 0, None))[2] is None))


def restarted(pipe: LogPipeline, log: bytes) -> tuple[LogPipeline, bytes]:
    """A daemon restarted from a checkpoint of `pipe` (app/checkpoint.py: the position, the
    machine state and the shown line as JSON): the new pipeline, and the bytes of `log` it
    reads again from the position."""
    from logwatch.machine import state_from_json, state_to_json
    from logwatch.pipeline import ShownLine
    offset, line_number = pipe.resume_at()
    again = LogPipeline(SGLANG)
    again.state = state_from_json(state_to_json(pipe.state))
    again.counters = pipe.counters
    saved = pipe.shown.saved(offset)
    if saved is not None:     # (what the checkpoint keeps of the line shown at `offset`)
        again.shown = ShownLine.restored(json.loads(json.dumps(saved)))
    again.start_at(offset, line_number)
    return again, log[offset:]


@pytest.mark.parametrize("traceback", [b"", b"Traceback (most recent call last):\n"])
def test_a_crash_line_shown_cut_before_a_restart_is_read_whole_after_it(traceback: bytes) -> None:
    """The crash line shown cut (`RuntimeError: NCCL error: unh`; the crash begun there, or
    at a traceback before it), the daemon restarted before the crash settles, then the rest
    of the line and the next: one crash, its line and its excerpt whole, each line counted
    once.  Before, the excerpt ended at the cut and the rest was a line of its own."""
    log = ARGS + LOAD + traceback + NCCL[:29]
    pipe = LogPipeline(SGLANG)
    pipe.feed(log, 0.0)
    quiet_after(pipe, 0.0)
    assert pipe.state.crash is not None and pipe.state.crash.line == NCCL[:29].decode()
    matches = dict(pipe.counters.rule_matches)
    pipe, again = restarted(pipe, log + NCCL[29:] + b"\n" + AFTER)
    events = pipe.feed(again, 7.0) + pipe.tick(8.0) + pipe.tick(20.0)
    assert not of(events, Crashed)
    assert {k: pipe.counters.rule_matches[k] for k in matches} == matches   # (none again)
    crash = pipe.state.crash
    assert crash is not None and crash.line == NCCL.decode() and of(events, CrashSettled)
    assert crash.excerpt[-2:] == [NCCL.decode(), AFTER.decode().strip()], crash.excerpt
    assert pipe.counters.lines == 4 + bool(traceback)


def test_a_crash_line_shown_cut_and_never_ended_keeps_its_cut_line_after_a_restart() -> None:
    """The same crash line shown cut, the daemon restarted, and the server never writes the
    rest (it died mid-line): the crash settles with the cut line in its excerpt, the line
    counted and matched once."""
    log = ARGS + LOAD + NCCL[:29]
    pipe = LogPipeline(SGLANG)
    pipe.feed(log, 0.0)
    quiet_after(pipe, 0.0)
    lines, matches = pipe.counters.lines, dict(pipe.counters.rule_matches)
    pipe, again = restarted(pipe, log)
    events = pipe.feed(again, 7.0) + pipe.tick(7.5) + pipe.tick(20.0) + pipe.tick(21.0)
    crash = pipe.state.crash
    assert crash is not None and of(events, CrashSettled), events
    assert crash.excerpt[-1] == NCCL[:29].decode(), crash.excerpt
    assert pipe.counters.lines == lines and dict(pipe.counters.rule_matches) == matches


@pytest.mark.parametrize("doc", [
    None, [], "x", {}, {"held": [0, 1], "hits": "abc"}, {"held": [1e400, 1], "hits": [],
     "lines": 0, "newlines": 0, "open_counted": False, "crash_lines": []},
    {"held": [0, 1], "hits": [[0, "r", 5]], "lines": 0, "newlines": 0, "open_counted": False,
     "crash_lines": []},
    {"held": [0, 1], "hits": [[0, "r", [True]]] * 5000, "lines": 0, "newlines": 0,
     "open_counted": False, "crash_lines": []},
])
def test_a_damaged_shown_line_in_a_checkpoint_is_nothing_shown(doc: object) -> None:
    """A checkpoint's `shown` of the wrong shape, a number past int, or more hits than a
    line holds: read as nothing shown (the line read again as new), never an error."""
    from logwatch.pipeline import ShownLine
    assert ShownLine.restored(doc) == ShownLine()
