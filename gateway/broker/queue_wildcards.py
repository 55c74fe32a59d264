"""Wildcard queue subscriptions (ActiveMQ's): ``SUBSCRIBE /queue/orders.>`` consumes from every queue,
existing or made later, whose name the pattern matches (:mod:`gateway.broker.wildcards`).

Owns :class:`WildcardQueueSubscription`, one consumer made of a :class:`QueueSubscription` on each
matching queue (so each message still goes to one consumer of its queue, in turn with that queue's
plain consumers, with its acks, NACKs, transactions, selector and paging), and
:class:`QueueWildcards`, the live ones by pattern, told by :mod:`gateway.broker.destinations`
when a queue is made.  Delivery tags are ``(queue name, sequence)``; the prefetch counts the
deliveries unacknowledged on all its queues together, as ActiveMQ's does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from gateway.broker.queue import MessageQueue, Predicate, QueueSubscription
from gateway.broker.wildcards import matches
from gateway.deferreds import gather
from gateway.interfaces import IConsumer, IImmediateAcks, ISubscription, ITransactionalAcks, SubscriptionSpec
from gateway.message.model import Message


@implementer(IConsumer)
class _QueueTagger:
    """The consumer of one matching queue: tags each delivery with its queue's name."""

    def __init__(self, parent: WildcardQueueSubscription, name: str) -> None:
        self.parent = parent
        self.name = name

    def deliver(self, message: Message, tag: Any) -> bool | None:
        if message.destination != self.name:
            # (a virtual topic's copy names its topic: the consumer is handed it under its consumer queue's
            # name, which a plain subscription to that queue shows too; the queue keeps its own)
            message = message.copy()
            message.destination = self.name
        delivered: bool | None = self.parent.consumer.deliver(message, (self.name, tag))
        return delivered

    def subscription_failed(self, reason: Exception) -> None:
        self.parent.lost(self.name)  # (that queue was deleted: the others go on)


class _Part(QueueSubscription):
    """The wildcard subscription's consumer of one queue: its credit is the whole subscription's."""

    def __init__(self, parent: WildcardQueueSubscription, queue: MessageQueue) -> None:
        super().__init__(queue, parent.spec, _QueueTagger(parent, queue.name), parent.selector)
        self.parent = parent

    def has_credit(self) -> bool:
        if self.paused or self.closed:
            return False
        return self.auto or self.parent.unacked_count() < self.prefetch


@implementer(ISubscription, IImmediateAcks, ITransactionalAcks)
class WildcardQueueSubscription:
    """A SUBSCRIBE to a wildcard queue pattern: a :class:`QueueSubscription` per matching queue."""

    def __init__(self, registry: QueueWildcards, spec: SubscriptionSpec, consumer: IConsumer,
                 selector: Predicate | None) -> None:
        self.registry = registry
        self.spec = spec
        self.pattern = spec.destination
        self.consumer = consumer
        self.selector = selector
        self.parts: dict[str, _Part] = {}
        self.closed = False

    def attach(self, queue: MessageQueue) -> None:
        """Consume from ``queue`` too (it matches the pattern)."""
        if not self.closed and queue.name not in self.parts:
            part = self.parts[queue.name] = _Part(self, queue)
            queue.add_consumer(part)

    def lost(self, name: str) -> None:
        """The queue ``name`` was deleted: stop consuming from it."""
        part = self.parts.pop(name, None)
        if part is not None:
            part.closed = True

    def unacked_count(self) -> int:
        return sum(len(part.unacked) for part in self.parts.values())

    def _by_queue(self, tags: Iterable[Any]) -> dict[str, list[Any]]:
        grouped: dict[str, list[Any]] = {}
        for name, seq in tags:
            grouped.setdefault(name, []).append(seq)
        return grouped

    def _dispatch(self) -> None:
        """Credit was freed: every matching queue may deliver again (one prefetch for all)."""
        for part in list(self.parts.values()):
            if not part.closed:
                part.queue.dispatch()

    def ack(self, tags: list[Any]) -> Deferred[Any]:
        done = self.acknowledge(tags)
        return done if done is not None else succeed([])

    def acknowledge(self, tags: list[Any]) -> Deferred[Any] | None:
        writes = []
        for name, seqs in self._by_queue(tags).items():
            part = self.parts.get(name)  # (kept after close: a transaction settles what it held)
            if part is not None:
                done = part.acknowledge(seqs)
                if done is not None:
                    writes.append(done)
        self._dispatch()
        return gather(writes) if writes else None

    def nack(self, tags: list[Any]) -> Deferred[Any]:
        for name, seqs in self._by_queue(tags).items():
            part = self.parts.get(name)  # (kept after close: a transaction settles what it held)
            if part is not None:
                part.nack(seqs)
        self._dispatch()
        return succeed(None)

    def hold(self, tags: list[Any]) -> None:
        for name, seqs in self._by_queue(tags).items():
            part = self.parts.get(name)
            if part is not None:
                part.hold(seqs)
        if not self.closed:
            self._dispatch()

    def pause(self) -> None:
        for part in self.parts.values():
            part.pause()

    def resume(self) -> None:
        for part in list(self.parts.values()):
            part.resume()

    def close(self) -> Deferred[None]:
        return self.unsubscribe()

    def unsubscribe(self) -> Deferred[None]:
        if self.closed:
            return succeed(None)
        self.closed = True
        self.registry.remove(self)
        ended = [part.close() for part in self.parts.values()]
        return gather(ended).addCallback(lambda _: None)


class QueueWildcards:
    """The live wildcard queue subscriptions; a queue made later joins those it matches."""

    def __init__(self) -> None:
        self.subscriptions: list[WildcardQueueSubscription] = []

    def __bool__(self) -> bool:
        return bool(self.subscriptions)

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer, selector: Predicate | None,
                  queues: Iterable[MessageQueue]) -> WildcardQueueSubscription:
        """A new wildcard subscription, consuming from the matching ``queues`` at once."""
        subscription = WildcardQueueSubscription(self, spec, consumer, selector)
        self.subscriptions.append(subscription)
        for queue in list(queues):
            if matches(subscription.pattern, queue.name):
                subscription.attach(queue)
        return subscription

    def created(self, queue: MessageQueue) -> None:
        """``queue`` was just made: the subscriptions whose pattern matches consume from it too."""
        for subscription in self.subscriptions:
            if matches(subscription.pattern, queue.name):
                subscription.attach(queue)

    def remove(self, subscription: WildcardQueueSubscription) -> None:
        if subscription in self.subscriptions:
            self.subscriptions.remove(subscription)
