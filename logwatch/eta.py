"""The startup ETA: seconds until ready, from the current phase and the typical ones.

    remaining shards at the current (smoothed) rate            while loading shards
  + what is typically left of the current phase                otherwise
  + the typical duration of every phase still ahead

where "typical" is the median over past startups of the same model on this target (a phase
a startup skipped counts as 0 s; state/history.py), and the pack's `typical_seconds` on a
first start, or what a line of this startup said of its phase (a rule's `typical`: SGLang's
DeepGEMM JIT compile, `typically 10-20 mins`, whose bars time one shape each).  A first
start's second pass (SGLang 0.5.10's draft model, begun again after the target's capture) is
guessed from this startup's first pass instead, and so is a step of its phase begun after the
phase's end (the draft's extend capture after its capture); a phase it passed over (a later
one came, no rule can still bring it) counts 0 s, and so does one it already ran and ended
before a `begins` rule took it back to an earlier phase (SGLang's HiCache host pool after the
capture) where no rule can bring it again.  A phase the engine's own code runs again after
a later one (a pack's `again:`: vLLM 0.31+'s kernel warmup after the KV estimate) is counted
on a first start at its typical time until it begins again.  A finished bar of a phase the
engine goes on in after it (a pack's `after_bar`: the capture) is no end of the phase: a
first start reads a tenth of its typical time left, growing after (`_after_bar`).  Where
data-parallel replicas start apart, a first start times what the slowest has still to run by
what the replicas ahead took for it (`_replicas_took`), the current phase too once one ahead
ended it: a finished bar is then no clock of it (`_bar_left`, the one ahead's); a dense vLLM
model's engines by their workers' processes (`_dense_groups`).
"""

from __future__ import annotations

import math

from .machine import State, phase_left
from .machine.ranks import IN_PROC, Advance, lane_tag, replica_of, replica_took
from .machine.startup import again_key
from .rules.pack import READY, AgainSpec, RulePack, arg_is_set


MAX_ETA_STEP = 0.30     # an ETA moves at most this fraction between two updates in a phase


class EtaSmoother:
    """Keeps an ETA from jumping: within one phase each value is held to within
    MAX_ETA_STEP of where the previous one, counted down since, would be."""

    def __init__(self) -> None:
        self._last: tuple[str, float, float] | None = None   # (phase, eta, at)

    def peek(self, phase: str, eta: float, now: float) -> float:
        """The value `eta` would be held to now, without remembering it: a view reads this,
        so how often a target is read (/metrics, /api/status, alerts) never moves its ETA."""
        if math.isnan(eta):
            return eta
        last = self._last
        if last is not None and last[0] == phase and eta > 0:
            expect = max(last[1] - max(now - last[2], 0.0), 0.0)
            eta = min(max(eta, expect * (1 - MAX_ETA_STEP)), max(expect * (1 + MAX_ETA_STEP),
                                                                 expect + 1.0))
        return eta

    def __call__(self, phase: str, eta: float, now: float) -> float:
        """Hold `eta` (see `peek`) and remember it: the live target's `tick` calls this."""
        eta = self.peek(phase, eta, now)
        self._last = None if math.isnan(eta) else (phase, eta, now)
        return eta


def _progress_of(pack: RulePack, phase: str) -> list[str]:
    """The progress counters the pack's rules report in `phase` (its bars)."""
    return list(dict.fromkeys(r.progress for r in pack.rules if r.progress and r.phase == phase))


