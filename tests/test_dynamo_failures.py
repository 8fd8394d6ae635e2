"""NVIDIA Dynamo's own failures (ai-dynamo 1.6.1): a worker that cannot join its deployment,
or leaves it.  Every engine's worker joins through the Rust runtime (`DistributedRuntime(...)`,
common/utils/runtime.py:83) before it builds its engine; with etcd or NATS down the runtime
retries (`... not reachable yet; retrying startup connection`, WARN), gives up and raises.
Its request plane binds, and its endpoint registers, as the worker serves, after Dynamo's
ready line; its etcd lease (which its registrations hang on) is kept alive from the start to
the end, and a lease lost stops the worker.  The logs are built from Dynamo's source and
binary (tests/fixtures/built/README.md), read by base.yaml's rules
`dynamo_discovery_unreachable`, `dynamo_discovery_retry`, `dynamo_request_plane_port_taken`,
`dynamo_lease_lost`, `dynamo_lease_keepalive_failing`, `dynamo_endpoint_register_failed`;
a disaggregated worker's KV transfers are vLLM's (NixlConnector), read by vllm.yaml's
`nixl_transfer_failed` and `kv_load_failed` as a degraded serve."""

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
LEASE_LOST = BUILT / "vllm-034-dynamo-lease-lost.log"
LEASE_REVOKED = BUILT / "sglang-0523-dynamo-lease-revoked.log"
SGLANG_WORKER = BUILT / "sglang-0523-dynamo-worker.log"
NIXL_FAILED = BUILT / "vllm-034-dynamo-nixl-handshake-failed.log"
NIXL_NOTE = "PD KV transfer failing (NIXL)"
REGISTRATION_FAILED = BUILT / "sglang-0523-dynamo-registration-failed.log"
LEASE_MEANING = "The worker lost its etcd lease"


def doc(path: Path) -> dict:
    """replay --json's document, and the crash rule's sentence (`meaning`, the status's)."""
    st = replay_file(str(path))
    d = summary(pipeline_view(path.name, st))
    d["meaning"] = st.state.crash.meaning if st.state.crash else ""
    d["degraded"] = st.state.degraded or ""
    return d


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


def test_a_vllm_worker_that_loses_its_etcd_lease_while_serving_crashed() -> None:
    """Ready at 4m12s; 17 minutes later the keep-alive stream ends, the runtime reconnects
    until the lease's deadline, then `Unable to maintain lease` (lease.rs:49) and the runtime
    stops the worker.  Before: `ready`, the worker gone from its deployment unsaid."""
    d = doc(LEASE_LOST)
    assert d["engine"] == "vllm" and d["phase"] == "crashed" and d["startups"] == 1
    assert (d["crash"]["reason"], d["crash"]["during"]) == ("discovery_unreachable", "ready")
    assert d["crash"]["line"].endswith(
        "Unable to maintain lease. Check etcd server status "
        "error=Unable to reconnect to ETCD cluster: deadline exceeded")
    assert d["meaning"].startswith(LEASE_MEANING)
    assert d["ready_line"].endswith("worker for Qwen/Qwen3-8B has been initialized")


def test_an_sglang_worker_whose_etcd_restarted_empty_lost_its_lease() -> None:
    """The runtime reconnects (INFO `Successfully reconnected`), but etcd no longer knows the
    lease (`Keep-alive lease expired`, ERROR): the lease-lost line is the crash, not the
    reconnect's lines before it.  Before: `ready`."""
    d = doc(LEASE_REVOKED)
    assert d["engine"] == "sglang" and d["phase"] == "crashed" and d["startups"] == 1
    assert (d["crash"]["reason"], d["crash"]["during"]) == ("discovery_unreachable", "ready")
    assert d["crash"]["line"].endswith("error=Unable to maintain lease - expired or revoked. "
                                       "Check etcd server status")
    assert d["meaning"].startswith(LEASE_MEANING)


def test_a_keepalive_that_reconnects_in_time_is_no_crash(tmp_path: Path) -> None:
    """The keep-alive's WARNs and the reconnect are hints: etcd may answer within the lease's
    TTL, and the worker serves on."""
    lines = LEASE_REVOKED.read_text().splitlines(keepends=True)
    reconnected = [x for x in lines if "Keep-alive lease expired" not in x
                   and "Unable to maintain lease" not in x]
    assert len(reconnected) == len(lines) - 2
    log = tmp_path / "reconnected.log"
    log.write_text("".join(reconnected))
    d = doc(log)
    assert d["phase"] == "ready" and d["crash"] is None


def test_a_lease_lost_as_the_engine_loads_is_a_crash_there_too(tmp_path: Path) -> None:
    """The lease is kept alive from the runtime's start, before the engine: its loss during
    the load is the startup's crash, read the same."""
    lines = SGLANG_WORKER.read_text().splitlines(keepends=True)
    lost = [x for x in LEASE_LOST.read_text().splitlines(keepends=True)
            if "dynamo_runtime::transports::etcd" in x]
    assert len(lost) == 3
    log = tmp_path / "loading.log"
    log.write_text("".join(lines[:12] + lost))
    d = doc(log)
    assert d["phase"] == "crashed" and d["crash"]["reason"] == "discovery_unreachable"
    assert d["crash"]["during"] not in ("ready", "launching")


