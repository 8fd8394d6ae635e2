"""The outcome of a log as DESIGN.md's JSON object, a short human summary and a timeline."""

from __future__ import annotations

from typing import Any

from .machine import State
from .pipeline import LogPipeline
from .rulepack import CRASHED, READY, STOPPED


def summary(name: str, pipe: LogPipeline) -> dict[str, Any]:
    st = pipe.state
    shards = st.progress.get("shards")
    return {
        "file": name,
        "engine": pipe.pack.name,
        "phase": st.phase,
        "phases_seen": st.phases_seen,
        "startups": st.startups,
        "lines": pipe.counters.lines,
        "shards_loaded": shards.current if shards else None,
        "shards_total": shards.total if shards else None,
        "crash": st.crash.to_json() if st.crash else None,
        "ready_line": st.ready_line,
        "durations": st.durations(),
    }


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s"


def human(doc: dict[str, Any]) -> str:
    """A few lines a person reads: outcome first, then the evidence."""
    phase = doc["phase"]
    dur = doc.get("durations") or {}
    total = sum(dur.values()) if dur else None
    if phase == CRASHED and doc["crash"]:
        c = doc["crash"]
        head = f"crashed: {c['reason']} during {c['during']}"
    elif phase == READY:
        head = "ready" + (f" after {fmt_duration(total)}" if total else "")
    elif phase == STOPPED:
        head = "stopped (clean shutdown)"
    else:
        head = f"still starting: {phase}"
    out = [f"{doc['file']}: {head}  [{doc['engine']}]"]
    facts = [f"{doc['lines']:,} lines", f"{doc['startups']} startup(s)"]
    if doc["shards_total"]:
        facts.append(f"shards {doc['shards_loaded']}/{doc['shards_total']}")
    if doc["phases_seen"]:
        facts.append("phases " + " > ".join(doc["phases_seen"]))
    out.append("  " + " · ".join(facts))
    if phase == CRASHED and doc["crash"]:
        c = doc["crash"]
        out.append(f"  root cause (line {c['line_number']}): {_clip(c['line'], 300)}")
    elif doc.get("ready_line"):
        out.append(f"  ready: {_clip(doc['ready_line'], 200)}")
    return "\n".join(out)


def timeline(state: State) -> str:
    """Each phase of the last epoch with its start time and how long it lasted."""
    rows = []
    dur = state.durations()
    for e in state.history:
        when = e.log_stamp or "-"
        d = dur.get(e.phase) if e.phase in dur else None
        rows.append(f"  {e.phase:<15} {when:<24} {fmt_duration(d) if d is not None else ''}")
    return "\n".join(rows) if rows else "  (no phase seen)"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
