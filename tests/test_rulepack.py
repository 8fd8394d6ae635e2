"""Rule packs: schema errors (one line naming file, rule and key), `extends`, shipped packs.

Every broken pack is checked twice: through `logwatch rules check FILE` (exit 2, exactly one
line on stderr) and, for schema errors, through `load_pack` (a `PackError` whose `.path`,
`.rule` and `.key` say where the problem is).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT
from logwatch.machine.ranks import replica_of
from logwatch.rules.pack import (
    CRASH_REASONS,
    GENERIC_REASONS,
    SPECIFIC_RANK,
    PackError,
    load_pack,
    parse_duration,
    reason_rank,
    shipped_pack_names,
)

# DESIGN.md "Crash reasons (stable label values)" and "Phase vocabulary", copied on purpose:
# the packs must stay inside the documented contract, not inside whatever the code accepts.
DESIGN_REASONS = {
    "cuda_oom", "host_oom_killed", "kv_cache_too_small", "nccl_error", "distributed_error",
    "import_error", "bad_argument", "hub_download_failed", "weight_loading_error",
    "warmup_failed", "port_in_use", "child_process_died", "python_exception", "unknown",
    # added by the accuracy issue (docs/architecture.md "Crash reasons")
    "cuda_graph_capture_failed", "autotune_failed", "kernel_compile_failed",
    # added by the engine-inventory issue (README "Crash reasons")
    "startup_timeout", "shm_too_small", "hang",
    # added by the unseen-GPU trial (README "Crash reasons")
    "gpu_unavailable",
    # added by the full-disk task (README "Crash reasons")
    "disk_full",
    # added by the Dynamo-failures task (README "Crash reasons")
    "discovery_unreachable",
}
DESIGN_PHASES = {"launching", "downloading", "loading_shards", "allocating", "autotune",
                 "cuda_graph", "ready"}


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def minimal_pack() -> dict[str, Any]:
    return {
        "name": "mini",
        "phases": ["launching", "ready"],
        "rules": [
            {"id": "start", "pattern": r"Starting server on port (?P<port>\d+)",
             "phase": "launching",
             "samples": [{"line": "Starting server on port 8000", "fields": {"port": "8000"}}]},
            {"id": "up", "pattern": r"Server is up", "phase": "ready",
             "samples": ["[10:00:00] Server is up"]},
        ],
    }


def write(tmp_path: Path, doc: Any, name: str = "pack.yaml") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False),
                 encoding="utf-8")
    return p


def names_file(line: str, path: Path) -> bool:
    return str(path.resolve()) in line or str(path) in line


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


# ----------------------------------------------------------------------------------------------
# Broken packs

def _rule(doc: dict[str, Any], rid: str) -> dict[str, Any]:
    return next(r for r in doc["rules"] if r.get("id") == rid)


def bad_regex(d):
    _rule(d, "start")["pattern"] = r"Starting server on port (?P<port>\d+"
    return "start", "pattern"


def bad_phase(d):
    _rule(d, "up")["phase"] = "serving_now"
    return "up", "phase"


def bad_crash(d):
    d["rules"].append({"id": "boom", "pattern": "GPU exploded", "crash": "gpu_exploded"})
    return "boom", "crash"


def bad_hint(d):
    d["rules"].append({"id": "maybe", "pattern": "GPU smells", "hint": "smoke"})
    return "maybe", "hint"


def unknown_rule_key(d):
    _rule(d, "up")["patern"] = "Server is up"
    return "up", "patern"


def missing_pattern(d):
    del _rule(d, "up")["pattern"]
    return "up", "pattern"


def missing_id(d):
    del _rule(d, "up")["id"]
    return None, "id"


def duplicate_id(d):
    d["rules"].append({"id": "up", "pattern": "Server is up again", "phase": "ready"})
    return "up", "id"


def progress_without_groups(d):
    d["rules"].append({"id": "bar", "pattern": r"Loading (\d+)/(\d+)", "progress": "shards"})
    return "bar", "progress"


def progress_with_one_group(d):
    d["rules"].append({"id": "bar", "pattern": r"Loading (?P<current>\d+)/\d+",
                       "progress": "shards"})
    return "bar", "progress"


def unknown_top_level_key(d):
    d["rulez"] = []
    return None, "rulez"


def missing_phases(d):
    del d["phases"]
    return None, "phases"


def bad_crash_settle(d):
    d["crash_settle"] = "soon"
    return None, "crash_settle"


def begins_without_phase(d):
    d["rules"].append({"id": "b", "pattern": "JIT warmup", "hint": "unknown", "begins": True})
    return "b", "begins"


def beside_not_open_or_close(d):
    d["rules"].append({"id": "b", "pattern": "prefetch", "phase": "ready", "beside": "yes"})
    return "b", "beside"


def closes_as_unknown_phase(d):
    d["rules"].append({"id": "b", "pattern": "Time spent", "phase": "ready",
                       "closes_as": "fetching"})
    return "b", "closes_as"


def supervisor_without_restart(d):
    d["rules"].append({"id": "b", "pattern": "Started DPSupervisor", "phase": "ready",
                       "supervisor": True})
    return "b", "supervisor"


def server_pattern_without_group(d):
    d["servers"] = {"patterns": [r"^\(APIServer pid=\d+\)"]}
    return None, "servers.patterns[0]"


def silent_unknown_phase(d):
    d["silent"] = ["fetching"]
    return None, "silent"


def follower_ready_without_a_finish(d):
    d["follower"] = {"rules": ["start"], "ready": "launching"}   # no `finishes` rule there
    return None, "follower.ready"


def follower_unknown_rule(d):
    d["rules"][0]["finishes"] = True
    d["follower"] = {"rules": ["headless"], "ready": "launching"}
    return None, "follower.rules"


def follower_bad_args(d):
    d["rules"][0]["finishes"] = True
    d["follower"] = {"args": {"node_rank": "one"}, "ready": "launching"}
    return None, "follower.args"


def ready_hint_without_crash(d):
    d["rules"].append({"id": "b", "pattern": "Decode batch", "phase": "ready",
                       "ready_hint": True})
    return "b", "ready_hint"


def during_on_a_pattern_rule(d):
    d["rules"].append({"id": "b", "pattern": "Load weight", "hint": "unknown",
                       "during": "ready"})
    return "b", "during"


def _typical_rule(d, **keys):
    d["rules"].append({"id": "b", "pattern": "JIT compile", "phase": "launching", **keys})
    return "b", "typical"


def typical_without_begins(d):
    return _typical_rule(d, typical="15m")


def typical_not_a_duration(d):
    return _typical_rule(d, begins=True, typical="a while")


def drafts_by_unknown_phase(d):
    d["drafts"] = {"args": ["speculative_algorithm"], "by": "drafting"}
    return None, "drafts"


def again_unknown_phase(d):
    d["again"] = [{"phase": "warming", "after": "launching", "since": "0.31"}]
    return None, "again"


def again_without_since(d):
    # a statement true of every release would count the phase for engines that never run it
    d["again"] = [{"phase": "launching", "after": "launching"}]
    return None, "again"


def again_since_not_quoted(d):
    # YAML reads 0.30 as the number 0.3: release 0.3, not 0.30
    d["again"] = [{"phase": "launching", "after": "launching", "since": 0.30}]
    return None, "again"


def after_bar_ready(d):
    # ready has no bar and no time left: a typo'd or misplaced phase is an error, not ignored
    d["after_bar"] = ["ready"]
    return None, "after_bar"


def unless_seen_unknown_rule(d):
    # a typo in the id would leave the rule acting in every startup, silently
    d["rules"].append({"id": "b", "pattern": "weights format", "phase": "ready",
                       "unless_seen": ["strat"]})
    return "b", "unless_seen"


def unless_seen_not_a_list(d):
    d["rules"].append({"id": "b", "pattern": "weights format", "phase": "ready",
                       "unless_seen": "start"})
    return "b", "unless_seen"


SCHEMA_ERRORS = [bad_regex, bad_phase, bad_crash, bad_hint, unknown_rule_key, missing_pattern,
                 missing_id, duplicate_id, progress_without_groups, progress_with_one_group,
                 unknown_top_level_key, missing_phases, bad_crash_settle,
                 begins_without_phase, beside_not_open_or_close, closes_as_unknown_phase,
                 supervisor_without_restart, server_pattern_without_group, silent_unknown_phase,
                 follower_ready_without_a_finish, follower_unknown_rule, follower_bad_args,
                 ready_hint_without_crash, during_on_a_pattern_rule, typical_without_begins,
                 typical_not_a_duration, drafts_by_unknown_phase, unless_seen_unknown_rule,
                 unless_seen_not_a_list, again_unknown_phase, again_without_since,
                 again_since_not_quoted, after_bar_ready]


@pytest.mark.integration
@pytest.mark.parametrize("mutate", SCHEMA_ERRORS, ids=lambda f: f.__name__)
def test_rules_check_reports_schema_error_on_one_line(tmp_path: Path, mutate) -> None:
    doc = minimal_pack()
    rid, key = mutate(doc)
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path), line
    if rid is not None:
        assert f"rule '{rid}'" in line, line
    assert f": {key}: " in line, line


@pytest.mark.parametrize("mutate", SCHEMA_ERRORS, ids=lambda f: f.__name__)
def test_load_pack_raises_pack_error_with_location(tmp_path: Path, mutate) -> None:
    doc = minimal_pack()
    rid, key = mutate(doc)
    path = write(tmp_path, doc)
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    e = ei.value
    assert Path(e.path).resolve() == path.resolve()
    assert e.rule == rid
    assert e.key == key
    assert str(e).startswith(e.path)


def test_crash_settle_is_read_and_inherited(tmp_path: Path) -> None:
    assert load_pack("sglang").crash_settle == 2.0          # from base.yaml, through extends
    doc = minimal_pack()
    doc["crash_settle"] = "750ms"
    assert load_pack(str(write(tmp_path, doc))).crash_settle == 0.75


@pytest.mark.integration
def test_rule_without_action(tmp_path: Path) -> None:
    doc = minimal_pack()
    doc["rules"].append({"id": "idle", "pattern": "idle loop", "samples": ["idle loop"]})
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path) and "rule 'idle'" in line and "action" in line, line
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert ei.value.rule == "idle"
    assert "phase" in ei.value.message and "crash" in ei.value.message  # lists the actions


@pytest.mark.integration
def test_sample_that_does_not_match(tmp_path: Path) -> None:
    doc = minimal_pack()
    _rule(doc, "up")["samples"] = ["[10:00:00] Server is down"]
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path) and "rule 'up'" in line and ": samples: " in line, line
    assert "Server is down" in line
    load_pack(str(path))  # the schema is fine: only `rules check` proves samples


@pytest.mark.integration
def test_sample_with_wrong_field(tmp_path: Path) -> None:
    doc = minimal_pack()
    _rule(doc, "start")["samples"] = [{"line": "Starting server on port 8000",
                                       "fields": {"port": "9000"}}]
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert "rule 'start'" in line and ": samples: " in line and "port" in line, line


@pytest.mark.integration
def test_sample_routed_to_an_earlier_rule(tmp_path: Path) -> None:
    doc = minimal_pack()
    doc["rules"].insert(0, {"id": "any_server", "pattern": r"Server is \w+",
                            "phase": "launching", "samples": ["Server is starting"]})
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path), line
    assert "rule 'up'" in line and ": samples: " in line and "any_server" in line, line


@pytest.mark.integration
def test_negative_sample_that_matches(tmp_path: Path) -> None:
    doc = minimal_pack()
    _rule(doc, "up")["samples"] = [{"line": "Server is up", "matches": False}]
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert "rule 'up'" in line and ": samples: " in line, line


@pytest.mark.integration
def test_not_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "name: mini\nphases: [launching, ready\nrules: {{{\n")
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path) and "YAML" in line, line
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert Path(ei.value.path).resolve() == path.resolve()


@pytest.mark.integration
@pytest.mark.parametrize("text", ["- just\n- a list\n", "", "42\n"])
def test_yaml_that_is_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path), line


@pytest.mark.integration
def test_pack_file_that_is_not_utf8(tmp_path: Path) -> None:
    """A pack saved in Latin-1 (an editor's default) is a broken pack, not a crash."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: mini\nphases: [ready]\nrules:\n  - id: up\n"
                     "    pattern: 'caf\u00e9 ouvert'\n    phase: ready\n".encode("latin-1"))
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path), line
    with pytest.raises(PackError):
        load_pack(str(path))


