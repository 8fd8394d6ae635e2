"""A Dynamo worker's log as `DYN_LOGGING_CONSOLE_FORMAT=jsonl` (legacy `DYN_LOGGING_JSONL=1`)
writes it (ai-dynamo 1.6.1), made from the text form of the same log.

What the text form's Rust runtime line (`2026-12-01T10:00:02.803114Z  INFO main.worker: msg`,
ANSI-coloured) becomes, read from `dynamo/_core.abi3.so` (lib/runtime/src/logging.rs,
`ConsoleEventFormatter::format_event` and the `serde_json::to_vec` of its `JsonLog`): one
compact JSON object a line, its keys in this order: `time` (the same stamp, `%Y-%m-%dT%H:%M:
%S%.6fZ`, or `%:z` with DYN_LOG_USE_LOCAL_TZ), `level` (tracing's `INFO` / `WARN` / `ERROR`),
`file` and `line` (where present), `target`, `message` (a string: a Python record's whole
`self.format(record)`, a logged traceback after `\\n`), then the event's other fields and its
span's, flattened in key order.  For a Python record (`LogHandler` -> `log_message` -> the
`log` crate -> tracing-log) the target, file and line are the record's `module.funcName`,
pathname and lineno (`normalized_metadata`), and tracing-log's own `log.file`, `log.line`,
`log.target` fields follow the message (inferred: the visitor keeps every field, and no
`log.` key is removed in the formatter's code).  The paths and line numbers written here
stand in for the real ones: logwatch reads neither.

Not every line of a worker's log is such a record: tqdm's bars, the engine core's and
TensorRT-LLM's own handlers, an uncaught traceback stay text, and so do vLLM's own records in
a vLLM worker's main process (runtime/logging.py `configure_vllm_logging`: the `vllm`
logger's StreamHandler with `VllmColorFormatter`, which never passes the Rust runtime).
"""

from __future__ import annotations

import json
import re

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# the text form's Rust runtime line, its colours removed
RUST_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(?:Z|[+-]\d\d:\d\d)) +"
    r"(?P<level>TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL) (?P<target>[\w.<>:]+): "
    r"(?P<msg>.*)$")
# vLLM's own records in the built vLLM worker's main process (vllm/config/model.py): written
# by `VllmColorFormatter`, text under jsonl too
VLLM_MAIN_TARGETS = frozenset({"model.__post_init__", "model.get_and_verify_max_len"})
# what `log_message` makes of Python's level names (the `log` crate has no CRITICAL)
_LEVELS = {"WARNING": "WARN", "CRITICAL": "ERROR"}


def dynamo_record(time: str, level: str, target: str, message: str) -> str:
    """One record as the jsonl formatter writes it (serde_json's compact form: no spaces,
    non-ASCII as UTF-8, control characters escaped)."""
    module = target.split(".", 1)[0]
    path = f"/opt/dynamo/venv/lib/python3.12/site-packages/{module}.py"
    rec = {"time": time, "level": _LEVELS.get(level, level), "file": path, "line": 1,
           "target": target, "message": message,
           "log.file": path, "log.line": 1, "log.target": target}
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":"))


def dynamo_jsonl_lines(text: str, keep: frozenset[str] = VLLM_MAIN_TARGETS) -> list[str]:
    """The lines of a Dynamo worker's text log as they read under jsonl: each Rust runtime
    line a JSON record (its colours gone: the formatter writes none), but those of the
    targets in `keep` (vLLM's own, `VllmColorFormatter`'s); every other line as it is."""
    out = []
    for line in text.split("\n"):
        m = RUST_LINE.match(ANSI.sub("", line))
        if m is None or m["target"] in keep:
            out.append(line)
            continue
        out.append(dynamo_record(m["time"], m["level"], m["target"], m["msg"]))
    return out


def dynamo_jsonl(text: str, keep: frozenset[str] = VLLM_MAIN_TARGETS) -> str:
    """`text` (a Dynamo worker's text log) as it reads under jsonl."""
    return "\n".join(dynamo_jsonl_lines(text, keep))
