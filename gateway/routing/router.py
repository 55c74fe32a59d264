"""Deciding where a message goes: the pure half of routing.

:meth:`Router.route` evaluates the routes top-down (the first match wins, a
message matches at most one route), converts the message to a Kafka record
and returns a :class:`RouteDecision`; it never does I/O and never imports
Twisted, so the Spark pipeline calls it as it is.  Applying the decision
(sending, dead-lettering, stopping) is :mod:`gateway.routing.service`'s job.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.message.kafka_records import (
    Header,
    SoftFailure,
    dead_letter_record,
    message_to_record,
    origin_of,
)
from gateway.message.model import Message
from gateway.routing.config import Route, RoutingConfig

ROUTED = "routed"
"""The message matched a route and converted: publish ``record`` to ``topic``."""
UNROUTED = "unrouted"
"""No route includes the message."""
CYCLE = "cycle"
"""The message came from this gateway (``jmsbridge.origin``): not routed back."""
SOFT_FAILURE = "soft-failure"
"""A route matched but the message cannot be converted; see ``failure``."""


class RouteDecision(NamedTuple):
    """What to do with one message (a named tuple: cheap to build once per message).

    :ivar outcome: :data:`ROUTED`, :data:`UNROUTED`, :data:`CYCLE` or :data:`SOFT_FAILURE`.
    :ivar route: the matching route (ROUTED and SOFT_FAILURE).
    :ivar policy: for a soft failure: ``stop``, ``skip`` or ``dead-letter``.
    :ivar topic: where to publish: the route's topic, or the dead-letter topic
        for a soft failure under the ``dead-letter`` policy.
    :ivar key, value, headers: the record to publish (ROUTED, or the
        dead-letter record).
    """

    outcome: str
    route: Route | None = None
    topic: str | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()
    failure: SoftFailure | None = None
    policy: str | None = None

    @property
    def route_name(self) -> str:
        """The route's name, or ``-`` when none matched."""
        return self.route.name if self.route is not None else "-"


class Router:
    """Routes messages by a :class:`RoutingConfig`.

    :param origin: this gateway's id; messages carrying it are not routed.
    """

    def __init__(self, config: RoutingConfig, origin: str) -> None:
        self.config = config
        self.origin = origin

    def match(self, message: Message) -> Route | None:
        """The first route that includes ``message``, or None."""
        for route in self.config.routes:
            if route.matches(message):
                return route
        return None

    def route(self, message: Message) -> RouteDecision:
        """Decide what happens to ``message`` (pure: no I/O)."""
        if origin_of(message) == self.origin:
            return RouteDecision(CYCLE)
        route = self.match(message)
        if route is None:
            return RouteDecision(UNROUTED)
        try:
            key, value, headers = message_to_record(message, route.key, self.origin)
        except SoftFailure as failure:
            return self.soft_failure(message, route, failure)
        return RouteDecision(ROUTED, route, route.topic, key, value, tuple(headers))

    def soft_failure(self, message: Message, route: Route, failure: SoftFailure) -> RouteDecision:
        """The decision for a soft failure under the route's policy."""
        policy = self.config.policy_for(route)
        if policy == "dead-letter" and self.config.dead_letter_topic:
            key, value, headers = dead_letter_record(
                message, f"{failure.reason}: {failure.detail}", route.name, self.origin
            )
            return RouteDecision(
                SOFT_FAILURE, route, self.config.dead_letter_topic, key, value, tuple(headers), failure, policy
            )
        return RouteDecision(SOFT_FAILURE, route, failure=failure, policy=policy)
