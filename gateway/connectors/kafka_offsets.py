"""Which Kafka offsets may be committed, given the deliveries acknowledged so far.

A subscription delivers a partition's records in offset order; acknowledgements
come back in any order.  :class:`PartitionOffsets` commits only up to the
highest *contiguous* acknowledged delivery: offset ``o + 1`` where ``o`` is
the last record in delivery order before the first unacknowledged one.  It
never commits the consumer's position.  Offsets may have gaps (transaction
markers, compaction), so contiguity is over deliveries, not over numbers.

A partition taken away by a rebalance keeps its state (:meth:`OffsetTracker.revoke`):
the client still holds its deliveries, they still count against ``prefetch``, and
acknowledging them is remembered.  When the partition comes back and the group's
committed offset has not moved past what this subscription's client acknowledged,
nobody else consumed further and the state is resumed: the deliveries the client
holds stay valid and are not handed out again.  Otherwise it starts afresh, and the offsets
delivered before are still known, so what comes again is flagged as a redelivery.

Pure bookkeeping: no threads, no Kafka client; the polling thread owns one
:class:`OffsetTracker` per subscription.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DeliveryTag:
    """The opaque tag of one delivery: its partition, offset and the partition's
    generation (bumped on seek and rebalance, so stale tags are ignored)."""

    partition: int
    offset: int
    generation: int


@dataclass(slots=True)
class PartitionOffsets:
    """Deliveries and acknowledgements of one partition."""

    generation: int = 0
    delivered: deque[int] = field(default_factory=deque)
    generations: dict[int, int] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)
    commit_point: int | None = None
    committed: int | None = None
    highest_delivered: int = -1

    @property
    def unacked(self) -> int:
        """Deliveries waiting for an acknowledgement."""
        return len(self.delivered) - len(self.acked)

    def deliver(self, offset: int) -> int:
        """Record that the record at ``offset`` was handed out; returns its generation."""
        self.delivered.append(offset)
        self.generations[offset] = self.generation
        self.highest_delivered = max(self.highest_delivered, offset)
        return self.generation

    def outstanding(self, offset: int, generation: int) -> bool:
        """Whether the delivery of ``offset`` in ``generation`` awaits an acknowledgement."""
        return self.generations.get(offset) == generation and offset not in self.acked

    def ack(self, offset: int, generation: int) -> bool:
        """Acknowledge a delivery; True if it was outstanding."""
        if not self.outstanding(offset, generation):
            return False
        self.acked.add(offset)
        while self.delivered and self.delivered[0] in self.acked:
            done = self.delivered.popleft()
            self.acked.discard(done)
            del self.generations[done]
            self.commit_point = done + 1
        return True

    def rewind(self, offset: int) -> int:
        """Forget deliveries at or after ``offset`` (they will be redelivered).

        Returns how many outstanding deliveries were dropped; bumps the generation.
        """
        dropped = [o for o in self.delivered if o >= offset]
        unacked = sum(1 for o in dropped if o not in self.acked)
        self.delivered = deque(o for o in self.delivered if o < offset)
        self.acked = {o for o in self.acked if o < offset}
        for gone in dropped:
            self.generations.pop(gone, None)
        self.generation += 1
        return unacked

    def holds(self, offset: int) -> bool:
        """Whether ``offset`` was delivered in this generation and is outstanding or
        acknowledged: fetched again (after a resumed assignment), it is not handed out."""
        return offset in self.generations or (self.commit_point is not None and offset < self.commit_point)

    def pending_commit(self) -> int | None:
        """The offset to commit now, or None when nothing new is acknowledged."""
        if self.commit_point is None or self.commit_point == self.committed:
            return None
        return self.commit_point


def _known(offset: int | None) -> int:
    """A committed offset, with "none" (None, or Kafka's negative logical offsets) as -1."""
    return -1 if offset is None or offset < 0 else offset


class OffsetTracker:
    """Per-partition bookkeeping of one subscription.

    :ivar partitions: the partitions assigned now.
    :ivar revoked: partitions a rebalance took away, kept until they come back.
    """

    def __init__(self) -> None:
        self.partitions: dict[int, PartitionOffsets] = {}
        self.revoked: dict[int, PartitionOffsets] = {}
        self._generations: dict[int, int] = {}

    @property
    def unacked(self) -> int:
        """Outstanding deliveries over all partitions, revoked ones included (the client still holds them)."""
        return sum(p.unacked for p in self.partitions.values()) + sum(p.unacked for p in self.revoked.values())

    def assign(self, partition: int, committed: int | None = None, *, resume: bool = True) -> bool:
        """Track ``partition`` (a rebalance gave it to us); ``committed`` is the group's
        committed offset for it (None or negative: none); ``resume=False`` when it is unknown.

        Returns True when the state it had before a revocation is resumed: the group's
        committed offset is between this subscription's last commit and its acknowledged
        point (nobody consumed past what its client acknowledged), so its outstanding
        deliveries stay valid.  Otherwise the partition starts afresh in a new generation
        (earlier tags become stale) that still knows which offsets were delivered before.
        """
        previous = self.revoked.pop(partition, None)
        if resume and previous is not None:
            last = _known(previous.committed)
            acked = previous.commit_point if previous.commit_point is not None else last
            if last <= _known(committed) <= acked:
                if _known(committed) > last:
                    previous.committed = committed
                self.partitions[partition] = previous
                return True
        generation = self._generations.get(partition, -1) + 1
        self._generations[partition] = generation
        state = PartitionOffsets(generation=generation)
        if _known(committed) >= 0:
            state.committed = committed
        if previous is not None:
            state.highest_delivered = previous.highest_delivered
        self.partitions[partition] = state
        return False

    def revoke(self, partition: int) -> None:
        """``partition`` was taken away: keep its state until it comes back (see :meth:`assign`)."""
        state = self.partitions.pop(partition, None)
        if state is not None:
            self.revoked[partition] = state

    def _state(self, partition: int) -> PartitionOffsets | None:
        state = self.partitions.get(partition)
        return state if state is not None else self.revoked.get(partition)

    def deliver(self, partition: int, offset: int) -> DeliveryTag:
        """Record a delivery; returns its tag."""
        state = self.partitions.get(partition)
        if state is None:
            self.assign(partition)
            state = self.partitions[partition]
        return DeliveryTag(partition, offset, state.deliver(offset))

    def delivered_before(self, partition: int, offset: int) -> None:
        """Another member delivered ``partition`` up to ``offset`` (its published mark): what
        comes again up to there is flagged as a redelivery."""
        state = self.partitions.get(partition)
        if state is not None and offset > state.highest_delivered:
            state.highest_delivered = offset

    def is_redelivery(self, partition: int, offset: int) -> bool:
        """Whether ``offset`` was handed out before by this subscription."""
        state = self.partitions.get(partition)
        return state is not None and offset <= state.highest_delivered

    def holds(self, partition: int, offset: int) -> bool:
        """Whether the client already holds (or acknowledged) the delivery of ``offset``
        in the current generation: fetched again, it is skipped."""
        state = self.partitions.get(partition)
        return state is not None and state.holds(offset)

    def ack(self, tag: DeliveryTag) -> bool:
        """Acknowledge one delivery; False for a stale or repeated tag."""
        state = self._state(tag.partition)
        return state is not None and state.ack(tag.offset, tag.generation)

    def rewind(self, partition: int, offset: int) -> int:
        """Forget deliveries from ``offset`` on; returns how many were outstanding."""
        state = self._state(partition)
        if state is None:
            return 0
        dropped = state.rewind(offset)
        self._generations[partition] = state.generation
        return dropped

    def current(self, tag: DeliveryTag) -> bool:
        """Whether ``tag`` is an outstanding delivery of the current generation."""
        state = self._state(tag.partition)
        return state is not None and state.outstanding(tag.offset, tag.generation)

    def to_commit(self) -> dict[int, int]:
        """Partition -> offset to commit, for assigned partitions with new acknowledgements."""
        result: dict[int, int] = {}
        for partition, state in self.partitions.items():
            point = state.pending_commit()
            if point is not None:
                result[partition] = point
        return result

    def committed(self, offsets: dict[int, int]) -> None:
        """Record that ``offsets`` were committed."""
        for partition, offset in offsets.items():
            state = self.partitions.get(partition)
            if state is not None:
                state.committed = offset
