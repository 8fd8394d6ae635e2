"""The tree is the pipeline the README draws: the import graph has no cycle, every module
sits in one layer of docs/architecture.md's table, and no module imports from a layer above
its own (no back-edge): the core imports nothing from the sinks or the app, the sinks nothing
from the app, sources and telemetry nothing of the rules engine, the machine or state.

The graph is built with `ast` from every `import` in `logwatch/`, including imports inside
functions and under `if TYPE_CHECKING:` (a lazy import hides a cycle; it does not remove it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator

from conftest import ROOT

PKG = ROOT / "logwatch"
#: docs/architecture.md's layers, lowest first: a module may import its own layer and those
#: below (the cycle test orders a layer inside).  A name is a module or a package (`rules/`);
#: a module is in the layer of its longest name (`state/files` is ground, the rest of
#: `state/` core).  `logwatch` is the package's `__init__`.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("logwatch", "log", "units", "clock", "errors", "verdict", "limits", "yamlload",
                "shown", "state/files")),
    ("io", ("sources/", "telemetry/", "logfile")),
    ("parse", ("lines", "rules/")),
    ("machine", ("machine/", "eta", "counters")),
    ("core", ("pipeline", "engine", "follow", "ledger", "silence", "view", "state/")),
    ("sinks", ("sinks/",)),
    ("app", ("app/", "cli", "__main__")),
)
CORE_LAYERS = ("ground", "io", "parse", "machine", "core")
OUTER = ("logwatch.sinks", "logwatch.app", "logwatch.cli", "logwatch.__main__")


def layer_of(mod: str) -> int | None:
    """The index in LAYERS of `mod`'s longest matching name (None: in no layer)."""
    best: tuple[int, int] | None = None
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            full = "logwatch" if n == "logwatch" else f"logwatch.{n.rstrip('/').replace('/', '.')}"
            hit = mod == full or (n.endswith("/") and mod.startswith(full + "."))
            if hit and (best is None or len(full) > best[1]):
                best = (i, len(full))
    return best[0] if best else None


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


def test_every_module_sits_in_a_layer() -> None:
    unplaced = sorted(m for m in graph() if layer_of(m) is None)
    assert not unplaced, "modules in no layer of docs/architecture.md (add them there and here): " \
        + ", ".join(unplaced)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    g = graph()
    bad = sorted(f"{m} ({LAYERS[layer_of(m) or 0][0]}) -> {n} ({LAYERS[layer_of(n) or 0][0]})"
                 for m, deps in g.items() for n in deps
                 if (layer_of(n) or 0) > (layer_of(m) or 0))
    assert not bad, "back-edges:\n  " + "\n  ".join(bad)


def test_layer_of_takes_the_longest_name() -> None:
    names = [name for name, _ in LAYERS]
    assert names[layer_of("logwatch.state.files") or 0] == "ground"
    assert names[layer_of("logwatch.state.history") or 0] == "core"
    assert names[layer_of("logwatch.telemetry.gpu.stream") or 0] == "io"
    assert names[layer_of("logwatch.sinks.alerts.policy") or 0] == "sinks"
    assert layer_of("logwatch.nowhere") is None
    assert layer_of("logwatch.linesx") is None       # a name is not a prefix of another


