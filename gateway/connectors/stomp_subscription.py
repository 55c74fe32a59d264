"""A gateway consumer's subscription at a JMS broker spoken to over STOMP.

:class:`BrokerSubscription` maps a :class:`~gateway.interfaces.SubscriptionSpec`
onto ActiveMQ's SUBSCRIBE headers (selector, ``activemq.prefetchSize``,
``activemq.subscriptionName``, ``transformation``), turns MESSAGE frames into
messages for its consumer, relays ACK/NACK with :class:`BrokerDelivery` tags,
buffers while paused and is SUBSCRIBEd again after each reconnection of its
:class:`~gateway.connectors.stomp_broker.StompBrokerConnector`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.connectors.stomp_client import StompClientProtocol
from gateway.connectors.stomp_mapping import message_from_frame
from gateway.connectors.stomp_settings import StompBrokerMetrics, StompBrokerSettings
from gateway.deferreds import gather
from gateway.errors import ConnectorError, StaleDelivery
from gateway.interfaces import IConsumer, ISubscription, SubscriptionSpec
from gateway.message.model import Message
from gateway.wire.frame import Frame

_ACK_TRANSACTIONS = itertools.count(1)


PREFETCH_SLACK = 2
"""A paused subscription's backlog may reach this many times its prefetch (an honest broker sends at
most the prefetch unacknowledged; the slack is for brokers that count a little differently)..."""
PREFETCH_SLACK_BYTES = 4 * 1024 * 1024
"""...or this many bytes of bodies, whichever is more: a broker that bounds a consumer by bytes rather
than by count (Artemis: ``stompConsumerCredits``, 10 KiB by default; it ignores ``activemq.prefetchSize``)
may send many small messages past a small prefetch without harm."""


@dataclass(slots=True, frozen=True)
class BrokerDelivery:
    """The tag of one delivery: which connection it came on and how to acknowledge it."""

    generation: int
    subscription_id: str
    frame: Frame  # the MESSAGE headers (no body)


def _ack_id(tag: BrokerDelivery) -> str:
    """What the broker acknowledges ``tag`` by (STOMP 1.2's ``ack``, else the message id)."""
    headers = tag.frame.headers
    return headers.get("ack") or headers.get("message-id", "")


def durable_subscription_name(client_id: str | None, durable_name: str) -> str:
    """The broker-side durable name: one broker connection serves every gateway
    client, so the gateway client id becomes part of the name."""
    return f"{client_id}.{durable_name}" if client_id else durable_name


class SubscriptionOwner(Protocol):
    """What a :class:`BrokerSubscription` uses of its connector (the ``QueueOwner`` shape:
    :class:`~gateway.connectors.stomp_broker.StompBrokerConnector` provides it; a unit test gives a fake)."""

    name: str
    """The connector's name, for logs and metrics labels."""
    settings: StompBrokerSettings
    """The connector's settings (``uri`` names the broker in errors)."""
    metrics: StompBrokerMetrics
    """Counts deliveries per connector."""
    generation: int
    """The number of the current broker connection (a delivery of an older one is stale)."""

    @property
    def protocol(self) -> StompClientProtocol | None:
        """The connected protocol, or None while disconnected."""

    @property
    def subscribe_transformation(self) -> str:
        """The ``transformation`` header SUBSCRIBEs carry (empty: none)."""

    def transformation_closed(self, protocol: StompClientProtocol, transformation: str, failure: Failure, *,
                              reconnect: bool = True) -> bool:
        """Whether ``failure`` is the broker refusing ``transformation`` by closing the connection."""

    def holds(self, subscription: BrokerSubscription) -> bool:
        """Whether ``subscription`` is one the connector restores after a reconnection."""

    def when_ready(self) -> Deferred[StompClientProtocol]:
        """The connected protocol now, or once reconnected."""

    def forget(self, subscription: BrokerSubscription) -> None:
        """``subscription`` is closed: not restored after a reconnection."""

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        """Delete an inactive durable subscription at the broker."""


@implementer(ISubscription)
class BrokerSubscription:
    """One gateway consumer's subscription at the JMS broker.

    The broker subscription always acknowledges ``client-individual``; for a
    consumer in ``auto`` mode the connector acknowledges each message once
    :meth:`IConsumer.deliver` returned (not ``False``) with the subscription
    still open.
    """

    log = Logger()

    def __init__(
        self,
        connector: SubscriptionOwner,
        subscription_id: str,
        spec: SubscriptionSpec,
        consumer: IConsumer,
    ) -> None:
        self.connector = connector
        self.id = subscription_id
        self.spec = spec
        self.consumer = consumer
        self.closed = False
        self.paused = False
        self._generation = -1
        self._backlog: list[tuple[Message, BrokerDelivery, int]] = []
        """Deliveries held while paused, with their bodies' sizes."""
        self._backlog_bytes = 0
        """Bytes of the bodies in :attr:`_backlog` (as the broker wrote them)."""
        self._outstanding: dict[tuple[int, str], int] = {}
        """Deliveries handed on and not yet acknowledged at the broker: (generation, ack id) -> body bytes
        (with :attr:`_backlog`, what the broker's prefetch bounds)."""
        self._outstanding_bytes = 0

    def headers(self) -> dict[str, str]:
        """The SUBSCRIBE headers for ActiveMQ."""
        spec = self.spec
        prefetch = str(max(1, spec.prefetch))
        headers = {"activemq.prefetchSize": prefetch, "prefetch-count": prefetch}  # (ActiveMQ's, RabbitMQ's)
        if spec.selector:
            headers["selector"] = spec.selector
        if spec.exclusive and spec.destination.startswith("/queue/"):
            headers["activemq.exclusive"] = "true"  # (ActiveMQ's own exclusive consumer: queues only)
        if spec.durable_name and spec.destination.startswith("/topic/"):
            headers["activemq.subscriptionName"] = durable_subscription_name(spec.client_id, spec.durable_name)
        transformation = self.connector.subscribe_transformation
        if transformation:
            headers["transformation"] = transformation
        return headers

    def establish(self, protocol: StompClientProtocol) -> Deferred[None]:
        """SUBSCRIBE on ``protocol`` (first time or after a reconnection)."""
        generation = self.connector.generation
        self._generation = generation
        self._clear_backlog()
        headers = self.headers()
        subscribed = protocol.subscribe(
            self.spec.destination,
            self.id,
            lambda frame: self._received(frame, generation),
            ack="client-individual",
            headers=headers,
        )

        def failed(failure: Failure) -> Failure | Deferred[None]:
            transformation = headers.get("transformation")
            if transformation and self.connector.transformation_closed(protocol, transformation, failure):
                if self.connector.holds(self):
                    return failure  # restored without the transformation on the next connection
                # a new subscription: made again on the next connection (send_timeout bounds the wait)
                return self.connector.when_ready().addCallback(self.establish)
            if self.connector.holds(self):
                self.log.warn(
                    "connector {name}: cannot restore subscription to {destination}: {error}",
                    name=self.connector.name,
                    destination=self.spec.destination,
                    error=failure.getErrorMessage(),
                )
                self.connector.forget(self)
                self.fail(failure.value or ConnectorError("subscription lost"))
            return failure

        subscribed.addErrback(failed)
        return subscribed.addCallback(lambda _: None)

    def connection_lost(self) -> None:
        """Deliveries not yet handed on will come again on the next connection."""
        self._clear_backlog()

    def _clear_backlog(self) -> None:
        """Forget what came on the connection: held deliveries and the count of those out (the broker
        redelivers them on the next one; their acknowledgements are stale)."""
        self._backlog.clear()
        self._backlog_bytes = 0
        self._outstanding.clear()
        self._outstanding_bytes = 0

    def fail(self, error: BaseException) -> None:
        """End the subscription without the consumer asking."""
        if self.closed:
            return
        self.closed = True
        exception = error if isinstance(error, Exception) else ConnectorError(str(error))
        self.consumer.subscription_failed(exception)

    def _received(self, frame: Frame, generation: int) -> None:
        if self.closed or generation != self._generation:
            return
        tag = BrokerDelivery(generation, self.id, Frame("MESSAGE", frame.headers))
        self.connector.metrics.deliveries.labels(self.connector.name).inc()
        try:
            message = message_from_frame(frame)
        except ConnectorError as error:
            self.log.warn(
                "connector {name}: rejecting message {id} from {destination}: {error}",
                name=self.connector.name,
                id=frame.headers.get("message-id"),
                destination=self.spec.destination,
                error=str(error),
            )
            self._acknowledge([tag], "nack")
            return
        if len(self._backlog) + len(self._outstanding) >= PREFETCH_SLACK * max(1, self.spec.prefetch) \
                and self._backlog_bytes + self._outstanding_bytes >= PREFETCH_SLACK_BYTES:
            self._prefetch_ignored()
            return
        size = len(frame.body)
        if self.paused or self._backlog:
            self._backlog.append((message, tag, size))
            self._backlog_bytes += size
            return
        self._deliver(message, tag, size)

    def _prefetch_ignored(self) -> None:
        """The broker sent far more unacknowledged messages than the prefetch while the consumer was
        paused (the backlog holds only unacknowledged ones): a broker that ignores the prefetch would
        fill the gateway's memory, so its connection is closed; it redelivers them on the next."""
        limit = PREFETCH_SLACK * max(1, self.spec.prefetch)
        error = ConnectorError(
            f"{self.connector.settings.uri} sent more than {limit} unacknowledged messages "
            f"({self._backlog_bytes + self._outstanding_bytes} bytes) to subscription {self.id} "
            f"({self.spec.destination}) with activemq.prefetchSize {self.spec.prefetch}: it ignores the "
            "prefetch; closing the connection")
        self.log.warn("connector {name}: {error}", name=self.connector.name, error=str(error))
        self._clear_backlog()
        protocol = self.connector.protocol
        if protocol is not None:
            protocol.broke_protocol(error)

    def _deliver(self, message: Message, tag: BrokerDelivery, size: int) -> None:
        consumer: Any = self.consumer
        key = (tag.generation, _ack_id(tag))
        self._outstanding[key] = size
        self._outstanding_bytes += size
        try:
            handed_on = consumer.deliver(message, tag)
        except Exception:
            self.log.failure(
                "consumer of {destination} failed on message {id}",
                destination=self.spec.destination,
                id=message.message_id,
            )
            return
        # In auto mode the broker hears of the delivery once the consumer took it:
        # not when it refused it (returned False) or ended the subscription meanwhile.
        if self.spec.ack_mode == "auto" and handed_on is not False and not self.closed:
            self._acknowledge([tag], "ack", receipt=False)

    def ack(self, tags: list[Any]) -> Deferred[None]:
        return self._acknowledge(tags, "ack")

    def nack(self, tags: list[Any]) -> Deferred[None]:
        return self._acknowledge(tags, "nack")

    def _acknowledge(self, tags: list[Any], what: str, *, receipt: bool = True) -> Deferred[None]:
        protocol = self.connector.protocol
        work: list[Deferred[Any]] = []
        for tag in tags:
            if not isinstance(tag, BrokerDelivery):
                return fail(ConnectorError(f"{tag!r} is not a delivery of this connector"))
        stale = [tag for tag in tags if protocol is None or tag.generation != self.connector.generation]
        if stale:
            # The broker connection they came on is gone: the broker redelivers them, so an
            # acknowledgement must not report success (nor acknowledge the rest of the batch).
            if what == "ack" and self.spec.strict_acks:
                return fail(StaleDelivery(
                    f"{len(stale)} of {len(tags)} deliveries came on a previous connection to "
                    f"{self.connector.settings.uri}; the broker redelivers them"))
            tags = [tag for tag in tags if tag not in stale]
        if not tags:
            return succeed(None)
        assert protocol is not None
        for tag in tags:  # (no longer counted against the prefetch: the broker may send more)
            size = self._outstanding.pop((tag.generation, _ack_id(tag)), None)
            if size is not None:
                self._outstanding_bytes -= size
        if what == "ack" and receipt and len(tags) > 1:
            # Several at once (a bridge's batch): one broker transaction, one receipt, and for
            # persistent messages one store write at the broker instead of one per message.
            transaction = f"{self.id}-ack-{next(_ACK_TRANSACTIONS)}"
            protocol.begin(transaction)
            for tag in tags:
                protocol.ack(tag.frame, transaction=transaction)
            return protocol.commit(transaction).addCallback(lambda _: None)
        for tag in tags:
            if what == "ack":
                work.append(protocol.ack(tag.frame, receipt=receipt))
            else:
                work.append(protocol.nack(tag.frame, receipt=receipt))
        return gather(work).addCallback(lambda _: None)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        while self._backlog and not self.paused and not self.closed:
            message, tag, size = self._backlog.pop(0)
            self._backlog_bytes -= size
            self._deliver(message, tag, size)

    def close(self) -> Deferred[None]:
        """UNSUBSCRIBE; the broker redelivers what was not acknowledged."""
        if self.closed:
            return succeed(None)
        self.closed = True
        self._clear_backlog()
        self.connector.forget(self)
        protocol = self.connector.protocol
        if protocol is None:
            return succeed(None)
        return protocol.unsubscribe(self.id).addCallback(lambda _: None)

    def unsubscribe(self) -> Deferred[None]:
        """UNSUBSCRIBE and, for a durable subscription, delete it at the broker."""
        closing = self.close()
        spec = self.spec
        if not (spec.durable_name and spec.destination.startswith("/topic/")):
            return closing
        durable_name = spec.durable_name
        return closing.addCallback(lambda _: self.connector.unsubscribe_durable(spec.client_id or "", durable_name))
