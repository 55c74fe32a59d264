"""Verified sender identity end to end (issue 33 #12): stomp.py -> gateway process ->
ActiveMQ (stomp:// and the JMS API) and Tansu, with [auth] logins.

eve claims to be root in ``JMSXUserID``, ``user-id``, ``login`` and ``passcode`` headers on
her SEND; every consumer (a STOMP subscriber of the embedded broker, a JMS consumer of the
real ActiveMQ client, a Kafka consumer) sees ``eve`` and no passcode.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway.security.passwords import hash_password
from tests.integration.test_jms_api import factory_style
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.kafka import create_topics, kafka_bootstrap, read_records, unique_topic
from tests.support.stomp_clients import StompClients

pytestmark = [pytest.mark.activemq, pytest.mark.kafka]
__all__ = ["kafka_bootstrap"]

FORGED = {"JMSXUserID": "root", "user-id": "root", "login": "root", "passcode": "r00t-guess"}
PASSWORDS = {"eve": "eve-pw", "alice": "alice-pw"}


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def gateway(activemq: ActiveMQBroker, kafka_bootstrap: str,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    users = ", ".join(f'{login} = "{hash_password(pw, rounds=10)}"' for login, pw in PASSWORDS.items())
    config = f"""
[connectors.activemq]
uri = "{activemq.stomp_uri}"
login = "gateway"
passcode = "secret"

[connectors.kafka]
uri = "kafka://{kafka_bootstrap}"

{factory_style(activemq)}

[[destinations]]
pattern = "/queue/jms.*"
connector = "activemq"

[[destinations]]
pattern = "/queue/jmsapi.*"
connector = "amq"

[[destinations]]
pattern = "/topic/kafka.*"
connector = "kafka"
"""
    process = GatewayProcess(tmp_path_factory.mktemp("identity-gateway"), config,
                             args=["--set", f"auth.users={{ {users} }}"]).start()
    yield process
    process.stop()


@pytest.fixture
def clients(gateway: GatewayProcess) -> Iterator[StompClients]:
    made = StompClients(gateway.address)
    yield made
    made.close()


def test_embedded_consumer_sees_the_verified_login(clients: StompClients) -> None:
    queue = "/queue/" + unique("identity")
    alice = clients.connect(login="alice", passcode=PASSWORDS["alice"])
    alice.subscribe(queue)
    eve = clients.connect(login="eve", passcode=PASSWORDS["eve"])
    eve.send(queue, "who am I", receipt=True, headers=FORGED)
    headers = alice.message().headers
    assert headers["JMSXUserID"] == "eve" and headers["user-id"] == "eve"
    assert "passcode" not in headers and "login" not in headers


@pytest.mark.parametrize("receipt", [True, False], ids=["receipted", "forwarded"])
@pytest.mark.parametrize("prefix", ["jms", "jmsapi"], ids=["stomp-connector", "jms-api-connector"])
def test_jms_consumer_sees_the_verified_login(clients: StompClients, jms: JmsClient, prefix: str,
                                              receipt: bool) -> None:
    queue = "/queue/" + unique(prefix)
    eve = clients.connect(login="eve", passcode=PASSWORDS["eve"])
    eve.send(queue, "who am I", receipt=receipt, headers=FORGED)
    received = jms.receive(queue, 10)
    assert received is not None
    if prefix == "jmsapi":
        assert received.user_id == "eve"
    else:  # ActiveMQ's STOMP drops a client's JMSXUserID (it sets it itself, with populateJMSXUserID)
        assert received.user_id is None
    assert "passcode" not in received.properties and "login" not in received.properties
    assert received.properties.get("user-id") == "eve"


@pytest.mark.parametrize("receipt", [True, False], ids=["receipted", "forwarded"])
def test_kafka_record_carries_the_verified_login(clients: StompClients, kafka_bootstrap: str, receipt: bool) -> None:
    topic = unique_topic("identity")
    create_topics(kafka_bootstrap, topic)
    eve = clients.connect(login="eve", passcode=PASSWORDS["eve"])
    eve.send(f"/topic/kafka.{topic}", "who am I", receipt=receipt, headers=FORGED)
    [record] = read_records(kafka_bootstrap, topic, 1, settle=0.5)
    headers = dict(record.headers())
    assert headers["jms.JMSXUserID"] == b"eve"
    assert headers["jms.user-id"] == b"eve"
    assert "jms.passcode" not in headers and "jms.login" not in headers
