#!/usr/bin/env python3
"""The statements an engine release prints on its startup, crash and shutdown paths, read
from the release's own wheel, and how well the shipped packs understand them.

Why: SGLang and vLLM change these lines every few weeks.  A pack that follows them by hand
falls behind; a pack that is checked against each release's source does not.  What is kept
in the repository, per release, is `tests/inventory/ENGINE-VERSION.yaml`: each statement
that matters, a line rendered as the engine prints it (its real prefix) and the meaning the
packs must give it.  `tests/test_inventory.py` runs every line through the shipped packs.

    engine_inventory.py list sglang==0.5.23            # statements on the watched paths
    engine_inventory.py list vllm==0.34.0 --json --all # every logging/print/tqdm/raise
    engine_inventory.py draft vllm==0.35.0 --previous tests/inventory/vllm-0.34.0.yaml \\
        -o tests/inventory/vllm-0.35.0.yaml            # the next release: review the diff
    engine_inventory.py score tests/inventory/*.yaml   # right / wrong / missing per tier
    engine_inventory.py score tests/inventory/*.yaml --packs /tmp/main-rules   # "before"

Wheels are fetched with `pip download NAME==VERSION --no-deps` once and kept in
`$LOGWATCH_WHEELS` (default `~/.cache/logwatch/wheels`).  Statements are found with `ast`
(never imported or run): `logger.<level>(...)` (any receiver whose name holds "log"),
`log_info_on_rank0(logger, ...)`, `print(...)`, `tqdm(..., desc=...)` and `raise X(...)`; the
format string is the f-string / %-format / `.format` template as written.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import fnmatch
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEVELS = ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal",
          "info_once", "warning_once", "debug_once")

# The startup, crash and shutdown paths: entrypoints, scheduler / engine core, model runner,
# loaders, KV sizing, warmups and autotune, graph capture, process supervision.
WATCHED = {
    "sglang": [
        "sglang/srt/entrypoints/*.py", "sglang/srt/entrypoints/**/*.py",
        "sglang/srt/managers/scheduler.py", "sglang/srt/managers/scheduler_components/*.py",
        "sglang/srt/managers/data_parallel_controller.py", "sglang/srt/managers/tp_worker.py",
        "sglang/srt/managers/tokenizer_manager.py", "sglang/srt/managers/detokenizer_manager.py",
        "sglang/srt/model_executor/*.py", "sglang/srt/model_executor/**/*.py",
        "sglang/srt/model_loader/*.py", "sglang/srt/mem_cache/kv_cache_configurator.py",
        "sglang/srt/mem_cache/memory_pool.py", "sglang/srt/distributed/bootstrap.py",
        "sglang/srt/distributed/device_communicators/pynccl.py", "sglang/srt/utils/watchdog.py",
        "sglang/srt/weight_cache/*.py", "sglang/srt/layers/deep_gemm_wrapper/compile_utils.py",
        "sglang/srt/compilation/backend.py", "sglang/srt/speculative/*worker*.py",
        # releases before scheduler_components/ (0.5.10 and older): the scheduler's mixins
        "sglang/srt/managers/scheduler_*mixin.py",
        "sglang/srt/observability/scheduler_metrics_mixin.py",
        # 0.4.x: DeepGEMM's JIT under layers/quantization/ (0.4.6 deep_gemm.py, 0.4.10
        # deep_gemm_wrapper/), the HiCache host pool (0.4.10 memory_pool_host.py), LoRA's backend
        "sglang/srt/layers/quantization/deep_gemm.py",
        "sglang/srt/layers/quantization/deep_gemm_wrapper/compile_utils.py",
        "sglang/srt/mem_cache/memory_pool_host.py", "sglang/srt/lora/lora_manager.py",
    ],
    "vllm": [
        "vllm/entrypoints/cli/serve.py", "vllm/entrypoints/launchers/*.py",
        "vllm/entrypoints/launchers/**/*.py", "vllm/entrypoints/common/startup.py",
        "vllm/v1/engine/core.py", "vllm/v1/engine/core_client.py", "vllm/v1/engine/utils.py",
        "vllm/v1/engine/async_llm.py", "vllm/v1/engine/exceptions.py", "vllm/v1/utils.py",
        "vllm/v1/executor/*.py", "vllm/v1/worker/gpu_worker.py", "vllm/v1/worker/gpu/*.py",
        "vllm/v1/worker/gpu/**/*.py", "vllm/v1/worker/extensible_kv_cache.py",
        "vllm/v1/worker/startup_plan.py", "vllm/v1/worker/encoder_cudagraph.py",
        "vllm/v1/core/kv_cache_planning.py", "vllm/v1/core/kv_cache_utils.py",
        "vllm/model_executor/model_loader/*.py", "vllm/model_executor/warmup/*.py",
        "vllm/compilation/monitor.py", "vllm/compilation/backends.py",
        "vllm/compilation/decorators.py", "vllm/distributed/parallel_state.py",
        "vllm/distributed/device_communicators/shm_broadcast.py", "vllm/v1/metrics/loggers.py",
        "vllm/platforms/__init__.py", "vllm/config/model.py", "vllm/config/scheduler.py",
        # the same paths before the move to entrypoints/launchers, entrypoints/common and
        # v1/worker/gpu/ (vLLM 0.22 and 0.28 print their startup from these)
        "vllm/entrypoints/openai/api_server.py", "vllm/entrypoints/openai/dp_supervisor.py",
        "vllm/entrypoints/openai/server_utils.py", "vllm/entrypoints/launcher.py",
        "vllm/entrypoints/utils.py", "vllm/entrypoints/serve/utils/api_utils.py",
        "vllm/v1/worker/gpu_model_runner.py",
        # the V0 engine beside V1 (0.8.x; a fallback up to 0.10): its engine, GPU worker and
        # runner, executors; the config in one module (vllm/config.py, then config/__init__.py)
        "vllm/engine/llm_engine.py", "vllm/engine/async_llm_engine.py",
        "vllm/engine/multiprocessing/*.py", "vllm/worker/worker.py", "vllm/worker/worker_base.py",
        "vllm/worker/model_runner.py", "vllm/executor/*.py", "vllm/config.py",
        # V0's own launch and serving (0.7 and older run it by default): the engine arguments'
        # defaults and refusals before the engine starts, the stats line
        "vllm/engine/arg_utils.py", "vllm/engine/metrics.py",
    ],
}


@dataclass(frozen=True)
class Statement:
    """One logging / print / tqdm / raise call of a release."""

    file: str           # path inside the wheel
    line: int           # the line that holds the message (the call may start above it)
    kind: str           # logger.info, print, tqdm, raise ValueError ...
    format: str         # the message template as written ({expr} / %s placeholders kept)

    @property
    def source(self) -> str:
        return f"{self.file}:{self.line}"


# ----------------------------------------------------------------------------------------------
# Fetching a release

def wheel_cache() -> Path:
    return Path(os.environ.get("LOGWATCH_WHEELS", Path.home() / ".cache/logwatch/wheels"))


def split_spec(spec: str) -> tuple[str, str]:
    name, _, version = spec.partition("==")
    if not version:
        raise SystemExit(f"engine_inventory: give NAME==VERSION, not {spec!r}")
    return name.strip().lower(), version.strip()


def fetch(spec: str) -> Path:
    """The release's wheel, downloaded once (`pip download --no-deps`) and kept."""
    name, version = split_spec(spec)
    cache = wheel_cache()
    for p in sorted(cache.glob(f"{name}-{version}-*.whl")):
        return p
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", f"{name}=={version}", "--no-deps",
                    "--only-binary", ":all:", "-d", str(cache), "-q"], check=True)
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"engine_inventory: pip saved no wheel of {spec} in {cache}")
    return found[0]


