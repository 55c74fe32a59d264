"""Paging's cost in one process, without sockets: CPU-µs per message, paged vs in memory.

The in-process counterpart of :mod:`bench.bench_paging`: the gateway's own objects
(:class:`gateway.app.Gateway` from the shipped config, SQLite store by default, on a
:class:`twisted.internet.task.Clock` whose ``callFromThread`` the loop below runs) with
STOMP 1.2 clients on :class:`bench.hotpath_inprocess.SinkTransport`.  A backlog of 1 KB
messages is sent into a queue without consumers (SEND phase: 200-frame reads, as
:mod:`bench.stomp_load` writes them; persistent ones with a receipt every 100), then one
auto-ack consumer (prefetch 1000) drains it (drain phase).  Each phase's CPU time
(``time.process_time``: every thread of the process, the store's writer thread too) is
divided by the messages, once with a ``memory_limit`` the backlog passes ``--times`` times
(paged) and once with one far above it (in memory, the reference).  Paging's cost is
``1 - in-memory CPU / paged CPU`` (what the rate would lose when CPU bound).

The kernel's send/recv, the clients' work and fsync waits are not in it.

Run: ``.venv/bin/python -m bench.paging_inprocess [--count N] [--rounds N] [--persistent] [--cprofile PHASE]``
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import tomllib

from bench.common import host_state
from bench.hotpath_inprocess import Client, ThreadedClock
from gateway.app import Gateway
from gateway.config import parse_config
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame
from tests.support.gateway import default_config

BODY = 1024
BATCH = 200
WALL = False


def build(limit: str, persistent: bool) -> tuple[Gateway, ThreadedClock]:
    clock = ThreadedClock()
    workdir = tempfile.mkdtemp(prefix="bench-paging-inprocess-")
    raw = default_config()
    if not persistent:
        raw = raw.replace('# persistence = "sqlite"', 'persistence = "memory"')
    document = tomllib.loads(raw)
    document.setdefault("broker", {})["memory_limit"] = limit
    config = parse_config(document)
    config.gateway.data_dir = workdir
    gateway = Gateway(config, clock)
    started = gateway.start()
    while not started.called:
        clock.turn(0.01)
    return gateway, clock


def feed(client: Client, clock: ThreadedClock, data: bytes) -> None:
    """``data`` as one read; then reactor turns until the client's input is all handled."""
    client.protocol.dataReceived(data)
    while client.transport.readingPaused:  # (input slices still to handle, or reading held by congestion)
        # (waits for the store's writer only when nothing is due: reading held by store congestion)
        now = clock.seconds()
        clock.turn(0.0 if any(call.getTime() <= now for call in clock.getDelayedCalls()) else 0.001)


