"""`GpuStreams`: one `GpuStream` per host, shared by every target of that host (the eight
targets of one node run one nvidia-smi), reference-counted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ... import log
from ...sources.ssh import SSHOptions, SSHPool, SSHTarget, default_pool
from .config import GpuConfig
from .stream import GpuStream

@dataclass
class _Entry:
    stream: GpuStream
    refs: int = 0
    config: GpuConfig = field(default_factory=GpuConfig)


class GpuStreams:
    """The registry: one `GpuStream` per host, shared by every target of that host.

    Keyed by 'local' or by `SSHPool.key(target, options)` (user, host, port, options: the
    same key that shares the SSH connection, so a stream runs on the connection its log
    targets use).  `acquire` starts the stream on first use; `release` stops it when the last
    target lets go.  The first target's config wins; a later, different one is logged."""

    def __init__(self, pool: SSHPool | None = None, **stream_kw: Any) -> None:
        self.pool = pool
        self._stream_kw = stream_kw
        self._entries: dict[Any, _Entry] = {}
        self.log = log.get("source.gpu")

    def key(self, ssh: tuple[SSHTarget, SSHOptions] | None) -> Any:
        if ssh is None:
            return "local"
        return ("ssh",) + SSHPool.key(*ssh)

    def acquire(self, config: GpuConfig,
                ssh: tuple[SSHTarget, SSHOptions] | None = None) -> GpuStream:
        """The host's stream (started if new), with one more reference.  Needs a running
        event loop.  `ssh`: the target and options of an ssh:// log; None: this machine."""
        key = self.key(ssh)
        config = config.stream        # the GPUs a target reads are its own (scope.py)
        entry = self._entries.get(key)
        if entry is None:
            pool = self.pool if self.pool is not None else (default_pool() if ssh else None)
            stream = GpuStream(config, ssh=ssh, pool=pool, **self._stream_kw)
            entry = self._entries[key] = _Entry(stream, 0, config)
            stream.start()
        elif config != entry.config:
            self.log.info("gpu: host already streams with another gpu config; sharing it",
                          host=entry.stream.host, using=entry.config.to_dict(),
                          asked=config.to_dict())
        entry.refs += 1
        return entry.stream

    async def release(self, stream: GpuStream) -> None:
        """One reference less; the last one stops the stream (and kills nvidia-smi)."""
        for key, entry in list(self._entries.items()):
            if entry.stream is stream:
                entry.refs -= 1
                if entry.refs <= 0:
                    del self._entries[key]
                    await stream.stop()
                return

    def refs(self, stream: GpuStream) -> int:
        return next((e.refs for e in self._entries.values() if e.stream is stream), 0)

    def streams(self) -> list[GpuStream]:
        return [e.stream for e in self._entries.values()]

    async def close(self) -> None:
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(e.stream.stop() for e in entries), return_exceptions=True)
