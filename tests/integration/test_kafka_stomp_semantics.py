"""Queue semantics of Kafka subscriptions, end to end: stomp.py -> gateway process -> Tansu.

Selectors on Kafka queues (refused: a shared consumer group cannot keep what a selector
skips), deliveries held across a consumer-group rebalance (forced by a plain
confluent-kafka consumer joining the subscription's group and leaving again), and
acknowledgements of records that share one ``jms.MessageId``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_kafka_stomp import kafka_config
from tests.support.gateway import GatewayProcess
from tests.support.kafka import (
    TansuBroker,
    committed_offsets,
    create_topics,
    join_and_leave,
    kafka_bootstrap,
    produce,
    proxied_kafka,
    unique_topic,
)
from tests.support.stomp_clients import Client, StompClients
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap", "proxied_kafka"]


@pytest.fixture(scope="module")
def kafka_gateway(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("kafka-semantics"), kafka_config(kafka_bootstrap)).start()
    yield process
    process.stop()


@pytest.fixture
def clients(kafka_gateway: GatewayProcess) -> Iterator[StompClients]:
    made = StompClients(kafka_gateway.address)
    yield made
    made.close()


def wait_committed(bootstrap: str, group: str, topic: str, expected: list[int], partitions: int = 1) -> None:
    deadline = time.monotonic() + 10
    while committed_offsets(bootstrap, group, topic, partitions) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert committed_offsets(bootstrap, group, topic, partitions) == expected


def bodies(frames: list[Any]) -> list[bytes]:
    return [frame.body for frame in frames]


# ------------------------------------------------------------------ selectors (defect 10)


def test_selector_on_a_kafka_queue_is_refused_and_loses_nothing(clients: StompClients, kafka_bootstrap: str) -> None:
    topic = unique_topic("qsel")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": b"red1", "headers": [("jms.color", b"red")]},
                                     {"value": b"blue1", "headers": [("jms.color", b"blue")]}])
    picky = clients.connect()
    picky.connection.subscribe(f"/queue/kafka.{topic}", "s1", ack="client-individual",
                               headers={"selector": "color = 'red'", "receipt": "sub-picky"})
    error = picky.error(timeout=15)
    assert error is not None, "a selector on a Kafka queue must be refused with an ERROR"
    assert error.headers.get("receipt-id") == "sub-picky"
    assert b"not supported on Kafka queue" in error.body
    assert picky.no_message(0.2)
    plain = clients.connect()
    plain.subscribe(f"/queue/kafka.{topic}", sub_id="s2", ack="client-individual")
    frames = plain.messages(2, timeout=20)
    assert bodies(frames) == [b"red1", b"blue1"]  # nothing was consumed by the refused subscriber
    for frame in frames:
        plain.ack(frame)
    wait_committed(kafka_bootstrap, f"jmsgateway.queue.{topic}", topic, [2])


def test_selector_on_a_kafka_topic_filters(clients: StompClients, kafka_bootstrap: str) -> None:
    topic = unique_topic("tsel")
    create_topics(kafka_bootstrap, topic)
    subscriber = clients.connect()
    subscriber.subscribe(f"/topic/kafka.{topic}", sub_id="t1", ack="client-individual", selector="color = 'red'")
    sender = clients.connect(text=True)
    for body, color in (("red1", "red"), ("blue1", "blue"), ("red2", "red")):
        sender.send(f"/topic/kafka.{topic}", body, receipt=True, color=color)
    frames = subscriber.messages(2, timeout=20)
    assert bodies(frames) == [b"red1", b"red2"]
    assert subscriber.no_message(0.5)


# ------------------------------------------------------------------ rebalances (defect 11)


def test_rebalance_keeps_held_deliveries_and_the_prefetch_bound(
    clients: StompClients, kafka_bootstrap: str
) -> None:
    topic = unique_topic("rebal")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": f"r{i}".encode()} for i in range(4)])
    client = clients.connect()
    client.subscribe(f"/queue/kafka.{topic}", sub_id="q1", ack="client-individual",
                     headers={"activemq.prefetchSize": "2"})
    held = client.messages(2, timeout=20)
    assert bodies(held) == [b"r0", b"r1"]
    group = f"jmsgateway.queue.{topic}"
    join_and_leave(kafka_bootstrap, group, topic)  # two rebalances; nobody else commits anything
    # the client still holds r0 and r1 with prefetch 2: nothing may come (before: r0, r1 again, as new)
    assert client.no_message(3.0), f"got {bodies([client.message()])} while holding the prefetch"
    for frame in held:
        client.ack(frame)  # the deliveries made before the rebalance are still valid
    wait_committed(kafka_bootstrap, group, topic, [2])
    rest = client.messages(2, timeout=20)
    assert bodies(rest) == [b"r2", b"r3"]
    assert all("redelivered" not in frame.headers for frame in rest)
    for frame in rest:
        client.ack(frame)
    wait_committed(kafka_bootstrap, group, topic, [4])


def test_rebalance_flags_what_comes_again_as_redelivered(clients: StompClients, kafka_bootstrap: str) -> None:
    topic = unique_topic("rebal2")
    create_topics(kafka_bootstrap, topic, partitions=2)
    produce(kafka_bootstrap, topic, [{"value": f"p{p}-{i}".encode(), "partition": p} for p in (0, 1) for i in (0, 1)])
    client = clients.connect()
    client.subscribe(f"/queue/kafka.{topic}", sub_id="q1", ack="client-individual",
                     headers={"activemq.prefetchSize": "10"})
    held = client.messages(4, timeout=20)
    assert sorted(bodies(held)) == [b"p0-0", b"p0-1", b"p1-0", b"p1-1"]
    group = f"jmsgateway.queue.{topic}"
    # the other member gets one partition, consumes and commits its first record, then leaves
    commits = join_and_leave(kafka_bootstrap, group, topic, commit_first=True)
    assert len(commits) == 1, commits
    moved, _ = commits[0]
    again = client.message(timeout=20)
    assert again.body == f"p{moved}-1".encode()
    assert again.headers.get("redelivered") == "true"
    assert client.no_message(2.0)  # the other partition was not consumed meanwhile: its deliveries still hold
    for frame in [*held, again]:
        client.ack(frame)  # the stale copy of p<moved>-1 is ignored, its new delivery commits
    wait_committed(kafka_bootstrap, group, topic, [2, 2], partitions=2)


def test_session_timeout_keeps_held_deliveries(proxied_kafka: tuple[TansuBroker, TcpProxy], tmp_path: Path) -> None:
    broker, proxy = proxied_kafka
    topic = unique_topic("lost")
    create_topics(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [{"value": f"r{i}".encode()} for i in range(4)])
    gateway = GatewayProcess(tmp_path / "gw", kafka_config(broker.bootstrap)).start()
    clients = StompClients(gateway.address)
    try:
        client = clients.connect()
        client.subscribe(f"/queue/kafka.{topic}", sub_id="q1", ack="client-individual",
                         headers={"activemq.prefetchSize": "2"})
        held = client.messages(2, timeout=20)
        assert bodies(held) == [b"r0", b"r1"]
        proxy.cut()  # no heartbeats for four session timeouts: the group drops the member
        time.sleep(4.0)
        proxy.restore()  # it rejoins and gets the partition again, at the committed offset 0
        gateway.wait_for_log("assigned again after a rebalance; deliveries resumed on [0]", timeout=20)
        assert client.no_message(8.0), f"got {bodies([client.message()])} while holding the prefetch"
        for frame in held:
            client.ack(frame)
        rest = client.messages(2, timeout=20)
        assert bodies(rest) == [b"r2", b"r3"]
        for frame in rest:
            client.ack(frame)
        wait_committed(broker.bootstrap, f"jmsgateway.queue.{topic}", topic, [4])
    finally:
        clients.close()
        gateway.stop()


# ------------------------------------------------------------------ one jms.MessageId, two records (defect 9)


def test_records_sharing_a_message_id_are_each_acknowledged(clients: StompClients, kafka_bootstrap: str) -> None:
    topic = unique_topic("dupid")
    create_topics(kafka_bootstrap, topic)
    headers = [("jms.MessageId", b"ID:same")]
    produce(kafka_bootstrap, topic, [{"value": b"first", "headers": headers}, {"value": b"second", "headers": headers}])
    client: Client = clients.connect("1.2")
    client.subscribe(f"/queue/kafka.{topic}", sub_id="d1", ack="client-individual")
    frames = client.messages(2, timeout=20)
    assert bodies(frames) == [b"first", b"second"]
    client.ack(frames[1])
    client.ack(frames[0])
    assert client.error(timeout=0.2) is None
    wait_committed(kafka_bootstrap, f"jmsgateway.queue.{topic}", topic, [2])
    client.unsubscribe("d1")
    later = clients.connect()
    later.subscribe(f"/queue/kafka.{topic}", sub_id="d2", ack="client-individual")
    assert later.no_message(2.0)
