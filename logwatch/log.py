"""The daemon's own logs: structlog, key=value on a terminal, JSON lines otherwise."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import structlog

# structlog is imported on first use: it pulls in rich (~0.1 s), which `replay` and `rules`
# never log through


class _Stderr:
    """`sys.stderr` as it is at each write, not as it was at `setup`: while `watch`'s live
    panel runs, rich puts its own stderr there, which prints a line above the panel.  A
    record written to the stderr of setup's time lands inside the panel instead, and the
    panel's next redraw, which erases the lines it wrote, erases the wrong ones: the panel's
    top rows are left behind on the screen (issue 32: at an SSH reconnect, "gpu: connection
    lost")."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


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
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def get(name: str) -> structlog.typing.FilteringBoundLogger:
    import structlog
    return structlog.get_logger(name)
