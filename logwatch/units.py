"""Durations and moments as people write and read them (config values, the display, alert
texts), and the per-target switches of the config (`gpu:`, `probe:`)."""

from __future__ import annotations

import re
import time
from typing import Any, Mapping

TRUE_WORDS = {"true", "on", "yes"}
FALSE_WORDS = {"false", "off", "no", "none"}


def parse_switch(value: Any, *, where: str, keys: tuple[str, ...], example: str,
                 short: str) -> str | Mapping[str, Any]:
    """A per-target feature switch: None / "auto" -> "auto", false / "off" / ... -> "off",
    true / "on" / ... -> "on", or its settings: a mapping with only `keys` (returned as it
    is).  ValueError("WHERE: message") otherwise; `example` and `short` show the mapping in
    the message (with and without values)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        v = value.strip().lower()
        if v == "auto":
            return "auto"
        if v in FALSE_WORDS:
            return "off"
        if v in TRUE_WORDS:
            return "on"
        raise ValueError(f"{where}: expected auto, false, or a mapping {{{example}}}; "
                         f"got {value!r}")
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected auto, false, or a mapping {{{short}}}; "
                         f"got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        raise ValueError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(unknown)} (expected {', '.join(keys)})")
    return value

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


def parse_budget(text: str | float | int) -> float:
    """A duration that must be more than 0 (a stall budget, a poll interval: 0 fires at
    once).  Raises ValueError."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"more than 0s, not {text!r}")
    return seconds


def env_int(value: object) -> object:
    """A whole number written as text (a `${VAR}` expands to text: `port: ${SSH_PORT}`) as an
    int; any other value as it is (its own check says what is wrong with it)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


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


def fmt_clock(at: float, now: float, seconds: bool = True) -> str:
    """A moment on this machine's clock as the operator reads it: `12:37:17` today, with its
    day before it on another day (`Dec 04 12:37:17`: before, a log idle for two days said
    "idle since 12:37:17", read as today's)."""
    when, today = time.localtime(at), time.localtime(now)
    clock = "%H:%M:%S" if seconds else "%H:%M"
    same_day = (when.tm_year, when.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime(clock if same_day else f"%b %d {clock}", when)
