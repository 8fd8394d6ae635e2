"""The alert router: machine events -> alerts -> per-sink delivery queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class AlertRouter:
    def __init__(self, config: Any, state_dir: Path) -> None:
        self.config = config
        self.state_dir = Path(state_dir)
        self._sent: dict[tuple[str, str], int] = {}
        self._failed: dict[str, int] = {}

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def reconfigure(self, config: Any) -> None:
        self.config = config

    def observe(self, runner: Any, events: list[Any]) -> None:
        pass

    def tick(self, now: float, runners: list[Any]) -> None:
        pass

    def sent_counts(self) -> dict[tuple[str, str], int]:
        return dict(self._sent)

    def failure_counts(self) -> dict[str, int]:
        return dict(self._failed)
