"""The retry backoff of alert deliveries, and how long an outage it outlasts.

Kept apart from delivery.py so that the config check (`--check`, the daemon's start) can
say what a sink's `max_attempts` means in time without importing the HTTP side.
"""

from __future__ import annotations

BACKOFF_CAP = 300.0        # seconds: the longest wait between two attempts
MEAN_JITTER = 0.75         # each wait is drawn in [backoff / 2, backoff]: on average 3/4 of it


CAPPED_FROM = 9             # 2 ** 9 > BACKOFF_CAP: every wait from this attempt on is the cap


def backoff(attempts: int) -> float:
    """The longest wait after the `attempts`-th failed attempt (the wait is drawn in its
    upper half): doubling from 2 s, capped at BACKOFF_CAP (the power bounded: 2.0 ** 1025
    overflowed, and a receiver down 85 h under `max_age: 4d` ended its sink's worker)."""
    return min(BACKOFF_CAP, 2.0 ** min(attempts, CAPPED_FROM))


def outage_outlasted(max_attempts: int) -> float:
    """About how many seconds of a receiver's outage `max_attempts` attempts span (the
    mean of the jittered waits between them): the outage after which a page is given up.
    In closed form past the cap (`max_attempts: 5000` is a config, not a loop)."""
    doubling = sum(MEAN_JITTER * backoff(n) for n in range(1, min(max_attempts, CAPPED_FROM)))
    capped = max(0, max_attempts - CAPPED_FROM)
    return doubling + capped * MEAN_JITTER * BACKOFF_CAP
