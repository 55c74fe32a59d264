"""The delivered marks of a fleet's consumer group (gateway.connectors.kafka_delivered) and how the
offset bookkeeping flags what another member delivered (OffsetTracker.delivered_before)."""

from __future__ import annotations

from typing import Any
from unittest.mock import Mock

from confluent_kafka import TopicPartition

from gateway.connectors.kafka_delivered import DeliveredMarks, mark_key, parse_marks
from gateway.connectors.kafka_offsets import OffsetTracker
from gateway.connectors.kafka_subscription import MARKS_TIMEOUT, KafkaSubscription
from gateway.interfaces import SubscriptionSpec


def test_a_mark_is_the_highest_offset_delivered() -> None:
    marks = DeliveredMarks(0.2)
    for offset in (3, 7, 5):
        marks.delivered(0, offset)
    marks.delivered(1, 2)
    assert marks.marks == {0: 7, 1: 2}


def test_marks_are_published_at_most_every_interval_and_only_when_moved() -> None:
    marks = DeliveredMarks(0.2)
    marks.delivered(0, 1)
    assert marks.due(10.0) == {0: 1}
    marks.sent({0: 1})
    marks.delivered(0, 2)
    assert marks.due(10.1) == {}  # within the interval
    assert marks.due(10.25) == {0: 2}
    marks.sent({0: 2})
    assert marks.due(11.0) == {}  # nothing moved


def test_pending_marks_of_revoked_partitions() -> None:
    marks = DeliveredMarks(0.2)
    marks.delivered(0, 4)
    marks.delivered(1, 9)
    marks.sent({1: 9})
    assert marks.pending({0, 1}) == {0: 4}
    assert marks.pending({1}) == {}


def test_the_highest_mark_of_the_group_and_topic_wins() -> None:
    records = [(mark_key("g", "t", 0), b"5"), (mark_key("g", "t", 0), b"9"), (mark_key("g", "t", 0), b"7"),
               (mark_key("g", "t", 1), b"2"), (mark_key("g", "u", 0), b"99"), (mark_key("h", "t", 0), b"99"),
               (b"g/t/x", b"1"), (mark_key("g", "t", 2), b"junk"), (None, b"1"), (mark_key("g", "t", 3), None)]
    assert parse_marks(records, "g", "t") == {0: 9, 1: 2}


def test_a_prefix_of_the_topic_is_another_topic() -> None:
    assert parse_marks([(mark_key("g", "t.x", 0), b"4")], "g", "t") == {}


def test_what_another_member_delivered_is_flagged_up_to_its_mark() -> None:
    tracker = OffsetTracker()
    tracker.assign(0, committed=10)
    tracker.delivered_before(0, 14)
    assert [tracker.is_redelivery(0, o) for o in (10, 14, 15)] == [True, True, False]
    tracker.delivered_before(0, 12)  # a lower mark never lowers it
    assert tracker.is_redelivery(0, 14)


def test_a_mark_for_a_partition_not_assigned_is_ignored() -> None:
    tracker = OffsetTracker()
    tracker.delivered_before(3, 14)
    assert not tracker.is_redelivery(3, 1)


class Channel:
    """A MarksChannel standing in: records what is published, answers reads from ``stored``."""

    def __init__(self, stored: dict[int, int]) -> None:
        self.stored = stored
        self.published: list[tuple[dict[int, int], float]] = []

    def publish(self, group: str, topic: str, marks: dict[int, int], wait: float = 0.0) -> None:
        self.published.append((dict(marks), wait))

    def read(self, group: str, topic: str) -> dict[int, int]:
        return self.stored


class Committed:
    def __init__(self, offsets: dict[int, int]) -> None:
        self.offsets = offsets

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, self.offsets.get(tp.partition, -1001)) for tp in partitions]

    def commit(self, **_: Any) -> None:
        pass


def subscription(channel: Channel) -> KafkaSubscription:
    return KafkaSubscription(Mock(), SubscriptionSpec(destination="/queue/t", ack_mode="client-individual"), Mock(),
                             topic="t", group="g", consumer_factory=None, text_records=True, marks=channel)


def test_an_assigned_partition_is_flagged_up_to_the_last_owners_mark() -> None:
    channel = Channel({0: 12, 1: 3})
    sub = subscription(channel)
    sub._on_assign(Committed({0: 10, 1: 5}), [TopicPartition("t", 0), TopicPartition("t", 1)])
    assert [sub._tracker.is_redelivery(0, o) for o in (10, 12, 13)] == [True, True, False]
    assert not sub._tracker.is_redelivery(1, 5)  # its mark is below the committed offset


def test_a_revoked_partition_publishes_its_mark_and_waits_for_it() -> None:
    channel = Channel({})
    sub = subscription(channel)
    consumer = Committed({0: 0, 1: 0})
    sub._on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])
    sub._marks.delivered(0, 4)
    sub._marks.delivered(1, 6)
    sub._on_revoke(consumer, [TopicPartition("t", 0)])
    assert channel.published == [({0: 4}, MARKS_TIMEOUT)]
    sub._on_revoke(consumer, [TopicPartition("t", 0)])  # published already: nothing again
    assert channel.published[-1] == ({}, MARKS_TIMEOUT)


