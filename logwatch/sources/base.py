"""What every source yields, and how a file is recognised again.

A source is an async iterator of `SourceEvent`s: `Opened` when it starts reading a file
(or a stream) at an offset, `Data` with the bytes at an offset, `SourceState` when it goes
up or down (connected, waiting, reconnecting, with the reason).  Sources reopen and
reconnect by themselves and never drop or repeat a byte of a file they can still see;
consumers only feed `Data` to the pipeline and remember the offset.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, AsyncIterator, BinaryIO, Iterable, Protocol

HEAD_BYTES = 1024      # the identity of a file: a hash of its first bytes (plus dev/inode)
TAIL_BYTES = 256       # and a hash of the bytes just before a saved offset


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Recognises a file again: device+inode where known (local), plus a hash of its head."""

    dev: int | None
    ino: int | None
    head_len: int
    head_sha: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileIdentity":
        return cls(d.get("dev"), d.get("ino"), int(d["head_len"]), str(d["head_sha"]))

    def matches(self, dev: int | None, ino: int | None, head: bytes) -> bool:
        """Is a file with this dev/inode whose first bytes are `head` (at least `head_len` of
        them) the file this identity was taken from?"""
        if self.dev is not None and dev is not None and (self.dev, self.ino) != (dev, ino):
            return False
        if len(head) < self.head_len:
            return False
        return digest(head[: self.head_len]) == self.head_sha


def digest(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class Position:
    """Where a target's reading stopped: byte offset + line number in an identified file."""

    offset: int
    line_number: int
    identity: FileIdentity | None
    tail_sha: str | None        # hash of the TAIL_BYTES before `offset`
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "line_number": self.line_number,
                "identity": self.identity.to_json() if self.identity else None,
                "tail_sha": self.tail_sha, "source": self.source}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Position":
        ident = d.get("identity")
        return cls(int(d["offset"]), int(d.get("line_number", 1)),
                   FileIdentity.from_json(ident) if ident else None,
                   d.get("tail_sha"), str(d.get("source", "")))


@dataclass(frozen=True, slots=True)
class Opened:
    """Reading (re)starts: at `offset` / `line_number` of a file, for `reason`:
    attach (first time), resume (saved position), rotated, truncated, recreated,
    reconnected (same file, after a connection loss), restarted (a command ran again)."""

    offset: int
    line_number: int
    identity: FileIdentity | None
    reason: str
    new_file: bool  # False: the same byte stream continues (resume, reconnected)
    # on a first attach and a resume: the file's size and modification time (epoch
    # seconds, on this machine's wall clock: a node's is moved by its clock's offset, where
    # its source can read it) when it was opened.  What lies before `size` was written
    # before logwatch looked: at an attach, a startup that ended there is history, not news
    # (how long ago: the file's idle time and the log's own clock between its verdict and
    # its last line); at a resume, the bytes past the saved offset (the unfinished line,
    # what came while the daemon was down) are as old as that mtime
    size: int | None = None
    mtime: float | None = None


@dataclass(frozen=True, slots=True)
class Data:
    data: bytes
    offset: int     # offset of data[0] in the current file


@dataclass(frozen=True, slots=True)
class SourceState:
    """up: reading; down: waiting for the file, reconnecting, or failed (`fatal`).
    `error`: down because something failed (cannot connect, connection lost, the command
    exited), not merely waiting for a log to appear; a fatal state is always an error."""

    up: bool
    message: str
    fatal: bool = False
    error: bool = False
    cause: str = ""     # "dns" (no such host), "refused" (nothing listens): typos, at once


@dataclass(frozen=True, slots=True)
class Skipped:
    """Bytes the source knows it could not read and never will (a log rotated away while the
    connection was down, and its old file gone): `nbytes` known unread (a lower bound: 0 when
    unknown), `message` for the status."""

    nbytes: int
    message: str


SourceEvent = Opened | Data | SourceState | Skipped


class Source(Protocol):
    name: str

    def events(self) -> AsyncIterator[SourceEvent]: ...

    async def close(self) -> None: ...


class StartScanner(Protocol):
    """Fed a log from byte 0, tells where its latest startup begins."""

    def feed(self, chunk: bytes) -> None: ...

    def result(self) -> tuple[int, int]: ...   # (byte offset, line number) of its line

    def so_far(self) -> tuple[int, int]: ...   # the same, of the whole lines fed so far


class StartLocator(Protocol):
    """Where to start reading a log met for the first time (given by the rules layer, so
    that sources need nothing of the rules engine)."""

    grep_literals: tuple[str, ...]   # fixed strings every startup line has (remote grep); ()

    def scanner(self) -> StartScanner: ...

    def latest_start(self, lines: Iterable[tuple[int, int, str]]) -> tuple[int, int] | None: ...

    def in_file(self, path: str) -> tuple[int, int]: ...


class SourceError(Exception):
    """A source that cannot work as configured (bad URL, refused host key, no permission)."""


# What a compressed file starts with (its format's magic; bzip2's with its block or end
# marker, so no text line that begins `BZh` is taken for one).  A log is never compressed
# while written: logrotate compresses the files it rotated away.
COMPRESSED_MAGIC = ((b"\x1f\x8b\x08", "gzip"), (b"\xfd7zXZ\x00", "xz"),
                    (b"\x28\xb5\x2f\xfd", "zstd"))
MAGIC_BYTES = 10


def compression_of(head: bytes) -> str | None:
    """"gzip", "bzip2", "xz" or "zstd" when `head` (a file's first MAGIC_BYTES or more)
    starts a file of that format, else None."""
    for magic, kind in COMPRESSED_MAGIC:
        if head.startswith(magic):
            return kind
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and len(head) >= 10 and \
            head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2"
    return None


# names logrotate (and people) give compressed logs: finished, never the one being written
ARCHIVE_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".z", ".zip")


def decompressing(kind: str, raw: BinaryIO) -> BinaryIO | None:
    """The standard library's decompressing file of `kind` ("gzip", "bzip2", "xz") over
    `raw`, which it does not close; None for a kind it has no decoder for (zstd before
    Python 3.14).  Imported when one is met, not at every start of the CLI."""
    if kind == "gzip":
        import gzip
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        import bz2
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if kind == "xz":
        import lzma
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    return None


def compressed_refusal(what: object, kind: str, replay_arg: object = None) -> str:
    """What a source says of a compressed file at its path, or on stdin (`what` "stdin",
    `replay_arg` "-"): a rotated log, finished, which replay reads."""
    arg = what if replay_arg is None else replay_arg
    return f"{what} is {kind}-compressed: a finished log, which `logwatch replay {arg}` reads"


def identity_of(dev: int | None, ino: int | None, head: bytes) -> FileIdentity:
    head = head[:HEAD_BYTES]
    return FileIdentity(dev, ino, len(head), digest(head))
