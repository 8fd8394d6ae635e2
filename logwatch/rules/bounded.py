"""Regex searches bounded in the CPU time they use, not in wall time.

`regex`'s `timeout=` runs on the wall clock, so on a loaded machine (two cores, a test suite or
a hundred targets beside us) a search that the scheduler preempts for 50 ms times out having
done almost nothing, and an ordinary line silently fires no rule.  A timeout that used less
than half its time on this thread's CPU was a preemption, not a hostile line: it is retried
(at most twice, the retries timed; the first try reads no clock, so an ordinary search costs
nothing more).  A search that really runs long still ends within a few timeouts.
"""

from __future__ import annotations

import time
from typing import Any

_RETRIES = 2


def search(rx: Any, text: str, timeout: float) -> Any:
    """`rx.search(text)` raising TimeoutError only after `timeout`/2 of this thread's CPU."""
    return _bounded(rx.search, text, timeout)


def match(rx: Any, text: str, timeout: float) -> Any:
    """`rx.match(text)` (at the start of `text`), bounded as `search` is."""
    return _bounded(rx.match, text, timeout)


def _bounded(call: Any, text: str, timeout: float) -> Any:
    # the common case costs no clock read: only a timeout is looked at, by timing retries
    try:
        return call(text, timeout=timeout)
    except TimeoutError:
        pass
    for attempt in range(_RETRIES):
        began = time.thread_time()
        try:
            return call(text, timeout=timeout)
        except TimeoutError:
            if attempt == _RETRIES - 1 or time.thread_time() - began >= timeout / 2:
                raise
    raise AssertionError("unreachable")


def cpu_clock() -> float:
    """The clock a line's pattern budget is counted on (this thread's CPU time)."""
    return time.thread_time()
