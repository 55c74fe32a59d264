"""A message queue with its consumers: ordering, dispatch, acks, redelivery.

:class:`MessageQueue` holds pending messages ordered by priority (higher
first) then arrival, and serves its :class:`QueueSubscription` consumers in
turn, each up to its prefetch window (``client`` modes) or until it is
paused by transport back-pressure (``auto``).  Messages a consumer's
selector refuses stay for the others.  A queue is also the private backlog
of each topic subscriber, so the same code serves both.

The queue knows nothing of stores or dead letters: it calls back into its
:class:`QueueOwner` (the broker) for those.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from zope.interface import implementer

from gateway.deferreds import gather
from gateway.interfaces import IConsumer, ISubscription, ITransactionalAcks, SubscriptionSpec
from gateway.message.model import Message

Predicate = Callable[[Message], bool]


class QueueOwner(Protocol):
    """What a queue needs from the broker that owns it."""

    def now_ms(self) -> int: ...

    def consumed(self, queue: MessageQueue, message: Message) -> Deferred[None]:
        """``message`` left ``queue`` for good (acked, auto-acked)."""

    def expired(self, queue: MessageQueue, message: Message) -> None:
        """``message`` expired in ``queue`` and was dropped."""

    def delivered(self, queue: MessageQueue, message: Message) -> None:
        """``message`` was handed to a consumer that must acknowledge it."""

    def redelivering(self, queue: MessageQueue, message: Message) -> bool:
        """``message`` (already marked redelivered, count raised) goes back to
        ``queue``; return False if the owner dead-lettered it instead."""

    def subscription_closed(
        self, queue: MessageQueue, subscription: QueueSubscription, delete: bool
    ) -> Deferred[None] | None:
        """A consumer left the queue; ``delete`` if it asked to unsubscribe.
        Returns a Deferred when that leaves a write to wait for (a durable
        subscription's deletion)."""


class MessageQueue:
    """Pending messages of one queue (or one topic subscriber) and its consumers.

    :ivar name: the destination (``/queue/a``) or topic subscriber's topic.
    :ivar key: the store key; durable subscriptions have their own.
    :ivar filter: a predicate a message must pass to enter (topic subscribers'
        selectors are applied here, at publish time).
    """

    log = Logger()

    def __init__(
        self, owner: QueueOwner, name: str, key: str, *, filter: Predicate | None = None, durable: bool = False
    ) -> None:
        self.owner = owner
        self.name = name
        self.key = key
        self.filter = filter
        self.durable = durable
        self.selector_text: str | None = None
        self._heap: list[tuple[int, int, Message]] = []
        self._seq = itertools.count()
        self.consumers: list[QueueSubscription] = []
        self._rr = 0
        self._dispatching = False
        self._again = False
        self.enqueued = 0
        """Messages that entered this queue since start (redeliveries not counted again)."""
        self.dequeued = 0
        """Messages consumers acknowledged (or auto-acknowledged) from this queue since start."""

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def inflight(self) -> int:
        """Deliveries handed to consumers and not yet acknowledged."""
        return sum(len(consumer.unacked) + len(consumer.held) for consumer in self.consumers)

    def accepts(self, message: Message) -> bool:
        """Whether ``message`` passes this queue's filter."""
        return self.filter is None or self.filter(message)

    def enqueue(self, message: Message) -> None:
        """Add a message and try to dispatch it."""
        heapq.heappush(self._heap, (-message.priority, next(self._seq), message))
        self.enqueued += 1
        if self.consumers:
            self.dispatch()

    def requeue(self, message: Message, seq: int) -> None:
        """Put a message back at its original place in the order."""
        heapq.heappush(self._heap, (-message.priority, seq, message))

    def messages(self) -> list[Message]:
        """Pending messages in dispatch order (for inspection and tests)."""
        return [entry[2] for entry in sorted(self._heap)]

    def purge_expired(self) -> int:
        """Drop every expired pending message; returns how many."""
        now = self.owner.now_ms()
        keep = []
        dropped = 0
        for entry in self._heap:
            if entry[2].is_expired(now):
                dropped += 1
                self.owner.expired(self, entry[2])
            else:
                keep.append(entry)
        if dropped:
            heapq.heapify(keep)
            self._heap = keep
        return dropped

    def drain(self) -> list[Message]:
        """Remove and return every pending message (queue deletion)."""
        drained = [entry[2] for entry in sorted(self._heap)]
        self._heap = []
        return drained

    def remove_pending(self, message_ids: set[str] | None = None) -> list[Message]:
        """Take pending messages out of the queue without delivering them: those whose
        id is in ``message_ids`` (None: all), in dispatch order.  In-flight ones stay."""
        if message_ids is None:
            return self.drain()
        keep = [entry for entry in self._heap if entry[2].message_id not in message_ids]
        if len(keep) == len(self._heap):
            return []
        taken = [entry[2] for entry in sorted(self._heap) if entry[2].message_id in message_ids]
        heapq.heapify(keep)
        self._heap = keep
        return taken

    def add_consumer(self, subscription: QueueSubscription) -> None:
        self.consumers.append(subscription)
        self.dispatch()

    def remove_consumer(self, subscription: QueueSubscription) -> None:
        if subscription in self.consumers:
            self.consumers.remove(subscription)
            self._rr = 0

    def dispatch(self) -> None:
        """Hand pending messages to consumers that have room for them."""
        if self._dispatching:
            self._again = True
            return
        self._dispatching = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._dispatch_once()
        finally:
            self._dispatching = False

    def _dispatch_once(self) -> None:
        heap = self._heap
        consumers = self.consumers
        now = self.owner.now_ms()
        skipped: list[tuple[int, int, Message]] = []
        try:
            while heap:
                ready = [consumer for consumer in consumers if consumer.has_credit()]
                if not ready:
                    return
                entry = heapq.heappop(heap)
                message = entry[2]
                if message.expiration and message.is_expired(now):
                    self.owner.expired(self, message)
                    continue
                target = self._pick(ready, message)
                if target is None:
                    skipped.append(entry)
                    continue
                target.take(entry[1], message)
        finally:
            for entry in skipped:
                heapq.heappush(heap, entry)

    def _pick(self, ready: list[QueueSubscription], message: Message) -> QueueSubscription | None:
        count = len(ready)
        start = self._rr % count
        for offset in range(count):
            consumer = ready[(start + offset) % count]
            if consumer.selector is None or consumer.selector(message):
                self._rr = start + offset + 1
                return consumer
        return None


@implementer(ISubscription, ITransactionalAcks)
class QueueSubscription:
    """One consumer of a :class:`MessageQueue` (ISubscription).

    Delivery tags are the queue's sequence numbers.  In ``auto`` mode a
    delivery is consumed as it is handed over; otherwise it waits in
    :attr:`unacked` until acked, nacked or the subscription closes.
    Deliveries acknowledged inside an open transaction move to :attr:`held`
    (:meth:`hold`): they free their prefetch credit, and closing the
    subscription leaves them for the transaction to settle (ack at COMMIT,
    nack at ABORT).
    """

    log = Logger()

    def __init__(
        self, queue: MessageQueue, spec: SubscriptionSpec, consumer: IConsumer, selector: Predicate | None
    ) -> None:
        self.queue = queue
        self.spec = spec
        self.consumer = consumer
        self.selector = selector
        self.auto = spec.ack_mode == "auto"
        self.prefetch = max(1, spec.prefetch)
        self.paused = False
        self.closed = False
        self.unacked: dict[int, Message] = {}
        self.held: dict[int, Message] = {}

    def has_credit(self) -> bool:
        if self.paused or self.closed:
            return False
        return self.auto or len(self.unacked) < self.prefetch

    def take(self, seq: int, message: Message) -> None:
        """Deliver ``message`` (queue sequence ``seq``) to the consumer."""
        if self.auto:
            if self.consumer.deliver(message, seq) is False:
                self._refused(seq, message)
                return
            self.queue.dequeued += 1
            self.queue.owner.consumed(self.queue, message).addErrback(self._auto_ack_failed)
            return
        self.unacked[seq] = message
        if self.consumer.deliver(message, seq) is False:
            if self.unacked.pop(seq, None) is not None:
                self._refused(seq, message)
            return
        if seq in self.unacked:
            self.queue.owner.delivered(self.queue, message)

    def _refused(self, seq: int, message: Message) -> None:
        """The consumer could not take the message (its connection is closing or
        its transport is full, the GlassFish rule): it was not delivered, so it
        goes back to its place uncounted, and this consumer waits for :meth:`resume`."""
        self.paused = True
        self.queue.requeue(message, seq)

    def _auto_ack_failed(self, failure: Any) -> None:
        self.log.warn(
            "auto-acknowledged message not removed from the store, it will be delivered again after a "
            "restart: {error}",
            error=failure.getErrorMessage(),
        )

    def ack(self, tags: list[Any]) -> Deferred[Any]:
        owner = self.queue.owner
        writes = []
        for tag in tags:
            message = self.unacked.pop(tag, None) or self.held.pop(tag, None)
            if message is not None:
                self.queue.dequeued += 1
                writes.append(owner.consumed(self.queue, message))
        self.queue.dispatch()
        return gather(writes)

    def nack(self, tags: list[Any]) -> Deferred[Any]:
        for tag in tags:
            message = self.unacked.pop(tag, None) or self.held.pop(tag, None)
            if message is not None:
                self._redeliver(tag, message)
        self.queue.dispatch()
        return succeed(None)

    def hold(self, tags: list[Any]) -> None:
        """:class:`ITransactionalAcks`: the deliveries were acknowledged (or
        rejected) in an open transaction: they free their prefetch credit now
        and stay this subscription's, even after it closes, until :meth:`ack`
        (COMMIT) or :meth:`nack` (ABORT) settles them."""
        for tag in tags:
            message = self.unacked.pop(tag, None)
            if message is not None:
                self.held[tag] = message
        if not self.closed:
            self.queue.dispatch()

    def _redeliver(self, seq: int, message: Message) -> None:
        again = message.copy()
        again.redelivered = True
        again.redelivery_count = message.redelivery_count + 1
        if self.queue.owner.redelivering(self.queue, again):
            self.queue.requeue(again, seq)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            self.queue.dispatch()

    def close(self) -> Deferred[None]:
        return self._end(delete=False)

    def unsubscribe(self) -> Deferred[None]:
        return self._end(delete=True)

    def _end(self, delete: bool) -> Deferred[None]:
        if self.closed:
            return succeed(None)
        self.closed = True
        self.queue.remove_consumer(self)
        unacked, self.unacked = self.unacked, {}
        for seq, message in unacked.items():
            self._redeliver(seq, message)
        ended = self.queue.owner.subscription_closed(self.queue, self, delete)
        if self.queue.consumers:
            self.queue.dispatch()
        return ended if ended is not None else succeed(None)

