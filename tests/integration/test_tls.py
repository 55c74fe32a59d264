"""TLS on both sides of the gateway, with real parts.

* Clients: ``twistd jmsgateway --listen ssl:...`` (Twisted's TLS endpoint)
  serves stomp.py over TLS, verified against the test CA; a client speaking
  plain STOMP to the TLS port is dropped and everyone else goes on.
* Brokers: the ``stomp+ssl://`` connector reaches ActiveMQ's ``stomp+ssl``
  connector, trusting the test CA (``tls_ca``), with a client certificate
  where the broker requires one; an untrusted certificate, a wrong host name
  and a missing client certificate are refused.
* End to end: stomp.py -TLS-> gateway process -TLS-> ActiveMQ -> JMS consumer.

The certificates come from :mod:`tests.support.tls`; the session's ActiveMQ
has the ``stomp+ssl`` connectors (:func:`tests.support.activemq.shared_broker`).
"""

from __future__ import annotations

import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from gateway.connectors.stomp_broker import StompBrokerConnector
from gateway.errors import ConnectorUnavailable
from gateway.interfaces import SubscriptionSpec
from gateway.message.model import TextMessage, new_message_id, now_millis
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.consumers import CollectingConsumer
from tests.support.gateway import GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port, wait_for_port
from tests.support.reactor_waits import reactor, wait_for
from tests.support.stomp_clients import StompClients
from tests.support.tls import TlsFiles, make_tls_files

pytestmark = pytest.mark.activemq


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def tls_of(broker: ActiveMQBroker) -> TlsFiles:
    assert broker.tls is not None, "the session broker is made with TLS connectors"
    return broker.tls


@pytest.fixture
def connectors() -> Iterator[list[StompBrokerConnector]]:
    made: list[StompBrokerConnector] = []
    yield made
    for connector in made:
        wait_for(connector.stop)


def connector(made: list[StompBrokerConnector], uri: str, **options: Any) -> StompBrokerConnector:
    config = {"uri": uri, "failure_retry_interval": 200, "send_timeout": 10_000, "max_retries": 0, **options}
    built = StompBrokerConnector.from_config("amq-tls", config, reactor=reactor, gateway_id=unique("gw"))
    made.append(built)
    return built


def text(destination: str, body: str) -> TextMessage:
    return TextMessage(text=body, destination=destination, message_id=new_message_id(), timestamp=now_millis())


async def refused(made: list[StompBrokerConnector], uri: str, **options: Any) -> str:
    """Start a connector that must not get through; the reason it gives."""
    with pytest.raises(ConnectorUnavailable) as caught:
        await connector(made, uri, **options).start()
    return str(caught.value)


async def started(made: list[StompBrokerConnector], uri: str, **options: Any) -> StompBrokerConnector:
    amq = connector(made, uri, **options)
    await amq.start()
    return amq


async def arrives(amq: StompBrokerConnector, jms: JmsClient, body: str) -> bool:
    """Send ``body`` through the connector; whether the JMS consumer gets it."""
    queue = "/queue/" + unique("tls")
    await amq.send(text(queue, body))
    received = jms.receive(queue, 5)
    return received is not None and received.body == body


@pytest_twisted.ensureDeferred
async def test_connector_sends_and_subscribes_over_tls(
    activemq: ActiveMQBroker, connectors: list[StompBrokerConnector], jms: JmsClient  # noqa: F811
) -> None:
    amq = await started(connectors, activemq.stomp_ssl_uri, tls_ca=str(tls_of(activemq).ca_cert))
    assert await arrives(amq, jms, "over TLS")
    inbound = "/queue/" + unique("tls.in")
    consumer = CollectingConsumer()
    await amq.subscribe(SubscriptionSpec(destination=inbound), consumer)
    jms.send_text(inbound, "back over TLS")
    ((message, _tag),) = await consumer.take(1)
    assert isinstance(message, TextMessage) and message.text == "back over TLS"


@pytest_twisted.ensureDeferred
async def test_client_certificate_for_a_broker_that_requires_one(
    activemq: ActiveMQBroker, connectors: list[StompBrokerConnector], jms: JmsClient  # noqa: F811
) -> None:
    tls = tls_of(activemq)
    amq = await started(connectors, activemq.stomp_ssl_auth_uri, tls_ca=str(tls.ca_cert),
                  tls_cert=str(tls.client_cert), tls_key=str(tls.client_key))
    assert await arrives(amq, jms, "with a client certificate")
    assert "bad certificate" in await refused(connectors, activemq.stomp_ssl_auth_uri, tls_ca=str(tls.ca_cert))


