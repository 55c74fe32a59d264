"""The idempotency window (issue 35): a resent SEND with a stored x-dedup-id is settled, not stored twice.

:class:`IdempotentSends` alone (a fake send), :class:`SendIdTable` on an SQLite
file, and the embedded broker on the SQLite store across a restart (the window
survives a takeover: it is read back with the messages).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock

from gateway.broker.composite import expand
from gateway.broker.idempotency import IdempotentSends, SendIdTable, has_send_id, send_key
from gateway.broker.settings import BrokerSettings
from gateway.errors import StoreError
from gateway.message.model import Message, TextMessage
from tests.unit.test_store_broker import Run, Sink


def marked(destination: str, dedup: str | None, body: str = "x", header: str = "x-dedup-id") -> TextMessage:
    message = TextMessage(destination=destination, message_id=f"ID:{body}", text=body, persistent=True)
    if dedup is not None:
        message.properties[header] = dedup
    return message


class Sender:
    """A fake send: records what it got; answers with ``answer`` (None: settled at once)."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.answer: Deferred[None] | None = None

    def __call__(self, messages: list[Message]) -> Deferred[None] | None:
        self.sent.append([m.text for m in messages if isinstance(m, TextMessage) and m.text is not None])
        return self.answer


def test_the_key_is_the_destination_and_the_id() -> None:
    assert send_key(marked("/queue/a", "1")) == "/queue/a\n1"
    assert send_key(marked("/queue/a", "1", header="_AMQ_DUPL_ID")) == "/queue/a\n1"
    both = marked("/queue/a", "mine")
    both.properties["_AMQ_DUPL_ID"] = "artemis"
    assert send_key(both) == "/queue/a\nmine"
    assert send_key(marked("/queue/a", None)) is None
    assert send_key(marked("/queue/a", "")) is None
    assert not has_send_id(marked("/queue/a", None))


def test_a_resend_with_a_stored_id_is_settled_without_sending_and_counted() -> None:
    registry = CollectorRegistry()
    sends = IdempotentSends(Clock(), registry=registry)
    sender = Sender()
    assert sends.send([marked("/queue/a", "1", "first")], sender) is None
    assert sends.send([marked("/queue/a", "1", "again")], sender) is None
    assert sends.send([marked("/queue/b", "1", "other destination")], sender) is None
    assert sends.send([marked("/queue/a", None, "no id")], sender) is None
    assert sender.sent == [["first"], ["other destination"], ["no id"]]
    assert registry.get_sample_value("jmsgateway_broker_duplicate_sends_total") == 1
    assert registry.get_sample_value("jmsgateway_broker_dedup_window_ids") == 2


def test_a_failed_send_leaves_no_id_and_a_resend_is_sent() -> None:
    sends = IdempotentSends(Clock())
    sender = Sender()
    sender.answer = fail(StoreError("disk full"))
    failed = sends.send([marked("/queue/a", "1", "first")], sender)
    assert failed is not None
    failed.addErrback(lambda _: None)
    sender.answer = None
    sends.send([marked("/queue/a", "1", "again")], sender)
    assert sender.sent == [["first"], ["again"]]


def test_a_resend_while_the_first_is_under_way_waits_for_its_outcome() -> None:
    sends = IdempotentSends(Clock())
    sender = Sender()
    stored: Deferred[None] = Deferred()
    sender.answer = stored
    first = sends.send([marked("/queue/a", "1", "first")], sender)
    second = sends.send([marked("/queue/a", "1", "second")], sender)
    assert first is not None and second is not None
    assert sender.sent == [["first"]] and not second.called
    stored.callback(None)
    assert second.called and sender.sent == [["first"]]
    # the same when the first fails: the resend is sent then
    failing: Deferred[None] = Deferred()
    sender.answer = failing
    first = sends.send([marked("/queue/a", "2", "third")], sender)
    assert first is not None
    first.addErrback(lambda _: None)
    sender.answer = succeed(None)
    second = sends.send([marked("/queue/a", "2", "fourth")], sender)
    assert second is not None and not second.called
    failing.errback(StoreError("disk full"))
    assert second.called and sender.sent[-2:] == [["third"], ["fourth"]]


def test_one_batch_with_the_same_id_twice_sends_it_once() -> None:
    sends = IdempotentSends(Clock())
    sender = Sender()
    sends.send([marked("/queue/a", "1", "one"), marked("/queue/a", "1", "two"), marked("/queue/a", None, "three")],
               sender)
    assert sender.sent == [["one", "three"]]
    assert sends.duplicates == 1


def test_the_window_is_bounded_by_count_and_age() -> None:
    clock = Clock()
    sends = IdempotentSends(clock, size=3, seconds=60)
    sender = Sender()
    for n in range(5):
        sends.send([marked("/queue/a", str(n), f"m{n}")], sender)
    assert len(sends) == 3
    sends.send([marked("/queue/a", "0", "forgotten: sent again")], sender)
    sends.send([marked("/queue/a", "4", "remembered")], sender)
    assert sender.sent[-1] == ["forgotten: sent again"]
    clock.advance(61)
    sends.send([marked("/queue/a", "4", "too old: sent again")], sender)
    assert sender.sent[-1] == ["too old: sent again"]
    assert len(sends) == 1  # (the old ones went when the new one was kept)


