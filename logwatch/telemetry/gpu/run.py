"""One run of nvidia-smi: read it under the watchdog (`read_run`), then say what its end
means (`classify_run`, pure and table-driven).

Why apart from the stream: the stream only keeps state and waits; which ends restart soon
(a hang, an exit, a lost connection), which wait minutes (nothing to gain from restarting:
no nvidia-smi, no GPUs, no driver, a refused field) and which switch to the minimal field
set at once are facts of nvidia-smi, tested here with plain `RunEnd`s.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Callable

import asyncssh

from ...sources.sshfail import FatalSSH
from ...units import fmt_duration
from .parse import GpuCsvParser
from .proc import Missing, Proc
from .query import MINIMAL_FIELDS, invalid_field
from .sample import GpuSnapshot

STATUS_MISSING = "no nvidia-smi on host"
STATUS_HUNG = "nvidia-smi hung: restarted"
# nvidia-smi is there but has nothing to report: a host without GPUs (exit 6) or whose driver
# is not loaded (exit 9).  Waiting minutes, like a missing command: restarting will not help.
STATUS_NO_GPUS = "no GPUs on host"
STATUS_NO_DRIVER = "NVIDIA driver not loaded"
# nvidia-smi hung `HANGS_BEFORE_WAIT` runs in a row without a sample: a wedged driver (in D
# state it cannot even be killed, and over SSH each killed run may stay on the node); a new
# one every ~45 s for ever changed nothing but the count of stuck processes (helper adv24 M6)
STATUS_WEDGED = "driver not answering: nvidia-smi hangs"
HANGS_BEFORE_WAIT = 3
READ_SIZE = 64 * 1024
HEAD_BYTES = 4096          # the output kept to read an error from
# what shells print for a missing command: bash `command not found`, dash `sh: 1: X: not found`,
# a missing path `No such file or directory`
_NOT_FOUND_RE = re.compile(r"command not found|: not found|No such file or directory")
_NO_DEVICES_RE = re.compile(r"No devices were found")
_NO_DRIVER_RE = re.compile(r"couldn't communicate with the NVIDIA driver")
# sshd's `ForceCommand internal-sftp` (an account for file transfer only): logs are read over
# SFTP, and no command runs there
_SFTP_ONLY_RE = re.compile(r"refusing non-sftp session|allows sftp connections only")
# the ends that a restart in a minute will not mend (helper adv24 L6): a driver upgraded
# without a reboot (exit 18), no libnvidia-ml (exit 12), a sudo that asks for a password
_MISMATCH_RE = re.compile(r"Driver/library version mismatch")
_NO_NVML_RE = re.compile(r"couldn't find libnvidia-ml|NVML Shared Library Not Found")
_SUDO_RE = re.compile(r"sudo: (a password is required|a terminal is required)")

# what a run's end is called in `RunVerdict.action`
FALLBACK = "fallback"      # at once again, with MINIMAL_FIELDS
WAIT = "wait"              # the long wait: restarting soon would change nothing
RESTART = "restart"        # after the short backoff


@dataclass
class RunEnd:
    """How a run ended: its exit status, whether the watchdog killed it, its first output."""

    code: int | None = None
    hung: bool = False
    head: bytes = b""
    samples: int = 0
    lost: str | None = None   # the SSH connection failed mid-run


@dataclass(frozen=True)
class RunVerdict:
    """What a finished run means: `action` (FALLBACK / WAIT / RESTART), the stream's short
    `status` and the longer `why`; `kind` names the restart ("hung", "lost", "exited") or the
    refused `field`."""

    action: str
    status: str
    why: str
    kind: str = ""
    field: str | None = None


# (matches(end, head), status, the exit status named when the output says nothing): the ends
# that wait minutes, in order.  `{cmd}` is the command's first word.
_Match = Callable[[RunEnd, str], bool]
_WAITS: tuple[tuple[_Match, str, int | None], ...] = (
    (lambda e, h: e.code == 127 or (e.code not in (0, None) and not e.samples
                                    and bool(_NOT_FOUND_RE.search(h))), STATUS_MISSING, 127),
    (lambda e, h: e.code == 126 and not e.samples, "cannot run {cmd}: permission denied", 126),
    (lambda e, h: not e.samples and (e.code == 6 or bool(_NO_DEVICES_RE.search(h))),
     STATUS_NO_GPUS, None),
    (lambda e, h: not e.samples and (e.code == 9 or bool(_NO_DRIVER_RE.search(h))),
     STATUS_NO_DRIVER, None),
    (lambda e, h: not e.samples and bool(_SFTP_ONLY_RE.search(h)),
     "the SSH account allows SFTP only: no nvidia-smi", None),
    (lambda e, h: not e.samples and (e.code == 18 or bool(_MISMATCH_RE.search(h))),
     "NVIDIA driver/library version mismatch: reboot, or reload the driver", 18),
    (lambda e, h: not e.samples and (e.code == 12 or bool(_NO_NVML_RE.search(h))),
     "no libnvidia-ml on host: the NVIDIA driver is not installed right", 12),
    (lambda e, h: not e.samples and bool(_SUDO_RE.search(h)),
     "{cmd}: sudo asks for a password (a NOPASSWD rule for nvidia-smi?)", None),
)


def classify_run(end: RunEnd, cmd: str, fields: tuple[str, ...], timeout: float) -> RunVerdict:
    """What `end` means for a stream asking `fields` with watchdog `timeout`."""
    head = end.head.decode("utf-8", "replace")
    first = next((ln.strip() for ln in head.splitlines() if ln.strip()), "")
    bad = invalid_field(head) if end.code == 2 else None
    if bad is not None:
        if fields != MINIMAL_FIELDS and bad not in MINIMAL_FIELDS:
            return RunVerdict(FALLBACK, "old driver: asking for the minimal field set",
                              f'the driver does not know "{bad}"', field=bad)
        return RunVerdict(WAIT, f'nvidia-smi rejects field "{bad}"',
                          f'nvidia-smi rejects the field "{bad}" (fields: {",".join(fields)})',
                          field=bad)
    for matches, status, code in _WAITS:
        if matches(end, head):
            named = code if code is not None else end.code
            return RunVerdict(WAIT, status.format(cmd=cmd), first or f"{cmd}: exit status {named}")
    said = said_instead(head) if not end.samples else ""
    if end.hung and said:
        return RunVerdict(RESTART, f"nvidia-smi: {said[:120]}",
                          f"no sample for {fmt_duration(timeout)}, only: {said[:300]}",
                          kind="hung")
    if end.hung:
        return RunVerdict(RESTART, STATUS_HUNG, f"no sample for {fmt_duration(timeout)}: killed",
                          kind="hung")
    if end.lost is not None:
        return RunVerdict(RESTART, "connection lost", end.lost, kind="lost")
    why = f"exited with {end.code}" + (f": {first[:200]}" if first else "")
    return RunVerdict(RESTART, f"nvidia-smi {why[:120]}", why, kind="exited")


def said_instead(head: str) -> str:
    """The last line nvidia-smi printed that is neither a row nor the header (`Unable to
    determine the device handle for GPU0000:18:00.0: Unknown Error` for every GPU lost):
    what the status says of a run that printed no row, rather than "hung"."""
    lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
    said = [ln for ln in lines if ", " not in ln and not ln[:1].isdigit()]
    return said[-1] if said else ""


#: What failing to start a run can be (`classify_start`); anything else is a bug, raised.
START_ERRORS = (Missing, OSError, asyncssh.Error, asyncio.TimeoutError, FatalSSH)


def classify_start(e: BaseException, cmd: str, explain: Callable[[BaseException], str] | None
                   ) -> RunVerdict:
    """What a failure to start a run means (`explain`: the SSH explanation of a remote
    stream's error, None for a local one).  No command, no permission, a refused host key or
    login, another fatal SSH cause (a key file that cannot be used, ...), a session refused on
    a live connection: the long wait (`kind` "quiet" where the log target's own source says
    it already); any other connection or start error: a restart after the short backoff."""
    if isinstance(e, Missing):
        return RunVerdict(WAIT, STATUS_MISSING, f"{cmd}: command not found")
    if isinstance(e, PermissionError):
        return RunVerdict(WAIT, f"cannot run {cmd}: permission denied",
                          f"cannot run {cmd}: {e.strerror}")
    if explain is not None and isinstance(e, (asyncssh.HostKeyNotVerifiable,
                                              asyncssh.PermissionDenied, FatalSSH)):
        return RunVerdict(WAIT, "cannot connect", explain(e), kind="quiet")
    if explain is not None and isinstance(e, asyncssh.ChannelOpenError):
        # connected, and the session refused: sshd's MaxSessions (1 on some hardened nodes)
        # taken by the log's reader; it will not free up in a second
        return RunVerdict(WAIT, "the node refuses another SSH session",
                          f"the node's sshd refused a session for {cmd} ({e.reason}): is its "
                          "MaxSessions taken by the log's reader? (OpenSSH's default is 10)")
    why = explain(e) if explain is not None else f"{type(e).__name__}: {e}"
    return RunVerdict(RESTART, "cannot connect" if explain is not None else f"cannot run {cmd}",
                      why, kind="start")


def _deadline(parser: GpuCsvParser, timeout: float, first_timeout: float | None) -> float:
    """The watchdog's: `first_timeout` until the first header or row, `timeout` after."""
    started = parser.rows or parser.headers
    return timeout if started else max(timeout, first_timeout or timeout)


async def read_run(proc: Proc, parser: GpuCsvParser, *, timeout: float, interval: float,
                   publish: Callable[[GpuSnapshot], None], closed: Callable[[], bool],
                   explain: Callable[[BaseException], str],
                   first_timeout: float | None = None) -> RunEnd:
    """Read one process until it ends, `closed()` or the watchdog fires (`_deadline`); each
    snapshot goes to `publish`.  A pause of half the interval (0.05-1 s) completes the first
    loop (`parser.flush`); later ones complete at their highest index (a slow GPU's late row
    is waited for, not split off)."""
    end = RunEnd()
    head = bytearray()
    loop = asyncio.get_running_loop()
    last_useful = loop.time()
    settle = min(1.0, max(0.05, interval / 2))

    def out(snaps: list[GpuSnapshot]) -> None:
        for snap in snaps:
            publish(snap)
            end.samples += 1

    reader: asyncio.Future[bytes] = asyncio.ensure_future(proc.read(READ_SIZE))
    try:
        while not closed():
            left = _deadline(parser, timeout, first_timeout) - (loop.time() - last_useful)
            if left <= 0:
                end.hung = True
                break
            waiting = parser.pending and not parser.has_partial_line and not parser.loop_known
            done, _ = await asyncio.wait({reader}, timeout=min(left, settle) if waiting else left)
            if not done:
                if waiting:
                    snap = parser.flush()
                    out([snap] if snap is not None else [])
                continue
            try:
                chunk = reader.result()
            except (OSError, asyncssh.Error, EOFError) as e:
                end.lost = explain(e)
                break
            if not chunk:
                break
            if len(head) < HEAD_BYTES:
                head += chunk[: HEAD_BYTES - len(head)]
            before = (parser.rows, parser.headers)
            out(parser.feed(chunk))
            if (parser.rows, parser.headers) != before:
                last_useful = loop.time()
            reader = asyncio.ensure_future(proc.read(READ_SIZE))
        if not end.hung and not closed():
            out(parser.finish())
    finally:
        if not reader.done():
            reader.cancel()
    end.head = bytes(head)
    if end.hung or closed() or end.lost is not None:
        proc.kill()
    try:
        end.code = await asyncio.wait_for(proc.wait(), 5.0)
    except (asyncio.TimeoutError, OSError, asyncssh.Error):
        end.code = None
    return end
