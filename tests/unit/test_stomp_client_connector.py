"""StompBrokerConnector with a fake endpoint, StringTransport and Clock (no broker)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionLost, ConnectionRefusedError
from twisted.internet.interfaces import IProtocolFactory
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer
from zope.interface.verify import verifyObject

from gateway.connectors.stomp_broker import (
    CLIENT_ID_WAITS,
    EMPTY_TEXTS,
    PROBE_DESTINATION,
    StompBrokerConnector,
    StompBrokerSettings,
)
from gateway.connectors.stomp_client import StompClientProtocol
from gateway.errors import ConfigError, ConnectorUnavailable, StaleDelivery
from gateway.interfaces import IConnector, IConsumer, SubscriptionSpec
from gateway.message.model import Message, TextMessage
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame


class FakeBroker:
    """An endpoint whose connections are StringTransports the test answers for."""

    def __init__(self) -> None:
        self.up = True
        self.attempts = 0
        self.protocol: StompClientProtocol | None = None
        self.transport: StringTransport | None = None
        self.reader = FrameDecoder(version="1.2")

    def connect(self, factory: IProtocolFactory) -> Deferred[Any]:
        self.attempts += 1
        if not self.up:
            return fail(ConnectionRefusedError("refused"))
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 61613))
        assert isinstance(protocol, StompClientProtocol)
        self.transport = StringTransport()
        protocol.makeConnection(self.transport)
        self.protocol = protocol
        self.reader = FrameDecoder(version="1.2")
        return succeed(protocol)

    def frames(self) -> list[Frame]:
        assert self.transport is not None
        data = self.transport.value()
        self.transport.clear()
        return [frame for frame in self.reader.feed(data) if isinstance(frame, Frame)]

    def answer(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        assert self.protocol is not None
        self.protocol.dataReceived(encode_frame(Frame(command, headers, body), "1.2"))

    def accept(self) -> Frame:
        """Answer the pending CONNECT; returns it."""
        (connect,) = [frame for frame in self.frames() if frame.command == "CONNECT"]
        self.answer("CONNECTED", {"version": "1.2", "server": "Fake/1", "heart-beat": "0,0"})
        return connect

    def receipt_all(self) -> list[Frame]:
        """Answer every frame that asked for a receipt; returns the frames read."""
        frames = self.frames()
        for frame in frames:
            if "receipt" in frame.headers:
                self.answer("RECEIPT", {"receipt-id": frame.headers["receipt"]})
        return frames

    def probe(self, accept: bool = True) -> Frame:
        """Answer the connector's transformation probe (a SUBSCRIBE, then its UNSUBSCRIBE) or, with
        ``accept`` False, close the connection at it as a stock ActiveMQ does; returns the SUBSCRIBE."""
        (subscribe,) = self.frames()
        assert subscribe.command == "SUBSCRIBE" and subscribe.headers["destination"] == PROBE_DESTINATION
        if not accept:
            self.drop()
            return subscribe
        self.answer("RECEIPT", {"receipt-id": subscribe.headers["receipt"]})
        (unsubscribe,) = self.frames()
        assert unsubscribe.command == "UNSUBSCRIBE" and unsubscribe.headers["id"] == subscribe.headers["id"]
        self.answer("RECEIPT", {"receipt-id": unsubscribe.headers["receipt"]})
        return subscribe

    def refuse_client_id(self) -> None:
        """Answer the pending CONNECT as ActiveMQ does while a connection with its client id is open."""
        (connect,) = [frame for frame in self.frames() if frame.command == "CONNECT"]
        client_id = connect.headers["client-id"]
        self.answer("ERROR", {"message": f"Broker: amq - Client: {client_id} already connected from "
                                         "tcp://127.0.0.1:53268"},
                    b"javax.jms.InvalidClientIDException: Broker: amq - Client: already connected")
        self.drop()

    def drop(self) -> None:
        assert self.protocol is not None and self.transport is not None
        self.transport.loseConnection()
        self.protocol.connectionLost(Failure(ConnectionLost("gone")))


@implementer(IConsumer)
class Consumer:
    def __init__(self) -> None:
        self.deliveries: list[tuple[Message, Any]] = []
        self.failures: list[Exception] = []
        self.on_deliver: Any = None

    def deliver(self, message: Message, tag: Any) -> Any:
        self.deliveries.append((message, tag))
        if self.on_deliver:
            return self.on_deliver()
        return None

    def subscription_failed(self, reason: Exception) -> None:
        self.failures.append(reason)


def result_of(deferred: Deferred[Any]) -> Any:
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


def make(broker: FakeBroker, clock: Clock, **options: Any) -> StompBrokerConnector:
    config = {"uri": "stomp://broker.example:61613", "login": "u", "passcode": "p", **options}
    settings = StompBrokerSettings.from_config("amq", config, gateway_id="gw1")
    return StompBrokerConnector("amq", settings, reactor=clock, endpoint=broker)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker()


def started(broker: FakeBroker, clock: Clock, **options: Any) -> StompBrokerConnector:
    connector = make(broker, clock, **options)
    starting = connector.start()
    connect = broker.accept()
    assert connect.headers["client-id"] == "gw1-amq"
    assert connect.headers["login"] == "u" and connect.headers["host"] == "broker.example"
    if connector.must_probe_transformation:
        broker.probe()
    clock.advance(0)
    result_of(starting)
    return connector


# -- settings -----------------------------------------------------------------


def test_settings_defaults_and_uri_credentials() -> None:
    settings = StompBrokerSettings.from_config("amq", {"uri": "stomp://me:pw@h"}, gateway_id="g")
    assert (settings.address, settings.port, settings.login, settings.passcode) == ("h", 61613, "me", "pw")
    assert settings.client_id == "g-amq"
    assert (settings.failure_retry_interval, settings.max_retries, settings.send_timeout) == (5000, -1, 30000)
    assert settings.transformation == "auto"  # jms-json if the broker takes it (probed), else none


@pytest.mark.parametrize(
    ("options", "key", "problem"),
    [
        ({"uri": "stomp://h:1", "max_retry": 3}, "connectors.amq.max_retry", "did you mean 'max_retries'"),
        ({"uri": "http://h:1"}, "connectors.amq.uri", "not stomp://"),
        ({}, "connectors.amq.uri", "needs a uri"),
        ({"uri": "stomp://h:1", "max_retries": -2}, "connectors.amq.max_retries", "-1 (retry forever) or >= 0"),
        ({"uri": "stomp://h:1", "heartbeat": [1]}, "connectors.amq.heartbeat", "send_ms"),
        ({"uri": "stomp://h:1", "send_timeout": "5s"}, "connectors.amq.send_timeout", "integer"),
        ({"uri": "stomp://h:1", "amq_msg_type": "yes"}, "connectors.amq.amq_msg_type", "true or false"),
    ],
)
def test_bad_settings_name_key_and_problem(options: dict[str, Any], key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        StompBrokerSettings.from_config("amq", options)
    assert caught.value.key == key
    assert problem in str(caught.value)


# -- connecting and retrying --------------------------------------------------


def test_connects_and_provides_the_interface(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    verifyObject(IConnector, connector)
    assert connector.status()["state"] == "connected"
    assert connector.metrics.up.labels("amq")._value.get() == 1


def test_send_waits_while_the_broker_is_away_and_goes_out_after_reconnect(broker: FakeBroker, clock: Clock) -> None:
    broker.up = False
    connector = make(broker, clock, failure_retry_interval=2000)
    starting = connector.start()
    clock.advance(0)
    result_of(starting)  # fires although not connected: sends wait
    assert connector.state == "retrying"
    sending = connector.send(TextMessage(destination="/queue/a", text="x", message_id="m1"))
    assert connector.status()["waiting_sends"] == 1
    clock.advance(1.9)
    assert broker.attempts == 1
    broker.up = True
    clock.advance(0.1)
    assert broker.attempts == 2
    broker.accept()
    broker.probe()  # the sends wait for the probe too
    (send,) = broker.receipt_all()
    assert send.command == "SEND" and "content-length" not in send.headers
    assert result_of(sending) is None


def test_waiting_send_fails_after_send_timeout(broker: FakeBroker, clock: Clock) -> None:
    broker.up = False
    connector = make(broker, clock, failure_retry_interval=1000, send_timeout=3000)
    connector.start()
    sending = connector.send(TextMessage(destination="/queue/a", text="x", message_id="m1"))
    clock.advance(3)
    with pytest.raises(ConnectorUnavailable, match="no confirmation"):
        result_of(sending)
    assert connector.status()["waiting_sends"] == 0


def test_connected_send_without_a_receipt_fails_after_send_timeout(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock, send_timeout=3000)
    unanswered = connector.send(TextMessage(destination="/queue/a", text="x", message_id="m1"))
    clock.advance(2)
    answered = connector.send(TextMessage(destination="/queue/a", text="y", message_id="m2"))
    sends = [frame for frame in broker.frames() if frame.command == "SEND"]
    assert len(sends) == 2
    outcomes: list[Any] = []
    unanswered.addErrback(outcomes.append)
    clock.advance(1.3)  # past the 3 s limit of the first send, within the second's
    assert len(outcomes) == 1 and outcomes[0].check(ConnectorUnavailable)
    assert "no confirmation" in outcomes[0].getErrorMessage()
    broker.answer("RECEIPT", {"receipt-id": sends[1].headers["receipt"]})
    assert result_of(answered) is None
    cancelled = connector.send(TextMessage(destination="/queue/a", text="z", message_id="m3"))
    cancelled.addErrback(lambda failure: None)
    cancelled.cancel()
    clock.advance(5)  # a cancelled send leaves nothing for the sweep to fail


def test_gives_up_after_max_retries(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock, failure_retry_interval=1000, max_retries=2)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a"), consumer)
    broker.receipt_all()
    result_of(subscribing)
    broker.up = False
    broker.drop()
    assert connector.state == "retrying"
    waiting = connector.send(TextMessage(destination="/queue/a", text="x", message_id="m1"))
    clock.advance(1)
    clock.advance(1)
    clock.advance(1)
    clock.advance(0)
    assert connector.state == "failed"
    assert broker.attempts == 3  # the first connection and two retries
    with pytest.raises(ConnectorUnavailable, match="gave up"):
        result_of(waiting)
    assert len(consumer.failures) == 1
    assert not clock.getDelayedCalls()


def test_start_fails_at_once_without_retries(broker: FakeBroker, clock: Clock) -> None:
    broker.up = False
    connector = make(broker, clock, max_retries=0)
    starting = connector.start()
    clock.advance(0)
    with pytest.raises(ConnectorUnavailable):
        result_of(starting)


# -- subscriptions ------------------------------------------------------------


def test_an_exclusive_subscription_asks_activemq_for_one(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    subscribing = connector.subscribe(SubscriptionSpec("/queue/q", exclusive=True), Consumer())
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    assert subscribe.headers["activemq.exclusive"] == "true"
    assert "browse" not in connector.capabilities and "exclusive-consumers" in connector.capabilities


def test_subscription_headers_and_restoration_after_reconnect(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock, failure_retry_interval=500, transformation="jms-json")
    spec = SubscriptionSpec(
        "/topic/prices", selector="sym = 'X'", prefetch=10, durable_name="d1", client_id="app", ack_mode="client"
    )
    consumer = Consumer()
    subscribing = connector.subscribe(spec, consumer)
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    assert subscribe.headers["ack"] == "client-individual"
    assert subscribe.headers["selector"] == "sym = 'X'"
    assert subscribe.headers["activemq.prefetchSize"] == "10"
    assert subscribe.headers["activemq.subscriptionName"] == "app.d1"
    assert subscribe.headers["transformation"] == "jms-json"
    assert "activemq.exclusive" not in subscribe.headers
    broker.drop()
    clock.advance(0.5)
    broker.accept()
    (again,) = broker.receipt_all()
    assert again.command == "SUBSCRIBE"
    assert again.headers["id"] == subscribe.headers["id"]
    assert consumer.failures == []


def test_auto_mode_acks_after_delivery_unless_the_consumer_closed(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a"), consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    sub_id = subscribe.headers["id"]
    broker.answer("MESSAGE", {"subscription": sub_id, "message-id": "m1", "ack": "a1", "destination": "/queue/a"}, b"x")
    (ack,) = broker.frames()
    assert ack.command == "ACK" and ack.headers == {"id": "a1"}
    consumer.on_deliver = subscription.close  # e.g. the GlassFish rule closed the client
    broker.answer("MESSAGE", {"subscription": sub_id, "message-id": "m2", "ack": "a2", "destination": "/queue/a"}, b"y")
    assert [frame.command for frame in broker.frames()] == ["UNSUBSCRIBE"]  # and no ACK
    assert [message.message_id for message, _ in consumer.deliveries] == ["m1", "m2"]


def test_auto_mode_does_not_ack_a_delivery_the_consumer_refused(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    consumer = Consumer()
    consumer.on_deliver = lambda: False  # e.g. not a Text/Bytes message after the outbound chain
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a"), consumer)
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": "m1", "ack": "a1"}, b"x")
    assert len(consumer.deliveries) == 1
    assert broker.frames() == []


def test_tags_of_a_lost_connection_are_not_acked_on_the_new_one(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock, failure_retry_interval=100)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client-individual"), consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": "m1", "ack": "a1"}, b"x")
    old_tag = consumer.deliveries[0][1]
    broker.drop()
    clock.advance(0.1)
    broker.accept()
    broker.receipt_all()
    assert result_of(subscription.ack([old_tag])) is None
    assert broker.frames() == []


def test_with_strict_acks_a_tag_of_a_lost_connection_fails(broker: FakeBroker, clock: Clock) -> None:
    """What a bridge asks for: the broker redelivers that message, so its ack must not succeed."""
    connector = started(broker, clock, failure_retry_interval=100)
    consumer = Consumer()
    spec = SubscriptionSpec("/queue/a", ack_mode="client-individual", strict_acks=True)
    subscribing = connector.subscribe(spec, consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": "m1", "ack": "a1"}, b"x")
    old_tag = consumer.deliveries[0][1]
    broker.drop()
    clock.advance(0.1)
    broker.accept()
    broker.receipt_all()
    failures: list[Any] = []
    subscription.ack([old_tag]).addErrback(failures.append)
    assert [f.type for f in failures] == [StaleDelivery]
    assert broker.frames() == []


def test_pause_buffers_and_resume_delivers_in_order(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client"), consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    subscription.pause()
    for i in range(3):
        broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": f"m{i}", "ack": f"a{i}"})
    assert consumer.deliveries == []
    subscription.resume()
    assert [message.message_id for message, _ in consumer.deliveries] == ["m0", "m1", "m2"]


def test_a_broker_sending_far_past_the_prefetch_to_a_paused_subscription_loses_its_connection(
        broker: FakeBroker, clock: Clock) -> None:
    """Before: the backlog of a paused subscription took everything the broker sent (a broker that
    ignores the prefetch grew the gateway by 160 MiB for 160 messages of 1 MiB, prefetch 5); now more
    than twice the prefetch and 4 MiB is a broken protocol: the connection is closed (the broker redelivers)."""
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client", prefetch=3), consumer)
    (subscribe,) = broker.receipt_all()
    assert subscribe.headers["activemq.prefetchSize"] == subscribe.headers["prefetch-count"] == "3"
    subscription = result_of(subscribing)
    subscription.pause()
    transport = broker.transport
    assert transport is not None
    body = b"x" * (256 * 1024)
    flood = b"".join(encode_frame(Frame("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": f"m{i}",
                                                    "ack": f"a{i}"}, body), "1.2") for i in range(50))
    assert broker.protocol is not None
    broker.protocol.dataReceived(flood)
    assert transport.disconnecting
    assert "ignores the prefetch" in str(broker.protocol.error)
    subscription.resume()
    assert consumer.deliveries == []  # the backlog went with the connection: the broker redelivers it


def test_small_messages_past_a_small_prefetch_are_held_as_a_byte_counting_broker_sends_them(
        broker: FakeBroker, clock: Clock) -> None:
    """Artemis ignores ``activemq.prefetchSize`` and bounds a STOMP consumer by bytes (10 KiB by default): 100
    messages of 100 B past a prefetch of 1 are no broken protocol (under 4 MiB): held, delivered on resume."""
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client", prefetch=1), consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    subscription.pause()
    assert broker.protocol is not None and broker.transport is not None
    broker.protocol.dataReceived(b"".join(
        encode_frame(Frame("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": f"m{i}",
                                       "ack": f"a{i}"}, b"y" * 100), "1.2") for i in range(100)))
    assert not broker.transport.disconnecting
    subscription.resume()
    assert len(consumer.deliveries) == 100


def test_deliveries_handed_on_and_not_acknowledged_count_against_the_prefetch_too(
        broker: FakeBroker, clock: Clock) -> None:
    """A bridge's source whose target stalls takes deliveries and does not acknowledge them (it is not
    paused): a broker that ignores the prefetch grew the gateway by 156-163 MiB for 3,000 messages of 64 KiB
    at prefetch 100. What was handed on unacknowledged counts with what is held: past twice the prefetch
    and 4 MiB the connection is closed; each acknowledgement makes room, as the broker's prefetch does."""
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client-individual", prefetch=3),
                                      consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    assert broker.protocol is not None and broker.transport is not None
    body = b"x" * (1024 * 1024)

    def message(index: int) -> bytes:
        return encode_frame(Frame("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": f"m{index}",
                                              "ack": f"a{index}"}, body), "1.2")

    for index in range(20):  # an honest pace: each one acknowledged before the next
        broker.protocol.dataReceived(message(index))
        subscription.ack([consumer.deliveries[-1][1]])
    assert not broker.transport.disconnecting and len(consumer.deliveries) == 20
    broker.protocol.dataReceived(b"".join(message(index) for index in range(20, 40)))  # none acknowledged
    assert broker.transport.disconnecting
    assert "ignores the prefetch" in str(broker.protocol.error)
    assert len(consumer.deliveries) == 26  # (20, then six: twice the prefetch, at least 4 MiB)


