"""What ``/metrics`` adds to the gateway's registry for operators: the embedded broker's
per-destination gauges and totals, ``jmsgateway_build_info`` and the process metrics.

Per destination (a queue's name, ``/queue/orders``, or a durable
subscription's store key), read from the broker's queues at scrape time (a
custom collector; the broker's hot path only adds to plain integers):

=================================================  ===============================================
``jmsgateway_broker_destination_messages``         pending messages (in memory and paged): the depth
``jmsgateway_broker_destination_consumers``        consumers attached
``jmsgateway_broker_destination_inflight_messages`` delivered, not yet acknowledged
``jmsgateway_broker_destination_enqueued_total``   messages that entered it since start
``jmsgateway_broker_destination_dequeued_total``   messages acknowledged from it since start
``jmsgateway_broker_destination_expired_total``    messages that expired in it since start
``jmsgateway_broker_destination_dead_lettered_total`` messages moved to its dead-letter queue
=================================================  ===============================================

The bytes in memory and paged out per destination are the broker's own
``jmsgateway_broker_destination_memory_bytes`` and ``jmsgateway_broker_paged_bytes``.
"""

from __future__ import annotations

import platform
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from gateway.admin.observed import ObservedGateway

_REGISTERED: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()

PER_DESTINATION_GAUGES = {
    "messages": ("Pending messages of a destination (in memory and paged): its depth", "pending"),
    "consumers": ("Consumers attached to a destination", "consumers"),
    "inflight_messages": ("Messages delivered from a destination and not yet acknowledged", "inflight"),
}
PER_DESTINATION_TOTALS = {
    "enqueued": ("Messages that entered a destination since start", "enqueued"),
    "dequeued": ("Messages acknowledged from a destination since start", "dequeued"),
    "expired": ("Messages that expired in a destination since start", "expired_count"),
    "dead_lettered": ("Messages moved from a destination to its dead-letter queue since start", "dead_lettered_count"),
}


def _read(queue: Any, attribute: str) -> float:
    if attribute == "pending":
        return float(len(queue))
    if attribute == "consumers":
        return float(len(queue.consumers))
    return float(getattr(queue, attribute, 0))


class DestinationCollector(Collector):
    """The embedded broker's queues and durable subscriptions, one sample each per family."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        prefix = "jmsgateway_broker_destination_"
        gauges = {name: GaugeMetricFamily(prefix + name, text, labels=["destination"])
                  for name, (text, _) in PER_DESTINATION_GAUGES.items()}
        totals = {name: CounterMetricFamily(prefix + name, text, labels=["destination"])
                  for name, (text, _) in PER_DESTINATION_TOTALS.items()}
        queues = [*self.broker.queues.items(), *self.broker.durables.items()]
        for key, queue in queues:
            for name, (_, attribute) in PER_DESTINATION_GAUGES.items():
                gauges[name].add_metric([key], _read(queue, attribute))
            for name, (_, attribute) in PER_DESTINATION_TOTALS.items():
                totals[name].add_metric([key], _read(queue, attribute))
        yield from gauges.values()
        yield from totals.values()

    def describe(self) -> Iterator[Any]:
        return self.collect()


class BuildInfoCollector(Collector):
    """``jmsgateway_build_info{version, python, implementation} 1``."""

    def collect(self) -> Iterator[Any]:
        from gateway import __version__

        yield InfoMetricFamily("jmsgateway_build", "The gateway's version and Python", value={
            "version": __version__, "python": platform.python_version(),
            "implementation": platform.python_implementation()})

    def describe(self) -> Iterator[Any]:
        return self.collect()


def register_operator_metrics(gateway: ObservedGateway) -> None:
    """Register, once per registry, the collectors above in ``gateway.registry`` (the per-destination
    ones when the gateway has an embedded broker) and prometheus_client's ``ProcessCollector``
    (``process_*``) unless something registered it already."""
    registry: CollectorRegistry = gateway.registry
    if registry in _REGISTERED:
        return
    _REGISTERED.add(registry)
    broker = gateway.broker
    if broker is not None:
        registry.register(DestinationCollector(broker))
    registry.register(BuildInfoCollector())
    if registry.get_sample_value("process_start_time_seconds") is None:
        ProcessCollector(registry=registry)
