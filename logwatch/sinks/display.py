"""What `logwatch watch` shows while it follows a log.

On a terminal, a live panel (rich): the phase, the shard bar k/N with rate and ETA, time
spent in each phase, the last log line.  Elsewhere (CI logs, `| tee`), plain lines: one per
phase change, progress every few seconds, and the crash with its root-cause line and excerpt.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import time
from typing import Any, TextIO

import regex

from ..machine import CrashRetracted, Event, PhaseChanged, Progress, Restarted, Stalled
from ..rules.pack import REGEX_FLAGS
from ..shown import visible, visible_out
from ..silence import SERVING, Resumed, phase_watts_text
from ..telemetry.gpu import preflight_note
from ..units import fmt_clock, fmt_duration
from ..verdict import crash_sentence, crash_text, crash_where, ready_notes, replica_phase
from ..view import TargetView, beside_now, gpu_activity, gpu_working, startup_seconds


def escape(text: str) -> str:
    """A rich cell's text: made visible (shown.py: RTL overrides, zero-width and control
    characters escaped), then rich's markup escaping."""
    from rich.markup import escape as markup
    return markup(visible(text))


PROGRESS_EVERY = 5.0
SERVING_EVERY = 30.0        # --serve: a serving line this often (plain output)


def eta_text(view: TargetView) -> str:
    """"ready in ~1m40s (from 3 earlier startups)"; "(rough)" without history."""
    eta = view.eta_seconds
    if math.isnan(eta) or view.phase == "ready":
        # (ready: nothing to wait for; a batch read at once ends there, and its progress
        # line said `ready in ~0.0s (rough)` beside the phase it was printed at)
        return ""
    n = view.eta_basis
    basis = f"from {n} earlier startup{'s' if n != 1 else ''}" if n else "rough"
    return f"ready in ~{fmt_duration(eta)} ({basis})"


def attach_note(view: TargetView, now: float, last: bool = False) -> str:
    """What `watch` says of a startup that had ended before it attached (history, not news)."""
    s = view.seen_at_attach
    assert s is not None
    reason = (view.crash or {}).get("reason") or s.reason   # the settled reason when known
    what = {"ready": "became ready", "stopped": "stopped"}.get(
        s.phase, f"crashed ({reason})" if reason else "crashed")
    out = f"the latest startup in this log {what} {fmt_duration(s.ago)} ago"
    if s.writer is not None:
        out += f"; pid {s.writer}, started since, writes the log: a relaunch"
    elif s.idle_since is not None and now - s.idle_since >= 60:
        out += f"; the log has been idle since {fmt_clock(s.idle_since, now)}"
    elif s.idle_since is not None:
        out += "; the log is still being written"
    return out + ("" if last else "; waiting for a new startup (--last: report it and exit)")


def quiet_note(view: TargetView, now: float) -> str:
    """While waiting: how long the log has been silent, and its last line."""
    assert view.last_line_at is not None
    return (f"no new line for {fmt_duration(now - view.last_line_at)}"
            f"{'; last: ' + view.last_line[:160] if view.last_line else ''}")


QUIET_EVERY = 60.0          # while nothing is written: a line a minute


def _progress_text(view: TargetView) -> str:
    parts = []
    for name, p in view.progress.items():
        rate = f" {p['rate']:.2f}/s" if p["rate"] else ""
        parts.append(f"{name} {p['current']}/{p['total']}{rate}")
    eta = eta_text(view)
    if eta:
        parts.append(eta)
    return ", ".join(parts)


def gpu_text(view: TargetView) -> str:
    """The GPU line of the panel: "GPU x8 250/600 W (42%) · util 97% · SM 1.4/2.0 GHz · not
    power-capped", or why there is none ("no nvidia-smi on host"); "" when gpu is off."""
    gpu = view.gpu
    if not gpu:
        return ""
    snap = gpu.get("snapshot")
    if gpu.get("up") and snap and snap.get("summary"):
        return str(snap["summary"])
    return str(gpu.get("status") or "starting")


