"""The launch ledger's store: one SQLite file in `state_dir` (stdlib `sqlite3`, WAL).

One row per (target, startup), upserted as the startup goes on (at ready, while it serves,
when it ends), so the page and `watch` see a startup before it is over.  Bounded: the last
`keep` startups of each target.  A full or read-only disk is a state error like the others
(counted, said once, the daemon goes on from memory), never an exception.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from ..ledger import StartupRecord, record_from_json
from .files import STATE_ERRORS

KEEP = 50            # startups kept per target
FILE = "ledger.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS startups (
    target  TEXT NOT NULL,
    startup TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    record  TEXT NOT NULL,
    PRIMARY KEY (target, startup)
);
CREATE INDEX IF NOT EXISTS startups_by_seq ON startups (target, seq);
"""


class LedgerStore:
    """Startup records per target, oldest first."""

    def __init__(self, state_dir: Path | str, keep: int = KEEP) -> None:
        self.path = Path(state_dir) / FILE
        self.keep = keep
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    def save(self, target: str, rec: StartupRecord) -> bool:
        """Insert or update the record of `rec.startup`; False when the disk refused."""
        key = rec.startup or f"#{rec.index}"
        doc = json.dumps(rec.to_json(), ensure_ascii=False, default=str)
        try:
            with self._lock:
                db = self._conn()
                with db:
                    row = db.execute("SELECT seq FROM startups WHERE target=? AND startup=?",
                                     (target, key)).fetchone()
                    if row is None:
                        nxt = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM startups "
                                         "WHERE target=?", (target,)).fetchone()[0]
                        db.execute("INSERT INTO startups VALUES (?, ?, ?, ?)",
                                   (target, key, nxt, doc))
                        db.execute("DELETE FROM startups WHERE target=? AND seq <= ?",
                                   (target, nxt - self.keep))
                    else:
                        db.execute("UPDATE startups SET record=? WHERE target=? AND startup=?",
                                   (doc, target, key))
        except (sqlite3.Error, OSError) as e:
            self._reset()
            STATE_ERRORS.failed("ledger", self.path, e)
            return False
        STATE_ERRORS.succeeded("ledger")
        return True

    def records(self, target: str, limit: int = KEEP) -> list[StartupRecord]:
        """The last `limit` startups of `target`, oldest first ([] when unreadable)."""
        try:
            with self._lock:
                rows = self._conn().execute(
                    "SELECT seq, record FROM startups WHERE target=? ORDER BY seq DESC LIMIT ?",
                    (target, limit)).fetchall()
        except (sqlite3.Error, OSError) as e:
            self._reset()
            STATE_ERRORS.failed("ledger", self.path, e)
            return []
        out = []
        for seq, doc in reversed(rows):
            try:
                rec = record_from_json(json.loads(doc))
            except (ValueError, TypeError):
                continue
            rec.index = seq      # the target's startup number, across daemon restarts
            out.append(rec)
        return out

    def last(self, target: str) -> StartupRecord | None:
        recs = self.records(target, 1)
        return recs[-1] if recs else None

    def as_json(self, target: str, limit: int = KEEP) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.records(target, limit)]

    def close(self) -> None:
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None
