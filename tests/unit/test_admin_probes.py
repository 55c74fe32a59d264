"""The admin endpoint's probes: /livez (the process works) and /readyz (messages move), rendered
against a real Gateway on a MemoryReactorClock, and which probes stay out of the access log."""

from __future__ import annotations

from typing import Any

from gateway.admin.site import AdminSite, admin_resource, admin_site
from tests.support.web_requests import Request
from tests.unit.test_admin import BRIDGES, USERS, Reporting, call, gateway_for


def test_livez_is_200_while_a_broker_is_down_and_readyz_503_names_it() -> None:
    gateway = gateway_for({})
    gateway.connectors["activemq"] = Reporting(False, "retrying, not connected to stomp://127.0.0.1:1")
    site = admin_resource(gateway, gateway.admin)
    code, document = call(site, "GET", "/livez")
    assert (code, document["status"]) == (200, "UP")
    code, document = call(site, "GET", "/readyz")
    assert (code, document["status"]) == (503, "DOWN")
    assert document["reasons"] == ["connector activemq: retrying, not connected to stomp://127.0.0.1:1"]
    assert call(site, "GET", "/health")[0] == 503  # /health as before


def test_readyz_is_200_when_every_part_is_up() -> None:
    gateway = gateway_for({})
    gateway.connectors["activemq"] = Reporting(True, "connected")
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/readyz")
    assert (code, document) == (200, {"status": "UP", "id": gateway.config.id, "reasons": []})


def test_readyz_is_503_before_the_connectors_started_and_livez_200() -> None:
    gateway = gateway_for({})
    gateway.started_at = None
    site = admin_resource(gateway, gateway.admin)
    code, document = call(site, "GET", "/readyz")
    assert code == 503
    assert document["reasons"] == ["gateway: connectors not started yet"]
    code, document = call(site, "GET", "/livez")
    assert (code, document["uptime_seconds"]) == (200, None)


def test_readyz_names_a_failed_and_a_starting_bridge() -> None:
    gateway = gateway_for(BRIDGES)
    statuses = [{"name": "orders-copy", "state": "failed", "last_error": "max retries"},
                {"name": "slow", "state": "starting", "last_error": None}]
    gateway.bridges.status = lambda: statuses
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/readyz")
    assert code == 503
    assert document["reasons"] == ["bridge orders-copy: failed: max retries", "bridge slow: starting"]
    statuses[:] = [{"name": "orders-copy", "state": "paused", "last_error": None}]
    assert call(admin_resource(gateway, gateway.admin), "GET", "/readyz")[0] == 200  # paused: the operator's choice


def test_probes_answer_without_a_login_like_health() -> None:
    gateway = gateway_for(USERS)
    site = admin_resource(gateway, gateway.admin)
    for path in ("/health", "/livez", "/readyz"):
        assert call(site, "GET", path)[0] == 200, path
    assert call(site, "GET", "/status")[0] == 401


def test_probes_need_a_login_when_health_is_not_public() -> None:
    gateway = gateway_for({**USERS, "admin": {"public_health": False}})
    site = admin_resource(gateway, gateway.admin)
    for path in ("/health", "/livez", "/readyz"):
        assert call(site, "GET", path)[0] == 401, path
        assert call(site, "GET", path, login=("bob", "hunter2"))[0] == 200, path


def _logged(site: Any, method: bytes, path: bytes) -> list[str]:
    lines: list[str] = []
    site._logFormatter = lambda timestamp, request: f"{request.method.decode()} {request.path.decode()}"

    class File:
        def write(self, line: str) -> None:
            lines.append(line)

    site.logFile = File()
    request = Request([path])
    request.method = method
    request.path = path
    site.log(request)
    return lines


def test_probes_and_scrapes_stay_out_of_the_access_log() -> None:
    gateway = gateway_for({})
    site = admin_site(gateway, gateway.admin)
    for path in (b"/health", b"/livez", b"/readyz", b"/metrics"):
        assert _logged(site, b"GET", path) == [], path
    assert _logged(site, b"GET", b"/status") != []
    assert _logged(site, b"POST", b"/readyz") != []
    assert isinstance(site, AdminSite)
    site.log_probes = True
    assert _logged(site, b"GET", b"/livez") != []
