"""The server's GPUs (telemetry/gpu/scope.py; helper adv24 H1, M1, L5): a server on 4 of a
node's 8 GPUs is judged by its own.  Before, the verdict read every GPU of the host: a healthy
TP=4 beside 4 unused GPUs was "a stuck rank (GPUs 4, 5, 6, 7)" (watch exit 3), a hung one
beside another team's busy GPUs "slow, not hung"; the preflight named the neighbour's memory.

Pure tests of the scope and the config, and `watch` on the real H200 start replayed on
GPUs 4-7 of an 8-GPU fake node whose GPUs 0-3 print the idle capture's row."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from logwatch.silence import PhaseWatts, phase_watts_text, silence_verdict
from logwatch.telemetry.gpu import (
    GpuSample, GpuScope, GpuSnapshot, log_named, parse_devices, parse_gpu_config, parse_csv,
)
from logwatch.telemetry.gpu.scope import bus_number
from support.daemon import daemons, free_port, target_cfg, wait_for, write_config  # noqa: F401
from support.gpureplay import FAKE, TRACE_CSV, LogWriter, log_pieces, make_clock, read_log

GIB = 1024 ** 3


def snap(at: float, mem_gib: dict[int, float], power: float = 691.0, util: float = 0.99,
         uuid: str | None = None) -> GpuSnapshot:
    return GpuSnapshot(at, tuple(
        GpuSample(i, uuid=f"GPU-{i}" if uuid else None, power_w=power if m else 81.0,
                  power_limit_w=700.0, util_ratio=util if m else 0.0,
                  mem_used_bytes=int(m * GIB)) for i, m in sorted(mem_gib.items())))


def test_the_gpus_whose_memory_rose_are_the_startups_and_stay_so() -> None:
    scope = GpuScope()
    scope.begin(snap(0, {i: 0 for i in range(8)}))
    assert scope.how == "all" and scope.select(snap(1, {i: 0 for i in range(8)})).count == 8
    assert scope.see(snap(2, {**{i: 0 for i in range(4)}, **{i: 3 for i in range(4, 8)}}))
    assert scope.how == "memory rose" and scope.rose == {4, 5, 6, 7}
    # a rank that died and freed its memory is still one of the startup's GPUs
    later = snap(3, {**{i: 0 for i in range(4)}, 4: 61, 5: 0, 6: 61, 7: 61})
    assert not scope.see(later)
    assert [g.index for g in scope.select(later).gpus] == [4, 5, 6, 7]
    # a neighbour holding 120 GiB before the launch (and growing 0.4 GiB), a 0.2 GiB blip on
    # an idle GPU: not ours
    scope.begin(snap(10, {0: 120, 1: 0}))
    scope.see(snap(11, {0: 120.4, 1: 0.2}))
    assert scope.how == "all"
    # a context (0.6 GiB) on a GPU idle at the launch: a rank's, before its weights
    scope.see(snap(12, {0: 120.4, 1: 0.6}))
    assert scope.rose == {1}


def test_a_rank_stuck_with_only_its_context_is_named() -> None:
    """TP=8: rank 5 hangs in NCCL init holding only its 0.6 GiB CUDA context while the other
    7 load 70 GiB and spin in the collective waiting for it.  Before (helper adv27 M4, a
    regression of a36b406): GPU 5 never rose a GiB, was left out of the scope, and the
    verdict said "7 GPUs spinning ... likely hung", naming no rank."""
    from logwatch.silence import silence_verdict
    snaps = []
    for t in range(0, 400, 2):
        mem = {i: (0.6 + min(t, 100) * 0.7 if i != 5 else 0.6) if t >= 4 else 0 for i in range(8)}
        snaps.append(GpuSnapshot(float(t), tuple(
            GpuSample(i, power_w=90.0 if i == 5 else (120.0 if t > 110 else 300.0),
                      power_limit_w=700.0, power_default_limit_w=700.0,
                      util_ratio=0.0 if i == 5 else (1.0 if t > 110 else 0.4),
                      mem_used_bytes=int(m * GIB)) for i, m in mem.items())))
    scope = GpuScope()
    scope.begin(snaps[0])
    for sn in snaps[1:]:
        scope.see(sn)
    assert scope.rose == set(range(8)), scope.rose
    v = silence_verdict([scope.select(sn) for sn in snaps if sn.at >= 278], 110.0, 398.0,
                        {i: 82.0 for i in range(8)})
    assert v is not None and v.kind == "stuck_rank" and v.text.endswith("a stuck rank (GPU 5)"), v


def test_the_preflight_names_only_the_servers_gpus() -> None:
    """M1: the server on GPUs 4-7 OOMs by itself; GPUs 0-3 hold another server's 120 GiB.
    Before: "GPU 0 held 120 GiB, GPU 1 held 120 GiB, GPU 2 held 120 GiB (and 1 more)"."""
    held = [(i, 120.0) for i in range(4)]
    scope = GpuScope()
    scope.begin(snap(0, {**{i: 120 for i in range(4)}, **{i: 0 for i in range(4, 8)}}))
    assert scope.held(held) == held          # nothing rose yet: every GPU, as before
    scope.see(snap(1, {**{i: 120 for i in range(4)}, **{i: 40 for i in range(4, 8)}}))
    assert scope.held(held) == [] and GpuScope((4, 5, 6, 7)).held(held) == []
    assert GpuScope((0, 5)).held(held) == [(0, 120.0)]


def test_devices_by_index_or_uuid() -> None:
    s = snap(0, {i: 0 for i in range(8)}, uuid="yes")
    assert [g.index for g in GpuScope((4, 5)).select(s).gpus] == [4, 5]
    by_uuid = GpuScope(("GPU-6",))
    by_uuid.begin(s)
    assert [g.index for g in by_uuid.select(s).gpus] == [6] and by_uuid.chosen_index(6)


@pytest.mark.parametrize("value, message", [
    ([4, "x"], "'x' is not a GPU index"), ([4, -1], "-1 is negative"),
    ([4, 4], "GPU 4 is listed twice"), ([], "expected a list"), ("4,five", "'five' is not"),
])
def test_bad_devices_say_what_is_wrong(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^gpu.devices: .*{message}"):
        parse_gpu_config({"devices": value})


def test_devices_alone_leave_the_mode_auto() -> None:
    assert parse_gpu_config({"devices": [4, 5, 6, 7]}).mode == "auto"
    cfg = parse_gpu_config({"command": "nvidia-smi", "devices": "4,GPU-ab"})
    assert cfg.mode == "on" and cfg.devices == (4, "GPU-ab") and cfg.stream.devices == ()
    assert parse_devices(" 4, 5 ", "x") == (4, 5)


def test_a_bad_devices_key_fails_check_naming_file_key_and_field(tmp_path: Path) -> None:
    path = tmp_path / "logwatch.yaml"
    path.write_text("targets:\n  - {name: a, source: /tmp/x.log, gpu: {devices: [4, 4]}}\n")
    res = subprocess.run([sys.executable, "-m", "logwatch", "run", "-c", str(path), "--check"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res
    assert f"{path}" in res.stderr and "targets[0].gpu.devices" in res.stderr and \
        "GPU 4 is listed twice" in res.stderr, res.stderr
    bad = subprocess.run([sys.executable, "-m", "logwatch", "watch", str(path),
                          "--gpu-devices", "4,-1"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "--gpu-devices: -1 is negative" in bad.stderr, bad


def test_unused_gpus_are_no_stuck_rank_and_the_watts_say_how_many() -> None:
    """TP=4 busy on GPUs 0-3, GPUs 4-7 unused (0 MiB): read over all 8 it was "a stuck rank
    (GPUs 4, 5, 6, 7)"."""
    snaps = [snap(t, {**{i: 61 for i in range(4)}, **{i: 0 for i in range(4, 8)}})
             for t in range(20)]
    v = silence_verdict(snaps, 0, 20, {i: 81.0 for i in range(8)})
    assert v.kind == "busy" and v.working and v.named == (), v.text
    assert "4 GPUs busy" in v.text and "GPUs 4, 5, 6, 7 hold no memory" in v.text, v.text
    w = PhaseWatts("s")
    for s in snaps:
        w.add("cuda_graph", GpuScope((0, 1, 2, 3)).select(s))
    assert phase_watts_text(w.summary()).endswith("(total of 4 GPUs)"), w.summary()


