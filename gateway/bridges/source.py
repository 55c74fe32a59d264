"""A bridge's side of the source: one subscription at a time, its deliveries and acknowledgements.

:class:`BridgeSource` subscribes (``client-individual``, strict acknowledgements, the bridge's
selector, prefetch and durable name; a transacted subscription when the source provides
:class:`~gateway.interfaces.ILocalTransactionSource`), acknowledges, pauses and closes.  Each
(re)subscription gets its own :class:`SourceConsumer`, so deliveries and failures of a
subscription the bridge already gave up are ignored.  It reports to its bridge through
:class:`SourceOwner`; the retry policy is the bridge's.  It knows the source only through
:mod:`gateway.interfaces`.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.bridges.config import BridgeConfig
from gateway.deferreds import gather
from gateway.errors import ConnectorError
from gateway.interfaces import IConnector, IConsumer, ILocalTransactionSource, ISubscription, SubscriptionSpec
from gateway.message.model import Message


class SourceOwner(Protocol):
    """What a :class:`BridgeSource` tells its bridge."""

    def delivered(self, consumer: SourceConsumer, message: Message, tag: Any) -> None:
        """A delivery of the current subscription (``consumer.subscription`` is None while it is set up)."""

    def source_up(self) -> None:
        """The subscription is established: pending deliveries may go."""

    def source_down(self, consumer: SourceConsumer, reason: str, retryable: bool) -> None:
        """The subscription failed or was lost (its deliveries come again); ``retryable``: a
        connector's fault, to retry after ``failure_retry_interval``; otherwise the bridge fails."""


class StaleSubscription(Exception):
    """The deliveries belong to a subscription the bridge gave up (the source delivers them again)."""


@implementer(IConsumer)
class SourceConsumer:
    """The consumer one subscription attempt delivers to."""

    def __init__(self, source: BridgeSource) -> None:
        self.source = source
        self.subscription: ISubscription | None = None
        self.active = True

    def deliver(self, message: Message, tag: Any) -> None:
        if self.active:
            self.source.owner.delivered(self, message, tag)

    def subscription_failed(self, reason: Exception) -> None:
        if self.active:
            self.source.lost(self, reason)


