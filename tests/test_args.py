"""Server arguments as data (logwatch/rules/args.py): the launch ledger's "flags changed".

Every real args line of tests/fixtures is found by grep here (so a new fixture is covered
without editing this file) and must parse with the right key types; the other lines must not
be mistaken for args.  Cut lines keep exactly their complete entries (checked at every cut
position), hostile lines end quickly, and `changed_args` reports only the flags that moved.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from logwatch.rules.args import (IGNORED_KEYS, MAX_DEPTH, MAX_INPUT, ArgsSpec, ParsedArgs,
                                 changed_args, changed_text, flag_value_text, launch_digest,
                                 launch_prefixes, parse_args_line)
from logwatch.rules.pack import PackError, load_pack


def shipped_forms() -> tuple[ArgsSpec, ...]:
    """The SGLang and vLLM packs' `args:` forms, the dumps before the command lines (the
    engine's own dump is its final word): where the arguments are read from, as data."""
    specs = [s for name in ("sglang", "vllm") for r in load_pack(name).rules for s in r.args_specs]
    return tuple(sorted(specs, key=lambda s: s.form != "repr"))


SHIPPED = shipped_forms()


def parse(line: str) -> ParsedArgs | None:
    return parse_args_line(line, SHIPPED)

# what a careful reader greps for (the brief's list), and the stricter forms that really are
# args: `launch_server` also occurs in prose and tracebacks (`File ".../launch_server.py"`)
BROAD = re.compile(r"server_args=|non-default args|args: Namespace\(|vllm serve |launch_server")
STRICT = {
    "sglang_server_args": re.compile(r"server_args=(?:ServerArgs\(|\{)"),
    "vllm_non_default": re.compile(r"non-default args: \{"),
    "vllm_namespace": re.compile(r"\bargs: Namespace\("),
    "command_line": re.compile(r"(?<!\S)-m\s+(?:sglang\.launch_server|vllm\.entrypoints\.openai"
                               r"\.api_server)(?:\s|$)|(?<![\w.-])(?:vllm|sglang) serve[ \t]+[^\s;|&<>`]"),
}
# keys whose type is known whatever the engine version (checked when present)
TYPES: dict[str, type | tuple[type, ...]] = {
    "model_path": str, "tokenizer_path": str, "model": str, "model_tag": str,
    "served_model_name": (str, type(None)), "host": (str, type(None)),
    "tp_size": int, "dp_size": int, "pp_size": int, "ep_size": int, "nnodes": int,
    "node_rank": int, "port": int, "context_length": (int, type(None)),
    "tensor_parallel_size": int, "pipeline_parallel_size": int, "max_model_len": int,
    "chunked_prefill_size": (int, type(None)), "max_running_requests": (int, type(None)),
    "mem_fraction_static": (float, type(None)), "gpu_memory_utilization": float,
    "trust_remote_code": bool, "skip_tokenizer_init": bool, "disable_cuda_graph": bool,
    "disable_radix_cache": bool, "enforce_eager": bool, "is_embedding": bool,
}
MODEL_KEYS = ("model_path", "model", "model_tag")


def fixture_lines() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(FIXTURES.glob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.split("\n"), 1):
            out.append((path.name, n, line))
    return out


LINES = fixture_lines()
ARG_LINES = [t for t in LINES if any(rx.search(t[2]) for rx in STRICT.values())]
MENTIONS = [t for t in LINES if BROAD.search(t[2]) and t not in ARG_LINES]


def ids(items: list[tuple[str, int, str]]) -> list[str]:
    return [f"{name}:{n}" for name, n, _ in items]


def cpu_bounded(fn: Any, *a: Any, limit: float = 1.0) -> Any:
    """Run fn, asserting it used less than `limit` s of CPU (not wall time: the machine is shared)."""
    began = time.process_time()
    out = fn(*a)
    used = time.process_time() - began
    assert used < limit, f"took {used:.2f} s of CPU"
    return out


def expected_source(line: str) -> str:
    return next(src for src, rx in STRICT.items() if rx.search(line))


# ---------------------------------------------------------------------------- real fixture lines

def test_the_fixtures_hold_every_kind_we_rely_on() -> None:
    kinds = {expected_source(line) for _, _, line in ARG_LINES}
    assert {"sglang_server_args", "vllm_namespace", "command_line"} <= kinds
    assert MENTIONS, "prose / traceback lines naming launch_server are the negative cases"


