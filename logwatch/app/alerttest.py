"""`logwatch alerts test`: send one sample alert to every sink of the config, now.

The sample carries `test="true"` (a route or a silence can tell it from a real crash) and
ends by itself after TEST_ENDS_AFTER: Alertmanager keeps a firing alert active until its
`endsAt` (a day for logwatch's own), and nothing resolves a test."""

from __future__ import annotations

import time
from typing import Callable

from ..sinks.alerts.kinds import ALERT_KINDS
from ..sinks.alerts.model import FIRING, Alert
from ..sinks.alerts.policy import alert_key
from ..sinks.alerts.receivers import make_sinks
from ..sinks.alerts.delivery import client_session, deliver
from ..verdict import Exit
from .config import Config

TEST_ENDS_AFTER = 300.0   # seconds: Alertmanager's group_wait (30 s) and repeat well within


def sample(kind: str, generator_url: str) -> Alert:
    """The registry's sample of `kind` (sinks/alerts/kinds.py), marked [test]."""
    k = ALERT_KINDS[kind]
    startup = f"test@{time.time():.0f}"
    return Alert(alert_key("logwatch-test", startup, kind), kind, FIRING, "logwatch-test",
                 "sglang", {"model": "example", "test": "true"}, 1, f"[test] {k.sample_summary}",
                 dict(k.sample_details), time.time(),
                 time.time() + TEST_ENDS_AFTER, generator_url, startup)


async def send_test(cfg: Config, kind: str, out: Callable[[str], None] = print) -> int:
    sinks = make_sinks(list(cfg.alerts))
    if not sinks:
        out(f"{cfg.path}: no alert sinks configured (alerts: [...])")
        return Exit.USAGE
    failed = 0
    async with client_session() as session:   # only the delivery step: no outbox
        alert = sample(kind, f"http://{cfg.listen_host}:{cfg.listen_port}/")
        for s in sinks:
            outcome = await deliver(session, s, alert)
            status = "ok" if outcome.ok else "FAILED"
            failed += not outcome.ok
            out(f"{s.describe()}: {status} ({outcome.message})")
    return Exit.FAILED if failed else Exit.OK
