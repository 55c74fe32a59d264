"""``jmsgateway bridge``: the configured bridges alone, without STOMP listeners (with the admin
endpoint when ``[admin] listen`` says so), over only the connectors they use
(:func:`gateway.app.configured_connectors`).

A composition root like :mod:`gateway.app`: it loads the configuration and wires the layers;
nothing below imports it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, DeferredList

from gateway.app import bridges_for_gateway, configured_connectors, used_connectors
from gateway.bridges.config import BridgeConfig, parse_bridges
from gateway.bridges.service import BridgeService
from gateway.config import GatewayConfig, load_config
from gateway.deferreds import gather
from gateway.errors import ConfigError, GatewayError
from gateway.identity import resolve_gateway_id
from gateway.interfaces import IConnector


@dataclass
class StandaloneBridges:
    """What ``jmsgateway bridge`` runs, for whoever watches it (progress logs, the admin endpoint)."""

    config: GatewayConfig
    reactor: Any
    bridges: BridgeService
    connectors: dict[str, IConnector]
    """Name -> the connectors the bridges use (``embedded`` when a bridge names it)."""
    registry: CollectorRegistry
    """The connectors' and bridges' metrics."""
    started_at: float | None = None
    """When the connectors were up (reactor seconds); None before."""


def run_standalone(config_path: str, overrides: list[str] | None = None, *, only: list[str] | None = None,
                   watch: Any = None) -> int:
    """``jmsgateway bridge --config FILE``: run the configured bridges (no STOMP
    listener) until SIGINT/SIGTERM, with only the connectors they use (the embedded
    broker only when a bridge names it).  Returns the exit status.

    :param only: run just these bridges (names); the others are not started.
    :param watch: called with the :class:`StandaloneBridges` before the reactor runs (progress reports,
        the admin endpoint); a GatewayError or ConfigError it raises ends the command with its message.
    """
    from twisted.internet import reactor

    try:
        config = load_config(config_path, overrides or [])
        config.gateway.id = resolve_gateway_id(config.id, config.data_dir)
        parse_bridges(config.bridges, config.path, {"embedded", *config.connectors})  # names every connector known
        registry = CollectorRegistry()
        connectors = configured_connectors(config, reactor, registry, used_connectors(config)).by_name
        bridges = bridges_for_gateway(config, connectors, reactor, registry=registry)
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
    run = StandaloneBridges(config, reactor, bridges, connectors, registry)
    if watch is not None:
        try:
            watch(run)
        except (ConfigError, GatewayError) as error:
            print(f"jmsgateway bridge: {error}", file=sys.stderr)
            return 1
    status = {"code": 0}

    def started(_: object) -> None:  # the connectors are up: start the bridges
        run.started_at = reactor.seconds()
        bridges.startService()

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
        stopped: Deferred[Any] = bridges.stopService() if bridges.running else gather([])
        return stopped.addCallback(  # the bridges first, then the connectors
            lambda _: DeferredList([c.stop() for c in connectors.values()], consumeErrors=True))

    reactor.addSystemEventTrigger("before", "shutdown", shutdown)
    def begin() -> None:  # the data directory's bridges first (a standby connects to nothing), then the connectors
        owned = bridges.when_owned()
        if bridges.standby and bridges.lock is not None:
            print(f"jmsgateway bridge: standby: {bridges.lock.path} is locked by another process (pid "
                  f"{bridges.lock.holder()}); the bridges start once it is free", flush=True)
        owned.addCallback(lambda _: gather(c.start() for c in connectors.values())).addCallbacks(started, failed)

    reactor.callWhenRunning(begin)
    reactor.run()
    return status["code"]


def _disabled(config: BridgeConfig) -> BridgeConfig:

    return config.model_copy(update={"enabled": False})