@pytest.mark.parametrize("name,n,line", ARG_LINES, ids=ids(ARG_LINES))
def test_real_args_line_parses_with_typed_keys(name: str, n: int, line: str) -> None:
    got = cpu_bounded(parse, line)
    assert isinstance(got, ParsedArgs)
    source = expected_source(line)
    assert got.source == source
    assert got.values, "no key parsed"
    for key, typ in TYPES.items():
        if key in got.values:
            assert isinstance(got.values[key], typ), (key, got.values[key])
            if typ is int:
                assert not isinstance(got.values[key], bool), key
    assert any(isinstance(got.values.get(k), str) and got.values[k] for k in MODEL_KEYS)
    json.dumps(got.values)   # the ledger stores and prints them
    if source != "command_line":
        closer = "}" if re.search(r"(?:server_args=|non-default args: )\{", line) else ")"
        assert got.partial == (not line.rstrip().endswith(closer))
    else:
        assert not got.partial


@pytest.mark.parametrize("name,n,line", MENTIONS, ids=ids(MENTIONS))
def test_lines_that_only_mention_launch_server_hold_no_args(name: str, n: int, line: str) -> None:
    assert parse(line) is None


def test_no_other_fixture_line_is_taken_for_args() -> None:
    wrong = [f"{name}:{n}" for name, n, line in LINES
             if (name, n, line) not in ARG_LINES and parse(line) is not None]
    assert not wrong


def test_cut_real_dumps_keep_exactly_their_complete_entries() -> None:
    """The fixture dumps are themselves cut; cutting them further anywhere keeps a prefix of
    the same entries with the same values."""
    dumps = [line for _, _, line in ARG_LINES if expected_source(line) != "command_line"]
    assert dumps
    for line in dumps:
        full = parse(line)
        assert full is not None
        start = re.search(r"(?:ServerArgs\(|Namespace\(|: \{|=\{)", line).end()  # type: ignore[union-attr]
        for i in range(start, len(line)):
            got = parse(line[:i])
            assert got is not None and got.partial
            assert list(got.values) == list(full.values)[:len(got.values)]
            assert all(got.values[k] == full.values[k] for k in got.values)


def test_a_command_line_and_the_dump_of_the_same_launch_agree() -> None:
    """sglang-018: the wrapper echoes `--model X ... --tp 16 ...`, then SGLang dumps ServerArgs."""
    path = FIXTURES / "sglang-018.log"
    assert path.exists(), "tests/fixtures/sglang-018.log is a shipped fixture"
    parsed = [p for line in path.read_text(encoding="utf-8", errors="replace").split("\n")
              if (p := parse(line)) is not None]
    cmd = next(p for p in parsed if p.source == "command_line")
    dump = next(p for p in parsed if p.source == "sglang_server_args")
    assert cmd.values["tp_size"] == 16 and cmd.values["model_path"] == "/place/deepseek-r1/weights"
    common = set(cmd.values) & set(dump.values)
    assert {"model_path", "context_length", "trust_remote_code", "host", "port"} <= common
    assert changed_args(cmd.values, dump.values, common_only=True) == {}


# ---------------------------------------------------------------------------- the value syntax

DUMP = ("[2025-10-06 10:00:05] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
        "tp_size=8, mem_fraction_static=0.88, disable_cuda_graph=False, chunked_prefill_size=-1, "
        "lora_paths=None, cuda_graph_bs=[1, 2, 4, 8], json_model_override_args='{}', "
        "speculative=SpeculativeConfig(method='eagle', num_tokens=3, draft=None), "
        "download_dir=PosixPath('/data/hf'), load_format=<LoadFormat.AUTO: 'auto'>, "
        "dtype=torch.bfloat16, tags={'b', 'a'}, caps=(1, 2.5), one=(7,), scale=1e-05, "
        "limits={'image': 4, 2: 'two'}, esc='it\\'s a \"q\"\\n\\t\\x41\\u00e9\\\\', dq=\"it's\", "
        "fn=<function serve at 0x7f3a2c1b0>, odd=1 2 3, inf=inf, random_seed=424242)")


