"""`StartupMachine`: one matched line at a time, the startup's phases, crash and readiness.

The rules of the machine are in the package's docstring (logwatch/machine/__init__.py).
"""

from __future__ import annotations

import math
import re

from typing import Any

from ..rules.args import ParsedArgs, launch_digest, launch_prefixes, parse_args_line
from ..rules.pack import (CRASHED, READY, SPECIFIC_RANK, STOPPED, TERMINAL, WAITING, Rule,
                          RulePack)
from ..verdict import BY_ENDPOINT
from .crash import HINT_WINDOW_LINES, add_evidence, note_phase_done
from .events import (
    CrashRetracted, CrashSettled, CrashUpdated, Crashed, Event, PhaseChanged, Progress,
    Ready, Restarted, Stalled, StartupBegan, StatsUpdated, Stopped,
)
from .degraded import claims, degraded_event, part_failed
from .follower import FOLLOWER_QUIET, follower_ready, node_joins, note_follower, note_follower_done, note_node
from .servers import all_ready as servers_ready, joins as server_joins, note_proc, note_role, \
    proc_joins
from .ranks import (advance_lane, advance_rank, replica_of, replica_positions, replica_reach,
                    replicas_allow)
from .rates import next_progress, replica_bar
from .spans import (
    CLOCK_JUMP, CLOCK_SLACK, FLOAT_GAP, beside as beside_span, drop_last, event_time, new_span,
    open_main, reattribute, retract, settle_float, start_clock, trust,
)
from .state import Crash, Evidence, Observation, Span, State, crash_elapsed, startup_id_of

DEFAULT_STALL_AFTER = 300.0
PROVISIONAL_FOR = 2.0          # seconds a provisional phase waits to be replaced (wall clock)
SETTLE_LONGEST = 30.0          # seconds after its first line a crash is final, lines or not
# the quiet an unconfirmed crash (a bare traceback: no announcement, no specific cause) waits
# for: a `logger.exception` the engine survives is followed by its fallback's lines, perhaps
# after a pause (the model built before the loader's first shard: 12 s was seen to page with
# 10); a real one by nothing.  The engines announce their deaths, so few crashes wait so long;
# SETTLE_LONGEST bounds it where other lines go on
UNCONFIRMED_QUIET = 30.0
# serving figures that add up over a server's engines / DP ranks (`merge_stats`)
SUMMED_STATS = frozenset({"gen_throughput", "prompt_throughput", "input_throughput",
                          "running_requests", "queued_requests", "new_tokens"})
_DP_RANK = re.compile(r"\bDP\d+")
MAX_STAT_SOURCES = 256      # engines / DP ranks whose figures are kept (`merge_stats`)
MAX_GPUS_NAMED = 64         # GPUs a launch's lines may name (State.gpus)
# seconds after its latest serving line that an engine / DP rank's figures stop being current
# (`current_stats`): SGLang prints a decode line every 40 decode steps while a rank has
# requests and nothing while idle; vLLM every 10 s while busy, one line of zeros as it goes
# idle, then nothing
STATS_STALE = 60.0
# the figures that are rates: with no current line, nothing was generated (`current_stats`)
RATE_STATS = frozenset({"gen_throughput", "prompt_throughput", "input_throughput"})
# the "rule" of a ready said by the server's endpoint (`StartupMachine.endpoint_answers`)
ENDPOINT_READY = Rule(id="endpoint_answers", pattern="", source="logwatch", phase=READY)

__all__ = ["CLOCK_JUMP", "CLOCK_SLACK", "DEFAULT_STALL_AFTER", "FLOAT_GAP", "HINT_WINDOW_LINES",
           "PROVISIONAL_FOR", "StartupMachine", "crashed_at_launch"]


