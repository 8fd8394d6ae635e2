"""The pattern cache (rules/patterns.py): what loading a pack learns about its patterns
(named groups, required literals) is kept between runs, and a rule's regex is compiled when
a line first needs it.  Nothing a pack does may change with it: the same rules, the same
replay output, the same errors for a broken pack (exit 2), with the cache cold, warm,
damaged or unwritable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import FIXTURES, ROOT
from logwatch.rules import pack as packmod
from logwatch.rules.pack import PackError, load_all_shipped, load_pack
from logwatch.rules.patterns import FILE_NAME, MISSING, PatternCache, cache_key

from test_rulepack import bad_regex, minimal_pack, one_error_line, write

_REGEX = packmod._regex   # the compiling function (the tests wrap it)
LOGS = ("sglang-003.log", "vllm-021.log", "sglang-201.log")


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache file of this test's own, nothing loaded or compiled yet in this process."""
    path = tmp_path / "cache" / "logwatch" / FILE_NAME
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _forget(monkeypatch)
    yield path
    packmod._load_cached.cache_clear()   # packs of this test's cache: not for later tests
    packmod._read_yaml.cache_clear()
    _REGEX.cache_clear()


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process, as far as packs go: no pack, regex or cache entry in memory."""
    packmod._load_cached.cache_clear()
    packmod._read_yaml.cache_clear()
    _REGEX.cache_clear()
    packmod._lazy.cache_clear()
    monkeypatch.setattr(packmod, "_PATTERNS", PatternCache(packmod.REGEX_FLAGS))


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The patterns `pack._regex` compiles from now on."""
    seen: list[str] = []
    real = _REGEX

    def counting(pattern: str) -> Any:
        seen.append(pattern)
        return real(pattern)
    monkeypatch.setattr(packmod, "_regex", counting)
    return seen


def _summary(packs: list) -> list[tuple]:
    return [(p.name, [(r.id, r.pattern, r.literals, sorted(r.regex.groupindex)) for r in p.rules],
             [(d.regex.pattern, d.weight, d.literals) for d in p.detect]) for p in packs]


