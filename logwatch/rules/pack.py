"""Rule packs: engine knowledge as data (`rules/*.yaml`), loaded and validated.

A pack declares its phases in order, `detect` patterns for `--rules auto`, timestamp formats,
`ignore` patterns (lines no rule may match, e.g. traceback source lines that quote an error
message), `prefixes` (what other programs put before a server's line: docker compose's
`svc-1  | `, journald's `Aug 18 14:15:04 host python3[28059]: `, kubectl's RFC 3339 stamp,
Ray's `(Actor pid=N) `; matched at the start of a line and removed, repeatedly, before the
timestamps, ignore patterns and rules see it; a `proc` group names the process, so two
servers interleaved in one stream are told apart), and ordered rules.  Each rule is a `regex` pattern with named groups and one or more actions:

  phase: P          enter phase P (forward in `phases:` order, a later marker may skip
                    phases; with `begins: true` also back, once per startup)
  progress: NAME    a named counter (`current`, `total`, optional `rate` groups)
  crash: REASON     the server crashed (DESIGN.md reason vocabulary)
  hint: REASON      classifies a crash that follows, without being one
  restart: true     a new startup epoch
  stats: serving    numeric groups become serving gauges
  stop: true        clean shutdown
  chain: true       "During handling of the above exception": the next cause line supersedes
  degrades: TEXT    the server goes on without a part of itself (SGLang's PD bootstrap server
                    whose port was taken): TEXT is said beside its ready, never a crash; the
                    traceback the line was logged with (its `hint`: the exception's reason)
                    is that part's, not the server's
  withdraws: true   after ready, the exceptions just logged went back to a caller (vLLM's
                    `Invocation of add_lora method failed`): a crash not yet final is taken back

and modifiers: `meaning` (a crash rule's own sentence for the crash it gives, `{group}`s of
its pattern filled in: said instead of the reason's where its line is the root cause),
`label` (on a phase rule: a second span of its phase that it opens is named so in the
timeline, SGLang's LoRA adapters loaded after the weights), `when` (phases the rule acts in), `marker` (a crash announcement, not a
root-cause line), `tentative` (crash evidence that a later phase marker can retract),
`reenter` (may step back into an earlier, still empty phase; `own_rank`: only on a line whose
rank had itself got past it), `provisional` (the phase it
enters is announced once confirmed: an earlier phase's `reenter` rule coming first takes its
place without a flip, e.g. SGLang's download inside weight loading), `scale` (multiply a field),
`prefilter` (explicit literals when none can be derived from the pattern), `begins` (the
line begins its phase: moves there whatever the order, the first time in a startup;
`own_rank`: back there on a line of a rank that had itself ended a later phase, once),
`beside: open|close` (a span of the phase beside the main line), `closes_as: PHASE` (the
span this end marker closes was PHASE), `ends_rank` (the rank that prints it is done
starting, whatever phase its line is of), `supervisor` (a restart rule of a launcher whose
servers join its launch), `typical` (on a `begins` rule: how long its phase takes, as the
engine's line says; a first start's ETA).  Pack keys `servers:`, `silent:` and `after_bar:`:
README "Rule packs".

Every problem is reported as one `PackError` naming the file, the rule id and the key.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import regex

from ..lines import (RECORD_FIELDS, RECORD_KEYED, RECORD_KEYED_NEEDED, WRAPPER_FIELDS,
                     RecordForm)
from ..units import parse_duration
from ..yamlload import YAMLTooLarge, load_yaml
from .advice import Advice, AdviceError, parse_advice
from .args import ARGS_FORMS, ArgsSpec
from .gpus import GpuCountSpec, parse_gpu_count
from .literals import Literals
from .patterns import MISSING, PatternCache


WAITING = "waiting"
CRASHED = "crashed"
STOPPED = "stopped"
READY = "ready"
TERMINAL = (CRASHED, STOPPED)
MAX_RANK_PIDS = 1024    # processes whose rank name a startup keeps (`RulePack.rank_of`)

CRASH_REASONS = (
    "cuda_oom", "host_oom_killed", "kv_cache_too_small", "nccl_error", "distributed_error",
    "import_error", "bad_argument", "hub_download_failed", "weight_loading_error",
    "warmup_failed", "port_in_use", "cuda_graph_capture_failed", "autotune_failed",
    "kernel_compile_failed", "startup_timeout", "shm_too_small", "hang", "gpu_unavailable",
    "disk_full", "discovery_unreachable", "child_process_died", "python_exception", "unknown",
)
# Generic reasons, least to most informative; every other reason is specific.
GENERIC_REASONS = ("unknown", "child_process_died", "python_exception")
SPECIFIC_RANK = len(GENERIC_REASONS)

ACTION_KEYS = ("phase", "progress", "crash", "hint", "restart", "stats", "stop", "chain",
               "endpoint", "withdraws", "degrades")
MODIFIER_KEYS = ("when", "marker", "tentative", "reenter", "provisional", "scale", "prefilter", "samples",
                 "description", "before", "after", "args", "finishes", "begins", "beside",
                 "closes_as", "supervisor", "primary", "launch_only", "at_launch", "ready_hint", "during",
                 "ends_rank", "ready_by_endpoint", "meaning", "label", "typical",
                 "unless_seen", "yields")
RULE_KEYS = ("id", "pattern", "frame") + ACTION_KEYS + MODIFIER_KEYS
PACK_KEYS = ("name", "extends", "description", "phases", "reasons", "detect", "timestamps",
             "ignore", "prefixes", "ranks", "probe", "servers", "follower",
             "rules", "crash_by_phase", "disable", "typical_seconds", "stall_after",
             "crash_settle", "advice", "model_flags", "fallback", "silent", "envelope", "colours",
             "user_content", "records", "prelaunch", "ready_hints", "roles", "serves", "gpus",
             "replicas", "drafts", "again", "after_bar")
DEFAULT_CRASH_SETTLE = 2.0   # seconds a crash's evidence must stay unchanged to be final
TIMESTAMP_GROUPS = ("Y", "m", "d", "H", "M", "S", "f")
REGEX_FLAGS = regex.V0
MEANING_FIELD = regex.compile(r"\{(\w+)\}")     # a `meaning:` sentence's `{group}`


def reason_rank(reason: str) -> int:
    """0..2 for the generic reasons, SPECIFIC_RANK for every specific one."""
    try:
        return GENERIC_REASONS.index(reason)
    except ValueError:
        return SPECIFIC_RANK


class PackError(Exception):
    """A broken pack: one message naming the file, the rule and the key."""

    def __init__(self, path: str, message: str, rule: str | None = None,
                 key: str | None = None) -> None:
        self.path, self.rule, self.key, self.message = path, rule, key, message
        where = path
        if rule is not None:
            where += f": rule '{rule}'"
        if key is not None:
            where += f": {key}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Sample:
    """A real log line a rule must match (or, with `matches: false`, must not)."""

    line: str
    fields: dict[str, str] | None = None
    matches: bool = True


@dataclass(frozen=True, eq=False)
class Rule:
    id: str
    pattern: str
    source: str
    phase: str | None = None
    progress: str | None = None
    crash: str | None = None
    hint: str | None = None
    restart: bool = False
    stats: str | None = None
    stop: bool = False
    chain: bool = False
    withdraws: bool = False       # after ready: a crash not yet final is taken back (action)
    degrades: str | None = None   # serving on without a part of itself: said, not a crash
    meaning: str = ""             # a crash rule's own sentence for its crash ({group}s filled)
    label: str = ""               # names a second span of its phase it opens (timeline)
    when: frozenset[str] | None = None
    # does nothing in a startup where one of these rules matched a line before it: an older
    # release's own words say the line means less there (machine/startup.py `step`)
    unless_seen: frozenset[str] = frozenset()
    marker: bool = False
    tentative: bool = False
    reenter: bool = False
    # `reenter: own_rank`: only a line whose rank had itself got past that phase steps back
    # (a rank's second load: a speculative draft), not a slow rank's first one; once each DP
    # replica seen has a rank past it (machine/startup.py `_rank_went_past`)
    reenter_own_rank: bool = False
    provisional: bool = False
    frame: bool = False           # matches traceback frame lines (`File "...", line N, in f`)
    args: bool = False            # the line holds the server's arguments (rules/args.py)
    args_specs: tuple[ArgsSpec, ...] = ()   # where and in which form (`args:` as a mapping)
    endpoint: bool = False        # the line names the server's address (group `url`)
    finishes: bool = False        # the rank that prints it is done with the rule's phase
    begins: bool = False          # the line begins its phase: moves there whatever the order
    # `begins: own_rank`: back to its phase on a line of a rank that had itself ended a later
    # one, once per startup (a rank's second pass: SGLang 0.5.10's draft load after the
    # target's capture; machine/startup.py `begins_again`); not a `begins` marker otherwise
    begins_own_rank: bool = False
    beside: str | None = None     # "open" / "close" a span of its phase beside the main line
    closes_as: str | None = None  # the span this end marker closes was this phase
    during: str | None = None     # a frame: its process crashed in this phase (machine/crash.py)
    ends_rank: bool = False       # the rank that prints it is done starting (machine/ranks.py)
    supervisor: bool = False      # a launcher of several servers (they join its launch)
    primary: bool = False         # its progress is the startup's main bar (the view's `shards`)
    launch_only: bool = False     # only a launch prints it (argparse's error): after a ready,
                                  # a relaunch's line (it begins a startup)
    at_launch: bool = False       # a crash a launch meets before its server's own launch line
                                  # (argparse, an import): in a log with no startup, a
                                  # startup that crashed at launch (machine `crashed_at_launch`)
    ready_hint: bool = False      # after a ready, a hint of its reason, not a crash (a
                                  # request's exception: the server serves on)
    # on a hint: an outer frame, which gives way to a hint after it in the same traceback (a
    # frame deeper in the call: the hub's download inside the argument resolution's)
    yields: bool = False
    # this launch prints no ready line: its endpoint answering is its ready (SGLang's
    # embedded Rust server keeps /health at 503 until its own warmup passed)
    ready_by_endpoint: bool = False
    # on a `begins` rule: how long its phase takes, as the engine's own line says (SGLang's
    # DeepGEMM JIT `typically 10-20 mins`): a first start's guess for the phase once it fired
    typical: float | None = None
    scale: dict[str, float] = field(default_factory=dict)
    literals: Literals | None = None
    samples: tuple[Sample, ...] = ()
    description: str = ""

    @property
    def actions(self) -> list[str]:
        return [k for k in ACTION_KEYS if getattr(self, k) not in (None, False)]

    @functools.cached_property
    def regex(self) -> Any:  # regex.Pattern[str]
        """The compiled pattern, compiled when first used (most rules of a pack never run:
        their literals do not occur; loading validated the pattern, see patterns.py)."""
        return _regex(self.pattern)


ANCHOR_ACTIONS = ("restart", "ready", "endpoint", "stop", "args")   # envelope.anchor (origin.py)


@dataclass(frozen=True)
class UserContent:
    """One `user_content` entry (origin.py): a message pattern, or a logger pattern."""

    regex: Any
    logger: bool
    literals: tuple[str, ...] | None   # one of them is in every line it matches (prefilter)


@dataclass(frozen=True)
class TimestampFormat:
    """A timestamp in a line: named groups Y m d H M S f (any of Y, m, d may be missing)."""

    regex: Any
    pattern: str


@dataclass(frozen=True)
class DetectPattern:
    regex: Any
    weight: float
    literals: Literals | None = None   # required literals of its pattern (literals.py)


@dataclass(frozen=True)
class FollowerSpec:
    """A pack's `follower:`: how a launch is known to be a follower node's, and when it is
    ready.  A node other than the head of a multi-node launch (SGLang `--node-rank 1`, vLLM
    `--headless`) runs no HTTP server and never prints a ready line: its schedulers load,
    size and capture, then wait for the head node's requests.  Its ready is every rank of
    it having finished `ready` (a `finishes: true` rule of that phase, per rank)."""

    rules: frozenset[str] = frozenset()   # a line of one of these rules says so
    head_rules: frozenset[str] = frozenset()  # a line of one of these says a head's launch
    args: tuple[tuple[str, Any], ...] = ()  # or an argument: a number at least this, or true
    ready: str = ""                       # the phase whose finish, by every rank, is ready
    # graphs off (`eager: {rules: [ID], args: {FLAG: true}, ready: PHASE}`): no capture
    # comes, and the end of this phase is a rank's last step
    eager_rules: frozenset[str] = frozenset()
    eager_args: tuple[str, ...] = ()
    eager_ready: str = ""
    eager_skips: frozenset[str] = frozenset()   # phases such a launch never enters
    # the nodes of one launch (`nodes: {rank: ARG, count: ARG, same: [ARG, ...]}`): the
    # launch arguments that say which node of how many printed a dump, and those every node
    # of one launch shares (where the launch meets); "" where the pack has none
    node_rank: str = ""
    node_count: str = ""
    node_same: tuple[str, ...] = ()

    def ready_for(self, launch_args: dict[str, Any], graphs_off: bool) -> str:
        """The phase whose end, by every rank, is the follower's ready: `eager.ready` where
        the launch captures no graphs (`graphs_off`: one of the eager rules fired; or its
        arguments say so), else `ready`."""
        if self.eager_ready and (graphs_off or any(
                launch_args.get(key) is True for key in self.eager_args)):
            return self.eager_ready
        return self.ready

    def skipped(self, launch_args: dict[str, Any], graphs_off: bool) -> frozenset[str]:
        """The phases a launch with graphs off never enters (`eager.skips`: the capture),
        head or follower alike; none while its graphs are on."""
        if self.eager_skips and self.ready_for(launch_args, graphs_off) == self.eager_ready:
            return self.eager_skips
        return frozenset()

    def node_of(self, line_args: dict[str, Any]) -> tuple[int, int] | None:
        """(node rank, node count) a launch line's arguments name, for a launch of several
        nodes; None otherwise."""
        if not self.node_rank:
            return None
        rank, count = line_args.get(self.node_rank), line_args.get(self.node_count)
        if type(rank) is not int or type(count) is not int or not 0 <= rank < count or count < 2:
            return None
        return rank, count

    def says(self, rule_id: str, line_args: dict[str, Any]) -> bool | None:
        """What this line says of its node: True a follower's (one of the rules, or its
        arguments at least the threshold / true), False the head's (one of the head rules:
        vLLM's version line, which only its API server prints; or its arguments hold the flag
        below it: SGLang's dump names `node_rank` 0), None nothing."""
        if rule_id in self.rules:
            return True
        head = False if rule_id in self.head_rules else None
        for key, want in self.args:
            if key not in line_args:
                continue
            v = line_args[key]
            if want is True:
                if v is True:
                    return True
                head = False if v is False else head
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                if v >= want:
                    return True
                head = False
        return head


