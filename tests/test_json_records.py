"""vLLM's JSON logging (`vllm serve --logging-config.formatter json`, vLLM 0.34) reads as
its text logging does.

vLLM 0.34 ships a JSON formatter for log shippers (vllm/logger.py: python-json-logger with
`JSON_FORMAT`; uvicorn's lines through it too).  Before, every record was shown as its JSON
and the rules that start a startup or say it is ready (anchored at the message's start)
never fired: of the 31 vLLM logs (tests/fixtures, built/), 9 ended otherwise, every
startup that reached ready "still starting", one crash taken for SGLang's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES
from support.json_logging import (json_record_of, sglang_json_lines, vllm_json_lines,
                                  write_vllm_json)
from test_wrappers import docker_records, verdict
from logwatch.app.replay import replay_file
from logwatch.lines import json_records_to_text as _to_text, record_segments
from logwatch.pipeline import LogPipeline
from logwatch.rules.locate import choose_pack
from logwatch.rules.pack import load_pack, record_forms

FORMS = record_forms(load_pack("vllm"))     # every shipped pack's forms, vLLM's first


def json_records_to_text(data: bytes) -> tuple[bytes, tuple[int, ...]]:
    return _to_text(data, FORMS)


def record_text(raw: bytes) -> str | None:
    segments = record_segments(raw, FORMS)
    return None if segments is None else "\r".join(segments)

# the vLLM logs with vLLM's own records at the start of a line (not those behind another
# program's logger, TorchServe's: its records are that program's to format)
# (nor do vLLM's name a worker's pipeline stage: `VllmWorker-1`, a process's name, for
# `Worker_PP1`; `-pp 2` stages starting apart read as ranks of one group there)
VLLM_STAGES = {"vllm-034-pp2.log", "vllm-034-pp2-capture-oom.log",
               "vllm-034-pp2-last-stage-oom.log", "vllm-034-pp2-stuck.log",
               "vllm-034-pp2-profile-oom-ahead.log"}
# vLLM 0.11 and 0.8.5 ship no JSON formatter (their vllm/logger.py has no JSON_FORMAT: 0.34's);
# their built startups (0.8.5's V0 too) are read in 0.34's JSON form all the same: the same
# startup, the same timeline (the DeepGEMM one's JSON records name a worker `VllmWorker-0`, its
# bars `Worker_TP0`: one rank, rules/pack.py `rank_of`; before helper adv100 autotune 52 s for
# 37 s), the same excerpt (the text form's caret lines keep their indent, lines.py `PAD_RUN`)
NO_JSON_FORM: set[str] = set()
VLLM_LOGS = [p for p in sorted([*FIXTURES.glob("vllm-*.log"),
                                *(FIXTURES / "built").glob("vllm-*.log")])
             if p.name not in VLLM_STAGES | NO_JSON_FORM and any(ln.startswith("{") for ln in vllm_json_lines(
                 p.read_text(encoding="utf-8", errors="surrogateescape")))]


def same_reading(src: Path, dst: Path) -> bool:
    """The text log and its JSON form read alike: engine, phases, durations, startups,
    shards, the crash's reason and phase.  (The lines as shown differ: vLLM's process is
    named as multiprocessing named it, the source line is not in a record.)"""
    want, got = verdict(src, True), verdict(dst, True)
    for doc in (want, got):
        doc.pop("ready_line")
        if doc["crash"] is not None:
            doc["crash"] = doc["crash"][:2]
    assert got == want
    return True


def _json(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_one_process_is_one_rank_whatever_its_tag_s_form() -> None:
    """A worker's JSON records name it as multiprocessing did, its bars as vLLM's text tag:
    one process (one pid), one rank, the one its first line named.  Two processes of one
    pid named by one pattern (Ray's actors on two nodes) stay two ranks."""
    pack, names = load_pack("vllm"), {}
    assert pack.rank_of("(VllmWorker-0 pid=200) INFO 10-21 10:00:11 [x.py] Starting", names) == "0"
    assert pack.rank_of("(Worker_TP0 pid=200) DeepGemm(fp8_gemm_nt) warmup", names) == "0"
    assert pack.rank_of("(Worker_TP1 pid=201) DeepGemm(fp8_gemm_nt) warmup", names) == "TP1"
    ray = "(RayWorkerProc pid=9, ip=10.0.0.{}) (Worker_TP{} pid=300) Loading"
    assert [pack.rank_of(ray.format(n, r), names) for n, r in ((2, 2), (3, 10))] == ["TP2", "TP10"]
    assert pack.rank_of("(Worker_TP0 pid=200) x") == "TP0"      # no startup's names: the tag's


@pytest.mark.parametrize("src", VLLM_LOGS, ids=lambda p: p.name)
def test_a_vllm_log_in_json_reads_as_the_text_log(src: Path, tmp_path: Path) -> None:
    """Each vLLM log rewritten as the JSON formatter writes it (the formatter itself,
    tests/support/json_logging.py): the same engine, phases, durations, startups, shards,
    crash (its reason, phase and rank)."""
    dst = tmp_path / src.name
    write_vllm_json(src, dst)
    assert same_reading(src, dst)
    a, b = replay_file(str(src)).state, replay_file(str(dst)).state
    assert (a.crash is None) == (b.crash is None)
    if a.crash is not None:
        assert bool(a.crash.rank) == bool(b.crash.rank)
    assert (a.ready_line is None) == (b.ready_line is None)


# SGLang's JSON records carry no rank tag: `--dp` groups and `--pp-size` stages starting apart
# cannot be told apart there (the startup follows whichever group printed last; its text
# form, the slowest group)
APART_BY_RANK_ONLY = {"sglang-0523-dp2.log", "sglang-0523-dp4-capture-oom.log",
                      "sglang-0523-dp2-tp2-stuck-load.log", "sglang-0523-pp2.log",
                      "sglang-0523-pp2-last-stage-oom.log"}
SGLANG_LOGS = [p for p in sorted([*FIXTURES.glob("sglang-*.log"),
                                  *(FIXTURES / "built").glob("sglang-*.log")])
               if p.name not in APART_BY_RANK_ONLY and any(
                   ln.startswith("{") for ln in sglang_json_lines(
                       p.read_text(encoding="utf-8", errors="surrogateescape")))]


def test_most_logs_are_rewritten() -> None:
    assert len(VLLM_LOGS) >= 20 and len(SGLANG_LOGS) >= 20


@pytest.mark.parametrize("src", SGLANG_LOGS, ids=lambda p: p.name)
def test_an_sglang_log_in_json_reads_as_the_text_log(src: Path, tmp_path: Path) -> None:
    """SGLang leaves the format to a `SGLANG_LOGGING_CONFIG_PATH` dictConfig where one is
    given (0.5.23 `configure_logger`): with python-json-logger's formatter, each record a
    JSON object, no rank tag.  Read as SGLang's own format: the same engine, phases,
    durations, startups, shards and crash (before: 12 of 24 ended otherwise; read in
    vLLM's form, 4)."""
    dst = tmp_path / src.name
    dst.write_text("\n".join(sglang_json_lines(
        src.read_text(encoding="utf-8", errors="surrogateescape"))),
        encoding="utf-8", errors="surrogateescape")
    assert same_reading(src, dst)


def _json_form(src: Path, dst: Path) -> Path:
    if src.name.startswith("vllm"):
        write_vllm_json(src, dst)
    else:
        dst.write_text("\n".join(sglang_json_lines(
            src.read_text(encoding="utf-8", errors="surrogateescape"))),
            encoding="utf-8", errors="surrogateescape")
    return dst


def _message(line: str) -> str:
    """An excerpt line without what a record has not (a rank tag, a process tag, a source
    line number)."""
    line = re.sub(r"^(?:\([\w.-]+ (?:rank=\d+ )?pid=\d+\) )+", "", line)
    # `[file.py:N] `, before vLLM 0.8 ` file.py:N] ` (no `[`; an empty last line of a record
    # with a traceback ends there)
    line = re.sub(r"(?:\[|(?<= ))([\w./-]+?\.py):\d+\](?= |$)", r"[\1]", line)
    return re.sub(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?(?: [A-Za-z_]+\d+)*\] ",
                  r"[\1] ", line)


