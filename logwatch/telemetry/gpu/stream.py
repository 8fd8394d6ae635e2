"""GPU telemetry beside the log: one long-running `nvidia-smi --query-gpu` per host (issue 14).

Why `nvidia-smi` and nothing else: every GPU node has it, it needs no daemon, no privilege and
no install (DCGM, nvitop and gpustat need one or the other), and it reports what the case
logwatch exists for needed: power draw against the *enforced* limit and the reasons the
clocks are held down ("250 W of 600 W, not power-capped": the GPUs are waiting, not limited).

Three layers, each usable alone:

* **Parsing (pure, no I/O)**: `GpuCsvParser` reads `--format=csv,nounits` output by the
  header's canonical names (the tool prints `clocks.sm` as `clocks.current.sm` and
  `clocks_throttle_reasons.active` as `clocks_event_reasons.active`; header names carry
  units, `power.draw [W]`), turns `[N/A]` & co into None, decodes the clock-event bitmask,
  and groups the rows of one loop into a `GpuSnapshot`.  Garbage lines are counted, never
  raised; a line over 64 KiB is dropped.
* **The stream (`GpuStream`)**: one `nvidia-smi ... -l N` process, local (asyncio subprocess)
  or remote (a session on the host's connection from `SSHPool`), under a watchdog: no sample
  for `timeout` -> kill and restart with backoff (a wedged driver hangs nvidia-smi); an
  unknown field (exit 2, older driver) -> once to `MINIMAL_FIELDS`; no nvidia-smi on the host
  -> `up` False, status "no nvidia-smi on host", retried after minutes, not in a storm.
* **Sharing (`GpuStreams`)**: streams are keyed by host ('local' or the SSH pool's connection
  key) and reference-counted, so the eight targets of one node run one nvidia-smi.

Plus the glue the app needs: `parse_gpu_config` (a target's `gpu:` value -> `GpuConfig`),
`plan_gpu` (what `auto` means for a source kind) and `gpu_summary` (the watch panel's line).
The contract is written down in docs/architecture.md, section "GPU telemetry".
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shlex
import shutil
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import asyncssh

from ... import log
from ...units import fmt_duration, parse_duration, parse_switch
from ...sources.ssh import (
    Backoff, NoSFTPSubsystem, SSHOptions, SSHPool, SSHTarget, default_pool, explain,
)

# ----------------------------------------------------------------------------------------------
# fields

#: What we ask for.  `clocks_throttle_reasons.active` rather than its new name
#: `clocks_event_reasons.active`: drivers since R535 accept both (and print the new name, see
#: fixtures/gpu/h200/query-old-throttle-field.txt), older ones only the old one, so asking for
#: the old name keeps the full set valid on more drivers.  Both power limits: the enforced one
#: is what the power manager holds the board to, `power.limit` is the fallback where the
#: enforced one is not reported; `power.default_limit` is the TDP.
FULL_FIELDS: tuple[str, ...] = (
    "timestamp", "index", "name", "uuid",
    "power.draw", "enforced.power.limit", "power.limit", "power.default_limit",
    "utilization.gpu", "memory.used", "memory.total",
    "clocks.sm", "clocks.max.sm", "temperature.gpu", "clocks_throttle_reasons.active",
)

#: Asked after the driver rejected a field of FULL_FIELDS (one unknown field fails the whole
#: query with exit status 2): fields every driver of the last decade knows.
MINIMAL_FIELDS: tuple[str, ...] = (
    "index", "power.draw", "power.limit", "utilization.gpu", "memory.used", "memory.total",
)

#: Printed names (and accepted aliases) -> the one name the parser uses.
_CANONICAL: dict[str, str] = {
    "clocks.current.sm": "clocks.sm",
    "clocks.current.graphics": "clocks.gr",
    "clocks.current.memory": "clocks.mem",
    "clocks.current.video": "clocks.video",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.draw": "power.draw",
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
}

#: Values that mean "this board does not say": absent, not zero.
ABSENT_VALUES = frozenset({"[N/A]", "[Not Supported]", "[Unknown Error]",
                           "[Insufficient Permissions]", "N/A", ""})

#: nvml.h `nvmlClocksEventReason*` bits (the `--help-query-gpu` text names them; the values
#: are NVML's).  Bits outside these eight (0x100 display clock) are kept in `throttle_mask`
#: but not named: the metrics contract names exactly these.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
)
THROTTLE_REASONS: tuple[str, ...] = tuple(name for _, name in THROTTLE_BITS)
#: Reasons that mean "the board is at its power ceiling" (the panel's "power-capped").
POWER_CAP_REASONS: tuple[str, ...] = ("sw_power_cap", "hw_power_brake")
#: Reasons that mean "held down by heat".
THERMAL_REASONS: tuple[str, ...] = ("sw_thermal", "hw_thermal", "hw_slowdown")

MAX_LINE = 64 * 1024          # a longer line is not nvidia-smi output: dropped, counted
HISTORY = 120                 # total-power points kept for the sparkline (4 min at 2 s)
SNAPSHOTS = 300               # snapshots kept for the silence verdict (10 min at 2 s, 1 min
                              # at 200 ms: it reads the last minute of a silence at most)
IDLE_UTIL = 0.05              # a GPU at this utilisation or less is idle: its power then is
                              # the board's idle power (learned per GPU, see GpuStream.idle_w)
MiB = 1024 * 1024

_UNIT_SCALE: dict[str, float] = {
    # memory -> bytes
    "B": 1, "KiB": 1024, "MiB": MiB, "GiB": 1024 * MiB,
    # clocks -> Hz
    "Hz": 1, "KHz": 1e3, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9,
    # power -> W
    "W": 1, "mW": 1e-3,
}
_NUMBER_RE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]+)?$")
_HEADER_CELL_RE = re.compile(r"^([a-z][a-z0-9_.]*)(?:\s*\[([^\]]*)\])?$")
_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')


def canonical_field(name: str) -> str:
    """The parser's name for a field as asked or as printed (`clocks.current.sm [MHz]` and
    `clocks.sm` are both `clocks.sm`)."""
    m = _HEADER_CELL_RE.match(name.strip())
    base = m.group(1) if m else name.strip()
    return _CANONICAL.get(base, base)


def decode_throttle(mask: int) -> frozenset[str]:
    """The names of the active clock-event reasons in an NVML bitmask."""
    return frozenset(name for bit, name in THROTTLE_BITS if mask & bit)


def query_args(fields: Sequence[str], interval: float) -> list[str]:
    """nvidia-smi's arguments for a looping query.  `-l` takes whole seconds; anything else
    goes as `-lms` (milliseconds).  The header is kept (no `noheader`): columns are mapped by
    name, so a driver that prints another name or order is still read right."""
    loop = (["-l", str(int(interval))] if interval >= 1 and float(interval).is_integer()
            else ["-lms", str(max(1, int(round(interval * 1000))))])
    return ["--query-gpu=" + ",".join(fields), "--format=csv,nounits", *loop]


# ----------------------------------------------------------------------------------------------
# samples


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant, in base units (W, bytes, Hz, ratio 0-1, Celsius).

    Every value the board did not report (`[N/A]`, or not asked in the minimal set) is None:
    a missing reading must never look like a zero.  `throttle_mask` None means "unknown";
    then `throttle_reasons` is empty and says nothing."""

    index: int
    name: str | None = None
    uuid: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None          # enforced (fallback: power.limit)
    power_default_limit_w: float | None = None  # the TDP
    util_ratio: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    sm_clock_hz: float | None = None
    sm_clock_max_hz: float | None = None
    temperature_c: float | None = None
    throttle_mask: int | None = None
    throttle_reasons: frozenset[str] = frozenset()
    timestamp: str | None = None                # the host's local time, as printed

    def throttled(self) -> dict[str, int]:
        """1/0 per named reason (all eight), for `logwatch_gpu_throttled{reason}`; empty when
        the mask is unknown (emit no series rather than false zeros)."""
        if self.throttle_mask is None:
            return {}
        return {r: int(r in self.throttle_reasons) for r in THROTTLE_REASONS}

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "uuid": self.uuid,
                "power_w": self.power_w, "power_limit_w": self.power_limit_w,
                "power_default_limit_w": self.power_default_limit_w,
                "util_ratio": self.util_ratio, "mem_used_bytes": self.mem_used_bytes,
                "mem_total_bytes": self.mem_total_bytes, "sm_clock_hz": self.sm_clock_hz,
                "sm_clock_max_hz": self.sm_clock_max_hz, "temperature_c": self.temperature_c,
                "throttle_reasons": sorted(self.throttle_reasons),
                "throttled": self.throttled(),
                "timestamp": self.timestamp}


