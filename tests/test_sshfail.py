"""The files SSH options name, checked before a connection is tried (sources/sshfail.py).

Before: a missing key or known_hosts was "cannot connect: FileNotFoundError", retried for ever
as if the host were down; a key with a passphrase or a .pub file took the target down with a
traceback (KeyImportError), and the GPU stream of that host with it; a private key given as
known_hosts was quoted in the error ("Invalid known hosts entry: b3BlbnNzaC1rZXkt...").
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from logwatch.sources.sshfail import ssh_file_problem, ssh_file_problems
from support.daemon import daemons, free_port, sim_texts, target_cfg, write_config  # noqa: F401
from support.sshd import SSHServer, keygen, ssh_agent, sshd_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration     # ssh-keygen writes the keys


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """Keys as ssh-keygen writes them (the passphrase one too: asyncssh would need bcrypt)."""
    files = {"plain": tmp_path / "id_plain", "locked": tmp_path / "id_locked",
             "pub": tmp_path / "id_plain.pub", "hosts": tmp_path / "known_hosts"}
    for name, passphrase in (("plain", ""), ("locked", "secret")):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f",
                        str(files[name])], check=True, capture_output=True, timeout=30)
    files["hosts"].write_text("[127.0.0.1]:2222 " + files["pub"].read_text())
    return files


@pytest.mark.parametrize("option, name, said", [
    ("client_keys", "plain", None),
    ("client_keys", "locked", "the key has a passphrase, which logwatch cannot ask for: load "
                              "it into ssh-agent (`ssh-add {path}`)"),
    ("client_keys", "pub", "not a private key (a public key: name {dir}/id_plain)"),
    ("client_keys", "hosts", "not a private key"),
    ("client_keys", "missing", "no such file"),
    ("client_keys", "dir", "a directory, not a file"),
    ("known_hosts", "hosts", None),
    ("known_hosts", "locked", "not a known_hosts file (a line is not a host entry)"),
    ("known_hosts", "missing", "no such file (put the node's host key there, after checking"),
    ("config", "hosts", None),                 # any readable file: asyncssh parses it
    ("config", "missing", "no such file"),
])
def test_a_named_file_that_cannot_be_used_is_said_in_one_line(
        keys: dict[str, Path], tmp_path: Path, option: str, name: str, said: str | None) -> None:
    path = keys.get(name) or (tmp_path if name == "dir" else tmp_path / "no-such-file")
    why = ssh_file_problem(option, str(path))
    if said is None:
        assert why is None
    else:
        assert why is not None and why.startswith(said.format(path=path, dir=tmp_path)), why
        assert "\n" not in why


def test_no_byte_of_a_key_given_as_known_hosts_is_shown(keys: dict[str, Path]) -> None:
    body = keys["locked"].read_text().splitlines()[1]
    why = ssh_file_problem("known_hosts", str(keys["locked"]))
    assert why is not None and body[:12] not in why


def test_every_bad_file_is_named_and_none_names_no_file(keys: dict[str, Path],
                                                        tmp_path: Path) -> None:
    bad = list(ssh_file_problems((str(keys["plain"]), str(keys["locked"])), "none",
                                 (str(tmp_path / "cfg"),)))
    assert [(b.option, b.path) for b in bad] == [("client_keys", str(keys["locked"])),
                                                 ("config", str(tmp_path / "cfg"))]
    assert str(bad[1]) == f"ssh config {tmp_path / 'cfg'}: no such file"
    assert list(ssh_file_problems(None, None, None)) == []


def test_a_file_fixed_in_place_is_read_again(keys: dict[str, Path]) -> None:
    """The verdict is kept while the file is unchanged (one key, 8,000 targets), not after."""
    path = keys["pub"]
    assert ssh_file_problem("client_keys", str(path)) is not None
    path.write_bytes(keys["plain"].read_bytes())
    assert ssh_file_problem("client_keys", str(path)) is None


def test_a_key_beside_another_keys_pub_is_said_and_fixed_by_writing_the_pub(
        keys: dict[str, Path]) -> None:
    """A key replaced in place beside its old .pub: the connection would fail "Public key
    mismatch" (a ValueError that took the target down: "failed: ...")."""
    key = keys["locked"]
    key.write_bytes(keys["plain"].read_bytes())       # the old id_locked.pub stays
    why = ssh_file_problem("client_keys", str(key))
    assert why is not None and why.startswith(f"{key}.pub (or -cert.pub) beside it is not its "
                                              "public key"), why
    Path(f"{key}.pub").write_bytes(keys["pub"].read_bytes())
    assert ssh_file_problem("client_keys", str(key)) is None