def test_a_window_of_zero_detects_nothing() -> None:
    sends = IdempotentSends(Clock(), size=0)
    sender = Sender()
    sends.send([marked("/queue/a", "1", "one")], sender)
    sends.send([marked("/queue/a", "1", "two")], sender)
    assert sender.sent == [["one"], ["two"]]


def test_a_composite_send_is_a_duplicate_when_every_part_was_stored() -> None:
    sends = IdempotentSends(Clock(), parts=expand)
    sender = Sender()
    sends.send([marked("/queue/a,/queue/b", "1", "both")], sender)
    sends.send([marked("/queue/a,/queue/b", "1", "again")], sender)
    sends.send([marked("/queue/a,/queue/c", "1", "a new part")], sender)
    assert sender.sent == [["both"], ["a new part"]]


def test_recovered_ids_are_duplicates_unless_past_the_window() -> None:
    clock = Clock()
    clock.advance(1000)
    sends = IdempotentSends(clock, size=2, seconds=100)
    sends.recover([("/queue/a\nold", 850_000), ("/queue/a\n1", 990_000), ("/queue/a\n2", 995_000),
                   ("/queue/a\n3", 999_000)])
    assert len(sends) == 2
    sender = Sender()
    for n in ("2", "3", "1"):
        sends.send([marked("/queue/a", n, n)], sender)
    assert sender.sent == [["1"]]


def test_the_table_keeps_the_window_and_forgets_past_it(tmp_path: Path) -> None:
    db = sqlite3.connect(str(tmp_path / "ids.sqlite"), isolation_level=None)
    table = SendIdTable(size=3, seconds=10)
    table.create(db)
    table.create(db)  # (an existing table is kept)
    entries: list[tuple[str, Message]] = [("/queue/a", marked("/queue/a", str(n))) for n in range(5)]
    entries.append(("durable:c:s", marked("/topic/t", "t")))
    entries.append(("durable:c:s2", entries[-1][1]))  # (one topic message stored for two subscriptions: one id)
    entries.append(("/queue/a", marked("/queue/a", None)))
    rows = SendIdTable.rows(entries, 100_000)
    assert sorted(key for key, _ in rows) == ["/queue/a\n0", "/queue/a\n1", "/queue/a\n2", "/queue/a\n3",
                                              "/queue/a\n4", "/topic/t\nt"]
    table.record(db, rows[:5])
    table.record(db, [("/topic/t\nt", 101_000)])
    loaded = table.load(db, 105_000)
    assert loaded[-1] == ("/topic/t\nt", 101_000) and len(loaded) == 3
    assert table.load(db, 111_500) == []  # (all older than 10 s)


def test_the_table_prunes_every_so_many_writes(tmp_path: Path) -> None:
    db = sqlite3.connect(str(tmp_path / "ids.sqlite"), isolation_level=None)
    table = SendIdTable(size=10, seconds=3600)
    table.PRUNE_EVERY = 50
    table.create(db)
    for n in range(120):
        table.record(db, [(f"/queue/a\n{n}", 1000 + n)])
    count = db.execute("SELECT count(*) FROM send_ids").fetchone()[0]
    assert count <= 10 + 50


# -- the embedded broker on the SQLite store ----------------------------------


@pytest.fixture
def run(tmp_path: Path) -> Any:
    run = Run(tmp_path, BrokerSettings(persistence="sqlite"))
    run.start()
    yield run
    run.close()


def test_a_resend_after_a_restart_is_acknowledged_and_not_stored_again(run: Run) -> None:
    """The window is in the store: a crash after the commit (the RECEIPT lost with the gateway)
    and a resend to the next gateway store the message once, even once it was consumed."""
    broker = run.broker
    assert broker is not None
    run.wait(broker.send(marked("/queue/orders", "order-1", "first")))
    run.send(marked("/queue/orders", "order-2", "in a transaction"), marked("/queue/orders", None, "unmarked"))
    broker = run.restart()
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual")
    assert sink.texts() == ["first", "in a transaction", "unmarked"]
    for _, tag in sink.got:
        run.wait(subscription.ack([tag]))
    run.settle()
    broker = run.restart()
    sink = Sink()
    run.subscribe(sink, destination="/queue/orders")
    run.wait(broker.send(marked("/queue/orders", "order-1", "resent")))
    run.wait(broker.send_batch([marked("/queue/orders", "order-2", "resent in a transaction"),
                                marked("/queue/orders", "order-3", "new")]))
    assert sink.texts() == ["new"]
    assert broker.idempotency.duplicates == 2


def test_a_dead_letter_sent_back_is_not_a_duplicate(run: Run) -> None:
    """Sending a dead letter back to where it came from (the console's retry) is not a resend."""
    broker = run.broker
    assert broker is not None
    from gateway.broker.operations import QueueOperations

    run.wait(broker.send(marked("/queue/orders", "order-1", "first")))
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual")
    for _ in range(broker.settings.max_redeliveries + 1):
        run.wait(subscription.nack([sink.got[-1][1]]))
    run.settle()
    run.wait(subscription.close())
    assert broker.status()["queues"]["/queue/DLQ.orders"]["pending"] == 1
    moved = run.wait(QueueOperations(broker).move_to_origin("/queue/DLQ.orders"))
    assert moved == 1
    assert broker.status()["queues"]["/queue/orders"]["pending"] == 1
