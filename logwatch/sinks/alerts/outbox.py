"""The alert outbox: what was decided, what is being sent, what was sent, persisted.

`state_dir/alerts/state.json`, written atomically after every change, off the event loop
and at most once per `SAVE_EVERY` (state/coalesce.py: 500 servers crashing with a dead
receiver rewrote 4-6 MB on the loop at every decision and attempt, /healthz 5.7 s late):
* `seen`: the alert marks (key + status) put in the outbox -> when: each target's newest
  `alert_marks` (64; what its checkpoint carries too), 20,000 in all.  A mark is put in
  the outbox once; a policy that decides the same alert again (after a restart, a re-read
  of the log, a SIGHUP) finds it here and does nothing.  Before, every target's marks
  were kept up to the 20,000: a fleet of 40 servers restarting every few seconds grew the
  file to 1.1 MB in 11 minutes, rewritten up to 5 times a second (the daemon's CPU 24 ->
  37 s a minute at the same load; adv134).  A target no longer watched keeps its marks
  until `state_retention` prunes its state (`forget`).
* `outbox`: one entry per (alert, sink) still to deliver.  Two-phase: an entry is marked
  `sending` and saved before its POST, and removed (recorded in `sent`) after the receiver
  said yes.  After a kill -9 an entry still `sending` may have arrived or not: it is sent
  again with the same `Idempotency-Key` (its mark), so a receiver can drop the copy; an
  entry already removed is never sent again.
* `open`: alerts that wait for their resolution (crashed, stalled, slow).

What the design promises across a kill -9 holds as when each change was written at once:
a POST waits until its entry's `sending` is written (`Delivery`), and a target's
checkpoint, which carries its marks and a read position past the lines that decided them,
waits until the decisions of that target are written (`unsaved`): a decision lost by a
kill -9 is made again from the log re-read, never taken as sent.  A delivered entry's
removal is written at once (right after a write under way; a kill -9 before it: sent
again with the same Idempotency-Key, as a kill inside the POST always was).

An entry names its sink and the sink's destination (a digest of its type and URL): a reload
that renames or reorders the sinks leaves each alert with its receiver (`rebind`).

An unreadable file is reported with its path and set aside (`state.json.corrupt`); the
marks the targets' checkpoints carry (`adopt`) keep what was sent from being sent again, and
the undelivered pages they carry (`pending_of`) are queued again (`restore_pending`): the
marks alone took a page still waiting for a receiver as sent, and it was lost unsaid.
A newer version's file is not unreadable: the daemon refuses that state_dir at start
(state/formats.py), before this store reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ... import clock, log
from ...state.coalesce import CoalescedFile
from ...state.files import copy_aside, read_state_json, remove_left_temps, set_aside
from ...state.formats import StoreFormat
from .model import FIRING, Alert

if TYPE_CHECKING:
    from .receivers import Sink

VERSION = 2            # 1: without the two-phase `state` of entries (read as queued)
FORMAT = StoreFormat("alert state", "alerts/state.json", VERSION)   # a newer one: formats.py
SEEN_KEEP = 20000
SEEN_SLACK = 1000      # marks past SEEN_KEEP before the oldest are trimmed (to SEEN_KEEP)
MARKS_KEPT = 64        # marks per target kept (`alert_marks`'s default), and in its checkpoint
QUEUED, SENDING = "queued", "sending"
SAVE_EVERY = 0.2       # seconds: at most one write of the file per this (coalesce.py)


def target_of(mark: str) -> str:
    """The target a mark is of: its key begins with the target's name (`name|startup|..`;
    a name has no `|`)."""
    return mark.split("|", 1)[0]


def sinks_record(sinks: list[Sink]) -> list[dict[str, str]]:
    """What an open alert keeps of the sinks its firing went to: name, destination and type
    (`unrecord_dropped` keeps an Alertmanager's)."""
    return [{"name": s.name, "dest": s.destination, "type": s.type} for s in sinks]


def unrecord_dropped(open_docs: dict[str, dict[str, Any]], dropped: list[dict[str, Any]]
                     ) -> bool:
    """The firings dropped undelivered because their sink is no longer configured
    (`AlertStore.rebind`): their open alerts no longer record that sink, so that, added
    again at a later reload, it is paged at the loop's next crash (loop.fold) and gets no
    resolution of a page it never had.  One on its way or unanswered (the receiver may
    have it) stays recorded, and so does an Alertmanager, whose re-sends of the open
    alerts are its retries (re-added, it has the alert back at the next `resend`).
    Before, a sink removed at a SIGHUP while its crash page was queued (Slack answering
    503), re-added at the next, was not paged at the loop's next crash, and got the
    ready's resolution of a crash it never had.  True where one changed."""
    changed = False
    for e in dropped:
        doc = open_docs.get(e["alert"]["key"])
        if doc is None or e["alert"]["status"] != FIRING or e.get("state") == SENDING or \
                e.get("unknown") or not isinstance(doc.get("sinks"), list):
            continue
        kept = [r for r in doc["sinks"] if not isinstance(r, dict) or
                r.get("type") == "alertmanager" or
                (r.get("dest") != e.get("dest") if r.get("dest") else r.get("name") != e["sink"])]
        changed = changed or len(kept) < len(doc["sinks"])
        doc["sinks"] = kept
    return changed


def went_to(doc: dict[str, Any], sink: Sink) -> bool:
    """Did the firing of the open alert `doc` go to `sink`?  By destination (a sink renamed
    or moved), else by name (its URL changed at a reload), as `rebind` finds a queued
    entry's sink.  An alert opened before sinks were recorded: every sink (it went to those
    that took it)."""
    record = doc.get("sinks")
    if record is None:
        return True
    return any(r.get("dest") == sink.destination or r.get("name") == sink.name
               if isinstance(r, dict) else r == sink.destination for r in record)


def _alert_ok(doc: Any) -> bool:
    """`doc` is an alert as `Alert.to_json` writes it (what the router and delivery read)."""
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in
                                            ("key", "kind", "status", "target")):
        return False
    try:
        Alert.from_json(doc)
    except TypeError:
        return False
    return isinstance(doc.get("labels", {}), dict) and isinstance(doc.get("details", {}), dict)


