"""End to end through the ``jms`` connector (the JMS API in-process, JPype): stomp.py ->
gateway process -> ActiveMQ's OpenWire client -> ActiveMQ -> an independent JMS client, and back.

The connector is configured only from TOML, with the Debian package's client jars, in
both styles: a ConnectionFactory class with bean properties, and ActiveMQ's JNDI
InitialContextFactory.  Every test here runs once per style (the ``jms_style``
fixture); the connector-generic ones are meant to move into the ConnectorContract
suite as one subclass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import REPO, GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.stomp_clients import StompClients

pytestmark = pytest.mark.activemq

ACTIVEMQ_LIB = "/usr/share/activemq/lib"
CLIENT_JARS = ("activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar",
               "geronimo-j2ee-management-1.1-spec.jar")
"""The OpenWire JMS client: what an operator would copy from the provider (slf4j without a
binding logs nothing)."""


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def classpath_toml() -> str:
    return json.dumps([f"{ACTIVEMQ_LIB}/{jar}" for jar in CLIENT_JARS])


def factory_style(broker: ActiveMQBroker, name: str = "amq", extra: str = "") -> str:
    return f"""
[connectors.{name}]
type = "jms"
classpath = {classpath_toml()}
user = "gateway"
password = "secret"
failure_retry_interval = 300
send_timeout = 15000
{extra}

[connectors.{name}.connection_factory]
class = "org.apache.activemq.ActiveMQConnectionFactory"
properties = {{ brokerURL = "{broker.openwire_url}", watchTopicAdvisories = false }}
"""


def jndi_style(broker: ActiveMQBroker, name: str = "amq", extra: str = "") -> str:
    return f"""
[connectors.{name}]
type = "jms"
classpath = {classpath_toml()}
failure_retry_interval = 300
send_timeout = 15000
{extra}

[connectors.{name}.jndi]
connection_factory = "ConnectionFactory"

[connectors.{name}.jndi.environment]
"java.naming.factory.initial" = "org.apache.activemq.jndi.ActiveMQInitialContextFactory"
"java.naming.provider.url" = "{broker.openwire_url}"
"""


STYLES = {"factory": factory_style, "jndi": jndi_style}

ROUTES = """
[[destinations]]
pattern = "/queue/jmsapi.*"
connector = "amq"

[[destinations]]
pattern = "/topic/jmsapi.*"
connector = "amq"
"""


@pytest.fixture(scope="module", params=sorted(STYLES))
def jms_gateway(request: pytest.FixtureRequest, activemq: ActiveMQBroker,  # noqa: F811
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway whose ``/queue/jmsapi.*`` and ``/topic/jmsapi.*`` go to ActiveMQ through the JMS API."""
    config = STYLES[request.param](activemq) + ROUTES
    process = GatewayProcess(tmp_path_factory.mktemp(f"gw-{request.param}"), config).start()
    process.wait_for_log("connected to", timeout=30)
    yield process
    process.stop()


@pytest.fixture
def clients(jms_gateway: GatewayProcess) -> Iterator[StompClients]:
    clients = StompClients(jms_gateway.address)
    yield clients
    clients.close()


RECEIPTED = pytest.mark.parametrize("receipt", [True, False], ids=["receipted", "unreceipted"])


