#!/usr/bin/env python3
"""The daemon's endpoint while it is behind its logs: N local targets it cannot keep up with.

Two shapes, both CPU-bound (every line of the simulated SGLang startup is a milestone):
  backlog  a daemon restarted under a fleet: each log had `--backlog` whole startups appended
           while it was down, read from the saved positions at once;
  flood    each log gets a step of the startup every 10 ms (the lead's /tmp/flood.py) for
           `--seconds`, then the writers stop.
Measured meanwhile: /healthz and /metrics latency (median, p95, max; probed in turn, one at a
time, a 30 s client timeout), and the drain (writers stopped, or daemon started, until
`logwatch_lines_total` of every target counts every line written).

The machine is shared and timings are noisy, so beside them figures that do not depend
on the machine's load: the daemon runs under a small bootstrap (BOOT) that counts, per
event-loop iteration in which lines were matched, the Follower.handle calls with data (the
slices) and their seconds; per HTTP request, the loop iterations from its connection to its
answer; the longest pass of the targets' ticks, the checkpoints written and their seconds;
and the daemon's CPU seconds a line (rusage at its exit).  `--profile` is not here: run
one_run(..., profile=PATH) for a cProfile of the daemon (written at its SIGTERM).
`--against TREE` runs the same scenario with another checkout's logwatch (a `git worktree`
of origin/main), interleaved A, B, A, B ... for `--rounds` rounds; medians with the spread.

    .venv/bin/python bench/overload.py --targets 60 --rounds 3 --against /tmp/main-wt
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.daemon import (  # noqa: E402
    append, fleet_config, free_port, http_get, sim_texts,
)

# Run `logwatch run` of the tree argv[1] with the counters; at exit, the JSON to argv[2].
BOOT = r"""
import asyncio, atexit, json, sys, time
tree, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
sys.argv = ["logwatch"] + sys.argv[3:]
import logwatch.follow as follow
from logwatch.sources import Data
from aiohttp import web_protocol
st = {"iter": 0, "slices": 0, "secs": 0.0, "armed": False}
per_iter, secs_iter, req_iters, since = [], [], [], {}
def tick():
    per_iter.append(st["slices"]); secs_iter.append(st["secs"])
    st["iter"] += 1
    st["slices"], st["secs"] = 0, 0.0
    st["armed"] = False
def arm():
    if not st["armed"]:
        st["armed"] = True
        asyncio.get_running_loop().call_soon(tick)
handle = follow.Follower.handle
def counted(self, ev):
    if not isinstance(ev, Data) or not ev.data:
        return handle(self, ev)
    t0 = time.perf_counter()
    try:
        return handle(self, ev)
    finally:
        st["slices"] += 1
        st["secs"] += time.perf_counter() - t0
        arm()
follow.Follower.handle = counted
made = web_protocol.RequestHandler.connection_made
def connection_made(self, transport):
    since[id(self)] = st["iter"]
    return made(self, transport)
web_protocol.RequestHandler.connection_made = connection_made
finish = web_protocol.RequestHandler.finish_response
async def finish_response(self, *a, **kw):
    try:
        return await finish(self, *a, **kw)
    finally:
        req_iters.append(st["iter"] - since.get(id(self), st["iter"]))
web_protocol.RequestHandler.finish_response = finish_response
from logwatch.app import target as _target
tick_pass = {"s": 0.0, "max": 0.0, "ckpt": 0, "ckpt_s": 0.0, "at": None}
_tick, _ckpt = _target.Target.tick, _target.Target.checkpoint
def tick_timed(self, now):
    t0 = time.perf_counter()
    try:
        return _tick(self, now)
    finally:
        if tick_pass["at"] != st["iter"]:   # another loop iteration: another pass
            tick_pass["at"], tick_pass["s"] = st["iter"], 0.0
        tick_pass["s"] += time.perf_counter() - t0
        tick_pass["max"] = max(tick_pass["max"], tick_pass["s"])
def ckpt_timed(self, *a, **kw):
    t0 = time.perf_counter()
    try:
        return _ckpt(self, *a, **kw)
    finally:
        tick_pass["ckpt"] += 1
        tick_pass["ckpt_s"] += time.perf_counter() - t0
_target.Target.tick, _target.Target.checkpoint = tick_timed, ckpt_timed
def dump():
    with open(out, "w") as f:
        json.dump({"slices_per_iteration": per_iter, "seconds_per_iteration": secs_iter,
                   "request_iterations": req_iters, "tick_pass_max_s": tick_pass["max"],
                   "checkpoints": tick_pass["ckpt"], "checkpoint_s": tick_pass["ckpt_s"]}, f)
atexit.register(dump)
from logwatch.cli import main
if len(sys.argv) > 1 and sys.argv[1] == "--profile":
    import cProfile
    prof = sys.argv.pop(2); sys.argv.pop(1)
    cProfile.run("rc = main()", prof)
    sys.exit(rc)
sys.exit(main())
"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else float("nan")


