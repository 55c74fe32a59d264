"""Exclusive consumers of a queue (ActiveMQ's ``activemq.exclusive:true``).

While a queue has an exclusive consumer, the first of them (in subscription order) is its
owner and gets every message; the others, exclusive or not, get none.  When the owner
leaves, its unacknowledged messages go back to their places (flagged redelivered) and the
next exclusive consumer takes over; with none left, the queue serves all its consumers in
turn again.  This module only chooses; :class:`~gateway.broker.queue.MessageQueue` asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Consumer(Protocol):
    """What the choice needs of a queue's consumer."""

    @property
    def exclusive(self) -> bool:
        """Whether it asked to be the queue's exclusive consumer."""


C = TypeVar("C", bound=Consumer)


def exclusive_owner(consumers: Sequence[C]) -> C | None:
    """The consumer that gets every message of the queue (None: they share them)."""
    for consumer in consumers:
        if consumer.exclusive:
            return consumer
    return None
