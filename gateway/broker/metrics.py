"""Counters of the embedded broker and their Prometheus collector.

The hot path adds to plain integers (:class:`Tally`); prometheus_client reads them when it is
scraped, so counting costs no lock or label lookup.  The gauges are :mod:`gateway.broker.status`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric


class Tally:
    """A counter the hot path bumps with a plain integer add."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, amount: int = 1) -> None:
        self.count += amount


class BrokerMetrics:
    """Counters of the embedded broker, exposed through an injectable registry (a custom collector)."""

    _COUNTERS = {
        "enqueued": "Messages accepted by the embedded broker",
        "consumed": "Messages acknowledged at the embedded broker",
        "redelivered": "Deliveries returned for redelivery",
        "dead_lettered": "Messages moved to a dead-letter queue",
        "expired": "Expired messages dropped undelivered",
        "dropped": "Messages discarded because their destination was full (full_policy DROP)",
        "refused_full": "Sends refused because their destination was full (full_policy FAIL)",
        "paged_out": "Messages written to the page file because memory was full",
        "queues_collected": "Auto-created queues removed after [broker] inactive_queue_timeout of inactivity",
    }

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry = registry or CollectorRegistry()
        self.enqueued = Tally()
        self.consumed = Tally()
        self.redelivered = Tally()
        self.dead_lettered = Tally()
        self.expired = Tally()
        self.dropped = Tally()
        self.refused_full = Tally()
        self.paged_out = Tally()
        self.queues_collected = Tally()
        self.gauges: Callable[[], Iterator[Metric]] | None = None
        """The broker's memory and paging gauges, read at each scrape."""
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        for name, documentation in self._COUNTERS.items():
            family = CounterMetricFamily(f"jmsgateway_broker_{name}", documentation)
            family.add_metric([], getattr(self, name).count)
            yield family
        if self.gauges is not None:
            yield from self.gauges()
