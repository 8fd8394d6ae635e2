"""A simulated SGLang server: writes a realistic startup log in real time, no GPU needed.

Used by `logwatch demo` and by the tests that need a log being written.  The lines follow
SGLang 0.5.x exactly as markers.md documents them (rank tags, tqdm bars redrawn with `\\r`
on one physical line, the uvicorn lines, the warmup request, the ready banner, serving
batches); `crash="oom"` ends in a CUDA OOM during graph capture, as a real one would.
Timing is compressed: `speed` scales every pause (1.0 is about a minute to ready).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generator, Iterator

MODEL = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
ARCH = "Qwen3MoeForCausalLM"


@dataclass(frozen=True)
class Step:
    pause: float      # seconds before writing (at speed 1.0)
    text: str         # written as is (include "\n" / "\r" yourself)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


@dataclass
class _Log:
    """The simulated server's clock, rank tags and randomness: what every stage of the script
    stamps its lines with (one object, so that the stages can be separate functions and the
    timestamps still run on from one to the next)."""

    clock: float
    time_scale: float
    ranks: list[str]
    rng: random.Random

    def at(self, pause: float) -> float:
        self.clock += pause * self.time_scale
        return self.clock

    def rec(self, pause: float, tag: str | None, msg: str) -> Step:
        t = self.at(pause)
        prefix = f"[{_stamp(t)}{' ' + tag if tag else ''}] "
        return Step(pause, prefix + msg + "\n")

    def each(self, pause: float, msg: str) -> Iterator[Step]:
        """The same line from every TP rank, each `pause` after the one before."""
        for r in self.ranks:
            yield self.rec(pause, r, msg)


def script(tp: int = 4, shards: int = 24, crash: str | None = None, serve_lines: int = 40,
           seed: int = 0, start: float | None = None, download: bool = True,
           time_scale: float = 1.0, model: str = MODEL, arch: str = ARCH,
           shard_rate: float = 1.6, port: int = 30000) -> Iterator[Step]:
    """The log, step by step. Timestamps advance with the pauses times `time_scale`."""
    log = _Log(start if start is not None else time.time(), time_scale,
               [f"TP{k}" for k in range(tp)], random.Random(seed))
    yield log.rec(0.2, None, f"server_args=ServerArgs(model_path='{model}', "
                             f"tokenizer_path='{model}', tp_size={tp}, "
                             f"mem_fraction_static=0.88, port={port}, host='0.0.0.0')")
    yield from log.each(0.1, "Init torch distributed begin.")
    yield from log.each(0.2, "sglang is using nccl==2.27.3")
    yield from log.each(0.1, "Init torch distributed ends. mem usage=0.41 GB")
    yield from log.each(0.1, "Load weight begin. avail mem=78.50 GB")
    if download:
        yield from _download(log, shards)
    yield from _load_shards(log, shards, shard_rate, arch)
    yield from log.each(0.3, "KV Cache is allocated. #tokens: 1921184, K size: 5.12 GB, V size: 5.12 GB")
    yield from log.each(0.1, "Memory pool end. avail mem=6.02 GB")
    yield from log.each(0.3, "Running FlashInfer autotune...")
    yield from log.each(2.5, "FlashInfer autotune completed.")
    crashed = yield from _capture_graphs(log, crash)
    if crashed:
        return
    yield from _ready(log, port)
    yield from _serving(log, serve_lines)


def _download(log: _Log, shards: int) -> Iterator[Step]:
    """Three weight files downloaded, each a tqdm bar redrawn with `\\r`."""
    for f in range(1, 4):
        name = f"model-{f:05d}-of-{shards:05d}.safetensors"
        frames = []
        for i, pct in enumerate((0, 23, 51, 78, 100)):
            done = 4.98 * pct / 100
            bar = ("█" * (pct // 10)).ljust(10)
            # elapsed as tqdm prints it: whole seconds of this file's 0.5 s frames
            frames.append(f"\r{name}: {pct:3d}%|{bar}| {done:.2f}G/4.98G "
                          f"[00:{int(i * 0.5):02d}<00:0{2 - int(i * 0.5)}, 1.2GB/s]")
        for i, fr in enumerate(frames):
            yield Step(0.5, fr + ("\n" if i == len(frames) - 1 else ""))
            log.at(0.5)


def _load_shards(log: _Log, shards: int, rate: float, arch: str) -> Iterator[Step]:
    """The checkpoint-shards bar, one frame a shard, then every rank's "Load weight end"."""
    for k in range(shards + 1):
        pct = 100 * k // shards
        el = k / rate
        rem = (shards - k) / rate
        r = "?it/s" if k == 0 else f"{rate + log.rng.uniform(-0.2, 0.2):5.2f}it/s"
        frame = (f"\rLoading safetensors checkpoint shards: {pct:3d}% Completed | {k}/{shards} "
                 f"[{int(el) // 60:02d}:{int(el) % 60:02d}<{int(rem) // 60:02d}:{int(rem) % 60:02d}, {r}]")
        yield Step(0.0 if k == 0 else 1 / rate, frame)
        log.at(0.0 if k == 0 else 1 / rate)
    yield Step(0.0, "\n")
    yield from log.each(0.2, f"Load weight end. elapsed={shards / rate:.2f} s, type={arch}, "
                             "avail mem=17.12 GB, mem usage=61.38 GB.")


