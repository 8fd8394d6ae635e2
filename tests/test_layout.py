"""The tree is the pipeline the README draws: the import graph has no cycle, and the core
(sources, lines, rules, machine) imports nothing from the sinks or the app layer.

The graph is built with `ast` from every `import` in `logwatch/`, including imports inside
functions and under `if TYPE_CHECKING:` (a lazy import hides a cycle; it does not remove it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PKG = ROOT / "logwatch"
CORE = ("logwatch.sources", "logwatch.lines", "logwatch.rules", "logwatch.machine", "logwatch.eta")
OUTER = ("logwatch.sinks", "logwatch.app", "logwatch.cli")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that `name` imports, anywhere in its file."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod in known:
                out.add(mod)
            for a in node.names:  # `from . import log`: the name is a module
                if f"{mod}.{a.name}" in known:
                    out.add(f"{mod}.{a.name}")
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {m: WHITE for m in g}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = GREY
        stack.append(m)
        for n in sorted(g[m]):
            if colour[n] == GREY:
                return stack[stack.index(n):] + [n]
            if colour[n] == WHITE:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        colour[m] = BLACK
        return None

    for m in sorted(g):
        if colour[m] == WHITE:
            found = visit(m)
            if found:
                return found
    return None


def under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_the_graph_is_built_from_real_imports() -> None:
    g = graph()
    assert len(g) > 30
    # known edges, one per kind of import statement: relative, `from . import x`, in a function
    assert "logwatch.rules.pack" in g["logwatch.machine.startup"]
    assert "logwatch.machine.startup" in g["logwatch.machine"]   # the package re-exports
    assert "logwatch.log" in g["logwatch.sources.local"]
    assert "logwatch.app.daemon" in g["logwatch.cli"]


def test_no_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_core_imports_no_sink_and_no_app() -> None:
    bad = sorted(f"{m} -> {n}" for m, deps in graph().items() if under(m, CORE)
                 for n in deps if under(n, OUTER))
    assert not bad, "core modules reaching outward:\n  " + "\n  ".join(bad)


def test_sources_know_nothing_of_the_rules_engine() -> None:
    bad = sorted(f"{m} -> {n}" for m, deps in graph().items() if under(m, ("logwatch.sources",))
                 for n in deps if under(n, ("logwatch.rules", "logwatch.machine",
                                            "logwatch.pipeline", "logwatch.state")))
    assert not bad, "sources importing the rules / machine / state:\n  " + "\n  ".join(bad)
