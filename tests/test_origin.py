"""Log text is data (issue 29): a client's prompt logged by the engine is not the server's
own line.  Every crash, restart, ready, endpoint and stop marker of every pack (the samples of
those rules: real lines) is put inside a prompt, in the engines' real request-log formats
(SGLang 0.5.23 sglang/srt/utils/request_logger.py, vLLM 0.34
vllm/entrypoints/serve/utils/request_logger.py and the 0.6-0.10 entrypoints/logger.py, the
uvicorn access log), appended to a server that is ready: no event at all, the endpoint
unchanged.  The same markers printed by the server itself still fire (the envelope and the
anchors do not blind the rules)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from logwatch.machine import CrashSettled, Crashed, PhaseChanged, Restarted, StartupBegan
from logwatch.pipeline import LogPipeline
from logwatch.rules.matcher import WITHHELD, Matcher
from logwatch.rules.pack import READY, load_pack, shipped_pack_names

FIXTURES = Path(__file__).parent / "fixtures"
NOW = 1_767_261_600.0


def markers() -> list[str]:
    """The sample lines of every rule that crashes, restarts, says ready, names the address
    or stops, in every shipped pack (with their envelopes: what the server would print)."""
    out: list[str] = []
    for name in shipped_pack_names():
        for r in load_pack(name).rules:
            if r.crash or r.restart or r.phase == READY or r.endpoint or r.stop or r.args:
                out += [s.line for s in r.samples if s.matches]
    return list(dict.fromkeys(out))


def sglang_request_lines(prompt: str, stamp: str = "[2026-01-01 10:10:00] ") -> list[str]:
    """SGLang --log-requests, every format of 0.5.23 (text and json) and 0.3's."""
    r = repr(prompt)
    one = prompt.replace("\n", " ")
    obj = (f"GenerateReqInput(validation_time=None, received_time=1767261600.0, rid='a1b2', "
           f"text={r}, input_ids=None, sampling_params={{'max_new_tokens': 8, 'stop': [{r}]}})")
    return [
        f"{stamp}Receive: obj={obj}",
        f"{stamp}Receive OpenAI: obj={{'messages': [{{'role': 'user', 'content': {r}}}], "
        f"'model': 'default'}}",
        f"{stamp}Finish: obj={obj}, out={{'text': {r}, 'meta_info': {{'id': 'a1b2', "
        f"'finish_reason': {{'type': 'stop', 'matched': {r}}}, 'e2e_latency': 0.2}}}}",
        stamp + json.dumps({"timestamp": "2026-01-01T10:10:00.000001", "event": "request.received",
                            "rid": "a1b2", "obj": {"text": prompt, "rid": "a1b2"}},
                           ensure_ascii=False),
        stamp + json.dumps({"timestamp": "2026-01-01T10:10:00.2", "event": "request.finished",
                            "rid": "a1b2", "obj": {"text": prompt},
                            "out": {"text": prompt}}, ensure_ascii=False),
        f"{stamp}in=GenerateReqInput(text={r}, sampling_params={{}}, rid='a1b2'), "
        f"out={{'text': {r}}}",
        f"{stamp}INFO:     127.0.0.1:49732 - \"GET /{quote(prompt)} HTTP/1.1\" 404 "
        f"Not Found",
        # the tool-call parsers quoting what the model wrote (function_call/*_detector.py,
        # serving_chat.py, anthropic/serving.py; its own lines: see the raw multi-line case)
        f"{stamp}[InternLM Tool Call] Model attempted to call undefined function: {one}, "
        f"available_tools=['get_weather']",
        f"{stamp}[GigaChat35] undefined function call: {one}",
        f"{stamp}Tool call parsing error: {one}",
        f"{stamp}Unparsed required tool call output: {r}",
        f"{stamp}Failed to parse JSON part: {one}, JSON parse error: Expecting value",
        f"{stamp}Tool {r} emitted invalid JSON arguments: {r} — defaulting to empty input",
    ]


