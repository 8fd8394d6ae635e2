"""The loop every source test reads a source through: `source.events()` consumed in a task.

test_local_source.Reader and test_ssh.Collector each wrote this loop and its views again;
what differs between them (how an error or the end is kept, what is checked per event) is
their `seen` and their own `_pump` around `pump`.
"""

from __future__ import annotations

from typing import Any

from logwatch.follow import Follower
from logwatch.sources.base import Opened, SourceState


class EventPump:
    """Keeps every event of `source` in order, hands each to `follower` (if any) as the
    daemon does, then to `seen` (a subclass's bookkeeping)."""

    def __init__(self, source: Any, follower: Follower | None = None) -> None:
        self.source = source
        self.follower = follower
        self.events: list[Any] = []

    async def pump(self) -> None:
        """Read the source to its end (or until it is closed)."""
        async for ev in self.source.events():
            self.events.append(ev)
            if self.follower is not None:
                self.follower.handle(ev)
            self.seen(ev)

    def seen(self, ev: Any) -> None:
        """Called with each event after it is kept: nothing here."""

    # views
    def states(self) -> list[SourceState]:
        return [e for e in self.events if isinstance(e, SourceState)]

    def opened(self) -> list[Opened]:
        return [e for e in self.events if isinstance(e, Opened)]
