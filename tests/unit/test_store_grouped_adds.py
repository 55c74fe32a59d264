"""The persistent SENDs of a turn as one store operation (issue 39): merged, each with its own outcome.

:meth:`GroupCommitWriter.append` merges the parts appended while the writer is busy into one
operation; :meth:`SqliteStore.add_then` uses it for the broker's posted persistent SENDs
(:mod:`gateway.broker.stored_sends`).  What must hold: one ``executemany`` for the SENDs of a turn,
each SEND answered only after the commit that covers it, a failed part failing alone (the others
committed), issue order among the parts and with the store's other writes, and what the store
recovers in send order.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.sqlite_schema import INSERT
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.errors import StoreError
from gateway.message.model import TextMessage
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect, make_factory
from tests.unit.test_store_contract import PumpedReactor
from tests.unit.test_store_sqlite import MIB, SmallDisk, message, open_store, recovered_ids


class CountingConnection(sqlite3.Connection):
    """Counts the ``executemany`` of message rows (one per store operation that adds messages) and the
    statements that delete message rows."""

    inserts = 0
    deletes = 0

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == INSERT:
            type(self).inserts += 1
        return super().executemany(sql, *args)

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith("DELETE FROM messages WHERE seq"):
            type(self).deletes += 1
        return super().execute(sql, *args)


@pytest.fixture
def counting() -> type[CountingConnection]:
    class Counting(CountingConnection):
        inserts = 0
        deletes = 0

    return Counting


def hold(store: SqliteStore) -> threading.Event:
    """Keep the writer busy until the returned event is set (what is handed over meanwhile waits)."""
    gate, busy = threading.Event(), threading.Event()

    def wait(_db: sqlite3.Connection) -> None:
        busy.set()
        assert gate.wait(10)

    store.writer.call(wait)
    assert busy.wait(10)
    return gate


class Outcomes:
    """The ``done`` reports of :meth:`SqliteStore.add_then`, by name."""

    def __init__(self) -> None:
        self.reported: dict[str, BaseException | None] = {}

    def done(self, name: str) -> Any:
        def report(error: BaseException | None) -> None:
            assert name not in self.reported, f"{name} reported twice"
            self.reported[name] = error

        return report

    def pump(self, reactor: PumpedReactor, count: int) -> None:
        while len(self.reported) < count:
            assert reactor.run_thread_calls(timeout=10), "the store never reported"


# -- the store ----------------------------------------------------------------------------------


def test_adds_handed_over_while_the_writer_is_busy_are_one_operation_each_reported_after_its_commit(
    reactor: PumpedReactor, path: str, counting: type[CountingConnection]
) -> None:
    store = open_store(reactor, path, connect=lambda p, **kw: sqlite3.connect(p, factory=counting, **kw))
    outcomes = Outcomes()
    gate = hold(store)
    for index in range(50):
        store.add_then([("/queue/a", message(index))], outcomes.done(f"ID:{index}"))
    reactor.run_thread_calls(timeout=0.2)
    assert outcomes.reported == {}, "an add was reported before its commit"
    gate.set()
    outcomes.pump(reactor, 50)
    assert outcomes.reported == {f"ID:{index}": None for index in range(50)}
    assert counting.inserts == 1
    assert store.stats.operations == 50
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == [f"ID:{index}" for index in range(50)]


def test_removals_handed_over_while_the_writer_is_busy_are_one_operation(
    reactor: PumpedReactor, path: str, counting: type[CountingConnection]
) -> None:
    store = open_store(reactor, path, connect=lambda p, **kw: sqlite3.connect(p, factory=counting, **kw))
    reactor.wait(store.add_batch([("/queue/a", message(index)) for index in range(1200)]))
    outcomes = Outcomes()
    gate = hold(store)
    for index in range(0, 1200, 2):
        store.remove_then("/queue/a", f"ID:{index}", outcomes.done(f"ID:{index}"))
    store.remove_then("/queue/a", "ID:nothing", outcomes.done("ID:nothing"))  # (not there: nothing to remove)
    gate.set()
    outcomes.pump(reactor, 601)
    assert set(outcomes.reported.values()) == {None}
    assert counting.deletes == 2  # (one operation: its 600 rows 500 at a time)
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == [f"ID:{index}" for index in range(1, 1200, 2)]


def test_a_part_that_fails_fails_alone_and_the_others_are_committed(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    reactor.wait(store.writer.call(lambda db: db.execute("CREATE TABLE t (x TEXT)")))
    ran: list[list[str]] = []

    def run(db: sqlite3.Connection, parts: list[str]) -> None:
        ran.append(list(parts))
        db.executemany("INSERT INTO t (x) VALUES (?)", [(part,) for part in parts])
        if "bad" in parts:
            raise sqlite3.IntegrityError("bad part")

    outcomes = Outcomes()
    gate = hold(store)
    for name in ("a", "b", "bad", "c"):
        store.writer.append(run, name, 0, outcomes.done(name))
    gate.set()
    outcomes.pump(reactor, 4)
    assert {name: error is None for name, error in outcomes.reported.items()} == {
        "a": True, "b": True, "bad": False, "c": True}
    assert "bad part" in str(outcomes.reported["bad"])
    assert ran == [["a", "b", "bad", "c"], ["a"], ["b"], ["bad"], ["c"]]  # (merged, then each alone)
    rows = reactor.wait(store.writer.call(lambda db: [x for (x,) in db.execute("SELECT x FROM t ORDER BY rowid")]))
    assert rows == ["a", "b", "c"]
    reactor.wait(store.close())


def test_parts_keep_their_order_with_the_stores_other_writes(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    ran: list[object] = []

    def run(_db: sqlite3.Connection, parts: list[str]) -> None:
        ran.append(list(parts))

    outcomes = Outcomes()
    gate = hold(store)
    store.writer.append(run, "a", 0, outcomes.done("a"))
    store.writer.append(run, "b", 0, outcomes.done("b"))
    other = store.writer.submit(lambda _db: ran.append("other write"))
    store.writer.append(run, "c", 0, outcomes.done("c"))
    gate.set()
    reactor.wait(other)
    outcomes.pump(reactor, 3)
    assert ran == [["a", "b"], "other write", ["c"]]
    reactor.wait(store.close())


def test_adds_that_do_not_fit_fail_alone_and_those_before_them_are_stored(reactor: PumpedReactor, path: str) -> None:
    disk = SmallDisk(path, capacity=10 * MIB)
    store = open_store(reactor, path, free_space=disk, min_free=10 * MIB - 200_000)
    outcomes = Outcomes()
    gate = hold(store)
    for index in range(20):
        store.add_then([("/queue/a", message(index, 10_000))], outcomes.done(f"ID:{index}"))
    gate.set()
    outcomes.pump(reactor, 20)
    stored = [outcomes.reported[f"ID:{index}"] is None for index in range(20)]
    admitted = stored.count(True)
    assert 0 < admitted < 20 and stored == [True] * admitted + [False] * (20 - admitted)
    assert all("full" in str(outcomes.reported[f"ID:{index}"]) for index in range(admitted, 20))
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == [f"ID:{index}" for index in range(admitted)]


def test_an_add_that_cannot_be_stored_fails_at_once_and_alone(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    outcomes = Outcomes()
    odd = TextMessage(destination="/queue/a", message_id="ID:odd", persistent=True, text="x",
                      properties=cast(Any, {"when": object()}))
    store.add_then([("/queue/a", message(0))], outcomes.done("ID:0"))
    store.add_then([("/queue/a", odd)], outcomes.done("ID:odd"))
    assert isinstance(outcomes.reported["ID:odd"], StoreError)
    store.add_then([("/queue/a", message(1))], outcomes.done("ID:1"))
    outcomes.pump(reactor, 3)
    assert outcomes.reported["ID:0"] is None and outcomes.reported["ID:1"] is None
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == ["ID:0", "ID:1"]


def test_an_add_after_close_fails_at_once(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    reactor.wait(store.close())
    outcomes = Outcomes()
    store.add_then([("/queue/a", message(0))], outcomes.done("ID:0"))
    assert "closed" in str(outcomes.reported["ID:0"])


# -- the broker's SEND path -------------------------------------------------------------------------


class ThreadedClock(Clock):
    """A :class:`Clock` that takes the store writer's ``callFromThread`` (run by :meth:`pump`)."""

    def __init__(self) -> None:
        super().__init__()
        self.threaded = PumpedReactor()

    def callFromThread(self, function: Any, *args: Any, **kwargs: Any) -> None:
        self.threaded.callFromThread(function, *args, **kwargs)

    def run_writer(self) -> None:
        assert self.threaded.run_thread_calls(timeout=10), "the store never reported"
        self.advance(0)


