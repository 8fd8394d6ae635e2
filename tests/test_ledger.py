"""The launch ledger: `logwatch history` / `compare` on a log of two launches whose flags
differ (the founding case: --max-running-requests 64 -> 2048, --disable-cuda-graph), each
serving at a steady throughput after a minute of warm-up."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from support.daemon import sim_texts
from logwatch.app.history import read_ledger
from logwatch.ledger import percentile
from logwatch.rules.advice import advice_lines
from logwatch.rules.pack import load_pack

T0 = 1_767_261_600.0   # 2026-01-01 10:00:00 UTC (the simulator's clock)


def launch(seed: int, start: float, args: str, steady: float, minutes: float = 5.0) -> str:
    """One launch: the simulator's startup to ready with our server_args, then serving lines
    every 2 s: 60 s of warm-up at a third of `steady`, then `steady` +-3 %."""
    texts = sim_texts(seed=seed, start=start, serve_lines=0)
    texts = [re.sub(r"server_args=ServerArgs\(.*\)", f"server_args=ServerArgs({args})", t)
             for t in texts]
    body = "".join(texts)
    last = re.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", body, re.M)[-1]
    import calendar
    import time as _t
    t = calendar.timegm(_t.strptime(last, "%Y-%m-%d %H:%M:%S"))
    rng = random.Random(seed)
    lines = []
    for i in range(int(minutes * 30)):
        t += 2
        warm = i < 30
        tps = (steady / 3 if warm else steady) * rng.uniform(0.97, 1.03)
        stamp = _t.strftime("%Y-%m-%d %H:%M:%S", _t.gmtime(t))
        lines.append(f"[{stamp} TP0] Decode batch, #running-req: {rng.randint(40, 60)}, #token: "
                     f"40000, token usage: 0.{rng.randint(10, 40)}, cuda graph: "
                     f"{'False' if 'disable_cuda_graph=True' in args else 'True'}, "
                     f"gen throughput (token/s): {tps:.2f}, #queue-req: {rng.randint(0, 3)}\n")
    return body + "".join(lines)


ARGS_1 = ("model_path='zai-org/GLM-5-FP8', tp_size=8, max_running_requests=64, "
          "disable_cuda_graph=False, cuda_graph_max_bs=256, mem_fraction_static=0.88, "
          "random_seed=123")
ARGS_2 = ("model_path='zai-org/GLM-5-FP8', tp_size=8, max_running_requests=2048, "
          "disable_cuda_graph=True, cuda_graph_max_bs=256, mem_fraction_static=0.88, "
          "random_seed=456")


def two_launches(tmp_path: Path) -> Path:
    log = tmp_path / "server.log"
    log.write_text(launch(1, T0, ARGS_1, 880.0) + launch(2, T0 + 3600, ARGS_2, 3740.0),
                   encoding="utf-8")
    return log


@pytest.mark.integration
def test_history_json_of_two_launches(tmp_path: Path) -> None:
    log = two_launches(tmp_path)
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", str(log), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(docs) == 2
    first, second = docs
    assert first["outcome"] == second["outcome"] == "ready"
    assert first["model"] == "zai-org/GLM-5-FP8" and first["args"]["tp_size"] == 8
    assert second["changed"] == {"max_running_requests": [64, 2048],
                                 "disable_cuda_graph": [False, True]}
    for doc, steady in ((first, 880.0), (second, 3740.0)):
        p50 = doc["serving"]["gen_throughput"]["p50"]
        assert abs(p50 - steady) / steady < 0.05, (p50, steady)
        assert doc["serving"]["warmup_samples"] >= 25
        assert doc["durations"] and doc["startup_seconds"] > 0
        assert set(doc["durations"]) <= {"launching", "downloading", "loading_shards",
                                         "allocating", "autotune", "cuda_graph"}
    assert second["serving"]["no_cuda_graph_share"] == 1.0
    assert any("CUDA graphs are off" in a for a in second["advice"])
    # graphs off: no batch runs with one, "batches above 256 run without" would mislead (issue 32)
    assert not any("batches above" in a for a in second["advice"]), second["advice"]


@pytest.mark.integration
def test_history_table_and_compare(tmp_path: Path) -> None:
    log = two_launches(tmp_path)
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", str(log)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()
    assert rows[0].split()[:3] == ["#", "when", "outcome"] and len(rows) == 3
    assert "max_running_requests 64 -> 2048" in rows[2] and "disable_cuda_graph False -> True" in rows[2]
    res = subprocess.run([sys.executable, "-m", "logwatch", "compare", str(log)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "startup #1" in out and "#2" in out
    tps = re.search(r"tok/s p50\s+(\d+)\s+(\d+)\s+x([\d.]+)", out)
    assert tps is not None, out
    assert abs(int(tps.group(1)) - 880) < 44 and abs(int(tps.group(2)) - 3740) < 187
    assert "flags changed: max_running_requests 64 -> 2048" in out
    for phase in ("launching", "loading_shards", "cuda_graph"):
        assert re.search(rf"^\s+{phase}\s+\S+\s+\S+\s+[+-]", out, re.M), (phase, out)
    bad = subprocess.run([sys.executable, "-m", "logwatch", "compare", str(log), "1", "7"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "no startup 7" in bad.stderr


def test_a_crashed_and_an_incomplete_startup_are_recorded(tmp_path: Path) -> None:
    crash = "".join(sim_texts(seed=3, start=T0, crash="oom"))
    cut = "".join(sim_texts(seed=4, start=T0 + 3600))[:3000]   # stops mid-startup
    log = tmp_path / "two.log"
    log.write_text(crash + cut, encoding="utf-8")
    recs: list = []
    read_ledger(str(log), "auto", recs.append)
    assert [r.outcome for r in recs] == ["crashed", "incomplete"]
    assert recs[0].reason == "cuda_oom" and recs[0].serving == {}
    assert recs[1].durations, recs[1]


def test_a_crash_while_serving_is_no_slow_startup(tmp_path: Path) -> None:
    """Ready in ~40 s, served 3 minutes, then a scheduler OOM; then a relaunch.  Before: the
    first launch recorded as "startup 3m4xs" (launch to the crash), `compare` -3m against the
    next, its ready time lost (`logwatch_last_startup_seconds` NaN) (helper adv25 M6).  Now
    its startup is launch to ready, and how long it served is said."""
    import calendar
    import time as _t
    first = launch(1, T0, ARGS_1, 880.0, minutes=3.0)
    last = re.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", first, re.M)[-1]
    at = _t.strftime("%Y-%m-%d %H:%M:%S", _t.gmtime(
        calendar.timegm(_t.strptime(last, "%Y-%m-%d %H:%M:%S")) + 2))
    crash = (f"[{at} TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2786,'
             " in run_scheduler_process\n"
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has "
             "a total capacity of 79.11 GiB of which 1.12 GiB is free.\n"
             f"[{at}] Received sigquit from a child process. It usually means the child failed.\n")
    log = tmp_path / "server.log"
    log.write_text(first + crash + launch(2, T0 + 3600, ARGS_2, 3740.0), encoding="utf-8")
    recs: list = []
    read_ledger(str(log), "sglang", recs.append)
    assert [(r.outcome, r.reason) for r in recs] == [("crashed", "cuda_oom"), ("ready", None)]
    one, two = recs
    assert one.startup_seconds is not None and one.startup_seconds < 120, one.startup_seconds
    assert abs(one.startup_seconds - two.startup_seconds) < 30
    assert one.served_seconds is not None and 170 <= one.served_seconds <= 190, one.served_seconds
    assert one.got_ready and "cuda_graph" in one.durations
    res = subprocess.run([sys.executable, "-m", "logwatch", "history", str(log)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    assert re.search(r"crashed: cuda_oom after serving 3m0\ds", res.stdout), res.stdout


def test_percentile_and_advice() -> None:
    assert percentile([], 0.5) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    sglang = load_pack("sglang").advice
    assert advice_lines(sglang, {"mem_fraction_static": 0.92}, "crashed", "cuda_oom", {}) == [
        "an out-of-memory crash with mem_fraction_static 0.92: leave the activations more room "
        "(e.g. 0.85)"]
    assert advice_lines(sglang, {"cuda_graph_max_bs": 512, "max_running_requests": 256}, "ready",
                        None, {}) == []


def test_serving_samples_leave_nothing_for_the_garbage_collector() -> None:
    """A serving window holds its samples in flat arrays: 10,000 stats lines add no object
    the collector tracks (tuples holding dicts stay tracked for good: at 500 serving targets
    they made a full collection of the heap every few seconds), and the summary reads them
    as the (time, values) samples did."""
    import gc

    from logwatch.ledger import WARMUP, ServingWindow

    win = ServingWindow(ready_at=0.0)
    gc.collect()
    before = len(gc.get_objects())
    for i in range(10_000):
        vals = {"gen_throughput": float(i % 7), "running_requests": 3.0, "cuda_graph": 1.0}
        if i % 2:
            vals["token_usage"] = 0.25
        win.add(float(i), vals)
    gc.collect()
    assert len(gc.get_objects()) - before < 50
    doc = win.summary()
    steady = range(int(WARMUP), 10_000)
    assert doc["samples"] == len(steady) and doc["warmup_samples"] == int(WARMUP)
    assert doc["gen_throughput"] == {
        "p50": percentile([float(i % 7) for i in steady if i % 7], 0.5), "max": 6.0}
    assert doc["token_usage"] == {"max": 0.25}
    assert doc["no_cuda_graph_share"] == 0.0
    assert "queued_requests" not in doc             # never on a line: absent, not 0


def _advice_before_packs(args, outcome, reason, serving):  # type: ignore[no-untyped-def]
    """ledger.advice_for as it was in Python (SGLang's and vLLM's flags in one function),
    the reference the packs' `advice:` entries must reproduce."""
    out = []
    bs, mrr = args.get("cuda_graph_max_bs"), args.get("max_running_requests")
    if isinstance(bs, (int, float)) and isinstance(mrr, (int, float)) and bs < mrr and \
            not args.get("disable_cuda_graph"):   # graphs off: not this line (issue 32)
        out.append(f"batches above {bs:g} run without CUDA graphs (cuda_graph_max_bs {bs:g} < "
                   f"max_running_requests {mrr:g})")
    if args.get("disable_cuda_graph") is True or args.get("enforce_eager") is True:
        which = "disable_cuda_graph" if args.get("disable_cuda_graph") is True else "enforce_eager"
        out.append(f"CUDA graphs are off ({which}): every decode batch runs eagerly, usually "
                   "far slower")
    share = serving.get("no_cuda_graph_share")
    if isinstance(share, float) and share >= 0.2 and not args.get("disable_cuda_graph"):
        out.append(f"{share:.0%} of decode batches ran without CUDA graphs")
    mem = args.get("mem_fraction_static", args.get("gpu_memory_utilization"))
    if outcome == "crashed" and reason == "cuda_oom" and isinstance(mem, (int, float)) and mem >= 0.9:
        key = "mem_fraction_static" if "mem_fraction_static" in args else "gpu_memory_utilization"
        out.append(f"an out-of-memory crash with {key} {mem:g}: leave the activations more "
                   "room (e.g. 0.85)")
    return out