def _mean(values: Iterable[float | int | None]) -> float | None:
    vs = [float(v) for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


@dataclass(frozen=True)
class GpuSnapshot:
    """The rows of one loop of nvidia-smi: every GPU of the host at (about) one instant.

    `at` is this machine's wall clock when the rows arrived (time.time()), not the host's
    printed timestamp: a remote host's local time has an unknown zone and clock offset.
    Offline parsing (no clock given) uses the printed timestamp read as local time."""

    at: float
    gpus: tuple[GpuSample, ...]

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def total_power_w(self) -> float | None:
        vs = [g.power_w for g in self.gpus if g.power_w is not None]
        return sum(vs) if vs else None

    def mean(self, attr: str) -> float | None:
        """The mean of a GpuSample attribute over the GPUs that report it."""
        return _mean(getattr(g, attr) for g in self.gpus)

    def with_reason(self, reasons: Iterable[str]) -> list[GpuSample]:
        """The GPUs with any of `reasons` active."""
        want = set(reasons)
        return [g for g in self.gpus if g.throttle_reasons & want]

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "gpus": [g.to_dict() for g in self.gpus],
                "total_power_w": self.total_power_w, "summary": gpu_summary(self)}


# ----------------------------------------------------------------------------------------------
# parsing


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
        if self._known_last is not None and sample.index >= self._known_last:
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
        top = max(g.index for g in rows)
        self._known_last = top if self._known_last is None else max(self._known_last, top)
        self._last_index = -1
        at = self.clock() if self.clock is not None else (host_time(rows[0].timestamp) or 0.0)
        self.snapshots += 1
        return [GpuSnapshot(at, rows)]


