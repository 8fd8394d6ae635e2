"""Probing the server's own endpoint (telemetry/probe.py, issue 16).

Pure parts (config, the address from the log, the status line, the verdict text), the prober
against real local HTTP servers (up, 503, refused, hung, not HTTP), and the daemon over a real
sshd: the log of an SSH target says ready on port P, a real HTTP server listens on
127.0.0.1:P on the node, and the probe goes through the target's own SSH connection
(direct-tcpip).  When the server stops answering, `logwatch_probe_up` drops to 0 and one
`unreachable` alert is delivered; when it answers again, the alert is resolved.  A crash while
the endpoint still answers says so in the crash alert; a log that says ready while nothing
ever answered is "ready in log, not answering" in /api/status and on the page.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.receivers import Got, Receiver
from support.daemon import (  # noqa: F401
    checkpoint, daemons, free_port, sim_texts, target_cfg, wait_for, write_config,
)
from logwatch.telemetry.probe import (
    Endpoint, ProbeConfig, ProbePlan, Prober, endpoint_from_args, endpoint_of, local_connect,
    parse_probe_config, server_endpoint, server_only, status_of,
)
from logwatch.view import probe_verdict
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)
from conftest import ROOT

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

# -- pure parts -------------------------------------------------------------------------------


def test_probe_config_values() -> None:
    assert parse_probe_config(None) == ProbeConfig()
    assert parse_probe_config("auto").enabled and not parse_probe_config(False).enabled
    assert not parse_probe_config("off").enabled
    c = parse_probe_config({"url": "http://127.0.0.1:8000/health", "interval": "2s",
                            "timeout": "1s", "fail_after": "20s"})
    assert (c.url, c.interval, c.timeout, c.fail_after) == \
        ("http://127.0.0.1:8000/health", 2.0, 1.0, 20.0)


@pytest.mark.parametrize("value,message", [
    ({"urll": "x"}, "probe: unknown key urll (expected url, interval, timeout, fail_after)"),
    ({"url": "ftp://x"}, "probe.url: expected http://HOST:PORT/PATH"),
    ({"interval": "soon"}, "probe.interval: not a duration: 'soon'"),
    ({"interval": "10ms"}, "probe.interval: at least 0.2s"),
    ("maybe", "probe: expected auto, false, or a mapping"),
    (7, "probe: expected auto, false, or a mapping {url, interval, timeout, fail_after}; got int"),
])
def test_probe_config_errors_name_the_key(value: Any, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_probe_config(value)
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize("url,want", [
    ("http://0.0.0.0:30000", Endpoint("127.0.0.1", 30000)),
    ("http://127.0.0.1:30000", Endpoint("127.0.0.1", 30000)),
    ("https://[::]:8000/v1", Endpoint("127.0.0.1", 8000, "/v1", tls=True)),
    ("http://[::1]:8000", Endpoint("::1", 8000)),
    ("http://10.1.2.3:8000/", Endpoint("10.1.2.3", 8000)),
    ("0.0.0.0:30000", Endpoint("127.0.0.1", 30000)),
    ("gpu-node-1:30000", Endpoint("gpu-node-1", 30000)),
    ("http://0.0.0.0:8000.", Endpoint("127.0.0.1", 8000)),
    ("unix:/tmp/vllm.sock", None),
    ("http://host:99999", None),
    ("not an address", None),
])
def test_endpoint_of(url: str, want: Endpoint | None) -> None:
    assert endpoint_of(url) == want


def test_endpoint_from_the_server_arguments() -> None:
    assert endpoint_from_args({"host": "0.0.0.0", "port": 30000}) == Endpoint("127.0.0.1", 30000)
    assert endpoint_from_args({"host": None, "port": "8000"}) == Endpoint("127.0.0.1", 8000)
    assert endpoint_from_args({"host": "10.0.0.5", "port": 8000}) == Endpoint("10.0.0.5", 8000)
    assert endpoint_from_args({"port": True}) is None
    assert endpoint_from_args({"host": "x"}) is None
    # `--ssl-certfile`: uvicorn serves https (SGLang's and vLLM's alike)
    assert endpoint_from_args({"port": 8443, "ssl_certfile": "/etc/tls/srv.pem"}) == \
        Endpoint("127.0.0.1", 8443, tls=True)
    assert server_only(Endpoint("10.9.9.9", 8443, "/x", tls=True)) == \
        Endpoint("127.0.0.1", 8443, tls=True)
    # the address the log printed wins; its scheme, else the arguments', says https
    tls_args = {"port": 8443, "ssl_certfile": "/etc/tls/srv.pem"}
    assert server_endpoint("0.0.0.0:30000", tls_args) == Endpoint("127.0.0.1", 30000, tls=True)
    assert server_endpoint("http://0.0.0.0:30000", tls_args) == Endpoint("127.0.0.1", 30000)
    assert server_endpoint(None, tls_args) == Endpoint("127.0.0.1", 8443, tls=True)
    assert server_endpoint("0.0.0.0:30000", {"port": 1}) == Endpoint("127.0.0.1", 30000)


def test_status_line() -> None:
    assert status_of(b"HTTP/1.1 200 OK\r\n") == 200
    assert status_of(b"HTTP/1.0 503 Service Unavailable\r\n") == 503
    assert status_of(b"SSH-2.0-OpenSSH_9.6\r\n") is None
    assert status_of(b"") is None


def test_a_server_that_stopped_answering_counts_as_unreachable() -> None:
    """The status word (what the page pins and the header counts) says what the
    `unreachable` alert says: a server whose log says ready is `unreachable` once its
    endpoint has failed for `fail_after`, not only when it never answered.  Before, one that
    had answered and stopped stayed `ready` while its alert fired (and became `unreachable`
    only after a daemon restart)."""
    from logwatch.view import TargetView, probe_down_for
    down = {"up": False, "status": "connection refused (127.0.0.1:30000)", "fail_after": 30.0,
            "failing_since": 100.0, "ok_at": 90.0, "ok_startup": "s1"}

    def status(probe: dict, now: float) -> str:
        return TargetView(name="t", engine="vllm", source="t.log", kind="file", labels={},
                          now=now, phase="ready", source_up=True, source_message="",
                          startup_id="s1", phase_entered_at=50.0, probe=probe).status

    assert probe_down_for(down, "ready", 50.0, 145.0) == 45.0
    assert probe_down_for(down, "ready", 50.0, 120.0) is None          # under fail_after
    assert probe_down_for(down, "ready", 130.0, 170.0) == 40.0         # since ready
    assert probe_down_for(down, "cuda_graph", 50.0, 145.0) is None
    assert probe_down_for({**down, "up": True}, "ready", 50.0, 145.0) is None
    assert status(down, 145.0) == "unreachable" and status(down, 120.0) == "ready"
    assert status({**down, "up": True, "failing_since": None}, 145.0) == "ready"


def test_verdict_texts() -> None:
    up = {"up": True, "status": "200 /health, 200 /v1/models", "duration": 0.012}
    assert probe_verdict(up, "ready", "s1", 0.0).text == \
        "answering (200 /health, 200 /v1/models, 12 ms)"
    down = {"up": False, "status": "connection refused (127.0.0.1:30000)",
            "failing_since": 100.0, "ok_at": None, "ok_startup": None}
    v = probe_verdict(down, "ready", "s1", 145.0)
    assert v.ready_not_answering and v.text.startswith("ready in log, not answering for 45")
    again = {**down, "ok_at": 90.0, "ok_startup": "s1"}
    v = probe_verdict(again, "ready", "s1", 145.0)
    assert not v.ready_not_answering and v.text.startswith("not answering for 45")
    assert probe_verdict(down, "loading_shards", "s1", 145.0).text.startswith("not answering")
    assert probe_verdict({"up": None, "note": "no address"}, "launching", None, 0).text == \
        "no address"
    assert probe_verdict(None, "ready", None, 0.0) is None


# -- the prober against real HTTP servers -------------------------------------------------------

def _probe(port: int, paths: tuple[str, ...] = ("/health", "/v1/models"),
           timeout: float = 2.0) -> Any:
    prober = Prober(ProbeConfig(timeout=timeout), local_connect(), lambda: ProbePlan(None, ()))
    plan = ProbePlan(Endpoint("127.0.0.1", port), paths, "s1")
    return asyncio.run(prober.probe_once(plan))


def test_an_https_server_is_asked_over_tls(tmp_path: Path) -> None:
    """A server started with `--ssl-certfile` (its log: `Uvicorn running on https://...`,
    vLLM's `Starting vLLM server on https://...`).  Before: asked in plain HTTP, its TLS
    alert read as "not HTTP", down for good: an `unreachable` page and a watch that never
    exits 0.  Its self-signed certificate is not checked."""
    from support.tls import server_context
    rx = Receiver(tls=server_context(tmp_path)).start()
    try:
        prober = Prober(ProbeConfig(timeout=3.0), local_connect(), lambda: ProbePlan(None, ()))
        st = asyncio.run(prober.probe_once(ProbePlan(
            endpoint_of(f"https://0.0.0.0:{rx.port}"), ("/health", "/v1/models"), "s1")))
        assert st.up is True and st.status == "200 /health, 200 /v1/models", st
        assert st.url == f"https://127.0.0.1:{rx.port}", st.url
        assert [g.path for g in rx.requests()] == ["/health", "/v1/models"]
        plain = _probe(rx.port)              # what was asked before: no answer in HTTP
        assert plain.up is False and "200" not in plain.status, plain
    finally:
        rx.close()


def test_probe_up_down_refused_hung_and_not_http() -> None:
    answers = {"/health": 200, "/v1/models": 200}

    def respond(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
        return answers.get(got.path, 404), {}, b"{}"

    rx = Receiver(respond).start()
    try:
        st = _probe(rx.port)
        assert st.up is True and st.status == "200 /health, 200 /v1/models", st
        assert st.ok_startup == "s1" and st.failing_since is None and st.duration is not None
        assert [g.path for g in rx.requests()] == ["/health", "/v1/models"]
        assert all(g.method == "GET" for g in rx.requests())
        answers["/v1/models"] = 503          # the model is not served (yet)
        st = _probe(rx.port)
        assert st.up is False and st.status == "200 /health, 503 /v1/models", st
        # a server started with an API key: /v1/... asks for it, /health is open.  It answers.
        answers["/v1/models"] = 401
        st = _probe(rx.port)
        assert st.up is True and st.status == "200 /health, 401 /v1/models (needs a key)", st
        answers["/v1/models"] = 403          # a gateway's word for the same
        st = _probe(rx.port)
        assert st.up is True and st.status == "200 /health, 403 /v1/models (refused without " \
            "a key)", st
        answers["/health"] = 503             # the key asked for, the engine down: down
        st = _probe(rx.port)
        assert st.up is False and st.status.startswith("503 /health, 403 /v1/models"), st
        answers["/health"] = 401             # a key asked on every path: a gateway's word
        st = _probe(rx.port)                 # (a proxy answers so for a dead backend too)
        assert st.up is False and st.status.startswith("401 /health (needs a key)"), st
    finally:
        rx.close()
    port = free_port()                       # nothing listens: refused
    st = _probe(port)
    assert st.up is False and st.status.startswith("connection refused"), st
    # a port that accepts and never answers: one timeout, not a hang
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    try:
        t0 = time.monotonic()
        st = _probe(srv.getsockname()[1], timeout=0.5)
        assert st.up is False and "no answer in 0.5s" in st.status, st
        assert time.monotonic() - t0 < 5
    finally:
        srv.close()
    # something that is not HTTP (an SSH banner): down, and none of its bytes shown
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def banner() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        conn.close()

    th = threading.Thread(target=banner, daemon=True)
    th.start()
    try:
        st = _probe(srv.getsockname()[1], paths=("/health",))
        assert st.up is False and "not HTTP (21 bytes)" in st.status, st
        assert "SSH" not in st.status and "OpenSSH" not in str(st.to_dict()), st
    finally:
        th.join(5)
        srv.close()


# -- the daemon, over a real sshd ----------------------------------------------------------------

def _keyed(got: Got, rx: Receiver) -> tuple[int, dict[str, str], bytes]:
    """A server started with `--api-key`: /v1/... without the key is 401 (vLLM 0.34's
    AuthenticationMiddleware, SGLang 0.5.23's decide_request_auth), /health is open."""
    if got.path.startswith(("/v1", "/v2")) and got.header("Authorization") != "Bearer sk-x":
        return 401, {}, b'{"error": "Unauthorized"}'
    return 200, {}, b"{}"


def _serve(port: int) -> Receiver:
    """The inference server's HTTP side on 127.0.0.1:`port`: 200 on every path."""
    return Receiver(port=port).start()


def test_probe_over_ssh_unreachable_once_then_resolved(sshd_server: SSHServer,  # noqa: F811
                                                        tmp_path: Path, daemons: Any) -> None:
    server = sshd_server
    app_port = free_port()
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=app_port)), encoding="utf-8")
    hook = Receiver().start()
    http = _serve(app_port)
    port = free_port()
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    probe = {"interval": "1s", "timeout": "2s", "fail_after": "3s"}
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node1", server.url(log), ssh=ssh, gpu=False, probe=probe),
    ], alerts=[{"type": "webhook", "name": "hook", "url": hook.url(),
                "on": ["unreachable", "crashed"]}])
    d = daemons(cfg, port).start()
    try:
        d.wait_metric("logwatch_probe_up", 1.0, timeout=30, target="node1")
        t = d.target("node1")
        assert t is not None and t["phase"] == "ready" and t["status"] == "ready"
        assert t["probe"]["verdict"].startswith("answering (200 /health, 200 /v1/models")
        assert t["probe"]["url"] == f"http://127.0.0.1:{app_port}"
        assert {g.path for g in http.requests()} >= {"/health", "/v1/models"}
        assert d.metric("logwatch_probe_duration_seconds", target="node1") is not None
        # the server stops answering: probe_up 0 within 20 s, one `unreachable`
        http.close()
        stopped = time.monotonic()
        d.wait_metric("logwatch_probe_up", 0.0, timeout=20, target="node1")
        assert time.monotonic() - stopped < 20
        fired = hook.wait(lambda g: g.json["kind"] == "unreachable" and
                          g.json["status"] == "firing", timeout=30, what="unreachable")
        body = fired[0].json
        assert body["target"] == "node1" and "not answering for" in body["summary"], body
        assert "connection refused" in body["summary"], body
        # the probes go on failing: the same outage, decided again, is not alerted again
        hook.assert_not_sent_again(d, "unreachable", lambda g: g.json["kind"] == "unreachable",
                                   n=2, what="a second unreachable alert")
        assert len(hook.requests(lambda g: g.json["kind"] == "unreachable")) == 1
        t = d.target("node1")
        assert t is not None and t["probe"]["verdict"].startswith("not answering for"), t["probe"]
        assert t["status"] == "unreachable"     # what the page pins, as the alert says
        # it answers again: resolved, once
        http = _serve(app_port)
        d.wait_metric("logwatch_probe_up", 1.0, timeout=20, target="node1")
        hook.wait(lambda g: g.json["kind"] == "unreachable" and g.json["status"] == "resolved",
                  timeout=20, what="resolved")
        hook.assert_quiet(3.0, lambda g: g.json["kind"] == "unreachable" and
                          g.json["status"] == "resolved", what="a second resolution")
        assert [g.json["status"] for g in hook.requests(
            lambda g: g.json["kind"] == "unreachable")] == ["firing", "resolved"]
        assert d.target("node1")["status"] == "ready"     # type: ignore[index]
    finally:
        http.close()
        hook.close()


