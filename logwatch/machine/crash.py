"""Crash evidence: which line is the root cause, and which reason the evidence gives.

A crash keeps collecting evidence while its traceback is written: cause lines (exception
lines a rule names), the engine's announcements (`marker: true`), hints seen shortly before
(`hint:` rules, frames), the pack's default for the phase it crashed in.
"""

from __future__ import annotations

from ..rules.pack import READY, SPECIFIC_RANK, Rule, RulePack, reason_rank
from ..rules.reasons import fill_meaning
from .ranks import rank_ended
from .state import Crash, Evidence, Observation, State

HINT_WINDOW_LINES = 2000      # a hint this many lines before a crash still classifies it
DIED, KILLED, EXCEPTION = "child_process_died", "host_oom_killed", "python_exception"


# exception lines a crash keeps for `first_hint` (the hints it weighs are at its start): a
# crashed server that goes on printing tracebacks must not grow its state, nor its checkpoint
MAX_EXCEPTION_LINES = 256


def add_evidence(pack: RulePack, state: State, crash: Crash, rule: Rule, reason: str,
                 obs: Observation) -> None:
    """Add a crash line (cause, announcement or hint) to what is known of `crash`, and
    recompute its reason and root-cause line."""
    own = (rule.crash or rule.hint) == reason
    ev = Evidence(reason, obs.text.rstrip(), obs.line_number,
                  fill_meaning(rule.meaning, obs.fields) if own else "", own and rule.at_launch,
                  own and rule.yields, record_rank(pack, state, crash, obs))
    place_crash(pack, crash, rule)
    if rule.hint:
        state.hints.setdefault(reason, ev)
    elif rule.marker:
        if crash.marker is None or (crash.marker_tentative and not rule.tentative):
            # the first announcement; an engine's own one replaces a bare `Traceback`
            crash.marker, crash.marker_reason = ev, ev
            crash.marker_tentative = rule.tentative
        elif crash.marker_reason is None or ev.rank > crash.marker_reason.rank:
            crash.marker_reason = ev
    else:
        best = crash.cause
        if best is None or ev.rank > best.rank or (ev.rank == best.rank and crash.chain_pending):
            crash.cause = ev
        crash.chain_pending = False
        if len(crash.exception_lines) < MAX_EXCEPTION_LINES:   # (a crash spewing on)
            crash.exception_lines.append(ev.line_number)
    if rule.crash and (not rule.tentative or reason_rank(reason) == SPECIFIC_RANK):
        crash.confirmed = True
    if crash.died is None and (reason == DIED or rule.marker and reason == KILLED):
        crash.died = ev
    elif reason == EXCEPTION and crash.first_exception is None:
        crash.first_exception = ev.line_number
    conclude(pack, state, crash)


def record_rank(pack: RulePack, state: State, crash: Crash, obs: Observation) -> str:
    """The rank whose record a crash line is, and the record an untagged line after it
    continues: its own tag; an untagged line without a stamp of its own, of the same
    process, continues the record before it (SGLang 0.5.23 logs `Scheduler hit an
    exception: {traceback}` as one record, scheduler.py:6372: only its first line has the
    `[... TP5]` prefix, the `torch.OutOfMemoryError` under it none); an untagged stamped line
    is another process's (vLLM's `(EngineCore pid=N)`, SGLang's main process): no rank."""
    if not pack.ranks:
        return ""
    tag = pack.rank_of(obs.text, state.rank_pids)
    if not tag and (obs.own_time and obs.log_time is not None or obs.proc != crash.record_proc):
        crash.record_rank = ""
    elif tag:
        crash.record_rank = tag
    crash.record_proc = obs.proc
    return crash.record_rank


def conclude(pack: RulePack, state: State, crash: Crash) -> None:
    """The crash's reason and root-cause line from its evidence."""
    crash.reason = crash_reason(pack, state, crash)
    died = crash.died
    line = died if died is not None and died_first(crash) and crash.reason == died.reason \
        else crash.cause or crash.marker
    if line is not None:
        crash.line, crash.line_number = line.line, line.line_number
        crash.cause_rank = line.who
    # the root-cause line's rule's sentence, where it gave the crash its reason
    crash.meaning = line.meaning if line is not None and line.reason == crash.reason else ""


def read_whole(pack: RulePack, state: State, rule: Rule, obs_text: str,
               line_number: int) -> bool:
    """The crash line at `line_number`, read before its end (a quiet log's unfinished last
    line: `pipeline.read_open_line`), is whole now, `rule`'s: what quoted it cut quotes it
    whole, and a cause the cut gave is the whole line's (`...load_single_module with args
    (..., Lin` read `weight_loading_error`, the whole line `CUDA out of memory`).  True
    when the crash changed.  Before, a writer that paused 6 s inside `RuntimeError: NCCL
    error: unh` had that as the root cause of the page sent 2 s after the rest came.  A
    settled crash stays as it was alerted."""
    crash = state.crash
    if crash is None or state.crash_settled:
        return False
    before = (crash.reason, crash.line)
    text = obs_text.rstrip()
    for ev in (crash.cause, crash.marker, crash.marker_reason, crash.died, *state.hints.values()):
        if ev is not None and ev.line_number == line_number:
            ev.line = text
    cause = crash.cause
    if rule.crash and not (rule.hint or rule.marker) and cause is not None and \
            cause.line_number == line_number:
        cause.reason = rule.crash
    conclude(pack, state, crash)
    return (crash.reason, crash.line) != before