class StartupMachine:
    """The transitions of one startup's `State`, one matched line (`step`) or one tick at a
    time; the state is the caller's (the machine holds only the pack and the stall budgets).

    Long because: one transition function (step -> restart / advance / crash / stats) whose
    parts call each other (a retracted crash advances again, a restart settles the crash
    before it) and share the pack; what needs no machine is a function below it.
    """

    def __init__(self, pack: RulePack, stall_after: float | dict[str, float] | None = None) -> None:
        self.pack = pack
        self.stall_after = stall_after
        self._startup = set(pack.startup_phases)
        self._read_at = 0.0     # when the line being stepped was read (see `step`)
        self._quiet_for = 0.0   # the log's seconds of silence before that line, by its stamps

    # -- public API -------------------------------------------------------------------------
    def note_activity(self, state: State, now: float) -> None:
        """New bytes arrived (any line, matched or not): the log is alive."""
        state.last_activity = now
        state.stalled = False

    def step(self, state: State, obs: Observation, now: float) -> list[Event]:
        """One matched line, read at `now`.  What it opens, ends or crashes is timed when the
        line happened (`event_time`: its stamp, for a line read long after it was written);
        the crash's settle window counts from when it was read."""
        rule = obs.rule
        self._read_at = now
        self._quiet_for = 0.0
        if obs.log_time is not None:
            trust(state, obs)
            first = state.last_log_time is None
            self._quiet_for = 0.0 if first else obs.log_time - state.last_log_time
            state.last_log_time = obs.log_time
            if rule.restart and state.phase not in (WAITING, self._first_phase()):
                state.clock_offset = None      # a new server process: perhaps another clock
            now = event_time(state, obs, now)
            if state.floating is not None:    # (when it was written: a line read late)
                settle_float(state, obs, now)
            if first:
                start_clock(state, obs)
        events: list[Event] = []
        if state.deferred is not None and confirms(self.pack, state, rule):
            events.append(state.deferred)
            state.deferred = None
        if rule.launch_only and state.phase == READY and not claims(state, rule, obs):
            state.relaunched = True    # only a launch prints it (or a degrade's traceback)
        parsed = parse_args_line(obs.text, rule.args_specs) if rule.args else None
        line_args = parsed.values if parsed is not None else {}
        if rule.restart or state.relaunched:
            self._launch(state, obs, now, events, line_args)
        self._launch_facts(state, obs, parsed)
        if passed_over(self.pack, state, rule):
            return events       # an older release's words: the line means less there
        if self.pack.ranks and rule.phase and state.phase not in TERMINAL:
            advance_rank(self.pack, state.ranks, obs, now, state.rank_pids)
            advance_lane(self.pack, state.lanes, obs, state.rank_pids, state.lane_times, now)
        if state.phase == CRASHED and not self._while_crashed(state, obs, now, events):
            return events
        if state.phase == STOPPED and not (rule.crash and rule.when and STOPPED in rule.when):
            return events       # (a crash rule `when: stopped` makes a stop just seen a crash)
        if rule.when is not None and state.phase not in rule.when:
            return events
        if rule.stop:
            self._enter(state, STOPPED, obs, now, events)
            events.append(Stopped(state.epoch, obs.text))
            return events
        if rule.crash or rule.degrades:     # (a part that failed: machine/degraded.py)
            if not part_failed(state, rule, obs, events):
                self._crash_line(state, obs, now, events)
            return events
        if rule.hint:
            ev = Evidence(rule.hint, obs.text, obs.line_number, "", rule.at_launch, rule.yields)
            state.hints.setdefault(rule.hint, ev)
        if rule.phase:
            self._phase_marker(state, rule, obs, now, events)
        if rule.progress:
            _note_progress(self.pack, state, rule.progress, obs, now, events,
                           self._replicas_seen(state))
        if rule.stats:
            self._stats(state, obs, now, events)
        return events

    def _launch_facts(self, state: State, obs: Observation, parsed: ParsedArgs | None) -> None:
        """What a line says about the launch: its arguments (`parsed`), its address, a
        follower node."""
        rule = obs.rule
        line_args: dict[str, Any] = {}
        if parsed is not None and parsed.values:
            line_args = parsed.values
            # a new dict (never mutated in place): readers compare it by identity; a launch
            # command line first, the server's own dump after it wins (another node's dump
            # of the same launch only where it is the head's: note_node)
            if note_node(self.pack, state, line_args):
                state.args = {**state.args, **line_args}
            state.args_partial = state.args_partial or parsed.partial
            state.args_complete = state.args_complete or parsed.complete
        gpu = obs.fields.get("gpu")      # a rank's GPU, by NVML's index (the GPU scope)
        if gpu is not None and str(gpu).isdigit() and len(state.gpus) < MAX_GPUS_NAMED:
            state.gpus = state.gpus | {int(gpu)}   # (a new set: readers compare by identity)
        bus = obs.fields.get("bus")      # ... and by PCI bus: a container's NVML indexes are
        if bus and len(state.gpu_buses) < MAX_GPUS_NAMED:      # its own, its buses the host's
            state.gpu_buses = state.gpu_buses | {int(str(bus), 16)}
        if rule.endpoint and obs.fields.get("url"):
            state.endpoint = obs.fields["url"]
        state.ready_by_endpoint = state.ready_by_endpoint or rule.ready_by_endpoint
        version = obs.fields.get("version") or obs.fields.get("logo_version")
        if version and state.phase not in TERMINAL and state.phase != READY:
            state.engine_version = str(version)[:64]    # vLLM's, TensorRT-LLM's version line
        note_follower(self.pack, state, obs, line_args)
        note_role(self.pack, state, obs.proc, rule.id, line_args)

    def tick(self, state: State, now: float, reading: bool = True) -> list[Event]:
        """Time passed: a crash whose evidence stopped changing settles; a startup phase
        silent too long is stalled; a provisional phase nothing replaced is announced.
        Not `reading` (the log cannot be read: an SSH connection lost), its silence is no
        evidence: no stall, no follower's ready by quiet; once read again, a silence past
        the budget stalls at the next tick (`last_activity` is the server's last line)."""
        if state.deferred is not None and now - state.deferred.at >= PROVISIONAL_FOR:
            ev, state.deferred = state.deferred, None
            return [ev, *self.tick(state, now, reading)]
        if state.phase == CRASHED and not state.crash_settled:
            return self.settle(state) if self.crash_is_final(state, now) else []
        if not reading:
            return []
        if state.phase in self._startup and (done := follower_ready(state, now, False)):
            return self._ready_at(state, done, now)
        if state.stalled or state.phase not in self._startup or state.last_activity is None:
            return []
        budget = self.stall_budget(state.phase)
        silent = now - state.last_activity
        if silent >= budget:
            state.stalled = True
            return [Stalled(state.epoch, state.phase, silent, state.startup_id, budget,
                            launch_of(state), launch_prefixes(state.args))]
        return []

    def endpoint_answers(self, state: State, now: float, said: str) -> list[Event]:
        """The server's own endpoint answered (every path the probe asks) while its log
        never said ready: the server is ready, by its endpoint.  A server that logs at
        WARNING prints no milestone and no ready line (SGLang's `--log-level warning`;
        vLLM's with `--uvicorn-log-level warning` too), and read from its log alone it
        stayed in its last phase (or waiting) for good: `stalled` pages while it served.  Only a startup whose launch line was not seen: a log at INFO
        prints its launch (`server_args=`, vLLM's version and args) and its ready line will
        come (an older SGLang's `/health` answers during a long warmup, before it), unless
        a line said none will (`ready_by_endpoint`: SGLang's Rust server, whose /health says
        503 until its own warmup passed; before, it read `cuda_graph` while it served); only
        one not yet ended (a crash stays a crash); and none of its bars still under way
        (what answers then is another process on the port).  Its lines may go on (a
        warning a request): no quiet is waited for."""
        if state.phase != WAITING and state.phase not in self._startup or \
                state.restart_rules and not state.ready_by_endpoint:
            return []
        if any(p.total and p.current < p.total for p in state.progress.values()):
            return []    # a bar still under way (shards 3/17): what answers is not it
        obs = Observation(ENDPOINT_READY, {}, f"({BY_ENDPOINT}: {said})", own_time=False)
        return self._ready_at(state, obs, now)

    def crash_is_final(self, state: State, now: float) -> bool:
        """Its evidence unchanged for `crash_settle`, and the log quiet as long: a traceback
        still being written (ranks' tracebacks interleaved, a slow writer) may yet name the
        cause in its last line.  Before, only the evidence counted: a traceback written over
        4.5 s in 0.9 s steps settled on `cuda_graph_capture_failed` before its
        `torch.OutOfMemoryError` came.  At the latest SETTLE_LONGEST after the crash, for a
        log that never goes quiet."""
        changed, settle = state.crash_changed_at, self.pack.crash_settle
        if changed is not None and now - changed < settle:
            return False
        crash = state.crash
        if crash is not None and not crash.confirmed and crash.during != READY:
            settle = max(settle, UNCONFIRMED_QUIET)
        quiet = state.last_activity is None or now - state.last_activity >= settle
        first = state.crash_read_at
        return quiet or first is None or now - first >= SETTLE_LONGEST

    def quiet_before(self, state: State, since: float, now: float) -> list[Event]:
        """The log had been quiet since `since` (its last write) before it was read: a
        follower whose ranks had all ended was ready when that quiet reached FOLLOWER_QUIET,
        as a tick then would have found (before, read at attach it waited for a quiet of
        our own: the daemon said "silent since ...: server probably dead" and alerted
        "ready in 1m55s" for a follower ready 20 minutes before)."""
        done = follower_ready(state, now, False) if state.phase in self._startup else None
        if done is None:
            return []
        return self._ready_at(state, done, min(now, since + FOLLOWER_QUIET))

    def _ready_at(self, state: State, obs: Observation, now: float) -> list[Event]:
        """Ready, at a line that is not a ready line (a follower's; the endpoint's word)."""
        events: list[Event] = []
        self._enter(state, READY, obs, now, events)
        _announce_ready(state, obs, now, events)
        return events

    def input_ended(self, state: State, now: float) -> list[Event]:
        """The input ended (a replay): a follower whose ranks all ended is ready; a crash is
        final."""
        if state.phase in self._startup and (done := follower_ready(state, now, True)):
            return self._ready_at(state, done, now)
        return self.settle(state)

    def settle(self, state: State) -> list[Event]:
        """Make the current crash final now (the input ended, or a new startup begins)."""
        if state.phase != CRASHED or state.crash is None or state.crash_settled:
            return []
        state.crash_settled = True
        began = crashed_at_launch(self.pack, state)
        start = state.launch_start()
        return [*began, CrashSettled(state.epoch, state.startup_id, state.crash, state.durations(),
                             crash_elapsed(state.crash, start), launch_of(state),
                             launch_prefixes(state.args))]

    def stall_budget(self, phase: str) -> float:
        """Seconds of silence that make `phase` stalled: the target's setting (one value or
        per phase), else the pack's per-phase default."""
        if isinstance(self.stall_after, dict):
            if phase in self.stall_after:
                return self.stall_after[phase]
        elif self.stall_after is not None:
            return self.stall_after
        return self.pack.stall_after.get(phase, DEFAULT_STALL_AFTER)

    # -- transitions ------------------------------------------------------------------------
    def _enter(self, state: State, phase: str, obs: Observation, now: float,
               events: list[Event]) -> None:
        old = state.phase
        if old == WAITING and state.startup_id is None:
            state.startup_id = startup_id_of(obs)
        if old == WAITING and phase != READY and phase not in TERMINAL and state.epoch == 0:
            state.epoch = 1
            state.startups += 1
            events.append(StartupBegan(state.epoch, state.startup_id, obs.text))  # type: ignore[arg-type]
        if not state.spans and not state.restart_rules:
            # the startup's first phase marker: past its launch when not the pack's first
            # phase (a wrapper's download before the launch line: see `_restart`)
            state.mid_startup = phase != self._first_phase()
        state.phase = phase
        state.phase_progress = False
        open_main(state, phase, obs, now, self.pack.silent)
        events.append(PhaseChanged(state.epoch, old, phase, now, obs.text, state.startup_id))

    def _launch(self, state: State, obs: Observation, now: float, events: list[Event],
                line_args: dict[str, Any]) -> None:
        """A restart rule's line, or the first matched line of a relaunch (`State.relaunched`:
        another engine's, or a new file after the server was gone): whatever that line says,
        the startup before is over."""
        if state.relaunched:
            state.relaunched = False
            if state.phase != WAITING:
                self._new_startup(state, obs, now, events)
                return
        if obs.rule.restart:
            self._restart(state, obs, now, events, line_args)

    def _restart(self, state: State, obs: Observation, now: float, events: list[Event],
                 line_args: dict[str, Any]) -> None:
        rid = obs.rule.id
        if proc_joins(state, obs.proc, rid):
            # another process of the same launch in one stream (prefill + decode servers of
            # one compose file): it joins this startup; its own restart is a new epoch
            return
        stalled = state.stalled or self._quiet_for >= self.stall_budget(state.phase)
        if node_joins(self.pack, state, line_args, stalled):
            return      # another node's dump of this launch, untagged (`srun` unlabelled)
        server = self.pack.server_of(obs.text)
        if server_joins(self.pack, state, server, rid):
            # another server of a launch of several (a DP supervisor's, --api-server-count):
            # one launch, ready when all of them are
            state.servers.setdefault(server, False)
            state.restart_rules.add(f"{server}|{rid}")
            return
        if state.phase == WAITING or (state.phase == self._first_phase()
                                      and rid not in state.restart_rules) or \
                (not state.restart_rules and state.phase in self.pack.prelaunch):
            # the first args dump / version line of a startup that is still launching (a
            # launch prints several kinds: vLLM's version line, then its args), or the
            # server's first, after its wrapper's download (the pack's `prelaunch`)
            state.restart_rules.add(rid)
            state.mid_startup = False          # its launch line: the startup is timed from
            if server:                         # its first span (the download before it too)
                state.servers.setdefault(server, False)
                state.restart_rules.add(f"{server}|{rid}")
            note_proc(state, obs.proc, rid)
            if obs.rule.supervisor:
                state.supervised = True
            if state.phase != self._first_phase():   # (waiting, or the wrapper's download)
                self._enter(state, self._first_phase(), obs, now, events)
            return
        self._new_startup(state, obs, now, events, server)

    def _new_startup(self, state: State, obs: Observation, now: float, events: list[Event],
                     server: str = "") -> None:
        """A new startup in the same log, begun by `obs`: the crash of the one before is
        final now.  One that was serving and said nothing is not taken for a crash: a
        relaunch after `kill -9`, a closed terminal, a second server started into the same
        log read the same as after a SIGKILL by the kernel."""
        events.extend(self.settle(state))
        _start_over(state, obs, obs.rule.id, server)
        state.spans.append(new_span(self._first_phase(), obs, now))
        state.phase = self._first_phase()
        sid = state.startup_id
        events.append(StartupBegan(state.epoch, sid, obs.text))  # type: ignore[arg-type]
        events.append(Restarted(state.epoch, obs.text, sid))
        events.append(PhaseChanged(state.epoch, WAITING, state.phase, now, obs.text, sid))

    def _phase_marker(self, state: State, rule: Rule, obs: Observation, now: float,
                      events: list[Event]) -> None:
        """A line of a phase: the startup moves (`_advance`), and whether the phase's work
        is done now, or began again after it was (`State.work_again_at`, for the ETA)."""
        was = (state.phase, state.phase_done)
        self._advance(state, rule, obs, now, events)
        note_follower_done(self.pack, state, obs)    # no ready line will come
        note_phase_done(self.pack, state, rule)
        if was == (state.phase, True) and not state.phase_done:
            state.work_again_at = now

    def _first_phase(self) -> str:
        return self.pack.phases[0]

    def _advance(self, state: State, rule: Rule, obs: Observation, now: float,
                 events: list[Event]) -> None:
        target = rule.phase
        assert target is not None
        if rule.beside:
            if state.phase not in (WAITING, READY, *TERMINAL):
                beside_span(state, rule, obs, now)
            return
        if target == READY and not servers_ready(self.pack, state, obs):
            return
        if target != READY and self.replicas_apart(state) and \
                not replicas_allow(self.pack, state.ranks, rule, obs.text, state.lanes, obs.proc,
                                   state.rank_pids):
            return     # a faster data-parallel replica: the startup is where the slowest is
        cur_i = self.pack.phase_index(state.phase)
        new_i = self.pack.phase_index(target)
        if new_i > cur_i and ends_a_phase_left(self.pack, state, rule, obs.text):
            return     # another rank's end of a phase a `begins` marker already left
        if new_i > cur_i and self._catching_up(state, obs, cur_i):
            return     # a rank's late end of the load the others' draft stepped back past
        begins = begins_now(state, rule)
        if rule.closes_as and rule.id not in state.begun and cur_i <= new_i and \
                state.phase not in (WAITING, READY, *TERMINAL, rule.closes_as):
            self._closes(state, rule, obs, now, events)
        elif new_i > cur_i:
            self._enter(state, target, obs, now, events)
            if rule.provisional and events and isinstance(events[-1], PhaseChanged):
                state.deferred = events.pop()     # announced once confirmed (or replaced)
            if target == READY:
                _announce_ready(state, obs, now, events)
        elif new_i < cur_i and rule.reenter and state.deferred is not None:
            # the provisional phase is replaced by this earlier one, from the same moment:
            # announced once, as the phase the startup went into
            e, old = state.phase_entered, state.deferred.old
            assert e is not None
            e.phase = target
            state.phase, state.phase_progress = target, False
            d, state.deferred = state.deferred, None
            events.append(PhaseChanged(state.epoch, old, target, d.at, d.line, state.startup_id))
        elif new_i < cur_i and begins_again(self.pack, state, rule, obs.text, new_i,
                                            self.replicas_apart(state)):
            # a rank's second pass after it ended a later phase (`begins: own_rank`)
            state.begun.add(again_key(rule))
            self._enter(state, target, obs, now, events)
        elif new_i < cur_i and rule.reenter and not state.phase_progress and \
                state.phase != READY and self._rank_went_past(state, rule, obs, new_i):
            # the current phase was entered too early and is still empty: correct it
            last = state.phase_entered
            if last is not None and last.phase == state.phase and \
                    sum(1 for e in state.history if e.phase == state.phase) == 1:
                drop_last(state)
            self._enter(state, target, obs, now, events)
        elif begins and target != state.phase:
            # a rule that begins a phase moves there whatever the order (vLLM 0.34: the JIT
            # warmup after the KV estimate, the KV commit after capture)
            self._enter(state, target, obs, now, events)

    def replicas_apart(self, state: State) -> bool:
        """Do this launch's data-parallel replicas start apart (the pack's `replicas:`)?"""
        unless = self.pack.replicas_unless
        return unless is not None and bool(self.pack.ranks) and \
            not any(state.args.get(a) is True for a in unless)

    def _replicas_seen(self, state: State) -> bool:
        """Have two or more data-parallel replicas, starting apart, begun (each prints its own
        bars then)?"""
        return self.replicas_apart(state) and \
            len(replica_positions(self.pack, state.ranks, state.lanes)) >= 2

    def _rank_went_past(self, state: State, rule: Rule, obs: Observation, new_i: int) -> bool:
        """A `reenter: own_rank` rule steps back only on a line whose rank had itself got
        past that phase: a rank's second load (SGLang's speculative draft, after its own
        `Load weight end.`), not a slow rank's first while the others size the KV pool
        (which flapped loading / allocating).  A TP group loads its draft after its own
        barrier (0.5.23 load_model_utils.py dist_barrier_after_load), so that rank's draft
        says its whole group ended: the others of its group need not have said so (a rank
        whose end was lost, or that logs elsewhere, kept the draft timed as allocating,
        2m35s for a 4 s sizing).  Groups apart (DP replicas) end at different times: each
        must have a rank past, or each group's end and draft flipped the phase again."""
        if not rule.reenter_own_rank:
            return True
        rank = self.pack.rank_of(obs.text, state.rank_pids) if self.pack.ranks else ""
        if not rank or rank not in state.ranks:
            return True
        rp = state.ranks[rank]
        if self.pack.phase_index(rp.phase) <= new_i:
            return False       # a slow rank's first load
        if rule.begins_own_rank and rp.finished and \
                self.pack.phase_index(rp.phase) >= self.pack.phase_index(state.phase):
            return False       # it ended the phase it would leave: `begins_again`'s
        apart = self.replicas_apart(state)
        stage = self.pack.replica_stage
        past = {replica_of(r, stage) if apart else "" for r, rp in state.ranks.items()
                if self.pack.phase_index(rp.phase) > new_i}
        return all((replica_of(r, stage) if apart else "") in past for r in state.ranks)

    def _catching_up(self, state: State, obs: Observation, cur_i: int) -> bool:
        """Is this line a rank's first arrival past the startup's phase while another rank
        of its group was past it already?  The startup is there because it stepped back
        (that group's draft began after its barrier): this is the rank's own first load
        ending late, not the draft's end, and moving on flapped loading / allocating."""
        rank = self.pack.rank_of(obs.text, state.rank_pids) if self.pack.ranks else ""
        rp = state.ranks.get(rank) if rank else None
        if rp is None or not rp.moved or len(rp.advances) < 2 or rp.advances[-2][0] > cur_i:
            return False
        stage = self.pack.replica_stage
        group = replica_of(rank, stage) if self.replicas_apart(state) else None
        return any(r != rank and self.pack.phase_index(p.phase) > cur_i and
                   (group is None or replica_of(r, stage) == group) for r, p in state.ranks.items())

    def _closes(self, state: State, rule: Rule, obs: Observation, now: float,
                events: list[Event]) -> None:
        """An end marker that says what the time before it was (vLLM's download): that span
        is relabelled, announced now, and the rule's phase opens here; once per startup
        (another rank's copy of the line is a mention)."""
        target = rule.phase
        assert target is not None
        state.begun.add(rule.id)
        old, spans = state.phase, len(state.spans)
        reattribute(state, rule, obs)
        was = state.phase_entered.phase if state.phase_entered else state.phase
        if state.deferred is not None:     # the provisional entry, as what it was
            d, state.deferred = state.deferred, None
            events.append(PhaseChanged(state.epoch, d.old, was, d.at, d.line, state.startup_id))
        if was == target and len(state.spans) > spans:
            # the end of the phase it names, its seconds said (vLLM's `Graph capturing
            # finished in 24 secs` on a follower node, which prints no capture bar): its last
            # seconds were that phase, open until the next
            state.phase, state.phase_progress = target, False
            events.append(PhaseChanged(state.epoch, old, target, now, obs.text, state.startup_id))
            return
        state.phase = was
        self._enter(state, target, obs, now, events)

    def _stats(self, state: State, obs: Observation, now: float, events: list[Event]) -> None:
        if state.phase in self._startup and (done := follower_ready(state, now, True)):
            # a follower whose ranks all ended runs batches (SGLang `--enable-dp-attention`:
            # each DP rank logs its own): it serves, and may never be quiet for 10 s
            events.extend(self._ready_at(state, done, now))
        if state.phase == WAITING:
            # a log that starts while the server is already serving
            self._enter(state, READY, obs, now, events)
            _announce_ready(state, obs, now, events)
        if state.phase != READY:
            return  # warmup batches before ready are not serving traffic
        if state.hints:
            state.hints.clear()   # it served on after them: they say nothing of a later crash
        values = stat_values(obs.fields, obs.rule.scale)
        if values:
            state.stats = merge_stats(state.stats_by, state.stats_seen,
                                      stats_source(self.pack, obs), values, now)
            events.append(StatsUpdated(state.epoch, dict(state.stats),
                                       obs.log_time if obs.log_time is not None else now))

    # -- crashes ----------------------------------------------------------------------------
    def _crash_line(self, state: State, obs: Observation, now: float,
                    events: list[Event]) -> None:
        """A crash rule's line: a crash; after a ready, one of a `ready_hint` rule is a hint
        of the reason of a crash the engine announces (its scheduler's exception, a worker's
        death), the latest kept: a serving server logs such an exception for one request and
        serves on (SGLang's `Error in request:` of an image that ran the GPU out of memory in
        the HTTP process; a tool name the model made up, quoted)."""
        rule = obs.rule
        assert rule.crash is not None
        if rule.ready_hint and state.phase == READY:
            state.hints[rule.crash] = Evidence(rule.crash, obs.text.rstrip(), obs.line_number)
            return
        self._crash(state, obs, now, events)

    def _crash(self, state: State, obs: Observation, now: float, events: list[Event]) -> None:
        rule = obs.rule
        assert rule.crash is not None
        during, done, reach, replica = self._crash_phase(state, obs)
        crash = Crash(reason=rule.crash, during=during, line=obs.text.rstrip(),
                      line_number=obs.line_number, at=now, log_time=obs.log_time,
                      phase_done=done, reach=reach)
        if replica:       # placed ahead of the startup's phase, by its own replica's
            crash.replica, crash.startup_phase = replica, state.phase
        self._enter(state, CRASHED, obs, now, events)
        state.crash = crash
        state.crash_settled = False
        state.crash_changed_at = state.crash_read_at = self._read_at
        add_evidence(self.pack, state, crash, rule, rule.crash, obs)
        crash.rank = self.pack.rank_of(obs.text, state.rank_pids) if self.pack.ranks else ""
        if not crash.rank and len(state.servers) > 1:
            crash.rank = self.pack.server_of(obs.text)   # which server of the launch
        crash.proc = obs.proc if len(state.procs) > 1 else ""   # which process of the stream
        events.append(Crashed(state.epoch, crash))

    def _crash_phase(self, state: State, obs: Observation) -> tuple[str, bool, int, str]:
        """The phase a crash line's process was in, whether its work there had ended, the
        furthest phase its frames may place it in (`Crash.reach`), and the replica whose
        phase that is ("" for the launch's).  The launch's phase, except where data-parallel
        replicas start apart and the crashing line's replica was further: the startup waits
        for the slowest replica, and DP1 running out of memory in its capture while DP3 still
        read its weights was `cuda_oom during loading_shards` (DESIGN: where it happened is
        the crash's `during`)."""
        main = state.history
        during = main[-2].phase if state.phase == STOPPED and len(main) > 1 else state.phase
        done = state.phase_done and during == state.phase
        now = self.pack.phase_index(during)
        own = replica_reach(self.pack, state.ranks, obs.text, state.lanes, obs.proc,
                            state.rank_pids) \
            if self.replicas_apart(state) and during not in (READY, *TERMINAL) else None
        if own is None or not 0 <= now < own[1][0] < self.pack.phase_index(READY):
            return during, done, -1, ""
        # a replica that ended its phase was in the next one's work (its capture bar names
        # no replica): a frame of it may place the crash there
        name, (mine, ended) = own
        return self.pack.phases[mine], ended, mine + (1 if ended else 0), name

    def _while_crashed(self, state: State, obs: Observation, now: float,
                       events: list[Event]) -> bool:
        """A line after a crash: more evidence, or (the crash unconfirmed: a bare traceback,
        no engine announcement, no specific cause) the startup carrying on, which takes the
        crash back.  True when it did: the line is then read as any other."""
        crash = state.crash
        rule = obs.rule
        if crash is None or state.crash_settled:
            return False  # a settled crash is final: alerted and counted as it was
        if rule.withdraws:
            # the exceptions were a call's, returned to its caller (vLLM's utility call:
            # each worker's `WorkerProc hit an exception.`, then the engine core's
            # `Invocation of add_lora method failed`): the server serves on
            if crash.during == READY and self._same_call(state, crash, obs):
                self._take_back(state, crash, events)
            return False
        if rule.chain:
            crash.chain_pending = True
            return False
        if rule.crash or rule.hint:
            if not crash.rank and self.pack.ranks and obs.proc == (crash.proc or obs.proc) \
                    and same_record(crash, obs, self.pack.crash_settle):
                crash.rank = self.pack.rank_of(obs.text, state.rank_pids)  # (its first line: no tag)
            before = (crash.reason, crash.line, crash.confirmed)
            add_evidence(self.pack, state, crash, rule, rule.crash or rule.hint, obs)  # type: ignore[arg-type]
            if (crash.reason, crash.line, crash.confirmed) != before:
                state.crash_changed_at = self._read_at
                events.append(CrashUpdated(state.epoch, crash))
            return False
        if crash.confirmed or not carries_on(self.pack, crash, obs, state.rank_pids):
            return False
        # the startup carried on: the traceback was not fatal (a `logger.exception` of a
        # fallback: vLLM's weight-cache IPC loader, then the disk loader's shard bar)
        self._take_back(state, crash, events)
        return True

    def _same_call(self, state: State, crash: Crash, obs: Observation) -> bool:
        """A call's failure (`withdraws`) came with the crash's exceptions: within
        SETTLE_LONGEST of its first line, by the log's stamps where both have one, else by
        when they were read.  A crash read in one go (replay, `watch --last`, the daemon's
        catch-up at attach) is not settled between its lines: before (helper adv33 H2, a
        regression of 6eb619f), a TP1 CUDA OOM at 10:06 was taken back by a LoRA sidecar's
        `Invocation of add_lora method failed` at 10:20: "ready", no page."""
        if obs.log_time is not None and crash.log_time is not None:
            return obs.log_time - crash.log_time <= SETTLE_LONGEST
        first = state.crash_read_at
        return first is None or self._read_at - first <= SETTLE_LONGEST

    @staticmethod
    def _take_back(state: State, crash: Crash, events: list[Event]) -> None:
        """The crash was none: the startup is back in the phase it crashed in."""
        state.crash = None
        state.crash_changed_at = None
        retract(state, CRASHED)
        state.phase = crash.during
        events.append(CrashRetracted(state.epoch, crash.during))


