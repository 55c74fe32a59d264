"""The bridges of one gateway as a Twisted service, their run-time control API,
and ``jmsgateway bridge`` (the bridges alone, without STOMP listeners).

:func:`build_bridge_service` turns validated :class:`BridgeConfig` entries and
connectors into a :class:`BridgeService`: one :class:`~gateway.interfaces.IBridge`
each, built by the first strategy of its quality of service that joins its two
connectors (:mod:`gateway.bridges.qos`), the shared duplicate store
(``<data_dir>/bridges.sqlite``) when a bridge needs it, a transformer chain per
bridge that names transformers, and a private connector per side that gives its
own user/password (the connector must provide
:class:`~gateway.interfaces.ICredentialed`).  Connectors are known here only by
:mod:`gateway.interfaces`.

:class:`BridgeService` starts the bridges when it starts (call
``startService`` once the connectors are up; the gateway does,
:func:`gateway.app.bridges_for_gateway` builds it from a ``GatewayConfig``) and stops them
first when it stops.  Control: ``service.bridge(name)`` then ``.start()``,
``.stop()``, ``.pause()``, ``.resume()``, ``.status()``; ``service.status()`` lists all.
"""

from __future__ import annotations

import difflib
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.application import service
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.bridges.bridge import Bridge
from gateway.bridges.config import BridgeConfig, BridgeEndpoint
from gateway.bridges.dedup import DuplicateStore
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.ownership import BridgeStoreLock
from gateway.bridges.probe import why_cannot_tell
from gateway.bridges.qos import DEDUP_DATABASE, BuildContext, build_bridge, strategies_for
from gateway.deferreds import gather
from gateway.errors import ConfigError, GatewayError
from gateway.interfaces import IBridge, IConnector, ICredentialed

__all__ = ["DEDUP_DATABASE", "BridgeService", "build_bridge_service"]


class BridgeService(service.MultiService):
    """Runs a gateway's bridges (see the module docstring)."""

    log = Logger()

    def __init__(
        self,
        bridges: list[IBridge],
        *,
        reactor: Any,
        dedup: DuplicateStore | None = None,
        owned_connectors: list[IConnector] | None = None,
        metrics: BridgeMetrics | None = None,
        duplicate_windows: list[int] | None = None,
        lock: BridgeStoreLock | None = None,
    ) -> None:
        super().__init__()
        self.bridges: dict[str, IBridge] = {bridge.name: bridge for bridge in bridges}
        self.reactor = reactor
        self.dedup = dedup
        self.duplicate_windows = list(duplicate_windows or [])
        """The ``duplicate_window`` of every bridge using :attr:`dedup` (how often it is purged)."""
        self.owned_connectors = list(owned_connectors or [])
        self.metrics = metrics
        self._purge: LoopingCall | None = None
        self.lock = lock
        """The data directory's bridge-store lock (None: not taken, one process is assumed)."""
        self.standby = False
        """Another process holds :attr:`lock`: no bridge runs until it is free."""
        self._waiting_for_lock: LoopingCall | None = None
        self._ownership: Deferred[None] | None = None
        self.started: Deferred[None] | None = None
        self.in_doubt_checked: Deferred[None] | None = None
        """Fires once every started bridge's in-doubt check is done (the gateway opens its
        STOMP listeners after it, so no client takes a copy the check has not seen)."""

    # -- control API ---------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Bridge names in configuration order."""
        return list(self.bridges)

    def bridge(self, name: str) -> IBridge:
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

    def remove(self, name: str) -> Deferred[Any]:
        """Stop the bridge ``name`` and forget it (a SIGHUP reload); fires once it stopped."""
        bridge = self.bridges.pop(name)
        self.log.info("bridge {bridge} removed (configuration reloaded)", bridge=name)
        stopped: Deferred[Any] = bridge.stop()
        return stopped

    def add(self, bridge: IBridge) -> Deferred[Any]:
        """Run ``bridge`` too (a SIGHUP reload): started at once when the bridges run and it is enabled."""
        self.bridges[bridge.name] = bridge
        self.log.info("bridge {bridge} added (configuration reloaded)", bridge=bridge.name)
        if self.running and not self.standby and bridge.config.enabled:
            started: Deferred[Any] = bridge.start()
            return started
        return succeed(None)

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
        d: Deferred[Any] = self.when_owned()
        d.addCallback(lambda _: gather(connector.start() for connector in self.owned_connectors))
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

    def when_owned(self) -> Deferred[None]:
        """Fires once this process holds :attr:`lock` (see :meth:`_owned`); one wait however
        often it is asked (a standalone bridge asks before it starts its connectors, so a
        standby opens no connection to the brokers while the owner runs)."""
        if self._ownership is None:
            self._ownership = self._owned()
        waiter: Deferred[None] = Deferred()

        def fire(result: None) -> None:
            waiter.callback(None)
            return result

        self._ownership.addCallback(fire)
        return waiter

    def _owned(self) -> Deferred[None]:
        """Fires once this process holds :attr:`lock` (at once without one, or when it is free);
        meanwhile the bridges stand by, as an ActiveMQ slave on a shared store does."""
        lock = self.lock
        enabled = [bridge for bridge in self.bridges.values() if bridge.config.enabled]
        if lock is None or not enabled or lock.try_acquire():
            return succeed(None)
        self.standby = True
        self.log.warn("bridges STANDBY: {path} is locked by another process (pid {pid}): another gateway or "
                      "'jmsgateway bridge' runs these bridges on this data directory; starting them once it is "
                      "free", path=lock.path, pid=lock.holder())
        owned: Deferred[None] = Deferred()

        def poll() -> None:
            if lock.try_acquire() and not owned.called:
                self.standby = False
                if self._waiting_for_lock is not None and self._waiting_for_lock.running:
                    self._waiting_for_lock.stop()
                self.log.info("bridges: {path} is ours now; starting the bridges", path=lock.path)
                owned.callback(None)

        self._waiting_for_lock = LoopingCall(poll)
        self._waiting_for_lock.clock = self.reactor
        self._waiting_for_lock.start(1.0, now=False)
        return owned

    def _start_purging(self, dedup: DuplicateStore) -> None:
        interval = min(60.0, max(0.5, min(self.duplicate_windows, default=60_000) / 10_000.0))
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
        if self._waiting_for_lock is not None and self._waiting_for_lock.running:
            self._waiting_for_lock.stop()
        d: Deferred[Any] = DeferredList([bridge.stop() for bridge in self.bridges.values()], consumeErrors=True)
        if self.dedup is not None:
            dedup = self.dedup
            d.addCallback(lambda _: dedup.close())
        d.addCallback(
            lambda _: DeferredList([connector.stop() for connector in self.owned_connectors], consumeErrors=True)
        )
        return d.addBoth(self._release_lock)

    def _release_lock(self, _: object) -> None:
        if self.lock is not None:
            self.lock.release()


