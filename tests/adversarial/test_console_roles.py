"""The console and admin API under ``[admin] roles`` (viewer, operator, administrator, and a login without
a role under ``default_role = "none"``), its Host and Origin checks with ``[auth]``, and secrets kept
out of every page and the log, as the security contract of issue 33 says.

Plain HTTP requests (http.client) against the contract gateway; STOMP traffic with stomp.py.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest

from tests.adversarial.attack import UPSTREAM_SECRET, allowed, api, http_call, pending_bodies
from tests.adversarial.conftest import Secured
from tests.support.stomp_clients import Client

OPERATORS = ("alice", "bob", "carol", "eve")


def uid() -> str:
    return uuid.uuid4().hex[:8]


def seed(gateway: Secured, *queues: str) -> None:
    root = gateway.client("root")
    try:
        for queue in queues:
            root.send(queue, f"seed of {queue}".encode(), receipt=True, persistent="true")
    finally:
        root.disconnect()


def peer_port(client: Client) -> str:
    return str(client.connection.transport.socket.getsockname()[1])


def connection_ids(port: int) -> dict[str, str]:
    """Local port of each STOMP connection -> its console id, as the administrator sees them."""
    status, rows = api(port, "GET", "connections", "root")
    assert status == 200, rows
    return {row["peer"].rsplit(":", 1)[1]: row["id"] for row in rows}


def listed(document: Any) -> list[str]:
    return [row["name"] for key in ("queues", "topics") for row in document.get(key, [])]


def test_viewer_and_operators_list_only_destinations_they_may_read(contract_gateway: Secured) -> None:
    port, run = contract_gateway.admin_port, uid()
    orders, own, payments = f"/queue/orders.l{run}", f"/queue/alice.l{run}", "/queue/payments"
    seed(contract_gateway, orders, own, payments)
    problems = []
    for login in ("vic", *OPERATORS):
        status, document = api(port, "GET", "destinations", login)
        assert status == 200, (login, status, document)
        for name in listed(document):
            if "temp" not in name and not (allowed(login, "read", name) or allowed(login, "admin", name)):
                problems.append(f"{login} sees {name}")
    assert problems == []
    assert orders in listed(api(port, "GET", "destinations", "vic")[1])  # vic reads /queue/orders.* (audit)
    assert own in listed(api(port, "GET", "destinations", "alice")[1])
    assert {orders, own, payments} <= set(listed(api(port, "GET", "destinations", "root")[1]))


def test_connections_and_durables_of_others_are_listed_to_the_administrator_only(contract_gateway: Secured) -> None:
    port, run = contract_gateway.admin_port, uid()
    client_id, durable = f"alice-cid-{run}", f"alerts-{run}"
    alice = contract_gateway.client("alice", **{"client-id": client_id})
    bob, vic = contract_gateway.client("bob"), contract_gateway.client("vic")
    try:
        alice.subscribe(f"/topic/alerts.l{run}", "d", headers={"activemq.subscriptionName": durable})
        problems = []
        for login in ("alice", "bob", "vic"):
            status, rows = api(port, "GET", "connections", login)
            assert status == 200, (login, rows)
            logins = {row["login"] for row in rows}
            if logins != {login}:
                problems.append(f"{login} sees the connections of {sorted(logins)}")
            durables = json.dumps(api(port, "GET", "destinations", login)[1].get("durables", []))
            if (durable in durables) != (login == "alice"):
                problems.append(f"{login} {'does not see' if login == 'alice' else 'sees'} alice's durable")
        assert problems == []
        assert {"alice", "bob", "vic"} <= {row["login"] for row in api(port, "GET", "connections", "root")[1]}
        assert durable in json.dumps(api(port, "GET", "destinations", "root")[1]["durables"])
        alice.unsubscribe("d", **{"activemq.subscriptionName": durable})
    finally:
        for client in (alice, bob, vic):
            client.disconnect()


def test_bridges_are_shown_to_the_administrator_only(contract_gateway: Secured) -> None:
    port = contract_gateway.admin_port
    for path in ("/bridges", "/console/api/bridges"):
        status, _, body = http_call(port, "GET", path, "root")
        assert status == 200 and b"uplink" in body, (path, status, body[:200])
        for login in ("vic", "alice"):
            status, _, body = http_call(port, "GET", path, login)
            assert status == 403 or b"uplink" not in body, (login, path, status, body[:200])


def test_viewer_actions_are_all_refused(contract_gateway: Secured) -> None:
    """vic reads /queue/orders.*: every action there (and on his own connection, and a bridge) is 403 and
    the queue keeps its message."""
    port, orders = contract_gateway.admin_port, f"/queue/orders.v{uid()}"
    seed(contract_gateway, orders)
    vic = contract_gateway.client("vic")
    try:
        own_id = connection_ids(port)[peer_port(vic)]
        browsed = api(port, "GET", f"browse?destination={orders}", "root")[1]
        [message_id] = [message["message_id"] for message in browsed["messages"]]
        attempts = {
            "purge": {"destination": orders}, "send": {"destination": orders, "body": "by vic"},
            "delete": {"destination": orders, "message_id": message_id}, "move": {"destination": orders},
            "close": {"id": own_id}, "bridge": {"name": "uplink", "action": "pause"},
        }
        answers = {action: api(port, "POST", action, "vic", body)[0] for action, body in attempts.items()}
        answers["POST /bridges/uplink/pause"] = http_call(port, "POST", "/bridges/uplink/pause", "vic")[0]
        assert answers == dict.fromkeys(answers, 403), answers
        assert pending_bodies(port, orders) == [f"seed of {orders}"]
        assert vic.connection.is_connected()
    finally:
        vic.disconnect()


def test_viewer_cannot_browse_messages(contract_gateway: Secured) -> None:
    """Browsing is listed among the operator's actions (browse: read); a viewer is read-only on the
    console's lists and gets 403 for it even where it holds read."""
    port, orders = contract_gateway.admin_port, f"/queue/orders.b{uid()}"
    seed(contract_gateway, orders)
    status, _, body = http_call(port, "GET", f"/console/api/browse?destination={quote(orders)}", "vic")
    assert status == 403 and b"seed of" not in body, (status, body[:200])