def parse_csv(data: str | bytes, fields: Sequence[str] | None = None,
              clock: Callable[[], float] | None = None) -> list[GpuSnapshot]:
    """Every snapshot in a whole capture (see `GpuCsvParser`; `fields` for `noheader`)."""
    p = GpuCsvParser(fields, clock=clock)
    raw = data.encode() if isinstance(data, str) else data
    return p.feed(raw) + p.finish()


def invalid_field(output: str | bytes) -> str | None:
    """The field nvidia-smi refused (`Field "X" is not a valid field to query.`), if any."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    m = _INVALID_FIELD_RE.search(text)
    return m.group(1) if m else None


# ----------------------------------------------------------------------------------------------
# the panel's text


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def gpu_summary(snapshot: GpuSnapshot | None) -> str:
    """The watch panel's one line, e.g.
    `GPU x8 250/600 W (42%) · util 97% · SM 1.4/2.0 GHz · not power-capped`.

    Power and clocks are per-GPU means (what one compares with the board's TDP and max
    clock); parts the board does not report are left out (the minimal field set has no
    clocks and no reasons).  "power-capped (REASONS)" when sw_power_cap or hw_power_brake is
    active on any GPU ("on K/N" when not on all); thermal reasons add "thermal-throttled"."""
    if snapshot is None or not snapshot.gpus:
        return "GPU: no data"
    n = snapshot.count
    head = f"GPU x{n}"
    power = snapshot.mean("power_w")
    limit = snapshot.mean("power_limit_w")
    if power is not None:
        head += (f" {power:.0f}/{limit:.0f} W ({_pct(power / limit)})" if limit
                 else f" {power:.0f} W")
    parts = [head]
    util = snapshot.mean("util_ratio")
    if util is not None:
        parts.append(f"util {_pct(util)}")
    sm = snapshot.mean("sm_clock_hz")
    if sm is not None:
        smax = snapshot.mean("sm_clock_max_hz")
        parts.append(f"SM {sm / 1e9:.1f}/{smax / 1e9:.1f} GHz" if smax
                     else f"SM {sm / 1e9:.1f} GHz")
    known = [g for g in snapshot.gpus if g.throttle_mask is not None]
    if known:
        for label, reasons, none_text in (("power-capped", POWER_CAP_REASONS, "not power-capped"),
                                          ("thermal-throttled", THERMAL_REASONS, None)):
            hit = [g for g in known if g.throttle_reasons & set(reasons)]
            if not hit:
                if none_text:
                    parts.append(none_text)
                continue
            names = sorted(set().union(*(g.throttle_reasons for g in hit)) & set(reasons))
            where = "" if len(hit) == n else f" on {len(hit)}/{n}"
            parts.append(f"{label} ({', '.join(names)}){where}")
    return " · ".join(parts)


# ----------------------------------------------------------------------------------------------
# config


@dataclass(frozen=True)
class GpuConfig:
    """A target's `gpu:` setting.

    `mode`: "auto" (default: nvidia-smi where the log is: over the target's own SSH
    connection for ssh://, locally for a file when the command is on PATH, off for cmd: and
    stdin; see `plan_gpu`), "on" (a mapping or `true`: run it even where auto would not,
    locally for non-ssh targets) or "off" (`false`).
    `command`: a path or a command line (`nvidia-smi`, `/usr/bin/nvidia-smi`,
    `sudo -n nvidia-smi`); the query arguments are appended."""

    mode: str = "auto"
    command: str = "nvidia-smi"
    interval: float = 2.0
    timeout: float = 10.0

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "command": self.command, "interval": self.interval,
                "timeout": self.timeout}


_GPU_KEYS = ("command", "interval", "timeout")


def _duration(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{name}: expected a duration like 2s or 500ms, got {value!r}")
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if seconds <= 0:
        raise ValueError(f"{name}: must be more than 0, got {value!r}")
    return seconds


def parse_gpu_config(value: Any, *, where: str = "gpu") -> GpuConfig:
    """A target's `gpu:` value -> GpuConfig.  `where` names the key in error messages
    (e.g. `targets[2].gpu`).

    Accepted: None / "auto" (the default), false / "false" / "off", true / "on", or a mapping
    with `command` (str or list), `interval` (>= 0.1 s, default 2s), `timeout` (the
    watchdog: longer than the interval, default 10s)."""
    switch = parse_switch(value, where=where, keys=_GPU_KEYS,
                          example="command: nvidia-smi, interval: 2s, timeout: 10s",
                          short="command: ..., interval: ..., timeout: ...")
    if isinstance(switch, str):
        return GpuConfig() if switch == "auto" else GpuConfig(mode=switch)
    value = switch
    command: Any = value.get("command", "nvidia-smi")
    if isinstance(command, (list, tuple)):
        if not command or not all(isinstance(c, str) and c for c in command):
            raise ValueError(f"{where}.command: expected a non-empty list of strings, "
                             f"got {command!r}")
        command = shlex.join(command)
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"{where}.command: expected a command (a path or a command line), "
                         f"got {command!r}")
    try:
        if not shlex.split(command):
            raise ValueError("empty")
    except ValueError as e:
        raise ValueError(f"{where}.command: cannot split {command!r} into words ({e})") from None
    interval = _duration(value.get("interval", 2.0), f"{where}.interval")
    if interval < 0.1:
        raise ValueError(f"{where}.interval: at least 100ms, got {value.get('interval')!r}")
    timeout = _duration(value.get("timeout", 10.0), f"{where}.timeout")
    if timeout <= interval:
        raise ValueError(f"{where}.timeout: must be longer than the interval "
                         f"({fmt_duration(timeout)} <= {fmt_duration(interval)}): the watchdog "
                         "would kill nvidia-smi between two samples")
    return GpuConfig(mode="on", command=command.strip(), interval=interval, timeout=timeout)


def plan_gpu(config: GpuConfig, source_kind: str, *,
             which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Where to run nvidia-smi for a target: "ssh" (over its connection), "local", or None.

    `source_kind` is `sources.source_kind(target)`: "ssh", "file", "command" or "stdin".
    auto: ssh -> "ssh" (a missing nvidia-smi there shows as a status, not an error); file ->
    "local" when the command is on PATH (a laptop tailing a copied log has no GPU to show);
    command / stdin -> None (the log may come from anywhere).  "on": "ssh" for ssh targets,
    "local" for everything else."""
    if config.mode == "off":
        return None
    if source_kind == "ssh":
        return "ssh"
    if config.mode == "on":
        return "local"
    if source_kind == "file":
        argv = config.argv
        return "local" if argv and which(argv[0]) else None
    return None