def startup_eta(pack: RulePack, state: State, now: float,
                typical: dict[str, float] | None = None) -> float:
    """Seconds until ready (0 when ready, NaN when there is nothing to base it on)."""
    phase = state.phase
    if phase == READY:
        return 0.0
    if phase not in pack.startup_phases:
        return math.nan
    typ = typical if typical else {}
    have_history = bool(typ)
    stated = {} if have_history else _stated(pack, state)     # a first start's own words
    defaults = {**pack.typical_seconds, **stated}

    took = {} if have_history else _replicas_took(pack, state, defaults)  # replicas ahead

    def typical_of(p: str) -> float | None:
        return typ.get(p, 0.0) if have_history else defaults.get(p)

    eta, known = 0.0, False
    # a second pass (SGLang 0.5.10's draft model after the target's whole init) is guessed
    # from this startup's first pass on a first start: the pack's default less what the
    # first pass spent read 168 s where 40 s were left (the draft's load)
    second = not have_history and _second_pass(pack, state)
    again = second and state.closed_seconds(phase) > 0
    since, elapsed = _phase_clock(state, phase, now, again)
    t_phase = state.closed_seconds(phase) if again else typical_of(phase)
    bar_left = _bar_left(pack, state, phase, now, since, None if have_history else t_phase,
                         phase in took)
    if bar_left is not None:
        # the bar is the phase's own clock; a phase that goes on after its bar (capture,
        # then its end lines) is known from history: whichever ends later
        eta += max(bar_left, t_phase - elapsed) if have_history and t_phase else bar_left
        if not again and phase in stated:
            # one bar of many the engine says take long (a DeepGEMM shape's): the bar is no
            # clock of the phase (88 s read at the first shape's half, 12 minutes left)
            eta = max(eta, phase_left(defaults[phase], elapsed))
        known = True
    elif t_phase is not None:
        eta += phase_left(took.get(phase, t_phase), elapsed)
        known = True
    for p in _ahead(pack, state, phase):
        t = took.get(p, typical_of(p))
        guess = None if have_history else _from_this_startup(pack, state, p, second)
        if guess is not None:
            eta, known = eta + guess, known or guess > 0
            continue
        if t is None:
            if not have_history:
                return eta if known else math.nan
            continue
        # (what a phase that came already, out of order, had of its typical time is done:
        # on a first start too; before, vLLM 0.34's allocating after its graph capture
        # counted the capture's typical 30 s again, the ETA rising from 27 s to 38 s)
        eta += max(t - state.closed_seconds(p), 0.0)
        known = True
    if have_history:
        eta += _coming_back(pack, state, phase, typ)
    elif not second:
        eta += _draft_pass(pack, state) + _again_ahead(pack, state, phase, defaults, took)
    return eta if known else math.nan


def _replicas_took(pack: RulePack, state: State, defaults: dict[str, float]) -> dict[str, float]:
    """A first start's times, from the data-parallel replicas ahead, of the phases the
    startup (where its slowest replica is) has still to run: per phase, the longest a
    replica took through it (`replica_took`), for the current phase and those ahead that the
    main line has not been in before (vLLM 0.34's KV commit after the capture is no part of
    a replica's first `allocating`: it moves no replica forward).  A phase a replica ended
    but did not leave (the capture, its last) is timed to its end plus what a finished bar
    of a phase the engine goes on in reads (`_after_bar`: SGLang's HTTP server and warmup
    request come after the last replica's capture).  Why: SGLang `--dp 2`'s DP1 at its
    allocating read 100 s, the pack's typical allocating, autotune and capture, where DP0
    had taken 15 s through them and 22 s were left.  Not with history: its times are the
    slowest replica's own, the work after the last replica's end included.  {} where
    replicas do not start apart (the pack's `replicas:`) or fewer than two have a rank.
    A dense vLLM model's engines are timed by their workers' processes (`_dense_groups`).
    Pipeline stages are grouped so too; a stage ahead waits for the others at each step's
    end, so it has left no phase but the one the slowest is in."""
    unless = pack.replicas_unless
    if unless is None or any(state.args.get(a) is True for a in unless):
        return {}
    tags = [lane_tag(lane) for lane in state.lanes]
    repeated = [lane for lane, tag in zip(state.lanes, tags) if tags.count(tag) > 1]
    if any(IN_PROC in lane for lane in repeated):
        return {}      # servers of one stream (compose's `decode-1`): none times another
    groups = _dense_groups(state, repeated) if repeated else _replica_groups(pack, state)
    if len(groups) < 2:
        return {}
    spans = [sp.phase for sp in state.history]
    out: dict[str, float] = {}
    for advances in groups.values():
        for i, (secs, left) in replica_took(advances).items():
            p = pack.phases[i]
            if spans.count(p) > (p == state.phase) or p not in pack.startup_phases:
                continue
            if not left and p in pack.after_bar:
                secs += _after_bar(defaults.get(p, 0.0), 0.0)
            out[p] = max(out.get(p, 0.0), secs)
    return out


