"""GPU telemetry (logwatch/telemetry/gpu/, issue 14): parsing real H200 captures, and streams
of real processes: the replay stand-in `tests/tools/fake-nvidia-smi` (a copy of ../shared's), run here and over a
real OpenSSH server (tests/support/sshd.py).

No mocks: every stream runs a real process.  Every wait polls a condition with a deadline;
no sleep stands in for synchronisation.  Every test is bounded well under 20 s.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from conftest import ROOT
from logwatch.telemetry.gpu import (
    FULL_FIELDS, MINIMAL_FIELDS, STATUS_HUNG, STATUS_MISSING, STATUS_NO_DRIVER, STATUS_NO_GPUS,
    THROTTLE_REASONS, GpuConfig, GpuCsvParser, GpuSample, GpuSnapshot, GpuStream, GpuStreams,
    RunEnd, canonical_field, classify_run, classify_start, decode_throttle, gpu_summary,
    invalid_field, parse_csv, parse_gpu_config, plan_gpu, query_args,
)
from logwatch.sources.ssh import SSHOptions, SSHPool, SSHTarget
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)

FAKE = ROOT / "tests" / "tools" / "fake-nvidia-smi"
H200 = ROOT / "tests" / "fixtures" / "gpu" / "h200"
MiB = 1024 * 1024
POLL = 0.02

# the 25 fields the captures asked for (the fake's ASKED), for the `noheader` capture
CAPTURE_FIELDS = (
    "timestamp,index,name,uuid,pci.bus_id,driver_version,pstate,power.draw,power.draw.instant,"
    "power.limit,enforced.power.limit,power.max_limit,utilization.gpu,utilization.memory,"
    "memory.used,memory.total,memory.free,temperature.gpu,temperature.memory,clocks.sm,"
    "clocks.mem,clocks.max.sm,clocks_event_reasons.active,fan.speed,"
    "ecc.errors.uncorrected.volatile.total").split(",")

assert FAKE.exists(), f"{FAKE} is missing"


# ----------------------------------------------------------------------------------------------
# helpers

def run(coro: Awaitable[Any], timeout: float = 18.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0,
                stream: GpuStream | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            state = (f"; up={stream.up} status={stream.status!r} error={stream.error!r} "
                     f"counters={stream.counters}" if stream is not None else "")
            raise AssertionError(f"timed out ({timeout}s) waiting for {what}{state}")
        await asyncio.sleep(POLL)


def marked_fake(tmp_path: Path) -> Path:
    """The fake under a name unique to this test (a symlink), so that its processes can be
    found in /proc by their command line."""
    link = tmp_path / "nvidia-smi"
    link.symlink_to(FAKE)
    return link


def live_processes(marker: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains `marker`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z" and "pgrep" not in cmd:
            out.append(int(d.name))
    return out


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def fast(command: str, interval: float = 0.2, timeout: float = 5.0,
         first_timeout: float | None = None) -> GpuConfig:
    """A stream config for tests: the first output's watchdog the same as the others' unless
    given (60 s in use)."""
    return GpuConfig(mode="on", command=command, interval=interval, timeout=timeout,
                     first_timeout=first_timeout or timeout)


def stream_local(config: GpuConfig, **kw: Any) -> GpuStream:
    kw.setdefault("retry", (0.2, 1.0))
    return GpuStream(config, **kw)


# ----------------------------------------------------------------------------------------------
# a. parsing the real captures

def test_idle_capture_with_units() -> None:
    snaps = parse_csv((H200 / "query-idle.csv").read_bytes())
    assert len(snaps) == 1
    (g,) = snaps[0].gpus
    assert g == GpuSample(
        index=0, name="NVIDIA H200", uuid="GPU-a48fee24-56a0-1ff8-5012-171efeb71a10",
        power_w=81.85, power_limit_w=700.0, power_default_limit_w=None, util_ratio=0.0,
        mem_used_bytes=0, mem_total_bytes=143771 * MiB, sm_clock_hz=345e6,
        sm_clock_max_hz=1980e6, temperature_c=39.0, throttle_mask=0x1,
        throttle_reasons=frozenset({"idle"}), timestamp="2026/12/02 17:37:59.113",
        bus_id="00000000:00:06.0")
    # offline (no clock): the snapshot's time is the printed one, read as local time
    assert snaps[0].at == pytest.approx(
        time.mktime(time.strptime("2026/12/02 17:37:59", "%Y/%m/%d %H:%M:%S")) + 0.113)


def test_idle_capture_without_header_reads_by_the_asked_fields() -> None:
    p = GpuCsvParser(CAPTURE_FIELDS)
    snaps = p.feed((H200 / "query-idle-nounits.csv").read_bytes()) + p.finish()
    assert len(snaps) == 1 and p.skipped == 0
    g = snaps[0].gpus[0]
    assert (g.power_w, g.power_limit_w, g.mem_total_bytes, g.sm_clock_hz, g.sm_clock_max_hz) \
        == (81.84, 700.0, 143771 * MiB, 345e6, 1980e6)
    assert g.throttle_reasons == {"idle"} and g.temperature_c == 39.0


def test_load_capture_reaches_the_power_cap() -> None:
    """82 W idle -> 694 W of the 700 W enforced limit at 100% util, SM clock held at
    1425-1515 MHz of 1980 by the software power cap (0x4)."""
    p = GpuCsvParser()
    snaps = p.feed((H200 / "query-load-lms500.csv").read_bytes()) + p.finish()
    assert len(snaps) == 38 and p.skipped == 0 and p.headers == 1
    gpus = [s.gpus[0] for s in snaps]
    assert all(s.count == 1 for s in snaps)
    assert gpus[0].power_w == pytest.approx(81.78) and gpus[0].throttle_reasons == {"idle"}
    top = max(gpus, key=lambda g: g.power_w or 0)
    assert top.power_w == pytest.approx(694.12) and round(top.power_w or 0) == 694
    assert {g.power_limit_w for g in gpus} == {700.0}
    capped = [g for g in gpus if "sw_power_cap" in g.throttle_reasons]
    assert len(capped) == 30 and all(g.throttle_mask == 0x4 for g in capped)
    assert max(g.util_ratio or 0 for g in capped) == 1.0
    assert min(g.util_ratio or 0 for g in capped) >= 0.99
    at_cap = [g for g in capped if (g.power_w or 0) > 680]
    clocks = {int((g.sm_clock_hz or 0) / 1e6) for g in at_cap}
    assert min(clocks) >= 1425 and max(clocks) == 1515 and 1440 in clocks
    assert {g.sm_clock_max_hz for g in gpus} == {1980e6}
    assert gpu_summary(snaps[24]) == \
        "GPU x1 694/700 W (99%) · util 100% · SM 1.5/2.0 GHz · power-capped (sw_power_cap)"
    assert gpu_summary(snaps[0]) == \
        "GPU x1 82/700 W (12%) · util 0% · SM 0.3/2.0 GHz · not power-capped"


def test_cooldown_capture_decays_to_idle() -> None:
    snaps = parse_csv((H200 / "query-cooldown-l1.csv").read_bytes())
    watts = [s.gpus[0].power_w for s in snaps]
    assert watts[0] == pytest.approx(170.68) and watts[2] == pytest.approx(97.48)
    assert watts[-1] is not None and watts[-1] < 83
    assert snaps[0].gpus[0].throttle_reasons == frozenset()     # 0x0: nothing holds it
    assert snaps[-1].gpus[0].throttle_reasons == {"idle"}
    assert snaps[-1].gpus[0].sm_clock_hz == 345e6


def test_old_throttle_field_is_printed_under_the_new_name() -> None:
    text = (H200 / "query-old-throttle-field.txt").read_text()
    assert text.splitlines()[0] == "clocks_event_reasons.active"
    assert canonical_field("clocks_throttle_reasons.active") == \
        canonical_field("clocks_event_reasons.active")
    assert canonical_field("clocks.current.sm [MHz]") == canonical_field("clocks.sm")
    assert "clocks_throttle_reasons.active" in FULL_FIELDS   # the name every driver accepts


def test_bogus_field_message_is_recognised_and_not_parsed() -> None:
    text = (H200 / "query-bogus-field.txt").read_text()
    assert invalid_field(text) == "bogus.field"
    p = GpuCsvParser(FULL_FIELDS)
    assert p.feed(text.encode()) + p.finish() == []
    assert p.skipped >= 1


@pytest.mark.parametrize("path", sorted(H200.iterdir()), ids=lambda p: p.name)
def test_every_capture_parses_without_error(path: Path) -> None:
    """Every file of the capture, query output or not, goes through the parser: the query
    captures give snapshots, the others (dmon, screens, help, logs) none, and nothing raises."""
    data = path.read_bytes()
    p = GpuCsvParser()
    whole = p.feed(data) + p.finish()
    q = GpuCsvParser()
    pieces = [s for i in range(0, len(data), 7) for s in q.feed(data[i:i + 7])] + q.finish()
    assert [s.gpus for s in whole] == [s.gpus for s in pieces]   # any chunking, same rows
    if path.name.startswith(("query-", "startup-trace")) and path.suffix == ".csv" and \
            "nounits" not in path.name:
        assert whole and all(s.gpus[0].power_limit_w == 700.0 for s in whole)
    else:
        assert whole == []


def test_absent_values_are_none_not_zero() -> None:
    header = ("index, power.draw [W], enforced.power.limit [W], power.limit [W], "
              "utilization.gpu [%], memory.used [MiB], temperature.gpu, clocks.current.sm [MHz], "
              "clocks_event_reasons.active, fan.speed [%]\n")
    row = "3, [N/A], [Not Supported], 600.00, [Unknown Error], [Insufficient Permissions], " \
          "N/A, [N/A], [N/A], [N/A]\n"
    (snap,) = parse_csv(header + row)
    g = snap.gpus[0]
    assert g.index == 3
    assert (g.power_w, g.util_ratio, g.mem_used_bytes, g.temperature_c, g.sm_clock_hz) == \
        (None, None, None, None, None)
    assert g.power_limit_w == 600.0          # enforced absent: power.limit
    assert g.throttle_mask is None and g.throttle_reasons == frozenset()
    assert g.throttled() == {}               # unknown: no series rather than false zeros
    assert gpu_summary(snap) == "GPU x1"


def test_garbage_and_oversized_lines_are_skipped_and_counted() -> None:
    header = b"index, power.draw [W], power.limit [W]\n"
    p = GpuCsvParser()
    out = p.feed(header + b"0, 100.0, 600\n")
    out += p.feed(b"\x00\xff garbage \xfe\n1, 2\n")            # binary junk; too few cells
    out += p.feed(b"x, 1.0, 2.0\n")                             # no index
    out += p.feed(b"y" * 40_000)                                # a 100 KiB line in pieces ...
    out += p.feed(b"z" * 40_000)
    out += p.feed(b"w" * 20_000 + b"\n")                        # ... ends here
    out += p.feed(b"q" * (70 * 1024) + b"\n")                   # one in one piece
    out += p.feed(b"1, 101.0, 600\n0, 102.0, 600\n")
    out += p.finish()
    assert p.skipped == 3 and p.oversized == 2
    assert [[g.index for g in s.gpus] for s in out] == [[0, 1], [0]]
    assert [g.power_w for s in out for g in s.gpus] == [100.0, 101.0, 102.0]


def test_rows_are_grouped_into_one_snapshot_per_loop() -> None:
    """Eight GPUs, three loops: a loop ends at an index not above the previous one, and once
    the highest index is known, as soon as it arrives."""
    header = "index, power.draw [W], enforced.power.limit [W], clocks_event_reasons.active\n"
    loop = "".join(f"{i}, {200 + i}.0, 600.00, 0x{4 if i < 3 else 0:016x}\n" for i in range(8))
    p = GpuCsvParser(clock=lambda: 1234.0)
    first = p.feed((header + loop).encode())
    assert first == [] and p.pending == 8                # the first loop: nothing tells its end
    second = p.feed(loop.encode())
    assert len(second) == 2 and p.pending == 0           # loop 1 on the repeat, loop 2 at index 7
    snap = second[0]
    assert snap.at == 1234.0 and [g.index for g in snap.gpus] == list(range(8))
    assert snap.total_power_w == pytest.approx(sum(200 + i for i in range(8)))
    assert gpu_summary(snap) == "GPU x8 204/600 W (34%) · power-capped (sw_power_cap) on 3/8"
    p.feed(loop[: loop.index("5,")].encode())
    assert p.pending == 5
    tail = p.flush()                                     # the output paused
    assert tail is not None and tail.count == 5


def test_throttle_bits() -> None:
    assert decode_throttle(0x1) == {"idle"}
    assert decode_throttle(0x4) == {"sw_power_cap"}
    assert decode_throttle(0xFF) == set(THROTTLE_REASONS)
    assert decode_throttle(0x100) == frozenset()          # display clock: kept in the mask only
    assert [decode_throttle(1 << i) for i in range(8)] == [
        {"idle"}, {"applications_clocks"}, {"sw_power_cap"}, {"hw_slowdown"}, {"sync_boost"},
        {"sw_thermal"}, {"hw_thermal"}, {"hw_power_brake"}]
    g = GpuSample(0, throttle_mask=0x44, throttle_reasons=decode_throttle(0x44))
    assert g.throttled() == {r: int(r in ("sw_power_cap", "hw_thermal")) for r in THROTTLE_REASONS}


def test_summary_texts() -> None:
    def gpu(i: int, **kw: Any) -> GpuSample:
        base: dict[str, Any] = dict(power_w=250.0, power_limit_w=600.0, util_ratio=0.97,
                                    sm_clock_hz=1.4e9, sm_clock_max_hz=2.0e9, throttle_mask=0)
        base.update(kw)
        base["throttle_reasons"] = decode_throttle(base["throttle_mask"] or 0)
        return GpuSample(i, **base)

    waiting = GpuSnapshot(0.0, tuple(gpu(i) for i in range(8)))
    assert gpu_summary(waiting) == \
        "GPU x8 250/600 W (42%) · util 97% · SM 1.4/2.0 GHz · not power-capped"
    capped = GpuSnapshot(0.0, tuple(gpu(i, power_w=598.0, throttle_mask=0x4) for i in range(8)))
    assert gpu_summary(capped).endswith("· power-capped (sw_power_cap)")
    hot = GpuSnapshot(0.0, (gpu(0, throttle_mask=0x40), gpu(1)))
    assert gpu_summary(hot).endswith("· not power-capped · thermal-throttled (hw_thermal) on 1/2")
    minimal = GpuSnapshot(0.0, (GpuSample(0, power_w=80.0, power_limit_w=700.0, util_ratio=0.0),))
    assert gpu_summary(minimal) == "GPU x1 80/700 W (11%) · util 0%"
    assert gpu_summary(None) == gpu_summary(GpuSnapshot(0.0, ())) == "GPU: no data"


def test_query_arguments() -> None:
    assert query_args(MINIMAL_FIELDS, 2.0) == [
        "--query-gpu=index,power.draw,power.limit,utilization.gpu,memory.used,memory.total",
        "--format=csv,nounits", "-l", "2"]
    assert query_args(("index",), 0.5)[-2:] == ["-lms", "500"]
    assert query_args(("index",), 1.5)[-2:] == ["-lms", "1500"]


# ----------------------------------------------------------------------------------------------
# b. config

def test_config_values() -> None:
    assert parse_gpu_config(None) == parse_gpu_config("auto") == GpuConfig()
    assert (GpuConfig().mode, GpuConfig().interval, GpuConfig().timeout) == ("auto", 2.0, 10.0)
    assert parse_gpu_config(False).mode == parse_gpu_config("false").mode == "off"
    assert not parse_gpu_config("off").enabled
    assert parse_gpu_config(True).mode == "on"
    c = parse_gpu_config({"command": "/opt/nv/bin/nvidia-smi", "interval": "500ms",
                          "timeout": "1m"})
    assert c == GpuConfig("on", "/opt/nv/bin/nvidia-smi", 0.5, 60.0)
    assert parse_gpu_config({"command": ["sudo", "-n", "nvidia-smi"]}).argv == \
        ["sudo", "-n", "nvidia-smi"]
    assert parse_gpu_config({"interval": 5, "timeout": "30s"}).interval == 5.0


@pytest.mark.parametrize("value, words", [
    ("sometimes", ["gpu:", "auto, false"]),
    (5, ["gpu:", "int"]),
    ({"interval": "fast"}, ["gpu.interval", "not a duration"]),
    ({"interval": True}, ["gpu.interval", "duration"]),
    ({"interval": "0s"}, ["gpu.interval", "more than 0"]),
    ({"interval": "10ms"}, ["gpu.interval", "100ms"]),
    ({"timeout": "-3"}, ["gpu.timeout"]),
    ({"interval": "10s"}, ["gpu.timeout", "longer than the interval"]),
    ({"command": ""}, ["gpu.command"]),
    ({"command": "nvidia-smi 'unclosed"}, ["gpu.command", "cannot split"]),
    ({"command": []}, ["gpu.command"]),
    ({"commnd": "x", "every": 1}, ["gpu:", "commnd", "every", "command, interval, timeout"]),
])
def test_config_errors_name_the_field(value: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as e:
        parse_gpu_config(value)
    for w in words:
        assert w in str(e.value), str(e.value)
    with pytest.raises(ValueError, match=r"^targets\[2\]\.gpu"):
        parse_gpu_config(value, where="targets[2].gpu")


def test_where_auto_runs() -> None:
    auto, on, off = GpuConfig(), GpuConfig(mode="on"), GpuConfig(mode="off")

    def on_path(name: str) -> str | None:
        return "/usr/bin/" + name

    def nowhere(name: str) -> str | None:
        return None

    assert plan_gpu(auto, "ssh", which=nowhere) == "ssh"
    assert plan_gpu(auto, "file", which=on_path) == "local"
    assert plan_gpu(auto, "file", which=nowhere) is None
    assert plan_gpu(auto, "command", which=on_path) is None
    assert plan_gpu(auto, "stdin", which=on_path) is None
    assert plan_gpu(on, "command", which=nowhere) == "local"
    assert plan_gpu(on, "ssh", which=nowhere) == "ssh"
    assert all(plan_gpu(off, k, which=on_path) is None for k in ("ssh", "file", "command"))


# ----------------------------------------------------------------------------------------------
# c. the stream, local processes

def test_local_stream_of_eight_gpus(tmp_path: Path) -> None:
    fake = marked_fake(tmp_path)

    async def main() -> None:
        s = stream_local(fast(f"env FAKE_NVSMI_GPUS=8 {fake}"), history=5)
        s.start()
        try:
            await until(lambda: s.up and s.latest is not None and s.latest.count == 8,
                        "8 GPUs", stream=s)
            snap = s.latest
            assert snap is not None
            assert [g.index for g in snap.gpus] == list(range(8))
            assert {g.power_limit_w for g in snap.gpus} == {700.0}
            assert {g.power_default_limit_w for g in snap.gpus} == {700.0}
            assert {g.name for g in snap.gpus} == {"NVIDIA H200"}
            assert s.status == "8 GPUs" and not s.minimal and s.fields == FULL_FIELDS
            assert abs(snap.at - time.time()) < 5          # this machine's clock
            # the replay reaches the load rows: every GPU at the software power cap
            await until(lambda: s.latest is not None and
                        len(s.latest.with_reason(["sw_power_cap"])) == 8, "the power cap",
                        stream=s)
            assert "power-capped (sw_power_cap)" in s.summary()
            assert s.latest.total_power_w is not None and s.latest.total_power_w > 8 * 290
            await until(lambda: s.counters.snapshots > 6, "more snapshots", stream=s)
            assert len(s.power_history) == 5                # bounded
            assert all(w > 0 for w in s.power_values())
            assert s.counters.restarts == 0 and s.counters.skipped_lines == 0
            pid = s.pid
            assert pid is not None and live_processes(str(fake))
        finally:
            await s.stop()
        assert not s.up and s.pid is None
        await until(lambda: not live_processes(str(fake)), "nvidia-smi gone after stop()")

    run(main())


def test_unknown_field_falls_back_once_to_the_minimal_set(tmp_path: Path) -> None:
    """An older driver that does not know `enforced.power.limit`: exit 2, then the minimal
    set, which it runs."""
    calls = tmp_path / "calls"
    old = script(tmp_path / "old-nvidia-smi", f"""
