"""GPU telemetry beside the log: one long-running `nvidia-smi --query-gpu` per host (issue 14).

One job per file; `from logwatch.telemetry.gpu import X` is the import path:

* `query.py`: the fields asked (`FULL_FIELDS`, `MINIMAL_FIELDS`), their canonical names, the
  command's arguments, a refused field.
* `parse.py` (pure): `GpuCsvParser` reads `--format=csv,nounits` output by the header's names
  into `GpuSnapshot`s; garbage is counted, never raised.
* `sample.py` (pure): `GpuSample`, `GpuSnapshot`, the clock-event bits, the learned idle power.
* `summary.py`: `gpu_summary`, the watch panel's line.
* `scope.py` (pure): `GpuScope`, which of the host's GPUs are the server's; `log_named`, the
  GPUs a log names (NCCL's) as nvidia-smi's indexes.
* `preflight.py`: the GPUs that held memory before a launch, in words.
* `config.py`: a target's `gpu:` value (`parse_gpu_config`) and where it runs (`plan_gpu`).
* `proc.py`: nvidia-smi as a local child or an SSH session.
* `run.py`: one run read under the watchdog, and what its end means (`classify_run`).
* `stream.py`: `GpuStream`, one process per host kept running; `streams.py`: `GpuStreams`,
  one stream per host shared by its targets.

The contract is written down in docs/architecture.md, section "GPU telemetry".
"""

from __future__ import annotations

from .config import GpuConfig, parse_devices, parse_gpu_config, plan_gpu
from .parse import ABSENT_VALUES, GpuCsvParser, host_time, parse_csv, sample_from_row
from .preflight import PREFLIGHT_HELD, preflight_held, preflight_note, preflight_text
from .query import FULL_FIELDS, MINIMAL_FIELDS, canonical_field, invalid_field, query_args
from .scope import ROSE, GpuScope, log_named
from .run import (
    STATUS_HUNG, STATUS_MISSING, STATUS_NO_DRIVER, STATUS_NO_GPUS, STATUS_WEDGED, RunEnd,
    RunVerdict,
    classify_run, classify_start,
)
from .sample import (
    IDLE_UTIL, POWER_CAP_REASONS, THERMAL_REASONS, THROTTLE_BITS, THROTTLE_REASONS, GpuSample,
    GpuSnapshot, decode_throttle, gone_gpus, learn_idle,
)
from .stream import HISTORY, SNAPSHOTS, GpuCounters, GpuStream
from .streams import GpuStreams
from .summary import gpu_summary

__all__ = [
    "ABSENT_VALUES", "FULL_FIELDS", "HISTORY", "IDLE_UTIL", "MINIMAL_FIELDS", "POWER_CAP_REASONS",
    "PREFLIGHT_HELD", "SNAPSHOTS", "STATUS_HUNG", "STATUS_MISSING", "STATUS_NO_DRIVER",
    "STATUS_NO_GPUS", "STATUS_WEDGED", "THERMAL_REASONS", "THROTTLE_BITS", "THROTTLE_REASONS",
    "GpuConfig", "GpuCounters", "GpuScope", "ROSE", "parse_devices", "GpuCsvParser", "GpuSample", "GpuSnapshot", "GpuStream",
    "GpuStreams", "RunEnd", "RunVerdict", "canonical_field", "classify_run", "classify_start",
    "decode_throttle",
    "gone_gpus", "gpu_summary", "host_time", "invalid_field", "learn_idle", "log_named", "parse_csv",
    "parse_gpu_config",
    "plan_gpu", "preflight_held", "preflight_note", "preflight_text", "query_args",
    "sample_from_row",
]