# ----------------------------------------------------------------------------------------------
# processes: one interface for a local child and a remote session


class _Missing(Exception):
    """The command does not exist where it should run."""


class _Proc:
    pid: int | None = None

    async def read(self, n: int) -> bytes:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    async def wait(self) -> int | None:
        raise NotImplementedError


class _LocalProc(_Proc):
    """A child in its own process group: a wrapper script's children die with it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid = proc.pid

    @classmethod
    async def start(cls, argv: list[str]) -> "_LocalProc":
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except FileNotFoundError as e:
            raise _Missing(argv[0]) from e
        return cls(proc)

    async def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.read(n)

    def kill(self) -> None:
        if self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    async def wait(self) -> int | None:
        return await self.proc.wait()


class _RemoteProc(_Proc):
    """A session on the host's shared connection, on a pseudo-terminal when the server allows
    one.  Why a pty: closing a session does not signal a command that is only blocked (a hung
    nvidia-smi would stay on the host, one more per restart), but closing its pty hangs the
    terminal up and the kernel sends SIGHUP to the command.  The `signal` channel request
    is sent first (SIGKILL also ends a command that ignores SIGHUP), but sshd refuses it for
    root logins ("session signalling requires privilege separation"), so it cannot be the
    only way.  The pty's CRLF line ends are read like LF."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._killed = False

    async def read(self, n: int) -> bytes:
        data: bytes = await self.proc.stdout.read(n)
        return data

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        if self.proc.exit_status is None and self.proc.exit_signal is None:
            try:
                self.proc.send_signal("KILL")
            except (OSError, asyncssh.Error, ValueError):
                pass
        try:
            self.proc.close()
        except (OSError, asyncssh.Error):
            pass

    async def wait(self) -> int | None:
        await self.proc.wait_closed()
        code = self.proc.returncode
        return int(code) if code is not None else None


# ----------------------------------------------------------------------------------------------
# the stream

STATUS_MISSING = "no nvidia-smi on host"
STATUS_HUNG = "nvidia-smi hung: restarted"
READ_SIZE = 64 * 1024
# what shells print for a missing command: bash `command not found`, dash `sh: 1: X: not found`,
# a missing path `No such file or directory`
_NOT_FOUND_RE = re.compile(r"command not found|: not found|No such file or directory")
# nvidia-smi is there but has nothing to report: a host without GPUs (exit 6) or whose driver
# is not loaded (exit 9).  Waiting minutes, like a missing command: restarting will not help.
STATUS_NO_GPUS = "no GPUs on host"
STATUS_NO_DRIVER = "NVIDIA driver not loaded"
_NOTHING_TO_REPORT: tuple[tuple[int, re.Pattern[str], str], ...] = (
    (6, re.compile(r"No devices were found"), STATUS_NO_GPUS),
    (9, re.compile(r"couldn't communicate with the NVIDIA driver"), STATUS_NO_DRIVER),
)


