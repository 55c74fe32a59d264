"""The admin endpoint's site: the resources of :mod:`gateway.admin.resources` and the console
(:mod:`gateway.admin.console`, at ``/console/``), with access control.

Without ``[auth]`` users anyone who can reach the port may use it (bind it to
127.0.0.1, the default example).  With users, every page needs HTTP Basic
authentication checked by the same ``twisted.cred`` checkers as STOMP logins
(``twisted.web.guard``), restricted to ``[admin] users`` when that is set,
and throttled per client address after failed logins like STOMP CONNECTs
(:mod:`gateway.admin.login_guard`: 429 with ``Retry-After`` while locked out);
``/health`` stays open while ``public_health`` is true.  Before either, every
request passes :class:`~gateway.admin.requests.AdminRequest`'s checks (a
bounded body, no cross-site state change).
"""

from __future__ import annotations

from typing import Any

from twisted.cred.error import Unauthorized
from twisted.cred.portal import IRealm
from twisted.web import http
from twisted.web.guard import BasicCredentialFactory
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site
from zope.interface import implementer

from gateway.admin.console import ConsoleRoot
from gateway.admin.login_guard import LoginGuard
from gateway.admin.requests import AdminRequest
from gateway.admin.resources import AdminRoot
from gateway.admin.settings import AdminSettings

REALM = b"jmsgateway admin"


@implementer(IRealm)
class AdminRealm:
    """Gives an authenticated login the admin resource, if ``allowed`` (empty: everyone) lists it."""

    def __init__(self, resource: Resource, allowed: tuple[str, ...]) -> None:
        self.resource = resource
        self.allowed = frozenset(allowed)

    def requestAvatar(self, avatarId: Any, mind: Any, *interfaces: Any) -> tuple[Any, Resource, Any]:
        if IResource not in interfaces:
            raise NotImplementedError("the admin realm serves web resources only")
        login = avatarId.decode("utf-8", "replace") if isinstance(avatarId, bytes) else str(avatarId)
        if self.allowed and login not in self.allowed:
            raise Unauthorized(f"{login} may not use the admin endpoint")
        return IResource, self.resource, lambda: None


class GuardedRoot(Resource):
    """Everything behind ``guard``, except ``/health`` when it is public."""

    def __init__(self, guard: LoginGuard, health: Resource | None) -> None:
        super().__init__()
        self.guard = guard
        self.health = health

    def getChildWithDefault(self, path: bytes, request: Request) -> Any:
        if path == b"health" and self.health is not None:
            return self.health
        return self.guard.resource_for(request).getChildWithDefault(path, request)

    def render(self, request: Request) -> Any:
        return self.guard.resource_for(request).render(request)


def admin_resource(gateway: Any, settings: AdminSettings) -> Resource:
    """The admin tree for ``gateway``, guarded when ``gateway.portal`` has logins (and throttled by
    ``gateway.login_throttle``, the STOMP listeners' failed-login throttle)."""
    root = AdminRoot(gateway)
    console = ConsoleRoot(gateway, gateway.authorizer)
    console.history.start()
    root.putChild(b"console", console)
    portal = gateway.portal
    if portal is None:
        return root
    guard = LoginGuard(AdminRealm(root, settings.users), list(portal.checkers.values()),
                       [BasicCredentialFactory(REALM)], gateway.login_throttle)
    health = root.children[b"health"] if settings.public_health else None
    return GuardedRoot(guard, health)


class AdminSite(Site):
    """A site whose access log leaves out probes and scrapes (``GET /health``, ``GET /metrics``)."""

    def log(self, request: http.Request) -> None:
        if request.method in (b"GET", b"HEAD") and request.path in (b"/health", b"/metrics"):
            return
        super().log(request)


def admin_site(gateway: Any, settings: AdminSettings) -> Site:
    """The ``twisted.web`` site the admin listeners serve."""
    site = AdminSite(admin_resource(gateway, settings), requestFactory=AdminRequest)
    site.displayTracebacks = False
    site.noisy = False
    return site