def test_the_persistent_sends_of_one_read_are_one_store_operation_and_answered_after_it(
    tmp_path: Path, counting: type[CountingConnection]
) -> None:
    """Before issue 39's change: one operation (one INSERT) per SEND, 50 here."""
    clock = ThreadedClock()
    store = SqliteStore(str(tmp_path / "broker.sqlite"), clock,
                        connect=lambda p, **kw: sqlite3.connect(p, factory=counting, **kw))
    broker = EmbeddedBroker(clock, BrokerSettings(), store)
    started = broker.start()
    while not started.called:
        clock.run_writer()
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    gate = hold(store)
    sends = [Frame("SEND", {"destination": "/queue/a", "persistent": "true", **({"receipt": "r"} if i == 49 else {})},
                   f"m{i}".encode()) for i in range(50)]
    peer.protocol.dataReceived(b"".join(encode_frame(frame, "1.2") for frame in sends))
    clock.advance(0)  # (the read's second input slice)
    assert peer.received() == [] and len(broker.queues["/queue/a"]) == 0  # (nothing visible before its commit)
    gate.set()
    while not (frames := peer.received()):
        clock.run_writer()
    assert [frame.command for frame in frames] == ["RECEIPT"]
    assert counting.inserts == 1
    queue = broker.queues["/queue/a"]
    assert [m.body for m in queue.messages()] == [f"m{i}".encode() for i in range(50)]  # type: ignore[attr-defined]
    stopped = broker.stop()
    while not stopped.called:
        clock.run_writer()