def test_a_full_dump_with_every_value_shape() -> None:
    got = parse(DUMP)
    assert got is not None and got.source == "sglang_server_args" and not got.partial
    v = got.values
    assert v["model_path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert v["tp_size"] == 8 and v["mem_fraction_static"] == 0.88
    assert v["disable_cuda_graph"] is False and v["lora_paths"] is None
    assert v["chunked_prefill_size"] == -1 and v["scale"] == 1e-05
    assert v["cuda_graph_bs"] == [1, 2, 4, 8] and v["json_model_override_args"] == "{}"
    assert v["speculative"] == {"__type__": "SpeculativeConfig", "method": "eagle",
                                "num_tokens": 3, "draft": None}
    assert v["download_dir"] == "/data/hf"          # one positional argument: the value itself
    assert v["load_format"] == "auto"               # enum repr: its value
    assert v["dtype"] == "torch.bfloat16"
    assert v["tags"] == ["a", "b"]                  # sets: sorted lists
    assert v["caps"] == (1, 2.5) and v["one"] == (7,)
    assert v["limits"] == {"image": 4, 2: "two"}
    assert v["esc"] == "it's a \"q\"\n\tAé\\" and v["dq"] == "it's"
    assert v["fn"] == "<function serve at 0x7f3a2c1b0>"   # an object repr: its raw text
    assert v["odd"] == "1 2 3"                      # unreadable: raw text, the line goes on
    assert math.isinf(v["inf"]) and v["random_seed"] == 424242


def test_nested_reprs() -> None:
    line = ("INFO 10-06 10:00:05 [utils.py:233] non-default args: {'model': 'm', "
            "'speculative_config': SpeculativeConfig(method='eagle', "
            "draft=DraftConfig(path=PosixPath('/d'), layers=[1, (2, 3)], extra={'k': {'j': None}})), "
            "'compilation_config': {\"level\":3,\"use_inductor\":true,\"cache_dir\":null}, "
            "'kv': KVTransferConfig('conn', 'role', port=7), 'frozen': frozenset({3, 1}), 'e': set()}")
    got = parse(line)
    assert got is not None and got.source == "vllm_non_default" and not got.partial
    assert got.values["speculative_config"] == {
        "__type__": "SpeculativeConfig", "method": "eagle",
        "draft": {"__type__": "DraftConfig", "path": "/d", "layers": [1, (2, 3)],
                  "extra": {"k": {"j": None}}}}
    assert got.values["compilation_config"] == {"level": 3, "use_inductor": True, "cache_dir": None}
    assert got.values["kv"] == {"__type__": "KVTransferConfig", "__args__": ["conn", "role"], "port": 7}
    assert got.values["frozen"] == [1, 3] and got.values["e"] == []


def test_enum_reprs() -> None:
    got = parse("server_args=ServerArgs(load_format=<LoadFormat.AUTO: 'auto'>, "
                          "level=<CompilationLevel.PIECEWISE: 3>, "
                          "odd=<Weird.X: not a literal>, fn=<function <lambda> at 0x7f>, tp_size=2)")
    assert got is not None and not got.partial
    assert got.values == {"load_format": "auto", "level": 3, "odd": "<Weird.X: not a literal>",
                          "fn": "<function <lambda> at 0x7f>", "tp_size": 2}


def test_every_form_is_found_behind_its_envelope() -> None:
    cases = {
        "[2025-10-06 10:00:05 TP0] server_args=ServerArgs(model_path='a', tp_size=8)":
            ("sglang_server_args", {"model_path": "a", "tp_size": 8}),
        "[2026-10-30 10:00:00] server_args={'model_path': 'Qwen/Qwen3-8B', 'tp_size': 2}":
            ("sglang_server_args", {"model_path": "Qwen/Qwen3-8B", "tp_size": 2}),
        "(APIServer pid=1) INFO 10-03 10:00:00 [utils.py:233] non-default args: "
        "{'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2}\r":
            ("vllm_non_default", {"model": "Qwen/Qwen3-8B", "tensor_parallel_size": 2}),
        "INFO 09-03 10:00:05 api_server.py:527] args: Namespace(host=None, port=8000, model='m')":
            ("vllm_namespace", {"host": None, "port": 8000, "model": "m"}),
        "\x1b[1;36m(APIServer pid=7)\x1b[0;0m INFO 10-03 10:00:00 [utils.py:233] non-default args: {'a': 1}":
            ("vllm_non_default", {"a": 1}),
    }
    for line, (source, values) in cases.items():
        got = parse(line)
        # SGLang's dump and vLLM's Namespace name every field; `non-default args` does not
        complete = source in ("sglang_server_args", "vllm_namespace")
        assert got == ParsedArgs(values, False, source, complete), line
    for line in ("[2025-10-06 10:00:05] Load weight begin. avail mem=78.12 GB", "",
                 "  File \"/x/sglang/launch_server.py\", line 69, in <module>",
                 "    launch_server(server_args)", "Scheduler(server_args, port_args)",
                 "use `vllm serve` instead", "args: something else"):
        assert parse(line) is None, line


# ---------------------------------------------------------------------------- cut lines

def test_a_cut_line_keeps_its_complete_keys() -> None:
    got = parse("[2025-10-06 10:00:05] server_args=ServerArgs(model_path='x', "
                          "tp_size=8, mem_fra")
    assert got == ParsedArgs({"model_path": "x", "tp_size": 8}, True, "sglang_server_args", True)
    for tail, keys in (("port=400", ["a"]),                # a number may be cut: not kept
                       ("host='::", ["a"]),                # inside a string
                       ("l=[1, [2, 3], ", ["a"]),          # inside a list
                       ("s=Spec(method='eagle', n", ["a"]),
                       ("f=<function f at", ["a"]),
                       ("b=True, ", ["a", "b"]),
                       ("b=Tru", ["a"])):
        got = parse("server_args=ServerArgs(a=1, " + tail)
        assert got is not None and got.partial and list(got.values) == keys, tail
    got = parse("non-default args: {'model': 'm', 'max_model_len': 327")
    assert got == ParsedArgs({"model": "m"}, True, "vllm_non_default")


def test_cut_anywhere_keeps_a_prefix_of_the_full_parse() -> None:
    full = parse(DUMP)
    assert full is not None
    start = DUMP.index("ServerArgs(") + len("ServerArgs(")
    for i in range(start, len(DUMP) - 1):
        got = parse(DUMP[:i])
        assert got is not None and got.partial, i
        assert list(got.values) == list(full.values)[:len(got.values)], DUMP[:i]
        assert all(repr(got.values[k]) == repr(full.values[k]) for k in got.values), DUMP[:i]


# ---------------------------------------------------------------------------- command lines

def test_sglang_command_lines() -> None:
    got = parse("+ python3 -m sglang.launch_server --model Qwen/Qwen3-8B --tp 8 --dp 2 "
                          "--ep-size 4 --pipeline-parallel-size=2 --enable-mixed-chunk "
                          "--mem-fraction-static 0.85 --max-running-requests=2048 "
                          "--disable-cuda-graph --trust-remote-code true --cuda-graph-bs 1 2 4 "
                          "--speculative-config '{\"method\": \"eagle\"}' --host :: "
                          "--chunked-prefill-size -1 > server.log 2>&1 &")
    assert got == ParsedArgs({
        "model_path": "Qwen/Qwen3-8B", "tp_size": 8, "dp_size": 2, "ep_size": 4, "pp_size": 2,
        "enable_mixed_chunk": True, "mem_fraction_static": 0.85, "max_running_requests": 2048,
        "disable_cuda_graph": True, "trust_remote_code": True, "cuda_graph_bs": [1, 2, 4],
        "speculative_config": {"method": "eagle"}, "host": "::", "chunked_prefill_size": -1,
    }, False, "command_line")
    got = parse("sglang serve --model-path m --tp-size 2")
    assert got is not None and got.values == {"model_path": "m", "tp_size": 2}


def test_vllm_command_lines() -> None:
    got = parse("$ vllm serve Qwen/Qwen3-8B --tensor-parallel-size 8 --max-model-len 32768 "
                          "--gpu-memory-utilization=0.9 --enforce-eager --no-enable-prefix-caching "
                          "-pp 2 --served-model-name \"my model\" | tee vllm.log")
    assert got == ParsedArgs({
        "model": "Qwen/Qwen3-8B", "tensor_parallel_size": 8, "max_model_len": 32768,
        "gpu_memory_utilization": 0.9, "enforce_eager": True, "enable_prefix_caching": False,
        "pipeline_parallel_size": 2, "served_model_name": "my model",
    }, False, "command_line")
    got = parse("python -u -m vllm.entrypoints.openai.api_server --model m -tp 2")
    assert got is not None and got.values == {"model": "m", "tensor_parallel_size": 2}


def test_a_command_inside_brackets_or_quotes_ends_with_them() -> None:
    got = parse("INFO - With image: x, arguments: [python -m sglang.launch_server "
                          "--model-path /m --port 40024], ports: [40024], envs: {}")
    assert got is not None and got.values == {"model_path": "/m", "port": 40024}
    got = parse("bash -c \"python3 -m sglang.launch_server --model-path /m --tp 2\" && echo ok")
    assert got is not None and got.values == {"model_path": "/m", "tp_size": 2} and not got.partial
    got = parse("ssh gpu1 '/opt/venv/bin/vllm serve m --port 8000' ; date")
    assert got is not None and got.values == {"model": "m", "port": 8000}


def test_a_command_line_and_a_dump_compare_equal_on_the_aliased_keys() -> None:
    cmd = parse("python3 -m sglang.launch_server --model-path m --tp 8 --dp 2 --ep 8")
    dump = parse("server_args=ServerArgs(model_path='m', tp_size=8, dp_size=2, ep_size=8, "
                           "port=30000)")
    assert cmd is not None and dump is not None
    assert changed_args(cmd.values, dump.values, common_only=True) == {}
    assert set(cmd.values) <= set(dump.values)
    vcmd = parse("vllm serve Qwen/Qwen3-8B -tp 2")
    vdump = parse("non-default args: {'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2}")
    assert vcmd is not None and vdump is not None and vcmd.values == vdump.values


# ---------------------------------------------------------------------------- hostile input

def test_a_one_megabyte_line_is_read_only_up_to_the_bound() -> None:
    big = "server_args=ServerArgs(model_path='m', " + "x_flag=1, " * 110_000
    assert len(big) > 1_000_000
    got = cpu_bounded(parse, big)
    assert got is not None and got.partial and got.values["model_path"] == "m"
    assert cpu_bounded(parse, "y" * 1_000_000) is None
    got = cpu_bounded(parse, "server_args=ServerArgs(a='" + "z" * 1_000_000 + "')")
    assert got is not None and got.partial and got.values == {}      # the value passes the bound
    got = cpu_bounded(parse, "vllm serve m " + "--flag-a 1 " * 100_000)
    assert got is not None and got.partial and got.values["model"] == "m"
    ok = "server_args=ServerArgs(a=1, b='" + "z" * (MAX_INPUT - 100) + "')"
    got = cpu_bounded(parse, ok)
    assert got is not None and not got.partial and len(got.values["b"]) == MAX_INPUT - 100


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("(", ")"), ("{", "}"), ("<A.B: ", ">"),
                                           ("f(", ")"), ("{1: ", "}"), ("[(", ")]")])
