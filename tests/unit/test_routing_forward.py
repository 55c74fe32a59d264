"""KafkaRouter.forward: a plain SEND routed without a JMS message (fake connector).

What is forwarded is the record ``post`` would publish for the same SEND
(frame_record's own differential test holds the conversion equal); here:
which route a destination takes, when forward declines so the message path
decides (a route that needs the message, a stopped route, the cycle guard,
a missing key), and that metrics and failures are handled as for ``post``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import StompProtocolError
from gateway.interfaces import IFrameForwarder
from gateway.message.convert import frame_to_message
from gateway.message.kafka_delivery import DeliveryReport, KafkaDeliveryError
from gateway.routing.config import DestinationRule, parse_routing_config
from gateway.routing.destination_map import DestinationMap
from gateway.routing.service import KafkaRouter
from gateway.stomp import sending as sending_module
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.settings import StompSettings
from gateway.wire.frame import Frame
from tests.unit.test_routing_service import FakeKafka, sample
from tests.unit.test_session import Peer, connect

ROUTES = """
routes.foo.in.include=msg.address==foo
routes.foo.out.topic=foo-topic
routes.foo.conv.key=msg.header.CorrelationId
routes.bar.in.include=msg.address==/queue/bar
routes.bar.out.topic=bar-topic
routes.red.in.include=msg.address==red
routes.red.in.selector=color = 'red'
routes.red.out.topic=red-topic
routes.hdr.in.include=msg.header.kind==x
routes.hdr.out.topic=hdr-topic
routes.late.in.include=msg.address==late
routes.late.out.topic=late-topic
"""


def make() -> tuple[KafkaRouter, FakeKafka, Clock, CollectorRegistry]:
    kafka, clock, registry = FakeKafka(), Clock(), CollectorRegistry()
    router = KafkaRouter(parse_routing_config({"properties": ROUTES}), kafka,
                         origin="gw-1", clock=clock, registry=registry)
    return router, kafka, clock, registry


class Outcomes(list[Any]):
    def settled(self, error: Exception | None, record: Any) -> None:
        self.append(error if error is not None else record.offset())


def forward(router: KafkaRouter, destination: str, outcomes: Outcomes, body: bytes = b"x",
            headers: Mapping[str, str] | None = None, **more_headers: str) -> bool:
    return router.forward(destination, {"destination": destination, **(headers or {}), **more_headers}, body, False,
                          outcomes.settled)


def test_provides_iframeforwarder() -> None:
    verifyObject(IFrameForwarder, make()[0])


def test_forwarded_record_is_the_one_post_publishes() -> None:
    router, kafka, _, _ = make()
    headers = {"destination": "/queue/foo", "correlation-id": "k1", "region": "eu", "persistent": "true"}
    assert router.forward("/queue/foo", headers, b"order", False, Outcomes().settled)
    router.post(frame_to_message(Frame("SEND", headers, b"order")), Outcomes().settled)
    (topic, key, value, forwarded, _), (topic2, key2, value2, posted, _) = kafka.sent
    assert (topic, key, value) == (topic2, key2, value2) == ("foo-topic", b"k1", b"order")
    volatile = {"jms.MessageId", "jms.Timestamp"}
    assert [h for h in forwarded if h[0] not in volatile] == [h for h in posted if h[0] not in volatile]
    assert [h[0] for h in forwarded] == [h[0] for h in posted]


def test_settles_on_the_delivery_report_and_counts() -> None:
    router, kafka, clock, registry = make()
    outcomes = Outcomes()
    assert forward(router, "/queue/bar", outcomes)
    assert outcomes == []  # nothing before Kafka acknowledged
    clock.advance(0.004)
    kafka.sent[0][4].callback(DeliveryReport("bar-topic", 0, 7))
    assert outcomes == [7]
    assert sample(registry, "jmsgateway_routing_success_total", route="bar") == 1
    assert sample(registry, "jmsgateway_routing_latency_seconds_bucket", route="bar", le="0.005") == 1


def test_routes_the_destination_alone_decides() -> None:
    router, _, _, _ = make()
    assert router.forward_route("/queue/foo").name == "foo"  # type: ignore[union-attr]
    assert router.forward_route("/topic/foo").name == "foo"  # type: ignore[union-attr]
    assert router.forward_route("/queue/bar").name == "bar"  # type: ignore[union-attr]
    assert router.forward_route("/topic/bar") is None  # the selector route after bar must see the message
    assert router.forward_route("/queue/red") is None  # a selector must see the message
    assert router.forward_route("/queue/late") is None  # a header route comes first


def test_declines_what_the_message_path_must_decide() -> None:
    router, kafka, _, _ = make()
    outcomes = Outcomes()
    assert not forward(router, "/queue/red", outcomes, color="red")
    assert not forward(router, "/queue/nowhere", outcomes)
    assert not forward(router, "/queue/foo", outcomes)  # no key: the route's soft-failure policy
    assert not forward(router, "/queue/bar", outcomes, headers={"jmsbridge.origin": "gw-1"})  # the cycle guard
    assert not forward(router, "/queue/bar", outcomes, headers={"amq-msg-type": "text"})
    router.stopped_routes["bar"] = "stopped for the test"
    assert not forward(router, "/queue/bar", outcomes)
    router.restart()
    router.stopped = "all stopped for the test"
    assert not forward(router, "/queue/bar", outcomes)
    assert kafka.sent == [] and outcomes == []


def test_bad_header_raises_before_anything_is_sent() -> None:
    router, kafka, _, _ = make()
    try:
        forward(router, "/queue/bar", Outcomes(), priority="high")
    except StompProtocolError as error:
        assert error.message == "invalid priority header"
    else:
        raise AssertionError("a bad priority header must raise")
    assert kafka.sent == []


def test_failures_count_and_a_hard_one_stops_routing() -> None:
    router, kafka, _, registry = make()
    outcomes = Outcomes()
    forward(router, "/queue/bar", outcomes)
    kafka.sent[0][4].errback(KafkaDeliveryError("timed out", code="_MSG_TIMED_OUT", topic="bar-topic"))
    assert router.stopped is None
    forward(router, "/queue/bar", outcomes)
    kafka.sent[1][4].errback(KafkaDeliveryError("no such topic", code="UNKNOWN_TOPIC_OR_PART", topic="bar-topic"))
    assert [type(o) for o in outcomes] == [KafkaDeliveryError, KafkaDeliveryError]
    assert router.stopped is not None and "UNKNOWN_TOPIC_OR_PART" in router.stopped
    assert sample(registry, "jmsgateway_routing_failures_total", route="bar", kind="_MSG_TIMED_OUT") == 1
    assert not forward(router, "/queue/bar", outcomes)  # stopped: the message path gives the ERROR


def test_the_session_forwards_plain_sends_and_receipts_after_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the STOMP session: a plain SEND is forwarded (no message built), a receipted
    one takes the message path; the RECEIPT waits for Kafka's report."""
    router, kafka, clock, _ = make()
    embedded = EmbeddedBroker(clock)
    embedded.start()
    destinations = DestinationMap({"embedded": embedded, "kafka": router},
                                  [DestinationRule(pattern="/queue/kafka.*", connector="kafka", rename="/queue/")])
    peer = Peer(StompServerFactory(clock, destinations, settings=StompSettings()))
    connect(peer)
    real = frame_to_message  # (the function the sending module imported)
    built: list[Frame] = []

    def counted(frame: Frame, **options: Any) -> Any:
        built.append(frame)
        return real(frame, **options)

    monkeypatch.setattr(sending_module, "frame_to_message", counted)
    peer.send("SEND", {"destination": "/queue/kafka.bar", "region": "eu"}, b"plain")
    peer.send("SEND", {"destination": "/queue/kafka.bar", "receipt": "r1"}, b"receipted")
    clock.advance(0)
    assert [frame.body for frame in built] == [b"receipted"]
    assert [(topic, value) for topic, _, value, _, _ in kafka.sent] == [("bar-topic", b"plain"),
                                                                        ("bar-topic", b"receipted")]
    assert ("jms.Destination", b"/queue/bar") in kafka.sent[0][3]
    assert peer.received() == []
    kafka.sent[0][4].callback(DeliveryReport("bar-topic", 0, 0))
    kafka.sent[1][4].callback(DeliveryReport("bar-topic", 0, 1))
    assert [frame.headers.get("receipt-id") for frame in peer.received()] == ["r1"]
    peer.send("SEND", {"destination": "/queue/kafka.bar", "priority": "high"}, b"bad")
    (error,) = peer.received()
    assert error.command == "ERROR" and error.headers["message"] == "invalid priority header"
    assert len(kafka.sent) == 2
