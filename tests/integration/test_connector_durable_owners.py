"""Issue 33: a durable subscription that lives at ActiveMQ (through the stomp:// connector, one broker
account for every login) belongs to the gateway login that created it, across a gateway restart.

Real ActiveMQ, a real gateway process with bcrypt logins, stomp.py clients.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.security.passwords import hash_password
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401 - the broker fixture
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

PASSWORDS = {"alice": "alice-pw", "carol": "carol-pw"}


@pytest.fixture
def gateway(activemq: ActiveMQBroker,  # noqa: F811 - the fixture
            tmp_path: Path) -> Iterator[GatewayProcess]:
    users = ", ".join(f'{login} = "{hash_password(pw, rounds=4)}"' for login, pw in PASSWORDS.items())
    process = GatewayProcess(tmp_path, f"""
[connectors.activemq]
uri = "{activemq.stomp_uri}"
login = "gateway"
passcode = "secret"
failure_retry_interval = 200

[[destinations]]
pattern = "/topic/amq.*"
connector = "activemq"

[[authorization]]
destination = "/topic/amq.*"
read = ["alice", "carol"]
write = ["alice", "carol"]
admin = ["alice", "carol"]
""", args=["--set", f"auth.users={{ {users} }}", "--set", "auth.allow_weak_passwords=true",
           "--set", "auth.max_failed_logins=0"]).start()
    yield process
    process.kill()


def login(process: GatewayProcess, name: str, **headers: str) -> Client:
    return Client(process.address, "1.2", login=name, passcode=PASSWORDS[name], headers=headers)


def refused(client: Client, what: str) -> None:
    error = client.error(timeout=10)
    assert error is not None, f"carol's {what} was not refused"
    assert error.headers["message"] == "durable subscription 'feed' belongs to another login", error.body
    client.drop()


@pytest.mark.activemq
def test_another_login_cannot_take_over_or_delete_an_activemq_durable(gateway: GatewayProcess) -> None:
    client_id, name = f"alice-{uuid.uuid4().hex[:8]}", "feed"
    topic = f"/topic/amq.{uuid.uuid4().hex[:8]}"
    durable = {"activemq.subscriptionName": name}
    alice = login(gateway, "alice", **{"client-id": client_id})
    alice.subscribe(topic, "d1", ack="client-individual", headers=durable)
    alice.disconnect()
    gateway.restart()  # (the owner is kept in the data directory)
    producer = login(gateway, "alice")
    for n in range(3):
        producer.send(topic, f"for alice {n}", receipt=True)
    producer.disconnect()

    carol = login(gateway, "carol", **{"client-id": client_id})
    carol.connection.subscribe(topic, "d1", ack="auto", headers={**durable, "receipt": "r"})
    refused(carol, "durable SUBSCRIBE")
    assert not carol.listener.receipt_event("r").is_set()
    assert carol.listener.messages.empty(), "carol received alice's backlog"

    carol = login(gateway, "carol", **{"client-id": client_id})
    carol.subscribe(topic, "plain")  # (a non-durable subscription she may hold)
    carol.connection.unsubscribe("plain", headers={**durable, "receipt": "u"})
    refused(carol, "UNSUBSCRIBE naming alice's durable")

    back = login(gateway, "alice", **{"client-id": client_id})
    back.subscribe(topic, "d1", ack="client-individual", headers=durable)
    got = back.messages(3)
    assert sorted(m.body for m in got) == [b"for alice 0", b"for alice 1", b"for alice 2"]
    for message in got:
        back.ack(message)
    back.unsubscribe("d1", **durable)  # her own: deleted, and the name is free again
    back.disconnect()

    carol = login(gateway, "carol", **{"client-id": client_id})
    carol.subscribe(topic, "d1", headers=durable)  # (a RECEIPT: now carol's)
    carol.unsubscribe("d1", **durable)
    carol.disconnect()
