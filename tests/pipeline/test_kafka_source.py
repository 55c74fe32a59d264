"""The project's Kafka source against the real Kafka-protocol broker (no Spark): end offsets,
transaction markers, ranges and the sink's acknowledgements."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from gateway.errors import ConnectorError
from gateway.pipeline.kafka_sink import discard_producers, write_batches
from gateway.pipeline.kafka_source import KafkaBatchReader, KafkaOffsets, KafkaRange, read_range
from tests.support.kafka import create_topics, produce, read_records

pytestmark = pytest.mark.kafka


def rows(bootstrap: str, part: KafkaRange, **options: str) -> list[dict[str, Any]]:
    return [row for batch in read_range({"bootstrap": bootstrap, **options}, part) for row in batch.to_pylist()]


def test_end_offsets_are_confirmed_and_ranges_read_exactly(kafka_bootstrap: str) -> None:
    topic = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, topic, partitions=2)
    produce(kafka_bootstrap, topic, [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2,
                                     "headers": [("h", b"%d" % i)]} for i in range(600)])
    offsets = KafkaOffsets({"bootstrap": kafka_bootstrap, "subscribe": topic})
    try:
        assert offsets.latest() == {topic: {"0": 300, "1": 300}}  # one produce batch per partition
        assert offsets.resolve(json.dumps({topic: {"0": 10}}), default=-1) == {topic: {"0": 10, "1": 300}}
    finally:
        offsets.close()
    found = rows(kafka_bootstrap, KafkaRange(topic, 1, 20, 30))
    assert [r["offset"] for r in found] == list(range(20, 30))
    assert found[0]["key"] == b"k41" and found[0]["headers"] == [{"key": "h", "value": b"41"}]
    reader = KafkaBatchReader({"bootstrap": kafka_bootstrap, "subscribe": topic,
                               "startingOffsets": json.dumps({topic: {"0": 295}}), "endingOffsets": "latest"})
    assert reader.partitions() == [KafkaRange(topic, 0, 295, 300), KafkaRange(topic, 1, 0, 300)]


def test_transaction_markers_end_a_range_without_waiting(kafka_bootstrap: str) -> None:
    from confluent_kafka import Producer

    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    for _ in range(2):
        producer.begin_transaction()
        for index in range(5):
            producer.produce(topic, b"v%d" % index)
        producer.commit_transaction(10)
    offsets = KafkaOffsets({"bootstrap": kafka_bootstrap, "subscribe": topic})
    try:
        end = offsets.latest()[topic]["0"]
    finally:
        offsets.close()
    started = time.monotonic()
    found = rows(kafka_bootstrap, KafkaRange(topic, 0, 0, end), readTimeout="10")
    assert len(found) == 10 and end == found[-1]["offset"] + 2  # the last offset is a commit marker
    assert time.monotonic() - started < 5


def test_the_sink_fails_on_records_kafka_refuses(kafka_bootstrap: str) -> None:
    topic = f"sink-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, topic)
    good = pa.RecordBatch.from_pylist([{"topic": topic, "key": b"k", "value": b"v",
                                        "headers": [{"key": "a", "value": None}]}] * 5)
    try:
        assert write_batches({"bootstrap": kafka_bootstrap}, iter([good])).records == 5
        assert len(read_records(kafka_bootstrap, topic, 5, timeout=20)) == 5
        bad = pa.RecordBatch.from_pylist([{"topic": "", "key": b"k", "value": b"v", "headers": []}])
        with pytest.raises(ConnectorError):
            write_batches({"bootstrap": kafka_bootstrap, "kafka.message.timeout.ms": "3000"}, iter([bad]))
    finally:
        discard_producers()  # the sink caches its producer per process; this one must end before the broker
