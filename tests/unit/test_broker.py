"""The embedded broker on its own, with a Clock: dispatch, redelivery, DLQ, expiry, durables."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock
from zope.interface import implementer
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from gateway.errors import DestinationError
from gateway.interfaces import IConsumer, IPostingConnector, ISubscription, SubscriptionSpec
from gateway.message.model import Message, TextMessage
from tests.support.messages import texts_of


@implementer(IConsumer)
class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[Message, Any]] = []
        self.failed: list[Exception] = []

    def deliver(self, message: Message, tag: Any) -> None:
        self.got.append((message, tag))

    def subscription_failed(self, reason: Exception) -> None:
        self.failed.append(reason)

    def texts(self) -> list[str]:
        return texts_of(m for m, _ in self.got)


def text(destination: str, body: str, **fields: Any) -> TextMessage:
    return TextMessage(destination=destination, message_id=f"ID:{body}", text=body, **fields)


def subscribe(broker: EmbeddedBroker, sink: Sink, **spec: Any) -> ISubscription:
    result: list[ISubscription] = []
    broker.subscribe(SubscriptionSpec(**spec), sink).addCallback(result.append)
    return result[0]


@pytest.fixture
def broker_settings() -> BrokerSettings:
    """The broker of these tests redelivers a message twice before its DLQ."""
    return BrokerSettings(max_redeliveries=2)


def test_unknown_destination_kind(broker: EmbeddedBroker) -> None:
    failures: list[Any] = []
    broker.send(text("/nowhere/a", "x")).addErrback(failures.append)
    assert failures and failures[0].check(DestinationError)


def test_post_settles_once_without_a_deferred(broker: EmbeddedBroker) -> None:
    """IPostingConnector: a message that needs no store write is settled before post returns;
    a refused one is settled with the error (post itself does not raise)."""
    assert verifyObject(IPostingConnector, broker)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    outcomes: list[tuple[Any, Any]] = []
    broker.post(text("/queue/q", "a"), lambda error, ack: outcomes.append((error, ack)), False)
    assert outcomes == [(None, None)] and sink.texts() == ["a"]
    broker.post(text("/nowhere/a", "x"), lambda error, ack: outcomes.append((error, ack)))
    assert len(outcomes) == 2 and isinstance(outcomes[1][0], DestinationError) and outcomes[1][1] is None
    broker.post(text("/queue/q", "late", expiration=1), lambda error, ack: outcomes.append((error, ack)))
    assert outcomes[2] == (None, None) and sink.texts() == ["a"]  # expired: settled, never delivered


def test_round_robin_with_prefetch(broker: EmbeddedBroker) -> None:
    first, second = Sink(), Sink()
    subscribe(broker, first, destination="/queue/q", ack_mode="client-individual", prefetch=2)
    subscribe(broker, second, destination="/queue/q", ack_mode="client-individual", prefetch=2)
    for i in range(6):
        broker.send(text("/queue/q", f"m{i}"))
    assert first.texts() == ["m0", "m2"] and second.texts() == ["m1", "m3"]
    assert len(broker.queues["/queue/q"]) == 2


def test_nack_redelivers_then_dead_letters(broker: EmbeddedBroker) -> None:
    sink = Sink()
    sub = subscribe(broker, sink, destination="/queue/q", ack_mode="client-individual")
    broker.send(text("/queue/q", "poison"))
    for attempt in range(3):
        message, tag = sink.got[-1]
        assert message.redelivery_count == attempt
        sub.nack([tag])
    assert len(sink.got) == 3
    dlq = broker.queues["/queue/DLQ.q"].messages()
    assert [m.properties["original-destination"] for m in dlq] == ["/queue/q"]
    assert broker.metrics.registry.get_sample_value('jmsgateway_broker_dead_lettered_total') == 1


def test_selector_leaves_other_messages(broker: EmbeddedBroker) -> None:
    reds = Sink()
    subscribe(broker, reds, destination="/queue/q", selector="color = 'red'")
    for color in ("blue", "red", "green", "red"):
        broker.send(text("/queue/q", color, properties={"color": color}))
    assert reds.texts() == ["red", "red"]
    assert [m.text for m in broker.queues["/queue/q"].messages()] == ["blue", "green"]  # type: ignore[attr-defined]


def test_expiry_on_dispatch_and_by_purge(broker: EmbeddedBroker, clock: Clock) -> None:
    now = broker.now_ms()
    broker.send(text("/queue/q", "soon", expiration=now + 500))
    broker.send(text("/queue/q", "later", expiration=now + 5000))
    clock.advance(1.0)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    assert sink.texts() == ["later"]
    broker.send(text("/queue/other", "x", expiration=broker.now_ms() + 100))
    clock.advance(1.5)  # the purge runs every second
    assert len(broker.queues["/queue/other"]) == 0
    assert broker.metrics.registry.get_sample_value('jmsgateway_broker_expired_total') == 2


def test_durable_subscription_changes(broker: EmbeddedBroker) -> None:
    sink = Sink()
    sub = subscribe(broker, sink, destination="/topic/t", durable_name="d", client_id="c", selector="a = 1")
    refused: list[Any] = []
    spec = SubscriptionSpec(destination="/topic/t", durable_name="d", client_id="c", selector="a = 1")
    broker.subscribe(spec, Sink()).addErrback(refused.append)
    assert refused and refused[0].check(DestinationError)
    assert "already has an active subscriber" in refused[0].getErrorMessage()
    sub.close()
    broker.send(text("/topic/t", "kept", properties={"a": 1}))
    broker.send(text("/topic/t", "filtered", properties={"a": 2}))
    assert len(broker.durables["durable:c:d"]) == 1
    # Re-subscribing with another selector starts the subscription afresh (as ActiveMQ does).
    fresh = Sink()
    subscribe(broker, fresh, destination="/topic/t", durable_name="d", client_id="c", selector="a = 2")
    assert fresh.texts() == []


def test_auto_ack_consumes_on_delivery(broker: EmbeddedBroker) -> None:
    sink = Sink()
    sub = subscribe(broker, sink, destination="/queue/q")
    broker.send(text("/queue/q", "x"))
    sub.close()
    assert broker.status()["queues"]["/queue/q"] == {"pending": 0, "consumers": 0, "inflight": 0}


class Refusing(Sink):
    """A consumer whose transport is full while ``full`` is set (deliver answers False)."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def deliver(self, message: Message, tag: Any) -> bool | None:  # type: ignore[override]
        if self.full:
            return False
        self.got.append((message, tag))
        return None


