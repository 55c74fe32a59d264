"""The admin endpoint, one layer at a time: its settings, the health it derives, its pages and its guard.

The pages are rendered with Twisted's DummyRequest against a real Gateway
(embedded broker, a bridge) built on a MemoryReactorClock; the real HTTP
listener of a real gateway process is tested in tests/integration/test_admin.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.web.resource import getChildForRequest
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from gateway.admin.health import bridge_health, gateway_health
from gateway.admin.settings import parse_admin_settings
from gateway.admin.site import admin_resource
from gateway.app import build_gateway
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.interfaces import Health, IStatusReporting
from tests.support.web_requests import Request

# -- settings -----------------------------------------------------------------


def test_settings_defaults_mean_no_admin_endpoint() -> None:
    settings = parse_admin_settings({})
    assert settings.listen == ()
    assert settings.public_health is True


def test_settings_accept_one_endpoint_or_a_list() -> None:
    assert parse_admin_settings({"listen": "tcp:8161"}).listen == ("tcp:8161",)
    assert parse_admin_settings({"listen": ["tcp:1", "tcp:2"]}).listen == ("tcp:1", "tcp:2")


@pytest.mark.parametrize(
    ("raw", "key", "problem"),
    [
        ({"listn": "tcp:1"}, "admin.listn", "did you mean 'listen'"),
        ({"listen": 8161}, "admin.listen", "expected a string or a list of strings"),
        ({"listen": [""]}, "admin.listen", "expected a string or a list of strings"),
        ({"public_health": "yes"}, "admin.public_health", "expected true or false"),
        ({"users": ["alice"]}, "admin.users", "need [auth] users"),
    ],
)
def test_settings_errors_name_the_key(raw: dict[str, Any], key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_admin_settings(raw, "gw.toml")
    assert caught.value.key == key
    assert problem in str(caught.value)


def test_a_bad_admin_table_stops_the_gateway_config() -> None:
    config = parse_config({"admin": {"users": ["root"]}}, "gw.toml")
    with pytest.raises(ConfigError, match=r"admin\.users"):
        build_gateway(config, MemoryReactorClock())


# -- health -------------------------------------------------------------------


@implementer(IStatusReporting)
class Reporting:
    def __init__(self, up: bool, detail: str) -> None:
        self.verdict = Health(up, detail)

    def health(self) -> Health:
        return self.verdict

    def status(self) -> dict[str, Any]:
        return {"state": "up" if self.verdict.up else "down"}


def test_health_is_down_when_any_connector_is_down() -> None:
    document = gateway_health("gw", {"a": Reporting(True, "fine"), "b": Reporting(False, "retrying: refused")}, [])
    assert document["status"] == "DOWN"
    assert document["components"]["connectors"]["b"] == {"status": "DOWN", "detail": "retrying: refused"}
    assert document["components"]["connectors"]["a"]["status"] == "UP"


def test_a_connector_that_reports_nothing_is_unknown_not_down() -> None:
    document = gateway_health("gw", {"a": Reporting(True, "fine"), "odd": object()}, [])
    assert document["status"] == "UP"
    assert document["components"]["connectors"]["odd"]["status"] == "UNKNOWN"


@pytest.mark.parametrize(
    ("state", "expected"),
    [("running", "UP"), ("paused", "UP"), ("stopped", "UP"), ("starting", "UP"), ("retrying", "DOWN"),
     ("failed", "DOWN")],
)
def test_bridge_health_follows_its_state(state: str, expected: str) -> None:
    error = "target refused" if expected == "DOWN" else None
    health = bridge_health({"name": "b", "state": state, "last_error": error})
    assert health["status"] == expected
    if expected == "DOWN":
        assert health["detail"] == f"{state}: target refused"


def test_a_failed_bridge_makes_the_gateway_down() -> None:
    bridges: list[dict[str, Any]] = [{"name": "ok", "state": "running", "last_error": None},
               {"name": "bad", "state": "failed", "last_error": "max retries"}]
    document = gateway_health("gw", {"a": Reporting(True, "fine")}, bridges)
    assert document["status"] == "DOWN"
    assert document["components"]["bridges"]["bad"]["detail"] == "failed: max retries"


# -- pages ----------------------------------------------------------------------


BRIDGES = {"bridges": [{"name": "orders-copy",
                        "source": {"connector": "embedded", "destination": "/queue/orders"},
                        "target": {"connector": "embedded", "destination": "/queue/copy"}}]}


def gateway_for(toml: dict[str, Any]) -> Any:
    reactor = MemoryReactorClock()
    gateway = build_gateway(parse_config(toml, "gw.toml"), reactor)
    gateway.started_at = reactor.seconds()
    return gateway


def call(resource: Any, method: str, path: str, *, login: tuple[str, str] | None = None,
         args: dict[bytes, list[bytes]] | None = None) -> tuple[int, Any]:
    """Render ``method path`` on ``resource``; (status code, parsed JSON or raw bytes)."""
    request = Request(path.encode().lstrip(b"/").split(b"/"))
    request.method = method.encode()
    request.path = path.encode()
    request.uri = path.encode()
    if args:
        request.args = args
    if login is not None:
        token = base64.b64encode(f"{login[0]}:{login[1]}".encode())
        request.requestHeaders.addRawHeader(b"authorization", b"Basic " + token)
    page = getChildForRequest(resource, request)
    body = page.render(request)
    if body is not NOT_DONE_YET:
        request.write(body)
        request.finish()
    assert request.finished, f"{method} {path} did not finish"
    raw = b"".join(request.written)
    content_type = request.responseHeaders.getRawHeaders(b"content-type", [b""])[0]
    return request.responseCode or 200, json.loads(raw) if content_type.startswith(b"application/json") else raw


def test_health_page_answers_200_with_every_part() -> None:
    gateway = gateway_for({})
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/health")
    assert code == 200
    assert document["status"] == "UP"
    assert document["components"]["connectors"]["embedded"]["status"] == "UP"


def test_health_page_answers_503_when_a_part_is_down() -> None:
    gateway = gateway_for({})
    gateway.connectors["activemq"] = Reporting(False, "retrying, not connected to stomp://127.0.0.1:1")
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/health")
    assert code == 503
    assert document["components"]["connectors"]["activemq"]["detail"].startswith("retrying")


def test_status_page_shows_uptime_connections_connectors_and_bridges() -> None:
    gateway = gateway_for(BRIDGES)
    gateway.reactor.advance(12.5)
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/status")
    assert code == 200
    assert document["uptime_seconds"] == 12.5
    assert document["stomp_connections"] == 0
    assert "queues" in document["connectors"]["embedded"]
    assert [b["name"] for b in document["bridges"]] == ["orders-copy"]


def test_metrics_page_is_the_gateways_registry() -> None:
    gateway = gateway_for({})
    code, body = call(admin_resource(gateway, gateway.admin), "GET", "/metrics")
    assert code == 200
    names = {metric.name for metric in gateway.registry.collect()}
    assert names
    for name in names:
        assert f"# HELP {name}".encode() in body


def test_bridge_pages_name_unknown_bridges_and_refuse_get_for_actions() -> None:
    gateway = gateway_for(BRIDGES)
    site = admin_resource(gateway, gateway.admin)
    code, document = call(site, "GET", "/bridges/orders-cpy")
    assert code == 404
    assert "did you mean 'orders-copy'" in document["error"]
    code, document = call(site, "GET", "/bridges/orders-copy/pause")
    assert code == 405
    assert "use POST" in document["error"]
    code, document = call(site, "POST", "/bridges/orders-copy/explode")
    assert code == 404
    assert "start, stop, pause, resume" in document["error"]
    code, document = call(site, "GET", "/bridges/orders-copy")
    assert (code, document["name"], document["state"]) == (200, "orders-copy", "stopped")


def test_routing_page_without_routing_says_so() -> None:
    gateway = gateway_for({})
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/routing")
    assert code == 404
    assert "[routing]" in document["error"]


def test_unknown_page_is_a_json_404_and_the_index_lists_the_pages() -> None:
    gateway = gateway_for({})
    site = admin_resource(gateway, gateway.admin)
    code, document = call(site, "GET", "/nope")
    assert code == 404
    assert "/nope" in document["error"]
    code, document = call(site, "GET", "/")
    assert code == 200
    assert set(document["pages"]) == {"/health", "/livez", "/readyz", "/metrics", "/status", "/bridges", "/routing",
                                      "/console/"}


# -- the guard ------------------------------------------------------------------

USERS = {"auth": {"users": {"alice": "secret", "bob": "hunter2"}, "allow_weak_passwords": True}}


def test_with_users_every_page_but_health_needs_a_login() -> None:
    gateway = gateway_for(USERS)
    site = admin_resource(gateway, gateway.admin)
    assert call(site, "GET", "/status")[0] == 401
    assert call(site, "GET", "/status", login=("alice", "wrong"))[0] == 401
    assert call(site, "GET", "/status", login=("alice", "secret"))[0] == 200
    assert call(site, "GET", "/", login=("bob", "hunter2"))[0] == 200
    assert call(site, "GET", "/health")[0] == 200
    assert call(site, "POST", "/bridges/x/pause")[0] == 401


def test_health_can_need_a_login_too() -> None:
    gateway = gateway_for({**USERS, "admin": {"public_health": False}})
    site = admin_resource(gateway, gateway.admin)
    assert call(site, "GET", "/health")[0] == 401
    assert call(site, "GET", "/health", login=("bob", "hunter2"))[0] == 200


def test_admin_users_limit_who_may_log_in() -> None:
    gateway = gateway_for({**USERS, "admin": {"users": ["alice"]}})
    site = admin_resource(gateway, gateway.admin)
    assert call(site, "GET", "/status", login=("alice", "secret"))[0] == 200
    assert call(site, "GET", "/status", login=("bob", "hunter2"))[0] == 401


def test_uptime_is_null_before_the_connectors_started() -> None:
    gateway = gateway_for({})
    gateway.started_at = None
    code, document = call(admin_resource(gateway, gateway.admin), "GET", "/status")
    assert (code, document["uptime_seconds"]) == (200, None)


def test_a_bridge_action_answers_with_the_bridge_status_once_done() -> None:
    gateway = gateway_for(BRIDGES)
    code, document = call(admin_resource(gateway, gateway.admin), "POST", "/bridges/orders-copy/stop")
    assert (code, document["name"], document["state"]) == (200, "orders-copy", "stopped")


ROUTING = {
    "connectors": {"kafka": {"uri": "kafka://127.0.0.1:1"}},
    "routing": {"routes": [{"name": "orders", "include": "msg.address == '/queue/orders'", "topic": "orders"}]},
}


def test_routing_page_shows_stops_and_restart_clears_one() -> None:
    gateway = gateway_for(ROUTING)
    site = admin_resource(gateway, gateway.admin)
    gateway.router.stopped_routes["orders"] = "message ID:1: no-key: no CorrelationId"
    code, document = call(site, "GET", "/routing")
    assert code == 200
    assert document["stopped_routes"] == {"orders": "message ID:1: no-key: no CorrelationId"}
    assert document["kafka"]["bootstrap"] == "127.0.0.1:1"
    code, document = call(site, "GET", "/health")
    assert code == 503
    assert "route(s) stopped: orders" in document["components"]["connectors"]["kafka"]["detail"]
    code, document = call(site, "POST", "/routing/restart", args={b"route": [b"ordrs"]})
    assert code == 404
    assert "no route 'ordrs'" in document["error"]
    code, document = call(site, "POST", "/routing/restart", args={b"route": [b"orders"]})
    assert (code, document["stopped_routes"]) == (200, {})
    gateway.router.stopped = "publishing to orders failed hard (TOPIC_AUTHORIZATION_FAILED)"
    code, document = call(site, "POST", "/routing/restart")
    assert (code, document["stopped"]) == (200, None)
