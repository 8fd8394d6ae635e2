"""nvidia-smi as a process: one interface (`Proc`: read, kill, wait) for a local child in its
own process group and a session on the host's pooled SSH connection, and `spawn`, which
starts one of them.  Only I/O: what a run's end means is decided in run.py."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from typing import Any

import asyncssh

from ...sources.ssh import SSHOptions, SSHPool, SSHTarget

class Missing(Exception):
    """The command does not exist where it should run."""


class Proc:
    pid: int | None = None

    async def read(self, n: int) -> bytes:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    async def wait(self) -> int | None:
        raise NotImplementedError


class LocalProc(Proc):
    """A child in its own process group: a wrapper script's children die with it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid = proc.pid

    @classmethod
    async def start(cls, argv: list[str]) -> "LocalProc":
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except FileNotFoundError as e:
            raise Missing(argv[0]) from e
        return cls(proc)

    async def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.read(n)

    def kill(self) -> None:
        if self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    async def wait(self) -> int | None:
        return await self.proc.wait()


class RemoteProc(Proc):
    """A session on the host's shared connection, on a pseudo-terminal when the server allows
    one.  Why a pty: closing a session does not signal a command that is only blocked (a hung
    nvidia-smi would stay on the host, one more per restart), but closing its pty hangs the
    terminal up and the kernel sends SIGHUP to the command.  The `signal` channel request
    is sent first (SIGKILL also ends a command that ignores SIGHUP), but sshd refuses it for
    root logins ("session signalling requires privilege separation"), so it cannot be the
    only way.  The pty's CRLF line ends are read like LF."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._killed = False

    async def read(self, n: int) -> bytes:
        data: bytes = await self.proc.stdout.read(n)
        return data

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        if self.proc.exit_status is None and self.proc.exit_signal is None:
            try:
                self.proc.send_signal("KILL")
            except (OSError, asyncssh.Error, ValueError):
                pass
        try:
            self.proc.close()
        except (OSError, asyncssh.Error):
            pass

    async def wait(self) -> int | None:
        await self.proc.wait_closed()
        code = self.proc.returncode
        return int(code) if code is not None else None




async def spawn(argv: list[str], ssh: tuple[SSHTarget, SSHOptions] | None, pool: SSHPool | None,
                pty: bool, logger: Any) -> tuple[Proc, bool]:
    """Start `argv` here (ssh None) or as a session on the host's pooled connection; returns
    the process and whether a pty is still worth asking for (False once the server refused
    one: PermitTTY no, and a hung command may then outlive its session)."""
    if ssh is None:
        return await LocalProc.start(argv), pty
    assert pool is not None
    target, opts = ssh
    conn, _ = await pool.get(target, opts)
    command = shlex.join(argv)
    if pty:
        try:
            # stdin stays an open pipe that is never written: EOF on a pty is a ^D
            return RemoteProc(await conn.create_process(
                command, term_type="dumb", stderr=asyncssh.STDOUT, encoding=None)), True
        except asyncssh.ChannelOpenError as e:
            if "PTY" not in str(e.reason):
                raise
            logger.info("gpu: the server refuses a pty; a hung nvidia-smi can only be "
                        "signalled", reason=e.reason)
    return RemoteProc(await conn.create_process(
        command, stdin=asyncssh.DEVNULL, stderr=asyncssh.STDOUT, encoding=None)), False
