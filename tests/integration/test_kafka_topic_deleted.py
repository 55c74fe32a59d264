"""A Kafka topic deleted under a live STOMP subscription, against the real gateway process and Tansu.

librdkafka 2.16 crashes (SIGSEGV in ``rd_kafka_metadata_update_op``) on the fetch
answer Tansu gives for a deleted topic; the gateway must stay up, end the
subscription with an ERROR naming the topic, log it, answer ``/health``, and serve
the topic again once it is created again (a new SUBSCRIBE).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp

from tests.integration.test_kafka_stomp import kafka_config
from tests.support.gateway import GatewayProcess
from tests.support.kafka import create_topics, kafka_bootstrap, produce, unique_topic
from tests.support.ports import free_port
from tests.support.stomp_clients import Client, StompClients

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]


@pytest.fixture
def gateway(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[GatewayProcess, int]]:
    admin = free_port()
    config = kafka_config(kafka_bootstrap) + f'\n[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\n'
    process = GatewayProcess(tmp_path, config).start()
    yield process, admin
    process.stop()


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=15).values():
        future.result(15)


def connect(clients: StompClients, process: GatewayProcess) -> Client:
    """A STOMP connection; if the gateway refuses it, its exit status and log say why (seen once in CI)."""
    try:
        return clients.connect()
    except stomp.exception.ConnectFailedException:
        status = process.process.poll() if process.process is not None else None
        raise AssertionError(f"CONNECT failed (gateway exit status {status}):\n{process.log()[-3000:]}") from None


@pytest.mark.parametrize("destination", ["/queue/kafka.{}", "/topic/kafka.{}"])
def test_deleting_a_subscribed_topic_ends_the_subscription_not_the_gateway(
    gateway: tuple[GatewayProcess, int], kafka_bootstrap: str, destination: str
) -> None:
    process, admin = gateway
    topic = unique_topic("gone")
    create_topics(kafka_bootstrap, topic, partitions=2)
    clients = StompClients(process.address)
    try:
        client = connect(clients, process)
        client.subscribe(destination.format(topic), sub_id="s1", ack="client-individual")
        produce(kafka_bootstrap, topic, [{"value": b"before"}])
        assert client.message(timeout=20).body == b"before"

        delete_topic(kafka_bootstrap, topic)
        error = client.error(timeout=30)
        time.sleep(1.0)  # a crash takes the whole process down a moment later
        assert process.process is not None and process.process.poll() is None, (
            f"the gateway died when topic {topic} was deleted:\n{process.log()[-3000:]}")
        assert error is not None, "the subscriber must get an ERROR when its topic goes"
        assert topic.encode() in error.body, error.body
        assert topic in process.wait_for_log(f"to topic {topic} ended")

        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=10) as answer:
            assert json.load(answer)["status"] == "UP"

        # the topic comes back: a new subscription reads it
        create_topics(kafka_bootstrap, topic, partitions=2)
        again = connect(clients, process)
        again.subscribe(destination.format(topic), sub_id="s2", ack="auto")
        produce(kafka_bootstrap, topic, [{"value": b"after"}])
        assert again.message(timeout=20).body == b"after"
    finally:
        clients.close()
