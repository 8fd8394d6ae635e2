"""`logwatch watch T1 T2 ...` as one launch, `--notify`, `--serve` (issue 16).

Real logs written by the simulator (and appended to while watch runs), real subprocesses,
real local HTTP receivers for --notify (the Slack one records what it got: a mock only for
the SaaS endpoint).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.receivers import Receiver, wait_for
from conftest import ROOT
from support.daemon import sim_texts

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

ARGS = ("--no-history", "--gpu", "off", "--probe", "off", "--timeout", "60s")


def run_watch(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logwatch", "watch", *args, *ARGS], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def write(path: Path, **kw: object) -> Path:
    path.write_text("".join(sim_texts(**kw)), encoding="utf-8")  # type: ignore[arg-type]
    return path


def objects(res: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in res.stdout.splitlines() if ln.strip()]


def test_json_two_targets_both_ready(tmp_path: Path) -> None:
    a = write(tmp_path / "node0.log", seed=1)
    b = write(tmp_path / "node1.log", seed=2)
    res = run_watch(str(a), str(b), "--json")
    assert res.returncode == 0, (res.stdout, res.stderr)
    docs = objects(res)
    assert [d["file"] for d in docs] == [str(a), str(b)]
    assert all(d["phase"] == "ready" and d["crash"] is None for d in docs)
    assert "ALL 2 READY" in res.stderr
    # each target's milestones carry its name; the display went to stderr
    assert f"{a}: phase ready" in res.stderr and f"{b}: phase ready" in res.stderr


def test_one_crash_fails_the_launch_and_is_named(tmp_path: Path) -> None:
    a = write(tmp_path / "node0.log", seed=1)
    b = write(tmp_path / "node1.log", seed=2, crash="oom")
    res = run_watch(str(a), str(b), "--json")
    assert res.returncode == 1, (res.stdout, res.stderr)
    docs = {d["file"]: d for d in objects(res)}
    assert set(docs) == {str(a), str(b)}
    assert docs[str(b)]["phase"] == "crashed"
    assert docs[str(b)]["crash"]["reason"] == "cuda_oom"  # type: ignore[index]
    verdict = [ln for ln in res.stderr.splitlines() if " crashed: cuda_oom at " in ln]
    assert verdict and verdict[0].split(" ", 1)[1].startswith(f"{b} crashed: cuda_oom at "), \
        res.stderr
    assert f"  {b}: crashed: cuda_oom during cuda_graph" in res.stderr


def test_a_crash_while_the_other_still_loads(tmp_path: Path) -> None:
    """The verdict does not wait for the slow node: exit 1 as soon as one crashed."""
    slow = tmp_path / "node0.log"
    slow.write_text(sim_texts(seed=1)[0], encoding="utf-8")    # launching, nothing more
    b = write(tmp_path / "node1.log", seed=2, crash="oom")
    t0 = time.monotonic()
    res = run_watch(str(slow), str(b))
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert time.monotonic() - t0 < 30
    assert f"{b} crashed: cuda_oom" in res.stdout
    assert f"  {slow}: launching" in res.stdout


def test_a_target_whose_startup_ended_before_the_attach_is_not_shown_as_ready(
        tmp_path: Path) -> None:
    """Two nodes; node1's log became ready 40 minutes ago and nothing came since: the verdict
    names it "while waiting for a new startup", and its row says that too.  Before, its row
    said "ready" with the idle server's `serving: 0 tok/s` under it, as if it served."""
    import os
    texts = sim_texts(download=False)
    a = tmp_path / "node0.log"          # still loading when the timeout comes
    a.write_text("".join(texts[: max(i for i, t in enumerate(texts) if "Load weight end" in t)]))
    b = write(tmp_path / "node1.log", start=time.time() - 45 * 60)
    old = time.time() - 40 * 60
    os.utime(b, (old, old))
    res = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(a), str(b),
                          "--no-history", "--gpu", "off", "--probe", "off", "--timeout", "3s"],
                         cwd=ROOT, capture_output=True, text=True, timeout=90,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 3, (res.stdout, res.stderr)
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith(f"  {b}: ")]
    assert len(rows) == 1, res.stdout
    assert rows[0].startswith(f"  {b}: no new startup since logwatch attached (the last one: "
                              "ready, 4"), rows
    assert "serving:" not in res.stdout.split(rows[0])[1], res.stdout