CRASH_LOGS = [p for p in [*VLLM_LOGS, *SGLANG_LOGS] if replay_file(str(p)).state.crash]


@pytest.mark.parametrize("src", CRASH_LOGS, ids=lambda p: p.name)
def test_a_crash_s_excerpt_in_json_is_the_text_log_s(src: Path, tmp_path: Path) -> None:
    """The crash excerpt (the alert's, `replay`'s) of the JSON form holds the lines the text
    form's holds, a logged traceback's frames and carets too (a record's lines are each a
    line of the excerpt; SGLang's `Scheduler hit an exception: {traceback}` is one record).
    Before, a record's traceback showed as its last line, and a caret line lost its indent
    to the terminal-fold repair."""
    want = replay_file(str(src)).state.crash
    got = replay_file(str(_json_form(src, tmp_path / src.name))).state.crash
    assert want is not None and got is not None
    assert [_message(x) for x in got.excerpt] == [_message(x) for x in want.excerpt]


def test_a_record_reads_as_vllm_s_text_form() -> None:
    """A record: `(processName pid=N) LEVEL MM-DD HH:MM:SS [module.py] message`; a message
    and a traceback of several lines, a segment each under the record's envelope, the
    record one physical line; uvicorn's record as uvicorn writes it."""
    raw = _json(asctime="2026-12-01 10:00:04,123", levelname="ERROR", name="vllm.v1.engine.core",
                processName="EngineCore_DP0", process=150, message="EngineCore failed to start.",
                exc_info='Traceback (most recent call last):\n  File "core.py", line 1, in f\n'
                         '    raise RuntimeError("NCCL error: x")\nRuntimeError: CUDA out of memory')
    env = "(EngineCore_DP0 pid=150) ERROR 12-01 10:00:04 [core.py] "
    assert record_text(raw) == "\r".join(env + t for t in (
        "EngineCore failed to start.", "Traceback (most recent call last):",
        '  File "core.py", line 1, in f', '    raise RuntimeError("NCCL error: x")',
        "RuntimeError: CUDA out of memory"))
    assert record_text(_json(asctime="2026-12-01 10:00:04,1", levelname="INFO",
                             name="uvicorn.error", processName="MainProcess", process=1,
                             message="Application startup complete.")) == \
        "INFO:     Application startup complete."
    # SGLang's (a SGLANG_LOGGING_CONFIG_PATH config) as SGLang's own format writes it
    assert record_text(_json(asctime="2026-12-01 10:00:04,123", levelname="INFO",
                             name="sglang.srt.model_executor.model_runner",
                             message="Load weight begin. avail mem=78.92 GB")) == \
        "[2026-12-01 10:00:04] Load weight begin. avail mem=78.92 GB"
    # fields missing: what there is (no time: a config without `%(asctime)s`)
    assert record_text(_json(levelname="WARNING", message="x")) == "WARNING [root.py] x"
    assert record_text(_json(levelname="INFO", name="vllm.entrypoints.logger", message="a\nb",
                             processName="MainProcess", process="7")) == \
        "(MainProcess pid=7) INFO [logger.py] a\r(MainProcess pid=7) INFO [logger.py] b"


