"""Issue 25's bridge faults at the engine level (a Clock, the embedded broker, fault
wrappers): a stale acknowledgement, a delivery repeated within a batch, a message the
target refuses for good, a send applied whose confirmation was lost, Kafka fallback ids
across topic re-creation, the in-doubt check's Deferred, the Kafka transaction engine's
rewind, the cycle guard's answer to IConnector senders, the gateway id, a short final batch after
a lost source (its batch timer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import fail, succeed
from zope.interface import implementer

from gateway.bridges.bridge import Bridge, source_key
from gateway.bridges.probe import target_message_id
from gateway.errors import ConnectorUnavailable, MessageRefused, StaleDelivery
from gateway.identity import ID_FILE, installation_id, resolve_gateway_id
from gateway.interfaces import IConsumer
from gateway.message.model import Message
from tests.unit.test_bridge import FlakyConnector, FlakySubscription, Rig, text


@pytest.fixture
def stale_ack(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next acknowledgement fails as one of a delivery from a previous connection."""
    original = FlakySubscription.ack
    left = [1]

    def ack(self: FlakySubscription, tags: list[Any]) -> Any:
        if left[0] > 0:
            left[0] -= 1
            self.connector.acks.append(list(tags))
            return fail(StaleDelivery("from a previous connection"))
        return original(self, tags)

    monkeypatch.setattr(FlakySubscription, "ack", ack)


@pytest.mark.usefixtures("stale_ack")
def test_at_most_once_does_not_send_a_batch_whose_acknowledgement_is_stale() -> None:
    rig = Rig(qos="AT_MOST_ONCE", max_batch_size=3)
    rig.bridge.start()
    rig.publish(text("a"), text("b"), text("c"))
    assert rig.bodies() == [], "an unacknowledged AT_MOST_ONCE batch is not sent"
    assert rig.metric("jmsgateway_bridge_dropped_total", reason="abandoned") == 0
    assert rig.bridge.state == "retrying"
    rig.clock.advance(1.0)
    rig.clock.advance(0.05)
    assert rig.bodies() == ["a", "b", "c"], "sent once, after the source redelivered"


def test_once_and_only_once_sends_a_message_delivered_twice_in_one_batch_once() -> None:
    """A source that redelivers after a reconnection while the first delivery is pending
    puts the same message twice into one batch."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=4)
    rig.bridge.start()
    rig.publish(text("a"), text("b"), text("a"), text("b"))
    assert rig.bodies() == ["a", "b"]
    assert rig.metric("jmsgateway_bridge_duplicates_skipped_total") == 2
    assert rig.pending_at_source() == 0


def test_a_message_the_target_refuses_for_good_fails_the_bridge_at_once() -> None:
    rig = Rig(qos="DUPLICATES_OK", max_batch_size=2)
    sent: list[int] = []

    def refuse(messages: list[Message]) -> Any:
        sent.append(len(messages))
        return fail(MessageRefused("a MapMessage entry the broker cannot carry"))

    rig.target.send_batch = refuse  # type: ignore[method-assign]
    rig.bridge.start()
    rig.publish(text("a"), text("b"))
    assert rig.bridge.state == "failed"
    assert sent == [2], "not retried"
    assert rig.bridge.last_error is not None and "for good" in rig.bridge.last_error
    assert rig.pending_at_source() == 2, "nothing acknowledged: the source keeps both"


def test_once_and_only_once_asks_the_target_before_a_retry() -> None:
    """The target stored the batch but the confirmation was lost: the retry finds the
    copies there and does not send them again."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3)
    real = rig.target.send_batch
    lost = [1]

    def lose_confirmation(messages: list[Message]) -> Any:
        d = real(messages)
        if lost[0]:
            lost[0] -= 1
            return d.addCallback(lambda _: fail(ConnectorUnavailable("connection lost before the receipt")))
        return d

    rig.target.send_batch = lose_confirmation  # type: ignore[method-assign]
    rig.bridge.start()
    rig.publish(text("a"), text("b"), text("c"))
    assert rig.bridge.state == "retrying"
    rig.clock.advance(1.0)
    assert rig.bodies() == ["a", "b", "c"], "no duplicate after the retry"
    assert rig.pending_at_source() == 0
    assert rig.bridge.state == "running"