def test_usage_errors(tmp_path: Path) -> None:
    a = write(tmp_path / "node0.log", seed=1)
    for args, message in (((str(a), str(a)), "a TARGET is given twice"),
                          ((str(a), "-"), "stdin (-) can only be watched alone"),
                          ((str(a), "--notify", "slack"), "--notify: a Slack or webhook URL")):
        res = run_watch(*args)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)


def test_notify_posts_the_verdict_once(tmp_path: Path) -> None:
    hook = Receiver().start()
    slack = Receiver().start()
    try:
        a = write(tmp_path / "node0.log", seed=1)
        b = write(tmp_path / "node1.log", seed=2, crash="oom")
        res = run_watch(str(a), str(b), "--notify", hook.url("/hook"))
        assert res.returncode == 1, (res.stdout, res.stderr)
        got = hook.requests()
        assert len(got) == 1 and got[0].method == "POST"
        body = got[0].json
        assert body["kind"] == "crashed" and body["status"] == "firing"
        assert body["summary"].startswith(f"watch: {b} crashed: cuda_oom at "), body
        assert body["details"]["reason"] == "cuda_oom" and body["details"]["exit_code"] == 1
        assert any(t.startswith(f"{a}: ready") for t in body["details"]["targets"]), body
        assert got[0].header("Idempotency-Key")
        # a Slack webhook gets Slack's message (text + blocks), markup escaped
        res = run_watch(str(a), "--notify", slack.url("/services/T000/B000/slack"))
        assert res.returncode == 0, (res.stdout, res.stderr)
        got = slack.requests()
        assert len(got) == 1
        doc = got[0].json
        assert "text" in doc and "watch: ready" in doc["text"], doc
    finally:
        hook.close()
        slack.close()


def test_notify_bell_and_an_unreachable_receiver(tmp_path: Path) -> None:
    a = write(tmp_path / "node0.log", seed=1)
    res = run_watch(str(a), "--notify", "bell")
    assert res.returncode == 0 and "\a" in res.stdout
    res = run_watch(str(a), "--notify", "http://127.0.0.1:9/hook")    # nothing listens
    assert res.returncode == 0, res.stderr                              # the verdict's status
    assert "--notify: not delivered" in res.stdout


def start_serving(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[bytes]]:
    """`watch --serve` on a log that is ready; returns once watch says it is serving."""
    log = write(tmp_path / "server.log", seed=1, serve_lines=3)
    out = tmp_path / "out.txt"
    with open(out, "w", encoding="utf-8") as f:
        p = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", str(log), "--serve",
                              *ARGS], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: "serving (Ctrl-C to stop" in out.read_text(), timeout=30,
                 what="serving")
    except BaseException:
        p.kill()
        raise
    return log, out, p


def test_serve_keeps_going_until_a_crash(tmp_path: Path) -> None:
    log, out, p = start_serving(tmp_path)
    try:
        assert p.poll() is None           # ready, and still watching
        with open(log, "a", encoding="utf-8") as f:
            f.write("[2026-11-30 10:20:00 TP0] Scheduler hit an exception: Traceback (most "
                    "recent call last):\n"
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
        assert p.wait(timeout=30) == 1
        text = out.read_text()
        assert "CRASHED: cuda_oom during ready" in text, text
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_ctrl_c_after_ready_is_exit_0(tmp_path: Path) -> None:
    _, out, p = start_serving(tmp_path)
    try:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0
        text = out.read_text()
        assert "served until interrupted" in text and "phases:" in text, text
    finally:
        if p.poll() is None:
            p.kill()
