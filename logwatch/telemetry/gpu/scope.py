"""Which of the host's GPUs are the server's (`GpuScope`): the ones its target names
(`gpu: devices`, `watch --gpu-devices`), else the ones whose memory rose by `ROSE` or more
above their level when the startup began.

Why: a server rarely owns every GPU of its node (TP=4 on an 8-GPU node, another team's job
beside it).  Read over all of them, the unused GPUs idle at 81 W named a healthy TP=4 "a
stuck rank", and a neighbour's busy GPUs called a hung server "slow, not hung".  A server
loads its weights onto its own GPUs first thing, so memory that rises by a GiB after its
launch line (a context's worth on a GPU idle at the launch: a rank stuck before its weights,
whose context came with the others', not minutes after their weights: a neighbour's notebook)
is the cheapest sign of whose GPUs they are; once seen, a GPU stays the
startup's (sticky: a rank that died and freed its memory is still a rank of it).  Before any
rose, every GPU counts, as before.  Pure: snapshots in, the chosen GPUs out.
"""

from __future__ import annotations

import operator
import re

from dataclasses import dataclass, field
from typing import Iterable

from .sample import GpuSample, GpuSnapshot

GIB = 1024 ** 3
ROSE = 1 * GIB           # memory a GPU gained over its level at launch: the startup's own
# a CUDA context's worth (~0.5 GiB with torch on an H100): a GPU idle at the launch (under
# this) that gained as much is a rank's, one that holds only its context (stuck before its
# weights: the rank a hang waits for) as much as those that loaded
CONTEXT = 256 * 1024 ** 2
# ... that came with the contexts of the GPUs that went on to load (within this many seconds
# of the first of them): a launch's ranks make their contexts together, before any loads its
# weights (NCCL init needs every rank's); one that comes later (during the server's download,
# or after its weights) is a neighbour's (a notebook's torch.cuda.init) on its own GPU.
# A rank whose context came later than that (its torch import slow, over NFS) is still
# one when it came at most this long before the first GPU loaded: the others waited for
# it in NCCL init, and loaded once it came
CONTEXT_LATE = 30.0
# ... where the first GPU loaded at most this long after the first contexts: ranks that held
# only their contexts longer downloaded their weights meanwhile (vLLM, SGLang: after NCCL
# init), and a context that came just before they loaded is a neighbour's (helper adv37: a
# notebook's 20 s before a healthy TP=4's weights, after its 10-minute download, was "a
# stuck rank (GPU 0)", as in adv33 H1)
LATE_RANK_WAIT = 300.0
_BUS_ID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-9a-fA-F])$")


