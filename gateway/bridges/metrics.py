"""Prometheus metrics of the bridges, one set per registry, labelled by bridge name.

Owns the metric names only; :class:`~gateway.bridges.bridge.Bridge` updates them.
"""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Enum, Histogram

BRIDGE_STATES: tuple[str, ...] = ("starting", "running", "paused", "retrying", "in_doubt", "failed", "stopped")

BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class BridgeMetrics:
    """Counters, the state and batch sizes of every bridge in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["bridge"]
        self.forwarded = Counter(
            "jmsgateway_bridge_forwarded", "Messages a bridge delivered to its target", labels,
            registry=self.registry,
        )
        self.failed = Counter(
            "jmsgateway_bridge_send_failures", "Sends (batches) the target refused or that got no confirmation",
            labels, registry=self.registry,
        )
        self.retries = Counter(
            "jmsgateway_bridge_retries", "Reconnection or resend attempts after a failure", labels,
            registry=self.registry,
        )
        self.duplicates = Counter(
            "jmsgateway_bridge_duplicates_skipped",
            "Redelivered messages not sent again because the target already has them (ONCE_AND_ONLY_ONCE)",
            labels, registry=self.registry,
        )
        self.dropped = Counter(
            "jmsgateway_bridge_dropped",
            "Messages consumed and knowingly not forwarded (transformer drop, non-persistent under "
            "ONCE_AND_ONLY_ONCE, an AT_MOST_ONCE batch abandoned on stop)",
            [*labels, "reason"], registry=self.registry,
        )
        self.state = Enum(
            "jmsgateway_bridge_state", "The state a bridge is in", labels, states=list(BRIDGE_STATES),
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "jmsgateway_bridge_batch_size", "Messages per batch sent to the target", labels,
            buckets=BATCH_BUCKETS, registry=self.registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None) -> BridgeMetrics:
        """The one set of bridge metrics of ``registry`` (a new private registry when None)."""
        if registry is None:
            return cls()
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = cls(registry)
        return found


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, BridgeMetrics] = weakref.WeakKeyDictionary()
