"""Reading Kafka into Spark without Spark's Kafka connector: the Python data source readers.

Owns the offset bookkeeping (:class:`KafkaOffsets`: watermarks, ``startingOffsets``
/ ``endingOffsets`` resolution, ``maxOffsetsPerTrigger`` sharing), the
streaming reader (:class:`KafkaStreamReader`, one input partition per Kafka
partition range, offsets in Spark's checkpoint as ``{"topic": {"0": 42}}``,
the same JSON as Spark's own Kafka source) and the batch reader used by
replay (:class:`KafkaBatchReader`).  Rows have the schema of Spark's Kafka
source with ``includeHeaders``: :data:`KAFKA_SCHEMA`.

The readers' planning methods run on the driver; :func:`read_range` runs on
the executors with its own confluent-kafka consumer (manual assignment, no
group, nothing committed to Kafka: Spark's checkpoint is the only position).
High watermarks are confirmed by reading the last record (some brokers, Tansu
among them, report the last batch's base offset + 1), and a range that ends
in transaction markers ends when the consumer's position passes it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from gateway.errors import ConnectorError

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)
"""The columns of Spark's Kafka source (``includeHeaders=true``)."""

EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]
"""``{"topic": {"partition": next offset}}``, as Spark's Kafka source writes it."""


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Spark input partition: offsets ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int


def option(options: Mapping[str, str], name: str, default: str) -> str:
    """Data source option ``name`` (Spark may hand the options over lower-cased)."""
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return default if value is None else str(value)


def consumer_config(options: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka consumer settings from data source options (``kafka.*`` passed through)."""
    config: dict[str, Any] = {
        "bootstrap.servers": options["bootstrap"],
        "group.id": f"jmsgateway-pipeline-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    }
    for key, value in options.items():
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            config[key[len("kafka.") :]] = value
    return config


class KafkaOffsets:
    """Offsets of the subscribed topics, asked of the cluster (driver side).

    :param options: the data source options (``bootstrap``, ``subscribe``, ``kafka.*``).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = options
        self.topics = [t.strip() for t in option(options, "subscribe", "").split(",") if t.strip()]
        if not self.topics:
            raise ConnectorError("the Kafka source needs option subscribe=topic[,topic]")
        self.timeout = float(option(options, "metadataTimeout", "30"))
        self.confirm = option(options, "confirmEndOffsets", "true").lower() != "false"
        self.probe_timeout = float(option(options, "probeTimeout", "2"))
        self._consumer: Any = None
        self._probe: Any = None
        self._confirmed: dict[tuple[str, int], tuple[int, int]] = {}

    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(consumer_config(self.options))
        return self._consumer

    def close(self) -> None:
        """Close the metadata consumers."""
        for client in (self._consumer, self._probe):
            if client is not None:
                client.close()
        self._consumer = self._probe = None

    def partitions(self) -> dict[str, list[int]]:
        """Each subscribed topic's partitions (a missing topic is an error)."""
        metadata = self._client().list_topics(timeout=self.timeout)
        found: dict[str, list[int]] = {}
        for topic in self.topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                raise ConnectorError(f"Kafka topic {topic!r} does not exist (bootstrap {self.options['bootstrap']})")
            found[topic] = sorted(described.partitions)
        return found

    def watermarks(self) -> dict[str, dict[str, tuple[int, int]]]:
        """``(low, high)`` watermark of every partition, the high one confirmed by reading."""
        from confluent_kafka import TopicPartition

        client = self._client()
        marks: dict[str, dict[str, tuple[int, int]]] = {}
        for topic, partitions in self.partitions().items():
            marks[topic] = {}
            for partition in partitions:
                low, high = client.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout)
                marks[topic][str(partition)] = (low, self.confirmed_end(topic, partition, low, high))
        return marks

    def confirmed_end(self, topic: str, partition: int, low: int, high: int) -> int:
        """The offset after the last record, read from the log when the reported high
        watermark moved.

        Some Kafka-protocol brokers (Tansu) report the last *batch's* base offset
        + 1 as the high watermark; reading from ``high - 1`` returns the rest of
        that batch, whose last offset + 1 is the real end.  On Apache Kafka the
        read confirms ``high``.  One fetch per partition whose watermark moved.
        """
        if high <= low or not self.confirm:
            return high
        known = self._confirmed.get((topic, partition))
        if known is not None and known[0] == high:
            return known[1]
        from confluent_kafka import TopicPartition

        probe = self._probe_client()
        probe.assign([TopicPartition(topic, partition, high - 1)])
        end = high
        confirmed = False
        deadline = time.monotonic() + self.probe_timeout
        try:
            record = None
            while record is None and time.monotonic() < deadline:
                record = probe.poll(0.1)
                (fetched,) = probe.position([TopicPartition(topic, partition)])
                if record is None and fetched.offset is not None and fetched.offset >= high:
                    confirmed = True  # the last offset is a transaction marker: high is right
                    break
            while record is not None:
                if record.error() is None and record.offset() is not None:
                    end = max(end, int(record.offset()) + 1)
                    confirmed = True
                record = probe.poll(0)
        finally:
            probe.unassign()
        if confirmed:
            self._confirmed[(topic, partition)] = (high, end)
        # else: the broker did not answer in time (a loaded machine); ``high`` is safe to
        # plan up to, and the next call probes again instead of keeping it for good
        return end

    def _probe_client(self) -> Any:
        if self._probe is None:
            from confluent_kafka import Consumer

            self._probe = Consumer(consumer_config(self.options))
        return self._probe

    def latest(self) -> Offsets:
        """The high watermark of every partition."""
        return {t: {p: high for p, (_, high) in parts.items()} for t, parts in self.watermarks().items()}

    def resolve(self, spec: str, *, default: int) -> Offsets:
        """Offsets for ``earliest`` / ``latest`` / JSON (``-2`` earliest, ``-1`` latest);
        partitions the JSON leaves out get ``default``."""
        marks = self.watermarks()
        given: dict[str, dict[str, int]] = {}
        if spec == "earliest":
            default = EARLIEST
        elif spec == "latest":
            default = LATEST
        else:
            loaded = json.loads(spec)
            given = {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in loaded.items()}
        resolved: Offsets = {}
        for topic, parts in marks.items():
            resolved[topic] = {}
            for partition, (low, high) in parts.items():
                offset = given.get(topic, {}).get(partition, default)
                if offset == EARLIEST:
                    offset = low
                elif offset == LATEST:
                    offset = high
                resolved[topic][partition] = max(low, min(offset, high))
        return resolved


