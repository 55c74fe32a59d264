"""Composition of one gateway: connectors, destination map, portal, transformers,
bridges and the STOMP factory, built from a :class:`GatewayConfig`.

This is the composition root: it builds the connectors a configuration names (the embedded
broker with its store, every ``[connectors.NAME]``, ``[routing]`` in the place of its Kafka
connector) and the bridges over them; no layer below imports it.

Nothing here listens on a socket; :mod:`gateway.tap` does that once
:meth:`Gateway.start` has brought the connectors up.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from gateway.admin.settings import parse_admin_settings
from gateway.bridges.config import parse_bridges
from gateway.bridges.service import BridgeService, build_bridge_service
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.scheduler import ScheduleStore
from gateway.broker.store.memory_store import MemoryStore
from gateway.config import GatewayConfig
from gateway.connectors.registry import create_connector
from gateway.connectors.stomp_settings import StompConnectorOptions
from gateway.deferreds import gather
from gateway.ha.role import GatewayRole
from gateway.identity import resolve_gateway_id
from gateway.interfaces import IConnector, IMessageStore
from gateway.routing.config import parse_routing_config
from gateway.routing.destination_map import DestinationMap
from gateway.routing.service import KafkaRouter, build_kafka_router
from gateway.security.auth import build_portal
from gateway.security.authorization import build_authorizer
from gateway.security.login_throttle import build_login_throttle
from gateway.security.quotas import LoginQuotas
from gateway.stomp.durable_owners import FILE_NAME as DURABLE_OWNERS_FILE
from gateway.stomp.durable_owners import DurableOwners
from gateway.stomp.login_connections import LoginConnections
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.transforms import SessionTransforms
from gateway.transform import TransformChains, parse_transform_config, plugin_manager_for

EMBEDDED = "embedded"
"""The embedded broker's connector name."""


@dataclass
class Connectors:
    """What :func:`configured_connectors` built.

    :ivar by_name: name -> connector (the router in its Kafka connector's place).
    :ivar broker: the embedded broker, when built.
    :ivar router: the ``[routing]`` router, when built.
    """

    by_name: dict[str, IConnector]
    broker: EmbeddedBroker | None = None
    router: KafkaRouter | None = None


def build_store(config: GatewayConfig, reactor: Any) -> IMessageStore:
    """The embedded broker's message store as configured."""
    if config.broker.persistence == "memory":
        return MemoryStore()
    from gateway.broker.idempotency import SendIdTable
    from gateway.broker.store.sqlite_store import SqliteStore

    settings = config.broker
    store: IMessageStore = SqliteStore(
        config.data_path(settings.database), reactor,
        synchronous=settings.synchronous.upper(), max_size=settings.max_size, min_free=settings.min_free,
        commit_linger=settings.commit_linger_us / 1e6,
        lazy_recovery=True, send_ids=SendIdTable(settings.dedup_window, settings.dedup_window_seconds),
    )
    return store


def build_schedule(config: GatewayConfig, reactor: Any) -> ScheduleStore | None:
    """Where scheduled messages wait: ``schedule.sqlite`` under data_dir with SQLite persistence."""
    if config.broker.persistence == "memory":
        return None
    from gateway.broker.scheduler import SCHEDULE_DATABASE, SqliteSchedule  # (sqlite3 only when used)

    return SqliteSchedule(config.data_path(SCHEDULE_DATABASE), reactor, synchronous=config.broker.synchronous.upper(),
                          min_free=config.broker.min_free)


def page_file_name(database: str) -> str:
    """The page file beside the message store ``database`` (``broker.sqlite`` -> ``broker-pages.sqlite``)."""
    stem, dot, suffix = database.rpartition(".")
    return f"{stem}-pages.{suffix}" if dot and stem else f"{database}-pages"