@pytest.mark.parametrize("line", [
    b'{"timestamp": "2026-12-01T10:00:00", "event": "request.received", "message": "x"}',
    b'{"log":"[2026-12-01 10:00:00] x\\n","stream":"stderr","time":"2026-12-05T10:00:00Z"}',
    b'{"levelname": "ERROR", "message": ["CUDA out of memory"]}',
    b'{"levelname": "' + b"E" * 40 + b'", "message": "x"}',
    b'[{"levelname": "ERROR", "message": "x"}]',
    b'{"levelname": "ERROR", "message": "CUDA out of memory", "x": ' + b"[" * 60000 + b"}",
    b"(APIServer pid=1) INFO 12-01 10:00:00 [logger.py:1] prompt: '{\"levelname\": \"ERROR\"}'",
])
def test_what_is_not_a_record_is_left_as_it_is(line: bytes) -> None:
    """Untrusted input: JSON of another shape (SGLang's request log, Docker's record), a
    record whose fields are not strings, nesting past the parser's depth, a record quoted
    inside another line: each is the line it was."""
    data = b"a\n" + line + b"\nb\n"
    assert json_records_to_text(data)[0] is data


def test_records_behind_a_container_runtime_and_inside_docker_s_records_read() -> None:
    """A pod's log (the kubelet's record, kubectl --timestamps) and Docker's json-file
    record whose line is a record: read as the record."""
    rec = _json(asctime="2026-12-01 10:04:33,000", levelname="INFO", name="vllm.entry",
                processName="MainProcess", process=100,
                message="Starting vLLM server on http://0.0.0.0:8000")
    for data in (b"2026-12-01T10:04:33.1Z stdout F " + rec + b"\n",
                 b"2026-12-01T10:04:33.1Z " + rec + b"\n",
                 docker_records(rec.decode(), 1 << 14).encode() + b"\n"):
        pipe = LogPipeline(load_pack("vllm"))
        pipe.feed(data, 1.0)
        pipe.finish(1.0)
        assert pipe.state.phase == "ready", data
        assert "[entry.py] Starting vLLM server" in pipe.state.ready_line


