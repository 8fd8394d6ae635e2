"""What each crash reason means, in a sentence an operator acts on (the Slack message, the
README table).  The names are `pack.CRASH_REASONS` (stable label values of
`logwatch_crashes_total{reason}`); a test keeps the two in step."""

from __future__ import annotations

import re

REASON_TEXT: dict[str, str] = {
    "cuda_oom": "The GPU ran out of memory (lower --mem-fraction-static / --gpu-memory-utilization, "
                "or use more GPUs).",
    "host_oom_killed": "The kernel's OOM killer killed a process (host RAM; see dmesg).",
    "kv_cache_too_small": "No room left for the KV cache after the weights (raise the memory "
                          "fraction, shorten the context, or use more GPUs).",
    "nccl_error": "An NCCL collective failed or timed out (network, a dead or hung rank).",
    "distributed_error": "torch.distributed rendezvous failed (address, port, a rank that never joined).",
    "import_error": "A Python module is missing or broken (the image or the environment).",
    "bad_argument": "The command line or the engine config was rejected.",
    "hub_download_failed": "The weights could not be fetched from the Hugging Face hub "
                           "(token, gated repo, network, name).",
    "weight_loading_error": "The checkpoint could not be loaded (missing or incomplete files, "
                            "a mismatch with the model).",
    "warmup_failed": "The server's own warmup request failed after it started listening.",
    "port_in_use": "The HTTP (or a distributed) port is already taken by another process.",
    "cuda_graph_capture_failed": "CUDA graph capture failed (often memory: fewer or smaller graphs).",
    "autotune_failed": "Kernel autotuning (FlashInfer) failed.",
    "kernel_compile_failed": "A JIT kernel build failed (ninja / nvcc / Triton).",
    "startup_timeout": "A part of the server did not come up in the time allowed (slow weight "
                       "loading of a big model: raise the engine's ready timeout).",
    "shm_too_small": "/dev/shm is too small for the inter-process queues (docker --shm-size or "
                     "--ipc=host).",
    "hang": "The server stopped making progress (watchdog timeout, failed health checks).",
    "gpu_unavailable": "No GPU the engine can use: the driver, the CUDA runtime or the card "
                       "does not fit (the container, the host or the image).",
    "disk_full": "A disk filled up (weights, a JIT or compile cache): free space, or point the "
                 "cache (HF_HOME, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR) at a larger volume.",
    "discovery_unreachable": "A worker under NVIDIA Dynamo could not reach the deployment's "
                             "etcd or NATS (discovery, the event plane): check ETCD_ENDPOINTS / "
                             "NATS_SERVER and that both services are up.",
    "child_process_died": "A worker or scheduler process died; the log does not say why.",
    "python_exception": "An uncaught Python exception; the root-cause line says which.",
    "unknown": "The server died without saying why (a native crash or a kill).",
}


def reason_text(reason: str) -> str:
    """The sentence for `reason`, "" for a pack's own reason that has none."""
    return REASON_TEXT.get(reason, "")


MEANING_FIELD = re.compile(r"\{(\w+)\}")
FIELD_KEEP = 80            # characters of a field a sentence quotes (the line is untrusted)


def fill_meaning(template: str, fields: dict[str, str]) -> str:
    """A rule's `meaning:` sentence with its `{group}`s from the line (clipped: log text);
    "" when the rule has none."""
    def one(m: re.Match[str]) -> str:
        v = fields.get(m.group(1)) or "?"
        return v if len(v) <= FIELD_KEEP else v[:FIELD_KEEP - 1] + "…"
    return MEANING_FIELD.sub(one, template)
