"""`logwatch demo`: the embedded default.  A simulated SGLang server writes a realistic
startup log into a temp file and logwatch follows it live, printing each phase change, the
shard progress with its ETA, and the verdict.  No GPU, no SGLang, no network."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from .machine import Crashed, PhaseChanged, Progress, Ready
from .pipeline import LogPipeline
from .rulepack import CRASHED, READY, STOPPED, load_pack
from .simulate import write
from .summary import fmt_duration


def run(speed: float = 0.5, crash: bool = False, out=print) -> int:  # type: ignore[no-untyped-def]
    tmp = Path(tempfile.mkdtemp(prefix="logwatch-demo-"))
    log = tmp / "sglang-server.log"
    log.touch()
    out(f"demo: a simulated SGLang server is writing {log}")
    writer = threading.Thread(target=write, args=(log,), daemon=True,
                              kwargs={"speed": speed, "crash": "oom" if crash else None})
    writer.start()
    pipe = LogPipeline(load_pack("sglang"))
    last_progress = 0.0
    with open(log, "rb") as f:
        while True:
            chunk = f.read(1 << 16)
            now = time.time()
            if not chunk:
                if not writer.is_alive():
                    pipe.finish(now)
                    break
                time.sleep(0.05)
                continue
            for ev in pipe.feed(chunk, now):
                if isinstance(ev, PhaseChanged):
                    out(f"  phase {ev.new}")
                elif isinstance(ev, Progress) and ev.counter == "shards" and \
                        (now - last_progress > 1.0 or ev.current == ev.total):
                    last_progress = now
                    eta = pipe.machine.startup_eta(pipe.state, now)
                    out(f"    shards {ev.current}/{ev.total}"
                        + (f", ETA {fmt_duration(eta)}" if eta == eta else ""))
                elif isinstance(ev, Ready):
                    out(f"ready in {fmt_duration(ev.took)} (slowest phase: {ev.slowest_phase})")
                elif isinstance(ev, Crashed):
                    out("crashed")
            if pipe.state.phase in (READY, CRASHED, STOPPED) and not writer.is_alive():
                break
    st = pipe.state
    if st.crash:
        out(f"crashed: {st.crash.reason} during {st.crash.during}\n  {st.crash.line}")
        return 1
    return 0 if st.phase == READY else 1
