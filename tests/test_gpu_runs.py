"""nvidia-smi's runs under the watchdog (telemetry/gpu/run.py) against what helper adv24
found (M2, M7, M6, L6, M5): a slow first output, every GPU lost, one GPU slow to answer, a
wedged driver, failures a restart does not mend, a GPU fallen off the bus.  A local
`GpuStream` on tests/tools/fake-nvidia-smi (the real H200 rows; its error line as the real
tool prints it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from logwatch.silence import silence_verdict
from logwatch.telemetry.gpu import (
    FULL_FIELDS, STATUS_HUNG, STATUS_WEDGED, GpuSample, GpuSnapshot, RunEnd, classify_run,
    gone_gpus,
)
from test_gpu import FAKE, fast, run, script, stream_local, until


def test_a_slow_first_output_is_waited_for(tmp_path: Path) -> None:
    """M2: nvidia-smi prints nothing for its first seconds (persistence mode off: 20 s on 8
    GPUs; a slow login shell over SSH).  Before: the 10 s watchdog (1 s here) killed every
    start, for ever: 6 kills, 0 samples in 100 s."""
    slow = script(tmp_path / "slow-nvidia-smi", f'sleep 2.5\nFAKE_NVSMI_GPUS=8 exec {FAKE} "$@"\n')

    async def main() -> None:
        s = stream_local(fast(str(slow), interval=0.2, timeout=1.0, first_timeout=6.0))
        s.start()
        try:
            await until(lambda: s.up and s.latest is not None, "the first sample", timeout=10,
                        stream=s)
            assert s.counters.hangs == 0 and s.counters.starts == 1
        finally:
            await s.stop()

    run(main())


def test_what_nvidia_smi_says_instead_of_rows_is_the_status(tmp_path: Path) -> None:
    """M2: every GPU lost (Xid 79): nvidia-smi runs on and prints `Unable to determine the
    device handle ...: Unknown Error` per GPU each loop.  Before: "nvidia-smi hung:
    restarted", the error never shown."""
    lost = script(tmp_path / "lost-nvidia-smi", f'FAKE_NVSMI_LOST=all FAKE_NVSMI_GPUS=8 exec {FAKE} "$@"\n')

    async def main() -> None:
        s = stream_local(fast(str(lost), interval=0.2, timeout=1.0))
        s.start()
        try:
            # a watchdog's kill of a run that printed its errors (on a loaded machine the
            # fake's first loop can come after the first 1 s watchdog: that run said nothing,
            # and "hung" is its right status; CI saw it once).  A regression never gets here.
            await until(lambda: s.counters.hangs >= 1 and s.status != STATUS_HUNG,
                        "a watchdog after the errors", timeout=15, stream=s)
            # the latest of the loop's lines: any of the 8 GPUs' (which one is timing)
            assert re.fullmatch(r"nvidia-smi: Unable to determine the device handle for "
                                r"GPU0000:1[8-9A-F]:00\.0: Unknown Error.*", s.status), s.status
            assert s.status != STATUS_HUNG and not s.up
        finally:
            await s.stop()

    run(main())
    head = b"index, power.draw [W]\nUnable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    v = classify_run(RunEnd(hung=True, head=head), "nvidia-smi", FULL_FIELDS, 10.0)
    assert v.action == "restart" and "Unknown Error" in v.status and "only:" in v.why


def test_a_slow_gpu_does_not_split_the_loop(tmp_path: Path) -> None:
    """M7: GPU 4 answers 0.8 s late each loop (interval 1 s: a loop completes after a 0.5 s
    pause).  Before: every loop split in two snapshots (4 GPUs, then 4), the status "4
    GPUs" and the total power half of it."""
    slow = script(tmp_path / "slowgpu-nvidia-smi",
                  f'FAKE_NVSMI_SLOW_GPU=4:0.8 FAKE_NVSMI_GPUS=8 exec {FAKE} "$@"\n')

    async def main() -> None:
        s = stream_local(fast(str(slow), interval=1.0, timeout=5.0))
        s.start()
        try:
            await until(lambda: len(s.snapshots) >= 6, "six snapshots", timeout=15, stream=s)
            sizes = [x.count for x in s.snapshots]
            # the first loop may be cut (its last index is not known yet), none after it
            assert all(n == 8 for n in sizes[2:]), sizes
            assert s.status == "8 GPUs", s.status
        finally:
            await s.stop()

    run(main(), timeout=30)


def test_a_wedged_driver_gets_the_long_wait_after_three_hangs(tmp_path: Path) -> None:
    """M6: every nvidia-smi hangs (a wedged driver).  Before: a new one every ~45 s for ever
    (adv24 wedged/: 12 in 6 minutes; over SSH each killed run stayed on the node)."""
    async def main() -> None:
        s = stream_local(fast(f"env FAKE_NVSMI_HANG=1 {FAKE}", interval=0.2, timeout=0.5))
        s.start()
        try:
            await until(lambda: s.status == STATUS_WEDGED, "the driver given up on", timeout=12,
                        stream=s)
            assert s.counters.starts == 3 and "3 runs in a row" in (s.error or "")
            wait = s.next_retry_in()
            assert wait is not None and wait >= 25, wait             # minutes, not seconds
        finally:
            await s.stop()

    run(main())


