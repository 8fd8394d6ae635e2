"""Engine knowledge as pack data (issue 33): the main progress bar (`primary: true`) and the
phases' colours (`colours:`) come from the pack, so a new engine with its own phase and bar
needs no Python: its view, its metrics' shard series and the page's lanes follow its YAML.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import PackError, load_pack, shipped_pack_names
from logwatch.view import TargetView, build_view, pipeline_view, unknown_phases
from logwatch.counters import Counters

NEW_ENGINE = """\
name: newengine
phases: [launching, loading_weights, ready]
colours: {launching: "#111111", loading_weights: "#22AA33"}
rules:
  - id: start
    pattern: 'newengine starting'
    restart: true
    phase: launching
  - id: tensor_bar
    pattern: 'tensors (?P<current>\\d+)/(?P<total>\\d+)'
    phase: loading_weights
    progress: tensors
    primary: true
  - id: other_bar
    pattern: 'blocks (?P<current>\\d+)/(?P<total>\\d+)'
    phase: loading_weights
    progress: blocks
  - id: ready
    pattern: 'newengine ready'
    phase: ready
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_new_engines_bar_and_colours_come_from_its_pack(tmp_path: Path) -> None:
    pack = load_pack(write(tmp_path, NEW_ENGINE))
    assert pack.primary_progress == "tensors"
    assert pack.colours == {"launching": "#111111", "loading_weights": "#22aa33"}
    pipe = LogPipeline(pack)
    pipe.feed(b"newengine starting\nblocks 1/9\ntensors 3/12\n", 1000.0)
    view = pipeline_view("n", pipe, 1001.0)
    assert view.primary_progress == "tensors"
    assert view.shards is not None and (view.shards.loaded, view.shards.total) == (3, 12)
    doc = view.to_json()
    assert doc["shards"] == {"loaded": 3, "total": 12}
    assert doc["phase_colours"]["loading_weights"] == "#22aa33"
    assert "loading_weights" in view.phases


def test_a_pack_without_a_primary_bar_shows_no_shards(tmp_path: Path) -> None:
    pack = load_pack(write(tmp_path, NEW_ENGINE.replace("    primary: true\n", "")))
    assert pack.primary_progress is None
    pipe = LogPipeline(pack)
    pipe.feed(b"newengine starting\ntensors 3/12\n", 1000.0)
    view = pipeline_view("n", pipe, 1001.0)
    assert view.shards is None and "tensors" in view.progress


@pytest.mark.parametrize("name", shipped_pack_names())
def test_the_shipped_packs_bar_is_shards_and_every_phase_has_a_colour(name: str) -> None:
    pack = load_pack(name)
    assert pack.primary_progress == "shards"      # the metrics' logwatch_shards_* (DESIGN)
    assert set(pack.phases) - {"ready"} <= set(pack.colours), pack.colours


def test_colours_are_inherited_and_overridden(tmp_path: Path) -> None:
    write(tmp_path, NEW_ENGINE, "newengine.yaml")
    child = load_pack(write(tmp_path, 'name: child\nextends: newengine.yaml\n'
                                      'colours: {launching: "#abcdef"}\n'))
    assert child.colours == {"launching": "#abcdef", "loading_weights": "#22aa33"}
    assert child.primary_progress == "tensors"


@pytest.mark.parametrize("change, key", [
    (('colours: {launching: "#111111", loading_weights: "#22AA33"}', 'colours: {launching: red}'),
     "colours.launching"),
    (('colours: {launching: "#111111", loading_weights: "#22AA33"}', 'colours: {warming: "#111111"}'),
     "colours.warming"),
    (('colours: {launching: "#111111", loading_weights: "#22AA33"}', 'colours: [a]'), "colours"),
    (("    progress: blocks\n", "    progress: blocks\n    primary: true\n"), "primary"),
    (("    restart: true\n", "    restart: true\n    primary: true\n"), "primary"),
])
def test_bad_pack_data_is_one_error_naming_the_key(tmp_path: Path, change: tuple[str, str],
                                                   key: str) -> None:
    text = NEW_ENGINE.replace(*change)
    assert text != NEW_ENGINE
    with pytest.raises(PackError) as e:
        load_pack(write(tmp_path, text))
    assert e.value.key == key, str(e.value)


