#!/usr/bin/env python3
"""How right the startup ETA is on real logs: predicted / true seconds left until ready.

Why: the operator's first question is "ready in how long?", and the ETA (logwatch/eta.py)
was only ever checked on a synthetic startup (tests/test_eta.py).  This replays every real
log that reaches ready with its lines stamped, with `now` following the log's own stamps
(the pipeline's clock places each line, tqdm frames by their elapsed field), and reads the
ETA at 25 / 50 / 75 % of launch -> ready and right after each phase change:

- first start: no history (the pack's typical seconds, the shard rate, the log's words);
- second start: the same log again, the history the first pass recorded (as the daemon's
  HistoryAttachment records it: each ready startup's phase durations).

A sample's ratio is predicted / true remaining (1.0 is right; NaN, no ETA at all, counts
as a miss); samples with less than MIN_REMAINING seconds to go are not read (a phase change
a second before ready says nothing of the ETA).  Reported per log and per corpus: tests/
fixtures (+ built/) is what the project tunes on, /work/shared/fixtures and
fixtures-trtllm are held out.

    scripts/eta_accuracy.py                      # both corpora, totals and the worst logs
    scripts/eta_accuracy.py --logs               # a row per log
    scripts/eta_accuracy.py --json               # one object: per log, per corpus
    scripts/eta_accuracy.py tests/fixtures/built/vllm-034-default.log --samples  # its readings

The raw estimate is read (`startup_eta`), not the live target's smoothed one (eta.py
`EtaSmoother`, which only holds a jump within a phase to 30 %).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logwatch.eta import startup_eta  # noqa: E402
from logwatch.logfile import open_log  # noqa: E402
from logwatch.machine import Ready  # noqa: E402
from logwatch.pipeline import LogPipeline  # noqa: E402
from logwatch.rules.locate import choose_pack  # noqa: E402
from logwatch.rules.pack import READY, RulePack  # noqa: E402
from logwatch.state.history import StartupHistory  # noqa: E402

CORPORA: dict[str, list[str]] = {
    "tuned": ["tests/fixtures/*.log", "tests/fixtures/built/*.log"],
    "held-out": ["/work/shared/fixtures/*.log", "/work/shared/fixtures-trtllm/*.log"],
}
FRACTIONS = (0.25, 0.50, 0.75)
MIN_REMAINING = 5.0      # seconds: closer to ready than this, a sample is not read
BAND = (0.5, 2.0)        # a ratio inside it counts as "within 0.5x-2x"
FAR = 1e9                # the dummy clock of the stamping pass (no stamp is near it)


@dataclass
class Sample:
    """The ETA read once: where (`label`), at how many seconds after launch, and the ratio."""

    epoch: int
    label: str
    at: float            # seconds since the launch
    phase: str
    predicted: float     # NaN: no ETA
    truth: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.truth


@dataclass
class LogResult:
    path: str
    corpus: str
    pack: str
    took: list[float] = field(default_factory=list)      # launch -> ready, per startup read
    first: list[Sample] = field(default_factory=list)
    second: list[Sample] = field(default_factory=list)


def pieces(data: bytes) -> list[bytes]:
    """The log as it was written: one piece per `\\n`-ended line or `\\r`-ended tqdm frame."""
    out, start = [], 0
    for i, b in enumerate(data):
        if b in (10, 13):
            out.append(data[start:i + 1])
            start = i + 1
    if start < len(data):
        out.append(data[start:])
    return out


def stamps(pack: RulePack, parts: list[bytes], written: float | None) -> list[float] | None:
    """When each piece was written, by the log's clock (a pass of the pipeline at a dummy
    `now`: the stamp its clock gave the piece's last matched line, tqdm frames placed by
    their elapsed field; an unmatched line carries the clock).  Never going back; before the
    first stamp, the first.  None: the log has no stamp at all."""
    pipe = LogPipeline(pack, written=written)
    seen: list[float | None] = [None]
    real = pipe.clock.stamp

    def stamp(*args: Any, **kw: Any) -> Any:
        s = real(*args, **kw)
        if s is not None:
            seen[0] = s.seconds
        return s
    pipe.clock.stamp = stamp  # type: ignore[method-assign]
    raw: list[float | None] = []
    for part in parts:
        pipe.feed(part, FAR)
        raw.append(seen[0])
    first = next((t for t in raw if t is not None), None)
    if first is None:
        return None
    out, now = [], first
    for t in raw:
        now = max(now, t if t is not None else now)
        out.append(now)
    return out


@dataclass
class Startup:
    epoch: int
    launch: float
    ready: float


def _startups(pack: RulePack, parts: list[bytes], times: list[float], written: float | None,
              history: StartupHistory) -> list[Startup]:
    """The startups that got ready with every span stamped (their launch and ready on the
    log's clock), each recorded in `history` as the daemon records one."""
    pipe = LogPipeline(pack, written=written)
    out = []
    for part, now in zip(parts, times):
        for ev in pipe.feed(part, now):
            if isinstance(ev, Ready) and ev.took is not None and ev.took > 0 and \
                    pipe.state.timed_by_log:
                out.append(Startup(ev.epoch, now - ev.took, now))
                history.record_durations(ev.durations, "ready", ev.startup or "", total=ev.took)
    return out


def _sampled(pack: RulePack, parts: list[bytes], times: list[float], written: float | None,
             runs: list[Startup], typical: dict[str, float]) -> list[Sample]:
    """A pass at the log's clock, the ETA read at each run's fractions and phase changes."""
    pipe = LogPipeline(pack, written=written)
    by_epoch = {r.epoch: r for r in runs}
    due = sorted((r.launch + f * (r.ready - r.launch), r.epoch, f"{f:.0%}")
                 for r in runs for f in FRACTIONS)
    out: list[Sample] = []

    def read(label: str, t: float) -> None:
        st = pipe.state
        run = by_epoch.get(st.epoch)
        if run is None or not run.launch <= t < run.ready or st.phase == READY:
            return
        truth = run.ready - t
        at = round(t - run.launch, 3)
        if truth < MIN_REMAINING or any((s.epoch, s.at, s.phase) == (st.epoch, at, st.phase)
                                        for s in out):
            return      # (a phase left and come back to at one stamp: read once)
        eta = startup_eta(pack, st, t, typical)
        out.append(Sample(st.epoch, label, at, st.phase, eta, truth))

    phase = (pipe.state.epoch, pipe.state.phase)
    for part, now in zip(parts, times):
        while due and due[0][0] < now:
            t, epoch, label = due.pop(0)
            if pipe.state.epoch == epoch:
                read(label, t)
        pipe.feed(part, now)
        st = pipe.state
        if (st.epoch, st.phase) != phase:
            if st.epoch == phase[0]:
                read(f"-> {st.phase}", now)
            phase = (st.epoch, st.phase)
    return out


def measure(path: str, corpus: str = "") -> LogResult | None:
    """One log's samples, first and second start (None: it never got ready stamped)."""
    with open_log(path) as f:
        data = f.read()
    pack = choose_pack("auto", data[: 1 << 20])
    try:
        written: float | None = Path(path).stat().st_mtime
    except OSError:
        written = None
    parts = pieces(data)
    times = stamps(pack, parts, written)
    if times is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        history = StartupHistory(tmp, "eta-accuracy")
        runs = _startups(pack, parts, times, written, history)
        if not runs:
            return None
        res = LogResult(path, corpus, pack.name, [round(r.ready - r.launch, 3) for r in runs])
        res.first = _sampled(pack, parts, times, written, runs, {})
        res.second = _sampled(pack, parts, times, written, runs, history.typical())
    return res


def within(s: Sample) -> bool:
    return math.isfinite(s.predicted) and BAND[0] <= s.ratio <= BAND[1]


def summary(samples: list[Sample]) -> dict[str, Any]:
    """Median ratio (of the samples with an ETA), the share within BAND (NaN a miss)."""
    ratios = [s.ratio for s in samples if math.isfinite(s.predicted)]
    return {"samples": len(samples),
            "no_eta": len(samples) - len(ratios),
            "median_ratio": round(statistics.median(ratios), 3) if ratios else None,
            "within_0.5x_2x": round(sum(map(within, samples)) / len(samples), 3)
            if samples else None}


def corpus_of(path: str) -> str:
    """Which corpus a path given on the command line is in (by the globs of CORPORA)."""
    p = Path(path).resolve()
    for name, globs in CORPORA.items():
        for g in globs:
            base = Path(g) if Path(g).is_absolute() else ROOT / g
            if p.parent == base.parent.resolve():
                return name
    return "other"


def gather(paths: list[str]) -> list[tuple[str, str]]:
    """(path, corpus) of the logs to read: those given, else both corpora."""
    if paths:
        return [(p, corpus_of(p)) for p in paths]
    out = []
    for name, globs in CORPORA.items():
        for g in globs:
            pattern = g if Path(g).is_absolute() else str(ROOT / g)
            out += [(p, name) for p in sorted(glob.glob(pattern))]
    return out


def _fmt(s: dict[str, Any]) -> str:
    med = "-" if s["median_ratio"] is None else f"{s['median_ratio']:.2f}"
    share = "-" if s["within_0.5x_2x"] is None else f"{s['within_0.5x_2x']:.0%}"
    return f"median {med:>5}  in 0.5-2x {share:>4}  (n={s['samples']}, no ETA {s['no_eta']})"


def _miss(s: Sample) -> float:
    """How far off a sample is, either way (|ln ratio|; no ETA, or 0 s: infinitely)."""
    return abs(math.log(s.ratio)) if math.isfinite(s.predicted) and s.predicted > 0 \
        else math.inf


def report(results: list[LogResult], per_log: bool, show_samples: bool, worst: int) -> str:
    lines = []
    for corpus in dict.fromkeys(r.corpus for r in results):
        rs = [r for r in results if r.corpus == corpus]
        lines.append(f"{corpus}: {len(rs)} logs ready with stamps")
        for which in ("first", "second"):
            lines.append(f"  {which:6} start  " +
                         _fmt(summary([s for r in rs for s in getattr(r, which)])))
        if per_log or show_samples:
            for r in rs:
                lines.append(f"    {Path(r.path).name:44} {r.pack:7} ready "
                             f"{'/'.join(f'{t:.0f}s' for t in r.took)}")
                for which in ("first", "second"):
                    lines.append(f"      {which:6} " + _fmt(summary(getattr(r, which))))
                    if show_samples:
                        for s in getattr(r, which):
                            lines.append(f"        {s.label:16} at {s.at:7.1f}s {s.phase:15}"
                                         f" eta {s.predicted:7.1f} true {s.truth:7.1f} "
                                         f"x{s.ratio:.2f}")
        if worst:
            ranked = sorted(((r, s) for r in rs for s in r.first),
                            key=lambda x: -_miss(x[1]))[:worst]
            lines.append("  worst first-start samples:")
            for r, s in ranked:
                lines.append(f"    {Path(r.path).name:40} {s.label:16} {s.phase:15} "
                             f"eta {s.predicted:7.1f} true {s.truth:7.1f} x{s.ratio:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="*", help="logs to read (default: both corpora)")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    ap.add_argument("--logs", action="store_true", dest="per_log", help="a row per log")
    ap.add_argument("--samples", action="store_true", help="every sample of every log")
    ap.add_argument("--worst", type=int, default=10, help="the N worst first-start samples")
    args = ap.parse_args(argv)
    results = [r for path, corpus in gather(args.logs)
               if (r := measure(path, corpus)) is not None]
    if args.json:
        doc = {"corpora": {c: {w: summary([s for r in results if r.corpus == c
                                           for s in getattr(r, w)])
                               for w in ("first", "second")} | {
                                   "logs": sum(r.corpus == c for r in results)}
                           for c in dict.fromkeys(r.corpus for r in results)},
               "logs": [{"path": r.path, "corpus": r.corpus, "pack": r.pack, "took": r.took,
                         "first": summary(r.first), "second": summary(r.second),
                         "samples": {w: [asdict(s) for s in getattr(r, w)]
                                     for w in ("first", "second")}}
                        for r in results]}
        print(json.dumps(doc, default=lambda x: None))
    else:
        print(report(results, args.per_log, args.samples, args.worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
