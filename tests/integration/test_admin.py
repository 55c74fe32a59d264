"""The admin endpoint of a real gateway process, over real HTTP.

A ``twistd jmsgateway`` process with ``[admin] listen``: health, status and
metrics as an operator or a scraper reads them (urllib), bridge control
while stomp.py clients send through the bridge, HTTP Basic authentication
with the ``[auth]`` users, and health following a real ActiveMQ connection
cut and restored through a TCP proxy.
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

USERS = '--set=auth.users={alice = "secret", bob = "hunter2"}'
WEAK = "--set=auth.allow_weak_passwords=true"


def http(port: int, method: str, path: str, login: tuple[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    """``method path`` on the admin port: (status, JSON or text body, headers)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    if method == "POST":
        request.add_header("Content-Type", "application/json")  # an action must not look like a web form
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(login).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw, headers = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, headers = error.code, error.read(), dict(error.headers)
    if headers.get("Content-Type", "").startswith("application/json"):
        return status, json.loads(raw), headers
    return status, raw.decode("utf-8"), headers


def test_bridge_control_status_metrics_and_logins(make_gateway: Callable[..., GatewayProcess]) -> None:
    admin = free_port()
    source, target = f"/queue/adm.in.{uuid.uuid4().hex[:8]}", f"/queue/adm.out.{uuid.uuid4().hex[:8]}"
    gateway = make_gateway(f"""
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]
users = ["alice"]
roles = {{ alice = "administrator" }}

[[bridges]]
name = "copy"
source = {{ connector = "embedded", destination = "{source}" }}
target = {{ connector = "embedded", destination = "{target}" }}
""", args=[USERS, WEAK])
    assert "(HTTP Basic authentication)" in gateway.wait_for_log("admin endpoint on tcp:")
    alice = ("alice", "secret")

    # health is public; everything else needs an admin login
    status, health, _ = http(admin, "GET", "/health")
    assert (status, health["status"]) == (200, "UP")
    assert health["components"]["bridges"]["copy"]["status"] == "UP"
    status, _, headers = http(admin, "GET", "/status")
    assert status == 401
    assert headers.get("WWW-Authenticate", "").lower() == 'basic realm="jmsgateway admin"'
    assert http(admin, "GET", "/status", ("alice", "wrong"))[0] == 401
    assert http(admin, "GET", "/status", ("bob", "hunter2"))[0] == 401  # a STOMP login, not an admin

    client = Client(gateway.address, login="alice", passcode="secret")
    try:
        client.subscribe(target)
        for index in range(3):
            client.send(source, f"before {index}", receipt=True)
        assert [f.body for f in client.messages(3)] == [b"before 0", b"before 1", b"before 2"]

        status, bridge, _ = http(admin, "POST", "/bridges/copy/pause", alice)
        assert (status, bridge["state"]) == (200, "paused")
        for index in range(2):
            client.send(source, f"while paused {index}", receipt=True)
        assert client.no_message(1.0), "a paused bridge moved messages"
        status, document, _ = http(admin, "GET", "/status", alice)
        assert status == 200
        assert document["stomp_connections"] == 1
        assert document["connectors"]["embedded"]["queues"][source]["pending"] == 2
        assert document["bridges"][0]["state"] == "paused"
        assert document["uptime_seconds"] > 0

        status, bridge, _ = http(admin, "POST", "/bridges/copy/resume", alice)
        assert (status, bridge["state"]) == (200, "running")
        assert [f.body for f in client.messages(2)] == [b"while paused 0", b"while paused 1"]
    finally:
        client.disconnect()

    status, metrics, headers = http(admin, "GET", "/metrics", alice)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert 'jmsgateway_bridge_forwarded_total{bridge="copy"} 5.0' in metrics
    status, error, _ = http(admin, "POST", "/bridges/cpy/pause", alice)
    assert status == 404
    assert "did you mean 'copy'" in error["error"]
    assert http(admin, "GET", "/bridges/copy/pause", alice)[0] == 405


def test_health_follows_a_jms_broker_connection(make_gateway: Callable[..., GatewayProcess],
                                                activemq: ActiveMQBroker) -> None:  # noqa: F811
    admin = free_port()
    with TcpProxy("127.0.0.1", activemq.stomp_port) as proxy:
        gateway = make_gateway(f"""
[admin]
listen = "tcp:{admin}:interface=127.0.0.1"

[connectors.amq]
uri = "stomp://127.0.0.1:{proxy.port}"
failure_retry_interval = 200
""")
        assert "(NO authentication)" in gateway.wait_for_log("admin endpoint on tcp:")

        def health() -> tuple[int, Any]:
            status, document, _ = http(admin, "GET", "/health")
            return status, document["components"]["connectors"]["amq"]

        wait_until(lambda: health()[0] == 200, what="UP")
        assert health()[1]["detail"] == f"connected to stomp://127.0.0.1:{proxy.port}"
        proxy.cut()
        wait_until(lambda: health()[0] == 503, what="DOWN after the cut")
        assert health()[1]["status"] == "DOWN"
        assert "not connected to" in health()[1]["detail"]
        document = http(admin, "GET", "/status")[1]
        assert document["connectors"]["amq"]["state"] in ("retrying", "connecting")
        proxy.restore()
        wait_until(lambda: health()[0] == 200, what="UP again after the restore")


def test_an_admin_port_in_use_stops_the_gateway_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        gateway = GatewayProcess(tmp_path, f'[admin]\nlisten = "tcp:{port}:interface=127.0.0.1"\n')
        output = gateway.start_fails()
    assert f"jmsgateway cannot start: cannot listen on 'tcp:{port}:interface=127.0.0.1' (admin)" in output
