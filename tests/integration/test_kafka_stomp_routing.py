"""End to end with routing: stomp.py -> gateway (in this process) -> routes -> Kafka.

The gateway is built from a config with ``[routing]`` and runs on
pytest-twisted's reactor while each test's blocking clients run in a thread
(:func:`tests.support.reactor_waits.off_reactor`); the Kafka connector is wrapped by the router
(:func:`build_kafka_router`) the way the gateway wires it.  Checked with
stomp.py senders and a plain confluent-kafka reader: keys, dead letters,
ERROR frames for a stopped route and for a hard failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from gateway.app import build_gateway
from gateway.config import parse_config
from gateway.routing.service import KafkaRouter, build_kafka_router
from tests.support.kafka import (
    create_topics,
    group_settings,
    kafka_bootstrap,
    read_records,
    unique_topic,
)
from tests.support.reactor_waits import in_thread, off_reactor, on_reactor, reactor, wait_for
from tests.support.stomp_clients import StompClients

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> dict[str, str]:
    names = {name: unique_topic(name) for name in ("orders", "strict", "dlq", "plain", "refused")}
    create_topics(kafka_bootstrap, *names.values())
    return names


@pytest.fixture(scope="module")
def routed_gateway(kafka_bootstrap: str, topics: dict[str, str], tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[Any, KafkaRouter, int]]:
    properties = "\n".join([
        f"routing.dead-letter-topic={topics['dlq']}",
        "routes.orders.in.include=msg.address==orders",
        f"routes.orders.out.topic={topics['orders']}",
        "routes.orders.conv.key=msg.header.CorrelationId",
        "routes.orders.on-soft-failure=dead-letter",
        "routes.strict.in.include=msg.address==strict",
        f"routes.strict.out.topic={topics['strict']}",
        "routes.strict.conv.key=msg.header.CorrelationId",
        *(line for name in ("plain", "refused") for line in (
            f"routes.{name}.in.include=msg.address=={name}",
            f"routes.{name}.out.topic={topics[name]}",
            f"routes.{name}.conv.key=msg.header.CorrelationId",
        )),
        "routes.missing.in.include=msg.address==missing",
        f"routes.missing.out.topic=absent-{topics['dlq']}",
    ])
    raw = {
        "gateway": {"id": "gw-routing", "data_dir": str(tmp_path_factory.mktemp("routing-data"))},
        "connectors": {"kafka": {"uri": f"kafka://{kafka_bootstrap}", "consumer": group_settings()}},
        "destinations": [{"pattern": f"/queue/{name}", "connector": "kafka"}
                         for name in ("orders", "strict", "missing", "plain", "refused")],
        "routing": {"properties": properties},
    }
    config = parse_config(raw, "routing-test.toml")

    def build() -> Deferred[tuple[Any, KafkaRouter, Any]]:
        gateway = build_gateway(config, reactor)
        connector = gateway.connectors["kafka"]
        if isinstance(connector, KafkaRouter):
            router = connector
        else:  # the gateway does not wrap it itself (yet)
            built = build_kafka_router(config.routing, config.path, gateway.connectors, origin=config.id,
                                       clock=reactor, registry=gateway.registry)
            assert built is not None, "the configuration has [routing]"
            router = built
            gateway.connectors["kafka"] = router
        port = reactor.listenTCP(0, gateway.factory, interface="127.0.0.1")
        d = gateway.start()
        d.addCallback(lambda _: (gateway, router, port))
        return d

    gateway, router, port = wait_for(build)
    yield gateway, router, port.getHost().port
    wait_for(port.stopListening)
    wait_for(gateway.stop)


@pytest.fixture
def clients(routed_gateway: tuple[Any, KafkaRouter, int]) -> Iterator[StompClients]:
    made = StompClients(("127.0.0.1", routed_gateway[2]))
    yield made
    wait_for(in_thread, made.close)  # the gateway answers the DISCONNECTs on the reactor


@off_reactor
def test_routed_send_is_keyed_and_receipted_after_kafka(
    clients: StompClients, kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    client = clients.connect(text=True)
    client.send("/queue/orders", "order 1", receipt=True, headers={"correlation-id": "cust7"})
    (record,) = read_records(kafka_bootstrap, topics["orders"], 1, settle=0.5)
    assert record.key() == b"cust7" and record.value() == b"order 1"
    assert dict(record.headers())["jmsbridge.origin"] == b"gw-routing"


@off_reactor
def test_plain_send_is_forwarded_as_the_receipted_one_is_routed(
    clients: StompClients, kafka_bootstrap: str, topics: dict[str, str],
    routed_gateway: tuple[Any, KafkaRouter, int],
) -> None:
    """A SEND without a receipt skips the JMS message (KafkaRouter.forward); its record must be the
    one a receipted SEND (the message path) makes, but for the message id and timestamp."""
    gateway, router, _ = routed_gateway
    assert gateway.destinations.resolve("/queue/plain").forward == router.forward
    text, binary = clients.connect(text=True), clients.connect()
    headers = {"correlation-id": "cust8", "region": "eu", "persistent": "true", "priority": "6", "type": "order"}
    text.send("/queue/plain", "forwarded \u00e9", headers=headers)
    text.send("/queue/plain", "receipted", receipt=True, headers=headers)
    binary.send("/queue/plain", b"\x00\xffforwarded bytes", headers=headers)
    records = read_records(kafka_bootstrap, topics["plain"], 3, settle=0.5)
    by_value = {record.value(): record for record in records}
    assert sorted(by_value) == sorted([b"\x00\xffforwarded bytes", "forwarded \u00e9".encode(), b"receipted"])
    assert {record.key() for record in records} == {b"cust8"}
    forwarded, receipted, raw = (dict(by_value[value].headers()) for value in (
        "forwarded \u00e9".encode(), b"receipted", b"\x00\xffforwarded bytes"))
    assert [record.pop("jms.MessageType") for record in (forwarded, receipted, raw)] == [b"text", b"text", b"bytes"]
    for record in (forwarded, receipted, raw):
        assert record.pop("jms.MessageId").startswith(b"ID:") and record.pop("jms.Timestamp").isdigit()
    assert forwarded == receipted == raw
    assert forwarded["jms.Destination"] == b"/queue/plain" and forwarded["jmsbridge.origin"] == b"gw-routing"
    assert forwarded["jms.DeliveryMode"] == b"2" and forwarded["jms.Priority"] == b"6"
    assert forwarded["jms.region"] == b"eu" and forwarded["jms.Type"] == b"order"


@off_reactor
def test_forwarded_send_with_a_bad_header_is_an_error_and_reaches_nothing(
    clients: StompClients, kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    bad = clients.connect(text=True)
    bad.connection.send("/queue/refused", "bad", headers={"correlation-id": "k3", "priority": "high"})
    error = bad.error(timeout=10)
    assert error is not None and error.headers["message"] == "invalid priority header"
    other = clients.connect(text=True)
    other.send("/queue/refused", "good", receipt=True, headers={"correlation-id": "k4"})
    (record,) = read_records(kafka_bootstrap, topics["refused"], 1, settle=1.0)
    assert (record.key(), record.value()) == (b"k4", b"good")


@off_reactor
def test_soft_failure_is_dead_lettered_and_receipted(
    clients: StompClients, kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    client = clients.connect(text=True)
    client.send("/queue/orders", "no key", receipt=True)
    (dead,) = read_records(kafka_bootstrap, topics["dlq"], 1, settle=0.5)
    assert dead.value() == b"no key"
    assert dict(dead.headers())["jmsbridge.error"].startswith(b"no-key")


@off_reactor
def test_soft_failure_under_stop_gives_error_frames(
    clients: StompClients, routed_gateway: tuple[Any, KafkaRouter, int]
) -> None:
    client = clients.connect(text=True)
    client.connection.send("/queue/strict", "no key", headers={"receipt": "r-strict-1"})
    error = client.error(timeout=10)
    assert error is not None and b"stopped" in error.body
    other = clients.connect(text=True)
    other.connection.send("/queue/strict", "keyed", headers={"receipt": "r-strict-2", "correlation-id": "k1"})
    error = other.error(timeout=10)
    assert error is not None and b"route strict is stopped" in error.body
    router = routed_gateway[1]
    assert "strict" in router.stopped_routes
    on_reactor(router.restart, "strict")


@off_reactor
def test_hard_failure_stops_routing_with_error_frames(
    clients: StompClients, routed_gateway: tuple[Any, KafkaRouter, int]
) -> None:
    client = clients.connect(text=True)
    client.connection.send("/queue/missing", "x", headers={"receipt": "r-missing"})
    error = client.error(timeout=10)
    assert error is not None and b"does not exist" in error.body
    other = clients.connect(text=True)
    other.connection.send("/queue/orders", "y", headers={"receipt": "r-after", "correlation-id": "k2"})
    error = other.error(timeout=10)
    assert error is not None and b"routing to Kafka is stopped" in error.body
    on_reactor(routed_gateway[1].restart)
