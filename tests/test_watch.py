"""`logwatch watch TARGET`, run as a subprocess exactly as users (and CI jobs) run it.

Exit status (DESIGN.md): 0 ready, 1 crashed or stopped, 3 timed out or stalled, 2 usage or
configuration error.  stdout is not a terminal here, so the output is the plain-line display.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import FIXTURES, ROOT
from logwatch.app.simulate import script
from logwatch.units import parse_duration

# `silent since 17:23`, or `Dec 07 23:51` once that was yesterday (a run after midnight)
SINCE = r"silent since (?:\w\w\w \d\d )?\d\d:\d\d"

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

JSON_KEYS = {"file", "engine", "phase", "phases_seen", "startups", "lines", "shards_loaded",
             "shards_total", "crash", "ready_line", "durations"}
CRASH_KEYS = {"reason", "during", "line", "line_number", "excerpt"}
STAMPED = re.compile(r"^\d\d:\d\d:\d\d \S")
OOM = "torch.OutOfMemoryError: CUDA out of memory"


def watch(*args: str, input: str | None = None, stdin: object = subprocess.DEVNULL,
          timeout: float = 90) -> subprocess.CompletedProcess[str]:
    kw: dict[str, object] = {"input": input} if input is not None else {"stdin": stdin}
    if "--probe" not in args:     # the log's verdict (ready means answering: tests/test_operator)
        args = (*args, "--probe", "off")
    return subprocess.run([sys.executable, "-m", "logwatch", "watch", *args], cwd=ROOT,
                          capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=timeout, **kw)  # type: ignore[call-overload]


def fixture(name: str) -> str:
    return str((FIXTURES / name).relative_to(ROOT))


def one_json(res: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """stdout holds exactly one JSON object (one line), with DESIGN.md's keys."""
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stdout
    doc = json.loads(lines[0])
    assert isinstance(doc, dict) and set(doc) == JSON_KEYS, doc
    if doc["crash"] is not None:
        assert set(doc["crash"]) == CRASH_KEYS  # type: ignore[arg-type]
    return doc


def verdict_line(out: str) -> str:
    """The verdict: the last timestamped line (the summary block is indented after it)."""
    return [ln for ln in out.splitlines() if STAMPED.match(ln)][-1]


