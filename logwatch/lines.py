"""Framing: raw byte chunks -> complete segments -> `Line`s.

An inference-server log is untrusted bytes: tqdm redraws a bar with `\\r` (each redraw is its own
line), ANSI colour codes wrap tags, a record of another process can be glued after a tqdm frame
on the same physical line, a line can be half-written when we read it, and nothing bounds a
line's length.  This module turns chunks into *blocks* of complete segments (bytes) and, on
demand, into `Line`s.  Two consumers exist:

* `iter_lines(block)`: the reference per-line view (every segment of the block), used by
  `rules test`, the excerpt collector and the tests;
* the matcher's block scan, which only decodes the segments a rule literal occurs in.  Both use
  `segment_text` and `split_glued` below, so they agree line for line.
"""

from __future__ import annotations

import bisect
import copy
import datetime
import functools
import json
import re
import time
from dataclasses import dataclass
from typing import Iterator

from .shown import TERMINAL_ESCAPES

DEFAULT_MAX_LINE_BYTES = 64 * 1024

ANSI_RE = re.compile(TERMINAL_ESCAPES)
# The end of a tqdm frame: "[elapsed<remaining, rate]" or "[elapsed, rate]" (+ tqdm's padding),
# followed by something that is not a separator: a record glued onto the bar.
_TQDM_TAIL = r"\[\d+:\d\d(?::\d\d)?(?:<(?:\d+:\d\d(?::\d\d)?|\?))?, *[^\[\]]{0,40}?(?:/s|/it|it)\]"
_TQDM_TAIL_RE = re.compile(_TQDM_TAIL + r" *(?=\S)")
# A whole tqdm frame: "... NN% ... [elapsed<remaining, rate]" and nothing after it.
_TQDM_FRAME_RE = re.compile(r"(?<!\d)(?P<percent>\d{1,3})%[^%]*?" + _TQDM_TAIL + r"\s*$")


@dataclass(slots=True)
class Line:
    """One framed line: a `\\r`/`\\n`-delimited segment (or a record split off a tqdm frame).

    `offset` is the byte offset of the segment in the log, `line_number` the 1-based number of
    the physical (`\\n`-delimited) line it belongs to, `received_at` when its bytes arrived.
    """

    text: str
    offset: int
    line_number: int
    received_at: float


@dataclass(slots=True)
class Block:
    """A run of complete segments: `data` ends with `\\n` or `\\r` (or is the final flush).

    `offset` is the log offset of `data[0]`; `line_number` the physical line `data[0]` is on.
    """

    data: bytes
    offset: int
    line_number: int
    received_at: float
    cut_bytes: int = 0       # raw bytes not in `data` (ANSI codes, NULs, capped line ends)
    cuts: tuple[tuple[int, int], ...] = ()  # (position in data, raw bytes cut so far) per cap
    cleaned: bool = False    # ANSI codes / NULs were removed: inner offsets are approximate
    newline_count: int | None = None  # set by whoever counted them first (see `newlines`)
    joins: tuple[int, ...] = ()  # positions in data where a terminal fold's newline was removed

    def raw_offset(self, pos: int) -> int:
        """The log offset of `data[pos]` (exact unless `cleaned`)."""
        extra = 0
        for at, cut in self.cuts:
            if at > pos:
                break
            extra = cut
        return self.offset + pos + extra

    def newlines(self) -> int:
        """`\\n` in the block (counted once: a scan that already counted them records it)."""
        if self.newline_count is None:
            self.newline_count = count_newlines(self.data)
        return self.newline_count

    def joins_in(self, lo: int, hi: int) -> int:
        """Physical lines rejoined (`unfold_rows`) at positions in [lo, hi): they still count
        as lines for numbering."""
        if not self.joins:
            return 0
        return bisect.bisect_left(self.joins, hi) - bisect.bisect_left(self.joins, lo)


