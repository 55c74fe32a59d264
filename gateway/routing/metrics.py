"""Prometheus metrics of routing, per route, in an injectable registry.

``jmsgateway_routing_latency_seconds`` (histogram: its ``_sum / _count`` is
the average; from the message entering routing to Kafka's delivery report),
``jmsgateway_routing_success_total``, ``jmsgateway_routing_failures_total``
(labelled with the failure ``kind``: a soft-failure reason or a Kafka error
name), ``jmsgateway_routing_dead_lettered_total``,
``jmsgateway_routing_skipped_total`` and ``jmsgateway_routing_cycles_total``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class RouteStats:
    """One route's acknowledged messages and their latency histogram, as plain numbers.

    Owned by the reactor thread (no lock: this is the per-message hot path);
    :class:`RoutingMetrics` turns them into prometheus samples when scraped.
    """

    __slots__ = ("buckets", "count", "latency_sum")

    def __init__(self) -> None:
        self.count = 0
        self.latency_sum = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        """Observations per bucket (not cumulative); the last is +Inf."""

    def delivered(self, seconds: float) -> None:
        """Count one message Kafka acknowledged ``seconds`` after routing began."""
        self.count += 1
        self.latency_sum += seconds
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def observe(self, seconds: float) -> None:
        """Record a latency without counting a success (a dead-lettered message)."""
        self.latency_sum += seconds
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1


class RoutingMetrics:
    """The routing counters; ``registry`` defaults to a private one (read it in tests)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.routes: dict[str, RouteStats] = {}
        """Route -> its success count and latency histogram (exported by :meth:`collect`)."""
        self.registry.register(self)
        self.failures = Counter(
            "jmsgateway_routing_failures", "Messages a route failed on", ["route", "kind"], registry=self.registry
        )
        self.dead_lettered = Counter(
            "jmsgateway_routing_dead_lettered", "Messages published to the dead-letter topic", ["route"],
            registry=self.registry,
        )
        self.skipped = Counter(
            "jmsgateway_routing_skipped", "Messages logged and skipped after a soft failure", ["route"],
            registry=self.registry,
        )
        self.cycles = Counter(
            "jmsgateway_routing_cycles", "Messages not routed because this gateway produced them",
            registry=self.registry,
        )

    def stats(self, route: str) -> RouteStats:
        """``route``'s :class:`RouteStats` (created on first use); keep it to count without a lookup."""
        stats = self.routes.get(route)
        if stats is None:
            stats = self.routes[route] = RouteStats()
        return stats

    def collect(self) -> Iterator[Metric]:
        """Prometheus collector protocol: the per-route success counters and latency histograms."""
        successes = CounterMetricFamily(
            "jmsgateway_routing_success", "Messages routed and acknowledged by Kafka", labels=["route"]
        )
        latency = HistogramMetricFamily(
            "jmsgateway_routing_latency_seconds", "Time from routing a message to Kafka's delivery report",
            labels=["route"],
        )
        bounds = [*(str(bound) for bound in LATENCY_BUCKETS), "+Inf"]
        for route, stats in list(self.routes.items()):
            successes.add_metric([route], stats.count)
            cumulative: list[tuple[str, float]] = []
            total = 0
            for bound, observed in zip(bounds, stats.buckets, strict=True):
                total += observed
                cumulative.append((bound, total))
            latency.add_metric([route], cumulative, stats.latency_sum)
        yield successes
        yield latency

    def average_latency(self, route: str) -> float:
        """Average routing latency of ``route`` in seconds (0 before the first)."""
        stats = self.routes.get(route)
        return stats.latency_sum / stats.count if stats is not None and stats.count else 0.0
