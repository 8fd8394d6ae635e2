"""Rotation faults, done for real: Debian's `logrotate` (`create`), symlink swaps, a rotation
while the daemon was down or the SSH connection was lost, a directory removed and made again.

The promise (README "Reliability"): a renamed log is read until it has been quiet for
`rotate_wait` (5 s by default), so what the server writes to it before it reopens its log is
not lost; a file rotated while we were not reading is found again by identity among the
rotated names beside the path; when it cannot be found, the loss is counted and said.

Every test counts lines: 0 lost, 0 repeated.  No sleep synchronises anything: the writers
pace themselves, the readers poll conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.daemon import daemons, target_cfg, wait_for, write_config, free_port  # noqa: F401
from logwatch.sources import Data, Opened, Position, Skipped
from logwatch.sources.local import LocalFileSource, _Watcher
from logwatch.sources.ssh import SSHFileSource, SSHOptions, SSHPool
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)
from test_local_source import Reader, new_follower, run

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"
LINE_RE = re.compile(rb"^line (\d{6}) ", re.M)


def numbered(i: int, tag: str = "") -> bytes:
    return f"line {i:06d} {tag}{'x' * (40 + i % 37)}\n".encode()


def line_numbers(data: bytes) -> list[int]:
    nums = [int(m.group(1)) for m in LINE_RE.finditer(data)]
    assert len(nums) == data.count(b"\n"), "a line without its number (a split line)"
    return nums


def loss(delivered: list[int], written: int) -> tuple[int, int]:
    """(lost, repeated) of lines 1..written."""
    seen: set[int] = set()
    dup = 0
    for n in delivered:
        dup += n in seen
        seen.add(n)
    return written - len(seen & set(range(1, written + 1))), dup


class WriterThread(threading.Thread):
    """A writer thread whose failure the test checks (`error`) instead of losing it."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - checked by the test
            self.error = e

    def _run(self) -> None:
        raise NotImplementedError


class RotatingServer(WriterThread):
    """Writes `total` numbered lines to `path` in batches, like a server: at line `rotate_at`
    it runs `rotate()` (logrotate renames the log and creates a new empty one), goes on
    writing to the old descriptor for `reopen_after` seconds (the server has not reopened its
    log yet), then opens the path again and writes the rest there."""

    def __init__(self, path: Path, total: int, rotate_at: int, rotate: Any,
                 reopen_after: float = 1.0, batch: int = 50, pace: float = 0.005,
                 reopen_path: Path | None = None, pace_after_rename: float = 0.05) -> None:
        super().__init__()
        self.path, self.total, self.rotate_at, self.rotate = path, total, rotate_at, rotate
        self.reopen_path = reopen_path or path
        self.pace_after_rename = pace_after_rename   # a line now and then, as servers write
        self.reopen_after, self.batch, self.pace = reopen_after, batch, pace
        self.after_rename = 0          # lines written to the old file after the rename

    def _write(self, f: Any) -> None:
        first, last = self.written + 1, min(self.total, self.written + self.batch)
        f.write(b"".join(numbered(i) for i in range(first, last + 1)))
        f.flush()
        self.written = last
        time.sleep(self.pace)          # the server's pace, not a synchronisation

    def _run(self) -> None:
        f = open(self.path, "ab")
        while self.written < self.rotate_at:
            self._write(f)
        self.rotate()
        until = time.monotonic() + self.reopen_after
        before = self.written
        self.pace, fast = self.pace_after_rename, self.pace
        while time.monotonic() < until and self.written < self.total:
            self._write(f)
        self.after_rename = self.written - before
        self.pace = fast
        f.close()
        with open(self.reopen_path, "ab") as f:   # the server reopens its log (SIGHUP, ...)
            while self.written < self.total:
                self._write(f)


