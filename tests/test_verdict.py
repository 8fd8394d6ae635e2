"""Exit codes and verdicts as one registry (logwatch/verdict.py, issue 33).

Every exit status the CLI returns is an `Exit` member (no command returns a bare number),
the README's table is the enum's, and the crash is said in one sentence everywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT
from logwatch.cli import main
from logwatch.sinks.alerts.kinds import ALERT_KINDS
from logwatch.verdict import Exit, Verdict, crash_text, exit_table

COMMANDS = [ROOT / "logwatch" / "cli.py", *sorted((ROOT / "logwatch" / "app").glob("*.py"))]
STANDALONE = {"simulate.py"}    # its own `python -m` tool: not a `logwatch` command's status


def _int_returns(path: Path) -> list[str]:
    """`return 2`, `return 0 if x else 1`, `sys.exit(3)` in functions annotated `-> int`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def literal(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and not isinstance(node.value, bool)
        if isinstance(node, ast.IfExp):
            return literal(node.body) or literal(node.orelse)
        return False

    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not (isinstance(fn.returns, ast.Name) and fn.returns.id == "int"):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and literal(node.value):
                found.append(f"{path.name}:{node.lineno} {fn.name}: {ast.unparse(node)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "exit") \
                and node.args and literal(node.args[0]):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_command_returns_a_bare_number() -> None:
    bare = [r for p in COMMANDS if p.name not in STANDALONE for r in _int_returns(p)]
    assert not bare, "exit statuses not from logwatch.verdict.Exit:\n  " + "\n  ".join(bare)


def test_the_scan_finds_a_bare_number(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text("import sys\ndef f() -> int:\n    return 0 if g() else 3\n"
                   "def h() -> str:\n    return 1\nsys.exit(2)\n")
    assert [r.split(" ", 1)[0] for r in _int_returns(src)] == ["x.py:3", "x.py:6:"]


@pytest.mark.parametrize("argv, code", [
    ([], Exit.USAGE),
    (["replay", "tests/fixtures/sglang-027.log"], Exit.OK),
    (["replay", "tests/fixtures/no-such-file.log"], Exit.USAGE),
    (["replay", "--rules", "no-such-pack", "tests/fixtures/sglang-027.log"], Exit.USAGE),
    (["rules", "check", "-q"], Exit.OK),
])
def test_what_the_cli_returns_is_a_member(argv: list[str], code: Exit, monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    got = main(argv)
    assert isinstance(got, Exit) and got == code, (argv, got)


@pytest.mark.integration
@pytest.mark.parametrize("cmd", ["watch --last tests/fixtures/sglang-027.log",
                                 "replay tests/fixtures/sglang-027.log tests/fixtures/vllm-030.log"])
def test_a_reader_gone_is_not_a_ready_verdict(cmd: str) -> None:
    """`logwatch watch ... | head -1` exited 0 (ready) after the reader left, before any
    verdict: a script with `set -o pipefail` read a crashing server as ready."""
    import subprocess
    import sys
    res = subprocess.run(["bash", "-o", "pipefail", "-c",
                          f"{sys.executable} -m logwatch {cmd} | head -c 1 >/dev/null"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == Exit.PIPE_CLOSED, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


@pytest.mark.integration
@pytest.mark.parametrize("cmd", ["watch --last tests/fixtures/sglang-027.log",
                                 "replay tests/fixtures/vllm-030.log"])
def test_an_output_that_cannot_be_written_is_said_not_a_crash(cmd: str) -> None:
    """`> /dev/full` (a full disk): a traceback and exit 1, which a script reads as crashed."""
    import subprocess
    import sys
    res = subprocess.run(["bash", "-c", f"{sys.executable} -m logwatch {cmd} > /dev/full"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == Exit.USAGE, (res.returncode, res.stderr)
    assert res.stderr.strip() == "logwatch: cannot write the output: No space left on device"


@pytest.mark.integration
@pytest.mark.parametrize("redirect, env", [(">&-", ""), ("", "PYTHONIOENCODING=ascii")])
def test_a_closed_or_narrow_stdout_keeps_the_verdict_s_status(redirect: str, env: str) -> None:
    """A ready log read with stdout closed (`>&-`: a traceback, exit 1 before) or an ASCII
    stdout (an encode error on a non-ASCII line, exit 1): the verdict's status, 0."""
    import subprocess
    import sys
    res = subprocess.run(["bash", "-c", f"{env} {sys.executable} -m logwatch watch --last "
                          f"tests/fixtures/sglang-003.log {redirect}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == Exit.OK, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr


@pytest.mark.integration
@pytest.mark.parametrize("log, code", [("sglang-003.log", Exit.OK), ("sglang-027.log", Exit.FAILED)])
@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full"])
def test_a_stderr_that_cannot_be_written_keeps_the_json_and_the_verdict(
        redirect: str, log: str, code: Exit) -> None:
    """`watch --json` writes its live display on stderr: closed (`2>&-`) or full, what is
    said there is dropped, the JSON object still comes on stdout with the verdict's status.
    Before: no JSON and exit 1 (the display's first line raised), read as "crashed"."""
    import json
    import subprocess
    import sys
    res = subprocess.run(["bash", "-c", f"{sys.executable} -m logwatch watch --last --json "
                          f"--probe off --gpu off tests/fixtures/{log} {redirect}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == code, (res.returncode, res.stdout)
    doc = json.loads(res.stdout)
    assert doc["phase"] == ("ready" if code == Exit.OK else "crashed"), doc


def test_every_member_has_a_meaning_and_a_kind() -> None:
    assert [int(e) for e in Exit] == [0, 1, 2, 3, 130, 141]
    for e in Exit:
        assert e.meaning and e.kind


def test_the_readme_table_is_the_enums() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert exit_table() in readme, "README's exit code table differs from logwatch.verdict " \
        "(paste exit_table())"
    codes = {int(line.split("|")[1]) for line in exit_table().splitlines()[2:]}
    assert codes == {int(e) for e in Exit}


@pytest.mark.parametrize("code, text, kind", [
    (Exit.OK, "ready", "ready"),
    (Exit.FAILED, "crashed: cuda_oom", "crashed"),
    (Exit.FAILED, "stopped (clean shutdown)", "stopped"),
    (Exit.TIMEOUT, "stalled in loading_shards", "stalled"),
    (Exit.TIMEOUT, "timed out after 20m: still starting", "timeout"),
    (Exit.USAGE, "the source failed", "error"),
    (Exit.INTERRUPTED, "interrupted", "interrupted"),
])
def test_a_verdict_is_an_alert_kind(code: Exit, text: str, kind: str) -> None:
    assert Verdict(code, text).kind == kind


def test_one_crash_sentence() -> None:
    assert crash_text(None) == "crashed"
    assert crash_text("cuda_oom") == "crashed: cuda_oom"
    assert crash_text("cuda_oom", "cuda_graph") == "crashed: cuda_oom during cuda_graph"
    assert crash_text("cuda_oom", "cuda_graph", 372.0, ["TP3 first", ""]) == \
        "crashed: cuda_oom during cuda_graph after 6m12s (TP3 first)"
    # a DP replica ahead of the startup: named with the startup's phase, its `first` once
    assert crash_text("cuda_oom", "cuda_graph", 40.0, ["DP2 first"], "DP2", "loading_shards") == \
        "crashed: cuda_oom during cuda_graph in DP2 after 40s " \
        "(the slowest replica still in loading_shards)"
    # the alert's sample summary (alerts test, README's payload) is the same sentence
    assert ALERT_KINDS["crashed"].sample_summary == crash_text("cuda_oom", "cuda_graph", 372.0)