@dataclass
class GpuScope:
    """The GPUs of one startup.  `devices`: nvidia-smi indexes (int) or UUIDs (str) from
    the config; empty: learned from memory (`see`)."""

    devices: tuple[int | str, ...] = ()
    baseline: dict[int, int] = field(default_factory=dict)   # GPU -> bytes at launch
    rose: set[int] = field(default_factory=set)              # GPUs seen rising (sticky)
    held_at_launch: set[int] = field(default_factory=set)    # GPUs holding a GiB before it
    named: set[int] = field(default_factory=set)   # the indexes of `devices`' UUIDs, as seen
    context_at: dict[int, float] = field(default_factory=dict)  # GPU -> when it gained a context
    loaded_at: dict[int, float] = field(default_factory=dict)  # GPU -> when it rose a GiB
    # the GPUs of this node its launch uses (its args: tp x pp ..., rules/gpus.py), if known
    expect: int | None = None
    # the GPUs its log names (NCCL_DEBUG=INFO's `nvmlDev`: nvidia-smi's indexes), if any
    hint: frozenset[int] = frozenset()
    unseen: bool = False       # no snapshot before the launch: the first one is the level
    sized: bool = False        # the chosen GPUs are `expect`'s (`fit`), not timing's

    def begin(self, before: GpuSnapshot | None) -> None:
        """A new startup: the GPUs' memory in `before` (the last snapshot before its launch
        line, if any) is their level; what they gain from there is the server's."""
        self.baseline, self.rose, self.held_at_launch = {}, set(), set()
        self.context_at, self.loaded_at = {}, {}
        self.unseen, self.sized = before is None, False
        if before is not None:
            self._levels(before)
            # a GPU holding a GiB before the launch, whose memory has not risen since, is
            # another job's while no GPU has risen (a hang in NCCL init holds only contexts)
            self.held_at_launch = {g.index for g in before.gpus
                                   if g.mem_used_bytes is not None and g.mem_used_bytes >= ROSE}

    def _levels(self, snap: GpuSnapshot) -> None:
        for g in snap.gpus:
            if g.uuid is not None and g.uuid in self.devices:
                self.named.add(g.index)
            if g.mem_used_bytes is not None:
                self.baseline.setdefault(g.index, g.mem_used_bytes)

    def see(self, snap: GpuSnapshot) -> bool:
        """One snapshot of the startup; True when the chosen GPUs changed."""
        self._levels(snap)          # a GPU first seen now: its level is this one
        before = set(self.rose)
        for g in snap.gpus:
            base = self.baseline.get(g.index)
            if g.mem_used_bytes is None or base is None:
                continue
            gained = g.mem_used_bytes - base
            if gained >= ROSE:
                self.loaded_at.setdefault(g.index, snap.at)
                self.context_at.setdefault(g.index, snap.at)
            elif gained >= CONTEXT and base < CONTEXT:
                self.context_at.setdefault(g.index, snap.at)
        # a context only: a rank's (stuck before its weights) while none loaded yet, then
        # only if it came with the loading GPUs' contexts; a neighbour's notebook that came
        # later was "a stuck rank (GPU 0)" beside a healthy TP=4, its busy kernels "one rank
        # working: slow, not hung" for a hung one (helper adv33 H1, review of c922ee3).  A
        # rank whose context came last, just before the others loaded (they waited for it in
        # NCCL init), is one too: before, a rank 40 s late (a slow import) and then stuck in
        # its weights' read was left out, the hang said "a collective waiting" without it
        first = min((self.context_at[i] for i in self.loaded), default=None)
        load = self.first_load

        def ranks(at: float) -> bool:
            return first is None or at <= first + CONTEXT_LATE or \
                (load is not None and load - first <= LATE_RANK_WAIT and
                 load - CONTEXT_LATE <= at <= load)
        # (a context admitted before any GPU loaded, then late, is left out again)
        timed = self.loaded | {i for i, at in self.context_at.items() if ranks(at)}
        n = self.expect or len(self.hint)
        sized = fit(n, self) if n else None
        self.sized = sized is not None
        self.rose = sized if sized is not None else timed
        return not self.devices and self.rose != before

    @property
    def loaded(self) -> set[int]:
        """The GPUs that rose a GiB."""
        return set(self.loaded_at)

    @property
    def first_load(self) -> float | None:
        """When the first GPU had risen a GiB."""
        return min(self.loaded_at.values(), default=None)

    def chosen(self, g: GpuSample) -> bool:
        if self.devices:
            return g.index in self.devices or (g.uuid is not None and g.uuid in self.devices)
        return not self.rose or g.index in self.rose

    def chosen_index(self, index: int) -> bool:
        """GPU `index` is the startup's (a UUID of `devices`: once a snapshot showed it)."""
        return index in self.named or self.chosen(GpuSample(index))

    def held(self, preflight: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """The preflight's (GPU, GiB) on the startup's GPUs only: the memory a neighbour
        holds on its own GPUs is no threat to this server (helper adv24 M1: a TP=4 that
        OOMed by itself was told "GPU 0 held 120 GiB ... before launch", another team's)."""
        return [(i, gib) for i, gib in preflight if self.chosen_index(i)]

    def select(self, snap: GpuSnapshot) -> GpuSnapshot:
        """`snap` with the startup's GPUs only; before any rose, all but those another job
        held at the launch (all, if that leaves none): a server hung before its GPUs beside a
        neighbour's busy ones read "slow, not hung" (review of a36b406, adv27 H1, H2)."""
        if not self.devices and not self.rose:
            kept = tuple(g for g in snap.gpus if g.index not in self.held_at_launch)
            return GpuSnapshot(snap.at, kept) if kept and len(kept) < len(snap.gpus) else snap
        return GpuSnapshot(snap.at, tuple(g for g in snap.gpus if self.chosen(g)))

    @property
    def how(self) -> str:
        """How the GPUs were chosen: "config", "memory rose" or "all" (none rose yet)."""
        return "config" if self.devices else "memory rose" if self.rose else "all"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"how": self.how, "devices": list(self.devices),
                                  "rose": sorted(self.rose)}
        if self.sized and not self.devices:
            out["launch_gpus"] = self.expect      # the launch's size chose them (`fit`)
            if self.hint:
                out["log_gpus"] = sorted(self.hint)   # ... and the GPUs its log named
        return out

    def saved(self) -> dict[str, object]:
        """What it learned, for a daemon restarted under the running server (`resume`)."""
        return {"baseline": {str(i): b for i, b in self.baseline.items()},
                "rose": sorted(self.rose), "held_at_launch": sorted(self.held_at_launch),
                "context_at": {str(i): at for i, at in self.context_at.items()},
                "loaded_at": {str(i): at for i, at in self.loaded_at.items()},
                "unseen": self.unseen}

    def resume(self, doc: dict[str, object]) -> None:
        """Go on from `saved`'s dict: the GPUs' levels at the launch and those found the
        server's.  Before, a restarted daemon began afresh with no snapshot before the launch:
        a server past its weights gains nothing more, so every GPU of the node counted for
        good (a neighbour's busy GPU "slow, not hung" for a hang; the serving power the
        node's average).  ValueError for a dict of the wrong shape."""
        def gpus(key: str) -> set[int]:
            value = doc.get(key)
            if not isinstance(value, list) or not all(type(i) is int for i in value):
                raise ValueError(f"gpu scope: {key} is not a list of GPU indexes")
            return set(value)

        def per_gpu(key: str) -> dict[int, float]:
            value = doc.get(key)
            if not isinstance(value, dict):
                raise ValueError(f"gpu scope: {key} is not an object")
            return {int(i): float(v) for i, v in value.items()}
        baseline = {i: int(b) for i, b in per_gpu("baseline").items()}
        rose, held = gpus("rose"), gpus("held_at_launch")
        context_at, loaded_at = per_gpu("context_at"), per_gpu("loaded_at")
        self.baseline, self.rose, self.held_at_launch = baseline, rose, held
        self.context_at, self.loaded_at = context_at, loaded_at
        self.unseen = doc.get("unseen") is True


