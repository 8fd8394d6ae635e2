#!/usr/bin/env python3
"""`make bench`: logwatch against the baselines, side by side in one run.

replay: generates the 2,000,000-line SGLang log of the core issue
  (genlog.py --lines 2000000 --seed 1 --tp 8 --crash oom --restarts 2), checks that
  `logwatch replay --json` reports what the generator's truth file says, then times, in
  interleaved rounds, `logwatch replay --json`, `mtail --one_shot` (Debian mtail, the tuned
  program sglang.mtail) and `LC_ALL=C grep -c -E` over 21 markers.  Prints medians, peak RSS
  and the ratios; the machine is shared and noisy, so only ratios from one run mean much.

restarts: a restart-dense log (issue 30): genlog.py --lines 330000 --restarts 2000 --seed 1
  --tp 8 --crash oom (2,001 startups, 462,000 lines, every one a rule's or a bar's frame),
  `logwatch replay --json` (checked: 2,001 startups, crashed of cuda_oom) and grep, in
  rounds: seconds, per-line cost beside the replay section's, peak RSS; and bench/floor.py,
  what only finding the literals and visiting each segment holding one costs a line.

latency: bench/latency.py (a line appended -> processed by the watcher, local and SSH).
scale: bench/scale.py (N targets in one daemon, 20 lines/s each: CPU, RSS, lines lost).
metrics: bench/metrics_scrape.py (GET /metrics from a daemon with 1,000 targets, 100 of them
  growing: first and steady scrape times, body size).
overload: bench/overload.py (60 targets behind their logs, a backlog at the daemon's start and
  a live flood: /healthz and /metrics latency, the drain, slices matched a loop iteration).

Results go to bench/out/results.json; BENCHMARKS.md records them with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
OUT = HERE / "out"
GENLOG_ARGS = ["--lines", "2000000", "--seed", "1", "--tp", "8", "--crash", "oom",
               "--restarts", "2"]
# The markers a person would grep for (DESIGN.md "Measured costs": grep -c -E over 21 markers)
GREP_MARKERS = [
    "server_args=", "Init torch distributed begin", "Load weight begin", "Load weight end",
    "checkpoint shards:", "KV Cache is allocated", "Memory pool end", "Running FlashInfer autotune",
    "FlashInfer autotune completed", "Capture cuda graph begin", "Capturing batches",
    "Capture cuda graph end", "max_total_num_tokens=", "Uvicorn running on",
    "The server is fired up", "Prefill batch", "Decode batch", "hit an exception",
    "Traceback \\(most recent call last\\)", "OutOfMemoryError", "Received sigquit",
]


def run_measured(cmd: list[str], env: dict[str, str] | None = None,
                 stdout: int | None = subprocess.DEVNULL) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS (KiB) and stdout of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if stdout is None else stdout,
                            stderr=subprocess.DEVNULL, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # grep -c exits 1 when it counts 0
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode}")
    return elapsed, int(usage.ru_maxrss), out


def ensure_mtail() -> str:
    found = shutil.which("mtail")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench: installing Debian package mtail ...", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-qq", "mtail"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("mtail")
    if not found:
        raise SystemExit("bench: mtail not found; install the Debian package: apt-get install mtail")
    return found


RESTART_ARGS = ["--lines", "330000", "--restarts", "2000", "--seed", "1", "--tp", "8",
                "--crash", "oom"]


def generate(log: Path, truth: Path, args: list[str] = GENLOG_ARGS) -> None:
    stamp = log.with_suffix(".args")
    if log.exists() and truth.exists() and stamp.exists() and stamp.read_text() == " ".join(args):
        return
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"bench: generating {log} ...", file=sys.stderr)
    with open(log, "wb") as f:
        subprocess.run([sys.executable, str(HERE / "genlog.py"), *args,
                        "--truth", str(truth)], stdout=f, check=True)
    stamp.write_text(" ".join(args))


def check_replay(doc: dict, truth: dict) -> None:
    problems = []
    if doc["phase"] != "crashed":
        problems.append(f"phase {doc['phase']}")
    if not doc["crash"] or doc["crash"]["reason"] != "cuda_oom":
        problems.append(f"crash {doc['crash'] and doc['crash']['reason']}")
    if doc["startups"] != truth["phase"]["server_args"]:
        problems.append(f"startups {doc['startups']}")
    if (doc["shards_loaded"], doc["shards_total"]) != (truth["shards_loaded"],
                                                       truth["shards_total"]):
        problems.append(f"shards {doc['shards_loaded']}/{doc['shards_total']}")
    if doc["lines"] != truth["lines"]:
        problems.append(f"lines {doc['lines']}")
    if problems:
        raise SystemExit("bench: replay disagrees with the genlog truth: " + ", ".join(problems))


def bench_replay(rounds: int) -> dict:
    log, truth_path = OUT / "genlog-2M.log", OUT / "genlog-2M.truth.json"
    generate(log, truth_path)
    truth = json.loads(truth_path.read_text())
    mtail = ensure_mtail()
    logwatch = [sys.executable, "-m", "logwatch", "replay", "--json", str(log)]
    _, _, out = run_measured(logwatch, stdout=None)
    check_replay(json.loads(out), truth)
    env_c = {**os.environ, "LC_ALL": "C"}
    cmds = {
        "logwatch": (logwatch, None),
        "mtail": ([mtail, "--one_shot", "--one_shot_format=json", "--logtostderr",
                   "--progs", str(HERE / "sglang.mtail"), "--logs", str(log)], None),
        "grep": (["grep", "-c", "-E", "|".join(GREP_MARKERS), str(log)], env_c),
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, list[int]] = {k: [] for k in cmds}
    for r in range(rounds):
        for name, (cmd, env) in cmds.items():
            # output to a pipe, not /dev/null: GNU grep stops at the first match when its
            # output is /dev/null, which would not be counting at all
            t, m, _ = run_measured(cmd, env=env, stdout=None)
            times[name].append(t)
            rss[name].append(m)
        print(f"bench: round {r + 1}/{rounds}: " + ", ".join(
            f"{k} {v[-1]:.2f}s" for k, v in times.items()), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "file": {"path": str(log), "bytes": log.stat().st_size, "lines": truth["lines"]},
        "rounds": rounds,
        "median_seconds": med,
        "peak_rss_mib": {k: round(max(v) / 1024, 1) for k, v in rss.items()},
        "mtail_over_logwatch": round(med["mtail"] / med["logwatch"], 1),
        "logwatch_over_grep": round(med["logwatch"] / med["grep"], 1),
    }


def bench_restarts(rounds: int) -> dict:
    """A restart loop through replay, beside grep on the same file (issue 30)."""
    log, truth_path = OUT / "genlog-restarts.log", OUT / "genlog-restarts.truth.json"
    generate(log, truth_path, RESTART_ARGS)
    truth = json.loads(truth_path.read_text())
    logwatch = [sys.executable, "-m", "logwatch", "replay", "--json", str(log)]
    env_c = {**os.environ, "LC_ALL": "C"}
    grep = ["grep", "-c", "-E", "|".join(GREP_MARKERS), str(log)]
    times: dict[str, list[float]] = {"logwatch": [], "grep": []}
    rss: list[int] = []
    floor: list[float] = []     # bench/floor.py: finding the literals, visiting their segments
    for r in range(rounds):
        t, m, out = run_measured(logwatch, stdout=None)
        doc = json.loads(out)
        if doc["startups"] != truth["phase"]["server_args"] or doc["phase"] != "crashed" or \
                doc["lines"] != truth["lines"]:
            raise SystemExit(f"bench: the restart log replayed as {doc['startups']} startups, "
                             f"{doc['phase']}, {doc['lines']} lines")
        times["logwatch"].append(t)
        rss.append(m)
        times["grep"].append(run_measured(grep, env=env_c, stdout=None)[0])
        floor.append(json.loads(subprocess.run(
            [sys.executable, str(HERE / "floor.py"), str(log)], cwd=ROOT, check=True,
            capture_output=True).stdout)["seconds"])
        print(f"bench: restarts round {r + 1}/{rounds}: logwatch {t:.2f}s, "
              f"floor {floor[-1]:.2f}s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"file": {"path": str(log), "bytes": log.stat().st_size, "lines": truth["lines"],
                     "startups": truth["phase"]["server_args"]},
            "rounds": rounds, "median_seconds": med, "peak_rss_mib": round(max(rss) / 1024, 1),
            "us_per_line": round(med["logwatch"] / truth["lines"] * 1e6, 2),
            "floor_us_per_line": round(statistics.median(floor) / truth["lines"] * 1e6, 2),
            "logwatch_over_grep": round(med["logwatch"] / med["grep"], 1)}


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["replay", "restarts", "latency", "scale", "gpu", "metrics",
                             "overload"],
                    action="append",
                    help="run only these sections (default: all)")
    ap.add_argument("--scale-seconds", type=float, default=30.0,
                    help="writing time per scale run (default 30)")
    args = ap.parse_args()
    sections = args.only or ["replay", "restarts", "latency", "scale", "gpu", "metrics",
                             "overload"]
    results: dict = {"machine": machine()}
    if "replay" in sections:
        results["replay"] = r = bench_replay(args.rounds)
        print("\nreplay of a 2,000,000-line SGLang log "
              f"({r['file']['bytes'] / 1e6:.0f} MB), median of {r['rounds']} rounds:")
        for k in ("logwatch", "mtail", "grep"):
            print(f"  {k:<9} {r['median_seconds'][k]:7.2f} s   peak RSS {r['peak_rss_mib'][k]:7.1f} MiB")
        print(f"  logwatch is {r['mtail_over_logwatch']}x faster than mtail and "
              f"{r['logwatch_over_grep']}x the time of grep")
    if "restarts" in sections:
        results["restarts"] = r = bench_restarts(args.rounds)
        f = r["file"]
        print(f"\nreplay of a restart loop ({f['startups']:,} startups, {f['lines']:,} lines, "
              f"{f['bytes'] / 1e6:.0f} MB), median of {r['rounds']} rounds:")
        print(f"  logwatch  {r['median_seconds']['logwatch']:7.2f} s   peak RSS "
              f"{r['peak_rss_mib']:7.1f} MiB   {r['us_per_line']} us a line, "
              f"{r['logwatch_over_grep']}x the time of grep")
        if "replay" in results:
            base = results["replay"]
            per = base["median_seconds"]["logwatch"] / base["file"]["lines"] * 1e6
            print(f"  {r['us_per_line'] / per:.0f}x the replay section's cost a line ({per:.2f} us)")
        print(f"  floor (bench/floor.py: the literal pass, then only visiting each segment "
              f"that holds one): {r['floor_us_per_line']} us a line"
              + (f", {r['floor_us_per_line'] / per:.1f}x the replay section's" if "replay" in results
                 else ""))
    if "latency" in sections:
        import latency
        results["latency"] = lat = {"local": latency.local(), "ssh": latency.ssh()}
        print("\nlatency, line appended -> processed, 1,000 lines at 100/s:")
        for k, v in lat.items():
            print(f"  {k:<6} p50 {v['p50_ms']:7.2f} ms   p99 {v['p99_ms']:7.2f} ms   max {v['max_ms']:7.2f} ms")
    if "scale" in sections:
        import scale
        runs = []
        for kind, ns in (("file", (50, 200, 500)), ("ssh", (50, 200, 500))):
            for n in ns:
                # ssh: one loopback sshd with a real server's default MaxSessions 10
                r = scale.run(n, kind, seconds=args.scale_seconds,
                              **({"max_sessions": 10} if kind == "ssh" else {}))
                runs.append(r)
                print(f"bench: scale {kind} n={n}: {r}", file=sys.stderr)
        results["scale"] = runs
        print("\nscale, N targets each appending 20 lines/s, one daemon (ssh: MaxSessions 10):")
        for r in runs:
            print(f"  {r['kind']:<5} N={r['targets']:<4} CPU {r['cpu_share'] * 100:5.1f}% of a core   "
                  f"peak RSS {r['peak_rss_mib']:6.1f} MiB   lines lost {r['lines_lost']}   "
                  f"late p99 {r['late_p99_s']:.2f} s")
    if "gpu" in sections:
        import scale
        runs = []
        for gpu in ("off", "on", "off", "on"):   # alternating: the machine's noise shows
            r = scale.run(200, "ssh", seconds=args.scale_seconds, rate=2.0, gpu=gpu, hosts=True)
            runs.append(r)
            print(f"bench: gpu {gpu}: {r}", file=sys.stderr)
        results["gpu"] = runs
        print("\nGPU streams: 200 SSH targets, each its own connection, 2 lines/s each, "
              "nvidia-smi (8 GPUs, every 2 s) on vs off:")
        for r in runs:
            print(f"  gpu {r['gpu']:<3} CPU {r['cpu_share'] * 100:5.1f}% of a core   "
                  f"peak RSS {r['peak_rss_mib']:6.1f} MiB   gpu_up {r['gpu_up']:.0f}   "
                  f"lines lost {r['lines_lost']}")
    if "metrics" in sections:
        import metrics_scrape
        results["metrics"] = m = metrics_scrape.measure(ROOT, 1000, 100, 10)
        print("\n/metrics, 1,000 targets in one daemon (100 of them growing 20 lines/s):")
        print(f"  first scrape {m['first_scrape_s'] * 1000:7.0f} ms   steady median "
              f"{m['median_scrape_s'] * 1000:6.0f} ms   max {m['max_scrape_s'] * 1000:6.0f} ms   "
              f"{m['bytes'] / 1e6:.1f} MB")
    if "overload" in sections:
        import overload
        results["overload"] = ov = {}
        for shape in ("backlog", "flood"):
            runs = [overload.one_run(ROOT, shape, 60, 20.0, 30, 4) for _ in range(args.rounds)]
            ov[shape] = {"runs": runs, "summary": overload.summary(runs)}
            print(f"\noverload, {shape}: 60 targets behind their logs, median (min-max) of "
                  f"{args.rounds} rounds:\n    {overload.fmt(ov[shape]['summary'])}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
