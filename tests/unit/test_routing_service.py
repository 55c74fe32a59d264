"""KafkaRouter with a fake connector: failure policies, hard stops, metrics."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from gateway.errors import ConnectorUnavailable, DestinationError
from gateway.flow import Congestion
from gateway.interfaces import Capability, IConnector, IPostingConnector
from gateway.message.kafka_delivery import DeliveryReport, KafkaDeliveryError
from gateway.message.model import MapMessage, TextMessage
from gateway.routing.config import parse_routing_config
from gateway.routing.service import KafkaRouter, RouteStopped, RoutingResult

ROUTES = """
routing.dead-letter-topic=dlq
routes.foo.in.include=msg.address==foo
routes.foo.out.topic=foo-topic
routes.foo.conv.key=msg.header.CorrelationId
routes.bar.in.include=msg.address==bar
routes.bar.out.topic=bar-topic
"""


class FakeKafka:
    """Records sends; each returns a Deferred the test fires."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, list[Any], Deferred[Any]]] = []
        self.congestion = Congestion("fake kafka")
        self.capabilities: frozenset[Capability] = frozenset()

    def send_record(self, topic: str, key: bytes | None, value: bytes | None, headers: Any = ()) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.sent.append((topic, key, value, list(headers), d))
        return d

    def produce(self, topic: str, key: bytes | None, value: bytes | None, headers: list[Any], settled: Any) -> None:
        """The connector's Deferred-free produce: ``settled`` runs when the test fires the recorded Deferred."""
        d = self.send_record(topic, key, value, headers)
        d.addCallbacks(lambda report: settled(None, FakeRecord(report)), lambda failure: settled(failure.value, None))

    def send_records(self, records: list[Any]) -> Deferred[Any]:
        self.batches = records
        return succeed([])

    def start(self) -> Deferred[None]:
        return succeed(None)

    def stop(self) -> Deferred[None]:
        return succeed(None)

    def subscribe(self, spec: Any, consumer: Any) -> Deferred[Any]:
        return succeed(None)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        return succeed(None)


class FakeRecord:
    """What confluent-kafka hands a delivery callback, for the parts the router reads."""

    def __init__(self, report: DeliveryReport) -> None:
        self.report = report

    def topic(self) -> str:
        return self.report.topic

    def partition(self) -> int:
        return self.report.partition

    def offset(self) -> int:
        return self.report.offset


def make(extra: str = "") -> tuple[KafkaRouter, FakeKafka, Clock, CollectorRegistry]:
    kafka, clock, registry = FakeKafka(), Clock(), CollectorRegistry()
    config = parse_routing_config({"properties": ROUTES + extra})
    router = KafkaRouter(config, kafka, origin="gw-1", clock=clock, registry=registry)
    return router, kafka, clock, registry


def message(destination: str, correlation: str | None = "k1", **props: Any) -> TextMessage:
    return TextMessage(destination=destination, message_id="ID:1", correlation_id=correlation, text="x",
                       properties=props)


def outcome(d: Deferred[Any]) -> Any:
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    return results[0]


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_provides_iconnector() -> None:
    router, *_ = make()
    verifyObject(IConnector, router)
    verifyObject(IPostingConnector, router)


def test_post_settles_on_the_delivery_report_and_counts() -> None:
    router, kafka, clock, registry = make()
    outcomes: list[Exception | int | None] = []
    router.post(message("/queue/foo"), lambda error, ack: outcomes.append(error or ack.offset()))
    assert outcomes == []  # nothing before Kafka acknowledged
    clock.advance(0.004)
    kafka.sent[0][4].callback(DeliveryReport("foo-topic", 0, 1))
    assert outcomes == [1]
    assert sample(registry, "jmsgateway_routing_success_total", route="foo") == 1
    assert sample(registry, "jmsgateway_routing_latency_seconds_bucket", route="foo", le="0.0025") == 0
    assert sample(registry, "jmsgateway_routing_latency_seconds_bucket", route="foo", le="0.005") == 1


