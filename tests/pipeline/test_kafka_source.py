"""The project's Kafka source against the real Kafka-protocol broker (no Spark): end offsets,
transaction markers, ranges and the sink's acknowledgements."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from gateway.errors import ConnectorError
from gateway.pipeline.kafka_sink import discard_producers, write_batches
from gateway.pipeline.kafka_source import KafkaBatchReader, KafkaOffsets, KafkaRange, read_range
from tests.support.kafka import TansuBroker, create_topics, produce, proxied_kafka, read_records
from tests.support.tcp_proxy import TcpProxy

__all__ = ["proxied_kafka"]

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


def one_batch_topic(bootstrap: str, records: int) -> str:
    """A topic whose ``records`` records are one produce batch: Tansu reports a high
    watermark of 1 for it (the batch's base offset + 1), the real end is ``records``."""
    from confluent_kafka import Consumer, TopicPartition

    topic = f"batch-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, topic)
    produce(bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(records)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{topic}"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 1)
    finally:
        consumer.close()
    return topic


def test_an_end_offset_a_slow_broker_left_unconfirmed_is_confirmed_later(
        proxied_kafka: tuple[TansuBroker, TcpProxy]) -> None:
    """A probe that times out (a loaded machine) plans up to the reported high watermark,
    and the next planning probes again: the rest of the last batch is not stuck
    until more records arrive (the pipeline differential test once missed the tails)."""
    broker, proxy = proxied_kafka
    topic = one_batch_topic(broker.bootstrap, 400)
    offsets = KafkaOffsets({"bootstrap": broker.bootstrap, "subscribe": topic, "probeTimeout": "1"})
    try:
        proxy.stall()
        try:
            assert offsets.confirmed_end(topic, 0, 0, 1) == 1  # not confirmed: only what is known
        finally:
            proxy.flow()
        assert offsets.latest() == {topic: {"0": 400}}
    finally:
        offsets.close()


def test_a_slow_broker_does_not_cut_a_range_short(proxied_kafka: tuple[TansuBroker, TcpProxy]) -> None:
    """A range inside the last produce batch starts above Tansu's reported high watermark;
    a first fetch slower than the consumer's poll is no reason to end the range early."""
    broker, proxy = proxied_kafka
    topic = one_batch_topic(broker.bootstrap, 400)
    proxy.stall()
    timer = threading.Timer(1.0, proxy.flow)
    timer.start()
    try:
        found = rows(broker.bootstrap, KafkaRange(topic, 0, 200, 400), readTimeout="20")
    finally:
        timer.cancel()
        proxy.flow()
    assert [r["offset"] for r in found] == list(range(200, 400))
