"""The watch panel's one line about a host's GPUs (`gpu_summary`), from a snapshot."""

from __future__ import annotations

from .sample import POWER_CAP_REASONS, THERMAL_REASONS, GpuSnapshot

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