def test_ten_thousand_nested_brackets(opener: str, closer: str) -> None:
    """Past the depth bound the parse stops where a cut line would: the entries before stay."""
    for line in ("server_args=ServerArgs(model_path='m', a=" + opener * 10_000 + "1"
                 + closer * 10_000 + ", b=2)",
                 "server_args=ServerArgs(model_path='m', a=" + opener * 10_000,
                 "non-default args: {'model': 'm', 'a': " + opener * 10_000 + "}"):
        got = cpu_bounded(parse, line)
        assert got is not None and got.partial
        assert list(got.values) == ["model" if "non-default" in line else "model_path"]


def test_ten_thousand_nested_object_reprs_are_one_raw_value() -> None:
    """`<...>` that is not an enum is kept as raw text, never parsed inside: no nesting to bound."""
    line = "server_args=ServerArgs(a=" + "<" * 10_000 + "x" + ">" * 10_000 + ", b=2)"
    got = cpu_bounded(parse, line)
    assert got is not None and not got.partial and got.values["b"] == 2
    assert got.values["a"] == "<" * 10_000 + "x" + ">" * 10_000
    got = cpu_bounded(parse, "server_args=ServerArgs(b=2, a=" + "<" * 10_000 + "x")
    assert got is not None and got.partial and got.values == {"b": 2}


