"""One STOMP subscription served by one Kafka consumer in its own polling thread.

The thread owns the consumer (a confluent-kafka ``Consumer`` in a child process,
:class:`~gateway.connectors.kafka_consumer_host.ConsumerProcess`, so a librdkafka
crash ends this subscription, not the gateway) and the offset bookkeeping
(:class:`~gateway.connectors.kafka_offsets.OffsetTracker`); the reactor
thread talks to it only through a command queue, and the thread hands
records back with ``reactor.callFromThread``.  So the reactor never blocks
and the consumer is never touched by two threads.

* Deliveries: record -> :func:`record_to_message` -> ``consumer.deliver``.
* ``ack``: commits up to the highest contiguous acknowledged offset per
  partition (never the consumer's position); the Deferred fires after the
  commit round that followed it.  ``auto`` subscriptions ack each delivery
  the consumer took (not one it refused, e.g. while its connection closes).
* ``nack``: seeks the partition back to the rejected offset; everything
  delivered from there on is delivered again, marked redelivered.
* ``prefetch``: deliveries stall while that many are unacknowledged, and on
  ``pause()`` (transport back-pressure) until ``resume()``; a long stall
  pauses the partitions (see :meth:`KafkaSubscription._fetch`), and they are
  resumed once deliveries flow, also after the group revoked and assigned them
  again meanwhile (librdkafka keeps them paused).
* A deleted topic (its records' errors say so) or a crashed consumer process ends
  the subscription: ``consumer.subscription_failed`` with the reason.
* Rebalances: a revoked partition's deliveries stay with the client (they count
  against ``prefetch``; their acks are kept).  When it comes back unconsumed by
  anyone else they are not handed out again; otherwise what comes again is
  marked redelivered with its count (:class:`OffsetTracker`).  What another member delivered
  is flagged too: shared and durable subscriptions publish how far they delivered and read the
  others' marks on assignment (:mod:`~gateway.connectors.kafka_delivered`).  A subscription
  starting at the latest offset commits that start on its first assignment, so
  a later assignment goes on from there instead of the end at that time.
* Hand-overs of an ``exclusive`` subscription (a bridge's: Kafka has no exclusive consumer, so a
  second gateway running the bridge shares the partitions): a mark is up to ``delivered_interval``
  old when its member dies, so after each assignment (of a partition the group already consumed)
  everything up to the partition's end, as its first fetch reports it, is flagged redelivered: the
  last owner cannot have delivered beyond it (:meth:`KafkaSubscription._flag_to_end`).  Giving a
  partition up alive (a rebalance), it first lets its client acknowledge what it holds of it, for
  up to :data:`HANDOVER_WAIT` seconds, and commits that.
* Lag: every :data:`LAG_INTERVAL` seconds the thread reads each assigned
  partition's high watermark (the broker's, or the last fetch's when higher)
  and keeps ``high - committed`` (``high - low`` before the group committed
  anything) as :attr:`KafkaSubscription.lag`; :class:`ConsumerLagCollector`
  shows it as ``jmsgateway_kafka_consumer_lag``.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from gateway.connectors.kafka_consumer_host import TOPIC_GONE, ConsumerCrashed
from gateway.connectors.kafka_delivered import DeliveredMarks
from gateway.connectors.kafka_offsets import DeliveryTag, OffsetTracker
from gateway.errors import ConnectorError, StaleDelivery
from gateway.interfaces import IConsumer, ISubscription, SubscriptionSpec
from gateway.message.kafka_records import record_to_message
from gateway.message.model import Message

LAG_INTERVAL = 5.0
"""Seconds between two readings of a subscription's partitions' high watermarks (its lag)."""

MARKS_TIMEOUT = 5.0
"""Seconds a revocation waits for the partitions' delivered marks to be stored."""

HANDOVER_WAIT = 5.0
"""Seconds an ``exclusive`` (bridge) subscription's revocation waits for its client to acknowledge
what it holds of the partitions given up (:meth:`KafkaSubscription._finish_before_revoke`)."""

MEMBER_GONE = frozenset({22, 25, 82})
"""Commit errors meaning the group no longer counts this member: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID.  A bridge's (``strict_acks``) subscription that gets one ends at once instead of
letting librdkafka rejoin the group while the bridge closes it: on Tansu a member that rejoins and
leaves within about a second leaves the group giving no partitions to its successors for a minute
or more (reproduced without the gateway: docs/kafka.md, "Bridges across a stalled link")."""

