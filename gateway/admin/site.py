"""The admin endpoint's site: the resources of :mod:`gateway.admin.resources` and the console
(:mod:`gateway.admin.console`, at ``/console/``), with access control.

Without ``[auth]`` users anyone who can reach the port may use it (bind it to
127.0.0.1, the default example).  With users, every page needs HTTP Basic
authentication checked by the same ``twisted.cred`` checkers as STOMP logins
(``twisted.web.guard``), restricted to ``[admin] users`` when that is set,
and throttled per client address after failed logins like STOMP CONNECTs
(:mod:`gateway.admin.login_guard`: 429 with ``Retry-After`` while locked out);
``/health``, ``/livez`` and ``/readyz`` (the probes) stay open while ``public_health`` is true.  Each authenticated
request carries its :class:`~gateway.admin.roles.Principal` (login and
management role, ``[admin] roles``); without users every request is the
anonymous administrator.  Before either, every request passes
:class:`~gateway.admin.requests.AdminRequest`'s checks (allowed Host and
Origin, a bounded body, no cross-site state change).
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
from gateway.admin.hosts import HostPolicy
from gateway.admin.login_guard import LoginGuard
from gateway.admin.logout import LogoutPage
from gateway.admin.metrics import register_operator_metrics
from gateway.admin.observed import ObservedGateway
from gateway.admin.requests import AdminRequest
from gateway.admin.resources import AdminRoot, ErrorPage
from gateway.admin.roles import ANONYMOUS, NOBODY, Principal, Principals, Roles, attach
from gateway.admin.settings import AdminSettings

REALM = b"jmsgateway admin"


class Authenticated(Resource):
    """``resource`` for one authenticated principal: every request through it is attached (:func:`attach`) to
    it (the login the checkers accepted, whatever the ``Authorization`` header's padding); a principal
    without a role gets 403."""

    def __init__(self, resource: Resource, principal: Principal) -> None:
        super().__init__()
        self.resource = resource
        self.principal = principal

    def getChildWithDefault(self, path: bytes, request: Request) -> Any:
        attach(request, self.principal)
        if self.principal.role is None:
            return ErrorPage(403, f"{self.principal.name} has no management role ([admin] roles, default_role)")
        return self.resource.getChildWithDefault(path, request)

    def render(self, request: Request) -> Any:
        attach(request, self.principal)
        if self.principal.role is None:
            return ErrorPage(403, f"{self.principal.name} has no management role").render(request)
        return self.resource.render(request)


@implementer(IRealm)
class AdminRealm:
    """Gives an authenticated login the admin resource as its :class:`Principal` (its role from
    ``roles``), if ``allowed`` (empty: everyone) lists it."""

    def __init__(self, resource: Resource, allowed: tuple[str, ...], roles: Roles | None = None) -> None:
        self.resource = resource
        self.allowed = frozenset(allowed)
        self.roles = roles or Roles({})

    def requestAvatar(self, avatarId: Any, mind: Any, *interfaces: Any) -> tuple[Any, Resource, Any]:
        if IResource not in interfaces:
            raise NotImplementedError("the admin realm serves web resources only")
        login = avatarId.decode("utf-8", "replace") if isinstance(avatarId, bytes) else str(avatarId)
        if self.allowed and login not in self.allowed:
            raise Unauthorized(f"{login} may not use the admin endpoint")
        return IResource, Authenticated(self.resource, self.roles.principal(login)), lambda: None


PROBES = (b"health", b"livez", b"readyz")
"""The pages a load balancer or an orchestrator probes: without a login while ``public_health`` is true."""


class GuardedRoot(Resource):
    """Everything behind ``guard``, except the probes (:data:`PROBES`) given in ``public``."""

    def __init__(self, guard: LoginGuard, public: dict[bytes, Resource] | None = None) -> None:
        super().__init__()
        self.guard = guard
        self.public = public or {}

    def getChildWithDefault(self, path: bytes, request: Request) -> Any:
        page = self.public.get(path)
        if page is not None:
            return page
        return self.guard.resource_for(request).getChildWithDefault(path, request)

    def render(self, request: Request) -> Any:
        return self.guard.resource_for(request).render(request)


def admin_resource(gateway: ObservedGateway, settings: AdminSettings) -> Resource:
    """The admin tree for ``gateway``, guarded when ``gateway.portal`` has logins (and throttled by
    ``gateway.login_throttle``, the STOMP listeners' failed-login throttle)."""
    portal = gateway.portal
    register_operator_metrics(gateway)
    principals = Principals(ANONYMOUS if portal is None else NOBODY)
    root = AdminRoot(gateway, principals)
    console = ConsoleRoot(gateway, gateway.authorizer, principals=principals)
    console.history.start()
    root.putChild(b"console", console)
    return guarded_resource(root, portal, settings, gateway.login_throttle)


def guarded_resource(root: Resource, portal: Any, settings: AdminSettings, throttle: Any) -> Resource:
    """``root`` (whose children include the probes) with a ``/logout``, behind HTTP Basic authentication
    by ``portal``'s checkers (throttled by ``throttle``) when there is a portal; the probes stay open
    while ``public_health`` is true."""
    if portal is None:
        root.putChild(b"logout", LogoutPage(has_logins=False))
        return root
    roles = Roles(dict(settings.roles), settings.default_role)
    guard = LoginGuard(AdminRealm(root, settings.users, roles), list(portal.checkers.values()),
                       [BasicCredentialFactory(REALM)], throttle)
    public = {path: root.children[path] for path in PROBES if path in root.children} if settings.public_health else {}
    public[b"logout"] = LogoutPage(has_logins=True, realm=REALM)  # checks no password: never a failed login
    return GuardedRoot(guard, public)


QUIET_PATHS = frozenset(b"/" + path for path in (*PROBES, b"metrics"))


class AdminSite(Site):
    """A site whose access log leaves out probes and scrapes (``GET /health``, ``/livez``, ``/readyz``,
    ``/metrics``) unless ``log_probes``, with the Host and Origin headers it answers (``host_policy``,
    checked by :class:`AdminRequest`)."""

    host_policy: HostPolicy | None = None
    log_probes = False

    def log(self, request: http.Request) -> None:
        if not self.log_probes and request.method in (b"GET", b"HEAD") and request.path in QUIET_PATHS:
            return
        super().log(request)


def admin_site(gateway: ObservedGateway, settings: AdminSettings) -> Site:
    """The ``twisted.web`` site the admin listeners serve."""
    return serving_site(admin_resource(gateway, settings), settings)


def serving_site(resource: Resource, settings: AdminSettings) -> Site:
    """The ``twisted.web`` site serving ``resource`` on ``settings.listen`` (quiet probes, checked
    Host and Origin headers, no tracebacks)."""
    site = AdminSite(resource, requestFactory=AdminRequest)
    site.host_policy = HostPolicy.from_settings(settings.listen, settings.allowed_hosts, settings.allowed_origins)
    site.displayTracebacks = False
    site.noisy = False
    return site
