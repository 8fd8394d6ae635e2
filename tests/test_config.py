"""`logwatch run -c FILE [--check]` with broken configs: exit 2, one stderr line that names the
config file and the key path (DESIGN.md, config.py's ConfigError); a good config passes.

Both `--check` and a real `run` are exercised: `run` must refuse the same config before it
starts anything.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from logwatch.sources.ssh import SSHTarget
from support.daemon import daemons, free_port, wait_for  # noqa: F401 (daemons: a fixture)


def run(*args: str, timeout: float = 30,
        env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "logwatch", "run", *args], cwd=ROOT,
                          input="", capture_output=True, text=True, env=env,
                          encoding="utf-8", errors="replace", timeout=timeout)


def good_doc(tmp_path: Path) -> dict[str, Any]:
    return {
        "listen": f"127.0.0.1:{free_port()}",
        "state_dir": str(tmp_path / "state"),
        "checkpoint": {"interval": "1s"},
        "targets": [
            {"name": "node1", "source": str(tmp_path / "node1.log"), "rules": "sglang",
             "labels": {"model": "GLM-5", "rack": "r1"}, "stall_after": "5m"},
            {"name": "node2", "source": "ssh://root@gpu-node-2:2222/root/sglang-server.log",
             "rules": "auto", "stall_after": {"loading_shards": "10m", "cuda_graph": "15m"},
             "ssh": {"known_hosts": "~/.ssh/known_hosts", "connect_timeout": "5s"}},
            {"name": "node3", "source": "cmd:docker logs -f sglang", "rules": "vllm"},
        ],
        "alerts": [
            {"type": "webhook", "url": "http://127.0.0.1:8080/hook",
             "on": ["crashed", "stalled", "ready", "phase"]},
            {"type": "slack", "url_env": "SLACK_WEBHOOK_URL", "on": ["crashed", "stalled", "ready"]},
            {"type": "alertmanager", "url": "http://127.0.0.1:9093", "on": ["crashed", "stalled"]},
        ],
    }


def write(tmp_path: Path, doc: Any, name: str = "logwatch.yaml") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False),
                 encoding="utf-8")
    return p


def assert_config_error(path: Path, key: str, says: str = "") -> None:
    """Both `run --check` and `run` exit 2 with one stderr line naming the file and `key`
    (and saying `says`)."""
    for args in (("-c", str(path), "--check"), ("-c", str(path))):
        res = run(*args)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        where = f"`logwatch run {' '.join(args)}`"
        assert res.returncode == 2, f"{where}: exit {res.returncode}, stderr: {res.stderr!r}"
        assert len(lines) == 1, f"{where}: expected one stderr line, got: {res.stderr!r}"
        assert str(path) in lines[0], f"{where}: the file is not named: {lines[0]!r}"
        assert f" {key}:" in lines[0] or lines[0].split(f"{path}: ", 1)[-1].startswith(f"{key}:"), \
            f"{where}: the key path {key!r} is not named: {lines[0]!r}"
        assert "Traceback" not in res.stderr
        assert says in lines[0], f"{where}: {says!r} not said: {lines[0]!r}"
        assert res.stdout == "", f"{where}: stdout {res.stdout!r}"


def mutate(tmp_path: Path, fn: Any) -> Path:
    doc = good_doc(tmp_path)
    fn(doc)
    return write(tmp_path, doc)


@pytest.mark.integration
def test_good_config_passes_check(tmp_path: Path) -> None:
    path = write(tmp_path, good_doc(tmp_path))
    res = run("-c", str(path), "--check")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert "ok" in res.stdout and "3 targets" in res.stdout, res.stdout


@pytest.mark.integration
def test_unknown_top_level_key(tmp_path: Path) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d.update(listen_addr="127.0.0.1:1")),
                        "listen_addr")


@pytest.mark.integration
def test_unknown_target_key(tmp_path: Path) -> None:
    def f(d: dict[str, Any]) -> None:
        d["targets"][1]["sorce"] = d["targets"][1].pop("source")
    assert_config_error(mutate(tmp_path, f), "targets[1].sorce")


@pytest.mark.integration
def test_unknown_nested_keys(tmp_path: Path) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][1]["ssh"].update(knwon_hosts="x")),
                        "targets[1].ssh.knwon_hosts")
    assert_config_error(mutate(tmp_path, lambda d: d["checkpoint"].update(every="1s")),
                        "checkpoint.every")
    assert_config_error(mutate(tmp_path, lambda d: d["alerts"][0].update(uri="http://x")),
                        "alerts[0].uri")


@pytest.mark.integration
@pytest.mark.parametrize("value", ["5x", "five minutes", "-5s", "0s"])
def test_bad_duration(tmp_path: Path, value: str) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(stall_after=value)),
                        "targets[0].stall_after")


@pytest.mark.integration
def test_bad_duration_per_phase_and_checkpoint(tmp_path: Path) -> None:
    assert_config_error(
        mutate(tmp_path, lambda d: d["targets"][1]["stall_after"].update(cuda_graph="15q")),
        "targets[1].stall_after.cuda_graph")
    assert_config_error(mutate(tmp_path, lambda d: d["checkpoint"].update(interval="soon")),
                        "checkpoint.interval")


@pytest.mark.integration
@pytest.mark.parametrize("url", [
    "ssh:///root/server.log",            # no host
    "ssh://gpu-node-1",                  # no path
    "ssh://gpu-node-1/",                 # the root is not a log file
    "ssh://root@gpu-node-1:port/root/x.log",  # bad port
])
def test_bad_ssh_url(tmp_path: Path, url: str) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][1].update(source=url)),
                        "targets[1].source")


@pytest.mark.parametrize("url, host", [
    ("ssh://root@[::1]:2222/var/log/x.log", "::1"),
    ("ssh://root@[fe80::1%25eth0]/x.log", "fe80::1%eth0"),      # a zone, percent-encoded
    ("ssh://gpu-node-1.example.com/x.log", "gpu-node-1.example.com"),
])
def test_an_ipv6_host_is_read_and_written_back_in_brackets(url: str, host: str) -> None:
    """The target's name is its URL written back (messages, the default name): before,
    `ssh://root@::1:2222/var/log/x.log`, which names another port, and a zone's `%25`
    was kept in the host asyncssh was asked to connect to."""
    t = SSHTarget.parse(url)
    assert t.host == host and str(t) == url and SSHTarget.parse(str(t)) == t


@pytest.mark.parametrize("url, home, path", [
    ("ssh://gpu-node-1/~/server.log", "/home/al", "/home/al/server.log"),
    ("ssh://al@gpu-node-1:2222/~/logs/x-*.log", "/home/al/", "/home/al/logs/x-*.log"),
    ("ssh://gpu-node-1/var/~/server.log", "/home/al", "/var/~/server.log"),   # only a leading ~/
    ("ssh://gpu-node-1/~server.log", "/home/al", "/~server.log"),
])
def test_a_path_under_tilde_is_completed_in_the_home_the_node_names(
        url: str, home: str, path: str) -> None:
    t = SSHTarget.parse(url)
    assert t.at_home(home).path == path
    assert (t.in_home is None) == (path == t.path)
    assert t.at_home(home).at_home("/elsewhere") == t.at_home(home)   # completed once


@pytest.mark.integration
@pytest.mark.parametrize("text, says", [
    ("", "the file is empty"), ("\n  \n", "the file is empty"), ("# nothing yet\n", "the file is empty"),
    ("listen: 127.0.0.1:9105\n", "targets: missing"),
    ("listen: 127.0.0.1:9105\ntargets:\n", "targets: has no value"),
])
def test_an_empty_or_cut_config_is_refused(tmp_path: Path, text: str, says: str) -> None:
    """A config caught mid-write parses; before, `--check` said "ok (0 targets, ...)" and a
    SIGHUP stopped every target (tests/test_daemon.py).  `targets: []` is still a config."""
    path = tmp_path / "cut.yaml"
    path.write_text(text, encoding="utf-8")
    res = run("-c", str(path), "--check")
    assert res.returncode == 2 and says in res.stderr and str(path) in res.stderr, res.stderr
    path.write_text("targets: []\n", encoding="utf-8")
    assert run("-c", str(path), "--check").returncode == 0


@pytest.mark.integration
@pytest.mark.parametrize("source", ["logs/server.log", "server.log", "./server.log"])
def test_relative_file_path(tmp_path: Path, source: str) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(source=source)),
                        "targets[0].source")


@pytest.mark.integration
@pytest.mark.parametrize("source", ["/data/run-*/server.log", "ssh://gpu1/scratch/job-?/x.log"])
def test_a_pattern_in_a_directory_is_refused(tmp_path: Path, source: str) -> None:
    """Only the file name may be a pattern (the newest match: sources/newest.py)."""
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(source=source)),
                        "targets[0].source", "only be in the file name")


@pytest.mark.integration
def test_a_pattern_in_the_file_name_passes_check(tmp_path: Path) -> None:
    def f(d: dict[str, Any]) -> None:
        d["targets"][0]["source"] = "/scratch/jobs/slurm-*.out"
        d["targets"][1]["source"] = "ssh://gpu1/var/log/sglang/server-[0-9]*.log"
    res = run("-c", str(mutate(tmp_path, f)), "--check")
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


@pytest.mark.integration
def test_duplicate_target_name(tmp_path: Path) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][2].update(name="node1")),
                        "targets[2].name")


@pytest.mark.integration
def test_missing_pack(tmp_path: Path) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(rules="nosuchpack")),
                        "targets[0].rules")


@pytest.mark.integration
@pytest.mark.parametrize("listen", ["localhost", "127.0.0.1:99999", "127.0.0.1:http",
                                    "127.0.0.1:0", ":"])
def test_bad_listen(tmp_path: Path, listen: str) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d.update(listen=listen)), "listen")


@pytest.mark.integration
@pytest.mark.parametrize("label", ["bad-name", "1st", "target", "le"])
def test_bad_label_name(tmp_path: Path, label: str) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0]["labels"].update({label: "x"})),
                        f"targets[0].labels.{label}")


@pytest.mark.integration
def test_bad_alert_sink_type(tmp_path: Path) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["alerts"][0].update(type="pagerduty")),
                        "alerts[0].type")


@pytest.mark.integration
@pytest.mark.parametrize("url", ["ftp://127.0.0.1/hook", "not a url", "http://"])
def test_bad_alert_sink_url(tmp_path: Path, url: str) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["alerts"][2].update(url=url)),
                        "alerts[2].url")


@pytest.mark.integration
def test_alert_sink_without_url(tmp_path: Path) -> None:
    assert_config_error(mutate(tmp_path, lambda d: d["alerts"][0].pop("url")), "alerts[0].url")


@pytest.mark.integration
def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    """No key to name, but still one line naming the file, exit 2."""
    for path in (write(tmp_path, "targets: [\n  {name: a\n"), tmp_path / "missing.yaml"):
        for args in (("-c", str(path), "--check"), ("-c", str(path))):
            res = run(*args)
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert res.returncode == 2, res.stderr
            assert len(lines) == 1 and str(path) in lines[0], res.stderr


@pytest.mark.integration
def test_listen_port_in_use(tmp_path: Path) -> None:
    """Another process holds the port: exit 2 with a message naming the address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        doc = good_doc(tmp_path)
        doc["listen"] = f"127.0.0.1:{port}"
        path = write(tmp_path, doc)
        assert run("-c", str(path), "--check").returncode == 0  # the config itself is fine
        res = run("-c", str(path))
    assert res.returncode == 2, f"exit {res.returncode}: {res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    msg = [ln for ln in res.stderr.splitlines() if f"127.0.0.1:{port}" in ln]
    assert msg, f"no stderr line names 127.0.0.1:{port}: {res.stderr!r}"
    assert "in use" in msg[0].lower(), f"not a clear message: {msg[0]!r}"
    # the file and the key, as every config problem (before: the address alone)
    assert msg[0].startswith(f"logwatch: {path}: listen: "), msg[0]


