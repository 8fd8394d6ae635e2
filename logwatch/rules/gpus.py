"""How many of its node's GPUs a launch uses, from the arguments it printed (a pack's `gpus:`).

The GPU scope (telemetry/gpu/scope.py) finds a server's GPUs by their memory; timing alone
cannot tell a rank that held only its context through a download from a neighbour's notebook,
two servers launched together, or a server already past its weights when first seen.  The
launch's own size settles most of these: SGLang's `tp_size=4, pp_size=1` (x `dp_size` without
`enable_dp_attention`), vLLM's `'tensor_parallel_size': 4` (x pipeline x prefill-context x
the node's data-parallel ranks), over the nodes (`nnodes`).  Engine knowledge is pack data:

    gpus:
      times: [tp_size, pp_size, dp_size]     # a list item: the first of these the launch set
      over: nnodes                           # the nodes the product is spread over
      unless: {dp_size: [enable_dp_attention]}   # this factor is 1 when one of these is set
      replicas: data_parallel_size           # the nodes hold whole replicas (below)

With `replicas:`, the nodes are shared among the data-parallel replicas: one replica spans
`over / (replicas / local)` nodes (at least one), where `local` is the replicas this launch
runs (the times item naming `replicas`, as read).  vLLM's `--nnodes 2 -dp 4
--data-parallel-size-local 2 -tp 2` runs two replicas of 2 GPUs on each node: 4, not
2*2/2 (vLLM 0.34 config/parallel.py `nnodes_within_dp`, `local_world_size`).

An argument the launch did not print is 1 (vLLM prints only its non-default ones), unless its
dump was cut (`partial`): then the count is unknown.  None for anything that is not a count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_GPUS = 4096     # no launch counts more on one node: a larger product is a misread


@dataclass(frozen=True)
class GpuCountSpec:
    """A pack's `gpus:` (module docstring)."""

    times: tuple[tuple[str, ...], ...] = ()
    over: str | None = None
    unless: dict[str, tuple[str, ...]] = field(default_factory=dict)
    replicas: str | None = None

    def count(self, args: dict[str, Any], partial: bool = False) -> int | None:
        """The GPUs of one node that the launch of `args` uses (None: unknown)."""
        if not args or not self.times:
            return None
        total, local = 1, 1
        for names in self.times:
            size = self._factor(args, names, partial)
            if size is None:
                return None
            total *= size
            local = size if self.replicas in names else local
        nodes = self._factor(args, (self.over,), partial) if self.over else 1
        if nodes is not None and self.replicas:
            nodes = self._replica_nodes(args, nodes, local, partial)
        if nodes is None or total % nodes:
            return None
        total //= nodes
        return total if 0 < total <= MAX_GPUS else None

    def _replica_nodes(self, args: dict[str, Any], nodes: int, local: int,
                       partial: bool) -> int | None:
        """The nodes one replica spans: `nodes` over the groups of `local` replicas."""
        whole = self._factor(args, (self.replicas,), partial, as_set=True)
        if whole is None or whole % local:
            return None
        return max(nodes // (whole // local), 1)

    def _factor(self, args: dict[str, Any], names: tuple[str, ...], partial: bool,
                as_set: bool = False) -> int | None:
        """The first of `names` the launch set (1 if none); `unless` applied but `as_set`."""
        name = next((n for n in names if args.get(n) is not None), None)
        if name is None:
            return None if partial else 1
        if not as_set and any(args.get(f) is not None and args.get(f) is not False    # (a rank 0 is set)
               for f in self.unless.get(name, ())):
            return 1
        value = args[name]
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_GPUS:
            return None
        return value


def parse_gpu_count(value: Any) -> GpuCountSpec:
    """`gpus: {times: [...], over: ARG, unless: {ARG: [ARG, ...]}, replicas: ARG}`;
    ValueError naming the key for any other shape."""
    if not isinstance(value, dict) or set(value) - {"times", "over", "unless", "replicas"}:
        raise ValueError("must be a mapping {times: [...], over: ARG, unless: {...}, "
                         "replicas: ARG}")
    times = value.get("times")
    if not isinstance(times, list) or not times:
        raise ValueError("times: must be a list of argument names (or lists of them)")
    factors = tuple((t,) if isinstance(t, str) else tuple(t) if isinstance(t, list) else ()
                    for t in times)
    if not all(f and all(isinstance(n, str) and n for n in f) for f in factors):
        raise ValueError("times: must be a list of argument names (or lists of them)")
    over = value.get("over")
    if over is not None and (not isinstance(over, str) or not over):
        raise ValueError("over: must be an argument name")
    unless = value.get("unless") or {}
    if not isinstance(unless, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(f, str) for f in v)
            for k, v in unless.items()):
        raise ValueError("unless: must map an argument name to a list of argument names")
    replicas = value.get("replicas")
    if replicas is not None and (not isinstance(replicas, str) or not replicas
                                 or not any(replicas in f for f in factors)):
        raise ValueError("replicas: must be an argument name that times: names")
    return GpuCountSpec(factors, over, {k: tuple(v) for k, v in unless.items()}, replicas)