@pytest.mark.parametrize("pack_name, flags", [
    ("sglang", {"cuda_graph_max_bs": [None, 80, 512, True], "max_running_requests": [None, 256, 64.0],
                "disable_cuda_graph": [None, True, False, "true"], "mem_fraction_static": [None, 0.85, 0.92, "x"]}),
    ("vllm", {"enforce_eager": [None, True, False], "gpu_memory_utilization": [None, 0.9, 0.95, 0.5],
              "tensor_parallel_size": [None, 2]}),
])
def test_the_packs_advice_is_what_the_python_said(pack_name, flags) -> None:  # type: ignore[no-untyped-def]
    """Every combination of the engine's flags (absent, numbers, booleans, junk), each outcome
    and serving share: the pack's `advice:` gives the sentences ledger.advice_for gave."""
    import itertools
    entries = load_pack(pack_name).advice
    names = list(flags)
    n = 0
    for values in itertools.product(*flags.values()):
        args = {k: v for k, v in zip(names, values) if v is not None}
        for outcome, reason in (("ready", None), ("crashed", "cuda_oom"), ("crashed", "nccl_error")):
            for serving in ({}, {"no_cuda_graph_share": 0.5}, {"no_cuda_graph_share": 0.1}):
                if pack_name == "vllm" and serving:
                    continue     # the share comes from SGLang's decode-batch lines only
                got = advice_lines(entries, args, outcome, reason, serving)
                assert got == _advice_before_packs(args, outcome, reason, serving), (args, outcome)
                n += bool(got)
    assert n > 20


