"""Replay of a large generated SGLang log (bench/genlog.py, the generator `make bench` uses)
against the truth file the generator writes: 3 startups, a CUDA OOM, the last shard count."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.integration  # daemons, sshd, receivers or subprocesses: `make test` only


def test_replay_json_matches_genlog_truth(tmp_path):
    log, truth = tmp_path / "gen.log", tmp_path / "gen.truth.json"
    with open(log, "wb") as out:
        subprocess.run([sys.executable, str(ROOT / "bench" / "genlog.py"), "--lines", "200000",
                        "--seed", "1", "--tp", "8", "--crash", "oom", "--restarts", "2",
                        "--truth", str(truth)], stdout=out, check=True)
    t = json.loads(truth.read_text())
    proc = subprocess.run([sys.executable, "-m", "logwatch", "replay", "--json", str(log)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    doc = json.loads(proc.stdout)
    assert doc["engine"] == "sglang"
    assert doc["phase"] == "crashed"
    assert doc["crash"]["reason"] == "cuda_oom"
    assert doc["crash"]["during"] == "ready"
    assert doc["crash"]["line"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert doc["startups"] == t["phase"]["server_args"] == 3
    assert doc["shards_loaded"] == t["shards_loaded"]
    assert doc["shards_total"] == t["shards_total"]
    assert doc["lines"] == t["lines"] == 200000
    assert doc["ready_line"].endswith("The server is fired up and ready to roll!")
    # the crash line is the physical line the JSON says
    with open(log, "rb") as f:
        for i, raw in enumerate(f, 1):
            if i == doc["crash"]["line_number"]:
                assert raw.decode().rstrip("\n") == doc["crash"]["line"]
                break
