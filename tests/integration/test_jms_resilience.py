"""The JMS broker connector when ActiveMQ goes away: kill -9 and restart (KahaDB).

Every send the broker receipted must be there after the restart; sends made
while the broker is away wait (bounded) and then complete or fail with an
error, never vanish; the connector reconnects and restores subscriptions by
itself, or gives up after ``max_retries``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.connectors.stomp_broker import StompBrokerConnector
from gateway.errors import ConnectorUnavailable, StaleDelivery
from gateway.interfaces import SubscriptionSpec
from gateway.message.model import TextMessage, new_message_id, now_millis
from tests.integration.test_jms_connector import ConnectorHarness
from tests.support.activemq import ActiveMQBroker, fresh_activemq  # noqa: F401
from tests.support.reactor_waits import sleep, until

pytestmark = pytest.mark.activemq


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def persistent_text(destination: str, body: str) -> TextMessage:
    return TextMessage(
        text=body, destination=destination, message_id=new_message_id(), timestamp=now_millis(), persistent=True
    )


@pytest.fixture
def harness(fresh_activemq: ActiveMQBroker) -> Iterator[ConnectorHarness]:  # noqa: F811
    harness = ConnectorHarness(fresh_activemq)
    yield harness
    harness.close()


@pytest.fixture
def down_harness(tmp_path: Path) -> Iterator[ConnectorHarness]:
    broker = ActiveMQBroker(tmp_path / "activemq")  # configured, not started
    harness = ConnectorHarness(broker)
    yield harness
    harness.close()
    broker.kill()


class Stream:
    """Sends persistent texts and records each outcome."""

    def __init__(self, connector: StompBrokerConnector, destination: str) -> None:
        self.connector = connector
        self.destination = destination
        self.sends: list[Deferred[Any]] = []
        self.outcomes: dict[str, str] = {}

    async def produce(self, count: int) -> None:
        for i in range(count):
            body = f"m{len(self.sends)}"
            send = self.connector.send(persistent_text(self.destination, body))
            send.addBoth(self._record, body)
            self.sends.append(send)
            if i % 10 == 9:
                await sleep(0.01)

    def _record(self, result: Any, body: str) -> None:
        self.outcomes[body] = "failed" if isinstance(result, Failure) else "ok"

    async def settle(self) -> None:
        await defer.DeferredList(self.sends, consumeErrors=True)


@pytest_twisted.ensureDeferred
async def test_broker_killed_mid_stream_loses_no_receipted_message(harness: ConnectorHarness) -> None:
    connector = await harness.started(failure_retry_interval=200, send_timeout=30_000)
    stream = Stream(connector, "/queue/" + unique("restart.stream"))
    await stream.produce(150)
    # Kill once most of them are receipted (on a busy host the receipts lag the sends).
    await until(lambda: sum(outcome == "ok" for outcome in stream.outcomes.values()) >= 100, timeout=30,
                what="100 receipts before the kill")
    harness.broker.kill()  # SIGKILL: KahaDB must hold every receipted message
    await stream.produce(100)  # these find the broker away: they wait, or fail with an error
    await sleep(0.5)
    harness.broker.start()
    await stream.settle()
    await until(lambda: connector.state == "connected")
    await stream.produce(50)
    await stream.settle()

    assert len(stream.outcomes) == 300
    confirmed = {body for body, outcome in stream.outcomes.items() if outcome == "ok"}
    failed = len(stream.outcomes) - len(confirmed)
    assert len(confirmed) >= 150, f"only {len(confirmed)} receipted, {failed} failed"
    after = {f"m{i}" for i in range(250, 300)}
    assert after <= confirmed, f"sends after the reconnect failed: {sorted(after - confirmed)[:10]}"
    received = harness.jms().receive_until_quiet(stream.destination, 2.0)
    missing = confirmed - {message.body for message in received}
    assert not missing, f"{len(missing)} receipted messages lost: {sorted(missing)[:10]}"
    assert connector.metrics.connects.labels("activemq")._value.get() >= 2
    assert connector.metrics.up.labels("activemq")._value.get() == 1


@pytest_twisted.ensureDeferred
async def test_subscriptions_are_restored_after_the_broker_restarts(harness: ConnectorHarness) -> None:
    connector = await harness.started(failure_retry_interval=200)
    queue_name = "/queue/" + unique("restart.sub")
    _, consumer = await harness.subscribe(connector, SubscriptionSpec(queue_name, ack_mode="client-individual"))
    harness.broker.kill()
    await until(lambda: connector.state == "retrying")
    harness.broker.start()
    await until(lambda: connector.state == "connected")
    harness.jms().send_text(queue_name, "after restart")
    (delivery,) = await consumer.take(1)
    assert isinstance(delivery[0], TextMessage) and delivery[0].text == "after restart"
    assert consumer.failures == []


@pytest_twisted.ensureDeferred
async def test_unacked_delivery_comes_again_after_reconnect_and_old_tag_is_harmless(harness: ConnectorHarness) -> None:
    connector = await harness.started(failure_retry_interval=200)
    queue_name = "/queue/" + unique("restart.unacked")
    spec = SubscriptionSpec(queue_name, ack_mode="client-individual")
    subscription, consumer = await harness.subscribe(connector, spec)
    harness.jms().send_text(queue_name, "pending", persistent=True)
    (first,) = await consumer.take(1)
    harness.broker.kill()
    await until(lambda: connector.state == "retrying")
    harness.broker.start()
    (second,) = await consumer.take(1, timeout=20)
    assert isinstance(second[0], TextMessage) and second[0].text == "pending"
    await subscription.ack([first[1]])  # a tag of the lost connection: ignored
    await subscription.ack([second[1]])
    assert await consumer.nothing_more()


@pytest_twisted.ensureDeferred
async def test_with_strict_acks_an_old_tag_is_refused(harness: ConnectorHarness) -> None:
    """A bridge's subscription: acking a delivery of the lost connection fails (issue 25)."""
    connector = await harness.started(failure_retry_interval=200)
    queue_name = "/queue/" + unique("restart.strict")
    spec = SubscriptionSpec(queue_name, ack_mode="client-individual", strict_acks=True)
    subscription, consumer = await harness.subscribe(connector, spec)
    harness.jms().send_text(queue_name, "pending", persistent=True)
    (first,) = await consumer.take(1)
    harness.broker.kill()
    await until(lambda: connector.state == "retrying")
    harness.broker.start()
    (second,) = await consumer.take(1, timeout=20)
    with pytest.raises(StaleDelivery):
        await subscription.ack([first[1]])
    await subscription.ack([second[1]])
    assert await consumer.nothing_more()


