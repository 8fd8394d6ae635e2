"""NVIDIA Dynamo's JSON lines (`DYN_LOGGING_CONSOLE_FORMAT=jsonl`, legacy `DYN_LOGGING_JSONL=1`;
ai-dynamo 1.6.1) read as its text lines do.

Under jsonl the Rust runtime writes each record, the Python ones bridged to it (`LogHandler`:
Dynamo's own loggers, SGLang's under `python -m dynamo.sglang`), as one compact JSON object a
line: `{"time":"2026-12-01T10:00:02.803114Z","level":"INFO","file":...,"line":N,"target":
"main.worker","message":"...",...}` (tests/support/dynamo_jsonl.py says what was read from
the binary and what is inferred).  rules/base.yaml's `records:` form reads it as the text
line `2026-12-01T10:00:02.803114Z  INFO main.worker: ...`.  The built Dynamo workers
rewritten so (tests/fixtures/built/*dynamo*), replayed on origin/main's packs before:
vllm-034-dynamo-worker `still starting: allocating`, sglang-0523-dynamo-worker `still
starting: cuda_graph` (its download read as loading), trtllm-dynamo-worker `still starting:
cuda_graph`, each for good; vllm-034-dynamo-args-refused already `crashed: bad_argument
during launching` (its traceback is Python's own, text).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.dynamo_jsonl import (RUST_LINE, VLLM_MAIN_TARGETS, dynamo_jsonl,
                                  dynamo_jsonl_lines, dynamo_record, ANSI)
from test_wrappers import cri_records, docker_records, verdict, wrapped_copy
from logwatch.app.replay import replay_file
from logwatch.lines import json_records_to_text, record_segments
from logwatch.pipeline import LogPipeline
from logwatch.rules.locate import choose_pack
from logwatch.rules.pack import PackError, load_pack, record_forms

BUILT = Path(__file__).parent / "fixtures" / "built"
WORKERS = ["vllm-034-dynamo-worker.log", "vllm-034-dynamo-args-refused.log",
           "sglang-0523-dynamo-worker.log", "trtllm-dynamo-worker.log"]
# the records each rewritten log holds (the rest of its lines stay text: tqdm, the engine
# core's, TensorRT-LLM's own, vLLM's main process's through `VllmColorFormatter`)
RECORDS = {"vllm-034-dynamo-worker.log": 4, "vllm-034-dynamo-args-refused.log": 1,
           "sglang-0523-dynamo-worker.log": 30, "trtllm-dynamo-worker.log": 10}
FORMS = record_forms(load_pack("sglang"))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def jsonl_copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    dst.write_text(dynamo_jsonl(_text(BUILT / name)), encoding="utf-8",
                   errors="surrogateescape")
    return dst


def _stamps(path: Path) -> list[tuple[str, float | None]]:
    return [(s.phase, s.log_time) for s in replay_file(str(path)).state.spans]


@pytest.mark.parametrize("name", WORKERS)
def test_a_dynamo_worker_s_jsonl_log_reads_as_its_text_log(name: str, tmp_path: Path) -> None:
    """The same engine, phases, durations, startups, shards, ready line (the text line's,
    `INFO main.setup_vllm_engine: worker for ... has been initialized`) and crash, and each
    span at the same stamp (the record's `time`, the line's time as the text's was)."""
    src, dst = BUILT / name, jsonl_copy(name, tmp_path)
    assert sum(ln.startswith('{"time":') for ln in _text(dst).split("\n")) == RECORDS[name]
    assert verdict(dst, True) == verdict(src, True)
    assert _stamps(dst) == _stamps(src)
    assert all(t is not None for _, t in _stamps(dst))


@pytest.mark.parametrize("name", WORKERS)
def test_its_engine_is_found_from_the_records(name: str, tmp_path: Path) -> None:
    """`--rules auto` (the daemon, watch) chooses the pack from the log's first lines: the
    records read as their text first, so the same pack as the text log's."""
    text, jsonl = (BUILT / name).read_bytes(), jsonl_copy(name, tmp_path).read_bytes()
    assert choose_pack("auto", jsonl[:4096]).name == choose_pack("auto", text[:4096]).name


def test_the_rewrite_is_the_formatter_s_shape() -> None:
    """The test's own converter: the keys in the order the formatter's `JsonLog` serializes
    them (time, level, file, line, target, message, then the event's fields in key order),
    compact, tracing's level names; vLLM's own main-process records stay text."""
    import json
    lines = dynamo_jsonl_lines(_text(BUILT / "vllm-034-dynamo-worker.log"))
    recs = [json.loads(x) for x in lines if x.startswith("{")]
    assert list(recs[0])[:6] == ["time", "level", "file", "line", "target", "message"]
    assert list(recs[0])[6:] == sorted(list(recs[0])[6:])
    assert [r["target"] for r in recs][-1] == "worker_factory._run_decode_worker"
    kept = [RUST_LINE.match(ANSI.sub("", x)) for x in lines if not x.startswith("{")]
    assert {m["target"] for m in kept if m} == VLLM_MAIN_TARGETS
    assert ": " not in dynamo_record("t", "WARNING", "a.b", "m").split('"message"')[0]
    assert json.loads(dynamo_record("t", "WARNING", "a.b", "m"))["level"] == "WARN"


SGLANG = BUILT / "sglang-0523-dynamo-worker.log"
CAPTURE = "Capture target decode CUDA graph begin."
# SGLang 0.5.21 (Dynamo 1.6.1's pin) managers/scheduler.py:6092: `logger.error(f"Scheduler hit an
# exception: {traceback}")`, a record whose message holds the traceback (the words of
# sglang-0523-dp4-capture-oom.log's, at 0.5.21's lines: decode_cuda_graph_runner.py:490,
# scheduler.py:6082)
SCHEDULER_CRASH = [
    "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/model_executor/runner/'
    'decode_cuda_graph_runner.py", line 490, in __init__',
    "    self.capture()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 79.19 GiB of which 1.02 GiB is free.",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py", '
    "line 6082, in run_scheduler_process",
    "    scheduler = Scheduler(server_args, port_args)",
    "    " + " " * 24 + "^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
]


def _crashed_in_capture(tmp_path: Path, jsonl: bool) -> Path:
    """The Dynamo SGLang worker up to its capture's first line, then the scheduler's crash
    record: as the Rust runtime writes it in text (the message's later lines bare) or as
    one JSON record (`\\n` inside its message)."""
    lines = _text(SGLANG).split("\n")
    cut = next(i for i, x in enumerate(lines) if CAPTURE in x) + 1
    when, target = "2026-12-01T10:03:50.000000Z", "scheduler.run_scheduler_process"
    if jsonl:
        body = dynamo_jsonl_lines("\n".join(lines[:cut])) + [
            dynamo_record(when, "ERROR", target, "\n".join(SCHEDULER_CRASH))]
    else:
        body = lines[:cut] + [f"\x1b[2m{when}\x1b[0m \x1b[31mERROR\x1b[0m \x1b[2m{target}\x1b[0m"
                              f"\x1b[2m:\x1b[0m {SCHEDULER_CRASH[0]}", *SCHEDULER_CRASH[1:]]
    path = tmp_path / ("jsonl.log" if jsonl else "text.log")
    path.write_text("\n".join(body) + "\n", encoding="utf-8")
    return path


def test_a_traceback_inside_one_record_reads_as_its_lines(tmp_path: Path) -> None:
    """A record whose message holds a traceback (`\\n` in the JSON string) is read line by
    line as the text form's lines are: the same crash (reason, phase, line), the same
    excerpt, its frames and the carets' indent too.  Before: `cuda_graph_capture_failed`
    (not `cuda_oom`: the cause on a later line), its root cause shown as the record's JSON,
    no downloading phase."""
    text, jsonl = _crashed_in_capture(tmp_path, False), _crashed_in_capture(tmp_path, True)
    want, got = replay_file(str(text)).state, replay_file(str(jsonl)).state
    assert want.crash is not None and got.crash is not None
    assert (got.crash.reason, got.phase) == (want.crash.reason, want.phase) == \
        ("cuda_oom", "crashed")
    assert got.crash.line == want.crash.line
    assert got.crash.excerpt == want.crash.excerpt
    assert verdict(jsonl, True) == verdict(text, True)
    assert any(x.endswith("^" * 47) for x in got.crash.excerpt)


@pytest.mark.parametrize("wrap", ["docker json-file", "kubelet", "kubectl --timestamps",
                                  "journald"])
def test_records_behind_other_envelopes_read(wrap: str, tmp_path: Path) -> None:
    """Docker's json-file record around each line (the record's JSON inside `log`), the
    kubelet's, `kubectl logs --timestamps`' and journald's prefixes: read as the text log
    so wrapped is."""
    how = {"docker json-file": lambda ln: docker_records(ln, 1 << 14),
           "kubelet": lambda ln: cri_records(ln, 1 << 14),
           "kubectl --timestamps": lambda ln: f"2026-12-01T10:00:00.000000000Z {ln}",
           "journald": lambda ln: f"Dec 01 10:00:00 gpu-node-1 python3[4242]: {ln}"}[wrap]
    src = jsonl_copy(SGLANG.name, tmp_path)
    a, b = tmp_path / "text.log", tmp_path / "wrapped.log"
    wrapped_copy(SGLANG, a, how)
    wrapped_copy(src, b, how)
    assert verdict(b, False) == verdict(a, False)
    assert verdict(b, False)["phase"] == "ready"


def test_a_jsonl_log_fed_in_pieces_reads_as_replay(tmp_path: Path) -> None:
    """Live (the daemon, watch): the SGLang worker's jsonl log fed 97 bytes at a time,
    records cut anywhere: the same verdict as its replay."""
    path = jsonl_copy(SGLANG.name, tmp_path)
    data = path.read_bytes()
    pipe = LogPipeline(choose_pack("auto", data[:4096]))
    for i in range(0, len(data), 97):
        pipe.feed(data[i:i + 97], 1000.0)
    pipe.finish(1000.0)
    replayed = replay_file(str(path)).state
    assert pipe.state.phase == replayed.phase == "ready"
    assert pipe.state.ready_line == replayed.ready_line
    assert not pipe.state.ready_line.lstrip().startswith("{")


def _rec(**fields: object) -> bytes:
    import json
    return json.dumps(fields, separators=(",", ":")).encode()


def test_a_record_reads_as_dynamo_s_text_line() -> None:
    """`{level:>5}`, the time as written (UTC `Z`, or DYN_LOG_USE_LOCAL_TZ's offset), the
    target; a message's later lines bare (Python's Formatter wrote them); a time that is no
    stamp is left out, not written before the message."""
    rec = _rec(time="2026-12-01T10:00:02.803114Z", level="WARN", file="x.py", line=3,
               target="main.worker", message="a\n  b", span_id="7")
    assert record_segments(rec, FORMS) == ["2026-12-01T10:00:02.803114Z  WARN main.worker: a",
                                           "  b"]
    local = _rec(time="2026-12-01T11:00:02.803114+01:00", level="ERROR", target="t",
                 message="m")
    assert record_segments(local, FORMS) == ["2026-12-01T11:00:02.803114+01:00 ERROR t: m"]
    forged = _rec(time="x\n2026-12-01 ERROR y: torch.OutOfMemoryError", level="INFO",
                  target="t", message="m")
    assert record_segments(forged, FORMS) == [" INFO t: m"]


@pytest.mark.parametrize("line", [
    # tracing-subscriber's own JSON (its message under `fields`), structlog's, Docker's
    b'{"timestamp":"2026-12-01T10:00:00Z","level":"INFO","fields":{"message":"Uvicorn running'
    b' on http://0.0.0.0:8000"},"target":"x"}',
    b'{"event":"Uvicorn running on http://0.0.0.0:8000","level":"info","timestamp":"x"}',
    b'{"log":"{\\"level\\":\\"ERROR\\"}\\n","stream":"stderr","time":"2026-12-05T10:00:00Z"}',
    # a Dynamo-like record whose fields are not strings, or not all there
    b'{"time":"2026-12-01T10:00:00Z","level":"ERROR","target":"t","message":["CUDA out of memory"]}',
    b'{"time":"2026-12-01T10:00:00Z","level":"ERROR","target":["t"],"message":"CUDA out of memory"}',
    b'{"time":"2026-12-01T10:00:00Z","level":"ERROR","message":"CUDA out of memory"}',
    b'{"time":"2026-12-01T10:00:00Z","level":"' + b"E" * 40 + b'","target":"t","message":"x"}',
    # nested past the parser's depth; not an object; quoted inside another line
    b'{"time":"t","level":"ERROR","target":"t","message":"CUDA out of memory","x":'
    + b"[" * 60000 + b"}",
    b'[{"time":"t","level":"ERROR","target":"t","message":"x"}]',
    b"[2026-12-01 10:00:00] Receive: obj=GenerateReqInput(text='{\"time\":\"t\",\"level\":\"ERROR\""
    b",\"target\":\"t\",\"message\":\"CUDA out of memory\"}')",
])
def test_what_is_not_a_dynamo_record_is_left_as_it_is(line: bytes) -> None:
    """Untrusted input, as for the other JSON envelopes: JSON of another shape (another
    program's `level`), a record whose fields are not strings or not all there, nesting past
    the parser's depth, a record quoted inside another line: each is the line it was."""
    data = b"a\n" + line + b"\nb\n"
    assert json_records_to_text(data, FORMS)[0] is data


def _sglang_pipe(*records: bytes) -> LogPipeline:
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(dynamo_jsonl(_text(SGLANG)).encode() + b"\n" + b"\n".join(records), 1.0)
    pipe.finish(1.0)
    return pipe


def test_a_huge_or_half_written_record_costs_no_crash() -> None:
    """A message of 100 KB (past the 64 KiB line cap: its fields read from what is left), one
    of 30,000 newlines (its lines kept within twice its bytes), a record cut in its message
    or after it (the log's half-written last line): read from what is there, the worker
    still ready, no crash."""
    when = "2026-12-01T10:04:00.000000Z"
    big = dynamo_record(when, "INFO", "handler.generate", "x" * 100_000).encode()
    lines = dynamo_record(when, "INFO", "handler.generate", "\n" * 30_000 + "end").encode()
    out, _ = json_records_to_text(lines + b"\n", FORMS)
    assert len(out) <= 2 * len(lines) + 4096 + 1 and out.split(b"\r")[-1].endswith(b"end\n")
    stats = dynamo_record(when, "INFO", "scheduler.log_decode_stats", "Decode batch, "
                          "#running-req: 1, #token: 4096, gen throughput (token/s): 42.0").encode()
    head = f"{when}  INFO scheduler.log_decode_stats: Decode batch, #running-req: 1".encode()
    cut_in_message, cut_after_it = stats[:stats.index(b", #token")], stats[:-20]
    assert json_records_to_text(cut_in_message, FORMS)[0] == head
    assert json_records_to_text(cut_after_it, FORMS)[0].startswith(head + b", #token: 4096")
    pipe = _sglang_pipe(big, lines, cut_after_it)
    assert pipe.state.phase == "ready" and pipe.state.crash is None
    assert json_records_to_text(big[:70_000], FORMS)[0].endswith(b"x" * 100)


def test_a_record_shape_is_pack_data(tmp_path: Path) -> None:
    """A records entry's `keys` names another shape's own keys (Dynamo's is rules/base.yaml's):
    a new shape needs YAML, not code; a `keys` without the level's or the message's key,
    or naming a field no shape has, is refused at load."""
    path = tmp_path / "neweng.yaml"
    path.write_text("name: neweng\nextends: sglang\nrecords:\n"
                    "  - keys: {levelname: sev, message: msg, asctime: ts}\n"
                    "    envelope: ['<%(asctime)s %(levelname)s> ']\n"
                    "    datefmt: '%H:%M:%S'\n")
    forms = record_forms(load_pack(str(path)))
    assert record_segments(_rec(ts="2026-12-01 10:00:04", sev="INFO", msg="up"), forms) == \
        ["<10:00:04 INFO> up"]
    for keys in ("{message: msg}", "{levelname: sev}", "{levelname: sev, message: msg, pid: p}",
                 "{levelname: 3, message: msg}", "[level]"):
        path.write_text("name: bad\nextends: sglang\nrecords:\n"
                        f"  - keys: {keys}\n    envelope: ['x ']\n")
        with pytest.raises(PackError, match="keys"):
            load_pack(str(path))