@pytest.mark.integration
@pytest.mark.parametrize("listen, why", [("192.0.2.1:9105", "cannot listen on 192.0.2.1"),
                                         ("no-such-host.invalid:9105", "does not resolve")])
def test_a_listen_address_run_refuses_fails_the_check(tmp_path: Path, listen: str,
                                                      why: str) -> None:
    """An address not this machine's (TEST-NET-1) or a host that does not resolve: `run`
    refuses them, and `--check` says so as `run` would, naming the file and `listen`
    (before: `--check` said ok, then `run` exited 2 naming neither)."""
    path = mutate(tmp_path, lambda d: d.update(listen=listen))
    for args in (("-c", str(path), "--check"), ("-c", str(path))):
        res = run(*args)
        assert res.returncode == 2, f"{args}: exit {res.returncode}: {res.stderr}"
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("logwatch: ")]
        assert len(lines) == 1 and lines[0].startswith(f"logwatch: {path}: listen: "), \
            res.stderr
        assert why in lines[0] or "cannot listen" in lines[0], lines[0]


@pytest.mark.integration
def test_unset_environment_variable(tmp_path: Path) -> None:
    """`${VAR}` with VAR unset (and no default) names the key that uses it."""
    var = "LOGWATCH_TEST_SURELY_UNSET_VARIABLE"
    assert var not in __import__("os").environ
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(
        source=f"/var/log/${{{var}}}/server.log")), "targets[0].source")
    path = mutate(tmp_path, lambda d: d["targets"][0].update(
        source=f"/var/log/${{{var}:-node1}}/server.log"))
    res = run("-c", str(path), "--check")
    assert res.returncode == 0, res.stderr
    # in `name:`: one line, the variable's (before: a second, "missing or not a simple name")
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(
        name=f"${{{var}}}")), "targets[0].name", var)


