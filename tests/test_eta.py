"""The startup ETA (history.py): on the second start of a target it is within 20 % of the
true remaining time.

A recorded startup with known phase durations (launching 30 s, 24 shards in 120 s at an
uneven pace, allocating 10 s, autotune 40 s, CUDA graphs 60 s: ready at 261 s) is replayed
twice with `now` following the log's own timestamps.  The first replay leaves its phase
durations in the target's StartupHistory; during the second, at several points, the ETA is
compared with the true time left until the ready line.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from pathlib import Path

import pytest

from logwatch.app.config import TargetConfig
from logwatch.eta import startup_eta
from logwatch.state.history import StartupHistory
from logwatch.machine import Ready, Restarted, State
from logwatch.machine.rates import phase_left
from logwatch.pipeline import LogPipeline
from logwatch.state.positions import PositionStore
from logwatch.rules.pack import READY, load_all_shipped, load_pack
from logwatch.sources.base import Data, Opened
from logwatch.sources.ssh import SSHPool
from logwatch.app.attachments.history import HistoryAttachment
from logwatch.app.target import Target

T0 = 1_767_261_600.0          # 2026-01-01 10:00:00 UTC
READY_AT = 261.0
SHARDS = 24
TOLERANCE = 0.20


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0 + t))


def startup(seed: int = 0) -> list[tuple[float, str]]:
    """(seconds since launch, text written then) of one SGLang startup."""
    out: list[tuple[float, str]] = []

    def line(t: float, msg: str, tag: str | None = "TP0") -> None:
        out.append((t, f"[{stamp(t)}{' ' + tag if tag else ''}] {msg}\n"))

    line(0, "server_args=ServerArgs(model_path='Qwen/Qwen3-235B-A22B-FP8', tp_size=1, "
            "mem_fraction_static=0.88, port=30000)", None)
    line(2, "Init torch distributed begin.")
    line(8, "Init torch distributed ends. mem usage=0.41 GB")
    line(30, "Load weight begin. avail mem=78.50 GB")
    # 24 shards in 120 s, uneven (3..7 s each), tqdm frames redrawn with \r on one line
    rng = random.Random(seed)
    raw = [rng.uniform(3.0, 7.0) for _ in range(SHARDS)]
    steps = [120.0 * r / sum(raw) for r in raw]
    t = 30.0
    out.append((t, f"\rLoading safetensors checkpoint shards:   0% Completed | 0/{SHARDS} "
                   "[00:00<?, ?it/s]"))
    for k in range(1, SHARDS + 1):
        t += steps[k - 1]
        el = t - 30.0
        per = el / k
        rem = per * (SHARDS - k)
        out.append((t, f"\rLoading safetensors checkpoint shards: {100 * k // SHARDS:3d}% Completed"
                       f" | {k}/{SHARDS} [{int(el) // 60:02d}:{int(el) % 60:02d}<"
                       f"{int(rem) // 60:02d}:{int(rem) % 60:02d}, {per:5.2f}s/it]"))
    out.append((150.0, "\n"))
    line(151, "Load weight end. elapsed=121.00 s, type=Qwen3MoeForCausalLM, avail mem=17.12 GB, "
              "mem usage=61.38 GB.")
    line(155, "KV Cache is allocated. #tokens: 1921184, K size: 5.12 GB, V size: 5.12 GB")
    line(158, "Memory pool end. avail mem=6.02 GB")
    line(161, "Running FlashInfer autotune...")
    line(200, "FlashInfer autotune completed.")
    line(201, "Capture cuda graph begin. This can take up to several minutes. avail mem=5.80 GB")
    out.append((205.0, "\r  0%|          | 0/12 [00:00<?, ?it/s]"))
    for i in range(12):
        tt = 205.0 + 4.0 * (i + 1)
        out.append((tt, f"\rCapturing batches (bs={64 - 4 * i} avail_mem=5.50 GB): "
                        f"{100 * (i + 1) // 12:3d}%|          | {i + 1}/12 [00:{4 * i:02d}<00:10, "
                        "0.25it/s]"))
    out.append((253.0, "\n"))
    line(258, "Capture cuda graph end. Time elapsed: 57.00 s. mem usage=0.61 GB. avail mem=5.19 GB.")
    line(259, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", None)
    line(260, 'INFO:     127.0.0.1:40318 - "POST /generate HTTP/1.1" 200 OK', None)
    line(READY_AT, "The server is fired up and ready to roll!", None)
    return out


def shift(steps: list[tuple[float, str]], by: float) -> list[tuple[float, str]]:
    """The same startup `by` seconds later (its timestamps rewritten)."""
    out = []
    for t, text in steps:
        out.append((t + by, text.replace(stamp(t), stamp(t + by)) if text.startswith("[") else text))
    return out


@pytest.fixture(scope="module")
def pack():  # type: ignore[no-untyped-def]
    return load_pack("sglang")


def feed_all(pipe: LogPipeline, steps: list[tuple[float, str]]) -> list[object]:
    events: list[object] = []
    for t, text in steps:
        events += pipe.feed(text.encode(), T0 + t)
    return events


def check_point(label: str, eta: float, truth: float) -> str | None:
    if not math.isfinite(eta) or abs(eta - truth) > TOLERANCE * truth:
        return f"{label}: ETA {eta:.1f} s, true remaining {truth:.1f} s"
    return None


# (label, seconds since launch) to evaluate the ETA at, besides the shard fractions
TIMES = [("launching, 10 s in", 10.0), ("launching, 25 s in", 25.0),
         ("allocating, 5 s in", 156.0), ("autotune, 5 s in", 166.0),
         ("autotune, 30 s in", 191.0), ("cuda_graph, 10 s in", 211.0),
         ("cuda_graph, 50 s in", 251.0)]


def replay_and_check(steps: list[tuple[float, str]], feed, eta_at, state_of) -> list[str]:  # type: ignore[no-untyped-def]
    """Feed `steps` (relative times) through `feed(text, now)`; at each point of TIMES and at
    25 % / 75 % of the shards, compare `eta_at(now)` with the true remaining time."""
    problems: list[str] = []
    pending = sorted(TIMES, key=lambda x: x[1])
    fractions = {SHARDS // 4: "25 % of the shards", 3 * SHARDS // 4: "75 % of the shards"}
    checked: list[str] = []
    for t, text in steps:
        while pending and pending[0][1] < t:
            label, at = pending.pop(0)
            p = check_point(label, eta_at(T0 + at), READY_AT - at)
            checked.append(label)
            if p:
                problems.append(p)
        feed(text, T0 + t)
        shards = state_of().progress.get("shards")
        if shards is not None and shards.current in fractions:
            label = fractions.pop(shards.current)
            p = check_point(f"{label} (at {t:.0f} s)", eta_at(T0 + t), READY_AT - t)
            checked.append(label)
            if p:
                problems.append(p)
    assert not fractions and not pending, (fractions, pending)
    assert len(checked) == len(TIMES) + 2
    return problems


def test_second_start_eta_within_20_percent(tmp_path: Path, pack) -> None:  # type: ignore[no-untyped-def]
    """LogPipeline + StartupHistory, driven directly: the first startup is recorded, the
    second (a fresh pipeline, the history read back from state_dir) is checked."""
    steps = startup(seed=1)
    history = StartupHistory(tmp_path, "gpu1", "Qwen3-235B")
    first = LogPipeline(pack)
    events = feed_all(first, steps)
    assert first.state.phase == READY and any(isinstance(e, Ready) for e in events)
    durations = first.state.durations()
    assert durations == pytest.approx({"launching": 30.0, "loading_shards": 121.0,
                                       "allocating": 10.0, "autotune": 40.0,
                                       "cuda_graph": 60.0}, abs=1.0), durations
    rec = history.record(first.state, "ready")
    assert rec is not None and rec.total == pytest.approx(READY_AT, abs=1.0)

    again = StartupHistory(tmp_path, "gpu1", "Qwen3-235B")  # as after a daemon restart
    assert again.typical() == pytest.approx(rec.phases)
    second = LogPipeline(pack)
    problems = replay_and_check(
        steps, lambda text, now: second.feed(text.encode(), now),
        lambda now: startup_eta(pack, second.state, now, again.typical()),
        lambda: second.state)
    assert second.state.phase == READY
    assert startup_eta(pack, second.state, T0 + READY_AT, again.typical()) == 0.0
    assert not problems, "\n".join(problems)


def test_a_running_daemon_writes_the_history_off_its_event_loop(tmp_path: Path,
                                                                  monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A record is two fsyncs and a rename (~10 ms here, an NFS state_dir more): started on
    a loop, the history is written by a task in a thread, the loop not waiting; each record
    is on disk once `saved`, and the last one at `close`."""
    import asyncio
    import threading

    from logwatch.state import files
    writers: list[str] = []
    real = files.atomic_write_bytes

    def noted(*a, **k):  # type: ignore[no-untyped-def]
        writers.append(threading.current_thread().name)
        return real(*a, **k)
    monkeypatch.setattr("logwatch.state.coalesce.atomic_write_bytes", noted)

    async def main() -> None:
        history = StartupHistory(tmp_path, "gpu1", "Qwen3-235B")
        history.start()
        history.record_durations({"loading_shards": 100.0}, "ready", "s1", total=100.0)
        assert not history.path.exists()            # not written on the loop
        await history.file.saved()
        assert [r.startup for r in StartupHistory(tmp_path, "gpu1").records] == ["s1"]
        history.record_durations({"loading_shards": 90.0}, "ready", "s2", total=90.0)
        await history.close()
        assert [r.startup for r in StartupHistory(tmp_path, "gpu1").records] == ["s1", "s2"]
    asyncio.run(main())
    assert writers and threading.main_thread().name not in writers, writers


