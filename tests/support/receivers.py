"""Helpers for the alert tests: local HTTP receivers with programmable answers, the alert
tests' config writer; and, re-exported from support.daemon, the real daemon as a subprocess, log
writing, polling with a deadline.

Nothing here sleeps to synchronise: `wait_for` polls a condition until a deadline and fails
with the last value it saw.  The only timed waits are `Receiver.assert_quiet` windows, which
assert that *nothing more* arrives during a bounded time (a negative check has no event to
wait for).
"""

from __future__ import annotations

import json
import signal
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from support import daemon
# The daemon wrapper and its fixture are support.daemon's (one wrapper for every test that runs the
# real daemon, so a fix to starting or polling it reaches them all); re-exported here so that
# the alert tests import everything they need from one place.
from support.daemon import (  # noqa: F401 - shared with the daemon tests
    T0, Daemon, append, count_lines, daemons, free_port, http_get, sim_texts, split_at, wait_for,
)

# after the daemon has made a decision, what a delivery already on its way needs to arrive
IN_FLIGHT = 0.5
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
READY_LINE = "The server is fired up and ready to roll!"


NCCL_LINE = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
             "NCCLUtils.hpp:268, unhandled system error (run with NCCL_DEBUG=INFO for details).")


LOOP_EVERY = 600.0   # a restart loop's launches, by their stamps: 10 minutes apart


def crash_loop(n: int, nccl: tuple[int, ...] = (), first: int = 0) -> str:
    """`n` startups in one log, each dying of a CUDA OOM (a server in a restart loop), but
    the crashes numbered in `nccl` (from 0; `first` numbers the first of these), which die
    of an NCCL error instead.  Launch i is stamped `LOOP_EVERY` * i after 10:00 (a loop's
    crashes come minutes apart: one an hour after the last is a new attempt)."""
    out = []
    for i in range(first, first + n):
        text = "".join(sim_texts(crash="oom", start=1_767_261_600.0 + LOOP_EVERY * i, seed=i))
        if i in nccl:
            text = text.replace(OOM_LINE + ".", NCCL_LINE)
        out.append(text)
    return "".join(out)


def hung_launch(i: int) -> tuple[str, str]:
    """Launch `i` of `crash_loop` (an OOM) split where it hangs: up to the start of its CUDA
    graph capture, and the rest (its crash), for a loop whose launches each stall first."""
    texts = sim_texts(crash="oom", start=1_767_261_600.0 + LOOP_EVERY * i, seed=i)
    cut = split_at(texts, "Capture cuda graph begin")
    return "".join(texts[:cut + 1]), "".join(texts[cut + 1:])


def serving_crash(stamp: str = "2026-01-01 11:30:00") -> str:
    """A ready SGLang server's scheduler dying of a CUDA OOM, as 0.5.23 logs it: its
    exception announced, the traceback, the main process's SIGQUIT (a cause line alone,
    after ready, is a request's error: no crash)."""
    return (f"[{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2712,'
            " in run_scheduler_process\n"
            f"{OOM_LINE}\n"
            f"[{stamp}] Received sigquit from a child process. It usually means the child "
            "failed.\n")


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


def down_until(up: threading.Event) -> Responder:
    """A receiver that answers 503 until `up` is set, then 200 (Slack down, then back)."""
    return lambda got, rx: ok(got, rx) if up.is_set() else (503, {}, b"down")


class Receiver:
    """A real HTTP server on a free loopback port, in a thread.  Every request is recorded;
    `responder(got, receiver)` decides the answer (it may block, e.g. on an Event)."""

    def __init__(self, responder: Responder = ok, port: int | None = None,
                 tls: "ssl.SSLContext | None" = None) -> None:
        self.responder = responder
        self.tls = tls                     # serve https (support.tls `server_context`)
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
        if self.tls is not None:      # the handshake in the handler's thread, not in accept
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True,
                                                      do_handshake_on_connect=False)
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

    def assert_not_sent_again(self, d: Daemon, kind: str,
                              pred: Callable[[Got], bool] = lambda g: True, n: int = 1,
                              since_start: bool = False, timeout: float = 20.0,
                              what: str = "") -> None:
        """The daemon decides a `kind` alert `n` more times (`since_start`: n times since it
        started) and sends none of them (matching `pred`) again.  Instead of a quiet time long
        enough for the decision to happen, the daemon's own count of decisions made before
        (`logwatch_alerts_repeated_total{kind}`, per process) is waited for; then a short
        window for a delivery already on its way."""
        before = len(self.requests(pred))
        base = 0.0 if since_start else d.metric("logwatch_alerts_repeated_total", kind=kind) or 0.0
        wait_for(lambda: (d.metric("logwatch_alerts_repeated_total", kind=kind) or 0.0)
                 >= base + n, timeout, f"{n} repeated {kind} decision(s) {what}", alive=d.dead)
        self.assert_quiet(IN_FLIGHT, pred, what)
        now = self.requests(pred)
        assert len(now) == before, f"unexpected request(s) {what}: {self.brief(now[before:])}"

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


# -- the daemon -----------------------------------------------------------------------------

def write_config(path: Path, port: int, state_dir: Path, targets: list[dict[str, Any]],
                 alerts: list[dict[str, Any]], **extra: Any) -> Path:
    """support.daemon's write_config with the `alerts` every alert test has, the daemon's default
    checkpoint interval (no `checkpoint:` key) and `on:` written as DESIGN.md writes it (a bare
    YAML key: the loader maps boolean `on`)."""
    extra.setdefault("checkpoint", None)
    return daemon.write_config(path, port, state_dir, targets, bare_on=True,
                                   alerts=alerts, **extra)


def reload_with(d: Daemon, cfg: Path, port: int, state_dir: Path,
                targets: list[dict[str, Any]], alerts: list[dict[str, Any]], n: int) -> None:
    """Write the config with these targets and sinks, SIGHUP the daemon, and wait for its
    `n`-th reload since it started."""
    write_config(cfg, port, state_dir, targets, alerts)
    d.signal(signal.SIGHUP)
    wait_for(lambda: len([e for e in d.log_events() if e.get("event") == "reloaded"]) == n,
             10, f"reload {n}", alive=d.dead)


# the same target entry as support.daemon's, under the name the alert tests use
target = daemon.target_cfg


def alert_state(state_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((state_dir / "alerts" / "state.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}


def outbox(state_dir: Path) -> list[dict[str, Any]]:
    return alert_state(state_dir).get("outbox", [])