def test_a_login_without_a_role_cannot_use_the_console(contract_gateway: Secured) -> None:
    port = contract_gateway.admin_port
    for path in ("/console/api/overview", "/console/api/destinations", "/console/api/connections", "/status"):
        assert http_call(port, "GET", path, "dave")[0] == 403, path
    assert api(port, "POST", "purge", "dave", {"destination": "/queue/payments"})[0] == 403
    assert http_call(port, "GET", "/health")[0] in (200, 503)  # public, no login


@pytest.mark.parametrize(("login", "action", "destination", "expected"), [
    ("alice", "browse", "/queue/orders.o{}", 200),
    ("alice", "browse", "/queue/payments", 403),
    ("alice", "send", "/queue/alice.o{}", 200),
    ("alice", "send", "/queue/payments", 403),
    ("alice", "purge", "/queue/alice.o{}", 200),
    ("bob", "browse", "/queue/orders.o{}", 200),
    ("bob", "send", "/queue/orders.o{}", 200),
    ("bob", "purge", "/queue/orders.o{}", 403),
    ("bob", "delete", "/queue/orders.o{}", 403),
    ("bob", "browse", "/queue/alice.o{}", 403),
    ("carol", "send", "/queue/orders.o{}", 403),
    ("eve", "purge", "/queue/eve.o{}", 200),
    ("eve", "purge", "/queue/alice.o{}", 403),
])
def test_operator_actions_follow_destination_grants(contract_gateway: Secured, login: str, action: str,
                                                   destination: str, expected: int) -> None:
    """An operator acts where it holds the grant the action needs (browse: read; send: write; purge,
    delete: admin) and nowhere else; refusals change nothing; each action is logged with its login."""
    port = contract_gateway.admin_port
    queue = destination.format(uid())
    seed(contract_gateway, queue)
    if action == "browse":
        status, _, body = http_call(port, "GET", f"/console/api/browse?destination={quote(queue)}", login)
    else:
        [message_id] = [m["message_id"] for m in api(port, "GET", f"browse?destination={quote(queue)}",
                                                     "root")[1]["messages"]][-1:]
        payload = {"purge": {"destination": queue}, "send": {"destination": queue, "body": f"sent by {login}"},
                   "delete": {"destination": queue, "message_id": message_id}}[action]
        status, _, body = http_call(port, "POST", f"/console/api/{action}", login, payload)
    assert status == expected, (status, body[:300])
    after = pending_bodies(port, queue) if queue != "/queue/payments" else None
    if expected == 403 and after is not None:
        assert f"seed of {queue}" in after and f"sent by {login}" not in after, after
    if action != "browse":
        time.sleep(0.2)
        lines = [line for line in contract_gateway.process.log().splitlines() if f"'{queue}'" in line
                 and "console:" in line]
        assert lines and all(f"console: {login} " in line for line in lines), lines


