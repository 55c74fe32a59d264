"""Differential test: transactions, acknowledgements and redelivery, gateway against ActiveMQ 5.17.

Each scenario is a short script of STOMP 1.2 frames (stomp.py clients) run
once against the gateway's embedded broker (SQLite persistence) and once
against the real ActiveMQ broker; what the clients observe (bodies received,
their ``redelivered`` flag, receipts) must be the same.  Only behaviour both
define is compared: no NACK (ActiveMQ's STOMP NACK sends the message to its
DLQ at once, ours redelivers it; see docs/stomp.md), no dead-letter names, no
priorities (ActiveMQ orders by priority only with ``prioritizedMessages``).
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401 - the broker fixture
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client, StompPyFrame

pytestmark = pytest.mark.activemq

Observation = list[tuple[str, bool]]
Address = tuple[str, int]


def received(client: Client, quiet: float = 1.0) -> Observation:
    """(body, redelivered) of each MESSAGE until none comes for ``quiet`` seconds."""
    got = []
    while True:
        try:
            frame = client.listener.messages.get(timeout=quiet)
        except queue.Empty:
            return got
        got.append((frame.body.decode(), frame.headers.get("redelivered") == "true"))


def fill(address: Address, destination: str, count: int) -> None:
    producer = Client(address)
    for i in range(count):
        producer.send(destination, f"m{i}", receipt=True, persistent="true")
    producer.disconnect()


def holding(address: Address, destination: str, count: int) -> tuple[Client, list[StompPyFrame]]:
    """``count`` persistent messages put on ``destination``, and a client-individual consumer that holds them."""
    fill(address, destination, count)
    consumer = Client(address)
    consumer.subscribe(destination, "s", ack="client-individual")
    return consumer, consumer.messages(count)


def after(address: Address, destination: str) -> Observation:
    """What a new client-individual consumer of ``destination`` receives (then it leaves), sorted:
    the order in which ActiveMQ redelivers what a failed consumer held varies from run to run
    (the gateway keeps the original order)."""
    checker = Client(address)
    checker.subscribe(destination, "check", ack="client-individual")
    got = received(checker)
    checker.disconnect()
    return sorted(got)


def aborted_acks_come_back(address: Address, destination: str) -> list[Observation]:
    consumer, frames = holding(address, destination, 3)
    consumer.begin("tx")
    consumer.ack(frames[1], "tx")
    consumer.abort("tx")
    consumer.disconnect()
    return [after(address, destination)]


def committed_acks_are_final(address: Address, destination: str) -> list[Observation]:
    consumer, frames = holding(address, destination, 3)
    consumer.begin("tx")
    consumer.ack(frames[0], "tx")
    consumer.ack(frames[2], "tx")
    consumer.commit("tx")
    consumer.drop()
    return [after(address, destination)]


def commit_after_unsubscribe(address: Address, destination: str) -> list[Observation]:
    consumer, frames = holding(address, destination, 2)
    consumer.begin("tx")
    consumer.ack(frames[0], "tx")
    consumer.unsubscribe("s")
    consumer.commit("tx")
    consumer.disconnect()
    return [after(address, destination)]


def transaction_open_when_the_connection_drops(address: Address, destination: str) -> list[Observation]:
    consumer, frames = holding(address, destination, 2)
    consumer.begin("tx")
    consumer.ack(frames[0], "tx")
    consumer.send(destination, "sent-in-tx", transaction="tx", persistent="true")
    consumer.drop()
    return [after(address, destination)]


def sends_appear_at_commit(address: Address, destination: str) -> list[Observation]:
    consumer = Client(address)
    consumer.subscribe(destination, "s", ack="client-individual")
    producer = Client(address)
    producer.begin("tx")
    for i in range(3):
        producer.send(destination, f"t{i}", transaction="tx", persistent="true")
    before = received(consumer, 0.5)
    producer.commit("tx")
    at_commit = received(consumer)
    producer.begin("tx2")
    producer.send(destination, "aborted", transaction="tx2", persistent="true")
    producer.abort("tx2")
    producer.disconnect()
    consumer.disconnect()
    return [before, at_commit, received(consumer, 0.5)]


def acks_in_a_transaction_free_credit(address: Address, destination: str) -> list[Observation]:
    fill(address, destination, 5)
    consumer = Client(address)
    consumer.subscribe(destination, "s", ack="client-individual", **{"activemq.prefetchSize": "2"})
    consumer.begin("tx")
    got: Observation = []
    while True:
        try:
            frame = consumer.listener.messages.get(timeout=1.0)
        except queue.Empty:
            break
        got.append((frame.body.decode(), frame.headers.get("redelivered") == "true"))
        consumer.ack(frame, "tx")
    consumer.commit("tx")
    consumer.disconnect()
    return [got, after(address, destination)]


def cumulative_ack_and_a_drop(address: Address, destination: str) -> list[Observation]:
    fill(address, destination, 4)
    consumer = Client(address)
    consumer.subscribe(destination, "s", ack="client", **{"activemq.prefetchSize": "10"})
    frames = consumer.messages(4)
    consumer.ack(frames[1])
    consumer.drop()
    return [after(address, destination)]


SCENARIOS: dict[str, Callable[[Address, str], list[Observation]]] = {
    "aborted acks come back": aborted_acks_come_back,
    "committed acks are final": committed_acks_are_final,
    "a commit after unsubscribe": commit_after_unsubscribe,
    "a transaction open when the connection drops": transaction_open_when_the_connection_drops,
    "sends appear at commit": sends_appear_at_commit,
    "acks in a transaction free credit": acks_in_a_transaction_free_credit,
    "a cumulative ack and a drop": cumulative_ack_and_a_drop,
}


@pytest.fixture(scope="module")
def sqlite_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(Path(tmp_path_factory.mktemp("differential")),
                             args=["--set", 'broker.persistence="sqlite"']).start()
    yield process
    process.kill()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_gateway_and_activemq_agree(scenario: str, sqlite_gateway: GatewayProcess,
                                        activemq: ActiveMQBroker) -> None:  # noqa: F811 - the fixture
    run = SCENARIOS[scenario]
    destination = f"/queue/diff.{uuid.uuid4().hex[:8]}"
    ours = run(sqlite_gateway.address, destination)
    theirs = run(("127.0.0.1", activemq.stomp_port), destination)
    assert ours == theirs, f"{scenario}: gateway {ours} / ActiveMQ {theirs}"
