"""The SSH source against a real OpenSSH server on 127.0.0.1 (tests/support/sshd.py).

Every wait polls a condition with a deadline; no sleep stands in for synchronisation.  The
fault test is the acceptance criterion: 100,000 lines written while the connection is dropped
eleven times (ten killed sessions, one sshd restart) arrive exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import pytest

from conftest import ROOT
from logwatch.rules.locate import startup_locator
from logwatch.follow import Follower
from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack
from logwatch.sources.base import Data, Opened, Position, SourceState
from logwatch.sources.ssh import SSHFileSource, SSHOptions, SSHPool, SSHTarget
from support.daemon import sim_texts, wait_for
from support.pump import EventPump
from support.sshd import (SFTP_SERVER, SSHServer, keygen, ssh_agent,  # noqa: F401
                          sshd_server)  # the fixture

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

USER = getpass.getuser()
POLL = 0.02   # how often a wait looks at its condition


# ----------------------------------------------------------------------------------------------
# helpers

def ssh_opts(server: SSHServer, known_hosts: str | os.PathLike[str] | None = None,
             **kw: Any) -> SSHOptions:
    return SSHOptions(known_hosts=str(known_hosts or server.known_hosts),
                      client_keys=(str(server.client_key),), **kw)


def run(coro: Awaitable[Any], timeout: float = 50.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


class Collector(EventPump):
    """Consumes `source.events()` in a task: keeps every event, the bytes of each file opened,
    and every break of the offset promise (a Data not at the previous offset + length).
    Started and stopped by `collecting`."""

    def __init__(self, source: SSHFileSource, follower: Follower | None = None) -> None:
        super().__init__(source, follower)
        self.files: list[tuple[Opened, bytearray]] = []
        self.errors: list[str] = []
        self.next_offset: int | None = None
        self.up_since: float | None = None
        self.data_since_up = False
        self.downs = 0
        self.ended = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> "Collector":
        self.task = asyncio.create_task(self._pump())
        return self

    async def _pump(self) -> None:
        try:
            await self.pump()
        finally:
            self.ended = True

    def seen(self, ev: Any) -> None:
        if isinstance(ev, Opened):
            if not ev.new_file and self.next_offset is not None and \
                    ev.offset != self.next_offset:
                self.errors.append(f"{ev.reason} at {ev.offset}, expected {self.next_offset}")
            if ev.new_file or not self.files:
                self.files.append((ev, bytearray()))
            self.next_offset = ev.offset
        elif isinstance(ev, Data):
            if ev.offset != self.next_offset:
                self.errors.append(f"Data at {ev.offset} ({len(ev.data)} bytes), "
                                   f"expected {self.next_offset}")
            if not self.files:
                self.errors.append("Data before any Opened")
                self.files.append((Opened(ev.offset, 1, None, "?", True), bytearray()))
            self.files[-1][1].extend(ev.data)
            self.next_offset = ev.offset + len(ev.data)
            self.data_since_up = True
        elif isinstance(ev, SourceState):
            if ev.up:
                self.up_since = time.monotonic()
                self.data_since_up = False
            else:
                self.up_since = None
                if not ev.fatal:
                    self.downs += 1

    # views (and EventPump's)
    def fatal(self) -> SourceState | None:
        return next((e for e in self.states() if e.fatal), None)

    def data(self, index: int = -1) -> bytes:
        return bytes(self.files[index][1]) if self.files else b""

    def describe(self) -> str:
        tail = [e if not isinstance(e, Data) else f"Data({len(e.data)}B @ {e.offset})"
                for e in self.events[-12:]]
        return f"{len(self.events)} events, last: {tail}; errors: {self.errors[:5]}"

    async def wait(self, cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.ended and not cond():
                raise AssertionError(f"the source ended before {what}: {self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out ({timeout}s) waiting for {what}: {self.describe()}")
            await asyncio.sleep(POLL)

    async def wait_end(self, timeout: float = 20.0) -> None:
        assert self.task is not None
        await asyncio.wait_for(asyncio.shield(self.task), timeout)

    async def stop(self) -> None:
        await self.source.close()
        if self.task is not None:
            try:
                await asyncio.wait_for(self.task, 15)
            except asyncio.TimeoutError:
                self.task.cancel()
                raise AssertionError(f"the source did not end after close(): {self.describe()}")


@contextlib.asynccontextmanager
async def collecting(source: SSHFileSource,
                     follower: Follower | None = None) -> AsyncIterator[Collector]:
    """`source` read by a started Collector (events to `follower` too, if given); at exit,
    even from a failed wait, the source is closed (its task awaited) and then its pool, so
    that no connection outlives the test."""
    col = Collector(source, follower).start()
    try:
        yield col
    finally:
        await col.stop()
        await source.pool.close()


def make_source(server: SSHServer, path: str | os.PathLike[str], pool: SSHPool | None = None,
                **kw: Any) -> SSHFileSource:
    options = kw.pop("options", None) or ssh_opts(server)
    return SSHFileSource(server.url(path), options=options, pool=pool or SSHPool(), **kw)


def make_follower(source: SSHFileSource) -> Follower:
    return Follower(source.name, source, lambda p: LogPipeline(p), load_pack("sglang"), [])


def numbered(i: int) -> bytes:
    """Line i: `line 000001 ...`, 63 to 99 bytes."""
    return (f"line {i:06d} " + "abcdefghijklmnopqrstuvwxyz0123456789" * 3)[: 62 + i % 37].encode() + b"\n"


def cli(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL)
    return res, time.monotonic() - t0


# ----------------------------------------------------------------------------------------------
# a. the acceptance criterion: 100,000 lines through 11 dropped connections

N_LINES = 100_000
WRITE_SECONDS = 24.0
BATCH = 200
KILLS = 10                # session kills ...
RESTART_AT = 5            # ... and one sshd restart, as fault number 5 (of 11)
# How long the source has been reading again before the next fault: alternately a short while
# (two drops in a row: its backoff grows) and > 2 s (it then resets its backoff).
HEALTHY_BEFORE_FAULT = (0.3, 2.2)


class Writer(threading.Thread):
    """Appends N_LINES numbered lines at a steady pace over WRITE_SECONDS, flushed per batch."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.written = 0
        self.error: BaseException | None = None
        self.stop_flag = threading.Event()

    def run(self) -> None:
        try:
            batches = N_LINES // BATCH
            interval = WRITE_SECONDS / batches
            t0 = time.monotonic()
            with open(self.path, "ab") as f:
                for b in range(batches):
                    # pacing (not synchronisation): batch b is due at t0 + b * interval
                    if self.stop_flag.wait(max(0.0, t0 + b * interval - time.monotonic())):
                        return
                    f.write(b"".join(numbered(i) for i in range(b * BATCH + 1, (b + 1) * BATCH + 1)))
                    f.flush()
                    self.written = (b + 1) * BATCH
        except BaseException as e:  # noqa: BLE001
            self.error = e


def test_fault_tolerance_100k_lines_through_dropped_connections(sshd_server: SSHServer,
                                                                 tmp_path: Path) -> None:
    server = sshd_server
    path = tmp_path / "server.log"
    path.write_bytes(b"")
    source = make_source(server, path, options=ssh_opts(server, poll_interval=0.05,
                                                        keepalive_interval=2.0))
    follower = make_follower(source)
    writer = Writer(path)
    faults: list[tuple[str, int, int]] = []   # (kind, lines written then, sessions killed)

    async def inject(col: Collector) -> None:
        for k in range(KILLS + 1):
            healthy = HEALTHY_BEFORE_FAULT[k % 2]
            # the source is connected and has read since (for `healthy` seconds)
            await col.wait(lambda: not writer.is_alive() or (
                           col.up_since is not None and col.data_since_up and
                           time.monotonic() - col.up_since >= healthy),
                           f"the source to be up and reading before fault {k}", timeout=30)
            assert writer.is_alive(), f"the writer ended before fault {k}: {faults}"
            if k == RESTART_AT:
                await asyncio.to_thread(server.restart)
                faults.append(("restart", writer.written, -1))
            else:
                n = await asyncio.to_thread(server.kill_sessions)
                assert n > 0, "no sshd session process to kill"
                faults.append(("kill", writer.written, n))
            col.up_since = None   # dropped: wait for the next "up"

    async def main() -> Collector:
        async with collecting(source, follower) as col:
            await col.wait(lambda: bool(col.opened()), "the first Opened")
            writer.start()
            try:
                await inject(col)
                await col.wait(lambda: not writer.is_alive(), "the writer to finish", timeout=40)
                assert writer.error is None, writer.error
                size = path.stat().st_size
                await col.wait(lambda: col.next_offset == size, f"all {size} bytes", timeout=30)
            finally:
                writer.stop_flag.set()
        return col

    col = run(main(), timeout=100)
    expected = path.read_bytes()

    # the offsets: every Data right after the previous one, across every reconnect
    assert col.errors == [], col.errors[:10]
    opened = col.opened()
    assert opened[0].reason == "attach" and opened[0].offset == 0
    assert {o.reason for o in opened[1:]} == {"reconnected"}, [o.reason for o in opened]
    assert len(col.files) == 1
    got = col.data()
    assert len(got) == len(expected)
    assert got == expected
    lines = got.split(b"\n")
    assert lines[-1] == b""
    assert len(lines) - 1 == N_LINES
    for i, line in enumerate(lines[:-1], 1):
        if line + b"\n" != numbered(i):
            raise AssertionError(f"line {i} is {line[:40]!r}")

    # the follower saw the same stream: no gap, no overlap
    st = follower.status
    assert st.gaps == 0 and st.overlaps == 0, st
    assert st.bytes == len(expected)
    assert follower.pipe is not None and follower.pipe.counters.lines == N_LINES

    # the faults really happened while writing, and each one cost exactly one reconnect
    assert [f[0] for f in faults].count("kill") == KILLS and len(faults) == KILLS + 1, faults
    during = [f for f in faults if f[1] < N_LINES]
    assert len(during) >= KILLS, f"faults after the writer ended: {faults}"
    assert source.reconnects >= KILLS + 1, (source.reconnects, faults)
    assert st.reconnects >= KILLS + 1, st
    assert col.downs >= KILLS + 1
    assert len(opened) - 1 >= KILLS + 1


# ----------------------------------------------------------------------------------------------
# b. host keys

