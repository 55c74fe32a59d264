"""Heart-beat and timing abuse by STOMP clients (black-box, one real gateway process).

docs/stomp.md: heart-beats are negotiated as the spec says (the server sends every
``max(heartbeat_send_ms, cy)``), a connection without a completed CONNECT is closed after
``connect_timeout_ms``, a peer silent for ``heartbeat_grace`` x the interval is disconnected.
The attacks: a client asking for 1 ms heart-beats, a CONNECT split byte by byte, heart-beats
instead of a CONNECT, and a frame trickled a byte at a time after CONNECT; every other client is
served meanwhile.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp

CONFIG_CHANGES = {
    "connect_timeout_ms = 10000": "connect_timeout_ms = 2000",
    "heartbeat_send_ms = 10000": "heartbeat_send_ms = 1000",
    "heartbeat_receive_ms = 10000": "heartbeat_receive_ms = 1000",
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("timing"))
    text = process.config_path.read_text()
    for old, new in CONFIG_CHANGES.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    process.config_path.write_text(text)
    process.start()
    yield process
    process.stop()


def served(gateway: GatewayProcess) -> None:
    started = time.monotonic()
    client = RawStomp(gateway.address)
    client.connect()
    client.send("SEND\ndestination:/queue/bystander\nreceipt:r\n\nfine\x00")
    assert client.frame(3).command == "RECEIPT"
    client.close()
    assert time.monotonic() - started < 2.0


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (reading and dropping what it sends), None if not in time."""
    started = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - started < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    return None


def test_a_client_asking_for_1ms_heart_beats_gets_the_servers_interval(gateway: GatewayProcess) -> None:
    client = RawStomp(gateway.address)
    client.send("CONNECT\naccept-version:1.2\nhost:x\nheart-beat:1,1\n\n\x00")
    frame = client.frame()
    assert frame.command == "CONNECTED"
    assert frame.headers["heart-beat"] == "1000,1000", frame.headers
    client.sock.settimeout(0.1)
    received = b""
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        client.send(b"\n")  # the client keeps its side of the bargain, every 100 ms
        with contextlib.suppress(TimeoutError):
            received += client.sock.recv(65536)
    assert 1 <= received.count(b"\n") <= 5, f"{received.count(chr(10).encode())} beats in 3 s"
    served(gateway)
    client.close()


def test_a_connect_split_byte_by_byte_is_closed_at_connect_timeout(gateway: GatewayProcess) -> None:
    """One byte every 150 ms: the whole CONNECT would take 5 s; the gateway closes at 2 s."""
    sock = socket.create_connection(gateway.address)
    frame = b"CONNECT\naccept-version:1.2\nhost:x\nlogin:" + b"a" * 20 + b"\n\n\x00"
    started = time.monotonic()
    closed = False
    for byte in frame:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        time.sleep(0.15)
        if time.monotonic() - started > 4.0:
            break
    waited = closed_within(sock, 2.0) if not closed else 0.0
    elapsed = time.monotonic() - started
    sock.close()
    assert closed or waited is not None, "the trickled CONNECT kept its connection past connect_timeout_ms"
    assert elapsed < 4.5
    served(gateway)


def test_heart_beats_instead_of_a_connect_do_not_keep_the_connection(gateway: GatewayProcess) -> None:
    sock = socket.create_connection(gateway.address)
    started = time.monotonic()
    closed = False
    while time.monotonic() - started < 4.0 and not closed:
        try:
            sock.sendall(b"\n")
        except OSError:
            closed = True
        time.sleep(0.1)
        sock.settimeout(0.01)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            closed = closed or sock.recv(65536) == b""
    sock.close()
    assert closed, "newlines before CONNECT kept the connection past connect_timeout_ms"
    served(gateway)


def test_a_frame_trickled_after_connect_holds_nothing_but_its_own_connection(gateway: GatewayProcess) -> None:
    """Heart-beats are satisfied (bytes keep coming) but the SEND never completes: the others are
    served throughout, and the trickling client's own connection ends when it stops."""
    client = RawStomp(gateway.address)
    client.connect(extra="heart-beat:1000,1000\n")
    client.send("SEND\ndestination:/queue/trickle\ncontent-length:1000\n\n")
    for _ in range(15):
        client.send(b"x")
        time.sleep(0.1)
    served(gateway)
    # it goes silent: a peer silent for heartbeat_grace x 1 s is disconnected
    assert closed_within(client.sock, 4.0) is not None, "a silent client kept its half frame past the grace"
    served(gateway)
