"""The admin endpoint against an attacker, over real HTTP to a real gateway process (issue 33).

- #8: a DNS-rebinding page (``Host: attacker.example:PORT``, a matching Origin) gets 421, GETs
  included, with and without ``[auth]``; a foreign Origin gets 403.
- #13: an unpadded Basic token logs the action with its login (``twisted.web``'s own
  ``getUser`` cannot decode it), or nothing is done.
- #2: a ``stomp://user:PASS@host`` connector's PASS is on no page and not in the log.
- Roles in the browser (headless Chromium): a viewer sees no action button and no bridges tab;
  an operator sees the buttons of the queues it holds grants on.
"""

from __future__ import annotations

import base64
import http.client
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.browser import Console, chromium
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client

USERS = '--set=auth.users={alice = "s3cret!", bob = "hunter2", root = "r00t"}'
ALLOW_WEAK = "--set=auth.allow_weak_passwords=true"
"""Plain-text test passwords are refused at start without it (docs/security.md, "Passwords")."""
PASSWORDS = {"alice": "s3cret!", "bob": "hunter2", "root": "r00t"}


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None,
            login: str | None = None, padded: bool = True) -> tuple[int, Any]:
    """``method path`` with ``headers`` (a Host header given replaces http.client's own)."""
    headers = dict(headers or {})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    if data is not None:
        headers.setdefault("Content-Type", "application/json")
    if login is not None:
        token = base64.b64encode(f"{login}:{PASSWORDS[login]}".encode()).decode()
        headers["Authorization"] = "Basic " + (token if padded else token.rstrip("="))
    try:
        connection.putrequest(method, path, skip_host="Host" in headers)
        for name, value in headers.items():
            connection.putheader(name, value)
        if data is not None:
            connection.putheader("Content-Length", str(len(data)))
        connection.endheaders(data)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    if response.getheader("content-type", "").startswith("application/json"):
        return response.status, json.loads(raw)
    return response.status, raw.decode("utf-8", "replace")


def admin_gateway(make_gateway: Callable[..., GatewayProcess], extra: str = "", args: list[str] | None = None
                  ) -> tuple[GatewayProcess, int]:
    admin = free_port()
    gateway = make_gateway(f"""
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
{extra}
""", args=args or [])
    gateway.wait_for_log("admin endpoint on tcp:")
    return gateway, admin


@pytest.mark.parametrize("with_users", [False, True], ids=["anonymous", "auth"])
def test_a_rebound_host_is_misdirected_and_a_foreign_origin_refused(make_gateway: Callable[..., GatewayProcess],
                                                                    with_users: bool) -> None:
    extra = 'roles = { alice = "administrator" }' if with_users else ""
    gateway, admin = admin_gateway(make_gateway, extra, [USERS, ALLOW_WEAK] if with_users else [])
    login = "alice" if with_users else None
    queue = f"/queue/rebind.{uuid.uuid4().hex[:6]}"
    client = Client(gateway.address, login=login, passcode=PASSWORDS["alice"] if login else None)
    try:
        client.send(queue, "keep me", receipt=True)
    finally:
        client.disconnect()
    rebound = {"Host": f"attacker.example:{admin}", "Origin": f"http://attacker.example:{admin}"}
    status, answer = request(admin, "POST", "/console/api/purge", rebound, {"destination": queue}, login=login)
    assert status == 421, answer
    for path in ("/status", "/console/api/destinations", "/", "/health"):
        assert request(admin, "GET", path, {"Host": f"attacker.example:{admin}"}, login=login)[0] == 421, path
    # a foreign origin on a GET too
    status, answer = request(admin, "GET", "/status", {"Origin": "http://attacker.example"}, login=login)
    assert status == 403 and "attacker.example" in answer["error"]
    # our own names still answer, and the message is still there
    for host in (f"127.0.0.1:{admin}", f"localhost:{admin}"):
        status, document = request(admin, "GET", "/console/api/destinations", {"Host": host}, login=login)
        assert status == 200
        assert {row["name"]: row["pending"] for row in document["queues"]}[queue] == 1
    own = {"Origin": f"http://127.0.0.1:{admin}"}
    assert request(admin, "POST", "/console/api/purge", own, {"destination": queue}, login=login)[0] == 200
    assert "refused POST /console/api/purge" in gateway.log()


