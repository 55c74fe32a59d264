"""STOMP over WebSocket with real parts.

The gateway runs as a ``twistd`` process with a plain TCP listener, a
``ws:tcp:`` listener and a ``ws:ssl:`` (wss) listener whose certificate the
test CA (:mod:`tests.support.tls`) signed.  Clients are stomp.py over its
WebSocket transport (STOMP 1.1 and 1.2), stomp.py over TCP, and
websocket-client's raw client where a test needs to see the WebSocket
messages themselves (text or binary, close frames).
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import websocket
from websocket import ABNF

from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.stomp_clients import StompClients
from tests.support.tls import TlsFiles, make_tls_files

MAX_FRAME_SIZE = 64 * 1024
TEXT, BINARY, CLOSE = ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY, ABNF.OPCODE_CLOSE


@dataclass
class WebSocketGateway:
    process: GatewayProcess
    ws_port: int
    wss_port: int
    tls: TlsFiles

    @property
    def ws_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.ws_port)

    @property
    def wss_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.wss_port)


def free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebSocketGateway]:
    workdir = tmp_path_factory.mktemp("ws-gateway")
    tls = make_tls_files(workdir / "tls")
    ws_port, wss_port = free_ports(2)
    wss = f"ws:ssl:{wss_port}:interface=127.0.0.1:privateKey={tls.server_key}:certKey={tls.server_cert}"
    args = [
        "--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1", "--listen", wss,
        "--set", f"stomp.max_frame_size={MAX_FRAME_SIZE}",
        "--set", "stomp.heartbeat_send_ms=200", "--set", "stomp.heartbeat_receive_ms=200",
        "--set", "stomp.heartbeat_grace=3.0",
    ]
    process = GatewayProcess(workdir / "gateway", args=args).start()
    wait_for_port(ws_port, timeout=10)
    wait_for_port(wss_port, timeout=10)
    yield WebSocketGateway(process, ws_port, wss_port, tls)
    process.stop()


@pytest.fixture
def clients() -> Iterator[list[StompClients]]:
    made: list[StompClients] = []
    yield made
    for group in made:
        group.close()


def stomp_clients(made: list[StompClients], address: tuple[str, int]) -> StompClients:
    group = StompClients(address)
    made.append(group)
    return group


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def parse_frame(payload: bytes) -> tuple[str, dict[str, str], bytes]:
    """Command, headers (the first of a repeated one) and body of one STOMP frame."""
    head, _, rest = payload.partition(b"\n\n")
    command, *lines = head.decode().split("\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers.setdefault(name, value)
    length = int(headers["content-length"]) if "content-length" in headers else rest.index(b"\x00")
    assert rest[length:length + 1] == b"\x00", payload
    return command, headers, rest[:length]


class RawWebSocketClient:
    """websocket-client speaking STOMP by hand: every message it gets, with its opcode."""

    def __init__(self, url: str, subprotocols: Sequence[str] = ("v12.stomp",), **options: Any) -> None:
        self.socket = websocket.create_connection(url, subprotocols=list(subprotocols), timeout=10, **options)

    def send_frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        head = "".join(f"{name}:{value}\n" for name, value in headers.items())
        self.socket.send_bytes(f"{command}\n{head}\n".encode() + body + b"\x00")

    def receive(self) -> tuple[int, bytes]:
        opcode, data = self.socket.recv_data()
        return opcode, data

    def frame(self) -> tuple[int, str, dict[str, str], bytes]:
        opcode, data = self.receive()
        assert opcode in (TEXT, BINARY), (opcode, data)
        return (opcode, *parse_frame(data))

    def connect(self) -> None:
        self.send_frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        _, command, headers, _ = self.frame()
        assert command == "CONNECTED", headers

    def subscribe(self, destination: str) -> None:
        self.send_frame("SUBSCRIBE", {"id": "1", "destination": destination, "receipt": "sub"})
        _, command, headers, _ = self.frame()
        assert (command, headers.get("receipt-id")) == ("RECEIPT", "sub"), (command, headers)

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def raw_clients() -> Iterator[list[RawWebSocketClient]]:
    made: list[RawWebSocketClient] = []
    yield made
    for client in made:
        client.close()


def raw_client(made: list[RawWebSocketClient], url: str, **options: Any) -> RawWebSocketClient:
    client = RawWebSocketClient(url, **options)
    made.append(client)
    return client


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_stomp_py_over_websocket(gateway: WebSocketGateway, clients: list[StompClients], version: str) -> None:
    group = stomp_clients(clients, gateway.ws_address)
    client = group.connect(version, ws_path="/ws")
    queue = "/queue/" + unique("ws")
    client.subscribe(queue, ack="client-individual")
    client.send(queue, "over WebSocket", receipt=True, colour="blue")
    message = client.message()
    assert message.body == b"over WebSocket"
    assert (message.headers["destination"], message.headers["colour"]) == (queue, "blue")
    assert ("ack" in message.headers) == (version == "1.2")  # the negotiated version's MESSAGE
    client.ack(message)
    assert "listening for STOMP over WebSocket on ws:tcp:" in gateway.process.log()


def test_websocket_and_tcp_clients_exchange_messages(gateway: WebSocketGateway, clients: list[StompClients]) -> None:
    ws = stomp_clients(clients, gateway.ws_address).connect(ws_path="/stomp")
    tcp = stomp_clients(clients, gateway.process.address).connect()
    to_ws, to_tcp, topic = "/queue/" + unique("to.ws"), "/queue/" + unique("to.tcp"), "/topic/" + unique("news")
    ws.subscribe(to_ws)
    tcp.subscribe(to_tcp)
    tcp.send(to_ws, "from TCP", receipt=True)
    ws.send(to_tcp, "from WebSocket", receipt=True)
    assert ws.message().body == b"from TCP"
    assert tcp.message().body == b"from WebSocket"
    ws.subscribe(topic, sub_id="2")
    tcp.subscribe(topic, sub_id="2")
    ws.send(topic, "to everyone", receipt=True)
    assert [ws.message().body, tcp.message().body] == [b"to everyone", b"to everyone"]


def test_a_bytes_message_arrives_byte_exact_as_a_binary_message(
    gateway: WebSocketGateway, clients: list[StompClients], raw_clients: list[RawWebSocketClient]
) -> None:
    queue = "/queue/" + unique("bytes")
    receiver = raw_client(raw_clients, f"ws://127.0.0.1:{gateway.ws_port}/ws")
    receiver.connect()
    receiver.subscribe(queue)
    body = bytes(range(256)) * 4  # NULs and bytes that are not UTF-8
    stomp_clients(clients, gateway.process.address).connect().send(queue, body, receipt=True)
    opcode, command, headers, received = receiver.frame()
    assert (opcode, command, received) == (BINARY, "MESSAGE", body)
    assert headers["content-length"] == str(len(body))
    # stomp.py over WebSocket sends such a body in a text message; it arrives intact too
    stomp_clients(clients, gateway.ws_address).connect(ws_path="/ws").send(queue, b"\xff\xfe\x00\x80", receipt=True)
    assert receiver.frame()[::3] == (BINARY, b"\xff\xfe\x00\x80")
    stomp_clients(clients, gateway.process.address).connect(text=True).send(queue, "zażółć", receipt=True)
    opcode, command, headers, received = receiver.frame()
    assert (opcode, received) == (TEXT, "zażółć".encode())


def test_subprotocols_are_negotiated(gateway: WebSocketGateway, raw_clients: list[RawWebSocketClient]) -> None:
    url = f"ws://127.0.0.1:{gateway.ws_port}/"
    offered_all = raw_client(raw_clients, url, subprotocols=["v10.stomp", "v11.stomp", "v12.stomp"])
    assert offered_all.socket.getsubprotocol() == "v12.stomp"
    offered_all.connect()
    offered_none = raw_client(raw_clients, url, subprotocols=[])
    assert offered_none.socket.getsubprotocol() is None
    offered_none.connect()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        RawWebSocketClient(url, subprotocols=["mqtt"])
    assert refused.value.status_code == 400


def test_heartbeats_travel_both_ways(gateway: WebSocketGateway, clients: list[StompClients]) -> None:
    """The gateway drops a client silent for 3 x 500 ms; stomp.py's newlines keep this one in,
    and the gateway's own newlines reach it."""
    import time

    client = stomp_clients(clients, gateway.ws_address).connect(ws_path="/ws", heartbeats=(500, 500))
    time.sleep(3.0)
    assert client.listener.heartbeats >= 3
    assert not client.listener.disconnected.is_set()
    queue = "/queue/" + unique("alive")
    client.subscribe(queue)
    client.send(queue, "still here", receipt=True)
    assert client.message().body == b"still here"


