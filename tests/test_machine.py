"""The startup state machine, driven the realistic way: log bytes through `LogPipeline`.

Every test feeds real-looking SGLang / vLLM lines (shapes from shared/reference/markers.md
sections 1.2, 1.3, 2.2, 2.3) with an explicit wall clock `now`, then checks the events and
`pipe.state`.  No sleeps: time is a parameter.  A few tests call `StartupMachine.step`
directly with hand-made `Observation`s to pin the pure contract.
"""

from __future__ import annotations

import json
import re

import pytest

from logwatch.eta import startup_eta

from logwatch.machine import (
    CrashRetracted, Crashed, CrashSettled, CrashUpdated, Observation, PhaseChanged, Progress, Ready, Restarted,
    Stalled, StartupMachine, State, StatsUpdated, Stopped, current_stats, parse_rate,
)
from logwatch.pipeline import EXCERPT_MAX_LINES, LogPipeline
from logwatch.rules.pack import load_pack


# -- helpers ------------------------------------------------------------------------------------

class Log:
    """A pipeline plus a wall clock: `feed` lines (each its own chunk, `step` seconds apart)."""

    def __init__(self, engine: str = "sglang", now: float = 1000.0, **kw: object) -> None:
        self.pack = load_pack(engine)
        self.pipe = LogPipeline(self.pack, **kw)
        self.now = now
        self.events: list[object] = []
        self.lines = 0  # physical lines fed so far

    @property
    def state(self) -> State:
        return self.pipe.state

    def feed(self, *lines: str, step: float = 1.0, now: float | None = None) -> list[object]:
        """Feed whole lines (`\\n` appended); return the events they produced."""
        if now is not None:
            self.now = now
        out: list[object] = []
        for i, line in enumerate(lines):
            if i:
                self.now += step
            out.extend(self.pipe.feed(line.encode("utf-8") + b"\n", now=self.now))
            self.lines += line.count("\n") + 1
        self.now += step
        self.events.extend(out)
        return out

    def feed_chunk(self, data: bytes, now: float | None = None) -> list[object]:
        if now is not None:
            self.now = now
        out = self.pipe.feed(data, now=self.now)
        self.lines += data.count(b"\n")
        self.events.extend(out)
        return out

    def tick(self, now: float) -> list[object]:
        return self.pipe.tick(now)


def of(events: list[object], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def phase_changes(events: list[object]) -> list[tuple[str, str]]:
    return [(e.old, e.new) for e in of(events, PhaseChanged)]


# Real-looking SGLang lines (markers.md 1.2), 2025-10-06, TP=8.
def sg(t: str, msg: str, tag: str | None = "TP0") -> str:
    return f"[2025-10-06 {t}{' ' + tag if tag else ''}] {msg}"


SG_ARGS = sg("10:00:00", "server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tokenizer_path="
             "'Qwen/Qwen3-8B', tokenizer_mode='auto', tp_size=8, mem_fraction_static=0.88)", None)
SG_LAUNCH_CMD = "+ python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 8 --port 30000"
SG_DIST_BEGIN = "Init torch distributed begin."
SG_LOAD_BEGIN = "Load weight begin. avail mem=78.50 GB"
SG_LOAD_END = ("Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=70.93 GB, "
               "mem usage=7.19 GB.")
SG_KV = "KV Cache is allocated. #tokens: 1921184, K size: 25.66 GB, V size: 25.66 GB"
SG_MEMPOOL_END = "Memory pool end. avail mem=18.91 GB"
SG_AUTOTUNE = "Running FlashInfer autotune..."
SG_CAPTURE_BEGIN = ("Capture cuda graph begin. This can take up to several minutes. "
                    "avail mem=12.01 GB")
SG_CAPTURE_END = ("Capture cuda graph end. Time elapsed: 11.39 s. mem usage=1.00 GB. "
                  "avail mem=11.17 GB.")
SG_READY = "The server is fired up and ready to roll!"
SG_PREFILL_WARMUP = ("Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, "
                     "token usage: 0.00, #running-req: 0, #queue-req: 0, ")
SG_DECODE = ("Decode batch, #running-req: 31, #token: 40512, token usage: 0.09, cuda graph: True, "
             "gen throughput (token/s): 2874.12, #queue-req: 3")
SG_EXC = "Scheduler hit an exception: Traceback (most recent call last):"
SG_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
            "total capacity of 79.15 GiB of which 1.02 GiB is free. Process 145053 has 78.10 GiB "
            "memory in use.")
TB_FRAMES = [
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", '
    'line 2890, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank)",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/'
    'cuda_graph_runner.py", line 380, in capture',
    "    graph, output_buffers = self.capture_one_batch_size(bs, forward)",
]


def shard(cur: int, total: int, rate: str = "3.13it/s") -> str:
    pct = int(100 * cur / total)
    return (f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {cur}/{total} "
            f"[00:14<00:13,  {rate}]")


def sglang_to(log: Log, phase: str) -> None:
    """Drive an SGLang startup (TP0 only) up to `phase`."""
    steps = {
        "launching": [SG_ARGS, sg("10:00:05", SG_DIST_BEGIN)],
        "loading_shards": [sg("10:00:10", SG_LOAD_BEGIN), shard(1, 4)],
        "allocating": [sg("10:00:40", SG_LOAD_END), sg("10:00:41", SG_KV)],
        "autotune": [sg("10:00:42", SG_AUTOTUNE)],
        "cuda_graph": [sg("10:00:50", SG_CAPTURE_BEGIN)],
        "ready": [sg("10:01:05", SG_CAPTURE_END), sg("10:01:10", SG_READY, None)],
    }
    for name, lines in steps.items():
        log.feed(*lines)
        if name == phase:
            break
    assert log.state.phase == phase


# Real-looking vLLM V1 lines (markers.md 2.2).
def vl(proc: str, t: str, src: str, msg: str) -> str:
    return f"({proc} pid={'1' if proc == 'APIServer' else '2'}) INFO 10-03 {t} [{src}] {msg}"


VLLM_STARTUP = [
    vl("APIServer", "10:00:00", "api_server.py:1839", "vLLM API server version 0.11.0"),
    vl("APIServer", "10:00:00", "utils.py:233",
       "non-default args: {'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 1}"),
    vl("EngineCore_DP0", "10:00:05", "core.py:77",
       "Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B'"),
    vl("EngineCore_DP0", "10:00:10", "gpu_model_runner.py:2602", "Starting to load model Qwen/Qwen3-8B..."),
    "(EngineCore_DP0 pid=2) Loading safetensors checkpoint shards:  40% Completed | 2/5 "
    "[00:02<00:03,  1.03it/s]",
    "(EngineCore_DP0 pid=2) Loading safetensors checkpoint shards: 100% Completed | 5/5 "
    "[00:05<00:00,  1.01it/s]",
    vl("EngineCore_DP0", "10:00:20", "backends.py:548",
       "Using cache directory: /root/.cache/vllm/torch_compile_cache/abc/rank_0_0/backbone "
       "for vLLM's torch.compile"),
    vl("EngineCore_DP0", "10:00:30", "monitor.py:34", "torch.compile takes 7.14 s in total"),
    vl("EngineCore_DP0", "10:00:31", "gpu_worker.py:298", "Available KV cache memory: 16.23 GiB"),
    vl("EngineCore_DP0", "10:00:31", "kv_cache_utils.py:1087", "GPU KV cache size: 425,424 tokens"),
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  34%|███▍      | 23/67 "
    "[00:02<00:04,  8.92it/s]",
    vl("EngineCore_DP0", "10:00:40", "gpu_model_runner.py:3480",
       "Graph capturing finished in 7 secs, took 0.95 GiB"),
]
VLLM_API_START = vl("APIServer", "10:00:45", "api_server.py:1912",
                    "Starting vLLM API server 0 on http://0.0.0.0:8000")
VLLM_ROUTES = vl("APIServer", "10:00:45", "launcher.py:34", "Available routes are:")
VLLM_STARTUP_COMPLETE = "(APIServer pid=1) INFO:     Application startup complete."
VLLM_STATS = vl("APIServer", "10:05:00", "loggers.py:127",
                "Engine 000: Avg prompt throughput: 1520.4 tokens/s, Avg generation throughput: "
                "2874.1 tokens/s, Running: 31 reqs, Waiting: 2 reqs, GPU KV cache usage: 9.1%, "
                "Prefix cache hit rate: 42.0%")


# -- phase order --------------------------------------------------------------------------------

def test_full_sglang_startup_walks_every_phase_in_order():
    log = Log()
    sglang_to(log, "ready")
    assert phase_changes(log.events) == [
        ("waiting", "launching"), ("launching", "loading_shards"),
        ("loading_shards", "allocating"), ("allocating", "autotune"),
        ("autotune", "cuda_graph"), ("cuda_graph", "ready"),
    ]
    assert log.state.phases_seen == ["launching", "loading_shards", "allocating", "autotune",
                                     "cuda_graph", "ready"]
    assert log.state.startups == 1 and log.state.epoch == 1
    assert log.state.crash is None