def carries_on(pack: RulePack, crash: Crash, obs: Observation,
               names: dict[str, tuple[int, str]] | None = None) -> bool:
    """Does this line, after an unconfirmed crash, say the startup went on?  A later phase's
    line; a bar of the crash's own phase moving, where the traceback was the first rank's
    (what a traceback logged and survived is followed by: the loader it fell back to
    counting shards; rank 0's bar says nothing of rank 3); or a line of the crash's phase
    from the rank whose traceback it was (that process lives).  Only a line of the process
    that crashed, where one stream has several (another server going on says nothing)."""
    rule = obs.rule
    if not rule.phase or crash.proc and obs.proc != crash.proc:
        return False
    if pack.phase_index(rule.phase) > pack.phase_index(crash.during):
        return True
    if rule.phase != crash.during:
        return False
    rank = pack.rank_of(obs.text, names) if pack.ranks else ""
    if rule.progress and not rank:
        # an untagged bar: the engines print it on the first rank only (SGLang 0.5.23
        # model_loader/weight_utils.py:1154, vLLM's likewise): news of that rank alone
        return not crash.rank or first_rank(crash.rank)
    return bool(crash.rank) and rank == crash.rank


def first_rank(rank: str) -> bool:
    """`TP0`, `DP0_TP0`, `Worker_TP0`: every number in the tag is 0 (the rank a bar is
    printed by); `TP3` is not."""
    numbers = re.findall(r"\d+", rank)
    return bool(numbers) and all(int(n) == 0 for n in numbers)


