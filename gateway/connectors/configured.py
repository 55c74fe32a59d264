"""The connectors a configuration names, built: the embedded broker (with its message store),
every ``[connectors.NAME]`` table (:mod:`gateway.connectors.registry`), and ``[routing]`` in
the place of the Kafka connector it routes through.

The gateway (:mod:`gateway.app`) builds all of them; a standalone bridge
(``jmsgateway bridge``) only those its bridges use.  Nothing here starts a connector.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.store import MemoryStore
from gateway.config import GatewayConfig
from gateway.connectors.registry import create_connector
from gateway.interfaces import IConnector, IMessageStore
from gateway.routing.config import parse_routing_config
from gateway.routing.service import KafkaRouter, build_kafka_router

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
    from gateway.broker.sqlite_store import SqliteStore

    settings = config.broker
    store: IMessageStore = SqliteStore(
        config.data_path(settings.database), reactor,
        synchronous=settings.synchronous.upper(), max_size=settings.max_size, min_free=settings.min_free,
        lazy_recovery=True, send_ids=SendIdTable(settings.dedup_window, settings.dedup_window_seconds),
    )
    return store


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
                                page_path=config.data_path(page_file_name(config.broker.database)))
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