@pytest.mark.integration
def test_extends_unknown_pack(tmp_path: Path) -> None:
    doc = minimal_pack()
    doc["extends"] = "nosuchpack"
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert names_file(line, path) and ": extends: " in line, line
    assert "sglang" in line  # lists the known packs
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert ei.value.key == "extends"
    assert ei.value.rule is None
    assert Path(ei.value.path).resolve() == path.resolve()


@pytest.mark.integration
def test_extends_unknown_pack_names_the_missing_pack(tmp_path: Path) -> None:
    """The message says which pack could not be found, as `--rules nosuchpack` does."""
    doc = minimal_pack()
    doc["extends"] = "nosuchpack"
    path = write(tmp_path, doc)
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert "nosuchpack" in line, line


@pytest.mark.integration
def test_extends_cycle(tmp_path: Path) -> None:
    a = write(tmp_path, {"name": "a", "extends": "./b.yaml"}, "a.yaml")
    write(tmp_path, {"name": "b", "extends": "./a.yaml"}, "b.yaml")
    line = one_error_line(run_cli("rules", "check", str(a)))
    assert ": extends: " in line and "a.yaml" in line, line
    with pytest.raises(PackError) as ei:
        load_pack(str(a))
    assert ei.value.key == "extends"


@pytest.mark.integration
def test_extends_itself(tmp_path: Path) -> None:
    a = write(tmp_path, {"name": "a", "extends": "./a.yaml"}, "a.yaml")
    line = one_error_line(run_cli("rules", "check", str(a)))
    assert ": extends: " in line and names_file(line, a), line


