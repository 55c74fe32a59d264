"""A delivery the STOMP side refuses on a live Kafka subscription (the session's transport was full
while the SUBSCRIBE was still being answered, :meth:`StompSession.deliver`) comes again: before, it
stayed outstanding in the offset tracker for the life of the subscription, neither delivered nor
acknowledgeable, and the partition's commits stopped below it.  A fake consumer with positions and
seek, the polling thread's ``_run`` called directly."""

from __future__ import annotations

from typing import Any
from unittest.mock import Mock

import pytest
from confluent_kafka import TopicPartition
from twisted.internet.defer import Deferred

from gateway.connectors.kafka_subscription import KafkaSubscription, _Command
from gateway.interfaces import SubscriptionSpec
from tests.unit.test_kafka_pause import Record

END = 5


class SeekingConsumer:
    """Partition 0 holds offsets 0..END-1; consume hands out from the position, seek moves it; the
    subscription is closed after 30 consumes."""

    def __init__(self, sub: KafkaSubscription) -> None:
        self.sub = sub
        self.position = 0
        self.consumes = 0
        self.seeks: list[int] = []
        self.on_assign: Any = None

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.on_assign = callbacks["on_assign"]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        self.consumes += 1
        if self.consumes == 1:
            self.on_assign(self, [TopicPartition("t", 0)])
        if self.consumes == 30:
            self.sub._commands.put(_Command("close", [], Deferred()))
        records = [Record(0, offset) for offset in range(self.position, min(END, self.position + num_messages))]
        self.position += len(records)
        return records

    def seek(self, tp: Any) -> None:
        self.seeks.append(tp.offset)
        self.position = tp.offset

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:
        pass

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [TopicPartition("t", tp.partition, -1001) for tp in partitions]

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        return 0, END

    def close(self) -> None:
        pass


@pytest.mark.parametrize("ack_mode", ["client-individual", "auto"])
def test_a_refused_delivery_comes_again(ack_mode: str) -> None:
    spec = SubscriptionSpec(destination="/queue/t", ack_mode=ack_mode, prefetch=100)
    reactor = Mock()
    reactor.callFromThread.side_effect = lambda function, *args: function(*args)
    delivered: list[tuple[int, bool]] = []
    refused_once: set[int] = set()

    class Client:
        def deliver(self, message: Any, tag: Any) -> bool:
            if tag.offset == 1 and 1 not in refused_once:
                refused_once.add(1)
                return False  # (the session's transport full while its SUBSCRIBE is answered)
            delivered.append((tag.offset, message.redelivered))
            if ack_mode != "auto":
                sub._commands.put(_Command("ack", [tag], None))
            return True

        def subscription_failed(self, error: Exception) -> None:
            raise AssertionError(error)

    sub = KafkaSubscription(reactor, spec, Client(), topic="t", group="g",  # type: ignore[arg-type]
                            consumer_factory=None, text_records=True, poll_timeout=0.0)
    fake = SeekingConsumer(sub)
    sub._consumer_factory = lambda: fake
    sub._run()
    offsets = [offset for offset, _ in delivered]
    assert 1 in offsets, f"the refused delivery never came again: {delivered}"
    assert set(offsets) == set(range(END))
    assert sub._tracker.unacked == 0, "a delivery stayed outstanding"