@dataclass
class _RunEnd:
    code: int | None = None
    hung: bool = False
    head: bytes = b""
    samples: int = 0
    lost: str | None = None   # the SSH connection failed mid-run


@dataclass
class GpuCounters:
    """Totals over the stream's life (for logs, /api/status and benchmarks)."""

    restarts: int = 0         # process restarts after a hang, an exit or a lost connection
    hangs: int = 0            # watchdog kills
    fallbacks: int = 0        # switches to MINIMAL_FIELDS
    snapshots: int = 0
    skipped_lines: int = 0
    oversized_lines: int = 0
    starts: int = 0           # processes started


def learn_idle(idle_w: dict[int, float], snap: GpuSnapshot) -> None:
    """The board's own idle power, per GPU: the lowest power it drew while idle (utilisation
    <= IDLE_UTIL); a reading of 1 W or less is a broken sensor, not idle."""
    for g in snap.gpus:
        if g.util_ratio is not None and g.util_ratio <= IDLE_UTIL and \
                g.power_w is not None and g.power_w > 1.0:
            if g.index not in idle_w or g.power_w < idle_w[g.index]:
                idle_w[g.index] = g.power_w


class GpuStream:
    """One `nvidia-smi --query-gpu=... --format=csv,nounits -l N` for one host, kept running.

    Read it, don't drive it: `latest` (the newest snapshot, kept while down: check `up`),
    `power_history` (total watts, the last HISTORY snapshots), `up`, `status` (a short human
    line: "8 GPUs", "no nvidia-smi on host", "nvidia-smi hung: restarted", ...), `error` (the
    longer reason), `counters`, `fields` (the set in use; `minimal` after a fallback),
    `next_retry_in()` while waiting to retry.

    Remote streams run on the host's connection from the SSHPool (the log target's own) as one
    session held for the stream's life.  They do not take `pool.exec_slot`: that semaphore
    bounds short commands (the startup grep); a stream holding a slot forever would starve
    them.  So a host with streams uses at most exec slots + SFTP + 1 sessions (6 of OpenSSH's
    default MaxSessions 10).

    Failure policy: no sample for `timeout` -> kill the process group (local) / signal it and
    close its session and pty (remote, see `_RemoteProc`), status "nvidia-smi hung:
    restarted", restart after backoff
    (1 s doubling to 60 s; reset after a minute of samples).  Exit 2 naming an invalid field ->
    at once to MINIMAL_FIELDS, once.  Command not found (local FileNotFoundError, exit 127,
    "command not found") -> "no nvidia-smi on host", retried after 1 min doubling to 5 min;
    the same wait for "no GPUs on host" (exit 6) and "NVIDIA driver not loaded" (exit 9).
    """

    def __init__(self, config: GpuConfig, *, ssh: tuple[SSHTarget, SSHOptions] | None = None,
                 pool: SSHPool | None = None, history: int = HISTORY,
                 clock: Callable[[], float] = time.time,
                 retry: tuple[float, float] = (1.0, 60.0),
                 missing_retry: tuple[float, float] = (60.0, 300.0),
                 healthy_after: float = 60.0) -> None:
        self.config = config
        self.ssh = ssh
        self.pool = pool if pool is not None or ssh is None else default_pool()
        self.host = ("local" if ssh is None else
                     f"{ssh[0].user + '@' if ssh[0].user else ''}{ssh[0].host}"
                     f"{':' + str(ssh[0].port) if ssh[0].port else ''}")
        self.clock = clock
        self.log = log.get("source.gpu").bind(host=self.host)
        self.latest: GpuSnapshot | None = None
        self.power_history: deque[tuple[float, float]] = deque(maxlen=history)
        # total memory used of the host's GPUs: memory still moving in a silent phase is
        # loading (see silence.py for the verdict on a silence)
        self.memory_history: deque[tuple[float, float]] = deque(maxlen=history)
        # every GPU's samples (the silence verdict reads them per GPU: silence.py), and each
        # GPU's idle power: the lowest it drew at utilisation <= IDLE_UTIL since the start
        self.snapshots: deque[GpuSnapshot] = deque(maxlen=max(history, SNAPSHOTS))
        self.idle_w: dict[int, float] = {}
        self.up = False
        self.status = "starting nvidia-smi"
        self.error: str | None = None
        self.fields: tuple[str, ...] = FULL_FIELDS
        self.counters = GpuCounters()
        self.version = 0                  # +1 per snapshot and per status change
        self._retry = Backoff(base=retry[0], cap=retry[1])
        self._missing = Backoff(base=missing_retry[0], cap=missing_retry[1])
        self._healthy_after = healthy_after
        self._retry_at: float | None = None
        self._proc: _Proc | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._pty = True                  # remote: run on a pty (see _RemoteProc)

    # -- what readers use ------------------------------------------------------------------

    @property
    def minimal(self) -> bool:
        """True after the driver rejected a field and the stream fell back."""
        return self.fields == MINIMAL_FIELDS

    @property
    def pid(self) -> int | None:
        """The local nvidia-smi's pid (None when remote or not running)."""
        return self._proc.pid if self._proc is not None else None

    def power_values(self) -> list[float]:
        """Total watts of the last snapshots, oldest first (the sparkline's points)."""
        return [w for _, w in self.power_history]

    def next_retry_in(self) -> float | None:
        """Seconds until the next start while waiting after a failure (None otherwise)."""
        if self._retry_at is None:
            return None
        return max(0.0, self._retry_at - time.monotonic())

    def summary(self) -> str:
        """The panel's line while up; the status otherwise."""
        return gpu_summary(self.latest) if self.up and self.latest else f"GPU: {self.status}"

    def to_dict(self) -> dict[str, Any]:
        """For /api/status: state and the latest snapshot (None while down)."""
        return {"host": self.host, "up": self.up, "status": self.status, "error": self.error,
                "fields": "minimal" if self.minimal else "full",
                "restarts": self.counters.restarts,
                "snapshot": self.latest.to_dict() if self.up and self.latest else None,
                "power_history_w": self.power_values(),
                "memory_history": [[round(t, 1), m] for t, m in self.memory_history],
                "idle_w": {str(i): round(w, 1) for i, w in sorted(self.idle_w.items())}}

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the stream's task (needs a running event loop); idempotent."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._main(),
                                                                name=f"gpu:{self.host}")

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop and kill nvidia-smi; waits for the task (cancels it after `timeout`)."""
        self._closed = True
        self._wake.set()
        if self._proc is not None:
            self._proc.kill()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(task, timeout)
            except asyncio.TimeoutError:
                pass
            except Exception as e:  # noqa: BLE001 - already logged by _main
                self.log.debug("gpu stream ended with an error", error=repr(e))
        self._set(False, "stopped")

    # -- internals -------------------------------------------------------------------------

    def _set(self, up: bool, status: str, error: str | None = None) -> None:
        if (up, status, error) != (self.up, self.status, self.error):
            self.up, self.status, self.error = up, status, error
            self.version += 1

    def _publish(self, snap: GpuSnapshot) -> None:
        self.latest = snap
        total = snap.total_power_w
        if total is not None:
            self.power_history.append((snap.at, total))
        mem = [g.mem_used_bytes for g in snap.gpus if g.mem_used_bytes is not None]
        if mem:
            self.memory_history.append((snap.at, float(sum(mem))))
        self.snapshots.append(snap)
        learn_idle(self.idle_w, snap)
        self.counters.snapshots += 1
        self.version += 1
        status = f"{snap.count} GPU{'s' if snap.count != 1 else ''}"
        if self.minimal:
            status += " (minimal fields: old driver)"
        self._set(True, status)

    async def _sleep(self, seconds: float) -> None:
        self._retry_at = time.monotonic() + seconds
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass
        finally:
            self._retry_at = None
        self._wake.clear()

    async def _spawn(self, fields: Sequence[str]) -> _Proc:
        argv = self.config.argv + query_args(fields, self.config.interval)
        if self.ssh is None:
            return await _LocalProc.start(argv)
        assert self.pool is not None
        target, opts = self.ssh
        conn, _ = await self.pool.get(target, opts)
        command = shlex.join(argv)
        if self._pty:
            try:
                # stdin stays an open pipe that is never written: EOF on a pty is a ^D
                return _RemoteProc(await conn.create_process(
                    command, term_type="dumb", stderr=asyncssh.STDOUT, encoding=None))
            except asyncssh.ChannelOpenError as e:
                if "PTY" not in str(e.reason):
                    raise
                self._pty = False   # PermitTTY no: a hung command may outlive its session
                self.log.info("gpu: the server refuses a pty; a hung nvidia-smi can only be "
                              "signalled", reason=e.reason)
        return _RemoteProc(await conn.create_process(
            command, stdin=asyncssh.DEVNULL, stderr=asyncssh.STDOUT, encoding=None))

    async def _main(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug here must not take the daemon down
            self.log.exception("gpu stream failed")
            self._set(False, "gpu telemetry failed", repr(e))
        finally:
            if self._proc is not None:
                self._proc.kill()
                self._proc = None

    async def _loop(self) -> None:
        cmd = self.config.argv[0] if self.config.argv else "nvidia-smi"
        while not self._closed:
            started = time.monotonic()
            try:
                self._proc = await self._spawn(self.fields)
            except _Missing:
                await self._wait_missing(f"{cmd}: command not found")
                continue
            except PermissionError as e:
                await self._wait_missing(f"cannot run {cmd}: {e.strerror}",
                                         status=f"cannot run {cmd}: permission denied")
                continue
            except (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied,
                    NoSFTPSubsystem) as e:
                # the log target reports these itself; retrying fast would change nothing
                assert self.ssh is not None
                await self._wait_missing(explain(e, *self.ssh), status="cannot connect",
                                         quiet=True)
                continue
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
                why = explain(e, *self.ssh) if self.ssh else f"{type(e).__name__}: {e}"
                delay = self._retry.next()
                self._set(False, "cannot connect" if self.ssh else f"cannot run {cmd}", why)
                # over SSH the log's own source says why the host cannot be reached
                (self.log.debug if self.ssh else self.log.warning)(
                    "gpu: cannot start nvidia-smi", error=why, retry_in=round(delay, 1))
                await self._sleep(delay)
                continue
            self.counters.starts += 1
            proc = self._proc
            try:
                end = await self._read(proc)
            finally:
                proc.kill()
                self._proc = None
            if self._closed:
                return
            await self._after(end, cmd, time.monotonic() - started)

    async def _wait_missing(self, why: str, status: str = STATUS_MISSING,
                            quiet: bool = False) -> None:
        """`quiet`: the log target's own source reports the cause (a refused host key):
        said once there, not again here."""
        delay = self._missing.next()
        self._set(False, status, why)
        (self.log.debug if quiet else self.log.warning)("gpu: " + status, error=why,
                                                        retry_in=fmt_duration(delay))
        await self._sleep(delay)

    async def _after(self, end: _RunEnd, cmd: str, ran: float) -> None:
        """Decide what a finished run means and wait before the next one."""
        head = end.head.decode("utf-8", "replace")
        first_line = next((ln.strip() for ln in head.splitlines() if ln.strip()), "")
        bad = invalid_field(head) if end.code == 2 else None
        if end.samples and ran > self._healthy_after:
            self._retry.reset()
        if end.samples:
            self._missing.reset()
        if bad is not None:
            if not self.minimal and bad not in MINIMAL_FIELDS:
                self.counters.fallbacks += 1
                self.fields = MINIMAL_FIELDS
                self._set(False, "old driver: asking for the minimal field set",
                          f'the driver does not know "{bad}"')
                self.log.warning("gpu: nvidia-smi rejected a field; using the minimal set",
                                 field=bad, fields=",".join(MINIMAL_FIELDS))
                return  # at once: the process never ran a loop
            await self._wait_missing(f'nvidia-smi rejects the field "{bad}" '
                                     f"(fields: {','.join(self.fields)})",
                                     status=f'nvidia-smi rejects field "{bad}"')
            return
        if end.code == 127 or (end.code not in (0, None) and not end.samples
                               and _NOT_FOUND_RE.search(head)):
            await self._wait_missing(first_line or f"{cmd}: exit status 127")
            return
        if end.code == 126 and not end.samples:
            await self._wait_missing(first_line or f"{cmd}: exit status 126",
                                     status=f"cannot run {cmd}: permission denied")
            return
        if not end.samples:
            for code, said, status in _NOTHING_TO_REPORT:
                if end.code == code or said.search(head):
                    await self._wait_missing(first_line or f"{cmd}: exit status {end.code}",
                                             status=status)
                    return
        self.counters.restarts += 1
        delay = self._retry.next()
        if end.hung:
            self.counters.hangs += 1
            why = f"no sample for {fmt_duration(self.config.timeout)}: killed"
            self._set(False, STATUS_HUNG, why)
            self.log.warning("gpu: nvidia-smi hung; killed it", timeout=self.config.timeout,
                             restart_in=round(delay, 1), restarts=self.counters.restarts)
        elif end.lost is not None:
            self._set(False, "connection lost", end.lost)
            self.log.warning("gpu: connection lost", error=end.lost, restart_in=round(delay, 1))
        else:
            why = f"exited with {end.code}" + (f": {first_line[:200]}" if first_line else "")
            self._set(False, f"nvidia-smi {why[:120]}", why)
            self.log.warning("gpu: nvidia-smi exited", code=end.code, output=first_line[:200],
                             restart_in=round(delay, 1))
        await self._sleep(delay)

    async def _read(self, proc: _Proc) -> _RunEnd:
        """Read one process until it ends or the watchdog fires; publish its snapshots."""
        parser = GpuCsvParser(self.fields, clock=self.clock)
        end = _RunEnd()
        head = bytearray()
        loop = asyncio.get_running_loop()
        last_useful = loop.time()
        timeout = self.config.timeout
        # a loop's rows come in a burst: a pause this long completes the first loop
        settle = min(1.0, max(0.05, self.config.interval / 2))
        reader: asyncio.Future[bytes] = asyncio.ensure_future(proc.read(READ_SIZE))
        try:
            while not self._closed:
                left = timeout - (loop.time() - last_useful)
                if left <= 0:
                    end.hung = True
                    break
                wait = min(left, settle) if parser.pending and not parser.has_partial_line else left
                done, _ = await asyncio.wait({reader}, timeout=wait)
                if not done:
                    if parser.pending and not parser.has_partial_line:
                        snap = parser.flush()
                        if snap is not None:
                            self._publish(snap)
                            end.samples += 1
                    continue
                try:
                    chunk = reader.result()
                except (OSError, asyncssh.Error, EOFError) as e:
                    end.lost = explain(e, *self.ssh) if self.ssh else repr(e)
                    break
                if not chunk:
                    break
                if len(head) < 4096:
                    head += chunk[: 4096 - len(head)]
                before = (parser.rows, parser.headers)
                for snap in parser.feed(chunk):
                    self._publish(snap)
                    end.samples += 1
                if (parser.rows, parser.headers) != before:
                    last_useful = loop.time()
                reader = asyncio.ensure_future(proc.read(READ_SIZE))
            if not end.hung and not self._closed:
                for snap in parser.finish():
                    self._publish(snap)
                    end.samples += 1
        finally:
            if not reader.done():
                reader.cancel()
            self.counters.skipped_lines += parser.skipped
            self.counters.oversized_lines += parser.oversized
        end.head = bytes(head)
        if end.hung or self._closed or end.lost is not None:
            proc.kill()
        try:
            end.code = await asyncio.wait_for(proc.wait(), 5.0)
        except (asyncio.TimeoutError, OSError, asyncssh.Error):
            end.code = None
        return end


# ----------------------------------------------------------------------------------------------
# one stream per host


@dataclass
class _Entry:
    stream: GpuStream
    refs: int = 0
    config: GpuConfig = field(default_factory=GpuConfig)


class GpuStreams:
    """The registry: one `GpuStream` per host, shared by every target of that host.

    Keyed by 'local' or by `SSHPool.key(target, options)` (user, host, port, options: the
    same key that shares the SSH connection, so a stream runs on the connection its log
    targets use).  `acquire` starts the stream on first use; `release` stops it when the last
    target lets go.  The first target's config wins; a later, different one is logged."""

    def __init__(self, pool: SSHPool | None = None, **stream_kw: Any) -> None:
        self.pool = pool
        self._stream_kw = stream_kw
        self._entries: dict[Any, _Entry] = {}
        self.log = log.get("source.gpu")

    def key(self, ssh: tuple[SSHTarget, SSHOptions] | None) -> Any:
        if ssh is None:
            return "local"
        return ("ssh",) + SSHPool.key(*ssh)

    def acquire(self, config: GpuConfig,
                ssh: tuple[SSHTarget, SSHOptions] | None = None) -> GpuStream:
        """The host's stream (started if new), with one more reference.  Needs a running
        event loop.  `ssh`: the target and options of an ssh:// log; None: this machine."""
        key = self.key(ssh)
        entry = self._entries.get(key)
        if entry is None:
            pool = self.pool if self.pool is not None else (default_pool() if ssh else None)
            stream = GpuStream(config, ssh=ssh, pool=pool, **self._stream_kw)
            entry = self._entries[key] = _Entry(stream, 0, config)
            stream.start()
        elif config != entry.config:
            self.log.info("gpu: host already streams with another gpu config; sharing it",
                          host=entry.stream.host, using=entry.config.to_dict(),
                          asked=config.to_dict())
        entry.refs += 1
        return entry.stream

    async def release(self, stream: GpuStream) -> None:
        """One reference less; the last one stops the stream (and kills nvidia-smi)."""
        for key, entry in list(self._entries.items()):
            if entry.stream is stream:
                entry.refs -= 1
                if entry.refs <= 0:
                    del self._entries[key]
                    await stream.stop()
                return

    def refs(self, stream: GpuStream) -> int:
        return next((e.refs for e in self._entries.values() if e.stream is stream), 0)

    def streams(self) -> list[GpuStream]:
        return [e.stream for e in self._entries.values()]

    async def close(self) -> None:
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(e.stream.stop() for e in entries), return_exceptions=True)


__all__ = [
    "ABSENT_VALUES", "FULL_FIELDS", "HISTORY", "MINIMAL_FIELDS", "POWER_CAP_REASONS",
    "STATUS_HUNG", "STATUS_MISSING", "STATUS_NO_DRIVER", "STATUS_NO_GPUS", "THERMAL_REASONS", "THROTTLE_BITS", "THROTTLE_REASONS",
    "GpuConfig", "GpuCounters", "GpuCsvParser", "GpuSample", "GpuSnapshot", "GpuStream",
    "GpuStreams", "canonical_field", "decode_throttle", "gpu_summary", "host_time",
    "invalid_field", "parse_csv", "parse_gpu_config", "plan_gpu", "query_args",
    "sample_from_row",
]
