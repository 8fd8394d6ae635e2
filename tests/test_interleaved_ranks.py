"""Eight tensor-parallel ranks failing at once print their tracebacks at once: vLLM 0.34's
workers log each line of a record with their prefix (`(Worker_TP3 pid=203) ERROR ...
[multiproc_executor.py:1223] `), so the eight tracebacks arrive with their lines mixed.  The
crash's reason must be what each rank's own traceback says, whatever the mix (the hints
are the first of each reason, and an outer frame's `yields` is weighed against the next
exception line of any rank), and the rank it names that of its root-cause line (the first
that printed where that line has no rank, and said beside it where it is another).

The shapes are vLLM 0.34's (v1/executor/multiproc_executor.py:1223 `WorkerProc hit an
exception.` from `worker_busy_loop`, v1/worker/gpu_worker.py:673 `determine_available_memory`,
the engine core's `EngineCore failed to start.`) and FlashInfer's JIT (jit/core.py
`build_and_load`, cpp_ext.py `run_ninja` raising `RuntimeError: Ninja build failed.`); the
launch is built/vllm-034-default.log's, its ranks widened to eight."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from logwatch.app.replay import replay_file

SP = "/usr/local/lib/python3.12/dist-packages"
TP = 8


def launch() -> list[str]:
    """vllm-034-default.log to its `Available KV cache memory` lines, each worker line
    written for eight ranks (pid 200 + rank)."""
    out = []
    for line in (FIXTURES / "built" / "vllm-034-default.log").read_text().splitlines()[:25]:
        if line.startswith("(Worker_TP0 pid=200) "):
            body = line[len("(Worker_TP0 pid=200) "):].replace("world_size=2", f"world_size={TP}")
            out += [f"(Worker_TP{r} pid={200 + r}) " + body.replace("rank=0", f"rank={r}")
                    for r in range(TP)]
        elif not line.startswith("(Worker_TP1 "):
            out.append(line.replace("'tensor_parallel_size': 2", f"'tensor_parallel_size': {TP}"))
    return out


def traceback(rank: int, deeper: bool, exc: str) -> list[str]:
    """One worker's record: the KV profile's frames, FlashInfer's JIT under them."""
    w = f"(Worker_TP{rank} pid={200 + rank}) ERROR 12-01 10:01:30 [multiproc_executor.py:1223] "
    frames = [
        f'  File "{SP}/vllm/v1/executor/multiproc_executor.py", line 1217, in worker_busy_loop',
        "    output = func(*args, **kwargs)",
        f'  File "{SP}/vllm/v1/worker/gpu_worker.py", line 700, in determine_available_memory',
        "    self.model_runner.profile_run()",
    ]
    if deeper:
        frames += [f'  File "{SP}/flashinfer/jit/core.py", line 309, in build_and_load',
                   f'  File "{SP}/flashinfer/jit/cpp_ext.py", line 344, in run_ninja',
                   "    raise RuntimeError(msg) from e"]
    return [w + x for x in ["WorkerProc hit an exception.", "Traceback (most recent call last):",
                            *frames, exc]]


def mixed(records: list[list[str]], order: str) -> list[str]:
    """The ranks' records as they may reach the log: whole one after another (`blocks`), a
    line of each in turn (`round`), or each rank starting two lines after the one before
    (`stagger`: the first rank's exception line comes before the last one's deep frames)."""
    if order == "blocks":
        return [x for r in records for x in r]
    start = {"round": 0, "stagger": 2}[order]
    timed = [(i + start * k, k, x) for k, r in enumerate(records) for i, x in enumerate(r)]
    return [x for _, _, x in sorted(timed)]


def engine_core() -> list[str]:
    c = "(EngineCore pid=150) ERROR 12-01 10:01:30 [core.py:1757] "
    return [c + "EngineCore failed to start.", c + "Traceback (most recent call last):",
            c + "RuntimeError: Worker failed with error 'Ninja build failed.', please check the "
                "stack trace above for the root cause",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
            "proc(s): {}"]


