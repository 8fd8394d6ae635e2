"""Where a line comes from decides what it may mean (issue 29: log text is data).

Both engines can log what clients send (SGLang `--log-requests`: `Receive: obj=GenerateReqInput(
text='...')`; vLLM `--enable-log-requests`: `Received request ...`, `Request ... details:
prompt: '...'`), so a prompt holding `torch.OutOfMemoryError: CUDA out of memory` or `Uvicorn
running on http://elsewhere:80` is in the log, in the engine's own envelope.  Searching rules
anywhere in a line read it as the server's own words: a crash paged, a restart, a probe moved.

A pack says (data, `envelope:` and `user_content:` in rules/*.yaml):

* `envelope.prefix`: the engine's own line prefix (timestamp, process tag, logger name),
  matched at the start of the unwrapped line; the message starts where it ends (at 0 where it
  does not match: a raw stderr line, a traceback).  A group `logger` names the logger.
* `envelope.anchor`: the actions whose rules fire only at the position the engine prints them:
  their leftmost match begins at (or inside the envelope before) the message start, or after
  `envelope.lead` only (vLLM's logo before `version`).  Actions: restart, ready (a rule
  entering the ready phase), endpoint, stop, args.
* `user_content`: messages (matched at the message start) or loggers (`{logger: PATTERN}`,
  matched whole against the envelope's `logger`) whose lines carry what clients sent: such a
  line fires no rule at all (crash, restart, phase, endpoint, stats).

`Origin` is the pure check, built once per pack; a line's cost is a few substring tests unless
a user-content literal is in it (then one bounded regex), and an anchored rule's hit (a few
lines a startup) one more regex.
"""

from __future__ import annotations

from typing import Any

from . import bounded
from .pack import ANCHOR_ACTIONS, READY, Rule, RulePack, UserContent

__all__ = ["ANCHOR_ACTIONS", "Origin", "UserContent", "anchored"]

TIMEOUT = 0.02      # seconds one of these patterns may take on a line (bounded.match)


def anchored(rule: Rule, anchor: frozenset[str]) -> bool:
    """Whether `rule` may only fire at the message start (one of its actions is anchored)."""
    if not anchor:
        return False
    return bool((rule.restart and "restart" in anchor)
                or (rule.phase == READY and "ready" in anchor)
                or (rule.endpoint and "endpoint" in anchor)
                or (rule.stop and "stop" in anchor)
                or (rule.args and "args" in anchor))


class Origin:
    """A pack's envelope and user-content knowledge, compiled (no per-target state)."""

    def __init__(self, pack: RulePack) -> None:
        self.envelope = pack.envelope
        self.lead = pack.envelope_lead
        self.user = pack.user_content
        self.anchor = pack.anchor
        self.errors = 0                     # pattern timeouts (a hostile line)
        # the literal prefilter of every entry: a line holding none of them is not user content
        self._all_literal = all(u.literals is not None for u in self.user)
        self._literals = tuple(sorted({s for u in self.user for s in (u.literals or ())}))
        self._anchored: dict[int, bool] = {}

    @property
    def active(self) -> bool:
        return bool(self.user) or bool(self.anchor)

    def message_start(self, text: str) -> tuple[int, str]:
        """Where the message of `text` starts (after the engine's envelope), and the logger
        the envelope names ("" when none)."""
        if self.envelope is None:
            return 0, ""
        try:
            m = bounded.match(self.envelope, text, TIMEOUT)
        except TimeoutError:
            self.errors += 1
            return 0, ""
        if m is None:
            return 0, ""
        logger = m.groupdict().get("logger") or ""
        return m.end(), logger

    def user_content(self, text: str) -> bool:
        """Whether `text` (an unwrapped line) carries what a client sent."""
        if not self.user:
            return False
        if self._all_literal:
            for s in self._literals:        # a loop, not any(): this runs on many lines
                if s in text:
                    break
            else:
                return False
        start, logger = self.message_start(text)
        for u in self.user:
            if u.literals is not None:
                for s in u.literals:
                    if s in text:
                        break
                else:
                    continue
            try:
                if u.logger:           # compiled as (?:PATTERN)\Z: the whole name
                    if logger and bounded.match(u.regex, logger, TIMEOUT) is not None:
                        return True
                elif _match_at(u.regex, text, start) is not None:
                    return True
            except TimeoutError:
                self.errors += 1
                return True       # a line built to be slow is not the server's own
        return False

    def is_anchored(self, rule: Rule) -> bool:
        have = self._anchored.get(id(rule))
        if have is None:
            have = self._anchored[id(rule)] = anchored(rule, self.anchor)
        return have

    def at_position(self, text: str, match_start: int) -> bool:
        """Whether a match beginning at `match_start` is where the engine prints it: at the
        message start, inside the envelope before it, or after `lead` only."""
        start, _ = self.message_start(text)
        if match_start <= start:
            return True
        if self.lead is None:
            return False
        try:
            m = bounded.match(self.lead, text[start:match_start], TIMEOUT)
        except TimeoutError:
            self.errors += 1
            return False
        return m is not None and m.end() == match_start - start


def _match_at(rx: Any, text: str, pos: int) -> Any:
    """`rx` matched at `pos` of `text` (a pattern written for the message's start)."""
    return bounded.match(rx, text[pos:] if pos else text, TIMEOUT)
