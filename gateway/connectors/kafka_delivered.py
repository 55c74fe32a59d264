"""How far each member of a consumer group delivered: the marks that flag a fleet's redeliveries (issue 35).

Kafka keeps no delivery count, and Tansu drops commit metadata, so when a partition moves to
another member (a gateway of the fleet died, a consumer joined or left) the new owner cannot tell
which records after the group's committed offset the last owner had delivered.  Every member
therefore publishes, per partition, the highest offset it delivered (its *mark*) to a small
compacted topic (``delivered_topic``, key ``group/topic/partition``, value the offset):

* asynchronously, at most every ``delivered_interval`` seconds and only for the partitions whose
  mark moved (:meth:`DeliveredMarks.due`), so a delivery never waits for it;
* synchronously when a partition is revoked (the member is still alive), before the group
  hands the partition to someone else.

A member given a partition it did not hold reads the marks (the last ``delivered_tail`` records
of the topic, :func:`read_marks`) and flags every record from the committed offset up to the
highest mark as redelivered.  Over-flagging is possible (a mark is how far a member delivered,
some of which it may have committed meanwhile: those are not fetched again anyway); what a member
delivered in the last ``delivered_interval`` before it *died* may come unflagged.

:class:`DeliveredMarks` is pure bookkeeping (no Kafka client), owned by a subscription's polling
thread; :func:`read_marks` is the blocking read (the consumer in a child process).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from twisted.logger import Logger

from gateway.connectors.kafka_transactions import read_tail


def mark_key(group: str, topic: str, partition: int) -> bytes:
    """The record key of the mark of ``partition`` of ``topic`` in ``group``."""
    return f"{group}/{topic}/{partition}".encode()


@dataclass(slots=True)
class DeliveredMarks:
    """The highest delivered offset per partition of one subscription, and which moved since
    they were last published."""

    interval: float
    """Seconds between two publications (:meth:`due`)."""
    marks: dict[int, int] = field(default_factory=dict)
    published: dict[int, int] = field(default_factory=dict)
    last: float = 0.0

    def delivered(self, partition: int, offset: int) -> None:
        """The record at ``offset`` was handed to the client."""
        if offset > self.marks.get(partition, -1):
            self.marks[partition] = offset

    def pending(self, partitions: Any = None) -> dict[int, int]:
        """Partition -> mark not yet published (of ``partitions`` only, when given)."""
        return {p: o for p, o in self.marks.items()
                if self.published.get(p) != o and (partitions is None or p in partitions)}

    def due(self, now: float) -> dict[int, int]:
        """The marks to publish now: those that moved, once ``interval`` passed since the last time."""
        if now - self.last < self.interval:
            return {}
        pending = self.pending()
        if pending:
            self.last = now
        return pending

    def sent(self, marks: dict[int, int]) -> None:
        """``marks`` were handed to the producer."""
        for partition, offset in marks.items():
            if offset > self.published.get(partition, -1):
                self.published[partition] = offset


def parse_marks(records: list[tuple[bytes | None, bytes | None]], group: str, topic: str) -> dict[int, int]:
    """Partition -> the highest mark among ``records`` (key, value) of ``group`` and ``topic``."""
    prefix = f"{group}/{topic}/".encode()
    marks: dict[int, int] = {}
    for key, value in records:
        if key is None or value is None or not key.startswith(prefix):
            continue
        try:
            partition, offset = int(key[len(prefix):]), int(value)
        except ValueError:
            continue
        if offset > marks.get(partition, -1):
            marks[partition] = offset
    return marks


def read_marks(settings: Any, group: str, topic: str) -> dict[int, int]:
    """Partition -> the highest mark of ``group`` on ``topic`` in the last ``delivered_tail`` records
    of ``delivered_topic`` (blocking)."""
    records: list[tuple[bytes | None, bytes | None]] = []
    read_tail(settings, settings.delivered_topic, settings.delivered_tail,
              lambda record: records.append((record.key(), record.value())))
    return parse_marks(records, group, topic)


class MarksChannel:
    """Publishes and reads marks for the subscriptions of one connector (called from their polling threads).

    :param connector: the :class:`~gateway.connectors.kafka.KafkaConnector` (its producer, on the reactor).
    """

    log = Logger()

    def __init__(self, connector: Any) -> None:
        self.connector = connector
        self.topic: str = connector.settings.delivered_topic

    def publish(self, group: str, topic: str, marks: dict[int, int], wait: float = 0.0) -> None:
        """Produce ``marks``; with ``wait``, block up to that many seconds for Kafka's acknowledgement."""
        if not marks:
            return
        done = threading.Event()
        left = [len(marks)]

        def settled(_: object) -> None:
            left[0] -= 1
            if not left[0]:
                done.set()

        def failed(failure: Any) -> None:
            self.log.warn("publishing delivered marks of group {group} to {topic} failed: {error}", group=group,
                          topic=self.topic, error=failure.getErrorMessage())
            done.set()

        def produce() -> None:
            for partition, offset in marks.items():
                self.connector.send_record(self.topic, mark_key(group, topic, partition),
                                           str(offset).encode("ascii")).addCallbacks(settled, failed)

        self.connector.reactor.callFromThread(produce)
        if wait:
            done.wait(wait)

    def read(self, group: str, topic: str) -> dict[int, int]:
        """The marks of ``group`` on ``topic`` (blocking; none when they cannot be read)."""
        try:
            return read_marks(self.connector.settings, group, topic)
        except Exception as exc:
            self.log.warn("reading delivered marks of group {group} from {topic} failed ({error}): records delivered "
                          "by another member come again unflagged", group=group, topic=self.topic, error=exc)
            return {}