# -- live: watch on the replayed start, the server on GPUs 4-7 of 8 --------------------------

STEP, STALL = 0.25, 6.0


def _watch(tmp_path: Path, extra_env: dict[str, str], args: list[str]) -> tuple[int, str]:
    """`watch` on the H200 start replayed on GPUs 4-7 (GPUs 0-3 idle, 0 MiB); its exit and
    output."""
    log = tmp_path / "server.log"
    log.touch()
    clock = make_clock(STEP, lead=6.0)
    env = {**os.environ, **clock.env(), "FAKE_NVSMI_GPUS": "8", "FAKE_NVSMI_IDLE_GPUS": "0,1,2,3",
           "LOGWATCH_STATE_DIR": str(tmp_path / "state"), **extra_env}
    with open(tmp_path / "watch.out", "w+", encoding="utf-8") as out:
        watch = subprocess.Popen(
            [sys.executable, "-m", "logwatch", "watch", str(log), "--stall-after", f"{STALL}s",
             "--gpu", str(FAKE), "--probe", "off", "--no-history", "--timeout", "120s", *args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        writer = LogWriter(log, clock)
        try:
            assert time.time() < clock.wall(log_pieces(read_log())[0][0])
            writer.start()
            code = watch.wait(timeout=clock.end - time.time() + 60)
        finally:
            writer.stop()
            if watch.poll() is None:
                watch.kill()
        out.seek(0)
        return code, out.read()



def _stall(text: str) -> str:
    return next((ln for ln in text.splitlines() if "stalled: no new line" in ln), "")


@pytest.mark.integration
def test_watch_reads_the_servers_gpus_found_by_their_memory(tmp_path: Path) -> None:
    code, text = _watch(tmp_path, {}, [])
    first = _stall(text)
    assert "4 GPUs busy (69" in first and "slow, not hung" in first, text
    assert "stuck rank" not in text, text
    assert code == 0, text                      # ready (watch stops there)
    power = next(ln for ln in text.splitlines() if "gpu power:" in ln)
    assert power.endswith("(total of 4 GPUs)") and "cuda_graph p50 27" in power, power


@pytest.mark.integration
def test_watch_with_gpu_devices_and_a_power_brake_says_throttled(tmp_path: Path) -> None:
    """The BMC's power brake on the server's GPUs (mask 0x88, SM 345 MHz, 190 W at util
    99 %): the work runs on, slowly.  Before: "likely hung (a collective waiting)"."""
    brake = {"FAKE_NVSMI_SET": "clocks_event_reasons.active=0x0000000000000088;"
                               "clocks.sm=345 MHz;power.draw=190.00 W"}
    code, text = _watch(tmp_path, brake, ["--gpu-devices", "4,5,6,7"])
    first = _stall(text)
    assert "4 GPUs throttled (hw_power_brake, hw_slowdown; SM 345 MHz)" in first, text
    assert "busy cannot be told from waiting" in first and "likely hung" not in text, text


def test_the_trace_is_readable_by_the_fake_as_8_gpus() -> None:
    """The fake prints the idle capture's row for GPUs 0-3 (81 W, 0 MiB), the trace's for
    4-7: what the integration tests above run on."""
    res = subprocess.run([str(FAKE), "--query-gpu=index,power.draw,memory.used",
                          "--format=csv,nounits"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "FAKE_NVSMI_CSV": str(TRACE_CSV),
                              "FAKE_NVSMI_GPUS": "8", "FAKE_NVSMI_IDLE_GPUS": "0,1,2,3"})
    rows = parse_csv(res.stdout)[0].gpus
    assert [g.index for g in rows] == list(range(8))
    assert all(g.mem_used_bytes == 0 and 80 < (g.power_w or 0) < 83 for g in rows[:4])


def test_a_server_hung_before_its_gpus_beside_a_busy_neighbour_is_hung() -> None:
    """TP=4 on GPUs 0-3 hangs before its CUDA contexts (0 MiB, idle); another team's TP=4 has
    been busy on GPUs 4-7 since before the launch; no `devices`.  No GPU rose, so the scope is
    every GPU but those another job held at the launch: "idle: hung".  Before (review of
    a36b406, helper adv27 H1): the empty GPUs were left out and the neighbour's judged: "4 GPUs
    busy: slow, not hung", and `watch` never exited."""
    layout = {**{i: 0.0 for i in range(4)}, **{i: 68.0 for i in range(4, 8)}}
    scope = GpuScope()
    scope.begin(snap(0, layout))
    snaps = [snap(t, layout) for t in range(2, 122, 2)]
    for s in snaps:
        scope.see(s)
    v = silence_verdict([scope.select(s) for s in snaps], 40.0, 120.0, {i: 81.0 for i in range(8)})
    assert v is not None and v.kind == "idle" and not v.working, v.text
    assert [g.index for g in v.gpus] == [0, 1, 2, 3]
    # a daemon restarted mid-startup: no snapshot before the launch, every GPU as before
    scope.begin(None)
    assert scope.select(snaps[0]) == snaps[0]


def _neighbour_beside_tp4(neighbour_busy: bool, server_busy: bool, weights_at: int = 0,
                          neighbour_at: int = 400) -> tuple[set[int], Any]:
    """A TP=4 on GPUs 4-7 (contexts at 4 s, then its weights: 70 GiB over 100 s from
    `weights_at`, then a silent phase: busy in a CUDA graph capture, or spinning in a hung
    collective); at `neighbour_at` a neighbour's notebook on GPU 0 makes its CUDA context
    (0.55 GiB): idle, or running small kernels."""
    snaps = []
    for t in range(0, 900 + weights_at, 2):
        gpus = []
        for i in range(8):
            if i >= 4:
                mem = 0 if t < 4 else 0.6 + min(max(t - weights_at, 0), 100) * 0.7
                p, u = ((650.0, 0.98) if server_busy else (120.0, 1.0)) \
                    if t > 110 + weights_at else (300.0, 0.4)
            elif i == 0 and t >= neighbour_at:
                mem, (p, u) = 0.55, ((400.0, 0.95) if neighbour_busy else (85.0, 0.0))
            else:
                mem, p, u = 0, 81.0, 0.0
            gpus.append(GpuSample(i, power_w=p, power_limit_w=700.0, power_default_limit_w=700.0,
                                  util_ratio=u, mem_used_bytes=int(mem * GIB)))
        snaps.append(GpuSnapshot(float(t), tuple(gpus)))
    return _scoped_verdict(snaps)


def _scoped_verdict(snaps: list[GpuSnapshot]) -> tuple[set[int], Any]:
    """The scope's GPUs after `snaps` (the first the level before the launch), and the
    silence verdict on its GPUs over the last 300 s (idle 81 W learned on each)."""
    scope = GpuScope()
    scope.begin(snaps[0])
    for sn in snaps[1:]:
        scope.see(sn)
    end = snaps[-1].at
    return scope.rose, silence_verdict([scope.select(s) for s in snaps if s.at >= end - 198],
                                       end - 298, end, {i: 81.0 for i in range(8)})


def test_a_neighbours_context_after_the_weights_is_not_the_servers() -> None:
    """A context that comes minutes after the server's weights is a neighbour's (a
    notebook's torch.cuda.init on GPU 0 of the node), not a rank's: the launch's ranks make
    theirs together, before any loads its weights.  Before (a regression of c922ee3, which
    took any 0.25 GiB on an idle GPU): a healthy TP=4 busy in a silent graph capture was "a
    stuck rank (GPU 0)" (watch gave up, exit 3), and a hung one "GPU 0 busy alone ...: slow,
    not hung" (followed until --timeout)."""
    rose, v = _neighbour_beside_tp4(neighbour_busy=False, server_busy=True)
    assert rose == {4, 5, 6, 7} and v is not None and v.kind == "busy" and v.working, (rose, v)
    rose, v = _neighbour_beside_tp4(neighbour_busy=True, server_busy=False)
    assert rose == {4, 5, 6, 7} and v is not None and v.kind == "spinning" and not v.working, \
        (rose, v)
    # the notebook came while the server downloaded its weights (its ranks holding only their
    # contexts for 10 minutes): not the server's either, once its GPUs loaded
    rose, v = _neighbour_beside_tp4(neighbour_busy=False, server_busy=True, weights_at=600,
                                    neighbour_at=300)
    assert rose == {4, 5, 6, 7} and v is not None and v.kind == "busy" and v.working, (rose, v)


@pytest.mark.parametrize("late,every", [(40, 2), (60, 5)])
def test_a_rank_whose_context_came_last_and_then_stuck_is_a_rank(late: int, every: int) -> None:
    """A TP=4 on GPUs 4-7 whose rank 7 made its context `late` s after the others (its torch
    import slow over NFS: the others waited for it in NCCL init), then loaded nothing (hung
    reading its weights) while 4-6 loaded theirs and spun in the first collective: the
    scope holds GPU 7, the verdict names it.  Before (a regression of ebb9942, which took a
    context 30 s after the first loading GPU's for a neighbour's), the hang was "likely hung
    (a collective waiting)" on GPUs 4-6, the stuck rank unnamed; nvidia-smi every `every` s."""
    rose, v = _scoped_verdict(_late_rank_through_a_download(late, 0, every))
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "stuck_rank" and v.named == (7,), v


@pytest.mark.parametrize("before", [20, 5])
def test_a_neighbours_context_just_before_the_weights_after_a_download_is_not_the_servers(
        before: int) -> None:
    """A neighbour's notebook makes its context on GPU 0 `before` s before a TP=4 (GPUs 4-7)
    loads its weights, after a 10-minute download (its ranks holding only their contexts):
    not a rank, the ranks' late one waits in NCCL init, not through a download.  Before
    (helper adv37, a regression of dc1d89d): GPU 0 joined the scope, the healthy TP=4 busy in
    a silent graph capture was "a stuck rank (GPU 0)", a hung one "mixed"."""
    rose, v = _neighbour_beside_tp4(neighbour_busy=False, server_busy=True, weights_at=600,
                                    neighbour_at=600 - before)
    assert rose == {4, 5, 6, 7} and v is not None and v.kind == "busy" and v.working, (rose, v)
    rose, v = _neighbour_beside_tp4(neighbour_busy=True, server_busy=False, weights_at=600,
                                    neighbour_at=600 - before)
    assert rose == {4, 5, 6, 7} and v is not None and v.kind == "spinning", (rose, v)


def test_the_scope_saved_is_the_scope_resumed() -> None:
    """What a daemon keeps in the checkpoint (app/attachments/gpu.py) brings the scope back
    as it was; a damaged one is refused with ValueError, never half taken."""
    import json
    scope = GpuScope()
    scope.begin(snap(0, {i: 0 for i in range(8)}))
    scope.see(snap(2, {**{i: 0 for i in range(4)}, **{i: 3 for i in range(4, 8)}}))
    again = GpuScope()
    again.resume(json.loads(json.dumps(scope.saved())))
    flat = snap(900, {**{i: 0.5 for i in range(4)}, **{i: 70 for i in range(4, 8)}})
    assert again.rose == {4, 5, 6, 7} and again.how == "memory rose"
    assert [g.index for g in again.select(flat).gpus] == [4, 5, 6, 7]
    assert not again.see(flat)
    for damage in ({"rose": "4"}, {**scope.saved(), "baseline": {"x": 1}},
                   {**scope.saved(), "loaded_at": {"4": "soon"}},
                   {**scope.saved(), "rose": [4.5]}):
        fresh = GpuScope()
        with pytest.raises(ValueError):
            fresh.resume(damage)
        assert fresh.rose == set() and fresh.baseline == {}


@pytest.mark.integration
def test_a_daemon_restarted_under_a_serving_server_keeps_its_gpus(tmp_path: Path,
                                                                   daemons: Any) -> None:
    """The H200 start replayed on GPUs 4-7 of an 8-GPU node; the daemon restarted (an
    upgrade) once the server serves.  Before, the restarted daemon began the scope afresh
    with no snapshot before the launch: the serving server's memory gains nothing more, so
    all 8 GPUs counted for good (the serving power the node's average, a neighbour's busy
    GPU "slow, not hung" for a hang); now the scope is in the checkpoint."""
    log = tmp_path / "server.log"
    log.touch()
    clock = make_clock(STEP, lead=4.0)
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        target_cfg("tp4", log, probe=False, gpu={"command": str(FAKE), "interval": "0.25s"})])
    d = daemons(cfg, port, env={**clock.env(), "FAKE_NVSMI_GPUS": "8",
                                "FAKE_NVSMI_IDLE_GPUS": "0,1,2,3"})
    d.start()
    writer = LogWriter(log, clock)
    writer.start()
    try:
        first = wait_for(lambda: (t := d.target("tp4")) and t["phase"] == "ready" and t, 90,
                         "ready")
        assert first["gpu"]["scope"] == {"how": "memory rose", "devices": [],
                                         "rose": [4, 5, 6, 7]}, first["gpu"]
        d.stop()
        d.start()
        # the restarted daemon's GPUs read 4 times (its phase power has samples)
        again = wait_for(lambda: (t := d.target("tp4")) and t["gpu"]["up"] and
                         t["gpu"]["phases"] and t, 30, "GPU samples after the restart")
        assert again["gpu"]["scope"] == first["gpu"]["scope"], again["gpu"]
    finally:
        writer.stop()


