"""Issue 33's STOMP-side holes, against a real gateway process with stomp.py over TCP and
WebSocket: durable subscriptions owned by their login (#4).

The gateway has bcrypt logins, deny-by-default ``[[authorization]]`` entries and a
WebSocket listener; each test reproduces the attack the issue describes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gateway.passwords import hash_password
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.stomp_clients import Client

PASSWORDS = {"alice": "alice-pw", "carol": "carol-pw", "eve": "eve-pw", "root": "r00t!"}
ENTRIES = """
[[authorization]]
destination = "/*"
read = ["root"]
write = ["root"]
admin = ["root"]

[[authorization]]
destination = "/topic/alerts.*"
read = ["alice"]
write = ["alice"]
admin = ["alice"]

[[authorization]]
destination = "/topic/carol.*"
read = ["carol"]
write = ["carol"]
admin = ["carol"]
"""
TRANSPORTS = pytest.mark.parametrize("transport", ["tcp", "ws"])


def users_option() -> str:
    users = ", ".join(f'{login} = "{hash_password(pw, rounds=4)}"' for login, pw in PASSWORDS.items())
    return f"auth.users={{ {users} }}"


@dataclass
class Secured:
    process: GatewayProcess
    ws_port: int

    def client(self, transport: str, login: str, **headers: str) -> Client:
        port = self.ws_port if transport == "ws" else self.process.port
        return Client(("127.0.0.1", port), "1.2", ws_path="/" if transport == "ws" else None,
                      login=login, passcode=PASSWORDS[login], **headers)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    ws_port = free_port()
    process = GatewayProcess(tmp_path_factory.mktemp("stomp-security"), ENTRIES, args=[
        "--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1", "--set", users_option(),
        "--set", "auth.allow_weak_passwords=true", "--set", "auth.max_failed_logins=0",
    ]).start()
    wait_for_port(ws_port, timeout=10)
    yield Secured(process, ws_port)
    process.stop()


def durable(name: str) -> dict[str, str]:
    return {"activemq.subscriptionName": name}


@TRANSPORTS
def test_another_login_cannot_take_over_a_durable_subscription(secured: Secured, transport: str) -> None:
    """#4: carol names alice's client-id and subscription name on her own topic (and on alice's):
    ERROR, and alice's backlog is still there when she comes back."""
    client_id, name = f"alice-{uuid.uuid4().hex[:8]}", "alerts"
    topic = f"/topic/alerts.{uuid.uuid4().hex[:8]}"
    alice = secured.client(transport, "alice", **{"client-id": client_id})
    alice.subscribe(topic, "d1", ack="client-individual", **durable(name))
    alice.disconnect()
    producer = secured.client(transport, "alice")
    producer.send(topic, "kept for alice", receipt=True)
    producer.disconnect()
    for target in (f"/topic/carol.{uuid.uuid4().hex[:8]}", topic):
        carol = secured.client(transport, "carol", **{"client-id": client_id})
        carol.connection.subscribe(target, "d1", headers={**durable(name), "receipt": "r"})
        error = carol.error(timeout=10)
        assert error is not None, f"carol's SUBSCRIBE on {target} was not refused"
        assert error.headers["message"] in ("durable subscription 'alerts' belongs to another login",
                                            f"not authorized to read {target}")
        assert not carol.listener.receipt_event("r").is_set()
        carol.drop()
    carol = secured.client(transport, "carol", **{"client-id": client_id})
    carol.connection.unsubscribe("d1", headers=durable(name))
    error = carol.error(timeout=10)
    assert error is not None and error.headers["message"] == "durable subscription 'alerts' belongs to another login"
    carol.drop()
    back = secured.client(transport, "alice", **{"client-id": client_id})
    back.subscribe(topic, "d1", ack="client-individual", **durable(name))
    message = back.message()
    assert message.body == b"kept for alice"
    back.ack(message)
    back.disconnect()
