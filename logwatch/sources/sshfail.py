"""Why an SSH target cannot be read until someone changes something: the fatal causes.

A fatal cause stops the target with one message saying what to change (tried again on
SIGHUP and on a slow timer), where a transient one (a host down, a dropped connection) is
retried with backoff.  Each class here is one cause the pool or a source finds; `explain`
in ssh.py words them.  The GPU stream on the same host waits quietly on them: the log
target's own source says the cause once.

Files the options name (`client_keys`, `known_hosts`, `config`) are checked here before a
connection is tried: asyncssh raises a bare FileNotFoundError (retried for ever, as if the
host were down) or a KeyImportError (which took the target down with a traceback) for them,
and its "Invalid known hosts entry: ..." quotes the file's bytes (a private key given as
known_hosts would be printed).  The checks run on the daemon's machine, at connect time, not
at `--check`: a config is often checked where its key files do not exist (CI, a pod's
secret mount).
"""

from __future__ import annotations

import getpass
import os
import stat
from functools import lru_cache
from typing import Iterator

import asyncssh
from asyncssh.config import SSHClientConfig

# the option, the flag of `logwatch watch` that sets it
SSH_FILE_OPTIONS = {"client_keys": "-i", "known_hosts": "--known-hosts",
                    "config": "--ssh-config"}


class FatalSSH(Exception):
    """A cause that retrying does not cure."""


class NoSFTPSubsystem(FatalSSH):
    """The server opened a session and refused its `sftp` subsystem (sshd_config without a
    `Subsystem sftp` line): a shell works, reading files by offset does not (the streamed
    reader did not start either: `no_stream` says why, None when it was not tried)."""

    def __init__(self, host: str, no_stream: str | None = None) -> None:
        super().__init__(host)
        self.host = host
        self.no_stream = no_stream


class SFTPNotClean(FatalSSH):
    """SFTP's first reply was not SFTP: the login shell printed text before it (`printed`,
    what a bare command's session prints, "" when it could not be read)."""

    def __init__(self, host: str, printed: str, no_stream: str | None = None) -> None:
        super().__init__(host, printed)
        self.host = host
        self.printed = printed
        self.no_stream = no_stream


READER_ENDED = "the remote reader ended"     # sshstream.ExecFS._lost's words


class SFTPEnded(OSError):
    """The SFTP subsystem ended before its first reply on a connection still up, after the
    streamed reader ended too: the login shell exits before it runs any command (a ~/.bashrc
    with `set -e` and a line that fails, an `exit` in it).  `said`: what the shell wrote on
    stderr when the reader was started (None: nothing, or not tried: `transport: sftp`).
    Not fatal: retried with the connection backoff (a `source` of a conda.sh on NFS fails only
    while the filesystem hiccups: fatal, the target waited 2 minutes and the crash written
    meanwhile was read as history)."""

    def __init__(self, host: str, said: str | None = None) -> None:
        # the reader's own words ("the remote reader ended: ...") are not the shell's
        said = (said or "").removeprefix(READER_ENDED).lstrip(": ").strip() or None
        super().__init__(f"{host}: {said}" if said else host)
        self.host = host
        self.said = said



def too_many_keys(e: BaseException) -> bool:
    """sshd ended the login after its MaxAuthTries keys (6 by default) were refused."""
    return isinstance(e, asyncssh.DisconnectError) and \
        "too many authentication failures" in str(e.reason).lower()


class TooManyKeys(asyncssh.DisconnectError, FatalSSH):
    """sshd ended the login after its MaxAuthTries keys were refused: a refused login, fatal
    as PermissionDenied is.  Retried, each try offered the same keys again: 6 failed logins
    in the node's auth.log every few seconds, for ever, which fail2ban's sshd jail (maxretry
    5) bans the daemon's address for, every target on that host with it."""