LAG_TIMEOUT = 1.0
"""Seconds one watermark reading may wait for the broker (the polling thread waits that long at most)."""


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
        start_at_latest: bool = False,
        commit_interval: float = 0.1,
        pause_after: float = 5.0,
        marks: Any = None,
        marks_interval: float = 0.2,
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
        self._start_at_latest = start_at_latest
        self._commit_interval = commit_interval
        self._pause_after = pause_after
        self._marks_channel = marks
        """A :class:`~gateway.connectors.kafka_delivered.MarksChannel` (shared and durable groups), or None."""
        self._marks = DeliveredMarks(marks_interval)
        self._stalled_since: float | None = None
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._accepting = True
        self._accept_lock = threading.Lock()
        self._closed = False
        self._assigned: Deferred[KafkaSubscription] | None = None
        self._thread: threading.Thread | None = None
        # owned by the polling thread:
        self._tracker = OffsetTracker()
        self._backlog: deque[Any] = deque()
        self._early: list[_Command] = []
        self._redeliveries: dict[tuple[int, int], int] = {}
        self._paused_by_client = False
        self._paused: set[int] = set()
        """Partitions this subscription paused in librdkafka and has not resumed: librdkafka keeps a partition
        paused when the group revokes it and assigns it again (confluentinc/librdkafka#1849), so only a
        :meth:`_resume_paused` of this thread's own ends it."""
        self._assignment: list[Any] = []
        self._reassigned = False
        self._member_gone = False
        """A commit found this member expelled from its group (:data:`MEMBER_GONE`)."""
        """The group assigned partitions since the last pause: a stalled subscription pauses the whole
        assignment again (pausing is idempotent), whether librdkafka kept a reassigned partition's pause or not."""
        self._to_end: set[int] = set()
        """Handed-over partitions of an ``exclusive`` subscription whose end is not read yet."""
        self._lag_read_at = 0.0
        self.lag: dict[int, int] = {}
        """Partition -> records after the group's committed offset (read by any thread: replaced whole)."""

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
        self._send("pause", [])

    def resume(self) -> None:
        """Resume delivering."""
        self._send("resume", [])

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
        with self._accept_lock:
            if self._thread is not None and self._accepting:
                self._commands.put(_Command(kind, [t for t in tags if isinstance(t, DeliveryTag)], done))
                return done
        done.callback(None)  # the polling thread has ended: nothing left to do
        return done

    def _deliver(self, batch: list[tuple[Message, DeliveryTag]]) -> None:
        if self._closed:
            return
        taken: list[DeliveryTag] = []
        refused: list[DeliveryTag] = []
        for message, tag in batch:
            try:
                accepted = self.consumer.deliver(message, tag)
            except Exception:
                self.log.failure("consumer of {topic} failed on delivery {tag}", topic=self.topic, tag=tag)
                accepted = False
            (refused if accepted is False else taken).append(tag)
        with self._accept_lock:
            if not self._accepting:
                return
            if self.spec.ack_mode == "auto" and taken:
                # no Deferred: auto acks are committed on the next commit tick
                self._commands.put(_Command("ack", taken))
            if refused:
                # a refused delivery (the connection closing, or its transport full while the SUBSCRIBE
                # is answered) is neither acknowledged nor left outstanding: the partition is sought
                # back to it and it comes again (with what followed it: at least once)
                self._commands.put(_Command("nack", refused))

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
        except ConnectorError as exc:
            self.log.warn("kafka subscription {group} to topic {topic} ended: {error}", group=self.group,
                          topic=self.topic, error=exc)
            error = exc
        except Exception as exc:
            self.log.failure("kafka subscription {group} to {topic} failed", group=self.group, topic=self.topic)
            error = ConnectorError(f"kafka consumer of {self.topic} failed: {exc}")
        finally:
            if kafka_consumer is not None and not isinstance(error, ConsumerCrashed):
                try:
                    if not self._member_gone:
                        self._commit(kafka_consumer)
                except Exception:
                    self.log.failure("final commit of {group} failed", group=self.group)
                try:
                    kafka_consumer.close()
                except Exception:
                    self.log.failure("closing kafka consumer {group} failed", group=self.group)
            with self._accept_lock:
                self._accepting = False
            pending: list[Deferred[Any] | None] = [c.done for c in self._early]
            while not self._commands.empty():
                pending.append(self._commands.get().done)
            for done in pending:
                self.reactor.callFromThread(self._fire, done, None)
            self.reactor.callFromThread(self._ended, error)

    def _loop(self, kafka_consumer: Any) -> None:  # noqa: C901 (the consumer thread's one poll loop: pause, seek, commit, stop in one place)
        from confluent_kafka import KafkaError

        last_commit = time.monotonic()
        while True:
            waiting: list[Deferred[Any] | None] = []
            closing: Deferred[Any] | None = None
            while True:
                try:
                    command = self._early.pop(0) if self._early else self._commands.get_nowait()
                except queue.Empty:
                    break
                if command.kind == "ack":
                    self._take_ack(command, waiting)
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
            now = time.monotonic()
            if waiting or now - last_commit >= self._commit_interval:
                last_commit = now
                try:
                    self._commit(kafka_consumer)
                except Exception as exc:
                    failure = ConnectorError(f"committing offsets of group {self.group} failed: {exc}")
                    for done in waiting:
                        self.reactor.callFromThread(self._fail, done, failure)
                    if self.spec.strict_acks and getattr(exc, "code", None) in MEMBER_GONE:
                        self._member_gone = True
                        if closing is not None:  # (a close taken in this turn fires once the consumer is closed)
                            self._early.append(_Command("close", [], closing))
                        raise failure from exc
                else:
                    for done in waiting:
                        if done is not None:
                            self.reactor.callFromThread(self._fire, done, None)
            if closing is not None:
                self._commands.put(_Command("noop", [], closing))
                return
            if self._marks_channel is not None:
                due = self._marks.due(now)
                if due:
                    self._marks_channel.publish(self.group, self.topic, due)
                    self._marks.sent(due)
            if now - self._lag_read_at >= LAG_INTERVAL:
                self._lag_read_at = now
                self._read_lag(kafka_consumer)
            self._dispatch()
            records = self._fetch(kafka_consumer)
            for record in records:
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if error.fatal():
                        raise ConnectorError(f"kafka consumer of {self.topic}: {error.str()}")
                    if error.code() in TOPIC_GONE:
                        raise ConnectorError(f"kafka topic {self.topic!r} no longer exists ({error.str()}); "
                                             f"the subscription of group {self.group} ended")
                    self.log.warn("kafka consumer of {topic}: {error}", topic=self.topic, error=error.str())
                    continue
                if record.partition() not in self._tracker.partitions:
                    continue  # from a partition revoked meanwhile
                if self._to_end:
                    self._flag_to_end(kafka_consumer, record.partition())
                self._backlog.append(record)

    def _take_ack(self, command: _Command, waiting: list[Deferred[Any] | None]) -> None:
        """Apply an ``ack`` command; its Deferred goes to ``waiting`` (fired after the next commit)."""
        stale = ([tag for tag in command.tags if not self._tracker.current(tag)]
                 if self.spec.strict_acks else [])
        if stale and command.done is not None:
            # delivered before a rebalance or seek: those records come again, so
            # nothing of this acknowledgement is applied and it fails
            self.reactor.callFromThread(self._fail, command.done, StaleDelivery(
                f"{len(stale)} of {len(command.tags)} deliveries of {self.topic} belong to a "
                f"previous assignment of group {self.group}; they are redelivered"))
            return
        for tag in command.tags:
            self._tracker.ack(tag)
        if command.done is not None:
            waiting.append(command.done)

    def _finish_before_revoke(self, partitions: set[int]) -> list[Deferred[Any] | None]:
        """An ``exclusive`` (bridge) subscription gives a partition up alive: let its client acknowledge
        what it holds of it first (up to :data:`HANDOVER_WAIT` seconds), so those offsets are committed
        before the group hands the partition on and the next owner does not get them again while
        they are still on their way to the bridge's target.  Returns the acknowledgements taken (their
        Deferreds fire after the revocation's commit); other commands wait for the loop."""
        waiting: list[Deferred[Any] | None] = []
        deadline = time.monotonic() + HANDOVER_WAIT

        def held() -> bool:
            return any(state.unacked for p, state in self._tracker.partitions.items() if p in partitions)

        while held() and time.monotonic() < deadline:
            try:
                command = self._commands.get(timeout=0.05)
            except queue.Empty:
                continue
            if command.kind == "ack":
                self._take_ack(command, waiting)
                continue
            self._early.append(command)
            if command.kind == "close":
                break
        return waiting

    def _blocked(self) -> bool:
        return self._paused_by_client or self._tracker.unacked >= max(1, self.spec.prefetch)

    def _fetch(self, kafka_consumer: Any) -> list[Any]:
        """Fetch more records unless deliveries are stalled.

        Stalled (``prefetch`` deliveries unacknowledged, the client paused us,
        or the local backlog full), the thread waits on the command queue
        instead of fetching and librdkafka's own bounded queue holds the rest.
        Stalled longer than ``pause_after`` seconds, the partitions are paused
        so the consumer can go on polling (rebalances, the poll interval)
        without fetching; they resume once deliveries flow again.  A partition the
        group assigns during the stall is paused too, and one paused, revoked and
        assigned again is resumed like the others (:attr:`_paused`), and paused again
        should librdkafka have dropped its pause (:attr:`_reassigned`).  Pausing is
        not used for short stalls: resuming costs a refetch.
        """
        high = max(1, self.spec.prefetch)
        stalled = self._blocked() or len(self._backlog) >= high
        records: list[Any] = []
        if stalled:
            now = time.monotonic()
            if self._stalled_since is None:
                self._stalled_since = now
            if now - self._stalled_since >= self._pause_after:
                running = (list(self._assignment) if self._reassigned
                           else [tp for tp in self._assignment if tp.partition not in self._paused])
                self._reassigned = False
                if running:  # (the assignment, or what the group assigned since the stall began)
                    kafka_consumer.pause(running)
                    self._paused.update(tp.partition for tp in running)
            if all(tp.partition in self._paused for tp in self._assignment):
                # nothing is fetched: this only serves callbacks (the group join, rebalances)
                records = kafka_consumer.consume(num_messages=100, timeout=0)
            if not records:
                with contextlib.suppress(queue.Empty):
                    self._early.append(self._commands.get(timeout=self._poll_timeout))
            return records
        self._stalled_since = None
        if self._paused:
            self._resume_paused(kafka_consumer)
        # acks are expected soon while deliveries are outstanding: come back to the commands quickly
        timeout = min(self._poll_timeout, 0.01) if self._tracker.unacked else self._poll_timeout
        result: list[Any] = kafka_consumer.consume(num_messages=min(high - len(self._backlog), 500), timeout=timeout)
        return result

    def _resume_paused(self, kafka_consumer: Any) -> None:
        """Resume the assigned partitions this subscription paused, including those the group revoked and
        assigned again meanwhile (still paused in librdkafka).  One paused and then given to another member
        stays in :attr:`_paused`: if it comes back, it is resumed then."""
        held = [tp for tp in self._assignment if tp.partition in self._paused]
        if held:
            kafka_consumer.resume(held)
            self._paused.difference_update(tp.partition for tp in held)

    def _dispatch(self) -> None:
        batch: list[tuple[Message, DeliveryTag]] = []
        while self._backlog and not self._blocked():
            record = self._backlog.popleft()
            partition, offset = record.partition(), record.offset()
            if self._tracker.holds(partition, offset):
                continue  # fetched again after a resumed assignment: the client has it already
            redelivered = self._tracker.is_redelivery(partition, offset)
            tag = self._tracker.deliver(partition, offset)
            self._marks.delivered(partition, offset)
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
            batch.append((message, tag))
        if batch:
            self.reactor.callFromThread(self._deliver, batch)

    def _rewind(self, kafka_consumer: Any, tags: list[DeliveryTag]) -> None:
        from confluent_kafka import TopicPartition

        lowest: dict[int, int] = {}
        for tag in tags:
            if self._tracker.current(tag):
                lowest[tag.partition] = min(tag.offset, lowest.get(tag.partition, tag.offset))
        for partition, offset in lowest.items():
            self._tracker.rewind(partition, offset)
            if partition not in self._tracker.partitions:
                continue  # revoked: whoever has it now fetches it; if it comes back, it comes again
            self._backlog = deque(
                r for r in self._backlog if r.partition() != partition or r.offset() < offset
            )
            kafka_consumer.seek(TopicPartition(self.topic, partition, offset))

    def _read_lag(self, kafka_consumer: Any) -> None:
        """:attr:`lag` of the assigned partitions: high watermark minus the committed offset (the low
        watermark when the group committed none); a partition the broker does not answer for keeps none."""
        lag: dict[int, int] = {}
        for tp in list(self._assignment):
            try:
                low, high = kafka_consumer.get_watermark_offsets(tp, timeout=LAG_TIMEOUT, cached=False)
                # the last fetch's high watermark too: Tansu's ListOffsets answers the last batch's first
                # offset + 1 (a real Kafka's end is never below what a fetch reported)
                high = max(high, kafka_consumer.get_watermark_offsets(tp, cached=True)[1])
            except ConsumerCrashed:
                raise
            except Exception as exc:
                self.log.debug("group {group}: no watermarks for {topic}[{partition}]: {error}", group=self.group,
                               topic=self.topic, partition=tp.partition, error=exc)
                continue
            state = self._tracker.partitions.get(tp.partition)
            committed = state.committed if state is not None and state.committed is not None else -1
            lag[tp.partition] = max(0, high - (committed if committed >= 0 else low))
        self.lag = lag

    def _commit(self, kafka_consumer: Any) -> None:
        from confluent_kafka import TopicPartition

        offsets = self._tracker.to_commit()
        if not offsets:
            return
        kafka_consumer.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
        self._tracker.committed(offsets)
        if self._redeliveries:
            self._redeliveries = {
                (p, o): n for (p, o), n in self._redeliveries.items() if o >= offsets.get(p, -1)
            }

    def _on_assign(self, kafka_consumer: Any, partitions: list[Any]) -> None:
        committed: list[Any] = []
        known = True
        if partitions:
            try:
                committed = kafka_consumer.committed(partitions, timeout=10)
            except Exception as exc:
                if self._start_at_latest:
                    raise  # no start to pin: the subscription fails rather than skip records
                # the group goes on from its committed offsets anyway; only resuming needs them
                self.log.warn("group {group}: cannot read committed offsets ({error}); held deliveries "
                              "of re-assigned partitions come again", group=self.group, error=exc)
                known = False
            if self._start_at_latest:
                committed = self._pin_latest(kafka_consumer, committed)
        starts = {tp.partition: tp.offset for tp in committed}
        self._assignment = list(partitions)  # (what was paused stays so: see _paused)
        self._reassigned = bool(partitions)
        again = sorted(tp.partition for tp in partitions if tp.partition in self._tracker.revoked)
        resumed = [tp.partition for tp in partitions
                   if self._tracker.assign(tp.partition, starts.get(tp.partition), resume=known)]
        fresh = [tp.partition for tp in partitions if tp.partition not in resumed]
        marks: dict[int, int] = {}
        if fresh and self._marks_channel is not None:
            # how far any member delivered them: what comes again up to there is flagged
            marks = self._marks_channel.read(self.group, self.topic)
            for partition in fresh:
                if partition in marks:
                    self._tracker.delivered_before(partition, marks[partition])
        if self.spec.exclusive:
            # the last owner may have died up to delivered_interval after its last mark
            self._to_end |= {tp.partition for tp in partitions
                             if starts.get(tp.partition, -1) >= 0 or tp.partition in marks}
        if again:
            self.log.info("kafka group {group}: partitions {again} of {topic} assigned again after a rebalance; "
                          "deliveries resumed on {resumed}, the others come again as redeliveries",
                          group=self.group, again=again, topic=self.topic, resumed=resumed)
        else:
            self.log.debug("kafka group {group}: subscription {member} assigned partitions {partitions} of {topic} "
                           "at committed offsets {starts}", group=self.group, member=f"{id(self):x}",
                           partitions=sorted(tp.partition for tp in partitions), topic=self.topic, starts=starts)
        self.reactor.callFromThread(self._assigned_first)

    def _flag_to_end(self, kafka_consumer: Any, partition: int) -> None:
        """The first record of a handed-over partition came: flag everything up to the partition's
        end as redelivered.  The end is the high watermark of the fetch that brought the record
        (Tansu answers ListOffsets short of the end; a fetch reports it), read after the group gave
        the partition away from its last owner, so that owner cannot have delivered beyond it."""
        if partition not in self._to_end:
            return
        self._to_end.discard(partition)
        from confluent_kafka import TopicPartition

        tp = TopicPartition(self.topic, partition)
        try:
            end = kafka_consumer.get_watermark_offsets(tp, cached=True)[1]
            if end < 0:
                end = kafka_consumer.get_watermark_offsets(tp, timeout=LAG_TIMEOUT, cached=False)[1]
        except ConsumerCrashed:
            raise
        except Exception as exc:
            self.log.warn("group {group}: no end offset of {topic}[{partition}] ({error}); what its last owner "
                          "delivered is flagged up to its delivered mark only", group=self.group, topic=self.topic,
                          partition=partition, error=exc)
            return
        if end > 0:
            self._tracker.delivered_before(partition, end - 1)
            self.log.info("kafka group {group}: {topic}[{partition}] handed over; records up to offset {last} come "
                          "flagged redelivered (its last owner may have delivered them)", group=self.group,
                          topic=self.topic, partition=partition, last=end - 1)

    def _pin_latest(self, kafka_consumer: Any, committed: list[Any]) -> list[Any]:
        """Fix the start of partitions without a committed offset at their end *now*,
        so a record produced right after the subscription fired is not skipped
        (``auto.offset.reset=latest`` would resolve the end later), and commit it: a
        later assignment (a rebalance) goes on from there, not from the end at that time."""
        from confluent_kafka import TopicPartition

        pinned = []
        for tp in committed:
            if tp.offset < 0:
                _, high = kafka_consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                tp.offset = high
                pinned.append(TopicPartition(tp.topic, tp.partition, high))
        if pinned:
            try:
                kafka_consumer.commit(offsets=pinned, asynchronous=False)
            except Exception:
                self.log.failure("committing the start of {group} failed", group=self.group)
        kafka_consumer.assign(committed)
        return list(committed)

    def _on_revoke(self, kafka_consumer: Any, partitions: list[Any]) -> None:
        waiting: list[Deferred[Any] | None] = []
        if self.spec.exclusive and not self._closed:
            waiting = self._finish_before_revoke({tp.partition for tp in partitions})
        try:
            self._commit(kafka_consumer)
        except Exception as exc:
            self.log.failure("commit on revoke of {group} failed", group=self.group)
            failure = ConnectorError(f"committing offsets of group {self.group} failed: {exc}")
            for done in waiting:
                self.reactor.callFromThread(self._fail, done, failure)
        else:
            for done in waiting:
                self.reactor.callFromThread(self._fire, done, None)
        if self._marks_channel is not None:
            # before the group hands them to another member, which reads the marks on assignment
            pending = self._marks.pending({tp.partition for tp in partitions})
            self._marks_channel.publish(self.group, self.topic, pending, wait=MARKS_TIMEOUT)
            self._marks.sent(pending)
        self._on_lost(kafka_consumer, partitions)

    def _on_lost(self, kafka_consumer: Any, partitions: list[Any]) -> None:
        """Partitions revoked or lost: their deliveries stay with the client (see OffsetTracker)."""
        gone = {tp.partition for tp in partitions}
        self.log.debug("kafka group {group}: subscription {member} gave up partitions {gone} of {topic} (committed "
                       "{committed}, {unacked} deliveries unacknowledged)", group=self.group, member=f"{id(self):x}",
                       gone=sorted(gone), topic=self.topic, unacked=self._tracker.unacked,
                       committed={p: state.committed for p, state in self._tracker.partitions.items() if p in gone})
        self._to_end -= gone
        for partition in gone:
            self._tracker.revoke(partition)
        self._backlog = deque(r for r in self._backlog if r.partition() not in gone)
        self._assignment = [tp for tp in self._assignment if tp.partition not in gone]