def test_the_depth_bound_is_exact() -> None:
    k = MAX_DEPTH - 1     # the dump's own parenthesis is the first level
    got = parse("server_args=ServerArgs(a=" + "[" * k + "1" + "]" * k + ", b=2)")
    assert got is not None and not got.partial and list(got.values) == ["a", "b"]
    got = parse("server_args=ServerArgs(a=" + "[" * (k + 1) + "1" + "]" * (k + 1) + ", b=2)")
    assert got is not None and got.partial and got.values == {}


def test_binary_garbage() -> None:
    import random
    rng = random.Random(15)
    soups = ["".join(chr(rng.randrange(0, 0x2FFF)) for _ in range(200_000)),
             "".join(rng.choice("{}[]()<>,:='\"\\ab1 -.\x00") for _ in range(200_000)),
             bytes(range(256)).decode("latin-1") * 1000]
    for soup in soups:
        for prefix in ("", "server_args=ServerArgs(", "server_args={", "non-default args: {",
                       "args: Namespace(", "python -m sglang.launch_server ", "vllm serve "):
            got = cpu_bounded(parse, prefix + soup, limit=0.5)
            if prefix:
                assert got is not None
                json.dumps(got.values, default=repr)
    got = parse("server_args=ServerArgs(a=1, b=" + "\x00\xff\ud800" * 10 + ", c='\\ud800')")
    assert got is not None and got.values["a"] == 1 and got.values["c"] == "\ufffd"
    got = parse("server_args=ServerArgs(a=1, )]}, b=2)")
    assert got is not None and got.values["a"] == 1


# ---------------------------------------------------------------------------- changed_args

def test_changed_args_between_two_launches() -> None:
    base = ("[2025-10-06 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=8, "
            "max_running_requests={mrr}, disable_cuda_graph={dcg}, cuda_graph_max_bs=256, "
            "random_seed={seed}, fn=<function f at 0x{addr}>, port=30000, ratio=nan)")
    old = parse(base.format(mrr=64, dcg=False, seed=123456, addr="7f00aa"))
    new = parse(base.format(mrr=2048, dcg=True, seed=987654, addr="7f99bb"))
    assert old is not None and new is not None
    assert changed_args(old.values, new.values) == {"max_running_requests": (64, 2048),
                                                    "disable_cuda_graph": (False, True)}


