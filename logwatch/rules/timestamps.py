"""Log timestamps -> seconds, for phase durations measured by the server's own clock.

Engines print local time without a zone: SGLang `YYYY-mm-dd HH:MM:SS` (time only in 0.3.0),
vLLM `MM-DD HH:MM:SS` with no year.  The pack lists its formats as patterns with named groups
Y m d H M S f.  Only differences matter, so the value is "seconds since an arbitrary epoch":
a missing year is taken as 2000 (a leap year, so Feb 29 parses) and bumped when the date
jumps back by months (a log running over New Year); a missing date is day 0, bumped when the
time jumps back by hours (a log running over midnight).
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass

from .pack import TimestampFormat

STAMP_WITHIN = 512          # a line's own timestamp is near its start: look no further
PATTERN_TIMEOUT = 0.01

_YEAR_DEFAULT = 2000
_HALF_YEAR = 183 * 86400.0
_HALF_DAY = 12 * 3600.0


@dataclass(slots=True)
class Stamp:
    seconds: float
    text: str
    own: bool = True   # False: carried forward from an earlier line


class LogClock:
    """Parses timestamps and carries the last one forward to lines that have none."""

    def __init__(self, formats: tuple[TimestampFormat, ...]) -> None:
        self.formats = formats
        self.last: Stamp | None = None
        self._last_raw: str | None = None
        self._year = _YEAR_DEFAULT   # the last explicit year seen (for MM-DD stamps)
        self._year_offset = 0        # New Year crossings since then
        self._midnight = 0.0         # the last date seen (for time-only stamps)

    def stamp(self, text: str) -> Stamp | None:
        """The timestamp of `text` if it has one, else the last one seen (None before any)."""
        for fmt in self.formats:
            try:
                m = fmt.regex.search(text[:STAMP_WITHIN], timeout=PATTERN_TIMEOUT)
            except TimeoutError:
                continue
            if m is None:
                continue
            raw = m.group(0)
            if raw == self._last_raw and self.last is not None:
                return self.last  # the same second as the previous line: nothing to compute
            try:
                secs = self._seconds(m.groupdict())
            except (ValueError, OverflowError):
                continue
            self.last = Stamp(secs, _stamp_text(m.groupdict()))
            self._last_raw = raw
            return self.last
        if self.last is None:
            return None
        return Stamp(self.last.seconds, self.last.text, own=False)

    def _seconds(self, g: dict[str, str | None]) -> float:
        h, mi, s = int(g["H"] or 0), int(g["M"] or 0), int(g["S"] or 0)
        frac = float("0." + g["f"]) if g.get("f") else 0.0
        if not (0 <= h < 24 and 0 <= mi < 60 and 0 <= s <= 60):
            raise ValueError("time out of range")
        tod = h * 3600 + mi * 60 + s + frac
        last = self.last.seconds if self.last is not None else None
        if g.get("m") and g.get("d"):
            month, day = int(g["m"]), int(g["d"])
            if g.get("Y"):
                self._year = int(g["Y"])
                self._year_offset = 0
                midnight = calendar.timegm((self._year, month, day, 0, 0, 0))
            else:
                year = self._year + self._year_offset
                midnight = calendar.timegm((year, month, day, 0, 0, 0))
                if last is not None and midnight + tod < last - _HALF_YEAR:
                    self._year_offset += 1
                    midnight = calendar.timegm((year + 1, month, day, 0, 0, 0))
            if not (1 <= month <= 12 and 1 <= day <= 31):
                raise ValueError("date out of range")
            self._midnight = float(midnight)
            return self._midnight + tod
        secs = self._midnight + tod
        if last is not None and secs < last - _HALF_DAY:
            self._midnight += 86400.0
            secs += 86400.0
        return secs


def _stamp_text(g: dict[str, str | None]) -> str:
    date = "-".join(p for p in (g.get("Y"), g.get("m"), g.get("d")) if p)
    time_ = f"{g['H']}:{g['M']}:{g['S']}" + (f".{g['f']}" if g.get("f") else "")
    return f"{date} {time_}" if date else time_
