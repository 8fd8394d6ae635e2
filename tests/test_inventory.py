"""Every statement of the newest engine releases (tests/inventory/ENGINE-VERSION.yaml, read
from the releases' wheels by scripts/engine_inventory.py) gets the meaning the packs promise.

The inventories are ground truth made from the engines' source, not from the packs: a line
is rendered as the engine prints it (its real prefix) and `expect` lists what it means.  A
pack change that breaks one fails here with the statement's id and source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from logwatch.cli import main as cli_main
from logwatch.lines import split_glued
from logwatch.rules.check import MEANING_WORDS, line_meaning, meaning_accepts
from logwatch.rules.pack import load_pack

INVENTORIES = sorted((ROOT / "tests" / "inventory").glob("*.yaml"))
TIERS = ("P1", "P2", "P3")


def inventory(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def entries() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for path in INVENTORIES:
        inv = inventory(path)
        out.extend((path.stem, inv, e) for e in inv["statements"])
    return out


ENTRIES = entries()


def expected(entry: dict[str, Any]) -> list[str]:
    exp = entry["expect"]
    return exp if isinstance(exp, list) else [exp]


def test_both_releases_are_inventoried() -> None:
    assert {p.stem for p in INVENTORIES} >= {"sglang-0.5.23", "vllm-0.34.0"}
    for path in INVENTORIES:
        assert len(inventory(path)["statements"]) >= 100, path.name


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.stem)
def test_inventory_is_well_formed(path: Path) -> None:
    """Ids are unique, every meaning names a phase, reason and progress kind the pack has."""
    inv = inventory(path)
    pack = load_pack(inv["pack"])
    progress_kinds = {r.progress for r in pack.rules if r.progress}
    ids = [e["id"] for e in inv["statements"]]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for e in inv["statements"]:
        assert e["tier"] in TIERS, e["id"]
        assert e["line"].strip() and e["source"] and e["format"], e["id"]
        for word in expected(e):
            kind, _, arg = word.partition(":")
            assert kind in MEANING_WORDS, (e["id"], word)
            if kind == "phase":
                assert arg in pack.phases, (e["id"], word)
            elif kind in ("crash", "hint"):
                assert arg == "*" or arg in pack.all_reasons, (e["id"], word)
            elif kind == "progress":
                assert arg in progress_kinds, (e["id"], word)


@pytest.mark.parametrize("name, inv, entry", ENTRIES,
                         ids=[f"{n}:{e['id']}" for n, _, e in ENTRIES])
def test_statement_gets_its_meaning(name: str, inv: dict[str, Any], entry: dict[str, Any]) -> None:
    got = line_meaning(load_pack(inv["pack"]), entry["line"])
    assert meaning_accepts(expected(entry), got), (
        f"{name} {entry['id']} ({entry['source']}): expected one of {expected(entry)}, "
        f"the pack says {got}")


def score(stem: str) -> dict[str, list[int]]:
    """statements and right ones, per group, as the acceptance counts them."""
    groups: dict[str, list[int]] = {}
    for name, inv, e in ENTRIES:
        if name != stem:
            continue
        ok = meaning_accepts(expected(e), line_meaning(load_pack(inv["pack"]), e["line"]))
        keys = ["all"]
        if e["tier"] == "P1":
            phase = any(w.startswith("phase:") or w == "restart" for w in expected(e))
            keys.append("phase" if phase else "crash")
        for k in keys:
            g = groups.setdefault(k, [0, 0])
            g[0] += 1
            g[1] += ok
    return groups


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.stem)
def test_acceptance_figures(path: Path) -> None:
    """P1 phase changes and crash markers / causes >= 95 % right, all statements >= 90 %."""
    g = score(path.stem)
    assert g["phase"][0] >= 10 and g["crash"][0] >= 20
    assert g["phase"][1] >= 0.95 * g["phase"][0], g
    assert g["crash"][1] >= 0.95 * g["crash"][0], g
    assert g["all"][1] >= 0.90 * g["all"][0], g


def test_meaning_accepts_is_strict() -> None:
    """The comparison itself: a wrong reason, a generic one and a missing rule fail."""
    assert meaning_accepts(["crash:cuda_oom"], {"rule": "x", "crash": "cuda_oom"})
    assert not meaning_accepts(["crash:kv_cache_too_small"], {"rule": "x", "crash": "python_exception"})
    assert meaning_accepts(["crash:*"], {"rule": "x", "crash": "python_exception"})
    assert not meaning_accepts(["crash:*"], {"rule": None})
    assert meaning_accepts(["info"], {"rule": None})
    assert not meaning_accepts(["info"], {"rule": "x", "stop": True})
    assert not meaning_accepts(["info"], {"rule": "x", "phase": "allocating"})
    assert meaning_accepts(["phase:cuda_graph", "info"], {"rule": "x", "phase": "cuda_graph"})
    assert not meaning_accepts(["phase:launching"], {"rule": "x", "phase": "ready"})
    assert meaning_accepts(["progress:shards"], {"rule": "x", "progress": "shards"})
    assert meaning_accepts(["hint:hang"], {"rule": "x", "hint": "hang"})


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.stem)
def test_rules_test_json_gives_the_same_meanings(path: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`logwatch rules test PACK FILE --json`: one object per line, the line's number, rule
    and meaning; what CI of a user's own pack reads."""
    inv = inventory(path)
    lines = [e["line"] for e in inv["statements"]]
    log = tmp_path / "inventory.log"
    log.write_text("\n".join(lines) + "\n")
    assert cli_main(["rules", "test", inv["pack"], str(log), "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    # a tqdm frame with a record glued after it is two lines to the framing (lines.split_glued)
    parts = [(n, part) for n, line in enumerate(lines, 1) for part in split_glued(line)]
    assert [o["line"] for o in out] == [n for n, _ in parts]
    assert len(parts) > len(lines) - 5
    pack = load_pack(inv["pack"])
    for o, (_, part) in zip(out, parts):
        want = line_meaning(pack, part)
        assert {k: v for k, v in o.items() if k not in ("line", "text")} == want, part
        assert o["text"] == part
