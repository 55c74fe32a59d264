"""The STOMP hot path in one process, without sockets: CPU-µs per message.

Builds the gateway's own objects (:class:`gateway.app.Gateway` from the shipped
config with the memory store, on a :class:`twisted.internet.task.Clock`),
connects STOMP 1.2 clients through a transport with Twisted's own write
buffer and back-pressure (emptied after each reactor turn, as a socket would
take it) and feeds the producer's SENDs in 200-frame reads, as the load
generator of :mod:`bench.bench_throughput` writes them.  Only the server's calls are timed
(not the clients' decoding and ACK building).  Every message is one
SEND decoded, the session's SEND handling, the broker's dispatch, the
MESSAGE built and encoded (and, with client acks, the ACK decoded and
applied).  The kernel's send/recv and epoll are not in it: this measures
the interpreter work per message, the part the optimisations change.

Run: ``.venv/bin/python -m bench.hotpath_inprocess [--count N] [--rounds N] [--cprofile] [--workload W]``
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import queue
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.abstract import FileDescriptor
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock

from bench.common import host_state
from gateway.app import Gateway
from gateway.config import parse_config
from gateway.stomp.protocol import StompServerFactory, StompServerProtocol
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.support.gateway import default_config

WORKLOADS = ("auto", "client-individual", "client", "client-each", "topic", "1k", "64k", "4x4", "app", "app-1k")
"""``client``: a cumulative ACK per 200 MESSAGEs; ``client-each``: client mode with an ACK per
MESSAGE (each covering one delivery), as :mod:`bench.bench_throughput`'s consumers send them;
``4x4``: four producers, each with a queue and a consumer of its own (auto ack), their reads
arriving in the same reactor turns; ``app``, ``app-1k``: issue 39's client application shape
(:mod:`bench.app_client`: SENDs with ``content-type`` and ``content-length``, 500 a write, no prefetch
header; auto ack, 100 B and 1 KB)."""

BODY_SIZES = {"1k": 1024, "64k": 65536, "app-1k": 1024}
"""Body bytes of the workloads that are not 100 B."""

READ_SIZE = 65536
"""Bytes one read from a socket brings at most (Twisted's TCP ``doRead`` asks for this many)."""


class ThreadedClock(Clock):
    """A :class:`Clock` that also takes calls from other threads (the store's writer):
    :meth:`run_threaded` runs them on the caller's thread, as the reactor would."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()

    def callFromThread(self, call: Callable[..., Any], *args: Any) -> None:
        self._calls.put((call, args))

    def run_threaded(self, wait: float = 0.0) -> int:
        """Run what other threads handed over (waiting up to ``wait`` s for the first); how many."""
        ran = 0
        try:
            call, args = self._calls.get(timeout=wait) if wait else self._calls.get_nowait()
        except queue.Empty:
            return 0
        while True:
            call(*args)
            ran += 1
            try:
                call, args = self._calls.get_nowait()
            except queue.Empty:
                return ran

    def turn(self, wait: float = 0.0) -> None:
        """One reactor turn: thread results, then what is due now."""
        self.run_threaded(wait)
        self.advance(0)


def _nothing() -> None:
    pass


def next_turn(clock: Clock) -> None:
    """Run the calls due now, not those they schedule (a reactor runs those on its next turn;
    ``Clock.advance`` would run them at once)."""
    for call in [call for call in clock.calls if call.getTime() <= clock.seconds()]:
        if call.active():
            clock.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


class Selectables:
    """The part of a reactor a transport's write buffer calls (reading and writing are not watched)."""

    def addWriter(self, writer: Any) -> None:
        pass

    def removeWriter(self, writer: Any) -> None:
        pass

    def addReader(self, reader: Any) -> None:
        pass

    def removeReader(self, reader: Any) -> None:
        pass


class SinkTransport(FileDescriptor):
    """A TCP transport's write path (Twisted's own buffering and back-pressure: the producer is
    paused past ``bufferSize``); what is written waits until :meth:`take`, as for a socket."""

    def __init__(self) -> None:
        super().__init__(Selectables())  # type: ignore[arg-type]
        self.connected = 1
        self.sent: list[bytes] = []  # flushed to the socket, not yet taken by the benchmark

    def take(self) -> bytes:
        """What was written since the last call; the producer resumes as after a write to the socket."""
        data = b"".join(self._tempDataBuffer)
        self._tempDataBuffer.clear()
        self._tempDataLen = 0
        if self.producerPaused and self.producer is not None:
            self.producerPaused = False
            self.producer.resumeProducing()  # type: ignore[attr-defined]
        return data

    def flush(self) -> None:
        """The reactor's write phase: what was written goes to the socket (kept for :meth:`received`)."""
        if self._tempDataBuffer:
            self.sent.append(self.take())

    def received(self) -> bytes:
        """What the peer has been sent since the last call (flushed or not)."""
        data = b"".join((*self.sent, self.take()))
        self.sent.clear()
        return data

    readingPaused = False

    def pauseProducing(self) -> None:
        self.readingPaused = True

    def resumeProducing(self) -> None:
        self.readingPaused = False

    def getPeer(self) -> IPv4Address:
        return IPv4Address("TCP", "127.0.0.1", 40000)

    def getHost(self) -> IPv4Address:
        return IPv4Address("TCP", "127.0.0.1", 61613)

    def setTcpNoDelay(self, enabled: bool) -> None:
        pass

    def abortConnection(self) -> None:
        self.disconnecting = True


class Client:
    """One STOMP 1.2 connection to the in-process server."""

    def __init__(self, factory: StompServerFactory, clock: Clock) -> None:
        self.clock = clock
        self.transport = SinkTransport()
        self.protocol: StompServerProtocol = factory.buildProtocol(None)
        self.protocol.makeConnection(self.transport)
        self.decoder = FrameDecoder(version="1.2")
        self.feed(encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost",
                                                  "heart-beat": "0,0"}), "1.2"))
        assert self.frames()[0].command == "CONNECTED"

    def receive(self, data: bytes) -> None:
        """``data`` as one read (the server's later turns not run)."""
        self.protocol.dataReceived(data)

    def feed(self, data: bytes, flush: Callable[[], None] = _nothing) -> None:
        """``data`` in reads of at most :data:`READ_SIZE`, each once the server reads again, as
        Twisted's TCP transport delivers it; the server's later turns in between, each followed by
        ``flush`` (the reactor's write phase: the consumers' transports written out)."""
        for start in range(0, len(data), READ_SIZE):
            while self.transport.readingPaused:  # (the input slices of the read before, one turn each)
                next_turn(self.clock)
                flush()
            self.protocol.dataReceived(data[start:start + READ_SIZE])
            flush()
        while self.transport.readingPaused:
            next_turn(self.clock)
            flush()

    def frames(self) -> list[Frame]:
        return [item for item in self.decoder.feed(self.transport.take()) if isinstance(item, Frame)]


