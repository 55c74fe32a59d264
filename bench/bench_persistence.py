"""Issue 3 benchmark: persistent SENDs, gateway (SQLite store) vs ActiveMQ (KahaDB).

Persistent 100-byte messages to a queue nobody consumes, so every one is
written to disk: with a receipt for every SEND (one producer, each SEND waits
for its RECEIPT), with a receipt every 100 SENDs (pipelined), and with four
producers that each wait for every RECEIPT (the case group commit is for:
their writes share commits).  Both servers sync to disk before the receipt
(the gateway's ``synchronous = FULL``, KahaDB's journal sync).  The same
raw-socket load generator drives both in the same run; the ratio is
gateway / ActiveMQ.  Both servers run at once and the measurements
alternate (best of three), so other load on the machine hits both alike.

Run: ``.venv/bin/python -m bench.bench_persistence [SCALE]`` (SCALE multiplies the message counts).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import sys
import time
import uuid
from collections.abc import Callable

from bench.common import activemq_server, gateway_server, host_state, report, warm_up
from bench.stomp_load import Workload, produce, send_rate

SQLITE = ["--set", 'broker.persistence="sqlite"']
PRODUCERS = 4


def _produce_one(address: tuple[str, int], work: Workload, start: object, done: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    produce(address, work)
    done.put(time.perf_counter())  # type: ignore[attr-defined]


def concurrent_rate(address: tuple[str, int], count: int, producers: int = PRODUCERS) -> float:
    """``producers`` processes, each sending ``count`` messages with a receipt per SEND."""
    context = mp.get_context("fork")
    start = context.Event()
    done = context.Queue()
    processes = [
        context.Process(
            target=_produce_one,
            args=(address, Workload(f"/queue/bench.{uuid.uuid4().hex}", count=count, persistent=True,
                                    receipt_every=1), start, done),
            daemon=True,
        )
        for _ in range(producers)
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # let them connect
    began = time.perf_counter()
    start.set()
    finished: float = max(done.get(timeout=600) for _ in processes)
    for process in processes:
        process.join(10)
    return producers * count / (finished - began)


def cases(scale: float) -> dict[str, Callable[[tuple[str, int]], float]]:
    each = int(2_000 * scale)
    windowed = int(20_000 * scale)

    def per_send(address: tuple[str, int]) -> float:
        return send_rate(address, Workload(f"/queue/bench.{uuid.uuid4().hex}", count=each, persistent=True,
                                           receipt_every=1))

    def every_100(address: tuple[str, int]) -> float:
        return send_rate(address, Workload(f"/queue/bench.{uuid.uuid4().hex}", count=windowed, persistent=True,
                                           receipt_every=100))

    def concurrent(address: tuple[str, int]) -> float:
        return concurrent_rate(address, each // 2)

    return {
        "receipt per SEND": per_send,
        "receipt every 100 SENDs": every_100,
        f"{PRODUCERS} producers, receipt per SEND": concurrent,
    }


def main(scale: float = 1.0, rounds: int = 3, rounds_to_warm: int = 8) -> None:
    """Both servers run side by side; the measurements alternate and the best of ``rounds`` counts,
    so load from other processes on the machine hits both alike.  ActiveMQ runs with the JVM's full JIT
    and each case is first run at half size on each server until its rate stops rising (at most
    ``rounds_to_warm`` times), as :mod:`bench.bench_throughput` does: until 2026-11-28 evening ActiveMQ
    stopped at C1 and had one round of 1,000 messages, which flattered the gateway."""
    best: dict[tuple[str, str], float] = {}
    with gateway_server(args=SQLITE) as gateway, activemq_server(kahadb=True, full_jit=True) as broker:
        servers = {"gateway sqlite": gateway.address, "activemq kahadb": ("127.0.0.1", broker.stomp_port)}
        print(f"host: {host_state()}; ActiveMQ as Debian ships its STOMP port, KahaDB, full JIT (C2)", flush=True)
        for case, run in cases(scale / 2).items():  # (each case warmed on each server until its rate is flat)
            for server, address in servers.items():
                rates = warm_up(functools.partial(run, address), max_rounds=rounds_to_warm)
                print(f"  warm-up {server}, {case}: " + ", ".join(f"{rate:.0f}" for rate in rates), flush=True)
        for _ in range(rounds):
            for case, run in cases(scale).items():
                for server, address in servers.items():
                    rate = run(address)
                    best[server, case] = max(rate, best.get((server, case), 0.0))
    for case in cases(scale):
        report(
            f"persistent SEND, 100 B, {case} (gateway SQLite WAL synchronous=FULL vs ActiveMQ KahaDB)",
            [(f"activemq kahadb, {case}", best["activemq kahadb", case]),
             (f"gateway sqlite, {case}", best["gateway sqlite", case])],
            f"activemq kahadb, {case}",
        )


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