class BridgeSource:
    """The source subscription of one bridge (see the module docstring)."""

    log = Logger()

    def __init__(self, owner: SourceOwner, connector: IConnector, config: BridgeConfig) -> None:
        self.owner = owner
        self.connector = connector
        self.config = config
        self.consumer: SourceConsumer | None = None
        self.ok = False
        """A subscription is established."""
        self.paused = False
        self.transacted = ILocalTransactionSource(connector, None)

    @property
    def description(self) -> str:
        return f"{self.config.source.connector}:{self.config.source.destination}"

    def spec(self) -> SubscriptionSpec:
        config = self.config
        return SubscriptionSpec(
            destination=config.source.destination,
            selector=config.selector,
            ack_mode="client-individual",
            # a transacted source delivers whole batches, each settled before the next
            prefetch=config.max_batch_size if self.transacted is not None else config.prefetch,
            durable_name=config.subscription_name,
            client_id=config.client_id,
            owner=f"bridge:{config.name}",
            strict_acks=True,
            # one owner per bridge: a second gateway running it stands by; not with a selector, since an
            # exclusive consumer takes the queue whole (ActiveMQ's rule too) and what the selector leaves
            # for the queue's other consumers would wait for ever
            exclusive=not config.selector,
        )

    def subscribe(self) -> None:
        """Subscribe (again); the owner hears :meth:`SourceOwner.source_up` or ``source_down``."""
        consumer = SourceConsumer(self)
        self.consumer = consumer
        self.ok = False
        if self.transacted is not None:
            d = maybeDeferred(self.transacted.subscribe_transacted, self.spec(), consumer, self.config.max_batch_time)
        else:
            d = maybeDeferred(self.connector.subscribe, self.spec(), consumer)
        d.addCallbacks(self._subscribed, self._subscribe_failed, callbackArgs=(consumer,), errbackArgs=(consumer,))

    def current(self, consumer: SourceConsumer) -> bool:
        return consumer is self.consumer

    def _subscribed(self, subscription: ISubscription, consumer: SourceConsumer) -> None:
        if consumer is not self.consumer:
            consumer.active = False
            maybeDeferred(subscription.close).addErrback(self._log_close_failure)
            return
        consumer.subscription = subscription
        self.ok = True
        if self.paused:
            subscription.pause()
        self.log.info("bridge {name} consuming from {source}", name=self.config.name, source=self.description)
        self.owner.source_up()

    def _subscribe_failed(self, failure: Failure, consumer: SourceConsumer) -> None:
        consumer.active = False
        if consumer is not self.consumer:
            return
        self.consumer = None
        error = failure.value
        self.owner.source_down(consumer, f"cannot subscribe to {self.description}: {error}",
                               isinstance(error, ConnectorError))

    def lost(self, consumer: SourceConsumer, reason: Exception) -> None:
        """``consumer``'s subscription failed (or an acknowledgement did): close it; its
        unacknowledged deliveries come again."""
        if consumer is not self.consumer:
            return
        consumer.active = False
        self.consumer = None
        self.ok = False
        if consumer.subscription is not None:
            maybeDeferred(consumer.subscription.close).addErrback(self._log_close_failure)
        self.owner.source_down(consumer, f"source {self.description} lost: {reason}", True)

    def pause(self) -> None:
        self.paused = True
        if self.consumer is not None and self.consumer.subscription is not None:
            self.consumer.subscription.pause()

    def resume(self) -> None:
        self.paused = False
        if self.consumer is not None and self.consumer.subscription is not None:
            self.consumer.subscription.resume()

    def ready(self) -> bool:
        """Deliveries may go: the subscription is established."""
        return self.consumer is not None and self.consumer.subscription is not None

    def close(self) -> Deferred[None]:
        """Close the subscription; what it delivered and nobody acknowledged goes back to the source."""
        consumer, self.consumer = self.consumer, None
        self.ok = False
        if consumer is None:
            return succeed(None)
        consumer.active = False
        subscription = consumer.subscription
        if subscription is None:
            return succeed(None)
        d: Deferred[None] = maybeDeferred(subscription.close)
        d.addErrback(self._log_close_failure)
        return d

    def acknowledge(self, tags: list[tuple[SourceConsumer, Any]]) -> Deferred[None]:
        """Acknowledge deliveries (of live subscriptions only: a gone one's come again).  On failure
        every subscription concerned is treated as lost and the failure passed on."""
        by_consumer: dict[SourceConsumer, list[Any]] = {}
        for consumer, tag in tags:
            by_consumer.setdefault(consumer, []).append(tag)
        acks = []
        for consumer, consumer_tags in by_consumer.items():
            subscription = consumer.subscription
            if subscription is None or not consumer.active:
                continue  # that subscription is gone: the source redelivers these
            acks.append(maybeDeferred(subscription.ack, consumer_tags))
        d = gather(acks)

        def failed(failure: Failure) -> Failure:
            for consumer in list(by_consumer):
                self.lost(consumer, ConnectorError(f"acknowledgement failed: {failure.getErrorMessage()}"))
            return failure

        return d.addCallbacks(lambda _: None, failed)

    def forward_locally(self, outgoing: list[Message], tags: list[tuple[SourceConsumer, Any]]) -> Deferred[None]:
        """Send ``outgoing`` and acknowledge ``tags`` in one local transaction of the provider
        (:meth:`~gateway.interfaces.ITransactedSubscription.forward`); fails with
        :class:`StaleSubscription` when the deliveries' subscription is gone."""
        consumers = {consumer for consumer, _ in tags}
        consumer = next(iter(consumers), None)
        if consumer is None or consumer.subscription is None or not consumer.active or len(consumers) > 1:
            raise StaleSubscription()
        subscription: Any = consumer.subscription  # an ITransactedSubscription (subscribe_transacted)
        result: Deferred[None] = maybeDeferred(subscription.forward, outgoing, [tag for _, tag in tags])
        return result

    def _log_close_failure(self, failure: Failure) -> None:
        self.log.warn("bridge {name}: closing the source subscription failed: {error}", name=self.config.name,
                      error=failure.getErrorMessage())
