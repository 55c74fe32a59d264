"""Management roles: who is asking the admin endpoint, and what their role lets them see and do.

``[admin] roles = { alice = "operator", bob = "viewer", root = "administrator" }``
and ``[admin] default_role`` (``"viewer"``; ``"none"``: a login without a role
may not use the endpoint) give each login one role, as RabbitMQ's management
tags do:

- ``viewer``: reads (GET) what it may read; every action is refused.
- ``operator``: a viewer's view, plus actions on destinations it holds the
  grant for (``[[authorization]]``), and closing its own connections.
- ``administrator``: sees and does everything.

Without ``[auth]`` there are no logins: every request is the anonymous
administrator (as before roles existed).  The login guard's realm
(:mod:`gateway.admin.site`) attaches (:func:`attach`) the :class:`Principal` of each
authenticated request; pages read it with :func:`principal_of`.  The login
comes from the credentials the checkers accepted, never from re-reading the
``Authorization`` header.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Literal

Role = Literal["viewer", "operator", "administrator"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "administrator")
NO_ROLE = "none"
"""``default_role = "none"``: a login without an entry in ``[admin] roles`` is refused (403)."""

TEMPORARY_PREFIXES = ("/temp-queue/", "/temp-topic/", "/remote-temp-queue/", "/remote-temp-topic/")
"""Temporary destinations: their connection's own; the console may not send, move or delete there, and
only an administrator may browse or purge them."""


def is_temporary(destination: str) -> bool:
    """Whether ``destination`` is a temporary destination (its connection's own)."""
    return destination.startswith(TEMPORARY_PREFIXES)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: its login (None without ``[auth]``) and role (None: no role, refused)."""

    login: str | None
    role: Role | None

    @property
    def name(self) -> str:
        """How logs name it."""
        return self.login if self.login is not None else "anonymous"

    @property
    def administrator(self) -> bool:
        return self.role == "administrator"

    @property
    def may_act(self) -> bool:
        """Whether it may do anything but read (an operator or administrator)."""
        return self.role in ("operator", "administrator")

    def owns(self, login: str | None) -> bool:
        """Whether something that belongs to ``login`` (a connection, a durable) is its own."""
        return self.login is not None and login == self.login


ANONYMOUS = Principal(None, "administrator")
"""Every request of an endpoint without ``[auth]``."""

NOBODY = Principal(None, None)
"""A request behind the login guard that no realm vouched for (refused everything)."""


class Roles:
    """The role of each login: ``roles`` by login, else ``default_role`` (``"none"``: no role)."""

    def __init__(self, roles: dict[str, Role], default_role: str = "viewer") -> None:
        self.roles = dict(roles)
        self.default: Role | None = None if default_role == NO_ROLE else _role(default_role)

    def principal(self, login: str) -> Principal:
        return Principal(login, self.roles.get(login, self.default))


def _role(name: str) -> Role:
    for role in ROLES:
        if role == name:
            return role
    raise ValueError(f"no role {name!r}; roles: {', '.join(ROLES)}")


_principals: weakref.WeakKeyDictionary[object, Principal] = weakref.WeakKeyDictionary()


def attach(request: object, principal: Principal) -> None:
    """Say that ``request`` was authenticated as ``principal`` (the login guard's realm does)."""
    _principals[request] = principal


def principal_of(request: object, default: Principal) -> Principal:
    """Who ``request`` is: what :func:`attach` said, else ``default`` (:data:`ANONYMOUS` without
    ``[auth]``, :data:`NOBODY` behind the guard)."""
    return _principals.get(request, default)


class Principals:
    """Who a request is: the principal the login guard attached, else ``default`` (:data:`ANONYMOUS`
    without ``[auth]``, :data:`NOBODY` behind the guard)."""

    def __init__(self, default: Principal = ANONYMOUS) -> None:
        self.default = default

    def of(self, request: object) -> Principal:
        return principal_of(request, self.default)