def test_the_daemon_stops_a_target_whose_key_cannot_be_used_with_one_message(
        sshd_server: SSHServer, keys: dict[str, Path], tmp_path: Path,  # noqa: F811
        daemons: Any) -> None:  # noqa: F811
    """A key with a passphrase (and that host's GPU stream on): the target fatal with the
    advice, no traceback, the daemon and its other target up; a missing key: fatal, not
    retried as a host down; an ssh config that does not parse (a GPU stream on too): fatal,
    its line named.  The key replaced by one without a passphrase, SIGHUP: read."""
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(port=8000)), encoding="utf-8")
    logs = {}                         # a log each: one log under two names is refused
    for n in ("locked", "missing", "badconf"):
        logs[n] = tmp_path / f"{n}.log"
        logs[n].write_bytes(log.read_bytes())
    fake = ROOT / "tests" / "tools" / "fake-nvidia-smi"
    kh = str(sshd_server.known_hosts)
    bad_config = tmp_path / "ssh_config"
    bad_config.write_text("Host *\n  Port abc\n")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("locked", sshd_server.url(logs["locked"]), probe=False,
                   ssh={"known_hosts": kh, "client_keys": [str(keys["locked"])]},
                   gpu={"command": f"env FAKE_NVSMI_GPUS=2 {fake}", "interval": "250ms"}),
        target_cfg("missing", sshd_server.url(logs["missing"]), gpu=False, probe=False,
                   ssh={"known_hosts": kh, "client_keys": [str(tmp_path / "id_gone")]}),
        target_cfg("badconf", sshd_server.url(logs["badconf"]), probe=False,
                   ssh={"known_hosts": kh, "config": str(bad_config)},
                   gpu={"command": f"env FAKE_NVSMI_GPUS=2 {fake}", "interval": "250ms"}),
        target_cfg("local", log, gpu=False, probe=False),
    ])
    d = daemons(cfg, port).start()
    for name, why in (("locked", f"client_keys {keys['locked']}: the key has a passphrase"),
                      ("missing", f"client_keys {tmp_path / 'id_gone'}: no such file"),
                      ("badconf", f"config {bad_config} line 2: Invalid Port integer value")):
        t = d.wait_target(name, lambda t: t["source_state"]["state"] == "fatal", "fatal")
        assert why in t["source_state"]["message"], t["source_state"]
    d.wait_target("local", lambda t: t["phase"] == "ready", "the local target read")
    err = d.stderr()
    assert "Traceback" not in err and "target failed" not in err and \
        "gpu stream failed" not in err, err[-3000:]
    # fixed in place (the authorised key, no passphrase, and its .pub), then SIGHUP: read
    keys["locked"].write_bytes(sshd_server.client_key.read_bytes())
    Path(f"{keys['locked']}.pub").write_bytes(Path(f"{sshd_server.client_key}.pub").read_bytes())
    d.signal(signal.SIGHUP)
    d.wait_target("locked", lambda t: t["phase"] == "ready", "read after the fix", timeout=30)


@pytest.mark.parametrize("named_by", ["config", "default"])
def test_a_key_skipped_for_its_passphrase_is_named_when_the_login_fails(
        sshd_server: SSHServer, keys: dict[str, Path], tmp_path: Path,  # noqa: F811
        named_by: str) -> None:
    """No key named to logwatch: the connection offers the host's `IdentityFile` (the ssh
    config) or OpenSSH's default key.  One with a passphrase is skipped by asyncssh without
    a word, and the login fails.  Before: "give a key with --ssh-key ... or set up
    ~/.ssh/config" (which was set up).  Now the key and the fix (ssh-agent) are named."""
    import os
    import sys
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    args = ["watch", sshd_server.url(tmp_path / "server.log"),
            "--known-hosts", str(sshd_server.known_hosts), "--timeout", "20"]
    if named_by == "config":
        config = tmp_path / "ssh_config"
        config.write_text(f"Host 127.0.0.1\n  IdentityFile {keys['locked']}\n")
        args += ["--ssh-config", str(config)]
        key = str(keys["locked"])
    else:
        (home / ".ssh" / "id_ed25519").write_bytes(keys["locked"].read_bytes())
        key = "~/.ssh/id_ed25519"
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"} | {"HOME": str(home)}
    res = subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{key} has a passphrase, which logwatch cannot ask for" in res.stderr, res.stderr
    assert f"`ssh-add {key}`" in res.stderr, res.stderr


