"""Per-destination permissions: ``[[authorization]]`` entries and ``[auth] groups``.

Like ActiveMQ's ``authorizationEntry`` (and RabbitMQ's read/write/configure
patterns), each entry grants ``read`` (SUBSCRIBE, browse), ``write`` (SEND) and
``admin`` (durable subscriptions, purge, the admin console's actions) on the
destinations its glob ``destination`` pattern matches (the matcher of
``[[destinations]]``, :func:`~gateway.message.destinations.destination_matches`)::

    [auth.groups]
    ops = ["alice"]

    [[authorization]]
    destination = "/queue/orders.*"
    read = ["group:ops", "bob"]     # "group:NAME", a login ("NAME" or "user:NAME"), "*" = any login
    write = ["group:ops"]
    admin = []

Rules:

- No entries: everything is allowed to every authenticated login (and to
  anonymous connections when ``[auth]`` has no users) - the behaviour before
  authorization existed.
- With entries, deny by default: a login holds a permission on a destination
  when at least one matching entry grants it (entries add up, their order does
  not matter).  Anonymous (``login`` None) holds nothing.
- A composite name (``/queue/a,/topic/b``) is permitted when every part is
  (:func:`~gateway.message.destinations.composite_parts`), whoever asks: the
  STOMP session splits it itself, the admin console does not.
- A wildcard subscription (``/topic/orders.*.eu``, ``/queue/orders.>``) is judged on every name it
  can receive: its ``*`` and ``>`` segments must fall under a ``*`` of the granting entries'
  patterns (``/queue/shard.?`` does not open ``/queue/shard.*``), and a trailing ``.>`` needs the
  name without it too (``orders.>`` matches ``orders``):
  :func:`~gateway.message.destinations.wildcard_covered`.  A SEND to such a name goes to that
  literal name, so ``write`` is matched as for any name.
- Names are the STOMP-side destination as the client wrote it, checked before
  routing, so one set of entries covers the embedded broker and every connector;
  the caller asks for every name routed to the same target too
  (:meth:`~gateway.routing.destination_map.DestinationMap.aliases`: a Kafka
  topic's ``/queue/`` and ``/topic/`` forms), so an alias alone opens nothing.
- Temporary destinations: a connection's own ``/temp-queue/...`` and
  ``/temp-topic/...`` are always its own to use (the session does not ask).
  Another connection's (``/remote-temp-queue/...``, where replies go) is open
  to every login unless an entry's pattern starts with ``/remote-temp-``; then
  the entries decide, as ActiveMQ's ``tempDestinationAuthorizationEntry`` does.

:class:`DestinationAuthorizer` answers :class:`~gateway.interfaces.IAuthorizer`:
``permits`` (pure, cached) and ``check``, which both the STOMP session and the
admin console call before they refuse something, so every refusal is logged
and counted once, here (``jmsgateway_authorization_denied_total{permission}``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from twisted.logger import Logger
from zope.interface import implementer

from gateway.errors import ConfigError, DestinationError, did_you_mean
from gateway.interfaces import IAuthorizer, Permission
from gateway.message.destinations import composite_parts, destination_matches, is_wildcard, wildcard_covered

PERMISSIONS: tuple[Permission, ...] = ("read", "write", "admin")
EVERYONE = "*"
"""A principal that stands for every authenticated login."""

REMOTE_TEMP_PREFIX = "/remote-temp-"
"""How another connection's temporary destination is named (where replies go)."""

_CACHE_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class AuthorizationEntry:
    """One ``[[authorization]]`` entry: who holds which permission on ``destination`` (a glob)."""

    destination: str
    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()
    admin: frozenset[str] = frozenset()

    def grants(self, permission: Permission, principals: frozenset[str]) -> bool:
        allowed: frozenset[str] = getattr(self, permission)
        return EVERYONE in allowed or not allowed.isdisjoint(principals)


