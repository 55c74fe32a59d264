"""The connector contract for the ``stomp://`` connector against the real ActiveMQ.

The session's ActiveMQ serves every test; ``faulty_target`` reaches it through
a :class:`~tests.support.tcp_proxy.TcpProxy`, which cuts the connection (the
broker going away) or stops reading (a broker that does not keep up).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted

from gateway.connectors.stomp_broker import StompBrokerConnector
from tests.contract.connector_contract import ConnectorContract, ProxiedTarget, text, unique
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.reactor_waits import reactor
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.activemq
__all__ = ["activemq"]


class ActiveMQTarget(ProxiedTarget):
    """A ``stomp://`` connector to ActiveMQ, directly or through ``proxy``."""

    def __init__(self, broker: ActiveMQBroker, proxy: TcpProxy | None = None, **options: Any) -> None:
        uri = f"stomp://127.0.0.1:{proxy.port}" if proxy else broker.stomp_uri
        config = {"uri": uri, "failure_retry_interval": 200, "send_timeout": 30_000, **options}
        connector = StompBrokerConnector.from_config("activemq", config, reactor=reactor, gateway_id=unique("gw"))
        super().__init__(connector, proxy)


class TestStompBrokerConnector(ConnectorContract):
    @pytest.fixture
    def target(self, activemq: ActiveMQBroker) -> Iterator[ActiveMQTarget]:
        target = ActiveMQTarget(activemq)
        yield target
        target.stop()

    @pytest.fixture
    def faulty_target(self, activemq: ActiveMQBroker) -> Iterator[ActiveMQTarget]:
        with TcpProxy("127.0.0.1", activemq.stomp_port, client_buffer=65536) as proxy:
            target = ActiveMQTarget(activemq, proxy, heartbeat=[0, 0])  # a stall must not look like a dead peer
            yield target
            target.stop()

    @pytest_twisted.ensureDeferred
    async def test_the_in_doubt_probe_cannot_answer_for_a_topic_or_a_queue_over_its_bound(
            self, target: ActiveMQTarget, monkeypatch: pytest.MonkeyPatch) -> None:
        """A topic keeps nothing to browse; a queue deeper than the bound is not browsed to its end:
        both answer None ("cannot tell"), never a partial set taken for the whole."""
        import gateway.connectors.stomp_broker as stomp_broker
        from gateway.bridges.probe import held_message_ids, why_cannot_tell

        connector = target.connector
        topic, queue = await target.topic(), await target.queue()
        assert why_cannot_tell(connector, queue) is None
        assert "not a queue" in (why_cannot_tell(connector, topic) or "")
        assert await held_message_ids(connector, topic) is None
        await connector.send_batch([text(queue, f"d{i}") for i in range(5)])
        monkeypatch.setattr(stomp_broker, "BROWSE_LIMIT", 4)
        assert await held_message_ids(connector, queue) is None
        monkeypatch.setattr(stomp_broker, "BROWSE_LIMIT", 5)
        assert await held_message_ids(connector, queue) == set()