def test_a_target_not_yet_detected_has_the_base_packs_phases() -> None:
    base = load_pack("base")
    assert unknown_phases() == base.phases and base.phases[-1] == "ready"
    view = build_view(TargetView(name="t", engine="auto", source="x.log", kind="file",
                                 labels={}, now=1.0, counters=Counters()), None)
    assert view.phases == ("waiting", *base.phases, "crashed", "stopped")


def test_a_weak_sign_alone_does_not_choose_the_engine_before_the_wait() -> None:
    """`--rules auto`, live: sglang-006 begins with a line in vLLM's format (which SGLang's
    weight loader also printed), and its SGLang lines come 0.6 s later.  Before, that first
    line alone chose vLLM (the crash then read as python_exception instead of
    warmup_failed).  A sign of weight 1-2 now waits for more lines, up to DETECT_WAIT."""
    from logwatch.follow import DETECT_WAIT, Follower
    from logwatch.rules.pack import load_all_shipped
    from logwatch.sources.base import Data, Opened
    lines = (Path(__file__).parent / "fixtures" / "sglang-006.log").read_bytes().splitlines(True)
    follower = Follower("t", object(), lambda p: LogPipeline(p), None,  # type: ignore[arg-type]
                        load_all_shipped())
    follower.handle(Opened(0, 1, None, "attach", True), now=0.0)
    follower.handle(Data(lines[0], 0), now=0.0)
    assert follower.pack is None                   # undecided: a line format, weight 1
    follower.handle(Data(b"".join(lines[1:]), len(lines[0])), now=0.6)
    assert follower.pack is not None and follower.pack.name == "sglang"
    lone = Follower("t", object(), lambda p: LogPipeline(p), None,  # type: ignore[arg-type]
                    load_all_shipped())
    lone.handle(Opened(0, 1, None, "attach", True), now=0.0)
    lone.handle(Data(lines[0], 0), now=0.0)
    lone.tick(DETECT_WAIT)                          # nothing more: the best there is
    assert lone.pack is not None and lone.pack.name == "vllm"
    # the SGLang lines 0.1 s after a try: tried by the next tick, not only at DETECT_WAIT
    quick = Follower("t", object(), lambda p: LogPipeline(p), None,  # type: ignore[arg-type]
                     load_all_shipped())
    quick.handle(Opened(0, 1, None, "attach", True), now=0.0)
    quick.handle(Data(lines[0], 0), now=0.0)
    quick.handle(Data(b"".join(lines[1:]), len(lines[0])), now=0.1)
    assert quick.pack is None                       # within the quarter second
    quick.tick(0.4)
    assert quick.pack is not None and quick.pack.name == "sglang"


def _auto_follower(first: str, data: bytes | None = None) -> tuple[object, int]:
    """A `rules: auto` follower that read fixture `first` (or `data`) as a log's first file."""
    from logwatch.follow import Follower
    from logwatch.rules.pack import load_all_shipped
    from logwatch.sources.base import Data, Opened
    follower = Follower("t", object(), lambda p, carry=None: _carried(p, carry), None,  # type: ignore[arg-type]
                        [p for p in load_all_shipped() if p.detect], redetect=True)
    if data is None:
        data = (FIXTURE_DIR / f"{first}.log").read_bytes()
    follower.handle(Opened(0, 1, None, "attach", True), now=0.0)
    follower.handle(Data(data, 0), now=0.0)
    follower.tick(5.0)
    return follower, len(data)


