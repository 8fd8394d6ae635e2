"""Progress counters and their rates: tqdm's rate field, smoothed rates, time left."""

from __future__ import annotations

import re
from dataclasses import dataclass

RATE_SMOOTHING = 0.3          # EWMA weight of a new shard-rate sample


def phase_left(typical: float, elapsed: float) -> float:
    """Seconds left in a phase that usually takes `typical` and has run for `elapsed`: it
    counts down to a tenth of `typical`, then grows by half of every further second (a phase
    running late is not about to end: the ETA grows in a stall instead of freezing)."""
    if typical <= 0:
        return 0.0             # nothing to scale by (a phase the history never saw)
    if elapsed <= 0.9 * typical:
        return typical - elapsed
    return 0.1 * typical + 0.5 * (elapsed - 0.9 * typical)


@dataclass(slots=True)
class ProgressState:
    """A named counter such as `shards`: k/N with a smoothed rate (items per second)."""

    current: int
    total: int
    rate: float | None = None
    updated_at: float = 0.0
    updated_log: float | None = None   # only when the frame had its own timestamp

    def remaining_seconds(self, now: float | None = None) -> float | None:
        """Seconds until the last item at the current rate, counted down since the last
        update; once the next item is late, it grows (phase_left): a stalled bar's
        ETA rises instead of sitting at 0."""
        if self.rate is None or self.rate <= 0 or self.total <= 0:
            return None
        left_items = max(self.total - self.current, 0)
        per = 1.0 / self.rate
        if now is None or left_items == 0:
            return left_items * per
        since = max(now - self.updated_at, 0.0)
        return (left_items - 1) * per + phase_left(per, since)



_RATE = re.compile(r"^([\d.]+)\s*(s/|(?![KMGT]?i?B/s)[A-Za-z]*/s$)")   # not bytes/s


def parse_rate(text: str | None) -> float | None:
    """tqdm's rate field -> items per second, whatever tqdm's unit (`3.13it/s` -> 3.13,
    `10.19s/it` -> 0.098, `15.50profile/s`, `1.90s/file`)."""
    if not text:
        return None
    m = _RATE.match(text.strip())
    if m is None:
        return None
    v = float(m.group(1))
    if m.group(2) == "s/":          # seconds per item
        return 1.0 / v if v > 0 else None
    return v



def next_progress(prev: ProgressState | None, cur: int, total: int, rate_text: str | None,
                  own_log: float | None, now: float, measure: bool = True) -> ProgressState:
    """The counter after a bar printed `cur/total` (with tqdm's rate when it had one): the
    rate is measured between frames (the log's clock when both had their own stamp) and
    smoothed while the total stays the same.  `measure=False`: a frame read before its end
    (its rate field cut off) keeps the rate as it was: measured against the frame before,
    such a frame of a 10.00s/it bar read 0.669/s."""
    rate = parse_rate(rate_text)
    if rate is None and measure and prev is not None and cur > prev.current:
        if own_log is not None and prev.updated_log is not None:
            dt = own_log - prev.updated_log
        else:
            dt = now - prev.updated_at
        if dt > 0:
            rate = (cur - prev.current) / dt
    if rate is not None and prev is not None and prev.rate is not None and prev.total == total:
        rate = RATE_SMOOTHING * rate + (1 - RATE_SMOOTHING) * prev.rate
    return ProgressState(cur, total, rate if rate is not None else
                         (prev.rate if prev and prev.total == total else None), now, own_log)


MAX_BARS = 16       # bars of one name running at once that are told apart (untrusted: bounded)


def replica_bar(bars: list[ProgressState], cur: int, total: int, rate_text: str | None,
                own_log: float | None, now: float, measure: bool = True) -> ProgressState | None:
    """The counter to show after a frame `cur/total` where data-parallel replicas each print
    their own bar under one name, untagged (SGLang `--dp 2`, vLLM `-dp 4`: every engine's
    `Loading safetensors checkpoint shards`), interleaved.  A frame continues the furthest
    bar of its total still below it (a bar counts up and prints a count once: bars in step,
    each count printed by both, are two), else it is another bar (at most MAX_BARS, the
    ended ones let go first; beyond, None: the frame is let go).  Which bar is which may
    swap where one overtakes another; the counts they hold stay the bars'.  An end printed
    twice ends the bar below it early, until that bar's next frame.  Shown: the slowest bar
    still running (the startup waits for it), else the one just ended.  Before, the counter
    and its rate flipped between the replicas' bars (5/17, 1/17, 6/17) and the ETA took the
    fast one's rate."""
    fits = [k for k, b in enumerate(bars) if b.total == total and b.current < cur]
    i = max(fits, key=lambda k: bars[k].current, default=-1)
    if i < 0 and len(bars) >= MAX_BARS:
        bars[:] = [b for b in bars if b.current < b.total]
        if len(bars) >= MAX_BARS:
            return None
    new = next_progress(bars[i] if i >= 0 else None, cur, total, rate_text, own_log, now,
                        measure)
    if i >= 0:
        bars[i] = new
    else:
        bars.append(new)
    running = [b for b in bars if b.current < b.total]
    return min(running, key=lambda b: b.current) if running else new
