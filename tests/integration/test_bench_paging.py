"""``bench.bench_paging --quick`` runs both parts end to end (a backlog of ten times
``memory_limit`` sent and drained on the paged gateway, the in-memory one and ActiveMQ;
a restart with a persistent backlog).  No figure is asserted (they are the benchmark's
printed ratios): the test guards the benchmark's code path."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.gateway import REPO

SERVERS = ("gateway, memory_limit 1 MB (paged)", "gateway, everything in memory (reference)",
           "activemq, memoryUsage 1 MB, KahaDB")


@pytest.mark.activemq
def test_quick_run_prints_rates_and_ratios_for_every_server_and_the_restart() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "bench.bench_paging", "--quick"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    number = r"\d+(\.\d+)?"
    for server in SERVERS:
        rows = [line for line in done.stdout.splitlines() if line.strip().startswith(server)]
        assert len(rows) == 2, f"{server!r}: {rows}\n{output}"  # non-persistent and persistent
        for row in rows:  # SEND, drain, their ratios to the in-memory gateway, peak RSS
            assert re.search(rf"{number}\s+{number}\s+{number}\s+{number}\s+({number} MB|-)\s*$", row), row
    assert len(re.findall(r"paging costs -?\d+% of the in-memory SEND rate and -?\d+% of its drain rate",
                          done.stdout)) == 2, output
    assert re.search(r"start until it listens: \d+\.\d s", done.stdout), output
    assert re.search(r"RSS after the restart: \d+ MB when listening", done.stdout), output
    assert "queue depth in /status: 10000" in done.stdout, output
