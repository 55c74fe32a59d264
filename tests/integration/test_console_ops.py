"""The console for daily work, in headless Chromium against a real gateway process: tables that sort and
filter, queue create and delete, a logout the browser honours, and a bridge whose last error is a Java
stack trace (from a STOMP broker that answers every SUBSCRIBE with one, as ActiveMQ does for a client id
already connected) kept inside the window at 1400 and 1920 px.  Screenshots go to the test's directory
(``$CONSOLE_SCREENSHOTS`` to keep them elsewhere)."""

from __future__ import annotations

import base64
import contextlib
import queue
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_console import ALICE, USERS, WEAK, api, screenshots
from tests.support.browser import Console, chromium
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

JAVA_TRACE = "\n".join(
    ["javax.jms.InvalidClientIDException: Broker: localhost - Client: prices-durable already connected from "
     "tcp://127.0.0.1:48812"]
    + [f"\tat org.apache.activemq.broker.region.RegionBroker.addConnection(RegionBroker.java:{250 + i})"
       for i in range(30)]
    + ["\tat java.base/java.lang.Thread.run(Thread.java:840)"])


class RefusingStompBroker:
    """A STOMP server on 127.0.0.1 that accepts each CONNECT and answers the SUBSCRIBE that follows with an
    ERROR frame carrying ``JAVA_TRACE`` (ActiveMQ's way of refusing a durable subscriber's client id)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                with contextlib.suppress(OSError):
                    self._converse(connection)

    @staticmethod
    def _converse(connection: socket.socket) -> None:
        """CONNECTED to a CONNECT; an ERROR with the trace to the first SUBSCRIBE, then the connection closes."""
        data = b""
        while True:
            while b"\x00" not in data:
                chunk = connection.recv(4096)
                if not chunk:
                    return
                data += chunk
            frame, data = data.split(b"\x00", 1)
            command = frame.lstrip(b"\r\n").split(b"\n", 1)[0]
            if command in (b"CONNECT", b"STOMP"):
                connection.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
            elif command == b"SUBSCRIBE":
                first = JAVA_TRACE.split("\n", 1)[0]
                body = JAVA_TRACE.encode()
                connection.sendall(f"ERROR\nmessage:{first}\ncontent-type:text/plain\n"
                                   f"content-length:{len(body)}\n\n".encode() + body + b"\x00")
                return

    def close(self) -> None:
        self.server.close()


def start(make_gateway: Callable[..., GatewayProcess], refusing: int) -> tuple[GatewayProcess, int]:
    admin = free_port()
    gateway = make_gateway(f"""
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
users = ["alice"]
roles = {{ alice = "administrator" }}

[connectors.amq]
uri = "stomp://127.0.0.1:{refusing}"
failure_retry_interval = 500

[[bridges]]
name = "prices-durable"
source = {{ connector = "amq", destination = "/topic/prices", user = "bridge", password = "secret" }}
target = {{ connector = "embedded", destination = "/queue/prices" }}