def test_a_node_behind_a_bastion_named_in_ssh_config_is_read_probed_and_its_gpus_read(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """How fleets reach their nodes: a Host alias in the daemon user's ~/.ssh/config, reached
    through a jump host (`ProxyJump`), key and known_hosts named there.  The source URL
    names only the alias; the log, the probe (direct-tcpip from the node) and nvidia-smi all
    go through the one jumped connection."""
    bastion = SSHServer(str(tmp_path / "bastion"))
    bastion.start()
    app_port = free_port()
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=app_port)), encoding="utf-8")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("".join(
        f"Host {name}\n  HostName 127.0.0.1\n  Port {s.port}\n  User {s.user}\n"
        f"  IdentityFile {s.client_key}\n  UserKnownHostsFile {s.known_hosts}\n{extra}"
        for name, s, extra in [("gpu-node-17", sshd_server, "  ProxyJump bastion\n"),
                               ("bastion", bastion, "")]))
    http = _serve(app_port)
    port = free_port()
    fake = ROOT / "tests" / "tools" / "fake-nvidia-smi"
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node17", f"ssh://gpu-node-17{log}", probe={"interval": "1s"},
                   gpu={"command": f"env FAKE_NVSMI_GPUS=2 {fake}", "interval": "250ms"})])
    d = daemons(cfg, port, env={**os.environ, "HOME": str(home)}).start()
    try:
        d.wait_metric("logwatch_probe_up", 1.0, timeout=30, target="node17")
        t = d.wait_target("node17", lambda t: (t.get("gpu") or {}).get("up"), "GPUs read",
                          timeout=20)
        assert t["phase"] == "ready" and t["probe"]["url"] == f"http://127.0.0.1:{app_port}"
        assert "2 GPUs" in str(t["gpu"]), t["gpu"]
        assert bastion.session_pids(), "the node was not reached through the bastion"
    finally:
        http.close()
        bastion.cleanup()


