"""What `history` / `compare` say changed between two launches, and the advice on one launch's
flags, against what vLLM 0.34.0 and SGLang 0.5.23 print (their argparse definitions and
their args dumps: vLLM entrypoints/common/startup.py `non-default args`, SGLang
entrypoints/engine.py `server_args={resolved_dict()}`), read from the logs built from
tests/fixtures/built/ (helper adv38: cases/ of its clone)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import FIXTURES
from logwatch.app.history import compare_text, read_ledger
from logwatch.ledger import StartupRecord, launch_changes, vs_previous_text
from logwatch.rules.advice import advice_lines
from logwatch.rules.args import changed_args, changed_text, parse_args_line
from logwatch.rules.pack import load_pack

BUILT = FIXTURES / "built"


def vllm_launches(tmp_path: Path, dumps: list[str], versions: list[str] | None = None) -> Path:
    """vllm-034-default.log once per dump (its `non-default args` replaced), an hour apart."""
    tpl = (BUILT / "vllm-034-default.log").read_text().splitlines()
    out = []
    for i, dump in enumerate(dumps):
        for line in tpl:
            if "non-default args: " in line:
                line = line.split("non-default args: ")[0] + "non-default args: " + dump
            if versions:
                line = line.replace("0.34.0", versions[i])
            out.append(line.replace("12-01 10:", f"12-01 {10 + i:02d}:"))
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(out) + "\n")
    return path


def sglang_launches(tmp_path: Path, dumps: list[dict[str, Any]]) -> Path:
    """sglang-0523-overlap.log once per dump (its `server_args={...}` replaced)."""
    tpl = (BUILT / "sglang-0523-overlap.log").read_text().splitlines()
    out = []
    for i, dump in enumerate(dumps):
        for line in tpl:
            if "server_args=" in line:
                line = line.split("server_args=")[0] + "server_args=" + repr(dump)
            out.append(line.replace("2026-12-01 10:", f"2026-12-01 {10 + i:02d}:"))
    path = tmp_path / "sglang.log"
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


# ------------------------------------------------------------- dumps of every field, versions

# fields only SGLang 0.5.21's / 0.5.23's resolved dump names (their wheels' arg_groups/fields)
ONLY_0521 = ("cuda_graph_tc_compiler", "speculative_skip_dp_mlp_sync")
ONLY_0523 = ("attn_dp_size", "enable_amd_monokernel", "enable_kv_cache_sharding",
             "enable_paged_experts", "enable_watermark", "watermark_key", "qsa_indexer_dtype")


def test_an_engine_upgrade_is_no_flag_change(tmp_path: Path) -> None:
    """SGLang's `server_args=` names every field; 0.5.21 -> 0.5.23 added 28 and dropped 2.
    The same command after the upgrade, with one flag raised: before, `changed` held every
    field only one version has (`attn_dp_size None -> 1`, `cuda_graph_tc_compiler 'eager' ->
    None`, ...) beside the one the operator changed."""
    common = {"model_path": "/models/Qwen3-32B", "tp_size": 1, "port": 30000}
    old = {**common, "max_running_requests": 1024, **{k: "eager" for k in ONLY_0521}}
    new = {**common, "max_running_requests": 2048, **{k: 1 for k in ONLY_0523}}
    recs = records(sglang_launches(tmp_path, [old, new]))
    assert recs[1].changed == {"max_running_requests": [1024, 2048]}
    text = compare_text(recs[0], recs[1])
    assert "flags changed: max_running_requests 1024 -> 2048\n" in text
    assert "fields only in #2: 7 (attn_dp_size, enable_amd_monokernel, enable_kv_cache_sharding, " \
        "enable_paged_experts, ...); only in #1: 2 (cuda_graph_tc_compiler, " \
        "speculative_skip_dp_mlp_sync): another engine version" in text
    # vLLM's `non-default args` names only the flags set: one dropped is a change
    a = StartupRecord(startup="a", index=1, started_at=None, engine="vllm", model="m",
                      args={"model": "m", "max_num_seqs": 512}, args_partial=False,
                      outcome="ready")
    b = StartupRecord(**{**a.__dict__, "startup": "b", "index": 2, "args": {"model": "m"}})
    assert launch_changes(a, b) == {"max_num_seqs": (512, None)}


def test_compare_of_two_launches_apart_skips_what_a_cut_dump_lacks() -> None:
    """`compare FILE 1 3` computed its flags without the cut-line rule that `changed` follows
    (before: every flag past the cut of #1's dump read as dropped)."""
    a = StartupRecord(startup="a", index=1, started_at=None, engine="vllm", model="m",
                      args={"model": "m"}, args_partial=True, outcome="ready")
    c = StartupRecord(**{**a.__dict__, "startup": "c", "index": 3, "args_partial": False,
                         "args": {"model": "m", "max_num_seqs": 512}})
    assert "flags changed: none" in compare_text(a, c)


def test_a_launch_on_another_engine_version_says_so(tmp_path: Path) -> None:
    """vLLM 0.33.0, then 0.34.0 with the same flags (both print `non-default args` with the
    same code): before, `history` / `compare` / `watch` said nothing changed, and the version
    printed at every launch was read and dropped."""
    dump = "{'model_tag': 'Qwen/Qwen3-32B', 'model': 'Qwen/Qwen3-32B', 'tensor_parallel_size': 2}"
    recs = records(vllm_launches(tmp_path, [dump, dump], ["0.33.0", "0.34.0"]))
    assert [r.version for r in recs] == ["0.33.0", "0.34.0"]
    assert recs[1].changed == {"engine version": ["0.33.0", "0.34.0"]}
    text = compare_text(recs[0], recs[1])
    assert re.search(r"engine version +0\.33\.0 +0\.34\.0", text)
    assert "flags changed: none" in text
    assert vs_previous_text(recs[0], recs[1]).endswith(
        "engine version 0.33.0 -> 0.34.0; same flags")
    same = records(vllm_launches(tmp_path, [dump, dump]))
    assert same[1].changed == {} and same[1].version == "0.34.0"


# ------------------------------------------------------------------- the engines' own aliases

def test_short_flags_are_the_engines_own() -> None:
    """vLLM 0.34's argparse (engine/arg_utils.py add_cli_args, entrypoints/common/cli_args.py)
    declares -dcp -pcp -dpn -dpr -dpl -dpa -dpp -dpb -dph -dpe -dpm -ep -n -r -sc -dc -cc -ac
    -asc -O beside -tp -pp -dp -q; SGLang 0.5.23's (arg_groups/fields/*.py) the long
    `--*-parallel-size` forms, `--nccl-init-addr`, `--speculative-draft-model`, ...: before, a
    launch line that spelled them short gave flags (`dpl`, `ep`, ...) no dump has, and two
    launches of one command spelled two ways differed in 10 flags."""
    specs = load_pack("vllm").rule("args").args_specs
    short = parse_args_line(
        "args: vllm serve deepseek-ai/DeepSeek-V3 --headless -tp 2 -dp 4 -dpl 1 -dpr 2 "
        "-dpa 10.0.0.1 -dpp 13345 -dpb ray -ep -dcp 2 -pcp 2 -asc 2 -O 3 -n 2 -r 1 "
        "-cc.mode 3 -sc '{\"method\": \"ngram\"}'", specs)
    long = parse_args_line(
        "args: vllm serve deepseek-ai/DeepSeek-V3 --headless --tensor-parallel-size 2 "
        "--data-parallel-size 4 --data-parallel-size-local 1 --data-parallel-start-rank 2 "
        "--data-parallel-address 10.0.0.1 --data-parallel-rpc-port 13345 "
        "--data-parallel-backend ray --enable-expert-parallel "
        "--decode-context-parallel-size 2 --prefill-context-parallel-size 2 "
        "--api-server-count 2 --optimization-level 3 --nnodes 2 --node-rank 1 "
        "--compilation-config '{\"mode\": 3}' --speculative-config '{\"method\": \"ngram\"}'",
        specs)
    assert short is not None and long is not None
    assert short.values == long.values
    assert short.values["data_parallel_size_local"] == 1
    assert short.values["enable_expert_parallel"] is True
    sgl = load_pack("sglang").rule("launch_command").args_specs
    a = parse_args_line("+ python -m sglang.launch_server --model-path m --tp 8 "
                        "--decode-context-parallel-size 2 --attention-data-parallel-size 4 "
                        "--nccl-init-addr 10.0.0.1:5000 --speculative-draft-model d "
                        "--enable-hicache --mem-frac 0.8 --fp8-gemm-backend cutlass", sgl)
    b = parse_args_line("+ python -m sglang.launch_server --model-path m --tp-size 8 "
                        "--dcp-size 2 --attn-dp-size 4 --dist-init-addr 10.0.0.1:5000 "
                        "--speculative-draft-model-path d --enable-hierarchical-cache "
                        "--mem-fraction-static 0.8 --fp8-gemm-runner-backend cutlass", sgl)
    assert a is not None and b is not None and a.values == b.values


# ------------------------------------------------------------------------------- the advice

BS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def sglang_0523(decode_backend: str = "full", **flags: Any) -> dict[str, Any]:
    """A 0.5.23 dump's graph fields: the input flags and the resolved `cuda_graph_config`
    (arg_groups/cuda_graph_hook.py parse_cuda_graph_config; memory_hook.py sizes max_bs)."""
    phase = {"backend": decode_backend, "max_bs": 256, "bs": BS, "tc_compiler": "eager"}
    return {"model_path": "m", "max_running_requests": 2048,
            "cuda_graph_config": {"decode": phase, "prefill": {**phase, "backend": "breakable"}},
            "cuda_graph_backend_decode": None, "cuda_graph_max_bs_decode": None,
            "disable_decode_cuda_graph": False, "disable_cuda_graph": False, **flags}


def test_sglang_0523_graph_advice_reads_its_own_flags() -> None:
    """SGLang 0.5.21+ has no `--cuda-graph-max-bs` (its decode graphs' largest batch is
    `--cuda-graph-max-bs-decode`, resolved into `cuda_graph_config.decode.max_bs`) and turns
    decode graphs off with `--disable-decode-cuda-graph` / `--cuda-graph-backend-decode
    disabled` (`--disable-cuda-graph` is deprecated): before, none of these three launches
    got any advice."""
    advice = load_pack("sglang").advice

    def says(args: dict[str, Any]) -> list[str]:
        return advice_lines(advice, args, "ready", None, {})
    assert says(sglang_0523()) == [
        "batches above 256 run without CUDA graphs (cuda_graph_config.decode.max_bs 256 < "
        "max_running_requests 2048)"]
    assert says(sglang_0523(cuda_graph_max_bs_decode=160)) == [
        "batches above 160 run without CUDA graphs (cuda_graph_max_bs_decode 160 < "
        "max_running_requests 2048)"]
    off = "CUDA graphs are off ({}): every decode batch runs eagerly, usually far slower"
    assert says(sglang_0523("disabled", disable_decode_cuda_graph=True)) == \
        [off.format("disable_decode_cuda_graph")]
    assert says(sglang_0523("disabled", cuda_graph_backend_decode="disabled")) == \
        [off.format("cuda_graph_backend_decode=disabled")]
    # prefill graphs off, decode graphs on: no "graphs are off"
    assert says(sglang_0523(disable_prefill_cuda_graph=True, max_running_requests=128)) == []
    # the shares of eager decode batches: not with decode graphs off
    assert advice_lines(advice, sglang_0523("disabled"), "ready", None,
                        {"no_cuda_graph_share": 0.9}) == \
        [off.format("cuda_graph_config.decode.backend=disabled")]


def test_vllm_graphs_off_by_optimization_level_or_mode() -> None:
    """vLLM 0.34: `-O0` ("no compilation, no cudagraphs": config/vllm.py OptimizationLevel)
    and `-cc '{"cudagraph_mode": "NONE"}'` turn CUDA graphs off as `--enforce-eager` does;
    before, only `enforce_eager` got the advice."""
    advice = load_pack("vllm").advice
    off = "CUDA graphs are off ({}): every decode batch runs eagerly, usually far slower"
    specs = load_pack("vllm").rule("args").args_specs
    for dump, flag in (("{'model': 'm', 'optimization_level': 0}", "optimization_level=0"),
                       ("{'model': 'm', 'compilation_config': {'cudagraph_mode': "
                        "<CUDAGraphMode.NONE: 0>}}", "compilation_config.cudagraph_mode=0"),
                       ("{'model': 'm', 'enforce_eager': True}", "enforce_eager")):
        parsed = parse_args_line("non-default args: " + dump, specs)
        assert parsed is not None
        assert advice_lines(advice, parsed.values, "ready", None, {}) == [off.format(flag)]
    for dump in ("{'model': 'm', 'optimization_level': 3}",
                 "{'model': 'm', 'compilation_config': {'cudagraph_mode': "
                 "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}}"):
        parsed = parse_args_line("non-default args: " + dump, specs)
        assert parsed is not None and advice_lines(advice, parsed.values, "ready", None, {}) == []


def test_a_one_letter_flag_takes_the_value_written_onto_it() -> None:
    """vLLM's `-O0` / `-O3` (its docs' spelling; argparse_utils.py:395 reads `-O3` as
    `--optimization-level 3`): before, a flag `O0` no dump has, so no graphs-off advice for
    `-O0`, and `-O3` against `--optimization-level 3` two false changes."""
    pack = load_pack("vllm")
    specs = pack.rule("args").args_specs
    off = parse_args_line("args: vllm serve m -O0", specs)
    assert off is not None and off.values == {"model": "m", "optimization_level": 0}
    assert advice_lines(pack.advice, off.values, "ready", None, {}) == [
        "CUDA graphs are off (optimization_level=0): every decode batch runs eagerly, "
        "usually far slower"]
    short = parse_args_line("args: vllm serve m -O3 -tp 2 -n2", specs)
    long = parse_args_line("args: vllm serve m --optimization-level 3 "
                           "--tensor-parallel-size 2 --nnodes 2", specs)
    assert short is not None and long is not None
    assert changed_args(short.values, long.values) == {}


def test_sglang_decode_graphs_off_by_backend_flag_get_no_batch_advice() -> None:
    """A launch whose args hold only its command line (a wrapper's echo; the dump cut before
    `cuda_graph_config`) with `--cuda-graph-backend-decode disabled`: before, both `CUDA
    graphs are off` and `batches above 64 run without CUDA graphs`, which contradict each
    other (graphs_off read the flag, graphs_below_batch and eager_batches did not)."""
    pack = load_pack("sglang")
    line = parse_args_line("+ python3 -m sglang.launch_server --model-path m "
                           "--cuda-graph-backend-decode disabled --cuda-graph-max-bs-decode 64 "
                           "--max-running-requests 256", pack.rule("launch_command").args_specs)
    assert line is not None
    assert advice_lines(pack.advice, line.values, "ready", None, {"no_cuda_graph_share": 0.9}) \
        == ["CUDA graphs are off (cuda_graph_backend_decode=disabled): every decode batch runs "
            "eagerly, usually far slower"]


def test_compare_says_a_phase_read_without_stamps_is_untimed_not_new() -> None:
    """`compare` of a launch read at a first attach from bars without stamps (its
    loading_shards `untimed`, 851dbf5) and the next, timed one: the phase is there in both,
    its time unknown in the first.  Before, "-" beside "5m00s" and "new", as if the first
    had loaded no shards (and a phase untimed in the second said "gone")."""
    a = StartupRecord(startup="a", index=1, started_at=None, engine="sglang", model="m",
                      args={}, args_partial=False, outcome="incomplete",
                      untimed=["loading_shards"])
    b = StartupRecord(**{**a.__dict__, "startup": "b", "index": 2, "outcome": "ready",
                         "untimed": [], "durations": {"launching": 20.0,
                                                      "loading_shards": 300.0},
                         "startup_seconds": 320.0})
    rows = {line.split()[0]: line.split()[1:] for line in compare_text(a, b).splitlines()[2:]
            if line.strip()}
    assert rows["loading_shards"] == ["untimed", "5m00s"], rows
    assert rows["launching"] == ["-", "20s", "new"], rows
    back = {line.split()[0]: line.split()[1:] for line in compare_text(b, a).splitlines()[2:]
            if line.strip()}
    assert back["loading_shards"] == ["5m00s", "untimed"], back


def test_history_of_a_file_without_stamps_agrees_with_the_daemons_ledger(tmp_path: Path) -> None:
    """`logwatch history FILE` reads a log at one moment, as a first attach does: a bare
    command line, shard bars and the ready line, none stamped, last written an hour before,
    began by that last write at the latest and its phases are `untimed`, not 0.0 s (the
    daemon's ledger, 851dbf5).  Before: `started_at` the read time, durations
    {"launching": 0.0, "loading_shards": 0.0}, `startup_seconds` 0.0.  A stamped file keeps
    its figures."""
    import os
    import time

    from logwatch import clock
    log = tmp_path / "server.log"
    log.write_bytes(b"python3 -m sglang.launch_server --model-path m\n" + b"".join(
        b"Loading safetensors checkpoint shards: %d%% Completed | %d/4 [00:0%d<00:00, "
        b"1.00it/s]\n" % (i * 25, i, i) for i in range(1, 5))
        + b"The server is fired up and ready to roll!\n")
    written = time.time() - 3600
    os.utime(log, (written, written))
    got: list[StartupRecord] = []
    read_ledger(str(log), "sglang", got.append)
    [rec] = got
    assert rec.outcome == "ready" and rec.started_at is not None
    assert rec.started_at <= clock.from_wall(written) + 1, rec.started_at - written
    assert rec.untimed == ["launching", "loading_shards"], rec
    assert rec.durations == {} and rec.startup_seconds is None, rec
    stamped: list[StartupRecord] = []
    read_ledger(str(BUILT / "sglang-0523-overlap.log"), "sglang", stamped.append)
    assert stamped and all(not r.untimed and r.durations for r in stamped), stamped
