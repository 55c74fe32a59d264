"""A raw-socket STOMP load generator for benchmarks (producers and consumers).

It speaks STOMP 1.2 with the gateway's own codec over plain blocking
sockets, pipelines frames in large writes and runs every producer and
consumer in a process of its own, so the number it reports is the server's,
not a slow client's.  Both the gateway and ActiveMQ are measured with the
same code.

:func:`run_pair` is one producer and one consumer; :func:`run_group` is
several destinations with a producer each and one or more consumers (topic
subscribers) each; :func:`run_latency` paces one producer at a fixed rate,
stamps every SEND with the time it was written (a ``bench-sent`` header, in
``perf_counter_ns``, a clock every process on the host shares) and reports
the spread of SEND-written to MESSAGE-read times.
"""

from __future__ import annotations

import multiprocessing as mp
import re
import socket
import statistics
import time
from dataclasses import dataclass, replace

from gateway.errors import StompProtocolError
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame


@dataclass(slots=True)
class Workload:
    """What one benchmark run sends."""

    destination: str
    count: int = 50_000
    body_size: int = 100
    persistent: bool = False
    ack: str = "auto"  # auto | client (an ACK per message) | client-individual
    receipt_every: int = 0  # 0: one receipt at the end; 1: every SEND; N: every N-th SEND
    prefetch: int = 1000  # (bench.app_client: 0 sends no prefetch header)
    batch: int = 200  # frames per socket write
    rate: float = 0.0  # messages/s the producer is paced at; 0: as fast as it can
    decode: bool = True  # consumers decode every frame (False: :class:`FrameCounter`; unpaced runs only)


class StompSocket:
    """A blocking STOMP 1.2 connection on a plain socket."""

    def __init__(self, address: tuple[str, int], **headers: str) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(version="1.2")
        self.pending: list[Frame] = []
        self.write(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "heart-beat": "0,0", **headers}))
        connected = self.read()
        if connected.command != "CONNECTED":
            raise RuntimeError(f"CONNECT refused: {connected!r}")

    def write(self, frame: Frame, *, text: bool = False) -> None:
        self.sock.sendall(encode_frame(frame, "1.2", add_content_length=not text))

    def read(self) -> Frame:
        while not self.pending:
            data = self.sock.recv(262144)
            if not data:
                raise ConnectionError("server closed the connection")
            for item in self.decoder.feed(data):
                if isinstance(item, StompProtocolError):
                    raise item
                self.pending.append(item)
        return self.pending.pop(0)

    def read_many(self) -> list[Frame]:
        """Every frame that arrives with the next read from the socket."""
        if self.pending:
            frames, self.pending = self.pending, []
            return frames
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError("server closed the connection")
        frames = []
        for item in self.decoder.feed(data):
            if isinstance(item, StompProtocolError):
                raise item
            frames.append(item)
        return frames

    def close(self) -> None:
        try:
            self.write(Frame("DISCONNECT", {}))
        finally:
            self.sock.close()


class FrameCounter:
    """A consumer's lean reading of MESSAGE frames: counted, and their ``ack`` ids picked, in C-speed
    ``bytes`` operations instead of a decoded frame each.

    Each read's complete frames (up to its last NUL; the rest waits for the next read) are searched for
    frame starts: a benchmark body is ``b"x" * n``, so it holds no NUL and no ``MESSAGE``/``ERROR`` line.
    An ERROR frame is decoded and raised.  The load generator's own CPU per message is then a small part
    of the host's (the decoding consumer spends about as much a message as the gateway does).
    """

    ACK = re.compile(rb"\nack:([^\n]*)\n")

    def __init__(self, client: StompSocket, size: int = 1 << 20) -> None:
        self.client = client
        self.buffer = bytearray(size)  # read into in place; an incomplete frame is moved to its start
        self.view = memoryview(self.buffer)
        self.filled = 0

    def read(self, acks: bool) -> tuple[int, list[bytes]]:
        """Read once: (MESSAGE frames completed, their ``ack`` ids if ``acks``)."""
        buffer, filled = self.buffer, self.filled
        if filled == len(buffer):  # (a frame larger than the buffer)
            self.view.release()
            buffer.extend(bytes(len(buffer)))
            self.view = memoryview(buffer)
        read = self.client.sock.recv_into(self.view[filled:])
        if not read:
            raise ConnectionError("server closed the connection")
        filled += read
        end = buffer.rfind(b"\x00", 0, filled)
        if end < 0:
            self.filled = filled
            return 0, []
        if buffer.find(b"ERROR\n", 0, end) >= 0:
            for item in FrameDecoder(version="1.2").feed(bytes(buffer[buffer.index(b"ERROR\n"):filled])):
                raise RuntimeError(f"ERROR from server: {item!r}")
        count = buffer.count(b"MESSAGE\n", 0, end)
        ids = self.ACK.findall(buffer, 0, end) if acks else []
        self.filled = filled - end - 1
        if self.filled:
            self.view[:self.filled] = self.view[end + 1:filled]
        return count, ids


