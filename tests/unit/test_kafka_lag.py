"""A Kafka subscription's lag (``KafkaSubscription._read_lag``, run in its polling thread) and its collector,
with a fake consumer: high watermark minus the committed offset, the low watermark before any commit, the
last fetch's watermark when the broker's answer is lower (Tansu), a partition without an answer left out."""

from __future__ import annotations

from typing import Any
from unittest.mock import Mock

from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from gateway.connectors.kafka_subscription import ConsumerLagCollector, KafkaSubscription
from gateway.interfaces import SubscriptionSpec


class Watermarks:
    """get_watermark_offsets answers from ``live`` (or raises) and ``cached``."""

    def __init__(self, live: dict[int, Any], cached: dict[int, tuple[int, int]]) -> None:
        self.live, self.cached = live, cached

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        answer = (self.cached if cached else self.live)[tp.partition]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_lag_is_the_records_after_the_committed_offset() -> None:
    subscription = KafkaSubscription(Mock(), SubscriptionSpec(destination="/topic/t"), Mock(), topic="t", group="g",
                                     consumer_factory=None, text_records=True)
    subscription._assignment = [TopicPartition("t", p) for p in range(4)]
    subscription._tracker.assign(0, 7)      # committed 7
    subscription._tracker.assign(1, None)   # nothing committed yet: from the low watermark
    subscription._tracker.assign(2, 3)
    subscription._tracker.assign(3, 0)
    consumer = Watermarks({0: (0, 10), 1: (4, 9), 2: (0, 5), 3: RuntimeError("timed out")},
                          {0: (0, 10), 1: (4, 9), 2: (0, 12), 3: (0, 1)})
    subscription._read_lag(consumer)
    assert subscription.lag == {0: 3, 1: 5, 2: 9}

    registry = CollectorRegistry()
    ConsumerLagCollector.for_registry(registry).add("kafka", {subscription})
    assert ConsumerLagCollector.for_registry(registry) is ConsumerLagCollector.for_registry(registry)
    assert registry.get_sample_value("jmsgateway_kafka_consumer_lag",
                                     {"connector": "kafka", "topic": "t", "group": "g"}) == 17
