"""Helpers tested alone, through the small port of their owner (the ``QueueOwner`` shape).

Each helper calls only the documented interface of its owner (a ``typing.Protocol`` beside the
helper), so a fake owner is enough to drive it: the bridge's quality-of-service strategies
(:class:`~gateway.bridges.qos.BatchPort`), a subscription at a JMS broker over STOMP
(:class:`~gateway.connectors.stomp_subscription.SubscriptionOwner`) and a subscription through
the JMS API (:class:`~gateway.connectors.jms_subscription.SubscriptionOwner`) and the admin
endpoint's probes (:class:`~gateway.admin.observed.ObservedGateway`).
"""

from __future__ import annotations

import queue
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.admin.probes import liveness, readiness
from gateway.bridges.qos import AtMostOnce, BatchPort, DuplicatesOk, OnceAndOnlyOnce
from gateway.connectors.jms_link import Link
from gateway.connectors.jms_subscription import JmsSubscription
from gateway.connectors.jms_subscription import SubscriptionOwner as JmsOwner
from gateway.connectors.stomp_settings import StompBrokerMetrics
from gateway.connectors.stomp_subscription import BrokerDelivery, BrokerSubscription
from gateway.connectors.stomp_subscription import SubscriptionOwner as StompOwner
from gateway.errors import ConnectorError, StaleDelivery
from gateway.interfaces import IConsumer, SubscriptionSpec
from gateway.message.model import Message, TextMessage
from gateway.wire.frame import Frame

# -- the bridge's strategies through BatchPort -------------------------------------------------


class FakeBatchPort:
    """Records the steps a strategy asks for, in order."""

    def __init__(self, send_fails: bool = False) -> None:
        self.steps: list[tuple[str, Any]] = []
        self.send_fails = send_fails

    def not_yet_delivered(self, batch: list[Any]) -> Deferred[Any]:
        self.steps.append(("select", len(batch)))
        return succeed((batch, []))

    def send(self, outgoing: list[Message]) -> Deferred[None]:
        self.steps.append(("send", [m.message_id for m in outgoing]))
        return fail(ConnectorError("target down")) if self.send_fails else succeed(None)

    def record(self, ids: list[str]) -> Deferred[None]:
        self.steps.append(("record", ids))
        return succeed(None)

    def acknowledge(self, tags: list[Any]) -> Deferred[None]:
        self.steps.append(("acknowledge", tags))
        return succeed(None)

    def acknowledge_behind(self, tags: list[Any]) -> None:
        self.steps.append(("acknowledge_behind", tags))

    def send_and_acknowledge_locally(self, outgoing: list[Message], tags: list[Any]) -> Deferred[None]:
        self.steps.append(("local", tags))
        return succeed(None)


def forward(strategy: Any, port: BatchPort) -> Deferred[Any]:
    message = TextMessage(text="x", message_id="ID:source-1")
    outgoing: Deferred[list[Any]] = Deferred()
    strategy.forward(port, outgoing, [(None, message, "tag-1")], ["tag-1"])
    outgoing.callback([message])
    return outgoing


def test_at_most_once_acknowledges_then_sends() -> None:
    port = FakeBatchPort()
    forward(AtMostOnce(), port)
    assert [step for step, _ in port.steps] == ["acknowledge", "send"]


def test_duplicates_ok_sends_then_acknowledges() -> None:
    port = FakeBatchPort()
    forward(DuplicatesOk(), port)
    assert [step for step, _ in port.steps] == ["send", "acknowledge_behind"]


def test_once_and_only_once_records_the_ids_before_acknowledging() -> None:
    port = FakeBatchPort()
    forward(OnceAndOnlyOnce(), port)
    assert port.steps == [("send", ["ID:source-1"]), ("record", ["ID:source-1"]), ("acknowledge_behind", ["tag-1"])]


def test_once_and_only_once_neither_records_nor_acknowledges_a_failed_send() -> None:
    port = FakeBatchPort(send_fails=True)
    failures: list[Failure] = []
    forward(OnceAndOnlyOnce(), port).addErrback(failures.append)
    assert [step for step, _ in port.steps] == ["send"]
    assert failures and failures[0].check(ConnectorError)


# -- a subscription at a JMS broker over STOMP -------------------------------------------------


class FakeProtocol:
    def __init__(self) -> None:
        self.unsubscribed: list[str] = []
        self.acked: list[Frame] = []

    def unsubscribe(self, subscription_id: str) -> Deferred[None]:
        self.unsubscribed.append(subscription_id)
        return succeed(None)

    def ack(self, frame: Frame, receipt: bool = True) -> Deferred[None]:
        self.acked.append(frame)
        return succeed(None)

    def subscribe(self, destination: str, subscription_id: str, listener: Any, *, ack: str,
                  headers: dict[str, str]) -> Deferred[None]:
        return fail(ConnectorError("the broker refused the SUBSCRIBE"))


class FakeStompOwner:
    """Everything a BrokerSubscription may use of its connector, and nothing else."""

    def __init__(self) -> None:
        self.name = "amq"
        self.settings: Any = type("Settings", (), {"uri": "stomp://broker:61613"})()
        self.metrics = StompBrokerMetrics.for_registry(CollectorRegistry())
        self.generation = 1
        self.connected: Any = FakeProtocol()
        self.held: set[str] = set()
        self.forgotten: list[str] = []

    @property
    def protocol(self) -> Any:
        return self.connected

    @property
    def subscribe_transformation(self) -> str:
        return ""

    def transformation_closed(self, protocol: Any, transformation: str, failure: Failure, *,
                              reconnect: bool = True) -> bool:
        return False

    def holds(self, subscription: BrokerSubscription) -> bool:
        return subscription.id in self.held

    def when_ready(self) -> Deferred[Any]:
        return succeed(self.connected)

    def forget(self, subscription: BrokerSubscription) -> None:
        self.forgotten.append(subscription.id)
        self.held.discard(subscription.id)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        return succeed(None)


