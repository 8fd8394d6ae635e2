"""A part of the server failed and the server went on without it (`degrades` rules).

SGLang's PD prefill server starts its KV bootstrap server in a thread of the main process
(0.5.23 disaggregation/common/conn.py `_run_server`); when the bootstrap port is taken, the
thread logs `Server error: [Errno 98] ...` with its traceback (`exc_info`) and ends, while the
server loads, captures and says it is fired up.  Before, that traceback was the server's
crash (`port_in_use` at 3 s, the ready line after it never read).  Now it is what the line is:
a failure of one part, said beside the ready (and in the ready alert and the history), and
the traceback logged with it (its `Traceback` header, then the exception line of the rule's
`hint` reason) is that part's.  The process dying later is a crash like any other.  A startup
that is ready without a part is a `Degraded` event (the open `degraded` alert): at the ready
for a degrade logged before it (startup.py; before, only the `ready` alert's note, a one-off
event, and nothing open in Alertmanager while the server was degraded), else at the degrade
logged after the ready (the server serving),
and its traceback's exception line, which only a launch prints otherwise (`launch_only`: a
port taken), is no relaunch: before, it began a new startup and paged `crashed: port_in_use
during launching` for the server that served on, and the note was lost.
"""

from __future__ import annotations

from ..rules.pack import READY, Rule
from .events import Degraded, Event
from .state import Observation, State

ABSORB_LINES = 40          # the part's traceback ends within this many lines of its message
MAX_NOTE = 200             # characters of the note kept (the line is untrusted input)
MAX_LINE = 2000            # characters of its line kept, for the alert (Slack, root_cause)


def part_failed(state: State, rule: Rule, obs: Observation, events: list[Event]) -> bool:
    """Does this line say a part failed (noted; after the ready, a `Degraded` in `events`),
    or belong to that part's traceback?  Then it is no crash of the server's."""
    if rule.degrades:
        note_degraded(state, rule, obs, events)
        return True
    return bool(rule.crash) and absorbs(state, rule, obs)


def note_degraded(state: State, rule: Rule, obs: Observation, events: list[Event]) -> None:
    """`obs` says a part of the server failed: the first such note of the startup is kept
    (said on its own where the server is ready: the ready's notes were said), and the
    traceback logged with it is expected next."""
    if state.degraded is None:
        state.degraded = f"{rule.degrades}, line {obs.line_number}"[:MAX_NOTE]
        state.degraded_line = obs.text[:MAX_LINE]
        if state.phase == READY:
            events.append(degraded_event(state))
    if rule.hint:
        state.absorbing, state.absorbing_from = rule.hint, obs.line_number


def degraded_event(state: State) -> Degraded:
    """`Degraded` for the state's note and line (the server ready without that part)."""
    return Degraded(state.epoch, state.degraded or "", state.startup_id,
                    state.degraded_line or "")


def claims(state: State, rule: Rule, obs: Observation) -> bool:
    """Is this line part of the traceback a `degrades` line was logged with?  Its bare
    `Traceback` header (a tentative marker) and its exception line (a cause of the expected
    reason), within ABSORB_LINES.  Anything else is not.  Pure: `absorbs` ends it."""
    if state.absorbing is None or obs.line_number - state.absorbing_from > ABSORB_LINES:
        return False
    return rule.tentative if rule.marker else rule.crash == state.absorbing


def absorbs(state: State, rule: Rule, obs: Observation) -> bool:
    """`claims`, and the traceback is over past ABSORB_LINES or at its exception line."""
    claimed = claims(state, rule, obs)
    if state.absorbing is not None and (claimed and not rule.marker or
                                        obs.line_number - state.absorbing_from > ABSORB_LINES):
        state.absorbing = None
    return claimed
