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
