"""What `logwatch watch` shows while it follows a log.

On a terminal, a live panel (rich): the phase, the shard bar k/N with rate and ETA, time
spent in each phase, the last log line.  Elsewhere (CI logs, `| tee`), plain lines: one per
phase change, progress every few seconds, and the crash with its root-cause line and excerpt.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from .follow import Follower
from .history import startup_eta
from .machine import CrashRetracted, Event, PhaseChanged, Progress, Restarted, Stalled
from .summary import fmt_duration

PROGRESS_EVERY = 5.0


def _eta_text(follower: Follower, now: float) -> str:
    pipe = follower.pipe
    if pipe is None:
        return ""
    eta = startup_eta(pipe.pack, pipe.state, now)
    return "" if math.isnan(eta) else f"ETA {fmt_duration(eta)}"


def _progress_text(follower: Follower, now: float) -> str:
    pipe = follower.pipe
    if pipe is None:
        return ""
    parts = []
    for name, p in pipe.state.progress.items():
        rate = f" {p.rate:.2f}/s" if p.rate else ""
        parts.append(f"{name} {p.current}/{p.total}{rate}")
    eta = _eta_text(follower, now)
    if eta:
        parts.append(eta)
    return ", ".join(parts)


class PlainDisplay:
    def __init__(self, target: str, out: TextIO = sys.stdout) -> None:
        self.target = target
        self.out = out
        self._last_progress = 0.0
        self._last_state = ""

    def _say(self, msg: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {msg}", file=self.out, flush=True)

    def start(self) -> None:
        self._say(f"watching {self.target}")

    def update(self, follower: Follower, events: list[Event], now: float) -> None:
        st = follower.status
        state = f"{'up' if st.up else 'down'}: {st.message}"
        if state != self._last_state:
            self._last_state = state
            self._say(f"source {state}")
        pipe = follower.pipe
        for ev in events:
            if isinstance(ev, Restarted):
                self._say(f"new startup (#{ev.epoch}): {ev.line[:160]}")
            elif isinstance(ev, PhaseChanged) and pipe is not None:
                took = pipe.state.durations().get(ev.old)
                extra = f" ({ev.old} took {fmt_duration(took)})" if took and ev.old != "waiting" else ""
                self._say(f"phase {ev.new}{extra}")
            elif isinstance(ev, Progress) and now - self._last_progress >= PROGRESS_EVERY:
                self._last_progress = now
                self._say(_progress_text(follower, now))
            elif isinstance(ev, CrashRetracted):
                self._say(f"the traceback was not fatal: still in {ev.phase}")
            elif isinstance(ev, Stalled):
                self._say(f"stalled: no new line for {fmt_duration(ev.silent_for)} in {ev.phase}")

    def finish(self, follower: Follower, outcome: str) -> None:
        pipe = follower.pipe
        st = pipe.state if pipe else None
        if st is not None and st.crash is not None:
            c = st.crash
            self._say(f"CRASHED: {c.reason} during {c.during}")
            print(f"  root cause (line {c.line_number}): {c.line}", file=self.out)
            if c.excerpt:
                print("  excerpt:", file=self.out)
                for ln in c.excerpt[-40:]:
                    print(f"    | {ln}", file=self.out)
        elif st is not None and st.phase == "ready":
            d = st.durations()
            slow = max(d, key=d.get) if d else None  # type: ignore[arg-type]
            took = sum(v for k, v in d.items() if k != "ready") if d else None
            self._say(f"READY{' in ' + fmt_duration(took) if took else ''}"
                      f"{f' (slowest phase: {slow} {fmt_duration(d[slow])})' if slow else ''}")
        else:
            self._say(outcome)
        self.out.flush()


class RichDisplay(PlainDisplay):
    """The live panel; falls back to plain lines for what is printed at the end."""

    def __init__(self, target: str, out: TextIO = sys.stdout) -> None:
        super().__init__(target, out)
        from rich.console import Console
        from rich.live import Live
        self.console = Console(file=out)
        self.live = Live(console=self.console, refresh_per_second=4, transient=True)
        self._follower: Follower | None = None

    def start(self) -> None:
        self.live.start()

    def update(self, follower: Follower, events: list[Event], now: float) -> None:
        self._follower = follower
        for ev in events:  # keep a scrollback of the milestones above the panel
            if isinstance(ev, PhaseChanged):
                self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] phase "
                                        f"[bold]{ev.new}[/]")
            elif isinstance(ev, Restarted):
                self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] new startup #{ev.epoch}")
        self.live.update(self._render(follower, now))

    def _render(self, follower: Follower, now: float):  # type: ignore[no-untyped-def]
        from rich.markup import escape
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        pipe = follower.pipe
        st = pipe.state if pipe else None
        phase = st.phase if st else "waiting"
        colour = {"ready": "green", "crashed": "red", "stopped": "yellow"}.get(phase, "cyan")
        t.add_row("target", escape(self.target))
        t.add_row("engine", pipe.pack.name if pipe else "(detecting)")
        entered = st.phase_entered if st else None
        since = f"  ({fmt_duration(now - entered.at)})" if entered else ""
        t.add_row("phase", f"[{colour}]{phase}[/]{since}")
        shards = st.progress.get("shards") if st else None
        if shards and shards.total:
            bar = ProgressBar(total=shards.total, completed=shards.current, width=30)
            rate = f"{shards.rate:.2f} shards/s" if shards.rate else ""
            g = Table.grid(padding=(0, 1))
            g.add_row(bar, f"{shards.current}/{shards.total}", rate, _eta_text(follower, now))
            t.add_row("shards", g)
        other = [f"{n} {p.current}/{p.total}" for n, p in (st.progress.items() if st else [])
                 if n != "shards"]
        if other:
            t.add_row("progress", ", ".join(other))
        if st:
            d = st.durations()
            if d:
                t.add_row("phases", "  ".join(f"{k} {fmt_duration(v)}" for k, v in d.items()))
        src = follower.status
        t.add_row("source", ("[green]up[/] " if src.up else "[yellow]down[/] ") + escape(src.message))
        t.add_row("last line", escape(follower.last_line[:200]))
        return t

    def finish(self, follower: Follower, outcome: str) -> None:
        self.live.stop()
        super().finish(follower, outcome)


def make_display(target: str, out: TextIO = sys.stdout) -> PlainDisplay:
    if out.isatty():
        try:
            return RichDisplay(target, out)
        except ImportError:  # pragma: no cover - rich is a dependency
            pass
    return PlainDisplay(target, out)
