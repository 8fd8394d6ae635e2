"""One target followed live: source events -> `LogPipeline`, with the position to save.

Used by `logwatch watch` and by each target of the daemon.  The follower checks the
source's promise (every byte once, in order) at every chunk and counts any break of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import clock
from . import log
from .lines import progress_frame, segment_text, split_glued
from .machine import Event
from .pipeline import LogPipeline
from .engine import DETECT_WAIT, EngineWatch, HeldHead  # noqa: F401  (tests use it)
from .rules.locate import fallback_pack
from .rules.pack import RulePack
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

    def take(self, ev: SourceState, now: float) -> bool:
        """The source's new state; True: it came (back) up."""
        if self.up and not ev.up:
            self.reconnects += 1
        ongoing = self.outage(now)     # as it stood before this state
        came_up = ev.up and not self.up
        if came_up:
            self.up_since = now
        self.up, self.message, self.fatal = ev.up, ev.message, ev.fatal
        self.error = not ev.up and (ev.error or ev.fatal)
        self.cause = ev.cause
        if self.error:
            self.down_since = ongoing if ongoing is not None else now
        return came_up

    def reading(self, now: float) -> bool:
        """The log is being read, so a silence in it is the server's: not during an outage
        (the source failing: `source_down` says that, a `stalled` page would blame the
        server for the network), nor in the RESUME_GRACE after the source came back before
        its first byte (what the server wrote meanwhile is still on its way)."""
        if self.error:
            return False
        if not self.up or self.up_since is None:
            return True
        unread = self.last_data_at is None or self.last_data_at < self.up_since
        return not (unread and now - self.up_since < RESUME_GRACE)

    @property
    def state(self) -> str:
        """up / waiting (for a file to appear, not started yet) / error / fatal."""
        if self.fatal:
            return "fatal"
        if self.up:
            return "up"
        return "error" if self.error else "waiting"


STEADY = 10.0     # seconds up (with no data) that end an outage
RESUME_GRACE = 2.0   # seconds after a source is back for the bytes written while it was down


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


class Follower:
    """Feeds one source into a pipeline.  With `pack=None` (`--rules auto`) it holds the
    first bytes back until the pack's `detect` patterns recognise the engine.

    `redetect` (`rules: auto`, a pack restored from a checkpoint too): where another engine
    may have begun writing the log (engine.py: a new file, the source back up, a restart,
    after a final crash or a stop), an `EngineWatch` looks for a line of another engine's
    own; from that line on, `make_pipeline(pack, carry=old)` reads the log with that
    engine's pack, the old state carried on."""

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
        self._watch: EngineWatch | None = None
        # a pack from a checkpoint: what comes after the restart may be another engine's
        self._watch_at_open = self.redetect and self.pipe is not None
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
        """Decide the pack from the first bytes held back (the fallback pack if nothing
        matched), and hand them on.  Decided on weak signs or none (a wrapper downloading
        first), an `EngineWatch` may yet find the engine's own lines: not a relaunch."""
        held, self._held = self._held, None
        if held is None:
            return []
        self._use(held.choice() or fallback_pack(self.candidates))
        if self.redetect and not held.sure_of_it():
            self._watch = EngineWatch(self.candidates, now or clock.now(), relaunch=False)
        events: list[Event] = []
        for ev in held.events:
            events += self.handle(ev, now)
        return events

    def _use(self, pack: RulePack, relaunch: bool = True) -> None:
        """Read the log with `pack` from now; another engine's after a first one: its first
        matched line begins a startup (`relaunch`), unless the first was a misjudgement."""
        if self.pipe is None:
            self.pipe = self.make_pipeline(pack)
            self.log.info("rule pack chosen", pack=pack.name)
        elif pack is not self.pipe.pack:
            self.log.warning("another engine writes the log now: its rule pack follows",
                             was=self.pipe.pack.name, pack=pack.name)
            self.pipe = self.make_pipeline(pack, carry=self.pipe)
            self.pipe.state.relaunched = relaunch

    def tick(self, now: float) -> list[Event]:
        if self._held is not None and self._held.due(now):
            return self.decide_pack(now)
        if self.pipe is None:
            return []
        events = self.pipe.tick(now, reading=self.status.reading(now))
        if events:
            self.on_events(events)
        return events

    def position(self) -> Position | None:
        """Where to resume: after the last complete line handed to the rules."""
        if self.next_offset is None or self.pipe is None:
            return None
        consumed, line_number = self.pipe.resume_at()
        held = self.next_offset - consumed
        tail_sha = None
        if 0 <= held and held + min(consumed, TAIL_BYTES) <= len(self._roll):
            end = len(self._roll) - held
            tail_sha = digest(bytes(self._roll[max(0, end - min(consumed, TAIL_BYTES)):end]))
        ident = getattr(self.source, "current_identity", None) or self.identity
        return Position(consumed, line_number, ident, tail_sha,
                        self.source.name)

    def handle(self, ev: object, now: float | None = None) -> list[Event]:
        now = clock.now() if now is None else now
        if self._held is not None and not isinstance(ev, (SourceState, Skipped)):
            return self.decide_pack(now) if self._held.add(ev, now) else []
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
            if self.status.take(ev, now) and self.next_offset is not None:
                self._look_again(now)         # back up: a command run again, a reconnect
        if events:
            self.on_events(events)
        return events

    def _look_again(self, now: float) -> None:
        if self.redetect and self.pipe is not None:
            self._watch = EngineWatch(self.candidates, now)

    def _feed(self, data: bytes, now: float) -> list[Event]:
        """`data` to the pipeline; where an `EngineWatch` finds another engine's own line,
        the part before it to this pack's, the rest to that engine's."""
        assert self.pipe is not None
        st = self.pipe.state
        if self._watch is None and data and st.epoch != self._looked_after and st.server_gone:
            self._looked_after = st.epoch     # a relaunch appended (`>>`) comes next
            self._look_again(now)
        watch = self._watch
        found = watch.scan(data, now, self.pipe.pack, st.procs) if watch is not None else None
        if watch is not None and (found is not None or watch.over):
            self._watch = None
        if watch is None or found is None:
            return self.pipe.feed(data, now)
        cut, pack = found
        events = self.pipe.feed(data[:cut], now) if cut else []
        self._use(pack, watch.relaunch)
        return events + self.pipe.feed(data[cut:], now)

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
        return self._feed(ev.data, now)

    def _opened(self, ev: Opened, now: float) -> list[Event]:
        assert self.pipe is not None
        self.identity = ev.identity
        first = self.next_offset is None
        if ev.new_file or first:
            self.status.files += 1
            events: list[Event] = []
            if self.next_offset is None:
                self.pipe.start_at(ev.offset, ev.line_number)
            else:
                events = self.pipe.new_file(ev.offset, ev.line_number, now)
            self._roll = bytearray()
            self._last.partial = b""
            self.next_offset = ev.offset
            if self._watch_at_open or (ev.new_file and not first):
                self._look_again(now)   # a new file (or a restart): another engine's?
            self._watch_at_open = False
            return events
        if ev.offset != self.next_offset:
            self.log.warning("source resumed at another offset", expected=self.next_offset,
                             got=ev.offset)
            self.next_offset = ev.offset
            return self.pipe.new_file(ev.offset, ev.line_number, now)
        return []

    def finish(self, now: float | None = None) -> list[Event]:
        """The source ended: decide the pack if still undecided, close the last line."""
        now = clock.now() if now is None else now
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
