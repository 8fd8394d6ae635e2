"""tqdm bars: which bar a frame belongs to and how far it got (`bar_frame`), and the
shortcut of a finished log's reading through a bar's frames (`BarRun`).

A bar redraws itself hundreds of times: a frame per shard, per captured batch size, and
tqdm's `\\r` frames between.  A restart-dense log is mostly bars (`genlog.py --restarts`:
56,000 of the 76,000 segments its first 199 startups fire are frames of a bar whose first
frame fired already), and each frame matched, timed and stepped costs ~40 us of Python.
`replay` and `history FILE` (`Matcher.scan(bar_runs=True)`) skip the frames after a bar's
first while they stay frames of that bar, and match and step only the last of them.

Why that changes nothing they report (replay's summary, human text and timeline; history's
records).  A frame of a `progress:` rule that does nothing else (`runs_through`) moves the
startup to the rule's phase, a rank to it, and sets the bar's counter; the first frame of
the run did the first two and the frames between would repeat them unchanged (the same rule
moves nowhere from its own phase; the same bytes up to the rule's literal name the same
process and rank), and the last frame's counter wins.  The clock places a frame at its bar's
start plus its elapsed time: frames of the same bar (`bar_frame`'s description) whose
elapsed time never goes back keep the bar's start, and the clock ends at the last frame's
time either way; unless the clock follows another live bar of that description (two DP
engines' captures): then each frame goes to the bar it lies nearer the clock with, which the
frames between move, so no run opens at a frame the clock placed so (`Stamp.shared_bar`).
What the frames between would have changed is the bar's smoothed rate, its `Progress` events
and the rule's match count, which neither reports; `watch` and the daemon read every frame
(their rate and ETA need them).  A frame with its own timestamp opens no run (the machine
checks stamps between lines), and a frame with a record glued after it (`lines.glued`) is no
frame of a run: the record is matched and timed apart, its stamp moves the clock, and the
frame part, where it fires alone, opens a run again.  A run ends at the first segment that
is not such a frame, and, where every serving line is read (history), at a serving line
(it is read in its place, at the clock the frames before it set); when the last segment
skipped does not fire the run's rule alone, every segment skipped is matched after all, as
without a run.  tests/test_bars.py compares both readings with the exact pipeline's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence

from ..lines import glued, segment_text

if TYPE_CHECKING:
    from .pack import Rule


class TimedHit(Protocol):
    """What a run needs of a hit (matcher.Hit) once the pipeline has timed it."""

    rule: Rule
    text: str
    wrapped: tuple[str, ...]
    own_stamp: bool | None
    shared_bar: bool


# a tqdm frame: its description (up to the percentage) and its elapsed time [MM:SS< / [H:MM:SS<.
# The process tags before it (`(Worker_TP0 pid=200) `, up to 4) count apart from the
# description's 120 characters: vLLM 0.11 forked (VLLM_WORKER_MULTIPROC_METHOD=fork) tags a
# worker's line with its parents' tags too, `(APIServer pid=100) (EngineCore_DP0 pid=150)
# (Worker_TP0 pid=200) DeepGemm(fp8_gemm_nt) warmup (W=torch.Size([25600, 5120])): ...`,
# 126 characters, and a frame no longer read as one was not placed by its elapsed time.
# Possessive: the tags are never given back to the description (a line that is no frame
# costs what it did, ~8 us, not twice that).
_TQDM = re.compile(r"^\s*((?:\([^()\n]{1,96}\) ){0,4}+.{0,120}?):?\s*\d{1,3}%.{0,200}?"
                   r"\[(?:(\d+):)?(\d{1,3}):(\d\d)<")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_COUNT_TAIL = re.compile(r"(\d+)\s*\[")     # a frame's `N [`, after the `k/` of `k/N [`
# a description as a frame writes it -> its key: a bar's frames repeat it (a shard bar's
# hundreds of frames), and the number substitution cost ~1 us of a skipped frame's ~6 us
_KEYS: dict[str, str] = {}
_KEYS_MAX = 1024


def bar_frame(text: str) -> tuple[str, int] | None:
    """A tqdm frame's bar and elapsed seconds: (its description with every number as `#`,
    elapsed), or None for a line that is not one.  One bar whatever numbers its description
    shows as it goes (SGLang's capture bar: `Capturing batches (bs=64 avail_mem=5.50 GB)`,
    then bs=60, ...).  The clock places frames by it (timestamps.LogClock), and a `BarRun`
    ends where it says another bar began."""
    m = _TQDM.match(text)
    if m is None:
        return None
    desc, hours, minutes, seconds = m.groups()
    key = _KEYS.get(desc)
    if key is None:
        key = _DIGITS.sub("#", desc.strip())
        if len(_KEYS) >= _KEYS_MAX:      # any input: bounded (a new bar's keys come back)
            _KEYS.clear()
        _KEYS[desc] = key
    return key, int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)


def bar_title(text: str) -> str | None:
    """A tqdm frame's description as written, numbers kept (one weight shape's warmup bar is
    not another's), or None for a line that is not one."""
    m = _TQDM.match(text)
    return None if m is None else m.group(1).strip()


