"""KafkaConnector against a real Kafka-protocol broker (Tansu, or JMSGATEWAY_KAFKA_BOOTSTRAP).

What every connector does (receipts, acknowledgement, prefetch, selectors,
durable subscriptions, reconnection, flow control) is checked by the connector
contract (tests/contract/test_kafka_contract.py); here is what is Kafka's own:
the records' headers, offsets committed, rebalances, partitions paused.  Sends
are checked with a plain confluent-kafka consumer; subscriptions with the
committed offsets of their group, read by a fresh consumer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from zope.interface.verify import verifyObject

from gateway.connectors.kafka import KafkaConnector
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.errors import DestinationError
from gateway.interfaces import ISubscription, SubscriptionSpec
from gateway.message.kafka_delivery import DeliveryReport, KafkaDeliveryError
from gateway.message.model import BytesMessage, TextMessage
from tests.support.consumers import CollectingConsumer
from tests.support.kafka import (
    committed_offsets,
    create_topics,
    group_settings,
    join_and_leave,
    kafka_bootstrap,
    produce,
    read_records,
    unique_topic,
)
from tests.support.reactor_waits import in_thread, reactor, wait_for

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]


@pytest.fixture
def connector(kafka_bootstrap: str) -> Iterator[KafkaConnector]:
    settings = KafkaSettings.from_options(
        {
            "uri": f"kafka://{kafka_bootstrap}",
            "consumer": group_settings(),
            "transactional_id": f"tx-{unique_topic()}",
        }
    )
    kafka = KafkaConnector(reactor, settings, name="kafka", gateway_id="gw-test")
    wait_for(kafka.start)
    yield kafka
    wait_for(kafka.stop)


def text(destination: str, body: str, **properties: Any) -> TextMessage:
    from gateway.message.model import new_message_id

    return TextMessage(destination=destination, message_id=new_message_id(), text=body, persistent=True,
                       properties=properties)


@pytest_twisted.ensureDeferred
async def test_a_refused_record_leaves_no_open_transaction(connector: KafkaConnector, kafka_bootstrap: str) -> None:
    """A record produce() refuses at once (over message.max.bytes) needs no abort by
    librdkafka's account; the transaction begun for the batch must still end, or every
    later begin_transaction fails (issue 25)."""
    topic = unique_topic("tx-open")
    create_topics(kafka_bootstrap, topic)
    big = BytesMessage(destination=f"/topic/{topic}", message_id="ID:big", body=b"x" * 1_200_000, persistent=True)
    with pytest.raises(KafkaDeliveryError) as refused:
        await connector.send_batch([text(f"/topic/{topic}", "before"), big])
    assert refused.value.permanent, "a record too large is refused for good"
    await connector.send_batch([text(f"/topic/{topic}", "a"), text(f"/topic/{topic}", "b")])
    bodies = [r.value() for r in read_records(kafka_bootstrap, topic, 2, timeout=10, settle=1.0,
                                                **{"isolation.level": "read_committed"})]
    assert bodies == [b"a", b"b"]


@pytest_twisted.ensureDeferred
async def test_send_fires_on_delivery_report_and_record_carries_jms_headers(
    connector: KafkaConnector, kafka_bootstrap: str
) -> None:
    topic = unique_topic()
    create_topics(kafka_bootstrap, topic)
    message = text(f"/topic/kafka.{topic}", "grüße", colour="red", weight=3)
    message.correlation_id = "c-1"
    report = await connector.send(message)
    assert isinstance(report, DeliveryReport) and report.topic == topic and report.offset == 0
    binary = BytesMessage(destination=f"/queue/{topic}", message_id="ID:bin-1", body=b"\x00\xff")
    assert (await connector.send(binary)).offset == 1
    first, second = read_records(kafka_bootstrap, topic, 2, settle=0.5)
    headers = dict(first.headers())
    assert first.key() == message.message_id.encode() and first.value() == "grüße".encode()
    assert headers["jms.MessageId"] == message.message_id.encode()
    assert headers["jms.CorrelationId"] == b"c-1" and headers["jms.colour"] == b"red"
    assert headers["jms.weight"] == b"3" and headers["jmsbridge.origin"] == b"gw-test"
    assert headers["jms.MessageType"] == b"text"
    assert second.value() == b"\x00\xff" and dict(second.headers())["jms.MessageType"] == b"bytes"


@pytest_twisted.ensureDeferred
async def test_unknown_topic_is_a_hard_error(connector: KafkaConnector) -> None:
    with pytest.raises(KafkaDeliveryError) as info:
        await connector.send(text("/topic/kafka.no-such-topic-here", "x"))
    assert info.value.hard and info.value.code == "UNKNOWN_TOPIC_OR_PART"


async def subscribe(connector: KafkaConnector, spec: SubscriptionSpec) -> tuple[Any, CollectingConsumer]:
    consumer = CollectingConsumer()
    subscription = await connector.subscribe(spec, consumer)
    verifyObject(ISubscription, subscription)
    return subscription, consumer


def prepared_topic(bootstrap: str, count: int, partitions: int = 1) -> str:
    topic = unique_topic()
    create_topics(bootstrap, topic, partitions=partitions)
    produce(bootstrap, topic, [{"value": f"r{i}".encode(), "partition": i % partitions} for i in range(count)])
    return topic


@pytest_twisted.ensureDeferred
async def test_client_individual_acks_commit_highest_contiguous_offset(
    connector: KafkaConnector, kafka_bootstrap: str
) -> None:
    topic = prepared_topic(kafka_bootstrap, 5)
    spec = SubscriptionSpec(f"/topic/kafka.{topic}", ack_mode="client-individual", durable_name="ind",
                            client_id="c1")
    subscription, consumer = await subscribe(connector, spec)
    deliveries = await consumer.take(5)
    messages = [m for m, _ in deliveries]
    assert [m.text for m in messages if isinstance(m, TextMessage)] == [f"r{i}" for i in range(5)]
    tags = [tag for _, tag in deliveries]
    await subscription.ack([tags[0], tags[1], tags[3]])
    group = "jmsgateway.c1.ind"
    assert committed_offsets(kafka_bootstrap, group, topic) == [2]  # 2 is unacknowledged
    await subscription.ack([tags[2]])
    assert committed_offsets(kafka_bootstrap, group, topic) == [4]
    await subscription.close()
    assert committed_offsets(kafka_bootstrap, group, topic) == [4]
    # the same durable subscription again: only the unacknowledged record comes back
    again, consumer2 = await subscribe(connector, spec)
    (message, _), = await consumer2.take(1)
    assert isinstance(message, TextMessage) and message.text == "r4"
    assert await consumer2.nothing_more(0.5)
    await again.close()


@pytest_twisted.ensureDeferred
async def test_client_mode_acks_the_listed_deliveries(connector: KafkaConnector, kafka_bootstrap: str) -> None:
    topic = prepared_topic(kafka_bootstrap, 4, partitions=2)
    spec = SubscriptionSpec(f"/topic/kafka.{topic}", ack_mode="client", durable_name="cum", client_id="c2")
    subscription, consumer = await subscribe(connector, spec)
    deliveries = await consumer.take(4)
    # a cumulative ACK of the third delivery: the session lists every tag up to it
    await subscription.ack([tag for _, tag in deliveries[:3]])
    committed = committed_offsets(kafka_bootstrap, "jmsgateway.c2.cum", topic, partitions=2)
    acked = [(tag.partition, tag.offset) for _, tag in deliveries[:3]]
    expected = [max((o + 1 for p, o in acked if p == partition), default=-1001) for partition in range(2)]
    assert committed == expected
    await subscription.close()


@pytest_twisted.ensureDeferred
async def test_nack_redelivers_marked_redelivered(connector: KafkaConnector, kafka_bootstrap: str) -> None:
    topic = prepared_topic(kafka_bootstrap, 3)
    spec = SubscriptionSpec(f"/queue/kafka.{topic}", ack_mode="client-individual")
    subscription, consumer = await subscribe(connector, spec)
    deliveries = await consumer.take(3)
    await subscription.ack([deliveries[0][1]])
    await subscription.nack([deliveries[1][1]])
    again = await consumer.take(2)
    assert [m.text for m, _ in again if isinstance(m, TextMessage)] == ["r1", "r2"]
    assert all(m.redelivered and m.redelivery_count == 1 for m, _ in again)
    await subscription.ack([tag for _, tag in again])
    assert committed_offsets(kafka_bootstrap, f"jmsgateway.queue.{topic}", topic) == [3]
    await subscription.close()


@pytest_twisted.ensureDeferred
async def test_records_from_jms_become_typed_messages_again(connector: KafkaConnector, kafka_bootstrap: str) -> None:
    topic = unique_topic()
    create_topics(kafka_bootstrap, topic)
    spec = SubscriptionSpec(f"/topic/kafka.{topic}", ack_mode="auto")
    subscription, consumer = await subscribe(connector, spec)
    sent = text(f"/topic/kafka.{topic}", "typed", count=5, ratio=0.5, flag=True)
    await connector.send(sent)
    produce(kafka_bootstrap, topic, [{"value": b"\xff\x00binary", "headers": [("app", b"crm")]}])
    (first, _), (second, _) = await consumer.take(2)
    assert isinstance(first, TextMessage) and first.text == "typed"
    assert first.message_id == sent.message_id and first.persistent
    assert first.properties["count"] == 5 and first.properties["ratio"] == 0.5 and first.properties["flag"] is True
    assert first.properties["jmsbridge.origin"] == "gw-test"
    assert isinstance(second, BytesMessage) and second.body == b"\xff\x00binary"
    assert second.properties == {"app": "crm"} and second.message_id.startswith(f"ID:kafka:{topic}:0:")
    await subscription.close()


@pytest_twisted.ensureDeferred
async def test_topic_subscriber_goes_on_where_it_was_after_a_rebalance(
    connector: KafkaConnector, kafka_bootstrap: str
) -> None:
    topic = unique_topic()
    create_topics(kafka_bootstrap, topic)
    spec = SubscriptionSpec(f"/topic/kafka.{topic}", ack_mode="client-individual", prefetch=2)
    subscription, consumer = await subscribe(connector, spec)
    produce(kafka_bootstrap, topic, [{"value": f"r{i}".encode()} for i in range(4)])
    first = await consumer.take(2)
    # its own group: the partition comes back
    await in_thread(join_and_leave, kafka_bootstrap, subscription.group, topic)
    assert await consumer.nothing_more(2.0)  # still holding the prefetch: nothing again, nothing new
    await subscription.ack([tag for _, tag in first])
    second = await consumer.take(2)  # not skipped by a start pinned at the end of the partition again
    texts = [m.text for m, _ in first + second if isinstance(m, TextMessage)]
    assert texts == ["r0", "r1", "r2", "r3"]
    assert not any(m.redelivered for m, _ in first + second)
    await subscription.close()


@pytest_twisted.ensureDeferred
async def test_redelivery_after_a_rebalance_is_flagged_and_counted(
    connector: KafkaConnector, kafka_bootstrap: str
) -> None:
    topic = prepared_topic(kafka_bootstrap, 4, partitions=2)  # r0, r2 on partition 0; r1, r3 on 1
    spec = SubscriptionSpec(f"/queue/kafka.{topic}", ack_mode="client-individual", prefetch=10)
    subscription, consumer = await subscribe(connector, spec)
    held = await consumer.take(4)
    commits = await in_thread(join_and_leave, kafka_bootstrap, subscription.group, topic, commit_first=True)
    assert len(commits) == 1, commits
    moved, _ = commits[0]
    [(again, tag)] = await consumer.take(1, timeout=20)
    assert isinstance(again, TextMessage) and again.text == f"r{moved + 2}"
    assert again.redelivered and again.redelivery_count == 1
    assert await consumer.nothing_more(1.0)
    await subscription.ack([t for _, t in held] + [tag])
    await subscription.close()
    assert committed_offsets(kafka_bootstrap, subscription.group, topic, partitions=2) == [2, 2]


@pytest_twisted.ensureDeferred
async def test_bad_destination_fails_subscribe(connector: KafkaConnector) -> None:
    with pytest.raises(DestinationError):
        await connector.subscribe(SubscriptionSpec("/topic/"), CollectingConsumer())


@pytest_twisted.ensureDeferred
async def test_subscribe_to_missing_topic_fails_clearly(connector: KafkaConnector) -> None:
    with pytest.raises(DestinationError) as info:
        await connector.subscribe(SubscriptionSpec("/topic/kafka.not-there-at-all"), CollectingConsumer())
    assert "not-there-at-all" in str(info.value) and "does not exist" in str(info.value)


@pytest_twisted.ensureDeferred
async def test_long_stall_pauses_partitions_and_resumes(kafka_bootstrap: str) -> None:
    settings = KafkaSettings.from_options(
        {"uri": f"kafka://{kafka_bootstrap}", "consumer": group_settings(), "pause_after": 0.2}
    )
    kafka = KafkaConnector(reactor, settings, name="kafka", gateway_id="gw-test")
    await kafka.start()
    try:
        topic = prepared_topic(kafka_bootstrap, 6)
        spec = SubscriptionSpec(f"/queue/kafka.{topic}", ack_mode="client-individual", prefetch=2)
        subscription, consumer = await subscribe(kafka, spec)
        first = await consumer.take(2)
        assert await consumer.nothing_more(1.0)  # stalled well past pause_after: partitions paused
        await subscription.ack([tag for _, tag in first])
        second = await consumer.take(2)
        await subscription.ack([tag for _, tag in second])
        third = await consumer.take(2)
        texts = [m.text for m, _ in first + second + third if isinstance(m, TextMessage)]
        assert texts == [f"r{i}" for i in range(6)]
        await subscription.close()
    finally:
        await kafka.stop()


@pytest_twisted.ensureDeferred
async def test_start_fails_clearly_when_kafka_is_unreachable() -> None:
    from gateway.errors import ConnectorUnavailable
    from tests.support.ports import free_port

    address = f"127.0.0.1:{free_port()}"
    settings = KafkaSettings.from_options({"uri": f"kafka://{address}", "metadata_timeout": 1})
    kafka = KafkaConnector(reactor, settings, name="kafka", gateway_id="gw-test")
    with pytest.raises(ConnectorUnavailable) as info:
        await kafka.start()
    assert address in str(info.value)
    with pytest.raises(ConnectorUnavailable):
        await kafka.send(text("/topic/kafka.t", "x"))
    await kafka.stop()


def test_the_in_doubt_probe_reads_the_whole_last_write_batch(kafka_bootstrap: str) -> None:
    """Tansu reports a partition's end as the base offset of its last write batch + 1: the
    probe must not stop there, or the rest of a batch a bridge wrote just before a crash
    (the records most likely in doubt) is taken for not written and sent again."""
    from confluent_kafka import Producer

    from gateway.connectors.kafka_transactions import held_record_ids

    topic = f"probe-batch-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 200, "acks": "all"})
    ids = [f"ID:batch-{n}" for n in range(50)]
    for message_id in ids:  # one write batch (linger): Tansu's end offset is its first record + 1
        producer.produce(topic, value=b"x", partition=0, headers=[("jms.MessageId", message_id.encode())])
    assert producer.flush(15) == 0
    settings = KafkaSettings.from_options({"bootstrap": kafka_bootstrap})
    assert held_record_ids(settings, topic, 1000) == set(ids)