def _carried(pack, carry):  # type: ignore[no-untyped-def]
    pipe = LogPipeline(pack)
    if carry is not None:
        pipe.carry_on(carry)
    return pipe


FIXTURE_DIR = Path(__file__).parent / "fixtures"


def test_another_engine_relaunched_into_the_truncated_log_gets_its_own_pack() -> None:
    """`vllm serve ... > server.log`, killed while loading, then `python -m
    sglang.launch_server ... > server.log`: the same path, truncated, another engine.
    Before, the vLLM pack stayed: SGLang's startup was never seen (no ready, no crash).
    Now the new file's head is held back until it shows its engine (at once: server_args
    weighs 5), and the SGLang pack reads it from its first line, the state going on."""
    from logwatch.sources.base import Data, Opened
    follower, size = _auto_follower("vllm-006")
    assert follower.pack.name == "vllm" and follower.pipe.state.phase == "loading_shards"
    sglang = (FIXTURE_DIR / "built" / "sglang-0523-download.log").read_bytes()
    follower.handle(Opened(0, 1, None, "truncated", True), now=10.0)
    events = follower.handle(Data(sglang, 0), now=10.0)
    assert follower.pack.name == "sglang"
    st = follower.pipe.state
    assert st.phase == "ready" and st.epoch == 2, (st.phase, st.epoch)
    assert any(type(e).__name__ == "Restarted" for e in events)
    assert follower.pipe.counters.lines == 15 + 32          # both files' lines, each once
    assert follower.pipe.framer.consumed_offset == len(sglang)


def test_a_rotated_serving_log_keeps_its_engine_and_loses_no_time() -> None:
    """A serving log renamed by size: the new file's lines are read as they come (nothing
    held), and lines that name another engine, or share its line format, are not that
    engine's own: a prompt in vLLM's request log that says `pip install sglang`, SGLang's
    request log quoting `vllm serve`, vLLM's format printed by SGLang's loader.  Before the
    watch, a rotated head like these switched the pack (and the next crash became a phantom
    relaunch)."""
    from logwatch.sources.base import Data, Opened
    heads = {
        "vllm-034-default": b"(APIServer pid=7) INFO 12-01 10:05:00 [logger.py:37] Received "
                            b"request cmpl-1: prompt: 'how do I pip install sglang?'\n",
        "sglang-0523-download": b"[2026-12-01 10:05:00] Receive: obj=GenerateReqInput(text="
                                b"'vllm serve Qwen/Qwen3-8B --port 8000 fails, why?')\n"
                                b"INFO 12-01 10:05:00 weight_utils.py:243] Using model weights "
                                b"format ['*.safetensors']\n",
    }
    for fixture, head in heads.items():
        follower, size = _auto_follower(f"built/{fixture}")
        engine, lines = follower.pack.name, follower.pipe.counters.lines
        assert follower.pipe.state.phase == "ready"
        follower.handle(Opened(0, 1, None, "rotated", True), now=20.0)
        follower.handle(Data(head, 0), now=20.0)
        assert follower.pipe.counters.lines == lines + head.count(b"\n")   # at once
        assert follower.pack.name == engine and follower.pipe.state.phase == "ready"
        assert follower.pipe.state.epoch == 1 and not follower.pipe.state.relaunched


def test_another_engine_whose_own_lines_come_late_still_gets_its_pack() -> None:
    """trtllm-serve prints third-party lines first (`datasets`' `INFO config.py:54: PyTorch
    version ...`), its own 6 s later; a wrapper may download for minutes.  The new file is
    watched past those lines: at TensorRT-LLM's first own line its pack reads the log, and
    its argument error is a new startup's crash (before: SGLang's ready stayed, no alert)."""
    from logwatch.sources.base import Data, Opened
    follower, size = _auto_follower("built/sglang-0523-download")
    trt = (FIXTURE_DIR / "trtllm-009.log").read_bytes().splitlines(keepends=True)
    follower.handle(Opened(0, 1, None, "truncated", True), now=30.0)
    head = b"".join(trt[:3])
    follower.handle(Data(head, 0), now=30.0)
    assert follower.pack.name == "sglang"
    follower.tick(40.0)
    follower.handle(Data(b"".join(trt[3:]), len(head)), now=40.0)
    follower.tick(100.0)
    st = follower.pipe.state
    assert follower.pack.name == "trtllm" and st.epoch == 2, (follower.pack.name, st.epoch)
    assert st.phase == "crashed" and st.crash.reason == "bad_argument", st.crash