@pytest.mark.integration
def test_extends_cycle_spelled_through_parent_dir(tmp_path: Path) -> None:
    """The same cycle, with one side naming the file as `../DIR/a.yaml`: still a cycle."""
    d = tmp_path / "packs"
    d.mkdir()
    a = write(d, {"name": "a", "extends": "./b.yaml"}, "a.yaml")
    write(d, {"name": "b", "extends": "../packs/a.yaml"}, "b.yaml")
    line = one_error_line(run_cli("rules", "check", str(a)))
    assert ": extends: " in line, line
    with pytest.raises(PackError) as ei:
        load_pack(str(a))
    assert ei.value.key == "extends"


@pytest.mark.integration
def test_minimal_valid_pack_passes(tmp_path: Path) -> None:
    path = write(tmp_path, minimal_pack())
    res = run_cli("rules", "check", str(path))
    assert res.returncode == 0, res.stderr
    assert "ok (2 rules, 2 samples)" in res.stdout
    pack = load_pack(str(path))
    assert pack.name == "mini"
    assert pack.phases == ("launching", "ready")
    assert [r.id for r in pack.rules] == ["start", "up"]
    assert pack.rule("start").phase == "launching"
    assert pack.rule("start").samples[0].fields == {"port": "8000"}


@pytest.mark.integration
def test_check_stops_at_first_broken_pack_among_several(tmp_path: Path) -> None:
    good = write(tmp_path, minimal_pack(), "good.yaml")
    doc = minimal_pack()
    _rule(doc, "up")["phase"] = "nowhere"
    bad = write(tmp_path, doc, "bad.yaml")
    res = run_cli("rules", "check", str(good), str(bad))
    assert res.returncode == 2
    assert "good.yaml: ok" in res.stdout
    assert "bad.yaml" in res.stderr and "rule 'up'" in res.stderr


