"""The gateway against ActiveMQ as Debian installs it: without XStream and Jettison.

Such a broker closes the connection, without an ERROR frame, at a SUBSCRIBE
that asks for a ``transformation``.  At its defaults (``transformation = "auto"``)
and with ``"jms-json"``, the ``stomp://`` connector learns that once, with a probe
SUBSCRIBE before any client's, and subscribes without it: one warning naming the
cause and the fix, ``/health`` saying that Map and Object messages cannot be told
from empty texts, no SUBSCRIBE of a client dropped; a subscription and a bridge move
messages, and ``etc/examples/activemq.toml`` works as shipped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_admin import http
from tests.support.activemq import ActiveMQBroker, stock_activemq
from tests.support.gateway import REPO, GatewayProcess
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
    round_trip(gateway, unique("stock-sub"))
    log = gateway.log()
    assert log.count("at a SUBSCRIBE with transformation:jms-json") == 1, log  # the probe's one warning
    assert "cannot be told from empty texts" in log
    assert "lost connection" not in log


def test_the_shipped_example_works_against_a_stock_broker(tmp_path: Path, stock_activemq: ActiveMQBroker) -> None:
    """etc/examples/activemq.toml as shipped, its broker address aside: the first SUBSCRIBE of a
    client is receipted and gets its message (no connection dropped under it)."""
    example = (REPO / "etc" / "examples" / "activemq.toml").read_text()
    assert 'uri = "stomp://broker.example:61613"' in example
    gateway = GatewayProcess(tmp_path / "gw")
    gateway.config_path.write_text(example.replace("stomp://broker.example:61613", stock_activemq.stomp_uri))
    gateway.start()
    try:
        gateway.wait_for_log("connected to", 30)
        round_trip(gateway, unique("example"))
        assert "lost connection" not in gateway.log()
    finally:
        gateway.stop()


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
    assert "lost connection" not in log  # the probe's connection was never handed to anyone

    def health() -> dict[str, str]:
        status, document, _ = http(admin, "GET", "/health")
        assert status == 200, document
        connector: dict[str, str] = document["components"]["connectors"]["amq"]
        return connector

    wait_until(lambda: health()["status"] == "UP", what="connector UP")
    assert "closed the connection at a SUBSCRIBE with transformation:jms-json" in health()["detail"]
    assert "XStream and Jettison" in health()["detail"]
    assert "cannot be told from empty texts" in health()["detail"]
    status = http(admin, "GET", "/status")[1]["connectors"]["amq"]
    assert status["transformation"] == "" and "XStream" in status["transformation_refused"]


def test_a_bridge_whose_target_refuses_a_message_type_fails_instead_of_retrying_for_ever(
    make_gateway: Callable[..., GatewayProcess], stock_activemq: ActiveMQBroker
) -> None:
    """A map message can reach a STOMP broker only as ``transformation:jms-map-json``; a stock
    ActiveMQ closes the connection at it.  The bridge must not resend it for ever: it fails,
    naming the message and the cause, and the message stays at the source (DUPLICATES_OK)."""
    admin = free_port()
    target = unique("stock-refused")
    gateway = make_gateway(connector_toml(stock_activemq) + f"""
[admin]
listen = "tcp:{admin}:interface=127.0.0.1"

[[bridges]]
name = "maps"
qos = "DUPLICATES_OK"
failure_retry_interval = 200
source = {{ connector = "embedded", destination = "/queue/maps" }}
target = {{ connector = "amq", destination = "{target}" }}
""")
    sender = Client(gateway.address, text=True)
    try:
        sender.send("/queue/maps", '{"map":{"entry":[{"string":["k","v"]}]}}', receipt=True,
                    transformation="jms-map-json", persistent="true")
    finally:
        sender.disconnect()

    def bridge() -> dict[str, object]:
        status, document, _ = http(admin, "GET", "/bridges/maps")
        assert status == 200, document
        return dict(document)

    try:
        wait_until(lambda: bridge()["state"] == "failed", timeout=30, what="bridge failed")
    except AssertionError:
        raise AssertionError(f"{bridge()}\n{gateway.log()[-3000:]}") from None
    state = bridge()
    assert "jms-map-json" in str(state["last_error"]) or "MapMessage" in str(state["last_error"]), state
    assert int(str(state["retries"])) < 10, state
    assert gateway.log().count("closed the connection, without an ERROR frame, at a SEND with") == 1
    consumer = Client(gateway.address)
    try:
        consumer.subscribe("/queue/maps", "s", ack="client-individual")
        frame = consumer.message(timeout=15)
        assert frame.headers.get("transformation") == "jms-map-json" or b"k" in frame.body
    finally:
        consumer.disconnect()
