"""The authorization matrix, over TCP and WebSocket: every login x destination (wildcard entries, deny by
default) x read / write / durable (read + admin), plus temporary queues and durable subscriptions that
belong to someone else.

Expectations come from :data:`tests.adversarial.attack.GRANTS` evaluated with the documented glob rules,
so a cell fails both ways: an unauthorized read or write that happens, and an authorized one that does
not.  Violations are collected and reported together.
"""

from __future__ import annotations

import uuid

import pytest

from tests.adversarial.attack import PASSWORDS, allowed
from tests.adversarial.conftest import Secured
from tests.support.stomp_clients import Client

LOGINS = ("root", "alice", "bob", "carol", "eve", "vic", "dave")
BASES = ("/queue/orders.{}", "/topic/prices.{}", "/topic/alerts.{}", "/topic/carol.{}", "/queue/alice.{}",
         "/queue/payments", "/queue/eve.{}")
TRANSPORTS = ["tcp", "ws"]


def uid() -> str:
    return uuid.uuid4().hex[:8]


def destinations() -> list[str]:
    run = f"m{uid()}"
    return [base.format(run) for base in BASES]


def answer(client: Client, receipt: str) -> tuple[str, str]:
    """("receipt", "") or ("error", its message) for the frame sent with ``receipt``."""
    event = client.listener.receipt_event(receipt)
    error = None
    for _ in range(1000):
        if event.wait(0.01):
            return "receipt", ""
        error = client.error(timeout=0.0)
        if error is not None:
            break
    if error is None:
        return "none", ""
    assert error.headers.get("receipt-id") == receipt, error.headers
    return "error", str(error.headers.get("message"))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_matrix_send_and_subscribe(secured_gateway: Secured, transport: str) -> None:
    names = destinations()
    clients = {login: secured_gateway.client(login, transport) for login in LOGINS}
    root = secured_gateway.client("root", transport)
    violations: list[str] = []
    try:
        for index, destination in enumerate(names):  # root sees what every SEND stored
            root.subscribe(destination, f"root-{index}")
        for login, client in clients.items():
            for destination in names:
                may = allowed(login, "write", destination)
                token = f"{login} writes {uid()}".encode()
                receipt = uid()
                client.connection.send(destination, token, headers={"receipt": receipt})
                kind, message = answer(client, receipt)
                if (may and kind != "receipt") or (not may and message != f"not authorized to write {destination}"):
                    violations.append(f"{login} SEND {destination} (allowed={may}): {kind} {message!r}")
                marker = f"marker {uid()}".encode()
                root.send(destination, marker, receipt=True)
                bodies = [frame.body for frame in root.messages(2 if may and kind == "receipt" else 1)]
                if not may and not root.no_message(0.05):
                    bodies.append(root.message().body)
                if bodies != ([token, marker] if may else [marker]):
                    violations.append(f"{login} SEND {destination} (allowed={may}): root read {bodies}")
        for index in range(len(names)):
            root.unsubscribe(f"root-{index}")
        for login, client in clients.items():
            for number, destination in enumerate(names):
                may = allowed(login, "read", destination)
                receipt, sub_id = uid(), f"s{number}"
                client.connection.subscribe(destination, sub_id, headers={"receipt": receipt})
                kind, message = answer(client, receipt)
                if (may and kind != "receipt") or (not may and message != f"not authorized to read {destination}"):
                    violations.append(f"{login} SUBSCRIBE {destination} (allowed={may}): {kind} {message!r}")
                token = f"for {login} {uid()}".encode()
                root.send(destination, token, receipt=True)
                if may:
                    got = client.message().body if kind == "receipt" else None
                    if got != token:
                        violations.append(f"{login} SUBSCRIBE {destination}: received {got!r}")
                    client.unsubscribe(sub_id)
                else:
                    if not client.no_message(0.1):
                        violations.append(f"{login} read {client.message().body!r} from {destination}")
                    if destination.startswith("/queue/"):  # the refused reader took nothing: root finds it
                        root.subscribe(destination, "check")
                        body = root.message().body
                        root.unsubscribe("check")
                        if body != token:
                            violations.append(f"{login} SUBSCRIBE {destination}: root found {body!r}")
        for login, client in clients.items():
            if not client.no_message(0.05):
                violations.append(f"{login} received an unexpected {client.message().body!r}")
            if not client.connection.is_connected():
                violations.append(f"{login}'s connection was closed by a refusal")
    finally:
        for client in [*clients.values(), root]:
            client.disconnect()
    assert violations == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_matrix_durable_subscriptions_need_read_and_admin(secured_gateway: Secured, transport: str) -> None:
    run = uid()
    topics = [f"/topic/prices.d{run}", f"/topic/alerts.d{run}", f"/topic/carol.d{run}"]
    violations: list[str] = []
    for login in LOGINS:
        client = secured_gateway.client(login, transport, **{"client-id": f"{login}-{run}-{transport}"})
        try:
            for number, topic in enumerate(topics):
                may = allowed(login, "read", topic) and allowed(login, "admin", topic)
                receipt, durable = uid(), f"durable-{number}"
                client.connection.subscribe(topic, f"d{number}", headers={
                    "receipt": receipt, "activemq.subscriptionName": durable})
                kind, message = answer(client, receipt)
                if (may and kind != "receipt") or (not may and not message.startswith("not authorized to ")):
                    violations.append(f"{login} durable SUBSCRIBE {topic} (allowed={may}): {kind} {message!r}")
                if kind == "receipt":
                    client.unsubscribe(f"d{number}", **{"activemq.subscriptionName": durable})
        finally:
            client.disconnect()
    assert violations == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_matrix_temporary_queue_is_read_only_by_its_connection(secured_gateway: Secured, transport: str) -> None:
    """alice's temporary queue, named to others by a reply-to: every other connection (other logins, and
    alice's own second connection) is refused a SUBSCRIBE to it, may SEND a reply that alice alone
    receives, and its own ``/temp-queue/`` of the same name is a different queue."""
    run = uid()
    work, temp = f"/queue/alice.t{run}", f"/temp-queue/replies-{run}"
    owner = secured_gateway.client("alice", transport)
    responder = secured_gateway.client("alice", transport)
    violations: list[str] = []
    try:
        owner.subscribe(temp, "mine")
        responder.subscribe(work, "w")
        owner.send(work, b"request", receipt=True, headers={"reply-to": temp})
        reply_to = str(responder.message().headers["reply-to"])
        for login in LOGINS:
            thief = secured_gateway.client(login, transport)  # a refusal here may close the connection
            try:
                receipt = uid()
                thief.connection.subscribe(reply_to, "steal", headers={"receipt": receipt})
                kind, _ = answer(thief, receipt)
                if kind != "error":
                    violations.append(f"{login} SUBSCRIBE {reply_to}: {kind}")
                if not thief.no_message(0.1):
                    violations.append(f"{login} read {thief.message().body!r} from {reply_to}")
            finally:
                thief.disconnect()
            other = secured_gateway.client(login, transport)
            try:
                other.subscribe(temp, "own")  # a temporary queue of its own, by the same name
                body = f"reply from {login}".encode()
                other.send(reply_to, body, receipt=True)
                got = owner.message().body
                if got != body:
                    violations.append(f"alice's temporary queue got {got!r} instead of {body!r}")
                if not other.no_message(0.1):
                    violations.append(f"{login} read {other.message().body!r} from alice's temporary queue")
            finally:
                other.disconnect()
        if not owner.no_message(0.1):
            violations.append(f"alice got an unexpected {owner.message().body!r}")
    finally:
        owner.disconnect()
        responder.disconnect()
    assert violations == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_matrix_durable_subscription_belongs_to_its_login(secured_gateway: Secured, transport: str) -> None:
    """alice's durable subscription (client-id, name) on /topic/alerts.*: every other login naming it, with
    a SUBSCRIBE (on a topic of its own or on alice's) or with the UNSUBSCRIBE of a plain subscription of
    its own, gets an ERROR and changes nothing (root, who may read and admin everything, included);
    alice comes back to her whole backlog."""
    run = uid()
    client_id, durable, topic = f"alice-{run}", f"alerts-{run}", f"/topic/alerts.o{run}"
    alice = secured_gateway.client("alice", transport, **{"client-id": client_id})
    alice.subscribe(topic, "d", headers={"activemq.subscriptionName": durable})
    alice.disconnect()
    root = secured_gateway.client("root", transport)
    root.send(topic, b"backlog 1", receipt=True)
    root.disconnect()
    expected = f"durable subscription '{durable}' belongs to another login"
    violations: list[str] = []
    for login in LOGINS:
        if login == "alice":
            continue
        own_topic = f"/topic/carol.o{run}" if login == "carol" else topic
        for command in ("SUBSCRIBE", "UNSUBSCRIBE"):
            other = secured_gateway.client(login, transport, **{"client-id": client_id})
            try:
                receipt = uid()
                headers = {"receipt": receipt, "activemq.subscriptionName": durable}
                if command == "SUBSCRIBE":
                    other.connection.subscribe(own_topic, "x", headers=headers)
                    holds = allowed(login, "read", own_topic) and allowed(login, "admin", own_topic)
                else:  # a plain subscription everyone may have, unsubscribed naming alice's durable
                    other.subscribe(f"/topic/prices.o{run}", "x")
                    other.connection.unsubscribe("x", headers=headers)
                    holds = True  # UNSUBSCRIBE needs no grant: only ownership can refuse it
                kind, message = answer(other, receipt)
                if kind != "error" or (holds and message != expected):
                    violations.append(f"{login} {command} {durable}: {kind} {message!r}")
                if not other.no_message(0.1):
                    violations.append(f"{login} read {other.message().body!r} from alice's durable")
            finally:
                other.disconnect()
    alice = secured_gateway.client("alice", transport, **{"client-id": client_id})
    try:
        alice.subscribe(topic, "d", headers={"activemq.subscriptionName": durable})
        try:
            body = alice.message(timeout=5).body
        except AssertionError:
            body = None
        if body != b"backlog 1":
            violations.append(f"alice's backlog was lost: got {body!r}")
        alice.unsubscribe("d", **{"activemq.subscriptionName": durable})
    finally:
        alice.disconnect()
    assert violations == []


def test_matrix_covers_both_ways() -> None:
    """The grants leave every login something it may and something it may not do (so the matrix checks
    both refusals and successes for each)."""
    names = destinations()
    for login in LOGINS:
        cells = [allowed(login, permission, name) for name in names for permission in ("read", "write")]
        if login != "root":  # dave holds no entry of his own: he reads /topic/prices.* ("*") only
            assert any(cells) and not all(cells), login
    assert PASSWORDS.keys() >= set(LOGINS)
