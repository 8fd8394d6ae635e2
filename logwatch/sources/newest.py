"""A file target that names the newest file matching a pattern: one log file per launch.

Operators often give every launch its own log (`server-$(date +%s).log`, SLURM's
`slurm-%j.out`), so a fixed path would follow the first launch forever.  A target whose file
name holds a glob (`/logs/server-*.log`, `ssh://gpu1/scratch/slurm-*.out`) follows the newest
matching file, and moves on when a newer one appears, the way it moves on when a log is
rotated: the file it read is drained until quiet (or until the new one has bytes), then the
new one is read from byte 0 (a relaunch is a new startup in the same target: one ledger, one
set of metrics).  Only the file name may hold a pattern (`*`, `?`, `[...]`, fnmatch's); a
literal `[` is written `[[]`.

Which file is "the newest" (`NewestFile.choose`, pure, so tested without files): the match
last modified (nanoseconds locally; SFTP's whole seconds), ties to the name sorting last.
Two rules keep it from going back, which a pattern over a busy directory would otherwise do:
a file once left is never chosen again (where dev:inode tell files apart; over SFTP without
the streamed reader a name is all there is, and a name rotated away is a new file's next),
and a file older than the newest write seen of the files followed is never chosen (the followed file deleted does not make an old launch's log
"the newest": it waits for a newer one, as a plain path waits for its file to appear).  Two
servers writing two matching files at once are one target per server; a pattern over both
follows one and then the other, each once.
"""

from __future__ import annotations

import fnmatch
import heapq
import posixpath
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from .base import ARCHIVE_SUFFIXES, SourceError

_GLOB = frozenset("*?[")
MAX_LEFT = 256         # files left remembered (a directory of thousands of old launches)
MAX_MATCHES = 20       # the newest matches looked at for a file rotated while away
LISTING_FOR = 10.0     # seconds a listing serves while its directory is unchanged
LISTING_PACE = 10.0    # ... and, changed, for this many times what making it took
SORT_RUN = 2048        # rows sorted in one call (~2 ms): the event loop's thread waits no longer


def is_pattern(path: str) -> bool:
    """Does this file target name a pattern (a glob character in its file name)?"""
    return any(c in _GLOB for c in posixpath.basename(path))


def pattern_problem(path: str) -> str | None:
    """Why a file target's pattern cannot be followed (a glob in a directory), or None."""
    directory = posixpath.dirname(path)
    if any(c in _GLOB for c in directory):
        return (f"{path}: a pattern may only be in the file name, not in its directories "
                f"({directory}); a literal [ is written [[]")
    return None


def check_pattern(path: str) -> None:
    problem = pattern_problem(path)
    if problem:
        raise SourceError(problem)


def matching(pattern: str, names: list[str]) -> list[str]:
    """The names in the pattern's directory that match its file name (hidden files only when
    the pattern starts with a dot, as a shell's glob), compressed archives left out (a
    pattern like `server.log*` matches `server.log.1.gz`, which logrotate wrote last)."""
    name = posixpath.basename(pattern)
    hidden = name.startswith(".")
    return [n for n in names if (hidden or not n.startswith("."))
            and fnmatch.fnmatchcase(n, name) and not n.lower().endswith(ARCHIVE_SUFFIXES)]


@dataclass(frozen=True, slots=True)
class Match:
    """A file matching the pattern: its name, dev:inode (None where the source cannot tell)
    and modification time (nanoseconds since the epoch)."""

    name: str
    dev: int | None
    ino: int | None
    mtime_ns: int

    @property
    def key(self) -> tuple[int | None, int | None, str]:
        # dev:inode where told; otherwise the name (SFTP): a file is recognised by either
        return (self.dev, self.ino, "" if self.ino is not None else self.name)


# a match as a listing keeps it: (mtime_ns, name, dev, ino), so that the order of the tuples
# is the newest first, modification time then name
Row = tuple[int, str, "int | None", "int | None"]


def newest_first(rows: list[Row]) -> list[Row]:
    """`rows` sorted newest first (modification time, then name), in runs of SORT_RUN merged
    in Python: a listing is made in a thread, and one `list.sort` of 60,000 tuples holds the
    interpreter lock for 40-110 ms on this VM, the event loop's thread waiting all along (the
    suite's 0.2 s bound was passed once on a loaded machine); the merge lets it in every few
    milliseconds."""
    if len(rows) <= SORT_RUN:
        return sorted(rows, reverse=True)
    runs = [sorted(rows[i:i + SORT_RUN], reverse=True) for i in range(0, len(rows), SORT_RUN)]
    return list(heapq.merge(*runs, reverse=True))


