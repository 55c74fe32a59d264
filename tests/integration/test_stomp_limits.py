"""The STOMP listeners of a real gateway process under storms, silent sockets, connection caps
and peers that stop reading.

- 10,000 clients connecting at once are all CONNECTED within seconds on the default
  configuration (the listen backlog; the gateway raises its own open-file limit).
- Sockets that never complete CONNECT are closed after ``connect_timeout_ms`` while
  other clients are served.
- ``max_connections`` and ``max_connections_per_address`` refuse with an ERROR, one log
  line per episode and a Prometheus counter.
- A connection closed by the gateway (missed heart-beat, ERROR, DISCONNECT) whose peer
  stopped reading is aborted after ``close_timeout_ms``, and the messages it held go to
  another consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import selectors
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"


@contextlib.contextmanager
def open_file_limit(soft: int) -> Iterator[None]:
    """This process's soft open-file limit set to ``soft`` (processes started meanwhile inherit it)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, before[1]), before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def raise_open_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed <= hard or (soft < hard and needed > hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft >= needed, f"the test needs {needed} open files; the hard limit is {hard}"


def storm(address: tuple[str, int], count: int, timeout: float) -> list[bytes]:
    """``count`` clients connecting at once (every SYN sent before any answer is read, as after a
    restart); what each got back for its CONNECT.  AssertionError if they are not all answered
    within ``timeout`` seconds."""
    selector = selectors.DefaultSelector()
    replies: dict[socket.socket, bytes] = {}
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(address)  # EINPROGRESS: the SYN is on its way
            replies[sock] = b""
            selector.register(sock, selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout
        waiting = count
        while waiting:
            left = deadline - time.monotonic()
            assert left > 0, f"{waiting} of {count} clients not CONNECTED within {timeout}s"
            for key, events in selector.select(min(left, 1.0)):
                sock = key.fileobj  # type: ignore[assignment]
                if events & selectors.EVENT_WRITE:  # connected (or failed: the send says)
                    sock.send(CONNECT)
                    selector.modify(sock, selectors.EVENT_READ)
                    continue
                chunk = sock.recv(4096)
                replies[sock] += chunk
                if b"\x00" in chunk or not chunk:
                    selector.unregister(sock)
                    waiting -= 1
        return [reply.lstrip(b"\r\n") for reply in replies.values()]
    finally:
        selector.close()
        for sock in replies:
            sock.close()


def test_a_storm_of_10000_connects_is_served_within_seconds(make_gateway: Callable[..., GatewayProcess]) -> None:
    count = 10_000
    raise_open_file_limit(count + 500)
    with open_file_limit(1024):  # the gateway must raise its own limit to serve the storm
        gateway = make_gateway()
    log = gateway.wait_for_log("listen backlog")
    assert "open-file limit raised from 1024 to" in log
    assert "(listen backlog 4096)" in log  # this machine's somaxconn is 4096

    replies = storm(gateway.address, count, 10.0)
    assert all(reply.startswith(b"CONNECTED\n") for reply in replies), {r[:40] for r in replies}


async def silent_sockets(address: tuple[str, int], count: int,
                         first_bytes: bytes = b"") -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``count`` connections that send ``first_bytes`` (maybe nothing) and then nothing more
    (keep the writers: one garbage-collected closes its connection)."""
    async def one() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(*address)
        if first_bytes:
            writer.write(first_bytes)
        return reader, writer

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def until_closed(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    data = await reader.read()
    return data, time.monotonic()


def test_sockets_that_never_connect_are_closed_while_others_are_served(
        make_gateway: Callable[..., GatewayProcess]) -> None:
    raise_open_file_limit(2_500)
    # 6 s: more than opening 2,000 sockets and serving a client on a loaded host takes (3 s was not, once
    # in CI: 4.0 s from the first socket to the client served)
    gateway = make_gateway(args=["--set", "stomp.connect_timeout_ms=6000"])
    queue = f"/queue/silent.{uuid.uuid4().hex}"

    async def scenario() -> tuple[float, list[tuple[bytes, float]], float]:
        opened = time.monotonic()
        sockets = await silent_sockets(gateway.address, 1_990)
        sockets += await silent_sockets(gateway.address, 10, b"CONNECT\naccept-version:1.2\n")  # never ends
        # while they hang around, a client is served (in a thread: stomp.py blocks)
        def serve() -> float:
            client = Client(gateway.address)
            client.subscribe(queue)
            client.send(queue, "served", receipt=True)
            assert client.message().body == b"served"
            served = time.monotonic()
            time.sleep(max(0.0, opened + 8.0 - time.monotonic()))  # past the timeout: still connected
            client.send(queue, "still served", receipt=True)
            assert client.message().body == b"still served"
            client.disconnect()
            return served

        served_at, closed = await asyncio.gather(
            asyncio.to_thread(serve),
            asyncio.wait_for(asyncio.gather(*(until_closed(r) for r, _ in sockets)), 25),
        )
        for _, writer in sockets:
            writer.close()
        return opened, closed, served_at

    opened, closed, served_at = asyncio.run(scenario())
    assert all(b"connect timeout" in data for data, _ in closed), {data[:60] for data, _ in closed}
    times = sorted(at - opened for _, at in closed)
    assert times[0] >= 5.9, f"a socket was closed {times[0]:.2f}s after it opened, before the timeout"
    assert times[-1] < 15, f"the last socket was closed {times[-1]:.2f}s after it opened"
    assert served_at - opened < times[0], "the client was served only once the silent sockets were closed"


def metric(port: int, name: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return next((line for line in text.splitlines() if line.startswith(name)), f"{name} not found in:\n{text}")


def stomp_connect(address: tuple[str, int]) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(address, timeout=10)
    sock.sendall(CONNECT)
    data = b""
    while b"\x00" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return sock, data.lstrip(b"\r\n")


@pytest.mark.parametrize(("key", "limit", "refusing"), [
    ("max_connections", "total", "refusing STOMP connections: 3 open, the limit is 3"),
    ("max_connections_per_address", "per_address", "refusing STOMP connections from 127.0.0.1: 3 open"),
], ids=["total", "per-address"])
def test_connections_past_a_cap_are_refused_with_one_log_line_and_a_metric(
        make_gateway: Callable[..., GatewayProcess], key: str, limit: str, refusing: str) -> None:
    admin = free_port()
    gateway = make_gateway(f'[admin]\nlisten = "tcp:{admin}:interface=127.0.0.1"\n',
                           args=["--set", f"stomp.{key}=3"])
    gateway.wait_for_log("admin endpoint on")
    wait_until(lambda: metric(admin, "jmsgateway_stomp_connections ") == "jmsgateway_stomp_connections 0.0",
               what="the start-up probe's connection gone")
    admitted = [stomp_connect(gateway.address) for _ in range(3)]
    assert all(reply.startswith(b"CONNECTED\n") for _, reply in admitted)
    for _ in range(4):
        sock, reply = stomp_connect(gateway.address)
        assert reply.startswith(b"ERROR\n") and b"message:too many connections" in reply, reply
        assert f"stomp.{key}".encode() not in reply and f"[stomp] {key}".encode() in reply, reply
        sock.settimeout(5)
        assert sock.recv(100) == b"", "a refused connection stayed open"
        sock.close()
    assert metric(admin, f'jmsgateway_stomp_connections_refused_total{{limit="{limit}"}}').endswith(" 4.0")
    assert metric(admin, "jmsgateway_stomp_connections ") == "jmsgateway_stomp_connections 3.0"
    log = gateway.wait_for_log(refusing)
    assert log.count("refusing STOMP connections") == 1, log

    admitted.pop()[0].close()
    wait_until(lambda: metric(admin, "jmsgateway_stomp_connections ") == "jmsgateway_stomp_connections 2.0",
               what="a closed connection released")
    sock, reply = stomp_connect(gateway.address)
    assert reply.startswith(b"CONNECTED\n"), reply
    assert "(4 refused at " in gateway.wait_for_log("(4 refused at ")
    for other, _ in [*admitted, (sock, b"")]:
        other.close()


def stalled_consumer(address: tuple[str, int], queue: str, heart_beat: str) -> socket.socket:
    """A client-individual subscriber with a tiny receive buffer that will stop reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(address)
    sock.sendall(f"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:{heart_beat}\n\n\x00"
                 f"SUBSCRIBE\nid:s\ndestination:{queue}\nack:client-individual\nreceipt:sub\n\n\x00".encode())
    data = b""
    while b"receipt-id:sub" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    return sock


@pytest.mark.parametrize("how", ["heart-beat", "error", "disconnect"])
def test_a_closed_peer_that_stopped_reading_is_aborted_and_its_messages_go_to_another_consumer(
        make_gateway: Callable[..., GatewayProcess], how: str) -> None:
    gateway = make_gateway(args=["--set", "stomp.heartbeat_receive_ms=1000"])
    queue = f"/queue/stalled.{uuid.uuid4().hex}"
    stalled = stalled_consumer(gateway.address, queue, "1000,0" if how == "heart-beat" else "0,0")
    producer = Client(gateway.address)
    body = b"x" * (512 * 1024)
    for index in range(20):
        producer.send(queue, body, receipt=True, index=str(index))
    time.sleep(0.5)  # the gateway has written what the stalled consumer's socket takes
    if how == "error":
        stalled.sendall(b"NOT-A-COMMAND\n\n\x00")
    elif how == "disconnect":
        stalled.sendall(b"DISCONNECT\nreceipt:bye\n\n\x00")
    # the stalled consumer neither reads nor writes from here on
    consumer = Client(gateway.address)
    consumer.subscribe(queue, ack="client-individual")
    started = time.monotonic()
    received: set[int] = set()
    deadline = started + 15  # heart-beat limit 1.5s + close_timeout_ms 5s + delivery
    while len(received) < 20 and time.monotonic() < deadline:
        with contextlib.suppress(AssertionError):
            frame = consumer.message(timeout=max(0.1, deadline - time.monotonic()))
            received.add(int(frame.headers["index"]))
            consumer.ack(frame, receipt=False)
    assert received == set(range(20)), f"{20 - len(received)} messages stayed locked to the stalled consumer"
    assert "aborting the connection of 127.0.0.1:" in gateway.wait_for_log("aborting the connection")
    stalled.close()
    producer.disconnect()
    consumer.disconnect()