def test_interleaved_ranks_do_not_flap_the_phase():
    log = Log()
    log.feed(SG_ARGS)
    ranks = [f"TP{i}" for i in range(8)]
    fast, slow = ranks[:4], ranks[4:]
    log.feed(*[sg("10:00:05", SG_DIST_BEGIN, r) for r in fast])
    log.feed(*[sg("10:00:10", SG_LOAD_BEGIN, r) for r in fast])
    # the weight-load end and the KV pool of the fast ranks interleave with slow ranks still
    # printing earlier milestones (each rank's own in its order, once: a rank that begins a
    # second load after its own end loads a draft, tests/test_topologies.py); then capture
    # begins on some ranks while others allocate
    mixed = []
    for f, s in zip(fast, slow):
        mixed += [sg("10:00:40", SG_LOAD_END, f), sg("10:00:41", SG_DIST_BEGIN, s)]
    for f, s in zip(fast, slow):
        mixed += [sg("10:00:42", SG_LOAD_BEGIN, s), sg("10:00:45", SG_MEMPOOL_END, f)]
    for f, s in zip(fast, slow):
        mixed += [sg("10:00:50", SG_CAPTURE_BEGIN, f), sg("10:00:50", SG_LOAD_END, s)]
    for s in slow:
        mixed += [sg("10:00:55", SG_MEMPOOL_END, s), sg("10:00:56", SG_CAPTURE_BEGIN, s)]
    ev = log.feed(*mixed)
    # loading_shards (provisional: a download could have come first) is announced when the
    # next phase confirms it, just before that phase
    assert phase_changes(ev) == [("launching", "loading_shards"),
                                 ("loading_shards", "allocating"), ("allocating", "cuda_graph")]
    assert log.state.phase == "cuda_graph"
    assert log.state.phases_seen == ["launching", "loading_shards", "allocating", "cuda_graph"]
    assert [e.phase for e in log.state.history] == log.state.phases_seen  # no repeats
    assert log.state.startups == 1


def test_later_marker_skips_phases():
    log = Log()
    log.feed(SG_ARGS)
    ev = log.feed(sg("10:00:50", SG_CAPTURE_BEGIN, "TP3"))
    assert phase_changes(ev) == [("launching", "cuda_graph")]
    assert log.state.phases_seen == ["launching", "cuda_graph"]


def test_earlier_marker_after_later_one_changes_nothing():
    log = Log()
    sglang_to(log, "cuda_graph")
    before = (log.state.phase, list(log.state.phases_seen), len(log.state.history))
    ev = log.feed(sg("10:00:51", SG_LOAD_END, "TP5"), sg("10:00:51", SG_KV, "TP6"),
                  sg("10:00:52", SG_AUTOTUNE, "TP7"), sg("10:00:52", SG_DIST_BEGIN, "TP1"))
    assert ev == []
    assert (log.state.phase, log.state.phases_seen, len(log.state.history)) == before


def test_vllm_autotune_comes_before_allocating():
    log = Log("vllm")
    log.feed(*VLLM_STARTUP[:2])
    ev = log.feed(*VLLM_STARTUP[2:])
    assert phase_changes(ev) == [
        ("launching", "loading_shards"), ("loading_shards", "autotune"),
        ("autotune", "allocating"), ("allocating", "cuda_graph")]
    assert log.state.phase == "cuda_graph"
    assert log.state.phases_seen[-4:] == ["loading_shards", "autotune", "allocating", "cuda_graph"]


def test_vllm_kv_cache_then_torch_compile_stays_allocating():
    log = Log("vllm")
    log.feed(*VLLM_STARTUP[:4])
    log.feed(vl("EngineCore_DP0", "10:00:31", "gpu_worker.py:298", "Available KV cache memory: 16.23 GiB"))
    assert log.state.phase == "allocating"
    ev = log.feed(vl("EngineCore_DP0", "10:00:32", "monitor.py:34", "torch.compile takes 7.14 s in total"))
    assert of(ev, PhaseChanged) == []
    assert log.state.phase == "allocating"


def test_pure_step_moves_forward_only():
    pack = load_pack("sglang")
    m = StartupMachine(pack)
    st = State()

    def obs(rule_id: str, text: str, n: int) -> Observation:
        return Observation(pack.rule(rule_id), {}, text, n)

    ev = m.step(st, obs("server_args", SG_ARGS, 1), now=10.0)
    assert st.phase == "launching" and of(ev, PhaseChanged)[0].new == "launching"
    ev = m.step(st, obs("capture_begin", SG_CAPTURE_BEGIN, 2), now=11.0)
    assert st.phase == "cuda_graph" and of(ev, PhaseChanged)[0].at == 11.0
    ev = m.step(st, obs("load_weight_end", SG_LOAD_END, 3), now=12.0)
    assert ev == [] and st.phase == "cuda_graph"
    ev = m.step(st, obs("ready", SG_READY, 4), now=20.0)
    r = of(ev, Ready)
    assert st.phase == "ready" and len(r) == 1 and r[0].took == pytest.approx(10.0)


# -- readiness ----------------------------------------------------------------------------------

def test_sglang_uvicorn_up_is_not_ready():
    log = Log()
    sglang_to(log, "cuda_graph")
    ev = log.feed(
        sg("10:01:05", SG_CAPTURE_END),
        sg("10:01:06", "max_total_num_tokens=2261377, chunked_prefill_size=16384, "
           "max_prefill_tokens=16384, max_running_requests=4096, context_len=128000, "
           "available_gpu_mem=37.06 GB", None),
        sg("10:01:07", "INFO:     Started server process [271469]", None),
        sg("10:01:07", "INFO:     Waiting for application startup.", None),
        sg("10:01:07", "INFO:     Application startup complete.", None),
        sg("10:01:07", "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
           None),
        sg("10:01:08", 'INFO:     127.0.0.1:40318 - "GET /model_info HTTP/1.1" 200 OK', None),
    )
    assert of(ev, Ready) == []
    assert log.state.phase == "cuda_graph"
    assert log.state.ready_line is None
    ev = log.feed(sg("10:01:10", SG_READY, None))
    assert len(of(ev, Ready)) == 1
    assert log.state.phase == "ready"
    assert log.state.ready_line is not None and SG_READY in log.state.ready_line


@pytest.mark.parametrize("line", [VLLM_STARTUP_COMPLETE, VLLM_API_START, VLLM_ROUTES])
def test_vllm_ready_markers(line):
    log = Log("vllm")
    log.feed(*VLLM_STARTUP)
    ev = log.feed(line)
    ready = of(ev, Ready)
    assert len(ready) == 1 and ready[0].line == line
    assert log.state.phase == "ready"
    assert log.state.ready_line == line


def test_vllm_ready_once_for_api_start_routes_and_startup_complete():
    log = Log("vllm")
    log.feed(*VLLM_STARTUP)
    ev = log.feed(VLLM_API_START, VLLM_ROUTES,
                  "(APIServer pid=1) INFO 10-03 10:00:45 [launcher.py:42] Route: /v1/chat/completions, "
                  "Methods: POST",
                  "(APIServer pid=1) INFO:     Started server process [1]",
                  "(APIServer pid=1) INFO:     Waiting for application startup.",
                  VLLM_STARTUP_COMPLETE)
    assert len(of(ev, Ready)) == 1
    assert log.state.phase == "ready"
    assert log.state.phases_seen.count("ready") == 1


def test_ready_took_uses_log_timestamps():
    log = Log(now=5000.0)
    # wall clock: 4 s for the whole startup; the server's clock says 150 s
    log.feed(SG_ARGS, now=5000.0)
    log.feed(sg("10:00:10", SG_LOAD_BEGIN), now=5001.0)
    log.feed(sg("10:01:40", SG_LOAD_END), now=5002.0)
    ev = log.feed(sg("10:02:30", SG_READY, None), now=5004.0)
    ready = of(ev, Ready)
    assert len(ready) == 1
    assert ready[0].took == pytest.approx(150.0)
    assert ready[0].slowest_phase == "loading_shards"  # 90 s by the log's clock


def test_ready_took_falls_back_to_wall_clock_without_timestamps():
    log = Log()
    log.feed("server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1)", now=200.0)
    log.feed("Load weight begin. avail mem=78.50 GB", now=210.0)
    ev = log.feed(SG_READY, now=242.5)
    ready = of(ev, Ready)
    assert len(ready) == 1 and ready[0].took == pytest.approx(42.5)


def test_vllm_ready_took_from_envelope_timestamps():
    log = Log("vllm", now=0.0)
    log.feed(*VLLM_STARTUP, step=0.001)
    ev = log.feed(VLLM_API_START, step=0.001)   # 10:00:45 vs version line at 10:00:00
    ready = of(ev, Ready)
    assert len(ready) == 1 and ready[0].took == pytest.approx(45.0)


# -- warmup and serving stats -------------------------------------------------------------------

def test_warmup_batches_before_ready_are_not_serving_stats():
    log = Log()
    sglang_to(log, "cuda_graph")
    ev = log.feed(sg("10:01:05", SG_CAPTURE_END),
                  sg("10:01:07", "INFO:     Application startup complete.", None),
                  sg("10:01:08", 'INFO:     127.0.0.1:40318 - "POST /generate HTTP/1.1" 200 OK', None),
                  sg("10:01:08", SG_PREFILL_WARMUP),
                  sg("10:01:09", SG_DECODE))
    assert of(ev, StatsUpdated) == []
    assert of(ev, Ready) == []
    assert log.state.stats == {}
    assert log.state.phase == "cuda_graph"


def test_serving_stats_after_ready_update_state():
    log = Log()
    sglang_to(log, "ready")
    ev = log.feed(sg("10:05:00", SG_DECODE))
    upd = of(ev, StatsUpdated)
    assert len(upd) == 1
    st = log.state.stats
    assert st["gen_throughput"] == pytest.approx(2874.12)
    assert st["running_requests"] == 31
    assert st["queued_requests"] == 3
    assert st["token_usage"] == pytest.approx(0.09)
    log.feed(sg("10:05:01", SG_DECODE.replace("#running-req: 31", "#running-req: 7")
                .replace("(token/s): 2874.12", "(token/s): 100.50")))
    assert log.state.stats["running_requests"] == 7
    assert log.state.stats["gen_throughput"] == pytest.approx(100.5)
    assert log.state.phase == "ready"


def test_log_without_startup_is_ready_at_first_serving_line():
    log = Log()
    ev = log.feed(sg("12:00:00", 'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" '
                     '200 OK', None),
                  sg("12:00:01", SG_DECODE, "DP0 TP0 EP0"))
    assert len(of(ev, Ready)) == 1
    assert log.state.phase == "ready"
    assert log.state.phases_seen == ["ready"]
    assert log.state.startups == 0
    assert log.state.stats["running_requests"] == 31


