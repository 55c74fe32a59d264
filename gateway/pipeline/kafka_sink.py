"""Writing Spark rows to Kafka without Spark's Kafka connector: the Python data source writers.

Rows have Spark's Kafka sink columns: ``topic``, ``key``, ``value``,
``headers`` (``array<struct<key, value>>``).  Each task produces its rows
with an idempotent producer (``acks=all``, ``enable.idempotence``: no
duplicates or reordering from producer retries; one producer per Python
worker, kept across tasks), flushes,
and fails if any record was not acknowledged, so the micro-batch fails and
is run again from Spark's checkpoint.  Records acknowledged by a task of a
batch that then fails are written again by the re-run: duplicates are
limited to the last unfinished micro-batch (see docs/pipeline.md).

Runs on the executors; the driver only sees the commit messages.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from twisted.logger import Logger

from gateway.errors import ConnectorError
from gateway.pipeline.kafka_source import option


@dataclass
class KafkaWriteReport(WriterCommitMessage):
    """What one task wrote."""

    records: int


def producer_config(options: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka producer settings: ours, then the ``kafka.*`` options."""
    config: dict[str, Any] = {
        "bootstrap.servers": options["bootstrap"],
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "none",
    }
    for key, value in options.items():
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            config[key[len("kafka.") :]] = value
    return config


def write_batches(options: Mapping[str, str], batches: Iterator[Any]) -> KafkaWriteReport:
    """Produce every row of the Arrow ``batches`` and wait for all acknowledgements.

    :raises ConnectorError: a record was refused or not acknowledged in time.
    """
    from confluent_kafka import KafkaException

    config = producer_config(options)
    producer = producer_for(config)
    errors: list[str] = []
    count = 0

    def report(error: Any, record: Any) -> None:
        if error is not None and len(errors) < 10:
            errors.append(f"{record.topic()}: {error.str()}")

    for batch in batches:
        columns = batch.to_pydict()
        for topic, key, value, headers in zip(
            columns["topic"], columns["key"], columns["value"], columns["headers"], strict=True
        ):
            pairs = [(h["key"], h["value"]) for h in headers] if headers else None
            while True:
                try:
                    producer.produce(topic, value=value, key=key, headers=pairs, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as exc:
                    raise ConnectorError(f"cannot produce to Kafka topic {topic!r}: {exc}") from None
            count += 1
        producer.poll(0)
    timeout = float(option(options, "flushTimeout", "120"))
    remaining = producer.flush(timeout)
    if remaining or errors:
        discard_producer(config)
    if remaining:
        raise ConnectorError(f"{remaining} record(s) not acknowledged by Kafka within {timeout:g}s")
    if errors:
        raise ConnectorError(f"Kafka refused records: {'; '.join(errors)}")
    return KafkaWriteReport(count)


_producers: dict[str, Any] = {}


def _config_key(config: dict[str, Any]) -> str:
    return repr(sorted(config.items()))


def producer_for(config: dict[str, Any]) -> Any:
    """One producer per configuration per Python worker, kept across tasks and batches
    (an idempotent producer needs a producer id from the broker before its first
    record: half a second on some brokers, too much to pay per task)."""
    from confluent_kafka import Producer

    key = _config_key(config)
    producer = _producers.get(key)
    if producer is None:
        producer = _producers[key] = Producer(config)
    return producer


def discard_producer(config: dict[str, Any]) -> None:
    """Forget the producer of ``config`` after a failure (the next task starts a new one)."""
    _producers.pop(_config_key(config), None)


def discard_producers() -> None:
    """Forget every cached producer: for a process done with Kafka (each one was
    flushed by the batch that used it last, so nothing is dropped)."""
    _producers.clear()


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink (see the module docstring)."""

    log = Logger()

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[Any]) -> KafkaWriteReport:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = sum(m.records for m in messages if isinstance(m, KafkaWriteReport))
        self.log.debug("micro-batch {batch}: {records} record(s) written to Kafka", batch=batchId, records=written)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = sum(m.records for m in messages if isinstance(m, KafkaWriteReport))
        self.log.warn("micro-batch {batch} aborted after {records} record(s) reached Kafka; they are written "
                      "again when the batch is re-run", batch=batchId, records=written)


class KafkaBatchWriter(DataSourceArrowWriter):
    """The batch sink (replay)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[Any]) -> KafkaWriteReport:
        return write_batches(self.options, iterator)