def _other_host_key(tmp_path: Path) -> str:
    key = keygen(tmp_path / "other_host_key")
    kind, blob = Path(str(key) + ".pub").read_text().split()[:2]
    return f"{kind} {blob}"


async def _first_fatal(server: SSHServer, path: Path, known_hosts: Path,
                       timeout: float = 15, **kw: Any) -> tuple[SourceState, float]:
    source = make_source(server, path, options=ssh_opts(server, known_hosts), **kw)
    return await _fatal_of(source, timeout)


async def _fatal_of(source: SSHFileSource, timeout: float = 15) -> tuple[SourceState, float]:
    """The source's fatal state (it reads nothing first; it ends), and how long it took."""
    async with collecting(source) as col:
        t0 = time.monotonic()
        await col.wait(lambda: col.fatal() is not None, "a fatal state", timeout=timeout)
        await col.wait_end(5)   # a fatal state ends the source
    assert not any(isinstance(e, (Data, Opened)) for e in col.events), col.describe()
    fatal = col.fatal()
    assert fatal is not None
    return fatal, time.monotonic() - t0


async def _first_failure(source: SSHFileSource) -> SourceState:
    """The first state in which `source` says it is not up (a failure, fatal or retried)."""
    async with collecting(source) as col:
        await col.wait(lambda: any(not s.up for s in col.states()), "a failure")
        return next(s for s in col.states() if not s.up)


async def _hello_or_failure(source: SSHFileSource) -> tuple[bytes, SourceState | None]:
    """What `source` read once it read its `hello` line or failed, and the failure (None
    for none): both outcomes of a login that may or may not go through."""
    async with collecting(source) as col:
        await col.wait(lambda: col.data() == b"hello\n" or any(
            not s.up for s in col.states()), "the log, or a failure")
        return col.data(), next((s for s in col.states() if not s.up), None)


def test_unknown_host_key_is_refused(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")

    fatal, took = run(_first_fatal(server, log_file, empty))
    msg = fatal.message
    assert "host key" in msg and "127.0.0.1" in msg, msg
    assert str(empty) in msg, msg                                 # where to add it
    assert f"ssh-keyscan -p {server.port} 127.0.0.1" in msg, msg  # how
    assert took < 10

    res, took = cli("watch", server.url(log_file), "--known-hosts", str(empty),
                    "-i", str(server.client_key), "--timeout", "20")
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "host key" in res.stderr and "ssh-keyscan" in res.stderr and str(empty) in res.stderr, \
        res.stderr
    assert took < 12, f"took {took:.1f}s with --timeout 20"

    # the advice works: ssh-keyscan as suggested, then the same source reads the log
    scan = subprocess.run(["ssh-keyscan", "-p", str(server.port), "-t", "ed25519", "127.0.0.1"],
                          capture_output=True, text=True, timeout=30)
    assert scan.returncode == 0 and server.host_public_key() in scan.stdout, scan
    with open(empty, "a") as f:
        f.write(scan.stdout)

    async def trusted() -> bytes:
        async with collecting(make_source(server, log_file,
                                          options=ssh_opts(server, empty))) as col:
            await col.wait(lambda: col.data() == b"hello\n", "the log after trusting the key")
        return col.data()
    assert run(trusted()) == b"hello\n"


def test_changed_host_key_is_refused(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    changed = tmp_path / "known_hosts_changed"
    changed.write_text(f"[127.0.0.1]:{server.port} {_other_host_key(tmp_path)}\n")

    fatal, took = run(_first_fatal(server, log_file, changed))
    msg = fatal.message
    assert "host key" in msg and str(changed) in msg, msg
    # a changed key is not an unknown one: never the advice to append the new key
    assert "CHANGED" in msg and f"ssh-keygen -R '[127.0.0.1]:{server.port}'" in msg, msg
    assert "ssh-keyscan" not in msg and ">>" not in msg, msg
    assert "SHA256:" in msg, "the trusted key's fingerprint is shown"
    assert took < 10

    res, took = cli("watch", server.url(log_file), "--known-hosts", str(changed),
                    "-i", str(server.client_key), "--timeout", "20")
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "host key" in res.stderr, res.stderr
    said = (res.stdout + res.stderr).count("ssh-keygen -R")
    assert said == 1, f"the warning was printed {said} times:\n{res.stdout}\n{res.stderr}"
    assert took < 12


def _alias_config(server: SSHServer, tmp_path: Path, *extra: str) -> Path:
    """An ssh config naming the test sshd `gpu-alias` (HostName, Port, User), plus `extra`."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("\n".join(["Host gpu-alias", "  HostName 127.0.0.1", f"  Port {server.port}",
                              f"  User {server.user}", *(f"  {x}" for x in extra), ""]))
    return cfg


async def _alias_fatal(server: SSHServer, tmp_path: Path, known_hosts: Path | None,
                       *extra: str) -> SourceState:
    """The fatal state of `ssh://gpu-alias/...` through `_alias_config`."""
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    opts = SSHOptions(known_hosts=None if known_hosts is None else str(known_hosts),
                      client_keys=(str(server.client_key),),
                      config=(str(_alias_config(server, tmp_path, *extra)),))
    fatal, _ = await _fatal_of(SSHFileSource(f"ssh://gpu-alias{log_file}", options=opts,
                                             pool=SSHPool()))
    return fatal


def test_a_changed_host_key_behind_an_ssh_config_alias_is_said_changed(
        sshd_server: SSHServer, tmp_path: Path) -> None:
    """`ssh://gpu-alias/...`, the alias's HostName and Port in the ssh config, known_hosts
    trusting another key for [127.0.0.1]:PORT.  Before: the unknown-host advice, `ssh-keyscan
    gpu-alias >> known_hosts` (the alias looked up as a host: appending would hide a
    man-in-the-middle).  Now CHANGED, with the resolved host and port."""
    server = sshd_server
    changed = tmp_path / "known_hosts_changed"
    changed.write_text(f"[127.0.0.1]:{server.port} {_other_host_key(tmp_path)}\n")
    msg = run(_alias_fatal(server, tmp_path, changed)).message
    assert "CHANGED" in msg and f"ssh-keygen -R '[127.0.0.1]:{server.port}' -f {changed}" in msg, \
        msg
    assert "gpu-alias" in msg and "ssh-keyscan" not in msg and ">>" not in msg, msg
    # an unknown key through the alias: the advice names the resolved host and port
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    msg = run(_alias_fatal(server, tmp_path, empty)).message
    assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {empty}" in msg, msg


def test_an_ssh_config_known_hosts_of_dev_null_is_said_plainly(sshd_server: SSHServer,
                                                               tmp_path: Path) -> None:
    """A Host alias with `UserKnownHostsFile /dev/null` and `StrictHostKeyChecking no` (ssh
    takes any key; logwatch verifies): before, "add it to ~/.ssh/known_hosts (ssh-keyscan
    gpu-alias >> ~/.ssh/known_hosts)", a file the config makes ssh never read."""
    msg = run(_alias_fatal(sshd_server, tmp_path, None, "UserKnownHostsFile /dev/null",
                           "StrictHostKeyChecking no")).message
    assert "known_hosts is /dev/null" in msg and "--known-hosts" in msg, msg
    assert "ssh-keyscan" not in msg, msg


# ----------------------------------------------------------------------------------------------
# c. missing directory, unreadable file

def test_missing_directory_is_fatal_to_watch_without_wait(sshd_server: SSHServer,
                                                          tmp_path: Path) -> None:
    """`watch` without --wait (the source's wait_for_dir=False): a typo, refused at once."""
    server = sshd_server
    missing_dir = tmp_path / "no-such-dir"
    target = missing_dir / "server.log"
    fatal, took = run(_first_fatal(server, target, server.known_hosts, wait_for_dir=False))
    assert str(missing_dir) in fatal.message and "no such directory" in fatal.message, fatal
    assert took < 10

    res, took = cli("watch", server.url(target), "--known-hosts", str(server.known_hosts),
                    "-i", str(server.client_key), "--timeout", "20")
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert str(missing_dir) in res.stderr, res.stderr
    assert took < 12


def test_watch_wait_waits_for_a_missing_directory_on_the_node(sshd_server: SSHServer,
                                                              tmp_path: Path) -> None:
    """`watch --wait ssh://node/jobs/job-8/server.log` before the job made its directory: it
    says it waits for the directory, then reads the job's crash (exit 1).  Before: exit 2,
    "no such directory", whatever --wait said."""
    server = sshd_server
    job = tmp_path / "job-8"
    out = tmp_path / "watch.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "logwatch", "watch", "--wait", "--no-history", "--gpu", "off",
             "--probe", "off", server.url(job / "server.log"), "--known-hosts",
             str(server.known_hosts), "-i", str(server.client_key), "--timeout", "60"],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: b"no such directory yet" in out.read_bytes(), 30, "the wait said",
                 alive=lambda: None if proc.poll() is None else out.read_text())
        job.mkdir()
        (job / "server.log").write_text("".join(sim_texts(crash="oom")), encoding="utf-8")
        assert proc.wait(timeout=40) == 1, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "cuda_oom" in out.read_text() or "CUDA out of memory" in out.read_text(), \
        out.read_text()


def test_a_login_shell_that_exits_at_start_is_said_and_retried(tmp_path: Path) -> None:
    """A ~/.bashrc with `set -e` and a `source` of a file that is not there ends every ssh
    command before it runs (the streamed reader's, and an `sftp-server` subsystem's, which
    sshd runs through the login shell).  Before: "cannot connect: SFTPConnectionLost: 0 bytes
    read on a total of 4 expected bytes".  Now the error quotes what the shell said, and is
    retried (not fatal: a conda.sh on NFS fails only while the filesystem hiccups; fatal, the
    target waited 2 minutes and the crash written meanwhile was read as history): the file
    back, the log is read."""
    server = SSHServer(str(tmp_path / "sshd"), sftp=SFTP_SERVER,
                       bashrc="set -e\n. /opt/no-conda/etc/profile.d/conda.sh")
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")

    async def main() -> Collector:
        async with collecting(make_source(server, log_file)) as col:
            await col.wait(lambda: any("the login shell exits at start" in s.message
                                       for s in col.states() if s.error), "the exit said")
            (server.dir / ".bashrc").write_text("set -e\n")     # the filesystem is back
            await col.wait(lambda: col.data() == b"hello\n", "the log read after it", 30)
        return col

    with server:
        col = run(main())
    said = next(s.message for s in col.states() if "exits at start" in s.message)
    assert "/opt/no-conda/etc/profile.d/conda.sh" in said, said
    assert "the remote reader ended" not in said, said
    assert col.fatal() is None