def test_a_saved_scope_not_yet_taken_up_is_kept_and_a_damaged_one_refused() -> None:
    """After a restart the saved scope waits for the first GPU sample (nvidia-smi hung or
    slow, the server past its weights): the checkpoints written meanwhile keep it as it
    was.  Before, `saved()` was None until that sample, so those checkpoints dropped it and
    a second restart began afresh: scope 'all' for good (helper adv40, cases/g1).  A
    baseline of Infinity (JSON reads it; int() raises OverflowError) is refused like any
    other damage: before, it raised out of the target's tick (cases/g2)."""
    from logwatch.app.attachments.gpu import GpuAttachment
    from logwatch.telemetry.gpu.streams import GpuStreams
    scope = GpuScope()
    scope.begin(snap(0, {i: 0 for i in range(8)}))
    scope.see(snap(2, {**{i: 0 for i in range(4)}, **{i: 3 for i in range(4, 8)}}))
    doc = {"startup": "s1", "scope": scope.saved()}
    att = GpuAttachment(GpuStreams())
    att.resume(doc)
    assert att.saved() == doc
    assert att._resume_scope("s1") and att.scope.rose == {4, 5, 6, 7}
    damaged = GpuAttachment(GpuStreams())
    damaged.resume({"startup": "s1", "scope": {**scope.saved(), "baseline": {"4": float("inf")}}})
    assert damaged._resume_scope("s1") is False and damaged.scope.rose == set()


