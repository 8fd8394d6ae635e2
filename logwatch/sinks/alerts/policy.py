"""The alert policy: the machine's events (and the targets' views) -> alerts to fire.

Pure decisions, no I/O: `AlertPolicy.observe(view, events)` and `tick(views)` return the
alerts to fire (new firing ones, and resolutions of open ones); the router puts them in the
outbox, which sends each mark once.

* `crashed` on `CrashSettled` (the machine decided the crash is final), keyed on the
  crashed startup's id; it drops an undelivered `stalled` of the same startup (the outbox
  does that) and resolves a delivered one.
* `stalled` on `Stalled`, one per silence (keyed on the line the log stopped at), with the
  GPUs' verdict on the silence; resolved when lines come again (`Resumed`);  `slow` when a startup overran the typical startup by the target's
  `slow_factor`; `ready` resolves `stalled` / `slow`, and `crashed` of earlier startups; a
  new startup (`Restarted`) resolves `stalled` / `slow` of the ones before.
* `unreachable` when the log says ready and the probe of the server's endpoint has failed for
  `fail_after` (keyed on the startup and the outage), resolved when it answers again, by a
  crash or by a new startup.
* `source_down` when the target's source has failed (error or fatal: a refused key, a host
  down, a command that keeps failing; not a log that is not there yet) for the target's
  `source_down_after`, keyed on the outage; resolved once the source is up again.
* `degraded` when the ready server serves without a part of itself (`Degraded`: at the ready
  for a part that failed while it started, else when the part fails), once per startup; not
  a crash.  Open while that startup serves on (nothing in the log says the part came back),
  resolved when it ends: its crash
  (paged as `crashed`), a clean stop, a new startup.  Before, an event that Alertmanager
  ended 5 minutes on (a `resolved` notification for a server still degraded), never sent
  again, and active beside the same startup's crash.
* `restarted` and `phase` for the sinks that ask for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ... import clock
from ...machine import (CrashSettled, Degraded, Event, PhaseChanged, Ready, Restarted, Stalled,
                        Stopped)
from ...rules.pack import READY, TERMINAL, WAITING
from ...units import fmt_duration
from ...silence import Resumed
from ...telemetry.gpu import preflight_note
from ...verdict import crash_text, rank_notes, ready_notes
from ...view import TargetView, gpu_activity, probe_down_for
from .model import FIRING, Alert

SLOW_FACTOR = 1.5
SLOW_MIN_SECONDS = 120.0


def _still_answers(v: TargetView) -> str:
    """A crash while the server's endpoint still answers: say so (health checks lie)."""
    p = v.probe
    if not p or not p.get("up"):
        return ""
    return f"the endpoint still answers {p.get('status')}"


def alert_key(target: str, startup: str | None, kind: str, extra: str = "") -> str:
    return f"{target}|{startup or '-'}|{kind}{('|' + extra) if extra else ''}"


def startup_of(key: str) -> str:
    return key.split("|")[1]


@dataclass
class Resolve:
    """Resolve the open alerts of `target` of these kinds (only / except one startup)."""

    target: str
    kinds: tuple[str, ...]
    why: str
    only: str | None = None
    exclude: str | None = None
    drop_undelivered: bool = False   # an undelivered one is dropped, not resolved


Decision = Alert | Resolve


