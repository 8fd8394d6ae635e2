"""The `Attachment` protocol and what an attachment may read of its target (`LiveTarget`).

The order of the calls, from the target: `bind(target)` once (in its constructor, before
its first pipeline), `on_pipeline(pipe)` for each pipeline made (a pack chosen, a restored
state in it), `start()` when the target starts reading, then `on_events(events, now)` for
every batch of the machine's events (while catching up too: `target.catching_up` says so),
`caught_up(now)` once, when the bytes a first attach found in the log are through the rules
(catchup.py), `tick(now)` from the owner's ticker, `view(now)` whenever a sink reads the target (it must
change nothing: how often /metrics reads a target never changes what it shows), `key()`
for /metrics (anything that changes when the view may have), and `close()` once, when the
target stops (attachments close last-first: one that reads an earlier one, the ledger
reading the GPU's watts, closes while that one still has them).

An attachment that keeps something across a daemon restart names it `saved_as` (its key in
the target's checkpoint): `saved()` is written with each checkpoint, `resume(doc)` hears it
once, after `bind`, when the daemon starts again (the GPU scope: which GPUs are the server's).

Subclass `Attachment` for the defaults (each hook does nothing); any object with the same
methods is an attachment too (typing.Protocol; `saved_as` optional).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Protocol

from ...machine import Event
from ...pipeline import LogPipeline
from ...view import ViewPart

if TYPE_CHECKING:
    from ..config import TargetConfig


class LiveTarget(Protocol):
    """What an attachment reads of its target (app/target.py `Target`)."""

    name: str
    cfg: "TargetConfig"
    log: Any

    @property
    def pipe(self) -> LogPipeline | None: ...

    @property
    def catching_up(self) -> bool: ...

    def ended_at_attach(self, startup: str | None) -> bool: ...

    def probed(self, now: float, answers: bool, said: str) -> None:
        """A probe reported: where the server answers, the machine may take it for ready."""


class Attachment(Protocol):
    """One side feature of a live target (see the module docstring for the order)."""

    def bind(self, target: LiveTarget) -> None:
        """Once, before the target's first pipeline: the target it belongs to."""

    def on_pipeline(self, pipe: LogPipeline) -> None:
        """A pipeline was made for the target (its pack chosen)."""

    def start(self) -> None:
        """The target starts reading (a running event loop: tasks may start here)."""

    def on_events(self, events: list[Event], now: float) -> None:
        """A batch of the machine's events (new lines, or a tick's stall / settled crash)."""

    def caught_up(self, now: float) -> None:
        """What the log held at a first attach is read (its startups retimed by their stamps,
        `seen_at_attach` decided): the live part begins."""

    def tick(self, now: float) -> None:
        """The owner's ticker (every 0.25-0.5 s)."""

    def view(self, now: float) -> ViewPart | None:
        """Its piece of the target's view (None: nothing to add); no side effect."""

    def key(self) -> Hashable:
        """Changes whenever its view may have changed (/metrics renders again then)."""
        return None

    saved_as: str = ""      # its key in the target's checkpoint ("": it keeps nothing)

    def saved(self) -> dict[str, Any] | None:
        """What it keeps in the target's checkpoint (JSON; None: nothing now)."""
        return None

    def resume(self, doc: dict[str, Any]) -> None:
        """What `saved` gave before the daemon restarted (a dict of any shape: damage is
        its to refuse, never to raise)."""

    async def close(self) -> None:
        """The target stops: stop tasks, release what it holds, save what it keeps."""
