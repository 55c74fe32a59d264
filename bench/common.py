"""What every benchmark shares: starting the servers it compares, the host's
state, warming a server up, and printing.

Benchmarks print a table of rates and the ratio against the reference that
was measured in the same run on the same machine; they assert nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.support.activemq import ActiveMQBroker
from tests.support.gateway import GatewayProcess


@contextlib.contextmanager
def gateway_server(extra_config: str = "", args: list[str] | None = None) -> Iterator[GatewayProcess]:
    with tempfile.TemporaryDirectory(prefix="bench-gw-") as workdir:
        process = GatewayProcess(Path(workdir), extra_config, args=args).start()
        try:
            yield process
        finally:
            process.stop()


@contextlib.contextmanager
def activemq_server(kahadb: bool = False, stomp_no_delay: bool = False,
                    full_jit: bool = False) -> Iterator[ActiveMQBroker]:
    with tempfile.TemporaryDirectory(prefix="bench-amq-") as workdir:
        broker = ActiveMQBroker(workdir, kahadb=kahadb, heap="1g", stomp_no_delay=stomp_no_delay,
                                full_jit=full_jit).start()
        try:
            yield broker
        finally:
            broker.stop()


def host_state() -> str:
    """Date, cores and load average: what a reader needs to judge the figures."""
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{now}, {os.cpu_count()} cores, load average {load} (1, 5, 15 min)"


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds process ``pid`` has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` has used."""
    return sum(cpu_times(pid))


def warm_up(run: Callable[[], float], *, max_rounds: int, min_rounds: int = 2, gain: float = 0.03) -> list[float]:
    """Call ``run`` (returns a rate) until the best rate stops rising by more than
    ``gain`` for two rounds in a row, at most ``max_rounds`` times; the rates seen."""
    rates: list[float] = []
    best = 0.0
    flat = 0
    while len(rates) < max_rounds:
        rate = run()
        rates.append(rate)
        if rate > best * (1 + gain):
            best, flat = rate, 0
        else:
            flat += 1
        if flat >= 2 and len(rates) >= min_rounds:
            break
    return rates


def report(title: str, rows: list[tuple[str, float]], reference: str) -> None:
    """Print rates and each one's ratio to the ``reference`` row."""
    base = dict(rows)[reference]
    print(f"\n{title}")
    print(f"  {'case':<52} {'msg/s':>10} {'ratio':>8}")
    for name, rate in rows:
        print(f"  {name:<52} {rate:>10.0f} {rate / base:>8.2f}")