def test_a_bad_frame_gets_an_error_and_closes_only_that_connection(
    gateway: WebSocketGateway, clients: list[StompClients], raw_clients: list[RawWebSocketClient]
) -> None:
    other = stomp_clients(clients, gateway.ws_address).connect(ws_path="/ws")
    queue = "/queue/" + unique("others")
    other.subscribe(queue)
    bad = raw_client(raw_clients, f"ws://127.0.0.1:{gateway.ws_port}/ws")
    bad.connect()
    bad.socket.send_bytes(b"SEND\ndestination\n\nno colon\x00")
    opcode, command, headers, body = bad.frame()
    assert (opcode, command) == (TEXT, "ERROR")
    assert headers["message"] and b"SEND" in body
    opcode, payload = bad.receive()
    assert (opcode, int.from_bytes(payload[:2], "big")) == (CLOSE, 1000)
    other.send(queue, "unaffected", receipt=True)
    assert other.message().body == b"unaffected"


def test_wss_with_a_client_that_trusts_the_test_ca(
    gateway: WebSocketGateway, clients: list[StompClients], raw_clients: list[RawWebSocketClient], tmp_path: Path
) -> None:
    client = stomp_clients(clients, gateway.wss_address).connect(ws_path="/ws", ca_certs=str(gateway.tls.ca_cert))
    queue = "/queue/" + unique("wss")
    client.subscribe(queue)
    client.send(queue, "over wss", receipt=True)
    assert client.message().body == b"over wss"
    url = f"wss://127.0.0.1:{gateway.wss_port}/ws"
    raw = raw_client(raw_clients, url, sslopt={"ca_certs": str(gateway.tls.ca_cert)})
    assert raw.socket.getsubprotocol() == "v12.stomp"
    raw.connect()
    other_ca = make_tls_files(tmp_path / "other", ca_name="some other CA")
    with pytest.raises(ssl.SSLCertVerificationError):
        RawWebSocketClient(url, sslopt={"ca_certs": str(other_ca.ca_cert)})