def test_a_command_run_again_and_a_restart_are_looked_at_again() -> None:
    """`cmd:` sources run again continue one stream (no new file): the source back up opens
    the watch.  A pack restored from a checkpoint: the first lines after the restart."""
    from logwatch.sources.base import Data, Opened, SourceState
    follower, size = _auto_follower("built/vllm-034-default")
    follower.handle(SourceState(False, "exited with 1; restarting in 1s", error=True), now=50.0)
    follower.handle(SourceState(True, "running cmd"), now=51.0)
    sglang = (FIXTURE_DIR / "built" / "sglang-0523-download.log").read_bytes()
    follower.handle(Data(sglang, size), now=51.0)
    assert follower.pack.name == "sglang" and follower.pipe.state.phase == "ready"

    from logwatch.follow import Follower
    from logwatch.rules.pack import load_all_shipped
    restored = Follower("t", object(), lambda p, carry=None: _carried(p, carry),  # type: ignore[arg-type]
                        load_pack("vllm"), [p for p in load_all_shipped() if p.detect],
                        redetect=True)
    restored.handle(Opened(0, 1, None, "resume", False), now=0.0)
    restored.handle(Data(sglang, 0), now=0.0)
    assert restored.pack.name == "sglang" and restored.pipe.state.phase == "ready"


def test_the_same_engine_relaunched_into_a_truncated_log_keeps_its_pack() -> None:
    """A truncation whose first line is the same engine's launch: its pack, a new startup."""
    from logwatch.sources.base import Data, Opened
    follower, _ = _auto_follower("built/sglang-0523-download")
    again = (FIXTURE_DIR / "built" / "sglang-0523-overlap.log").read_bytes()
    follower.handle(Opened(0, 1, None, "truncated", True), now=30.0)
    follower.handle(Data(again, 0), now=30.0)
    assert follower.pack.name == "sglang" and follower.pipe.state.epoch == 2


def test_another_engine_appended_after_a_crash_gets_its_own_pack() -> None:
    """`nohup vllm serve ... >> server.log`, a crash, then SGLang launched into the same
    file with `>>`: no new file, but the server of the log is dead, so the first bytes after
    its crash is final are looked at like a new file's head."""
    from logwatch.sources.base import Data
    follower, size = _auto_follower("vllm-024")
    follower.tick(100.0)                                     # the crash is final
    st = follower.pipe.state
    assert follower.pack.name == "vllm" and st.phase == "crashed" and st.crash_settled
    epoch = st.epoch
    sglang = (FIXTURE_DIR / "built" / "sglang-0523-download.log").read_bytes()
    follower.handle(Data(sglang, size), now=200.0)
    assert follower.pack.name == "sglang"
    assert follower.pipe.state.phase == "ready" and follower.pipe.state.epoch == epoch + 1
    # its own crash later, and vLLM appended again: back to vLLM's pack
    follower.handle(Data(b"[2026-12-01 10:09:00] Received sigquit from a child process. "
                         b"It usually means the child failed.\n", size + len(sglang)), now=201.0)
    follower.tick(300.0)
    again = (FIXTURE_DIR / "built" / "vllm-034-default.log").read_bytes()
    follower.handle(Data(again, size + len(sglang) + 87), now=400.0)
    assert follower.pack.name == "vllm" and follower.pipe.state.phase == "ready"


