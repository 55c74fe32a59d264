"""Differential test: transactions, acknowledgements and redelivery, gateway against ActiveMQ 5.17.

Each scenario is a short script of STOMP 1.2 frames (stomp.py clients) run
once against the gateway's embedded broker (SQLite persistence) and once
against the real ActiveMQ broker; what the clients observe (bodies received,
their ``redelivered`` flag, receipts) must be the same.  Only behaviour both
define is compared: no NACK (ActiveMQ's STOMP NACK sends the message to its
DLQ at once, ours redelivers it; see docs/stomp.md), no dead-letter names, no
priorities (ActiveMQ orders by priority only with ``prioritizedMessages``).

Besides the scripted scenarios, :func:`test_random_sequences_agree_with_activemq`
runs sequences drawn from fixed seeds (the same on every run; ``DIFFERENTIAL_SEEDS``
sets others for a long run): pipelined SENDs with persistence mixed and a
receipt on the last only, transactions committed or aborted, to a queue and to
a topic with a durable subscription; consumers that acknowledge some of what
they got (chosen by body, so the choice does not depend on delivery order)
and leave by DISCONNECT, by dropping the socket or by aborting a transaction
of their ACKs.  Compared is what JMS and STOMP guarantee: which messages each
consumer gets with which ``redelivered`` flag, and the order of first
deliveries within each delivery mode (JMS orders a producer's messages per
delivery mode only: ActiveMQ interleaves its persistent and non-persistent
cursors); for the durable subscription only which messages come (ActiveMQ does
not set ``redelivered`` on what a durable subscriber left unacknowledged).
"""

from __future__ import annotations

import os
import queue
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stomp.utils import Frame as StompPyFrame

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401 - the broker fixture
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

pytestmark = pytest.mark.activemq

Observation = list[tuple[str, bool]]
Address = tuple[str, int]


def received(client: Client, quiet: float = 1.0) -> Observation:
    """(body, redelivered) of each MESSAGE until none comes for ``quiet`` seconds."""
    got: Observation = []
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
    consumer.subscribe(destination, "s", ack="client-individual", headers={"activemq.prefetchSize": "2"})
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
    consumer.subscribe(destination, "s", ack="client", headers={"activemq.prefetchSize": "10"})
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


# -- random sequences ------------------------------------------------------------

SEEDS = [int(seed) for seed in os.environ.get("DIFFERENTIAL_SEEDS", "1 2 3 4").split()]
"""The sequences the suite runs (a fixed list: the same ones every run, about 10 s each)."""
QUIET = 0.4
"""Seconds without a MESSAGE after which a consumer has everything (both brokers deliver at once)."""

Operation = tuple[str, ...]


def sequence(seed: int) -> list[tuple[str, Any]]:
    """Operations drawn from ``seed``: ("pipeline" | "transaction", target, messages, commit)
    and ("consume", target, ack salt, how the consumer leaves); a final drain of both targets."""
    rng = random.Random(seed)
    counter = 0
    steps: list[tuple[str, Any]] = []
    for _ in range(rng.randint(4, 7)):
        kind = rng.choice(["pipeline", "pipeline", "transaction", "consume"])
        target = rng.choice(["queue", "queue", "durable"])
        if kind == "consume":
            steps.append(("consume", (target, rng.randint(0, 2), rng.choice(["disconnect", "drop", "abort"]))))
            continue
        messages = []
        for _ in range(rng.randint(1, 6)):
            counter += 1
            messages.append(f"{rng.choice('pn')}{counter}")  # p: persistent, n: not
        steps.append((kind, (target, messages, rng.random() < 0.7)))
    steps.append(("consume", ("queue", -1, "disconnect")))
    steps.append(("consume", ("durable", -1, "disconnect")))
    return steps


def observe(got: list[tuple[str, bool]]) -> tuple[list[tuple[str, bool]], list[str], list[str]]:
    """What JMS guarantees of one consumer's deliveries: which (body, redelivered), and the order of
    first deliveries within each delivery mode."""
    first = [body for body, redelivered in got if not redelivered]
    return sorted(got), [b for b in first if b[0] == "p"], [b for b in first if b[0] == "n"]


def run_sequence(address: Address, steps: list[tuple[str, Any]], names: dict[str, str]) -> list[Any]:
    queue_name, topic, client_id = names["queue"], names["topic"], names["client_id"]
    subscriber = Client(address, headers={"client-id": client_id})
    subscriber.subscribe(topic, "d", ack="client-individual", headers={"activemq.subscriptionName": "d"})
    subscriber.disconnect()
    observations: list[Any] = []
    for kind, (target, *rest) in steps:
        destination = queue_name if target == "queue" else topic
        if kind in ("pipeline", "transaction"):
            messages, commit = rest
            producer = Client(address)
            if kind == "transaction":
                producer.begin("tx")
            for index, body in enumerate(messages):
                headers: dict[str, str] = {"persistent": "true" if body[0] == "p" else "false"}
                if kind == "transaction":
                    headers["transaction"] = "tx"
                last = index == len(messages) - 1 and kind == "pipeline"
                producer.send(destination, body, receipt=last, headers=headers)  # (a receipt on the last only)
            if kind == "transaction":
                producer.commit("tx") if commit else producer.abort("tx")
            producer.disconnect()
            continue
        salt, leave = rest
        consumer = Client(address, headers=({"client-id": client_id} if target == "durable" else {}))
        extra = {"activemq.subscriptionName": "d"} if target == "durable" else {}
        consumer.subscribe(destination, "s", ack="client-individual",
                           headers={"activemq.prefetchSize": "1000", **extra})
        frames = []
        while True:
            try:
                frames.append(consumer.listener.messages.get(timeout=QUIET))
            except queue.Empty:
                break
        got = [(frame.body.decode(), frame.headers.get("redelivered") == "true") for frame in frames]
        acked = [frame for frame in frames if salt < 0 or (int(frame.body.decode()[1:]) + salt) % 3 != 0]
        if leave == "abort":
            consumer.begin("acks")
        for frame in acked:
            consumer.ack(frame, "acks" if leave == "abort" else None)
        if leave == "abort":
            consumer.abort("acks")
        if leave == "drop":
            consumer.drop()
        else:
            consumer.disconnect()
        if target == "durable":
            # ActiveMQ 5.17 does not mark what a durable subscriber left unacknowledged as
            # redelivered when it comes back (JMS 1.1 4.4.11 says to; the gateway does): only
            # which messages came is compared there
            observations.append((target, sorted(body for body, _ in got)))
        else:
            observations.append((target, observe(got)))
    return observations


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequences_agree_with_activemq(seed: int, sqlite_gateway: GatewayProcess,
                                              activemq: ActiveMQBroker) -> None:  # noqa: F811 - the fixture
    steps = sequence(seed)
    run = uuid.uuid4().hex[:8]
    names = {"queue": f"/queue/random.{run}", "topic": f"/topic/random.{run}", "client_id": f"random-{run}"}
    ours = run_sequence(sqlite_gateway.address, steps, names)
    theirs = run_sequence(("127.0.0.1", activemq.stomp_port), steps, names)
    for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == other, f"seed {seed}, consumer {index} of {steps}: gateway {mine} / ActiveMQ {other}"
