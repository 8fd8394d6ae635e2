"""A line read before its end: the unfinished last line a quiet log shows (`tick` after
PARTIAL_LINE_QUIET, a first attach to a file long unwritten), and the last bytes of a file.

A line cut mid-write (a server blocked mid-print: its stdout pipe full, a C extension holding
the GIL; NFS; a log copied while written) and finished after the quiet is read whole: the
rule that needs the whole line fires, once; what the unfinished line said is not said again,
and its lines are counted once.
"""

from __future__ import annotations

import pytest

from logwatch.machine import Crashed, PhaseChanged
from logwatch.pipeline import PARTIAL_LINE_QUIET, LogPipeline
from logwatch.rules.pack import load_pack

SGLANG = load_pack("sglang")
ARGS = b"[2026-12-04 10:00:00] server_args=ServerArgs(model_path='m')\n"
LOAD = b"[2026-12-04 10:00:01 TP0] Load weight begin. avail mem=70.1 GB\n"
OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


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


def test_an_attach_reads_the_unfinished_line_and_then_its_end_whole() -> None:
    """A first attach to a file quiet for long reads its unfinished last line with the rest
    (CatchUp.end: `read_open_line`); the writer goes on later: the whole line is read."""
    pipe = LogPipeline(SGLANG)
    pipe.feed(ARGS + LOAD[:40], 0.0)
    pipe.read_open_line(0.0)
    pipe.feed(LOAD[40:], 1.0)
    assert pipe.state.phase == "loading_shards"
    assert pipe.counters.lines == 2