def test_vllm_stats_kv_usage_is_a_ratio():
    log = Log("vllm")
    log.feed(*VLLM_STARTUP, VLLM_STARTUP_COMPLETE)
    ev = log.feed(VLLM_STATS)
    assert len(of(ev, StatsUpdated)) == 1
    st = log.state.stats
    assert st["token_usage"] == pytest.approx(0.091)
    assert st["gen_throughput"] == pytest.approx(2874.1)
    assert st["running_requests"] == 31
    assert st["queued_requests"] == 2


def test_vllm_stats_before_ready_are_ignored():
    log = Log("vllm")
    log.feed(*VLLM_STARTUP)
    ev = log.feed(VLLM_STATS)
    assert of(ev, StatsUpdated) == [] and log.state.stats == {}
    assert log.state.phase == "cuda_graph"


# -- epochs -------------------------------------------------------------------------------------

def test_second_args_dump_is_a_new_startup():
    log = Log()
    sglang_to(log, "loading_shards")
    assert log.state.progress
    ev = log.feed(sg("10:05:00", "server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=4)",
                     None))
    assert len(of(ev, Restarted)) == 1
    assert log.state.startups == 2 and log.state.epoch == 2
    assert log.state.phase == "launching"
    assert log.state.phases_seen == ["launching"]
    assert log.state.progress == {}
    assert of(ev, Restarted)[0].epoch == 2


def test_launch_command_echo_then_args_is_one_startup():
    log = Log()
    ev = log.feed(SG_LAUNCH_CMD, SG_ARGS, sg("10:00:05", SG_DIST_BEGIN))
    assert of(ev, Restarted) == []
    assert log.state.startups == 1 and log.state.epoch == 1
    assert log.state.phases_seen == ["launching"]
    # ... but a second args dump after that is a restart
    ev = log.feed(SG_ARGS)
    assert len(of(ev, Restarted)) == 1 and log.state.startups == 2


def test_new_epoch_after_crash():
    log = Log()
    sglang_to(log, "allocating")
    log.feed(sg("10:00:45", SG_EXC), *TB_FRAMES, OOM_LINE, sg("10:00:46", SG_SIGQUIT, None))
    assert log.state.phase == "crashed"
    ev = log.feed(SG_LAUNCH_CMD, sg("10:10:00", "server_args=ServerArgs(model_path='x')", None))
    assert len(of(ev, Restarted)) == 1
    assert log.state.startups == 2
    assert log.state.phase == "launching"
    assert log.state.crash is None
    assert log.state.phases_seen == ["launching"]
    sglang_to_ready = log.feed(sg("10:10:10", SG_LOAD_BEGIN), sg("10:11:00", SG_READY, None))
    assert len(of(sglang_to_ready, Ready)) == 1


def test_new_epoch_after_clean_stop():
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("11:00:00", "SIGTERM received. signum=None frame=None. Draining requests and "
                "shutting down...", None))
    assert log.state.phase == "stopped"
    ev = log.feed(SG_ARGS)
    assert len(of(ev, Restarted)) == 1
    assert log.state.phase == "launching"
    assert log.state.startups == 2
    assert log.state.ready_line is None


@pytest.mark.parametrize("platform_line", [False, True])
def test_vllm_version_then_args_is_one_startup(platform_line):
    # markers.md 2.2 rows 1-3: one launch prints the platform line, the version, then the args
    log = Log("vllm")
    if platform_line:
        log.feed("INFO 10-03 10:00:00 [__init__.py:216] Automatically detected platform cuda.")
    log.feed(*VLLM_STARTUP[:3])
    assert log.state.startups == 1 and of(log.events, Restarted) == []
    log.feed(VLLM_STARTUP[0])
    assert log.state.startups == 2 and len(of(log.events, Restarted)) == 1


# -- crashes ------------------------------------------------------------------------------------

def _oom_during_capture(log: Log) -> int:
    """Feed an OOM crash during capture; return the 1-based line number of the OOM line."""
    sglang_to(log, "cuda_graph")
    log.feed("Capturing batches (bs=216 avail_mem=10.30 GB):  40%|████      | 21/52 "
             "[00:03<00:04,  7.40it/s]")
    log.feed(sg("10:00:58", SG_EXC), *TB_FRAMES)
    oom_no = log.lines + 1
    log.feed(OOM_LINE, "", sg("10:00:59", SG_SIGQUIT, None))
    return oom_no


def test_scheduler_oom_crash():
    log = Log()
    oom_no = _oom_during_capture(log)
    crashed = of(log.events, Crashed)
    assert len(crashed) == 1
    c = log.state.crash
    assert c is not None and log.state.phase == "crashed"
    assert c.reason == "cuda_oom"
    assert c.during == "cuda_graph"
    assert c.line == OOM_LINE
    assert c.line_number == oom_no
    assert c.confirmed
    # the excerpt: the lines before, the announcement and the traceback, bounded
    ex = c.excerpt
    assert any(SG_CAPTURE_BEGIN in x for x in ex)
    assert any(SG_EXC in x for x in ex)
    assert any("cuda_graph_runner.py" in x for x in ex)
    assert OOM_LINE in ex
    assert len(ex) <= EXCERPT_MAX_LINES
    assert log.state.phases_seen[-2:] == ["cuda_graph", "crashed"]


def test_crash_line_number_counts_physical_lines_in_one_chunk():
    log = Log()
    lines = [SG_ARGS, sg("10:00:05", SG_DIST_BEGIN), sg("10:00:10", SG_LOAD_BEGIN),
             "\r".join(shard(i, 4) for i in range(5)),      # one physical line, five frames
             sg("10:00:40", SG_LOAD_END), sg("10:00:41", SG_KV),
             sg("10:00:58", SG_EXC), *TB_FRAMES, OOM_LINE, sg("10:00:59", SG_SIGQUIT, None)]
    log.feed_chunk(("\n".join(lines) + "\n").encode())
    c = log.state.crash
    assert c is not None and c.reason == "cuda_oom"
    assert c.line_number == lines.index(OOM_LINE) + 1
    assert c.during == "allocating"


def test_crash_line_is_not_header_or_sigquit_even_when_oom_comes_last():
    log = Log()
    sglang_to(log, "cuda_graph")
    ev = log.feed(sg("10:00:58", SG_EXC))
    assert len(of(ev, Crashed)) == 1
    assert log.state.crash.line.endswith(SG_EXC)
    ev = log.feed(*TB_FRAMES, OOM_LINE)
    assert len(of(ev, CrashUpdated)) == 1
    assert log.state.crash.line == OOM_LINE and log.state.crash.reason == "cuda_oom"
    ev = log.feed(sg("10:00:59", SG_SIGQUIT, None))
    assert of(ev, Crashed) == []
    assert log.state.crash.line == OOM_LINE and log.state.crash.reason == "cuda_oom"


def test_excerpt_bounded_for_huge_traceback_in_one_chunk():
    log = Log()
    sglang_to(log, "cuda_graph")
    frames = []
    for i in range(5000):
        frames.append(f'  File "/x/sglang/srt/layers/recurse.py", line {i}, in f{i}')
        frames.append(f"    return f{i + 1}(x)")
    data = "\n".join([sg("10:00:58", SG_EXC), *frames, OOM_LINE, sg("10:00:59", SG_SIGQUIT, None)])
    start = log.lines
    log.feed_chunk((data + "\n").encode())
    c = log.state.crash
    assert c is not None and c.reason == "cuda_oom" and c.line == OOM_LINE
    assert c.line_number == start + 1 + len(frames) + 1
    assert 0 < len(c.excerpt) <= EXCERPT_MAX_LINES
    assert any(SG_EXC in x for x in c.excerpt)
    assert sum(len(x) for x in c.excerpt) <= 24_000


def test_excerpt_bounded_for_huge_traceback_fed_line_by_line():
    log = Log()
    sglang_to(log, "cuda_graph")
    frames = [f'  File "/x/recurse.py", line {i}, in f' for i in range(10_000)]
    log.feed(sg("10:00:58", SG_EXC), *frames, OOM_LINE, step=0.0)
    c = log.state.crash
    assert c.reason == "cuda_oom"
    assert len(c.excerpt) <= EXCERPT_MAX_LINES
    assert any(SG_CAPTURE_BEGIN in x for x in c.excerpt)  # the lines before are kept


def test_kv_cache_too_small():
    log = Log()
    sglang_to(log, "allocating")
    line = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.88")
    log.feed(sg("10:00:42", SG_EXC),
             '  File "/sglang/srt/model_executor/model_runner.py", line 1500, in init_memory_pool',
             '    raise RuntimeError(',
             line, sg("10:00:43", SG_SIGQUIT, None))
    c = log.state.crash
    assert c.reason == "kv_cache_too_small"
    assert c.line == line
    assert c.during == "allocating"


def test_first_of_two_ranks_identical_exceptions_is_kept():
    log = Log()
    sglang_to(log, "cuda_graph")
    oom0 = OOM_LINE
    oom1 = OOM_LINE.replace("GPU 0", "GPU 1").replace("145053", "145054")
    log.feed(sg("10:00:58", SG_EXC, "TP0"), *TB_FRAMES)
    first_no = log.lines + 1
    log.feed(oom0, sg("10:00:58", SG_EXC, "TP1"), *TB_FRAMES, oom1,
             sg("10:00:59", SG_SIGQUIT, None))
    c = log.state.crash
    assert c.reason == "cuda_oom"
    assert c.line == oom0
    assert c.line_number == first_no
    assert len(of(log.events, Crashed)) == 1


def test_chained_exception_later_line_of_equal_specificity_wins():
    log = Log()
    sglang_to(log, "allocating")
    nccl = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    log.feed(sg("10:00:42", SG_EXC), *TB_FRAMES, nccl, "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", *TB_FRAMES)
    assert log.state.crash.reason == "nccl_error" and log.state.crash.line == nccl
    oom_no = log.lines + 1
    log.feed(OOM_LINE, sg("10:00:43", SG_SIGQUIT, None))
    c = log.state.crash
    assert c.reason == "cuda_oom"
    assert c.line == OOM_LINE and c.line_number == oom_no


