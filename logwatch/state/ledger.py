"""The launch ledger's store: one SQLite file in `state_dir` (stdlib `sqlite3`, WAL).

One row per (target, startup), upserted as the startup goes on (at ready, while it serves,
when it ends), so the page and `watch` see a startup before it is over.  Bounded: the last
`keep` startups of each target, and a target no longer watched for `state_retention`
(state/retention.py) loses its rows.  A full or read-only disk, a lock held by another process,
any SQLite error is a state error like the others (`logwatch_state_errors_total{kind=
"ledger"}`, said once, the daemon goes on from memory), never an exception in a target.

Off the event loop: every statement runs on one worker thread.  `save` only queues the record
(the latest per startup wins) and returns; a read waits at most `READ_WAIT` for its answer,
so another process holding the write lock for 30 s delays the ledger, never the daemon.
A file that is not an SQLite database is set aside as `ledger.sqlite3.corrupt` (said once,
with both names) and a new ledger starts.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

from .. import log

from ..ledger import StartupRecord, record_from_json
from .files import STATE_ERRORS, aside_name

KEEP = 50            # startups kept per target
FILE = "ledger.sqlite3"
READ_WAIT = 0.5      # seconds a read from the daemon waits for the worker (busy: no records)
BUSY_TIMEOUT = 5.0   # seconds SQLite waits for another process's lock before an error
RETRY = 5.0          # seconds before a failed write is tried again
T = TypeVar("T")

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
    """Startup records per target, oldest first; every statement on one worker thread."""

    def __init__(self, state_dir: Path | str, keep: int = KEEP) -> None:
        self.path = Path(state_dir) / FILE
        self.keep = keep
        self._lock = threading.Lock()          # guards _pending
        self._db: sqlite3.Connection | None = None
        self._pending: dict[tuple[str, str], str] = {}   # (target, startup) -> record JSON
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ledger")
        self._flushing = False
        self._retry: threading.Timer | None = None    # a failed write, tried again
        self._closed = False
        # a corrupt file set aside: what was said about it (`history -c` prints it)
        self.set_aside: str | None = None

    # the worker's side --------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as e:
                if isinstance(e, sqlite3.OperationalError):
                    raise            # locked, full, read-only: not the file's content
                self._set_aside(e)
                self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def _set_aside(self, e: Exception) -> None:
        """The file is not a ledger (`file is not a database`): keep it for a post-mortem
        under another name, start a new one."""
        aside = aside_name(self.path)
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            except OSError:
                pass
        self.set_aside = (f"{self.path} was not a readable ledger ({e}): set aside as "
                          f"{aside.name}, a new ledger starts")
        log.get("state").error(self.set_aside, file=str(self.path), aside=str(aside))

    def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` on the worker; an SQLite error resets the connection."""
        try:
            return fn(self._conn())
        except (sqlite3.Error, OSError) as e:
            self._reset()
            if _damaged(e):    # found past the open (a damaged page): never healed in place
                self._set_aside(e)
            raise

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._flushing = False
        if not pending:
            return

        def write(db: sqlite3.Connection) -> None:
            with db:
                for (target, key), doc in pending.items():
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
        try:
            self._run(write)
        except (sqlite3.Error, OSError) as e:
            STATE_ERRORS.failed("ledger", self.path, e)
            with self._lock:        # tried again in RETRY s or with the next save
                for k, doc in pending.items():
                    self._pending.setdefault(k, doc)
                if self._retry is None and not self._closed:
                    self._retry = threading.Timer(RETRY, self._again)
                    self._retry.daemon = True
                    self._retry.start()
            return
        STATE_ERRORS.succeeded("ledger")

    def _again(self) -> None:
        with self._lock:
            self._retry = None
            if self._flushing or not self._pending or self._closed:
                return
            self._flushing = True
        try:
            self._worker.submit(self._flush)
        except RuntimeError:
            pass

    # the callers' side --------------------------------------------------------------------
    def save(self, target: str, rec: StartupRecord) -> bool:
        """Queue the record of `rec.startup` for the worker (insert or update); never blocks.
        False when the store is closed."""
        key = rec.startup or f"#{rec.index}"
        doc = json.dumps(rec.to_json(), ensure_ascii=False, default=str)
        with self._lock:
            self._pending[(target, key)] = doc
            if self._flushing:
                return True
            self._flushing = True
        try:
            self._worker.submit(self._flush)
        except RuntimeError:        # closed
            return False
        return True

    def records(self, target: str, limit: int = KEEP,
                wait: float | None = READ_WAIT) -> list[StartupRecord]:
        """The last `limit` startups of `target`, oldest first ([] when unreadable, or not
        answered within `wait` seconds: the ledger is busy, the caller goes on)."""
        def read(db: sqlite3.Connection) -> list[tuple[int, str]]:
            return list(db.execute(
                "SELECT seq, record FROM startups WHERE target=? ORDER BY seq DESC LIMIT ?",
                (target, limit)).fetchall())

        try:
            fut = self._worker.submit(self._run, read)
            rows = fut.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            log.get("state").warning("the launch ledger is busy (locked by another process?): "
                                     "going on without its records", file=str(self.path))
            return []
        except RuntimeError:        # closed
            return []
        except (sqlite3.Error, OSError) as e:
            STATE_ERRORS.failed("ledger", self.path, e)
            return []
        out = []
        for seq, doc in reversed(rows):
            try:
                rec = record_from_json(json.loads(doc))
            except (ValueError, TypeError, RecursionError):
                continue
            rec.index = seq      # the target's startup number, across daemon restarts
            out.append(rec)
        return out

    def last(self, target: str) -> StartupRecord | None:
        recs = self.records(target, 1)
        return recs[-1] if recs else None

    def as_json(self, target: str, limit: int = KEEP) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.records(target, limit)]

    def forget_unwatched(self, watched: set[str], before: float, seen: dict[str, float],
                         wait: float = 60.0) -> list[str]:
        """Remove the rows of every target not in `watched` whose newest startup began, and
        whose `seen` time (its files' newest mtime) is, before `before`; the targets removed
        ([] when the ledger cannot be written: tried again at the next pass)."""
        try:
            return self._worker.submit(self._run, lambda db: _forget(db, watched, before, seen)
                                       ).result(timeout=wait)
        except (concurrent.futures.TimeoutError, RuntimeError):
            return []
        except (sqlite3.Error, OSError) as e:
            STATE_ERRORS.failed("ledger", self.path, e)
            return []

    def close(self) -> None:
        """Write what is queued (one try), then stop the worker."""
        with self._lock:
            self._closed = True
            if self._retry is not None:
                self._retry.cancel()
                self._retry = None
        try:
            self._worker.submit(self._flush)
            self._worker.submit(self._reset)
        except RuntimeError:
            return
        self._worker.shutdown(wait=True)

    def _reset(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None


def _forget(db: sqlite3.Connection, watched: set[str], before: float,
            seen: dict[str, float]) -> list[str]:
    """`LedgerStore.forget_unwatched` on the worker."""
    gone = []
    for target, doc, _ in db.execute("SELECT target, record, MAX(seq) FROM startups "
                                     "GROUP BY target").fetchall():
        if target in watched:
            continue
        try:
            started = float(json.loads(doc).get("started_at") or 0.0)
        except (ValueError, TypeError, AttributeError, RecursionError):
            started = 0.0
        if max(started, seen.get(target, 0.0)) < before:
            gone.append(target)
    with db:
        db.executemany("DELETE FROM startups WHERE target=?", [(t,) for t in gone])
    return gone


def _damaged(e: BaseException) -> bool:
    """SQLite says the file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB), not that it is busy,
    full or read-only.  Before, damage met past the open (a page overwritten mid-file) failed
    the reads of the targets on those pages for good, the file never set aside."""
    code = getattr(e, "sqlite_errorcode", None)
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError) \
        and code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