def logrotate(tmp_path: Path, log: Path, extra: str = "", compress: bool = False) -> None:
    """Rotate `log` with Debian's logrotate: rename to .1 (gzipped at once to .1.gz with
    `compress`) and create a new empty file."""
    conf = tmp_path / "logrotate.conf"
    how = "compress" if compress else "nocompress"
    conf.write_text(f"{log} {{\n  rotate 5\n  create\n  missingok\n  {how}\n{extra}}}\n")
    res = subprocess.run([LOGROTATE, "-f", "-s", str(tmp_path / "logrotate.state"), str(conf)],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert Path(f"{log}.1.gz" if compress else f"{log}.1").exists() and log.exists() and \
        log.stat().st_size == 0


def follow_logrotate(tmp_path: Path, rotate_wait: float, reopen_after: float = 1.0
                     ) -> tuple[RotatingServer, list[int], list[Opened]]:
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    server = RotatingServer(log, 20_000, 10_000, lambda: logrotate(tmp_path, log),
                            reopen_after=reopen_after)

    async def main() -> tuple[list[int], list[Opened]]:
        source = LocalFileSource(str(log), rotate_wait=rotate_wait)
        async with Reader(source) as r:
            await r.wait(lambda: bool(r.opened()), 10, "the first Opened")
            server.start()
            await r.wait(lambda: not server.is_alive(), 60, "the server to finish")
            assert server.error is None, server.error
            size = log.stat().st_size
            await r.wait(lambda: len(r.opened()) >= 2 and r.segments()[-1][0].reason ==
                         "rotated" and len(r.segments()[-1][1]) == size, 30,
                         "the new file, to its end")
            nums = [n for _, seg in r.segments() for n in line_numbers(seg)]
            return nums, r.opened()

    nums, opened = run(main())
    return server, nums, opened


def test_logrotate_create_with_the_server_reopening_1s_later_loses_nothing(
        tmp_path: Path) -> None:
    server, nums, opened = follow_logrotate(tmp_path, rotate_wait=5.0)
    assert server.after_rename >= 500, "the server wrote too little to the old file to test"
    lost, dup = loss(nums, server.total)
    assert (lost, dup) == (0, 0), f"{lost} lost, {dup} repeated of {server.total}"
    assert nums == list(range(1, server.total + 1))          # and in order
    assert [o.reason for o in opened] == ["attach", "rotated"]


def test_without_rotate_wait_the_same_rotation_loses_lines(tmp_path: Path) -> None:
    """The control: the fault is real.  rotate_wait 0 leaves the old file as soon as the
    rotation is seen (at the next poll: writes to a renamed file wake no inotify watch on
    the path, so within ~1 s), and what the server writes to it after that is lost; the
    server reopens 2.5 s after the rename, so the poll comes while it still writes."""
    server, nums, _ = follow_logrotate(tmp_path, rotate_wait=0.0, reopen_after=2.5)
    lost, dup = loss(nums, server.total)
    assert dup == 0
    assert lost > 0, "rotate_wait=0 lost nothing: the test does not make the fault"


def test_a_symlink_swapped_to_another_file_is_followed_and_the_old_one_drained(
        tmp_path: Path) -> None:
    """`current -> run1.log` swapped to `run2.log` (atomically), run1.log written 1 s more."""
    run1, run2, link = tmp_path / "run1.log", tmp_path / "run2.log", tmp_path / "current.log"
    run1.write_bytes(b"")
    link.symlink_to(run1.name)

    def swap() -> None:
        run2.write_bytes(b"")
        tmp = tmp_path / "current.tmp"
        tmp.symlink_to(run2.name)
        os.replace(tmp, link)

    server = RotatingServer(run1, 6_000, 3_000, swap, reopen_path=run2)

    async def main() -> tuple[list[int], list[Opened]]:
        source = LocalFileSource(str(link), rotate_wait=2.0)
        async with Reader(source) as r:
            await r.wait(lambda: bool(r.opened()), 10, "the first Opened")
            server.start()
            await r.wait(lambda: not server.is_alive(), 60, "the server to finish")
            assert server.error is None, server.error
            size = run2.stat().st_size
            await r.wait(lambda: len(r.opened()) == 2 and len(r.segments()[-1][1]) == size,
                         30, "run2.log, to its end")
            return [n for _, seg in r.segments() for n in line_numbers(seg)], r.opened()

    nums, opened = run(main())
    assert server.after_rename >= 500
    assert loss(nums, server.total) == (0, 0)
    assert nums == list(range(1, server.total + 1))
    assert [o.reason for o in opened] == ["attach", "rotated"]


def test_the_log_replaced_by_a_symlink_to_itself_goes_on(tmp_path: Path) -> None:
    """`mv server.log run.log; ln -s run.log server.log`: the same file, no reopen, no loss."""
    log, real = tmp_path / "server.log", tmp_path / "run.log"
    log.write_bytes(b"".join(numbered(i) for i in range(1, 1001)))

    async def main() -> list[Any]:
        async with Reader(LocalFileSource(str(log))) as r:
            await r.wait(lambda: r.data_bytes() == log.stat().st_size, 10, "the first part")
            os.rename(log, real)
            log.symlink_to(real.name)
            with open(real, "ab") as f:
                f.write(b"".join(numbered(i) for i in range(1001, 2001)))
            size = real.stat().st_size
            await r.wait(lambda: r.data_bytes() == size, 10, "the rest")
            # a few looks later it is still the same file
            await asyncio.sleep(0)
            return list(r.events)

    events = run(main())
    opened = [e for e in events if isinstance(e, Opened)]
    assert [o.reason for o in opened] == ["attach"]
    data = b"".join(e.data for e in events if isinstance(e, Data))
    assert line_numbers(data) == list(range(1, 2001))


def test_a_log_synced_by_copy_and_rename_is_read_once(tmp_path: Path) -> None:
    """rsync-style delivery: each sync writes the whole log to a temp file and renames it
    over the path (a new inode: our bytes and more).  Before, each sync was read from byte 0
    again: 8 syncs of one crashed startup counted 8 startups and 4 crashes."""
    log = tmp_path / "server.log"
    src = b"".join(numbered(i) for i in range(1, 3001))

    def sync(upto: int) -> None:
        tmp = tmp_path / ".server.log.tmp"
        tmp.write_bytes(src[:upto])
        os.replace(tmp, log)

    cuts = [len(src) * k // 4 for k in (1, 2, 3, 4)]
    sync(cuts[0])

    async def main() -> list[Any]:
        async with Reader(LocalFileSource(str(log), rotate_wait=0.3)) as r:
            for cut in cuts[1:] + [cuts[-1]]:        # the last sync: the log unchanged
                await r.wait(lambda: r.data_bytes() >= log.stat().st_size, 10, "a sync read")
                sync(cut)
            await r.wait(lambda: r.data_bytes() >= len(src) and any(
                isinstance(e, Opened) and e.reason == "copied" for e in r.events[-3:]),
                10, "the last sync")
            return list(r.events)

    events = run(main())
    data = b"".join(e.data for e in events if isinstance(e, Data))
    assert line_numbers(data) == list(range(1, 3001))
    reasons = [o.reason for o in events if isinstance(o, Opened)]
    assert reasons[0] == "attach" and set(reasons[1:]) == {"copied"}, reasons


def read_all_and_stop(log: Path) -> Position:
    """A daemon's first run: `log` read to its end, then stopped; the position it saved."""
    source = LocalFileSource(str(log))
    follower = new_follower(source)

    async def first() -> None:
        async with Reader(source, follower) as r:
            await r.wait(lambda: r.data_bytes() == log.stat().st_size, 10, "the first run")

    run(first())
    pos = follower.position()
    assert pos is not None
    return pos


@pytest.mark.parametrize("compress", [False, True], ids=["renamed", "renamed-and-gzipped"])
def test_rotated_while_the_daemon_was_down_the_rest_of_the_old_file_is_read(
        tmp_path: Path, compress: bool) -> None:
    """A saved position in a file logrotate renamed since: the rest of `server.log.1` (what
    the server wrote after the daemon stopped), then the new file from byte 0.  With
    logrotate's `compress` the old file is `server.log.1.gz` by then: read from the archive
    (before: counted as lost)."""
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(numbered(i) for i in range(1, 2001)))
    pos = read_all_and_stop(log)
    assert pos.offset == log.stat().st_size
    with open(log, "ab") as f:               # written while the daemon was down ...
        f.write(b"".join(numbered(i) for i in range(2001, 3001)))
    logrotate(tmp_path, log, compress=compress)   # ... then rotated ...
    with open(log, "ab") as f:               # ... and the server writes the new file
        f.write(b"".join(numbered(i) for i in range(3001, 4001)))

    async def second() -> Reader:
        src = LocalFileSource(str(log), start=pos, rotate_wait=0.5)
        async with Reader(src) as r:
            await r.wait(lambda: len(r.opened()) == 2 and
                         len(r.segments()[-1][1]) == log.stat().st_size, 20, "the new file")
            return r

    r = run(second())
    segs = r.segments()
    assert [(o.reason, o.offset, o.new_file) for o, _ in segs] == \
        [("resume", pos.offset, False), ("rotated", 0, True)]
    assert line_numbers(segs[0][1]) == list(range(2001, 3001))
    assert line_numbers(segs[1][1]) == list(range(3001, 4001))
    assert not [e for e in r.events if isinstance(e, Skipped)]


@pytest.mark.parametrize("compress", [False, True], ids=["rotated", "rotated-and-gzipped"])
def test_a_log_read_through_a_link_rotated_beside_its_target_while_down(
        tmp_path: Path, compress: bool) -> None:
    """The kubelet's layout: /var/log/containers/X.log links to /var/log/pods/.../0.log,
    which the kubelet rotates (10 MiB by default) to 0.log.DATE beside itself, older ones
    gzipped.  Rotated while the daemon was down: the rest is found beside the link's target
    (before: looked for beside the link only, and counted as lost)."""
    pod = tmp_path / "pods" / "inference_sglang-7d9f_0c1d" / "sglang"
    pod.mkdir(parents=True)
    links = tmp_path / "containers"
    links.mkdir()
    target = pod / "0.log"
    target.write_bytes(b"".join(numbered(i) for i in range(1, 1001)))
    link = links / "sglang-7d9f_inference_sglang-a1.log"
    link.symlink_to(target)
    pos = read_all_and_stop(link)
    with open(target, "ab") as f:                  # written while the daemon was down ...
        f.write(b"".join(numbered(i) for i in range(1001, 2001)))
    rotated = pod / "0.log.20261205-101010"
    os.rename(target, rotated)                     # ... then rotated by the kubelet
    if compress:
        with open(rotated, "rb") as src, gzip.open(f"{rotated}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        rotated.unlink()
    target.write_bytes(b"".join(numbered(i) for i in range(2001, 2101)))

    async def second() -> Reader:
        async with Reader(LocalFileSource(str(link), start=pos, rotate_wait=0.3)) as r:
            await r.wait(lambda: len(r.opened()) == 2 and
                         len(r.segments()[-1][1]) == target.stat().st_size, 20, "the new file")
            return r

    r = run(second())
    assert [n for _, seg in r.segments() for n in line_numbers(seg)] == list(range(1001, 2101))
    assert not [e for e in r.events if isinstance(e, Skipped)]


def test_a_pattern_over_a_log_and_its_rotated_copies_never_takes_an_archive(
        tmp_path: Path) -> None:
    """`server.log*` matches the log, `server.log.1` and logrotate's `server.log.2.gz`,
    which logrotate wrote last: the archive is never taken for the newest (a compressed file
    is refused by a watch); the rotation is followed, nothing lost."""
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(numbered(i) for i in range(1, 1001)))
    os.utime(log, (time.time() - 60, time.time() - 60))
    # an archive written after the log's last line (compressed by a cron job, copied in)
    old = Path(f"{log}.5.gz")
    old.write_bytes(gzip.compress(b"an old launch\n"))

    async def main() -> Reader:
        async with Reader(LocalFileSource(str(log) + "*", rotate_wait=0.3)) as r:
            await r.wait(lambda: r.data_bytes() == log.stat().st_size, 10, "the log")
            logrotate(tmp_path, log, compress=True)
            with open(log, "ab") as f:
                f.write(b"".join(numbered(i) for i in range(1001, 1101)))
            await r.wait(lambda: len(r.opened()) == 2 and
                         len(r.segments()[-1][1]) == log.stat().st_size, 10, "the new log")
        return r

    r = run(main())
    assert not [s for s in r.states() if s.fatal], r.states()
    assert [n for _, seg in r.segments() for n in line_numbers(seg)] == list(range(1, 1101))


def test_an_archive_that_does_not_decode_is_a_loss_said(tmp_path: Path) -> None:
    """The rotated file's archive cut in half (a copy interrupted): not read; what it held
    after the saved position is counted as lost, and the new file is read."""
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(numbered(i) for i in range(1, 2001)))
    pos = read_all_and_stop(log)
    with open(log, "ab") as f:
        f.write(b"".join(numbered(i) for i in range(2001, 3001)))
    logrotate(tmp_path, log, compress=True)
    gz = Path(f"{log}.1.gz")
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    with open(log, "ab") as f:
        f.write(b"".join(numbered(i) for i in range(3001, 3101)))

    async def second() -> Reader:
        async with Reader(LocalFileSource(str(log), start=pos, rotate_wait=0.5)) as r:
            await r.wait(lambda: r.segments() and
                         len(r.segments()[-1][1]) == log.stat().st_size, 20, "the new file")
            return r

    r = run(second())
    skipped = [e for e in r.events if isinstance(e, Skipped)]
    assert len(skipped) == 1 and "unread" in skipped[0].message, r.brief()
    assert line_numbers(r.segments()[-1][1]) == list(range(3001, 3101))