# ----------------------------------------------------------------------------------------------
# extends

def user_pack(tmp_path: Path, **extra: Any) -> Path:
    return write(tmp_path, {"name": "mine", "extends": "sglang", **extra}, "mine.yaml")


def ids(pack) -> list[str]:
    return [r.id for r in pack.rules]


def test_a_pack_file_is_parsed_once_per_version(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """base.yaml is parsed once although sglang, vllm and trtllm extend it; an edited file again."""
    from logwatch.rules import pack as packmod
    parsed: list[str] = []
    real = packmod.load_yaml

    def counting(f: Any, *args: Any) -> Any:
        parsed.append(Path(f.name).name)
        return real(f, *args)
    monkeypatch.setattr(packmod, "load_yaml", counting)
    # a cold pattern cache (it keeps parsed documents too: tests/test_pattern_cache.py)
    from logwatch.rules.patterns import PatternCache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(packmod, "_PATTERNS", PatternCache(packmod.REGEX_FLAGS))
    packmod._load_cached.cache_clear()
    packmod._read_yaml.cache_clear()
    try:
        packmod.load_all_shipped()
        assert sorted(parsed) == ["base.yaml", "sglang.yaml", "trtllm.yaml", "vllm.yaml"]
        doc = minimal_pack()
        path = write(tmp_path, doc)
        assert load_pack(str(path)).name == "mini"
        doc["name"] = "mini-edited"
        write(tmp_path, doc)
        assert load_pack(str(path)).name == "mini-edited"
        assert parsed.count("pack.yaml") == 2
    finally:
        packmod._load_cached.cache_clear()
        packmod._read_yaml.cache_clear()


def test_extends_inherits_everything(tmp_path: Path) -> None:
    base = load_pack("sglang")
    mine = load_pack(str(user_pack(tmp_path)))
    assert mine.name == "mine"
    assert ids(mine) == ids(base)
    assert mine.phases == base.phases
    assert [d.regex.pattern for d in mine.detect] == [d.regex.pattern for d in base.detect]
    assert [d.weight for d in mine.detect] == [d.weight for d in base.detect]
    assert [t.pattern for t in mine.timestamps] == [t.pattern for t in base.timestamps]
    assert mine.crash_by_phase == base.crash_by_phase
    assert mine.stall_after == base.stall_after
    assert len(mine.ignore) == len(base.ignore)


@pytest.mark.integration
def test_extends_overrides_a_rule_in_place(tmp_path: Path) -> None:
    base = load_pack("sglang")
    pos = ids(base).index("load_weight_end")
    path = user_pack(tmp_path, rules=[{
        "id": "load_weight_end", "pattern": r"Weights are loaded\.", "phase": "allocating",
        "samples": ["[2025-01-01 10:00:00] Weights are loaded."]}])
    mine = load_pack(str(path))
    assert ids(mine) == ids(base)
    assert mine.rules[pos].id == "load_weight_end"
    assert mine.rules[pos].pattern == r"Weights are loaded\."
    assert Path(mine.rules[pos].source).resolve() == path.resolve()
    # the other rules are the base's own
    assert all(a.pattern == b.pattern for a, b in zip(mine.rules, base.rules) if a.id != "load_weight_end")
    assert run_cli("rules", "check", "-q", str(path)).returncode == 0


def test_extends_new_rule_goes_first(tmp_path: Path) -> None:
    base = load_pack("sglang")
    path = user_pack(tmp_path, rules=[
        {"id": "my_first", "pattern": "MY MARKER ONE", "phase": "launching"},
        {"id": "my_second", "pattern": "MY MARKER TWO", "phase": "launching"}])
    mine = load_pack(str(path))
    assert ids(mine) == ["my_first", "my_second"] + ids(base)


def test_extends_before_and_after(tmp_path: Path) -> None:
    base = load_pack("sglang")
    path = user_pack(tmp_path, rules=[
        {"id": "pre_ready", "pattern": "ALMOST READY", "phase": "cuda_graph", "before": "ready"},
        {"id": "post_kv", "pattern": "KV DONE", "phase": "allocating", "after": "kv_cache"}])
    mine = load_pack(str(path))
    got = ids(mine)
    assert got.index("pre_ready") == got.index("ready") - 1
    assert got.index("post_kv") == got.index("kv_cache") + 1
    assert [i for i in got if i not in ("pre_ready", "post_kv")] == ids(base)


def test_extends_disable(tmp_path: Path) -> None:
    base = load_pack("sglang")
    path = user_pack(tmp_path, disable=["traceback", "exception_line"])
    mine = load_pack(str(path))
    assert ids(mine) == [i for i in ids(base) if i not in ("traceback", "exception_line")]
    assert len(mine.rules) == len(base.rules) - 2


@pytest.mark.integration
def test_extends_disable_unknown_id(tmp_path: Path) -> None:
    path = user_pack(tmp_path, disable=["no_such_rule"])
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert ei.value.key == "disable" and "no_such_rule" in ei.value.message
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert ": disable: " in line


def test_extends_anchor_to_unknown_rule(tmp_path: Path) -> None:
    path = user_pack(tmp_path, rules=[
        {"id": "x", "pattern": "XYZ MARK", "phase": "launching", "after": "no_such_rule"}])
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert (ei.value.rule, ei.value.key) == ("x", "after")


def test_extending_pack_validates_its_own_rules_against_inherited_phases(tmp_path: Path) -> None:
    path = user_pack(tmp_path, rules=[{"id": "x", "pattern": "XYZ MARK", "phase": "warming"}])
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert (ei.value.rule, ei.value.key) == ("x", "phase")


@pytest.mark.integration
def test_extends_with_redeclared_phases_rejects_inherited_rules_in_dropped_phases(
        tmp_path: Path) -> None:
    """An inherited rule that enters a phase the child no longer declares is a broken pack,
    exactly as it would be in a standalone pack."""
    path = user_pack(tmp_path, phases=["launching", "ready"])
    line = one_error_line(run_cli("rules", "check", str(path)))
    assert "phase" in line, line


@pytest.mark.integration
def test_replay_with_redeclared_phases_does_not_crash(tmp_path: Path) -> None:
    path = user_pack(tmp_path, phases=["launching", "ready"])
    res = run_cli("replay", "--rules", str(path), "tests/fixtures/sglang-021.log")
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.returncode in (0, 2)


PORT_LOG = (
    "[2025-10-06 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', port=30000)\n"
    "[2025-10-06 10:00:05 TP0] Init torch distributed begin.\n"
    "[2025-10-06 10:00:06] FATAL: listener could not bind 0.0.0.0:30000\n"
)


@pytest.mark.integration
def test_replay_with_user_pack_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(PORT_LOG)
    path = user_pack(tmp_path, rules=[{
        "id": "bind_failed", "pattern": r"FATAL: listener could not bind (?P<addr>\S+)",
        "crash": "port_in_use",
        "samples": ["[2025-10-06 10:00:06] FATAL: listener could not bind 0.0.0.0:30000"]}])
    assert run_cli("rules", "check", "-q", str(path)).returncode == 0

    plain = run_cli("replay", "--json", "--rules", "sglang", str(log))
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["crash"] is None  # the shipped pack does not know the line

    res = run_cli("replay", "--json", "--rules", str(path), str(log))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["engine"] == "mine"
    assert doc["phase"] == "crashed"
    assert doc["crash"]["reason"] == "port_in_use"
    assert "listener could not bind" in doc["crash"]["line"]
    assert doc["crash"]["line_number"] == 3
    assert doc["crash"]["during"] == "launching"


@pytest.mark.integration
def test_rules_test_with_user_pack_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(PORT_LOG)
    path = user_pack(tmp_path, rules=[{
        "id": "bind_failed", "pattern": r"FATAL: listener could not bind", "crash": "port_in_use"}])
    res = run_cli("rules", "test", str(path), str(log))
    assert res.returncode == 0, res.stderr
    rows = [ln.split(None, 2) for ln in res.stdout.splitlines() if ln.strip()]
    assert [(int(n), rid) for n, rid, _ in rows] == [
        (1, "server_args"), (2, "dist_init"), (3, "bind_failed")]


# ----------------------------------------------------------------------------------------------
# Durations and reason ranks

@pytest.mark.parametrize("text,seconds", [
    ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25), (90, 90.0),
    (2.5, 2.5), ("90", 90.0), ("1m30s", 90.0), ("2h", 7200.0), ("1.5h", 5400.0),
    (" 10m ", 600.0), ("0s", 0.0),
])
def test_parse_duration(text, seconds) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["abc", "", "   ", "5x", "m", "h30", "-5", -1, "5 minutes"])
def test_parse_duration_rejects(text) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@given(h=st.integers(0, 99), m=st.integers(0, 59), s=st.integers(0, 59))
def test_parse_duration_composes(h: int, m: int, s: int) -> None:
    text = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s or not (h or m) else "")
    assert parse_duration(text) == h * 3600 + m * 60 + s


