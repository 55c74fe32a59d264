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
import pytest_twisted
from twisted.logger import formatEvent, globalLogPublisher

from gateway.connectors.jms_api import JmsConnector
from gateway.errors import ConnectorUnavailable
from gateway.interfaces import SubscriptionSpec
from tests.contract.connector_contract import ConnectorContract, ProxiedTarget, subscribe, text, texts, unique
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.log_events import observer
from tests.support.reactor_waits import reactor, sleep, until
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


# -- reconnection limits (issue 19: reconnect every failure_retry_interval up to max_retries) ----------


@pytest.fixture
def giving_up_target(activemq: ActiveMQBroker) -> Iterator[JmsApiTarget]:
    with TcpProxy("127.0.0.1", activemq.openwire_port) as proxy:
        target = JmsApiTarget(activemq, proxy, max_retries=2, failure_retry_interval=100)
        yield target
        target.stop()


@pytest.fixture
def proxied_target(activemq: ActiveMQBroker) -> Iterator[JmsApiTarget]:
    with TcpProxy("127.0.0.1", activemq.openwire_port) as proxy:
        target = JmsApiTarget(activemq, proxy)
        yield target
        target.stop()


@pytest_twisted.ensureDeferred
async def test_the_connector_gives_up_after_max_retries(giving_up_target: JmsApiTarget) -> None:
    """The provider stays away: the connector retries ``max_retries`` times, then is failed
    (health DOWN naming the provider), a waiting send fails, the subscription ends, and the
    log says so naming the provider URL."""
    target = giving_up_target
    proxy, connector = target._proxy(), target.connector
    assert isinstance(connector, JmsConnector)
    lines: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observer(observe))
    try:
        queue = await target.queue()
        _, consumer = await subscribe(connector, SubscriptionSpec(queue))
        await target.go_away()
        waiting = connector.send(text(queue, "never"))
        await until(lambda: connector.state == "failed", timeout=30, what="the connector to give up")
        with pytest.raises(ConnectorUnavailable):
            await waiting
        health = connector.health()
        assert not health.up and proxy.address in health.detail, health.detail
        assert consumer.failures and isinstance(consumer.failures[0], ConnectorUnavailable)
        assert connector.failed_attempts == 3
        log = "\n".join(lines)
        assert f"lost connection to tcp://{proxy.address}" in log, log
        assert f"giving up on tcp://{proxy.address} after 2 retries" in log, log
    finally:
        globalLogPublisher.removeObserver(observer(observe))


@pytest_twisted.ensureDeferred
async def test_a_subscription_made_while_the_provider_is_away_starts_when_it_is_back(
        proxied_target: JmsApiTarget) -> None:
    """Made while the connection is down: it waits (no failure) and starts on the reconnection;
    a send made meanwhile waits and is delivered to it."""
    target = proxied_target
    connector = target.connector
    queue = await target.queue()
    await target.go_away()
    _, consumer = await subscribe(connector, SubscriptionSpec(queue))
    sent = connector.send(text(queue, "while away"))
    await sleep(0.5)
    assert not sent.called
    await target.come_back()
    await sent
    assert texts(await consumer.take(1, timeout=30)) == ["while away"]
    assert consumer.failures == []


@pytest_twisted.ensureDeferred
async def test_the_browse_probe_waits_for_the_provider_and_a_topic_cannot_tell(proxied_target: JmsApiTarget) -> None:
    """The in-doubt probe (a QueueBrowser) asked while the provider is away answers once it is
    back; a topic keeps nothing to browse (None: cannot tell)."""
    from gateway.bridges.probe import held_message_ids
    from gateway.message.model import DUPLICATE_ID

    target = proxied_target
    connector = target.connector
    queue = await target.queue()
    copy = text(queue, "copy")
    copy.properties[DUPLICATE_ID] = "ID:bridge-b:ID:source-1"
    await connector.send(copy)
    assert await held_message_ids(connector, await target.topic()) is None
    await target.go_away()
    asked = held_message_ids(connector, queue)
    await sleep(0.5)
    assert not asked.called
    await target.come_back()
    assert await asked == {"ID:bridge-b:ID:source-1"}


@pytest_twisted.ensureDeferred
async def test_a_message_the_provider_cannot_take_is_refused_for_good(proxied_target: JmsApiTarget) -> None:
    """A type JMS cannot carry, a property that cannot be typed, alone or in a batch: the send
    fails with MessageRefused (permanent: a bridge fails at once instead of retrying for ever)."""
    from gateway.errors import MessageRefused

    target = proxied_target
    connector = target.connector
    queue = await target.queue()
    untyped = text(queue, "untyped", n="not a number")
    untyped.properties["jmsgateway.types"] = '{"n": "int"}'
    for refused in (target.refused(queue), untyped):
        with pytest.raises(MessageRefused):
            await connector.send(refused)
        with pytest.raises(MessageRefused):
            await connector.send_batch([text(queue, "fine"), refused])
    _, consumer = await subscribe(connector, SubscriptionSpec(queue))
    assert await consumer.nothing_more(1.0)