def _capture_graphs(log: _Log, crash: str | None) -> Generator[Step, None, bool]:
    """The CUDA-graph capture bar; with `crash="oom"` it ends in an OOM traceback (returns True)."""
    yield from log.each(0.2, "Capture cuda graph begin. This can take up to several minutes. avail mem=5.80 GB")
    yield log.rec(0.0, "TP0", "Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]")
    bss = [64, 56, 48, 40, 32, 24, 16, 12, 8, 4, 2, 1]
    n = len(bss)
    yield Step(0.1, f"\r  0%|          | 0/{n} [00:00<?, ?it/s]")
    for i, bs in enumerate(bss):
        avail = 5.80 - 0.05 * i
        if crash == "oom" and i == 7:
            yield Step(0.4, f"\rCapturing batches (bs={bs} avail_mem={avail:.2f} GB):  58%|█████▊    | 7/{n} [00:03<00:02,  2.10it/s]\n")
            yield from _oom_traceback(log.rec, log.ranks)
            return True
        bar = ("█" * (10 * (i + 1) // n)).ljust(10)
        frame = (f"\rCapturing batches (bs={bs} avail_mem={avail:.2f} GB): "
                 f"{100 * (i + 1) // n:3d}%|{bar}| {i + 1}/{n} [00:0{i // 3}<00:0{(n - i) // 3}, 2.4{i % 10}it/s]")
        yield Step(0.4, frame)
        log.at(0.4)
    yield Step(0.0, "\n")
    yield from log.each(0.1, "Capture cuda graph end. Time elapsed: 5.10 s. mem usage=0.61 GB. avail mem=5.19 GB.")
    return False


def _ready(log: _Log, port: int) -> Iterator[Step]:
    """uvicorn's start, the warmup request, the ready banner."""
    yield log.rec(0.2, "TP0", "max_total_num_tokens=1921184, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                              "max_running_requests=2048, context_len=262144, available_gpu_mem=5.19 GB")
    yield log.rec(0.3, None, "INFO:     Started server process [48213]")
    yield log.rec(0.0, None, "INFO:     Waiting for application startup.")
    yield log.rec(0.0, None, "INFO:     Application startup complete.")
    yield log.rec(0.0, None, f"INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)")
    yield log.rec(0.9, None, 'INFO:     127.0.0.1:40312 - "GET /model_info HTTP/1.1" 200 OK')
    yield log.rec(0.2, "TP0", "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                              "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.00")
    yield log.rec(0.4, None, 'INFO:     127.0.0.1:40318 - "POST /generate HTTP/1.1" 200 OK')
    yield log.rec(0.1, None, "The server is fired up and ready to roll!")


def _serving(log: _Log, serve_lines: int) -> Iterator[Step]:
    """Prefill / decode batch lines and client requests, as a serving server prints them."""
    rng = log.rng
    running = 0
    for i in range(serve_lines):
        running = max(0, running + rng.randint(-3, 6))
        if i % 3 == 0:
            yield log.rec(0.25, "TP0", f"Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: {rng.randint(200, 8192)}, "
                                       f"#cached-token: {rng.randint(0, 4000)}, token usage: {running / 400:.2f}, "
                                       f"#running-req: {running}, #queue-req: {rng.randint(0, 3)}, #pending-token: 0, "
                                       f"cuda graph: False, input throughput (token/s): {rng.uniform(2000, 9000):.2f}")
        else:
            yield log.rec(0.25, "TP0", f"Decode batch, #running-req: {running}, #token: {running * 900}, "
                                       f"token usage: {running / 400:.2f}, cuda graph: True, "
                                       f"gen throughput (token/s): {rng.uniform(800, 3200):.2f}, #queue-req: 0")
        if i % 4 == 1:
            yield log.rec(0.0, None, f'INFO:     10.0.2.{rng.randint(2, 250)}:{rng.randint(30000, 60000)} - '
                                     '"POST /v1/chat/completions HTTP/1.1" 200 OK')


def _oom_traceback(rec: Callable[[float, str | None, str], Step], ranks: list[str]) -> Iterator[Step]:
    yield rec(0.2, ranks[1 % len(ranks)], "Scheduler hit an exception: Traceback (most recent call last):")
    for line in (
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2786, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 388, in capture',
        "    ) = self.capture_one_batch_size(bs, forward)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py", line 1412, in fused_experts_impl',
        "    intermediate_cache1 = torch.empty(",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
        "of 79.11 GiB of which 1.12 GiB is free. Process 48215 has 77.98 GiB memory in use.",
        "",
    ):
        yield Step(0.0, line + "\n")
    yield rec(0.3, None, "Received sigquit from a child process. It usually means the child failed.")


def write(path: str | Path, speed: float = 1.0, stop: Callable[[], bool] | None = None,
          **kw: object) -> None:
    """Write the script to `path` (appending), pausing `pause * speed` between steps."""
    kw.setdefault("time_scale", speed if speed > 0 else 1.0)
    with open(path, "a", encoding="utf-8") as f:
        for step in script(**kw):  # type: ignore[arg-type]
            if stop is not None and stop():
                return
            if step.pause and speed > 0:
                time.sleep(step.pause * speed)
            f.write(step.text)
            f.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a simulated SGLang server log, in real time.")
    ap.add_argument("path", help="log file to append to ('-' for stdout)")
    ap.add_argument("--speed", type=float, default=1.0, help="pause multiplier (0: no pauses)")
    ap.add_argument("--crash", choices=["oom"], help="end in a CUDA OOM during graph capture")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument("--serve-lines", type=int, default=40)
    ap.add_argument("--port", type=int, default=30000, help="the port the log says it serves on")
    a = ap.parse_args(argv)
    kw = dict(tp=a.tp, shards=a.shards, crash=a.crash, serve_lines=a.serve_lines, port=a.port)
    if a.path == "-":
        for step in script(**kw):  # type: ignore[arg-type]
            if step.pause and a.speed > 0:
                time.sleep(step.pause * a.speed)
            sys.stdout.write(step.text)
            sys.stdout.flush()
        return 0
    write(a.path, a.speed, **kw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