@dataclass(frozen=True)
class RulePack:
    name: str
    path: str
    phases: tuple[str, ...]
    rules: tuple[Rule, ...]
    detect: tuple[DetectPattern, ...] = ()
    timestamps: tuple[TimestampFormat, ...] = ()
    ignore: tuple[Any, ...] = ()
    prefixes: Any = None     # one regex: the wrappers other programs put before a line
    prefix_patterns: tuple[str, ...] = ()   # its parts, as written (a pack extending this)
    # how its engine's formatter writes a logging record (JSON logging read as text)
    records: tuple[RecordForm, ...] = ()
    ranks: tuple[Any, ...] = ()  # patterns whose group `rank` names the rank a line is from
    probe_paths: tuple[str, ...] = ()   # the server's HTTP paths a probe asks (telemetry/probe.py)
    probe_off_args: tuple[str, ...] = ()   # launch args that, true, say it serves no HTTP
    silent: tuple[str, ...] = ()   # phases that may print nothing (a silent hub download)
    # phases the engine goes on in after their bar's last frame, with work no line begins
    # (the capture: the server's start and warmup before ready): a first start's ETA
    after_bar: tuple[str, ...] = ()
    # phases a wrapper's lines may show before the server's own launch line (an entrypoint's
    # `huggingface-cli download`): a launch line then begins the server in that startup
    prelaunch: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()   # launch args naming a process's role in one deployment (PD)
    serves: tuple[str, ...] = ()  # launch rules only a server (which prints a ready line) prints
    drafts: tuple[str, ...] = ()  # launch args that, set, say a second (draft) model loads too
    draft_by: str = ""    # the phase by whose end a draft loaded in the first pass (`drafts.by`)
    # phases the engine's own code runs again after another one, from a release on (vLLM
    # 0.31+'s kernel warmup after the KV estimate): a first start's ETA counts them (eta.py)
    again: tuple["AgainSpec", ...] = ()
    servers: tuple[Any, ...] = ()  # patterns whose group `server` names the server of a line
    server_count_args: tuple[str, ...] = ()   # launch args that say how many servers start
    follower: FollowerSpec | None = None   # a follower node's launch, and its ready
    gpus: GpuCountSpec | None = None   # the GPUs of a node a launch uses, from its args
    # data-parallel replicas (`DP1` ranks) start apart and the startup is where the slowest
    # is (machine/ranks.py `replicas_allow`), unless one of these launch args is true; None:
    # the pack's ranks are never compared so
    replicas_unless: tuple[str, ...] | None = None
    # a rank's pipeline stage (group 1: `PP1` of `[... PP1 TP3]`): each stage of a replica
    # loads, sizes and captures at its own pace too (`replicas: {stage: REGEX}`)
    replica_stage: Any = None
    # the phase a replica's stages enter at once, which one stage alone may print
    # (`replicas: {together: PHASE}`; machine/ranks.py `lift_stages`)
    stages_together: str = ""
    crash_by_phase: dict[str, str] = field(default_factory=dict)
    typical_seconds: dict[str, float] = field(default_factory=dict)
    stall_after: dict[str, float] = field(default_factory=dict)
    crash_settle: float = DEFAULT_CRASH_SETTLE
    description: str = ""
    reasons: tuple[str, ...] = ()   # crash reasons the pack (or one it extends) declares
    advice: tuple[Advice, ...] = ()   # the launch ledger's advice on this engine's flags
    model_flags: tuple[str, ...] = ()   # the flags that name the model, first present wins
    fallback: bool = False   # `--rules auto` takes it when no pack's `detect` matches (own key)
    # where a line comes from (rules/origin.py): the engine's envelope, what may follow it
    # before an anchored rule, the anchored actions, the lines that carry what clients sent
    envelope: Any = None
    envelope_lead: Any = None
    anchor: frozenset[str] = frozenset()
    user_content: tuple[Any, ...] = ()
    # what the page and the terminal draw from the pack: each phase's colour, and the progress
    # kind that is the startup's main bar (a `primary: true` progress rule; the view's
    # `shards`, the metrics' logwatch_shards_*)
    colours: dict[str, str] = field(default_factory=dict)
    primary_progress: str | None = None

    @property
    def all_reasons(self) -> tuple[str, ...]:
        """Every crash reason a crash of this pack can have (logwatch_crashes_total{reason})."""
        return CRASH_REASONS + tuple(r for r in self.reasons if r not in CRASH_REASONS)

    def phase_index(self, phase: str) -> int:
        """Order of a phase: waiting first, the pack's phases, then the terminal ones."""
        if phase == WAITING:
            return -1
        try:
            return self.phases.index(phase)
        except ValueError:
            return len(self.phases) + TERMINAL.index(phase)

    @property
    def startup_phases(self) -> tuple[str, ...]:
        """The phases before ready (where a silent log means a stall)."""
        if READY in self.phases:
            return self.phases[: self.phases.index(READY)]
        return self.phases

    def rank_of(self, text: str, names: dict[str, tuple[int, str]] | None = None) -> str:
        """The rank a line comes from (`TP5`, `DP1 TP3 EP3`, `TP2_EP2`), "" when untagged.
        `names` (a startup's, `State.rank_pids`): the rank each process id a pattern's group
        `pid` read was first named, and by which pattern; a process another pattern names
        is that rank still (vLLM's JSON records name a worker as multiprocessing did,
        `VllmWorker-0`, while its tqdm bars keep the text tag, `Worker_TP0`: two ranks of
        one process, one of them left behind at the KV sizing, held the capture's begin
        back 15 s).  Two processes of one pid and one pattern (Ray's nodes) stay apart."""
        for form, rx in enumerate(self.ranks):
            m = rx.match(text)
            if m is not None and m.group("rank"):
                rank = " ".join(m.group("rank").split())
                pid = m.group("pid") if names is not None and "pid" in rx.group_names else None
                if not pid:
                    return rank
                first = names.get(pid)
                if first is None and len(names) < MAX_RANK_PIDS:
                    names[pid] = (form, rank)
                return first[1] if first is not None and first[0] != form else rank
        return ""

    def server_of(self, text: str) -> str:
        """The server process a line comes from (`APIServer pid=101`), "" when untagged: a
        launch of several servers in one stream (vLLM's DP supervisor) is ready when all
        of them are."""
        for rx in self.servers:
            m = rx.match(text)
            if m is not None and m.group("server"):
                return m.group("server")
        return ""

    @functools.cached_property
    def watched(self) -> frozenset[str]:
        """The rules some rule's `unless_seen` names: the machine notes each that matched
        in a startup (`State.seen`), and only those."""
        return frozenset().union(*(r.unless_seen for r in self.rules))

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)


