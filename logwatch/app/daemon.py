"""`logwatch run`: every target of the config in one asyncio process.

Each target is its own task (source -> framing -> rules -> machine); a slow or failing
target never delays the others.  One ticker drives stall detection, crash settling and
checkpoints.  SIGHUP reloads the config and the rule packs: added targets start, removed
ones stop, changed ones (config or pack) restart from their checkpoint; nothing is alerted
twice.  SIGTERM / SIGINT stop cleanly, writing every checkpoint durably.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from .. import clock
from .. import log
from .config import Config, ConfigError, TargetConfig, load_config, select_shard
from ..machine import CrashSettled, Degraded, Event, PhaseChanged, Ready, Restarted, Stalled
from ..silence import Resumed
from ..state.positions import PositionStore
from ..state.renames import carry_renamed
from ..rules.pack import (
    PackError, RulePack, load_all_shipped, load_pack, resolve_pack_path, search_path,
)
from ..state.ledger import LedgerStore
from ..state import clockfile, history as history_store, positions as position_store
from ..state import retention
from ..state.formats import StateDirNewer, check_formats
from ..state.lock import StateDirInUse, hold_state_dir
from ..sources.ssh import SSHPool
from ..sinks.alerts import outbox
from ..sinks.alerts.config import max_attempts_notes
from ..sinks.alerts.router import AlertRouter
from ..view import TargetView
from ..limits import nofile_note, raise_nofile
from ..verdict import Exit
from .http import HTTP_BACKLOG, HTTP_LIMITS, OncePerMinute, make_app
from .attachments import Attachment
from .attachments.gpu import GpuAttachment, GpuStreams
from .attachments.history import HistoryAttachment
from .attachments.ledger import LedgerAttachment
from .attachments.probe import ProbeAttachment
from .supervise import SOURCE_CHECK_EVERY, Supervisor, Unstarted
from .target import Target

TICK = 0.5
SLOW_CHECK_EVERY = 5.0
# checkpoint files written a second at most, all targets together: each write (the state as
# JSON, a file, a rename in state_dir) is ~0.5-0.8 ms of a core here, so 500 targets at 5 s
# would be 100 a second; beyond 125 targets each checkpoints less often (500: every 20 s).
# A checkpoint only bounds what is read again after a kill -9; nothing is lost or alerted
# twice either way.
CHECKPOINTS_PER_SECOND = 25.0
ALERTING = (CrashSettled, Ready, Restarted, Stalled, PhaseChanged, Resumed, Degraded)  # the policy's


def pack_signature(cfg: TargetConfig) -> tuple[Any, ...]:
    """Changes when the target's pack files change (a reload restarts the target then)."""
    if cfg.rules == "auto":
        files = sorted(p for d in search_path() for p in Path(d).glob("*.yaml"))
    else:
        files = [resolve_pack_path(cfg.rules)]
        try:
            pack = load_pack(cfg.rules)
            files += [Path(r.source) for r in pack.rules]
        except PackError:
            pass
    sig = []
    for f in sorted(set(files)):
        try:
            st = f.stat()
            sig.append((str(f), st.st_mtime_ns, st.st_size))
        except OSError:
            sig.append((str(f), None, None))
    return tuple(sig)