def vllm_request_lines(prompt: str) -> list[str]:
    """vLLM request logging, 0.34 and 0.6-0.10, with the client's own request id
    (X-Request-Id) holding the marker too."""
    r = repr(prompt)
    api = "(APIServer pid=1) INFO 01-01 10:10:00 [request_logger.py:67] "
    dbg = "(APIServer pid=1) DEBUG 01-01 10:10:00 [request_logger.py:57] "
    old = "INFO 01-01 10:10:00 logger.py:37] "
    params = (f"SamplingParams(n=1, temperature=0.7, stop=[{r}], max_tokens=16, "
              f"skip_special_tokens=True)")
    rid = "chatcmpl-" + prompt[:200].replace("\n", " ")   # a header holds no newline
    one = prompt.replace("\n", " ")
    return [
        f"{dbg}Request chatcmpl-1 details: prompt: {r}, prompt_token_ids: [1, 2, 3], "
        f"prompt_embeds shape: None.",
        f"{api}Received request chatcmpl-1: params: {params}, lora_request: None.",
        f"{api}Request {rid} JSON body: " + json.dumps(
            {"messages": [{"role": "user", "content": prompt}], "model": "m"}),
        f"(APIServer pid=1) INFO 01-01 10:10:01 [request_logger.py:120] Generated response "
        f"chatcmpl-1: output: {r}, finish_reason: stop",
        f"{old}Received request cmpl-1: prompt: {r}, params: {params}, prompt_token_ids: "
        f"[1, 2], prompt_embeds shape: None, lora_request: None, prompt_adapter_request: None.",
        f"(APIServer pid=1) INFO 01-01 10:10:00 [async_llm.py:300] Added request {rid}.",
        f"(APIServer pid=1) INFO 01-01 10:10:00 [async_llm.py:420] Aborted request {rid}.",
        f"(APIServer pid=1) INFO:     127.0.0.1:49732 - \"POST /v1/chat/completions?"
        f"q={quote(prompt)} HTTP/1.1\" 200 OK",
        # the model's response, the prompt, a client's tool-call ids, logged on request
        f"(APIServer pid=1) INFO 01-01 10:10:01 [log_response.py:121] response_body="
        f"{{streaming_complete: content={r}, chunks=12}}",
        f"(APIServer pid=1) DEBUG 01-01 10:10:00 [chat_message.py:180] Input prompt: {one}",
        f"(APIServer pid=1) WARNING 01-01 10:10:00 [mistral.py:94] Truncating tool call ID: "
        f"{one} to {one[-9:]}",
        f"(APIServer pid=1) WARNING 01-01 10:10:00 [harmony.py:287] Invalid JSON in browser "
        f"tool call, using error placeholder: {one}",
    ]


def hostile(engine: str) -> list[str]:
    lines: list[str] = []
    for m in markers():
        for prompt in (m, "ignore this\n" + m, m + "\nUvicorn running on http://10.9.9.9:1/x"):
            lines += sglang_request_lines(prompt) if engine == "sglang" else \
                vllm_request_lines(prompt)
    return lines


def ready_pipe(engine: str) -> tuple[LogPipeline, bytes]:
    """A pipeline that has read a real startup up to ready (a fixture's own lines)."""
    name = {"sglang": "sglang-003", "vllm": "vllm-021"}[engine]
    expect = json.loads((FIXTURES / f"{name}.expect.json").read_text())
    assert expect["final_phase"] == READY
    data = (FIXTURES / f"{name}.log").read_bytes().rstrip(b"\n") + b"\n"  # (cut pastes)
    pipe = LogPipeline(load_pack(engine))
    pipe.feed(data, NOW)
    pipe.tick(NOW + 10)
    assert pipe.state.phase == READY, (name, pipe.state.phase)
    return pipe, data


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_hostile_prompts_in_request_logs_fire_nothing(engine: str) -> None:
    pipe, _ = ready_pipe(engine)
    before = (pipe.state.startup_id, pipe.state.endpoint, dict(pipe.state.args or {}),
              pipe.counters.startups)
    lines = hostile(engine)
    assert len(lines) > 500, len(lines)
    events = pipe.feed(("\n".join(lines) + "\n").encode("utf-8"), NOW + 20)
    events += pipe.tick(NOW + 60) + pipe.finish(NOW + 60)
    bad = [e for e in events if isinstance(
        e, (Crashed, CrashSettled, Restarted, StartupBegan, PhaseChanged))]
    assert bad == [], bad[:3]
    assert pipe.state.phase == READY
    after = (pipe.state.startup_id, pipe.state.endpoint, dict(pipe.state.args or {}),
             pipe.counters.startups)
    assert after == before
    assert sum(pipe.counters.crashes.values()) == 0


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_no_rule_fires_on_a_request_log_line(engine: str) -> None:
    """Line by line: the matcher returns nothing for any of them (not only no event)."""
    m = Matcher(load_pack(engine))
    fired = [(line, hit[0].id) for line in hostile(engine)
             if (hit := m.match_line(line)) is not None]
    assert fired == [], fired[:3]


