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

from gateway.admin.settings import parse_admin_settings
from gateway.auth import build_portal
from gateway.authorization import build_authorizer
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.store import MemoryStore
from gateway.config import GatewayConfig
from gateway.connectors.destination_map import DestinationMap
from gateway.connectors.registry import create_connector
from gateway.deferreds import gather
from gateway.identity import resolve_gateway_id
from gateway.interfaces import IConnector, IMessageStore
from gateway.login_throttle import build_login_throttle
from gateway.routing.service import build_kafka_router
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
        self.store = build_store(config, reactor)
        self.broker = EmbeddedBroker(reactor, config.broker, self.store, self.registry,
                                     page_path=config.data_path(page_file_name(config.broker.database)))
        self.connectors: dict[str, IConnector] = {"embedded": self.broker}
        for name, options in config.connectors.items():
            self.connectors[name] = create_connector(
                name, options, reactor=reactor, gateway_id=config.id, registry=self.registry, path=config.path
            )
        router = build_kafka_router(config.routing, config.path, self.connectors, origin=config.id, clock=reactor,
                                    registry=self.registry)
        if router is not None:
            # The router takes the Kafka connector's place: sends are routed, subscriptions reach Kafka.
            self.connectors[router.config.connector] = router
        self.router = router
        """The Kafka router when ``[routing]`` is configured (also in :attr:`connectors`)."""
        self.destinations = DestinationMap(self.connectors, config.destinations)
        self.portal = build_portal(config.auth, config.path, reactor)
        self.authorizer = build_authorizer(config.auth, config.authorization, config.path,
                                           has_users=self.portal is not None, registry=self.registry)
        """Per-destination permissions (:class:`~gateway.interfaces.IAuthorizer`; allows all without entries)."""
        self.login_throttle = build_login_throttle(config.auth, reactor, config.path, self.registry)
        self.admin = parse_admin_settings(config.admin, config.path, has_users=self.portal is not None)
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
        )
        from gateway.bridges.service import bridges_for_gateway

        self.bridges = bridges_for_gateway(self)

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


def build_store(config: GatewayConfig, reactor: Any) -> IMessageStore:
    """The embedded broker's message store as configured."""
    if config.broker.persistence == "memory":
        return MemoryStore()
    from gateway.broker.sqlite_store import SqliteStore

    settings = config.broker
    store: IMessageStore = SqliteStore(
        config.data_path(settings.database), reactor,
        synchronous=settings.synchronous.upper(), max_size=settings.max_size, min_free=settings.min_free,
        lazy_recovery=True,
    )
    return store


def page_file_name(database: str) -> str:
    """The page file beside the message store ``database`` (``broker.sqlite`` -> ``broker-pages.sqlite``)."""
    stem, dot, suffix = database.rpartition(".")
    return f"{stem}-pages.{suffix}" if dot and stem else f"{database}-pages"


def build_gateway(config: GatewayConfig, reactor: Any, registry: CollectorRegistry | None = None) -> Gateway:
    """A :class:`Gateway` for ``config`` (raises ConfigError)."""
    return Gateway(config, reactor, registry)