def test_chained_generic_exceptions_last_one_wins():
    log = Log()
    sglang_to(log, "allocating")
    log.feed(sg("10:00:42", SG_EXC), *TB_FRAMES, "KeyError: 'model.layers.0.weight'", "",
             "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):", *TB_FRAMES,
             "ValueError: cannot build the memory pool", sg("10:00:43", SG_SIGQUIT, None))
    c = log.state.crash
    # generic exception lines: the frames (cuda_graph_runner.py) name the cause
    assert c.reason == "cuda_graph_capture_failed"
    assert c.line == "ValueError: cannot build the memory pool"


def test_unchained_later_generic_exception_does_not_replace_first():
    log = Log()
    sglang_to(log, "allocating")
    log.feed(sg("10:00:42", SG_EXC), *TB_FRAMES, "KeyError: 'model.layers.0.weight'",
             sg("10:00:42", SG_EXC, "TP1"), *TB_FRAMES, "ValueError: something else")
    assert log.state.crash.line == "KeyError: 'model.layers.0.weight'"


def test_nccl_warn_hint_classifies_a_generic_crash():
    log = Log()
    log.feed(SG_ARGS, sg("10:00:05", SG_DIST_BEGIN, "TP7"))
    log.feed("h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect to "
             "10.0.0.82<38455> failed : Software caused connection abort")
    assert log.state.phase == "launching" and log.state.crash is None
    log.feed(sg("10:00:20", SG_EXC, "TP7"), *TB_FRAMES,
             "RuntimeError: Connection reset by peer", sg("10:00:21", SG_SIGQUIT, None))
    c = log.state.crash
    assert c.reason == "nccl_error"
    assert c.line == "RuntimeError: Connection reset by peer"
    assert c.during == "launching"


def test_announcement_only_during_loading_shards_is_python_exception():
    """Nothing says the weights are at fault (the exception is beyond the window)."""
    log = Log()
    sglang_to(log, "loading_shards")
    log.feed(sg("10:00:20", SG_EXC, "TP3"))
    c = log.state.crash
    assert c.reason == "python_exception"
    assert c.during == "loading_shards"
    assert SG_EXC in c.line


