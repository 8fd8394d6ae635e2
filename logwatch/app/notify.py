"""`watch --notify URL|bell`: one message at the verdict, for the engineer who went for coffee.

A Slack incoming-webhook URL gets the daemon's Slack message, any other URL the daemon's
webhook JSON (README "Alert payloads"): the same `Sink` classes and the same `deliver`, so a
receiver that takes the daemon's alerts takes this one.  `bell` rings the terminal.  The
message is sent once (a failure is said on stderr, and the exit status stays the verdict's).
"""

from __future__ import annotations

from typing import TextIO
from urllib.parse import urlsplit

from .. import clock
from ..sinks.alerts.model import FIRING, Alert
from ..sinks.alerts.receivers import make_sinks
from ..units import fmt_duration
from ..verdict import Exit, Verdict
from ..view import TargetView

NOTIFY_TIMEOUT = 10.0


def verdict_alert(code: int, outcome: str, views: list[TargetView]) -> Alert:
    """The verdict as an alert: the first crashed target's crash, else the launch as a whole."""
    kind = Verdict(Exit(code), outcome).kind
    crashed = [v for v in views if v.crash]
    main = crashed[0] if crashed else views[0]
    names = ", ".join(v.name for v in views)
    lines = []
    for v in views:
        took = f" in {fmt_duration(v.ready_in)}" if v.ready_in is not None else ""
        lines.append(f"{v.name}: {v.phase}{took}")
    details: dict[str, object] = {"exit_code": code, "outcome": outcome, "targets": lines}
    if main.crash:
        c = main.crash
        details.update(reason=c["reason"], during=c["during"], line=c["line"],
                       excerpt=list(c.get("excerpt") or []))
        if c.get("rank"):         # the root-cause line's rank, else the first that printed
            details["rank"] = c["rank"]
        if c.get("first_rank"):   # the first that printed, where it is another
            details["first_rank"] = c["first_rank"]
        if c.get("replica"):      # it crashed ahead of the startup's (slowest replica's) phase
            details.update(replica=c["replica"], startup_phase=c.get("startup_phase"))
        if c.get("proc"):         # the process of several in one stream that crashed
            details["proc"] = c["proc"]
    now = clock.now()
    return Alert(key=f"watch|{names}|{kind}|{now:.0f}", kind=kind, status=FIRING,
                 target=names if len(views) > 1 else views[0].name, engine=main.engine,
                 labels={}, epoch=main.epoch, summary=f"watch: {outcome}", details=details,
                 starts_at=now, startup=main.startup_id or "")


def sink_spec(url: str) -> dict[str, object]:
    host = (urlsplit(url).hostname or "").lower()
    kind = "slack" if host.endswith("slack.com") or "/slack" in url else "webhook"
    return {"type": kind, "name": "notify", "url": url, "timeout": NOTIFY_TIMEOUT,
            "max_attempts": 1}


async def notify_verdict(target: str, code: int, outcome: str, views: list[TargetView],
                         screen: TextIO) -> bool:
    """Ring the bell, or POST the verdict once; True when it was delivered."""
    if target == "bell":
        print("\a", end="", file=screen, flush=True)
        return True
    from ..sinks.alerts.delivery import client_session, deliver
    sink = make_sinks([sink_spec(target)])[0]
    alert = verdict_alert(code, outcome, views)
    async with client_session() as session:
        result = await deliver(session, sink, alert)
    if not result.ok:
        print(f"logwatch: --notify: not delivered: {result.message}", file=screen, flush=True)
        return False
    return True