# -- the launch's size (its args: rules/gpus.py) chooses where memory timing cannot ---------

def _late_rank_through_a_download(late: int, download: int, every: int,
                                  neighbour_at: int | None = None) -> list[GpuSnapshot]:
    """A TP=4 on GPUs 4-7 whose rank 7 makes its context `late` s after the others' (at
    4 s), then the weights are downloaded for `download` s (vLLM, SGLang: after NCCL init)
    before GPUs 4-6 load them and spin in the first collective; rank 7 hangs holding only its
    context.  At `neighbour_at` a neighbour's notebook makes its context on GPU 0."""
    load, snaps = late + 2 + download, []
    for t in range(0, 900 + download, every):
        gpus = []
        for i in range(8):
            if i in (4, 5, 6):
                mem = 0 if t < 4 else 0.6 + min(max(t - load, 0), 100) * 0.7
                p, u = (120.0, 1.0) if t > load + 110 else (300.0, 0.4)
            elif i == 7:
                mem, p, u = (0 if t < late else 0.6), 85.0, 0.0
            elif i == 0 and neighbour_at is not None:
                mem, p, u = (0 if t < neighbour_at else 0.55), 81.0, 0.0
            else:
                mem, p, u = 0, 81.0, 0.0
            gpus.append(GpuSample(i, power_w=p, power_limit_w=700.0, power_default_limit_w=700.0,
                                  util_ratio=u, mem_used_bytes=int(mem * GIB)))
        snaps.append(GpuSnapshot(float(t), tuple(gpus)))
    return snaps


