"""Issue 20 benchmark: many connections held by one gateway process.

1. ``--idle`` (10,000) connections CONNECT with ``heart-beat:10000,10000``
   and then only exchange heart-beats.  Printed: the gateway's RSS before and
   with them (total, and per connection) against the aim of 200 MB, and
   heart-beat punctuality over ``--watch`` seconds: for every connection the
   longest silence from the server (max, p99, median over all connections)
   against the negotiated interval; a silence longer than the interval is a
   late heart-beat.
2. While the idle connections stay open, ``--active`` (1,000) connections in
   another process each subscribe to a queue of their own and send to it at
   ``--rate`` messages/s (stamped with their write time) for ``--seconds``.
   Printed: the spread of per-connection delivered counts (none may starve)
   and of per-connection p99 latency, and the idle ones' heart-beat silences
   during that load.

The load side is one process per phase on non-blocking sockets and a
:mod:`selectors` loop (no thread per connection); it raises its own
open-file limit.  The gateway raises its own and listens with a large
backlog (:mod:`gateway.tap`).  Nothing is compared with ActiveMQ here: the
aims are absolute (memory) or about fairness.

Run: ``.venv/bin/python -m bench.bench_connections [--idle N] [--active N] [--quick]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import resource
import selectors
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field

from bench.common import cpu_seconds, gateway_server, host_state, rss_bytes
from gateway.wire.codec import FrameDecoder
from gateway.wire.frame import Frame

MB = 1024 * 1024
AIM_BYTES = 200 * MB
HEARTBEAT_MS = 10_000
STAMP = "bench-sent"


def raise_open_file_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass(slots=True)
class Connection:
    """One client connection's state in the selector loop."""

    sock: socket.socket
    index: int
    decoder: FrameDecoder = field(default_factory=lambda: FrameDecoder(version="1.2"))
    out: bytearray = field(default_factory=bytearray)
    connected: bool = False
    server_interval: float = 0.0  # seconds between the server's heart-beats (0: none)
    client_interval: float = 0.0  # seconds between ours
    last_heard: float = 0.0
    last_sent: float = 0.0
    worst_silence: float = 0.0
    subscribed: bool = False
    sent: int = 0
    received: int = 0
    latencies: list[float] = field(default_factory=list)