def test_a_launch_digest_is_equal_where_changed_args_finds_no_change() -> None:
    """A restart loop's relaunches print other `random_seed`s and function addresses: one
    digest (sinks/alerts/loop.py folds their crashes); other flags: another."""
    base = ("[2025-10-06 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
            "mem_fraction_static={mem}, random_seed={seed}, fn=<function f at 0x{addr}>, "
            "cuda_graph_bs=[1, 2, 4], ratio=nan)")
    runs = [parse(base.format(mem=m, seed=s, addr=a)) for m, s, a in
            ((0.88, 1, "7f00aa"), (0.88, 2, "7f99bb"), (0.8, 1, "7f00aa"))]
    digests = [launch_digest(r.values) for r in runs if r is not None]
    assert digests[0] == digests[1] != digests[2] and len(digests) == 3
    assert launch_digest({"l": [1, 2], "n": 8}) == launch_digest({"l": (1, 2), "n": 8.0})
    assert launch_digest({"f": False}) != launch_digest({"f": 0})
    assert launch_digest({}) == ""



def test_dumps_cut_apart_compare_on_the_flags_both_have_whole() -> None:
    """A line cap cuts a long dump where each launch's `random_seed` width puts it: the
    digests of the first 32, 64, ... flags agree on the flags both have whole; a flag
    among them changed (`mem_fraction_static`) digests apart."""
    def cut(mem: float, seed: int, at: int) -> str:
        flags = "".join(f", flag_{i:03d}={i}" for i in range(200))
        line = (f"[2025-10-06 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
                f"mem_fraction_static={mem}, random_seed={seed}{flags})")
        return line[:at]
    runs = [parse(cut(m, s, at)) for m, s, at in
            ((0.88, 123456789, 2000), (0.88, 1012345678, 2600), (0.8, 98765432, 2600))]
    assert all(r is not None and r.partial for r in runs)
    a, b, c = (launch_prefixes(r.values).split(",") for r in runs if r is not None)
    assert len(a) < len(b) == len(c) and b[: len(a)] == a and c[0] != a[0]
    assert launch_prefixes({"k": 1}) == ""

def test_changed_args_details() -> None:
    assert "random_seed" in IGNORED_KEYS and "port" not in IGNORED_KEYS
    assert changed_args({"a": 1, "gone": "x"}, {"a": 1, "new": True}) == {
        "new": (None, True), "gone": ("x", None)}
    assert changed_args({"a": 1, "gone": "x"}, {"a": 1, "new": True}, common_only=True) == {}
    assert changed_args({"f": False, "z": 0}, {"f": 0, "z": False}) == {"f": (False, 0), "z": (0, False)}
    assert changed_args({"l": [1, 2], "t": (1,), "n": 8}, {"l": (1, 2), "t": [1], "n": 8.0}) == {}
    # mappings on both sides: the change is named by its path (test_nested_configs_...)
    assert changed_args({"d": {"a": [1]}}, {"d": {"a": [2]}}) == {"d.a": ([1], [2])}
    assert changed_args({"d": None}, {"d": {"a": [2]}}) == {"d": (None, {"a": [2]})}
    assert changed_args({"port": 1, "random_seed": 1}, {"port": 2, "random_seed": 2},
                        ignore=("port",)) == {"random_seed": (1, 2)}
    assert changed_args({}, {}) == {}


def test_changed_flags_read_as_the_engine_prints_them() -> None:
    """One rendering for watch, history, compare: `None -> 1024`, `False -> True` as the
    arguments line has them (history said `null -> 1024`, `false -> true`, watch `False`)."""
    assert changed_text({"max_running_requests": (None, 1024), "disable_cuda_graph": (False, True),
                         "model_path": ("/m/a", "/m/b")}) == \
        "max_running_requests None -> 1024, disable_cuda_graph False -> True, model_path /m/a -> /m/b"
    # a string that would read as another value, or hides its bounds, is quoted
    assert [flag_value_text(v) for v in ("", "None", "8", "a b", "x,y", 8, 0.5, [1, 2], {"k": 1})] \
        == ["''", "'None'", "'8'", "'a b'", "'x,y'", "8", "0.5", "[1, 2]", "{'k': 1}"]
    assert flag_value_text("x" * 30, width=24) == "x" * 23 + "…"
    assert changed_text({f"f{i}": (i, i + 1) for i in range(6)}, limit=4).endswith("f3 3 -> 4 (+2 more)")


# ---------------------------------------------------------------------------- forms as data

