"""Exclusive consumers and browsing over STOMP (issue 37): the real gateway driven by stomp.py,
and the same scenarios against the real ActiveMQ 5.17 (differential: same observations)."""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401 - the broker fixture
from tests.support.authorization import ROOT_AND_ALICE, ROOT_GRANT, grant
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client, StompClients

Address = tuple[str, int]


def fill(address: Address, destination: str, count: int, prefix: str = "m") -> None:
    producer = Client(address)
    for i in range(count):
        producer.send(destination, f"{prefix}{i}", receipt=True, persistent="true")
    producer.disconnect()


def exclusive_takeover(address: Address, destination: str) -> list[Any]:
    """Two exclusive consumers: the first gets all four; when it leaves having acked one, the
    second gets the other three, flagged redelivered."""
    first, second = Client(address), Client(address)
    exclusive = {"activemq.exclusive": "true"}
    first.subscribe(destination, "e1", ack="client-individual", headers=exclusive)
    second.subscribe(destination, "e2", ack="client-individual", headers=exclusive)
    fill(address, destination, 4)
    got = first.messages(4)
    idle = second.no_message(1.0)
    first.ack(got[0])
    first.disconnect()
    taken = second.messages(3)
    second.disconnect()
    return [[f.body for f in got], idle, [(f.body, f.headers.get("redelivered")) for f in taken]]


def browse_snapshot(address: Address, destination: str) -> list[Any]:
    """A browse delivers every message then the end marker, and consumes none."""
    fill(address, destination, 3)
    browser = Client(address)
    browser.subscribe(destination, "b", browser="true")
    frames = browser.messages(4)
    browser.disconnect()
    end = frames[-1].headers
    consumer = Client(address)
    consumer.subscribe(destination, "c")
    left = [f.body for f in consumer.messages(3)]
    consumer.disconnect()
    return [[f.body for f in frames], end.get("browser"), end.get("message-id"), end.get("subscription"),
            end.get("destination") == destination, left]


def composite_send(address: Address, destination: str) -> list[Any]:
    """A SEND (with a receipt, then in a transaction) to ``queue,topic`` reaches both, each
    delivery under its own part's name; nothing before the COMMIT."""
    topic = destination.replace("/queue/", "/topic/")
    listener = Client(address)
    listener.subscribe(topic, "t")
    sender = Client(address)
    sender.send(f"{destination},{topic}", "one", receipt=True, persistent="true")
    heard = [(f.body, f.headers["destination"] == topic) for f in listener.messages(1)]
    sender.begin("tx")
    sender.send(f"{destination},{topic}", "two", transaction="tx", persistent="true")
    before = listener.no_message(0.5)
    sender.commit("tx")
    sender.disconnect()
    heard += [(f.body, f.headers["destination"] == topic) for f in listener.messages(1)]
    listener.disconnect()
    consumer = Client(address)
    consumer.subscribe(destination, "q")
    queued = [(f.body, f.headers["destination"] == destination) for f in consumer.messages(2)]
    consumer.disconnect()
    return [before, heard, queued]


def wildcard_fan_out(address: Address, destination: str) -> list[Any]:
    """What each wildcard subscriber receives (bodies and the MESSAGE's destination) of messages
    published to several topics."""
    root = destination.replace("/queue/", "/topic/")
    patterns = [f"{root}.*.eu", f"{root}.>", f"{root}.*"]
    subscribers = []
    for index, pattern in enumerate(patterns):
        subscriber = Client(address)
        subscriber.subscribe(pattern, f"w{index}")
        subscribers.append(subscriber)
    sender = Client(address)
    topics = [f"{root}.books.eu", f"{root}.books", f"{root}.toys.us", f"{root}.a.b.eu", root, f"{root}x.books.eu"]
    for index, topic in enumerate(topics):
        sender.send(topic, f"m{index}", receipt=True)
    sender.disconnect()
    seen = []
    for subscriber in subscribers:
        seen.append(sorted((f.body, f.headers["destination"].replace(root, "ROOT")) for f in received(subscriber)))
        subscriber.disconnect()
    return seen


def received(client: Client, quiet: float = 1.0) -> list[Any]:
    got = []
    try:
        while True:
            got.append(client.listener.messages.get(timeout=quiet))
    except queue.Empty:
        return got


