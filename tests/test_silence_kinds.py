"""The silence's verdict on what the adversarial review adv24 found (silence.py, pure): a
power brake or an operator's cap, power unknown, memory given back, a tie, the usual NCCL
hang.  Each case says the verdict before the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from conftest import ROOT
from logwatch.silence import classify, silence_verdict
from logwatch.telemetry.gpu import GpuSample, GpuSnapshot, decode_throttle

GIB = 1024 ** 3
Series = Callable[[float], dict]


def verdict(series: dict[int, Series], since: float = 100, now: float = 160,
            idle: float | None = 81.0):
    """GPU samples every 2 s from 0 to `now` (`series[i](t)`: power, util %, mem GiB, limit,
    tdp, mask, sm MHz), read over the silence [since, now]."""
    snaps = []
    for t in range(0, int(now) + 1, 2):
        gs = []
        for i, f in sorted(series.items()):
            d = {"limit": 700.0, "tdp": 700.0, **f(t)}
            mask = d.get("mask")
            gs.append(GpuSample(i, power_w=d.get("power"), power_limit_w=d["limit"],
                                power_default_limit_w=d["tdp"],
                                util_ratio=None if d.get("util") is None else d["util"] / 100,
                                mem_used_bytes=int(d.get("mem", 61) * GIB),
                                sm_clock_hz=d["sm"] * 1e6 if "sm" in d else None,
                                throttle_mask=mask,
                                throttle_reasons=decode_throttle(mask) if mask else frozenset()))
        snaps.append(GpuSnapshot(float(t), tuple(gs)))
    return silence_verdict(snaps, since, now, {i: idle for i in series} if idle else None)


SPIN = lambda t: {"power": 160, "util": 100}            # an NCCL collective waiting
IDLE = lambda t: {"power": 127, "util": 0}              # a rank stuck on the CPU side
BUSY = lambda t: {"power": 691, "util": 99}


def test_a_power_brake_is_throttled_not_hung() -> None:
    """H2: mask 0x88 (hw_slowdown | hw_power_brake), SM 345 MHz, 190 W at util 100 %: the
    capture runs on, 5x slower.  Before: spinning, "likely hung"."""
    brake = lambda t: {"power": 190, "util": 100, "sm": 345, "mask": 0x88}
    v = verdict({i: brake for i in range(8)})
    assert v.kind == "throttled" and not v.working, v.text     # watch gives it up, as unclear
    assert v.text.startswith("8 GPUs throttled (hw_power_brake, hw_slowdown; SM 345 MHz)"), v.text
    assert "busy cannot be told from waiting" in v.text and "hung" not in v.text
    # thermal throttling at 420 W is still busy, and a spin without a reason still spins
    assert verdict({0: lambda t: {"power": 420, "util": 100, "mask": 0x20}}).kind == "busy"
    assert verdict({0: SPIN}).kind == "spinning"


def test_an_operators_cap_moves_no_threshold() -> None:
    """H2: `nvidia-smi -pl 300` on a 700 W board.  Before: an NCCL hang at 165 W "busy:
    slow, not hung" (the spin ceiling was 35 % of 300 W's range), a CPU deadlock at 127 W
    "neither busy nor idle"."""
    cap = {"limit": 300.0, "tdp": 700.0}
    assert verdict({0: lambda t: {**cap, "power": 165, "util": 100}}).kind == "spinning"
    assert verdict({0: lambda t: {**cap, "power": 127, "util": 0}}).kind == "idle"
    at_cap = verdict({0: lambda t: {**cap, "power": 285, "util": 100}})
    assert at_cap.kind == "busy" and "285 W of 300 W" in at_cap.text, at_cap.text


def test_util_at_full_with_power_unknown_cannot_tell() -> None:
    """M4: power or limit `[N/A]` and util 100 %: busy or a collective spinning?  Before:
    "busy: slow, not hung"."""
    assert classify(None, 700.0, 81.0, 1.0, 0.0) == "unclear"
    assert classify(165.0, None, None, 1.0, 0.0) == "unclear"
    v = verdict({i: (lambda t: {"power": None, "util": 100}) for i in range(4)})
    assert v.kind == "unclear" and not v.working
    assert "cannot tell busy from spinning" in v.text, v.text


def test_memory_given_back_is_no_loading_and_is_said() -> None:
    """M3: rank 3 SIGKILLed at t=130, its 61 GiB freed, the 7 others spin.  Before: "GPU 3
    busy alone (75 W): slow, not hung"."""
    dead = lambda t: SPIN(t) if t < 130 else {"power": 75, "util": 0, "mem": 0}
    v = verdict({**{i: SPIN for i in range(8) if i != 3}, 3: dead})
    assert v.kind == "spinning" and not v.working, v.text
    assert v.text.endswith("; GPU 3 freed 61 GiB: its process exited?"), v.text
    # a health check's GiB on one GPU of a hung TP=8, freed again: not "slow, not hung"
    check = lambda t: {"power": 130, "util": 3, "mem": 62 if 140 <= t < 150 else 61}
    hung = verdict({0: check, **{i: IDLE for i in range(1, 8)}}, idle=None)
    assert not hung.working and "loading" not in hung.text, hung.text


def test_most_gpus_spinning_and_one_idle_is_a_stuck_rank_named() -> None:
    """L2: the usual NCCL hang: the ranks in the collective spin, the one that never came
    is idle.  Before: "spinning" with GPU 3 only in a suffix, nothing named."""
    v = verdict({**{i: SPIN for i in range(8) if i != 3}, 3: IDLE})
    assert v.kind == "stuck_rank" and v.named == (3,), v.text
    assert v.text.startswith("GPU 3 idle (127 W") and "7 GPUs are spinning" in v.text, v.text


def test_a_tie_does_not_depend_on_the_hash_seed() -> None:
    """L1: 4 GPUs spinning, 4 idle (all holding memory): the kind came from set order, so
    5 of 8 PYTHONHASHSEEDs said spinning and 3 idle.  Now the order of `KINDS`."""
    code = ("from test_silence_kinds import verdict, SPIN, IDLE\n"
            "print(verdict({**{i: SPIN for i in range(4)}, **{i: IDLE for i in range(4, 8)}}).kind)")
    said = set()
    for seed in range(6):
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", text=True,
                             capture_output=True, timeout=60,
                             env={**os.environ, "PYTHONHASHSEED": str(seed),
                                  "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
        assert res.returncode == 0, res.stderr
        said.add(res.stdout.strip())
    assert said == {"spinning"}, said


def test_a_kv_cache_freed_then_allocated_again_is_loading() -> None:
    """A KV cache resized during the silence: 20 GiB freed, then 14 GiB allocated again.
    Before (review of 023bf1f, helper adv27 M3): "memory flat ... freed 20 GiB: its process
    exited?" (last less first); now the memory held above the lowest is loading."""
    def resize(t: float) -> dict:
        mem = 61 if t < 134 else 41 if t < 140 else 41 + (t - 140) * 0.7
        return {"power": 110, "util": 10, "mem": mem}
    v = verdict({0: resize})
    assert v is not None and v.kind == "loading" and "freed" not in v.text, v.text
