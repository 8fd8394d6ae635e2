"""A restart loop's crashes, folded: one open `crashed` alert per target and crash reason.

A server in a restart loop (systemd `Restart=always`, a CrashLoopBackOff) crashes at every
launch, each into the same log, and may never be ready again.  Its first crash of a reason
is paged; a later crash of the same reason and launch flags while that alert is open (no
startup ready since) is folded into it: no new page, the open alert counts it (`crashes`,
and the latest crash's time and startup).  A crash of another reason is news: paged, and
open beside the first; so is one of a relaunch with other flags (an operator's attempt).
The ready that ends the loop resolves each open alert, saying how many crashes it stood
for.  Before, each crash was paged and stayed open until that ready: a loop of 2,000
crashes kept 2,000 open alerts (5.8 MB of `alerts/state.json`, and each POSTed again to
Alertmanager at every `resend`), paged each receiver 2,000 times, and the state file's
rewrites slowed delivery to under one page a second a receiver.  A relaunch that hangs
past `stall_after` (or runs slow) before it crashes is the loop too: its stall is counted
in the loop's open crash alert (`stall_of_loop`, `fold_stall`), not paged again at each
launch with its resolution; one that hangs for good is said once more in chat
(`hang_to_say`).

Pure functions over the open alerts (`AlertStore.open`'s documents); the router (router.py)
does the I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from ...units import fmt_duration
from .model import Alert
from .outbox import sinks_record, went_to

if TYPE_CHECKING:
    from .receivers import Sink


def owner(doc: dict[str, Any]) -> str:
    """The target an open alert is of now: its own, or the name it was renamed to."""
    return str(doc.get("watched_as") or doc["target"])


def crashes_of(doc: dict[str, Any]) -> int:
    """How many crashes an open `crashed` alert stands for (1 unless a loop folded more in;
    the count read from the state file is trusted only as a positive int)."""
    n = doc.get("crashes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def reason_of(doc: dict[str, Any]) -> str:
    details = doc.get("details")
    return str(details.get("reason") or "") if isinstance(details, dict) else ""


def open_crashes(open_docs: Iterable[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    """The target's open `crashed` alerts (its restart loop, when there are any)."""
    return [d for d in open_docs if d.get("kind") == "crashed" and owner(d) == target]


# A loop's crashes come at most this far apart: a relaunch (systemd's RestartSec, k8s's
# CrashLoopBackOff, at most 5 minutes) and a startup that crashes again (a 400 GB model's
# load and capture: minutes to half an hour).  A crash longer after the loop's latest one
# is a new attempt (the server left down, relaunched the next day) and is paged.  By the
# log's stamps where both crashes have one (`crash_gap`).
LOOP_GAP = 3600.0


def folds_into(open_docs: Iterable[dict[str, Any]], alert: Alert) -> dict[str, Any] | None:
    """The open alert a new crash is folded into: the target's open crash of the same
    reason (another startup's) launched with the same flags (`details.launch`, their
    digest; unknown flags match any: `repeats`), its latest crash no more than `LOOP_GAP`
    before (`crash_gap`), the latest if a restore left several; None: it is paged.  A
    relaunch with other flags is an operator's new attempt, not the loop: before, its
    crash of the same reason was folded, and nobody was paged that the fix failed; so is
    one a day later (before: folded, 0 pages)."""
    facts = facts_of(alert.to_json())
    return _latest_of_loop(open_docs, alert, lambda d: d.get("key") != alert.key
                           and repeats(facts_of(d), facts))


def stall_of_loop(open_docs: Iterable[dict[str, Any]], alert: Alert) -> dict[str, Any] | None:
    """The open crash alert of the restart loop a `stalled` alert's startup is a relaunch
    of: the target's open crash of another startup, launched with the same flags (as
    `folds_into`, whatever its reason), its latest crash no more than `LOOP_GAP` before;
    the latest.  None: no loop (no crash since the last ready, a clean stop since, an
    operator's relaunch with other flags): the stall is paged."""
    facts = facts_of(alert.to_json())
    return _latest_of_loop(open_docs, alert, lambda d: d.get("startup") != alert.startup
                           and repeats(facts_of(d), (reason_of(d), *facts[1:])))