def next_end(start: Offsets, latest: Offsets, max_rows: int | None) -> Offsets:
    """The end of the next micro-batch: ``latest``, or at most ``max_rows`` records past
    ``start`` shared between partitions in proportion to what each has waiting.

    A partition not in ``start`` (new since the query started) starts at 0.
    """
    waiting = {
        (topic, partition): max(0, high - start.get(topic, {}).get(partition, 0))
        for topic, parts in latest.items()
        for partition, high in parts.items()
    }
    total = sum(waiting.values())
    end: Offsets = {topic: dict(parts) for topic, parts in start.items()}
    for (topic, partition), count in waiting.items():
        begin = start.get(topic, {}).get(partition, 0)
        take = count
        if max_rows is not None and total > max_rows:
            take = count * max_rows // total
        end.setdefault(topic, {})[partition] = begin + take
    if max_rows is not None and total > max_rows:
        taken = sum(end[t][p] - start.get(t, {}).get(p, 0) for t, p in waiting)
        for (topic, partition), count in sorted(waiting.items(), key=lambda item: -item[1]):
            if taken >= max_rows:
                break
            begin = start.get(topic, {}).get(partition, 0)
            if end[topic][partition] - begin < count:
                end[topic][partition] += 1
                taken += 1
    return end


def ranges(start: Offsets, end: Offsets) -> list[KafkaRange]:
    """One :class:`KafkaRange` per partition with records between ``start`` and ``end``."""
    found = []
    for topic, parts in sorted(end.items()):
        for partition, stop in sorted(parts.items(), key=lambda item: int(item[0])):
            begin = start.get(topic, {}).get(partition, 0)
            if stop > begin:
                found.append(KafkaRange(topic, int(partition), begin, stop))
    return found


