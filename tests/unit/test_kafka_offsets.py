"""Committable offsets: only up to the highest contiguous acknowledged delivery."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.connectors.kafka_offsets import OffsetTracker


def test_out_of_order_acks_commit_only_contiguous_prefix() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tags = [tracker.deliver(0, offset) for offset in range(5)]
    assert tracker.unacked == 5
    assert tracker.ack(tags[1]) and tracker.ack(tags[2])
    assert tracker.to_commit() == {}  # offset 0 is still unacknowledged
    assert tracker.ack(tags[0])
    assert tracker.to_commit() == {0: 3}
    tracker.committed({0: 3})
    assert tracker.to_commit() == {}
    assert tracker.unacked == 2


def test_gaps_in_offsets_are_contiguous_deliveries() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    first, second = tracker.deliver(0, 10), tracker.deliver(0, 12)  # 11 was a transaction marker
    tracker.ack(second)
    assert tracker.to_commit() == {}
    tracker.ack(first)
    assert tracker.to_commit() == {0: 13}


def test_partitions_are_independent() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tracker.assign(1)
    a = tracker.deliver(0, 0)
    b = tracker.deliver(1, 7)
    tracker.ack(b)
    assert tracker.to_commit() == {1: 8}
    tracker.ack(a)
    assert tracker.to_commit() == {0: 1, 1: 8}


def test_rewind_drops_outstanding_and_stale_tags_are_ignored() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tags = [tracker.deliver(0, offset) for offset in range(4)]
    tracker.ack(tags[0])
    assert tracker.rewind(0, 2) == 2  # offsets 2 and 3 will come again
    assert tracker.is_redelivery(0, 2)
    assert not tracker.ack(tags[3])  # stale: a redelivery will bring a new tag
    assert tracker.ack(tags[1])  # before the rewind point: still valid
    again = tracker.deliver(0, 2)
    assert tracker.ack(again)
    assert tracker.to_commit() == {0: 3}


def test_revoked_partition_resumes_when_the_group_committed_nothing_meanwhile() -> None:
    tracker = OffsetTracker()
    tracker.assign(0, -1001)
    tags = [tracker.deliver(0, offset) for offset in range(3)]
    tracker.revoke(0)
    assert tracker.unacked == 3  # the client still holds them: they count against prefetch
    assert tracker.ack(tags[0])  # an ack while revoked is kept ...
    assert tracker.to_commit() == {}  # ... but not committed: the partition is not ours
    assert tracker.assign(0, -1001)  # back, nobody committed: resumed
    assert tracker.to_commit() == {0: 1}
    assert all(tracker.holds(0, offset) for offset in range(3))  # fetched again: skipped
    assert not tracker.holds(0, 3)
    assert tracker.ack(tags[1]) and tracker.ack(tags[2])
    assert tracker.to_commit() == {0: 3}
    assert tracker.unacked == 0


def test_revoked_partition_starts_afresh_when_the_group_moved_on() -> None:
    tracker = OffsetTracker()
    tracker.assign(0, 5)
    tags = [tracker.deliver(0, offset) for offset in range(5, 9)]
    tracker.revoke(0)
    assert not tracker.assign(0, 6)  # another member committed offset 5 meanwhile
    assert tracker.unacked == 0
    assert not tracker.ack(tags[2])  # stale: what is fetched again brings new tags
    assert not tracker.holds(0, 7)
    assert tracker.is_redelivery(0, 8) and not tracker.is_redelivery(0, 9)
    again = tracker.deliver(0, 6)
    assert tracker.ack(again)
    assert tracker.to_commit() == {0: 7}


def test_nack_of_a_revoked_delivery_makes_it_come_again() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tags = [tracker.deliver(0, offset) for offset in range(3)]
    tracker.revoke(0)
    assert tracker.current(tags[1])
    assert tracker.rewind(0, 1) == 2
    assert tracker.assign(0)  # resumed: offset 0 is still held, 1 and 2 are not
    assert tracker.holds(0, 0) and not tracker.holds(0, 1)
    assert tracker.is_redelivery(0, 1)
    assert tracker.ack(tags[0]) and not tracker.ack(tags[2])


def test_repeated_ack_is_harmless() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tag = tracker.deliver(0, 0)
    assert tracker.ack(tag)
    assert not tracker.ack(tag)
    assert tracker.to_commit() == {0: 1}


@given(st.permutations(list(range(12))), st.integers(min_value=0, max_value=12))
def test_commit_point_is_first_unacked(order: list[int], how_many: int) -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tags = [tracker.deliver(0, offset * 2) for offset in range(12)]  # even offsets: gaps everywhere
    acked = set(order[:how_many])
    for index in order[:how_many]:
        tracker.ack(tags[index])
    first_unacked = next((i for i in range(12) if i not in acked), 12)
    expected = {} if first_unacked == 0 else {0: (first_unacked - 1) * 2 + 1}
    assert tracker.to_commit() == expected
    assert tracker.unacked == 12 - how_many


def test_unknown_committed_offset_never_resumes() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tag = tracker.deliver(0, 0)
    tracker.revoke(0)
    assert not tracker.assign(0, None, resume=False)  # cannot tell whether someone consumed it
    assert not tracker.ack(tag) and tracker.is_redelivery(0, 0)


def test_resumes_when_the_group_committed_no_further_than_the_client_acknowledged() -> None:
    tracker = OffsetTracker()
    tracker.assign(0)
    tags = [tracker.deliver(0, offset) for offset in range(4)]
    tracker.revoke(0)
    tracker.ack(tags[0])
    tracker.ack(tags[1])  # acknowledged up to offset 2 while the partition was elsewhere
    assert tracker.assign(0, 1)  # another member committed 1: within what our client acknowledged
    assert tracker.to_commit() == {0: 2}
    assert tracker.ack(tags[2]) and tracker.to_commit() == {0: 3}
    tracker.committed({0: 3})
    tracker.revoke(0)
    assert not tracker.assign(0, 4)  # committed past the outstanding offset 3: start afresh
    assert not tracker.ack(tags[3])