def test_an_https_server_on_a_node_is_asked_over_tls_through_ssh(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """TLS over the SSH channel (asyncssh's streams cannot start TLS: `TlsStreams`): a node
    whose server says `Uvicorn running on https://0.0.0.0:P` and was started with
    `ssl_certfile` is up, and asked at https://."""
    from support.tls import server_context
    server = sshd_server
    https = Receiver(tls=server_context(tmp_path)).start()
    log = tmp_path / "server.log"
    text = "".join(sim_texts(seed=3, port=https.port))
    text = text.replace("host='0.0.0.0')", "host='0.0.0.0', ssl_certfile='/etc/tls/srv.pem')")
    log.write_text(text.replace("running on http://", "running on https://"), encoding="utf-8")
    port = free_port()
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node1", server.url(log), ssh=ssh, gpu=False,
                   probe={"interval": "1s", "timeout": "3s", "fail_after": "3s"}),
    ])
    d = daemons(cfg, port).start()
    try:
        d.wait_metric("logwatch_probe_up", 1.0, timeout=30, target="node1")
        t = d.target("node1")
        assert t is not None and t["probe"]["url"] == f"https://127.0.0.1:{https.port}", t
        assert t["probe"]["verdict"].startswith("answering (200 /health, 200 /v1/models"), t
        assert {g.path for g in https.requests()} >= {"/health", "/v1/models"}
    finally:
        https.close()


