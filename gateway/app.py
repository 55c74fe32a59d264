"""Composition of one gateway: connectors, destination map, portal, transformers
and the STOMP factory, built from a :class:`GatewayConfig`.

Nothing here listens on a socket; :mod:`gateway.tap` does that once
:meth:`Gateway.start` has brought the connectors up.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from gateway.auth import build_portal
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.store import MemoryStore
from gateway.config import GatewayConfig
from gateway.connectors.destination_map import DestinationMap
from gateway.connectors.registry import create_connector
from gateway.deferreds import gather
from gateway.errors import ConfigError
from gateway.interfaces import IConnector, IMessageStore
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.transforms import SessionTransforms
from gateway.transform import TransformChains, parse_transform_config, plugin_manager_for


class Gateway:
    """Everything one gateway process runs, wired together."""

    log = Logger()

    def __init__(self, config: GatewayConfig, reactor: Any, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.reactor = reactor
        self.registry = registry or CollectorRegistry()
        self.store = build_store(config, reactor)
        self.broker = EmbeddedBroker(reactor, config.broker, self.store, self.registry)
        self.connectors: dict[str, IConnector] = {"embedded": self.broker}
        for name, options in config.connectors.items():
            if name == "embedded":
                raise ConfigError("the name 'embedded' is reserved", path=config.path, key="connectors.embedded")
            if not isinstance(options, dict):
                raise ConfigError("expected a table", path=config.path, key=f"connectors.{name}")
            self.connectors[name] = create_connector(
                name, options, reactor=reactor, gateway_id=config.id, registry=self.registry, path=config.path
            )
        self.destinations = DestinationMap(self.connectors, config.destinations)
        self.portal = build_portal(config.auth, config.path)
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
        )

    def start(self) -> Deferred[Any]:
        """Start every connector; fails if any fails."""
        return gather(c.start() for c in self.connectors.values())

    def stop(self) -> Deferred[Any]:
        return DeferredList([c.stop() for c in self.connectors.values()], consumeErrors=True)


def build_store(config: GatewayConfig, reactor: Any) -> IMessageStore:
    """The embedded broker's message store as configured."""
    if config.broker.persistence == "memory":
        return MemoryStore()
    from gateway.broker.sqlite_store import SqliteStore

    store: IMessageStore = SqliteStore(config.data_path(config.broker.database), reactor)
    return store


def build_gateway(config: GatewayConfig, reactor: Any, registry: CollectorRegistry | None = None) -> Gateway:
    """A :class:`Gateway` for ``config`` (raises ConfigError)."""
    return Gateway(config, reactor, registry)