def test_trtllm_advice_on_its_own_flags() -> None:
    from logwatch.rules.args import parse_args_line
    pack = load_pack("trtllm")
    cmd = parse_args_line("+ trtllm-serve m --max_batch_size 256 --kv_cache_free_gpu_memory_fraction 0.95",
                          pack.rule("launch_command").args_specs)
    cfg = parse_args_line("[12/20/2025-04:20:19] [TRT-LLM] [I] PyTorchConfig(use_cuda_graph=True, "
                          "cuda_graph_max_batch_size=128)", pack.rule("backend_config").args_specs)
    assert cmd is not None and cfg is not None
    args = {**cmd.values, **cfg.values}
    assert advice_lines(pack.advice, args, "crashed", "cuda_oom", {}) == [
        "batches above 128 run without CUDA graphs (cuda_graph_max_batch_size 128 < max_batch_size 256)",
        "an out-of-memory crash with kv_cache_free_gpu_memory_fraction 0.95: the KV cache takes that "
        "share of the free memory; leave the rest more room (e.g. 0.85)"]
    assert advice_lines(pack.advice, {"use_cuda_graph": False}, "ready", None, {}) == [
        "CUDA graphs are off (use_cuda_graph False): every generation step runs eagerly, usually far slower"]
    assert advice_lines(pack.advice, {"model": "m"}, "ready", None, {}) == []


