"""The machine state as JSON and back: a daemon restart continues from its checkpoint."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from ..rules.pack import WAITING
from .events import (
    CrashRetracted, CrashSettled, CrashUpdated, Crashed, Event, PhaseChanged, Progress, Ready,
    Restarted, StartupBegan, StatsUpdated, Stalled, Stopped,
)
from .ranks import MAX_LANES, RankProgress
from .rates import MAX_BARS, ProgressState
from .startup import MAX_STAT_SOURCES
from .state import Crash, Evidence, Span, State

T = TypeVar("T")


def known_fields(cls: type[T], d: dict[str, Any]) -> T:
    """`cls` from the keys of `d` it has.  A field a newer logwatch added (a rollback, or a
    state_dir from a host that runs a newer version) is left out, as `Alert.from_json`
    does: before, `cls(**d)` raised TypeError and the target's phase started over (its
    crash paged again, its startups numbered from 1, no `restarted` for the next one)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in d.items() if k in names})


def state_to_json(state: State) -> dict[str, object]:
    """The whole machine state as JSON (a daemon restart continues from it)."""
    def conv(v: object) -> object:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, dict):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, set):
            return sorted(v)  # type: ignore[type-var]
        return v

    return conv(state)  # type: ignore[return-value]


def crash_from_json(c: dict[str, Any]) -> Crash:
    """A crash as `state_to_json` wrote it, its evidence back as `Evidence` (`died` too:
    before, a dict, on which the next crash line after a restart raised AttributeError)."""
    def ev(x: object) -> Evidence | None:
        return known_fields(Evidence, x) if isinstance(x, dict) else None

    return known_fields(Crash, {**c, "cause": ev(c.get("cause")), "marker": ev(c.get("marker")),
                                "marker_reason": ev(c.get("marker_reason")),
                                "died": ev(c.get("died")),
                                "excerpt": list(c.get("excerpt") or [])})


