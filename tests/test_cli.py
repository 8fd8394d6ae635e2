"""The `logwatch` command line, run as a subprocess exactly as users run it (DESIGN.md "CLI")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

JSON_KEYS = {"file", "engine", "phase", "phases_seen", "startups", "lines", "shards_loaded",
             "shards_total", "crash", "ready_line", "durations"}
CRASH_KEYS = {"reason", "during", "line", "line_number", "excerpt"}
PHASES = {"waiting", "launching", "downloading", "loading_shards", "allocating", "autotune",
          "cuda_graph", "ready", "crashed", "stopped"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def fixture(name: str) -> str:
    return str((FIXTURES / name).relative_to(ROOT))


# ----------------------------------------------------------------------------------------------
# help

@pytest.mark.integration
def test_main_help() -> None:
    res = run_cli("--help")
    assert res.returncode == 0
    for word in ("replay", "rules"):
        assert word in res.stdout


@pytest.mark.integration
def test_replay_help() -> None:
    res = run_cli("replay", "--help")
    assert res.returncode == 0
    for word in ("--json", "--timeline", "--rules", "FILE", "sglang", "vllm"):
        assert word in res.stdout


@pytest.mark.integration
def test_rules_help() -> None:
    res = run_cli("rules", "--help")
    assert res.returncode == 0
    assert "check" in res.stdout and "test" in res.stdout


@pytest.mark.integration
def test_rules_check_help() -> None:
    res = run_cli("rules", "check", "--help")
    assert res.returncode == 0
    assert "PACK" in res.stdout


@pytest.mark.parametrize("command", [["watch"], ["replay"], ["history"], ["compare"],
                                     ["status"], ["rules", "check"], ["rules", "test"]])
def test_a_scripted_command_s_help_says_its_exit_statuses(command: list[str]) -> None:
    """A script's author reads `--help` for what the status means; before, `history`,
    `compare` and `rules test` said none (README's table: 1 is "nothing recorded")."""
    import contextlib
    import io
    from logwatch.cli import build_parser
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    text = " ".join(out.getvalue().split()).lower()
    assert re.search(r"exit (status: )?0 ", text) and " 2 " in text, text[-400:]


def test_the_help_names_every_engine_shipped() -> None:
    """`logwatch --help` and `watch --help` name the three engines whose packs ship (before:
    "(SGLang, vLLM)" beside rules/trtllm.yaml)."""
    import contextlib
    import io
    from logwatch.cli import build_parser
    for command in ([], ["watch"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            build_parser().parse_args([*command, "--help"])
        text = " ".join(out.getvalue().split())
        assert "SGLang, vLLM, TensorRT-LLM" in text, (command, text[:300])


@pytest.mark.integration
def test_no_command_is_a_usage_error() -> None:
    res = run_cli()
    assert res.returncode == 2
    assert "usage" in res.stderr.lower()


@pytest.mark.integration
def test_unknown_command_is_a_usage_error() -> None:
    res = run_cli("frobnicate")
    assert res.returncode == 2


# ----------------------------------------------------------------------------------------------
# replay: human summary

@pytest.mark.integration
def test_replay_human_crash() -> None:
    res = run_cli("replay", fixture("sglang-027.log"))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "crashed: cuda_oom" in out
    assert "during cuda_graph" in out
    assert "[sglang]" in out
    m = re.search(r"root cause \(line (\d+)\): (.*)", out)
    assert m, out
    assert m.group(2).startswith("torch.OutOfMemoryError:")
    physical = (FIXTURES / "sglang-027.log").read_bytes().split(b"\n")[int(m.group(1)) - 1]
    assert m.group(2) in physical.decode("utf-8", "replace")


@pytest.mark.integration
def test_replay_human_ready() -> None:
    res = run_cli("replay", fixture("sglang-003.log"))
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith(fixture("sglang-003.log") + ": ready")
    # a serving-only window: the first served batch proves readiness (fixtures/README.md)
    first_line = (FIXTURES / "sglang-003.log").read_text().split("\n")[0]
    assert f"ready: {first_line[:150]}" in res.stdout


@pytest.mark.integration
def test_replay_human_still_starting() -> None:
    res = run_cli("replay", fixture("sglang-021.log"))
    assert res.returncode == 0, res.stderr
    assert "still starting: allocating" in res.stdout
    assert "shards 1/1" in res.stdout


# ----------------------------------------------------------------------------------------------
# replay --json

JSON_FILES = ["sglang-027.log", "sglang-003.log", "sglang-021.log", "vllm-003.log"]


@pytest.mark.integration
def test_replay_json_several_files() -> None:
    res = run_cli("replay", "--json", *[fixture(n) for n in JSON_FILES])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == len(JSON_FILES)
    docs = [json.loads(ln) for ln in lines]
    for doc, name in zip(docs, JSON_FILES):
        assert set(doc) == JSON_KEYS, name
        assert doc["file"] == fixture(name)
        assert doc["engine"] == name.split("-")[0]
        assert doc["phase"] in PHASES
        assert isinstance(doc["phases_seen"], list)
        assert len(doc["phases_seen"]) == len(set(doc["phases_seen"]))
        assert isinstance(doc["startups"], int) and doc["startups"] >= 0
        assert isinstance(doc["lines"], int) and doc["lines"] > 0
        assert isinstance(doc["durations"], dict)
        assert all(isinstance(v, (int, float)) and v >= 0 for v in doc["durations"].values())
        assert set(doc["durations"]) <= PHASES
        exp = json.loads((FIXTURES / name.replace(".log", ".expect.json")).read_text())
        assert doc["phase"] == exp["final_phase"], name
    crash = docs[0]["crash"]
    assert set(crash) == CRASH_KEYS
    assert crash["reason"] == "cuda_oom" and crash["during"] == "cuda_graph"
    assert crash["line"].startswith("torch.OutOfMemoryError:")
    assert isinstance(crash["line_number"], int)
    assert isinstance(crash["excerpt"], list) and crash["excerpt"]
    assert docs[0]["phases_seen"][-1] == "crashed"
    assert docs[0]["ready_line"] is None
    assert docs[1]["crash"] is None
    assert docs[1]["phase"] == "ready"
    assert docs[1]["ready_line"] == json.loads(
        (FIXTURES / "sglang-003.expect.json").read_text())["ready_line"]
    assert docs[0]["startups"] == 1
    assert (docs[2]["shards_loaded"], docs[2]["shards_total"]) == (1, 1)
    assert docs[2]["phases_seen"] == ["loading_shards", "allocating"]


@pytest.mark.integration
def test_replay_json_line_count_is_physical_lines() -> None:
    res = run_cli("replay", "--json", fixture("sglang-021.log"))
    doc = json.loads(res.stdout)
    data = (FIXTURES / "sglang-021.log").read_bytes()
    assert doc["lines"] == len(data.rstrip(b"\n").split(b"\n"))


@pytest.mark.integration
def test_replay_json_timeline_keeps_stdout_json() -> None:
    res = run_cli("replay", "--json", "--timeline", fixture("sglang-021.log"),
                  fixture("sglang-027.log"))
    assert res.returncode == 0, res.stderr
    docs = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert len(docs) == 2
    assert "loading_shards" in res.stderr


# ----------------------------------------------------------------------------------------------
# replay --timeline

@pytest.mark.integration
def test_replay_timeline() -> None:
    res = run_cli("replay", "--timeline", fixture("sglang-021.log"))
    assert res.returncode == 0, res.stderr
    rows = {}
    for ln in res.stdout.splitlines():
        m = re.match(r"^\s+(\w+)\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\b", ln)
        if m:
            rows[m.group(1)] = m.group(2)
    assert rows == {"loading_shards": "2025-08-04 10:10:06", "allocating": "2025-08-04 10:10:08"}


@pytest.mark.integration
def test_replay_timeline_every_phase_seen() -> None:
    js = json.loads(run_cli("replay", "--json", fixture("sglang-003.log")).stdout)
    res = run_cli("replay", "--timeline", fixture("sglang-003.log"))
    assert res.returncode == 0
    listed = [ln.split()[0] for ln in res.stdout.splitlines()
              if ln.startswith("  ") and ln.split() and ln.split()[0] in PHASES]
    assert listed == [p for p in js["phases_seen"] if p in PHASES]
    assert listed  # at least one phase


# ----------------------------------------------------------------------------------------------
# --rules

@pytest.mark.integration
def test_replay_rules_forces_a_pack() -> None:
    auto = json.loads(run_cli("replay", "--json", fixture("sglang-021.log")).stdout)
    assert auto["engine"] == "sglang"
    res = run_cli("replay", "--json", "--rules", "vllm", fixture("sglang-021.log"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["engine"] == "vllm"


@pytest.mark.integration
def test_replay_rules_by_path() -> None:
    res = run_cli("replay", "--json", "--rules", "rules/vllm.yaml", fixture("vllm-003.log"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["engine"] == "vllm"


@pytest.mark.integration
def test_replay_unknown_pack() -> None:
    res = run_cli("replay", "--rules", "nosuchpack", fixture("sglang-021.log"))
    assert res.returncode == 2
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    assert "nosuchpack" in res.stderr
    assert "sglang" in res.stderr and "vllm" in res.stderr  # the known packs


@pytest.mark.integration
def test_replay_missing_pack_file() -> None:
    res = run_cli("replay", "--rules", "nowhere/my.yaml", fixture("sglang-021.log"))
    assert res.returncode == 2
    assert "nowhere/my.yaml" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.integration
def test_replay_missing_file() -> None:
    res = run_cli("replay", "does/not/exist.log")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "does/not/exist.log" in res.stderr
    assert "no such file" in res.stderr.lower()


@pytest.mark.integration
def test_replay_missing_file_among_good_ones() -> None:
    res = run_cli("replay", "--json", fixture("sglang-021.log"), "does/not/exist.log",
                  fixture("sglang-027.log"))
    assert res.returncode == 2
    docs = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert [d["file"] for d in docs] == [fixture("sglang-021.log"), fixture("sglang-027.log")]
    assert "does/not/exist.log" in res.stderr


@pytest.mark.integration
@pytest.mark.parametrize("command", ["history", "compare", "replay"])
def test_a_directory_given_as_the_log_is_one_line_and_2(tmp_path: Path, command: str) -> None:
    """`logwatch history /var/log/sglang` (the directory, not the file in it): before,
    `history` and `compare` printed an IsADirectoryError traceback and exited 1, which the
    exit table reads as "nothing recorded"; `replay` already said it in one line."""
    res = run_cli(command, str(tmp_path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip() == f"logwatch: {tmp_path}: Is a directory", res.stderr


@pytest.mark.integration
def test_replay_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    res = run_cli("replay", "--json", str(empty))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == JSON_KEYS
    assert doc["lines"] == 0 and doc["crash"] is None and doc["phase"] == "waiting"


# ----------------------------------------------------------------------------------------------
# rules test

ROW = re.compile(r"^\s*(\d+) (\S+)\s+(.*)$")


def rows(stdout: str) -> list[tuple[int, str, str]]:
    out = []
    for ln in stdout.splitlines():
        m = ROW.match(ln)
        assert m, ln
        out.append((int(m.group(1)), m.group(2), m.group(3)))
    return out


@pytest.mark.integration
def test_rules_test_shows_rule_per_line() -> None:
    res = run_cli("rules", "test", "sglang", fixture("sglang-021.log"))
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    physical = (FIXTURES / "sglang-021.log").read_text().split("\n")
    for n, rid, text in got:
        assert text == physical[n - 1].rstrip()
    by_line = {n: rid for n, rid, _ in got}
    assert by_line[1] == "load_weight_begin"
    assert by_line[2] == by_line[3] == "shard_bar"
    assert by_line[6] == "load_weight_end"
    assert by_line[7] == "kv_cache" and by_line[8] == "kv_pool_end"
    assert by_line[9] == "-"
    assert "matched" in res.stderr and "unmatched" in res.stderr


@pytest.mark.integration
def test_rules_test_unmatched_only() -> None:
    res = run_cli("rules", "test", "sglang", fixture("sglang-021.log"), "--unmatched")
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    assert got and all(rid == "-" for _, rid, _ in got)
    assert [n for n, _, _ in got] == [9]
    assert "max_total_num_tokens=30192" in got[0][2]


@pytest.mark.integration
def test_rules_test_matched_only() -> None:
    res = run_cli("rules", "test", "sglang", fixture("sglang-021.log"), "--matched")
    got = rows(res.stdout)
    assert got and all(rid != "-" for _, rid, _ in got)
    assert 9 not in {n for n, _, _ in got}


@pytest.mark.integration
def test_rules_test_summary_counts() -> None:
    res = run_cli("rules", "test", "sglang", fixture("sglang-021.log"))
    got = rows(res.stdout)
    unmatched = sum(1 for _, rid, _ in got if rid == "-")
    m = re.search(r"(\d+) lines: (\d+) matched, (\d+) unmatched", res.stderr)
    assert m, res.stderr
    assert int(m.group(1)) == len(got)
    assert int(m.group(3)) == unmatched
    assert int(m.group(2)) == len(got) - unmatched


@pytest.mark.integration
def test_rules_test_crash_fixture() -> None:
    res = run_cli("rules", "test", "sglang", fixture("sglang-027.log"))
    assert res.returncode == 0, res.stderr
    by_line = {n: rid for n, rid, _ in rows(res.stdout)}
    assert by_line[12] == "cuda_oom"


@pytest.mark.integration
def test_rules_test_unknown_pack_and_missing_file() -> None:
    res = run_cli("rules", "test", "nosuchpack", fixture("sglang-021.log"))
    assert res.returncode == 2 and "nosuchpack" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("rules", "test", "sglang", "does/not/exist.log")
    assert res.returncode == 2 and "does/not/exist.log" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.integration
@pytest.mark.parametrize("args", [["rules"], ["rules", "test", "sglang"], ["replay"]])
def test_missing_arguments_are_usage_errors(args: list[str]) -> None:
    res = run_cli(*args)
    assert res.returncode == 2
    assert "usage" in res.stderr.lower()


STARTUP_LOG = """\
[2025-10-06 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1)
[2025-10-06 10:00:05 TP0] Load weight begin. avail mem=78.50 GB
Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:05<00:05,  1.00s/it]
Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:10<00:00,  1.00s/it]
[2025-10-06 10:00:15 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=61.02 GB, mem usage=16.40 GB.
[2025-10-06 10:00:16 TP0] KV Cache is allocated. #tokens: 30192, K size: 1.38 GB, V size: 1.38 GB
[2025-10-06 10:00:20 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=12.01 GB
[2025-10-06 10:00:50 TP0] Capture cuda graph end. Time elapsed: 30.00 s. mem usage=0.83 GB. avail mem=10.81 GB.
[2025-10-06 10:01:00] The server is fired up and ready to roll!
"""


@pytest.mark.integration
def test_replay_full_startup(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(STARTUP_LOG)
    res = run_cli("replay", "--json", str(log))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["engine"] == "sglang"
    assert doc["phase"] == "ready"
    assert doc["phases_seen"] == ["launching", "loading_shards", "allocating", "cuda_graph",
                                  "ready"]
    assert doc["startups"] == 1
    assert doc["lines"] == 9
    assert (doc["shards_loaded"], doc["shards_total"]) == (4, 4)
    assert doc["crash"] is None
    assert doc["ready_line"].endswith("The server is fired up and ready to roll!")
    dur = doc["durations"]
    assert dur["launching"] == pytest.approx(5.0)
    assert dur["loading_shards"] == pytest.approx(10.0)
    assert dur["allocating"] == pytest.approx(5.0)
    assert dur["cuda_graph"] == pytest.approx(40.0)

    human = run_cli("replay", "--timeline", str(log)).stdout
    assert f"{log}: ready after 1m00s  [sglang]" in human
    for phase, stamp in [("launching", "10:00:00"), ("loading_shards", "10:00:05"),
                         ("allocating", "10:00:15"), ("cuda_graph", "10:00:20"),
                         ("ready", "10:01:00")]:
        assert re.search(rf"^\s+{phase}\s+2025-10-06 {stamp}", human, re.M), (phase, human)


@pytest.mark.integration
def test_demo_runs_the_readme_case_to_ready() -> None:
    """`make demo` (`logwatch demo`), fast: the README's case (8 GPUs, 83 shards, a GLM-5-sized
    model) watched by the daemon to READY, exit 0."""
    res = subprocess.run([sys.executable, "-m", "logwatch", "demo", "--speed", "0.05",
                          "--linger", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.stdout, res.stderr)
    out = res.stdout
    assert "shards 83/83" in out, out
    assert re.search(r"^  READY in \S+", out, re.M), out
    phases = re.findall(r"^  phase (\w+)$", out, re.M)
    assert phases == ["launching", "downloading", "loading_shards", "allocating", "autotune",
                      "cuda_graph", "ready"], phases
    log = re.search(r"writes (\S+sglang-server\.log)", out)
    assert log, out
    text = Path(log.group(1)).read_text()
    assert "tp_size=8" in text and "GLM-5" in text
    assert sorted(set(re.findall(r"\] Load weight begin|(TP\d)\] Load weight begin", text)))[-1] == "TP7"


def test_a_pattern_the_shell_expanded_gets_a_note() -> None:
    """`logwatch watch logs/server-*.log` unquoted: the shell passes every match, which
    watch reads as one launch of several logs; a note says how to follow the newest."""
    from logwatch.cli import expanded_pattern_hint
    hint = expanded_pattern_hint(["logs/server-1.log", "logs/server-2.log", "logs/server-3.log"])
    assert hint is not None and "3 files" in hint and "'logs/server-*'" in hint
    assert expanded_pattern_hint(["logs/prefill.log", "logs/decode.log"]) is None
    assert expanded_pattern_hint(["a/x.log", "b/y.log", "c/z.log"]) is None
    assert expanded_pattern_hint(["ssh://n1/x.log", "ssh://n2/x.log", "ssh://n3/x.log"]) is None