def fit(n: int, scope: GpuScope) -> set[int] | None:
    """The `n` GPUs of the launch (its args say how many this node runs): those that loaded
    (`launch_loaded`: not another job loading after the launch's contexts all came),
    then those holding only a context, the nearest in time to the loading GPUs' contexts
    first (a rank stuck before its weights, however late its context came or long the
    others downloaded, before a neighbour's notebook), then, where no snapshot came before
    the launch (a daemon first attached to a server past its weights, or restarted), those
    that held memory at the first snapshot (see below).  None where
    memory cannot say which (more GPUs loaded than the launch has: two servers launched
    together) or the launch has the whole node: the timing heuristics decide.
    Before (helper adv41): a rank whose context came 40 s late, then stuck through a 60-180 s
    download, was left out ("a collective waiting" on 3 GPUs, the rank unnamed); a neighbour's
    context 5-20 s before the weights joined ("a stuck rank (GPU 0)"); a server first seen
    past its weights had every GPU of the node.  The GPUs its log names (`hint`: NCCL's
    `nvmlDev`) come first, and then loaded GPUs beyond the launch's size are another
    server's: of two TP=4 launched together, each takes its own 4 (before, both all 8)."""
    # the GPUs the log names are the launch's (more than it has: other nodes' lines in one
    # file); with them, loaded GPUs beyond the launch's size are another server's
    chosen = {i for i in scope.hint if i in scope.baseline} if len(scope.hint) <= n else set()
    if not chosen and n >= len(scope.baseline):
        return None
    loaded = launch_loaded(n, scope)
    if len(chosen | loaded) <= n:
        chosen |= loaded
    elif not chosen:
        return None
    ref = min((scope.context_at[i] for i in loaded if i in scope.context_at),    # (the first
              default=min(scope.context_at.values(), default=0.0))            # loaded's)
    contexts = sorted((i for i in scope.context_at if i not in chosen | scope.loaded),
                      key=lambda i: (abs(scope.context_at[i] - ref), i))
    chosen.update(contexts[:n - len(chosen)])
    if scope.unseen:
        # the GPUs holding weights then, or those holding only a context, when they are just
        # the ones missing; else all holding either, when no more than missing (a
        # neighbour's server holding 70 GiB beside ranks holding their contexts: not it alone)
        for low, high, fits in ((ROSE, None, operator.eq), (CONTEXT, ROSE, operator.eq),
                                (CONTEXT, None, operator.le)):
            held = {i for i, b in scope.baseline.items() if b >= low and
                    (high is None or b < high) and i not in chosen}
            if held and fits(len(held), n - len(chosen)):
                chosen |= held
    return chosen or None


