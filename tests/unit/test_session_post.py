"""The STOMP session's Deferred-free send path to an :class:`IPostingConnector`.

A fake posting connector records each post; the test settles them in any
order and checks what the client sees: a RECEIPT only after its own SEND
settled, an ERROR naming the problem when one fails, and a DISCONNECT receipt
only once every earlier SEND has settled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from zope.interface import implementer

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import ConnectorError
from gateway.interfaces import Capability, IPostingConnector
from gateway.message.model import Message
from gateway.routing.config import DestinationRule
from gateway.routing.destination_map import DestinationMap
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.settings import StompSettings
from tests.unit.test_session import Peer, connect


@implementer(IPostingConnector)
class PostingConnector:
    """Keeps every posted message with its ``settled`` callback; ``send`` is counted separately."""

    name = "posting"
    capabilities: frozenset[Capability] = frozenset()

    def __init__(self) -> None:
        self.posts: list[tuple[Message, Any]] = []
        self.confirms: list[bool] = []
        self.sends: list[Message] = []

    def post(self, message: Message, settled: Any, confirm: bool = True) -> None:
        self.posts.append((message, settled))
        self.confirms.append(confirm)

    def send(self, message: Message) -> Deferred[None]:
        self.sends.append(message)
        return succeed(None)

    def send_batch(self, messages: list[Message]) -> Deferred[None]:
        self.sends.extend(messages)
        return succeed(None)

    def start(self) -> Deferred[None]:
        return succeed(None)

    def stop(self) -> Deferred[None]:
        return succeed(None)

    def subscribe(self, spec: Any, consumer: Any) -> Deferred[None]:
        return succeed(None)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        return succeed(None)


@pytest.fixture
def setup() -> Iterator[tuple[Peer, PostingConnector]]:
    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    connector = PostingConnector()
    destinations = DestinationMap(
        {"embedded": broker, "posting": connector},
        [DestinationRule(pattern="/queue/out.*", connector="posting", rename="/queue/")],
    )
    peer = Peer(StompServerFactory(clock, destinations, settings=StompSettings()))
    connect(peer)
    yield peer, connector
    broker.stop()


def test_receipts_follow_the_sends_order_whatever_order_they_settle_in(
        setup: tuple[Peer, PostingConnector]) -> None:
    # A RECEIPT covers every earlier SEND of the connection (issue 38, defect 1): a later SEND
    # settled first waits for the earlier ones.
    peer, connector = setup
    for n in range(3):
        peer.send("SEND", {"destination": "/queue/out.a", "receipt": f"r{n}"}, b"x")
    assert [m.destination for m, _ in connector.posts] == ["/queue/a"] * 3  # renamed on the way
    assert connector.confirms == [True] * 3
    assert peer.received() == []  # nothing settled yet: no receipt
    connector.posts[2][1](None, "ack")
    assert peer.received() == []  # r2 waits for r0 and r1
    connector.posts[0][1](None, None)
    assert [f.headers["receipt-id"] for f in peer.received()] == ["r0"]
    connector.posts[1][1](None, None)
    assert [f.headers["receipt-id"] for f in peer.received()] == ["r1", "r2"]
    assert connector.sends == []


def test_a_failed_post_is_an_error_frame(setup: tuple[Peer, PostingConnector]) -> None:
    peer, connector = setup
    peer.send("SEND", {"destination": "/queue/out.a"}, b"no receipt asked")
    peer.send("SEND", {"destination": "/queue/out.a", "receipt": "r1"}, b"x")
    assert connector.confirms == [False, True]  # nobody waits for the first one alone
    connector.posts[0][1](ConnectorError("kafka topic 'a' does not exist"), None)
    [error] = peer.received()
    assert error.command == "ERROR" and "receipt-id" not in error.headers
    assert b"kafka topic 'a' does not exist" in error.body
    assert peer.closed
    connector.posts[1][1](None, None)  # settles after the close: nothing more is written
    assert peer.received() == []


def test_failed_post_with_receipt_names_it(setup: tuple[Peer, PostingConnector]) -> None:
    peer, connector = setup
    peer.send("SEND", {"destination": "/queue/out.a", "receipt": "r9"}, b"x")
    connector.posts[0][1](ConnectorError("refused"), None)
    [error] = peer.received()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r9"


def test_disconnect_receipt_waits_for_every_post(setup: tuple[Peer, PostingConnector]) -> None:
    peer, connector = setup
    peer.send("SEND", {"destination": "/queue/out.a"}, b"1")
    peer.send("SEND", {"destination": "/queue/out.a"}, b"2")
    peer.send("DISCONNECT", {"receipt": "bye"})
    assert peer.received() == [] and not peer.closed
    connector.posts[1][1](None, None)
    assert peer.received() == []
    connector.posts[0][1](None, None)
    [receipt] = peer.received()
    assert receipt.headers["receipt-id"] == "bye" and peer.closed


def test_transactions_do_not_post(setup: tuple[Peer, PostingConnector]) -> None:
    peer, connector = setup
    peer.send("BEGIN", {"transaction": "t"})
    peer.send("SEND", {"destination": "/queue/out.a", "transaction": "t"}, b"in tx")
    peer.send("COMMIT", {"transaction": "t", "receipt": "c"})
    peer.send("SEND", {"destination": "/queue/plain", "receipt": "e"}, b"embedded")
    assert connector.posts == []
    assert [m.destination for m in connector.sends] == ["/queue/a"]
    assert [f.headers["receipt-id"] for f in peer.received()] == ["c", "e"]