@pytest.mark.parametrize("prints, code, status", [
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95",
     18, "NVIDIA driver/library version mismatch"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that "
     "the NVIDIA Display Driver is properly installed and present in your system.", 12,
     "no libnvidia-ml on host"),
    ("sudo: a password is required", 1, "sudo asks for a password"),
])
def test_a_permanent_failure_waits_long_and_is_said_once(
        tmp_path: Path, prints: str, code: int, status: str) -> None:
    """L6: before, these restarted every <= 60 s with a warning each time, for ever."""
    calls = tmp_path / "calls"
    broken = script(tmp_path / "broken-nvidia-smi",
                    f"echo x >> {calls}\ncat <<'END'\n{prints}\nEND\nexit {code}\n")

    async def main() -> None:
        s = stream_local(fast(str(broken)))
        s.start()
        try:
            await until(lambda: status in s.status, "the status", stream=s)
            wait = s.next_retry_in()
            assert wait is not None and wait >= 25 and s.counters.restarts == 0, wait
            assert len(calls.read_text().splitlines()) == 1
        finally:
            await s.stop()

    run(main())


def test_a_gpu_that_falls_off_the_bus_is_named(tmp_path: Path) -> None:
    """M5: GPU 3 falls off the bus (Xid 79) after 1 s: nvidia-smi prints its error line in
    place of the row.  Before: the status said "7 GPUs" and the verdict "7 GPUs ... likely
    hung", the lost GPU never named."""
    lost = script(tmp_path / "xid79-nvidia-smi", "FAKE_NVSMI_LOST=3 FAKE_NVSMI_LOST_AFTER=1 "
                  f'FAKE_NVSMI_GPUS=8 exec {FAKE} "$@"\n')

    async def main() -> None:
        s = stream_local(fast(str(lost), interval=0.2, timeout=5.0))
        s.start()
        try:
            await until(lambda: s.up and s.latest is not None and s.latest.count == 7,
                        "GPU 3 gone", timeout=10, stream=s)
            await until(lambda: "GPU 3" in s.status, "GPU 3 named", timeout=5, stream=s)
            assert s.status.startswith("7 GPUs; not answering: GPU 3; Unable to determine the "
                                       "device handle for GPU0000:1B:00.0: Unknown Error"), s.status
            verdict = silence_verdict(list(s.snapshots), s.latest.at - 1, s.latest.at + 0.1,
                                      gone=s.missing)
            assert verdict is not None and verdict.text.endswith(
                "; not answering: GPU 3; Unable to determine the device handle for "
                "GPU0000:1B:00.0: Unknown Error (fallen off the bus? Xid 79)"), verdict.text
        finally:
            await s.stop()

    run(main())


def test_gone_gpus_forgive_a_loop_cut_in_two() -> None:
    """A first loop cut by a pause (GPUs 0-3, then 4-7) loses no GPU; one absent from two
    loops in a row is gone."""
    def snap(*idx: int) -> GpuSnapshot:
        return GpuSnapshot(0.0, tuple(GpuSample(i) for i in idx))
    seen: set[int] = set()
    assert gone_gpus(seen, None, snap(0, 1, 2, 3)) == []
    assert gone_gpus(seen, snap(0, 1, 2, 3), snap(4, 5, 6, 7)) == []
    assert gone_gpus(seen, snap(4, 5, 6, 7), snap(*range(8))) == []
    assert gone_gpus(seen, snap(*range(8)), snap(0, 1, 2, 4, 5, 6, 7)) == []
    assert gone_gpus(seen, snap(0, 1, 2, 4, 5, 6, 7), snap(0, 1, 2, 4, 5, 6, 7)) == ["GPU 3"]


def test_only_nvidia_smis_lost_gpu_lines_are_a_gpu_not_answering() -> None:
    """Between a loop's rows over SSH a login script's background job may print (adv18 F8b):
    that is skipped, not said as a GPU fallen off the bus; nvidia-smi's own line for a lost
    GPU is.  Before this, any non-row line after the first row was "not answering ... (fallen
    off the bus? Xid 79)" in the status and the stall page."""
    from logwatch.telemetry.gpu.parse import GpuCsvParser
    from test_gpu import H200
    csv = (H200 / "query-idle.csv").read_text().splitlines()
    header, row = csv[0], csv[1]
    row1 = row.replace(", 0, NVIDIA", ", 1, NVIDIA", 1)
    p = GpuCsvParser()
    text = "\n".join([header, row, "[1]+  Done                    module load cuda/12.4", row1,
                      "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error",
                      ""])
    snaps = p.feed(text.encode()) + p.finish()
    errors = [e for s in snaps for e in s.errors]
    assert errors == ["Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error"]