def test_the_server_own_markers_still_fire() -> None:
    """The same markers, printed by the server (each rule's samples): every one still
    matches its rule in the pack that owns it (`rules check` proves the same per pack)."""
    for name in ("sglang", "vllm"):
        pack = load_pack(name)
        m = Matcher(pack)
        for r in pack.rules:
            for s in r.samples:
                if s.matches and (r.restart or r.phase == READY or r.endpoint):
                    hit = m.match_line(s.line)
                    assert hit is not None and hit[0].id == r.id, (name, r.id, s.line, hit)


@pytest.mark.parametrize("engine,line", [
    # the marker printed inside another message of the engine's own envelope
    ("sglang", "[2026-01-01 10:10:00] Tokenizer said: The server is fired up and ready to roll!"),
    ("sglang", "[2026-01-01 10:10:00 TP0] note server_args=ServerArgs(model_path='x', port=1)"),
    ("sglang", "[2026-01-01 10:10:00] WARNING: asked for Uvicorn running on http://10.0.0.9:80"),
    ("vllm", "(APIServer pid=1) INFO 01-01 10:10:00 [serving.py:10] echo: vLLM API server "
             "version 9.9"),
    ("vllm", "(APIServer pid=1) WARNING 01-01 10:10:00 [x.py:1] got Uvicorn running on "
             "http://1.2.3.4:5"),
    ("vllm", "(APIServer pid=1) INFO 01-01 10:10:00 [x.py:1] text: Starting vLLM server on "
             "http://h:1"),
])
def test_anchored_rules_fire_only_where_the_message_starts(engine: str, line: str) -> None:
    hit = Matcher(load_pack(engine)).match_line(line)
    assert hit is None or not (hit[0].restart or hit[0].endpoint or hit[0].phase == READY), hit


def test_vllm_logo_version_still_starts_a_startup() -> None:
    """vLLM 0.20+'s logo: `version` after the blocks of the logo (envelope.lead)."""
    m = Matcher(load_pack("vllm"))
    line = ("(APIServer pid=1) INFO 04-27 10:00:00 [startup.py:38]  ▄▄ ▄█ █     █     "
            "█ ▀▄▀ █  version 0.20.0")
    hit = m.match_line(line)
    assert hit is not None and hit[0].id == "version" and hit[1]["logo_version"] == "0.20.0"


@pytest.mark.parametrize("doc,key", [
    ({"envelope": {"prefix": "(unclosed"}}, "envelope.prefix"),
    ({"envelope": {"prefix": "x", "anchor": ["crash"]}}, "envelope.anchor"),
    ({"envelope": ["x"]}, "envelope"),
    ({"user_content": "Receive"}, "user_content"),
    ({"user_content": [{"logger": "x", "other": 1}]}, "user_content[0]"),
    ({"user_content": ["ok", "(bad"]}, "user_content[1]"),
])
def test_a_broken_envelope_or_user_content_names_the_key(tmp_path: Path, doc: dict[str, object],
                                                         key: str) -> None:
    import yaml
    from logwatch.rules.pack import PackError
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "extends": "sglang", **doc}))
    with pytest.raises(PackError) as e:
        load_pack(str(path))
    assert e.value.key == key and str(path) in str(e.value), str(e.value)


def test_a_pack_extending_another_keeps_its_envelope_and_adds_user_content(
        tmp_path: Path) -> None:
    import yaml
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "extends": "sglang",
                                    "user_content": ["MyApp echo: "]}))
    pack = load_pack(str(path))
    assert pack.envelope is load_pack("sglang").envelope and pack.anchor
    assert len(pack.user_content) == len(load_pack("sglang").user_content) + 1
    m = Matcher(pack)
    assert m.match_line("[2026-01-01 10:00:00] MyApp echo: torch.OutOfMemoryError: x") is None
    assert m.match_line("[2026-01-01 10:00:00] torch.OutOfMemoryError: x") is not None


# -- a serving server's own exceptions: a request's error is not a crash ------------------------

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 0 has a "
       "total capacity of 79.19 GiB of which 512.00 MiB is free.")
SERVED_ON = [
    '[2026-01-01 10:05:00] INFO:     10.0.0.7:40100 - "POST /v1/chat/completions HTTP/1.1" 500 '
    'Internal Server Error',
    "[2026-01-01 10:06:00 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.00, "
    "cuda graph: True, gen throughput (token/s): 160.20, #queue-req: 0",
]