def test_post_reports_failures_and_unrouted_messages() -> None:
    router, kafka, _, registry = make()
    outcomes: list[Exception | None] = []

    def settled(error: Exception | None, ack: Any) -> None:
        assert (error is None) != (ack is None)
        outcomes.append(error)

    router.post(message("/queue/foo"), settled)
    kafka.sent[0][4].errback(KafkaDeliveryError("gone", code="_MSG_TIMED_OUT", topic="foo-topic"))
    router.post(message("/queue/nowhere"), settled)
    router.post(message("/queue/foo", correlation=None), settled)  # soft failure: stops the route
    router.post(message("/queue/foo"), settled)
    assert [type(o) for o in outcomes] == [KafkaDeliveryError, DestinationError, RouteStopped, RouteStopped]
    assert len(kafka.sent) == 1
    assert sample(registry, "jmsgateway_routing_failures_total", route="foo", kind="_MSG_TIMED_OUT") == 1
    assert sample(registry, "jmsgateway_routing_success_total", route="foo") == 0


def test_routed_send_fires_only_on_delivery_report_and_counts() -> None:
    router, kafka, clock, registry = make()
    d = router.send(message("/queue/foo"))
    assert not d.called  # no receipt before Kafka acknowledged
    topic, key, value, headers, pending = kafka.sent[0]
    assert (topic, key, value) == ("foo-topic", b"k1", b"x")
    assert ("jmsbridge.origin", b"gw-1") in headers
    clock.advance(0.25)
    pending.callback(DeliveryReport("foo-topic", 0, 17))
    result = outcome(d)
    assert isinstance(result, RoutingResult) and result.outcome == "routed"
    assert result.report is not None and result.report.offset == 17
    assert sample(registry, "jmsgateway_routing_success_total", route="foo") == 1
    assert sample(registry, "jmsgateway_routing_latency_seconds_count", route="foo") == 1
    assert router.metrics.average_latency("foo") == pytest.approx(0.25)
    assert sample(registry, "jmsgateway_routing_latency_seconds_bucket", route="foo", le="0.25") == 1


def test_soft_failure_stops_the_route_by_default() -> None:
    router, kafka, _, registry = make()
    first = outcome(router.send(message("/queue/foo", correlation=None)))
    assert isinstance(first, Failure) and first.check(RouteStopped)
    assert "foo" in router.stopped_routes and kafka.sent == []
    later = outcome(router.send(message("/queue/foo")))  # a good message: the route is stopped
    assert isinstance(later, Failure) and later.check(RouteStopped)
    other = router.send(message("/queue/bar"))  # other routes go on
    kafka.sent[0][4].callback(DeliveryReport("bar-topic", 0, 0))
    assert outcome(other).outcome == "routed"
    assert sample(registry, "jmsgateway_routing_failures_total", route="foo", kind="no-key") == 1
    router.restart("foo")
    assert "foo" not in router.stopped_routes


def test_skip_policy_logs_and_acknowledges() -> None:
    router, kafka, _, registry = make("routes.foo.on-soft-failure=skip\n")
    result = outcome(router.send(message("/queue/foo", correlation="not ok!")))
    assert result.outcome == "skipped" and kafka.sent == []
    assert sample(registry, "jmsgateway_routing_skipped_total", route="foo") == 1
    assert sample(registry, "jmsgateway_routing_failures_total", route="foo", kind="key-not-alphanumeric") == 1


def test_dead_letter_policy_publishes_to_the_dead_letter_topic() -> None:
    router, kafka, _, registry = make("routing.on-soft-failure=dead-letter\n")
    bad = MapMessage(destination="/queue/foo", message_id="ID:m", correlation_id="k", map={"a": 1})
    d = router.send(bad)
    topic, key, value, headers, pending = kafka.sent[0]
    assert topic == "dlq" and key == b"ID:m" and value == b'{"a": 1}'
    assert dict(headers)["jmsbridge.error"].startswith(b"unsupported-type")
    pending.callback(DeliveryReport("dlq", 0, 3))
    assert outcome(d).outcome == "dead-lettered"
    assert sample(registry, "jmsgateway_routing_dead_lettered_total", route="foo") == 1


def test_dead_letter_failure_is_hard() -> None:
    router, kafka, _, _ = make("routing.on-soft-failure=dead-letter\n")
    d = router.send(message("/queue/foo", correlation=None))
    kafka.sent[0][4].errback(ConnectorUnavailable("broker away"))
    assert outcome(d).check(RouteStopped)
    assert router.stopped is not None and "dead-letter" in router.stopped
    assert outcome(router.send(message("/queue/bar"))).check(RouteStopped)


