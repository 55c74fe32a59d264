"""The ``stomp://`` connector at its defaults against ActiveMQ with XStream (issue 38, defect 3).

Such a broker takes ``transformation: jms-json``, so the connector asks for it without
being told (``transformation = "auto"``): a JMS MapMessage or ObjectMessage reaches a
STOMP subscriber of the gateway as what it is, and the GlassFish rule holds: an ERROR
frame, the connection closed, the message not consumed (it waits at the broker).  A
TextMessage still arrives as text.  (Against a stock broker: test_stock_activemq.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.integration.test_admin import http
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port
from tests.support.stomp_clients import Client

pytestmark = pytest.mark.activemq


def config(broker: ActiveMQBroker, admin: int) -> str:
    return f"""
[connectors.amq]
uri = "{broker.stomp_uri}"
login = "gateway"
passcode = "secret"
failure_retry_interval = 200

[[destinations]]
pattern = "/queue/jms.*"
connector = "amq"

[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
"""


@pytest.mark.parametrize("kind", ["map", "object"])
def test_at_the_defaults_a_map_or_object_message_meets_the_glassfish_rule(
        make_gateway: Callable[..., GatewayProcess], activemq: ActiveMQBroker, kind: str) -> None:  # noqa: F811
    admin = free_port()
    gateway = make_gateway(config(activemq, admin))
    gateway.wait_for_log("admin endpoint", 30)
    queue = f"/queue/jms.default-{kind}-{uuid.uuid4().hex[:8]}"
    with JmsClient(activemq.openwire_url) as jms:
        if kind == "map":
            jms.send_map(queue, {"name": "widget"})
        else:
            jms.send_object(queue, "a serialized string")
        jms.send_text(queue, "after it")
        client = Client(gateway.address)
        try:
            client.subscribe(queue, "s", ack="client-individual")
            error = client.error(timeout=15)
            assert error is not None, f"no ERROR; got {client.listener.messages.qsize()} MESSAGE(s)"
            expected = "MapMessage" if kind == "map" else "ObjectMessage"
            assert expected in error.body.decode(errors="replace") + str(error.headers)
            assert client.listener.disconnected.wait(5)
        finally:
            client.disconnect()
        again = jms.receive(queue, 10)  # not consumed: the broker still holds it, in its place
        assert again is not None and again.jms_type == kind
    assert "cannot be told from empty texts" not in http(admin, "GET", "/health")[1]["components"]["connectors"][
        "amq"]["detail"]
    assert "takes transformation:jms-json" in gateway.log()


def test_at_the_defaults_a_text_message_still_arrives_as_text(
        make_gateway: Callable[..., GatewayProcess], activemq: ActiveMQBroker) -> None:  # noqa: F811
    gateway = make_gateway(config(activemq, free_port()))
    queue = f"/queue/jms.default-text-{uuid.uuid4().hex[:8]}"
    client = Client(gateway.address)
    try:
        client.subscribe(queue, "s", ack="client-individual")
        with JmsClient(activemq.openwire_url) as jms:
            jms.send_text(queue, "plain text")
        frame = client.message(timeout=15)
        assert frame.body == b"plain text"
        client.ack(frame)
    finally:
        client.disconnect()
