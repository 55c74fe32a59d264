"""The delivered marks of a fleet's consumer group (gateway.connectors.kafka_delivered) and how the
offset bookkeeping flags what another member delivered (OffsetTracker.delivered_before)."""

from __future__ import annotations

from gateway.connectors.kafka_delivered import DeliveredMarks, mark_key, parse_marks
from gateway.connectors.kafka_offsets import OffsetTracker


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
