"""Issue 2 benchmark: gateway (embedded broker) vs ActiveMQ's STOMP connector.

One producer, one consumer, 100-byte bodies, non-persistent; first with
auto ack, then with client ack (an ACK per message).  The same raw-socket
load generator drives both servers in the same run; the ratio is
gateway / ActiveMQ.

Run: ``.venv/bin/python -m bench.bench_throughput [COUNT]``
"""

from __future__ import annotations

import sys
import uuid

from bench.common import activemq_server, gateway_server, report
from bench.stomp_load import Workload, run_pair


def measure(address: tuple[str, int], count: int, ack: str) -> float:
    run_pair(address, Workload(f"/queue/warmup.{uuid.uuid4().hex}", count=min(count, 5000), ack=ack))
    rates = [run_pair(address, Workload(f"/queue/bench.{uuid.uuid4().hex}", count=count, ack=ack))
             for _ in range(2)]
    return max(rates)


def main(count: int = 50_000) -> None:
    results: dict[str, float] = {}
    with gateway_server() as gateway:
        for ack in ("auto", "client"):
            results[f"gateway {ack} ack"] = measure(gateway.address, count, ack)
    with activemq_server() as broker:
        for ack in ("auto", "client"):
            results[f"activemq {ack} ack"] = measure(("127.0.0.1", broker.stomp_port), count, ack)
    for ack in ("auto", "client"):
        report(
            f"STOMP throughput, {count} x 100 B, non-persistent, {ack} ack (1 producer, 1 consumer)",
            [(name, results[name]) for name in (f"activemq {ack} ack", f"gateway {ack} ack")],
            f"activemq {ack} ack",
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