def test_the_layers_are_the_ones_docs_architecture_names() -> None:
    """The table in docs/architecture.md ("## Layers") is this one: a module moved or added
    without the doc fails here."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    doc = {}
    for line in block.strip().splitlines():
        name, _, rest = line.partition(" ")
        rest = re.sub(r"\([^)]*\)", "", rest)     # "app/ (target = the live loop, ...)"
        doc[name] = tuple(w.strip() for w in rest.split(",") if w.strip())
    assert doc == {name: names for name, names in LAYERS}


def test_the_core_imports_no_sink_and_no_app() -> None:
    g = graph()
    core = [m for m in g if LAYERS[layer_of(m) or 0][0] in CORE_LAYERS]
    assert "logwatch.telemetry.gpu.stream" in core and "logwatch.state.history" in core
    assert "logwatch.sinks.metrics" not in core
    bad = sorted(f"{m} -> {n}" for m in core for n in g[m] if under(n, OUTER))
    assert not bad, "core modules reaching outward:\n  " + "\n  ".join(bad)


def test_sources_and_telemetry_know_nothing_of_the_rules_engine() -> None:
    bad = sorted(f"{m} -> {n}" for m, deps in graph().items()
                 if under(m, ("logwatch.sources", "logwatch.telemetry"))
                 for n in deps if under(n, ("logwatch.rules", "logwatch.machine",
                                            "logwatch.pipeline", "logwatch.state",
                                            "logwatch.view", "logwatch.lines")))
    assert not bad, "sources importing the rules / machine / state:\n  " + "\n  ".join(bad)


def test_sources_yield_only_log_bytes() -> None:
    """Telemetry (GPUs, the endpoint probe) is beside the log, not a source of it: sources
    import none of it (telemetry may use `sources.ssh`, the shared connection)."""
    bad = sorted(f"{m} -> {n}" for m, deps in graph().items() if under(m, ("logwatch.sources",))
                 for n in deps if under(n, ("logwatch.telemetry",)))
    assert not bad, "sources importing telemetry:\n  " + "\n  ".join(bad)
    assert not any(p.stem in ("gpu", "probe") for p in (PKG / "sources").glob("*.py"))


def test_the_readme_map_names_every_module_and_package() -> None:
    """README "How it works": the map of logwatch/ names every top-level module and package
    (a new one is placed there as well as in the layers)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("\nlogwatch/\n", 1)[1].split("```", 1)[0]
    named = {line.split()[0].split("/")[0] for line in block.splitlines()
             if line.startswith("  ") and not line.startswith("   ")}
    tree = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert tree - {n.removesuffix(".py") for n in named} == set()


# -- small parts ----------------------------------------------------------------------------
# No class over ~200 lines and no function over ~60 (issue 33): a part that long usually does
# several jobs.  One that is long for a reason says so in its docstring, on a line that starts
# "Long because:", and the reason is then reviewed with the code.
MAX_CLASS_LINES = 200
MAX_FUNCTION_LINES = 60
REASON = "Long because:"

# Parts allowed over the limit without a reason while other work reshapes their files (empty:
# every part of logwatch/ is within the limits or says why).
ALLOWED_FOR_NOW: frozenset[str] = frozenset()

Part = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def parts(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Part]]:
    """Every class and function of a module, nested ones too, by qualified name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            yield name, node
            yield from parts(node, name + ".")
        else:
            yield from parts(node, prefix)


def has_reason(node: Part) -> bool:
    doc = ast.get_docstring(node) or ""
    return any(line.strip().startswith(REASON) and line.strip() != REASON
               for line in doc.splitlines())


def oversized(source: str, where: str) -> list[str]:
    """'where:name (N lines > limit)' for each part over its limit without a reason."""
    out = []
    for name, node in parts(ast.parse(source, where)):
        limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
        n = (node.end_lineno or node.lineno) - node.lineno + 1
        if n > limit and not has_reason(node):
            out.append(f"{where}:{name} ({n} lines > {limit})")
    return out


def test_no_long_class_or_function_without_a_reason() -> None:
    found = [o for p in sorted(PKG.rglob("*.py"))
             for o in oversized(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    bad = [o for o in found if o.split(" (")[0] not in ALLOWED_FOR_NOW]
    assert not bad, ("parts over the size limit; split them, or say why in the docstring on a "
                     f"line starting {REASON!r}:\n  " + "\n  ".join(bad))
    stale = ALLOWED_FOR_NOW - {o.split(" (")[0] for o in found}
    assert not stale, f"allowed but no longer over the limit (remove from the list): {sorted(stale)}"


def test_the_size_check_counts_lines_and_reads_the_reason() -> None:
    def body(n: int, indent: str = "    ") -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))
    assert oversized(f"def f():\n{body(59)}", "m.py") == []                            # 60 lines
    assert oversized(f"def f():\n{body(60)}", "m.py") == ["m.py:f (61 lines > 60)"]
    why = '    """Why it is one part.\n\n    Long because: one table, row by row."""\n'
    assert oversized(f"def f():\n{why}{body(60)}", "m.py") == []
    assert oversized(f'def f():\n    """Long because:"""\n{body(60)}', "m.py") != []  # no reason
    methods = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(67))
    assert oversized(f"class C:\n{methods}", "m.py") == ["m.py:C (201 lines > 200)"]
    assert oversized(f"class C:\n    def g(self):\n{body(60, ' ' * 8)}", "m.py") == [
        "m.py:C.g (61 lines > 60)"]