def test_the_only_consumer_served_on_arrival_keeps_order_and_memory(broker: EmbeddedBroker) -> None:
    """A message handed to a queue's only consumer as it arrives, one it refuses, and the ones
    behind it: delivered once each in order, and the queue's memory back to nothing."""
    sink = Refusing()
    sub = subscribe(broker, sink, destination="/queue/q")
    queue = broker.queues["/queue/q"]
    broker.send(text("/queue/q", "a"))
    assert sink.texts() == ["a"] and queue.memory == 0 and broker.memory.used == 0
    sink.full = True
    broker.send(text("/queue/q", "b"))
    broker.send(text("/queue/q", "c", priority=9))
    assert sink.texts() == ["a"] and len(queue) == 2 and broker.memory.used == queue.memory > 0
    sink.full = False
    broker.send(text("/queue/q", "d"))  # (the consumer is paused: it waits behind the others)
    assert sink.texts() == ["a"]
    sub.resume()
    assert sink.texts() == ["a", "c", "b", "d"] and len(queue) == 0 and broker.memory.used == 0
    broker.send(text("/queue/q", "e", expiration=broker.now_ms() - 1))  # expired: never delivered
    broker.send(text("/queue/q", "f"))
    assert sink.texts()[-1] == "f" and "e" not in sink.texts() and broker.memory.used == 0
