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

import re
from dataclasses import dataclass
from typing import Iterator

DEFAULT_MAX_LINE_BYTES = 64 * 1024

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
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
            self.newline_count = self.data.count(b"\n")
        return self.newline_count


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (vLLM colours its tags even in files)."""
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def segment_text(raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> str:
    """Decode one raw segment: cap it, UTF-8 with replacement, strip ANSI, drop NULs."""
    if len(raw) > max_line_bytes:
        raw = raw[:max_line_bytes]
    text = raw.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    return strip_ansi(text)


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
    for m in _SEP_RE.finditer(data):
        end = m.start()
        if end > start:
            yield start, end, line_number
        if data[end] == 0x0A:
            line_number += 1
        start = end + 1
    if start < len(data):
        yield start, len(data), line_number


def iter_lines(block: Block, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Line]:
    """Every line of a block, in order (the reference framing)."""
    for start, end, line_number in iter_segments(block):
        text = segment_text(block.data[start:end], max_line_bytes)
        for part in split_glued(text):
            if part.strip():
                yield Line(part, block.raw_offset(start), line_number, block.received_at)


class Framer:
    """Turns arbitrary chunks into `Block`s of complete, clean segments.

    * Keeps the unfinished tail (bytes after the last `\\r`/`\\n`) until it completes, but
      releases `\\r`-terminated tqdm frames at once: progress shows before the bar's `\\n`.
    * Caps every segment at `max_line_bytes` raw bytes, counting what it cuts
      (`cut_bytes_total`, `lines_cut_total`); a tail longer than that is capped while it is
      still arriving, so memory stays bounded whatever the input.
    * Then cleans each block: ANSI escape codes and NUL bytes are removed before anything
      looks for rule literals, so a colour code inside a message cannot hide it.
    The result does not depend on how the input was split into chunks.  `consumed_offset` is
    exact in raw log bytes, and so are line offsets (`Block.raw_offset`) unless the block
    had ANSI codes or NULs removed (`Block.cleaned`).
    """

    def __init__(self, offset: int = 0, line_number: int = 1,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._tail = b""
        self._tail_raw = 0        # raw log bytes the tail stands for (cleaning shrinks it)
        self._tail_offset = offset
        self._discarding = False  # inside an over-long line, dropping until its separator
        self._line_number = line_number
        self._prev: Block | None = None  # its newlines are counted lazily, once
        self.cut_bytes_total = 0
        self.lines_cut_total = 0

    @property
    def pending(self) -> bytes:
        """The held, unfinished segment."""
        return self._tail

    @property
    def line_number(self) -> int:
        """The physical line number of the next byte to be released."""
        if self._prev is not None:
            self._line_number = self._prev.line_number + self._prev.newlines()
            self._prev = None
        return self._line_number

    @property
    def consumed_offset(self) -> int:
        """Log offset up to which bytes have been released in blocks."""
        return self._tail_offset

    def feed(self, chunk: bytes, received_at: float) -> Block | None:
        """Add bytes; return the block of segments they completed (None if none)."""
        if not chunk:
            return None
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
        last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if last < dropped:
            self._hold(chunk[dropped:] if dropped else chunk)
            self._tail_raw += dropped
            return None
        body = chunk[dropped : last + 1] if dropped or last + 1 < len(chunk) else chunk
        raw_len = self._tail_raw + dropped + len(body)
        held_cut = self._tail_raw + dropped - len(self._tail)  # bytes of the tail's line dropped
        block = self._block(self._tail + body if self._tail else body, raw_len, received_at,
                            ((len(self._tail), held_cut),) if held_cut else ())
        self._tail, self._tail_raw = b"", 0
        if last + 1 < len(chunk):
            self._hold(chunk[last + 1 :])
        return block

    def flush(self, received_at: float) -> Block | None:
        """End of input: release the unfinished last line as a final block."""
        if not self._tail and not self._tail_raw:
            return None
        block = self._block(self._tail, self._tail_raw, received_at)
        self._tail, self._tail_raw = b"", 0
        self._discarding = False
        return block

    def _block(self, data: bytes, raw_len: int, received_at: float,
               held: tuple[tuple[int, int], ...] = ()) -> Block:
        capped, cut, lines, cuts = cap_segments(data, self.max_line_bytes)
        if cut:
            self._count_cut(cut)
            self.lines_cut_total += lines
        if held:  # the held tail's dropped bytes come before every cut made here
            at, extra = held[0]
            cuts = ((at, extra),) + tuple((p, c + extra) for p, c in cuts)
        clean = clean_bytes(capped)
        block = Block(clean, self._tail_offset, self.line_number, received_at,
                      cut_bytes=raw_len - len(clean), cuts=cuts, cleaned=clean is not capped)
        self._prev = block
        self._tail_offset += raw_len
        return block

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


_ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def clean_bytes(data: bytes) -> bytes:
    """Remove NUL bytes and ANSI escape sequences (C speed; a no-op on clean input), and the
    padding a terminal copy puts where it folded a long line (`unfold_padding`).

    Repeated until nothing changes, so cleaning is idempotent and the same whether a line
    arrives whole or in pieces (removing one code can join the bytes of another).
    """
    if b"\x00" in data:
        data = data.replace(b"\x00", b"")
    while b"\x1b" in data:
        cleaned = _ANSI_B.sub(b"", data)
        if cleaned == data:
            break
        data = cleaned
    if _PAD_PROBE in data:
        data = unfold_padding(data)
    return data


FOLD_PAD_MIN = 20            # spaces a terminal pads a folded row with, at least
FOLD_WIDTH_MIN = 40          # the narrowest terminal row taken for a fold
_PAD_PROBE = b" " * FOLD_PAD_MIN
# a run of padding between two characters of text (not before a bar's closing `|`)
_PAD_RUN = re.compile(rb"(?<=[^ \r\n]) {%d,}(?=[^ \r\n|])" % FOLD_PAD_MIN)


def unfold_padding(data: bytes) -> bytes:
    """Rejoin lines a terminal copy hard-wrapped by padding each row to the terminal's width
    (`... {'embed', 'classify', 'rew                           ard', ...`: 114 characters of
    text, 27 spaces, the rest): the padding goes, so words and markers are whole again.

    Unambiguous cases only: a run of at least FOLD_PAD_MIN spaces between two non-blank
    characters (a tqdm bar's run before its closing `|` is not one), and in a segment with
    several runs, every run ends at a multiple of the first run's end column (the row width).
    Per segment, so the result does not depend on how the input was split.
    """
    out: list[bytes] = []
    copied = 0
    runs = [(m.start(), m.end()) for m in _PAD_RUN.finditer(data)]
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
