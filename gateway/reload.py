"""SIGHUP: re-read the configuration and apply what can change while the gateway runs.

Applied at once: ``[gateway] log_level``; the logins (``[auth] users``, the
``password_file``'s lines, ``certificates``) for every next login; ``[auth]
groups`` and ``[[authorization]]`` for every next SEND, SUBSCRIBE or admin
action.  Turning authentication or authorization on or off, and every other
key that differs, needs a restart: the outcome is logged, naming both.  A file
that does not load changes nothing (logged with the reason).  The caller (the
service in :mod:`gateway.tap`) loads the file with the command line's
overrides; this module only compares and applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.log_observer import GatewayLogObserver, parse_level
from gateway.security.auth import build_portal
from gateway.security.authorization import DestinationAuthorizer, build_authorizer

if TYPE_CHECKING:  # pragma: no cover
    from gateway.app import Gateway

APPLIED_AUTH_KEYS = frozenset({"users", "password_file", "groups", "certificates"})
"""``[auth]`` keys a reload applies (the others need a restart)."""


@dataclass
class ReloadOutcome:
    """What a reload applied and which changed keys need a restart."""

    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)


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
            self._log_level(old, new, outcome)
            self._auth(old, new, outcome)
        except ConfigError as error:
            self.log.error("SIGHUP: configuration not reloaded, nothing changed: {error}", error=error)
            return None
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

    def _auth(self, old: GatewayConfig, new: GatewayConfig, outcome: ReloadOutcome) -> None:
        gateway = self.gateway
        portal = build_portal(new.auth, new.path, self.reactor)
        authorizer = build_authorizer(new.auth, new.authorization, new.path, has_users=portal is not None)
        # validated: now apply, or say why not
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

    def _others(self, old: GatewayConfig, new: GatewayConfig, outcome: ReloadOutcome) -> None:
        for name in type(old).model_fields:
            if name in ("auth", "authorization"):
                continue
            before, after = _dump(getattr(old, name)), _dump(getattr(new, name))
            if name == "gateway":
                before = {k: v for k, v in before.items() if k != "log_level"}
                after = {k: v for k, v in after.items() if k != "log_level"}
            if before != after:
                outcome.restart.append(name)