def _usable_open(raw: Any) -> tuple[dict[str, dict[str, Any]], int]:
    """The open alerts whose shape is this version's, and how many were not."""
    if not isinstance(raw, dict):
        raise ValueError("`open` is not an object")
    good = {str(k): dict(v) for k, v in raw.items()
            if _alert_ok(v) and isinstance(v.get("sinks", []), (list, type(None)))}
    return good, len(raw) - len(good)


def _usable_outbox(raw: Any) -> tuple[list[dict[str, Any]], int]:
    """The outbox entries whose shape is this version's, and how many were not."""
    if not isinstance(raw, list):
        raise ValueError("`outbox` is not a list")
    good = []
    now = clock.now()
    for e in raw:
        try:
            if isinstance(e, dict) and isinstance(e.get("sink"), str) and \
                    _alert_ok(e.get("alert")):
                good.append({**e, "id": int(e["id"]), "attempts": int(e.get("attempts", 0)),
                             "first_at": float(e.get("first_at", now)),
                             "next_at": float(e.get("next_at", now))})
        except (KeyError, TypeError, ValueError):
            pass
    return good, len(raw) - len(good)


def carried_back(outbox: list[dict[str, Any]], entries: list[dict[str, Any]],
                 ids: Any) -> list[dict[str, Any]]:
    """The pages a checkpoint carried as undelivered (`AlertStore.pending_of`) as outbox
    entries again, each due now with its mark: the same Idempotency-Key, so a receiver that
    had it before the file was lost drops the copy; those already queued are not doubled.
    Should this file be lost or damaged, the checkpoint's marks say what was decided, and
    these are what the receivers had not taken yet.  Before, only the marks were carried:
    a crash page waiting for a receiver that was down was lost unsaid."""
    queued = {(e["alert"]["key"], e["alert"]["status"], e.get("dest")) for e in outbox}
    now = clock.now()
    given = [{**{k: v for k, v in e.items() if v is not None}, "id": 0}
             for e in entries if isinstance(e, dict)]
    back = []
    for e in _usable_outbox(given)[0]:
        which = (e["alert"]["key"], e["alert"]["status"], e.get("dest"))
        if which in queued:
            continue
        queued.add(which)
        back.append({"id": next(ids), "sink": e["sink"], "dest": e.get("dest"),
                     "state": QUEUED, "alert": e["alert"], "attempts": 0,
                     "first_at": e["first_at"], "next_at": now})
    return back


