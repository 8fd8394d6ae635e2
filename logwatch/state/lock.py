"""One daemon per state_dir: a lock held for the daemon's life.

Two daemons on one `state_dir` (two configs on a host both take the default,
`~/.local/state/logwatch`) overwrite each other's positions, launch ledger and alert marks:
the second one, not knowing the first had judged an hour-old crash history, paged it.  The
second is refused at its start instead, naming the first's pid.  An advisory `flock` on
`state_dir/daemon.lock`: the kernel drops it when the process dies (kill -9 too), so a
stale lock file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_NAME = "daemon.lock"


class StateDirInUse(Exception):
    """Another live process holds the state_dir's lock."""


def hold_state_dir(state_dir: Path) -> IO[str] | None:
    """Take the state_dir's lock for this process (keep the returned file open: closing it
    releases the lock).  None where the directory cannot be written (a read-only or full
    disk: the daemon goes on from memory, as for any other state write); StateDirInUse
    (naming the holder's pid) where another process holds it."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        f = open(state_dir / LOCK_NAME, "a+", encoding="utf-8")
    except OSError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read(32).strip() or "?"
        f.close()
        raise StateDirInUse(f"state_dir {state_dir} is in use by another logwatch daemon "
                            f"(pid {holder}); give each daemon (and each --shard on one "
                            "host) its own state_dir") from None
    except OSError:
        f.close()
        return None
    try:
        f.truncate(0)
        f.write(f"{os.getpid()}\n")
        f.flush()
    except OSError:
        pass
    return f
