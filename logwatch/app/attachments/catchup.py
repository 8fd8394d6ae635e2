"""Catch-up: what the log held when a target first attached is history until it says news.

A first attach (no checkpoint) reads the log from its latest startup; the bytes before the
attach offset (`Opened.size`) were written before we looked.  Their events are held until
the end of them says whether they are news (view.py `seen_at_attach`): a startup that had
ended is shown as such, never alerted; a startup silent past its phase's stall budget is
dated from the file's last write (`silent_at_attach`: the machine's next tick stalls it).
Every target has one (`Target.catchup`); the other attachments read `target.catching_up`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable

from ... import clock
from ...machine import CrashSettled, Event, Progress, State, StatsUpdated, retime
from ...machine.checkpoint import event_from_json, event_to_json
from ...pipeline import PARTIAL_LINE_QUIET, LogPipeline
from ...rules.pack import CRASHED, READY
from ...sources import Data, Opened
from ...sources.writers import relaunched_writer
from ...view import SeenAtAttach, seen_at_attach, silent_at_attach, silent_text
from .base import Attachment, LiveTarget

# what the bytes before the attach were: an ended startup (history), or None (`seen_at_attach`)
JudgeAttach = Callable[[State, float | None, float], SeenAtAttach | None]


@dataclass
class ResumedBytes:
    """A daemon restarted from a checkpoint reads again from the saved offset: the
    unfinished last line (a tqdm bar's frame has no line end until the next one), and the
    lines written while it was down.  They were written by the file's last write at the
    resume (`Opened.mtime`), not when they are read: the log's silence counts from there.
    Before, a loading server hung mid-bar (or dead while the daemon was down) was taken as
    active at the restart: its stall came one `stall_after` after the restart, not at once,
    saying "no new line for 8.1s" after 22 s of silence (the frame read again at the
    restart, its quiet flush counted as a new line)."""

    end: int | None = None        # the file's size at the resume
    mtime: float | None = None    # its last write (our clock)

    def opened(self, ev: Opened) -> None:
        """Armed by a resume; kept while the same byte stream goes on (`new_file` false: an
        SSH connection lost and opened again reads on at its offset, and what it reads up to
        `end` was still written before the restart).  Before, any other open ended it: a
        connection that failed once under load right after the restart had the frame read
        again counted as a new line (a stall page "no new line for 4.3s" after ~9 s)."""
        if ev.reason == "resume" and ev.size is not None and ev.mtime is not None and \
                ev.size > ev.offset:
            self.end, self.mtime = ev.size, clock.from_wall(ev.mtime)
        elif ev.reason == "resume" or ev.new_file or ev.reason == "attach":
            self.end = self.mtime = None

    def hold(self, pipe: LogPipeline | None, offset: int | None,
             last_line_at: float | None) -> float | None:
        """While everything read since the resume lies before its size: the activity and the
        last line's time no later than the file's last write then.  The new last_line_at."""
        if self.end is None or self.mtime is None or pipe is None or offset is None:
            return last_line_at
        if offset > self.end:          # a byte written since the restart: live from here
            self.end = self.mtime = None
            return last_line_at
        st = pipe.state
        if st.last_activity is not None and st.last_activity > self.mtime:
            st.last_activity = self.mtime
        return min(last_line_at, self.mtime) if last_line_at is not None else None


def untimed_at_attach(st: State) -> str | None:
    """The startup read at attach from lines not all stamped (read at one moment): how long
    it takes is unknown, also when it gets ready live (the ledger's `untimed`)."""
    return st.startup_id if st.spans and not st.timed_by_log else None


@dataclass(frozen=True)
class CatchUpPart:
    """The target view's catch-up fields."""

    catching_up: bool
    seen_at_attach: SeenAtAttach | None
    silent_since: float | None


# events a catch-up holds that its checkpoint keeps (a startup's phases, its ready, its crash
# and a serving figure are a few dozen); more, and no checkpoint is written until its end
MAX_SAVED_HELD = 2000

# seconds a node's clock may be behind ours when a `cmd:` log is dated by its wrapper's stamps
# (kubectl's `--timestamps`, journald's): its latest startup is history only when it ended
# more than FRESH_WINDOW + this before the attach (adv57: a node 90 s behind lost a page)
STAMP_CLOCK_MARGIN = 300.0


class CatchUp(Attachment):
    """The attach boundary, the events held before it, and what they turned out to be."""

    def __init__(self, *, report_history: bool = False, log_sources: bool = True) -> None:
        self.judge_attach: JudgeAttach = seen_at_attach   # watch of a local file: `relaunched`
        self.report_history = report_history   # the owner wants an ended startup's events too
        self.log_sources = log_sources         # watch says a silence as its verdict instead
        self.attach_end: int | None = None
        self.attach_mtime: float | None = None
        self.catching_up = False
        self.held: list[Event] = []
        self.held_crashes: list[CrashSettled] = []   # settled while catching up: news?
        self.resumed = False   # caught up on from a checkpoint written while catching up
        self.seen_at_attach: SeenAtAttach | None = None
        self.untimed_startup: str | None = None   # `untimed_at_attach`
        self.silent_since: float | None = None  # a startup silent past its budget at attach
        self.log: Any = None

    def bind(self, target: LiveTarget) -> None:
        self.log = target.log

    def opened(self, ev: Opened) -> None:
        """A first attach with bytes before its offset: those are caught up on first.  Another
        file during the catch-up (the log truncated by a relaunch's `>`, replaced, a command
        run again): the rest of the attach's bytes will never come, so the catch-up ends where
        the new file begins (`end`).  Before, it waited for the new file to pass the old
        one's size: a relaunch that crashed 2 s into a truncated 47 MB log was held (no page,
        no count, no checkpoint, `catching_up` true) until its log grew 47 MB."""
        if self.resumed and ev.reason == "attach":
            self._forget()     # the checkpoint's file was not found again: attached afresh
        if self.catching_up and ev.new_file:
            self.attach_end = ev.offset
            return
        if ev.reason == "attach" and ev.size is not None and self.attach_end is None \
                and ev.size > ev.offset:
            # the file's last write on our clock (a node's mtime came on this machine's
            # wall clock from its source; the wall clock may have stepped since we started)
            self.attach_end = ev.size
            self.attach_mtime = clock.from_wall(ev.mtime) if ev.mtime is not None else None
            self.catching_up = True

    def split(self, ev: Data) -> tuple[Data, Data] | None:
        """The attach boundary inside a chunk: (before, after), decided in that order."""
        end = self.attach_end
        if not self.catching_up or end is None or not ev.offset < end < ev.offset + len(ev.data):
            return None
        cut = end - ev.offset
        return Data(ev.data[:cut], ev.offset), Data(ev.data[cut:], end)

    def admit(self, events: list[Event]) -> list[Event]:
        """What of these events reaches the owner now: nothing while catching up (held),
        nothing more of the startup that had ended before the attach (its crash settling)."""
        if self.catching_up:
            self.hold(events)
            return []
        historic = self.seen_at_attach.startup_id if self.seen_at_attach and \
            not self.report_history and self.ended_at_attach(self.seen_at_attach.startup_id) \
            else None
        if historic is None:
            return events
        return [e for e in events if getattr(e, "startup", None) != historic]

    def hold(self, events: list[Event]) -> None:
        """Held until the catch-up ends, a serving figure or a counter's progress only as
        the latest of a run of them: each carries the figures as they stand, so the one
        before it says nothing more (before, a startup serving for days held one per batch
        line read: 600 MB for the 2M lines of a 2 GB log's last launch, where the design
        keeps memory flat; a 5,000-shard bar held 5,000, too many for its checkpoint)."""
        held = self.held
        for ev in events:
            if held and _supersedes(ev, held[-1]):
                held[-1] = ev
            else:
                held.append(ev)

    def end(self, pipe: LogPipeline | None, offset: int | None) -> list[Event] | None:
        """Once the bytes before the attach offset are through the rules: were they news?
        The held events for the owner ([] when they were history), None while not over."""
        if not self.catching_up or pipe is None or self.attach_end is None or \
                offset is None or offset < self.attach_end:
            return None
        now = clock.now()
        if self.attach_mtime is None and pipe.clock.newest_zoned is not None:
            # no file time (a `cmd:`, stdin): its wrapper's absolute stamps (kubectl's
            # `--timestamps`, CRI, journald's) date its last write, never after now.  Before,
            # idle was 0: `kubectl logs -f` of a pod that crashed two days ago paged the
            # crash and counted it at the first attach.  The stamps are the node's clock, which
            # nothing here measures: STAMP_CLOCK_MARGIN later, so a node a few minutes behind
            # does not turn a fresh crash into history (a lost page is worse than a late one)
            self.attach_mtime = min(clock.from_wall(pipe.clock.newest_zoned)
                                    + STAMP_CLOCK_MARGIN, now)
        if self.attach_mtime is not None and now - self.attach_mtime >= PARTIAL_LINE_QUIET:
            # its unfinished last line (a bar's last frame, a line cut by a kill) was written
            # before the last write too, long enough ago to be all there is: read with the
            # rest (before, read 5 s later and timed then: a hung launch 19 minutes silent
            # read `launching 0.0s (total 0.0s)` beside `no new line for 19m07s`)
            self.hold(pipe.read_open_line(now))
        self.catching_up = self.resumed = False
        held, self.held = self.held, []
        retime(pipe.state, self.attach_mtime)   # what it held is timed by its stamps
        st = pipe.state
        self.untimed_startup = untimed_at_attach(st)
        if self.attach_mtime is not None and (st.phase == CRASHED and not st.crash_settled
                                              or st.phase in pipe.pack.startup_phases):
            # bytes written before: the log has been quiet since its last write, not since
            # we read it (an unconfirmed crash waits for quiet, a follower's ready too:
            # machine; a stall counts from there: `_silent_at_attach`)
            st.last_activity = min(st.last_activity or self.attach_mtime, self.attach_mtime)
            held += pipe.machine.quiet_before(st, st.last_activity, now)
        self.seen_at_attach = self.judge_attach(pipe.state, self.attach_mtime, now)
        if self.seen_at_attach is None:
            self._silent_at_attach(pipe, now)
            return held
        s = self.seen_at_attach
        # (a ready startup is serving, not ended: "ended" read as a dead server to adv49)
        self.log.info("the latest startup in the log had its verdict before it was read: "
                      "history, not alerted", phase=s.phase, ago=round(s.ago),
                      startup=s.startup_id)
        return held if self.report_history else []

    def _silent_at_attach(self, pipe: LogPipeline, now: float) -> None:
        """A startup whose log went silent longer ago than its phase's stall budget: its
        silence is counted from the file's last write, not from when we read it, so the
        machine's next tick stalls it (one `Stalled`: one alert, watch's exit 3) and the
        view says "silent since ...: server probably dead" instead of an ETA."""
        st = pipe.state
        # (its activity is the file's last write, set in `end`: within its budget too, the
        # stall comes when the log's silence, not our read's, passes it, and says that
        # silence; before, `stalled: no new line for 15m00s` 15 minutes after the attach of
        # a log silent for 14 minutes then)
        since = silent_at_attach(st, self.attach_mtime, now,
                                 pipe.machine.stall_budget(st.phase), pipe.pack.startup_phases)
        if since is None:
            return
        self.silent_since = since
        st.last_activity = min(st.last_activity or since, since)
        if self.log_sources:          # the daemon says it once; watch says it as its verdict
            self.log.warning(silent_text(since, now), phase=st.phase, startup=st.startup_id)

    def lapse(self, pipe: LogPipeline | None) -> None:
        """A line came after the silence read at attach: that silence is over, and a later
        stall is counted from the new line.  Before, the log that wrote again and then
        stalled again said "silent since <the attach's last write> (1h05m): server probably
        dead" with its last line 28 s old (helper adv37)."""
        st = pipe.state if pipe is not None else None
        if self.silent_since is not None and not self.catching_up and st is not None and \
                st.last_activity is not None and st.last_activity > self.silent_since:
            self.silent_since = None

    def ended_at_attach(self, startup: str | None) -> bool:
        """`startup` is the one that had crashed or stopped before we attached: history.  One
        that was ready then is a server up before us: probed, its stats read, its crash
        alerted from the first read (its address from the whole startup, caught up on)."""
        s = self.seen_at_attach
        return s is not None and s.startup_id == startup and s.phase != READY

    saved_as = "catchup"

    def saved(self) -> dict[str, Any] | None:
        """What a restart needs: while catching up, where the attach ended, the file's last
        write then and the events held so far (`MidCatchUp`), so that a daemon killed every
        few seconds through the catch-up of a 95 MB log goes on from its last checkpoint
        (before, none was written then: it read the log again from its latest startup at
        each start, and never got to its end); after it, the startup that had ended before
        the first attach (its crash settles ~2 s later, and a daemon killed before that
        took it for news at the restart: a crash of 3 days ago paged and counted)."""
        doc: dict[str, Any] = {}
        if self.seen_at_attach is not None:
            doc["seen_at_attach"] = self.seen_at_attach.to_json()
        if self.catching_up and self.resumable():
            doc["catching_up"] = {"end": self.attach_end, "mtime": self.attach_mtime,
                                  "held": _events_json(self.held),
                                  "crashes": _events_json(self.held_crashes)}
        return doc or None

    def resumable(self) -> bool:
        """A checkpoint can say where this catch-up stands (not holding more events than
        MAX_SAVED_HELD: then it is read again from its start after a restart)."""
        return not self.catching_up or self.attach_end is not None and \
            len(self.held) + len(self.held_crashes) <= MAX_SAVED_HELD

    def resume(self, doc: dict[str, Any]) -> None:
        self.seen_at_attach = _seen_from_json(doc.get("seen_at_attach"))
        mid = _mid_from_json(doc.get("catching_up"))
        if mid is not None:
            self.attach_end, self.attach_mtime, self.held, self.held_crashes = mid
            self.catching_up = self.resumed = True

    def _forget(self) -> None:
        """A catch-up resumed from a checkpoint whose file is gone: what it held is dropped
        (the new file's attach begins its own)."""
        self.catching_up = self.resumed = False
        self.attach_end = self.attach_mtime = None
        self.held, self.held_crashes = [], []

    def view(self, now: float) -> CatchUpPart:
        return CatchUpPart(self.catching_up, self.seen_at_attach, self.silent_since)

    def key(self) -> Any:
        return (self.catching_up, self.silent_since)


def _supersedes(ev: Event, before: Event) -> bool:
    """`ev` says all that `before` said: the startup's serving figures, or the same
    counter's progress, as they stand a line later."""
    if type(ev) is StatsUpdated and type(before) is StatsUpdated:
        return ev.epoch == before.epoch
    if type(ev) is Progress and type(before) is Progress:
        return ev.epoch == before.epoch and ev.counter == before.counter
    return False


def _events_json(events: list[Any]) -> list[dict[str, Any]]:
    return [d for d in map(event_to_json, events) if d is not None]


def _seen_from_json(s: object) -> SeenAtAttach | None:
    """A checkpoint's `seen_at_attach` (None where it is missing or damaged)."""
    if not isinstance(s, dict) or not isinstance(s.get("phase"), str):
        return None
    sid, reason, idle = s.get("startup_id"), s.get("reason"), s.get("idle_since")
    ago = s.get("ago")
    if not (sid is None or isinstance(sid, str)) or not isinstance(ago, (int, float)) or \
            not (reason is None or isinstance(reason, str)) or \
            not (idle is None or isinstance(idle, (int, float))):
        return None
    return SeenAtAttach(s["phase"], sid, float(ago), None if idle is None else float(idle),
                        reason)


def relaunched(path: str) -> JudgeAttach:
    """`seen_at_attach` for `watch` of the local file `path`, and more: the latest startup's
    verdict came seconds before the attach, and a process that started after it writes the
    log (`relaunched_writer`): the operator relaunched into the same file (`>>`, `nohup`),
    and that launch has not printed yet (its imports take seconds).  Its verdict is history,
    so watch waits for the relaunch's own.  Before, watch run at once after an appending
    relaunch exited 1 on the crash of the launch before it, 0 on a ready one killed -9
    (adv132's relaunch loops)."""
    def seen(st: State, mtime: float | None, now: float) -> SeenAtAttach | None:
        old = seen_at_attach(st, mtime, now)
        ended = seen_at_attach(st, mtime, now, fresh=0.0) if mtime is not None else None
        if old is not None or ended is None:
            return old
        try:
            f = os.stat(os.path.expanduser(path))
        except OSError:
            return None
        pid = relaunched_writer(f.st_dev, f.st_ino, clock.wall() - ended.ago,
                                alive=ended.phase == READY)
        return None if pid is None else dataclasses.replace(ended, writer=pid)
    return seen


MidCatchUp = tuple[int, float | None, list[Event], list[CrashSettled]]


def mid_catch_up_unreadable(kept: object) -> bool:
    """A checkpoint written while a first attach caught up whose catch-up does not read back
    (`kept`: its `catchup` entry): its position and state must go too, the log attached
    afresh.  Before, the catch-up alone was dropped and the rest of the log read on from the
    position as live lines: a crash of 3 days ago in it paged and counted."""
    return isinstance(kept, dict) and "catching_up" in kept and \
        _mid_from_json(kept["catching_up"]) is None


def _mid_from_json(c: object) -> MidCatchUp | None:
    """A checkpoint's catch-up under way: (its end, the file's last write then, the events
    held, the crashes settled); None where it is missing or damaged (an event that does not
    read back drops it all: the log is then attached afresh, as before checkpoints were
    written while catching up)."""
    if not isinstance(c, dict) or type(c.get("end")) is not int or \
            not (c.get("mtime") is None or isinstance(c.get("mtime"), (int, float))) or \
            not isinstance(c.get("held"), list) or not isinstance(c.get("crashes"), list):
        return None
    held = [event_from_json(d) for d in c["held"]]
    crashes = [event_from_json(d) for d in c["crashes"]]
    if any(e is None for e in held) or not all(isinstance(e, CrashSettled) for e in crashes):
        return None
    mtime = c["mtime"]
    return (c["end"], None if mtime is None else float(mtime),
            [e for e in held if e is not None], [e for e in crashes if isinstance(e, CrashSettled)])
