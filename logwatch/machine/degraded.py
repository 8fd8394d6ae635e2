"""A part of the server failed and the server went on without it (`degrades` rules).

SGLang's PD prefill server starts its KV bootstrap server in a thread of the main process
(0.5.23 disaggregation/common/conn.py `_run_server`); when the bootstrap port is taken, the
thread logs `Server error: [Errno 98] ...` with its traceback (`exc_info`) and ends, while the
server loads, captures and says it is fired up.  Before, that traceback was the server's
crash (`port_in_use` at 3 s, the ready line after it never read).  Now it is what the line is:
a failure of one part, said beside the ready (and in the ready alert and the history), and
the traceback logged with it (its `Traceback` header, then the exception line of the rule's
`hint` reason) is that part's.  The process dying later is a crash like any other.
"""

from __future__ import annotations

from ..rules.pack import Rule
from .state import Observation, State

ABSORB_LINES = 40          # the part's traceback ends within this many lines of its message
MAX_NOTE = 200             # characters of the note kept (the line is untrusted input)


def part_failed(state: State, rule: Rule, obs: Observation) -> bool:
    """Does this line say a part failed (noted), or belong to that part's traceback?  Then
    it is no crash of the server's."""
    if rule.degrades:
        note_degraded(state, rule, obs)
        return True
    return bool(rule.crash) and absorbs(state, rule, obs)


def note_degraded(state: State, rule: Rule, obs: Observation) -> None:
    """`obs` says a part of the server failed: the first such note of the startup is kept,
    and the traceback logged with it is expected next."""
    if state.degraded is None:
        state.degraded = f"{rule.degrades}, line {obs.line_number}"[:MAX_NOTE]
    if rule.hint:
        state.absorbing, state.absorbing_from = rule.hint, obs.line_number


def absorbs(state: State, rule: Rule, obs: Observation) -> bool:
    """Is this crash line part of the traceback a `degrades` line was logged with?  Its bare
    `Traceback` header (a tentative marker) and its exception line (a cause of the expected
    reason), within ABSORB_LINES; the exception line ends it.  Anything else is not."""
    reason = state.absorbing
    if reason is None:
        return False
    if obs.line_number - state.absorbing_from > ABSORB_LINES:
        state.absorbing = None
        return False
    if rule.marker:
        return rule.tentative
    if rule.crash == reason:
        state.absorbing = None
        return True
    return False
