"""A message over a ``stomp://`` connector's frame limit, produced at ActiveMQ itself, is no poison message.

A stomp.py client of ActiveMQ puts a message larger than the connector's ``max_frame_size`` on a queue,
then 100 small ones; a stomp.py client of the gateway subscribes to that queue through the connector.
Before: the connector's decoder refused the large MESSAGE and closed the connection, ActiveMQ put it back
and sent it again on the next connection, for ever (48 connections in 10 s), and none of the small ones
arrived.  Now: the small ones all arrive (through a bridge from that queue too), the large one is NACKed
and ActiveMQ (a stock broker: a STOMP NACK is a poison ack) puts it in ``ActiveMQ.DLQ``, the connection to
ActiveMQ is made once, ``/metrics`` counts the skipped message and the gateway's resident memory does not
grow by the message's size (its body is discarded as it streams in).

The connector subscribes ``client-individual`` at the broker whatever the gateway client's mode, so an
``auto`` client's oversized message is NACKed too (docs/jms.md, "Messages over the frame limit").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_admin import http
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port
from tests.support.stomp_clients import Client

pytestmark = pytest.mark.activemq

LIMIT = 1 << 20
SMALL = 100


class Setup:
    """A gateway whose ``amq`` connector has a 1 MiB frame limit, with its admin endpoint."""

    def __init__(self, broker: ActiveMQBroker, workdir: Path, extra: str = "") -> None:
        self.broker = broker
        self.admin = free_port()
        self.gateway = GatewayProcess(workdir, f"""
[admin]
listen = "tcp:{self.admin}:interface=127.0.0.1"

[connectors.amq]
uri = "{broker.stomp_uri}"
failure_retry_interval = 200
transformation = ""
max_frame_size = {LIMIT}

[[destinations]]
pattern = "/queue/poison.*"
connector = "amq"
{extra}""").start()
        self.gateway.wait_for_log("admin endpoint on tcp:")

    def produce(self, queue: str, big: int, *, text: bool) -> None:
        """At ActiveMQ directly: one persistent message of ``big`` bytes, then :data:`SMALL` small ones."""
        producer = Client(("127.0.0.1", self.broker.stomp_port), text=text)
        try:
            body = "p" * big if text else b"p" * big
            producer.send(queue, body, receipt=True, timeout=60, persistent="true",
                          headers={"correlation-id": queue})
            for index in range(SMALL):
                producer.send(queue, f"small {index}", persistent="true", receipt=index == SMALL - 1)
        finally:
            producer.disconnect()

    def metric(self, name: str, **labels: str) -> float:
        status, text, _ = http(self.admin, "GET", "/metrics")
        assert status == 200
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items()):
                    return sample.value
        return 0.0

    def connections(self) -> int:
        return self.gateway.log().count("connector amq: connected to")

    def peak_rss(self) -> int:
        """The gateway process's peak resident memory (VmHWM), in bytes."""
        assert self.gateway.process is not None
        for line in Path(f"/proc/{self.gateway.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")


@pytest.fixture
def setup(activemq: ActiveMQBroker, tmp_path: Path) -> Iterator[Setup]:  # noqa: F811
    made = Setup(activemq, tmp_path / "gateway")
    with stopped_after(made.gateway):
        yield made