def test_a_relaunch_into_a_new_file_after_a_crash_is_a_new_startup_even_without_its_launch_line() -> None:
    """The server crashed; the engineer relaunches with `>` and a typo in a flag: argparse's
    error is all the new file holds.  A dead server writes no new file, so it is a new
    startup's crash (alerted); before, it was taken for more of the old crash."""
    from logwatch.sources.base import Data, Opened
    follower, _ = _auto_follower("vllm-024")
    follower.tick(100.0)
    st = follower.pipe.state
    epoch = st.epoch
    assert st.phase == "crashed" and st.crash_settled
    typo = (b"usage: vllm serve [model_tag] [options]\n"
            b"vllm serve: error: unrecognized arguments: --tensor-paralel-size 8\n")
    follower.handle(Opened(0, 1, None, "truncated", True), now=200.0)
    events = follower.handle(Data(typo, 0), now=200.0)
    follower.tick(300.0)
    st = follower.pipe.state
    assert st.epoch == epoch + 1 and st.phase == "crashed", (st.epoch, st.phase)
    assert st.crash.reason == "bad_argument" and st.crash_settled
    assert any(type(e).__name__ == "StartupBegan" for e in events)


def test_a_wrapper_that_prints_first_does_not_fix_the_engine_for_good() -> None:
    """trtllm-012 as written: a wrapper downloads for 29 s (wget, the Hugging Face hub)
    before trtllm-serve's first line.  The first detection has nothing to go on after
    DETECT_WAIT and takes the fallback pack; before, that pack read the whole startup
    (the README told users to name the pack).  Now TensorRT-LLM's first own line hands it
    to its pack, as a misjudgement, not a relaunch: the same report as `replay`."""
    from logwatch.app.replay import replay_file
    from logwatch.follow import Follower
    from logwatch.rules.pack import load_all_shipped
    from logwatch.sources.base import Data, Opened
    data = (FIXTURE_DIR / "trtllm-012.log").read_bytes()
    cut = data.index(b"[2025-12-20 04:19:59] INFO config.py:54")
    follower = Follower("t", object(), lambda p, carry=None: _carried(p, carry),  # type: ignore[arg-type]
                        None, [p for p in load_all_shipped() if p.detect], redetect=True)
    follower.handle(Opened(0, 1, None, "attach", True), now=0.0)
    follower.handle(Data(data[:cut], 0), now=0.0)
    follower.tick(3.0)
    assert follower.pack is not None and follower.pack.name != "trtllm"   # nothing to go on
    follower.handle(Data(data[cut:], cut), now=30.0)
    follower.finish(30.0)
    live, replayed = follower.pipe.state, replay_file(str(FIXTURE_DIR / "trtllm-012.log")).state
    assert follower.pack.name == "trtllm" and live.phase == "ready"
    assert (live.startups, live.phases_seen) == (replayed.startups, replayed.phases_seen)


V_ERR = "(EngineCore_DP0 pid=123) ERROR 10-03 10:00:05 [core.py:708] EngineCore failed to start."


def test_a_prompt_that_quotes_another_engines_log_is_not_that_engine() -> None:
    """After a rotation, the first request a user sends pastes another engine's log line:
    SGLang's `--log-requests` (the request's text glued before the paste comes off as
    wrapped output), vLLM 0.6's request logger.  Before, the paste was taken for the other
    engine's own line: a false `restarted`, then its crash rules read the paste.  A line
    that carries what a client sent (the current pack's request logs) is not an engine's."""
    from logwatch.sources.base import Data, Opened
    asked = {
        "built/sglang-0523-download": (
            "[2026-12-01 11:00:05] Receive OpenAI: obj={'messages': [{'role': 'user', "
            f"'content': {(V_ERR + ' Why?')!r}}}], 'model': 'default'}}"),
        "built/vllm-034-default": (
            "INFO 01-30 18:00:05 logger.py:37] Received request chatcmpl-1: prompt: "
            + repr("<|im_start|>user\n[2026-10-03 10:00:05 TP0] Scheduler hit an exception: "
                   "Traceback (most recent call last): Why?") + ", params: SamplingParams(n=1)"),
    }
    for fixture, line in asked.items():
        follower, _ = _auto_follower(fixture)
        engine = follower.pack.name
        follower.handle(Opened(0, 1, None, "rotated", True), now=20.0)
        follower.handle(Data(line.encode() + b"\n", 0), now=20.0)
        assert follower.pack.name == engine, (fixture, follower.pack.name)
        assert follower.pipe.state.epoch == 1 and follower.pipe.state.phase == "ready"