def test_what_the_login_shell_said_is_not_a_later_losss_cause(tmp_path: Path) -> None:
    """A ~/.bashrc that writes on stderr (conda's banner): a connection lost an hour later
    is said without it.  Before: "connection lost (StreamLost: the remote reader ended:
    conda: a newer version ...)", the banner given as the cause."""
    server = SSHServer(str(tmp_path / "sshd"),
                       bashrc='echo "conda: a newer version of conda exists" >&2')
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"".join(numbered(i) for i in range(1, 11)))

    async def main() -> Collector:
        async with collecting(make_source(server, log_file)) as col:
            await col.wait(lambda: col.data() == log_file.read_bytes(), "the log read")
            server.kill_sessions()
            await col.wait(lambda: any(s.error for s in col.states()), "the loss said")
        return col

    with server:
        col = run(main())
    lost = next(s for s in col.states() if s.error)
    assert "connection lost" in lost.message and "conda" not in lost.message, lost.message


def test_a_hung_host_is_said_as_such(sshd_server: SSHServer, tmp_path: Path) -> None:
    """An sshd that accepts the connection and says nothing (SIGSTOP: a hung host).
    Before: "cannot connect: TimeoutError: ; retrying", no text.  Now the host, its port and
    the timeout are named."""
    server = sshd_server
    assert server.proc is not None
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")

    async def main() -> Collector:
        async with collecting(make_source(server, log_file,
                                          options=ssh_opts(server, connect_timeout=1.0))) as col:
            await col.wait(lambda: any(s.error for s in col.states()), "the failure said")
        return col

    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        col = run(main())
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    said = next(s for s in col.states() if s.error).message
    assert f"no answer from 127.0.0.1:{server.port} within 1s" in said, said


def test_server_without_an_sftp_subsystem_is_named_as_such(tmp_path: Path) -> None:
    """sshd_config without `Subsystem sftp` on a node without python3: a shell works, SFTP
    and the streamed reader do not.  The message names the missing subsystem and the fix,
    once; watch exits 2 at once.  (With python3 there, the streamed reader reads the log:
    tests/test_ssh_stream.py.)"""
    server = SSHServer(str(tmp_path / "sshd"), sftp=None, python=False)
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    with server:
        shell = subprocess.run(
            ["ssh", "-p", str(server.port), "-i", str(server.client_key), "-o",
             f"UserKnownHostsFile={server.known_hosts}", "-o", "BatchMode=yes",
             f"{server.user}@127.0.0.1", "echo", "shell-works"],
            capture_output=True, text=True, timeout=30)
        assert shell.stdout.strip() == "shell-works", shell   # the fault is only SFTP's
        fatal, took = run(_first_fatal(server, log_file, server.known_hosts))
        assert "no SFTP subsystem" in fatal.message, fatal.message
        assert "Subsystem sftp internal-sftp" in fatal.message, fatal.message
        assert "python3" in fatal.message, fatal.message
        assert "ChannelOpenError" not in fatal.message
        assert took < 10
        res, took = cli("watch", server.url(log_file), "--known-hosts", str(server.known_hosts),
                        "-i", str(server.client_key), "--timeout", "20")
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stderr.count("no SFTP subsystem") == 1, res.stderr
    assert "retrying" not in res.stderr
    assert took < 12


def _make_test_user() -> str | None:
    """A throwaway non-root account that sshd accepts (unlocked, with a shell)."""
    if shutil.which("useradd") is None:
        return None
    name = f"lwt{os.getpid() % 100000}"
    res = subprocess.run(["useradd", "-M", "-N", "-p", "*", "-s", "/bin/sh", "-d", "/nonexistent",
                          name], capture_output=True, text=True, timeout=30)
    return name if res.returncode == 0 else None