def _replica_groups(pack: RulePack, state: State) -> dict[str, list[list[Advance]]]:
    """Each data-parallel replica's (or pipeline stage's) ranks' advances, by their tags."""
    groups: dict[str, list[list[Advance]]] = {}
    for rank, rp in state.ranks.items():
        if (g := replica_of(rank, pack.replica_stage)):
            groups.setdefault(g, []).append(rp.advances)
    return groups


def _dense_groups(state: State, repeated: list[str]) -> dict[str, list[list[Advance]]]:
    """A dense vLLM model's replicas, timed by their workers' processes: each process of a
    rank tag that several processes print (`Worker_TP0` in every engine, 0.34 core.py
    `reconfigure_for_independent_dp_rank`) stands for its engine, as `replica_positions`
    places them, with when it got further (`State.lane_times`).  The engine cores' own
    lines are left out: `EngineCore_DP1` prints its launch, then nothing until its workers
    captured, so it would time its whole load, compile and capture as launching.  Which
    `TP1` is of which engine no line says: each process is a group of its own (a TP group
    moves together, so the longest per phase is its engine's).  `repeated`: the lanes
    whose tag several processes print."""
    return {lane: [adv] for lane in repeated if (adv := state.lane_times.get(lane))}


def _again_specs(pack: RulePack, state: State) -> list[AgainSpec]:
    """The pack's `again:` statements this launch runs (its release, its args)."""
    return [a for a in pack.again if a.applies(state.engine_version, state.args)]


def _again_ahead(pack: RulePack, state: State, phase: str,
                 defaults: dict[str, float], took: dict[str, float]) -> float:
    """A first start's time for a phase the engine runs again after the current one came
    (a pack's `again:`: vLLM 0.31+'s kernel warmup, `JIT kernel warmup starting.` after
    `Available KV cache memory`, 0.34 v1/worker/gpu_worker.py `compile_or_warm_up_model`,
    `enable_jit_warmup` true by default): its typical time, while the startup has not left
    `after` since (`_left_since`), and no replica ahead timed the phases after `after`
    (`took`: their times hold the warmup, which moves no replica forward).
    Before, 0.34's KV estimate read 40 s left where 189 s were."""
    out = 0.0
    for a in _again_specs(pack, state):
        later = pack.phases[pack.phase_index(a.after) + 1:]
        if phase == a.after and not _left_since(state, a.after) and \
                not any(p in took for p in later):
            out += defaults.get(a.phase, 0.0)
    return out


def _left_since(state: State, after: str) -> bool:
    """Has the main line left a span of `after`, for the phase run again or any other?  The
    engine runs that phase right after `after` or not at all: vLLM 0.34's JIT warmup comes
    between the KV estimate and the capture (v1/worker/gpu_worker.py:1070 `kernel_warmup`,
    :1103 `capture_model`), so at the KV commit after the capture (`allocating` again) it is
    not ahead.  Before, two built 0.34 starts that print no warmup line read 68 and 70 s
    there, 5 s before ready: the warmup's 60 s counted again."""
    seen_after = False
    for sp in state.history:
        if sp.phase == after:
            seen_after = True
        elif seen_after:
            return True
    return False


def _stated(pack: RulePack, state: State) -> dict[str, float]:
    """The phases whose typical time a line of this startup stated (a fired `begins` rule's
    `typical`: SGLang's DeepGEMM JIT `typically 10-20 mins`, where the pack's autotune
    default is 30 s)."""
    return {r.phase: r.typical for r in pack.rules
            if r.typical is not None and r.phase and r.id in state.begun}


def _phase_clock(state: State, phase: str, now: float, again: bool) -> tuple[float | None, float]:
    """Since when the current phase's work is timed (None: its whole span, the bars of it
    included) and how long it has run.  A phase the startup is in again (vLLM 0.34's second
    autotune) has already had some of its typical time (a typical duration is the sum of a
    phase's spans); in a second pass (`again`) its span is timed alone, and a step of it
    begun after the phase's work ended (EAGLE's draft extend capture after the draft's)
    from that begin (not on a first pass: there the pack's default, for a line that only
    follows an end, SGLang's weights committed after the capture, read 60 s where 5 s were
    left)."""
    entered = state.phase_entered
    if entered is None:
        return None, 0.0
    resumed = _resumed(state) if again else None
    if resumed is not None:
        return resumed, max(0.0, now - resumed)
    elapsed = max(0.0, now - entered.at) + (0.0 if again else state.closed_seconds(phase))
    return (entered.at if again else None), elapsed


