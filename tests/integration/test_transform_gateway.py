"""Transformer chains in the real gateway process, seen by stomp.py clients.

Shipped plugins, the pip-installed third-party example (entry point), a test
plugin folder; inbound and outbound chains; the ``transformation`` header;
the failure policies; and the GlassFish outbound rule.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator

import pytest

from tests.support.example_plugin import ensure_example_installed
from tests.support.gateway import REPO, GatewayProcess
from tests.support.stomp_clients import StompClients

TEST_PLUGIN = '''
"""Transformers for the integration tests: one that fails, one that makes MapMessages."""
from zope.interface import implementer
from gateway.errors import TransformError
from gateway.interfaces import IMessageTransformer
from gateway.message.model import MapMessage
from gateway.transform import hookimpl


@implementer(IMessageTransformer)
class Failing:
    name = "failing"

    def transform(self, message, context):
        raise TransformError("this transformer always refuses")


@implementer(IMessageTransformer)
class ToMap:
    name = "to-map"

    def transform(self, message, context):
        return MapMessage(destination=message.destination, message_id=message.message_id, map={"a": 1})


@hookimpl
def jmsgateway_transformers(config):
    return [Failing(), ToMap()]
'''


@pytest.fixture(scope="module")
def transform_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    ensure_example_installed(tmp_path_factory.mktemp("example"))
    folder = tmp_path_factory.mktemp("testplugins")
    (folder / "testing_transformers.py").write_text(TEST_PLUGIN)
    config = textwrap.dedent(f"""
        [transform]
        plugin_dirs = ["{REPO / 'plugins'}", "{folder}"]

        [[transform.chain]]
        transformer = "header-map"
        destinations = ["/queue/hm.*"]
        direction = "inbound"
        options = {{ rename = {{ "x-old" = "x-new" }}, set = {{ "x-via" = "gateway" }} }}

        [[transform.chain]]
        transformer = "failing"
        destinations = ["/queue/fail.*"]
        direction = "inbound"

        [[transform.chain]]
        transformer = "failing"
        destinations = ["/queue/dead.*"]
        direction = "inbound"
        on_error = "dead-letter"
        dead_letter = "/queue/DLQ.transform"

        [[transform.chain]]
        transformer = "to-map"
        destinations = ["/queue/map.*"]
        direction = "outbound"

        [[transform.chain]]
        transformer = "json-map"
        destinations = ["/queue/json.*"]
        direction = "both"
        options = {{ sort_keys = true }}
    """)
    process = GatewayProcess(tmp_path_factory.mktemp("gw"), config).start()
    yield process
    process.stop()


@pytest.fixture
def clients(transform_gateway: GatewayProcess) -> Iterator[StompClients]:
    made = StompClients(transform_gateway.address)
    yield made
    made.close()


def name(prefix: str) -> str:
    return f"/queue/{prefix}.{uuid.uuid4().hex[:8]}"


def test_inbound_chain_from_a_shipped_plugin(clients: StompClients) -> None:
    queue = name("hm")
    consumer = clients.connect()
    consumer.subscribe(queue, "s")
    clients.connect().send(queue, "body", receipt=True, headers={"x-old": "value"})
    frame = consumer.message()
    assert frame.headers["x-new"] == "value"
    assert "x-old" not in frame.headers
    assert frame.headers["x-via"] == "gateway"


def test_third_party_transformer_selected_by_transformation_header(clients: StompClients) -> None:
    queue = name("plain")
    consumer = clients.connect()
    consumer.subscribe(queue, "s")
    producer = clients.connect(text=True)
    producer.send(queue, "shout please", receipt=True, transformation="uppercase")
    assert consumer.message().body == b"SHOUT PLEASE"
    outbound = clients.connect()
    outbound.subscribe(queue, "u", transformation="uppercase")
    producer.send(queue, "quiet", receipt=True)
    assert outbound.message().body == b"QUIET"


def test_unknown_transformation_on_subscribe_is_an_error(clients: StompClients) -> None:
    client = clients.connect()
    client.connection.subscribe(name("plain"), "s", headers={"transformation": "no-such", "receipt": "r"})
    error = client.error()
    assert error is not None
    assert error.headers["message"] == "transform failed"
    assert b"no-such" in error.body


def test_failing_transformer_rejects_the_send_and_stores_nothing(clients: StompClients) -> None:
    queue = name("fail")
    producer = clients.connect()
    producer.connection.send(queue, "refused", headers={"receipt": "r1"})
    error = producer.error()
    assert error is not None
    assert error.headers["receipt-id"] == "r1"
    assert b"always refuses" in error.body
    assert not producer.listener.receipt_event("r1").is_set()
    consumer = clients.connect()
    consumer.subscribe(queue, "s")
    assert consumer.no_message(0.4)


def test_dead_letter_policy_sends_the_message_aside(clients: StompClients) -> None:
    queue = name("dead")
    clients.connect().send(queue, "aside", receipt=True)
    consumer = clients.connect()
    consumer.subscribe(queue, "s")
    assert consumer.no_message(0.3)
    dlq = clients.connect()
    dlq.subscribe("/queue/DLQ.transform", "d", selector=f"JMSGW_ORIGINAL_DESTINATION = '{queue}'")
    frame = dlq.message()
    assert frame.body == b"aside"
    assert b"always refuses" in frame.headers["dlqDeliveryFailureCause"].encode()


@pytest.mark.parametrize("ack", ["client-individual", "auto"])
def test_outbound_map_message_closes_the_connection_and_is_not_lost(clients: StompClients, ack: str) -> None:
    queue = name("map")
    victim = clients.connect()
    victim.subscribe(queue, "s", ack=ack)
    clients.connect().send(queue, "becomes a map", receipt=True)
    error = victim.error()
    assert error is not None
    assert error.headers["message"] == "message type not supported"
    assert b"MapMessage" in error.body
    assert victim.listener.disconnected.wait(5)
    assert victim.listener.messages.empty()
    # Not lost: it was not acknowledged, so the next subscriber is offered the same message.
    message_id = error.body.split(b"message ")[1].split(b" ")[0]
    second = clients.connect()
    second.subscribe(queue, "s2", ack=ack, receipt=False)
    again = second.error()
    assert again is not None and message_id in again.body


def test_json_travels_as_a_map_message_and_back(clients: StompClients) -> None:
    queue = name("json")
    consumer = clients.connect()
    consumer.subscribe(queue, "s")
    clients.connect(text=True).send(queue, '{ "b" : [1, 2],\n  "a" : "x" }', receipt=True)
    assert consumer.message().body == b'{"a": "x", "b": [1, 2]}'  # re-serialised from the MapMessage