def assert_plain(res: subprocess.CompletedProcess[str]) -> None:
    """Non-tty output: plain lines for CI logs: no ANSI codes, no carriage returns, every
    line a timestamped message or an indented part of the crash report."""
    for name, text in (("stdout", res.stdout), ("stderr", res.stderr)):
        assert "\x1b" not in text, f"ANSI escape in {name}: {text!r}"
        assert "\r" not in text, f"carriage return in {name}: {text!r}"
    for ln in res.stdout.splitlines():
        assert STAMPED.match(ln) or ln.startswith("  "), f"unexpected stdout line: {ln!r}"
    msgs = [ln[9:] for ln in res.stdout.splitlines() if STAMPED.match(ln)]
    # no message printed twice in a row (no redraw spam)
    repeats = [a for a, b in zip(msgs, msgs[1:]) if a == b]
    assert not repeats, repeats


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[callable]:  # type: ignore[valid-type]
    """Start `python -m logwatch.app.simulate PATH --speed 0.05 [...]` in the background."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> tuple[Path, subprocess.Popen[bytes]]:
        path = tmp_path / f"sim-{len(procs)}.log"
        p = subprocess.Popen([sys.executable, "-m", "logwatch.app.simulate", str(path),
                              "--speed", "0.05", *extra], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return path, p

    yield start
    for p in procs:
        if p.poll() is None:
            p.terminate()
        p.wait(timeout=10)


# ----------------------------------------------------------------------------------------------
# a log being written live

@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "poll"])
def test_ready_on_a_log_being_written(simulator, poll: bool) -> None:  # type: ignore[no-untyped-def]
    path, sim = simulator()
    res = watch(str(path), "--timeout", "60s", *(["--poll"] if poll else []))
    assert res.returncode == 0, (res.stdout, res.stderr)
    out = res.stdout
    for phase in ("launching", "loading_shards", "allocating", "autotune", "cuda_graph", "ready"):
        assert f"phase {phase}" in out, out
    last = verdict_line(out)
    assert STAMPED.match(last) and last[9:].startswith("READY"), out
    assert "Traceback" not in res.stderr
    assert_plain(res)
    # it stopped at ready, not at the end of the simulation
    assert sim.wait(timeout=30) == 0


def test_crash_oom_on_a_log_being_written(simulator) -> None:  # type: ignore[no-untyped-def]
    path, sim = simulator("--crash", "oom")
    res = watch(str(path), "--timeout", "60s")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert sim.wait(timeout=30) == 0
    file_lines = path.read_bytes().split(b"\n")   # physical lines (a tqdm bar's \r is not one)
    oom_line_no = next(i for i, ln in enumerate(file_lines, 1) if ln.startswith(OOM.encode()))
    out = res.stdout
    assert "phase crashed" in out
    assert re.search(r"^\d\d:\d\d:\d\d CRASHED: cuda_oom during cuda_graph after \S+$", out, re.M), out
    m = re.search(r"^  root cause \(line (\d+)\): (.*)$", out, re.M)
    assert m, out
    assert m.group(2).startswith(OOM) and int(m.group(1)) == oom_line_no
    # the excerpt: the lines before and through the root cause, as in the file
    excerpt = [ln[6:] for ln in out.splitlines() if ln.startswith("    | ")]
    assert "  excerpt:" in out.splitlines()
    assert any(ln.startswith(OOM) for ln in excerpt), excerpt
    assert any("Scheduler hit an exception" in ln for ln in excerpt), excerpt
    assert_plain(res)


# ----------------------------------------------------------------------------------------------
# stalled, timed out, stopped

def _script_text(until: str | None = None) -> str:
    steps = [s.text for s in script(download=False, start=1.7e9)]
    if until is not None:
        last = max(i for i, t in enumerate(steps) if until in t)
        steps = steps[: last + 1]
    return "".join(steps)


def test_stall_after(tmp_path: Path) -> None:
    path = tmp_path / "stuck.log"
    path.write_text(_script_text(until="Load weight begin"), encoding="utf-8")
    t0 = time.monotonic()
    res = watch(str(path), "--stall-after", "2s", timeout=60)
    took = time.monotonic() - t0
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert took < 20, took
    assert re.search(r"^\d\d:\d\d:\d\d stalled: no new line for .* in loading_shards$",
                     res.stdout, re.M), res.stdout
    assert verdict_line(res.stdout).endswith("stalled in loading_shards")
    assert_plain(res)


def test_timeout_while_launching(tmp_path: Path) -> None:
    path = tmp_path / "launching.log"
    path.write_text(_script_text(until="server_args="), encoding="utf-8")
    t0 = time.monotonic()
    res = watch(str(path), "--timeout", "2s", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert time.monotonic() - t0 < 20
    assert "phase launching" in res.stdout
    assert verdict_line(res.stdout).endswith("timed out after 2s in launching"), res.stdout
    assert_plain(res)


def test_the_total_counts_the_silent_phase_as_its_phases_do(tmp_path: Path) -> None:
    """A startup silent in cuda_graph when --timeout ends it (the real H200 trace, cut at
    `max_total_num_tokens`): the summary's total is the startup's wall time, the phases'
    sum here (none overlaps), the silence counted in both.  Before, the current phase
    counted on to now and the total stopped at the last line: `launching 1.0s ·
    loading_shards 17s · allocating 0.0s · cuda_graph 49s  (total 1m03s)`, 4 s short."""
    lines = (FIXTURES / "gpu" / "h200" / "startup-trace.log").read_bytes().split(b"\n")
    path = tmp_path / "server.log"
    path.write_bytes(b"\n".join(lines[:11]) + b"\n")    # the last: 15:57:28, in cuda_graph
    res = watch(str(path), "--no-history", "--timeout", "3s", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    m = re.search(r"^  phases: (.*)  \(total (\S+)\)$", res.stdout, re.M)
    assert m, res.stdout
    phases = {k: parse_duration(v) for k, v in
              (part.split(" ") for part in m.group(1).split(" · "))}
    assert list(phases) == ["launching", "loading_shards", "allocating", "cuda_graph"], phases
    assert phases["cuda_graph"] >= 45 + 3 - 1, phases        # 45 s in the log, 3 s more here
    assert abs(parse_duration(m.group(2)) - sum(phases.values())) <= 1.0, res.stdout


def test_the_timeout_is_said_as_it_was_given() -> None:
    """`--timeout 20m` ends with `timed out after 20m ...` (README's words); before, `1200s`."""
    from logwatch.app.watch import as_given
    from logwatch.units import parse_duration
    for given in ("20m", "1h", "1h30m", "45s", "2s", "90s", "1.5s"):
        said = as_given(parse_duration(given))
        assert parse_duration(said) == parse_duration(given), (given, said)
    assert [as_given(parse_duration(g)) for g in ("20m", "1h30m", "90s", "2s")] == \
        ["20m", "1h30m", "90s", "2s"]


def test_timeout_waiting_for_a_file_that_never_appears(tmp_path: Path) -> None:
    res = watch(str(tmp_path / "never.log"), "--wait", "--timeout", "1s", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert f"waiting for {tmp_path / 'never.log'} to appear" in res.stdout
    assert "timed out after 1s in waiting" in res.stdout


def test_a_crash_not_yet_final_at_the_timeout_exits_1(tmp_path: Path) -> None:
    """--timeout while a crash is in its settle window: the crash is known (the JSON and
    the summary say crashed), so the exit status is a crash's, 1, not a timeout's 3 as
    before.  A pack with a 60 s window makes the moment certain."""
    pack = tmp_path / "slow-settle.yaml"
    pack.write_text("name: slow-settle\nextends: sglang\ncrash_settle: 60s\n", encoding="utf-8")
    log = tmp_path / "server.log"
    log.write_text("")
    out, err = tmp_path / "out.json", tmp_path / "err.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", str(log), "--json",
                                 "--rules", str(pack), "--probe", "off", "--gpu", "off",
                                 "--no-history", "--timeout", "4s"],
                                cwd=ROOT, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while "source up" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)      # poll for watch reading the log (bounded by the deadline)
        with open(log, "a", encoding="utf-8") as f:
            f.write("".join(s.text for s in script(crash="oom")))
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = json.loads(out.read_text())
    assert doc["phase"] == "crashed" and code == 1, (code, doc["phase"], err.read_text()[-500:])


@pytest.mark.parametrize("relaunches", [1, 5])
def test_a_crash_a_supervisor_relaunches_at_once_is_the_verdict(tmp_path: Path,
                                                                relaunches: int) -> None:
    """A launch crashes and its supervisor relaunches it into the same log at once, before
    the crash's settle window is over (`until python -m sglang.launch_server ...; do :;
    done >> server.log`; a crash loop: each relaunch dies the same way).  watch exits 1 on
    the first crash, with its reason, in the JSON too.  Before, the relaunch wiped the crash
    before watch's next tick: "phase crashed", then the relaunch was followed (its READY,
    exit 0), and in a crash loop watch never exited."""
    log = tmp_path / "server.log"
    log.write_text("")
    out, err = tmp_path / "out.json", tmp_path / "err.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", str(log), "--json",
                                 "--probe", "off", "--gpu", "off", "--no-history",
                                 "--timeout", "30s"],
                                cwd=ROOT, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while "source up" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)      # poll for watch reading the log (bounded by the deadline)
        now = time.time()
        crashes = "".join("".join(s.text for s in script(crash="oom", start=now + k, seed=k))
                          for k in range(relaunches))
        with open(log, "a", encoding="utf-8") as f:   # in one write: one read, one tick
            f.write(crashes + "".join(s.text for s in script(start=now + relaunches)))
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = json.loads(out.read_text())
    said = err.read_text()
    assert code == 1 and doc["phase"] == "crashed", (code, doc["phase"], said[-800:])
    assert doc["crash"]["reason"] == "cuda_oom" and doc["startups"] == 1, doc
    assert "CRASHED: cuda_oom" in said and "READY" not in said, said[-800:]


