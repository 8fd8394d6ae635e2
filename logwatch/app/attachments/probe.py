"""The server's own endpoint, probed beside its log (telemetry/probe.py `Prober`).

`probe:` auto probes ssh:// targets through their connection and local files directly; a
cmd: target only with an explicit `url` (its server may be anywhere); never stdin.  Where
to probe comes from what the log says now (`plan`): the configured url, else the address
the startup printed, else its arguments.  A startup that had ended before the attach, a
log still being caught up on, or a follower node's launch (no HTTP server) is not probed.
The probe is asked at once when a startup begins, gets ready, the catch-up ends, or a
restarted daemon resumes a startup from its checkpoint.  This is
the one module of app/ that knows the prober's classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ... import clock
from ...machine import Event, Ready, StartupBegan
from ...pipeline import LogPipeline
from ...verdict import FOLLOWER
from ...telemetry.probe import (
    ProbePlan, Prober, endpoint_of, local_connect, server_endpoint, ssh_connect,
)
from ...sources.ssh import SSHPool, SSHTarget
from .base import Attachment, LiveTarget


@dataclass(frozen=True)
class ProbePart:
    """The target view's `probe` (None: no probe for this target)."""

    probe: dict[str, Any] | None


class ProbeAttachment(Attachment):
    def __init__(self, pool: SSHPool, on_result: Callable[[Any], None] | None = None) -> None:
        self.pool = pool
        self.on_result = on_result or (lambda target: None)   # after each probe (alerts)
        self.target: LiveTarget | None = None
        self.prober: Prober | None = None

    def bind(self, target: LiveTarget) -> None:
        self.target = target
        cfg, kind = target.cfg.probe, target.cfg.kind
        if not cfg.enabled or kind == "stdin" or (kind == "command" and not cfg.url):
            return
        ssh = SSHTarget.parse(target.cfg.source) if kind == "ssh" else None
        connect = ssh_connect(self.pool, ssh, target.cfg.ssh) if ssh is not None \
            else local_connect()
        self.prober = Prober(cfg, connect, self.plan, on_result=lambda p: self._probed(target),
                             own_hosts=(ssh.host,) if ssh is not None else ())

    def _probed(self, target: LiveTarget) -> None:
        """After each probe: a startup whose endpoint answers is ready even where its quiet
        log never says so (StartupMachine.endpoint_answers); then the owner's callback."""
        st, pipe = self.prober.state if self.prober else None, target.pipe
        answers = st is not None and bool(st.up) and pipe is not None and \
            st.ok_startup == pipe.state.startup_id
        target.probed(clock.now(), answers, st.status if st is not None else "")
        self.on_result(target)

    def first_pending(self) -> bool:
        """A probe knows where the server listens and has not reported yet."""
        if self.prober is None or self.plan().endpoint is None:
            return False
        return self.prober.state.probes == 0

    def start(self) -> None:
        if self.prober is not None:
            self.prober.start()

    def plan(self) -> ProbePlan:
        """Where the server listens, by what its log says now (or the configured url)."""
        assert self.target is not None
        pipe = self.target.pipe
        paths = pipe.pack.probe_paths if pipe is not None else ()
        startup = pipe.state.startup_id if pipe is not None else None
        if self.target.cfg.probe.url:
            return ProbePlan(endpoint_of(self.target.cfg.probe.url), paths, startup)
        if pipe is None or self.target.catching_up or self.target.ended_at_attach(startup):
            return ProbePlan(None, paths, startup)   # a server that ended is not probed
        st = pipe.state
        # a follower node runs no HTTP server; an address printed in its stream is a head's
        # (srun writes every node to one file)
        if st.follower is True and not st.endpoint:
            if self.prober is not None:
                self.prober.state.note = f"{FOLLOWER} (not probed)"
            return ProbePlan(None, paths, startup)
        # a launch that serves no HTTP (vLLM `--grpc`): an HTTP probe of its port never answers
        off = next((a for a in pipe.pack.probe_off_args if st.args.get(a) is True), None)
        if off is not None:
            if self.prober is not None:
                self.prober.state.note = f"serves no HTTP (--{off.replace('_', '-')}): not probed"
            return ProbePlan(None, paths, startup)
        ep = server_endpoint(st.endpoint, st.args)
        if ep is None and self.prober is not None:
            self.prober.state.note = "no address in the log yet (host/port, `Uvicorn running on`)"
        return ProbePlan(ep, paths, startup)

    def on_pipeline(self, pipe: LogPipeline) -> None:
        """A pipeline holding a startup already (the checkpoint's, after a daemon restart):
        its server is asked at once, as at a first attach's catch-up.  Before, no event said
        so (no new startup, no ready, no catch-up) and the first probe waited a whole
        `interval`: every server of a fleet unprobed for 10 s after each restart
        (`logwatch_probe_up` absent, `probe` empty in /api/status), against 2 s at a first
        start."""
        if self.prober is not None and pipe.state.startup_id is not None:
            self.prober.poke()

    def on_events(self, events: list[Event], now: float) -> None:
        if self.prober is not None and any(isinstance(e, (Ready, StartupBegan)) for e in events):
            self.prober.poke()         # ask at once: the verdict beside the log's

    def caught_up(self, now: float) -> None:
        if self.prober is not None:
            self.prober.poke()         # a server up before us: probed from now on

    def view(self, now: float) -> ProbePart:
        return ProbePart(self.prober.to_dict() if self.prober is not None else None)

    def key(self) -> Any:
        return self.prober.state.probes if self.prober is not None else None

    async def close(self) -> None:
        if self.prober is not None:
            await self.prober.stop()