def test_a_warm_start_compiles_no_rule_and_loads_the_same_packs(
        fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = load_all_shipped()
    doc = json.loads(fresh.read_text(encoding="utf-8"))
    assert doc["key"] == cache_key(packmod.REGEX_FLAGS)
    rule_patterns = {r.pattern for p in cold for r in p.rules}
    assert rule_patterns <= set(doc["patterns"])
    # the other patterns (detect, stamps, ignore, ranks, prefixes ...) are LazyRegex
    others = {rx.pattern for p in cold for rx in (
        *(d.regex for d in p.detect), *(t.regex for t in p.timestamps), *p.ignore, *p.ranks,
        p.prefixes)}
    assert others <= set(doc["patterns"])
    before = fresh.stat().st_mtime_ns

    _forget(monkeypatch)
    compiled = _compiles(monkeypatch)
    warm = load_all_shipped()
    assert compiled == []                        # validated from the cache, not compiled
    assert all("regex" not in r.__dict__ for p in warm for r in p.rules)
    assert fresh.stat().st_mtime_ns == before    # nothing new learnt: not written again
    assert _summary(warm) == _summary(cold)      # compiles them now, on first use
    assert rule_patterns <= set(compiled)
    # what the cache says of a pattern is what compiling it says (inline flags too)
    for p in warm:
        for t in p.timestamps:
            assert t.regex.flags == _REGEX(t.pattern).flags
    inline = packmod._lazy("(?i)server (?P<word>up)")
    assert (inline.flags, inline.group_names) == (_REGEX(inline.pattern).flags, ("word",))
    assert inline.search("SERVER UP").group("word") == "UP"


def test_lazy_rules_match_as_compiled_ones(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logwatch.app.replay import replay_file
    from logwatch.sinks.summary import summary
    from logwatch.view import pipeline_view

    def replays() -> list[str]:
        return [json.dumps(summary(pipeline_view(f, replay_file(str(FIXTURES / f)))))
                for f in LOGS]
    cold = replays()
    _forget(monkeypatch)
    assert replays() == cold


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "logwatch", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_replay_output_is_the_same_cold_warm_and_unwritable(tmp_path: Path) -> None:
    log = str(FIXTURES / LOGS[0])
    cache = tmp_path / "cache"
    cold = _cli("replay", "--json", log, cache=cache)
    assert (cache / "logwatch" / FILE_NAME).is_file()
    warm = _cli("replay", "--json", log, cache=cache)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    unwritable = _cli("replay", "--json", log, cache=not_a_dir)
    for res in (cold, warm, unwritable):
        assert res.returncode == 0 and res.stderr == "", res.stderr
    assert cold.stdout == warm.stdout == unwritable.stdout


@pytest.mark.integration
def test_a_bad_regex_is_reported_with_a_warm_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    doc = minimal_pack()
    path = write(tmp_path, doc)
    assert _cli("rules", "check", str(path), cache=cache).returncode == 0   # warms it
    bad_regex(doc)
    write(tmp_path, doc)
    cold_line = one_error_line(_cli("rules", "check", str(path), cache=tmp_path / "other"))
    warm_line = one_error_line(_cli("rules", "check", str(path), cache=cache))
    assert warm_line == cold_line and "invalid regex" in warm_line
    learnt = json.loads((cache / "logwatch" / FILE_NAME).read_text(encoding="utf-8"))
    assert not any(p.startswith("Starting server on port (?P<port>\\d+") and not
                   p.endswith(")") for p in learnt["patterns"])    # only patterns that compile


def test_a_bad_regex_raises_the_same_pack_error_warm(fresh: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    doc = minimal_pack()
    path = write(fresh.parent.parent.parent, doc)
    load_pack(str(path))
    bad_regex(doc)
    write(fresh.parent.parent.parent, doc)
    _forget(monkeypatch)
    with pytest.raises(PackError) as ei:
        load_pack(str(path))
    assert (ei.value.rule, ei.value.key) == ("start", "pattern")
    assert ei.value.message.startswith("invalid regex: ")


@pytest.mark.parametrize("content", [
    "not json",
    '{"key": "another version", "patterns": {"Server is up": {"g": ["x"]}}}',
    None,   # this version's key, entries damaged
])
def test_a_damaged_or_foreign_cache_file_is_ignored_and_replaced(
        fresh: Path, monkeypatch: pytest.MonkeyPatch, content: str | None) -> None:
    fresh.parent.mkdir(parents=True)
    if content is None:
        content = json.dumps({"key": cache_key(packmod.REGEX_FLAGS), "patterns": {
            r"Starting server on port (?P<port>\d+)": {"g": "port"},
            "Server is up": {"g": [], "l": [[], False]},
            "x": ["g"]}})
    fresh.write_text(content, encoding="utf-8")
    path = write(fresh.parent.parent.parent, minimal_pack())
    p = load_pack(str(path))
    assert [sorted(r.regex.groupindex) for r in p.rules] == [["port"], []]
    assert [sorted(r.literals.strings) for r in p.rules] == [["Starting server on port "],
                                                              ["Server is up"]]
    doc = json.loads(fresh.read_text(encoding="utf-8"))   # rewritten, with this key
    assert doc["key"] == cache_key(packmod.REGEX_FLAGS)
    assert doc["patterns"]["Server is up"] == {"g": [], "l": [["Server is up"], False],
                                                "f": int(packmod._regex("Server is up").flags)}


@pytest.mark.integration
def test_a_warm_start_takes_pack_documents_from_the_cache_without_yaml(tmp_path: Path) -> None:
    """A pack file's parsed document is kept by the SHA-256 of its bytes: a warm start
    neither parses YAML nor imports PyYAML (~15 ms of every start), and loads the same."""
    code = ("import json, sys; from logwatch.rules.pack import load_all_shipped; "
            "packs = load_all_shipped(); "
            "print(json.dumps(['yaml' in sys.modules, [[p.name, [[r.id, r.pattern, r.phase] "
            "for r in p.rules], p.phases] for p in packs]]))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def run() -> list[Any]:
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)
    cold, warm = run(), run()
    assert cold[0] is True and warm[0] is False
    assert warm[1] == cold[1] and len(cold[1]) >= 3
    docs = json.loads((tmp_path / "cache" / "logwatch" / FILE_NAME).read_text())["docs"]
    assert len(docs) == len(list((ROOT / "rules").glob("*.yaml")))


def test_an_edited_pack_is_parsed_again(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = minimal_pack()
    path = write(fresh.parent.parent.parent, doc)
    assert [r.id for r in load_pack(str(path)).rules] == ["start", "up"]
    doc["rules"][1]["id"] = "upp"         # the same size: only the bytes differ
    doc["rules"][0]["id"] = "sta"
    write(fresh.parent.parent.parent, doc)
    _forget(monkeypatch)
    assert [r.id for r in load_pack(str(path)).rules] == ["sta", "upp"]


def test_a_document_json_would_change_is_not_kept(fresh: Path) -> None:
    """YAML gives dates, integer keys and NaN; JSON would give them back otherwise."""
    import datetime
    cache = PatternCache(packmod.REGEX_FLAGS, fresh)
    for i, doc in enumerate([{"a": datetime.date(2026, 1, 1)}, {1: "x"}, {"n": float("nan")},
                             {"ok": [1, 2.5, True, None, "s"]}]):
        cache.put_doc(str(i), doc)
    assert list(cache.docs) == ["3"]
    cache.save()
    again = PatternCache(packmod.REGEX_FLAGS, fresh)
    assert again.doc("3") == {"ok": [1, 2.5, True, None, "s"]}
    assert again.doc("0") is MISSING


def test_a_compiled_hyperscan_database_is_loaded_from_the_cache_and_a_damaged_one_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The literal pass's Hyperscan database (~15 ms to compile per pack) is kept compiled in
    the cache directory: a warm start compiles nothing, and a damaged file is compiled again
    and rewritten, with the same matches."""
    from logwatch.rules import literalscan
    parts = [("Load weight end", False), ("server_args=", False), ("cuda out of memory", True)]
    data = b"x server_args= y\nLoad weight end\nCUDA Out Of Memory\n"
    cold = literalscan.literal_finder(parts, "hyperscan", cache_dir=tmp_path)
    want = list(cold.positions(data))
    assert len(want) == 3
    (db,) = tmp_path.glob("hyperscan-*.db")
    compiled: list[int] = []
    real = literalscan._compile
    monkeypatch.setattr(literalscan, "_compile", lambda e, f: compiled.append(1) or real(e, f))
    warm = literalscan.literal_finder(parts, "hyperscan", cache_dir=tmp_path)
    assert list(warm.positions(data)) == want and compiled == []
    db.write_bytes(b"\x00damaged")
    again = literalscan.literal_finder(parts, "hyperscan", cache_dir=tmp_path)
    assert list(again.positions(data)) == want and compiled == [1]
    assert db.read_bytes() != b"\x00damaged", "the damaged file was replaced"
