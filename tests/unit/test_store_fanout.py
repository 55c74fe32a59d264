"""Topic fan-out in the SQLite store: one stored copy of a message for all its durable subscriptions.

A persistent message published to a topic with several durable subscriptions is one row of
``bodies`` and one small row of ``messages`` per subscription (its own place, redelivery count,
expiration).  The body goes with its last row: acknowledgements, expiry, a move to a dead-letter
queue and unsubscribes each drop one subscription's rows, never another's record.  A store of
schema 1 or 2 (one copy per subscription) is migrated once, its copies shared.  The file is looked
at with a connection of the test's own.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gateway.broker.settings import BrokerSettings
from gateway.broker.store.snapshot import Snapshot
from gateway.broker.store.sqlite_records import encode_message
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.message.model import Message, TextMessage
from tests.support.messages import text_of
from tests.unit.test_store_broker import Run, Sink
from tests.unit.test_store_contract import NOW, PumpedReactor, same_message, text

KEYS = ["durable:a:all", "durable:b:all", "durable:c:all"]


def published(message_id: str, body: str = "news", **fields: Any) -> TextMessage:
    return text(message_id, body, destination="/topic/news", **fields)


def layout(path: str) -> tuple[list[tuple[str, str, bool, int]], int]:
    """The rows of ``messages`` as (queue key, message id, refers to a body, bytes of its own record),
    in stored order, and how many bodies there are."""
    with closing(sqlite3.connect(path)) as db:
        rows = [(queue, message_id, body is not None, size) for queue, message_id, body, size in db.execute(
            "SELECT queue, message_id, body, length(record) FROM messages ORDER BY seq")]
        bodies = db.execute("SELECT count(*) FROM bodies").fetchone()[0]
    return rows, bodies


class Stores:
    """Stores opened one after another on one file (the last one stays open until the test ends)."""

    def __init__(self, tmp_path: Path) -> None:
        self.reactor = PumpedReactor()
        self.path = str(tmp_path / "broker.sqlite")
        self.store: SqliteStore | None = None

    def open(self, **options: Any) -> tuple[SqliteStore, Snapshot]:
        self.close()
        store = self.store = SqliteStore(self.path, self.reactor, **options)
        snapshot = self.reactor.wait(store.open())
        return store, snapshot

    def wait(self, d: Any) -> Any:
        return self.reactor.wait(d)

    def close(self) -> None:
        if self.store is not None:
            self.reactor.wait(self.store.close())
            self.store = None


@pytest.fixture
def stores(tmp_path: Path) -> Any:
    opened = Stores(tmp_path)
    yield opened
    opened.close()


def test_a_message_for_several_subscriptions_is_one_body_and_a_small_row_each(stores: Stores) -> None:
    store, _ = stores.open()
    message = published("ID:1", "x" * 5000)
    stores.wait(store.add_batch([(key, message) for key in KEYS]))
    stores.wait(store.add("/queue/plain", text("ID:2", "y" * 5000, destination="/queue/plain")))
    rows, bodies = layout(stores.path)
    assert bodies == 1
    assert rows[:3] == [(key, "ID:1", True, 0) for key in KEYS]
    assert rows[3][:3] == ("/queue/plain", "ID:2", False) and rows[3][3] > 5000  # (a queue's row keeps its record)
    _, snapshot = stores.open()
    assert [(key, m.message_id) for key, m in snapshot.messages] == [*((key, "ID:1") for key in KEYS),
                                                                   ("/queue/plain", "ID:2")]
    assert all(same_message(m, message) for _, m in snapshot.messages[:3])


def test_the_body_goes_with_the_last_acknowledgement_across_restarts(stores: Stores) -> None:
    store, _ = stores.open()
    stores.wait(store.add_batch([(key, message) for message in map(published, ["ID:0", "ID:1"]) for key in KEYS]))
    assert layout(stores.path)[1] == 2
    stores.wait(store.remove(KEYS[0], "ID:0"))
    store, snapshot = stores.open()  # a restart between the acknowledgements keeps the others' references
    assert sorted((key, m.message_id) for key, m in snapshot.messages) == sorted(
        [(key, f"ID:{n}") for n in range(2) for key in KEYS if (key, n) != (KEYS[0], 0)])
    stores.wait(store.remove(KEYS[1], "ID:0"))
    assert layout(stores.path)[1] == 2, "the body went while a subscription still had the message"
    stores.wait(store.remove(KEYS[2], "ID:0"))
    rows, bodies = layout(stores.path)
    assert bodies == 1 and {message_id for _, message_id, _, _ in rows} == {"ID:1"}
    for key in KEYS:
        stores.wait(store.remove(key, "ID:1"))
    assert layout(stores.path) == ([], 0)


def test_redelivery_counts_stay_per_subscription(stores: Stores) -> None:
    store, _ = stores.open()
    stores.wait(store.add_batch([(key, published("ID:1")) for key in KEYS]))
    stores.wait(store.set_redelivery(KEYS[1], "ID:1", 3))
    _, snapshot = stores.open()
    assert [(key, m.redelivery_count, m.redelivered) for key, m in snapshot.messages] == [
        (KEYS[0], 0, False), (KEYS[1], 3, True), (KEYS[2], 0, False)]


def test_removing_a_durable_subscription_releases_its_references_only(stores: Stores) -> None:
    store, _ = stores.open()
    for key in KEYS:
        stores.wait(store.add_durable(key, "/topic/news", None))
    messages = [published(f"ID:{n}") for n in range(3)]
    stores.wait(store.add_batch([(key, message) for message in messages for key in KEYS]))
    stores.wait(store.remove_durable(KEYS[0]))
    assert layout(stores.path)[1] == 3
    store, snapshot = stores.open(lazy_recovery=True)  # a backlog not read yet is released the same way
    assert snapshot.backlogs == {key: (3, snapshot.backlogs[key][1]) for key in KEYS[1:]}
    stores.wait(store.remove_durable(KEYS[1]))
    assert layout(stores.path)[1] == 3
    stores.wait(store.remove_durable(KEYS[2]))
    assert layout(stores.path) == ([], 0)


def test_expired_shared_messages_leave_with_their_body_at_open(stores: Stores) -> None:
    store, _ = stores.open()
    expiring, kept = published("ID:short", expiration=int(NOW * 1000) + 1000), published("ID:kept")
    entries: list[tuple[str, Message]] = [(key, message) for message in (expiring, kept) for key in KEYS]
    stores.wait(store.add_batch(entries))
    stores.close()
    stores.reactor.now += 2
    _, snapshot = stores.open()
    assert snapshot.expired == 3
    rows, bodies = layout(stores.path)
    assert bodies == 1 and {message_id for _, message_id, _, _ in rows} == {"ID:kept"}


def test_a_backlog_read_lazily_gets_the_shared_record(stores: Stores) -> None:
    store, _ = stores.open()
    message = published("ID:1", priority=7)
    stores.wait(store.add_batch([(key, message) for key in KEYS]))
    _, snapshot = stores.open(lazy_recovery=True)
    assert snapshot.backlog is not None and snapshot.stored == 3
    for key in KEYS:
        [row] = snapshot.backlog.read(key, (-(2**62), -(2**62)), 10)
        assert row[0] == -7 and row[2] == "ID:1" and row[-1] == encode_message(message)


def test_a_transaction_to_a_topic_stores_each_message_once(stores: Stores) -> None:
    store, _ = stores.open()
    batch: list[Message] = [published(f"ID:{n}", f"body-{n}") for n in range(3)]
    stores.wait(store.add_batch([(key, message) for message in batch for key in KEYS[:2]]
                                + [("/queue/audit", text("ID:q", destination="/queue/audit"))]))
    rows, bodies = layout(stores.path)
    assert bodies == 3 and [shared for _, _, shared, _ in rows] == [True] * 6 + [False]
    _, snapshot = stores.open()
    assert [(key, m.text) for key, m in snapshot.messages[:6]] == [  # type: ignore[attr-defined]
        (key, f"body-{n}") for n in range(3) for key in KEYS[:2]]


# -- schema migration ----------------------------------------------------------------------------

OLD_MESSAGES = {
    1: "CREATE TABLE messages (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL, message_id TEXT NOT NULL, "
       "expiration INTEGER NOT NULL, redelivery INTEGER NOT NULL, record BLOB NOT NULL)",
    2: "CREATE TABLE messages (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL, message_id TEXT NOT NULL, "
       "expiration INTEGER NOT NULL, redelivery INTEGER NOT NULL, record BLOB NOT NULL, "
       "rank INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL DEFAULT 0)",
}
"""The ``messages`` table as schema 1 and 2 (jmsgateway before fan-out sharing) created it."""


def old_store(path: str, version: int) -> list[tuple[str, TextMessage, int]]:
    """A store file of schema ``version`` with one copy per durable subscription, as earlier versions
    wrote it; returns its (queue key, message, redelivery count) rows."""
    news = published("ID:news", "n" * 3000, priority=6)
    resent = published("ID:news", "a different body, same id")  # (a bridge resending: not the same record)
    rows = [(KEYS[0], news, 0), (KEYS[1], news, 2), (KEYS[2], news, 0), (KEYS[2], resent, 0),
            ("/queue/plain", text("ID:plain", destination="/queue/plain"), 1),
            (KEYS[0], published("ID:alone"), 0)]
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(OLD_MESSAGES[version])
        if version == 2:
            db.execute("CREATE INDEX messages_order ON messages (queue, rank, seq, size)")
            db.execute("CREATE INDEX messages_redelivered ON messages (seq) WHERE redelivery > 0")
        db.execute("CREATE TABLE durables (key TEXT PRIMARY KEY, destination TEXT NOT NULL, selector TEXT)")
        db.execute(f"PRAGMA application_id = {0x4A4D5347}")
        db.execute(f"PRAGMA user_version = {version}")
        for key in KEYS:
            db.execute("INSERT INTO durables VALUES (?, '/topic/news', NULL)", (key,))
        for seq, (queue, message, redelivery) in enumerate(rows, start=1):
            record = encode_message(message)
            if version == 1:
                db.execute("INSERT INTO messages VALUES (?, ?, ?, 0, ?, ?)",
                           (seq, queue, message.message_id, redelivery, record))
            else:
                db.execute("INSERT INTO messages VALUES (?, ?, ?, 0, ?, ?, ?, ?)",
                           (seq, queue, message.message_id, redelivery, record, -message.priority, len(record)))
    return rows


@pytest.mark.parametrize("version", [1, 2])
def test_a_store_of_an_earlier_schema_shares_its_copies_once_migrated(stores: Stores, version: int) -> None:
    rows = old_store(stores.path, version)
    store, snapshot = stores.open()
    with closing(sqlite3.connect(stores.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    stored, bodies = layout(stores.path)
    assert bodies == 1
    assert [(queue, message_id, shared) for queue, message_id, shared, _ in stored] == [
        (KEYS[0], "ID:news", True), (KEYS[1], "ID:news", True), (KEYS[2], "ID:news", True),
        (KEYS[2], "ID:news", False), ("/queue/plain", "ID:plain", False), (KEYS[0], "ID:alone", False)]
    assert len(snapshot.messages) == len(rows)
    for (key, message), (queue, original, redelivery) in zip(snapshot.messages, rows, strict=True):
        assert key == queue and message.redelivery_count == redelivery
        expected = original.copy()
        expected.redelivery_count, expected.redelivered = redelivery, redelivery > 0
        assert same_message(message, expected)
    for key in KEYS[:2]:
        stores.wait(store.remove(key, "ID:news"))
    assert layout(stores.path)[1] == 1
    stores.wait(store.remove(KEYS[2], "ID:news"))  # (the oldest row of that id: the shared one)
    assert layout(stores.path)[1] == 0
    _, snapshot = stores.open(lazy_recovery=True)  # migrated once: opening again changes nothing
    assert snapshot.stored == 3


def test_a_failed_migration_leaves_the_earlier_schema(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    old_store(stores.path, 2)
    from gateway.broker.store import sqlite_store

    def broken(db: sqlite3.Connection) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_store, "share_copies", broken)
    with pytest.raises(Exception, match="disk I/O error"):
        stores.open()
    stores.store = None
    with closing(sqlite3.connect(stores.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
        assert "bodies" not in {name for (name,) in db.execute("SELECT name FROM sqlite_master")}


# -- the broker on the store -----------------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path) -> Any:
    run = Run(tmp_path, BrokerSettings(max_redeliveries=2, persistence="sqlite"), lazy_recovery=True)
    run.start()
    yield run
    run.close()


def subscribe_all(run: Run, **spec: Any) -> list[tuple[Sink, Any]]:
    subscribed = []
    for client in "abc":
        sink = Sink()
        subscribed.append((sink, run.subscribe(sink, destination="/topic/news", durable_name="all",
                                               client_id=client, **spec)))
    return subscribed


def test_one_subscriber_dead_letters_a_shared_message_the_others_still_get_it(run: Run) -> None:
    for _, subscription in subscribe_all(run):
        run.wait(subscription.close())
    run.send(TextMessage(destination="/topic/news", message_id="ID:poison", text="poison", persistent=True))
    assert layout(run.path)[1] == 1
    sink = Sink()
    subscription = run.subscribe(sink, destination="/topic/news", durable_name="all", client_id="a",
                                 ack_mode="client-individual")
    for _ in range(3):  # max_redeliveries=2: the third NACK moves it to the DLQ
        run.wait(subscription.nack([sink.got[-1][1]]))
    run.settle()
    run.settle()  # (the move: the DLQ's copy is stored, then the subscription's row removed)
    assert len(sink.got) == 3
    rows, bodies = layout(run.path)
    assert bodies == 1 and sorted((queue, shared) for queue, _, shared, _ in rows) == [
        ("/queue/DLQ.news", False), (KEYS[1], True), (KEYS[2], True)]
    run.wait(subscription.close())
    run.restart()
    for client in "bc":
        other = Sink()
        later = run.subscribe(other, destination="/topic/news", durable_name="all", client_id=client,
                              ack_mode="client-individual")
        assert other.texts() == ["poison"] and other.got[0][0].redelivery_count == 0
        run.wait(later.ack([other.got[0][1]]))
        run.wait(later.close())
    dead = Sink()
    run.subscribe(dead, destination="/queue/DLQ.news")
    assert dead.texts() == ["poison"]
    run.settle()
    assert layout(run.path) == ([], 0)


def test_an_unsubscribe_keeps_the_message_for_the_other_subscribers(run: Run) -> None:
    for _, subscription in subscribe_all(run):
        run.wait(subscription.close())
    run.send(*(TextMessage(destination="/topic/news", message_id=f"ID:{n}", text=f"m{n}", persistent=True)
               for n in range(3)))  # (one transaction)
    assert layout(run.path)[1] == 3
    assert run.broker is not None
    run.wait(run.broker.unsubscribe_durable("a", "all"))
    run.restart()
    for client in "bc":
        sink = Sink()
        run.subscribe(sink, destination="/topic/news", durable_name="all", client_id=client)
        assert sink.texts() == ["m0", "m1", "m2"]
    run.settle()
    assert layout(run.path) == ([], 0)


def test_crashes_under_one_subscriber_dead_letter_its_copy_only(run: Run) -> None:
    """Deliveries cut short by crashes count towards the dead-letter rule (lazy recovery finds the
    rows past the limit by their index): one subscriber's row goes to the DLQ, the others' share stays."""
    for _, subscription in subscribe_all(run):
        run.wait(subscription.close())
    run.send(TextMessage(destination="/topic/news", message_id="ID:crasher", text="crasher", persistent=True))
    for attempt in range(3):
        sink = Sink()
        run.subscribe(sink, destination="/topic/news", durable_name="all", client_id="a",
                      ack_mode="client-individual")
        assert [(text_of(m), m.redelivery_count) for m, _ in sink.got] == [("crasher", attempt)]
        run.settle()
        run.restart()  # the consumer never answers: the broker died under it
    run.settle()
    run.settle()
    rows, bodies = layout(run.path)
    assert bodies == 1 and sorted((queue, shared) for queue, _, shared, _ in rows) == [
        ("/queue/DLQ.news", False), (KEYS[1], True), (KEYS[2], True)]
    dead = Sink()
    run.subscribe(dead, destination="/queue/DLQ.news")
    assert dead.texts() == ["crasher"]
    for client in "bc":
        other = Sink()
        run.subscribe(other, destination="/topic/news", durable_name="all", client_id=client)
        assert [(text_of(m), m.redelivery_count) for m, _ in other.got] == [("crasher", 0)]
    run.settle()
    assert layout(run.path) == ([], 0)
