"""Replay's bar runs (rules/bars.py): the frames inside a run of one bar are skipped, and
what replay reports stays what the exact pipeline says, on every fixture and on logs made
to break the shortcut (bars that restart, ranks, other bars between, frames that fire nothing)."""

from __future__ import annotations

import functools
import io
import json
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from logwatch.app.replay import replay_stream
from logwatch.ledger import LedgerRecorder
from logwatch.rules import bars
from logwatch.rules.bars import bar_frame, frame_count
from logwatch.rules.locate import choose_pack
from logwatch.sinks.summary import human, summary, timeline
from logwatch.view import pipeline_view


def reported(data: bytes, collapse: bool, pack_name: str = "auto",
             bar_runs: bool | None = None) -> tuple[str, str, str, str, int]:
    """What `logwatch replay` prints of `data` (JSON, text, timeline), how far each rank got
    (the live view's "rank behind"), and the hits stepped.  `collapse`: replay's reading (the
    serving lines' runs and the bars' runs), else every line; `bar_runs`: the bars' alone."""
    pipe = replay_stream(io.BytesIO(data), choose_pack(pack_name, data[:1 << 20]),
                         collapse_stats=collapse, bar_runs=bar_runs)
    view = pipeline_view("x.log", pipe)
    doc = summary(view)
    total = view.ready_in if view.ready_in is not None else view.total_seconds
    ranks = sorted((r, p.phase, p.finished) for r, p in pipe.state.ranks.items())
    return (repr(doc), human(doc, total), timeline(view), repr(ranks),
            sum(pipe.counters.rule_matches.values()))


def history_of(data: bytes, bar_runs: bool, pack_name: str = "auto") -> list[str]:
    """`logwatch history --json` of `data`: every serving line read, bar runs or not."""
    pack = choose_pack(pack_name, data[:1 << 20])
    rec = LedgerRecorder(pack.name, advice=pack.advice, model_flags=pack.model_flags)
    closed: list = []
    pipe = replay_stream(io.BytesIO(data), pack, collapse_stats=False, bar_runs=bar_runs,
                         on_step=lambda evs, st: closed.extend(rec.observe(evs, st)))
    closed += rec.finish(pipe.state)
    docs = [r.to_json() for r in closed]
    for d in docs:    # a startup without a stamp starts when it was read: the run's wall clock
        if d["started_stamp"] is None:
            d.pop("started_at")
    return [json.dumps(d, sort_keys=True, default=repr) for d in docs]


def assert_same_report(data: bytes, pack_name: str = "auto") -> tuple[int, int]:
    """Bar runs change nothing reported: replay with them reports what it does without, and
    history with them says what it says without; (hits stepped without, with)."""
    without = reported(data, True, pack_name, bar_runs=False)
    with_runs = reported(data, True, pack_name)
    assert with_runs[:4] == without[:4]
    assert history_of(data, True, pack_name) == history_of(data, False, pack_name)
    return without[4], with_runs[4]


def assert_same_as_every_line(data: bytes, pack_name: str = "auto") -> tuple[int, int]:
    """`assert_same_report`, and replay's reading reports what reading every line does;
    (hits stepped: every line, replay)."""
    assert_same_report(data, pack_name)
    exact, collapsed = reported(data, False, pack_name), reported(data, True, pack_name)
    assert collapsed[:4] == exact[:4]
    return exact[4], collapsed[4]


LOGS = sorted(p.name for p in FIXTURES.glob("*.log")) + \
    sorted(f"built/{p.name}" for p in (FIXTURES / "built").glob("*.log"))


@pytest.mark.parametrize("name", LOGS)
def test_every_fixture_replays_the_same_with_bar_runs(name):
    assert_same_as_every_line((FIXTURES / name).read_bytes())


@functools.lru_cache(maxsize=None)
def genlog(*args: str) -> bytes:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "genlog.py"), *args],
                          capture_output=True, check=True).stdout


@pytest.mark.integration
@pytest.mark.parametrize("args", [
    ("--lines", "8000", "--restarts", "40", "--seed", "1", "--tp", "8", "--crash", "oom"),
    ("--lines", "6000", "--restarts", "20", "--seed", "2", "--tp", "4", "--dp", "2"),
    ("--lines", "4000", "--seed", "3", "--restarts", "3", "--crash", "nccl"),
], ids=["tp8-oom", "dp2", "nccl"])
def test_restart_dense_logs_replay_the_same_with_far_fewer_hits(args):
    """The shortcut's point: a restart loop is mostly bars (issue 30)."""
    assert_same_as_every_line(genlog(*args))
    without, with_runs = assert_same_report(genlog(*args))
    if int(args[args.index("--restarts") + 1]) >= 20:     # restart-dense: mostly bars
        assert with_runs * 2 < without, (without, with_runs)