def test_kafka_fallback_ids_differ_across_topic_re_creation() -> None:
    old = Message(message_id="ID:kafka:t:0:5", timestamp=1_700_000_000_000)
    new = Message(message_id="ID:kafka:t:0:5", timestamp=1_700_000_009_000)
    assert source_key(old) != source_key(new)
    assert source_key(Message(message_id="ID:app-1", timestamp=1)) == "ID:app-1"
    assert target_message_id("b", source_key(old)).startswith("ID:bridge-b:ID:kafka:t:0:5@")


def test_a_re_created_topics_records_are_not_skipped_as_duplicates() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE")
    rig.bridge.start()
    first = text("first")
    first.message_id, first.timestamp = "ID:kafka:t:0:0", 1000
    rig.publish(first)
    rig.clock.advance(0.05)
    again = text("again")
    again.message_id, again.timestamp = "ID:kafka:t:0:0", 2000
    rig.publish(again)
    rig.clock.advance(0.05)
    assert rig.bodies() == ["first", "again"]


def test_in_doubt_resolved_fires_once_the_check_is_done() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE")
    rig.bridge.start()
    fired: list[object] = []
    rig.bridge.in_doubt_resolved().addCallback(fired.append)
    assert fired == [None]


def test_a_failed_kafka_transaction_rewinds_to_the_batch_start_without_a_commit() -> None:
    """The first transaction of a partition failed: no committed offset, still rewound."""
    from gateway.connectors.kafka_transactions import KafkaTransactionalCopy

    class Partition:
        def __init__(self, topic: str, partition: int, offset: int) -> None:
            self.topic, self.partition, self.offset = topic, partition, offset

    class Consumer:
        def __init__(self) -> None:
            self.seeks: list[tuple[int, int]] = []

        def assignment(self) -> list[Partition]:
            return [Partition("src", 0, -1001), Partition("src", 1, -1001)]

        def committed(self, partitions: list[Partition], timeout: float) -> list[Partition]:
            return [Partition("src", 0, -1001), Partition("src", 1, 7)]

        def seek(self, tp: Any) -> None:
            self.seeks.append((tp.partition, tp.offset))

    class Producer:
        aborted = 0

        def abort_transaction(self, timeout: float) -> None:
            Producer.aborted += 1

    copy = KafkaTransactionalCopy.__new__(KafkaTransactionalCopy)
    copy._batch_start, copy._positions = {0: 0}, {0: 3}
    consumer, producer = Consumer(), Producer()
    copy._consumer, copy._producer = consumer, producer
    copy.attempt = "p1-1"  # the transaction under way, refused
    copy.recover(RuntimeError("MSG_SIZE_TOO_LARGE"))
    assert consumer.seeks == [(0, 0), (1, 7)]
    assert Producer.aborted == 1 and copy._consumer is consumer and copy._producer is producer
    assert copy._batch_start == {} and copy._positions == {}


def test_the_router_refuses_what_its_cycle_guard_keeps_back() -> None:
    from gateway.routing.service import NotRouted
    from tests.unit.test_routing_service import make, message, outcome

    router, kafka, _, _ = make()
    looped = message("/queue/foo", **{"jmsbridge.origin": "gw-1"})
    assert outcome(router.send(looped)).check(NotRouted)
    assert outcome(router.send_batch([message("/queue/foo"), looped])).check(NotRouted)
    assert kafka.sent == []


def test_each_installation_gets_its_own_gateway_id(tmp_path: Path) -> None:
    first = installation_id(str(tmp_path / "a"))
    assert first.startswith("jmsgateway-") and first != "jmsgateway"
    assert installation_id(str(tmp_path / "a")) == first, "generated once, then read back"
    assert (tmp_path / "a" / ID_FILE).read_text().strip() == first
    assert installation_id(str(tmp_path / "b")) != first
    assert resolve_gateway_id("orders-gw", str(tmp_path / "c")) == "orders-gw"
    assert not (tmp_path / "c").exists(), "a configured id writes nothing"


def lose_first_confirmation(rig: Rig) -> None:
    real = rig.target.send_batch
    lost = [1]

    def send_batch(messages: list[Message]) -> Any:
        d = real(messages)
        if lost[0]:
            lost[0] -= 1
            return d.addCallback(lambda _: fail(ConnectorUnavailable("connection lost before the receipt")))
        return d

    rig.target.send_batch = send_batch  # type: ignore[method-assign]


def test_at_most_once_does_not_resend_what_the_target_already_holds() -> None:
    rig = Rig(qos="AT_MOST_ONCE", max_batch_size=2)
    lose_first_confirmation(rig)
    rig.bridge.start()
    rig.publish(text("a"), text("b"))
    rig.clock.advance(1.0)
    assert rig.bodies() == ["a", "b"], "the retry found both copies at the target"
    assert rig.bridge.state == "running"


