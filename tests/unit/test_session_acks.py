"""ACK frames that carry their ``id`` alone (STOMP 1.2, no receipt, no transaction): the session
settles them without the general path's list of keys, and without a Deferred when the embedded
broker's subscription needs none (:class:`gateway.interfaces.IImmediateAcks`).  What a client sees
must not change: cumulative ``client`` acks, prefetch credit, redelivery of what is left
unacknowledged, errors for ids that name nothing, and a DISCONNECT receipt that waits for a stored
message's removal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from zope.interface import implementer
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.memory_store import MemoryStore
from gateway.errors import StoreError
from gateway.interfaces import IImmediateAcks, IMessageStore
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect, make_factory


def subscribed(broker: EmbeddedBroker, clock: Clock, ack: str, prefetch: int = 100) -> Peer:
    consumer = Peer(make_factory(clock, broker))
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/a", "id": "s", "ack": ack,
                                "activemq.prefetchSize": str(prefetch), "receipt": "sub"})
    assert [frame.command for frame in consumer.received()] == ["RECEIPT"]
    return consumer


def send(broker: EmbeddedBroker, clock: Clock, *bodies: str, persistent: bool = False) -> None:
    producer = Peer(make_factory(clock, broker))
    connect(producer)
    for body in bodies:
        producer.send("SEND", {"destination": "/queue/a", "persistent": str(persistent).lower()}, body.encode())
    assert producer.received() == []


def left_over(broker: EmbeddedBroker, clock: Clock, consumer: Peer) -> list[tuple[bytes, str | None]]:
    """The consumer goes away; what the next one gets (body, redelivered header)."""
    consumer.protocol.connectionLost()
    after = Peer(make_factory(clock, broker))
    connect(after)
    after.send("SUBSCRIBE", {"destination": "/queue/a", "id": "t"})
    return [(frame.body, frame.headers.get("redelivered")) for frame in after.received()]


def test_the_embedded_broker_acknowledges_without_a_deferred(clock: Clock, broker: EmbeddedBroker) -> None:
    consumer = subscribed(broker, clock, "client-individual")
    assert consumer.protocol.session is not None
    live = consumer.protocol.session.subscriptions["s"].subscription
    assert verifyObject(IImmediateAcks, live)
    send(broker, clock, "m1")
    [message] = consumer.received()
    tag = next(iter(live.unacked))  # type: ignore[union-attr]
    assert live.acknowledge([tag]) is None  # type: ignore[union-attr]
    assert message.command == "MESSAGE"
    assert broker.status()["queues"]["/queue/a"]["inflight"] == 0


def acked_one_of_three(broker: EmbeddedBroker, clock: Clock, mode: str, which: int) -> Peer:
    """A ``mode`` consumer of m1, m2, m3 that sent an id-only ACK of delivery ``which`` (answered by nothing)."""
    consumer = subscribed(broker, clock, mode)
    send(broker, clock, "m1", "m2", "m3")
    messages = consumer.received()
    consumer.send("ACK", {"id": messages[which].headers["ack"]})
    assert consumer.received() == []
    return consumer


@pytest.mark.parametrize("which", [0, 1, 2])
def test_an_id_only_client_ack_settles_that_delivery_and_every_earlier_one(
    clock: Clock, broker: EmbeddedBroker, which: int
) -> None:
    consumer = acked_one_of_three(broker, clock, "client", which)
    assert broker.status()["queues"]["/queue/a"]["inflight"] == 2 - which
    assert left_over(broker, clock, consumer) == [(f"m{n}".encode(), "true") for n in range(which + 2, 4)]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_an_id_only_client_individual_ack_settles_that_delivery_alone(
    clock: Clock, broker: EmbeddedBroker, which: int
) -> None:
    consumer = acked_one_of_three(broker, clock, "client-individual", which)
    assert broker.status()["queues"]["/queue/a"]["inflight"] == 2
    assert left_over(broker, clock, consumer) == [
        (f"m{n}".encode(), "true") for n in range(1, 4) if n != which + 1]


def test_client_acks_of_each_delivery_in_turn_leave_nothing(clock: Clock, broker: EmbeddedBroker) -> None:
    consumer = subscribed(broker, clock, "client")
    send(broker, clock, *(f"m{n}" for n in range(5)))
    for message in consumer.received():
        consumer.send("ACK", {"id": message.headers["ack"]})
    assert consumer.received() == []
    assert broker.status()["queues"]["/queue/a"] == {"pending": 0, "consumers": 1, "inflight": 0}
    session = consumer.protocol.session
    assert session is not None and len(session.acks) == 0 and not session.subscriptions["s"].unacked
    assert left_over(broker, clock, consumer) == []


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_an_id_only_ack_frees_prefetch_credit(clock: Clock, broker: EmbeddedBroker, ack: str) -> None:
    consumer = subscribed(broker, clock, ack, prefetch=1)
    send(broker, clock, "m1", "m2")
    [first] = consumer.received()
    consumer.send("ACK", {"id": first.headers["ack"]})
    [second] = consumer.received()
    assert (first.body, second.body) == (b"m1", b"m2")


@pytest.mark.parametrize("ack", ["client", "client-individual"])
@pytest.mark.parametrize("again", ["settled", "unknown", "empty"])
def test_an_id_only_ack_naming_no_unacknowledged_delivery_is_an_error(
    clock: Clock, broker: EmbeddedBroker, ack: str, again: str
) -> None:
    consumer = subscribed(broker, clock, ack)
    send(broker, clock, "m1", "m2")
    first, _ = consumer.received()
    consumer.send("ACK", {"id": first.headers["ack"]})
    ack_id = {"settled": first.headers["ack"], "unknown": "jmsgw-0-0", "empty": ""}[again]
    consumer.send("ACK", {"id": ack_id})
    [error] = consumer.received()
    assert error.command == "ERROR"
    assert error.headers["message"] == ("missing id header" if again == "empty" else "unknown ack id")
    assert consumer.closed


@implementer(IMessageStore)
class HeldRemovals:
    """A store (not a :class:`MemoryStore`, so the broker writes to it) whose removals wait for the test."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.removals: list[Deferred[None]] = []

    def remove(self, queue: str, message_id: str) -> Deferred[None]:
        held: Deferred[None] = Deferred()
        self.removals.append(held)
        return held

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.fixture
def held() -> HeldRemovals:
    return HeldRemovals()