def _bar_left(pack: RulePack, state: State, phase: str, now: float,
              since: float | None, typical: float | None = None,
              ahead: bool = False) -> float | None:
    """Seconds left by the current phase's own bar (shards, files fetched, autotuner, graph
    capture), if one is moving; with `since` (a second pass's span began then), not a bar
    that last moved before it: the target's finished bar is no clock of the draft's load or
    capture (it read 0 s left there, where 40 s and 37 s were).  With `typical` (a first
    start's typical time of the phase), in a phase the engine goes on in after its bar (a
    pack's `after_bar`), a finished bar is not the phase's end (`_after_bar`), and one that
    had ended before the phase's current span began is no clock of it: another replica's or
    server's capture (SGLang `--dp 2`: DP0's finished bar read 0 s at DP1's capture begin,
    19 s before ready; now the typical 60 s, as at any capture's begin).  With `ahead` (a
    replica or pipeline stage ahead has ended the phase the startup is still in), a
    finished bar of a phase without `after_bar` is no clock of it either: it is the one
    ahead's, or the slowest's own just before its end line, and no frame says which
    (SGLang `--pp-size 2` prints one bar, global rank 0's, PP0's: its end read 0 s left
    while PP1 loaded 20 s more).  The phase is then timed by what the ones ahead took
    (`_replicas_took`)."""
    entered = state.phase_entered
    if phase not in pack.after_bar:
        typical = None
    for n in _progress_of(pack, phase):
        b = state.progress.get(n)
        if b is None or (since is not None and b.updated_at < since):
            continue
        left = b.remaining_seconds(now)
        if left is None or (ahead and typical is None and b.current >= b.total):
            continue
        if typical is not None and b.current >= b.total:
            if entered is not None and b.updated_at < entered.at:
                continue        # ended before this span: another replica's or server's
            return _after_bar(typical or 0.0, now - b.updated_at)
        return left
    return None


def _after_bar(typical: float, since: float) -> float:
    """A first start's time left in a phase whose bar finished `since` seconds ago, where
    the engine goes on after it with work no line begins (a pack's `after_bar`: the capture,
    then SGLang 0.5.23's scheduler init end, HTTP server and warmup request, vLLM 0.34's
    FULL bar after the PIECEWISE one and its API server).  Taken as a phase whose clock has
    run out (`phase_left` at nine tenths of its typical time): a tenth of the typical time,
    then half of every further second.  Before, 0 s: three SGLang DeepGEMM starts and
    `--enable-weights-cpu-backup`'s overlap read 0 s where 7 to 15 s were left."""
    return phase_left(typical, 0.9 * typical + max(since, 0.0))


def _resumed(state: State) -> float | None:
    """When the current phase's work began again after every rank had ended it (a marker of
    the phase after its `finishes` end, in the same span: SGLang 0.5.10's `Capture draft
    extend cuda graph begin.` after `Capture draft cuda graph end.`), while it goes on; None
    otherwise.  Its bar before that is no clock of it: a first start read 0 s left through
    the draft's 12 s extend capture, the draft capture's finished bar its only clock."""
    entered, at = state.phase_entered, state.work_again_at
    if entered is None or at is None or at < entered.at or state.phase_done:
        return None
    return at


def _second_pass(pack: RulePack, state: State) -> bool:
    """Has this startup stepped back for a second model's pass (a `begins: own_rank` rule
    began its phase again: SGLang 0.5.10's draft `Load weight begin.` after the target's
    capture)?  Not vLLM 0.34's phases that come twice in one model's init (autotune, then
    allocating): guessing those from their first span read worse (compile-mm-encoder's
    median error 10 s -> 55 s)."""
    return any(again_key(r) in state.begun for r in pack.rules if r.begins_own_rank)