def test_reason_rank() -> None:
    assert reason_rank("unknown") < reason_rank("child_process_died") < reason_rank(
        "python_exception") < reason_rank("cuda_oom")
    assert reason_rank("unknown") == 0
    specific = [r for r in CRASH_REASONS if r not in GENERIC_REASONS]
    assert len(specific) == len(CRASH_REASONS) - 3
    assert {reason_rank(r) for r in specific} == {SPECIFIC_RANK}
    assert all(reason_rank(g) < SPECIFIC_RANK for g in GENERIC_REASONS)


def test_code_vocabulary_is_design_vocabulary() -> None:
    assert set(CRASH_REASONS) == DESIGN_REASONS


# ----------------------------------------------------------------------------------------------
# The shipped packs

@pytest.mark.integration
def test_rules_check_shipped_packs() -> None:
    res = run_cli("rules", "check")
    assert res.returncode == 0, res.stderr
    for name in ("base", "sglang", "vllm", "trtllm"):
        assert f"{name}.yaml: ok" in res.stdout
    assert "warning" not in res.stderr, res.stderr


@pytest.mark.integration
def test_rules_check_by_name() -> None:
    res = run_cli("rules", "check", "sglang", "vllm")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(": ok (") == 2


@pytest.mark.parametrize("name", ["sglang", "vllm", "trtllm"])
def test_every_rule_has_a_positive_sample(name: str) -> None:
    pack = load_pack(name)
    missing = [r.id for r in pack.rules if not any(s.matches for s in r.samples)]
    assert missing == []


