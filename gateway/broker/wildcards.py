"""Wildcard subscriptions (ActiveMQ's syntax): ``/topic/orders.*.eu``, ``/topic/orders.>``, and on
queues ``/queue/orders.>`` (:mod:`gateway.broker.queue_wildcards`).

``.`` separates segments, ``*`` is one segment, ``>`` (last) the rest: zero or more segments, as
in ActiveMQ 5.17 (``orders.>`` matches ``orders`` too, checked against it by
tests/integration/test_destination_features.py).

A wildcard subscriber's backlog is registered under its pattern like any topic subscriber's;
:class:`WildcardTopics` knows which registered names are patterns and which of them a
published topic matches (cached per topic, bounded).  A ``*`` or ``>`` inside a segment
(``a*``) is an ordinary character, as in ActiveMQ.  Pure: no Twisted, no broker.
"""

from __future__ import annotations

from gateway.message.destinations import is_wildcard

__all__ = ["WildcardTopics", "is_queue_wildcard", "is_wildcard", "matches"]

TOPIC = "/topic/"
QUEUE = "/queue/"
CACHE_LIMIT = 10_000
"""Most published topics whose matching patterns are remembered (cleared past it)."""


def _prefix(destination: str) -> str | None:
    if destination.startswith(TOPIC):
        return TOPIC
    return QUEUE if destination.startswith(QUEUE) else None


def is_queue_wildcard(destination: str) -> bool:
    """Whether ``destination`` is a wildcard queue pattern (``/queue/orders.>``)."""
    return destination.startswith(QUEUE) and is_wildcard(destination)


def matches(pattern: str, destination: str) -> bool:
    """Whether ``destination`` matches the wildcard ``pattern`` (both topics, or both queues)."""
    prefix = _prefix(pattern)
    if prefix is None or not destination.startswith(prefix):
        return False
    wanted = pattern[len(prefix):].split(".")
    segments = destination[len(prefix):].split(".")
    for index, part in enumerate(wanted):
        if part == ">" and index == len(wanted) - 1:
            return len(segments) >= index  # (none too: ActiveMQ's orders.> matches orders)
        if index >= len(segments) or (part != "*" and part != segments[index]):
            return False
    return len(segments) == len(wanted)


class WildcardTopics:
    """The wildcard patterns that have subscribers, and which match a topic."""

    def __init__(self) -> None:
        self.patterns: set[str] = set()
        self._matching: dict[str, tuple[str, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def add(self, pattern: str) -> None:
        if pattern not in self.patterns:
            self.patterns.add(pattern)
            self._matching.clear()

    def discard(self, pattern: str) -> None:
        if pattern in self.patterns:
            self.patterns.discard(pattern)
            self._matching.clear()

    def matching(self, destination: str) -> tuple[str, ...]:
        """The patterns ``destination`` (a published topic) matches."""
        hit = self._matching.get(destination)
        if hit is None:
            hit = tuple(p for p in self.patterns if p != destination and matches(p, destination))
            if len(self._matching) >= CACHE_LIMIT:
                self._matching.clear()
            self._matching[destination] = hit
        return hit
