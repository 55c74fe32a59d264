"""End to end: stomp.py -> gateway process -> ActiveMQ -> JMS consumer, and back.

The gateway runs as ``twistd -n jmsgateway`` with a ``stomp://`` connector to
the test ActiveMQ and ``/queue/jms.*`` / ``/topic/jms.*`` routed to it.
JMS-side assertions use the real ActiveMQ JMS client through JPype.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.activemq import ActiveMQBroker, activemq, fresh_activemq  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.stomp_clients import StompClients

pytestmark = pytest.mark.activemq


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def gateway_config(broker: ActiveMQBroker) -> str:
    return f"""
[connectors.activemq]
uri = "{broker.stomp_uri}"
login = "gateway"
passcode = "secret"
failure_retry_interval = 200
send_timeout = 10000
transformation = "jms-json"   # Map/Object messages keep their type (this broker has XStream/Jettison)

[[destinations]]
pattern = "/queue/jms.*"
connector = "activemq"

[[destinations]]
pattern = "/topic/jms.*"
connector = "activemq"
"""


@pytest.fixture
def gateway(activemq: ActiveMQBroker, tmp_path: Path) -> Iterator[GatewayProcess]:  # noqa: F811
    process = GatewayProcess(tmp_path / "gateway", gateway_config(activemq)).start()
    yield process
    process.stop()


@pytest.fixture
def clients(gateway: GatewayProcess) -> Iterator[StompClients]:
    clients = StompClients(gateway.address)
    yield clients
    clients.close()


# A SEND with a receipt takes the message path; one without is forwarded frame to frame
# (StompBrokerConnector.forward): the JMS consumer must see the same either way.
BOTH_PATHS = pytest.mark.parametrize("receipt", [True, False], ids=["receipted", "forwarded"])


@BOTH_PATHS
def test_send_without_content_length_arrives_as_jms_text_message_with_headers(
    clients: StompClients, jms: JmsClient, receipt: bool
) -> None:
    queue = "/queue/" + unique("jms.e2e-text")
    client = clients.connect(text=True)
    headers: dict[str, Any] = {
        "correlation-id": "corr-9",
        "reply-to": "/queue/jms.replies",
        "type": "order",
        "priority": "8",
        "persistent": "true",
        "customer": "acme",
    }
    client.send(queue, "hello JMS ✓", receipt=receipt, **headers)
    received = jms.receive(queue, 5)
    assert received is not None
    assert received.jms_type == "text"
    assert received.body == "hello JMS ✓"
    assert received.correlation_id == "corr-9"
    assert received.reply_to == "/queue/jms.replies"
    assert received.type == "order"
    assert received.priority == 8
    assert received.persistent is True
    assert received.properties["customer"] == "acme"


@BOTH_PATHS
def test_send_with_content_length_arrives_as_jms_bytes_message(
    clients: StompClients, jms: JmsClient, receipt: bool
) -> None:
    queue = "/queue/" + unique("jms.e2e-bytes")
    client = clients.connect()
    client.send(queue, b"\x00\x01raw", receipt=receipt)
    received = jms.receive(queue, 5)
    assert received is not None
    assert received.jms_type == "bytes"
    assert received.body == b"\x00\x01raw"


def test_a_forwarded_send_with_a_bad_header_gets_an_error_and_nothing_reaches_jms(
    clients: StompClients, jms: JmsClient
) -> None:
    """Without a receipt the SEND takes the forwarding path; its header checks are the message path's."""
    queue = "/queue/" + unique("jms.e2e-bad")
    bad = clients.connect()
    bad.send(queue, "never", priority="12")
    error = bad.error()
    assert error is not None and error.headers["message"] == "invalid priority header"
    good = clients.connect()
    good.send(queue, "fine")
    received = jms.receive(queue, 5)
    assert received is not None and received.body == b"fine"
    assert jms.receive(queue, 0.5) is None


def test_jms_text_and_bytes_messages_reach_a_stomp_subscriber(clients: StompClients, jms: JmsClient) -> None:
    queue = "/queue/" + unique("jms.e2e-out")
    client = clients.connect()
    client.subscribe(queue, ack="client-individual")
    jms.send_text(queue, "from JMS", correlation_id="c-1", jms_type="note", properties={"n": 7})
    jms.send_bytes(queue, b"\x01\x02\x03")
    frames = client.messages(2)
    by_body = {frame.body: frame for frame in frames}
    text_frame = by_body[b"from JMS"]
    assert text_frame.headers["correlation-id"] == "c-1"
    assert text_frame.headers["type"] == "note"
    assert text_frame.headers["n"] == "7"
    assert text_frame.headers["destination"] == queue
    assert by_body[b"\x01\x02\x03"].headers["content-length"] == "3"
    for frame in frames:
        client.ack(frame)
    assert jms.receive(queue, 0.5) is None  # acknowledged at the broker


def test_jms_topic_reaches_stomp_subscriber_with_selector(clients: StompClients, jms: JmsClient) -> None:
    topic = "/topic/" + unique("jms.e2e-topic")
    client = clients.connect()
    client.subscribe(topic, selector="level > 2")
    jms.send_text(topic, "low", properties={"level": 1})
    jms.send_text(topic, "high", properties={"level": 5})
    frame = client.message()
    assert frame.body == b"high"
    assert client.no_message()