def phase_gpu_text(view: TargetView, phase: str) -> str:
    """"loading_shards p50 129 W / max 130 W": the GPUs' power during a phase of this
    startup ("" without telemetry or samples)."""
    phases = (view.gpu or {}).get("phases") or {}
    key = SERVING if phase == "ready" else phase
    return phase_watts_text({key: phases[key]}) if key in phases else ""


def silence_text(view: TargetView, now: float) -> str:
    """"silent 30s in cuda_graph: GPU busy (691 W of 700 W, ...): slow, not hung" while the
    log of a startup has been silent for half its stall budget or more; "" otherwise."""
    if view.stall_after is None or view.last_line_at is None or view.historic:
        return ""
    silent = now - view.last_line_at
    verdict = gpu_activity(view.gpu)
    if silent < view.stall_after / 2 or not verdict:
        return ""
    return f"silent {fmt_duration(silent)} in {view.phase}: {verdict}"


def phase_change_gpu_text(view: TargetView, ev: PhaseChanged) -> str:
    """At a phase change: "gpu: " the GPUs now, and their power in the phase just left."""
    now_text = gpu_text(view)
    if not now_text:
        return ""
    left = phase_gpu_text(view, ev.old) if ev.old != "waiting" else ""
    return f"gpu: {now_text}" + (f"; {left}" if left else "")


def stalled_text(ev: Stalled, view: TargetView) -> str:
    """The stall line: how long, where, and what the GPUs say about it."""
    verdict = gpu_activity(view.gpu)
    return f"stalled: no new line for {fmt_duration(ev.silent_for)} in {ev.phase}" + \
        (f"; {verdict}" if verdict else "")


def resumed_text(ev: Resumed) -> str:
    return (f"resumed: lines again after {fmt_duration(ev.silent_for)} of silence in "
            f"{ev.phase} (the stall is over)")


def probe_text(view: TargetView) -> str:
    """The endpoint line: what the server's own endpoint says beside the log."""
    pv = view.probe_verdict
    return pv.text if pv is not None else ""


def serving_text(view: TargetView) -> str:
    """`serving: 2,874 tok/s · running 31 · queued 0` (the latest stats line)."""
    st = view.stats
    parts = []
    if st.get("gen_throughput") is not None:
        parts.append(f"{st['gen_throughput']:,.0f} tok/s")
    for key, label in (("running_requests", "running"), ("queued_requests", "queued"),
                       ("token_usage", "KV")):
        if st.get(key) is not None:
            v = st[key]
            parts.append(f"{label} {v:.0%}" if key == "token_usage" else f"{label} {v:g}")
    return "serving: " + " · ".join(parts) if parts else ""


def left_span_seconds(view: TargetView, events: list[Event], i: int) -> float | None:
    """How long the span that `events[i]` (a PhaseChanged) left lasted: of its phase's spans
    on the main line, the one before those that later events of the same batch left (and
    the open one, when the phase is current again).  A batch holds many changes when a log
    is read at once (the attach's catch-up, stdin): before, each took the phase's latest
    span, `phase allocating (autotune took 2m31s)` for vLLM 0.34's first autotune of 44 s."""
    ev = events[i]
    assert isinstance(ev, PhaseChanged)
    if ev.epoch != view.epoch:
        return None          # a startup before the view's: its spans are gone
    spans = [sp for sp in view.timeline if not sp.beside and sp.phase == ev.old]
    after = sum(1 for e in events[i + 1:] if isinstance(e, PhaseChanged) and e.old == ev.old
                and e.epoch == ev.epoch)
    if spans and spans[-1].open and view.phase == ev.old:
        after += 1
    if after < len(spans):
        return spans[-1 - after].seconds
    return view.durations.get(ev.old)