# -- logs made to break the shortcut ----------------------------------------------------------

def shard(cur: int, total: int, elapsed: int, name: str = "Loading safetensors checkpoint shards") -> str:
    pct = cur * 100 // total
    return f"{name}: {pct:3d}% Completed | {cur}/{total} [00:{elapsed:02d}<00:10,  2.00it/s]"


FRAMES = {
    "shard": lambda k, e: shard(k % 5, 4, e),
    "shard_other": lambda k, e: shard(k % 3, 2, e, "Loading pt checkpoint shards"),
    "capture": lambda k, e: (f"Capturing batches (bs={64 - k % 8} avail_mem=5.{k % 10}0 GB): "
                             f"{k % 100:3d}%|██   | {k % 8}/8 [00:{e:02d}<00:03,  7.40it/s]"),
    "tuner": lambda k, e: (f"[AutoTuner]: Tuning {('fp_gemm', 'moe')[k % 2]}: {k % 100:3d}%|██  | {k % 4}/4 "
                           f"[00:{e:02d}<00:00, 15.50it/s]"),
    "no_count": lambda k, e: f"Loading safetensors checkpoint shards:  50% Completed | ?/4 [00:{e:02d}<",
    "stamped": lambda k, e: f"[2026-11-30 10:{k % 60:02d}:{e:02d} TP{k % 2}] Load weight begin. avail mem=70.00 GB",
    "rank_bar": lambda k, e: f"[2026-11-30 10:00:{e:02d} TP{k % 2}] " + shard(k % 5, 4, e),
    "capture_begin": lambda k, e: f"[2026-11-30 10:01:{e:02d} TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB",
    "plain": lambda k, e: "some other output",
    "compile": lambda k, e: f"Compiling num tokens (num_tokens={k % 3}):   0%|    | 0/5 [00:{e:02d}<?, ?it/s]",
    # a record glued after a frame, and a frame of the same bar glued after that record
    "glued": lambda k, e: (f"Compiling num tokens (num_tokens={k % 3}):   0%|    | 0/5 [00:{e:02d}<?, ?it/s]"
                           f"[2026-11-30 10:{k % 60:02d}:{e:02d} TP0] Initializing SGLangBackend"
                           + ("" if k % 2 else f"Compiling num tokens (num_tokens=1):   0%|    | 0/5 [00:{e:02d}<?, ?it/s]")),
    "ready": lambda k, e: f"[2026-11-30 10:03:{e:02d}] The server is fired up and ready to roll!",
    "decode": lambda k, e: (f"[2026-11-30 10:04:{e:02d} TP0] Decode batch. #running-req: {k % 9}, "
                            f"#token: 4078, token usage: 0.0{k % 10}, gen throughput (token/s): "
                            f"{k}.5, #queue-req: 0"),
    "decode_bare": lambda k, e: (f"Decode batch. #running-req: {k % 9}, token usage: 0.01, "
                                 f"gen throughput (token/s): {k}.0, #queue-req: 0"),
}
START = "[2026-11-30 10:00:00] server_args=ServerArgs(model_path='m', tp_size=2, port=30000)\n"


def frames_of(kinds: list[str]) -> st.SearchStrategy:
    """(kind, elapsed, k, separator) lists: elapsed times that mostly grow (a bar's frames),
    sometimes start over (another bar, or the same one again)."""
    steps = st.lists(st.tuples(st.sampled_from(kinds), st.integers(-1, 4),
                               st.integers(0, 1000), st.sampled_from(["\n", "\r"])),
                     min_size=1, max_size=60)

    def timed(items: list[tuple[str, int, int, str]]) -> list[tuple[str, int, int, str]]:
        out, e = [], 0
        for kind, step, k, sep in items:
            e = 0 if step < 0 else min(59, e + step)
            out.append((kind, e, k, sep))
        return out
    return steps.map(timed)


def body_of(table: dict, frames: list[tuple[str, int, int, str]]) -> str:
    return "".join(table[kind](k, e) + sep for kind, e, k, sep in frames)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames_of(sorted(FRAMES)), st.booleans())