def passed_over(pack: RulePack, state: State, rule: Rule) -> bool:
    """Notes a rule some `unless_seen` names that matched in this startup (`State.seen`), and
    says whether `rule` does nothing here: one it names matched before (SGLang 0.4.x's
    `Init torch distributed ends. mem usage=`, then its `Using model weights format` on a
    cached start)."""
    if rule.id in pack.watched:
        state.seen.add(rule.id)
    return bool(rule.unless_seen & state.seen)


def confirms(pack: RulePack, state: State, rule: Rule) -> bool:
    """Does this rule make the provisional phase real (anything but the same phase's
    marker from another rank, or an earlier phase's reenter that replaces it)?"""
    if rule.restart or rule.crash or rule.stop:
        return True
    if rule.progress and not (rule.phase and rule.reenter):
        return True
    if rule.phase is None:
        return False
    if rule.begins and rule.id not in state.begun and rule.phase != state.phase:
        return True
    return pack.phase_index(rule.phase) > pack.phase_index(state.phase)


def ends_a_phase_left(pack: RulePack, state: State, rule: Rule, text: str) -> bool:
    """Is this end marker another rank's word on a phase the startup already left by a
    `begins` marker?  vLLM 0.34 commits the KV cache after the capture (`Memory after
    warmup`, allocating again): TP1's `Graph capturing finished`, a second after TP0's
    commit, re-entered cuda_graph (cuda_graph, allocating 0 s, cuda_graph until ready).
    Only where another rank had ended that phase: a pass that comes back by itself
    (TensorRT-LLM's second capture after its memory profile) ends it again."""
    if not rule.finishes or rule.phase is None or not pack.ranks or \
            not any(sp.phase == rule.phase and not sp.beside for sp in state.spans):
        return False
    rank = pack.rank_of(text, state.rank_pids)
    want = (pack.phase_index(rule.phase), True)
    if not rank or not any(r != rank and (pack.phase_index(p.phase), p.finished) >= want
                           for r, p in state.ranks.items()):
        return False
    return any(r.phase == state.phase and (r.begins and r.id in state.begun or
                                           again_key(r) in state.begun) for r in pack.rules)