def build() -> tuple[Gateway, Clock]:
    clock = Clock()
    workdir = tempfile.mkdtemp(prefix="bench-hotpath-")
    raw = default_config().replace('# persistence = "sqlite"', 'persistence = "memory"')
    config = parse_config(__import__("tomllib").loads(raw))
    config.gateway.data_dir = workdir
    gateway = Gateway(config, clock)
    gateway.start()
    return gateway, clock


def run(workload: str, count: int, profiler: cProfile.Profile | None = None) -> float:
    """µs of CPU per message (per delivery for the topic) for ``count`` messages of ``workload``."""
    gateway, clock = build()
    factory = gateway.factory
    pairs = 4 if workload == "4x4" else 1  # (producers, each with a queue of its own)
    producers = [Client(factory, clock) for _ in range(pairs)]
    destinations = ["/topic/hot"] if workload == "topic" else [f"/queue/hot.{index}" for index in range(pairs)]
    app = workload.startswith("app")
    ack = ("auto" if workload in ("auto", "topic", "1k", "64k", "4x4") or app else "client" if workload == "client-each"
           else workload)
    consumers = [Client(factory, clock) for _ in range(10 if workload == "topic" else pairs)]
    for index, consumer in enumerate(consumers):
        destination = destinations[index % len(destinations)]
        subscribe = {"destination": destination, "id": str(index), "ack": ack, "receipt": "s"}
        if not app:
            subscribe["activemq.prefetchSize"] = "1000"
        consumer.feed(encode_frame(Frame("SUBSCRIBE", subscribe), "1.2"))
        assert consumer.frames()[0].command == "RECEIPT"
    body = b"x" * BODY_SIZES.get(workload, 100)
    batch = 8 if workload == "64k" else 500 if app else 200  # (frames per write of the load generator)
    extra = {"content-type": "text/plain"} if app else {}
    chunks = [encode_frame(Frame("SEND", {"destination": destination, **extra, "persistent": "false"}, body),
                           "1.2") * batch for destination in destinations]
    count = max(count // pairs, batch)  # (per producer)
    received = 0
    used = 0.0  # only the server's work is timed (the clients' decoding and ACK building is not)
    clock_time = time.process_time
    # (the profiler, too, sees only the server's work)
    enable = profiler.enable if profiler is not None else _nothing
    disable = profiler.disable if profiler is not None else _nothing

    def flush() -> None:
        for consumer in consumers:
            consumer.transport.flush()

    gc.collect()
    for _ in range(count // batch):
        started = clock_time()
        enable()
        if pairs == 1:
            producers[0].feed(chunks[0], flush)
        else:  # (every producer's read in the same turn, then the turns their slices take)
            for producer, chunk in zip(producers, chunks, strict=True):
                producer.receive(chunk)
            flush()
            while any(producer.transport.readingPaused for producer in producers):
                next_turn(clock)
                flush()
        disable()
        used += clock_time() - started
        for producer in producers:
            producer.transport.take()
        for consumer in consumers:
            data = consumer.transport.received()
            if ack == "auto":
                while data:  # (the resumed deliveries of a consumer paused by back-pressure come in the take)
                    received += data.count(b"MESSAGE\n")
                    started = clock_time()
                    enable()
                    data = consumer.transport.take()
                    disable()
                    used += clock_time() - started
                continue
            frames = [item for item in consumer.decoder.feed(data) if isinstance(item, Frame)]
            received += len(frames)
            if workload == "client":  # (a cumulative ACK per 200 MESSAGEs)
                acks = [encode_frame(Frame("ACK", {"id": frames[-1].headers["ack"]}), "1.2")] if frames else []
            else:  # (an ACK per MESSAGE, as bench_throughput's consumers do in both client modes)
                acks = [encode_frame(Frame("ACK", {"id": frame.headers["ack"]}), "1.2") for frame in frames]
            started = clock_time()
            enable()
            consumer.feed(b"".join(acks))
            disable()
            used += clock_time() - started
            consumer.transport.take()
    expected = (count // batch) * batch * max(len(consumers), pairs)
    assert received == expected, (received, expected)
    gateway.stop()
    shutil.rmtree(gateway.config.gateway.data_dir, ignore_errors=True)
    return used / expected * 1e6


def run_persistent(count: int, profiler: cProfile.Profile | None = None) -> tuple[float, float]:
    """(µs of the reactor thread's CPU, µs of the process's CPU) per message of the ``persistent``
    workload: ``count`` persistent 100 B SENDs to a queue with the SQLite store, as
    :func:`bench.stomp_load.produce` sends them with a receipt every 100 (a read of 100 SENDs, the
    last asking for a receipt; the producer waits for its receipts after 10 of them), one auto-ack
    consumer (prefetch 1000) taking them meanwhile.  The reactor thread's figure is the server's
    work (its calls and the store's reports it runs); the process's adds the store's writer thread."""
    clock = ThreadedClock()
    workdir = tempfile.mkdtemp(prefix="bench-hotpath-persistent-")
    config = parse_config(__import__("tomllib").loads(default_config()))
    config.gateway.data_dir = workdir
    gateway = Gateway(config, clock)
    starting = gateway.start()
    while not starting.called:
        clock.turn(0.01)
    factory = gateway.factory
    producer, consumer = Client(factory, clock), Client(factory, clock)
    consumer.feed(encode_frame(Frame("SUBSCRIBE", {"destination": "/queue/persistent", "id": "0", "ack": "auto",
                                                   "activemq.prefetchSize": "1000", "receipt": "s"}), "1.2"))
    while not consumer.frames():
        clock.turn(0.01)
    headers = {"destination": "/queue/persistent", "persistent": "true"}
    body = b"x" * 100
    read = encode_frame(Frame("SEND", headers, body), "1.2") * 99 + encode_frame(
        Frame("SEND", {**headers, "receipt": "r"}, body), "1.2")
    reads = max(1, count // 100)
    total = reads * 100
    thread_cpu, process_cpu = time.thread_time, time.process_time
    enable = profiler.enable if profiler is not None else _nothing
    disable = profiler.disable if profiler is not None else _nothing
    received = receipts = 0
    used = 0.0

    def turns(until: Callable[[], bool]) -> None:
        """Reactor turns (waiting for the store's writer when nothing is due) until ``until()``."""
        nonlocal used, received, receipts
        while True:
            started = thread_cpu()
            enable()
            now = clock.seconds()
            clock.turn(0.0 if any(call.getTime() <= now for call in clock.getDelayedCalls()) else 0.001)
            consumer.transport.flush()
            disable()
            used += thread_cpu() - started
            receipts += producer.transport.take().count(b"RECEIPT\n")
            received += consumer.transport.received().count(b"MESSAGE\n")
            if until():
                return

    gc.collect()
    begun = process_cpu()
    for index in range(reads):
        started = thread_cpu()
        enable()
        producer.protocol.dataReceived(read)
        consumer.transport.flush()
        disable()
        used += thread_cpu() - started
        if producer.transport.readingPaused:
            turns(lambda: not producer.transport.readingPaused)
        if index % 10 == 9:
            turns(lambda: receipts == index + 1)  # noqa: B023 (called before the loop goes on)
    turns(lambda: receipts == reads and received == total)
    whole = process_cpu() - begun
    gateway.stop()
    while clock.run_threaded(0.05):
        pass
    shutil.rmtree(workdir, ignore_errors=True)
    return used / total * 1e6, whole / total * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.hotpath_inprocess", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50_000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per workload (the median is printed)")
    parser.add_argument("--workload", choices=(*WORKLOADS, "persistent"), action="append",
                        help="default: all but persistent (its own figures: reactor thread and process)")
    parser.add_argument("--cprofile", action="store_true", help="one round under cProfile, top functions")
    args = parser.parse_args(argv)
    print(f"host: {host_state()}", flush=True)
    workloads = args.workload or list(WORKLOADS)
    if args.cprofile:
        profiler = cProfile.Profile()
        for workload in workloads:
            if workload == "persistent":
                run_persistent(args.count, profiler)
            else:
                run(workload, args.count, profiler)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return 0
    run("auto", 10_000)  # warm up
    for workload in workloads:
        if workload == "persistent":
            pairs = [run_persistent(args.count) for _ in range(args.rounds)]
            main_figures, whole = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
            print(f"  {workload:<18} {statistics.median(main_figures):6.2f} µs/message on the reactor thread, "
                  f"{statistics.median(whole):6.2f} in the process (medians of {args.rounds}; reactor thread "
                  f"min {min(main_figures):.2f}, max {max(main_figures):.2f})", flush=True)
            continue
        figures = [run(workload, args.count) for _ in range(args.rounds)]
        print(f"  {workload:<18} {statistics.median(figures):6.2f} µs/message (median of {args.rounds}; "
              f"min {min(figures):.2f}, max {max(figures):.2f})", flush=True)
    print(f"host at the end: {host_state()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
