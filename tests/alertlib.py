"""Helpers for the alert tests: local HTTP receivers with programmable answers, the real
daemon as a subprocess, log writing, polling with a deadline.

Nothing here sleeps to synchronise: `wait_for` polls a condition until a deadline and fails
with the last value it saw.  The only timed waits are `Receiver.assert_quiet` windows, which
assert that *nothing more* arrives during a bounded time (a negative check has no event to
wait for).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from conftest import ROOT
from daemonutil import (  # noqa: F401 - shared with the daemon tests
    append, count_lines, free_port, http_get, sim_texts, split_at, wait_for,
)

T0 = 1_767_261_600.0   # 2026-01-01 10:00:00 UTC: fixed log timestamps for generated logs
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
READY_LINE = "The server is fired up and ready to roll!"


# -- HTTP receivers -------------------------------------------------------------------------

@dataclass
class Got:
    """One request a receiver got, and what it answered."""

    at: float                       # time.monotonic() when the request was read
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0                 # the status it was answered with (0: not answered yet)
    answered_at: float = 0.0

    @property
    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


Answer = tuple[int, dict[str, str], bytes]
Responder = Callable[[Got, "Receiver"], Answer]


def hold(ev: threading.Event, rx: "Receiver", timeout: float = 25.0) -> None:
    """Block a responder until `ev` is set, the receiver closes or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while not ev.is_set() and not rx.release.is_set() and time.monotonic() < deadline:
        ev.wait(0.05)


def ok(got: Got, rx: "Receiver") -> Answer:
    return 200, {}, b"ok"


