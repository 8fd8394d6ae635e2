#!/usr/bin/env python3
"""The least a reading that looks at every line holding a rule's literal can cost in Python.

`make bench`'s restarts section prints it beside replay: the literal pass (Hyperscan, as
replay's `Matcher.scan` makes it) over the whole log, then a loop that only groups the
occurrences by segment, as `scan` does first; no rule matched, no line timed, nothing
stepped.  On a restart-dense log nearly every line holds a literal (a milestone per rank,
bar frames), so this floor, not the rules, says how near replay's cost a line can come to
that of a log that is mostly serving lines (the replay section's).

    python bench/floor.py LOG      -> seconds, lines, segments visited
"""

from __future__ import annotations

import json
import sys
import time


def visit_floor(path: str) -> dict:
    """Seconds to find the literals of `path`'s pack and visit each segment holding one."""
    from logwatch.lines import segment_bounds
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.locate import choose_pack

    with open(path, "rb") as f:
        data = f.read()
    matcher = LogPipeline(choose_pack("auto", data[: 1 << 20])).matcher
    rare = matcher._rare
    if not hasattr(rare, "occurrences"):
        raise SystemExit("bench: the floor needs Hyperscan (replay's literal pass)")
    t0 = time.perf_counter()
    found = rare.occurrences(data)
    bits, n, i, segments = rare.id_bits, len(found), 0, 0
    mask, part_rules = (1 << bits) - 1, matcher._part_rules
    while i < n:          # `Matcher.scan`'s grouping, and nothing after it
        _, e = segment_bounds(data, found[i] >> bits)
        rules, limit = 0, e << bits
        while i < n and found[i] < limit:
            rules |= part_rules[found[i] & mask]
            i += 1
        segments += 1
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "lines": data.count(b"\n"), "segments": segments,
            "occurrences": n}


if __name__ == "__main__":
    print(json.dumps(visit_floor(sys.argv[1])))
