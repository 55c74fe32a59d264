"""Management roles and ownership in the console (issue 33 #1, #3, #4, #11, #13 and the roles).

A real Gateway on a MemoryReactorClock with ``[auth]`` users, ``[[authorization]]``
entries and ``[admin] roles``; STOMP connections are real sessions over
StringTransport (tests/unit/test_session.py's Peer); pages are rendered through
the real login guard with DummyRequest (HTTP Basic headers) or, for the console
alone, with the principal the guard would attach.
"""

from __future__ import annotations

import base64
import json
from io import BytesIO
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.web.resource import getChildForRequest
from twisted.web.server import NOT_DONE_YET

from gateway.admin.console_views import durable_client_id
from gateway.admin.site import admin_resource
from gateway.app import build_gateway
from gateway.broker.operations import ORIGIN_PROPERTY
from gateway.broker.store.snapshot import durable_key
from gateway.config import parse_config
from gateway.message.model import TextMessage
from tests.support.log_events import logged
from tests.support.web_requests import Request
from tests.unit.test_session import Peer, connect

__all__ = ["logged"]

USERS = {"alice": "s3cret!", "bob": "hunter2", "carol": "c4rol", "root": "r00t", "eve": "ev3"}
ENTRIES = [
    {"destination": "/queue/DLQ.alice.*", "read": ["alice"], "write": ["alice"], "admin": ["alice"]},
    {"destination": "/queue/orders", "read": ["alice", "bob"], "write": ["alice"], "admin": ["alice"]},
    {"destination": "/queue/payments", "read": ["root"], "write": ["root"]},
    {"destination": "/topic/carol.*", "read": ["carol"], "admin": ["carol"]},
    {"destination": "/topic/alerts.*", "read": ["alice"], "admin": ["alice"]},
]
ROLES = {"alice": "operator", "bob": "viewer", "carol": "operator", "root": "administrator"}


def gateway_for(entries: list[dict[str, Any]] | None = None, admin: dict[str, Any] | None = None,
                broker: dict[str, Any] | None = None) -> Any:
    """A gateway built, not started (its SQLite store is not open: ``broker={"persistence": "memory"}`` for a
    test whose console action writes to the store, such as a queue's create)."""
    reactor = MemoryReactorClock()
    config = parse_config({"auth": {"users": USERS, "allow_weak_passwords": True},
                           "authorization": ENTRIES if entries is None else entries,
                           "admin": {"roles": ROLES, **(admin or {})}, **({"broker": broker} if broker else {})},
                          "gw.toml")
    gateway = build_gateway(config, reactor)
    gateway.started_at = reactor.seconds()
    return gateway


def basic(login: str, password: str, padded: bool = True) -> bytes:
    token = base64.b64encode(f"{login}:{password}".encode())
    return b"Basic " + (token if padded else token.rstrip(b"="))


def call(site: Any, method: str, path: str, login: str | None, body: Any = None, *, padded: bool = True,
         args: dict[bytes, list[bytes]] | None = None) -> tuple[int, Any]:
    """``method path`` on the guarded admin site as ``login`` (its password from USERS)."""
    request = Request(path.encode().lstrip(b"/").split(b"/"))
    request.method = method.encode()
    request.path = request.uri = path.encode()
    request.args = args or {}
    request.content = BytesIO(json.dumps(body).encode() if body is not None else b"")
    if login is not None:
        request.requestHeaders.addRawHeader(b"authorization", basic(login, USERS[login], padded))
    rendered = getChildForRequest(site, request).render(request)
    if rendered is not NOT_DONE_YET:
        request.write(rendered)
        request.finish()
    assert request.finished, f"{method} {path} did not finish"
    raw = b"".join(request.written)
    return request.responseCode or 200, json.loads(raw) if raw.startswith((b"{", b"[")) else raw


def stomp(gateway: Any, login: str, **headers: str) -> Peer:
    peer = Peer(gateway.factory)
    frame = connect(peer, login=login, passcode=USERS[login], **headers)
    assert frame.command == "CONNECTED", frame
    return peer


def session_id(peer: Peer) -> str:
    assert peer.protocol.session is not None
    return str(peer.protocol.session.session_id)


# -- #1: "move to origin" needs write on the origin -----------------------------------


def dead_letter(gateway: Any, dlq: str, origin: str, message_id: str = "ID:dead") -> None:
    gateway.broker.send(TextMessage(destination=dlq, message_id=message_id, text="pay me",
                                    properties={ORIGIN_PROPERTY: origin}))