def test_an_oversize_message_is_refused_and_the_gateway_stays_healthy(
    gateway: WebSocketGateway, clients: list[StompClients], raw_clients: list[RawWebSocketClient]
) -> None:
    queue = "/queue/" + unique("big")
    large = raw_client(raw_clients, f"ws://127.0.0.1:{gateway.ws_port}/ws")
    large.connect()
    send = f"SEND\ndestination:{queue}\nreceipt:big\n\n".encode() + b"x" * (16 * MAX_FRAME_SIZE) + b"\x00"
    # Only the start of the message goes out: its header announces 1 MiB, which is enough to refuse it.
    sock = large.socket.sock
    assert sock is not None
    sock.sendall(ABNF.create_frame(send, TEXT).format()[:4096])
    opcode, command, headers, body = large.frame()
    assert (opcode, command, headers["message"]) == (TEXT, "ERROR", "frame too large")
    assert f"limit of {MAX_FRAME_SIZE} bytes".encode() in body
    assert large.receive()[0] == CLOSE
    client = stomp_clients(clients, gateway.ws_address).connect(ws_path="/ws")
    client.subscribe(queue)
    client.send(queue, b"y" * (MAX_FRAME_SIZE - 1024), receipt=True)  # under the limit: fine
    assert client.message().body == b"y" * (MAX_FRAME_SIZE - 1024)
    assert gateway.process.process is not None and gateway.process.process.poll() is None


def test_a_bad_websocket_listener_is_a_clear_startup_error(tmp_path: Path) -> None:
    listen = f"ws:nonsense:{free_port()}"
    output = GatewayProcess(tmp_path / "gateway", args=["--listen", listen]).start_fails()
    assert f"jmsgateway cannot start: cannot listen on '{listen}'" in output
    assert "nonsense" in output.split("cannot listen on", 1)[1]