def lines_read(port: int) -> float | None:
    """The sum of `logwatch_lines_total` over the targets, None while /metrics is not there."""
    try:
        code, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    except OSError:
        return None
    if code != 200:
        return None
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in body.splitlines()
               if ln.startswith("logwatch_lines_total{"))


class Prober:
    """/healthz and /metrics in turn, one request at a time, every `pace` s until stopped:
    each one's latencies (a timeout counts as its 30 s)."""

    def __init__(self, port: int, pace: float = 0.2) -> None:
        self.port, self.pace = port, pace
        self.lat: dict[str, list[float]] = {"/healthz": [], "/metrics": []}
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for path, lat in self.lat.items():
                t0 = time.monotonic()
                try:
                    http_get(f"http://127.0.0.1:{self.port}{path}", timeout=30)
                except Exception as e:  # noqa: BLE001 - a timeout or a cut request counts its time
                    if isinstance(getattr(e, "reason", e), ConnectionRefusedError):
                        self.stop.wait(0.02)   # not listening yet: not a latency
                        continue
                lat.append(time.monotonic() - t0)
                self.stop.wait(self.pace)   # the probe's pace, not a synchronisation

    def __enter__(self) -> "Prober":
        if self.pace > 0:
            self.th.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        if self.th.is_alive():
            self.th.join(60)


def start_daemon(tree: Path, cfg: Path, stats: Path, logdir: Path,
                 wait: bool = True, profile: Path | None = None) -> subprocess.Popen[bytes]:
    """`logwatch run` of `tree` under BOOT; with `wait`, once /healthz answers."""
    err = open(logdir / "daemon.stderr", "ab")
    prof = ["--profile", str(profile)] if profile else []
    proc = subprocess.Popen([sys.executable, "-c", BOOT, str(tree), str(stats), *prof, "run",
                             "-c", str(cfg)], cwd=tree, stdin=subprocess.DEVNULL, stdout=err,
                            stderr=err)
    err.close()
    deadline = time.monotonic() + (60 if wait else 0)
    while time.monotonic() < deadline:
        try:
            if http_get(f"http://127.0.0.1:{_port(cfg)}/healthz", timeout=5)[0] == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited: {(logdir / 'daemon.stderr').read_text()[-3000:]}")
        time.sleep(0.1)
    if not wait:
        return proc
    raise SystemExit("daemon did not answer /healthz in 60 s")


def _port(cfg: Path) -> int:
    return int(cfg.read_text().split("listen: 127.0.0.1:", 1)[1].split()[0])


