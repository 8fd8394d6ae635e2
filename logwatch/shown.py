"""Text shown to people, made safe once (issue 29: log text is data).

A log line (or a node's error message, a probe's answer) can hold characters that change
what a person sees rather than show themselves: an RTL override (U+202E) that reverses the
rest of a Slack title, zero-width spaces that hide a word, backspace / BEL / C1 controls and
escape sequences that rewrite a terminal line.  `visible` writes every such character as an
escape (`\\u202e`, `\\x08`): control characters (C0 but tab, DEL, C1), format characters
(bidi embeddings, overrides, isolates and marks, zero-width space / joiners, the BOM, soft
hyphen ...), line and paragraph separators, lone surrogates.  Text without them is returned
as it is (one regex search).

Every sink uses it, through one function each way the text leaves: `visible_all` on the
alert a sink is about to send (router.deliver: Slack, webhooks, Alertmanager, `watch
--notify`), on /api/status and /api/history (the page renders those), and on the view a
terminal display prints.  Slack's own escaping (`<!channel>`, forged links) still follows.
The machine keeps the raw text: it is data, only its display is escaped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import regex


# control characters (Cc) but tab and newline, format (Cf), line / paragraph separators
# (Zl, Zp) and surrogates (Cs); the second escapes newlines too
# A terminal's escape sequences, as a log captured from one holds them (`script`, tmux's
# pipe-pane, a docker TTY): a string sequence (OSC: a window title `ESC ] 0;title BEL`, a
# hyperlink; DCS, APC, PM, SOS; screen's and tmux's window name `ESC k name ESC \`) ended by
# BEL or ST within a line (4 KiB at most: a longer one keeps its text), a CSI sequence (colours,
# cursor moves), or a two-byte one (ESC E: NEL, ESC M ...).  Every reader that drops them
# compiles this one pattern (lines.py for log text, sources/command.py for a run's last
# words).  Before, an OSC sequence lost only its `ESC ]`: its payload stayed in the line
# ("0;title" before the record, its rules anchored at the start missing it).
TERMINAL_ESCAPES = (r"\x1b[\]P^_Xk][^\x07\x1b\r\n]{0,4096}(?:\x07|\x1b\\)"
                    r"|\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")

_HIDDEN = regex.compile(r"[^\P{Cc}\t\n]|[\p{Cf}\p{Zl}\p{Zp}\p{Cs}]")
_LINE_HIDDEN = regex.compile(r"[^\P{Cc}\t]|[\p{Cf}\p{Zl}\p{Zp}\p{Cs}]")


def _escape(m: Any) -> str:
    cp = ord(m.group())
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def visible(text: str, newlines: bool = True) -> str:
    """`text` with every control, format and separator character written as an escape
    (`\\u202e`); `newlines=False` escapes newlines too (a one-line field)."""
    rx = _HIDDEN if newlines else _LINE_HIDDEN
    if rx.search(text) is None:
        return text
    return rx.sub(_escape, text)


def visible_all(obj: Any) -> Any:
    """`visible` on every string in `obj` (dicts with their keys, lists, tuples, dataclasses:
    a new object where one changed; the same object where none did)."""
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, dict):
        out = {visible_all(k): visible_all(v) for k, v in obj.items()}
        same = all(k1 is k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(obj.items(), out.items()))
        return obj if same else out
    if isinstance(obj, (list, tuple)):
        items = [visible_all(v) for v in obj]
        if all(a is b for a, b in zip(obj, items)):
            return obj
        return type(obj)(items) if isinstance(obj, list) or type(obj) is tuple else obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            v = getattr(obj, f.name)
            w = visible_all(v)
            if w is not v:
                changes[f.name] = w
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


class VisibleOut:
    """A text stream that writes what it is given made visible (newlines and tabs kept):
    the terminal's plain output, whose every line may quote a log."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, s: str) -> int:
        self.out.write(visible(s))
        return len(s)

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return bool(self.out.isatty())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


def visible_out(out: Any) -> Any:
    """`out` wrapped in a VisibleOut (once)."""
    return out if isinstance(out, VisibleOut) else VisibleOut(out)