def place_crash(pack: RulePack, crash: Crash, rule: Rule) -> None:
    """A frame of the crash's first traceback (no exception line yet: later tracebacks are
    other processes' consequences) that says which phase its process was in (`during:`)
    places the crash there when that is earlier than the launch's phase: the rank that
    crashed had not got as far as the others.  vLLM pipeline parallel: PP0 loaded and began
    torch.compile, then PP1, still reading its weights, ran out of memory (`in load_model`):
    `during loading_shards`, not `during autotune` (DESIGN: where it happened is the
    crash's `during`).  Not after ready: a LoRA adapter's or a weight update's load then is
    the server's own request.  Later only up to `Crash.reach` (its DP replica's next phase)."""
    if rule.during is None or crash.cause is not None:
        return
    now, frame = pack.phase_index(crash.during), pack.phase_index(rule.during)
    if 0 <= frame < now < pack.phase_index(READY):
        crash.during, crash.phase_done = rule.during, False   # its work was not over there
    elif now < frame <= crash.reach:
        # its DP replica had ended the phase the crash was put in: this frame is the work it
        # went on to (vLLM `-dp 4`: DP2's capture, after its KV cache size, its bar untagged)
        crash.during, crash.phase_done = rule.during, False


def note_phase_done(pack: RulePack, state: State, rule: Rule) -> None:
    """After a phase marker: has the work of the phase the launch is in ended
    (`State.phase_done`)?  Yes when the marker is an end (`finishes: true`) and every rank the
    launch knows of ended the phase (without ranks: the marker says the engine is done
    starting, `ends_rank`: a rankless log's phase end may be one process's of several, vLLM
    V0's `(VllmWorkerProcess pid=N)` worker finishing its capture while the driver, untagged,
    still captures and then fails there).  A crash after that is no failure of the phase's own work, so the phase's
    default reason (`crash_by_phase`) is not given: vLLM's engine core says it is up after
    its capture (`init engine ... took`) and then its API server fails (a `--chat-template`
    path that does not exist) read `cuda_graph_capture_failed`.  A marker of work begun
    (a draft model's capture bar) makes it no again."""
    if not rule.finishes or rule.phase is None:
        state.phase_done = False
        return
    want = (pack.phase_index(state.phase), True)
    if state.ranks:
        state.phase_done = all(rank_ended(rp, want, pack) for rp in state.ranks.values())
    else:
        state.phase_done = rule.ends_rank


def died_first(crash: Crash) -> bool:
    """A process's death was said before any Python exception: the tracebacks after it are
    its consequences (vLLM's `Worker proc VllmWorker-0 died unexpectedly (exit code: -11)`,
    multiproc_executor.py:405, then the engine core's `RuntimeError: Executor failed.`,
    core.py:1985, and the API server's `EngineDeadError`), not its cause.  An exception
    before the death (SGLang's scheduler traceback, then its parent's `child process died`)
    is the cause."""
    died = crash.died
    return died is not None and (crash.first_exception is None
                                 or died.line_number < crash.first_exception)


def first_hint(hints: list[Evidence], crash: Crash) -> Evidence:
    """The hint that classifies a crash: the earliest, as a cause said before its traceback
    (huggingface_hub's `Not enough free disk space` warning) is what the frames after it ran
    into; but not a hint whose rule `yields` where another follows it in the same traceback
    (no exception line of the crash between them).  Such a hint is an outer frame whose
    meaning is "a bare exception raised somewhere in here": the arguments resolved before
    the launch (`frame_server_args`, `frame_engine_args`: bad_argument), a phase's work
    (the loader's `load_weights`, the capture, the autotune, the KV sizing).  A traceback
    lists its frames outermost first, so a hint after it is deeper in the same call, nearer
    the raise, and says what failed: SGLang 0.5.23 resolving a GGUF reference downloads the
    file inside the resolution (arg_groups/model_path_hook.py:50 -> huggingface_hub's
    `http_get`), and a download cut short there (`OSError: Consistency check failed ...
    This is usually due to network issues`) read bad_argument, which sends on-call to the
    command line for a network fault: it is the hub frame's `hub_download_failed`.  Not
    across tracebacks: another process's later frames are not deeper in this call."""
    def deeper(h: Evidence, o: Evidence) -> bool:
        return o.line_number > h.line_number and not any(
            h.line_number < e < o.line_number for e in crash.exception_lines)
    kept = [h for h in hints if not (h.yields and any(deeper(h, o) for o in hints))]
    return min(kept or hints, key=lambda h: h.line_number)


def crash_reason(pack: RulePack, state: State, crash: Crash) -> str:
    """The most specific reason the evidence gives (the order is in docs/architecture.md)."""
    if crash.cause is not None and crash.cause.rank == SPECIFIC_RANK:
        return crash.cause.reason
    if crash.marker_reason is not None and crash.marker_reason.rank == SPECIFIC_RANK:
        return crash.marker_reason.reason
    first_line = min(e.line_number for e in (crash.cause, crash.marker) if e is not None) \
        if (crash.cause or crash.marker) else 0
    hints = [h for h in state.hints.values()
             if h.rank == SPECIFIC_RANK and first_line - h.line_number <= HINT_WINDOW_LINES]
    if hints:
        return first_hint(hints, crash).reason
    by_phase = None if crash.phase_done else pack.crash_by_phase.get(crash.during)
    if by_phase:
        return by_phase
    if died_first(crash):
        return DIED
    generic = [e for e in (crash.cause, crash.marker_reason) if e is not None]
    if crash.cause is not None and crash.marker_reason is not None and \
            crash.cause.line_number == crash.marker_reason.line_number:
        # the exception line IS the engine's announcement ("RuntimeError: Rank 0
        # scheduler died during initialization"): the announcement says more
        return crash.marker_reason.reason
    return max(generic, key=lambda e: e.rank).reason if generic else "unknown"