class AlertPolicy:
    def __init__(self, generator_url: str = "",
                 wants_phase: Callable[[], bool] = lambda: False) -> None:
        self.generator_url = generator_url
        self.wants_phase = wants_phase

    def _alert(self, v: TargetView, kind: str, startup: str | None, summary: str,
               details: dict[str, Any], epoch: int, extra: str = "") -> Alert:
        return Alert(alert_key(v.name, startup, kind, extra), kind, FIRING, v.name, v.engine,
                     dict(v.labels), epoch, summary, details, clock.now(), None,
                     self.generator_url, startup or "")

    def observe(self, v: TargetView, events: list[Event]) -> list[Decision]:
        out: list[Decision] = []
        for ev in events:
            if isinstance(ev, CrashSettled):
                out += self._crashed(v, ev)
            elif isinstance(ev, Ready):
                durations = {k: d for k, d in ev.durations.items() if k != READY}
                slow = ev.slowest_phase
                took = f" in {fmt_duration(ev.took)}" if ev.took is not None else ""
                notes = ([f"slowest phase: {slow} {fmt_duration(durations.get(slow))}"]
                         if slow in durations else []) + ready_notes(ev.line, v.follower, v.degraded)
                summ = f"ready{took}" + (f" ({'; '.join(notes)})" if notes else "")
                out.append(self._alert(v, "ready", ev.startup, summ,
                                       {"took": ev.took, "durations": durations,
                                        "slowest_phase": slow, "line": ev.line}, ev.epoch))
                out.append(Resolve(v.name, ("stalled", "slow"), "ready"))
                out.append(Resolve(v.name, ("crashed", "degraded"), "ready again",
                                   exclude=ev.startup))
            elif isinstance(ev, Restarted):
                out.append(Resolve(v.name, ("stalled", "slow", "unreachable", "degraded"),
                                   "restarted", exclude=ev.startup))
                out.append(self._alert(v, "restarted", ev.startup,
                                       f"restarted (startup #{ev.epoch})", {"line": ev.line},
                                       ev.epoch))
            elif isinstance(ev, Resumed):
                out.append(Resolve(v.name, ("stalled",),
                                   f"lines again after {fmt_duration(ev.silent_for)} of silence",
                                   only=ev.startup))
            elif isinstance(ev, Stalled):
                out.append(self._stalled(v, ev))
            elif isinstance(ev, Stopped):       # the server stopped: none of it is degraded
                out.append(Resolve(v.name, ("degraded",), "stopped"))
            elif isinstance(ev, Degraded):      # ready without a part: no crash (machine/degraded.py)
                out.append(self._alert(v, "degraded", ev.startup,
                                       f"degraded while serving: {ev.note}",
                                       {"note": ev.note, **({"line": ev.line} if ev.line else {})},
                                       ev.epoch))
            elif isinstance(ev, PhaseChanged) and self.wants_phase():
                out.append(self._alert(v, "phase", ev.startup, f"phase {ev.new}",
                                       {"phase": ev.new, "previous": ev.old}, ev.epoch,
                                       extra=ev.new))
        return out

    def _crashed(self, v: TargetView, ev: CrashSettled) -> list[Decision]:
        """`crashed`, with what else is known (the rank that went first, GPU memory held before
        the launch, an endpoint that still answers); the startup's stall / slow / unreachable
        are over, and its degrade (resolved after the page)."""
        c = ev.crash
        held = preflight_note(v.gpu, c.reason)
        answers = _still_answers(v)
        notes = [n for n in (*rank_notes(c.named_rank, c.printed_first), held, answers) if n]
        return [Resolve(v.name, ("stalled", "slow", "unreachable"), "crashed",
                        only=ev.startup, drop_undelivered=True),
                self._alert(v, "crashed", ev.startup,
                            crash_text(c.reason, c.during, ev.elapsed, notes, c.where,
                                       c.startup_phase if c.ahead else ""),
                            {"reason": c.reason, "during": c.during, "line": c.line,
                             **({"replica": c.ahead, "startup_phase": c.startup_phase}
                                if c.ahead else {}), **({"proc": c.proc} if c.proc else {}),
                             "line_number": c.line_number, "elapsed": ev.elapsed,
                             "excerpt": list(c.excerpt),
                             **({"rank": c.named_rank} if c.named_rank else {}),
                             **({"first_rank": c.printed_first} if c.printed_first else {}),
                             **({"meaning": c.meaning} if c.meaning else {}),
                             **({"endpoint": answers} if answers else {}),
                             **({"gpu_preflight": held} if held else {}),
                             **({"launch": ev.launch} if ev.launch else {}),
                             **({"launch_prefix": ev.launch_prefix} if ev.launch_prefix else {}),
                             **({"logged_at": c.log_time} if c.log_time is not None else {})},
                            ev.epoch),
                # after the crash's page (what the degrade said is still news beside it):
                # resolved, not dropped where undelivered
                Resolve(v.name, ("degraded",), "crashed", only=ev.startup)]

    def _stalled(self, v: TargetView, ev: Stalled) -> Alert:
        """`stalled`, with the ranks behind and what the GPUs do in the silence."""
        gpu = gpu_activity(v.gpu)
        # each silence is its own stall: keyed on where the log stopped (the line
        # before it), so a restarted daemon gives the same silence the same key
        where = f"{ev.phase}@L{v.line_number}" if v.line_number is not None else ev.phase
        p = v.probe or {}
        answering = p.get("up") and p.get("ok_startup") == v.startup_id
        return self._alert(v, "stalled", ev.startup,
                           f"stalled in {ev.phase}: no new line for "
                           f"{fmt_duration(ev.silent_for)}"
                           + (f"; {v.rank_lag}" if v.rank_lag else "")
                           + (f"; {gpu}" if gpu else "")
                           # a server that serves while its log says nothing more
                           + (f"; yet its endpoint answers ({p.get('status')})"
                              if answering else ""),
                           {"phase": ev.phase, "silent_for": ev.silent_for,
                            "stall_after": ev.budget,
                            **({"ranks_behind": v.rank_lag} if v.rank_lag else {}),
                            **({"gpu": gpu} if gpu else {}),
                            **({"gpu_silence": (v.gpu or {})["silence"]}
                               if gpu else {}),
                            # its launch's flags: a restart loop's relaunch (loop.py)
                            **({"launch": ev.launch} if ev.launch else {}),
                            **({"launch_prefix": ev.launch_prefix} if ev.launch_prefix else {}),
                            # timed from its launch by the log (a 400 GB load's stall an
                            # hour after the loop's crash is still the loop's: loop.py)
                            **({k: v.launch[k] for k in ("launch_logged_at",) if k in v.launch})},
                           ev.epoch, extra=where)

    def probe(self, v: TargetView) -> list[Decision]:
        """After a probe of the server: `unreachable` once the log says ready and the probe
        has failed for `fail_after` (since ready, if it failed before); resolved once it
        answers (a crash or a new startup resolves it too, see `observe`)."""
        p = v.probe
        if not p or p.get("up") is None:
            return []
        if p["up"]:
            return [Resolve(v.name, ("unreachable",), "answering again")]
        down_for = probe_down_for(p, v.phase, v.phase_entered_at, v.now)
        if down_for is None:
            return []
        never = not p.get("ok_at") or p.get("ok_startup") != v.startup_id
        if v.historic and never:
            # ready before we attached and never answered since: a stale log of a server
            # gone long ago, not news; one that answered and stopped is (attach = monitored)
            return []
        what = "ready in log, never answered" if never else "not answering"
        return [self._alert(v, "unreachable", v.startup_id,
                            f"{what} for {fmt_duration(down_for)}: {p.get('status')} "
                            f"({p.get('url')})",
                            {"url": p.get("url"), "status": p.get("status"),
                             "down_for": down_for, "never_answered": never},
                            v.epoch, extra=str(p.get("outage") or 0))]

    def source(self, v: TargetView, grace: float) -> list[Decision]:
        """A blind monitor says so: `source_down` once the source has failed for `grace`
        seconds (one per outage), resolved when it reads again."""
        since = v.source_down_since
        if since is None:
            return [Resolve(v.name, ("source_down",), "reading again")] \
                if v.source_state == "up" else []
        down_for = v.now - since
        if down_for < grace:
            return []
        what = "refused (not retried until SIGHUP or the next slow retry)" \
            if v.source_state == "fatal" else "failing"
        return [self._alert(v, "source_down", None,
                            f"cannot read the log for {fmt_duration(down_for)}: "
                            f"{v.source_message} ({what})",
                            {"state": v.source_state, "message": v.source_message,
                             "down_for": down_for, "source": v.source}, v.epoch,
                            extra=f"{since:.0f}")]

    def slow(self, v: TargetView, slow_factor: float) -> Alert | None:
        """A startup that has taken `slow_factor` times the typical one (and 2 min at least)."""
        if v.phase in (WAITING, READY, *TERMINAL) or v.startup_started_at is None \
                or not v.typical_total:
            return None
        elapsed = v.now - v.startup_started_at
        if elapsed <= max(v.typical_total * slow_factor, SLOW_MIN_SECONDS):
            return None
        return self._alert(v, "slow", v.startup_id,
                           f"slow startup: {fmt_duration(elapsed)} and still in {v.phase} "
                           f"(usually ready after {fmt_duration(v.typical_total)})",
                           {"elapsed": elapsed, "typical": v.typical_total, "phase": v.phase,
                            **v.launch},     # a restart loop's relaunch (loop.py)
                           v.epoch)