def test_frames_name_the_cause_of_a_generic_exception():
    log = Log()
    sglang_to(log, "loading_shards")
    log.feed(sg("10:00:20", SG_EXC, "TP3"), "Traceback (most recent call last):",
             '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 381, '
             'in load_model', "    self.load_weights_and_postprocess(model, weights, target_device)",
             "ValueError: unexpected key")
    c = log.state.crash
    assert c.reason == "weight_loading_error" and c.line == "ValueError: unexpected key"
    # a specific exception line outranks the frames
    log2 = Log()
    sglang_to(log2, "loading_shards")
    log2.feed(sg("10:00:20", SG_EXC, "TP3"), "Traceback (most recent call last):",
              '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 381, '
              'in load_model', "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert log2.state.crash.reason == "cuda_oom"


def test_sigquit_alone_is_child_process_died():
    log = Log()
    sglang_to(log, "allocating")
    ev = log.feed(sg("10:00:45", SG_SIGQUIT, None))
    assert len(of(ev, Crashed)) == 1
    c = log.state.crash
    assert c.reason == "child_process_died"
    assert c.during == "allocating"
    assert SG_SIGQUIT in c.line


@pytest.mark.parametrize("phase", ["launching", "loading_shards"])
def test_scheduler_killed_is_host_oom(phase):
    log = Log()
    sglang_to(log, phase)
    line = ("RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code "
            "is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to "
            "check.")
    log.feed("Traceback (most recent call last):",
             '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 32, '
             'in <module>',
             "    run_server(server_args)")
    no = log.lines + 1
    log.feed(line)
    c = log.state.crash
    assert c.reason == "host_oom_killed"
    assert c.line == line and c.line_number == no
    assert c.during == phase
    assert c.confirmed


def test_crash_to_json_shape():
    log = Log()
    _oom_during_capture(log)
    doc = log.state.crash.to_json()
    assert set(doc) == {"reason", "during", "line", "line_number", "excerpt", "at", "log_time",
                         "rank"}
    assert doc["reason"] == "cuda_oom" and isinstance(doc["excerpt"], list)


# -- tentative crashes --------------------------------------------------------------------------

def test_bare_traceback_during_loading_is_retracted_when_startup_goes_on():
    log = Log()
    sglang_to(log, "loading_shards")
    ev = log.feed("Traceback (most recent call last):",
                  '  File "/usr/lib/python3.12/site-packages/transformers/utils/hub.py", line 1, in x',
                  "ValueError: x")
    assert len(of(ev, Crashed)) == 1
    assert log.state.phase == "crashed"
    assert not log.state.crash.confirmed
    ev = log.feed(sg("10:00:40", SG_LOAD_END))
    retracted = of(ev, CrashRetracted)
    assert len(retracted) == 1 and retracted[0].phase == "loading_shards"
    assert log.state.phase == "allocating"
    assert log.state.crash is None
    assert "crashed" not in log.state.phases_seen
    assert log.state.phases_seen == ["launching", "loading_shards", "allocating"]
    sglang_to(log, "ready")


def _fallback_traceback(rank: str = "TP0") -> list[str]:
    """A `logger.exception` the engine survives (vLLM's weight-cache IPC loader falling back
    to the disk loader; any warning logged with its traceback): no announcement follows."""
    return [sg("10:00:12", "Weight cache IPC loading failed; falling back to disk loading", rank),
            sg("10:00:12", "Traceback (most recent call last):", rank),
            '  File "/usr/lib/python3.12/site-packages/x/ipc_loader.py", line 255, in load_model',
            "ConnectionRefusedError: [Errno 111] Connection refused"]


def test_a_survived_traceback_is_taken_back_when_its_phase_goes_on():
    """Before, only a later phase's line took an unconfirmed crash back: the fallback's shard
    bar (the same phase) did not, and a live reader settled it 2 s later: a false page,
    while `replay` of the same file, with the next phase's line in it, said ready."""
    log = Log()
    sglang_to(log, "loading_shards")
    log.feed(*_fallback_traceback())
    assert log.state.phase == "crashed" and not log.state.crash.confirmed
    ev = log.feed(shard(2, 4))                 # the loader it fell back to counts shards
    assert len(of(ev, CrashRetracted)) == 1 and log.state.phase == "loading_shards"
    assert log.state.progress["shards"].current == 2, "the bar that took it back is read too"
    # another rank's traceback: the bar (printed by the first rank only) says nothing of it
    log.feed(*_fallback_traceback("TP3"))
    ev = log.feed(shard(3, 4))
    assert of(ev, CrashRetracted) == [] and log.state.phase == "crashed"
    # the process whose traceback it was, printing a line of its phase, lives
    ev = log.feed(sg("10:00:30", SG_LOAD_BEGIN, "TP0"))   # another rank's: says nothing of TP3
    assert of(ev, CrashRetracted) == [] and log.state.phase == "crashed"
    ev = log.feed(sg("10:00:31", SG_LOAD_BEGIN, "TP3"))
    assert len(of(ev, CrashRetracted)) == 1 and log.state.phase == "loading_shards"
    sglang_to(log, "ready")


def test_an_unconfirmed_crash_waits_longer_for_quiet_than_a_confirmed_one():
    """A survived traceback's fallback may print its first line seconds later (the model
    built before its first shard): an unconfirmed crash settles after UNCONFIRMED_QUIET of
    quiet; one the engine announced, after the pack's window."""
    from logwatch.machine.startup import UNCONFIRMED_QUIET
    log = Log()
    sglang_to(log, "loading_shards")
    t = log.now
    log.feed(*_fallback_traceback(), step=0.0, now=t)
    assert of(log.tick(t + UNCONFIRMED_QUIET - 0.5), CrashSettled) == []
    ev = log.feed(shard(3, 4), now=t + UNCONFIRMED_QUIET - 0.4)
    assert len(of(ev, CrashRetracted)) == 1
    log.feed(sg("10:00:20", SG_EXC, "TP1"), *TB_FRAMES, OOM_LINE, step=0.0, now=t + 20)
    assert log.state.crash.confirmed
    settled = of(log.tick(t + 20 + log.pack.crash_settle), CrashSettled)
    assert [c.crash.reason for c in settled] == ["cuda_oom"]


def test_confirmed_crash_is_not_retracted_by_a_late_rank_marker():
    log = Log()
    sglang_to(log, "loading_shards")
    log.feed(sg("10:00:20", SG_EXC, "TP1"), *TB_FRAMES, OOM_LINE)
    ev = log.feed(sg("10:00:40", SG_LOAD_END, "TP0"))   # a healthy rank finishes loading
    assert of(ev, CrashRetracted) == []
    assert log.state.phase == "crashed"
    assert log.state.crash.reason == "cuda_oom"


def test_bare_exception_after_ready_is_not_a_crash():
    log = Log()
    sglang_to(log, "ready")
    ev = log.feed("Traceback (most recent call last):",
                  '  File "/sglang/srt/entrypoints/http_server.py", line 10, in generate',
                  "ValueError: x",
                  sg("10:05:00", "ERROR:    Exception in ASGI application", None))
    assert of(ev, Crashed) == []
    assert log.state.phase == "ready"
    assert log.state.crash is None


# -- stop ---------------------------------------------------------------------------------------

def test_vllm_shutdown_is_stopped():
    log = Log("vllm")
    log.feed(*VLLM_STARTUP, VLLM_STARTUP_COMPLETE)
    line = vl("APIServer", "12:00:00", "launcher.py:100", "[shutdown] API server: shutdown triggered")
    ev = log.feed(line)
    assert [e.line for e in of(ev, Stopped)] == [line]
    assert log.state.phase == "stopped"
    assert log.state.crash is None
    ev = log.feed("(APIServer pid=1) INFO:     Shutting down",
                  "(APIServer pid=1) INFO:     Finished server process [1]")
    assert ev == [] and log.state.phase == "stopped"


def test_sglang_sigterm_is_stopped():
    log = Log()
    sglang_to(log, "ready")
    ev = log.feed(sg("11:00:00", "SIGTERM received. signum=None frame=None. Draining requests and "
                     "shutting down...", None))
    assert len(of(ev, Stopped)) == 1
    assert log.state.phase == "stopped"
    # the tree is then killed: nothing after this is a crash
    ev = log.feed(sg("11:00:01", SG_SIGQUIT, None))
    assert of(ev, Crashed) == [] and log.state.phase == "stopped"


def test_uvicorn_shutdown_after_crash_keeps_crashed():
    log = Log()
    _oom_during_capture(log)
    ev = log.feed(sg("10:01:00", "INFO:     Shutting down", None),
                  sg("10:01:00", "INFO:     Waiting for application shutdown.", None),
                  sg("10:01:00", "INFO:     Application shutdown complete.", None),
                  sg("10:01:00", "INFO:     Finished server process [271469]", None))
    assert of(ev, Stopped) == []
    assert log.state.phase == "crashed"
    assert log.state.crash.reason == "cuda_oom"


def test_uvicorn_shutdown_after_announcement_only_crash_keeps_crashed():
    log = Log()
    sglang_to(log, "allocating")
    log.feed(sg("10:00:45", SG_SIGQUIT, None))
    log.feed(sg("10:01:00", "INFO:     Shutting down", None))
    assert log.state.phase == "crashed"
    assert log.state.crash.reason == "child_process_died"


# -- progress and ETA ---------------------------------------------------------------------------

def test_shard_bar_progress_rate_and_eta():
    log = Log()
    sglang_to(log, "launching")
    log.feed(sg("10:00:10", SG_LOAD_BEGIN))
    t0 = 2000.0
    ev = log.feed_chunk(("\r" + shard(40, 83, "3.13it/s") + "\r").encode(), now=t0)
    prog = of(ev, Progress)
    assert len(prog) == 1 and (prog[0].counter, prog[0].current, prog[0].total) == ("shards", 40, 83)
    p = log.state.progress["shards"]
    assert (p.current, p.total) == (40, 83)
    assert p.rate == pytest.approx(3.13)
    assert p.remaining_seconds(t0) == pytest.approx(43 / 3.13)
    # counts down while the next shard is due ...
    assert p.remaining_seconds(t0 + 0.2) == pytest.approx(43 / 3.13 - 0.2)
    assert p.remaining_seconds(t0 + 0.2) < p.remaining_seconds(t0)
    # ... and once it is late (a stall), grows instead of reaching 0
    assert p.remaining_seconds(t0 + 5) > 42 / 3.13
    assert p.remaining_seconds(t0 + 1000) > p.remaining_seconds(t0 + 5) > 0
    # the startup ETA: these shards, then the pack's typical phases still ahead
    ahead = sum(log.pipe.pack.typical_seconds.get(ph, 0.0)
                for ph in ("allocating", "autotune", "cuda_graph"))
    assert startup_eta(log.pipe.pack, log.state, t0) == pytest.approx(43 / 3.13 + ahead)
    # a second frame: the rate is smoothed between the old and the new sample
    log.feed_chunk((shard(41, 83, "4.00it/s") + "\r").encode(), now=t0 + 0.3)
    p = log.state.progress["shards"]
    assert p.current == 41
    assert 3.13 < p.rate < 4.0
    assert log.state.phase == "loading_shards"


def test_shard_bar_seconds_per_item_rate():
    log = Log()
    sglang_to(log, "launching")
    log.feed(sg("10:00:10", SG_LOAD_BEGIN))
    log.feed("Loading safetensors checkpoint shards:  98% Completed | 159/163 [31:48<00:40, 10.19s/it]")
    p = log.state.progress["shards"]
    assert (p.current, p.total) == (159, 163)
    assert p.rate == pytest.approx(0.098, abs=1e-3)
    assert p.remaining_seconds(p.updated_at) == pytest.approx(4 * 10.19, rel=1e-3)


def test_parse_rate():
    assert parse_rate("3.13it/s") == pytest.approx(3.13)
    assert parse_rate(" 10.19s/it") == pytest.approx(1 / 10.19)
    assert parse_rate("?it/s") is None
    assert parse_rate(None) is None


def test_first_shard_frame_has_no_rate_and_no_eta():
    log = Log()
    sglang_to(log, "launching")
    log.feed(sg("10:00:10", SG_LOAD_BEGIN))
    log.feed("Loading safetensors checkpoint shards:   0% Completed | 0/8 [00:00<?, ?it/s]", now=3000.0)
    p = log.state.progress["shards"]
    assert (p.current, p.total, p.rate) == (0, 8, None)
    assert p.remaining_seconds(3000.0) is None
    assert startup_eta(log.pipe.pack, log.state, 3000.0, {"loading_shards": 0.0}) == 0.0
    log.feed(shard(2, 8, "2.00it/s"), now=3001.0)
    p = log.state.progress["shards"]
    assert p.rate == pytest.approx(2.0)
    assert startup_eta(log.pipe.pack, log.state, 3001.0, {"loading_shards": 0.0}) == \
        pytest.approx(3.0)


def test_pure_progress_rate_derived_from_log_time():
    pack = load_pack("sglang")
    m = StartupMachine(pack)
    st = State()
    m.step(st, Observation(pack.rule("server_args"), {}, SG_ARGS, 1, 0.0), now=50.0)
    bar = pack.rule("capture_bar")   # no `rate` group: the rate comes from the clock
    m.step(st, Observation(bar, {"current": "0", "total": "52"}, "f0", 2, 100.0), now=50.0)
    ev = m.step(st, Observation(bar, {"current": "10", "total": "52"}, "f1", 3, 105.0), now=50.0)
    p = st.progress["cuda_graph"]
    assert p.rate == pytest.approx(2.0)          # by the log's clock, not the (frozen) wall clock
    assert of(ev, Progress)[0].rate == pytest.approx(2.0)
    assert p.remaining_seconds() == pytest.approx(21.0)


def test_shard_bar_after_ready_does_not_change_progress():
    log = Log()
    sglang_to(log, "ready")
    before = log.state.progress["shards"]
    ev = log.feed(shard(1, 2, "1.00it/s"))
    assert of(ev, Progress) == [] and of(ev, PhaseChanged) == []
    p = log.state.progress["shards"]
    assert (p.current, p.total, p.rate) == (before.current, before.total, before.rate)
    assert log.state.phase == "ready"
    assert startup_eta(log.pipe.pack, log.state, log.now) == 0.0


def test_download_bar_after_load_begin_reenters_downloading():
    log = Log()
    log.feed(SG_ARGS, sg("10:00:05", SG_DIST_BEGIN), sg("10:00:10", SG_LOAD_BEGIN))
    assert log.state.phase == "loading_shards"
    # not yet announced: a download may come first inside weight loading (provisional)
    ev = log.feed("model-00001-of-00004.safetensors:  45%|████▌     | 2.24G/4.98G [00:20<00:24, 112MB/s]")
    # the startup went into downloading at "Load weight begin": one change, no flip
    assert phase_changes(ev) == [("launching", "downloading")]
    assert log.state.phase == "downloading"
    log.feed("model-00002-of-00004.safetensors: 100%|██████████| 4.98G/4.98G [00:41<00:00, 120MB/s]")
    ev = log.feed(shard(0, 4, "?it/s"))
    assert phase_changes(ev) == [("downloading", "loading_shards")]
    assert log.state.phases_seen == ["launching", "downloading", "loading_shards"]
    # the bars carry no timestamp: placed by their elapsed time (file 2 began where the
    # clock stood after file 1's 20 s), so downloading is not 0 s
    assert log.state.durations()["downloading"] >= 41.0
    # once shards are loading, a straggling download bar does not move the phase back
    ev = log.feed(shard(1, 4), "model-00004-of-00004.safetensors:  99%|█████████▉| 4.9G/4.98G "
                  "[00:41<00:00, 120MB/s]")
    assert of(ev, PhaseChanged) == []
    assert log.state.phase == "loading_shards"


# -- stall --------------------------------------------------------------------------------------

def test_stall_fires_once_after_silence():
    log = Log(stall_after=5.0)
    log.feed(SG_ARGS, now=100.0)
    assert log.tick(104.9) == []
    ev = log.tick(105.0)
    assert len(ev) == 1 and isinstance(ev[0], Stalled)
    assert ev[0].phase == "launching" and ev[0].silent_for == pytest.approx(5.0)
    assert log.state.stalled
    assert log.tick(106.0) == [] and log.tick(500.0) == []
    # new bytes (any line, even one no rule matches) re-arm the detector
    log.feed("some unrelated chatter from a library", now=501.0)
    assert not log.state.stalled
    assert log.tick(505.0) == []
    ev = log.tick(506.5)
    assert len(ev) == 1 and ev[0].silent_for == pytest.approx(5.5)


def test_partial_line_bytes_count_as_activity():
    log = Log(stall_after=5.0)
    log.feed(SG_ARGS, now=100.0)
    assert len(log.tick(106.0)) == 1
    log.feed_chunk(b"Loading safetensors checkpoint", now=107.0)   # no separator yet
    assert log.tick(111.0) == []
    assert len(log.tick(112.0)) == 1


def test_no_stall_when_ready_or_crashed():
    ready = Log(stall_after=5.0)
    sglang_to(ready, "ready")
    assert ready.tick(ready.now + 10_000) == []
    crashed = Log(stall_after=5.0)
    sglang_to(crashed, "allocating")
    crashed.feed(sg("10:00:45", SG_SIGQUIT, None))
    assert crashed.state.phase == "crashed"
    settled = crashed.tick(crashed.now + 10_000)      # the crash settles: no stall, ever
    assert [type(e).__name__ for e in settled] == ["CrashSettled"]
    assert crashed.tick(crashed.now + 20_000) == []
    stopped = Log(stall_after=5.0)
    sglang_to(stopped, "ready")
    stopped.feed(sg("11:00:00", "SIGTERM received. signum=None frame=None. Draining requests and "
                    "shutting down...", None))
    assert stopped.tick(stopped.now + 10_000) == []


def test_no_stall_before_any_line():
    log = Log(stall_after=5.0)
    assert log.tick(10_000.0) == []


def test_stall_budget_from_pack_per_phase():
    log = Log()   # no override: the pack's per-phase budgets (base.yaml stall_after)
    log.feed(SG_ARGS, now=0.0)
    assert log.tick(599.0) == []
    ev = log.tick(600.0)   # launching: 10m
    assert len(ev) == 1 and ev[0].phase == "launching"


# -- crash settling: the machine's, once per startup ------------------------------------------

def test_a_crash_settles_once_after_the_packs_window_and_is_final() -> None:
    log = Log()
    sglang_to(log, "cuda_graph")
    log.feed(sg("10:00:45", SG_EXC), *TB_FRAMES)
    assert log.state.phase == "crashed" and not log.state.crash_settled
    changed = log.state.crash_changed_at
    assert changed is not None
    settle = log.pack.crash_settle
    assert of(log.tick(changed + settle - 0.1), CrashSettled) == []   # evidence may still come
    log.feed(OOM_LINE, now=changed + settle - 0.05)                   # ... and it does
    assert log.state.crash.reason == "cuda_oom"
    changed = log.state.crash_changed_at
    assert of(log.tick(changed + settle - 0.1), CrashSettled) == [], "the window restarts"
    settled = of(log.tick(changed + settle), CrashSettled)
    assert len(settled) == 1 and settled[0].crash.reason == "cuda_oom"
    assert settled[0].startup == log.state.startup_id is not None
    assert log.tick(changed + 10 * settle) == []                      # once
    log.feed(sg("10:01:00", "RuntimeError: NCCL error: unhandled system error"))
    assert log.state.crash.reason == "cuda_oom", "a settled crash is not refined"
    assert log.pipe.counters.crashes["cuda_oom"] == 1


def test_a_traceback_still_being_written_keeps_the_crash_open() -> None:
    """The evidence unchanged for the window is not enough while the log still writes the
    traceback (ranks' tracebacks interleaved, a slow writer): its last line may name the
    cause.  Before, a traceback written in 0.9 s steps settled on the generic reason 2 s
    after its first line, and the OOM that ended it came too late."""
    log = Log()
    sglang_to(log, "cuda_graph")
    t = log.now
    log.feed(sg("10:00:45", SG_EXC), now=t)
    first = log.state.crash.reason
    settle = log.pack.crash_settle
    assert 0.9 * len(TB_FRAMES) > settle
    for i, frame in enumerate(TB_FRAMES, 1):                # no new evidence, 0.9 s apart
        log.feed(frame, now=t + 0.9 * i)
        assert of(log.tick(t + 0.9 * i + 0.85), CrashSettled) == [], i
    end = t + 0.9 * (len(TB_FRAMES) + 1)
    log.feed(OOM_LINE, now=end)
    assert of(log.tick(end + settle - 0.1), CrashSettled) == []
    settled = of(log.tick(end + settle), CrashSettled)
    assert [c.crash.reason for c in settled] == ["cuda_oom"] and first != "cuda_oom"


def test_a_crash_in_a_log_that_never_goes_quiet_is_final_after_settle_longest() -> None:
    """Other ranks keep printing after the crash: final at the latest SETTLE_LONGEST after
    its first line was read, not never."""
    from logwatch.machine.startup import SETTLE_LONGEST
    log = Log()
    sglang_to(log, "cuda_graph")
    t = log.now
    log.feed(OOM_LINE, now=t)
    n = 0
    while not of(log.tick(t + 0.5 * n + 0.4), CrashSettled):
        n += 1
        log.feed(TB_FRAMES[n % len(TB_FRAMES)], now=t + 0.5 * n)
        assert n < 200
    assert SETTLE_LONGEST <= 0.5 * n + 0.4 < SETTLE_LONGEST + 1


def test_a_last_line_that_never_gets_its_newline_is_read_once_the_log_is_quiet() -> None:
    """A crash record with no newline (TensorRT-LLM's, glued to a bar frame; a server
    killed mid-line): read as a line after PARTIAL_LINE_QUIET of silence.  Before, the
    daemon and `watch` never read it (only a crash already seen flushed it): no crash,
    where `replay` said cuda_oom."""
    from logwatch.pipeline import PARTIAL_LINE_QUIET
    log = Log()
    sglang_to(log, "cuda_graph")
    t = log.now
    log.feed_chunk(b"Capturing batches (bs=8):  40%|####      | 2/5 [00:01<00:02]\r" +
                   OOM_LINE.encode(), now=t)
    assert log.state.phase == "cuda_graph"
    assert log.tick(t + PARTIAL_LINE_QUIET - 0.1) == [] and log.state.phase == "cuda_graph"
    log.tick(t + PARTIAL_LINE_QUIET)
    assert log.state.phase == "crashed" and log.state.crash.reason == "cuda_oom"
    # read once: its bytes stay held (its newline may come), later ticks do not read it again
    assert not of(log.tick(t + PARTIAL_LINE_QUIET + 1), Crashed)
    assert log.pipe.counters.rule_matches["cuda_oom"] == 1


def test_a_last_line_read_after_a_quiet_is_counted_once() -> None:
    """The line read after PARTIAL_LINE_QUIET is a line of the count (`logwatch_lines_total`,
    `/api/status` `lines`), as `replay` counts it; if the writer goes on and ends it, its
    newline is not another.  Before, the daemon showed N-1 lines for a log whose last line
    had no newline (trtllm-003, -005, -006, -009, -016), where replay said N."""
    from logwatch.pipeline import LogPipeline, PARTIAL_LINE_QUIET
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(b"one\ntwo\nthr", 0.0)
    assert pipe.counters.lines == 2
    pipe.tick(PARTIAL_LINE_QUIET)
    assert pipe.counters.lines == 3
    pipe.tick(2 * PARTIAL_LINE_QUIET)
    pipe.feed(b"ee, the same line\nfour\n", 20.0)
    assert pipe.counters.lines == 4
    pipe.feed(b"fi", 21.0)
    pipe.tick(21.0 + PARTIAL_LINE_QUIET)
    pipe.finish(40.0)
    assert pipe.counters.lines == 5 == len(b"one\ntwo\nthree\nfour\nfi".split(b"\n"))


def test_a_new_startup_and_the_end_of_input_settle_a_crash_at_once() -> None:
    log = Log()
    sglang_to(log, "cuda_graph")
    log.feed(OOM_LINE)
    first = log.state.startup_id
    evs = log.feed(SG_ARGS.replace("10:00:00", "10:05:00"))          # a restart right after
    settled = of(evs, CrashSettled)
    assert len(settled) == 1 and settled[0].startup == first
    assert [type(e).__name__ for e in evs][:2] == ["CrashSettled", "StartupBegan"]
    assert log.state.startup_id != first
    log.feed(sg("10:05:10", SG_LOAD_BEGIN), OOM_LINE)
    done = of(log.pipe.finish(log.now), CrashSettled)
    assert len(done) == 1 and done[0].startup == log.state.startup_id
    assert log.pipe.counters.crashes["cuda_oom"] == 2 and log.pipe.counters.startups == 2


def test_every_long_phase_has_its_bar_progress_and_eta():
    """Files fetched while downloading, the autotuner's bars: progress with a rate, and the
    ETA of the phase comes from its own bar."""
    log = Log()
    sglang_to(log, "launching")
    log.feed(sg("10:00:10", SG_LOAD_BEGIN))
    log.feed_chunk(b"\rFetching 83 files:  45%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88"
                   b"      | 37/83 [01:10<01:27,  1.90s/it]\r", now=3000.0)
    assert log.state.phase == "downloading"
    p = log.state.progress["download"]
    assert (p.current, p.total) == (37, 83) and p.rate == pytest.approx(1 / 1.90)
    eta = startup_eta(log.pipe.pack, log.state, 3000.0, {"downloading": 1.0})
    assert eta == pytest.approx(46 * 1.90, rel=0.01)     # the bar, not the 1 s of history
    log.feed("[AutoTuner]: Tuning fp4_gemm:  50%|█████     | 2/4 [00:00<00:00, 15.50profile/s]",
             now=3100.0)
    a = log.state.progress["autotune"]
    assert log.state.phase == "autotune" and (a.current, a.total) == (2, 4)
    assert a.rate == pytest.approx(15.5)


# -- ready by the endpoint, where the log never says so --------------------------------------

QUIET_SGLANG = (   # SGLang 0.5.23 at `--log-level warning`: only tqdm's bars are left
    "Loading safetensors checkpoint shards: 100% Completed | 17/17 [00:30<00:00,  0.56it/s]\n"
    "Capturing batches (bs=1 avail_mem=36.10 GB): 100%|##########| 52/52 [00:11<00:00,  4.60it/s]\n")


def test_a_quiet_log_whose_endpoint_answers_is_ready():
    """`--log-level warning` leaves no milestone and no ready line: read from the log alone
    the server stayed in cuda_graph for good and was paged `stalled` while serving.  Its
    endpoint answering (every path the probe asks) says ready, its lines going on or not;
    not while a bar is still under way (another process answers on the port); a crash or a
    log's own ready line is never overruled."""
    loading = LogPipeline(load_pack("sglang"))
    loading.feed(b"Loading safetensors checkpoint shards:  18% Completed | 3/17 "
                 b"[00:05<00:25,  0.56it/s]\n", 1000.0)
    assert loading.endpoint_answers(1100.0, "200 /health") == []
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(QUIET_SGLANG.encode(), 1000.0)
    assert pipe.state.phase == "cuda_graph"
    events = pipe.endpoint_answers(1000.5, "200 /health, 200 /v1/models")
    ready = [e for e in events if isinstance(e, Ready)]
    assert pipe.state.phase == "ready" and len(ready) == 1, events
    assert ready[0].line == "(no ready line in the log; the endpoint answers: 200 /health, " \
        "200 /v1/models)"
    assert pipe.endpoint_answers(1100.0, "200 /health") == []                    # once
    # a server serving before logwatch came, silent: ready from waiting
    idle = LogPipeline(load_pack("sglang"))
    assert [type(e).__name__ for e in idle.endpoint_answers(1000.0, "200 /health")] == \
        ["PhaseChanged", "Ready"]
    # a crash is not overruled by a port that answers (another process may hold it)
    crashed = LogPipeline(load_pack("sglang"))
    crashed.feed(b"[2026-12-01 10:00:00 TP0] Scheduler hit an exception: Traceback\n"
                 b"torch.OutOfMemoryError: CUDA out of memory.\n", 1000.0)
    assert crashed.state.phase == "crashed"
    assert crashed.endpoint_answers(1100.0, "200 /health") == []


def test_a_log_at_info_waits_for_its_own_ready_line():
    """A startup whose launch line was seen logs at INFO: its ready line will come, and an
    endpoint that answers first (an older SGLang's /health during a long warmup) does not
    say ready before it."""
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(b"[2026-12-01 10:00:00] server_args=ServerArgs(model_path='m', port=30000)\n"
              + QUIET_SGLANG.encode(), 1000.0)
    assert pipe.state.phase == "cuda_graph" and pipe.state.restart_rules
    assert pipe.endpoint_answers(1100.0, "200 /health, 200 /v1/models") == []
    pipe.feed(b"[2026-12-01 10:02:00] The server is fired up and ready to roll!\n", 1101.0)
    assert pipe.state.phase == "ready" and "fired up" in (pipe.state.ready_line or "")


def test_a_ready_by_the_endpoint_from_waiting_is_said_without_a_time():
    """A server serving before logwatch came, its log silent: ready from `waiting` has no
    launch to time; the alert says "ready (...)", not "ready in ?"."""
    from logwatch.sinks.alerts.policy import AlertPolicy
    from logwatch.view import pipeline_view
    pipe = LogPipeline(load_pack("sglang"))
    events = pipe.endpoint_answers(1000.0, "200 /health")
    view = pipeline_view("quiet", pipe, now=1000.0)
    alert = next(d for d in AlertPolicy().observe(view, events)
                 if getattr(d, "kind", "") == "ready")
    assert alert.summary == "ready (no ready line in the log; the endpoint answers)", alert


# -- a serving server that dies without a word, relaunched into the same log (adv26 H2) -------

def test_a_serving_server_relaunched_without_a_word_is_no_crash() -> None:
    """No stop, no crash line, then a relaunch: `kill -9` by the operator or a closed
    terminal read the same as a SIGKILL by the kernel; the relaunch is a `Restarted`, not a
    crash page (a false page on an ordinary restart, and on a second server or a PD pair
    started into one log: review of 6da74a0)."""
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("10:02:10", SG_DECODE), sg("10:03:10", SG_DECODE))
    events = log.feed(SG_ARGS.replace("10:00:00", "10:03:20"))
    assert of(events, Crashed) == [] and len(of(events, Restarted)) == 1
    assert sum(log.pipe.counters.crashes.values()) == 0 and log.state.phase == "launching"


