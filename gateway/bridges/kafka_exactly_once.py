"""Kafka -> Kafka ONCE_AND_ONLY_ONCE: records and consumer offsets in one Kafka transaction.

:class:`KafkaExactlyOnceBridge` has the control API of
:class:`~gateway.bridges.bridge.Bridge` (start/stop/pause/resume returning
Deferreds, the same states and metrics) but its own engine, because the
Kafka connector's subscriptions commit offsets on their own: one thread owns
a confluent-kafka ``Consumer`` (``read_committed``, no auto commit; in a child
process, :mod:`gateway.connectors.kafka_consumer_host`, so a librdkafka crash on a
deleted source topic is one failed attempt, not the gateway's end) and a
transactional ``Producer`` (``transactional.id = jmsgateway-bridge-<name>``)
and loops::

    records = consumer.consume(max_batch_size, max_batch_time)
    begin_transaction(); produce(converted records)
    send_offsets_to_transaction(positions, consumer_group_metadata())
    commit_transaction()

So the copies and the source offsets become visible together or not at
all.  A crash leaves an open transaction that the next start fences and
aborts (``init_transactions``); the consumer then resumes at the committed
offsets.  A failed transaction is aborted, the consumer rewound to the
committed offsets, and the batch tried again after ``failure_retry_interval``
(up to ``max_retries``).  Readers of the target must use
``isolation.level=read_committed`` (librdkafka's default) to see no aborted
copies.  Source and target must be the same cluster (offsets commit on the
producer's cluster); :func:`gateway.bridges.service.build_bridge_service`
uses the duplicate-store engine otherwise.

The thread talks to the reactor only through ``callFromThread``; transformers
run on the reactor thread (``blockingCallFromThread``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import blockingCallFromThread
from twisted.logger import Logger

from gateway.bridges.bridge import MESSAGE_ID_LIST
from gateway.bridges.config import BridgeConfig
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.probe import target_message_id
from gateway.connectors.kafka import REFUSED_CODES
from gateway.connectors.kafka_consumer_host import ConsumerProcess
from gateway.connectors.kafka_records import message_to_record, record_to_message
from gateway.errors import MessageRefused
from gateway.message.model import Message

NO_RETRY_CODES = REFUSED_CODES | {"TOPIC_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
"""Kafka errors about the batch itself (a record too large, not authorised): no retry helps."""


def _permanent(error: Exception) -> bool:
    """Whether retrying the batch cannot help (a transformer rejected a message, Kafka refused a record)."""
    if isinstance(error, MessageRefused):
        return True
    from confluent_kafka import KafkaException

    if isinstance(error, KafkaException) and error.args and hasattr(error.args[0], "name"):
        return str(error.args[0].name()) in NO_RETRY_CODES
    return False


class KafkaExactlyOnceBridge:
    """A Kafka -> Kafka bridge through Kafka transactions (see the module docstring)."""

    log = Logger()

    def __init__(
        self,
        config: BridgeConfig,
        source: Any,
        target: Any,
        *,
        clock: Any,
        metrics: BridgeMetrics | None = None,
        chains: Any = None,
        target_topic: str | None = None,
        key_header: str | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.source = source
        self.target = target
        self.reactor = clock
        self.metrics = metrics or BridgeMetrics()
        self.chains = chains
        self.state = "stopped"
        self.last_error: str | None = None
        self.forwarded = 0
        self.retries = 0
        self._thread: threading.Thread | None = None
        self._commands: queue.SimpleQueue[tuple[str, Deferred[None] | None]] = queue.SimpleQueue()
        self._halt = threading.Event()
        self._paused = False
        self._start_waiters: list[Deferred[None]] = []
        self._batch_start: dict[int, int] = {}
        """Partition -> first offset of the batch in its transaction (the bridge thread's)."""
        self.source_topic = source.topic_of(config.source.destination)
        self.target_topic = target_topic or target.topic_of(config.target.destination)
        """Where the copies go: the destination's topic, or the topic of its ``[routing]`` route."""
        self.key_header = key_header if target_topic else target.settings.key_header
        self.metrics.state.labels(self.name).state("stopped")

    # ------------------------------------------------------------ control API

    @property
    def group(self) -> str:
        """The consumer group whose offsets the transactions commit."""
        prefix = self.source.settings.group_prefix
        if self.config.subscription_name:
            return f"{prefix}.{self.config.client_id}.{self.config.subscription_name}"
        return f"{prefix}.bridge.{self.name}"

    def start(self) -> Deferred[None]:
        """Start the bridge thread; fires once it consumes (or failed)."""
        if self._thread is not None and self._thread.is_alive():
            return succeed(None)
        self._halt.clear()
        self._paused = False
        self.retries = 0
        self.last_error = None
        self._set_state("starting")
        waiter: Deferred[None] = Deferred()
        self._start_waiters.append(waiter)
        self._thread = threading.Thread(target=self._run, name=f"bridge-{self.name}", daemon=True)
        self._thread.start()
        return waiter

    def in_doubt_resolved(self) -> Deferred[None]:
        """Nothing is in doubt: copies and offsets commit in one transaction."""
        return succeed(None)

    def stop(self) -> Deferred[None]:
        """Finish the transaction under way and stop; fires when the thread ended."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._set_state("stopped")
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._commands.put(("stop", done))
        self._halt.set()
        return done

    def pause(self) -> Deferred[None]:
        """Stop consuming after the transaction under way; fires then."""
        return self._command("pause")

    def resume(self) -> Deferred[None]:
        """Consume again."""
        return self._command("resume")

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "qos": self.config.qos,
            "engine": "kafka-transactions",
            "source": f"{self.config.source.connector}:{self.config.source.destination}",
            "target": f"{self.config.target.connector}:{self.config.target.destination}",
            "forwarded": self.forwarded,
            "retries": self.retries,
            "last_error": self.last_error,
        }

    def _command(self, kind: str) -> Deferred[None]:
        if self._thread is None or not self._thread.is_alive():
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._commands.put((kind, done))
        return done

    # --------------------------------------------------- reactor-thread helpers

    def _set_state(self, state: str) -> None:
        self.state = state
        self.metrics.state.labels(self.name).state(state)
        if state in ("running", "paused", "failed", "stopped"):
            waiters, self._start_waiters = self._start_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _forwarded(self, count: int, batch: int) -> None:
        self.forwarded += count
        self.metrics.forwarded.labels(self.name).inc(count)
        self.metrics.batch_size.labels(self.name).observe(batch)
        if self.retries or self.state in ("retrying", "starting"):
            self.retries = 0
            self._set_state("paused" if self._paused else "running")

    def _failed_attempt(self, reason: str, retries: int) -> None:
        self.retries = retries
        self.last_error = reason
        self.metrics.failed.labels(self.name).inc()
        self.metrics.retries.labels(self.name).inc()
        self._set_state("retrying")
        self.log.warn("bridge {name}: {reason}; retry {count} in {delay}s", name=self.name, reason=reason,
                      count=retries, delay=self.config.failure_retry_interval / 1000.0)

    def _gave_up(self, reason: str) -> None:
        self.last_error = reason
        self._set_state("failed")
        self.log.error("bridge {name} FAILED: {reason}", name=self.name, reason=reason)

    @staticmethod
    def _fire(done: Deferred[None] | None) -> None:
        if done is not None and not done.called:
            done.callback(None)

    # ------------------------------------------------------------ bridge thread

    def _consumer_config(self) -> dict[str, Any]:
        settings = self.source.settings
        config: dict[str, Any] = dict(settings.consumer)
        earliest = not self.config.source.is_topic or self.config.durable
        config.update({
            "bootstrap.servers": settings.bootstrap,
            "client.id": settings.client_id,
            "group.id": self.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest" if earliest else "latest",
        })
        return config

    def _producer_config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.target.producer_config()
        config["transactional.id"] = f"jmsgateway-bridge-{self.name}"
        return config

    def _run(self) -> None:
        from confluent_kafka import Producer

        call = self.reactor.callFromThread
        consumer: Any = None
        producer: Any = None
        selector = None
        if self.config.selector:
            from gateway.selector import compile_selector

            selector = compile_selector(self.config.selector).matches
        failures = 0
        try:
            while not self._halt.is_set():
                try:
                    if producer is None:
                        producer = Producer(self._producer_config())
                        producer.init_transactions(30)  # fences and aborts what a crashed run left open
                    if consumer is None:
                        # in a child process: librdkafka crashes on a deleted source topic (see
                        # gateway.connectors.kafka_consumer_host); a crash is a failed attempt here
                        consumer = ConsumerProcess(self._consumer_config(),
                                                   label=f"topic {self.source_topic} (group {self.group})")
                        consumer.subscribe([self.source_topic])
                        call(self._set_state, "paused" if self._paused else "running")
                    if not self._serve_commands(consumer):
                        break
                    if self._paused:
                        self._halt.wait(0.05)
                        continue
                    moved = self._one_batch(consumer, producer, selector)
                    if moved is not None:
                        failures = 0
                        if moved:
                            call(self._forwarded, moved[0], moved[1])
                except Exception as exc:
                    failures += 1
                    reason = f"kafka transaction failed: {exc}"
                    producer, consumer = self._recover(producer, consumer, exc)
                    if _permanent(exc):  # the same batch would fail the same way: nothing is committed
                        call(self._gave_up, f"{reason} (a record no retry can deliver; the batch stays at the "
                                            "source, its offsets not committed)")
                        return
                    limit = self.config.max_retries
                    if limit != -1 and failures > limit:
                        call(self._gave_up, f"{reason} (gave up after {limit} retries)")
                        return
                    call(self._failed_attempt, reason, failures)
                    self._halt.wait(self.config.failure_retry_interval / 1000.0)
        finally:
            if consumer is not None:
                with contextlib.suppress(Exception):
                    consumer.close()
            if producer is not None:
                with contextlib.suppress(Exception):
                    producer.flush(5)
            pending: list[Deferred[None] | None] = []
            while not self._commands.empty():
                pending.append(self._commands.get()[1])
            if self.state != "failed":
                call(self._set_state, "stopped")
            for done in pending:
                call(self._fire, done)

    def _serve_commands(self, consumer: Any) -> bool:
        """Apply pause/resume/stop; False means stop."""
        call = self.reactor.callFromThread
        while not self._commands.empty():
            kind, done = self._commands.get()
            if kind == "stop":
                self._commands.put((kind, done))
                return False
            if kind == "pause":
                self._paused = True
                call(self._set_state, "paused")
            elif kind == "resume":
                self._paused = False
                call(self._set_state, "running")
            call(self._fire, done)
        return True

    def _one_batch(self, consumer: Any, producer: Any, selector: Any) -> tuple[int, int] | None:
        """Move one batch in one transaction; returns (records produced, records consumed)."""
        from confluent_kafka import TopicPartition

        batch_time = self.config.max_batch_time
        timeout = 1.0 if batch_time == -1 else batch_time / 1000.0
        records = [r for r in consumer.consume(self.config.max_batch_size, timeout) if r.error() is None]
        if not records:
            return None
        while batch_time == -1 and len(records) < self.config.max_batch_size and not self._halt.is_set():
            more = consumer.consume(self.config.max_batch_size - len(records), 1.0)
            records.extend(r for r in more if r.error() is None)
        for record in records:  # where a failed transaction rewinds to (committed offset or not)
            first = self._batch_start.get(record.partition())
            if first is None or record.offset() < first:
                self._batch_start[record.partition()] = record.offset()
        outgoing = []
        for record in records:
            message = self._message(record)
            if selector is not None and not selector(message):
                continue
            for out in self._transformed(message):
                outgoing.append(message_to_record(out, self.key_header, self.target.gateway_id))
        positions: dict[int, int] = {}
        for record in records:
            positions[record.partition()] = max(positions.get(record.partition(), -1), record.offset() + 1)
        offsets = [TopicPartition(self.source_topic, p, o) for p, o in positions.items()]
        producer.begin_transaction()
        for key, value, headers in outgoing:
            producer.produce(self.target_topic, value=value, key=key, headers=headers)
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        self._batch_start.clear()
        return len(outgoing), len(records)

    def _message(self, record: Any) -> Message:
        _, timestamp = record.timestamp()
        return record_to_message(
            record.key(), record.value(), record.headers(),
            text_records=self.source.settings.text_records,
            destination=self.config.source.destination,
            timestamp=timestamp or 0,
            fallback_id=f"ID:kafka:{record.topic()}:{record.partition()}:{record.offset()}",
        )

    def _transformed(self, message: Message) -> list[Message]:
        destination = self.config.target.destination
        result = message
        if self.chains is not None:
            from gateway.transform import DeadLettered, Deliver, Dropped, TransformContext

            context = TransformContext("inbound", self.config.source.destination, destination)
            outcome = blockingCallFromThread(self.reactor, self.chains.run, message, context)
            if isinstance(outcome, Dropped):
                self.reactor.callFromThread(self.metrics.dropped.labels(self.name, "transformer").inc)
                return []
            if isinstance(outcome, Deliver | DeadLettered):
                result, destination = outcome.message, outcome.destination
            else:
                raise MessageRefused(f"a transformer rejected message {message.message_id}: "
                                     f"{getattr(outcome, 'error', outcome)}")
        out = result.copy()
        out.destination = destination
        out.message_id = target_message_id(self.name, message.message_id or uuid.uuid4().hex)
        out.redelivered = False
        out.redelivery_count = 0
        if self.config.add_message_id_in_header and message.message_id:
            previous = out.properties.get(MESSAGE_ID_LIST)
            if isinstance(previous, bytes):
                previous = previous.decode("utf-8", "replace")
            out.properties[MESSAGE_ID_LIST] = f"{previous},{message.message_id}" if previous else message.message_id
        return [out]

    def _recover(self, producer: Any, consumer: Any, error: Exception) -> tuple[Any, Any]:
        """After a failed transaction: abort it, rewind the consumer to the committed offsets."""
        from confluent_kafka import KafkaException

        fatal = False
        if producer is not None:
            kafka_error = error.args[0] if isinstance(error, KafkaException) and error.args else None
            fatal = bool(kafka_error is not None and kafka_error.fatal())
            try:
                if not fatal:
                    producer.abort_transaction(10)
            except Exception:
                fatal = True
        if fatal:
            producer = None  # a new producer fences the old one on init_transactions
        if consumer is not None:
            from confluent_kafka import TopicPartition

            try:
                assignment = consumer.assignment()
                if assignment:
                    for tp in consumer.committed(assignment, timeout=10):
                        first = self._batch_start.get(tp.partition)
                        if first is not None:  # the failed batch's first record, committed offset or not
                            consumer.seek(TopicPartition(tp.topic, tp.partition, first))
                        elif tp.offset >= 0:
                            consumer.seek(tp)
                self._batch_start.clear()
            except Exception:
                with contextlib.suppress(Exception):
                    consumer.close()
                consumer = None
        return producer, consumer
