"""Reading `nvidia-smi --query-gpu ... --format=csv[,nounits]` output: bytes in, any
chunking, `GpuSnapshot`s out.

Columns are mapped by the header's canonical names (`query.canonical_field`), `[N/A]` & co
are None (never 0), units in `[...]` or on the value are scaled to base units, and the rows
of one loop become one snapshot.  Pure: no process, no clock unless one is given.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .query import _HEADER_CELL_RE, canonical_field
from .sample import GpuSample, GpuSnapshot, MiB, decode_throttle


#: Values that mean "this board does not say": absent, not zero.
ABSENT_VALUES = frozenset({"[N/A]", "[Not Supported]", "[Unknown Error]",
                           "[Insufficient Permissions]", "N/A", ""})

MAX_LINE = 64 * 1024          # a longer line is not nvidia-smi output: dropped, counted


_UNIT_SCALE: dict[str, float] = {
    # memory -> bytes
    "B": 1, "KiB": 1024, "MiB": MiB, "GiB": 1024 * MiB,
    # clocks -> Hz
    "Hz": 1, "KHz": 1e3, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9,
    # power -> W
    "W": 1, "mW": 1e-3,
}
_NUMBER_RE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]+)?$")
# what nvidia-smi prints in a loop instead of a GPU's row when it lost the GPU (Xid 79, a
# GPU that needs a reset): only these are said as a GPU not answering; other text between
# rows (a login script's background job over SSH) is skipped, not blamed on the bus
_LOST_RE = re.compile(r"device handle|Unknown Error|GPU is lost|requires reset|"
                      r"fallen off the bus", re.I)


@dataclass(frozen=True, slots=True)
class _Column:
    key: str            # canonical name
    unit: str | None    # from the header's `[...]`


def _columns(names: Sequence[str]) -> list[_Column]:
    out = []
    for n in names:
        m = _HEADER_CELL_RE.match(n.strip())
        unit = m.group(2) if m else None
        out.append(_Column(canonical_field(n), unit.strip() if unit else None))
    return out


def _looks_like_header(cells: list[str]) -> bool:
    """A header is all field names (with optional `[unit]`) and names `index`."""
    if not cells or not all(_HEADER_CELL_RE.match(c) for c in cells):
        return False
    return any(canonical_field(c) == "index" for c in cells)


def _number(raw: str | None, unit: str | None, default_unit: str | None = None) -> float | None:
    """A reading in base units: `81.85`, `81.85 W` (csv with units), `0 %`, `143771 MiB`."""
    if raw is None:
        return None
    v = raw.strip()
    if v in ABSENT_VALUES or v.startswith("["):
        return None
    m = _NUMBER_RE.match(v)
    if not m:
        return None
    x = float(m.group(1))
    if not math.isfinite(x):
        return None
    u = m.group(2) or unit or default_unit
    if u and u != "%":
        x *= _UNIT_SCALE.get(u, 1.0)
    return x


def _text(raw: str | None) -> str | None:
    if raw is None:
        return None
    v = raw.strip()
    return None if v in ABSENT_VALUES or (v.startswith("[") and v.endswith("]")) else v


def _mask(raw: str | None) -> int | None:
    v = _text(raw)
    if v is None:
        return None
    try:
        return int(v, 16) if v.lower().startswith("0x") else int(v)
    except ValueError:
        return None


def sample_from_row(values: Mapping[str, str], units: Mapping[str, str | None] | None = None
                    ) -> GpuSample | None:
    """A `GpuSample` from one row keyed by canonical field name (None: no usable index).

    `units` are the header's (`power.draw` -> `W`); a value's own unit wins (csv without
    `nounits`).  Memory defaults to MiB and clocks to MHz, nvidia-smi's units."""
    units = units or {}

    def num(key: str, default_unit: str | None = None) -> float | None:
        return _number(values.get(key), units.get(key), default_unit)

    raw_index = _text(values.get("index"))
    if raw_index is None or not raw_index.isdigit():
        return None
    limit = num("enforced.power.limit", "W")
    if limit is None:
        limit = num("power.limit", "W")
    util = num("utilization.gpu")
    used = num("memory.used", "MiB")
    total = num("memory.total", "MiB")
    mask = _mask(values.get("clocks_event_reasons.active"))
    return GpuSample(
        index=int(raw_index),
        name=_text(values.get("name")),
        uuid=_text(values.get("uuid")),
        power_w=num("power.draw", "W"),
        power_limit_w=limit,
        power_default_limit_w=num("power.default_limit", "W"),
        util_ratio=util / 100.0 if util is not None else None,
        mem_used_bytes=int(used) if used is not None else None,
        mem_total_bytes=int(total) if total is not None else None,
        sm_clock_hz=num("clocks.sm", "MHz"),
        sm_clock_max_hz=num("clocks.max.sm", "MHz"),
        temperature_c=num("temperature.gpu"),
        throttle_mask=mask,
        throttle_reasons=decode_throttle(mask) if mask is not None else frozenset(),
        timestamp=_text(values.get("timestamp")),
        bus_id=_text(values.get("pci.bus_id")),
    )


