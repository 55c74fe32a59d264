"""The stomp:// JMS broker connector against the real ActiveMQ.

Connector -> ActiveMQ -> JMS consumer, and JMS producer -> ActiveMQ ->
connector subscription.  The tests run on pytest-twisted's reactor and await
the connector; JMS-side assertions use the real ActiveMQ JMS client (JPype).
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
from gateway.errors import ConnectorError, SelectorError
from gateway.interfaces import IConnector, ISubscription, SubscriptionSpec
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    Message,
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
async def test_connector_provides_the_interface_and_reports_status(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    verifyObject(IConnector, connector)
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


@pytest_twisted.ensureDeferred
async def test_send_batch_is_one_broker_transaction(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.batch")
    await connector.send_batch([text(queue_name, f"b{i}", persistent=True) for i in range(5)])
    received = harness.jms().receive_all(queue_name, 5, 5)
    assert [m.body for m in received] == [f"b{i}" for i in range(5)]


@pytest_twisted.ensureDeferred
async def test_batch_with_an_unsendable_message_sends_nothing(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("jms.batch-refused")
    batch: list[Message] = [text(queue_name, "ok"), StreamMessage(destination=queue_name, message_id="x", items=[1])]
    with pytest.raises(ConnectorError):
        await connector.send_batch(batch)
    assert harness.jms().receive(queue_name, 0.5) is None


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
async def test_selector_is_applied_by_the_broker(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("sub.selector")
    _, consumer = await harness.subscribe(connector, SubscriptionSpec(queue_name, selector="color = 'blue' AND n > 1"))
    jms = harness.jms()
    jms.send_text(queue_name, "red", properties={"color": "red", "n": 5})
    jms.send_text(queue_name, "blue-1", properties={"color": "blue", "n": 1})
    jms.send_text(queue_name, "blue-2", properties={"color": "blue", "n": 2})
    (delivery,) = await consumer.take(1)
    assert isinstance(delivery[0], TextMessage) and delivery[0].text == "blue-2"
    assert await consumer.nothing_more()


@pytest_twisted.ensureDeferred
async def test_bad_selector_fails_with_selector_error(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    with pytest.raises(SelectorError):
        await harness.subscribe(connector, SubscriptionSpec("/queue/" + unique("sub.bad"), selector="a = = 1"))


@pytest_twisted.ensureDeferred
async def test_client_mode_unacked_messages_are_redelivered_and_acked_ones_are_not(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("sub.ack")
    subscription, consumer = await harness.subscribe(connector, SubscriptionSpec(queue_name, ack_mode="client"))
    jms = harness.jms()
    for body in ("m0", "m1", "m2"):
        jms.send_text(queue_name, body)
    deliveries = await consumer.take(3)
    await subscription.ack([deliveries[0][1], deliveries[2][1]])
    await subscription.close()
    _, again = await harness.subscribe(connector, SubscriptionSpec(queue_name, ack_mode="client-individual"))
    (redelivered,) = await again.take(1)
    assert isinstance(redelivered[0], TextMessage) and redelivered[0].text == "m1"
    assert redelivered[0].redelivered is True
    assert await again.nothing_more()


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
async def test_auto_mode_acknowledges_after_delivery(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("sub.auto")
    subscription, consumer = await harness.subscribe(connector, SubscriptionSpec(queue_name, ack_mode="auto"))
    harness.jms().send_text(queue_name, "once")
    await consumer.take(1)
    await sleep(0.2)
    await subscription.close()
    _, again = await harness.subscribe(connector, SubscriptionSpec(queue_name))
    assert await again.nothing_more()


@pytest_twisted.ensureDeferred
async def test_prefetch_limits_unacknowledged_deliveries(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("sub.prefetch")
    subscription, consumer = await harness.subscribe(
        connector, SubscriptionSpec(queue_name, ack_mode="client-individual", prefetch=1)
    )
    jms = harness.jms()
    for body in ("p0", "p1", "p2"):
        jms.send_text(queue_name, body)
    (first,) = await consumer.take(1)
    assert await consumer.nothing_more()
    await subscription.ack([first[1]])
    await consumer.take(1)


@pytest_twisted.ensureDeferred
async def test_pause_holds_deliveries_until_resume(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    queue_name = "/queue/" + unique("sub.pause")
    subscription, consumer = await harness.subscribe(connector, SubscriptionSpec(queue_name))
    subscription.pause()
    jms = harness.jms()
    jms.send_text(queue_name, "q0")
    jms.send_text(queue_name, "q1")
    assert await consumer.nothing_more()
    subscription.resume()
    assert [m.text for m, _ in await consumer.take(2)] == ["q0", "q1"]  # type: ignore[attr-defined]


@pytest_twisted.ensureDeferred
async def test_durable_topic_subscription_keeps_messages_while_away(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    topic = "/topic/" + unique("sub.durable")
    spec = SubscriptionSpec(topic, durable_name="audit", client_id="client-a", ack_mode="client-individual")
    subscription, _ = await harness.subscribe(connector, spec)
    await subscription.close()
    harness.jms().send_text(topic, "while away")
    back, consumer = await harness.subscribe(connector, spec)
    (delivery,) = await consumer.take(1)
    assert isinstance(delivery[0], TextMessage) and delivery[0].text == "while away"
    await back.ack([delivery[1]])
    await back.unsubscribe()
    harness.jms().send_text(topic, "after removal")
    fresh, consumer = await harness.subscribe(connector, spec)
    assert await consumer.nothing_more()  # a new durable subscription starts empty
    await fresh.unsubscribe()


@pytest_twisted.ensureDeferred
async def test_unsubscribe_durable_removes_an_inactive_subscription(harness: ConnectorHarness) -> None:
    connector = await harness.started()
    topic = "/topic/" + unique("sub.durable-remove")
    spec = SubscriptionSpec(topic, durable_name="gone", client_id="client-b")
    subscription, _ = await harness.subscribe(connector, spec)
    await subscription.close()
    harness.jms().send_text(topic, "dropped with the subscription")
    await connector.unsubscribe_durable("client-b", "gone")
    again, consumer = await harness.subscribe(connector, spec)
    assert await consumer.nothing_more()
    await again.unsubscribe()


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
