"""The bridges of one gateway as a Twisted service, their run-time control API,
and ``jmsgateway bridge`` (the bridges alone, without STOMP listeners).

:func:`build_bridge_service` turns validated :class:`BridgeConfig` entries and
the gateway's connectors into a :class:`BridgeService`: one
:class:`~gateway.bridges.bridge.Bridge` each (Kafka -> Kafka under
ONCE_AND_ONLY_ONCE: a :class:`~gateway.bridges.kafka_exactly_once.KafkaExactlyOnceBridge`),
the shared duplicate store (``<data_dir>/bridges.sqlite``) when a bridge
needs it, a transformer chain per bridge that names transformers, and a
private connector per side that gives its own user/password (the connector
must offer ``with_credentials(user, password)``).

:class:`BridgeService` starts the bridges when it starts (call
``startService`` once the connectors are up; :func:`bridges_for_gateway`
builds it for a :class:`~gateway.app.Gateway`) and stops them first when it
stops.  Control: ``service.bridge(name)`` then ``.start()``, ``.stop()``,
``.pause()``, ``.resume()``, ``.status()``; ``service.status()`` lists all.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from twisted.application import service
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.bridges.bridge import Bridge
from gateway.bridges.config import ONCE_AND_ONLY_ONCE, BridgeConfig, BridgeEndpoint, parse_bridges
from gateway.bridges.dedup import DuplicateStore
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.probe import why_cannot_tell
from gateway.deferreds import gather
from gateway.errors import ConfigError, GatewayError
from gateway.interfaces import IConnector, ILocalTransactionSource

if TYPE_CHECKING:  # pragma: no cover
    from gateway.app import Gateway

DEDUP_DATABASE = "bridges.sqlite"


class BridgeService(service.MultiService):
    """Runs a gateway's bridges (see the module docstring)."""

    log = Logger()

    def __init__(
        self,
        bridges: list[Any],
        *,
        reactor: Any,
        dedup: DuplicateStore | None = None,
        owned_connectors: list[IConnector] | None = None,
        metrics: BridgeMetrics | None = None,
    ) -> None:
        super().__init__()
        self.bridges: dict[str, Any] = {bridge.name: bridge for bridge in bridges}
        self.reactor = reactor
        self.dedup = dedup
        self.owned_connectors = list(owned_connectors or [])
        self.metrics = metrics
        self._purge: LoopingCall | None = None
        self.started: Deferred[None] | None = None
        self.in_doubt_checked: Deferred[None] | None = None
        """Fires once every started bridge's in-doubt check is done (the gateway opens its
        STOMP listeners after it, so no client takes a copy the check has not seen)."""

    # -- control API ---------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Bridge names in configuration order."""
        return list(self.bridges)

    def bridge(self, name: str) -> Any:
        """The bridge called ``name``; KeyError with a suggestion otherwise."""
        found = self.bridges.get(name)
        if found is None:
            close = difflib.get_close_matches(name, self.names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KeyError(f"no bridge {name!r}{hint} (bridges: {', '.join(self.names) or 'none'})")
        return found

    def status(self) -> list[dict[str, Any]]:
        """The status of every bridge."""
        return [bridge.status() for bridge in self.bridges.values()]

    # -- lifecycle --------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self.started = self.start_bridges()
        self.started.addErrback(self._start_failed)

    def start_bridges(self) -> Deferred[None]:
        """Start owned connectors, open the duplicate store, start every enabled bridge.

        Fires once every bridge answered (running, retrying or failed); a
        bridge that cannot start never fails this: it retries or is failed.
        """
        d: Deferred[Any] = gather(connector.start() for connector in self.owned_connectors)
        if self.dedup is not None:
            dedup = self.dedup
            d.addCallback(lambda _: dedup.open())
            d.addCallback(lambda _: self._start_purging(dedup))

        checked: Deferred[None] = Deferred()
        self.in_doubt_checked = checked

        def start_all(_: object) -> Deferred[Any]:
            enabled = [bridge for bridge in self.bridges.values() if bridge.config.enabled]
            starts = [bridge.start() for bridge in enabled]
            DeferredList([bridge.in_doubt_resolved() for bridge in enabled], consumeErrors=True).addBoth(
                lambda _: checked.callback(None))
            return DeferredList(starts, consumeErrors=True)

        def not_started(failure: Any) -> Any:
            if not checked.called:
                checked.callback(None)
            return failure

        d.addCallbacks(start_all, not_started)
        return d.addCallback(lambda _: None)

    def _start_purging(self, dedup: DuplicateStore) -> None:
        windows = [b.config.duplicate_window for b in self.bridges.values() if b.config.qos == ONCE_AND_ONLY_ONCE]
        interval = min(60.0, max(0.5, min(windows, default=60_000) / 10_000.0))
        self._purge = LoopingCall(lambda: dedup.purge().addErrback(self._purge_failed))
        self._purge.clock = self.reactor
        self._purge.start(interval, now=False)

    def _purge_failed(self, failure: Any) -> None:
        self.log.warn("purging the bridge duplicate store failed: {error}", error=failure.getErrorMessage())

    def _start_failed(self, failure: Any) -> None:
        error = failure.value
        message = str(error) if isinstance(error, GatewayError | OSError) else failure.getTraceback()
        self.log.critical("bridges cannot start: {message}", message=message)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        if self._purge is not None and self._purge.running:
            self._purge.stop()
        d: Deferred[Any] = DeferredList([bridge.stop() for bridge in self.bridges.values()], consumeErrors=True)
        if self.dedup is not None:
            dedup = self.dedup
            d.addCallback(lambda _: dedup.close())
        d.addCallback(
            lambda _: DeferredList([connector.stop() for connector in self.owned_connectors], consumeErrors=True)
        )
        return d.addCallback(lambda _: None)


ConnectorFactory = Callable[[str, str, "str | None"], IConnector]
"""Builds a private connector like the named one, logging in as (user, password)."""


def _connector_for(
    side: BridgeEndpoint,
    key: str,
    connectors: dict[str, IConnector],
    owned: list[IConnector],
    path: str,
    factory: ConnectorFactory | None,
) -> IConnector:
    connector = connectors[side.connector]
    if side.user is None:
        return connector
    own = getattr(connector, "with_credentials", None)
    try:
        if own is not None:
            private: IConnector = own(side.user, side.password)
        elif factory is not None:
            private = factory(side.connector, side.user, side.password)
        else:
            raise ConfigError("")
    except ConfigError as exc:
        reason = f": {exc.problem}" if exc.problem else ""
        raise ConfigError(
            f"connector {side.connector!r} does not take per-bridge credentials{reason} "
            "(set them on the connector, or leave user/password out)",
            path=path,
            key=f"{key}.user",
        ) from None
    owned.append(private)
    return private


CREDENTIAL_OPTIONS: dict[str, tuple[str, ...]] = {
    "stomp": ("login", "passcode"),
    "stomp+ssl": ("login", "passcode"),
    "kafka": ("sasl.username", "sasl.password"),
}
"""Where each connector scheme takes a login: STOMP CONNECT headers, Kafka SASL settings."""


def credential_factory(raw: dict[str, Any], *, reactor: Any, gateway_id: str, registry: Any,
                       path: str = "") -> ConnectorFactory:
    """A :data:`ConnectorFactory` building private connectors from ``[connectors]`` tables."""
    from gateway.connectors.registry import create_connector

    def build(name: str, user: str, password: str | None) -> IConnector:
        options = raw.get(name)
        if options is None:
            raise ConfigError("it is built into the gateway (in-process, no login)")
        if not isinstance(options, dict):  # validated options: the keys the file gave
            options = options.model_dump(exclude_unset=True)
        scheme = str(options.get("uri", "")).split("://", 1)[0]
        names = CREDENTIAL_OPTIONS.get(scheme)
        if names is None:
            raise ConfigError(f"scheme {scheme!r} has no login options")
        private = dict(options)
        if scheme == "kafka":
            for side in ("producer", "consumer"):
                table = dict(private.get(side, {}))
                table[names[0]] = user
                if password is not None:
                    table[names[1]] = password
                private[side] = table
        else:
            private[names[0]] = user
            if password is not None:
                private[names[1]] = password
        return create_connector(name, private, reactor=reactor, gateway_id=gateway_id,
                                registry=CollectorRegistry(), path=path)

    return build


def _chains_for(config: BridgeConfig, plugin_manager: Any, transform_config: Any, registry: Any, reactor: Any,
                path: str) -> Any:
    if not config.transformers:
        return None
    if plugin_manager is None:
        raise ConfigError("transformers need the gateway's plugins (no plugin manager given)", path=path,
                          key=f"{config.key}.transformers")
    from gateway.transform import ChainEntry, TransformChains, parse_transform_config

    base = transform_config if transform_config is not None else parse_transform_config(None, path)
    entries = tuple(
        ChainEntry(
            transformer=step.transformer,
            direction="inbound",
            on_error=step.on_error,
            dead_letter=step.dead_letter if step.on_error == "dead-letter" else None,
            options=dict(step.options),
        ).with_key(f"{config.key}.transformers[{index}]")
        for index, step in enumerate(config.transformers)
    )
    chain_config = base.model_copy(update={"transformation_header": False, "chain": entries})
    chain_config._path = path
    return TransformChains(plugin_manager, chain_config, registry=CollectorRegistry(), clock=reactor)


def _kafka_side(connector: IConnector) -> Any:
    """The Kafka connector behind ``connector`` (itself, or the one ``[routing]`` wraps), else None."""
    from gateway.connectors.kafka import KafkaConnector
    from gateway.routing.service import KafkaRouter

    if isinstance(connector, KafkaConnector):
        return connector
    if isinstance(connector, KafkaRouter):
        return connector.connector
    return None


def _kafka_transactions_plan(config: BridgeConfig, source: IConnector, target: IConnector
                             ) -> tuple[Any, Any, str | None, str | None] | str:
    """How a Kafka -> Kafka ONCE_AND_ONLY_ONCE bridge runs on Kafka transactions:
    (source connector, target connector, target topic, key header), or why it cannot
    (the duplicate store is used then)."""
    from gateway.routing.service import KafkaRouter

    kafka_source, kafka_target = _kafka_side(source), _kafka_side(target)
    if kafka_source is None or kafka_target is None:
        return "not Kafka on both sides"
    if set(kafka_source.settings.bootstrap.split(",")) != set(kafka_target.settings.bootstrap.split(",")):
        return "source and target are different Kafka clusters (offsets commit on the target's)"
    if isinstance(target, KafkaRouter):
        route = target.forward_route(config.target.destination)
        if route is None:
            return (f"[routing] decides the topic of {config.target.destination} by more than the destination "
                    "(a selector or a header test comes first)")
        return kafka_source, kafka_target, route.topic, route.key
    return kafka_source, kafka_target, None, None


def build_bridge_service(
    bridges: list[BridgeConfig],
    connectors: dict[str, IConnector],
    reactor: Any,
    *,
    registry: CollectorRegistry | None = None,
    data_dir: str = "var",
    plugin_manager: Any = None,
    transform_config: Any = None,
    path: str = "",
    dedup: DuplicateStore | None = None,
    connector_factory: ConnectorFactory | None = None,
) -> BridgeService:
    """A :class:`BridgeService` for ``bridges`` over ``connectors`` (raises ConfigError).

    :param registry: where the bridge metrics live (the gateway's registry).
    :param data_dir: where ``bridges.sqlite`` (the duplicate store) goes.
    :param plugin_manager: the gateway's transformer plugins, for ``transformers``.
    :param transform_config: the gateway's ``[transform]`` (option defaults, timeout).
    :param dedup: a duplicate store to use instead of ``<data_dir>/bridges.sqlite``.
    :param connector_factory: builds a private connector for a side with its own
        user/password (when the connector has no ``with_credentials``).
    """
    metrics = BridgeMetrics.for_registry(registry)
    owned: list[IConnector] = []
    needs_dedup = [b for b in bridges if b.qos == ONCE_AND_ONLY_ONCE]
    built: list[Any] = []
    for config in bridges:
        source = _connector_for(config.source, f"{config.key}.source", connectors, owned, path, connector_factory)
        target = _connector_for(config.target, f"{config.key}.target", connectors, owned, path, connector_factory)
        if config.qos == ONCE_AND_ONLY_ONCE:
            unprobeable = why_cannot_tell(target, config.target.destination)
            if unprobeable is not None:
                raise ConfigError(
                    f"ONCE_AND_ONLY_ONCE into connector {config.target.connector!r} needs a target that can say "
                    f"which messages it holds (a lost confirmation is resolved by looking), and {unprobeable}; "
                    "use a queue target, or DUPLICATES_OK and duplicate detection at the consumers (docs/bridges.md)",
                    path=path, key=f"{config.key}.qos")
        plan = _kafka_transactions_plan(config, source, target) if config.qos == ONCE_AND_ONLY_ONCE else ""
        if isinstance(plan, tuple):
            from gateway.bridges.kafka_exactly_once import KafkaExactlyOnceBridge

            kafka_source, kafka_target, topic, key_header = plan
            built.append(KafkaExactlyOnceBridge(
                config, kafka_source, kafka_target, clock=reactor, metrics=metrics,
                chains=_chains_for(config, plugin_manager, transform_config, registry, reactor, path),
                target_topic=topic, key_header=key_header,
            ))
            needs_dedup.remove(config)
            continue
        if plan and _kafka_side(source) is not None and _kafka_side(target) is not None:
            BridgeService.log.warn("bridge {name}: ONCE_AND_ONLY_ONCE without Kafka transactions ({why}); it uses "
                                   "the duplicate store", name=config.name, why=plan)
        if config.qos == ONCE_AND_ONLY_ONCE and ILocalTransactionSource.providedBy(source) \
                and source.shares_transactions_with(target):
            needs_dedup.remove(config)  # one local transaction of the provider (jms -> same provider)
            built.append(Bridge(config, source, target, clock=reactor, metrics=metrics,
                                chains=_chains_for(config, plugin_manager, transform_config, registry, reactor, path)))
            continue
        if config.qos == ONCE_AND_ONLY_ONCE and dedup is None:
            dedup = DuplicateStore(os.path.join(data_dir, DEDUP_DATABASE), reactor)
        built.append(Bridge(
            config, source, target, clock=reactor, metrics=metrics,
            dedup=dedup if config.qos == ONCE_AND_ONLY_ONCE else None,
            chains=_chains_for(config, plugin_manager, transform_config, registry, reactor, path),
        ))
    if dedup is not None:
        for config in needs_dedup:
            dedup.register(config.name, config.duplicate_window)
    return BridgeService(built, reactor=reactor, dedup=dedup if needs_dedup else None, owned_connectors=owned,
                         metrics=metrics)


def bridges_for_gateway(gateway: Gateway) -> BridgeService:
    """The bridges of ``gateway``'s configuration over its connectors (raises ConfigError)."""
    config = gateway.config
    bridges = parse_bridges(config.bridges, config.path, set(gateway.connectors))
    return build_bridge_service(
        bridges,
        gateway.connectors,
        gateway.reactor,
        registry=gateway.registry,
        data_dir=config.data_dir,
        plugin_manager=gateway.plugin_manager,
        transform_config=gateway.transform_config,
        path=config.path,
        connector_factory=credential_factory(config.connectors, reactor=gateway.reactor, gateway_id=config.id,
                                             registry=gateway.registry, path=config.path),
    )


def run_standalone(config_path: str, overrides: list[str] | None = None, *, only: list[str] | None = None) -> int:
    """``jmsgateway bridge --config FILE``: run the configured bridges (no STOMP
    listener) until SIGINT/SIGTERM.  Returns the exit status.

    :param only: run just these bridges (names); the others are not started.
    """
    from twisted.internet import reactor

    from gateway.app import build_gateway
    from gateway.config import load_config

    try:
        config = load_config(config_path, overrides or [])
        gateway = build_gateway(config, reactor)
        bridges = gateway.bridges
        for name in only or []:
            bridges.bridge(name)
    except ConfigError as error:
        print(f"jmsgateway bridge: bad configuration: {error}", file=sys.stderr)
        return 1
    except KeyError as error:
        print(f"jmsgateway bridge: {error.args[0]}", file=sys.stderr)
        return 1
    if not bridges.bridges:
        print(f"jmsgateway bridge: {config_path} configures no [[bridges]]", file=sys.stderr)
        return 1
    if only:
        for name, bridge in bridges.bridges.items():
            if name not in only:
                bridge.config = _disabled(bridge.config)
    os.makedirs(config.data_dir, exist_ok=True)
    status = {"code": 0}

    def started(_: object) -> None:  # Gateway.start has started the bridges after the connectors
        def show(_: object) -> None:
            for bridge in bridges.bridges.values():
                print(f"jmsgateway bridge: {bridge.name}: {bridge.state}", flush=True)

        if bridges.started is not None:
            bridges.started.addBoth(show)

    def failed(failure: Any) -> None:
        print(f"jmsgateway bridge: cannot start the connectors: {failure.getErrorMessage()}", file=sys.stderr)
        status["code"] = 1
        reactor.stop()

    def shutdown() -> Deferred[Any]:
        stopped: Deferred[Any] = gateway.stop()  # stops the bridges, then the connectors
        return stopped

    reactor.addSystemEventTrigger("before", "shutdown", shutdown)
    reactor.callWhenRunning(lambda: gateway.start().addCallbacks(started, failed))
    reactor.run()
    return status["code"]


def _disabled(config: BridgeConfig) -> BridgeConfig:

    return config.model_copy(update={"enabled": False})
