"""Fairness, heart-beats and flow control under full load, on the real gateway process.

One connection floods the gateway with pipelined SENDs (200 to a write, as fast
as the socket takes them) and another drains them, while other connections
exchange one message at a time with a receipt and others only exchange
heart-beats.  The flood must not starve anyone: every round trip of the
others completes within a bound, the gateway's heart-beats to the idle
connections keep coming, and none of them is closed for a missed heart-beat.
And a consumer that stops reading is paused by the transport's back-pressure
while the flood goes to the consumer that reads.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
import uuid
from collections.abc import Callable

from tests.support.gateway import GatewayProcess

INTERVAL = 0.5
"""Heart-beat interval both ways, seconds (the gateway closes a peer silent for 1.5 of them)."""
FLOOD_SECONDS = 4.0


def connect(address: tuple[str, int], heart_beat: str) -> tuple[socket.socket, bytes]:
    """A STOMP 1.2 connection; the bytes that came after CONNECTED."""
    sock = socket.create_connection(address, timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(f"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:{heart_beat}\n\n\x00".encode())
    data = b""
    while b"\x00" not in data:
        chunk = sock.recv(65536)
        assert chunk, "closed before CONNECTED"
        data += chunk
    frame, _, rest = data.partition(b"\x00")
    assert frame.startswith(b"CONNECTED\n"), frame
    return sock, rest


def read_frames(sock: socket.socket, buffer: bytearray, wanted: Callable[[list[bytes]], bool]) -> list[bytes]:
    """Read until ``wanted`` says the frames so far suffice (heart-beat EOLs between frames dropped)."""
    frames: list[bytes] = []
    while not wanted(frames):
        end = buffer.find(b"\x00")
        if end < 0:
            chunk = sock.recv(65536)
            assert chunk, "the gateway closed the connection"
            buffer += chunk
            continue
        frames.append(bytes(buffer[:end]).lstrip(b"\r\n"))
        del buffer[: end + 1]
    return frames


def test_a_flooding_connection_starves_neither_the_others_nor_their_heart_beats(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    ms = int(INTERVAL * 1000)
    gateway = make_gateway(args=["--set", f"stomp.heartbeat_send_ms={ms}", "--set", f"stomp.heartbeat_receive_ms={ms}"])
    address = gateway.address
    stop = threading.Event()
    errors: list[BaseException] = []
    flood_queue = f"/queue/flood.{uuid.uuid4().hex}"
    drained = [0]
    round_trips: dict[int, list[float]] = {}
    beats: dict[int, list[float]] = {}

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as error:  # reported by the test thread
                errors.append(error)
                stop.set()
        return run

    def drain() -> None:
        sock, _ = connect(address, "0,0")
        sock.sendall(f"SUBSCRIBE\nid:0\ndestination:{flood_queue}\nack:auto\nactivemq.prefetchSize:1000\n\n\x00"
                     .encode())
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                chunk = sock.recv(262144)
            except TimeoutError:
                continue
            assert chunk, "the gateway closed the draining connection"
            drained[0] += chunk.count(b"MESSAGE\n")
        sock.close()

    def flood() -> None:
        sock, _ = connect(address, "0,0")
        frame = f"SEND\ndestination:{flood_queue}\ncontent-length:100\n\n".encode() + b"x" * 100 + b"\x00"
        chunk = frame * 200
        while not stop.is_set():
            sock.sendall(chunk)
        sock.close()

    def exchange(index: int) -> None:
        """A message at a time to its own queue: SEND with receipt, wait for RECEIPT and MESSAGE."""
        sock, rest = connect(address, f"{ms},{ms}")
        buffer = bytearray(rest)
        queue = f"/queue/own.{uuid.uuid4().hex}"
        sock.sendall(f"SUBSCRIBE\nid:s\ndestination:{queue}\nreceipt:sub\n\n\x00".encode())
        read_frames(sock, buffer, lambda frames: any(f.startswith(b"RECEIPT") for f in frames))
        times = round_trips[index] = []
        number = 0
        while not stop.is_set():
            number += 1
            started = time.monotonic()
            sock.sendall(f"SEND\ndestination:{queue}\nreceipt:r{number}\n\nmessage {number}\x00".encode())
            frames = read_frames(sock, buffer, lambda got: sum(f.startswith((b"RECEIPT", b"MESSAGE"))
                                                                for f in got) >= 2)
            assert any(f"message {number}".encode() in f for f in frames), frames
            times.append(time.monotonic() - started)
            time.sleep(0.05)
        sock.close()

    def idle(index: int) -> None:
        """Only heart-beats, both ways; the arrival time of each one from the gateway."""
        sock, _ = connect(address, f"{ms},{ms}")
        arrivals = beats[index] = [time.monotonic()]
        sock.settimeout(0.05)
        sent = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now - sent >= INTERVAL / 2:
                sock.sendall(b"\n")
                sent = now
            try:
                chunk = sock.recv(1024)
            except TimeoutError:
                continue
            assert chunk, "the gateway closed an idle connection that sent its heart-beats"
            assert set(chunk) == {10}, chunk
            arrivals.append(time.monotonic())
        arrivals.append(time.monotonic())
        sock.close()

    workers = [threading.Thread(target=guarded(drain))]
    workers += [threading.Thread(target=guarded(lambda i=i: exchange(i))) for i in range(4)]  # type: ignore[misc]
    workers += [threading.Thread(target=guarded(lambda i=i: idle(i))) for i in range(4)]  # type: ignore[misc]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    flooder = threading.Thread(target=guarded(flood))
    flooder.start()
    stop.wait(FLOOD_SECONDS)
    stop.set()
    for worker in [*workers, flooder]:
        worker.join(15)
    if errors:
        raise errors[0]
    assert drained[0] >= 2_000, f"the flood hardly ran ({drained[0]} messages drained)"
    for index, times in round_trips.items():
        assert len(times) >= 10, f"connection {index}: only {len(times)} round trips in {FLOOD_SECONDS}s of flood"
        assert max(times) < 2.0, f"connection {index}: a round trip took {max(times):.2f}s during the flood"
    for index, arrivals in beats.items():
        gap = max(later - earlier for earlier, later in itertools.pairwise(arrivals))
        assert len(arrivals) >= 2 + FLOOD_SECONDS / INTERVAL / 2, f"idle connection {index}: {len(arrivals) - 2} beats"
        assert gap < 3 * INTERVAL, f"idle connection {index}: {gap:.2f}s without a heart-beat (interval {INTERVAL}s)"


def test_a_consumer_that_stops_reading_is_paused_and_the_flood_goes_to_the_one_that_reads(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    """Two auto-ack consumers of one queue; one never reads.  The gateway stops handing it
    messages once its socket and the transport's buffer are full (auto ack has no prefetch
    window: only the transport's back-pressure stops it), so the reading one gets the rest."""
    gateway = make_gateway()
    address = gateway.address
    queue = f"/queue/stall.{uuid.uuid4().hex}"
    total, size = 3_000, 8_192
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(address)
    stalled.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00")
    stalled.sendall(f"SUBSCRIBE\nid:0\ndestination:{queue}\nack:auto\nreceipt:s\n\n\x00".encode())
    reader, rest = connect(address, "0,0")
    buffer = bytearray(rest)
    reader.sendall(f"SUBSCRIBE\nid:0\ndestination:{queue}\nack:auto\nreceipt:s\n\n\x00".encode())
    read_frames(reader, buffer, lambda frames: any(f.startswith(b"RECEIPT") for f in frames))
    time.sleep(0.2)  # (the stalled consumer's SUBSCRIBE is handled by now)
    producer, _ = connect(address, "0,0")
    frame = f"SEND\ndestination:{queue}\ncontent-length:{size}\n\n".encode() + b"x" * size + b"\x00"
    for _ in range(total // 100):
        producer.sendall(frame * 100)
    producer.sendall(b"SEND\ndestination:/queue/none\nreceipt:done\n\nx\x00")
    read_frames(producer, bytearray(), lambda frames: any(f.startswith(b"RECEIPT") for f in frames))
    received = buffer.count(b"MESSAGE\n")
    reader.settimeout(10.0)  # (a pause that long means the flood stopped; a busy host may take seconds to resume it)
    tail = b""
    try:
        while received < total:
            chunk = reader.recv(1 << 20)
            if not chunk:
                break
            received += (tail + chunk).count(b"MESSAGE\n")  # (a command cut by a read is counted once)
            tail = chunk[-7:]
    except TimeoutError:
        pass
    # Without back-pressure the round robin would give the stalled consumer every other message.
    assert received >= total * 0.75, f"the reading consumer got {received} of {total}"
    stalled.close()
    reader.close()
    producer.close()
