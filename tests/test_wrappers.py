"""Lines wrapped by other programs read as the server's own (the packs' `prefixes`).

Every real fixture is replayed again with each of its lines wrapped as docker compose,
journald, Ray, SkyPilot, a terminal that lost the ESC of its colour codes, kubectl --timestamps,
`aws logs tail`, the kubelet's container log file (CRI) or another program's Python logger would
print it: the engine, the final phase, the crash (its
reason and its line, without the wrapper), the shards and the ready line must not change;
where the wrapper carries no clock of its own, neither may the phase durations.  And two
servers that one compose stream interleaves are one launch, not a restart each line.
"""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import FIXTURES
from support.daemon import sim_texts
from logwatch.app.replay import replay_file
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

CASES = sorted(p.name[: -len(".expect.json")] for p in FIXTURES.glob("*.expect.json"))

# name -> (how a line is wrapped, whether the wrapper has a clock of its own)
WRAPPERS: dict[str, tuple[Callable[[str], str], bool]] = {
    "compose": (lambda ln: f"sglang-server-1  | {ln}", False),
    "podman-compose": (lambda ln: f"[sglang]     | {ln}", False),
    "journald": (lambda ln: f"авг 18 14:15:04 gpu-node-1 python3[28059]: {ln}", False),
    # ja_JP's and ko_KR's month names are padded to two columns (glibc's abmon: " 8月");
    # before, the line kept its journald prefix (29 of 54 shared fixtures read otherwise)
    "journald-ja": (lambda ln: f" 8月 18 14:15:04 gpu-node-1 python3[28059]: {ln}", False),
    # `journalctl -o short-iso` / `-o short-precise` (`cmd:journalctl -u vllm -f -o ...`):
    # before, the first lost only its stamp to kubectl's prefix and the second nothing, so
    # `host python3[N]: ` stayed before the record (vllm-209 never ready, vllm-207 crashed)
    "journald-short-iso": (lambda ln: f"2025-08-18T14:15:04+0300 gpu-node-1 python3[28059]: {ln}",
                           True),
    "journald-short-precise": (
        lambda ln: f"Aug 18 14:15:04.123456 gpu-node-1 python3[28059]: {ln}", False),
    # `kubectl logs -f --prefix` (before, only a JSON record behind it was read: 22 of 124
    # fixture replays ended in another phase)
    "kubectl-prefix": (lambda ln: f"[pod/vllm-7d9c8b6f4-x2k9q/vllm] {ln}", False),
    # stern (`cmd:stern -l app=vllm`): `POD CONTAINER ` (its default template where stdout is
    # no terminal), `-t`'s RFC3339 stamp after them.  Before, 82 of the 238 fixture logs so
    # wrapped read otherwise, 20 in phase, reason or engine
    "stern": (lambda ln: f"vllm-7d9c8b6f4-x2k9q vllm {ln}", False),
    "stern-timestamps": (lambda ln: f"vllm-0 vllm 2026-12-07T10:00:00.123456789Z {ln}", True),
    "ansi-remnant": (lambda ln: f"[0;36m{ln}", False),
    # a log quoted in a reply (an email, an issue comment): before, 5 of 146 logs so quoted
    # read otherwise (vllm-209 never ready)
    "reply-quote": (lambda ln: f"> {ln}", False),
    "kubectl-timestamps": (lambda ln: f"2025-08-18T14:15:04.123456789Z {ln}", True),
    # a container's log file as the kubelet writes it (CRI: /var/log/pods/.../0.log)
    "kubelet-cri": (lambda ln: f"2025-08-18T14:15:04.123456789Z stderr F {ln}", True),
    "python-logger": (lambda ln: f"2025-04-03 12:06:29,948 - __main__ - INFO - {ln}", True),
    # SLURM's `srun --label`: the task's number (a sweep of the 80 shared, TensorRT-LLM and
    # built logs: 4 read otherwise before, old vLLM records and a trtllm-serve usage error)
    "srun-label": (lambda ln: f" 0: {ln}", False),
    # moreutils' `ts` (`vllm serve ... 2>&1 | ts | tee server.log`): its default stamp, `ts -s`,
    # and `ts '%F %T'` (a stamp with the year: the clock may read it, so durations aside).
    # Before, 48, 48 and 72 of the 140 shared, built and TensorRT-LLM logs read otherwise, 5 in
    # phase or reason (vllm-209 never ready, vllm-207 `crashed` while launching)
    "ts": (lambda ln: f"Dec 06 10:00:00 {ln}", False),
    "ts-since-start": (lambda ln: f"00:01:05.123456 {ln}", False),
    "ts-with-year": (lambda ln: f"2026-12-06 10:00:00 {ln}", True),
    # a node's name before each of its lines (pdsh, clush, the DeepSpeed launcher) and Open
    # MPI's `--tag-output`: before, 48 and 46 of the 140 logs read otherwise, 10 in phase or
    # reason (vllm-209 never ready; the node's name stayed before lines without a stamp)
    "pdsh": (lambda ln: f"gpu-node-1: {ln}", False),
    "pdsh-address": (lambda ln: f"10.0.0.12: {ln}", False),
    "mpirun-tag-output": (lambda ln: f"[1,0]<stdout>:{ln}", False),
    # SkyPilot's task output (`sky logs`, `sky serve logs`): before, 60 of 140 logs read
    # otherwise, 12 in phase or reason (vllm-209 never ready, vllm-207 crashed while launching)
    "skypilot": (lambda ln: f"(task, pid=4120) {ln}", False),
    "skypilot-worker": (lambda ln: f"(worker1, rank=1, pid=2399, ip=10.0.0.2) {ln}", False),
    # `aws logs tail` of an ECS task's / SageMaker endpoint's stream: before, the stream stayed
    # before the line (20 of 140 in phase, reason or engine)
    "cloudwatch": (lambda ln: f"2025-08-18T14:15:04.123000+00:00 AllTraffic/i-0abc12 {ln}", True),
    # `cmd:journalctl -u vllm -f -o json` (systemd >= 243's compact form; the older spaced
    # one is test_journald_json_entries_of_every_form_read_as_lines): before, every line
    # was its JSON, 61 of 140 logs read otherwise, SGLang's taken for vLLM's
    "journald-json": (lambda ln: journal_entry(ln), True),
    # `-o json-seq` (RS before each entry, RFC 7464) and `-o json-sse` (`data: ` before it, a
    # blank line after): before, each line was its JSON, 35 of the 54 shared logs otherwise
    "journald-json-seq": (lambda ln: "\x1e" + journal_entry(ln), True),
    "journald-json-sse": (lambda ln: "data: " + journal_entry(ln) + "\n", True),
    # stern's `-o json`, `-o extjson` (with `-A`: the namespace first) and Loki's logcli
    # `-o jsonl`, with its labels and with `--no-labels` (`tailer_json`)
    "stern-json": (lambda ln: tailer_json("stern-json", ln), False),
    "stern-extjson": (lambda ln: tailer_json("stern-extjson", ln), False),
    "stern-extjson-all-namespaces": (lambda ln: tailer_json("stern-extjson-A", ln), False),
    "logcli-jsonl": (lambda ln: tailer_json("logcli-jsonl", ln), True),
    "logcli-jsonl-no-labels": (lambda ln: tailer_json("logcli-jsonl-no-labels", ln), True),
}