def test_unreadable_file_is_fatal_permission_denied(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    # a directory the sshd user can traverse, with a file only its owner can read
    secret_dir = server.dir / "secret"
    secret_dir.mkdir(mode=0o755)
    secret_dir.chmod(0o755)
    target = secret_dir / "server.log"
    target.write_bytes(b"[2026-01-01 10:00:00] server_args=ServerArgs(model_path='x')\n")

    user: str | None = None
    if os.geteuid() != 0:
        target.chmod(0)                       # unreadable for us, the sshd user
    else:
        user = _make_test_user()              # root reads everything: log in as someone else
        target.chmod(0o600)
    try:
        if os.geteuid() == 0 and user is None:
            # no way to be refused here: root reads a 0600 file, and so does the source
            async def read_as_root() -> bytes:
                async with collecting(make_source(server, target)) as col:
                    await col.wait(lambda: col.data() == target.read_bytes(), "the file")
                return col.data()
            assert run(read_as_root()) == target.read_bytes()
            return

        url = server.url(target, user)

        async def refused() -> SourceState:
            source = SSHFileSource(url, options=ssh_opts(server), pool=SSHPool())
            async with collecting(source) as col:
                await col.wait(lambda: col.fatal() is not None, "a fatal state", timeout=15)
            assert not any(isinstance(e, Data) for e in col.events)
            fatal = col.fatal()
            assert fatal is not None
            return fatal
        fatal = run(refused())
        assert "permission denied" in fatal.message.lower() and str(target) in fatal.message, fatal

        res, took = cli("watch", url, "--known-hosts", str(server.known_hosts),
                        "-i", str(server.client_key), "--timeout", "20")
        assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
        assert "permission denied" in res.stderr.lower(), res.stderr
        assert took < 12
    finally:
        if user is not None:
            server.kill_sessions()
            subprocess.run(["userdel", user], capture_output=True, timeout=30)


def test_directory_instead_of_a_file_is_fatal(sshd_server: SSHServer, tmp_path: Path) -> None:
    fatal, took = run(_first_fatal(sshd_server, tmp_path, sshd_server.known_hosts))
    assert "directory" in fatal.message and str(tmp_path) in fatal.message, fatal
    assert took < 10


def test_a_compressed_file_is_refused_by_name(sshd_server: SSHServer, tmp_path: Path) -> None:
    """A rotated log logrotate compressed is finished: `replay` reads it, not a watch."""
    import gzip
    gz = tmp_path / "sglang-server.log.1.gz"
    gz.write_bytes(gzip.compress(b"[2026-11-30 10:00:00] server_args=ServerArgs()\n" * 50))
    fatal, took = run(_first_fatal(sshd_server, gz, sshd_server.known_hosts))
    assert fatal.message == f"{gz} is gzip-compressed: a finished log, which `logwatch replay " \
        f"{gz}` reads", fatal
    assert took < 10


def test_rejected_client_key_is_fatal(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    stranger = keygen(tmp_path / "stranger_key")
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")

    async def main() -> tuple[SourceState, float]:
        options = SSHOptions(known_hosts=str(server.known_hosts), client_keys=(str(stranger),))
        async with collecting(make_source(server, log_file, options=options)) as col:
            t0 = time.monotonic()
            await col.wait(lambda: col.fatal() is not None, "a fatal state", timeout=15)
        fatal = col.fatal()
        assert fatal is not None
        return fatal, time.monotonic() - t0

    fatal, took = run(main())
    assert "authentication" in fatal.message and "127.0.0.1" in fatal.message, fatal
    assert took < 10

    res, took = cli("watch", server.url(log_file), "--known-hosts", str(server.known_hosts),
                    "-i", str(stranger), "--timeout", "20")
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "authentication" in res.stderr, res.stderr
    assert took < 12


# ----------------------------------------------------------------------------------------------
# d. a file that appears later

def test_missing_file_waits_then_reads(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    target = tmp_path / "later.log"
    content = b"".join(numbered(i) for i in range(1, 51))

    async def main() -> Collector:
        async with collecting(make_source(server, target)) as col:
            await col.wait(lambda: any(not s.up for s in col.states()), "a waiting state")
            waiting = next(s for s in col.states() if not s.up)
            assert not waiting.fatal, waiting
            assert "waiting for" in waiting.message and str(target) in waiting.message, waiting
            assert "appear" in waiting.message
            tmp = tmp_path / "later.tmp"
            tmp.write_bytes(content)
            os.replace(tmp, target)
            await col.wait(lambda: col.data() == content, "the content of the new file")
        return col

    col = run(main())
    assert col.fatal() is None
    assert col.errors == []
    first = col.opened()[0]
    assert first.offset == 0 and first.reason == "attach"


@pytest.mark.parametrize("transport", ["stream", "sftp"])
def test_a_path_under_tilde_is_in_the_logins_home(sshd_server: SSHServer, tmp_path: Path,
                                                  transport: str) -> None:
    """`ssh://host/~/server.log` (how sftp and curl name a file in the home directory): the
    log in the login's home, which only the node knows.  Before: read as the literal path
    `/~/server.log`: "no such directory on HOST: /~/..."."""
    server = sshd_server
    home = Path(os.path.expanduser(f"~{server.user}"))
    rel = f".cache/logwatch-test-{os.getpid()}-{transport}"
    (home / rel).mkdir(parents=True, exist_ok=True)
    content = b"".join(numbered(i) for i in range(1, 51))
    (home / rel / "server.log").write_bytes(content)

    async def main() -> Collector:
        src = SSHFileSource(server.url(f"/~/{rel}/server.log"), pool=SSHPool(),
                            options=ssh_opts(server, transport=transport))
        async with collecting(src) as col:
            await col.wait(lambda: col.data() == content, "the log in the home directory")
            assert src.target.path == f"{home.resolve()}/{rel}/server.log"
        return col

    try:
        col = run(main())
    finally:
        shutil.rmtree(home / rel)
    assert col.fatal() is None and col.errors == []


@pytest.mark.parametrize("transport", ["stream", "sftp"])
def test_a_path_under_tilde_is_in_the_home_whatever_bashrc_cds_to(tmp_path: Path,
                                                                  transport: str) -> None:
    """A ~/.bashrc doing `cd $SCRATCH` (both readers start through the login shell: the
    streamed reader, and an `sftp-server` subsystem): `ssh://host/~/server.log` is still the
    one in the login's home (its passwd entry's).  Before: the one in $SCRATCH, another
    file, read without a word."""
    scratch = tmp_path / "scratch"
    home = Path(os.path.expanduser(f"~{getpass.getuser()}"))
    rel = f".cache/logwatch-test-cd-{os.getpid()}-{transport}"
    for where, first in ((home, 1), (scratch, 1001)):
        (where / rel).mkdir(parents=True, exist_ok=True)
        (where / rel / "server.log").write_bytes(b"".join(numbered(i)
                                                          for i in range(first, first + 20)))
    server = SSHServer(str(tmp_path / "sshd"), bashrc=f"cd {scratch}", sftp=SFTP_SERVER)

    async def main() -> Collector:
        src = SSHFileSource(server.url(f"/~/{rel}/server.log"), pool=SSHPool(),
                            options=ssh_opts(server, transport=transport))
        async with collecting(src) as col:
            await col.wait(lambda: len(col.data()) > 0, "the log read")
            assert server.bashrc_runs.exists()       # the login shell did run the `cd`
            assert src.target.path == f"{home.resolve()}/{rel}/server.log"
        return col

    try:
        with server:
            col = run(main())
    finally:
        shutil.rmtree(home / rel)
    assert col.data() == b"".join(numbered(i) for i in range(1, 21)), col.data()[:200]


# ----------------------------------------------------------------------------------------------
# e. resume from a saved position, and not into another file

def test_resume_at_saved_position_and_not_in_a_replaced_file(sshd_server: SSHServer,
                                                             tmp_path: Path) -> None:
    server = sshd_server
    target = tmp_path / "server.log"
    part1 = b"".join(numbered(i) for i in range(1, 3001))
    target.write_bytes(part1)

    async def first_run() -> Position:
        source = make_source(server, target)
        follower = make_follower(source)
        async with collecting(source, follower) as col:
            await col.wait(lambda: col.next_offset == len(part1), "the first part")
        pos = follower.position()
        assert pos is not None
        return pos

    pos = run(first_run())
    assert pos.identity is not None and pos.tail_sha is not None
    assert 0 < pos.offset <= len(part1)
    assert part1[:pos.offset].count(b"\n") + 1 == pos.line_number

    part2 = b"".join(numbered(i) for i in range(3001, 4001))
    with open(target, "ab") as f:
        f.write(part2)
    whole = part1 + part2

    async def resumed(start: Position, pack: bool) -> Collector:
        source = make_source(server, target, start=start,
                             locator=startup_locator(load_pack("sglang")) if pack else None)
        async with collecting(source) as col:
            size = target.stat().st_size
            await col.wait(lambda: col.next_offset == size and bool(col.files), "the whole file")
        return col

    col = run(resumed(pos, pack=True))
    first = col.opened()[0]
    assert first.reason == "resume" and not first.new_file, first
    assert first.offset == pos.offset and first.line_number == pos.line_number
    assert col.data() == whole[pos.offset:]
    assert col.errors == []

    # the same path now holds another file (a different head): no resume into it
    other = b"".join(b"other " + numbered(i) for i in range(1, 5001))
    tmp = tmp_path / "server.tmp"
    tmp.write_bytes(other)
    os.replace(tmp, target)
    col = run(resumed(pos, pack=False))
    first = col.opened()[0]
    assert first.reason == "attach" and first.new_file and first.offset == 0, first
    assert col.data() == other


def test_no_resume_when_bytes_before_offset_changed(sshd_server: SSHServer,
                                                    tmp_path: Path) -> None:
    """Same first KiB, other bytes before the saved offset: the tail hash refuses the resume."""
    server = sshd_server
    target = tmp_path / "server.log"
    old = b"".join(numbered(i) for i in range(1, 2001))
    target.write_bytes(old)
    offset = len(old)

    async def first_run() -> Position:
        source = make_source(server, target)
        follower = make_follower(source)
        async with collecting(source, follower) as col:
            await col.wait(lambda: col.next_offset == offset, "the file")
        pos = follower.position()
        assert pos is not None and pos.offset == offset
        return pos

    saved = run(first_run())
    new = old[:offset - 500] + b"X" * 499 + b"\n" + b"tail of another file\n"
    assert new[:1024] == old[:1024] and len(new) > offset
    target.write_bytes(new)

    async def second() -> Collector:
        async with collecting(make_source(server, target, start=saved)) as col:
            await col.wait(lambda: col.next_offset == len(new), "the whole new file")
        return col

    col = run(second())
    first = col.opened()[0]
    assert first.reason == "attach" and first.offset == 0, first
    assert col.data() == new


# ----------------------------------------------------------------------------------------------
# f. first attach: the latest startup

def _two_startups() -> tuple[bytes, int, int]:
    lines = [b"[2026-01-01 09:59:59] some old noise"]
    lines += [b"[2026-01-01 10:00:00] server_args=ServerArgs(model_path='x')"]
    lines += [f"[2026-01-01 10:00:{i:02d}] old startup line {i}".encode() for i in range(1, 40)]
    lines += [b"[2026-01-01 10:00:41] Received sigquit from a child process. It usually means the child failed."]
    lines += [b"[2026-01-01 11:00:00] a line before the restart"]
    second_line = len(lines) + 1
    second_offset = sum(len(x) + 1 for x in lines)
    lines += [b"[2026-01-01 11:00:01] server_args=ServerArgs(model_path='x')"]
    lines += [f"[2026-01-01 11:00:{i:02d}] new startup line {i}".encode() for i in range(2, 30)]
    return b"\n".join(lines) + b"\n", second_offset, second_line


def test_first_attach_starts_at_latest_startup(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    # a path the remote grep must receive quoted
    d = tmp_path / "dir with space"
    d.mkdir()
    target = d / "it's a server.log"
    content, off, line = _two_startups()
    target.write_bytes(content)
    assert content[off:].startswith(b"[2026-01-01 11:00:01] server_args=")

    async def main() -> Collector:
        locator = startup_locator(load_pack("sglang"))
        async with collecting(make_source(server, target, locator=locator)) as col:
            await col.wait(lambda: col.next_offset == len(content), "the log from its start")
        return col

    col = run(main())
    first = col.opened()[0]
    assert first.reason == "attach"
    assert (first.offset, first.line_number) == (off, line)
    assert col.data() == content[off:]


def test_a_node_clock_behind_ours_does_not_age_its_log_over_sftp(tmp_path: Path) -> None:
    """SFTP's attributes carry no time of the node, and the file's mtime is on the node's
    clock: with the node 20 minutes behind, a log written a second before the attach was
    read as silent for 20 minutes (Opened.mtime 1200 s old: the daemon said "silent since
    ...: server probably dead" and alerted a stall for a startup writing every 2 s, its
    phase and total 20 minutes long).  The node's clock is read once per connection
    (`date`), as the streamed reader's stats carry it.  The node here: its `date` 20
    minutes behind, the log's mtime set as that clock writes it."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    date = bin_dir / "date"
    date.write_text("#!/bin/sh\necho $(( $(/bin/date +%s) - 1200 )).$(/bin/date +%N)\n")
    date.chmod(0o755)
    shell = tmp_path / "node-sh"
    shell.write_text(f'#!/bin/sh\nPATH={bin_dir}:$PATH; export PATH\nexec /bin/sh "$@"\n')
    shell.chmod(0o755)
    log = tmp_path / "server.log"
    log.write_bytes(b"[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m')\n")
    written = time.time()
    os.utime(log, (written - 1200, written - 1200))     # the node's clock wrote it

    async def main() -> Collector:
        async with collecting(make_source(server, log,
                                          options=ssh_opts(server, transport="sftp"))) as col:
            await col.wait(lambda: bool(col.opened()), "the log opened")
        return col

    with SSHServer(str(tmp_path / "sshd"), shell=str(shell)) as server:
        opened = run(main()).opened()[0]
    assert opened.mtime is not None
    assert abs(opened.mtime - written) < 5, \
        f"the log's last write read as {written - opened.mtime:.0f} s before it was written"


# ----------------------------------------------------------------------------------------------
# g. rotation and truncation while connected

def test_rotation_by_rename_while_connected(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    target = tmp_path / "server.log"
    rotated = tmp_path / "server.log.1"
    old_a = b"".join(numbered(i) for i in range(1, 501))
    old_b = b"".join(b"late " + numbered(i) for i in range(501, 601))  # written after the rename
    new = b"".join(b"new " + numbered(i) for i in range(1, 301))

    async def main() -> tuple[Collector, Follower]:
        source = make_source(server, target)
        follower = make_follower(source)
        async with collecting(source, follower) as col:
            old_writer = open(target, "ab")
            try:
                old_writer.write(old_a)
                old_writer.flush()
                await col.wait(lambda: col.next_offset == len(old_a), "the old file")
                os.rename(target, rotated)
                old_writer.write(old_b)          # the writer still holds the old file
                old_writer.flush()
                with open(target, "wb") as nf:
                    nf.write(new)
                await col.wait(lambda: len(col.files) == 2 and col.data() == new,
                               "the new file after the rotation")
            finally:
                old_writer.close()
        return col, follower

    col, follower = run(main())
    assert col.errors == []
    assert [(o.reason, o.offset) for o in col.opened()] == [("attach", 0), ("rotated", 0)]
    assert col.opened()[1].new_file
    assert col.data(0) == old_a + old_b      # drained to its end
    assert col.data(1) == new                # then the new one, from byte 0
    assert follower.status.gaps == 0 and follower.status.overlaps == 0
    assert follower.status.files == 2


@pytest.mark.parametrize("transport", ["stream", "sftp"])
def test_a_pattern_follows_each_new_launch_file_over_ssh(sshd_server: SSHServer, tmp_path: Path,
                                                         transport: str) -> None:
    """`ssh://host/logs/server-*.log` (sources/newest.py): the newest match, then each newer
    file a relaunch writes, the one before drained; an old file written again is never
    read again.  Through the streamed reader (dev:inode) and plain SFTP (names, seconds)."""
    server = sshd_server
    d = tmp_path / "logs"
    d.mkdir()
    now = time.time()
    (d / "server-1.log").write_bytes(b"launch 1 old\n")
    os.utime(d / "server-1.log", (now - 300, now - 300))
    second = b"".join(b"launch 2 " + numbered(i) for i in range(1, 201))
    (d / "server-2.log").write_bytes(second)
    os.utime(d / "server-2.log", (now - 100, now - 100))
    third = b"".join(b"launch 3 " + numbered(i) for i in range(1, 101))

    async def main() -> Collector:
        src = make_source(server, d / "server-*.log", rotate_wait=0.3,
                          options=ssh_opts(server, transport=transport))
        async with collecting(src) as col:
            await col.wait(lambda: col.data() == second, "the newest file at attach")
            (d / "server-3.log").write_bytes(third)
            await col.wait(lambda: len(col.files) == 2 and col.data() == third,
                           "the relaunch's file")
            with open(d / "server-2.log", "ab") as f:    # the old launch writes again
                f.write(b"launch 2 again\n")
            os.utime(d / "server-2.log", (now + 5, now + 5))
            with open(d / "server-3.log", "ab") as f:
                f.write(b"launch 3 more\n")
            await col.wait(lambda: col.data().endswith(b"launch 3 more\n"), "launch 3 goes on")
        return col

    col = run(main())
    assert col.errors == []
    assert [o.reason for o in col.opened()] == ["attach", "rotated"]
    assert col.data(0) == second and col.data(1) == third + b"launch 3 more\n"
    assert col.fatal() is None
    assert any(s.message == f"reading {d / 'server-3.log'} on 127.0.0.1" for s in col.states()), \
        col.states()


def test_a_pattern_over_sftp_follows_a_rename_rotation_that_reuses_the_name(
        sshd_server: SSHServer, tmp_path: Path) -> None:
    """SFTP tells no inode: the name is the file.  `server*.log` followed in server.log,
    which is renamed to server.log.1 and made again: the new server.log is read from byte 0
    after the old one is drained."""
    server = sshd_server
    target = tmp_path / "server.log"
    old = b"".join(numbered(i) for i in range(1, 301))
    new = b"".join(b"new " + numbered(i) for i in range(1, 101))
    target.write_bytes(old)

    async def main() -> Collector:
        async with collecting(make_source(server, tmp_path / "server*.log", rotate_wait=0.3,
                                          options=ssh_opts(server, transport="sftp"))) as col:
            await col.wait(lambda: col.data() == old, "the log")
            os.rename(target, tmp_path / "server.log.1")
            target.write_bytes(new)
            await col.wait(lambda: len(col.files) == 2 and col.data() == new, "the new file")
        return col

    col = run(main())
    assert col.errors == [] and col.data(0) == old


def test_a_pattern_over_a_directory_of_many_outputs(sshd_server: SSHServer,
                                                   tmp_path: Path) -> None:
    """A SLURM directory: 1,500 old outputs and the running job's.  The newest is found
    (the reader answers the 1,000 last modified in one request), and the next job's file,
    created later, is followed."""
    server = sshd_server
    d = tmp_path / "jobs"
    d.mkdir()
    old = time.time() - 86400
    for i in range(1500):
        (d / f"slurm-{i}.out").write_bytes(b"old job %d\n" % i)
        os.utime(d / f"slurm-{i}.out", (old + i, old + i))
    (d / "slurm-9999.out").write_bytes(b"the running job\n")
    nxt = b"".join(b"next job " + numbered(i) for i in range(1, 51))

    async def main() -> Collector:
        async with collecting(make_source(server, d / "slurm-*.out", rotate_wait=0.2,
                                          options=ssh_opts(server, transport="stream"))) as col:
            await col.wait(lambda: col.data() == b"the running job\n", "the running job")
            (d / "slurm-10000.out").write_bytes(nxt)
            await col.wait(lambda: len(col.files) == 2 and col.data() == nxt, "the next job")
        return col

    col = run(main())
    assert col.errors == [] and b"old job" not in b"".join(bytes(f[1]) for f in col.files)


def test_rotation_of_a_file_that_was_empty_at_attach(sshd_server: SSHServer,
                                                     tmp_path: Path) -> None:
    """A log created empty (`server > log`) and watched from then on, later rotated."""
    server = sshd_server
    target = tmp_path / "server.log"
    rotated = tmp_path / "server.log.1"
    target.write_bytes(b"")
    old = b"".join(numbered(i) for i in range(1, 201))
    new = b"".join(b"new " + numbered(i) for i in range(1, 101))

    async def main() -> Collector:
        async with collecting(make_source(server, target)) as col:
            await col.wait(lambda: bool(col.opened()), "the first Opened")
            with open(target, "ab") as f:
                f.write(old)
            await col.wait(lambda: col.next_offset == len(old), "the old content")
            os.rename(target, rotated)
            target.write_bytes(new)
            await col.wait(lambda: len(col.files) == 2 and col.data() == new,
                           "the new file after the rotation", timeout=10)
        return col

    col = run(main())
    assert [o.reason for o in col.opened()] == ["attach", "rotated"]
    assert col.data(0) == old and col.data(1) == new


def test_truncation_while_connected(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    target = tmp_path / "server.log"
    old = b"".join(numbered(i) for i in range(1, 1001))
    new = b"".join(b"after truncation " + numbered(i) for i in range(1, 101))
    assert len(new) < len(old)
    target.write_bytes(old)

    async def main() -> Collector:
        async with collecting(make_source(server, target)) as col:
            await col.wait(lambda: col.next_offset == len(old), "the old content")
            with open(target, "r+b") as f:     # copytruncate: truncate in place, write again
                f.truncate(0)
                f.write(new)
            await col.wait(lambda: len(col.files) == 2 and col.data() == new,
                           "the content written after the truncation")
        return col

    col = run(main())
    assert col.errors == []
    assert [(o.reason, o.offset) for o in col.opened()] == [("attach", 0), ("truncated", 0)]
    assert col.data(0) == old and col.data(1) == new


def test_truncation_then_rewrite_past_the_old_offset(sshd_server: SSHServer,
                                                     tmp_path: Path) -> None:
    """Truncated, then more than the old size written before the next poll (`> log` and a
    restart that prints a lot at once): still a new file read from byte 0."""
    server = sshd_server
    target = tmp_path / "server.log"
    old = b"".join(numbered(i) for i in range(1, 101))
    new = b"".join(b"after truncation " + numbered(i) for i in range(1, 301))
    assert len(new) > len(old)
    target.write_bytes(old)

    async def main() -> Collector:
        async with collecting(make_source(server, target)) as col:
            await col.wait(lambda: col.next_offset == len(old), "the old content")
            with open(target, "r+b") as f:
                f.truncate(0)
                f.write(new)
            await col.wait(lambda: col.next_offset == len(new) and len(col.files) == 2
                           and col.data() == new,
                           "the new content from byte 0", timeout=8)
        return col

    col = run(main())
    assert [(o.reason, o.offset) for o in col.opened()] == [("attach", 0), ("truncated", 0)]
    assert col.data(1) == new


def test_silent_connection_is_detected_by_keepalive(sshd_server: SSHServer,
                                                    tmp_path: Path) -> None:
    """The server side stops answering without closing the TCP connection (SIGSTOP): the
    keepalives notice, the source reconnects, and the bytes written meanwhile arrive once."""
    server = sshd_server
    target = tmp_path / "server.log"
    part1 = b"".join(numbered(i) for i in range(1, 101))
    part2 = b"".join(numbered(i) for i in range(101, 201))
    target.write_bytes(part1)
    options = ssh_opts(server, keepalive_interval=1.0, keepalive_count_max=2)

    async def main() -> Collector:
        async with collecting(make_source(server, target, options=options)) as col:
            try:
                await col.wait(lambda: col.next_offset == len(part1), "the first part")
                frozen = await asyncio.to_thread(server.freeze_sessions)
                assert frozen
                with open(target, "ab") as f:
                    f.write(part2)
                # 1 s x 2 unanswered keepalives, then a reconnect with backoff: well under 15 s
                await col.wait(lambda: col.next_offset == len(part1 + part2),
                               "the second part after the silent drop", timeout=15)
                # counted now: the kill below (the frozen processes' cleanup) may be seen as a
                # drop too before close() (the streamed reader notices a lost channel at once)
                reconnects.append(col.source.reconnects)
                opened.extend(col.opened())
            finally:
                await asyncio.to_thread(server.kill_sessions)
        return col

    reconnects: list[int] = []
    opened: list[Opened] = []
    col = run(main())
    assert col.errors == []
    assert col.data() == part1 + part2
    assert [o.reason for o in opened] == ["attach", "reconnected"]
    assert reconnects == [1]


# ----------------------------------------------------------------------------------------------
# h. one connection per host

def test_sources_on_one_host_share_a_connection(sshd_server: SSHServer, tmp_path: Path) -> None:
    server = sshd_server
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"a1\n")
    b.write_bytes(b"b1\n")
    pool = SSHPool()

    async def main() -> None:
        ca = Collector(make_source(server, a, pool=pool)).start()
        cb = Collector(make_source(server, b, pool=pool)).start()
        try:
            await ca.wait(lambda: ca.data() == b"a1\n", "a")
            await cb.wait(lambda: cb.data() == b"b1\n", "b")
            assert pool.connects == 1
            with open(a, "ab") as f:
                f.write(b"a2\n")
            with open(b, "ab") as f:
                f.write(b"b2\n")
            await ca.wait(lambda: ca.data() == b"a1\na2\n", "a2")
            await cb.wait(lambda: cb.data() == b"b1\nb2\n", "b2")
            assert pool.connects == 1

            # the connection drops: both come back, again on one shared connection
            assert await asyncio.to_thread(server.kill_sessions) > 0
            with open(a, "ab") as f:
                f.write(b"a3\n")
            with open(b, "ab") as f:
                f.write(b"b3\n")
            await ca.wait(lambda: ca.data() == b"a1\na2\na3\n", "a3 after the drop")
            await cb.wait(lambda: cb.data() == b"b1\nb2\nb3\n", "b3 after the drop")
            assert ca.source.reconnects == 1 and cb.source.reconnects == 1
            assert pool.connects == 2
            assert ca.errors == [] and cb.errors == []
        finally:
            await ca.stop()
            await cb.stop()
            await pool.close()

    run(main())


# ----------------------------------------------------------------------------------------------
# i. the CLI on a simulated server

def _watch_simulated(server: SSHServer, tmp_path: Path, *sim_args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    target = tmp_path / "sglang.log"
    target.write_bytes(b"")
    sim = subprocess.Popen([sys.executable, "-m", "logwatch.app.simulate", str(target),
                            "--speed", "0.05", *sim_args], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # no server behind the simulated log: the log's verdict (ready means answering where
        # a probe runs: tests/test_operator.py)
        res, took = cli("watch", server.url(target), "--known-hosts", str(server.known_hosts),
                        "-i", str(server.client_key), "--timeout", "45", "--probe", "off",
                        timeout=55)
    finally:
        try:
            sim.wait(timeout=30)
        finally:
            if sim.poll() is None:
                sim.kill()
                sim.wait()
    assert sim.returncode == 0, sim.stderr.read() if sim.stderr else sim.returncode
    return res, took


def test_cli_watch_ssh_until_ready(sshd_server: SSHServer, tmp_path: Path) -> None:
    res, took = _watch_simulated(sshd_server, tmp_path)
    assert res.returncode == 0, (res.returncode, res.stdout[-3000:], res.stderr[-3000:])
    assert "ready" in res.stdout.lower(), res.stdout


def test_cli_watch_ssh_crash_oom(sshd_server: SSHServer, tmp_path: Path) -> None:
    res, took = _watch_simulated(sshd_server, tmp_path, "--crash", "oom")
    assert res.returncode == 1, (res.returncode, res.stdout[-3000:], res.stderr[-3000:])
    assert "torch.OutOfMemoryError: CUDA out of memory" in res.stdout, res.stdout


def test_a_bastion_refused_on_a_proxyjump_is_named_never_the_node(sshd_server: SSHServer,
                                                                  tmp_path: Path) -> None:
    """`ssh://gpu-node/...` with `ProxyJump bastion` in the ssh config (a second real sshd),
    the node's key trusted, the bastion's not.  Before: "WARNING: the host key of gpu-node
    has CHANGED ... this may be a man-in-the-middle" (asyncssh opened the hop and its refusal
    was taken for the node's, whose known_hosts entry was found); a key the bastion refused
    was "SSH authentication to gpu-node failed".  Now the bastion is named, with its own
    host, port and known_hosts; trusted, the log is read through it."""
    node = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    bastion_kh = tmp_path / "bastion_known_hosts"
    bastion_kh.write_text("")
    with SSHServer(workdir=str(tmp_path / "bastion")) as bastion:
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            f"  User {bastion.user}", f"  IdentityFile {node.client_key}",
            f"  UserKnownHostsFile {bastion_kh}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            f"  User {node.user}", "  ProxyJump bastion", ""]))
        opts = SSHOptions(known_hosts=str(node.known_hosts), client_keys=(str(node.client_key),),
                          config=(str(cfg),))

        def fatal() -> str:
            return run(_fatal_of(SSHFileSource(f"ssh://gpu-node{log_file}", options=opts,
                                               pool=SSHPool())))[0].message

        msg = fatal()
        assert "CHANGED" not in msg and "man-in-the-middle" not in msg, msg
        assert "jump host bastion" in msg, msg
        assert f"ssh-keyscan -p {bastion.port} 127.0.0.1 >> {bastion_kh}" in msg, msg

        # the bastion's key trusted, ours not in its authorized_keys: its login is named
        bastion_kh.write_text(bastion.known_hosts_line() + "\n")
        msg = fatal()
        assert "jump host bastion" in msg and "SSH authentication to bastion failed" in msg, msg

        # let in: the log read through the bastion, one connection to it per node connection
        bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())

        async def through() -> tuple[bytes, int]:
            async with collecting(SSHFileSource(f"ssh://gpu-node{log_file}", options=opts,
                                                pool=SSHPool())) as col:
                await col.wait(lambda: col.data() == b"hello\n", "the log through the bastion")
                return col.data(), len(bastion.session_pids())
        data, sessions = run(through())
        assert data == b"hello\n" and sessions >= 1
        # closing the node's connection closed the bastion's too
        deadline = time.monotonic() + 10
        while bastion.session_pids() and time.monotonic() < deadline:
            time.sleep(POLL)
        assert not bastion.session_pids(), "the connection to the bastion was left open"


def test_host_keys_in_the_global_known_hosts_are_trusted_as_ssh_trusts_them(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No known_hosts option, nothing in ~/.ssh/known_hosts, the node's key in the global
    file (OpenSSH's /etc/ssh/ssh_known_hosts, where a fleet's keys are put for every user;
    here a file in tmp_path stands for it: the test does not write /etc).  Before: refused,
    "not trusted ... add it to ~/.ssh/known_hosts (ssh-keyscan ... >>)" while `ssh` took it;
    and a key the global file trusts another key for was not said CHANGED."""
    import logwatch.sources.ssh as ssh_mod
    server = sshd_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    fleet = tmp_path / "ssh_known_hosts"
    monkeypatch.setattr(ssh_mod, "GLOBAL_KNOWN_HOSTS", (str(fleet),), raising=False)
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    opts = SSHOptions(client_keys=(str(server.client_key),))

    # `ssh` itself takes the node's key from the global file (the reference)
    fleet.write_text(server.known_hosts_line() + "\n")
    ref = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes",
                          "-o", "StrictHostKeyChecking=yes",
                          "-o", f"UserKnownHostsFile={home}/.ssh/known_hosts",
                          "-o", f"GlobalKnownHostsFile={fleet}", "-i", str(server.client_key),
                          "-p", str(server.port), f"{server.user}@127.0.0.1", "true"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert ref.returncode == 0, ref.stderr

    async def read() -> bytes:
        async with collecting(make_source(server, log_file, options=opts)) as col:
            await col.wait(lambda: col.data() == b"hello\n" or col.fatal() is not None,
                           "the log, or a refusal")
            assert col.fatal() is None, col.fatal()
            return col.data()
    assert run(read()) == b"hello\n"

    # the global file trusts another key for the node: CHANGED, never the advice to append
    fleet.write_text(f"[127.0.0.1]:{server.port} {_other_host_key(tmp_path)}\n")
    msg = run(_fatal_of(make_source(server, log_file, options=opts)))[0].message
    assert "CHANGED" in msg and f"-f {fleet}" in msg and ">>" not in msg, msg


def test_a_host_block_of_the_system_ssh_config_applies_as_ssh_applies_it(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ssh://gpu-sys/...`, the alias's HostName, Port, User and IdentityFile only in the
    system-wide client config (OpenSSH's /etc/ssh/ssh_config, where a fleet's Host blocks
    often are; here a file in tmp_path stands for it: the test does not write /etc), none
    in ~/.ssh/config.  Before: "no such host: gpu-sys (a typo?)" while `ssh gpu-sys` worked.
    The user's config still comes first (its value wins), and a named config (`ssh -F`,
    --ssh-config) replaces both."""
    import logwatch.sources.sshfail as sshfail
    server = sshd_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    system = tmp_path / "ssh_config"
    system.write_text("\n".join(["Host gpu-sys", "  HostName 127.0.0.1", f"  Port {server.port}",
                                 f"  User {server.user}", f"  IdentityFile {server.client_key}",
                                 ""]))
    monkeypatch.setattr(sshfail, "SYSTEM_SSH_CONFIG", str(system), raising=False)
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    opts = SSHOptions(known_hosts=str(server.known_hosts))

    # `ssh` itself (its system config given with -F here: the reference)
    ref = subprocess.run(["ssh", "-F", str(system), "-o", "BatchMode=yes",
                          "-o", f"UserKnownHostsFile={server.known_hosts}", "gpu-sys", "true"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert ref.returncode == 0, ref.stderr

    async def read(source_opts: SSHOptions) -> tuple[bytes, SourceState | None]:
        return await _hello_or_failure(SSHFileSource(f"ssh://gpu-sys{log_file}",
                                                     options=source_opts, pool=SSHPool()))
    data, failed = run(read(opts))
    assert failed is None and data == b"hello\n", failed

    # the user's own block comes first: a wrong port there wins, as with ssh
    (home / ".ssh" / "config").write_text("Host gpu-sys\n  Port 1\n")
    data, failed = run(read(opts))
    assert failed is not None and "connection refused by gpu-sys" in failed.message, failed

    # a named config replaces both (`ssh -F`): the system's block is not read
    (home / ".ssh" / "config").write_text("")
    data, failed = run(read(replace(opts, config=(str(home / ".ssh" / "config"),))))
    assert failed is not None and "no such host: gpu-sys" in failed.message, failed


@pytest.mark.parametrize("transport", ["auto", "sftp"])
def test_an_ssh_config_made_for_interactive_logins_does_not_break_the_reads(
        sshd_server: SSHServer, tmp_path: Path, transport: str) -> None:
    """`RequestTTY force` and `RemoteCommand tmux new -A -s main` for the host in the ssh
    config (a shell that lands in tmux: made for `ssh host` by hand).  Before: every session
    got a pty, the streamed reader's greeting never matched (CRLF) and SFTP over the pty
    never answered: the source stayed "starting" for good, nothing said; over SFTP the
    RemoteCommand ran instead of the subsystem ("0 bytes read ...").  Now they are not
    applied to logwatch's sessions: the log is read either way, and a command asked with a
    terminal type (the GPU stream's) still gets its pty."""
    server = sshd_server
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host 127.0.0.1\n  RequestTTY force\n  RemoteCommand tmux new -A -s main\n")
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    opts = ssh_opts(server, config=(str(cfg),), transport=transport)

    async def read() -> tuple[bytes, bytes, str]:
        pool = SSHPool()
        async with collecting(make_source(server, log_file, pool=pool, options=opts)) as col:
            await col.wait(lambda: col.data() == b"hello\n", "the log", timeout=15)
            conn, _ = await pool.get(SSHTarget.parse(server.url(log_file)), opts)
            plain = await conn.run("tty", check=False)
            proc = await conn.create_process("tty", term_type="dumb", encoding=None)
            try:
                pty = await asyncio.wait_for(proc.stdout.read(100), 10)
            finally:
                proc.close()
            return col.data(), pty, str(plain.stdout)
    data, pty, plain = run(read())
    assert data == b"hello\n"
    assert pty.startswith(b"/dev/pts/") and plain.startswith("not a tty"), (pty, plain)


def test_forward_agent_in_the_ssh_config_does_not_hand_the_agent_to_the_node(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ForwardAgent yes` for the host (often under `Host *`) and the daemon's user with a
    running ssh-agent (a real one, holding a key).  Before: every session logwatch opened,
    the streamed reader's among them, had the agent forwarded: `ssh-add -l` on the node
    listed the key for as long as the node was watched.  Now nothing is forwarded (nothing
    logwatch runs needs it); the log is read as before."""
    server = sshd_server
    sock = tmp_path / "agent.sock"
    with ssh_agent(sock, [server.client_key]):
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        cfg = tmp_path / "ssh_config"
        cfg.write_text("Host *\n  ForwardAgent yes\n  ForwardX11 yes\n")
        log_file = tmp_path / "server.log"
        log_file.write_bytes(b"hello\n")
        opts = ssh_opts(server, config=(str(cfg),))

        async def node_sees() -> tuple[bytes, str]:
            pool = SSHPool()
            async with collecting(make_source(server, log_file, pool=pool, options=opts)) as col:
                await col.wait(lambda: col.data() == b"hello\n", "the log")
                conn, _ = await pool.get(SSHTarget.parse(server.url(log_file)), opts)
                seen = await conn.run("printenv SSH_AUTH_SOCK DISPLAY", check=False)
                return col.data(), str(seen.stdout)
        data, seen = run(node_sees())
        assert data == b"hello\n"
        assert seen.strip() == "", f"the node was handed {seen.strip()!r}"


def test_a_proxycommand_that_ends_is_named_not_a_bare_connection_lost(
        sshd_server: SSHServer, tmp_path: Path) -> None:
    """`ProxyCommand ssh -W %h:%p bastion` (the older way through a bastion; a second real
    sshd), the bastion's key not trusted by that ssh: it ends at once.  Before: "cannot
    connect: ConnectionLost: Connection lost", retried for ever, the command never named
    (what it said on stderr goes into asyncssh's connection, lost).  Now the ProxyCommand is
    named, to run by hand; trusted, the log is read through it."""
    node = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    bastion_kh = tmp_path / "bastion_known_hosts"
    bastion_kh.write_text("")
    with SSHServer(workdir=str(tmp_path / "bastion")) as bastion:
        bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            f"  User {bastion.user}", f"  IdentityFile {node.client_key}",
            f"  UserKnownHostsFile {bastion_kh}", "  BatchMode yes",
            "  StrictHostKeyChecking yes",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            f"  User {node.user}", f"  ProxyCommand ssh -F {cfg} -W %h:%p bastion", ""]))
        opts = SSHOptions(known_hosts=str(node.known_hosts), client_keys=(str(node.client_key),),
                          config=(str(cfg),))

        async def first() -> tuple[bytes, str]:
            data, failed = await _hello_or_failure(SSHFileSource(
                f"ssh://gpu-node{log_file}", options=opts, pool=SSHPool()))
            return data, failed.message if failed else ""
        data, msg = run(first())
        assert data == b"" and "ProxyCommand for gpu-node" in msg, msg
        assert f"-W 127.0.0.1:{node.port} bastion" in msg and "run it by hand" in msg, msg

        bastion_kh.write_text(bastion.known_hosts_line() + "\n")
        data, msg = run(first())
        assert data == b"hello\n" and msg == "", msg


def test_an_identity_file_that_does_not_exist_is_skipped_as_ssh_skips_it(
        sshd_server: SSHServer, tmp_path: Path) -> None:
    """`Host *` naming two keys (`IdentityFile ~/.ssh/id_work`, then the one that exists:
    a config copied from a laptop, or the system config's defaults) and a certificate that
    does not exist either, for the node and for its bastion (a second real sshd).  `ssh` skips the missing one ("no such identity") and
    logs in.  Before: asyncssh read every IdentityFile and raised FileNotFoundError: "cannot
    connect: FileNotFoundError: ... id_work", retried for ever, the log never read (the
    bastion's the same, said for the bastion)."""
    node = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    missing = tmp_path / "id_work"
    with bastion_for(node, tmp_path) as (bastion, kh):
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            "Host gpu-behind", "  HostName 127.0.0.1", f"  Port {node.port}",
            "  ProxyJump bastion",
            "Host *", f"  User {node.user}", f"  IdentityFile {missing}",
            f"  IdentityFile {node.client_key}", f"  UserKnownHostsFile {kh}",
            f"  CertificateFile {tmp_path / 'id_work-cert.pub'}",
            "  BatchMode yes", "  StrictHostKeyChecking yes", ""]))
        # `ssh` itself logs in with that config (the reference)
        ssh_reads_it(cfg)

        for host in ("gpu-node", "gpu-behind"):
            data, msg = read_hello(cfg, log_file, host)
            assert data == b"hello\n" and msg == "", (host, msg)


def test_a_refused_connection_names_the_address_the_ssh_config_gave(tmp_path: Path) -> None:
    """`ssh://gpu-node/...` whose Host block says HostName 127.0.0.1 and Port P (nothing
    listens there), and the same for its bastion (ProxyJump).  `ssh` says "connect to host
    127.0.0.1 port P: Connection refused".  Before: "connection refused by gpu-node:22" and
    "through the jump host bastion ...: connection refused by bastion:22": a port never
    tried, the operator sent to look at port 22."""
    with socket.socket() as s:        # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    cfg = tmp_path / "ssh_config"
    cfg.write_text("\n".join([
        "Host bastion", "  HostName 127.0.0.1", f"  Port {closed}",
        "Host gpu-node", "  HostName 127.0.0.1", f"  Port {closed}",
        "Host gpu-behind", "  HostName 127.0.0.1", "  Port 22", "  ProxyJump bastion",
        "Host *", "  BatchMode yes", ""]))
    ref = subprocess.run(["ssh", "-F", str(cfg), "gpu-node", "true"], capture_output=True,
                         text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert f"127.0.0.1 port {closed}: Connection refused" in ref.stderr, ref.stderr

    async def said(host: str) -> str:
        return (await _first_failure(SSHFileSource(f"ssh://{host}/srv/server.log",
                                                   options=SSHOptions(config=(str(cfg),)),
                                                   pool=SSHPool()))).message
    msg = run(said("gpu-node"))
    assert f"connection refused by gpu-node (127.0.0.1:{closed})" in msg, msg
    msg = run(said("gpu-behind"))
    assert "jump host bastion" in msg, msg
    assert f"connection refused by bastion (127.0.0.1:{closed})" in msg, msg


def test_a_proxyjump_written_as_an_ssh_uri_is_taken(sshd_server: SSHServer,
                                                    tmp_path: Path) -> None:
    """`ProxyJump ssh://user@127.0.0.1:P` (OpenSSH takes a jump host as [user@]host[:port]
    or as an ssh URI; a second real sshd is the bastion).  Before: the user "ssh://user"
    and "SSH authentication to 127.0.0.1 failed (Permission denied for user ssh://root ...)",
    fatal; `ssh` went through."""
    node = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    with bastion_for(node, tmp_path) as (bastion, kh):
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            f"  ProxyJump ssh://{bastion.user}@127.0.0.1:{bastion.port}",
            "Host *", f"  User {node.user}", f"  IdentityFile {node.client_key}",
            f"  UserKnownHostsFile {kh}", "  BatchMode yes", ""]))
        ssh_reads_it(cfg)

        data, msg = read_hello(cfg, log_file)
        assert data == b"hello\n" and msg == "", msg


def test_a_proxycommand_before_a_proxyjump_wins_as_with_ssh(sshd_server: SSHServer,
                                                            tmp_path: Path) -> None:
    """The node's Host block says `ProxyCommand ssh -W %h:%p bastion` (a second real sshd),
    and a `Host *` default after it says `ProxyJump jump.invalid` (the fleet's usual way).
    `ssh` takes whichever of the two comes first (`ssh -G` shows only the ProxyCommand)
    and goes through the bastion; the same for a bastion reached by its own ProxyCommand.
    Before: asyncssh's order, the ProxyJump always, here a way `ssh` never takes (through
    jump.invalid, whose own `Host *` ProxyJump is itself: a RecursionError that ended the
    source with nothing said)."""
    node = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    with bastion_for(node, tmp_path) as (bastion, kh):
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "  ProxyJump none",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            f"  ProxyCommand ssh -F {cfg} -W %h:%p bastion",
            # a bastion reached by its own ProxyCommand, the node by ProxyJump through it
            "Host hop-pc", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            f"  ProxyCommand ssh -F {cfg} -W %h:%p bastion",
            "Host gpu-behind", "  HostName 127.0.0.1", f"  Port {node.port}",
            "  ProxyJump hop-pc",
            "Host *", "  ProxyJump jump.invalid", f"  User {node.user}",
            f"  IdentityFile {node.client_key}", f"  UserKnownHostsFile {kh}",
            "  BatchMode yes", ""]))
        for host in ("gpu-node", "gpu-behind"):
            ssh_reads_it(cfg, host)

        for host in ("gpu-node", "gpu-behind"):
            data, msg = read_hello(cfg, log_file, host)
            assert data == b"hello\n" and msg == "", (host, msg)


def test_a_proxyjump_that_leads_back_to_its_jump_host_is_said(tmp_path: Path) -> None:
    """`Host * ProxyJump bastion` with no `ProxyJump none` in the bastion's own block: the
    jump host jumps through itself (`ssh -v` shows it running `ssh -W ... bastion` again and
    again).  Before: asyncssh recursed, "failed: RecursionError('maximum recursion depth
    exceeded')" and the target ended; now the loop is said, with its fix, once (fatal)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    cfg = tmp_path / "ssh_config"
    cfg.write_text("\n".join([
        "Host bastion", "  HostName 127.0.0.1", f"  Port {closed}",
        "Host gpu-node", "  HostName 127.0.0.1", f"  Port {closed}",
        "Host *", "  ProxyJump bastion", ""]))
    fatal, _ = run(_fatal_of(SSHFileSource("ssh://gpu-node/srv/server.log", options=SSHOptions(
        config=(str(cfg),)), pool=SSHPool())))
    assert "RecursionError" not in fatal.message, fatal.message
    assert "jump host bastion" in fatal.message, fatal.message
    assert "leads back to itself" in fatal.message and "ProxyJump none" in fatal.message, \
        fatal.message


def test_the_ssh_config_is_read_once_per_connection_as_ssh_reads_it(sshd_server: SSHServer,
                                                                    tmp_path: Path) -> None:
    """A `Match exec` in the ssh config counts the reads of it (each runs the command, as
    `ssh` runs it): `ssh` reads it once for a node, twice through a bastion (the jump's own
    ssh).  Before: twice and four times (logwatch read it on the event loop, then asyncssh
    again; the same per hop): an ssh config of 8,000 Host blocks, 0.3 s a read, took 15.5 s
    to bring 40 targets up where it took 8.5 s."""
    node = sshd_server
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    runs = tmp_path / "exec.runs"
    with bastion_for(node, tmp_path) as (bastion, kh):
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            f'Match exec "echo run >> {runs}"',
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            "Host gpu-behind", "  HostName 127.0.0.1", f"  Port {node.port}",
            "  ProxyJump bastion",
            "Host *", f"  User {node.user}", f"  IdentityFile {node.client_key}",
            f"  UserKnownHostsFile {kh}", "  BatchMode yes", ""]))

        def reads() -> int:
            n = len(runs.read_text().splitlines()) if runs.exists() else 0
            runs.unlink(missing_ok=True)
            return n

        for host, by_ssh in (("gpu-node", 1), ("gpu-behind", 2)):
            ssh_reads_it(cfg, host)
            assert reads() == by_ssh, host
            data, msg = read_hello(cfg, log_file, host)
            assert data == b"hello\n" and msg == "", (host, msg)
            assert reads() == by_ssh, host


def test_a_bastion_that_does_not_forward_is_named_with_why(sshd_server: SSHServer,
                                                           tmp_path: Path) -> None:
    """`ProxyJump bastion`, the login to the bastion accepted, but its sshd has
    `AllowTcpForwarding no` (a hardened bastion; a second real sshd): ssh says "channel 0:
    open failed: administratively prohibited ... stdio forwarding failed".  Before: "cannot
    connect: ChannelOpenError: open failed; retrying", for ever, neither the bastion nor the
    cause named.  Now the bastion is named, with its sshd's setting, once (fatal); and a
    node that the bastion cannot reach (nothing on its port) is said as that, retried."""
    node = sshd_server
    with SSHServer(workdir=str(tmp_path / "bastion"), forwarding=False) as bastion:
        bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
        kh = tmp_path / "known_hosts"
        kh.write_text(node.known_hosts_line() + "\n" + bastion.known_hosts_line() + "\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            "  ProxyJump bastion",
            "Host *", f"  User {node.user}", f"  IdentityFile {node.client_key}",
            f"  UserKnownHostsFile {kh}", "  BatchMode yes", ""]))
        ref = subprocess.run(["ssh", "-F", str(cfg), "gpu-node", "true"], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert ref.returncode != 0 and "administratively prohibited" in ref.stderr, ref.stderr
        fatal, _ = run(_fatal_of(SSHFileSource("ssh://gpu-node/srv/server.log",
                                               options=SSHOptions(config=(str(cfg),)),
                                               pool=SSHPool())))
        assert "jump host bastion" in fatal.message, fatal.message
        assert "AllowTcpForwarding" in fatal.message, fatal.message
        assert f"gpu-node (127.0.0.1:{node.port})" in fatal.message, fatal.message

    with SSHServer(workdir=str(tmp_path / "bastion2")) as bastion:
        bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
        kh.write_text(bastion.known_hosts_line() + "\n")
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {closed}", "  ProxyJump bastion",
            "Host *", f"  User {node.user}", f"  IdentityFile {node.client_key}",
            f"  UserKnownHostsFile {kh}", "  BatchMode yes", ""]))

        state = run(_first_failure(SSHFileSource("ssh://gpu-node/srv/server.log",
                                                 options=SSHOptions(config=(str(cfg),)),
                                                 pool=SSHPool())))
        assert not state.fatal and "jump host bastion" in state.message, state
        assert f"could not connect to gpu-node (127.0.0.1:{closed})" in state.message, state