COMMANDS = [
    "+ python3 -m sglang.launch_server --model Qwen/Qwen3-8B --tp 8 --dp 2 --ep-size 4 "
    "--pipeline-parallel-size=2 --disable-cuda-graph --cuda-graph-bs 1 2 4 > server.log 2>&1 &",
    "sglang serve --model-path m --tp-size 2",
    "INFO - With image: x, arguments: [python -m sglang.launch_server --model-path /m "
    "--port 40024], ports: [40024], envs: {}",
    "bash -c \"python3 -m sglang.launch_server --model-path /m --tp 2\" && echo ok",
    "$ vllm serve Qwen/Qwen3-8B --tensor-parallel-size 8 --enforce-eager "
    "--no-enable-prefix-caching -pp 2 --served-model-name \"my model\" | tee vllm.log",
    "python -u -m vllm.entrypoints.openai.api_server --model m -tp 2 -q fp8",
    "ssh gpu1 '/opt/venv/bin/vllm serve m --port 8000' ; date",
]


def _spec_rules(pack_name: str) -> list[Any]:
    from logwatch.rules.pack import load_pack
    return [r for r in load_pack(pack_name).rules if r.args_specs]


def args_corpus():
    """(key, line): every fixture line, test_args.COMMANDS, every sample of the sglang, vllm and
    base packs, every line of the engine inventories."""
    corpus = [(f"{name}:{n}", line) for name, n, line in LINES]
    corpus += [(f"COMMANDS[{i}]", line) for i, line in enumerate(COMMANDS)]
    for pack in ("sglang", "vllm", "base"):
        for r in load_pack(pack).rules:
            corpus += [(f"{pack}.yaml:{r.id}:sample{j}", s.line) for j, s in enumerate(r.samples)]
    for inv in sorted((ROOT / "tests" / "inventory").glob("*.yaml")):
        for j, e in enumerate(yaml.safe_load(inv.read_text(encoding="utf-8"))["statements"]):
            corpus.append((f"{inv.name}:{j}", e["line"]))
    return corpus


GOLDEN = ROOT / "tests" / "args_forms_golden.json"


def _digest(p: ParsedArgs) -> str:
    doc = json.dumps([p.values, p.partial, p.source], ensure_ascii=False, default=repr)
    return hashlib.sha1(doc.encode()).hexdigest()[:16]


def test_the_packs_forms_give_what_the_built_in_forms_gave() -> None:
    """rules/args.py had SGLang's and vLLM's forms built in (dump markers, flag aliases) until
    issue 33; the packs carry them as `args:` data.  What the built-in forms made of every line
    of the corpus was recorded (tests/args_forms_golden.json) before they were deleted: the
    packs' forms give exactly that, and no other fixture line holds arguments."""
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))["lines"]
    corpus = dict(args_corpus())
    assert len(golden) >= 26 and set(golden) <= set(corpus)
    got = {k: _digest(p) for k, line in corpus.items() if (p := parse(line)) is not None}
    fixtures = {k for k in got if k.split(":")[0].endswith(".log")}
    assert {k: got.get(k) for k in golden} == golden
    assert fixtures <= set(golden), "a fixture line read as arguments that was not before"


@pytest.mark.parametrize("pack_name", ["sglang", "vllm"])
def test_each_rule_reads_its_own_lines_as_the_shipped_forms(pack_name: str) -> None:
    """Each args rule's forms alone give, on the lines it matches, what all the shipped forms
    give (a rule's forms are what the machine passes: `rule.args_specs`)."""
    rules = _spec_rules(pack_name)
    assert rules and all(r.args for r in rules)
    used = {r.id: 0 for r in rules}
    for _, line in args_corpus():
        shipped = parse(line)
        for r in rules:
            got = parse_args_line(line, r.args_specs)
            if got is None:
                assert shipped is None or not r.regex.search(line), (r.id, line[:120])
                continue
            assert got == shipped, (r.id, line[:120])
            used[r.id] += 1
    assert all(used.values()), used


def test_trtllm_args_forms() -> None:
    """TensorRT-LLM prints no args dump of trtllm-serve; the worker's PyTorchConfig repr,
    Dynamo's LLM-API config and a wrapper's echo of the command are its launch settings."""
    rules = {r.id: r for r in _spec_rules("trtllm")}
    line = (FIXTURES / "trtllm-012.log").read_text().split("\n")[60]
    assert "PyTorchConfig(" in line and rules["backend_config"].regex.search(line)
    got = parse_args_line(line, rules["backend_config"].args_specs)
    assert got is not None and got.source == "trtllm_backend_config"
    assert got.values["use_cuda_graph"] is True and got.values["cuda_graph_max_batch_size"] == 128
    assert got.values["cuda_graph_batch_sizes"][:3] == [1, 2, 4]
    cmd = ("+ trtllm-serve /mnt/model/DeepSeek-R1-Distill-Qwen-32B --tp_size 4 --max_batch_size 64 "
           "--kv_cache_free_gpu_memory_fraction 0.9 --extra_llm_api_options ./extra.yaml")
    got = parse_args_line(cmd, rules["launch_command"].args_specs)
    assert got == ParsedArgs({"model": "/mnt/model/DeepSeek-R1-Distill-Qwen-32B", "tp_size": 4,
                              "max_batch_size": 64, "kv_cache_free_gpu_memory_fraction": 0.9,
                              "extra_llm_api_options": "./extra.yaml"}, False, "command_line")
    assert parse_args_line("trtllm-serve serve m --port 8000",
                           rules["launch_command"].args_specs).values == {"model": "m", "port": 8000}
    assert parse(cmd) is None       # not one of the SGLang / vLLM forms


