"""Helpers for the tests that run `logwatch run` as a real subprocess.

The daemon is started exactly as users start it (`python -m logwatch run -c CONFIG`, cwd the
repository), on a free loopback port, with its state in the test's tmp_path.  Nothing here
sleeps to synchronise: `wait_for` polls a condition until a deadline and fails with the last
value it saw.

`Daemon` and the `daemons` fixture are the only wrapper of the daemon process: the alert
tests get them through support.receivers, which re-exports them (there were two copies, which drifted).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from conftest import ROOT
from logwatch.app.simulate import script

T0 = 1_767_261_600.0   # 2026-01-01 10:00:00 UTC: fixed log timestamps for generated logs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(fn: Callable[[], Any], timeout: float = 20.0, what: str = "condition",
             interval: float = 0.05, alive: Callable[[], str | None] | None = None) -> Any:
    """Poll `fn` until it returns something truthy (returned) or the deadline passes.
    Exceptions count as "not yet" (a port not listening yet).  `alive` returns an error
    message when waiting is pointless (the daemon exited)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
            last = e
        if alive is not None:
            dead = alive()
            if dead:
                raise AssertionError(f"while waiting for {what}: {dead}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


# -- Prometheus text ------------------------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of `name` whose labels include `labels` (None if there is none)."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else None


def targets_in(samples: Samples) -> set[str]:
    return {v for (_, ls) in samples for k, v in ls if k == "target"}


# -- logs -------------------------------------------------------------------------------------

def sim_texts(**kw: Any) -> list[str]:
    """The simulator's log as the list of texts it writes (fixed timestamps, no pauses)."""
    kw.setdefault("start", T0)
    return [s.text for s in script(**kw)]


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def split_at(texts: list[str], marker: str, occurrence: int = 1) -> int:
    """Index of the step whose text contains `marker` (the n-th occurrence)."""
    n = 0
    for i, t in enumerate(texts):
        if marker in t:
            n += 1
            if n == occurrence:
                return i
    raise ValueError(marker)


# -- the daemon -----------------------------------------------------------------------------

def target_cfg(name: str, source: Path | str, **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "source": str(source), "rules": "sglang"}
    d.update(kw)
    return d


CHECKPOINT_1S: dict[str, Any] = {"interval": "1s"}


def write_config(path: Path, port: int, state_dir: Path, targets: list[dict[str, Any]], *,
                 checkpoint: dict[str, Any] | None = CHECKPOINT_1S, bare_on: bool = False,
                 **extra: Any) -> Path:
    """Write a daemon config listening on 127.0.0.1:`port`; `extra` are more top-level keys
    (`alerts=[...]`), after `targets`.

    `checkpoint`: by default every 1 s, so that a test that kills the daemon waits for a
    checkpoint seconds, not the default interval; None leaves the key out (the daemon's
    default, as the alert tests run it).
    `bare_on`: write the alerts' `on:` keys bare, as DESIGN.md writes them (PyYAML quotes the
    key, `'on':`, since bare `on` is a YAML 1.1 boolean; the loader maps the boolean back), and
    do not wrap long values (width 1000).  support.receivers' write_config is this with
    checkpoint=None, bare_on=True.
    """
    doc: dict[str, Any] = {"listen": f"127.0.0.1:{port}", "state_dir": str(state_dir)}
    if checkpoint is not None:
        doc["checkpoint"] = checkpoint
    doc["targets"] = targets
    doc.update(extra)
    if bare_on:
        text = yaml.safe_dump(doc, sort_keys=False, width=1000)
        text = re.sub(r"^(\s*(?:- )?)'on':", r"\1on:", text, flags=re.M)
    else:
        text = yaml.safe_dump(doc, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def fleet_config(tmp: Path, n: int, port: int) -> tuple[list[Path], Path]:
    """`n` empty local logs `s0.log` ... and a daemon config following them as targets `s0`
    ... (checkpoints every 60 s): the many-targets scenes (a flood, a fleet behind)."""
    logs = [tmp / f"s{i}.log" for i in range(n)]
    for p in logs:
        p.write_text("")
    cfg = write_config(tmp / "logwatch.yaml", port, tmp / "state",
                       [target_cfg(f"s{i}", p) for i, p in enumerate(logs)],
                       checkpoint={"interval": "60s"})
    return logs, cfg


class Daemon:
    """One `python -m logwatch run -c CONFIG` subprocess (cwd the repository); its stdout and
    stderr go to a file (never a pipe that could fill up and block it).

    The one wrapper of the real daemon for every test (the daemon, Prometheus, deploy and alert
    tests: support.receivers re-exports it), so that a fix to how the daemon is started or polled
    reaches all of them.

    `env`: variables set for the daemon, over the test process's own environment (a webhook
    secret the config names in `secret_env`).  They are merged over `os.environ` at each
    `start()`, so without `env` the daemon inherits the environment exactly as a plain
    `Popen` would.  `logdir` is where the output files go, one per start:
    `<logdir>/<name>.<run>.stderr`.
    """

    def __init__(self, config: Path, port: int, logdir: Path, env: dict[str, str] | None = None,
                 name: str = "daemon") -> None:
        if isinstance(env, str):
            # the old order was Daemon(config, port, logdir, name)
            raise TypeError(f"Daemon(): env must be a dict, got {env!r}; pass the name as name=")
        self.config = config
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.logdir = logdir
        self.name = name
        self.env: dict[str, str] = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.stderr_path = logdir / f"{name}.stderr"

    # process
    def start(self, wait: bool = True) -> "Daemon":
        """Start (or restart, after it exited) the daemon; with `wait`, return once /healthz
        answers 200 (failing at once, with its output, if it exits first)."""
        assert self.proc is None or self.proc.poll() is not None
        self.runs += 1
        self.stderr_path = self.logdir / f"{self.name}.{self.runs}.stderr"
        err = open(self.stderr_path, "wb")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "logwatch", "run", "-c", str(self.config)], cwd=ROOT,
                stdin=subprocess.PIPE, stdout=err, stderr=err, env={**os.environ, **self.env})
        finally:
            err.close()
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # no stdin (not /dev/null: do not depend on it)
        if wait:
            self.wait_healthy()
        return self

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON log events of the current run's output (other lines skipped)."""
        out = []
        for line in self.stderr().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def dead(self) -> str | None:
        """An error message if the daemon has exited (for `wait_for(alive=...)`), else None."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"daemon exited with {self.proc.returncode}; stderr:\n{self.stderr()[-4000:]}"
        return None

    def wait_healthy(self, timeout: float = 20.0) -> None:
        wait_for(lambda: self.get("/healthz")[0] == 200, timeout, "/healthz", alive=self.dead)

    def wait_reading(self, target: str, timeout: float = 20.0) -> None:
        """Until `target`'s source is open (its size at attach taken): lines appended from
        then on are read live, not found at attach (where only the latest startup counts)."""
        wait_for(lambda: self.metric("logwatch_source_up", target=target) == 1.0, timeout,
                 f"{target}'s source up", alive=self.dead)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int:
        """SIGTERM, and the exit status (within 20 s)."""
        self.signal(signal.SIGTERM)
        return self.wait_exit(20.0)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    # HTTP
    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.base + path)

    def metrics(self) -> Samples:
        return parse_metrics(self.metrics_text())

    def metrics_text(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200, body
        return body

    def metric(self, name: str, **labels: str) -> float | None:
        """The one sample of `name` whose labels include `labels` (None if there is none)."""
        return sample(self.metrics(), name, **labels)

    def status(self) -> dict[str, Any]:
        code, body = self.get("/api/status")
        assert code == 200, body
        return json.loads(body)

    def target(self, name: str) -> dict[str, Any] | None:
        for t in self.status()["targets"]:
            if t["name"] == name:
                return t
        return None

    def wait_target(self, name: str, pred: Callable[[dict[str, Any]], Any], what: str,
                    timeout: float = 20.0) -> dict[str, Any]:
        """Poll /api/status until target `name` satisfies `pred` (returned); on timeout the
        error shows the target's state as it is then."""
        def check() -> dict[str, Any] | None:
            t = self.target(name)
            return t if t is not None and pred(t) else None
        try:
            return wait_for(check, timeout, f"{name}: {what}", alive=self.dead)
        except AssertionError as e:
            t = None
            try:
                t = self.target(name)
            except Exception:  # noqa: BLE001
                pass
            brief = {k: t.get(k) for k in ("phase", "epoch", "startups", "lines", "source_state",
                                           "shards")} if t else None
            raise AssertionError(f"{e}\n  target now: {brief}") from None

    def wait_metric(self, name: str, value: float, timeout: float = 20.0, **labels: str) -> None:
        def check() -> bool:
            v = sample(self.metrics(), name, **labels)
            return v is not None and (v == value or (math.isnan(value) and math.isnan(v)))
        try:
            wait_for(check, timeout, f"{name}{labels} == {value}", alive=self.dead)
        except AssertionError as e:
            got = None
            try:
                got = sample(self.metrics(), name, **labels)
            except Exception:  # noqa: BLE001
                pass
            raise AssertionError(f"{e}\n  {name}{labels} is {got}") from None

    def wait_lines(self, name: str, n: int, timeout: float = 10.0) -> None:
        """Until logwatch_lines_total{target=name} is `n` (polled every 20 ms)."""
        wait_for(lambda: self.metric("logwatch_lines_total", target=name) == n, timeout,
                 f"logwatch_lines_total{{target={name}}} == {n}", interval=0.02, alive=self.dead)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Factory: daemons(config, port, env=None, name="daemon") -> Daemon (not started; its
    output files in tmp_path); every one made is killed at teardown."""
    made: list[Daemon] = []

    def make(config: Path, port: int, env: dict[str, str] | None = None,
             name: str = "daemon") -> Daemon:
        d = Daemon(config, port, tmp_path, env, name)
        made.append(d)
        return d

    yield make
    for d in made:
        d.cleanup()


def checkpoint(state_dir: Path, target: str) -> dict[str, Any] | None:
    p = state_dir / "positions" / f"{target}.json"
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


__all__ = ["CHECKPOINT_1S", "Daemon", "T0", "append", "checkpoint", "count_lines", "daemons",
           "free_port", "http_get", "parse_metrics", "sample", "sim_texts", "split_at",
           "target_cfg", "targets_in", "wait_for", "write_config"]


PROMETHEUS = "/usr/bin/prometheus"


class Prometheus:
    """Debian's prometheus on a free loopback port, scraping one daemon every second (and
    evaluating `rule_file` every second, if given)."""

    def __init__(self, tmp: Path, scrape_port: int, rule_file: Path | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        conf = tmp / "prometheus.yml"
        doc: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "logwatch", "scrape_interval": "1s",
                                "scrape_timeout": "1s",
                                "static_configs": [{"targets": [f"127.0.0.1:{scrape_port}"]}]}],
        }
        if rule_file is not None:
            doc["rule_files"] = [str(rule_file)]
        conf.write_text(yaml.safe_dump(doc), "utf-8")
        self.log = tmp / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'prom-data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdin=subprocess.PIPE, stdout=out, stderr=out, cwd=tmp)
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def dead(self) -> str | None:
        if self.proc.poll() is not None:
            return f"prometheus exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
        return None

    def api(self, path: str, **params: str) -> Any:
        code, body = http_get(f"{self.base}/api/v1/{path}?" + urllib.parse.urlencode(params))
        assert code == 200, body
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, q: str) -> list[dict[str, Any]]:
        return self.api("query", query=q)["result"]  # type: ignore[no-any-return]

    def value(self, q: str) -> float | None:
        r = self.query(q)
        if len(r) != 1:
            return None
        return float(r[0]["value"][1])

    def names(self) -> set[str]:
        return set(self.api("label/__name__/values"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