def test_second_epoch_eta_through_target_runner(tmp_path: Path) -> None:
    """The daemon's own path: a Target fed source events records the first startup on
    ready; a second `server_args=` in the same log starts a new epoch whose ETA
    (`Target.view().eta_seconds`, what /metrics and /api/status show) is within 20 %."""
    candidates = [p for p in load_all_shipped() if p.detect]
    cfg = TargetConfig(name="gpu1", source=str(tmp_path / "server.log"), rules="sglang",
                       labels={"model": "Qwen3-235B"})
    history = HistoryAttachment(tmp_path, cfg.name, cfg.labels["model"])
    runner = Target(cfg, store=PositionStore(tmp_path), candidates=candidates,
                    pool=SSHPool(), attachments=[history])
    f = runner.follower
    assert f is not None and f.pipe is not None
    offset = [0]

    def feed(text: str, now: float) -> None:
        data = text.encode()
        f.handle(Data(data, offset[0]), now)
        offset[0] += len(data)

    f.handle(Opened(0, 1, None, "attach", True), T0)
    first = startup(seed=2)
    for t, text in first:
        feed(text, T0 + t)
    assert f.pipe.state.phase == READY
    assert len(history.history.records) == 1, "the first startup was not recorded on ready"
    assert (tmp_path / "history" / "gpu1.json").exists()
    gap = 600.0
    second = shift(first, READY_AT + gap)
    epoch_before = f.pipe.state.epoch
    problems = replay_and_check(
        [(t - READY_AT - gap, text) for t, text in second],
        lambda text, now: feed(text, now + READY_AT + gap),
        lambda now: runner.view(now + READY_AT + gap).eta_seconds,
        lambda: f.pipe.state)  # type: ignore[union-attr]
    assert f.pipe.state.epoch == epoch_before + 1
    assert f.pipe.state.phase == READY
    assert not problems, "\n".join(problems)