def test_a_restart_loop_is_read_in_the_memory_of_one_startup(tmp_path: Path) -> None:
    """The recorder hands each closed record on and keeps only the last (the daemon's ledger
    and `history FILE` alike): while a 200-startup loop is read, at most the open, the last
    and the one being handed on are alive (a 20,001-startup loop held 450 MiB of records)."""
    import gc
    from logwatch.ledger import StartupRecord

    log = tmp_path / "loop.log"
    log.write_text("".join(t for i in range(200)
                           for t in sim_texts(seed=i, start=T0 + 3600 * i, crash="oom")))
    alive: list[int] = []

    def emit(rec: StartupRecord) -> None:
        if rec.index % 50 == 0:
            alive.append(sum(1 for o in gc.get_objects() if type(o) is StartupRecord))
    read_ledger(str(log), "auto", emit)
    assert len(alive) == 4 and max(alive) <= 3, alive


def test_compare_numbers_a_ledger_s_launches_as_history_does() -> None:
    """A ledger keeps the last 50 launches, numbered on (#11-#60 after 60): `compare 11 12`
    compares #11 and #12 (before: #21 and #22), and `compare 1 2` says #1 is gone (before:
    #11 vs #12 under a header that looked right)."""
    from logwatch.app.history import _numbered, pick
    from logwatch.ledger import StartupRecord
    records = [StartupRecord(startup=f"s{i}", index=i, started_at=None, engine="sglang",
                             model="m", args={}, args_partial=False, outcome="ready")
               for i in range(11, 61)]
    assert pick(records, _numbered(records, "11")).index == 11
    assert pick(records, _numbered(records, "60")).index == 60
    assert pick(records, _numbered(records, "-2")).index == 59
    with pytest.raises(LookupError, match=r"no startup 1: the ledger has 50 \(kept: #11-#60\)"):
        _numbered(records, "1")


def test_a_ledger_damaged_past_its_first_page_is_set_aside(tmp_path: Path) -> None:
    """A stretch of the file overwritten mid-way (a bad sector, a restore cut and patched):
    the file opens, but the reads of the targets on those pages fail.  Before: they failed
    at every read, for good (those targets' `/api/history` and previous launch empty, one
    state error after another), the file never set aside; now the first such error sets it
    aside (`ledger.sqlite3.corrupt`, said once) and a new ledger takes the next records."""
    from logwatch.ledger import StartupRecord
    from logwatch.state.ledger import LedgerStore

    def rec(key: str) -> StartupRecord:
        return StartupRecord(key, 0, 1.7e9, "sglang", "m", {"x": "y" * 500}, False, "ready")

    store = LedgerStore(tmp_path)
    for t in range(200):
        for i in range(10):
            store.save(f"node-{t}", rec(f"s{t}-{i}"))
    store.close()
    path = tmp_path / "ledger.sqlite3"
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 65536)
    store = LedgerStore(tmp_path)
    try:
        empty = [t for t in range(200) if not store.records(f"node-{t}", wait=None)]
        assert store.set_aside is not None and "malformed" in store.set_aside, empty
        assert (tmp_path / "ledger.sqlite3.corrupt").exists()
        store.save("node-7", rec("after"))
        assert [r.startup for r in store.records("node-7", wait=None)] == ["after"]
    finally:
        store.close()
