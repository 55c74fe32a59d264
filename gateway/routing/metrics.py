"""Prometheus metrics of routing, per route, in an injectable registry.

``jmsgateway_routing_latency_seconds`` (histogram: its ``_sum / _count`` is
the average; from the message entering routing to Kafka's delivery report),
``jmsgateway_routing_success_total``, ``jmsgateway_routing_failures_total``
(labelled with the failure ``kind``: a soft-failure reason or a Kafka error
name), ``jmsgateway_routing_dead_lettered_total``,
``jmsgateway_routing_skipped_total`` and ``jmsgateway_routing_cycles_total``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class RoutingMetrics:
    """The routing counters; ``registry`` defaults to a private one (read it in tests)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.latency = Histogram(
            "jmsgateway_routing_latency_seconds",
            "Time from routing a message to Kafka's delivery report",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.successes = Counter(
            "jmsgateway_routing_success", "Messages routed and acknowledged by Kafka", ["route"],
            registry=self.registry,
        )
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
        self._delivered: dict[str, tuple[Any, Any]] = {}
        """Route -> its (success counter, latency histogram) children, bound once."""

    def delivered(self, route: str, seconds: float) -> None:
        """Count a message ``route`` published and Kafka acknowledged after ``seconds``.

        The labelled children are bound on a route's first message and kept, so
        the hot path is one dict lookup instead of two ``.labels()`` calls.
        """
        children = self._delivered.get(route)
        if children is None:
            children = self._delivered[route] = (self.successes.labels(route), self.latency.labels(route))
        children[0].inc()
        children[1].observe(seconds)

    def average_latency(self, route: str) -> float:
        """Average routing latency of ``route`` in seconds (0 before the first)."""
        total = self.registry.get_sample_value("jmsgateway_routing_latency_seconds_sum", {"route": route}) or 0.0
        count = self.registry.get_sample_value("jmsgateway_routing_latency_seconds_count", {"route": route}) or 0.0
        return total / count if count else 0.0
