"""The daemon with SSH targets against a real sshd (tests/support/sshd.py) and a real webhook
receiver (tests/support/receivers.py): what an SSH fault does to the pages an operator gets.

Nothing here sleeps to synchronise: the receiver's `wait` and the daemon's `wait_target` poll
with a deadline; `assert_quiet` windows are the bounded negative checks (a page that must
not come has no event to wait for).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from support.daemon import daemons, free_port, sim_texts, target_cfg, write_config  # noqa: F401
from support.receivers import hook, receivers  # noqa: F401  (the fixture)
from support.sshd import SSHServer, sshd_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers: `make test` only


def ssh_target(server: SSHServer, name: str, path: Path, **kw: Any) -> dict[str, Any]:
    """A daemon target reading `path` on the test sshd, without GPU stream or probe."""
    ssh = {"known_hosts": str(server.known_hosts), "client_keys": [str(server.client_key)]}
    return target_cfg(name, server.url(path), ssh=ssh, gpu=False, probe=False, **kw)


def test_a_job_directory_made_later_is_waited_for_and_its_crash_paged(
        sshd_server: SSHServer, tmp_path: Path, daemons: Any, receivers: Any) -> None:  # noqa: F811
    """A job's own directory is made when the job starts (`/jobs/job-8/server.log`).  The
    daemon waits for it as for a local one, and the crash the job writes is paged at once.
    Before: "no such directory" was fatal, tried again after 120 s (FATAL_RETRY_BASE), a
    `source_down` page meanwhile, and the crash written in those 2 minutes was read as
    history: never paged."""
    rx = receivers()
    job = tmp_path / "jobs" / "job-8"
    job.parent.mkdir()
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, tmp_path / "state", [
        ssh_target(sshd_server, "job", job / "server.log", source_down_after="2s"),
    ], alerts=[{"type": "webhook", "url": rx.url(), "on": ["crashed", "source_down"]}])
    d = daemons(cfg, port).start()
    t = d.wait_target("job", lambda t: "no such directory yet" in t["source_state"]["message"],
                      "waiting for the job's directory", timeout=30)
    assert t["source_state"]["state"] == "waiting", t["source_state"]
    job.mkdir()
    (job / "server.log").write_text("".join(sim_texts(crash="oom")), encoding="utf-8")
    t0 = time.monotonic()
    got = rx.wait(hook("crashed", "firing", "job"), timeout=30, alive=d.dead, what="the crash")
    took = time.monotonic() - t0
    assert "cuda_oom" in got[0].json["summary"], got[0].json
    assert took < 15, took
    rx.assert_quiet(3.0, hook("source_down"), "for a directory not made yet")
    assert len(rx.requests(hook("crashed", "firing", "job"))) == 1   # once

