"""The STOMP session's security rules (issue 33), over StringTransport with a Clock:
the verified sender identity stamped on every SEND and durable subscriptions owned by
the login that created them."""

from __future__ import annotations

from twisted.internet.task import Clock

from gateway.auth import build_portal
from gateway.broker.broker import EmbeddedBroker
from gateway.config import AuthSettings
from gateway.connectors.destination_map import DestinationMap
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.sender_identity import stamp_sender
from tests.unit.test_session import Peer, connect

FORGED = {"JMSXUserID": "root", "user-id": "root", "login": "root", "passcode": "guess"}


def secured_factory(clock: Clock, broker: EmbeddedBroker) -> StompServerFactory:
    portal = build_portal(AuthSettings(users={"alice": "a-pw", "eve": "e-pw"}, allow_weak_passwords=True))
    return StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=portal)


def received_message(consumer: Peer) -> dict[str, str]:
    [message] = consumer.received()
    assert message.command == "MESSAGE", message
    return message.headers


def test_stamp_sender_overwrites_claims_and_drops_credentials() -> None:
    headers = {"destination": "/queue/a", **FORGED}
    stamp_sender(headers, "eve")
    assert headers == {"destination": "/queue/a", "JMSXUserID": "eve", "user-id": "eve"}
    headers = {"destination": "/queue/a", **FORGED}
    stamp_sender(headers, None)
    assert headers == {"destination": "/queue/a"}


def test_authenticated_sender_is_stamped_whatever_it_claims(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker)
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer, login="alice", passcode="a-pw")
    consumer.send("SUBSCRIBE", {"destination": "/queue/id", "id": "s"})
    connect(producer, login="eve", passcode="e-pw")
    producer.send("SEND", {"destination": "/queue/id", **FORGED}, b"hi")
    headers = received_message(consumer)
    assert headers["JMSXUserID"] == "eve"
    assert headers["user-id"] == "eve"
    assert "login" not in headers and "passcode" not in headers


def test_identity_claims_are_removed_without_authentication(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}))
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/id", "id": "s"})
    connect(producer, login="root")
    producer.send("SEND", {"destination": "/queue/id", **FORGED}, b"hi")
    headers = received_message(consumer)
    assert not {"JMSXUserID", "user-id", "login", "passcode"} & set(headers)


def test_transactional_sends_are_stamped(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker)
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer, login="alice", passcode="a-pw")
    consumer.send("SUBSCRIBE", {"destination": "/queue/tx", "id": "s"})
    connect(producer, login="eve", passcode="e-pw")
    producer.send("BEGIN", {"transaction": "t"})
    producer.send("SEND", {"destination": "/queue/tx", "transaction": "t", **FORGED}, b"hi")
    producer.send("COMMIT", {"transaction": "t"})
    assert received_message(consumer)["JMSXUserID"] == "eve"