# ----------------------------------------------------------------------------------------------
# Reading statements with ast

def _template(node: ast.AST, src: str) -> str | None:
    """The message template of an argument: a literal, an f-string with its `{expr}`s, a
    %-format's left side, a `.format` call's string, string concatenations; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                expr = ast.unparse(part.value)
                spec = ""
                if part.format_spec is not None:
                    spec = ":" + (_template(part.format_spec, src) or "")
                conv = "" if part.conversion == -1 else "!" + chr(part.conversion)
                out.append("{" + expr + conv + spec + "}")
        return "".join(out)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mod):
            return _template(node.left, src)
        if isinstance(node.op, ast.Add):
            left, right = _template(node.left, src), _template(node.right, src)
            if left is None and right is None:
                return None
            return (left if left is not None else "{...}") + (right if right is not None else "{...}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "format":
        return _template(node.func.value, src)
    return None


def _receiver(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        v = func.value
        if isinstance(v, ast.Name):
            return v.id
        if isinstance(v, ast.Attribute):
            return v.attr
    return ""


def _message_line(node: ast.AST) -> int:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Constant, ast.JoinedStr)) and isinstance(
                getattr(sub, "value", None) if isinstance(sub, ast.Constant) else "", str):
            return int(getattr(sub, "lineno", getattr(node, "lineno", 0)))
    return int(getattr(node, "lineno", 0))


class _Locals:
    """The string assignments of each function, indexed once (a module has thousands of calls;
    walking the function for each was quadratic)."""

    def __init__(self, src: str) -> None:
        self.src = src
        self._by_scope: dict[int, dict[str, list[tuple[int, str, int, bool]]]] = {}

    def _index(self, scope: ast.AST) -> dict[str, list[tuple[int, str, int, bool]]]:
        got = self._by_scope.get(id(scope))
        if got is not None:
            return got
        got = {}
        for n in ast.walk(scope):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                fmt = _template(n.value, self.src)
                if fmt is None:
                    continue
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        got.setdefault(t.id, []).append((n.lineno, fmt, _message_line(n.value), False))
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) \
                    and isinstance(n.op, ast.Add):
                got.setdefault(n.target.id, []).append(
                    (n.lineno, _template(n.value, self.src) or "{...}", n.lineno, True))
        for v in got.values():
            v.sort()
        self._by_scope[id(scope)] = got
        return got

    def template(self, name: str, scope: ast.AST, before: int) -> tuple[str, int] | None:
        """The template `name` holds at line `before`: its last string assignment in the
        function, with the `name += ...` that follow it; None if none."""
        events = [e for e in self._index(scope).get(name, []) if e[0] < before]
        starts = [k for k, e in enumerate(events) if not e[3]]
        if not starts:
            return None
        k = starts[-1]
        return "".join(e[1] for e in events[k:]), events[k][2]


def _scopes(tree: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> the function (or module) it is in."""
    out: dict[int, ast.AST] = {}

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            out[id(child)] = inner
            visit(child, inner)
    visit(tree, tree)
    return out