@pytest.mark.parametrize("text", [False, True], ids=["bytes", "text"])
@pytest.mark.parametrize("ack", ["client-individual", "auto"])
def test_an_oversized_message_goes_to_the_dlq_and_the_ones_behind_it_arrive(
        setup: Setup, jms: JmsClient, ack: str, text: bool) -> None:
    queue = "/queue/poison." + uuid.uuid4().hex[:10]
    setup.produce(queue, 2 * LIMIT, text=text)
    consumer = Client(setup.gateway.address)
    try:
        consumer.subscribe(queue, ack=ack)
        received = consumer.messages(SMALL, timeout=30)
        assert [frame.body for frame in received] == [f"small {index}".encode() for index in range(SMALL)]
        if ack != "auto":
            for frame in received:
                consumer.ack(frame, receipt=False)
        dead = jms.receive("/queue/ActiveMQ.DLQ", 10, selector=f"JMSCorrelationID = '{queue}'")
        assert dead is not None and len(dead.body) == 2 * LIMIT
        assert consumer.no_message(0.5)
    finally:
        consumer.disconnect()
    assert setup.connections() == 1, setup.gateway.log()[-3000:]
    assert "lost connection" not in setup.gateway.log()
    assert setup.metric("jmsgateway_jms_broker_oversized_messages_total", connector="amq", outcome="nacked") == 1
    (warning,) = [line for line in setup.gateway.log().splitlines() if "over the frame limit" in line]
    assert f"from {queue} is " in warning and f"over the frame limit of {LIMIT} bytes" in warning


def test_a_40_mib_message_is_discarded_as_it_streams_in(setup: Setup, jms: JmsClient) -> None:
    """The gateway's peak resident memory grows by much less than the message (1 MiB limit, 40 MiB message)."""
    queue = "/queue/poison." + uuid.uuid4().hex[:10]
    consumer = Client(setup.gateway.address)
    try:
        consumer.subscribe(queue, ack="client-individual")
        warm = Client(("127.0.0.1", setup.broker.stomp_port))
        try:  # the path warmed up first: a few small messages through the connector
            for index in range(20):
                warm.send(queue, f"warm {index}", receipt=index == 19)
        finally:
            warm.disconnect()
        for frame in consumer.messages(20, timeout=30):
            consumer.ack(frame, receipt=False)
        before = setup.peak_rss()
        setup.produce(queue, 40 << 20, text=False)
        received = consumer.messages(SMALL, timeout=60)
        assert [frame.body for frame in received] == [f"small {index}".encode() for index in range(SMALL)]
        for frame in received:
            consumer.ack(frame, receipt=False)
        grown = setup.peak_rss() - before
        assert grown < 16 << 20, f"peak RSS grew by {grown / (1 << 20):.1f} MiB"
    finally:
        consumer.disconnect()
    dead = jms.receive("/queue/ActiveMQ.DLQ", 10, selector=f"JMSCorrelationID = '{queue}'")
    assert dead is not None and len(dead.body) == 40 << 20
    assert setup.connections() == 1
    print(f"peak RSS growth for a skipped 40 MiB message: {grown / (1 << 20):.1f} MiB")


def test_a_bridge_from_the_queue_copies_the_ones_behind_an_oversized_message(activemq: ActiveMQBroker,  # noqa: F811
                                                                            tmp_path: Path, jms: JmsClient) -> None:
    """A bridge whose source is the ``stomp://`` connector: the same subscription path, the same outcome."""
    source = "/queue/poison." + uuid.uuid4().hex[:10]
    target = "/queue/bridged." + uuid.uuid4().hex[:10]
    setup = Setup(activemq, tmp_path / "gateway", f"""
[[bridges]]
name = "poison"
source = {{ connector = "amq", destination = "{source}" }}
target = {{ connector = "embedded", destination = "{target}" }}
qos = "DUPLICATES_OK"
failure_retry_interval = 200
""")
    with stopped_after(setup.gateway):
        setup.produce(source, 2 * LIMIT, text=False)
        consumer = Client(setup.gateway.address)
        try:
            consumer.subscribe(target, ack="auto")
            received = consumer.messages(SMALL, timeout=30)
            assert sorted(frame.body for frame in received) == sorted(f"small {i}".encode() for i in range(SMALL))
        finally:
            consumer.disconnect()
        dead = jms.receive("/queue/ActiveMQ.DLQ", 10, selector=f"JMSCorrelationID = '{source}'")
        assert dead is not None and len(dead.body) == 2 * LIMIT
        assert setup.connections() == 1, setup.gateway.log()[-3000:]
        assert setup.metric("jmsgateway_jms_broker_oversized_messages_total", connector="amq", outcome="nacked") == 1
