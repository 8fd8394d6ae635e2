"""/metrics built incrementally (sinks/metrics.py `MetricsCache`, issue 17).

A target's samples are rendered again only when its key changes; the others are reused as
they were; a removed target disappears; the exposition is valid (`promtool check metrics`,
prometheus_client's parser) and holds what the views say, label values escaped.  Speed is
measured in `make bench` (bench/metrics_scrape.py), not here.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES
from support.daemon import daemons, free_port, parse_metrics, sample, target_cfg, targets_in  # noqa: F401
from support.daemon import write_config
from prometheus_client.parser import text_string_to_metric_families

from logwatch.pipeline import LogPipeline
from logwatch.rules.pack import load_pack
from logwatch.sinks.metrics import MetricsCache, counted_of
from logwatch.view import TargetView, pipeline_view

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


class Source:
    """A target as /metrics reads it, with a key the test controls and a count of views."""

    def __init__(self, view: TargetView, key: Any = 0) -> None:
        self.name = view.name
        self._view = view
        self.key = key
        self.views = 0
        self.age = 1.5

    def metrics_key(self, now: float) -> Any:
        return self.key

    def view(self, now: float) -> TargetView:
        self.views += 1
        return self._view

    def position_age(self) -> float:
        return self.age

    def counted(self):
        return counted_of(self._view)


def fixture_view(name: str, **changes: Any) -> TargetView:
    pipe = LogPipeline(load_pack(name.split("-")[0]))
    pipe.feed((FIXTURES / f"{name}.log").read_bytes(), 1000.0)
    pipe.finish(1000.0)
    return dataclasses.replace(pipeline_view(name, pipe, now=1000.0), **changes)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_only_changed_targets_are_rendered_again() -> None:
    srcs = [Source(fixture_view("sglang-027")), Source(fixture_view("vllm-027")),
            Source(fixture_view("sglang-205", labels={"model": 'a "quoted\\ name\n'}))]
    cache = MetricsCache()
    first = cache.render(srcs, None, now=1000.0).decode()
    assert cache.rebuilt == 3 and [s.views for s in srcs] == [1, 1, 1]
    again = cache.render(srcs, None, now=1001.0).decode()
    assert cache.rebuilt == 3 and [s.views for s in srcs] == [1, 1, 1]   # nothing rebuilt
    assert again == first
    srcs[1].key = 1                      # one target changed: only it is built again
    srcs[0].age = 7.0                    # the position age is always fresh
    third = cache.render(srcs, None, now=1002.0).decode()
    assert cache.rebuilt == 4 and [s.views for s in srcs] == [1, 2, 1]
    got = samples(third)
    assert got[("logwatch_position_age_seconds", (("target", "sglang-027"),))] == 7.0
    # a removed target disappears
    fourth = samples(cache.render(srcs[1:], None, now=1003.0).decode())
    assert not any(dict(labels).get("target") == "sglang-027" for _, labels in fourth)


def test_the_exposition_holds_what_the_views_say_and_promtool_accepts_it() -> None:
    crashed = fixture_view("sglang-027")
    ready = fixture_view("vllm-027", probe={"up": True, "duration": 0.012},
                         labels={"model": 'a "quoted\\ name\n'})
    text = MetricsCache().render([Source(crashed), Source(ready)], None, now=1000.0).decode()
    got = samples(text)

    def one(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert one("logwatch_phase", target="sglang-027", phase="crashed") == 1.0
    assert one("logwatch_phase", target="sglang-027", phase="ready") == 0.0
    assert one("logwatch_ready", target="vllm-027") == 1.0
    assert one("logwatch_crashes_total", target="sglang-027", reason="cuda_oom") == 1.0
    assert one("logwatch_lines_total", target="sglang-027") == crashed.counters.lines
    assert one("logwatch_probe_up", target="vllm-027") == 1.0
    assert one("logwatch_startup_eta_seconds", target="vllm-027") == ready.eta_seconds == 0.0
    assert math.isnan(one("logwatch_gen_throughput_tokens_per_second", target="sglang-027"))
    assert one("logwatch_target_info", target="vllm-027", engine="vllm", source="file",
               model='a "quoted\\ name\n') == 1.0
    assert ("logwatch_probe_up", (("target", "sglang-027"),)) not in got    # not probed
    assert one("logwatch_startup_duration_seconds_bucket", target="vllm-027", le="+Inf") == \
        one("logwatch_startup_duration_seconds_count", target="vllm-027")
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr


def test_counted_series_move_at_every_scrape_without_a_rebuild() -> None:
    """Lines, bytes, rule matches and serving values are read at each scrape (a serving
    target has new lines at nearly every one): they move while the target's block is reused,
    and a rule's series is written again only when its count moved."""
    view = fixture_view("vllm-027")
    src = Source(view)
    cache = MetricsCache()
    cache.render([src], None, now=1000.0)
    rid = next(r for r in view.rules if view.counters.rule_matches.get(r))
    view.counters.lines += 7
    view.counters.bytes += 700
    view.counters.rule_matches[rid] += 3
    view.stats["gen_throughput"] = 4321.5
    got = samples(cache.render([src], None, now=1001.0).decode())
    assert cache.rebuilt == 1 and src.views == 1                 # the block was reused
    tgt = (("target", "vllm-027"),)
    assert got[("logwatch_lines_total", tgt)] == view.counters.lines
    assert got[("logwatch_bytes_read_total", tgt)] == view.counters.bytes
    assert got[("logwatch_rule_matches_total", (("rule", rid), *tgt))] == \
        view.counters.rule_matches[rid]
    assert got[("logwatch_gen_throughput_tokens_per_second", tgt)] == 4321.5
    # the same exposition as a cache that renders everything from the view
    assert cache.render([src], None, now=1002.0) == MetricsCache().render([src], None, now=1002.0)


