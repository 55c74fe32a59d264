"""Kafka consumer lag per subscription on /metrics: a real gateway process, a real Tansu broker, stomp.py.

``jmsgateway_kafka_consumer_lag{connector, topic, group}`` is the records of the topic after the
subscription's committed offsets: records produced and not yet acknowledged by the STOMP client count,
acknowledged ones stop counting once committed.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.kafka import create_topics, group_settings, kafka_bootstrap, produce, unique_topic
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]

LAG = re.compile(r'^jmsgateway_kafka_consumer_lag\{connector="kafka",group="([^"]+)",topic="([^"]+)"\} (\S+)$', re.M)


@pytest.fixture
def gateway(kafka_bootstrap: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    consumer = ", ".join(f'"{k}" = {v}' for k, v in group_settings().items())
    admin = free_port()
    process = GatewayProcess(tmp_path, f'[admin]\nlisten = "tcp:{admin}:interface=127.0.0.1"\n'
                             f'[connectors.kafka]\nuri = "kafka://{kafka_bootstrap}"\nconsumer = {{ {consumer} }}\n'
                             '[[destinations]]\npattern = "/topic/kafka.*"\nconnector = "kafka"\n')
    process.admin_port = admin  # type: ignore[attr-defined]
    with stopped_after(process.start()):
        yield process


def lag_of(gateway: GatewayProcess, topic: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.admin_port}/metrics", timeout=10) as reply:  # type: ignore[attr-defined]
        text = reply.read().decode()
    found = [float(value) for _, seen, value in LAG.findall(text) if seen == topic]
    return found[0] if found else None


def produce_one_by_one(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records, one batch each: Tansu's ListOffsets answers a topic's end as its last batch's
    first offset + 1 (a real Kafka gives the end); one-record batches make that the end."""
    for number in range(count):
        produce(bootstrap, topic, [{"value": f"r{number}".encode()}])


def test_consumer_lag_counts_the_records_after_the_committed_offset(gateway: GatewayProcess,
                                                                     kafka_bootstrap: str) -> None:
    topic = unique_topic("lag")
    create_topics(kafka_bootstrap, topic)
    client = Client(gateway.address)
    client.subscribe(f"/topic/kafka.{topic}", ack="client-individual", headers={"activemq.prefetchSize": "5"})
    wait_until(lambda: lag_of(gateway, topic) == 0, 30, "the subscription's lag reported, 0 before any record")
    produce_one_by_one(kafka_bootstrap, topic, 20)
    frames = client.messages(5, timeout=30)  # the prefetch: 5 delivered, none acknowledged
    wait_until(lambda: lag_of(gateway, topic) == 20, 30, "a lag of 20 (nothing acknowledged)")
    for frame in frames:
        client.ack(frame)
    wait_until(lambda: lag_of(gateway, topic) == 15, 30, "a lag of 15 once 5 are acknowledged")
    produce_one_by_one(kafka_bootstrap, topic, 10)
    wait_until(lambda: lag_of(gateway, topic) == 25, 30, "a lag of 25 after 10 more records")
    client.disconnect()
    wait_until(lambda: lag_of(gateway, topic) is None, 30, "no lag line once the subscription is gone")
