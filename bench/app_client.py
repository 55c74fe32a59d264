"""A load generator shaped like a client application: one process, two threads.

Most Python (and Ruby, Node) STOMP applications send and receive in one
process: a producer thread writes SENDs while a listener thread reads
MESSAGEs, and both share one interpreter (one GIL).  Such a client pays for
every read the server makes it do: a server that writes many small MESSAGE
chunks makes the listener wake, take the GIL from the producer, decode a
few frames and block again, where a few large writes would cost it a few
wake-ups.  :mod:`bench.stomp_load` runs producer and consumer in processes of
their own, so it does not see this.

:func:`run_app` is issue 39's shape: one forked process, a producer thread
and a consumer thread, SENDs carrying ``content-type`` and ``content-length``
(as stomp.py sends a ``bytes`` body with a content type), ``batch`` SENDs a
write (500), the SUBSCRIBE without a prefetch header (the server's default),
auto ack.  The rate is messages received per second, from the producer's
first write to the last MESSAGE read.  The process also reports how many
``recv`` calls brought the MESSAGEs (the reads the server made it do).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from dataclasses import dataclass

from bench.stomp_load import StompSocket, Workload
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame

CONTENT_TYPE = "text/plain"
"""The SENDs' ``content-type`` (with a ``content-length``: a BytesMessage, the type kept as a property)."""


@dataclass(frozen=True, slots=True)
class AppRun:
    """One run of the application-shaped client."""

    rate: float  # messages received per second
    reads: int  # recv calls that brought the MESSAGEs
    count: int

    @property
    def messages_per_read(self) -> float:
        return self.count / max(self.reads, 1)


def _producer(address: tuple[str, int], work: Workload, go: threading.Event, done: list[float]) -> None:
    client = StompSocket(address)
    body = b"x" * work.body_size
    headers = {"destination": work.destination, "content-type": CONTENT_TYPE,
               "persistent": "true" if work.persistent else "false"}
    frame = encode_frame(Frame("SEND", headers, body), "1.2")  # (content-length added)
    chunk = frame * work.batch
    go.wait()
    done.append(time.perf_counter())
    sent = 0
    while sent < work.count:
        n = min(work.batch, work.count - sent)
        client.sock.sendall(chunk if n == work.batch else frame * n)
        sent += n
    client.write(Frame("SEND", {**headers, "receipt": "last"}, body))
    while (reply := client.read()).command != "RECEIPT":
        if reply.command == "ERROR":
            raise RuntimeError(f"ERROR from server: {reply.headers} {reply.body!r}")
    client.close()


def _application(address: tuple[str, int], work: Workload, result: object) -> None:
    """The client process: a consumer thread (this one) and a producer thread."""
    consumer = StompSocket(address)
    subscribe = {"destination": work.destination, "id": "app", "ack": "auto", "receipt": "sub"}
    if work.prefetch:
        subscribe["activemq.prefetchSize"] = str(work.prefetch)
    consumer.write(Frame("SUBSCRIBE", subscribe))
    while (frame := consumer.read()).command != "RECEIPT":
        raise RuntimeError(f"unexpected before the SUBSCRIBE receipt: {frame!r}")
    go = threading.Event()
    started: list[float] = []
    producer = threading.Thread(target=_producer, args=(address, work, go, started), daemon=True)
    producer.start()
    time.sleep(0.1)  # the producer connects; the clock starts with its first write
    go.set()
    expected = work.count + 1  # (the last SEND asks for a receipt)
    received = 0
    reads = 0
    decoder = consumer.decoder
    sock = consumer.sock
    while received < expected:
        data = sock.recv(262144)
        if not data:
            raise ConnectionError("server closed the connection")
        reads += 1
        for item in decoder.feed(data):
            if isinstance(item, Exception):
                raise item
            if item.command == "MESSAGE":
                received += 1
            elif item.command == "ERROR":
                raise RuntimeError(f"ERROR from server: {item.headers} {item.body!r}")
    last = time.perf_counter()
    producer.join(30)
    consumer.close()
    result.put((work.count / (last - started[0]), reads))  # type: ignore[attr-defined]


def run_app(address: tuple[str, int], work: Workload, timeout: float = 300.0) -> AppRun:
    """One application-shaped client process against ``address``; its rate and reads."""
    context = mp.get_context("fork")
    result = context.Queue()
    process = context.Process(target=_application, args=(address, work, result), daemon=True)
    process.start()
    try:
        rate, reads = result.get(timeout=timeout)
    finally:
        process.join(10)
        if process.is_alive():
            process.kill()
    return AppRun(rate, reads, work.count + 1)