def _sized_verdict(snaps: list[GpuSnapshot], expect: int | None, before: bool = True,
                   named: frozenset[int] = frozenset()) -> tuple[set[int], Any]:
    """`_scoped_verdict` with the launch's size known (`expect`) and the GPUs its log names
    (`named`); `before` False: no snapshot before the launch (a daemon first attached, or
    restarted: the first is the level)."""
    scope = GpuScope()
    scope.expect, scope.hint = expect, named
    scope.begin(snaps[0] if before else None)
    for sn in snaps[1:] if before else snaps:
        scope.see(sn)
    end = snaps[-1].at
    return scope.rose, silence_verdict([scope.select(s) for s in snaps if s.at >= end - 198],
                                       end - 298, end, {i: 81.0 for i in range(8)})


@pytest.mark.parametrize("download,every", [(60, 1), (60, 5), (180, 1), (180, 5)])
def test_the_launch_size_takes_a_late_rank_stuck_through_a_download(download: int,
                                                                    every: int) -> None:
    """Rank 7's context came 40 s late, then a `download` s download, then it hung with
    only its context while 4-6 loaded and spun: the launch says TP=4, 3 loaded, so the
    fourth is the context that came with theirs.  Before (helper adv37 c2, timing alone: a
    context 30 s before the first load, or 30 s after the first contexts), GPU 7 was left
    out and the hang "likely hung (a collective waiting)" on GPUs 4-6, the rank unnamed."""
    rose, v = _sized_verdict(_late_rank_through_a_download(40, download, every), 4)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "stuck_rank" and v.named == (7,), v


@pytest.mark.parametrize("before", [20, 5])
def test_the_launch_size_leaves_out_a_neighbour_beside_a_stuck_rank(before: int) -> None:
    """Every rank's context on time (4 s), a 180 s download, rank 7 stuck with its context;
    a neighbour's notebook makes its context on GPU 0 `before` s before the weights load:
    of the two contexts the launch's fourth GPU is the one that came with the others'.
    Before (adv37 c2 b), GPU 0 joined: "a stuck rank (GPUs 0, 7)"."""
    snaps = _late_rank_through_a_download(4, 180, 5, neighbour_at=186 - before)
    rose, v = _sized_verdict(snaps, 4)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "stuck_rank" and v.named == (7,), v
    assert _sized_verdict(snaps, None)[0] == {0, 4, 5, 6, 7}     # (timing alone: unchanged)


def test_the_launch_size_takes_a_rank_holding_its_context_when_first_seen() -> None:
    """A daemon restarted (no checkpoint) after the TP=4's contexts came, before its
    weights: rank 7 holds its context at the first snapshot, the level, and gains nothing.
    Before (adv37 c8 r), the scope was GPUs 4-6 and the hang "a collective waiting"."""
    snaps = _late_rank_through_a_download(4, 60, 2)[10:]
    rose, v = _sized_verdict(snaps, 4, before=False)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "stuck_rank" and v.named == (7,), v


def test_a_first_attach_past_the_weights_takes_the_launchs_gpus() -> None:
    """A first attach to a TP=4 (GPUs 4-7, 70 GiB each) already past its weights, hung in a
    collective (120 W, util 100 %), a neighbour's notebook busy on GPU 0 (0.55 GiB): no
    snapshot before the launch, nothing rises.  The four GPUs that hold a GiB are the
    launch's.  Before, every GPU of the node counted: "one rank working: slow, not hung"."""
    snaps = [GpuSnapshot(float(t), tuple(
        GpuSample(i, power_w=120.0 if i >= 4 else 400.0 if i == 0 else 81.0,
                  power_limit_w=700.0, power_default_limit_w=700.0,
                  util_ratio=1.0 if i >= 4 else 0.95 if i == 0 else 0.0,
                  mem_used_bytes=int((70 if i >= 4 else 0.55 if i == 0 else 0) * GIB))
        for i in range(8))) for t in range(600, 900, 2)]
    rose, v = _sized_verdict(snaps, 4, before=False)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "spinning" and not v.working, v
    # more GPUs holding memory than the launch has: memory cannot say which, all count
    assert _sized_verdict(snaps, 3, before=False)[0] == set()