def _dotted(func: ast.AST) -> str:
    """`logger.info`, `RuntimeError`, `self.x.y` for a call's function; "?" for anything else
    (ast.get_source_segment splits the whole module for each call: quadratic)."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
        return ".".join(reversed(parts))
    return "?"


def _is_exception(name: str) -> bool:
    return name.split(".")[-1].endswith(("Error", "Exception", "Exit", "Failure"))


def _logger_aliases(tree: ast.AST) -> dict[str, str]:
    """Names a logger's method is put in (`log_fn = logger.info`, then `log_fn(...)`), with the
    level: V0's stats line (vLLM 0.7 / 0.8 engine/metrics.py) picks info or debug so, and a
    reader of `logger.<level>(` calls alone never saw it.  Of two levels the one not debug."""
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) \
                and n.value.attr in LEVELS and "log" in _receiver(n.value).lower():
            for t in n.targets:
                if isinstance(t, ast.Name) and "debug" in out.get(t.id, "debug"):
                    out[t.id] = n.value.attr        # the level it logs at when not quiet
    return out


def statements_of(path: str, src: str) -> Iterator[Statement]:
    """The statements of one module, in source order: logging calls (also through a name the
    logger's method was put in, `log_fn = logger.info`), prints, tqdm bars (their `desc=` or
    `set_description`), exceptions raised or built (`return RuntimeError(...)`); a message
    first put in a local variable is followed to its assignment."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return
    scopes = _scopes(tree)
    local = _Locals(src)
    aliases = _logger_aliases(tree)

    def template_of(arg: ast.AST, call: ast.AST) -> tuple[str, int] | None:
        fmt = _template(arg, src)
        if fmt is not None:
            return fmt, _message_line(arg)
        if isinstance(arg, ast.Name):
            return local.template(arg.id, scopes.get(id(call), tree), call.lineno)  # type: ignore[attr-defined]
        return None

    found: list[Statement] = []
    raised: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            raised.add(id(node.exc))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = _dotted(func)
        if id(node) in raised or (_is_exception(name) and node.args):
            got = template_of(node.args[0], node) if node.args else ("", node.lineno)
            if got is not None:
                found.append(Statement(path, got[1], f"raise {name}", got[0]))
            continue
        kind = arg = None
        if isinstance(func, ast.Attribute) and func.attr in LEVELS \
                and "log" in _receiver(func).lower() and node.args:
            kind, arg = f"logger.{func.attr}", node.args[0]
        elif isinstance(func, ast.Name) and func.id in aliases and node.args:
            kind, arg = f"logger.{aliases[func.id]}", node.args[0]
        elif isinstance(func, ast.Name) and func.id in ("log_info_on_rank0", "print_warning_once",
                                                         "print_info_once") and node.args:
            kind, arg = func.id, node.args[-1] if func.id == "log_info_on_rank0" else node.args[0]
        elif isinstance(func, ast.Name) and func.id == "print" and node.args:
            kind, arg = "print", node.args[0]
        elif (isinstance(func, ast.Name) and func.id.endswith("tqdm")) or \
                (isinstance(func, ast.Attribute) and func.attr.endswith("tqdm")):
            desc = next((k.value for k in node.keywords if k.arg == "desc"), None)
            if desc is not None:
                kind, arg = "tqdm", desc
        elif isinstance(func, ast.Attribute) and func.attr == "set_description" and node.args:
            kind, arg = "tqdm", node.args[0]
        if kind is None or arg is None:
            continue
        got = template_of(arg, node)
        if got is None:
            continue
        found.append(Statement(path, got[1], kind, got[0]))
    found.sort(key=lambda s: s.line)
    yield from found