def _user_pack(tmp_path: Path, extends: str | None) -> Path:
    """A pack with one `args: true` rule, extending `extends` (None: a pack of its own)."""
    head = f"name: mine\nextends: {extends}\n" if extends else \
        "name: mine\nphases: [launching, loading_shards]\n"
    pack = tmp_path / "mine.yaml"
    pack.write_text(head + "rules:\n  - id: my_args\n    pattern: 'my-launcher .*--'\n"
                    "    phase: launching\n    args: true\n", encoding="utf-8")
    return pack


def test_args_true_takes_the_forms_of_the_pack_it_extends(tmp_path: Path) -> None:
    """`args: true` in a user pack that extends a shipped one reads that pack's forms (no
    engine's forms are in the code any more)."""
    pack = load_pack(str(_user_pack(tmp_path, "sglang")))
    rule = next(r for r in pack.rules if r.id == "my_args")
    shipped = [s for r in load_pack("sglang").rules for s in r.args_specs]
    assert [s.source for s in rule.args_specs] == [s.source for s in shipped]
    got = parse_args_line("my-launcher -- python3 -m sglang.launch_server --model m --tp 2",
                          rule.args_specs)
    assert got == ParsedArgs({"model_path": "m", "tp_size": 2}, False, "command_line")


def test_args_true_without_forms_is_a_pack_error_naming_the_data_form(tmp_path: Path) -> None:
    with pytest.raises(PackError) as e:
        load_pack(str(_user_pack(tmp_path, None)))
    msg = str(e.value)
    assert "mine.yaml" in msg and "my_args" in msg and "args" in msg
    assert "form: repr, start:" in msg, msg


# ---------------------------------------------------------------------------- the fast path

def slow_parse(line: str, monkeypatch: pytest.MonkeyPatch) -> ParsedArgs | None:
    """The dump read token by token (the `name=value,` shortcut never matching)."""
    from logwatch.rules import args as args_mod
    with monkeypatch.context() as m:
        m.setattr(args_mod, "_SIMPLE_KW", re.compile(r"(?!)"))
        return parse(line)


def same_parse(a: ParsedArgs | None, b: ParsedArgs | None) -> bool:
    """Equal, NaN included (repr: `nan` reads as itself)."""
    return repr(a) == repr(b)


def test_the_shortcut_reads_every_real_dump_and_its_cuts_as_the_parser(monkeypatch) -> None:
    dumps = [line for _, _, line in ARG_LINES if expected_source(line) != "command_line"]
    for line in dumps + [DUMP]:
        assert same_parse(parse(line), slow_parse(line, monkeypatch)), line
        for i in range(0, len(line), 7):
            assert same_parse(parse(line[:i]), slow_parse(line[:i], monkeypatch)), line[:i]


VALUES = ["'a b'", "'it\\'s'", '"x"', "''", "1", "-2", "1.5e3", "0x1F", "inf", "nan", "None",
          "True", "false", "a.b", "abc", "[1, 2]", "{'a': 1}", "<Enum.X: 1>", "f(1)", "'a' 'b'",
          "b'x'", "r'\\d'", "x == 1", "(1,)", "1 2", "'\\n'", "\"q\" ", " 7 ", "set()"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b_2", "port", "x.y", "_k", "2x", ""]),
                          st.sampled_from(["=", " = ", "==", ": "]),
                          st.sampled_from(VALUES), st.sampled_from([", ", ",", " ,", "; ", ""])),
                max_size=12),
       st.sampled_from(["ServerArgs(", "Namespace("]), st.sampled_from([")", ", )", "", ")x"]),
       st.integers(0, 400))
def test_the_shortcut_reads_any_dump_as_the_parser(items, head, tail, cut) -> None:
    """Strings, numbers and names beside every other value shape, odd separators, keys
    that are not names, cuts anywhere: the parse is the token-by-token parser's."""
    body = "".join(k + eq + v + sep for k, eq, v, sep in items)
    line = ("[2026-11-30 10:00:00] server_args=" + head + body + tail)[:60 + cut]
    with pytest.MonkeyPatch.context() as mp:
        assert same_parse(parse(line), slow_parse(line, mp)), line
