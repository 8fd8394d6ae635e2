"""Spans: the only code that creates, ends, moves or relabels a startup's spans.

A startup is a list of spans (`State.spans`, machine/state.py `Span`).  `StartupMachine`
decides *when* (which line moves the startup where); these functions are *how*, so every
rule about spans is in one place: a main-line span closes where the next one opens; at
ready or an end every open span closes (spans beside the main line too); a span entered
too early can be taken back; a span beside the main line opens and closes on its own rules;
an end marker can say what the span it closes was; a span that opened at an unstamped bar
after a silent phase moves to where its bar really ran; a span placed after a later
stamped line ends at it.  And the clock that all of them
read: one per log, a stamp that would run it backwards or years ahead is not used.
"""

from __future__ import annotations

from ..rules.pack import READY, TERMINAL, Rule
from .state import LINE_KEEP, Observation, Span, State

FLOAT_GAP = 2.0                # unseen seconds after a floating span's last frame that move it
CLOCK_SLACK = 2.0              # a stamp this far behind the log's clock is jitter, not a jump
CLOCK_JUMP = 183 * 86400.0     # a stamp further ahead than this is not the log's clock
LATE = 5.0                     # a line read this long after its stamp says: written earlier


def new_span(phase: str, obs: Observation, now: float, beside: bool = False,
             last_own: float | None = None) -> Span:
    """A span opened by `obs`.  A line with no stamp of its own (a tqdm bar) carries the last
    one, which says when it began only where the bar's frames did not place it later than
    that stamp (`last_own`, the log's last own time): the timeline showed `cuda_graph
    10:13:41 +16m03s` for a bar that began 2m22s after that stamp."""
    stamp = obs.log_stamp
    if not obs.own_time and (obs.log_time is None or last_own is None or
                             abs(obs.log_time - last_own) > CLOCK_SLACK):
        stamp = None
    return Span(phase, now, obs.log_time, stamp, obs.text[:LINE_KEEP], beside=beside)


def open_main(state: State, phase: str, obs: Observation, now: float,
              silent: tuple[str, ...] = ()) -> None:
    """The main line moves to `phase`: its open span closes here, a new one opens (at ready
    or an end, every span beside it closes too).  A span that opens at an unstamped line
    right after a `silent` phase floats (see `settle_float`)."""
    if obs.own_time and obs.log_time is not None:
        pull_back(state, obs.log_time)
    span = new_span(phase, obs, now, last_own=state.last_own_time)
    span.label = second_label(state, phase, obs)
    ending = phase == READY or phase in TERMINAL
    for sp in reversed(state.spans):
        if sp.open and (ending or not sp.beside):
            sp.close(now, obs.log_time)
            if not ending:
                break
    if ending:
        span.close(now, obs.log_time)
    prev = state.phase_entered
    state.floating = obs.log_time if not obs.own_time and obs.log_time is not None and \
        prev is not None and prev.phase in silent and not ending else None
    state.spans.append(span)


def pull_back(state: State, t: float) -> None:
    """A line stamped `t` of its own moves the main line on: no span of it began or ended
    more than CLOCK_SLACK after `t` (only bar frames the clock placed, from their elapsed
    times, can be there: bars it could not tell ran side by side, read end to end).  Those
    spans end at `t`, so the main line's phases still sum to the startup's wall time (before:
    a capture placed 8 s after ready, cuda_graph 0 s, the phases 2m40s for 2m32s)."""
    for sp in reversed(state.spans):
        if sp.beside:
            continue
        if sp.end_log is not None and sp.end_log > t + CLOCK_SLACK:
            sp.end_log = t
        if sp.log_time is None or sp.log_time <= t + CLOCK_SLACK:
            return
        sp.log_time, sp.log_stamp = t, None


def second_label(state: State, phase: str, obs: Observation) -> str:
    """The name of the span `obs` opens, where its rule has a `label` and the startup had a
    span of that phase before (SGLang's LoRA adapters, read after the weights: two rows
    `loading_shards`, the second one unnamed, read as a glitch); "" otherwise."""
    label = obs.rule.label
    if not label or obs.rule.phase != phase:
        return ""
    return label if any(sp.phase == phase and not sp.beside for sp in state.spans) else ""