def crash_of(tmp_path: Path, lines: list[str]) -> tuple[str, str, str]:
    log = tmp_path / "tp8.log"
    log.write_text("\n".join(lines) + "\n")
    crash = replay_file(str(log), "vllm").state.crash
    assert crash is not None
    return crash.reason, crash.during, crash.rank


FIRST = [3, 0, 1, 2, 4, 5, 6, 7]   # rank 3 printed first


@pytest.mark.parametrize("order", ["blocks", "round", "stagger"])
def test_eight_ranks_failing_alike_read_as_one_rank_s_traceback(tmp_path: Path,
                                                                order: str) -> None:
    """Every rank's JIT build fails under the KV profile: kernel_compile_failed (the deeper
    frame), in whatever mix, the rank named the first that printed (TP3)."""
    records = [traceback(r, True, "RuntimeError: Ninja build failed.") for r in FIRST]
    reason, during, rank = crash_of(tmp_path, launch() + mixed(records, order) + engine_core())
    assert (reason, rank) == ("kernel_compile_failed", "TP3"), order
    assert during == crash_of(tmp_path, launch() + records[0] + engine_core())[1]


@pytest.mark.parametrize("order", ["blocks", "round", "stagger"])
def test_a_cause_line_of_one_rank_names_the_crash_in_any_mix(tmp_path: Path,
                                                             order: str) -> None:
    """One rank runs out of memory in the profile (a cause line), the others fail bare:
    cuda_oom whatever the order of the lines, the root cause TP5's line.  The rank named is
    TP5, the root cause's (on-call goes to its GPU), TP3, the first that printed, beside it:
    in one instant's mix the first printer need not be the rank that ran out of memory
    (before, the page said `TP3 first`)."""
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has "
           "a total capacity of 79.19 GiB of which 1.02 GiB is free.")
    records = [traceback(r, False, oom if r == 5 else "RuntimeError: profile run failed")
               for r in FIRST]
    log = tmp_path / "tp8.log"
    log.write_text("\n".join(launch() + mixed(records, order) + engine_core()) + "\n")
    crash = replay_file(str(log), "vllm").state.crash
    assert crash is not None and crash.reason == "cuda_oom", order
    assert crash.line.startswith("(Worker_TP5 pid=205) ") and crash.rank == "TP3"
    assert (crash.named_rank, crash.printed_first) == ("TP5", "TP3"), order
    doc = crash.to_json()
    assert (doc["rank"], doc["first_rank"]) == ("TP5", "TP3")


def test_the_first_printer_s_own_cause_names_it_alone(tmp_path: Path) -> None:
    """TP3, the first that printed, is the one out of memory: TP3 is named, nothing beside
    it (`first_rank` only where another rank printed first)."""
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    records = [traceback(r, False, oom if r == 3 else "RuntimeError: profile run failed")
               for r in FIRST]
    log = tmp_path / "tp8.log"
    log.write_text("\n".join(launch() + mixed(records, "round") + engine_core()) + "\n")
    crash = replay_file(str(log), "vllm").state.crash
    assert crash is not None and crash.reason == "cuda_oom"
    assert (crash.named_rank, crash.printed_first) == ("TP3", "")
    assert "first_rank" not in crash.to_json() and crash.to_json()["rank"] == "TP3"


SGL = "/usr/local/lib/python3.11/dist-packages/sglang/srt"


