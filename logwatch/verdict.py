"""Exit codes and verdicts: one registry for what every command's exit status means, and one
crash sentence.

Why one place: the codes are an interface (`logwatch watch ... && run_benchmark`, CI jobs,
scripts reading `$?`), and they had been written out three times (cli, watch, notify) and
the crash said five ways.  `Exit` is every status the CLI returns; the README's table is
`exit_table()` (tests/test_verdict.py fails when they differ).  `Verdict` is `watch`'s
outcome (a code and its sentence), and `crash_text` is the sentence of a crash wherever one
is shown: watch, replay, the terminal, the alert summary.  `ready_notes` is what a ready
sentence adds (a follower node's launch, a ready said by the endpoint), wherever it is said.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Iterable

from .units import fmt_duration


class Exit(IntEnum):
    """Every exit status of `logwatch` (README "Exit codes")."""

    OK = 0
    FAILED = 1
    USAGE = 2
    TIMEOUT = 3
    INTERRUPTED = 130       # Ctrl-C (SIGINT), as shells report it
    PIPE_CLOSED = 141       # the output's reader went away (SIGPIPE, as shells report it)

    @property
    def meaning(self) -> str:
        """What the status says, for the README's table and `--help`."""
        return _MEANING[self]

    @property
    def kind(self) -> str:
        """`watch`'s verdict with this status as an alert kind (`--notify`)."""
        return _KIND[self]


_MEANING: dict[Exit, str] = {
    Exit.OK: "`watch`: ready (every target; with `--serve`, Ctrl-C after ready); every other "
             "command: done (`replay` read every file, `status` got an answer, `run --check` "
             "found the config valid)",
    Exit.FAILED: "`watch`: crashed or stopped (as soon as one target did, naming it); "
                 "`alerts test`: a sink did not take the test alert; `history` / `compare`: "
                 "nothing recorded or nothing to compare",
    Exit.USAGE: "a usage or configuration error, one line naming file and key (bad target, "
                "refused host key, unreadable file or pack, a daemon `status` cannot ask, an "
                "output that cannot be written: `> /dev/full`)",
    Exit.TIMEOUT: "`watch`: timed out (`--timeout`) or stalled (a phase silent for twice its "
                  "budget, or silent when watch attached)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C; for `watch` also SIGTERM, SIGHUP) before a "
                      "verdict; the summary (and the `--json` object) is printed first",
    Exit.PIPE_CLOSED: "the reader of the output went away (piped into `head -3`): stopped "
                      "there, no verdict (0 would say ready), as a shell reports SIGPIPE",
}

_KIND: dict[Exit, str] = {
    Exit.OK: "ready", Exit.FAILED: "crashed", Exit.USAGE: "error", Exit.TIMEOUT: "stalled",
    Exit.INTERRUPTED: "interrupted", Exit.PIPE_CLOSED: "interrupted",
}


def exit_table() -> str:
    """The README's "Exit codes" table, generated from `Exit`."""
    rows = ["| status | name | meaning |", "|---|---|---|"]
    rows += [f"| {e.value} | `{e.name}` | {e.meaning} |" for e in Exit]
    return "\n".join(rows)


@dataclass(frozen=True)
class Verdict:
    """A launch's outcome: the exit status and its sentence (`ready`, `crashed: cuda_oom`,
    `timed out after 20m: ...`); `target` names the one that decided it when several were
    watched."""

    code: Exit
    text: str
    target: str | None = None

    @property
    def kind(self) -> str:
        """As an alert kind: ready, crashed, stopped, stalled, timeout, error, interrupted."""
        if self.code == Exit.FAILED and "stopped" in self.text:
            return "stopped"
        if self.code == Exit.TIMEOUT and "timed out" in self.text:
            return "timeout"
        return self.code.kind


# a multi-node launch's follower node (machine/follower.py): ready, with no server of its own
FOLLOWER = "a follower node: the head node serves"
# a ready said by the server's endpoint where the log never said it (machine/startup.py
# `endpoint_answers`): the machine's ready "line" begins with it, in parentheses
BY_ENDPOINT = "no ready line in the log; the endpoint answers"


def ready_notes(ready_line: str | None, follower: bool, degraded: str | None = None) -> list[str]:
    """What the ready sentence adds: a follower node's, ready by the endpoint, a part of the
    server that failed while it went on (`State.degraded`: SGLang's PD bootstrap server)."""
    notes = [FOLLOWER] if follower else []
    if degraded:
        notes.append(degraded)
    if (ready_line or "").startswith(f"({BY_ENDPOINT}"):
        notes.append(BY_ENDPOINT)
    return notes


def rank_notes(rank: str | None, first: str | None = None) -> list[str]:
    """What a crash sentence says of its rank (`Crash.named_rank`, `Crash.printed_first`):
    `TP3 first`; where the root-cause line is another rank's than the first that printed,
    both, the root cause's first (on-call goes to the rank named: its GPU, its node):
    `root cause on TP5; TP3 printed first`.  One function for the alert, `watch` and
    `/api/status`, so the three name the same rank."""
    if not rank:
        return []
    return [f"root cause on {rank}", f"{first} printed first"] if first else [f"{rank} first"]


def crash_text(reason: str | None, during: str | None = None, after: float | None = None,
               notes: Iterable[str] = (), replica: str = "", startup: str = "") -> str:
    """The one crash sentence: `crashed: cuda_oom during cuda_graph after 6m12s (TP3 first)`.
    Each part is left out when unknown; `notes` (rank first, the preflight, the endpoint
    still answering) go in one parenthesis.  A data-parallel `replica` that crashed ahead of
    the `startup`'s phase (the slowest replica's, where its phases line ends) is named with
    its phase: `crashed: cuda_oom during cuda_graph in DP2 after 40s (the slowest replica
    still in loading_shards)` (before, `during cuda_graph` beside phases that never reached
    it); its rank's `DP2 first` then says nothing more and is left out."""
    text = "crashed" + (f": {reason}" if reason else "")
    if during:
        text += f" during {during}" + (f" in {replica}" if replica else "")
    if after:
        text += f" after {fmt_duration(after)}"
    said = [n for n in notes if n and n not in (f"{replica} first", f"root cause on {replica}")]
    if replica and startup:
        said.insert(0, f"the slowest replica still in {startup}")
    if said:
        text += f" ({'; '.join(said)})"
    return text


def crash_sentence(crash: dict[str, Any], after: float | None = None,
                   notes: Iterable[str] = ()) -> str:
    """`crash_text` of a crash as `/api/status` has it (`Crash.to_json`): its replica ahead
    of the startup, or its process of several, where it has one, with the rank's `first`."""
    return crash_text(crash.get("reason"), crash.get("during"), after,
                      [*rank_notes(crash.get("rank"), crash.get("first_rank")), *notes],
                      crash_where(crash), crash.get("startup_phase") or "")


def crash_where(crash: dict[str, Any] | None) -> str:
    """What a crash's sentence names it in (a crash's JSON, `Crash.where`): its replica ahead
    of the startup, else the process of several in one stream that crashed (`llama-1`)."""
    return str((crash or {}).get("replica") or (crash or {}).get("proc") or "")


def replica_phase(crash: dict[str, Any] | None) -> str:
    """What the phases line adds for a crash ahead of the startup (a crash's JSON, as
    `/api/status` has it): `DP2 in cuda_graph`; "" for any other."""
    if not crash or not crash.get("replica"):
        return ""
    return f"{crash['replica']} in {crash.get('during')}"