@pytest.mark.parametrize("ending", [
    [sg("10:02:30", "SIGTERM received. signum=15 frame=None. Draining requests and shutting down...", None)],
    [],
], ids=["stopped", "crashed-before"])
def test_a_relaunch_after_a_stop_or_a_crash_adds_no_crash(ending: list[str]) -> None:
    """A stop (SGLang's SIGTERM line) or a crash already seen: the relaunch adds none."""
    log = Log()
    sglang_to(log, "ready")
    if not ending:
        ending = [sg("10:02:20", SG_EXC), OOM_LINE]
    log.feed(*ending)
    log.tick(log.now + 10)
    events = log.feed(SG_ARGS.replace("10:00:00", "10:03:20"))
    assert of(events, Crashed) == []
    assert sum(log.pipe.counters.crashes.values()) == (0 if len(ending) == 1 else 1)


HEALTH_FAILED = ("Health check failed. Server couldn't get a response from detokenizer for last "
                 "20 seconds. tic start time: 10:02:10. last_heartbeat time: 10:01:58")
SIGTERM_DRAIN = ("SIGTERM received. signum=15 frame=None. Draining requests and shutting "
                 "down...")


@pytest.mark.parametrize("last,reason", [
    # 0.5.23 tokenizer_manager.py:3520: SIGTERM while unhealthy (a liveness kill)
    ("Signal SIGTERM received while health check failed. Force exiting.", "hang"),
    # tokenizer_manager.py:3529: the operator's SGL_FORCE_SHUTDOWN: a stop
    ("Signal SIGTERM received while force shutdown flag set. Force exiting.", None),
    # 0.4.10.post2 tokenizer_manager.py:1471, :1480: its own words (before: no rule, a stop)
    ("Signal SIGTERM received while health check failed. Exiting... remaining number of "
     "requests: 3", "hang"),
    ("Signal SIGTERM received while force shutdown flag set. Force exiting... remaining "
     "number of requests: 3", None),
], ids=["liveness-kill", "force-shutdown-flag", "liveness-kill-0.4.10", "force-shutdown-0.4.10"])
def test_a_liveness_kill_of_a_hung_sglang_server_is_a_hang(last: str, reason: str | None) -> None:
    """Kubernetes kills a hung server: `Health check failed` (http_server.py:793), the
    signal handler's `SIGTERM received ... Draining` (tokenizer_manager.py:4068: a stop),
    then `Signal SIGTERM received while health check failed. Force exiting.`: a crash, `hang`,
    during ready.  Before (adv26 sgl_k8s_hangkill): a clean stop, no page."""
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("10:02:30", HEALTH_FAILED, None), sg("10:03:11", SIGTERM_DRAIN, None),
             sg("10:03:15", last, None))
    settled = of(log.events + log.tick(log.now + 10), CrashSettled)
    crash = log.state.crash
    assert (crash.reason if crash else None) == reason, crash
    assert log.state.phase == ("crashed" if reason else "stopped")
    if crash is not None:
        assert crash.during == "ready" and len(settled) == 1


