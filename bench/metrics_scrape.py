"""/metrics at fleet scale: one daemon with N targets (1,000 by default), each a local log of
a server that is ready and serving; K of them (100) keep growing at 20 lines/s while the
scrapes run, so their series change between scrapes and the others' do not.

Times GET /metrics (wall, one client, sequential) from a real `logwatch run` subprocess:
the first scrape (everything rendered) and the steady ones, with the body size.  `--roots A,B`
runs the same measurement on several checkouts (e.g. the commit before the change and this
one) in one run: the machine is shared and noisy, so compare them side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scale import WRITER, cpu_seconds, fleet, wait_daemon  # noqa: E402

ROOT = HERE.parent


def scrape(port: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120).read()
    return time.perf_counter() - t0, len(body)


def ready_count(port: int) -> int:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=120).read()
    return sum(t["phase"] == "ready" for t in json.loads(body)["targets"])


def measure(root: Path, n: int, growing: int, scrapes: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths, port, lines = fleet(tmp, n)
        for i, p in enumerate(paths):
            lines += [f"  - name: t{i:04d}", f"    source: {p}", "    rules: sglang",
                      "    gpu: false", "    probe: false" if _has_probe(root) else ""]
        (tmp / "logwatch.yaml").write_text("\n".join(x for x in lines if x) + "\n")
        env = {**os.environ, "PYTHONPATH": str(root)}
        daemon = subprocess.Popen([sys.executable, "-m", "logwatch", "run", "-c",
                                   str(tmp / "logwatch.yaml")], cwd=root, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        writer = None
        try:
            wait_daemon(daemon, lambda: ready_count(port) >= n, 300,
                        f"metrics bench ({root})", every=0.5)
            cold, size = scrape(port)
            writer = subprocess.Popen([sys.executable, "-c", WRITER,
                                       ",".join(map(str, paths[:growing])), "20", "600"],
                                      stdout=subprocess.DEVNULL)
            time.sleep(2.0)
            times = []
            c0, t0 = cpu_seconds(daemon.pid), time.monotonic()
            for _ in range(scrapes):
                elapsed, size = scrape(port)
                times.append(elapsed)
                time.sleep(1.0)
            cpu = (cpu_seconds(daemon.pid) - c0) / (time.monotonic() - t0)
            return {"root": str(root), "targets": n, "growing": growing,
                    "first_scrape_s": round(cold, 3),
                    "median_scrape_s": round(statistics.median(times), 3),
                    "max_scrape_s": round(max(times), 3), "bytes": size,
                    "daemon_cpu_share": round(cpu, 3)}
        finally:
            if writer is not None:
                writer.kill()
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()


def _has_probe(root: Path) -> bool:
    return any((root / "logwatch" / sub / "probe.py").exists() for sub in ("telemetry", "sources"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--growing", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=10)
    ap.add_argument("--roots", default=str(ROOT), help="checkouts to compare (comma-separated)")
    a = ap.parse_args()
    results = []
    for root in a.roots.split(","):
        r = measure(Path(root).resolve(), a.targets, a.growing, a.scrapes)
        print(json.dumps(r), flush=True)
        results.append(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