class TestJmsConnectorThroughTheGateway:
    """What any connector must do behind the gateway (send, receipts, mapping, subscribe, ack/nack,
    prefetch, selectors, durable subscriptions, the GlassFish rule, transactions), here for the
    ``jms`` connector once per configuration style: the shape of a ConnectorContract subclass
    whose connector-making fixture is ``jms_gateway``."""

    @RECEIPTED
    def test_stomp_send_without_content_length_is_a_jms_text_message_with_every_header(self,
            clients: StompClients, jms: JmsClient, receipt: bool) -> None:
        queue = "/queue/" + unique("jmsapi.text")
        client = clients.connect(text=True)
        client.send(queue, "grüße ✓ 日本", receipt=receipt, headers={
            "correlation-id": "corr-9", "reply-to": "/queue/jmsapi.replies", "type": "order", "priority": "8",
            "persistent": "true", "expires": "4102444800000", "customer": "acme",
        })
        received = jms.receive(queue, 10)
        assert received is not None
        assert received.jms_type == "text"
        assert received.body == "grüße ✓ 日本"
        assert received.correlation_id == "corr-9"
        assert received.reply_to == "/queue/jmsapi.replies"
        assert received.type == "order"
        assert received.priority == 8
        assert received.persistent is True
        assert received.expiration == 4102444800000 or abs(received.expiration - 4102444800000) < 5000
        assert received.properties == {"customer": "acme"}

    def test_non_persistent_default_priority_and_no_expiry(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.plain")
        clients.connect(text=True).send(queue, "plain", receipt=True)
        received = jms.receive(queue, 10)
        assert received is not None
        assert received.persistent is False and received.priority == 4 and received.expiration == 0
        assert received.correlation_id is None and received.reply_to is None and received.type is None

    @RECEIPTED
    def test_stomp_send_with_content_length_is_a_jms_bytes_message_with_exact_bytes(self,
            clients: StompClients, jms: JmsClient, receipt: bool) -> None:
        queue = "/queue/" + unique("jmsapi.bytes")
        body = b"\x00\x01raw\xff\x00" + "é".encode() + bytes(range(256))
        clients.connect().send(queue, body, receipt=receipt)
        received = jms.receive(queue, 10)
        assert received is not None
        assert received.jms_type == "bytes"
        assert received.body == body

    def test_typed_properties_through_the_types_header(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.typed")
        types = json.dumps({"count": "int", "big": "long", "ratio": "double", "urgent": "boolean", "code": "string"})
        clients.connect(text=True).send(queue, "typed", receipt=True, headers={
            "jmsgateway.types": types, "count": "42", "big": "9000000000", "ratio": "0.5", "urgent": "true",
            "code": "007", "note": "text",
        })
        received = jms.receive(queue, 10)
        assert received is not None
        assert received.properties == {"count": 42, "big": 9000000000, "ratio": 0.5, "urgent": True, "code": "007",
                                       "note": "text"}

    def test_a_bad_types_header_is_an_error_and_nothing_is_sent(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.badtype")
        client = clients.connect(text=True)
        client.connection.send(queue, "x", headers={"jmsgateway.types": '{"n": "int"}', "n": "many", "receipt": "r1"})
        error = client.error(10)
        assert error is not None
        assert "is not a int" in error.body.decode() + error.headers.get("message", "")
        assert jms.receive(queue, 0.5) is None

    def test_jms_messages_reach_a_stomp_subscriber_with_their_headers(self, clients: StompClients,
                                                                      jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.out")
        client = clients.connect()
        client.subscribe(queue, ack="client-individual")
        jms.send_text(queue, "from JMS ✓\x00end", correlation_id="c-1", jms_type="note", priority=7,
                      reply_to="/queue/jmsapi.back", persistent=True, time_to_live=600_000,
                      properties={"n": 7, "flag": True, "s": "v"})
        jms.send_bytes(queue, b"\x01\x00\x03")
        frames = client.messages(2)
        by_body = {frame.body: frame for frame in frames}
        text = by_body["from JMS ✓\x00end".encode()]
        assert "content-length" not in text.headers or text.headers["content-length"] == str(len(text.body))
        assert text.headers["correlation-id"] == "c-1"
        assert text.headers["type"] == "note"
        assert text.headers["priority"] == "7"
        assert text.headers["persistent"] == "true"
        assert text.headers["reply-to"] == "/queue/jmsapi.back"
        assert int(text.headers["expires"]) > 0
        assert text.headers["destination"] == queue
        assert (text.headers["n"], text.headers["flag"], text.headers["s"]) == ("7", "true", "v")
        assert by_body[b"\x01\x00\x03"].headers["content-length"] == "3"
        for frame in frames:
            client.ack(frame)
        client.disconnect()
        assert jms.receive(queue, 1) is None  # acknowledged at the provider

    def test_nothing_is_acknowledged_before_the_client_acks(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.noack")
        client = clients.connect()
        client.subscribe(queue, ack="client-individual")
        jms.send_text(queue, "one")
        jms.send_text(queue, "two")
        frames = client.messages(2)
        client.ack(frames[1])  # the second only: the first must survive the connection
        client.drop()
        # "one" was never acknowledged: it comes again, marked as a redelivery of the same
        # message; "two" was acknowledged by its client: it never comes again.
        again = jms.receive_until_quiet(queue, 2.0)
        assert [m.body for m in again] == ["one"]
        assert again[0].redelivered or again[0].properties.get("JMSGW_DELIVERY_COUNT") == 1, again[0]

    def test_an_individual_ack_out_of_order_survives_the_subscription(self, clients: StompClients) -> None:
        """client-individual, acks out of order, then UNSUBSCRIBE: what was acked never comes
        again (not even when it is the only one of its window), the rest comes again flagged,
        with its message id."""
        queue = "/queue/" + unique("jmsapi.individual")
        sender = clients.connect()
        for index in range(4):
            sender.send(queue, f"m{index}", receipt=True)
        client = clients.connect()
        client.subscribe(queue, "first", ack="client-individual")
        frames = client.messages(4)
        assert [frame.body for frame in frames] == [b"m0", b"m1", b"m2", b"m3"]
        client.ack(frames[1])
        client.ack(frames[3])
        client.unsubscribe("first")
        client.subscribe(queue, "second", ack="client-individual")
        again = client.messages(2)
        assert sorted(frame.body for frame in again) == [b"m0", b"m2"]
        assert all(frame.headers.get("redelivered") == "true" for frame in again), [f.headers for f in again]
        assert {frame.headers["message-id"] for frame in again} == {frames[0].headers["message-id"],
                                                                    frames[2].headers["message-id"]}
        for frame in again:
            client.ack(frame)
        assert client.no_message(2.0)

    def test_nack_redelivers_only_what_was_nacked(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.nack")
        client = clients.connect()
        client.subscribe(queue, ack="client-individual")
        jms.send_text(queue, "keep")
        jms.send_text(queue, "again")
        first, second = client.messages(2)
        assert (first.body, second.body) == (b"keep", b"again")
        client.ack(first)
        client.nack(second)
        redelivered = client.message(10)
        assert redelivered.body == b"again" and redelivered.headers.get("redelivered") == "true"
        client.ack(redelivered)
        assert client.no_message(1.0)
        client.disconnect()
        assert jms.receive(queue, 1) is None

    def test_prefetch_bounds_the_unacknowledged_deliveries(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.prefetch")
        client = clients.connect()
        client.subscribe(queue, ack="client-individual", headers={"activemq.prefetchSize": "2"})
        for index in range(5):
            jms.send_text(queue, f"m{index}")
        frames = client.messages(2)
        assert client.no_message(1.0)  # two unacknowledged: nothing more
        for frame in frames:
            client.ack(frame)
        more = client.messages(2)
        assert [frame.body for frame in more] == [b"m2", b"m3"]

    def test_topic_with_selector_and_auto_ack(self, clients: StompClients, jms: JmsClient) -> None:
        topic = "/topic/" + unique("jmsapi.topic")
        client = clients.connect()
        client.subscribe(topic, selector="level > 2")
        jms.send_text(topic, "low", properties={"level": 1})
        jms.send_text(topic, "high", properties={"level": 5})
        assert client.message(10).body == b"high"
        assert client.no_message()

    def test_durable_topic_subscription_keeps_messages_while_away(self, clients: StompClients, jms: JmsClient) -> None:
        topic = "/topic/" + unique("jmsapi.durable")
        name = unique("sub")
        client = clients.connect(**{"client-id": "durable-client"})
        client.subscribe(topic, ack="client-individual", headers={"activemq.subscriptionName": name})
        client.disconnect()
        jms.send_text(topic, "while away")
        back = clients.connect(**{"client-id": "durable-client"})
        back.subscribe(topic, ack="client-individual", headers={"activemq.subscriptionName": name})
        frame = back.message(10)
        assert frame.body == b"while away"
        back.ack(frame)

    @pytest.mark.parametrize(("kind", "ack"), [("map", "client-individual"), ("stream", "auto"),
                                               ("object", "client")])
    def test_map_stream_object_messages_get_error_and_close_and_stay_at_the_provider(
            self, clients: StompClients, jms: JmsClient, kind: str, ack: str) -> None:
        queue = "/queue/" + unique(f"jmsapi.{kind}")
        client = clients.connect()
        client.subscribe(queue, ack=ack)
        if kind == "map":
            jms.send_map(queue, {"name": "widget", "count": 3})
        elif kind == "stream":
            jms.send_stream(queue, ["a", 1, True])
        else:
            jms.send_object(queue, "a serialized string")
        error = client.error(10)
        assert error is not None
        assert f"{kind.capitalize()}Message" in error.body.decode()
        assert client.listener.disconnected.wait(5)
        again = jms.receive(queue, 10)  # not acknowledged: the provider still has it
        assert again is not None and again.jms_type == kind and again.redelivered

    def test_client_transaction_is_one_provider_transaction(self, clients: StompClients, jms: JmsClient) -> None:
        queue = "/queue/" + unique("jmsapi.tx")
        client = clients.connect(text=True)
        client.begin("tx-1")
        client.send(queue, "one", transaction="tx-1")
        client.send(queue, "two", transaction="tx-1")
        assert jms.receive(queue, 0.5) is None
        client.commit("tx-1")
        assert [m.body for m in jms.receive_all(queue, 2, 10)] == ["one", "two"]

    def test_health_reports_the_provider(self, jms_gateway: GatewayProcess) -> None:
        assert "connected to tcp://127.0.0.1:" in jms_gateway.log()


# -- configuration and start-up errors ----------------------------------------------------------


def check_config(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check.toml"
    path.write_text(config)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)], capture_output=True,
                          text=True, env=env, timeout=60)


def test_check_config_reports_a_missing_jar_with_file_and_key(tmp_path: Path) -> None:
    config = f"""
[connectors.amq]
type = "jms"
classpath = ["{ACTIVEMQ_LIB}/activemq-client.jar", "lib/missing-client.jar"]
connection_factory = {{ class = "com.example.Factory" }}
"""
    result = check_config(tmp_path, config)
    assert result.returncode == 1
    assert "connectors.amq.classpath[1]" in result.stderr
    assert "missing-client.jar" in result.stderr
    assert str(tmp_path / "check.toml") in result.stderr


def test_check_config_accepts_both_styles_without_a_jvm(tmp_path: Path) -> None:
    class Broker:
        openwire_url = "tcp://127.0.0.1:1"

    for style in STYLES.values():
        result = check_config(tmp_path, style(Broker()))  # type: ignore[arg-type]
        assert result.returncode == 0, result.stderr
        assert "OK" in result.stdout


def test_check_config_names_a_misspelt_key(tmp_path: Path) -> None:
    class Broker:
        openwire_url = "tcp://127.0.0.1:1"

    result = check_config(tmp_path, factory_style(Broker(), extra="max_retry = 3"))  # type: ignore[arg-type]
    assert result.returncode == 1
    assert "connectors.amq.max_retry" in result.stderr and "max_retries" in result.stderr


def test_unknown_factory_class_stops_the_gateway_with_the_key(tmp_path: Path,
                                                              activemq: ActiveMQBroker) -> None:  # noqa: F811
    config = factory_style(activemq).replace("org.apache.activemq.ActiveMQConnectionFactory",
                                             "org.apache.activemq.NoSuchFactory")
    output = GatewayProcess(tmp_path / "gw", config).start_fails(60)
    assert "connectors.amq.connection_factory.class" in output
    assert "org.apache.activemq.NoSuchFactory" in output


def test_unresolvable_jndi_name_stops_the_gateway_with_the_key(tmp_path: Path,
                                                               activemq: ActiveMQBroker) -> None:  # noqa: F811
    config = jndi_style(activemq).replace('connection_factory = "ConnectionFactory"',
                                          'connection_factory = "NoSuchFactory"')
    output = GatewayProcess(tmp_path / "gw", config).start_fails(60)
    assert "connectors.amq.jndi.connection_factory" in output
    assert "NoSuchFactory" in output


def test_jndi_destinations_are_looked_up(tmp_path: Path, activemq: ActiveMQBroker) -> None:  # noqa: F811
    physical = unique("jmsapi.physical")
    lookup = 'destinations = "jndi"\nclient_id = "jndi-lookup"'
    config = (jndi_style(activemq, extra=lookup) + f'"queue.orders" = "{physical}"\n' + ROUTES
              + '\n[[destinations]]\npattern = "/queue/orders"\nconnector = "amq"\n')
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    gateway.wait_for_log("connected to", 30)
    clients = StompClients(gateway.address)
    try:
        clients.connect(text=True).send("/queue/orders", "via jndi", receipt=True)
        with JmsClient(activemq.openwire_url) as jms:
            received = jms.receive("/queue/" + physical, 10)
        assert received is not None and received.body == "via jndi"
    finally:
        clients.close()
        gateway.stop()


def test_no_vendor_class_name_in_the_gateway_code() -> None:
    vendors = ("org.apache.activemq", "com.ibm", "org.apache.qpid", "com.tibco", "com.solacesystems",
               "weblogic.", "oracle.jms", "org.hornetq", "org.apache.activemq.artemis", "com.sun.messaging")
    found = []
    for path in (REPO / "gateway").rglob("*.py"):
        text = path.read_text()
        found += [f"{path.relative_to(REPO)}: {vendor}" for vendor in vendors if vendor in text]
    assert found == []


def test_without_jpype_the_gateway_stops_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       activemq: ActiveMQBroker) -> None:  # noqa: F811
    hidden = tmp_path / "hide"
    (hidden / "jpype").mkdir(parents=True)
    (hidden / "jpype" / "__init__.py").write_text('raise ImportError("No module named \'jpype\'")\n')
    monkeypatch.setenv("PYTHONPATH", str(hidden))
    output = GatewayProcess(tmp_path / "gw", factory_style(activemq)).start_fails(60)
    _one_start_up_line(output, "connectors.amq.type", "needs JPype: pip install 'jmsgateway[jms]'")


def _one_start_up_line(output: str, *expected: str) -> None:
    """One critical log line says why (twistd copies its stderr copy into the log too)."""
    lines = [line for line in output.splitlines() if "#critical] jmsgateway cannot start" in line]
    assert len(lines) == 1, output
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Traceback" not in output, output


@pytest.mark.parametrize("java_home", ["nowhere", "empty"])
def test_without_a_java_runtime_the_gateway_stops_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 activemq: ActiveMQBroker,  # noqa: F811
                                                                 java_home: str) -> None:
    """JAVA_HOME naming no folder, or a folder without a Java runtime: one start-up line naming
    the connector's key and JAVA_HOME, exit status 1, no JVM taken from elsewhere."""
    home = tmp_path / java_home
    if java_home == "empty":
        (home / "bin").mkdir(parents=True)
    monkeypatch.setenv("JAVA_HOME", str(home))
    output = GatewayProcess(tmp_path / "gw", factory_style(activemq)).start_fails(60)
    _one_start_up_line(output, "connectors.amq.type", "needs a Java runtime", f"JAVA_HOME={str(home)!r}")
    assert "JVM started" not in output


def test_a_jvm_that_refuses_its_options_stops_the_gateway_with_one_line(tmp_path: Path,
                                                                        activemq: ActiveMQBroker) -> None:  # noqa: F811
    output = GatewayProcess(tmp_path / "gw", factory_style(activemq, extra='jvm_options = ["-Xbogus"]')).start_fails(60)
    _one_start_up_line(output, "connectors.amq.jvm_options", "cannot start the JVM")