def _vllm_serving() -> Log:
    log = Log("vllm")
    log.feed(*VLLM_STARTUP, VLLM_STARTUP_COMPLETE)
    assert log.state.phase == "ready"
    return log


ENGINE_DEAD = [   # the API server's consequences (v1/engine/core_client.py:839, async_llm.py)
    "(APIServer pid=1) ERROR 10-03 10:06:00 [async_llm.py:957] AsyncLLM output_handler failed.",
    "(APIServer pid=1) ERROR 10-03 10:06:00 [async_llm.py:957] Traceback (most recent call "
    "last):",
    "(APIServer pid=1) ERROR 10-03 10:06:00 [async_llm.py:957]     raise EngineDeadError()",
    "(APIServer pid=1) ERROR 10-03 10:06:00 [async_llm.py:957] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
    "cause.",
]
EXECUTOR_FAILED = [   # the engine core's consequence (v1/engine/core.py:1985)
    "(EngineCore_DP0 pid=2) ERROR 10-03 10:06:00 [core.py:1759] EngineCore encountered a fatal "
    "error.",
    "(EngineCore_DP0 pid=2) ERROR 10-03 10:06:00 [core.py:1759] Traceback (most recent call "
    "last):",
    "(EngineCore_DP0 pid=2) ERROR 10-03 10:06:00 [core.py:1759] RuntimeError: Executor failed.",
]


@pytest.mark.parametrize("death,reason", [
    # v1/executor/multiproc_executor.py:405: a worker's segfault
    (["Fatal Python error: Segmentation fault",
      "(EngineCore_DP0 pid=2) ERROR 10-03 10:06:00 [multiproc_executor.py:405] Worker proc "
      "VllmWorker-0 died unexpectedly (exit code: -11), shutting down executor.",
      *EXECUTOR_FAILED], "child_process_died"),
    # the same, SIGKILLed: the kernel's OOM killer (as before), its line the root cause now
    (["(EngineCore_DP0 pid=2) ERROR 10-03 10:06:00 [multiproc_executor.py:405] Worker proc "
      "VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.",
      *EXECUTOR_FAILED], "host_oom_killed"),
    # v1/engine/core_client.py:869: the engine core SIGKILLed
    (["(APIServer pid=1) WARNING 10-03 10:06:00 [core_client.py:869] [shutdown] MPClient: "
      "engine core exited unexpectedly; starting cleanup"], "child_process_died"),
], ids=["worker-segv", "worker-sigkill", "enginecore-killed"])
def test_a_vllm_process_death_is_the_cause_not_the_tracebacks_after_it(
        death: list[str], reason: str) -> None:
    """A death said first, then the tracebacks it causes (`RuntimeError: Executor failed.`,
    `EngineDeadError`): the death's reason and its line are the crash's.  Before (adv26
    vllm_segv, vllm_enginekill): python_exception, root cause `RuntimeError: Executor
    failed.`; for -9 the reason was right but the root cause that consequence."""
    log = _vllm_serving()
    log.feed(*death, *ENGINE_DEAD)
    log.tick(log.now + 10)
    crash = log.state.crash
    assert crash is not None and crash.reason == reason, crash
    assert "died unexpectedly" in crash.line or "exited unexpectedly" in crash.line, crash.line


def test_an_exception_before_a_death_is_still_the_cause() -> None:
    """SGLang: the scheduler's traceback, then its parent's `child process died` line: the
    exception (here a bare RuntimeError: python_exception) is the cause, as before."""
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("10:02:00", SG_EXC), "RuntimeError: something broke in the scheduler",
             sg("10:02:01", "Subprocess scheduler_0 (pid=2345) crashed with exit code 1. "
                "Triggering SIGQUIT for cleanup...", None))
    log.tick(log.now + 10)
    crash = log.state.crash
    assert crash is not None and crash.reason == "python_exception", crash
    assert crash.line.endswith("something broke in the scheduler"), crash.line


