"""The live target and its attachments (app/target.py, app/attachments/, issue 33).

- Reading a target's view changes nothing: the ETA smoother moves in `tick`, so however
  often /metrics, /api/status and the alerts read a target, the ETA it shows is the same
  (before, every `view()` advanced the smoother: the ETA depended on the readers).
- An attachment added to a target's list gets every hook (bind, on_pipeline, start,
  on_events, tick, view, key, close), and its piece shows in the view: the next side
  feature is one file and one line.
- Every attachment's piece is made of `TargetView` fields; `watch --no-history` leaves
  history and ledger out of the list instead of passing Nones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from logwatch.app.attachments.catchup import CatchUpPart
from logwatch.app.attachments.gpu import GpuAttachment, GpuPart
from logwatch.app.attachments.history import HistoryAttachment, HistoryPart
from logwatch.app.attachments.ledger import LedgerAttachment, LedgerPart
from logwatch.app.attachments.probe import ProbeAttachment, ProbePart
from logwatch.app.config import TargetConfig
from logwatch.app.target import EtaPart, Target
from logwatch.machine import Ready, StartupBegan
from logwatch.rules.pack import READY, load_all_shipped, load_pack
from logwatch.sources.ssh import SSHPool
from logwatch.view import TargetView
from test_eta import T0, _feeder, hung_second_start, startup


def test_reading_the_view_never_moves_the_eta(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two identical targets, ticked every 10 s, hang 200 s at 10/24 shards and then go on
    (the ETA jumps down: the smoother holds it); one is also read every second between
    ticks (a scrape, the page, an alert).  The ETA each shows at each tick is the same.
    Before issue 33 each read moved the smoother: 3 of these 40 ticks differed."""
    quiet, feed_quiet, rest, hung_at = hung_second_start(tmp_path / "a", monkeypatch)
    busy, feed_busy, _, _ = hung_second_start(tmp_path / "b", monkeypatch)
    pause = 200.0
    shown_quiet, shown_busy = [], []
    i = 0
    for s in range(0, 400, 10):
        now = hung_at + s
        while i < len(rest) and T0 + rest[i][0] + pause <= now:
            feed_quiet(rest[i][1], T0 + rest[i][0] + pause)
            feed_busy(rest[i][1], T0 + rest[i][0] + pause)
            i += 1
        quiet.tick(now)
        busy.tick(now)
        shown_quiet.append(quiet.view(now).eta_seconds)
        shown_busy.append(busy.view(now).eta_seconds)
        for k in range(1, 10):              # read between this tick and the next
            busy.view(now + k)
    assert i == len(rest) and quiet.view(hung_at + 400).phase == READY
    assert sum(math.isfinite(e) and e > 0 for e in shown_quiet) >= 30, shown_quiet
    assert [round(e, 9) for e in shown_busy] == [round(e, 9) for e in shown_quiet]
    # and a view is the same however many times it is read at one moment
    again = [busy.view(hung_at + 150).eta_seconds for _ in range(5)]
    assert len(set(again)) == 1, again


@dataclass(frozen=True)
class NotePart:
    vs_previous: str          # a TargetView field (a real side feature adds its own)