def test_a_node_that_forbids_forwarding_is_not_called_unreachable(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """`AllowTcpForwarding no` on the node (hardened hosts): the probe's channel is refused
    by policy (administratively prohibited), which says nothing of the server.  Before: "not
    answering: open failed", and an `unreachable` page for a healthy server; `watch` waited
    for its timeout, exit 3.  Now: not probed, said why, no alert; `watch` takes the log's
    word."""
    server = SSHServer(str(tmp_path / "sshd"), forwarding=False)
    server.start()
    app_port = free_port()
    http = _serve(app_port)
    hook = Receiver().start()
    try:
        log = tmp_path / "server.log"
        log.write_text("".join(sim_texts(seed=3, port=app_port)), encoding="utf-8")
        ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
        port = free_port()
        cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
            target_cfg("hardened", server.url(log), ssh=ssh, gpu=False,
                       probe={"interval": "1s", "timeout": "2s", "fail_after": "2s"})],
            alerts=[{"type": "webhook", "name": "hook", "url": hook.url(),
                     "on": ["unreachable"]}])
        d = daemons(cfg, port).start()
        t = d.wait_target("hardened", lambda t: (t.get("probe") or {}).get("probes", 0) >= 3,
                          "three probes", timeout=30)
        assert t["probe"]["blocked"] is True and t["probe"]["up"] is None, t["probe"]
        assert "forbids port forwarding" in t["probe"]["status"], t["probe"]
        assert t["status"] == "ready", t["status"]
        assert d.metric("logwatch_probe_up", target="hardened") != 0.0
        assert hook.requests() == []        # three probes, fail_after 2 s: none alerted
        res = subprocess.run(
            [sys.executable, "-m", "logwatch", "watch", server.url(log), "--known-hosts",
             str(server.known_hosts), "-i", str(server.client_key), "--timeout", "20s",
             "--no-history"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
        assert "the endpoint cannot be probed" in res.stdout, res.stdout
    finally:
        hook.close()
        http.close()
        server.cleanup()


def test_crash_while_the_endpoint_answers_and_ready_but_never_answering(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """Local targets are probed directly.  `liar`: its log crashes while its /health still
    answers 200 (SGLang's known lie): the crash alert says so.  `deaf`: its log says ready
    and nothing listens on its port: /api/status, the page and the header count say
    "unreachable" ("ready in log, not answering"), never "ready"."""
    liar_port, deaf_port = free_port(), free_port()
    liar = tmp_path / "liar.log"
    deaf = tmp_path / "deaf.log"
    liar.write_text("".join(sim_texts(seed=4, port=liar_port)), encoding="utf-8")
    deaf.write_text("".join(sim_texts(seed=5, port=deaf_port)), encoding="utf-8")
    http = _serve(liar_port)
    hook = Receiver().start()
    port = free_port()
    probe = {"interval": "500ms", "timeout": "2s", "fail_after": "2s"}
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("liar", str(liar), gpu=False, probe=probe),
        target_cfg("deaf", str(deaf), gpu=False, probe=probe),
    ], alerts=[{"type": "webhook", "name": "hook", "url": hook.url(),
                "on": ["unreachable", "crashed"]}])
    d = daemons(cfg, port).start()
    try:
        d.wait_metric("logwatch_probe_up", 1.0, timeout=30, target="liar")
        d.wait_metric("logwatch_probe_up", 0.0, timeout=30, target="deaf")
        t = d.wait_target("deaf", lambda t: t["status"] == "unreachable", "deaf unreachable")
        assert t["phase"] == "ready" and t["probe"]["ready_not_answering"] is True
        assert t["probe"]["verdict"].startswith("ready in log, not answering"), t["probe"]
        got = hook.wait(lambda g: g.json["kind"] == "unreachable" and g.json["target"] == "deaf",
                        timeout=20, what="deaf unreachable")
        assert "ready in log, never answered" in got[0].json["summary"], got[0].json
        # the liar crashes (a new startup that dies in graph capture) while /health answers
        with open(liar, "a", encoding="utf-8") as f:
            f.write("".join(sim_texts(seed=6, port=liar_port, crash="oom", start=2e9)))
        got = hook.wait(lambda g: g.json["kind"] == "crashed" and g.json["target"] == "liar",
                        timeout=30, what="liar crashed")
        body = got[0].json
        assert "the endpoint still answers 200 /health" in body["summary"], body
        assert body["details"]["endpoint"].startswith("the endpoint still answers 200"), body
        # the page: the deaf target is not "ready", the header counts it as unreachable
        from playwright.sync_api import expect, sync_playwright
        from test_page import CHROME_ARGS, CHROMIUM
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            expect(page.locator("section[data-target='deaf'] .phase")).to_have_text(
                "ready in log, not answering", timeout=15_000)
            expect(page.locator("section[data-target='deaf'] .probe")).to_contain_text(
                "endpoint: ready in log, not answering")
            expect(page.locator("#count-unreachable")).to_have_attribute("data-n", "1")
            expect(page.locator("section[data-target='liar'] .probe")).to_contain_text(
                "endpoint: answering (200 /health")
            page.screenshot(path=str(tmp_path / "probe-page.png"), full_page=True)
            browser.close()
    finally:
        http.close()
        hook.close()


def test_a_restarted_daemon_probes_the_servers_already_up_at_once(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """A daemon restarted (kill -9) under a fleet that serves resumes each startup from its
    checkpoint: no new startup, no ready line, no catch-up.  Its servers are probed at
    once, as at a first start, not one whole `interval` later (before: 10.7-11.2 s after
    /healthz for 22 of 22 serving SSH targets at the default 10 s interval, against 2.0 s at
    the first start; meanwhile no `logwatch_probe_up` series and an empty `probe`)."""
    server = sshd_server
    app_port = free_port()
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=app_port)), encoding="utf-8")
    http = _serve(app_port)
    port = free_port()
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    state = tmp_path / "state"
    cfg = write_config(tmp_path / "logwatch.yaml", port, state, [
        target_cfg("node1", server.url(log), ssh=ssh, gpu=False,
                   probe={"interval": "10s", "timeout": "2s"})])
    d = daemons(cfg, port).start()
    try:
        d.wait_metric("logwatch_probe_up", 1.0, timeout=30, target="node1")
        wait_for(lambda: (((checkpoint(state, "node1") or {}).get("extra") or {}).get("state")
                          or {}).get("phase") == "ready", 10, "a checkpoint of the ready startup",
                 alive=d.dead)
        d.kill9()
        d.start()
        up = time.monotonic()
        d.wait_metric("logwatch_probe_up", 1.0, timeout=15, target="node1")
        took = time.monotonic() - up
        assert took < 5.0, f"first probe {took:.1f}s after the restart (interval 10 s)"
        t = d.target("node1")
        assert t is not None and t["epoch"] == 1 and t["status"] == "ready", t
    finally:
        http.close()