def drop_last(state: State) -> None:
    """Take back the main line's last span (entered too early): the one before it runs on
    until the next span opens."""
    i = max(i for i, sp in enumerate(state.spans) if not sp.beside)
    state.spans.pop(i)
    reopen_last(state)


def reopen_last(state: State) -> None:
    """The main line's last span goes on (the span after it was taken back)."""
    last = state.phase_entered
    if last is not None:
        last.end_at = last.end_log = None


def retract(state: State, phase: str) -> None:
    """A span that turned out not to be (a crash the startup carried on after): gone, and the
    span before it goes on."""
    state.spans = [sp for sp in state.spans if sp.phase != phase]
    reopen_last(state)


def beside(state: State, rule: Rule, obs: Observation, now: float) -> None:
    """A span beside the main line: `beside: open` opens one of the rule's phase (one at a time
    per phase), `beside: close` closes it; the current phase does not change."""
    open_ = [sp for sp in state.spans if sp.beside and sp.open and sp.phase == rule.phase]
    if rule.beside == "open" and not open_:
        state.spans.append(new_span(rule.phase or "", obs, now, beside=True,
                                    last_own=state.last_own_time))
    elif rule.beside == "close":
        for sp in open_:
            sp.close(now, obs.log_time)


def reattribute(state: State, rule: Rule, obs: Observation) -> None:
    """An end marker that says what the time before it was (vLLM's `Time spent downloading
    weights for M: S seconds`): the main span it closes becomes `closes_as`: its last `S`
    seconds when the rule reads them (group `seconds`) and they are less than the span, else
    the whole span when it is of the rule's own phase (the silent stretch after `Loading
    model from scratch...`).  Any other span (launching, with no load line before it) keeps
    its phase.  The machine then opens the rule's phase here."""
    cur = state.phase_entered
    assert cur is not None and rule.closes_as is not None
    took = _number(obs.fields.get("seconds"))
    since = None if took is None or obs.log_time is None else obs.log_time - took
    if since is not None and cur.log_time is not None and since > cur.log_time:
        state.spans.append(Span(rule.closes_as, cur.at, since, None, obs.text[:LINE_KEEP]))
        cur.close(cur.at, since)
    elif cur.phase == rule.phase:
        cur.phase = rule.closes_as


def settle_float(state: State, obs: Observation, read_at: float) -> None:
    """The current span opened at an unstamped bar right after a silent phase (a hub download
    that prints nothing): its frames were placed from the last stamp.  The first stamped line
    after them says how much time went by unseen: that time was the silent phase's (the bar's
    own frames say how long the bar ran), so the span moves to end there.  When none went by
    and the silent span had no time of its own before the bar, it was not: it is taken back
    (the bar's span starts where it did).  Where the lines were read as they were written,
    our clock says when the bar began (`read_at`: when this line happened on our clock,
    `event_time`: a line read late is put back to when it was written): the time after
    the bar's own is its phase's (a rank stuck after its shards were loaded was a 3-hour
    download in the ledger and the ready alert, while the stall said loading_shards)."""
    assert obs.log_time is not None and state.floating is not None
    if not obs.own_time:
        state.floating = max(state.floating, obs.log_time)
        return
    frames_end, state.floating = state.floating, None
    gap = obs.log_time - frames_end
    main = [sp for sp in state.spans if not sp.beside]
    if len(main) < 2 or main[-1].log_time is None:
        return
    bar = main[-1]
    after = (read_at - bar.at) - (frames_end - bar.log_time)   # 0 or less: read at once
    gap -= min(max(after, 0.0), max(gap, 0.0))
    silent = main[-2]
    if gap <= FLOAT_GAP:
        if silent.log_time is not None and main[-1].log_time - silent.log_time <= FLOAT_GAP:
            # the bar ran all the time there was: the silent phase was not (SGLang before
            # 0.5.23 logs `Using model weights format` on every load, download or not)
            main[-1].at, main[-1].log_time = silent.at, silent.log_time
            main[-1].log_stamp = silent.log_stamp
            state.spans.remove(silent)
        return
    main[-1].log_time += gap
    main[-1].log_stamp = None      # no line was stamped there: the timeline shows +offset
    main[-2].end_log = main[-1].log_time