def begins_now(state: State, rule: Rule) -> bool:
    """Does this line begin its phase now?  A `begins` rule does the first time it fires
    in a startup and while the startup is still starting; the same line again (another
    rank printing the milestone, a summary) only mentions the phase."""
    if not rule.begins or state.phase in (READY, *TERMINAL, WAITING):
        return False
    if rule.id in state.begun:
        return False
    state.begun.add(rule.id)
    return True


def again_key(rule: Rule) -> str:
    """`State.begun`'s entry for a `begins: own_rank` rule that began its phase again."""
    return rule.id + "#again"


def begins_again(pack: RulePack, state: State, rule: Rule, text: str, new_i: int,
                 apart: bool = False) -> bool:
    """Does this `begins: own_rank` line begin its (earlier) phase again?  Only on a line of
    a rank that had itself ended a later phase (its furthest marker an end): SGLang 0.5.10
    builds the speculative draft after the target's whole init (managers/scheduler.py
    `init_model_worker`), so a rank's draft `Load weight begin.` follows its own `Capture
    cuda graph end.`; the load was timed as capture, and a crash in it said `during
    cuda_graph`.  Not a slow rank's first load, nor one whose later phase is still under way
    (0.5.23's draft, before any KV pool, steps back by `reenter` instead); once per startup
    (the other ranks' copies mention it).  Data-parallel replicas starting apart: once each
    has a rank that ended it (the startup is where the slowest is: DP0's draft while DP1
    still captured moved it).  A line with no rank (SGLang's JSON records):
    where the phase it leaves had work of its own (its bar moved), not one still empty (the
    draft before any KV pool, `reenter`'s)."""
    if not rule.begins_own_rank or again_key(rule) in state.begun or \
            state.phase in (READY, *TERMINAL, WAITING):
        return False
    rank = pack.rank_of(text, state.rank_pids) if pack.ranks else ""
    if not rank:
        return state.phase_progress
    done = {r for r, rp in state.ranks.items()
            if rp.finished and pack.phase_index(rp.phase) > new_i}
    if rank not in done:
        return False
    stage = pack.replica_stage
    replicas = {replica_of(r, stage) for r in done}
    return not apart or all(replica_of(r, stage) in replicas for r in state.ranks)