echo "$*" >> {calls}
case "$*" in *enforced.power.limit*)
  echo 'Field "enforced.power.limit" is not a valid field to query.'; echo; exit 2;;
esac
FAKE_NVSMI_GPUS=2 exec {FAKE} "$@"
""")

    async def main() -> None:
        s = stream_local(fast(str(old)))
        s.start()
        try:
            await until(lambda: s.up and s.latest is not None and s.latest.count == 2,
                        "samples from the minimal set", stream=s)
            assert s.minimal and s.fields == MINIMAL_FIELDS and s.counters.fallbacks == 1
            assert "minimal" in s.status
            g = s.latest.gpus[0] if s.latest else None
            assert g is not None and g.power_limit_w == 700.0 and g.power_w is not None
            assert g.sm_clock_hz is None and g.throttle_mask is None and g.name is None
            assert "SM" not in s.summary() and "capped" not in s.summary()
            lines = calls.read_text().splitlines()
            assert len(lines) == 2 and s.counters.restarts == 0
            assert "--query-gpu=" + ",".join(FULL_FIELDS) in lines[0]
            assert "--query-gpu=" + ",".join(MINIMAL_FIELDS) in lines[1]
        finally:
            await s.stop()

    run(main())


@pytest.mark.parametrize("rejects, calls_made", [
    # a field of the minimal set itself: falling back would change nothing
    ('echo \'Field "index" is not a valid field to query.\'; exit 2', 1),
    # the full set, then the minimal one too
    ("""case "$*" in *enforced.power.limit*) f=enforced.power.limit;; *) f=memory.used;; esac
