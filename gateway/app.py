"""Composition of one gateway: connectors, destination map, portal, transformers,
bridges and the STOMP factory, built from a :class:`GatewayConfig`.

Imports go one way: this module uses :mod:`gateway.bridges` and
:mod:`gateway.connectors.configured`; neither imports it.

Nothing here listens on a socket; :mod:`gateway.tap` does that once
:meth:`Gateway.start` has brought the connectors up.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from gateway.admin.settings import parse_admin_settings
from gateway.auth import build_portal
from gateway.authorization import build_authorizer
from gateway.bridges.service import bridges_for_gateway
from gateway.config import GatewayConfig
from gateway.connectors.configured import configured_connectors
from gateway.deferreds import gather
from gateway.ha.role import GatewayRole
from gateway.identity import resolve_gateway_id
from gateway.interfaces import IConnector
from gateway.login_throttle import build_login_throttle
from gateway.routing.destination_map import DestinationMap
from gateway.stomp.durable_owners import FILE_NAME as DURABLE_OWNERS_FILE
from gateway.stomp.durable_owners import DurableOwners
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.transforms import SessionTransforms
from gateway.transform import TransformChains, parse_transform_config, plugin_manager_for


class Gateway:
    """Everything one gateway process runs, wired together."""

    log = Logger()

    def __init__(self, config: GatewayConfig, reactor: Any, registry: CollectorRegistry | None = None) -> None:
        config.gateway.id = resolve_gateway_id(config.id, config.data_dir)
        self.config = config
        self.reactor = reactor
        self.registry = registry or CollectorRegistry()
        built = configured_connectors(config, reactor, self.registry)
        assert built.broker is not None
        self.broker = built.broker
        self.store = self.broker.store
        self.connectors: dict[str, IConnector] = built.by_name
        """Name -> connector; ``[routing]``'s router in its Kafka connector's place."""
        self.router = built.router
        """The Kafka router when ``[routing]`` is configured (also in :attr:`connectors`)."""
        self.destinations = DestinationMap(self.connectors, config.destinations)
        self.portal = build_portal(config.auth, config.path, reactor)
        self.authorizer = build_authorizer(config.auth, config.authorization, config.path,
                                           has_users=self.portal is not None, registry=self.registry)
        """Per-destination permissions (:class:`~gateway.interfaces.IAuthorizer`; allows all without entries)."""
        self.durable_owners = (DurableOwners(os.path.join(config.data_dir, DURABLE_OWNERS_FILE))
                               if self.portal is not None else None)
        """Owners of durable subscriptions at connectors (only with [auth] logins)."""
        self.login_throttle = build_login_throttle(config.auth, reactor, config.path, self.registry)
        self.admin = parse_admin_settings(config.admin, config.path, has_users=self.portal is not None)
        self.role = GatewayRole(self.registry)
        """Active or standby (:mod:`gateway.ha`): the admin endpoint reports it."""
        self.started_at: float | None = None
        """When :meth:`start` brought the connectors up (reactor seconds)."""
        self.transform_config = parse_transform_config(config.transform, config.path)
        self.plugin_manager = plugin_manager_for(self.transform_config)
        self.chains = TransformChains(self.plugin_manager, self.transform_config, registry=self.registry,
                                      clock=reactor)
        self.factory = StompServerFactory(
            reactor,
            self.destinations,
            settings=config.stomp,
            broker_settings=config.broker,
            portal=self.portal,
            transformer=SessionTransforms(self.chains),
            registry=self.registry,
            authorizer=self.authorizer,
            throttle=self.login_throttle if self.portal is not None else None,
            durable_owners=self.durable_owners,
        )
        self.bridges = bridges_for_gateway(config, self.connectors, reactor, registry=self.registry,
                                           plugin_manager=self.plugin_manager,
                                           transform_config=self.transform_config)

    def start(self) -> Deferred[Any]:
        """Start every connector, then the bridges; fires once the bridges' in-doubt
        checks are done (the listeners open after it); fails if a connector fails."""
        started = gather(c.start() for c in self.connectors.values())

        def start_bridges(result: Any) -> Any:
            self.started_at = self.reactor.seconds()
            self.bridges.startService()
            checked = self.bridges.in_doubt_checked
            if checked is None:
                return result
            # ONCE_AND_ONLY_ONCE bridges look at what their targets hold before anyone else may take it
            return _watch_then(checked, result)

        return started.addCallback(start_bridges)

    def stop(self) -> Deferred[Any]:
        bridges: Deferred[Any] = self.bridges.stopService() if self.bridges.running else gather([])
        return bridges.addCallback(
            lambda _: DeferredList([c.stop() for c in self.connectors.values()], consumeErrors=True)
        )


def _watch_then(d: Deferred[Any], result: Any) -> Deferred[Any]:
    """A Deferred firing with ``result`` once ``d`` fired (whatever its outcome)."""
    done: Deferred[Any] = Deferred()

    def fired(outcome: Any) -> Any:
        done.callback(result)
        return outcome

    d.addBoth(fired)
    return done


def build_gateway(config: GatewayConfig, reactor: Any, registry: CollectorRegistry | None = None) -> Gateway:
    """A :class:`Gateway` for ``config`` (raises ConfigError)."""
    return Gateway(config, reactor, registry)