def test_move_to_origin_needs_write_on_the_origin() -> None:
    gateway = gateway_for()
    site = admin_resource(gateway, gateway.admin)
    dead_letter(gateway, "/queue/DLQ.alice.x", "/queue/payments")
    code, answer = call(site, "POST", "/console/api/move", "alice", {"destination": "/queue/DLQ.alice.x"})
    assert code == 403 and answer["error"] == "alice does not hold the write permission on /queue/payments"
    assert "/queue/payments" not in gateway.broker.queues or len(gateway.broker.queues["/queue/payments"]) == 0
    assert len(gateway.broker.queues["/queue/DLQ.alice.x"]) == 1  # stays where it was
    # one message the mover may write back moves; the refused one does not go with it
    dead_letter(gateway, "/queue/DLQ.alice.x", "/queue/orders", "ID:ok")
    code, answer = call(site, "POST", "/console/api/move", "alice",
                        {"destination": "/queue/DLQ.alice.x", "message_ids": ["ID:ok"]})
    assert (code, answer) == (200, {"ok": True, "result": 1})
    assert [m.message_id for m in gateway.broker.queues["/queue/orders"].messages()] == ["ID:ok"]
    # an administrator may move it back
    assert call(site, "POST", "/console/api/move", "root", {"destination": "/queue/DLQ.alice.x"})[0] == 200
    assert len(gateway.broker.queues["/queue/payments"]) == 1


# -- #3: temporary destinations ---------------------------------------------------------


def test_temporary_destinations_are_refused_but_browse_and_purge_for_an_administrator() -> None:
    gateway = gateway_for(entries=[])  # no entries: every grant is open, the roles and ownership still hold
    site = admin_resource(gateway, gateway.admin)
    alice = stomp(gateway, "alice")
    alice.send("SUBSCRIBE", {"id": "r", "destination": "/temp-queue/replies"})
    temp = next(name for name in gateway.broker.queues if name.startswith("/remote-temp-queue/"))
    gateway.broker.send(TextMessage(destination=temp, message_id="ID:reply", text="the reply"))
    alice.received()
    session = alice.protocol.session
    assert session is not None and "r" in session.subscriptions
    held = len(gateway.broker.queues[temp]) + gateway.broker.queues[temp].inflight
    for login in ("carol", "alice"):  # operators, even of the owning login
        assert call(site, "GET", "/console/api/browse", login, args={b"destination": [temp.encode()]})[0] == 403
        for action, body in (("purge", {}), ("send", {"body": "x"}), ("delete", {"message_id": "ID:reply"}),
                             ("move", {})):
            code, answer = call(site, "POST", f"/console/api/{action}", login, {"destination": temp, **body})
            assert code == 403 and "temporary destination" in answer["error"], (login, action, answer)
        names = [q["name"] for q in call(site, "GET", "/console/api/destinations", login)[1]["queues"]]
        assert temp not in names
    for action, body in (("send", {"body": "x"}), ("delete", {"message_id": "ID:reply"}), ("move", {})):
        assert call(site, "POST", f"/console/api/{action}", "root", {"destination": temp, **body})[0] == 403
    assert len(gateway.broker.queues[temp]) + gateway.broker.queues[temp].inflight == held
    assert call(site, "GET", "/console/api/browse", "root", args={b"destination": [temp.encode()]})[0] == 200
    assert call(site, "POST", "/console/api/purge", "root", {"destination": temp})[0] == 200
    # a dead letter whose origin is a temporary destination is not moved there
    dead_letter(gateway, "/queue/DLQ.x", temp)
    assert call(site, "POST", "/console/api/move", "root", {"destination": "/queue/DLQ.x"})[0] == 403


# -- #11: closing a connection ------------------------------------------------------------


def test_an_operator_closes_only_its_own_connections_an_administrator_any() -> None:
    gateway = gateway_for()
    site = admin_resource(gateway, gateway.admin)
    root, alice = stomp(gateway, "root"), stomp(gateway, "alice")
    for login in ("bob", "alice"):  # a viewer, an operator: not root's connection
        code, answer = call(site, "POST", "/console/api/close", login, {"id": session_id(root)})
        assert code == 403, answer
    assert not root.closed
    assert call(site, "POST", "/console/api/close", "bob", {"id": session_id(alice)})[0] == 403
    assert call(site, "POST", "/console/api/close", "alice", {"id": session_id(alice)})[0] == 200
    assert alice.closed
    assert call(site, "POST", "/console/api/close", "root", {"id": session_id(root)})[0] == 200
    assert root.closed