class ConsumerLagCollector(Collector):
    """``jmsgateway_kafka_consumer_lag{connector, topic, group}``: per subscription, the records of its topic
    after its group's committed offsets (summed over its partitions), as last read (:data:`LAG_INTERVAL`).

    One per registry (:meth:`for_registry`); each Kafka connector adds the set of its live subscriptions."""

    _collectors: weakref.WeakKeyDictionary[CollectorRegistry, ConsumerLagCollector] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.sources: list[tuple[str, set[KafkaSubscription]]] = []

    @classmethod
    def for_registry(cls, registry: CollectorRegistry) -> ConsumerLagCollector:
        collector = cls._collectors.get(registry)
        if collector is None:
            collector = cls._collectors[registry] = cls()
            registry.register(collector)
        return collector

    def add(self, connector: str, subscriptions: set[KafkaSubscription]) -> None:
        """Report ``subscriptions`` (a connector's live set) under ``connector``."""
        self.sources.append((connector, subscriptions))

    def collect(self) -> Iterator[Any]:
        lag = GaugeMetricFamily("jmsgateway_kafka_consumer_lag",
                                "Records of a subscription's topic after its consumer group's committed offsets "
                                "(summed over its assigned partitions)", labels=["connector", "topic", "group"])
        for connector, subscriptions in self.sources:
            for subscription in list(subscriptions):
                lag.add_metric([connector, subscription.topic, subscription.group],
                               float(sum(subscription.lag.values())))
        yield lag
