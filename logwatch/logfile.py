"""A finished log as the commands that read one through (`replay`, `history FILE`, `compare
FILE`, `rules test`) open it: plain, or compressed as logrotate leaves rotated logs (gzip, its
default; bzip2, xz), told by its first bytes, not its name; `-` is stdin.

Read without this, `replay server.log.2.gz` said "still starting: waiting" and exited 0.
Compressed data is as untrusted as the rest: where it stops decoding (a file cut off while
it was being compressed or copied, a corrupt block) the log ends there, and the command
reports what it read and then says so (`DamagedLog`), instead of a traceback or a short
answer given as whole.  zstd has no decoder in Python's standard library before 3.14: its
files are refused with the command that reads them.

A plain log may begin with a hole of zeros: its writer did not append (`server > log`, not
`>>`) and the log was truncated (logrotate's `copytruncate`, `truncate -s 0`), so the writer
went on at its old offset.  It is read from where the zeros end (`hole_end`), as the
sources read it: otherwise the zeros and the first line after them were one line, and that
line was lost.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from .sources.base import MAGIC_BYTES, compression_of, decompressing


class LogFileError(Exception):
    """A log that cannot be read at all (one line for the user)."""


class DamagedLog(LogFileError):
    """The compressed data of a log stopped decoding before its end; what came before it
    was read (`result`: what the command made of it, for it to report first)."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class _Decoded(io.RawIOBase):
    """The decompressed bytes of a log; an error decoding them ends the input, and
    `damage` says what happened after how many bytes."""

    def __init__(self, inner: BinaryIO, raw: BinaryIO, kind: str, name: str) -> None:
        super().__init__()
        self.inner, self.raw, self.kind, self.name = inner, raw, kind, name
        self.read_bytes = 0
        self.damage: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        """Fill `b` one decoder read at a time (`read1`: a buffered `readinto` of the whole
        of `b` loses what it decoded when the data ends inside it)."""
        if self.damage is not None:
            return 0
        view = memoryview(b).cast("B")
        got = 0
        while got < len(view):
            try:
                data = self.inner.read1(len(view) - got)
            except EOFError:
                self.damage = (f"{self.name}: the {self.kind} data ends early, after "
                               f"{self.read_bytes + got:,} bytes of log (cut off while it was "
                               f"written or copied?): read up to there")
                break
            except (OSError, ValueError, *_decode_errors()) as e:
                self.damage = (f"{self.name}: the {self.kind} data is corrupt after "
                               f"{self.read_bytes + got:,} bytes of log ({e}): read up to there")
                break
            if not data:
                break
            view[got:got + len(data)] = data
            got += len(data)
        self.read_bytes += got
        return got

    def fileno(self) -> int:
        return self.raw.fileno()     # the compressed file's (its mtime dates the stamps)


@contextmanager
def open_log(path: str) -> Iterator[BinaryIO]:
    """The log at `path` (`-`: stdin) as bytes, decompressed when it is gzip, bzip2 or xz.
    Raises OSError as `open` does, `LogFileError` for zstd, and `DamagedLog` at the end of
    the `with` when the compressed data stopped decoding (the body has read what there was)."""
    raw: BinaryIO = sys.stdin.buffer if path == "-" else open(path, "rb")  # type: ignore[assignment]
    try:
        head = raw.peek(MAGIC_BYTES)[:MAGIC_BYTES] if hasattr(raw, "peek") else b""
        kind = compression_of(head)
        if kind is None:
            if head[:1] == b"\0" and raw is not sys.stdin.buffer and \
                    stat.S_ISREG(os.fstat(raw.fileno()).st_mode):     # (not a FIFO)
                raw.seek(hole_end(raw.fileno()))    # the caller's offsets start at tell()
            yield raw
            return
        reader = decompressing(kind, raw)
        if reader is None:    # zstd: no decoder in the standard library before 3.14
            raise LogFileError(f"{path}: {kind}-compressed, which logwatch does not decode; "
                               f"pipe it in: {kind} -dc {path} | logwatch ... -")
        decoded = _Decoded(reader, raw, kind, path)
        yield decoded       # type: ignore[misc]
        if decoded.damage is not None:
            raise DamagedLog(decoded.damage)
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


HOLE_READ = 1 << 20


def start_offset(f: BinaryIO) -> int:
    """Where reading a log `open_log` gave starts in it (past a hole), 0 for a pipe."""
    try:
        return f.tell()
    except (OSError, ValueError):      # (io.UnsupportedOperation is both)
        return 0


def hole_end(fd: int) -> int:
    """Where the zeros the file `fd` begins with end: its first byte that is not zero (its
    size when there is none).  The first block holding data is asked of the file system
    (SEEK_DATA: a sparse hole of gigabytes is not read), the zeros before the first byte
    written in it are read."""
    size = os.fstat(fd).st_size
    try:
        pos = os.lseek(fd, 0, os.SEEK_DATA)
    except OSError as e:
        pos = size if e.errno == errno.ENXIO else 0    # no data at all / not supported
    except AttributeError:
        pos = 0
    while pos < size:
        data = os.pread(fd, HOLE_READ, pos)
        if not data:
            break
        rest = data.lstrip(b"\0")
        if rest:
            return pos + len(data) - len(rest)
        pos += len(data)
    return min(pos, size)


def _decode_errors() -> tuple[type[Exception], ...]:
    """The decoders' own exception types (imported by then: a reader exists)."""
    import lzma
    import zlib
    return (zlib.error, lzma.LZMAError)