def test_operators_close_only_their_own_connections_and_the_administrator_any(contract_gateway: Secured) -> None:
    port = contract_gateway.admin_port
    alice, bob, carol = (contract_gateway.client(login) for login in ("alice", "bob", "carol"))
    try:
        ids = connection_ids(port)
        assert api(port, "POST", "close", "alice", {"id": ids[peer_port(bob)]})[0] == 403
        assert api(port, "POST", "close", "alice", {"id": ids[peer_port(alice)]})[0] == 200
        assert api(port, "POST", "close", "root", {"id": ids[peer_port(carol)]})[0] == 200
        error = carol.error(timeout=10)
        assert error is not None and "closed by an administrator" in error.headers["message"]
        bob.send("/queue/orders.c1", b"bob is still connected", receipt=True)
    finally:
        for client in (alice, bob, carol):
            client.disconnect()


def test_only_the_administrator_controls_bridges(contract_gateway: Secured) -> None:
    port = contract_gateway.admin_port
    for login in OPERATORS:
        assert api(port, "POST", "bridge", login, {"name": "uplink", "action": "pause"})[0] == 403, login
        assert http_call(port, "POST", "/bridges/uplink/pause", login)[0] == 403, login
    assert api(port, "GET", "bridges", "root")[1][0]["state"] == "running"
    assert api(port, "POST", "bridge", "root", {"name": "uplink", "action": "pause"})[0] == 200
    assert api(port, "POST", "bridge", "root", {"name": "uplink", "action": "resume"})[0] == 200


def test_admin_requests_need_an_allowed_host(contract_gateway: Secured) -> None:
    """With [auth] too: a Host not in allowed_hosts (default: the listener's address and the loopback
    names) gets 421 whoever logs in, GET or POST."""
    port, queue = contract_gateway.admin_port, f"/queue/alice.h{uid()}"
    seed(contract_gateway, queue)
    for host in ("attacker.example", "127.0.0.1.attacker.example", "evil"):
        assert http_call(port, "GET", "/status", "root", headers={"Host": f"{host}:{port}"})[0] == 421, host
    status = http_call(port, "POST", "/console/api/purge", "root", {"destination": queue},
                       headers={"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"})[0]
    assert status == 421
    assert pending_bodies(port, queue) == [f"seed of {queue}"]
    for host in ("127.0.0.1", "localhost", "[::1]"):
        assert http_call(port, "GET", "/status", "root", headers={"Host": f"{host}:{port}"})[0] == 200, host


def test_admin_requests_from_a_foreign_origin_are_refused(contract_gateway: Secured) -> None:
    port, queue = contract_gateway.admin_port, f"/queue/alice.g{uid()}"
    seed(contract_gateway, queue)
    assert http_call(port, "GET", "/status", "root", headers={"Origin": "http://attacker.example"})[0] == 403
    assert http_call(port, "GET", "/console/api/destinations", "root",
                     headers={"Origin": f"http://attacker.example:{port}"})[0] == 403
    assert api(port, "POST", "purge", "root", {"destination": queue},
               headers={"Origin": "http://attacker.example"})[0] == 403
    assert pending_bodies(port, queue) == [f"seed of {queue}"]
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        assert http_call(port, "GET", "/status", "root", headers={"Origin": origin})[0] == 200, origin


def test_no_secret_on_any_page_or_in_the_log(contract_gateway: Secured) -> None:
    """The administrator sees every page (bridges included); the upstream passcode is on none, nor in
    the log, nor are the logins' passwords."""
    from tests.adversarial.attack import PASSWORDS

    port = contract_gateway.admin_port
    pages = {path: http_call(port, "GET", path, "root") for path in (
        "/health", "/status", "/bridges", "/bridges/uplink", "/metrics", "/routing", "/console/api/overview",
        "/console/api/bridges", "/console/api/connections", "/console/api/destinations")}
    pages["/health (no login)"] = http_call(port, "GET", "/health")
    secrets = [UPSTREAM_SECRET, *PASSWORDS.values()]
    leaks = [f"{secret} in {page}" for page, (_, _, body) in pages.items() for secret in secrets
             if secret.encode() in body]
    leaks += [f"{secret} in the log" for secret in secrets if secret in contract_gateway.process.log()]
    assert leaks == []
    assert pages["/bridges"][0] == 200 and b"uplink" in pages["/bridges"][2]