def _announce_ready(state: State, obs: Observation, now: float, events: list[Event]) -> None:
    """The startup is ready: `Ready`, with its duration and slowest phase; and `Degraded`
    where a part of it failed while it started (it serves without that part from now on:
    the same open alert as a part that fails while it serves)."""
    state.ready_line = obs.text
    state.ready_at = now
    took = state.ready_in()
    durations = state.durations()
    slowest = max(durations, key=lambda p: durations[p]) if durations else None
    state.stalled = False
    events.append(Ready(state.epoch, took, slowest, obs.text, state.startup_id, durations))
    if state.degraded is not None:
        events.append(degraded_event(state))


def _note_progress(pack: RulePack, state: State, name: str, obs: Observation, now: float,
                   events: list[Event], apart: bool = False) -> None:
    """A progress line (shards, a bar): its counter and rate, while the startup is starting.
    The main bar once complete and its phase over is the startup's: another model's bar
    after it (a speculative draft model's shards, SGLang 0.5.23's EAGLE draft runner after
    the target's capture, vLLM 0.34's draft loaded after the target's `Loading weights
    took`) does not replace the checkpoint's count (before: `shards 1/1` for a 17-shard
    model with a 1-shard draft).  Nor does a smaller bar after it in its own phase: a draft
    loaded right after the target steps back into loading (SGLang 0.5.23's scheduler loads
    the draft before the memory pool); a draft reading the target's checkpoint again (a
    NextN / MTP layer) counts the same shards, and is shown as it goes."""
    if state.phase == READY:
        return  # e.g. a LoRA or weight update after startup: not startup progress
    prev = state.progress.get(name)
    rule = obs.rule
    if (rule.primary and rule.phase and prev is not None and prev.total
            and prev.current >= prev.total
            and (pack.phase_index(rule.phase) < pack.phase_index(state.phase)
                 or _smaller_bar(obs, prev.total))):
        return
    try:
        cur = int(obs.fields["current"])
        total = int(obs.fields["total"])
    except (KeyError, ValueError):
        return
    own = obs.log_time if obs.own_time else None
    if apart and not state.bars.get(name) and prev is not None and prev.current < prev.total:
        # the bar of the replica that began first, read while it was the only one: it is
        # one of the bars (before, the next replica's frames continued it and its end read
        # as the slow one's: `5/5`, 0 s left, while DP1 had its whole load ahead)
        state.bars[name] = [prev]
    shown = replica_bar(state.bars.setdefault(name, []), cur, total, obs.fields.get("rate"),
                        own, now, not obs.cut) if apart else \
        next_progress(prev, cur, total, obs.fields.get("rate"), own, now, measure=not obs.cut)
    if shown is None:
        return
    state.progress[name] = shown
    state.phase_progress = True
    events.append(Progress(state.epoch, name, shown.current, shown.total, shown.rate))


