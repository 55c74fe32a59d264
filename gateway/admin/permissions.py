"""Who may do what in the admin console: an :class:`~gateway.interfaces.IAuthorizer`, or everyone.

The console asks the gateway's authorizer (``Gateway.authorizer``: the
``[[authorization]]`` entries, :mod:`gateway.authorization`) before every
action on a destination (``admin``) and before browsing one (``read``), as
the STOMP session does before a SEND or SUBSCRIBE.  Without entries that
authorizer permits everything: whoever passed the admin login (``[auth]``
users, narrowed by ``[admin] users``) may do everything, as in ActiveMQ's
web console.  :class:`PermitAll` is the console's own default when it is
given no authorizer at all.

:func:`require` asks :meth:`~gateway.interfaces.IAuthorizer.check`, not
``permits``: a refusal in the console is logged and counted in
``jmsgateway_authorization_denied_total`` by the authorizer, like one on a
STOMP connection (the console's own log line, ``console: bob was refused a
purge of …``, says which action it was).
"""

from __future__ import annotations

from zope.interface import implementer

from gateway.interfaces import IAuthorizer, Permission


@implementer(IAuthorizer)
class PermitAll:
    """Every login holds every permission on every destination."""

    def permits(self, login: str | None, permission: Permission, destination: str) -> bool:
        return True

    def check(self, login: str | None, permission: Permission, destination: str, origin: str = "") -> bool:
        return True


class Forbidden(Exception):
    """A console user lacks a permission on a destination (HTTP 403)."""

    def __init__(self, login: str | None, permission: Permission, destination: str) -> None:
        who = login if login is not None else "anonymous"
        super().__init__(f"{who} does not hold the {permission} permission on {destination}")
        self.login = login
        self.permission = permission
        self.destination = destination


ORIGIN = "the admin console"
"""Where the authorizer's log says a console refusal came from."""


def require(authorizer: IAuthorizer, login: str | None, permission: Permission, destination: str) -> None:
    """Raise :class:`Forbidden` unless ``login`` holds ``permission`` on ``destination`` (a refusal is
    logged and counted by the authorizer)."""
    if not authorizer.check(login, permission, destination, ORIGIN):
        raise Forbidden(login, permission, destination)
