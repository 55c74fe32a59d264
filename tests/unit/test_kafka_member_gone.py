"""A bridge's Kafka subscription whose commit finds its member expelled from the group (a WAN stall
longer than the session) ends at once: no more polling, so librdkafka does not rejoin the group while
the bridge closes the subscription (on Tansu a member that rejoins and leaves within about a second
leaves the group giving its successors no partitions for a minute or more).  A fake consumer, the
polling thread's ``_run`` called directly."""

from __future__ import annotations

from typing import Any
from unittest.mock import Mock

import pytest
from confluent_kafka import TopicPartition
from twisted.internet.defer import Deferred

from gateway.connectors.kafka_consumer_host import ConsumerCallFailed
from gateway.connectors.kafka_subscription import KafkaSubscription, _Command
from gateway.interfaces import SubscriptionSpec
from tests.unit.test_kafka_pause import Record

UNKNOWN_MEMBER_ID = 25


class ExpelledConsumer:
    """Assigns partition 0 on the first consume and hands out 3 records; every commit fails with
    ``code``; after 20 consumes the test's client closes the subscription (so a loop that goes on
    polling ends too)."""

    def __init__(self, sub: KafkaSubscription, code: int | None) -> None:
        self.sub = sub
        self.code = code
        self.calls: list[str] = []
        self.on_assign: Any = None
        self.close_with_ack: Deferred[None] | None = None

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.on_assign = callbacks["on_assign"]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        self.calls.append("consume")
        consumes = self.calls.count("consume")
        if consumes == 1:
            self.on_assign(self, [TopicPartition("t", 0)])
            return [Record(0, offset) for offset in range(3)]
        if consumes == 2:  # the client acknowledges what it got (and closes at once, when told to)
            deliver: Any = self.sub.consumer.deliver
            tags = [call.args[1] for call in deliver.call_args_list]
            self.sub._commands.put(_Command("ack", tags, self.sub.acked))  # type: ignore[attr-defined]
            if self.close_with_ack is not None:
                self.sub._commands.put(_Command("close", [], self.close_with_ack))
        if consumes == 20:
            self.sub._commands.put(_Command("close", [], Deferred()))
        return []

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:
        self.calls.append("commit")
        raise ConsumerCallFailed('KafkaError{code=UNKNOWN_MEMBER_ID,val=25,str="Commit failed"}', self.code)

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [TopicPartition("t", tp.partition, -1001) for tp in partitions]

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        return 0, 3

    def close(self) -> None:
        self.calls.append("close")


def run(strict_acks: bool, code: int | None,
        close_with_ack: Deferred[None] | None = None) -> tuple[ExpelledConsumer, list[Any], KafkaSubscription]:
    spec = SubscriptionSpec(destination="/queue/t", ack_mode="client-individual", prefetch=10,
                            strict_acks=strict_acks)
    reactor = Mock()
    reactor.callFromThread.side_effect = lambda function, *args: function(*args)
    sub = KafkaSubscription(reactor, spec, Mock(), topic="t", group="g", consumer_factory=None,
                            text_records=True, poll_timeout=0.0)
    fake = ExpelledConsumer(sub, code)
    fake.close_with_ack = close_with_ack
    sub._consumer_factory = lambda: fake
    acked: Deferred[None] = Deferred()
    failures: list[Any] = []
    acked.addErrback(failures.append)
    sub.acked = acked  # type: ignore[attr-defined]
    sub._run()
    return fake, failures, sub


def test_a_bridge_subscription_whose_member_is_gone_stops_polling_and_closes_at_once() -> None:
    fake, failures, sub = run(strict_acks=True, code=UNKNOWN_MEMBER_ID)
    assert len(failures) == 1 and "UNKNOWN_MEMBER_ID" in failures[0].getErrorMessage()
    failed_at = fake.calls.index("commit")
    assert fake.calls[failed_at + 1:] == ["close"], f"went on after its member was gone: {fake.calls}"
    failed: Any = sub.consumer.subscription_failed
    assert failed.call_count == 1, "the bridge hears the subscription ended"


def test_a_close_taken_with_the_failing_acknowledgement_still_fires() -> None:
    """The bridge stops (close) in the same turn as the acknowledgement whose commit finds the member gone:
    its close must fire, or the bridge's stop would wait for ever."""
    closed: Deferred[None] = Deferred()
    fake, failures, _ = run(strict_acks=True, code=UNKNOWN_MEMBER_ID, close_with_ack=closed)
    assert len(failures) == 1
    assert closed.called, "the close taken with the failed commit never fired"
    assert fake.calls[-1] == "close"


@pytest.mark.parametrize(("strict_acks", "code"), [(False, UNKNOWN_MEMBER_ID), (True, None)])
def test_other_commit_failures_leave_the_subscription_polling(strict_acks: bool, code: int | None) -> None:
    """A STOMP client's subscription (no strict acks) goes on, librdkafka rejoins it; so does a bridge's
    commit that failed for another reason (the bridge decides)."""
    fake, failures, _ = run(strict_acks=strict_acks, code=code)
    assert len(failures) == 1
    assert fake.calls.count("consume") == 20
    assert fake.calls[-1] == "close"


def test_the_consumer_process_passes_the_kafka_error_code_on() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from gateway.connectors.kafka_consumer_host import _error_code

    assert _error_code(KafkaException(KafkaError(UNKNOWN_MEMBER_ID))) == UNKNOWN_MEMBER_ID
    assert _error_code(ValueError("not kafka's")) is None
