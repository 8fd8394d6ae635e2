"""Regex searches bounded in the CPU time they use, not in wall time.

`regex`'s `timeout=` runs on the wall clock, so on a loaded machine (two cores, a test suite or
a hundred targets beside us) a search that the scheduler preempts for 50 ms times out having
done almost nothing, and an ordinary line silently fires no rule.  A timeout that used less
than half its time on this thread's CPU was a preemption, not a hostile line: it is retried
(at most twice).  A search that really runs long still ends within a few timeouts.
"""

from __future__ import annotations

import time
from typing import Any

_RETRIES = 2


def search(rx: Any, text: str, timeout: float) -> Any:
    """`rx.search(text)` raising TimeoutError only after `timeout`/2 of this thread's CPU."""
    for attempt in range(_RETRIES + 1):
        began = time.thread_time()
        try:
            return rx.search(text, timeout=timeout)
        except TimeoutError:
            if attempt == _RETRIES or time.thread_time() - began >= timeout / 2:
                raise
    raise AssertionError("unreachable")


def match(rx: Any, text: str, timeout: float) -> Any:
    """`rx.match(text)` (at the start of `text`), bounded as `search` is."""
    for attempt in range(_RETRIES + 1):
        began = time.thread_time()
        try:
            return rx.match(text, timeout=timeout)
        except TimeoutError:
            if attempt == _RETRIES or time.thread_time() - began >= timeout / 2:
                raise
    raise AssertionError("unreachable")


def cpu_clock() -> float:
    """The clock a line's pattern budget is counted on (this thread's CPU time)."""
    return time.thread_time()
