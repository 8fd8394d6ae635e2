"""Where to start reading a log met for the first time: the latest startup in it.

Not at its end (the watcher would know nothing about the server it joins) and not at byte 0
(every old crash in a week-long log would be reported again): at the physical line of the
last restart marker (`server_args=`, vLLM's version line), found with the same literal scan
as replay.  A log without any marker is read from its start.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from ..lines import Block, split_glued
from ..matcher import Matcher
from ..rulepack import RulePack


def restart_pack(packs: list[RulePack]) -> RulePack:
    """The restart markers of several packs in one (the latest startup under `--rules auto`,
    before the engine is known)."""
    rules = tuple(r for p in packs for r in p.rules if r.restart)
    return dataclasses.replace(packs[0], name="auto", rules=rules)


def restart_matcher(pack: RulePack) -> Matcher | None:
    rules = tuple(r for r in pack.rules if r.restart)
    if not rules:
        return None
    return Matcher(dataclasses.replace(pack, rules=rules))


class StartupFinder:
    """Fed a log from byte 0 in chunks, remembers the last restart-marker line."""

    def __init__(self, pack: RulePack) -> None:
        self.matcher = restart_matcher(pack)
        self.best = (0, 1)
        self.tail = b""
        self.offset = 0        # log offset of tail[0]
        self.line_number = 1   # line of tail[0]

    def feed(self, chunk: bytes) -> None:
        if self.matcher is None:
            return
        data = self.tail + chunk
        last = data.rfind(b"\n")
        if last < 0:
            if len(data) > 1 << 20:  # a megabyte without a newline: keep the end only
                self.offset += len(data) - (1 << 20)
                data = data[-(1 << 20):]
            self.tail = data
            return
        self._scan(data[: last + 1])
        self.tail = data[last + 1 :]

    def result(self) -> tuple[int, int]:
        if self.tail:
            self._scan(self.tail)
            self.tail = b""
        return self.best

    def _scan(self, data: bytes) -> None:
        assert self.matcher is not None
        block = Block(data, self.offset, self.line_number, 0.0)
        for hit in self.matcher.scan(block):
            line_start = data.rfind(b"\n", 0, hit.block_pos) + 1
            self.best = (self.offset + line_start, hit.line_number)
        self.line_number += block.newlines()
        self.offset += len(data)


def latest_startup(pack: RulePack, chunks: Iterable[bytes]) -> tuple[int, int]:
    """(byte offset, line number) of the line of the last restart marker, or (0, 1)."""
    finder = StartupFinder(pack)
    for chunk in chunks:
        finder.feed(chunk)
    return finder.result()


def latest_startup_in_file(pack: RulePack, path: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        return latest_startup(pack, iter(lambda: f.read(4 << 20), b""))


def is_restart_line(pack: RulePack, text: str) -> bool:
    """Does this (raw, possibly \\r-joined) line carry a restart marker?"""
    matcher = restart_matcher(pack)
    if matcher is None:
        return False
    for seg in text.replace("\r", "\n").split("\n"):
        for part in split_glued(seg):
            if matcher.match_line(part) is not None:
                return True
    return False