def test_identity_agent_ssh_auth_sock_is_the_agent_that_variable_names(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`IdentityAgent SSH_AUTH_SOCK` for the node, before a `Host *` naming another agent
    (1Password's socket, here gone): OpenSSH reads the agent's socket from SSH_AUTH_SOCK (a
    real ssh-agent holding the key), and logs in.  Before: asyncssh took the words as a
    path, offered no agent key, and af60db6 said "the ssh config's IdentityAgent names
    SSH_AUTH_SOCK, which is gone (the agent ended)" of a running agent."""
    server = sshd_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))       # no key of its own: the agent's only
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    sock = tmp_path / "agent.sock"
    with ssh_agent(sock, [server.client_key]):
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {server.port}",
            "  IdentityAgent SSH_AUTH_SOCK",
            "Host *", f"  IdentityAgent {tmp_path / '1password' / 'agent.sock'}",
            f"  User {server.user}", f"  UserKnownHostsFile {server.known_hosts}",
            "  BatchMode yes", ""]))
        ssh_reads_it(cfg)

        data, msg = read_hello(cfg, log_file)
        assert data == b"hello\n" and msg == "", msg


def test_a_bastion_login_refused_is_not_told_to_use_the_nodes_key_option(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-i KEY` names the node's key; the bastion (ProxyJump, a second real sshd) takes the
    same key, which its Host block does not name, and there is no agent: `ssh -i KEY -J`
    does not give -i to the jump either.  Before: "through the jump host bastion ...: no key
    was offered ... Give a key file (-i / ssh.client_keys)", the option already given, which
    names the node's keys only.  Now the bastion's own Host block (IdentityFile) is said."""
    node = sshd_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with bastion_for(node, tmp_path) as (bastion, kh):
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            "  ProxyJump bastion",
            "Host *", f"  User {node.user}", f"  UserKnownHostsFile {kh}", ""]))
        fatal, _ = run(_fatal_of(SSHFileSource(
            "ssh://gpu-node/srv/server.log", options=SSHOptions(
                config=(str(cfg),), client_keys=(str(node.client_key),)), pool=SSHPool())))
        msg = fatal.message
        assert "jump host bastion" in msg and "SSH authentication to bastion failed" in msg, msg
        assert "-i / ssh.client_keys)" not in msg and "--ssh-key" not in msg, msg
        assert "IdentityFile" in msg and "Host block" in msg, msg


def test_too_many_keys_is_a_refused_login_not_retried(sshd_server: SSHServer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An ssh-agent holding 7 other keys (a real one; sshd's MaxAuthTries is 6), the node's
    key named by its IdentityFile only: sshd ends each login with "Too many authentication
    failures", as `ssh` sees it too.  Before: retried with the backoff, for ever, each try
    6 more failed logins in the node's auth.log (6 tries in 20 s: fail2ban's sshd jail,
    maxretry 5, bans the daemon's address, and every target on that host with it), where a
    refused key (PermissionDenied) stops at once.  Now it stops the same way, with its fix."""
    server = sshd_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    sock = tmp_path / "agent.sock"
    with ssh_agent(sock, [keygen(tmp_path / f"other{i}") for i in range(7)]):
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {server.port}",
            f"  IdentityFile {server.client_key}", f"  User {server.user}", ""]))
        fatal, _ = run(_fatal_of(SSHFileSource("ssh://gpu-node/srv/server.log", options=SSHOptions(
            known_hosts=str(server.known_hosts), config=(str(cfg),)), pool=SSHPool())))
        assert "Too many authentication failures" in fatal.message, fatal.message
        assert "IdentitiesOnly yes" in fatal.message, fatal.message


def test_a_bastion_in_the_global_known_hosts_is_trusted_beside_a_nodes_known_hosts(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--known-hosts FILE` holding the node's key (the option is the node's), the bastion's
    key in the global known_hosts (/etc/ssh/ssh_known_hosts, where configuration management
    puts a fleet's keys; a file in tmp_path stands for it), nothing in ~/.ssh/known_hosts:
    the jump's own `ssh` trusts the bastion from the global file.  Before: the hop was checked
    without the global file, refused, and the explanation, which looks there, said "WARNING:
    the host key of bastion has CHANGED ... this may be a man-in-the-middle" of the very key
    the server presented."""
    import logwatch.sources.ssh as ssh_mod
    node = sshd_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    log_file = tmp_path / "server.log"
    log_file.write_bytes(b"hello\n")
    with SSHServer(workdir=str(tmp_path / "bastion")) as bastion:
        bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
        fleet = tmp_path / "ssh_known_hosts"
        fleet.write_text(bastion.known_hosts_line() + "\n")
        monkeypatch.setattr(ssh_mod, "GLOBAL_KNOWN_HOSTS", (str(fleet),), raising=False)
        cfg = tmp_path / "ssh_config"
        cfg.write_text("\n".join([
            "Host bastion", "  HostName 127.0.0.1", f"  Port {bastion.port}",
            "Host gpu-node", "  HostName 127.0.0.1", f"  Port {node.port}",
            "  ProxyJump bastion",
            "Host *", f"  User {node.user}", f"  IdentityFile {node.client_key}", ""]))

        data, failed = run(_hello_or_failure(SSHFileSource(
            f"ssh://gpu-node{log_file}", options=SSHOptions(
                known_hosts=str(node.known_hosts), config=(str(cfg),)), pool=SSHPool())))
        msg = failed.message if failed else ""
        assert "CHANGED" not in msg and data == b"hello\n" and msg == "", msg


def ssh_reads_it(cfg: Path, host: str = "gpu-node") -> None:
    """OpenSSH itself logs in to `host` with this config: the reference each case meets."""
    ref = subprocess.run(["ssh", "-F", str(cfg), host, "true"], capture_output=True,
                         text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert ref.returncode == 0, ref.stderr


def read_hello(cfg: Path, log_file: Path, host: str = "gpu-node") -> tuple[bytes, str]:
    """`ssh://HOST/LOG` read through the ssh config `cfg` until its `hello` line or a
    failure: what came, and the failure's message ("" for none)."""
    data, failed = run(_hello_or_failure(SSHFileSource(
        f"ssh://{host}{log_file}", options=SSHOptions(config=(str(cfg),)), pool=SSHPool())))
    return data, failed.message if failed else ""


@contextlib.contextmanager
def bastion_for(node: SSHServer, tmp_path: Path) -> Iterator[tuple[SSHServer, Path]]:
    """A second real sshd as the node's jump host: it takes the node's client key, and a
    known_hosts file trusts both hosts."""
    with SSHServer(workdir=str(tmp_path / "bastion")) as bastion:
        bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
        kh = tmp_path / "known_hosts"
        kh.write_text(node.known_hosts_line() + "\n" + bastion.known_hosts_line() + "\n")
        yield bastion, kh