class Receiver:
    """A real HTTP server on a free loopback port, in a thread.  Every request is recorded;
    `responder(got, receiver)` decides the answer (it may block, e.g. on an Event)."""

    def __init__(self, responder: Responder = ok, port: int | None = None) -> None:
        self.responder = responder
        self.got: list[Got] = []
        self.lock = threading.Lock()
        self.release = threading.Event()   # set at close: a held responder lets go
        self.port = port or 0
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> "Receiver":
        rx = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                got = Got(time.monotonic(), self.command, self.path, dict(self.headers.items()),
                          body)
                with rx.lock:
                    rx.got.append(got)
                try:
                    status, headers, out = rx.responder(got, rx)
                except Exception as e:  # noqa: BLE001 - a broken responder answers 599
                    status, headers, out = 599, {}, repr(e).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                self.wfile.flush()
                got.status = status
                got.answered_at = time.monotonic()

            do_POST = do_GET = do_PUT = _handle

            def log_message(self, *a: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def requests(self, pred: Callable[[Got], bool] = lambda g: True) -> list[Got]:
        with self.lock:
            return [g for g in self.got if pred(g)]

    def wait(self, pred: Callable[[Got], bool], n: int = 1, timeout: float = 20.0,
             what: str = "requests", answered: bool = False, status: int | None = None,
             alive: Callable[[], str | None] | None = None) -> list[Got]:
        """Wait for `n` requests matching `pred` (answered ones, or answered with `status`)."""
        def check() -> list[Got] | None:
            got = self.requests(lambda g: pred(g) and (g.status != 0 or not answered)
                                and (status is None or g.status == status))
            return got if len(got) >= n else None
        try:
            return wait_for(check, timeout, what, alive=alive)
        except AssertionError as e:
            raise AssertionError(f"{e}\n  received so far: {self.brief()}") from None

    def assert_quiet(self, seconds: float, pred: Callable[[Got], bool] = lambda g: True,
                     what: str = "") -> None:
        """Nothing (matching `pred`) arrives for `seconds` (a bounded negative check)."""
        before = len(self.requests(pred))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            now = self.requests(pred)
            assert len(now) == before, f"unexpected request(s) {what}: {self.brief(now[before:])}"
            time.sleep(0.05)

    def brief(self, got: list[Got] | None = None) -> list[str]:
        out = []
        for g in (self.requests() if got is None else got):
            try:
                d = g.json
                if isinstance(d, dict) and "kind" in d:
                    desc = f"{d['kind']}/{d['status']} {d.get('target')}"
                elif isinstance(d, dict) and "text" in d:
                    desc = f"slack {d['text'][:80]!r}"
                else:
                    desc = json.dumps(d)[:160]
            except ValueError:
                desc = repr(g.body[:80])
            out.append(f"{g.method} {g.path} -> {g.status}: {desc}")
        return out


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(responder: Responder = ok, port: int | None = None, start: bool = True) -> Receiver:
        rx = Receiver(responder, port)
        made.append(rx)
        return rx.start() if start else rx

    yield make
    for rx in made:
        rx.close()


def hook(kind: str | None = None, status: str | None = None,
         target: str | None = None) -> Callable[[Got], bool]:
    """Predicate over generic-webhook requests by body fields."""
    def pred(g: Got) -> bool:
        try:
            d = g.json
        except ValueError:
            return False
        if not isinstance(d, dict) or "kind" not in d:
            return False
        return ((kind is None or d["kind"] == kind) and (status is None or d["status"] == status)
                and (target is None or d["target"] == target))
    return pred


# -- logs -------------------------------------------------------------------------------------


# -- the daemon -----------------------------------------------------------------------------

def write_config(path: Path, port: int, state_dir: Path, targets: list[dict[str, Any]],
                 alerts: list[dict[str, Any]], **extra: Any) -> Path:
    doc: dict[str, Any] = {"listen": f"127.0.0.1:{port}", "state_dir": str(state_dir),
                           "targets": targets, "alerts": alerts}
    doc.update(extra)
    # `on:` written as DESIGN.md writes it (a bare YAML key: the loader maps boolean `on`)
    text = yaml.safe_dump(doc, sort_keys=False, width=1000)
    text = re.sub(r"^(\s*(?:- )?)'on':", r"\1on:", text, flags=re.M)
    path.write_text(text, encoding="utf-8")
    return path


def target(name: str, source: Path, **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "source": str(source), "rules": "sglang"}
    d.update(kw)
    return d


class Daemon:
    """One `python -m logwatch run -c CONFIG` subprocess (cwd the repo); output to a file."""

    def __init__(self, config: Path, port: int, logdir: Path, env: dict[str, str] | None = None,
                 name: str = "daemon") -> None:
        self.config, self.port, self.logdir, self.name = config, port, logdir, name
        self.env = {**os.environ, **(env or {})}
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.stderr_path = logdir / f"{name}.stderr"

    def start(self, wait: bool = True) -> "Daemon":
        assert self.proc is None or self.proc.poll() is not None
        self.runs += 1
        self.stderr_path = self.logdir / f"{self.name}.{self.runs}.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "logwatch", "run", "-c", str(self.config)], cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=self.env)
        if wait:
            wait_for(lambda: self.get("/healthz")[0] == 200, 20, "/healthz", alive=self.dead)
        return self

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stderr().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def dead(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"daemon exited with {self.proc.returncode}; stderr:\n{self.stderr()[-4000:]}"
        return None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=20)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.base + path)

    def metric(self, name: str, **labels: str) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families
        code, body = self.get("/metrics")
        assert code == 200, body
        found = [s.value for fam in text_string_to_metric_families(body) for s in fam.samples
                 if s.name == name and set(labels.items()) <= set(s.labels.items())]
        assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
        return found[0] if found else None

    def target(self, name: str) -> dict[str, Any] | None:
        code, body = self.get("/api/status")
        assert code == 200, body
        return next((t for t in json.loads(body)["targets"] if t["name"] == name), None)

    def wait_target(self, name: str, pred: Callable[[dict[str, Any]], Any], what: str,
                    timeout: float = 20.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            t = self.target(name)
            return t if t is not None and pred(t) else None
        return wait_for(check, timeout, f"{name}: {what}", alive=self.dead)

    def wait_lines(self, name: str, n: int, timeout: float = 10.0) -> None:
        wait_for(lambda: self.metric("logwatch_lines_total", target=name) == n, timeout,
                 f"logwatch_lines_total{{target={name}}} == {n}", interval=0.02, alive=self.dead)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(config: Path, port: int, env: dict[str, str] | None = None,
             name: str = "daemon") -> Daemon:
        d = Daemon(config, port, tmp_path, env, name)
        made.append(d)
        return d

    yield make
    for d in made:
        d.cleanup()


def alert_state(state_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((state_dir / "alerts" / "state.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}


def outbox(state_dir: Path) -> list[dict[str, Any]]:
    return alert_state(state_dir).get("outbox", [])