echo "Field \\"$f\\" is not a valid field to query."; exit 2""", 2),
])
def test_a_driver_that_rejects_the_minimal_set_is_not_retried_in_a_storm(
        tmp_path: Path, rejects: str, calls_made: int) -> None:
    calls = tmp_path / "calls"
    ancient = script(tmp_path / "ancient-nvidia-smi", f'echo "$*" >> {calls}\n{rejects}\n')

    async def main() -> None:
        s = stream_local(fast(str(ancient)))
        s.start()
        try:
            await until(lambda: "rejects" in s.status, "the rejection", stream=s)
            assert not s.up and s.status.startswith("nvidia-smi rejects field")
            assert len(calls.read_text().splitlines()) == calls_made   # then it waits
            wait = s.next_retry_in()
            assert wait is not None and wait >= 25             # minutes-scale backoff
            assert s.counters.restarts == 0
        finally:
            await s.stop()

    run(main())


def test_a_hung_nvidia_smi_is_killed_and_restarted(tmp_path: Path) -> None:
    fake = marked_fake(tmp_path)

    async def main() -> None:
        s = stream_local(fast(f"env FAKE_NVSMI_HANG=1 {fake}", interval=0.2, timeout=1.0))
        s.start()
        try:
            await until(lambda: s.pid is not None, "the first start", stream=s)
            first = s.pid
            await until(lambda: s.counters.restarts >= 1 and s.status == STATUS_HUNG,
                        "a watchdog restart", timeout=8, stream=s)
            assert not s.up and s.counters.hangs >= 1 and "no sample for" in (s.error or "")
            assert not Path(f"/proc/{first}").exists()            # killed and reaped
            await until(lambda: s.counters.starts >= 2, "a second start", timeout=8, stream=s)
        finally:
            await s.stop()
        await until(lambda: not live_processes(str(fake)), "nvidia-smi gone after stop()")

    run(main())


def test_a_stream_that_wedges_after_samples_goes_down(tmp_path: Path) -> None:
    """The driver wedges mid-run: one loop of 8 GPUs, then silence."""
    stuck = tmp_path / "stuck"                     # `sleep`, under a name to find it by
    stuck.symlink_to(shutil.which("sleep") or "/bin/sleep")
    wedge = script(tmp_path / "wedging-nvidia-smi", f"""
