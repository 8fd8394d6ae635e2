"""A target's `gpu:` setting (`GpuConfig`, `parse_gpu_config`) and where it runs for a
source kind (`plan_gpu`): pure, checked when the config is loaded."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, replace
from typing import Any, Callable

from ...units import fmt_duration, parse_budget, parse_switch

#: the watchdog's deadline for nvidia-smi's first output: with persistence mode off it
#: initialises every GPU before printing (~20 s on 8 GPUs), and over SSH a slow login shell
#: adds its own; a 10 s watchdog killed every such start for good (helper adv24 M2)
FIRST_TIMEOUT = 60.0

@dataclass(frozen=True)
class GpuConfig:
    """A target's `gpu:` setting.

    `mode`: "auto" (default: nvidia-smi where the log is: over the target's own SSH
    connection for ssh://, locally for a file when the command is on PATH, off for cmd: and
    stdin; see `plan_gpu`), "on" (a mapping or `true`: run it even where auto would not,
    locally for non-ssh targets) or "off" (`false`).
    `command`: a path or a command line (`nvidia-smi`, `/usr/bin/nvidia-smi`,
    `sudo -n nvidia-smi`); the query arguments are appended.
    `devices`: the server's GPUs (nvidia-smi indexes, or UUIDs); empty: those whose memory
    rose after its launch (scope.py).  Not the stream's: the host's one nvidia-smi reads
    every GPU, and each target picks its own from it."""

    mode: str = "auto"
    command: str = "nvidia-smi"
    interval: float = 2.0
    timeout: float = 10.0
    devices: tuple[int | str, ...] = ()
    first_timeout: float = FIRST_TIMEOUT

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "command": self.command, "interval": self.interval,
                "timeout": self.timeout, "devices": list(self.devices),
                "first_timeout": self.first_timeout}

    @property
    def stream(self) -> "GpuConfig":
        """The host's stream's part (what two targets of one host must share)."""
        return replace(self, devices=())


_GPU_KEYS = ("command", "interval", "timeout", "devices", "first_timeout")
_STREAM_KEYS = ("command", "interval", "timeout", "first_timeout")


def parse_devices(value: Any, name: str) -> tuple[int | str, ...]:
    """`devices: [4, 5, 6, 7]` (or "4,5,6,7", or GPU UUIDs "GPU-..."/"MIG-...") -> a tuple;
    ValueError("NAME: ...") for a non-integer, a negative index or a duplicate."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"{name}: expected a list of GPU indexes like [4, 5, 6, 7] "
                         f"(nvidia-smi's) or GPU UUIDs, got {value!r}")
    out: list[int | str] = []
    for item in items:
        v: int | str
        text = item.strip() if isinstance(item, str) else item
        if isinstance(text, str) and text.upper().startswith(("GPU-", "MIG-")):
            v = text
        elif isinstance(text, int) and not isinstance(text, bool):
            v = text
        elif isinstance(text, str) and text.lstrip("-").isdigit():
            v = int(text)
        else:
            raise ValueError(f"{name}: {item!r} is not a GPU index (an integer, as "
                             "nvidia-smi numbers them) or a GPU UUID (GPU-...)")
        if isinstance(v, int) and v < 0:
            raise ValueError(f"{name}: {v} is negative (nvidia-smi numbers GPUs from 0)")
        if v in out:
            raise ValueError(f"{name}: GPU {v} is listed twice")
        out.append(v)
    return tuple(out)


def _duration(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{name}: expected a duration like 2s or 500ms, got {value!r}")
    try:
        return parse_budget(value)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def parse_gpu_config(value: Any, *, where: str = "gpu") -> GpuConfig:
    """A target's `gpu:` value -> GpuConfig.  `where` names the key in error messages
    (e.g. `targets[2].gpu`).

    Accepted: None / "auto" (the default), false / "false" / "off", true / "on", or a mapping
    with `command` (str or list), `interval` (>= 0.1 s, default 2s), `timeout` (the
    watchdog: longer than the interval, default 10s), `first_timeout` (the watchdog until the
    first output, at least `timeout`, default 60s), `devices` (the server's GPUs:
    `parse_devices`; alone it leaves the mode auto)."""
    switch = parse_switch(value, where=where, keys=_GPU_KEYS,
                          example="command: nvidia-smi, interval: 2s, timeout: 10s, "
                                  "devices: [4, 5, 6, 7]",
                          short="command: ..., interval: ..., timeout: ..., devices: [...]")
    if isinstance(switch, str):
        return GpuConfig() if switch == "auto" else GpuConfig(mode=switch)
    value = switch
    devices = parse_devices(value["devices"], f"{where}.devices") if "devices" in value else ()
    if devices and not any(k in value for k in _STREAM_KEYS):
        return GpuConfig(devices=devices)    # devices alone: where it runs stays auto
    command: Any = value.get("command", "nvidia-smi")
    if isinstance(command, (list, tuple)):
        if not command or not all(isinstance(c, str) and c for c in command):
            raise ValueError(f"{where}.command: expected a non-empty list of strings, "
                             f"got {command!r}")
        command = shlex.join(command)
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"{where}.command: expected a command (a path or a command line), "
                         f"got {command!r}")
    try:
        if not shlex.split(command):
            raise ValueError("empty")
    except ValueError as e:
        raise ValueError(f"{where}.command: cannot split {command!r} into words ({e})") from None
    interval = _duration(value.get("interval", 2.0), f"{where}.interval")
    if interval < 0.1:
        raise ValueError(f"{where}.interval: at least 100ms, got {value.get('interval')!r}")
    timeout = _duration(value.get("timeout", 10.0), f"{where}.timeout")
    if timeout <= interval:
        raise ValueError(f"{where}.timeout: must be longer than the interval "
                         f"({fmt_duration(timeout)} <= {fmt_duration(interval)}): the watchdog "
                         "would kill nvidia-smi between two samples")
    first = _duration(value.get("first_timeout", max(FIRST_TIMEOUT, timeout)),
                      f"{where}.first_timeout")
    if first < timeout:
        raise ValueError(f"{where}.first_timeout: at least the timeout ({fmt_duration(timeout)})"
                         f", got {fmt_duration(first)}")
    return GpuConfig(mode="on", command=command.strip(), interval=interval, timeout=timeout,
                     devices=devices, first_timeout=first)


def plan_gpu(config: GpuConfig, source_kind: str, *,
             which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Where to run nvidia-smi for a target: "ssh" (over its connection), "local", or None.

    `source_kind` is `sources.source_kind(target)`: "ssh", "file", "command" or "stdin".
    auto: ssh -> "ssh" (a missing nvidia-smi there shows as a status, not an error); file ->
    "local" when the command is on PATH (a laptop tailing a copied log has no GPU to show);
    command / stdin -> None (the log may come from anywhere).  "on": "ssh" for ssh targets,
    "local" for everything else."""
    if config.mode == "off":
        return None
    if source_kind == "ssh":
        return "ssh"
    if config.mode == "on":
        return "local"
    if source_kind == "file":
        argv = config.argv
        return "local" if argv and which(argv[0]) else None
    return None


