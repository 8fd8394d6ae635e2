"""A state_dir the daemon cannot write (a full 64 KiB tmpfs, a read-only one): the daemon
keeps running, the crash alert is still sent, every refused write is counted in
`logwatch_state_errors_total{kind}`, and each kind of error is said once, with the place.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from support.receivers import (  # noqa: F401 (daemons, receivers: fixtures)
    append, daemons, free_port, hook, receivers, sim_texts, target, wait_for, write_config,
)

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (the tests run as root, in CI too)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_an_unwritable_state_dir_does_not_stop_the_daemon_or_its_alerts(
        tmp_path: Path, small_tmpfs: Path, receivers, daemons, fault: str) -> None:
    state = small_tmpfs / "state"
    for sub in ("positions", "alerts", "history"):
        (state / sub).mkdir(parents=True)
    if fault == "full":
        import os
        fd = os.open(small_tmpfs / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass                               # ENOSPC: the tmpfs is full
        finally:
            os.close(fd)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    rx = receivers()
    log = tmp_path / "server.log"
    log.write_text("")
    port = free_port()
    cfg = write_config(tmp_path / "logwatch.yaml", port, state,
                       [target("t1", log, labels={"model": "Qwen3-235B"})],
                       [{"type": "webhook", "url": rx.url("/hook"), "on": ["crashed", "ready"]}],
                       checkpoint={"interval": "0.2s"})
    d = daemons(cfg, port).start()
    append(log, "".join(sim_texts(crash="oom")))
    rx.wait(hook("crashed", "firing"), status=200, timeout=20, alive=d.dead,
            what="the crash alert, with no state saved")
    wait_for(lambda: (d.metric("logwatch_state_errors_total", kind="positions") or 0) >= 2, 10,
             "refused checkpoints counted", alive=d.dead)
    assert (d.metric("logwatch_state_errors_total", kind="alerts") or 0) >= 1
    err = d.stderr()
    why = "No space left on device" if fault == "full" else "Read-only file system"
    for kind in ("positions", "alerts"):
        said = [ln for ln in err.splitlines() if f"cannot save {kind} state in" in ln]
        assert len(said) == 1, f"{kind}: said {len(said)} times\n{err[-3000:]}"
        assert why in said[0] and str(state) in said[0], said[0]
    assert d.get("/healthz")[0] == 200
    t = d.target("t1")
    assert t is not None and t["phase"] == "crashed"
    assert d.stop() == 0
