"""Lines wrapped by other programs read as the server's own (the packs' `prefixes`).

Every real fixture is replayed again with each of its lines wrapped as docker compose,
journald, Ray, a terminal that lost the ESC of its colour codes, kubectl --timestamps or
another program's Python logger would print it: the engine, the final phase, the crash (its
reason and its line, without the wrapper), the shards and the ready line must not change;
where the wrapper carries no clock of its own, neither may the phase durations.  And two
servers that one compose stream interleaves are one launch, not a restart each line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from conftest import FIXTURES
from daemonutil import sim_texts
from logwatch.app.replay import replay_file
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

CASES = sorted(p.name[: -len(".expect.json")] for p in FIXTURES.glob("*.expect.json"))

# name -> (how a line is wrapped, whether the wrapper has a clock of its own)
WRAPPERS: dict[str, tuple[Callable[[str], str], bool]] = {
    "compose": (lambda ln: f"sglang-server-1  | {ln}", False),
    "podman-compose": (lambda ln: f"[sglang]     | {ln}", False),
    "journald": (lambda ln: f"авг 18 14:15:04 gpu-node-1 python3[28059]: {ln}", False),
    "ansi-remnant": (lambda ln: f"[0;36m{ln}", False),
    "kubectl-timestamps": (lambda ln: f"2025-08-18T14:15:04.123456789Z {ln}", True),
    "python-logger": (lambda ln: f"2025-04-03 12:06:29,948 - __main__ - INFO - {ln}", True),
}


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


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("name", CASES)
def test_a_wrapped_log_reads_as_the_log_itself(name: str, wrapper: str, tmp_path: Path) -> None:
    wrap, own_clock = WRAPPERS[wrapper]
    src = FIXTURES / f"{name}.log"
    dst = tmp_path / f"{name}.{wrapper}.log"
    wrapped_copy(src, dst, wrap)
    assert verdict(dst, not own_clock) == verdict(src, not own_clock)


def test_two_servers_interleaved_in_one_compose_stream_are_one_launch(tmp_path: Path) -> None:
    """Prefill and decode servers of one compose file, their lines interleaved: each prints
    its own server_args and startup; the stream is one launch (1 startup, no Restarted),
    not a restart at every other server's line."""
    src = "".join(sim_texts(seed=9)).split("\n")   # a whole SGLang startup, to ready
    a = [f"prefill-1  | {ln}" for ln in src if ln.strip()]
    b = [f"decode-1   | {ln}" for ln in src if ln.strip()]
    mixed = [x for pair in zip(a, b) for x in pair]
    path = tmp_path / "pd.log"
    path.write_text("\n".join(mixed) + "\n", encoding="utf-8")
    doc = verdict(path, True)
    assert doc["startups"] == 1 and doc["phase"] == "ready", doc
    # the same service printing its startup again is a new startup
    again = mixed + [f"prefill-1  | {ln}" for ln in src if ln.strip()]
    path.write_text("\n".join(again) + "\n", encoding="utf-8")
    assert verdict(path, True)["startups"] == 2
