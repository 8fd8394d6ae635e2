"""`logwatch replay`: finished logs through the rules as fast as the disk delivers them.

Streams the file in large chunks (memory stays flat whatever its size) through the same
`LogPipeline` the live watchers use, in `collapse_stats` mode: of a run of serving-stats lines
only the first and the last are matched, which changes no outcome (see matcher.py).
"""

from __future__ import annotations

import time
from typing import BinaryIO, Iterable

from .lines import Block, iter_lines
from .pipeline import LogPipeline
from .rulepack import RulePack, load_all_shipped, load_pack

CHUNK = 2 << 20
DETECT_BYTES = 1 << 20


def detect_pack(head: bytes, packs: Iterable[RulePack],
                complete_lines: bool = False) -> RulePack | None:
    """The pack whose `detect` patterns best match the first lines (None if none does).

    `complete_lines`: ignore a last line that may still be incomplete (live input)."""
    packs = list(packs)
    if complete_lines:
        head = head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]
    lines = [ln.text for ln in iter_lines(Block(head, 0, 1, 0.0))]
    best: tuple[float, int] | None = None
    chosen: RulePack | None = None
    for i, pack in enumerate(packs):
        score = sum(d.weight for d in pack.detect if any(d.regex.search(t) for t in lines))
        if score > 0 and (best is None or (score, -i) > best):
            best, chosen = (score, -i), pack
    return chosen


def choose_pack(spec: str, head: bytes) -> RulePack:
    """`--rules`: a pack name or path, or `auto` (detect; SGLang when nothing matches)."""
    if spec != "auto":
        return load_pack(spec)
    packs = load_all_shipped()
    found = detect_pack(head, packs)
    if found is not None:
        return found
    return next((p for p in packs if p.name == "sglang"), packs[0])


def replay_stream(f: BinaryIO, pack: RulePack, head: bytes = b"") -> LogPipeline:
    pipe = LogPipeline(pack, collapse_stats=True)
    now = time.time()
    if head:
        pipe.feed(head, now)
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        pipe.feed(chunk, now)
    pipe.finish(now)
    return pipe


def replay_file(path: str, spec: str = "auto") -> LogPipeline:
    with open(path, "rb") as f:
        head = f.read(DETECT_BYTES)
        pack = choose_pack(spec, head)
        return replay_stream(f, pack, head)