def test_first_start_uses_pack_typical_seconds(tmp_path: Path, pack) -> None:  # type: ignore[no-untyped-def]
    history = StartupHistory(tmp_path, "new-target")
    assert history.typical() == {}
    pipe = LogPipeline(pack)
    steps = startup()
    for t, text in steps:
        if t > 10:
            break
        pipe.feed(text.encode(), T0 + t)
    assert pipe.state.phase == "launching"
    eta = startup_eta(pack, pipe.state, T0 + 10, history.typical())
    typ = pack.typical_seconds
    expected = max(typ["launching"] - 10, 0) + sum(
        typ.get(p, 0.0) for p in pack.phases[pack.phases.index("launching") + 1:] if p != READY)
    assert math.isfinite(eta) and eta > 0
    assert eta == pytest.approx(expected), (eta, expected, typ)


def test_ready_is_zero_unknown_is_nan(tmp_path: Path, pack) -> None:  # type: ignore[no-untyped-def]
    history = StartupHistory(tmp_path, "t")
    pipe = LogPipeline(pack)
    feed_all(pipe, startup())
    assert pipe.state.phase == READY
    assert startup_eta(pack, pipe.state, T0 + 300, history.typical()) == 0.0
    assert startup_eta(pack, pipe.state, T0 + 300, {"launching": 5.0}) == 0.0
    # nothing seen yet (waiting): unknown
    assert math.isnan(startup_eta(pack, State(), T0, history.typical()))
    # crashed: no ETA
    crashed = LogPipeline(pack)
    feed_all(crashed, startup()[:5])
    crashed.feed(b"[2026-01-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent "
                 b"call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
                 T0 + 60)
    assert crashed.state.phase == "crashed"
    assert math.isnan(startup_eta(pack, crashed.state, T0 + 61, history.typical()))
    # a pack without typical_seconds and no history: nothing to base it on
    bare = dataclasses.replace(pack, typical_seconds={})
    launching = LogPipeline(bare)
    feed_all(launching, startup()[:2])
    assert launching.state.phase == "launching"
    assert math.isnan(startup_eta(bare, launching.state, T0 + 5, {}))