def test_the_second_part_of_a_line_the_kubelet_split_is_not_a_line_of_its_own() -> None:
    """A pod's log file (CRI records): a request line over 16 KiB is a P record, then an F
    record with the rest, which begins inside the pasted text.  Alone, that F record reads
    as another engine's line; it is the end of the request's."""
    from logwatch.sources.base import Data, Opened

    def record(text: bytes, tag: bytes = b"F") -> bytes:
        return b"2026-12-05T01:00:00.123456789Z stdout " + tag + b" " + text + b"\n"
    follower, _ = _auto_follower("built/sglang-0523-download")
    request = ("[2026-12-01 11:00:05] Receive: obj=GenerateReqInput(rid='1', text="
               + repr("x" * 16300 + "\n" + V_ERR) + ")").encode()
    split = request.index(b"(EngineCore_DP0")
    follower.handle(Opened(0, 1, None, "rotated", True), now=20.0)
    data = record(request[:split], b"P") + record(request[split:])
    follower.handle(Data(data, 0), now=20.0)
    assert follower.pack.name == "sglang" and follower.pipe.state.epoch == 1


def test_a_stream_of_two_engines_processes_does_not_flip_between_them() -> None:
    """`docker compose logs -f` of an SGLang and a vLLM service in one target: at each run
    of the command, a vLLM line came first, and was taken for a relaunch (5 runs: 5 false
    `restarted`, a startup stuck in `launching`).  A line whose wrapper names another
    process than the launch's is that process's, not a relaunch."""
    from logwatch.sources.base import Data, SourceState
    sglang = (FIXTURE_DIR / "built" / "sglang-0523-download.log").read_bytes()
    composed = b"".join(b"sglang-1  | " + ln + b"\n" for ln in sglang.split(b"\n")[:-1])
    follower, size = _auto_follower("", composed)
    assert follower.pack.name == "sglang" and follower.pipe.state.procs == {"sglang-1"}
    follower.handle(SourceState(False, "exited with 0; restarting", error=True), now=40.0)
    follower.handle(SourceState(True, "running"), now=41.0)
    vllm = (b"vllm-1    | (APIServer pid=1) INFO 12-01 10:05:00 [loggers.py:123] Engine 000: "
            b"Avg prompt throughput: 0.0 tokens/s\n")
    follower.handle(Data(vllm, size), now=41.0)
    assert follower.pack.name == "sglang" and follower.pipe.state.epoch == 1


def _error_key(tmp_path: Path, pack: str) -> str:
    """The key the one error of loading pack text `pack` names."""
    with pytest.raises(PackError) as e:
        load_pack(write(tmp_path, pack))
    return str(e.value.key)


FOLLOWER = "name: mine\nextends: sglang\nfollower:\n  args: {node_rank: 1}\n  ready: cuda_graph\n"