def test_hard_kafka_error_stops_all_routing() -> None:
    router, kafka, _, registry = make()
    d = router.send(message("/queue/foo"))
    kafka.sent[0][4].errback(KafkaDeliveryError("no such topic", code="UNKNOWN_TOPIC_OR_PART", topic="foo-topic"))
    assert outcome(d).check(KafkaDeliveryError)
    assert router.stopped is not None and "UNKNOWN_TOPIC_OR_PART" in router.stopped
    stopped = outcome(router.send(message("/queue/bar")))
    assert stopped.check(RouteStopped) and "stopped" in stopped.getErrorMessage()
    assert sample(registry, "jmsgateway_routing_failures_total", route="foo", kind="UNKNOWN_TOPIC_OR_PART") == 1
    router.restart()
    assert router.stopped is None


def test_transient_error_fails_the_send_but_keeps_routing() -> None:
    router, kafka, _, _ = make()
    d = router.send(message("/queue/foo"))
    kafka.sent[0][4].errback(KafkaDeliveryError("timed out", code="_MSG_TIMED_OUT"))
    assert outcome(d).check(KafkaDeliveryError)
    assert router.stopped is None and not router.stopped_routes


def test_cycle_guard_and_unrouted() -> None:
    router, kafka, _, registry = make()
    looped = message("/queue/foo", **{"jmsbridge.origin": "gw-1"})
    assert outcome(router.route(looped)).outcome == "cycle"
    assert sample(registry, "jmsgateway_routing_cycles_total") == 1
    assert outcome(router.route(message("/queue/none"))).outcome == "unrouted"
    assert outcome(router.send(message("/queue/none"))).check(DestinationError)
    assert kafka.sent == []


def test_batch_is_decided_before_anything_is_sent() -> None:
    router, kafka, _, _ = make()
    kafka.batches = []
    failed = outcome(router.send_batch([message("/queue/bar"), message("/queue/foo", correlation=None)]))
    assert failed.check(RouteStopped) and kafka.batches == []
    router.restart()
    outcome(router.send_batch([message("/queue/bar"), message("/queue/foo")]))
    assert [record[0] for record in kafka.batches] == ["bar-topic", "foo-topic"]


def test_build_kafka_router_needs_the_named_kafka_connector() -> None:
    from gateway.connectors.kafka import KafkaConnector
    from gateway.errors import ConfigError
    from gateway.routing.service import build_kafka_router

    raw = {"properties": ROUTES}
    assert build_kafka_router({}, "gw.toml", {}, origin="gw", clock=Clock()) is None
    with pytest.raises(ConfigError) as info:
        build_kafka_router(raw, "gw.toml", {"kafka": FakeKafka()}, origin="gw", clock=Clock())
    assert info.value.key == "routing.connector"
    kafka = KafkaConnector.from_config("kafka", {"uri": "kafka://127.0.0.1:1"}, reactor=Clock(), gateway_id="gw")
    router = build_kafka_router(raw, "gw.toml", {"kafka": kafka}, origin="gw", clock=Clock(),
                                registry=CollectorRegistry())
    assert router is not None and router.connector is kafka and [r.name for r in router.config.routes] == [
        "foo", "bar"]


def test_connector_options_are_validated() -> None:
    from gateway.connectors.kafka import topic_for_destination
    from gateway.connectors.kafka_settings import KafkaSettings
    from gateway.errors import ConfigError

    settings = KafkaSettings.from_options({"uri": "kafka://a:9092,b:9092", "topics": {"/queue/orders": "ord"}})
    assert settings.bootstrap == "a:9092,b:9092" and settings.require_existing_topics
    assert topic_for_destination("/queue/orders", settings.topics) == "ord"
    assert topic_for_destination("/topic/kafka.events") == "events"
    assert topic_for_destination("/queue/plain") == "plain"
    with pytest.raises(DestinationError):
        topic_for_destination("/topic/")
    with pytest.raises(ConfigError) as info:
        KafkaSettings.from_options({"uri": "kafka://a:9092", "prodcer": {}}, path="gw.toml")
    assert info.value.key == "connectors.kafka.prodcer"
    with pytest.raises(ConfigError) as info:
        KafkaSettings.from_options({"text_records": "yes"})
    assert info.value.key == "connectors.kafka.uri"