def test_restarted_event_in_second_epoch(tmp_path: Path, pack) -> None:  # type: ignore[no-untyped-def]
    """Sanity of the replay itself: a second args dump in one log is a new epoch."""
    pipe = LogPipeline(pack)
    steps = startup()
    feed_all(pipe, steps)
    ev = feed_all(pipe, shift(steps, 1000)[:1])
    assert any(isinstance(e, Restarted) for e in ev)
    assert pipe.state.epoch == 2 and pipe.state.phase == "launching"


@pytest.mark.integration
def test_startup_duration_buckets_resolve_typical_startups() -> None:
    """Two startups of 100 s and 130 s: Prometheus' histogram_quantile over our buckets gives
    p50 and p90 near them (the old 120/300/600 buckets gave p90 264 s)."""
    from logwatch.counters import DURATION_BUCKETS, Counters

    c = Counters()
    for secs in (100.0, 130.0):
        c.observe_duration(secs)

    def quantile(q: float) -> float:      # histogram_quantile, as Prometheus computes it
        cum, acc = [], 0
        for n in c.duration_buckets[:-1]:
            acc += n
            cum.append(acc)
        rank = q * c.duration_count
        lo = 0.0
        for bound, (i, n) in zip(DURATION_BUCKETS, enumerate(cum)):
            if n >= rank:
                below = cum[i - 1] if i else 0
                return lo + (bound - lo) * (rank - below) / (n - below)
            lo = bound
        return math.inf

    assert 90 <= quantile(0.5) <= 120 and quantile(0.9) <= 180
    assert DURATION_BUCKETS[0] == 30 and DURATION_BUCKETS[-1] == 7200


def _watch_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    """A runner exactly as `logwatch watch TARGET` makes it, its history under tmp_path."""
    from logwatch.app.watch import WatchOptions, watch_runner
    monkeypatch.setenv("LOGWATCH_STATE_DIR", str(tmp_path / "watch-state"))
    return watch_runner(WatchOptions(target=str(tmp_path / "server.log"), rules="sglang"))


def _history(runner: Target):  # type: ignore[no-untyped-def]
    part = runner.part(HistoryAttachment)
    return part.history if part is not None else None


def _feeder(runner: Target):  # type: ignore[no-untyped-def]
    f = runner.follower
    assert f is not None
    offset = [0]
    f.handle(Opened(0, 1, None, "attach", True), T0)

    def feed(text: str, now: float) -> None:
        data = text.encode()
        f.handle(Data(data, offset[0]), now)
        offset[0] += len(data)
    return feed