def test_at_most_once_gives_up_a_batch_in_doubt_at_a_target_that_cannot_tell() -> None:
    rig = Rig(qos="AT_MOST_ONCE", max_batch_size=2)
    lose_first_confirmation(rig)
    rig.target.held_message_ids = lambda destination, tail=0: succeed(None)  # type: ignore[method-assign]
    rig.bridge.start()
    rig.publish(text("a"), text("b"))
    rig.clock.advance(1.0)
    assert rig.bodies() == ["a", "b"], "sent once, never again"
    assert rig.metric("jmsgateway_bridge_dropped_total", reason="in-doubt") == 2
    rig.publish(text("c"), text("d"))
    assert rig.bodies() == ["a", "b", "c", "d"]


@implementer(IConsumer)
class _HeldBack:
    """A consumer shim: what a new subscription delivers waits until the subscription is confirmed."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.waiting: list[tuple[Message, Any]] | None = []

    def deliver(self, message: Message, tag: Any) -> None:
        if self.waiting is None:
            self.consumer.deliver(message, tag)
        else:
            self.waiting.append((message, tag))

    def subscription_failed(self, reason: Exception) -> None:
        self.consumer.subscription_failed(reason)

    def open(self) -> None:
        waiting, self.waiting = self.waiting or [], None
        for message, tag in waiting:
            self.consumer.deliver(message, tag)


class LateDeliveries(FlakyConnector):
    """A source whose deliveries come after the subscription is confirmed, as over STOMP
    (the broker answers SUBSCRIBE's receipt, then sends the MESSAGE frames)."""

    def __init__(self, broker: Any, clock: Any) -> None:
        super().__init__(broker, "source")
        self.clock = clock

    def subscribe(self, spec: Any, consumer: Any) -> Any:
        shim = _HeldBack(consumer)

        def confirmed(subscription: Any) -> Any:
            self.clock.callLater(0, shim.open)
            return subscription

        return super().subscribe(spec, shim).addCallback(confirmed)


def test_a_batch_overdue_when_the_source_was_lost_does_not_hold_up_the_next_subscription() -> None:
    """The batch timer fired while a batch was in flight; that batch's acknowledgement then
    failed (the source lost, what was pending dropped).  The fewer than max_batch_size messages
    the next subscription delivers (the end of the stream) still go after max_batch_time."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=10, max_batch_time=50)
    rig.source = LateDeliveries(rig.broker, rig.clock)
    rig.bridge = Bridge(rig.config, rig.source, rig.target, clock=rig.clock, metrics=rig.metrics, dedup=rig.store)
    rig.target.hold_sends = True
    rig.bridge.start()
    rig.clock.advance(0)
    rig.publish(text("a"), text("b"), text("c"))
    rig.clock.advance(0.05)
    assert len(rig.target.held) == 1, "a, b, c in flight"
    rig.publish(text("d"))
    rig.clock.advance(0.05)  # d's batch is due, but one is in flight
    rig.source.fail_acks = 1
    rig.target.hold_sends = False
    rig.target.release()  # confirmed and recorded; the acknowledgement fails: the source is lost
    assert rig.bridge.state == "retrying"
    rig.clock.advance(1.0)  # subscribed again
    rig.clock.advance(0)  # a, b, c, d delivered again
    for _ in range(10):
        rig.clock.advance(0.05)
    assert rig.bodies() == ["a", "b", "c", "d"]
    assert rig.pending_at_source() == 0


def test_a_batch_timer_of_a_lost_subscription_does_not_hold_up_the_next_one() -> None:
    """The source is lost with a batch waiting for max_batch_time; the timer must not leave the
    next subscription's short final batch waiting for a timer that never starts."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=10, max_batch_time=50)
    rig.source = LateDeliveries(rig.broker, rig.clock)
    rig.bridge = Bridge(rig.config, rig.source, rig.target, clock=rig.clock, metrics=rig.metrics, dedup=rig.store)
    rig.bridge.start()
    rig.clock.advance(0)
    rig.publish(text("a"), text("b"))
    rig.source.consumers[0].subscription_failed(ConnectorUnavailable("connection lost"))
    rig.clock.advance(0.05)  # the lost subscription's batch time
    rig.clock.advance(1.0)  # subscribed again
    rig.clock.advance(0)  # a, b delivered again
    for _ in range(10):
        rig.clock.advance(0.05)
    assert rig.bodies() == ["a", "b"]
    assert rig.pending_at_source() == 0
