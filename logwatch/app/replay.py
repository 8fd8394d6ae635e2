"""`logwatch replay`: finished logs through the rules as fast as the disk delivers them.

Streams the file in large chunks (memory stays flat whatever its size) through the same
`LogPipeline` the live watchers use, in `collapse_stats` mode: of a run of serving-stats lines
only the first and the last are matched, which changes no outcome (see matcher.py).
"""

from __future__ import annotations

import os
import stat
import time
from typing import BinaryIO, Callable, Iterator

from ..logfile import DamagedLog, open_log, start_offset
from ..machine import Event, State
from ..pipeline import LogPipeline
from ..rules.locate import choose_pack
from ..rules.pack import RulePack

CHUNK = 2 << 20
DETECT_BYTES = 1 << 20


def replay_stream(f: BinaryIO, pack: RulePack, head: bytes = b"", collapse_stats: bool = True,
                  bar_runs: bool | None = None,
                  on_step: Callable[[list[Event], State], None] | None = None,
                  start: int = 0) -> LogPipeline:
    """`f` (after `head`, its first bytes, which are at `start` of the log) through a
    pipeline of `pack`.  `collapse_stats`: of a run of serving lines only the first and last
    are matched; `on_step`: the pipeline's per-step hook (the launch ledger).  Year-less
    stamps are placed by the file's mtime (none written after it)."""
    pipe = LogPipeline(pack, collapse_stats=collapse_stats, bar_runs=bar_runs,
                       written=_file_written(f))
    if start:
        pipe.start_at(start, 1)
    pipe.on_step = on_step
    now = time.time()
    if head:
        pipe.feed(head, now)
    for chunk in line_chunks(f):
        pipe.feed(chunk, now)
        del chunk       # freed before the next is read: its memory is reused (see pipeline.feed)
    pipe.finish(now)
    return pipe


def _file_written(f: BinaryIO) -> float | None:
    """When the file was last written (None where it cannot be told: a pipe, a socket (its
    mtime 0: 1969): then now)."""
    try:
        st = os.fstat(f.fileno())
        return st.st_mtime if stat.S_ISREG(st.st_mode) and st.st_mtime > 0 else None
    except (OSError, ValueError, AttributeError, OverflowError):
        return None


def line_chunks(f: BinaryIO, size: int = CHUNK) -> Iterator[bytes]:
    """The rest of `f` in chunks of up to `size` bytes that end after a `\n` where one is
    in reach (so the framer keeps no unfinished tail to copy in front of the next chunk),
    read into one reusable buffer: one copy of each byte on its way to a block.  Framing
    does not depend on where chunks end (lines.Framer), so neither does anything after."""
    buf = bytearray(size)
    view = memoryview(buf)
    have = 0
    while True:
        n = f.readinto(view[have:])
        if not n:
            break
        have += n
        last = buf.rfind(b"\n", 0, have) + 1
        if last == 0 and have < size:
            continue       # no line end yet, and room for more
        cut = last or have   # a whole buffer without a line end: passed on as it is
        yield bytes(view[:cut])
        rest = bytes(view[cut:have])
        view[: len(rest)] = rest
        have = len(rest)
    if have:
        yield bytes(view[:have])


def replay_file(path: str, spec: str = "auto") -> LogPipeline:
    """The log at `path` (plain or compressed, `-` for stdin: logfile.py `open_log`) replayed.
    Raises `DamagedLog` with the pipeline of what was read when compressed data stopped
    decoding before its end."""
    pipe: LogPipeline | None = None
    try:
        with open_log(path) as f:
            start = start_offset(f)
            head = f.read(DETECT_BYTES)
            pack = choose_pack(spec, head)
            pipe = replay_stream(f, pack, head, start=start)
    except DamagedLog as e:
        e.result = pipe
        raise
    return pipe