def go_json(value: object) -> str:
    """`value` as Go's encoding/json writes it: compact, `<>&` escaped as `\\u003c`..., text
    not valid UTF-8 as U+FFFD, other text raw."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def tailer_json(shape: str, line: str) -> str:
    """A line as stern (`-o json`: `{{json .}}` of its `Log`; `-o extjson`: its template, the
    line itself where it is valid JSON) or logcli (`-o jsonl`: a Go map, sorted keys) print
    it (lines.py `_TAILER_HEAD` says where each shape comes from)."""
    line = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if shape == "stern-json":
        return go_json({"message": line, "nodeName": "gpu-node-1", "namespace": "default",
                        "podName": "vllm-7d9c8b6f4-x2k9q", "containerName": "vllm",
                        "labels": {"app": "vllm"}})
    if shape.startswith("stern-extjson"):
        try:
            json.loads(line)
            message = line
        except ValueError:
            message = go_json(line)
        ns = '"namespace": "default", ' if shape.endswith("-A") else ""
        return f'{{{ns}"pod": "vllm-0", "container": "vllm", "message": {message}}}'
    entry: dict = {"line": line, "timestamp": "2026-12-07T10:00:00.123456789Z"}
    if shape == "logcli-jsonl":
        entry["labels"] = {"app": "vllm", "container": "vllm", "namespace": "default",
                           "pod": "vllm-0", "stream": "stderr"}
    return go_json(dict(sorted(entry.items())))


# Loki's `logcli query --tail '{app="vllm"}'`: its stamp, the stream's labels, the line
LOGCLI_TAIL = ('2026-12-07T10:00:00Z {{app="vllm", container="vllm", namespace="default", '
               'pod="{pod}", stream="stderr"}} ')


def journal_entry(message: str | list[int] | None, spaced: bool = False) -> str:
    """One entry as `journalctl -o json` writes it for a unit's standard output."""
    entry = {"__CURSOR": "s=6f1e;i=2a;b=9d;m=1c;t=63e;x=77", "__REALTIME_TIMESTAMP":
             "1755515704123456", "__MONOTONIC_TIMESTAMP": "4046531", "_BOOT_ID": "9d3b",
             "PRIORITY": "6", "SYSLOG_FACILITY": "3", "_UID": "0", "_GID": "0",
             "_COMM": "python3", "_SYSTEMD_UNIT": "vllm.service", "SYSLOG_IDENTIFIER": "vllm",
             "_PID": "28059", "_HOSTNAME": "gpu-node-1", "MESSAGE": message,
             "_TRANSPORT": "stdout", "_STREAM_ID": "0b6e"}
    if spaced:     # systemd before 243: `{ "__CURSOR" : "s=...", ... }`
        return "{ " + json.dumps(entry, separators=(", ", " : "))[1:-1] + " }"
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False)


def wrapped_copy(src: Path, dst: Path, wrap: Callable[[str], str]) -> None:
    lines = src.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    out = [wrap(ln) if ln.strip() else ln for ln in lines]
    dst.write_text("\n".join(out), encoding="utf-8", errors="surrogateescape")


def verdict(path: Path, with_durations: bool) -> dict:
    doc = summary(pipeline_view(path.name, replay_file(str(path))))
    crash = doc["crash"]
    out = {"engine": doc["engine"], "phase": doc["phase"], "phases_seen": doc["phases_seen"],
           "startups": doc["startups"], "shards": (doc["shards_loaded"], doc["shards_total"]),
           "ready_line": doc["ready_line"],
           "crash": None if crash is None else (crash["reason"], crash["during"], crash["line"])}
    if with_durations:
        out["durations"] = doc.get("durations")
    return out


def cri_records(line: str, size: int, stream: str = "stderr") -> str:
    """A line as the kubelet writes it when it is longer than its record: records of `size`
    bytes at most, tagged P but the last (F)."""
    raw = line.encode("utf-8", "surrogateescape")
    parts = [raw[i:i + size] for i in range(0, len(raw), size)] or [b""]
    return "\n".join(f"2025-08-18T14:15:04.{k:09d}Z {stream} {'P' if k < len(parts) - 1 else 'F'} "
                     + p.decode("utf-8", "surrogateescape") for k, p in enumerate(parts))


@pytest.mark.parametrize("name", CASES)
def test_a_kubelet_log_with_lines_split_into_partial_records_reads_as_the_log(
        name: str, tmp_path: Path) -> None:
    """The kubelet splits a line longer than its record (containerd: 16 KiB) into records
    tagged P, then F.  Split at 40 bytes here (every line of most logs): read as the log."""
    src = FIXTURES / f"{name}.log"
    dst = tmp_path / f"{name}.cri-partial.log"
    wrapped_copy(src, dst, lambda ln: cri_records(ln, 40))
    assert verdict(dst, False) == verdict(src, False)


def test_sglang_s_server_args_over_a_kubelet_record_is_read_whole(tmp_path: Path) -> None:
    """SGLang 0.5.23 logs `server_args=` with its ~550 resolved flags: over 16 KiB, so the
    kubelet writes it as two records.  Every flag is read, as from the server's own log."""
    from logwatch.app.replay import replay_file
    texts = "".join(sim_texts(seed=3)).split("\n")
    i = next(k for k, t in enumerate(texts) if "server_args=" in t)
    flags = ", ".join(f"'flag_{k:03d}_of_the_resolved_dict': None" for k in range(550))
    texts[i] = texts[i].replace("server_args=ServerArgs(", "server_args=ServerArgs(" + flags.replace("'", "").replace(": None", "=None") + ", ")
    assert len(texts[i]) > 16384
    plain, cri = tmp_path / "plain.log", tmp_path / "cri.log"
    plain.write_text("\n".join(texts), encoding="utf-8")
    cri.write_text("\n".join(cri_records(t, 16384) if t.strip() else t for t in texts),
                   encoding="utf-8")
    assert cri.read_text().count(" stderr P ") == 1
    a, b = replay_file(str(plain)).state, replay_file(str(cri)).state
    assert len(b.args) == len(a.args) > 550 and b.args == a.args
    assert not b.args_partial
    assert verdict(cri, False) == verdict(plain, False)


def docker_records(line: str, size: int, stream: str = "stderr") -> str:
    """A line as Docker's json-file driver writes it (moby `jsonlog`: compact JSON, `log`,
    `stream`, `time` in that order, `<>&` escaped as `\\u003c`..., other text raw): records of
    `size` bytes of the line at most, only the last carrying its newline."""
    raw = (line + "\n").encode("utf-8", "surrogateescape")
    parts = [raw[i:i + size] for i in range(0, len(raw), size)]
    out = []
    for k, p in enumerate(parts):
        text = json.dumps(p.decode("utf-8", "replace"), ensure_ascii=False)
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        out.append(f'{{"log":{text},"stream":"{stream}","time":"2025-08-18T14:15:04.{k:09d}Z"}}')
    return "\n".join(out)


