"""Several servers in one launch (vLLM's DP supervisor, `--api-server-count`; the prefill
and decode servers of one compose file).

The pack's `servers:` patterns name the server process a line comes from
(`RulePack.server_of`); a wrapper's `proc` prefix names a process of one stream (compose's
`prefill-1  | `, `srun --label`'s ` 1: `).  A launch of several is one startup: another
server's launch lines join it, it is ready when every one of them printed its ready line (of
a stream's processes, each server: its launch line only a server prints, the pack's `serves:`,
or its arguments give it a role, `roles:`; a follower node or a batch job prints none: it is
not waited for), and it crashed when one crashed (the crash's rank names the engine).  Only the machine calls these.
"""

from __future__ import annotations

from typing import Any

from ..rules.pack import READY, TERMINAL, WAITING, RulePack
from .state import Observation, State


def joins(pack: RulePack, state: State, server: str, rid: str) -> bool:
    """Is this restart marker one of the servers of the current launch starting (not a new
    launch)?  Only while the launch has not ended, only when it is a launch of several (a
    supervisor began it, more than one server is in it, or its args ask for more), and only
    once per marker and server: the same server printing its version line again is a
    restart."""
    if not server or state.phase in (WAITING, READY, *TERMINAL):
        return False
    if f"{server}|{rid}" in state.restart_rules or not state.servers:
        return False      # (the launch's first server takes the usual path)
    return state.supervised or len(state.servers) > 1 or \
        wanted(pack, state) > len(state.servers)


def wanted(pack: RulePack, state: State) -> int:
    """How many servers the launch's arguments ask for (the pack's `servers.count_args`)."""
    for key in pack.server_count_args:
        v = state.args.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 4096:
            return v
    return 1


def proc_joins(state: State, proc: str, rid: str) -> bool:
    """Is this restart marker (rule `rid`) one of another process's of the launch under
    way, in one stream?  A process the launch has not seen joins it (another compose
    service starting); one of its processes joins with each marker it has not printed in
    this launch while the launch is starting (the decode server's version line, then its
    arguments, after the prefill's).  The same process printing a marker again is its
    relaunch: a new startup; so is any process's once the launch crashed or stopped (a
    Deployment's replacement pod, named anew, after the pod that crashed: before, it joined
    the crashed launch, which read `crashed` while the new pod served, helper adv43)."""
    if not proc or not state.procs:
        return False
    key = f"{proc}>{rid}"
    if proc not in state.procs:
        if state.phase in TERMINAL:
            return False
        state.procs.add(proc)
    elif len(state.procs) < 2 or key in state.restart_rules or \
            state.phase in (WAITING, READY, *TERMINAL):
        return False
    state.restart_rules.add(key)
    return True


def note_proc(state: State, proc: str, rid: str) -> None:
    """The first process of a launch printed a launch marker (`rid`)."""
    if proc:
        state.procs.add(proc)
        state.restart_rules.add(f"{proc}>{rid}")


def note_role(pack: RulePack, state: State, proc: str, rule_id: str,
              line_args: dict[str, Any]) -> None:
    """A process of the launch that will print a ready line: the launch waits for it.  One
    whose launch line only a server prints (the pack's `serves:`: SGLang's `server_args`,
    vLLM's version line), or whose arguments give it a role in one deployment (`roles:`:
    SGLang's `disaggregation_mode`, vLLM's `kv_transfer_config`).  Before, only the latter:
    two unrelated servers of one compose stream read ready at the first one's ready line
    (1m02s, the other still loading until 4m01s).  Not a batch job or an offline engine
    (`vllm run-batch`, `LLM`: a launch line, no ready line), nor a follower node (its line or
    its arguments say so: it prints no ready line)."""
    if not proc or proc not in state.procs:
        return
    if rule_id in pack.serves or any(
            line_args.get(k) not in (None, False, "", "null", "None")
            for k in pack.roles if k in line_args):
        state.procs_waiting.add(proc)
    if pack.follower is not None and pack.follower.says(rule_id, line_args):
        state.procs_waiting.discard(proc)


def all_ready(pack: RulePack, state: State, obs: Observation) -> bool:
    """A launch of several servers is ready when every one is: a ready line of one of them
    counts for it (an untagged one for none, when there are several).  Processes of one
    stream likewise (`procs_waiting`: a follower node's left out)."""
    if state.procs and obs.proc and obs.proc not in state.procs:
        return False      # another service's line (a gateway's uvicorn): not this launch's
    state.procs_waiting.discard(obs.proc)
    if state.procs_waiting:
        return False
    if len(state.servers) <= 1:
        return True       # one server (or none named): its ready line is the launch's
    server = pack.server_of(obs.text)
    if server in state.servers:
        state.servers[server] = True
    return all(state.servers.values())