def test_an_unpadded_token_acts_as_its_login(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway, admin = admin_gateway(make_gateway, 'roles = { alice = "operator" }', [USERS, ALLOW_WEAK])
    assert base64.b64encode(b"alice:s3cret!").endswith(b"=")
    queue = f"/queue/unpadded.{uuid.uuid4().hex[:6]}"
    client = Client(gateway.address, login="alice", passcode="s3cret!")
    try:
        client.send(queue, "x", receipt=True)
    finally:
        client.disconnect()
    status, answer = request(admin, "POST", "/console/api/purge", body={"destination": queue}, login="alice",
                             padded=False)
    assert (status, answer) == (200, {"ok": True, "result": 1})
    line = gateway.wait_for_log(f"purged '{queue}'")
    assert "console: alice purged" in line and "anonymous" not in gateway.log()
    # bob (a viewer by default) is refused, and the log names him
    assert request(admin, "POST", "/console/api/purge", body={"destination": queue}, login="bob",
                   padded=False)[0] == 403
    assert "console: bob was refused a purge" in gateway.wait_for_log("console: bob was refused")


def test_a_connector_password_is_on_no_page_and_not_in_the_log(make_gateway: Callable[..., GatewayProcess]) -> None:
    dead = free_port()  # nothing listens: the connector retries, its health and log name the broker
    gateway, admin = admin_gateway(make_gateway, f"""
[connectors.amq]
uri = "stomp://gwuser:Upstr3amPass@127.0.0.1:{dead}"
failure_retry_interval = 200
""")
    gateway.wait_for_log(f"127.0.0.1:{dead}")
    for path in ("/health", "/status", "/bridges", "/metrics", "/console/api/overview"):
        _, document = request(admin, "GET", path)
        text = document if isinstance(document, str) else json.dumps(document)
        assert "Upstr3amPass" not in text, (path, text)
    assert "gwuser:***@127.0.0.1" in json.dumps(request(admin, "GET", "/health")[1])
    assert "Upstr3amPass" not in gateway.log()


def test_the_console_shows_only_the_actions_of_the_role(make_gateway: Callable[..., GatewayProcess]) -> None:
    tag = uuid.uuid4().hex[:6]
    mine, theirs = f"/queue/mine.{tag}", f"/queue/theirs.{tag}"
    gateway, admin = admin_gateway(make_gateway, f"""
roles = {{ alice = "operator", root = "administrator" }}

[[authorization]]
destination = "{mine}"
read = ["alice", "bob"]
write = ["alice", "root"]
admin = ["alice"]

[[authorization]]
destination = "{theirs}"
read = ["root"]
write = ["root"]
admin = ["root"]

[[bridges]]
name = "copy"
source = {{ connector = "embedded", destination = "/queue/in.{tag}" }}
target = {{ connector = "embedded", destination = "{theirs}" }}
""", [USERS, ALLOW_WEAK])
    client = Client(gateway.address, login="root", passcode="r00t")
    try:
        client.send(mine, "m", receipt=True)
        client.send(theirs, "t", receipt=True)
    finally:
        client.disconnect()
    with chromium() as browser:
        for login, role, buttons in (("bob", "viewer", set()),
                                     ("alice", "operator", {"browse", "send", "purge", "delete-queue"})):
            browser.get("about:blank")  # a fresh page for each login
            console = Console(browser, admin, (login, PASSWORDS[login]))
            console.open("destinations")

            def shows_role(role: str = role) -> bool:
                return bool(browser.execute_script("return document.body.dataset.role") == role)

            console.wait(shows_role, what=f"{login}'s role")
            console.open("overview")
            console.open("destinations")
            assert browser.find_elements("css selector", console.row("queue", theirs)) == []
            shown = {button.get_attribute("data-action") for button in
                     browser.find_elements("css selector", f'{console.row("queue", mine)} button')}
            assert shown == buttons, (login, shown)
            send_new = browser.find_elements("css selector", '[data-action="send-new"]')
            assert bool(send_new) is (login == "alice")
            assert not console.find('nav a[data-page="bridges"]').is_displayed()
        browser.get("about:blank")
        console = Console(browser, admin, ("root", "r00t"))
        console.open("bridges")
        console.wait(lambda: browser.execute_script("return document.body.dataset.role") == "administrator",
                     what="the administrator role")
        console.open("overview")
        console.open("bridges")
        assert console.find('nav a[data-page="bridges"]').is_displayed()
        assert browser.find_elements("css selector", f'{console.row("bridge", "copy")} [data-action="stop"]')