class PlainDisplay:
    def __init__(self, target: str, out: TextIO = sys.stdout, prefix: str = "") -> None:
        self.target = target
        self.out = visible_out(out)     # plain lines quote the log: shown made visible
        self.prefix = prefix      # several targets on one screen: whose line it is
        self._last_progress = 0.0
        self._last_state = ""
        self._quiet_said = 0.0
        self._probe_said = ""
        self._lag_said = ""
        self._serving_said = 0.0
        self._beside: set[str] = set()    # phases running beside the main line, said
        self._gpu_said = 0.0
        self._gpu_down_said = ""          # why there are no GPU figures, said at a phase
        self._engine = ""                 # the pack reading the log, said when it changes

    def _say(self, msg: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {self.prefix}{msg}", file=self.out, flush=True)

    def note(self, msg: str) -> None:
        """A line of its own (above the panel when there is one)."""
        self._say(msg)

    def _quiet(self, view: TargetView, now: float) -> None:
        """A line every QUIET_EVERY seconds while the log is silent."""
        at = view.last_line_at
        if at is None or now - at < QUIET_EVERY:
            self._quiet_said = 0.0
            return
        if (view.historic or view.silent_since is not None) and not self._quiet_said:
            # the attach note (or the stall's and "silent since"'s lines) says how long the
            # log has been idle
            self._quiet_said = now
            return
        if now - max(self._quiet_said, at) >= QUIET_EVERY:
            self._quiet_said = now
            self.note(quiet_note(view, now))

    def _silence(self, view: TargetView, now: float) -> None:
        """During a silence: the GPUs' verdict every stall_after / 2 (from half of it on)."""
        text = silence_text(view, now)
        if not text or view.stall_after is None or view.last_line_at is None:
            return
        if now - max(self._gpu_said, view.last_line_at) >= view.stall_after / 2:
            self._gpu_said = now
            self._say(f"gpu: {text}")

    def _phase_gpu(self, view: TargetView, ev: PhaseChanged) -> None:
        line = phase_change_gpu_text(view, ev)
        if not line:
            return
        down = not (view.gpu or {}).get("up")
        if down and line == self._gpu_down_said:
            return      # "gpu: no nvidia-smi on host" once, not again at every phase
        self._gpu_down_said = line if down else ""
        self._say(line)

    def _engine_change(self, view: TargetView) -> None:
        """A line when another engine's pack reads the log now (`rules: auto`, a relaunch of
        another engine into the same path): before its new startup's line."""
        if self._engine == "auto" and view.engine and view.engine != "auto":
            # decided late: the first lines were not sure (a wrapper's, none of an engine's)
            self.note(f"engine: read by {view.engine}'s rules (--rules PACK to choose)")
        elif self._engine and view.engine and view.engine != self._engine:
            self.note(f"engine: {view.engine} writes the log now (was {self._engine}): "
                      "read by its rules")
        self._engine = view.engine or self._engine

    def start(self) -> None:
        self._say(f"watching {self.target}")

    def update(self, view: TargetView, events: list[Event], now: float) -> None:
        state = f"{'up' if view.source_up else 'down'}: {view.source_message}"
        if state != self._last_state and not view.source_fatal:  # a fatal one: said at the end
            self._last_state = state
            self._say(f"source {state}")
        self._engine_change(view)
        for i, ev in enumerate(events):
            if isinstance(ev, Restarted):
                self._say(f"new startup (#{ev.epoch}): {ev.line[:160]}")
            elif isinstance(ev, PhaseChanged):
                took = left_span_seconds(view, events, i)
                extra = f" ({ev.old} took {fmt_duration(took)})" if took and ev.old != "waiting" else ""
                self._say(f"phase {ev.new}{extra}")
                self._phase_gpu(view, ev)
            elif isinstance(ev, Progress) and now - self._last_progress >= PROGRESS_EVERY:
                self._last_progress = now
                self._say(_progress_text(view))
            elif isinstance(ev, CrashRetracted):
                self._say(f"the traceback was not fatal: still in {ev.phase}")
            elif isinstance(ev, Stalled):
                self._say(stalled_text(ev, view))
                self._gpu_said = self._quiet_said = now   # (it says how long: not twice)
            elif isinstance(ev, Resumed):
                self._say(resumed_text(ev))
        self._beside_spans(view)
        self._quiet(view, now)
        self._silence(view, now)
        self._probe_and_ranks(view, now)

    def _beside_spans(self, view: TargetView) -> None:
        """A line when a span begins or ends beside the main line (SGLang's overlap mode:
        `loading_shards beside cuda_graph`), with how long it ran."""
        now_beside = {sp.phase for sp in beside_now(view)}
        for p in sorted(now_beside - self._beside):
            self._say(f"{p} beside {view.phase}")
        for p in sorted(self._beside - now_beside):
            took = next((sp.seconds for sp in reversed(view.timeline)
                         if sp.beside and sp.phase == p), None)
            self._say(f"{p} beside: done" + (f" ({fmt_duration(took)})" if took else ""))
        self._beside = now_beside

    def _probe_and_ranks(self, view: TargetView, now: float) -> None:
        """A line when the endpoint's answer changes (up / down / ready but not answering),
        when a rank falls behind, and every SERVING_EVERY while it serves."""
        pv = view.probe_verdict
        if pv is not None and view.probe and view.probe.get("up") is not None and \
                (view.probe["up"] or view.phase == "ready"):
            key = f"{view.probe.get('up')}|{pv.ready_not_answering}"
            if key != self._probe_said:
                self._probe_said = key
                self._say(f"endpoint: {pv.text}")
        lag = view.rank_lag.split(" still ")[0] if view.rank_lag else ""
        if lag != self._lag_said:
            self._lag_said = lag
            if lag:
                self._say(f"ranks: {view.rank_lag}")
        if view.phase == "ready" and not view.historic and \
                now - self._serving_said >= SERVING_EVERY and self._serving_said:
            text = serving_text(view)
            gpu = gpu_text(view)
            if text:
                self._say(text + (f" · {gpu}" if gpu else ""))
            self._serving_said = now
        elif view.phase == "ready" and not self._serving_said:
            self._serving_said = now

    def finish(self, view: TargetView, outcome: str) -> None:
        d = {k: v for k, v in view.durations.items() if k != "ready"}
        total = view.ready_in     # launch to ready (None: the log has no launch to count from)
        if view.historic:        # no new startup came: the old one was said at attach
            self._say(f"{outcome}; no new startup since logwatch attached")
            self.out.flush()
            return
        if view.crash is not None:
            c = view.crash     # after: launch -> crash, as the alert says (not the startup's time)
            said = crash_text(c["reason"], c["during"], view.crash_elapsed, (),
                              crash_where(c), c.get("startup_phase") or "")
            self._say("CRASHED" + said[len("crashed"):])
            if c.get("first_rank"):   # the root-cause line is another rank's
                print(f"  rank of the root cause: {c['rank']} ({c['first_rank']} printed first)",
                      file=self.out)
            elif c.get("rank"):
                print(f"  first rank to crash: {c['rank']}", file=self.out)
            print(f"  root cause (line {c['line_number']}): {c['line']}", file=self.out)
            held = preflight_note(view.gpu, c.get("reason"))
            if held:
                print(f"  gpu: {held}", file=self.out)
            if c["excerpt"]:
                print("  excerpt:", file=self.out)
                for ln in fold_ranks(c["excerpt"][-60:], view.rank_tags)[-40:]:
                    print(f"    | {ln}", file=self.out)
        elif view.phase == "ready" and view.status != "unreachable":  # deaf: not READY
            slow = max(d, key=d.get) if d else None  # type: ignore[arg-type]
            notes = ([f"slowest phase: {slow} {fmt_duration(d[slow])}"] if slow else []) + \
                ready_notes(view.ready_line, view.follower, view.degraded)
            self._say(f"READY{' in ' + fmt_duration(total) if total else ''}"
                      f"{' (' + '; '.join(notes) + ')' if notes else ''}"
                      f"{'; ' + outcome if outcome and outcome != 'ready' else ''}")
        else:
            self._say(outcome)
        for line in summary_block(view):
            print(f"  {line}", file=self.out)
        self.out.flush()


# a line's leading stamp or process tag (`[2025-10-06 10:00:05] `, `(Worker_ pid=81) `), which
# differs between ranks printing the same milestone
_ENVELOPE = re.compile(r"^\[[^\]]*\]\s*|^\([^)]*\)\s*")


@functools.lru_cache(maxsize=16)
def _rank_regexes(rank_tags: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(regex.compile(p, REGEX_FLAGS) for p in rank_tags)


def _untagged(line: str, rank_tags: tuple[str, ...]) -> str:
    """The line without its rank tag: the group `rank` of the pack's first `ranks:` pattern
    that matches it (the tags are engine knowledge, so they come from the pack)."""
    for rx in _rank_regexes(rank_tags):
        m = rx.match(line)
        if m is not None and m.group("rank"):
            return line[: m.start("rank")] + line[m.end("rank"):]
    return line


def fold_ranks(lines: list[str], rank_tags: tuple[str, ...] = ()) -> list[str]:
    """Consecutive lines that differ only in their prefix (time, the rank tag of the pack's
    `ranks:` patterns: the same milestone from every TP rank) shown once, with how many
    ranks printed it."""
    out: list[str] = []
    run_key, run_n, first = None, 0, ""
    for ln in lines:
        key = _ENVELOPE.sub("", _untagged(ln, rank_tags), count=1)
        if key and key == run_key:
            run_n += 1
            out[-1] = f"{first} (x{run_n} ranks)"
            continue
        run_key, run_n, first = key, 1, ln
        out.append(ln)
    return out


def summary_block(view: TargetView) -> list[str]:
    """What a person wants at the end: per-phase times, the total, shards, serving speed."""
    d = {k: v for k, v in view.durations.items() if k != "ready"}
    out = []
    ahead = replica_phase(view.crash) if view.phase == "crashed" else ""
    if d:     # (a replica that crashed ahead of them: where it was, as `replay` says)
        out.append("phases: " + " · ".join(f"{k} {fmt_duration(v)}" for k, v in d.items())
                   + (f" · crashed ({ahead})" if ahead else "")
                   + f"  (total {fmt_duration(startup_seconds(view) or 0.0)})")
    if view.shards and view.shards.total:
        out.append(f"shards: {view.shards.loaded}/{view.shards.total}")
    tps = view.stats.get("gen_throughput")
    if tps is not None and view.phase == "ready":
        out.append(f"serving: {tps:,.0f} tok/s")
    if view.vs_previous and view.phase == "ready":
        out.append(view.vs_previous)
    out += [f"advice: {a}" for a in view.advice]
    endpoint = probe_text(view)
    if endpoint and view.probe and view.probe.get("up") is not None and \
            (view.probe["up"] or view.phase == "ready"):
        out.append(f"endpoint: {endpoint}")   # (a server not up yet is not news)
    if view.rank_lag:
        out.append(f"ranks: {view.rank_lag}")
    power = phase_watts_text((view.gpu or {}).get("phases"))
    if power:
        out.append(f"gpu power: {power}")
    return out


class RichDisplay(PlainDisplay):
    """The live panel; falls back to plain lines for what is printed at the end."""

    def __init__(self, target: str, out: TextIO = sys.stdout) -> None:
        super().__init__(target, out)
        from rich.console import Console
        from rich.live import Live
        self.console = Console(file=out)
        self.live = Live(console=self.console, refresh_per_second=4, transient=True)

    def start(self) -> None:
        self.live.start()

    def note(self, msg: str) -> None:
        self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {escape(msg)}")

    def update(self, view: TargetView, events: list[Event], now: float) -> None:
        self._engine_change(view)
        for ev in events:  # keep a scrollback of the milestones above the panel
            if isinstance(ev, PhaseChanged):
                self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] phase "
                                        f"[bold]{ev.new}[/]")
                line = phase_change_gpu_text(view, ev)
                if line:
                    from rich.markup import escape
                    self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')} "
                                            f"{escape(line)}[/]")
            elif isinstance(ev, Restarted):
                self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] new startup #{ev.epoch}")
            elif isinstance(ev, (Stalled, Resumed)):
                from rich.markup import escape
                text = stalled_text(ev, view) if isinstance(ev, Stalled) else resumed_text(ev)
                if isinstance(ev, Stalled):
                    self._quiet_said = now
                self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] "
                                        f"[yellow]{escape(text)}[/]")
        self._quiet(view, now)
        self.live.update(self._render(view, now))

    def _render(self, view: TargetView, now: float):  # type: ignore[no-untyped-def]
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        phase = view.phase
        colour = {"ready": "green", "crashed": "red", "stopped": "yellow"}.get(phase, "cyan")
        t.add_row("target", escape(self.target))
        t.add_row("engine", "(detecting)" if view.engine == "auto" else view.engine)
        entered = view.phase_entered_at
        since = f"  ({fmt_duration(now - entered)})" if entered is not None else ""
        if view.historic:
            t.add_row("phase", "waiting for a new startup [dim](the last one: "
                      f"{escape(phase)} {fmt_duration(view.seen_at_attach.ago)} ago)[/]"
                      if view.seen_at_attach else "waiting for a new startup")
        else:
            beside = "".join(f"  [dim]+ {sp.phase} beside[/]" for sp in beside_now(view))
            t.add_row("phase", f"[{colour}]{phase}[/]{since}{beside}")
        shards, main = view.shards, view.primary_progress or ""
        if shards and shards.total:
            bar = ProgressBar(total=shards.total, completed=shards.loaded, width=30)
            rate = f"{shards.rate:.2f} {main}/s" if shards.rate else ""
            g = Table.grid(padding=(0, 1))
            g.add_row(bar, f"{shards.loaded}/{shards.total}", rate, eta_text(view))
            t.add_row(main, g)
        other = [f"{n} {p['current']}/{p['total']}" for n, p in view.progress.items()
                 if n != main]
        if other:
            t.add_row("progress", ", ".join(other))
        if view.durations:
            t.add_row("phases", "  ".join(f"{k} {fmt_duration(v)}"
                                          for k, v in view.durations.items()))
        t.add_row("source", ("[green]up[/] " if view.source_up else "[yellow]down[/] ")
                  + escape(view.source_message))
        gpu = gpu_text(view)
        if gpu:
            t.add_row("gpu", escape(gpu))
        silence = silence_text(view, now)
        if silence:
            colour = "green" if gpu_working(view.gpu) else "yellow"
            t.add_row("silence", f"[{colour}]{escape(silence)}[/]")
        power = phase_watts_text((view.gpu or {}).get("phases"))
        if power:
            t.add_row("gpu power", escape(power))
        endpoint = probe_text(view)
        if endpoint:
            t.add_row("endpoint", escape(endpoint))
        if view.rank_lag:
            t.add_row("ranks", f"[yellow]{escape(view.rank_lag)}[/]")
        if view.phase == "ready" and not view.historic and serving_text(view):
            # (waiting for a new startup: the old launch's figures are not shown as current)
            t.add_row("serving", escape(serving_text(view)[len("serving: "):]))
        ago = f" [dim]({fmt_duration(now - view.last_line_at)} ago)[/]" \
            if view.last_line_at is not None and now - view.last_line_at >= 10 else ""
        t.add_row("last line", escape(view.last_line[:200]) + ago)
        return t

    def finish(self, view: TargetView, outcome: str) -> None:
        self.live.stop()
        super().finish(view, outcome)