@implementer(IConsumer)
class FakeConsumer:
    def __init__(self) -> None:
        self.failed: list[Exception] = []

    def deliver(self, message: Message, tag: Any) -> bool | None:
        return True

    def subscription_failed(self, reason: Exception) -> None:
        self.failed.append(reason)


def stomp_subscription(owner: StompOwner, consumer: FakeConsumer, **spec: Any) -> BrokerSubscription:
    return BrokerSubscription(owner, "sub-1", SubscriptionSpec(destination="/queue/a", **spec), consumer)


def test_a_closed_broker_subscription_is_forgotten_and_unsubscribed() -> None:
    owner = FakeStompOwner()
    subscription = stomp_subscription(owner, FakeConsumer())
    subscription.close()
    assert owner.forgotten == ["sub-1"]
    assert owner.connected.unsubscribed == ["sub-1"]


def test_an_acknowledgement_from_a_previous_connection_is_stale() -> None:
    owner = FakeStompOwner()
    subscription = stomp_subscription(owner, FakeConsumer(), strict_acks=True)
    old = BrokerDelivery(0, "sub-1", Frame("MESSAGE", {"message-id": "m-1"}))
    failures: list[Failure] = []
    subscription.ack([old]).addErrback(failures.append)
    assert failures and failures[0].check(StaleDelivery)
    assert owner.connected.acked == []


def test_a_subscription_the_owner_restores_fails_when_the_broker_refuses_it() -> None:
    owner = FakeStompOwner()
    consumer = FakeConsumer()
    subscription = stomp_subscription(owner, consumer)
    owner.held.add("sub-1")
    subscription.establish(owner.connected).addErrback(lambda _: None)
    assert owner.forgotten == ["sub-1"]
    assert [str(error) for error in consumer.failed] == ["the broker refused the SUBSCRIBE"]


# -- a subscription through the JMS API ---------------------------------------------------------


class FakeReactor:
    """The subscription's thread hands results here; the test runs them on its own thread."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[tuple[Any, tuple[Any, ...]]] = queue.SimpleQueue()

    def callFromThread(self, function: Any, *args: Any) -> None:
        self.calls.put((function, args))

    def run_until(self, done: Any) -> None:
        while not done():
            function, args = self.calls.get(timeout=10)
            function(*args)


class NoJvm:
    @staticmethod
    def isJVMStarted() -> bool:
        return False


class FakeJmsOwner:
    """Everything a JmsSubscription and its thread may use of their connector."""

    def __init__(self) -> None:
        self.name = "jms"
        self.reactor = FakeReactor()
        self.settings: Any = None
        self.metrics = StompBrokerMetrics.for_registry(CollectorRegistry())
        self.forgotten: list[JmsSubscription] = []
        self.closing: list[Deferred[None]] = []
        self.lost_links: list[tuple[Any, str]] = []

    def jpype(self) -> Any:
        return NoJvm

    def forget(self, subscription: JmsSubscription) -> None:
        self.forgotten.append(subscription)

    def closing_durable(self, subscription: JmsSubscription, closing: Deferred[None]) -> None:
        self.closing.append(closing)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        return succeed(None)

    def lost(self, link: Any, reason: str) -> None:
        self.lost_links.append((link, reason))


class BrokenConnection:
    def createSession(self, transacted: bool, mode: int) -> Any:
        raise RuntimeError("connection reset")


class FakeLink:
    connection = BrokenConnection()
    api = None


@pytest.mark.timeout(30)
def test_a_jms_subscription_reports_a_failed_session_as_a_lost_link_and_closes_through_its_owner() -> None:
    owner = FakeJmsOwner()
    port: JmsOwner = owner
    subscription = JmsSubscription(port, SubscriptionSpec(destination="/queue/a"), FakeConsumer())
    link = FakeLink()
    outcome: list[Any] = []
    subscription.establish(cast(Link, link)).addBoth(outcome.append)  # (a stand-in: what establish() reads)
    owner.reactor.run_until(lambda: bool(owner.lost_links) and bool(outcome))
    assert owner.lost_links[0][0] is link and "connection reset" in owner.lost_links[0][1]
    assert isinstance(outcome[0], Failure)
    closed: list[Any] = []
    subscription.close().addBoth(closed.append)
    assert owner.forgotten == [subscription] and len(owner.closing) == 1
    owner.reactor.run_until(lambda: bool(closed))
    subscription.thread.join(timeout=10)
    assert closed == [None] and not subscription.thread.is_alive()


# -- the admin endpoint through ObservedGateway --------------------------------------------------


class FakeObservedGateway:
    """The members of ObservedGateway the probes read (the rest would be looked up and fail)."""

    def __init__(self, *, standby: bool, started_at: float | None) -> None:
        self.config = type("Config", (), {"id": "gw-1"})()
        self.role = type("Role", (), {"standby": standby})()
        self.started_at = started_at
        self.connectors: dict[str, Any] = {}
        self.bridges = type("Bridges", (), {"status": staticmethod(lambda: [])})()


def test_the_probes_read_the_gateway_through_its_port() -> None:
    ready: Any = FakeObservedGateway(standby=False, started_at=10.0)
    assert liveness(ready, 12.5)[1]["uptime_seconds"] == 2.5
    assert readiness(ready) == (200, {"status": "UP", "id": "gw-1", "reasons": []})
    standby: Any = FakeObservedGateway(standby=True, started_at=None)
    code, document = readiness(standby)
    assert code == 503 and document["reasons"][0].startswith("standby:")
