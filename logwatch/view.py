"""`TargetView`: one snapshot of one target, built in one place, read by every sink.

The Prometheus collector, `/api/status`, the status page and the alert policy all read this
snapshot and nothing else: no sink reaches into a runner's pipeline, follower or history,
so what the page says and what `/metrics` says can never disagree, and a sink cannot
change the state it reports.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterable, Mapping, Protocol

from .counters import Counters
from .machine import (
    RANK_LAG_AFTER, Crash, State, crash_elapsed, current_stats, rank_clock, rank_lag,
)
from .pipeline import LogPipeline
from .machine.startup import launch_of
from .rules.advice import advice_lines
from .rules.args import launch_prefixes
from .rules.pack import CRASHED, READY, TERMINAL, WAITING, load_pack
from .eta import startup_eta
from .verdict import crash_sentence

@functools.lru_cache(maxsize=1)
def unknown_phases() -> tuple[str, ...]:
    """The phases of a target whose pack is not loaded yet (`auto` before detection, a source
    not read yet): rules/base.yaml's, the vocabulary every shipped pack extends (loading it
    costs what loading any shipped pack does already; all of them, ~0.2 s cold, would not)."""
    return load_pack("base").phases


@dataclass(frozen=True)
class ShardView:
    loaded: int
    total: int
    rate: float | None


@dataclass(frozen=True)
class SpanView:
    """One span of the current startup (machine/state.py `Span`), as the sinks show it."""

    phase: str
    stamp: str | None          # the server's own stamp of the line that opened it
    start: float | None        # seconds after the startup's first line
    seconds: float | None      # how long it lasted (so far, for the open one)
    beside: bool = False       # it ran beside the main line (not the current phase then)
    open: bool = False         # still going on (the startup has not ended)
    label: str = ""            # what a second span of its phase was (`Span.label`)

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "stamp": self.stamp,
                "start": None if self.start is None else round(self.start, 3),
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "beside": self.beside, "open": self.open,
                **({"label": self.label} if self.label else {})}


def beside_now(view: "TargetView") -> list[SpanView]:
    """The spans running beside the main line right now (weights loading while graphs
    capture): `watch` and the page show them with the current phase."""
    return [sp for sp in view.timeline if sp.beside and sp.open]


def startup_seconds(view: "TargetView") -> float | None:
    """The startup's wall time so far: launch to ready once ready, else what its spans cover
    (spans beside each other once), else the sum of the phases (a view without spans)."""
    if view.ready_in is not None:
        return view.ready_in
    if view.total_seconds is not None:
        return view.total_seconds
    d = [v for k, v in view.durations.items() if k != READY]
    return sum(d) if d else None


def span_views(st: State, now: float | None = None) -> list[SpanView]:
    """The spans of `st` (server clock when every span has one): one row per span.  With
    `now`, the open main span of a startup still going on counts until `now` by our clock
    when that is longer (a silent phase keeps counting, as `live_durations`)."""
    spans = st.spans
    if not spans:
        return []
    use_log = all(sp.log_time is not None for sp in spans)
    until = (st.last_activity, st.last_log_time)
    t0 = spans[0].log_time if use_log else spans[0].at
    out = []
    current = st.phase_entered
    for sp in spans:
        a = sp.log_time if use_log else sp.at
        d = sp.seconds(use_log, until) if sp.phase not in (READY, *TERMINAL) else None
        if now is not None and sp is current and sp.open and \
                st.phase not in (READY, *TERMINAL, WAITING):
            d = max(d or 0.0, now - sp.at)
        out.append(SpanView(sp.phase, sp.log_stamp, None if a is None or t0 is None else a - t0,
                            d, sp.beside, sp.open, sp.label))
    return out


FRESH_WINDOW = 60.0   # a verdict this recent when logwatch attached is still news


@dataclass(frozen=True)
class SeenAtAttach:
    """The latest startup of a log had already ended when logwatch first read it: history,
    not news (no alert, and `watch` waits for the next startup).  `ago`: seconds between
    its verdict and the attach (the file's idle time plus the log's own clock from the
    verdict line to the last line: no time zone needed); `idle_since`: the file's mtime."""

    phase: str                     # ready | crashed | stopped
    startup_id: str | None
    ago: float
    idle_since: float | None
    reason: str | None = None      # the crash's, when crashed
    writer: int | None = None      # a fresh verdict's: the relaunch writing the log (pid)

    def to_json(self) -> dict[str, Any]:
        doc = {"phase": self.phase, "startup_id": self.startup_id, "ago": round(self.ago, 1),
               "idle_since": self.idle_since, "reason": self.reason}
        return doc if self.writer is None else {**doc, "writer": self.writer}


