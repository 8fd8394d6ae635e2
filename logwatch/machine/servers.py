"""Several servers in one launch (vLLM's DP supervisor, `--api-server-count`).

The pack's `servers:` patterns name the server process a line comes from
(`RulePack.server_of`).  A launch of several is one startup: another server's launch lines
join it, it is ready when every one of them printed its ready line, and it crashed when one
crashed (the crash's rank names the engine).  Only the machine calls these.
"""

from __future__ import annotations

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


def all_ready(pack: RulePack, state: State, obs: Observation) -> bool:
    """A launch of several servers is ready when every one is: a ready line of one of them
    counts for it (an untagged one for none, when there are several)."""
    if len(state.servers) <= 1:
        return True       # one server (or none named): its ready line is the launch's
    server = pack.server_of(obs.text)
    if server in state.servers:
        state.servers[server] = True
    return all(state.servers.values())