def parse_groups(raw: dict[str, Any], path: str = "") -> dict[str, frozenset[str]]:
    """``[auth] groups`` (group name → list of logins), validated."""
    groups: dict[str, frozenset[str]] = {}
    for name, members in raw.items():
        key = f"auth.groups.{name}"
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError("expected a list of logins", path=path, key=key)
        groups[name] = frozenset(members)
    return groups


def _principal(value: Any, groups: dict[str, frozenset[str]], path: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"expected a login, 'group:NAME' or '*', got {value!r}", path=path, key=key)
    if value == EVERYONE:
        return value
    kind, sep, name = value.partition(":")
    if not sep:
        return f"user:{value}"
    if kind == "user" and name:
        return value
    if kind == "group" and name:
        if name not in groups:
            raise ConfigError(f"group {name!r} is not defined under [auth.groups]{did_you_mean(name, groups)}",
                              path=path, key=key)
        return value
    raise ConfigError(f"{value!r}: expected a login, 'user:LOGIN', 'group:NAME' or '*'", path=path, key=key)


def parse_authorization(raw: list[Any], groups: dict[str, frozenset[str]], path: str = "") -> list[AuthorizationEntry]:
    """``[[authorization]]`` entries, validated (ConfigError naming the key)."""
    entries = []
    known = ("destination", *PERMISSIONS)
    for index, item in enumerate(raw):
        where = f"authorization[{index}]"
        if not isinstance(item, dict):
            raise ConfigError("expected a table ([[authorization]])", path=path, key=where)
        for name in item:
            if name not in known:
                raise ConfigError(f"unknown key{did_you_mean(name, known)}", path=path, key=f"{where}.{name}")
        pattern = item.get("destination")
        if not isinstance(pattern, str) or not pattern.startswith("/"):
            raise ConfigError("expected a destination pattern such as \"/queue/orders.*\"", path=path,
                              key=f"{where}.destination")
        granted: dict[str, frozenset[str]] = {}
        for permission in PERMISSIONS:
            value = item.get(permission, [])
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list):
                raise ConfigError("expected a list of logins, 'group:NAME' or '*'", path=path,
                                  key=f"{where}.{permission}")
            granted[permission] = frozenset(
                _principal(v, groups, path, f"{where}.{permission}[{i}]") for i, v in enumerate(value)
            )
        entries.append(AuthorizationEntry(pattern, **granted))
    return entries


REFUSALS_LOGGED = 10
"""Refusals logged in full per origin (a STOMP connection's address, the admin console) and window:
a refused SEND keeps its connection, so one client could otherwise write a log line per frame."""
REFUSAL_WINDOW = 10.0
"""Seconds of that window."""
LOGGED_NAME = 256
"""Characters of a refused destination's name a log line shows (a header may hold 64 KiB)."""