class Daemon:
    """Every target of the config, the HTTP endpoint, the alert router, one ticker; what
    hangs off each target is `_attachments`, retries and outages are `Supervisor`'s.

    Long because: start, tick, reload and shutdown all walk the one table of targets."""

    def __init__(self, config: Config, config_path: str,
                 shard: tuple[int, int] | None = None) -> None:
        self.shard = shard
        self.config = select_shard(config, shard)
        self.config_path = config_path
        self.log = log.get("daemon")
        self.store = PositionStore(config.state_dir)
        self.pool = SSHPool()
        self.gpu_streams = GpuStreams(self.pool)   # one nvidia-smi per host, shared
        self.ledger = LedgerStore(config.state_dir)  # the launch ledger (SQLite)
        self.runners: dict[str, Target] = {}
        self.unstarted: dict[str, Unstarted] = {}   # could not be started: shown as `error`
        self.signatures: dict[str, tuple[Any, ...]] = {}
        self.stopping = False
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()
        self._site: web.TCPSite | None = None
        self._runner: web.AppRunner | None = None
        self.alerts: AlertRouter | None = None
        self.observers: list[Any] = []   # extra (runner, events) callbacks, e.g. the demo's
        self.state_lock: Any = None      # state/lock.py: one daemon per state_dir
        self.candidates: list[RulePack] = []
        self._slow_checked = 0.0
        self.supervisor = Supervisor(self._restart)   # retries, refused sources, outages
        self._sources_checked = 0.0
        self._pruned_at = -retention.EVERY    # the state of removed targets: at start, then
        self._pruning: asyncio.Task[None] | None = None   # every retention.pass_every s

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self._load_packs()
        self.alerts = AlertRouter(self.config, self.config.state_dir)
        await self.alerts.start()
        app = make_app(self)
        self._runner = web.AppRunner(app, access_log=None, **HTTP_LIMITS)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.config.listen_host, self.config.listen_port,
                                 backlog=HTTP_BACKLOG)
        await self._site.start()
        self._carry_renamed(self.config.targets)
        for t in self.config.targets:
            self._start_target(t)
        self.log.info("logwatch running", listen=f"http://{self.config.listen_host}:"
                      f"{self.config.listen_port}", targets=len(self.runners),
                      state_dir=str(self.config.state_dir))

    def _load_packs(self) -> None:
        self.candidates = [p for p in load_all_shipped() if p.detect]

    def _start_target(self, cfg: TargetConfig) -> None:
        try:
            runner = Target(cfg, store=self.store, candidates=self.candidates, pool=self.pool,
                            attachments=self._attachments(cfg), on_events=self._on_events,
                            checkpoint_interval=self.config.checkpoint_interval,
                            alert_marks=self.alerts.marks_of if self.alerts else None,
                            alert_pending=self.alerts.store.pending_of if self.alerts else None)
        except Exception as e:  # noqa: BLE001 - a broken target must not stop the others
            delay = self.supervisor.schedule_retry(cfg.name, clock.now())
            self.log.error("target not started", target=cfg.name, error=str(e),
                           retry_in=f"{delay:.0f}s")
            # down since its first failure, not its latest retry's (a target that has not
            # started for an hour said "down since" a minute ago after each retry)
            before = self.unstarted.get(cfg.name)
            self.unstarted[cfg.name] = Unstarted(cfg, str(e) or type(e).__name__,
                                                 before.at if before else clock.now())
            return
        self.unstarted.pop(cfg.name, None)
        if self.alerts is not None:   # what was alerted stays alerted, whatever file was lost
            self.alerts.adopt(runner.saved_alert_marks, runner.saved_alert_pending)
        self.runners[cfg.name] = runner
        self._spread_checkpoints()
        self.signatures[cfg.name] = pack_signature(cfg)
        runner.start()

    def _carry_renamed(self, starting: list[TargetConfig]) -> None:
        """A target renamed (its source once another name's) goes on from the old name's
        checkpoint, with its history (state/renames.py)."""
        try:
            moved = carry_renamed(self.config.state_dir, {t.name: t.source for t in starting},
                                  {t.name for t in self.config.targets})
        except OSError as e:     # (a read-only state_dir: the new name attaches afresh)
            self.log.warning("renamed targets' checkpoints not carried", error=str(e))
            return
        for old, new in moved.items():
            self.log.info("target renamed: its checkpoint goes with it", was=old, now=new)

    def _attachments(self, cfg: TargetConfig) -> list[Attachment]:
        """What hangs off each of the daemon's targets (app/attachments/), one line each."""
        gpu = GpuAttachment(self.gpu_streams)
        return [HistoryAttachment(self.config.state_dir, cfg.name, cfg.labels.get("model", "")),
                gpu, LedgerAttachment(self.ledger, cfg.name, power=gpu),
                ProbeAttachment(self.pool, on_result=self._on_probe)]

    async def _restart(self, cfg: TargetConfig) -> None:
        """Stop the target of that name (if running) and start it again from `cfg`."""
        await self._stop_target(cfg.name)
        self._start_target(cfg)

    async def _stop_target(self, name: str) -> None:
        self.unstarted.pop(name, None)
        runner = self.runners.pop(name, None)
        self.signatures.pop(name, None)
        if runner is not None:
            await runner.stop()
            self._spread_checkpoints()

    def _spread_checkpoints(self) -> None:
        """Each target's checkpoint interval: the configured one, longer when the targets
        together would write more than CHECKPOINTS_PER_SECOND files a second."""
        every = max(self.config.checkpoint_interval,
                    len(self.runners) / CHECKPOINTS_PER_SECOND)
        for r in self.runners.values():
            r.checkpoints.interval = every

    def _on_events(self, runner: Target, events: list[Event]) -> None:
        if self.alerts is not None and any(isinstance(e, ALERTING) for e in events):
            self.alerts.observe(runner.view(clock.now()), events)
        for observe in self.observers:
            observe(runner, events)

    def _on_probe(self, runner: Target) -> None:
        if self.alerts is not None:
            self.alerts.observe_probe(runner.view(clock.now()))

    def metric_sources(self) -> list[Target | Unstarted]:
        """The targets as /metrics reads them (each rendered again only when it changed);
        one that could not be started as such (`Unstarted`)."""
        return [*self.runners.values(), *self.unstarted.values()]

    def views(self, now: float) -> list[TargetView]:
        """Every target's snapshot: what /metrics, /api/status and the page show."""
        return [r.view(now) for r in self.metric_sources()]

    def history(self, target: str) -> list[dict[str, Any]] | None:
        """The launch ledger of a target (None: no such target)."""
        if target not in self.runners and all(t.name != target for t in self.config.targets):
            return None
        return self.ledger.as_json(target)

    def alert_stats(self) -> AlertRouter | None:
        return self.alerts

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        self._reload.set()

    async def serve(self) -> None:
        """Tick until asked to stop; reload on request."""
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=TICK)
            except asyncio.TimeoutError:
                pass
            now = clock.now()
            for r in list(self.runners.values()):
                try:
                    r.tick(now)     # its events reach _on_events through the runner
                except Exception as e:  # noqa: BLE001
                    self.log.exception("tick failed", target=r.name, error=repr(e))
            if self.alerts is not None:
                # a page delivered or given up: its target's checkpoint is written again
                # without it (a crashed server writes no line to make one)
                for name in self.alerts.store.take_pending_changed():
                    if (r := self.runners.get(name)) is not None:
                        r.checkpoints.dirty = True
            if self.alerts is not None and now - self._slow_checked >= SLOW_CHECK_EVERY:
                self._slow_checked = now
                # only a startup under way can be slow: no view of the serving ones (500
                # targets' views every 5 s were 3% of a core)
                starting = [r for r in list(self.runners.values()) if r.starting()]
                self.alerts.tick([r.view(now) for r in starting],
                                 {r.name: r.cfg.slow_factor for r in starting})
            if self.supervisor.pending(self.runners):
                await self.supervisor.retry_failed(self.runners, self.config.targets, now)
            if now - self._sources_checked >= SOURCE_CHECK_EVERY:
                self._sources_checked = now
                clockfile.save(self.config.state_dir)   # a step being taken up: for a restart
                if self.alerts is not None:
                    self.supervisor.check_sources(self.runners, self.alerts, now)
                await self.supervisor.retry_refused(self.runners, self.config.targets, now)
            if self._reload.is_set():
                self._reload.clear()
                await self.reload()
            if time.monotonic() - self._pruned_at >= retention.pass_every(
                    self.config.state_retention) and self._pruning is None:
                self._pruned_at = time.monotonic()
                self._pruning = asyncio.create_task(prune_state(self))

    async def reload(self) -> None:
        try:
            new = select_shard(load_config(self.config_path), self.shard)
        except (ConfigError, PackError) as e:
            self.log.error("reload failed: keeping the running config", error=str(e))
            return
        if (new.listen_host, new.listen_port) != (self.config.listen_host, self.config.listen_port):
            self.log.warning("listen address changes need a restart; keeping the old one")
            # kept everywhere: the alerts' links, and the next reload's comparison
            new = dataclasses.replace(new, listen_host=self.config.listen_host,
                                      listen_port=self.config.listen_port)
        if new.log_level != self.config.log_level:
            self.log.warning("log_level changes need a restart; keeping the old one")
            new = dataclasses.replace(new, log_level=self.config.log_level)
        if new.state_dir != self.config.state_dir:
            self.log.warning("state_dir changes need a restart; keeping the old one")
            new = dataclasses.replace(new, state_dir=self.config.state_dir)
        self._load_packs()
        old = {t.name: t for t in self.config.targets}
        fresh = {t.name: t for t in new.targets}
        removed = [n for n in old if n not in fresh]
        added = [n for n in fresh if n not in old]
        changed = [n for n in fresh if n in old and n in self.runners and
                   (fresh[n] != old[n] or pack_signature(fresh[n]) != self.signatures.get(n))]
        self.config = new
        going = [n for n in removed + changed if n in self.runners]
        for n in going:                # their last checkpoints say all they read (as at a
            self.runners[n].halt_reading()   # stop): a renamed one goes on from there
        if going and self.alerts is not None:
            await self.alerts.saved()
        for n in removed + changed:
            await self._stop_target(n)
        self.supervisor.forget(removed)
        if self.alerts is not None:   # before the targets start: a renamed one's open
            self.alerts.reconfigure(new)   # alerts are its own before it reads its log
        self._carry_renamed([fresh[n] for n in added])
        for n in changed + added:
            self._start_target(fresh[n])
        for n in fresh:  # a target that failed to start before gets another try (one: an
            if n not in self.runners and n not in changed + added:   # added one was tried)
                self._start_target(fresh[n])
        refused = await self.supervisor.retry_refused(   # the key may be fixed
            self.runners, self.config.targets, clock.now(), force=True)
        if self.alerts is not None:   # what the reload did to the outbox is on disk when said
            await self.alerts.saved()
        self.log.info("reloaded", added=added, removed=removed, restarted=changed,
                      retried=refused, targets=len(self.runners))

    async def shutdown(self) -> None:
        self.stopping = True
        # every target stops reading first: 60 logs written faster than the daemon reads
        # kept the loop busy with their lines, and the stops below, one after another each
        # behind a round of them, took over 30 s (systemd's kill -9 before the checkpoints)
        for r in self.runners.values():
            r.halt_reading()
        if self._pruning is not None:
            await asyncio.wait([self._pruning])    # (its ledger part needs the worker)
        if self.alerts is not None:      # the targets' last checkpoints carry their marks
            await self.alerts.saved()
        for name in list(self.runners):
            await self._stop_target(name)
        await self.gpu_streams.close()
        self.ledger.close()
        if self.alerts is not None:
            await self.alerts.stop()
        await self.pool.close()
        if self._runner is not None:
            await self._runner.cleanup()
        clockfile.save(self.config.state_dir)
        self.log.info("logwatch stopped")


