"""The persistent SENDs of the broker's hot path: written, shown in their destination's turn, answered.

A SEND posted to the broker (:meth:`EmbeddedBroker.post`) whose message is persistent and goes to
stored queues becomes one :class:`StoredSend`: it counts against the limits while it is written,
takes its place in its destination's line (:class:`~gateway.broker.publication.PublicationOrder`),
and is handed to the store with :meth:`IGroupedWrites.add_then`, which writes the SENDs of one reactor
turn as one operation.  The store's report (:meth:`StoredSend.written`) settles it: once stored it is
shown in its turn and its sender is answered (``settled(None, None)``), or it gives its place up and
its sender gets the error.  No Deferred and no closure is made per SEND; what it costs is this
object and the store's row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.broker.admission import Admission
from gateway.broker.limits import message_size
from gateway.broker.metrics import BrokerMetrics
from gateway.broker.publication import Publication, PublicationOrder
from gateway.broker.queue import MessageQueue
from gateway.message.model import Message

Settled = Callable[[Exception | None, Any], None]
"""How a posted send is answered: ``settled(error, None)``."""

Add = Callable[[list[tuple[str, Message]], Callable[[BaseException | None], None]], None]
"""The store's :meth:`IGroupedWrites.add_then`."""


class StoredSends:
    """What every :class:`StoredSend` of one broker shares: the store, the limits, the lines, the clock."""

    __slots__ = ("add", "admission", "metrics", "now_ms", "order")

    def __init__(self, add: Add, admission: Admission, order: PublicationOrder, metrics: BrokerMetrics,
                 now_ms: Callable[[], int]) -> None:
        self.add = add
        self.admission = admission
        self.order = order
        self.metrics = metrics
        self.now_ms = now_ms

    def post(self, message: Message, targets: list[MessageQueue], entries: list[tuple[str, Message]],
             settled: Settled) -> None:
        """Write ``entries`` (``message`` for its stored queues), then show ``message`` in ``targets``
        in its destination's turn and answer ``settled``."""
        size = message_size(message)
        send = StoredSend(self, message, targets, size, settled)
        admission = self.admission
        admission.arriving += size
        for queue in targets:
            queue.arriving += size
        self.order.enter(message.destination, send)
        admission.writing_started(size)
        self.add(entries, send.written)


class StoredSend(Publication):
    """One persistent SEND between its hand-over to the store and its answer."""

    __slots__ = ("message", "owner", "reply", "size", "targets")

    def __init__(self, owner: StoredSends, message: Message, targets: list[MessageQueue], size: int,
                 settled: Settled) -> None:
        super().__init__()
        self.owner = owner
        self.message = message
        self.targets = targets
        self.size = size
        self.reply = settled

    def written(self, error: BaseException | None) -> None:
        """The store's report: committed (None) or failed."""
        owner = self.owner
        owner.admission.writing_ended(self.size)
        owner.order.settle(self.message.destination, self, error is None)
        if error is not None:
            self.reply(error if isinstance(error, Exception) else Exception(str(error)), None)
        elif self.shown:
            self.reply(None, None)
        else:  # (earlier messages to its destination are still being written)
            self.then = self.answer

    def answer(self) -> None:
        """It is visible: its sender's answer."""
        self.reply(None, None)

    def show(self, stored: bool) -> None:
        owner = self.owner
        arrive(owner.admission, owner.metrics, owner.now_ms, self.message, self.targets, self.size, stored)


def arrive(admission: Admission, metrics: BrokerMetrics, now_ms: Callable[[], int], message: Message,
           targets: list[MessageQueue], size: int, stored: bool) -> None:
    """``message``'s turn came: it stops counting as arriving, and once ``stored`` (and not expired
    meanwhile) it is enqueued in every ``targets`` queue still attached (the broker's sends and
    :class:`StoredSend` alike)."""
    admission.arriving -= size
    for queue in targets:
        queue.arriving -= size
    if not stored:
        return
    if message.expiration and message.is_expired(now_ms()):
        metrics.expired.inc()
        return
    metrics.enqueued.count += 1
    for queue in targets:
        if not queue.detached:  # (a subscriber that left, a subscription dropped meanwhile)
            queue.enqueue(message, size)