def run(persistent: bool, limit: str, count: int,
        profile: tuple[str, cProfile.Profile] | None = None) -> tuple[float, float, float, float, int]:
    """(SEND µs, drain µs of CPU per message, the same for the reactor thread alone, messages
    paged out) for ``count`` messages."""
    gateway, clock = build(limit, persistent)
    destination = "/queue/backlog"
    producer = Client(gateway.factory, clock)
    body = b"x" * BODY
    headers = {"destination": destination, "persistent": "true" if persistent else "false"}
    frames = []
    for index in range(BATCH):
        frame_headers = dict(headers)
        if persistent and index % 100 == 99:
            frame_headers["receipt"] = f"r{index}"
        frames.append(encode_frame(Frame("SEND", frame_headers, body), "1.2"))
    chunk = b"".join(frames)
    receipts_wanted = (count // BATCH) * (BATCH // 100) if persistent else 0
    cpu, main_cpu = time.process_time, time.thread_time
    gc.collect()

    def profiling(phase: str) -> cProfile.Profile | None:
        return profile[1] if profile is not None and profile[0] == phase else None

    profiler = profiling("send")
    if profiler is not None:
        profiler.enable()
    started, started_main = cpu(), main_cpu()
    receipts = 0
    for _ in range(count // BATCH):
        feed(producer, clock, chunk)
        receipts += producer.transport.take().count(b"RECEIPT\n")
    while receipts < receipts_wanted:
        clock.turn(0.01)
        receipts += producer.transport.take().count(b"RECEIPT\n")
    send, send_main = cpu() - started, main_cpu() - started_main
    if profiler is not None:
        profiler.disable()
    sent = (count // BATCH) * BATCH
    broker = gateway.broker
    queue_ = broker.queues[destination]
    assert len(queue_) == sent, (len(queue_), sent)
    paged_out = queue_.paged_out

    consumer = Client(gateway.factory, clock)
    gc.collect()
    profiler = profiling("drain")
    if profiler is not None:
        profiler.enable()
    started, started_main, wall = cpu(), main_cpu(), time.perf_counter()
    feed(consumer, clock, encode_frame(Frame("SUBSCRIBE", {
        "destination": destination, "id": "drain", "ack": "auto", "activemq.prefetchSize": "1000"}), "1.2"))
    received = 0
    while received < sent:
        data = consumer.transport.take()
        received += data.count(b"MESSAGE\n")
        if not data:
            clock.turn(0.001)
    while broker.store is not None and clock.run_threaded(0.05):  # (the store's removals, persistent)
        pass
    drain, drain_main = cpu() - started, main_cpu() - started_main
    wall = time.perf_counter() - wall
    if WALL:
        print(f"    (drain wall clock {wall / sent * 1e6:.2f} µs per message, {limit})", flush=True)
    if profiler is not None:
        profiler.disable()
    gateway.stop()
    while clock.run_threaded(0.05):
        pass
    shutil.rmtree(gateway.config.gateway.data_dir, ignore_errors=True)
    return send / sent * 1e6, drain / sent * 1e6, send_main / sent * 1e6, drain_main / sent * 1e6, paged_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.paging_inprocess", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages per round (1 KB)")
    parser.add_argument("--times", type=int, default=10, help="the backlog is this many times memory_limit")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case, alternating (median printed)")
    parser.add_argument("--persistent", action="store_true", help="persistent only (default: both)")
    parser.add_argument("--non-persistent", action="store_true", help="non-persistent only")
    parser.add_argument("--cprofile", choices=("send", "drain"),
                        help="one paged round per kind under cProfile, top functions of that phase")
    parser.add_argument("--wall", action="store_true", help="print each drain's wall-clock time too")
    args = parser.parse_args(argv)
    global WALL
    WALL = args.wall
    # (about 1,600 counted bytes per 1 KB message: the limit holds count / times of them)
    limit = f"{max(1, args.count * 1600 // args.times // 1024)}KB"
    kinds = [False, True]
    if args.persistent != args.non_persistent:
        kinds = [args.persistent]
    print(f"host: {host_state()}", flush=True)
    if args.cprofile:
        for persistent in kinds:
            profiler = cProfile.Profile()
            run(persistent, limit, args.count, (args.cprofile, profiler))
            print(f"\n{'persistent' if persistent else 'non-persistent'}, paged, {args.cprofile} phase:")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return 0
    run(False, "1TB", 5_000)  # warm up
    for persistent in kinds:
        results: dict[str, list[tuple[float, float, float, float, int]]] = {"paged": [], "memory": []}
        for _ in range(args.rounds):
            results["paged"].append(run(persistent, limit, args.count))
            results["memory"].append(run(persistent, "1TB", args.count))
        kind = "persistent, receipt every 100" if persistent else "non-persistent"
        print(f"\n{kind}: {args.count} x 1 KB, memory_limit {limit} (paged) vs 1TB; µs CPU per message, "
              f"median of {args.rounds}")
        medians = {}
        for case, figures in results.items():
            send = statistics.median(figure[0] for figure in figures)
            drain = statistics.median(figure[1] for figure in figures)
            medians[case] = (send, drain)
            print(f"  {case:<7} SEND {send:6.2f} (min {min(f[0] for f in figures):.2f}; reactor thread "
                  f"{statistics.median(f[2] for f in figures):.2f})   drain {drain:6.2f} (min "
                  f"{min(f[1] for f in figures):.2f}; reactor thread {statistics.median(f[3] for f in figures):.2f})"
                  f"   paged out {figures[0][4]}", flush=True)
        (psend, pdrain), (msend, mdrain) = medians["paged"], medians["memory"]
        print(f"  paging's cost (1 - in-memory / paged CPU): SEND {1 - msend / psend:.0%}, "
              f"drain {1 - mdrain / pdrain:.0%} (aim < 30%)", flush=True)
    print(f"\nhost at the end: {host_state()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
