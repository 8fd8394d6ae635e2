"""`GpuStream`: one `nvidia-smi --query-gpu ... -l N` per host, kept running (issue 14).

Why `nvidia-smi` and nothing else: every GPU node has it, it needs no daemon, no privilege and
no install (DCGM, nvitop and gpustat need one or the other), and it reports what the case
logwatch exists for needed: power draw against the *enforced* limit and the reasons the
clocks are held down ("250 W of 600 W, not power-capped": the GPUs are waiting, not limited).

The stream keeps state and waits; the rest is one file per job in this package: what is
asked (query.py), how the answer is read (parse.py), the samples (sample.py), the process
(proc.py), what a run's end means (run.py), the sharing per host (streams.py).  The contract
is written down in docs/architecture.md, section "GPU telemetry".
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ... import clock
from ... import log
from ...sources.ssh import Backoff, SSHOptions, SSHPool, SSHTarget, default_pool, explain
from ...units import fmt_duration
from .config import GpuConfig
from .parse import GpuCsvParser
from .proc import Proc, spawn
from .query import FULL_FIELDS, MINIMAL_FIELDS, query_args
from .run import (
    FALLBACK, HANGS_BEFORE_WAIT, RESTART, START_ERRORS, STATUS_MISSING, STATUS_WEDGED, RunEnd,
    classify_run, classify_start,
    read_run,
)
from .sample import GpuSnapshot, gone_gpus, learn_idle
from .summary import gpu_summary

HISTORY = 120                 # total-power points kept for the sparkline (4 min at 2 s)
SNAPSHOTS = 300               # snapshots kept for the silence verdict (10 min at 2 s, 1 min
                              # at 200 ms: it reads the last minute of a silence at most)
PTY_SETTLE = 1.0              # seconds a remote nvidia-smi runs before stop() hangs up its pty


@dataclass
class GpuCounters:
    """Totals over the stream's life (for logs, /api/status and benchmarks)."""

    restarts: int = 0         # process restarts after a hang, an exit or a lost connection
    hangs: int = 0            # watchdog kills
    fallbacks: int = 0        # switches to MINIMAL_FIELDS
    snapshots: int = 0
    skipped_lines: int = 0
    oversized_lines: int = 0
    starts: int = 0           # processes started



