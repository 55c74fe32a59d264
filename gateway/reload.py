"""SIGHUP: re-read the configuration and apply what can change while the gateway runs.

Applied at once: ``[gateway] log_level``; the logins (``[auth] users``, the
``password_file``'s lines, ``certificates``) for every next login; ``[auth]
groups`` and ``[[authorization]]`` for every next SEND, SUBSCRIBE or admin
action; ``[auth.limits]`` and ``[broker] max_destinations`` for every next
CONNECT and destination creation (lowered below what is held, they refuse the
next one and close or delete nothing); ``[broker] inactive_queue_timeout`` for
the next sweep of inactive queues; ``[broker] max_scheduled_size`` for the next
scheduled SEND; ``[routing]``'s routes and soft-failure policies for every next
message (the same Kafka connector); ``[[bridges]]``: a bridge that is gone
stops, a new one starts, a changed one stops and starts again with its new
settings (as an Artemis or RabbitMQ operator changes bridges and shovels at
run time), while the connectors and ``[transform]`` stay as they are.
Turning authentication, authorization or routing on or off, a bridge side
with its own login, a new bridge needing the duplicate store when none is
open, and every other key that differs, need a restart: the outcome is
logged, naming both.  A file that does not load changes nothing (logged with
the reason).  The caller (the service in :mod:`gateway.tap`) loads the file
with the command line's overrides; this module only compares and applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.bridges.config import BridgeConfig, parse_bridges
from gateway.bridges.service import build_bridge_service
from gateway.config import GatewayConfig
from gateway.deferreds import gather
from gateway.errors import ConfigError
from gateway.log_observer import GatewayLogObserver, parse_level
from gateway.routing.config import RoutingConfig, parse_routing_config
from gateway.security.auth import build_portal
from gateway.security.authorization import DestinationAuthorizer, build_authorizer

if TYPE_CHECKING:  # pragma: no cover
    from gateway.app import Gateway

APPLIED_AUTH_KEYS = frozenset({"users", "password_file", "groups", "certificates", "limits"})
"""``[auth]`` keys a reload applies (the others need a restart)."""


@dataclass
class ReloadOutcome:
    """What a reload applied and which changed keys need a restart."""

    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)


@dataclass
class BridgeChanges:
    """The ``[[bridges]]`` a reload would change, validated before anything is applied."""

    removed: list[str] = field(default_factory=list)
    added: list[BridgeConfig] = field(default_factory=list)
    changed: list[BridgeConfig] = field(default_factory=list)
    service: Any = None
    """The new and changed bridges, built (a :class:`~gateway.bridges.service.BridgeService` not started)."""
    why_not: str = ""
    """Why the changes need a restart instead ("" when they can be applied)."""

    @property
    def any(self) -> bool:
        return bool(self.removed or self.added or self.changed)


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(item) for item in value]
    return value.model_dump() if hasattr(value, "model_dump") else value


class ConfigReloader:
    """Applies a newly loaded configuration to a running :class:`~gateway.app.Gateway`.

    :param load: loads the configuration file again (ConfigError when it cannot).
    :param observer: the log observer whose level ``[gateway] log_level`` sets (None: not ours).
    :param level_fixed: whether ``--log-level`` was given (it wins over the file).
    """

    log = Logger()

    def __init__(self, gateway: Gateway, load: Callable[[], GatewayConfig], reactor: Any,
                 observer: GatewayLogObserver | None = None, *, level_fixed: bool = False) -> None:
        self.gateway = gateway
        self.load = load
        self.reactor = reactor
        self.observer = observer
        self.level_fixed = level_fixed

    def reload(self) -> ReloadOutcome | None:
        """Load and apply; the outcome (None when the file did not load: nothing changed)."""
        path = self.gateway.config.path
        try:
            new = self.load()
        except ConfigError as error:
            self.log.error("SIGHUP: configuration not reloaded, nothing changed: {error}", error=error)
            return None
        old = self.gateway.config
        new.gateway.id = new.gateway.id or old.gateway.id
        outcome = ReloadOutcome()
        try:
            routing = self._routing_changes(old, new)
            bridges = self._bridge_changes(old, new)
            self._auth_checked(new)
        except ConfigError as error:
            self.log.error("SIGHUP: configuration not reloaded, nothing changed: {error}", error=error)
            return None
        # validated: now apply, or say why not
        self._log_level(old, new, outcome)
        self._auth(old, new, outcome)
        self._routing(old, new, routing, outcome)
        self._bridges(old, new, bridges, outcome)
        self._others(old, new, outcome)
        self.log.info("SIGHUP: configuration {path} reloaded; applied: {applied}; needs a restart: {restart}",
                      path=path, applied=", ".join(outcome.applied) or "nothing",
                      restart=", ".join(outcome.restart) or "nothing")
        return outcome

    def _log_level(self, old: GatewayConfig, new: GatewayConfig, outcome: ReloadOutcome) -> None:
        if new.gateway.log_level == old.gateway.log_level:
            return
        if self.observer is None or self.level_fixed:
            why = "--log-level" if self.level_fixed else "not logging through jmsgateway's observer"
            outcome.restart.append(f"gateway.log_level ({why} decides)")
            return
        self.observer.level = parse_level(new.gateway.log_level)
        old.gateway.log_level = new.gateway.log_level
        outcome.applied.append(f"gateway.log_level = {new.gateway.log_level}")

    def _auth_checked(self, new: GatewayConfig) -> None:
        portal = build_portal(new.auth, new.path, self.reactor)
        build_authorizer(new.auth, new.authorization, new.path, has_users=portal is not None)

    def _auth(self, old: GatewayConfig, new: GatewayConfig, outcome: ReloadOutcome) -> None:
        gateway = self.gateway
        portal = build_portal(new.auth, new.path, self.reactor)
        authorizer = build_authorizer(new.auth, new.authorization, new.path, has_users=portal is not None)
        restarts = len(outcome.restart)
        before, after = old.auth.model_dump(), new.auth.model_dump()
        changed = sorted(k for k in after if k not in APPLIED_AUTH_KEYS and after[k] != before.get(k))
        if changed:
            outcome.restart.append(", ".join(f"auth.{key}" for key in changed))
        if (portal is None) != (gateway.portal is None):
            outcome.restart.append("auth.users (turning authentication " + ("on" if portal else "off") + ")")
        elif portal is not None and gateway.portal is not None:
            if set(portal.checkers) != set(gateway.portal.checkers):
                outcome.restart.append("auth.certificates (adding or removing certificate logins)")
            else:
                for checker in set(portal.checkers.values()):
                    gateway.portal.registerChecker(checker)
                outcome.applied.append("auth logins")
        if _dump(new.auth.limits) != _dump(old.auth.limits):
            gateway.broker.quota.logins.replace(new.auth.limits)  # (the STOMP factory's connection count reads it too)
            outcome.applied.append(f"auth.limits ({len(new.auth.limits)} entries)")
        running = gateway.factory.authorizer
        if authorizer.enabled and running is None:
            outcome.restart.append("authorization (turning per-destination authorization on)")
        elif running is not None and ((_dump(new.authorization), new.auth.groups)
                                      != (_dump(old.authorization), old.auth.groups)):
            if isinstance(running, DestinationAuthorizer):  # (the listeners take any IAuthorizer)
                running.replace_rules(authorizer)
            if gateway.authorizer is not running:
                gateway.authorizer.replace_rules(authorizer)
            outcome.applied.append(f"authorization ({len(authorizer.entries)} entries)")
            old.authorization = new.authorization
        if len(outcome.restart) == restarts:  # all of [auth] is in effect: compare the next reload with it
            old.auth = new.auth

    # -- [routing] -----------------------------------------------------------------------------------

    def _routing_changes(self, old: GatewayConfig, new: GatewayConfig) -> RoutingConfig | str | None:
        """The new routes (validated), a reason they need a restart, or None when unchanged."""
        if _dump(old.routing) == _dump(new.routing):
            return None
        router = self.gateway.router
        if router is None or not new.routing.model_fields_set:
            return "routing (turning Kafka routing " + ("on" if router is None else "off") + ")"
        config = parse_routing_config(new.routing, new.path)
        if config.connector != router.config.connector:
            return "routing.connector"
        return config

    def _routing(self, old: GatewayConfig, new: GatewayConfig, changes: RoutingConfig | str | None,
                 outcome: ReloadOutcome) -> None:
        if changes is None:
            return
        if isinstance(changes, str):
            outcome.restart.append(changes)
            return
        router = self.gateway.router
        assert router is not None  # (checked by _routing_changes)
        router.use_config(changes)
        old.routing = new.routing
        outcome.applied.append(f"routing ({len(changes.routes)} routes)")

    # -- [[bridges]] ----------------------------------------------------------------------------------

    def _bridge_changes(self, old: GatewayConfig, new: GatewayConfig) -> BridgeChanges:
        """What differs in ``[[bridges]]``, validated and the new bridges built (nothing started)."""
        changes = BridgeChanges()
        if _dump(old.bridges) == _dump(new.bridges):
            return changes
        gateway = self.gateway
        names = set(gateway.connectors)
        before = {bridge.name: bridge for bridge in parse_bridges(old.bridges, old.path, names)}
        after = {bridge.name: bridge for bridge in parse_bridges(new.bridges, new.path, names)}
        changes.removed = [name for name in before if name not in after]
        changes.added = [bridge for name, bridge in after.items() if name not in before]
        changes.changed = [bridge for name, bridge in after.items()
                           if name in before and bridge.model_dump() != before[name].model_dump()]
        if _dump(old.connectors) != _dump(new.connectors) or _dump(old.transform) != _dump(new.transform):
            changes.why_not = "the connectors or [transform] changed too"
        elif gateway.bridges.standby:
            changes.why_not = "this gateway stands by for the bridges' store"
        elif any(side.user is not None for bridge in [*changes.added, *changes.changed,
                                                       *(before[name] for name in changes.removed)]
                 for side in (bridge.source, bridge.target)):
            changes.why_not = "a bridge side with its own login (its private connection)"
        if changes.why_not or not (changes.added or changes.changed):
            return changes
        service = gateway.bridges
        built = build_bridge_service([*changes.added, *changes.changed], gateway.connectors, self.reactor,
                                     registry=gateway.registry, data_dir=new.data_dir,
                                     plugin_manager=gateway.plugin_manager, transform_config=gateway.transform_config,
                                     path=new.path, dedup=service.dedup)
        if built.dedup is not None and service.dedup is None:
            changes.why_not = "a bridge needing the duplicate store (ONCE_AND_ONLY_ONCE), which no bridge opened"
        changes.service = built
        return changes

    def _bridges(self, old: GatewayConfig, new: GatewayConfig, changes: BridgeChanges,
                 outcome: ReloadOutcome) -> None:
        if not changes.any:
            return
        if changes.why_not:
            outcome.restart.append(f"bridges ({changes.why_not})")
            return
        service = self.gateway.bridges
        built = changes.service
        replaced = {bridge.name for bridge in changes.changed}
        stopped = [service.remove(name) for name in [*changes.removed, *replaced]]

        def start_new(_: object) -> None:
            for name, bridge in built.bridges.items():
                service.add(bridge).addErrback(self._not_started, name)

        gather(stopped).addBoth(start_new)  # a changed bridge's old consumer is gone before the new one starts
        old.bridges = new.bridges
        parts = [f"{what} {', '.join(names)}" for what, names in (
            ("added", [bridge.name for bridge in changes.added]), ("changed", sorted(replaced)),
            ("removed", changes.removed)) if names]
        outcome.applied.append(f"bridges ({'; '.join(parts)})")

    def _not_started(self, failure: Failure, name: str) -> None:
        self.log.warn("SIGHUP: bridge {bridge} did not start: {error}", bridge=name, error=failure.getErrorMessage())

    def _others(self, old: GatewayConfig, new: GatewayConfig, outcome: ReloadOutcome) -> None:
        for name in type(old).model_fields:
            if name in ("auth", "authorization", "routing", "bridges"):
                continue
            before, after = _dump(getattr(old, name)), _dump(getattr(new, name))
            if name == "gateway":
                before = {k: v for k, v in before.items() if k != "log_level"}
                after = {k: v for k, v in after.items() if k != "log_level"}
            if name == "broker" and before.get("max_destinations") != after.get("max_destinations"):
                limit = new.broker.max_destinations
                self.gateway.broker.quota.max_destinations = limit  # (judges the next creation; deletes nothing)
                old.broker = old.broker.model_copy(update={"max_destinations": limit})  # (sections are frozen)
                outcome.applied.append(f"broker.max_destinations = {limit}")
                before, after = _dump(old.broker), _dump(new.broker)
            if name == "broker" and before.get("inactive_queue_timeout") != after.get("inactive_queue_timeout"):
                timeout = new.broker.inactive_queue_timeout
                self.gateway.broker.inactive.set_timeout(timeout)  # (the next sweep judges by it)
                old.broker = old.broker.model_copy(update={"inactive_queue_timeout": timeout})
                outcome.applied.append(f"broker.inactive_queue_timeout = {timeout}")
                before, after = _dump(old.broker), _dump(new.broker)
            if name == "broker" and before.get("max_scheduled_size") != after.get("max_scheduled_size"):
                size = new.broker.max_scheduled_size
                self.gateway.broker.scheduler.max_size = size  # (the next scheduled SEND is judged by it)
                old.broker = old.broker.model_copy(update={"max_scheduled_size": size})
                outcome.applied.append(f"broker.max_scheduled_size = {size}")
                before, after = _dump(old.broker), _dump(new.broker)
            if before != after:
                outcome.restart.append(name)