@implementer(IAuthorizer)
class DestinationAuthorizer:
    """Answers whether a login holds a permission on a destination (see the module docstring).

    :param entries: the ``[[authorization]]`` entries (none: everything allowed).
    :param groups: group name → logins.
    """

    log = Logger()

    def __init__(self, entries: list[AuthorizationEntry], groups: dict[str, frozenset[str]] | None = None,
                 registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.entries = list(entries)
        self._clock = clock
        self._window_start = clock()
        self._logged: dict[str, int] = {}  # origin -> refusals in this log window
        self.groups = dict(groups or {})
        self.guards_replies = any(e.destination.startswith(REMOTE_TEMP_PREFIX) for e in self.entries)
        self._principals: dict[str, frozenset[str]] = {}
        self._cache: dict[tuple[str, Permission, str], bool] = {}
        self.denied = Counter("jmsgateway_authorization_denied", "SENDs, SUBSCRIBEs and admin actions refused "
                              "by [[authorization]]", ["permission"], registry=registry or CollectorRegistry())
        for permission in PERMISSIONS:
            self.denied.labels(permission)

    def replace_rules(self, other: DestinationAuthorizer) -> None:
        """Take ``other``'s entries and groups (a configuration reload: the next SEND, SUBSCRIBE or admin
        action is judged by them); the refusal counter stays."""
        self.entries = list(other.entries)
        self.groups = dict(other.groups)
        self.guards_replies = other.guards_replies
        self._principals = {}
        self._cache = {}

    @property
    def enabled(self) -> bool:
        """Whether any entry restricts access (else :meth:`permits` is always True)."""
        return bool(self.entries)

    def principals(self, login: str) -> frozenset[str]:
        """``user:LOGIN`` and the ``group:NAME`` of every group listing ``login``."""
        found = self._principals.get(login)
        if found is None:
            found = frozenset([f"user:{login}", *(f"group:{g}" for g, members in self.groups.items()
                                                  if login in members)])
            self._principals[login] = found
        return found

    def permits(self, login: str | None, permission: Permission, destination: str) -> bool:
        if not self.entries:
            return True
        if login is None:
            return False
        key = (login, permission, destination)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if "," in destination:  # a composite: every part (whoever asks: the console as STOMP)
            try:
                parts = composite_parts(destination)
            except DestinationError:
                return False
            return all(self.permits(login, permission, part) for part in parts)
        if destination.startswith(REMOTE_TEMP_PREFIX) and not self.guards_replies:
            allowed = True
        else:
            principals = self.principals(login)
            if permission != "write" and is_wildcard(destination):  # (a SEND to one is to that literal name)
                allowed = wildcard_covered(destination, (entry.destination for entry in self.entries
                                                         if entry.grants(permission, principals)))
            else:
                allowed = any(entry.grants(permission, principals) for entry in self.entries
                              if destination_matches(destination, entry.destination))
        if len(self._cache) < _CACHE_LIMIT:
            self._cache[key] = allowed
        return allowed

    def check(self, login: str | None, permission: Permission, destination: str, origin: str = "") -> bool:
        """:meth:`permits`, logging and counting a refusal (the one place refusals are counted)."""
        if self.permits(login, permission, destination):
            return True
        self.denied.labels(permission).inc()
        origin = origin or "?"
        count = self._count_refusal(origin)
        if count > REFUSALS_LOGGED:
            if count == REFUSALS_LOGGED + 1:
                self.log.warn(
                    "authorization denied: more than {limit} refusals from {origin} within {window:g}s: the "
                    "others of these {window:g}s are counted in jmsgateway_authorization_denied_total, not logged",
                    limit=REFUSALS_LOGGED, origin=origin, window=REFUSAL_WINDOW)
            return False
        who = f"login {login!r}" if login is not None else "an anonymous connection"
        shown = destination if len(destination) <= LOGGED_NAME else (
            f"{destination[:LOGGED_NAME]}... ({len(destination)} characters)")
        self.log.warn("authorization denied: {who} from {origin} may not {permission} {destination}",
                      who=who, origin=origin, permission=permission, destination=shown)
        return False

    def _count_refusal(self, origin: str) -> int:
        """The refusals from ``origin`` in the current log window, this one included."""
        now = self._clock()
        if now - self._window_start >= REFUSAL_WINDOW or len(self._logged) >= 10_000:
            self._window_start = now
            self._logged = {}
        count = self._logged.get(origin, 0) + 1
        self._logged[origin] = count
        return count


def build_authorizer(auth: Any, raw_entries: list[Any], path: str = "", *, has_users: bool = True,
                     registry: CollectorRegistry | None = None) -> DestinationAuthorizer:
    """The authorizer for ``[auth]`` (its ``groups``) and ``[[authorization]]``; ConfigError on a bad entry,
    or on entries without ``[auth]`` logins (an unverified login cannot be authorized)."""
    groups = parse_groups(auth.groups, path)
    entries = parse_authorization(raw_entries, groups, path)
    if entries and not has_users:
        raise ConfigError("[[authorization]] entries need logins: define [auth] users or password_file",
                          path=path, key="authorization")
    return DestinationAuthorizer(entries, groups, registry)
