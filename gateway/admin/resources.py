"""The admin endpoint's HTTP resources (``twisted.web``): JSON pages and control actions.

=====================================  =====================================================
``GET /``                              what is here (id, version, the paths below)
``GET /health``                        200 ``{"status": "UP"}`` or 503 ``"DOWN"``, per part
``GET /livez``                         200 while the process and its reactor work
``GET /readyz``                        200 when connectors, routes and bridges are ready;
                                       503 with the reasons otherwise
``GET /metrics``                       the gateway's Prometheus registry (text format)
``GET /status``                        uptime, role, STOMP connections, connectors, bridges
``GET /bridges``, ``/bridges/NAME``    bridge status (administrators: others see none)
``POST /bridges/NAME/ACTION``          ``start``, ``stop``, ``pause``, ``resume``; answers
                                       with the bridge's status once the action is done
``GET /routing``                       Kafka routing: stopped routes, the producer
``POST /routing/restart[?route=R]``    clear a hard stop (all routing) or one route's stop
                                       (administrators)
``GET /console/``                      the web console (:mod:`gateway.admin.console`); a browser
                                       asking for ``/`` (``Accept: text/html``) is sent there
=====================================  =====================================================

Every document passes :func:`~gateway.security.redaction.redact` on its way out: a
password (in a URL or under a key such as ``password``) shows as ``***``.
Errors are JSON too: ``{"error": "..."}`` with 404 (unknown bridge, route or
path), 405 (an action asked for with GET) or 500 (the action failed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from gateway.admin.health import DOWN, gateway_health, gateway_status
from gateway.admin.observed import ObservedGateway
from gateway.admin.permissions import ConsoleAccess
from gateway.admin.probes import liveness, readiness
from gateway.admin.roles import Principals
from gateway.security.redaction import redact, redact_text

BRIDGE_ACTIONS = ("start", "stop", "pause", "resume")

log = Logger()


def json_body(request: Request, code: int, document: Any, *, secrets_hidden: bool = True) -> bytes:
    """Set ``code`` and the JSON content type on ``request``; the encoded ``document``, with every
    password in it as ``***`` (:func:`~gateway.security.redaction.redact`) unless ``secrets_hidden`` is false
    (a browsed message's own content, shown as it is)."""
    request.setResponseCode(code)
    request.setHeader(b"content-type", b"application/json; charset=utf-8")
    request.setHeader(b"cache-control", b"no-store")
    shown = redact(document) if secrets_hidden else document
    return json.dumps(shown, indent=1, sort_keys=True, default=str).encode("utf-8") + b"\n"


class ErrorPage(Resource):
    """A JSON error for any method."""

    isLeaf = True

    def __init__(self, code: int, message: str, allow: bytes | None = None) -> None:
        super().__init__()
        self.code = code
        self.message = message
        self.allow = allow

    def render(self, request: Request) -> bytes:
        if self.allow is not None:
            request.setHeader(b"allow", self.allow)
        return json_body(request, self.code, {"error": self.message})


class JsonPage(Resource):
    """``GET``: ``(code, document) = produce()`` as JSON."""

    isLeaf = True

    def __init__(self, produce: Callable[[], tuple[int, Any]]) -> None:
        super().__init__()
        self.produce = produce

    def render_GET(self, request: Request) -> bytes:
        code, document = self.produce()
        return json_body(request, code, document)

    def render_HEAD(self, request: Request) -> bytes:
        return self.render_GET(request)


class RequestPage(Resource):
    """``GET``: ``(code, document) = produce(request)`` as JSON."""

    isLeaf = True

    def __init__(self, produce: Callable[[Request], tuple[int, Any]]) -> None:
        super().__init__()
        self.produce = produce

    def render_GET(self, request: Request) -> bytes:
        code, document = self.produce(request)
        return json_body(request, code, document)


class ActionPage(Resource):
    """``POST``: run ``act(request)`` (a Deferred or a value); answer with ``describe()`` once it is done.
    Logged with the acting login: ``admin: root did bridge copy: stop``."""

    isLeaf = True

    def __init__(self, what: str, act: Callable[[Request], Any], describe: Callable[[], Any],
                 principals: Principals | None = None) -> None:
        super().__init__()
        self.what = what
        self.act = act
        self.describe = describe
        self.principals = principals or Principals()

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"allow", b"POST")
        return json_body(request, 405, {"error": f"{self.what} is an action: use POST"})

    def render_POST(self, request: Request) -> Any:
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        who = self.principals.of(request).name

        def done(_: object) -> None:
            log.info("admin: {who} did {what}", who=who, what=self.what)
            if not gone:
                request.write(json_body(request, 200, self.describe()))
                request.finish()

        def failed(failure: Failure) -> None:
            if failure.check(KeyError):  # an unknown name in the request
                error = failure.value
                code, message = 404, str(error.args[0] if error is not None and error.args else error)
            else:
                code, message = 500, f"{self.what} failed: {failure.getErrorMessage()}"
                log.warn("admin: {who}'s {what} failed: {error}", who=who, what=self.what,
                         error=failure.getErrorMessage())
            if not gone:
                request.write(json_body(request, code, {"error": message}))
                request.finish()

        d: Deferred[Any] = maybeDeferred(self.act, request)
        d.addCallbacks(done, failed)
        return NOT_DONE_YET