@pytest.mark.parametrize("engine,line,gpus", [
    ("sglang", "[2026-12-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-32B', "
               "'tokenizer_path': 'Qwen/Qwen3-32B', 'tp_size': 2, 'port': 30000}", 2),
    ("sglang", "[2026-12-01 10:00:00] server_args={'model_path': 'deepseek-ai/DeepSeek-V3', "
               "'tp_size': 16, 'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '10.0.0.1:5000'}", 8),
    ("sglang", "[2025-06-23 15:06:53] server_args=ServerArgs(model_path='/m', tp_size=4, "
               "pp_size=1, dp_size=2, enable_dp_attention=False, nnodes=1, node_rank=0)", 8),
    ("sglang", "[2025-06-23 15:06:53] server_args=ServerArgs(model_path='/m', tp_size=8, "
               "pp_size=1, dp_size=8, enable_dp_attention=True, nnodes=1, node_rank=0)", 8),
    ("vllm", "(APIServer pid=100) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'Qwen/Qwen3-235B-A22B', 'tensor_parallel_size': 4, "
             "'distributed_executor_backend': 'ray'}", 4),
    ("vllm", "(APIServer pid=100) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'Qwen/Qwen3-8B'}", 1),
    ("vllm", "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'm', 'tensor_parallel_size': 2, 'data_parallel_size': 4, "
             "'data_parallel_size_local': 2}", 4),
    ("vllm", "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'm', 'tensor_parallel_size': 2, 'data_parallel_size': 4, "
             "'data_parallel_rank': 0}", 2),
    ("vllm", "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'm', 'tensor_parallel_size': 8, 'pipeline_parallel_size': 2, "
             "'nnodes': 2, 'node_rank': 1}", 8),
    # --nnodes holds whole replicas: two of TP2 on each node (0.34 nnodes_within_dp), not 2
    ("vllm", "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'm', 'tensor_parallel_size': 2, 'data_parallel_size': 4, "
             "'data_parallel_size_local': 2, 'nnodes': 2, 'node_rank': 1}", 4),
    # an external-LB process of DP4 over 2 nodes: its one replica on one node, not 1
    ("vllm", "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'm', 'tensor_parallel_size': 2, 'data_parallel_size': 4, "
             "'data_parallel_rank': 1, 'nnodes': 2, 'node_rank': 0}", 2),
    ("vllm", "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
             "{'model': 'm', 'tensor_parallel_size': 2, 'data_parallel_size': 4, "
             "'nnodes': 2, 'node_rank': 1}", 4),
])
def test_the_launch_says_how_many_gpus_of_its_node_it_uses(engine: str, line: str,
                                                          gpus: int) -> None:
    """The GPUs of the node a launch uses, from the args line it printed (the packs'
    `gpus:`, rules/gpus.py; SGLang 0.5.23 and vLLM 0.34 field names)."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack(engine))
    pipe.feed((line + "\n").encode(), 1000.0)
    spec = pipe.pack.gpus
    assert spec is not None and spec.count(pipe.state.args, pipe.state.args_partial) == gpus


def test_a_cut_args_line_says_no_size() -> None:
    """A vLLM args dump cut before its sizes: unknown, not 1 (the timing heuristics
    decide)."""
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack("vllm"))
    pipe.feed(b"(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
              b"{'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 4, 'max_mod\n", 1000.0)
    assert pipe.state.args_partial
    assert pipe.pack.gpus is not None and pipe.pack.gpus.count(pipe.state.args, True) is None


def test_the_attachment_gives_the_scope_the_launchs_size() -> None:
    """app/attachments/gpu.py reads the size from the launch's args line (vLLM's
    `non-default args`, TP=4) for the scope: the late rank stuck through a 180 s download
    is the fourth, and the view says the size chose.  A DP supervisor's two servers in one
    stream (each its own args, merged) say no size."""
    from dataclasses import replace
    from types import SimpleNamespace

    from logwatch.app.attachments.gpu import GpuAttachment, launch_gpus
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    pipe = LogPipeline(load_pack("vllm"))
    pipe.feed(b"(APIServer pid=100) INFO 12-01 10:00:00 [startup.py:96] non-default args: "
              b"{'model': 'Qwen/Qwen3-235B-A22B', 'tensor_parallel_size': 4}\n", 1000.0)
    snaps = [replace(s, at=999.0 + s.at) for s in _late_rank_through_a_download(40, 180, 5)]
    att = GpuAttachment(None)  # type: ignore[arg-type]
    att.target = SimpleNamespace(pipe=pipe, catching_up=False)  # type: ignore[assignment]
    att.stream = SimpleNamespace(version=1, up=True, snapshots=snaps)  # type: ignore[assignment]
    att.tick(2200.0)
    assert att.scope.rose == {4, 5, 6, 7}, att.scope.rose
    assert att.scope.to_json() == {"how": "memory rose", "devices": [], "rose": [4, 5, 6, 7],
                                   "launch_gpus": 4}
    dp = LogPipeline(load_pack("vllm"))
    head = (ROOT / "tests/fixtures/built/vllm-034-dp-supervisor.log").read_bytes()
    dp.feed(b"".join(head.splitlines(keepends=True)[:8]), 1000.0)
    assert dp.state.startups == 1 and dp.state.args["data_parallel_rank"] == 1
    assert launch_gpus(dp.state, dp.pack.gpus) is None


@pytest.mark.parametrize("gpus", [[4], {"times": []}, {"times": ["tp_size", 4]},
                                  {"times": ["tp_size"], "over": 2},
                                  {"times": ["tp_size"], "unless": {"dp_size": "x"}},
                                  {"times": ["tp_size"], "nodes": "nnodes"},
                                  {"times": ["tp_size"], "replicas": "dp_size"}])
def test_a_bad_gpus_key_is_a_pack_error_naming_it(tmp_path: Path, gpus: Any) -> None:
    from test_rulepack import minimal_pack, write

    from logwatch.rules.pack import PackError, load_pack
    doc = minimal_pack()
    doc["gpus"] = gpus
    with pytest.raises(PackError) as ei:
        load_pack(str(write(tmp_path, doc)))
    assert ei.value.key == "gpus", ei.value


def _two_tp4_launched_together() -> list[GpuSnapshot]:
    """Two TP=4 servers launched together on one 8-GPU node (a node reboot), contexts at
    4 s, weights from 10 s: A on GPUs 0-3 hangs (rank 3 holds only its context, 0-2 spin
    in a collective), B on 4-7 loads and works (450 W, util 90 %)."""
    snaps = []
    for t in range(0, 900, 2):
        gpus = []
        for i in range(8):
            mem = 0 if t < 4 else 0.6 + min(max(t - 10, 0), 100) * 0.7
            p, u = ((120.0, 1.0) if t > 120 else (300.0, 0.4)) if i < 3 else \
                (85.0, 0.0) if i == 3 else (450.0, 0.9)
            gpus.append(GpuSample(i, power_w=p, power_limit_w=700.0, power_default_limit_w=700.0,
                                  util_ratio=u, mem_used_bytes=int((0.6 if i == 3 and t >= 4
                                                                    else mem) * GIB)))
        snaps.append(GpuSnapshot(float(t), tuple(gpus)))
    return snaps


def test_two_servers_launched_together_each_take_the_gpus_their_log_names() -> None:
    """With NCCL_DEBUG=INFO each rank's communicator names its GPU by NVML index
    (`nvmlDev`): server A's log names 0-3 (or 0-2: rank 3 printed none), B's 4-7.  A is
    "a stuck rank (GPU 3)", B busy.  Before (adv37 c8 (2)), 8 GPUs rose together and both
    read all 8: A "a stuck rank (GPUs 0, 1, 2, 3)"; the launch's size alone cannot say
    whose (7 loaded for 4): still all 8."""
    snaps = _two_tp4_launched_together()
    for named in ({0, 1, 2, 3}, {0, 1, 2}):
        rose, v = _sized_verdict(snaps, 4, named=frozenset(named))
        assert rose == {0, 1, 2, 3}, (named, rose)
        assert v is not None and v.kind == "stuck_rank" and v.named == (3,), v
    rose, v = _sized_verdict(snaps, 4, named=frozenset({4, 5, 6, 7}))
    assert rose == {4, 5, 6, 7} and v is not None and v.kind == "busy" and v.working, (rose, v)
    rose, v = _sized_verdict(snaps, None, named=frozenset({0, 1, 2, 3}))   # the names alone
    assert rose == {0, 1, 2, 3} and v is not None and v.named == (3,), (rose, v)
    assert _sized_verdict(snaps, 4)[0] == set(range(8))
    # names of more GPUs than the launch has (several nodes' lines in one file): not used
    assert _sized_verdict(snaps, 4, named=frozenset(range(8)))[0] == set(range(8))


def test_nccl_init_lines_name_the_launchs_gpus() -> None:
    """The real NCCL 2.28.9 `Init START` / `Init COMPLETE` lines (H100, NCCL_DEBUG=INFO,
    tests/fixtures/gpu/h100/nccl-init.log) and a TP=4's on GPUs 4-7 (`cudaDev 0..3
    nvmlDev 4..7` under CUDA_VISIBLE_DEVICES=4,5,6,7): `State.gpus`, kept in the
    checkpoint, begun afresh by the next launch."""
    from logwatch.machine.checkpoint import state_from_json, state_to_json
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    real = (ROOT / "tests/fixtures/gpu/h100/nccl-init.log").read_bytes()
    pipe = LogPipeline(load_pack("sglang"))
    pipe.feed(b"[2026-12-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-8B', "
              b"'tp_size': 1}\n" + real, 1000.0)
    assert pipe.state.gpus == {0}, pipe.state.gpus
    pipe = LogPipeline(load_pack("sglang"))
    lines = [b"[2026-12-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-32B', "
             b"'tp_size': 4}\n"]
    for r in range(4):
        for what in (b"Init START", b"Init COMPLETE"):
            lines.append(b"h100-15:%d:%d [%d] NCCL INFO ncclCommInitRankConfig comm 0x5581c0e%d "
                         b"rank %d nranks 4 cudaDev %d nvmlDev %d busId %x000 commId "
                         b"0xb0f3cb3ab6ba8299 - %s\n" % (2710 + r, 2710 + r, r, r, r, r, 4 + r,
                                                         0x9a + r, what))
    pipe.feed(b"".join(lines), 1000.0)
    assert pipe.state.gpus == {4, 5, 6, 7}, pipe.state.gpus
    assert state_from_json(state_to_json(pipe.state)).gpus == {4, 5, 6, 7}
    assert state_from_json(state_to_json(pipe.state)).gpu_buses == {0x9a000, 0x9b000, 0x9c000,
                                                                      0x9d000}
    pipe.feed(b"[2026-12-01 10:30:00] server_args={'model_path': 'Qwen/Qwen3-32B', "
              b"'tp_size': 4}\n", 1100.0)
    assert pipe.state.startups == 2 and pipe.state.gpus == set() == pipe.state.gpu_buses


def _nccl_tp4(first_gpu: int) -> bytes:
    """An SGLang TP=4 launch on GPUs first_gpu.. with NCCL_DEBUG=INFO: its args, then each
    rank's `Init START` (NCCL 2.28.9's format)."""
    out = [b"[2026-12-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-32B', "
           b"tp_size=4, pp_size=1, dp_size=1, enable_dp_attention=False, nnodes=1)\n"]
    for r in range(4):
        out.append(b"node1:%d:%d [%d] NCCL INFO ncclCommInitRankConfig comm 0x151314a%d rank %d "
                   b"nranks 4 cudaDev %d nvmlDev %d busId 60 commId 0xb0f3cb3ab6ba8299 - "
                   b"Init START\n" % (500 + r, 500 + r, r, r, r, r, first_gpu + r))
    return b"".join(out)


def test_two_servers_launched_together_each_read_their_own_gpus_live() -> None:
    """app/attachments/gpu.py: two targets on one node's stream, two TP=4 SGLang servers
    launched together with NCCL_DEBUG=INFO, A on GPUs 0-3 (hung, rank 3 stuck with its
    context), B on 4-7 (working): each target's scope is its own 4.  Before, both read all
    8 (A "a stuck rank (GPUs 0, 1, 2, 3)")."""
    from dataclasses import replace
    from types import SimpleNamespace

    from logwatch.app.attachments.gpu import GpuAttachment
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    snaps = [replace(s, at=999.0 + s.at) for s in _two_tp4_launched_together()]
    scopes = []
    for first in (0, 4):
        pipe = LogPipeline(load_pack("sglang"))
        pipe.feed(_nccl_tp4(first), 1000.0)
        att = GpuAttachment(None)  # type: ignore[arg-type]
        att.target = SimpleNamespace(pipe=pipe, catching_up=False)  # type: ignore[assignment]
        att.stream = SimpleNamespace(version=1, up=True, snapshots=snaps)  # type: ignore[assignment]
        att.tick(1900.0)
        scopes.append(att.scope.to_json())
    assert scopes == [{"how": "memory rose", "devices": [], "rose": [0, 1, 2, 3],
                       "launch_gpus": 4, "log_gpus": [0, 1, 2, 3]},
                      {"how": "memory rose", "devices": [], "rose": [4, 5, 6, 7],
                       "launch_gpus": 4, "log_gpus": [4, 5, 6, 7]}], scopes


def test_a_first_attach_in_nccl_init_beside_a_neighbours_server_takes_the_contexts() -> None:
    """A first attach to a TP=4 hung in its NCCL init (GPUs 4-7 holding only their
    contexts, 85 W, util 0) beside another team's server working on GPU 0 (70 GiB, 450 W):
    the four GPUs holding a context are the launch's, not the one holding weights alone.
    (Taking the GPUs holding weights first, when fewer than the launch has, read the
    neighbour alone: "busy: slow, not hung" for a hang.)"""
    snaps = [GpuSnapshot(float(t), tuple(
        GpuSample(i, power_w=450.0 if i == 0 else 85.0 if i >= 4 else 81.0,
                  power_limit_w=700.0, power_default_limit_w=700.0,
                  util_ratio=0.9 if i == 0 else 0.0,
                  mem_used_bytes=int((70 if i == 0 else 0.6 if i >= 4 else 0) * GIB))
        for i in range(8))) for t in range(600, 900, 2)]
    rose, v = _sized_verdict(snaps, 4, before=False)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "idle" and not v.working, v


def test_pods_name_their_gpus_by_bus_not_by_their_own_nvml_index() -> None:
    """Two TP=4 pods on one 8-GPU node (the kubelet's log files watched on the node, its
    nvidia-smi): inside a container NVML counts its own GPUs 0..N-1, so both logs print
    `nvmlDev 0..3`, each with its GPUs' real `busId`.  B (host GPUs 4-7) hangs, rank 7
    holding its context; A (0-3) works.  By bus (nvidia-smi's `pci.bus_id`): B's scope is
    4-7, "a stuck rank (GPU 7)".  Before (helper adv42), by nvmlDev both took 0-3: B read A's
    GPUs, "busy: slow, not hung" for a hang."""
    from dataclasses import replace
    from types import SimpleNamespace

    from logwatch.app.attachments.gpu import GpuAttachment
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    bus = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb]     # an HGX H100's
    snaps = [replace(s, at=999.0 + s.at, gpus=tuple(sorted(
        (replace(g, index=(g.index + 4) % 8, bus_id=f"00000000:{bus[(g.index + 4) % 8]:02X}:00.0")
         for g in s.gpus), key=lambda g: g.index)))
        for s in _two_tp4_launched_together()]     # (the hung server on 4-7, the other 0-3)
    for first, want in ((0, [0, 1, 2, 3]), (4, [4, 5, 6, 7])):
        log = _nccl_tp4(0).replace(b"busId 60", b"busId %x000")
        log = log % tuple(bus[first + r] for r in range(4))
        pipe = LogPipeline(load_pack("sglang"))
        pipe.feed(log, 1000.0)
        assert pipe.state.gpus == {0, 1, 2, 3}       # (the container's own indexes)
        att = GpuAttachment(None)  # type: ignore[arg-type]
        att.target = SimpleNamespace(pipe=pipe, catching_up=False)  # type: ignore[assignment]
        att.stream = SimpleNamespace(version=1, up=True, snapshots=snaps)  # type: ignore[assignment]
        att.tick(1900.0)
        assert sorted(att.scope.rose) == want, (first, att.scope.to_json())
        end = snaps[-1].at
        v = silence_verdict([att.scope.select(s) for s in snaps if s.at >= end - 198],
                            end - 298, end, {i: 81.0 for i in range(8)})
        if first == 4:
            assert v is not None and v.kind == "stuck_rank" and v.named == (7,), v
        else:
            assert v is not None and v.kind == "busy" and v.working, v
    # no buses in the snapshots (a driver that refused the field): NCCL's indexes, as before
    assert log_named({0, 1}, {0x9a000}, _two_tp4_launched_together()[0]) == {0, 1}


def test_a_gpus_bus_reads_as_nccl_prints_it() -> None:
    """nvidia-smi's `pci.bus_id` and NCCL's `busId` (its hex digits as one number): the real
    H200 capture's `00000000:00:06.0` is NCCL's `busId 60` on that VM (fixtures)."""
    assert bus_number("00000000:00:06.0") == 0x60
    assert bus_number("00000000:E4:00.0") == 0xe4000 and bus_number("0001:E4:00.0") == 0x1e4000
    assert bus_number(None) is None and bus_number("[N/A]") is None


def _neighbour_loads_during_the_download(end: int) -> list[GpuSnapshot]:
    """A TP=4 on GPUs 4-7 makes its contexts at 4 s, then downloads its weights (idle, only
    the contexts held) until 600 s, loads them, and from 700 s hangs spinning in a collective
    (120 W, util 100 %); at 100 s another team's job loads 70 GiB onto GPU 0 and works."""
    snaps = []
    for t in range(0, end, 2):
        gpus = []
        for i in range(8):
            mem = (0.6 if t >= 4 else 0) + (min(70, (t - 600) * 5) if t > 600 else 0) \
                if i >= 4 else (0 if t < 98 else 0.5 if t < 100 else min(70, (t - 99) * 5)) \
                if i == 0 else 0
            p, u = (450.0, 0.9) if i == 0 and t >= 100 else (120.0, 1.0) if i >= 4 and t > 700 \
                else (85.0 if i >= 4 else 81.0, 0.0)
            gpus.append(GpuSample(i, power_w=p, power_limit_w=700.0, power_default_limit_w=700.0,
                                  util_ratio=u, mem_used_bytes=int(mem * GIB)))
        snaps.append(GpuSnapshot(float(t), tuple(gpus)))
    return snaps


def test_a_neighbour_loading_during_the_download_is_not_the_launchs() -> None:
    """The launch's four contexts came together, GPU 0's 94 s later and long before the
    launch's GPUs loaded: not the launch's, though it loaded.  Before (helper adv42), the
    sized scope took it first: mid-download {0, 4, 5, 6}, "mixed (GPU 0)" with one GPU
    working, rank 7 left out; hung after the weights, 5 loaded for 4, timing decided:
    {0, 4, 5, 6, 7}, "mixed", working (slow, not hung) for a hang."""
    rose, v = _sized_verdict(_neighbour_loads_during_the_download(400), 4)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and not v.working, v
    rose, v = _sized_verdict(_neighbour_loads_during_the_download(900), 4)
    assert rose == {4, 5, 6, 7}, rose
    assert v is not None and v.kind == "spinning" and not v.working, v
    assert _sized_verdict(_neighbour_loads_during_the_download(900), None)[0] == {0, 4, 5, 6, 7}


def test_a_late_rank_beside_an_early_neighbours_context_is_a_rank() -> None:
    """Ranks 4-6 make their contexts at 4 s, a neighbour's notebook its own on GPU 0 at 10 s
    (four contexts together), rank 7 its context 40 s late; the others waited for it and
    all four load from 46 s: rank 7, whose context came just before they loaded, is the
    launch's, not the notebook."""
    snaps = []
    for t in range(0, 400, 2):
        mem = {i: 0.0 if t < 4 else 0.6 + min(max(t - 46, 0), 100) * 0.7 for i in (4, 5, 6)}
        mem.update({7: 0 if t < 44 else 0.6 if t < 46 else 2.6, 0: 0 if t < 10 else 0.55})
        snaps.append(GpuSnapshot(float(t), tuple(
            GpuSample(i, power_w=100.0, power_limit_w=700.0, util_ratio=0.5,
                      mem_used_bytes=int(mem.get(i, 0) * GIB)) for i in range(8))))
    assert _sized_verdict(snaps, 4)[0] == {4, 5, 6, 7}