def test_probe_off_and_no_series(tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=7, port=free_port())), encoding="utf-8")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("quiet", str(log), gpu=False, probe=False),
    ])
    d = daemons(cfg, port).start()
    d.wait_target("quiet", lambda t: t["phase"] == "ready", "ready")
    assert d.target("quiet")["probe"] is None  # type: ignore[index]
    assert "logwatch_probe_up{" not in d.metrics_text()


def test_a_bad_probe_config_names_the_file_and_key(tmp_path: Path) -> None:
    import subprocess
    import sys
    from conftest import ROOT
    cfg = write_config(tmp_path / "logwatch.yaml", free_port(), tmp_path / "state", [
        target_cfg("a", str(tmp_path / "a.log"), probe={"interval": "soon"}),
        target_cfg("b", str(tmp_path / "b.log"), probe={"url": "ftp://x"}),
    ])
    res = subprocess.run([sys.executable, "-m", "logwatch", "run", "-c", str(cfg), "--check"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "targets[0].probe.interval: not a duration: 'soon'" in res.stderr, res.stderr
    assert "targets[1].probe.url: expected http://HOST:PORT/PATH" in res.stderr, res.stderr


@pytest.mark.integration
@pytest.mark.serial
def test_attaching_to_a_server_already_up_probes_it_and_alerts_its_loss_once(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """Issue 30: the daemon starts after the fleet.  The log said ready an hour ago (history
    for alerts: no `ready` alert), its server answers: `logwatch_probe_up 1` within 2 probe
    intervals of the attach (the address comes from the startup caught up on, not from
    lines read live), though it was started with an API key (401 on /v1/models).  Its HTTP
    side dies: 0 at the next probe, one `unreachable`; then the server crashes in its log:
    the crash is alerted (a server up before us is monitored)."""
    app_port = free_port()
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=app_port)), encoding="utf-8")
    an_hour_ago = time.time() - 3600
    os.utime(log, (an_hour_ago, an_hour_ago))
    http = Receiver(_keyed, port=app_port).start()    # started with --api-key, as fleets are
    hook = Receiver().start()
    port = free_port()
    probe = {"interval": "1s", "timeout": "2s", "fail_after": "3s"}
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("up", str(log), gpu=False, probe=probe),
    ], alerts=[{"type": "webhook", "name": "hook", "url": hook.url(),
                "on": ["unreachable", "crashed", "ready"]}])
    d = daemons(cfg, port).start()
    try:
        # (while `catching_up` the status already shows the phase the log holds, not yet
        # what it was at the attach: on a loaded machine that window is seen)
        t = d.wait_target("up", lambda t: t["phase"] == "ready" and not t["catching_up"],
                          "ready (caught up)")
        attached = time.monotonic()
        assert t["seen_at_attach"] is not None and t["seen_at_attach"]["phase"] == "ready", t
        d.wait_metric("logwatch_probe_up", 1.0, timeout=10, target="up")
        assert time.monotonic() - attached <= 2 * 1.0 + 1.0, "not within 2 probe intervals"
        t = d.target("up")
        assert t is not None and t["probe"]["url"] == f"http://127.0.0.1:{app_port}"
        http.close()
        stopped = time.monotonic()
        d.wait_metric("logwatch_probe_up", 0.0, timeout=10, target="up")
        assert time.monotonic() - stopped < 3.0 + 1.0        # within fail_after
        fired = hook.wait(lambda g: g.json["kind"] == "unreachable" and
                          g.json["status"] == "firing", timeout=30, what="unreachable")
        assert fired[0].json["target"] == "up" and "not answering for" in fired[0].json["summary"]
        # the probes go on failing: the same outage, decided again, is not alerted again
        hook.assert_not_sent_again(d, "unreachable", lambda g: g.json["kind"] == "unreachable"
                                   and g.json["status"] == "firing", n=2,
                                   what="a second unreachable alert")
        # the server crashes in its log, after we attached: news
        with open(log, "a", encoding="utf-8") as f:
            f.write("[2026-12-01 12:00:00 TP0] Scheduler hit an exception: Traceback (most "
                    "recent call last):\n"
                    '  File "/sglang/srt/managers/scheduler.py", line 100, in event_loop\n'
                    "    self.run_batch(batch)\n"
                    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                    "[2026-12-01 12:00:01] Received sigquit from a child process. It usually "
                    "means the child failed.\n")
        got = hook.wait(lambda g: g.json["kind"] == "crashed", timeout=30, what="crashed")
        assert got[0].json["target"] == "up"
        assert not hook.requests(lambda g: g.json["kind"] == "ready"), "history alerted"
    finally:
        http.close()
        hook.close()


