"""How the gateway's per-turn scheduling shapes latency: a paced 1 → 1 run on a model clock.

The STOMP server's own objects in one process (as :mod:`bench.hotpath_inprocess`:
the gateway on a :class:`~twisted.internet.task.Clock`, Twisted's write buffer) are
driven by a model of the reactor's loop - the input slices due (``runUntilCurrent``),
then the consumers' transports written out and the producer's socket read (the poll)
- on a model clock that advances by a fixed cost per frame handled and per turn, not
by the host's time.  A producer writes what is due every 0.5 ms at ``--rate``
messages a second (as :func:`bench.stomp_load.run_latency`'s does), and every
``--stall-every`` ms the server is stalled for ``--stall`` ms (a host that runs
something else, a GC pass), so a backlog arrives at once.  Each MESSAGE's latency is
the model time its turn wrote it out minus the time its SEND was written.  The same
input gives the same figures, whatever else the host runs: it compares the input
slicing and write grace of two versions of the code, not the host.

Run: ``.venv/bin/python -m bench.turn_latency [--rate R] [--seconds S] [--stall MS] [--stall-every MS]``
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

from bench.hotpath_inprocess import Client, build, next_turn
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame

FRAME_US = 12.0
"""Model cost of a SEND handled through to its MESSAGE written to the transport (in-process ~11 µs)."""
TURN_US = 30.0
"""Model cost of one pass through the reactor's loop (timers, epoll, the writes)."""
PACING_US = 500.0
"""The producer writes what is due this often."""
READ_SIZE = 65536

_STAMP = re.compile(rb"\nseq:(\d+)\n")


def run(rate: float, seconds: float, stall_ms: float, stall_every_ms: float) -> list[float]:
    """The latencies (model ms) of ``rate * seconds`` messages."""
    gateway, clock = build()
    factory = gateway.factory
    producer = Client(factory, clock)
    consumer = Client(factory, clock)
    consumer.feed(encode_frame(Frame("SUBSCRIBE", {"destination": "/queue/lat", "id": "0", "ack": "auto",
                                                   "activemq.prefetchSize": "1000", "receipt": "s"}), "1.2"))
    assert consumer.frames()[0].command == "RECEIPT"
    total = int(rate * seconds)
    sent_at: list[float] = []  # model µs each SEND was written
    written: dict[int, float] = {}
    socket = bytearray()  # what the producer wrote and the server has not read
    now = 0.0
    next_write = 0.0
    next_stall = stall_every_ms * 1000 if stall_ms else float("inf")
    body = b"x" * 100
    gateway_in = producer.protocol

    def produce_until(until: float) -> None:
        nonlocal next_write
        while next_write <= until and len(sent_at) < total:
            due = min(total, int(next_write * rate / 1e6) + 1)
            for index in range(len(sent_at), due):
                socket.extend(encode_frame(Frame("SEND", {"destination": "/queue/lat", "persistent": "false",
                                                          "seq": str(index)}, body), "1.2"))
                sent_at.append(next_write)
            next_write += PACING_US

    def handled() -> int:
        return gateway_in.messages_in + consumer.protocol.messages_out

    while len(written) < total:
        produce_until(now)
        if now >= next_stall:  # the server gets no CPU for a while: what the producer writes meanwhile waits
            now += stall_ms * 1000
            next_stall += stall_every_ms * 1000
            produce_until(now)
        before = handled()
        next_turn(clock)  # runUntilCurrent: the input slices due
        # the poll: the consumer's transport written out (the writes of the turn before included), then a read
        data = consumer.transport.take()
        now += TURN_US + (handled() - before) * FRAME_US / 2
        for match in _STAMP.finditer(data):
            written.setdefault(int(match.group(1)), now)
        if socket and not producer.transport.readingPaused:
            before = handled()
            chunk = bytes(socket[:READ_SIZE])
            del socket[:READ_SIZE]
            producer.protocol.dataReceived(chunk)
            now += (handled() - before) * FRAME_US / 2
        elif not clock.getDelayedCalls() and not consumer.transport._tempDataBuffer:
            now = max(now, min(next_write, next_stall))  # idle until the producer's next write
        producer.transport.take()
    gateway.stop()
    return [(written[index] - sent_at[index]) / 1000 for index in range(total)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.turn_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=40_000, help="messages/s the producer is paced at")
    parser.add_argument("--seconds", type=float, default=2.0, help="model seconds of messages")
    parser.add_argument("--stall", type=float, default=5.0, help="ms the server is stalled (0: never)")
    parser.add_argument("--stall-every", type=float, default=100.0, help="ms between stalls")
    args = parser.parse_args(argv)
    latencies = run(args.rate, args.seconds, args.stall, args.stall_every)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    print(f"rate {args.rate:.0f}/s, stall {args.stall:g} ms every {args.stall_every:g} ms: "
          f"p50 {cuts[49]:.3f} ms, p99 {cuts[98]:.3f} ms, max {max(latencies):.3f} ms (model time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