class Ends(Committed):
    """A consumer standing in that also answers the partitions' ends: ``cached`` as the last fetch
    reported them, ``listed`` as ListOffsets does."""

    def __init__(self, offsets: dict[int, int], cached: dict[int, int], listed: dict[int, int] | None = None) -> None:
        super().__init__(offsets)
        self.cached = cached
        self.listed = listed or {}

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        return 0, (self.cached if cached else self.listed).get(tp.partition, -1001)


def exclusive_subscription(channel: Channel) -> KafkaSubscription:
    spec = SubscriptionSpec(destination="/queue/t", ack_mode="client-individual", exclusive=True)
    return KafkaSubscription(Mock(), spec, Mock(), topic="t", group="g", consumer_factory=None, text_records=True,
                             marks=channel)


def test_a_bridge_flags_a_handed_over_partition_up_to_its_end_at_the_first_fetch() -> None:
    """Issue 32: the last owner's mark may be ``delivered_interval`` old when it died, so an exclusive
    (bridge) subscription flags everything up to the end the first fetch reports."""
    sub = exclusive_subscription(Channel({0: 12}))
    consumer = Ends({0: 10, 1: 5}, cached={0: 30, 1: 8})
    sub._on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])
    assert not sub._tracker.is_redelivery(0, 13)  # only the mark so far
    sub._flag_to_end(consumer, 0)
    sub._flag_to_end(consumer, 1)
    assert [sub._tracker.is_redelivery(0, o) for o in (13, 29, 30)] == [True, True, False]
    assert [sub._tracker.is_redelivery(1, o) for o in (5, 7, 8)] == [True, True, False]
    consumer.cached = {0: 50}
    sub._flag_to_end(consumer, 0)  # once per assignment
    assert not sub._tracker.is_redelivery(0, 40)


def test_the_end_is_listed_when_no_fetch_reported_it() -> None:
    sub = exclusive_subscription(Channel({}))
    consumer = Ends({0: 10}, cached={}, listed={0: 20})
    sub._on_assign(consumer, [TopicPartition("t", 0)])
    sub._flag_to_end(consumer, 0)
    assert sub._tracker.is_redelivery(0, 19) and not sub._tracker.is_redelivery(0, 20)


def test_a_partition_nobody_consumed_and_a_shared_subscription_are_not_flagged_to_the_end() -> None:
    bridge = exclusive_subscription(Channel({}))
    consumer = Ends({}, cached={0: 30})
    bridge._on_assign(consumer, [TopicPartition("t", 0)])  # no committed offset, no mark: a new group
    bridge._flag_to_end(consumer, 0)
    assert not bridge._tracker.is_redelivery(0, 0)
    shared = subscription(Channel({}))  # a STOMP client's: flagged up to the marks only
    consumer = Ends({0: 10}, cached={0: 30})
    shared._on_assign(consumer, [TopicPartition("t", 0)])
    shared._flag_to_end(consumer, 0)
    assert not shared._tracker.is_redelivery(0, 10)


def test_a_revoked_partition_is_not_flagged_to_the_end_later() -> None:
    sub = exclusive_subscription(Channel({}))
    consumer = Ends({0: 10}, cached={0: 30})
    sub._on_assign(consumer, [TopicPartition("t", 0)])
    sub._on_lost(consumer, [TopicPartition("t", 0)])
    assert not sub._to_end


class Commits(Ends):
    def __init__(self, offsets: dict[int, int]) -> None:
        super().__init__(offsets, cached={})
        self.commits: list[dict[int, int]] = []

    def commit(self, offsets: list[Any], asynchronous: bool = True) -> None:  # type: ignore[override]
        self.commits.append({tp.partition: tp.offset for tp in offsets})


def test_a_bridge_giving_a_partition_up_alive_lets_its_client_acknowledge_first() -> None:
    """Issue 32: a live hand-over (a gateway joining the group) waits for the bridge to acknowledge
    what it holds of the partition and commits it, so the next owner does not get those records
    while the bridge may still be sending them; the acknowledgement's Deferred fires after that
    commit.  (Before: the revocation committed what was acknowledged then, nothing here.)"""
    import threading

    from gateway.connectors.kafka_subscription import _Command

    sub = exclusive_subscription(Channel({}))
    consumer = Commits({0: 10, 1: 3})
    sub._on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])
    tags = [sub._tracker.deliver(0, 10), sub._tracker.deliver(0, 11)]
    other = sub._tracker.deliver(1, 3)  # of a partition it keeps: not waited for
    done = Mock()
    threading.Timer(0.1, lambda: sub._commands.put(_Command("ack", tags, done))).start()
    sub._on_revoke(consumer, [TopicPartition("t", 0)])
    assert consumer.commits == [{0: 12}]
    assert sub.reactor.callFromThread.call_args_list[-1].args == (sub._fire, done, None)
    assert sub._tracker.current(other)


def test_the_wait_for_the_client_ends_and_other_commands_keep_their_turn(monkeypatch: Any) -> None:
    from gateway.connectors import kafka_subscription
    from gateway.connectors.kafka_subscription import _Command

    monkeypatch.setattr(kafka_subscription, "HANDOVER_WAIT", 0.2)
    sub = exclusive_subscription(Channel({}))
    consumer = Commits({0: 10})
    sub._on_assign(consumer, [TopicPartition("t", 0)])
    sub._tracker.deliver(0, 10)  # never acknowledged (the bridge dropped it)
    sub._commands.put(_Command("pause"))
    sub._on_revoke(consumer, [TopicPartition("t", 0)])
    assert consumer.commits == []
    assert [command.kind for command in sub._early] == ["pause"]
