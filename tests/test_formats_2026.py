"""Formats seen in 2026 logs, as classes: whole startups built from the engines' own
statements (tests/inventory/) in the engines' order, replayed as a user would.  Each case is
a class of log (an envelope, a wrapper, a teardown), not one file."""

from __future__ import annotations

from pathlib import Path

import pytest

from logwatch.app.replay import replay_file
from logwatch.rules.pack import load_pack
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

V = "(APIServer pid=1) INFO 12-01 10:00:{:02d} [startup.py:96] "
VLLM_HEAD = [
    "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: {'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2}",
    "(EngineCore pid=2) INFO 12-01 10:00:05 [model_runner.py:412] Loading model from scratch...",
    "(EngineCore pid=2) INFO 12-01 10:00:30 [default_loader.py:544] Loading weights took 22.41 seconds",
]
VLLM_READY = [
    "(EngineCore pid=2) INFO 12-01 10:01:00 [gpu_worker.py:796] Available KV cache memory: 101.84 GiB",
    "Capturing CUDA graphs (PIECEWISE): 100%|██████████| 67/67 [00:05<00:00, 12.10it/s]",
    "(EngineCore pid=2) INFO 12-01 10:01:20 [model_runner.py:1217] Graph capturing finished in 24 secs, took 1.21 GiB",
    "(APIServer pid=1) INFO 12-01 10:01:25 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
SGLANG_HEAD = [
    "[2026-12-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-8B', 'tp_size': 2}",
    "[2026-12-01 10:00:05 TP0] Load weight begin. avail mem=78.50 GB",
    "[2026-12-01 10:00:30 TP0] Load weight end. elapsed=25.00 s, type=Qwen3ForCausalLM, avail mem=61.02 GB, mem usage=16.40 GB.",
    "[2026-12-01 10:00:31 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1921184, KV size: 25.66 GB",
]
SGLANG_READY = [
    "[2026-12-01 10:00:40 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=18.32 GB",
    "[2026-12-01 10:00:52 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=11.20 s, mem usage=1.00 GB, avail mem=17.32 GB.",
    "[2026-12-01 10:00:55] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
    "[2026-12-01 10:00:58] The server is fired up and ready to roll!",
]


def replay(tmp_path: Path, lines: list[str]) -> dict:
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    return summary(pipeline_view("server.log", replay_file(str(log))))


def test_shutdown_step_followed_by_a_traceback_is_a_crash(tmp_path: Path) -> None:
    doc = replay(tmp_path, VLLM_HEAD[:2] + [
        "(APIServer pid=1) INFO 12-01 10:00:31 [core_client.py:822] [shutdown] MPClient: start timeout=0",
        "(APIServer pid=1) INFO 12-01 10:00:31 [utils.py:649] [shutdown] Process manager: force killing remaining processes count=1",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/vllm/entrypoints/cli/main.py", line 73, in main',
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
    ])
    assert doc["phase"] == "crashed"
    assert "Engine core initialization failed" in doc["crash"]["line"]


def test_signal_shutdown_is_a_clean_stop(tmp_path: Path) -> None:
    doc = replay(tmp_path, VLLM_HEAD + VLLM_READY + [
        "^C(EngineCore pid=2) INFO 12-01 10:05:00 [core.py:1699] [shutdown] EngineCore: trigger received signal=SIGINT",
        "(APIServer pid=1) INFO 12-01 10:05:00 [launcher.py:256] [shutdown] API server: shutdown triggered",
        "(EngineCore pid=2) INFO 12-01 10:05:01 [multiproc_executor.py:621] [shutdown] Executor: all workers exited gracefully",
    ])
    assert doc["phase"] == "stopped" and doc["crash"] is None


def test_caught_startup_traceback_then_ready_is_no_crash(tmp_path: Path) -> None:
    """vLLM's chat-template warmup logs a caught exception with its traceback and goes on."""
    doc = replay(tmp_path, VLLM_HEAD + VLLM_READY[:3] + [
        "(APIServer pid=1) WARNING 12-01 10:01:22 [base.py:383] Chat template warmup failed",
        "(APIServer pid=1) WARNING 12-01 10:01:22 [base.py:383] Traceback (most recent call last):",
        '(APIServer pid=1) WARNING 12-01 10:01:22 [base.py:383]   File "/usr/lib/python3.12/site-packages/vllm/renderers/base.py", line 376, in warmup',
        "(APIServer pid=1) WARNING 12-01 10:01:22 [base.py:383] jinja2.exceptions.TemplateSyntaxError: unexpected '}'",
    ] + VLLM_READY[3:])
    assert doc["phase"] == "ready" and doc["crash"] is None


def test_autotuner_oom_it_recovers_from_is_no_crash(tmp_path: Path) -> None:
    doc = replay(tmp_path, SGLANG_HEAD + [
        "[2026-12-01 10:00:32 TP0] Running FlashInfer autotune with cache: /root/.cache/sglang/fi.json",
        "2026-12-01 10:00:33,123 - WARNING - autotuner.py:3195 - flashinfer.jit: [Autotuner]: Skipping tactic <CutlassFusedMoeRunner> 7, due to failure while profiling: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "2026-12-01 10:00:34,123 - WARNING - autotuner.py:3048 - flashinfer.jit: [Autotuner]: OOM detected, falling back to default tactic",
        "[2026-12-01 10:00:38 TP0] FlashInfer autotune completed.",
    ] + SGLANG_READY)
    assert doc["phase"] == "ready" and doc["crash"] is None


def test_follower_node_clean_exit_is_not_a_crash(tmp_path: Path) -> None:
    doc = replay(tmp_path, SGLANG_HEAD + SGLANG_READY + [
        "[2026-12-01 11:00:00] Scheduler or DataParallelController 4242 terminated with 0",
    ])
    assert doc["phase"] == "stopped" and doc["crash"] is None
    doc = replay(tmp_path, SGLANG_HEAD + SGLANG_READY + [
        "[2026-12-01 11:00:00] Scheduler or DataParallelController 4242 terminated with 1",
    ])
    assert doc["crash"]["reason"] == "child_process_died"


def test_headless_follower_launches_are_startups(tmp_path: Path) -> None:
    launch = ("(MainProcess pid={}) INFO 12-01 10:0{}:00 [serve.py:225] Launching vLLM (v0.34.0) "
              "headless multiproc executor, with head node address 10.0.0.1 for torch.distributed process group.")
    doc = replay(tmp_path, [launch.format(100, 0), VLLM_HEAD[1], launch.format(200, 5), VLLM_HEAD[1]])
    assert doc["startups"] == 2


@pytest.mark.parametrize("line, rank", [
    ("(APIServer pid=1) (EngineCore_DP0 pid=283) (Worker_TP5 pid=299) INFO 12-01 10:00:05 [x.py:1] m", "TP5"),
    ("(APIServer pid=1) (EngineCore_DP1 pid=283) INFO 12-01 10:00:05 [x.py:1] m", "DP1"),
    ("(Worker_TP2_EP2 pid=1449) INFO 12-01 10:00:05 [x.py:1] m", "TP2_EP2"),
])
def test_nested_process_tags_name_the_innermost_rank(line: str, rank: str) -> None:
    assert load_pack("vllm").rank_of(line) == rank


def test_glued_output_before_a_record_keeps_the_record(tmp_path: Path) -> None:
    doc = replay(tmp_path, ["nohup: ignoring input" + SGLANG_HEAD[0]] + SGLANG_HEAD[1:] + SGLANG_READY)
    assert doc["phase"] == "ready" and doc["startups"] == 1
    assert doc["durations"]["launching"] == 5.0   # the record's own stamp was read


def test_pydantic_value_error_is_a_bad_argument(tmp_path: Path) -> None:
    doc = replay(tmp_path, VLLM_HEAD[:1] + [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/vllm/engine/arg_utils.py", line 1400, in create_model_config',
        "ValidationError: 1 validation error for ModelConfig",
        "  Value error, Invalid repository ID or local directory specified: 'Qwen/Qwen3-8B-typo'. [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]",
    ])
    assert doc["crash"]["reason"] == "bad_argument"


def test_sglang_download_is_its_own_phase(tmp_path: Path) -> None:
    """0.5.23 prints `Using model weights format` only on the hub path, right before the
    (silent, huggingface_hub >= 1.0) download."""
    doc = replay(tmp_path, [
        SGLANG_HEAD[0],
        "[2026-12-01 10:00:09 TP0] Load weight begin. avail mem=78.50 GB",
        "[2026-12-01 10:00:09 TP0] Using model weights format ['*.safetensors']",
        "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]",
        "[2026-12-01 10:02:40 TP0] Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:30<00:00,  6.00s/it]",
    ] + SGLANG_HEAD[2:] + SGLANG_READY)
    assert doc["phases_seen"][:3] == ["launching", "downloading", "loading_shards"]
    assert doc["phase"] == "ready"


def test_sglang_weight_cache_daemons_load_before_the_schedulers(tmp_path: Path) -> None:
    doc = replay(tmp_path, [
        SGLANG_HEAD[0],
        "[2026-12-01 10:00:01] Launching 2 weight cache daemon(s) on node 0 for model=/models/GLM-5, pp_ranks=0..0, tp_ranks=0..1, dist_init_method=tcp://127.0.0.1:29500",
        "[2026-12-01 10:00:02] [WeightCacheDaemon gpu=0 tp_rank=0] Loading model from disk: /models/GLM-5",
        "[2026-12-01 10:03:30] [WeightCacheDaemon gpu=0 tp_rank=0] Model loaded from disk in 208.00s",
        "[2026-12-01 10:03:31] All 2 weight cache daemons on node 0 are ready",
        "[2026-12-01 10:03:35 TP0] Init parallel begin.",
        "[2026-12-01 10:03:40 TP0] Load weight begin. avail mem=78.50 GB",
        "[2026-12-01 10:03:45 TP0] Load weight end. elapsed=5.00 s, type=Glm5ForCausalLM, avail mem=61.02 GB, mem usage=16.40 GB.",
        "[2026-12-01 10:03:46 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1921184, KV size: 25.66 GB",
        "[2026-12-01 10:04:40 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=18.32 GB",
        "[2026-12-01 10:04:58] The server is fired up and ready to roll!",
    ])
    assert doc["phases_seen"] == ["launching", "loading_shards", "allocating", "cuda_graph", "ready"]
    assert doc["durations"]["loading_shards"] >= 200    # the daemons' load, not launching


def test_sglang_weight_cache_daemon_timeout_is_a_startup_timeout(tmp_path: Path) -> None:
    doc = replay(tmp_path, [
        SGLANG_HEAD[0],
        "[2026-12-01 10:00:02] [WeightCacheDaemon gpu=0 tp_rank=0] Loading model from disk: /models/GLM-5",
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/engine.py", line 842, in _wait_weight_cache_daemons',
        "TimeoutError: Weight cache daemon for pp_rank=0 tp_rank=3 did not become ready within 1800s",
    ])
    assert doc["crash"]["reason"] == "startup_timeout"
    assert doc["crash"]["during"] == "launching"      # the daemons load beside launching


def test_sglang_new_kv_wording_is_kv_cache_too_small(tmp_path: Path) -> None:
    doc = replay(tmp_path, SGLANG_HEAD[:3] + [
        "[2026-12-01 10:00:31 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/kv_cache_configurator.py", line 3050, in _profile_available_bytes',
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8. Raise --mem-fraction-static above 0.912 (minimum viable = 1 - available/pre = 0.9118).",
        "[2026-12-01 10:00:32] Received sigquit from a child process. It usually means the child failed.",
    ])
    assert doc["crash"]["reason"] == "kv_cache_too_small"
    assert doc["crash"]["during"] == "allocating"


def test_vllm_jit_warmup_failure_names_the_kernel_build(tmp_path: Path) -> None:
    doc = replay(tmp_path, VLLM_HEAD + VLLM_READY[:1] + [
        "(EngineCore pid=2) INFO 12-01 10:01:01 [kernel_warmup.py:294] JIT kernel warmup starting.",
        "(EngineCore pid=2) ERROR 12-01 10:01:40 [kernel_warmup.py:300] JIT kernel warmup failed after 39.10s.",
        "(EngineCore pid=2) ERROR 12-01 10:01:40 [kernel_warmup.py:300] Traceback (most recent call last):",
        '(EngineCore pid=2) ERROR 12-01 10:01:40 [kernel_warmup.py:300]   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/jit_warmup.py", line 1130, in warmup',
        "(EngineCore pid=2) ERROR 12-01 10:01:40 [kernel_warmup.py:300] RuntimeError: boom",
    ])
    assert doc["crash"]["reason"] == "kernel_compile_failed"


def test_vllm_ray_worker_death_and_shm_and_ready_timeout(tmp_path: Path) -> None:
    for line, reason in [
        ("(EngineCore pid=2) ERROR 12-01 10:01:00 [ray_executor_v2.py:523] RayWorkerProc rank=3 died unexpectedly, shutting down executor.", "child_process_died"),
        ("RuntimeError: Insufficient space in /dev/shm for shm_broadcast: 1024 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).", "shm_too_small"),
        ("TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).", "startup_timeout"),
    ]:
        doc = replay(tmp_path, VLLM_HEAD[:2] + ["Traceback (most recent call last):", line])
        assert doc["crash"]["reason"] == reason, line


def test_an_encoder_only_server_is_ready_when_its_ranks_finished_init(tmp_path: Path) -> None:
    """SGLang's encoder-only server (encode / prefill / decode disaggregation,
    `--encoder-only`; 0.5.23 disaggregation/encoder/server.py, encoder/http_server.py): no
    `server_args`, no "fired up"; its ranks init, then uvicorn serves `/encode`.  Before:
    "still starting: loading_shards" for good, `stalled` paged while it served."""
    e = "[2026-12-01 10:00:{:02d} encode_server] "
    lines = [
        e.format(2) + "init MMEncoder 0/1",
        e.format(5) + "Using model weights format ['*.safetensors']",
        "Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:04<00:00,  1.20it/s]",
        e.format(10) + "Using transfer backend: zmq_to_scheduler",
        e.format(10) + "rank 0 init finish ",
        "INFO:     Application startup complete.",
        "INFO:     Uvicorn running on http://0.0.0.0:30002 (Press CTRL+C to quit)",
    ]
    doc = replay(tmp_path, lines)
    assert (doc["phase"], doc["startups"]) == ("ready", 1), doc
    assert "init finish" in doc["ready_line"]
    assert replay(tmp_path, lines[:4])["phase"] == "loading_shards"


def test_a_tagged_traceback_s_code_line_is_not_its_root_cause(tmp_path: Path) -> None:
    """vLLM 0.8-0.28 tag every raw line of a child (`_add_prefix`), a traceback's quoted code
    too: `raise RuntimeError(f"NCCL error: ...")` was the root cause, not the error it raised."""
    doc = replay(tmp_path, VLLM_HEAD[:2] + [
        "(EngineCore pid=2) ERROR 12-01 10:00:20 [core.py:700] EngineCore failed to start.",
        "(EngineCore pid=2) Traceback (most recent call last):",
        '(EngineCore pid=2)   File "/usr/lib/python3.12/site-packages/vllm/distributed/'
        'device_communicators/pynccl_wrapper.py", line 280, in NCCL_CHECK',
        '(APIServer pid=1) (EngineCore pid=2)     raise RuntimeError(f"NCCL error: {error_str}")',
        "(EngineCore pid=2) RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    ])
    assert doc["crash"]["reason"] == "nccl_error"
    assert doc["crash"]["line"].startswith("(EngineCore pid=2) RuntimeError: NCCL error: unhandled"), doc["crash"]


def test_a_port_search_that_goes_on_is_no_crash_its_end_is(tmp_path: Path) -> None:
    """Both engines look for a free port and say each one taken (VLLM_PORT / SGLANG_PORT;
    vLLM's DP rendezvous; SGLang waiting for the port a killed server holds): each line was
    `crashed: port_in_use during launching`, the ready after it not read."""
    searching = [
        "(EngineCore pid=2) INFO 12-01 10:00:04 [network_utils.py:248] Port 29500 is already in use, trying port 29501",
        "(EngineCore pid=2) WARNING 12-01 10:00:04 [parallel.py:841] Address already in use. Retrying with a new port.",
    ]
    doc = replay(tmp_path, VLLM_HEAD[:1] + searching + VLLM_HEAD[1:] + VLLM_READY)
    assert doc["phase"] == "ready" and doc["crash"] is None, doc
    waiting = [
        "[2026-12-01 10:00:01] Port 30010 is already in use, trying port 30011",
        "[2026-12-01 10:00:02] The port 30000 is in use, but we could not find the process that uses it.",
        "[2026-12-01 10:00:03] port 30000 is in use. Waiting for 15 seconds for port_base to be available. "
        "port_base is used by a process already. process.name()='python3'",
    ]
    doc = replay(tmp_path, waiting + SGLANG_HEAD + SGLANG_READY)
    assert doc["phase"] == "ready" and doc["startups"] == 1, doc
    # the wait's end is fatal (network.py raises after SGLANG_WAIT_PORT_TIMEOUT)
    doc = replay(tmp_path, SGLANG_HEAD[:1] + [
        "[2026-12-01 10:00:31] Port is already in use. dist_init_port=None port_base=30000 "
        "detokenizer_port=30001 nccl_port=30002 scheduler_input_port=30003",
        "Traceback (most recent call last):",
        "ValueError: port_base at 30000 is not available in 30 seconds. port_base is used by a process already.",
    ])
    assert doc["phase"] == "crashed" and doc["crash"]["reason"] == "port_in_use", doc


def test_a_follower_node_s_silent_capture_is_timed_by_its_end_line(tmp_path: Path) -> None:
    """vLLM prints capture bars on the cluster's first rank only (0.34
    v1/worker/gpu/cudagraph_utils.py:495; 0.28 gpu_model_runner.py:7119): a `--headless`
    node's capture is silent until `Graph capturing finished in 25 secs`.  Those 25 s were
    timed as `allocating` (its stall budget, not capture's) and capture as 1 s."""
    w = "(Worker_TP{r} pid=20{r}) INFO 12-01 10:{t} [{src}] {msg}"
    lines = ["INFO 12-01 10:00:00 [serve.py:216] Launching vLLM (v0.28.0) headless multiproc "
             "executor, with head node address 10.0.0.1:29501 for torch.distributed process group."]
    for t, src, msg in [
            ("00:11", "gpu_model_runner.py:5419", "Starting to load model Qwen/Qwen3-32B..."),
            ("00:42", "default_loader.py:430", "Loading weights took 30.52 seconds"),
            ("01:23", "monitor.py:34", "torch.compile took 39.00 s in total"),
            ("01:27", "gpu_worker.py:578", "Available KV cache memory: 21.4 GiB"),
            ("01:53", "gpu_model_runner.py:7048", "Graph capturing finished in 25 secs, took 1.20 GiB")]:
        lines += [w.format(r=r, t=t, src=src, msg=msg) for r in (2, 3)]
    doc = replay(tmp_path, lines)
    assert doc["phase"] == "ready", doc
    d = doc["durations"]
    # allocating: the profiling run after the compile (4 s) and the 1 s before the capture
    assert d["cuda_graph"] == 25.0 and d["allocating"] == 4.0 + 1.0, d
    # the head's capture (bars, then the same line) is timed by its bars, as before
    head = VLLM_HEAD + VLLM_READY
    assert replay(tmp_path, head)["durations"]["cuda_graph"] == 20.0


def test_a_crash_read_from_the_nccl_watchdog_is_timed_by_its_stamps(tmp_path: Path) -> None:
    """torch's c10 log stamps its lines glog-style (`[rank0]:[E1206 10:11:00.123456789
    ProcessGroupNCCL.cpp:685]`; a vLLM child's behind its process tag): a serving server
    hung in a collective until the watchdog's timeout is timed at the watchdog's line.
    Before (helper adv26 L1): at the last stamped line before it, a 10-minute hang said
    "after 1m00s" (here), hiding the hang."""
    sglang = SGLANG_HEAD + SGLANG_READY + [
        "[2026-12-01 10:01:00 TP0] Decode batch, #running-req: 31, #token: 40512, token usage: "
        "0.09, cuda graph: True, gen throughput (token/s): 2874.12, #queue-req: 0",
        "[rank0]:[E1201 10:11:00.123456789 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=123456, OpType=ALLREDUCE, NumelIn=8388608, "
        "NumelOut=8388608, Timeout(ms)=600000) ran for 600045 milliseconds before timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ]
    vllm = VLLM_HEAD + VLLM_READY + [
        "(APIServer pid=1) INFO 12-01 10:02:00 [loggers.py:283] Engine 000: Avg prompt throughput: "
        "1.0 tokens/s, Avg generation throughput: 874.1 tokens/s, Running: 8 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 3.1%, Prefix cache hit rate: 0.0%",
        "(EngineCore pid=2) [rank0]:[E1201 10:12:00.123456789 ProcessGroupNCCL.cpp:685] [Rank 0] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600045 milliseconds before timing out.",
        "(EngineCore pid=2) terminate called after throwing an instance of 'c10::DistBackendError'",
    ]
    for lines, after in ((sglang, 660.0), (vllm, 720.0)):
        log = tmp_path / "server.log"
        log.write_text("\n".join(lines) + "\n")
        view = pipeline_view("server.log", replay_file(str(log)))
        assert view.crash is not None and view.crash["reason"] == "nccl_error", view.crash
        assert view.crash_elapsed == pytest.approx(after, abs=1.0), (lines[0], view.crash_elapsed)


@pytest.mark.parametrize("month,stamp", [("09", "901"), ("01", "101"), ("05", "501")])
def test_a_c10_stamp_of_january_to_september_has_a_three_digit_date(tmp_path: Path, month: str,
                                                                    stamp: str) -> None:
    """torch's c10 log writes its date unpadded, `(tm_mon + 1) * 100 + tm_mday`
    (c10/util/Logging.cpp): `[rank0]:[E901 10:11:00.123456789 ...` on 1 September.  Before
    (helper adv33 M1, left by 28a0d8c, whose stamps were all of Oct-Dec), nine months of
    the year the watchdog's line went untimed: a 10-minute hang said "after 1m00s"."""
    lines = [ln.replace("2026-12-01", f"2026-{month}-01")
             for ln in SGLANG_HEAD + SGLANG_READY] + [
        f"[2026-{month}-01 10:01:00 TP0] Decode batch, #running-req: 31, #token: 40512, token "
        "usage: 0.09, cuda graph: True, gen throughput (token/s): 2874.12, #queue-req: 0",
        f"[rank0]:[E{stamp} 10:11:00.123456789 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=123456, OpType=ALLREDUCE, "
        "NumelIn=8388608, NumelOut=8388608, Timeout(ms)=600000) ran for 600045 milliseconds "
        "before timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    view = pipeline_view("server.log", replay_file(str(log)))
    assert view.crash is not None and view.crash["reason"] == "nccl_error", view.crash
    assert view.crash_elapsed == pytest.approx(660.0, abs=1.0), view.crash_elapsed
