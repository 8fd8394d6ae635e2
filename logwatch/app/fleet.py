"""`logwatch status -c CFG`: the daemon's fleet in the terminal, like `kubectl get`.

One row per target from the daemon's own `/api/status` (the same view the page shows), the
broken ones first: error, crashed, silent, stalled, unreachable, then the ones starting, then
waiting, then ready; within a group by name.  The listen address comes from the config (its
`listen`, with `${VAR:-default}` expanded); a config whose alert secrets are not set in this
shell still names its daemon (only `listen` is read).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .. import clock
from ..units import fmt_duration
from ..verdict import Exit
from .config import ConfigError, _listen, expand_env

# the order rows are shown in: what needs a person first
BAD = ("error", "crashed", "silent", "stalled", "unreachable")
NAME_MAX = 40       # a longer target name (an FQDN) is shortened in its middle
DETAIL_MIN = 24     # less room than this for DETAIL on a terminal: it goes on its own line
ORDER = {s: i for i, s in enumerate(BAD)}
WAITING_RANK, READY_RANK, STARTING_RANK = 90, 99, 50


def daemon_url(config_path: str) -> str:
    """http://HOST:PORT of the daemon the config describes (0.0.0.0 / :: -> 127.0.0.1)."""
    from ..yamlload import load_yaml
    try:
        text = Path(config_path).expanduser().read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(config_path, "", f"cannot read: {e.strerror}") from None
    doc = load_yaml(text)
    if not isinstance(doc, dict):
        raise ConfigError(config_path, "", "not a mapping (see deploy/logwatch.example.yaml)")
    listen = expand_env(doc.get("listen", "127.0.0.1:9105"), config_path, "listen")
    host, port = _listen(config_path, listen)
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def fetch_status(url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The daemon's /api/status; ValueError for whatever else answers there (another
    service on the port: a body past 64 MiB, JSON nested past the parser's depth, targets
    that are not objects), not a traceback."""
    with urllib.request.urlopen(url.rstrip("/") + "/api/status", timeout=timeout) as r:
        body = r.read(STATUS_MAX + 1)
    if len(body) > STATUS_MAX:
        raise ValueError("not logwatch's /api/status (an answer past 64 MiB)")
    try:
        doc = json.loads(body)
    except RecursionError:
        raise ValueError("not logwatch's /api/status (JSON nested too deep)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list) or \
            not all(isinstance(t, dict) for t in doc["targets"]):
        raise ValueError("not logwatch's /api/status")
    return doc


STATUS_MAX = 64 << 20


def rank(t: dict[str, Any]) -> int:
    status = str(t.get("status") or t.get("phase") or "")
    if status in ORDER:
        return ORDER[status]
    if status == "ready":
        return READY_RANK
    if status in ("waiting", "stopped"):
        return WAITING_RANK
    return STARTING_RANK


def row(t: dict[str, Any], now: float) -> list[str]:
    """NAME STATUS PROGRESS AGE DETAIL for one target of /api/status."""
    status = str(t.get("status") or t.get("phase") or "?")
    if status == "stalled" or status == "silent":
        status = f"{status} ({t.get('phase')})"
    sh = t.get("shards") or {}
    progress = f"{sh.get('loaded')}/{sh.get('total')} shards" if sh.get("total") else ""
    if t.get("phase") == "ready" and t.get("ready_in_seconds") is not None:
        progress = f"ready in {fmt_duration(t['ready_in_seconds'])}"
    elif t.get("eta_seconds") is not None and t.get("phase") not in ("ready", "waiting"):
        progress += (" · " if progress else "") + f"ETA {fmt_duration(t['eta_seconds'])}"
    at = t.get("last_line_at")
    age = fmt_duration(max(now - at, 0.0)) if isinstance(at, (int, float)) else "-"
    src = t.get("source_state") or {}
    crash = t.get("crash") or {}
    probe = t.get("probe") or {}
    if t.get("silent"):
        detail = t["silent"]
    elif src.get("error") or src.get("fatal"):
        detail = f"source: {src.get('message') or 'down'}"
    elif crash:
        # the crash sentence, less the word the status column says already
        text = crash.get("text") or f"{crash.get('reason')} during {crash.get('during')}"
        detail = str(text).removeprefix("crashed: ")
    elif status == "unreachable":
        detail = f"endpoint: {probe.get('verdict') or 'not answering'}"
    elif t.get("rank_lag"):
        detail = str(t["rank_lag"])
    elif t.get("phase") == "ready" and (t.get("stats") or {}).get("gen_throughput") is not None:
        detail = f"{t['stats']['gen_throughput']:,.0f} tok/s"
    elif not src.get("up"):
        detail = f"source: {src.get('message') or 'waiting'}"
    else:
        detail = ""
    return [str(t.get("name")), status, progress, age, detail]


def short_name(name: str, most: int = NAME_MAX) -> str:
    """`name` in at most `most` characters: its start and end (an FQDN's node and domain)."""
    if len(name) <= most:
        return name
    head = (most - 1) // 2
    return name[:head] + "…" + name[len(name) - (most - 1 - head):]


def short_names(names: list[str], most: int = NAME_MAX) -> list[str]:
    """Each name in at most `most` characters, the fleet's names still told apart: the
    domain the long ones share left out (`node-17.us-east-2.compute.internal` ->
    `node-17…`), else their middle cut (`short_name`), else their end.  Before, the middle
    cut alone printed `sglang-decode-node-…t-2.compute.internal` for node-17 (crashed) and
    node-18 (ready) alike (helper adv27 M7)."""
    long = [n for n in names if len(n) > most]
    if not long:
        return list(names)
    shared = _shared_domain(long)
    cuts = [lambda n: short_name(n[:len(n) - len(shared)] + "…", most) if shared else "",
            lambda n: short_name(n, most), lambda n: n[:most - 1] + "…"]
    for cut in cuts:
        out = [cut(n) if len(n) > most else n for n in names]
        if all(out) and len(set(out)) == len(set(names)):
            return out
    return [short_name(n, most) for n in names]


def _shared_domain(names: list[str]) -> str:
    """The end the names share from a `.` on (`.us-east-2.compute.internal`), "" for none
    or one name."""
    if len(names) < 2:
        return ""
    rev = os.path.commonprefix([n[::-1] for n in names])[::-1]
    dot = rev.find(".")
    return rev[dot:] if dot >= 0 and all(len(n) > len(rev[dot:]) for n in names) else ""


def fleet_table(doc: dict[str, Any], width: int | None = None) -> list[str]:
    """The table's lines: a header, one row per target (bad first), and a count line.

    `width` (a terminal's columns; None: no limit, as piped to a script): a row cut to it
    keeps its DETAIL, the why of a bad target: on its own indented line when the columns
    before it leave less than DETAIL_MIN; names past NAME_MAX shortened (one long name
    widened every row and cut every DETAIL off)."""
    now = float(doc.get("now") or clock.now())
    targets = sorted(doc["targets"], key=lambda t: (rank(t), str(t.get("name"))))
    rows = [["NAME", "STATUS", "PROGRESS", "LAST LINE", "DETAIL"]] + [row(t, now) for t in targets]
    if width is not None:            # a script's pipe keeps whole names (to grep)
        for r, name in zip(rows[1:], short_names([r[0] for r in rows[1:]])):
            r[0] = name
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines: list[str] = []
    for r in rows:
        head = "   ".join(r[i].ljust(widths[i]) for i in range(4)) + "   "
        lines.extend(_fit(head, r[4], width))
    counts: dict[str, int] = {}
    for t in targets:
        s = str(t.get("status") or t.get("phase"))
        counts[s] = counts.get(s, 0) + 1
    bad = sum(n for s, n in counts.items() if s in BAD)
    lines.append(f"{len(targets)} targets: " + ", ".join(
        f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: (ORDER.get(kv[0], 50), kv[0])))
        + (f"  ({bad} need a look)" if bad else ""))
    return lines


