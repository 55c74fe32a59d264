"""``bench.bench_throughput --quick`` runs every workload end to end against the
real gateway and ActiveMQ.  The figures are not asserted (they belong to the
benchmark's printed ratios): the test guards the benchmark's code path."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.gateway import REPO

WORKLOADS = (
    "1→1 queue, auto ack",
    "1→1 queue, client ack",
    "1→1 queue, client-individual ack",
    "4 producers → 4 consumers, 4 queues",
    "topic, 1 producer → 10 subscribers",
    "1→1 queue, 1 KB bodies",
    "1→1 queue, 64 KB bodies",
    "1→1 queue, persistent, receipt every 100",
    "app: 1 process, 2 threads, 1→1 queue, 100 B",
    "app: 1 process, 2 threads, 1→1 queue, 1 KB",
)


@pytest.mark.activemq
def test_quick_run_prints_a_ratio_for_every_workload_and_latencies() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "bench.bench_throughput", "--quick"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    number = r"\d+(\.\d+)?"
    for name in WORKLOADS:
        line = next((line for line in done.stdout.splitlines() if name in line), None)
        assert line is not None, f"no line for {name!r}:\n{output}"
        # gateway, ActiveMQ with tcpNoDelay, ActiveMQ as shipped, the ratio against the better of the two
        assert re.search(rf"{number}\s+{number}\s+{number}\s+{number}\s*$", line), line
    assert "warm-up activemq" in done.stdout and "warm-up amq-shipped" in done.stdout, output
    assert "full JIT" in done.stdout and "consumers count the frames" in done.stdout, output
    assert done.stdout.count("x the better ActiveMQ is") == len(WORKLOADS), output
    assert done.stdout.count("MESSAGEs per client read: gateway") == 2, output  # (the app shape's reads)
    latency_rows = [line for line in done.stdout.splitlines()
                    if re.match(rf"\s+(gateway|activemq|amq-shipped)\s+{number}\s+{number}\s+{number}\s*$", line)]
    assert len(latency_rows) == 6, output  # the three servers at half and at a tenth of the peak
