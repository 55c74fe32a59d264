"""The ActiveMQ fixture and the JPype JMS client against the real broker.

These prove the test infrastructure itself: JMS messages of every type
round-trip with their headers and typed properties, ActiveMQ types STOMP
SENDs by ``content-length`` as the design says, and a killed KahaDB broker
comes back on the same ports with its persistent messages.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import stomp

from tests.support.activemq import ActiveMQBroker, activemq, fresh_activemq  # noqa: F401
from tests.support.jms_client import JmsClient

pytestmark = pytest.mark.activemq


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def test_text_message_round_trip_keeps_headers_and_typed_properties(jms: JmsClient) -> None:
    queue = "/queue/" + unique("support.text")
    sent_id = jms.send_text(
        queue,
        "héllo wörld",
        correlation_id="corr-1",
        reply_to="/queue/replies",
        jms_type="greeting",
        priority=7,
        time_to_live=60_000,
        persistent=True,
        properties={"s": "str", "i": 42, "l": 2**40, "d": 1.5, "b": True},
    )
    received = jms.receive(queue, 5)
    assert received is not None
    assert received.jms_type == "text"
    assert received.body == "héllo wörld"
    assert received.message_id == sent_id
    assert received.destination == queue
    assert received.correlation_id == "corr-1"
    assert received.reply_to == "/queue/replies"
    assert received.type == "greeting"
    assert received.priority == 7
    assert received.persistent is True
    assert received.expiration > received.timestamp > 0
    assert received.properties == {"s": "str", "i": 42, "l": 2**40, "d": 1.5, "b": True}


def test_bytes_map_object_stream_messages_are_described_by_type(jms: JmsClient) -> None:
    queue = "/queue/" + unique("support.types")
    jms.send_bytes(queue, b"\x00\x01binary\xff", persistent=False)
    jms.send_map(queue, {"name": "widget", "count": 3, "price": 9.5, "ok": False, "raw": b"\x01\x02"})
    jms.send_object(queue, "a java string")
    jms.send_stream(queue, ["x", 1, 2.5, True])
    # A broker may pass a non-persistent message ahead of persistent ones: compare by type.
    received = {message.jms_type: message for message in jms.receive_all(queue, 4)}
    assert sorted(received) == ["bytes", "map", "object", "stream"]
    assert received["bytes"].body == b"\x00\x01binary\xff"
    assert received["bytes"].persistent is False
    assert received["map"].body == {
        "name": "widget",
        "count": 3,
        "price": 9.5,
        "ok": False,
        "raw": b"\x01\x02",
    }
    assert received["object"].body == "a java string"
    assert received["stream"].body == ["x", 1, 2.5, True]


def test_receive_times_out_with_none_and_selector_filters(jms: JmsClient) -> None:
    queue = "/queue/" + unique("support.selector")
    assert jms.receive(queue + ".empty", 0.2) is None
    jms.send_text(queue, "red", properties={"color": "red"})
    jms.send_text(queue, "blue", properties={"color": "blue"})
    received = jms.receive(queue, 5, selector="color = 'blue'")
    assert received is not None and received.body == "blue"


def _stomp_connection(broker: ActiveMQBroker, *, auto_content_length: bool) -> stomp.Connection:
    connection = stomp.Connection([("127.0.0.1", broker.stomp_port)], auto_content_length=auto_content_length)
    connection.connect(wait=True)
    return connection


def test_stomp_send_without_content_length_arrives_as_text_message(
    activemq: ActiveMQBroker,  # noqa: F811
    jms: JmsClient,
) -> None:
    queue = "/queue/" + unique("support.stomp-text")
    connection = _stomp_connection(activemq, auto_content_length=False)
    try:
        connection.send(
            queue,
            "plain text ✓",
            headers={
                "correlation-id": "c-77",
                "reply-to": "/queue/answers",
                "type": "order",
                "priority": "8",
                "persistent": "true",
                "region": "emea",
            },
            receipt="r-1",
        )
    finally:
        connection.disconnect()
    received = jms.receive(queue, 5)
    assert received is not None
    assert received.jms_type == "text"
    assert received.body == "plain text ✓"
    assert received.correlation_id == "c-77"
    assert received.reply_to == "/queue/answers"
    assert received.type == "order"
    assert received.priority == 8
    assert received.persistent is True
    assert received.properties["region"] == "emea"


def test_stomp_send_with_content_length_arrives_as_bytes_message(
    activemq: ActiveMQBroker,  # noqa: F811
    jms: JmsClient,
) -> None:
    queue = "/queue/" + unique("support.stomp-bytes")
    connection = _stomp_connection(activemq, auto_content_length=True)
    try:
        connection.send(queue, b"\x00raw\x01", receipt="r-2")
    finally:
        connection.disconnect()
    received = jms.receive(queue, 5)
    assert received is not None
    assert received.jms_type == "bytes"
    assert received.body == b"\x00raw\x01"


def test_killed_kahadb_broker_restarts_on_same_ports_with_persistent_messages(
    fresh_activemq: ActiveMQBroker,  # noqa: F811
) -> None:
    queue = "/queue/" + unique("support.restart")
    ports = (fresh_activemq.stomp_port, fresh_activemq.openwire_port)
    client = JmsClient(fresh_activemq.openwire_url)
    client.send_text(queue, "kept", persistent=True)
    client.send_text(queue, "lost", persistent=False)
    client.close()
    fresh_activemq.kill()
    assert not fresh_activemq.running
    fresh_activemq.start()
    assert (fresh_activemq.stomp_port, fresh_activemq.openwire_port) == ports
    client = JmsClient(fresh_activemq.openwire_url)
    try:
        received = client.receive_all(queue, 2, timeout=3)
    finally:
        client.close()
    assert [message.body for message in received] == ["kept"]


def test_start_failure_names_the_log_file(tmp_path: Path) -> None:
    broker = ActiveMQBroker(tmp_path, start_timeout=20)
    broker.config_file.write_text("<beans><not-xml")
    with pytest.raises(RuntimeError, match=r"activemq\.log"):
        broker.start()
    assert not broker.running


def test_non_persistent_broker_forgets_everything_on_restart(tmp_path: Path) -> None:
    broker = ActiveMQBroker(tmp_path, kahadb=False)
    assert 'persistent="false"' in broker.config_file.read_text()
    broker.start()
    try:
        queue = "/queue/" + unique("support.memory")
        client = JmsClient(broker.openwire_url)
        client.send_text(queue, "in memory only", persistent=True)
        client.close()
        broker.restart()
        client = JmsClient(broker.openwire_url)
        try:
            assert client.receive(queue, 1) is None
        finally:
            client.close()
    finally:
        broker.kill()
