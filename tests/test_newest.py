"""Which file a pattern target reads (sources/newest.py), decided without files."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from logwatch.sources import SourceError, make_source
from logwatch.sources.newest import (
    SORT_RUN, Listing, Match, NewestFile, check_pattern, is_pattern, matching, newest_first,
    pattern_problem,
)

S = 1_000_000_000   # a second in nanoseconds


def m(name: str, ino: int, t: int) -> Match:
    return Match(name, 1, ino, t * S)


def choose(n: NewestFile, matches: list[Match]) -> Match | None:
    """`n.choose` over the matches as a listing keeps them (newest first)."""
    return n.choose(Listing.of(matches))


def every_match_weighed(n: NewestFile, matches: list[Match]) -> Match | None:
    """What `choose` decides, the long way: the newest of every match that may be read
    (the walk it replaced, which held the event loop over 60,000 files)."""
    reading = n.reading
    floor, seen = n._floor, n._reading_mtime
    for x in matches:     # the file read, listed written since: its write is the floor too
        if reading is not None and reading.ino is not None and x.key == reading.key:
            seen = x.mtime_ns if seen is None else max(seen, x.mtime_ns)
    if seen is not None:
        floor = seen if floor is None else max(floor, seen)
    best = None
    for x in matches:
        if x.key in n._left:
            continue
        ours = reading is not None and x.key == reading.key
        if not ours and floor is not None and (x.mtime_ns < floor if x.ino is None
                                               else x.mtime_ns <= floor):
            continue
        if best is None or (x.mtime_ns, x.name) > (best.mtime_ns, best.name):
            best = x
    return best


def test_what_is_a_pattern() -> None:
    assert is_pattern("/logs/server-*.log") and is_pattern("/logs/slurm-?.out")
    assert is_pattern("/logs/run[0-9].log")
    assert not is_pattern("/logs/server.log") and not is_pattern("/lo*gs/server.log")
    assert pattern_problem("/logs/*/server.log") is not None
    with pytest.raises(SourceError, match=r"only be in the file name.*\[\[\]"):
        check_pattern("/logs/run-*/server-*.log")
    with pytest.raises(SourceError, match="only be in the file name"):
        make_source("/logs/run-*/server-*.log")


def test_matching_names_hide_dot_files_as_a_shell_does() -> None:
    names = ["server-1.log", ".server-2.log", "server-3.log.1", "server.log", "other-4.log"]
    assert matching("/l/server-*.log", names) == ["server-1.log"]
    assert matching("/l/.server-*", names) == [".server-2.log"]
    assert matching("/l/server-[[]1].log", ["server-[1].log", "server-1.log"]) == \
        ["server-[1].log"]
    # logrotate's archives are finished logs, never the newest one being written
    assert matching("/l/server.log*", ["server.log", "server.log.1", "server.log.2.gz",
                                       "server.log.3.XZ"]) == ["server.log", "server.log.1"]


def test_the_newest_is_the_last_written_then_the_name_sorting_last() -> None:
    n = NewestFile()
    assert choose(n, []) is None
    assert choose(n, [m("a.log", 1, 10), m("b.log", 2, 30), m("c.log", 3, 20)]).name == "b.log"
    assert choose(n, [m("a.log", 1, 30), m("b.log", 2, 30)]).name == "b.log"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10**6)), max_size=3 * SORT_RUN + 7,
                unique_by=lambda t: t[1]))
def test_a_listing_sorted_in_runs_is_the_one_sort_s_order(keys: list[tuple[int, int]]) -> None:
    """`newest_first` merges runs (a long sort held the event loop's thread): the order is the
    one a single sort gives, ties in time to the name sorting last, across runs too."""
    rows = [(t * S, f"slurm-{n}.out", 1, i) for i, (t, n) in enumerate(keys)]
    assert newest_first(rows) == sorted(rows, reverse=True)


def test_a_listing_of_many_runs_is_the_one_sort_s_order() -> None:
    rows = [((i * 7919) % 97 * S, f"slurm-{(i * 104729) % 100_003}.out", 1, i)
            for i in range(5 * SORT_RUN + 11)]
    assert newest_first(rows) == sorted(rows, reverse=True)
    assert newest_first(rows)[0][0] == 96 * S


def test_a_newer_file_takes_over_and_the_left_one_is_never_chosen_again() -> None:
    n = NewestFile()
    a = m("a.log", 1, 10)
    n.read(a)
    # the file read, written on: still the one
    assert choose(n, [m("a.log", 1, 20)]) == m("a.log", 1, 20)
    # a relaunch writes b: b is the newest
    b = m("b.log", 2, 25)
    assert choose(n, [m("a.log", 1, 20), b]) == b
    n.left(a)
    n.read(b)
    # the old server writes to a again: a was left, b stays
    assert choose(n, [m("a.log", 1, 40), m("b.log", 2, 30)]).name == "b.log"


def test_an_older_file_is_never_taken_for_the_newest() -> None:
    """The followed file deleted: an old launch's log is not the newest (it waits)."""
    n = NewestFile()
    n.read(m("c.log", 3, 50))
    assert choose(n, [m("c.log", 3, 60), m("a.log", 1, 10)]).name == "c.log"
    assert choose(n, [m("a.log", 1, 10), m("b.log", 2, 55)]) is None   # c deleted
    assert choose(n, [m("a.log", 1, 10), m("d.log", 4, 61)]).name == "d.log"


def test_found_again_after_a_restart_the_rest_are_read_in_order() -> None:
    """After a restart: the newest was opened, ours found among the matches (read), and
    the files between are read and left in order; the newest is then still the newest."""
    n = NewestFile()
    newest, ours, between = m("c.log", 3, 50), m("a.log", 1, 10), m("b.log", 2, 30)
    n.read(newest)
    n.read(ours)
    n.left(ours)
    n.read(between)
    n.left(between)
    assert choose(n, [ours, between, newest]) == newest


def test_files_left_are_remembered_within_a_bound() -> None:
    n = NewestFile()
    for i in range(1000):
        n.left(m(f"{i}.log", i, i))
    assert len(n._left) <= 256
    # the bound forgets the oldest, and the floor still keeps them out
    assert choose(n, [m("0.log", 0, 0)]) is None


def test_without_inodes_a_name_left_may_name_a_new_file() -> None:
    """SFTP without the streamed reader has no inode: the name tells files apart, and a
    name left names a new file when it was written after what was read (a rename rotation
    made a new file of that name); older ones stay out."""
    n = NewestFile()
    a, b = Match("a.log", None, None, 10 * S), Match("b.log", None, None, 20 * S)
    n.read(a)
    assert choose(n, [a, b]) == b
    n.left(a)
    n.read(b)
    n.left(b)
    # b.log of b's second may be a new file of that name (whole seconds): taken; a.log is older
    assert choose(n, [Match("a.log", None, None, 15 * S), b]) == b
    assert choose(n, [Match("a.log", None, None, 15 * S)]) is None
    assert choose(n, [Match("b.log", None, None, 30 * S)]) == Match("b.log", None, None, 30 * S)


def test_a_kept_listing_serves_while_the_directory_is_unchanged() -> None:
    n = NewestFile()
    listing = [m("a.log", 1, 10)]
    assert n.cached(5.0, 100.0) is None
    n.keep(5.0, 100.0, listing)
    assert n.cached(5.0, 105.0) is listing
    assert n.cached(6.0, 105.0) is None            # a file created, renamed or removed
    assert n.cached(5.0, 111.0) is None            # and at least every LISTING_FOR seconds
    n.keep(None, 120.0, listing)                   # no directory mtime: never kept
    assert n.cached(None, 120.0) is None
    # a listing that took 0.6 s (100,000 files) serves 6 s, changed directory or not
    n.keep(5.0, 200.0, listing, took=0.6)
    assert n.cached(7.0, 205.9) is listing and n.cached(7.0, 206.1) is None


def test_a_fresh_stat_of_the_file_read_keeps_the_floor_while_the_listing_is_old() -> None:
    """The listing says a.log was last written at 10; a look saw it written at 50; it is
    deleted: b.log, written at 30, is older than what was read, never the newest."""
    n = NewestFile()
    n.read(m("a.log", 1, 10))
    n.wrote(m("a.log", 1, 50))
    n.wrote(m("b.log", 2, 70))                     # not the file read: no effect
    assert choose(n, [m("a.log", 1, 10), m("b.log", 2, 30)]).name == "a.log"
    assert choose(n, [m("b.log", 2, 30)]) is None
    assert choose(n, [m("b.log", 2, 30), m("c.log", 3, 60)]).name == "c.log"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["list", "read", "leave", "delete", "write"]),
                          st.integers(0, 7), st.integers(1, 1000)), max_size=60))