# -- #13: the acting login in the log, whatever the token's padding ----------------------




@pytest.mark.parametrize("padded", [True, False])
def test_actions_are_logged_with_the_login_even_with_an_unpadded_token(logged: list[str], padded: bool) -> None:
    gateway = gateway_for(entries=[])
    site = admin_resource(gateway, gateway.admin)
    gateway.broker.send(TextMessage(destination="/queue/a", message_id="ID:1", text="x"))
    assert base64.b64encode(b"alice:s3cret!").endswith(b"=")  # the case: a padded token, sent without its "="
    code, answer = call(site, "POST", "/console/api/purge", "alice", {"destination": "/queue/a"}, padded=padded)
    assert (code, answer) == (200, {"ok": True, "result": 1})
    assert "console: alice purged '/queue/a' (1 messages)" in logged
    assert not any("anonymous" in line for line in logged)
    code, _ = call(site, "POST", "/console/api/purge", "bob", {"destination": "/queue/a"}, padded=padded)
    assert code == 403
    assert any(line.startswith("console: bob was refused a purge") for line in logged)


# -- roles -------------------------------------------------------------------------------


def test_a_viewer_reads_what_it_may_read_and_does_nothing() -> None:
    gateway = gateway_for(admin={"default_role": "viewer"})
    site = admin_resource(gateway, gateway.admin)
    for name in ("/queue/orders", "/queue/payments", "/queue/DLQ.alice.x"):
        gateway.broker.send(TextMessage(destination=name, message_id=f"ID:{name}", text="x"))
    bob, root = stomp(gateway, "bob"), stomp(gateway, "root")
    overview = call(site, "GET", "/console/api/overview", "bob")[1]
    assert overview["you"] == {"login": "bob", "role": "viewer"}
    assert (overview["connections"], overview["bridges"]) == (1, [])  # its own; root's is not counted
    assert call(site, "GET", "/console/api/overview", "root")[1]["connections"] == 2
    queues = call(site, "GET", "/console/api/destinations", "bob")[1]["queues"]
    assert [(q["name"], q["actions"]) for q in queues] == [("/queue/orders", [])]
    assert [row["id"] for row in call(site, "GET", "/console/api/connections", "bob")[1]] == [session_id(bob)]
    assert call(site, "GET", "/console/api/bridges", "bob") == (200, [])
    assert call(site, "GET", "/bridges", "bob") == (200, [])
    assert call(site, "GET", "/status", "bob")[1]["bridges"] == []
    assert call(site, "GET", "/console/api/browse", "bob", args={b"destination": [b"/queue/orders"]})[0] == 403
    for action, body in (("purge", {"destination": "/queue/orders"}), ("send", {"destination": "/queue/orders"}),
                         ("close", {"id": session_id(bob)}), ("bridge", {"name": "x", "action": "stop"})):
        code, answer = call(site, "POST", f"/console/api/{action}", "bob", body)
        assert code == 403, (action, answer)
    assert not bob.closed and not root.closed
    assert len(gateway.broker.queues["/queue/orders"]) == 1
    # eve has no entry in roles: the default role (viewer) here
    assert call(site, "GET", "/console/api/overview", "eve")[1]["you"]["role"] == "viewer"


def test_an_operator_acts_by_its_grants_an_administrator_on_everything() -> None:
    gateway = gateway_for()
    site = admin_resource(gateway, gateway.admin)
    for name in ("/queue/orders", "/queue/payments"):
        gateway.broker.send(TextMessage(destination=name, message_id=f"ID:{name}", text="x"))
    queues = {q["name"]: q["actions"] for q in call(site, "GET", "/console/api/destinations", "alice")[1]["queues"]}
    assert queues == {"/queue/orders": ["browse", "send", "purge", "delete", "move", "delete_queue"]}
    assert call(site, "POST", "/console/api/purge", "alice", {"destination": "/queue/payments"})[0] == 403
    assert call(site, "POST", "/console/api/send", "alice", {"destination": "/queue/payments", "body": "x"})[0] == 403
    assert call(site, "POST", "/console/api/purge", "alice", {"destination": "/queue/orders"})[0] == 200
    assert call(site, "POST", "/bridges/none/stop", "alice")[0] == 403
    assert call(site, "POST", "/console/api/bridge", "alice", {"name": "none", "action": "stop"})[0] == 403
    everything = {q["name"] for q in call(site, "GET", "/console/api/destinations", "root")[1]["queues"]}
    assert {"/queue/orders", "/queue/payments"} <= everything
    assert call(site, "POST", "/console/api/purge", "root", {"destination": "/queue/payments"})[0] == 200
    assert call(site, "POST", "/console/api/bridge", "root", {"name": "none", "action": "stop"})[0] == 404