def configured_connectors(config: GatewayConfig, reactor: Any, registry: CollectorRegistry,
                          names: Iterable[str] | None = None) -> Connectors:
    """Build the connectors of ``config`` (raises ConfigError).

    :param names: build only these (None: all); ``[routing]`` is built when its Kafka
        connector is.
    """
    wanted = None if names is None else set(names)
    built = Connectors({})
    if wanted is None or EMBEDDED in wanted:
        broker = EmbeddedBroker(reactor, config.broker, build_store(config, reactor), registry,
                                page_path=config.data_path(page_file_name(config.broker.database)),
                                schedule=build_schedule(config, reactor), logins=LoginQuotas(config.auth.limits))
        built.broker = broker
        built.by_name[EMBEDDED] = broker
    for name, options in config.connectors.items():
        if wanted is None or name in wanted:
            built.by_name[name] = create_connector(name, options, reactor=reactor, gateway_id=config.id,
                                                   registry=registry, path=config.path)
    routing = config.routing
    if wanted is not None and routing.model_fields_set \
            and parse_routing_config(routing, config.path).connector not in wanted:
        return built
    router = build_kafka_router(routing, config.path, built.by_name, origin=config.id, clock=reactor,
                                registry=registry)
    if router is not None:
        # The router takes the Kafka connector's place: sends are routed, subscriptions reach Kafka.
        built.by_name[router.config.connector] = router
        built.router = router
    return built


def bridges_for_gateway(config: GatewayConfig, connectors: dict[str, IConnector], reactor: Any, *,
                        registry: CollectorRegistry | None = None, plugin_manager: Any = None,
                        transform_config: Any = None) -> BridgeService:
    """The bridges of a gateway's configuration over its ``connectors`` (raises ConfigError).

    :param plugin_manager: the gateway's transformer plugins; :param transform_config: its
        ``[transform]`` (both built from ``config`` when a bridge names transformers and they
        are not given).
    """
    bridges = parse_bridges(config.bridges, config.path, set(connectors))
    if plugin_manager is None and any(bridge.transformers for bridge in bridges):
        from gateway.transform import parse_transform_config, plugin_manager_for

        transform_config = parse_transform_config(config.transform, config.path)
        plugin_manager = plugin_manager_for(transform_config)
    return build_bridge_service(
        bridges,
        connectors,
        reactor,
        registry=registry,
        data_dir=config.data_dir,
        plugin_manager=plugin_manager,
        transform_config=transform_config,
        path=config.path,
        owner_lock=True,
    )


def used_connectors(config: GatewayConfig) -> set[str]:
    """The connectors the configured bridges name (a standalone bridge builds only these)."""
    return {side.connector for bridge in config.bridges for side in (bridge.source, bridge.target)}


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
        if config.auth.limits and self.portal is None:
            self.log.warn("[auth.limits] in {path} has no effect: no [auth] users are configured, so no connection "
                          "has a login to count against (docs/security.md, \"Resource limits per login\")",
                          path=config.path or "the configuration")
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
            login_connections=LoginConnections(self.broker.quota.logins),
        )
        self._check_frame_limits()
        self.bridges = bridges_for_gateway(config, self.connectors, reactor, registry=self.registry,
                                           plugin_manager=self.plugin_manager,
                                           transform_config=self.transform_config)

    def _check_frame_limits(self) -> None:
        """Warn when a ``stomp://`` connector's frame limit is not above the listener's: a message a
        client sends near the listener's limit comes back from the broker with the broker's headers,
        over the connector's limit, and would end the broker connection at each delivery."""
        limit = self.config.stomp.max_frame_size
        for name, options in self.config.connectors.items():
            if isinstance(options, StompConnectorOptions) and options.max_frame_size <= limit:
                self.log.warn(
                    "connectors.{name}.max_frame_size ({connector}) is not above [stomp] max_frame_size ({limit}): "
                    "a message a client sends near that limit comes back from the broker with the broker's "
                    "headers over it and ends the connection at each delivery; raise connectors.{name}."
                    "max_frame_size (docs/jms.md)", name=name, connector=options.max_frame_size, limit=limit)

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
