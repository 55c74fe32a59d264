"""The embedded broker through the real gateway process, driven by stomp.py.

Queues, topics, temporary queues, ack modes, NACK and redelivery, dead
letters, transactions, receipts, durable subscriptions, prefetch, priority,
expiry and header pass-through, for STOMP 1.0, 1.1 and 1.2.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support.stomp_clients import StompClients

VERSIONS = ["1.0", "1.1", "1.2"]
ACK_VERSIONS = ["1.1", "1.2"]  # NACK and client-individual need 1.1+


def dest(kind: str = "queue") -> str:
    return f"/{kind}/t.{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("version", VERSIONS)
def test_queue_keeps_messages_until_a_consumer_comes(stomp: StompClients, version: str) -> None:
    queue = dest()
    producer = stomp.connect(version)
    for i in range(3):
        producer.send(queue, f"m{i}", receipt=True)
    consumer = stomp.connect(version)
    consumer.subscribe(queue, "s1")
    bodies = [frame.body for frame in consumer.messages(3)]
    assert bodies == [b"m0", b"m1", b"m2"]
    assert consumer.no_message(0.3)


@pytest.mark.parametrize("version", VERSIONS)
def test_competing_consumers_are_served_in_turn(stomp: StompClients, version: str) -> None:
    queue = dest()
    first = stomp.connect(version)
    second = stomp.connect(version)
    first.subscribe(queue, "a")
    second.subscribe(queue, "b")
    producer = stomp.connect(version)
    for i in range(10):
        producer.send(queue, f"m{i}", receipt=True)
    got_first = [f.body for f in first.messages(5)]
    got_second = [f.body for f in second.messages(5)]
    assert sorted(got_first + got_second) == sorted(f"m{i}".encode() for i in range(10))
    assert first.no_message(0.2) and second.no_message(0.2)


@pytest.mark.parametrize("version", VERSIONS)
def test_topic_fans_out_to_current_subscribers_only(stomp: StompClients, version: str) -> None:
    topic = dest("topic")
    producer = stomp.connect(version)
    producer.send(topic, "before anyone listens", receipt=True)
    subscribers = [stomp.connect(version) for _ in range(3)]
    for index, subscriber in enumerate(subscribers):
        subscriber.subscribe(topic, f"s{index}")
    producer.send(topic, "hello all", receipt=True)
    for subscriber in subscribers:
        frame = subscriber.message()
        assert frame.body == b"hello all"
        assert frame.headers["destination"] == topic
        assert subscriber.no_message(0.2)


@pytest.mark.parametrize("version", VERSIONS)
def test_message_headers(stomp: StompClients, version: str) -> None:
    queue = dest()
    producer = stomp.connect(version)
    consumer = stomp.connect(version)
    consumer.subscribe(queue, "s1")
    producer.send(queue, "payload", receipt=True, headers={
        "correlation-id": "corr-1", "reply-to": "/queue/replies", "type": "order", "persistent": "true",
        "priority": "7", "x-user": "ünïcode:value",
    })
    frame = consumer.message()
    headers = frame.headers
    assert headers["destination"] == queue
    assert headers["message-id"].startswith("ID:")
    assert headers["subscription"] == "s1"
    assert headers["content-length"] == str(len(frame.body))
    assert headers["correlation-id"] == "corr-1"
    assert headers["reply-to"] == "/queue/replies"
    assert headers["type"] == "order"
    assert headers["persistent"] == "true"
    assert headers["priority"] == "7"
    assert headers["x-user"] == ("ünïcode:value" if version != "1.0" else headers["x-user"])
    assert "ack" not in headers  # an ack:auto delivery has nothing to acknowledge (docs/stomp.md)


def test_bytes_body_with_nul_survives(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s1")
    body = bytes(range(256)) * 4
    producer.send(queue, body, receipt=True)
    assert consumer.message().body == body


def test_invalid_utf8_without_content_length_is_refused(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2", text=True)
    producer.connection.send(queue, b"\xff\xfe not text", headers={"receipt": "r1"})
    error = producer.error()
    assert error is not None
    assert error.headers["message"] == "invalid UTF-8 body"
    assert error.headers["receipt-id"] == "r1"
    assert b"content-length" in error.body
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s1")
    assert consumer.no_message(0.3)


def test_priority_orders_waiting_messages(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    for priority in (1, 9, 4, 7, 0):
        producer.send(queue, f"p{priority}", receipt=True, priority=str(priority))
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s1")
    assert [f.body for f in consumer.messages(5)] == [b"p9", b"p7", b"p4", b"p1", b"p0"]


def test_expired_messages_are_not_delivered(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    now_ms = int(time.time() * 1000)
    producer.send(queue, "stale", receipt=True, expires=str(now_ms + 300))
    producer.send(queue, "fresh", receipt=True, expires=str(now_ms + 600_000))
    producer.send(queue, "forever", receipt=True)
    time.sleep(0.6)
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s1")
    assert [f.body for f in consumer.messages(2)] == [b"fresh", b"forever"]
    assert consumer.no_message(0.3)


# -- acknowledgement ---------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_client_ack_is_cumulative(stomp: StompClients, version: str) -> None:
    queue = dest()
    producer = stomp.connect(version)
    for i in range(4):
        producer.send(queue, f"m{i}", receipt=True)
    consumer = stomp.connect(version)
    consumer.subscribe(queue, "s1", ack="client")
    frames = consumer.messages(4)
    consumer.ack(frames[2])  # acknowledges m0, m1 and m2
    consumer.drop()
    again = stomp.connect(version)
    again.subscribe(queue, "s2", ack="client")
    frame = again.message()
    assert frame.body == b"m3"
    assert frame.headers.get("redelivered") == "true"
    assert again.no_message(0.3)


@pytest.mark.parametrize("version", ACK_VERSIONS)
def test_client_individual_ack(stomp: StompClients, version: str) -> None:
    queue = dest()
    producer = stomp.connect(version)
    for i in range(3):
        producer.send(queue, f"m{i}", receipt=True)
    consumer = stomp.connect(version)
    consumer.subscribe(queue, "s1", ack="client-individual")
    frames = consumer.messages(3)
    consumer.ack(frames[2])
    consumer.drop()
    again = stomp.connect(version)
    again.subscribe(queue, "s2", ack="client-individual")
    redelivered = again.messages(2)
    assert sorted(f.body for f in redelivered) == [b"m0", b"m1"]
    assert all(f.headers.get("redelivered") == "true" for f in redelivered)


@pytest.mark.parametrize("version", ACK_VERSIONS)
def test_nack_redelivers_then_dead_letters(stomp: StompClients, version: str) -> None:
    queue = dest()
    producer = stomp.connect(version)
    producer.send(queue, "poison", receipt=True, persistent="true")
    consumer = stomp.connect(version)
    consumer.subscribe(queue, "s1", ack="client-individual")
    first = consumer.message()
    assert "redelivered" not in first.headers
    consumer.nack(first)
    # max_redeliveries = 6 in the default config: six more tries, then the DLQ.
    for _ in range(6):
        frame = consumer.message()
        assert frame.headers["redelivered"] == "true"
        assert frame.headers["message-id"] == first.headers["message-id"]
        consumer.nack(frame)
    assert consumer.no_message(0.3)
    dlq = stomp.connect(version)
    dlq.subscribe("/queue/DLQ." + queue.split("/", 2)[2], "d")
    dead = dlq.message()
    assert dead.body == b"poison"
    assert dead.headers["original-destination"] == queue
    assert "dlqDeliveryFailureCause" in dead.headers


def test_unacked_messages_of_a_closed_connection_go_to_another_consumer(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    for i in range(5):
        producer.send(queue, f"m{i}", receipt=True)
    greedy = stomp.connect("1.2")
    greedy.subscribe(queue, "s1", ack="client-individual")
    greedy.messages(5)
    other = stomp.connect("1.2")
    other.subscribe(queue, "s2", ack="client-individual")
    assert other.no_message(0.3)
    greedy.drop()
    frames = other.messages(5)
    assert [f.body for f in frames] == [f"m{i}".encode() for i in range(5)]
    assert all(f.headers["redelivered"] == "true" for f in frames)


def test_ack_of_unknown_id_is_an_error(stomp: StompClients) -> None:
    client = stomp.connect("1.2")
    client.connection.ack("no-such-ack-id", receipt="r9")
    error = client.error()
    assert error is not None
    assert error.headers["message"] == "unknown ack id"
    assert error.headers["receipt-id"] == "r9"


def test_prefetch_limits_unacknowledged_deliveries(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    for i in range(4):
        producer.send(queue, f"m{i}", receipt=True)
    slow = stomp.connect("1.2")
    slow.subscribe(queue, "s1", ack="client-individual", headers={"activemq.prefetchSize": "1"})
    held = slow.message()
    assert slow.no_message(0.3)
    fast = stomp.connect("1.2")
    fast.subscribe(queue, "s2", ack="auto")
    assert len(fast.messages(3)) == 3
    slow.ack(held)
    assert held.body == b"m0"


# -- transactions --------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_sends_become_visible_at_commit(stomp: StompClients, version: str) -> None:
    queue = dest()
    consumer = stomp.connect(version)
    consumer.subscribe(queue, "s1")
    producer = stomp.connect(version)
    producer.begin("tx1")
    producer.connection.send(queue, "one", transaction="tx1")
    producer.connection.send(queue, "two", transaction="tx1")
    assert consumer.no_message(0.4)
    producer.commit("tx1")
    assert [f.body for f in consumer.messages(2)] == [b"one", b"two"]


def test_abort_and_disconnect_roll_back(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    producer.begin("tx1")
    producer.connection.send(queue, "aborted", transaction="tx1")
    producer.abort("tx1")
    producer.begin("tx2")
    producer.connection.send(queue, "lost with the connection", transaction="tx2")
    producer.disconnect()
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s1")
    assert consumer.no_message(0.5)


def test_acks_inside_an_aborted_transaction_are_undone(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    producer.send(queue, "m", receipt=True)
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s1", ack="client-individual")
    frame = consumer.message()
    consumer.begin("tx")
    consumer.ack(frame, transaction="tx", receipt=False)
    consumer.abort("tx")
    again = consumer.message()
    assert again.body == b"m"
    assert again.headers["redelivered"] == "true"
    consumer.begin("tx2")
    consumer.ack(again, transaction="tx2", receipt=False)
    consumer.commit("tx2")
    consumer.drop()
    checker = stomp.connect("1.2")
    checker.subscribe(queue, "s2")
    assert checker.no_message(0.4)


def test_unknown_transaction_is_an_error(stomp: StompClients) -> None:
    client = stomp.connect("1.2")
    client.connection.send(dest(), "x", transaction="never-begun")
    error = client.error()
    assert error is not None and error.headers["message"] == "unknown transaction"


# -- temporary queues, durable subscriptions -------------------------------------


def test_request_reply_through_a_temporary_queue(stomp: StompClients) -> None:
    service_queue = dest()
    server = stomp.connect("1.2")
    server.subscribe(service_queue, "svc")
    requester = stomp.connect("1.2")
    requester.subscribe("/temp-queue/replies", "r")
    requester.send(service_queue, "ping", receipt=True, headers={"reply-to": "/temp-queue/replies"})
    request = server.message()
    reply_to = request.headers["reply-to"]
    assert reply_to.startswith("/remote-temp-queue/")
    server.send(reply_to, "pong", receipt=True)
    reply = requester.message()
    assert reply.body == b"pong"
    assert reply.headers["destination"] == "/temp-queue/replies"
    # Someone else may not consume it, and it disappears with its owner.
    intruder = stomp.connect("1.2")
    intruder.connection.subscribe(reply_to, "x", headers={"receipt": "r1"})
    error = intruder.error()
    assert error is not None and error.headers["message"] == "temporary destination is private"
    requester.disconnect()
    time.sleep(0.2)
    late = stomp.connect("1.2")
    late.connection.send(reply_to, "too late", headers={"receipt": "r2"})
    error = late.error()
    assert error is not None and error.headers["message"] == "invalid destination"


@pytest.mark.parametrize("name_header", ["activemq.subscriptionName", "durable-subscription-name"])
def test_durable_subscription_keeps_messages_while_away(stomp: StompClients, name_header: str) -> None:
    topic = dest("topic")
    client_id = f"client-{uuid.uuid4().hex[:6]}"
    subscriber = stomp.connect("1.2", **{"client-id": client_id})
    subscriber.subscribe(topic, "d1", ack="client-individual", headers={name_header: "sub"})
    producer = stomp.connect("1.2")
    producer.send(topic, "while here", receipt=True)
    subscriber.ack(subscriber.message())
    subscriber.disconnect()
    producer.send(topic, "while away 1", receipt=True)
    producer.send(topic, "while away 2", receipt=True)
    back = stomp.connect("1.2", **{"client-id": client_id})
    back.subscribe(topic, "d1", ack="client-individual", headers={name_header: "sub"})
    frames = back.messages(2)
    assert [f.body for f in frames] == [b"while away 1", b"while away 2"]
    for frame in frames:
        back.ack(frame)
    back.unsubscribe("d1", **{name_header: "sub"})
    producer.send(topic, "after unsubscribe", receipt=True)
    back.disconnect()
    last = stomp.connect("1.2", **{"client-id": client_id})
    last.subscribe(topic, "d1", headers={name_header: "sub"})
    assert last.no_message(0.4)


def test_durable_subscription_requires_client_id(stomp: StompClients) -> None:
    client = stomp.connect("1.2")
    client.connection.subscribe(dest("topic"), "d", headers={"activemq.subscriptionName": "x", "receipt": "r"})
    error = client.error()
    assert error is not None
    assert b"client-id" in error.body


# -- receipts, disconnect, errors ------------------------------------------------------


def test_disconnect_receipt_comes_after_previous_work(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    for i in range(50):
        producer.connection.send(queue, f"m{i}")
    producer.connection.disconnect(receipt="bye")
    assert producer.listener.receipt_event("bye").wait(5)
    consumer = stomp.connect("1.2")
    consumer.subscribe(queue, "s")
    assert len(consumer.messages(50)) == 50


def test_errors_close_only_the_offending_connection(stomp: StompClients) -> None:
    queue = dest()
    healthy = stomp.connect("1.2")
    healthy.subscribe(queue, "s")
    offender = stomp.connect("1.2")
    offender.connection.send("/nowhere/x", "bad destination", headers={"receipt": "r1"})
    error = offender.error()
    assert error is not None
    assert error.headers["message"] == "invalid destination"
    assert error.headers["receipt-id"] == "r1"
    assert offender.listener.disconnected.wait(5)
    stomp.connect("1.2").send(queue, "still fine", receipt=True)
    assert healthy.message().body == b"still fine"


def test_bad_selector_is_an_error_for_that_subscribe(stomp: StompClients) -> None:
    client = stomp.connect("1.2")
    client.connection.subscribe(dest(), "s", headers={"selector": "color = 'red' AND (", "receipt": "r"})
    error = client.error()
    assert error is not None
    assert error.headers["message"] == "invalid selector"
    assert b"column" in error.body


def test_selector_delivers_only_matching_and_leaves_the_rest(stomp: StompClients) -> None:
    queue = dest()
    producer = stomp.connect("1.2")
    for color in ("red", "blue", "red", "green"):
        producer.send(queue, color, receipt=True, color=color)
    reds = stomp.connect("1.2")
    reds.subscribe(queue, "r", selector="color = 'red'")
    assert [f.body for f in reds.messages(2)] == [b"red", b"red"]
    assert reds.no_message(0.3)
    rest = stomp.connect("1.2")
    rest.subscribe(queue, "x")
    assert sorted(f.body for f in rest.messages(2)) == [b"blue", b"green"]
