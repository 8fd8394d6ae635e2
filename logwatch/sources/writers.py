"""Which live processes write a local file, and since when (Linux `/proc`).

`watch` attached seconds after a crash cannot tell from the bytes whether the operator has
already relaunched into the same log: an appending relaunch (`>> server.log`, `nohup`)
prints nothing for the seconds its imports take, and the log's latest startup is the one
that just crashed.  The processes holding the file open for writing can tell: the
relaunched server (or the `tee` it writes through) started after that crash.  Only a
process of our own user is visible; where /proc is not there, nothing is found.
"""

from __future__ import annotations

import os
import time

O_ACCMODE = 0o3


def _boot_time() -> float:
    """This machine's boot on the wall clock: process start times count from it (in
    CLOCK_BOOTTIME, as /proc/uptime does; /proc/stat's `btime` is whole seconds only)."""
    with open("/proc/uptime", encoding="ascii") as f:
        return time.time() - float(f.read().split()[0])


def _started(pid: str, boot: float, tick: int) -> float | None:
    """A process's start on the wall clock (`starttime`, field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return boot + int(fields[19]) / tick
    except (OSError, IndexError, ValueError):
        return None


def _writes(pid: str, fd: str) -> bool:
    """The descriptor was opened for writing (fdinfo's `flags`, octal)."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
            for line in f:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & O_ACCMODE != os.O_RDONLY
    except (OSError, ValueError, IndexError):
        pass
    return False


def file_writers(dev: int, ino: int) -> list[tuple[int, float]]:
    """(pid, start time on the wall clock) of each live process with the file dev:ino open
    for writing, as far as /proc shows them; [] where it shows none or is not there."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        boot, tick = _boot_time(), os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return []
    me = str(os.getpid())
    out: list[tuple[int, float]] = []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue            # gone, or another user's
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if st.st_ino != ino or st.st_dev != dev or not _writes(pid, fd):
                continue
            start = _started(pid, boot, tick)
            if start is not None:
                out.append((int(pid), start))
            break
    return out


def relaunched_writer(dev: int | None, ino: int | None, ended_at: float,
                      alive: bool) -> int | None:
    """The pid of a process that writes the file and started after `ended_at` (the wall
    time of the log's latest verdict): a relaunch that has not printed yet.  `alive`: that
    verdict leaves its server up (ready), so only where no writer started before it (the
    old server gone); a crashed server's own processes, still exiting, do not count."""
    if dev is None or ino is None:
        return None
    found = file_writers(dev, ino)
    newer = [pid for pid, start in found if start > ended_at]
    if not newer or alive and len(newer) < len(found):
        return None
    return min(newer)
