"""Authorization judges the resolved target (issue 33 #9): every name routed to one target needs
the grant - Kafka's /queue/ and /topic/ forms of a topic, and names two renaming rules send to one
connector-side name."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from zope.interface import implementer

from gateway.broker.broker import EmbeddedBroker
from gateway.connectors.kafka import topic_for_destination
from gateway.interfaces import IConnector, IDestinationAliases
from gateway.routing.config import DestinationRule
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import build_portal
from gateway.security.authorization import DestinationAuthorizer, parse_authorization
from gateway.security.settings import AuthSettings
from gateway.stomp.protocol import StompServerFactory
from tests.unit.test_session import Peer, connect


@implementer(IConnector, IDestinationAliases)
class TopicLog:
    """Stands for the Kafka connector: names map to topics as Kafka's do; sends are kept."""

    name = "kafka"

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def target_of(self, destination: str) -> str | None:
        return topic_for_destination(destination)

    def names_for(self, target: str) -> tuple[str, ...]:
        return (f"/queue/kafka.{target}", f"/topic/kafka.{target}", f"/queue/{target}", f"/topic/{target}")

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def send(self, message: Any) -> Any:
        from twisted.internet.defer import succeed

        self.sent.append(message)
        return succeed(None)
    def send_batch(self, messages: Any) -> Any: ...
    def subscribe(self, spec: Any, consumer: Any) -> Any: ...
    def browse(self, destination: str, limit: int) -> Any: ...
    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Any: ...
    def capabilities(self) -> Any: ...


KAFKA_RULES = [DestinationRule(pattern="/queue/kafka.*", connector="kafka"),
               DestinationRule(pattern="/topic/kafka.*", connector="kafka")]


def test_kafka_names_of_one_topic_are_aliases(broker: EmbeddedBroker) -> None:
    destinations = DestinationMap({"embedded": broker, "kafka": TopicLog()}, KAFKA_RULES)
    assert set(destinations.aliases("/topic/kafka.orders")) == {"/topic/kafka.orders", "/queue/kafka.orders"}
    assert destinations.aliases("/queue/kafka.orders")[0] == "/queue/kafka.orders"
    # /queue/orders is the embedded broker's own queue, not the topic: no alias
    assert "/queue/orders" not in destinations.aliases("/queue/kafka.orders")
    assert destinations.aliases("/queue/plain") == ("/queue/plain",)


def test_names_renamed_to_one_target_are_aliases(broker: EmbeddedBroker) -> None:
    rules = [DestinationRule(pattern="/queue/a.*", connector="embedded", rename="/queue/x."),
             DestinationRule(pattern="/queue/b.*", connector="embedded", rename="/queue/x.")]
    destinations = DestinationMap({"embedded": broker}, rules)
    # (and /queue/x.1 itself: no rule takes it elsewhere, so it is that queue of the embedded broker)
    assert set(destinations.aliases("/queue/a.1")) == {"/queue/a.1", "/queue/b.1", "/queue/x.1"}


def test_an_entry_on_one_alias_alone_does_not_open_the_topic(clock: Clock, broker: EmbeddedBroker) -> None:
    """eve may read /topic/kafka.* but not /queue/kafka.orders: she cannot read topic orders at all."""
    entries = parse_authorization([
        {"destination": "/queue/kafka.orders", "read": ["alice"], "write": ["alice"]},
        {"destination": "/topic/kafka.*", "read": ["alice", "eve"], "write": ["alice"]},
    ], {})
    kafka = TopicLog()
    portal = build_portal(AuthSettings(users={"alice": "a-pw", "eve": "e-pw"}, allow_weak_passwords=True))
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker, "kafka": kafka}, KAFKA_RULES),
                                 portal=portal, authorizer=DestinationAuthorizer(entries))
    eve = Peer(factory)
    connect(eve, login="eve", passcode="e-pw")
    eve.send("SUBSCRIBE", {"destination": "/topic/kafka.orders", "id": "1", "receipt": "r"})
    [error] = eve.received()
    assert error.headers["message"] == "not authorized to read /topic/kafka.orders"
    assert b"/queue/kafka.orders, which reaches the same target" in error.body
    eve.send("SEND", {"destination": "/topic/kafka.news", "receipt": "s"}, b"x")
    assert eve.received()[0].headers["message"] == "not authorized to write /topic/kafka.news"
    alice = Peer(factory)
    connect(alice, login="alice", passcode="a-pw")
    alice.send("SEND", {"destination": "/topic/kafka.orders", "receipt": "s"}, b"x")
    assert [f.command for f in alice.received()] == ["RECEIPT"]
    assert len(kafka.sent) == 1