def group_stickiness(address: Address, destination: str) -> list[Any]:
    """Two groups over two consumers: each group goes to one consumer, in order, its first
    message flagged; when that consumer leaves, the next takes its group (unacknowledged first)."""
    first, second = Client(address), Client(address)
    window = {"activemq.prefetchSize": "100"}
    first.subscribe(destination, "c1", ack="client-individual", headers=window)
    second.subscribe(destination, "c2", ack="client-individual", headers=window)
    sender = Client(address)
    for i in range(4):
        for group in ("X", "Y"):
            sender.send(destination, f"{group}{i}", receipt=True, JMSXGroupID=group)
    got = {"c1": received(first), "c2": received(second)}
    owners: dict[str, set[str]] = {}
    for name, frames in got.items():
        for frame in frames:
            owners.setdefault(frame.body.decode()[0], set()).add(name)
    sticky = sorted((group, len(names)) for group, names in owners.items())
    per_group: dict[str, list[tuple[str, str | None]]] = {}
    for frames in got.values():
        for frame in frames:
            body = frame.body.decode()
            per_group.setdefault(body[0], []).append((body, frame.headers.get("JMSXGroupFirstForConsumer")))
    leaving = "c1" if owners["X"] == {"c1"} else "c2"
    staying, gone = (second, first) if leaving == "c1" else (first, second)
    gone.disconnect()  # (nothing acknowledged: its group X comes again to the other one)
    sender.send(destination, "X4", receipt=True, JMSXGroupID="X")
    sender.disconnect()
    moved = [(f.body, f.headers.get("redelivered"), f.headers.get("JMSXGroupFirstForConsumer"))
             for f in received(staying)]
    staying.disconnect()
    return [sticky, sorted(per_group.items()), moved]


def virtual_topic(address: Address, destination: str) -> list[Any]:
    """Two consumer groups and a plain subscriber of a virtual topic: each group gets every
    message once, shared by its consumers; a group whose consumer is away keeps its copies."""
    name = destination.rsplit("/", 1)[1]
    topic = f"/topic/VirtualTopic.{name}"
    group_a, group_b = f"/queue/Consumer.A.VirtualTopic.{name}", f"/queue/Consumer.B.VirtualTopic.{name}"
    a1, a2, b, plain = Client(address), Client(address), Client(address), Client(address)
    one = {"activemq.prefetchSize": "1"}
    a1.subscribe(group_a, "a1", headers=one)
    a2.subscribe(group_a, "a2", headers=one)
    b.subscribe(group_b, "b")
    plain.subscribe(topic, "t")
    sender = Client(address)
    for i in range(6):
        sender.send(topic, f"m{i}", receipt=True, persistent="true")
    shared = [f.body for f in received(a1) + received(a2)]
    copied = received(b)
    heard = [f.body for f in received(plain)]
    b.disconnect()
    sender.send(topic, "while away", receipt=True, persistent="true")
    sender.disconnect()
    back = Client(address)
    back.subscribe(group_b, "b2")
    later = [f.body for f in received(back)]
    for client in (a1, a2, plain, back):
        client.disconnect()
    return [sorted(shared), len(shared), [f.body for f in copied],
            sorted({f.headers["destination"].replace(name, "NAME") for f in copied}), sorted(heard), later]