@pytest.mark.parametrize("agent", ["unset", "gone", "identity-agent"])
def test_a_login_that_offered_no_key_says_why_and_reads_with_the_agent(
        sshd_server: SSHServer, tmp_path: Path, agent: str) -> None:  # noqa: F811
    """`IdentityFile ~/.ssh/agent_key.pub` and `IdentitiesOnly yes` in the ssh config: the
    private key kept in ssh-agent only (a hardware key, 1Password, an admin's agent), and
    logwatch started without that agent (a systemd service has no SSH_AUTH_SOCK) or with a
    stale one (a tmux session older than the login).  Before: "... give a key with --ssh-key
    / ssh.client_keys or set up ~/.ssh/config" (it was).  Now: no key offered, the .pub and
    why no agent, the fix; with a real ssh-agent holding the key, the log is read."""
    import os
    import sys
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = keygen(tmp_path / "agent_key")
    (home / ".ssh" / "agent_key.pub").write_bytes(Path(f"{key}.pub").read_bytes())
    sshd_server.authorized_keys.write_bytes(Path(f"{key}.pub").read_bytes())
    sock = tmp_path / "agent.sock"
    # `identity-agent`: the agent named by the host's IdentityAgent (1Password's way), none
    # in the environment
    (home / ".ssh" / "config").write_text(
        "Host 127.0.0.1\n  IdentityFile ~/.ssh/agent_key.pub\n  IdentitiesOnly yes\n" +
        (f"  IdentityAgent {sock}\n" if agent == "identity-agent" else ""))
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=free_port())), encoding="utf-8")
    args = [sys.executable, "-m", "logwatch", "watch", sshd_server.url(log),
            "--known-hosts", str(sshd_server.known_hosts), "--timeout", "20"]
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"} | {"HOME": str(home)}
    if agent == "gone":
        env["SSH_AUTH_SOCK"] = str(sock)
    res = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "no key was offered" in res.stderr and "~/.ssh/agent_key.pub" in res.stderr, \
        res.stderr
    why = {"unset": "SSH_AUTH_SOCK is not set", "gone": f"SSH_AUTH_SOCK names {sock}, which "
           "is gone", "identity-agent": f"IdentityAgent names {sock}, which is gone"}[agent]
    assert why in res.stderr and "set up ~/.ssh/config" not in res.stderr, res.stderr

    # the fix it names: the agent's socket, the key in it
    with ssh_agent(sock, [key]):
        if agent != "identity-agent":
            env["SSH_AUTH_SOCK"] = str(sock)
        res = subprocess.run(args + ["--last"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=60)
        assert "source up: reading" in res.stdout + res.stderr, (res.stdout, res.stderr)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])   # ready


