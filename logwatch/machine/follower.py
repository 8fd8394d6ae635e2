"""A follower node of a multi-node launch (the pack's `follower:`, rules/pack.py `FollowerSpec`).

A node other than the head (SGLang `--node-rank 1`, vLLM `--headless`) runs no HTTP server
and never prints a ready line: its ranks load, size the KV cache and capture their graphs,
then wait for the head node's requests in silence.  Read as a head node's log, it would stay
in cuda_graph for good and be paged `stalled`.  A launch is a follower's when one of the
pack's follower rules fires or its arguments say so; it is ready when every rank it has
seen ended the pack's `ready` phase and the log stayed quiet after (a draft model may load
and capture next).  Only the machine calls these.
"""

from __future__ import annotations

from typing import Any

from ..rules.pack import READY, TERMINAL, WAITING, Rule, RulePack
from .ranks import rank_ended
from .state import Observation, State

FOLLOWER_QUIET = 10.0   # seconds of quiet after every rank's last capture before ready
# the "rule" of a follower's ready (its line is the last rank's capture end)
FOLLOWER_READY = Rule(id="follower_ready", pattern="", source="logwatch", phase=READY)


def note_follower(pack: RulePack, state: State, obs: Observation,
                  line_args: dict[str, Any]) -> None:
    """Mark the launch a follower's once a line or its arguments say so, unless a head
    node's launch line is in the same stream: SLURM's `srun` writes every node's output to
    one file (`slurm-%j.out`), and there the head's ready line will come.  A head's word is
    final for the startup (`State.follower` False); a new startup knows nothing (None)."""
    spec = pack.follower
    if spec is None:
        return
    if obs.rule.id in spec.eager_rules:
        state.graphs_off = True
    if state.follower is False:
        return
    said = spec.says(obs.rule.id, line_args)
    if said is not None:
        state.follower = said


def node_joins(pack: RulePack, state: State, line_args: dict[str, Any], stalled: bool) -> bool:
    """Is this launch line another node's of the launch under way, in the same stream?  SLURM's
    `srun -N2 ... --node-rank $SLURM_NODEID` without `--label` writes every node's output to
    one file, each node's dump untagged: a dump naming a node this launch has not printed,
    of as many nodes, meeting where the launch meets (`follower.nodes`), while the launch is
    still starting (no node gets past its start alone: a node's dump after a ready or a crash
    is a relaunch's) and not `stalled` (silent past its phase's stall budget: a launch that
    died without a word, and a requeue of it)."""
    spec = pack.follower
    node = spec.node_of(line_args) if spec is not None else None
    if node is None or not state.nodes or node[0] in state.nodes or stalled or \
            state.phase in (WAITING, READY, *TERMINAL):
        return False
    assert spec is not None
    return spec.node_of(state.args) is not None and state.args.get(spec.node_count) == node[1] \
        and all(state.args.get(k) == line_args.get(k) for k in spec.node_same)


def note_node(pack: RulePack, state: State, line_args: dict[str, Any]) -> bool:
    """Note the node a launch line names (`State.nodes`); whether its arguments are the
    launch's: the first node's, then the head's (the lowest rank) over another's."""
    spec = pack.follower
    node = spec.node_of(line_args) if spec is not None else None
    if node is None:
        return True
    first = not state.nodes
    state.nodes.add(node[0])
    return first or node[0] == min(state.nodes)


def note_follower_done(pack: RulePack, state: State, obs: Observation) -> None:
    """After a follower's line: when every rank it has seen has its latest marker an end of
    the spec's `ready` phase, keep that line (`State.follower_line`): the follower is ready
    once the log stays quiet after it (`follower_ready`).  A rank's marker after it (a draft
    model loaded and captured after the target's capture, with speculative decoding) puts
    it back (a hang there is then a stall, not a ready)."""
    spec = pack.follower
    if spec is None or state.follower is not True or state.phase in (WAITING, READY, *TERMINAL):
        return
    phase = spec.ready_for(state.args, state.graphs_off)
    want = (pack.phase_index(phase), True)
    rule = obs.rule
    done = all(rank_ended(rp, want, pack) for rp in state.ranks.values()) \
        if state.ranks else rule.finishes and rule.phase == phase
    if done and rule.phase is not None:
        state.follower_line, state.follower_log_time = obs.text, obs.log_time
    elif rule.phase is not None:
        state.follower_line = state.follower_log_time = None


def follower_ready(state: State, now: float, ended: bool) -> Observation | None:
    """The line a follower is ready at, once the log stayed quiet FOLLOWER_QUIET after it
    (or the input `ended`: a replay); None while it is not."""
    if state.follower is not True or state.follower_line is None:
        return None
    quiet = state.last_activity is None or now - state.last_activity >= FOLLOWER_QUIET
    if not (quiet or ended):
        return None
    return Observation(FOLLOWER_READY, {}, state.follower_line, log_time=state.follower_log_time,
                       own_time=state.follower_log_time is not None)
