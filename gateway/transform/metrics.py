"""Prometheus counters of the transform chains.

Owns the metric names and one :class:`TransformMetrics` per
``CollectorRegistry`` (a registry refuses a metric name twice, and chains are
rebuilt on reload and in tests).  The default registry is
``prometheus_client.REGISTRY``, the one ``/metrics`` serves unless told
otherwise.

- ``jmsgateway_transform_failures_total{transformer, plugin, direction, policy}``:
  a transformer raised, returned something invalid, or a ``transformation``
  header named no transformer; ``policy`` is what happened to the message.
- ``jmsgateway_transform_dropped_total{transformer, direction}``: messages a
  transformer decided to drop.
- ``jmsgateway_transform_branched_total{transformer, direction}``: messages a
  transformer sent to another destination.
"""

from __future__ import annotations

import threading
import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter


class TransformMetrics:
    """The counters of the transform layer, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.failures = Counter(
            "jmsgateway_transform_failures",
            "Transformer failures, by transformer, plugin, direction and the policy applied.",
            ("transformer", "plugin", "direction", "policy"),
            registry=registry,
        )
        self.dropped = Counter(
            "jmsgateway_transform_dropped",
            "Messages dropped by a transformer's decision.",
            ("transformer", "direction"),
            registry=registry,
        )
        self.branched = Counter(
            "jmsgateway_transform_branched",
            "Messages a transformer sent to another destination.",
            ("transformer", "direction"),
            registry=registry,
        )


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, TransformMetrics] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def transform_metrics(registry: CollectorRegistry | None = None) -> TransformMetrics:
    """The transform counters registered in ``registry`` (default: the global one),
    created on first use."""
    target = REGISTRY if registry is None else registry
    with _lock:
        metrics = _by_registry.get(target)
        if metrics is None:
            metrics = _by_registry[target] = TransformMetrics(target)
        return metrics