def _smaller_bar(obs: Observation, total: int) -> bool:
    """Does this bar count fewer than `total` (another, smaller model's)?"""
    try:
        return int(obs.fields["total"]) < total
    except (KeyError, ValueError):
        return False


def stats_source(pack: RulePack, obs: Observation) -> str:
    """Which engine or data-parallel rank a serving-stats line is of: vLLM's `Engine 001:`
    (the rule's `engine` group), SGLang's `DP1` of its rank tag (`DP1 TP1 EP1`: one line per
    DP rank, srt/observability/metrics_collector.py:1361); "" where the line says neither
    (one source: a TP rank's line is the whole server's)."""
    if obs.fields.get("engine"):
        return "Engine " + obs.fields["engine"]
    m = _DP_RANK.search(pack.rank_of(obs.text)) if pack.ranks else None
    return m.group(0) if m else ""


def merge_stats(by: dict[str, dict[str, float]], seen: dict[str, float], source: str,
                values: dict[str, float], now: float) -> dict[str, float]:
    """The server's figures once `source`'s latest (read at `now`) are in `by` / `seen`:
    throughput and request counts summed over the engines / DP ranks whose latest line is
    current (`STATS_STALE`), the rest (token usage) their mean.  Before, the last line's: two
    DP ranks at 1000 and 1200 tok/s exported 1200; and an SGLang rank that went idle (it
    prints nothing then) kept its last 1200 tok/s in the sum for good."""
    if source in by or len(by) < MAX_STAT_SOURCES:   # a hostile log's DP9999999 tags: bounded
        by[source] = {**by.get(source, {}), **values}
        seen[source] = now
    return _summed(_current(by, seen, now))


def _current(by: dict[str, dict[str, float]], seen: dict[str, float],
             now: float) -> list[dict[str, float]]:
    """The figures of each engine / DP rank that count at `now`: its latest line's while
    current (`STATS_STALE`); after, only those of one whose latest line said it was idle (0
    running, 0 queued: vLLM's line as it goes idle), its rates 0: an engine that said so
    prints nothing until a request comes.  One whose latest line had requests running is
    unknown (SGLang's last decode line before idling, or before a hang)."""
    out = []
    for source, figures in by.items():
        if now - seen.get(source, -math.inf) <= STATS_STALE:
            out.append(figures)
        elif figures.get("running_requests") == 0 and not figures.get("queued_requests"):
            out.append({k: 0.0 if k in RATE_STATS else v for k, v in figures.items()})
    return out


