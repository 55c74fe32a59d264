"""The deliveries a bridge holds until they make a batch: ``max_batch_size`` or ``max_batch_time``.

:class:`Batcher` owns the pending deliveries and the batch timer; it tells its owner through
:class:`BatchOwner` (one call, :meth:`~BatchOwner.batch_due`) that a batch short of
``max_batch_size`` waited ``max_batch_time``.  It sends nothing and knows no connector.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from gateway.message.model import Message

Delivery = tuple[Any, Message, Any]
"""``(consumer, message, tag)``: one delivery of a source subscription."""


class BatchOwner(Protocol):
    """What a :class:`Batcher` tells its bridge."""

    def batch_due(self) -> None:
        """The oldest pending delivery waited ``max_batch_time``: send what is pending."""


class Batcher:
    """Pending deliveries and the batch timer of one bridge.

    :param size: ``max_batch_size``.
    :param wait_ms: ``max_batch_time`` (``-1`` or 0: only a full batch, or a due one, goes).
    """

    def __init__(self, owner: BatchOwner, clock: IReactorTime, size: int, wait_ms: int) -> None:
        self.owner = owner
        self.clock = clock
        self.size = size
        self.wait_ms = wait_ms
        self.pending: list[Delivery] = []
        self.due = False
        """A batch short of :attr:`size` waited long enough: it goes as it is."""
        self._timer: IDelayedCall | None = None

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, delivery: Delivery, *, timed: bool = True) -> bool:
        """Hold ``delivery``; True when a full batch is pending.  ``timed``: start the batch timer
        if none runs (False while the subscription is not yet the bridge's)."""
        self.pending.append(delivery)
        if len(self.pending) >= self.size:
            return True
        if timed and not self.due:
            self.arm()
        return False

    def ready(self) -> bool:
        """A batch can go: a full one, or a due one."""
        return bool(self.pending) and (len(self.pending) >= self.size or self.due)

    def take(self) -> list[Delivery]:
        """The next batch (at most :attr:`size` deliveries, the oldest first)."""
        batch, self.pending = self.pending[:self.size], self.pending[self.size:]
        self.due = False
        self.disarm()
        return batch

    def arm(self) -> None:
        """Start the batch timer when deliveries wait and none runs."""
        if self.pending and self._timer is None and self.wait_ms > 0:
            self._timer = self.clock.callLater(self.wait_ms / 1000.0, self._time_up)

    def disarm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def settle(self) -> None:
        """After a round of batches: nothing left is overdue when nothing is pending."""
        if not self.pending:
            self.due = False

    def drop_from(self, consumer: Any) -> None:
        """Forget the deliveries of ``consumer`` (its subscription is gone: the source has them again)."""
        self.pending = [entry for entry in self.pending if entry[0] is not consumer]
        if not self.pending:
            self.clear()

    def clear(self) -> None:
        """Forget every delivery; no batch is due and none is timed.

        A stale :attr:`due` would keep the next subscription's deliveries from starting
        their batch timer, and a final batch short of ``max_batch_size`` (the end of a
        stream redelivered after a reconnection) would never be sent."""
        self.pending = []
        self.due = False
        self.disarm()

    def _time_up(self) -> None:
        self._timer = None
        self.due = True
        self.owner.batch_due()