def launch_loaded(n: int, scope: GpuScope) -> set[int]:
    """The GPUs that loaded which can be the launch's `n`: where `n` GPUs made their
    contexts together (within CONTEXT_LATE of the first: its ranks, which load nothing
    before NCCL init has them all), a GPU whose context came later and then loaded is
    another job's (a neighbour loading during the launch's download), unless its context
    came at most CONTEXT_LATE before the first of those loaded (a late rank: they waited for
    it).  Before (helper adv42), it was taken first: a TP=4 on GPUs 4-7 downloading with
    their contexts beside a job loading GPU 0 read {0, 4, 5, 6}, "mixed (GPU 0) ... working",
    rank 7 left out."""
    start = min(scope.context_at.values(), default=None)
    if start is None:
        return scope.loaded
    together = {i for i, at in scope.context_at.items() if at <= start + CONTEXT_LATE}
    if len(together) < n:
        return scope.loaded
    load = min((scope.loaded_at[i] for i in together if i in scope.loaded_at), default=None)
    return {i for i in scope.loaded if i in together or (
        load is not None and load - CONTEXT_LATE <= scope.context_at.get(i, -1.0) <= load)}


def bus_number(bus_id: str | None) -> int | None:
    """nvidia-smi's `pci.bus_id` (`00000000:E4:00.0`) as NCCL prints a GPU's `busId` (e4000:
    its hex digits as one number, init.cc `busIdToInt64`); None for anything else."""
    m = _BUS_ID.match(bus_id or "")
    return int("".join(m.groups()), 16) if m else None


def log_named(indexes: Iterable[int], buses: Iterable[int],
              snap: GpuSnapshot | None) -> frozenset[int]:
    """The GPUs a launch's log names (NCCL's `nvmlDev`, `busId`) as nvidia-smi's indexes:
    by bus where the snapshot has the GPUs' buses, for NVML's indexes inside a container are
    its own (a pod given the host's GPUs 4-7 prints `nvmlDev 0..3`); else by index.
    Before (helper adv42), by index alone: of two TP=4 pods on one node both took GPUs 0-3,
    the one hung on 4-7 read its neighbour's "busy: slow, not hung"."""
    wanted = set(buses)
    on_bus = {bus_number(g.bus_id): g.index for g in snap.gpus} if snap is not None else {}
    on_bus.pop(None, None)
    if wanted and on_bus:
        return frozenset(i for b, i in on_bus.items() if b in wanted)
    return frozenset(indexes)