def test_a_subset_scrape_holds_only_its_targets_and_keeps_the_others_cached() -> None:
    """`/metrics?target=A`: A's series only, without the daemon's own families; the other
    targets' blocks stay cached for the next full scrape."""
    srcs = [Source(fixture_view("sglang-027")), Source(fixture_view("vllm-027"))]
    cache = MetricsCache()
    full = cache.render(srcs, None, now=1000.0)
    part = cache.render(srcs[1:], None, now=1001.0, subset=True).decode()
    names = {dict(labels).get("target") for _, labels in samples(part)}
    assert names == {"vllm-027"}
    assert "logwatch_alerts_sent_total" not in part
    assert [s.views for s in srcs] == [1, 1] and cache.rebuilt == 2
    assert cache.render(srcs, None, now=1000.0) == full     # sglang-027 was not forgotten
    assert cache.rebuilt == 2 and [s.views for s in srcs] == [1, 1]
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=part, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_daemon_serves_metrics_for_chosen_targets(tmp_path: Path, daemons: Any) -> None:  # noqa: F811
    logs = {}
    for name in ("node1", "node2", "node3"):
        logs[name] = tmp_path / f"{name}.log"
        logs[name].write_bytes((FIXTURES / "sglang-027.log").read_bytes())
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state",
                       [target_cfg(n, p, from_start=True, gpu=False) for n, p in logs.items()])
    d = daemons(cfg, port).start()
    for name in logs:
        d.wait_target(name, lambda t: t["phase"] == "crashed", "crashed", timeout=30)
    code, body = d.get("/metrics?target=node2&target=node3&target=node2")
    assert code == 200, body
    got = parse_metrics(body)
    assert targets_in(got) == {"node2", "node3"}
    assert sample(got, "logwatch_phase", target="node3", phase="crashed") == 1.0
    assert "logwatch_alerts_sent_total" not in body and body.count("# TYPE logwatch_phase ") == 1
    assert targets_in(d.metrics()) == {"node1", "node2", "node3"}     # the full scrape
    assert "logwatch_alerts_sent_total" in d.metrics_text()
    code, body = d.get("/metrics?target=nope")
    assert code == 404 and "nope" in body