def send_parts(sock: socket.socket, parts: list[bytes]) -> None:
    """Write ``parts`` as one stream with ``sendmsg`` (the kernel gathers them: no joined copy of a
    batch of 64 KB frames in the producer), however much each call takes."""
    views = [memoryview(part) for part in parts]
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first:first + 1024])  # (IOV_MAX)
        while first < len(views) and sent >= len(views[first]):
            sent -= len(views[first])
            first += 1
        if sent:
            views[first] = views[first][sent:]


def produce(address: tuple[str, int], work: Workload) -> float:
    """Send the workload; returns seconds until the last receipt arrived."""
    if work.rate:
        return _produce_paced(address, work)
    client = StompSocket(address)
    body = b"x" * work.body_size
    headers = {"destination": work.destination, "persistent": "true" if work.persistent else "false"}
    plain = encode_frame(Frame("SEND", headers, body), "1.2")
    start = time.perf_counter()
    chunk: list[bytes] = []
    awaited = 0
    for index in range(1, work.count + 1):
        wants_receipt = (work.receipt_every and index % work.receipt_every == 0) or index == work.count
        if wants_receipt:
            chunk.append(encode_frame(Frame("SEND", {**headers, "receipt": str(index)}, body), "1.2"))
            awaited += 1
        else:
            chunk.append(plain)
        if len(chunk) >= work.batch or wants_receipt:
            send_parts(client.sock, chunk)
            chunk = []
        if wants_receipt and (work.receipt_every == 1 or index == work.count or awaited >= 10):
            while awaited:
                frame = client.read()
                if frame.command == "ERROR":
                    raise RuntimeError(f"ERROR from server: {frame.headers} {frame.body!r}")
                if frame.command == "RECEIPT":
                    awaited -= 1
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


STAMP = "bench-sent"
"""The header a paced producer puts its write time in (``time.perf_counter_ns()``)."""


def _produce_paced(address: tuple[str, int], work: Workload) -> float:
    """Send ``work.count`` messages at ``work.rate`` a second, each stamped with its write time."""
    client = StompSocket(address)
    body = b"x" * work.body_size
    persistent = "true" if work.persistent else "false"
    # The frame is written by hand: only the stamp changes, and its encoding must cost the same for both servers.
    head = f"SEND\ndestination:{work.destination}\npersistent:{persistent}\ncontent-length:{len(body)}\n"
    prefix = head.encode()
    tail = b"\n" + body + b"\x00"
    interval = 1.0 / work.rate
    start = time.perf_counter()
    sent = 0
    while sent < work.count:
        due = min(work.count, int((time.perf_counter() - start) / interval) + 1)
        if due > sent:
            chunk = []
            for _ in range(due - sent):
                chunk.append(b"".join((prefix, b"%s:%d\n" % (STAMP.encode(), time.perf_counter_ns()), tail)))
            client.sock.sendall(b"".join(chunk))
            sent = due
        else:
            time.sleep(min(interval, 0.0005))
    client.write(Frame("SEND", {"destination": work.destination, "receipt": "last", STAMP: "0"}, b""))
    while (frame := client.read()).command != "RECEIPT":
        if frame.command == "ERROR":
            raise RuntimeError(f"ERROR from server: {frame.headers} {frame.body!r}")
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