def seen_at_attach(st: State, mtime: float | None, now: float,
                   fresh: float = FRESH_WINDOW) -> SeenAtAttach | None:
    """What the bytes before the attach offset told: an ended startup older than `fresh`
    seconds (SeenAtAttach), or None (nothing ended there, or it just did: news)."""
    if st.phase not in (READY, *TERMINAL) or not st.history:
        return None
    verdict = st.history[-1]
    gap = 0.0
    if verdict.log_time is not None and st.last_log_time is not None:
        gap = max(0.0, st.last_log_time - verdict.log_time)
    idle = max(0.0, now - mtime) if mtime is not None else 0.0
    if gap + idle < fresh:
        return None
    return SeenAtAttach(st.phase, st.startup_id, gap + idle, mtime,
                        st.crash.reason if st.crash is not None else None)


def silent_at_attach(st: State, mtime: float | None, now: float, budget: float,
                     startup_phases: tuple[str, ...] | list[str]) -> float | None:
    """A startup read at attach whose log has been silent longer than its phase's stall
    budget: when it went silent (the file's last write, the node's clock), else None.
    A server killed mid-load an hour ago writes nothing more: without this the catch-up
    would stamp its lines with the read time and show an ETA for a dead process.  The
    log's own clock adds the gap between its last activity and its last line (none when
    every line is activity); no time zone is needed.  Never less than FRESH_WINDOW: a log
    quiet for seconds is not a dead server."""
    if mtime is None or st.phase not in startup_phases:
        return None
    if now - mtime < max(budget, FRESH_WINDOW):
        return None          # a few seconds of silence (a tiny --stall-after) is a stall
    return mtime


def silent_text(since: float, now: float) -> str:
    """`silent since 17:23 (1h05m00s): server probably dead` (the operator's words)."""
    from .units import fmt_clock, fmt_duration
    at = fmt_clock(since, now, seconds=False)
    return f"silent since {at} ({fmt_duration(max(now - since, 0.0))}): server probably dead"