class Recorder:
    """A side feature written against the protocol only (no base class)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.target: Any = None
        self.events: list[Any] = []
        self.closed = False

    def bind(self, target: Any) -> None:
        self.calls.append("bind")
        self.target = target

    def on_pipeline(self, pipe: Any) -> None:
        self.calls.append("on_pipeline")

    def start(self) -> None:
        self.calls.append("start")

    def on_events(self, events: list[Any], now: float) -> None:
        self.calls.append("on_events")
        self.events.extend(events)

    def tick(self, now: float) -> None:
        self.calls.append("tick")

    def view(self, now: float) -> NotePart:
        return NotePart(f"{len(self.events)} events seen")

    def key(self) -> Any:
        return len(self.events)

    async def close(self) -> None:
        self.calls.append("close")
        self.closed = True


def test_an_attachment_in_the_list_gets_every_hook(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    candidates = [p for p in load_all_shipped() if p.detect]
    rec = Recorder()
    target = Target(TargetConfig(name="t", source=str(log), rules="sglang"),
                    store=None, candidates=candidates, pool=SSHPool(), attachments=[rec])
    assert rec.calls == ["bind", "on_pipeline"] and rec.target is target
    feed = _feeder(target)
    for t, text in startup(seed=1):
        feed(text, T0 + t)
    assert any(isinstance(e, StartupBegan) for e in rec.events)
    assert any(isinstance(e, Ready) for e in rec.events)
    key_before = target.metrics_key(T0 + 300)
    target.tick(T0 + 300)
    assert rec.calls.count("tick") == 1
    view = target.view(T0 + 300)
    assert view.phase == READY and view.vs_previous == f"{len(rec.events)} events seen"
    feed("[2026-01-01 10:06:00] server_args=ServerArgs(model_path='m', port=1)\n", T0 + 360)
    assert target.metrics_key(T0 + 360) != key_before     # its key is in the target's

    async def run() -> None:
        target.start()
        await target.stop()
    asyncio.run(run())
    assert rec.calls[-2:] == ["start", "close"] and rec.closed


def test_every_piece_is_made_of_target_view_fields() -> None:
    fields = {f.name for f in dataclasses.fields(TargetView)}
    for part in (CatchUpPart, GpuPart, HistoryPart, LedgerPart, ProbePart, EtaPart):
        names = {f.name for f in dataclasses.fields(part)}
        assert names <= fields, (part.__name__, names - fields)


def test_watch_builds_its_list_without_history_when_asked(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from logwatch.app.watch import WatchOptions, watch_attachments
    monkeypatch.setenv("LOGWATCH_STATE_DIR", str(tmp_path))
    kinds = [type(a) for a in watch_attachments(WatchOptions(target="x.log"), "x.log")]
    assert kinds == [HistoryAttachment, GpuAttachment, LedgerAttachment, ProbeAttachment]
    kinds = [type(a) for a in watch_attachments(WatchOptions(target="x.log", history=False),
                                                "x.log")]
    assert kinds == [GpuAttachment, ProbeAttachment]


def test_the_daemon_builds_one_list_per_target(tmp_path: Path) -> None:
    """The daemon's list: history, GPU, the ledger reading that GPU's watts, the probe (the
    ledger after the GPU: attachments close last-first, so it saves while the watts are
    still there)."""
    from types import SimpleNamespace

    from logwatch.app.daemon import Daemon
    fake = SimpleNamespace(gpu_streams=object(), ledger=object(), pool=SSHPool(),
                           config=SimpleNamespace(state_dir=tmp_path), _on_probe=lambda t: None)
    got = Daemon._attachments(fake, TargetConfig(name="t", source="x.log",  # type: ignore[arg-type]
                                                 labels={"model": "m"}))
    assert [type(a) for a in got] == [HistoryAttachment, GpuAttachment, LedgerAttachment,
                                      ProbeAttachment]
    assert got[2].power is got[1] and got[0].history.model == "m"


def test_a_catch_up_holds_the_latest_serving_figures_not_one_per_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first attach to a log whose latest launch has served for long: its batch lines
    are read before the attach offset, their events held until the catch-up ends.  Each
    serving figure supersedes the one before, so one is held per run of them, the last:
    before, one `StatsUpdated` per batch line was held (a 2 GB log's last launch, 2M
    lines: `watch` at 600 MB, where the design keeps memory flat)."""
    from logwatch.app.reading import handle
    from logwatch.app.simulate import script
    from logwatch.app.watch import WatchOptions, watch_runner
    from logwatch.machine import StatsUpdated
    from logwatch.sources import Data, Opened
    monkeypatch.setenv("LOGWATCH_STATE_DIR", str(tmp_path / "state"))
    text = "".join(s.text for s in script(tp=1, serve_lines=3000, download=False,
                                          start=time.time() - 900))
    data = text.encode()
    delivered: list[list[Any]] = []
    runner = watch_runner(WatchOptions(target=str(tmp_path / "server.log"), rules="sglang",
                                       last=True, history=False),
                          on_events=lambda r, evs: delivered.append(list(evs)))

    async def read() -> None:
        await handle(runner, Opened(0, 1, None, "attach", True, size=len(data),
                                    mtime=time.time()))
        assert runner.catching_up
        for i in range(0, len(data), 64 * 1024):   # as a file source hands it over
            await handle(runner, Data(data[i:i + 64 * 1024], i))
    asyncio.run(read())
    assert not runner.catching_up and delivered, "the catch-up did not end"
    stats = [e for batch in delivered for e in batch if isinstance(e, StatsUpdated)]
    assert 1 <= len(stats) <= 3, len(stats)
    view = runner.view(time.time())
    assert view.phase == READY and stats[-1].values == view.stats


