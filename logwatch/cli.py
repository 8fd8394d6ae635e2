"""The `logwatch` command line.

Exit codes are part of the interface (README): 0 ready / success, 1 crashed or stopped
(`watch`) or problems found, 2 usage or configuration error, 3 timed out or stalled.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import re
import stat
import sys
from typing import Any, Callable, Sequence

from . import __version__
from .app.replay import replay_file
from .logfile import DamagedLog, LogFileError, open_log
from .rules.pack import PackError, load_pack, shipped_pack_names
from .sinks.alerts.kinds import KIND_NAMES
from .units import parse_budget, parse_duration
from .sinks.summary import human, summary, timeline
from .verdict import Exit
from .view import pipeline_view

# what add_subparsers() returns: each subcommand below adds its own parser to it
Subparsers = argparse._SubParsersAction

MAIN_HELP = """\
Watch LLM inference servers (SGLang, vLLM, TensorRT-LLM) start up and serve, from their logs.

examples:
  logwatch watch ssh://gpu-node/root/server.log   follow a startup live until ready / crashed
  logwatch replay server.log                 what happened in a finished log
  logwatch replay --json --timeline *.log    one JSON object per file, phase timeline
  logwatch rules check                       validate the shipped rule packs
  logwatch rules check my-pack.yaml          validate your own pack (exit 2 if broken)
  logwatch rules test sglang server.log      which rule matched which line
  logwatch run -c logwatch.yaml              the daemon: many targets, /metrics, alerts
  logwatch status -c logwatch.yaml           its fleet in the terminal, broken targets first
  logwatch demo                              a simulated server, watched live
"""

RUN_HELP = """\
Run the daemon: every target of the config file followed at once, Prometheus metrics at
/metrics, a JSON status at /api/status and a status page at / (127.0.0.1:9105 by default).

  logwatch run -c /etc/logwatch/logwatch.yaml
  logwatch run -c logwatch.yaml --check       validate only (exit 2 with file and key path)

SIGHUP reloads the config and the rule packs (added targets start, removed ones stop, changed
ones restart from where they were); SIGTERM / SIGINT stop cleanly.  Positions, the startup
history and the alert state live in state_dir and survive restarts.
"""

WATCH_HELP = """\
Follow one log live until the server is ready or dead: the replacement for running
`ssh host "sleep 30 && tail -30 server.log"` by hand for ten minutes.

  logwatch watch /root/sglang-server.log
  logwatch watch ssh://root@gpu-node-1/root/sglang-server.log --timeout 30m
  logwatch watch 'cmd:docker logs -f sglang' --json

It starts at the latest startup in the log (not at its end, not at its first byte), shows
the phase, the shard bar with rate and ETA and the last line, and on a crash the reason and
the root-cause line with the traceback.

A startup that had already ended when watch started (the log's verdict was written before,
and more than a minute ago: judged from the file's idle time and the log's own clock) is
history, not news: watch says "the latest startup in this log became ready 23m ago; ...;
waiting for a new startup" and exits on the NEXT startup's verdict.  --last reports that
ended startup instead and exits.  While nothing is written, a line a minute says so.

Several TARGETs are one launch (the nodes of a multi-node TP/PP launch, prefill + decode):
one row each, one verdict: 0 when all are ready, 1 as soon as one crashed or stopped (named,
with when), 3 on a stall or timeout; --json prints one object per target, one per line.

  logwatch watch ssh://node-0/srv/sglang.log ssh://node-1/srv/sglang.log --timeout 40m