def sglang_tp8(cause_rank: int) -> list[str]:
    """SGLang 0.5.23 at TP8 (built/sglang-0523-tp-memory-unbalanced.log's launch), every
    scheduler failing in its model load, TP3's record first: `Scheduler hit an exception:
    {traceback}` is one logger record (scheduler.py:6372), written whole, only its first line
    prefixed `[... TP3]`; `cause_rank`'s traceback ends out of memory, the others bare."""
    out = ["[2026-12-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-32B', 'tp_size': 8, "
           "'port': 30000, 'mem_fraction_static': 0.85}"]
    out += [f"[2026-12-01 10:00:04 TP{r}] Init parallel begin." for r in range(8)]
    out += [f"[2026-12-01 10:00:09 TP{r}] Load weight begin. avail mem=78.06 GB"
            for r in range(8)]
    for r in FIRST:
        out += [f"[2026-12-01 10:00:30 TP{r}] Scheduler hit an exception: Traceback (most "
                "recent call last):",
                f'  File "{SGL}/managers/scheduler.py", line 6362, in run_scheduler_process',
                "    scheduler = Scheduler(server_args, port_args)",
                f'  File "{SGL}/model_executor/model_runner.py", line 1391, in load_model',
                "    self.model = self.loader.load_model(",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU "
                f"{r} has a total capacity of 79.19 GiB of which 1.02 GiB is free."
                if r == cause_rank else "RuntimeError: load_model failed", ""]
    return out + ["[2026-12-01 10:00:31] Received sigquit from a child process. It usually "
                  "means the child failed."]


def test_sglang_s_untagged_cause_line_is_its_record_s_rank(tmp_path: Path) -> None:
    """SGLang's exception line has no tag of its own: it is its record's (the last tagged
    line before it, of the same process, it having no stamp): TP5's out of memory under
    TP5's header names TP5, TP3 printed first; the main process's stamped, untagged line
    after is no rank's."""
    log = tmp_path / "sgl.log"
    log.write_text("\n".join(sglang_tp8(5)) + "\n")
    crash = replay_file(str(log), "sglang").state.crash
    assert crash is not None and crash.reason == "cuda_oom"
    assert "GPU 5 " in crash.line and crash.rank == "TP3"
    assert (crash.named_rank, crash.printed_first) == ("TP5", "TP3")
    log.write_text("\n".join(sglang_tp8(3)) + "\n")
    crash = replay_file(str(log), "sglang").state.crash
    assert crash is not None and (crash.named_rank, crash.printed_first) == ("TP3", "")


def test_the_root_cause_s_rank_survives_a_checkpoint(tmp_path: Path) -> None:
    """A daemon restarted between the crash and its page names the same ranks: the crash's
    `cause_rank` and its evidence's `who` are in the checkpoint (machine/checkpoint.py)."""
    from logwatch.machine.checkpoint import state_from_json, state_to_json
    log = tmp_path / "sgl.log"
    log.write_text("\n".join(sglang_tp8(5)) + "\n")
    state = replay_file(str(log), "sglang").state
    back = state_from_json(state_to_json(state)).crash
    assert back is not None and back.cause is not None and back.cause.who == "TP5"
    assert (back.named_rank, back.printed_first) == ("TP5", "TP3")


def test_a_scheduler_failing_before_its_logger_names_no_replica(tmp_path: Path) -> None:
    """SGLang 0.5.23 `--dp 2`: DP1's scheduler fails before `configure_scheduler_process`
    gives its logger the `DP1` prefix (scheduler.py:6323 `publish`), so multiprocessing
    prints its traceback bare, unstamped; DP0 goes on loading.  No rank is named: DP0's
    progress lines after it are no crash lines, and the traceback is no rank's (before any
    tag, it continues no record)."""
    head = (FIXTURES / "built" / "sglang-0523-dp2.log").read_text().splitlines()[:4]
    lines = head + [
        "Process SpawnProcess-3:", "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
        f'  File "{SGL}/managers/scheduler.py", line 6323, in run_scheduler_process',
        "RuntimeError: CUDA error: out of memory",
        "[2026-12-01 10:00:05 DP0] Init parallel ends. elapsed=2.10 s",
        "[2026-12-01 10:00:06 DP0] Load weight begin. avail mem=78.92 GB",
        "[2026-12-01 10:00:07] Received sigquit from a child process. It usually means the "
        "child failed."]
    log = tmp_path / "dp2.log"
    log.write_text("\n".join(lines) + "\n")
    crash = replay_file(str(log), "sglang").state.crash
    assert crash is not None and crash.reason == "cuda_oom"
    assert (crash.rank, crash.named_rank) == ("", "") and "rank" in crash.to_json()
    assert crash.to_json()["rank"] == ""
