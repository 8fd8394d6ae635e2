"""Sources: where a target's log bytes come from, and nothing else (what is sampled beside
the log, GPUs and the server's endpoint, is `telemetry/`).

TARGET forms (DESIGN.md): a local path, `ssh://[user@]host[:port]/absolute/path`, `-` for
stdin, and `cmd:COMMAND` for a command whose output is the log (`cmd:docker logs -f NAME`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import (
    Data, FileIdentity, Opened, Position, Skipped, Source, SourceError, SourceEvent, SourceState,
    StartLocator,
)
from .cursor import ROTATE_WAIT

if TYPE_CHECKING:
    from .command import CommandSource, StdinSource
    from .local import LocalFileSource
    from .ssh import SSHFileSource, SSHOptions, SSHPool

# imported when first used: `replay` reaches this package through the config (`source_kind`)
# and needs none of them (asyncssh alone is a third of replay's start-up)
_LAZY = {"CommandSource": "command", "StdinSource": "command", "LocalFileSource": "local",
         "SSHFileSource": "ssh", "SSHOptions": "ssh", "SSHPool": "ssh"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)

__all__ = ["Data", "FileIdentity", "Opened", "Position", "Skipped", "Source", "SourceError",
           "SourceEvent", "SourceState", "StartLocator", "make_source", "source_kind"]


def source_kind(target: str) -> str:
    if target == "-":
        return "stdin"
    if target.startswith("ssh://"):
        return "ssh"
    if target.startswith("cmd:"):
        return "command"
    return "file"


def make_source(target: str, *, locator: StartLocator | None = None, start: Position | None = None,
                ssh: dict[str, Any] | SSHOptions | None = None, pool: SSHPool | None = None,
                poll: bool = False, name: str | None = None, batch_interval: float = 0.0,
                rotate_wait: float = ROTATE_WAIT, wait_for_dir: bool = True) -> Source:
    """Build the source for a TARGET string.  `locator` finds the latest startup on first attach
    (without one, a log met for the first time is read from its start).  `wait_for_dir`: an
    ssh:// log's missing directory is waited for (False: refused at once, `watch` without
    --wait)."""
    from .command import CommandSource, StdinSource
    from .local import LocalFileSource
    from .ssh import SSHFileSource, SSHOptions
    kind = source_kind(target)
    if kind == "stdin":
        return StdinSource()
    if kind == "command":
        cmd = target[len("cmd:"):].strip()
        if not cmd:
            raise SourceError("cmd: needs a command, e.g. cmd:docker logs -f sglang")
        return CommandSource(cmd, name=name, locator=locator, start=start)
    if kind == "ssh":
        opts = ssh if isinstance(ssh, SSHOptions) else SSHOptions.from_dict(ssh)
        return SSHFileSource(target, options=opts, start=start, locator=locator, pool=pool,
                             name=name, rotate_wait=rotate_wait, wait_for_dir=wait_for_dir)
    finder = locator.in_file if locator is not None else None
    return LocalFileSource(target, start=start, find_start=finder, use_inotify=not poll,
                           name=name, batch_interval=batch_interval, rotate_wait=rotate_wait)
