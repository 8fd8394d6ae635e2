"""Latency of `watch` / the daemon: from a line appended to the log until it was processed.

A writer process appends N lines at a steady pace; each line carries the writer's
CLOCK_MONOTONIC time at the moment it was written (flushed).  The watcher (the real
source -> Follower -> LogPipeline path, local file or SSH through a local sshd) notes when
each line has gone through the pipeline.  Reported: p50 / p99 / max in milliseconds.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logwatch.follow import Follower  # noqa: E402
from logwatch.pipeline import LogPipeline  # noqa: E402
from logwatch.rules.pack import load_pack  # noqa: E402
from logwatch.sources.base import Data  # noqa: E402

WRITER = r"""
import sys, time
path, n, pace = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(path, "a") as f:
    t0 = time.monotonic()
    for i in range(1, n + 1):
        target = t0 + i * pace
        while time.monotonic() < target:
            time.sleep(min(0.002, max(0.0, target - time.monotonic())))
        f.write(f"[2026-12-02 10:00:00 TP0] latency probe {i:06d} t={time.monotonic():.6f}\n")
        f.flush()
"""


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


async def measure(source: Any, path: Path, n: int, pace: float) -> dict[str, float]:
    pack = load_pack("sglang")
    follower = Follower("bench", source, lambda p: LogPipeline(p), pack, [])
    lat: list[float] = []
    writer: subprocess.Popen[bytes] | None = None
    buf = b""
    deadline = time.monotonic() + n * pace + 60
    events = source.events()
    async for ev in events:
        follower.handle(ev)
        if writer is None and getattr(ev, "reason", None):
            writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n), str(pace)])
        if isinstance(ev, Data):
            now = time.monotonic()  # the data has been through the pipeline
            buf += ev.data
            *lines, buf = buf.split(b"\n")
            for ln in lines:
                _, _, t = ln.rpartition(b" t=")
                if t:
                    lat.append((now - float(t)) * 1000)
            if len(lat) >= n:
                break
        if time.monotonic() > deadline:
            break
    await events.aclose()
    await source.close()
    pool = getattr(source, "pool", None)
    if pool is not None:
        await pool.close()
    if writer is not None:
        writer.wait(timeout=30)
    if len(lat) < n:
        raise SystemExit(f"latency: only {len(lat)} of {n} lines arrived")
    return {"lines": len(lat), "p50_ms": round(statistics.median(lat), 2),
            "p99_ms": round(percentile(lat, 99), 2), "max_ms": round(max(lat), 2)}


def local(n: int = 1000, pace: float = 0.01) -> dict[str, float]:
    from logwatch.sources.local import LocalFileSource
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "latency.log"
        path.write_text("")
        return asyncio.run(measure(LocalFileSource(str(path)), path, n, pace))


def ssh(n: int = 1000, pace: float = 0.01) -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.sshd import SSHServer  # the test suite's throwaway OpenSSH server on 127.0.0.1

    from logwatch.sources.ssh import SSHFileSource, SSHOptions, SSHPool
    with tempfile.TemporaryDirectory() as d, SSHServer(str(Path(d) / "sshd")) as server:
        path = Path(d) / "latency.log"
        path.write_text("")
        opts = SSHOptions(known_hosts=str(server.known_hosts), client_keys=(str(server.client_key),))
        src = SSHFileSource(server.url(str(path)), options=opts, pool=SSHPool())
        return asyncio.run(measure(src, path, n, pace))


if __name__ == "__main__":
    print("local", local())
    if len(sys.argv) > 1 and sys.argv[1] == "ssh":
        print("ssh", ssh())