def test_an_endpoint_that_cannot_register_in_discovery_is_discovery_unreachable(
        tmp_path: Path) -> None:
    """`serve_endpoint` cannot put the worker's instance in discovery (component/endpoint.rs:
    ERROR, then the context it returns, raised by worker_factory.py:1634's re-raise): the
    frontend never sees the worker, which exits.  Before: `ready`, the traceback after the
    ready line not read as the worker's end."""
    bind = "Failed to bind to address 0.0.0.0:9345: Address already in use (os error 98)"
    refused = "Unable to register service for discovery. Check discovery service status"
    text = PORT_TAKEN.read_text()
    assert text.count(bind) == 2
    log = tmp_path / "unregistered.log"
    log.write_text(text.replace(bind, refused))
    d = doc(log)
    assert d["engine"] == "vllm" and d["phase"] == "crashed" and d["startups"] == 1
    assert d["crash"]["reason"] == "discovery_unreachable"
    assert d["crash"]["line"].endswith("Failed to serve endpoints: " + refused)
    assert "never saw it" in d["meaning"]


def test_a_decode_worker_whose_prefill_worker_does_not_answer_serves_degraded() -> None:
    """A Dynamo decode worker (vLLM 0.34's NixlConnector) whose prefill worker's side channel
    does not answer: two `NIXL transfer failure: handshake_...` records with their tracebacks
    (`zmq.error.Again`), the request failed by the scheduler, and the worker serving on.
    Before: `ready`, nothing said.  The tracebacks are the transfer's, no crash."""
    d = doc(NIXL_FAILED)
    assert d["engine"] == "vllm" and d["phase"] == "ready" and d["crash"] is None
    assert d["startups"] == 1 and d["durations"] == doc(WORKER)["durations"]
    lines = NIXL_FAILED.read_text().splitlines()
    first = next(n for n, x in enumerate(lines, 1) if "NIXL transfer failure:" in x)
    assert d["degraded"] == f"{NIXL_NOTE}: requests whose KV cache could not be read from " \
        "their prefill worker fail (kv_load_failure_policy=fail) or are prefilled again " \
        f"here, line {first}"
    assert sum("zmq.error.Again" in x for x in lines) == 2


def test_a_kv_load_failure_alone_is_a_degrade_too(tmp_path: Path) -> None:
    """The scheduler's line says it for any KV connector (LMCache, Mooncake, offloading):
    `recompute` serves the request slower, `fail` fails it; either way no crash."""
    failing = [x for x in NIXL_FAILED.read_text().splitlines(keepends=True)
               if "NIXL transfer failure" not in x and "base_worker.py:15" not in x]
    assert any("Failing 1 request(s) due to KV load failure" in x for x in failing)
    log = tmp_path / "kv-load.log"
    log.write_text("".join(failing))
    d = doc(log)
    assert d["phase"] == "ready" and d["degraded"].startswith("KV load failing")


def test_an_sglang_worker_whose_model_registration_fails_names_the_error_not_the_capture(
        ) -> None:
    """Dynamo 1.6.1's SGLang worker registers its model card once the engine is up
    (register.py:268); the exception's text is on `Failed to register with runtime config:`
    alone, then `Model registration failed; shutting down` and a bare `RuntimeError: Model
    registration failed`.  Before: `cuda_graph_capture_failed` (the phase's default: the
    capture had ended, its lines untagged) with the bare RuntimeError as the root cause."""
    d = doc(REGISTRATION_FAILED)
    assert d["engine"] == "sglang" and d["phase"] == "crashed" and d["startups"] == 1
    assert d["crash"]["reason"] == "python_exception"
    assert d["crash"]["line"].endswith(
        "Failed to register with runtime config: Failed to read tokenizer_config.json: "
        "No such file or directory (os error 2)")
    assert "Failed to read tokenizer_config.json" in d["meaning"]
    assert "Dynamo could not register the model" in d["meaning"]


def test_a_registration_refused_by_discovery_stays_discovery_unreachable(
        tmp_path: Path) -> None:
    """The registration's words that a specific rule knows keep that rule's reason: the
    generic registration rule comes after them."""
    text = REGISTRATION_FAILED.read_text().replace(
        "Failed to read tokenizer_config.json: No such file or directory (os error 2)",
        "Unable to register service for discovery. Check discovery service status")
    log = tmp_path / "registration-discovery.log"
    log.write_text(text)
    d = doc(log)
    assert d["crash"]["reason"] == "discovery_unreachable"
    assert "Unable to register service for discovery" in d["crash"]["line"]


def test_a_crash_after_the_sglang_engine_is_up_is_not_the_capture_s(tmp_path: Path) -> None:
    """`Registering model with endpoint types` (init_llm.py:170) says `sgl.Engine` returned:
    a bare exception after it is no capture failure, the plain worker still ready."""
    lines = REGISTRATION_FAILED.read_text().splitlines()
    keep = [x for x in lines if "register" not in x or "Registering model" in x]
    log = tmp_path / "bare.log"
    log.write_text("\n".join(keep) + "\n")
    d = doc(log)
    assert d["phase"] == "crashed" and d["crash"]["reason"] == "python_exception"
    assert d["crash"]["line"] == "RuntimeError: Model registration failed"
    log.write_text("\n".join(x for x in keep if "Registering model" not in x) + "\n")
    assert doc(log)["crash"]["reason"] == "cuda_graph_capture_failed"
    assert doc(SGLANG_WORKER)["phase"] == "ready"