class GpuStream:
    """One `nvidia-smi --query-gpu=... --format=csv,nounits -l N` for one host, kept running.

    Read it, don't drive it: `latest` (the newest snapshot, kept while down: check `up`),
    `power_history` (total watts, the last HISTORY snapshots), `up`, `status` (a short human
    line: "8 GPUs", "no nvidia-smi on host", "nvidia-smi hung: restarted", ...), `error` (the
    longer reason), `counters`, `fields` (the set in use; `minimal` after a fallback),
    `next_retry_in()` while waiting to retry.

    Remote streams run on the host's connection from the SSHPool (the log target's own) as one
    session held for the stream's life.  They do not take `pool.exec_slot`: that semaphore
    bounds short commands (the startup grep); a stream holding a slot forever would starve
    them.  So a host with streams uses at most exec slots + SFTP + 1 sessions (6 of OpenSSH's
    default MaxSessions 10).

    Failure policy: what a failed start or a finished run means is decided in run.py
    (`classify_start`, `classify_run`); the stream acts on it: at once to MINIMAL_FIELDS, the
    short backoff (1 s doubling to 60 s, reset after `healthy_after` of samples) or the long
    wait (1 min doubling to 5 min) with `status` saying why, said once; after
    `HANGS_BEFORE_WAIT` hangs in a row without a sample, the long wait too (`STATUS_WEDGED`).

    Long because: its state and its asyncio life (start, stop, the loop, the waits) are one
    thing; what can be pure (parsing, the failure tables, the arithmetic) lives beside it.
    """

    def __init__(self, config: GpuConfig, *, ssh: tuple[SSHTarget, SSHOptions] | None = None,
                 pool: SSHPool | None = None, history: int = HISTORY,
                 clock: Callable[[], float] = clock.now,
                 retry: tuple[float, float] = (1.0, 60.0),
                 missing_retry: tuple[float, float] = (60.0, 300.0),
                 healthy_after: float = 60.0) -> None:
        self.config = config
        self.ssh = ssh
        self.pool = pool if pool is not None or ssh is None else default_pool()
        self.host = ("local" if ssh is None else
                     f"{ssh[0].user + '@' if ssh[0].user else ''}{ssh[0].host}"
                     f"{':' + str(ssh[0].port) if ssh[0].port else ''}")
        self.clock = clock
        self.log = log.get("source.gpu").bind(host=self.host)
        self.latest: GpuSnapshot | None = None
        self.power_history: deque[tuple[float, float]] = deque(maxlen=history)
        # total memory used of the host's GPUs: memory still moving in a silent phase is
        # loading (see silence.py for the verdict on a silence)
        self.memory_history: deque[tuple[float, float]] = deque(maxlen=history)
        # every GPU's samples (the silence verdict reads them per GPU: silence.py), and each
        # GPU's idle power: the lowest it drew at utilisation <= IDLE_UTIL since the start
        self.snapshots: deque[GpuSnapshot] = deque(maxlen=max(history, SNAPSHOTS))
        self.idle_w: dict[int, float] = {}
        self.seen_gpus: set[int] = set()  # every GPU index a loop has reported
        self.missing: list[str] = []      # GPUs gone: "GPU 3", or nvidia-smi's line for one
        self.up = False
        self.status = "starting nvidia-smi"
        self.error: str | None = None
        self.fields: tuple[str, ...] = FULL_FIELDS
        self.counters = GpuCounters()
        self.version = 0                  # +1 per snapshot and per status change
        self._retry = Backoff(base=retry[0], cap=retry[1])
        self._missing = Backoff(base=missing_retry[0], cap=missing_retry[1])
        self._healthy_after = healthy_after
        self._retry_at: float | None = None
        self._proc: Proc | None = None
        self._proc_started = 0.0          # monotonic time of its start
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._pty = True                  # remote: run on a pty (see proc.RemoteProc)
        self._hung_in_row = 0             # runs hung without a sample, in a row

    # -- what readers use ------------------------------------------------------------------

    @property
    def minimal(self) -> bool:
        """True after the driver rejected a field and the stream fell back."""
        return self.fields == MINIMAL_FIELDS

    @property
    def pid(self) -> int | None:
        """The local nvidia-smi's pid (None when remote or not running)."""
        return self._proc.pid if self._proc is not None else None

    def power_values(self) -> list[float]:
        """Total watts of the last snapshots, oldest first (the sparkline's points)."""
        return [w for _, w in self.power_history]

    def next_retry_in(self) -> float | None:
        """Seconds until the next start while waiting after a failure (None otherwise)."""
        if self._retry_at is None:
            return None
        return max(0.0, self._retry_at - time.monotonic())

    def summary(self) -> str:
        """The panel's line while up; the status otherwise."""
        return gpu_summary(self.latest) if self.up and self.latest else f"GPU: {self.status}"

    def to_dict(self) -> dict[str, Any]:
        """For /api/status: state and the latest snapshot (None while down)."""
        return {"host": self.host, "up": self.up, "status": self.status, "error": self.error,
                "fields": "minimal" if self.minimal else "full",
                "restarts": self.counters.restarts,
                "snapshot": ({**self.latest.to_dict(), "summary": gpu_summary(self.latest)}
                             if self.up and self.latest else None),
                "power_history_w": self.power_values(),
                "memory_history": [[round(t, 1), m] for t, m in self.memory_history],
                "idle_w": {str(i): round(w, 1) for i, w in sorted(self.idle_w.items())},
                "missing": list(self.missing)}

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the stream's task (needs a running event loop); idempotent."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._main(),
                                                                name=f"gpu:{self.host}")

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop and kill nvidia-smi; waits for the task (cancels it after `timeout`)."""
        self._closed = True
        self._wake.set()
        if self._proc is not None:
            if self._pty and self.ssh is not None:
                # sshd answers the exec request once it has forked; its child takes the pty
                # as its terminal a moment later.  A pty hung up before that signals nothing,
                # and a hung nvidia-smi would run on there: 9 of 40 stops right after a start
                # left one, on a loaded host
                await asyncio.sleep(max(0.0, PTY_SETTLE - (time.monotonic() -
                                                          self._proc_started)))
            if self._proc is not None:
                self._proc.kill()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(task, timeout)
            except asyncio.TimeoutError:
                pass
            except Exception as e:  # noqa: BLE001 - already logged by _main
                self.log.debug("gpu stream ended with an error", error=repr(e))
        self._set(False, "stopped")

    # -- internals -------------------------------------------------------------------------

    def _set(self, up: bool, status: str, error: str | None = None) -> None:
        if (up, status, error) != (self.up, self.status, self.error):
            self.up, self.status, self.error = up, status, error
            self.version += 1

    def _publish(self, snap: GpuSnapshot) -> None:
        self.missing = gone_gpus(self.seen_gpus, self.latest, snap)
        self.latest = snap
        total = snap.total_power_w
        if total is not None:
            self.power_history.append((snap.at, total))
        mem = [g.mem_used_bytes for g in snap.gpus if g.mem_used_bytes is not None]
        if mem:
            self.memory_history.append((snap.at, float(sum(mem))))
        self.snapshots.append(snap)
        learn_idle(self.idle_w, snap)
        self.counters.snapshots += 1
        self.version += 1
        status = f"{snap.count} GPU{'s' if snap.count != 1 else ''}"
        if self.missing:
            status += f"; not answering: {'; '.join(self.missing)[:200]}"
        if self.minimal:
            status += " (minimal fields: old driver)"
        self._set(True, status)

    async def _sleep(self, seconds: float) -> None:
        self._retry_at = time.monotonic() + seconds
        try:
            with contextlib.suppress(TimeoutError):   # (not wait_for: it can drop a cancel)
                async with asyncio.timeout(seconds):
                    await self._wake.wait()
        finally:
            self._retry_at = None
        self._wake.clear()

    async def _main(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug here must not take the daemon down
            self.log.exception("gpu stream failed")
            self._set(False, "gpu telemetry failed", repr(e))
        finally:
            if self._proc is not None:
                self._proc.kill()
                self._proc = None

    async def _loop(self) -> None:
        cmd = self.config.argv[0] if self.config.argv else "nvidia-smi"
        while not self._closed:
            started = time.monotonic()
            try:
                argv = self.config.argv + query_args(self.fields, self.config.interval)
                self._proc, self._pty = await spawn(argv, self.ssh, self.pool, self._pty,
                                                    self.log)
                self._proc_started = time.monotonic()
            except START_ERRORS as e:
                v = classify_start(e, cmd, self._explain)
                if v.action != RESTART:
                    await self._wait_missing(v.why, v.status, quiet=v.kind == "quiet")
                    continue
                delay = self._retry.next()
                self._set(False, v.status, v.why)
                # over SSH the log's own source says why the host cannot be reached
                (self.log.debug if self.ssh else self.log.warning)(
                    "gpu: cannot start nvidia-smi", error=v.why, retry_in=round(delay, 1))
                await self._sleep(delay)
                continue
            self.counters.starts += 1
            proc = self._proc
            try:
                end = await self._read(proc)
            finally:
                proc.kill()
                self._proc = None
            if self._closed:
                return
            await self._after(end, cmd, time.monotonic() - started)

    async def _wait_missing(self, why: str, status: str = STATUS_MISSING,
                            quiet: bool = False) -> None:
        """`quiet`: the log target's own source reports the cause (a refused host key):
        said once there, not again here."""
        delay = self._missing.next()
        again = (self.up, self.status) == (False, status)   # said once, not at every retry
        self._set(False, status, why)
        (self.log.debug if quiet or again else self.log.warning)(
            "gpu: " + status, error=why, retry_in=fmt_duration(delay))
        await self._sleep(delay)

    async def _after(self, end: RunEnd, cmd: str, ran: float) -> None:
        """Act on what a finished run means (`run.classify_run`) and wait before the next."""
        if end.samples and ran > self._healthy_after:
            self._retry.reset()
        if end.samples:
            self._missing.reset()
        v = classify_run(end, cmd, self.fields, self.config.timeout)
        if v.action == FALLBACK:
            self.counters.fallbacks += 1
            self.fields = MINIMAL_FIELDS
            self._set(False, v.status, v.why)
            self.log.warning("gpu: nvidia-smi rejected a field; using the minimal set",
                             field=v.field, fields=",".join(MINIMAL_FIELDS))
            return  # at once: the process never ran a loop
        if v.action != RESTART:
            await self._wait_missing(v.why, status=v.status)
            return
        self._hung_in_row = self._hung_in_row + 1 if v.kind == "hung" and not end.samples \
            else 0
        if self._hung_in_row >= HANGS_BEFORE_WAIT:
            self.counters.hangs += 1
            await self._wait_missing(f"{v.why} ({self._hung_in_row} runs in a row)",
                                     STATUS_WEDGED)
            return
        self.counters.restarts += 1
        delay = self._retry.next()
        self._set(False, v.status, v.why)
        if v.kind == "hung":
            self.counters.hangs += 1
            self.log.warning("gpu: nvidia-smi hung; killed it", timeout=self.config.timeout,
                             restart_in=round(delay, 1), restarts=self.counters.restarts)
        elif v.kind == "lost":
            self.log.warning("gpu: connection lost", error=v.why, restart_in=round(delay, 1))
        else:
            self.log.warning("gpu: nvidia-smi exited", code=end.code, why=v.why[:200],
                             restart_in=round(delay, 1))
        await self._sleep(delay)

    def _explain_ssh(self, e: BaseException) -> str:
        assert self.ssh is not None
        return explain(e, *self.ssh)

    @property
    def _explain(self) -> Callable[[BaseException], str] | None:
        """The SSH explanation of an error (None: a local stream)."""
        return self._explain_ssh if self.ssh is not None else None

    async def _read(self, proc: Proc) -> RunEnd:
        """Read one process until it ends or the watchdog fires; publish its snapshots."""
        parser = GpuCsvParser(self.fields, clock=self.clock)
        try:
            return await read_run(
                proc, parser, timeout=self.config.timeout, interval=self.config.interval,
                first_timeout=self.config.first_timeout,
                publish=self._publish, closed=lambda: self._closed,
                explain=self._explain or repr)
        finally:
            self.counters.skipped_lines += parser.skipped
            self.counters.oversized_lines += parser.oversized
