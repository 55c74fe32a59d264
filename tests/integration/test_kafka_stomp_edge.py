"""Kafka records at the STOMP edge of the real gateway process (Tansu): record headers no client
may read differently, header bytes that are not UTF-8, and acknowledging records that share one
``jms.MessageId``; raw sockets (tests/support/raw_stomp.py) read exactly what the gateway wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess
from tests.support.kafka import (
    committed_offsets,
    create_topics,
    group_settings,
    kafka_bootstrap,
    produce,
    unique_topic,
)
from tests.support.raw_stomp import RawStomp

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]


@pytest.fixture(scope="module")
def kafka_gateway(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    consumer = ", ".join(f'"{k}" = {v}' for k, v in group_settings().items())
    config = f"""
[connectors.kafka]
uri = "kafka://{kafka_bootstrap}"
consumer = {{ {consumer} }}

[[destinations]]
pattern = "/queue/kafka.*"
connector = "kafka"
"""
    process = GatewayProcess(tmp_path_factory.mktemp("kafka-edge"), config).start()
    yield process
    process.stop()


def subscribe(gateway: GatewayProcess, topic: str, version: str, ack: str) -> RawStomp:
    client = RawStomp(gateway.address, version)
    client.connect(version)
    client.send(f"SUBSCRIBE\nid:s1\ndestination:/queue/kafka.{topic}\nack:{ack}\nreceipt:sub\n\n\x00")
    assert client.frame().command == "RECEIPT"
    return client


def ack_frame(version: str, message: Frame, receipt: str) -> str:
    if version == "1.2":
        return f"ACK\nid:{message.headers['ack']}\nreceipt:{receipt}\n\n\x00"
    if version == "1.1":
        return f"ACK\nmessage-id:{message.headers['message-id']}\nsubscription:s1\nreceipt:{receipt}\n\n\x00"
    return f"ACK\nmessage-id:{message.headers['message-id']}\nreceipt:{receipt}\n\n\x00"


def wait_committed(bootstrap: str, topic: str, expected: int, timeout: float = 10.0) -> list[int]:
    group = f"jmsgateway.queue.{topic}"
    deadline = time.monotonic() + timeout
    while (offsets := committed_offsets(bootstrap, group, topic)) != [expected] and time.monotonic() < deadline:
        time.sleep(0.2)
    return offsets


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_record_headers_cannot_split_or_forge_a_message(
    kafka_gateway: GatewayProcess, kafka_bootstrap: str, version: str
) -> None:
    topic = unique_topic("edge")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": b"real", "headers": [
        ("jms.evil", b"a\x00MESSAGE"), ("plain.evil", b"b\x00MESSAGE"), ("jms.bin", b"\xff\xfe"),
        ("raw.bin", b"\x80"), ("jms.ok", b"fine")]}])
    consumer = subscribe(kafka_gateway, topic, version, "client-individual")
    message = consumer.frame(timeout=20)
    assert message.command == "MESSAGE" and message.body == b"real"
    assert message.headers["subscription"] == "s1"
    assert "evil" not in message.headers and "plain.evil" not in message.headers  # a NUL: left out
    # Header bytes that are not UTF-8 are a bytes property: their hex on STOMP (docs/stomp.md).
    assert message.headers["bin"] == "fffe" and message.headers["raw.bin"] == "80"
    assert message.headers["ok"] == "fine"
    consumer.send(ack_frame(version, message, "a1"))
    receipt = consumer.frame()  # no second (forged) MESSAGE before the RECEIPT
    assert receipt.command == "RECEIPT" and receipt.headers["receipt-id"] == "a1", receipt
    assert wait_committed(kafka_bootstrap, topic, 1) == [1]


@pytest.mark.parametrize("ack", ["client", "client-individual"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_acking_each_record_of_one_message_id_never_fails(
    kafka_gateway: GatewayProcess, kafka_bootstrap: str, version: str, ack: str
) -> None:
    topic = unique_topic("dup")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [
        {"value": f"copy{index}".encode(), "headers": [("jms.MessageId", b"ID:same"), ("jms.MessageType", b"text")]}
        for index in range(3)])
    consumer = subscribe(kafka_gateway, topic, version, ack)
    messages = [consumer.frame(timeout=20) for _ in range(3)]
    assert [m.body for m in messages] == [b"copy0", b"copy1", b"copy2"]
    assert {m.headers["message-id"] for m in messages} == {"ID:same"}
    for index, message in enumerate(messages):
        consumer.send(ack_frame(version, message, f"a{index}"))
        receipt = consumer.frame()
        assert receipt.command == "RECEIPT" and receipt.headers["receipt-id"] == f"a{index}", receipt
    assert wait_committed(kafka_bootstrap, topic, 3) == [3]


@pytest.mark.parametrize("acks", ["each", "latest"])
@pytest.mark.parametrize("ack", ["client", "client-individual"])
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_after_a_nack_acking_what_was_received_never_fails_and_commits(
    kafka_gateway: GatewayProcess, kafka_bootstrap: str, version: str, ack: str, acks: str
) -> None:
    """A NACK makes Kafka deliver again from that offset on: records still unacknowledged come a
    second time.  Acking every MESSAGE received, or only the latest copies, both work."""
    topic = unique_topic("nack")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": f"r{index}".encode()} for index in range(3)])
    consumer = subscribe(kafka_gateway, topic, version, ack)
    first = [consumer.frame(timeout=20) for _ in range(3)]
    assert [m.body for m in first] == [b"r0", b"r1", b"r2"]
    nack = ack_frame(version, first[0], "n0").replace("ACK\n", "NACK\n", 1)
    consumer.send(nack)
    received: list[Frame] = []
    while len(received) < 3:  # the RECEIPT and the three redelivered records, in any order
        frame = consumer.frame(timeout=20)
        if frame.command == "RECEIPT":
            assert frame.headers["receipt-id"] == "n0"
            continue
        assert frame.command == "MESSAGE", frame
        received.append(frame)
    assert [m.body for m in received] == [b"r0", b"r1", b"r2"]
    to_ack = first[1:] + received if acks == "each" else received
    for index, message in enumerate(to_ack):
        consumer.send(ack_frame(version, message, f"a{index}"))
        receipt = consumer.frame()
        assert receipt.command == "RECEIPT" and receipt.headers["receipt-id"] == f"a{index}", receipt
    assert wait_committed(kafka_bootstrap, topic, 3) == [3]
