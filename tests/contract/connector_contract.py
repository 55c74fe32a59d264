"""The connector contract: what every :class:`~gateway.interfaces.IConnector` does, against its real broker.

:class:`ConnectorContract` holds the tests; a connector proves itself with one
subclass (``test_<connector>_contract.py``) whose fixtures give a
:class:`Target`: the connector started on its broker, and how to make fresh
destinations there.  A second fixture, ``faulty_target``, gives one whose broker
can go away and come back (through :class:`~tests.support.tcp_proxy.TcpProxy`,
or a restart) and, for an :class:`~gateway.interfaces.IFlowControlled`
connector, stall.

The tests drive the connector objects directly, on pytest-twisted's reactor.
Behaviour outside the core (send with receipts, subscribe, ack, pause) is a
:class:`~gateway.interfaces.Capability` the connector declares; a test needing
one the connector does not declare is skipped with the connector's and the
capability's names (:func:`requires`), never passed silently.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Protocol, runtime_checkable

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, DeferredList
from zope.interface.interface import InterfaceClass
from zope.interface.verify import verifyObject

from gateway.errors import GatewayError, SelectorError
from gateway.interfaces import (
    Capability,
    IConnector,
    IFlowControlled,
    IStatusReporting,
    ISubscription,
    SubscriptionSpec,
)
from gateway.message.model import Message, StreamMessage, TextMessage, new_message_id, now_millis
from tests.support.consumers import CollectingConsumer
from tests.support.reactor_waits import sleep, until, wait_for
from tests.support.tcp_proxy import TcpProxy


def unique(prefix: str = "contract") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def text(destination: str, body: str, *, persistent: bool = True, **properties: Any) -> TextMessage:
    """A persistent TextMessage (properties are strings: every target keeps those as they are)."""
    return TextMessage(destination=destination, message_id=new_message_id(), text=body, persistent=persistent,
                       timestamp=now_millis(), properties=properties)


def texts(deliveries: list[tuple[Message, Any]]) -> list[str | None]:
    return [m.text if isinstance(m, TextMessage) else repr(m) for m, _ in deliveries]


def requires(connector: IConnector, *needed: Capability | InterfaceClass) -> None:
    """Skip the test, naming the connector and what it lacks, unless it offers all of ``needed``
    (a :class:`Capability` it declares, or an interface it provides)."""
    for need in needed:
        if isinstance(need, Capability):
            if need not in connector.capabilities:
                pytest.skip(f"connector {connector.name} ({type(connector).__name__}) does not offer "
                            f"capability {need.value!r}")
        elif not need.providedBy(connector):
            pytest.skip(f"connector {connector.name} ({type(connector).__name__}) does not provide {need.__name__}")


class Target:
    """A started connector on its broker, and what the contract needs to know about that broker.

    Subclasses implement :meth:`queue`, :meth:`topic` and :meth:`refused`; a target
    given as ``faulty_target`` also :meth:`go_away` / :meth:`come_back`, and
    :meth:`stall` / :meth:`flow` when its connector is flow controlled.
    """

    def __init__(self, connector: IConnector) -> None:
        self.connector = connector

    async def queue(self) -> str:
        """A fresh queue destination (created if the broker needs that)."""
        raise NotImplementedError

    async def topic(self) -> str:
        """A fresh topic destination (created if the broker needs that)."""
        raise NotImplementedError

    def refused(self, destination: str) -> Message:
        """A message the target refuses (an unknown destination, a type it cannot carry)."""
        raise NotImplementedError

    async def go_away(self) -> None:
        """The broker becomes unreachable (the connection is cut, or the broker stops)."""
        raise NotImplementedError

    async def come_back(self) -> IConnector:
        """The broker is back; returns the connector to go on with (a restarted embedded
        broker is a new object; a reconnecting connector is the same)."""
        raise NotImplementedError

    def stall(self) -> None:
        """The broker stops taking what the connector sends (connections stay up)."""
        raise NotImplementedError

    def flow(self) -> None:
        """The broker takes what it is sent again."""
        raise NotImplementedError

    stall_body = 16 * 1024
    """Body size of the messages the flow-control test sends into a stall."""


@runtime_checkable
class Stateful(Protocol):
    """A connector that says how its connection is (``connected``, ``failed`` ...): both ActiveMQ connectors."""

    state: str


class ProxiedTarget(Target):
    """A connector to the real ActiveMQ, directly or through ``proxy`` (a
    :class:`~tests.support.tcp_proxy.TcpProxy`): cutting the proxy is the broker going
    away, stalling it a broker that does not keep up.  Refuses a StreamMessage."""

    def __init__(self, connector: IConnector, proxy: TcpProxy | None) -> None:
        super().__init__(connector)
        self.proxy = proxy
        wait_for(connector.start)

    async def queue(self) -> str:
        return f"/queue/{unique()}"

    async def topic(self) -> str:
        return f"/topic/{unique()}"

    def refused(self, destination: str) -> Message:
        return StreamMessage(destination=destination, message_id=new_message_id(), items=[1, 2])

    def _proxy(self) -> TcpProxy:
        assert self.proxy is not None, "only a faulty_target has a proxy"
        return self.proxy

    async def go_away(self) -> None:
        self._proxy().cut()
        connector = self.connector
        assert isinstance(connector, Stateful)
        await until(lambda: connector.state != "connected", what="the connector to see the cut")

    async def come_back(self) -> IConnector:
        self._proxy().restore()
        return self.connector

    def stall(self) -> None:
        self._proxy().stall()

    def flow(self) -> None:
        self._proxy().flow()

    def stop(self) -> None:
        wait_for(self.connector.stop)


class RefusingConsumer(CollectingConsumer):
    """Takes nothing (``deliver`` returns False), as a session does while its connection closes."""

    def deliver(self, message: Message, tag: Any) -> bool | None:
        super().deliver(message, tag)
        return False


async def subscribe(connector: IConnector, spec: SubscriptionSpec) -> tuple[Any, CollectingConsumer]:
    consumer = CollectingConsumer()
    subscription = await connector.subscribe(spec, consumer)
    verifyObject(ISubscription, subscription)
    return subscription, consumer


class ConnectorContract:
    """What every connector does.  Subclasses provide the fixtures ``target`` and
    ``faulty_target`` (each yields a started :class:`Target` and stops it afterwards)."""

    # -- interfaces and declarations ------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_provides_the_interface_and_declares_its_capabilities(self, target: Target) -> None:
        connector = target.connector
        verifyObject(IConnector, connector)
        assert isinstance(connector.capabilities, frozenset)
        assert all(isinstance(c, Capability) for c in connector.capabilities), connector.capabilities

    @pytest_twisted.ensureDeferred
    async def test_reports_health_and_status(self, target: Target) -> None:
        requires(target.connector, IStatusReporting)
        health = target.connector.health()  # type: ignore[attr-defined]
        assert health.up, health.detail
        assert health.detail
        json.dumps(target.connector.status())  # type: ignore[attr-defined]

    # -- sending and receipts --------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_a_send_fires_once_the_target_has_the_message(self, target: Target) -> None:
        queue = await target.queue()
        await target.connector.send(text(queue, "grüße ✓", colour="red"))
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue, ack_mode="client-individual"))
        [(message, _)] = await consumer.take(1)
        assert isinstance(message, TextMessage) and message.text == "grüße ✓"
        assert message.properties.get("colour") == "red" and message.persistent
        assert not message.redelivered

    @pytest_twisted.ensureDeferred
    async def test_a_refused_send_fails_its_deferred(self, target: Target) -> None:
        queue = await target.queue()
        with pytest.raises(GatewayError):
            await target.connector.send(target.refused(queue))
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        assert await consumer.nothing_more()

    @pytest_twisted.ensureDeferred
    async def test_send_batch_delivers_every_message_in_order(self, target: Target) -> None:
        queue = await target.queue()
        await target.connector.send_batch([text(queue, f"b{i}") for i in range(3)])
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        assert texts(await consumer.take(3)) == ["b0", "b1", "b2"]

    @pytest_twisted.ensureDeferred
    async def test_send_batch_is_all_or_nothing(self, target: Target) -> None:
        requires(target.connector, Capability.TRANSACTIONS)
        queue = await target.queue()
        with pytest.raises(GatewayError):
            await target.connector.send_batch([text(queue, "first"), target.refused(queue), text(queue, "last")])
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        assert await consumer.nothing_more(1.0)

    @pytest_twisted.ensureDeferred
    async def test_the_in_doubt_probe_names_what_a_queue_holds(self, target: Target) -> None:
        """A bridge's copies carry their id as the message id and as ``_AMQ_DUPL_ID``: the
        connector says which of them it holds (a lost confirmation is resolved by looking)."""
        requires(target.connector, Capability.HELD_MESSAGE_IDS)
        from gateway.bridges.probe import held_message_ids
        from gateway.message.model import DUPLICATE_ID

        queue = await target.queue()
        assert not await held_message_ids(target.connector, queue)
        sent: list[Message] = [text(queue, f"h{i}") for i in range(3)]
        for message in sent:
            message.properties[DUPLICATE_ID] = message.message_id
        await target.connector.send_batch(sent)
        held = await held_message_ids(target.connector, queue)
        assert held is not None and {message.message_id for message in sent} <= held
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        assert texts(await consumer.take(3)) == ["h0", "h1", "h2"], "the probe consumed nothing"

    # -- subscriptions ---------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_a_queue_subscriber_gets_the_backlog_then_new_messages_in_order(self, target: Target) -> None:
        queue = await target.queue()
        for i in range(3):
            await target.connector.send(text(queue, f"m{i}"))
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        assert texts(await consumer.take(3)) == ["m0", "m1", "m2"]
        await target.connector.send(text(queue, "m3"))
        assert texts(await consumer.take(1)) == ["m3"]
        assert await consumer.nothing_more() and consumer.failures == []

    @pytest_twisted.ensureDeferred
    async def test_a_topic_message_reaches_every_subscriber(self, target: Target) -> None:
        topic = await target.topic()
        _, first = await subscribe(target.connector, SubscriptionSpec(topic))
        _, second = await subscribe(target.connector, SubscriptionSpec(topic))
        await target.connector.send(text(topic, "to all", persistent=False))
        assert texts(await first.take(1)) == ["to all"] and texts(await second.take(1)) == ["to all"]

    @pytest_twisted.ensureDeferred
    async def test_pause_holds_deliveries_until_resume(self, target: Target) -> None:
        queue = await target.queue()
        subscription, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        subscription.pause()
        await target.connector.send(text(queue, "q0"))
        await target.connector.send(text(queue, "q1"))
        assert await consumer.nothing_more(1.0)
        subscription.resume()
        assert texts(await consumer.take(2)) == ["q0", "q1"]

    # -- acknowledgement ---------------------------------------------------------

    async def _left_unacknowledged(self, target: Target) -> tuple[SubscriptionSpec, list[tuple[Message, Any]]]:
        """Two deliveries on a client-individual queue subscription, the first acked,
        then the subscription closed; returns its spec and what a new one gets."""
        queue = await target.queue()
        spec = SubscriptionSpec(queue, ack_mode="client-individual")
        for body in ("acked", "left"):
            await target.connector.send(text(queue, body))
        subscription, consumer = await subscribe(target.connector, spec)
        deliveries = await consumer.take(2)
        assert texts(deliveries) == ["acked", "left"]
        await subscription.ack([deliveries[0][1]])
        await subscription.close()
        again, consumer = await subscribe(target.connector, spec)
        redelivered = await consumer.take(1)
        assert await consumer.nothing_more()
        await again.ack([tag for _, tag in redelivered])
        return spec, redelivered

    @pytest_twisted.ensureDeferred
    async def test_what_a_closed_subscription_left_unacknowledged_comes_again(self, target: Target) -> None:
        _, redelivered = await self._left_unacknowledged(target)
        assert texts(redelivered) == ["left"]

    @pytest_twisted.ensureDeferred
    async def test_what_comes_again_after_close_is_flagged_redelivered(self, target: Target) -> None:
        requires(target.connector, Capability.REDELIVERED_AFTER_CLOSE)
        _, redelivered = await self._left_unacknowledged(target)
        [(message, _)] = redelivered
        assert message.redelivered

    @pytest_twisted.ensureDeferred
    async def test_auto_acknowledged_deliveries_do_not_come_again(self, target: Target) -> None:
        queue = await target.queue()
        await target.connector.send(text(queue, "once"))
        subscription, consumer = await subscribe(target.connector, SubscriptionSpec(queue, ack_mode="auto"))
        assert texts(await consumer.take(1)) == ["once"]
        await sleep(0.5)  # Kafka commits auto acknowledgements on its next tick
        await subscription.close()
        _, again = await subscribe(target.connector, SubscriptionSpec(queue))
        assert await again.nothing_more(1.0)

    @pytest_twisted.ensureDeferred
    async def test_a_delivery_the_consumer_refuses_is_not_auto_acknowledged(self, target: Target) -> None:
        queue = await target.queue()
        await target.connector.send(text(queue, "refused"))
        refusing = RefusingConsumer()
        subscription = await target.connector.subscribe(SubscriptionSpec(queue, ack_mode="auto"), refusing)
        assert texts(await refusing.take(1)) == ["refused"]
        await sleep(0.5)  # Kafka commits auto acknowledgements on its next tick
        await subscription.close()
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        assert texts(await consumer.take(1)) == ["refused"]

    @pytest_twisted.ensureDeferred
    async def test_a_nack_redelivers_the_message_flagged(self, target: Target) -> None:
        requires(target.connector, Capability.NACK)
        queue = await target.queue()
        await target.connector.send(text(queue, "try again"))
        spec = SubscriptionSpec(queue, ack_mode="client-individual")
        subscription, consumer = await subscribe(target.connector, spec)
        [(first, tag)] = await consumer.take(1)
        assert not first.redelivered
        await subscription.nack([tag])
        [(again, tag)] = await consumer.take(1)
        assert isinstance(again, TextMessage) and again.text == "try again"
        assert again.redelivered and again.redelivery_count >= 1
        await subscription.ack([tag])
        assert await consumer.nothing_more()

    @pytest_twisted.ensureDeferred
    async def test_prefetch_bounds_the_unacknowledged_deliveries(self, target: Target) -> None:
        requires(target.connector, Capability.PREFETCH)
        queue = await target.queue()
        for i in range(5):
            await target.connector.send(text(queue, f"p{i}"))
        spec = SubscriptionSpec(queue, ack_mode="client-individual", prefetch=2)
        subscription, consumer = await subscribe(target.connector, spec)
        first = await consumer.take(2)
        assert await consumer.nothing_more(1.0)
        await subscription.ack([first[0][1]])
        third = await consumer.take(1)
        assert await consumer.nothing_more(0.5)
        await subscription.ack([first[1][1], third[0][1]])
        rest = await consumer.take(2)
        assert texts(first + third + rest) == [f"p{i}" for i in range(5)]

    # -- selectors ---------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_a_selector_filters_a_topic_subscription(self, target: Target) -> None:
        topic = await target.topic()
        spec = SubscriptionSpec(topic, selector="colour = 'red' AND shape <> 'round'")
        _, consumer = await subscribe(target.connector, spec)
        for body, colour, shape in (("red-square", "red", "square"), ("blue", "blue", "square"),
                                    ("red-round", "red", "round"), ("red-too", "red", "star")):
            await target.connector.send(text(topic, body, colour=colour, shape=shape))
        assert texts(await consumer.take(2)) == ["red-square", "red-too"]
        assert await consumer.nothing_more()

    @pytest_twisted.ensureDeferred
    async def test_a_selector_on_a_queue_is_applied_or_refused_never_ignored(self, target: Target) -> None:
        queue = await target.queue()
        spec = SubscriptionSpec(queue, selector="colour = 'red'")
        if Capability.SELECTORS_ON_QUEUES not in target.connector.capabilities:
            with pytest.raises(SelectorError):
                await target.connector.subscribe(spec, CollectingConsumer())
            return
        _, consumer = await subscribe(target.connector, spec)
        for colour in ("blue", "red"):
            await target.connector.send(text(queue, colour, colour=colour))
        assert texts(await consumer.take(1)) == ["red"]
        assert await consumer.nothing_more()
        _, others = await subscribe(target.connector, SubscriptionSpec(queue))
        assert texts(await others.take(1)) == ["blue"]  # skipped, not consumed

    @pytest_twisted.ensureDeferred
    async def test_a_bad_selector_is_refused(self, target: Target) -> None:
        for destination in (await target.queue(), await target.topic()):
            with pytest.raises(SelectorError):
                spec = SubscriptionSpec(destination, selector="colour = = 'red'")
                await target.connector.subscribe(spec, CollectingConsumer())

    # -- durable subscriptions ---------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_a_durable_subscription_keeps_messages_while_away(self, target: Target) -> None:
        requires(target.connector, Capability.DURABLE)
        topic = await target.topic()
        spec = SubscriptionSpec(topic, durable_name="audit", client_id=unique("client"), ack_mode="client-individual")
        subscription, _ = await subscribe(target.connector, spec)
        await subscription.close()
        await target.connector.send(text(topic, "while away"))
        back, consumer = await subscribe(target.connector, spec)
        deliveries = await consumer.take(1)
        assert texts(deliveries) == ["while away"]
        await back.ack([deliveries[0][1]])
        await back.close()
        again, consumer = await subscribe(target.connector, spec)
        assert await consumer.nothing_more()  # acknowledged: gone
        await again.unsubscribe()

    @pytest_twisted.ensureDeferred
    async def test_a_new_durable_subscription_starts_empty(self, target: Target) -> None:
        requires(target.connector, Capability.DURABLE, Capability.DURABLE_STARTS_EMPTY)
        topic = await target.topic()
        await target.connector.send(text(topic, "before it existed"))
        spec = SubscriptionSpec(topic, durable_name="late", client_id=unique("client"))
        subscription, consumer = await subscribe(target.connector, spec)
        assert await consumer.nothing_more()
        await subscription.close()
        await target.connector.send(text(topic, "dropped with it"))
        assert spec.client_id is not None
        await target.connector.unsubscribe_durable(spec.client_id, "late")
        again, consumer = await subscribe(target.connector, spec)
        assert await consumer.nothing_more()
        await again.unsubscribe()

    # -- failure and reconnection ------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_receipted_messages_survive_the_broker_going_away(self, faulty_target: Target) -> None:
        target = faulty_target
        queue = await target.queue()
        await target.connector.send(text(queue, "before"))
        await target.go_away()
        connector = await target.come_back()
        await connector.send(text(queue, "after"))  # may wait for the reconnection
        _, consumer = await subscribe(connector, SubscriptionSpec(queue))
        assert texts(await consumer.take(2, timeout=30)) == ["before", "after"]

    @pytest_twisted.ensureDeferred
    async def test_a_subscription_goes_on_after_the_broker_comes_back(self, faulty_target: Target) -> None:
        target = faulty_target
        requires(target.connector, Capability.RECONNECT)
        queue = await target.queue()
        _, consumer = await subscribe(target.connector, SubscriptionSpec(queue))
        await target.connector.send(text(queue, "before"))
        assert texts(await consumer.take(1)) == ["before"]
        await target.go_away()
        connector = await target.come_back()
        assert connector is target.connector
        await connector.send(text(queue, "after"))
        # As JMS allows for AUTO_ACKNOWLEDGE across a failure, the last message taken before
        # the connection went may come once more (its acknowledgement was lost with the
        # connection), flagged redelivered; nothing else may.
        got = await consumer.take(1, timeout=30)
        if texts(got) == ["before"]:
            assert got[0][0].redelivered, "'before' came again without the redelivered flag"
            got = await consumer.take(1, timeout=30)
        assert texts(got) == ["after"]
        assert consumer.failures == []

    @pytest_twisted.ensureDeferred
    async def test_health_follows_the_broker(self, faulty_target: Target) -> None:
        target = faulty_target
        requires(target.connector, IStatusReporting, Capability.HEALTH_TRACKS_BROKER)
        health = target.connector.health  # type: ignore[attr-defined]
        assert health().up
        await target.go_away()
        await until(lambda: not health().up, what="health to report the broker down")
        assert health().detail
        await target.come_back()
        await until(lambda: health().up, timeout=30, what="health to report the broker back")

    # -- flow control ------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_congestion_holds_senders_until_the_target_catches_up(self, faulty_target: Target) -> None:
        target = faulty_target
        requires(target.connector, IFlowControlled)
        congestion = target.connector.congestion  # type: ignore[attr-defined]
        queue = await target.queue()
        body = "x" * target.stall_body
        sends: list[Deferred[Any]] = []
        target.stall()
        for _ in range(200):
            sends.extend(target.connector.send(text(queue, body, persistent=False)) for _ in range(10))
            await sleep(0.05)
            if congestion.congested:
                await sleep(0.5)
                if congestion.congested:
                    break
        assert congestion.congested, f"{len(sends)} sends into a stalled target and no congestion"
        released: list[bool] = []
        congestion.when_ready(lambda: released.append(True))
        assert released == []
        target.flow()
        await until(lambda: bool(released), timeout=30, what="the congestion to clear")
        outcomes = await DeferredList(sends, consumeErrors=True)
        failed = [result for ok, result in outcomes if not ok]
        assert not failed, f"{len(failed)} of {len(sends)} sends failed: {failed[0]}"
