"""A launch that dies before its server printed its launch line (SGLang 0.5.23's
`server_args=`, vLLM 0.34's platform / version / args lines): argparse refusing the command
line, a --config file, an import, the model's config or its hub repository.  It reads as a
startup that crashed at launch (`during launching`, counted, in the ledger), whatever came
before it; before, a log with nothing before the error read `crashed: bad_argument during
waiting` with 0 startups, and the same failure after vLLM's platform line read `during
launching`, 1 startup.  The strings are the engines' own (paths of a pip install)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from logwatch.app.replay import replay_file
from logwatch.app.history import run_history
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view
from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    append, daemons, free_port, hook, receivers, target, write_config,
)

SP = "/usr/local/lib/python3.12/dist-packages"
RUNPY = ["Traceback (most recent call last):",
         '  File "<frozen runpy>", line 198, in _run_module_as_main',
         '  File "<frozen runpy>", line 88, in _run_code',
         f'  File "{SP}/sglang/launch_server.py", line 74, in <module>',
         "    server_args = prepare_server_args(sys.argv[1:])"]
PLATFORM = "INFO 12-07 03:40:01 [__init__.py:287] Automatically detected platform cuda."

# (name, lines, reason): each engine's failure before its launch line
BEFORE_LAUNCH = [
    # SGLang 0.5.23 server_args.py:679 `ArgumentParser(prog="sglang serve")`; older releases
    # said launch_server.py (the report's log)
    ("sglang-argparse-old", [
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]",
        "                        [--host HOST] [--port PORT]",
        "launch_server.py: error: unrecognized arguments: --tp-szie 8"], "bad_argument"),
    # vLLM 0.34 cli/serve.py:169 `usage="vllm serve [model_tag] [options]"`, its platform
    # line not printed (a log at WARNING)
    ("vllm-argparse", [
        "usage: vllm serve [model_tag] [options]",
        "vllm serve: error: argument --max-model-len: invalid human_readable_int value: 'abc'"],
     "bad_argument"),
    # SGLang 0.5.23 utils/server_args_config_parser.py:162, from prepare_server_args
    ("sglang-config", RUNPY + [
        f'  File "{SP}/sglang/srt/utils/server_args_config_parser.py", line 162, in _parse_config_file',
        '    raise ValueError(f"Config file not found: {file_path}")',
        "ValueError: Config file not found: /cfg/serve.yaml"], "bad_argument"),
    # vLLM 0.34 utils/argparse_utils.py:647, its error line, then the open's exception
    ("vllm-config", [
        "ERROR 12-07 03:40:02 [argparse_utils.py:647] Unable to read the config file at "
        "/cfg/serve.yaml. Check path correctness",
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        "FileNotFoundError: [Errno 2] No such file or directory: '/cfg/serve.yaml'"],
     "bad_argument"),
    # `import torch` in launch_server.py's imports, its CUDA libraries missing
    ("sglang-import", RUNPY[:3] + [
        f'  File "{SP}/sglang/launch_server.py", line 8, in <module>',
        f'  File "{SP}/torch/__init__.py", line 409, in <module>',
        "    from torch._C import *  # noqa: F403",
        "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory"],
     "import_error"),
    # the model's config fetched by ServerArgs.__post_init__: a gated repository, no token
    ("sglang-gated", RUNPY + [
        f'  File "{SP}/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status',
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-6554abcd) "
        "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"
        "/resolve/main/config.json."], "hub_download_failed"),
    # a --model-path that does not exist (transformers' cached_files)
    ("sglang-no-model", RUNPY + [
        f'  File "{SP}/transformers/utils/hub.py", line 511, in cached_files',
        "OSError: /models/Llama-3.1-8B is not a local folder and is not a valid model identifier "
        "listed on 'https://huggingface.co/models'"], "hub_download_failed"),
]


def replay(tmp_path: Path, name: str, lines: list[str]) -> dict:
    log = tmp_path / f"{name}.log"
    log.write_text("\n".join(lines) + "\n")
    return summary(pipeline_view(log.name, replay_file(str(log))))


@pytest.mark.parametrize("name,lines,reason", BEFORE_LAUNCH, ids=[c[0] for c in BEFORE_LAUNCH])
def test_a_launch_that_dies_before_its_launch_line_is_a_startup_crashed_at_launch(
        tmp_path: Path, name: str, lines: list[str], reason: str) -> None:
    doc = replay(tmp_path, name, lines)
    assert doc["crash"]["reason"] == reason, doc["crash"]
    assert doc["crash"]["during"] == "launching", doc["crash"]
    assert doc["startups"] == 1 and doc["phases_seen"] == ["launching", "crashed"], doc


@pytest.mark.parametrize("lead", [[], [PLATFORM]], ids=["alone", "after-vllm-platform"])
def test_the_same_failure_reads_the_same_with_or_without_a_line_before_it(
        tmp_path: Path, lead: list[str]) -> None:
    """The report: SGLang's read `during waiting, 0 startup(s)`, vLLM's (its platform line
    first) `during launching, 1 startup(s)`."""
    doc = replay(tmp_path, "argparse", lead + BEFORE_LAUNCH[1][1])
    assert (doc["crash"]["during"], doc["startups"]) == ("launching", 1), doc


def test_the_launch_that_crashed_is_in_the_ledger_as_crashed_at_launch(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(BEFORE_LAUNCH[0][1]) + "\n")
    out: list[str] = []
    assert run_history([str(log)], "auto", True, out.append) == 0
    rows = [json.loads(x) for x in out]
    assert [(r["outcome"], r["reason"], r["during"]) for r in rows] == [
        ("crashed", "bad_argument", "launching")], rows


def test_a_log_that_begins_inside_another_crash_says_nothing_of_its_launch(
        tmp_path: Path) -> None:
    """An excerpt (a log read from its middle) that begins inside a traceback whose cause no
    launch alone meets (TensorRT-LLM's executor's first forward: trtllm-014), or a rank's
    (`TP0`: a scheduler ran): no startup is made up for it."""
    executor = ["[04/17/2026-04:17:42] [TRT-LLM] [E] Failed to initialize executor on rank 0: "
                "Attention sinks are only supported for TRTLLM backend.",
                "AssertionError: Attention sinks are only supported for TRTLLM backend."]
    doc = replay(tmp_path, "excerpt", executor)
    assert doc["crash"]["reason"] == "bad_argument", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("waiting", 0), doc
    rank = ["[2026-12-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "[2026-12-01 10:00:01 TP0] ImportError: cannot import name 'FusedMoE' from 'sglang.srt.layers'"]
    doc = replay(tmp_path, "rank", rank)
    assert doc["crash"]["reason"] == "import_error", doc["crash"]
    assert (doc["crash"]["during"], doc["startups"]) == ("waiting", 0), doc


@pytest.mark.integration
def test_the_daemon_pages_a_launch_that_died_before_its_launch_line_as_crashed_at_launch(
        tmp_path: Path, receivers, daemons) -> None:  # noqa: F811 (fixtures)
    """The crash page (a real webhook receiver) and /api/status: `during launching`, the
    startup counted (epoch 1).  Before: `crashed: bad_argument during waiting`, epoch 0."""
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target("t1", log)], [{"type": "webhook", "url": rx.url("/hook"),
                                              "on": ["crashed"]}])
    d = daemons(cfg, port).start()
    append(log, "\n".join(BEFORE_LAUNCH[0][1]) + "\n")
    body = rx.wait(hook("crashed", "firing"), answered=True, alive=d.dead)[0].json
    assert body["summary"].startswith("crashed: bad_argument during launching"), body["summary"]
    assert body["details"]["during"] == "launching" and body["epoch"] == 1, body
    t = d.wait_target("t1", lambda t: t.get("crash"), "the crash on /api/status")
    assert t["crash"]["text"].startswith("crashed: bad_argument during launching"), t["crash"]
