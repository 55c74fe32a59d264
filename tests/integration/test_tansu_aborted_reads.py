"""Why the fault matrix counts Kafka targets with ``read_uncommitted`` and the bridge's commit
log (docs/bridges.md, "What the fault matrix proves"): Tansu serves the records of an aborted
transaction to ``read_committed`` readers, so a ``read_committed`` count against Tansu neither
hides a duplicate real Kafka would hide nor proves there is none.  Against a real Kafka
(``JMSGATEWAY_KAFKA_BOOTSTRAP``) the aborted record must stay hidden instead."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.support.kafka import BOOTSTRAP_ENV, create_topics, kafka_bootstrap, read_records, unique_topic

__all__ = ["kafka_bootstrap"]

pytestmark = pytest.mark.kafka


def test_what_a_read_committed_reader_sees_of_an_aborted_transaction(kafka_bootstrap: str) -> None:
    from confluent_kafka import Producer

    topic = unique_topic("aborted")
    create_topics(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"probe-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted copy")
    producer.flush(15)
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed copy")
    producer.commit_transaction(15)

    def values(isolation: str) -> list[bytes]:
        records = read_records(kafka_bootstrap, topic, 2, timeout=8, settle=1.0, **{"isolation.level": isolation})
        return [record.value() for record in records]

    uncommitted = values("read_uncommitted")
    committed = values("read_committed")
    assert uncommitted == [b"aborted copy", b"committed copy"], uncommitted
    if os.environ.get(BOOTSTRAP_ENV):
        assert committed == [b"committed copy"], f"a real Kafka hides the aborted record: {committed}"
    else:
        assert committed == [b"aborted copy", b"committed copy"], (
            f"Tansu now hides aborted records from read_committed readers ({committed}): docs/bridges.md and "
            "docs/kafka.md say it does not; update them (the matrix's read_uncommitted count stays right)")


def test_a_producer_fenced_after_writing_its_records_fails_at_its_offsets_commit(kafka_bootstrap: str) -> None:
    """The two-gateway Kafka -> Kafka run's extra copies (docs/bridges.md): a bridge's producer wrote
    its batch, then the other gateway's producer of the same ``transactional.id`` started (its
    init_transactions aborts the open transaction: it never asked to commit) and the first one's
    ``send_offsets_to_transaction`` fails with the error the bridge logs.  The batch's records stay in
    the log: a ``read_uncommitted`` reader sees them (and on Tansu a ``read_committed`` one), a
    ``read_committed`` reader of a real Kafka does not."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    source, target = unique_topic("fenced-src"), unique_topic("fenced-dst")
    create_topics(kafka_bootstrap, source)
    create_topics(kafka_bootstrap, target)
    transactional_id = f"probe-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{transactional_id}"})
    try:
        first = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id})
        first.init_transactions(15)
        first.begin_transaction()
        for index in range(20):
            first.produce(target, value=f"fenced {index}".encode())
        assert first.flush(15) == 0, "the batch is written before the fence"
        second = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id})
        second.init_transactions(15)
        with pytest.raises(KafkaException, match=r"Failed to commit offsets to transaction.*newer producer"):
            first.send_offsets_to_transaction([TopicPartition(source, 0, 20)], consumer.consumer_group_metadata(), 15)
        second.begin_transaction()
        second.produce(target, value=b"committed copy")
        second.commit_transaction(15)
    finally:
        consumer.close()

    def values(isolation: str) -> list[bytes]:
        records = read_records(kafka_bootstrap, target, 21, timeout=8, settle=1.0, **{"isolation.level": isolation})
        return [record.value() for record in records]

    fenced = [f"fenced {index}".encode() for index in range(20)]
    assert values("read_uncommitted") == [*fenced, b"committed copy"]
    committed = values("read_committed")
    if os.environ.get(BOOTSTRAP_ENV):
        assert committed == [b"committed copy"], f"a real Kafka hides the fenced batch: {committed}"
    else:
        assert committed == [*fenced, b"committed copy"], committed
