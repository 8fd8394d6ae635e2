"""One GPU at one instant (`GpuSample`), one loop of the host's GPUs (`GpuSnapshot`), and
the arithmetic on them that every reader shares: the clock-event bits, means over the GPUs
that report a value, the board's learned idle power.

Pure data, no I/O: the parser makes them, the stream keeps them, the silence verdict, the
ledger and the sinks read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


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

IDLE_UTIL = 0.05              # a GPU at this utilisation or less is idle: its power then is
                              # the board's idle power (learned per GPU, see GpuStream.idle_w)
MiB = 1024 * 1024



def decode_throttle(mask: int) -> frozenset[str]:
    """The names of the active clock-event reasons in an NVML bitmask."""
    return frozenset(name for bit, name in THROTTLE_BITS if mask & bit)




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
    bus_id: str | None = None                   # `pci.bus_id` (`00000000:E4:00.0`): the same
                                                # inside a container, where indexes are not

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

    `at` is this machine's clock when the rows arrived (logwatch's, clock.now()), not the host's
    printed timestamp: a remote host's local time has an unknown zone and clock offset.
    Offline parsing (no clock given) uses the printed timestamp read as local time."""

    at: float
    gpus: tuple[GpuSample, ...]
    #: what nvidia-smi printed in this loop instead of a GPU's row (`Unable to determine the
    #: device handle for GPU0000:3B:00.0: Unknown Error`: a GPU fallen off the bus)
    errors: tuple[str, ...] = ()

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
                "total_power_w": self.total_power_w, "errors": list(self.errors)}


def gone_gpus(seen: set[int], previous: GpuSnapshot | None, snap: GpuSnapshot) -> list[str]:
    """The GPUs no longer reported (helper adv24 M5: a GPU fallen off the bus, Xid 79, simply
    vanished from the set): those seen before but in neither of the last two loops (one
    loop cut in two by a pause is no loss), and nvidia-smi's lines for a GPU it cannot read
    in this loop.  Adds `snap`'s GPUs to `seen`."""
    now = {g.index for g in snap.gpus}
    before = {g.index for g in previous.gpus} if previous is not None else set()
    gone = sorted(seen - now - before)
    seen |= now
    return [f"GPU {i}" for i in gone] + list(snap.errors)


def learn_idle(idle_w: dict[int, float], snap: GpuSnapshot) -> None:
    """The board's own idle power, per GPU: the lowest power it drew while idle (utilisation
    <= IDLE_UTIL); a reading of 1 W or less is a broken sensor, not idle."""
    for g in snap.gpus:
        if g.util_ratio is not None and g.util_ratio <= IDLE_UTIL and \
                g.power_w is not None and g.power_w > 1.0:
            if g.index not in idle_w or g.power_w < idle_w[g.index]:
                idle_w[g.index] = g.power_w
