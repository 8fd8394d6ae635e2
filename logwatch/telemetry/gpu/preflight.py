"""The preflight: which GPUs already held memory when a startup's first line arrived live.

Memory held before a launch is another process's (a server that did not exit, a notebook):
an OOM waiting to happen.  The app reads it at `StartupBegan` (never while catching up) from
the stream's `to_dict()`; the crash's note and the watch panel say it in words."""

from __future__ import annotations

from typing import Any

GIB = 1024 ** 3
PREFLIGHT_HELD = 2 * GIB      # memory a GPU holds before a launch that is worth a word


def preflight_note(gpu: dict[str, Any] | None, reason: str | None) -> str:
    """The preflight beside a crash: the GPUs that held memory before launch ("GPU 3 held 76
    GiB before launch"); for an OOM whose launch found them empty, that too (the OOM is then
    the server's own, not another process's)."""
    held = (gpu or {}).get("preflight") or ""
    if held:
        return str(held)
    if reason == "cuda_oom" and (gpu or {}).get("preflight_read"):
        return "no GPU held memory before launch: the OOM is the server's own"
    return ""


def preflight_held(gpu: dict[str, Any] | None) -> list[tuple[int, float]]:
    """(GPU index, GiB) of the GPUs that already hold memory: read at a launch, they are
    another process's (a server that did not exit, a notebook): an OOM waiting to happen."""
    if not gpu or not gpu.get("up") or not gpu.get("snapshot"):
        return []
    return [(int(g.get("index", i)), (g.get("mem_used_bytes") or 0) / GIB)
            for i, g in enumerate(gpu["snapshot"].get("gpus") or [])
            if (g.get("mem_used_bytes") or 0) >= PREFLIGHT_HELD]


def preflight_text(held: list[tuple[int, float]]) -> str:
    """"GPU 3 held 76 GiB before launch" (the largest first; at most three named)."""
    if not held:
        return ""
    top = sorted(held, key=lambda x: -x[1])
    named = ", ".join(f"GPU {i} held {gib:.0f} GiB" for i, gib in top[:3])
    more = f" (and {len(top) - 3} more)" if len(top) > 3 else ""
    return f"{named}{more} before launch"

