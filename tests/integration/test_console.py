"""The admin console in a real browser (headless Chromium from Debian, Selenium) against a real gateway.

A ``twistd jmsgateway`` process with ``[admin] listen`` and ``[auth]`` users,
real stomp.py traffic, and the console's pages: what they show is what the
JSON API reports, and every action (browse, send, delete, purge, move dead
letters back, close a connection, bridge control) asks for confirmation in
the page and does what it says, checked with stomp.py clients, the JSON API
and a restart on the same SQLite store; a consumer queue the API creates survives kill -9
right after the answer.  Screenshots of each page go to
``$CONSOLE_SCREENSHOTS`` (``docs/console`` to refresh the documentation's)
or to the test's temporary directory.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Console, chromium
from tests.support.gateway import GatewayProcess
from tests.support.kafka import create_topics, kafka_bootstrap, unique_topic  # noqa: F401
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

USERS = '--set=auth.users={alice = "secret", bob = "hunter2"}'
WEAK = "--set=auth.allow_weak_passwords=true"
ALICE = ("alice", "secret")


def api(port: int, path: str, login: tuple[str, str] | None = ALICE, *, body: Any = None,
        headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """GET (or POST ``body`` as JSON) ``/console/api/path``: (status, JSON document)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}/console/api/{path}", data=data,
                                     method="POST" if data is not None else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(login).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw.startswith(b"{") else raw.decode()


def queue_row(port: int, name: str, login: tuple[str, str] = ALICE) -> dict[str, Any]:
    """The API's row for the queue ``name``."""
    rows = {row["name"]: row for row in api(port, "destinations", login)[1]["queues"]}
    assert name in rows, f"{name} not in {sorted(rows)}"
    row: dict[str, Any] = rows[name]
    return row


def screenshots(tmp_path: Path) -> Path:
    return Path(os.environ.get("CONSOLE_SCREENSHOTS", str(tmp_path / "screenshots")))


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def start_gateway(make_gateway: Callable[..., GatewayProcess], extra: str = "") -> tuple[GatewayProcess, int]:
    admin = free_port()
    gateway = make_gateway(f"""
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
users = ["alice"]
roles = {{ alice = "administrator" }}
{extra}
""", args=[USERS, WEAK, "--set=broker.max_redeliveries=1"])
    gateway.wait_for_log("admin endpoint on tcp:")
    return gateway, admin


