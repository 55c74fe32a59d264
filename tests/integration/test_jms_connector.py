"""The stomp:// JMS broker connector against the real ActiveMQ.

Connector -> ActiveMQ -> JMS consumer, and JMS producer -> ActiveMQ ->
connector subscription.  What every connector does (receipts, acknowledgement,
prefetch, selectors, durable subscriptions, reconnection, flow control) is
checked by the connector contract (tests/contract/test_stomp_contract.py); here
is what is the JMS broker's own: message types and headers as JMS consumers see
them, pipelined receipts, ActiveMQ's NACK, heart-beats.  The tests run on
pytest-twisted's reactor and await the connector; JMS-side assertions use the
real ActiveMQ JMS client (JPype).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from zope.interface.verify import verifyObject

from gateway.connectors.stomp_broker import BrokerSubscription, StompBrokerConnector
from gateway.connectors.stomp_mapping import XSTREAM_JSON
from gateway.errors import ConnectorError
from gateway.interfaces import ISubscription, SubscriptionSpec
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    ObjectMessage,
    StreamMessage,
    TextMessage,
    new_message_id,
    now_millis,
)
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.consumers import CollectingConsumer
from tests.support.jms_client import JmsClient
from tests.support.reactor_waits import reactor, sleep, wait_for

pytestmark = pytest.mark.activemq


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def text(destination: str, body: str, **fields: Any) -> TextMessage:
    message = TextMessage(text=body, destination=destination, message_id=new_message_id(), timestamp=now_millis())
    for name, value in fields.items():
        setattr(message, name, value)
    return message


def bytes_message(destination: str, body: bytes, **fields: Any) -> BytesMessage:
    message = BytesMessage(body=body, destination=destination, message_id=new_message_id(), timestamp=now_millis())
    for name, value in fields.items():
        setattr(message, name, value)
    return message


class ConnectorHarness:
    """Builds connectors and JMS clients for one test and cleans them up."""

    def __init__(self, broker: ActiveMQBroker) -> None:
        self.broker = broker
        self.connectors: list[StompBrokerConnector] = []
        self.clients: list[JmsClient] = []

    def connector(self, **options: Any) -> StompBrokerConnector:
        config = {"uri": self.broker.stomp_uri, "failure_retry_interval": 200, "send_timeout": 10_000, **options}
        connector = StompBrokerConnector.from_config("activemq", config, reactor=reactor, gateway_id=unique("gw"))
        self.connectors.append(connector)
        return connector

    async def started(self, **options: Any) -> StompBrokerConnector:
        connector = self.connector(**options)
        await connector.start()
        return connector

    def jms(self, client_id: str | None = None) -> JmsClient:
        client = JmsClient(self.broker.openwire_url, client_id=client_id)
        self.clients.append(client)
        return client

    async def subscribe(
        self, connector: StompBrokerConnector, spec: SubscriptionSpec
    ) -> tuple[BrokerSubscription, CollectingConsumer]:
        consumer = CollectingConsumer()
        subscription = await connector.subscribe(spec, consumer)
        assert isinstance(subscription, BrokerSubscription)
        return subscription, consumer

    def close(self) -> None:
        for connector in self.connectors:
            wait_for(connector.stop)
        for client in self.clients:
            client.close()


@pytest.fixture
def harness(activemq: ActiveMQBroker) -> Iterator[ConnectorHarness]:  # noqa: F811
    harness = ConnectorHarness(activemq)
    yield harness
    harness.close()


# -- sending ------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_connector_reports_the_broker_in_its_status(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    status = connector.status()
    assert status["state"] == "connected"
    assert status["stomp_version"] == "1.2"
    assert status["server"].startswith("ActiveMQ")


@pytest_twisted.ensureDeferred
async def test_text_message_arrives_as_jms_text_message_with_headers_and_properties(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.text")
    expiration = now_millis() + 600_000
    message = text(
        queue_name,
        "grüße ✓",
        correlation_id="corr-42",
        reply_to="/queue/replies",
        type="invoice",
        priority=7,
        persistent=True,
        expiration=expiration,
        properties={"region": "emea", "count": 3, "urgent": True},
    )
    await connector.send(message)
    received = harness.jms().receive(queue_name, 5)
    assert received is not None
    assert received.jms_type == "text"
    assert received.body == "grüße ✓"
    assert received.correlation_id == "corr-42"
    assert received.reply_to == "/queue/replies"
    assert received.type == "invoice"
    assert received.priority == 7
    assert received.persistent is True
    assert received.expiration == expiration
    # STOMP headers are strings: typed properties arrive as String properties.
    assert received.properties == {"region": "emea", "count": "3", "urgent": "true"}


@pytest_twisted.ensureDeferred
async def test_bytes_message_arrives_as_jms_bytes_message(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.bytes")
    await connector.send(
        bytes_message(queue_name, b"\x00\x01\x02binary\xff", persistent=False, correlation_id="b1")
    )
    received = harness.jms().receive(queue_name, 5)
    assert received is not None
    assert received.jms_type == "bytes"
    assert received.body == b"\x00\x01\x02binary\xff"
    assert received.persistent is False
    assert received.correlation_id == "b1"


@pytest_twisted.ensureDeferred
async def test_text_with_nul_still_arrives_as_text_message(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.nul")
    await connector.send(text(queue_name, "before\x00after"))
    received = harness.jms().receive(queue_name, 5)
    assert received is not None
    assert received.jms_type == "text"
    assert received.body == "before\x00after"


@pytest_twisted.ensureDeferred
async def test_map_message_arrives_as_jms_map_message(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.map")
    message = MapMessage(
        destination=queue_name,
        message_id=new_message_id(),
        map={"name": "widget", "count": 3, "big": 2**40, "price": 9.5, "ok": True},
        correlation_id="m1",
    )
    await connector.send(message)
    received = harness.jms().receive(queue_name, 5)
    assert received is not None
    assert received.jms_type == "map"
    assert received.body == {"name": "widget", "count": 3, "big": 2**40, "price": 9.5, "ok": True}
    assert received.correlation_id == "m1"


@pytest_twisted.ensureDeferred
async def test_types_the_broker_cannot_take_fail_with_connector_error(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.refused")
    for message in (
        StreamMessage(destination=queue_name, message_id=new_message_id(), items=[1, 2]),
        ObjectMessage(destination=queue_name, message_id=new_message_id(), payload=b"\xac\xed"),
        MapMessage(destination=queue_name, message_id=new_message_id(), map={"raw": b"\x01"}),
    ):
        with pytest.raises(ConnectorError):
            await connector.send(message)
    assert harness.jms().receive(queue_name, 0.5) is None


@pytest_twisted.ensureDeferred
async def test_many_sends_are_pipelined_and_all_confirmed(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.pipeline")
    outstanding: list[int] = []

    from twisted.internet.defer import gatherResults

    sends = [connector.send(text(queue_name, f"m{i}", persistent=True)) for i in range(200)]
    assert connector._protocol is not None
    outstanding.append(connector._protocol.outstanding_receipts)
    await gatherResults(sends)
    assert outstanding[0] > 1  # not one round trip at a time
    received = harness.jms().receive_all(queue_name, 200, 20)
    assert sorted(int(m.body[1:]) for m in received) == list(range(200))


# -- subscriptions ------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_jms_text_bytes_map_object_messages_reach_the_consumer_typed(harness: ConnectorHarness) -> None:
    connector = await harness.started(transformation="jms-json")  # Map/Object fidelity (the broker has XStream)
    queue_name = "/queue/" + unique("sub.types")
    subscription, consumer = await harness.subscribe(connector, SubscriptionSpec(queue_name))
    verifyObject(ISubscription, subscription)
    jms = harness.jms()
    jms.send_text(
        queue_name,
        "hello",
        correlation_id="c1",
        reply_to="/queue/answers",
        jms_type="greeting",
        priority=6,
        properties={"n": 5, "flag": True, "s": "x"},
    )
    jms.send_bytes(queue_name, b"\x00\x01", persistent=False)
    jms.send_map(queue_name, {"name": "w", "n": 3, "d": 1.5, "b": True})
    jms.send_object(queue_name, "a java string")
    by_kind = {message.kind: message for message, _ in await consumer.take(4)}
    assert sorted(by_kind) == ["bytes", "map", "object", "text"]
    hello = by_kind["text"]
    assert isinstance(hello, TextMessage) and hello.text == "hello"
    assert hello.correlation_id == "c1"
    assert hello.reply_to == "/queue/answers"
    assert hello.type == "greeting"
    assert hello.priority == 6
    assert hello.persistent is True
    assert hello.message_id.startswith("ID:")
    assert hello.timestamp > 0
    assert hello.properties == {"n": "5", "flag": "true", "s": "x"}
    raw = by_kind["bytes"]
    assert isinstance(raw, BytesMessage) and raw.body == b"\x00\x01"
    assert raw.persistent is False
    mapped = by_kind["map"]
    assert isinstance(mapped, MapMessage)
    assert mapped.map == {"name": "w", "n": 3, "d": 1.5, "b": True}
    assert "transformation" not in mapped.properties
    obj = by_kind["object"]
    assert isinstance(obj, ObjectMessage) and obj.encoding == XSTREAM_JSON
    assert obj.payload == b'{"string":"a java string"}'


@pytest_twisted.ensureDeferred
async def test_nack_is_relayed_and_activemq_dead_letters_the_message(harness: ConnectorHarness) -> None:
    # ActiveMQ treats a STOMP NACK as a poison ack: the message goes to its DLQ at once.
    connector = await harness.started()
    queue_name = "/queue/" + unique("sub.nack")
    spec = SubscriptionSpec(queue_name, ack_mode="client-individual")
    subscription, consumer = await harness.subscribe(connector, spec)
    jms = harness.jms()
    jms.send_text(queue_name, "poison", correlation_id=queue_name)
    (first,) = await consumer.take(1)
    await subscription.nack([first[1]])
    assert await consumer.nothing_more()
    dead = jms.receive("/queue/ActiveMQ.DLQ", 5, selector=f"JMSCorrelationID = '{queue_name}'")
    assert dead is not None and dead.body == "poison"


@pytest_twisted.ensureDeferred
async def test_heartbeats_keep_an_idle_connection_alive(harness: ConnectorHarness) -> None:
    connector = await harness.started(heartbeat=[500, 500])
    await sleep(3.0)  # several heart-beat intervals without traffic
    assert connector.state == "connected"
    assert connector.metrics.connects.labels("activemq")._value.get() == 1
    queue_name = "/queue/" + unique("jms.heartbeat")
    await connector.send(text(queue_name, "still here"))
    received = harness.jms().receive(queue_name, 5)
    assert received is not None and received.body == "still here"
