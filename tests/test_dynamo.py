"""vLLM as an NVIDIA Dynamo worker (`python -m dynamo.vllm`, ai-dynamo 1.6.1): the main
process's records in Dynamo's format (`2026-12-01T10:04:12.871540Z  INFO module.funcName: `,
ANSI-coloured), the engine core's in vLLM 0.34's own, and no API server: Dynamo's `worker for
M has been initialized` is the ready line (tests/fixtures/built/vllm-034-dynamo-worker.log,
built from both sources: tests/fixtures/built/README.md)."""

from __future__ import annotations

from pathlib import Path

from logwatch.app.replay import replay_file
from logwatch.rules.origin import Origin
from logwatch.rules.pack import load_pack
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

BUILT = Path(__file__).parent / "fixtures" / "built"
WORKER = BUILT / "vllm-034-dynamo-worker.log"
REFUSED = BUILT / "vllm-034-dynamo-args-refused.log"
# what `logwatch replay --timeline` of the plain `vllm serve` start reads (vllm-034-default.log)
DEFAULT_PHASES = ["launching", "loading_shards", "autotune", "allocating", "autotune",
                  "cuda_graph", "allocating", "ready"]


def doc(path: Path) -> dict:
    return summary(pipeline_view(path.name, replay_file(str(path))))


def test_a_dynamo_vllm_worker_is_vllm_and_ready_at_dynamo_s_own_line() -> None:
    """Before: `still starting: allocating` for good (no `Starting vLLM server`, no uvicorn),
    a daemon's `stalled` page 10 minutes into serving."""
    d = doc(WORKER)
    assert d["engine"] == "vllm" and d["phase"] == "ready" and d["startups"] == 1
    assert d["ready_line"].endswith("worker for Qwen/Qwen3-8B has been initialized")
    assert (d["shards_loaded"], d["shards_total"]) == (5, 5)
    assert d["crash"] is None


def test_its_phases_are_those_of_the_plain_vllm_start() -> None:
    """The same spans in the same order as vllm-034-default.log, the launch at Dynamo's first
    line (10:00:00.41, its UTC stamp), ready 4m12s later at 10:04:12.87."""
    st = replay_file(str(WORKER)).state
    assert [s.phase for s in st.spans] == DEFAULT_PHASES
    assert st.spans[0].log_time is not None and st.spans[-1].log_time is not None
    assert round(st.spans[-1].log_time - st.spans[0].log_time, 2) == 252.46
    durations = st.durations()
    assert round(durations["launching"], 3) == 10.588
    assert round(durations["loading_shards"]) == 23


def test_the_ready_line_quoted_in_a_message_is_not_ready(tmp_path: Path) -> None:
    """Anchored at the message start, after Dynamo's envelope: a line that quotes it later
    (a request's prompt, an error's text) is no ready line."""
    lines = WORKER.read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if "has been initialized" in x)
    quoted = (lines[cut].replace("worker for", "Request r-1 details: prompt: 'worker for")
              + "'")
    log = tmp_path / "quoted.log"
    log.write_text("\n".join(lines[:cut] + [quoted]) + "\n")
    assert doc(log)["phase"] != "ready"


def test_dynamo_s_envelope_is_the_message_start() -> None:
    """The stamp is base's wrapper prefix; the level and `module.funcName: ` are vLLM's
    envelope under Dynamo (rules/vllm.yaml `envelope.prefix`)."""
    origin = Origin(load_pack("vllm"))
    text = " INFO main.setup_vllm_engine: worker for Qwen/Qwen3-8B has been initialized"
    start, _ = origin.message_start(text)
    assert text[start:] == "worker for Qwen/Qwen3-8B has been initialized"
    err = "ERROR worker_factory._run_decode_worker: Failed to serve endpoints: boom"
    start, _ = origin.message_start(err)
    assert err[start:] == "Failed to serve endpoints: boom"


def test_the_main_process_refusing_the_engine_args_is_bad_argument_at_launch() -> None:
    """`create_engine_config` (vLLM 0.34 engine/arg_utils.py:2418) raised in Dynamo's
    `setup_vllm_engine` (main.py:687), uncaught: the frame says the command line."""
    d = doc(REFUSED)
    assert d["engine"] == "vllm" and d["phase"] == "crashed" and d["startups"] == 1
    assert (d["crash"]["reason"], d["crash"]["during"]) == ("bad_argument", "launching")
    assert d["crash"]["line"].startswith("ValueError: Invalid data-parallel launch options")



def test_a_worker_relaunched_after_its_crash_is_a_new_startup(tmp_path: Path) -> None:
    """The refused launch, then the worker launched again into the same file (`>>`, ten
    minutes later): Dynamo's first line (`dynamo_launch`) begins the second startup.  Before:
    one startup, the crash taken over by the relaunch's lines, `still starting: allocating`."""
    again = [x.replace("2026-12-01T10:0", "2026-12-01T10:1").replace("12-01 10:0", "12-01 10:1")
             for x in WORKER.read_text().splitlines()]
    log = tmp_path / "relaunch.log"
    log.write_text(REFUSED.read_text() + "\n".join(again) + "\n")
    st = replay_file(str(log)).state
    assert st.startups == 2 and st.phase == "ready"
    assert st.spans[0].log_time is not None
    assert round(st.spans[-1].log_time - st.spans[0].log_time, 2) == 252.46


SGLANG_WORKER = BUILT / "sglang-0523-dynamo-worker.log"
SGLANG_PLAIN = BUILT / "sglang-0523-download.log"


def test_a_dynamo_sglang_worker_is_ready_when_dynamo_lets_requests_through() -> None:
    """`python -m dynamo.sglang`: SGLang's records through Dynamo's Rust line, `%(message)s`
    (no `[ts TPn]`), no HTTP server and no "fired up".  Ready at register.py:761's line, in
    the plain start's phases (its download read as one: the weights-format line in Dynamo's
    envelope).  Before: `still starting: cuda_graph`, no downloading, launching from the
    first `Init parallel begin.` (the `server_args=` dump was not at a message start)."""
    d = doc(SGLANG_WORKER)
    assert d["engine"] == "sglang" and d["phase"] == "ready" and d["startups"] == 1
    assert d["ready_line"].endswith("Model registration succeeded; processing queued requests")
    assert d["phases_seen"] == doc(SGLANG_PLAIN)["phases_seen"]
    st = replay_file(str(SGLANG_WORKER)).state
    assert st.spans[0].log_time is not None and st.spans[-1].log_time is not None
    assert round(st.spans[-1].log_time - st.spans[0].log_time, 3) == 237.411
    assert round(st.durations()["downloading"]) == 121
