"""The daemon's own logs: structlog, key=value on a terminal, JSON lines otherwise."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import structlog

# structlog is imported on first use: it pulls in rich (~0.1 s), which `replay` and `rules`
# never log through


def setup(level: str = "info", json: bool | None = None) -> None:
    import logging   # (here, not at the top: ~1.5 ms of every CLI start that never logs)

    import structlog
    # watchdog reports a harmless race (a watch removed while inotify was being read) at
    # ERROR through stdlib logging; nothing for an operator to act on
    logging.getLogger("watchdog").setLevel(logging.CRITICAL)
    if json is None:
        json = not sys.stderr.isatty()
    renderer = (structlog.processors.JSONRenderer() if json
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get(name: str) -> structlog.typing.FilteringBoundLogger:
    import structlog
    return structlog.get_logger(name)
