"""What the GPUs say, in words: the stall alert's "hung or slow?" and the launch preflight,
from snapshots of the real H200 capture (tests/fixtures/gpu/h200)."""

from __future__ import annotations

import dataclasses

from conftest import ROOT
from logwatch.sources.gpu import GpuSnapshot, parse_csv
from logwatch.view import GIB, gpu_activity, preflight_held, preflight_text

H200 = ROOT / "tests" / "fixtures" / "gpu" / "h200"
NOW = 1_000_000.0


def snapshots() -> list[GpuSnapshot]:
    return parse_csv((H200 / "query-load-lms500.csv").read_text())


def view_of(snap: GpuSnapshot, memory: list[float] | None = None) -> dict:
    hist = [[NOW - 100 + 10 * i, m] for i, m in enumerate(memory or [])]
    return {"up": True, "snapshot": snap.to_dict(), "memory_history": hist}


def test_idle_and_busy_gpus_in_words() -> None:
    snaps = snapshots()
    idle = snaps[0]                                    # 82 W, util 0 %
    busy = max(snaps, key=lambda s: s.total_power_w or 0)   # 694 W of 700 W, util 100 %
    assert gpu_activity(view_of(idle), NOW).startswith("GPUs idle (82 W of 700 W, util 0%)")
    assert gpu_activity(view_of(busy), NOW).startswith("GPUs busy (")
    assert "slow, not hung" in gpu_activity(view_of(busy), NOW)


def test_busy_at_idle_power_with_flat_memory_is_likely_hung() -> None:
    idle = snapshots()[0]
    spinning = GpuSnapshot(idle.at, tuple(dataclasses.replace(g, util_ratio=1.0) for g in idle.gpus))
    flat = [40 * GIB] * 6
    text = gpu_activity(view_of(spinning, flat), NOW)
    assert text.startswith("GPU util 100%, 82 W of 700 W, memory flat") and "likely hung" in text
    rising = [10 * GIB, 20 * GIB, 30 * GIB]
    assert gpu_activity(view_of(spinning, rising), NOW).startswith(
        "GPU memory still moving (20.0 GiB in 2m): loading")


def test_no_telemetry_no_words() -> None:
    assert gpu_activity(None, NOW) == ""
    assert gpu_activity({"up": False, "snapshot": None}, NOW) == ""


def test_preflight_names_the_gpus_that_already_hold_memory() -> None:
    idle = snapshots()[0]
    gpus = tuple(dataclasses.replace(idle.gpus[0], index=i,
                                     mem_used_bytes=(76 * GIB if i == 3 else 0)) for i in range(8))
    held = preflight_held(view_of(GpuSnapshot(idle.at, gpus)))
    assert held == [(3, 76.0)]
    assert preflight_text(held) == "GPU 3 held 76 GiB before launch"
    assert preflight_held(view_of(idle)) == []
    assert preflight_text([]) == ""


def test_the_stall_and_crash_alerts_say_what_the_gpus_say() -> None:
    from logwatch.machine import Crash, CrashSettled, Stalled
    from logwatch.sinks.alerts.policy import AlertPolicy
    from logwatch.view import TargetView
    busy = max(snapshots(), key=lambda s: s.total_power_w or 0)
    gpu = {**view_of(busy), "preflight": "GPU 3 held 76 GiB before launch"}
    v = TargetView(name="node1", engine="sglang", source="x", kind="file", labels={}, now=NOW,
                   phase="cuda_graph", startup_id="s1", gpu=gpu)
    policy = AlertPolicy()
    (stalled,) = policy.observe(v, [Stalled(1, "cuda_graph", 360.0, "s1", 300.0)])
    assert stalled.summary.startswith("stalled in cuda_graph: no new line for 6m")
    assert "GPUs busy (" in stalled.summary and "slow, not hung" in stalled.details["gpu"]
    crash = Crash(reason="cuda_oom", during="loading_shards", line="torch.OutOfMemoryError: x",
                  line_number=9, at=NOW, log_time=None)
    out = policy.observe(v, [CrashSettled(1, "s1", crash, {}, 95.0)])
    alert = [a for a in out if getattr(a, "kind", None) == "crashed"][0]
    assert alert.summary.endswith("(GPU 3 held 76 GiB before launch)")
    assert alert.details["gpu_preflight"] == "GPU 3 held 76 GiB before launch"
