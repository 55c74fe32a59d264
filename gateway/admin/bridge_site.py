"""The admin endpoint of ``jmsgateway bridge`` (the bridges without STOMP listeners), on ``[admin] listen``.

=====================================  =====================================================
``GET /``                              what is here
``GET /livez``, ``/readyz``, ``/health`` the gateway's probes (:mod:`gateway.admin.probes`),
                                       for the bridges' connectors and bridges
``GET /metrics``                       the connectors' and bridges' metrics, build and process
``GET /bridges``, ``/bridges/NAME``    bridge status; ``POST /bridges/NAME/ACTION`` control
=====================================  =====================================================

Built from the gateway's own pages (:mod:`gateway.admin.resources`) and access
control (:mod:`gateway.admin.site`: with ``[auth]`` logins, HTTP Basic
authentication, ``[admin] users`` and ``roles``).  This module owns only the
host those pages read (:class:`BridgeHost`) and the index; no console, no
``/status`` or ``/routing`` (there are no STOMP connections or routes here).
"""

from __future__ import annotations

from typing import Any, cast

from twisted.internet import endpoints
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import Request

from gateway.admin.health import DOWN, gateway_health
from gateway.admin.metrics import register_operator_metrics
from gateway.admin.observed import ObservedGateway
from gateway.admin.probes import liveness, readiness
from gateway.admin.resources import BridgesPage, ErrorPage, JsonPage, MetricsPage, json_body
from gateway.admin.roles import ANONYMOUS, NOBODY, Principals
from gateway.admin.settings import AdminSettings, parse_admin_settings
from gateway.admin.site import guarded_resource, serving_site
from gateway.errors import GatewayError
from gateway.security.auth import build_portal
from gateway.security.login_throttle import build_login_throttle


class BridgeRole:
    """The role the probes ask for: standby while another process holds the bridges' store lock."""

    def __init__(self, bridges: Any) -> None:
        self.bridges = bridges

    @property
    def standby(self) -> bool:
        return bool(self.bridges.standby)


class BridgeHost:
    """What the admin pages read, from a running ``jmsgateway bridge``
    (:class:`~gateway.commands.bridge.StandaloneBridges`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.config = run.config
        self.reactor = run.reactor
        self.bridges = run.bridges
        self.connectors = run.connectors
        self.registry = run.registry
        self.broker = run.connectors.get("embedded")  # (its per-destination metrics, when a bridge uses it)
        self.role = BridgeRole(run.bridges)
        self.portal = build_portal(run.config.auth, run.config.path, run.reactor)
        self.login_throttle = build_login_throttle(run.config.auth, run.reactor, run.config.path, run.registry)

    @property
    def started_at(self) -> float | None:
        started: float | None = self.run.started_at
        return started

    def observed(self) -> ObservedGateway:
        """This host as the probes and operator metrics read a gateway: the parts they use for a
        bridge process are here (no STOMP factory, no router)."""
        return cast("ObservedGateway", self)


class BridgeAdminRoot(Resource):
    """``/``: the index, with the probes, ``/metrics`` and ``/bridges`` as children."""

    def __init__(self, host: BridgeHost, principals: Principals) -> None:
        super().__init__()
        self.host = host
        clock = host.reactor

        def health() -> tuple[int, Any]:
            document = gateway_health(host.config.id, host.connectors, host.bridges.status())
            if host.role.standby:
                document.update(status=DOWN, role="standby", reason="standby")
            return (503 if document["status"] == DOWN else 200), document

        self.putChild(b"health", JsonPage(health))
        observed = host.observed()
        self.putChild(b"livez", JsonPage(lambda: liveness(observed, clock.seconds())))
        self.putChild(b"readyz", JsonPage(lambda: readiness(observed)))
        self.putChild(b"metrics", MetricsPage(host.registry))
        self.putChild(b"bridges", BridgesPage(host.bridges, principals))

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"":
            return self
        return ErrorPage(404, f"no such page: /{path.decode('utf-8', 'replace')} (see /)")

    def render_GET(self, request: Request) -> bytes:
        from gateway import __version__

        return json_body(request, 200, {
            "id": self.host.config.id,
            "version": __version__,
            "what": "jmsgateway bridge (the bridges without STOMP listeners)",
            "pages": {
                "/health": "UP/DOWN per connector and bridge (503 when DOWN)",
                "/livez": "liveness: 200 while the process and its reactor work",
                "/readyz": "readiness: 200 when the connectors and bridges are ready, else 503 with reasons",
                "/metrics": "Prometheus metrics",
                "/bridges": "bridges; POST /bridges/NAME/{start,stop,pause,resume}",
            },
        })


def bridge_admin_resource(host: BridgeHost, settings: AdminSettings) -> Resource:
    """The admin tree of ``jmsgateway bridge``, guarded as the gateway's is."""
    register_operator_metrics(host.observed())
    principals = Principals(ANONYMOUS if host.portal is None else NOBODY)
    return guarded_resource(BridgeAdminRoot(host, principals), host.portal, settings, host.login_throttle)


class BridgeAdmin:
    """Opens ``[admin] listen`` for a running ``jmsgateway bridge`` (nothing when it is empty)."""

    log = Logger()

    def __init__(self, run: Any) -> None:
        self.host = BridgeHost(run)
        self.settings = parse_admin_settings(run.config.admin, run.config.path, has_users=self.host.portal is not None)
        self.ports: list[Any] = []

    def listen(self) -> None:
        """Listen on every endpoint (GatewayError naming the one that fails: a bad string, a port in use)."""
        if not self.settings.listen:
            return
        site = serving_site(bridge_admin_resource(self.host, self.settings), self.settings)
        guarded = "HTTP Basic authentication" if self.host.portal is not None else "NO authentication"
        reactor = self.host.reactor
        for spec in self.settings.listen:
            try:
                endpoint = endpoints.serverFromString(reactor, spec)
            except Exception as error:  # Twisted raises ValueError, KeyError, TypeError ... for a bad spec
                raise GatewayError(f"admin.listen: not a listener endpoint {spec!r}: {error}") from error
            failures: list[Any] = []
            endpoint.listen(site).addCallbacks(self.ports.append, failures.append)
            if failures:  # (a TCP endpoint listens at once: a port in use fails here)
                raise GatewayError(f"cannot listen on {spec!r} (admin): {failures[0].getErrorMessage()}")
            self.log.info("jmsgateway bridge admin endpoint on {endpoint} ({guarded})", endpoint=spec, guarded=guarded)
