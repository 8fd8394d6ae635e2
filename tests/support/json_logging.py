"""Logs as the engines write them with JSON logging.

A vLLM log as `vllm serve --logging-config.formatter json` writes it (vLLM 0.34).

vllm/logger.py then formats every record of the `vllm` loggers with python-json-logger's
`JsonFormatter` and `JSON_FORMAT` below, and uvicorn's records too
(vllm/logging_utils/uvicorn_logging.py); tqdm's bars and a crashing process's own traceback
bypass logging and stay text.  The records here are made from a text log's lines and
formatted by that formatter itself:

* the process is named as multiprocessing named it (`processName`), not as vLLM's text tag
  does: the API server `MainProcess` (its DP supervisor's children `APIServer_DPRank_N`),
  the engine `EngineCore` / `EngineCore_DPN`, a worker `VllmWorker-N`
  (v1/executor/multiproc_executor.py, v1/engine/utils.py, dp_supervisor.py);
* the logger's name is the module's (`vllm.<file stem>`), the source line is not written;
* a logged exception's traceback (the text form repeats the envelope on each of its lines)
  is the record's `exc_info`.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from pythonjsonlogger.json import JsonFormatter

JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(processName)s %(process)d %(message)s"

_ENVELOPE = re.compile(
    r"^(?:\((?P<proc>[\w.-]+) (?:rank=\d+ )?pid=(?P<pid>\d+)\) )?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)"
    r"(?:\.\d+)? \[?(?P<file>[\w./-]+?)(?::\d+)?\] (?P<msg>.*)$")
_UVICORN = re.compile(r"^(?:\([\w.-]+ pid=\d+\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+"
                      r"(?P<msg>.*)$")
_ACCESS = re.compile(r'^(\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d+)')


class _Processes:
    """The multiprocessing name of each text tag, in the order the log shows them."""

    def __init__(self) -> None:
        self.workers: dict[str, str] = {}
        self.servers: dict[str, str] = {}
        self.supervised = False
        self.api_pid = 1

    def name(self, proc: str | None, pid: str | None) -> str:
        if proc == "DPSupervisor":
            self.supervised = True
            return "MainProcess"
        if proc in (None, "APIServer"):
            if pid:
                self.api_pid = int(pid)
            if self.supervised and pid:
                return self.servers.setdefault(pid, f"APIServer_DPRank_{len(self.servers)}")
            return "MainProcess"
        if proc.startswith("Worker"):
            return self.workers.setdefault(proc, f"VllmWorker-{len(self.workers)}")
        return proc


def _record(formatter: JsonFormatter, name: str, level: str, when: float, process: str,
            pid: int, message: str, exc: str | None = None) -> str:
    rec = logging.LogRecord(name, getattr(logging, level), "", 0, message, None, None)
    rec.created, rec.msecs = when, 0.0
    rec.processName, rec.process = process, pid
    if exc:
        rec.exc_text = exc
    return formatter.format(rec)


def vllm_json_lines(text: str, year: int = 2026) -> list[str]:
    """The lines of a vLLM text log as the JSON formatter writes them."""
    fmt = JsonFormatter(JSON_FORMAT)
    fmt.converter = time.localtime
    procs = _Processes()
    out: list[str | list] = []      # a pending record: [args, exc lines]
    last_key: tuple | None = None
    when = time.mktime((year, 1, 1, 0, 0, 0, 0, 0, -1))

    def flush() -> None:
        if out and isinstance(out[-1], list):
            args, exc = out[-1]
            out[-1] = _record(fmt, *args, exc="\n".join(exc) if exc else None)

    for line in text.split("\n"):
        m = _ENVELOPE.match(line)
        if m:
            key = tuple(m.group("proc", "pid", "level", "md", "hms", "file"))
            pending = out[-1] if out and isinstance(out[-1], list) else None
            if pending is not None and key == last_key and (
                    pending[1] or m["msg"] == "Traceback (most recent call last):"):
                pending[1].append(m["msg"])      # a logged exception's traceback
                continue
            flush()
            when = time.mktime(time.strptime(f"{year}-{m['md']} {m['hms']}", "%Y-%m-%d %H:%M:%S"))
            stem = m["file"].rsplit("/", 1)[-1].removesuffix(".py")
            out.append([(f"vllm.{stem}", m["level"], when, procs.name(m["proc"], m["pid"]),
                         int(m["pid"] or procs.api_pid), m["msg"]), []])
            last_key = key
            continue
        flush()
        last_key = None
        u = _UVICORN.match(line)
        if u:
            a = _ACCESS.match(u["msg"])
            out.append(_record(fmt, "uvicorn.access" if a else "uvicorn.error", u["level"], when,
                               "MainProcess", procs.api_pid, a.group(1) if a else u["msg"]))
            continue
        out.append(line)
    flush()
    return [str(o) for o in out]


def write_vllm_json(src: Path, dst: Path) -> None:
    """`src` (a vLLM text log) as the JSON formatter writes it, at `dst`."""
    text = src.read_text(encoding="utf-8", errors="surrogateescape")
    dst.write_text("\n".join(vllm_json_lines(text)), encoding="utf-8", errors="surrogateescape")


_SGLANG = re.compile(r"^\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?"
                     r"(?: [A-Za-z_]+\d+)*\] (?P<msg>.*)$")
SGLANG_JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def sglang_json_lines(text: str) -> list[str]:
    """The lines of an SGLang text log as a `SGLANG_LOGGING_CONFIG_PATH` config with
    python-json-logger's formatter writes them (SGLang 0.5.23 `configure_logger` then leaves
    the format to that config: no rank tag, the fields the config names).  Every record is
    `sglang.srt` at INFO here (a text line says neither its logger nor its level)."""
    fmt = JsonFormatter(SGLANG_JSON_FORMAT)
    fmt.converter = time.localtime
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _SGLANG.match(lines[i])
        if m is None:
            out.append(lines[i])
            i += 1
            continue
        when = time.mktime(time.strptime(f"{m['date']} {m['hms']}", "%Y-%m-%d %H:%M:%S"))
        n = _traceback_lines(lines, i + 1) if m["msg"].endswith(_TRACEBACK) else 0
        out.append(_record(fmt, "sglang.srt", "ERROR" if n else "INFO", when, "MainProcess", 1,
                           "\n".join([m["msg"], *lines[i + 1:i + 1 + n]])))
        i += 1 + n
    return out


_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")


def _traceback_lines(lines: list[str], at: int) -> int:
    """How many lines from `at` on are the rest of a traceback a record's message began
    (`logger.error(f"Scheduler hit an exception: {traceback}")`, SGLang 0.5.23
    managers/scheduler.py): its indented frames, its exception line, and the tracebacks
    chained to it.  0 when what follows is no traceback's (another process's line)."""
    i = at
    while i < len(lines):
        line = lines[i]
        if line.startswith(" "):
            i += 1
            continue
        if i == at or _SGLANG.match(line) is not None:
            return i - at if i > at else 0
        i += 1                                      # the exception line
        if i + 1 < len(lines) and not lines[i].strip() and lines[i + 1].startswith(_CHAINED):
            if i + 3 < len(lines) and lines[i + 3] == _TRACEBACK:
                i += 4
                continue
        return i - at
    return i - at


def json_record_of(line: str, logger: str, year: int = 2026) -> str | None:
    """One line of an engine's text log (vLLM's envelope, uvicorn's, SGLang's stamp) as the
    JSON formatter writes its record, logged by `logger` (the module's `__name__`, from a
    statement's source file); None for a line that is no logging record (a bar, a print)."""
    m = _ENVELOPE.match(line)
    if m is not None:
        when = time.mktime(time.strptime(f"{year}-{m['md']} {m['hms']}", "%Y-%m-%d %H:%M:%S"))
        return _record(_formatter(JSON_FORMAT), logger, m["level"], when,
                       _Processes().name(m["proc"], m["pid"]), int(m["pid"] or 1), m["msg"])
    u = _UVICORN.match(line)
    if u is not None and logger.startswith("uvicorn"):
        return _record(_formatter(JSON_FORMAT), logger, u["level"], 0.0, "MainProcess", 1,
                       u["msg"])
    s = _SGLANG.match(line)
    if s is not None:
        when = time.mktime(time.strptime(f"{s['date']} {s['hms']}", "%Y-%m-%d %H:%M:%S"))
        return _record(_formatter(SGLANG_JSON_FORMAT), logger, "INFO", when, "MainProcess", 1,
                       s["msg"])
    return None


def _formatter(fmt: str) -> JsonFormatter:
    out = JsonFormatter(fmt)
    out.converter = time.localtime
    return out