def test_jms_map_message_is_refused_by_the_glassfish_rule_and_not_acknowledged(
    clients: StompClients, jms: JmsClient
) -> None:
    queue = "/queue/" + unique("jms.e2e-map")
    client = clients.connect()
    client.subscribe(queue, ack="client-individual")
    jms.send_map(queue, {"name": "widget"})
    error = client.error()
    assert error is not None
    assert "MapMessage" in error.body.decode()
    assert client.listener.disconnected.wait(5)
    # Not acknowledged: the broker still holds it for the next consumer.
    again = jms.receive(queue, 5)
    assert again is not None and again.jms_type == "map" and again.body == {"name": "widget"}


def test_client_transaction_commits_as_one_broker_transaction(clients: StompClients, jms: JmsClient) -> None:
    queue = "/queue/" + unique("jms.e2e-tx")
    client = clients.connect(text=True)
    client.begin("tx-1")
    client.send(queue, "one", transaction="tx-1")
    client.send(queue, "two", transaction="tx-1")
    assert jms.receive(queue, 0.5) is None  # nothing before COMMIT
    client.commit("tx-1")
    assert [m.body for m in jms.receive_all(queue, 2, 5)] == ["one", "two"]
    client.begin("tx-2")
    client.send(queue, "aborted", transaction="tx-2")
    client.abort("tx-2")
    assert jms.receive(queue, 0.5) is None


def test_broker_killed_and_restarted_under_the_gateway_loses_no_receipted_message(
    fresh_activemq: ActiveMQBroker,  # noqa: F811
    tmp_path: Path,
) -> None:
    gateway = GatewayProcess(tmp_path / "gateway", gateway_config(fresh_activemq)).start()
    clients = StompClients(gateway.address)
    jms = None
    try:
        queue = "/queue/" + unique("jms.e2e-restart")
        client = clients.connect(text=True)
        receipted: list[str] = []
        refused = 0
        restarter = threading.Timer(1.0, fresh_activemq.start)
        for i in range(120):
            if i == 40:
                fresh_activemq.kill()
                restarter.start()
            body = f"m{i}"
            try:
                client.send(queue, body, receipt=True, timeout=15, persistent="true")
                receipted.append(body)
            except AssertionError:  # an ERROR instead of the receipt: the client was told
                refused += 1
                client = clients.connect(text=True)
        restarter.join()
        jms = JmsClient(fresh_activemq.openwire_url)
        arrived = {message.body for message in jms.receive_until_quiet(queue, 2.0)}
        missing = [body for body in receipted if body not in arrived]
        assert not missing, f"{len(missing)} receipted messages lost ({refused} refused): {missing[:10]}"
        assert len(receipted) >= 100  # the gateway reconnected by itself and went on
        assert "connected to stomp://" in gateway.log()
    finally:
        if jms is not None:
            jms.close()
        clients.close()
        gateway.stop()



def test_durable_topic_subscription_through_the_gateway(clients: StompClients, jms: JmsClient) -> None:
    topic = "/topic/" + unique("jms.e2e-durable")
    durable: dict[str, Any] = {"activemq.subscriptionName": "audit"}
    first = clients.connect(**{"client-id": "e2e-app"})
    first.subscribe(topic, ack="client-individual", **durable)
    first.disconnect()
    jms.send_text(topic, "kept for the durable subscriber")
    again = clients.connect(**{"client-id": "e2e-app"})
    again.subscribe(topic, ack="client-individual", **durable)
    frame = again.message()
    assert frame.body == b"kept for the durable subscriber"
    again.ack(frame)


def test_nack_through_the_gateway_reaches_the_broker(clients: StompClients, jms: JmsClient) -> None:
    queue = "/queue/" + unique("jms.e2e-nack")
    client = clients.connect()
    client.subscribe(queue, ack="client-individual")
    jms.send_text(queue, "refused by the client", correlation_id=queue)
    client.nack(client.message())
    dead = jms.receive("/queue/ActiveMQ.DLQ", 5, selector=f"JMSCorrelationID = '{queue}'")
    assert dead is not None and dead.body == "refused by the client"  # ActiveMQ dead-letters NACKed messages


def test_sends_without_receipts_reach_jms_in_order_under_burst_receipts(
    clients: StompClients, jms: JmsClient
) -> None:
    """SENDs without a receipt go to ActiveMQ without one (one broker receipt covers each burst);
    all of them, and the receipted one after them, reach the JMS consumer in order, as sent."""
    queue = "/queue/" + unique("jms.e2e-burst")
    client = clients.connect(text=True)
    for n in range(500):
        client.send(queue, f"m{n}", persistent="true")
    client.send(queue, "last", receipt=True, persistent="true")
    bodies: list[str | None] = []
    for _ in range(501):
        received = jms.receive(queue, 10)
        assert received is not None, f"only {len(bodies)} of 501 arrived"
        assert received.jms_type == "text" and received.persistent is True
        bodies.append(received.body)
    assert bodies == [f"m{n}" for n in range(500)] + ["last"]
    assert jms.receive(queue, 0.5) is None