BOMB = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"] +
                 [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)] +
                 ["targets: *a8", ""])      # 9 levels of 9 aliases: 9^9 values expanded


@pytest.mark.integration
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    """`run --check` (and a SIGHUP reload, which loads the same way) must not hang or grow
    without bound on a "billion laughs" config: exit 2, one line, well within the timeout."""
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB, encoding="utf-8")
    res = run("-c", str(path), "--check", timeout=20)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "alias" in lines[0], res.stderr
    pack = tmp_path / "bomb-pack.yaml"
    pack.write_text("name: bomb\n" + BOMB.replace("targets:", "rules:"), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "logwatch", "rules", "check", str(pack)],
                         cwd=ROOT, capture_output=True, text=True, timeout=20)
    assert res.returncode == 2 and str(pack) in res.stderr and "alias" in res.stderr, res.stderr


def test_yaml_anchors_of_ordinary_size_still_work() -> None:
    from logwatch.yamlload import load_yaml
    doc = load_yaml("base: &b {stall_after: 5m}\ntargets: [{<<: *b, name: a}, {<<: *b, name: b}]")
    assert doc["targets"][1] == {"stall_after": "5m", "name": "b"}


# -- all problems at once, YAML positions, sink environment variables -------------------------

@pytest.mark.integration
def test_every_problem_is_reported_in_one_run(tmp_path: Path) -> None:
    """Fixing a config one error per run is slow: each target and sink is checked even when
    another one is broken, one line per problem, exit 2."""
    def breakit(d: dict[str, Any]) -> None:
        d["listen"] = "nope"
        d["targets"][0]["stall_after"] = "5x"
        d["targets"][1]["bogus"] = 1
        d["targets"][2]["source"] = "relative.log"
        d["alerts"][2]["url"] = "ftp://127.0.0.1/x"
    path = mutate(tmp_path, breakit)
    for args in (("-c", str(path), "--check"), ("-c", str(path))):
        res = run(*args)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.splitlines()
        assert "5 problems" in lines[0], res.stderr
        keys = ["listen", "targets[0].stall_after", "targets[1].bogus", "targets[2].source",
                "alerts[2].url"]
        for key, line in zip(keys, lines[1:]):
            assert f"{path}: {key}:" in line, (key, line)
        assert len(lines) == 6 and "Traceback" not in res.stderr