@example(frames=[("compile", 0, 0, "\n"), ("glued", 1, 0, "\n"), ("compile", 2, 1, "\n")], crash=False)
def test_no_sequence_of_frames_replays_differently(frames, crash):
    """Bars that restart at the same description, other bars and ranks between, frames that
    fire nothing, stamps: the collapsed replay reports what the exact one does (an
    unstamped crash right after the bars is placed by the clock the frames moved).  The
    example: a frame with a stamped `TP0` record glued after it, inside a run of its bar
    (before: skipped, TP0 never seen; `lines.glued`)."""
    body = body_of(FRAMES, frames)
    tail = "torch.OutOfMemoryError: CUDA out of memory.\n" if crash else ""
    assert_same_report((START + body + "\n" + tail).encode(), "sglang")


VLLM_FRAMES = {
    "shard": lambda k, e: shard(k % 5, 4, e),
    "rank_shard": lambda k, e: f"(Worker_TP{k % 2} pid=7{k % 2}) " + shard(k % 5, 4, e),
    "capture": lambda k, e: (f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): {k % 100:3d}%"
                             f"|███▍      | {k % 67}/67 [00:{e:02d}<00:04,  8.92it/s]"),
    "stamped": lambda k, e: (f"(Worker_TP{k % 2} pid=7{k % 2}) INFO 11-30 10:{k % 60:02d}:{e:02d} "
                             "[gpu_model_runner.py:1] Starting to load model m..."),
    "loaded": lambda k, e: (f"(Worker_TP{k % 2} pid=7{k % 2}) INFO 11-30 10:{k % 60:02d}:{e:02d} "
                            "[default_loader.py:1] Loading weights took 1.27 seconds"),
    "plain": lambda k, e: "some other output",
}
VLLM_START = ("INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.34.0\n"
              "INFO 11-30 10:00:00 [utils.py:1] non-default args: {'model': 'm', 'tensor_parallel_size': 2}\n")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames_of(sorted(VLLM_FRAMES)))
@example(frames=[("capture", 0, 0, "\n"), ("rank_shard", 0, 0, "\n"),
                 ("rank_shard", 0, 784, "\n"), ("rank_shard", 0, 0, "\n")])
@example(frames=[("capture", 1, 0, "\n"), ("capture", 3, 0, "\n"), ("rank_shard", 3, 0, "\n"),
                 ("capture", 0, 0, "\n"), ("capture", 2, 0, "\n"), ("capture", 4, 0, "\n")])
def test_no_sequence_of_vllm_rank_frames_replays_differently(frames):
    """Two ranks' bars interleaved behind their `(Worker_TPn pid=...)` tags: each rank's
    position is the exact pipeline's (the run's bytes up to its literal name the rank).
    The example: a shard bar complete after capture began, then drawn again from 0 (a
    draft model's): the machine keeps the complete count (0d6c73e), so the run ends where
    the count goes back (before: 0/4 read collapsed, 4/4 exact).  The second: the capture
    bar drawn again from 0 while the clock still follows the first; the frame at 4 s goes to
    whichever lies nearer the clock, which the 2 s frame moved (before: cuda_graph 3 s read
    with the run skipped, 9 s without)."""
    assert_same_report((VLLM_START + body_of(VLLM_FRAMES, frames) + "\n").encode(), "vllm")


def test_another_bar_between_ends_the_run():
    """Two autotuner ops' bars, one after the other, then a crash the clock places: the
    second bar begins where the first ended (20 s in, not 12 s)."""
    def tune(op: str, cur: int, e: int) -> str:
        return f"[AutoTuner]: Tuning {op}: 10%|██  | {cur}/4 [00:{e:02d}<00:00, 15.50it/s]\n"
    log = START + tune("fp_gemm", 1, 1) + tune("fp_gemm", 2, 9) + tune("moe", 1, 10) + \
        tune("moe", 2, 11) + "torch.OutOfMemoryError: CUDA out of memory.\n"
    assert_same_report(log.encode(), "sglang")
    assert "+20s" in reported(log.encode(), True, "sglang")[2]


def test_another_ranks_frames_end_the_run():
    """Rank 1's frames between rank 0's: rank 1 is seen loading, as without the shortcut."""
    tp = lambda r, cur, e: f"(Worker_TP{r} pid=7{r}) " + shard(cur, 4, e) + "\n"
    log = VLLM_START + tp(0, 1, 1) + tp(1, 1, 2) + tp(1, 2, 3) + tp(0, 2, 4)
    assert_same_report(log.encode(), "vllm")
    assert "TP1" in reported(log.encode(), True, "vllm")[3]


def test_a_bar_that_starts_over_ends_the_run():
    """Two loads of the same bar with nothing between: the clock gives each its own time
    (the second begins where the first ended), with or without the shortcut."""
    first = [shard(i, 4, 10 * i) for i in range(5)]
    second = [shard(i, 4, 5 * i) for i in range(5)]
    log = START + "\n".join(first + second) + "\n[2026-11-30 10:02:00] The server is fired up and ready to roll!\n"
    assert_same_report(log.encode(), "sglang")
    assert "loading_shards" in reported(log.encode(), True, "sglang")[2]


