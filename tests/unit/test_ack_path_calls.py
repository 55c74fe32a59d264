"""Issue 39: the Python calls one ACK makes between the decoded frame and the broker's queue.

An ACK with its ``id`` alone (STOMP 1.2, no receipt, no transaction) of a client-individual
delivery, or of the oldest delivery of a client subscription, is settled and acknowledged in one
call of the ack ledger (:meth:`gateway.stomp.ack_ledger.AckLedger.ack_key`) and one of the queue
subscription (``acknowledge_one``).  The calls are counted with :func:`sys.setprofile` (as
tests/unit/test_send_path_calls.py does for a SEND); the other tests check that what the client
and the next consumer see is unchanged, on the quick path and off it
(tests/unit/test_session_acks.py has the rest)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.stomp.ack_ledger import AckLedger
from gateway.stomp.subscriptions import StompSubscription
from tests.unit.test_send_path_calls import python_calls
from tests.unit.test_session import Peer, connect, make_factory
from tests.unit.test_session_acks import left_over, send, subscribed

ACK_SIDE = ("gateway.stomp.", "gateway.broker.", "gateway.deferreds")
"""The modules of an ACK's way after the decoder and the protocol's frame loop."""

QUICK = [
    "gateway.stomp.session:frame_received",
    "gateway.stomp.ack_ledger:ack_key",
    "gateway.broker.queue:acknowledge_one",
    "gateway.broker.broker:consumed",
]
"""An id-only ACK of a non-persistent message that frees credit nobody waits for: no ``_on_ack``
handler, no ``settle``,
``settle_key``, ``apply_acks``, list ``acknowledge``, ``gather`` or ``succeed``, and no
``dispatch`` of a queue with nothing pending."""


def _ack_side(called: list[str]) -> list[str]:
    return [name for name in called if name.startswith(ACK_SIDE)]


@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_an_id_only_ack_makes_only_the_calls_it_needs(clock: Clock, broker: EmbeddedBroker, mode: str) -> None:
    consumer = subscribed(broker, clock, mode)
    send(broker, clock, "m1", "m2")
    first, _second = consumer.received()
    session = consumer.protocol.session
    assert session is not None
    with python_calls() as called:
        session.frame_received(type(first)("ACK", {"id": first.headers["ack"]}))
    assert _ack_side(called) == QUICK
    assert consumer.received() == []
    assert left_over(broker, clock, consumer) == [(b"m2", "true")]


@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_the_credit_an_id_only_ack_frees_is_used_at_once(clock: Clock, broker: EmbeddedBroker, mode: str) -> None:
    """With a message pending (prefetch 1), the ACK dispatches it."""
    consumer = subscribed(broker, clock, mode, prefetch=1)
    send(broker, clock, "m1", "m2")
    [first] = consumer.received()
    session = consumer.protocol.session
    assert session is not None
    with python_calls() as called:
        session.frame_received(type(first)("ACK", {"id": first.headers["ack"]}))
    assert "gateway.broker.queue:dispatch" in called
    assert [frame.body for frame in consumer.received()] == [b"m2"]


@pytest.mark.parametrize(("headers", "message"), [
    ({"receipt": "r"}, "missing id header"),  # (no id: the general path's error, its receipt id shown)
    ({"id": "nothing"}, "unknown ack id"),
    ({"id": "nothing", "receipt": "r"}, "unknown ack id"),
])
def test_an_ack_naming_nothing_is_an_error(clock: Clock, broker: EmbeddedBroker, headers: dict[str, str],
                                           message: str) -> None:
    consumer = subscribed(broker, clock, "client")
    consumer.send("ACK", headers)
    [error] = consumer.received()
    assert error.command == "ERROR" and error.headers["message"].startswith(message)
    assert error.headers.get("receipt-id") == headers.get("receipt")


def test_an_ack_before_connect_is_refused() -> None:
    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    try:
        peer = Peer(make_factory(clock, broker))
        peer.send("ACK", {"id": "x"})
        [error] = peer.received()
        assert error.command == "ERROR" and error.headers["message"] == "not connected"
    finally:
        broker.stop()


@pytest.mark.parametrize(("mode", "which", "expected"), [
    ("client", 1, [(b"m3", "true")]),  # (cumulative past the oldest: the general path, m1 and m2)
    ("client-individual", 1, [(b"m1", "true"), (b"m3", "true")]),
])
def test_an_ack_off_the_quick_path_settles_as_before(
    clock: Clock, broker: EmbeddedBroker, mode: str, which: int, expected: list[tuple[bytes, str]]
) -> None:
    consumer = subscribed(broker, clock, mode)
    send(broker, clock, "m1", "m2", "m3")
    messages = consumer.received()
    consumer.send("ACK", {"id": messages[which].headers["ack"], "receipt": "r"})
    assert [(f.command, f.headers.get("receipt-id")) for f in consumer.received()] == [("RECEIPT", "r")]
    assert left_over(broker, clock, consumer) == expected


@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_a_second_ack_of_one_delivery_is_an_error(clock: Clock, broker: EmbeddedBroker, mode: str) -> None:
    consumer = subscribed(broker, clock, mode)
    send(broker, clock, "m1", "m2")
    first, _second = consumer.received()
    consumer.send("ACK", {"id": first.headers["ack"]})
    consumer.send("ACK", {"id": first.headers["ack"]})
    [error] = consumer.received()
    assert error.command == "ERROR" and error.headers["message"] == "unknown ack id"


def test_a_wildcard_subscription_acknowledges_through_its_list_method(clock: Clock, broker: EmbeddedBroker) -> None:
    """A wildcard queue subscription has ``acknowledge`` (IImmediateAcks) but no ``acknowledge_one``:
    the session acknowledges one tag through it."""
    consumer = Peer(make_factory(clock, broker))
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/w.*", "id": "s", "ack": "client-individual"})
    producer = Peer(make_factory(clock, broker))
    connect(producer)
    for name in ("w.a", "w.b"):
        producer.send("SEND", {"destination": f"/queue/{name}"}, name.encode())
    first, second = consumer.received()
    consumer.send("ACK", {"id": second.headers["ack"]})
    assert consumer.received() == []
    consumer.protocol.connectionLost()
    after = Peer(make_factory(clock, broker))
    connect(after)
    after.send("SUBSCRIBE", {"destination": "/queue/w.*", "id": "t"})
    assert [frame.body for frame in after.received()] == [first.body]


class Plain:
    """A connector's subscription without IImmediateAcks (what ActiveMQ's and Kafka's are): ack and nack only."""

    def __init__(self) -> None:
        self.acked: list[list[Any]] = []

    def ack(self, tags: list[Any]) -> Deferred[Any]:
        self.acked.append(tags)
        return succeed(None)

    def nack(self, tags: list[Any]) -> Deferred[Any]:
        raise AssertionError("no NACK here")


class _Owner:
    def deliver(self, subscription: Any, message: Any, tag: Any) -> bool:
        return True

    def fail(self, error: Exception) -> None:
        raise AssertionError(error)


@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_a_connector_without_immediate_acks_is_asked_for_a_deferred(mode: str) -> None:
    subscription = StompSubscription(_Owner(), "s", "/queue/a", mode)  # type: ignore[arg-type]
    live = Plain()
    subscription.attach(live)  # type: ignore[arg-type]
    assert subscription.acknowledge_one is None
    ledger: AckLedger[StompSubscription] = AckLedger("c1")
    first, second = (ledger.delivered(subscription, tag, f"ID:{tag}", "1.2") or "" for tag in (10, 11))
    if mode == "client":  # (not the oldest: the general path answers it, nothing changed here)
        assert ledger.ack_key(second) is False
        assert live.acked == [] and len(ledger) == 2
    else:
        assert isinstance(ledger.ack_key(second), Deferred)
        assert live.acked == [[11]] and len(ledger) == 1
    assert isinstance(ledger.ack_key(first), Deferred)
    assert live.acked[-1] == [10]
    assert ledger.ack_key(first) is False and ledger.ack_key("") is False
