"""Which engine writes a live log (`rules: auto`): decided from its first lines, and looked
at again where another engine may have begun writing the same path.

Two readers of a log's lines, each for one moment:

* `HeldHead`: before any pack is chosen, the first bytes are held back until their `detect`
  signs are sure enough (DETECT_*), so that every line is read by the right pack.
* `EngineWatch`: after a new file (truncation, replacement, rotation), the source back up (a
  command run again, a reconnect), a restart of logwatch, or the first bytes after a final
  crash or a stop, the lines are read as they come and watched for a line of another
  engine's own (SWITCH_LINE).  At that line the follower hands the log to that engine's
  pack; nothing is held, so a rotated log loses no time.  Before, the first pack stayed for
  a target's life: an engineer comparing engines in one log path (`vllm serve ... >
  server.log`, then `python -m sglang.launch_server ... > server.log`) got SGLang's crash
  read by vLLM's rules, or not at all.
"""

from __future__ import annotations

from .lines import CRI_RECORD
from .rules.locate import detect_pack, detect_scores
from .rules.matcher import shared_matcher
from .rules.pack import RulePack
from .sources.base import Data

DETECT_BYTES = 256 * 1024   # `rules: auto` decides after this much of the log ...
DETECT_WAIT = 2.0           # ... or this many seconds after the first bytes
DETECT_SURE = 3             # ... or at once when a pack's signs weigh this much (an engine's
                            # name or its own phrases; a line format others share is 1-2)

# A line is another engine's own when that engine's signs on it weigh this much and the
# current engine's nothing: its record format with its name (vLLM's `INFO ... vLLM API server
# version`, 1 + 3), its process tag (4), its launch dump (SGLang's `server_args=`, 5), its
# logger (TensorRT-LLM's `[TRT-LLM] [I]`, 5).  A name alone (3) is not enough: a prompt in a
# request log, a traceback path or an import warning names other engines.
SWITCH_LINE = 4
WATCH_LINES = 5000          # a watch ends after this many lines ...
WATCH_SECONDS = 900.0       # ... or this long (a wrapper may download for minutes first),
                            # or at a line of the current engine's own
_PARTIAL_KEEP = 4096        # of an unfinished line (a bar's frames), kept to score it


class HeldHead:
    """The events held back while no pack is chosen yet: which pack the head shows, and
    when that is sure enough to decide."""

    def __init__(self, candidates: list[RulePack]) -> None:
        self.candidates = candidates
        self.events: list[object] = []
        self.head = b""
        self.since: float | None = None   # the first bytes held
        self._detect_at = 1
        self._tried = 0.0
        self._untried = False   # bytes came since the last try

    def add(self, ev: object, now: float) -> bool:
        """Hold `ev`; True: decide now."""
        self.events.append(ev)
        if not isinstance(ev, Data):
            return False
        self.head += ev.data[: DETECT_BYTES - len(self.head)]
        if self.since is None:
            self.since = now
        if len(self.head) >= DETECT_BYTES:
            return True
        self._untried = True
        return self.sure(now)

    def sure(self, now: float) -> bool:
        """Whether the head is sure enough now.  Throttled: a try per 8 KiB or quarter
        second, not one per chunk (the follower's tick tries what came since).  A weak sign
        alone (vLLM's `INFO 11-26 14:23:34 file.py:243]` format, which SGLang's own loaders
        print too) waits for more lines: before, the first such line chose vLLM for an
        SGLang log whose next lines said so."""
        if not self._untried or (len(self.head) < self._detect_at and now - self._tried < 0.25):
            return False
        self._detect_at, self._tried, self._untried = len(self.head) + 8192, now, False
        scores = detect_scores(self.head, self.candidates, complete_lines=True)
        return max(scores, default=0) >= DETECT_SURE

    def due(self, now: float) -> bool:
        """Decide now: DETECT_WAIT is over, or what came since the last try is sure."""
        return self.since is not None and (now - self.since >= DETECT_WAIT or self.sure(now))

    def choice(self) -> RulePack | None:
        """The pack the head shows best (None: no pack's signs at all)."""
        return detect_pack(self.head, self.candidates)

    def sure_of_it(self) -> bool:
        """Whether the head's best pack has signs weighing DETECT_SURE (else the choice was
        made on a line format others share, or on nothing: the fallback)."""
        return max(detect_scores(self.head, self.candidates), default=0) >= DETECT_SURE


class EngineWatch:
    """The lines after a moment when another engine may have begun writing the log, watched
    for a line of another engine's own (see the module docstring).  Not one that carries
    what a client sent (a prompt that quotes another engine's log: the current pack's
    request logs), not one of another process in a stream of several (`docker compose
    logs` of two services: its wrapper names another process than the launch's), not the
    second part of a line the kubelet split."""

    def __init__(self, candidates: list[RulePack], now: float, relaunch: bool = True) -> None:
        self.candidates = candidates
        # another engine found is a relaunch (its first matched line begins a startup);
        # False: the first choice, made on weak signs, was wrong
        self.relaunch = relaunch
        self.until = now + WATCH_SECONDS
        self.lines_left = WATCH_LINES
        self.partial = b""            # the head of an unfinished line (its envelope)
        self.part_follows = False     # the last line was a kubelet P record
        self.over = False

    def scan(self, data: bytes, now: float, current: RulePack,
             procs: set[str]) -> tuple[int, RulePack] | None:
        """Where in `data` the first line of another engine's own begins (0: it began in an
        earlier chunk) and that engine's pack; None: no such line in `data` (`over` says
        whether the watch has ended).  `procs`: the processes of the current launch."""
        buf, base = self.partial + data, len(self.partial)
        end = buf.rfind(b"\n") + 1
        self.partial = (buf[end:] if end else buf)[:_PARTIAL_KEEP]
        if now > self.until:
            self.over = True
        if self.over or not end:
            return None
        lines = buf[:end].split(b"\n")[:-1]
        mine = next(i for i, p in enumerate(self.candidates) if p.name == current.name)
        scores = detect_scores(buf[:end], self.candidates)    # a sign in any line: a filter
        if max(scores) < SWITCH_LINE:
            self._count(len(lines))
            self.part_follows = _is_part(lines[-1])
            return None
        pos = 0
        for line in lines:
            continued, self.part_follows = self.part_follows, _is_part(line)
            found = None if continued else self._whose(line, mine, current, procs)
            if found is not None:
                return max(0, pos - base), found
            if self.over:
                return None
            pos += len(line) + 1
        return None

    def _whose(self, line: bytes, mine: int, current: RulePack,
               procs: set[str]) -> RulePack | None:
        """The other engine whose own line this is; None (and the watch over at a line of
        the current engine's own, or after WATCH_LINES)."""
        self._count(1)
        scores = detect_scores(line + b"\n", self.candidates)
        if scores[mine] == 0:
            best = max(range(len(scores)), key=lambda i: (scores[i], -i))
            if scores[best] >= SWITCH_LINE:
                client, proc = shared_matcher(current).from_client(
                    line.decode("utf-8", "replace"))
                if not client and not (proc and procs and proc not in procs):
                    return self.candidates[best]
        elif scores[mine] >= SWITCH_LINE and sum(1 for s in scores if s) == 1:
            self.over = True          # the current engine's own line: it writes there
        return None

    def _count(self, lines: int) -> None:
        self.lines_left -= lines
        if self.lines_left <= 0:
            self.over = True


def _is_part(line: bytes) -> bool:
    """A kubelet record that is part of a longer line (P): the next record continues it."""
    m = CRI_RECORD.match(line)
    return m is not None and m.group(2) == b"P"
