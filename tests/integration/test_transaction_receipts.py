"""A COMMIT's RECEIPT means every SEND of the transaction is at its target.

BEGIN, SENDs, COMMIT with a receipt, then SIGKILL of the gateway process
right after the RECEIPT: every SEND of the transaction must be readable at its
target - Kafka (Tansu), ActiveMQ through the ``stomp://`` connector, the
embedded broker's SQLite store, and all three in one transaction.  An ABORT
writes nothing anywhere.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_kafka_stomp import kafka_config
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.gateway import GatewayProcess
from tests.support.kafka import create_topics, kafka_bootstrap, read_records, unique_topic
from tests.support.stomp_clients import Client, StompClients

pytestmark = [pytest.mark.kafka, pytest.mark.activemq]
__all__ = ["activemq", "kafka_bootstrap"]


def mixed_config(bootstrap: str, broker: ActiveMQBroker) -> str:
    """Kafka at /queue/kafka.*, ActiveMQ at /queue/jms.*, the rest embedded in SQLite."""
    return kafka_config(bootstrap) + f"""
[connectors.activemq]
uri = "{broker.stomp_uri}"
failure_retry_interval = 200

[[destinations]]
pattern = "/queue/jms.*"
connector = "activemq"
"""


@pytest.fixture
def gateway(kafka_bootstrap: str, activemq: ActiveMQBroker, tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path / "gw", mixed_config(kafka_bootstrap, activemq),
                             args=["--set", "broker.persistence=sqlite"]).start()
    yield process
    process.kill()


def transaction(gateway: GatewayProcess, sends: list[tuple[str, str]], *, commit: bool = True) -> None:
    """One connection: BEGIN, persistent SENDs (destination, body), COMMIT (or ABORT) with a
    receipt awaited, then SIGKILL of the gateway at once."""
    clients = StompClients(gateway.address)
    try:
        client = clients.connect(text=True)
        client.begin("tx")
        for destination, body in sends:
            client.connection.send(destination, body, headers={"transaction": "tx", "persistent": "true"})
        if commit:
            client.commit("tx")
        else:
            client.abort("tx")
        gateway.kill()
    finally:
        clients.close()


def drain(reader: Client, count: int) -> list[bytes]:
    """The bodies ``reader`` receives: up to ``count`` (2 s each), then any extra within 0.5 s."""
    bodies: list[bytes] = []
    while True:
        try:
            frame = reader.listener.messages.get(timeout=2.0 if len(bodies) < count else 0.5)
        except queue.Empty:
            return bodies
        bodies.append(frame.body)


def activemq_bodies(broker: ActiveMQBroker, destination: str, count: int) -> list[bytes]:
    """What ActiveMQ holds on ``destination`` (read over its own STOMP port, at most ``count`` + 1)."""
    clients = StompClients(("127.0.0.1", broker.stomp_port))
    try:
        reader = clients.connect(version="1.1")
        reader.subscribe(destination, "r")
        return drain(reader, count)
    finally:
        clients.close()


def embedded_bodies(gateway: GatewayProcess, destination: str, count: int) -> list[bytes]:
    """What the restarted gateway's embedded queue holds (at most ``count`` + 1)."""
    gateway.start()
    clients = StompClients(gateway.address)
    try:
        reader = clients.connect()
        reader.subscribe(destination, "r")
        return drain(reader, count)
    finally:
        clients.close()


@pytest.mark.parametrize("count", [3, 200])
def test_commit_receipt_waits_for_every_kafka_record(gateway: GatewayProcess, kafka_bootstrap: str,
                                                     count: int) -> None:
    topic = unique_topic("tx")
    create_topics(kafka_bootstrap, topic)
    transaction(gateway, [(f"/queue/kafka.{topic}", f"m{i}") for i in range(count)])
    records = read_records(kafka_bootstrap, topic, count, timeout=10, settle=0.5)
    assert sorted(r.value() for r in records) == sorted(f"m{i}".encode() for i in range(count))


def test_commit_receipt_waits_for_the_jms_broker(gateway: GatewayProcess, activemq: ActiveMQBroker) -> None:
    queue = f"/queue/jms.tx-{uuid.uuid4().hex[:8]}"
    transaction(gateway, [(queue, f"m{i}") for i in range(3)])
    assert activemq_bodies(activemq, queue, 3) == [b"m0", b"m1", b"m2"]


def test_commit_receipt_waits_for_every_target_of_a_mixed_transaction(
    gateway: GatewayProcess, kafka_bootstrap: str, activemq: ActiveMQBroker
) -> None:
    topic = unique_topic("txmix")
    create_topics(kafka_bootstrap, topic)
    suffix = uuid.uuid4().hex[:8]
    jms_queue, embedded_queue = f"/queue/jms.txmix-{suffix}", f"/queue/txmix-{suffix}"
    sends = []
    for i in range(3):
        sends += [(f"/queue/kafka.{topic}", f"k{i}"), (jms_queue, f"j{i}"), (embedded_queue, f"e{i}")]
    transaction(gateway, sends)
    assert sorted(r.value() for r in read_records(kafka_bootstrap, topic, 3, timeout=10, settle=0.5)) == [
        b"k0", b"k1", b"k2"]
    assert activemq_bodies(activemq, jms_queue, 3) == [b"j0", b"j1", b"j2"]
    assert embedded_bodies(gateway, embedded_queue, 3) == [b"e0", b"e1", b"e2"]


def test_abort_writes_nothing_anywhere(gateway: GatewayProcess, kafka_bootstrap: str,
                                       activemq: ActiveMQBroker) -> None:
    topic = unique_topic("txabort")
    create_topics(kafka_bootstrap, topic)
    suffix = uuid.uuid4().hex[:8]
    jms_queue, embedded_queue = f"/queue/jms.txabort-{suffix}", f"/queue/txabort-{suffix}"
    transaction(gateway, [(f"/queue/kafka.{topic}", "k"), (jms_queue, "j"), (embedded_queue, "e")], commit=False)
    assert read_records(kafka_bootstrap, topic, 1, timeout=2) == []
    assert activemq_bodies(activemq, jms_queue, 0) == []
    assert embedded_bodies(gateway, embedded_queue, 0) == []
