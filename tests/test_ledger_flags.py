"""What `history` / `compare` say changed between two launches, and the advice on one launch's
flags, against what vLLM 0.34.0 and SGLang 0.5.23 print (their argparse definitions and
their args dumps: vLLM entrypoints/common/startup.py `non-default args`, SGLang
entrypoints/engine.py `server_args={resolved_dict()}`), read from the logs built from
tests/fixtures/built/ (helper adv38: cases/ of its clone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import FIXTURES
from logwatch.app.history import read_ledger
from logwatch.ledger import StartupRecord
from logwatch.rules.args import changed_args, changed_text, parse_args_line
from logwatch.rules.pack import load_pack

BUILT = FIXTURES / "built"


def vllm_launches(tmp_path: Path, dumps: list[str]) -> Path:
    """vllm-034-default.log once per dump (its `non-default args` replaced), an hour apart."""
    tpl = (BUILT / "vllm-034-default.log").read_text().splitlines()
    out = []
    for i, dump in enumerate(dumps):
        for line in tpl:
            if "non-default args: " in line:
                line = line.split("non-default args: ")[0] + "non-default args: " + dump
            out.append(line.replace("12-01 10:", f"12-01 {10 + i:02d}:"))
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(out) + "\n")
    return path


def records(path: Path, spec: str = "auto") -> list[StartupRecord]:
    got: list[StartupRecord] = []
    read_ledger(str(path), spec, got.append)
    return got


# ------------------------------------------------------------------- nested configs, by path

SPEC_A = ("{'model_tag': 'Qwen/Qwen3-32B', 'model': 'Qwen/Qwen3-32B', 'speculative_config': "
          "{'method': 'eagle3', 'model': 'RedHatAI/Qwen3-32B-speculator.eagle3', "
          "'num_speculative_tokens': 3}, 'compilation_config': {'mode': "
          "<CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': "
          "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4], "
          "'pass_config': {'fuse_allreduce_rms': True}}}")


def test_a_changed_key_of_a_config_is_named_by_its_path(tmp_path: Path) -> None:
    """vLLM prints `--speculative-config` / `--compilation-config` as dicts (CompilationConfig's
    __repr__ is a dict of the keys set).  One key moved in each: before, `changed` held the two
    whole dicts and the table cut them at 24 characters, before the key that moved
    (`speculative_config {'method': 'eagle3', 'm… -> {'method': 'eagle3', 'm…`)."""
    b = SPEC_A.replace("'num_speculative_tokens': 3", "'num_speculative_tokens': 5") \
        .replace("[1, 2, 4]", "[1, 2, 4, 8]")
    recs = records(vllm_launches(tmp_path, [SPEC_A, b]))
    assert recs[1].changed == {"speculative_config.num_speculative_tokens": [3, 5],
                               "compilation_config.cudagraph_capture_sizes": [[1, 2, 4],
                                                                              [1, 2, 4, 8]]}
    assert changed_text(recs[1].changed) == (
        "speculative_config.num_speculative_tokens 3 -> 5, "
        "compilation_config.cudagraph_capture_sizes [1, 2, 4] -> [1, 2, 4, 8]")
    # a config added or dropped whole is one change, shown whole
    assert changed_args({"sc": None}, {"sc": {"method": "ngram"}}) == {"sc": (None, {"method": "ngram"})}


def test_a_dotted_flag_sets_the_key_of_its_config() -> None:
    """`--compilation-config.mode 3` (vLLM's FlexibleArgumentParser builds the config's JSON
    from dotted flags) is the dump's `compilation_config: {'mode': ...}`: before, the command
    line gave a flag `compilation_config.mode` that no dump has."""
    pack = load_pack("vllm")
    specs = pack.rule("args").args_specs
    cmd = parse_args_line("args: vllm serve Qwen/Qwen3-32B --compilation-config.mode 3 "
                          "--compilation-config.cudagraph_capture_sizes '[1, 2]' "
                          "--compilation-config.pass_config.fuse_allreduce_rms=true", specs)
    dump = parse_args_line("(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default "
                           "args: {'model': 'Qwen/Qwen3-32B', 'compilation_config': {'mode': "
                           "<CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_capture_sizes': [1, 2], "
                           "'pass_config': {'fuse_allreduce_rms': True}}}", specs)
    assert cmd is not None and dump is not None
    assert cmd.values["compilation_config"] == {"mode": 3, "cudagraph_capture_sizes": [1, 2],
                                                "pass_config": {"fuse_allreduce_rms": True}}
    assert changed_args(cmd.values, dump.values) == {}