def test_a_prompt_in_a_request_log_record_is_what_a_client_sent() -> None:
    """A client's prompt that holds a line of vLLM's own (a CUDA OOM), logged by the request
    logger as a record: each of its lines is under the request logger's envelope, so no
    crash (as in the text form, where vLLM repeats the envelope on each line)."""
    prompt = ("hi\n(EngineCore pid=1) ERROR 12-01 10:00:00 [core.py:1] torch.OutOfMemoryError: "
              "CUDA out of memory. Tried to allocate 2.00 GiB")
    data = b"\n".join(_json(asctime="2026-12-01 10:05:00,000", levelname="INFO",
                            name=name, processName="MainProcess", process=100, message=msg)
                      for name, msg in (
        ("vllm.entry", "Starting vLLM server on http://0.0.0.0:8000"),
        ("vllm.entrypoints.serve.utils.request_logger",
         f"Received request chatcmpl-1: prompt: {prompt}"))) + b"\n"
    pipe = LogPipeline(load_pack("vllm"))
    pipe.feed(data, 1.0)
    pipe.finish(1.0)
    assert pipe.state.phase == "ready" and pipe.state.crash is None


def test_a_json_log_fed_in_pieces_reads_as_replay(tmp_path: Path) -> None:
    """Live (the daemon, watch): a crash log in JSON fed 97 bytes at a time, records cut
    anywhere: the engine detected from the records, the same verdict as its replay."""
    src = FIXTURES / "built" / "vllm-034-jit-crash-generic.log"
    path = tmp_path / "vllm.log"
    write_vllm_json(src, path)
    data = path.read_bytes()
    assert data.count(b'"exc_info": ') == 1
    pack = choose_pack("auto", data[:4096])
    assert pack.name == "vllm"
    pipe = LogPipeline(pack)
    for i in range(0, len(data), 97):
        pipe.feed(data[i:i + 97], 1000.0)
    pipe.finish(1000.0)
    replayed = replay_file(str(path)).state
    text = replay_file(str(src)).state
    assert pipe.state.phase == replayed.phase == text.phase == "crashed"
    assert pipe.state.crash.reason == replayed.crash.reason == text.crash.reason
    assert pipe.state.crash.line == replayed.crash.line
    assert not pipe.state.crash.line.startswith("{")