@dataclass
class Decisions:
    """Which targets' decisions are not on disk yet (their checkpoints wait, `unsaved`).
    The change number a decision is in is taken at its save: before, it was guessed at
    the mark (the next number), and a mark taken back by the rate limit (never saved) put
    its number over a crash decided just before; `unsaved` took it as never to be written,
    and the checkpoint, the crash mark in it, went before the crash was on disk."""

    deciding: set[str] = field(default_factory=set)   # decided, the save not asked yet
    decided: dict[str, int] = field(default_factory=dict)   # target -> its latest's change

    def saved_as(self, gen: int) -> int:
        for target in self.deciding:
            self.decided[target] = gen
        self.deciding.clear()
        return gen

    def unsaved(self, target: str, file: CoalescedFile) -> bool:
        if target in self.deciding:
            return True
        gen = self.decided.get(target)
        if gen is not None and not file.unsaved(gen):
            del self.decided[target]
            gen = None
        return gen is not None


class TargetMarks:
    """Each target's marks in the store's `seen`, oldest first, at most `per_target` of
    them (`alert_marks`): as a newer one comes, the oldest leaves `seen` too.  The marks a
    target's checkpoint carries (`AlertStore.marks_of`)."""

    def __init__(self, per_target: int) -> None:
        self.per_target = per_target
        self.of: dict[str, dict[str, float]] = {}

    def index(self, seen: dict[str, float]) -> None:
        """Built from `seen`, each target's older marks left out of it."""
        mine: dict[str, dict[str, float]] = {}
        for m, at in seen.items():
            mine.setdefault(target_of(m), {})[m] = at
        self.of = {}
        for t, marks in mine.items():
            self.merge(seen, t, marks)

    def merge(self, seen: dict[str, float], target: str, marks: dict[str, float]) -> None:
        """`marks` (in `seen`) joined to the target's, the newest kept, the rest out of `seen`:
        a checkpoint's, adopted (the target's alone walked, not the 20,000)."""
        ordered = sorted((at, m) for m, at in {**self.of.get(target, {}), **marks}.items())
        for _, m in ordered[:-self.per_target]:
            seen.pop(m, None)
        self.of[target] = {m: at for at, m in ordered[-self.per_target:]}

    def add(self, seen: dict[str, float], mark: str, at: float) -> None:
        mine = self.of.setdefault(target_of(mark), {})
        mine.pop(mark, None)
        mine[mark] = at
        while len(mine) > self.per_target:
            old = next(iter(mine))
            del mine[old]
            seen.pop(old, None)

    def drop(self, mark: str) -> None:
        mine = self.of.get(target_of(mark))
        if mine is not None:
            mine.pop(mark, None)

    def forget(self, seen: dict[str, float], targets: set[str]) -> int:
        gone = [m for m in seen if target_of(m) in targets]
        for m in gone:
            del seen[m]
        for t in targets:
            self.of.pop(t, None)
        return len(gone)


def keep_marks(store: "AlertStore", per_target: int) -> None:
    """`alert_marks` set (again, at a reload): each target's older marks go now."""
    if per_target != store.marks.per_target:
        before, store.marks.per_target = len(store.seen), per_target
        store.marks.index(store.seen)
        if len(store.seen) < before:
            store.save()


