"""The ``mtls:`` listener of a real gateway process: TLS that requires client certificates.

stomp.py with a certificate the configured CA signed is served; a client
without a certificate, or with one from another CA, is refused during the
TLS handshake while the certified clients go on; a listener without
``caCerts`` or with an unreadable file stops start-up with a clear message.
Certificates come from :mod:`tests.support.tls`.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp

from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.tls import TlsFiles, make_tls_files


class Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.arrived = threading.Event()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.bodies.append(frame.body)
        self.arrived.set()


def certified_client(port: int, ca: Path, cert: Path, key: Path) -> tuple[stomp.Connection12, Inbox]:
    connection = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    connection.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=str(ca), cert_file=str(cert), key_file=str(key))
    inbox = Inbox()
    connection.set_listener("inbox", inbox)
    connection.connect(wait=True)
    return connection, inbox


def assert_round_trip(port: int, tls: TlsFiles, queue: str, body: bytes) -> None:
    """stomp.py with the client certificate sends ``body`` to ``queue`` and receives it back."""
    connection, inbox = certified_client(port, tls.ca_cert, tls.client_cert, tls.client_key)
    try:
        connection.subscribe(queue, id="1")
        connection.send(queue, body, receipt="r1")
        assert inbox.arrived.wait(10)
        assert inbox.bodies == [body]
    finally:
        connection.disconnect()


def handshake_answer(port: int, ca: Path, cert: Path | None = None, key: Path | None = None) -> bytes:
    """What a raw TLS client (with ``cert`` if given) gets back for a CONNECT; b"" or an SSL error text when refused."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
            return tls.recv(4096)
    except (ssl.SSLError, ConnectionError) as error:
        return str(error).encode()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def mtls_gateway(tls: TlsFiles, tmp_path: Path) -> Iterator[int]:
    port = free_port()
    listen = (f"mtls:{port}:interface=127.0.0.1:privateKey={tls.server_key}:certKey={tls.server_cert}"
              f":caCerts={tls.ca_cert}")
    process = GatewayProcess(tmp_path / "gateway", args=["--listen", listen]).start()
    wait_for_port(port, timeout=10)
    process.wait_for_log("listening for STOMP on mtls:")
    yield port
    process.stop()


def test_a_client_with_a_certificate_from_the_ca_is_served(mtls_gateway: int, tls: TlsFiles) -> None:
    assert_round_trip(mtls_gateway, tls, "/queue/mtls", b"certified")


def test_clients_without_a_trusted_certificate_are_refused_and_others_go_on(
    mtls_gateway: int, tls: TlsFiles, tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other", ca_name="another CA")
    assert handshake_answer(mtls_gateway, tls.ca_cert, tls.client_cert, tls.client_key).startswith(b"CONNECTED")
    assert b"alert certificate required" in handshake_answer(mtls_gateway, tls.ca_cert)
    assert b"alert unknown ca" in handshake_answer(mtls_gateway, tls.ca_cert, other.client_cert, other.client_key)
    assert_round_trip(mtls_gateway, tls, "/queue/mtls.after", b"still served")


@pytest.mark.parametrize("problem", ["no caCerts", "unreadable caCerts"])
def test_an_mtls_listener_it_cannot_make_stops_start_up(tls: TlsFiles, tmp_path: Path, problem: str) -> None:
    listen = f"mtls:{free_port()}:interface=127.0.0.1:privateKey={tls.server_key}:certKey={tls.server_cert}"
    if problem == "unreadable caCerts":
        listen += f":caCerts={tmp_path}/missing-ca.pem"
    message = GatewayProcess(tmp_path / "gateway", args=["--listen", listen]).start_fails()
    assert f"jmsgateway cannot start: cannot listen on '{listen}'" in message
    if problem == "no caCerts":
        assert "mtls: needs caCerts=" in message
    else:
        assert f"cannot read client CA file (caCerts) {tmp_path}/missing-ca.pem" in message