def test_pages_show_what_the_api_reports(make_gateway: Callable[..., GatewayProcess], browser: Any,
                                         tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    orders, work, source, target = (f"/queue/orders.{tag}", f"/queue/work.{tag}", f"/queue/in.{tag}",
                                    f"/queue/out.{tag}")
    gateway, admin = start_gateway(make_gateway, f"""
[[bridges]]
name = "copy"
source = {{ connector = "embedded", destination = "{source}" }}
target = {{ connector = "embedded", destination = "{target}" }}
""")
    sender = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    worker = Client(gateway.address, "1.1", heartbeats=(4000, 4000), login="bob", passcode="hunter2",
                    headers={"client-id": f"worker-{tag}"})
    listener = Client(gateway.address, "1.2", login="bob", passcode="hunter2")
    try:
        for index in range(7):
            sender.send(orders, f"order {index}", receipt=True, persistent="true")
        for index in range(5):
            sender.send(work, f"job {index}", receipt=True)
        worker.subscribe(work, "w1", ack="client-individual", headers={"activemq.prefetchSize": "2"})
        held = worker.messages(2)
        worker.subscribe(f"/topic/news.{tag}", "news")
        listener.subscribe(target, "copied")
        for index in range(3):
            sender.send(source, f"bridged {index}", receipt=True)
        listener.messages(3)
        console = Console(browser, admin, ALICE)

        # overview: figures as the API has them, and the rate chart drawn from a few samples
        console.open("overview")
        overview = api(admin, "overview")[1]
        assert overview["connections"] == 3
        assert console.text('[data-field="connections"]') == "3"
        assert console.text('[data-field="received"]') == str(overview["messages"]["received"]) == "15"
        assert console.text('[data-field="sent"]') == str(overview["messages"]["sent"])
        assert console.field("connector", "embedded", "status") == "UP"
        assert console.field("bridge", "copy", "state") == "running"
        console.wait(lambda: int(console.find("#rate-chart").get_attribute("data-points") or 0) >= 2, 20,
                     "two samples in the chart")
        console.screenshot(screenshots(tmp_path) / "overview.png")

        # queues: every figure of every queue
        console.open("destinations")
        document = api(admin, "destinations")[1]
        assert {orders, work, source, target} <= {row["name"] for row in document["queues"]}
        for row in document["queues"]:
            for field in ("pending", "consumers", "inflight", "enqueued", "dequeued"):
                assert console.field("queue", row["name"], field) == str(row[field]), (row["name"], field)
        assert queue_row(admin, orders)["pending"] == 7
        assert (queue_row(admin, work)["inflight"], queue_row(admin, work)["pending"]) == (2, 3)
        assert queue_row(admin, target)["dequeued"] == 3
        assert console.field("topic", f"/topic/news.{tag}", "subscribers") == "1"
        console.screenshot(screenshots(tmp_path) / "queues.png")

        # browsing shows the messages and consumes none
        console.click(f'{console.row("queue", orders)} [data-action="browse"]')
        console.wait(lambda: len(browser.find_elements("css selector", "#browse tr[data-message]")) == 7, what="7 rows")
        assert "order 0" in console.text("#browse tr[data-message]:first-child [data-field=\"body\"]")
        assert console.text("#browse tr[data-message]:first-child [data-field=\"type\"]") == "text"
        console.screenshot(screenshots(tmp_path) / "browse.png")
        assert queue_row(admin, orders)["pending"] == 7

        # connections: address, login, version, heart-beats, subscriptions
        console.open("connections")
        rows = api(admin, "connections")[1]
        assert len(rows) == 3
        for row in rows:
            assert console.field("connection", row["id"], "peer") == row["peer"]
            assert console.field("connection", row["id"], "login") == row["login"]
            assert console.field("connection", row["id"], "version") == row["version"]
        by_login_version = {(row["login"], row["version"]): row for row in rows}
        worker_row = by_login_version[("bob", "1.1")]
        beats = worker_row["heartbeat"]  # negotiated: the larger of what client and server ask
        assert beats["send_ms"] >= 4000 and beats["expect_ms"] >= 4000
        assert console.field("connection", worker_row["id"], "heartbeat") == \
            f"send {beats['send_ms']} ms / expect {beats['expect_ms']} ms"
        assert by_login_version[("alice", "1.2")]["heartbeat"] == {"send_ms": 0, "expect_ms": 0}
        subscriptions = console.field("connection", worker_row["id"], "subscriptions")
        assert work in subscriptions and f"/topic/news.{tag}" in subscriptions and "2 unacked" in subscriptions
        assert worker_row["client_id"] == f"worker-{tag}"
        console.screenshot(screenshots(tmp_path) / "connections.png")

        # bridges
        console.open("bridges")
        bridge = api(admin, "bridges")[1][0]
        assert console.field("bridge", "copy", "forwarded") == str(bridge["forwarded"]) == "3"
        assert console.field("bridge", "copy", "source") == f"embedded:{source}"
        console.screenshot(screenshots(tmp_path) / "bridges.png")

        # routes: none configured here
        console.open("routes")
        assert "No Kafka routing is configured" in console.text("#no-routing")

        # the overview follows traffic as it happens: the rate card and the chart's newest sample
        console.open("overview")
        points = int(console.find("#rate-chart").get_attribute("data-points") or 0)
        # the card shows the last 2 s sample and the page refreshes every 2 s: a burst that ended may
        # have been sampled and replaced by a zero before a refresh came under load, so traffic goes on
        # until the page shows it
        deadline, index = time.monotonic() + 30, 0
        while float(console.text('[data-field="rate-in"]')) <= 0:
            assert time.monotonic() < deadline, "no rate in above 0 on the page within 30 s of steady SENDs"
            for _ in range(5):
                sender.send(orders, f"burst {index}")
                index += 1
                time.sleep(0.05)
        assert int(console.find("#rate-chart").get_attribute("data-points") or 0) > points
        assert max(sample[1] for sample in api(admin, "overview")[1]["history"]["samples"]) > 0
        for frame in held:
            worker.ack(frame)
    finally:
        for client in (sender, worker, listener):
            client.disconnect()


def test_actions_confirm_and_do_what_they_say(make_gateway: Callable[..., GatewayProcess], browser: Any,
                                              tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    queue, failing, other = f"/queue/purge.{tag}", f"/queue/fails.{tag}", f"/queue/browse.{tag}"
    dlq = f"/queue/DLQ.fails.{tag}"
    source, target = f"/queue/in.{tag}", f"/queue/out.{tag}"
    gateway, admin = start_gateway(make_gateway, f"""
[[bridges]]
name = "copy"
source = {{ connector = "embedded", destination = "{source}" }}
target = {{ connector = "embedded", destination = "{target}" }}
""")
    text = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    binary = Client(gateway.address, "1.2", login="alice", passcode="secret")
    try:
        for index in range(4):
            text.send(queue, f"to purge {index}", receipt=True, persistent="true")
        text.send(other, "plain text", receipt=True, persistent="true")
        binary.send(other, b"\x00\x01raw\xff", receipt=True, persistent="true")
        text.send(other, "delete me", receipt=True, persistent="true")
        # a message NACKed past max_redeliveries (1) ends in the dead-letter queue
        text.send(failing, "poison", receipt=True, persistent="true")
        nacker = Client(gateway.address, "1.2", login="bob", passcode="hunter2")
        nacker.subscribe(failing, "f", ack="client-individual")
        for _ in range(2):
            nacker.nack(nacker.message())
        nacker.disconnect()
        wait_until(lambda: any(row["name"] == dlq and row["pending"] == 1
                               for row in api(admin, "destinations")[1]["queues"]), what="the dead letter")
        console = Console(browser, admin, ALICE)
        console.open("destinations")

        # browse: text and bytes told apart, headers and bodies shown, nothing consumed
        console.click(f'{console.row("queue", other)} [data-action="browse"]')
        console.wait(lambda: len(browser.find_elements("css selector", "#browse tr[data-message]")) == 3, what="rows")
        browsed = api(admin, f"browse?destination={other}")[1]["messages"]
        assert [m["type"] for m in browsed] == ["text", "bytes", "text"]
        assert browsed[1]["body_preview"] == "\\x00\\x01raw\\xff"  # not UTF-8 text: escaped
        assert browsed[0]["body_preview"] == "plain text"
        for message in browsed:
            row = console.row("message", message["message_id"])
            assert console.text(f'#browse {row} [data-field="type"]') == message["type"]
            assert console.text(f'#browse {row} [data-field="body"]') == message["body_preview"].strip()
        assert "persistent" in console.text(f'#browse {console.row("message", browsed[0]["message_id"])}')

        # delete one message: cancel first (nothing happens), then confirm
        doomed = browsed[2]["message_id"]
        console.click(f'#browse {console.row("message", doomed)} [data-action="delete"]')
        assert doomed in console.confirm(False)
        console.notice("cancelled")
        assert queue_row(admin, other)["pending"] == 3
        console.click(f'#browse {console.row("message", doomed)} [data-action="delete"]')
        console.confirm(True)
        console.notice(f"Deleted {doomed}")
        assert queue_row(admin, other)["pending"] == 2
        reader = Client(gateway.address, "1.2", login="bob", passcode="hunter2")
        reader.subscribe(other, "o")
        assert [frame.body for frame in reader.messages(2)] == [b"plain text", b"\x00\x01raw\xff"]
        assert reader.no_message(0.5), "the deleted message was delivered"

        # send a test message from the page
        console.click('[data-action="send-new"]')
        console.type("#send-destination", other, clear=True)
        console.type("#send-body", "hello from the console", clear=True)
        console.click("#send-submit")
        assert other in console.confirm(True)
        console.notice("Sent ")
        frame = reader.message()
        assert frame.body == b"hello from the console"
        reader.disconnect()

        # purge: the queue is empty, and stays empty after a restart (gone from the store too)
        console.open("destinations")
        console.wait(lambda: console.field("queue", queue, "pending") == "4", what="4 pending")
        console.click(f'{console.row("queue", queue)} [data-action="purge"]')
        assert "4 pending" in console.confirm(True, screenshots(tmp_path) / "confirm.png")
        console.notice(f"Purged {queue}: 4 message(s)")
        assert queue_row(admin, queue)["pending"] == 0
        console.wait(lambda: console.field("queue", queue, "pending") == "0", what="0 pending on the page")

        # the dead letter goes back to its queue and is delivered there
        assert console.field("queue", dlq, "name").startswith(dlq) and "DLQ" in console.field("queue", dlq, "name")
        console.click(f'{console.row("queue", dlq)} [data-action="move"]')
        console.confirm(True)
        console.notice("Moved 1 message(s)")
        assert queue_row(admin, dlq)["pending"] == 0
        assert queue_row(admin, failing)["pending"] == 1
        console.screenshot(screenshots(tmp_path) / "send.png")

        # bridge control from the bridges page
        console.open("bridges")
        console.click(f'{console.row("bridge", "copy")} [data-action="pause"]')
        console.confirm(True)
        console.notice("Bridge copy is paused")
        assert api(admin, "bridges")[1][0]["state"] == "paused"
        console.click(f'{console.row("bridge", "copy")} [data-action="resume"]')
        console.confirm(True)
        console.notice("Bridge copy is running")

        # close a connection: its client gets an ERROR and is disconnected; the other stays
        console.open("connections")
        port = binary.connection.transport.socket.getsockname()[1]
        victim = next(row for row in api(admin, "connections")[1] if row["peer"].endswith(f":{port}"))
        console.click(f'{console.row("connection", victim["id"])} [data-action="close"]')
        console.confirm(True)
        console.notice(f"Closed {victim['id']}")
        error = binary.error()
        assert error is not None and "closed by an administrator" in error.headers["message"]
        wait_until(binary.listener.disconnected.is_set, what="the closed client's disconnect")
        assert victim["id"] not in {row["id"] for row in api(admin, "connections")[1]}
        text.send(queue, "still connected", receipt=True, persistent="true")

        log = gateway.log()
        for line in (f"console: alice purged '{queue}' (4 messages)",
                     f"console: alice deleted message '{doomed}'",
                     f"console: alice sent a test message to '{other}'",
                     f"console: alice moved dead letters of '{dlq}'",
                     f"console: alice closed STOMP connection {victim['id']}",
                     "console: alice asked bridge 'copy' to pause"):
            assert line in log, line
    finally:
        text.disconnect()
        binary.disconnect()

    # after a restart on the same store: the purge and the move held
    gateway.restart()
    wait_until(lambda: _listening(admin), what="the admin endpoint after the restart")
    assert queue_row(admin, queue)["pending"] == 1  # "still connected" only
    assert all(row["pending"] == 0 for row in api(admin, "destinations")[1]["queues"] if row["name"] == dlq)
    consumer = Client(gateway.address, "1.2", login="bob", passcode="hunter2")
    try:
        consumer.subscribe(failing, "again")
        frame = consumer.message()
        assert frame.body == b"poison"
        assert "original-destination" not in frame.headers and frame.headers.get("redelivered") != "true"
    finally:
        consumer.disconnect()


def _listening(port: int) -> bool:
    try:
        return api(port, "overview")[0] == 200
    except OSError:
        return False


def test_a_consumer_queue_the_console_creates_survives_kill_9_right_after_the_answer(
        make_gateway: Callable[..., GatewayProcess]) -> None:
    """A virtual topic's consumer queue created through the console, the gateway killed (-9) the moment the
    answer's first bytes arrive, three times: after each restart every queue made so far exists and takes
    its copy of a topic message (the console answers once the queue's record is stored, as a SUBSCRIBE
    that makes one is receipted)."""
    gateway, admin = start_gateway(make_gateway)
    topic = f"VirtualTopic.made{uuid.uuid4().hex[:6]}"
    made: list[str] = []
    for group in range(3):
        queue = f"/queue/Consumer.G{group}.{topic}"
        body = json.dumps({"destination": queue}).encode()
        request = (f"POST /console/api/create HTTP/1.1\r\nHost: 127.0.0.1:{admin}\r\n"
                   "Authorization: Basic " + base64.b64encode(b"alice:secret").decode() + "\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        with socket.create_connection(("127.0.0.1", admin), timeout=10) as http:
            http.sendall(request)
            answer = http.recv(65536)
            gateway.kill()
        assert answer.startswith(b"HTTP/1.1 200"), answer
        made.append(queue)
        gateway.start()
        gateway.wait_for_log("admin endpoint on tcp:")
        client = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
        try:
            client.send(f"/topic/{topic}", f"after {group}", receipt=True, persistent="true")
        finally:
            client.disconnect()
        assert [queue_row(admin, queue)["pending"] for queue in made] == list(range(group + 1, 0, -1))


def test_actions_refuse_cross_site_and_form_posts(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway, admin = start_gateway(make_gateway)
    queue = f"/queue/keep.{uuid.uuid4().hex[:6]}"
    client = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    try:
        client.send(queue, "keep me", receipt=True, persistent="true")
        # another site's page: a form post (no JSON type, no X-Requested-With), or fetch from its origin
        form = urllib.request.Request(f"http://127.0.0.1:{admin}/console/api/purge",
                                      data=b"destination=" + queue.encode(), method="POST")
        form.add_header("Content-Type", "application/x-www-form-urlencoded")
        form.add_header("Authorization", "Basic " + base64.b64encode(b"alice:secret").decode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(form, timeout=10)
        assert refused.value.code == 403
        status, answer = api(admin, "purge", body={"destination": queue}, headers={"Origin": "http://evil.example"})
        assert status == 403 and "origin" in answer["error"]
        # no login, a login not in [admin] users
        assert api(admin, "purge", None, body={"destination": queue})[0] == 401
        assert api(admin, "purge", ("bob", "hunter2"), body={"destination": queue})[0] == 401
        assert queue_row(admin, queue)["pending"] == 1
        # a bad request is an error, not a traceback
        assert api(admin, "purge", body={"destination": "/queue/none"})[0] == 404
        assert api(admin, "purge", body={})[0] == 400
        assert api(admin, "move", body={"destination": queue})[0] == 409
        assert api(admin, "purge")[0] == 405
        # a browser asking for the admin root is sent to the console, which ships its own pages
        index = urllib.request.Request(f"http://127.0.0.1:{admin}/", headers={
            "Accept": "text/html", "Authorization": "Basic " + base64.b64encode(b"alice:secret").decode()})
        with urllib.request.urlopen(index, timeout=10) as response:
            page = response.read().decode()
            assert response.url == f"http://127.0.0.1:{admin}/console/"
            assert response.headers["X-Frame-Options"] == "DENY"
            assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        assert '<script src="console.js"' in page and "http" not in page.split("<body>")[1]  # nothing from elsewhere
    finally:
        client.disconnect()


@pytest.mark.kafka
def test_routes_page_counts_routed_messages(make_gateway: Callable[..., GatewayProcess], browser: Any,
                                            kafka_bootstrap: str, tmp_path: Path) -> None:  # noqa: F811
    orders, audit = unique_topic("orders"), unique_topic("audit")
    create_topics(kafka_bootstrap, orders, audit)
    gateway, admin = start_gateway(make_gateway, f"""
[connectors.kafka]
uri = "kafka://{kafka_bootstrap}"

[[destinations]]
pattern = "/queue/shop.*"
connector = "kafka"

[routing]
[[routing.routes]]
name = "orders"
include = "msg.address == '/queue/shop.orders'"
topic = "{orders}"

[[routing.routes]]
name = "audit"
include = "msg.address == '/queue/shop.audit'"
topic = "{audit}"
""")
    client = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    try:
        for index in range(5):
            client.send("/queue/shop.orders", f"order {index}", receipt=True)
        client.send("/queue/shop.audit", "audit 0", receipt=True)
    finally:
        client.disconnect()
    console = Console(browser, admin, ALICE)
    console.open("routes")
    document = api(admin, "routes")[1]
    counts = {route["name"]: route["routed"] for route in document["routes"]}
    assert counts == {"orders": 5, "audit": 1}
    for route in document["routes"]:
        assert console.field("route", route["name"], "routed") == str(route["routed"])
        assert console.field("route", route["name"], "topic") == route["topic"]
        assert console.field("route", route["name"], "state") == "running"
    # the Kafka connector's status as a table of keys and values, not raw JSON
    for key, value in document["kafka"].items():
        if isinstance(value, str | int) and not isinstance(value, bool):
            assert console.text(f'#kafka-status tr[data-key="{key}"] [data-field="value"]') == str(value), key
    assert console.find("#kafka-status").tag_name == "table"
    console.screenshot(screenshots(tmp_path) / "routes.png")


def test_authorization_entries_decide_what_a_console_login_may_do(make_gateway: Callable[..., GatewayProcess],
                                                                   browser: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    ops, other = f"/queue/ops.{tag}", f"/queue/other.{tag}"
    admin = free_port()
    gateway = make_gateway(f"""
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
users = ["alice", "bob"]
roles = {{ alice = "operator", bob = "operator" }}

[[authorization]]
destination = "/queue/*"
read = ["*"]
write = ["*"]

[[authorization]]
destination = "/queue/ops.*"
admin = ["alice"]
""", args=[USERS, WEAK])
    gateway.wait_for_log("admin endpoint on tcp:")
    client = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    try:
        for destination in (ops, ops, other):
            client.send(destination, "keep", receipt=True, persistent="true")
    finally:
        client.disconnect()
    bob = ("bob", "hunter2")

    def buttons(queue: str) -> set[str]:
        return {button.get_attribute("data-action")
                for button in browser.find_elements("css selector", f'{console.row("queue", queue)} button')}

    # bob may look (read) but not purge (admin): the page shows no purge button, the API refuses it and
    # says why, and nothing changes
    console = Console(browser, admin, bob)
    console.open("destinations")
    console.wait(lambda: browser.execute_script("return document.body.dataset.role") == "operator", what="the role")
    console.open("overview")
    console.open("destinations")
    console.click(f'{console.row("queue", ops)} [data-action="browse"]')
    console.wait(lambda: len(browser.find_elements("css selector", "#browse tr[data-message]")) == 2, what="rows")
    console.wait(lambda: buttons(ops) == {"browse", "send"}, what="bob's buttons: browse and send only")
    assert browser.find_elements("css selector", '#browse [data-action="delete"]') == []
    status, answer = api(admin, "purge", bob, body={"destination": ops})
    assert status == 403 and answer["error"] == "bob does not hold the admin permission on " + ops
    assert queue_row(admin, ops, bob)["pending"] == 2

    # alice holds admin on /queue/ops.* only
    browser.get("about:blank")
    console = Console(browser, admin, ALICE)
    console.open("destinations")
    console.wait(lambda: buttons(other) == {"browse", "send"}, what="alice's buttons on the other queue")
    console.wait(lambda: "purge" in buttons(ops), what="alice's purge button on her queue")
    status, answer = api(admin, "purge", body={"destination": other})
    assert status == 403 and answer["error"] == "alice does not hold the admin permission on " + other
    console.click(f'{console.row("queue", ops)} [data-action="purge"]')
    console.confirm(True)
    console.notice(f"Purged {ops}: 2 message(s)")
    assert queue_row(admin, ops)["pending"] == 0 and queue_row(admin, other)["pending"] == 1
    log = gateway.log()
    assert f"console: bob was refused a purge of '{ops}' (403)" in log
    assert f"console: alice was refused a purge of '{other}' (403)" in log
    assert f"console: alice purged '{ops}' (2 messages)" in log