def trust(state: State, obs: Observation) -> None:
    """One clock per log: a stamp that would run it backwards (more than CLOCK_SLACK: ranks
    interleave within a second) or jump it further than any startup lasts is not used
    (counted in `untrusted_stamps`); the line takes the clock's time, so no span is ever
    negative or longer than the log.  A new server process (a restart marker) may start its
    own clock; times the clock placed a bar's frames at (not their own) are never the
    reference."""
    t = obs.log_time
    if not obs.own_time or t is None:
        return
    last = state.last_own_time if state.last_own_time is not None else state.last_log_time
    if last is None or last <= t <= last + CLOCK_JUMP or obs.rule.restart:
        state.last_own_time = t
        return
    if t < last - CLOCK_SLACK or t > last:
        state.untrusted_stamps += 1
    obs.log_time = last


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def event_time(state: State, obs: Observation, now: float) -> float:
    """When the line happened, by our clock: `now` (when it was read), unless its own stamp
    says it was written more than LATE seconds before (the lines written while an SSH
    connection was down, read at the reconnect): then the stamp, set on our clock by the
    least difference between the two seen so far (a line read as it was written; no time
    zone needed).  Never later than `now`.  Learns that difference from every stamped line;
    a new server process (a restart marker) starts learning again (its clock may differ)."""
    t = obs.log_time
    if not obs.own_time or t is None:
        return now
    seen = now - t
    if state.clock_offset is None or seen < state.clock_offset:
        state.clock_offset = seen
    at = t + state.clock_offset
    return at if now - at > LATE else now


def start_clock(state: State, obs: Observation) -> None:
    """The log's first stamp (`obs`, timed by `event_time` already): the spans that opened
    before it (a log or excerpt that begins with unstamped bar frames) are put on the log's
    clock, where they were read by the least difference seen (the first stamp's, for lines
    read at once), never after it.  One clock per log: before, one span without a stamp sent
    every duration of the startup to the wall clock, all 0.0 in a replay."""
    t, offset = obs.log_time, state.clock_offset
    assert t is not None

    def log(at: float) -> float:
        return t if offset is None else min(at - offset, t)

    for sp in state.spans:
        if sp.log_time is None:
            sp.log_time = log(sp.at)
        if sp.end_at is not None and sp.end_log is None:
            sp.end_log = log(sp.end_at)


def retime(state: State, written_at: float | None) -> None:
    """The lines of a first attach were all read at one moment, most long after they were
    written: the startup's spans, its crash and its ready take the time of their line's
    stamp instead, set on our clock by the file's last write (`written_at`, its mtime: the
    log's last stamped line was written by then), or by the least difference seen, if less.
    Only ever earlier than when they were read; a span without a stamp was written by the
    last write at the latest (before, a log without stamps, a hub's or tqdm's bars only,
    silent 18 minutes in loading_shards read `stalled: no new line for 18m35s` beside
    `loading_shards 0.0s (total 0.0s)`: its phase opened when it was read).  The serving
    figures' age (`current_stats`) counts from the last write at the latest: a log that
    served two hours ago is not read as serving 2,800 tok/s for the first minute."""
    if written_at is None:
        return
    for source, seen in state.stats_seen.items():
        state.stats_seen[source] = min(seen, written_at)
    offset: float | None = None
    if state.last_log_time is not None:
        offset = written_at - state.last_log_time
        if state.clock_offset is not None:
            offset = min(offset, state.clock_offset)
        state.clock_offset = offset

    def wall(at: float, log_time: float | None) -> float:
        if log_time is None or offset is None:
            return min(at, written_at)
        return min(at, log_time + offset)

    for sp in state.spans:
        sp.at = wall(sp.at, sp.log_time)
        if sp.end_at is not None:
            sp.end_at = wall(sp.end_at, sp.end_log)
    if state.crash is not None:
        state.crash.at = wall(state.crash.at, state.crash.log_time)
    if state.ready_at is not None:
        ready = next((sp for sp in reversed(state.spans) if sp.phase == READY), None)
        if ready is not None:
            state.ready_at = ready.at