def kafka_arrow_schema() -> Any:
    """:data:`KAFKA_SCHEMA` as an Arrow schema (what :func:`read_range` yields)."""
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    return pa.schema([
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(header)),
    ])


def read_range(options: Mapping[str, str], part: KafkaRange) -> Iterator[Any]:
    """The records of ``part`` as Arrow batches of :data:`KAFKA_SCHEMA` (runs on an executor).

    Offsets missing inside the range (compaction, transaction markers) are
    skipped; a range the broker cannot serve within ``readTimeout`` seconds
    (default 120) fails the task, so Spark retries or fails the batch.
    """
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    schema = kafka_arrow_schema()
    consumer = Consumer(consumer_config(options))
    timeout = float(option(options, "readTimeout", "120"))
    batch_size = int(option(options, "fetchBatch", "2000"))
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        position = part.start
        deadline = time.monotonic() + timeout
        while position < part.end:
            records = consumer.consume(num_messages=min(batch_size, part.end - position), timeout=0.2)
            if not records:
                if time.monotonic() > deadline:
                    raise ConnectorError(
                        f"Kafka {part.topic}[{part.partition}]: offsets {position}..{part.end} not readable "
                        f"within {timeout:g}s"
                    )
                (fetched,) = consumer.position([TopicPartition(part.topic, part.partition)])
                if fetched.offset is not None and fetched.offset >= part.end:
                    return  # the rest of the range is transaction markers
                # No early end on the high watermark: Tansu reports the last batch's base
                # offset + 1, so a range inside the last batch starts above it, and a slow
                # fetch would drop the rest of the range.  A range the broker really cannot
                # serve fails at the deadline above.
                continue
            columns: dict[str, list[Any]] = {name: [] for name in schema.names}
            for record in records:
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ConnectorError(f"Kafka {part.topic}[{part.partition}]: {error}")
                offset = int(record.offset() or 0)
                if offset >= part.end:
                    position = part.end
                    break
                position = offset + 1
                stamp_kind: Any = record.timestamp()
                kind, stamp = stamp_kind
                columns["key"].append(record.key())
                columns["value"].append(record.value())
                columns["offset"].append(offset)
                columns["timestamp"].append(stamp * 1000 if stamp >= 0 else None)
                columns["timestampType"].append(kind)
                headers: Any = record.headers() or ()
                columns["headers"].append([{"key": name, "value": raw} for name, raw in headers])
            rows = len(columns["offset"])
            if rows:
                columns["topic"] = [part.topic] * rows
                columns["partition"] = [part.partition] * rows
                yield pa.RecordBatch.from_pydict(columns, schema=schema)
            deadline = time.monotonic() + timeout
    finally:
        consumer.close()


class KafkaStreamReader(DataSourceStreamReader):
    """Structured Streaming reader over confluent-kafka (see the module docstring).

    Options: ``bootstrap``, ``subscribe``, ``startingOffsets`` (default
    ``earliest``), ``maxOffsetsPerTrigger`` (0 or absent: no limit), ``kafka.*``.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.offsets = KafkaOffsets(self.options)
        self.max_rows = int(option(self.options, "maxOffsetsPerTrigger", "0") or 0)
        self._latest: Offsets | None = None

    def initialOffset(self) -> Offsets:
        return self.offsets.resolve(option(self.options, "startingOffsets", "earliest"), default=EARLIEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows > 0 else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self.offsets.latest()
        self._latest = latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return next_end(start, latest, max_rows)

    def reportLatestOffset(self) -> Offsets | None:
        return self._latest

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaRange]:
        return ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange)
        return read_range(self.options, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the position lives in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        self.offsets.close()


class KafkaBatchReader(DataSourceReader):
    """A bounded read (replay): ``startingOffsets`` (default earliest) to
    ``endingOffsets`` (default latest), resolved once on the driver."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        offsets = KafkaOffsets(self.options)
        try:
            self.start = offsets.resolve(option(self.options, "startingOffsets", "earliest"), default=EARLIEST)
            self.end = offsets.resolve(option(self.options, "endingOffsets", "latest"), default=LATEST)
        finally:
            offsets.close()

    def partitions(self) -> list[KafkaRange]:
        return ranges(self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange)
        return read_range(self.options, partition)