def count_newlines(data: bytes) -> int:
    """`data.count(b"\\n")`, about twice as fast on ordinary lines: `bytes.count` of one byte
    compares byte by byte, while removing the newlines finds each with `memchr` (SIMD).  Where
    lines are short (a sample of the start says so) that costs more per line: plain count."""
    if len(data) < 1 << 16 or data.count(b"\n", 0, 1 << 12) > 1 << 7:
        return data.count(b"\n")
    step = 1 << 16
    return len(data) - sum(len(data[i:i + step].replace(b"\n", b""))
                           for i in range(0, len(data), step))


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (vLLM colours its tags even in files)."""
    return ANSI_RE.sub("", text) if "\x1b" in text else text


# Colour codes that lost their ESC byte on the way (a log pasted into an issue or a ticket, a
# web log viewer's export): `[1;36m(APIServer pid=100)[0;0m INFO ...`, vLLM's coloured tag;
# or whose ESC became U+FFFD (vllm-214, a paste in vLLM's issue 21713).  Removed where the
# line holds a reset (`[0m`, `[0;0m`): a line with none is not coloured.
_BARE_RESET_RE = re.compile(r"\[0(?:;0)?m")
_BARE_SGR_RE = re.compile(r"\ufffd?\[\d{1,3}(?:;\d{1,3}){0,4}m")


def strip_bare_sgr(text: str) -> str:
    """Remove ESC-less colour codes from a line that holds a bare reset (the gate, `[0`, is a
    substring test: most lines pay nothing more)."""
    if "[0" in text and _BARE_RESET_RE.search(text):
        return _BARE_SGR_RE.sub("", text)
    return text


def segment_text(raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> str:
    """Decode one raw segment: cap it, UTF-8 with replacement, strip ANSI (and the colour codes
    that lost their ESC), drop NULs, and read a no-break space as a space (a log copied through
    a chat or a wiki page comes back with `\xa0 ` for each run of blanks: before, 10 of 146
    logs so copied read otherwise, one a phase, uvicorn's `INFO:     ` no envelope)."""
    if len(raw) > max_line_bytes:
        raw = raw[:max_line_bytes]
    text = raw.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\xa0" in text:
        text = text.replace("\xa0", " ")
    return strip_bare_sgr(strip_ansi(text))


def split_glued(text: str) -> list[str]:
    """Split records glued after a tqdm frame on the same segment.

    `...| 0/5 [00:00<?, ?it/s][2026-03-17 07:16:46 TP0] Initializing` -> the frame and the record.
    """
    if "]" not in text or not ("it]" in text or "/s]" in text):
        return [text]
    parts: list[str] = []
    start = 0
    for m in _TQDM_TAIL_RE.finditer(text):
        parts.append(text[start : m.end()].rstrip())
        start = m.end()
    if not parts:
        return [text]
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def glued(text: str) -> bool:
    """Whether a record is glued after a tqdm frame in `text` (`split_glued` splits it in
    two or more).  A frame whose only `]` is its last character holds none (a tail is a
    `]` with something after it), the answer of most frames at the cost of a `find`: a bar
    run asks it of every frame it skips (rules/bars.py)."""
    s = text.rstrip()
    first = s.find("]")
    if first < 0 or first == len(s) - 1:
        return False
    return _TQDM_TAIL_RE.search(text) is not None


def progress_frame(text: str) -> str | None:
    """A tqdm progress frame: "moving" (below 100 %), "done" (100 %); None for any other line."""
    if "%" not in text or "]" not in text:
        return None
    m = _TQDM_FRAME_RE.search(text)
    if m is None:
        return None
    return "done" if int(m.group("percent")) >= 100 else "moving"


def segment_bounds(data: bytes, pos: int) -> tuple[int, int]:
    """The [start, end) of the `\\r`/`\\n`-delimited segment containing `pos`.

    Each search is bounded by the physical line, so the cost is the line's length, not the
    block's (a block without any `\\r` must not be scanned to its start for one).
    """
    nl = data.rfind(b"\n", 0, pos)
    cr = data.rfind(b"\r", nl + 1, pos)
    start = max(nl, cr) + 1
    end = data.find(b"\n", pos)
    if end < 0:
        end = len(data)
    cr = data.find(b"\r", pos, end)
    return start, (cr if cr >= 0 else end)


_SEP_RE = re.compile(rb"[\r\n]")


def iter_segments(block: Block) -> Iterator[tuple[int, int, int]]:
    """Yield (start, end, line_number) of every non-empty segment of a block."""
    data = block.data
    line_number = block.line_number
    start = 0
    joins = block.joins
    j = 0
    for m in _SEP_RE.finditer(data):
        end = m.start()
        if end > start:
            while j < len(joins) and joins[j] <= start:  # rows joined into earlier lines
                line_number += 1
                j += 1
            yield start, end, line_number
        if data[end] == 0x0A:
            line_number += 1
        start = end + 1
    if start < len(data):
        while j < len(joins) and joins[j] <= start:
            line_number += 1
            j += 1
        yield start, len(data), line_number


def iter_lines(block: Block, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Line]:
    """Every line of a block, in order (the reference framing)."""
    for start, end, line_number in iter_segments(block):
        text = segment_text(block.data[start:end], max_line_bytes)
        for part in split_glued(text):
            if part.strip():
                yield Line(part, block.raw_offset(start), line_number, block.received_at)


def line_texts(data: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[str]:
    """The texts `iter_lines` gives for `Block(data, ...)` (no joins: e.g. a file's first
    bytes), without a `Line` each.

    When no segment needs capping, `segment_text` is applied to all of `data` at once: the
    separators are ASCII, so UTF-8 decoding (an invalid sequence ends at a separator, which
    is decoded as itself), NUL removal and ANSI codes (no separator in one) never cross one."""
    if len(data) > max_line_bytes and \
            max(map(len, data.replace(b"\r", b"\n").split(b"\n"))) > max_line_bytes:
        return [part for seg in _SEP_RE.split(data) if seg
                for part in split_glued(segment_text(seg, max_line_bytes)) if part.strip()]
    text = segment_text(data, len(data))
    return [part for piece in text.replace("\r", "\n").split("\n")
            for part in (split_glued(piece) if "it]" in piece or "/s]" in piece else (piece,))
            if part.strip()]


class Framer:
    """Turns arbitrary chunks into `Block`s of complete, clean segments.

    * Keeps the unfinished tail (bytes after the last `\\r`/`\\n`) until it completes, but
      releases `\\r`-terminated tqdm frames at once: progress shows before the bar's `\\n`.
    * Caps every segment at `max_line_bytes` raw bytes, counting what it cuts
      (`cut_bytes_total`, `lines_cut_total`); a tail longer than that is capped while it is
      still arriving, so memory stays bounded whatever the input.
    * Then cleans each block: ANSI escape codes and NUL bytes are removed before anything
      looks for rule literals, so a colour code inside a message cannot hide it.
    * Rejoins rows a terminal copy hard-wrapped at a width the stream has shown
      (`unfold_rows`; `unfold=False` turns that off): a line of exactly that width waits for
      the next line's first bytes before it is released.
    The result does not depend on how the input was split into chunks.  `consumed_offset` is
    exact in raw log bytes, and so are line offsets (`Block.raw_offset`) unless the block
    had ANSI codes or NULs removed (`Block.cleaned`).
    """

    def __init__(self, offset: int = 0, line_number: int = 1,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, unfold: bool = True,
                 records: tuple[RecordForm, ...] = ()) -> None:
        self.max_line_bytes = max_line_bytes
        self.records = records    # how JSON logging records read (`json_records_to_text`)
        self._marks = record_marks(records)     # what such a record holds, at least
        self._tail = b""
        self._tail_raw = 0        # raw log bytes the tail stands for (cleaning shrinks it)
        self._tail_offset = offset
        self._discarding = False  # inside an over-long line, dropping until its separator
        self._line_number = line_number
        self._prev: Block | None = None  # its newlines are counted lazily, once
        self._folds = RowFolds(off=not unfold)
        self._cri: bool | None = None   # the kubelet's record format (`join_partial_records`)
        self._json = JsonRecords()  # Docker's / journald's JSON records (`records_to_cri`)
        self._held = b""          # a complete line of the fold width, waiting for the next one
        self.cut_bytes_total = 0
        self.lines_cut_total = 0
        # the input so far ends inside a physical line (its last byte is not `\n`): that line
        # counts as one at the end of the file, though a `\r` released all of it already
        self.mid_line = False

    @property
    def pending(self) -> bytes:
        """The held bytes: a line waiting to show whether it is a terminal fold, then the
        unfinished segment."""
        return self._held + self._tail

    @property
    def line_number(self) -> int:
        """The physical line number of the next byte to be released."""
        self.settle()
        return self._line_number

    def settle(self) -> None:
        """Take the last block's line count now and let go of the block (the framer keeps it
        until its lines are counted, once: usually by the scan, see `Block.newlines`)."""
        if self._prev is not None:
            self._line_number = (self._prev.line_number + self._prev.newlines()
                                 + len(self._prev.joins))
            self._prev = None

    @property
    def consumed_offset(self) -> int:
        """Log offset up to which bytes have been released in blocks."""
        return self._tail_offset

    def feed(self, chunk: bytes, received_at: float) -> Block | None:
        """Add bytes; return the block of segments they completed (None if none)."""
        if not chunk:
            return None
        self.mid_line = chunk[-1] != 0x0A
        dropped = 0
        if self._discarding:
            sep = _first_sep(chunk)
            if sep < 0:
                self._tail_raw += len(chunk)
                self._count_cut(len(chunk))
                return None
            dropped = sep
            self._count_cut(sep)
            self._discarding = False
        nl = chunk.rfind(b"\n")
        last = max(nl, chunk.rfind(b"\r", nl + 1))   # (a `\r` before the last `\n` is not last)
        if last < dropped:
            self._hold(chunk[dropped:] if dropped else chunk)
            self._tail_raw += dropped
            return None
        whole = not dropped and last + 1 == len(chunk)
        raw_len = len(self._held) + self._tail_raw + last + 1
        held_cut = self._tail_raw + dropped - len(self._tail)  # bytes of the tail's line dropped
        head = self._held + self._tail
        self._held = b""
        if head:     # one copy of the chunk's lines, not a slice and then a concatenation
            data = b"".join((head, chunk if whole else memoryview(chunk)[dropped : last + 1]))
        else:
            data = chunk if whole else chunk[dropped : last + 1]
        block = self._block(data, raw_len, received_at,
                            ((len(head), held_cut),) if held_cut else ())
        self._tail, self._tail_raw = b"", 0
        if last + 1 < len(chunk):
            self._hold(chunk[last + 1 :])
        return block

    def flush(self, received_at: float) -> Block | None:
        """End of input: release the unfinished last line as a final block."""
        if not self._tail and not self._tail_raw and not self._held:
            return None
        block = self._block(self._held + self._tail, len(self._held) + self._tail_raw,
                            received_at, final=True)
        self._held, self._tail, self._tail_raw = b"", b"", 0
        self._discarding = False
        return block

    def _block(self, data: bytes, raw_len: int, received_at: float,
               held: tuple[tuple[int, int], ...] = (), final: bool = False) -> Block | None:
        capped, cut, lines, cuts = cap_segments(data, self.max_line_bytes)
        if cut:
            self._count_cut(cut)
            self.lines_cut_total += lines
        if held:  # the held tail's dropped bytes come before every cut made here
            at, extra = held[0]
            cuts = ((at, extra),) + tuple((p, c + extra) for p, c in cuts)
        clean = clean_bytes(capped, self._marks)
        cleaned = clean is not capped
        joins: tuple[int, ...] = ()
        # (inner offsets approximate)
        if (rec := self._json.read(clean, self._marks, self.records)) is not None:
            clean, cleaned, self._cri, self._folds.off = rec, True, True, True
        if self._cri is None and clean:
            # a container's log file as the kubelet writes it: records that may be partial
            self._cri = CRI_RECORD.match(clean) is not None
            if self._cri:
                self._folds.off = True      # no terminal copy: no rows to rejoin
        if self._cri:
            capped_at = tuple(p for p, _ in cuts)
            joined, removed, keep = join_partial_records(clean, final, self.max_line_bytes,
                                                         capped_at)
            if keep < len(clean):
                held_len = self._hold_back(data, clean, keep, 2 * self.max_line_bytes)
                if held_len is None:     # longer than its records may be: released as is
                    joined, removed, keep = join_partial_records(clean, True,
                                                                 self.max_line_bytes, capped_at)
                else:
                    raw_len -= held_len
            if removed:
                cuts = _merge_removals(cuts, removed, cleaned)
                joins = _removal_positions(removed)
            clean = joined
            if keep == 0 and raw_len == 0:  # all of it waits for the next record
                return None
        elif not self._folds.off:
            unfolded, joins, keep = unfold_rows(clean, self._folds, final, self.max_line_bytes)
            if keep < len(clean):  # its last lines wait for the next (`\n` survives cleaning)
                held_len = self._hold_back(data, clean, keep)
                if held_len is None:  # (ANSI codes by the kilobyte in a row: released as is)
                    unfolded, joins, keep = unfold_rows(clean, RowFolds(off=True), True)
                else:
                    raw_len -= held_len
            if joins:    # each fold's newline, one byte (a CRLF fold's too)
                cuts = _merge_removals(cuts, tuple((j + k, 1) for k, j in enumerate(joins)),
                                       cleaned)
            clean = unfolded
            if keep == 0 and raw_len == 0:  # all of it waits for the next line
                return None
        if holds_mark(clean, self._marks):  # logging records as JSON, parts joined
            decoded, joins = json_records_to_text(clean, self.records, joins)
            clean, cleaned = decoded, cleaned or decoded is not clean
        block = Block(clean, self._tail_offset, self.line_number, received_at,
                      cut_bytes=raw_len - len(clean), cuts=cuts, cleaned=cleaned, joins=joins)
        self._prev = block
        self._tail_offset += raw_len
        return block

    def _hold_back(self, data: bytes, clean: bytes, keep: int,
                   limit: int | None = None) -> int | None:
        """Hold the lines of `data` that are `clean[keep:]` (cleaning keeps every `\n`) until
        the next chunk shows whether they continue; their raw length, or None (nothing held)
        when they are longer than `limit` (a line's bytes: it would be capped again)."""
        start = len(data)
        for _ in range(clean.count(b"\n", keep)):
            start = data.rfind(b"\n", 0, start - 1) + 1
        if len(data) - start > (self.max_line_bytes if limit is None else limit):
            return None
        self._held = data[start:]
        return len(data) - start

    def _hold(self, data: bytes) -> None:
        self._tail_raw += len(data)
        tail = self._tail + data
        if len(tail) > self.max_line_bytes:
            self._count_cut(len(tail) - self.max_line_bytes)
            self.lines_cut_total += 1
            tail = tail[: self.max_line_bytes]
            self._discarding = True
        self._tail = tail

    def _count_cut(self, n: int) -> None:
        self.cut_bytes_total += n


def peek(framer: Framer, received_at: float) -> tuple[Block | None, int, int]:
    """The block `framer.flush` would release now, its bytes still held: the next bytes
    continue them, and the block that completes the line holds all of it again (before,
    the unfinished line was released for good: a line cut mid-write and finished after a
    quiet was read as two, neither matching its rule).  With the offset and line number
    after it.  The caller tells the repeat from the news (`pipeline.ShownLine`).  Costs a
    copy of the framer's small state and of the held bytes (at most `max_line_bytes`)."""
    framer.settle()
    trial = copy.copy(framer)
    # (what a final block changes: whether the stream folds rows, is JSON records)
    trial._folds, trial._json = copy.deepcopy(framer._folds), copy.deepcopy(framer._json)
    block = trial.flush(received_at)
    return block, trial.consumed_offset, trial.line_number


_ANSI_B = re.compile(TERMINAL_ESCAPES.encode())

# Python logging records written as JSON, one a line (python-json-logger): vLLM 0.34's
# `--logging-config.formatter json` (vllm/logger.py, `JSON_FORMAT`: asctime, levelname, name,
# processName, process, message; `exc_info` after a logged exception; uvicorn's lines through
# the same formatter: vllm/logging_utils/uvicorn_logging.py).  json.dumps writes `": "`.
# Records of another shape (NVIDIA Dynamo's jsonl: `time`, `level`, `target`, `message`) name
# their keys in their pack's form (`RecordForm.keys`); each shape's level key is its mark.
JSON_RECORD_MARK = b'"levelname":'


def clean_bytes(data: bytes, marks: tuple[bytes, ...] = (JSON_RECORD_MARK,)) -> bytes:
    """Remove NUL bytes and ANSI escape sequences (C speed; a no-op on clean input), and the
    padding a terminal copy puts where it folded a long line (`unfold_padding`; not in a JSON
    logging record, a segment holding one of `marks`: `record_marks`).

    Repeated until nothing changes, so cleaning is idempotent and the same whether a line
    arrives whole or in pieces (removing one code can join the bytes of another, and removing
    padding can join an ESC to the byte that makes it a code: `\x1b` + 25 spaces + `^`).
    """
    if b"\x00" in data:
        data = data.replace(b"\x00", b"")
    while True:
        while b"\x1b" in data:
            cleaned = _ANSI_B.sub(b"", data)
            if cleaned == data:
                break
            data = cleaned
        if not has_pad_probe(data):
            return data
        unfolded = unfold_padding(data, marks)
        if unfolded is data or b"\x1b" not in unfolded:     # (unchanged: the same object)
            return unfolded
        data = unfolded


FOLD_PAD_MIN = 20            # spaces a terminal pads a folded row with, at least
FOLD_WIDTH_MIN = 40          # the narrowest terminal row taken for a fold
_PAD_PROBE = b" " * FOLD_PAD_MIN
# a run of padding between two characters of text (not before a bar's closing `|`, nor before
# a traceback's carets that end the line: their indent points them at a column): the
# definition; `pad_runs` finds the same runs faster
PAD_RUN = re.compile(rb"(?<=[^ \r\n]) {%d,}(?=[^ \r\n|])(?![\^~]+ *(?:[\r\n]|\Z))"
                     % FOLD_PAD_MIN)
# Python's caret markers under a traceback's source line (`^^^^`, 3.11's `~~~^^^~~`) to the
# line's end: the spaces before them are the line's own indent, never a terminal's padding
_CARET_TAIL = re.compile(rb"[\^~]+ *(?:[\r\n]|\Z)")
_NOT_SPACE = re.compile(rb"[^ ]")
_PAD_SCAN_MIN = 1 << 16      # blocks this large are probed by Hyperscan where it is installed
_pad_finder: object = None   # the Hyperscan probe: None = not tried yet, False = unavailable


def has_pad_probe(data: bytes) -> bool:
    """Whether `data` holds FOLD_PAD_MIN spaces in a row (what `unfold_padding` needs).

    `bytes.__contains__` advances one byte at a time after each window that ends in a space
    (the needle is one repeated byte), ~0.35 ms a 2 MB block of log; Hyperscan's literal
    matcher takes about half of that.  A replay probes every 2 MB block."""
    global _pad_finder
    if len(data) < _PAD_SCAN_MIN:
        return _PAD_PROBE in data
    if _pad_finder is None:
        _pad_finder = _hyperscan_probe()
    if _pad_finder is False:
        return _PAD_PROBE in data
    return bool(_pad_finder.positions(data))  # type: ignore[attr-defined]


def _hyperscan_probe(literals: tuple[bytes, ...] = (_PAD_PROBE,)) -> object:
    """The literal finder of the rules' pass (rules/literalscan.py), first match only
    (imported on first use: framing alone needs neither Hyperscan nor RE2)."""
    from .rules.literalscan import literal_finder
    try:
        return literal_finder([(x.decode(), False) for x in literals], "hyperscan",
                              first_only=True)
    except Exception:   # noqa: BLE001  (no wheel for this machine, or it failed to load)
        return False


_mark_finders: dict[tuple[bytes, ...], object] = {}   # record_marks -> their Hyperscan probe


def holds_mark(data: bytes, marks: tuple[bytes, ...]) -> bool:
    """Whether `data` holds one of `marks` (`record_marks`: what a JSON logging record of a
    pack's shapes holds).  A replay asks it of every 2 MB block: `bytes.__contains__` is a
    pass over the block per mark (python-json-logger's and Dynamo's level keys, 0.07 s per
    100 MB of log), Hyperscan's literal matcher one pass for all of them (0.006 s)."""
    if len(data) < _PAD_SCAN_MIN:
        return any(m in data for m in marks)
    finder = _mark_finders.get(marks)
    if finder is None:
        finder = _mark_finders[marks] = _hyperscan_probe(marks)
    if finder is False:
        return any(m in data for m in marks)
    return bool(finder.positions(data))  # type: ignore[attr-defined]


def pad_runs(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every `PAD_RUN` match, in order: each run of FOLD_PAD_MIN spaces is
    found by `bytes.find` and checked at its two ends, instead of the regex trying every
    position of the block (20 ms a 2 MB block that holds one traceback's indented line)."""
    runs: list[tuple[int, int]] = []
    n = len(data)
    i = data.find(_PAD_PROBE)
    while i >= 0:
        m = _NOT_SPACE.search(data, i + FOLD_PAD_MIN)
        end = m.start() if m else n
        # `find` from a non-space (or from 0) returns a run's first space
        if i > 0 and data[i - 1] not in b" \r\n" and end < n and data[end] not in b" \r\n|" \
                and _CARET_TAIL.match(data, end) is None:
            runs.append((i, end))
        if end >= n:
            break
        i = data.find(_PAD_PROBE, end)
    return runs


def unfold_padding(data: bytes, marks: tuple[bytes, ...] = (JSON_RECORD_MARK,)) -> bytes:
    """Rejoin lines a terminal copy hard-wrapped by padding each row to the terminal's width
    (`... {'embed', 'classify', 'rew                           ard', ...`: 114 characters of
    text, 27 spaces, the rest): the padding goes, so words and markers are whole again.

    Unambiguous cases only: a run of at least FOLD_PAD_MIN spaces between two non-blank
    characters (a tqdm bar's run before its closing `|` is not one, nor the indent of a
    traceback's carets after a log prefix: `[core.py:708]` then 27 spaces and `^^^^`, whose
    carets it pointed at the wrong column: 6 of the fixtures' 92 caret lines), and in a segment with
    several runs, every run ends at a multiple of the first run's end column (the row width).
    Per segment, so the result does not depend on how the input was split.  A segment that
    holds one of `marks` is a JSON logging record's line (`record_marks`): left as it is.
    """
    out: list[bytes] = []
    copied = 0
    runs = pad_runs(data)
    i = 0
    while i < len(runs):
        seg_start = max(data.rfind(b"\n", 0, runs[i][0]), data.rfind(b"\r", 0, runs[i][0])) + 1
        seg_end = _segment_end(data, runs[i][0])
        j = i
        while j < len(runs) and runs[j][0] < seg_end:
            j += 1
        group = runs[i:j]
        i = j
        seg = data[seg_start:seg_end]
        if any(m in seg for m in marks):  # a program wrote it, no terminal: its spaces are its
            continue                    # message's (a traceback's carets after `\n`)
        ends = [len(seg[:e - seg_start].decode("utf-8", "replace")) for _, e in group]
        width = ends[0]
        if width < FOLD_WIDTH_MIN or any(e != width * (k + 1) for k, e in enumerate(ends)):
            continue
        for s, e in group:
            out.append(data[copied:s])
            copied = e
    if not out:
        return data
    out.append(data[copied:])
    return b"".join(out)


def _segment_end(data: bytes, pos: int) -> int:
    ends = [x for x in (data.find(b"\n", pos), data.find(b"\r", pos)) if x >= 0]
    return min(ends) if ends else len(data)


def cap_segments(data: bytes, cap: int) -> tuple[bytes, int, int, tuple[tuple[int, int], ...]]:
    """Truncate every `\\r`/`\\n` segment longer than `cap`.

    Returns (data, bytes cut, segments cut, cuts) where `cuts` lists, per truncation, the
    position in the new data where bytes went missing and the total cut up to there.

    Probes every cap/4 bytes for a window of cap/2 bytes without a separator: any segment
    longer than `cap` contains such a window, and ordinary logs never do, so the cost is a
    few hundred bounded `find`s per megabyte instead of a walk over every line.
    """
    n = len(data)
    if n <= cap:
        return data, 0, 0, ()
    step = max(cap // 4, 1)
    pieces: list[bytes] = []
    marks: list[tuple[int, int]] = []
    copied = out_len = 0
    cut = lines = 0
    p = step
    while p < n:
        lo, hi = p - step, min(p + step, n)
        if data.find(b"\n", lo, hi) >= 0 or data.find(b"\r", lo, hi) >= 0:
            p += step
            continue
        s, e = segment_bounds(data, p)
        if e - s > cap:
            pieces.append(data[copied : s + cap])
            out_len += s + cap - copied
            copied = e
            cut += e - s - cap
            lines += 1
            marks.append((out_len, cut))
        p = max(e + 1, p + step)
    if not lines:
        return data, 0, 0, ()
    pieces.append(data[copied:])
    return b"".join(pieces), cut, lines, tuple(marks)


def _first_sep(data: bytes) -> int:
    n = data.find(b"\n")
    r = data.find(b"\r")
    if n < 0:
        return r
    if r < 0:
        return n
    return min(n, r)


# -- terminal hard-wraps: a row of exactly N characters, then its continuation ----------------

FOLD_LEARN_LINES = 2000  # lines a stream has to show its row width in; then folds are off
FOLD_ROWS_TO_LEARN = 2   # fold rows at the stream's longest width that make the width known
FOLD_ROW_MAX_BYTES = 4096  # a longer line is no terminal row (and is never decoded here)
# The start of a record in the engines' formats (markers.md): a timestamp or `[digit`, a
# process tag `(Name pid=` / `(Name rank=`, a level word, a traceback head or frame, journald
# `Mon DD HH:MM`, a compose `service  | ` prefix, NCCL's `host:pid:tid [gpu]`.  A row of width N followed by one of these
# is a line that happened to be N long, not a fold.
_RECORD_HEAD = re.compile(
    rb"""\s?(?:
        \[?\d{2,4}[-/:.]\d\d
      | \[\d
      | \(\w[\w.:-]*\s+(?:pid|rank|rank_\w+)=
      | (?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b
      | [\w.-]+:\d+:\d+\ \[\d+\]
      | (?:[A-Za-z.]|[\xd0\xd1][\x80-\xbf]){3,5}\ [\s\d]\d\ \d\d:\d\d
      | [\w.-]+\s*\|\ 
    )""", re.X)

# Lines that start a traceback: a record while the width is unknown, often a fold's rest after.
_CODE_HEAD = re.compile(rb"\s*(?:Traceback \(most|File \")")


@dataclass(slots=True)
class RowFolds:
    """What a stream has shown of terminal hard-wrapping so far (a copy from a terminal of
    width N cuts every longer line into rows of exactly N characters).

    The width is learned, not guessed: FOLD_ROWS_TO_LEARN rows of the stream's longest width
    (>= FOLD_WIDTH_MIN), each followed by a line that does not start a record, and no longer
    line before them.  A line longer than the width later turns folding off for good (not a
    terminal copy), and so does a stream that shows no width in its first FOLD_LEARN_LINES.
    A row is joined only when the width was known before it, so the result depends on the
    lines so far and the next line's start, never on how the input was split into chunks.
    """

    width: int | None = None
    longest: int = 0
    rows: int = 0              # fold rows seen at `longest`
    lines: int = 0
    off: bool = False
    open_line: bool = False    # the last block ended inside a line (at a `\r`)
    pending: tuple[int, bytes] | None = None  # the previous block's last line (width, start),
                                              # its follower unknown


def _row_width(line: bytes) -> int | None:
    """A line's width in characters; None for a line that cannot be a fold row (a `\\r`
    inside, a tqdm frame, blank)."""
    if b"\r" in line or not line.strip():
        return None
    text = line.decode("utf-8", "replace")
    if progress_frame(text) is not None:
        return None
    return len(text)


def _continues(row: bytes, follower: bytes, learned: bool) -> bool:
    """Whether `follower` reads as the rest of `row` (not a record of its own).

    Never when it starts a record in the engines' formats (`_RECORD_HEAD`) or the way `row`
    starts (the same first 8 bytes: a repeated prefix).  While the width is being learned,
    an indented line or a traceback head is not taken as a continuation either; once the
    stream is known to be a terminal copy, they are (a fold often falls right before one).
    """
    if not follower.strip():
        return False
    if len(row) >= 8 and follower[:8] == row[:8]:
        return False
    if _RECORD_HEAD.match(follower):
        return False
    if not learned and (follower[:2].isspace() or follower[:1] == b"\t"
                        or _CODE_HEAD.match(follower)):
        return False
    return progress_frame(follower.decode("utf-8", "replace")) is None


def _learn(st: RowFolds, width: int | None, w: int, follows: bool) -> None:
    st.lines += 1
    if w > st.longest:
        st.longest, st.rows = w, 0
    if width is not None and width == st.longest and width >= FOLD_WIDTH_MIN and follows:
        st.rows += 1
        if st.rows >= FOLD_ROWS_TO_LEARN:
            st.width = width
            return
    if st.lines >= FOLD_LEARN_LINES:
        st.off = True


def unfold_rows(data: bytes, st: RowFolds, final: bool,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[bytes, tuple[int, ...], int]:
    """Rejoin rows a terminal hard-wrapped at the stream's learned width (see `RowFolds`).

    `data` is a block of complete segments.  Returns (data, joins, keep): the first `keep`
    bytes of the input with fold newlines removed, and the positions in the result where they
    were.  When the width is known and the last line is exactly that wide, that line (with the
    rows joined into it) is held back, keep < len(data), until the next line shows whether it
    continues.  Lines with a `\r` (tqdm redraws, CRLF) are never rows: a terminal copy has
    none.  A stream that shows no width costs one check per block after its first
    FOLD_LEARN_LINES lines.
    """
    if st.off or not data:
        return data, (), len(data)
    cut_at: list[int] = []              # position of each fold's line break
    longest_row = min(FOLD_ROW_MAX_BYTES, max_line_bytes // 4 - 1)  # (a capped line is none)
    keep = n = len(data)
    pos = 0
    chain = -1                          # where the line the last row was joined into starts
    open_line = st.open_line            # the first line began in the previous block
    st.open_line = not final and data[-1:] == b"\r"
    if st.pending is not None:  # the previous block's last line: its follower starts here
        _settle_pending(st, st.pending, data)
    while pos < n and not st.off:
        nl = data.find(b"\n", pos)
        if nl < 0:  # a `\r`-ended segment (or the flushed tail): a line still open
            break
        if nl - pos < (st.width if st.width is not None else st.longest):
            # fewer bytes, so fewer characters, than the width learned (or the longest row
            # so far): no row, nothing to decode (most lines of a log, while it is learned)
            if st.width is None:   # `_learn(st, None, 0, False)`, inline: most lines
                st.lines += 1
                if st.lines >= FOLD_LEARN_LINES:
                    st.off = True
            open_line = False
            chain = -1
            pos = nl + 1
            continue
        line, width = _row_at(data, pos, nl, open_line, longest_row)
        open_line = False
        nxt = nl + 1
        if nxt >= n and not final:  # the follower is not here yet
            if st.width is not None and width == st.width:
                keep = chain if chain >= 0 else pos
                cut_at = [c for c in cut_at if c < keep]
            elif st.width is None:
                _learn_last(st, width, line)
            break
        if _is_fold(st, line, width, data, nxt):
            cut_at.append(nl)
            if chain < 0:
                chain = pos
        else:
            chain = -1
        pos = nxt
    if not cut_at:
        return (data if keep == n else data[:keep]), (), keep
    return _cut(data, cut_at, keep)


def _is_fold(st: RowFolds, line: bytes, width: int | None, data: bytes, nxt: int) -> bool:
    """Whether the newline after `line` (its follower at `nxt`) is a fold to remove; while the
    width is being learned, the line is learned from instead (and it is not)."""
    if st.width is None:
        # whether the next line continues this one counts only for a row at the longest
        # width (a tie or a new longest): asked only then
        _learn(st, width, 0 if width is None else width,
               width is not None and line != b"" and width >= st.longest
               and width >= FOLD_WIDTH_MIN
               and _continues(line, _first_segment(data, nxt), False))
        return False
    if width is not None and width > st.width:
        st.off = True
        return False
    return width == st.width and _continues(line, _first_segment(data, nxt), True)


def _settle_pending(st: RowFolds, pending: tuple[int, bytes], data: bytes) -> None:
    """The previous block's last line was a row candidate whose follower starts `data`:
    learn from it now."""
    width, head = pending
    st.pending = None
    _learn(st, width, width, _continues(head, _first_segment(data, 0), False))


def _row_at(data: bytes, pos: int, nl: int, open_line: bool,
            longest_row: int) -> tuple[bytes, int | None]:
    """The line data[pos:nl] and its width as a row (None: it cannot be one).  A line longer
    than any terminal row is neither sliced nor decoded (b"" stands for it)."""
    if nl - pos > longest_row:
        return b"", None if open_line or data.find(b"\r", pos, nl) >= 0 else FOLD_ROW_MAX_BYTES
    line = data[pos:nl]
    return line, None if open_line else _row_width(line)


def _learn_last(st: RowFolds, width: int | None, line: bytes) -> None:
    """The block's last line while the width is being learned: its follower is not here yet,
    so a row candidate waits in `st.pending` for the next block."""
    if width is None:  # not a row: it only counts as a line
        _learn(st, None, 0, False)
    elif line:
        st.pending = (width, line[:8])
    else:
        _learn(st, width, width, False)


def _cut(data: bytes, cut_at: list[int], keep: int) -> tuple[bytes, tuple[int, ...], int]:
    """data[:keep] without the newlines at `cut_at`, and where in the result they were."""
    out: list[bytes] = []
    joins: list[int] = []
    copied = out_len = 0
    for at in cut_at:
        out.append(data[copied:at])
        out_len += at - copied
        joins.append(out_len)
        copied = at + 1
    out.append(data[copied:keep])
    return b"".join(out), tuple(joins), keep


def _first_segment(data: bytes, pos: int) -> bytes:
    """The line at `pos` up to its first `\r` or `\n`: all of it a block always holds."""
    limit = min(len(data), pos + FOLD_ROW_MAX_BYTES)
    end = data.find(b"\n", pos, limit)
    if end < 0:
        end = limit
    cr = data.find(b"\r", pos, end)
    return data[pos:cr if cr >= 0 else end]


# A record of a container's log file as the kubelet (CRI) writes it: `TIME STREAM TAG `, the
# tag P for a part of a line longer than the runtime's record (containerd: 16 KiB), F for a
# line's last (or only) part.  rules/base.yaml strips the prefix of each record.
CRI_RECORD = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) "
                        rb"(stdout|stderr) ([PF]) ")
_CRI_PARTIAL = re.compile(rb"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?"
                          rb"(?:Z|[+-]\d\d:?\d\d) (stdout|stderr) P ")


_DOCKER_HEAD = re.compile(rb'\{(?:"log":"|"stream":"(?:stdout|stderr)",)')
# (systemd >= 243 writes compact JSON; older ones `{ "__CURSOR" : "s=...", ... }`; `-o
# json-seq` puts RS (RFC 7464) before each entry, `-o json-sse` `data: ` and a blank line after)
_JOURNAL_HEAD = re.compile(rb'(?:\x1e|data: )?\{ ?"__CURSOR" ?: ?"')


RECORD_LOOK = 8     # lines a stream's first JSON record may come after (a notice before it)


def is_json_log_record(data: bytes, forms: tuple[RecordForm, ...] = ()) -> bool:
    """Is one of the first `RECORD_LOOK` lines of `data` (a command's notice may come first:
    ssh's `Warning: Permanently added ...`, journalctl's `Hint: You are currently not seeing
    messages from other users ...`, on the stderr read with its output) a record of Docker's
    json-file log driver
    (`/var/lib/docker/containers/ID/ID-json.log`): `{"log":"...\\n","stream":"stderr",
    "time":"2026-12-05T10:00:00.123456789Z"}` (moby `jsonlog.JSONLogs.MarshalJSONBuf`:
    `log`, `stream`, `attrs`, `time`, in that order; `log` left out when empty), or of
    `journalctl -o json` (`{"__CURSOR":"...","__REALTIME_TIMESTAMP":"1755515704123456",
    ...,"MESSAGE":"..."}`: a systemd unit's output read as `cmd:journalctl -u vllm -f -o
    json`)?  Or of a form of `forms` that `wraps` (stern's and logcli's JSON lines,
    rules/base.yaml).  Before, only the first line was looked at: one notice before the
    entries, and every line was read as its JSON (35 of the 54 shared logs otherwise)."""
    wrappers = tuple(f for f in forms if f.wraps)
    for line in data.split(b"\n", RECORD_LOOK)[:RECORD_LOOK]:
        if _DOCKER_HEAD.match(line) is not None and _docker_fields(line) is not None:
            return True
        if _JOURNAL_HEAD.match(line) is not None and _journal_fields(line) is not None:
            return True
        if wrappers and line.startswith(b'{"') and wrapped_line(line, wrappers) is not None:
            return True
    return False


def json_object(line: bytes) -> dict | None:
    """The JSON object a line holds; None when it holds none (untrusted: not JSON, nested
    beyond the parser's depth, another JSON value)."""
    try:
        d = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


def _docker_fields(line: bytes) -> tuple[str, str, str] | None:
    """(time, stream, log) of one json-file record; None when the line is not one."""
    d = json_object(line)
    if d is None:
        return None
    t, stream, log = d.get("time"), d.get("stream"), d.get("log", "")
    if not isinstance(t, str) or stream not in ("stdout", "stderr") or not isinstance(log, str):
        return None
    return t, stream, log


def _journal_fields(line: bytes) -> tuple[str, str, str] | None:
    """(time, stream, log) of one `journalctl -o json` entry; None when the line is not one.
    MESSAGE is a string, an array of bytes (not UTF-8: journalctl's form for it) or null
    (a field over 4 KiB without `--all`: the line is there, its text is not)."""
    d = json_object(line[line.index(b"{"):])
    if d is None:
        return None
    stamp, msg = d.get("__REALTIME_TIMESTAMP"), d.get("MESSAGE")
    if not isinstance(stamp, str) or not stamp.isdigit() or len(stamp) > 19:
        return None
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        msg = bytes(msg).decode("utf-8", "replace")
    elif msg is None:
        msg = ""
    elif not isinstance(msg, str):
        return None
    us = int(stamp)
    t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(us // 1_000_000)) + \
        f".{us % 1_000_000:06d}Z"
    return t, "stdout", msg + "\n"


# The names `kubectl logs --prefix`'s `[pod/P/C] ` holds (Kubernetes' DNS-1123 names), and
# the stamp its `--timestamps` writes: what a wrapper's record may put in its envelope
WRAPPER_FIELDS = {"processName": re.compile(r"[a-z0-9][a-z0-9.-]{0,252}"),
                  "container": re.compile(r"[a-z0-9][a-z0-9-]{0,62}"),
                  "asctime": re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?"
                                        r"(?:Z|[+-]\d\d:\d\d)")}


def wrapped_line(line: bytes, forms: tuple[RecordForm, ...]) -> bytes | None:
    """A wrapper's JSON line (`RecordForm.wraps`: stern's `-o json`, logcli's `-o jsonl`) as
    the text its form's envelope writes before the line it holds, for the first form whose
    every key path the record holds (`_path`), each value a string of its field's shape
    (`WRAPPER_FIELDS`), the message any JSON value; None when no form reads it (untrusted:
    fields of other types, nesting past the parser's depth, a cut line).  A message that is
    no string is the wrapped line itself, JSON (stern's `extjson`): its text as written."""
    d = json_object(line)
    if d is None:
        return None
    for form in forms:
        got: dict[str, str] = {}
        for field, key in form.keys:
            value = _path(d, key)
            if value is _MISSING:
                break
            if field == "message":
                got[field] = value if isinstance(value, str) else _raw_value(line, key, value)
            elif not isinstance(value, str) or not WRAPPER_FIELDS[field].fullmatch(value):
                break
            else:
                got[field] = value
        else:
            head = []
            for piece in form.envelope:
                try:
                    head.append(piece % got)
                except (KeyError, TypeError, ValueError):
                    continue
            text = got["message"].replace("\n", " ")   # one record, one line (as Docker's)
            return ("".join(head) + text).encode("utf-8", "replace")
    return None


_MISSING = object()


def _path(d: dict, key: str) -> object:
    """The value at a key path of `d`, `_MISSING` where it has none.  A path's parts are
    parted by `.`: logcli's `-o jsonl` holds the stream's labels as one object (`labels`:
    Loki's label set, its names `[A-Za-z_]\\w*`), the pod one of them (`labels.pod`)."""
    value: object = d
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _raw_value(line: bytes, key: str, value: object) -> str:
    """The text of a record's last value, after its key's first mention (stern's `extjson`
    ends with its message, written as the line was), or the value as JSON where the text
    is not found so."""
    at = line.find(b'"%s":' % key.rsplit(".", 1)[-1].encode())
    if at >= 0:
        raw = line[at + len(key.rsplit(".", 1)[-1]) + 3:].strip()
        if raw.endswith(b"}"):
            raw = raw[:-1].rstrip()
            try:
                if json.loads(raw) == value:
                    return raw.decode("utf-8", "replace")
            except (ValueError, RecursionError):
                pass
    try:
        return json.dumps(value)
    except (ValueError, RecursionError):     # (untrusted: as deep as the parser allowed)
        return ""


@dataclass
class JsonRecords:
    """Whether a stream is Docker's or journald's JSON records, decided by its first lines:
    undecided while a command's notices come first (up to `RECORD_LOOK` lines), then for
    good.  Before, by its first line alone: one notice, and every entry read as its JSON."""

    on: bool | None = None
    looked: int = 0               # lines seen while undecided

    def read(self, clean: bytes, marks: tuple[bytes, ...] = (JSON_RECORD_MARK,),
             forms: tuple[RecordForm, ...] = ()) -> bytes | None:
        """`clean` as the kubelet's (CRI) records, or None where the stream is not records
        (a notice before them is left as it is).  Cleaned again (`clean_bytes`, `marks` its
        JSON logging records): the JSON held a line's colour codes as `\\u001b[...m`, which
        only undoing it makes escapes (before, a coloured line kept them: a Dynamo worker's
        stamp behind its colour code was not read, nor its download's phase).  `forms`:
        the wrappers' among them are read so (`wrapped_line`)."""
        if self.on is None and clean:
            self.looked += clean.count(b"\n")
            if is_json_log_record(clean, forms):
                self.on = True
            elif self.looked >= RECORD_LOOK:
                self.on = False
        return clean_bytes(records_to_cri(clean, forms), marks) if self.on else None


def records_to_cri(data: bytes, forms: tuple[RecordForm, ...] = ()) -> bytes:
    """Docker's json-file records (and journald's JSON entries) as the kubelet's (CRI)
    records, line for line: `TIME STREAM F message` for a line, `P` for a part of one (the
    driver splits a line over 16 KiB into records whose `log` has no newline:
    `join_partial_records` joins them again).  The JSON escapes are undone (`\\u003c`,
    `\\r` of a bar's frames, `\\"`); a line that is not a record is left as it is.  A wrapper's
    record (`forms` that `wraps`) as its envelope writes it (`wrapped_line`)."""
    wrappers = tuple(f for f in forms if f.wraps)
    out: list[bytes] = []
    for line in data.split(b"\n"):
        rec = None
        if _JOURNAL_HEAD.match(line):
            rec = _journal_fields(line)
        elif line.startswith(b"{"):
            rec = _docker_fields(line)
            if rec is None and wrappers and line.startswith(b'{"'):
                out.append(wrapped_line(line, wrappers) or line)
                continue
        if rec is None:
            out.append(line)
            continue
        t, stream, log = rec
        whole = log.endswith("\n")
        text = log[:-1] if whole else log
        if text.endswith("\r"):      # a terminal's line end (`docker run -t`)
            text = text[:-1]
        text = text.replace("\n", " ")   # one record, one line (the driver splits at `\n`)
        out.append(f"{t} {stream} {'F' if whole else 'P'} {text}".encode("utf-8", "replace"))
    return b"\n".join(out)


def join_partial_records(data: bytes, final: bool, max_line_bytes: int,
                         capped_at: tuple[int, ...] = ()
                         ) -> tuple[bytes, tuple[tuple[int, int], ...], int]:
    """Rejoin the parts of a line the kubelet split into records (SGLang 0.5's `server_args=`
    dict of ~550 flags is over 16 KiB: a record P, then F with the last flags).

    `data` is a block of complete records.  Each P record is joined to the next record of
    the same stream: its `\n` and that record's prefix are removed, so the line reads as
    written, under its first record's prefix.  Returns (data, removed, keep): the first
    `keep` bytes of the input joined, and (position in the input, bytes) of each removal.
    The P records ending the block wait for the next record (keep < len(data)) unless
    `final`; a line is not joined past `max_line_bytes`, nor its records past twice that,
    nor a record that was capped (`capped_at`: where the framer cut segments, sorted: the
    rest of it is gone, and what the framer holds of a line is raw bytes).
    """
    if b" P " not in data:
        return data, (), len(data)
    n = len(data)
    out: list[bytes] = []
    removed: list[tuple[int, int]] = []
    pos = 0                      # the input is copied up to here
    for m in _CRI_PARTIAL.finditer(data):
        start = m.start()
        if start < pos:          # a record joined into the line before it already
            continue
        stream, chain, gone = m.group(1), [], 0
        nl = data.find(b"\n", m.end())
        while nl >= 0:           # record by record while the one before is a P
            if nl + 1 >= n:      # the block ends inside the line: it waits for the rest
                if not final and not _capped_in(capped_at, start, n):
                    out.append(data[pos:start])
                    return b"".join(out), tuple(removed), start
                break
            nxt = CRI_RECORD.match(data, nl + 1)
            if nxt is None or nxt.group(1) != stream:
                break            # not a record of the same stream: left as written
            nl2 = data.find(b"\n", nxt.end())
            end = n if nl2 < 0 else nl2
            if _capped_in(capped_at, start, end):
                break
            # the joined line within a line's bytes, and its records (prefixes and all)
            # within two (as much is what the framer holds of them: `Framer._block`)
            if end - start - gone - (nxt.end() - nl) > max_line_bytes or \
                    end - start > 2 * max_line_bytes:
                break
            chain.append((nl, nxt.end() - nl))
            gone += nxt.end() - nl
            if nxt.group(2) != b"P":
                break
            nl = nl2
        for a, r in chain:
            out.append(data[pos:a])
            pos = a + r
            removed.append((a, r))
    out.append(data[pos:])
    return b"".join(out), tuple(removed), n


def _capped_in(capped_at: tuple[int, ...], lo: int, hi: int) -> bool:
    """Was a segment cut (capped) within [lo, hi]?"""
    return bool(capped_at) and bisect.bisect_left(capped_at, lo) != \
        bisect.bisect_right(capped_at, hi)


def _merge_removals(cuts: tuple[tuple[int, int], ...], removed: tuple[tuple[int, int], ...],
                    cleaned: bool) -> tuple[tuple[int, int], ...]:
    """A block's cut list (positions in its data, raw bytes missing up to there) after the
    spans `removed` (input position, bytes) were taken out of the data."""
    if cleaned:        # inner offsets are approximate anyway
        return cuts
    out: list[tuple[int, int]] = []
    cap_total, gone, k = 0, 0, 0
    for pos, total in cuts:              # positions before the removals
        while k < len(removed) and removed[k][0] < pos:
            a, r = removed[k]
            gone += r
            out.append((a + r - gone, cap_total + gone))
            k += 1
        cap_total = total
        out.append((pos - gone, total + gone))
    while k < len(removed):
        a, r = removed[k]
        gone += r
        out.append((a + r - gone, cap_total + gone))
        k += 1
    return tuple(out)


def _removal_positions(removed: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """Where in the joined data each removed newline was (one physical line each)."""
    out, gone = [], 0
    for a, r in removed:
        out.append(a - gone)
        gone += r
    return tuple(out)


# Python logging records written as JSON, one a line: `JSON_RECORD_MARK` (above), `RecordForm`.
# Between the lines of one record: a carriage return, then ECMA-48's NEL ("next line"), which
# every reader of segments drops with the other escapes (`strip_ansi`).  The record stays one
# physical line (line numbers are the file's) and each of its lines a segment, as a bar's
# frames are; but where a terminal shows only a bar's last frame, it shows each of these
# lines: so does a crash excerpt (`excerpt_lines`), traceback frames and all.
RECORD_LINE_BREAK = "\r\x1bE"
_RECORD_PREFIX_MAX = 512     # bytes a wrapper may put before a record (journald, kubectl ...)
# the record's time: `asctime` (Python's `%Y-%m-%d %H:%M:%S,f`, or a config's datefmt such as
# vLLM's `%m-%d %H:%M:%S`), python-json-logger's `timestamp` (ISO)
_RECORD_TIME = re.compile(r"(?:(\d{4})-)?(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")
_PROCESS_NAME = re.compile(r"[\w.-]{1,64}")
_CUT_ESCAPE = re.compile(rb"(?:\\u[0-9A-Fa-f]{0,3}|\\)$")
# the fields a form's envelope may name (`RecordForm`)
RECORD_FIELDS = ("asctime", "levelname", "levelprefix", "name", "module", "process",
                 "processName")
# the fields a record of another shape may name a key for (`RecordForm.keys`), and those it
# must name (the rest is derived, or left out where the shape has no key for it)
RECORD_KEYED = ("asctime", "levelname", "name", "message")
RECORD_KEYED_NEEDED = ("levelname", "message")
# a record's time taken as it is written (`RecordForm.datefmt` None): an RFC 3339 / ISO 8601
# stamp, nothing else (the text goes before the message as it is)
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?")


@dataclass(frozen=True, slots=True)
class RecordForm:
    """How an engine's text formatter writes a logging record: a pack's `records:` entry, the
    engine's own `logging` format as data.  For the loggers `loggers` names (each with its
    children; none: any logger), the `envelope` pieces go before each line of the message,
    `%`-style with the record's fields (`RECORD_FIELDS`; `asctime` formatted by `datefmt`,
    `module` the logger name's last part, `levelprefix` uvicorn's padded `INFO:`); a piece
    naming a field the record lacks is left out.  `each_line`: the envelope goes before every
    line of a message of several (vLLM's `NewLineFormatter`), not only the first (Python's
    `logging.Formatter`: a traceback's lines bare, as SGLang's text log shows them).

    `keys`: for a record shape other than python-json-logger's, the record's own key of each
    field it has (`RECORD_KEYED`: NVIDIA Dynamo's jsonl writes `time`, `level`, `target`,
    `message`); a record is read by such a form only when it holds each of those keys as a
    string, and by python-json-logger's forms only when it holds `levelname`.  `datefmt`
    None: the record's time as it is written (a stamp: `_STAMP`), not formatted again.

    `wraps`: the record is a wrapper's, not a logging record: its message is a line of the
    log itself (stern's `-o json`, logcli's `-o jsonl`), read where Docker's and journald's
    records are (`JsonRecords`, `wrapped_line`), before any logging record the line holds;
    its keys are paths (`_path`: logcli's labels are a nested object) of `WRAPPER_FIELDS`
    and `message`, its envelope the text a wrapper the `prefixes` read writes."""

    loggers: tuple[str, ...]
    envelope: tuple[str, ...]
    datefmt: str | None = "%Y-%m-%d %H:%M:%S"
    each_line: bool = False
    keys: tuple[tuple[str, str], ...] = ()
    wraps: bool = False

    def serves(self, name: str) -> int:
        """How well this form fits a logger: the length of the logger name it names (0 for
        a form of any logger), -1 when it does not."""
        if not self.loggers:
            return 0
        best = -1
        for lg in self.loggers:
            if name == lg or name.startswith(lg + "."):
                best = max(best, len(lg))
        return best


def json_records_to_text(data: bytes, forms: tuple[RecordForm, ...],
                         joins: tuple[int, ...] = ()) -> tuple[bytes, tuple[int, ...]]:
    """Each line of `data` that is a Python logging record written as JSON, as the text its
    engine's own formatter writes for it (`forms`, the packs' `records:`); every other line
    as it is.  With `joins` (positions in `data` where the framer removed a newline), those
    positions in the result.  Returns `data` itself when it holds no record.

    The record may stand behind a wrapper's prefix (a container runtime's stamp, journald,
    compose, `kubectl logs --prefix`, a tqdm frame it was glued to), which each of its
    segments keeps (a bar's frame only the first); it may be cut (the framer caps a line;
    a half-written last line): the fields it holds are read.  A message or traceback of
    several lines becomes one segment a line, each under the record's envelope (as vLLM's
    `NewLineFormatter` writes them), separated by `\\r`: the record stays one physical line,
    a traceback's source lines are each a line the `ignore` patterns see, and a request
    log's prompt stays under the request logger's name, line by line."""
    marks = record_marks(forms)
    if not forms or not any(m in data for m in marks):
        return data, joins
    lines = data.split(b"\n")
    spans: list[tuple[int, int, int, int]] = []   # per changed line: old start, new start,
    #                                                new length, old length
    old = new = 0
    for i, line in enumerate(lines):
        text = _line_record(line, forms) if any(m in line for m in marks) else None
        if text is not None:
            lines[i] = text
            spans.append((old, new, len(text), len(line)))
        old += len(line) + 1
        new += len(lines[i]) + 1
    if not spans:
        return data, joins
    return b"\n".join(lines), tuple(_moved(j, spans) for j in joins)


def _moved(pos: int, spans: list[tuple[int, int, int, int]]) -> int:
    """Where a position of the old data is in the new (`spans`: old start, new start, new
    length, old length of each changed line, in order); within a changed line, at most its
    new end (the physical line it is on is what counts)."""
    k = bisect.bisect_right(spans, (pos, 1 << 62)) - 1
    if k < 0:
        return pos
    o, n, new_len, old_len = spans[k]
    if pos - o <= old_len:
        return n + min(pos - o, new_len)
    return pos + (n + new_len) - (o + old_len)


def _line_record(line: bytes, forms: tuple[RecordForm, ...]) -> bytes | None:
    """The line, its record read as text; None when it holds none."""
    at = line.find(b'{"', 0, _RECORD_PREFIX_MAX)
    if at < 0:
        return None
    segments = record_segments(line[at:].rstrip(), forms)
    if segments is None:
        return None
    prefix = line[:at].decode("utf-8", "replace")
    if not prefix:
        return RECORD_LINE_BREAK.join(segments).encode("utf-8", "replace")
    if progress_frame(prefix) is not None:      # a bar's frame the record was glued to
        return (prefix + RECORD_LINE_BREAK.join(segments)).encode("utf-8", "replace")
    return RECORD_LINE_BREAK.join(prefix + seg for seg in segments).encode("utf-8", "replace")


def record_segments(raw: bytes, forms: tuple[RecordForm, ...]) -> list[str] | None:
    """A logging record's lines as its engine's formatter writes them, each under the
    record's envelope (its form: the one that names its logger most closely); None when
    `raw` is not a record (a JSON object with a string `message` and `levelname`, or one cut
    inside its last string).  Its lines fill twice its bytes (and 4 KiB) at most, its first
    and last ones (a traceback's cause is its last line): a message of many short lines, a
    client's prompt, is not multiplied by its envelope without bound."""
    d = json_object(raw)
    if d is None and not raw.endswith(b"}"):      # cut: close its last string
        d = json_object(_CUT_ESCAPE.sub(b"", raw) + b'"}')
        if d is None and (k := raw.rfind(b',"')) > 0:  # or cut in a later field: up to it
            d = json_object(raw[:k] + b"}")             # (Dynamo's follow its message)
    if d is None:
        return None
    for keys, family in _families(forms):
        got = _record_fields(d, keys)
        if got is not None:
            break
    else:
        return None
    message, level, name = got
    form = _form_for(family, name)
    head = _envelope(d, level, name, form)
    parts = message.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    limit = max(2 * len(raw), 4096)
    if sum(map(len, parts)) + len(parts) * (len(head) + 1) > limit:
        parts = _ends(parts, limit // 2 // (len(head) + 1) or 1, limit // 2)
    if form is not None and not form.each_line:
        return [head + parts[0], *parts[1:]]
    return [head + part for part in parts]


def _ends(parts: list[str], most: int, room: int) -> list[str]:
    """The first and the last of `parts`, up to `most` of them and `room` characters at
    each end."""
    keep: list[list[str]] = []
    for seq in (parts, parts[::-1]):
        got: list[str] = []
        used = 0
        for part in seq[:most]:
            used += len(part)
            if used > room and got:
                break
            got.append(part)
        keep.append(got)
    head, tail = keep
    if len(head) + len(tail) >= len(parts):
        return parts
    return head + tail[::-1]


@functools.lru_cache(maxsize=64)
def record_marks(forms: tuple[RecordForm, ...]) -> tuple[bytes, ...]:
    """The bytes a line must hold to be a record of one of `forms`: each shape's level key
    (python-json-logger's `"levelname":`, always)."""
    keys = [dict(f.keys).get("levelname", "levelname") for f in forms if not f.wraps]
    return tuple(dict.fromkeys([JSON_RECORD_MARK] + [b'"%s":' % k.encode() for k in keys]))


@functools.lru_cache(maxsize=64)
def _families(forms: tuple[RecordForm, ...]
              ) -> tuple[tuple[tuple[tuple[str, str], ...], tuple[RecordForm, ...]], ...]:
    """`forms` by record shape (`RecordForm.keys`), python-json-logger's first (also when no
    form of it is given: its records then read `LEVEL: message`)."""
    out: dict[tuple[tuple[str, str], ...], list[RecordForm]] = {(): []}
    for f in forms:
        if not f.wraps:           # (a wrapper's records were read before: `wrapped_line`)
            out.setdefault(f.keys, []).append(f)
    return tuple((k, tuple(v)) for k, v in out.items())


def _record_fields(d: dict, keys: tuple[tuple[str, str], ...]) -> tuple[str, str, str] | None:
    """(message, level, logger name) of a record of the shape `keys` names; None when `d`
    is not one.  python-json-logger's (no keys): `levelname` and `message`, a logged
    exception's `exc_info` after the message."""
    if keys:
        k = dict(keys)
        if not all(isinstance(d.get(key), str) for key in k.values()):
            return None
        level = d.get(k.get("levelname", "levelname"))
        message, name = d.get(k.get("message", "message")), d.get(k.get("name", ""), "")
        if not isinstance(level, str) or not isinstance(message, str) or len(level) > 16:
            return None
        return message, level, name if isinstance(name, str) else ""
    message, level, name = d.get("message"), d.get("levelname"), d.get("name")
    if not isinstance(message, str) or not isinstance(level, str) or len(level) > 16:
        return None
    name = name if isinstance(name, str) else ""
    exc = d.get("exc_info")
    if isinstance(exc, list):                   # `exc_info_as_array`
        exc = "\n".join(x for x in exc if isinstance(x, str))
    if isinstance(exc, str) and exc:
        message = f"{message}\n{exc}" if message else exc
    return message, level, name


def _envelope(d: dict, level: str, name: str, form: RecordForm | None) -> str:
    """What the record's form (`_form_for`) writes before its message: the pieces whose
    fields the record has (`_head`, its time put in); no form: `LEVEL: `."""
    if form is None:
        return f"{level}: "
    if form.keys:     # another shape: its time under its own key; no process named
        t, proc, pid = d.get(dict(form.keys).get("asctime", "")), None, None
    else:
        t, proc, pid = d.get("asctime", d.get("timestamp")), d.get("processName"), d.get("process")
    at = _asctime(t, form.datefmt) if isinstance(t, str) else None
    if isinstance(pid, str) and pid.isdigit():
        pid = int(pid)
    if not (isinstance(proc, str) and _PROCESS_NAME.fullmatch(proc) and isinstance(pid, int)
            and not isinstance(pid, bool)):
        proc = pid = None
    head = _head(form, level, name, at is not None, proc, pid)
    return head.replace("\x00", at) if at is not None else head


@functools.lru_cache(maxsize=1024)
def _form_for(forms: tuple[RecordForm, ...], name: str) -> RecordForm | None:
    """The form that names the logger most closely (None: no form names it)."""
    form, fit = None, -1
    for f in forms:
        n = f.serves(name)
        if n > fit:
            form, fit = f, n
    return form


@functools.lru_cache(maxsize=4096)
def _head(form: RecordForm, level: str, name: str, timed: bool, proc: str | None,
          pid: int | None) -> str:
    """The form's pieces whose fields the record has (`RecordForm`), its time a NUL to put
    it in (cached: one per logger, process and level, not per second)."""
    fields: dict[str, object] = {"levelname": level, "levelprefix": f"{level}:".ljust(9),
                                 "name": name, "module": name.rsplit(".", 1)[-1] or "root"}
    if timed:
        fields["asctime"] = "\x00"
    if proc is not None:
        fields["processName"], fields["process"] = proc, pid
    out = []
    for piece in form.envelope:
        try:
            out.append(piece % fields)
        except (KeyError, TypeError, ValueError):
            continue              # a field the record lacks: the piece is left out
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def _asctime(text: str, datefmt: str | None) -> str | None:
    """A record's time as `datefmt` writes it (None: as the record wrote it, a stamp); None
    when it is not one, or when the format wants the year and the record's time has none."""
    if datefmt is None:
        return text if _STAMP.fullmatch(text) else None
    m = _RECORD_TIME.match(text)
    if m is None or (m.group(1) is None and "%Y" in datefmt):
        return None
    try:
        # (a year-less time in a leap year, so that a 29 February is one)
        return datetime.datetime(int(m.group(1) or 2000), *map(int, m.group(2, 3, 4, 5, 6))
                                 ).strftime(datefmt)
    except ValueError:
        return None
