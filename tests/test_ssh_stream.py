"""The streamed SSH reads (sources/sshstream.py) against a real OpenSSH server: the reader on
the node killed mid-read, sshd restarted, a rotation while the channel was down, a node
without SFTP (the stream alone) and one without python3 (SFTP alone), all with
`MaxSessions 10`.  Every byte is counted: nothing lost, nothing read twice.  Waits poll a
condition with a deadline (test_ssh.Collector.wait)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from logwatch.sources.ssh import SSHPool
from logwatch.sources.sshstream import MARKER
from support.sshd import SSHServer
from test_ssh import Collector, collecting, make_source, numbered, run, ssh_opts

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


def reader_pids(server: SSHServer) -> list[int]:
    """The streamed readers running on the node (their argv names MARKER)."""
    out = []
    for pid in server.session_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if MARKER.encode() in argv and any(b"python" in a for a in argv[:1]):
            out.append(pid)
    return out


def kill_readers(server: SSHServer) -> int:
    n = 0
    for pid in reader_pids(server):
        try:
            os.kill(pid, 9)
            n += 1
        except ProcessLookupError:
            pass
    return n


class Writers(threading.Thread):
    """Appends numbered lines to each path, `per_batch` at a time, until `lines` each (or
    fewer: `finish`)."""

    def __init__(self, paths: list[Path], lines: int, per_batch: int = 100,
                 pace: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.paths, self.lines, self.per_batch, self.pace = paths, lines, per_batch, pace
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            files = [open(p, "ab") for p in self.paths]
            try:
                b = 0
                while (b + 1) * self.per_batch <= self.lines:
                    chunk = b"".join(numbered(i) for i in range(b * self.per_batch + 1,
                                                                (b + 1) * self.per_batch + 1))
                    for f in files:
                        f.write(chunk)
                        f.flush()
                    self.written = (b + 1) * self.per_batch
                    b += 1
                    time.sleep(self.pace)    # the pace of the writer, not a synchronisation
            finally:
                for f in files:
                    f.close()
        except BaseException as e:  # noqa: BLE001
            self.error = e


    def finish(self, more: int) -> None:
        """Write `more` lines (whole batches) after those written so far, then stop."""
        batches = -(-more // self.per_batch)
        self.lines = min(self.lines, self.written + batches * self.per_batch)


def expected(lines: int) -> bytes:
    return b"".join(numbered(i) for i in range(1, lines + 1))


@pytest.mark.serial   # counts one reconnect per fault; faults closer than a loaded machine reconnects merge
def test_reader_killed_mid_read_and_sshd_restarted_lose_and_repeat_nothing(
        tmp_path: Path) -> None:
    """Four logs on one host without SFTP (the stream is all there is), MaxSessions 10: while
    the logs grow, the reader on the node is killed four times and sshd is restarted once.  The
    connection survives the kills (only the reader is started again); every byte arrives
    once, in order."""
    paths = [tmp_path / f"log{i}.log" for i in range(4)]
    for p in paths:
        p.write_bytes(b"")
    lines = 40_000
    with SSHServer(str(tmp_path / "sshd"), sftp=None, max_sessions=10) as server:
        pool = SSHPool()
        # at most ~20 s of writing; it ends 2,000 lines (~1 s) after the last fault
        writers = Writers(paths, lines, per_batch=50, pace=0.025)
        faults: list[int] = []   # lines written at each fault

        async def main() -> list[Collector]:
            cols = [Collector(make_source(server, p, pool=pool,
                                          options=ssh_opts(server, keepalive_interval=2.0)))
                    .start() for p in paths]
            try:
                for c in cols:
                    await c.wait(lambda c=c: bool(c.opened()), "the first Opened")
                writers.start()
                for k in range(5):
                    mark = [c.next_offset or 0 for c in cols]
                    await asyncio.gather(*(c.wait(lambda c=c, m=m: (c.next_offset or 0) > m,
                                                  f"progress before fault {k}", timeout=30)
                                           for c, m in zip(cols, mark)))
                    assert writers.is_alive(), f"the writer ended before fault {k}"
                    if k == 2:
                        assert pool.connects == 1, "a killed reader must not cost the connection"
                        await asyncio.to_thread(server.restart)
                    else:
                        n = await asyncio.to_thread(kill_readers, server)
                        assert n == 1, f"fault {k}: {n} readers on the node (one per connection)"
                    faults.append(writers.written)
                writers.finish(2000)
                await asyncio.to_thread(writers.join, 120)
                assert writers.error is None, writers.error
                size = paths[0].stat().st_size
                for c in cols:
                    await c.wait(lambda c=c: c.next_offset == size, f"all {size} bytes",
                                 timeout=40)
            finally:
                for c in cols:
                    await c.stop()
                await pool.close()
            return cols

        cols = run(main(), timeout=200)
    want = expected(writers.lines)
    assert faults[-1] < writers.lines, f"faults after the writer was done: {faults}"
    for c in cols:
        assert c.errors == [], c.errors[:5]                   # no gap, no overlap
        assert len(c.files) == 1 and c.data() == want         # 0 lost, 0 duplicated
        assert {o.reason for o in c.opened()[1:]} == {"reconnected"}
        assert c.source.reconnects >= 5
    assert pool.connects == 2       # the restart; never for a killed reader
    assert pool.streams >= 6        # 1 + 4 kills + the restart


def test_rotated_while_the_channel_was_down_the_old_file_is_drained_by_inode(
        tmp_path: Path) -> None:
    """sshd is stopped; meanwhile the log is renamed to .1 (its writer appends to it), a new
    log is started.  When sshd is back the rest of the old file is read (found among the
    rotated names by dev:inode), then the new one: nothing lost, nothing twice."""
    log = tmp_path / "server.log"
    old_a = expected(2000)
    old_b = b"".join(b"late " + numbered(i) for i in range(2001, 2301))
    new = b"".join(b"new " + numbered(i) for i in range(1, 501))
    with SSHServer(str(tmp_path / "sshd"), sftp=None, max_sessions=10) as server:
        pool = SSHPool()

        async def main() -> Collector:
            async with collecting(make_source(server, log, pool=pool, rotate_wait=0.5)) as col:
                old = open(log, "ab")
                try:
                    await col.wait(lambda: bool(col.opened()), "the first Opened")
                    old.write(old_a)
                    old.flush()
                    await col.wait(lambda: col.next_offset == len(old_a), "the old file")
                    await asyncio.to_thread(server.stop)
                    await col.wait(lambda: col.up_since is None, "the source to see the drop")
                    os.rename(log, log.with_name("server.log.1"))
                    old.write(old_b)
                    old.flush()
                    log.write_bytes(new)
                    await asyncio.to_thread(server.start)
                    await col.wait(lambda: len(col.files) == 2 and col.data() == new,
                                   "the new file after the drain", timeout=40)
                finally:
                    old.close()
            return col

        col = run(main(), timeout=90)
    assert col.errors == []
    assert [o.reason for o in col.opened()] == ["attach", "reconnected", "rotated"]
    assert col.data(0) == old_a + old_b and col.data(1) == new
    assert pool.streams == 2


def test_a_node_without_python3_is_read_over_sftp(tmp_path: Path) -> None:
    """No python3 on the node: the reader does not start, SFTP reads the log (and keeps
    reading it after the connection is dropped) and the stream is not tried again."""
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    lines = 5000
    with SSHServer(str(tmp_path / "sshd"), python=False, max_sessions=10) as server:
        pool = SSHPool()
        writers = Writers([log], lines, pace=0.005)

        async def main() -> Collector:
            async with collecting(make_source(server, log, pool=pool)) as col:
                await col.wait(lambda: bool(col.opened()), "the first Opened")
                writers.start()
                await col.wait(lambda: (col.next_offset or 0) > 0, "some lines")
                assert await asyncio.to_thread(server.kill_sessions) > 0
                await asyncio.to_thread(writers.join, 60)
                assert writers.error is None
                size = log.stat().st_size
                await col.wait(lambda: col.next_offset == size, "every line", timeout=30)
            return col

        col = run(main(), timeout=90)
    assert col.errors == [] and col.data() == expected(lines)
    assert col.source.reconnects == 1
    assert pool.streams == 0 and pool.connects == 2
    assert len(pool._no_stream) == 1


def test_transport_stream_without_python3_is_fatal_and_says_why(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x\n")
    with SSHServer(str(tmp_path / "sshd"), python=False) as server:
        pool = SSHPool()

        async def main() -> Collector:
            async with collecting(make_source(server, log, pool=pool,
                                              options=ssh_opts(server, transport="stream"))) as col:
                await col.wait(lambda: col.fatal() is not None, "a fatal state")
            return col

        col = run(main())
    fatal = col.fatal()
    assert fatal is not None and "python3" in fatal.message, fatal
    assert not col.files


def test_transport_sftp_reads_without_starting_the_reader(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"a\n")
    with SSHServer(str(tmp_path / "sshd")) as server:
        pool = SSHPool()

        async def main() -> Collector:
            async with collecting(make_source(server, log, pool=pool,
                                              options=ssh_opts(server, transport="sftp"))) as col:
                await col.wait(lambda: col.data() == b"a\n", "the first line")
                with open(log, "ab") as f:
                    f.write(b"b\n")
                await col.wait(lambda: col.data() == b"a\nb\n", "the second line")
                assert reader_pids(server) == []
            return col

        col = run(main())
    assert pool.streams == 0 and col.errors == []
