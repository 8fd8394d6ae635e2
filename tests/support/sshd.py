"""A real OpenSSH server on 127.0.0.1 for the SSH source tests.

`SSHServer` runs `/usr/sbin/sshd -D -e -f CONFIG` on a free loopback port with throwaway keys
made by `ssh-keygen` (an ed25519 host key and an ed25519 user key), key authentication only,
and SFTP served by `internal-sftp`.  The tests drop connections by killing the per-connection
sshd processes (the listener's descendants) and restart the listener on the same port with
the same keys.  Nothing is installed here: `.ci/run` installs openssh-server.

Use the `sshd_server` fixture (import it into the test module: `from support.sshd import sshd_server`).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
START_TIMEOUT = 15.0


def _clear_stale_pyenv_lock() -> None:
    """The sessions of this sshd run the user's shell, and on machines whose ~/.bashrc runs
    `pyenv init` every `bash -c` takes pyenv's rehash lock (~/.pyenv/shims/.pyenv-shim).  A
    session killed at that moment (the tests kill sessions on purpose) leaves the lock behind,
    and then every later session waits 60 s for it: a machine fault, not the project's.  A
    lock older than a minute is stale (pyenv itself gives up after 60 s)."""
    lock = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "shims" / ".pyenv-shim"
    try:
        if time.time() - lock.stat().st_mtime > 60:
            lock.unlink()
    except OSError:
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc, `ps --ppid` as a fallback)."""
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    try:
        for task in task_dir.iterdir():
            try:
                kids += [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                pass
        return kids
    except OSError:
        pass
    res = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in res.stdout.split() if x.isdigit()]


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = _children(pid)
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.append(p)
        todo += _children(p)
    return out


