"""Scale: N targets in one daemon, each log growing by 20 lines/s.

A writer process appends SGLang-like serving lines to N files at 20 lines/s each; the
daemon (`logwatch run`, a real subprocess) follows them (local files, or SSH through one
local sshd).  Measured over the steady window: the daemon's CPU share (user+system seconds
per wall second, of one core), its peak RSS, and lines lost = lines written - lines the
daemon counted (`logwatch_lines_total`, read from /metrics once the writers stopped).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

WRITER = r"""
import json, sys, time, random
paths = sys.argv[1].split(",")
rate, seconds = float(sys.argv[2]), float(sys.argv[3])
files = [open(p, "a", buffering=1) for p in paths]
rng = random.Random(1)
n = 0
t0 = time.monotonic()
step = 1.0 / rate
tick = 0
times = []
while True:
    target = t0 + tick * step
    now = time.monotonic()
    if target - t0 >= seconds:
        break
    if target > now:
        time.sleep(target - now)
    for f in files:
        f.write("[2026-12-02 10:00:00 TP0] Decode batch, #running-req: %d, #token: %d, token usage: 0.%02d, "
                "cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0\n"
                % (rng.randint(1, 300), rng.randint(1000, 90000), rng.randint(0, 99), rng.uniform(500, 5000)))
    tick += 1
    times.append(time.monotonic())
for f in files:
    f.close()
print(tick)
print(json.dumps(times))
"""

HEADER = ("[2026-12-02 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
          "[2026-12-02 10:00:30] The server is fired up and ready to roll!\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def metric_sum(port: int, name: str) -> float:
    return sum(metric_by_target(port, name).values())


def metric_by_target(port: int, name: str) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(rf'^{name}{{([^}}]*)}} (\S+)$', body, re.M):
        t = re.search(r'target="([^"]*)"', m.group(1))
        key = t.group(1) if t else m.group(1)
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def lateness(samples: list[tuple[float, dict[str, float]]], times: list[float],
             header: int) -> list[float]:
    """For each sample (monotonic time after the scrape, lines counted per target) and each
    target: how long ago the oldest line the daemon had not counted yet was written (0 when
    it had counted all written by then).  The writer writes one line to every file per
    tick; times[k] is when tick k was done."""
    out = []
    for t, counts in samples:
        for c in counts.values():
            k = int(c) - header          # the first tick not counted for this target
            if 0 <= k < len(times) and times[k] <= t:
                out.append(t - times[k])
            else:
                out.append(0.0)
    return out


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else 0.0


FAKE_NVSMI = ROOT / "tests" / "tools" / "fake-nvidia-smi"


def replay_command(tmp: Path) -> str:
    """A light stand-in for `nvidia-smi --query-gpu=... -l 2` on 200 "hosts" that are all this
    2-core machine: one real sample of the H200 capture (8 GPUs, our query, from the replay
    tool), printed again every 2 s by `sh` (200 Python replayers would measure their own
    start-up, not the daemon).  The query arguments the stream appends are ignored."""
    sample = tmp / "nvsmi-sample.csv"
    if not sample.exists():
        from logwatch.telemetry.gpu import FULL_FIELDS, query_args
        args = [a for a in query_args(FULL_FIELDS, 2.0) if a not in ("-l", "2")]
        out = subprocess.run([str(FAKE_NVSMI), *args], capture_output=True, text=True,
                             env={**os.environ, "FAKE_NVSMI_GPUS": "8"}, check=True).stdout
        sample.write_text(out)
    return (f"sh -c 'cat {sample}; while sleep 2; do tail -n +2 {sample}; done' "
            "nvidia-smi")


def wait_daemon(daemon: subprocess.Popen, ready: Callable[[], bool], timeout: float,
                what: str, every: float = 0.2) -> None:
    """Poll `ready()` until it holds (connection errors: not yet); exit the bench when the
    daemon died or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except OSError:
            pass
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit(f"{what}: daemon not ready")
        time.sleep(every)


def fleet(tmp: Path, n: int) -> tuple[list[Path], int, list[str]]:
    """`n` logs of a server that is ready (HEADER) in `tmp`, a free port, and the head of a
    daemon config listening there (its `targets:` list to be filled in)."""
    paths = [tmp / f"t{i:04d}.log" for i in range(n)]
    for p in paths:
        p.write_text(HEADER)
    port = free_port()
    return paths, port, [f"listen: 127.0.0.1:{port}", f"state_dir: {tmp / 'state'}",
                         "log_level: warning", "targets:"]