async def prune_state(daemon: Daemon) -> None:
    """What state_dir keeps of targets no longer in the config, past `state_retention`:
    removed off the event loop (state/retention.py), said once per pass."""
    cfg = daemon.config
    try:
        gone = await asyncio.to_thread(
            retention.prune, Path(cfg.state_dir).expanduser(), {t.name for t in cfg.targets},
            cfg.state_retention, clock.now(), daemon.ledger.forget_unwatched)
        if gone:
            marks = (outbox.forget_marks(daemon.alerts.store, set(gone))
                     if daemon.alerts is not None else 0)
            daemon.log.info("state of targets no longer watched removed (state_retention)",
                            targets=len(gone), names=gone[:20], alert_marks=marks,
                            retention=f"{cfg.state_retention / 86400:g}d")
    except Exception as e:  # noqa: BLE001 - housekeeping never stops the daemon
        daemon.log.error("pruning the state of removed targets failed", error=repr(e))
    finally:
        daemon._pruning = None


# the stores whose files a newer logwatch may have written (a rollback): refused at start
STATE_FORMATS = [position_store.FORMAT, outbox.FORMAT, history_store.FORMAT]


def _descriptors(daemon: Daemon) -> None:
    """Raise the soft descriptor limit to the hard one (a shell's 1,024 stops a daemon at
    ~1,000 targets or idle connections; the shipped unit sets LimitNOFILE=65536), and say so
    when the targets would not fit anyway."""
    before, soft, hard = raise_nofile()
    if soft > before:
        daemon.log.info("file descriptor limit raised", soft=soft, was=before, hard=hard)
    note = nofile_note(soft, [t.kind for t in daemon.config.targets])
    if note:
        daemon.log.warning(note, soft=soft, hard=hard)


