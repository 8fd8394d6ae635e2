"""`logwatch replay`: finished logs through the rules as fast as the disk delivers them.

Streams the file in large chunks (memory stays flat whatever its size) through the same
`LogPipeline` the live watchers use, in `collapse_stats` mode: of a run of serving-stats lines
only the first and the last are matched, which changes no outcome (see matcher.py).
"""

from __future__ import annotations

import time
from typing import BinaryIO, Callable

from ..machine import Event, State
from ..pipeline import LogPipeline
from ..rules.locate import choose_pack
from ..rules.pack import RulePack

CHUNK = 2 << 20
DETECT_BYTES = 1 << 20


def replay_stream(f: BinaryIO, pack: RulePack, head: bytes = b"", collapse_stats: bool = True,
                  on_step: Callable[[list[Event], State], None] | None = None) -> LogPipeline:
    """`f` (after `head`, its first bytes) through a pipeline of `pack`.  `collapse_stats`:
    of a run of serving lines only the first and last are matched; `on_step`: the pipeline's
    per-step hook (the launch ledger)."""
    pipe = LogPipeline(pack, collapse_stats=collapse_stats)
    pipe.on_step = on_step
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
