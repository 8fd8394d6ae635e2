#!/usr/bin/env python3
"""The per-line pattern budget, measured on bait (issue 29): lines built to make each rule's
regex work as hard as it can, and the CPU time one line then costs the matcher.

For every rule of every shipped pack, bait lines of up to 64 KiB (the default line cap):
the rule's required literals repeated, its sample lines repeated and cut short (a match
that almost succeeds at every position), and both behind each pack's envelope and between
the literals of the other rules.  Each line goes through `Matcher.match_line` (the live
path: unwrap, ignore, user content, every rule whose literal is present, within the line
budget); the CPU time per line is printed, worst first.

    .venv/bin/python bench/bait.py [--top 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logwatch.rules.matcher import Matcher  # noqa: E402
from logwatch.rules.pack import load_pack, shipped_pack_names  # noqa: E402

MAX = 64 * 1024
ENVELOPES = {"sglang": "[2026-01-01 10:00:00 TP0] ",
             "vllm": "(APIServer pid=1) INFO 01-01 10:00:00 [api_server.py:1] ",
             "trtllm": "[01/01/2026-10:00:00] [TRT-LLM] [I] ", "base": ""}


def baits(pack_name: str) -> list[tuple[str, str]]:
    """(label, line) pairs for every rule of the pack."""
    pack = load_pack(pack_name)
    env = ENVELOPES.get(pack_name, "")
    out: list[tuple[str, str]] = []
    for r in pack.rules:
        lits = sorted(r.literals.strings) if r.literals else []
        parts = [s.line for s in r.samples]
        for lit in lits[:3]:
            out.append((f"{r.id}: literal x N", env + (lit + " ") * (MAX // (len(lit) + 1) - 8)))
            out.append((f"{r.id}: literal glued", env + lit * (MAX // max(1, len(lit)) - 8)))
        for line in parts[:2]:
            cut = line[: max(1, len(line) * 3 // 4)]
            out.append((f"{r.id}: sample cut x N", (cut + " ") * (MAX // (len(cut) + 1) - 2)))
            digits = "".join("9" if c.isdigit() else c for c in line)
            out.append((f"{r.id}: sample + 9s",
                        digits + " " + "9" * (MAX - len(digits) - 64)))
    return [(label, line[:MAX]) for label, line in out]


def measure(pack_name: str) -> list[tuple[float, str]]:
    m = Matcher(load_pack(pack_name))
    res = []
    for label, line in baits(pack_name):
        best = float("inf")
        for _ in range(2):             # the better of two: the machine is shared
            t0 = time.thread_time()
            m.match_line(line)
            best = min(best, time.thread_time() - t0)
        res.append((best, f"{pack_name}/{label}"))
    return sorted(res, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows: list[tuple[float, str]] = []
    for name in shipped_pack_names():
        rows += measure(name)
    rows.sort(reverse=True)
    if a.json:
        print(json.dumps([{"ms": round(t * 1000, 2), "bait": lab} for t, lab in rows[: a.top]]))
        return 0
    print(f"{len(rows)} bait lines; CPU per line, worst first:")
    for t, lab in rows[: a.top]:
        print(f"  {t * 1000:7.1f} ms  {lab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