def run(n: int, kind: str = "file", seconds: float = 30.0, rate: float = 20.0,
        gpu: str = "off", hosts: bool = False, max_sessions: int = 200,
        root: Path | None = None, sample_every: float = 1.0,
        bashrc: float = 0.0) -> dict[str, float]:
    """`gpu`: "off" (`gpu: false` on every target) or "on" (the replay stand-in of nvidia-smi,
    8 GPUs, every 2 s).  `hosts` (ssh): each target its own connection, as if on its own host
    (distinct ssh options key distinct connections), so "on" runs one GPU stream per target;
    without it every target shares one connection and one stream.  `max_sessions`: the
    sshd's MaxSessions (OpenSSH's default is 10).  `root`: run the daemon of another tree
    (a side-by-side with an older commit).  Lateness: /metrics is read every `sample_every`
    seconds (in the CPU window too) and each target's count is turned into the age of its
    oldest line not yet counted (`lateness`): p99 over targets x samples.  `bashrc` (ssh):
    the node's ~/.bashrc sleeps this long (conda / pyenv init: bash runs it for every command
    sshd starts; the sshd's HOME is its own folder, so 0 means no ~/.bashrc at all)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths, port, lines = fleet(tmp, n)
        server = None
        if kind == "ssh":
            sys.path.insert(0, str(ROOT / "tests"))
            from support.sshd import SSHServer
            server = SSHServer(str(tmp / "sshd"), max_sessions=max_sessions,
                               bashrc=f"sleep {bashrc}" if bashrc else None).__enter__()
            ssh = (f"    ssh: {{known_hosts: {server.known_hosts}, client_keys: [{server.client_key}]}}")
        for i, p in enumerate(paths):
            src = server.url(str(p)) if server else str(p)
            lines += [f"  - name: t{i:04d}", f"    source: {src}", "    rules: sglang"]
            if server:
                lines.append(ssh[:-1] + (f", connect_timeout: {15000 + i}ms}}" if hosts else "}"))
            lines.append("    gpu: false" if gpu == "off" else
                         f"    gpu: {{command: \"{replay_command(tmp)}\", interval: 2s}}")
        cfg = tmp / "logwatch.yaml"
        cfg.write_text("\n".join(lines) + "\n")
        tree = root or ROOT
        daemon = subprocess.Popen([sys.executable, "-m", "logwatch", "run", "-c", str(cfg)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree,
                                  env={**os.environ, "PYTHONPATH": str(tree)})
        try:
            # every target read its header (200 SSH handshakes on 2 cores take a while)
            started = time.monotonic()
            wait_daemon(daemon, lambda: metric_sum(port, "logwatch_lines_total") >= 2 * n, 180,
                        f"scale (n={n}, {kind})")
            attach_s = time.monotonic() - started     # every target attached, its header read
            writer = subprocess.Popen([sys.executable, "-c", WRITER, ",".join(map(str, paths)),
                                       str(rate), str(seconds)], stdout=subprocess.PIPE, text=True)
            samples: list[tuple[float, dict[str, float]]] = []

            def sample_until(end: float) -> None:
                while time.monotonic() + sample_every <= end:
                    time.sleep(sample_every)
                    counts = metric_by_target(port, "logwatch_lines_total")
                    samples.append((time.monotonic(), counts))
                time.sleep(max(0.0, end - time.monotonic()))

            sample_until(time.monotonic() + min(5.0, seconds / 4))  # the steady window
            c0, t0 = cpu_seconds(daemon.pid), time.monotonic()
            sample_until(t0 + seconds - min(5.0, seconds / 4) - 1.0)
            out, _ = writer.communicate(timeout=seconds + 60)
            c1, t1 = cpu_seconds(daemon.pid), time.monotonic()
            first, second = out.strip().splitlines()
            ticks, times = int(first), json.loads(second)
            written = 2 * n + ticks * n
            deadline = time.monotonic() + 60
            counted = 0.0
            time.sleep(max(0.0, times[-1] + 2.0 - time.monotonic()))
            at_2s = sum(metric_by_target(port, "logwatch_lines_total").values())  # 2 s after
            caught_up = None
            while time.monotonic() < deadline:
                by_target = metric_by_target(port, "logwatch_lines_total")
                samples.append((time.monotonic(), by_target))
                counted = sum(by_target.values())
                if counted >= written:
                    caught_up = time.monotonic() - times[-1]
                    break
                time.sleep(sample_every)
            late = lateness(samples, times, 2)
            return {"targets": n, "kind": kind, "gpu": gpu, "lines_per_s": rate * n,
                    "gpu_up": metric_sum(port, "logwatch_gpu_up"),
                    "cpu_share": round((c1 - c0) / (t1 - t0), 3),
                    "peak_rss_mib": round(peak_rss_mib(daemon.pid), 1),
                    "lines_written": written, "lines_lost": int(written - counted),
                    "late_p50_s": round(percentile(late, 50), 3),
                    "late_p99_s": round(percentile(late, 99), 3),
                    "late_max_s": round(max(late), 3),
                    "caught_up_after_s": None if caught_up is None else round(caught_up, 2),
                    "counted_2s_after_end": int(at_2s),
                    "attach_s": round(attach_s, 1),
                    "bashrc_s": bashrc if kind == "ssh" else None,
                    "bashrc_runs": (server.bashrc_runs.read_text().count("run")
                                    if server is not None and server.bashrc_runs.exists()
                                    else None),
                    "max_sessions": max_sessions if kind == "ssh" else None}
        finally:
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
            if server is not None:
                server.__exit__(None, None, None)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="N targets x 20 lines/s in one daemon")
    ap.add_argument("n", type=int, nargs="?", default=50)
    ap.add_argument("kind", nargs="?", default="file", choices=["file", "ssh"])
    ap.add_argument("seconds", type=float, nargs="?", default=20.0)
    ap.add_argument("--max-sessions", type=int, default=200)
    ap.add_argument("--roots", help="comma-separated trees to run side by side (default: this)")
    ap.add_argument("--bashrc", type=float, default=0.0,
                    help="ssh: the node's ~/.bashrc sleeps this many seconds (default: none)")
    args = ap.parse_args()
    for tree in (args.roots.split(",") if args.roots else [str(ROOT)]):
        print(tree, run(args.n, args.kind, seconds=args.seconds, max_sessions=args.max_sessions,
                        root=Path(tree), bashrc=args.bashrc), flush=True)
