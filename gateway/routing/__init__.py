"""Routing: which connector serves a destination, and routes from STOMP destinations to Kafka topics.

* :mod:`gateway.routing.destination_map` - ``[[destinations]]``: destination -> connector and the
  name it has there (every connector; the STOMP session and authorization use it);

Kafka routes, the Confluent JMS-Bridge's way:

* :mod:`gateway.routing.config` - routes from TOML and the JMS-Bridge properties syntax;
* :mod:`gateway.routing.predicates` - ``msg.address == x`` / ``msg.header.X == y`` / selectors;
* :mod:`gateway.routing.router` - the pure decision (reused by the Spark pipeline);
* :mod:`gateway.routing.service` - the Twisted side: failure policy, sending, metrics.
"""

from gateway.routing.config import Route, RoutingConfig, parse_routing_config
from gateway.routing.router import RouteDecision, Router

__all__ = ["Route", "RouteDecision", "Router", "RoutingConfig", "parse_routing_config"]