class AdministratorOnly(Resource):
    """``page`` for an administrator; 403 for anyone else."""

    isLeaf = True

    def __init__(self, principals: Principals, page: Resource, what: str) -> None:
        super().__init__()
        self.principals = principals
        self.page = page
        self.what = what

    def render(self, request: Request) -> Any:
        principal = self.principals.of(request)
        if not principal.administrator:
            log.info("admin: {who} was refused: may not {what} (administrators only)", who=principal.name,
                     what=self.what)
            return json_body(request, 403, {"error": f"{principal.name} may not {self.what} (administrators only)"})
        return self.page.render(request)


class BridgesPage(Resource):
    """``/bridges``: every bridge (none for a non-administrator); ``/bridges/NAME`` one;
    ``/bridges/NAME/ACTION`` control (administrators only)."""

    def __init__(self, service: Any, principals: Principals) -> None:
        super().__init__()
        self.service = service
        self.principals = principals

    def render_GET(self, request: Request) -> bytes:
        shown = self.service.status() if self.principals.of(request).administrator else []
        return json_body(request, 200, shown)

    def getChild(self, path: bytes, request: Request) -> Resource:
        principal = self.principals.of(request)
        if not principal.administrator:
            log.info("admin: {who} was refused {method} {path}: bridges are administrators' only",
                     who=principal.name, method=request.method.decode("latin-1"),
                     path=request.path.decode("utf-8", "replace"))
            return ErrorPage(403, f"{principal.name} may not see or control bridges (administrators only)")
        name = path.decode("utf-8", "replace")
        try:
            bridge = self.service.bridge(name)
        except KeyError as error:
            return ErrorPage(404, str(error.args[0]))
        return BridgePage(bridge, self.principals)


class BridgePage(Resource):
    """One bridge: its status, and its actions as children."""

    def __init__(self, bridge: Any, principals: Principals | None = None) -> None:
        super().__init__()
        self.bridge = bridge
        self.principals = principals or Principals()

    def render_GET(self, request: Request) -> bytes:
        return json_body(request, 200, self.bridge.status())

    def getChild(self, path: bytes, request: Request) -> Resource:
        action = path.decode("utf-8", "replace")
        if action not in BRIDGE_ACTIONS:
            return ErrorPage(404, f"no bridge action {action!r}; actions: {', '.join(BRIDGE_ACTIONS)}")
        return ActionPage(f"bridge {self.bridge.name}: {action}", lambda _: getattr(self.bridge, action)(),
                          self.bridge.status, self.principals)


class RoutingPage(Resource):
    """``/routing``: the Kafka router's status; ``/routing/restart`` clears stops."""

    def __init__(self, router: Any, principals: Principals) -> None:
        super().__init__()
        self.router = router
        self.putChild(b"restart", AdministratorOnly(
            principals, ActionPage("routing restart", self._restart, router.status, principals), "restart routing"))

    def render_GET(self, request: Request) -> bytes:
        return json_body(request, 200, self.router.status())

    def _restart(self, request: Request) -> None:
        routes = request.args.get(b"route") if request.args else None
        if not routes:
            self.router.restart()
            return
        for raw in routes:
            route = raw.decode("utf-8", "replace")
            if route not in {r.name for r in self.router.config.routes}:
                raise KeyError(f"no route {route!r} (routes: {', '.join(r.name for r in self.router.config.routes)})")
            self.router.restart(route)


