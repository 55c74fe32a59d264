"""A raw-socket STOMP load generator for benchmarks (producer and consumer).

It speaks STOMP 1.2 with the gateway's own codec over plain blocking
sockets, pipelines frames in large writes and runs producer and consumer in
separate processes, so the number it reports is the server's, not a slow
client's.  Both the gateway and ActiveMQ are measured with the same code.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
from dataclasses import dataclass

from gateway.errors import StompProtocolError
from gateway.stomp.codec import FrameDecoder, encode_frame
from gateway.stomp.frame import Frame


@dataclass(slots=True)
class Workload:
    """What one benchmark run sends."""

    destination: str
    count: int = 50_000
    body_size: int = 100
    persistent: bool = False
    ack: str = "auto"  # auto | client (an ACK per message) | client-individual
    receipt_every: int = 0  # 0: one receipt at the end; 1: every SEND; N: every N-th SEND
    prefetch: int = 1000
    batch: int = 200  # frames per socket write


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


def produce(address: tuple[str, int], work: Workload) -> float:
    """Send the workload; returns seconds until the last receipt arrived."""
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
            client.sock.sendall(b"".join(chunk))
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


def consume(address: tuple[str, int], work: Workload, ready: object, result: object) -> None:
    """Receive ``work.count`` messages; puts (first, last) perf_counter times on ``result``."""
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
    while received < work.count:
        frames = client.read_many()
        acks = []
        for frame in frames:
            if frame.command == "MESSAGE":
                received += 1
                if work.ack != "auto":
                    acks.append(encode_frame(Frame("ACK", {"id": frame.headers["ack"]}), "1.2"))
            elif frame.command == "ERROR":
                raise RuntimeError(f"ERROR from server: {frame.headers} {frame.body!r}")
        if received and not first:
            first = time.perf_counter()
        if acks:
            client.sock.sendall(b"".join(acks))
    last = time.perf_counter()
    result.put((first, last))  # type: ignore[attr-defined]
    client.close()


def run_pair(address: tuple[str, int], work: Workload, timeout: float = 300.0) -> float:
    """One producer and one consumer process; returns messages/s end to end."""
    context = mp.get_context("fork")
    ready = context.Event()
    result = context.Queue()
    consumer = context.Process(target=consume, args=(address, work, ready, result), daemon=True)
    consumer.start()
    if not ready.wait(30):
        consumer.kill()
        raise RuntimeError("consumer did not subscribe")
    start = time.perf_counter()
    produce(address, work)
    _, last = result.get(timeout=timeout)
    consumer.join(10)
    return work.count / (last - start)


def send_rate(address: tuple[str, int], work: Workload) -> float:
    """Producer only (persistence benchmarks): messages/s until the last receipt."""
    return work.count / produce(address, work)
