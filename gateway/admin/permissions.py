"""Who may do what in the admin console: the management role, then the destination grants.

:class:`ConsoleAccess` decides every console action on a destination from
the asking :class:`~gateway.admin.roles.Principal`:

- a principal without a role may do nothing, a ``viewer`` only reads;
- a **composite destination** (``/queue/a,/queue/b``) is no console destination: refused to
  everyone (a test message, or a dead letter's origin, sent there would reach every part);
- a **temporary destination** belongs to its connection: nobody may send,
  move or delete there (nor move a dead letter back to one); only an
  administrator may browse or purge one;
- an ``administrator`` with a login may do everything else;
- an ``operator`` (and the anonymous administrator of an endpoint without
  ``[auth]``, as before roles existed) needs the grant of the gateway's
  authorizer (``Gateway.authorizer``: the ``[[authorization]]`` entries,
  :mod:`gateway.security.authorization`) the action needs: browse ``read``, send
  ``write``, purge / delete / move / create and delete a queue ``admin``, and ``write`` on each
  destination a move sends dead letters back to.

A refused grant is asked through
:meth:`~gateway.interfaces.IAuthorizer.check`, not ``permits``: it is logged
and counted in ``jmsgateway_authorization_denied_total`` by the authorizer,
like one on a STOMP connection.  What a page lists uses ``permits`` (no log).
:class:`PermitAll` is the console's own default when it is given no
authorizer at all.
"""

from __future__ import annotations

from typing import Literal

from zope.interface import implementer

from gateway.admin.roles import Principal, is_temporary
from gateway.interfaces import IAuthorizer, Permission
from gateway.message.destinations import is_composite

Action = Literal["browse", "send", "purge", "delete", "move", "create_queue", "delete_queue"]
ACTIONS: dict[Action, Permission] = {"browse": "read", "send": "write", "purge": "admin", "delete": "admin",
                                     "move": "admin", "create_queue": "admin", "delete_queue": "admin"}
"""The grant each action on a destination needs."""

TEMPORARY_ACTIONS: frozenset[Action] = frozenset({"browse", "purge"})
"""What an administrator may do on a temporary destination (nobody else may do anything there)."""

ORIGIN = "the admin console"
"""Where the authorizer's log says a console refusal came from."""


@implementer(IAuthorizer)
class PermitAll:
    """Every login holds every permission on every destination."""

    enabled = False

    def permits(self, login: str | None, permission: Permission, destination: str) -> bool:
        return True

    def check(self, login: str | None, permission: Permission, destination: str, origin: str = "") -> bool:
        return True


class Forbidden(Exception):
    """A console user may not do what it asked (HTTP 403); the message says why."""


class ConsoleAccess:
    """The console's decisions, from the role and ``authorizer``'s grants."""

    def __init__(self, authorizer: IAuthorizer) -> None:
        self.authorizer = authorizer

    def refusal(self, principal: Principal, action: Action, destination: str, *, report: bool = True) -> str | None:
        """Why ``principal`` may not do ``action`` on ``destination``, or None.  ``report``: ask the
        authorizer's ``check`` (a refusal logged and counted), else ``permits`` (for listings)."""
        who = principal.name
        if principal.role is None:
            return f"{who} has no management role ([admin] roles, default_role)"
        if is_composite(destination):
            return (f"{destination} is a composite destination: the console acts on one destination at a time "
                    "(send to each part)")
        if is_temporary(destination):
            if principal.administrator and action in TEMPORARY_ACTIONS:
                return None
            return (f"{destination} is a temporary destination: it belongs to the connection that made it "
                    "(an administrator may only browse or purge it)")
        if not principal.may_act:
            return f"{who} is a {principal.role}: the console is read-only for it"
        if principal.administrator and principal.login is not None:
            return None
        permission = ACTIONS[action]
        if report:
            allowed = self.authorizer.check(principal.login, permission, destination, ORIGIN)
        else:
            allowed = self.authorizer.permits(principal.login, permission, destination)
        return None if allowed else f"{who} does not hold the {permission} permission on {destination}"

    def require(self, principal: Principal, action: Action, destination: str) -> None:
        """Raise :class:`Forbidden` unless ``principal`` may do ``action`` on ``destination``."""
        reason = self.refusal(principal, action, destination)
        if reason is not None:
            raise Forbidden(reason)

    def require_write(self, principal: Principal, destination: str) -> None:
        """Raise :class:`Forbidden` unless ``principal`` may write ``destination`` (a move's target)."""
        self.require(principal, "send", destination)

    def actions(self, principal: Principal, destination: str) -> list[Action]:
        """The actions ``principal`` may do on the existing queue ``destination`` (for the page's buttons;
        creating it is not one)."""
        return [action for action in ACTIONS if action != "create_queue"
                and self.refusal(principal, action, destination, report=False) is None]

    def visible(self, principal: Principal, destination: str) -> bool:
        """Whether a listing shows ``destination`` to ``principal``: an administrator sees everything; others
        see the destinations they may read or administer, never a temporary one."""
        if principal.administrator:
            return True
        if principal.role is None or is_temporary(destination):
            return False
        return any(self.authorizer.permits(principal.login, permission, destination)
                   for permission in ("read", "admin"))