def watched(engine: str, path: str) -> bool:
    return any(fnmatch.fnmatch(path, pat) for pat in WATCHED.get(engine, []))


def read_wheel(wheel: Path, engine: str, everything: bool = False) -> list[Statement]:
    """Every statement of the wheel's modules on the watched paths (all modules: `everything`)."""
    out: list[Statement] = []
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if not name.endswith(".py") or not (everything or watched(engine, name)):
                continue
            src = z.read(name).decode("utf-8", "replace")
            out.extend(statements_of(name, src))
    return out


# ----------------------------------------------------------------------------------------------
# Drafting a line as the engine prints it (a draft: a person reviews it)

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}|%(?:\(\w+\))?[-+ #0]*\d*(?:\.(\d+))?([sdifr%])")
_VALUES = (
    (r"pattern", "['*.safetensors']"), (r"version", "0.0.0"), (r"port", "30000"),
    (r"host|addr", "10.0.0.1"), (r"pid", "4242"), (r"exit_?code|returncode|\bcode", "1"),
    (r"rank|gpu_id|dp_|node", "0"), (r"path|dir|model|folder|file|root", "/models/Qwen3-8B"),
    (r"time|elapsed|took|sec|duration|tic", "12.34"), (r"mem|gib|gb|bytes|size", "10.50"),
)


def _value(expr: str, spec: str = "") -> str:
    low = expr.lower()
    for pat, val in _VALUES:
        if re.search(pat, low):
            break
    else:
        val = "x"
    if spec.endswith("d"):
        return val if val.isdigit() else "4"
    if spec.endswith("f"):
        try:
            return f"{float(val):{spec}}"
        except ValueError:
            return f"{1.5:{spec}}"
    return val


def render_message(st: Statement) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        if m.group(1) is not None:
            expr, _, spec = m.group(1).partition(":")
            return _value(expr.split("!")[0], spec)
        return _value("", ("." + m.group(2) if m.group(2) else "") + m.group(3))
    return _PLACEHOLDER.sub(sub, st.format).split("\n")[0]


STAMP = "2026-12-01 10:00:00"


def _older(version: str, than: tuple[int, ...]) -> bool:
    """Whether a release (`0.7.3`, `0.8.5.post1`) is older than `than`; unknown: no."""
    nums = tuple(int(x) for x in re.findall(r"\d+", version.split("post")[0])[:3])
    return bool(nums) and nums < than


def envelope(engine: str, st: Statement, version: str = "") -> str:
    """The prefix the engine's logger puts before the message of this statement's process.
    vLLM before 0.8 writes `INFO 12-01 10:00:00 file.py:N] ` (no `[`: its logger.py _FORMAT)
    and runs V0 by default: the engine, the driver worker, the executors and the config print
    in the engine process untagged (only the other ranks' `(VllmWorkerProcess pid=N)`)."""
    if st.kind in ("print", "tqdm") or st.kind.startswith("raise"):
        return ""
    f = st.file
    if engine == "sglang":
        rank_side = not re.search(r"entrypoints/|tokenizer_manager|detokenizer_manager|"
                                  r"data_parallel_controller|utils/watchdog", f)
        return f"[{STAMP} TP0] " if rank_side else f"[{STAMP}] "
    level = {"exception": "ERROR", "warn": "WARNING", "fatal": "CRITICAL"}.get(
        st.kind.split(".")[-1].replace("_once", ""), st.kind.split(".")[-1].replace("_once", "").upper())
    if engine == "vllm" and _older(version, (0, 8)):
        # V1 (opt-in) tags only its workers (v1/executor/multiproc_executor.py `_add_prefix`;
        # the executor itself runs in the untagged engine core)
        tag = "(VllmWorker rank=0 pid=200) " if f.startswith("vllm/v1/worker/") else ""
        return f"{tag}{level} 12-01 10:00:00 {Path(f).name}:{st.line}] "
    if re.search(r"entrypoints/|core_client|async_llm|v1/utils\.py|metrics/", f):
        proc = "APIServer pid=100"
    elif re.search(r"v1/engine/|v1/core/|v1/executor/", f):
        proc = "EngineCore pid=123"
    else:
        proc = "Worker_TP0 pid=200"
    return f"({proc}) {level} 12-01 10:00:00 [{Path(f).name}:{st.line}] "


def render(engine: str, st: Statement, version: str = "") -> str:
    """A statement's line as the release prints it (a draft: its values made up)."""
    msg = render_message(st)
    if st.kind.startswith("raise"):
        return f"{st.kind.split()[-1].split('.')[-1]}: {msg}"
    if st.kind == "tqdm":
        return f"{msg}:  50%|█████     | 2/4 [00:01<00:01,  1.50it/s]"
    return envelope(engine, st, version) + msg


# ----------------------------------------------------------------------------------------------
# Inventories and their meanings

def load_inventory(path: Path) -> dict[str, Any]:
    import yaml
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or "statements" not in doc:
        raise SystemExit(f"{path}: not an inventory (no 'statements')")
    return doc


def meaning_of(pack: Any, line: str) -> dict[str, Any]:
    """What the pack makes of one line (first matching rule, line level: `when:` and the
    machine's phase order are not applied).  The same object `logwatch rules test --json`
    prints."""
    from logwatch.rules.check import line_meaning
    return line_meaning(pack, line)


def verdict(expect: list[str], got: dict[str, Any]) -> str:
    """ok / wrong / missing: whether the meaning is one of those the inventory accepts."""
    from logwatch.rules.check import meaning_accepts
    if meaning_accepts(expect, got):
        return "ok"
    return "missing" if got.get("rule") is None else "wrong"


def tier_of(entry: dict[str, Any]) -> str:
    return str(entry.get("tier", "P3"))


def is_p1_phase(entry: dict[str, Any]) -> bool:
    exp = entry["expect"] if isinstance(entry["expect"], list) else [entry["expect"]]
    return tier_of(entry) == "P1" and any(e.startswith("phase:") or e == "restart" for e in exp)


def score(paths: Iterable[Path], packs: str | None = None) -> list[dict[str, Any]]:
    """Per inventory: the table of statements, right, wrong, missing (by tier)."""
    if packs:
        os.environ["LOGWATCH_RULES_PATH"] = packs
    from logwatch.rules.pack import load_pack
    rows = []
    for path in paths:
        inv = load_inventory(path)
        pack = load_pack(str(Path(packs) / f"{inv['pack']}.yaml") if packs else inv["pack"])
        groups: dict[str, list[int]] = {}
        details = []
        for e in inv["statements"]:
            exp = e["expect"] if isinstance(e["expect"], list) else [e["expect"]]
            got = meaning_of(pack, e["line"])
            v = verdict(exp, got)
            details.append((e["id"], v, got.get("rule")))
            keys = ["all", tier_of(e)]
            if tier_of(e) == "P1":
                keys.append("P1 phase changes" if is_p1_phase(e) else "P1 crash markers / causes")
            for k in keys:
                g = groups.setdefault(k, [0, 0, 0, 0])
                g[0] += 1
                g[{"ok": 1, "wrong": 2, "missing": 3}[v]] += 1
        rows.append({"inventory": path.name, "engine": inv["engine"], "version": inv["version"],
                     "groups": groups, "details": details})
    return rows


def print_score(rows: list[dict[str, Any]], verbose: bool) -> None:
    order = ["P1", "P1 phase changes", "P1 crash markers / causes", "P2", "P3", "all"]
    for r in rows:
        print(f"\n{r['engine']} {r['version']} ({r['inventory']})\n")
        print("| tier | statements | right | wrong | missing | right % |")
        print("|---|---|---|---|---|---|")
        for k in order:
            if k in r["groups"]:
                n, ok, wrong, miss = r["groups"][k]
                print(f"| {k} | {n} | {ok} | {wrong} | {miss} | {100 * ok / n:.0f} |")
        if verbose:
            for sid, v, rule in r["details"]:
                if v != "ok":
                    print(f"  {v:8} {sid:32} rule={rule}")


# ----------------------------------------------------------------------------------------------
# The next release

def _carry(entry: dict[str, Any], sts: list[Statement],
           by_format: dict[str, list[Statement]]) -> dict[str, Any]:
    """A previous entry in the new release: the same format string (its new file:line; one cut
    short with `...` by its beginning), or a
    statement of the same file whose wording is close (`changed:` the old format, to review),
    or none (`gone: true`).  Third-party lines (`source: (torch)`) and frames are kept as
    they are."""
    entry = dict(entry)
    for key in ("gone", "changed"):
        entry.pop(key, None)
    fmt, source = entry.get("format"), str(entry.get("source") or "")
    if not fmt or source.startswith("(") or entry.get("kind") in ("frame", "composed"):
        return entry
    old_file, _, old_line = source.rpartition(":")
    near = lambda c: (c.file != old_file, abs(c.line - int(old_line or 0)))  # noqa: E731
    exact = sorted(by_format.get(fmt, []), key=near)
    if not exact and fmt.endswith("..."):     # a format cut short by hand: its beginning
        head = fmt[:-3].rstrip()
        exact = sorted((c for c in sts if c.format.startswith(head)), key=near)
    if exact:
        entry["source"], entry["kind"] = exact[0].source, exact[0].kind
        return entry
    same_file = [c for c in sts if c.file == old_file and c.kind == entry.get("kind", c.kind)]
    scored = sorted(((difflib.SequenceMatcher(None, fmt, c.format).ratio(), c) for c in same_file),
                    key=lambda rc: (-rc[0], near(rc[1])))
    if scored and scored[0][0] >= 0.75:
        best = scored[0][1]
        entry.update(source=best.source, kind=best.kind, format=best.format, changed=fmt)
        return entry
    entry["gone"] = True
    return entry


def draft(spec: str, previous: Path | None) -> dict[str, Any]:
    """A new inventory: the previous release's entries carried over (`_carry`: same format with
    its new file:line, `changed:` where the wording moved, `gone: true` where it vanished), then
    the statements on the watched paths that the previous release did not have (`review:
    true`, a line drafted by `render`, meaning `info` until a person gives it one)."""
    name, version = split_spec(spec)
    engine = "sglang" if name.startswith("sglang") else name
    sts = read_wheel(fetch(spec), engine)
    by_format: dict[str, list[Statement]] = {}
    for st in sts:
        by_format.setdefault(st.format, []).append(st)
    prev = load_inventory(previous) if previous else {"statements": [], "pack": engine}
    entries = [_carry(e, sts, by_format) for e in prev["statements"]]
    taken = {e.get("format") for e in entries}
    old_formats: set[str] = set()
    if previous and prev.get("version"):
        old_formats = {st.format for st in read_wheel(fetch(f"{engine}=={prev['version']}"), engine)}
    ids = {e.get("id") for e in entries}
    for st in sts:
        if st.format in taken or st.format in old_formats or "debug" in st.kind:
            continue
        taken.add(st.format)
        sid = f"new_{Path(st.file).stem}_{st.line}"
        while sid in ids:           # a carried entry drafted at that file:line of its release
            sid += "_"
        ids.add(sid)
        entries.append({"id": sid, "tier": "P3",
                        "source": st.source, "kind": st.kind, "format": st.format,
                        "line": render(engine, st, version), "expect": ["info"],
                        "review": True})
    return {"engine": engine, "version": version, "pack": prev.get("pack", engine),
            "wheel": fetch(spec).name, "statements": entries}


def header(path: Path | None) -> str:
    """The comment block at the top of an inventory (kept by `draft`)."""
    if path is None:
        return ""
    lines = path.read_text().splitlines(keepends=True)
    return "".join(ln for ln in lines[: next((k for k, ln in enumerate(lines)
                                              if not ln.startswith("#")), 0)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="statements of a release on the startup/crash/shutdown paths")
    ls.add_argument("spec", help="NAME==VERSION (sglang==0.5.23) or a .whl path")
    ls.add_argument("--engine", help="sglang or vllm (default: from the name)")
    ls.add_argument("--all", action="store_true", help="every module, not only the watched paths")
    ls.add_argument("--json", action="store_true", help="one JSON object per statement")
    ls.add_argument("--render", action="store_true", help="add a drafted line as printed")
    dr = sub.add_parser("draft", help="a new release's inventory from the previous one")
    dr.add_argument("spec")
    dr.add_argument("--previous", type=Path)
    dr.add_argument("-o", "--output", type=Path)
    sc = sub.add_parser("score", help="right / wrong / missing per tier of inventories")
    sc.add_argument("inventories", nargs="+", type=Path)
    sc.add_argument("--packs", help="a directory of packs to score instead of the shipped ones")
    sc.add_argument("-v", "--verbose", action="store_true", help="list the statements not right")
    args = p.parse_args(argv)
    if args.cmd == "list":
        if args.spec.endswith(".whl"):
            wheel = Path(args.spec)
            engine = args.engine or wheel.name.split("-")[0]
        else:
            wheel = fetch(args.spec)
            engine = args.engine or split_spec(args.spec)[0]
        for s in read_wheel(wheel, engine, args.all):
            if args.json:
                d = asdict(s)
                if args.render:
                    d["rendered"] = render(engine, s)
                print(json.dumps(d, ensure_ascii=False))
            else:
                print(f"{s.source}\t{s.kind}\t{s.format!r}")
        return 0
    if args.cmd == "draft":
        import yaml
        doc = draft(args.spec, args.previous)
        text = header(args.previous) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True,
                                                      width=4096)
        if args.output:
            args.output.write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    print_score(score(args.inventories, args.packs), args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