def _config_notes(daemon: Daemon) -> None:
    """What the config allows but will regret, said once at start (`--check` says it too):
    a sink's `max_attempts` that gives up a page minutes into a receiver's outage."""
    for note in max_attempts_notes(daemon.config.path, daemon.config.alerts):
        daemon.log.warning(note)


async def run_daemon(config_path: str, shard: tuple[int, int] | None = None) -> int:
    try:
        cfg = load_config(config_path)
    except (ConfigError, PackError) as e:
        print(f"logwatch: {e}", flush=True, file=__import__("sys").stderr)
        return Exit.USAGE
    log.setup(cfg.log_level)
    try:
        lock = hold_state_dir(cfg.state_dir)   # held (open) until the process ends
        check_formats(cfg.state_dir, STATE_FORMATS)   # before any store reads (and sets aside)
        clockfile.adopt(cfg.state_dir)   # the clock the saved times are on (a step taken up)
    except (StateDirInUse, StateDirNewer) as e:
        print(f"logwatch: {e}", flush=True, file=__import__("sys").stderr)
        return Exit.USAGE
    daemon = Daemon(cfg, config_path, shard)
    daemon.state_lock = lock
    if lock is None:
        daemon.log.warning("state_dir cannot be written: running from memory (no positions, "
                           "launch ledger or alert marks kept across a restart)",
                           state_dir=str(cfg.state_dir))
    if shard is not None:
        daemon.log.info("sharded", shard=f"{shard[0]}/{shard[1]}",
                        targets=len(daemon.config.targets), of=len(cfg.targets))
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(OncePerMinute(log.get("asyncio")))
    _descriptors(daemon)
    _config_notes(daemon)
    for sig, handler in ((signal.SIGHUP, daemon.request_reload),
                         (signal.SIGTERM, daemon.request_stop),
                         (signal.SIGINT, daemon.request_stop)):
        loop.add_signal_handler(sig, handler)
    try:
        await daemon.start()
    except OSError as e:
        why = (os.strerror(e.errno) if e.errno and e.errno > 0 else e.strerror) or e
        print(f"logwatch: {config_path}: listen: cannot listen on {cfg.listen_host}:"
              f"{cfg.listen_port}: {why}", file=__import__("sys").stderr, flush=True)
        await daemon.shutdown()
        return Exit.USAGE
    try:
        await daemon.serve()
    finally:
        await daemon.shutdown()
    return Exit.OK
