"""One STOMP subscription served by one Kafka consumer in its own polling thread.

The thread owns the confluent-kafka ``Consumer`` and the offset bookkeeping
(:class:`~gateway.connectors.kafka_offsets.OffsetTracker`); the reactor
thread talks to it only through a command queue, and the thread hands
records back with ``reactor.callFromThread``.  So the reactor never blocks
and the consumer is never touched by two threads.

* Deliveries: record -> :func:`record_to_message` -> ``consumer.deliver``.
* ``ack``: commits up to the highest contiguous acknowledged offset per
  partition (never the consumer's position); the Deferred fires after the
  commit round that followed it.  ``auto`` subscriptions ack each delivery
  once it was handed to the consumer.
* ``nack``: seeks the partition back to the rejected offset; everything
  delivered from there on is delivered again, marked redelivered.
* ``prefetch``: fetching pauses while that many deliveries are unacknowledged;
  ``pause()``/``resume()`` do the same for transport back-pressure.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from gateway.connectors.kafka_offsets import DeliveryTag, OffsetTracker
from gateway.connectors.kafka_records import record_to_message
from gateway.errors import ConnectorError
from gateway.interfaces import IConsumer, ISubscription, SubscriptionSpec
from gateway.message.model import Message


@dataclass(slots=True)
class _Command:
    """A request from the reactor thread to the polling thread."""

    kind: str
    tags: list[DeliveryTag] = field(default_factory=list)
    done: Deferred[Any] | None = None


@implementer(ISubscription)
class KafkaSubscription:
    """A consumer-group member feeding one :class:`IConsumer`.

    :param consumer_factory: builds the confluent-kafka Consumer (called in
        the polling thread).
    :param matches: the subscription's selector test, or None.
    """

    log = Logger()

    def __init__(
        self,
        reactor: Any,
        spec: SubscriptionSpec,
        consumer: IConsumer,
        *,
        topic: str,
        group: str,
        consumer_factory: Any,
        text_records: bool,
        matches: Any = None,
        poll_timeout: float = 0.05,
        on_closed: Any = None,
    ) -> None:
        self.reactor = reactor
        self.spec = spec
        self.consumer = consumer
        self.topic = topic
        self.group = group
        self._consumer_factory = consumer_factory
        self._text_records = text_records
        self._matches = matches
        self._poll_timeout = poll_timeout
        self._on_closed = on_closed
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._closed = False
        self._assigned: Deferred[KafkaSubscription] | None = None
        self._thread: threading.Thread | None = None
        # owned by the polling thread:
        self._tracker = OffsetTracker()
        self._backlog: deque[Any] = deque()
        self._redeliveries: dict[tuple[int, int], int] = {}
        self._paused_by_client = False
        self._fetch_paused = False
        self._assignment: list[Any] = []

    # ----------------------------------------------------------- reactor side

    def start(self) -> Deferred[KafkaSubscription]:
        """Start polling; fires once the group gave this consumer its partitions."""
        self._assigned = Deferred()
        self._thread = threading.Thread(target=self._run, name=f"kafka-sub-{self.group}", daemon=True)
        self._thread.start()
        return self._assigned

    def ack(self, tags: list[Any]) -> Deferred[None]:
        """Acknowledge deliveries; fires after the commit that follows."""
        return self._send("ack", tags)

    def nack(self, tags: list[Any]) -> Deferred[None]:
        """Reject deliveries: the partition is sought back and they come again."""
        return self._send("nack", tags)

    def pause(self) -> None:
        """Stop delivering until :meth:`resume`."""
        self._commands.put(_Command("pause"))

    def resume(self) -> None:
        """Resume delivering."""
        self._commands.put(_Command("resume"))

    def close(self) -> Deferred[None]:
        """Commit what is acknowledged and leave the group; the rest is redelivered."""
        if self._closed:
            return self._send("noop", [])
        self._closed = True
        return self._send("close", [])

    def unsubscribe(self) -> Deferred[None]:
        """Close; a durable subscription's group is deleted by the connector."""
        return self.close()

    def _send(self, kind: str, tags: list[Any]) -> Deferred[None]:
        done: Deferred[None] = Deferred()
        if self._thread is None or not self._thread.is_alive():
            done.callback(None)
            return done
        self._commands.put(_Command(kind, [t for t in tags if isinstance(t, DeliveryTag)], done))
        return done

    def _deliver(self, message: Message, tag: DeliveryTag) -> None:
        if self._closed:
            return
        try:
            self.consumer.deliver(message, tag)
        except Exception:
            self.log.failure("consumer of {topic} failed on delivery {tag}", topic=self.topic, tag=tag)
        if self.spec.ack_mode == "auto":
            self._commands.put(_Command("ack", [tag]))

    def _fire(self, done: Deferred[Any] | None, result: Any) -> None:
        if done is not None and not done.called:
            done.callback(result)

    def _fail(self, done: Deferred[Any] | None, error: Exception) -> None:
        if done is not None and not done.called:
            done.errback(error)

    def _assigned_first(self) -> None:
        if self._assigned is not None and not self._assigned.called:
            self._assigned.callback(self)

    def _ended(self, error: Exception | None) -> None:
        if self._assigned is not None and not self._assigned.called:
            self._assigned.errback(error or ConnectorError(f"subscription to {self.topic} closed before assignment"))
            return
        if error is not None and not self._closed:
            self._closed = True
            self.consumer.subscription_failed(error)
        if self._on_closed is not None:
            self._on_closed(self)

    # ------------------------------------------------------------ polling thread

    def _run(self) -> None:
        error: Exception | None = None
        kafka_consumer: Any = None
        try:
            kafka_consumer = self._consumer_factory()
            kafka_consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            self._loop(kafka_consumer)
        except Exception as exc:
            self.log.failure("kafka subscription {group} to {topic} failed", group=self.group, topic=self.topic)
            error = exc if isinstance(exc, ConnectorError) else ConnectorError(f"kafka consumer failed: {exc}")
        finally:
            if kafka_consumer is not None:
                try:
                    self._commit(kafka_consumer)
                except Exception:
                    self.log.failure("final commit of {group} failed", group=self.group)
                try:
                    kafka_consumer.close()
                except Exception:
                    self.log.failure("closing kafka consumer {group} failed", group=self.group)
            pending: list[Deferred[Any] | None] = []
            while not self._commands.empty():
                pending.append(self._commands.get().done)
            for done in pending:
                self.reactor.callFromThread(self._fire, done, None)
            self.reactor.callFromThread(self._ended, error)

    def _loop(self, kafka_consumer: Any) -> None:
        from confluent_kafka import KafkaError

        while True:
            waiting: list[Deferred[Any] | None] = []
            closing: Deferred[Any] | None = None
            while True:
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    break
                if command.kind == "ack":
                    for tag in command.tags:
                        self._tracker.ack(tag)
                    waiting.append(command.done)
                elif command.kind == "nack":
                    self._rewind(kafka_consumer, command.tags)
                    waiting.append(command.done)
                elif command.kind == "pause":
                    self._paused_by_client = True
                elif command.kind == "resume":
                    self._paused_by_client = False
                elif command.kind == "close":
                    closing = command.done
                else:
                    waiting.append(command.done)
            try:
                self._commit(kafka_consumer)
            except Exception as exc:
                failure = ConnectorError(f"committing offsets of group {self.group} failed: {exc}")
                for done in waiting:
                    self.reactor.callFromThread(self._fail, done, failure)
            else:
                for done in waiting:
                    self.reactor.callFromThread(self._fire, done, None)
            if closing is not None:
                self._commands.put(_Command("noop", [], closing))
                return
            self._flow(kafka_consumer)
            self._dispatch()
            record = kafka_consumer.poll(self._poll_timeout)
            if record is None:
                continue
            error = record.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.fatal():
                    raise ConnectorError(f"kafka consumer of {self.topic}: {error.str()}")
                self.log.warn("kafka consumer of {topic}: {error}", topic=self.topic, error=error.str())
                continue
            if record.partition() not in self._tracker.partitions:
                continue  # from a partition revoked meanwhile
            self._backlog.append(record)

    def _blocked(self) -> bool:
        return self._paused_by_client or self._tracker.unacked >= max(1, self.spec.prefetch)

    def _flow(self, kafka_consumer: Any) -> None:
        """Pause fetching while blocked, resume when not (heartbeats go on)."""
        blocked = self._blocked() or len(self._backlog) >= max(1, self.spec.prefetch)
        if blocked and not self._fetch_paused and self._assignment:
            kafka_consumer.pause(self._assignment)
            self._fetch_paused = True
        elif not blocked and self._fetch_paused:
            if self._assignment:
                kafka_consumer.resume(self._assignment)
            self._fetch_paused = False

    def _dispatch(self) -> None:
        while self._backlog and not self._blocked():
            record = self._backlog.popleft()
            partition, offset = record.partition(), record.offset()
            redelivered = self._tracker.is_redelivery(partition, offset)
            tag = self._tracker.deliver(partition, offset)
            timestamp_type, timestamp = record.timestamp()
            message = record_to_message(
                record.key(),
                record.value(),
                record.headers(),
                text_records=self._text_records,
                destination=self.spec.destination,
                timestamp=timestamp if timestamp_type else 0,
                fallback_id=f"ID:kafka:{self.topic}:{partition}:{offset}",
            )
            if redelivered:
                count = self._redeliveries.get((partition, offset), 0) + 1
                self._redeliveries[(partition, offset)] = count
                message.redelivered = True
                message.redelivery_count = count
            if self._matches is not None and not self._matches(message):
                self._tracker.ack(tag)
                continue
            self.reactor.callFromThread(self._deliver, message, tag)

    def _rewind(self, kafka_consumer: Any, tags: list[DeliveryTag]) -> None:
        from confluent_kafka import TopicPartition

        lowest: dict[int, int] = {}
        for tag in tags:
            if self._tracker.current(tag):
                lowest[tag.partition] = min(tag.offset, lowest.get(tag.partition, tag.offset))
        for partition, offset in lowest.items():
            self._tracker.rewind(partition, offset)
            self._backlog = deque(
                r for r in self._backlog if r.partition() != partition or r.offset() < offset
            )
            kafka_consumer.seek(TopicPartition(self.topic, partition, offset))

    def _commit(self, kafka_consumer: Any) -> None:
        from confluent_kafka import TopicPartition

        offsets = self._tracker.to_commit()
        if not offsets:
            return
        kafka_consumer.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
        self._tracker.committed(offsets)

    def _on_assign(self, kafka_consumer: Any, partitions: list[Any]) -> None:
        self._assignment = list(partitions)
        self._fetch_paused = False
        for tp in partitions:
            self._tracker.assign(tp.partition)
        self.log.debug("group {group} assigned {partitions}", group=self.group, partitions=partitions)
        self.reactor.callFromThread(self._assigned_first)

    def _on_revoke(self, kafka_consumer: Any, partitions: list[Any]) -> None:
        try:
            self._commit(kafka_consumer)
        except Exception:
            self.log.failure("commit on revoke of {group} failed", group=self.group)
        self._on_lost(kafka_consumer, partitions)

    def _on_lost(self, kafka_consumer: Any, partitions: list[Any]) -> None:
        gone = {tp.partition for tp in partitions}
        for partition in gone:
            self._tracker.revoke(partition)
        self._backlog = deque(r for r in self._backlog if r.partition() not in gone)
        self._assignment = [tp for tp in self._assignment if tp.partition not in gone]
