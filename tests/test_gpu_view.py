"""What the GPUs say, in words: the stall alert's "hung or slow?" and the launch preflight,
from snapshots of the real H200 captures (tests/fixtures/gpu/h200)."""

from __future__ import annotations

import dataclasses

from conftest import ROOT
from logwatch.silence import silence_verdict
from logwatch.telemetry.gpu import GpuSnapshot, learn_idle, parse_csv
from logwatch.telemetry.gpu import preflight_held, preflight_note, preflight_text
from logwatch.view import gpu_activity

H200 = ROOT / "tests" / "fixtures" / "gpu" / "h200"
NOW = 1_000_000.0


def snapshots() -> list[GpuSnapshot]:
    return parse_csv((H200 / "query-load-lms500.csv").read_text())


def held_for(snap: GpuSnapshot, seconds: float = 30.0, n: int = 10) -> list[GpuSnapshot]:
    """The same readings, `n` snapshots over the last `seconds` before NOW."""
    return [GpuSnapshot(NOW - seconds + i * seconds / n, snap.gpus) for i in range(n + 1)]


def view_of(snap: GpuSnapshot, history: list[GpuSnapshot] | None = None,
            idle: dict[int, float] | None = None) -> dict:
    verdict = silence_verdict(history or held_for(snap), NOW - 30, NOW, idle)
    return {"up": True, "snapshot": snap.to_dict(),
            "silence": verdict.to_json() if verdict else None}


def test_idle_and_busy_gpus_in_words() -> None:
    snaps = snapshots()
    idle = snaps[0]                                    # 82 W, util 0 %
    busy = max(snaps, key=lambda s: s.total_power_w or 0)   # 694 W of 700 W, util 100 %
    learned: dict[int, float] = {}
    learn_idle(learned, idle)
    assert learned == {0: idle.gpus[0].power_w}
    text = gpu_activity(view_of(idle, idle=learned))
    assert text.startswith("GPU idle (82 W of 700 W, idle 82 W; util 0%, memory flat)"), text
    assert "hung before the GPU" in text
    assert gpu_activity(view_of(busy)).startswith("GPU busy (694 W of 700 W, util 100%")
    assert "slow, not hung" in gpu_activity(view_of(busy))


def test_busy_at_idle_power_with_flat_memory_is_likely_hung() -> None:
    idle = snapshots()[0]
    spinning = GpuSnapshot(idle.at, tuple(dataclasses.replace(g, util_ratio=1.0) for g in idle.gpus))
    text = gpu_activity(view_of(spinning, idle={0: 81.0}))
    assert text.startswith("GPU at util 100% but near idle power (82 W of 700 W, idle 81 W)"), text
    assert "likely hung" in text
    gib = 1024 ** 3
    rising = [GpuSnapshot(NOW - 30 + 3 * i, tuple(dataclasses.replace(g, util_ratio=1.0,
                                                                       mem_used_bytes=i * 2 * gib)
                                                  for g in idle.gpus)) for i in range(11)]
    assert gpu_activity(view_of(spinning, rising)).startswith(
        "GPU memory still moving (+12.0 GiB in the last 15s): loading, not hung")


def test_no_telemetry_no_words() -> None:
    assert gpu_activity(None) == ""
    assert gpu_activity({"up": False, "snapshot": None}) == ""
    assert gpu_activity({"up": True, "snapshot": {}, "silence": None}) == ""
    assert silence_verdict([], NOW - 30, NOW) is None


def test_preflight_names_the_gpus_that_already_hold_memory() -> None:
    idle = snapshots()[0]
    gpus = tuple(dataclasses.replace(idle.gpus[0], index=i,
                                     mem_used_bytes=(76 * 1024 ** 3 if i == 3 else 0))
                 for i in range(8))
    held = preflight_held(view_of(GpuSnapshot(idle.at, gpus)))
    assert held == [(3, 76.0)]
    assert preflight_text(held) == "GPU 3 held 76 GiB before launch"
    assert preflight_held(view_of(idle)) == []
    assert preflight_text([]) == ""
    # an OOM whose launch found the GPUs empty says so; other crashes say nothing of it
    empty = {"preflight": "", "preflight_read": True}
    assert preflight_note(empty, "cuda_oom").startswith("no GPU held memory before launch")
    assert preflight_note(empty, "nccl_error") == ""
    assert preflight_note({"preflight": "", "preflight_read": False}, "cuda_oom") == ""


def test_the_stall_and_crash_alerts_say_what_the_gpus_say() -> None:
    from logwatch.machine import Crash, CrashSettled, Stalled
    from logwatch.sinks.alerts.policy import AlertPolicy
    from logwatch.view import TargetView
    busy = max(snapshots(), key=lambda s: s.total_power_w or 0)
    gpu = {**view_of(busy), "preflight": "GPU 3 held 76 GiB before launch"}
    v = TargetView(name="node1", engine="sglang", source="x", kind="file", labels={}, now=NOW,
                   phase="cuda_graph", startup_id="s1", gpu=gpu, line_number=120)
    policy = AlertPolicy()
    (stalled,) = policy.observe(v, [Stalled(1, "cuda_graph", 360.0, "s1", 300.0)])
    assert stalled.summary.startswith("stalled in cuda_graph: no new line for 6m")
    assert "GPU busy (" in stalled.summary and "slow, not hung" in stalled.details["gpu"]
    assert stalled.key == "node1|s1|stalled|cuda_graph@L120"
    assert stalled.details["gpu_silence"]["kind"] == "busy"
    crash = Crash(reason="cuda_oom", during="loading_shards", line="torch.OutOfMemoryError: x",
                  line_number=9, at=NOW, log_time=None)
    out = policy.observe(v, [CrashSettled(1, "s1", crash, {}, 95.0)])
    alert = [a for a in out if getattr(a, "kind", None) == "crashed"][0]
    assert alert.summary.endswith("(GPU 3 held 76 GiB before launch)")
    assert alert.details["gpu_preflight"] == "GPU 3 held 76 GiB before launch"