def state_from_json(d: dict[str, object]) -> State:
    c = d.get("crash")
    crash = crash_from_json(c) if isinstance(c, dict) else None
    st = State(
        phase=str(d.get("phase", WAITING)), epoch=int(d.get("epoch", 0)),  # type: ignore[arg-type]
        startups=int(d.get("startups", 0)),  # type: ignore[arg-type]
        # `history` (one entry per phase entered): a checkpoint written before spans
        spans=_spans(d.get("spans", d.get("history")) or []),  # type: ignore[arg-type]
        restart_rules=set(d.get("restart_rules", [])),  # type: ignore[arg-type]
        procs=set(d.get("procs", [])),  # type: ignore[arg-type]
        procs_waiting=set(d.get("procs_waiting", [])),  # type: ignore[arg-type]
        args=dict(d.get("args") or {}),  # type: ignore[call-overload]
        args_partial=bool(d.get("args_partial", False)),
        args_complete=bool(d.get("args_complete", False)),
        engine_version=d.get("engine_version") if isinstance(d.get("engine_version"), str) else None,
        progress={k: known_fields(ProgressState, v) for k, v in (d.get("progress") or {}).items()},  # type: ignore[union-attr, arg-type]
        bars=_bars(d.get("bars")),
        phase_progress=bool(d.get("phase_progress", False)), crash=crash,
        ready_line=d.get("ready_line"), ready_at=d.get("ready_at"),  # type: ignore[arg-type]
        stats={k: float(v) for k, v in (d.get("stats") or {}).items()},  # type: ignore[union-attr]
        stats_by=_stats_by(d.get("stats_by")), stats_seen=_stats_seen(d.get("stats_seen")),
        hints={k: known_fields(Evidence, v) for k, v in (d.get("hints") or {}).items()},  # type: ignore[union-attr, arg-type]
        last_activity=d.get("last_activity"), last_log_time=d.get("last_log_time"),  # type: ignore[arg-type]
        stalled=bool(d.get("stalled", False)),
        startup_id=d.get("startup_id"),  # type: ignore[arg-type]
        crash_settled=bool(d.get("crash_settled", False)),
        crash_changed_at=d.get("crash_changed_at"),  # type: ignore[arg-type]
        crash_read_at=d.get("crash_read_at"),  # type: ignore[arg-type]
        endpoint=d.get("endpoint"),  # type: ignore[arg-type]
        ranks={str(k): RankProgress(v["phase"], bool(v["finished"]), float(v["at"]),  # type: ignore[index]
                                    [(int(a), bool(b), float(c))
                                     for a, b, c in v.get("advances") or []],  # type: ignore[union-attr]
                                    _last(v.get("last")),  # type: ignore[union-attr]
                                    v.get("up") is True)  # type: ignore[union-attr]
               for k, v in (d.get("ranks") or {}).items()},  # type: ignore[union-attr]
        lanes=_lanes(d.get("lanes")), lane_times=_lane_times(d.get("lane_times")),
        rank_pids=_rank_pids(d.get("rank_pids")),
        begun=set(d.get("begun", [])),  # type: ignore[arg-type]
        seen={str(x) for x in d.get("seen") or []},  # type: ignore[union-attr]
        servers={str(k): bool(v) for k, v in (d.get("servers") or {}).items()},  # type: ignore[union-attr]
        supervised=bool(d.get("supervised", False)),
        ready_by_endpoint=bool(d.get("ready_by_endpoint", False)), mid_startup=bool(d.get("mid_startup", False)),
        untrusted_stamps=int(d.get("untrusted_stamps", 0)),  # type: ignore[call-overload]
        floating=d.get("floating"),  # type: ignore[arg-type]
        last_own_time=d.get("last_own_time"),  # type: ignore[arg-type]
        clock_offset=d.get("clock_offset"),  # type: ignore[arg-type]
        follower=d.get("follower") if d.get("follower") in (True, False) else None,  # type: ignore[arg-type]
        follower_line=d.get("follower_line"),  # type: ignore[arg-type]
        follower_log_time=d.get("follower_log_time"),  # type: ignore[arg-type]
        graphs_off=bool(d.get("graphs_off", False)), phase_done=bool(d.get("phase_done", False)),
        work_again_at=_seconds(d.get("work_again_at")),
        nodes={x for x in d.get("nodes") or [] if type(x) is int},  # type: ignore[union-attr]
        gpus={x for x in d.get("gpus") or [] if type(x) is int},  # type: ignore[union-attr]
        gpu_buses={x for x in d.get("gpu_buses") or [] if type(x) is int},  # type: ignore[union-attr]
        relaunched=bool(d.get("relaunched", False)),
        degraded=_text(d.get("degraded")), degraded_line=_text(d.get("degraded_line")),
        absorbing=_text(d.get("absorbing")),
        absorbing_from=int(d.get("absorbing_from") or 0),  # type: ignore[call-overload]
    )
    return st


def _stats_by(v: object) -> dict[str, dict[str, float]]:
    """The serving figures per engine / DP rank from a checkpoint (at most MAX_STAT_SOURCES
    of them; none from a checkpoint from before they were read back)."""
    if not isinstance(v, dict):
        return {}
    out = {}
    for k, figures in list(v.items())[:MAX_STAT_SOURCES]:
        if isinstance(figures, dict):
            out[str(k)] = {str(f): float(x) for f, x in figures.items()
                           if isinstance(x, (int, float)) and not isinstance(x, bool)}
    return out


def _stats_seen(v: object) -> dict[str, float]:
    if not isinstance(v, dict):
        return {}
    return {str(k): float(x) for k, x in list(v.items())[:MAX_STAT_SOURCES]
            if isinstance(x, (int, float)) and not isinstance(x, bool)}


def _last(v: object) -> tuple[int, bool, bool] | None:
    """A rank's latest marker from a checkpoint (one from before it had none)."""
    if isinstance(v, (list, tuple)) and len(v) == 3:
        return int(v[0]), bool(v[1]), bool(v[2])
    return None


def _spans(items: list[dict[str, object]]) -> list[Span]:
    """Spans from a checkpoint; one from before spans had no ends: each main one ends where
    the next began."""
    spans = [known_fields(Span, e) for e in items]
    main = [sp for sp in spans if not sp.beside]
    for cur, nxt in zip(main, main[1:]):
        if cur.open:
            cur.close(nxt.at, nxt.log_time)
    return spans


def _bars(value: object) -> dict[str, list[ProgressState]]:
    """`State.bars` from JSON (`{"shards": [{"current": 3, ...}]}`), bounded as it is kept."""
    if not isinstance(value, dict):
        return {}
    return {str(k): [known_fields(ProgressState, b) for b in v if isinstance(b, dict)][:MAX_BARS]
            for k, v in value.items() if isinstance(v, list)}