def frame_count(text: str) -> tuple[int, int] | None:
    """A tqdm frame's `k/N` (None where it shows none): the first `/` with a digit before
    it and `N [` after it, the digits before it back to the first (what a search for
    `(\\d+)/(\\d+)\\s*\\[` finds, the leftmost; a `find` of `/` first costs a skipped frame
    a third of that search: most of a line is no digit before a `/`)."""
    slash = text.find("/", 1)
    while slash > 0:
        if text[slash - 1].isdecimal():     # `\d`: a Unicode decimal digit, as isdecimal
            tail = _COUNT_TAIL.match(text, slash + 1)
            if tail is not None:
                start = slash - 1
                while start > 0 and text[start - 1].isdecimal():
                    start -= 1
                return int(text[start:slash]), int(tail.group(1))
        slash = text.find("/", slash + 1)
    return None


def runs_through(rule: Rule) -> bool:
    """Whether a rule's frames may be skipped between a run's first and last: a progress
    rule that does nothing else a skipped frame could change (no crash, restart, args,
    address, span beside, provisional phase ...)."""
    return bool(rule.progress) and not (
        rule.crash or rule.hint or rule.restart or rule.stats or rule.stop or rule.chain
        or rule.frame or rule.args or rule.endpoint or rule.beside or rule.closes_as
        or rule.supervisor or rule.provisional)


@dataclass(slots=True)
class BarRun:
    """The frames of one bar after the one that fired, skipped until the run ends."""

    rule: Rule
    bits: int           # the literals the block pass found in the first frame
    head: bytes         # the first frame's bytes up to its first literal: process, rank, bar
    key: str            # `bar_frame`'s description
    elapsed: int        # the latest frame's elapsed seconds
    count: tuple[int, int] | None   # the latest frame's `k/N` (None: it shows none)
    end: int            # where the latest frame ends in the block
    max_line_bytes: int
    skipped: list[tuple[int, int]] = field(default_factory=list)   # segments, in order

    @classmethod
    def opened_by(cls, hits: Sequence[TimedHit], bits: int, data: bytes, start: int, first: int,
                  end: int, max_line_bytes: int) -> BarRun | None:
        """The run the hits of the segment [start, end) open (`first`: where its first
        literal ends), or None:
        one hit, of a rule that `runs_through`, on a line read as written (no wrapper came
        off) without a timestamp of its own, that is a tqdm frame the clock placed on the
        only live bar of its description (`Stamp.shared_bar`)."""
        if len(hits) != 1:
            return None
        hit = hits[0]
        if hit.wrapped or hit.own_stamp is not False or hit.shared_bar \
                or not runs_through(hit.rule):
            return None
        frame = bar_frame(hit.text)
        if frame is None:
            return None
        return cls(hit.rule, bits, data[start:first + 1], frame[0], frame[1],
                   frame_count(hit.text), end, max_line_bytes)

    def takes(self, data: bytes, start: int, end: int, bits: int) -> bool:
        """Skip the segment [start, end) as a frame of this bar, if it is one: the same
        literals, the same bytes up to the first of them, the same bar, not earlier, no
        record glued after it (one would be a hit of its own, with its own stamp: a frame
        `...?it/s][2026-03-17 07:16:46 TP0] Initializing ...Compiling num tokens ...`), its
        count not going back nor to another total (a bar drawn again from 0, or another
        model's: a speculative draft's 1 shard after the target's 17 is not skipped
        between them, as the machine keeps the target's count: `_note_progress`)."""
        if bits != self.bits or not data.startswith(self.head, start):
            return False
        text = segment_text(data[start:end], self.max_line_bytes)
        frame = bar_frame(text)
        if frame is None or frame[0] != self.key or frame[1] < self.elapsed or glued(text):
            return False
        count = frame_count(text)
        if self.count is not None and (count is None or count[1] != self.count[1]
                                       or count[0] < self.count[0]):
            return False
        self.elapsed, self.count, self.end = frame[1], count, end
        self.skipped.append((start, end))
        return True