def test_the_removals_of_an_auto_ack_subscriber_are_one_store_operation(
    tmp_path: Path, counting: type[CountingConnection]
) -> None:
    """Before issue 39's change: one operation (one DELETE) per message consumed, 50 here."""
    clock = ThreadedClock()
    path = str(tmp_path / "broker.sqlite")
    store = SqliteStore(path, clock, connect=lambda p, **kw: sqlite3.connect(p, factory=counting, **kw))
    broker = EmbeddedBroker(clock, BrokerSettings(), store)
    started = broker.start()
    while not started.called:
        clock.run_writer()
    producer, consumer = connect_peer(clock, broker), connect_peer(clock, broker)
    for index in range(50):
        producer.send("SEND", {"destination": "/queue/a", "persistent": "true", "receipt": str(index)}, b"m")
    receipts = 0
    while receipts < 50:
        clock.run_writer()
        receipts += len(producer.received())
    gate = hold(store)
    consumer.send("SUBSCRIBE", {"destination": "/queue/a", "id": "s", "ack": "auto"})
    assert len([f for f in consumer.received() if f.command == "MESSAGE"]) == 50
    gate.set()
    while waiting_removals(broker):
        clock.run_writer()
    assert counting.deletes == 1
    stopped = broker.stop()
    while not stopped.called:
        clock.run_writer()
    again = SqliteStore(path, clock)
    recovered: list[Any] = []
    again.open().addCallback(recovered.append)
    while not recovered:
        clock.run_writer()
    assert recovered[0].messages == [] and not recovered[0].stored
    closed = again.close()
    while not closed.called:
        clock.run_writer()


def waiting_removals(broker: EmbeddedBroker) -> int:
    return int(broker.status()["memory"]["removals_waiting"])


def test_a_persistent_send_the_store_refuses_gets_its_error_and_the_others_their_receipts(tmp_path: Path) -> None:
    clock = ThreadedClock()
    path = str(tmp_path / "broker.sqlite")
    disk = SmallDisk(path, capacity=10 * MIB)
    store = SqliteStore(path, clock, free_space=disk, min_free=10 * MIB - 200_000)
    broker = EmbeddedBroker(clock, BrokerSettings(), store)
    started = broker.start()
    while not started.called:
        clock.run_writer()
    small, large = connect_peer(clock, broker), connect_peer(clock, broker)
    gate = hold(store)
    small.send("SEND", {"destination": "/queue/a", "persistent": "true", "receipt": "s1"}, b"small")
    large.send("SEND", {"destination": "/queue/a", "persistent": "true", "receipt": "l1"}, b"x" * 300_000)
    small.send("SEND", {"destination": "/queue/a", "persistent": "true", "receipt": "s2"}, b"small too")
    gate.set()
    answers: dict[str, list[Frame]] = {"small": [], "large": []}
    while len(answers["small"]) < 2 or not answers["large"]:
        clock.run_writer()
        answers["small"] += small.received()
        answers["large"] += large.received()
    assert [f.headers.get("receipt-id") for f in answers["small"]] == ["s1", "s2"]
    assert answers["large"][0].command == "ERROR" and "full" in answers["large"][0].headers["message"] + \
        answers["large"][0].body.decode()
    assert [m.body for m in broker.queues["/queue/a"].messages()] == [b"small", b"small too"]  # type: ignore[attr-defined]
    stopped = broker.stop()
    while not stopped.called:
        clock.run_writer()


def connect_peer(clock: Clock, broker: EmbeddedBroker) -> Peer:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    return peer

