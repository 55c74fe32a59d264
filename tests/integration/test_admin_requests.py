"""What the admin endpoint of a real gateway process accepts, over raw HTTP (``http.client``, sockets).

Actions cannot be sent from another web origin or as a web form (403 before the
login is asked for or the bridge touched), and a request body is refused with
413 as soon as its declared length is known, before it is read, with or
without a login.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port

BRIDGE = """
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]

[[bridges]]
name = "copy"
source = {{ connector = "embedded", destination = "/queue/adm.in.{tag}" }}
target = {{ connector = "embedded", destination = "/queue/adm.out.{tag}" }}
"""


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, Any]:
    """``method path`` with exactly ``headers``: (status, JSON body or text)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    if response.getheader("content-type", "").startswith("application/json"):
        return response.status, json.loads(raw)
    return response.status, raw.decode("utf-8", "replace")


def bridge_state(port: int) -> str:
    status, document = request(port, "GET", "/bridges/copy")
    assert status == 200, document
    return str(document["state"])


@pytest.fixture
def admin_gateway(make_gateway: Callable[..., GatewayProcess]) -> tuple[GatewayProcess, int]:
    admin = free_port()
    gateway = make_gateway(BRIDGE.format(admin=admin, tag=uuid.uuid4().hex[:8]))
    gateway.wait_for_log("admin endpoint on tcp:")
    return gateway, admin


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
    {"Origin": "http://evil.example", "Content-Type": "application/json"},
    {"Origin": "http://evil.example", "X-Requested-With": "XMLHttpRequest"},
    {"Origin": "null", "Content-Type": "application/json"},
    {"Content-Type": "application/x-www-form-urlencoded"},
    {"Content-Type": "text/plain"},
    {},
], ids=["foreign-origin-form", "foreign-origin-json", "foreign-origin-header", "null-origin", "form", "text", "bare"])
def test_a_cross_site_or_form_action_is_refused(admin_gateway: tuple[GatewayProcess, int],
                                               headers: dict[str, str]) -> None:
    gateway, admin = admin_gateway
    assert bridge_state(admin) == "running"
    status, document = request(admin, "POST", "/bridges/copy/stop", headers, b"a=b" if headers else None)
    assert status == 403, document
    assert "origin" in document["error"] or "application/json" in document["error"]
    assert bridge_state(admin) == "running", "a refused action stopped the bridge"
    assert "admin: refused POST /bridges/copy/stop" in gateway.wait_for_log("admin: refused POST")


@pytest.mark.parametrize("headers", [
    {"Content-Type": "application/json"},
    {"Content-Type": "application/json; charset=utf-8", "Origin": "http://127.0.0.1:{admin}"},
    {"X-Requested-With": "curl"},
], ids=["json", "json-own-origin", "custom-header"])
def test_an_action_from_a_tool_or_the_endpoints_own_origin_works(admin_gateway: tuple[GatewayProcess, int],
                                                                 headers: dict[str, str]) -> None:
    _, admin = admin_gateway
    headers = {name: value.format(admin=admin) for name, value in headers.items()}
    status, document = request(admin, "POST", "/bridges/copy/stop", headers)
    assert (status, document["state"]) == (200, "stopped")
    status, document = request(admin, "POST", "/bridges/copy/start", headers, b"{}")
    assert (status, document["state"]) == (200, "running")


def read_response(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes (AssertionError if it does not within ``timeout``)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open; read so far: {data!r}") from None
        except ConnectionResetError:  # closed while the client still sent: what came before counts
            return data
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize("with_users", [False, True], ids=["anonymous", "auth"])
def test_a_huge_declared_body_is_refused_before_it_is_read(make_gateway: Callable[..., GatewayProcess],
                                                            with_users: bool) -> None:
    admin = free_port()
    args = ['--set=auth.users={alice = "secret"}', "--set=auth.allow_weak_passwords=true"] if with_users else []
    gateway = make_gateway(BRIDGE.format(admin=admin, tag=uuid.uuid4().hex[:8]), args=args)
    gateway.wait_for_log("admin endpoint on tcp:")
    with socket.create_connection(("127.0.0.1", admin), timeout=10) as sock:
        sock.sendall(b"POST /bridges/copy/stop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n" + b"x" * 65536)
        started = time.monotonic()
        response = read_response(sock, 5.0)
    assert response.startswith(b"HTTP/1.1 413 "), response
    assert b"10000000000 bytes" in response
    assert time.monotonic() - started < 3
    # the endpoint still serves
    status, _ = request(admin, "GET", "/health")
    assert status == 200


def test_a_chunked_body_is_cut_off_at_the_bound(admin_gateway: tuple[GatewayProcess, int]) -> None:
    _, admin = admin_gateway
    with socket.create_connection(("127.0.0.1", admin), timeout=10) as sock:
        sock.sendall(b"POST /bridges/copy/stop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 8192
        sent = 0
        try:
            while sent < 1024 * 1024:  # a bounded endpoint answers long before this
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = read_response(sock, 5.0)
    assert response.startswith(b"HTTP/1.1 413 "), response
    assert bridge_state(admin) == "running"


def test_a_small_body_on_a_get_is_tolerated(admin_gateway: tuple[GatewayProcess, int]) -> None:
    _, admin = admin_gateway
    status, document = request(admin, "GET", "/bridges/copy", {"Content-Type": "application/json"}, b"{}")
    assert (status, document["state"]) == (200, "running")