def test_default_role_none_refuses_a_login_without_a_role() -> None:
    gateway = gateway_for(admin={"default_role": "none"})
    site = admin_resource(gateway, gateway.admin)
    for path in ("/status", "/console/api/overview", "/bridges", "/"):
        assert call(site, "GET", path, "eve")[0] == 403, path
    assert call(site, "GET", "/status", "alice")[0] == 200
    assert call(site, "GET", "/health", None)[0] == 200  # public


def test_without_auth_every_request_is_the_anonymous_administrator() -> None:
    reactor = MemoryReactorClock()
    gateway = build_gateway(parse_config({}, "gw.toml"), reactor)
    site = admin_resource(gateway, gateway.admin)
    gateway.broker.send(TextMessage(destination="/queue/a", message_id="ID:1", text="x"))
    assert call(site, "GET", "/console/api/overview", None)[1]["you"] == {"login": None, "role": "administrator"}
    assert call(site, "POST", "/console/api/purge", None, {"destination": "/queue/a"})[0] == 200


# -- #4 (the console's part): durable subscriptions of others ----------------------------


def test_durables_and_client_ids_of_others_are_not_listed() -> None:
    gateway = gateway_for()
    site = admin_resource(gateway, gateway.admin)
    alice = stomp(gateway, "alice", **{"client-id": "alice-app"})
    assert not alice.closed
    carol = stomp(gateway, "carol", **{"client-id": "carol-app"})
    # alice's durable subscription as the broker keeps one (its store does not run on this clock): a queue
    # under the key of (client id, name)
    gateway.broker.send(TextMessage(destination="/queue/stand-in", message_id="ID:1", text="backlog"))
    gateway.broker.durables[durable_key("alice-app", "mine")] = gateway.broker.queues.pop("/queue/stand-in")
    for login in ("carol", "bob"):
        document = call(site, "GET", "/console/api/destinations", login)[1]
        assert document["durables"] == [], login
        connections = call(site, "GET", "/console/api/connections", login)[1]
        assert "alice-app" not in json.dumps(connections) and "alice-app" not in json.dumps(document)
    own = call(site, "GET", "/console/api/destinations", "alice")[1]["durables"]
    assert [row["key"] for row in own] == list(gateway.broker.durables)
    assert call(site, "GET", "/console/api/destinations", "root")[1]["durables"] == own
    assert not carol.closed


@pytest.mark.parametrize("client_id", ["app", "a:b", "a\\b:c", ""])
def test_a_durable_keys_client_id_is_read_back(client_id: str) -> None:
    assert durable_client_id(durable_key(client_id, "name:x")) == client_id


def test_bridge_actions_are_an_administrators_and_logged_with_the_login(logged: list[str]) -> None:
    gateway = build_gateway(parse_config({
        "auth": {"users": USERS, "allow_weak_passwords": True}, "admin": {"roles": ROLES},
        "bridges": [{"name": "copy", "source": {"connector": "embedded", "destination": "/queue/in"},
                     "target": {"connector": "embedded", "destination": "/queue/out"}}]}, "gw.toml"),
        MemoryReactorClock())
    site = admin_resource(gateway, gateway.admin)
    assert call(site, "GET", "/bridges/copy", "alice")[0] == 403
    assert call(site, "POST", "/bridges/copy/pause", "alice")[0] == 403
    assert any(line.startswith("admin: alice was refused POST /bridges/copy/pause") for line in logged)
    code, status = call(site, "POST", "/bridges/copy/pause", "root")
    assert (code, status["name"]) == (200, "copy")
    assert "admin: root did bridge copy: pause" in logged


def test_a_test_message_carries_the_acting_login_as_its_verified_sender() -> None:
    gateway = gateway_for(entries=[])
    site = admin_resource(gateway, gateway.admin)
    forged = {"JMSXUserID": "root", "user-id": "root", "login": "root", "passcode": "r00t", "x": "kept"}
    body = {"destination": "/queue/q", "body": "hi", "persistent": False, "properties": forged}
    code, answer = call(site, "POST", "/console/api/send", "alice", body)
    assert code == 200, answer
    [message] = gateway.broker.queues["/queue/q"].messages()
    assert message.properties == {"JMSXUserID": "alice", "user-id": "alice", "x": "kept"}