def _read_events(text: str) -> list[Any]:
    """The machine's events of a whole log, its crash settled (as replay reads it)."""
    from logwatch.pipeline import LogPipeline
    pipe = LogPipeline(load_pack("sglang"))
    return [*pipe.feed(text.encode(), 100.0), *pipe.finish(100.0)]


def test_a_catch_up_under_way_is_kept_in_the_checkpoint_and_read_back() -> None:
    """A checkpoint written while a first attach catches up keeps where the attach ends,
    the file's last write then and every event held so far (a crash's evidence with it),
    so that a restarted daemon goes on catching up from there and decides history or
    news as the first run would have.  A damaged entry is refused (attached afresh, not
    raised on); the checkpoint's file gone at the restart (attached afresh), what it held
    is dropped and the new file's attach is caught up on.  Before, nothing was kept: a
    daemon killed every 2 s read a 95 MB log from its latest startup at each start."""
    import json

    from logwatch.app.attachments.catchup import CatchUp
    from logwatch.app.simulate import script
    from logwatch.machine import CrashSettled
    from logwatch.machine.state import Evidence
    from logwatch.sources import Opened
    events = _read_events("".join(s.text for s in script(crash="oom", start=T0)))
    crashes = [e for e in events if isinstance(e, CrashSettled)]
    assert crashes and len({type(e) for e in events}) >= 5, events
    died = Evidence("child_process_died", "Received sigquit from a child process", 90)
    crashes.append(dataclasses.replace(crashes[0], crash=dataclasses.replace(
        crashes[0].crash, died=died)))
    first = CatchUp()
    first.opened(Opened(0, 1, None, "attach", True, size=48_000_000, mtime=T0))
    first.hold(events)
    first.held_crashes = crashes
    doc = json.loads(json.dumps(first.saved()))       # as the checkpoint file has it
    again = CatchUp()
    again.resume(doc)
    assert again.catching_up and again.attach_end == 48_000_000
    assert again.attach_mtime == first.attach_mtime
    assert again.held == first.held and again.held_crashes == crashes
    assert again.held_crashes[-1].crash.died == died
    again.opened(Opened(1_000_000, 5_000, None, "resume", False, size=48_000_000, mtime=T0))
    assert again.catching_up and again.attach_end == 48_000_000, "a resume goes on"
    again.opened(Opened(0, 1, None, "attach", True, size=3_000, mtime=T0 + 60))
    assert again.catching_up and again.attach_end == 3_000 and again.held == []
    for damage in ({"type": "PhaseChanged", "epoch": "1"}, {"type": "Nope"}, [1], None):
        broken = json.loads(json.dumps(doc))
        broken["catching_up"]["held"].append(damage)
        refused = CatchUp()
        refused.resume(broken)
        assert not refused.catching_up and refused.held == [], damage


def test_a_catch_up_holds_a_bars_latest_progress_not_one_per_frame() -> None:
    """A checkpoint shard bar of 5,000 frames read in a catch-up: one `Progress` held, the
    last (5000/5000), as a run of serving figures is one.  Before, 5,000 were held (memory
    that grows with the bar, and more than a checkpoint keeps: MAX_SAVED_HELD)."""
    from logwatch.app.attachments.catchup import CatchUp
    from logwatch.app.simulate import script
    from logwatch.machine import Progress
    from logwatch.pipeline import LogPipeline
    head = "".join(s.text for s in script(start=T0)).split("Loading safetensors")[0]
    bar = "".join(f"\rLoading safetensors checkpoint shards: {i // 50:3d}% Completed | "
                  f"{i}/5000 [00:10<00:00, 2.00it/s]" for i in range(1, 5001)) + "\n"
    pipe, catchup = LogPipeline(load_pack("sglang")), CatchUp()
    data = (head + bar).encode()
    for i in range(0, len(data), 64 * 1024):
        catchup.hold(pipe.feed(data[i:i + 64 * 1024], 100.0))
    progress = [e for e in catchup.held if isinstance(e, Progress)]
    assert [(e.current, e.total) for e in progress] == [(5000, 5000)], len(progress)