Ranks: the milestones each rank prints (TP0..TP7, DP/EP/PP, vLLM's Worker_TP3) are followed
per rank, and a rank that stays behind the others is named ("TP5 still in cuda_graph 4m
after the other 7 ranks finished it"); a crash says which rank failed first.

The server's own endpoint is probed where the log is (--probe; over the same SSH connection
for ssh://, as a direct-tcpip channel: no route to the port needed) at the address its log
printed, on its pack's paths (SGLang, vLLM, TensorRT-LLM: /health and /v1/models): the panel shows
"answering (200 /health, 200 /v1/models, 12 ms)" or "ready in log, not answering".

  logwatch watch ssh://gpu-1/srv/server.log --notify https://hooks.slack.com/services/...
  logwatch watch server.log --notify bell --serve

--notify sends one message at the verdict (a Slack webhook URL gets Slack's format, any other
URL the daemon's webhook JSON; `bell` rings the terminal); --serve keeps going after ready
(tok/s, running / queued, GPU) until Ctrl-C (exit 0) or a crash (exit 1).

Targets are checked first: scp-style host:/path gets "did you mean ssh://host/path?", and a
missing file exits 2 naming the nearest names in its directory (--wait waits for it).

exit status: 0 ready (all targets), 1 crashed or stopped, 3 timed out or stalled, 2 usage
error (bad target, refused host key, unreadable file), 130 interrupted (Ctrl-C, SIGTERM, SIGHUP; the summary
is printed first), 141 the output's reader went away first (`| head`).
"""

REPLAY_HELP = """\
Run finished logs through the rules as fast as possible and print the outcome: the phase the
server ended in (launching, downloading, loading_shards, allocating, autotune, cuda_graph,
ready, crashed, stopped), the crash reason and its root-cause line, shard counts, durations.

A FILE may be compressed as logrotate leaves rotated logs (gzip, bzip2, xz: told by its
first bytes, not its name); `-` reads stdin (kubectl logs POD | logwatch replay -).

  logwatch replay /var/log/sglang/server.log.3.gz
  zstd -dc server.log.1.zst | logwatch replay --json -

exit status: 0 when every file was read (whatever the servers did), 2 on a usage error or
an unreadable file (compressed data cut short: what it held is reported first).
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logwatch", description=MAIN_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"logwatch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_replay(sub)
    _add_history(sub)
    _add_status(sub)
    _add_compare(sub)
    _add_watch(sub)
    _add_run(sub)
    _add_demo(sub)
    _add_alerts(sub)
    _add_rules(sub)
    return p


def _add_replay(sub: Subparsers) -> None:
    r = sub.add_parser("replay", help="run finished logs through the rules",
                       description=REPLAY_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("files", nargs="+", metavar="FILE",
                   help="log files to read (gzip, bzip2, xz too; - for stdin)")
    r.add_argument("--rules", default="auto", metavar="PACK",
                   help="rule pack name (%s), a .yaml path, or auto (default: detect from "
                        "the first lines)" % ", ".join(shipped_pack_names()))
    r.add_argument("--json", action="store_true",
                   help="one JSON object per file, one per line (schema: README, `logwatch replay`)")
    r.add_argument("--timeline", action="store_true",
                   help="each phase of the last startup with its start time and duration")
    r.set_defaults(func=cmd_replay)


def _add_history(sub: Subparsers) -> None:
    h = sub.add_parser("history", help="every startup in a log: flags, what changed, phases, tok/s",
                       description=HISTORY_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("files", nargs="*", metavar="FILE",
                   help="log files to read (gzip, bzip2, xz too; - for stdin)")
    h.add_argument("-c", "--config", metavar="CONFIG",
                   help="read the daemon's ledger (state_dir/ledger.sqlite3) instead of a log")
    h.add_argument("--target", metavar="NAME", help="with -c: the target whose startups to show")
    h.add_argument("--watched", metavar="TARGET",
                   help="the launches `logwatch watch TARGET` recorded (watch's own ledger in "
                        "$LOGWATCH_STATE_DIR; TARGET as it was given to watch)")
    h.add_argument("--rules", default="auto", metavar="PACK", help="rule pack (default: auto)")
    h.add_argument("--json", action="store_true",
                   help="one JSON object per startup per line (fields: README, the launch ledger)")
    h.set_defaults(func=cmd_history)


def _add_status(sub: Subparsers) -> None:
    st = sub.add_parser("status", help="the daemon's fleet in the terminal, bad targets first",
                        description="One row per target of the running daemon (its "
                        "/api/status), like `kubectl get`: error, crashed, silent, stalled, "
                        "unreachable first, then starting, waiting, ready.  exit status: 0 the "
                        "daemon answered, 2 it could not be asked.")
    st.add_argument("-c", "--config", metavar="CONFIG",
                    help="the daemon's config (its `listen` address is asked)")
    st.add_argument("--url", metavar="URL", help="the daemon's address instead, e.g. "
                    "http://gpu-gw:9105")
    st.add_argument("--json", action="store_true", help="the targets as JSON, bad first")
    st.set_defaults(func=cmd_status)


def _add_compare(sub: Subparsers) -> None:
    cmp_ = sub.add_parser("compare", help="two startups of a log side by side",
                          description=COMPARE_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp_.add_argument("file", nargs="?", metavar="FILE",
                      help="the log file (gzip, bzip2, xz too; - for stdin; with -c: omitted)")
    cmp_.add_argument("a", nargs="?", metavar="A",
                      help="a startup number (1 = the first, -1 = the last; default -2)")
    cmp_.add_argument("b", nargs="?", metavar="B",
                      help="the other one (default -1: the last)")
    cmp_.add_argument("--rules", default="auto", metavar="PACK", help="rule pack (default: auto)")
    cmp_.add_argument("-c", "--config", metavar="CONFIG",
                      help="compare two startups of the daemon's launch ledger (with --target): "
                           "with the GPUs' watts per phase, which a log file does not hold")
    cmp_.add_argument("--target", metavar="NAME", help="with -c: the target")
    cmp_.add_argument("--watched", metavar="TARGET",
                      help="compare two launches `logwatch watch TARGET` recorded (A B, no "
                           "FILE): a log each relaunch truncated (`>`, tee) holds only the last")
    cmp_.set_defaults(func=cmd_compare)


def _add_telemetry(w: argparse.ArgumentParser) -> None:
    """watch's GPU, probe and notify flags."""
    w.add_argument("--gpu", default="auto", metavar="auto|off|COMMAND",
                   help="GPU telemetry beside the log: auto (default) runs nvidia-smi where the "
                        "log is (over the same SSH connection for ssh://, here for a local file "
                        "when nvidia-smi is on PATH); off; or the command to run instead "
                        "(e.g. '/usr/bin/nvidia-smi' or 'sudo -n nvidia-smi')")
    w.add_argument("--gpu-devices", default=None, metavar="4,5,6,7",
                   help="the server's GPUs (nvidia-smi indexes or GPU UUIDs): the verdicts, "
                        "the preflight and the power read only these; by default the GPUs "
                        "whose memory rose by 1 GiB after the launch line, or by a CUDA "
                        "context's 0.25 GiB on one idle then, with the others' contexts (all "
                        "until one did)")
    w.add_argument("--probe", default="auto", metavar="auto|off|URL",
                   help="probe the server's own endpoint: auto (default: the address its log "
                        "printed, the pack's paths; over SSH for ssh://), off, or a URL as seen "
                        "from the node (http://127.0.0.1:30000/health)")
    w.add_argument("--notify", metavar="URL|bell",
                   help="one message at the verdict: a Slack webhook URL, any webhook URL "
                        "(the daemon's JSON), or bell")


def _add_watch(sub: Subparsers) -> None:
    w = sub.add_parser("watch", help="follow a launch live (one or more logs) until ready or dead",
                       description=WATCH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    w.add_argument("target", metavar="TARGET", nargs="+",
                   help="a local path, ssh://[user@]host[:port]/abs/path (/~/path: in the login's "
                        "home), - (stdin), or "
                        "cmd:COMMAND (e.g. 'cmd:docker logs -f sglang'); several: one launch. "
                        "A pattern in a path's file name, quoted ('logs/server-*.log'), "
                        "follows the newest matching file: each relaunch's own log")
    w.add_argument("--rules", default="auto", metavar="PACK",
                   help="rule pack name, .yaml path, or auto (default)")
    w.add_argument("--timeout", type=_duration, metavar="DURATION",
                   help="give up (exit 3) if not ready or crashed by then, e.g. 20m")
    w.add_argument("--stall-after", type=_budget, metavar="DURATION",
                   help="a startup phase that prints nothing this long is stalled: said, "
                        "with what the GPUs do; exit 3 once the silence lasts twice this "
                        "unless the GPUs work through it (default: per phase, 10m to 30m)")
    w.add_argument("--json", action="store_true",
                   help="print the summary object at exit (live display goes to stderr)")
    w.add_argument("--from-start", action="store_true",
                   help="read the log from byte 0 instead of from its latest startup")
    w.add_argument("--poll", action="store_true",
                   help="poll the file instead of using inotify (NFS and other filesystems)")
    w.add_argument("--last", action="store_true",
                   help="report the latest startup in the log as it stands and exit, even if "
                        "it ended before watch started (by default such a startup is history: "
                        "watch says so and waits for a new one)")
    _add_telemetry(w)
    w.add_argument("--serve", action="store_true",
                   help="after ready keep going (tok/s, running / queued, GPU) until Ctrl-C "
                        "(exit 0) or a crash (exit 1)")
    w.add_argument("--no-history", action="store_true",
                   help="do not keep this TARGET's startup durations (by default they are kept "
                        "in $LOGWATCH_STATE_DIR or ~/.local/state/logwatch, and the next watch "
                        "of the same TARGET bases its ETA on them)")
    w.add_argument("--wait", "--wait-for-file", dest="wait_for_file", action="store_true",
                   help="wait for a log (or its directory, locally or on an SSH node) that does "
                        "not exist yet: "
                        "watch started before the server (default: exit 2 naming the nearest "
                        "names in its directory)")
    g = w.add_argument_group("ssh (defaults come from ~/.ssh/config and ~/.ssh/known_hosts)")
    g.add_argument("-i", "--ssh-key", action="append", metavar="FILE",
                   help="identity file (repeatable)")
    g.add_argument("--known-hosts", metavar="FILE", help="known_hosts file to verify the host key")
    g.add_argument("--ssh-config", metavar="FILE", help="an OpenSSH client config file")
    g.add_argument("--insecure-no-host-key-check", action="store_true",
                   help="do not verify the host key (insecure; warns)")
    w.set_defaults(func=cmd_watch)


def _add_run(sub: Subparsers) -> None:
    run = sub.add_parser("run", help="the daemon: every target of the config, metrics on :9105",
                         description=RUN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("-c", "--config", default="logwatch.yaml", metavar="FILE",
                     help="the config file (default: ./logwatch.yaml)")
    run.add_argument("--shard", metavar="K/N", default=os.environ.get("LOGWATCH_SHARD"),
                     help="run only the targets whose name hashes to shard K of N (0-based); "
                          "ordinal/N takes K from a StatefulSet pod name (logwatch-3 -> 3); "
                          "env LOGWATCH_SHARD")
    run.add_argument("--check", action="store_true",
                     help="only validate the config and its rule packs, then exit (0 ok, 2 bad)")
    run.set_defaults(func=cmd_run)


def _add_demo(sub: Subparsers) -> None:
    d = sub.add_parser("demo", help="the embedded default: a simulated server and the daemon",
                       description="A simulated SGLang server writes a realistic startup log "
                                   "(a GLM-5-sized model on 8 GPUs: download, 83 shards, "
                                   "autotune, CUDA graphs, ready, serving; about a minute) into "
                                   "a temp directory, and the daemon watches "
                                   "it with metrics and the status page on 127.0.0.1:9105. "
                                   "No GPU, no SGLang, no network.")
    d.add_argument("--crash", action="store_true", help="end in a CUDA OOM during graph capture")
    d.add_argument("--speed", type=float, default=1.0,
                   help="pause multiplier of the simulation (default 1: about a minute)")
    d.add_argument("--linger", type=_duration, default=10.0, metavar="DURATION",
                   help="keep the daemon up this long after the simulation (default 10s)")
    d.add_argument("--forever", action="store_true", help="keep the daemon running until Ctrl-C")
    d.set_defaults(func=cmd_demo)


def _add_alerts(sub: Subparsers) -> None:
    al = sub.add_parser("alerts", help="check the alert wiring",
                        description="Alerts go to the sinks of the config (Slack, webhooks, "
                                    "Alertmanager).")
    asub = al.add_subparsers(dest="alerts_command", metavar="ACTION")
    asub.required = True
    at = asub.add_parser("test", help="send a sample alert to every sink",
                         description="Send one sample alert (marked [test]) to every sink of the "
                                     "config and report what each answered. Exit 1 if any failed.")
    at.add_argument("-c", "--config", default="logwatch.yaml", metavar="FILE")
    at.add_argument("--kind", default="crashed", choices=KIND_NAMES)
    at.set_defaults(func=cmd_alerts_test)


def _add_rules(sub: Subparsers) -> None:
    rules = sub.add_parser("rules", help="validate and test rule packs",
                           description="Rule packs are data (rules/*.yaml); test them like code.")
    rsub = rules.add_subparsers(dest="rules_command", metavar="ACTION")
    rsub.required = True
    c = rsub.add_parser("check", help="validate packs and prove their samples",
                        description="Load each pack (schema, regexes, phases, reasons) and check "
                                    "that every sample line matches its rule. Exit 0 when all "
                                    "do; exit 2 on the first broken pack, with a message naming "
                                    "file, rule, key.")
    c.add_argument("packs", nargs="*", metavar="PACK",
                   help="pack names or .yaml paths (default: every shipped pack)")
    c.add_argument("-q", "--quiet", action="store_true", help="no warnings, only errors")
    c.set_defaults(func=cmd_rules_check)
    t = rsub.add_parser("test", help="show which rule matched each line of a log",
                        description="Print every line of FILE with the rule that matched it; "
                                    "lines no rule matched are marked '-'.  Exit 0 when FILE "
                                    "was read (matched or not), 2 on a usage error.")
    t.add_argument("pack", metavar="PACK", help="pack name or .yaml path")
    t.add_argument("file", metavar="FILE", help="a log file (gzip, bzip2, xz too; - for stdin)")
    t.add_argument("--unmatched", action="store_true", help="print only lines no rule matched")
    t.add_argument("--matched", action="store_true", help="print only lines a rule matched")
    t.add_argument("--json", action="store_true",
                   help="one JSON object per line: line number, rule, phase begun, progress "
                        "kind, crash reason, hint, stop, endpoint, stats, fields (for CI)")
    t.set_defaults(func=cmd_rules_test)


HISTORY_HELP = """\
Every startup in a log, one row each: when, outcome, startup time, slowest phase, serving
throughput (tokens/s p50 after a minute of warm-up), GPU watts, and the flags that changed
since the launch before (parsed from SGLang's server_args=ServerArgs(...), vLLM's
non-default args / Namespace(...), or the launch command line).

  logwatch history server.log
  logwatch history server.log.2.gz                   # rotated and compressed: gzip, bzip2, xz
  zcat -f server.log.2.gz server.log.1 server.log | logwatch history -   # the rotated files as one log
  logwatch history server.log --json | jq .changed
  logwatch history -c /etc/logwatch/logwatch.yaml --target glm5-node1   # the daemon's ledger

exit status: 0 startups listed, 1 none recorded (none in the log, or none for the target),
2 usage error (a missing file, a config or pack that does not load).
"""

COMPARE_HELP = """\
Two startups of one log side by side: each phase with its delta, the startup time, tok/s,
watts and the flags that differ.  By default the last two.

  logwatch compare server.log          # the last two startups
  logwatch compare server.log 1 3      # the first and the third
  logwatch compare --watched server.log   # the last two launches `logwatch watch` recorded

exit status: 0 compared, 1 nothing to compare (fewer than two startups), 2 usage error (no
such startup number, a missing file).
"""


def _ledger_of(args: argparse.Namespace) -> Any:
    """`-c CONFIG --target NAME` (history, compare): the config's state_dir, or None after
    saying what is wrong (exit 2)."""
    from .app.config import ConfigError, load_config
    try:
        cfg = load_config(args.config)
    except (ConfigError, PackError) as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return None
    if all(t.name != args.target for t in cfg.targets):
        from .app.history import stored_records
        from .state.ledger import FILE
        if not (cfg.state_dir / FILE).is_file() or \
                not stored_records(cfg.state_dir, args.target, lambda note: None):
            print(f"logwatch: {args.config}: no target {args.target!r}", file=sys.stderr)
            return None
        # renamed or removed since: its records are still in the ledger
        print(f"logwatch: {args.target!r} is not in {args.config} now; its recorded startups:",
              file=sys.stderr)
    return cfg.state_dir


def cmd_history(args: argparse.Namespace) -> int:
    from .app.history import run_history, run_history_store
    from .shown import visible
    out = (lambda s: print(visible(s), flush=True))    # the ledger quotes the log
    if args.config:
        if args.files or not args.target:
            print("logwatch: history -c CONFIG takes --target NAME and no FILE", file=sys.stderr)
            return Exit.USAGE
        state_dir = _ledger_of(args)
        if state_dir is None:
            return Exit.USAGE
        return run_history_store(state_dir, args.target, args.json, out)
    if args.watched:
        from .state.history import watch_state_dir
        if args.files:
            print("logwatch: history --watched TARGET takes no FILE", file=sys.stderr)
            return Exit.USAGE
        return run_history_store(watch_state_dir(), args.watched, args.json, out)
    if not args.files:
        print("logwatch: history needs a FILE, -c CONFIG --target NAME, or --watched TARGET",
              file=sys.stderr)
        return Exit.USAGE
    if args.rules != "auto":
        load_pack(args.rules)
    return run_history(args.files, args.rules, args.json, out)


def cmd_status(args: argparse.Namespace) -> int:
    from .app.fleet import run_status
    if not args.config and not args.url:
        print("logwatch: status needs -c CONFIG (or --url http://HOST:PORT)", file=sys.stderr)
        return Exit.USAGE
    return run_status(args.config, args.url, args.json, sys.stdout, sys.stderr)


def cmd_compare(args: argparse.Namespace) -> int:
    from .app.history import run_compare, run_compare_store
    from .shown import visible
    out = (lambda s: print(visible(s), flush=True))    # the ledger quotes the log
    if args.config:
        # no FILE: the positionals are A and B
        a, b = args.file or "-2", args.a or "-1"
        if args.b is not None or not args.target:
            print("logwatch: compare -c CONFIG takes --target NAME and A B, no FILE",
                  file=sys.stderr)
            return Exit.USAGE
        state_dir = _ledger_of(args)
        if state_dir is None:
            return Exit.USAGE
        try:
            return run_compare_store(state_dir, args.target, a, b, out)
        except LookupError as e:
            print(f"logwatch: {e}", file=sys.stderr)
            return Exit.USAGE
    if args.watched:
        from .state.history import watch_state_dir
        a, b = args.file or "-2", args.a or "-1"       # no FILE: the positionals are A and B
        if args.b is not None:
            print("logwatch: compare --watched TARGET takes A B, no FILE", file=sys.stderr)
            return Exit.USAGE
        try:
            return run_compare_store(watch_state_dir(), args.watched, a, b, out)
        except LookupError as e:
            print(f"logwatch: {e}", file=sys.stderr)
            return Exit.USAGE
    if args.file is None:
        print("logwatch: compare needs a FILE, -c CONFIG --target NAME, or --watched TARGET",
              file=sys.stderr)
        return Exit.USAGE
    if args.rules != "auto":
        load_pack(args.rules)
    try:
        code = run_compare(args.file, args.a or "-2", args.b or "-1", args.rules, out)
    except LookupError as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return Exit.USAGE
    if code == Exit.FAILED and args.file != "-":
        _watched_hint(args.file, out)
    return code


def _watched_hint(path: str, out: Callable[[str], None]) -> None:
    """A log each relaunch truncated (`> server.log`, tee) holds one launch: where `watch`
    recorded more of that path, say how to compare those (adv132's `>` loop: `compare
    server.log` said "1 startup(s): nothing to compare" after five watched launches)."""
    import sqlite3
    from pathlib import Path
    from .app.history import stored_records
    from .state.history import watch_state_dir
    from .state.ledger import FILE
    state_dir = watch_state_dir()
    if not (Path(state_dir) / FILE).is_file():
        return              # watch never kept a ledger here: none is made by looking
    try:
        n = len(stored_records(state_dir, path))
    except (OSError, sqlite3.Error):   # unreadable: no hint, the verdict stands
        return
    if n >= 2:
        out(f"logwatch watch recorded {n} launches of {path}: "
            f"logwatch compare --watched {path}")


def cmd_replay(args: argparse.Namespace) -> int:
    if args.rules != "auto":
        load_pack(args.rules)  # fail early, before reading any file
    status = Exit.OK
    for path in args.files:
        damage: DamagedLog | None = None
        try:
            pipe = replay_file(path, args.rules)
        except DamagedLog as e:     # compressed data cut short: what was read, then that
            pipe, damage = e.result, e
        except LogFileError as e:
            print(f"logwatch: {e}", file=sys.stderr)
            status = Exit.USAGE
            continue
        except OSError as e:
            print(f"logwatch: {path}: {e.strerror}", file=sys.stderr)
            status = Exit.USAGE
            continue
        view = pipeline_view(path, pipe)
        doc = summary(view)
        if args.json:
            print(json.dumps(doc, ensure_ascii=False), flush=True)
        else:
            print(human(doc, view.ready_in, follower=view.follower, crash=view.crash,
                        degraded=view.degraded))
        if args.timeline:
            out = sys.stderr if args.json else sys.stdout
            print(timeline(view), file=out, flush=True)
        if damage is not None:
            print(f"logwatch: {damage}", file=sys.stderr, flush=True)
            status = Exit.USAGE
    return status


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _budget(text: str) -> float:
    """A stall budget: more than 0 (0s stalled every phase at once, exit 3)."""
    try:
        return parse_budget(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from .app.config import ConfigError, load_config, parse_shard
    from .app.daemon import run_daemon
    shard = None
    if args.shard:
        try:
            shard = parse_shard(args.shard)
        except ValueError as e:
            print(f"logwatch: {e}", file=sys.stderr)
            return Exit.USAGE
    if args.check:
        try:
            cfg = load_config(args.config)
        except (ConfigError, PackError) as e:
            print(f"logwatch: {e}", file=sys.stderr)
            return Exit.USAGE
        from .app.config import listen_problem
        if (problem := listen_problem(cfg)) is not None:
            print(f"logwatch: {cfg.path}: listen: {problem}", file=sys.stderr)
            return Exit.USAGE
        from .sinks.alerts.config import max_attempts_notes
        for note in max_attempts_notes(cfg.path, cfg.alerts):   # a warning: still ok
            print(f"logwatch: warning: {note}", file=sys.stderr)
        if shard is not None:
            from .app.config import select_shard
            mine = select_shard(cfg, shard)
            print(f"{args.config}: ok; shard {shard[0]}/{shard[1]} runs {len(mine.targets)} of "
                  f"{len(cfg.targets)} targets: {', '.join(t.name for t in mine.targets)}")
            return Exit.OK
        print(f"{args.config}: ok ({len(cfg.targets)} targets, {len(cfg.alerts)} alert sinks)")
        return Exit.OK
    return asyncio.run(run_daemon(args.config, shard))


_SCP_STYLE = re.compile(r"^(?:(?P<user>[\w.-]+)@)?(?P<host>[\w.-]+):(?P<path>[/~].*)$")


_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")


def url_problem(target: str, scheme: str, rest: str) -> str:
    """A URL watch does not read (only ssh://): what to write instead.  Before, `http://x/y`
    got "looks like scp's host:path; did you mean ssh://http//x/y?"."""
    import shlex
    from urllib.parse import unquote
    kinds = "a local path, ssh://[user@]host[:port]/abs/path, cmd:COMMAND or -"
    if scheme == "ssh":     # SSH://: the scheme is read in lower case only
        return f"{target}: write the scheme in lower case: ssh://{rest}"
    if scheme in ("sftp", "scp"):
        return f"{target}: {scheme}:// is not read; did you mean ssh://{rest}?"
    if scheme == "file":
        # file:///p and file://localhost/p are this machine's /p (percent-decoded); another
        # host's is read over SSH
        host, slash, path = rest.partition("/")
        path = unquote(slash + path) or "/"
        if host and host.lower() != "localhost":
            return f"{target}: file:// is not read; another machine's file: ssh://{host}{path}"
        return f"{target}: file:// is not read; give the path: {shlex.quote(path)}"
    if scheme in ("http", "https"):
        # quoted for cmd:'s own word split (a query's `&` is a shell operator it refuses
        # unquoted), then for the shell the suggestion is pasted into
        word = shlex.quote(target)
        if word != target and not set('"$`\\\'') & set(target):
            word = f'"{target}"'      # 'cmd:curl -sSN "http://h/log?a=1&b=2"'
        cmd = "cmd:curl -sSN " + word
        return f"{target}: {scheme}:// is not read ({kinds}); a log served over HTTP: " \
            f"{shlex.quote(cmd)}"
    return f"{target}: {scheme}:// is not read ({kinds})"


def target_problem(target: str, wait_for_file: bool = False) -> str | None:
    """A watch TARGET that cannot be what the user meant: scp's `host:/path` (a local file of
    that name does not exist), or a local path whose directory does not exist."""
    if target.startswith("cmd:"):
        from .sources.command import shell_note, shell_syntax
        op = shell_syntax(target[4:])
        return shell_note(target[4:], op) if op else None
    if target == "-" or target.startswith("ssh://"):
        return None
    if os.path.exists(target):
        if stat.S_ISFIFO(os.stat(target).st_mode):   # before: "Illegal seek", a JSON log line
            return (f"{target} is a named pipe (FIFO): a target is a file read by offset; "
                    f"read the pipe as a stream: logwatch watch - < {target}")
        return None
    url = _URL.match(target)
    if url:     # before the pattern's checks: a query's `?`, an IPv6 host's `[` are no glob
        return url_problem(target, url["scheme"].lower(), url["rest"])
    from .sources.newest import is_pattern, matching, pattern_problem
    problem = pattern_problem(target)
    if problem and not os.path.isdir(os.path.dirname(target)):
        return problem     # a pattern in a directory (one that exists so named is taken)
    if is_pattern(target):    # the newest file matching it (sources/newest.py)
        parent, name = os.path.split(os.path.abspath(os.path.expanduser(target)))
        try:
            found = matching(name, os.listdir(parent))
        except OSError:
            found = []
        if found or wait_for_file:
            return None
        if not os.path.isdir(parent):
            return f"{parent} does not exist (the directory of {name}): check the path, or " \
                "pass --wait to wait for it"
        return f"no file matches {target}{nearest_names(parent, name)}; pass --wait to wait " \
            "for one to appear"
    m = _SCP_STYLE.match(target)
    if m:
        user = f"{m['user']}@" if m["user"] else ""
        path = m["path"] if m["path"].startswith("/") else "/" + m["path"].lstrip("~/")
        hint = "" if m["path"].startswith("/") else " (the path must be absolute)"
        return (f"{target} looks like scp's host:path; did you mean "
                f"ssh://{user}{m['host']}{path}{hint}?")
    parent = os.path.dirname(os.path.abspath(os.path.expanduser(target)))
    if wait_for_file:
        return None
    if not os.path.isdir(parent):
        return (f"{parent} does not exist (the directory of {os.path.basename(target)}): check "
                "the path, or pass --wait to wait for it")
    return f"no such file: {target}{nearest_names(parent, os.path.basename(target))}; " \
        "pass --wait to wait for it to appear"


def expanded_pattern_hint(targets: list[str]) -> str | None:
    """Several local files of one directory: one launch's logs (prefill and decode), or a
    pattern the shell expanded because it was not quoted; say how to follow the newest."""
    files = [t for t in targets if t != "-" and not t.startswith(("ssh://", "cmd:"))]
    if len(files) < 3 or len(files) != len(targets):
        return None
    dirs = {os.path.dirname(os.path.abspath(os.path.expanduser(t))) for t in files}
    if len(dirs) != 1:
        return None
    names = [os.path.basename(t) for t in files]
    common = os.path.commonprefix(names)
    example = os.path.join(os.path.dirname(files[0]), (common or "") + "*")
    return (f"watching {len(files)} files of {dirs.pop()} as ONE launch (one log per process "
            f"or node); to follow the newest of them instead, quote a pattern so that the "
            f"shell leaves it alone: logwatch watch '{example}'")


def nearest_names(directory: str, name: str, limit: int = 2000) -> str:
    """`; in /root: server.log, server-old.log (did you mean server.log?)`: what is there,
    closest first (a typo'd log name is the common case); nothing when it is empty."""
    import difflib
    try:
        with os.scandir(directory) as it:
            names = [e.name for e, _ in zip(it, range(limit))
                     if not e.name.startswith(".")]
    except OSError:
        return ""
    if not names:
        return f"; {directory} is empty"
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    logs = sorted(n for n in names if ".log" in n or n.endswith((".txt", ".out")))
    shown = (close + [n for n in logs if n not in close])[:5] or sorted(names)[:5]
    more = len(names) - len(shown)
    hint = f" (did you mean {os.path.join(os.path.dirname(name) or directory, close[0])}?)" \
        if close else ""
    return f"; in {directory}: {', '.join(shown)}{f' and {more} more' if more > 0 else ''}{hint}"


def cmd_watch(args: argparse.Namespace) -> int:
    import asyncio

    from . import log
    from .sources.ssh import SSHOptions
    from .sources.sshfail import SSH_FILE_OPTIONS, ssh_file_problems
    from .app.watch import WatchOptions, run_watch
    log.setup("warning")
    known = "none" if args.insecure_no_host_key_check else args.known_hosts
    ssh = SSHOptions(known_hosts=known,
                     client_keys=tuple(args.ssh_key) if args.ssh_key else None,
                     config=(args.ssh_config,) if args.ssh_config else None)
    for bad in ssh_file_problems(ssh.client_keys, ssh.known_hosts, ssh.config):
        print(f"logwatch: {SSH_FILE_OPTIONS[bad.option]} {bad.path}: {bad.why}", file=sys.stderr)
        return Exit.USAGE
    if args.rules != "auto":
        load_pack(args.rules)
    targets: list[str] = list(args.target)
    if len(set(targets)) != len(targets):
        print("logwatch: a TARGET is given twice", file=sys.stderr)
        return Exit.USAGE
    if len(targets) > 1 and "-" in targets:
        print("logwatch: stdin (-) can only be watched alone", file=sys.stderr)
        return Exit.USAGE
    for target in targets:
        problem = target_problem(target, args.wait_for_file)
        if problem:
            print(f"logwatch: {problem}", file=sys.stderr)
            return Exit.USAGE
    hint = expanded_pattern_hint(targets)
    if hint:
        print(f"logwatch: note: {hint}", file=sys.stderr)
    if args.notify and args.notify != "bell" and \
            not args.notify.startswith(("http://", "https://")):
        print(f"logwatch: --notify: a Slack or webhook URL (http[s]://...) or bell, "
              f"got {args.notify!r}", file=sys.stderr)
        return Exit.USAGE
    from .telemetry.gpu import parse_devices, parse_gpu_config
    from .telemetry.probe import parse_probe_config
    try:
        gpu = parse_gpu_config(args.gpu if args.gpu in ("auto", "off", "false")
                               else {"command": args.gpu}, where="--gpu")
        if args.gpu_devices is not None:
            gpu = dataclasses.replace(gpu, devices=parse_devices(args.gpu_devices,
                                                                 "--gpu-devices"))
        probe = parse_probe_config(args.probe if args.probe in ("auto", "off", "false")
                                   else {"url": args.probe, "interval": "5s",
                                         "fail_after": "15s"}, where="--probe")
    except ValueError as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return Exit.USAGE
    opts = WatchOptions(targets[0], args.rules, args.timeout, args.stall_after, args.json,
                        ssh, args.poll, args.from_start, last=args.last,
                        wait_for_file=args.wait_for_file, history=not args.no_history, gpu=gpu,
                        targets=targets, probe=probe, notify=args.notify, serve=args.serve)
    return asyncio.run(run_watch(opts))


def cmd_demo(args: argparse.Namespace) -> int:
    import asyncio

    from . import log
    from .app.demo import run_demo
    log.setup("warning")
    return asyncio.run(run_demo(speed=args.speed, crash=args.crash, linger=args.linger,
                                forever=args.forever, out=lambda s: print(s, flush=True)))


def cmd_alerts_test(args: argparse.Namespace) -> int:
    import asyncio

    from .app.alerttest import send_test
    from .app.config import ConfigError, load_config
    try:
        cfg = load_config(args.config)
    except (ConfigError, PackError) as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return Exit.USAGE
    return asyncio.run(send_test(cfg, args.kind, out=lambda s: print(s, flush=True)))


def cmd_rules_check(args: argparse.Namespace) -> int:
    from .rules.check import check_samples, pack_warnings
    names = args.packs or shipped_pack_names()
    failed = False
    reported: set[str] = set()
    for name in names:
        pack = load_pack(name)
        problems = check_samples(pack)
        for prob in problems:
            if str(prob) in reported:
                continue
            reported.add(str(prob))
            print(f"logwatch: {prob}", file=sys.stderr)
        if problems:
            failed = True
            continue
        if not args.quiet:
            for w in pack_warnings(pack):
                print(f"warning: {w}", file=sys.stderr)
        n = sum(len(r.samples) for r in pack.rules)
        print(f"{pack.path}: ok ({len(pack.rules)} rules, {n} samples)")
    return Exit.USAGE if failed else Exit.OK


def cmd_rules_test(args: argparse.Namespace) -> int:
    from .rules.check import test_lines
    from .shown import visible
    pack = load_pack(args.pack)
    counts: dict[str, int] = {}
    unmatched = 0
    damage: DamagedLog | None = None
    try:
        with open_log(args.file) as f:
            for v in test_lines(pack, f):
                if v.rule is None:
                    unmatched += 1
                else:
                    counts[v.rule] = counts.get(v.rule, 0) + 1
                if (args.unmatched and v.rule) or (args.matched and not v.rule):
                    continue
                if args.json:
                    print(json.dumps({"line": v.line_number, **(v.meaning or {"rule": None}),
                                      "text": v.text}, ensure_ascii=False))
                    continue
                print(f"{v.line_number:>7} {v.rule or '-':<22} {visible(v.text[:300])}")
    except DamagedLog as e:    # what was read is shown, then that
        damage = e
    total = sum(counts.values()) + unmatched
    print(f"\n{total} lines: {total - unmatched} matched, {unmatched} unmatched", file=sys.stderr)
    for rid, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {rid:<24} {n}", file=sys.stderr)
    if damage is not None:
        raise damage
    return Exit.OK


_OUTPUT_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)   # writing the output failed for room


def _drop_stdout() -> None:
    """No more output: stdout's fd points at /dev/null (the flush at exit writes nothing)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Diagnostics:
    """stderr, for what is said beside the output (the live display under --json, warnings,
    errors): one that cannot be written (closed: `2>&-`; `2>/dev/full`; its reader gone)
    drops what is said there from then on, never the output on stdout nor the exit status.
    Before, `watch --json 2>&-` printed no JSON and exited 1 (the display's first line
    failed), which a script reads as "crashed"."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def _gone(self) -> None:
        self.out = open(os.devnull, "w")     # nothing more is said there

    def write(self, s: str) -> int:
        try:
            self.out.write(s)
        except (OSError, ValueError):
            self._gone()
        return len(s)

    def flush(self) -> None:
        try:
            self.out.flush()
        except (OSError, ValueError):
            self._gone()

    def isatty(self) -> bool:
        return bool(self.out.isatty())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stderr is None:        # started with stderr closed (`2>&-`): fd 2 is /dev/null,
        sys.stderr = open(os.devnull, "w")     # not the next file opened
    if not isinstance(sys.stderr, Diagnostics):
        sys.stderr = Diagnostics(sys.stderr)
    if sys.stdout is None:        # started with stdout closed (`>&-`): before, a traceback, exit 1
        sys.stdout = open(os.devnull, "w")
        print("logwatch: stdout is closed: the output is dropped", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr.out):   # an encoding that cannot show a line: escaped
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else list(argv)):
        parser.print_help(sys.stderr)   # bare `logwatch`: what it can do, not one error line
        return Exit.USAGE
    args = parser.parse_args(argv)
    try:
        return Exit(args.func(args))   # a status outside the registry fails here
    except PackError as e:
        print(f"logwatch: {e}", file=sys.stderr)
        return Exit.USAGE
    except FileNotFoundError as e:
        print(f"logwatch: {e.filename}: no such file", file=sys.stderr)
        return Exit.USAGE
    except LogFileError as e:     # zstd; compressed data cut short (after what it held)
        print(f"logwatch: {e}", file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()   # stdout's reader is gone (Python's flush at exit would say so again)
        return Exit.PIPE_CLOSED
    except OSError as e:
        if e.errno not in _OUTPUT_FULL and e.filename is not None:
            # an input that cannot be read (`history DIR`, `compare` of an unreadable file):
            # one line and 2, as `replay` says it (before: a traceback and exit 1, "crashed")
            print(f"logwatch: {e.filename}: {e.strerror}", file=sys.stderr)
            return Exit.USAGE
        if e.errno not in _OUTPUT_FULL:
            raise
        # the output cannot be written (`> /dev/full`, a full disk): said, not a traceback and
        # exit 1, which a script reads as "crashed"
        _drop_stdout()
        print(f"logwatch: cannot write the output: {e.strerror}", file=sys.stderr)
        return Exit.USAGE


if __name__ == "__main__":
    sys.exit(main())
