"""End to end: stomp.py -> gateway process -> Kafka, and Kafka -> gateway -> stomp.py.

The gateway runs as a real ``twistd`` process with a Kafka connector on the
session's broker; records are written and read with plain confluent-kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.kafka import (
    TansuBroker,
    committed_offsets,
    create_topics,
    group_settings,
    kafka_bootstrap,
    produce,
    proxied_kafka,
    read_records,
    unique_topic,
)
from tests.support.stomp_clients import StompClients
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap", "proxied_kafka"]


def kafka_config(bootstrap: str) -> str:
    consumer = ", ".join(f'"{k}" = {v}' for k, v in group_settings().items())
    return f"""
[connectors.kafka]
uri = "kafka://{bootstrap}"
consumer = {{ {consumer} }}

[[destinations]]
pattern = "/topic/kafka.*"
connector = "kafka"

[[destinations]]
pattern = "/queue/kafka.*"
connector = "kafka"
"""


@pytest.fixture(scope="module")
def kafka_gateway(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("kafka-gateway"), kafka_config(kafka_bootstrap)).start()
    yield process
    process.stop()


@pytest.fixture
def clients(kafka_gateway: GatewayProcess) -> Iterator[StompClients]:
    made = StompClients(kafka_gateway.address)
    yield made
    made.close()


def test_send_reaches_kafka_with_jms_headers(clients: StompClients, kafka_bootstrap: str,
                                            kafka_gateway: GatewayProcess) -> None:
    topic = unique_topic("e2e")
    create_topics(kafka_bootstrap, topic)
    text_client = clients.connect(text=True)
    text_client.send(f"/topic/kafka.{topic}", "hello kafka", receipt=True, colour="red",
                     headers={"correlation-id": "c9"})
    binary_client = clients.connect()
    binary_client.send(f"/topic/kafka.{topic}", b"\x00\x01\x02", receipt=True)
    text_record, bytes_record = read_records(kafka_bootstrap, topic, 2, settle=0.5)
    headers = dict(text_record.headers())
    assert text_record.value() == b"hello kafka"
    assert headers["jms.MessageType"] == b"text" and headers["jms.colour"] == b"red"
    assert headers["jms.CorrelationId"] == b"c9"
    assert text_record.key() == headers["jms.MessageId"]
    # the installation's own id, generated once under data_dir (no two gateways share "jmsgateway")
    installation = (kafka_gateway.data_dir / "gateway.id").read_text().strip()
    assert installation.startswith("jmsgateway-")
    assert headers["jmsbridge.origin"] == installation.encode()
    assert bytes_record.value() == b"\x00\x01\x02"
    assert dict(bytes_record.headers())["jms.MessageType"] == b"bytes"


def test_send_to_missing_topic_gets_an_error(clients: StompClients) -> None:
    client = clients.connect(text=True)
    client.connection.send("/topic/kafka.never-created-topic", "x", headers={"receipt": "r-missing"})
    error = client.error(timeout=10)
    assert error is not None, "a send to a missing topic must get an ERROR, not silence"
    assert error.headers.get("receipt-id") == "r-missing"
    assert b"never-created-topic" in error.body and b"does not exist" in error.body
    assert not client.listener.receipt_event("r-missing").is_set()


@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
def test_kafka_records_reach_stomp_subscribers(
    clients: StompClients, kafka_bootstrap: str, ack: str, request: pytest.FixtureRequest
) -> None:
    topic = unique_topic("sub")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": f"r{i}".encode(), "headers": [("app", b"crm")]} for i in range(4)])
    client = clients.connect()
    client.subscribe(f"/queue/kafka.{topic}", sub_id="s1", ack=ack)
    frames = client.messages(4, timeout=20)
    assert [f.body for f in frames] == [f"r{i}".encode() for i in range(4)]
    assert frames[0].headers["app"] == "crm"
    group = f"jmsgateway.queue.{topic}"
    ack_frame: Callable[..., None] = client.ack
    if ack == "client":
        ack_frame(frames[2])  # cumulative: r0..r2
        expected = 3
    elif ack == "client-individual":
        for frame in (frames[0], frames[1], frames[3]):
            ack_frame(frame)
        expected = 2  # r2 is not acknowledged
    else:
        expected = 4
    deadline = time.monotonic() + 10
    while committed_offsets(kafka_bootstrap, group, topic) != [expected] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert committed_offsets(kafka_bootstrap, group, topic) == [expected]
    client.unsubscribe("s1")


def test_round_trip_through_kafka_keeps_headers_and_type(clients: StompClients, kafka_bootstrap: str) -> None:
    topic = unique_topic("round")
    create_topics(kafka_bootstrap, topic)
    subscriber = clients.connect()
    subscriber.subscribe(f"/topic/kafka.{topic}", sub_id="r1", ack="client-individual")
    sender = clients.connect(text=True)
    sender.send(f"/topic/kafka.{topic}", "über", receipt=True, colour="blue", headers={"correlation-id": "k-7"})
    binary = clients.connect()
    binary.send(f"/topic/kafka.{topic}", b"\xff\x00", receipt=True)
    text_frame, bytes_frame = subscriber.messages(2, timeout=20)
    assert text_frame.body == "über".encode() and text_frame.headers["colour"] == "blue"
    assert text_frame.headers["correlation-id"] == "k-7"
    assert text_frame.headers["destination"] == f"/topic/kafka.{topic}"
    assert text_frame.headers["message-id"] != bytes_frame.headers["message-id"]
    assert bytes_frame.body == b"\xff\x00"
    subscriber.ack(text_frame)
    subscriber.ack(bytes_frame)
    subscriber.unsubscribe("r1")


@pytest.mark.parametrize(("message_timeout_ms", "outage"), [(8000, 0.0), (1500, 2.5)],
                         ids=["short-cut", "cut-longer-than-message-timeout"])
def test_kafka_cut_mid_stream_stomp_senders_never_meet_silence(
    proxied_kafka: tuple[TansuBroker, TcpProxy], tmp_path: Path, message_timeout_ms: int, outage: float
) -> None:
    broker, proxy = proxied_kafka
    topic = unique_topic("cut")
    create_topics(broker.bootstrap, topic)
    config = kafka_config(broker.bootstrap).replace(
        "consumer = {",
        f'producer = {{ "message.timeout.ms" = {message_timeout_ms}, "reconnect.backoff.max.ms" = 300, '
        '"socket.connection.setup.timeout.ms" = 1000 }\nconsumer = {',
    )
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    clients = StompClients(gateway.address)
    sends: list[tuple[int, str, Any]] = []  # (seq, receipt id, client)
    try:
        client = clients.connect(text=True)
        total, cut_at, restore_at = 90, 30, 60
        for seq in range(total):
            if seq == cut_at:
                proxy.cut()
            if seq == restore_at:
                time.sleep(outage)
                proxy.restore()
            if client.listener.disconnected.is_set() or not client.connection.is_connected():
                client = clients.connect(text=True)  # the gateway closed the last one after an ERROR
            receipt = f"r-{seq}"
            client.listener.receipt_event(receipt)
            client.connection.send(f"/topic/kafka.{topic}", f"m{seq}", headers={"receipt": receipt, "seq": str(seq)})
            sends.append((seq, receipt, client))
            time.sleep(0.02)

        errors: dict[int, set[str]] = {}

        def answered(receipt: str, sender: Any) -> bool:
            if sender.listener.receipt_event(receipt).is_set():
                return True
            seen = errors.setdefault(id(sender), set())
            while (frame := sender.error(timeout=0)) is not None:
                seen.add(frame.headers.get("receipt-id", "?"))
            return receipt in seen or sender.listener.disconnected.is_set()

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(answered(r, c) for _, r, c in sends):
            time.sleep(0.2)
        silent = [seq for seq, r, c in sends if not answered(r, c)]
        assert not silent, f"sends without RECEIPT, ERROR or a closed connection: {silent}"
        receipted = {seq for seq, r, c in sends if c.listener.receipt_event(r).is_set()}
        records = read_records(broker.bootstrap, topic, len(receipted), timeout=30, settle=1.0)
        stored = {int(dict(r.headers())["jms.seq"]) for r in records}
        assert receipted <= stored, f"receipted but lost: {sorted(receipted - stored)}"
        late = set(range(restore_at + 10, total))
        assert late <= receipted, f"sends well after the restore must be receipted: {sorted(late - receipted)}\n" + (
            gateway.log()[-3000:])
        if outage:
            error_count = sum(len(seen) for seen in errors.values())
            assert error_count >= 1, "a cut longer than message.timeout.ms must give ERROR frames"
        else:
            assert receipted == set(range(total)), "a short cut only delays receipts"
    finally:
        clients.close()
        gateway.stop()