def _draft_pass(pack: RulePack, state: State) -> float:
    """A first start's guess for a draft model's pass still to come: the launch names a
    draft (a pack's `drafts:` arg set), the startup is past the phase by which an in-pass
    draft loads (`drafts.by`: SGLang 0.5.23's, right after the target's weights) and no load
    of it came (the span a `begins: own_rank` rule labels).  Its phases, from that rule's on,
    as long as the first pass's closed spans of them (before: SGLang 0.5.10's EAGLE read 0 s
    at the target's last capture frame, 43 s before ready: the draft's load and capture
    uncounted)."""
    again = [r for r in pack.rules if r.begins_own_rank and r.phase]
    if not again or not any(arg_is_set(state.args.get(a)) for a in pack.drafts) or \
            state.phase not in pack.startup_phases or \
            pack.phase_index(state.phase) <= pack.phase_index(pack.draft_by):
        return 0.0
    labels = {r.label for r in again if r.label}
    if any(sp.label in labels for sp in state.spans):
        return 0.0
    start = min(pack.phase_index(r.phase) for r in again if r.phase)
    skipped = pack.follower.skipped(state.args, state.graphs_off) if pack.follower \
        else frozenset()
    return sum(state.closed_seconds(p) for p in pack.startup_phases
               if pack.phase_index(p) >= start and p not in skipped)


def _from_this_startup(pack: RulePack, state: State, p: str, second: bool) -> float | None:
    """A first start's guess for phase `p` ahead from this startup itself, where it tells:
    0 s for a phase it passed over or (in its first pass) already ran, and in a second pass
    the first pass's time of a phase that pass went through (None: the pack's default)."""
    if _passed_over(pack, state, p, second) or \
            (not second and _ran_before(pack, state, p)):
        return 0.0
    done = state.closed_seconds(p)
    return done if second and done > 0 else None


def _passed_over(pack: RulePack, state: State, p: str, second: bool) -> bool:
    """A phase this startup went past without entering it (a later phase already came) and
    that no `begins` rule still to fire can bring: it is not coming (0.5.10's draft pass
    skipped autotune as the target's did: 30 s counted).  In a second pass (`second`) a
    `begins` rule the first pass never fired is taken as not firing in it either: the
    second model's init runs the same code (SGLang's `deepgemm_jit`, for a target that did
    not JIT, is no draft's)."""
    seen = state.phases_seen
    if p in seen:
        return False
    at = pack.phase_index(p)
    if not any(q in pack.startup_phases and pack.phase_index(q) > at for q in seen):
        return False
    return second or not _may_begin(pack, state, p)


def _ran_before(pack: RulePack, state: State, p: str) -> bool:
    """A phase ahead (in the pack's order) that this startup already ran and ended before a
    `begins` rule brought it back to an earlier phase, with no `begins` rule left to bring
    it again: its time is spent (SGLang 0.5.23 builds the HiCache host pool in the
    scheduler's init after the model worker's, capture included: `allocating` again after
    `cuda_graph`; before, the capture's typical 60 s less its 12 s was counted again, 48 s
    of the 116 s read 1 s before ready)."""
    return p in state.phases_seen and state.closed_seconds(p) > 0 and \
        not _may_begin(pack, state, p)


def _may_begin(pack: RulePack, state: State, p: str) -> bool:
    """Can a `begins` rule of phase `p` that has not fired yet still bring it in this
    startup (vLLM 0.34's JIT warmup, autotune again after the KV estimate)?"""
    return any(r.begins and r.phase == p and r.id not in state.begun for r in pack.rules)


def _ahead(pack: RulePack, state: State, phase: str) -> list[str]:
    """The startup phases after `phase`, but those the launch never enters: with graphs off
    (vLLM `--enforce-eager`) the capture (`follower.eager.skips`; before, a first start's
    ETA in allocating counted the capture's typical 30 s: 40 s where 7 s were left)."""
    skipped = pack.follower.skipped(state.args, state.graphs_off) if pack.follower \
        else frozenset()
    later = pack.phases[pack.phases.index(phase) + 1:]
    return [p for p in later[:later.index(READY)] if p not in skipped]


def _coming_back(pack: RulePack, state: State, phase: str, typ: dict[str, float]) -> float:
    """What earlier phases still have of their typical time when a rule of the pack can
    still bring them back in this startup (a `begins` rule that has not fired: vLLM 0.34's
    JIT warmup, autotune again after the KV estimate).  From history only: a first start
    has no sum of spans to go by."""
    out = 0.0
    earlier = pack.phases[: pack.phases.index(phase)]
    for p in earlier:
        if _may_begin(pack, state, p):
            out += max(typ.get(p, 0.0) - state.closed_seconds(p), 0.0)
    return out
