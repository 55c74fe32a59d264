"""Per-login resource limits (``[auth.limits.LOGIN]``): how many STOMP connections a login may hold
open and how many queues it may hold created (Artemis's ``resource-limit-settings``, RabbitMQ's
per-user ``max-connections``).

Owns the limits as configured and their lookup by login; it counts nothing (the STOMP listeners
count connections, the embedded broker queues) and it is replaced whole by a SIGHUP.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.schema import NotNegative, Section

ANY_LOGIN = "*"
"""The ``[auth.limits]`` entry for every login without an entry of its own."""


class LoginLimits(Section):
    """``[auth.limits.LOGIN]``: what one login may hold (unset: no per-login cap)."""

    max_connections: NotNegative | None = None
    """STOMP connections the login may have open at once; a CONNECT past it gets ERROR "connection limit
    reached" (unset: no cap; 0: the login may not connect)."""
    max_queues: NotNegative | None = None
    """Queues the login may hold: those it created (by SEND, SUBSCRIBE or browse to a new queue, virtual
    topics' consumer queues, temporary queues, durable subscriptions) that still exist; a frame that would
    create one more gets ERROR "destination limit reached" (unset: no cap)."""


class LoginQuotas:
    """The configured per-login limits (:class:`LoginLimits` by login, ``"*"`` for the others)."""

    def __init__(self, limits: Mapping[str, LoginLimits] | None = None) -> None:
        self.limits: dict[str, LoginLimits] = dict(limits or {})

    def replace(self, limits: Mapping[str, LoginLimits]) -> None:
        """A reload's limits: they judge the next CONNECT and the next creation (nothing is closed
        or deleted because a login now holds more than its limit)."""
        self.limits = dict(limits)

    def of(self, login: str | None) -> LoginLimits | None:
        """The limits of ``login`` (None: no login, or no entry for it nor ``"*"``)."""
        if login is None:
            return None
        limits = self.limits.get(login)
        return limits if limits is not None else self.limits.get(ANY_LOGIN)

    def max_queues(self, login: str | None) -> int | None:
        """How many queues ``login`` may hold (None: no cap)."""
        limits = self.of(login)
        return None if limits is None else limits.max_queues

    def max_connections(self, login: str | None) -> int | None:
        """How many connections ``login`` may have open (None: no cap)."""
        limits = self.of(login)
        return None if limits is None else limits.max_connections

    def named(self) -> list[str]:
        """The logins configured by name (not ``"*"``): the only ones with a series of their own in
        /metrics, so its labels stay bounded."""
        return sorted(login for login in self.limits if login != ANY_LOGIN)