def test_the_probe_asks_only_the_server() -> None:
    """An address from the log is a hint for its port: the target's own host, no path."""
    assert server_only(Endpoint("10.9.9.9", 8000, "/admin/delete")) == Endpoint("127.0.0.1", 8000)
    assert server_only(Endpoint("127.0.0.1", 30000, "/x")) == Endpoint("127.0.0.1", 30000)
    assert server_only(Endpoint("::1", 30000)) == Endpoint("::1", 30000)
    assert server_only(Endpoint("gpu-7", 30000), ("gpu-7",)) == Endpoint("gpu-7", 30000)
    assert server_only(Endpoint("gpu-8", 30000), ("gpu-7",)) == Endpoint("127.0.0.1", 30000)
    # a log's path is never asked; the operator's configured url path is
    rx = Receiver().start()
    try:
        plan = ProbePlan(Endpoint("10.9.9.9", rx.port, "/admin/delete"), ("/health",), "s1")
        prober = Prober(ProbeConfig(timeout=2.0), local_connect(), lambda: plan)
        st = asyncio.run(prober.probe_once(plan))
        assert st.up is True and st.url == f"http://127.0.0.1:{rx.port}/health", st
        own = ProbeConfig(url=f"http://127.0.0.1:{rx.port}/ready", timeout=2.0)
        plan = ProbePlan(endpoint_of(own.url or ""), ("/health",), "s1")
        asyncio.run(Prober(own, local_connect(), lambda: plan).probe_once(plan))
        assert [g.path for g in rx.requests()] == ["/health", "/ready"]
    finally:
        rx.close()


