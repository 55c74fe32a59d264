"""What the admin endpoint reads and controls of the running gateway: :class:`ObservedGateway`.

The port the admin layer asks of its owner (the ``QueueOwner`` shape): :class:`gateway.app.Gateway`
provides it; a test may give any object with these members.  The admin layer must not reach
for more than this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # names for annotations only: the admin layer knows connectors by interface
    from collections.abc import Mapping

    from prometheus_client import CollectorRegistry
    from twisted.cred.portal import Portal

    from gateway.bridges.service import BridgeService
    from gateway.broker.broker import EmbeddedBroker
    from gateway.ha.role import GatewayRole
    from gateway.interfaces import IAuthorizer, IConnector
    from gateway.routing.destination_map import DestinationMap
    from gateway.routing.service import KafkaRouter
    from gateway.security.login_throttle import LoginThrottle
    from gateway.stomp.protocol import StompServerFactory


class NamedConfig(Protocol):
    """The one thing the admin endpoint reads of the configuration."""

    @property
    def id(self) -> str:
        """The gateway's id (``[gateway] id``, resolved)."""


class ObservedGateway(Protocol):
    """The running gateway as the admin endpoint sees it."""

    @property
    def config(self) -> NamedConfig:
        """The configuration (only its id is read)."""

    @property
    def reactor(self) -> Any:
        """The reactor (its clock: uptime, rates)."""

    @property
    def registry(self) -> CollectorRegistry:
        """The gateway's Prometheus registry (``/metrics``)."""

    @property
    def started_at(self) -> float | None:
        """When the connectors came up (reactor seconds), None before."""

    @property
    def role(self) -> GatewayRole:
        """Active or standby (:mod:`gateway.ha`)."""

    @property
    def factory(self) -> StompServerFactory:
        """The STOMP listeners' factory: connections and traffic."""

    @property
    def connectors(self) -> Mapping[str, IConnector]:
        """Name -> connector (``[routing]``'s router in its Kafka connector's place)."""

    @property
    def router(self) -> KafkaRouter | None:
        """The ``[routing]`` router, when configured."""

    @property
    def bridges(self) -> BridgeService:
        """The bridges and their control API."""

    @property
    def broker(self) -> EmbeddedBroker:
        """The embedded broker (the console's queues, per-destination metrics)."""

    @property
    def destinations(self) -> DestinationMap:
        """Where a destination goes (the console's sends)."""

    @property
    def portal(self) -> Portal | None:
        """The logins (None: anonymous access)."""

    @property
    def login_throttle(self) -> LoginThrottle:
        """The failed-login throttle the STOMP listeners share with the admin logins."""

    @property
    def authorizer(self) -> IAuthorizer:
        """Per-destination permissions."""
