"""The console's JSON API in-process: authorization through an injected IAuthorizer, the rate history.

Pages are rendered with Twisted's DummyRequest against a real Gateway on a
MemoryReactorClock (as tests/unit/test_admin.py does); the browser tests
against a real gateway process are tests/integration/test_console.py.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any

from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.web.resource import getChildForRequest
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer
from zope.interface.verify import verifyObject

from gateway.admin.console import ConsoleRoot
from gateway.admin.permissions import PermitAll
from gateway.admin.rates import RateHistory
from gateway.admin.roles import Principal, Role, attach
from gateway.app import build_gateway
from gateway.config import parse_config
from gateway.interfaces import IAuthorizer, Permission
from gateway.message.model import TextMessage
from gateway.stomp.traffic import StompTraffic
from tests.support.web_requests import Request


@implementer(IAuthorizer)
class Grants:
    """``login`` holds exactly the (permission, destination) pairs given; every question is kept,
    and every refusal :meth:`check` reported (with its origin)."""

    enabled = True

    def __init__(self, *grants: tuple[str, Permission, str]) -> None:
        self.grants = set(grants)
        self.asked: list[tuple[str | None, str, str]] = []
        self.refused: list[tuple[str | None, str, str, str]] = []

    def permits(self, login: str | None, permission: Permission, destination: str) -> bool:
        self.asked.append((login, permission, destination))
        return (login or "", permission, destination) in self.grants

    def check(self, login: str | None, permission: Permission, destination: str, origin: str = "") -> bool:
        allowed = self.permits(login, permission, destination)
        if not allowed:
            self.refused.append((login, permission, destination, origin))
        return allowed


def call(resource: Any, method: str, path: str, login: str | None = "alice", body: Any = None,
         args: dict[bytes, list[bytes]] | None = None, role: Role | None = "operator") -> tuple[int, Any]:
    """Render ``method path`` as ``login`` with ``role`` (what the login guard's realm attaches; login None:
    nothing attached, the console's default principal)."""
    request = Request(path.encode().lstrip(b"/").split(b"/"))
    if login is not None:
        attach(request, Principal(login, role))
    request.method = method.encode()
    request.content = BytesIO(json.dumps(body).encode() if body is not None else b"")
    request.args = args or {}
    page = getChildForRequest(resource, request)
    rendered = page.render(request)
    if rendered is not NOT_DONE_YET:
        request.write(rendered)
        request.finish()
    assert request.finished
    return request.responseCode or 200, json.loads(b"".join(request.written))


def gateway_with_queue() -> Any:
    reactor = MemoryReactorClock()
    gateway = build_gateway(parse_config({}, "gw.toml"), reactor)
    gateway.started_at = reactor.seconds()
    for index in range(3):
        gateway.broker.send(TextMessage(destination="/queue/a", message_id=f"ID:a{index}", text=f"a{index}"))
        gateway.broker.send(TextMessage(destination="/queue/b", message_id=f"ID:b{index}", text=f"b{index}"))
    return gateway


def test_permit_all_is_an_authorizer() -> None:
    assert verifyObject(IAuthorizer, PermitAll())
    assert PermitAll().permits(None, "admin", "/queue/anything")
    assert PermitAll().check(None, "admin", "/queue/anything", "the admin console")


def test_actions_need_their_grant_on_the_destination() -> None:
    """An operator's purge and delete need admin, browsing read, a test message write."""
    gateway = gateway_with_queue()
    grants = Grants(("alice", "admin", "/queue/a"), ("alice", "read", "/queue/a"))
    console = ConsoleRoot(gateway, grants)
    code, answer = call(console, "POST", "/api/purge", body={"destination": "/queue/b"})
    assert code == 403 and answer["error"] == "alice does not hold the admin permission on /queue/b"
    assert len(gateway.broker.queues["/queue/b"]) == 3
    code, answer = call(console, "GET", "/api/browse", args={b"destination": [b"/queue/b"]})
    assert code == 403 and "read permission on /queue/b" in answer["error"]
    code, answer = call(console, "POST", "/api/send", body={"destination": "/queue/b", "body": "x"})
    assert code == 403
    assert call(console, "POST", "/api/delete", body={"destination": "/queue/b", "message_id": "ID:b0"})[0] == 403
    assert len(gateway.broker.queues["/queue/b"]) == 3

    code, answer = call(console, "GET", "/api/browse", args={b"destination": [b"/queue/a"]})
    assert code == 200 and [m["body_preview"] for m in answer["messages"]] == ["a0", "a1", "a2"]
    assert call(console, "POST", "/api/delete", body={"destination": "/queue/a", "message_id": "ID:a1"}) == \
        (200, {"ok": True, "result": True})
    assert call(console, "POST", "/api/purge", body={"destination": "/queue/a"}) == (200, {"ok": True, "result": 2})
    assert len(gateway.broker.queues["/queue/a"]) == 0
    assert ("alice", "admin", "/queue/b") in grants.asked and ("alice", "read", "/queue/a") in grants.asked
    # someone else holds nothing
    assert call(console, "POST", "/api/purge", login="bob", body={"destination": "/queue/a"})[0] == 403
    # every refusal went through the authorizer's check (where it is logged and counted), once each
    console_refusals = [("alice", "admin", "/queue/b"), ("alice", "read", "/queue/b"), ("alice", "write", "/queue/b"),
                        ("alice", "admin", "/queue/b"), ("bob", "admin", "/queue/a")]
    assert grants.refused == [(*refusal, "the admin console") for refusal in console_refusals]


def test_the_gateways_authorizer_decides_and_allows_all_without_entries() -> None:
    gateway = gateway_with_queue()
    assert call(ConsoleRoot(gateway, gateway.authorizer), "POST", "/api/purge", login="anyone",
                body={"destination": "/queue/b"}) == (200, {"ok": True, "result": 3})
    assert call(ConsoleRoot(gateway), "POST", "/api/purge", login=None, body={"destination": "/queue/a"})[0] == 200

    reactor = MemoryReactorClock()
    config = parse_config({
        "auth": {"users": {"alice": "secret", "bob": "hunter2"}, "allow_weak_passwords": True},
        "authorization": [{"destination": "/queue/a*", "read": ["*"], "admin": ["alice"]}],
    }, "gw.toml")
    guarded = build_gateway(config, reactor)
    guarded.broker.send(TextMessage(destination="/queue/a", message_id="ID:x", text="x"))
    console = ConsoleRoot(guarded, guarded.authorizer)
    assert call(console, "POST", "/api/purge", login="bob", body={"destination": "/queue/a"})[0] == 403
    assert call(console, "GET", "/api/browse", login="bob", args={b"destination": [b"/queue/a"]})[0] == 200
    assert len(guarded.broker.queues["/queue/a"]) == 1
    assert call(console, "POST", "/api/purge", login="alice", body={"destination": "/queue/a"})[0] == 200
    assert len(guarded.broker.queues["/queue/a"]) == 0


def test_bad_requests_are_named() -> None:
    console = ConsoleRoot(gateway_with_queue())
    assert call(console, "POST", "/api/purge", body={"destination": "/queue/none"})[0] == 404
    assert call(console, "POST", "/api/purge", body=["/queue/a"])[0] == 400
    code, answer = call(console, "POST", "/api/send", body={"destination": "/queue/a", "body": 5})
    assert code == 400 and "'body' must be a string" in answer["error"]
    code, answer = call(console, "POST", "/api/send", body={"destination": "/nowhere/x", "body": "x"})
    assert code == 409 and "unknown destination" in answer["error"]
    code, answer = call(console, "POST", "/api/bridge", body={"name": "none", "action": "stop"}, role="administrator")
    assert code == 404
    assert call(console, "POST", "/api/close", body={"id": "jmsgw-0"}, role="administrator")[0] == 404
    assert call(console, "GET", "/api/nothing")[0] == 404


def test_rate_history_keeps_per_second_rates_of_the_last_minutes() -> None:
    clock, traffic = Clock(), StompTraffic()
    history = RateHistory(clock, traffic, interval=2.0, span=10.0)
    history.start()
    for _ in range(8):
        traffic.received += 20
        traffic.sent += 4
        clock.advance(2.0)
    document = history.document()
    assert len(document["samples"]) == 5  # span / interval
    assert [sample[1:] for sample in document["samples"]] == [[10.0, 2.0]] * 5
    assert history.latest() == {"in": 10.0, "out": 2.0}
    history.stop()


def test_a_standby_refuses_every_action_naming_the_lock() -> None:
    """A standby's store is closed and nothing runs on it: every action answers 503 before it is tried
    (not a 409 from the closed store, nor a purge of the standby's empty view), naming the lock."""
    gateway = gateway_with_queue()
    console = ConsoleRoot(gateway)
    gateway.role.become_standby("/var/lib/jmsgateway/store.db")
    actions = {"purge": {"destination": "/queue/a"}, "delete": {"destination": "/queue/a", "message_id": "ID:a0"},
               "send": {"destination": "/queue/a", "body": "x"}, "move": {"destination": "/queue/a"},
               "create": {"destination": "/queue/new"}, "remove": {"destination": "/queue/b"},
               "close": {"id": "jmsgw-0"}, "bridge": {"name": "b", "action": "stop"}}
    for name, body in actions.items():
        code, answer = call(console, "POST", f"/api/{name}", body=body, role="administrator")
        assert code == 503, (name, code, answer)
        assert answer["error"] == ("this gateway is a standby: another gateway holds the message store's lock "
                                   "(/var/lib/jmsgateway/store.db); act on the active one"), name
    assert len(gateway.broker.queues["/queue/a"]) == 3 and "/queue/new" not in gateway.broker.queues
    assert call(console, "GET", "/api/destinations", role="administrator")[0] == 200  # reading still answers
    gateway.role.become_active("/var/lib/jmsgateway/store.db")
    assert call(console, "POST", "/api/purge", body={"destination": "/queue/a"}, role="administrator") == \
        (200, {"ok": True, "result": 3})