def test_a_server_that_logs_at_warning_is_ready_when_its_endpoint_answers(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """SGLang at `--log-level warning` prints no milestone, no ready line and no address:
    its log is two tqdm bars (0.5.23: every startup line is `logger.info`).  The operator
    names the endpoint (`probe: {url}`); it answers.  Before: cuda_graph for good, a
    `stalled` page while it served (and `watch` timed out).  Now: the `ready` alert, said to
    come from the endpoint, at the first probe that answers; no `stalled`."""
    from support.receivers import hook
    http = Receiver().start()
    rx = Receiver().start()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("quiet", log, gpu=False, stall_after="40s",
                   probe={"url": f"http://127.0.0.1:{http.port}/health", "interval": "1s",
                          "timeout": "2s", "fail_after": "5s"}),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["ready", "stalled", "unreachable"]}])
    d = daemons(cfg, port).start()
    try:
        d.wait_target("quiet", lambda t: t["source_state"]["state"] == "up", "reading")
        with log.open("a", encoding="utf-8") as f:
            f.write("Loading safetensors checkpoint shards: 100% Completed | 17/17 "
                    "[00:30<00:00,  0.56it/s]\n"
                    "Capturing batches (bs=1 avail_mem=36.10 GB): 100%|##########| 52/52 "
                    "[00:11<00:00,  4.60it/s]\n")
        got = rx.wait(hook("ready", "firing", "quiet"), timeout=40, alive=d.dead, what="ready")
        assert "no ready line in the log; the endpoint answers" in got[0].json["summary"], \
            got[0].json
        t = d.target("quiet")
        assert t is not None and t["phase"] == "ready" and t["status"] == "ready", t
        assert (t["ready_line"] or "").startswith("(no ready line in the log"), t
        assert not rx.requests(lambda g: hook("stalled")(g) or hook("unreachable")(g))
    finally:
        http.close()
        rx.close()


def test_a_daemon_attaching_to_a_quiet_server_serving_for_an_hour_sends_no_page(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    """A daemon restarted under a fleet of servers at WARNING: the log (two bars) was last
    written an hour ago, its endpoint answers.  Before: `stalled` ("server probably dead") at
    the first tick, then `ready` ("ready in 0.0s"): two pages for a server serving all along.
    Now the stall at attach waits for the endpoint's first word; it answers: ready, as
    history (no alert).  The same log whose endpoint does not answer: the stall goes out."""
    from support.receivers import hook
    http = Receiver().start()
    rx = Receiver().start()
    bars = ("Loading safetensors checkpoint shards: 100% Completed | 17/17 [00:30<00:00,  "
            "0.56it/s]\n"
            "Capturing batches (bs=1 avail_mem=36.10 GB): 100%|##########| 52/52 [00:11<00:00,"
            "  4.60it/s]\n")
    up, down = tmp_path / "up.log", tmp_path / "down.log"
    an_hour_ago = time.time() - 3600
    for p in (up, down):
        p.write_text(bars, encoding="utf-8")
        os.utime(p, (an_hour_ago, an_hour_ago))
    probe = {"interval": "1s", "timeout": "2s", "fail_after": "5s"}
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("up", up, gpu=False, probe={**probe, "url": f"{http.url('/health')}"}),
        target_cfg("down", down, gpu=False,
                   probe={**probe, "url": f"http://127.0.0.1:{free_port()}/health"}),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["ready", "stalled"]}])
    d = daemons(cfg, port).start()
    try:
        rx.wait(hook("stalled", "firing", "down"), timeout=30, alive=d.dead,
                what="the stall of the server that does not answer")
        t = d.wait_target("up", lambda t: t["phase"] == "ready", "ready by its endpoint")
        assert (t["ready_line"] or "").startswith("(no ready line in the log"), t
        assert not rx.requests(hook(target="up")), [g.json for g in rx.requests()]
    finally:
        http.close()
        rx.close()


# -- a launch that serves no HTTP is not probed -------------------------------------------------

H2_REFUSAL = (b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"                       # SETTINGS
              b"\x00\x00\x08\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01")  # GOAWAY


