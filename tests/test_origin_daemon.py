"""Log text is data, against the real daemon (issue 29).

* Hostile prompts: a ready SGLang server whose request log (--log-requests, the real formats)
  carries every crash, restart, ready, endpoint and stop marker of every pack, and addresses
  of another port: no crash alert, no new startup, the probe keeps asking the server's own
  address and nothing ever connects to the other port.
* A log that names another address (the server's own `Uvicorn running on` line, with
  another host and a path): the probe asks the target's own host at that port, the pack's
  paths only; the answer there (a banner holding a secret) is never shown: not in
  /api/status, not in the webhook's or Slack's `unreachable` alert.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.receivers import IN_FLIGHT, Receiver
from support.daemon import (daemons, free_port, sim_texts, target_cfg, wait_for,  # noqa: F401
                        write_config)
from test_origin import hostile, sglang_request_lines, vllm_request_lines

pytestmark = pytest.mark.integration

PROBE = {"interval": "300ms", "timeout": "2s", "fail_after": "1s"}


class Listener:
    """A TCP port that records every connection and the request line it got, and answers
    `banner` (not HTTP) or nothing."""

    def __init__(self, host: str, port: int, banner: bytes = b"") -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.banner = banner
        self.lines: list[bytes] = []
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(2)
                try:
                    self.lines.append(conn.recv(4096).split(b"\r\n", 1)[0])
                    if self.banner:
                        conn.sendall(self.banner)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self.thread.join(5)
        self.sock.close()


def start_with_hooks(tmp_path: Path, daemons: Any, log: Path, kinds: list[str],  # noqa: F811
                     probe: Any, rules: str = "sglang") -> tuple[Any, Receiver, Receiver]:
    """A daemon watching `log` (one target, `node`) with a webhook and a Slack receiver for
    `kinds`: (daemon, webhook receiver, Slack receiver)."""
    hook, slack = Receiver().start(), Receiver().start()
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("node", str(log), gpu=False, probe=probe, rules=rules)],
        alerts=[{"type": "webhook", "name": "hook", "url": hook.url(), "on": kinds},
                {"type": "slack", "name": "slack", "url": slack.url("/services/T/B/x"),
                 "on": kinds}])
    return daemons(cfg, port).start(), hook, slack


def vllm_log(port: int) -> str:
    """A vLLM 0.11 startup to ready (lines of the pack's samples), listening on `port`."""
    return (f"(APIServer pid=1) INFO 01-01 10:00:00 [api_server.py:1839] vLLM API server "
            f"version 0.11.0\n"
            f"(APIServer pid=1) INFO 01-01 10:00:00 [utils.py:233] non-default args: "
            f"{{'model': 'Qwen/Qwen3-8B', 'port': {port}}}\n"
            f"(EngineCore_DP0 pid=2) INFO 01-01 10:00:10 [gpu_model_runner.py:1985] Model "
            f"loading took 2.8871 GiB and 5.965132 seconds\n"
            f"(APIServer pid=1) INFO 01-01 10:00:20 [api_server.py:1912] Starting vLLM API "
            f"server 0 on http://0.0.0.0:{port}\n"
            f"(APIServer pid=1) INFO:     Application startup complete.\n")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_hostile_prompts_page_nobody_restart_nothing_and_move_no_probe(
        engine: str, tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    app_port, other = free_port(), free_port()
    server = Receiver(port=app_port).start()          # the server's own HTTP side
    decoy = Listener("127.0.0.1", other)              # what the prompts name
    log = tmp_path / "server.log"
    log.write_text("".join(sim_texts(seed=3, port=app_port)) if engine == "sglang"
                   else vllm_log(app_port), encoding="utf-8")
    d, hook, slack = start_with_hooks(tmp_path, daemons, log, ["crashed", "unreachable"],
                                      PROBE, rules=engine)
    try:
        d.wait_metric("logwatch_probe_up", 1.0, timeout=30, target="node")
        before = d.target("node")
        assert before is not None and before["phase"] == "ready"
        url = before["probe"]["url"]
        assert url == f"http://127.0.0.1:{app_port}", url
        startups = d.metric("logwatch_startups_total", target="node")
        lines_before = d.metric("logwatch_lines_total", target="node") or 0
        extra = [f"Uvicorn running on http://127.0.0.1:{other}/admin/delete",
                 f"server_args=ServerArgs(model_path='x', port={other}, host='127.0.0.1')",
                 f"[2026-01-01 10:10:00] Uvicorn running on http://127.0.0.1:{other}",
                 f"(APIServer pid=1) INFO 01-01 10:00:20 [api_server.py:1912] Starting vLLM "
                 f"API server 0 on http://127.0.0.1:{other}",
                 f"non-default args: {{'port': {other}}}"]
        request_lines = sglang_request_lines if engine == "sglang" else vllm_request_lines
        lines = hostile(engine) + [x for p in extra for x in request_lines(p)]
        with open(log, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        wait_for(lambda: (d.metric("logwatch_lines_total", target="node") or 0)
                 >= lines_before + len(lines), timeout=60, what="the hostile lines read")
        probes = d.target("node")["probe"]["probes"]  # type: ignore[index]
        wait_for(lambda: d.target("node")["probe"]["probes"] >= probes + 4,  # type: ignore[index]
                 timeout=30, what="four more probes")
        # every line read and four probes made: any alert is decided, at most on its way
        hook.assert_quiet(IN_FLIGHT, lambda g: g.json["kind"] in ("crashed", "unreachable"),
                          what="a crash or unreachable alert")
        assert slack.requests() == []
        after = d.target("node")
        assert after is not None and after["phase"] == "ready", after["phase"]
        assert after["probe"]["url"] == url and after["probe"]["up"] is True, after["probe"]
        assert d.metric("logwatch_startups_total", target="node") == startups
        assert sum(v for (n, _), v in d.metrics().items() if n == "logwatch_crashes_total") == 0
        assert decoy.connections == 0, decoy.lines
    finally:
        decoy.close()
        server.close()
        hook.close()
        slack.close()


def test_a_log_naming_another_address_is_probed_on_the_target_host_and_never_shown(
        tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    app_port = free_port()
    secret = b"SECRET-7f3a9c token=hunter2 \xe2\x80\xae evil banner\r\n"
    own = Listener("127.0.0.1", app_port, banner=secret)   # the target's host, that port
    other = Listener("127.0.0.2", app_port)                # the host the log names
    texts = sim_texts(seed=3, port=app_port)
    texts.insert(2, f"[2026-01-01 10:00:00] INFO:     Uvicorn running on "
                    f"http://127.0.0.2:{app_port}/admin/delete (Press CTRL+C to quit)\n")
    log = tmp_path / "server.log"
    log.write_text("".join(texts), encoding="utf-8")
    d, hook, slack = start_with_hooks(tmp_path, daemons, log, ["unreachable"], PROBE)
    try:
        got = hook.wait(lambda g: g.json["kind"] == "unreachable", timeout=40,
                        what="unreachable")
        slack.wait(lambda g: True, timeout=20, what="the Slack alert")
        t = d.target("node")
        assert t is not None
        assert t["probe"]["url"] == f"http://127.0.0.1:{app_port}", t["probe"]
        assert "not HTTP (" in t["probe"]["status"], t["probe"]
        assert own.connections >= 1 and other.connections == 0, (own.lines, other.lines)
        asked = {line.split(b" ")[1] for line in own.lines if line}
        assert asked and asked <= {b"/health", b"/v1/models"}, own.lines
        _, status_body = d.get("/api/status")
        shown = [status_body, d.metrics_text()] + \
            [g.body.decode("utf-8", "replace") for g in hook.requests() + slack.requests()]
        for text in shown:
            for part in ("SECRET-7f3a9c", "hunter2", "evil banner", "/admin/delete"):
                assert part not in text, (part, text[:300])
        assert "not HTTP (" in got[0].json["summary"], got[0].json
    finally:
        own.close()
        other.close()
        hook.close()
        slack.close()
        time.sleep(0)