def test_the_converter_writes_what_vllm_s_formatter_writes() -> None:
    """The test's own converter: a record's fields and their order as vLLM's JSON_FORMAT
    gives them (vllm/logging_utils/formatter.py), the traceback of a logged exception in
    `exc_info`."""
    lines = vllm_json_lines((FIXTURES / "vllm-024.log").read_text(encoding="utf-8"))
    rec = json.loads(next(ln for ln in lines if ln.startswith("{")))
    assert list(rec)[:6] == ["asctime", "levelname", "name", "processName", "process", "message"]
    assert rec["processName"] == "VllmWorker-0" and rec["exc_info"].startswith("Traceback")


def _vllm_records(*extra: bytes, wrap=lambda rec: rec) -> LogPipeline:
    """vLLM's ready, then `extra`, through a pipeline (a replay's reading)."""
    ready = wrap(_json(asctime="2026-12-01 10:04:33,000", levelname="INFO", name="vllm.entry",
                       processName="MainProcess", process=100,
                       message="Starting vLLM server on http://0.0.0.0:8000"))
    pipe = LogPipeline(load_pack("vllm"))
    pipe.feed(b"\n".join((ready, *extra)) + b"\n", 1.0)
    pipe.finish(1.0)
    return pipe


def _prompt_record(prompt: str, **fields: object) -> bytes:
    rec = dict(asctime="2026-12-01 10:05:00,000", levelname="INFO", processName="MainProcess",
               process=100, name="vllm.entrypoints.serve.utils.request_logger",
               message=f"Received request chatcmpl-1: prompt: {prompt}")
    rec.update(fields)
    return json.dumps({k: v for k, v in rec.items() if v is not None}).encode()


