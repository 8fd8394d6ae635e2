"""One target's pipeline: bytes -> framing -> rules -> machine, with the crash excerpt.

`LogPipeline.feed(chunk, now)` is the whole per-target hot path, shared by `replay`, `watch`
and the daemon; sources only decide where the bytes come from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from .counters import Counters, count_events
from .lines import (
    DEFAULT_MAX_LINE_BYTES, RECORD_LINE_BREAK, Block, Framer, peek, progress_frame,
    segment_text, split_glued,
)
from .machine import (
    Crashed, CrashRetracted, CrashSettled, CrashUpdated, Event, Observation, Ready, Restarted,
    StartupBegan, StartupMachine, State,
)
from .machine.crash import read_whole
from .rules.matcher import Hit, shared_matcher
from .rules.pack import CRASHED, STOPPED, Rule, RulePack, record_forms
from .rules.timestamps import LogClock, Stamp

EXCERPT_BEFORE = 12        # physical lines kept before the first crash line
EXCERPT_MAX_LINES = 80     # lines in an excerpt, in all
EXCERPT_MAX_LINE_CHARS = 2000
EXCERPT_MAX_CHARS = 24_000
_TAIL_KEEP = 16 * 1024     # bytes of the previous block kept for "lines before"
PARTIAL_LINE_QUIET = 5.0   # seconds a log stays quiet mid-line before that line is read
MAX_SAVED_HITS = 4096      # a shown line's hits a checkpoint may hold (a 64 KiB line of frames)
_LINE_BYTES = EXCERPT_MAX_LINE_CHARS * 2      # bytes an excerpt line is read from, at most
_TAKE_BYTES = EXCERPT_MAX_LINES * _LINE_BYTES  # bytes after a crash the excerpt looks at


_NEXT_LINE = RECORD_LINE_BREAK.encode()


def excerpt_lines(raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[str]:
    """Physical lines as a terminal shows them: the last `\\r` frame of each, decoded; a JSON
    record's lines each (`RECORD_LINE_BREAK`: a terminal's next line)."""
    out: list[str] = []
    for physical in raw.split(b"\n"):
        for row in physical.split(_NEXT_LINE) if _NEXT_LINE in physical else (physical,):
            frames = [f for f in row.split(b"\r") if f.strip()]
            if not frames:
                continue
            text = segment_text(frames[-1], max_line_bytes)
            for part in split_glued(text):
                part = part.rstrip()
                if part:
                    out.append(part[:EXCERPT_MAX_LINE_CHARS])
    return out


def last_lines(tail: bytes, data: bytes, end: int, n: int) -> list[str]:
    """`excerpt_lines(tail + data[:end])[-n:]`, where `data[:end]` is whole lines: decodes only
    the last lines it needs.  A replay's block is megabytes and a restart loop crashes every
    few dozen lines, so decoding the whole block before each crash was quadratic (issue 30: a
    20,001-startup loop took 290 s).  Exact: excerpt lines never span a physical line."""
    k = n + 1
    while True:
        cut = end
        for _ in range(k):
            cut = data.rfind(b"\n", 0, cut)
            if cut < 0:
                return excerpt_lines(tail + data[:end])[-n:]
        lines = excerpt_lines(data[cut + 1:end])
        if len(lines) >= n:
            return lines[-n:]
        k *= 4


class ExcerptCollector:
    """Builds `Crash.excerpt`: the lines before the crash and the traceback after it.

    Works on the raw block bytes (the excerpt needs every line, not only the matched ones)
    and keeps an unfinished physical line across blocks, so the excerpt does not depend on
    where the input was split.  The lines after the crash are read ahead of the scan (a
    block's at once); a new startup found among them takes back the lines from its own
    (`cut_at`): a restart loop's next launch is not the crash's traceback.
    """

    def __init__(self, withhold: Callable[[str], str | None] | None = None) -> None:
        # a request log's line (a user's prompt) -> its stand-in (Matcher.withheld)
        self.withhold = withhold
        self.withheld = 0              # such lines left out of excerpts (each a stand-in)
        self.prev_tail = bytearray()   # the last _TAIL_KEEP..2*_TAIL_KEEP bytes before
        self.target: list[str] | None = None
        self.chars = 0
        self.pending = b""   # an unfinished physical line of the "after" part
        self.taken: list[str] | None = None   # the excerpt being (or last) read ahead
        # this block's read-ahead: (where a physical line taken ends in the block, the
        # excerpt's length after it), the first entry where the block's part began
        self.marks: list[tuple[int, int]] = []
        # the unfinished line shown in it for now (`show`): its length, chars and withheld
        # before that line
        self.provisional: tuple[int, int, int] | None = None
        # an excerpt begun in the shown bytes and ended with them (`after_shown`): read again
        # from its line once that is whole (`read_crash_whole`)
        self.cut_short: list[str] | None = None
        self.crash_line_at = 0    # where the crash's own physical line is in the excerpt

    def start(self, excerpt: list[str], block: Block, seg_start: int) -> None:
        line_start = block.data.rfind(b"\n", 0, seg_start) + 1
        tail = bytes(self.prev_tail[-_TAIL_KEEP:])
        if line_start == 0:
            before_raw = tail + block.data[:seg_start]
            cut = before_raw.rfind(b"\n") + 1
            before_raw, head = before_raw[:cut], before_raw[cut:]
            before = excerpt_lines(before_raw)[-EXCERPT_BEFORE:]
        else:
            head = block.data[line_start:seg_start]
            before = last_lines(tail, block.data, line_start, EXCERPT_BEFORE)
        excerpt.clear()
        self.target = self.taken = excerpt
        self.chars, self.provisional, self.cut_short = 0, None, None
        for line in before:
            self._add(line)
        self.crash_line_at = len(excerpt)
        # the crash's own physical line, from its start (frames before the crash segment too);
        # no more of the block than `_take` looks at (a restart loop crashes every few dozen
        # lines of a 2 MiB block: copying the rest of it at each crash cost ~50 us)
        self.pending = b""
        self.marks = []
        self._take(head + block.data[seg_start:seg_start + _TAKE_BYTES], seg_start - len(head))

    def stop(self) -> None:
        self._unshow()
        self.target = None
        self.pending = b""

    def show(self, block: Block) -> None:
        """Held bytes read before their end (`LogPipeline.read_open_line`): while an excerpt
        is read, their lines are in it for now, until the block that releases them is read
        (whole, and the lines after them; before, the excerpt ended at the line shown: a
        traceback that paused 5 s mid-line lost the rest, its cause line too)."""
        self.marks = []
        if self.target is None:
            return
        self._unshow()
        self.provisional = (len(self.target), self.chars, self.withheld)
        for line in excerpt_lines(self.pending + block.data):
            if not self._add(line):
                break

    def after_shown(self) -> int | None:
        """After a shown block: an excerpt read on goes on (`show`); one begun in the shown
        bytes ends with them (what it took of them would be taken again).  Where the shown
        lines begin in it (`shown_from`)."""
        if self.provisional is None:
            target = self.target
            self.finish()
            self.cut_short = target
        return self.shown_from()

    def shown_from(self) -> int | None:
        """Where the lines of the shown bytes begin in the excerpt (None: not in one)."""
        if self.provisional is not None:
            return self.provisional[0]
        return self.crash_line_at if self.cut_short is not None else None

    def resume(self, excerpt: list[str], keep: int) -> None:
        """A restarted daemon reads the shown line again from its start (`LogPipeline.
        start_at`): the unsettled crash's excerpt is read on from there, its lines of the
        cut taken out (before, it ended at the cut: `RuntimeError: NCCL error: unh`)."""
        del excerpt[keep:]
        self.target = self.taken = excerpt
        self.chars, self.pending, self.provisional = sum(map(len, excerpt)), b"", None

    def _unshow(self) -> None:
        """Take out the lines `show` put in for now."""
        if self.provisional is not None and self.target is not None:
            n, self.chars, self.withheld = self.provisional
            del self.target[n:]
        self.provisional = None

    def cut_at(self, block: Block, pos: int) -> None:
        """A new startup begins at `pos` of `block`: the lines read ahead from its physical
        line on are not the crash's; the excerpt ends before them."""
        if self.taken is not None and self.marks:
            line_start = block.data.rfind(b"\n", 0, pos) + 1
            keep = self.marks[0][1]
            for end, n in self.marks:
                if end > line_start:
                    break
                keep = n
            del self.taken[keep:]
        self.taken = None
        self.stop()

    def continue_block(self, block: Block) -> None:
        self.marks = []
        if self.target is not None:
            self._take(block.data, 0)

    def end_block(self, block: Block) -> None:
        self.cut_short = None     # (the block that released the shown bytes was read)
        # appended and trimmed now and then, not rebuilt from 16 KiB at every block (a live
        # log's blocks are a few lines)
        data = block.data
        if len(data) >= _TAIL_KEEP:
            del self.prev_tail[:]
            data = memoryview(data)[-_TAIL_KEEP:]
        self.prev_tail += data
        if len(self.prev_tail) > 2 * _TAIL_KEEP:
            del self.prev_tail[:-_TAIL_KEEP]

    def finish(self) -> None:
        """End of input: the unfinished last line belongs to the excerpt too."""
        self._unshow()
        if self.target is not None and self.pending:
            for line in excerpt_lines(self.pending):
                if not self._add(line):
                    break
        self.stop()

    def _take(self, raw: bytes, base: int) -> None:
        """The whole physical lines of `pending + raw` (`base`: where raw begins in the
        block), one at a time: the excerpt wants ~80 lines, and decoding all the bytes that
        could hold them cost a restart loop most of its replay time."""
        if self.target is None:
            return
        self._unshow()
        # bounded: look at no more bytes than the lines still wanted can hold
        room = EXCERPT_MAX_LINES - len(self.target)
        data = self.pending + raw[: room * _LINE_BYTES]
        shift = base - len(self.pending)     # data[i] is the block's byte shift + i
        cut = data.rfind(b"\n") + 1
        self.pending = data[cut:][-EXCERPT_MAX_LINE_CHARS * 4:]
        marks = self.marks
        marks.append((shift, len(self.target)))
        start = 0
        while start < cut:
            end = data.find(b"\n", start, cut) + 1
            full = False
            for line in excerpt_lines(data[start:end]):
                if not self._add(line):
                    full = True
                    break
            marks.append((shift + end, len(self.target)))
            if full:
                self.stop()
                return
            start = end

    def _add(self, line: str) -> bool:
        assert self.target is not None
        stand_in = self.withhold(line) if self.withhold is not None else None
        if stand_in is not None:
            line = stand_in
        if len(self.target) >= EXCERPT_MAX_LINES or self.chars + len(line) > EXCERPT_MAX_CHARS:
            return False
        self.withheld += stand_in is not None
        self.target.append(line)
        self.chars += len(line)
        return True


def cut_figures(rule: Rule, fields: dict[str, str], text: str) -> str:
    """How much of a line read before its end (no `\\n` or `\\r` after it yet: a quiet
    log's last line, a file's last bytes) a figures rule may take: "whole", "cut" (its
    counts, not a rate: a bar frame cut inside its `[elapsed<left, rate]`) or "drop" (a
    figure ends where the line does, so it may be cut short: `667/1` of `667/1417`).  A
    phase or crash rule takes the line as it is: what it says matters more than a figure."""
    if not (rule.progress or rule.stats):
        return "whole"
    if any(v and text.endswith(v) for v in fields.values()):
        return "drop"
    if rule.progress and progress_frame(text) is None:
        return "cut"
    return "whole"


@dataclass(slots=True)
class ShownLine:
    """What reading the unfinished last line (`LogPipeline.read_open_line`) took, until the
    block that releases those bytes for good is read: its hits are not taken again, nor
    its lines counted again; what the line says only once whole is taken then."""

    held: tuple[int, int] | None = None  # the framer's held bytes when last read
    # (segment offset, rule id) -> per hit there: taken whole (False: its figures cut, None:
    # not taken); and of the block read now, the hits seen so far
    hits: dict[tuple[int, str], list[bool | None]] = field(default_factory=dict)
    nth: dict[tuple[int, str], int] = field(default_factory=dict)
    lines: int = 0        # lines the shown block ended (newlines and joins), counted
    newlines: int = 0     # of them newlines
    # the unfinished last line was read and counted: the newline that ends it later (the
    # writer went on) is not another line
    open_counted: bool = False
    # the lines (number -> segment offset) whose crash or hint hits were taken shown, cut
    crash_lines: dict[int, int] = field(default_factory=dict)
    excerpt_from: int | None = None   # ExcerptCollector.shown_from, when last shown

    def admit(self, hit: Hit, open_end: bool, shown: bool) -> tuple[str, bool] | None:
        """How to take a hit (`open_end`: on the block's unfinished last segment; `shown`:
        of held bytes): None not now (taken as they were shown, the same rule on the same
        segment; or a figure cut short, taken when whole), else how it reads
        (`cut_figures`) and whether it is a new match (not a cut one taken again whole)."""
        read = cut_figures(hit.rule, hit.fields, hit.text) if open_end else "whole"
        if not self.hits and not shown:
            return None if read == "drop" else (read, True)
        key = (hit.offset, hit.rule.id)
        n = self.nth[key] = self.nth.get(key, 0) + 1
        seen = self.hits.get(key, [])
        before = seen[n - 1] if n <= len(seen) else None   # True whole, False cut
        if read == "drop" or before is True or (before is False and read == "cut"):
            return None
        if shown:
            seen = self.hits.setdefault(key, seen)
            seen.extend([None] * (n - len(seen)))
            seen[n - 1] = read == "whole"
        if read == "cut":
            hit.fields = {k: v for k, v in hit.fields.items() if k != "rate"}
        return read, before is None

    def peek(self, framer: Framer, now: float) -> Block | None:
        """The framer's held bytes as a block (`lines.peek`), or None when there are none or
        none new since the last time: a quiet log is read once, not at every tick."""
        held = (framer.consumed_offset, len(framer.pending))
        if not framer.pending or held == self.held:
            return None
        self.held = held
        return peek(framer, now)[0]

    def saved(self, offset: int) -> dict[str, Any] | None:
        """What a checkpoint at `offset` (`LogPipeline.resume_at`) keeps of the line shown
        there, as JSON; None when nothing held there was shown."""
        if self.held is None or self.held[0] != offset:
            return None
        return {"held": list(self.held), "lines": self.lines, "newlines": self.newlines,
                "open_counted": self.open_counted,
                "hits": [[at, rid, seen] for (at, rid), seen in self.hits.items()],
                "crash_lines": [[n, at] for n, at in self.crash_lines.items()],
                "excerpt_from": self.excerpt_from}

    @classmethod
    def restored(cls, doc: object) -> "ShownLine":
        """`saved`'s JSON read back (a restarted daemon); a damaged one is nothing shown: the
        line is read again as new, as before this was kept."""
        try:
            assert isinstance(doc, dict) and len(doc["hits"]) <= MAX_SAVED_HITS
            held = (int(doc["held"][0]), int(doc["held"][1]))
            hits = {(int(at), str(rid)): [None if v is None else bool(v) for v in seen]
                    for at, rid, seen in doc["hits"]}
            keep = doc.get("excerpt_from")
            return cls(held=held, hits=hits, lines=int(doc["lines"]),
                       newlines=int(doc["newlines"]), open_counted=bool(doc["open_counted"]),
                       crash_lines={int(n): int(at) for n, at in doc["crash_lines"]},
                       excerpt_from=None if keep is None else max(int(keep), 0))
        except (AssertionError, KeyError, IndexError, TypeError, ValueError, OverflowError):
            return cls()

    def count(self, block: Block, shown: bool, mid_line: bool) -> int:
        """The lines `block` adds to the count: each physical line once (a block that
        releases shown bytes begins with them; the lines they ended were counted when they
        were shown, and so was the unfinished one: `mid_line`, the input ends inside it)."""
        newlines = block.newlines()
        lines = newlines + len(block.joins)
        add = max(lines - self.lines, 0)
        if shown:
            self.lines, self.newlines = max(lines, self.lines), max(newlines, self.newlines)
            if mid_line and not self.open_counted:
                add += 1                   # read: a line, though its `\n` may come
                self.open_counted = True
            return add
        if self.open_counted and newlines > self.newlines:
            add -= 1                       # the line read after a quiet ends here: counted
            self.open_counted = False
        self.lines = self.newlines = 0
        return add

    def released(self, offset: int) -> None:
        """Bytes before `offset` were read for good: forget what was shown of them."""
        if self.hits:
            self.hits = {k: v for k, v in self.hits.items() if k[0] >= offset}
        if self.crash_lines:
            self.crash_lines = {n: at for n, at in self.crash_lines.items() if at >= offset}

    def now_whole(self, hit: Hit, shown: bool) -> bool:
        """Whether `hit` is a crash or hint rule's on a line shown cut and read now as the
        block that releases it (whole, or as whole as the end of input leaves it); a shown
        one's line is noted."""
        if not (hit.rule.crash or hit.rule.hint):
            return False
        if shown:
            self.crash_lines[hit.line_number] = hit.offset
            return False
        return hit.line_number in self.crash_lines


class LogPipeline:
    """Framing, matching and the startup machine for one log."""

    def __init__(self, pack: RulePack, *, collapse_stats: bool = False,
                 bar_runs: bool | None = None,
                 stall_after: float | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 offset: int = 0, line_number: int = 1,
                 counters: Counters | None = None, year: int | None = None,
                 written: float | None = None) -> None:
        self.pack = pack
        self.framer = Framer(offset=offset, line_number=line_number,
                             max_line_bytes=max_line_bytes, records=record_forms(pack))
        self.matcher = shared_matcher(pack, max_line_bytes)
        self.machine = StartupMachine(pack, stall_after)
        self.state = State()
        # year-less stamps: of `year`, else placed by when the file was last `written`
        self.clock = LogClock(pack.timestamps, year, written, pack.ranks)
        self.collapse_stats = collapse_stats
        # a finished log's reading: the frames inside a run of one bar are not matched
        # (rules/bars.py; by default with collapse_stats, as replay reads)
        self.bar_runs = collapse_stats if bar_runs is None else bar_runs
        # the target's own counters (one object, counted here as lines are framed and
        # matched), or a fresh one for a replay
        self.counters = counters if counters is not None else Counters()
        self._count_own_reasons()
        self.excerpt = ExcerptCollector(self.matcher.withheld)
        self.shown = ShownLine()    # what reading the unfinished line took (`tick`)
        # called with each step's events and the state right after them (the launch ledger
        # needs the state of that moment, not of the end of a 2 MiB block)
        self.on_step: Callable[[list[Event], State], None] | None = None
        # whether a settled crash, a Ready's `took`, counts now (None: all, as replay counts)
        self.counts_crash: Callable[[CrashSettled], bool] | None = None
        self.counts_took: Callable[[Ready], bool] | None = None
        # watch: a crash or stop of a startup it says is news stays the verdict, though a
        # relaunch begins in the same read (`step_keeping_verdict`); then the rest is not read
        self.keep_final: Callable[[State], bool] | None = None
        self.halted = False

    def feed(self, chunk: bytes, now: float) -> list[Event]:
        if chunk:
            self.machine.note_activity(self.state, now)
        cut = self.framer.lines_cut_total
        block = self.framer.feed(chunk, now)
        self.counters.lines_cut += self.framer.lines_cut_total - cut
        if block is None:
            return []
        events = self._block(block, now)
        # the scan has counted the block's lines: nothing keeps it past this call, so the
        # memory of a large chunk is reused by the next one (not fresh pages every time)
        self.framer.settle()
        return self._counted(events)

    def finish(self, now: float) -> list[Event]:
        """End of input: the unfinished last line counts as a line, and a crash is final."""
        events = self._close_file(now)
        if self.state.deferred is not None:     # nothing more will replace it
            events.append(self.state.deferred)
            self.state.deferred = None
        settled = self.machine.input_ended(self.state, now)
        if settled and self.on_step is not None:
            self.on_step(settled, self.state)
        events += settled
        return self._counted(events)

    def _close_file(self, now: float) -> list[Event]:
        cut = self.framer.lines_cut_total
        block = self.framer.flush(now)
        self.counters.lines_cut += self.framer.lines_cut_total - cut
        events = self._block(block, now) if block is not None else []
        if self.framer.mid_line and not self.shown.open_counted:
            self.counters.lines += 1   # the last line had no `\n` (a bar's last `\r` frame too)
        self.shown = ShownLine()
        self.excerpt.finish()
        return events

    def carry_on(self, before: "LogPipeline") -> None:
        """Take over from another engine's pipeline of the same log (a relaunch of another
        engine into the same path): the server's state, the position and the counters go
        on; what the old pack read stays read (the caller says whether this is a relaunch:
        `State.relaunched`)."""
        self.state, self.framer, self.counters = before.state, before.framer, before.counters
        self.shown = before.shown    # (what was read of its unfinished line, by either)
        self._count_own_reasons()

    def _count_own_reasons(self) -> None:
        for reason in self.pack.all_reasons:     # a pack's own reasons exist at 0 too
            self.counters.crashes.setdefault(reason, 0)

    def start_at(self, offset: int, line_number: int) -> None:
        """Before the first byte: frame from this position of the log (`resume_shown`)."""
        resume_shown(self, offset)
        self.framer = Framer(offset=offset, line_number=line_number,
                             max_line_bytes=self.framer.max_line_bytes,
                             records=self.framer.records)

    def resume_at(self) -> tuple[int, int]:
        """Where a restart resumes (offset, line number): before an unfinished line shown
        (`shown.saved` keeps what it said from being said again; before, the rest of it,
        written after the restart, was read as a line of its own)."""
        return self.framer.consumed_offset, self.framer.line_number

    def new_file(self, offset: int, line_number: int, now: float) -> list[Event]:
        """The source moved to another file (rotation, truncation): close the old one's last
        line and frame the new one from `offset`; the server's state carries on.  A server
        gone (a final crash, a stop) writes no new file: what comes in it is a relaunch,
        even one that dies before its launch line (`error: unrecognized arguments`; before,
        that error was taken for more of the old crash, and not alerted)."""
        events = self._close_file(now)
        if self.state.server_gone:
            self.state.relaunched = True
        self.framer = Framer(offset=offset, line_number=line_number,
                             max_line_bytes=self.framer.max_line_bytes,
                             records=self.framer.records)
        return self._counted(events)

    def tick(self, now: float, reading: bool = True) -> list[Event]:
        """Time passed (`reading`: the log can be read now, its silence is the server's:
        `StartupMachine.tick`)."""
        st = self.state
        events = self.read_open_line(now) if open_line_due(self.machine, st, now) else []
        ticked = self.machine.tick(st, now, reading)
        if ticked and self.on_step is not None:
            self.on_step(ticked, st)
        return events + self._counted(ticked)

    def read_open_line(self, now: float) -> list[Event]:
        """The unfinished last line read as a line now, its `\n` free to come (the log quiet
        mid-line: `tick`, or a first attach to a file long unwritten: CatchUp.end).  Its bytes
        stay held (`ShownLine.peek`): when the writer goes on, the whole line is read (before,
        the rest was a line of its own: `Load weight be`, 6 s, `gin. avail ...`: no phase)."""
        block = self.shown.peek(self.framer, now)
        if block is None:
            return []
        events = self._block(block, now, shown=True)
        self.shown.excerpt_from = self.excerpt.after_shown()
        return self._counted(events)

    def endpoint_answers(self, now: float, said: str) -> list[Event]:
        """The probe found the server answering (app/attachments/probe.py): ready, where the
        log never said so (`StartupMachine.endpoint_answers`)."""
        events = self.machine.endpoint_answers(self.state, now, said)
        if events and self.on_step is not None:
            self.on_step(events, self.state)
        return self._counted(events)

    def _counted(self, events: list[Event]) -> list[Event]:
        if events:   # startups, settled crashes, durations
            count_events(self.counters, events, self.counts_crash, self.counts_took)
        return events

    def _block(self, block: Block, now: float, shown: bool = False) -> list[Event]:
        """The block's hits through the machine (`shown`: held bytes: `read_open_line`)."""
        (self.excerpt.show if shown else self.excerpt.continue_block)(block)
        events: list[Event] = []
        errors_before = self.matcher.errors  # the matcher is shared: count this block's own
        self.shown.nth = {}
        open_at = _open_segment(block.data) if shown or not self.framer.pending else None
        for hit in self.matcher.scan(block, self.collapse_stats, self.bar_runs):
            if self.halted:
                break
            events.extend(self._hit(hit, block, now, hit.block_pos == open_at, shown))
        self.counters.rule_errors += self.matcher.errors - errors_before
        self.counters.lines += self.shown.count(block, shown, self.framer.mid_line)
        if not shown:      # (the shown bytes are in the block that releases them)
            self.shown.released(self.framer.consumed_offset)
            self.excerpt.end_block(block)
        return events

    def _hit(self, hit: Hit, block: Block, now: float, open_end: bool = False,
             shown: bool = False) -> list[Event]:
        rid = hit.rule.id
        if (admitted := self.shown.admit(hit, open_end, shown)) is None:  # (taken when shown)
            return read_crash_whole(self, hit, block, now) if self.shown.now_whole(hit, shown) else []
        read, new = admitted
        matches = self.counters.rule_matches   # (one match, though taken again whole)
        matches[rid] = matches.get(rid, 0) + new
        stamp = self.clock.stamp(hit.text, hit.wrapped, hit.ts)
        own = mark_timed(hit, stamp)
        pos, data = hit.block_pos, block.data
        if pos == 0 or data[pos - 1] == 10:   # the segment starts its line (most do)
            offset = hit.offset
        else:
            offset = block.raw_offset(data.rfind(b"\n", 0, pos) + 1)
        obs = Observation(hit.rule, hit.fields, hit.text, hit.line_number,
                          stamp.seconds if stamp else None, stamp.text if stamp else None,
                          own, offset, hit.proc, read == "cut")
        events = step_keeping_verdict(self, obs, now)
        for ev in events:
            if isinstance(ev, Crashed):
                self.excerpt.start(ev.crash.excerpt, block, hit.block_pos)
            elif isinstance(ev, Restarted):
                self.excerpt.cut_at(block, hit.block_pos)
            elif isinstance(ev, CrashRetracted):
                self.excerpt.stop()
        # (after the excerpt's part: the ledger records a crash's excerpt as it stands)
        if events and self.on_step is not None:
            self.on_step(events, self.state)
        return events + read_crash_whole(self, hit, block, now) \
            if self.shown.now_whole(hit, shown) else events


def mark_timed(hit: Hit, stamp: Stamp | None) -> bool:
    """Note on a hit how the clock timed it, for the matcher's `BarRun` (which resumes once
    the pipeline has): whether it had its own stamp (returned), and whether it is a frame of
    one of several live bars of its description."""
    hit.own_stamp = own = bool(stamp and stamp.own)
    hit.shared_bar = bool(stamp and stamp.shared_bar)
    return own


def read_crash_whole(pipe: LogPipeline, hit: Hit, block: Block, now: float) -> list[Event]:
    """A crash line taken as it was shown, cut, is whole now: the crash quotes it whole, with
    its cause (`crash.read_whole`), and an excerpt begun at it is read again from it, with
    the lines after it (before, both ended at the cut: `RuntimeError: NCCL error: unh`, the
    traceback's rest written 6 s later, before the crash settled, not in the page)."""
    st = pipe.state
    changed = read_whole(pipe.pack, st, hit.rule, hit.text, hit.line_number)
    if st.crash is not None and not st.crash_settled and pipe.excerpt.cut_short is st.crash.excerpt:
        pipe.excerpt.start(st.crash.excerpt, block, hit.block_pos)
        changed = True
    if not changed or st.crash is None:
        return []
    st.crash_changed_at = now
    events: list[Event] = [CrashUpdated(st.epoch, st.crash)]
    if pipe.on_step is not None:
        pipe.on_step(events, st)
    return events


def resume_shown(pipe: LogPipeline, offset: int) -> None:
    """A restarted daemon's reading begins at `offset`: what its checkpoint said was shown
    of the line there holds only if that is where the line begins; an unsettled crash's
    excerpt cut there is read on from it.  The line is shown again if it stays cut (what it
    said not taken again): the excerpt's lines of it too (a server dead mid-line)."""
    if pipe.shown.held is not None and pipe.shown.held[0] != offset:
        pipe.shown = ShownLine()
    pipe.shown.held = None
    crash, keep = pipe.state.crash, pipe.shown.excerpt_from
    if crash is not None and not pipe.state.crash_settled and keep is not None:
        pipe.excerpt.resume(crash.excerpt, keep)


def open_line_due(machine: StartupMachine, st: State, now: float) -> bool:
    """The log's last line never got its newline: read it as a line once the log has
    been quiet PARTIAL_LINE_QUIET (a server killed mid-line; TensorRT-LLM's crash record
    glued to a bar frame: before, the daemon and watch never read it, and the crash was
    never seen, where replay saw it), or sooner when a crash is about to be final (a
    dead server writes nothing more: that line is often the exception message)."""
    if st.phase == CRASHED and not st.crash_settled and machine.crash_is_final(st, now):
        return True
    return st.last_activity is not None and now - st.last_activity >= PARTIAL_LINE_QUIET


def _open_segment(data: bytes) -> int | None:
    """Where the block's last segment begins when it has no end yet (no `\\n` or `\\r`
    after it: held bytes shown, or the final ones); None when it has one."""
    if not data or data[-1] in b"\r\n":
        return None
    return max(data.rfind(b"\n"), data.rfind(b"\r")) + 1


def step_keeping_verdict(pipe: LogPipeline, obs: Observation, now: float) -> list[Event]:
    """The machine's step of `obs`, except where it begins a relaunch over a crash or a stop
    that `pipe.keep_final` says is the verdict (watch's: news, read live): then the crash
    is settled as it stands, the relaunch is not read, and the pipeline reads no further.
    Before, a supervisor that relaunched within the crash's settle window (`until
    python -m sglang.launch_server ...; do :; done >> server.log`, a container's restart)
    wiped the crash before watch's next tick: "phase crashed", then the relaunch's READY and
    exit 0; in a crash loop watch never exited."""
    st = pipe.state
    if pipe.keep_final is None or st.phase not in (CRASHED, STOPPED) or \
            not (obs.rule.restart or st.relaunched) or not pipe.keep_final(st):
        return pipe.machine.step(st, obs, now)
    before = copy.deepcopy(st)
    events = pipe.machine.step(st, obs, now)
    if not any(isinstance(e, StartupBegan) for e in events):
        return events
    pipe.state, pipe.halted = before, True
    return pipe.machine.settle(before)