FAKE_NVSMI_GPUS=8 {FAKE} "$1" "$2"
{stuck} 600
""")

    async def main() -> None:
        s = stream_local(fast(str(wedge), interval=0.2, timeout=2.0))
        s.start()
        try:
            await until(lambda: s.up and s.latest is not None and s.latest.count == 8,
                        "the first loop", stream=s)
            await until(lambda: s.status == STATUS_HUNG, "the watchdog", timeout=8, stream=s)
            assert not s.up and s.latest is not None       # the last snapshot is kept ...
            assert s.summary() == f"GPU: {STATUS_HUNG}"     # ... and not shown as current
            assert s.to_dict()["snapshot"] is None
        finally:
            await s.stop()
        # the whole process group went: the wrapper and the command it waits for
        await until(lambda: not live_processes(str(tmp_path)), "the wrapper and its child gone")

    run(main())


def test_no_nvidia_smi_on_the_host(tmp_path: Path) -> None:
    async def main() -> None:
        for command in (str(tmp_path / "no-such-nvidia-smi"),     # FileNotFoundError
                        f"env {tmp_path / 'no-such-nvidia-smi'}"):  # exit 127, as remotely
            s = stream_local(fast(command))
            s.start()
            try:
                await until(lambda: s.status == STATUS_MISSING, "the status", stream=s)
                assert not s.up and s.latest is None and s.counters.restarts == 0
                wait = s.next_retry_in()
                assert wait is not None and wait >= 25         # minutes, not a retry storm
                assert s.summary() == "GPU: no nvidia-smi on host"
            finally:
                t0 = time.monotonic()
                await s.stop()
                assert time.monotonic() - t0 < 2               # stop() cuts the wait short

    run(main())


@pytest.mark.parametrize("says, code, status", [
    ("No devices were found", 6, STATUS_NO_GPUS),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
     "that the latest NVIDIA driver is installed and running.", 9, STATUS_NO_DRIVER),
])
def test_a_host_without_gpus_or_driver_waits_minutes(tmp_path: Path, says: str, code: int,
                                                     status: str) -> None:
    calls = tmp_path / "calls"
    smi = script(tmp_path / "nvidia-smi", f'echo x >> {calls}\necho "{says}"\nexit {code}\n')

    async def main() -> None:
        s = stream_local(fast(str(smi)))
        s.start()
        try:
            await until(lambda: s.status == status, "the status", stream=s)
            assert not s.up and s.error == says and len(calls.read_text().splitlines()) == 1
            wait = s.next_retry_in()
            assert wait is not None and wait >= 25
        finally:
            await s.stop()

    run(main())


def test_streams_are_shared_per_host_and_stopped_with_the_last_target(tmp_path: Path) -> None:
    fake = marked_fake(tmp_path)

    async def main() -> None:
        reg = GpuStreams()
        cfg = fast(f"env FAKE_NVSMI_GPUS=2 {fake}")
        a = reg.acquire(cfg)
        b = reg.acquire(fast(f"env FAKE_NVSMI_GPUS=2 {fake}", interval=1.0))  # first one wins
        try:
            assert a is b and reg.refs(a) == 2 and reg.streams() == [a]
            assert a.config == cfg and a.host == "local"
            await until(lambda: a.up, "the shared stream", stream=a)
            assert len(live_processes(str(fake))) == 1           # one nvidia-smi for both
            await reg.release(b)
            assert reg.refs(a) == 1 and a.up
            await reg.release(a)
            assert reg.streams() == [] and not a.up
            await until(lambda: not live_processes(str(fake)), "nvidia-smi gone")
        finally:
            await reg.close()

    run(main())


# ----------------------------------------------------------------------------------------------
# d. over a real sshd

def ssh_pair(server: SSHServer, path: str = "/var/log/sglang.log") -> tuple[SSHTarget, SSHOptions]:
    opts = SSHOptions(known_hosts=str(server.known_hosts), client_keys=(str(server.client_key),))
    return SSHTarget.parse(server.url(path)), opts


@pytest.mark.integration
def test_eight_gpus_over_ssh(sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    fake = marked_fake(tmp_path)

    async def main() -> None:
        pool = SSHPool()
        reg = GpuStreams(pool, retry=(0.2, 1.0))
        cfg = fast(f"env FAKE_NVSMI_GPUS=8 {fake}", interval=0.2, timeout=5.0)
        try:
            s = reg.acquire(cfg, ssh=ssh_pair(sshd_server, "/var/log/a.log"))
            t = reg.acquire(cfg, ssh=ssh_pair(sshd_server, "/var/log/b.log"))  # same host
            assert s is t and reg.refs(s) == 2 and s.host.endswith(f"127.0.0.1:{sshd_server.port}")
            await until(lambda: s.up and s.latest is not None and s.latest.count == 8,
                        "8 GPUs over ssh", stream=s)
            assert {g.power_limit_w for g in s.latest.gpus} == {700.0}
            await until(lambda: s.latest is not None and
                        len(s.latest.with_reason(["sw_power_cap"])) == 8,
                        "the power cap over ssh", stream=s)
            assert s.status == "8 GPUs" and s.counters.skipped_lines == 0
            assert pool.connects == 1                             # the host's one connection
            assert len(live_processes(str(fake))) == 1
            await reg.release(s)
            await reg.release(t)
            assert not s.up
            await until(lambda: not live_processes(str(fake)), "the remote nvidia-smi gone")
        finally:
            await reg.close()
            await pool.close()

    run(main())


def hung_stream(fake: Path, server: SSHServer, pool: SSHPool) -> GpuStream:
    """A stream over SSH of an nvidia-smi that hangs (a wedged driver), its watchdog at 1 s."""
    return GpuStream(fast(f"env FAKE_NVSMI_HANG=1 {fake}", interval=0.2, timeout=1.0),
                     ssh=ssh_pair(server), pool=pool, retry=(0.2, 1.0))


@pytest.mark.integration
def test_a_hung_nvidia_smi_over_ssh_is_killed_on_the_host(
        sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    """Closing a session does not end a blocked command; the stream's pty does (and sshd
    refuses the `signal` request for root logins, as the tests may run)."""
    fake = marked_fake(tmp_path)

    async def main() -> None:
        pool = SSHPool()
        s = hung_stream(fake, sshd_server, pool)
        s.start()
        try:
            await until(lambda: s.counters.starts >= 3 and s.status == STATUS_HUNG,
                        "two watchdog restarts", timeout=12, stream=s)
            assert s.counters.restarts >= 2 and not s.up
            # the killed ones gone, and the last one running (sshd answers the exec request
            # when it has forked: a pty hung up before its child took it as its terminal
            # signals nothing, and the command then runs on unsignalled: seen twice in ~20 CI
            # runs, when stop() came right after the third start)
            await until(lambda: len(live_processes(str(fake))) == 1,
                        "the hung ones gone from the host, the last one running", timeout=10,
                        stream=s)
        finally:
            await s.stop()
            await pool.close()
        # (sshd ends the session's processes when the pty closes: seconds on a loaded host)
        await until(lambda: not live_processes(str(fake)), "none left after stop()",
                    timeout=30)

    run(main(), timeout=60)


@pytest.mark.integration
def test_a_stop_right_after_a_start_leaves_no_hung_nvidia_smi(
        sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    """The stream stopped the moment nvidia-smi started, 15 times, on a host kept busy (two
    spinning processes): no hung one left.  sshd answers the exec request once it has
    forked; a pty hung up before its child took it as its terminal signals nothing (9 of 40
    such stops left one running for ever, before stop() waited PTY_SETTLE)."""
    fake = marked_fake(tmp_path)
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]

    async def one() -> None:
        pool = SSHPool()
        s = hung_stream(fake, sshd_server, pool)
        s.start()
        try:
            await until(lambda: s.counters.starts >= 1, "a start", timeout=20, stream=s)
        finally:
            await s.stop()
            await pool.close()

    try:
        for _ in range(15):
            run(one(), timeout=60)
    finally:
        for p in spin:
            p.kill()
            p.wait()

    async def none_left() -> None:
        await until(lambda: not live_processes(str(fake)), "none left", timeout=30)

    run(none_left(), timeout=60)


@pytest.mark.integration
def test_no_nvidia_smi_over_ssh(sshd_server: SSHServer, tmp_path: Path) -> None:  # noqa: F811
    async def main() -> None:
        pool = SSHPool()
        for command, said in (("nvidia-smi-not-installed-here", "command not found"),
                              (str(tmp_path / "nvidia-smi"), "No such file or directory")):
            s = GpuStream(fast(command), ssh=ssh_pair(sshd_server), pool=pool)
            s.start()
            try:
                await until(lambda: s.status == STATUS_MISSING, "the status", stream=s)
                assert not s.up and said in (s.error or "")
                wait = s.next_retry_in()
                assert wait is not None and wait >= 25
                assert s.counters.restarts == 0
            finally:
                await s.stop()
        await pool.close()

    run(main())


# -- what a run's end means (run.classify_run: pure, one row per kind of end) ---------------

@pytest.mark.parametrize("end, fields, action, status", [
    (RunEnd(code=2, head=b'Field "clocks.max.sm" is not a valid field to query.\n'),
     FULL_FIELDS, "fallback", "old driver: asking for the minimal field set"),
    (RunEnd(code=2, head=b'Field "power.draw" is not a valid field to query.\n'),
     FULL_FIELDS, "wait", 'nvidia-smi rejects field "power.draw"'),
    (RunEnd(code=2, head=b'Field "x.y" is not a valid field to query.\n'),
     MINIMAL_FIELDS, "wait", 'nvidia-smi rejects field "x.y"'),
    (RunEnd(code=127, head=b"bash: nvidia-smi: command not found\n"),
     FULL_FIELDS, "wait", STATUS_MISSING),
    (RunEnd(code=1, head=b"sh: 1: nvidia-smi: not found\n"), FULL_FIELDS, "wait", STATUS_MISSING),
    (RunEnd(code=126), FULL_FIELDS, "wait", "cannot run nvidia-smi: permission denied"),
    (RunEnd(code=6, head=b"No devices were found\n"), FULL_FIELDS, "wait", STATUS_NO_GPUS),
    (RunEnd(code=9), FULL_FIELDS, "wait", STATUS_NO_DRIVER),
    # sshd's `ForceCommand internal-sftp`, as it answers a command on a pty (seen against
    # OpenSSH 9): before, restarted with backoff and warned about for ever
    (RunEnd(code=1, head=b"Connection from user root 127.0.0.1 port 52024: refusing non-sftp "
                         b"session\r\n"),
     FULL_FIELDS, "wait", "the SSH account allows SFTP only: no nvidia-smi"),
    (RunEnd(code=1, head=b"This service allows sftp connections only.\n"),
     FULL_FIELDS, "wait", "the SSH account allows SFTP only: no nvidia-smi"),
    (RunEnd(code=6, samples=3), FULL_FIELDS, "restart", "nvidia-smi exited with 6"),
    (RunEnd(code=None, hung=True), FULL_FIELDS, "restart", STATUS_HUNG),
    (RunEnd(code=None, lost="connection reset"), FULL_FIELDS, "restart", "connection lost"),
    (RunEnd(code=0, samples=5), FULL_FIELDS, "restart", "nvidia-smi exited with 0"),
])
def test_classify_run_says_what_an_end_means(end: RunEnd, fields: tuple[str, ...], action: str,
                                             status: str) -> None:
    v = classify_run(end, "nvidia-smi", fields, timeout=10.0)
    assert (v.action, v.status) == (action, status)
    assert v.why, "every end has a reason for the status line's details"


def test_classify_run_names_the_output_or_the_exit_status() -> None:
    assert classify_run(RunEnd(code=127), "nvsmi", FULL_FIELDS, 10.0).why == "nvsmi: exit status 127"
    assert classify_run(RunEnd(code=9), "nvsmi", FULL_FIELDS, 10.0).why == "nvsmi: exit status 9"
    hung = classify_run(RunEnd(hung=True), "nvsmi", FULL_FIELDS, 10.0)
    assert (hung.kind, hung.why) == ("hung", "no sample for 10s: killed")
    out = classify_run(RunEnd(code=3, head=b"\n  boom\nmore\n"), "nvsmi", FULL_FIELDS, 10.0)
    assert (out.kind, out.why) == ("exited", "exited with 3: boom")


def test_classify_start_says_what_a_failed_start_means() -> None:
    import asyncssh

    from logwatch.telemetry.gpu.proc import Missing
    local = [classify_start(e, "nvsmi", None) for e in (
        Missing("nvsmi"), PermissionError(13, "Permission denied"), OSError(5, "I/O error"))]
    assert [(v.action, v.status) for v in local] == [
        ("wait", STATUS_MISSING), ("wait", "cannot run nvsmi: permission denied"),
        ("restart", "cannot run nvsmi")]
    assert local[1].why == "cannot run nvsmi: Permission denied"
    said = lambda e: f"explained: {type(e).__name__}"   # noqa: E731
    refused = classify_start(asyncssh.PermissionDenied("no"), "nvsmi", said)
    assert (refused.action, refused.status, refused.kind, refused.why) == \
        ("wait", "cannot connect", "quiet", "explained: PermissionDenied")
    lost = classify_start(ConnectionResetError(), "nvsmi", said)
    assert (lost.action, lost.status, lost.kind) == ("restart", "cannot connect", "start")
    # MaxSessions 1: the log's reader holds the one session (seen against OpenSSH 9: code 2,
    # "open failed"); before, "cannot connect" and a restart every few seconds
    full = classify_start(asyncssh.ChannelOpenError(2, "open failed"), "nvsmi", said)
    assert (full.action, full.status) == ("wait", "the node refuses another SSH session")
    assert "MaxSessions" in full.why
