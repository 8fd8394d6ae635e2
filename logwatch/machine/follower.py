"""A follower node of a multi-node launch (the pack's `follower:`, rules/pack.py `FollowerSpec`).

A node other than the head (SGLang `--node-rank 1`, vLLM `--headless`) runs no HTTP server
and never prints a ready line: its ranks load, size the KV cache and capture their graphs,
then wait for the head node's requests in silence.  Read as a head node's log, it would stay
in cuda_graph for good and be paged `stalled`.  A launch is a follower's when one of the
pack's follower rules fires or its arguments say so; it is ready when every rank it has
seen finished the pack's `ready` phase.  Only the machine calls these.
"""

from __future__ import annotations

from typing import Any

from ..rules.pack import READY, TERMINAL, WAITING, RulePack
from .state import Observation, State


def note_follower(pack: RulePack, state: State, obs: Observation,
                  line_args: dict[str, Any]) -> None:
    """Mark the launch a follower's once a line or its arguments say so, unless a head
    node's launch line is in the same stream: SLURM's `srun` writes every node's output to
    one file (`slurm-%j.out`), and there the head's ready line will come.  A head's word is
    final for the startup (`State.follower` False); a new startup knows nothing (None)."""
    spec = pack.follower
    if spec is None or state.follower is False:
        return
    said = spec.says(obs.rule.id, line_args)
    if said is not None:
        state.follower = said


def follower_ready(pack: RulePack, state: State, obs: Observation) -> bool:
    """Has this line finished the follower's last phase for every rank it has seen?  (A
    follower whose lines name no rank: this line finishing it is enough.)"""
    spec = pack.follower
    rule = obs.rule
    if spec is None or state.follower is not True or not rule.finishes or \
            rule.phase != spec.ready:
        return False
    if state.phase in (WAITING, READY, *TERMINAL):
        return False
    want = pack.phase_index(spec.ready)
    return all(pack.phase_index(rp.phase) > want or
               (pack.phase_index(rp.phase) == want and rp.finished)
               for rp in state.ranks.values())
