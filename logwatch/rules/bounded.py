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
    # the common case costs no clock read: only a timeout is looked at, by timing retries.
    # `regex`'s (string, pos, endpos, concurrent, partial, timeout) passed by position: its
    # keyword parsing costs a third of a short search
    try:
        return call(text, None, None, None, False, timeout)
    except TimeoutError:
        pass
    for attempt in range(_RETRIES):
        began = time.thread_time()
        try:
            return call(text, None, None, None, False, timeout)
        except TimeoutError:
            if attempt == _RETRIES - 1 or time.thread_time() - began >= timeout / 2:
                raise
    raise AssertionError("unreachable")


def wall_clock() -> float:
    """Where a line's pattern budget starts: the wall clock (no system call)."""
    return time.perf_counter()


def budget_left(budget: float, started: float, cpu_since: float | None
                ) -> tuple[float, float | None]:
    """What is left of a line's pattern `budget` (CPU seconds), and the CPU clock reading to
    pass next time.  CPU time never exceeds wall time, so while less than `budget` of wall
    time has passed since `started`, less than `budget` of CPU was used and the CPU clock is
    not read at all (an ordinary line: the next pattern may use a whole budget).  Past that
    (a hostile line, or a preempted one) the CPU clock is read and a budget is counted from
    that reading: a line preempted mid-match is not cut short for time it did not use, and a
    hostile one still stops within two budgets."""
    if cpu_since is None:
        if time.perf_counter() - started < budget:
            return budget, None
        return budget, time.thread_time()
    return budget - (time.thread_time() - cpu_since), cpu_since
