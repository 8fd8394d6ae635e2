"""`logwatch demo` (and `make demo`): the embedded default.

A simulated SGLang server writes a realistic startup log of the README's case (a GLM-5-sized
model on 8 GPUs: download, 83 shards, autotune, CUDA graphs, ready, serving; about a minute)
into a temp directory, and the daemon watches it
exactly as it would a real one, with metrics, the status page and the JSON status on
127.0.0.1:9105 (the next free port if that one is taken).  No GPU, no SGLang, no network.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from .. import clock
from .config import parse_config
from .daemon import Daemon
from ..machine import Event, PhaseChanged, Progress, Ready
from .simulate import write
from ..sinks.display import eta_text
from ..units import fmt_duration
from ..verdict import Exit


DEMO_MODEL = "/models/GLM-5-NVFP4"
# the README's case: a ~400 GB checkpoint in 83 shards on 8 GPUs (TP8), 3.13 shards/s
DEMO_SERVER = {"tp": 8, "shards": 83, "shard_rate": 3.13, "model": DEMO_MODEL,
               "arch": "GlmMoeDsaForCausalLM"}


def free_port(preferred: int = 9105) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise OSError("no free port")


def _narrator(out: Callable[[str], None]) -> Callable[[Any, list[Event]], None]:
    """The daemon observer that tells the demo's story on the terminal: each phase, the
    main progress counter (every 2 s, with the ETA), ready."""
    last_progress = [0.0]

    def show(runner: Any, events: list[Event]) -> None:
        now = clock.now()
        for ev in events:
            if isinstance(ev, PhaseChanged):
                out(f"  phase {ev.new}")
            elif isinstance(ev, Progress) and runner.pipe is not None and \
                    ev.counter == runner.pipe.pack.primary_progress and \
                    (now - last_progress[0] > 2.0 or ev.current == ev.total):
                last_progress[0] = now
                eta = eta_text(runner.view(now))
                out(f"    {ev.counter} {ev.current}/{ev.total}" + (f", {eta}" if eta else ""))
            elif isinstance(ev, Ready):
                out(f"  READY in {fmt_duration(ev.took)} (slowest phase: {ev.slowest_phase})")
    return show


async def run_demo(speed: float = 1.0, crash: bool = False, linger: float = 10.0,
                   forever: bool = False, out: Callable[[str], None] = print) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="logwatch-demo-"))
    log = tmp / "sglang-server.log"
    log.touch()
    port = free_port()
    cfg = parse_config({
        "listen": f"127.0.0.1:{port}",
        "state_dir": str(tmp / "state"),
        "targets": [{"name": "demo-sglang", "source": str(log), "rules": "sglang",
                     "labels": {"model": DEMO_MODEL.rsplit("/", 1)[-1]}}],
    }, str(tmp / "logwatch.yaml"))
    daemon = Daemon(cfg, str(tmp / "logwatch.yaml"))
    base = f"http://127.0.0.1:{port}"
    daemon.observers.append(_narrator(out))
    await daemon.start()
    out(f"logwatch demo: a simulated SGLang server writes {log}")
    out(f"  metrics      {base}/metrics")
    out(f"  status page  {base}/")
    out(f"  status JSON  {base}/api/status")
    stop = threading.Event()
    writer = threading.Thread(target=write, args=(log,), daemon=True,
                              kwargs={"speed": speed, "crash": "oom" if crash else None,
                                      "stop": stop.is_set, **DEMO_SERVER})
    writer.start()
    serve = asyncio.create_task(daemon.serve())
    try:
        while writer.is_alive():
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        view = daemon.runners["demo-sglang"].view(clock.now())
        if view.crash is not None:
            c = view.crash
            out(f"  CRASHED: {c['reason']} during {c['during']}: {c['line']}")
        if forever:
            out("the daemon keeps running (Ctrl-C to stop)")
            await serve
        else:
            out(f"the daemon stays up {linger:g}s more for a look at {base}/ (logwatch demo "
                "--forever keeps it running)")
            await asyncio.sleep(linger)
    finally:
        stop.set()
        daemon.request_stop()
        await serve
        await daemon.shutdown()
    return Exit.OK if view.phase == "ready" else Exit.FAILED
