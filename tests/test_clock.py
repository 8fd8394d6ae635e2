"""logwatch's clock (logwatch/clock.py): the wall time without its steps.  Pure: the wall and
monotonic clocks are given."""

from __future__ import annotations

import pytest

from logwatch.clock import SLEW, SteadyClock


class Clocks:
    """A wall clock an operator can set and a monotonic clock that only moves on."""

    def __init__(self, wall: float = 1.8e9) -> None:
        self.wall, self.mono = wall, 100.0

    def run(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds

    def make(self) -> SteadyClock:
        return SteadyClock(wall=lambda: self.wall, mono=lambda: self.mono)


def test_between_steps_it_is_the_wall_clock() -> None:
    c = Clocks()
    clock = c.make()
    for _ in range(5):
        c.run(1.0)
        assert clock.now() == pytest.approx(c.wall)


@pytest.mark.parametrize("step", [600.0, -600.0])
def test_a_step_is_no_time_passing_and_is_taken_up_at_the_slew(step: float) -> None:
    """The wall clock set 10 minutes on (or back) between two ticks: one second passed, not
    601 (a false stall on every target) nor -599 (every stall late by 10 minutes)."""
    c = Clocks()
    clock = c.make()
    before = clock.now()
    c.run(1.0)
    c.wall += step
    after = clock.now()
    assert after - before == pytest.approx(1.0 + SLEW * 1.0 if step > 0 else 1.0 - SLEW)
    # a silence measured while the step is taken up is off by at most the slew
    start = clock.now()
    c.run(30.0)
    assert clock.now() - start == pytest.approx(30.0 * (1 + (SLEW if step > 0 else -SLEW)))
    # and the clock meets the wall again after 20x the step, never passing it
    for _ in range(int(abs(step) / SLEW / 10) + 2):
        c.run(10.0)
        t = clock.now()
        assert (t <= c.wall) if step > 0 else (t >= c.wall)
    assert clock.now() == pytest.approx(c.wall)


def test_a_file_time_of_the_wall_clock_goes_onto_this_clock() -> None:
    """A file written just now, read after the wall was set 10 minutes on: written 0 s ago
    on this clock (not 10 minutes in the future, nor a silence of 10 minutes after a step
    back)."""
    c = Clocks()
    clock = c.make()
    clock.now()
    c.run(1.0)
    c.wall += 600.0
    written = c.wall - 0.5          # the file's mtime, by the wall clock
    assert clock.now() - clock.from_wall(written) == pytest.approx(0.5)


def test_a_step_of_days_is_taken_at_once() -> None:
    """A host that booted with its clock 2 days slow, set by NTP after logwatch started:
    slewed, logwatch's times stayed days off for 40 days (Alertmanager took every alert's
    endsAt, 24 h after a time 2 days ago, for one that had ended).  Taken at once."""
    c = Clocks()
    clock = c.make()
    clock.now()
    c.run(1.0)
    c.wall += 2 * 86400.0
    assert clock.now() == pytest.approx(c.wall)


@pytest.mark.parametrize("step", [600.0, -600.0])
def test_a_restarted_process_goes_on_with_the_clock_before(step: float) -> None:
    """The daemon restarted 10 s after a step of 10 minutes: the new process's clock goes
    on from the old one's (less what 10 s took up), so a time the old one saved is as far
    back as it really is (before: the step read as a 10-minute silence at the restart)."""
    c = Clocks()
    old = c.make()
    old.now()
    c.run(1.0)
    c.wall += step
    last_line = old.now()                 # saved in a checkpoint
    lag, saved_at = old.lag(), c.wall
    assert lag == pytest.approx(step - SLEW * 1.0 if step > 0 else step + SLEW)
    c.run(10.0)
    new = c.make()                        # the new process: starts at the wall
    new.adopt(lag, saved_at)
    assert new.now() - last_line == pytest.approx(10.0 + SLEW * 10 * (1 if step > 0 else -1))
    # a lag from long ago is all taken up: the wall clock
    late = c.make()
    late.adopt(lag, saved_at - 100_000)
    assert late.now() == pytest.approx(c.wall)