def test_clean_vllm_stop_exits_1() -> None:
    res = watch(fixture("vllm-030.log"), "--timeout", "30s", "--last")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "phase stopped" in res.stdout
    assert verdict_line(res.stdout).endswith("stopped (clean shutdown)")
    assert_plain(res)


# ----------------------------------------------------------------------------------------------
# --json

def _two_startups(tmp_path: Path) -> tuple[Path, bytes, int]:
    old = "".join(s.text for s in script(crash="oom", start=1.7e9))   # an old crashed startup
    new = "".join(s.text for s in script(start=1.7e9 + 600, serve_lines=5))
    path = tmp_path / "server.log"
    path.write_text(old + new, encoding="utf-8")
    return path, (old + new).encode(), len(old.encode())


def test_json_reports_from_the_latest_startup(tmp_path: Path) -> None:
    path, data, new_at = _two_startups(tmp_path)
    res = watch(str(path), "--json", "--timeout", "30s")
    assert res.returncode == 0, (res.stdout, res.stderr)
    doc = one_json(res)
    assert doc["file"] == str(path) and doc["engine"] == "sglang"
    assert doc["phase"] == "ready" and doc["crash"] is None
    assert doc["startups"] == 1          # the old crashed startup is not read
    assert doc["lines"] == data[new_at:].count(b"\n")
    assert doc["shards_loaded"] == doc["shards_total"] == 24
    assert "ready to roll" in str(doc["ready_line"])
    # the live display went to stderr
    assert "watching" in res.stderr and "READY" in res.stderr
    assert "\x1b" not in res.stderr


def test_json_of_a_vllm_log_reports_from_its_latest_launch(tmp_path: Path) -> None:
    """The same for vLLM under `--rules auto` (the default): an old crashed launch, then one
    that serves, read from the latest launch's version line.  Before, every pack's markers
    were read with SGLang's envelope: no vLLM launch line was found, the log was read from
    byte 0 (2 startups, every line), and with `--rules vllm` from its arguments line."""
    built = Path(__file__).parent / "fixtures" / "built"
    old = (built / "vllm-034-jit-crash-generic.log").read_bytes()
    new = (built / "vllm-034-default.log").read_bytes()
    path = tmp_path / "server.log"
    path.write_bytes(old + new)
    for rules in ("auto", "vllm"):
        res = watch(str(path), "--json", "--rules", rules, "--timeout", "30s")
        assert res.returncode == 0, (res.stdout, res.stderr)
        doc = one_json(res)
        assert (doc["engine"], doc["phase"], doc["startups"]) == ("vllm", "ready", 1), doc
        assert doc["lines"] == new.count(b"\n"), rules


def test_json_from_start_reads_every_startup(tmp_path: Path) -> None:
    path, data, _ = _two_startups(tmp_path)
    res = watch(str(path), "--json", "--from-start", "--timeout", "30s")
    assert res.returncode == 0, (res.stdout, res.stderr)
    doc = one_json(res)
    assert doc["startups"] == 2 and doc["phase"] == "ready"
    assert doc["lines"] == data.count(b"\n")


def test_json_on_a_crash(simulator) -> None:  # type: ignore[no-untyped-def]
    path, _ = simulator("--crash", "oom")
    res = watch(str(path), "--json", "--timeout", "60s")
    assert res.returncode == 1, (res.stdout, res.stderr)
    doc = one_json(res)
    crash = doc["crash"]
    assert isinstance(crash, dict)
    assert (crash["reason"], crash["during"]) == ("cuda_oom", "cuda_graph")
    assert str(crash["line"]).startswith(OOM)
    assert any(str(ln).startswith(OOM) for ln in crash["excerpt"])


# ----------------------------------------------------------------------------------------------
# stdin

def test_stdin_pipe() -> None:
    raw = (FIXTURES / "sglang-027.log").read_bytes()
    res = watch("-", "--json", input=raw.decode("utf-8"), timeout=60)
    assert res.returncode == 1, (res.stdout, res.stderr)
    doc = one_json(res)
    assert doc["file"] == "-" and doc["phase"] == "crashed"
    assert doc["crash"]["reason"] == "cuda_oom"  # type: ignore[index]
    # every physical line once, the unterminated last one included (stdin ended)
    assert doc["lines"] == raw.count(b"\n") + (not raw.endswith(b"\n"))


def test_stdin_pipe_plain_output() -> None:
    raw = (FIXTURES / "sglang-027.log").read_bytes()
    res = watch("-", input=raw.decode("utf-8"), timeout=60)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "CRASHED: cuda_oom during cuda_graph" in res.stdout
    assert re.search(r"^  root cause \(line 12\): torch\.OutOfMemoryError:", res.stdout, re.M)
    assert_plain(res)


def test_stdin_redirected_from_a_file() -> None:
    """`logwatch watch - < server.log`: stdin is a regular file, not a pipe."""
    with open(FIXTURES / "sglang-027.log", "rb") as f:
        res = watch("-", "--json", stdin=f, timeout=60)
    assert res.returncode == 1, (res.stdout, res.stderr)
    doc = one_json(res)
    assert doc["crash"]["reason"] == "cuda_oom"  # type: ignore[index]


