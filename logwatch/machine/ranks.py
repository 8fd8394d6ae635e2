"""Ranks: how far each rank (`TP5`) got, and which ranks stayed behind the others."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Protocol

from ..rules.pack import Rule, RulePack


@dataclass(slots=True)
class RankProgress:
    """How far one rank (`TP5`) got in this startup, from the phase markers it printed.

    `advances` holds (phase index, finished, time) each time it got further: a rank's
    position is (phase index, finished), and the others are compared with it (`rank_lag`).
    Times are the log's own clock when its line had one (rank-tagged lines do), else the
    wall clock, so a finished log read later still shows how long a rank was behind."""

    phase: str
    finished: bool
    at: float                  # when it got there
    advances: list[tuple[int, bool, float]] = field(default_factory=list)
    # its latest marker, forward or not: (phase index, it finishes the phase, it begins one
    # that comes back: vLLM 0.34's KV commit after the capture).  A draft model loads and
    # captures after the target's capture (speculative decoding): a follower node is ready
    # only once each rank's latest marker is an end (machine/follower.py)
    last: tuple[int, bool, bool] | None = None
    # its latest marker says the rank is done starting, whatever phase that line is of
    # (`ends_rank`: vLLM's engine core `init engine ... took`; with TP > 1 its workers
    # capture, and the engine core itself gets no further than sizing the KV cache)
    up: bool = False
    # its latest marker moved it forward (a first arrival there): a rank catching up after
    # the startup stepped back (machine/startup.py `_catching_up`); not kept in a checkpoint
    moved: bool = True



Advance = tuple[int, bool, float]      # (phase index, finished, time): `RankProgress.advances`

RANK_LAG_AFTER = 60.0   # seconds the other ranks must have been past a rank before it is named


@dataclass(frozen=True, slots=True)
class RankLag:
    """Ranks (or data-parallel replicas) still at `phase` while every other one got past it
    `for_seconds` ago."""

    ranks: tuple[str, ...]
    phase: str
    finished: bool             # they finished `phase` but went no further
    for_seconds: float
    others: int
    unit: str = "rank"         # or "replica": `DP1` behind the other replicas

    @property
    def text(self) -> str:
        """`TP5 still in cuda_graph 4m after the other 7 ranks finished it`."""
        from ..units import fmt_duration
        who = ", ".join(self.ranks)
        where = f"at the end of {self.phase}" if self.finished else f"in {self.phase}"
        return (f"{who} still {where} {fmt_duration(self.for_seconds)} after the other "
                f"{self.others} {self.unit}{'s' if self.others != 1 else ''} "
                f"{'moved on' if self.finished else 'finished it'}")



class _Line(Protocol):
    """What `advance_rank` reads of an observation (machine/state.py `Observation`)."""

    rule: Rule
    text: str
    log_time: float | None
    own_time: bool


class _Clocked(Protocol):
    last_log_time: float | None
    last_activity: float | None


def rank_clock(state: _Clocked, now: float) -> float:
    """Now on the clock rank times use: the log's (its last stamp, plus the wall time since
    its last line) when it has one."""
    if state.last_log_time is None:
        return now
    return state.last_log_time + max(0.0, now - (state.last_activity or now))


def rank_lag(ranks: dict[str, RankProgress], phase_index: Callable[[str], int], now: float,
             after: float = RANK_LAG_AFTER, apart: bool = False,
             lanes: dict[str, tuple[int, bool]] | None = None,
             phases: tuple[str, ...] = (), stage: Any = None) -> RankLag | None:
    """The ranks that stayed behind: each other rank got past their position at least
    `after` seconds ago (`now` on `rank_clock`; a rank is never compared with ranks that never
    started).  The furthest-behind group is named when it is a minority (fewer than half the
    ranks): rank 0 alone prints some milestones (SGLang's autotune, the KV cache size), and
    the other ranks are then not behind it; None when all move together.  Where data-parallel
    replicas start apart (`apart`), replicas are compared first, each as far as its furthest
    rank, and one behind is named even if half of them are: `--dp 2` (half the ranks) with
    DP1 still loading ten minutes after DP0 captured was never named.  A dense model's
    replicas are their engine cores, whose workers speak for them (`dense_replica`)."""
    groups: dict[str, list[RankProgress]] = {}
    for r, p in ranks.items():
        if apart and replica_of(r, stage):
            groups.setdefault(replica_of(r, stage), []).append(p)
    if len(groups) >= 2 and lanes and phases and not dense_replica(groups, lanes, phase_index,
                                                                    phases):
        return None            # engine cores behind whose workers cannot be told apart
    unit = "stage" if _one_replica_s_stages(groups, stage) else "replica"
    lag = _lag(groups, phase_index, now, after, unit) if len(groups) >= 2 else None
    if lag is not None or len(ranks) < 2:
        return lag
    return _lag({r: [p] for r, p in ranks.items()}, phase_index, now, after, "rank")


def dense_replica(groups: dict[str, list[RankProgress]], lanes: dict[str, tuple[int, bool]],
                  phase_index: Callable[[str], int], phases: tuple[str, ...]) -> bool:
    """A dense model's engine cores (`EngineCore_DP1`) print their launch, then nothing
    until their workers captured (0.34: the workers are `(Worker_TP0 pid=N)` in every
    engine, core.py:1727 `reconfigure_for_independent_dp_rank`; before their parallel
    groups exist, `(Worker pid=N)`: no line of theirs names the engine), so a replica still
    loading read "DP1 still in launching".  Its workers are the slowest processes of each
    tag (`lanes`): the other engine cores said they were past launching only after their
    own workers' capture.  The engine cores still at the first phase get, in `groups`,
    the position of those processes (as far as the furthest of them, no further than the
    other replicas).  False where that cannot be told: several such engine cores whose
    slowest processes are at different positions (which engine is where is unknown)."""
    tags = [lane.split(" pid=")[0] for lane in lanes]
    dense = sorted(pos for lane, pos in lanes.items()
                   if tags.count(lane.split(" pid=")[0]) > 1)
    if not dense:
        return True            # no tag of several processes: the DP tags say it all
    at = {u: max((phase_index(p.phase), p.finished) for p in ps) for u, ps in groups.items()}
    quiet = [u for u, pos in at.items() if pos[0] == 0]
    if not quiet or len(quiet) == len(at):
        return True
    slow = dense[: len(quiet) * len({t for t in tags if tags.count(t) > 1})]
    if len(quiet) > 1 and len(set(slow)) > 1:
        return False
    pos = min(max(slow), min(p for u, p in at.items() if u not in quiet))
    if not 0 <= pos[0] < len(phases):
        return True            # (a position no phase of the pack names: left as it was)
    for u in quiet:
        first = groups[u][0]
        groups[u].append(RankProgress(phases[pos[0]], pos[1], first.at, [(*pos, first.at)]))
    return True


def _lag(units: dict[str, list[RankProgress]], phase_index: Callable[[str], int], now: float,
         after: float, unit: str) -> RankLag | None:
    """`rank_lag` over units (a rank, or a replica's ranks): a rank is behind when it is a
    minority, a replica whenever another replica is ahead of it."""
    pos = {u: max((phase_index(p.phase), p.finished) for p in ps) for u, ps in units.items()}
    behind = min(pos.values())
    stuck = sorted(u for u, p in pos.items() if p == behind)
    if len(stuck) == len(units) or (unit == "rank" and 2 * len(stuck) >= len(units)):
        return None
    passed_at = [min((at for p in ps for i, f, at in p.advances if (i, f) > behind),
                     default=min(p.at for p in ps))
                 for u, ps in units.items() if pos[u] != behind]
    since = now - max(passed_at)
    if since < after:
        return None
    p0 = max(units[stuck[0]], key=lambda p: (phase_index(p.phase), p.finished))
    return RankLag(tuple(stuck), p0.phase, p0.finished, since, len(units) - len(stuck), unit)



def rank_ended(rp: RankProgress, want: tuple[int, bool], pack: RulePack) -> bool:
    """A rank got to `want` (a phase index, finished), and its latest marker ended something
    (or began a phase that comes back after it: vLLM 0.34's KV commit, its last line), not
    work still under way (a draft model's load or capture begun).  A rank whose latest
    marker says it is done starting (`RankProgress.up`) has ended whatever phase is asked."""
    if rp.up:
        return True
    if (pack.phase_index(rp.phase), rp.finished) < want or rp.last is None:
        return False
    _, finishes, begins = rp.last
    return finishes or begins



def advance_rank(pack: RulePack, ranks: dict[str, RankProgress], obs: _Line,
                 now: float, names: dict[str, tuple[int, str]] | None = None) -> None:
    """Per rank, how far it got: the phase of its latest marker (only forward), at the log's
    time when its line had its own stamp."""
    rank = pack.rank_of(obs.text, names)
    rule = obs.rule
    if not rank or rule.phase is None:
        return
    now = obs.log_time if obs.log_time is not None and obs.own_time else now
    pos = (pack.phase_index(rule.phase), rule.finishes)
    last = (pos[0], rule.finishes, rule.begins)
    rp = ranks.get(rank)
    if rp is None:
        ranks[rank] = RankProgress(rule.phase, rule.finishes, now, [(pos[0], pos[1], now)], last,
                                   rule.ends_rank)
        lift_stages(pack, ranks, rank, now)
        return
    rp.last, rp.up, rp.moved = last, rule.ends_rank, False
    if pos > (pack.phase_index(rp.phase), rp.finished):
        rp.moved = True
        rp.phase, rp.finished, rp.at = rule.phase, rule.finishes, now
        rp.advances.append((pos[0], pos[1], now))
        lift_stages(pack, ranks, rank, now)


def lift_stages(pack: RulePack, ranks: dict[str, RankProgress], rank: str, now: float) -> None:
    """A rank of a pipeline stage just entered the phase its replica's stages begin at once
    (`RulePack.stages_together`): the ranks of its replica's stages still before it are
    there too, from now.  vLLM 0.34 loads each stage in its worker's constructor right after
    distributed init (multiproc_executor.py:813-822), and only a node's first local rank
    says so (`Loading model from scratch...`: `info_once`): PP1 hung in its load stayed
    `launching` and, being there, was left out of the stages compared, so the startup read
    PP0's `autotune` and its loading_shards ended at PP0's load (32 s, not PP1's 36)."""
    phase, stage = pack.stages_together, pack.replica_stage
    if not phase or stage is None or ranks[rank].phase != phase or not stage.search(rank):
        return
    want, replica = pack.phase_index(phase), replica_of(rank)
    for other, op in ranks.items():
        if other != rank and pack.phase_index(op.phase) < want and \
                replica_of(other) == replica and stage.search(other):
            op.phase, op.finished, op.at = phase, False, now
            op.advances.append((want, False, now))


# `DP1` leading a rank tag: vLLM's `EngineCore_DP1` / `Worker_DP1_TP0`, SGLang's `DP1 TP3`
# (not SGLang's `MOE_DP1`, an expert group inside one replica)
_REPLICA = re.compile(r"^(DP\d+)(?=[ _]|$)")


@lru_cache(maxsize=512)
def replica_of(rank: str, stage: Any = None) -> str:
    """The data-parallel replica a rank belongs to (`DP1` of `DP1_TP0`), "" for none; with
    the pack's `stage` pattern (`RulePack.replica_stage`), its pipeline stage in it too
    (`PP1` of `PP1 TP3`, `DP1 PP0` of `DP1 PP0 TP3`).  Cached: asked for every rank at each
    milestone line (a launch has few rank tags; the cache is bounded whatever a log holds)."""
    m = _REPLICA.search(rank)
    replica = m.group(1) if m else ""
    s = stage.search(rank) if stage is not None else None
    return f"{replica} {s.group('stage')}".lstrip() if s else replica


# a rank's process, `(Worker_TP0 pid=200)`: where the tag alone does not say which replica
# it serves, the process does (`State.lanes`)
_PID = r"(?:\b|_)%s pid=(\d{1,10})[,)]"
MAX_LANES = 64      # processes kept per startup (untrusted input: bounded)


def lane_of(rank: str, text: str, proc: str = "") -> str:
    """`TP0 pid=200` for a line of `(Worker_TP0 pid=200)` whose rank names no replica;
    `TP0 in decode-1` for one a wrapper named the process of (`proc`: two servers in one
    compose stream, a PD prefill and decode server, each with its own `TP0`); ""
    otherwise (a replica's rank, or no process said)."""
    if not rank or replica_of(rank) or " " in rank:
        return ""
    m = re.search(_PID % re.escape(rank), text[:256]) if " pid=" in text[:256] else None
    if m:
        return f"{rank} pid={m.group(1)}"
    return f"{rank}{IN_PROC}{proc}" if proc else ""


IN_PROC = " in "     # a lane's rank, then the process a wrapper named


def lane_tag(lane: str) -> str:
    """The rank tag of a lane (`TP0` of `TP0 pid=200`, of `TP0 in decode-1`)."""
    return lane.split(" pid=")[0].split(IN_PROC)[0]


def lane_replica(lane: str) -> str:
    """The replica a lane stands for: a worker process its own (`TP0 pid=200`), a wrapped
    server's ranks their server (`decode-1` of `TP0 in decode-1`: the furthest of its ranks,
    as a DP replica's TP group; only its rank 0 prints the capture's begin)."""
    return lane.split(IN_PROC, 1)[1] if IN_PROC in lane else lane


def advance_lane(pack: RulePack, lanes: dict[str, tuple[int, bool]], obs: _Line,
                 names: dict[str, tuple[int, str]] | None = None,
                 times: dict[str, list[Advance]] | None = None, now: float = 0.0) -> None:
    """How far each process of a replica-less rank got (its furthest marker), and in
    `times` when (the log's clock where its line had a stamp, as `advance_rank`): a dense
    model's engines are told apart only by their processes, so only these say what the
    replica ahead took through a phase (eta.py `_replicas_took`; before, none was timed)."""
    rule = obs.rule
    # most lines name no process (SGLang's `[... TP0]`): no rank to look up for them
    proc = getattr(obs, "proc", "")
    lane = lane_of(pack.rank_of(obs.text, names), obs.text, proc) \
        if rule.phase and (proc or " pid=" in obs.text[:256]) else ""
    if not lane or (lane not in lanes and len(lanes) >= MAX_LANES):
        return
    pos = (pack.phase_index(rule.phase or ""), rule.finishes)
    if pos > lanes.get(lane, (-1, False)):
        lanes[lane] = pos
        if times is not None:
            at = obs.log_time if obs.log_time is not None and obs.own_time else now
            times.setdefault(lane, []).append((pos[0], pos[1], at))


def replica_positions(pack: RulePack, ranks: dict[str, RankProgress],
                      lanes: dict[str, tuple[int, bool]] | None = None
                      ) -> dict[str, tuple[int, bool]]:
    """How far each data-parallel replica got: the furthest of its ranks (a TP group moves
    together).  A replica still in the first phase is left out.  A dense model's workers
    carry no DP tag (0.34 `reconfigure_for_independent_dp_rank`: `Worker_TP0` in every
    engine): where one rank tag has several processes (`lanes`), each process stands for
    its replica, and the engine cores are left out (`EngineCore_DP1` prints its launch,
    then only after its workers' capture: the KV cache size, `init engine`)."""
    out: dict[str, tuple[int, bool]] = {}
    if lanes:
        tags = [lane_tag(lane) for lane in lanes]
        for lane, pos in lanes.items():
            if tags.count(lane_tag(lane)) > 1 and pos[0] > 0 and \
                    pos > out.get(lane_replica(lane), (-1, False)):
                out[lane_replica(lane)] = pos
        if out:
            return out
    for rank, rp in ranks.items():
        replica = replica_of(rank, pack.replica_stage)
        if not replica:
            continue           # most launches: no replica in any tag (asked at every milestone)
        pos = (pack.phase_index(rp.phase), rp.finished)
        if pos[0] > 0 and pos > out.get(replica, (-1, False)):
            out[replica] = pos
    return out


def replicas_allow(pack: RulePack, ranks: dict[str, RankProgress], rule: Rule, text: str,
                   lanes: dict[str, tuple[int, bool]] | None = None, proc: str = "",
                   names: dict[str, tuple[int, str]] | None = None) -> bool:
    """May this line move the main line, with data-parallel replicas starting apart?  The
    startup is where its slowest replica is: vLLM `-dp 2` engine cores load, compile and
    capture at their own paces, and the fastest one's capture while another still loads
    flipped the phase back and forth (cuda_graph, allocating, cuda_graph) and timed the slow
    one's load as the fast one's phases.  Not past the slowest replica's phase; a `begins`
    marker (the KV commit after the capture) only from the slowest; an untagged line (a
    bar: no replica named) at most one phase past it, once it ended its phase."""
    pos = replica_positions(pack, ranks, lanes)
    if len(pos) < 2 or rule.phase is None:
        return True
    slowest = min(pos.values())
    target = pack.phase_index(rule.phase)
    mine = _own_replica(pack, pos, text, proc, names)
    if mine is None:
        return target <= slowest[0] + (1 if slowest[1] else 0) or \
            _one_replica_s_stages(pos, pack.replica_stage)
    return target <= slowest[0] and (not rule.begins or mine == slowest)


def _one_replica_s_stages(pos: dict[str, Any], stage: Any) -> bool:
    """Are the groups the pipeline stages of one replica (`PP0`, `PP1`: no DP part, no
    process lane)?  Its untagged lines (rank 0's shard and capture bars) then move the main
    line: the stages meet at each step's end (vLLM 0.34: the engine core's collective RPCs,
    `determine_available_memory` then `compile_or_warm_up_model`; SGLang: the KV sizing over
    the world group), so rank 0 capturing means every stage is past the KV sizing, even one
    whose own lines stop earlier (vLLM prints `Available KV cache memory` on each node's
    first local rank only: `info_once`).  Only groups the pack's `stage` pattern names:
    two servers of one compose stream (`decode-1`, a PD pair) are no stages of one model."""
    return stage is not None and all(" " not in k and not _REPLICA.search(k) and
                                     stage.search(k) for k in pos)


def _own_replica(pack: RulePack, pos: dict[str, tuple[int, bool]], text: str, proc: str = "",
                 names: dict[str, tuple[int, str]] | None = None) -> tuple[int, bool] | None:
    """The position (`replica_positions`) of the replica this line's rank belongs to, by its
    DP tag or, for a dense model's `Worker_TP0`, by its process; None for no rank."""
    rank = pack.rank_of(text, names)
    if not rank:
        return None
    return pos.get(replica_of(rank, pack.replica_stage)) or \
        pos.get(lane_replica(lane_of(rank, text, proc)))


def replica_reach(pack: RulePack, ranks: dict[str, RankProgress], text: str,
                  lanes: dict[str, tuple[int, bool]] | None = None, proc: str = "",
                  names: dict[str, tuple[int, str]] | None = None
                  ) -> tuple[str, tuple[int, bool]] | None:
    """Which data-parallel replica this line's rank is of (`DP1`, or for a dense model's
    worker its process, `TP0 pid=210`) and how far it got, where replicas start apart and
    there are two or more: a crash line's (machine/startup.py `_crash_phase`).  The
    startup is where the slowest replica is; the replica that crashed may be phases ahead
    (SGLang `--dp 4`: DP1 out of memory in its capture while DP3 still read its weights was
    `cuda_oom during loading_shards`)."""
    pos = replica_positions(pack, ranks, lanes)
    rank = pack.rank_of(text, names) if len(pos) >= 2 else ""
    # its pipeline stage too, as `replica_positions` groups them (before helper adv83 a
    # stage's crash ahead of the others was placed at the slowest stage's phase)
    name = replica_of(rank, pack.replica_stage) if rank else ""
    name = name if name in pos else lane_replica(lane_of(rank, text, proc)) if rank else ""
    return (name, pos[name]) if name in pos else None


def replica_took(ranks: list[list[Advance]]) -> dict[int, tuple[float, bool]]:
    """Per phase index, the seconds one data-parallel replica took through it, from its ranks'
    `RankProgress.advances`, and whether it left the phase (False: the phase it ended last
    and went no further, timed to its end).  A phase it went past without a line of it
    took 0 s (SGLang's autotune without DeepGEMM).  Why: the replicas run the same code on
    the same hardware, so what one ahead took is this startup's own evidence of what the
    ones behind still have to do (eta.py `_replicas_took`).

    The replica is where its furthest rank is (rank 0 alone prints some steps): it reached a
    position when one of its ranks reached it or one past it.  A phase whose first line is
    its end (vLLM's capture: the bar names no replica, `Graph capturing finished` does) began
    at the end of the phase before it where that was said (the KV estimate), so the capture
    is not timed 0 s and its time counted in the phase before.  A phase still under way has
    no time yet."""
    reached: dict[tuple[int, bool], float] = {}
    for adv in ranks:
        for i, fin, at in adv:
            if at < reached.get((i, fin), math.inf):
                reached[(i, fin)] = at
    pos = sorted(reached)
    for k in range(len(pos) - 2, -1, -1):      # reached when any rank got there or further
        reached[pos[k]] = min(reached[pos[k]], reached[pos[k + 1]])
    begin: dict[int, float] = {}
    for k, (i, fin) in enumerate(pos):
        if i in begin:
            continue
        prev = pos[k - 1] if k else None
        begin[i] = reached[prev] if fin and prev is not None and prev[1] else reached[(i, fin)]
    phases = sorted(begin)
    out: dict[int, tuple[float, bool]] = {}
    for a, b in zip(phases, phases[1:]):
        out[a] = (max(begin[b] - begin[a], 0.0), True)
        out.update({j: (0.0, True) for j in range(a + 1, b)})
    if phases and (phases[-1], True) in reached:
        last = phases[-1]
        out[last] = (max(reached[(last, True)] - begin[last], 0.0), False)
    return out