[[bridges]]
name = "copy"
source = {{ connector = "embedded", destination = "/queue/in" }}
target = {{ connector = "embedded", destination = "/queue/out" }}
""", args=[USERS, WEAK])
    gateway.wait_for_log("admin endpoint on tcp:")
    return gateway, admin


def test_console_tables_queues_errors_and_logout(make_gateway: Callable[..., GatewayProcess],
                                                 tmp_path: Path) -> None:
    fake = RefusingStompBroker()
    try:
        gateway, admin = start(make_gateway, fake.port)
        _check_console(gateway, admin, tmp_path)
    finally:
        fake.close()


def _check_console(gateway: GatewayProcess, admin: int, tmp_path: Path) -> None:
    names = [f"/queue/ops.{name}" for name in ("alpha", "bravo", "charlie", "delta")]
    client = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    try:
        for count, name in enumerate(names, start=1):
            for index in range(count):
                client.send(name, f"m{index}", receipt=True)
    finally:
        client.disconnect()
    wait_until(lambda: "InvalidClientIDException" in str(api(admin, "bridges")[1]), 20, "the bridge's Java error")
    shots = screenshots(tmp_path)
    for width in (1400, 1920):
        with chromium(width=width, height=1000) as browser:
            console = Console(browser, admin, ALICE)
            console.open("bridges")
            row = console.row("bridge", "prices-durable")

            def collapsed(row: str = row) -> list[Any]:
                return browser.find_elements("css selector", f"{row} details.error-text")

            console.wait(collapsed, what="the collapsed error")
            layout = browser.execute_script("""
                const inner = window.innerWidth;
                const rows = [...document.querySelectorAll('#bridges tr[data-bridge]')];
                return {inner, page: document.documentElement.scrollWidth,
                        rights: rows.map(r => Math.max(...[...r.querySelectorAll('button')]
                                                       .map(b => b.getBoundingClientRect().right))),
                        buttons: rows.map(r => r.querySelectorAll('button').length)};""")
            assert layout["buttons"] == [4, 4], layout
            assert all(right <= layout["inner"] for right in layout["rights"]), layout
            assert layout["page"] <= layout["inner"], layout
            summary = console.text(f"{row} details.error-text summary")
            assert "javax.jms.InvalidClientIDException" in summary and "RegionBroker" not in summary
            console.screenshot(shots / f"bridges-{width}.png")
            console.click(f"{row} details.error-text summary")  # opened, the trace stays in its cell

            def opened(row: str = row) -> Any:
                return browser.execute_script(f"return document.querySelector('{row} details.error-text').open")

            console.wait(opened, what="the opened error")
            assert browser.execute_script("return document.documentElement.scrollWidth") <= layout["inner"]
            assert "RegionBroker.java:253" in console.text(f"{row} details.error-text pre")
            console.screenshot(shots / f"bridges-open-{width}.png")

            console.open("destinations")
            visible = _visible_queues(browser)
            assert set(names) <= set(visible)
            # filtering hides the rows that do not match, and keeps the typed text across the redraws
            console.type('input[data-search="queues"]', "bra")
            console.wait(lambda: _visible_queues(browser) == ["/queue/ops.bravo"], what="the filtered rows")
            hidden = browser.execute_script(
                "return [...document.querySelectorAll('#queues tr[data-queue]')].filter(r => r.offsetParent === null)"
                ".map(r => r.dataset.queue)")
            assert set(names) - {"/queue/ops.bravo"} <= set(hidden)
            browser.execute_script("document.body.dataset.loaded = ''")
            console.wait(lambda: browser.execute_script("return document.body.dataset.loaded") == "destinations",
                         what="a redraw")
            assert _visible_queues(browser) == ["/queue/ops.bravo"]
            assert console.find('input[data-search="queues"]').get_attribute("value") == "bra"
            console.screenshot(shots / f"queues-filtered-{width}.png")
            console.type('input[data-search="queues"]', "ops.", clear=True)
            console.wait(lambda: _visible_queues(browser) == names, what="the four ops queues in name order")
            # sorting by pending: descending on the second click
            console.click('#queues th[data-column="1"]')
            console.wait(lambda: _visible_queues(browser) == names, what="ascending by pending")
            console.click('#queues th[data-column="1"]')
            console.wait(lambda: _visible_queues(browser) == names[::-1], what="descending by pending")
            assert console.find('#queues th[data-column="1"]').get_attribute("aria-sort") == "descending"
            console.screenshot(shots / f"queues-sorted-{width}.png")
            console.type('input[data-search="queues"]', "x", clear=True)  # (a character and a delete: an input
            console.type('input[data-search="queues"]', "\b")  # event that empties the filter)
    # create a queue and delete one, through the page's confirmation
    with chromium(width=1400, height=1000) as browser:
        console = Console(browser, admin, ALICE)
        console.open("destinations")
        console.click('[data-action="create-queue"]')
        console.type("#create-destination", "/queue/ops.fresh", clear=True)
        console.click("#create-submit")
        assert console.confirm() == "Create the queue /queue/ops.fresh?"
        wait_until(lambda: any(q["name"] == "/queue/ops.fresh" for q in api(admin, "destinations")[1]["queues"]),
                   10, "the new queue")
        console.wait(lambda: browser.find_elements("css selector", console.row("queue", "/queue/ops.fresh")),
                     what="the new queue's row")
        console.click(f'{console.row("queue", "/queue/ops.charlie")} [data-action="delete-queue"]')
        question = console.confirm()
        assert "Delete the queue /queue/ops.charlie and its 3 pending message(s)?" in question
        wait_until(lambda: all(q["name"] != "/queue/ops.charlie" for q in api(admin, "destinations")[1]["queues"]),
                   10, "the deleted queue gone")
        console.wait(lambda: not browser.find_elements("css selector", console.row("queue", "/queue/ops.charlie")),
                     what="the deleted queue's row gone")
    assert gateway.wait_for_log("console: alice created queue '/queue/ops.fresh'")
    assert gateway.wait_for_log("console: alice deleted queue '/queue/ops.charlie' (3 pending messages dropped)")
    # the deleted queue's messages are gone for a consumer too
    consumer = Client(gateway.address, "1.2", text=True, login="alice", passcode="secret")
    try:
        consumer.subscribe("/queue/ops.charlie", ack="auto")
        with pytest.raises(queue.Empty):
            consumer.listener.messages.get(timeout=1.0)
    finally:
        consumer.disconnect()
    _check_logout(admin, tmp_path)


def _visible_queues(browser: Any) -> list[str]:
    return list(browser.execute_script(
        "return [...document.querySelectorAll('#queues tr[data-queue]')].filter(r => !r.hidden && r.offsetParent)"
        ".map(r => r.dataset.queue).filter(n => n.startsWith('/queue/ops.'))"))


def _check_logout(admin: int, tmp_path: Path) -> None:
    """Log out: the console's link leads to /logout, which answers 401 with the realm's challenge even to the
    valid login the browser sends (a browser drops a cached login so rejected and asks again; cancelled, it
    shows the page saying so); the page checks no password (no failed login is counted)."""
    with chromium(width=1400, height=1000) as browser:
        console = Console(browser, admin, ALICE)
        console.open("overview")
        console.wait(lambda: console.find("#logout").is_displayed(), what="the logout link")
        assert console.find("#logout").get_attribute("href") == f"http://127.0.0.1:{admin}/logout"
        browser.set_page_load_timeout(5)
        try:  # (headless Chromium then waits at the login prompt the 401 brings: no page to read)
            console.click("#logout")
        finally:
            console.wait(lambda: browser.current_url == f"http://127.0.0.1:{admin}/logout", what="/logout")
    for login in (ALICE, None):
        request = urllib.request.Request(f"http://127.0.0.1:{admin}/logout")
        if login is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(b"alice:secret").decode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"] == 'Basic realm="jmsgateway admin"'
        assert b"You are logged out" in refused.value.read()
    metrics = urllib.request.Request(f"http://127.0.0.1:{admin}/metrics")
    metrics.add_header("Authorization", "Basic " + base64.b64encode(b"alice:secret").decode())
    with urllib.request.urlopen(metrics, timeout=5) as response:
        text = response.read().decode()
    assert "jmsgateway_admin_logins_failed_total 0.0" in text