@dataclass(frozen=True)
class TargetView:
    """What is known about a target at `now` (a copy: safe to keep, never updated)."""

    name: str
    engine: str                   # the pack's name, "auto" while not yet detected
    source: str                   # the TARGET string (never secrets: see config)
    kind: str                     # file | ssh | command | stdin
    labels: dict[str, str]
    now: float
    phase: str = WAITING
    phases: tuple[str, ...] = ()   # every phase of the pack, waiting and terminal included
    phase_colours: dict[str, str] = field(default_factory=dict)   # the pack's `colours:`
    epoch: int = 0
    startup_id: str | None = None
    phase_entered_at: float | None = None
    startup_started_at: float | None = None
    ready_in: float | None = None  # launch-to-ready seconds of this startup once ready
    follower: bool = False         # a follower node's launch: ready without a server of its own
    degraded: str | None = None    # a part that failed while the server went on (State.degraded)
    phases_seen: list[str] = field(default_factory=list)
    timeline: list[SpanView] = field(default_factory=list)   # the startup's spans, in order
    total_seconds: float | None = None   # wall time the spans cover (overlap counted once)
    durations: dict[str, float] = field(default_factory=dict)
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    shards: ShardView | None = None   # the main bar: the pack's `primary: true` progress
    primary_progress: str | None = None   # its kind (`shards` in the shipped packs)
    eta_seconds: float = math.nan
    eta_basis: int = 0             # earlier ready startups the ETA comes from (0: rough)
    ready_line: str | None = None
    crash: dict[str, Any] | None = None
    crash_elapsed: float | None = None   # launch -> crash (the server's clock when it has one):
                                         # the "after" of the one crash sentence, everywhere
    stalled: bool = False
    stats: dict[str, float] = field(default_factory=dict)
    rules: tuple[str, ...] = ()    # rule ids of the pack (every match series exists)
    counters: Counters = field(default_factory=Counters)
    history: list[dict[str, Any]] = field(default_factory=list)
    previous_startup: dict[str, Any] | None = None
    typical_total: float | None = None   # median launch-to-ready of past startups
    launch: dict[str, Any] = field(default_factory=dict)   # `launch_facts`: a `slow` alert's
    source_up: bool = False
    source_message: str = ""
    source_fatal: bool = False     # the source gave up (its message says why, once)
    source_error: bool = False     # down because something failed (fatal, or retrying)
    source_notice: str = ""        # the last part of the log the source knows it lost
    source_state: str = "waiting"  # up / waiting (not there yet) / error / fatal
    source_down_since: float | None = None   # the outage began (error or fatal, not waiting)
    offset: int | None = None
    line_number: int | None = None
    last_line: str = ""
    last_line_at: float | None = None
    started_at: float = 0.0        # when this target started being watched
    checkpoint_age: float = 0.0    # seconds since the checkpoint was written (0: never)
    catching_up: bool = False      # reading what the log held when logwatch attached
    seen_at_attach: SeenAtAttach | None = None   # its latest startup had ended before that
    gpu: dict[str, Any] | None = None  # the host's GPU telemetry (None: gpu off for it)
    last_startup_seconds: float | None = None   # launch to ready of the last ready startup
    vs_previous: str = ""          # at ready: this launch against the one before (the ledger)
    advice: tuple[str, ...] = ()   # the pack's advice on this launch's flags (the ledger's)
    probe: dict[str, Any] | None = None   # the server's endpoint, probed (None: no probe)
    ranks: dict[str, dict[str, Any]] = field(default_factory=dict)  # how far each rank got
    rank_tags: tuple[str, ...] = ()   # the pack's `ranks:` patterns (the display folds by them)
    rank_lag: str = ""             # "TP5 still in cuda_graph 4m after the other 7 ranks ..."
    stall_after: float | None = None   # the current startup phase's stall budget (seconds)
    silent_since: float | None = None   # stalled since attach: the log's last write (dead)

    @property
    def probe_verdict(self) -> ProbeSummary | None:
        """What the probe says beside the log (telemetry/probe.py `probe_verdict`)."""
        return probe_verdict(self.probe, self.phase, self.startup_id, self.now)

    @property
    def serving_degraded(self) -> str | None:
        """`degraded` while the server serves without that part (ready); None once its
        startup crashed or stopped: the crash is what the target is now, the degrade that
        startup's history (its ledger record keeps it).  Before, /api/status and the page
        said `degraded` on a crashed target while `logwatch_degraded` said 0."""
        return self.degraded if self.phase == READY else None

    @property
    def historic(self) -> bool:
        """The current startup is the one that had ended before logwatch attached."""
        return self.seen_at_attach is not None and \
            self.seen_at_attach.startup_id == self.startup_id

    @property
    def status(self) -> str:
        """The one word a fleet count puts the target under: `error` (its source failed),
        `crashed`, `stalled` (counted so, not in the phase it stalled in), `unreachable` (the
        log says ready, the probe of its endpoint never succeeded, or has failed for its
        `fail_after`: what the `unreachable` alert says), else the phase."""
        if self.source_error:
            return "error"
        if self.phase == CRASHED:
            return CRASHED
        if self.silent_since is not None:
            return "silent"           # silent past its budget when read: probably dead
        if self.stalled:
            return "stalled"
        if self.phase == READY:
            pv = self.probe_verdict
            if pv is not None and pv.ready_not_answering or \
                    probe_down_for(self.probe, self.phase, self.phase_entered_at,
                                   self.now) is not None:
                return "unreachable"      # ready in the log, but its endpoint does not answer
        return self.phase

    def to_json(self) -> dict[str, Any]:
        """The target as `/api/status` shows it."""
        shards = self.shards
        eta = self.eta_seconds
        return {
            "name": self.name,
            "engine": self.engine,
            "source": self.source,
            "labels": dict(self.labels),
            "phase": self.phase,
            "epoch": self.epoch,
            "startup_id": self.startup_id,
            "startups": self.counters.startups,
            "phase_entered_at": self.phase_entered_at,
            "in_phase_seconds": round(self.now - self.phase_entered_at, 3)
            if self.phase_entered_at is not None else None,
            "phases_seen": list(self.phases_seen),
            "durations": dict(self.durations),
            "spans": [sp.to_json() for sp in self.timeline],
            "total_seconds": self.total_seconds,
            "progress": {k: dict(v) for k, v in self.progress.items()},
            "phase_colours": dict(self.phase_colours),
            "shards": {"loaded": shards.loaded, "total": shards.total} if shards else None,
            "eta_seconds": None if eta != eta else round(eta, 1),
            "eta_basis": self.eta_basis,
            "ready_in_seconds": None if self.ready_in is None else round(self.ready_in, 3),
            "ready_line": self.ready_line,
            "follower": self.follower,
            "degraded": self.serving_degraded,
            "crash": self.crash,
            "stalled": self.stalled,
            "silent_since": self.silent_since,
            "silent": silent_text(self.silent_since, self.now)
            if self.silent_since is not None else None,
            "status": self.status,
            "stats": dict(self.stats),
            "history": list(self.history),
            "previous_startup": self.previous_startup,
            "source_state": self._source_json(),
            "last_line": self.last_line,
            "last_line_at": self.last_line_at,
            "lines": self.counters.lines,
            "catching_up": self.catching_up,
            "seen_at_attach": self.seen_at_attach.to_json()
            if self.seen_at_attach is not None and self.historic else None,
            "gpu": self.gpu,
            "last_startup_seconds": self.last_startup_seconds,
            "vs_previous": self.vs_previous or None,
            "advice": list(self.advice),
            "probe": {**self.probe, "verdict": pv.text,
                      "ready_not_answering": pv.ready_not_answering}
            if self.probe is not None and (pv := self.probe_verdict) is not None else self.probe,
            "ranks": {k: dict(v) for k, v in self.ranks.items()},
            "rank_lag": self.rank_lag or None,
            "stall_after": self.stall_after,
        }

    def _source_json(self) -> dict[str, Any]:
        return {"up": self.source_up, "message": self.source_message,
                "fatal": self.source_fatal, "error": self.source_error,
                "reconnects": self.counters.reconnects,
                "bytes_skipped": self.counters.bytes_skipped,
                "losses": self.counters.source_losses, "notice": self.source_notice,
                "state": self.source_state, "down_since": self.source_down_since,
                "offset": self.offset, "line_number": self.line_number}