@pytest.mark.parametrize("name", ["base", "sglang", "vllm", "trtllm"])
def test_shipped_vocabulary(name: str) -> None:
    pack = load_pack(name)
    assert set(pack.phases) <= DESIGN_PHASES
    assert pack.phases[-1] == "ready"
    for r in pack.rules:
        if r.crash is not None:
            assert r.crash in DESIGN_REASONS, r.id
        if r.hint is not None:
            assert r.hint in DESIGN_REASONS, r.id
        if r.phase is not None:
            assert r.phase in pack.phases, r.id
    assert set(pack.crash_by_phase.values()) <= DESIGN_REASONS


@pytest.mark.parametrize("name", ["base", "sglang", "vllm", "trtllm"])
def test_every_shipped_rule_has_a_prefilter(name: str) -> None:
    pack = load_pack(name)
    assert [r.id for r in pack.rules if r.literals is None] == []
    for r in pack.rules:
        assert all(len(s) >= 3 for s in r.literals.strings), r.id


def test_shipped_pack_names() -> None:
    assert {"base", "sglang", "vllm", "trtllm"} <= set(shipped_pack_names())


def test_shipped_packs_have_unique_ids_and_detect() -> None:
    for name in ("sglang", "vllm", "trtllm"):
        pack = load_pack(name)
        assert len(set(ids(pack))) == len(pack.rules)
        assert pack.detect, name
        assert pack.timestamps, name


# ----------------------------------------------------------------------------------------------
# Explicit prefilters

@pytest.mark.integration
def test_explicit_prefilter(tmp_path: Path) -> None:
    doc = minimal_pack()
    _rule(doc, "up")["pattern"] = r"\w+ is up"
    _rule(doc, "up")["prefilter"] = ["is up"]
    path = write(tmp_path, doc)
    pack = load_pack(str(path))
    assert pack.rule("up").literals is not None
    assert pack.rule("up").literals.strings == {"is up"}
    assert run_cli("rules", "check", str(path)).returncode == 0


@pytest.mark.parametrize("value", [[], "", [""], [3], ["two\nlines"]])
def test_bad_prefilter_value(tmp_path: Path, value) -> None:
    doc = minimal_pack()
    _rule(doc, "up")["prefilter"] = value
    path = write(tmp_path, doc)
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert (ei.value.rule, ei.value.key) == ("up", "prefilter")


@pytest.mark.integration
def test_prefilter_missing_from_a_sample_fails_check(tmp_path: Path) -> None:
    doc = minimal_pack()
    _rule(doc, "up")["prefilter"] = ["Server is UP"]
    path = write(tmp_path, doc)
    res = run_cli("rules", "check", str(path))
    assert res.returncode == 2
    assert "rule 'up'" in res.stderr and "prefilter" in res.stderr


@pytest.mark.integration
def test_rule_without_derivable_literal_is_a_warning(tmp_path: Path) -> None:
    doc = minimal_pack()
    doc["rules"].append({"id": "pct", "pattern": r"\d+%", "phase": "launching",
                         "samples": ["50%"]})
    path = write(tmp_path, doc)
    res = run_cli("rules", "check", str(path))
    assert res.returncode == 0, res.stderr
    assert "warning" in res.stderr and "rule 'pct'" in res.stderr
    assert "warning" not in run_cli("rules", "check", "-q", str(path)).stderr


