"""Finished logs as logrotate leaves them (logwatch/logfile.py): gzip, bzip2 and xz read as the
plain log, stdin as `-`; compressed data cut short or corrupt: what was read is reported and
the damage said (exit 2), never a traceback or a "still starting: waiting" given as whole;
zstd refused with the command that reads it; `watch` refuses a compressed file by name."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from logwatch.app.history import read_ledger
from logwatch.logfile import DamagedLog, LogFileError, open_log
from logwatch.app.replay import replay_file
from logwatch.sinks.summary import NO_STARTUP, human, summary
from logwatch.sources.base import compression_of
from logwatch.view import pipeline_view

LOGS = ["sglang-027.log", "trtllm-012.log", "vllm-030.log", "sglang-003.log"]
COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


def replayed(path: Path) -> dict:
    doc = summary(pipeline_view("x", replay_file(str(path))))
    return doc


def ledger(path: Path) -> list[str]:
    """`history --json` of the log (a startup without a stamp starts when it was read)."""
    out: list[str] = []

    def emit(r) -> None:
        d = r.to_json()
        if d["started_stamp"] is None:
            d.pop("started_at")
        out.append(json.dumps(d, default=repr, sort_keys=True))
    read_ledger(str(path), "auto", emit)
    return out


@pytest.mark.parametrize("kind", sorted(COMPRESS))
@pytest.mark.parametrize("name", LOGS)
def test_a_compressed_log_replays_as_the_plain_one(tmp_path, name, kind):
    data = (FIXTURES / name).read_bytes()
    packed = tmp_path / f"{name}.{kind}"
    packed.write_bytes(COMPRESS[kind](data))
    assert compression_of(packed.read_bytes()[:10]) == kind
    assert replayed(packed) == replayed(FIXTURES / name)
    assert ledger(packed) == ledger(FIXTURES / name)


def test_concatenated_gzip_members_are_one_log(tmp_path):
    """`cat a.gz b.gz > c.gz` (and gzip's own appends) is one stream of both."""
    data = (FIXTURES / "trtllm-012.log").read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    packed = tmp_path / "two.gz"
    packed.write_bytes(gzip.compress(data[:cut]) + gzip.compress(data[cut:]))
    assert replayed(packed) == replayed(FIXTURES / "trtllm-012.log")


def prefix_of_truncated_gzip(packed: bytes) -> bytes:
    """What a gzip stream cut short decodes to (zlib streaming, as `zcat` prints it)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    return d.decompress(packed)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_a_gzip_cut_short_reports_what_it_held_then_says_so(tmp_path, keep):
    data = (FIXTURES / "trtllm-012.log").read_bytes()
    packed = gzip.compress(data)
    cut = packed[: int(len(packed) * keep)]
    (tmp_path / "cut.gz").write_bytes(cut)
    held = prefix_of_truncated_gzip(cut)
    assert 0 < len(held) < len(data)
    (tmp_path / "held.log").write_bytes(held)
    with pytest.raises(DamagedLog) as e:
        replay_file(str(tmp_path / "cut.gz"))
    assert f"ends early, after {len(held):,} bytes of log" in str(e.value)
    doc = summary(pipeline_view("x", e.value.result))
    assert doc == replayed(tmp_path / "held.log")
    with pytest.raises(DamagedLog):
        ledger(tmp_path / "cut.gz")


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_corrupt_compressed_data_ends_the_log_where_it_stops_decoding(tmp_path, kind):
    data = (FIXTURES / "trtllm-012.log").read_bytes()
    packed = bytearray(COMPRESS[kind](data))
    mid = len(packed) // 2
    packed[mid:mid + 64] = bytes(64)          # a block of zeros inside the stream
    (tmp_path / "bad").write_bytes(bytes(packed))
    with pytest.raises(DamagedLog) as e:
        replay_file(str(tmp_path / "bad"))
    # (what decodes before the damage depends on the format: gzip checks its CRC at the end
    # only, so a corrupt block's output is read as log; a bzip2 block is all or nothing)
    assert f"{kind} data" in str(e.value) and "read up to there" in str(e.value)
    assert e.value.result is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(COMPRESS)), st.integers(0, 2), st.binary(min_size=1, max_size=64),
       st.floats(0.0, 1.0))
def test_no_damage_to_compressed_data_escapes_as_anything_but_its_own_error(
        tmp_path, kind, how, junk, where):
    """Cut, overwritten or followed by junk anywhere (the header too): the log read up to the
    damage, or `LogFileError`, never another exception."""
    packed = bytearray(COMPRESS[kind]((FIXTURES / "sglang-027.log").read_bytes()))
    at = int(where * (len(packed) - 1))
    if how == 0:
        del packed[at:]
    elif how == 1:
        packed[at:at + len(junk)] = junk
    else:
        packed += junk
    p = tmp_path / "x"
    p.write_bytes(bytes(packed))
    try:
        replay_file(str(p))
    except LogFileError:
        pass


def test_zstd_is_refused_with_the_command_that_reads_it(tmp_path):
    p = tmp_path / "x.log.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(40))
    with pytest.raises(LogFileError, match=r"zstd-compressed.*zstd -dc .*x\.log\.zst \| logwatch"):
        with open_log(str(p)):
            pass


@pytest.mark.parametrize("head,kind", [
    (b"\x1f\x8b\x08\x00", "gzip"), (b"BZh91AY&SY", "bzip2"), (b"BZh9\x17rE8P\x90", "bzip2"),
    (b"\xfd7zXZ\x00\x00", "xz"), (b"\x28\xb5\x2f\xfd\x00", "zstd"),
    (b"BZh9 is not a bzip2 file", None), (b"[2026-11-30 10:00:00] server_args=", None),
    (b"\x1f\x8b", None), (b"", None)])
def test_compression_is_told_by_the_first_bytes(head, kind):
    assert compression_of(head) == kind


# -- as users run them ---------------------------------------------------------------------

def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=120)


@pytest.mark.integration
def test_replay_history_and_rules_test_read_a_rotated_gz_and_stdin(tmp_path):
    plain = FIXTURES / "sglang-027.log"
    gz = tmp_path / "sglang-server.log.2.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    want = json.loads(run_cli("replay", "--json", str(plain)).stdout)
    for args, stdin in (((str(gz),), None), (("-",), gz.read_bytes()), (("-",), plain.read_bytes())):
        res = run_cli("replay", "--json", *args, stdin=stdin)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        assert {**got, "file": None} == {**want, "file": None}
        assert got["phase"] == "crashed" and got["crash"]["reason"] == "cuda_oom"
    hist = run_cli("history", "--json", str(gz))
    assert hist.returncode == 0 and json.loads(hist.stdout)["outcome"] == "crashed"
    rules = run_cli("rules", "test", "sglang", str(gz))
    assert rules.returncode == 0 and b"torch.OutOfMemoryError" in rules.stdout


@pytest.mark.integration
def test_rotated_files_read_as_one_stream_are_the_log_before_rotation(tmp_path):
    """The README's `zcat -f server.log.2.gz server.log.1 server.log | logwatch history -`:
    a log rotated twice (once in the middle of a line, as copytruncate can) and the older
    part compressed has the startups of the log it was."""
    data = (FIXTURES / "trtllm-012.log").read_bytes()
    a, b = len(data) // 3, 2 * len(data) // 3 + 5
    (tmp_path / "server.log.2.gz").write_bytes(gzip.compress(data[:a]))
    (tmp_path / "server.log.1").write_bytes(data[a:b])
    (tmp_path / "server.log").write_bytes(data[b:])
    whole = tmp_path / "whole.log"
    whole.write_bytes(data)
    joined = subprocess.run("zcat -f server.log.2.gz server.log.1 server.log", shell=True,
                            cwd=tmp_path, capture_output=True, check=True).stdout
    want = run_cli("history", "--json", str(whole)).stdout.splitlines()
    got = run_cli("history", "--json", "-", stdin=joined).stdout.splitlines()

    def comparable(line: bytes) -> dict:
        d = json.loads(line)
        d.pop("file")
        if d["started_stamp"] is None:
            d.pop("started_at")
        return d
    assert len(want) == 1 and [comparable(x) for x in got] == [comparable(x) for x in want]


@pytest.mark.integration
def test_a_truncated_gz_is_reported_then_named_exit_2(tmp_path):
    data = (FIXTURES / "trtllm-012.log").read_bytes()
    packed = gzip.compress(data)
    cut = tmp_path / "server.log.1.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    res = run_cli("replay", str(cut))
    assert res.returncode == 2
    assert res.stdout.startswith(f"{cut}: still starting".encode()), res.stdout
    assert b"the gzip data ends early, after" in res.stderr and b"Traceback" not in res.stderr
    for cmd in (("history",), ("compare",), ("rules", "test", "trtllm")):
        res = run_cli(*cmd, str(cut))
        assert res.returncode == 2, (cmd, res.stderr)
        assert b"ends early" in res.stderr and b"Traceback" not in res.stderr, cmd


@pytest.mark.integration
def test_watch_refuses_a_compressed_file_or_stdin_by_name(tmp_path):
    gz = tmp_path / "sglang-server.log.1.gz"
    gz.write_bytes(gzip.compress((FIXTURES / "sglang-027.log").read_bytes()))
    res = run_cli("watch", "--last", str(gz))
    assert res.returncode == 2
    assert f"{gz} is gzip-compressed: a finished log, which `logwatch replay {gz}` reads".encode() \
        in res.stderr
    with open(gz, "rb") as f:             # `< file` (a file on stdin) and `cat file |` (a pipe)
        by_file = subprocess.run([sys.executable, "-m", "logwatch", "watch", "-"], cwd=ROOT,
                                 stdin=f, capture_output=True, timeout=120)
    for res in (by_file, run_cli("watch", "-", stdin=gz.read_bytes())):
        assert res.returncode == 2
        assert b"stdin is gzip-compressed: a finished log, which `logwatch replay -` reads" \
            in res.stderr


# ----------------------------------------------------------------------------------------------
# a log that begins with a hole (a writer without append, after a truncation)

@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "written-zeros"])
@pytest.mark.parametrize("name", LOGS)
def test_a_log_after_a_hole_replays_as_the_log(tmp_path, name, sparse):
    """`server > log` and then `copytruncate` (or `truncate -s 0`): the writer goes on at its
    old offset, so the log begins with zeros.  `replay`, `history` and the line numbers are
    the log's (before: the zeros and the first line were one line, lost: sglang-027 lost
    its launch line, `launching` was never seen)."""
    data = (FIXTURES / name).read_bytes()
    holed = tmp_path / name
    zeros = (64 << 20) + 3 if sparse else 5000
    with open(holed, "wb") as f:
        if sparse:
            f.seek(zeros)
        else:
            f.write(bytes(zeros))
        f.write(data)
    if sparse:
        assert holed.stat().st_blocks * 512 < zeros      # really a hole
    assert replayed(holed) == replayed(FIXTURES / name)
    # the same startups, each at its offset in this file (a startup's id holds its offset)
    ours, theirs = ([json.loads(r) for r in ledger(p)] for p in (holed, FIXTURES / name))
    for r, t in zip(ours, theirs):
        (rid, roff), (tid, toff) = r.pop("startup").split("@"), t.pop("startup").split("@")
        assert (rid, int(roff)) == (tid, int(toff) + zeros)
    assert ours == theirs
    r = run_cli("rules", "test", "--json", name.split("-")[0], str(holed))
    plain = run_cli("rules", "test", "--json", name.split("-")[0], str(FIXTURES / name))
    assert r.stdout == plain.stdout and r.returncode == plain.returncode


def test_hole_end_is_the_first_byte_that_is_not_zero(tmp_path):
    from logwatch.logfile import hole_end
    cases = {b"": 0, b"abc": 0, b"\0\0x": 2, b"\0" * 10: 10, bytes(3 << 20) + b"\x01": 3 << 20}
    for k, (content, end) in enumerate(cases.items()):
        p = tmp_path / str(k)
        p.write_bytes(content)
        with open(p, "rb") as f:
            assert hole_end(f.fileno()) == end, (content[:8], end)


@pytest.mark.parametrize("data", [b"", bytes(range(256)) * 20, b"hello\nan app's own log\n"])
def test_a_log_with_no_startup_says_so_not_still_starting(tmp_path, data):
    """An empty, binary or other program's log began no startup: replay said "still starting:
    waiting", as if a server were loading."""
    log = tmp_path / "server.log"
    log.write_bytes(data)
    pipe = replay_file(str(log))
    view = pipeline_view(str(log), pipe)
    text = human(summary(view))
    assert text.startswith(f"{log}: {NO_STARTUP}") and "still starting" not in text, text
    # a log cut after its launch line still is "still starting"
    lines = (FIXTURES / "sglang-018.log").read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[: next(i for i, x in enumerate(lines) if b"server_args=ServerArgs" in x) + 1]))
    view = pipeline_view(str(log), replay_file(str(log)))
    assert "still starting" in human(summary(view))