BARS = (b"Loading safetensors checkpoint shards:  98% Completed | 160/163 [31:58<00:30, "
        b"10.12s/it]\nLoading safetensors checkpoint shards:  99% Completed | 161/163 "
        b"[32:07<00:19, 10.00s/it]\n")


def _read_bars_at_attach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: bytes = b"",
                         command: bytes = b"", tail: bytes = b"") -> tuple[Any, float, Any]:
    """`command`, a log of bars only (sglang-042's form) and `tail`, last written 20 minutes
    before watch --last's runner attaches, then `live` written after the attach: the
    ledger's last record, the file's last write, the runner."""
    from logwatch.app.reading import handle
    from logwatch.app.watch import WatchOptions, watch_runner
    from logwatch.sources import Data, Opened
    monkeypatch.setenv("LOGWATCH_STATE_DIR", str(tmp_path / "state"))
    data, written = command + BARS + tail, time.time() - 20 * 60
    runner = watch_runner(WatchOptions(target=str(tmp_path / "server.log"), rules="sglang",
                                       last=True), on_events=lambda r, evs: None)
    ledger = runner.part(LedgerAttachment)
    assert ledger is not None

    async def read() -> None:
        await handle(runner, Opened(0, 1, None, "attach", True, size=len(data), mtime=written))
        await handle(runner, Data(data, 0))
        assert not runner.catching_up
        if live:
            await handle(runner, Data(live, len(data)))
            runner.tick(time.time() + 60)       # a crash settles
        await ledger.close()
    asyncio.run(read())
    return ledger.store.records(ledger.name, 3)[-1], written, runner