@pytest_twisted.ensureDeferred
async def test_send_while_broker_away_fails_after_send_timeout(harness: ConnectorHarness) -> None:
    connector = await harness.started(failure_retry_interval=200, send_timeout=800)
    harness.broker.kill()
    await until(lambda: connector.state == "retrying")
    started = time.monotonic()
    with pytest.raises(ConnectorUnavailable, match="no confirmation"):
        await connector.send(persistent_text("/queue/" + unique("restart.timeout"), "late"))
    assert 0.5 < time.monotonic() - started < 5
    assert connector.status()["waiting_sends"] == 0


@pytest_twisted.ensureDeferred
async def test_connector_gives_up_after_max_retries(harness: ConnectorHarness) -> None:
    connector = await harness.started(failure_retry_interval=100, max_retries=2)
    _, consumer = await harness.subscribe(connector, SubscriptionSpec("/queue/" + unique("restart.giveup")))
    harness.broker.kill()
    await until(lambda: connector.state == "failed")
    assert len(consumer.failures) == 1 and isinstance(consumer.failures[0], ConnectorUnavailable)
    with pytest.raises(ConnectorUnavailable, match="gave up"):
        await connector.send(persistent_text("/queue/x", "refused at once"))
    assert connector.status()["state"] == "failed"


@pytest_twisted.ensureDeferred
async def test_waiting_send_fails_when_the_connector_gives_up(harness: ConnectorHarness) -> None:
    connector = await harness.started(failure_retry_interval=300, max_retries=1, send_timeout=30_000)
    harness.broker.kill()
    await until(lambda: connector.state == "retrying")
    with pytest.raises(ConnectorUnavailable, match="gave up"):
        await connector.send(persistent_text("/queue/x", "waits, then fails"))


@pytest_twisted.ensureDeferred
async def test_start_fails_when_no_retries_are_allowed(down_harness: ConnectorHarness) -> None:
    connector = down_harness.connector(max_retries=0)
    with pytest.raises(ConnectorUnavailable):
        await connector.start()


@pytest_twisted.ensureDeferred
async def test_sends_wait_for_a_broker_that_comes_up_later(down_harness: ConnectorHarness) -> None:
    connector = await down_harness.started(failure_retry_interval=200, send_timeout=30_000)
    assert connector.state in ("retrying", "connecting")
    queue_name = "/queue/" + unique("late.start")
    results: list[Any] = []

    connector.send(persistent_text(queue_name, "waited")).addBoth(results.append)
    await sleep(0.3)
    assert results == []
    down_harness.broker.start()
    await until(lambda: bool(results))
    assert results == [None]
    received = down_harness.jms().receive(queue_name, 5)
    assert received is not None and received.body == "waited"