@pytest.fixture
def stored_broker(clock: Clock, held: HeldRemovals) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(clock, BrokerSettings(), held)
    broker.start()
    yield broker
    broker.stop()


def acked_stored(broker: EmbeddedBroker, clock: Clock, mode: str) -> Peer:
    """A ``mode`` consumer that sent an id-only ACK of one persistent message (its store removal is held)."""
    consumer = subscribed(broker, clock, mode)
    send(broker, clock, "m1", persistent=True)
    [message] = consumer.received()
    consumer.send("ACK", {"id": message.headers["ack"]})
    return consumer


def test_a_disconnect_receipt_waits_for_the_removal_an_id_only_ack_started(
    clock: Clock, stored_broker: EmbeddedBroker, held: HeldRemovals
) -> None:
    consumer = acked_stored(stored_broker, clock, "client-individual")
    assert len(held.removals) == 1
    consumer.send("DISCONNECT", {"receipt": "bye"})
    assert consumer.received() == []
    held.removals[0].callback(None)
    assert consumer.received() == [Frame("RECEIPT", {"receipt-id": "bye"})]


def test_a_removal_an_id_only_ack_started_that_fails_is_an_error(
    clock: Clock, stored_broker: EmbeddedBroker, held: HeldRemovals
) -> None:
    consumer = acked_stored(stored_broker, clock, "client")
    assert consumer.received() == []
    held.removals[0].errback(StoreError("disk gone"))
    [error] = consumer.received()
    assert error.command == "ERROR"
    assert error.headers["message"] == "message store failure"
    assert b"disk gone" in error.body
