"""The clock a restarted daemon goes on with (state_dir/clock.json).

logwatch's clock takes up a step of the wall clock slowly (clock.py): the times a daemon
saved (a target's last line, a crash's settle, an alert's next try) are on that clock.  A
daemon restarted while it was still taking a step up began at the wall clock, and the part
of the step not yet taken up read as a silence: a false `stalled` page at the restart for
every starting target (the daemon's clock set 10 minutes on, restarted 3 s later: `no new
line for 10m08s` for a log silent 6 s).  While a step is being taken up, what is left of it
is saved here with the wall time; the next daemon goes on from there (`clock.adopt`, less
what the time between took up).  No file while the clocks agree.
"""

from __future__ import annotations

from pathlib import Path

from .. import clock
from .files import read_state_json, save_state

CLOCK_FILE = "clock.json"
LAG_SAVED = 1.0          # seconds of a step not yet taken up worth saving


def save(state_dir: Path) -> None:
    """What is left of a step being taken up, for the next daemon; none once taken up."""
    path = Path(state_dir) / CLOCK_FILE
    lag = clock.lag()
    if abs(lag) >= LAG_SAVED:
        save_state("positions", path, {"lag": lag, "wall": clock.wall()}, durable=False)
        return
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def adopt(state_dir: Path) -> None:
    """Go on with the clock the daemon before saved (none, unreadable: the wall clock)."""
    try:
        doc = read_state_json(Path(state_dir) / CLOCK_FILE)
    except (OSError, ValueError):
        return
    if isinstance(doc, dict) and isinstance(doc.get("lag"), (int, float)) and \
            isinstance(doc.get("wall"), (int, float)):
        clock.adopt(float(doc["lag"]), float(doc["wall"]))