def test_watch_second_start_eta_from_its_history(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The acceptance test: the same target watched twice (two `watch` runs, one startup
    each).  The first leaves its durations in watch's history; during the second the ETA is
    "from 1 earlier startup" and its median error is within 20 % of the true remaining time
    (sampled every 5 s of the startup)."""
    from logwatch.sinks.display import eta_text
    first = _watch_runner(tmp_path, monkeypatch)
    feed = _feeder(first)
    for t, text in startup(seed=3):
        feed(text, T0 + t)
    assert first.pipe is not None and first.pipe.state.phase == READY
    assert _history(first) is not None and len(_history(first).records) == 1

    second = _watch_runner(tmp_path, monkeypatch)          # a new process: history read back
    assert _history(second) is not None and _history(second).basis() == 1
    feed = _feeder(second)
    steps = startup(seed=4)
    errors: list[float] = []
    texts: list[str] = []
    i = 0
    for sample in range(0, int(READY_AT), 5):
        while i < len(steps) and steps[i][0] <= sample:
            feed(steps[i][1], T0 + steps[i][0])
            i += 1
        view = second.view(T0 + sample)
        truth = READY_AT - sample
        if view.phase in ("waiting", READY) or math.isnan(view.eta_seconds):
            continue
        assert view.eta_basis == 1
        errors.append(abs(view.eta_seconds - truth) / truth)
        texts.append(eta_text(view))
    assert len(errors) >= 40
    errors.sort()
    median = errors[len(errors) // 2]
    print(f"watch, 2nd start: median ETA error {median:.1%} over {len(errors)} samples, "
          f"worst {errors[-1]:.1%}")
    assert median <= TOLERANCE, f"median ETA error {median:.1%}"
    assert texts[0].startswith("ready in ~") and texts[0].endswith("(from 1 earlier startup)")


def test_without_history_the_eta_says_rough(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logwatch.sinks.display import eta_text
    runner = _watch_runner(tmp_path, monkeypatch)
    feed = _feeder(runner)
    for t, text in startup(seed=5)[:10]:
        feed(text, T0 + t)
    view = runner.view(T0 + 40)
    assert view.eta_basis == 0 and eta_text(view).endswith("(rough)"), eta_text(view)


def hung_second_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A target whose first startup is in its history; the second hangs at 10/24 shards:
    (the target, its feed, the steps after the hang, when it hung)."""
    first = _watch_runner(tmp_path, monkeypatch)
    feed = _feeder(first)
    for t, text in startup(seed=6):
        feed(text, T0 + t)
    runner = _watch_runner(tmp_path, monkeypatch)
    feed = _feeder(runner)
    steps = startup(seed=7)
    # up to 10 shards, then nothing more: the server hangs while loading
    upto = next(i for i, (_, text) in enumerate(steps) if "| 10/24" in text)
    for t, text in steps[:upto + 1]:
        feed(text, T0 + t)
    return runner, feed, steps[upto + 1:], T0 + steps[upto][0]


def test_the_eta_grows_in_a_stall_and_never_jumps_more_than_30_percent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticked every second as the live loop ticks (the smoother moves only in `tick`)."""
    runner, _, _, hung_at = hung_second_start(tmp_path, monkeypatch)
    etas = []
    for s in range(0, 300):
        runner.tick(hung_at + s)
        etas.append(runner.view(hung_at + s).eta_seconds)
    assert etas[-1] > etas[30] > 0, (etas[0], etas[30], etas[-1])   # grows, never freezes
    jumps = [abs(b - a) / a for a, b in zip(etas, etas[1:]) if a > 0]
    assert max(jumps) <= 0.30 + 1e-9, max(jumps)


def test_eta_smoother_caps_a_jump_within_a_phase() -> None:
    from logwatch.eta import EtaSmoother
    smooth = EtaSmoother()
    assert smooth("loading_shards", 100.0, 0.0) == 100.0
    assert smooth("loading_shards", 40.0, 1.0) == pytest.approx(99.0 * 0.7)   # capped
    assert smooth("allocating", 40.0, 2.0) == 40.0                            # a new phase
    assert math.isnan(smooth("allocating", math.nan, 3.0))


def test_a_stalled_startup_shows_no_eta() -> None:
    """Stalled (silent past its phase's budget): no ETA in any view, nor the shard bar's
    (before: `status` "7/24 shards · ETA 2m10s", the page "1.63/s · ETA 3m17s" for a
    startup that had stopped moving)."""
    from support.daemon import sim_texts, split_at
    from logwatch.pipeline import LogPipeline
    from logwatch.rules.pack import load_pack
    from logwatch.view import pipeline_view
    texts = sim_texts(seed=4)
    cut = split_at(texts, "| 7/24 ") + 1
    pipe = LogPipeline(load_pack("sglang"))
    t0 = 1_767_261_600.0
    for i, text in enumerate(texts[:cut]):
        pipe.feed(text.encode(), t0 + i * 0.5)
    now = t0 + cut * 0.5
    moving = pipeline_view("node1", pipe, now)
    assert moving.phase == "loading_shards" and not math.isnan(moving.eta_seconds)
    pipe.tick(now + 3600)
    assert pipe.state.stalled
    stalled = pipeline_view("node1", pipe, now + 3600)
    assert math.isnan(stalled.eta_seconds)
    assert all(p["eta_seconds"] is None for p in stalled.progress.values()), stalled.progress


def test_a_launch_killed_while_it_loaded_is_the_previous_one(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Ready, then a launch killed while it loaded (no word), then another: the history
    shows the killed one `incomplete`, and it is the "previous" of the third (before: the
    ready one, as if the killed launch had never been; the ledger had it).  The ETA's basis
    stays the ready ones."""
    runner = _watch_runner(tmp_path, monkeypatch)
    feed = _feeder(runner)
    steps = startup(seed=3)
    for t, text in steps:
        feed(text, T0 + t)
    half = shift(steps, READY_AT + 600)
    for t, text in half[:len(half) // 3]:        # killed while it loads its shards
        feed(text, T0 + t)
    for t, text in shift(steps, READY_AT + 1800):
        feed(text, T0 + t)
    view = runner.view(T0 + 2 * READY_AT + 1900)
    assert [h["outcome"] for h in view.history] == ["ready", "incomplete", "ready"], view.history
    assert view.previous_startup is not None and view.previous_startup["outcome"] == "incomplete"
    assert view.previous_startup["phases"], view.previous_startup   # its durations so far
    assert _history(runner).basis() == 2


CAPTURE = [
    (0, "[{}] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, port=30000)"),
    (6, "[{} TP0] Load weight begin. avail mem=78.92 GB"),
    (16, "[{} TP0] Load weight end. elapsed=10.00 s, type=Qwen3ForCausalLM, avail mem=62.61 GB, "
         "mem usage=16.31 GB."),
    (17, "[{} TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 405920, K size: 23.75 "
         "GB, V size: 23.75 GB"),
    (18, "[{} TP0] Memory pool end. avail mem=12.10 GB"),
    (19, "[{} TP0] Capture target decode CUDA graph begin. backend=flashinfer, "
         "num_tokens_per_req=1, avail mem=11.40 GB"),
    (19, "Capturing batches (bs=256 avail_mem=11.20 GB):   0%|          | 0/52 [00:00<?, ?it/s]"),
    (25, "Capturing batches (bs=64 avail_mem=10.60 GB):  50%|#####     | 26/52 [00:06<00:06,  "
         "4.33it/s]"),
    (31, "Capturing batches (bs=1 avail_mem=10.10 GB): 100%|##########| 52/52 [00:12<00:00,  "
         "4.33it/s]"),
]


def _captured(pack) -> LogPipeline:  # type: ignore[no-untyped-def]
    pipe = LogPipeline(pack)
    for t, text in CAPTURE:
        pipe.feed((text.format(stamp(t)) + "\n").encode(), T0 + t)
    assert pipe.state.phase == "cuda_graph"
    bar = pipe.state.progress["cuda_graph"]
    assert (bar.current, bar.total) == (52, 52)
    return pipe


def test_a_finished_capture_bar_is_not_the_end_of_its_phase(pack) -> None:  # type: ignore[no-untyped-def]
    """SGLang goes on after its capture bar (the scheduler's init end, the HTTP server, the
    warmup request: the base pack's `after_bar: [cuda_graph]`): a first start reads a tenth
    of the capture's typical 60 s left at the bar's last frame and half of every further
    second after it (a phase whose clock has run out, as `phase_left` counts one).  Before,
    0 s: six built SGLang starts read 0 s where 7 to 19 s were left.  With history, the
    phase's own time decides, as before; a pack without `after_bar` keeps the bar's 0 s."""
    assert pack.after_bar == ("cuda_graph",)
    pipe = _captured(pack)
    typ = pack.typical_seconds["cuda_graph"]
    assert startup_eta(pack, pipe.state, T0 + 31) == pytest.approx(0.1 * typ)
    assert startup_eta(pack, pipe.state, T0 + 35) == pytest.approx(0.1 * typ + 2.0)
    assert startup_eta(pack, pipe.state, T0 + 40, {"cuda_graph": 20.0}) == pytest.approx(0.0)
    assert startup_eta(pack, pipe.state, T0 + 31, {"cuda_graph": 30.0}) == pytest.approx(18.0)
    bare = dataclasses.replace(pack, after_bar=())
    assert startup_eta(bare, pipe.state, T0 + 35) == 0.0


def test_another_replicas_finished_capture_bar_is_no_clock(pack) -> None:  # type: ignore[no-untyped-def]
    """A capture bar that ended before the phase's current span began is another replica's
    or server's (SGLang `--dp 2`: DP0 captured, then DP1 begins): a first start reads the
    capture's typical time, as at any capture's begin, not what is left after DP0's bar.
    Before, 0 s at DP1's capture begin, 19 s before ready (built sglang-0523-dp2)."""
    pipe = _captured(pack)
    pipe.feed(f"[{stamp(40)} TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], "
              f"elapsed=21 s\n".encode(), T0 + 40)
    state = dataclasses.replace(pipe.state)
    entered = state.phase_entered
    assert entered is not None
    # the same state, its capture span begun after the bar's last frame (DP1's begin)
    state.spans = [dataclasses.replace(sp, at=T0 + 45) if sp is entered else sp
                   for sp in state.spans]
    assert startup_eta(pack, state, T0 + 45) == pytest.approx(pack.typical_seconds["cuda_graph"])


DP2 = [
    (0, "[{}] server_args={{'model_path': 'Qwen/Qwen3-8B', 'dp_size': 2, 'port': 30000}}"),
    (3, "[{} DP0] Init parallel begin."),
    (3, "[{} DP1] Init parallel begin."),
    (6, "[{} DP0] Load weight begin. avail mem=78.92 GB"),
    (6, "[{} DP1] Load weight begin. avail mem=78.92 GB"),
    (16, "[{} DP0] Load weight end. elapsed=10.00 s, type=Qwen3ForCausalLM, avail mem=62.61 GB, "
         "mem usage=16.31 GB."),
    (18, "[{} DP0] Memory pool end. avail mem=12.10 GB"),
    (19, "[{} DP0] Capture target decode CUDA graph begin. backend=flashinfer, "
         "num_tokens_per_req=1, avail mem=11.40 GB"),
    (31, "[{} DP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], avail_mem=10.00 GB, "
         "elapsed=11 s"),
    (56, "[{} DP1] Load weight end. elapsed=50.00 s, type=Qwen3ForCausalLM, avail mem=62.61 GB, "
         "mem usage=16.31 GB."),
]


def test_a_replica_behind_is_timed_by_the_replicas_ahead(pack) -> None:  # type: ignore[no-untyped-def]
    """SGLang `--dp 2`: DP1 ends its load at 56 s, 40 s after DP0, which then took 3 s to
    size its KV cache, went past autotune and captured for 12 s.  The startup is where DP1
    is (allocating), and a first start reads what DP0 took for what DP1 has still to run,
    21 s (the capture's 12 s and a tenth of its typical 60 s: SGLang's HTTP server and
    warmup request come after the last replica's capture), not the pack's typical 100 s
    (10 s allocating, 30 s autotune, 60 s capture: built sglang-0523-dp2 read 100 s where
    22 s were left).  With history, the history's times, as before; with
    `--enable-dp-attention` (its DP ranks are one model, `replicas: {unless: ...}`) the
    pack's typical times (the same state read so)."""
    pipe = LogPipeline(pack)
    for t, text in DP2:
        pipe.feed((text.format(stamp(t)) + "\n").encode(), T0 + t)
    assert pipe.state.phase == "allocating"
    typ = pack.typical_seconds
    tail = 0.1 * typ["cuda_graph"]
    assert startup_eta(pack, pipe.state, T0 + 56) == pytest.approx(3.0 + 12.0 + tail)
    # 2 s on, DP1 still allocating: DP0's 3 s counted down (the capture's time after it)
    assert startup_eta(pack, pipe.state, T0 + 58) == pytest.approx(1.0 + 12.0 + tail)
    history = {"allocating": 4.0, "autotune": 0.0, "cuda_graph": 20.0}
    assert startup_eta(pack, pipe.state, T0 + 56, history) == pytest.approx(24.0)
    one_model = dataclasses.replace(pipe.state, args={**pipe.state.args,
                                                      "enable_dp_attention": True})
    assert startup_eta(pack, one_model, T0 + 56) == pytest.approx(
        typ["allocating"] + typ["autotune"] + typ["cuda_graph"])


PP2 = [
    (0, "[{}] server_args={{'model_path': 'meta-llama/Llama-3.1-405B-Instruct-FP8', "
        "'tp_size': 1, 'pp_size': 2, 'port': 30000}}"),
    (4, "[{} PP0 TP0] Init parallel begin."),
    (4, "[{} PP1 TP0] Init parallel begin."),
    (10, "[{} PP0 TP0] Load weight begin. avail mem=78.92 GB"),
    (10, "[{} PP1 TP0] Load weight begin. avail mem=78.92 GB"),
    (10, "Loading safetensors checkpoint shards:   0% Completed | 0/109 [00:00<?, ?it/s]"),
    (50, "Loading safetensors checkpoint shards:  50% Completed | 55/109 [00:40<00:40,  "
         "1.36it/s]"),
    (90, "Loading safetensors checkpoint shards: 100% Completed | 109/109 [01:20<00:00,  "
         "1.36it/s]"),
    (90, "[{} PP0 TP0] Load weight end. elapsed=80.10 s, type=LlamaForCausalLM, "
         "avail mem=21.30 GB, mem usage=57.62 GB."),
]


def test_a_bar_ended_by_the_stage_ahead_is_no_clock_of_the_one_behind(pack) -> None:  # type: ignore[no-untyped-def]
    """SGLang `--pp-size 2` prints one shard bar, global rank 0's (PP0's: weight_utils.py
    `enable_tqdm`); PP1 loads its layers 20 s longer and says nothing until its own `Load
    weight end.`.  The startup is in loading_shards until then, and a first start read 0 s
    left in it from PP0's finished bar, the ETA frozen at the phases after (built
    sglang-0523-pp2: 100 s from 90 s to 110 s).  Now the stage behind is timed by what the
    stage ahead took (80 s) as a phase running late: 15.75 s at 97.5 s (12.5 s true),
    growing while it goes on.  Where no stage is ahead (PP1 ended too), a finished bar is
    the phase's end as before; with history, the history's time."""
    pipe = LogPipeline(pack)
    for t, text in PP2:
        pipe.feed((text.format(stamp(t)) + "\n").encode(), T0 + t)
    assert pipe.state.phase == "loading_shards"
    typ = pack.typical_seconds
    rest = typ["allocating"] + typ["autotune"] + typ["cuda_graph"]
    alone = LogPipeline(pack)      # the bar ended, no stage's end yet: the phase's own end
    for t, text in PP2[:-1]:
        alone.feed((text.format(stamp(t)) + "\n").encode(), T0 + t)
    assert startup_eta(pack, alone.state, T0 + 90.5) == pytest.approx(rest)
    assert startup_eta(pack, pipe.state, T0 + 97.5) == pytest.approx(
        phase_left(80.0, 87.5) + rest)
    assert startup_eta(pack, pipe.state, T0 + 103.5) > startup_eta(pack, pipe.state, T0 + 97.5)
    history = {"loading_shards": 100.0, "allocating": 3.0, "autotune": 0.0, "cuda_graph": 17.0}
    assert startup_eta(pack, pipe.state, T0 + 97.5, history) == pytest.approx(12.5 + 20.0)
    pipe.feed(f"[{stamp(110)} PP1 TP0] Load weight end. elapsed=100.20 s, "
              "type=LlamaForCausalLM, avail mem=19.10 GB, mem usage=59.82 GB.\n".encode(),
              T0 + 110)
    assert pipe.state.phase == "allocating"
