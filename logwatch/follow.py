"""One target followed live: source events -> `LogPipeline`, with the position to save.

Used by `logwatch watch` and by each target of the daemon.  The follower checks the
source's promise (every byte once, in order) at every chunk and counts any break of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from . import log
from .lines import progress_frame, segment_text, split_glued
from .machine import Event
from .pipeline import LogPipeline
from .rules.locate import detect_pack, detect_scores, fallback_pack
from .rules.pack import CRASHED, STOPPED, RulePack
from .sources.base import (
    TAIL_BYTES, Data, FileIdentity, Opened, Position, Skipped, Source, SourceState, digest,
)

_ROLL = 4096 + TAIL_BYTES   # enough for the tail hash unless a held partial line is huge
LAST_LINE_CHARS = 2000      # of the last line kept (and of an unfinished one held)
LAST_LINE_SCAN = 256        # lines looked at, newest first, for the latest meaningful one


@dataclass(slots=True)
class SourceStatus:
    up: bool = False
    message: str = "starting"
    fatal: bool = False
    error: bool = False          # down because something failed (see SourceState.error)
    reconnects: int = 0
    files: int = 0               # files opened (rotations + 1)
    bytes: int = 0
    gaps: int = 0                # bytes the source skipped (should stay 0)
    overlaps: int = 0            # bytes the source repeated (dropped here; should stay 0)
    notice: str = ""             # the last loss the source reported (Skipped), for the status
    cause: str = ""              # SourceState.cause of the current state ("dns", "refused")
    last_data_at: float | None = None
    down_since: float | None = None   # an outage (error or fatal) began; None once it reads
    up_since: float | None = None     # the source said "up" (reading, running) at

    def outage(self, now: float) -> float | None:
        """When the current outage began: the first error since the source last read.  An
        outage ends with data, or with the source up for STEADY seconds (a command that
        starts and exits at once says "running" between its failures: not a recovery)."""
        if self.down_since is None:
            return None
        if self.up and self.up_since is not None and now - self.up_since >= STEADY:
            return None
        return self.down_since

    @property
    def state(self) -> str:
        """up / waiting (for a file to appear, not started yet) / error / fatal."""
        if self.fatal:
            return "fatal"
        if self.up:
            return "up"
        return "error" if self.error else "waiting"


STEADY = 10.0     # seconds up (with no data) that end an outage


DETECT_BYTES = 256 * 1024   # `rules: auto` decides after this much of the log ...
DETECT_WAIT = 2.0           # ... or this many seconds after the first bytes
DETECT_SURE = 3             # ... or at once when a pack's signs weigh this much (an engine's
                            # name or its own phrases; a line format others share is 1-2)


class LastLine:
    """The latest meaningful line of a stream, as the page and the live display show it."""

    def __init__(self) -> None:
        self.text = ""
        self.meaningful = ""       # the latest line that is not a tqdm frame
        self.partial = b""         # the unfinished last line of the chunks seen so far

    def note(self, data: bytes) -> None:
        """Take the next chunk of the stream.  The line shown is the newest
        line that is not a tqdm frame, unless the newest line is a bar still moving (a
        finished bar, the 100 % of a download, does not stay there while newer lines
        arrive).  A frame is whole once its `]` is written, before the `\\r` of the next one,
        so the unterminated end of a chunk counts when it is a frame; any other unfinished
        line waits for the chunk that completes it."""
        if self.partial:
            data = self.partial + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        tail = data[cut + 1:]
        self.partial = tail[:LAST_LINE_CHARS]
        newest: tuple[str, str | None] | None = None
        latest: str | None = None
        seen = 0
        end, start = len(data), cut + 1
        while end >= 0 and seen < LAST_LINE_SCAN and latest is None:
            seen += 1           # segments, empty ones too: "\r\r\r..." is bounded as well
            seg = data[start:end].strip()
            if seg:
                for part in reversed(split_glued(segment_text(seg[:LAST_LINE_CHARS]))):
                    part = part.strip()
                    kind = progress_frame(part) if part else None
                    if not part or (end == len(data) and kind is None):
                        continue    # the unfinished end of the chunk, not a frame
                    if newest is None:
                        newest = (part, kind)
                    if kind is None:
                        latest = part
                        break
            end = start - 1
            if end < 0:
                break
            start = max(data.rfind(b"\n", 0, end), data.rfind(b"\r", 0, end)) + 1
        if latest is not None:
            self.meaningful = latest
        if newest is not None:
            text, kind = newest
            self.text = text if kind == "moving" or not self.meaningful \
                else self.meaningful


class HeldHead:
    """The events held back while the engine writing a log is not known yet: at the start
    (`rules: auto`), and after a new file when another engine may write there now.  Which
    pack the head shows, and when that is sure enough to decide (DETECT_* above)."""

    def __init__(self, candidates: list[RulePack]) -> None:
        self.candidates = candidates
        self.events: list[object] = []
        self.head = b""
        self.since: float | None = None   # the first bytes held
        self._detect_at = 1
        self._tried = 0.0

    def add(self, ev: object, now: float, current: RulePack | None) -> bool:
        """Hold `ev`; True: decide now."""
        self.events.append(ev)
        if not isinstance(ev, Data):
            return False
        self.head += ev.data[: DETECT_BYTES - len(self.head)]
        if self.since is None:
            self.since = now
        if len(self.head) >= DETECT_BYTES:
            return True
        if len(self.head) >= self._detect_at or now - self._tried >= 0.25:
            # throttled: a try per 8 KiB or quarter second, not one per chunk.  A weak sign
            # alone (vLLM's `INFO 11-26 14:23:34 file.py:243]` format, which SGLang's own
            # loaders print too) waits for more lines: before, the first such line chose
            # vLLM for an SGLang log whose next lines said so
            self._detect_at, self._tried = len(self.head) + 8192, now
            return self.choice(current, final=False) is not None
        return False

    def due(self, now: float) -> bool:
        return self.since is not None and now - self.since >= DETECT_WAIT

    def choice(self, current: RulePack | None, final: bool) -> RulePack | None:
        """The pack the head shows; None: not sure yet (no pack's signs weigh DETECT_SURE,
        and `final` is not set), or at the start nothing matched.  After a new file the
        `current` pack stays unless another's signs weigh more than its own and at least
        DETECT_SURE: the head of a rotated serving log shows little, and a line format
        others share (SGLang's loaders printed vLLM's) is no reason to leave an engine the
        log named."""
        scores = detect_scores(self.head, self.candidates, complete_lines=not final)
        if not final and max(scores, default=0) < DETECT_SURE:
            return None
        if current is None:
            return detect_pack(self.head, self.candidates, complete_lines=not final)
        mine = next((sc for p, sc in zip(self.candidates, scores) if p.name == current.name), 0)
        others = [(sc, p) for p, sc in zip(self.candidates, scores) if p.name != current.name]
        best, other = max(others, key=lambda o: o[0], default=(0, current))   # the first of a tie
        if best > mine and best >= DETECT_SURE:
            return other
        return current


class Follower:
    """Feeds one source into a pipeline.  With `pack=None` (`--rules auto`) it holds the
    first bytes back until the pack's `detect` patterns recognise the engine.

    `redetect` (`rules: auto`, a pack restored from a checkpoint too): each new file (a
    truncation, a rotation, a file replaced, a command run again) is held back the same way
    until its head shows whether another engine writes there now.  A relaunch of another
    engine into the same path (`vllm serve ... > server.log`, then `python -m
    sglang.launch_server ... > server.log`) kept the first engine's rules: no ready, no crash.
    `make_pipeline(pack, carry=old)` makes the new engine's pipeline carry the old state on."""

    def __init__(self, name: str, source: Source, make_pipeline: Callable[..., LogPipeline],
                 pack: RulePack | None, candidates: list[RulePack] | None = None,
                 on_events: Callable[[list[Event]], None] | None = None,
                 redetect: bool = False) -> None:
        self.name = name
        self.source = source
        self.make_pipeline = make_pipeline
        self.candidates = candidates or []
        self.redetect = redetect and len(self.candidates) > 1
        self.pipe: LogPipeline | None = make_pipeline(pack) if pack is not None else None
        # the events held back until the pack is decided (None: none held)
        self._held = HeldHead(self.candidates) if self.pipe is None else None
        self._first_open = True             # the attach that opens the first file
        self._detected = self.pipe is None  # the first file's head decides the pack
        self._looked_after: int | None = None   # the startup whose end was looked after
        self.on_events = on_events or (lambda evs: None)
        self.status = SourceStatus()
        self.identity: FileIdentity | None = None
        self.next_offset: int | None = None
        self._last = LastLine()
        self._roll = bytearray()  # the last raw bytes received (tail hash of a position)
        self.log = log.get("follow").bind(target=name)

    @property
    def last_line(self) -> str:
        return self._last.text

    @property
    def pack(self) -> RulePack | None:
        return self.pipe.pack if self.pipe is not None else None

    def decide_pack(self, now: float | None = None) -> list[Event]:
        """Decide the pack now, from what was held back (at the start: the fallback pack if
        nothing matched; after a new file: the current pack unless another's signs weigh
        more), and hand the held events on."""
        held, self._held = self._held, None
        if held is None:
            return []
        self._use(held.choice(self.pack, final=True) or fallback_pack(self.candidates))
        events: list[Event] = []
        for ev in held.events:
            events += self.handle(ev, now)
        return events

    def _use(self, pack: RulePack) -> None:
        if self.pipe is None:
            self.pipe = self.make_pipeline(pack)
            self.log.info("rule pack chosen", pack=pack.name)
        elif pack is not self.pipe.pack:
            self.log.warning("another engine writes the log now: its rule pack follows",
                             was=self.pipe.pack.name, pack=pack.name)
            self.pipe = self.make_pipeline(pack, carry=self.pipe)

    def tick(self, now: float) -> list[Event]:
        if self._held is not None and self._held.due(now):
            return self.decide_pack(now)
        if self.pipe is None:
            return []
        events = self.pipe.tick(now)
        if events:
            self.on_events(events)
        return events

    def position(self) -> Position | None:
        """Where to resume: after the last complete line handed to the rules."""
        if self.next_offset is None or self.pipe is None:
            return None
        consumed = self.pipe.framer.consumed_offset
        held = self.next_offset - consumed
        tail_sha = None
        if 0 <= held and held + min(consumed, TAIL_BYTES) <= len(self._roll):
            end = len(self._roll) - held
            tail_sha = digest(bytes(self._roll[max(0, end - min(consumed, TAIL_BYTES)):end]))
        ident = getattr(self.source, "current_identity", None) or self.identity
        return Position(consumed, self.pipe.framer.line_number, ident, tail_sha,
                        self.source.name)

    def handle(self, ev: object, now: float | None = None) -> list[Event]:
        now = time.time() if now is None else now
        if self._held is None and isinstance(ev, Data) and self._ended_before(ev):
            self._held = HeldHead(self.candidates)
        if self._held is not None and not isinstance(ev, (SourceState, Skipped)):
            return self.decide_pack(now) if self._held.add(ev, now, self.pack) else []
        events: list[Event] = []
        if isinstance(ev, Data):
            if self.next_offset is not None and ev.offset != self.next_offset:
                events += self._mismatch(ev, now)
                return events
            events += self._data(ev, now)
        elif isinstance(ev, Opened):
            events += self._opened(ev, now)
        elif isinstance(ev, Skipped):
            self.status.notice = ev.message
            self.log.warning("part of the log could not be read", bytes=ev.nbytes,
                             message=ev.message)
        elif isinstance(ev, SourceState):
            self._state(ev, now)
        if events:
            self.on_events(events)
        return events

    def _ended_before(self, ev: Data) -> bool:
        """The server of this log crashed (final) or stopped, and `ev` is the first data
        after: a relaunch appended to the same file (`>> server.log`) may be another
        engine's, so its head is held and looked at like a new file's (once a startup)."""
        st = self.pipe.state if self.redetect and self.pipe is not None else None
        if st is None or not ev.data or st.epoch == self._looked_after or \
                not (st.phase == STOPPED or (st.phase == CRASHED and st.crash_settled)):
            return False
        self._looked_after = st.epoch
        return True

    def _data(self, ev: Data, now: float) -> list[Event]:
        self.status.bytes += len(ev.data)
        self.status.last_data_at = now
        if ev.data:
            self.status.down_since = None
        self.next_offset = ev.offset + len(ev.data)
        self._roll += ev.data
        if len(self._roll) > 2 * _ROLL:  # trimmed now and then, not copied per chunk
            del self._roll[:-_ROLL]
        self._last.note(ev.data)
        assert self.pipe is not None
        return self.pipe.feed(ev.data, now)

    def _opened(self, ev: Opened, now: float) -> list[Event]:
        assert self.pipe is not None
        self.identity = ev.identity
        first, self._first_open = self._first_open, False
        if ev.new_file or self.next_offset is None:
            self.status.files += 1
            events: list[Event] = []
            if self.next_offset is None:
                self.pipe.start_at(ev.offset, ev.line_number)
            else:
                events = self.pipe.new_file(ev.offset, ev.line_number, now)
            self._roll = bytearray()
            self._last.partial = b""
            self.next_offset = ev.offset
            # a new file may be another engine's (not the first attach of a detected pack:
            # its head was just looked at)
            if self.redetect and ev.new_file and not (first and self._detected):
                self._held = HeldHead(self.candidates)
            return events
        if ev.offset != self.next_offset:
            self.log.warning("source resumed at another offset", expected=self.next_offset,
                             got=ev.offset)
            self.next_offset = ev.offset
            return self.pipe.new_file(ev.offset, ev.line_number, now)
        return []

    def _state(self, ev: SourceState, now: float) -> None:
        if self.status.up and not ev.up:
            self.status.reconnects += 1
        ongoing = self.status.outage(now)     # as it stood before this state
        if ev.up and not self.status.up:
            self.status.up_since = now
        self.status.up, self.status.message, self.status.fatal = ev.up, ev.message, ev.fatal
        self.status.error = not ev.up and (ev.error or ev.fatal)
        self.status.cause = ev.cause
        if self.status.error:
            self.status.down_since = ongoing if ongoing is not None else now

    def finish(self, now: float | None = None) -> list[Event]:
        """The source ended: decide the pack if still undecided, close the last line."""
        now = time.time() if now is None else now
        events = self.decide_pack(now) if self._held is not None and self._held.events else []
        if self.pipe is not None:
            events += self.pipe.finish(now)
        if events:
            self.on_events(events)
        return events

    def _mismatch(self, ev: Data, now: float) -> list[Event]:
        assert self.next_offset is not None
        if ev.offset < self.next_offset:
            skip = min(self.next_offset - ev.offset, len(ev.data))
            self.status.overlaps += skip
            rest = ev.data[skip:]
            if not rest:
                return []
            return self.handle(Data(rest, ev.offset + skip), now)
        self.status.gaps += ev.offset - self.next_offset
        self.log.error("bytes missing in the source", expected=self.next_offset, got=ev.offset)
        self.next_offset = ev.offset
        return self.handle(ev, now)