def stop_daemon(proc: subprocess.Popen[bytes]) -> float:
    """SIGTERM; the CPU seconds the daemon used (user + system)."""
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def wait_drained(port: int, want: float, timeout: float) -> float | None:
    """Seconds until every written line is counted, None past `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = lines_read(port)
        if got is not None and got >= want:
            return time.monotonic() - t0
        time.sleep(1.0)   # a scrape a second: each costs the daemon a render
    return None


def one_run(tree: Path, shape: str, n: int, seconds: float, backlog: int,
            steps: int, profile: Path | None = None, pace: float = 0.2) -> dict[str, Any]:
    """One daemon of `tree` behind `n` logs in the shape given: the figures.  `pace` 0: no
    probes, only the drain's scrape a second (each request costs the daemon: a /metrics of
    60 targets ~40 ms, so a daemon that answers does more work than one that cannot)."""
    texts = sim_texts()
    startup = "".join(texts)
    per_startup = startup.count("\n")
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as td:
        tmp = Path(td)
        port = free_port()
        logs, cfg = fleet_config(tmp, n, port)
        stats = tmp / "stats.json"
        written = 0
        if shape == "backlog":
            # positions saved at the logs' (empty) ends, then the backlog written while down
            stop_daemon(start_daemon(tree, cfg, stats, tmp))
            for p in logs:
                append(p, startup * backlog)
            written = n * per_startup * backlog
            with Prober(port, pace) as probe:   # from the daemon's start: catching up begins there
                t0 = time.monotonic()
                proc = start_daemon(tree, cfg, stats, tmp, wait=False, profile=profile)
                drain = wait_drained(port, written, 600)
                if drain is not None:   # from the daemon's start
                    drain = time.monotonic() - t0
        else:
            proc = start_daemon(tree, cfg, stats, tmp, profile=profile)
            stop = threading.Event()
            count = [0]

            def feed() -> None:
                k = 0
                while not stop.is_set():
                    text = "".join(texts[(k + j) % len(texts)] for j in range(steps))
                    for p in logs:
                        append(p, text)
                    count[0] += text.count("\n") * n
                    k += steps
                    stop.wait(0.01)

            th = threading.Thread(target=feed, daemon=True)
            with Prober(port, pace) as probe:
                th.start()
                time.sleep(seconds)   # the flood's length
                stop.set()
                th.join()
                written = count[0]
                drain = wait_drained(port, written, 600)
        cpu = stop_daemon(proc)
        st = json.loads(stats.read_text())
    per_iter = [x for x in st["slices_per_iteration"] if x]
    out: dict[str, Any] = {"shape": shape, "targets": n, "lines": written, "drain_s": drain,
                           "cpu_s": cpu, "cpu_us_per_line": cpu / written * 1e6,
                           "busy_s": None if drain is None
                           else drain + (seconds if shape == "flood" else 0.0)}
    for path, lat in probe.lat.items():
        if not lat:
            continue
        out[path] = {"n": len(lat), "median_s": statistics.median(lat), "p95_s": pct(lat, 95),
                     "max_s": max(lat), "all_s": [round(x, 3) for x in lat]}
    out["slices_per_iteration"] = {"median": statistics.median(per_iter) if per_iter else 0,
                                   "max": max(per_iter, default=0)}
    secs = st["seconds_per_iteration"]
    out["matching_s_per_iteration"] = {"p95": pct(secs, 95), "max": max(secs, default=0.0)}
    out["matching_s"], out["iterations"] = sum(secs), len(secs)
    out["tick_pass_max_s"] = st["tick_pass_max_s"]
    out["checkpoints"], out["checkpoint_s"] = st["checkpoints"], st["checkpoint_s"]
    reqs = st["request_iterations"]
    out["request_iterations"] = {"median": statistics.median(reqs) if reqs else 0,
                                 "max": max(reqs, default=0)}
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds, with the spread (min-max)."""
    def col(get: Any) -> dict[str, float]:
        vals = [get(r) for r in runs if get(r) is not None]
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)} \
            if vals else {}
    return {
        "healthz_median_s": col(lambda r: r.get("/healthz", {}).get("median_s")),
        "healthz_p95_s": col(lambda r: r.get("/healthz", {}).get("p95_s")),
        "healthz_max_s": col(lambda r: r.get("/healthz", {}).get("max_s")),
        "metrics_median_s": col(lambda r: r.get("/metrics", {}).get("median_s")),
        "metrics_p95_s": col(lambda r: r.get("/metrics", {}).get("p95_s")),
        "metrics_max_s": col(lambda r: r.get("/metrics", {}).get("max_s")),
        "drain_s": col(lambda r: r["drain_s"]),
        "cpu_us_per_line": col(lambda r: r["cpu_us_per_line"]),
        "checkpoints": col(lambda r: r["checkpoints"]),
        "lines_per_s": col(lambda r: r["lines"] / r["busy_s"] if r["busy_s"] else None),
        "slices_per_iteration_max": col(lambda r: r["slices_per_iteration"]["max"]),
        "request_iterations_max": col(lambda r: r["request_iterations"]["max"]),
    }


def fmt(s: dict[str, Any]) -> str:
    def one(k: str, scale: float = 1.0, unit: str = "") -> str:
        v = s.get(k) or {}
        if not v:
            return f"{k} -"
        return (f"{k} {v['median'] * scale:.3g}{unit} ({v['min'] * scale:.3g}-"
                f"{v['max'] * scale:.3g})")
    keys = ["healthz_median_s", "healthz_p95_s", "healthz_max_s", "metrics_median_s",
            "metrics_p95_s", "metrics_max_s", "drain_s", "lines_per_s", "cpu_us_per_line",
            "checkpoints",
            "slices_per_iteration_max", "request_iterations_max"]
    return "\n    ".join(one(k) for k in keys)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shape", choices=["backlog", "flood"], action="append",
                    help="the shapes to run (default: both)")
    ap.add_argument("--seconds", type=float, default=20.0, help="the flood's length")
    ap.add_argument("--steps", type=int, default=4,
                    help="the flood: steps of the startup appended to each log every 10 ms")
    ap.add_argument("--backlog", type=int, default=15,
                    help="whole startups appended to each log while the daemon is down")
    ap.add_argument("--no-probe", action="store_true",
                    help="no /healthz or /metrics probes: lines/s and CPU a line alone")
    ap.add_argument("--against", type=Path, help="another tree (B), interleaved with this (A)")
    ap.add_argument("--json", type=Path, help="write every run and the summary here")
    args = ap.parse_args()
    trees = [("A", ROOT)] + ([("B", args.against.resolve())] if args.against else [])
    results: dict[str, Any] = {}
    for shape in args.shape or ["backlog", "flood"]:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
        for i in range(args.rounds):
            for name, tree in (trees if i % 2 == 0 else trees[::-1]):
                r = one_run(tree, shape, args.targets, args.seconds, args.backlog,
                            args.steps, pace=0.0 if args.no_probe else 0.2)
                runs[name].append(r)
                print(f"bench: {shape} {name} round {i + 1}: {json.dumps(r)}", file=sys.stderr)
        results[shape] = {name: {"tree": str(tree), "runs": runs[name],
                                 "summary": summary(runs[name])} for name, tree in trees}
        print(f"\n{shape}, {args.targets} targets, median (min-max) of {args.rounds} rounds:")
        for name, tree in trees:
            print(f"  {name} {tree}:\n    {fmt(results[shape][name]['summary'])}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
