"""scripts/engine_inventory.py: statements read with `ast`, lines drafted in the engines'
envelopes, and the next release's draft (carried, moved, reworded, gone, new) -- on small
wheels made here, so no registry is asked."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

spec = importlib.util.spec_from_file_location("engine_inventory", ROOT / "scripts" / "engine_inventory.py")
assert spec and spec.loader
ei = importlib.util.module_from_spec(spec)
sys.modules["engine_inventory"] = ei
spec.loader.exec_module(ei)

MODULE = '''
import logging
from tqdm import tqdm
logger = logging.getLogger(__name__)

def load(path, n):
    logger.info("Loading weights took %.2f seconds", 1.0)
    logger.warning(f"Local snapshot incomplete for {path}: {n}. Will download missing files.")
    log_info_on_rank0(logger, f"Using model weights format {n}")
    for x in tqdm(range(n), desc="Loading safetensors checkpoint shards"):
        pass
    bar = tqdm(range(n))
    for bs in bar:
        bar.set_description(f"Capturing batches ({bs=} {n:.2f} GB)")
    print("server ready")
    msg = "Not enough memory. Please try to increase --mem-fraction-static."
    if n:
        msg += f" Current value: mem_fraction_static={n}"
    raise RuntimeError(msg)

def died(rank, proc):
    return RuntimeError(
        f"Rank {rank} scheduler died during initialization "
        f"(exit code: {proc.exitcode})."
    )

def ignored(x):
    logger.info(x)            # a message made elsewhere: not followed
'''


def test_statements_are_read_with_their_format_strings() -> None:
    got = {(s.kind, s.format) for s in ei.statements_of("sglang/srt/x.py", MODULE)}
    assert ("logger.info", "Loading weights took %.2f seconds") in got
    assert ("logger.warning", "Local snapshot incomplete for {path}: {n}. Will download missing files.") in got
    assert ("log_info_on_rank0", "Using model weights format {n}") in got
    assert ("tqdm", "Loading safetensors checkpoint shards") in got
    assert ("tqdm", "Capturing batches (bs={bs!r} {n:.2f} GB)") in got
    assert ("print", "server ready") in got
    assert ("raise RuntimeError", "Not enough memory. Please try to increase --mem-fraction-static."
            " Current value: mem_fraction_static={n}") in got
    assert ("raise RuntimeError", "Rank {rank} scheduler died during initialization "
            "(exit code: {proc.exitcode}).") in got
    assert len(got) == 8        # `logger.info(x)` of a parameter has no template


def test_the_message_line_is_the_strings_line() -> None:
    lines = {s.format[:12]: s.line for s in ei.statements_of("m.py", MODULE)}
    src = MODULE.splitlines()
    assert "Not enough memory" in src[lines["Not enough m"] - 1]
    assert "Rank {rank}" in src[lines["Rank {rank} "] - 1]


def test_lines_are_drafted_in_the_engines_envelopes() -> None:
    st = ei.Statement("sglang/srt/model_executor/model_runner.py", 1274, "logger.info",
                      "Load weight begin. avail mem={get_available_gpu_memory(self.device):.2f} GB")
    assert ei.render("sglang", st) == "[2026-12-01 10:00:00 TP0] Load weight begin. avail mem=10.50 GB"
    st = ei.Statement("sglang/srt/entrypoints/http_server.py", 2600, "logger.info",
                      "The server is fired up and ready to roll!")
    assert ei.render("sglang", st) == "[2026-12-01 10:00:00] The server is fired up and ready to roll!"
    st = ei.Statement("vllm/v1/engine/core.py", 1757, "logger.exception", "EngineCore failed to start.")
    assert ei.render("vllm", st) == ("(EngineCore pid=123) ERROR 12-01 10:00:00 [core.py:1757] "
                                     "EngineCore failed to start.")
    st = ei.Statement("vllm/model_executor/model_loader/default_loader.py", 262,
                      "raise RuntimeError", "Cannot find any model weights with `{model_name_or_path}`")
    assert ei.render("vllm", st) == "RuntimeError: Cannot find any model weights with `/models/Qwen3-8B`"


def wheel(cache: Path, version: str, source: str) -> None:
    with zipfile.ZipFile(cache / f"sglang-{version}-py3-none-any.whl", "w") as z:
        z.writestr("sglang/srt/entrypoints/engine.py", source)
        z.writestr("sglang/other/unwatched.py", 'logger.info("not on a watched path")\n')


OLD = '''
def start():
    logger.info("Init parallel begin.")
    logger.info(f"Weight cache daemon for pp_rank={p} did not become ready within {t}s")
    logger.info("Launching the old way")
'''
NEW = '''

def start():
    logger.info("Init parallel begin.")
    logger.info(f"Weight cache daemon for pp_rank={p} tp_rank={q} did not become ready within {t}s")
    logger.error(f"Memory baseline taken. mem usage={m:.2f} GB")
'''


def test_draft_of_the_next_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGWATCH_WHEELS", str(tmp_path))
    wheel(tmp_path, "9.9.0", OLD)
    wheel(tmp_path, "9.9.1", NEW)
    prev = {"engine": "sglang", "version": "9.9.0", "pack": "sglang", "statements": [
        {"id": "init", "tier": "P1", "source": "sglang/srt/entrypoints/engine.py:3",
         "kind": "logger.info", "format": "Init parallel begin.", "line": "x", "expect": ["phase:launching"]},
        {"id": "wc_timeout", "tier": "P1", "source": "sglang/srt/entrypoints/engine.py:4",
         "kind": "logger.info", "format": "Weight cache daemon for pp_rank={p} did not become ready within {t}s",
         "line": "x", "expect": ["crash:startup_timeout"]},
        {"id": "old_way", "tier": "P3", "source": "sglang/srt/entrypoints/engine.py:5",
         "kind": "logger.info", "format": "Launching the old way", "line": "x", "expect": ["info"]},
        {"id": "oom", "tier": "P1", "source": "(torch)", "format": "torch.OutOfMemoryError: ...",
         "line": "torch.OutOfMemoryError: CUDA out of memory.", "expect": ["crash:cuda_oom"]},
    ]}
    (tmp_path / "sglang-9.9.0.yaml").write_text("# header kept\n" + yaml.safe_dump(prev))
    doc = ei.draft("sglang==9.9.1", tmp_path / "sglang-9.9.0.yaml")
    by = {e["id"]: e for e in doc["statements"]}
    assert doc["version"] == "9.9.1"
    assert by["init"]["source"] == "sglang/srt/entrypoints/engine.py:4"      # moved a line
    assert "gone" not in by["init"] and "changed" not in by["init"]
    assert by["wc_timeout"]["changed"].startswith("Weight cache daemon for pp_rank={p} did")
    assert "tp_rank={q}" in by["wc_timeout"]["format"]                         # reworded
    assert by["old_way"]["gone"] is True
    assert by["oom"] == prev["statements"][3]                                   # third party: kept
    new = [e for e in doc["statements"] if e.get("review")]
    assert [e["format"] for e in new] == ["Memory baseline taken. mem usage={m:.2f} GB"]
    # a carried entry drafted as `new_engine_6` by its own release keeps its id; the new
    # statement at engine.py:6 gets another (vLLM 0.6.6's draft gave two entries one id)
    prev["statements"][2]["id"] = "new_engine_6"
    (tmp_path / "sglang-9.9.0.yaml").write_text("# header kept\n" + yaml.safe_dump(prev))
    ids = [e["id"] for e in ei.draft("sglang==9.9.1", tmp_path / "sglang-9.9.0.yaml")["statements"]]
    assert len(ids) == len(set(ids)) and "new_engine_6" in ids and "new_engine_6_" in ids
    assert new[0]["line"] == "[2026-12-01 10:00:00] Memory baseline taken. mem usage=1.50 GB"
    assert ei.header(tmp_path / "sglang-9.9.0.yaml") == "# header kept\n"


def test_score_counts_by_tier(tmp_path: Path) -> None:
    rows = ei.score([ROOT / "tests" / "inventory" / "vllm-0.34.0.yaml"])
    g = rows[0]["groups"]
    assert g["all"][0] == g["P1"][0] + g["P2"][0] + g["P3"][0]
    assert g["P1"][0] == g["P1 phase changes"][0] + g["P1 crash markers / causes"][0]
    assert g["all"][1] + g["all"][2] + g["all"][3] == g["all"][0]


def test_the_older_vllm_layout_is_watched() -> None:
    """vLLM 0.22 and 0.28 print their startup from the V1 runner and the OpenAI entrypoints,
    not from v1/worker/gpu/ and entrypoints/launchers|common: their drafts saw 104 and 106
    fewer statements (`Starting vLLM API server`, the runner's `Model loading took`...)."""
    for path in ("vllm/v1/worker/gpu_model_runner.py", "vllm/entrypoints/openai/api_server.py",
                 "vllm/entrypoints/utils.py", "vllm/entrypoints/serve/utils/api_utils.py",
                 "vllm/entrypoints/launcher.py", "vllm/entrypoints/openai/dp_supervisor.py"):
        assert ei.watched("vllm", path), path
    assert not ei.watched("vllm", "vllm/entrypoints/openai/chat_completion/serving.py")


def test_a_format_cut_short_is_carried_by_its_beginning() -> None:
    """An inventory's format shortened by hand (`... Waited {T}s (configured by X). ...`) is
    the statement whose format begins so, not `gone` (0.28: 2 such P1 timeouts were)."""
    full = ("Timed out waiting for new engine core processes to start. Waited {T}s "
            "(configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the "
            "environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>")
    sts = [ei.Statement("vllm/v1/engine/core_client.py", 1671, "raise TimeoutError", full),
           ei.Statement("vllm/v1/engine/core_client.py", 1690, "raise TimeoutError", "Timed out.")]
    entry = {"id": "new_core_timeout", "source": "vllm/v1/engine/core_client.py:2063",
             "kind": "raise TimeoutError", "expect": ["crash:startup_timeout"],
             "format": "Timed out waiting for new engine core processes to start. Waited {T}s "
                       "(configured by VLLM_ENGINE_READY_TIMEOUT_S). ..."}
    got = ei._carry(entry, sts, {s.format: [s] for s in sts})
    assert "gone" not in got and "changed" not in got and got["format"] == entry["format"]
    assert got["source"] == "vllm/v1/engine/core_client.py:1671"
    entry["format"] = "Timed out waiting for old engine core processes. ..."
    assert ei._carry(entry, sts, {s.format: [s] for s in sts})["gone"] is True


def test_the_sglang_0_4_layout_is_watched() -> None:
    """SGLang 0.4.x keeps DeepGEMM's JIT under layers/quantization/ (0.4.6 deep_gemm.py, 0.4.10
    deep_gemm_wrapper/compile_utils.py), the HiCache host pool in mem_cache/memory_pool_host.py
    (0.4.10) and LoRA's backend line in lora/lora_manager.py: both 0.4 inventories placed those
    by hand; now their drafts read them."""
    for path in ("sglang/srt/layers/quantization/deep_gemm.py",
                 "sglang/srt/layers/quantization/deep_gemm_wrapper/compile_utils.py",
                 "sglang/srt/mem_cache/memory_pool_host.py", "sglang/srt/lora/lora_manager.py"):
        assert ei.watched("sglang", path), path
    assert not ei.watched("sglang", "sglang/srt/layers/quantization/fp8.py")


V0_METRICS = '''
import logging
logger = logging.getLogger(__name__)

class LoggingStatLogger:
    def log(self, stats, prompt, gen):
        log_fn = logger.info
        if not any((prompt, gen)):
            log_fn = logger.debug       # an idle server: quiet
        log_fn("Avg prompt throughput: %.1f tokens/s, "
               "Avg generation throughput: %.1f tokens/s", prompt, gen)
'''


def test_the_v0_engines_own_statements_are_read() -> None:
    """vLLM 0.7 runs the V0 engine by default: its stats line is logged through a name the
    logger's method was put in (engine/metrics.py `log_fn = logger.info`), which a reader of
    `logger.<level>(` calls missed (0.8.5's inventory placed it by hand); the engine arguments'
    refusals and defaults (engine/arg_utils.py) are on its launch path; and its lines are drafted
    in 0.7's envelope (`file.py:N]`, no `[`; the driver untagged)."""
    got = [(s.kind, s.format) for s in ei.statements_of("vllm/engine/metrics.py", V0_METRICS)]
    assert got == [("logger.info", "Avg prompt throughput: %.1f tokens/s, "
                    "Avg generation throughput: %.1f tokens/s")]
    for path in ("vllm/engine/metrics.py", "vllm/engine/arg_utils.py", "vllm/worker/worker.py",
                 "vllm/engine/llm_engine.py", "vllm/executor/mp_distributed_executor.py"):
        assert ei.watched("vllm", path), path
    st = ei.Statement("vllm/worker/model_runner.py", 1096, "logger.info", "Starting to load model %s...")
    assert ei.render("vllm", st, "0.7.3") == ("INFO 12-01 10:00:00 model_runner.py:1096] "
                                              "Starting to load model x...")
    assert ei.render("vllm", st, "0.8.5.post1").startswith("(Worker_TP0 pid=200) INFO 12-01 "
                                                           "10:00:00 [model_runner.py:1096]")
    st = ei.Statement("vllm/v1/worker/gpu_model_runner.py", 1060, "logger.info", "Loading model "
                      "weights took %.4f GB")
    assert ei.render("vllm", st, "0.7.3") == ("(VllmWorker rank=0 pid=200) INFO 12-01 10:00:00 "
                                              "gpu_model_runner.py:1060] Loading model weights "
                                              "took 1.5000 GB")
