"""logwatch's clock: the wall time, without its steps.

Silences, settles and stalls are the difference of two readings of the clock.  The wall clock
(`time.time`) jumps when it is set: NTP's step on a host that booted with a wrong clock, an
operator's `date -s`, a VM resumed.  Read directly, a step of +10 minutes was a 10-minute
silence on every target at once (a false `stalled` page for each server loading normally,
its `startsAt` 10 minutes ahead), and a step back delayed every stall by as much.

`now()` runs on the monotonic clock from the wall time it first read, and is brought back to
the wall clock at most SLEW seconds per second that pass (as ntpd slews): a step is not a
silence, a silence measured while the step is taken up is off by at most 5%, and the times
shown (alerts, the ledger) agree with the wall clock again after 20x the step.  Between steps
the two clocks agree (the kernel slews both alike), so `now()` is the wall time.  A step of
more than STEP_TAKEN_AT_ONCE is taken at once: a host that booted with its clock days off and
was set after logwatch started would otherwise keep logwatch's times days off for weeks
(Alertmanager took every alert for one that had ended); its silences then count the step once,
as before this clock.  Times sent to a receiver that compares them with its own clock
(Alertmanager's endsAt) are on the wall clock (`wall`).

Times of this host's wall clock from elsewhere (a file's mtime) are put on this clock by
`from_wall`; a remote host's wall clock by the source that reads it (sources/sshstream.py).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

SLEW = 0.05     # seconds taken up of a step per second that passes
STEP_TAKEN_AT_ONCE = 3600.0   # a larger step is not slewed (20 h for an hour's)


class SteadyClock:
    """Wall time that moves only as the monotonic clock does, slewed back to the wall."""

    def __init__(self, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic, slew: float = SLEW,
                 at_once: float = STEP_TAKEN_AT_ONCE) -> None:
        self._wall, self._mono, self._slew, self._at_once = wall, mono, slew, at_once
        self._lock = threading.Lock()     # GPU readers and the HTTP thread read it too
        self._last_mono = mono()
        self._now = wall()

    def now(self) -> float:
        """The time now: the last reading plus the monotonic time since, moved toward the
        wall clock by at most `slew` of that time."""
        with self._lock:
            mono = self._mono()
            passed = max(0.0, mono - self._last_mono)
            self._last_mono = mono
            t = self._now + passed
            off = self._wall() - t
            room = self._slew * passed if abs(off) <= self._at_once else abs(off)
            self._now = t + max(-room, min(room, off))
            return self._now

    def from_wall(self, wall_time: float) -> float:
        """A time of this host's wall clock (a file's mtime) on this clock."""
        return wall_time + (self.now() - self._wall())

    def lag(self) -> float:
        """The step of the wall clock not yet taken up: the wall time less this clock's."""
        return -self.from_wall(0.0)

    def adopt(self, lag: float, since_wall: float) -> None:
        """Go on with the clock of a process that lagged the wall clock by `lag` at wall
        time `since_wall` (a daemon restarted while it took up a step): what it saved (a
        target's last line, a crash's settle) stays on one clock with what is read now.
        Before, the step taken up so far read as a silence at the restart (a false stall)."""
        with self._lock:
            wall = self._wall()
            left = max(0.0, abs(lag) - self._slew * max(0.0, wall - since_wall))
            if left > self._at_once:
                left = 0.0
            self._last_mono = self._mono()
            self._now = wall - (left if lag > 0 else -left)


_CLOCK = SteadyClock()


def now() -> float:
    """The wall time without its steps (module doc)."""
    return _CLOCK.now()


def wall() -> float:
    """The wall clock itself: for times a receiver compares with its own clock."""
    return time.time()


def from_wall(wall_time: float) -> float:
    """A time of this host's wall clock (a file's mtime) on logwatch's clock."""
    return _CLOCK.from_wall(wall_time)


def lag() -> float:
    """The step of the wall clock logwatch's clock has not yet taken up."""
    return _CLOCK.lag()


def adopt(lag_was: float, since_wall: float) -> None:
    """Go on with the clock of the process before (SteadyClock.adopt)."""
    _CLOCK.adopt(lag_was, since_wall)