GLUED = (b"\rLoading safetensors checkpoint shards:  48% Completed | 40/83 [00:14<00:13,  3.13it/s]"
         b"\rCompiling num tokens (num_tokens=20):   0%|          | 0/5 [00:00<?, ?it/s]"
         b"[2026-03-17 07:16:46 TP0] Initializing SGLangBackend\n"
         b"Compiling num tokens (num_tokens=20):   0%|          | 0/5 [00:00<?, ?it/s]"
         b"[2026-03-17 07:16:46 TP0] Initializing SGLangBackend"
         b"Compiling num tokens (num_tokens=20):   0%|          | 0/5 [00:00<?, ?it/s]"
         b"[2026-03-17 07:16:46 TP0] Initializing SGLangBackend\r\n"
         b"Compiling num tokens (num_tokens=20):   0%|          | 0/5 [00:00<?, ?it/s]"
         b"[2026-03-17 07:16:46 TP0] Initializing SGLangBackend\n"
         b"Loading safetensors checkpoint shards: 10% Completed | 3/30 [00:01<00:09, 2.77it/s]\r")


def test_a_frame_with_a_record_glued_after_it_ends_the_run():
    """The third segment is a frame, a stamped record and another frame glued on: two hits,
    the second with its own stamp (07:16:46), which the clock takes.  Before, the run
    opened at the frame before it took it as one more frame of its bar: neither hit was
    read, no stamp reached the clock, and replay said cuda_graph 0 s where every reading
    without the shortcut (and the same bytes fed in two chunks) says 1 s
    (test_lines.py's chunking property found it)."""
    assert_same_as_every_line(GLUED, "sglang")
    doc = reported(GLUED, True, "sglang")[0]
    assert "'durations': {'loading_shards': 0.0, 'cuda_graph': 1.0}" in doc


def test_bar_frame_reads_the_bar_and_its_elapsed_time():
    assert bar_frame(shard(2, 4, 14)) == ("Loading safetensors checkpoint shards", 14)
    assert bar_frame("Capturing batches (bs=64 avail_mem=5.50 GB):  40%|█| 3/8 [1:02:03<00:04]") == \
        ("Capturing batches (bs=# avail_mem=# GB)", 3723)
    assert bar_frame("[2026-11-30 10:00:00 TP0] Load weight begin.") is None


def test_bar_frame_counts_process_tags_apart_from_the_description():
    """vLLM 0.11 forked: a worker's frame under its parents' tags too (126 characters before
    the percentage); before, no frame."""
    tags = "(APIServer pid=100) (EngineCore_DP0 pid=150) (Worker_TP0 pid=200) "
    bar = "DeepGemm(fp8_gemm_nt) warmup (W=torch.Size([25600, 5120]))"
    assert bar_frame(f"{tags}{bar}:  50%|#    | 4096/8192 [00:07<00:07, 585.14it/s]") == (
        "(APIServer pid=#) (EngineCore_DP# pid=#) (Worker_TP# pid=#) "
        "DeepGemm(fp#_gemm_nt) warmup (W=torch.Size([#, #]))", 7)
    assert bar_frame("x" * 121 + ":  50%|#    | 4096/8192 [00:07<00:07, 585.14it/s]") is None


# frame_count's definition: the leftmost `k/N [` (it finds it with `find('/')` instead)
_COUNT = re.compile(r"(\d+)/(\d+)\s*\[")


@given(st.lists(st.sampled_from(["1", "23", "/", " ", "[", "\u0663", "\u3000", "G", "/s", "]",
                                 "12/163 [", "4.2G/8.0G [", "|"]), max_size=14).map("".join))
@example("٣/٤ [")            # Arabic-Indic digits: `\d` and int() read them
@example("/2 [1/2 [")
@settings(max_examples=400, deadline=None)
def test_frame_count_is_the_leftmost_count_a_search_finds(text: str) -> None:
    m = _COUNT.search(text)
    assert frame_count(text) == ((int(m.group(1)), int(m.group(2))) if m else None)


def test_bar_keys_stay_bounded_and_right_for_any_number_of_bars() -> None:
    for i in range(bars._KEYS_MAX + 10):
        assert bar_frame(f"bar {i} x{i}:  5%|| 1/9 [00:0{i % 10}<00:01]") == ("bar # x#", i % 10)
    assert len(bars._KEYS) <= bars._KEYS_MAX
