"""The gateway against ActiveMQ as Debian installs it: without XStream and Jettison.

Such a broker closes the connection, without an ERROR frame, at a SUBSCRIBE
that asks for a ``transformation``.  At its defaults the ``stomp://``
connector asks for none, so a subscription and a bridge through it move
messages; configured with ``transformation = "jms-json"`` it falls back after
the first refusal with one warning naming the cause and the fix, and says so
in ``/health``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from tests.integration.test_admin import http
from tests.support.activemq import ActiveMQBroker, stock_activemq
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.activemq
__all__ = ["stock_activemq"]


def connector_toml(broker: ActiveMQBroker, extra: str = "") -> str:
    return f"""
[connectors.amq]
uri = "{broker.stomp_uri}"
failure_retry_interval = 200
{extra}

[[destinations]]
pattern = "/queue/jms.*"
connector = "amq"
"""


def unique(prefix: str) -> str:
    return f"/queue/jms.{prefix}-{uuid.uuid4().hex[:8]}"


def round_trip(gateway: GatewayProcess, destination: str) -> None:
    """A STOMP subscriber of the gateway gets what a STOMP client of the gateway sends, through ActiveMQ."""
    consumer = Client(gateway.address)
    producer = Client(gateway.address, text=True)
    try:
        consumer.subscribe(destination, "s", ack="client-individual")
        producer.send(destination, "hello stock broker", receipt=True)
        frame = consumer.message(timeout=15)
        assert frame.body == b"hello stock broker"
        consumer.ack(frame)
    finally:
        consumer.disconnect()
        producer.disconnect()


def test_subscription_at_the_defaults_moves_messages(make_gateway: Callable[..., GatewayProcess],
                                                    stock_activemq: ActiveMQBroker) -> None:
    gateway = make_gateway(connector_toml(stock_activemq))
    round_trip(gateway, unique("stock-sub"))
    assert "transformation" not in gateway.log()
    assert "lost connection" not in gateway.log()


def test_bridge_from_a_stock_broker_moves_messages(make_gateway: Callable[..., GatewayProcess],
                                                   stock_activemq: ActiveMQBroker) -> None:
    source = unique("stock-bridge")
    gateway = make_gateway(connector_toml(stock_activemq) + f"""
[[bridges]]
name = "stock"
source = {{ connector = "amq", destination = "{source}" }}
target = {{ connector = "embedded", destination = "/queue/from-stock" }}
""")
    sender = Client(("127.0.0.1", stock_activemq.stomp_port), text=True)
    try:
        for index in range(5):
            sender.send(source, f"m{index}", receipt=True, persistent="true")
    finally:
        sender.disconnect()
    consumer = Client(gateway.address)
    try:
        consumer.subscribe("/queue/from-stock", "s")
        assert sorted(frame.body for frame in consumer.messages(5, timeout=20)) == [f"m{i}".encode() for i in range(5)]
    finally:
        consumer.disconnect()


def test_a_refused_transformation_falls_back_with_one_warning_and_health_says_why(
    make_gateway: Callable[..., GatewayProcess], stock_activemq: ActiveMQBroker
) -> None:
    admin = free_port()
    gateway = make_gateway(connector_toml(stock_activemq, 'transformation = "jms-json"') + f"""
[admin]
listen = "tcp:{admin}:interface=127.0.0.1"
""")
    started = time.monotonic()
    round_trip(gateway, unique("stock-fallback"))
    round_trip(gateway, unique("stock-fallback"))  # later subscriptions go without it at once
    assert time.monotonic() - started < 10, "the fallback must not wait for the retry interval"
    log = gateway.log()
    assert log.count("closed the connection, without an ERROR frame, at a SUBSCRIBE with transformation:jms-json") \
        == 1, log
    assert "XStream and Jettison" in log and "docs/jms.md" in log
    assert "closed by the broker at a SUBSCRIBE with transformation:jms-json" in log  # the connection-lost line

    def health() -> dict[str, str]:
        status, document, _ = http(admin, "GET", "/health")
        assert status == 200, document
        connector: dict[str, str] = document["components"]["connectors"]["amq"]
        return connector

    wait_until(lambda: health()["status"] == "UP", what="connector UP")
    assert "closed the connection at a SUBSCRIBE with transformation:jms-json" in health()["detail"]
    assert "XStream and Jettison" in health()["detail"]
    status = http(admin, "GET", "/status")[1]["connectors"]["amq"]
    assert status["transformation"] == "" and "XStream" in status["transformation_refused"]
