"""Which Kafka offsets may be committed, given the deliveries acknowledged so far.

A subscription delivers a partition's records in offset order; acknowledgements
come back in any order.  :class:`PartitionOffsets` commits only up to the
highest *contiguous* acknowledged delivery: offset ``o + 1`` where ``o`` is
the last record in delivery order before the first unacknowledged one.  It
never commits the consumer's position.  Offsets may have gaps (transaction
markers, compaction), so contiguity is over deliveries, not over numbers.

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

    def pending_commit(self) -> int | None:
        """The offset to commit now, or None when nothing new is acknowledged."""
        if self.commit_point is None or self.commit_point == self.committed:
            return None
        return self.commit_point


class OffsetTracker:
    """Per-partition bookkeeping of one subscription."""

    def __init__(self) -> None:
        self.partitions: dict[int, PartitionOffsets] = {}
        self._generations: dict[int, int] = {}

    @property
    def unacked(self) -> int:
        """Outstanding deliveries over all partitions."""
        return sum(p.unacked for p in self.partitions.values())

    def assign(self, partition: int) -> None:
        """Start tracking ``partition`` (after a rebalance gave it to us)."""
        generation = self._generations.get(partition, -1) + 1
        self._generations[partition] = generation
        self.partitions[partition] = PartitionOffsets(generation=generation)

    def revoke(self, partition: int) -> None:
        """Stop tracking ``partition``: its outstanding tags become stale."""
        self.partitions.pop(partition, None)

    def deliver(self, partition: int, offset: int) -> DeliveryTag:
        """Record a delivery; returns its tag."""
        state = self.partitions.get(partition)
        if state is None:
            self.assign(partition)
            state = self.partitions[partition]
        return DeliveryTag(partition, offset, state.deliver(offset))

    def is_redelivery(self, partition: int, offset: int) -> bool:
        """Whether ``offset`` was handed out before in this assignment."""
        state = self.partitions.get(partition)
        return state is not None and offset <= state.highest_delivered

    def ack(self, tag: DeliveryTag) -> bool:
        """Acknowledge one delivery; False for a stale or repeated tag."""
        state = self.partitions.get(tag.partition)
        return state is not None and state.ack(tag.offset, tag.generation)

    def rewind(self, partition: int, offset: int) -> int:
        """Forget deliveries from ``offset`` on; returns how many were outstanding."""
        state = self.partitions.get(partition)
        if state is None:
            return 0
        dropped = state.rewind(offset)
        self._generations[partition] = state.generation
        return dropped

    def current(self, tag: DeliveryTag) -> bool:
        """Whether ``tag`` is an outstanding delivery of the current generation."""
        state = self.partitions.get(tag.partition)
        return state is not None and state.outstanding(tag.offset, tag.generation)

    def to_commit(self) -> dict[int, int]:
        """Partition -> offset to commit, for partitions with new acknowledgements."""
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