@pytest.mark.parametrize("args, key", [
    ({"form": "xml", "start": "x="}, "args.form"),
    ({"start": "(unclosed"}, "args.start"),
    ({"form": "repr"}, "args.start"),
    ({"form": "repr", "start": "x=", "aliases": {"tp": "tp_size"}}, "args"),
    ({"form": "command", "start": "run", "aliases": {"tp": 8}}, "args.aliases"),
    ({"form": "command", "start": "run", "negatable": "yes"}, "args.negatable"),
    ([{"form": "repr", "start": "x="}, {"start": "y=", "colour": "red"}], "colour"),
    ([], "args"),
])
def test_a_bad_args_form_names_its_key(tmp_path: Path, args: Any, key: str) -> None:
    doc = minimal_pack()
    _rule(doc, "start")["args"] = args
    path = write(tmp_path, doc)
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert ei.value.rule == "start" and ei.value.key == key, str(ei.value)


def test_an_args_form_as_data(tmp_path: Path) -> None:
    from logwatch.rules.args import parse_args_line
    doc = minimal_pack()
    _rule(doc, "start")["args"] = {"form": "command", "start": r"\bmyserve\b", "positional": "model",
                                   "aliases": {"tp": "tensor_parallel"}, "negatable": True}
    rule = load_pack(str(write(tmp_path, doc))).rule("start")
    assert rule.args and len(rule.args_specs) == 1
    got = parse_args_line("$ myserve m --tp 2 --no-cache --port=8000", rule.args_specs)
    assert got is not None and got.values == {"model": "m", "tensor_parallel": 2, "cache": False,
                                              "port": 8000}


@pytest.mark.parametrize("advice, key", [
    ({"id": "a", "when": {"lt": ["x"]}, "say": "s"}, "advice[0].when.lt"),
    ({"id": "a", "when": {"ltt": ["x", "y"]}, "say": "s"}, "advice[0].when.ltt"),
    ({"id": "a", "when": {"lt": ["x", "y"]}, "say": "{z}"}, "advice[0].say"),
    ({"id": "a", "when": {"ge": [["x"], "high"]}, "say": "{flag}"}, "advice[0].when.ge"),
    ({"when": {"any_true": ["x"]}, "say": "{flag}"}, "advice[0].id"),
    ({"id": "a", "when": {"any_true": ["x"], "any_false": ["y"]}, "say": "s"}, "advice[0].when"),
    ("graphs off", "advice[0]"),
])
def test_a_bad_advice_entry_names_its_key(tmp_path: Path, advice: Any, key: str) -> None:
    doc = minimal_pack()
    doc["advice"] = [advice]
    path = write(tmp_path, doc)
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert ei.value.key == key, str(ei.value)


def test_advice_and_model_flags_are_inherited_and_replaced_by_id(tmp_path: Path) -> None:
    from logwatch.rules.advice import advice_lines
    doc = {"name": "my-sglang", "extends": "sglang", "model_flags": ["served_model_name"],
           "advice": [{"id": "graphs_off", "when": {"any_true": ["disable_cuda_graph"]},
                       "say": "no graphs ({flag})"},
                      {"id": "tiny_pool", "when": {"lt": ["max_total_tokens", "context_length"]},
                       "say": "{max_total_tokens} tokens < one {context_length}-token request"}]}
    pack = load_pack(str(write(tmp_path, doc)))
    assert [a.id for a in pack.advice] == ["graphs_below_batch", "graphs_off", "eager_batches",
                                           "oom_memory_fraction", "tiny_pool"]
    assert pack.model_flags == ("served_model_name",)
    args = {"disable_cuda_graph": True, "max_total_tokens": 4096, "context_length": 8192}
    assert advice_lines(pack.advice, args, "ready", None, {}) == [
        "no graphs (disable_cuda_graph)", "4096 tokens < one 8192-token request"]


def test_the_auto_fallback_is_the_pack_that_says_so(tmp_path: Path) -> None:
    """`--rules auto` with nothing recognised takes the pack marked `fallback: true` (SGLang's,
    shipped), not a name in Python; the key is not inherited, and must be a boolean."""
    from logwatch.rules.locate import choose_pack, fallback_pack
    shipped = [load_pack(n) for n in ("base", "sglang", "trtllm", "vllm")]
    assert [p.name for p in shipped if p.fallback] == ["sglang"]
    assert choose_pack("auto", b"nothing an engine prints\n").name == "sglang"
    mine = {"name": "my-sglang", "extends": "sglang", "rules": []}
    assert not load_pack(str(write(tmp_path, mine, "mine.yaml"))).fallback
    own = {**minimal_pack(), "name": "own", "fallback": True}
    picked = fallback_pack([shipped[3], load_pack(str(write(tmp_path, own, "own.yaml"))), shipped[1]])
    assert picked.name == "own"
    assert fallback_pack([shipped[3], shipped[2]]).name == "vllm"       # none says so: the first
    with pytest.raises(PackError) as ei:
        load_pack(str(write(tmp_path, {**minimal_pack(), "fallback": "yes"}, "bad.yaml")))
    assert ei.value.key == "fallback"