class MetricsPage(Resource):
    """``GET /metrics``: ``registry`` in the Prometheus text format (OpenMetrics when the
    scraper asks for it), collected on the reactor thread that owns the numbers; a password in a
    label value shows as ``***``."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render_GET(self, request: Request) -> bytes:
        accept = request.getHeader(b"accept")
        encoder, content_type = choose_encoder(accept.decode("latin-1") if accept else "")
        request.setHeader(b"content-type", content_type.encode("ascii"))
        body: bytes = encoder(self.registry)
        return redact_text(body.decode("utf-8")).encode("utf-8")


NAMED_BY_DESTINATION = ("queues", "topics", "paging")
"""The parts of a connector's status (the embedded broker's) keyed by destination name."""


def status_shown(status: Any, visible: Callable[[str], bool]) -> Any:
    """A connector's ``/status`` part as a non-administrator sees it: only the destinations
    ``visible`` says it may read or administer (docs/admin.md, roles), no durable subscriptions (their
    keys hold other logins' client ids; the console lists a login its own), no queue counts per login."""
    if not isinstance(status, dict):
        return status
    shown = dict(status)
    for key in NAMED_BY_DESTINATION:
        if isinstance(shown.get(key), dict):
            shown[key] = {name: value for name, value in shown[key].items() if visible(name)}
    if isinstance(shown.get("durables"), dict):
        shown["durables"] = {}
    limits = shown.get("limits")
    if isinstance(limits, dict) and "logins" in limits:  # (other logins' names and counts: administrators only)
        shown["limits"] = {**limits, "logins": {}}
    memory = shown.get("memory")
    if isinstance(memory, dict) and isinstance(memory.get("blocked"), list):
        shown["memory"] = {**memory, "blocked": [name for name in memory["blocked"] if visible(str(name))]}
    return shown


class AdminRoot(Resource):
    """``/``: the index, with the pages above as children."""

    def __init__(self, gateway: ObservedGateway, principals: Principals | None = None) -> None:
        super().__init__()
        self.gateway = gateway
        self.principals = principals = principals or Principals()
        clock = gateway.reactor

        access = ConsoleAccess(gateway.authorizer)

        def status(request: Request) -> tuple[int, Any]:
            document = gateway_status(gateway, clock.seconds())
            principal = principals.of(request)
            if not principal.administrator:
                document["bridges"] = []
                document["stomp_connections_by_login"] = {}  # (other logins' names: administrators only)
                for name, connector in document["connectors"].items():
                    document["connectors"][name] = status_shown(connector, lambda d: access.visible(principal, d))
            return 200, document

        def health() -> tuple[int, Any]:
            document = gateway_health(gateway.config.id, gateway.connectors, gateway.bridges.status())
            if gateway.role.standby:  # (nothing runs: its connectors' health says nothing)
                document.update(status=DOWN, role=gateway.role.role, reason="standby")
            return (503 if document["status"] == DOWN else 200), document

        self.putChild(b"health", JsonPage(health))
        self.putChild(b"livez", JsonPage(lambda: liveness(gateway, clock.seconds())))
        self.putChild(b"readyz", JsonPage(lambda: readiness(gateway)))
        self.putChild(b"status", RequestPage(status))
        self.putChild(b"metrics", MetricsPage(gateway.registry))
        self.putChild(b"bridges", BridgesPage(gateway.bridges, principals))
        if gateway.router is not None:
            self.putChild(b"routing", RoutingPage(gateway.router, principals))
        else:
            self.putChild(b"routing", ErrorPage(404, "no Kafka routing is configured ([routing])"))

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"":
            return self
        return ErrorPage(404, f"no such page: /{path.decode('utf-8', 'replace')} (see /)")

    def render_GET(self, request: Request) -> bytes:
        from gateway import __version__

        accept = request.getHeader(b"accept") or b""
        if b"text/html" in accept:  # a browser: the console
            request.redirect(b"/console/")
            return b""
        return json_body(request, 200, {
            "id": self.gateway.config.id,
            "version": __version__,
            "pages": {
                "/health": "UP/DOWN per connector and bridge (503 when DOWN)",
                "/livez": "liveness: 200 while the process and its reactor work",
                "/readyz": "readiness: 200 when connectors, routes and bridges are ready, else 503 with reasons",
                "/metrics": "Prometheus metrics",
                "/status": "uptime, STOMP connections, connectors, bridges",
                "/bridges": "bridges; POST /bridges/NAME/{start,stop,pause,resume}",
                "/routing": "Kafka routing; POST /routing/restart[?route=NAME]",
                "/console/": "the web console (HTML; its JSON API under /console/api/)",
            },
        })