def test_an_honest_broker_filling_the_prefetch_of_a_paused_subscription_is_fine(broker: FakeBroker,
                                                                                 clock: Clock) -> None:
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client", prefetch=3), consumer)
    (subscribe,) = broker.receipt_all()
    subscription = result_of(subscribing)
    subscription.pause()
    for i in range(3):
        broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": f"m{i}", "ack": f"a{i}"})
    assert broker.transport is not None and not broker.transport.disconnecting
    subscription.resume()
    assert len(consumer.deliveries) == 3


# -- transactions -------------------------------------------------------------


def test_send_batch_is_begin_sends_commit(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    batch: list[Message] = [TextMessage(destination="/queue/a", text=f"t{i}", message_id=f"m{i}") for i in range(2)]
    outcome: list[Any] = []
    committing = connector.send_batch(batch)
    committing.addBoth(outcome.append)
    frames = broker.frames()
    assert [frame.command for frame in frames] == ["BEGIN", "SEND", "SEND", "COMMIT"]
    transaction = frames[0].headers["transaction"]
    assert all(frame.headers["transaction"] == transaction for frame in frames)
    assert not any("receipt" in frame.headers for frame in frames[:3])
    assert outcome == []
    broker.answer("RECEIPT", {"receipt-id": frames[3].headers["receipt"]})
    assert outcome == [None]
    assert connector.metrics.sends.labels("amq", "ok")._value.get() == 2


def test_stop_disconnects_and_fails_waiting_sends(broker: FakeBroker, clock: Clock) -> None:
    connector = started(broker, clock)
    stopping = connector.stop()
    (disconnect,) = broker.frames()
    assert disconnect.command == "DISCONNECT"
    broker.answer("RECEIPT", {"receipt-id": disconnect.headers["receipt"]})
    broker.drop()
    result_of(stopping)
    assert connector.state == "stopped"
    with pytest.raises(ConnectorUnavailable):
        result_of(connector.send(TextMessage(destination="/queue/a", text="x", message_id="m")))
    assert not clock.getDelayedCalls()


def test_a_broker_closing_at_a_transformed_subscribe_gets_subscribes_without_it(
    broker: FakeBroker, clock: Clock
) -> None:
    connector = started(broker, clock, failure_retry_interval=5000, transformation="jms-json")
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/orders"), consumer)
    (subscribe,) = broker.frames()
    assert subscribe.headers["transformation"] == "jms-json"
    broker.drop()  # what ActiveMQ without XStream does: no ERROR frame, no RECEIPT
    clock.advance(0)  # reconnects at once, not after failure_retry_interval
    broker.accept()
    (again,) = broker.receipt_all()
    assert again.command == "SUBSCRIBE" and "transformation" not in again.headers
    assert result_of(subscribing) is not None and consumer.failures == []
    health = connector.health()
    assert health.up and "transformation:jms-json" in health.detail and "XStream" in health.detail
    assert connector.status()["transformation"] == ""
    broker.drop()  # a later loss is an ordinary one: restored as it is, no second fallback
    clock.advance(5)
    broker.accept()
    (restored,) = broker.receipt_all()
    assert restored.command == "SUBSCRIBE" and "transformation" not in restored.headers


# -- the transformation probe --------------------------------------------------


def test_the_default_probes_once_and_subscribes_with_jms_json_when_the_broker_takes_it(
    broker: FakeBroker, clock: Clock
) -> None:
    connector = make(broker, clock, failure_retry_interval=500)
    starting = connector.start()
    broker.accept()
    probe = broker.probe()
    assert probe.headers["transformation"] == "jms-json" and probe.headers["ack"] == "auto"
    clock.advance(0)
    result_of(starting)
    subscribing = connector.subscribe(SubscriptionSpec("/queue/orders"), Consumer())
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    assert subscribe.headers["transformation"] == "jms-json"
    assert EMPTY_TEXTS not in connector.health().detail
    broker.drop()
    clock.advance(0.5)
    broker.accept()  # no second probe: the answer is known
    (again,) = broker.receipt_all()
    assert again.command == "SUBSCRIBE" and again.headers["transformation"] == "jms-json"


def test_a_broker_closing_at_the_probe_is_left_at_once_and_subscribed_without_the_transformation(
    broker: FakeBroker, clock: Clock
) -> None:
    connector = make(broker, clock, failure_retry_interval=5000, max_retries=0)
    starting = connector.start()
    broker.accept()
    broker.probe(accept=False)  # a stock ActiveMQ: no ERROR frame, no RECEIPT, the connection closed
    broker.accept()  # a second connection within the same attempt (max_retries 0 allows no retry)
    clock.advance(0)
    result_of(starting)
    assert broker.attempts == 2
    subscribing = connector.subscribe(SubscriptionSpec("/queue/orders"), Consumer())
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    assert "transformation" not in subscribe.headers
    health = connector.health()
    assert health.up and EMPTY_TEXTS in health.detail and "XStream" in health.detail
    assert connector.status()["transformation"] == ""


def test_the_probes_second_connection_waits_out_its_own_client_id(broker: FakeBroker, clock: Clock) -> None:
    """ActiveMQ forgets the connection it closed at the probe a moment later: the next CONNECT, made at
    once, can be refused for the client id. It is tried again shortly, within the same attempt."""
    connector = make(broker, clock, failure_retry_interval=5000, max_retries=0)
    starting = connector.start()
    broker.accept()
    broker.probe(accept=False)
    broker.refuse_client_id()
    assert broker.attempts == 2 and connector.state != "failed"
    clock.advance(0.1)
    assert broker.attempts == 3
    broker.accept()
    clock.advance(0)
    result_of(starting)
    assert connector.health().up


def test_a_client_id_held_longer_is_a_failed_attempt_that_names_it(broker: FakeBroker, clock: Clock) -> None:
    connector = make(broker, clock, failure_retry_interval=5000, max_retries=0)
    starting = connector.start()
    for _ in range(len(CLIENT_ID_WAITS) + 1):
        broker.refuse_client_id()
        clock.advance(max(CLIENT_ID_WAITS))
    assert broker.attempts == len(CLIENT_ID_WAITS) + 1
    with pytest.raises(ConnectorUnavailable, match="already connected"):
        result_of(starting)
    clock.advance(60)
    assert broker.attempts == len(CLIENT_ID_WAITS) + 1  # max_retries 0: no more


def test_after_a_client_id_held_past_the_quick_retries_attempts_go_without_them(broker: FakeBroker,
                                                                                  clock: Clock) -> None:
    """Another process holds the client id: once the quick retries of one attempt are spent, each later
    attempt is one CONNECT per ``failure_retry_interval``; a connection that succeeds brings them back."""
    connector = make(broker, clock, failure_retry_interval=5000, transformation="")
    connector.start()
    for _ in range(len(CLIENT_ID_WAITS) + 1):
        broker.refuse_client_id()
        clock.advance(max(CLIENT_ID_WAITS))
    assert broker.attempts == len(CLIENT_ID_WAITS) + 1 and connector.client_id_taken
    for attempt in range(3):  # (the interval, then a single CONNECT refused)
        clock.advance(5)
        assert broker.attempts == len(CLIENT_ID_WAITS) + 2 + attempt
        broker.refuse_client_id()
        clock.advance(max(CLIENT_ID_WAITS))
        assert broker.attempts == len(CLIENT_ID_WAITS) + 2 + attempt
    clock.advance(5)
    broker.accept()
    clock.advance(0)
    assert connector.health().up and not connector.client_id_taken


@pytest.mark.parametrize("options", [{"transformation": ""}, {"amq_msg_type": False}], ids=["none", "not-activemq"])
def test_no_probe_without_a_transformation_to_ask_for(broker: FakeBroker, clock: Clock,
                                                      options: dict[str, Any]) -> None:
    connector = make(broker, clock, **options)
    starting = connector.start()
    broker.accept()
    clock.advance(0)
    result_of(starting)
    assert broker.frames() == []
    subscribing = connector.subscribe(SubscriptionSpec("/queue/orders"), Consumer())
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    assert "transformation" not in subscribe.headers
    assert (EMPTY_TEXTS in connector.health().detail) == ("transformation" in options)


def test_a_broker_that_never_answers_connect_is_a_failed_attempt_naming_connect_timeout(
        broker: FakeBroker, clock: Clock) -> None:
    """Before: the attempt's error read "(1.5, 'Deferred')" (addTimeout's TimeoutError), in the log,
    in `status()` and in the sends' ERROR frames."""
    connector = make(broker, clock, connect_timeout=1500, failure_retry_interval=300, transformation="")
    starting = connector.start()
    clock.advance(1.5)
    result_of(starting)  # retries are allowed: the gateway starts, sends wait
    assert connector.last_error == "no CONNECTED within 1500 ms of the CONNECT (connectors.amq.connect_timeout)"
    assert broker.transport is not None and broker.transport.disconnecting
    clock.advance(0.3)
    assert broker.attempts == 2


def test_the_broker_connection_takes_a_frame_larger_than_the_listeners_limit(broker: FakeBroker,
                                                                              clock: Clock) -> None:
    """A message a client sent at the listener's 32 MiB limit comes back from the broker with the
    broker's headers added. Before: the broker connection's decoder had the same 32 MiB, so such a
    MESSAGE ended every connection, came again after each reconnection, and never arrived."""
    connector = started(broker, clock)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a"), consumer)
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    body = b"z" * (32 * 1024 * 1024 - 1024)
    broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": "big", "ack": "big",
                              "x-broker-trace": "t" * 4096, "content-length": str(len(body))}, body)
    assert broker.transport is not None and not broker.transport.disconnecting
    assert [message.message_id for message, _ in consumer.deliveries] == ["big"]
    assert connector.settings.max_frame_size == 33 * 1024 * 1024


def test_the_broker_connections_frame_limit_is_an_option(broker: FakeBroker, clock: Clock) -> None:
    """A MESSAGE over it is skipped (tests/unit/test_oversized_messages.py); headers over it end the connection."""
    connector = started(broker, clock, max_frame_size=4096)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a"), consumer)
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": "m", "ack": "m"}, b"x" * 5000)
    assert broker.transport is not None and not broker.transport.disconnecting
    assert consumer.deliveries == []
    broker.answer("MESSAGE", {"subscription": subscribe.headers["id"], "message-id": "n", "ack": "n",
                              "x-broker-trace": "t" * 5000})
    assert broker.transport.disconnecting
    assert consumer.deliveries == []
