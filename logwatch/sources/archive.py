"""A rotated log that logrotate compressed while logwatch was not reading, read from its archive.

logrotate's `compress` (without `delaycompress`) gzips `server.log.1` at the rotation itself:
the file the saved position was in is then `server.log.1.gz`, a new inode whose bytes are
only there decompressed.  When the daemon was down (or the SSH connection lost) across such
a rotation, what the server wrote between our last read and the rotation is in the archive.
`FindRotated` looks there after the plain rotated names (sources/cursor.py): the newest few
compressed copies beside the path are decompressed as far as their first bytes (not ours:
given up), ours whole into an unlinked temporary file, then read by offset as the rotated
file would have been.  Compressed data is untrusted (a bomb, a cut archive): at most
`MAX_UNPACKED` bytes are unpacked and an archive that does not decode is not read; what it
held then stays counted as lost, as before.
"""

from __future__ import annotations

import io
import lzma
import os
import shutil
import tempfile
import zlib
from typing import IO, Callable

from .base import HEAD_BYTES, compression_of, decompressing

_SUFFIXES = (".gz", ".bz2", ".xz")       # the archives `decompressing` reads
_ERRORS = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)
MAX_ARCHIVES = 3          # the newest compressed copies looked into
MAX_UNPACKED = 2 << 30    # bytes unpacked of one archive at most (a bomb, a runaway log)
HEAD_PROBE = 1 << 20      # compressed bytes enough to decompress a file's first bytes


def compressed_rotated_names(base: str, names: list[str]) -> list[str]:
    """The names in a directory that may be compressed rotated copies of the log `base`
    (`x.log.1.gz`, `x.log-20261205.gz`, `.bz2`, `.xz`; zstd has no decoder here)."""
    return sorted(n for n in names if n != base and n.startswith(base)
                  and n[len(base)] in ".-_" and n.lower().endswith(_SUFFIXES))


def head_of(compressed: bytes) -> bytes | None:
    """The first HEAD_BYTES a compressed file's first bytes decompress to (fewer when it
    holds fewer), or None: not gzip / bzip2 / xz, or not decodable."""
    kind = compression_of(compressed)
    f = decompressing(kind, io.BytesIO(compressed)) if kind else None
    if f is None:
        return None
    out = b""
    try:
        with f:
            while len(out) < HEAD_BYTES:
                part = f.read(HEAD_BYTES - len(out))
                if not part:
                    break
                out += part
    except EOFError:
        pass            # the prefix ended: what came before it is the head
    except _ERRORS:
        return None
    return out


def unpack(archive: IO[bytes], head_matches: Callable[[bytes], bool]) -> IO[bytes] | None:
    """A compressed file unpacked into an unlinked temporary file (open, for reads by
    offset), or None: not gzip / bzip2 / xz, its first bytes not the ones wanted, more than
    MAX_UNPACKED, or damaged.  Blocking: run it in a thread."""
    kind = compression_of(archive.read(16))
    archive.seek(0)
    f = decompressing(kind, archive) if kind else None  # type: ignore[arg-type]
    if f is None:
        return None
    out = tempfile.TemporaryFile()
    try:
        with f:
            head = f.read(HEAD_BYTES)
            if not head_matches(head):
                raise ValueError("another file")
            out.write(head)
            shutil.copyfileobj(_Bounded(f, MAX_UNPACKED - len(head)), out, 1 << 20)
        out.flush()
        return out
    except _ERRORS:
        out.close()
        return None


class _Bounded:
    """A decompressing reader that may yield at most `limit` more bytes (ValueError past)."""

    def __init__(self, f: IO[bytes], limit: int) -> None:
        self.f, self.left = f, limit

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n if n and n > 0 else 1 << 20)
        self.left -= len(data)
        if self.left < 0:
            raise ValueError(f"unpacks to more than {MAX_UNPACKED} bytes")
        return data


def pread(f: IO[bytes], pos: int, n: int) -> bytes:
    return os.pread(f.fileno(), n, pos)