@pytest.mark.parametrize("name", CASES)
def test_a_docker_json_file_log_reads_as_the_log(name: str, tmp_path: Path) -> None:
    """A container's log file as Docker writes it (`/var/lib/docker/containers/ID/ID-json.log`,
    the default `json-file` driver): a JSON record a line, a line over 16 KiB split into
    records without its newline (split at 40 bytes here: every line of most logs).  Read as
    the log.  Before: 7 of the 80 logs of ../shared/fixtures, fixtures-trtllm and built/
    ended otherwise, and every line shown was its JSON."""
    src = FIXTURES / f"{name}.log"
    dst = tmp_path / f"{name}-json.log"
    lines = src.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    dst.write_text("\n".join(docker_records(ln, 40) for ln in lines) + "\n", encoding="utf-8",
                   errors="surrogateescape")
    assert verdict(dst, False) == verdict(src, False)


COLOURED = sorted(p for p in (FIXTURES / "built").glob("*.log") if b"\x1b[" in p.read_bytes())


@pytest.mark.parametrize("src", COLOURED, ids=lambda p: p.name)
def test_a_coloured_log_in_docker_s_records_reads_as_the_log(src: Path, tmp_path: Path) -> None:
    """Docker's JSON holds a line's colour codes as `\\u001b[2m`: once the JSON is undone the
    line is cleaned again, as the plain log's is.  Before: the codes stayed, and Dynamo's
    stamp behind them was no stamp (sglang-0523-dynamo-worker lost its download's phase)."""
    assert len(COLOURED) >= 4
    lines = src.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    dst = tmp_path / src.name
    dst.write_text("\n".join(docker_records(ln, 40) for ln in lines if ln) + "\n",
                   encoding="utf-8", errors="surrogateescape")
    assert b"\\u001b[" in dst.read_bytes()
    assert verdict(dst, False) == verdict(src, False)


def test_a_docker_json_file_log_fed_in_pieces_reads_as_replay(tmp_path: Path) -> None:
    """Live (the daemon, watch): the same records fed 97 bytes at a time, lines cut anywhere,
    a bar's `\\r` frames and `\\u003c` escapes included."""
    texts = "".join(sim_texts(seed=5, crash="oom")).split("\n")
    path = tmp_path / "ID-json.log"
    path.write_text("\n".join(docker_records(t, 60) for t in texts if t) + "\n",
                    encoding="utf-8")
    live, replayed = fed_in_pieces(path)
    assert live.phase == replayed.phase == "crashed"
    assert live.crash is not None and live.crash.reason == "cuda_oom"
    assert live.crash.line == replayed.crash.line and "{" not in live.crash.line[:2]


def fed_in_pieces(path: Path) -> tuple[Any, Any]:
    """The log at `path` (JSON records with a bar's `\\r` frames or `<` `>` escaped) fed
    97 bytes at a time, lines cut anywhere: the live state and replay's."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.locate import choose_pack
    data = path.read_bytes()
    assert b"\\r" in data or b"\\u003c" in data or b"\\u003e" in data
    pipe = LogPipeline(choose_pack("auto", data))
    for i in range(0, len(data), 97):
        pipe.feed(data[i:i + 97], 1000.0)
    pipe.finish(1000.0)
    return pipe.state, replay_file(str(path)).state


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("name", CASES)
def test_a_wrapped_log_reads_as_the_log_itself(name: str, wrapper: str, tmp_path: Path) -> None:
    wrap, own_clock = WRAPPERS[wrapper]
    src = FIXTURES / f"{name}.log"
    dst = tmp_path / f"{name}.{wrapper}.log"
    wrapped_copy(src, dst, wrap)
    assert verdict(dst, not own_clock) == verdict(src, not own_clock)


@pytest.mark.parametrize("tags", [("prefill-1  | ", "decode-1   | "),
                                  ("[pod/sglang-0/sglang] ", "[pod/sglang-1/sglang] "),
                                  ("sglang-0 sglang ", "sglang-1 sglang "),
                                  ("inference sglang-0 sglang ", "inference sglang-1 sglang "),
                                  (LOGCLI_TAIL.format(pod="sglang-0"),
                                   LOGCLI_TAIL.format(pod="sglang-1"))])
def test_two_servers_interleaved_in_one_compose_stream_are_one_launch(
        tmp_path: Path, tags: tuple[str, str]) -> None:
    """Prefill and decode servers of one compose file (or two pods under `kubectl logs -l
    ... --prefix`), their lines interleaved: each prints its own server_args and startup;
    the stream is one launch (1 startup, no Restarted), not a restart at every other
    server's line."""
    src = "".join(sim_texts(seed=9)).split("\n")   # a whole SGLang startup, to ready
    a = [f"{tags[0]}{ln}" for ln in src if ln.strip()]
    b = [f"{tags[1]}{ln}" for ln in src if ln.strip()]
    mixed = [x for pair in zip(a, b) for x in pair]
    path = tmp_path / "pd.log"
    path.write_text("\n".join(mixed) + "\n", encoding="utf-8")
    doc = verdict(path, True)
    assert doc["startups"] == 1 and doc["phase"] == "ready", doc
    # the same service printing its startup again is a new startup
    again = mixed + [f"{tags[0]}{ln}" for ln in src if ln.strip()]
    path.write_text("\n".join(again) + "\n", encoding="utf-8")
    assert verdict(path, True)["startups"] == 2


