"""The startup state machine: matched lines -> phases, epochs, progress, crash, ready, stall.

One job per file: `state` (the dataclasses), `events`, `startup` (`StartupMachine`: which
line moves the startup where), `spans` (the only code that makes or changes spans, and the
log's one clock), `servers` (several servers in one launch), `crash` (evidence and reason),
`ranks`, `rates` (progress counters), `checkpoint` (JSON).
This package re-exports them all: `from logwatch.machine import State` keeps working.

Pure: `StartupMachine.step(state, observation, now)` and `tick(state, now)` update `state`
in place and return the events that happened; no I/O, no clock of their own (`now` is the
wall clock of the caller, `Observation.log_time` the server's own timestamp if it had one).

Only the generic meaning of phases lives here; the engine knowledge comes from the pack:
* a startup is a list of spans (`State.spans`: phase, start, end, the line that opened it),
  made only by the machine; the current phase is the latest main-line span's, a phase's
  duration the sum of its spans, the startup's total the union of all of them (a span
  `beside` the main line, weights loading while graphs capture, counts once);
* a marker moves the main line forward in the pack's order, and a later one may skip
  phases; a marker of an earlier phase (another TP rank printing the same milestone late, a
  summary line) only mentions it, unless its rule `begins` the phase: the first time such
  a rule fires in a startup it moves there whatever the order (vLLM 0.34: autotune ->
  allocating -> autotune -> cuda_graph -> allocating); `begins: own_rank`, once, on a line
  of a rank that had itself ended a later phase (SGLang 0.5.10's draft load after capture);
* `closes_as` re-attributes the span an end marker closes (vLLM's `Time spent downloading
  weights`); several servers of one launch (`servers:`, a `supervisor` rule) are one startup,
  ready when all are; one clock per log: a stamp that would run it backwards or years ahead
  is not used (`State.untrusted_stamps`);
* a rule with `reenter` may step back into an earlier phase while the current one is still
  empty (download bars after `Load weight begin`, before the first shard); a phase entered
  by a `provisional` rule is announced (PhaseChanged) only once confirmed (a later phase, its
  progress, a crash, PROVISIONAL_FOR seconds): a reenter before that takes its place, from
  the same moment, and the phases never flip back and forth;
* a restart marker starts a new epoch, unless the startup is still launching and has not
  printed that marker yet (vLLM prints a version line, then its args: one startup);
* a crash keeps collecting evidence after it began: the root-cause line is the exception
  line with the most specific reason (the first among equals, or the last of a chained
  exception), not the `Traceback` header, the engine's announcement or the trailing SIGQUIT;
  the reason is the most specific one found in cause lines, then announcements, then hints
  seen shortly before, then the pack's default for the phase it crashed in;
* tentative crash evidence (a bare traceback during startup: no announcement, no specific
  cause) is retracted when the server shows it carried on: a later phase's marker, a bar of
  the crash's phase moving, a line of that phase from the rank whose traceback it was (a
  `logger.exception` of a fallback it survived); it settles after UNCONFIRMED_QUIET of quiet;
* serving stats lines are serving traffic only once the server is ready (SGLang's warmup
  request prints them before); in a log that shows no startup at all they mean ready;
* a startup is identified by the log itself, never by the clock: `StartupId` = the byte
  offset of its first line and a hash of that line, so a re-read after a restart, a `kill -9`
  or a lost checkpoint names the same startup, and alerts, history and counters keyed on it
  happen once;
* the machine owns crash settling: a crash is final (`CrashSettled`, once per startup) when
  its evidence has not changed for the pack's `crash_settle` seconds, when a new startup
  begins, or when the input ends (`settle`); a settled crash is never retracted or refined.
"""

from .checkpoint import state_from_json, state_to_json
from .crash import HINT_WINDOW_LINES
from .events import (
    CrashRetracted, CrashSettled, CrashUpdated, Crashed, Degraded, Event, PhaseChanged, Progress,
    Ready, Restarted, Stalled, StartupBegan, StatsUpdated, Stopped,
)
from .ranks import RANK_LAG_AFTER, RankLag, RankProgress, rank_clock, rank_lag
from .rates import RATE_SMOOTHING, ProgressState, parse_rate, phase_left
from .spans import LATE, event_time, retime
from .startup import DEFAULT_STALL_AFTER, PROVISIONAL_FOR, StartupMachine, current_stats
from .state import (
    Crash, Evidence, Observation, PhaseEntry, State, crash_elapsed, elapsed_since, startup_id_of,
)

__all__ = [
    "Crash", "CrashRetracted", "CrashSettled", "CrashUpdated", "Crashed", "DEFAULT_STALL_AFTER", "Degraded",
    "Event", "Evidence", "HINT_WINDOW_LINES", "LATE", "Observation", "PROVISIONAL_FOR", "PhaseChanged",
    "PhaseEntry", "Progress", "ProgressState", "RANK_LAG_AFTER", "RATE_SMOOTHING", "RankLag",
    "RankProgress", "Ready", "Restarted", "Stalled", "StartupBegan", "StartupMachine", "State",
    "StatsUpdated", "Stopped", "crash_elapsed", "current_stats", "elapsed_since", "event_time", "parse_rate", "phase_left",
    "rank_clock", "rank_lag", "retime", "startup_id_of", "state_from_json", "state_to_json",
]
