"""The ``jms`` connector under faults that are one client's or the network's (issue 38, defects 4-6).

* a stalled network path (``TcpProxy.stall``: no RST, nothing answers): a send gets its
  ERROR ("in doubt") within ``send_timeout`` and a small margin, whatever the provider's
  client does (its inactivity monitor on or off), and the connection is rebuilt;
* a JNDI name that is not bound (``destinations = "jndi"``): that client alone gets an
  ERROR naming the destination, at once; the provider connection stays up; a SUBSCRIBE
  made while the connection is down is refused the same way, not receipted;
* a start-up failure with ``max_retries = 0``: one line naming ``connectors.<name>`` on
  the console, once, also with ``--logfile``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_admin import http
from tests.integration.test_jms_api import ROUTES, classpath_toml, jndi_style
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port
from tests.support.stomp_clients import Client, StompClients
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.activemq

SEND_TIMEOUT = 3.0
MARGIN = 2.5
"""What the ERROR may take past ``send_timeout`` (the watchdog looks once a second at most)."""


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def proxied_connector(proxy: TcpProxy, url_options: str, admin: int) -> str:
    url = f"tcp://{proxy.address}{url_options}"
    return f"""
[connectors.amq]
type = "jms"
classpath = {classpath_toml()}
failure_retry_interval = 300
send_timeout = {int(SEND_TIMEOUT * 1000)}

[connectors.amq.connection_factory]
class = "org.apache.activemq.ActiveMQConnectionFactory"
properties = {{ brokerURL = "{url}", watchTopicAdvisories = false }}

