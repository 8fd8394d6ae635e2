"""The outcome of a log as DESIGN.md's JSON object, a short human summary and a timeline."""

from __future__ import annotations

from typing import Any

from ..rules.pack import CRASHED, READY, STOPPED, WAITING
from ..shown import visible
from ..units import fmt_duration
from ..verdict import crash_text, crash_where, ready_notes, replica_phase
from ..view import TargetView


def summary(view: TargetView) -> dict[str, Any]:
    """DESIGN.md's `replay --json` / `watch --json` object: the view's status, in the
    contract's shape and key order."""
    status = view.to_json()
    doc = {"file": view.name}
    doc.update((k, status[k]) for k in ("engine", "phase", "phases_seen", "startups", "lines"))
    shards = status["shards"] or {}
    doc["shards_loaded"], doc["shards_total"] = shards.get("loaded"), shards.get("total")
    doc.update((k, status[k]) for k in ("crash", "ready_line", "durations"))
    # (a part that failed while it served on, `degraded`, is not the contract's: `human` has
    # it from the view, `/api/status` and the history keep it)
    if doc["crash"]:
        # the contract's crash: when it was seen (`at`, wall clock) says nothing of a replayed log
        # (and the rank and the sentence are the status's, `/api/status`, not the contract's)
        # (nor the replica it crashed in ahead of the startup: `human` has it from the view)
        doc["crash"] = {k: v for k, v in doc["crash"].items()
                        if k not in ("at", "log_time", "rank", "first_rank", "text", "replica",
                                     "startup_phase", "proc", "meaning")}
    return doc


NO_STARTUP = "no startup in this log (no launch line of the engine)"


def human(doc: dict[str, Any], total: float | None = None, follower: bool = False,
          crash: dict[str, Any] | None = None, degraded: str | None = None) -> str:
    """A few lines a person reads: outcome first, then the evidence.  `total`: the startup's
    launch-to-ready time (the view's `ready_in`); None where the log has no launch to count
    from (it begins mid-startup or while serving): no "after" (before, the phases the window
    showed: `ready after 1.0s` for a window that began at graph capture).  `follower`: a
    follower node's launch.  `crash`: the view's (`/api/status`'s), whose replica, where it
    crashed ahead of the startup, the sentence and the phases line name (before: `during
    cuda_graph` beside phases `launching > loading_shards > crashed`).  `degraded`: the
    view's note of a part that failed while the server went on (said beside the ready)."""
    phase = doc["phase"]
    ahead = replica_phase(crash) if phase == CRASHED else ""
    if phase == CRASHED and doc["crash"]:
        c = doc["crash"]
        head = crash_text(c["reason"], c["during"], replica=crash_where(crash),
                          startup=(crash or {}).get("startup_phase") or "")
    elif phase == READY:
        notes = ready_notes(doc.get("ready_line"), follower, degraded)
        head = "ready" + (f" after {fmt_duration(total)}" if total else "") + \
            (f" ({'; '.join(notes)})" if notes else "")
    elif phase == STOPPED:
        head = "stopped (clean shutdown)"
    elif phase == WAITING and not doc["startups"]:
        head = NO_STARTUP      # not "still starting": nothing in it began one (binary, empty)
    else:
        head = f"still starting: {phase}"
    out = [f"{doc['file']}: {head}  [{doc['engine']}]"]
    facts = [f"{doc['lines']:,} lines", f"{doc['startups']} startup(s)"]
    if doc["shards_total"]:
        facts.append(f"shards {doc['shards_loaded']}/{doc['shards_total']}")
    if doc["phases_seen"]:
        facts.append("phases " + " > ".join(doc["phases_seen"]) + (f" ({ahead})" if ahead else ""))
    out.append("  " + " · ".join(facts))
    if phase == CRASHED and doc["crash"]:
        c = doc["crash"]
        out.append(f"  root cause (line {c['line_number']}): {_clip(c['line'], 300)}")
        if (crash or {}).get("meaning"):      # its rule's sentence (`meaning:`): what is wrong
            out.append(f"  meaning: {_clip(str((crash or {})['meaning']), 300)}")
    elif doc.get("ready_line"):
        out.append(f"  ready: {_clip(doc['ready_line'], 200)}")
    return visible("\n".join(out))     # quoted log lines: shown, not obeyed (shown.py)


def timeline(view: TargetView) -> str:
    """One row per span of the last startup: its phase, the stamp of the line that opened
    it, when it began after the startup's first line and how long it lasted; a span beside
    the main line (weights loading while graphs capture) is marked `+`.  The
    last row says what the spans cover in all (overlap counted once) and what they add up
    to per phase when a phase had several spans."""
    rows = []
    for sp in view.timeline:
        when = sp.stamp or "-"
        mark = "+" if sp.beside else " "
        d = fmt_duration(sp.seconds) if sp.seconds is not None else ""
        at = f"+{fmt_duration(sp.start)}" if sp.start is not None else ""
        name = f"  ({sp.label})" if sp.label else ""
        rows.append(f" {mark}{sp.phase:<15} {when:<24} {at:>8}  {d}{name}".rstrip())
    if not rows:
        return "  (no phase seen)"
    repeated = [p for p in dict.fromkeys(sp.phase for sp in view.timeline)
                if sum(1 for sp in view.timeline if sp.phase == p) > 1 and p in view.durations]
    tail = []
    if view.total_seconds is not None:
        tail.append(f"total {fmt_duration(view.total_seconds)}")
    tail += [f"{p} {fmt_duration(view.durations[p])} in all" for p in repeated]
    if tail:
        rows.append("  (" + " · ".join(tail) + ")")
    return "\n".join(rows)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