def test_a_startup_read_at_attach_without_stamps_observes_no_startup_duration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare command line, the shard bars and the ready line, none stamped, last written 20
    minutes before the attach: its launch-to-ready is unknown (the ledger's `untimed`), so
    `logwatch_startup_duration_seconds` observes nothing, nor where the ready line comes
    after the attach.  Before: `_count 1 _sum 0.0` (the read time's `took`), and the
    seconds from the file's last write to the ready.  The same lines written after the attach are timed by when they
    were read, as any stamp-less startup watched live: observed."""
    from logwatch.app.reading import handle
    from logwatch.app.watch import WatchOptions, watch_runner
    from logwatch.sources import Data, Opened
    command = b"python3 -m sglang.launch_server --model-path m\n"
    ready = b"The server is fired up and ready to roll!\n"
    _, _, runner = _read_bars_at_attach(tmp_path / "attach", monkeypatch, command=command,
                                        tail=ready)
    assert runner.counters.startups == 1
    assert runner.counters.duration_count == 0, runner.counters.duration_sum
    _, _, late = _read_bars_at_attach(tmp_path / "late", monkeypatch, command=command,
                                      live=ready)    # got ready after the attach
    assert late.counters.duration_count == 0, late.counters.duration_sum
    monkeypatch.setenv("LOGWATCH_STATE_DIR", str(tmp_path / "live"))
    live = watch_runner(WatchOptions(target=str(tmp_path / "live.log"), rules="sglang",
                                     last=True), on_events=lambda r, evs: None)

    async def read() -> None:
        await handle(live, Opened(0, 1, None, "attach", True, size=0, mtime=time.time()))
        await handle(live, Data(command + BARS + ready, 0))
    asyncio.run(read())
    assert live.counters.duration_count == 1


def test_a_log_without_stamps_read_at_attach_is_recorded_with_untimed_phases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger of a log of bars only (no stamps; sglang-042's form) last written 20
    minutes before the attach: its startup began by that last write at the latest, and how
    long its loading_shards took is unknown (`untimed`, not in `durations`).  Before, the
    record (`logwatch history --json` after `watch --last` or the daemon's attach) said
    started at the read time and `loading_shards: 0.0`, beside watch's `silent since` 20
    minutes and `loading_shards 20m`."""
    rec, written, _ = _read_bars_at_attach(tmp_path, monkeypatch)
    assert rec.outcome == "incomplete" and rec.started_at is not None
    assert rec.started_at <= written + 1.0, rec.started_at - written
    assert rec.untimed == ["loading_shards"] and rec.durations == {}, rec
    assert rec.startup_seconds is None


@pytest.mark.parametrize("live, outcome", [
    (b"The server is fired up and ready to roll!\n", "ready"),
    (b"Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.\n",
     "crashed")])
def test_an_untimed_phase_stays_untimed_when_its_startup_ends_live(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: bytes, outcome: str) -> None:
    """The bars read at attach, then the server gets ready (or crashes) live: how long its
    loading_shards took is still unknown (it began by the file's last write, at the
    latest).  Before, the ready (the crash) wrote its durations over the record's: the
    daemon's `history --json` said `loading_shards: 3605.0` beside `untimed:
    ["loading_shards"]` (the table: slowest phase `loading_shards 1h00m05s`)."""
    rec, _, _ = _read_bars_at_attach(tmp_path, monkeypatch, live)
    assert rec.outcome == outcome, rec
    assert rec.untimed == ["loading_shards"] and rec.durations == {}, rec
    assert rec.startup_seconds is None


def test_a_startup_read_at_attach_without_stamps_is_no_eta_basis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper's bare command line, the shard bars and the ready line, none stamped, last
    written 20 minutes before the attach: read at one moment, its phases' durations are
    not how long they took, so the ETA's history does not learn them.  Before, it recorded
    `{"launching": 0.0, "loading_shards": 0.0}`, total 0.0, and `typical` (the next
    launch's ETA basis) said its loading takes 0 s."""
    rec, _, runner = _read_bars_at_attach(
        tmp_path, monkeypatch, command=b"python3 -m sglang.launch_server --model-path m\n",
        tail=b"The server is fired up and ready to roll!\n")
    hist = runner.part(HistoryAttachment)
    assert hist is not None and rec.untimed == ["launching", "loading_shards"], rec
    assert hist.history.records == [] and hist.typical() == {}, hist.history.records


@pytest.mark.parametrize("again", ["reconnect", "rotated"])
def test_what_a_restart_reads_again_stays_old_across_a_lost_connection(again: str) -> None:
    """A restart resumes at the saved offset of a log last written 30 s before: the bytes up
    to the file's size then are as old as that write.  The SSH connection is lost right after
    (under load) and opened again on the same file: what it reads on up to that size is still
    old, so a hung server's silence is not restarted by them.  Before, any open but a resume
    forgot it (a stall page said "no new line for 4.3s" after ~9 s, ci72).  Another file (a
    rotation) is news: its lines are live."""
    from logwatch import clock
    from logwatch.app.attachments.catchup import ResumedBytes
    from logwatch.pipeline import LogPipeline
    from logwatch.sources import Opened
    written = time.time() - 30
    resumed = ResumedBytes()
    resumed.opened(Opened(100, 5, None, "resume", False, size=180, mtime=written))
    resumed.opened(Opened(100 if again == "reconnect" else 0, 5, None, again,
                          again != "reconnect"))
    pipe = LogPipeline(load_pack("sglang"))
    now = clock.now()
    pipe.feed(b"[2026-12-07 10:00:00] Load weight begin. avail mem=78.00 GB\n", now)
    assert pipe.state.last_activity == now
    last_line_at = resumed.hold(pipe, 150, now)
    if again == "reconnect":
        assert last_line_at is not None and last_line_at < now - 25
        assert pipe.state.last_activity is not None and pipe.state.last_activity < now - 25
    else:
        assert last_line_at == now and pipe.state.last_activity == now