@pytest_twisted.ensureDeferred
async def test_untrusted_certificate_and_wrong_host_name_are_refused(
    activemq: ActiveMQBroker, connectors: list[StompBrokerConnector], tmp_path: Path  # noqa: F811
) -> None:
    other = make_tls_files(tmp_path / "other", ca_name="some other CA")
    assert "certificate verify failed" in await refused(connectors, activemq.stomp_ssl_uri, tls_ca=str(other.ca_cert))
    tls = tls_of(activemq)
    wrong_name = await refused(connectors, activemq.stomp_ssl_uri, tls_ca=str(tls.ca_cert),
                               tls_hostname="broker.example")
    assert "broker.example" in wrong_name
    # without tls_ca the system's trust store decides, and it does not know the test CA
    assert "certificate verify failed" in await refused(connectors, activemq.stomp_ssl_uri)


@pytest.fixture
def tls_gateway(activemq: ActiveMQBroker, tmp_path: Path) -> Iterator[tuple[GatewayProcess, int, TlsFiles]]:  # noqa: F811
    """A gateway process with a TLS listener next to its TCP one, bridging /queue/jms.* to
    ActiveMQ over stomp+ssl (its CA file given relative to the config file)."""
    tls = tls_of(activemq)
    workdir = tmp_path / "gateway"
    workdir.mkdir()
    shutil.copy(tls.ca_cert, workdir / "broker-ca.pem")
    config = f"""
[connectors.activemq]
uri = "{activemq.stomp_ssl_uri}"
tls_ca = "broker-ca.pem"
failure_retry_interval = 200
send_timeout = 10000

[[destinations]]
pattern = "/queue/jms.*"
connector = "activemq"
"""
    port = free_port()
    listen = f"ssl:{port}:interface=127.0.0.1:privateKey={tls.server_key}:certKey={tls.server_cert}"
    process = GatewayProcess(workdir, config, args=["--listen", listen]).start()
    wait_for_port(port, timeout=10)
    yield process, port, tls
    process.stop()


def test_stomp_clients_over_tls_end_to_end(
    tls_gateway: tuple[GatewayProcess, int, TlsFiles], activemq: ActiveMQBroker  # noqa: F811
) -> None:
    process, port, tls = tls_gateway
    clients = StompClients(("127.0.0.1", port))
    jms = JmsClient(activemq.openwire_url)
    try:
        sender = clients.connect(text=True, ca_certs=str(tls.ca_cert))
        receiver = clients.connect(ca_certs=str(tls.ca_cert))
        receiver.subscribe("/queue/tls.embedded")
        sender.send("/queue/tls.embedded", "embedded over TLS", receipt=True)
        assert receiver.message().body == b"embedded over TLS"
        queue = "/queue/" + unique("jms.tls")
        sender.send(queue, "TLS both ways", receipt=True)
        sender.send(queue, "forwarded over TLS")  # no receipt: the frame-to-frame path
        received = [jms.receive(queue, 5), jms.receive(queue, 5)]
        assert [message.body if message else None for message in received] == ["TLS both ways",
                                                                                "forwarded over TLS"]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:  # plain STOMP on the TLS port
            plain.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
            assert b"CONNECTED" not in plain.recv(4096)
        sender.send("/queue/tls.embedded", "still fine", receipt=True)
        assert receiver.message().body == b"still fine"
    finally:
        jms.close()
        clients.close()
    assert process.process is not None and process.process.poll() is None


def test_a_tls_listener_without_its_key_is_a_clear_startup_error(tmp_path: Path) -> None:
    listen = f"ssl:{free_port()}:interface=127.0.0.1:privateKey={tmp_path}/no-key.pem:certKey={tmp_path}/no-cert.pem"
    output = GatewayProcess(tmp_path / "gateway", args=["--listen", listen]).start_fails()
    assert f"jmsgateway cannot start: cannot listen on '{listen}'" in output
    assert "no-cert.pem" in output
