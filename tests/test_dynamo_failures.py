"""NVIDIA Dynamo's own failures (ai-dynamo 1.6.1): a worker that cannot join its deployment.
Every engine's worker joins through the Rust runtime (`DistributedRuntime(...)`,
common/utils/runtime.py:83) before it builds its engine; with etcd or NATS down the runtime
retries (`... not reachable yet; retrying startup connection`, WARN), gives up and raises.
Its request plane binds as the worker serves, after Dynamo's ready line.  The logs are built
from Dynamo's source and binary (tests/fixtures/built/README.md), read by base.yaml's rules
`dynamo_discovery_unreachable`, `dynamo_discovery_retry`, `dynamo_request_plane_port_taken`."""

from __future__ import annotations

from pathlib import Path

from logwatch.app.replay import replay_file
from logwatch.sinks.summary import summary
from logwatch.view import pipeline_view

BUILT = Path(__file__).parent / "fixtures" / "built"
ETCD_DOWN = BUILT / "vllm-034-dynamo-etcd-down.log"
NATS_DOWN = BUILT / "sglang-0523-dynamo-nats-down.log"
PORT_TAKEN = BUILT / "vllm-034-dynamo-port-taken.log"
WORKER = BUILT / "vllm-034-dynamo-worker.log"


def doc(path: Path) -> dict:
    return summary(pipeline_view(path.name, replay_file(str(path))))


def test_a_vllm_worker_whose_etcd_is_down_is_discovery_unreachable_at_launch() -> None:
    """Dynamo's first line, five retries, then `DistributedRuntime(...)` raises.  Before:
    `crashed: python_exception during launching`, the fix (etcd) unsaid."""
    d = doc(ETCD_DOWN)
    assert d["engine"] == "vllm" and d["phase"] == "crashed" and d["startups"] == 1
    assert (d["crash"]["reason"], d["crash"]["during"]) == ("discovery_unreachable", "launching")
    assert d["crash"]["line"].startswith("Exception: Unable to connect to etcd server at ")


def test_an_sglang_worker_whose_nats_is_down_is_a_startup_that_crashed_at_launch() -> None:
    """No SGLang line before the runtime fails (sglang/main.py:99 comes first): only the
    Rust runtime's WARN retries, its ERROR and the traceback.  Before: `crashed:
    python_exception during waiting`, 0 startups."""
    d = doc(NATS_DOWN)
    assert d["engine"] == "sglang" and d["phase"] == "crashed" and d["startups"] == 1
    assert (d["crash"]["reason"], d["crash"]["during"]) == ("discovery_unreachable", "launching")
    assert d["crash"]["line"].endswith(
        "NATS startup connection timed out after 30 seconds")


def test_the_retries_alone_are_no_crash_but_name_the_cause_of_one(tmp_path: Path) -> None:
    """While the runtime retries, etcd may still come up: no crash.  A crash that follows
    without a cause of its own (the runtime's shutdown during initialization) is read as
    the retries say."""
    lines = NATS_DOWN.read_text().splitlines()
    retries = [x for x in lines if "retrying startup connection" in x]
    assert len(retries) == 5
    log = tmp_path / "retrying.log"
    log.write_text("\n".join(retries) + "\n")
    assert doc(log)["phase"] != "crashed"
    log.write_text("\n".join(retries + ["RuntimeError: runtime shut down during initialization"])
                   + "\n")
    d = doc(log)
    assert d["phase"] == "crashed" and d["crash"]["reason"] == "discovery_unreachable"


def test_a_request_plane_port_taken_as_the_worker_serves_is_its_crash_not_a_relaunch() -> None:
    """Dynamo's ready line, then `serve_endpoint` cannot bind (worker_factory.py:1634 logs
    `Failed to serve endpoints:` and re-raises).  Before: base's `port_in_use` is
    `launch_only`, so the line after the ready began a second startup, `crashed: port_in_use
    during launching` after 0 s, the worker's 4m12s start lost."""
    d = doc(PORT_TAKEN)
    assert d["engine"] == "vllm" and d["phase"] == "crashed" and d["startups"] == 1
    assert d["crash"]["reason"] == "port_in_use"
    assert "Failed to serve endpoints: Failed to bind to address 0.0.0.0:9345" in d["crash"]["line"]
    assert d["ready_line"].endswith("worker for Qwen/Qwen3-8B has been initialized")


def test_the_runtime_losing_nats_while_serving_is_no_crash(tmp_path: Path) -> None:
    """After the ready the cause line is a hint (`ready_hint`): the worker serves on until it
    says it dies."""
    lost = ("2026-12-01T10:20:00.000000Z ERROR dynamo_runtime::transports::nats: "
            "Failed to connect to NATS")
    log = tmp_path / "serving.log"
    log.write_text(WORKER.read_text() + lost + "\n")
    assert doc(log)["phase"] == "ready"