OOM_LINE = ("(EngineCore pid=1) ERROR 12-01 10:00:00 [core.py:1] torch.OutOfMemoryError: CUDA "
            "out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("how", ["kubelet split at 16 KiB", "cut at 64 KiB", "no time"])
def test_a_long_or_timeless_request_record_is_still_what_a_client_sent(how: str) -> None:
    """A prompt over 16 KiB is written by the kubelet as records P then F (read once
    joined); over 64 KiB it is cut by the line cap (its fields read from what is left); a
    config without `%(asctime)s` writes no time (the logger's name still written).  Before:
    each stayed raw JSON or lost its logger, and the OOM line in the prompt was a crash."""
    from test_wrappers import cri_records
    pad = "x" * (20_000 if how != "cut at 64 KiB" else 70_000)
    rec = _prompt_record(f"{pad}\n{OOM_LINE}\n{pad}",
                         asctime=None if how == "no time" else "2026-12-01 10:05:00,000")
    kubelet = how.startswith("kubelet")
    wrap = (lambda r: cri_records(r.decode(), 16384).encode()) if kubelet else (lambda r: r)
    pipe = _vllm_records(wrap(rec), wrap=wrap)
    assert pipe.state.phase == "ready" and pipe.state.crash is None


def test_a_crash_record_with_a_long_traceback_keeps_its_cause() -> None:
    """A traceback of 600 lines (over 16 KiB, so split by the kubelet): its last line, the
    cause, is read (a record's lines are kept at both ends)."""
    from test_wrappers import cri_records
    tb = "Traceback (most recent call last):\n" + "".join(
        f'  File "/x/m{i}.py", line {i}, in f{i}\n    return g{i}(x)\n' for i in range(300)) + \
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    rec = _json(asctime="2026-12-01 10:00:40,000", levelname="ERROR", name="vllm.v1.engine.core",
                processName="EngineCore", process=150, message="EngineCore failed to start.",
                exc_info=tb)
    pipe = LogPipeline(load_pack("vllm"))
    pipe.feed(cri_records(rec.decode(), 16384).encode() + b"\n", 1.0)
    pipe.finish(1.0)
    assert pipe.state.crash is not None and pipe.state.crash.reason == "cuda_oom"


@pytest.mark.parametrize("prefix", [
    "Dec 01 10:04:33 gpu-node-1 vllm[4242]: ", "[pod/vllm-0/vllm] ", "vllm-0 vllm ",
    "vllm-1  | 2026-12-01T10:04:33.000000000Z "])
def test_records_behind_other_wrappers_read(prefix: str) -> None:
    """journald, `kubectl logs --prefix`, stern, `compose logs --timestamps`: each segment
    of the record keeps the wrapper, which the pack removes."""
    rec = _json(asctime="2026-12-01 10:04:33,000", levelname="INFO", name="vllm.entry",
                processName="MainProcess", process=100,
                message="Starting vLLM server on http://0.0.0.0:8000")
    pipe = LogPipeline(load_pack("vllm"))
    pipe.feed(prefix.encode() + rec + b"\n", 1.0)
    pipe.finish(1.0)
    assert pipe.state.phase == "ready", prefix


def test_a_prompt_of_many_newlines_is_read_within_twice_its_size() -> None:
    """30,000 newlines in a prompt: rendered with an envelope each they would be ~2 MB; a
    record's lines are kept within twice its bytes (plus 4 KiB), its first and last."""
    rec = _prompt_record("\n" * 30_000 + "end")
    out, _ = json_records_to_text(rec + b"\n")
    assert len(out) <= 2 * len(rec) + 4096 + 1
    assert out.split(b"\r")[-1].endswith(b"end\n")


def test_a_new_engine_s_json_records_are_pack_data(tmp_path: Path) -> None:
    """A pack's `records:` says how its engine's formatter writes a record: a new engine's
    JSON logging needs its format in YAML, not code; its form wins for its loggers, the
    shipped ones for theirs."""
    path = tmp_path / "neweng.yaml"
    path.write_text("name: neweng\nextends: sglang\nrecords:\n"
                    "  - {loggers: [neweng], envelope: ['<%(asctime)s %(levelname)s> '], "
                    "datefmt: '%H:%M:%S', each_line: true}\n"
                    "  - {loggers: [neweng.plain], envelope: ['<%(levelname)s> ']}\n")
    forms = record_forms(load_pack(str(path)))
    rec = _json(asctime="2026-12-01 10:00:04,123", levelname="INFO", name="neweng.core",
                message="up\nready")
    assert record_segments(rec, forms) == ["<10:00:04 INFO> up", "<10:00:04 INFO> ready"]
    plain = _json(levelname="INFO", name="neweng.plain.x", message="up\n  ready")
    assert record_segments(plain, forms) == ["<INFO> up", "  ready"]   # Python's Formatter
    sg = _json(asctime="2026-12-01 10:00:04,123", levelname="INFO", name="sglang.srt.x",
               message="m")
    assert record_segments(sg, forms) == ["[2026-12-01 10:00:04] m"]


INVENTORIES = sorted((FIXTURES.parent / "inventory").glob("*.yaml"))


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.stem)
def test_every_logged_statement_of_the_releases_reads_the_same_as_a_record(path: Path) -> None:
    """Not the fixtures: every statement of SGLang 0.5.23 and vLLM 0.34.0 that their source
    logs (tests/inventory, read from the wheels), as a JSON record of the logger its module
    names (`vllm/v1/engine/core.py` -> `vllm.v1.engine.core`), gets the meaning its text
    line gets (`line_meaning` of each segment: the first that means something)."""
    import yaml
    from logwatch.rules.check import line_meaning
    inv = yaml.safe_load(path.read_text())
    pack = load_pack(inv["pack"])
    forms = record_forms(pack)
    checked, differ = 0, []
    for st in inv["statements"]:
        if not st.get("kind", "").startswith(("logger.", "composed")):
            continue
        source = st["source"].split(":")[0].removesuffix(".py").removesuffix("/__init__")
        logger = "uvicorn.error" if "INFO:     " in st["line"] else source.replace("/", ".")
        rec = json_record_of(st["line"], logger)
        if rec is None:
            continue
        text = _to_text(rec.encode(), forms)[0].decode()
        assert not text.startswith("{"), (st["id"], text)
        got = [line_meaning(pack, seg) for seg in text.split("\r")]
        got = next((g for g in got if g["rule"] is not None), got[0])
        checked += 1
        if got["rule"] != line_meaning(pack, st["line"])["rule"]:
            differ.append((st["id"], text, got["rule"]))
    assert checked >= 60 and not differ, (checked, differ)
