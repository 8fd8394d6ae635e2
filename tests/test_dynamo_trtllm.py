"""TensorRT-LLM as an NVIDIA Dynamo worker (`python -m dynamo.trtllm`, ai-dynamo 1.6.1):
Dynamo's own records in its Rust runtime's line (`2026-12-01T04:21:57.413201Z  INFO
llm_worker.init_llm_worker: `, ANSI-coloured), TensorRT-LLM's in its own logger's
(`[12/01/2026-04:21:57] [TRT-LLM] [I] `, `[TensorRT-LLM][INFO] `), and no HTTP server:
Dynamo's `Set runtime config data_parallel_size: N` is the ready line
(tests/fixtures/built/trtllm-dynamo-worker.log, built from both sources:
tests/fixtures/built/README.md)."""

from __future__ import annotations

from pathlib import Path

from logwatch.app.replay import replay_file
from logwatch.rules.origin import Origin
from logwatch.rules.pack import load_pack
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

BUILT = Path(__file__).parent / "fixtures" / "built"
WORKER = BUILT / "trtllm-dynamo-worker.log"
# what `logwatch replay --timeline` of the plain `trtllm-serve` start whose TensorRT-LLM lines
# the worker's are (../shared/fixtures-trtllm/trtllm-012.log) reads, from its launch on
PLAIN_PHASES = ["launching", "loading_shards", "allocating", "autotune", "cuda_graph",
                "allocating", "autotune", "cuda_graph", "ready"]
READY = "Set runtime config data_parallel_size: 1"


def doc(path: Path) -> dict:
    return summary(pipeline_view(path.name, replay_file(str(path))))


def test_a_dynamo_trtllm_worker_is_trtllm_and_ready_at_dynamo_s_own_line() -> None:
    """Before: `still starting: cuda_graph` for good (no uvicorn, no `Application startup
    complete.`), a daemon's `stalled` page once cuda_graph's budget ran out while serving."""
    d = doc(WORKER)
    assert d["engine"] == "trtllm" and d["phase"] == "ready" and d["startups"] == 1
    assert d["ready_line"].endswith(READY)
    assert (d["shards_loaded"], d["shards_total"]) == (15, 15)
    assert d["crash"] is None


def test_its_phases_are_those_of_the_plain_trtllm_serve_start() -> None:
    """The same spans in the same order as trtllm-012's from its launch (its harness's
    download is no part of a worker), the launch at Dynamo's `Initializing the worker with
    config` (04:20:04.10, its UTC stamp), ready at Dynamo's line 1m53.3s later."""
    st = replay_file(str(WORKER)).state
    assert [s.phase for s in st.spans] == PLAIN_PHASES
    assert st.spans[0].log_time is not None and st.spans[-1].log_time is not None
    assert round(st.spans[0].log_time % 60, 2) == 4.10
    assert round(st.spans[-1].log_time - st.spans[0].log_time, 2) == 113.31
    assert round(st.durations()["loading_shards"]) == 46


def test_the_engine_up_but_not_yet_registered_is_not_ready(tmp_path: Path) -> None:
    """Cut before the ready line (TRT-LLM's `Setting PyTorch memory fraction`, Dynamo's
    KV-cache capacity and `max_num_seqs` read): still starting, in the capture's phase."""
    lines = WORKER.read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if x.endswith(READY))
    log = tmp_path / "cut.log"
    log.write_text("\n".join(lines[:cut]) + "\n")
    assert doc(log)["phase"] == "cuda_graph"


def test_the_ready_line_quoted_in_a_message_is_not_ready(tmp_path: Path) -> None:
    """The ready rule wants the message to be the statement, whole: a line that quotes it
    (an error's text, a prompt in quotes) is no ready line."""
    lines = WORKER.read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if x.endswith(READY))
    quoted = lines[cut].replace(READY, f"request r-1 failed: prompt '{READY}' too long")
    log = tmp_path / "quoted.log"
    log.write_text("\n".join(lines[:cut] + [quoted]) + "\n")
    assert doc(log)["phase"] != "ready"


def test_dynamo_s_envelope_is_the_message_start() -> None:
    """The stamp is base's wrapper prefix; the level and `module.funcName: ` are the trtllm
    pack's envelope (rules/trtllm.yaml `envelope.prefix`), beside uvicorn's `INFO:     `."""
    origin = Origin(load_pack("trtllm"))
    text = f" INFO llm_worker.init_llm_worker: {READY}"
    start, _ = origin.message_start(text)
    assert text[start:] == READY
    uvicorn = "INFO:     Application startup complete."
    start, _ = origin.message_start(uvicorn)
    assert uvicorn[start:] == "Application startup complete."


def test_a_worker_relaunched_into_its_file_is_a_new_startup(tmp_path: Path) -> None:
    """The worker served, then was launched again into the same file (ten minutes later)
    and has read its config: Dynamo's `Initializing the worker with config` (rule
    `dynamo_launch`) begins the second startup.  Without that rule, one startup, still
    `ready` (the relaunch's lines before the LLM API's `Using LLM with PyTorch backend`, its
    tokenizer and engine args, begin none); on origin/main's packs, one, `cuda_graph`."""
    lines = WORKER.read_text().splitlines()
    again = [x.replace("2026-12-01T04:2", "2026-12-01T04:3").replace("12/01/2026-04:2",
             "12/01/2026-04:3").replace("2026-12-01 04:2", "2026-12-01 04:3") for x in lines]
    cut = next(i for i, x in enumerate(again) if "Using LLM with" in x)
    log = tmp_path / "relaunch.log"
    log.write_text("\n".join(lines + again[:cut]) + "\n")
    st = replay_file(str(log)).state
    assert st.startups == 2 and st.phase == "launching"
