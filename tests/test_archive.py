"""A rotated log compressed while logwatch was not reading, read from its archive
(sources/archive.py): which names, which archive is ours, and the bounds on untrusted data."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma

import pytest

from logwatch.sources import archive
from logwatch.sources.archive import compressed_rotated_names, head_of, pread, unpack

LOG = b"".join(b"[2026-12-05 10:00:%02d] line %06d of the rotated log\n" % (i % 60, i)
               for i in range(20_000))
COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


def test_which_names_are_compressed_rotated_copies() -> None:
    names = ["server.log", "server.log.1", "server.log.1.gz", "server.log.2.gz",
             "server.log-20261205.bz2", "server.log.3.xz", "server.log.4.zst", "other.log.1.gz",
             "server.logx.gz"]
    assert compressed_rotated_names("server.log", names) == \
        ["server.log-20261205.bz2", "server.log.1.gz", "server.log.2.gz", "server.log.3.xz"]


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_an_archive_is_unpacked_whole_when_its_head_is_ours(kind: str) -> None:
    data = COMPRESS[kind](LOG)
    assert head_of(data[: 1 << 20]) == LOG[:1024]
    assert head_of(data[:200]) is not None          # a prefix: what it decodes to
    out = unpack(io.BytesIO(data), lambda head: head == LOG[:1024])
    assert out is not None
    assert pread(out, 0, len(LOG) + 10) == LOG


def test_concatenated_gzip_members_are_one_log() -> None:
    data = gzip.compress(LOG[:5000]) + gzip.compress(LOG[5000:])
    out = unpack(io.BytesIO(data), lambda head: True)
    assert out is not None and pread(out, 0, len(LOG) + 1) == LOG


def test_another_file_s_archive_is_given_up_at_its_head() -> None:
    read = []

    class Counting(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            b = super().read(n)
            read.append(len(b))
            return b

    data = gzip.compress(LOG * 20)
    assert unpack(Counting(data), lambda head: False) is None
    assert sum(read) < len(data) // 4      # not decompressed to its end


@pytest.mark.parametrize("damage", ["cut", "junk", "not-compressed", "zstd"])
def test_an_archive_that_does_not_decode_is_not_read(damage: str) -> None:
    data = gzip.compress(LOG)
    if damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "junk":
        data = data[:100] + b"\x00junk" * 500 + data[3000:]
    elif damage == "not-compressed":
        data = LOG
    else:
        data = b"\x28\xb5\x2f\xfd" + b"\x00" * 100
    assert unpack(io.BytesIO(data), lambda head: True) is None


def test_a_bomb_is_not_unpacked_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "MAX_UNPACKED", 1 << 20)
    bomb = gzip.compress(b"\n" * (8 << 20))          # 8 MiB from ~8 KiB
    assert len(bomb) < 64 << 10
    assert unpack(io.BytesIO(bomb), lambda head: True) is None
    small = gzip.compress(LOG[:100_000])
    assert unpack(io.BytesIO(small), lambda head: True) is not None
