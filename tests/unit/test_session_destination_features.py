"""The STOMP session's side of issue 37's destination features: headers read, a target without
the capability refused with an ERROR, a wildcard MESSAGE showing its own topic."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.interfaces import Capability
from tests.unit.test_session import Peer, connect, make_factory


@pytest.mark.parametrize(("command", "headers", "refused"), [
    ("SUBSCRIBE", {"destination": "/queue/a", "activemq.exclusive": "true"}, "activemq.exclusive:true"),
    ("SUBSCRIBE", {"destination": "/queue/a", "browser": "true"}, "browser:true"),
    ("SUBSCRIBE", {"destination": "/topic/a.*"}, "a wildcard destination"),
    ("SUBSCRIBE", {"destination": "/queue/a.>"}, "a wildcard destination"),
    ("SEND", {"destination": "/queue/a,/topic/b"}, "composite destinations"),
])
def test_a_target_without_the_capability_refuses_with_an_error(
    clock: Clock, broker: EmbeddedBroker, command: str, headers: dict[str, str], refused: str
) -> None:
    broker.capabilities = frozenset({Capability.NACK})
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.send(command, {"id": "s", **headers})
    (error,) = peer.received()
    assert error.command == "ERROR" and refused in error.headers["message"] + error.body.decode()
    assert not broker.queues.get("/queue/a") or not broker.queues["/queue/a"].messages()


def test_a_wildcard_message_shows_its_own_topic(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.send("SUBSCRIBE", {"destination": "/topic/orders.>", "id": "w", "receipt": "r"})
    peer.send("SUBSCRIBE", {"destination": "/topic/orders.eu", "id": "e"})
    peer.send("SEND", {"destination": "/topic/orders.eu"}, b"x")
    frames = [f for f in peer.received() if f.command == "MESSAGE"]
    assert sorted((f.headers["subscription"], f.headers["destination"]) for f in frames) == [
        ("e", "/topic/orders.eu"), ("w", "/topic/orders.eu")]


@pytest.mark.parametrize("destination", ["/queue/a,,/queue/b", "/queue/a,/temp-queue/x", "/queue/a,/nowhere/b"])
def test_a_bad_composite_gets_an_error_naming_it(clock: Clock, broker: EmbeddedBroker, destination: str) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.send("SEND", {"destination": destination, "receipt": "r"}, b"x")
    (error,) = peer.received()
    assert error.command == "ERROR" and error.headers["message"] == "invalid composite destination"
    assert destination in error.body.decode()


def test_a_wildcard_queue_message_shows_its_own_queue_and_is_acknowledged(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.send("SUBSCRIBE", {"destination": "/queue/orders.>", "id": "w", "ack": "client-individual"})
    peer.send("SEND", {"destination": "/queue/orders.eu"}, b"x")
    peer.send("SEND", {"destination": "/queue/orders.us"}, b"y")
    frames = [f for f in peer.received() if f.command == "MESSAGE"]
    assert sorted(f.headers["destination"] for f in frames) == ["/queue/orders.eu", "/queue/orders.us"]
    for frame in frames:
        peer.send("ACK", {"id": frame.headers["ack"]})
    assert not [f for f in peer.received() if f.command == "ERROR"]
    assert not broker.queues["/queue/orders.eu"].messages() and not broker.queues["/queue/orders.us"].messages()


def test_a_wildcard_message_has_the_headers_of_a_plain_one(clock: Clock, broker: EmbeddedBroker) -> None:
    """Wildcard deliveries take the shared encoder (its destination line following each message):
    the same frame as the plain subscriber's but for ``subscription``, topic after topic."""
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.send("SUBSCRIBE", {"destination": "/topic/orders.>", "id": "w"})
    for topic in ("/topic/orders.eu", "/topic/orders.us", "/topic/orders.eu"):
        peer.send("SUBSCRIBE", {"destination": topic, "id": "p", "receipt": "r"})
        peer.send("SEND", {"destination": topic, "colour": "blue", "correlation-id": "c"}, b"x")
        peer.send("UNSUBSCRIBE", {"id": "p"})
        frames = {f.headers["subscription"]: f for f in peer.received() if f.command == "MESSAGE"}
        wild, plain = frames["w"], frames["p"]
        assert wild.headers["destination"] == topic and wild.body == plain.body == b"x"
        assert {**wild.headers, "subscription": "p"} == plain.headers
