"""Resent SENDs to a Kafka-backed queue (issue 35 #2): the real stomp.py client, a real gateway
process in front of the real Tansu.  SENDs marked ``x-dedup-id`` (and Artemis' ``_AMQ_DUPL_ID``)
are receipted, the gateway restarts (SIGKILL, then a new process: its window is rebuilt from the
topic's tail), the client resends them all, plus some without a key: the topic holds one record
per key and two per unkeyed message.  Counted by id in the topic at the end.
"""

from __future__ import annotations

import collections
import threading
import uuid
from pathlib import Path
from typing import Any

import stomp

from tests.support.gateway import GatewayProcess
from tests.support.kafka import create_topics, kafka_bootstrap, read_records, unique_topic
from tests.support.waiting import wait_until

__all__ = ["kafka_bootstrap"]

KEYED, ARTEMIS, PLAIN = 10, 5, 3


def config(bootstrap: str) -> str:
    return f"""
[connectors.kafka]
uri = "kafka://{bootstrap}"

[[destinations]]
pattern = "/queue/kafka.*"
connector = "kafka"
"""


class Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: set[str] = set()
        self.errors: list[Any] = []

    def on_receipt(self, frame: Any) -> None:
        with self.lock:
            self.got.add(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame)


def send_all(gateway: GatewayProcess, queue: str, messages: list[tuple[str, dict[str, str]]]) -> None:
    """SEND each of ``messages`` (body, headers) with a receipt; wait for all RECEIPTs."""
    listener = Receipts()
    connection: Any = stomp.Connection12([gateway.address], auto_decode=True)
    connection.set_listener("receipts", listener)
    connection.connect(wait=True)
    try:
        receipts = []
        for body, headers in messages:
            receipt = uuid.uuid4().hex
            receipts.append(receipt)
            connection.send(queue, body, headers={"persistent": "true", "receipt": receipt, **headers})
        wait_until(lambda: set(receipts) <= listener.got or bool(listener.errors), 60, "every SEND receipted")
        assert not listener.errors, listener.errors[0].body
    finally:
        connection.disconnect()


def test_a_resend_after_a_gateway_restart_produces_no_second_record(tmp_path: Path, kafka_bootstrap: str) -> None:
    topic = unique_topic("dedup")
    create_topics(kafka_bootstrap, topic, partitions=2)
    queue = f"/queue/kafka.{topic}"
    messages = ([(f"keyed-{n}", {"x-dedup-id": f"keyed-{n}"}) for n in range(KEYED)]
                + [(f"artemis-{n}", {"_AMQ_DUPL_ID": f"artemis-{n}"}) for n in range(ARTEMIS)]
                + [(f"plain-{n}", {}) for n in range(PLAIN)])
    gateway = GatewayProcess(tmp_path / "gw", config(kafka_bootstrap)).start()
    try:
        send_all(gateway, queue, messages)
        send_all(gateway, queue, messages[:3])  # the same gateway: its own window
        gateway.kill()  # a crash: nothing flushed, the window is in memory only
        gateway.start()
        send_all(gateway, queue, messages)  # every one resent after the restart
        # the aliases of the topic are one destination for the window
        send_all(gateway, f"/topic/kafka.{topic}", messages[:2])
        log = gateway.log()
    finally:
        gateway.kill()
    expected = KEYED + ARTEMIS + 2 * PLAIN
    records = read_records(kafka_bootstrap, topic, expected, settle=2.0)
    counts = collections.Counter(record.value().decode() for record in records)
    twice = {body for body, count in counts.items() if count > 1 and not body.startswith("plain-")}
    assert not twice, f"keyed messages stored twice: {sorted(twice)}"
    assert {body for body, _ in messages} == set(counts)
    assert all(counts[f"plain-{n}"] == 2 for n in range(PLAIN)), counts  # no key: stored again (what it is for)
    assert len(records) == expected
    assert "read back from the tail of topic" in log


def test_a_transaction_resent_leaves_out_what_is_stored(tmp_path: Path, kafka_bootstrap: str) -> None:
    topic = unique_topic("dedup-tx")
    create_topics(kafka_bootstrap, topic)
    queue = f"/queue/kafka.{topic}"
    gateway = GatewayProcess(tmp_path / "gw", config(kafka_bootstrap)).start()
    try:
        listener = Receipts()
        connection: Any = stomp.Connection12([gateway.address], auto_decode=True)
        connection.set_listener("receipts", listener)
        connection.connect(wait=True)
        for bodies in (["a", "b"], ["a", "b", "c"]):  # the second COMMIT resends a and b
            transaction = connection.begin()
            for body in bodies:
                connection.send(queue, body, headers={"x-dedup-id": body}, transaction=transaction)
            receipt = uuid.uuid4().hex
            connection.commit(transaction, headers={"receipt": receipt})

            def answered(receipt: str = receipt) -> bool:
                return receipt in listener.got or bool(listener.errors)

            wait_until(answered, 60, "the COMMIT receipted")
        assert not listener.errors, listener.errors[0].body
        connection.disconnect()
    finally:
        gateway.kill()
    records = read_records(kafka_bootstrap, topic, 3, settle=2.0)
    assert sorted(record.value().decode() for record in records) == ["a", "b", "c"]