def _kill(pid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


class SSHServer:
    """An sshd on 127.0.0.1:`port`.  `start()` / `stop()` / `restart()` / `kill_sessions()`."""

    def __init__(self, workdir: str | None = None, sftp: str | None = "internal-sftp",
                 max_sessions: int = 200, python: bool = True,
                 bashrc: str | None = None, shell: str | None = None,
                 force_command: str | None = None, forwarding: bool = True) -> None:
        """`sftp`: the Subsystem line's command (None: no SFTP subsystem, as on some hardened
        hosts where a shell works and file transfer does not).  `max_sessions`: sshd's
        MaxSessions (OpenSSH's default is 10).  `python=False`: the sessions' commands run
        with a PATH that has no python3 (a node without Python; a ForceCommand wrapper).
        `bashrc`: the sessions' ~/.bashrc (bash runs it for every command sshd starts: a
        conda / pyenv init that takes 0.3 s on many GPU nodes); each run appends a line to
        `bashrc_runs` so a test counts them.  `shell`: the login shell the commands run
        under (`/usr/bin/tcsh`: sshd runs `SHELL -c COMMAND`; played by a ForceCommand).
        `force_command`: sshd's ForceCommand (`internal-sftp`: an account for file transfer
        only, which refuses every command).  `forwarding=False`: `AllowTcpForwarding no`
        (hardened nodes: no direct-tcpip channel, the probe's way to the server)."""
        # a directory of its own, world-readable (0755): when sshd runs as root it reads
        # AuthorizedKeysFile as the logging-in user, who may be a non-root test user
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="logwatch-sshd-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        self.user = getpass.getuser()
        self.port = _free_port()
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.client_key = self.dir / "id_ed25519"
        self.authorized_keys = self.dir / "authorized_keys"
        self.known_hosts = self.dir / "known_hosts"
        self.config = self.dir / "sshd_config"
        self.pid_file = self.dir / "sshd.pid"
        self.log_file = self.dir / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = None
        self.sftp = sftp
        self.max_sessions = max_sessions
        self.python = python
        self.shell = shell
        self.force_command = force_command
        self.forwarding = forwarding
        self.bashrc_runs = self.dir / "bashrc.runs"
        if bashrc is not None:
            (self.dir / ".bashrc").write_text(f"echo run >> {self.bashrc_runs}\n{bashrc}\n")
        self._keygen()
        self._write_config()

    # ------------------------------------------------------------------ setup

    def _keygen(self) -> None:
        for path, comment in ((self.host_key, "logwatch-test-host"),
                              (self.client_key, "logwatch-test-user")):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                            "-f", str(path)], check=True, capture_output=True, timeout=30)
        self.authorized_keys.write_text((self.client_key.with_suffix(".pub")).read_text())
        self.authorized_keys.chmod(0o644)
        self.known_hosts.write_text(self.known_hosts_line() + "\n")

    def host_public_key(self) -> str:
        """`ssh-ed25519 AAAA...` (without the comment)."""
        kind, blob = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"{kind} {blob}"

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_public_key()}"

    def _no_python_wrapper(self) -> Path:
        """A ForceCommand that runs each command with PATH = a folder holding sh and the few
        tools logwatch may run (not python3); SFTP still works (sftp-server, not internal)."""
        bin_dir = self.dir / "nopython-bin"
        bin_dir.mkdir(exist_ok=True)
        for tool in ("sh", "grep", "tail", "cat", "sleep", "env"):
            found = shutil.which(tool, path="/usr/bin:/bin")
            if found and not (bin_dir / tool).exists():
                (bin_dir / tool).symlink_to(found)
        wrapper = self.dir / "nopython.sh"
        wrapper.write_text("#!/bin/sh\n"
                           f'case "$SSH_ORIGINAL_COMMAND" in {SFTP_SERVER}) exec {SFTP_SERVER};; esac\n'
                           f"PATH={bin_dir}; export PATH\n"
                           'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
        wrapper.chmod(0o755)
        return wrapper

    def _shell_wrapper(self) -> Path:
        """A ForceCommand running each command as `SHELL -c COMMAND`, as sshd does with a
        user whose login shell is SHELL; SFTP still works (sftp-server, not internal)."""
        wrapper = self.dir / "shell.sh"
        wrapper.write_text("#!/bin/sh\n"
                           f'case "$SSH_ORIGINAL_COMMAND" in {SFTP_SERVER}) exec {SFTP_SERVER};; esac\n'
                           f'exec {self.shell} -c "$SSH_ORIGINAL_COMMAND"\n')
        wrapper.chmod(0o755)
        return wrapper

    def _write_config(self) -> None:
        sftp = self.sftp
        force = ""
        if self.shell is not None:
            force = f"ForceCommand {self._shell_wrapper()}"
            if sftp == "internal-sftp":
                sftp = SFTP_SERVER
        if not self.python:
            force = f"ForceCommand {self._no_python_wrapper()}"
            if sftp == "internal-sftp":
                sftp = SFTP_SERVER   # internal-sftp would not pass through the wrapper
        if self.force_command:
            force = f"ForceCommand {self.force_command}"
        self.config.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.pid_file}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            f"Subsystem sftp {sftp}" if sftp else "",
            force,
            "" if self.forwarding else "AllowTcpForwarding no",
            # the sessions' HOME is this folder: the user's own ~/.bashrc is not run by every
            # command (pyenv's rehash lock there, left by a killed session, made every later
            # session wait 60 s; the streamed reader runs a command per connection)
            f"SetEnv HOME={self.dir}",
            "MaxStartups 200",
            f"MaxSessions {self.max_sessions}",
            "LogLevel ERROR",
            "UseDNS no",
            "PrintMotd no",
            "",
        ]))

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        _clear_stale_pyenv_lock()
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        self._log = open(self.log_file, "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)],
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: "
                                   f"{self.log_file.read_text(errors='replace')[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                    s.settimeout(2.0)
                    if s.recv(64).startswith(b"SSH-"):  # the banner: it really is our sshd
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port} within "
                                   f"{START_TIMEOUT}s: {self.log_file.read_text(errors='replace')}")
            time.sleep(0.02)  # poll interval (the wait itself is bounded by the deadline)

    def session_pids(self) -> list[int]:
        """Every process serving a connection: the listener's descendants."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        return _descendants(self.proc.pid)

    def kill_sessions(self) -> int:
        """SIGKILL every per-connection process (the TCP connections drop); returns how many."""
        n = 0
        # the listener may fork between two looks: repeat until no child is left
        for _ in range(5):
            pids = self.session_pids()
            if not pids:
                break
            for pid in pids:
                n += _kill(pid)
            self._reap_wait(pids)
        return n

    def freeze_sessions(self) -> list[int]:
        """SIGSTOP every per-connection process: the TCP connections stay open but nothing
        answers (a hung host, a dead network path).  `kill_sessions()` ends them."""
        pids = self.session_pids()
        for pid in pids:
            _kill(pid, signal.SIGSTOP)
        return pids

    def _reap_wait(self, pids: list[int], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        live = set(pids)
        while live and time.monotonic() < deadline:
            for pid in list(live):
                try:
                    st = Path(f"/proc/{pid}/stat").read_text()
                    if st.rsplit(")", 1)[1].split()[0] == "Z":  # zombie: dead, parent reaps it
                        live.discard(pid)
                except (OSError, IndexError):
                    live.discard(pid)
            if live:
                time.sleep(0.01)

    def stop(self) -> None:
        """Kill the listener and every connection."""
        if self.proc is None:
            return
        sessions = self.session_pids()
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for pid in sessions:
            _kill(pid)
        self._reap_wait(sessions)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        """Kill sshd (listener and connections) and start it again: same port, same keys."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "SSHServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def url(self, path: str | os.PathLike[str], user: str | None = None) -> str:
        return f"ssh://{user or self.user}@127.0.0.1:{self.port}{os.fspath(path)}"


@pytest.fixture
def sshd_server() -> Iterator[SSHServer]:
    if not os.path.exists(SSHD):
        raise RuntimeError(f"{SSHD} is missing: install openssh-server (.ci/run does)")
    server = SSHServer()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def keygen(path: Path) -> Path:
    """A throwaway ed25519 key pair without a passphrase at `path` (and `path`.pub)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


@contextlib.contextmanager
def ssh_agent(sock: Path, keys: Sequence[Path] = ()) -> Iterator[Path]:
    """A real ssh-agent listening on `sock`, holding `keys` (ssh-add), killed at exit.  The
    test points SSH_AUTH_SOCK at `sock` where the daemon or ssh is to find it."""
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert time.monotonic() < deadline and agent.poll() is None, "no ssh-agent"
            time.sleep(0.02)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        for key in keys:
            subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True,
                           capture_output=True, timeout=30)
        yield sock
    finally:
        agent.kill()
        agent.wait(timeout=10)