[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
""" + ROUTES


def connector_entry(admin: int) -> tuple[bool, str]:
    _, document, _ = http(admin, "GET", "/health")
    entry = document["components"]["connectors"]["amq"]
    return entry["status"] == "UP", entry["detail"]


def send_async(client: Client, destination: str, body: str) -> str:
    """SEND with a receipt header, without waiting; the receipt id."""
    receipt = uuid.uuid4().hex
    client.connection.send(destination, body, headers={"receipt": receipt, "persistent": "true"})
    return receipt


# -- defect 4: send_timeout under a stalled network path ---------------------------------------


@pytest.mark.parametrize("url_options", ["", "?wireFormat.maxInactivityDuration=0"],
                         ids=["inactivity-monitor", "no-inactivity-monitor"])
def test_a_stalled_path_gives_the_sender_its_error_within_send_timeout(
        tmp_path: Path, activemq: ActiveMQBroker, url_options: str) -> None:  # noqa: F811
    host, port = activemq.openwire_url.removeprefix("tcp://").split(":")
    admin = free_port()
    with TcpProxy(host, int(port)) as proxy:
        gateway = GatewayProcess(tmp_path / "gw", proxied_connector(proxy, url_options, admin)).start()
        with stopped_after(gateway):
            gateway.wait_for_log("connected to", 30)
            gateway.wait_for_log("admin endpoint", 30)
            clients = StompClients(gateway.address)
            queue = "/queue/" + unique("jmsapi.stall")
            try:
                client = clients.connect(text=True)
                client.send(queue, "before", receipt=True)
                proxy.stall()
                time.sleep(0.5)  # the proxy's pumps look at the stall between two reads (0.1 s)
                started = time.monotonic()
                send_async(client, queue, "during")
                error = client.error(timeout=SEND_TIMEOUT + MARGIN + 5)
                elapsed = time.monotonic() - started
                assert error is not None, f"no ERROR within {SEND_TIMEOUT + MARGIN + 5}s:\n{gateway.log()[-3000:]}"
                print(f"ERROR after {elapsed:.2f}s: {error.headers.get('message')}")
                assert elapsed <= SEND_TIMEOUT + MARGIN, f"ERROR after {elapsed:.1f}s"
                assert "in doubt" in str(error.headers.get("message", "")) + error.body.decode(errors="replace")
                # the reactor is free meanwhile: another client connects and /health answers
                clients.connect(text=True)
                assert connector_entry(admin)[0] is False
                proxy.flow()
                wait_until(lambda: connector_entry(admin)[0], 90, "the connection rebuilt")
                clients.connect(text=True).send(queue, "after", receipt=True, timeout=30)
            finally:
                proxy.flow()
                clients.close()
        with JmsClient(activemq.openwire_url) as jms:
            bodies = [message.body for message in jms.receive_until_quiet(queue, 2.0)]
        assert "before" in bodies and "after" in bodies
        assert bodies.count("during") <= 1  # in doubt: there once or not at all, never twice


# -- defect 5: an unbound JNDI name --------------------------------------------------------------


@pytest.fixture
def jndi_gateway(tmp_path: Path, activemq: ActiveMQBroker) -> Iterator[tuple[GatewayProcess, TcpProxy, int, str]]:  # noqa: F811
    """A gateway with ``destinations = "jndi"`` (``/queue/orders`` bound) reaching ActiveMQ through a proxy."""
    host, port = activemq.openwire_url.removeprefix("tcp://").split(":")
    physical = unique("jmsapi.orders")
    admin = free_port()
    with TcpProxy(host, int(port)) as proxy:

        class Through:
            openwire_url = f"tcp://{proxy.address}"

        config = (jndi_style(Through(), extra='destinations = "jndi"')  # type: ignore[arg-type]
                  + f'"queue.orders" = "{physical}"\n' + ROUTES
                  + '\n[[destinations]]\npattern = "/queue/orders"\nconnector = "amq"\n'
                  + f'[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\n')
        gateway = GatewayProcess(tmp_path / "gw", config).start()
        with stopped_after(gateway):
            gateway.wait_for_log("connected to", 30)
            gateway.wait_for_log("admin endpoint", 30)
            yield gateway, proxy, admin, physical


def test_an_unbound_jndi_name_is_refused_to_that_client_alone(
        jndi_gateway: tuple[GatewayProcess, TcpProxy, int, str]) -> None:
    gateway, _, admin, _ = jndi_gateway
    clients = StompClients(gateway.address)
    try:
        bystander = clients.connect(text=True)
        bystander.subscribe("/queue/orders", ack="auto")
        sender = clients.connect(text=True)
        started = time.monotonic()
        send_async(sender, "/queue/jmsapi.unbound", "lost?")
        error = sender.error(timeout=10)
        assert error is not None
        assert time.monotonic() - started < SEND_TIMEOUT  # at once, not after send_timeout
        text = str(error.headers.get("message", "")) + error.body.decode(errors="replace")
        assert "/queue/jmsapi.unbound" in text or "jmsapi.unbound" in text, text
        subscriber = clients.connect(text=True)
        subscriber.connection.subscribe("/queue/jmsapi.unbound.too", "1", ack="auto",
                                        headers={"receipt": "r-unbound"})
        error = subscriber.error(timeout=10)
        assert error is not None and "jmsapi.unbound.too" in str(error.headers) + error.body.decode(errors="replace")
        assert "r-unbound" not in subscriber.listener.receipts
        # nobody else noticed: the connection never dropped, the bystander still receives
        assert "lost connection" not in gateway.log()
        assert connector_entry(admin)[0] is True
        clients.connect(text=True).send("/queue/orders", "still here", receipt=True)
        assert bystander.message(10).body == b"still here"
    finally:
        clients.close()


def test_a_subscribe_while_the_provider_is_away_is_refused_for_an_unbound_name(
        jndi_gateway: tuple[GatewayProcess, TcpProxy, int, str]) -> None:
    gateway, proxy, admin, _ = jndi_gateway
    clients = StompClients(gateway.address)
    try:
        proxy.cut()
        wait_until(lambda: not connector_entry(admin)[0], 30, "the connector down")
        subscriber = clients.connect(text=True)
        subscriber.connection.subscribe("/queue/jmsapi.unbound.away", "1", ack="auto",
                                        headers={"receipt": "r-away"})
        error = subscriber.error(timeout=10)
        assert error is not None, "no ERROR for an unbound name while the provider is away"
        assert "r-away" not in subscriber.listener.receipts
        assert "jmsapi.unbound.away" in str(error.headers) + error.body.decode(errors="replace")
        good = clients.connect(text=True)
        good.subscribe("/queue/orders", ack="auto")  # a bound name: receipted, made once back
        proxy.restore()
        wait_until(lambda: connector_entry(admin)[0], 60, "the connector up again")
        clients.connect(text=True).send("/queue/orders", "after", receipt=True, timeout=20)
        assert good.message(20).body == b"after"
    finally:
        proxy.restore()
        clients.close()


# -- defect 6: a start-up failure on the console -----------------------------------------------


def test_a_start_up_failure_is_one_console_line_naming_the_connector(tmp_path: Path) -> None:
    config = f"""
[connectors.amq]
type = "jms"
classpath = {classpath_toml()}
max_retries = 0

[connectors.amq.connection_factory]
class = "org.apache.activemq.ActiveMQConnectionFactory"
properties = {{ brokerURL = "tcp://127.0.0.1:{free_port()}", watchTopicAdvisories = false }}
"""
    gateway = GatewayProcess(tmp_path / "gw", config)
    output = gateway.start_fails(60)
    console = output[: len(output) - len(gateway.log()) - 1]
    lines = [line for line in console.splitlines() if "cannot start" in line]
    assert len(lines) == 1, console
    assert "connectors.amq" in lines[0] and "max_retries" in lines[0], lines[0]
    logged = [line for line in gateway.log().splitlines() if "cannot start" in line]
    assert len(logged) == 1, gateway.log()