def gpu_activity(gpu: dict[str, Any] | None) -> str:
    """What the GPUs say about the silence under way, in words for a stall alert and `watch`
    (silence.py reads the snapshots since the last line: loading / busy: slow, not hung /
    spinning: likely hung / idle: hung before the GPU / a stuck rank named).  "" without
    telemetry, or when no snapshot arrived during the silence."""
    if not gpu or not gpu.get("up"):
        return ""
    silence = gpu.get("silence") or {}
    return str(silence.get("text") or "")


def gpu_working(gpu: dict[str, Any] | None) -> bool:
    """The GPUs work through the silence (loading, busy, one rank alone): slow, not hung."""
    return bool(((gpu or {}).get("silence") or {}).get("working"))




def live_extra(st: State, now: float) -> float:
    """Seconds the current startup phase has run by our clock beyond what the log covers of
    it (its last line): a silent phase (no line, or bars only) keeps counting."""
    entered = st.phase_entered
    if entered is None or st.phase in (READY, *TERMINAL, WAITING):
        return 0.0
    return max(now - entered.at - st.open_seconds(), 0.0)


def live_durations(st: State, now: float) -> dict[str, float]:
    """Seconds per phase (the server's clock), the current startup phase at least as long
    as it has been current by ours, so the panel, the page and /api/status show the same
    growing number as the header (a phase entered again keeps its earlier spans: before,
    its live span replaced them)."""
    out = st.durations()
    extra = live_extra(st, now)
    if extra:
        out[st.phase] = round(out.get(st.phase, 0.0) + extra, 3)
    return out


def live_total(st: State, now: float) -> float:
    """The startup's wall time so far (spans beside each other once), counting on with the
    current phase as `live_durations` does: before, a phase silent for 2 minutes read
    `cuda_graph 2m05s (total 1m03s)`, the total stopped at the last line."""
    return round(st.total() + live_extra(st, now), 3)


