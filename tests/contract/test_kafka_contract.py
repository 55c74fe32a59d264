"""The connector contract for the Kafka connector against a real Kafka-protocol broker (Tansu).

Queues and topics are Kafka topics made for each test.  ``faulty_target`` is
a Tansu of its own behind a :class:`~tests.support.tcp_proxy.TcpProxy` (it
advertises the proxy): cutting the proxy is the cluster going away, and also
the stall of the flow-control test (librdkafka holds the records, the
connector counts them in flight), with a small producer queue so the
congestion comes after a few sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.connectors.kafka import KafkaConnector
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.message.model import Message
from tests.contract.connector_contract import ConnectorContract, Target, text, unique
from tests.support.kafka import TansuBroker, create_topics, group_settings, kafka_bootstrap, proxied_kafka, unique_topic
from tests.support.reactor_waits import in_thread, reactor, wait_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap", "proxied_kafka"]

QUICK_RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}


class KafkaTarget(Target):
    """A transactional Kafka connector to ``bootstrap`` (through ``proxy`` if given)."""

    def __init__(self, bootstrap: str, proxy: TcpProxy | None = None, producer: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.proxy = proxy
        settings = KafkaSettings.from_options({
            "uri": f"kafka://{proxy.address if proxy else bootstrap}",
            "consumer": {**group_settings(), **QUICK_RECONNECT},
            "producer": {**QUICK_RECONNECT, **(producer or {})},
            "transactional_id": f"tx-{unique_topic()}",
        })
        connector = KafkaConnector(reactor, settings, name="kafka", gateway_id=unique("gw"))
        super().__init__(connector)
        wait_for(connector.start)

    async def _created(self) -> str:
        topic = unique_topic("contract")
        await in_thread(create_topics, self.bootstrap, topic)
        await self.connector.check_topic(topic)  # type: ignore[attr-defined]
        return topic

    async def queue(self) -> str:
        return f"/queue/kafka.{await self._created()}"

    async def topic(self) -> str:
        return f"/topic/kafka.{await self._created()}"

    def refused(self, destination: str) -> Message:
        return text(f"/queue/kafka.{unique_topic('missing')}", "to a topic that does not exist")

    async def go_away(self) -> None:
        assert self.proxy is not None
        self.proxy.cut()

    async def come_back(self) -> KafkaConnector:
        assert self.proxy is not None
        self.proxy.restore()
        return self.connector  # type: ignore[return-value]

    def stall(self) -> None:
        assert self.proxy is not None
        self.proxy.cut()

    def flow(self) -> None:
        assert self.proxy is not None
        self.proxy.restore()

    def stop(self) -> None:
        wait_for(self.connector.stop)


class TestKafkaConnector(ConnectorContract):
    @pytest.fixture
    def target(self, kafka_bootstrap: str) -> Iterator[KafkaTarget]:
        target = KafkaTarget(kafka_bootstrap)
        yield target
        target.stop()

    @pytest.fixture
    def faulty_target(self, proxied_kafka: tuple[TansuBroker, TcpProxy]) -> Iterator[KafkaTarget]:
        broker, proxy = proxied_kafka
        # congested from 20 records in flight: the stall test needs only a few sends
        target = KafkaTarget(broker.bootstrap, proxy, producer={"queue.buffering.max.messages": 40,
                                                                 "message.timeout.ms": 60_000})
        target.stall_body = 100
        yield target
        target.stop()