@pytest.mark.integration
def test_at_most_20_problems_are_listed(tmp_path: Path) -> None:
    doc = good_doc(tmp_path)
    doc["targets"] = [{"name": f"t{i}", "source": f"rel{i}.log"} for i in range(25)]
    res = run("-c", str(write(tmp_path, doc)), "--check")
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and "25 problems" in lines[0], res.stderr
    assert len(lines) == 1 + 20 + 1 and "and 5 more" in lines[-1], res.stderr


@pytest.mark.integration
def test_a_yaml_syntax_error_says_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: 127.0.0.1:9105\ntargets:\n  - name: a\n    source: [x\n")
    res = run("-c", str(path), "--check")
    assert res.returncode == 2
    # PyYAML finds the unclosed flow sequence at the end (line 5), opened at line 4 column 13
    assert f"{path}:5:1: not valid YAML" in res.stderr, res.stderr
    assert "line 4, column 13" in res.stderr, res.stderr


@pytest.mark.integration
def test_an_unset_url_env_fails_check_not_the_first_alert(tmp_path: Path) -> None:
    """`url_env: VAR` with VAR unset used to pass --check and fail at the first crash."""
    var = "LOGWATCH_TEST_UNSET_SLACK_URL"
    assert var not in __import__("os").environ
    assert_config_error(mutate(tmp_path, lambda d: d["alerts"][1].update(url_env=var)),
                        "alerts[1].url_env")
    res = run("-c", str(mutate(tmp_path, lambda d: d["alerts"][1].update(url_env=var))),
              "--check", env_extra={var: "not a url"})
    assert res.returncode == 2 and "not an http(s) URL" in res.stderr, res.stderr
    res = run("-c", str(mutate(tmp_path, lambda d: d["alerts"][1].update(url_env=var))),
              "--check", env_extra={var: "https://hooks.slack.example/T0/B0/x"})
    assert res.returncode == 0, res.stderr


@pytest.mark.integration
def test_an_8000_target_config_is_not_an_alias_bomb(tmp_path: Path) -> None:
    """Issue 30: 8,000 targets sharing their ssh options, labels and probe settings by
    aliases (~300,000 values expanded, written out ~200,000) is a config, not a bomb: it
    loads and `--check` passes; the bomb (9^9 from ~90) is still refused."""
    head = ["listen: 127.0.0.1:9", f"state_dir: {tmp_path / 'state'}", "targets:",
            "  - {name: n0000, source: 'ssh://gpu-0000/var/log/sglang/server.log', rules: sglang,"
            " ssh: &ssh {known_hosts: /etc/ssh/ssh_known_hosts, client_keys: [/k/id_ed25519],"
            " connect_timeout: 20s, keepalive_interval: 10s},"
            " labels: &labels {cluster: c1, model: glm-4.6, team: inference},"
            " probe: &probe {interval: 10s, timeout: 3s, fail_after: 60s}, gpu: false}"]
    body = [f"  - {{name: n{i:04d}, source: 'ssh://gpu-{i:04d}/var/log/sglang/server.log', "
            f"rules: sglang, ssh: *ssh, labels: *labels, probe: *probe, gpu: false}}"
            for i in range(1, 8000)]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(head + body) + "\n", encoding="utf-8")
    from logwatch.yamlload import MAX_NODES, expanded_size, load_yaml
    import yaml
    assert expanded_size(yaml.compose(path.read_text()), 10**9) > MAX_NODES   # over the old bound
    assert len(load_yaml(path.read_text())["targets"]) == 8000
    res = run("-c", str(path), "--check", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("user", ["a;id", "a%3Bid", "a%20b", "x$(id)"])
@pytest.mark.integration
def test_an_ssh_user_name_with_shell_characters_is_refused(tmp_path: Path, user: str) -> None:
    """Issue 30: `ssh://a;id@host/...` is no login name: --check names the key."""
    assert_config_error(mutate(tmp_path, lambda d: d["targets"][0].update(
        source=f"ssh://{user}@gpu-node-1/var/log/sglang.log")), "targets[0].source")


# -- what `--check` passed and the daemon then died of, or silently did otherwise ------------

@pytest.mark.integration
@pytest.mark.parametrize("fn, key, says", [
    # an invalid routing regex: before, `--check` ok, then a traceback at start and at a
    # SIGHUP (systemd's ExecReload runs `--check` first: a reload took the daemon down)
    (lambda d: d["alerts"][0].update(targets={"name": "(["}), "alerts[0].targets.name",
     "invalid regex"),
    # a label no target has (a typo): the sink would never fire
    (lambda d: d["alerts"][0].update(targets={"modle": "GLM-.*"}), "alerts[0].targets.modle",
     "no target has the label"),
    # ssh options of the wrong type: before, every connect failed (OverflowError, TypeError,
    # a key file per character of a string)
    (lambda d: d["targets"][1]["ssh"].update(port=70000), "targets[1].ssh.port", "1 to 65535"),
    (lambda d: d["targets"][1]["ssh"].update(known_hosts=5), "targets[1].ssh.known_hosts",
     "a string"),
    (lambda d: d["targets"][1]["ssh"].update(keepalive_count_max="many"),
     "targets[1].ssh.keepalive_count_max", "whole number"),
    (lambda d: d["targets"][1]["ssh"].update(username=["a", "b"]), "targets[1].ssh.username",
     "a string"),
    (lambda d: d["targets"][1]["ssh"].update(config=5), "targets[1].ssh.config", "file path"),
    # a connect that never times out (asyncssh reads 0 as none: a host that takes the TCP
    # connection and never answers held the target for ever); an SFTP poll in a busy loop
    (lambda d: d["targets"][1]["ssh"].update(connect_timeout="0s"),
     "targets[1].ssh.connect_timeout", "above 0"),
    (lambda d: d["targets"][1]["ssh"].update(poll_interval=0), "targets[1].ssh.poll_interval",
     "above 0"),
    # a shell pipeline in a `cmd:` (run without a shell: `|` an argument of docker, silently)
    (lambda d: d["targets"][2].update(source="cmd:docker logs -f sglang 2>&1 | grep -v GET"),
     "targets[2].source", "cmd:sh -c 'docker logs -f sglang 2>&1 | grep -v GET'"),
    # one log under two names: each line read, each crash paged, twice
    (lambda d: d["targets"].append({"name": "again", "source": d["targets"][0]["source"]}),
     "targets[3].source", "the same log as target 'node1'"),
], ids=["route-regex", "route-label", "ssh-port", "ssh-known-hosts", "ssh-keepalive",
        "ssh-username", "ssh-config", "ssh-connect-timeout-0", "ssh-poll-0", "cmd-pipeline",
        "same-log"])
def test_what_check_passed_and_the_daemon_died_of(tmp_path: Path, fn: Any, key: str,
                                                  says: str) -> None:
    assert_config_error(mutate(tmp_path, fn), key, says)


@pytest.mark.integration
@pytest.mark.parametrize("how", ["symlink", "dir-symlink", "hardlink"])
def test_one_log_under_another_path_is_the_same_log(tmp_path: Path, how: str) -> None:
    """Another target's log through a symlink (to it, or to its directory) or a hard link:
    before, `--check` ok and each line read, each crash paged, once per target."""
    log = tmp_path / "node1.log"
    log.write_text("")
    alias = {"symlink": tmp_path / "latest.log", "hardlink": tmp_path / "hard.log",
             "dir-symlink": tmp_path / "logs" / "node1.log"}[how]
    if how == "symlink":
        alias.symlink_to(log)
    elif how == "hardlink":
        alias.hardlink_to(log)
    else:
        alias.parent.symlink_to(tmp_path, target_is_directory=True)
    path = mutate(tmp_path, lambda d: d["targets"].append({"name": "again",
                                                            "source": str(alias)}))
    assert_config_error(path, "targets[3].source", "the same log as target 'node1'")


def test_routing_and_ssh_values_as_users_write_them(tmp_path: Path) -> None:
    """What stays a config: routing on a label, the name, the engine; one key file as a
    string; a port and `max_attempts` from `${VAR}` (text)."""
    from logwatch.app.config import load_config
    doc = good_doc(tmp_path)
    doc["alerts"][0]["targets"] = {"model": "GLM-.*", "name": "node[12]", "engine": "sglang"}
    doc["alerts"][1]["targets"] = {"team": "infra"}   # no target has it yet: no typo either
    doc["defaults"] = {"ssh": {"client_keys": ["~/.ssh/fleet_key"]}}
    doc["targets"][1]["ssh"]["config"] = None        # unset: OpenSSH's own
    doc["alerts"][0]["max_attempts"] = "${LOGWATCH_TEST_UNSET_MA:-3}"
    doc["targets"][1]["ssh"].update(client_keys="~/.ssh/id_ed25519",
                                   port="${LOGWATCH_TEST_UNSET_PORT:-2222}")
    cfg = load_config(str(write(tmp_path, doc)))
    assert cfg.targets[1].ssh.client_keys == ("~/.ssh/id_ed25519",)
    assert cfg.targets[1].ssh.port == 2222 and cfg.alerts[0]["max_attempts"] == 3


@pytest.mark.integration
@pytest.mark.parametrize("text, line, key", [
    ("listen: 127.0.0.1:9105\ntargets:\n  - {name: a, source: /x/a.log}\n"
     "targets:\n  - {name: b, source: /x/b.log}\n", 4, "targets"),
    ("listen: 127.0.0.1:9105\ntargets:\n  - name: a\n    source: /x/a.log\n"
     "    source: /x/b.log\n", 5, "source"),
])
def test_a_key_written_twice_is_refused(tmp_path: Path, text: str, line: int, key: str) -> None:
    """YAML keeps the last of two equal keys, silently: a second `targets:` block dropped the
    first fleet while `--check` said ok.  Now one line at the second, naming the first."""
    path = tmp_path / "dup.yaml"
    path.write_text(text, encoding="utf-8")
    res = run("-c", str(path), "--check")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"{path}:{line}:" in lines[0] and f"duplicate key '{key}'" in lines[0], lines[0]


def test_a_relative_state_dir_is_next_to_the_config() -> None:
    """As a pack path is (before: the working directory's, `/` under systemd); a state_dir
    that is not a path is refused (before: `state_dir: 5` was `./5`)."""
    from logwatch.app.config import parse_config
    from logwatch.errors import ConfigError
    cfg = parse_config({"listen": ":9105", "state_dir": "state", "targets": []},
                       "/etc/logwatch/logwatch.yaml")
    assert cfg.state_dir == Path("/etc/logwatch/state")
    assert (cfg.listen_host, cfg.listen_port) == ("127.0.0.1", 9105)
    with pytest.raises(ConfigError) as e:
        parse_config({"state_dir": 5, "targets": []}, "/etc/logwatch/logwatch.yaml")
    assert e.value.key == "state_dir", e.value


@pytest.mark.integration
def test_a_max_attempts_that_gives_up_minutes_into_an_outage_is_warned_once(
        tmp_path: Path, daemons: Any) -> None:
    """Old example configs set `max_attempts: 8` (the default then): with the backoff of now
    it gives up a page after ~3 minutes of a receiver's outage.  `--check` (exit 0) and the
    daemon's start warn once, naming the file and the key; 20 attempts (~48m of an hour) and
    an Alertmanager sink (its open alerts are re-sent) are not warned.  Before: nothing said."""
    port = free_port()
    doc = {"listen": f"127.0.0.1:{port}", "state_dir": str(tmp_path / "state"),
           "targets": [{"name": "t1", "source": str(tmp_path / "t1.log"), "rules": "sglang"}],
           "alerts": [{"type": "webhook", "url": "http://127.0.0.1:9/hook", "max_attempts": 8},
                      {"type": "slack", "url": "http://127.0.0.1:9/slack", "max_attempts": 20},
                      {"type": "alertmanager", "url": "http://127.0.0.1:9", "max_attempts": 3}]}
    path = write(tmp_path, doc)
    said = (f"{path}: alerts[0].max_attempts: 8 attempts give up after ~3m of an outage of the "
            "receiver (the page is lost); remove it to retry until max_age (1h)")
    res = run("-c", str(path), "--check")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [f"logwatch: warning: {said}"], res.stderr
    d = daemons(path, port).start()
    warned = lambda: [e for e in d.log_events() if "max_attempts" in str(e.get("event"))]  # noqa: E731
    wait_for(warned, 10, "the warning at start", alive=d.dead)
    assert d.stop() == 0
    assert [e["event"] for e in warned()] == [said], warned()
    assert warned()[0]["level"] == "warning", warned()
