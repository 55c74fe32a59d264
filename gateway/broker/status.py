"""What the embedded broker shows of itself: its memory and paging gauges for Prometheus and
the ``status()`` document the admin endpoint, the console and tests read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gateway.broker.admission import Admission
from gateway.broker.destinations import Destinations
from gateway.broker.queue import MessageQueue
from gateway.broker.quota import DestinationQuota


def broker_gauges(admission: Admission, destinations: Destinations) -> Iterator[Metric]:
    """Memory against the limit, and each backlog's memory, max_size and paged-out messages."""
    memory = admission.memory
    yield GaugeMetricFamily("jmsgateway_broker_memory_used_bytes",
                            "Bytes queued messages take in memory (estimated)", value=memory.used)
    yield GaugeMetricFamily("jmsgateway_broker_memory_limit_bytes",
                            "The embedded broker's memory_limit (0: none)", value=memory.configured)
    labels = ["destination", "full_policy"]
    in_memory = GaugeMetricFamily("jmsgateway_broker_destination_memory_bytes",
                                  "Bytes of a destination's pending messages held in memory", labels=labels)
    limit = GaugeMetricFamily("jmsgateway_broker_destination_max_size_bytes",
                              "A destination's max_size (0: only memory_limit)", labels=labels)
    paged = GaugeMetricFamily("jmsgateway_broker_paged_messages",
                              "Pending messages of a destination paged out to disk", labels=labels)
    paged_bytes = GaugeMetricFamily("jmsgateway_broker_paged_bytes",
                                    "Bytes of pending messages of a destination paged out to disk", labels=labels)
    for key, queue in destinations.backlogs():
        values = [key, queue.policy.full_policy]
        in_memory.add_metric(values, queue.memory)
        limit.add_metric(values, queue.max_size)
        paged.add_metric(values, queue.paged)
        paged_bytes.add_metric(values, queue.paged_size)
    yield from (in_memory, limit, paged, paged_bytes)
    yield from quota_gauges(destinations.quota)


def quota_gauges(quota: DestinationQuota) -> Iterator[Metric]:
    """The destinations held against ``max_destinations``, the creations refused, and the queues held by
    each login configured by name in ``[auth.limits]`` (never a series per login otherwise: bounded labels)."""
    yield GaugeMetricFamily("jmsgateway_broker_destinations",
                            "Destinations the embedded broker holds (queues, durable subscriptions, temporary topics)",
                            value=quota.count)
    yield GaugeMetricFamily("jmsgateway_broker_max_destinations", "The embedded broker's max_destinations (0: none)",
                            value=quota.max_destinations)
    yield CounterMetricFamily("jmsgateway_broker_destinations_refused",
                              "Destinations not created because max_destinations or a login's max_queues was reached",
                              value=quota.refused)
    held = GaugeMetricFamily("jmsgateway_login_queues", "Queues a login configured in [auth.limits] holds",
                             labels=["login"])
    cap = GaugeMetricFamily("jmsgateway_login_max_queues", "A login's max_queues (-1: no cap)", labels=["login"])
    for login in quota.logins.named():
        held.add_metric([login], quota.held.get(login, 0))
        max_queues = quota.logins.max_queues(login)
        cap.add_metric([login], -1 if max_queues is None else max_queues)
    yield from (held, cap)


def quota_status(quota: DestinationQuota) -> dict[str, Any]:
    """The ``limits`` part of ``/status``: destinations held against ``max_destinations``, refusals, and
    the queues each login holds (``logins``: an administrator's view; others see none)."""
    return {"destinations": quota.count, "max_destinations": quota.max_destinations, "refused": quota.refused,
            "logins": {login: {"queues": held, "max_queues": quota.logins.max_queues(login)}
                       for login, held in sorted(quota.held.items())}}


def broker_status(admission: Admission, destinations: Destinations, page_file: str | None,
                  removals: tuple[int, bool], scheduled: tuple[int, int]) -> dict[str, Any]:
    """Queue depths, consumer counts, memory against the limits, paging, held senders and
    deliveries (``removals``: waiting, deliveries held), scheduled jobs (waiting, delivered)."""
    memory = admission.memory
    return {
        "memory": {"used": memory.used, "limit": memory.configured, "full": memory.full,
                   "page_file": page_file,
                   "waiting_for_store": admission.writing, "senders_held": admission.store_held,
                   "removals_waiting": removals[0], "deliveries_held": removals[1],
                   "blocked": sorted(admission.blocked)},
        "queues": {name: {"pending": len(q), "consumers": len(q.consumers), "inflight": q.inflight}
                   for name, q in destinations.queues.items()},
        "durables": {key: {"pending": len(q), "active": bool(q.consumers)}
                     for key, q in destinations.durables.items()},
        "topics": {name: len(subs) for name, subs in destinations.topics.items()},
        "paging": {key: queue_memory(q) for key, q in destinations.backlogs()},
        "scheduled": {"waiting": scheduled[0], "delivered": scheduled[1]},
        "limits": quota_status(destinations.quota),
    }


def queue_memory(queue: MessageQueue) -> dict[str, Any]:
    """One backlog's memory, paged-out messages and limit."""
    return {"memory": queue.memory, "paged": queue.paged, "paged_bytes": queue.paged_size,
            "max_size": queue.max_size, "full_policy": queue.policy.full_policy}
