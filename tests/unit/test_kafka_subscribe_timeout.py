"""A Kafka subscription whose group gives it no partitions within ``subscribe_timeout`` fails naming the
setting (it said ``(60.0, 'Deferred')``, Twisted's timeout's own text) and is closed."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from gateway.connectors import kafka as kafka_module
from gateway.connectors.kafka import KafkaConnector
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.errors import ConnectorUnavailable
from gateway.interfaces import SubscriptionSpec


class NeverAssigned:
    """A subscription whose group never assigns it anything."""

    closed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> Deferred[Any]:
        return Deferred()

    def close(self) -> Deferred[None]:
        NeverAssigned.closed = True
        return Deferred()


def test_no_partitions_within_the_subscribe_timeout_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_module, "KafkaSubscription", NeverAssigned)
    clock = Clock()
    connector = KafkaConnector(clock, KafkaSettings(bootstrap="127.0.0.1:1", subscribe_timeout=7))
    spec = SubscriptionSpec(destination="/queue/kafka.t", ack_mode="client-individual")
    failures: list[Any] = []
    connector._start_subscription(spec, object(), "t", None).addErrback(failures.append)  # type: ignore[arg-type]
    clock.advance(7.1)
    assert len(failures) == 1 and failures[0].check(ConnectorUnavailable)
    message = failures[0].getErrorMessage()
    assert "got no partitions of t: none within 7 s (subscribe_timeout)" in message, message
    assert NeverAssigned.closed
