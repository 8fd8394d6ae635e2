"""GPU telemetry beside the log (issue 14): `from logwatch.telemetry.gpu import X` is the
import path.  Moved from sources/gpu.py (sources yield only log bytes); split into one file
per job in the next change."""

from __future__ import annotations

from .stream import *  # noqa: F401,F403
from .stream import IDLE_UTIL, __all__ as _all, learn_idle

__all__ = [*_all, "IDLE_UTIL", "learn_idle"]