class NoStreamReader(FatalSSH):
    """`transport: stream` and the streamed reader did not start on the node."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(host, why)
        self.host = host
        self.why = why


class BadSSHFile(FatalSSH):
    """A file the options name cannot be used: `option` (client_keys, known_hosts, config),
    its `path` as given, and `why` (never the file's content)."""

    def __init__(self, option: str, path: str, why: str) -> None:
        super().__init__(option, path, why)
        self.option = option
        self.path = path
        self.why = why

    def __str__(self) -> str:
        why = self.why     # a parse error names the file itself
        return f"ssh {self.option} {why}" if why.startswith(self.path + " ") else \
            f"ssh {self.option} {self.path}: {why}"


def ssh_file_problem(option: str, path: str) -> str | None:
    """Why the file `path` that `option` names cannot be used; None if it can.  Kept while
    the file is unchanged (8,000 targets sharing one key read it once)."""
    full = os.path.expanduser(path)
    try:
        st = os.stat(full)
    except OSError as e:
        if option == "known_hosts" and isinstance(e, FileNotFoundError):
            return (f"no such file (put the node's host key there, after checking it: "
                    f"`ssh-keyscan [-p PORT] HOST >> {path}`)")
        return _os_why(e)
    # a key is loaded with the public key and certificate beside it, if any
    beside = tuple(_stamp(full + end) for end in (".pub", "-cert.pub")) \
        if option == "client_keys" else ()
    return _problem(option, full, (st.st_mtime_ns, st.st_size, beside))


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=256)
def _problem(option: str, full: str, stamp: object) -> str | None:
    """`stamp`: what says the files are unchanged (the cache's key only)."""
    try:
        if option == "client_keys":
            asyncssh.load_keypairs([full])     # as the connection will: .pub and -cert too
        elif option == "known_hosts":
            asyncssh.read_known_hosts(full)
        else:
            with open(full, "rb"):
                pass                  # its syntax is asyncssh's to judge, at connect
    except OSError as e:
        return _os_why(e)
    except asyncssh.KeyImportError as e:
        if "assphrase" in str(e):
            return ("the key has a passphrase, which logwatch cannot ask for: load it into "
                    f"ssh-agent (`ssh-add {full}`) and name no key, or give a key without one")
        pub = full.endswith(".pub")
        return ("not a private key" + (f" (a public key: name {full[:-4]})" if pub else ""))
    except ValueError as e:
        if option == "client_keys":        # "Public key mismatch", or a bad certificate
            return (f"{full}.pub (or -cert.pub) beside it is not its public key "
                    f"({e}): remove it, or write it again (`ssh-keygen -y -f {full}`)")
        # asyncssh's message quotes the offending line: a key file given here would be shown
        return "not a known_hosts file (a line is not a host entry)"
    return None


def _os_why(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, IsADirectoryError):
        return "a directory, not a file"
    if isinstance(e, PermissionError):
        return f"permission denied (logwatch runs as uid {os.getuid()})"
    return e.strerror or type(e).__name__


def ssh_file_problems(client_keys: tuple[str, ...] | None, known_hosts: str | None,
                      config: tuple[str, ...] | None) -> Iterator[BadSSHFile]:
    """Each named file that cannot be used (known_hosts "none" names no file)."""
    named = [("client_keys", k) for k in client_keys or ()]
    if known_hosts is not None and known_hosts.lower() != "none":
        named.append(("known_hosts", known_hosts))
    named += [("config", c) for c in config or ()]
    for option, path in named:
        why = ssh_file_problem(option, path)
        if why is not None:
            yield BadSSHFile(option, path, why)


# OpenSSH's system-wide client config, read after the user's (the first value of an option
# wins) unless a config is named (`ssh -F`): a fleet's Host blocks (HostName, User, ProxyJump
# for a cluster's nodes) are often there, or in the ssh_config.d/ it includes.  asyncssh
# reads only ~/.ssh/config: `ssh gpu-node-17` worked, logwatch said "no such host:
# gpu-node-17 (a typo?)".
SYSTEM_SSH_CONFIG = "/etc/ssh/ssh_config"


_SYSTEM_LEFT_OUT: dict[str, object] = {}    # the system config -> its stamp when left out


def ssh_config_paths(config: tuple[str, ...] | None) -> list[str]:
    """The ssh config files read, as OpenSSH reads them: those named (`--ssh-config`,
    `ssh.config`), else ~/.ssh/config and then the system's, where readable (and not left
    out: `skip_system_config`)."""
    if config is not None:
        return [os.path.expanduser(c) for c in config]
    system = SYSTEM_SSH_CONFIG
    left_out = system in _SYSTEM_LEFT_OUT and _SYSTEM_LEFT_OUT[system] == _stamp(system)
    return [p for p in (os.path.expanduser("~/.ssh/config"), None if left_out else system)
            if p is not None and os.access(p, os.R_OK)]


def config_parse_why(error: str) -> str:
    """asyncssh's ConfigParseError ("FILE line N: ..."), with the fix where it is a line
    `ssh` takes and asyncssh's parser does not: a comment after a value (`Port 2222 # old
    box`), said "Extra data at end: # old box" (before, only that: the line looked wrong,
    `ssh` took it)."""
    if "Extra data at end: #" in error:
        return (f"{error} (a comment after a value: `ssh` takes it, logwatch's SSH library "
                "does not; put the comment on a line of its own)")
    return error


