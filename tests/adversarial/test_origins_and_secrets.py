"""Configured allow-lists (``[gateway] allowed_origins`` for WebSocket, ``[admin] allowed_hosts`` and
``allowed_origins``) and secrets while a connector fails (its error messages and retries must not carry
the passcode of its URL into ERROR frames, pages or the log)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import websocket

from tests.adversarial.attack import UPSTREAM_SECRET, admin_toml, gateway_from_toml, http_call, new_port
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client


@pytest.fixture(scope="module")
def listed_origins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, int, int]]:
    """No [auth]; WebSocket and admin endpoint with allow-lists of their own: (gateway, ws port, admin port)."""
    ws_port, admin_port = new_port(), new_port()
    config = f"""
[gateway]
allowed_origins = ["https://app.example"]

{admin_toml(admin_port, roles=False)}
allowed_hosts = ["gw.example"]
allowed_origins = ["https://console.example"]
"""
    process = gateway_from_toml(tmp_path_factory.mktemp("origins"), config, ws_port=ws_port, admin_port=admin_port)
    yield process, ws_port, admin_port
    process.stop()


def ws_connect(port: int, origin: str) -> bytes:
    """Handshake with ``origin`` and CONNECT: the first frame back (WebSocketBadStatusException if refused)."""
    sock = websocket.create_connection(f"ws://127.0.0.1:{port}/", origin=origin, subprotocols=["v12.stomp"],
                                       timeout=10)
    try:
        sock.send_binary(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
        answer = sock.recv()
        return answer if isinstance(answer, bytes) else answer.encode()
    finally:
        sock.close()


def test_websocket_origins_follow_the_configured_list(listed_origins: tuple[GatewayProcess, int, int]) -> None:
    _, ws_port, _ = listed_origins
    assert ws_connect(ws_port, "https://app.example").startswith(b"CONNECTED")
    for origin in ("http://attacker.example", "https://app.example.attacker.example", "null", "http://app.example"):
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            ws_connect(ws_port, origin)
        assert refused.value.status_code == 403, origin


def test_admin_hosts_and_origins_follow_the_configured_lists(listed_origins: tuple[GatewayProcess, int, int]) -> None:
    process, _, port = listed_origins
    queue = f"/queue/listed.{uuid.uuid4().hex[:8]}"
    client = Client(process.address, "1.2")
    try:
        client.send(queue, b"keep", receipt=True, persistent="true")
        client.send(queue, b"keep too", receipt=True, persistent="true")
    finally:
        client.disconnect()
    host = {"Host": f"gw.example:{port}"}
    assert http_call(port, "GET", "/status", headers=host)[0] == 200
    assert http_call(port, "GET", "/status", headers={"Host": f"attacker.example:{port}"})[0] == 421
    assert http_call(port, "GET", "/status", headers={**host, "Origin": "http://attacker.example"})[0] == 403
    refused = http_call(port, "POST", "/console/api/purge", body={"destination": queue},
                        headers={**host, "Origin": "https://attacker.example"})
    assert refused[0] == 403, refused
    done = http_call(port, "POST", "/console/api/purge", body={"destination": queue},
                     headers={**host, "Origin": "https://console.example"})
    assert done[0] == 200 and b'"result": 2' in done[2], done


def test_no_secret_while_the_upstream_is_unreachable(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A ``stomp://gwuser:SECRET@…`` connector whose broker is not there: its retries, its DOWN health,
    the status page and the ERROR (or silence) a SEND through it gets never show SECRET."""
    admin_port, dead_port = new_port(), new_port()
    config = f"""
[connectors.upstream]
uri = "stomp://gwuser:{UPSTREAM_SECRET}@127.0.0.1:{dead_port}"

[[destinations]]
pattern = "/queue/up.*"
connector = "upstream"

{admin_toml(admin_port, roles=False)}
"""
    process = gateway_from_toml(tmp_path_factory.mktemp("deadupstream"), config, admin_port=admin_port)
    try:
        client = Client(process.address, "1.2")
        try:
            client.connection.send("/queue/up.x", b"nowhere", headers={"receipt": "r1"})
            error = client.error(timeout=3)
            frame = f"{error.headers} {error.body!r}" if error is not None else ""
            assert UPSTREAM_SECRET not in frame, frame
        finally:
            client.drop()
        time.sleep(1.0)  # a retry or two in the log
        leaks = [path for path in ("/health", "/status", "/metrics")
                 if UPSTREAM_SECRET.encode() in http_call(admin_port, "GET", path)[2]]
        assert leaks == [], f"the passcode is shown in {leaks}"
        assert UPSTREAM_SECRET not in process.log(), "the passcode is in the log"
    finally:
        process.kill()