@pytest.mark.parametrize("value, key", [({"unless": "enable_dp_attention"}, "replicas.unless"),
                                        ({"unless": [""]}, "replicas.unless"),
                                        ({"stage": "PP(\\d+"}, "replicas.stage"),
                                        ({"stage": "PP\\d+"}, "replicas.stage"),
                                        ({"stage": "(?P<stage>PP\\d+)", "together": "loadin"},
                                         "replicas.together"),
                                        ({"together": "loading_shards"}, "replicas.together")])
def test_a_bad_replicas_key_is_a_pack_error_naming_it(tmp_path: Path, value: Any, key: str):
    with pytest.raises(PackError) as ei:
        load_pack(str(write(tmp_path, {**minimal_pack(), "replicas": value})))
    assert ei.value.key == key


def test_replicas_are_the_shipped_packs_and_a_pack_extending_them_inherits_it(tmp_path: Path):
    """vLLM's engine cores are always replicas; SGLang's DP groups unless attention DP."""
    assert load_pack("vllm").replicas_unless == ()
    assert load_pack("sglang").replicas_unless == ("enable_dp_attention",)
    assert load_pack("trtllm").replicas_unless is None
    own = {"name": "own", "extends": "vllm", "rules": []}
    assert load_pack(str(write(tmp_path, own))).replicas_unless == ()
    assert load_pack(str(write(tmp_path, own))).stages_together == "loading_shards"


def test_sglang_pipeline_stages_are_groups_of_their_replica():
    """`replicas.stage`: a rank's PP stage joins its DP replica in the group it moves with."""
    stage = load_pack("sglang").replica_stage
    assert [replica_of(r, stage) for r in ("PP1 TP3", "DP1 PP0 TP3 EP3", "TP0", "DP1 TP0",
                                           "MOE_DP1 TP0")] == ["PP1", "DP1 PP0", "", "DP1", ""]
    assert replica_of("PP1_TP0") == ""


def test_vllm_pipeline_stages_are_groups_of_their_replica():
    """vLLM's workers (`Worker_PP1_TP0`, `Worker_DP1_PP0_TP3`: 0.34 multiproc_executor.py
    :1248) name their stage too (before helper adv77: no stage pattern)."""
    stage = load_pack("vllm").replica_stage
    assert [replica_of(r, stage) for r in ("PP1", "PP1_TP0", "DP1_PP0_TP3", "TP0", "DP1_TP0",
                                           "DP1")] == ["PP1", "PP1", "DP1 PP0", "", "DP1", "DP1"]


@pytest.mark.parametrize("rule, says", [
    ({"pattern": r"no device (?P<dev>\S+)", "crash": "distributed_error",
      "meaning": "device {device} missing"}, "names device, not named groups"),
    ({"pattern": r"no device (?P<dev>\S+)", "phase": "launching",
      "meaning": "device {dev} missing"}, "only a crash rule"),
    ({"pattern": r"no device", "crash": "distributed_error", "meaning": ""}, "a sentence"),
])
def test_a_meaning_is_a_crash_rule_s_sentence_of_its_own_groups(
        tmp_path: Path, rule: dict[str, Any], says: str) -> None:
    """`meaning:` replaces the reason's sentence in the crash page: on a crash rule only, and
    what it quotes of the line is a named group of its pattern (a typo would say `?`)."""
    doc = minimal_pack()
    doc["rules"].append({"id": "nodev", **rule})
    with pytest.raises(PackError) as ei:
        load_pack(str(write(tmp_path, doc)))
    assert ei.value.key == "meaning" and ei.value.rule == "nodev" and says in str(ei.value)


def test_a_meaning_quotes_its_groups_clipped() -> None:
    """The line is untrusted: a group the sentence quotes is cut, a missing one says `?`."""
    from logwatch.rules.reasons import FIELD_KEEP, fill_meaning
    out = fill_meaning("device {dev} ({other}) missing", {"dev": "x" * 10_000})
    assert out.startswith("device x") and out.endswith("… (?) missing")
    assert len(out) < FIELD_KEEP + 30


def test_a_label_names_a_span_of_the_phase_its_rule_enters(tmp_path: Path) -> None:
    """`label:` names the second span of a phase its rule opens: a rule that enters none
    has nothing to name."""
    doc = minimal_pack()
    doc["rules"].append({"id": "x", "pattern": "adapters", "crash": "unknown", "label": "LoRA"})
    with pytest.raises(PackError) as ei:
        load_pack(str(write(tmp_path, doc)))
    assert ei.value.key == "label" and ei.value.rule == "x"
