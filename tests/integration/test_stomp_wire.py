"""The wire protocol of the real gateway process: heart-beats, authentication,
malformed input on raw sockets; other connections stay healthy throughout."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client, StompClients


def raw_connect(address: tuple[str, int], headers: str = "accept-version:1.2\nhost:x\n") -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.sendall(f"CONNECT\n{headers}\n\x00".encode())
    reply = read_frame(sock)
    assert reply.startswith(b"CONNECTED\n"), reply
    return sock


def read_frame(sock: socket.socket) -> bytes:
    data = b""
    while b"\x00" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.lstrip(b"\r\n")


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_stomp_py_heartbeats_keep_an_idle_connection_alive(make_gateway: Callable[..., GatewayProcess],
                                                           version: str) -> None:
    gateway = make_gateway(args=["--set", "stomp.heartbeat_send_ms=300", "--set", "stomp.heartbeat_receive_ms=300"])
    client = Client(gateway.address, version, heartbeats=(300, 300))
    time.sleep(2.0)
    assert client.connection.is_connected()
    assert client.listener.heartbeat_timeouts == 0
    queue = f"/queue/hb.{uuid.uuid4().hex}"
    client.subscribe(queue, "s")
    client.send(queue, "after idling", receipt=True)
    assert client.message().body == b"after idling"
    client.disconnect()


def test_silent_peer_is_dropped_and_others_are_not(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=["--set", "stomp.heartbeat_receive_ms=200", "--set", "stomp.heartbeat_send_ms=0"])
    healthy = Client(gateway.address, "1.2", heartbeats=(200, 0))
    silent = raw_connect(gateway.address, "accept-version:1.2\nhost:x\nheart-beat:200,0\n")
    started = time.monotonic()
    assert read_until_closed(silent) == b""
    assert 0.25 <= time.monotonic() - started < 5
    queue = f"/queue/hb.{uuid.uuid4().hex}"
    healthy.subscribe(queue, "s")
    healthy.send(queue, "alive", receipt=True)
    assert healthy.message().body == b"alive"
    healthy.disconnect()


def test_server_sends_heartbeats(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=["--set", "stomp.heartbeat_send_ms=100"])
    sock = raw_connect(gateway.address, "accept-version:1.2\nhost:x\nheart-beat:0,100\n")
    sock.settimeout(2)
    time.sleep(0.55)
    data = sock.recv(1024)
    assert set(data) == {10} and len(data) >= 3
    sock.close()


def test_authentication_with_configured_users(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=["--set", 'auth.users={ alice = "s3cret" }',
                                         "--set", "auth.allow_weak_passwords=true"])
    alice = Client(gateway.address, "1.2", login="alice", passcode="s3cret")
    assert alice.connection.is_connected()
    alice.disconnect()
    sock = socket.create_connection(gateway.address, timeout=10)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:alice\npasscode:wrong\n\n\x00")
    reply = read_until_closed(sock)
    assert reply.startswith(b"ERROR\n")
    assert b"message:authentication failed" in reply
    assert b"alice" in reply and b"wrong" not in reply


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"SEND\ndestination:/queue/a\nbroken header line\n\nx\x00", b"malformed header"),
        (b"SEND\ndestination:/queue/a\ncontent-length:abc\n\nx\x00", b"invalid content-length"),
        (b"SEND\ndestination:/queue/a\ncontent-length:1\n\nxyz\x00", b"frame not terminated"),
        (b"SEND\ndestination:/queue/a\nx:\\t\n\nx\x00", b"invalid header escape"),
        (b"SEND\ndestination:/queue/a\nx:\xff\xfe\n\nx\x00", b"invalid UTF-8"),
        (b"FOO\n\n\x00", b"unknown command"),
        (b"SEND\n" + b"h:" + b"v" * 70000 + b"\n\n\x00", b"header too long"),
        (b"SEND\ndestination:/queue/a\ncontent-length:99999999999\n\n", b"frame too large"),
        (b"SEND\n\nno destination\x00", b"missing destination header"),
    ],
)
def test_malformed_frames_get_an_error_and_only_that_connection_closes(
    gateway: GatewayProcess, stomp: StompClients, payload: bytes, message: bytes
) -> None:
    queue = f"/queue/wire.{uuid.uuid4().hex}"
    bystander = stomp.connect("1.2")
    bystander.subscribe(queue, "s")
    sock = raw_connect(gateway.address)
    sock.sendall(payload)
    reply = read_until_closed(sock)
    assert reply.startswith(b"ERROR\n"), reply[:200]
    assert b"message:" + message in reply
    body = reply.split(b"\n\n", 1)[1]
    assert len(body.strip(b"\x00\n")) > 10  # the body says what was wrong
    stomp.connect("1.2").send(queue, "unaffected", receipt=True)
    assert bystander.message().body == b"unaffected"


def test_frames_split_at_every_byte_are_understood(gateway: GatewayProcess, stomp: StompClients) -> None:
    queue = f"/queue/wire.{uuid.uuid4().hex}"
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s")
    sock = raw_connect(gateway.address)
    payload = (f"\r\nSEND\r\ndestination:{queue}\r\nk:a\\cb\r\ncontent-length:5\r\n\r\nab\x00cd\x00\n\n"
               f"SEND\ndestination:{queue}\nreceipt:done\n\ntext\x00").encode()
    for index in range(len(payload)):
        sock.sendall(payload[index:index + 1])
    assert b"RECEIPT" in read_frame(sock)
    first, second = consumer.messages(2)
    assert first.body == b"ab\x00cd" and first.headers["k"] == "a:b"
    assert second.body == b"text"
    sock.close()


def test_nul_and_eol_padding_between_frames_is_accepted(gateway: GatewayProcess) -> None:
    r"""RabbitMQ's STOMP tests pad frames with an EOL and a NUL (``\n\x00SUBSCRIBE…\x00\n\x00SEND…``):
    padding, not a malformed frame (issue 24).  A real malformed frame after it is still refused."""
    queue = f"/queue/wire.{uuid.uuid4().hex}"
    sock = socket.create_connection(gateway.address, timeout=10)
    sock.sendall(b"\x00\nCONNECT\naccept-version:1.2\nhost:x\n\n\x00")
    assert read_frame(sock).startswith(b"CONNECTED\n")
    sock.sendall(
        f"\n\x00SUBSCRIBE\ndestination:{queue}\nid:s\nreceipt:sub\n\n\x00"
        f"\n\x00SEND\ndestination:{queue}\nreceipt:sent\n\npadded\x00\x00\x00\r\n\x00".encode()
    )
    data = b""
    deadline = time.monotonic() + 10
    while not all(part in data for part in (b"receipt-id:sub", b"receipt-id:sent", b"padded")):
        assert time.monotonic() < deadline, data
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    assert b"ERROR" not in data
    sock.sendall(b"\n\x00SEND\ndestination:/queue/a\nbroken header line\n\nx\x00")
    reply = read_until_closed(sock)
    assert reply.startswith(b"ERROR\n") and b"message:malformed header" in reply, reply[:200]
