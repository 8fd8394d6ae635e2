"""What logwatch asks nvidia-smi, and the names it answers with.

One unknown field fails the whole query (exit 2), and drivers print some fields under a
newer name than the one asked (`clocks.sm` as `clocks.current.sm`): so the field sets, the
one canonical name per field, the command's arguments and the recognition of a refused
field are kept together here, apart from the parser that reads the answer.
"""

from __future__ import annotations

import re
from typing import Sequence


#: What we ask for.  `clocks_throttle_reasons.active` rather than its new name
#: `clocks_event_reasons.active`: drivers since R535 accept both (and print the new name, see
#: fixtures/gpu/h200/query-old-throttle-field.txt), older ones only the old one, so asking for
#: the old name keeps the full set valid on more drivers.  Both power limits: the enforced one
#: is what the power manager holds the board to, `power.limit` is the fallback where the
#: enforced one is not reported; `power.default_limit` is the TDP.  `pci.bus_id`: a GPU's
#: name that a container's processes share with the host (NCCL's `busId`; NVML's indexes
#: inside a container are its own, 0..N-1, telemetry/gpu/scope.py `log_named`).
FULL_FIELDS: tuple[str, ...] = (
    "timestamp", "index", "name", "uuid", "pci.bus_id",
    "power.draw", "enforced.power.limit", "power.limit", "power.default_limit",
    "utilization.gpu", "memory.used", "memory.total",
    "clocks.sm", "clocks.max.sm", "temperature.gpu", "clocks_throttle_reasons.active",
)

#: Asked after the driver rejected a field of FULL_FIELDS (one unknown field fails the whole
#: query with exit status 2): fields every driver of the last decade knows.
MINIMAL_FIELDS: tuple[str, ...] = (
    "index", "power.draw", "power.limit", "utilization.gpu", "memory.used", "memory.total",
)

#: Printed names (and accepted aliases) -> the one name the parser uses.
_CANONICAL: dict[str, str] = {
    "clocks.current.sm": "clocks.sm",
    "clocks.current.graphics": "clocks.gr",
    "clocks.current.memory": "clocks.mem",
    "clocks.current.video": "clocks.video",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.draw": "power.draw",
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
}

_HEADER_CELL_RE = re.compile(r"^([a-z][a-z0-9_.]*)(?:\s*\[([^\]]*)\])?$")
_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')


def canonical_field(name: str) -> str:
    """The parser's name for a field as asked or as printed (`clocks.current.sm [MHz]` and
    `clocks.sm` are both `clocks.sm`)."""
    m = _HEADER_CELL_RE.match(name.strip())
    base = m.group(1) if m else name.strip()
    return _CANONICAL.get(base, base)


def query_args(fields: Sequence[str], interval: float) -> list[str]:
    """nvidia-smi's arguments for a looping query.  `-l` takes whole seconds; anything else
    goes as `-lms` (milliseconds).  The header is kept (no `noheader`): columns are mapped by
    name, so a driver that prints another name or order is still read right."""
    loop = (["-l", str(int(interval))] if interval >= 1 and float(interval).is_integer()
            else ["-lms", str(max(1, int(round(interval * 1000))))])
    return ["--query-gpu=" + ",".join(fields), "--format=csv,nounits", *loop]


def invalid_field(output: str | bytes) -> str | None:
    """The field nvidia-smi refused (`Field "X" is not a valid field to query.`), if any."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    m = _INVALID_FIELD_RE.search(text)
    return m.group(1) if m else None