def _fit(head: str, detail: str, width: int | None) -> list[str]:
    """One row in `width` columns: DETAIL after the other columns, or below them."""
    line = (head + detail).rstrip()
    if width is None or len(line) <= width:
        return [line]
    if width - len(head) >= DETAIL_MIN:
        return [line[:width - 1] + "…"]
    out = [head[:width].rstrip()]
    room = max(width - 4, DETAIL_MIN)
    out += ["    " + detail[i:i + room] for i in range(0, len(detail), room)]
    return out


def terminal_width(out: Any) -> int | None:
    """A terminal's columns (COLUMNS first, as the shell sets it); None for a pipe: a
    script gets whole rows, whatever COLUMNS an interactive shell exported."""
    if not (hasattr(out, "isatty") and out.isatty()):
        return None
    cols = shutil.get_terminal_size((0, 0)).columns
    return cols if cols > 0 else None


def run_status(config_path: str | None, url: str | None, as_json: bool, out: Any,
               err: Any) -> int:
    """Exit 0 when the daemon answered (whatever its targets do), 2 when it could not be
    asked (the config unreadable, nothing listening)."""
    try:
        base = url or daemon_url(config_path or "")
    except ConfigError as e:
        print(f"logwatch: {e}", file=err)
        return Exit.USAGE
    try:
        doc = fetch_status(base)
    except (OSError, ValueError, urllib.error.URLError) as e:
        reason = getattr(e, "reason", None) or e
        print(f"logwatch: cannot ask the daemon at {base}/api/status: {reason} (is `logwatch run "
              f"-c {config_path or 'CONFIG'}` running?)", file=err)
        return Exit.USAGE
    if as_json:
        print(json.dumps(sorted(doc["targets"], key=lambda t: (rank(t), str(t.get("name")))),
                         ensure_ascii=False), file=out)
        return Exit.OK
    for line in fleet_table(doc, terminal_width(out)):
        print(line, file=out)
    return Exit.OK