def test_sglang_data_parallel_ranks_stats_are_summed() -> None:
    """SGLang logs one decode line per DP rank (srt/observability/metrics_collector.py:1361,
    tagged `DP1 TP1 EP1`): the server's figures are their sum (token usage their mean).
    Before (adv26 sgl_dp_stats): the last line's, 1200 tok/s for 2200."""
    log = Log()
    sglang_to(log, "ready")
    dec = ("Decode batch, #running-req: {r}, #token: 50000, token usage: {u}, cuda graph: "
           "True, gen throughput (token/s): {g}, #queue-req: {q}")
    for _ in range(2):
        log.feed(sg("10:02:00", dec.format(r=40, u=0.20, g="1000.00", q=2), "DP0 TP0 EP0"),
                 sg("10:02:00", dec.format(r=60, u=0.30, g="1200.00", q=5), "DP1 TP1 EP1"))
    st = log.state.stats
    assert (st["gen_throughput"], st["running_requests"], st["queued_requests"]) == \
        (2200.0, 100.0, 7.0)
    assert st["token_usage"] == pytest.approx(0.25)
    events = log.feed(sg("10:02:10", dec.format(r=10, u=0.1, g="500.00", q=0), "DP0 TP0 EP0"))
    assert of(events, StatsUpdated)[-1].values["gen_throughput"] == 1700.0


def test_vllm_engines_stats_are_summed() -> None:
    """vLLM with data parallel: one stats line per engine (`Engine 001: `, v1/metrics/
    loggers.py:178).  Before (adv26 vllm_dp_stats): the last engine's."""
    log = _vllm_serving()
    line = ("(APIServer pid=1) INFO 10-03 10:05:00 [loggers.py:336] Engine {e:03d}: Avg prompt "
            "throughput: 100.0 tokens/s, Avg generation throughput: {g} tokens/s, Running: {r} "
            "reqs, Waiting: {q} reqs, GPU KV cache usage: 9.1%, Prefix cache hit rate: 42.0%")
    log.feed(line.format(e=0, g="1000.0", r=40, q=2), line.format(e=1, g="1200.0", r=60, q=5))
    st = log.state.stats
    assert (st["gen_throughput"], st["running_requests"], st["queued_requests"],
            st["prompt_throughput"]) == (2200.0, 100.0, 7.0, 200.0)
    assert "engine" not in st


def test_serving_figures_keep_a_bounded_number_of_sources() -> None:
    """A hostile log naming a new DP rank on every line: the figures of at most
    MAX_STAT_SOURCES are kept (review of a749a72: a dict entry per distinct tag, unbounded)."""
    from logwatch.machine.startup import MAX_STAT_SOURCES, merge_stats
    by: dict = {}
    seen: dict = {}
    for k in range(MAX_STAT_SOURCES * 4):
        out = merge_stats(by, seen, f"DP{k}", {"gen_throughput": 1.0}, 100.0)
    assert len(by) == len(seen) == MAX_STAT_SOURCES and out["gen_throughput"] == MAX_STAT_SOURCES


_DEC = ("Decode batch, #running-req: {r}, #token: 50000, token usage: {u}, cuda graph: "
        "True, gen throughput (token/s): {g}, #queue-req: {q}")


def test_a_data_parallel_rank_gone_quiet_leaves_the_sum() -> None:
    """SGLang prints a decode line only while a DP rank has requests: a rank that went idle
    is out of the server's figures once its latest line is STATS_STALE old.  Before (adv28
    M1, cases/sgl_dp_stale): DP1's last 1200 tok/s stayed in the sum for good (1250 tok/s,
    61 running, for one rank at 50 tok/s with 1 running)."""
    from logwatch.machine.startup import STATS_STALE
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("10:02:00", _DEC.format(r=40, u=0.20, g="1000.00", q=2), "DP0 TP0 EP0"),
             sg("10:02:00", _DEC.format(r=60, u=0.30, g="1200.00", q=5), "DP1 TP1 EP1"))
    assert log.state.stats["gen_throughput"] == 2200.0
    log.feed(sg("10:02:20", _DEC.format(r=1, u=0.1, g="50.00", q=0), "DP0 TP0 EP0"))
    assert log.state.stats["gen_throughput"] == 1250.0     # DP1's 20 s old: current
    log.now += STATS_STALE
    events = log.feed(sg("10:03:30", _DEC.format(r=1, u=0.1, g="50.00", q=0), "DP0 TP0 EP0"))
    assert of(events, StatsUpdated)[-1].values == {
        "running_requests": 1.0, "token_usage": 0.1, "gen_throughput": 50.0,
        "queued_requests": 0.0, "cuda_graph": 1.0}
    assert current_stats(log.state, log.now)["running_requests"] == 1.0


def test_an_idle_server_generates_nothing() -> None:
    """What /metrics, the page and `watch --serve` show of a server whose serving lines
    stopped (SGLang prints none while idle, nor while dead or hung): its figures while
    current; past STATS_STALE the rates read 0 and the counts are unknown (left out).
    Before (adv26 M5, cases/idle_attach): an SGLang server idle for 2 h exported its last
    287 tok/s, and one killed without a word its 2,874 tok/s and 31 running."""
    from logwatch.machine.startup import STATS_STALE
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("10:02:00", _DEC.format(r=31, u=0.09, g="2874.12", q=0)))
    at = log.now
    assert current_stats(log.state, at + STATS_STALE - 1) == log.state.stats
    assert current_stats(log.state, at + STATS_STALE - 1)["gen_throughput"] == 2874.12
    assert current_stats(log.state, at + STATS_STALE + 1) == {"gen_throughput": 0.0}
    log.feed(sg("10:04:00", _DEC.format(r=2, u=0.09, g="40.00", q=0)), now=at + 120)
    assert current_stats(log.state, log.now)["gen_throughput"] == 40.0   # serving again
    log.feed(sg("10:04:10", "Received sigquit from a child process. It usually means the "
                "child failed.", None))
    assert current_stats(log.state, log.now) == {}      # not serving: no current figures


def test_a_vllm_engine_that_said_it_went_idle_stays_idle() -> None:
    """vLLM prints one line of zeros as an engine goes idle, then nothing until a request
    comes (v1/metrics/loggers.py: the idle engine logs at DEBUG): past STATS_STALE its
    `Running: 0 reqs` is still true (not unknown, as an SGLang rank's last decode line)."""
    from logwatch.machine.startup import STATS_STALE
    log = _vllm_serving()
    line = ("(APIServer pid=1) INFO 10-03 10:05:00 [loggers.py:336] Engine 000: Avg prompt "
            "throughput: {p} tokens/s, Avg generation throughput: {g} tokens/s, Running: {r} "
            "reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 42.0%")
    log.feed(line.format(p="10.0", g="900.0", r=8), line.format(p="0.0", g="0.0", r=0))
    later = current_stats(log.state, log.now + STATS_STALE + 1)
    assert later["running_requests"] == 0.0 and later["queued_requests"] == 0.0, later
    assert later["gen_throughput"] == 0.0 and later["prompt_throughput"] == 0.0, later


def test_serving_figures_and_their_age_survive_a_restart() -> None:
    """A daemon restarted under a serving DP server continues the per-rank figures and their
    age from its checkpoint (before, only the sum came back: the next line of one rank
    replaced the others' share of it)."""
    from logwatch.machine import state_from_json, state_to_json
    log = Log()
    sglang_to(log, "ready")
    log.feed(sg("10:02:00", _DEC.format(r=40, u=0.20, g="1000.00", q=2), "DP0 TP0 EP0"),
             sg("10:02:00", _DEC.format(r=60, u=0.30, g="1200.00", q=5), "DP1 TP1 EP1"))
    back = state_from_json(json.loads(json.dumps(state_to_json(log.state))))
    assert back.stats_by == log.state.stats_by and back.stats_seen == log.state.stats_seen
    assert current_stats(back, log.now)["gen_throughput"] == 2200.0
    hostile = state_to_json(log.state)
    hostile["stats_by"] = {"DP0": {"gen_throughput": "x", "ok": 1.0}, "DP1": 7}
    hostile["stats_seen"] = {"DP0": None, "DP1": True}
    back = state_from_json(hostile)
    assert back.stats_by == {"DP0": {"ok": 1.0}} and back.stats_seen == {}


def test_a_crash_read_back_from_a_checkpoint_takes_the_rest_of_its_lines():
    """A daemon killed -9 after a crash's `Received sigquit from a child process` line and
    before the crash settled: its checkpoint's crash read back goes on taking evidence
    (the exception after it).  Before, its `died` evidence came back as a dict and the next
    crash line raised AttributeError ('dict' object has no attribute 'line_number'): the
    restarted target failed, and failed again at each retry from the same checkpoint."""
    from logwatch.app.simulate import script
    from logwatch.machine import state_from_json, state_to_json
    from logwatch.machine.state import Evidence
    lines = [s.text for s in script(crash="oom", start=1_767_261_600.0)]
    lines = "".join(lines).splitlines(keepends=True)
    died = next(i for i, line in enumerate(lines) if "Received sigquit" in line)
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed("".join(lines[:died + 1]).encode(), 100.0)
    assert pipe.state.crash is not None and pipe.state.crash.died is not None
    again = LogPipeline(load_pack("sglang"))
    again.state = state_from_json(json.loads(json.dumps(state_to_json(pipe.state))))
    assert isinstance(again.state.crash.died, Evidence)
    again.feed(b"[2026-01-01 10:00:43 TP0] Scheduler hit an exception: Traceback (most "
               b"recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.\n", 101.0)
    assert again.state.crash.reason == "cuda_oom", again.state.crash