def _request_errors(engine: str) -> list[str]:
    """A request's exception logged by the server that serves on (0.5.23 / 0.34 source): an
    image that ran the GPU out of memory in SGLang's HTTP process (multimodal
    processors/base_processor.py, re-raised; entrypoints/openai/serving_base.py
    `logger.exception(f"Error in request: {e}")`, a 500), and a tool name the model made
    up, quoted in a parser's warning (SGLang function_call/base_format_detector.py:86, vLLM
    tool_parsers/hy_v3_tool_parser.py `No tool named '%s'`, tool_parsers/utils.py)."""
    if engine == "sglang":
        return [
            "[2026-01-01 10:05:00] Error in request: CUDA out of memory. Tried to allocate "
            "1.20 GiB.",
            "Traceback (most recent call last):",
            '  File "/sgl-workspace/sglang/python/sglang/srt/multimodal/processors/'
            'base_processor.py", line 941, in process_mm_data',
            "    return self._call_processor(processor, input_text, processor_device, kwargs)",
            OOM,
            "[2026-01-01 10:05:01] Model attempted to call undefined function: "
            "RuntimeError: NCCL error: unhandled system error",
            # an image a client sent that PIL refuses (multimodal/processors/llava.py:106,
            # logged and raised to that request; 0.3's tokenizer_manager.py the same)
            "[2026-01-01 10:05:02] Exception in TokenizerManager:",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/PIL/Image.py", line 3434, in '
            "_decompression_bomb_check",
            "PIL.Image.DecompressionBombError: Image size (200000000 pixels) exceeds limit of "
            "178956970 pixels, could be decompression bomb DOS attack.",
            *SERVED_ON,
        ]
    api = "(APIServer pid=1) WARNING 01-01 10:05:00 "
    return [
        f"{api}[hy_v3_tool_parser.py:97] No tool named 'torch.OutOfMemoryError: CUDA out of "
        f"memory'",
        f"{api}[utils.py:627] Tool call has non-simple function name: RuntimeError: NCCL "
        f"error: unhandled system error",
        f"{api}[muse_tool_parser.py:350] Muse: emitted tool name 'oom-killer' not in the "
        f"request's tools",
        "(APIServer pid=1) INFO 01-01 10:06:00 [loggers.py:257] Engine 000: Avg prompt "
        "throughput: 10.0 tokens/s, Avg generation throughput: 160.2 tokens/s, Running: 3 "
        "reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
    ]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_request_s_exception_while_serving_is_no_crash(engine: str) -> None:
    """Before: `crashed: cuda_oom during ready` paged (and, a crash alerted once per
    startup, the server's real crash later was never alerted)."""
    pipe, _ = ready_pipe(engine)
    events = pipe.feed(("\n".join(_request_errors(engine)) + "\n").encode(), NOW + 20)
    events += pipe.tick(NOW + 60)
    assert [e for e in events if isinstance(e, (Crashed, CrashSettled, Restarted))] == []
    assert pipe.state.phase == READY


def test_a_real_crash_after_a_request_s_error_is_its_own_reason() -> None:
    """The server's real crash after it: alerted, for its own reason (the request's OOM,
    served on after, classifies nothing); a scheduler's own OOM is still cuda_oom, and the
    c10d watchdog's timeout before a scheduler's death still names it nccl_error."""
    detok = [
        "[2026-01-01 10:30:00] DetokenizerManager hit an exception: Traceback (most recent "
        "call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", '
        'line 200, in event_loop',
        "IndexError: list index out of range",
        "[2026-01-01 10:30:01] Subprocess sglang::detokenizer (pid=4250) crashed with exit "
        "code 1. Triggering SIGQUIT for cleanup...",
    ]
    sched_oom = ["[2026-01-01 10:30:00 TP0] Scheduler hit an exception: Traceback (most "
                 "recent call last):", OOM,
                 "[2026-01-01 10:30:01] Received sigquit from a child process. It usually "
                 "means the child failed."]
    nccl = [
        "[rank1]:[E1201 10:15:00.715298746 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=28340, OpType=ALLREDUCE) ran for "
        "600061 milliseconds before timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "[2026-01-01 10:30:02] Subprocess sglang::scheduler_TP1 (pid=4243) crashed with exit "
        "code -6. Triggering SIGQUIT for cleanup...",
    ]
    # an SGLang without its SubprocessWatchdog announces nothing after the c10d abort: the
    # abort itself is the death (before the abort rule: "ready" for good, no page)
    nccl_quiet = nccl[:2]
    for tail, reason in ((detok, "python_exception"), (sched_oom, "cuda_oom"),
                         (nccl, "nccl_error"), (nccl_quiet, "nccl_error")):
        pipe, _ = ready_pipe("sglang")
        lines = _request_errors("sglang") + tail
        events = pipe.feed(("\n".join(lines) + "\n").encode(), NOW + 20)
        events += pipe.tick(NOW + 60) + pipe.finish(NOW + 60)
        settled = [e for e in events if isinstance(e, CrashSettled)]
        assert len(settled) == 1 and pipe.state.crash is not None, (reason, events)
        assert (pipe.state.crash.reason, pipe.state.crash.during) == (reason, READY)


