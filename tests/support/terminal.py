"""A terminal for tests of the live panel: a stream that says it is a tty, and `screen()`,
which plays what was written to it back as the rows a terminal would show.

Only what rich's `Live` writes is understood (CR, LF, cursor up / down / to a column, erase
in line, SGR and cursor-visibility codes ignored): enough to see a panel's rows left behind
on the screen, or a line that a redraw erased."""

from __future__ import annotations

import io
import re

_CSI = re.compile(r"\x1b\[(\??)([0-9;]*)([A-Za-z])")


class Tty(io.StringIO):
    """stdout and stderr of one terminal (both written to the same rows)."""

    def isatty(self) -> bool:
        return True

    def screen(self) -> list[str]:
        return screen(self.getvalue())


def screen(written: str) -> list[str]:
    """The rows on the screen after `written`, trailing blanks removed, empty rows at the
    end dropped."""
    rows: list[list[str]] = [[]]
    r = c = 0
    i = 0
    while i < len(written):
        m = _CSI.match(written, i)
        if m is not None:
            private, arg, cmd = m.groups()
            first = arg.split(";")[0]
            n = int(first) if first else None
            if not private:
                if cmd == "A":
                    r = max(0, r - (n or 1))
                elif cmd == "B":
                    r += n or 1
                elif cmd == "G":
                    c = (n or 1) - 1
                elif cmd == "K":
                    while len(rows) <= r:
                        rows.append([])
                    if (n or 0) == 2:
                        rows[r] = []
                    else:
                        del rows[r][c:]
            i = m.end()
            continue
        ch = written[i]
        i += 1
        if ch == "\n":
            r, c = r + 1, 0
        elif ch == "\r":
            c = 0
        else:
            while len(rows) <= r:
                rows.append([])
            row = rows[r]
            row.extend(" " * (c - len(row)))
            if c < len(row):
                row[c] = ch
            else:
                row.append(ch)
            c += 1
    out = ["".join(row).rstrip() for row in rows]
    while out and not out[-1]:
        out.pop()
    return out