def consume(address: tuple[str, int], work: Workload, ready: object, result: object) -> None:
    """Receive ``work.count`` messages; puts (first, last, latencies) on ``result``.

    ``first`` and ``last`` are perf_counter times; ``latencies`` (seconds) are
    measured for stamped messages only (a paced producer's) and empty otherwise.
    """
    client = StompSocket(address)
    client.write(Frame("SUBSCRIBE", {
        "destination": work.destination, "id": "bench", "ack": work.ack, "receipt": "sub",
        "activemq.prefetchSize": str(work.prefetch),
    }))
    early: list[Frame] = []  # a non-empty queue may deliver before the SUBSCRIBE's receipt
    while (frame := client.read()).command != "RECEIPT":
        early.append(frame)
    client.pending[:0] = early
    ready.set()  # type: ignore[attr-defined]
    received = 0
    first = 0.0
    latencies: list[float] = []
    expected = work.count + (1 if work.rate else 0)  # a paced producer ends with an unstamped marker
    if not work.decode and not work.rate and not client.pending:
        counter = FrameCounter(client)
        acking = work.ack != "auto"
        while received < expected:
            count, ids = counter.read(acking)
            received += count
            if received and not first:
                first = time.perf_counter()
            if ids:
                client.sock.sendall(b"".join(b"ACK\nid:%s\n\n\x00" % each for each in ids))
    while received < expected:
        frames = client.read_many()
        now = time.perf_counter_ns()
        acks = []
        for frame in frames:
            if frame.command == "MESSAGE":
                received += 1
                stamp = frame.headers.get(STAMP)
                if stamp is not None and stamp != "0":
                    latencies.append((now - int(stamp)) / 1e9)
                if work.ack != "auto":
                    acks.append(encode_frame(Frame("ACK", {"id": frame.headers["ack"]}), "1.2"))
            elif frame.command == "ERROR":
                raise RuntimeError(f"ERROR from server: {frame.headers} {frame.body!r}")
        if received and not first:
            first = time.perf_counter()
        if acks:
            client.sock.sendall(b"".join(acks))
    last = time.perf_counter()
    result.put((first, last, latencies))  # type: ignore[attr-defined]
    client.close()


def _produce_at(address: tuple[str, int], work: Workload, go: object) -> None:
    go.wait()  # type: ignore[attr-defined]
    produce(address, work)


def run_group(address: tuple[str, int], work: Workload, *, destinations: int = 1, subscribers: int = 1,
              timeout: float = 300.0) -> tuple[float, list[float]]:
    """``destinations`` producers, each sending ``work`` to a destination of its own
    (``work.destination`` + ``.N`` when more than one) with ``subscribers`` consumers
    on it (use more than one on a topic only: each receives every message).

    Returns (messages delivered per second over all consumers, from the producers'
    start to the last message received; the latencies the consumers measured).
    """
    context = mp.get_context("fork")
    result = context.Queue()
    go = context.Event()
    works = [work if destinations == 1 else replace(work, destination=f"{work.destination}.{index}")
             for index in range(destinations)]
    consumers = []
    for each in works:
        for _ in range(subscribers):
            ready = context.Event()
            consumer = context.Process(target=consume, args=(address, each, ready, result), daemon=True)
            consumer.start()
            consumers.append((consumer, ready))
    producers = [context.Process(target=_produce_at, args=(address, each, go), daemon=True) for each in works]
    try:
        for _consumer, ready in consumers:
            if not ready.wait(30):
                raise RuntimeError("a consumer did not subscribe")
        for producer in producers:
            producer.start()
        time.sleep(0.2)  # let the producers connect: the clock starts with their first SEND
        start = time.perf_counter()
        go.set()
        outcomes = [result.get(timeout=timeout) for _ in consumers]
    finally:
        for process in [*producers, *(consumer for consumer, _ in consumers)]:
            process.join(10)
            if process.is_alive():
                process.kill()
    last = max(outcome[1] for outcome in outcomes)
    latencies = [latency for outcome in outcomes for latency in outcome[2]]
    return len(consumers) * work.count / (last - start), latencies


def run_pair(address: tuple[str, int], work: Workload, timeout: float = 300.0) -> float:
    """One producer and one consumer process; returns messages/s end to end."""
    return run_group(address, work, timeout=timeout)[0]


@dataclass(slots=True, frozen=True)
class Latency:
    """SEND-written to MESSAGE-read times of a paced run, in milliseconds."""

    rate: float
    count: int
    p50: float
    p99: float
    max: float


def run_latency(address: tuple[str, int], work: Workload, timeout: float = 300.0) -> Latency:
    """One producer paced at ``work.rate`` and one consumer; the latency percentiles."""
    assert work.rate > 0, "a latency run needs a paced producer"
    _, latencies = run_group(address, work, timeout=timeout)
    if len(latencies) < 2:
        raise RuntimeError(f"only {len(latencies)} stamped messages arrived")
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return Latency(work.rate, len(latencies), cuts[49] * 1e3, cuts[98] * 1e3, max(latencies) * 1e3)


def send_rate(address: tuple[str, int], work: Workload) -> float:
    """Producer only (persistence benchmarks): messages/s until the last receipt."""
    return work.count / produce(address, work)