def _latest_of_loop(open_docs: Iterable[dict[str, Any]], alert: Alert,
                    same: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    loop = [d for d in open_crashes(open_docs, alert.target)
            if not d.get("loop_over") and same(d) and crash_gap(d, alert) <= LOOP_GAP]
    return max(loop, key=last_crash_at, default=None)


def stalls_of(doc: dict[str, Any], field: str = "stalls") -> int:
    """How many relaunches of a loop stalled (`field` "slows": were slow) into its open
    crash alert (`fold_stall`; trusted from the state file only as a positive int)."""
    n = doc.get(field)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def fold_stall(doc: dict[str, Any], alert: Alert) -> None:
    """Count the stall `alert` of a loop's relaunch in the loop's open crash alert `doc`,
    with its phase and time (its re-sends say it: `as_open`); a `slow` one in `slows`.
    Values replaced (`fold`)."""
    if alert.kind == "slow":
        doc["slows"] = stalls_of(doc, "slows") + 1
        return
    doc["stalls"] = stalls_of(doc) + 1
    doc["last_stall"] = {"at": alert.starts_at, "phase": str(alert.details.get("phase") or ""),
                         "startup": alert.startup,
                         "budget": _seconds(alert.details.get("stall_after")) or 0.0}


def hang_to_say(doc: dict[str, Any], startup: str | None, now: float) -> bool:
    """The stall folded into `doc` is `startup`'s, still silent (the caller knows), not said
    yet, after the loop's latest crash, and has lasted its budget again since it was
    folded: the relaunch hangs for good, not on its way to the loop's next crash (which,
    within that time, keeps it folded: `fold_stall`).  Chat sinks hear it once, as an
    update of the open crash alert (`as_open`): before, Slack heard nothing after the
    loop's crash page while the server hung in its relaunch."""
    st = doc.get("last_stall")
    if not isinstance(st, dict) or st.get("said") or st.get("startup") != startup:
        return False
    at, budget = _seconds(st.get("at")), _seconds(st.get("budget")) or 0.0
    return at is not None and at >= last_crash_at(doc) and now - at >= budget


def said_hang(doc: dict[str, Any]) -> None:
    """`hang_to_say` said: never again for this stall (saved with the open alert)."""
    doc["last_stall"] = {**doc["last_stall"], "said": True}


def stall_over(open_docs: Iterable[dict[str, Any]], target: str,
               ended: Callable[[str], bool]) -> bool:
    """The stall of a loop's relaunch folded into `target`'s open crash alerts is over
    where its startup (`-`: none known) is `ended`'s (lines again, a new startup): it is
    no more said (`stalled_since`, `hang_to_say`) and stays counted (`stalls`).  Before,
    a relaunch that stalled mid load and then loaded on had every re-send to Alertmanager
    say `(its relaunch since stalled in loading_shards 5m ago)` until the loop's next crash
    or ready.  True where one changed (the caller saves)."""
    over = [d for d in open_crashes(open_docs, target) if isinstance(d.get("last_stall"), dict)
            and ended(str(d["last_stall"].get("startup") or "-"))]
    for d in over:
        del d["last_stall"]
    return bool(over)


def stalled_since(doc: dict[str, Any], now: float) -> str:
    """` (its relaunch since stalled in cuda_graph 3m ago)` where the latest stall folded
    into `doc` came after its latest crash and lasts (the loop hangs now; `stall_over`
    ends it), else ""."""
    st = doc.get("last_stall")
    at = _seconds(st.get("at")) if isinstance(st, dict) else None
    if at is None or at < last_crash_at(doc):
        return ""
    return f" (its relaunch since stalled in {st.get('phase')} " \
           f"{fmt_duration(max(0.0, now - at))} ago)"


def _seconds(at: Any) -> float | None:
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None


def logged_at(doc: dict[str, Any]) -> float | None:
    """The log's own time of an alert's (first) crash: `details.logged_at`, its line's
    stamp; None where the log had none."""
    details = doc.get("details")
    return _seconds(details.get("logged_at")) if isinstance(details, dict) else None


def latest_logged_at(doc: dict[str, Any]) -> float | None:
    """The log's time of an open alert's latest crash (`last_logged_at`, set by `fold`:
    None where that crash had no stamp), its first's until one is folded in."""
    return _seconds(doc["last_logged_at"]) if "last_logged_at" in doc else logged_at(doc)


def since_crash(was_logged: float | None, was_decided: float, alert: Alert) -> float:
    """Seconds from an earlier crash to `alert`'s: by the log's stamps where both have one,
    else by when each was decided.  A crash read after the daemon was down (stopped
    overnight, its host rebooted) is decided seconds after the last one it read, whatever
    the log says: before, a relaunch 11 h on (the log's stamps) read at the restart was
    folded into the day-old alert, nobody paged, and said "the first 3s ago"; a loop's next
    crash, 5 minutes on by the log, read after 2 h down was paged as a new attempt."""
    # a `slow` startup is of the loop where it was launched within the gap (`launch_facts`)
    now = _seconds(alert.details.get("logged_at", alert.details.get("launch_logged_at")))
    if was_logged is not None and now is not None:
        return now - was_logged
    return alert.starts_at - was_decided


def crash_gap(doc: dict[str, Any], alert: Alert) -> float:
    """How long after the open alert's latest crash `alert`'s came (`since_crash`)."""
    return since_crash(latest_logged_at(doc), last_crash_at(doc), alert)


def end_loop(open_docs: Iterable[dict[str, Any]], target: str) -> bool:
    """A launch of `target` stopped cleanly (Ctrl-C, a SIGTERM: someone stopped it): its
    open crashes are a loop no more; a later crash is paged, not folded into them (they
    stay open until a ready).  Before, crash -> stop -> relaunch -> the same crash paged
    nothing.  True where one changed (the caller saves)."""
    ended = [d for d in open_crashes(open_docs, target) if not d.get("loop_over")]
    for d in ended:
        d["loop_over"] = True
    return bool(ended)


Facts = tuple[str, str, tuple[str, ...]]


def facts_of(doc: dict[str, Any]) -> Facts:
    """What makes a crash a repeat of an open one: its reason, its launch's flags (their
    digest), and the digests of its first flags (`launch_prefixes`: of a cut dump too)."""
    details = doc.get("details")
    details = details if isinstance(details, dict) else {}
    prefix = details.get("launch_prefix")
    return (reason_of(doc), str(details.get("launch") or ""),
            tuple(prefix.split(",")) if isinstance(prefix, str) and prefix else ())


def repeats(a: Facts, b: Facts) -> bool:
    """Two crashes' `facts_of` are one loop's: the same reason, and the same launch flags
    where both are known: whole, all of them; else the longest run of first flags both
    have (a dump cut by a line cap, rsyslog's 8 KiB, where the cut moves with each
    launch's `random_seed` digits).  Flags unknown (none printed, the launch line read
    before an attach or rotated away) tell no new attempt: before, such a crash of a
    loop whose other launches' flags were read paged again."""
    if a[0] != b[0]:
        return False
    if a[1] and b[1]:
        return a[1] == b[1]
    n = min(len(a[2]), len(b[2]))
    return n == 0 or a[2][n - 1] == b[2][n - 1]


def last_crash_at(doc: dict[str, Any]) -> float:
    at = doc.get("last_crash_at", doc.get("starts_at"))
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0


def fold(doc: dict[str, Any], alert: Alert, sinks: list[Sink]) -> list[Sink]:
    """Count the crash `alert` in the open alert `doc`; of the `sinks` that take it, those
    that never had `doc` (its page given up there, or added at a reload since), now
    recorded in it: they are paged (`repage`).  Values are replaced, never changed in
    place: the state writer's thread may be encoding the old ones."""
    doc["crashes"] = crashes_of(doc) + 1
    doc["last_crash_at"] = alert.starts_at
    doc["last_logged_at"] = _seconds(alert.details.get("logged_at"))
    doc["last_startup"] = alert.startup
    missing = [s for s in sinks if not went_to(doc, s)]
    if missing:
        doc["sinks"] = list(doc.get("sinks") or []) + sinks_record(missing)
    return missing


def loop_size(docs: Iterable[dict[str, Any]]) -> int:
    """The crashes of a target's loop: what its open crash alerts stand for together."""
    return sum(crashes_of(d) for d in docs)


def loop_stalls(docs: Iterable[dict[str, Any]]) -> int:
    """The stalls (and slow startups) of a target's loop: its relaunches' folded into its
    open crash alerts (`fold_stall`)."""
    return sum(stalls_of(d) + stalls_of(d, "slows") for d in docs)


def counted(n: int, what: str) -> str:
    """`1 crash`, `4 crashes`."""
    return f"{n} {what}" if n == 1 else f"{n} {what}es" if what.endswith("sh") else f"{n} {what}s"


def loop_words(docs: Iterable[dict[str, Any]]) -> str:
    """What a loop's open crash alerts stood for, for its resolution's note: `25 crashes`,
    `4 crashes and 3 stalls` where relaunches stalled into it (`fold_stall`), `1 crash and
    1 stall`, `4 crashes, 1 stall and 2 slow startups`."""
    docs = list(docs)
    parts = [counted(loop_size(docs), "crash")] + [
        counted(n, what) for n, what in ((sum(stalls_of(d) for d in docs), "stall"), (
            sum(stalls_of(d, "slows") for d in docs), "slow startup")) if n]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def as_open(doc: dict[str, Any], now: float | None = None) -> Alert:
    """The open alert as a receiver should see it: `details.crashes`, the crashes folded
    into it, where more than one, and `details.stalls`, its relaunches' stalls folded
    into it, where any; with `now` (Alertmanager's re-sends) its summary says them too.
    The dedupe key and `starts_at` stay the first crash's."""
    alert = Alert.from_json(doc)
    n, stalls, slows = crashes_of(doc), stalls_of(doc), stalls_of(doc, "slows")
    if n > 1 or stalls or slows:
        alert.details = {**alert.details, **({"crashes": n} if n > 1 else {}),
                         **({"stalls": stalls} if stalls else {}),
                         **({"slows": slows} if slows else {})}
    if now is not None and n > 1:
        ago = fmt_duration(max(0.0, now - last_crash_at(doc)))
        alert.summary += f" ({n} crashes of it since the last ready, the latest {ago} ago)"
    if now is not None:
        alert.summary += stalled_since(doc, now)
    return alert


def say_loop(alert: Alert, open_docs: Iterable[dict[str, Any]]) -> None:
    """A crash of a new reason while earlier crashes of the target are open (no startup
    ready since: a restart loop) says so: `(crash 3 since the last ready, the first 4m10s
    ago)`, and `details.crashes_since_ready` (a crash of a reason already open is folded
    into it instead: `folds_into`).  How long ago by the log's stamps where both crashes
    have one (`since_crash`)."""
    earlier = [d for d in open_crashes(open_docs, alert.target) if d["key"] != alert.key]
    if not earlier:
        return
    n = loop_size(earlier) + 1
    first = min(earlier, key=lambda d: float(d["starts_at"]))
    since = since_crash(logged_at(first), float(first["starts_at"]), alert)
    ago = fmt_duration(max(0.0, since))
    alert.summary += f" (crash {n} since the last ready, the first {ago} ago)"
    alert.details["crashes_since_ready"] = n


# What names an open alert at a receiver (Alertmanager: its labels, `receivers.am_labels`):
# kept from the first crash for as long as the alert is open, as a rename keeps them
# (router.follow_renames), so that its re-sends and its resolution match what was paged.
IDENTITY = ("key", "starts_at", "target", "engine", "labels")


def repage(doc: dict[str, Any], alert: Alert) -> Alert:
    """A folded crash for a receiver whose page of the open alert was given up (down for
    its `max_age`), or a sink added since: the open alert's identity (`IDENTITY`: its
    resolution will match), this crash's evidence, and the loop's size.  Without it, the
    receiver would never hear of the loop: the later crashes are not paged.  Before, the
    page had this crash's target and labels: after a rename or relabel at a reload,
    Alertmanager got an alert that neither the re-sends nor the ready's resolution
    matched, active for 24 h after the server was ready again."""
    out = Alert.from_json({**alert.to_json(), **{k: doc[k] for k in IDENTITY if k in doc}})
    out.details = {**out.details, "crashes": crashes_of(doc)}
    out.summary += f" (crash {crashes_of(doc)} of it since the last ready)"
    return out


def loop_speakers(taken: list[dict[str, Any]], chats: list[Sink]
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[int, set[str]]]:
    """Of open alerts resolved together, the restart loops (a target's crashes, more than
    one, folded or not, or one crash and its relaunch's stall: before, `details.stalls: 1`
    and no word of it, where 2 crashes and a stall said `2 crashes and 1 stalls`) and, by
    `id`, the crash alerts whose resolution says the loop is over and to which chat sinks:
    the one of the loop's last crash (to none where no chat sink had it), and for each chat
    sink the latest one it had.  Before, only the last
    crash's: where that page was given up for Slack (down then), Slack, which had the
    loop's first crashes, never heard it end."""
    loops: dict[str, list[dict[str, Any]]] = {}
    for doc in taken:
        if doc["kind"] == "crashed":
            loops.setdefault(owner(doc), []).append(doc)
    loops = {t: docs for t, docs in loops.items() if loop_size(docs) + loop_stalls(docs) > 1}
    speaks: dict[int, set[str]] = {}
    for docs in loops.values():
        speaks[id(max(docs, key=last_crash_at))] = set()
        for sink in chats:
            had = [d for d in docs if went_to(d, sink)]
            if had:
                speaks.setdefault(id(max(had, key=last_crash_at)), set()).add(sink.name)
    return loops, speaks