class ViewPart(Protocol):
    """What an attachment of a live target (app/attachments/) adds to its view: a frozen
    dataclass whose fields are `TargetView` fields (gpu, probe, history ...).  `build_view`
    copies them in; a part never sets what the pipeline says (phase, crash, ...)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


def build_view(base: TargetView, pipe: LogPipeline | None,
               parts: Iterable[ViewPart | None] = ()) -> TargetView:
    """The one place a `TargetView` is made (the daemon's targets, `watch`, `replay`).

    `base`: what the live loop knows without the pipeline (name, source state, counters);
    `parts`: its attachments' pieces (None: nothing to add).  Pure: building a view changes
    nothing, so however often /metrics, /api/status or an alert reads a target, what it
    shows (the ETA too: a part carries the smoothed one) is the same.  Without an
    `eta_seconds` part the ETA is the unsmoothed estimate (replay)."""
    supplied: dict[str, Any] = {}
    for part in parts:
        if part is not None:
            supplied.update(part.__dict__)
    values = {**base.__dict__, **supplied}
    if pipe is None:
        return replace(TargetView(**values), phases=(WAITING, *unknown_phases(), *TERMINAL))
    if "eta_seconds" not in supplied:
        values["eta_seconds"] = startup_eta(pipe.pack, pipe.state, base.now, None)
    values.update(_pipe_fields(pipe, base.now, values))
    return TargetView(**values)


def launch_advice(pipe: LogPipeline) -> tuple[str, ...]:
    """The pack's advice on a launch that is ready or ended, from its arguments and its crash
    (the ledger's, which also reads its serving figures, when there is one: `watch
    --no-history` and `--json` had none, the OOM's advice unsaid)."""
    st = pipe.state
    if st.phase not in (READY, *TERMINAL) or not st.args or not pipe.pack.advice:
        return ()
    reason = st.crash.reason if st.crash is not None else None
    return tuple(advice_lines(pipe.pack.advice, st.args, st.phase, reason, {}))


def launch_facts(st: State) -> dict[str, Any]:
    """The startup's flags (their digests, as `Stalled` carries them) and its launch's stamp
    in the log: a `slow` startup of a restart loop's relaunch is counted in the loop's open
    crash alert (sinks/alerts/loop.py), by the log's time from the loop's latest crash."""
    first = st.launch_start()
    out: dict[str, Any] = {"launch": launch_of(st), "launch_prefix": launch_prefixes(st.args)}
    if first is not None and first.log_time is not None:
        out["launch_logged_at"] = first.log_time
    return {k: v for k, v in out.items() if v}


def _pipe_fields(pipe: LogPipeline, now: float, values: dict[str, Any]) -> dict[str, Any]:
    """The view's fields that the pipeline's state gives (the phase, its spans, the crash...);
    `values`: the parts' (a silence at attach counts only while the startup is stalled)."""
    st = pipe.state
    entered = st.phase_entered
    first = st.history[0] if st.history else None
    main = pipe.pack.primary_progress
    shards = st.progress.get(main) if main else None
    since = values.get("silent_since")
    # silent since before the attach: until a new line ends the silence (also before the
    # machine's next tick has stalled it: watch's first lines of a dead log had an ETA)
    dead = since if since is not None and (st.stalled or (st.last_activity or 0) <= since) \
        else None
    stale = dead is not None or st.stalled     # no ETA for a startup that is not moving
    elapsed = crash_elapsed(st.crash, st.launch_start()) if st.crash else None
    return {
        "engine": pipe.pack.name,
        "phase": st.phase,
        "phases": (WAITING, *pipe.pack.phases, *TERMINAL),
        "phase_colours": dict(pipe.pack.colours),
        "primary_progress": main,
        "epoch": st.epoch,
        "startup_id": st.startup_id,
        "phase_entered_at": entered.at if entered else None,
        "startup_started_at": first.at if first else None,
        "launch": launch_facts(st),
        "ready_in": st.ready_in(),
        "follower": st.follower is True,
        "degraded": st.degraded,
        "phases_seen": st.phases_seen,
        "timeline": span_views(st, now if now else None),
        "total_seconds": live_total(st, now) if st.spans else None,
        "durations": live_durations(st, now),
        "progress": {k: {"current": p.current, "total": p.total, "rate": p.rate,
                         "eta_seconds": None if stale else p.remaining_seconds(now)}
                     for k, p in st.progress.items()},
        "shards": ShardView(shards.current, shards.total, shards.rate) if shards else None,
        "eta_seconds": math.nan if stale else values["eta_seconds"],
        "silent_since": dead,
        "ready_line": st.ready_line,
        "advice": values.get("advice") or launch_advice(pipe),
        "crash": _crash_json(st.crash, elapsed) if st.crash else None,
        "crash_elapsed": elapsed,
        "stalled": st.stalled,
        # the serving figures of the launch that serves now, those current (an idle or dead
        # server's last are not; nor those of a launch that stopped or crashed: the ledger
        # keeps them, as that launch's)
        "stats": current_stats(st, now),
        "rules": tuple(r.id for r in pipe.pack.rules),
        "ranks": {r: {"phase": p.phase, "finished": p.finished, "at": p.at}
                  for r, p in sorted(st.ranks.items(), key=lambda kv: rank_key(kv[0]))},
        "rank_tags": tuple(rx.pattern for rx in pipe.pack.ranks),
        "rank_lag": _rank_lag(pipe, now),
        "stall_after": pipe.machine.stall_budget(st.phase)
        if st.phase not in (WAITING, READY, *TERMINAL) else None}


def _crash_json(c: Crash, elapsed: float | None) -> dict[str, Any]:
    """The crash as `/api/status` shows it, with its sentence (`text`: the one the alert and
    `watch` say, less what only they know, the GPUs' preflight)."""
    doc = c.to_json()
    doc["text"] = crash_sentence(doc, elapsed)
    return doc


def rank_key(rank: str) -> tuple[Any, ...]:
    """Natural order of rank tags: TP2 before TP10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", rank))


def _rank_lag(pipe: LogPipeline, now: float) -> str:
    """The ranks behind the others, named once they have been behind for RANK_LAG_AFTER
    (a quarter of the phase's stall budget when that is shorter: a stall alert names them)."""
    st = pipe.state
    if len(st.ranks) < 2 or st.phase in (WAITING, READY, *TERMINAL):
        return ""
    after = min(RANK_LAG_AFTER, pipe.machine.stall_budget(st.phase) / 4)
    lag = rank_lag(st.ranks, pipe.pack.phase_index, rank_clock(st, now), after,
                   pipe.machine.replicas_apart(st), st.lanes, pipe.pack.phases,
                   pipe.pack.replica_stage)
    if lag is None:
        return ""
    return dataclasses.replace(lag, ranks=tuple(sorted(lag.ranks, key=rank_key))).text


def pipeline_view(name: str, pipe: LogPipeline, now: float = 0.0) -> TargetView:
    """The view of a log read without a daemon (`replay`, tests): no source, no history."""
    return build_view(TargetView(name=name, engine=pipe.pack.name, source=name, kind="file",
                                 labels={}, now=now, counters=copy_counters(pipe.counters)),
                      pipe)


def copy_counters(c: Counters) -> Counters:
    """A snapshot of the counters (cheap: a scrape copies them for every target)."""
    return dataclasses.replace(c, rule_matches=dict(c.rule_matches), crashes=dict(c.crashes),
                               duration_buckets=list(c.duration_buckets))


# -- the probe's verdict beside the log's (telemetry/probe.py probes; this says it) ----------

@dataclass
class ProbeSummary:
    """The probe's verdict beside the log's, for the view and the page."""

    text: str
    ready_not_answering: bool = False


def probe_verdict(probe: Mapping[str, Any] | None, phase: str, startup: str | None,
                  now: float) -> ProbeSummary | None:
    """One line: "answering (200 /health, 200 /v1/models, 12 ms)", "not answering for 45s:
    connection refused", "ready in log, not answering" (the log says ready and no probe of
    this startup has succeeded)."""
    if not probe:
        return None
    up = probe.get("up")
    if up is None:
        return ProbeSummary(probe.get("note") or probe.get("status") or "not probed yet")
    ms = f", {probe['duration'] * 1000:.0f} ms" if probe.get("duration") is not None else ""
    if up:
        return ProbeSummary(f"answering ({probe.get('status')}{ms})")
    since = probe.get("failing_since")
    lasting = f" for {_fmt_s(now - since)}" if since else ""
    never = phase == "ready" and (probe.get("ok_startup") != startup or not probe.get("ok_at"))
    if never:
        return ProbeSummary(f"ready in log, not answering{lasting}: {probe.get('status')}",
                            ready_not_answering=True)
    return ProbeSummary(f"not answering{lasting}: {probe.get('status')}")


def probe_down_for(probe: Mapping[str, Any] | None, phase: str,
                   phase_entered_at: float | None, now: float) -> float | None:
    """How long the endpoint of a server whose log says ready has not answered (since it
    said so, where it failed before), once that is the probe's `fail_after` or more: the
    `unreachable` alert's condition; None otherwise."""
    if not probe or probe.get("up") is not False or phase != READY:
        return None
    since = probe.get("failing_since")
    if since is None:
        return None
    down = now - max(since, phase_entered_at or since)
    return down if down >= float(probe.get("fail_after") or 0.0) else None


def _fmt_s(seconds: float) -> str:
    from .units import fmt_duration
    return fmt_duration(max(seconds, 0.0))