# the file read written again in the second of a newer one: a tie, the one read stays
@example([("write", 4, 1), ("read", 0, 1), ("write", 5, 2), ("write", 4, 2)])
def test_never_back_to_a_file_left_nor_to_an_older_one(steps: list[tuple[str, int, int]]) -> None:
    """Whatever a directory does (files written, deleted, read, left), the choice is never a
    file left, never one older than the newest write seen of the files read, and a choice
    is always among the matches listed."""
    files: dict[int, int] = {}        # ino -> mtime (seconds)
    n = NewestFile()
    left: set[int] = set()
    seen_read = 0                     # the newest write of a file read, as the sources see it
    for op, ino, t in steps:
        if op == "write":
            files[ino] = max(files.get(ino, 0), t)
        elif op == "delete":
            files.pop(ino, None)
        matches = [m(f"{i}.log", i, t) for i, t in files.items()]
        expected = every_match_weighed(n, matches)
        chosen = choose(n, matches)
        assert chosen == expected
        if chosen is not None:
            assert chosen in matches
            assert chosen.ino not in left
            if n.reading is None or chosen.key != n.reading.key:
                assert seen_read == 0 or chosen.mtime_ns > seen_read
        if op == "read" and chosen is not None:
            n.read(chosen)
            seen_read = max(seen_read, chosen.mtime_ns)
        elif op == "leave" and n.reading is not None:
            r = n.reading
            n.left(r)
            left.add(r.ino)
            seen_read = max(seen_read, r.mtime_ns)
        elif n.reading is not None and n.reading.ino in files and n.reading.ino not in left:
            seen_read = max(seen_read, files[n.reading.ino] * S)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["read", "leave", "delete", "write"]),
                          st.integers(0, 5), st.integers(1, 40)), max_size=40))
