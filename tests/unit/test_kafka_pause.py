"""A Kafka subscription whose deliveries stall pauses its partitions (``KafkaSubscription._fetch``) and must
fetch again once they flow, across rebalances: librdkafka keeps a paused partition paused when the group
revokes it and assigns it again (confluentinc/librdkafka#1849), so whatever the subscription paused it must
resume itself.  A fake consumer that keeps pause flags as librdkafka does; the polling thread's steps called
directly."""

from __future__ import annotations

from typing import Any
from unittest.mock import Mock

from confluent_kafka import TopicPartition

from gateway.connectors.kafka_subscription import KafkaSubscription
from gateway.interfaces import SubscriptionSpec


class Record:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"body"

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 0, 0


class PausingConsumer:
    """Hands out records of the partitions assigned and not paused; pause flags survive a new assignment."""

    def __init__(self, ends: dict[int, int], *, keeps_pause: bool = True) -> None:
        self.ends = ends
        self.positions = dict.fromkeys(ends, 0)
        self.assigned: set[int] = set()
        self.paused: set[int] = set()
        self.keeps_pause = keeps_pause

    def assign(self, partitions: list[int]) -> None:  # what librdkafka does after on_assign returns
        if not self.keeps_pause:  # a librdkafka whose new assignment starts unpaused
            self.paused = set()
        self.assigned = set(partitions)

    def pause(self, partitions: list[Any]) -> None:
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[Any]) -> None:
        self.paused -= {tp.partition for tp in partitions}

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [TopicPartition("t", tp.partition, -1001) for tp in partitions]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        records: list[Record] = []
        for partition in sorted(self.assigned - self.paused):
            while self.positions[partition] < self.ends[partition] and len(records) < num_messages:
                records.append(Record(partition, self.positions[partition]))
                self.positions[partition] += 1
        return records


def subscription(prefetch: int) -> KafkaSubscription:
    spec = SubscriptionSpec(destination="/queue/t", ack_mode="client-individual", prefetch=prefetch)
    reactor = Mock()
    reactor.callFromThread.side_effect = lambda function, *args: function(*args)
    return KafkaSubscription(reactor, spec, Mock(), topic="t", group="g", consumer_factory=None,
                             text_records=True, pause_after=0.0, poll_timeout=0.0)


def assign(sub: KafkaSubscription, consumer: PausingConsumer, partitions: list[int]) -> None:
    sub._on_assign(consumer, [TopicPartition("t", p) for p in partitions])
    consumer.assign(partitions)


def turn(sub: KafkaSubscription, consumer: PausingConsumer) -> int:
    """One turn of the polling loop: deliver what is waiting, fetch (the records kept as the loop keeps
    them); how many records the fetch brought."""
    sub._dispatch()
    records = [r for r in sub._fetch(consumer) if r.partition() in sub._tracker.partitions]
    sub._backlog.extend(records)
    return len(records)


def stall(sub: KafkaSubscription, consumer: PausingConsumer) -> None:
    """Deliver up to prefetch and stall past ``pause_after``: the partitions get paused."""
    for _ in range(3):
        turn(sub, consumer)
    assert sub._blocked()
    assert consumer.paused == consumer.assigned


def acknowledge_all(sub: KafkaSubscription) -> None:
    """The client acknowledges every delivery it got (the bridge's target confirmed its batch)."""
    deliver: Any = sub.consumer.deliver
    for call in deliver.call_args_list:
        sub._tracker.ack(call.args[1])
    deliver.reset_mock()


def test_a_paused_subscription_fetches_again_once_deliveries_flow() -> None:
    consumer = PausingConsumer({0: 10})
    sub = subscription(prefetch=2)
    assign(sub, consumer, [0])
    stall(sub, consumer)
    acknowledge_all(sub)
    assert [turn(sub, consumer) for _ in range(3)] != [0, 0, 0]


def test_a_partition_paused_then_revoked_and_assigned_again_is_resumed() -> None:
    """The defect: a stall past pause_after paused the partitions, the group rebalanced meanwhile (a WAN stall
    longer than the session timeout), and once the deliveries flowed again nothing was ever fetched."""
    consumer = PausingConsumer({0: 10, 1: 10})
    sub = subscription(prefetch=2)
    assign(sub, consumer, [0, 1])
    stall(sub, consumer)
    sub._on_revoke(consumer, [TopicPartition("t", p) for p in (0, 1)])
    assign(sub, consumer, [0, 1])
    assert consumer.paused == {0, 1}  # (librdkafka kept them paused)
    acknowledge_all(sub)
    assert [turn(sub, consumer) for _ in range(3)] != [0, 0, 0], "the partitions were resumed"
    for _ in range(100):  # the client keeps acknowledging: everything comes
        acknowledge_all(sub)
        turn(sub, consumer)
    assert consumer.positions == {0: 10, 1: 10}
    assert not sub._backlog


def test_a_partition_assigned_while_paused_is_paused_too() -> None:
    """A stalled subscription that gets a new partition does not fetch it while it is stalled."""
    consumer = PausingConsumer({0: 10, 1: 1000})
    sub = subscription(prefetch=2)
    assign(sub, consumer, [0])
    stall(sub, consumer)
    assign(sub, consumer, [0, 1])
    assert sum(turn(sub, consumer) for _ in range(5)) <= 100
    assert consumer.paused == {0, 1}


def test_a_partition_whose_pause_librdkafka_dropped_is_paused_again_while_stalled() -> None:
    """Should a librdkafka drop the pause of a partition revoked and assigned back (the other reading of
    confluentinc/librdkafka#1849), the stalled subscription pauses it again instead of fetching it."""
    consumer = PausingConsumer({0: 200, 1: 200}, keeps_pause=False)
    sub = subscription(prefetch=2)
    assign(sub, consumer, [0, 1])
    stall(sub, consumer)
    sub._on_revoke(consumer, [TopicPartition("t", p) for p in (0, 1)])
    assign(sub, consumer, [0, 1])
    assert consumer.paused == set()  # (this librdkafka forgot them)
    assert sum(turn(sub, consumer) for _ in range(5)) <= 100, "the stalled subscription fetched on"
    assert consumer.paused == {0, 1}
    acknowledge_all(sub)
    for _ in range(1000):  # once the deliveries flow, everything comes
        acknowledge_all(sub)
        turn(sub, consumer)
    assert consumer.positions == {0: 200, 1: 200}
