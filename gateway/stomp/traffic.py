"""How many messages the STOMP listeners took in (SEND) and handed out (MESSAGE).

:class:`StompTraffic` holds plain integers the protocol bumps per frame (no
lock, no label lookup on the hot path) and exports them to Prometheus as
``jmsgateway_stomp_messages_received_total`` and
``jmsgateway_stomp_messages_sent_total`` when scraped; the admin console
samples them for its rate chart.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily


class StompTraffic:
    """Messages in and out over every STOMP connection since start (a Prometheus collector)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.received = 0
        """SEND frames read from clients."""
        self.sent = 0
        """MESSAGE frames written to clients."""
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily]:
        received = CounterMetricFamily("jmsgateway_stomp_messages_received", "SEND frames read from STOMP clients")
        received.add_metric([], self.received)
        yield received
        sent = CounterMetricFamily("jmsgateway_stomp_messages_sent", "MESSAGE frames written to STOMP clients")
        sent.add_metric([], self.sent)
        yield sent
