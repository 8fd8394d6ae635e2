"""Log timestamps -> seconds, for phase durations measured by the server's own clock.

Engines print local time without a zone: SGLang `YYYY-mm-dd HH:MM:SS` (time only in 0.3.0),
vLLM `MM-DD HH:MM:SS` with no year.  The pack lists its formats as patterns with named groups
Y m d H M S f.  Only differences matter, so the value is "seconds since an arbitrary epoch",
but one log has one clock: stamps with a year and without agree (vLLM's year-less lines and
FlashInfer's `2026-12-01 10:00:30,456` in one stream).  A year-less stamp takes the year of
the log's own year-bearing stamps, else the year it is given (the file's time), else this
year's; bumped when the date jumps back by months (a log running over New Year).  When a
year-bearing stamp comes after year-less ones that were placed in a guessed year, the guess
stays the frame: the year-bearing stamps are placed in it (the year nearest to the clock).
A missing date is day 0, bumped when the time jumps back by hours (a log running over
midnight).

Lines without a timestamp are placed by their neighbours: a tqdm bar frame
(`name:  45%|...| 2.2G/4.9G [00:20<00:24, ...]`) at the time its bar began plus its elapsed
time, a bar beginning where the clock stands (the last stamped line, or the end of the bar
before it); other lines where the clock stands.  So a download bar followed by a shard bar,
with no stamped line between, each get their own share of the time.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from typing import Any

from . import bounded
from .bars import bar_frame, bar_title
from .literals import anchored_head
from .matcher import NO_STAMP, STAMP_WITHIN, char_test
from .pack import TimestampFormat, pattern_literals

PATTERN_TIMEOUT = 0.01

_HALF_YEAR = 183 * 86400.0
_HALF_DAY = 12 * 3600.0
MAX_BARS = 64               # bars whose start is remembered (a log may print many)
MAX_SAME_BARS = 16          # bars of one description running at once (`-dp 8`: 8 captures)
MAX_RANK_BARS = 1024        # ranks whose bar of one description is remembered (BarClock)
_DONE = re.compile(r"(?<![\d.])100%")   # a frame of a bar that ended
ZONE_SLACK = 60.0           # seconds a line's engine stamp may be from its wrapper's zone

# A wrapper's absolute stamp at the start of a line: RFC 3339 with its zone (kubectl's and
# docker's `--timestamps`, the kubelet's CRI records, journald JSON's read as those, `aws logs
# tail`'s `+00:00`, journalctl's short-iso `+0300`).  An engine's own stamp has no zone.
_ZONED = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(?:(Z)|([+-])(\d\d):?(\d\d))[ \t]")


def zoned_seconds(text: str) -> float | None:
    """The wall time (seconds since the Unix epoch) of the zone-bearing RFC 3339 stamp that
    starts `text`, its offset taken into account; None where there is none (no zone: the
    server's zone is unknown, so it dates nothing)."""
    m = _ZONED.match(text)
    if m is None:
        return None
    Y, mo, d, H, M, S, frac, z, sign, oh, om = m.groups()
    try:
        secs = calendar.timegm((int(Y), int(mo), int(d), int(H), int(M), int(S)))
    except (ValueError, OverflowError):
        return None
    if not (1 <= int(mo) <= 12 and 1 <= int(d) <= 31 and int(H) < 24 and int(M) < 60):
        return None
    if z is None:
        off = int(oh) * 3600 + int(om) * 60
        secs -= off if sign == "+" else -off
    return secs + (float(frac) if frac else 0.0)


def _case_sensitive_literals(pattern: str) -> tuple[str, ...] | None:
    """One of these is in every match of `pattern` (None: no such case-sensitive set)."""
    lits = pattern_literals(pattern)
    return None if lits is None or lits.ignore_case else tuple(sorted(lits.strings))


def _holds_one(text: str, lits: tuple[str, ...]) -> bool:
    for s in lits:     # a loop, not any(): this runs on every unstamped line
        if s in text:
            return True
    return False


@dataclass(slots=True)
class Stamp:
    seconds: float
    text: str
    own: bool = True   # False: carried forward from an earlier line
    # a bar frame placed on one of several live bars of its description: where the bar's
    # later frames go (`bar_run`: the nearest to the clock) depends on every frame between,
    # so a `BarRun` may not skip them (rules/bars.py)
    shared_bar: bool = False


class LogClock:
    """Parses timestamps and carries the last one forward to lines that have none."""

    def __init__(self, formats: tuple[TimestampFormat, ...], year: int | None = None,
                 written: float | None = None, ranks: tuple[Any, ...] = ()) -> None:
        self.formats = formats
        self.last: Stamp | None = None
        self._last_raw: str | None = None
        self._fields: tuple[dict[str, str | None], Stamp] | None = None   # `_stamped`'s last
        # the year of MM-DD stamps: the last explicit year seen, else the one given, else the
        # year the file was last `written` (its mtime), else now's
        self._year = year if year is not None else \
            time.gmtime(written if written is not None else time.time()).tm_year
        # a year-less first stamp is placed by when the log was written (not where a year
        # was given): the file's mtime, else now
        self._place_first = year is None
        self._written = written
        self._year_offset = 0        # New Year crossings since then
        self._year_known = False     # a year-bearing stamp has fixed the frame
        self._yearless = False       # a year-less stamp was placed in the guessed year
        self._year_shift = 0         # the frame's year minus the year a stamp prints
        self._outlier = False        # the stamp being read is years away from the clock
        self._midnight = 0.0         # the last date seen (for time-only stamps)
        self._now: float | None = None  # where the clock stands (stamps, ends of bars)
        # the newest wall time a wrapper's zone-bearing stamp gave (`zoned_seconds`): the log's
        # last write where its source has no file time (a `cmd:`), catchup.py
        self.newest_zoned: float | None = None
        self._zone = WrapperZone()    # a zoned wrapper's clock and the engine's local one
        self._bars = BarClock(ranks)  # where each bar began (`ranks`: the pack's rank tags)
        # a format anchored at the start: the class of its first character (one cheap call
        # rules out a line's other formats, each a bounded search otherwise); a format with
        # required literals (vLLM's level names): one of them must be in the line first
        self._plan = [(f.regex, char_test(anchored_head(f.regex.pattern), f.regex.flags),
                       _case_sensitive_literals(f.regex.pattern)) for f in formats]

    def stamp(self, text: str, wrapped: tuple[str, ...] = (), first: Any = NO_STAMP
              ) -> Stamp | None:
        """The timestamp of `text` if it has one, else the last one seen (None before any).
        `wrapped`: the line as written and as each wrapper came off it (`text` is what is
        left), looked at first, outermost first: a wrapper's own stamp (kubectl's, another
        logger's) is found first, and a stamp anchored at the start of the server's line
        (`^[2026-...` behind docker compose's `svc-1  | `) is still found in `text`.
        `first`: what the pack's first format found in `text` when the matcher looked for
        it with the rule (`Hit.ts`: (raw, groups) or None), instead of a search of its own."""
        # the pack's order of formats first (it prefers a stamp with a year), then outermost
        places = (*wrapped, text) if wrapped else (text,)
        zoned, zoned_at = self._note_zoned(wrapped) if wrapped else (None, None)
        for k, (rx, head, lits) in enumerate(self._plan):
            if k == 0 and first is not NO_STAMP and not wrapped:
                if first is not None:
                    raw, groups, names = first
                    stamp = self._repeated(raw) or \
                        self._stamped(raw, {name: groups[i] for name, i in names})
                    if stamp is not None:
                        return stamp
                continue
            for where in places:
                if head is not None and head(where, 0, 1) is None:
                    continue    # anchored at the start, and the first character rules it out
                if lits is not None and not _holds_one(where, lits):
                    continue    # none of the words it needs (a tqdm frame: no level name)
                try:
                    m = bounded.search(rx, where[:STAMP_WITHIN], PATTERN_TIMEOUT)
                except TimeoutError:
                    continue
                if m is None:
                    continue
                raw = m.group(0)
                if zoned is not None and m.start() == 0 and where is zoned_at:
                    stamp = self._repeated(raw) or self._taken(self._zone.alone(zoned), raw)
                else:
                    stamp = self._repeated(raw)
                    if stamp is None:
                        stamp = self._stamped(raw, m.groupdict())
                        if stamp is not None and zoned is not None and stamp is self.last:
                            stamp = self._taken(self._zone.both(stamp, zoned))
                if stamp is not None:
                    return stamp
        if self.last is None:
            return None
        placed, shared = self._bar_time(text)
        if placed is None:
            # where the clock stands: after a bar, its end (a bare `Model init total -- 49s`
            # printed when an unstamped 46 s bar finished is not at the stamp before the bar)
            placed = self.last.seconds if self._now is None else max(self.last.seconds, self._now)
        return Stamp(placed, self.last.text, own=False, shared_bar=shared)

    def _note_zoned(self, wrapped: tuple[str, ...]) -> tuple[float | None, str | None]:
        """The wall time of the line's wrapper stamp and the place it starts (the outermost
        that has one), kept when it is the newest."""
        for where in wrapped:
            if where[:1].isdigit():
                t = zoned_seconds(where)
                if t is not None:
                    if self.newest_zoned is None or t > self.newest_zoned:
                        self.newest_zoned = t
                    return t, where
        return None, None

    def _taken(self, stamp: Stamp, raw: str | None = None) -> Stamp:
        """`stamp` is where the clock stands now (`raw`: the match it came from)."""
        self.last = stamp
        if raw is not None:
            self._last_raw = raw
        self._now = stamp.seconds
        return stamp

    def _repeated(self, raw: str) -> Stamp | None:
        """The last stamp again when `raw` (a format's whole match) is the one it came from:
        the same second as the previous line, nothing to compute."""
        if raw == self._last_raw and self.last is not None:
            self._now = self.last.seconds
            return self.last
        return None

    def _stamped(self, raw: str, fields: dict[str, str | None]) -> Stamp | None:
        """The stamp a format's match gives (None: not a valid date or time): `raw` the
        whole match, `fields` its named groups.  The last stamp taken again for its fields
        (`_seconds` of them, the clock where they put it, changes nothing): another rank's
        line in the same second, `[... TP3]` after `[... TP5]`, which `_repeated` misses."""
        self._outlier = False
        last = self._fields
        if last is not None and self.last is last[1] and fields == last[0]:
            return self._taken(last[1], raw)
        self._fields = None
        try:
            secs = self._seconds(fields)
        except (ValueError, OverflowError):
            return None
        stamp = Stamp(secs, _stamp_text(fields))
        if self._outlier:
            return stamp
        self._fields = (fields, stamp)    # (the caller's own dict: built for this call)
        return self._taken(stamp, raw)

    def _bar_time(self, text: str) -> tuple[float | None, bool]:
        """A tqdm frame's time (`BarClock.place`; None: not a frame, or no clock yet); and
        whether another bar of its description is live beside its own (`Stamp.shared_bar`)."""
        if self._now is None or self.last is None:
            return None, False
        placed = self._bars.place(text, self._now, self.last.seconds)
        if placed is None:
            return None, False
        self._now = max(self._now, placed[0])
        return placed

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
                year = int(g["Y"])
                if not self._year_known:
                    self._year_known = True
                    if self._yearless and last is not None:
                        guess = self._year + self._year_offset
                        self._year_shift = frame_year(guess, month, day, tod, last) - year
                framed = year + self._year_shift
                if abs(framed - (self._year + self._year_offset)) <= 1:
                    self._year, self._year_offset = framed, 0
                else:
                    # years away from the log's clock: it moves nothing here (the machine
                    # does not trust it either, machine/startup.py `_trust`)
                    self._outlier = True
                midnight = calendar.timegm((framed, month, day, 0, 0, 0))
            else:
                if not self._yearless and last is None and self._place_first:
                    self._year = first_year(self._year, month, day, tod, self._written
                                            if self._written is not None else time.time())
                self._yearless = True
                year = self._year + self._year_offset
                if (month, day) == (2, 29) and not calendar.isleap(year):
                    self._year -= year - _leap_year_before(year)     # a leap year's log
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


def first_year(year: int, month: int, day: int, tod: float, written: float) -> int:
    """The year of a log's first stamp, year-less, guessed as `year` (the one the log was
    last written: the file's mtime; now): where that puts it half a year or more after the
    write, it is of the year before: a December log copied or read in January (it was dated
    11 months ahead: `history` 2027-12-04 for a launch of 2026-12-04).  Not for less: an
    mtime a few days before the lines (`touch -d`, an archive's) is no year's change."""
    if (month, day) == (2, 29) or not 1 <= month <= 12 or not 1 <= day <= 31:
        return year
    try:
        if calendar.timegm((year, month, day, 0, 0, 0)) + tod > written + _HALF_YEAR:
            return year - 1
    except (ValueError, OverflowError):
        pass
    return year


def frame_year(guess: int, month: int, day: int, tod: float, last: float) -> int:
    """The year, near the guessed one, in which month-day-time is nearest to `last`."""
    return min((guess - 1, guess, guess + 1),
               key=lambda y: abs(calendar.timegm((y, month, day, 0, 0, 0)) + tod - last))


def _frame_of(runs: list[list[Any]], bar: list[Any] | None, elapsed: int, start: float,
              done: bool) -> list[Any]:
    """The bar this frame moves on (`bar`, `bar_run`'s), or a new one that began at `start`,
    its first frame seen its elapsed time after that (0 for a bar seen from its first
    frame).  The latest goes last; those that ended are let go (the latest may show its end
    again)."""
    if bar is None:
        bar = [start, elapsed, done]
    else:
        runs.remove(bar)
    bar[1], bar[2] = elapsed, done
    runs[:] = [r for r in runs if not r[2]][-(MAX_SAME_BARS - 1):] + [bar]
    return bar


def bar_run(runs: list[list[Any]], elapsed: int, now: float) -> list[Any] | None:
    """Which bar of one description a frame of `elapsed` seconds is, of `runs` (each [its
    start, last elapsed, ended], the latest last); None: a new bar.  The latest, as long as
    the frame does not go back from it (by more than 2 s), unless another bar still running
    puts the frame nearer where the clock stands (a frame is printed when it happens): the
    DP engines of `vllm serve -dp 8` print their capture bars at once, interleaved, and read
    as one bar, each other engine's frame began it again at the clock, which then moved on by
    that frame's elapsed time (20 minutes of a 2.5-minute startup)."""
    def off(run: list[Any]) -> float:
        return abs(run[0] + elapsed - now)
    latest = runs[-1] if runs and elapsed >= runs[-1][1] - 2 else None
    best = min((r for r in runs if not r[2] and elapsed >= r[1] - 2), key=off, default=None)
    if latest is not None and (best is None or off(latest) <= off(best)):
        return latest
    return best


def _leap_year_before(year: int) -> int:
    """The nearest leap year not after `year` (a year-less 29 February is of one)."""
    while not calendar.isleap(year):
        year -= 1
    return year


class BarClock:
    """Where a tqdm frame happened: its bar's start plus its elapsed time.  A bar begins where
    the clock stands (`now`: the last stamp, or the end of the bar before it), unless another
    rank drew the same bar (its description word for word past the rank's tag, `ranks`: the
    pack's patterns) since the last stamped line (`floor`): the ranks ran it side by side,
    printed interleaved or one rank's bars after the other's, and it began with theirs.
    Before, vLLM 0.11's DeepGEMM warmup (a bar per weight shape on every rank) printed TP0's
    four bars before TP1's four was read as eight in a row: autotune 1m14s for 37 s, and the
    capture placed after ready (cuda_graph 0 s, total 2m40s for a startup ready at 2m32s)."""

    def __init__(self, ranks: tuple[Any, ...] = ()) -> None:
        self.ranks = ranks
        self.runs: dict[str, list[list[Any]]] = {}  # bar -> [start, last elapsed, ended] each
        self.peers: dict[str, dict[str, float]] = {}  # description past the tag -> rank -> start

    def place(self, text: str, now: float, floor: float) -> tuple[float, bool] | None:
        """The frame's time, and whether another bar of its description is live beside its
        own; None: not a frame."""
        frame = bar_frame(text)
        if frame is None:
            return None
        key, elapsed = frame
        runs = self.runs.get(key)
        if runs is None:
            if len(self.runs) >= MAX_BARS:
                self.runs.pop(next(iter(self.runs)))
            runs = self.runs[key] = []
        found = bar_run(runs, elapsed, now)
        start = now if found is not None else self._begins(text, now, floor)
        bar = _frame_of(runs, found, elapsed, start, _DONE.search(text) is not None)
        return bar[0] + elapsed, len(runs) > 1

    def _begins(self, text: str, now: float, floor: float) -> float:
        """Where a new bar of `text` began: where another rank's same bar began, if it began
        at `floor` or after (no stamped line since) and this rank drew none of it since; else
        `now`, and the bar starts a round of its own."""
        tagged = self._tagged(text)
        if tagged is None:
            return now
        rank, title = tagged
        seen = self.peers.get(title)
        if seen is not None and rank not in seen and len(seen) < MAX_RANK_BARS:
            start = min(seen.values())
            if start >= floor:
                seen[rank] = start
                return start
        if seen is None and len(self.peers) >= MAX_BARS:
            self.peers.pop(next(iter(self.peers)))
        self.peers[title] = {rank: now}
        return now

    def _tagged(self, text: str) -> tuple[str, str] | None:
        """The rank `text` is from and its bar's description past the rank's tag; None where
        it names no rank."""
        for rx in self.ranks:
            m = rx.match(text)
            if m is not None and m.group("rank"):
                title = bar_title(text[m.end():])
                return None if title is None else (m.group("rank"), title)
        return None


class WrapperZone:
    """One clock for a log whose wrapper stamps every line in RFC 3339 with a zone (kubectl's
    and docker's `--timestamps`, CRI records) while the engine prints its zone's local time
    with none: the wrapper's.  A line with both tells how far apart they are (the engine's
    zone); a line with only the wrapper's (a tqdm bar) is then shown in the engine's time.
    Read as two clocks, a server printing Pacific time under kubectl's UTC had its bars 7
    hours ahead of its own lines: "ready after 7h03m54s" for a 4-minute start."""

    def __init__(self) -> None:
        self.offset: float | None = None     # the engine's local time minus the wrapper's

    def alone(self, zoned: float) -> Stamp:
        """A line stamped only by its wrapper, at `zoned` (its wall time)."""
        shown = zoned if self.offset is None else zoned + self.offset
        text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(shown))
        return Stamp(zoned, text if self.offset is not None else text + "Z")

    def both(self, stamp: Stamp, zoned: float) -> Stamp:
        """The engine's own stamp of a line its wrapper stamped at `zoned`, on the wrapper's
        clock (its text the engine's)."""
        self.offset = _zone_offset(stamp.seconds - zoned)
        return Stamp(stamp.seconds - self.offset, stamp.text)


def _zone_offset(diff: float) -> float:
    """The engine's zone-less clock minus a wrapper's wall time, as one line with both says
    it: a zone's offset (a quarter hour's multiple) less the part of a second the engine's
    stamp leaves out and the wrapper's moment after; taken as the offset when that near."""
    zone = round(diff / 900.0) * 900.0
    return zone if abs(diff - zone) < ZONE_SLACK else diff


def _stamp_text(g: dict[str, str | None]) -> str:
    date = "-".join(p for p in (g.get("Y"), g.get("m"), g.get("d")) if p)
    time_ = f"{g['H']}:{g['M']}:{g['S']}" + (f".{g['f']}" if g.get("f") else "")
    return f"{date} {time_}" if date else time_