def skip_system_config(error: str) -> bool:
    """Leave the system's ssh config out, until the file changes, where `error` (asyncssh's
    ConfigParseError, "FILE line N: ...") is in it or a file it includes beside it: asyncssh
    refuses lines `ssh` takes (a comment after a value, `Port 22 # jump`, `Match
    localnetwork`), and a file the operator never named must not stop every target.  True:
    left out now (connect again); False: not the system's (the error is said)."""
    system = SYSTEM_SSH_CONFIG
    where = error.partition(" line ")[0]
    if system in _SYSTEM_LEFT_OUT and _SYSTEM_LEFT_OUT[system] == _stamp(system):
        return False
    if where != system and not where.startswith(os.path.dirname(system) + os.sep):
        return False
    _SYSTEM_LEFT_OUT[system] = _stamp(system)
    return True


# OpenSSH's default identities (ssh(1) -i), offered when the config names none for the host
DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_dsa")


def _host_config(host: str, port: int | None, user: str | None,
                 config: tuple[str, ...] | None) -> SSHClientConfig | None:
    """The ssh config as read for `host` (None where it cannot be read)."""
    try:
        return SSHClientConfig.load(None, ssh_config_paths(config), False, False, False,
                                    getpass.getuser(), user or "", host, port or 22)
    except (OSError, ValueError, asyncssh.Error):
        return None


def identity_files(host: str, port: int | None, user: str | None,
                   config: tuple[str, ...] | None) -> tuple[list[str], bool]:
    """The keys a connection to `host` offers by itself (no client_keys named), as written:
    the host's `IdentityFile`s in the ssh config, else OpenSSH's default keys; and whether
    the config named them."""
    cfg = _host_config(host, port, user, config)
    named = cfg.get("IdentityFile") if cfg is not None else None
    return (list(named), True) if named else ([f"~/.ssh/{n}" for n in DEFAULT_KEYS], False)


def locked_keys(host: str, port: int | None, user: str | None,
                config: tuple[str, ...] | None) -> list[str]:
    """The keys a connection to `host` offers by itself that have a passphrase.  asyncssh
    skips such a key without a word (a daemon has nobody to ask), so the login failed as if
    there were no key: said after an authentication failure."""
    keys, _ = identity_files(host, port, user, config)
    return [k for k in keys if os.path.isfile(os.path.expanduser(k))
            and (ssh_file_problem("client_keys", k) or "").startswith("the key has a passphrase")]


def agent_unreachable(identity_agent: str | None = None) -> str | None:
    """Why no ssh-agent can be asked for a key (None: one may be): asyncssh asks the one
    the host's `IdentityAgent` names (1Password's, ...), else SSH_AUTH_SOCK's, and says
    nothing when there is none."""
    what = "the ssh config's IdentityAgent" if identity_agent else "SSH_AUTH_SOCK"
    sock = os.path.expanduser(identity_agent) if identity_agent else \
        os.environ.get("SSH_AUTH_SOCK")
    if not sock:
        return ("SSH_AUTH_SOCK is not set (a service started by systemd or cron has no "
                "agent of its login)")
    try:
        is_socket = stat.S_ISSOCK(os.stat(sock).st_mode)
    except OSError:
        return f"{what} names {sock}, which is gone (the agent ended)"
    return None if is_socket else f"{what} names {sock}, which is not a socket"


def no_key_offered(host: str, port: int | None, user: str | None,
                   config: tuple[str, ...] | None) -> str | None:
    """Why a login offered no key at all, where it did not: no private key among the keys
    it offers by itself and no agent to ask (an `IdentityFile ~/.ssh/key.pub` whose private
    key is kept in ssh-agent, read by a daemon that has no agent); None if it may have."""
    cfg = _host_config(host, port, user, config)
    agent = cfg.get("IdentityAgent") if cfg is not None else None
    # `SSH_AUTH_SOCK`: that variable's agent, as ssh reads it (not a path)
    why = agent_unreachable(str(agent) if agent and agent != "SSH_AUTH_SOCK" else None)
    if why is None:
        return None
    keys, named = identity_files(host, port, user, config)
    if any(os.path.isfile(os.path.expanduser(k)) and ssh_file_problem("client_keys", k) is None
           for k in keys):
        return None
    pubs = [k for k in keys if k.endswith(".pub") and os.path.isfile(os.path.expanduser(k))]
    what = (f"the ssh config names {', '.join(pubs)} for the host, a public key (its private "
            "key kept in ssh-agent)" if pubs else
            f"no key the ssh config names for the host exists ({', '.join(keys)})" if named
            else "there is no key in ~/.ssh (id_ed25519, id_rsa, ...)")
    return f"no key was offered: {what}, and no ssh-agent can be asked: {why}"