class _Child(PlainDisplay):
    """One target's part of a MultiDisplay: its milestones as prefixed lines (plain), or
    above the shared panel (a terminal); the verdict is the MultiDisplay's."""

    def __init__(self, parent: "MultiDisplay", target: str) -> None:
        super().__init__(target, parent.out, prefix=f"{target}: ")
        self.parent = parent

    def _say(self, msg: str) -> None:
        if self.parent.live is not None:
            self.parent.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] "
                                           f"[bold]{escape(self.target)}[/] {escape(msg)}")
            return
        super()._say(msg)

    def start(self) -> None:
        if self.parent.live is None:
            super().start()


class MultiDisplay:
    """`watch T1 T2 ...`: one row per target (a live table on a terminal), each target's
    milestones prefixed with its name, one verdict at the end."""

    def __init__(self, targets: list[str], out: TextIO = sys.stdout) -> None:
        self.targets = targets
        self.out = visible_out(out)
        self.live = None
        if live_terminal(out):
            try:
                from rich.console import Console
                from rich.live import Live
                self.live = Live(console=Console(file=out), refresh_per_second=4,
                                 transient=True)
            except ImportError:  # pragma: no cover - rich is a dependency
                self.live = None
        self.children = {t: _Child(self, t) for t in targets}

    def child(self, target: str) -> PlainDisplay:
        return self.children[target]

    def start(self) -> None:
        if self.live is not None:
            self.live.start()

    def refresh(self, views: list[TargetView], now: float) -> None:
        if self.live is None:
            return
        from rich.table import Table
        t = Table(box=None, padding=(0, 1))
        for col in ("target", "phase", "progress", "endpoint", "last line"):
            t.add_column(col, no_wrap=col != "last line", overflow="ellipsis")
        for v in views:
            colour = {"ready": "green", "crashed": "red", "stopped": "yellow"}.get(v.phase, "cyan")
            since = f" {fmt_duration(now - v.phase_entered_at)}" if v.phase_entered_at else ""
            t.add_row(escape(v.name), f"[{colour}]{v.phase}[/]{since}",
                      escape(_progress_text(v) or silence_text(v, now) or (v.rank_lag or "")),
                      escape(probe_text(v)), escape(v.last_line[:120]))
        self.live.update(t)

    def finish(self, views: list[TargetView], outcome: str) -> None:
        if self.live is not None:
            self.live.stop()
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {outcome.upper() if outcome.startswith('all ') else outcome}",
              file=self.out)
        for v in views:
            head = v.phase
            if v.historic and v.seen_at_attach is not None:
                # its last startup had ended before the attach (said then): not its state
                # now (before: "ready" and the idle server's "serving: 0 tok/s")
                print(f"  {v.name}: no new startup since logwatch attached (the last one: "
                      f"{v.phase}, {fmt_duration(v.seen_at_attach.ago)} before the attach)", file=self.out)
                continue
            if v.crash:
                c = v.crash
                head = crash_sentence(c, v.crash_elapsed)
            elif v.phase == "ready" and v.ready_in is not None:
                notes = ready_notes(v.ready_line, v.follower, v.degraded)
                head = f"ready in {fmt_duration(v.ready_in)}" + \
                    (f" ({'; '.join(notes)})" if notes else "")
            print(f"  {v.name}: {head}", file=self.out)
            if v.crash:
                print(f"    root cause (line {v.crash['line_number']}): {v.crash['line']}",
                      file=self.out)
            for line in summary_block(v):
                print(f"    {line}", file=self.out)
        self.out.flush()


def live_terminal(out: TextIO) -> bool:
    """A terminal that can redraw a panel: not a pipe, and not TERM=dumb / unknown (Emacs'
    shell, a CI runner's pseudo-terminal), where rich draws no panel: before, such a
    terminal showed the phase names alone, without the plain lines' watching / source /
    shards / ETA / quiet lines."""
    return out.isatty() and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


def make_display(target: str, out: TextIO = sys.stdout) -> PlainDisplay:
    if live_terminal(out):
        try:
            return RichDisplay(target, out)
        except ImportError:  # pragma: no cover - rich is a dependency
            pass
    return PlainDisplay(target, out)