# ----------------------------------------------------------------------------------------------
# Locating packs

def shipped_dir() -> Path:
    """Where the packs shipped with logwatch live (installed package data or the checkout)."""
    package = Path(__file__).resolve().parent.parent      # logwatch/
    for candidate in (package / "packs", package.parent / "rules"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return package.parent / "rules"


def search_path() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("LOGWATCH_RULES_PATH", "").split(os.pathsep) if p]
    return extra + [shipped_dir()]


def shipped_pack_names() -> list[str]:
    names: list[str] = []
    for d in search_path():
        for p in sorted(d.glob("*.yaml")):
            if p.stem not in names:
                names.append(p.stem)
    return names


def resolve_pack_path(spec: str) -> Path:
    """A pack name (`sglang`) or a path to a YAML file."""
    p = Path(spec).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in spec or p.is_file():
        if not p.is_file():
            raise PackError(spec, "no such rule pack file")
        return p
    for d in search_path():
        cand = d / f"{spec}.yaml"
        if cand.is_file():
            return cand
    known = ", ".join(shipped_pack_names()) or "none"
    raise PackError(spec, f"unknown rule pack (known: {known}; or give a path to a .yaml file)")


def load_pack(spec: str) -> RulePack:
    path = resolve_pack_path(spec)
    st = path.stat()
    return _load_cached(str(path.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, size: int) -> RulePack:
    """Packs are immutable: a file is parsed again only when it changed (SIGHUP reloads)."""
    try:
        return _load(Path(path), ())
    finally:
        _PATTERNS.save()     # what this load learnt about its patterns, for the next start


class _InvalidYAML(ValueError):
    """yaml.YAMLError's text, raised without `_load` importing yaml."""


@functools.lru_cache(maxsize=64)
def _read_yaml(path: str, mtime_ns: int, size: int) -> Any:
    """A pack file's document, parsed once per version of the file (the shipped packs all
    extend base, which was parsed again for each), and kept in the pattern cache by the
    SHA-256 of the file's bytes: a later start takes it from there without parsing the YAML
    or importing PyYAML (~15 ms of every start).  Read only: never modified."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    doc = _PATTERNS.doc(digest)
    if doc is not MISSING:
        return doc
    import yaml
    try:
        with open(path, encoding="utf-8") as f:
            doc = load_yaml(f)
    except yaml.YAMLError as e:
        raise _InvalidYAML(str(e)) from None
    _PATTERNS.put_doc(digest, doc)
    return doc


def load_all_shipped() -> list[RulePack]:
    return [load_pack(n) for n in shipped_pack_names()]


# ----------------------------------------------------------------------------------------------
# Parsing and validation

def _load(path: Path, chain: tuple[str, ...]) -> RulePack:
    src, real, doc = _read_doc(path, chain)
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise PackError(src, "missing or empty", key="name")
    base = _extended(src, doc, path, chain + (real,))
    phases = _phases(src, doc, base)
    reasons = _reasons(src, doc.get("reasons"), base)
    known = CRASH_REASONS + reasons
    rules = _pack_rules(src, doc, base, phases, known)
    detect = _detect(src, doc.get("detect")) if "detect" in doc else (base.detect if base else ())
    timestamps = (_timestamps(src, doc.get("timestamps")) if "timestamps" in doc
                  else (base.timestamps if base else ()))
    ignore, prefix_src = _ignore_and_prefixes(src, doc, base)
    ranks = _ranks(src, doc["ranks"]) if doc.get("ranks") is not None \
        else (base.ranks if base else ())
    probe_paths, probe_off = _probe(src, doc["probe"]) if doc.get("probe") is not None \
        else ((base.probe_paths, base.probe_off_args) if base else ((), ()))
    silent, prelaunch, after_bar = (_phase_list(src, doc, k, phases, getattr(base, k, ()))
                                    for k in ("silent", "prelaunch", "after_bar"))
    roles = _names(src, doc, "roles", base.roles if base else ())
    serves = _rule_ids(src, doc, "serves", rules, base.serves if base else ())
    drafts, draft_by = _drafts(src, doc, phases, base)
    servers, count_args = _servers(src, doc["servers"]) if doc.get("servers") is not None \
        else ((base.servers, base.server_count_args) if base else ((), ()))
    follower = _follower(src, doc["follower"], rules, phases) \
        if doc.get("follower") is not None else (base.follower if base else None)
    gpus = _gpus(src, doc["gpus"]) if doc.get("gpus") is not None else (base.gpus if base else None)
    replicas, stage, together = _replicas(src, doc["replicas"], phases) if "replicas" in doc \
        else ((base.replicas_unless, base.replica_stage, base.stages_together) if base
              else (None, None, ""))
    envelope, lead, anchor = _envelope(src, doc["envelope"]) if doc.get("envelope") is not None \
        else ((base.envelope, base.envelope_lead, base.anchor) if base else (None, None, frozenset()))
    user_content = (base.user_content if base else ()) + _user_content(src, doc.get("user_content"))
    crash_by_phase = dict(base.crash_by_phase) if base else {}
    crash_by_phase.update(_phase_map(src, doc.get("crash_by_phase"), phases, "crash_by_phase",
                                     reasons=known))
    typical = dict(base.typical_seconds) if base else {}
    typical.update(_phase_map(src, doc.get("typical_seconds"), phases, "typical_seconds"))
    stall = dict(base.stall_after) if base else {}
    stall.update(_phase_map(src, doc.get("stall_after"), phases, "stall_after"))
    settle = _crash_settle(src, doc, base)
    return RulePack(
        name=name, path=src, phases=phases, rules=tuple(rules), detect=detect,
        timestamps=timestamps, ignore=ignore, prefix_patterns=tuple(prefix_src),
        prefixes=_prefix_regex(tuple(prefix_src)), crash_by_phase=crash_by_phase, typical_seconds=typical,
        stall_after=stall, crash_settle=settle, description=str(doc.get("description") or ""),
        reasons=reasons, ranks=ranks, probe_paths=probe_paths, probe_off_args=probe_off,
        servers=servers, silent=silent, after_bar=after_bar,
        prelaunch=prelaunch, roles=roles, serves=serves, server_count_args=count_args,
        follower=follower, drafts=drafts, draft_by=draft_by, again=_again(src, doc, phases, base),
        gpus=gpus, replicas_unless=replicas, replica_stage=stage, stages_together=together,
        advice=_advice(src, doc.get("advice"), base), fallback=_fallback(src, doc.get("fallback")),
        model_flags=_model_flags(src, doc["model_flags"]) if doc.get("model_flags") is not None
        else (base.model_flags if base else ()),
        envelope=envelope, envelope_lead=lead, anchor=anchor, user_content=user_content,
        colours=_colours(src, doc.get("colours"), phases, base),
        primary_progress=_primary_progress(src, rules),
        records=_records(src, doc.get("records")) + (base.records if base else ()),
    )


def _read_doc(path: Path, chain: tuple[str, ...]) -> tuple[str, str, dict[str, Any]]:
    """A pack file's document (its path as given and resolved): one PackError for a file
    that extends itself, cannot be read, is not YAML or UTF-8, or is not a pack's mapping."""
    src = str(path)
    real = str(path.resolve())
    if real in chain:
        raise PackError(src, f"extends itself through {' -> '.join(chain + (real,))}",
                        key="extends")
    try:
        st = path.stat()
        doc = _read_yaml(str(path), st.st_mtime_ns, st.st_size)
    except _InvalidYAML as e:
        raise PackError(src, f"not valid YAML: {e}".replace("\n", " ")) from None
    except YAMLTooLarge as e:
        raise PackError(src, f"refused: {e}") from None
    except UnicodeDecodeError as e:
        raise PackError(src, f"not UTF-8 text (byte {e.start}); save the pack as UTF-8") from None
    except OSError as e:
        raise PackError(src, f"cannot read: {e.strerror}") from None
    if not isinstance(doc, dict):
        raise PackError(src, "a rule pack is a mapping with at least 'name' and 'rules'")
    _no_unknown(src, doc, PACK_KEYS, None, "pack")
    return src, real, doc


def _extended(src: str, doc: dict[str, Any], path: Path, chain: tuple[str, ...]
              ) -> "RulePack | None":
    """The pack `extends:` names (a name, or a path relative to this pack), loaded."""
    if not doc.get("extends"):
        return None
    ext = doc["extends"]
    if not isinstance(ext, str):
        raise PackError(src, "must be a pack name or a path", key="extends")
    looks_like_path = ext.endswith((".yaml", ".yml")) or "/" in ext or os.sep in ext
    rel = path.parent / Path(ext).expanduser()
    try:
        ext_path = resolve_pack_path(str(rel) if looks_like_path and not
                                     Path(ext).expanduser().is_absolute() else ext)
    except PackError as e:
        raise PackError(src, f"'{ext}': {e.message}", key="extends") from None
    return _load(ext_path, chain)


def _pack_rules(src: str, doc: dict[str, Any], base: "RulePack | None",
                phases: tuple[str, ...], known: tuple[str, ...]) -> list[Rule]:
    """The pack's rules: its own, merged with its base's (`disable:`, `args: true`); an
    inherited rule whose phase this pack does not list is an error naming it."""
    rules_doc = doc.get("rules")
    if rules_doc is None and base is None:
        raise PackError(src, "missing (a pack needs at least one rule)", key="rules")
    if rules_doc is not None and not isinstance(rules_doc, list):
        raise PackError(src, "must be a list of rules", key="rules")
    own = [_rule(src, i, r, phases, known) for i, r in enumerate(rules_doc or [])]
    rules = _merge_rules(src, base, own, rules_doc or [], doc.get("disable"))
    rules = _args_true(src, rules)
    hints = doc.get("ready_hints", True)
    if not isinstance(hints, bool):
        raise PackError(src, "must be true or false", key="ready_hints")
    if not hints:     # this engine's cause lines after a ready are crashes (its rules' ready_hint off)
        rules = [replace(r, ready_hint=False) if r.ready_hint else r for r in rules]
    if base is not None and phases != base.phases:
        for r in rules:
            for p in ([r.phase] if r.phase else []) + sorted(r.when or ()):
                if p not in phases and p != WAITING and p not in TERMINAL:
                    raise PackError(src, f"inherited from {r.source} uses phase '{p}', which "
                                    f"this pack's phases do not list; add the phase, or "
                                    f"override or disable the rule",
                                    rule=r.id, key="phase" if p == r.phase else "when")
    if not rules:
        raise PackError(src, "the pack has no rules", key="rules")
    _check_unless_seen(src, rules)
    return rules


def _unless_seen(src: str, rid: str, value: Any) -> frozenset[str]:
    """`unless_seen: [RULE_ID, ...]` (the ids are checked once the pack is merged)."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not value or \
            not all(isinstance(x, str) and x for x in value):
        raise PackError(src, "must be a list of rule ids", rule=rid, key="unless_seen")
    return frozenset(value)


def _check_unless_seen(src: str, rules: list[Rule]) -> None:
    """Each id an `unless_seen` names is a rule of the merged pack, not the rule itself (a
    typo would leave the rule acting everywhere, silently)."""
    ids = {r.id for r in rules}
    for r in rules:
        for other in sorted(r.unless_seen):
            if other not in ids or other == r.id:
                raise PackError(src, f"no other rule '{other}' in this pack", rule=r.id,
                                key="unless_seen")


def _ignore_and_prefixes(src: str, doc: dict[str, Any], base: "RulePack | None"
                         ) -> tuple[tuple[Any, ...], list[str]]:
    """`ignore:` and `prefixes:`, each after its base's."""
    ignore = tuple(base.ignore) if base else ()
    if doc.get("ignore") is not None:
        if not isinstance(doc["ignore"], list):
            raise PackError(src, "must be a list of patterns", key="ignore")
        ignore += tuple(_compile(src, p, None, f"ignore[{i}]") for i, p in enumerate(doc["ignore"]))
        for p in doc["ignore"]:
            pattern_literals(p)      # the matcher's prefilter of ignore patterns, cached
    prefix_src = list(base.prefix_patterns) if base else []
    if doc.get("prefixes") is not None:
        if not isinstance(doc["prefixes"], list):
            raise PackError(src, "must be a list of patterns", key="prefixes")
        for i, p in enumerate(doc["prefixes"]):
            _groups(src, p, None, f"prefixes[{i}]")    # each alone: its error names it
            prefix_src.append(p)
    return ignore, prefix_src


def _records(src: str, value: Any) -> tuple[RecordForm, ...]:
    """`records: [{loggers: [NAME, ...], envelope: [PIECE, ...], datefmt: STRFTIME,
    each_line: BOOL, keys: {FIELD: KEY}, wraps: BOOL}]`: how the engine's text formatter
    writes a logging record (`lines.RecordForm`), so that its JSON records (python-json-
    logger's, or a shape whose `keys` name its own: NVIDIA Dynamo's jsonl) read as its text;
    with `wraps: true`, how a wrapper's JSON line (stern's, logcli's) reads as the text of a
    wrapper the `prefixes` read (its fields `WRAPPER_FIELDS` and `message`, its keys paths).
    Each piece is checked here: a `%`-format naming only those fields; `datefmt: null`
    keeps the record's time as written."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PackError(src, "must be a list of {loggers, envelope, datefmt, each_line, keys}",
                        key="records")
    out = []
    for i, item in enumerate(value):
        key = f"records[{i}]"
        if not isinstance(item, dict) or \
                set(item) - {"loggers", "envelope", "datefmt", "each_line", "keys", "wraps"} or \
                "envelope" not in item:
            raise PackError(src, "must be a mapping {loggers: [...], envelope: [...], datefmt, "
                            "each_line, keys, wraps}", key=key)
        loggers, pieces = item.get("loggers") or [], item["envelope"]
        datefmt = item.get("datefmt", "%Y-%m-%d %H:%M:%S")
        if not isinstance(loggers, list) or not all(isinstance(x, str) and x for x in loggers):
            raise PackError(src, "must be a list of logger names", key=f"{key}.loggers")
        if datefmt is not None and (not isinstance(datefmt, str) or not datefmt):
            raise PackError(src, "must be a strftime format, or null (the time as written)",
                            key=f"{key}.datefmt")
        wraps = item.get("wraps", False)
        if not isinstance(wraps, bool):
            raise PackError(src, "must be true or false", key=f"{key}.wraps")
        keys = (_wrapper_keys if wraps else _record_keys)(src, item.get("keys"), f"{key}.keys")
        every = dict.fromkeys(WRAPPER_FIELDS if wraps else RECORD_FIELDS, 1)
        if not isinstance(pieces, list) or not pieces:
            raise PackError(src, "must be a list of %-format pieces", key=f"{key}.envelope")
        for j, piece in enumerate(pieces):
            try:
                piece % every if isinstance(piece, str) else None
            except (KeyError, ValueError, TypeError):
                piece = None
            if not isinstance(piece, str):
                raise PackError(src, f"must be a %-format of {', '.join(every)}",
                                key=f"{key}.envelope[{j}]")
        each_line = item.get("each_line", False)
        if not isinstance(each_line, bool):
            raise PackError(src, "must be true or false", key=f"{key}.each_line")
        out.append(RecordForm(tuple(loggers), tuple(pieces), datefmt, each_line, keys, wraps))
    return tuple(out)


def _wrapper_keys(src: str, value: Any, key: str) -> tuple[tuple[str, str], ...]:
    """A wrapper's `keys: {FIELD: PATH}`: `message` and any of `WRAPPER_FIELDS`, each a key
    path (`a.b`: logcli's labels are a nested object, `lines._path`)."""
    fields = ("message", *WRAPPER_FIELDS)
    if not isinstance(value, dict) or "message" not in value or set(value) - set(fields) or \
            not all(isinstance(v, str) and v and "" not in v.split(".")
                    for v in value.values()):
        raise PackError(src, f"must map message (and any of {', '.join(WRAPPER_FIELDS)}) to "
                        "the record's own key paths", key=key)
    return tuple((f, value[f]) for f in fields if f in value)


def _record_keys(src: str, value: Any, key: str) -> tuple[tuple[str, str], ...]:
    """A records entry's `keys: {FIELD: KEY}` (`lines.RecordForm.keys`): the JSON key of
    each of `RECORD_KEYED` the shape has, `levelname` and `message` among them."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not value or set(value) - set(RECORD_KEYED) or \
            not all(isinstance(v, str) and v for v in value.values()) or \
            any(f not in value for f in RECORD_KEYED_NEEDED):
        raise PackError(src, f"must map {', '.join(RECORD_KEYED_NEEDED)} (and any of "
                        f"{', '.join(RECORD_KEYED)}) to the record's own keys", key=key)
    return tuple((f, value[f]) for f in RECORD_KEYED if f in value)


def record_forms(pack: RulePack) -> tuple[RecordForm, ...]:
    """The forms a log read with `pack` knows: its own, then every shipped pack's (before a
    log's pack is known, `--rules auto` reads with the fallback pack; each form names its
    engine's loggers, so they do not collide)."""
    shipped = _shipped_forms()
    return pack.records + tuple(f for f in shipped if f not in pack.records)


@functools.lru_cache(maxsize=1)
def _shipped_forms() -> tuple[RecordForm, ...]:
    return tuple(dict.fromkeys(f for p in load_all_shipped() for f in p.records))


def _crash_settle(src: str, doc: dict[str, Any], base: "RulePack | None") -> float:
    if doc.get("crash_settle") is None:
        return base.crash_settle if base else DEFAULT_CRASH_SETTLE
    try:
        return parse_duration(doc["crash_settle"])
    except (ValueError, TypeError):
        raise PackError(src, f"not a duration: {doc['crash_settle']!r} (use e.g. 2s)",
                        key="crash_settle") from None


def _advice(src: str, value: Any, base: RulePack | None) -> tuple[Advice, ...]:
    """`advice:` entries (rules/advice.py): the inherited ones, an own entry with the same id
    replacing one in place, new ones after them."""
    out = list(base.advice) if base else []
    if value is None:
        return tuple(out)
    if not isinstance(value, list):
        raise PackError(src, "must be a list of {id, when, say} entries", key="advice")
    seen: set[str] = set()
    for i, d in enumerate(value):
        try:
            entry = parse_advice(d)
        except AdviceError as e:
            rid = d.get("id") if isinstance(d, dict) and isinstance(d.get("id"), str) else None
            key = f"advice[{i}]" + (f".{e.key}" if e.key else "")
            raise PackError(src, str(e), rule=rid, key=key) from None
        if entry.id in seen:
            raise PackError(src, "duplicate advice id", rule=entry.id, key=f"advice[{i}].id")
        seen.add(entry.id)
        ids = [a.id for a in out]
        if entry.id in ids:
            out[ids.index(entry.id)] = entry
        else:
            out.append(entry)
    return tuple(out)


_COLOUR = regex.compile(r"#[0-9a-fA-F]{6}")


def _colours(src: str, value: Any, phases: tuple[str, ...], base: RulePack | None
             ) -> dict[str, str]:
    """`colours: {PHASE: "#rrggbb"}`: how the page draws each phase (the pack it extends gives
    the rest).  A phase without one is drawn in the page's neutral grey."""
    out = dict(base.colours) if base else {}
    if value is None:
        return out
    if not isinstance(value, dict):
        raise PackError(src, 'must map a phase to a colour, e.g. {loading_shards: "#0969da"}',
                        key="colours")
    for phase, colour in value.items():
        if phase not in phases and phase not in TERMINAL and phase != WAITING:
            raise PackError(src, f"unknown phase '{phase}' (phases: {', '.join(phases)})",
                            key=f"colours.{phase}")
        if not isinstance(colour, str) or not _COLOUR.fullmatch(colour):
            raise PackError(src, f'must be a colour "#rrggbb", got {colour!r}',
                            key=f"colours.{phase}")
        out[phase] = colour.lower()
    return out


def _primary_progress(src: str, rules: list[Rule]) -> str | None:
    """The progress kind of the `primary: true` rules (one kind per pack: the main bar)."""
    kinds = list(dict.fromkeys(r.progress for r in rules if r.primary and r.progress))
    if len(kinds) > 1:
        rid = next(r.id for r in rules if r.primary and r.progress == kinds[1])
        raise PackError(src, f"one progress kind is the main bar; '{kinds[0]}' already is",
                        rule=rid, key="primary")
    return kinds[0] if kinds else None


def _fallback(src: str, value: Any) -> bool:
    """`fallback: true`: the pack `--rules auto` takes when nothing is recognised.  Not
    inherited: a pack extending the fallback is not one itself unless it says so."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise PackError(src, "must be true or false", key="fallback")
    return value


def _model_flags(src: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or \
            not all(isinstance(x, str) and x for x in value):
        raise PackError(src, "must be a list of flag names", key="model_flags")
    return tuple(value)


def _ranks(src: str, value: Any) -> tuple[Any, ...]:
    """`ranks:` patterns, matched at the start of a line; each has a group `rank`."""
    return _tag_patterns(src, value, "rank", "ranks")


def _tag_patterns(src: str, value: Any, group: str, key: str) -> tuple[Any, ...]:
    """Patterns matched at the start of a line whose group `group` names where it is from
    (a rank, a server process)."""
    if not isinstance(value, list):
        raise PackError(src, f"must be a list of patterns with a group (?P<{group}>...)", key=key)
    out = []
    for i, p in enumerate(value):
        rx = _compile(src, p, None, f"{key}[{i}]")
        if group not in rx.group_names:
            raise PackError(src, f"needs a named group (?P<{group}>...)", key=f"{key}[{i}]")
        out.append(rx)
    return tuple(out)


def _names(src: str, doc: dict[str, Any], key: str, inherited: tuple[str, ...]) -> tuple[str, ...]:
    """A pack key that lists argument names (`roles:`), or the base's."""
    if doc.get(key) is None:
        return inherited
    value = doc[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PackError(src, "must be a list of argument names", key=key)
    return tuple(value)


def _drafts(src: str, doc: dict[str, Any], phases: tuple[str, ...],
            base: "RulePack | None") -> tuple[tuple[str, ...], str]:
    """`drafts: {args: [ARG, ...], by: PHASE}`: launch args that, set, say a draft model
    loads too, and the phase by whose end a draft loaded in the first pass (eta.py); or
    the base's."""
    value = doc.get("drafts")
    if value is None:
        return (base.drafts, base.draft_by) if base else ((), "")
    if not isinstance(value, dict) or set(value) != {"args", "by"}:
        raise PackError(src, "must be {args: [argument names], by: PHASE}", key="drafts")
    args = _names(src, value, "args", ())
    if not args or value["by"] not in phases:
        raise PackError(src, f"needs argument names and a phase of {', '.join(phases)}",
                        key="drafts")
    return args, value["by"]


@dataclass(frozen=True)
class AgainSpec:
    """`again: [{phase: P, after: Q, since: VERSION, unless: [ARG, ...]}]`: from engine
    release VERSION on (the launch's version line), the engine's code runs phase P again
    once Q has come, unless one of the launch args is set.  What only history told before:
    a first start of vLLM 0.34 read 40 s left at the KV estimate where 189 s were (its
    kernel warmup, autotune again, not counted)."""

    phase: str
    after: str
    since: tuple[int, ...]
    unless: tuple[str, ...] = ()

    def applies(self, version: str | None, args: dict[str, Any]) -> bool:
        """Whether the launch (its printed `version`, its `args`) runs the phase again: a
        release at or after `since` (none printed: not known, not counted), none of
        `unless` set."""
        v = release_of(version)
        return v is not None and v >= self.since and \
            not any(arg_is_set(args.get(a)) for a in self.unless)


def arg_is_set(value: object) -> bool:
    """A launch argument given a value (SGLang's dump writes an unset one `None`)."""
    return value not in (None, False, "", "None", "none")


def release_of(version: str | None) -> tuple[int, ...] | None:
    """`0.34.0` -> (0, 34, 0); `0.8.5.post1`, `0.31.0rc1` -> their leading numbers; None for
    none or no number."""
    nums = regex.match(r"v?(\d+(?:\.\d+)*)", version or "")
    return tuple(int(x) for x in nums.group(1).split(".")) if nums else None


def _again(src: str, doc: dict[str, Any], phases: tuple[str, ...],
           base: "RulePack | None") -> tuple[AgainSpec, ...]:
    """A pack's `again:` list (AgainSpec), or the base's."""
    value = doc.get("again")
    if value is None:
        return base.again if base else ()
    form = "must be a list of {phase: PHASE, after: PHASE, since: 'VERSION', unless: [ARG]}"
    if not isinstance(value, list):
        raise PackError(src, form, key="again")
    out = []
    for item in value:
        if not isinstance(item, dict) or not {"phase", "after", "since"} <= set(item) or \
                not set(item) <= {"phase", "after", "since", "unless"} or \
                item["phase"] not in phases or item["after"] not in phases or \
                READY in (item["phase"], item["after"]) or not isinstance(item["since"], str) \
                or release_of(item["since"]) is None:
            raise PackError(src, form, key="again")     # (a YAML 0.30 would be 0.3: quoted)
        since = release_of(item["since"])
        assert since is not None
        out.append(AgainSpec(item["phase"], item["after"], since,
                             _names(src, item, "unless", ())))
    return tuple(out)


def _rule_ids(src: str, doc: dict[str, Any], key: str, rules: list[Rule],
              inherited: tuple[str, ...]) -> tuple[str, ...]:
    """A pack key that lists rule ids of this pack (`serves:`), or the base's."""
    if doc.get(key) is None:
        return inherited
    value, ids = doc[key], {r.id for r in rules}
    if not isinstance(value, list) or any(v not in ids for v in value):
        raise PackError(src, "must be a list of this pack's rule ids", key=key)
    return tuple(value)


def _gpus(src: str, value: Any) -> GpuCountSpec:
    """`gpus: {times: [...], over: ARG, unless: {...}}` (rules/gpus.py)."""
    try:
        return parse_gpu_count(value)
    except ValueError as e:
        raise PackError(src, str(e), key="gpus") from None


def _servers(src: str, value: Any) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """`servers: {patterns: [...], count_args: [...]}`: which server process a line is from
    (group `server`), and the launch arguments that say how many servers a launch starts."""
    if not isinstance(value, dict) or set(value) - {"patterns", "count_args"}:
        raise PackError(src, "must be a mapping {patterns: [...], count_args: [...]}",
                        key="servers")
    out = _tag_patterns(src, value.get("patterns") or [], "server", "servers.patterns")
    args = value.get("count_args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) and a for a in args):
        raise PackError(src, "must be a list of argument names", key="servers.count_args")
    return out, tuple(args)


def _follower(src: str, value: Any, rules: list[Rule], phases: tuple[str, ...]
              ) -> FollowerSpec:
    """`follower: {rules: [ID, ...], head: [ID, ...], args: {FLAG: N | true}, ready: PHASE,
    eager: {args: {FLAG: true}, ready: PHASE, skips: [PHASE]}, nodes: {rank: ARG, count: ARG,
    same: [ARG, ...]}}` (FollowerSpec)."""
    if not isinstance(value, dict) or \
            set(value) - {"rules", "head", "args", "ready", "eager", "nodes"}:
        raise PackError(src, "must be a mapping {rules: [...], head: [...], args: {...}, "
                        "ready: PHASE, eager: {...}, nodes: {...}}", key="follower")
    ids = {r.id for r in rules}
    named = value.get("rules") or []
    if not isinstance(named, list) or any(x not in ids for x in named):
        raise PackError(src, "must be a list of this pack's rule ids", key="follower.rules")
    heads = value.get("head") or []
    if not isinstance(heads, list) or any(x not in ids for x in heads):
        raise PackError(src, "must be a list of this pack's rule ids", key="follower.head")
    args = value.get("args") or {}
    if not isinstance(args, dict) or not all(
            isinstance(k, str) and (v is True or (isinstance(v, (int, float))
                                                  and not isinstance(v, bool)))
            for k, v in args.items()):
        raise PackError(src, "must map argument names to a number (the least that says "
                        "so) or true", key="follower.args")
    ready = value.get("ready")
    _follower_ready(src, ready, rules, phases, "follower.ready")
    return FollowerSpec(frozenset(named), frozenset(heads), tuple(args.items()), ready,
                        *_follower_eager(src, value.get("eager"), rules, phases),
                        *_follower_nodes(src, value.get("nodes")))


def _follower_nodes(src: str, value: Any) -> tuple[str, str, tuple[str, ...]]:
    """`follower.nodes: {rank: ARG, count: ARG, same: [ARG, ...]}`: the arguments of a
    launch line that name its node, the launch's number of nodes, and what its nodes share."""
    if value is None:
        return "", "", ()
    if not isinstance(value, dict) or set(value) - {"rank", "count", "same"} or \
            not all(isinstance(value.get(k), str) and value[k] for k in ("rank", "count")):
        raise PackError(src, "must be a mapping {rank: ARG, count: ARG, same: [ARG, ...]}",
                        key="follower.nodes")
    same = value.get("same") or []
    if not isinstance(same, list) or not all(isinstance(x, str) and x for x in same):
        raise PackError(src, "must be a list of argument names", key="follower.nodes.same")
    return value["rank"], value["count"], tuple(same)


def _follower_eager(src: str, value: Any, rules: list[Rule], phases: tuple[str, ...]
                    ) -> tuple[frozenset[str], tuple[str, ...], str, frozenset[str]]:
    """`follower.eager: {rules: [ID], args: {FLAG: true}, ready: PHASE, skips: [PHASE]}`:
    the lines and flags that say graphs are off, the phase a rank has done its last step in
    then, and the phases after it such a launch never enters."""
    if value is None:
        return frozenset(), (), "", frozenset()
    if not isinstance(value, dict) or "ready" not in value or \
            set(value) - {"rules", "args", "ready", "skips"}:
        raise PackError(src, "must be a mapping {rules: [...], args: {FLAG: true}, ready: PHASE, "
                        "skips: [PHASE, ...]}", key="follower.eager")
    named = value.get("rules") or []
    if not isinstance(named, list) or any(x not in {r.id for r in rules} for x in named):
        raise PackError(src, "must be a list of this pack's rule ids",
                        key="follower.eager.rules")
    args = value.get("args") or {}
    if not isinstance(args, dict) or not all(
            isinstance(k, str) and v is True for k, v in args.items()) or not (args or named):
        raise PackError(src, "must map argument names to true (or give rules)",
                        key="follower.eager.args")
    _follower_ready(src, value["ready"], rules, phases, "follower.eager.ready")
    skips = value.get("skips") or []
    after = phases[phases.index(value["ready"]) + 1: phases.index(READY)]
    if not isinstance(skips, list) or any(x not in after for x in skips):
        raise PackError(src, f"must be a list of phases after eager.ready ({', '.join(after)})",
                        key="follower.eager.skips")
    return frozenset(named), tuple(args), value["ready"], frozenset(skips)


def _follower_ready(src: str, ready: Any, rules: list[Rule], phases: tuple[str, ...],
                    key: str) -> None:
    """A follower's ready phase: a startup phase that a `finishes: true` rule ends."""
    if ready not in phases or ready == READY:
        before = ", ".join(p for p in phases if p != READY)
        raise PackError(src, f"must be a startup phase ({before})", key=key)
    if not any(r.finishes and r.phase == ready for r in rules):
        raise PackError(src, f"no rule of phase {ready} has `finishes: true`", key=key)


def _phase_list(src: str, doc: dict[str, Any], key: str, phases: tuple[str, ...],
                inherited: tuple[str, ...]) -> tuple[str, ...]:
    """A pack key that lists some of its phases (`silent:`, `prelaunch:`, `after_bar:`), or
    the base's."""
    value = doc.get(key)
    if value is None:
        return inherited
    if not isinstance(value, list) or any(p not in phases or p == READY for p in value):
        before = ", ".join(p for p in phases if p != READY)
        raise PackError(src, f"must be a list of phases ({before})", key=key)
    return tuple(value)


def _probe(src: str, value: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`probe: {paths: [/health, /v1/models], off_args: [grpc]}`: what a probe of the server
    asks, and the launch args that, true, say the launch serves no HTTP (vLLM's `--grpc`:
    its port speaks gRPC, an HTTP probe of it never answers)."""
    if not isinstance(value, dict) or set(value) - {"paths", "off_args"}:
        raise PackError(src, "must be a mapping {paths: [/health, ...], off_args: [...]}",
                        key="probe")
    paths = value.get("paths")
    if not isinstance(paths, list) or not paths or \
            not all(isinstance(x, str) and x.startswith("/") for x in paths):
        raise PackError(src, "a list of paths starting with /", key="probe.paths")
    off = value.get("off_args") or []
    if not isinstance(off, list) or not all(isinstance(x, str) and x for x in off):
        raise PackError(src, "a list of argument names", key="probe.off_args")
    return tuple(paths), tuple(off)


def _replicas(src: str, value: Any, phases: tuple[str, ...] | list[str]
              ) -> tuple[tuple[str, ...], Any, str]:
    """`replicas: {unless: [enable_dp_attention], stage: REGEX}`: the pack's `DP1` ranks are
    replicas that start apart (vLLM's engine cores, SGLang's `--dp` groups), unless one of
    these launch args is true (SGLang's attention data parallelism: the DP ranks are one
    model, and its rank 0 alone prints some milestones).  `stage` (a group `stage`) finds a
    rank's pipeline stage in its tag: the stages of a replica load their own layers at
    their own paces and wait for each other before the KV cache is sized, so each is a
    group apart too.  `together` (a phase) is the step a replica's stages begin at once,
    where only one stage may say so (vLLM: every worker loads in its constructor right
    after its distributed init, and only a node's first local rank prints `Loading model
    from scratch...`): one stage's entry places the stages still before it there."""
    if not isinstance(value, dict) or set(value) - {"unless", "stage", "together"}:
        raise PackError(src, "must be a mapping {unless: [ARG, ...], stage: REGEX, together: PHASE}",
                        key="replicas")
    unless = value.get("unless") or []
    if not isinstance(unless, list) or not all(isinstance(x, str) and x for x in unless):
        raise PackError(src, "a list of argument names", key="replicas.unless")
    together = value.get("together") or ""
    if together and (together not in phases or value.get("stage") is None):
        raise PackError(src, "a phase of the pack's `phases:`, with a `stage`",
                        key="replicas.together")
    if value.get("stage") is None:
        return tuple(unless), None, ""
    stage = _compile(src, value["stage"], None, "replicas.stage")
    if "stage" not in stage.group_names:
        raise PackError(src, "needs a group `stage`", key="replicas.stage")
    return tuple(unless), stage, together


def _envelope(src: str, value: Any) -> tuple[Any, Any, frozenset[str]]:
    """`envelope: {prefix, lead, anchor}` (rules/origin.py): the engine's own line prefix
    (a group `logger` may name the logger), what may stand between it and an anchored
    rule's match, and the actions whose rules are anchored at the message start."""
    if not isinstance(value, dict) or set(value) - {"prefix", "lead", "anchor"}:
        raise PackError(src, "must be a mapping {prefix, lead, anchor}", key="envelope")
    prefix = _compile(src, value.get("prefix"), None, "envelope.prefix")
    lead = _compile(src, value["lead"], None, "envelope.lead") if "lead" in value else None
    anchor = value.get("anchor") or []
    if not isinstance(anchor, list) or not all(a in ANCHOR_ACTIONS for a in anchor):
        raise PackError(src, f"a list of actions among {', '.join(ANCHOR_ACTIONS)}",
                        key="envelope.anchor")
    return prefix, lead, frozenset(anchor)


def _user_content(src: str, value: Any) -> tuple[Any, ...]:
    """`user_content:` the messages (a pattern, matched at the message start) or loggers
    (`{logger: PATTERN}`, the whole name) whose lines carry what clients sent."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PackError(src, "must be a list of patterns or {logger: PATTERN}", key="user_content")
    out = []
    for i, item in enumerate(value):
        key = f"user_content[{i}]"
        logger = isinstance(item, dict)
        if logger and set(item) != {"logger"}:
            raise PackError(src, "a pattern or {logger: PATTERN}", key=key)
        pattern = item["logger"] if logger else item
        rx = _compile(src, pattern, None, key)
        if logger:                 # the whole logger name
            rx = _lazy(f"(?:{pattern})\\Z")
        lits = pattern_literals(pattern)
        out.append(UserContent(rx, logger, tuple(sorted(lits.strings))
                               if lits and not lits.ignore_case else None))
    return tuple(out)


_REASON_NAME = regex.compile(r"^[a-z][a-z0-9_]{0,63}$")


def _reasons(src: str, value: Any, base: RulePack | None) -> tuple[str, ...]:
    """`reasons:` names crash reasons of the pack's own, added to the built-in ones (and to
    those of the pack it extends)."""
    out = list(base.reasons) if base else []
    if value is None:
        return tuple(out)
    if not isinstance(value, list):
        raise PackError(src, "must be a list of reason names", key="reasons")
    for i, r in enumerate(value):
        if not isinstance(r, str) or not _REASON_NAME.match(r):
            raise PackError(src, f"{r!r} is not a reason name (lower_case_with_underscores)",
                            key=f"reasons[{i}]")
        if r not in out and r not in CRASH_REASONS:
            out.append(r)
    return tuple(out)


def frame_pattern(frame: str) -> str:
    """A `frame:` rule's pattern: a traceback frame line whose file path or function
    matches `frame` (the frames name the cause when the exception line does not)."""
    return rf'File "(?=[^\n]{{0,600}}?(?:{frame}))[^"\n]{{0,500}}", line \d+'



def _no_unknown(src: str, d: dict[str, Any], allowed: Iterable[str], rule: str | None,
                what: str) -> None:
    for k in d:
        if k not in allowed:
            raise PackError(src, f"unknown key in {what} (allowed: {', '.join(allowed)})",
                            rule=rule, key=str(k))


def _phases(src: str, doc: dict[str, Any], base: RulePack | None) -> tuple[str, ...]:
    if "phases" not in doc:
        if base is None:
            raise PackError(src, "missing (the pack's phases, in order)", key="phases")
        return base.phases
    ph = doc["phases"]
    if not isinstance(ph, list) or not ph or not all(isinstance(p, str) and p for p in ph):
        raise PackError(src, "must be a non-empty list of phase names", key="phases")
    for p in ph:
        if p in TERMINAL or p == WAITING:
            raise PackError(src, f"'{p}' is implicit; list only the startup phases and "
                            "'ready'", key="phases")
    if len(set(ph)) != len(ph):
        raise PackError(src, "a phase is listed twice", key="phases")
    return tuple(ph)


class LazyRegex:
    """A pack's pattern that is not a rule's (detect, timestamps, prefixes, ignore, tags,
    envelope ...), validated when the pack loads and compiled when first used.

    `--rules auto` loads every shipped pack to choose one, and a pack's patterns took ~25 ms
    to compile at each start, most of them for packs the log was not written by (a tenth of
    the fixed cost of a replay).  Validating is free for a pattern the pattern cache has seen
    compile (patterns.py), and `group_names` and `flags` come from there too.  On first use the compiled
    pattern's methods are bound on the instance, so later calls cost what they cost on a
    compiled pattern (no `__getattr__` per call).  Equal when the patterns are."""

    _BOUND = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split",
              "scanner", "groupindex", "groups")

    def __init__(self, pattern: str, group_names: tuple[str, ...], flags: int) -> None:
        self.pattern = pattern
        self.group_names = group_names
        self.flags = flags     # as the compiled pattern's (the clock and the joints read it)

    def __getattr__(self, name: str) -> Any:
        if name not in LazyRegex._BOUND:
            raise AttributeError(name)
        rx = _regex(self.pattern)
        for attr in LazyRegex._BOUND:
            self.__dict__[attr] = getattr(rx, attr)
        return self.__dict__[name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyRegex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"LazyRegex({self.pattern!r})"


@functools.lru_cache(maxsize=1024)
def _lazy(pattern: str) -> LazyRegex:
    """The one LazyRegex of `pattern` (as `_regex` keeps one compiled pattern: a pack that
    extends another shares its patterns); raises `regex.error` for a bad one."""
    return LazyRegex(pattern, *_PATTERNS.compiled(pattern, _regex))


def _compile(src: str, pattern: Any, rule: str | None, key: str) -> LazyRegex:
    _groups(src, pattern, rule, key)       # a PackError naming the key for a bad pattern
    return _lazy(pattern)


def _groups(src: str, pattern: Any, rule: str | None, key: str) -> tuple[str, ...]:
    """The named groups of a pattern that must compile: `_compile`'s checks and errors,
    without compiling a pattern that compiled before (patterns.py)."""
    if not isinstance(pattern, str) or not pattern:
        raise PackError(src, "missing or not a string", rule=rule, key=key)
    try:
        return _PATTERNS.groups(pattern, _regex)
    except regex.error as e:
        raise PackError(src, f"invalid regex: {e}", rule=rule, key=key) from None


def pattern_literals(pattern: str) -> Literals | None:
    """`literals.required_literals(pattern)`, kept between runs (patterns.py)."""
    return _PATTERNS.literals(pattern)


def _prefix_regex(patterns: tuple[str, ...]) -> Any:
    """The pack's `prefixes` as one alternation, matched at the start of a line (one regex
    call per line and wrapper; `proc` may name a group in several of them)."""
    if not patterns:
        return None
    return _lazy("(?:" + "|".join(f"(?:{p})" for p in patterns) + ")")


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    return regex.compile(pattern, REGEX_FLAGS)


_PATTERNS = PatternCache(REGEX_FLAGS)


def _when(src: str, rid: str, value: Any, phases: tuple[str, ...]) -> frozenset[str] | None:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise PackError(src, "must be a phase, a list of phases, 'startup' or 'serving'",
                        rule=rid, key="when")
    out: set[str] = set()
    for n in names:
        if n == "startup":
            out |= {WAITING, *phases[: phases.index(READY)]} if READY in phases else {WAITING, *phases}
        elif n == "serving":
            out.add(READY)
        elif n in phases or n == WAITING or n in TERMINAL:
            out.add(n)
        else:
            raise PackError(src, f"unknown phase '{n}' (phases: {', '.join(phases)})",
                            rule=rid, key="when")
    return frozenset(out)


def _rule(src: str, index: int, d: Any, phases: tuple[str, ...],
          reasons: tuple[str, ...] = CRASH_REASONS) -> Rule:
    if not isinstance(d, dict):
        raise PackError(src, f"rule #{index + 1} is not a mapping", key="rules")
    rid = d.get("id")
    if not isinstance(rid, str) or not rid:
        raise PackError(src, f"rule #{index + 1} has no 'id'", key="id")
    _no_unknown(src, d, RULE_KEYS, rid, "rule")
    if d.get("frame") is not None:
        d = _frame_rule(src, rid, d)
    groups = set(_groups(src, d.get("pattern"), rid, "pattern"))
    actions = [k for k in ACTION_KEYS if d.get(k) not in (None, False)]
    if not actions:
        raise PackError(src, f"no action (one of: {', '.join(ACTION_KEYS)})", rule=rid)
    phase = d.get("phase")
    _check_values(src, rid, d, phases, reasons)
    scale = _check_groups(src, rid, d, groups)
    _check_applies(src, rid, d, phases)
    _check_meaning(src, rid, d, groups)

    literals = _prefilter(src, rid, d.get("prefilter"), d["pattern"])
    samples = _samples(src, rid, d.get("samples"))
    return Rule(
        id=rid, pattern=d["pattern"], source=src, phase=phase,
        progress=d.get("progress"), crash=d.get("crash"), hint=d.get("hint"),
        restart=bool(d.get("restart")), stats=d.get("stats"), stop=bool(d.get("stop")),
        chain=bool(d.get("chain")), when=_when(src, rid, d.get("when"), phases),
        unless_seen=_unless_seen(src, rid, d.get("unless_seen")),
        marker=bool(d.get("marker")), tentative=bool(d.get("tentative")),
        reenter=bool(d.get("reenter")), reenter_own_rank=d.get("reenter") == "own_rank",
        provisional=bool(d.get("provisional")),
        frame=d.get("frame") is not None, scale={k: float(v) for k, v in scale.items()},
        args=bool(d.get("args")), args_specs=_args_specs(src, rid, d.get("args")),
        endpoint=bool(d.get("endpoint")),
        finishes=bool(d.get("finishes")), begins=d.get("begins") is True,
        begins_own_rank=d.get("begins") == "own_rank",
        beside=d.get("beside"), closes_as=d.get("closes_as"), during=d.get("during"),
        ends_rank=bool(d.get("ends_rank")),
        supervisor=bool(d.get("supervisor")), primary=bool(d.get("primary")),
        launch_only=bool(d.get("launch_only")), ready_hint=bool(d.get("ready_hint")),
        at_launch=bool(d.get("at_launch")), yields=bool(d.get("yields")),
        ready_by_endpoint=bool(d.get("ready_by_endpoint")),
        withdraws=bool(d.get("withdraws")), degrades=d.get("degrades"),
        meaning=str(d.get("meaning") or ""), label=str(d.get("label") or ""),
        literals=literals, samples=samples, description=str(d.get("description") or ""),
        typical=_typical(src, rid, d),
    )


def _typical(src: str, rid: str, d: dict[str, Any]) -> float | None:
    """`typical: 15m`: a duration, on a `begins: true` rule (the startup remembers that it
    fired: machine/state.py `begun`)."""
    v = d.get("typical")
    if v is None:
        return None
    if d.get("begins") is not True:
        raise PackError(src, "only applies to `begins: true` rules", rule=rid, key="typical")
    try:
        return parse_duration(v)
    except (ValueError, TypeError):
        raise PackError(src, f"not a duration: {v!r} (e.g. 15m)", rule=rid, key="typical") from None


ARGS_KEYS = ("start", "form", "aliases", "positional", "negatable", "source", "complete")


ARGS_EXAMPLE = "args: {form: repr, start: 'server_args=(?=ServerArgs\\(|\\{)'}"

def _frame_rule(src: str, rid: str, d: dict[str, Any]) -> dict[str, Any]:
    """A `frame:` rule (a traceback's frame, file path or function names) as the rule with
    the pattern that frame makes."""
    if d.get("pattern") is not None:
        raise PackError(src, "a rule has a pattern or a frame, not both", rule=rid,
                        key="frame")
    if not isinstance(d["frame"], str) or not d["frame"]:
        raise PackError(src, "must be a pattern (file path or function names)", rule=rid,
                        key="frame")
    _groups(src, d["frame"], rid, "frame")
    if not d.get("hint"):
        raise PackError(src, "a frame rule classifies a crash: give it `hint: REASON`",
                        rule=rid, key="frame")
    return {**d, "pattern": frame_pattern(d["frame"])}


def _check_values(src: str, rid: str, d: dict[str, Any], phases: tuple[str, ...],
                  reasons: tuple[str, ...]) -> None:
    """A rule's phase, reasons, flags and names are ones the pack knows."""
    phase = d.get("phase")
    if phase is not None:
        if phase in TERMINAL:
            raise PackError(src, f"'{phase}' is entered with "
                            f"{'crash: REASON' if phase == CRASHED else 'stop: true'}",
                            rule=rid, key="phase")
        if phase not in phases:
            raise PackError(src, f"unknown phase '{phase}' (phases: {', '.join(phases)})",
                            rule=rid, key="phase")
    for key in ("crash", "hint"):
        v = d.get(key)
        if v is not None and v not in reasons:
            raise PackError(src, f"unknown crash reason '{v}' (known: {', '.join(reasons)}; a "
                            "pack may declare its own under `reasons:`)", rule=rid, key=key)
    if d.get("crash") and d.get("hint"):
        raise PackError(src, "a rule is either a crash or a hint, not both", rule=rid, key="hint")
    if d.get("yields") and not d.get("hint"):
        raise PackError(src, "only a hint gives way to a later hint", rule=rid, key="yields")
    if d.get("ready_hint") and not d.get("crash"):
        raise PackError(src, "only a crash rule can be a hint after ready", rule=rid,
                        key="ready_hint")
    for key in ("restart", "stop", "chain", "marker", "tentative", "reenter", "provisional",
                "endpoint", "finishes", "begins", "supervisor", "primary", "launch_only",
                "at_launch", "ready_hint", "withdraws", "ends_rank", "ready_by_endpoint", "yields"):
        if key in d and not isinstance(d[key], bool) and \
                not (key in ("reenter", "begins") and d[key] == "own_rank"):
            raise PackError(src, "must be true or false" + (" or own_rank" if key in (
                "reenter", "begins") else ""), rule=rid, key=key)
    for key in ("progress", "stats", "degrades", "label"):
        if key in d and (not isinstance(d[key], str) or not d[key]):
            raise PackError(src, "must be a name", rule=rid, key=key)
    if d.get("label") and not phase:
        raise PackError(src, "names a span of the phase it enters: give it `phase:`",
                        rule=rid, key="label")


def _check_meaning(src: str, rid: str, d: dict[str, Any], groups: set[str]) -> None:
    """`meaning:` is a crash rule's sentence, its `{name}`s the pattern's named groups: a
    sentence that names what its line found (Mooncake's missing RDMA device) where the
    reason's own (rules/reasons.py) would say something else of the same reason."""
    v = d.get("meaning")
    if v is None:
        return
    if not isinstance(v, str) or not v.strip():
        raise PackError(src, "must be a sentence", rule=rid, key="meaning")
    if not d.get("crash"):
        raise PackError(src, "only a crash rule says what its crash means", rule=rid,
                        key="meaning")
    unknown = sorted(set(MEANING_FIELD.findall(v)) - groups)
    if unknown:
        raise PackError(src, f"names {', '.join(unknown)}, not named groups of the pattern",
                        rule=rid, key="meaning")


def _check_groups(src: str, rid: str, d: dict[str, Any], groups: set[str]) -> dict[str, Any]:
    """What a rule's action reads from its pattern's named groups is there; its `scale`."""
    if d.get("progress") and not {"current", "total"} <= groups:
        raise PackError(src, "a progress rule needs named groups 'current' and 'total' in its "
                        "pattern", rule=rid, key="progress")
    if d.get("stats") and not groups:
        raise PackError(src, "a stats rule needs named groups (the values it records)",
                        rule=rid, key="stats")
    scale = d.get("scale") or {}
    if not isinstance(scale, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) for k, v in scale.items()):
        raise PackError(src, "must map a field name to a number", rule=rid, key="scale")
    for k in scale:
        if k not in groups:
            raise PackError(src, f"'{k}' is not a named group of the pattern", rule=rid, key="scale")
    if d.get("endpoint") and "url" not in groups:
        raise PackError(src, "an endpoint rule needs a named group 'url' (http://host:port)",
                        rule=rid, key="endpoint")
    return scale


def _check_applies(src: str, rid: str, d: dict[str, Any], phases: tuple[str, ...]) -> None:
    """The keys that qualify another key come with it."""
    phase = d.get("phase")
    for key in ("finishes", "begins", "beside", "closes_as", "ends_rank"):
        if d.get(key) and not phase:
            raise PackError(src, "only applies to rules with a phase", rule=rid, key=key)
    if d.get("beside") is not None and d["beside"] not in ("open", "close"):
        raise PackError(src, "must be open or close", rule=rid, key="beside")
    for key in ("closes_as", "during"):
        if d.get(key) is not None and d[key] not in phases:
            raise PackError(src, f"unknown phase '{d[key]}' (phases: {', '.join(phases)})",
                            rule=rid, key=key)
    if d.get("during") is not None and d.get("frame") is None:
        raise PackError(src, "only applies to frame rules", rule=rid, key="during")
    if d.get("primary") and not d.get("progress"):
        raise PackError(src, "only applies to progress rules", rule=rid, key="primary")
    if d.get("supervisor") and not d.get("restart"):
        raise PackError(src, "only applies to restart rules", rule=rid, key="supervisor")
    if d.get("provisional") and not phase:
        raise PackError(src, "only applies to rules with a phase", rule=rid, key="provisional")
    if (d.get("marker") or d.get("tentative")) and not d.get("crash"):
        raise PackError(src, "only applies to crash rules", rule=rid,
                        key="marker" if d.get("marker") else "tentative")


def _args_true(src: str, rules: list[Rule]) -> list[Rule]:
    """`args: true`: the forms of the pack's other args rules (its own and those of the pack it
    extends, in rule order: `extends: sglang` reads SGLang's dump and command line).  A pack
    with none names the data form instead: where the arguments start is not known in code."""
    forms = tuple({id(s): s for r in rules for s in r.args_specs}.values())
    out = []
    for r in rules:
        if r.args and not r.args_specs:
            if not forms:
                raise PackError(src, "true needs an args rule with its forms in this pack or the "
                                "one it extends (extends: sglang / vllm / trtllm); or say where "
                                f"the arguments start and their form, e.g. {ARGS_EXAMPLE}",
                                rule=r.id, key="args")
            r = replace(r, args_specs=forms)
        out.append(r)
    return out


def _args_specs(src: str, rid: str, value: Any) -> tuple[ArgsSpec, ...]:
    """`args: true` (the forms of the pack's other args rules: `_args_true`), or where the line
    holds the arguments and in which form, as data: `{start: REGEX, form: repr | command,
    aliases: {flag: name}, positional: NAME, negatable: BOOL, source: LABEL}` or a list of
    them, tried in order (see `ArgsSpec`)."""
    if value is None or isinstance(value, bool):
        return ()
    items = value if isinstance(value, list) else [value]
    what = "must be true, or a mapping {start: REGEX, form: repr|command, ...}, or a list of them"
    if not items:
        raise PackError(src, what, rule=rid, key="args")
    out = []
    for i, item in enumerate(items):
        key = f"args[{i}]" if isinstance(value, list) else "args"
        if not isinstance(item, dict):
            raise PackError(src, what, rule=rid, key=key)
        _no_unknown(src, item, ARGS_KEYS, rid, key)
        form = item.get("form", "repr")
        if form not in ARGS_FORMS:
            raise PackError(src, f"must be one of {', '.join(ARGS_FORMS)}", rule=rid,
                            key=f"{key}.form")
        start = _compile(src, item.get("start"), rid, f"{key}.start")
        aliases = item.get("aliases") or {}
        if not isinstance(aliases, dict) or not all(
                isinstance(k, str) and k and isinstance(v, str) and v for k, v in aliases.items()):
            raise PackError(src, "must map a flag to a name", rule=rid, key=f"{key}.aliases")
        positional, negatable = item.get("positional"), item.get("negatable", False)
        complete = item.get("complete", False)
        if positional is not None and (not isinstance(positional, str) or not positional):
            raise PackError(src, "must be a name", rule=rid, key=f"{key}.positional")
        for flag, v in (("negatable", negatable), ("complete", complete)):
            if not isinstance(v, bool):
                raise PackError(src, "must be true or false", rule=rid, key=f"{key}.{flag}")
        if complete and form != "repr":
            raise PackError(src, "is for form: repr (a dump of every field)", rule=rid,
                            key=f"{key}.complete")
        if form != "command" and (aliases or positional or negatable):
            raise PackError(src, "aliases, positional and negatable are for form: command",
                            rule=rid, key=key)
        label = item.get("source", "")
        if not isinstance(label, str):
            raise PackError(src, "must be a name", rule=rid, key=f"{key}.source")
        out.append(ArgsSpec(start, form, dict(aliases), positional, negatable, label, complete))
    return tuple(out)


def _prefilter(src: str, rid: str, value: Any, pattern: str) -> Literals | None:
    if value is None:
        return pattern_literals(pattern)
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(
            isinstance(s, str) and s and "\n" not in s and "\r" not in s for s in items):
        raise PackError(src, "must be a literal string or a list of them", rule=rid,
                        key="prefilter")
    return Literals(frozenset(items))


def _samples(src: str, rid: str, value: Any) -> tuple[Sample, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PackError(src, "must be a list of {line, fields}", rule=rid, key="samples")
    out = []
    for i, s in enumerate(value):
        if isinstance(s, str):
            out.append(Sample(s))
            continue
        if not isinstance(s, dict) or not isinstance(s.get("line"), str):
            raise PackError(src, f"sample #{i + 1} needs a 'line' string", rule=rid, key="samples")
        for k in s:
            if k not in ("line", "fields", "matches"):
                raise PackError(src, f"sample #{i + 1}: unknown key '{k}'", rule=rid,
                                key="samples")
        fields = s.get("fields")
        if fields is not None and not isinstance(fields, dict):
            raise PackError(src, f"sample #{i + 1}: fields must be a mapping", rule=rid,
                            key="samples")
        out.append(Sample(s["line"], {str(k): str(v) for k, v in (fields or {}).items()} or None,
                          bool(s.get("matches", True))))
    return tuple(out)


def _merge_rules(src: str, base: RulePack | None, own: list[Rule], raw: list[Any],
                 disable: Any) -> list[Rule]:
    seen: set[str] = set()
    for r in own:
        if r.id in seen:
            raise PackError(src, "duplicate rule id", rule=r.id, key="id")
        seen.add(r.id)
    if base is None:
        if disable:
            raise PackError(src, "only a pack that extends another can disable rules",
                            key="disable")
        return own
    rules = list(base.rules)
    ids = [r.id for r in rules]
    if disable is not None:
        if not isinstance(disable, list):
            raise PackError(src, "must be a list of rule ids", key="disable")
        for rid in disable:
            if rid not in ids:
                raise PackError(src, f"no rule '{rid}' in {base.name}", key="disable")
        rules = [r for r in rules if r.id not in disable]
    front: list[Rule] = []
    for r, d in zip(own, raw):
        ids = [x.id for x in rules]
        if r.id in ids:  # override in place
            rules[ids.index(r.id)] = r
            continue
        anchor_key = "before" if d.get("before") else "after" if d.get("after") else None
        if anchor_key is None:
            front.append(r)  # a user's new rules take precedence over the shipped ones
            continue
        anchor = d[anchor_key]
        if anchor not in ids:
            raise PackError(src, f"no rule '{anchor}' to place this one {anchor_key}",
                            rule=r.id, key=anchor_key)
        pos = ids.index(anchor) + (1 if anchor_key == "after" else 0)
        rules.insert(pos, r)
    return front + rules


def _detect(src: str, value: Any) -> tuple[DetectPattern, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PackError(src, "must be a list of patterns", key="detect")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(DetectPattern(_compile(src, item, None, f"detect[{i}]"), 1.0,
                                     pattern_literals(item)))
        elif isinstance(item, dict) and "pattern" in item:
            w = item.get("weight", 1.0)
            if not isinstance(w, (int, float)) or w <= 0:
                raise PackError(src, "weight must be a positive number", key=f"detect[{i}]")
            out.append(DetectPattern(_compile(src, item["pattern"], None, f"detect[{i}]"), float(w),
                                     pattern_literals(item["pattern"])))
        else:
            raise PackError(src, "a pattern or {pattern, weight}", key=f"detect[{i}]")
    return tuple(out)


def _timestamps(src: str, value: Any) -> tuple[TimestampFormat, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PackError(src, "must be a list of patterns with named groups Y m d H M S f",
                        key="timestamps")
    out = []
    for i, item in enumerate(value):
        rx = _compile(src, item, None, f"timestamps[{i}]")
        groups = set(rx.group_names)
        if not {"H", "M", "S"} <= groups or not groups <= set(TIMESTAMP_GROUPS):
            raise PackError(src, "needs named groups H, M, S (and optionally Y, m, d, f)",
                            key=f"timestamps[{i}]")
        out.append(TimestampFormat(rx, item))
    return tuple(out)


def _phase_map(src: str, value: Any, phases: tuple[str, ...], key: str,
               reasons: tuple[str, ...] | None = None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PackError(src, "must map a phase to a value", key=key)
    out: dict[str, Any] = {}
    for p, v in value.items():
        if p not in phases and p != WAITING:
            raise PackError(src, f"unknown phase '{p}'", key=key)
        if reasons is not None:
            if v not in reasons:
                raise PackError(src, f"unknown crash reason '{v}'", key=f"{key}.{p}")
            out[p] = v
        else:
            secs = parse_duration(v) if isinstance(v, str) else v
            if not isinstance(secs, (int, float)) or secs < 0:
                raise PackError(src, "must be seconds or a duration like 5m", key=f"{key}.{p}")
            out[p] = float(secs)
    return out
