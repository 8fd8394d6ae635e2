"""A live target's checkpoints: what is restored at start, and when one is written.

A checkpoint (state_dir/positions/<name>.json, state/positions.py) holds the read position
together with the machine state (its StartupId and whether its crash settled), the
counters and the target's latest alert marks, written at the same moment, so a restarted
daemon (even after kill -9) continues with the phase and the counters it had, and counts
no line, startup or crash twice.

Checkpoint format 2 (`extra.format`): the state carries `startup_id`.  A format-1 checkpoint
(before StartupId) is upgraded in place: its startup keeps the id the alerts of that
version were keyed on, so nothing is alerted again.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from .. import clock
from ..counters import Counters
from ..follow import Follower
from ..machine import State, state_from_json, state_to_json
from ..pipeline import ShownLine
from ..rules.pack import CRASHED, RulePack, load_pack
from ..sources import Position
from ..state.positions import PositionStore
from .attachments.catchup import mid_catch_up_unreadable
from .config import TargetConfig

FORMAT = 2                  # checkpoint format (see the module docstring)
DURABLE_EVERY = 30.0        # fsync checkpoints this often (each write is atomic anyway)
# while a first attach catches up: a checkpoint every CATCH_UP_EVERY seconds, once CATCH_UP_BYTES
# more are read (a daemon killed every 2 s goes on through a 95 MB log; a fleet catching up
# writes no more often than it reads MiBs)
CATCH_UP_EVERY = 1.0
CATCH_UP_BYTES = 1 << 20


def upgrade_state(state: State, counters: dict[str, Any]) -> State:
    """A format-1 machine state: give its startup the id format 1 keyed alerts on
    (`epoch@first-seen`, whole seconds) and settle its crash if format 1 had counted it."""
    first = state.history[0].at if state.history else 0.0
    if state.startup_id is None and state.history:
        state.startup_id = f"{state.epoch}@{first:.0f}"
    if state.phase == CRASHED and counters.get("crash_counted") == f"{state.epoch}@{first:.3f}":
        state.crash_settled = True
    return state


def checkpoint_phase(name: str) -> float:
    """Where in its checkpoint interval a target checkpoints, in [0, 1): from its name, so
    a fleet started together spreads its writes (and the same target keeps its slot)."""
    return (zlib.crc32(name.encode("utf-8", "surrogatepass")) % 997) / 997


@dataclass
class Restored:
    """What a target starts from: its checkpoint, or nothing (a first attach)."""

    position: Position | None = None
    pack: RulePack | None = None
    state: State | None = None
    counters: Counters = field(default_factory=Counters)
    alert_marks: dict[str, float] = field(default_factory=dict)   # what was alerted
    alert_pending: list[dict[str, Any]] = field(default_factory=list)   # ... not delivered
    last_line_at: float | None = None
    silent_since: float | None = None   # a startup silent past its budget at the first attach
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)  # attachments' `saved`
    shown: ShownLine | None = None      # what was read of the line cut at the position


def restore(store: PositionStore | None, cfg: TargetConfig, candidates: list[RulePack],
            log: Any) -> Restored:
    """The target's checkpoint as it can be used: a changed source starts afresh, an
    unreadable state starts the phase over, a position without a usable state or pack is
    dropped (the log is attached again at its latest startup)."""
    position, extra = store.load(cfg.name) if store is not None else (None, {})
    if extra.get("source") not in (None, cfg.source):
        log.info("source changed since the last run: starting afresh")
        position, extra = None, {}
    out = Restored()
    if cfg.rules != "auto":
        out.pack = load_pack(cfg.rules)
    elif extra.get("pack"):
        out.pack = next((p for p in candidates if p.name == extra["pack"]), None)
    if extra.get("counters"):
        try:
            out.counters = Counters.from_json(extra["counters"])
        except ValueError as e:
            log.warning("saved counters unreadable: counting starts over", error=str(e))
    if isinstance(extra.get("alerts_seen"), dict):
        out.alert_marks = {str(k): float(v) for k, v in extra["alerts_seen"].items()
                           if isinstance(v, (int, float))}
    if isinstance(extra.get("alerts_pending"), list):
        out.alert_pending = [e for e in extra["alerts_pending"] if isinstance(e, dict)]
    if isinstance(extra.get("last_line_at"), (int, float)):
        out.last_line_at = float(extra["last_line_at"])
    if isinstance(extra.get("silent_since"), (int, float)):
        out.silent_since = float(extra["silent_since"])
    if isinstance(extra.get("attachments"), dict):
        out.kept = {str(k): v for k, v in extra["attachments"].items() if isinstance(v, dict)}
    if mid_catch_up_unreadable(out.kept.get("catchup")):
        # written while a first attach caught up: without its catch-up the position would
        # read the rest as news (a crash of days ago paged); what no checkpoint was, then
        log.warning("saved catch-up unreadable: the log is attached afresh")
        return Restored(pack=out.pack if cfg.rules != "auto" else None)
    if extra.get("state") and out.pack is not None and position is not None:
        try:
            out.state = state_from_json(extra["state"])
            if extra.get("format") != FORMAT:
                out.state = upgrade_state(out.state, extra.get("counters") or {})
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            # a state of the wrong shape (a list for an object) failed the target, for good
            log.warning("saved machine state unreadable: phase starts over", error=str(e))
    if out.state is not None and "shown" in extra:
        out.shown = ShownLine.restored(extra["shown"])
    if out.state is None and extra.get("state") is None and position is not None \
            and out.pack is None:
        position = None
    out.position = position
    return out


class Checkpoints:
    """When a target writes its checkpoint, and the writing.  Targets started together
    would checkpoint together: at 500, every interval 500 renames, and every DURABLE_EVERY
    500 fsyncs, in one pass of the loop (a stall of about a second); each target's
    checkpoints are offset by a share of the interval taken from its name."""

    def __init__(self, store: PositionStore | None, name: str, interval: float) -> None:
        self.store, self.name = store, name
        self.interval = interval
        phase = checkpoint_phase(name)
        started = time.monotonic()
        self.next = started + phase * interval
        self.next_durable = started + phase * DURABLE_EVERY
        self.last = 0.0
        self.offset = 0         # the last checkpoint's
        self.dirty = False
        self.now = False        # a new startup: checkpointed at the next tick

    def due(self, wall: float, catching_up_at: int | None = None) -> bool:
        """A checkpoint is due: every interval (or at once: `now`); while a first attach
        catches up (`catching_up_at`: the offset read to), more often (CATCH_UP_EVERY): the
        interval (5 s) outlived a daemon restarted every 2 s, which then never got through."""
        if catching_up_at is not None and self.dirty and wall - self.last >= CATCH_UP_EVERY \
                and catching_up_at - self.offset >= CATCH_UP_BYTES:
            return True
        return self.dirty and (wall >= self.next or self.now)

    def write(self, follower: Follower, source: str, counters: Counters,
              last_line_at: float | None, alert_marks: dict[str, float] | None,
              durable: bool = False, silent_since: float | None = None,
              kept: dict[str, dict[str, Any]] | None = None,
              alert_pending: list[dict[str, Any]] | None = None) -> None:
        """The position and the state, with the counters, in one atomic file (`durable`:
        fsynced).  Nothing before the pack is chosen or the first bytes.  `silent_since`: the
        log's last write, when it was silent past its budget at the first attach and still
        is (a restarted daemon says "probably dead" on, not a plain `stalled`).  `kept`: what
        its attachments keep across a restart, by their `saved_as`.  `alert_marks` None:
        an alert this target decided is not on disk yet; not now (tried at the next tick).
        `alert_pending`: its pages no receiver has taken yet, for a lost alert state."""
        pipe = follower.pipe
        if alert_marks is None:
            return
        pos = follower.position() if pipe is not None and self.store is not None else None
        if pos is None or pipe is None or self.store is None:
            return
        extra = {"format": FORMAT, "source": source, "pack": pipe.pack.name,
                 "last_line_at": last_line_at, "state": state_to_json(pipe.state),
                 "counters": counters.to_json(), "alerts_seen": alert_marks,
                 "saved_at": clock.now()}
        if silent_since is not None:
            extra["silent_since"] = silent_since
        if (shown := pipe.shown.saved(pos.offset)) is not None:
            extra["shown"] = shown      # the line cut there, read again at a restart
        if kept:
            extra["attachments"] = kept
        if alert_pending:
            extra["alerts_pending"] = alert_pending
        if not self.store.save(self.name, pos, extra, durable=durable):
            return        # the disk refused it: counted, said once, tried again next time
        now = time.monotonic()
        self.last, self.offset = now, pos.offset
        self.now = False
        if now >= self.next:   # (one out of turn keeps the target's phase)
            self.next = now + self.interval
        if durable:
            self.next_durable = now + DURABLE_EVERY
        self.dirty = False

    def age(self) -> float:
        """Seconds since the last checkpoint (0: none yet)."""
        return max(0.0, time.monotonic() - self.last) if self.last else 0.0