# ----------------------------------------------------------------------------------------------
# --rules

def test_rules_vllm_on_a_vllm_crash() -> None:
    res = watch(fixture("vllm-018.log"), "--rules", "vllm", "--json", "--timeout", "30s", "--last")
    assert res.returncode == 1, (res.stdout, res.stderr)
    doc = one_json(res)
    assert doc["engine"] == "vllm" and doc["phase"] == "crashed"
    assert doc["crash"]["reason"] == "cuda_oom"  # type: ignore[index]


def test_rules_vllm_on_a_vllm_ready_log() -> None:
    res = watch(fixture("vllm-027.log"), "--rules", "vllm", "--timeout", "30s", "--last")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "READY" in verdict_line(res.stdout)
    assert_plain(res)


def test_auto_rules_pick_vllm() -> None:
    res = watch(fixture("vllm-027.log"), "--json", "--timeout", "30s", "--last")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert one_json(res)["engine"] == "vllm"


# ----------------------------------------------------------------------------------------------
# usage and configuration errors: exit 2

@pytest.mark.parametrize("args,message", [
    (["cmd:"], "cmd: needs a command"),
    (["cmd:   "], "cmd: needs a command"),
    (["cmd:/nonexistent/logwatch-no-such-tool logs -f x"], "cannot run /nonexistent/logwatch-no-such-tool"),
    (["tests/fixtures"], "is a directory"),
    (["x.log", "--rules", "no-such-pack"], "no-such-pack"),
], ids=["cmd-empty", "cmd-blank", "cmd-missing-executable", "directory", "unknown-pack"])
def test_bad_target_exits_2(args: list[str], message: str) -> None:
    res = watch(*args, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("opt", ["--timeout", "--stall-after"])
def test_bad_duration_exits_2_with_usage(opt: str) -> None:
    res = watch(fixture("sglang-003.log"), opt, "abc", timeout=60)
    assert res.returncode == 2
    assert "usage:" in res.stderr and opt in res.stderr, res.stderr
    assert res.stdout == ""


# ----------------------------------------------------------------------------------------------
# cmd: targets (commands that terminate; they are restarted, their output is not re-read)

def test_cmd_target_ready() -> None:
    res = watch(f"cmd:cat {fixture('sglang-003.log')}", "--timeout", "30s")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "READY" in verdict_line(res.stdout)
    assert_plain(res)


def test_cmd_target_restarted_without_duplicates_until_timeout() -> None:
    path = FIXTURES / "sglang-021.log"
    res = watch(f"cmd:cat {fixture('sglang-021.log')}", "--json", "--timeout", "3s")
    assert res.returncode == 3, (res.stdout, res.stderr)
    doc = one_json(res)
    assert doc["phase"] == "allocating"
    # cat ran several times; every complete line was read once
    assert "restarting in" in res.stderr
    assert doc["lines"] == path.read_bytes().count(b"\n")
    assert doc["startups"] == 1 and doc["shards_loaded"] == 1


@pytest.mark.parametrize("target", ["file", "cmd"])
def test_crash_whose_root_cause_is_the_unterminated_last_line(target: str) -> None:
    """sglang-027 ends with `torch.OutOfMemoryError:` and no newline (labelled cuda_oom).
    Replay and stdin read that last line; a watch that ends on the crash after its settle
    time should too, instead of reporting the generic traceback header."""
    t = fixture("sglang-027.log")
    res = watch(t if target == "file" else f"cmd:cat {t}", "--json", "--timeout", "30s",
                *(["--last"] if target == "file" else []))
    assert res.returncode == 1, (res.stdout, res.stderr)
    crash = one_json(res)["crash"]
    assert isinstance(crash, dict)
    assert (crash["reason"], crash["line"], crash["line_number"]) == \
        ("cuda_oom", "torch.OutOfMemoryError:", 12), crash


def test_colour_codes_in_the_log_do_not_reach_the_output(tmp_path: Path) -> None:
    """A log written with colours (vLLM/SGLang on a tty, `docker logs` of a tty container):
    the crash report quotes its lines without the escape codes."""
    text = "".join(s.text for s in script(crash="oom", start=1.7e9, download=False))
    text = (text.replace("Scheduler hit", "\x1b[31mScheduler hit")
                .replace("torch.OutOfMemoryError", "\x1b[1;31mtorch.OutOfMemoryError\x1b[0m")
                .replace("Capture cuda graph begin", "\x1b[32mCapture cuda graph begin\x1b[0m"))
    path = tmp_path / "colour.log"
    path.write_text(text, encoding="utf-8")
    res = watch(str(path), "--timeout", "30s")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert re.search(r"^  root cause \(line \d+\): torch\.OutOfMemoryError: CUDA out of memory",
                     res.stdout, re.M), res.stdout
    assert_plain(res)


def test_the_verdict_ends_with_a_summary_folded_excerpt_and_time_to_crash() -> None:
    """The crash of a 4-rank startup: `after <time>`, each per-rank milestone once with its
    count, and the summary block (phases with the total, shards)."""
    text = "".join(s.text for s in script(crash="oom", download=False, start=1.7e9))
    res = watch("-", input=text)
    assert res.returncode == 1, res.stderr
    out = res.stdout
    m = re.search(r"CRASHED: cuda_oom during cuda_graph after (\S+)$", out, re.M)
    assert m and m.group(1) not in ("", "?"), out
    excerpt = [ln[6:] for ln in out.splitlines() if ln.startswith("    | ")]
    assert any(ln.endswith("(x4 ranks)") for ln in excerpt), excerpt
    assert len([ln for ln in excerpt if "Capture cuda graph begin" in ln]) <= 1, excerpt
    assert re.search(r"^  phases: launching \S+ .* \(total \S+\)$", out, re.M), out
    assert re.search(r"^  shards: 24/24$", out, re.M), out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_prints_the_summary_and_exits_130(tmp_path: Path, sig: int) -> None:
    """Ctrl-C; and what a CI runner's timeout sends (SIGTERM), a closed terminal (SIGHUP):
    those two died at 143 / 129 with no summary and no --json object."""
    log = tmp_path / "server.log"
    log.write_text(_script_text(until="Load weight end"))
    proc = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", str(log)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    for line in proc.stdout:          # the startup was read: now the user presses Ctrl-C
        if "phase allocating" in line or "phase loading_shards" in line:
            break
    proc.send_signal(sig)
    rest, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, (rest, err)
    assert re.search(r"^\d\d:\d\d:\d\d interrupted in \w+$", rest, re.M), rest
    assert "  phases: launching" in rest and "Traceback" not in err, (rest, err)


# ----------------------------------------------------------------------------------------------
# a startup that ended before watch started is history, not news

def _old_log(tmp_path: Path, minutes: float, crash: str | None = None) -> Path:
    path = tmp_path / "server.log"
    path.write_text(_script_text() if crash is None else
                    "".join(s.text for s in script(start=1_767_261_600.0, crash=crash)))
    old = time.time() - minutes * 60
    os.utime(path, (old, old))
    return path


def test_an_old_ready_log_is_history_not_a_false_ready(tmp_path: Path) -> None:
    path = _old_log(tmp_path, 23)
    res = watch(str(path), "--timeout", "3s", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    out = res.stdout
    assert re.search(r"the latest startup in this log became ready 2[34]m\d\ds ago; the log has "
                     r"been idle since (?:\w\w\w \d\d )?\d\d:\d\d:\d\d; waiting for a new startup",
                     out), out
    assert "READY" not in out and "phase ready" not in out, out
    assert "while waiting for a new startup" in verdict_line(out)
    assert_plain(res)


def test_an_old_crash_then_no_launch_times_out_as_after_an_old_ready(tmp_path: Path) -> None:
    """The latest startup crashed 40 min before watch attached (history), and no launch
    came before --timeout: 3, "no launch came", as after an old ready or stop.  Before: 1,
    as if the new launch had crashed (a CI step could not tell them apart)."""
    path = _old_log(tmp_path, 40, crash="oom")
    res = watch(str(path), "--timeout", "4s", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert re.search(r"the latest startup in this log crashed \(cuda_oom\) \d+m\d\ds ago",
                     res.stdout), res.stdout
    assert "while waiting for a new startup" in verdict_line(res.stdout)


def test_last_reports_the_ended_startup_and_exits(tmp_path: Path) -> None:
    path = _old_log(tmp_path, 23)
    res = watch(str(path), "--last", "--timeout", "30s")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "became ready" in res.stdout and verdict_line(res.stdout)[9:].startswith("READY in")
    crashed = _old_log(tmp_path, 40, crash="oom")
    res = watch(str(crashed), "--last", "--json", "--timeout", "30s")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert one_json(res)["phase"] == "crashed"
    assert "crashed (cuda_oom)" in res.stderr and "40m" in res.stderr, res.stderr


def test_a_log_read_at_once_to_its_ready_line_shows_no_eta_of_zero() -> None:
    """`watch - < server.log` (or --last): the lines come in one batch that ends ready; the
    progress line printed in it said `ready in ~0.0s (rough)` beside `phase loading_shards`
    (the ETA of the view after the batch: ready)."""
    log = (FIXTURES / "built" / "vllm-034-default.log").read_text()
    res = watch("-", "--no-history", input=log)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert re.search(r"^\d\d:\d\d:\d\d shards 17/17 ", res.stdout, re.M), res.stdout
    assert "ready in ~" not in res.stdout, res.stdout


def test_a_log_that_begins_mid_startup_has_no_launch_to_time_from(tmp_path: Path) -> None:
    """`kubectl logs --tail=26 ... | logwatch watch -`: the window of a vLLM 0.34 start that
    took 4m33s begins at its JIT warmup.  Before: `READY in 1m34s`, and replay's `ready after
    1m34s`: what the window showed, said as launch-to-ready.  A log whose first line is a
    traceback (sglang-039: the launch rotated away, the file last written 10 minutes ago):
    before, `CRASHED: ... after 10m00s`, the file's age."""
    log = (FIXTURES / "built" / "vllm-034-default.log").read_text()
    assert verdict_line(watch("-", "--no-history", input=log).stdout)[9:].startswith(
        "READY in 4m33s")
    window = "".join(log.splitlines(True)[32:])
    res = watch("-", "--no-history", input=window)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert verdict_line(res.stdout)[9:].startswith("READY (slowest phase"), res.stdout
    path = tmp_path / "window.log"
    path.write_text(window)
    out = subprocess.run([sys.executable, "-m", "logwatch", "replay", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    assert out.startswith(f"{path}: ready  [vllm]"), out
    crash = tmp_path / "server.log"
    crash.write_bytes((FIXTURES / "sglang-039.log").read_bytes())
    old = time.time() - 600
    os.utime(crash, (old, old))
    res = watch(str(crash), "--last", "--no-history")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "ago" in res.stdout and " after " not in verdict_line(res.stdout), res.stdout
    assert verdict_line(res.stdout)[9:] == "CRASHED: weight_loading_error during waiting"


def test_a_window_of_a_startup_is_not_the_next_eta_s_basis(tmp_path: Path) -> None:
    """The window of a vLLM start from its JIT warmup (autotune, graphs, the KV commit:
    1m34s of 4m33s), watched with history on: before, it was kept as a ready startup, and
    the next start of the TARGET had an ETA `from 1 earlier startup` with launching and the
    shards at 0 s (93 s at launch for a 4m33s start); now a startup without its launch is
    not kept (the next ETA is rough)."""
    from logwatch.state.history import StartupHistory, watch_state_dir
    lines = (FIXTURES / "built" / "vllm-034-default.log").read_text().splitlines(True)
    path = tmp_path / "server.log"
    path.write_text("".join(lines[32:]))
    res = watch(str(path), "--last")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert StartupHistory(watch_state_dir(), str(path)).typical() == {}


def _watch_through_a_relaunch(args: list[str], relaunch: Callable[[], None],
                              said_on: str = "stdout") -> tuple[int, str, str, str]:
    """Start `watch ARGS`; once it said the log's last startup is history, `relaunch()`;
    (exit code, what it said before, stdout, stderr after)."""
    p = subprocess.Popen([sys.executable, "-m", "logwatch", "watch", *args], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        seen = ""
        stream = p.stdout if said_on == "stdout" else p.stderr
        assert stream is not None
        while "waiting for a new startup" not in seen:   # the old one was said: relaunch
            assert time.monotonic() < deadline and p.poll() is None, seen
            seen += stream.readline()
        relaunch()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, seen, out, err


def _watch_an_oom_appended(path: Path) -> tuple[int, str, str, str]:
    """`watch PATH`; once the old startup is said, a relaunch that dies of CUDA OOM is
    appended to the log (`>>`)."""
    def relaunch() -> None:
        with open(path, "a") as f:
            f.write("".join(s.text for s in script(start=1_767_300_000.0, crash="oom")))
    return _watch_through_a_relaunch([str(path), "--timeout", "60s"], relaunch)


def test_after_an_old_startup_watch_exits_on_the_new_one(tmp_path: Path) -> None:
    """The engineer relaunches the server appending to the same log: watch, started before
    the new server_args= line, ignores the old ready and exits on the new crash."""
    rc, seen, out, err = _watch_an_oom_appended(_old_log(tmp_path, 30))
    out = seen + out
    assert rc == 1, (out, err)
    assert "became ready" in out
    assert re.search(r"CRASHED: cuda_oom", out), out


def test_another_engine_appended_after_a_crash_is_read_by_its_rules(tmp_path: Path) -> None:
    """vLLM crashed half an hour ago; the engineer tries SGLang, appending to the same log
    (`>>`).  Before, vLLM's rules read SGLang's launch: no new startup, the engine said
    vllm.  Now the bytes after the final crash are looked at again: SGLang's rules, a new
    startup, its crash."""
    path = tmp_path / "server.log"
    path.write_bytes((FIXTURES / "vllm-024.log").read_bytes())
    old = time.time() - 30 * 60
    os.utime(path, (old, old))
    rc, seen, out, err = _watch_an_oom_appended(path)
    out = seen + out
    assert rc == 1, (out, err)
    assert "the latest startup in this log crashed" in seen, seen
    assert re.search(r"engine: sglang writes the log now \(was vllm\)", out), out
    assert "new startup (#2)" in out and re.search(r"CRASHED: cuda_oom", out), out


def test_a_pattern_follows_the_relaunch_into_its_own_log_file(tmp_path: Path) -> None:
    """One log file per launch (`server-$(date +%s).log`): watch 'logs/server-*.log' reads
    the newest, says its ended startup is history, and exits on the relaunch's verdict,
    written to a new file."""
    logs = tmp_path / "logs"
    logs.mkdir()
    os.rename(_old_log(tmp_path, 30), logs / "server-1764900000.log")

    def relaunch() -> None:
        (logs / "server-1764903600.log").write_text(
            "".join(s.text for s in script(start=1_767_300_000.0, crash="oom")))

    rc, seen, out, err = _watch_through_a_relaunch(
        [str(logs / "server-*.log"), "--timeout", "60s", "--probe", "off", "--json"],
        relaunch, said_on="stderr")
    assert rc == 1, (out, seen + err)
    assert "became ready" in seen
    doc = one_json(subprocess.CompletedProcess([], 1, out, ""))
    assert doc["phase"] == "crashed" and doc["crash"]["reason"] == "cuda_oom"  # type: ignore[index]
    assert doc["startups"] == 2, doc


def test_a_pattern_that_matches_nothing_exits_2_unless_waited_for(tmp_path: Path) -> None:
    (tmp_path / "server.log.txt").write_text("x\n")
    res = watch(str(tmp_path / "server-*.log"), "--timeout", "5s", timeout=30)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"no file matches {tmp_path / 'server-*.log'}" in res.stderr
    assert "--wait" in res.stderr
    res = watch(str(tmp_path / "*" / "server.log"), "--timeout", "5s", timeout=30)
    assert res.returncode == 2 and "only be in the file name" in res.stderr, res.stderr
    res = watch(str(tmp_path / "server-*.log"), "--wait-for-file", "--timeout", "1s",
                timeout=30)
    assert res.returncode == 3, (res.stdout, res.stderr)


# ----------------------------------------------------------------------------------------------
# mistyped targets

@pytest.mark.parametrize("target,hint", [
    ("gpu-node-1:/root/x.log", "did you mean ssh://gpu-node-1/root/x.log?"),
    ("root@gpu-node-1:/var/log/sglang.log", "did you mean ssh://root@gpu-node-1/var/log/sglang.log?"),
])
def test_scp_style_target_is_refused_with_the_ssh_url(target: str, hint: str) -> None:
    res = watch(target, "--timeout", "5s", timeout=30)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert hint in res.stderr, res.stderr


def test_a_missing_directory_exits_2_unless_waited_for(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    res = watch(str(missing / "x.log"), "--timeout", "5s", timeout=30)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{missing} does not exist" in res.stderr and "--wait" in res.stderr
    res = watch(str(missing / "x.log"), "--wait-for-file", "--timeout", "1s", timeout=30)
    assert res.returncode == 3, (res.stdout, res.stderr)


def test_while_the_log_is_silent_a_line_a_minute_says_so() -> None:
    """The display's quiet notes (pure: a view and a clock, no minute of waiting)."""
    import io
    from logwatch.sinks.display import PlainDisplay
    from logwatch.view import TargetView
    out = io.StringIO()
    disp = PlainDisplay("t", out)
    now = 10_000.0

    def view(at: float) -> TargetView:
        return TargetView(name="t", engine="sglang", source="t", kind="file", labels={}, now=at,
                          phase="loading_shards", source_up=True, source_message="reading t",
                          last_line="Loading safetensors checkpoint shards:  48% 40/83",
                          last_line_at=now - 125)

    disp.update(view(now), [], now)
    disp.update(view(now + 30), [], now + 30)        # not a minute since: nothing more
    disp.update(view(now + 61), [], now + 61)
    notes = [ln for ln in out.getvalue().splitlines() if "no new line" in ln]
    assert len(notes) == 2, out.getvalue()
    assert notes[0].endswith("no new line for 2m05s; last: Loading safetensors checkpoint "
                             "shards:  48% 40/83"), notes
    assert "no new line for 3m06s" in notes[1]


def test_a_log_silent_before_the_attach_says_how_long_at_once(tmp_path: Path) -> None:
    """The H200 trace cut in cuda_graph, last written 5 minutes before watch attached (a
    capture that hangs; its 15-minute budget not yet spent): the quiet line says the 5
    minutes at once, and the stall comes when that silence passes the budget.  Before, the
    silence counted from the read: nothing for a minute, then "no new line for 1m00s" (the
    panel, status's LAST LINE and /api/status the same), the stall a budget after the read."""
    lines = (FIXTURES / "gpu" / "h200" / "startup-trace.log").read_bytes().split(b"\n")
    path = tmp_path / "server.log"
    path.write_bytes(b"\n".join(lines[:11]) + b"\n")
    old = time.time() - 300
    os.utime(path, (old, old))
    res = watch(str(path), "--no-history", "--timeout", "3s", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    notes = [ln for ln in res.stdout.splitlines() if "no new line for" in ln]
    assert len(notes) == 1, res.stdout
    assert re.search(r"no new line for 5m0\ds; last: \[2026-12-04 15:57:28 TP0\] max_total",
                     notes[0]), notes
    # 3 s short of cuda_graph's 15-minute budget: stalled within seconds, saying the log's
    # silence (before: 15 minutes after the attach, "no new line for 15m00s")
    near = time.time() - 15 * 60 + 3
    os.utime(path, (near, near))
    res = watch(str(path), "--no-history", "--gpu", "off", "--timeout", "10s", timeout=60)
    assert re.search(r"^\d\d:\d\d:\d\d stalled: no new line for 15m0\ds in cuda_graph$",
                     res.stdout, re.M), res.stdout
    # an ended startup: the attach note says the idle time; no quiet line beside it
    done = tmp_path / "done.log"
    done.write_bytes(b"\n".join(lines[:51]) + b"\n")
    os.utime(done, (old, old))
    res = watch(str(done), "--no-history", "--timeout", "2s", timeout=60)
    assert "became ready" in res.stdout and "no new line" not in res.stdout, res.stdout


@pytest.mark.parametrize("term", ["dumb", "unknown", "xterm-256color"])
def test_a_dumb_terminal_gets_the_plain_lines(monkeypatch: pytest.MonkeyPatch,
                                              term: str) -> None:
    """TERM=dumb on a terminal (Emacs' shell, a CI runner's pseudo-terminal): rich draws
    no panel there, so the panel's display showed the phase names alone (no watching /
    source / shards / ETA / quiet lines); the plain lines are all there."""
    import pty
    from logwatch.sinks.display import MultiDisplay, PlainDisplay, RichDisplay, make_display
    monkeypatch.setenv("TERM", term)
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            disp = make_display("t", tty)
            multi = MultiDisplay(["a", "b"], tty)
            live = term.startswith("xterm")
            assert isinstance(disp, RichDisplay) is live, type(disp)
            assert isinstance(disp, PlainDisplay)
            assert (multi.live is not None) is live
    finally:
        os.close(master)
        os.close(slave)


def test_an_engine_decided_late_is_named_not_called_a_relaunch() -> None:
    """`rules: auto` on a log whose first lines name no engine: the pack decided after the
    hold was said as "sglang writes the log now (was auto)", a relaunch's words."""
    import io
    from logwatch.sinks.display import PlainDisplay
    from logwatch.view import TargetView
    out = io.StringIO()
    disp = PlainDisplay("t", out)

    def view(engine: str) -> TargetView:
        return TargetView(name="t", engine=engine, source="t", kind="file", labels={}, now=1.0,
                          source_up=True, source_message="reading t")

    for engine in ("auto", "sglang", "vllm"):
        disp.update(view(engine), [], 1.0)
    notes = [ln.split(" ", 1)[1] for ln in out.getvalue().splitlines() if "engine:" in ln]
    assert notes == ["engine: read by sglang's rules (--rules PACK to choose)",
                     "engine: vllm writes the log now (was sglang): read by its rules"], notes


def test_the_attach_note_names_the_settled_crash_reason(tmp_path: Path) -> None:
    """sglang-027's last line (the OOM) has no newline: it is read when the crash settles.
    The note about the ended startup names that reason, the same as the verdict."""
    path = tmp_path / "server.log"
    path.write_bytes((FIXTURES / "sglang-027.log").read_bytes())
    old = time.time() - 30 * 60
    os.utime(path, (old, old))
    for extra in ((), ("--last",)):
        res = watch(str(path), "--timeout", "6s", "--no-history", *extra)
        note = [ln for ln in res.stdout.splitlines() if "the latest startup in this log" in ln]
        assert note and "crashed (cuda_oom)" in note[0], res.stdout


def test_watch_a_tensorrt_llm_log(tmp_path: Path) -> None:
    """`watch` on TensorRT-LLM logs, plain output, engine detected: a start to ready with its
    phases and shards; a multi-rank OOM with the rank that failed first and the executor's
    own line as the root cause; both through stdin as a log being written."""
    ready = (FIXTURES / "trtllm-012.log").read_text(encoding="utf-8")
    res = watch("-", "--timeout", "30s", "--no-history", input=ready)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert re.search(r"READY in 1m53s \(slowest phase: loading_shards 46s\)", res.stdout), res.stdout
    assert re.search(r"^  shards: 15/15$", res.stdout, re.M), res.stdout
    oom = (FIXTURES / "trtllm-005.log").read_text(encoding="utf-8")
    res = watch("-", "--timeout", "30s", "--no-history", input=oom)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "CRASHED: cuda_oom" in verdict_line(res.stdout), res.stdout
    assert "  first rank to crash: RANK 1" in res.stdout
    assert re.search(r"^  root cause \(line 1\): .*Executor creation failed due to insufficient "
                     r"GPU memory\.$", res.stdout, re.M), res.stdout
    assert_plain(res)


def test_stdin_from_dev_null_ends_not_hangs() -> None:
    """A CI job's stdin is often /dev/null: `watch -` printed an asyncio traceback (epoll
    refuses a device) and then waited forever; now it reads it as a file that ends."""
    with open(os.devnull, "rb") as null:
        res = subprocess.run([sys.executable, "-m", "logwatch", "watch", "-", "--json"],
                             stdin=null, capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert res.returncode == 3, (res.returncode, res.stderr)
    assert json.loads(res.stdout)["phase"] == "waiting"
    assert "Traceback" not in res.stderr and "stdin closed" in res.stderr, res.stderr


def test_a_log_without_stamps_silent_before_the_attach_counts_its_phase_from_its_last_write(
        tmp_path: Path) -> None:
    """A hung load whose log has no stamps (the hub's and tqdm's bars only, its last bar
    frame without a newline), last written 20 minutes before watch attached.  Before: its
    phase opened when it was read, so the summary said `loading_shards 0.0s (total 0.0s)`
    beside `stalled: no new line for 20m`; the unfinished last line was read 5 s later and
    timed then (a launch line so cut: `launching 13s`); --last said one such log was
    stalled and another (its bar read after the verdict) only "still starting"."""
    path = tmp_path / "server.log"
    path.write_bytes(
        b"Loading safetensors checkpoint shards:   0% Completed | 0/163 [00:00<?, ?it/s]\n"
        b"Loading safetensors checkpoint shards:  98% Completed | 160/163 [31:58<00:30, 10.12s/it]\n"
        b"Loading safetensors checkpoint shards:  99% Completed | 161/163 [32:07<00:19, 10.00s/it]\n"
        b"Loading safetensors checkpoint shards:")
    old = time.time() - 20 * 60
    os.utime(path, (old, old))
    for args in (["--last"], ["--timeout", "10s"]):
        res = watch(str(path), "--no-history", "--gpu", "off", *args, timeout=60)
        assert res.returncode == 3, (res.stdout, res.stderr)
        m = re.search(r"phases: loading_shards (\d+)m\d\ds  \(total (\d+)m\d\ds\)", res.stdout)
        assert m and int(m.group(1)) == int(m.group(2)) == 20, res.stdout
        assert re.search(SINCE + r" \(20m\d\ds\): server probably dead",
                         res.stdout), res.stdout
    # a stamped launch line cut mid-write: read with the rest, its phase from its stamp
    cut = tmp_path / "cut.log"
    cut.write_bytes(b"+ python3 -m sglang.launch_server --model m\n"
                    b"[2025-06-23 15:06:53] server_args=ServerArgs(model_path='m', tp_size=8")
    os.utime(cut, (old, old))
    res = watch(str(cut), "--no-history", "--gpu", "off", "--last", timeout=60)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert re.search(r"stalled in launching; silent since", res.stdout), res.stdout
    assert re.search(r"phases: launching 20m\d\ds", res.stdout), res.stdout


def test_a_moment_of_another_day_says_its_day(tmp_path: Path) -> None:
    """The attach note and the dead-at-attach verdict name a moment of another day with its
    day: before, a log idle two days read "idle since 14:52:47", taken for today's."""
    from logwatch.units import fmt_clock
    now = time.time()
    assert re.fullmatch(r"\d\d:\d\d:\d\d", fmt_clock(now - 1, now)) or \
        time.localtime(now - 1).tm_yday != time.localtime(now).tm_yday
    assert re.fullmatch(r"[A-Z][a-z]{2} \d\d \d\d:\d\d", fmt_clock(now - 2 * 86400, now, False))
    old = now - 2 * 86400
    ready = tmp_path / "ready.log"
    ready.write_bytes((FIXTURES / "sglang-003.log").read_bytes())
    stuck = tmp_path / "stuck.log"
    stuck.write_bytes(b"Loading safetensors checkpoint shards:  50% Completed | 1/2 "
                      b"[00:05<00:05,  5.00s/it]\n")
    for path in (ready, stuck):
        os.utime(path, (old, old))
    day = time.strftime("%b %d", time.localtime(old))
    res = watch(str(ready), "--no-history", "--gpu", "off", "--last", timeout=60)
    assert f"the log has been idle since {day} " in res.stdout, res.stdout
    res = watch(str(stuck), "--no-history", "--gpu", "off", "--last", timeout=60)
    assert f"silent since {day} " in res.stdout, res.stdout