def _compose(lines: list[str], lag: int) -> tuple[list[str], int]:
    """One server's startup as two compose services print it into one stream (`docker
    compose logs -f`): prefill's lines, decode's `lag` lines behind; and the index after
    which prefill has printed all of its lines (its ready line among them) and decode not."""
    def role(line: str, mode: str) -> str:     # what makes each a role of one deployment
        return line.replace("ServerArgs(", f"ServerArgs(disaggregation_mode='{mode}', ") \
            .replace("non-default args: {", "non-default args: {'kv_transfer_config': "
                     "KVTransferConfig(kv_connector='NixlConnector', kv_role='kv_both'), ")
    a = [f"prefill-1  | {role(ln, 'prefill')}" for ln in lines if ln.strip()]
    b = [f"decode-1   | {role(ln, 'decode')}" for ln in lines if ln.strip()]
    b = [x.replace("port=30000", "port=30001").replace("8000", "8001") for x in b]
    mixed = a[:lag] + [x for pair in zip(a[lag:], b) for x in pair] + b[len(a) - lag:]
    return mixed, 2 * len(a) - lag


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_prefill_and_decode_in_one_compose_stream_are_ready_when_both_are(
        engine: str, tmp_path: Path) -> None:
    """PD disaggregation run from one compose file: a prefill and a decode server, each its
    own launch lines (vLLM's version line, then its arguments) and its own ready line, one
    stream.  One launch, ready at the second server's ready line.  Before: "ready" at the
    prefill's (`watch` exited 0 while decode still captured its graphs, then ran out of
    memory); vLLM's decode arguments read as a relaunch (2 startups, a `restarted`)."""
    from logwatch.app.replay import replay_stream
    from logwatch.rules.pack import load_pack
    src = "".join(sim_texts(seed=9)).split("\n") if engine == "sglang" else \
        (FIXTURES / "built" / "vllm-034-default.log").read_text().splitlines()
    src = src[:next(i for i, x in enumerate(src) if "fired up" in x) + 2] \
        if engine == "sglang" else src       # to the ready line (vLLM's: 4 lines before the end)
    mixed, prefill_done = _compose(src, 6)
    pack = load_pack(engine)

    def state(lines: list[str]):
        return replay_stream(io.BytesIO("".join(x + "\n" for x in lines).encode()), pack).state

    half = state(mixed[:prefill_done])
    assert (half.startups, half.phase) == (1, "cuda_graph"), (half.startups, half.phase)
    whole = state(mixed)
    assert (whole.startups, whole.phase) == (1, "ready"), (whole.startups, whole.phase)
    assert whole.procs == {"prefill-1", "decode-1"} and not whole.procs_waiting
    # another service's uvicorn line (a gateway's) is not the launch's ready line
    gateway = "gateway-1  | INFO:     Application startup complete."
    assert state(mixed[:prefill_done // 3] + [gateway]).phase != "ready"
    oom = "decode-1   | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    crashed = state(mixed[:prefill_done] + [oom])
    assert crashed.phase == "crashed" and crashed.crash.during == "cuda_graph"
    # either server printing its launch again is a relaunch: a new startup, of that server
    relaunch = [x for x in mixed if x.startswith("decode-1")][:2]
    again = state(mixed + relaunch)
    assert again.startups == 2 and again.procs == {"decode-1"}
    # a daemon attaching (and over SSH, its remote grep's lines) begins at the prefill's
    # first launch line, not at the decode's (read from there, "ready" at the prefill's)
    from logwatch.rules.locate import latest_startup, startup_locator
    loc = startup_locator(pack)
    assert loc is not None
    for lines, want in ((mixed, 1), (mixed + relaunch, len(mixed) + 1)):
        data = "".join(x + "\n" for x in lines).encode()
        offsets = [0]
        for x in lines:
            offsets.append(offsets[-1] + len(x.encode()) + 1)
        assert latest_startup([pack], [data]) == (offsets[want - 1], want)
        grepped = [(offsets[n], n + 1, x) for n, x in enumerate(lines)]
        assert loc.latest_start(grepped) == (offsets[want - 1], want)


# what vLLM 0.34 prints where no server starts: `vllm run-batch` (launchers/run_batch.py
# :1166-1167) and an offline `LLM` (entrypoints/llm.py:350, its non-default args alone)
RUN_BATCH = ["batch-job-1 | INFO 12-01 10:00:00 [run_batch.py:1166] vLLM batch processing API "
             "version 0.34.0", "batch-job-1 | INFO 12-01 10:00:00 [run_batch.py:1167] args: "
             "Namespace(input_file='batch.jsonl', output_file='out.jsonl', model='Qwen/Qwen3-8B')"]
OFFLINE_LLM = ["offline-1 | INFO 12-01 10:00:00 [startup.py:96] non-default args: "
               "{'model': 'Qwen/Qwen3-8B', 'disable_log_stats': True}"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_process_beside_the_servers_is_waited_for_only_if_it_is_a_server(engine: str) -> None:
    """Which processes of a compose stream print a ready line: each server that is not a
    follower node.  SGLang's `server_args` dump is a server's (`launch_server`; the offline
    `Engine` logs at `error` unless asked), with a PD role or not; vLLM's API server prints
    its version line first, a `vllm run-batch` job or an offline `LLM` never does, and no
    ready line: those are not waited for.  Before, only a process with a PD role was waited
    for: a third server without one read ready at the others' ready lines."""
    from logwatch.app.replay import replay_stream
    from logwatch.rules.pack import load_pack
    src = "".join(sim_texts(seed=9)).split("\n") if engine == "sglang" else \
        (FIXTURES / "built" / "vllm-034-default.log").read_text().splitlines()
    src = src[:next(i for i, x in enumerate(src) if "fired up" in x) + 2] \
        if engine == "sglang" else src
    mixed, _ = _compose(src, 6)
    pack = load_pack(engine)

    def state(lines: list[str]):
        return replay_stream(io.BytesIO("".join(x + "\n" for x in lines).encode()), pack).state

    third = [x.replace("prefill-1  |", "third-1    |").replace("disaggregation_mode='prefill', ", "")
             .replace("'kv_transfer_config': KVTransferConfig(kv_connector='NixlConnector', "
                      "kv_role='kv_both'), ", "") for x in mixed[:2]]
    said = "fired up" if engine == "sglang" else "Application startup complete"
    ready = [x.replace("prefill-1  |", "third-1    |") for x in mixed
             if x.startswith("prefill-1") and said in x][:1]
    alone = state(third + mixed)
    assert (alone.startups, alone.phase != "ready") == (1, True), (alone.startups, alone.phase)
    assert alone.procs_waiting == {"third-1"}, alone.procs_waiting
    assert state(third + mixed + ready).phase == "ready"
    if engine == "vllm":
        for job in (RUN_BATCH, OFFLINE_LLM):
            with_job = state(job + mixed)
            assert (with_job.startups, with_job.phase, with_job.procs_waiting) == \
                (1, "ready", set()), (with_job.startups, with_job.phase)


# ----------------------------------------------------------------------------------------------
# detection reads the lines without their wrappers; it unwraps once per distinct `prefixes`
# and searches only lines holding a pattern's required literal: the scores must be those of
# the definition (every pattern on every unwrapped line)

def _reference_scores(head: bytes, packs: list) -> list[float]:
    from logwatch.lines import Block, iter_lines
    from logwatch.rules.matcher import shared_matcher
    lines = [ln.text for ln in iter_lines(Block(head, 0, 1, 0.0))]
    out = []
    for pack in packs:
        inner = [shared_matcher(pack).unwrap(t)[0] for t in lines]
        out.append(sum(d.weight for d in pack.detect
                       if any(d.regex.search(t) is not None for t in inner)))
    return out


def _detect_packs(tmp_path: Path) -> list:
    from logwatch.rules.pack import load_all_shipped, load_pack
    own = tmp_path / "wrapped-sglang.yaml"     # other prefixes than the shipped packs'
    own.write_text("name: wrapped-sglang\nextends: sglang\nprefixes:\n  - '>>> '\n"
                   "detect:\n  - {pattern: '^\\[\\d{4}-\\d\\d-\\d\\d ', weight: 1}\n"
                   "  - {pattern: '(?i)FIRED UP', weight: 2}\n")
    packs = [*load_all_shipped(), load_pack(str(own))]
    assert packs[-1].prefixes.pattern != packs[1].prefixes.pattern
    return packs


# "vllm-compose": the other engine's literals in the wrapper only (a raw line holds them,
# the unwrapped line does not)
@pytest.mark.parametrize("wrapper", [None, ">>>", "journald", "vllm-compose"])
def test_detection_scores_are_those_of_the_definition(wrapper: str | None,
                                                      tmp_path: Path) -> None:
    from logwatch.rules.locate import detect_scores
    packs = _detect_packs(tmp_path)
    wrap = (lambda ln: ln) if wrapper is None else \
        (lambda ln: f">>> {ln}") if wrapper == ">>>" else \
        (lambda ln: f"vllm-EngineCore-sglang-1  | {ln}") if wrapper == "vllm-compose" else \
        WRAPPERS[wrapper][0]
    found = set()
    for name in CASES:
        lines = (FIXTURES / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        head = "\n".join(wrap(ln) for ln in lines.split("\n")).encode()[: 1 << 16]
        got = detect_scores(head, packs)
        assert got == _reference_scores(head, packs), name
        found |= {i for i, s in enumerate(got) if s}
    assert {1, 2, 3} <= found     # sglang, vllm and the own pack each score somewhere


def test_detection_finds_its_literals_in_one_pass_as_in_tests_do() -> None:
    """`--rules auto` looks for every pack's detect literals in one Hyperscan pass; the
    literals it reports are exactly those a `in` test finds, on every fixture's head and
    on text with multi-byte characters around and inside literals."""
    from logwatch.lines import line_texts
    from logwatch.rules.locate import _literals_in
    from logwatch.rules.pack import load_all_shipped
    lits = tuple(sorted({s for p in load_all_shipped() for d in p.detect
                         if d.literals is not None and not d.literals.ignore_case
                         for s in d.literals.strings}))
    assert len(lits) > 20
    heads = [p.read_bytes()[: 1 << 20] for p in sorted(FIXTURES.glob("*.log"))]
    heads.append(("é€" + "\n".join(lits[::3]) + "ü" + lits[1][:-1] + "\u00e9").encode())
    for head in heads:
        raw = "\n".join(line_texts(head))
        assert _literals_in(raw, lits) == {s for s in lits if s in raw}


def test_a_hostile_line_in_a_docker_log_is_a_line_not_a_crash() -> None:
    """Untrusted input: JSON nested past the parser's depth (a RecursionError, not a
    ValueError), a record of another shape, a half-written record at the end: each is left
    as the line it is; the records around it read."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack("sglang"))
    rec = (b'{"log":"[2026-12-01 10:00:00] Load weight begin. avail mem=78.92 GB\\n",'
           b'"stream":"stderr","time":"2026-12-05T10:00:00.1Z"}\n')
    pipe.feed(rec + b'{"log":' + b'[' * 60000 + b'\n' + b'{"log":1,"stream":"x"}\n' + rec +
              b'{"log":"[2026-12-01 10:00:0', 1.0)
    pipe.finish(1.0)
    assert pipe.state.phase == "loading_shards" and pipe.counters.lines == 5


@pytest.mark.parametrize("tags", [("", ""), ("vllm-1  | ", "vllm-1  | "),
                                  ("vllm-1  | ", "vllm-2  | "),
                                  ("[pod/sglang-5d8f-abcde/sglang] ", "[pod/sglang-5d8f-fghij/sglang] "),
                                  ("sglang-5d8f-abcde sglang ", "sglang-5d8f-fghij sglang "),
                                  (LOGCLI_TAIL.format(pod="sglang-5d8f-abcde"),
                                   LOGCLI_TAIL.format(pod="sglang-5d8f-fghij"))])
def test_another_process_launched_after_the_crash_is_a_new_startup(
        tmp_path: Path, tags: tuple[str, str]) -> None:
    """A server crashed; a replacement under another process name (a Deployment's new pod,
    another compose service) then starts and serves, in one stream.  Before, its launch
    joined the crashed launch: `crashed`, 1 startup, while the new server served (helper
    adv43, cases/k2_replacement_pod_after_crash.py)."""
    crashed = "".join(sim_texts(seed=9, crash="oom")).split("\n")   # its launch, then OOM
    ready = "".join(sim_texts(seed=9)).split("\n")
    lines = [tags[0] + ln for ln in crashed if ln.strip()] + \
        [tags[1] + ln for ln in ready if ln.strip()]
    path = tmp_path / "replaced.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = verdict(path, True)
    assert doc["phase"] == "ready" and doc["startups"] == 2 and doc["crash"] is None, doc


def test_journald_json_entries_of_every_form_read_as_lines() -> None:
    """journalctl's JSON entries: the older spaced form, a MESSAGE not UTF-8 (an array of
    its bytes), one over 4 KiB without `--all` (null), and a line that is no entry."""
    from logwatch.lines import is_json_log_record, records_to_cri
    lines = [journal_entry("[2026-12-06 10:00:00] server_args=ServerArgs(tp_size=8)", True),
             journal_entry(list(b"Loading \xff weights")), journal_entry(None),
             '{"__CURSOR":"x"}', "plain text"]
    data = "\n".join(lines).encode()
    assert is_json_log_record(data)
    out = records_to_cri(data).decode().split("\n")
    assert out[0] == "2025-08-18T11:15:04.123456Z stdout F [2026-12-06 10:00:00] " \
        "server_args=ServerArgs(tp_size=8)"
    assert out[1] == "2025-08-18T11:15:04.123456Z stdout F Loading \ufffd weights"
    assert out[2] == "2025-08-18T11:15:04.123456Z stdout F "
    assert out[3:] == ['{"__CURSOR":"x"}', "plain text"]     # no stamp: not an entry
    assert not is_json_log_record(b'{"__CURSOR":"x"}\n')


# what a command may print on its stderr (read with its output) before the first entry
NOTICES = {
    "ssh": "Warning: Permanently added 'gpu-node-1' (ED25519) to the list of known hosts.\n",
    "journalctl-hint": "Hint: You are currently not seeing messages from other users and the "
    "system.\n      Users in groups 'adm', 'systemd-journal' can see all messages.\n      Pass "
    "-q to turn off this notice.\n",
}


@pytest.mark.parametrize("notice", sorted(NOTICES))
def test_journald_json_entries_after_a_command_s_notice_read_as_the_log(
        notice: str, tmp_path: Path) -> None:
    """`cmd:ssh gpu-node-1 journalctl -u sglang -f -o json`: ssh's known-hosts warning (or
    journalctl's `Hint:` to a user outside `adm`) comes before the first entry.  Every shared
    log reads as itself; and fed 97 bytes at a time, the notice a chunk of its own, as
    replay.  Before: the first line decided for good that no line was an entry, 46 of the 70
    logs read otherwise (SGLang's taken for vLLM's, the ready and crash lines JSON)."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.locate import choose_pack
    bad = []
    for name in CASES:
        src = FIXTURES / f"{name}.log"
        lines = src.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
        dst = tmp_path / f"{name}.log"
        dst.write_text(NOTICES[notice] + "\n".join(journal_entry(ln) if ln.strip() else ln
                                                   for ln in lines),
                       encoding="utf-8", errors="surrogateescape")
        if verdict(dst, False) != verdict(src, False):
            bad.append(name)
    assert not bad, f"{len(bad)} of {len(CASES)} read otherwise: {bad}"
    texts = "".join(sim_texts(seed=5, crash="oom")).split("\n")
    head = NOTICES[notice].encode()
    data = head + "\n".join(journal_entry(t) for t in texts if t).encode() + b"\n"
    pipe = LogPipeline(choose_pack("auto", data))
    pipe.feed(head, 1000.0)
    for i in range(len(head), len(data), 97):
        pipe.feed(data[i:i + 97], 1000.0)
    pipe.finish(1000.0)
    assert pipe.pack.name == "sglang" and pipe.state.phase == "crashed", pipe.state.phase
    assert pipe.state.crash is not None and pipe.state.crash.reason == "cuda_oom"
    assert "__CURSOR" not in (pipe.state.crash.line or "")


@pytest.mark.parametrize("form", ["json", "json-seq", "json-ssh-notice"])
def test_the_latest_launch_among_journald_json_entries_is_found(form: str) -> None:
    """A first attach reads a log from its latest launch (`latest_startup`); journalctl's
    entries as lines there too.  `cmd:journalctl -u sglang -f -o json -n 1000` of a launch
    that crashed 2 hours ago and a relaunch serving now: the relaunch is where reading
    begins, as in the plain log.  Before: the first entry (line 1 of 168): the old crash
    read at the attach as news, paged and counted (`logwatch_crashes_total` 1)."""
    from logwatch.rules.locate import latest_startup
    from logwatch.rules.pack import load_pack
    packs = [load_pack("sglang"), load_pack("vllm")]
    lines = ("".join(sim_texts(seed=1, crash="oom", start=1_767_200_000.0)) +
             "".join(sim_texts(seed=2, start=1_767_207_200.0))).split("\n")
    wrap = {"json": journal_entry, "json-seq": lambda ln: "\x1e" + journal_entry(ln),
            "json-ssh-notice": journal_entry}[form]
    entries = "\n".join(wrap(ln) if ln.strip() else ln for ln in lines)
    if form == "json-ssh-notice":
        entries = NOTICES["ssh"] + entries
    plain, wrapped = "\n".join(lines).encode(), entries.encode()

    def latest(data: bytes) -> int:
        return latest_startup(packs, [data[i:i + 4096] for i in range(0, len(data), 4096)])[1]
    extra = 1 if form == "json-ssh-notice" else 0
    assert latest(plain) > 1
    assert latest(wrapped) == latest(plain) + extra


def zoned_wrapped_copy(src: Path, dst: Path, engine_zone_h: float) -> None:
    """`kubectl logs --timestamps` over a server printing its own zone's time: each line
    behind the UTC moment the log's clock places it at (a bar frame by its bar's start and
    elapsed time; a line before the first stamp at that stamp)."""
    from logwatch.rules.locate import choose_pack
    from logwatch.rules.timestamps import LogClock
    data = src.read_bytes()
    clock = LogClock(choose_pack("auto", data[: 1 << 20]).timestamps, 2025)
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    stamps = [clock.stamp(ln) for ln in lines]
    first = next((s.seconds for s in stamps if s is not None), 0.0)
    out = []
    for ln, st in zip(lines, stamps):
        if not ln.strip():
            out.append(ln)
            continue
        wall = (st.seconds if st is not None else first) - engine_zone_h * 3600
        out.append(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall))
                   + f".{int(wall % 1 * 1e9):09d}Z {ln}")
    dst.write_text("\n".join(out), encoding="utf-8", errors="surrogateescape")


@pytest.mark.parametrize("engine_zone_h", [-7, 8, 5.5])
@pytest.mark.parametrize("name", CASES)
def test_a_wrapper_s_utc_clock_beside_the_server_s_local_one_keeps_the_durations(
        name: str, engine_zone_h: float, tmp_path: Path) -> None:
    """The server prints its zone's local time (Pacific: UTC-7, Beijing: UTC+8, India: UTC+5:30;
    a container with TZ set, or the host's zone mounted), kubectl stamps every line in UTC: a
    line without a stamp of its own (a tqdm bar) has only kubectl's, hours from the server's
    clock.  Read as is, a Pacific server's bars were 7 hours ahead of its own lines (the
    built sglang-0523-download: "ready after 7h03m54s" for a 4-minute start; 27 of these 210
    replays had a phase off by hours).  Each phase lasts what it lasts in the log itself,
    within a minute: the wrapper's clock places what the log left without a time (lines
    before its first stamp; a log with no stamp of its own at all)."""
    src = FIXTURES / f"{name}.log"
    dst = tmp_path / f"{name}.kubectl-zoned.log"
    zoned_wrapped_copy(src, dst, engine_zone_h)
    got, want = verdict(dst, True), verdict(src, True)
    got_d, want_d = got.pop("durations") or {}, want.pop("durations") or {}
    assert got == want
    assert set(got_d) == set(want_d)
    off = {p: round(got_d[p] - want_d[p], 2) for p in want_d if abs(got_d[p] - want_d[p]) >= 60}
    assert not off, f"phases off by a minute or more: {off}"


def test_a_pacific_server_under_kubectl_s_utc_is_ready_after_its_own_four_minutes(
        tmp_path: Path) -> None:
    """The built SGLang 0.5.23 download (4m01s to ready, its bars without stamps) under
    kubectl's UTC, the server on Pacific time: before, "ready after 7h03m54s"; the
    timeline shows every phase's start in the server's own time."""
    from logwatch.sinks.summary import timeline
    src = FIXTURES / "built" / "sglang-0523-download.log"
    dst = tmp_path / "pacific.log"
    zoned_wrapped_copy(src, dst, -7)
    view = pipeline_view(dst.name, replay_file(str(dst)))
    doc = summary(view)
    assert (doc["phase"], round(doc["durations"]["cuda_graph"])) == ("ready", 18)
    assert round(view.total_seconds) == 241
    rows = timeline(view)
    assert "loading_shards  2026-12-01 10:00:09 " in rows, rows
    assert "Z " not in rows and "T" not in rows.replace("(total", ""), rows


# vLLM colours the tag it puts before a child's lines (decorate_logs: `\x1b[1;36m(EngineCore
# pid=N)\x1b[0;0m `), a forked grandchild's tag inside its parent's.  Pasted into an issue or a
# ticket, or exported by a web log viewer, the codes lose their ESC byte and keep their text.
_VLLM_TAG = re.compile(r"\((?:[\w.-]{1,64} )(?:rank=\d+ )?pid=\d+\) ")
TAGGED = sorted(p for d in (FIXTURES, FIXTURES / "built") for p in d.glob("*.log")
                if _VLLM_TAG.match(p.read_text(errors="replace")))


def coloured_tags(line: str, esc: str) -> str:
    """`line` with each of its leading vLLM tags coloured as decorate_logs colours it."""
    out, rest = [], line
    while m := _VLLM_TAG.match(rest):
        out.append(f"{esc}[1;36m{m.group()[:-1]}{esc}[0;0m ")
        rest = rest[m.end():]
    return "".join(out) + rest


@pytest.mark.parametrize("esc", ["\x1b", "", "\ufffd"],
                         ids=["colours", "colours-without-esc", "colours-esc-replaced"])
@pytest.mark.parametrize("src", TAGGED, ids=lambda p: p.name)
def test_vllm_s_coloured_tags_read_as_the_log_with_or_without_their_esc(
        src: Path, esc: str, tmp_path: Path) -> None:
    """Before, a vLLM 0.11 fork-mode log whose codes had lost their ESC (or had it replaced by
    U+FFFD, as in vllm-214) was never ready: the reset after the tag, `)[0;0m INFO`, kept every
    tag-anchored rule from matching (42 of the 49 tagged logs read otherwise)."""
    dst = tmp_path / src.name
    wrapped_copy(src, dst, lambda ln: coloured_tags(ln, esc))
    assert verdict(dst, True) == verdict(src, True)


def collapsed_indent(line: str) -> str:
    """A line as a traceback pasted as plain text shows it: the blanks before the message gone
    (after vLLM's tags and envelope), as in vllm-214."""
    return re.sub(r"^((?:\([^)]*\) )*(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\] )?)\s+", r"\1",
                  line)


# A log pasted into an issue, a chat or a wiki page as plain text, and copied back out
PASTES: dict[str, Callable[[str], str]] = {
    "collapsed-indent": collapsed_indent,
    # a chat's or a wiki's copy: each run of blanks `\xa0 `
    "no-break-spaces": lambda ln: ln.replace("  ", "\xa0 "),
}


@pytest.mark.parametrize("paste", sorted(PASTES))
@pytest.mark.parametrize("src", sorted(FIXTURES.glob("*.log")) + sorted(
    (FIXTURES / "built").glob("*.log")), ids=lambda p: getattr(p, "name", p))
def test_a_log_pasted_as_plain_text_reads_as_the_log(src: Path, paste: str,
                                                     tmp_path: Path) -> None:
    """Before, 4 of 146 logs with their tracebacks' indent collapsed named a quoted `raise
    ...(f"NCCL error: ...")` line as the crash's (base.yaml's ignore: code is no error), and 10
    of 146 copied with no-break spaces read otherwise (a phase, uvicorn's envelope)."""
    dst = tmp_path / src.name
    wrapped_copy(src, dst, PASTES[paste])
    want, got = verdict(src, False), verdict(dst, False)
    if paste == "collapsed-indent" and want["crash"] and got["crash"]:  # the line as pasted
        want["crash"] = want["crash"][:2] + (collapsed_indent(want["crash"][2]),)
    assert got == want


# ----------------------------------------------------------------------------------------------
# stern and Loki's logcli (`cmd:` targets on Kubernetes)

@pytest.mark.parametrize("name", CASES)
def test_a_logcli_log_reads_as_the_log_it_prints(name: str, tmp_path: Path) -> None:
    """logcli's default output trims each line (a traceback's indent goes), so the wrapped
    log reads as the log so trimmed: `--tail`'s full label set with the pod, and a query's
    (the labels every stream shares left out, the rest padded to the longest set; `{}` when
    none is left), in its zone's offset.  Before, kubectl's stamp came off and the labels
    stayed: 94 of the 238 fixture logs read otherwise, 29 in phase, reason or engine."""
    lines = (FIXTURES / f"{name}.log").read_text(encoding="utf-8",
                                                 errors="surrogateescape").split("\n")
    trimmed = tmp_path / "trimmed.log"
    trimmed.write_text("\n".join(ln.strip() for ln in lines), encoding="utf-8",
                       errors="surrogateescape")
    want = verdict(trimmed, False)
    for i, tag in enumerate((LOGCLI_TAIL.format(pod="vllm-0"),
                             '2026-12-07T11:00:00+01:00 {stream="stderr"}  ',
                             "2026-12-07T10:00:00.5Z {} ")):
        dst = tmp_path / f"{name}.logcli-{i}.log"
        dst.write_text("\n".join(tag + ln.strip() if ln.strip() else ln for ln in lines),
                       encoding="utf-8", errors="surrogateescape")
        assert verdict(dst, False) == want, tag


STERN_LOGS = ["vllm-034-default", "sglang-0523-download", "trtllm-dynamo-worker"]


@pytest.mark.parametrize("name", STERN_LOGS)
def test_two_pods_under_stern_are_one_launch_and_a_pod_s_relaunch_a_new_startup(
        name: str, tmp_path: Path) -> None:
    """`stern -l app=...` over two replicas, each printing a whole startup (a built log:
    its tracebacks' frames, bars without stamps), their lines interleaved: one launch of two
    processes, ready when both are; one pod printing its launch again is a new startup (a
    container restarted), the other's lines no relaunch."""
    from logwatch.rules.locate import choose_pack
    src = [ln for ln in (FIXTURES / "built" / f"{name}.log").read_text(
        encoding="utf-8", errors="surrogateescape").split("\n") if ln.strip()]
    a = [f"{name[:6]}-0 server {ln}" for ln in src]
    b = [f"{name[:6]}-1 server {ln}" for ln in src]
    mixed = [x for pair in zip(a, b) for x in pair]
    path = tmp_path / "pods.log"
    path.write_text("\n".join(mixed) + "\n", encoding="utf-8", errors="surrogateescape")
    alone = verdict(FIXTURES / "built" / f"{name}.log", False)
    doc = verdict(path, False)
    assert (doc["phase"], doc["startups"], doc["engine"]) == ("ready", 1, alone["engine"]), doc
    state = replay_file(str(path)).state
    assert state.procs == {f"{name[:6]}-0", f"{name[:6]}-1"} and not state.procs_waiting
    path.write_text("\n".join(mixed + a) + "\n", encoding="utf-8", errors="surrogateescape")
    assert verdict(path, False)["startups"] == 2
    assert choose_pack("auto", path.read_bytes()[: 1 << 16]).name == alone["engine"]


def _known_lines() -> list[tuple[str, str]]:
    """(pack, line): every rule's samples and every statement of tests/inventory."""
    import yaml
    from logwatch.rules.pack import load_pack
    out = [(name, s.line) for name in ("sglang", "vllm", "trtllm")
           for r in load_pack(name).rules for s in r.samples]
    for inv in sorted((FIXTURES.parent / "inventory").glob("*.yaml")):
        doc = yaml.safe_load(inv.read_text())
        out += [(doc["pack"], st["line"]) for st in doc["statements"] if st.get("line")]
    return list(dict.fromkeys(out))


def test_every_line_the_packs_know_reads_the_same_behind_stern_and_logcli() -> None:
    """Every rule sample and every statement the inventories list (the engines' own format
    strings), behind stern's names (a controller's pod, `-A`'s namespace first) and
    logcli's stamp and labels, means what it means bare.  Behind a pod name without a `-`
    (a bare pod, `kubectl run vllm`) the names come off only before what the engines begin
    a line with, not before any capitalised word: those lines keep them.  Before, 736 of the
    3772 lines read otherwise behind `vllm-0 vllm `."""
    from logwatch.rules.check import line_meaning
    from logwatch.rules.pack import load_pack
    packs = {name: load_pack(name) for name in ("sglang", "vllm", "trtllm")}
    lines = _known_lines()
    assert len(lines) > 3000
    for tag in ("vllm-0 vllm ", "inference vllm-0 vllm ", LOGCLI_TAIL.format(pod="vllm-0"),
                "2026-12-07T10:00:00Z {}   "):
        differ = [ln for name, ln in lines if line_meaning(packs[name], tag + ln)
                  != line_meaning(packs[name], ln)]
        assert not differ, (tag, len(differ), differ[:5])
    bare_pod = [ln for name, ln in lines if line_meaning(packs[name], f"vllm vllm {ln}")
                != line_meaning(packs[name], ln)]
    assert all(re.match(r"[A-Z][a-z]+ ", ln) for ln in bare_pod), bare_pod
    assert len(bare_pod) < 10, bare_pod


def _k8s_prefixes() -> list[re.Pattern]:
    """stern's and logcli's patterns of rules/base.yaml's `prefixes:`, each alone."""
    import regex
    import yaml
    doc = yaml.safe_load((FIXTURES.parents[1] / "rules" / "base.yaml").read_text())
    pats = [p for p in doc["prefixes"]
            if p.startswith("(?P<proc>[a-z0-9](?:[a-z0-9-]{0,62}+ [a-z0-9])?")
            or p.startswith(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) \{")]
    assert len(pats) == 4
    return [regex.compile(p) for p in pats]


def test_stern_s_and_logcli_s_prefixes_take_no_line_of_an_unwrapped_log() -> None:
    """Two lower-case names and a blank begin many a line (`rank 0 using MpiPoolSession`,
    `sglang serve --model-path ...`): no line of the fixture logs is taken for stern's
    names or logcli's labels, so a bare log reads as it did (its replay byte-identical)."""
    rxs = _k8s_prefixes()
    logs = sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "built").glob("*.log"))
    taken, seen = [], 0
    for path in logs:
        for ln in path.read_text(encoding="utf-8", errors="replace").replace("\r", "\n") \
                .split("\n"):
            seen += 1
            taken += [(path.name, ln) for rx in rxs if rx.match(ln)]
    assert seen > 6000 and not taken, taken[:5]
    assert all(any(rx.match(w + "INFO 12-07 10:00:00 [x.py:1] up") for rx in rxs)
               for w in ("vllm-0 vllm ", LOGCLI_TAIL.format(pod="vllm-0"), "1970-01-01T00:00:00Z {} "))


@pytest.mark.parametrize("shape", ["stern-json", "stern-extjson", "logcli-jsonl"])
def test_a_tailer_s_json_lines_fed_in_pieces_read_as_replay(shape: str, tmp_path: Path) -> None:
    """Live (the daemon, `cmd:stern ... -o json`): stern's and logcli's JSON lines fed 97
    bytes at a time, lines cut anywhere, a bar's `\\r` frames and `\\u003c` escapes
    included: the crash and its line as replay reads them, the line as the log's own."""
    texts = [t for t in "".join(sim_texts(seed=5, crash="oom")).split("\n") if t]
    path = tmp_path / "tailer.log"
    path.write_text("\n".join(tailer_json(shape, t) for t in texts) + "\n", encoding="utf-8")
    live, replayed = fed_in_pieces(path)
    bare = tmp_path / "bare.log"
    bare.write_text("\n".join(texts) + "\n", encoding="utf-8")
    own = replay_file(str(bare)).state
    assert live.phase == replayed.phase == own.phase == "crashed"
    assert live.crash is not None and live.crash.reason == own.crash.reason
    assert live.crash.line == replayed.crash.line
    assert live.crash.line.endswith(own.crash.line) and "{" not in live.crash.line


def test_json_logging_records_inside_a_tailer_s_json_lines_read_as_records() -> None:
    """vLLM's `--logging-config.formatter json` under stern: `-o json` holds the record as
    a string, `-o extjson` as the object itself (`extjson`: a line valid as JSON stands as
    written); logcli's `line` as a string.  Each reads as the record, the pod a process."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    rec = json.dumps({"asctime": "2026-12-01 10:04:33,000", "levelname": "INFO",
                      "name": "vllm.entry", "processName": "MainProcess", "process": 100,
                      "message": "Starting vLLM server on http://0.0.0.0:8000"})
    for shape in ("stern-json", "stern-extjson", "stern-extjson-A", "logcli-jsonl"):
        wrapped = tailer_json(shape, rec)
        assert ("levelname" in wrapped) and (shape != "stern-extjson" or rec in wrapped)
        pipe = LogPipeline(load_pack("vllm"))
        pipe.feed(wrapped.encode() + b"\n", 1.0)
        pipe.finish(1.0)
        assert pipe.state.phase == "ready", shape
        assert pipe.state.ready_line.endswith("[entry.py] Starting vLLM server on "
                                              "http://0.0.0.0:8000"), shape
        assert pipe.state.procs <= {"vllm-0", "vllm-7d9c8b6f4-x2k9q"}, shape


HOSTILE_TAILER_LINES = [
    b'{"pod": "' + b'[' * 60000,                           # nested past the parser's depth
    b'{"podName":"vllm-0","containerName":"vllm","message":["x"]}',   # another type
    b'{"pod": "vllm-0", "container": 7, "message": "x"}',
    b'{"pod": "vllm-0", "container": "vllm", "message": {"a": [' + b'[' * 5000 + b']]}}',
    b'{"labels":"pod","line":"x","timestamp":"2026-12-07T10:00:00Z"}',
    b'{"labels":{"pod":["vllm-0"]},"line":"x","timestamp":"2026-12-07T10:00:00Z"}',
    b'{"line":"x","timestamp":"yesterday"}',
    b'{"pod": "VLLM 0] Killed", "container": "vllm", "message": "x"}',
]


@pytest.mark.parametrize("line", HOSTILE_TAILER_LINES, ids=range(len(HOSTILE_TAILER_LINES)))
def test_a_hostile_line_among_a_tailer_s_json_lines_is_a_line_not_a_crash(line: bytes) -> None:
    """Untrusted input: a line of a tailer's shape that is no record of it (fields of other
    types, nesting past the parser's depth, a stamp that is none, a pod name that is no
    pod's) is left as the line it is, or read from what it holds; the records around it
    read, and the pod name never becomes a prefix a rule sees."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack("sglang"))
    rec = tailer_json("stern-json", "[2026-12-01 10:00:00] Load weight begin. "
                                    "avail mem=78.92 GB").encode() + b"\n"
    pipe.feed(rec + line + b"\n" + rec + b'{"message":"[2026-12-01 10:00:0', 1.0)
    pipe.finish(1.0)
    assert pipe.state.phase == "loading_shards" and pipe.counters.lines == 4
    assert pipe.state.crash is None and pipe.state.spans[-1].line == \
        "[2026-12-01 10:00:00] Load weight begin. avail mem=78.92 GB"
