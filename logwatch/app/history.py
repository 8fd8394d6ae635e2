"""`logwatch history` and `logwatch compare`: the launch ledger of a log file.

Every startup in the file becomes a `StartupRecord` (ledger.py): its flags, what changed
since the launch before, phases, outcome and serving throughput.  The file is read through
the same pipeline as `replay`, with every serving line matched (not only the first and last
of each run), since the throughput percentiles need them all; the frames inside a run of one
progress bar are skipped as in replay (rules/bars.py: a record takes nothing from them).
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Sequence
from typing import Any, Callable

from .. import clock
from ..ledger import ENGINE_VERSION, LedgerRecorder, StartupRecord, launch_changes
from ..logfile import DamagedLog, open_log, start_offset
from ..machine import Event, State
from ..rules.args import changed_text
from ..rules.locate import choose_pack
from ..units import fmt_duration
from ..verdict import Exit
from .replay import DETECT_BYTES, replay_stream


def read_ledger(path: str, spec: str, emit: Callable[[StartupRecord], None]) -> None:
    """Every startup in the log at `path`, in order, each handed to `emit` as it closes
    (none is kept here: a log of 20,001 startups is read in the memory of one).  Plain or
    compressed, `-` for stdin (logfile.py `open_log`: `DamagedLog` after the records of
    what could be read)."""
    with open_log(path) as f:
        start = start_offset(f)
        head = f.read(DETECT_BYTES)
        pack = choose_pack(spec, head)
        rec = LedgerRecorder(pack.name, advice=pack.advice, model_flags=pack.model_flags)
        rec.read_whole(_written_at(path))

        def step(events: list[Event], state: State) -> None:
            for closed in rec.observe(events, state):
                emit(closed)
        pipe = replay_stream(f, pack, head, collapse_stats=False, bar_runs=True, on_step=step,
                             start=start)
        for closed in rec.finish(pipe.state):
            emit(closed)


def _written_at(path: str) -> float | None:
    """The file's last write on logwatch's clock (the records' `started_at`), None for
    stdin or a file that cannot be stat'ed: a stamp-less startup began by then."""
    if path == "-":
        return None
    try:
        return clock.from_wall(os.stat(path).st_mtime)
    except OSError:
        return None


SHORT = " (short)"    # a serving window under the ledger's WARMUP: figures of its warm-up


def _tps(rec: StartupRecord) -> str:
    g = rec.serving.get("gen_throughput") if rec.serving else None
    if not g or g.get("p50") is None:
        return "-"
    return f"{g['p50']:.0f}" + (SHORT if rec.serving.get("warmup_only") else "")


def _watts(rec: StartupRecord) -> str:
    g = rec.gpu or {}
    if g.get("power_p50_w") is None:
        serving = (rec.watts or {}).get("serving")
        if not serving:
            return "-"
        return f"{serving['p50_w']:.0f}" + (SHORT if rec.serving.get("warmup_only") else "")
    return f"{g['power_p50_w']:.0f}/{g.get('power_limit_w') or 0:.0f}" + \
        (SHORT if g.get("short") else "")


def at_watts(rec: StartupRecord, phase: str | None) -> str:
    """" at 690 W": the GPUs' median power in that phase (the live ledger's), or ""."""
    w = (rec.watts or {}).get(phase or "")
    return f" at {w['p50_w']:.0f} W" if w else ""


TABLE_HEAD = ("#", "when", "outcome", "startup", "slowest phase", "tok/s p50", "W p50/limit",
              "flags changed")


def history_row(r: StartupRecord) -> tuple[str, ...]:
    """A startup's row of the table (`TABLE_HEAD`)."""
    outcome = r.outcome + (f": {r.reason}" if r.reason else "")
    if r.replica:     # crashed ahead of the startup's phases (the row's durations end before)
        outcome += f" ({r.replica} in {r.during})"
    if r.outcome == "ready" and r.degraded:
        outcome += " (degraded)"      # a part failed while it served (StartupRecord.degraded)
    if r.outcome != "ready" and r.served_seconds is not None:
        outcome += f" after serving {fmt_duration(r.served_seconds)}"
    slow = f"{r.slowest_phase} {fmt_duration(r.durations.get(r.slowest_phase))}" \
        f"{at_watts(r, r.slowest_phase)}" \
        if r.slowest_phase and r.slowest_phase in r.durations else "-"
    return (str(r.index), r.started_stamp or "-", outcome,
            fmt_duration(r.startup_seconds) if r.startup_seconds is not None else "-",
            slow, _tps(r), _watts(r), changed_text(r.changed) or "-")


def history_table(records: list[StartupRecord]) -> str:
    """One row per startup: when, outcome, startup time, slowest phase, flags changed, tok/s
    p50, watts p50 / limit."""
    return rows_table([history_row(r) for r in records])


def rows_table(body: list[tuple[str, ...]]) -> str:
    """`TABLE_HEAD` and the rows, columns aligned (the last one, the flags, left ragged)."""
    rows = [TABLE_HEAD, *body]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _phase_cell(r: StartupRecord, phase: str, secs: float | None) -> str:
    """A phase's time in `compare`: "untimed" where the log gave none (read at a first
    attach from bars without stamps: before, "-" and the other launch's phase "new", as if
    this one had not loaded its shards at all)."""
    if secs is not None:
        return fmt_duration(secs) + at_watts(r, phase)
    return "untimed" if phase in r.untimed else "-"


def compare_text(a: StartupRecord, b: StartupRecord) -> str:
    """Two startups side by side: flags changed, each phase with its delta, tok/s, watts."""
    out = [f"startup #{a.index} ({a.started_stamp or '?'}) vs #{b.index} ({b.started_stamp or '?'})"]

    def row(name: str, x: str, y: str, delta: str = "") -> None:
        out.append(f"  {name:<22} {x:>18}  {y:>18}  {delta}")
    row("", f"#{a.index}", f"#{b.index}", "delta")
    row("outcome", a.outcome, b.outcome)
    for phase in list(dict.fromkeys([*a.durations, *a.untimed, *b.durations, *b.untimed])):
        x, y = a.durations.get(phase), b.durations.get(phase)
        delta = (f"{'+' if y - x >= 0 else '-'}{fmt_duration(abs(y - x))}"
                 if x is not None and y is not None else
                 "" if phase in a.untimed or phase in b.untimed else "new" if x is None else "gone")
        row(phase, _phase_cell(a, phase, x), _phase_cell(b, phase, y), delta)
    sx, sy = a.startup_seconds, b.startup_seconds
    row("startup", fmt_duration(sx) if sx is not None else "-",
        fmt_duration(sy) if sy is not None else "-",
        f"{'+' if sy - sx >= 0 else '-'}{fmt_duration(abs(sy - sx))}"
        if sx is not None and sy is not None else "")
    ta, tb = _tps(a), _tps(b)
    pa, pb = (((r.serving or {}).get("gen_throughput") or {}).get("p50") for r in (a, b))
    ratio = f"x{pb / pa:.2f}" if pa and pb is not None else ""
    row("tok/s p50", ta, tb, ratio)
    row("W p50/limit", _watts(a), _watts(b))
    if a.watts or b.watts:
        row("W serving p50", at_watts(a, "serving").replace(" at ", "") or "-",
            at_watts(b, "serving").replace(" at ", "") or "-")
    changed = dict(b.changed) if b.index == a.index + 1 else None
    if changed is None:
        changed = {k: [x, y] for k, (x, y) in launch_changes(a, b).items()}
    changed.pop(ENGINE_VERSION, None)
    if a.version or b.version:
        row("engine version", a.version or "-", b.version or "-")
    out.append("  flags changed: " + (changed_text(changed, limit=50) or "none"))
    fields = _fields_apart(a, b)
    if fields:
        out.append("  " + fields)
    for line in b.advice:
        out.append(f"  advice: {line}")
    return "\n".join(out)


def _fields_apart(a: StartupRecord, b: StartupRecord) -> str:
    """"fields only in #2: 28 (attn_dp_size, ...); only in #1: 2 (...): another engine
    version": two dumps of every field that name different fields are of two versions."""
    if not (a.args_complete and b.args_complete and a.args and b.args):
        return ""
    only = [(r, [k for k in r.args if k not in o.args]) for r, o in ((b, a), (a, b))]
    parts = [f"only in #{r.index}: {len(ks)} ({', '.join(ks[:4])}{', ...' if len(ks) > 4 else ''})"
             for r, ks in only if ks]
    return "fields " + "; ".join(parts) + ": another engine version" if parts else ""


def pick(records: Sequence[StartupRecord], ref: str) -> StartupRecord:
    """A startup by its number (1-based) or from the end (-1: the last)."""
    try:
        i = int(ref)
    except ValueError:
        raise LookupError(f"not a startup number: {ref!r} (1, 2, ... or -1 for the last)") from None
    if i == 0 or abs(i) > len(records):
        raise LookupError(f"no startup {i}: the log has {len(records)}")
    return records[i - 1] if i > 0 else records[i]


def _numbered(records: Sequence[StartupRecord], ref: str) -> str:
    """`ref` as `history` numbers a ledger's launches (it keeps the last 50, numbered on:
    #11-#60), as the position `pick` reads.  Before, 1 and 2 picked #11 and #12 under a
    header that looked right."""
    try:
        i = int(ref)
    except ValueError:
        return ref
    if i <= 0:
        return ref
    for pos, r in enumerate(records, 1):
        if r.index == i:
            return str(pos)
    kept = f" (kept: #{records[0].index}-#{records[-1].index})" if records else ""
    raise LookupError(f"no startup {i}: the ledger has {len(records)}{kept}")


def run_history(paths: list[str], spec: str, as_json: bool,
                out: Callable[[str], None]) -> int:
    """Each file's startups: JSON lines as they close, or the table (its rows kept, not the
    records: a 20,001-startup log is read in the memory of one startup).  A compressed
    file cut short: its startups are shown, then `DamagedLog` (the first) once every file
    is read."""
    damaged: list[DamagedLog] = []
    seen = [0]                            # startups read, of every file
    for path in paths:
        rows: list[tuple[str, ...]] = []

        def emit(r: StartupRecord, path: str = path) -> None:
            seen[0] += 1
            if as_json:
                out(json.dumps({"file": path, **r.to_json()}, ensure_ascii=False))
            else:
                rows.append(history_row(r))
        try:
            read_ledger(path, spec, emit)
        except DamagedLog as e:
            damaged.append(e)
        if as_json:
            continue
        if len(paths) > 1:
            out(f"{path}:")
        out(rows_table(rows) if rows else "no startup in this log")
    if damaged:
        raise damaged[0]
    return Exit.OK if seen[0] else Exit.FAILED   # nothing recorded: 1, as the exit table says


def stored_records(state_dir: Any, target: str,
                   say: Callable[[str], None] | None = None) -> list[StartupRecord]:
    """The daemon's ledger of one target (state_dir/ledger.sqlite3); `say` is told when the
    file was not a ledger and was set aside."""
    from ..state.ledger import LedgerStore
    store = LedgerStore(state_dir)
    try:
        records = store.records(target, wait=None)
    finally:
        store.close()
    if store.set_aside is not None and say is not None:
        say(store.set_aside)
    return records


def run_history_store(state_dir: Any, target: str, as_json: bool,
                      out: Callable[[str], None]) -> int:
    """The daemon's ledger of one target (state_dir/ledger.sqlite3)."""
    notes: list[str] = []
    records = stored_records(state_dir, target, notes.append)
    if notes:                            # a corrupt ledger set aside: one line, no traceback
        out(notes[0] + (f"; no startup recorded for {target}" if not records else ""))
        if not records:
            return Exit.FAILED
    if as_json:
        for r in records:
            out(json.dumps({"target": target, **r.to_json()}, ensure_ascii=False))
    else:
        out(history_table(records) if records else f"no startup recorded for {target}")
    return Exit.OK if records else Exit.FAILED     # the exit table: nothing recorded is 1


def _compare(records: Sequence[StartupRecord], what: str, a: str, b: str,
             out: Callable[[str], None]) -> int:
    if len(records) < 2 and (a, b) == ("-2", "-1"):
        out(f"{what}: {len(records)} startup(s): nothing to compare")
        return Exit.FAILED
    out(compare_text(pick(records, a), pick(records, b)))
    return Exit.OK


def run_compare_store(state_dir: Any, target: str, a: str, b: str,
                      out: Callable[[str], None]) -> int:
    """Two startups of the daemon's ledger of one target (with their watts per phase)."""
    records = stored_records(state_dir, target)
    return _compare(records, target, _numbered(records, a), _numbered(records, b), out)


def run_compare(path: str, a: str, b: str, spec: str, out: Callable[[str], None]) -> int:
    kept = _Kept((a, b))
    try:
        read_ledger(path, spec, kept.add)
    except DamagedLog:
        _compare(kept, path, a, b, out)    # the startups that were read, then the damage
        raise
    return _compare(kept, path, a, b, out)


class _Kept(Sequence[StartupRecord]):
    """The startups of a log that `compare` asks for (by number, or from the end), kept as
    the log is read; indexed as `pick` indexes a list of them all."""

    def __init__(self, refs: tuple[str, ...]) -> None:
        nums = []
        for r in refs:
            try:
                nums.append(int(r))       # as `pick` reads it
            except ValueError:
                pass                      # `pick` says what is wrong with it
        self.wanted = {i for i in nums if i > 0}
        self.by_number: dict[int, StartupRecord] = {}
        self.tail: deque[StartupRecord] = deque(maxlen=max([-i for i in nums if i < 0] + [1]))
        self.count = 0

    def add(self, rec: StartupRecord) -> None:
        self.count += 1
        if self.count in self.wanted:
            self.by_number[self.count] = rec
        self.tail.append(rec)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> StartupRecord:  # type: ignore[override]
        return self.by_number[i + 1] if i >= 0 else self.tail[i]