@pytest.mark.parametrize("entry, key", [
    ("eager: {args: {disable_cuda_graph: 1}, ready: allocating}", "follower.eager.args"),
    ("eager: {ready: allocating}", "follower.eager.args"),
    ("eager: {rules: [no_such_rule], ready: allocating}", "follower.eager.rules"),
    ("eager: {args: {disable_cuda_graph: true}, ready: ready}", "follower.eager.ready"),
    ("eager: {args: {disable_cuda_graph: true}, ready: loading_shards}", "follower.eager.ready"),
    ("eager: {args: {disable_cuda_graph: true}}", "follower.eager"),
    ("eager: {args: {disable_cuda_graph: true}, ready: allocating, when: x}", "follower.eager"),
    ("eager: {args: {disable_cuda_graph: true}, ready: allocating, skips: [launching]}",
     "follower.eager.skips"),
    ("eager: {args: {disable_cuda_graph: true}, ready: allocating, skips: cuda_graph}",
     "follower.eager.skips"),
    ("nodes: {rank: node_rank}", "follower.nodes"),
    ("nodes: {rank: node_rank, count: 2}", "follower.nodes"),
    ("nodes: {rank: node_rank, count: nnodes, same: dist_init_addr}", "follower.nodes.same"),
    ("nodes: {rank: node_rank, count: nnodes, where: x}", "follower.nodes"),
    ("head: [no_such_rule]", "follower.head"),
])
def test_a_bad_follower_entry_is_one_error_naming_the_key(tmp_path: Path, entry: str,
                                                          key: str) -> None:
    """`follower.eager` (a follower that captures no graphs): a flag that is not `true`, a
    rule the pack lacks, a phase no `finishes: true` rule ends (loading_shards), the ready
    phase itself, a missing or unknown key, `skips` that is no list of phases after its
    ready; `follower.nodes` (the arguments that name a
    node of a launch of several): a missing or non-name `rank` / `count`, a `same` that is
    no list, an unknown key; `follower.head` (the lines only a head prints): a rule the
    pack lacks."""
    assert _error_key(tmp_path, FOLLOWER + f"  {entry}\n") == key


@pytest.mark.parametrize("records, key", [
    ("{loggers: [x]}", "records"),
    ("[{envelope: []}]", "records[0].envelope"),
    ("[{envelope: ['%(nosuch)s ']}]", "records[0].envelope[0]"),
    ("[{envelope: ['%(asctime']}]", "records[0].envelope[0]"),
    ("[{envelope: ['x'], loggers: x}]", "records[0].loggers"),
    ("[{envelope: ['x'], datefmt: 3}]", "records[0].datefmt"),
    ("[{envelope: ['x'], each_line: 1}]", "records[0].each_line"),
    ("[{envelope: ['x'], when: 1}]", "records[0]"),
    # a wrapper's form (`wraps`): its fields (`lines.WRAPPER_FIELDS`), `message` among its
    # keys, each a key path
    ("[{envelope: ['x'], wraps: 1, keys: {message: m}}]", "records[0].wraps"),
    ("[{envelope: ['x'], wraps: true, keys: {processName: p}}]", "records[0].keys"),
    ("[{envelope: ['x'], wraps: true, keys: {message: m, levelname: l}}]", "records[0].keys"),
    ("[{envelope: ['x'], wraps: true, keys: {message: 'labels..pod'}}]", "records[0].keys"),
    ("[{envelope: ['%(levelname)s '], wraps: true, keys: {message: m}}]",
     "records[0].envelope[0]"),
])
def test_a_bad_records_entry_is_one_error_naming_the_key(tmp_path: Path, records: str,
                                                         key: str) -> None:
    """`records:` (how an engine's formatter writes a logging record): a piece naming a
    field records do not have, or no `%`-format at all, a key of the wrong shape."""
    assert _error_key(tmp_path, f"name: mine\nextends: vllm\nrecords: {records}\n") == key


@pytest.mark.parametrize("value", ["downloading", "[no_such_phase]", "[ready]"])
def test_a_bad_prelaunch_is_one_error_naming_the_key(tmp_path: Path, value: str) -> None:
    """`prelaunch` (phases a wrapper may show before the server's launch line) lists some
    of the pack's startup phases."""
    assert _error_key(tmp_path, f"name: mine\nextends: sglang\nprelaunch: {value}\n") == \
        "prelaunch"