def _connector_for(side: BridgeEndpoint, key: str, connectors: dict[str, IConnector],
                   owned: dict[tuple[str, str, str | None], IConnector], path: str) -> IConnector:
    """The connector of one bridge side: the named one, or a private copy logging in as the
    side's own ``user`` (:class:`~gateway.interfaces.ICredentialed`), one per connector and login
    (bridges with the same login share it, as the others share the named connector: a JMS broker
    takes one connection per client id)."""
    connector = connectors[side.connector]
    if side.user is None:
        return connector
    login = (side.connector, side.user, side.password)
    if login in owned:
        return owned[login]
    credentialed = ICredentialed(connector, None)
    try:
        if credentialed is None:
            raise ConfigError("it has no login of its own (in-process, or it does not provide ICredentialed)")
        private: IConnector = credentialed.with_credentials(side.user, side.password)
    except ConfigError as exc:
        reason = f": {exc.problem}" if exc.problem else ""
        raise ConfigError(
            f"connector {side.connector!r} does not take per-bridge credentials{reason} "
            "(set them on the connector, or leave user/password out)",
            path=path,
            key=f"{key}.user",
        ) from None
    owned[login] = private
    return private


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
    owner_lock: bool = False,
) -> BridgeService:
    """A :class:`BridgeService` for ``bridges`` over ``connectors`` (raises ConfigError).

    :param registry: where the bridge metrics live (the gateway's registry).
    :param data_dir: where ``bridges.sqlite`` (the duplicate store) goes.
    :param plugin_manager: the gateway's transformer plugins, for ``transformers``.
    :param transform_config: the gateway's ``[transform]`` (option defaults, timeout).
    :param dedup: a duplicate store to use instead of ``<data_dir>/bridges.sqlite``.
    :param owner_lock: take ``<data_dir>/bridges.lock`` before starting (one process per data
        directory runs the bridges, another stands by: :mod:`gateway.bridges.ownership`).
    """
    metrics = BridgeMetrics.for_registry(registry)
    owned: dict[tuple[str, str, str | None], IConnector] = {}
    context = BuildContext(reactor, metrics, lambda config: _chains_for(config, plugin_manager, transform_config,
                                                                        registry, reactor, path),
                           Bridge, data_dir=data_dir, dedup=dedup)
    built: list[IBridge] = []
    for config in bridges:
        source = _connector_for(config.source, f"{config.key}.source", connectors, owned, path)
        target = _connector_for(config.target, f"{config.key}.target", connectors, owned, path)
        if strategies_for(config.qos)[0].needs_held_ids:
            unprobeable = why_cannot_tell(target, config.target.destination)
            if unprobeable is not None:
                raise ConfigError(
                    f"{config.qos} into connector {config.target.connector!r} needs a target that can say "
                    f"which messages it holds (a lost confirmation is resolved by looking), and {unprobeable}; "
                    "use a queue target, or DUPLICATES_OK and duplicate detection at the consumers (docs/bridges.md)",
                    path=path, key=f"{config.key}.qos")
        built.append(build_bridge(config, source, target, context))
    store = context.dedup
    users = context.dedup_users
    if store is not None:
        for config in users:
            store.register(config.name, config.duplicate_window)
    return BridgeService(built, reactor=reactor, dedup=store if users else None, owned_connectors=list(owned.values()),
                         metrics=metrics, duplicate_windows=[config.duplicate_window for config in users],
                         lock=BridgeStoreLock(data_dir) if owner_lock and built else None)
