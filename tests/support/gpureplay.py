"""Replay the real H200 start (tests/fixtures/gpu/h200/startup-trace.csv + .log, one clock)
live: the log's lines written at their offsets while tests/tools/fake-nvidia-smi prints the
trace's rows on the same clock (FAKE_NVSMI_T0 / FAKE_NVSMI_STEP), time compressed by
1 s / STEP.  Also usable by hand and by scripts/gpu-real-check.sh --replay:

    python tests/support/gpureplay.py LOG [STEP]      # writes LOG; prints the env for the fake

The trace's rows are a second apart (host clock, printed); the log's stamps have a second's
resolution: a line stamped S is written when the trace's clock reaches S (its rows are mapped
to row indexes, so row k and the lines between rows k and k+1 keep their order).  Lines
without a stamp (a traceback, the progress bar's carriage-return segments) are written with
the stamped line before them; the bar's segments are spread evenly up to the next stamp, as
the server wrote them (one shard about every 0.8 s).
"""

from __future__ import annotations

import bisect
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent      # tests/
TRACE = HERE / "fixtures" / "gpu" / "h200"
TRACE_CSV = TRACE / "startup-trace.csv"
TRACE_LOG = TRACE / "startup-trace.log"
FAKE = HERE / "tools" / "fake-nvidia-smi"
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def read_log(path: Path = TRACE_LOG) -> str:
    """The log as written (not `read_text`: universal newlines would turn the progress bar's
    carriage returns into line ends)."""
    return path.read_bytes().decode("utf-8")


def csv_times(text: str) -> list[float]:
    """The rows' printed times (`2026/12/04 15:56:17.302`), read as local time."""
    out = []
    for line in text.splitlines()[1:]:
        stamp = line.split(", ", 1)[0]
        if not re.match(r"\d{4}/", stamp):
            continue
        whole, _, frac = stamp.partition(".")
        out.append(time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + float("0." + (frac or "0")))
    return out


def log_pieces(text: str) -> list[tuple[float, str]]:
    """(trace time, bytes to write) for every line of the log, in order."""
    lines = [ln for ln in re.split(r"(?<=\n)", text) if ln]   # not splitlines: it splits at \r
    stamps: list[float | None] = []
    for ln in lines:
        m = _STAMP.match(ln)
        stamps.append(time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) if m else None)
    out: list[tuple[float, str]] = []
    last = next(s for s in stamps if s is not None)
    for i, ln in enumerate(lines):
        if stamps[i] is not None:
            last = stamps[i]
        segments = ln.split("\r")
        if len(segments) == 1:
            out.append((last, ln))
            continue
        nxt = next((s for s in stamps[i + 1:] if s is not None), last + 1.0)
        n = len(segments)
        for k, seg in enumerate(segments):
            out.append((last + (k + 0.5) * (nxt - last) / n, seg + ("\r" if k < n - 1 else "")))
    return out


@dataclass
class Clock:
    """Trace time -> wall time: row k of the trace is printed at t0 + k * step."""

    rows: list[float]
    t0: float
    step: float

    def wall(self, t: float) -> float:
        rows = self.rows
        k = bisect.bisect_right(rows, t) - 1
        if k < 0:
            return self.t0 + (t - rows[0]) * self.step
        if k >= len(rows) - 1:
            return self.t0 + ((len(rows) - 1) + (t - rows[-1])) * self.step
        frac = (t - rows[k]) / (rows[k + 1] - rows[k])
        return self.t0 + (k + frac) * self.step

    @property
    def end(self) -> float:
        return self.t0 + len(self.rows) * self.step

    def env(self, csv: Path = TRACE_CSV) -> dict[str, str]:
        """The fake nvidia-smi's environment for this clock."""
        return {"FAKE_NVSMI_CSV": str(csv), "FAKE_NVSMI_T0": repr(self.t0),
                "FAKE_NVSMI_STEP": repr(self.step)}


class LogWriter(threading.Thread):
    """Appends the trace's log to `path`, each piece at its wall time."""

    def __init__(self, path: Path, clock: Clock, log_text: str | None = None) -> None:
        super().__init__(daemon=True, name="gpureplay-writer")
        self.path = path
        self.clock = clock
        self.pieces = log_pieces(log_text if log_text is not None else read_log())
        self.written: list[tuple[float, str]] = []   # (wall time written, first 60 chars)
        self.stopped = threading.Event()

    def run(self) -> None:
        with open(self.path, "a", encoding="utf-8", newline="") as f:
            for t, text in self.pieces:
                due = self.clock.wall(t)
                if self.stopped.wait(max(0.0, due - time.time())):
                    return
                f.write(text)
                f.flush()
                self.written.append((time.time(), text[:60]))

    def stop(self) -> None:
        self.stopped.set()


def make_clock(step: float, lead: float) -> Clock:
    """The trace's clock starting `lead` seconds from now."""
    return Clock(csv_times(TRACE_CSV.read_text(encoding="utf-8")), time.time() + lead, step)


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    step = float(argv[1]) if len(argv) > 1 else 1.0
    rows = csv_times(TRACE_CSV.read_text(encoding="utf-8"))
    if os.environ.get("FAKE_NVSMI_T0"):          # the fake's clock, set before it started
        clock = Clock(rows, float(os.environ["FAKE_NVSMI_T0"]),
                      float(os.environ.get("FAKE_NVSMI_STEP") or step))
    else:
        clock = Clock(rows, time.time() + float(os.environ.get("GPUREPLAY_LEAD", "5")), step)
    path.touch()
    print(" ".join(f"{k}={v}" for k, v in clock.env().items()), flush=True)
    w = LogWriter(path, clock)
    w.start()
    w.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