def test_by_name_alone_the_walk_decides_as_every_match_weighed(
        steps: list[tuple[str, int, int]]) -> None:
    """SFTP without inodes (a name is the file; whole seconds, so ties at the floor): the
    walk that stops at the first file that may be read chooses what weighing all did."""
    files: dict[int, int] = {}
    n = NewestFile()
    for op, i, t in steps:
        if op == "write":
            files[i] = max(files.get(i, 0), t)
        elif op == "delete":
            files.pop(i, None)
        matches = [Match(f"{k}.log", None, None, v * S) for k, v in files.items()]
        expected = every_match_weighed(n, matches)
        chosen = choose(n, matches)
        assert chosen == expected
        if op == "read" and chosen is not None:
            n.read(chosen)
        elif op == "leave" and n.reading is not None:
            n.left(n.reading)


def test_sixty_thousand_matches_are_decided_without_walking_them() -> None:
    """A SLURM directory of 60,000 outputs, the newest read: a look decides at the top of
    the listing (the walk of them all held the event loop 40-200 ms on every look)."""
    import time
    n = NewestFile()
    listing = Listing.of(m(f"slurm-{i}.out", i, 1000 + i) for i in range(60_000))
    newest = next(iter(listing))
    assert newest.name == "slurm-59999.out"
    n.read(newest)
    t0 = time.perf_counter()
    for _ in range(100):
        assert n.choose(listing) == newest
    assert time.perf_counter() - t0 < 0.5     # the whole walk: ~2 s for 100 looks here


def test_a_listing_kept_is_out_of_the_collector_s_sight() -> None:
    """60,000 matches kept as `Match` objects were 60,000 objects each full collection walked
    (0.21-0.27 s of the event loop in the suite's process, a listing setting one off); kept as
    tuples of numbers and strings, the collector drops them from its sight once seen."""
    import gc
    listing = Listing.of(m(f"slurm-{i}.out", i, 1000 + i) for i in range(60_000))
    gc.collect()
    assert not any(gc.is_tracked(r) for r in listing.rows)
    assert [x.name for x in NewestFile().newest_first(listing, 2)] == ["slurm-59999.out",
                                                                       "slurm-59998.out"]