def test_tensorrt_llm_s_cause_line_after_ready_is_a_crash() -> None:
    """TensorRT-LLM serves every request from one executor loop: an OOM in it ends the
    server, its ranks killed without an announcement (the pack's `ready_hints: false`)."""
    assert not any(r.ready_hint for r in load_pack("trtllm").rules)
    data = (FIXTURES / "trtllm-012.log").read_bytes()
    pipe = LogPipeline(load_pack("trtllm"))
    pipe.feed(data.rstrip(b"\n") + b"\n", NOW)
    assert pipe.state.phase == READY
    pipe.feed(b"[01/16/2026-06:20:17] [TRT-LLM] [RANK 0] [E] " + OOM.encode() + b"\n", NOW + 5)
    pipe.tick(NOW + 30)
    assert pipe.state.phase == "crashed" and pipe.state.crash.reason == "cuda_oom"


SECRET = "My SSN is 078-05-1120 and my password is hunter2"
CRASH_AFTER = {
    # SGLang 0.5.23 srt/managers/scheduler.py (the scheduler's traceback), its SIGQUIT
    "sglang": ["[2026-01-01 10:10:01 TP0] Scheduler hit an exception: Traceback (most recent "
               "call last):",
               '  File "/usr/lib/python3/sglang/srt/managers/scheduler.py", line 6368, in '
               "run_scheduler_process",
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
               "[2026-01-01 10:10:01] SIGQUIT received. signum=3, frame=None. It usually "
               "means one child failed."],
    # vLLM 0.34 v1/engine/core.py: the engine core's traceback
    "vllm": ["(EngineCore_DP0 pid=2) ERROR 01-01 10:10:01 [core.py:1210] EngineCore "
             "encountered a fatal error.",
             "(EngineCore_DP0 pid=2) ERROR 01-01 10:10:01 [core.py:1210] Traceback (most "
             "recent call last):",
             "(EngineCore_DP0 pid=2) ERROR 01-01 10:10:01 [core.py:1210] torch.OutOfMemoryError:"
             " CUDA out of memory. Tried to allocate 2.00 GiB."],
}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_crash_excerpt_withholds_the_request_logs_next_to_it(engine: str) -> None:
    """A crash's excerpt goes to Slack, webhooks and Alertmanager: the request-log lines
    before it (SGLang srt/utils/request_logger.py:116 `Receive: obj=...text='...'`, vLLM
    entrypoints/serve/utils/request_logger.py:66 `Received request ...`) carried a user's
    prompt there verbatim (adv26 sgl_excerpt_prompt).  Each is a stand-in now, its envelope
    kept, counted; the server's own lines are whole."""
    pipe, _ = ready_pipe(engine)
    asked = sglang_request_lines(SECRET) if engine == "sglang" else vllm_request_lines(SECRET)
    asked = asked[:3]
    pipe.feed(("\n".join(asked + CRASH_AFTER[engine]) + "\n").encode(), NOW + 20)
    pipe.tick(NOW + 60)
    pipe.finish(NOW + 60)
    crash = pipe.state.crash
    assert crash is not None and crash.reason == "cuda_oom", crash
    text = "\n".join(crash.excerpt)
    assert "hunter2" not in text and "078-05" not in text, text
    assert text.count(WITHHELD) == 3 == pipe.excerpt.withheld, text
    assert all(line in crash.excerpt for line in CRASH_AFTER[engine][1:]), text
    stamp = "[2026-01-01 10:10:00] " if engine == "sglang" else "(APIServer pid=1) "
    assert [s for s in crash.excerpt if WITHHELD in s and not s.startswith(stamp)] == []
