"""JMS semantics of the embedded broker under ordinary failures, through the real gateway.

Each test reproduces one defect of issue 26 against a ``twistd`` gateway with
SQLite persistence, with stomp.py clients or raw sockets: a failed COMMIT
applies nothing, a stalled consumer does not drain a backlog, an ACK committed
after UNSUBSCRIBE is final, one failed delivery is one redelivery, one
producer's messages arrive in order, a durable subscription has one active
subscriber and its own key, and acknowledging in a transaction frees credit.
"""

from __future__ import annotations

import queue
import socket
import time
import uuid
from collections.abc import Callable, Mapping

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

SQLITE = ["--set", 'broker.persistence="sqlite"']


def name(kind: str = "queue") -> str:
    return f"/{kind}/sem.{uuid.uuid4().hex[:8]}"


def drain(client: Client, quiet: float = 1.0) -> list[str]:
    bodies = []
    while True:
        try:
            bodies.append(client.listener.messages.get(timeout=quiet).body.decode())
        except queue.Empty:
            return bodies


def frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = "".join(f"{key}:{value}\n" for key, value in headers.items())
    return f"{command}\n{lines}\n".encode() + body + b"\x00"


def raw_connect(address: tuple[str, int], rcvbuf: int | None = None, headers: Mapping[str, str] | None = None,
                **more_headers: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(address)
    sock.sendall(frame("CONNECT", {"accept-version": "1.2", "host": "x", **(headers or {}), **more_headers}))
    reply = b""
    while b"\x00" not in reply:
        reply += sock.recv(4096)
    assert reply.startswith(b"CONNECTED"), reply
    return sock


def read_frames(sock: socket.socket, until: bytes, timeout: float = 10.0) -> bytes:
    """What the socket receives until ``until`` appears (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    data = b""
    while until not in data:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"{until!r} not received within {timeout}s: {data[-500:]!r}") from None
        if not chunk:
            break
        data += chunk
    return data


def test_a_failed_commit_applies_none_of_its_acks_and_sends(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=SQLITE)
    requests, out = name(), name()
    owner = Client(gateway.address)
    owner.subscribe("/temp-queue/replies", "t")
    owner.send(requests, "request-1", receipt=True, persistent="true", headers={"reply-to": "/temp-queue/replies"})
    worker = Client(gateway.address)
    worker.subscribe(requests, "w", ack="client-individual")
    request = worker.message()
    reply_to = request.headers["reply-to"]
    assert reply_to.startswith("/remote-temp-queue/")
    owner.disconnect()  # the reply destination's owner leaves
    time.sleep(0.3)
    worker.begin("tx")
    worker.ack(request, "tx")
    worker.send(out, "forwarded", transaction="tx", persistent="true")
    worker.send(reply_to, "reply", transaction="tx", persistent="true")
    receipt = uuid.uuid4().hex
    worker.connection.commit("tx", headers={"receipt": receipt})
    error = worker.error(timeout=10)
    assert error is not None and error.headers["message"] == "invalid destination", error
    assert error.headers.get("receipt-id") == receipt
    checker = Client(gateway.address)
    checker.subscribe(requests, "r", ack="client-individual")
    again = checker.message()
    assert again.body == b"request-1"
    assert again.headers.get("redelivered") == "true"
    checker.subscribe(out, "o")
    assert checker.no_message(0.5), "a SEND of the failed COMMIT was stored"
    gateway.kill()
    gateway.start()
    checker = Client(gateway.address)
    checker.subscribe(requests, "r")
    assert drain(checker, 0.5) == ["request-1"]
    checker.subscribe(out, "o")
    assert checker.no_message(0.5)
    checker.disconnect()


def test_a_backlog_dispatched_at_subscribe_waits_for_a_stalled_consumer(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=SQLITE)
    destination, backlog, body = name(), 2000, "x" * 10_000
    producer = raw_connect(gateway.address)
    sends = b"".join(frame("SEND", {"destination": destination, "persistent": "true"}, body.encode())
                     for _ in range(backlog))
    producer.sendall(sends + frame("SEND", {"destination": "/queue/sem.done", "receipt": "r"}, b""))
    read_frames(producer, b"receipt-id:r", timeout=60)
    producer.close()
    stalled = raw_connect(gateway.address, rcvbuf=4096)
    stalled.sendall(frame("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "auto"}))
    time.sleep(2.0)  # it never reads
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    stalled.close()  # dies (RST)
    time.sleep(0.5)
    counter = Client(gateway.address)
    counter.subscribe(destination, "c")
    left = len(drain(counter))
    counter.disconnect()
    # The stalled consumer got what its transport accepted (the kernel's socket
    # buffers and the transport's 64 KB bound), never the whole backlog.
    assert left >= backlog // 2, f"only {left} of {backlog} messages are left"


def test_an_ack_committed_after_unsubscribe_is_final(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=SQLITE)
    destination = name()
    client = Client(gateway.address)
    client.send(destination, "A1", receipt=True, persistent="true")
    client.subscribe(destination, "s", ack="client-individual")
    a1 = client.message()
    client.begin("tx")
    client.ack(a1, "tx")
    client.unsubscribe("s")
    client.commit("tx")
    other = Client(gateway.address)
    other.subscribe(destination, "o", ack="client-individual")
    assert other.no_message(1.0), "an acknowledgement committed in a transaction came back"
    gateway.kill()
    gateway.start()
    other = Client(gateway.address)
    other.subscribe(destination, "o")
    assert other.no_message(0.5)
    other.disconnect()


def _dead_letters(gateway: GatewayProcess, destination: str) -> list[str]:
    checker = Client(gateway.address)
    checker.subscribe("/queue/DLQ." + destination.split("/", 2)[-1], "d")
    bodies = drain(checker, 0.5)
    checker.disconnect()
    return bodies


def test_a_connection_dropped_with_an_open_transaction_counts_one_failure(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=[*SQLITE, "--set", "broker.max_redeliveries=1"])
    destination = name()
    producer = Client(gateway.address)
    producer.send(destination, "m", receipt=True, persistent="true")
    consumer = Client(gateway.address)
    consumer.subscribe(destination, "s", ack="client-individual")
    message = consumer.message()
    consumer.begin("tx")
    consumer.ack(message, "tx")
    consumer.drop()
    time.sleep(0.3)
    again = Client(gateway.address)
    again.subscribe(destination, "s", ack="client-individual")
    frame_ = again.message()
    assert frame_.body == b"m" and frame_.headers.get("redelivered") == "true"
    assert _dead_letters(gateway, destination) == []


def test_a_connection_with_two_subscriptions_to_a_queue_counts_one_failure(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=[*SQLITE, "--set", "broker.max_redeliveries=1"])
    destination = name()
    producer = Client(gateway.address)
    producer.send(destination, "m", receipt=True, persistent="true")
    consumer = Client(gateway.address)
    consumer.subscribe(destination, "s1", ack="client-individual")
    consumer.subscribe(destination, "s2", ack="client-individual")
    assert consumer.message().body == b"m"
    consumer.drop()
    time.sleep(0.3)
    again = Client(gateway.address)
    again.subscribe(destination, "s", ack="client-individual")
    assert again.message().body == b"m", f"dead-lettered: {_dead_letters(gateway, destination)}"


def test_one_producers_topic_messages_arrive_in_order_beside_a_durable_selector(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=SQLITE)
    topic = name("topic")
    durable = Client(gateway.address, headers={"client-id": "app"})
    durable.subscribe(topic, "d", selector="n = 4", headers={"activemq.subscriptionName": "fours"})
    plain = Client(gateway.address)
    plain.subscribe(topic, "p")
    producer = raw_connect(gateway.address)
    producer.sendall(b"".join(
        frame("SEND", {"destination": topic, "persistent": "true", "n": str(n)}, str(n).encode())
        for n in range(1, 7)
    ))
    assert [plain.message().body.decode() for _ in range(6)] == ["1", "2", "3", "4", "5", "6"]
    assert durable.message().body == b"4"
    producer.close()


def test_a_durable_subscription_has_one_active_subscriber_even_while_it_is_created(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=SQLITE)
    topic = name("topic")
    sock = raw_connect(gateway.address, headers={"client-id": "twice"})
    sub = {"destination": topic, "activemq.subscriptionName": "one"}
    sock.sendall(frame("SUBSCRIBE", {**sub, "id": "a", "receipt": "ra"})
                 + frame("SUBSCRIBE", {**sub, "id": "b", "receipt": "rb"}))
    data = read_frames(sock, b"active subscriber", timeout=10)
    # answers in frame order (issue 38): the first SUBSCRIBE's RECEIPT (once its record is
    # stored), then the second one's ERROR
    assert data.startswith(b"RECEIPT\nreceipt-id:ra\n"), data
    error = data[data.index(b"ERROR"):]
    assert b"receipt-id:rb" in error and b"already has an active subscriber" in error
    sock.close()


def test_durable_subscriptions_of_colon_names_are_distinct(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=SQLITE)
    topic = name("topic")
    first = Client(gateway.address, headers={"client-id": "a:b"})
    first.subscribe(topic, "s", headers={"activemq.subscriptionName": "c"})
    first.disconnect()
    producer = Client(gateway.address)
    producer.send(topic, "for a:b / c", receipt=True, persistent="true")
    second = Client(gateway.address, headers={"client-id": "a"})
    second.subscribe(topic, "s", headers={"activemq.subscriptionName": "b:c"})
    assert second.no_message(0.5), "another client's durable subscription got the backlog"
    second.disconnect()
    first = Client(gateway.address, headers={"client-id": "a:b"})
    first.subscribe(topic, "s", headers={"activemq.subscriptionName": "c"})
    assert first.message().body == b"for a:b / c"
    first.disconnect()


def test_acks_in_a_transaction_free_prefetch_credit(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway(args=SQLITE)
    destination = name()
    producer = Client(gateway.address)
    for i in range(5):
        producer.send(destination, f"m{i}", receipt=True, persistent="true")
    consumer = Client(gateway.address)
    consumer.subscribe(destination, "s", ack="client-individual", headers={"activemq.prefetchSize": "2"})
    consumer.begin("tx")
    got = []
    for _ in range(5):  # more than the prefetch, in one transaction
        message = consumer.message(timeout=3)
        got.append(message.body.decode())
        consumer.ack(message, "tx")
    consumer.commit("tx")
    assert got == [f"m{i}" for i in range(5)]
    other = Client(gateway.address)
    other.subscribe(destination, "o")
    assert other.no_message(0.5)