def forget_marks(store: "AlertStore", targets: set[str]) -> int:
    """The marks of targets whose state `state_retention` removed (daemon.py `prune_state`:
    their checkpoints, with the marks they carried, are gone too): how many went."""
    gone = store.marks.forget(store.seen, targets)
    if gone:
        store.save()
    return gone


class AlertStore:
    """Dedupe marks, open alerts and the outbox, persisted together.

    Long because: the three are one file, written atomically; every change to any of them
    (and the pages a target's checkpoint carries back when that file is lost) goes through
    this one object, which knows what is on disk and what waits for it (`Decisions`)."""

    def __init__(self, state_dir: Path, per_target: int = MARKS_KEPT) -> None:
        self.path = Path(state_dir).expanduser() / "alerts" / "state.json"
        self.seen: dict[str, float] = {}
        self.open: dict[str, dict[str, Any]] = {}
        self._outbox: list[dict[str, Any]] = []
        self.pending_changed: set[str] = set()   # targets whose undelivered pages went
        self.loaded = self.said_lost = False     # read from its file (else: lost, or new)
        self.marks = TargetMarks(per_target)   # each target's newest marks (`alert_marks`)
        self.decisions = Decisions()         # which target's decisions are not on disk yet
        self.file = CoalescedFile("alerts", self.path, self._snapshot, SAVE_EVERY)
        self.log = log.get("alerts")
        self.load()

    def load(self) -> None:
        if remove_left_temps(self.path):   # (half a 4 MB write, each kill -9 in one)
            self.log.info("removed the unfinished writes of the alert state a killed "
                          "process left", dir=str(self.path.parent))
        try:
            doc = read_state_json(self.path)
            if not isinstance(doc, dict) or doc.get("version") not in (1, VERSION):
                raise ValueError(f"unknown version {doc.get('version')!r}"
                                 if isinstance(doc, dict) else "not a JSON object")
            self.seen = {str(k): float(v) for k, v in doc.get("seen", {}).items()}
            self.marks.index(self.seen)
            self.open, bad_open = _usable_open(doc.get("open", {}))
            self.outbox, bad_entries = _usable_outbox(doc.get("outbox", []))
            self.loaded = True
            if bad_open or bad_entries:
                self._said_damaged(bad_open, bad_entries)
            self._due_at_start()
            for e in self.outbox:
                if e.get("state") == SENDING:
                    self.log.info("alert delivery interrupted by the last stop: sending it again "
                                  "with the same Idempotency-Key", mark=e["alert"]["key"])
                e["state"] = QUEUED
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as e:
            self.seen, self.open, self.outbox = {}, {}, []
            aside = set_aside(self.path)
            self.log.error("alert state unreadable: starting without it (what the targets' "
                           "checkpoints record as alerted is not sent again)",
                           file=str(self.path), kept_as=str(aside), error=str(e))

    @property
    def outbox(self) -> list[dict[str, Any]]:
        """One entry per (alert, sink) still to deliver."""
        return self._outbox

    @outbox.setter
    def outbox(self, entries: list[dict[str, Any]]) -> None:
        """Entries taken out (delivered, given up, dropped): their targets' checkpoints are
        written again without them (`pending_of`), so a page delivered is never carried
        back by a checkpoint of before (a crashed server writes no more lines to make one)."""
        if self._outbox:
            kept = {id(e) for e in entries}
            self.pending_changed.update(str(e["alert"].get("target")) for e in self._outbox
                                        if id(e) not in kept)
        self._outbox = entries

    def pending_of(self, target: str) -> list[dict[str, Any]]:
        """The target's undelivered pages, for its checkpoint (`restore_pending`)."""
        return [{"sink": e["sink"], "dest": e.get("dest"), "alert": e["alert"],
                 "first_at": e.get("first_at")}
                for e in self._outbox if e["alert"].get("target") == target]

    def take_pending_changed(self) -> set[str]:
        changed, self.pending_changed = self.pending_changed, set()
        return changed

    def restore_pending(self, entries: list[dict[str, Any]], ids: Any) -> list[dict[str, Any]]:
        """Pages a checkpoint carried (`carried_back`) put back, saved; those put back."""
        back = carried_back(self._outbox, entries, ids)
        for e in back:
            if (mark := f"{e['alert']['key']}|{e['alert']['status']}") not in self.seen:
                self.seen[mark] = clock.now()
                self.marks.add(self.seen, mark, self.seen[mark])
        if back:
            self._outbox.extend(back)
            self.save()
        return back

    def _said_damaged(self, bad_open: int, bad_entries: int) -> None:
        """Entries of a readable file that are not what this version writes (a hand edit, a
        bit flip, a partial restore): left out, the rest kept, the file copied aside as it
        was.  Before, one of them stopped the daemon at every start (a crash loop)."""
        try:
            aside = copy_aside(self.path, self.path.read_bytes())   # once, until saved
        except OSError:
            aside = self.path
        self.log.error("alert state: entries of the wrong shape left out, the others kept",
                       file=str(self.path), kept_as=str(aside), open_left_out=bad_open,
                       outbox_left_out=bad_entries)

    def _due_at_start(self) -> None:
        """Every loaded entry is due now: the backoff of the process before is no reason to
        wait (the receiver may be back), and entries due together go oldest first.  Before,
        an entry kept the old process's backoff (up to 5 minutes) while one decided after
        the restart went at once: a receiver back after an outage spanning a restart got
        the pages of a target out of order.  A time the receiver asked for (Retry-After)
        is kept."""
        now = clock.now()
        for e in self.outbox:
            if not e.get("retry_after"):
                e["next_at"] = min(float(e.get("next_at", now)), now)

    def adopt(self, marks: dict[str, float]) -> None:
        """Marks a target's checkpoint recorded: alerts decided before, never to repeat."""
        new: dict[str, dict[str, float]] = {}
        for m, at in marks.items():
            if m not in self.seen:
                self.seen[m] = at
                new.setdefault(target_of(m), {})[m] = at
        for target, theirs in new.items():
            self.marks.merge(self.seen, target, theirs)

    def mark(self, target: str, mark: str, at: float, decided_by: str | None = None) -> None:
        """Record a mark as decided (sent, or being sent); written with the next save.
        `decided_by`: the target whose log decided it, if not `target` (`decided`)."""
        self.seen[mark] = at
        self.decided(decided_by or target)
        self.marks.add(self.seen, mark, at)

    def decided(self, target: str) -> None:
        """`target`'s log decided a change the next save writes: its checkpoint (past the
        lines that decided it) waits until it is on disk (`unsaved`).  Keyed by the alert's
        target, a renamed target's resolution of its old name's crash (or a drop, no mark)
        let the checkpoint go first: a kill -9 then left the crash open for good."""
        self.decisions.deciding.add(target)

    def carry_marks(self, renamed: dict[str, str]) -> None:
        """The marks of each target `old` are target `renamed[old]`'s too (a rename:
        router.py), from the marks as they were before any of them (a swap: each name
        gets the other's, not its own back)."""
        before = sorted((at, m) for m, at in self.seen.items())
        for old, new in renamed.items():
            prefix = f"{old}|"
            for at, m in before:
                if m.startswith(prefix):
                    self.mark(new, f"{new}|{m[len(prefix):]}", at)

    def unmark(self, target: str, mark: str) -> None:
        """A mark taken back before its save (the rate limit: router.py)."""
        self.decisions.deciding.discard(target)   # (its others were saved: `fire` saves each)
        self.seen.pop(mark, None)
        self.marks.drop(mark)

    def marks_of(self, target: str) -> dict[str, float]:
        """The latest marks of one target (kept in its checkpoint, read at every one)."""
        return dict(self.marks.of.get(target, {}))

    def take_open(self, which: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Remove the open alerts `which` picks and return them (to be resolved)."""
        taken = [(k, doc) for k, doc in self.open.items() if which(doc)]
        for k, _ in taken:
            del self.open[k]
        return [doc for _, doc in taken]

    def drop_undelivered(self, which: Callable[[dict[str, Any]], bool],
                         decided_by: str | None = None) -> None:
        """Drop the undelivered entries whose alert `which` picks (not one on its way, or
        unanswered before: the receiver may have it), and their open alerts where no other
        receiver has the firing; where one has, the open alert keeps only the sinks that
        may have it, to be resolved there.  Before, the open alert went with the entry of
        a receiver that was down: one that had the firing never got its resolution.
        `decided_by`: the target whose log dropped them (its checkpoint waits, `decided`)."""
        gone = [e for e in self.outbox if which(e["alert"]) and
                e.get("state") != SENDING and not e.get("unknown")]
        if not gone:
            return
        ids = {e["id"] for e in gone}
        self.outbox = [e for e in self.outbox if e["id"] not in ids]
        if decided_by is not None:
            self.decided(decided_by)
        for key in {e["alert"]["key"] for e in gone}:
            doc = self.open.get(key)
            lost = {(e["sink"], e.get("dest")) for e in gone if e["alert"]["key"] == key}
            kept = [r for r in (doc or {}).get("sinks") or [] if isinstance(r, dict) and not
                    any(r.get("name") == n or (d and r.get("dest") == d) for n, d in lost)]
            if doc is not None and kept:
                doc["sinks"] = kept
            else:
                self.open.pop(key, None)
        self.save()

    def rebind(self, sinks: list[Sink]) -> list[dict[str, Any]]:
        """Each undelivered alert stays with its receiver across a reload or a restart: found
        by destination (a sink renamed, or moved in the list, where a default name is its
        place: `webhook-0`), else by name if that sink takes it (its URL changed).  Those
        whose sink is gone are dropped and returned, for the caller to say and count.
        Before, entries were matched by name alone: a crash alert went to whichever sink
        now had the name, or was lost unsaid."""
        by_dest = {s.destination: s for s in sinks}
        by_name = {s.name: s for s in sinks}
        kept: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        moved = False
        for e in self.outbox:
            sink = by_dest.get(e.get("dest", ""))
            if sink is None and e["sink"] in by_name and \
                    by_name[e["sink"]].wants(Alert.from_json(e["alert"])):
                sink = by_name[e["sink"]]
            if sink is None:
                dropped.append(e)
                continue
            if (e["sink"], e.get("dest")) != (sink.name, sink.destination):
                e["sink"], e["dest"], moved = sink.name, sink.destination, True
            kept.append(e)
        if moved or dropped:
            self.outbox = kept
            self.save()
        return dropped

    def unsaved(self, target: str) -> bool:
        """Is a decision about `target` not on disk yet?  Its checkpoint waits for it (the
        module says why)."""
        return self.decisions.unsaved(target, self.file)

    def save(self, urgent: bool = False) -> int:
        """The state changed: written soon, off the loop (at once before `start`; `urgent`:
        without waiting out SAVE_EVERY).  The change's number, for `file.saved`."""
        # trimmed in batches: trimming sorts every mark (2.3 ms at SEEN_KEEP), and a fleet
        # that has run a while is always at the cap: before, every decision and every
        # delivery attempt paid it on the loop (a storm's 2000 saves: ~5 s)
        if len(self.seen) > SEEN_KEEP + SEEN_SLACK:
            for k in sorted(self.seen, key=self.seen.get)[: len(self.seen) - SEEN_KEEP]:  # type: ignore[arg-type]
                del self.seen[k]
                self.marks.drop(k)
        return self.decisions.saved_as(self.file.changed(urgent))

    def _snapshot(self) -> dict[str, Any]:
        """What the writer thread encodes: copies of what the loop changes in place (an
        entry's state and attempts, an open alert's sinks), the alerts themselves shared
        (never changed once made)."""
        return {"version": VERSION, "seen": dict(self.seen),
                "open": {k: dict(v) for k, v in self.open.items()},
                "outbox": [dict(e) for e in self.outbox]}
