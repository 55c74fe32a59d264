"""Answers in frame order and limits under pipelining (issue 38, defects 1 and 2).

A session over a StringTransport sends to the embedded broker whose store
writes complete only when the test says so, as a pipelining client sees it
when the disk is slower than the socket: a RECEIPT never goes out before the
answers of the connection's earlier frames; a SEND that needs no write waits
for the earlier ones; FAIL's ERROR comes after the receipts of what was
stored; ``max_size`` counts what is on its way to the store.  Every test runs with a store
that answers each write with a Deferred and with one that groups adds (``IGroupedWrites``, the
SQLite store's way: the broker's SEND path then makes no Deferred, issue 39).
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from zope.interface import implementer

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.limits import message_size
from gateway.broker.settings import BrokerSettings, DestinationLimits
from gateway.broker.store.snapshot import Snapshot
from gateway.interfaces import IGroupedWrites
from gateway.message.model import TextMessage
from gateway.stomp.receipts import ReceiptLine
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect, make_factory

BODY = b"x" * 1000
ONE = message_size(TextMessage(destination="/queue/limited.q", message_id="ID:jmsgw-1-1:1", text="x" * 1000)) + 40
"""About what one SEND of :data:`BODY` counts for (its message id is a little longer)."""


class HeldStore:
    """A message store whose writes complete when the test calls :meth:`complete`."""

    def __init__(self) -> None:
        self.writes: list[tuple[Deferred[None], list[Any]]] = []
        self.stored: list[Any] = []

    def open(self) -> Deferred[Snapshot]:
        return succeed(Snapshot())

    def close(self) -> Deferred[None]:
        return succeed(None)

    def add_batch(self, entries: list[Any]) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.writes.append((d, entries))
        return d

    def add_durable(self, *args: Any) -> Deferred[None]:
        return succeed(None)

    def remove(self, *args: Any) -> Deferred[None]:
        return succeed(None)

    def set_redelivery(self, *args: Any) -> Deferred[None]:
        return succeed(None)

    def complete(self, order: list[int] | None = None) -> None:
        """Complete the waiting writes (in ``order``, indexes into the waiting ones)."""
        waiting = self.writes
        chosen = order if order is not None else range(len(waiting))
        self.writes = [write for index, write in enumerate(waiting) if index not in chosen]
        for index in chosen:
            d, entries = waiting[index]
            self.stored.extend(entries)
            d.callback(None)


@implementer(IGroupedWrites)
class GroupedHeldStore(HeldStore):
    """:class:`HeldStore` that also takes adds reported through a callback (each one a write of its own)."""

    def add_then(self, entries: list[Any], done: Any) -> None:
        self.add_batch(entries).addCallbacks(lambda _: done(None), lambda failure: done(failure.value))

    def remove_then(self, queue: str, message_id: str, done: Any) -> None:
        done(None)


STORES = {"deferred": HeldStore, "grouped": GroupedHeldStore}
store_kind = "deferred"


@pytest.fixture(autouse=True, params=list(STORES))
def each_store(request: pytest.FixtureRequest) -> Any:
    global store_kind
    store_kind = request.param
    yield
    store_kind = "deferred"


def start(policy: Literal["PAGE", "BLOCK", "FAIL", "DROP"] | None = None,
          max_size: int = 3 * ONE) -> tuple[Clock, EmbeddedBroker, HeldStore, Peer]:
    clock = Clock()
    store = STORES[store_kind]()
    limits = {"/queue/limited.>": DestinationLimits(max_size=max_size, full_policy=policy),
              "/topic/limited.>": DestinationLimits(max_size=max_size, full_policy=policy)} if policy else {}
    broker = EmbeddedBroker(clock, BrokerSettings(destinations=limits), store)  # type: ignore[arg-type]
    broker.start()
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    return clock, broker, store, peer


def send(peer: Peer, destination: str, persistent: bool, receipt: str | None = None, **headers: str) -> None:
    if receipt is not None:
        headers["receipt"] = receipt
    peer.send("SEND", {"destination": destination, "persistent": str(persistent).lower(), **headers}, BODY)


def answers(peer: Peer) -> list[str]:
    return [f.headers.get("receipt-id", "-") if f.command == "RECEIPT" else f"ERROR:{f.headers.get('receipt-id')}"
            for f in peer.received() if f.command in ("RECEIPT", "ERROR")]


# -- defect 1: a receipt covers the earlier SENDs ----------------------------


@pytest.mark.parametrize("last_to", ["/queue/a", "/queue/b", "/topic/nobody"])
def test_a_receipt_for_a_send_needing_no_write_waits_for_the_earlier_stored_sends(last_to: str) -> None:
    _, broker, store, peer = start()
    for _ in range(5):
        send(peer, "/queue/a", persistent=True)
    send(peer, last_to, persistent=False, receipt="last")
    assert answers(peer) == []  # the five are not stored yet
    store.complete(order=[4, 3, 2, 1, 0])  # (each completes on its own, the last first)
    assert answers(peer) == ["last"]
    assert len(broker.queues["/queue/a"]) == (6 if last_to == "/queue/a" else 5)


def test_receipts_follow_the_frames_order_when_later_frames_need_no_write() -> None:
    _, _, store, peer = start()
    send(peer, "/queue/a", persistent=True, receipt="r0")
    send(peer, "/queue/b", persistent=False, receipt="r1")
    peer.send("BEGIN", {"transaction": "t", "receipt": "r2"})
    peer.send("ABORT", {"transaction": "t", "receipt": "r3"})
    send(peer, "/queue/a", persistent=True, receipt="r4")
    assert answers(peer) == []
    store.complete(order=[1, 0])
    assert answers(peer) == ["r0", "r1", "r2", "r3", "r4"]


def test_a_disconnect_receipt_follows_every_earlier_answer() -> None:
    _, _, store, peer = start()
    send(peer, "/queue/a", persistent=True, receipt="r0")
    send(peer, "/queue/b", persistent=False)
    peer.send("DISCONNECT", {"receipt": "bye"})
    assert answers(peer) == [] and not peer.closed
    store.complete()
    assert answers(peer) == ["r0", "bye"] and peer.closed


def test_a_send_that_waits_behind_earlier_writes_is_receipted_once_it_is_in_its_queue() -> None:
    """A priority-9 message sent last is delivered first once its receipt came (as on ActiveMQ)."""
    _, broker, store, peer = start()
    for _ in range(5):
        send(peer, "/queue/p", persistent=True, priority="4")
    send(peer, "/queue/p", persistent=False, receipt="last", priority="9")
    store.complete(order=[0, 1])  # the first two stored: the rest (and the priority-9 one) still wait
    assert answers(peer) == []
    assert len(broker.queues["/queue/p"]) == 2
    store.complete()
    assert answers(peer) == ["last"]
    peer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/p", "ack": "client-individual"})
    first = next(f for f in peer.received() if f.command == "MESSAGE")
    assert first.headers["priority"] == "9"


def test_an_error_goes_out_after_the_receipts_of_the_frames_before_it() -> None:
    _, _, store, peer = start()
    send(peer, "/queue/a", persistent=True, receipt="r0")
    peer.send("ACK", {"id": "nothing", "receipt": "r1"})  # fails at once
    send(peer, "/queue/a", persistent=True, receipt="r2")  # (not read: the connection is failing)
    assert answers(peer) == [] and not peer.closed
    store.complete()
    assert answers(peer) == ["r0", "ERROR:r1"]
    assert peer.closed
    assert len(store.stored) == 1


def test_a_failed_write_answers_with_its_error_after_the_earlier_receipts() -> None:
    _, _, store, peer = start()
    send(peer, "/queue/a", persistent=True, receipt="r0")
    send(peer, "/queue/a", persistent=True, receipt="r1")
    send(peer, "/queue/b", persistent=False, receipt="r2")
    (first, _), (second, _) = store.writes
    second.errback(OSError("disk gone"))
    assert answers(peer) == []
    first.callback(None)
    assert answers(peer) == ["r0", "ERROR:r1"] and peer.closed


# -- defect 2: max_size counts what is on its way to the store ---------------


def test_fail_refuses_at_the_limit_with_receipts_exactly_for_what_was_stored() -> None:
    _, broker, store, peer = start("FAIL")
    for n in range(6):
        send(peer, "/queue/limited.q", persistent=True, receipt=f"r{n}")
    assert answers(peer) == []  # nothing stored yet: neither receipts nor the ERROR
    store.complete()
    assert answers(peer) == ["r0", "r1", "r2", "ERROR:r3"]
    assert peer.closed
    assert len(store.stored) == 3
    assert len(broker.queues["/queue/limited.q"]) == 3


def test_drop_keeps_at_most_the_limit_and_answers_in_order() -> None:
    _, broker, store, peer = start("DROP")
    for n in range(6):
        send(peer, "/queue/limited.q", persistent=True, receipt=f"r{n}")
    assert answers(peer) == []  # the dropped ones wait for the earlier ones too
    store.complete()
    assert answers(peer) == [f"r{n}" for n in range(6)]
    assert len(broker.queues["/queue/limited.q"]) == 3
    assert len(store.stored) == 3
    assert broker.metrics.dropped.count == 3


def test_a_durable_subscription_of_a_drop_topic_drops_instead_of_paging() -> None:
    _, broker, store, peer = start("DROP")
    subscriber = Peer(make_factory(broker.clock, broker))  # type: ignore[arg-type]
    connect(subscriber, **{"client-id": "c"})
    subscriber.send("SUBSCRIBE", {"id": "d", "destination": "/topic/limited.t",
                                  "activemq.subscriptionName": "keep", "receipt": "on"})
    subscriber.send("DISCONNECT", {"receipt": "off"})
    for n in range(6):
        send(peer, "/topic/limited.t", persistent=True, receipt=f"r{n}")
    store.complete()
    assert answers(peer) == [f"r{n}" for n in range(6)]
    durable = broker.durables["c:keep"] if "c:keep" in broker.durables else next(iter(broker.durables.values()))
    assert len(durable) == 3
    assert durable.paged == 0


def test_block_holds_the_sender_at_the_limit_before_anything_is_stored() -> None:
    _, broker, store, peer = start("BLOCK")
    for n in range(3):
        send(peer, "/queue/limited.q", persistent=True, receipt=f"r{n}")
    assert peer.transport.producerState == "producing"
    send(peer, "/queue/limited.q", persistent=True, receipt="r3")  # past the limit: taken, the sender held
    assert peer.transport.producerState == "paused"
    store.complete()
    assert answers(peer) == ["r0", "r1", "r2", "r3"]
    assert peer.transport.producerState == "paused"  # still full
    consumer = Peer(make_factory(broker.clock, broker))  # type: ignore[arg-type]
    connect(consumer)
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/limited.q"})
    assert peer.transport.producerState == "producing"


# -- the line itself ----------------------------------------------------------


def test_the_line_writes_nothing_after_a_final_answer() -> None:
    written: list[str] = []
    closed: list[bool] = []
    line = ReceiptLine(lambda frame: written.append(frame.headers["receipt-id"]), lambda: closed.append(True),
                       lambda reason, frame: Frame("RECEIPT", {"receipt-id": "error"}))
    first = line.later(Frame("SEND", {"receipt": "a"}))
    second = line.later(Frame("SEND", {"receipt": "b"}))
    line.now(Frame("RECEIPT", {"receipt-id": "c"}), final=True)
    third = line.later(Frame("SEND", {"receipt": "d"}))
    second.failed(ValueError("no"))
    assert written == [] and not closed
    first.succeeded()
    third.succeeded()
    assert written == ["a", "error"] and closed == [True]
    assert len(line) == 0


# -- a subscriber that leaves while a SEND to its topic waits for the store --------------


def test_a_topic_subscriber_leaving_while_a_send_waits_for_the_store_keeps_nothing() -> None:
    """A persistent SEND to a topic with a durable subscriber waits for its write; a plain
    subscriber of the topic that unsubscribes meanwhile must not get the message into its
    discarded queue when the write completes (its memory would count for ever)."""
    clock, broker, store, producer = start()
    durable = Peer(make_factory(clock, broker))
    connect(durable, **{"client-id": "keeper"})
    durable.send("SUBSCRIBE", {"destination": "/topic/t", "id": "d", "ack": "client",
                               "activemq.subscriptionName": "keep", "activemq.prefetchSize": "1"})
    store.complete()
    leaver = Peer(make_factory(clock, broker))
    connect(leaver)
    leaver.send("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "ack": "client", "activemq.prefetchSize": "1"})
    [plain] = [queue for queue in broker.topics["/topic/t"] if not queue.durable]
    before = broker.memory.used
    for _ in range(3):
        send(producer, "/topic/t", persistent=True)
    leaver.send("UNSUBSCRIBE", {"id": "s"})
    assert plain not in broker.topics["/topic/t"]
    store.complete()
    assert len(plain) == 0 and plain.memory == 0, "nothing enqueued into the queue the subscriber left"
    durable_queue = broker.durables["keeper:keep"] if "keeper:keep" in broker.durables else next(
        iter(broker.durables.values()))
    assert broker.memory.used - before == durable_queue.memory, "only the durable subscriber's copies count"