def test_a_system_ssh_config_line_only_ssh_reads_leaves_it_out_not_every_target_down(
        sshd_server: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The system's ssh config (read as `ssh` reads it; here a file in tmp_path stands for
    /etc/ssh/ssh_config) with `ServerAliveInterval 30 # keepalive`: `ssh` takes a comment
    after a value, asyncssh's parser refuses it.  Not the operator's file to fix for
    logwatch: it is left out (said once), the target is read; a config the operator named
    with such a line is still said, naming the file and line."""
    import asyncio
    import logwatch.sources.sshfail as sshfail
    from logwatch.sources.ssh import SSHFileSource, SSHOptions, SSHPool
    from logwatch.sources.base import Data, SourceState
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    system = tmp_path / "etc-ssh" / "ssh_config"
    system.parent.mkdir()
    system.write_text("Host *\n  ServerAliveInterval 30 # keepalive\n")
    monkeypatch.setattr(sshfail, "SYSTEM_SSH_CONFIG", str(system))
    ref = subprocess.run(["ssh", "-G", "-F", str(system), "gpu-x"], capture_output=True,
                         text=True, timeout=30)
    assert ref.returncode == 0 and "serveraliveinterval 30" in ref.stdout, ref.stderr
    log = tmp_path / "server.log"
    log.write_bytes(b"hello\n")

    async def first(opts: SSHOptions) -> Any:
        pool = SSHPool()
        source = SSHFileSource(sshd_server.url(log), options=opts, pool=pool)
        try:
            async with asyncio.timeout(20):
                async for ev in source.events():
                    if isinstance(ev, Data) or (isinstance(ev, SourceState) and not ev.up):
                        return ev
        finally:
            await source.close()
            await pool.close()
    opts = SSHOptions(known_hosts=str(sshd_server.known_hosts),
                      client_keys=(str(sshd_server.client_key),))
    ev = asyncio.run(first(opts))
    assert isinstance(ev, Data) and ev.data == b"hello\n", ev
    named = asyncio.run(first(SSHOptions(known_hosts=str(sshd_server.known_hosts),
                                         client_keys=(str(sshd_server.client_key),),
                                         config=(str(system),))))
    assert named.fatal and f"{system} line 2" in named.message, named


def test_a_comment_after_a_value_in_the_ssh_config_is_said_with_its_fix(
        sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    """`Port 22 # the old box` in the ssh config: `ssh` takes a comment after a value,
    asyncssh's parser refuses the line.  Before: "cannot use ssh config FILE line 3: Extra
    data at end: # the old box" (the line looked fine, ssh used it).  Now the same, then
    what it is and the fix; with the comment on its own line, the log is read."""
    import sys
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host 127.0.0.1\n  ServerAliveInterval 30\n  ServerAliveCountMax 3 # the old box\n")
    ref = subprocess.run(["ssh", "-G", "-F", str(cfg), "127.0.0.1"], capture_output=True,
                         text=True, timeout=30)
    assert ref.returncode == 0 and "serveralivecountmax 3" in ref.stdout, ref.stderr
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=free_port())), encoding="utf-8")
    args = [sys.executable, "-m", "logwatch", "watch", sshd_server.url(log), "--last",
            "--known-hosts", str(sshd_server.known_hosts), "-i", str(sshd_server.client_key),
            "--ssh-config", str(cfg)]
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{cfg} line 3" in res.stderr and "put the comment on a line of its own" in \
        res.stderr, res.stderr
    cfg.write_text("Host 127.0.0.1\n  ServerAliveInterval 30\n  # the old box\n"
                   "  ServerAliveCountMax 3\n")
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])


def test_an_agent_of_many_keys_does_not_use_up_the_logins_tries(
        sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    """The daemon's user has an ssh-agent holding 7 other keys (a real one; sshd's
    MaxAuthTries is 6).  Before: with the node's key named (-i / ssh.client_keys) the agent's
    keys were offered first and sshd ended the login: "ProtocolError: Too many authentication
    failures", retried for ever; the host's IdentityFile in the ssh config, the same, no
    hint.  Now a named key is the only one offered (the log is read), and the other case says
    what happened and `IdentitiesOnly yes`."""
    import os
    import sys
    sock = tmp_path / "agent.sock"
    with ssh_agent(sock, [keygen(tmp_path / f"other{i}") for i in range(7)]):
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock), HOME=str(tmp_path))
        log = tmp_path / "server.log"
        log.write_text("".join(sim_texts(seed=3, port=free_port())), encoding="utf-8")
        base = [sys.executable, "-m", "logwatch", "watch", sshd_server.url(log), "--last",
                "--timeout", "8", "--known-hosts", str(sshd_server.known_hosts)]
        res = subprocess.run(base + ["-i", str(sshd_server.client_key)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host 127.0.0.1\n  IdentityFile {sshd_server.client_key}\n")
        res = subprocess.run(base + ["--ssh-config", str(cfg)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        out = res.stdout + res.stderr
        assert "Too many authentication failures" in out and "IdentitiesOnly yes" in out, out