SCENARIOS: dict[str, Callable[[Address, str], list[Any]]] = {
    "virtual topic": virtual_topic,
    "group stickiness": group_stickiness,
    "wildcard fan-out": wildcard_fan_out,
    "exclusive takeover": exclusive_takeover,
    "browse snapshot": browse_snapshot,
    "composite send": composite_send,
}
EXPECTED: dict[str, list[Any]] = {
    "virtual topic": [[b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"], 6, [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"],
                      ["/queue/Consumer.B.VirtualTopic.NAME"], [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"],
                      [b"while away"]],
    "exclusive takeover": [[b"m0", b"m1", b"m2", b"m3"], True, [(b"m1", "true"), (b"m2", "true"), (b"m3", "true")]],
    "browse snapshot": [[b"m0", b"m1", b"m2", b""], "end", "0", "b", True, [b"m0", b"m1", b"m2"]],
    "wildcard fan-out": [
        [(b"m0", "ROOT.books.eu")],
        [(b"m0", "ROOT.books.eu"), (b"m1", "ROOT.books"), (b"m2", "ROOT.toys.us"), (b"m3", "ROOT.a.b.eu"),
         (b"m4", "ROOT")],
        [(b"m1", "ROOT.books")],
    ],
    "group stickiness": [
        [("X", 1), ("Y", 1)],
        [("X", [("X0", "true"), ("X1", None), ("X2", None), ("X3", None)]),
         ("Y", [("Y0", "true"), ("Y1", None), ("Y2", None), ("Y3", None)])],
        [(b"X0", "true", "true"), (b"X1", "true", None), (b"X2", "true", None), (b"X3", "true", None),
         (b"X4", None, None)],
    ],
    "composite send": [True, [(b"one", True), (b"two", True)], [(b"one", True), (b"two", True)]],
}


@pytest.fixture(scope="module")
def sqlite_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(Path(tmp_path_factory.mktemp("destinations")),
                             args=["--set", 'broker.persistence="sqlite"']).start()
    yield process
    process.kill()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_gateway_does_what_it_promises(scenario: str, sqlite_gateway: GatewayProcess) -> None:
    ours = SCENARIOS[scenario](sqlite_gateway.address, f"/queue/dest.{uuid.uuid4().hex[:8]}")
    assert ours == EXPECTED[scenario]


@pytest.mark.activemq
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_gateway_and_activemq_agree(scenario: str, sqlite_gateway: GatewayProcess,
                                        activemq: ActiveMQBroker) -> None:  # noqa: F811 - the fixture
    destination = f"/queue/dest.{uuid.uuid4().hex[:8]}"
    ours = SCENARIOS[scenario](sqlite_gateway.address, destination)
    theirs = SCENARIOS[scenario](("127.0.0.1", activemq.stomp_port), destination)
    if scenario == "group stickiness":
        # ActiveMQ sets JMSXGroupFirstForConsumer for JMS clients only: its STOMP MESSAGE lacks the
        # header, which the gateway adds (the issue asks for it); everything else must agree.
        ours = _without_first_flags(ours)
    assert ours == theirs, f"{scenario}: gateway {ours} / ActiveMQ {theirs}"


def _without_first_flags(observation: list[Any]) -> list[Any]:
    sticky, per_group, moved = observation
    return [sticky, [(group, [(body, None) for body, _ in bodies]) for group, bodies in per_group],
            [(body, redelivered, None) for body, redelivered, _ in moved]]


def test_bad_flags_and_browsing_a_topic_get_an_error(sqlite_gateway: GatewayProcess) -> None:
    clients = StompClients(sqlite_gateway.address)
    try:
        client = clients.connect("1.2")
        client.subscribe("/queue/x", "bad", receipt=False, headers={"activemq.exclusive": "yes"})
        error = client.error()
        assert error is not None and "activemq.exclusive" in error.headers["message"]
        other = clients.connect("1.2")
        other.subscribe("/topic/t", "b", receipt=False, browser="true")
        error = other.error()
        assert error is not None and "browses queues only" in error.body.decode()
    finally:
        clients.close()


def test_a_composite_send_needs_write_on_every_part(make_gateway: Callable[..., GatewayProcess]) -> None:
    process = make_gateway(ROOT_GRANT + grant("/queue/open.*", read=["alice"], write=["alice"]), args=ROOT_AND_ALICE)
    alice = Client(process.address, login="alice", passcode="alice-pw")
    receipt = "r-" + uuid.uuid4().hex
    alice.connection.send("/queue/open.a,/queue/closed.b", "x", headers={"receipt": receipt})
    error = alice.error()
    assert error is not None and error.headers["message"] == "not authorized to write /queue/open.a,/queue/closed.b"
    assert "/queue/closed.b" in error.body.decode()
    alice.send("/queue/open.a,/queue/open.b", "y", receipt=True)  # (the connection stays open)
    alice.subscribe("/queue/open.a", "a")
    assert [f.body for f in alice.messages(1)] == [b"y"]  # (the refused x was not stored)
    alice.disconnect()


def test_a_wildcard_subscriber_needs_read_on_the_pattern(make_gateway: Callable[..., GatewayProcess]) -> None:
    """As ActiveMQ: read is checked on the wildcard itself; a grant on part of what it reaches
    does not open it."""
    process = make_gateway(ROOT_GRANT + grant("/topic/orders.eu.*", read=["alice"]), args=ROOT_AND_ALICE)
    alice = Client(process.address, login="alice", passcode="alice-pw")
    alice.subscribe("/topic/orders.>", "all", receipt=False)
    error = alice.error()
    assert error is not None and error.headers["message"] == "not authorized to read /topic/orders.>"
    alice.subscribe("/topic/orders.eu.*", "eu")
    root = Client(process.address, login="root", passcode="r00t!x")
    root.send("/topic/orders.us.x", "us", receipt=True)
    root.send("/topic/orders.eu.x", "eu", receipt=True)
    got = alice.messages(1)
    assert [(f.body, f.headers["destination"], f.headers["subscription"]) for f in got] == \
        [(b"eu", "/topic/orders.eu.x", "eu")]
    assert alice.no_message(0.5)
    alice.disconnect()
    root.disconnect()


def test_last_value_queues_and_exclusive_queues_by_policy(make_gateway: Callable[..., GatewayProcess]) -> None:
    """``[broker.destinations."PATTERN"]``: a last-value queue keeps the newest waiting message of
    each ``_AMQ_LVQ_NAME`` (across a restart too), an exclusive one gives everything to one consumer."""
    config = """
[broker.destinations."/queue/prices.>"]
last_value = true

[broker.destinations."/queue/jobs.>"]
exclusive = true
"""
    process = make_gateway(config, args=["--set", 'broker.persistence="sqlite"'])
    sender = Client(process.address)
    for key, price in [("EUR", "1.10"), ("USD", "1.00"), ("EUR", "1.11")]:
        sender.send("/queue/prices.fx", price, receipt=True, persistent="true", _AMQ_LVQ_NAME=key)
    sender.disconnect()
    process.kill()
    process.start()
    sender = Client(process.address)
    sender.send("/queue/prices.fx", "1.12", receipt=True, persistent="true", _AMQ_LVQ_NAME="EUR")
    reader = Client(process.address)
    reader.subscribe("/queue/prices.fx", "p")
    assert sorted(f.body for f in received(reader)) == [b"1.00", b"1.12"]
    first, second = Client(process.address), Client(process.address)
    first.subscribe("/queue/jobs.a", "j1")
    second.subscribe("/queue/jobs.a", "j2")
    for i in range(4):
        sender.send("/queue/jobs.a", f"j{i}", receipt=True)
    assert [f.body for f in received(first)] == [b"j0", b"j1", b"j2", b"j3"] and second.no_message(0.3)
    for client in (sender, reader, first, second):
        client.disconnect()


def test_scheduled_messages_arrive_on_time_across_a_crash(make_gateway: Callable[..., GatewayProcess]) -> None:
    """AMQ_SCHEDULED_DELAY / PERIOD / REPEAT over STOMP; the gateway is SIGKILLed while the jobs
    wait and they still come on time (± 1 s, docs/stomp.md); AMQ_SCHEDULED_CRON gets an ERROR."""
    process = make_gateway(args=["--set", 'broker.persistence="sqlite"'])
    sender = Client(process.address)
    sent = time.monotonic()
    sender.send("/queue/sched.a", "in 4 s", receipt=True, persistent="true", AMQ_SCHEDULED_DELAY="4000")
    sender.send("/queue/sched.a", "every 1 s", receipt=True, persistent="true", AMQ_SCHEDULED_DELAY="5000",
                AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="2")
    sender.disconnect()
    process.kill()
    process.start()
    reader = Client(process.address)
    reader.subscribe("/queue/sched.a", "s")
    arrivals = []
    for _ in range(4):
        frame = reader.message(15)
        arrivals.append((frame.body, round(time.monotonic() - sent), frame.headers["message-id"].count(":")))
    assert [body for body, _, _ in arrivals] == [b"in 4 s", b"every 1 s", b"every 1 s", b"every 1 s"]
    assert all(abs(at - due) <= 1 for (_, at, _), due in zip(arrivals, [4, 5, 6, 7], strict=True)), arrivals
    assert reader.no_message(1.5), "three deliveries of the repeated one, no more"
    bad = Client(process.address)
    bad.connection.send("/queue/sched.a", "x", headers={"AMQ_SCHEDULED_CRON": "* * * * *", "receipt": "r"})
    error = bad.error()
    assert error is not None and "AMQ_SCHEDULED_CRON is not supported" in (
        error.headers.get("message", "") + error.body.decode())
    reader.disconnect()


# -- through the stomp:// connector: ActiveMQ does these natively ----------------------------


@pytest.fixture(scope="module")
def routed_gateway(activemq: ActiveMQBroker,  # noqa: F811 - the fixture
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(Path(tmp_path_factory.mktemp("routed")), f"""
[connectors.activemq]
uri = "{activemq.stomp_uri}"
login = "gateway"
passcode = "secret"
failure_retry_interval = 200

[[destinations]]
pattern = "/queue/amq.*"
connector = "activemq"

[[destinations]]
pattern = "/topic/amq.*"
connector = "activemq"
""").start()
    yield process
    process.kill()


@pytest.mark.activemq
@pytest.mark.parametrize("scenario", ["exclusive takeover", "composite send", "wildcard fan-out", "group stickiness"])
def test_the_stomp_connector_passes_them_to_activemq(scenario: str, routed_gateway: GatewayProcess) -> None:
    ours = SCENARIOS[scenario](routed_gateway.address, f"/queue/amq.{uuid.uuid4().hex[:8]}")
    expected = EXPECTED[scenario]
    if scenario == "group stickiness":  # (ActiveMQ's STOMP MESSAGE has no JMSXGroupFirstForConsumer)
        expected = _without_first_flags(expected)
    assert ours == expected


@pytest.mark.activemq
def test_the_stomp_connector_refuses_a_browse(routed_gateway: GatewayProcess) -> None:
    client = Client(routed_gateway.address)
    client.subscribe(f"/queue/amq.{uuid.uuid4().hex[:8]}", "b", receipt=False, browser="true")
    error = client.error()
    assert error is not None and error.headers["message"] == "browser:true is not supported here"
    client.disconnect()