def _lanes(value: object) -> dict[str, tuple[int, bool]]:
    """`State.lanes` from JSON (`{"TP0 pid=200": [3, false]}`); what is not that is left out."""
    if not isinstance(value, dict):
        return {}
    return {str(k): (int(v[0]), bool(v[1])) for k, v in value.items()
            if isinstance(v, list) and len(v) == 2 and type(v[0]) is int}


MAX_LANE_ADVANCES = 32     # a lane's advances read back (two a phase: begun, finished)


def _lane_times(value: object) -> dict[str, list[tuple[int, bool, float]]]:
    """`State.lane_times` from JSON (`{"TP0 pid=200": [[2, false, 8.0]]}`), bounded as it is
    kept (MAX_LANES processes; a lane's positions only go forward, two a phase at most);
    what is not that is left out (a checkpoint from before them: none, so a dense model's
    replicas ahead are timed again from their next advance on)."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for k, v in list(value.items())[:MAX_LANES]:
        if not isinstance(v, list):
            continue
        rows = [x for x in v[:MAX_LANE_ADVANCES] if isinstance(x, list) and len(x) == 3]
        out[str(k)] = [(a, b, float(c)) for a, b, c in rows
                       if type(a) is int and type(b) is bool and
                       isinstance(c, (int, float)) and not isinstance(c, bool)]
    return out


def _rank_pids(value: object) -> dict[str, tuple[int, str]]:
    """`State.rank_pids` from JSON (`{"200": [3, "0"]}`); what is not that is left out."""
    if not isinstance(value, dict):
        return {}
    return {str(k): (v[0], v[1]) for k, v in value.items()
            if isinstance(v, list) and len(v) == 2 and type(v[0]) is int and isinstance(v[1], str)}


# the machine's events by name, and what each field may hold (their annotations' text)
EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    PhaseChanged, StartupBegan, Restarted, Ready, Crashed, CrashSettled, CrashUpdated,
    CrashRetracted, Stopped, Stalled, Progress, StatsUpdated)}
_NUMBER = (int, float)
_FIELD_OK: dict[str, Any] = {
    "int": lambda v: type(v) is int,
    "str": lambda v: isinstance(v, str),
    "float": lambda v: isinstance(v, _NUMBER) and not isinstance(v, bool),
    "float | None": lambda v: v is None or isinstance(v, _NUMBER) and not isinstance(v, bool),
    "str | None": lambda v: v is None or isinstance(v, str),
    "dict[str, float]": lambda v: isinstance(v, dict) and all(
        isinstance(x, _NUMBER) and not isinstance(x, bool) for x in v.values()),
    "Crash": lambda v: isinstance(v, dict),
}


def event_to_json(ev: Event) -> dict[str, Any] | None:
    """One of the machine's events as JSON (a first attach's catch-up keeps the events it
    holds in its checkpoint); None for an event of another kind."""
    if type(ev).__name__ not in EVENT_TYPES:
        return None
    doc = state_to_json(ev)  # type: ignore[arg-type]   (any dataclass: its fields)
    return {"type": type(ev).__name__, **doc}


def event_from_json(d: object) -> Event | None:
    """An event as `event_to_json` wrote it; None where the entry is damaged (a field
    missing or of another type): a checkpoint is a file, and a damaged one is refused, not
    raised on."""
    cls = EVENT_TYPES.get(d.get("type")) if isinstance(d, dict) else None  # type: ignore[arg-type]
    if cls is None:
        return None
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:  # type: ignore[operator]
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                return None
            continue
        v = d[f.name]  # type: ignore[index]
        ok = _FIELD_OK.get(str(f.type))
        if ok is None or not ok(v):
            return None
        if f.type == "Crash":
            try:
                v = crash_from_json(v)
            except (TypeError, ValueError):
                return None
        elif f.type == "dict[str, float]":
            v = {str(k): float(x) for k, x in v.items()}
        kw[f.name] = v
    return cls(**kw)  # type: ignore[no-any-return]


def _seconds(v: object) -> float | None:
    """A time field of a checkpoint, or None (a hand-edited or foreign file)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v: object) -> str | None:
    """A string field of a checkpoint, or None (a hand-edited or foreign file)."""
    return v if isinstance(v, str) else None
