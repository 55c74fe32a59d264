"""The destination attacks' edge cases run against ActiveMQ 5.17 too, where docs/stomp.md says the gateway
does as ActiveMQ does: the ``destination`` a consumer of a virtual topic's consumer queue sees (plain and
through a wildcard queue subscription).  The same scenario runs on the gateway (SQLite) and on the
session's ActiveMQ; the observations must be equal.  (A composite destination naming a part twice is not
compared: ActiveMQ queued one copy in four runs of five and two in the fifth; the gateway queues one,
tests/integration/test_composite_virtual_attacks.py.)
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401 - the broker fixture
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

Address = tuple[str, int]


def arrivals(client: Client, quiet: float = 1.0) -> list[tuple[bytes, str]]:
    got: list[tuple[bytes, str]] = []
    while True:
        try:
            message = client.listener.messages.get(timeout=quiet)
        except queue.Empty:
            return sorted(got)
        got.append((message.body, message.headers["destination"]))


def consumer_queue_destinations(address: Address, name: str) -> list[tuple[bytes, str]]:
    """What a plain consumer of group B's queue and a wildcard consumer of group A's queues see; ActiveMQ's
    wildcard consumer also gets a copy from a queue named by the pattern itself (see docs/stomp.md): only
    the copies from the concrete consumer queues are compared."""
    client = Client(address)
    for queue_name in (f"/queue/Consumer.A.VirtualTopic.{name}.one", f"/queue/Consumer.A.VirtualTopic.{name}.two"):
        client.subscribe(queue_name, "s")
        client.unsubscribe("s")
    plain = Client(address)
    plain.subscribe(f"/queue/Consumer.B.VirtualTopic.{name}.one", "p")
    wildcard = Client(address)
    wildcard.subscribe(f"/queue/Consumer.A.VirtualTopic.{name}.>", "w")
    client.send(f"/topic/VirtualTopic.{name}.one", "1", receipt=True)
    client.send(f"/topic/VirtualTopic.{name}.two", "2", receipt=True)
    try:
        seen = arrivals(plain) + [arrival for arrival in arrivals(wildcard) if not arrival[1].endswith(".>")]
        return sorted(seen)
    finally:
        for each in (client, plain, wildcard):
            each.disconnect()


SCENARIOS: dict[str, Callable[[Address, str], list[tuple[bytes, str]]]] = {
    "consumer-queue-destinations": consumer_queue_destinations,
}


@pytest.fixture(scope="module")
def sqlite_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("gateway")).start()
    yield process
    process.stop()


@pytest.mark.activemq
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_gateway_and_activemq_agree(scenario: str, sqlite_gateway: GatewayProcess,
                                        activemq: ActiveMQBroker) -> None:  # noqa: F811 - the fixture
    name = f"amq{uuid.uuid4().hex[:8]}"
    ours = SCENARIOS[scenario](sqlite_gateway.address, name)
    theirs = SCENARIOS[scenario](("127.0.0.1", activemq.stomp_port), name)
    assert ours == theirs
    assert ours, "the scenario saw nothing"
