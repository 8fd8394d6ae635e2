"""Bounds on what comes from outside (issue 29): counts of what was refused, and the file
descriptor limit the daemon needs.

A node, a log or a client of the HTTP endpoint may send more than any honest one would: a
reader frame announcing 100 GB, a line without end, thousands of idle connections.  Each
buffer that holds remote bytes has a cap (sources/sshstream.py: a frame, a header line);
what exceeds it is dropped and counted here (`REFUSED`, `logwatch_refused_total{what}`).

Descriptors: every local target holds its log open, every SSH host a socket, every HTTP
client one; the kernel's default soft limit (1,024) stops a daemon at ~1,000 targets or
~1,000 idle connections to /healthz.  `raise_nofile` lifts the soft limit to the hard one
at start (the shipped systemd unit sets both to 65,536: `LimitNOFILE=65536`); `nofile_note`
says when the targets would not fit anyway.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

# descriptors one target needs, by kind: the log file (and a rotated one being drained), a
# probe's socket; a command's pipes and process; an SSH host's socket is shared (counted
# once per target to stay on the safe side)
FDS_PER_TARGET = {"file": 3, "ssh": 2, "command": 5, "stdin": 1}
FDS_BASE = 512          # the daemon itself: HTTP clients, alert deliveries, state files, GPU


class Refused:
    """What was refused for exceeding a bound, by kind (a process-wide count)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def count(self, what: str) -> None:
        self.counts[what] += 1


REFUSED = Refused()


def raise_nofile(cap: int = 1 << 20) -> tuple[int, int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (at most `cap`); returns
    (soft before, soft now, hard).  Nothing to do (or not allowed) leaves it as it was."""
    try:
        import resource
    except ImportError:   # pragma: no cover - not POSIX
        return (0, 0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else cap
    want = min(want, cap)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            return soft, soft, hard
        return soft, want, hard
    return soft, soft, hard


def fds_needed(kinds: Iterable[str]) -> int:
    """Descriptors a daemon with targets of these kinds needs, roughly (an upper bound)."""
    return FDS_BASE + sum(FDS_PER_TARGET.get(k, 3) for k in kinds)


def nofile_note(soft: int, kinds: Iterable[str]) -> str | None:
    """A warning when the targets would not fit in `soft` descriptors (None when they do)."""
    kinds = list(kinds)
    need = fds_needed(kinds)
    if soft <= 0 or need <= soft:
        return None
    return (f"{len(kinds)} targets need about {need} file descriptors and the limit is "
            f"{soft}: raise it (systemd: LimitNOFILE=65536; a shell: ulimit -n 65536)")
