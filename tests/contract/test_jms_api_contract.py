"""The connector contract for the ``jms`` connector (the JMS API in this process, JPype) against
the real ActiveMQ through its OpenWire client jars.

``faulty_target`` reaches ActiveMQ's OpenWire port through a
:class:`~tests.support.tcp_proxy.TcpProxy`, which cuts the connection (the provider
going away) or stops reading (a provider that does not keep up).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.connectors.jms_api import JmsConnector
from tests.contract.connector_contract import ConnectorContract, ProxiedTarget, unique
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.reactor_waits import reactor
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.activemq
__all__ = ["activemq"]

CLIENT_JARS = [f"/usr/share/activemq/lib/{jar}" for jar in (
    "activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar",
    "geronimo-j2ee-management-1.1-spec.jar")]


class JmsApiTarget(ProxiedTarget):
    """A ``jms`` connector to ActiveMQ over OpenWire, directly or through ``proxy``."""

    def __init__(self, broker: ActiveMQBroker, proxy: TcpProxy | None = None, **options: Any) -> None:
        url = f"tcp://127.0.0.1:{proxy.port}" if proxy else broker.openwire_url
        config = {"type": "jms", "classpath": CLIENT_JARS, "failure_retry_interval": 200, "send_timeout": 30_000,
                  "connection_factory": {"class": "org.apache.activemq.ActiveMQConnectionFactory",
                                         "properties": {"brokerURL": url, "watchTopicAdvisories": False}},
                  **options}
        connector = JmsConnector.from_config("jms", config, reactor=reactor, gateway_id=unique("gw"))
        super().__init__(connector, proxy)


class TestJmsApiConnector(ConnectorContract):
    @pytest.fixture
    def target(self, activemq: ActiveMQBroker) -> Iterator[JmsApiTarget]:
        target = JmsApiTarget(activemq)
        yield target
        target.stop()

    @pytest.fixture
    def faulty_target(self, activemq: ActiveMQBroker) -> Iterator[JmsApiTarget]:
        with TcpProxy("127.0.0.1", activemq.openwire_port, client_buffer=65536) as proxy:
            target = JmsApiTarget(activemq, proxy, max_pending_sends=50)
            yield target
            target.stop()