def _grpc_port() -> tuple[socket.socket, threading.Thread]:
    """The port of a gRPC server as an HTTP/1.1 client meets it: an HTTP/2 server's
    SETTINGS and a GOAWAY (PROTOCOL_ERROR), then the connection closed."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return                   # closed: the test is over
            with conn:
                conn.recv(4096)
                conn.sendall(H2_REFUSAL)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return srv, th


@pytest.mark.parametrize("built, port_text, ready", [
    ("vllm-034-grpc.log", "50051", "READY in 4m31s"),
    ("sglang-0523-grpc.log", "30000", "READY in 4m01s")])
def test_a_grpc_server_is_not_probed_over_http(tmp_path: Path, built: str, port_text: str,
                                               ready: str) -> None:
    """`vllm serve --grpc` (0.34 launchers/grpc_server.py) and SGLang `--smg-grpc-mode` (0.5.23
    launch_server.py -> smg-grpc-servicer `serve_grpc`) serve gRPC on `--port`: an HTTP probe
    there never answers.  Once its log said ready (`vLLM gRPC server started on`, SGLang's own
    `fired up`), `watch` waited for that port to answer HTTP: "ready in log, not answering",
    exit 3 at its timeout (and the daemon paged `unreachable` for a server that served).  The
    packs' `probe: {off_args: [grpc]}` / `[smg_grpc_mode, grpc_mode]`: such a launch is not
    probed, the log's word stands."""
    srv, th = _grpc_port()
    try:
        port = srv.getsockname()[1]
        text = (ROOT / "tests/fixtures/built" / built).read_text(encoding="utf-8")
        log = tmp_path / "grpc.log"
        log.write_text(text.replace(port_text, str(port)), encoding="utf-8")
        res = subprocess.run(
            [sys.executable, "-m", "logwatch", "watch", str(log), "--timeout", "20s",
             "--no-history"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
        assert ready in res.stdout and "not answering" not in res.stdout, res.stdout
    finally:
        srv.close()
        th.join(5)


def test_the_daemon_does_not_page_a_grpc_server_unreachable(tmp_path: Path,
                                                             daemons: Any) -> None:  # noqa: F811
    """The daemon (probe: auto, the default) and two vLLM `--grpc` servers, ready, their
    ports speaking HTTP/2 only: `grpc` read with the shipped pack, not probed, no page;
    `control` with a pack that extends it and names no `off_args` (the pack as it was):
    probed over HTTP, "ready in log, not answering", and paged `unreachable`."""
    srv, th = _grpc_port()
    hook = Receiver().start()
    try:
        port = srv.getsockname()[1]
        text = (ROOT / "tests/fixtures/built/vllm-034-grpc.log").read_text(encoding="utf-8")
        text = text.replace("port=50051", f"port={port}")
        (tmp_path / "grpc.log").write_text(text, encoding="utf-8")
        (tmp_path / "control.log").write_text(text, encoding="utf-8")
        (tmp_path / "old.yaml").write_text(
            "name: vllm-old\nextends: vllm\nprobe: {paths: [/health, /v1/models]}\nrules: []\n",
            encoding="utf-8")
        probe = {"interval": "500ms", "timeout": "2s", "fail_after": "2s"}
        dport = free_port()
        cfg = write_config(tmp_path / "logwatch.yaml", dport, tmp_path / "state", [
            target_cfg("grpc", str(tmp_path / "grpc.log"), rules="vllm", gpu=False, probe=probe),
            target_cfg("control", str(tmp_path / "control.log"), rules=str(tmp_path / "old.yaml"),
                       gpu=False, probe=probe),
        ], alerts=[{"type": "webhook", "name": "hook", "url": hook.url(), "on": ["unreachable"]}])
        d = daemons(cfg, dport).start()
        hook.wait(lambda g: g.json["kind"] == "unreachable" and g.json["target"] == "control",
                  timeout=40, what="the control's unreachable page")
        t = d.target("grpc")
        assert t is not None and t["status"] == "ready" and t["phase"] == "ready", t
        assert "serves no HTTP (--grpc): not probed" in str(t["probe"]), t["probe"]
        assert not hook.requests(lambda g: g.json["target"] == "grpc")
    finally:
        hook.close()
        srv.close()
        th.join(5)


# -- SGLang's Rust server: no ready line, its endpoint's answer is its ready ----------------------

def test_an_sglang_rust_server_is_ready_when_its_endpoint_answers(tmp_path: Path) -> None:
    """`SGLANG_RUST_SERVER=1` (0.5.23): rank 0's scheduler embeds the HTTP server, the main
    process runs no uvicorn and no warmup request, so no "fired up" comes; the listener
    says `Rust server listen on ADDR` and keeps /health at 503 until its own warmup passed.
    Before: watch read `cuda_graph` while the endpoint answered 200, exit 3 at its timeout
    (the daemon: `stalled` 10 minutes later).  Now ready once it answers, not on its 503s."""
    import http.server
    asked: list[int] = []

    class Warming(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = 503 if len(asked) < 3 else 200      # its warmup: three 503s first
            asked.append(code)
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Warming)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        port = srv.server_address[1]
        src = (ROOT / "tests/fixtures/built/sglang-0523-nextn.log").read_text(
            encoding="utf-8").splitlines()
        end = next(i for i, x in enumerate(src) if "max_total_num_tokens=" in x)
        lines = [src[0].replace("'port': 30000", f"'port': {port}, 'host': '127.0.0.1'")]
        lines += src[1:end + 1] + [f"[2026-12-01 10:06:37 TP0] SGLANG_RUST_SERVER enabled, "
                                   f"Rust server listen on 127.0.0.1:{port}"]
        log = tmp_path / "rust.log"
        log.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        res = subprocess.run(
            [sys.executable, "-m", "logwatch", "watch", str(log), "--timeout", "30s",
             "--no-history", "--gpu", "off"], cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
        assert "READY in" in res.stdout and "the endpoint answers" in res.stdout, res.stdout
        assert asked[:3] == [503, 503, 503] and 200 in asked, asked
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5)