class Listing:
    """The matches of a pattern, newest first (modification time, then name), kept as plain
    tuples of numbers and strings: the collector stops looking at such a tuple once it has
    seen it, where 60,000 `Match` objects (a SLURM directory) stayed in its sight, and each
    listing set off a full collection of the daemon's heap with the event loop waiting
    (0.21-0.27 s in the suite's process).  A `Match` is made for the few a look walks."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows         # sorted newest first (`newest_first`)

    @classmethod
    def of(cls, matches: Iterable[Match]) -> Listing:
        return cls(newest_first([(m.mtime_ns, m.name, m.dev, m.ino) for m in matches]))

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Match]:
        for mtime_ns, name, dev, ino in self.rows:
            yield Match(name, dev, ino, mtime_ns)

    def find(self, key: tuple[int | None, int | None, str]) -> Match | None:
        """The match of `key` (`Match.key`: dev:inode, else the name), or None."""
        dev, ino, name = key
        for mtime_ns, n, d, i in self.rows:
            if i == ino and (d == dev if ino is not None else n == name):
                return Match(n, d, i, mtime_ns)
        return None


class NewestFile:
    """Which matching file a pattern target reads now (see the module doc for the rules).

    The sources look at the pattern every second or so, and a SLURM directory holds
    thousands of outputs: a listing (names and a stat each) is kept while the directory's
    own mtime stays the same (no file created, renamed or removed: a relaunch creates its
    file) for up to LISTING_FOR seconds (`cached`, `keep`); an old file written again is
    then seen within that time, which changes nothing the rules allow but the two-servers
    case."""

    def __init__(self) -> None:
        self.reading: Match | None = None
        self._left: deque[tuple[int | None, int | None, str]] = deque(maxlen=MAX_LEFT)
        self._floor: int | None = None     # the newest write seen of the files left
        self._reading_mtime: int | None = None   # ... and of the file read now
        # dir mtime, when made, how long it took, matches
        self._listing: tuple[float | None, float, float, Listing] | None = None

    def cached(self, dir_mtime: float | None, now: float) -> Listing | None:
        """The matches listed last, if the directory is unchanged since and they are recent,
        or if making them took long and they are younger than LISTING_PACE times that (a
        busy directory of 100,000 files: a listing's stats at most a tenth of the time)."""
        if self._listing is None:
            return None
        mtime, when, took, matches = self._listing
        age = now - when
        if 0 <= age < LISTING_PACE * took:
            return matches
        return matches if dir_mtime is not None and mtime == dir_mtime and \
            0 <= age < LISTING_FOR else None

    def keep(self, dir_mtime: float | None, now: float, matches: Listing,
             took: float = 0.0) -> None:
        """Remember a listing begun at `now` (`took` seconds) when the directory's mtime was
        `dir_mtime` (None: unknown, kept only for the pace)."""
        self._listing = (dir_mtime, now, took, matches)

    def choose(self, matches: Listing) -> Match | None:
        """The file the pattern names now, among the matches listed (None: none may be
        read): the one read stays chosen until a newer one is written.  The walk, newest
        first, stops at the first file that may be read: 60,000 SLURM outputs walked whole
        on every look held the event loop 40-200 ms."""
        reading = self.reading
        ours: Match | None = None
        if reading is not None:
            ours = matches.find(reading.key)  # (by dev:inode: a name alone may be a new file's)
            if ours is not None and reading.ino is not None:
                self._saw(ours.mtime_ns)
        floor = self._floor
        if self._reading_mtime is not None:
            floor = self._reading_mtime if floor is None else max(floor, self._reading_mtime)
        left = self._left
        for m in matches:
            if m.key in left:
                continue
            if ours is not None and m.key == ours.key:
                return m
            if floor is not None:
                if m.mtime_ns < floor:
                    break          # the rest are older still: only the file read may be
                # (a name alone, SFTP's whole seconds: a file of the floor's second may be new)
                if m.ino is not None and m.mtime_ns == floor:
                    continue
            return m
        return ours if ours is not None and ours.key not in left else None

    def _saw(self, mtime_ns: int) -> None:
        if self._reading_mtime is None or mtime_ns > self._reading_mtime:
            self._reading_mtime = mtime_ns

    def wrote(self, m: Match) -> None:
        """A fresh stat of a match (the sources' look at the path): the file read keeps its
        latest write known while a kept listing has an older mtime of it."""
        r = self.reading
        if r is not None and m.ino is not None and m.key == r.key:
            self._saw(m.mtime_ns)

    def read(self, m: Match) -> None:
        """`m` is the file read now (opened, or found again after a restart): nothing older
        than it is chosen while it is read.  (A file opened and then not read, the newest
        opened at a restart before ours was found again, is not held against later ones.)
        The same file read again (after a reconnect) keeps its latest write seen: an mtime
        set back (`touch -d`, its inode given to a file restored with an old mtime) never
        lets an older file in."""
        same = self.reading is not None and m.ino is not None and m.key == self.reading.key
        if not (same and self._reading_mtime is not None and self._reading_mtime > m.mtime_ns):
            self._reading_mtime = m.mtime_ns
        self.reading = m

    def left(self, m: Match) -> None:
        """`m` was read and left (drained after a newer file appeared): never chosen again
        where dev:inode tell it.  Without them (SFTP with no streamed reader) a name is not a
        file: a log rotated by rename is followed by a new file of the same name, so only the
        floor applies (an old launch's file written again is then read as a new one)."""
        if m.ino is not None and m.key not in self._left:
            self._left.append(m.key)
        latest = m.mtime_ns
        if self.reading is not None and self.reading.key == m.key:
            if self._reading_mtime is not None:
                latest = max(latest, self._reading_mtime)
            self.reading, self._reading_mtime = None, None
        self._floor = latest if self._floor is None else max(self._floor, latest)

    def newest_first(self, matches: Listing, limit: int = MAX_MATCHES) -> list[Match]:
        """The newest `limit` matches (where a file rotated while away is looked for)."""
        return list(islice(matches, limit))
