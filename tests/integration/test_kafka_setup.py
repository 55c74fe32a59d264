"""Setting the gateway up for Kafka as docs/kafka.md shows it.

The "complete configuration" block of docs/kafka.md is loaded as it stands
(only the broker address replaced) and a message goes through each of its
destinations to Kafka and back; a ``[routing]`` route to a topic that does
not exist is reported at start-up, in the log and ``/health``, not at the
first SEND.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_admin import http
from tests.support.gateway import REPO, GatewayProcess
from tests.support.kafka import create_topics, group_settings, kafka_bootstrap, read_records, unique_topic
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]

DOC_ADDRESS = 'uri = "kafka://127.0.0.1:9092"'


def documented_config() -> str:
    """The toml block under "## A complete configuration" in docs/kafka.md."""
    text = (REPO / "docs" / "kafka.md").read_text()
    section = text.split("## A complete configuration", 1)[1]
    match = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert match is not None, "docs/kafka.md lost its complete configuration"
    return match.group(1)


def tansu_args() -> list[str]:
    """Consumer settings that make group joins quick on Tansu (tests/support/kafka.py)."""
    consumer = ", ".join(f'"{key}" = {value}' for key, value in group_settings().items())
    return [f"--set=connectors.kafka.consumer={{ {consumer} }}"] if consumer else []


def test_the_documented_configuration_moves_messages_through_kafka(
    make_gateway: Callable[..., GatewayProcess], kafka_bootstrap: str
) -> None:
    config = documented_config()
    assert config.count(DOC_ADDRESS) == 1
    create_topics(kafka_bootstrap, "prices", "orders", "billing-invoices")
    gateway = make_gateway(config.replace(DOC_ADDRESS, f'uri = "kafka://{kafka_bootstrap}"'), args=tansu_args())
    for destination, topic in (("/topic/kafka.prices", "prices"), ("/queue/kafka.orders", "orders"),
                               ("/queue/legacy.invoices", "billing-invoices")):
        body = f"{topic} {uuid.uuid4().hex}".encode()
        consumer = Client(gateway.address)
        producer = Client(gateway.address)
        try:
            consumer.subscribe(destination, "s", ack="client-individual")
            producer.send(destination, body, receipt=True)
            while True:  # (a Kafka kept from earlier runs may hold older records of the queue's group)
                frame = consumer.message(timeout=20)
                consumer.ack(frame)
                if frame.body == body:
                    break
            assert frame.headers["destination"] == destination
        finally:
            consumer.disconnect()
            producer.disconnect()
        assert body in [record.value() for record in read_records(kafka_bootstrap, topic, 1, timeout=5, settle=1)]


def test_a_route_to_a_missing_topic_is_reported_at_start_up(
    make_gateway: Callable[..., GatewayProcess], kafka_bootstrap: str, tmp_path: Path
) -> None:
    present, absent = unique_topic("routed"), unique_topic("never-created")
    create_topics(kafka_bootstrap, present)
    admin = free_port()
    gateway = make_gateway(f"""
[admin]
listen = "tcp:{admin}:interface=127.0.0.1"

[connectors.kafka]
uri = "kafka://{kafka_bootstrap}"

[[destinations]]
pattern = "/queue/orders.*"
connector = "kafka"

[routing]
[[routing.routes]]
name = "good"
include = "msg.address == '/queue/orders.good'"
topic = "{present}"

[[routing.routes]]
name = "typo"
include = "msg.address == '/queue/orders.typo'"
topic = "{absent}"
""")
    log = gateway.wait_for_log(f"route typo: kafka topic '{absent}' does not exist")
    assert f"'{present}' does not exist" not in log
    gateway.wait_for_log("admin endpoint on tcp:")
    status, document, _ = http(admin, "GET", "/health")
    assert status == 503
    detail = document["components"]["connectors"]["kafka"]["detail"]
    assert f"typo: {absent}" in detail and "do not exist" in detail
    assert http(admin, "GET", "/status")[1]["connectors"]["kafka"]["missing_topics"] == {"typo": absent}
    # the route that has its topic works meanwhile
    client = Client(gateway.address, text=True)
    try:
        client.send("/queue/orders.good", "fine", receipt=True)
    finally:
        client.disconnect()
    create_topics(kafka_bootstrap, absent)
    status, _, _ = http(admin, "POST", "/routing/restart")
    wait_until(lambda: http(admin, "GET", "/health")[0] == 200, what="UP once the topic exists")