def host_time(stamp: str | None) -> float | None:
    """nvidia-smi's `YYYY/MM/DD HH:MM:SS.mmm` (the host's local time) as an epoch, read in
    this machine's zone (right for captures and local streams only)."""
    if not stamp:
        return None
    whole, _, frac = stamp.strip().partition(".")
    try:
        t = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    return t + (float("0." + frac) if frac.isdigit() else 0.0)


class GpuCsvParser:
    """Incremental reader of `nvidia-smi --query-gpu ... --format=csv[,nounits]` output.

    Bytes in (any chunking), `GpuSnapshot`s out.  Columns are mapped by the header's names
    (the first header line wins until another comes); `fields` gives the columns for output
    without a header (`noheader`).  Rows are grouped by loop: nvidia-smi prints the GPUs in
    ascending index order, so a row whose index is not above the previous one starts a new
    snapshot, and once the highest index of a loop is known, the loop is complete when that
    index arrives (no waiting for the next loop).  The stream calls `flush()` when the output
    pauses, which completes the very first loop.

    Never raises on input: unparseable lines count in `skipped`, lines over `max_line` bytes
    in `oversized` (dropped up to their newline)."""

    def __init__(self, fields: Sequence[str] | None = None, *,
                 clock: Callable[[], float] | None = None, max_line: int = MAX_LINE) -> None:
        self._fallback = _columns(fields) if fields else None
        self.columns: list[_Column] | None = None
        self.clock = clock
        self.max_line = max_line
        self._buf = bytearray()
        self._dropping = False
        self._pending: list[GpuSample] = []
        self._errors: list[str] = []
        self._last_index = -1
        self._known_last: int | None = None
        self.rows = 0
        self.headers = 0
        self.skipped = 0
        self.oversized = 0
        self.snapshots = 0

    @property
    def pending(self) -> int:
        """Rows of a loop not yet handed out."""
        return len(self._pending)

    @property
    def loop_known(self) -> bool:
        """The highest index of a loop is known: a loop completes when it arrives, so a pause
        before a slow GPU's row must not cut the loop in two."""
        return self._known_last is not None

    @property
    def has_partial_line(self) -> bool:
        return bool(self._buf) or self._dropping

    def feed(self, data: bytes) -> list[GpuSnapshot]:
        out: list[GpuSnapshot] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                rest = data[start:]
                if self._dropping:
                    return out
                self._buf += rest
                if len(self._buf) > self.max_line:
                    self.oversized += 1
                    self._buf.clear()
                    self._dropping = True
                return out
            piece = data[start:nl]
            start = nl + 1
            if self._dropping:
                self._dropping = False
                continue
            if self._buf:
                piece = bytes(self._buf) + piece
                self._buf.clear()
            if len(piece) > self.max_line:
                self.oversized += 1
                continue
            out.extend(self.feed_line(piece.decode("utf-8", "replace")))

    def feed_line(self, line: str) -> list[GpuSnapshot]:
        line = line.strip().strip("\r")
        if not line:
            return []
        cells = [c.strip() for c in line.split(",")]
        if _looks_like_header(cells):
            out = self._emit()
            self.columns = _columns(cells)
            self.headers += 1
            self._known_last = None
            return out
        cols = self.columns or self._fallback
        if cols is None or len(cells) != len(cols):
            self.skipped += 1
            if self.rows and _LOST_RE.search(line) and len(self._errors) < 64:
                self._errors.append(line[:300])     # said in a loop instead of a row
            return []
        values = {c.key: v for c, v in zip(cols, cells)}
        sample = sample_from_row(values, {c.key: c.unit for c in cols})
        if sample is None:
            self.skipped += 1
            return []
        self.rows += 1
        out = []
        if self._pending and sample.index <= self._last_index:
            out += self._emit()
        self._pending.append(sample)
        self._last_index = sample.index
        if self._known_last is not None and sample.index > self._known_last:
            self._known_last = None     # the loop is longer than the one cut by a pause
        if self._known_last is not None and sample.index == self._known_last:
            out += self._emit()
        return out

    def flush(self) -> GpuSnapshot | None:
        """Hand out the rows received so far as one snapshot (the output paused)."""
        got = self._emit()
        return got[0] if got else None

    def finish(self) -> list[GpuSnapshot]:
        """At end of output: the last line even without its newline, then the rest."""
        out: list[GpuSnapshot] = []
        if self._buf and not self._dropping:
            out += self.feed_line(bytes(self._buf).decode("utf-8", "replace"))
        self._buf.clear()
        self._dropping = False
        out += self._emit()
        return out

    def _emit(self) -> list[GpuSnapshot]:
        if not self._pending:
            return []
        rows, self._pending = tuple(self._pending), []
        errors, self._errors = tuple(dict.fromkeys(self._errors)), []
        top = max(g.index for g in rows)
        self._known_last = top if self._known_last is None else max(self._known_last, top)
        self._last_index = -1
        at = self.clock() if self.clock is not None else (host_time(rows[0].timestamp) or 0.0)
        self.snapshots += 1
        return [GpuSnapshot(at, rows, errors)]


def parse_csv(data: str | bytes, fields: Sequence[str] | None = None,
              clock: Callable[[], float] | None = None) -> list[GpuSnapshot]:
    """Every snapshot in a whole capture (see `GpuCsvParser`; `fields` for `noheader`)."""
    p = GpuCsvParser(fields, clock=clock)
    raw = data.encode() if isinstance(data, str) else data
    return p.feed(raw) + p.finish()