def _summed(sources: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    n: dict[str, int] = {}
    for figures in sources:
        for k, v in figures.items():
            out[k] = out.get(k, 0.0) + v
            n[k] = n.get(k, 0) + 1
    return {k: v if k in SUMMED_STATS else v / n[k] for k, v in out.items()}


def current_stats(state: State, now: float) -> dict[str, float]:
    """The serving figures that are current at `now` (what /metrics, the page and `watch
    --serve` show): those of the engines / DP ranks with a serving line in the last
    `STATS_STALE` seconds, and of those whose latest line said they were idle (`_current`);
    with none, the rates read 0 (nothing was logged as generated: the engines print while
    they generate) and the counts and usage are unknown (left out: an idle SGLang prints
    nothing, nor does a hung one).  Before, an SGLang server idle for
    2 h exported its last 287 tok/s, and one dead for a minute its 2,874.  None but a
    serving server's; those of a checkpoint from before the figures had an age are old."""
    if state.phase != READY:
        return {}
    counted = _current(state.stats_by, state.stats_seen, now)
    if counted:
        return _summed(counted)
    return {k: 0.0 for k in state.stats if k in RATE_STATS}


def stat_values(fields: dict[str, str], scale: dict[str, float] | None) -> dict[str, float]:
    """A serving line's values as numbers (a `%` dropped, a flag 1.0 / 0.0, the rule's scale
    applied); what is not a number is left out."""
    values: dict[str, float] = {}
    for k, v in fields.items():
        if k == "engine":                 # which engine's line (stats_source), no figure
            continue
        if v == "True" or v == "False":   # a flag of the batch (SGLang's `cuda graph:`)
            values[k] = 1.0 if v == "True" else 0.0
            continue
        try:
            x = float(v)   # (a number without `%`: most values, no copy made)
        except ValueError:
            try:
                x = float(v.rstrip("%"))
            except ValueError:
                continue
        values[k] = x * scale[k] if scale and k in scale else x
    return values


def _start_over(state: State, obs: Observation, rid: str, server: str) -> None:
    """`state` becomes a new startup's (the next epoch), in place: what is kept across
    startups is the log's clock and activity, nothing of the startup before."""
    fresh = State(epoch=state.epoch + 1, startups=state.startups + 1,
                  restart_rules={rid, f"{server}|{rid}"} if server else {rid},
                  procs={obs.proc} if obs.proc else set(),
                  last_activity=state.last_activity, last_log_time=state.last_log_time,
                  last_own_time=state.last_own_time,
                  startup_id=startup_id_of(obs), untrusted_stamps=state.untrusted_stamps,
                  servers={server: False} if server else {},
                  supervised=obs.rule.supervisor)
    if obs.proc:
        fresh.restart_rules.add(f"{obs.proc}>{rid}")
    for slot in State.__slots__:  # type: ignore[attr-defined]
        setattr(state, slot, getattr(fresh, slot))


def crashed_at_launch(pack: RulePack, state: State) -> list[Event]:
    """A crash settled in a log that showed no startup, whose root cause only a launch meets
    before its server's own launch line (its rule's `at_launch`: argparse, a --config file,
    an import, the model's config or its hub repository): the startup that crashed at
    launch, counted, in the pack's first phase.  Before, `crashed: bad_argument during
    waiting` with 0 startups (the same failure read `during launching`, 1 startup, where a
    line such as vLLM's platform or a wrapper's echoed command came first).  Not another
    cause, nor a rank's (`TP0`: a server that ran): a log that begins inside a traceback (an
    excerpt, a log read from its middle) says nothing of its launch.  Decided at the settle:
    the cause line that names the reason comes after the traceback's first line.  Such a
    startup has no StartupId (no line of it is known to be its first: its alerts are keyed
    `-`, as a crash before any startup was)."""
    crash = state.crash
    if crash is None or state.epoch or crash.during != WAITING or crash.rank or not (any(
            e is not None and e.at_launch and e.reason == crash.reason and
            e.line_number == crash.line_number for e in (crash.cause, crash.marker_reason))
            or _launch_frame(state, crash)):
        return []
    state.epoch, state.startups, state.mid_startup = 1, state.startups + 1, False
    crash.during = pack.phases[0]
    first = state.spans[0] if state.spans else None
    if first is not None:     # its launch, from the crash's first line: `launching > crashed`
        state.spans.insert(0, Span(crash.during, first.at, first.log_time, first.log_stamp,
                                   first.line, end_at=first.at, end_log=first.log_time))
    return [StartupBegan(state.epoch, state.startup_id, crash.line)]  # type: ignore[arg-type]


def _launch_frame(state: State, crash: Crash) -> bool:
    """The crash's traceback passed through a frame only a launch runs (its rule's
    `at_launch`: the arguments resolved before the server starts, SGLang's arg hooks, vLLM's
    `create_engine_config`) and its root cause is a bare exception (`OSError: ...`), no cause
    of its own.  The frame need not give the reason: one deeper in the call may (its hint
    `yields`: SGLang 0.5.23's GGUF reference downloaded by huggingface_hub inside the
    argument resolution, cut short, is `hub_download_failed`), and it is a launch all the
    same."""
    cause = crash.cause
    return cause is not None and cause.reason != crash.reason and \
        cause.line_number == crash.line_number and \
        any(h.at_launch and h.rank == SPECIFIC_RANK for h in state.hints.values())


def launch_of(state: State) -> str:
    """The digest of a crashed launch's flags (`CrashSettled.launch`); "" (unknown: folded
    by reason alone, sinks/alerts/loop.py) where a line of them was cut.  A cut dump keeps
    the keys whose value ended before the cut, and where the cut falls moves with what
    differs at every launch of one command: SGLang's `random_seed`, drawn anew when not
    given (0.5.23 arg_groups/serving_hook.py: `random.randint(0, 1 << 30)`, 8 to 10
    digits), a syslog tag's pid.  Before, two such relaunches could keep one key more or
    less, digest apart, and page again: the loop's fold lost.  Such a launch is compared
    by the flags before its cut (`launch_prefixes`)."""
    return "" if state.args_partial else launch_digest(state.args)


def same_record(crash: Crash, obs: Observation, settle: float) -> bool:
    """Is `obs` still the crash's own record (a traceback whose first line had no tag), by the
    server's clock: stamped within `settle` of the crash line, or unstamped?  A later rank's
    line is a victim's, not the crash's: a live daemon has settled the crash by then (quiet
    `crash_settle`).  Before, replay of sglang-046-tp4-load-oom-killed gave the SIGCHLD line
    (12:00:28, no tag) TP0's gloo failure 22 s later, `(TP0 first)`, where the daemon that
    followed the log as it was written paged no rank (and the rank killed was TP2)."""
    if crash.log_time is None or obs.log_time is None or not obs.own_time:
        return True
    return obs.log_time - crash.log_time <= settle