@pytest.mark.parametrize("poll_interval", [30.0], ids=["no-poll"])
def test_inotify_is_armed_again_when_the_directory_comes_back(tmp_path: Path,
                                                              poll_interval: float) -> None:
    """rm -rf the log's directory, make it again, write the log: the watch is put on the new
    directory and appended lines wake the source (the 30 s poll would be too late)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "server.log"
    log.write_bytes(b"first\n")

    async def main() -> None:
        source = LocalFileSource(str(log), poll_interval=poll_interval)
        async with Reader(source) as r:
            await r.wait(lambda: r.data_bytes() == 6, 5, "the first line")
            old = _Watcher.watching(source.path)
            assert old is not None and old == _Watcher.dir_id(str(logdir))
            shutil.rmtree(logdir)
            logdir.mkdir()
            new_id = _Watcher.dir_id(str(logdir))
            assert new_id != old
            log.write_bytes(b"second\n")
            await r.wait(lambda: len(r.opened()) == 2, 15,
                         "the new file in the new directory (after rotate_wait)")
            await r.wait(lambda: _Watcher.watching(source.path) == new_id, 5,
                         "the watch on the new directory")
            for k in range(3):               # inotify wakes it each time, not the 30 s poll
                with open(log, "ab") as f:
                    f.write(b"more %d\n" % k)
                want = 7 + 7 * (k + 1)
                await r.wait(lambda: len(r.segments()[-1][1]) == want, 5,
                             f"appended line {k} (woken by inotify)")

    run(main())


# ----------------------------------------------------------------------------------------------
# SSH: rotated while the connection was down

def ssh_source(server: SSHServer, path: Path, pool: SSHPool,
               transport: str = "auto") -> SSHFileSource:
    opts = SSHOptions(known_hosts=str(server.known_hosts), client_keys=(str(server.client_key),),
                      poll_interval=0.05, transport=transport)
    return SSHFileSource(server.url(path), options=opts, pool=pool, rotate_wait=0.5)


def _rotate_while_down(server: SSHServer, tmp_path: Path, after: Any,
                       transport: str = "auto") -> tuple[Reader, bytes]:
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(numbered(i) for i in range(1, 10_001)))

    async def main() -> Reader:
        pool = SSHPool()
        source = ssh_source(server, log, pool, transport)
        try:
            async with Reader(source) as r:
                await r.wait(lambda: r.data_bytes() == log.stat().st_size, 20, "the first part")
                await asyncio.to_thread(server.stop)        # the connection is down ...
                with open(log, "ab") as f:                  # ... the server writes on ...
                    f.write(b"".join(numbered(i) for i in range(10_001, 20_001)))
                os.rename(log, f"{log}.1")                  # ... its log is rotated ...
                log.write_bytes(b"".join(numbered(i, "new ") for i in range(1, 5_001)))
                after(log)
                await asyncio.to_thread(server.start)       # ... and we are back
                await r.wait(lambda: len(r.opened()) >= 2 and
                             len(r.segments()[-1][1]) == log.stat().st_size and
                             r.segments()[-1][0].new_file, 40, "the new file")
                return r
        finally:
            await pool.close()

    r = run(main())
    return r, log.read_bytes()


def test_ssh_rotated_while_disconnected_the_old_file_is_found_and_drained(
        sshd_server: SSHServer, tmp_path: Path) -> None:
    r, new = _rotate_while_down(sshd_server, tmp_path, lambda log: None)
    segs = r.segments()
    assert [o.reason for o, _ in segs] == ["attach", "reconnected", "rotated"]
    old = [n for _, seg in segs[:2] for n in line_numbers(seg)]
    assert loss(old, 20_000) == (0, 0)
    assert old == list(range(1, 20_001))
    assert segs[-1][1] == new
    assert not [e for e in r.events if isinstance(e, Skipped)]


def _compress(log: Path, cut: bool = False) -> None:
    """logrotate's `compress`: `server.log.1` gzipped to `server.log.1.gz` (`cut`: the
    archive then cut in half, as a copy interrupted)."""
    old = Path(f"{log}.1")
    with open(old, "rb") as src, gzip.open(f"{old}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    old.unlink()
    if cut:
        gz = Path(f"{old}.gz")
        gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])


@pytest.mark.parametrize("transport", ["stream", "sftp"])
def test_ssh_rotated_and_compressed_while_disconnected_is_read_from_the_archive(
        sshd_server: SSHServer, tmp_path: Path, transport: str) -> None:
    """The old file gzipped while the connection was down: fetched, unpacked here, its rest
    read (before: the 10,000 lines written while down were counted as lost)."""
    r, new = _rotate_while_down(sshd_server, tmp_path, _compress, transport)
    segs = r.segments()
    assert [o.reason for o, _ in segs] == ["attach", "reconnected", "rotated"]
    old = [n for _, seg in segs[:2] for n in line_numbers(seg)]
    assert old == list(range(1, 20_001))
    assert segs[-1][1] == new
    assert not [e for e in r.events if isinstance(e, Skipped)]


def test_ssh_rotated_and_compressed_archive_damaged_the_loss_is_said(
        sshd_server: SSHServer, tmp_path: Path) -> None:
    r, new = _rotate_while_down(sshd_server, tmp_path, lambda log: _compress(log, cut=True))
    skipped = [e for e in r.events if isinstance(e, Skipped)]
    assert len(skipped) == 1, r.brief()
    assert "rotated while disconnected" in skipped[0].message
    assert "lost" in skipped[0].message
    assert [o.reason for o in r.opened()] == ["attach", "rotated"]
    assert r.segments()[-1][1] == new


@pytest.mark.parametrize("transport,compress", [("stream", False), ("stream", True),
                                                ("sftp", False)])
def test_ssh_a_linked_log_rotated_beside_its_target_while_disconnected(
        sshd_server: SSHServer, tmp_path: Path, transport: str, compress: bool) -> None:
    """The kubelet's layout read over SSH: the link's target rotated to 0.log.DATE (gzipped
    too) while the connection was down: found beside the target, the rest read."""
    server = sshd_server
    pod = tmp_path / "pods" / "inference_sglang-7d9f_0c1d" / "sglang"
    pod.mkdir(parents=True)
    (tmp_path / "containers").mkdir()
    target = pod / "0.log"
    target.write_bytes(b"".join(numbered(i) for i in range(1, 2001)))
    link = tmp_path / "containers" / "sglang-7d9f_inference_sglang-a1.log"
    link.symlink_to(target)

    async def main() -> Reader:
        pool = SSHPool()
        try:
            async with Reader(ssh_source(server, link, pool, transport)) as r:
                await r.wait(lambda: r.data_bytes() == target.stat().st_size, 20, "the log")
                await asyncio.to_thread(server.stop)
                with open(target, "ab") as f:
                    f.write(b"".join(numbered(i) for i in range(2001, 4001)))
                rotated = pod / "0.log.20261205-101010"
                os.rename(target, rotated)
                if compress:
                    with open(rotated, "rb") as src, gzip.open(f"{rotated}.gz", "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    rotated.unlink()
                target.write_bytes(b"".join(numbered(i, "new ") for i in range(1, 101)))
                await asyncio.to_thread(server.start)
                await r.wait(lambda: len(r.opened()) >= 2 and r.segments()[-1][0].new_file
                             and len(r.segments()[-1][1]) == target.stat().st_size, 40,
                             "the new file")
                return r
        finally:
            await pool.close()

    r = run(main())
    old = [n for _, seg in r.segments()[:-1] for n in line_numbers(seg)]
    assert old == list(range(1, 4001))
    assert not [e for e in r.events if isinstance(e, Skipped)]


def test_daemon_counts_and_shows_a_loss_over_ssh(sshd_server: SSHServer, tmp_path: Path,
                                                daemons: Any) -> None:
    server = sshd_server
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(numbered(i) for i in range(1, 1001)))
    port = free_port()
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg("remote", server.url(log), ssh=ssh, rotate_wait="1s")])
    d = daemons(cfg, port).start()
    d.wait_lines("remote", 1000, timeout=30)
    server.stop()
    os.rename(log, f"{log}.1")
    os.unlink(f"{log}.1")                           # rotated and removed: unrecoverable
    log.write_bytes(b"".join(numbered(i, "new ") for i in range(1, 11)))
    server.start()
    d.wait_metric("logwatch_source_losses_total", 1.0, timeout=60, target="remote")
    t = d.target("remote")
    assert t is not None
    notice = t["source_state"]["notice"]
    assert "rotated while disconnected" in notice, t["source_state"]
    assert t["source_state"]["losses"] == 1
    d.wait_lines("remote", 1010, timeout=30)
    assert d.metric("logwatch_bytes_skipped_total", target="remote") is not None
