"""Durations as people write and read them (config values, the display, alert texts)."""

from __future__ import annotations

import re

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m(?!s))?\s*"
                             r"(?:(\d+(?:\.\d+)?)s)?\s*(?:(\d+)ms)?\s*$")


def parse_duration(text: str | float | int) -> float:
    """`90`, `90s`, `5m`, `1h30m`, `250ms` -> seconds. Raises ValueError."""
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError("negative duration")
        return float(text)
    t = text.strip()
    try:
        v = float(t)
        if v < 0:
            raise ValueError("negative duration")
        return v
    except ValueError:
        pass
    m = _DURATION_RE.match(t)
    if not t or not m or not any(m.groups()):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h30m)")
    h, mi, s, ms = m.groups()
    return float(h or 0) * 3600 + float(mi or 0) * 60 + float(s or 0) + float(ms or 0) / 1000

def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s"
