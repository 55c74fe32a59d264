"""What every benchmark shares: starting the servers it compares, and printing.

Benchmarks print a table of rates and the ratio against the reference that
was measured in the same run on the same machine; they assert nothing.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
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
def activemq_server(kahadb: bool = False, stomp_no_delay: bool = False) -> Iterator[ActiveMQBroker]:
    with tempfile.TemporaryDirectory(prefix="bench-amq-") as workdir:
        broker = ActiveMQBroker(workdir, kahadb=kahadb, heap="1g", stomp_no_delay=stomp_no_delay).start()
        try:
            yield broker
        finally:
            broker.stop()


def report(title: str, rows: list[tuple[str, float]], reference: str) -> None:
    """Print rates and each one's ratio to the ``reference`` row."""
    base = dict(rows)[reference]
    print(f"\n{title}")
    print(f"  {'case':<52} {'msg/s':>10} {'ratio':>8}")
    for name, rate in rows:
        print(f"  {name:<52} {rate:>10.0f} {rate / base:>8.2f}")