class Clients:
    """Many STOMP connections on one selector: connect, heart-beat, send, receive."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.selector = selectors.DefaultSelector()
        self.connections: list[Connection] = []

    def open(self, count: int, batch: int = 500, headers: str = "") -> None:
        """Open ``count`` connections, ``batch`` at a time, each until CONNECTED."""
        while len(self.connections) < count:
            first = len(self.connections)
            for index in range(first, min(count, first + batch)):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                sock.connect_ex(self.address)
                connection = Connection(sock, index)
                connection.out += (f"CONNECT\naccept-version:1.2\nhost:localhost\n"
                                   f"heart-beat:{HEARTBEAT_MS},{HEARTBEAT_MS}\n{headers}\n\x00").encode()
                self.connections.append(connection)
                self.selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, connection)
            deadline = time.monotonic() + 60
            while not all(c.connected for c in self.connections[first:]):
                if time.monotonic() > deadline:
                    missing = sum(not c.connected for c in self.connections[first:])
                    raise RuntimeError(f"{missing} connections got no CONNECTED within 60 s")
                self.poll(0.05)

    def poll(self, timeout: float) -> None:
        """One turn of the loop: read, write, send due heart-beats."""
        for key, events in self.selector.select(timeout):
            connection: Connection = key.data
            if events & selectors.EVENT_READ:
                self._read(connection)
            if events & selectors.EVENT_WRITE and connection.out:
                self._flush(connection)

    def _read(self, connection: Connection) -> None:
        try:
            data = connection.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            raise RuntimeError(f"the server closed connection {connection.index}")
        now = time.monotonic()
        if connection.connected:
            connection.worst_silence = max(connection.worst_silence, now - connection.last_heard)
        connection.last_heard = now
        stamp_time = time.perf_counter_ns()
        for frame in connection.decoder.feed(data):
            if not isinstance(frame, Frame):
                raise frame
            if frame.command == "CONNECTED":
                self._negotiate(connection, frame, now)
            elif frame.command == "MESSAGE":
                connection.received += 1
                stamp = frame.headers.get(STAMP)
                if stamp is not None:
                    connection.latencies.append((stamp_time - int(stamp)) / 1e9)
            elif frame.command == "RECEIPT":
                connection.subscribed = True
            elif frame.command == "ERROR":
                raise RuntimeError(f"ERROR on connection {connection.index}: {frame.headers} {frame.body!r}")

    @staticmethod
    def _negotiate(connection: Connection, frame: Frame, now: float) -> None:
        server_send, server_receive = (int(part) for part in frame.headers.get("heart-beat", "0,0").split(","))
        connection.connected = True
        connection.last_sent = now
        connection.server_interval = max(server_send, HEARTBEAT_MS) / 1000 if server_send else 0.0
        connection.client_interval = max(server_receive, HEARTBEAT_MS) / 1000 if server_receive else 0.0

    def _flush(self, connection: Connection) -> None:
        try:
            written = connection.sock.send(connection.out)
        except (BlockingIOError, InterruptedError):
            return
        del connection.out[:written]
        if not connection.out:
            self.selector.modify(connection.sock, selectors.EVENT_READ, connection)

    def write(self, connection: Connection, data: bytes) -> None:
        if not connection.out:
            self.selector.modify(connection.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, connection)
        connection.out += data
        connection.last_sent = time.monotonic()

    def heartbeat_due(self, now: float) -> None:
        """Send a heart-beat on every connection that has been quiet for its interval (less a margin)."""
        for connection in self.connections:
            if connection.client_interval and now - connection.last_sent >= connection.client_interval * 0.8:
                self.write(connection, b"\n")

    def reset_silences(self) -> None:
        now = time.monotonic()
        for connection in self.connections:
            connection.worst_silence = 0.0
            connection.last_heard = now

    def run_for(self, seconds: float, tick: object = None) -> None:
        end = time.monotonic() + seconds
        next_check = 0.0
        while (now := time.monotonic()) < end:
            if now >= next_check:
                self.heartbeat_due(now)
                next_check = now + 0.25
            if tick is not None:
                tick(now)  # type: ignore[operator]
            self.poll(0.01)

    def silences(self) -> list[float]:
        """Per connection: the longest silence from the server since :meth:`reset_silences`."""
        now = time.monotonic()
        return [max(c.worst_silence, now - c.last_heard) for c in self.connections if c.server_interval]

    def close(self) -> None:
        for connection in self.connections:
            connection.sock.close()
        self.selector.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def punctuality(silences: list[float], interval: float) -> str:
    """The longest silences from the server against its heart-beat interval, and how late the worst was."""
    worst = max(silences)
    return (f"longest silence from the server per connection: max {worst:.2f} s, p99 "
            f"{percentile(silences, 0.99):.2f} s, median {statistics.median(silences):.2f} s, against an "
            f"interval of {interval:g} s -> latest heart-beat {max(0.0, worst - interval) * 1e3:.0f} ms late")


def active_load(address: tuple[str, int], count: int, rate: float, seconds: float, result: object) -> None:
    """The active phase, in its own process: ``count`` connections sending to their own queues at ``rate``."""
    raise_open_file_limit()
    clients = Clients(address)
    clients.open(count)
    for connection in clients.connections:
        clients.write(connection, (f"SUBSCRIBE\nid:0\ndestination:/queue/conn.{connection.index}\nack:auto\n"
                                   f"receipt:sub\n\n\x00").encode())
    clients.run_for(0.1)
    deadline = time.monotonic() + 30
    while not all(c.subscribed for c in clients.connections):
        if time.monotonic() > deadline:
            raise RuntimeError("SUBSCRIBEs were not all confirmed within 30 s")
        clients.poll(0.05)
    total = int(rate * seconds)
    start = time.monotonic()
    # Connections start their schedules spread over one interval, so sends do not come in lock-step.
    offsets = [index / count / rate for index in range(count)]

    def tick(now: float) -> None:
        elapsed = now - start
        for connection, offset in zip(clients.connections, offsets, strict=True):
            due = min(total, int((elapsed - offset) * rate) + 1) if elapsed >= offset else 0
            while connection.sent < due:
                connection.sent += 1
                clients.write(connection, (f"SEND\ndestination:/queue/conn.{connection.index}\n"
                                           f"{STAMP}:{time.perf_counter_ns()}\ncontent-length:100\n\n").encode()
                              + b"x" * 100 + b"\x00")

    clients.run_for(seconds + 0.5, tick)
    settle = time.monotonic() + 10
    while any(c.received < c.sent for c in clients.connections) and time.monotonic() < settle:
        clients.run_for(0.2)
    actual = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rows: list[object] = [(c.sent, c.received, sorted(c.latencies)) for c in clients.connections]
    result.put([*rows, usage.ru_utime + usage.ru_stime, actual])  # type: ignore[attr-defined]
    clients.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_connections", description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=None, help="idle connections (default 10000)")
    parser.add_argument("--watch", type=float, default=None, help="seconds of heart-beat watching (default 30)")
    parser.add_argument("--active", type=int, default=None, help="sending connections (default 1000)")
    parser.add_argument("--rate", type=float, default=5.0, help="messages/s each active connection sends")
    parser.add_argument("--seconds", type=float, default=None, help="length of the active phase (default 20)")
    parser.add_argument("--quick", action="store_true", help="a few hundred connections for a few seconds")
    args = parser.parse_args(argv)
    idle = args.idle or (200 if args.quick else 10_000)
    watch = args.watch or (11.0 if args.quick else 30.0)
    active = args.active or (50 if args.quick else 1000)
    seconds = args.seconds or (3.0 if args.quick else 20.0)
    limit = raise_open_file_limit()
    print(f"host: {host_state()}; load side's open-file limit {limit}", flush=True)

    with gateway_server() as gateway:
        assert gateway.process is not None
        pid = gateway.process.pid
        time.sleep(1.0)
        before = rss_bytes(pid)
        clients = Clients(gateway.address)
        began = time.monotonic()
        clients.open(idle)
        opened = time.monotonic() - began
        time.sleep(1.0)
        clients.run_for(1.0)
        held = rss_bytes(pid)
        per = (held - before) / idle
        print(f"\n{idle} idle connections (heart-beat {HEARTBEAT_MS},{HEARTBEAT_MS}) opened in {opened:.1f} s")
        print(f"  gateway RSS: {before / MB:.1f} MB before, {held / MB:.1f} MB with them "
              f"({per / 1024:.1f} KB per connection); aim: under {AIM_BYTES / MB:.0f} MB "
              f"-> {'met' if held < AIM_BYTES else 'NOT met'}", flush=True)

        clients.reset_silences()
        clients.run_for(watch)
        interval = max(c.server_interval for c in clients.connections)
        print(f"  heart-beats over {watch:.0f} s: {punctuality(clients.silences(), interval)}; "
              f"RSS now {rss_bytes(pid) / MB:.1f} MB", flush=True)

        context = mp.get_context("fork")
        result = context.Queue()
        worker = context.Process(target=active_load, args=(gateway.address, active, args.rate, seconds, result),
                                 daemon=True)
        clients.reset_silences()
        gateway_cpu = cpu_seconds(pid)
        worker.start()
        outcome = None
        while outcome is None:
            clients.run_for(0.5)
            try:
                outcome = result.get_nowait()
            except queue.Empty:
                if not worker.is_alive():
                    raise RuntimeError("the active phase died") from None
        worker.join(10)
        silences = clients.silences()
        actual = outcome.pop()
        load_cpu = outcome.pop()
        gateway_cpu = cpu_seconds(pid) - gateway_cpu
        sent = [row[0] for row in outcome]
        received = [row[1] for row in outcome]
        p99s = [percentile(row[2], 0.99) * 1e3 for row in outcome if row[2]]
        p50s = [statistics.median(row[2]) * 1e3 for row in outcome if row[2]]
        print(f"\n{active} connections sending {args.rate:g} msg/s each to their own queue for {seconds:g} s "
              f"({active * args.rate:.0f} msg/s in all), while the {idle} idle ones stay open")
        print(f"  delivered per connection: min {min(received)}, median {statistics.median(received):.0f}, "
              f"max {max(received)} of {max(sent)} sent each; connections that got fewer than half: "
              f"{sum(r < s / 2 for r, s in zip(received, sent, strict=True))}; all delivered within "
              f"{actual:.1f} s: {sum(received) == sum(sent)}")
        print(f"  latency per connection, ms: median of p50s {statistics.median(p50s):.1f}, p99 best "
              f"{min(p99s):.1f}, median {statistics.median(p99s):.1f}, worst {max(p99s):.1f}")
        print(f"  CPU during the phase: gateway {gateway_cpu:.1f} s, sending/receiving side {load_cpu:.1f} s "
              f"(of {actual:.1f} s wall; 2 cores shared with the host's other load)")
        print(f"  idle connections' heart-beats meanwhile ({actual:.0f} s): {punctuality(silences, interval)}; "
              f"gateway RSS {rss_bytes(pid) / MB:.1f} MB", flush=True)
        clients.close()
    print(f"\nhost at the end: {host_state()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
