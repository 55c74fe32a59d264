"""The IMessageStore contract, run against every store (memory and SQLite).

:class:`StoreContract` holds the tests; each subclass says how to make a
store and how to open it again "after a restart".  The reactor is played by
:class:`PumpedReactor`: the stores' threads hand results back through
``callFromThread`` and the test thread runs them, as the reactor would.
"""

from __future__ import annotations

import dataclasses
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from gateway.broker.store.memory_store import MemoryStore
from gateway.broker.store.snapshot import DurableRecord, Snapshot
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.interfaces import IMessageStore
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    Message,
    ObjectMessage,
    StreamMessage,
    TextMessage,
)

NOW = 1_700_000_000.0


class PumpedReactor:
    """The reactor of a store under test: ``callFromThread`` queues, :meth:`wait` runs."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now
        self.thread_calls: queue.SimpleQueue[tuple[Any, tuple[Any, ...], dict[str, Any]]] = queue.SimpleQueue()

    def seconds(self) -> float:
        return self.now

    def callFromThread(self, function: Any, *args: Any, **kwargs: Any) -> None:
        self.thread_calls.put((function, args, kwargs))

    def run_thread_calls(self, timeout: float = 0.0) -> int:
        """Run the calls that arrived (waiting up to ``timeout`` for the first)."""
        ran = 0
        try:
            if timeout:
                function, args, kwargs = self.thread_calls.get(timeout=timeout)
            else:
                function, args, kwargs = self.thread_calls.get_nowait()
        except queue.Empty:
            return 0
        while True:
            function(*args, **kwargs)
            ran += 1
            try:
                function, args, kwargs = self.thread_calls.get_nowait()
            except queue.Empty:
                return ran

    def wait(self, d: Deferred[Any], timeout: float = 10.0) -> Any:
        """Pump until ``d`` fires; its result, or raise its failure."""
        outcome: list[Any] = []
        d.addBoth(outcome.append)
        deadline = time.monotonic() + timeout
        while not outcome:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"Deferred did not fire within {timeout}s")
            self.run_thread_calls(timeout=min(remaining, 0.5))
        result = outcome[0]
        if isinstance(result, Failure):
            result.raiseException()
        return result


def text(message_id: str, body: str = "hello", **fields: Any) -> TextMessage:
    fields.setdefault("destination", "/queue/a")
    fields.setdefault("persistent", True)
    return TextMessage(message_id=message_id, text=body, **fields)


def ids(snapshot: Snapshot) -> list[tuple[str, str]]:
    return [(key, message.message_id) for key, message in snapshot.messages]


def every_kind() -> list[Message]:
    """One message of each JMS type, every header field set, typed properties."""
    common: dict[str, Any] = {
        "destination": "/queue/kinds",
        "correlation_id": "corr-1",
        "reply_to": "/queue/replies",
        "type": "order",
        "persistent": True,
        "priority": 9,
        "expiration": int(NOW * 1000) + 3_600_000,
        "timestamp": int(NOW * 1000),
        "properties": {"s": "x\u00e9", "i": 7, "big": 2**70, "f": 1.5, "t": True, "n": None, "b": b"\x00\xff"},
    }
    return [
        TextMessage(message_id="ID:text", text="h\u00e9llo \U0001f600", **common),
        TextMessage(message_id="ID:text-none", text=None, **common),
        BytesMessage(message_id="ID:bytes", body=bytes(range(256)), **common),
        MapMessage(message_id="ID:map", map={"k": 1, "nested": {"x": [1, "a", b"b"]}, "none": None}, **common),
        ObjectMessage(message_id="ID:object", payload=b"\xac\xed\x00\x05", encoding="java-serialized", **common),
        StreamMessage(message_id="ID:stream", items=[1, 2.5, "three", b"four", False, None], **common),
        Message(message_id="ID:plain", **common),
    ]


def same_message(left: Message, right: Message) -> bool:
    """Same type and every field equal (bodies included)."""
    return type(left) is type(right) and all(
        getattr(left, f.name) == getattr(right, f.name) for f in dataclasses.fields(left)
    )


class StoreContract:
    """What every IMessageStore must do.  Subclasses implement :meth:`new_store` and :meth:`reopen`."""

    def new_store(self, reactor: PumpedReactor, tmp_path: Path) -> Any:
        raise NotImplementedError

    def reopen(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> tuple[Any, Snapshot]:
        """Close ``store`` and open it again as a restarted gateway would."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, reactor: PumpedReactor, tmp_path: Path) -> Iterator[Any]:
        store = self.new_store(reactor, tmp_path)
        reactor.wait(store.open())
        yield store
        reactor.wait(store.close())

    def restart(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> Snapshot:
        again, snapshot = self.reopen(store, reactor, tmp_path)
        reactor.wait(again.close())
        return snapshot

    # -- the contract ------------------------------------------------------

    def test_provides_the_interface(self, store: Any) -> None:
        assert verifyObject(IMessageStore, store)

    def test_a_new_store_is_empty(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        snapshot = self.restart(store, reactor, tmp_path)
        assert snapshot == Snapshot()

    def test_every_field_and_body_type_survives(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        originals = every_kind()
        for message in originals:
            assert reactor.wait(store.add("/queue/kinds", message)) is None
        snapshot = self.restart(store, reactor, tmp_path)
        assert [key for key, _ in snapshot.messages] == ["/queue/kinds"] * len(originals)
        for original, (_, recovered) in zip(originals, snapshot.messages, strict=True):
            assert recovered is not original
            assert same_message(original, recovered), (original, recovered)

    def test_messages_come_back_in_the_order_stored(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        writes = [store.add("/queue/a" if i % 3 else "/queue/b", text(f"ID:{i}", priority=i % 10)) for i in range(30)]
        for d in writes:
            reactor.wait(d)
        snapshot = self.restart(store, reactor, tmp_path)
        assert ids(snapshot) == [("/queue/a" if i % 3 else "/queue/b", f"ID:{i}") for i in range(30)]
        assert [m.priority for _, m in snapshot.messages] == [i % 10 for i in range(30)]

    def test_removed_messages_are_gone(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        for i in range(5):
            reactor.wait(store.add("/queue/a", text(f"ID:{i}")))
        reactor.wait(store.remove("/queue/a", "ID:1"))
        reactor.wait(store.remove("/queue/a", "ID:3"))
        reactor.wait(store.remove("/queue/a", "ID:does-not-exist"))
        reactor.wait(store.remove("/queue/other", "ID:0"))
        snapshot = self.restart(store, reactor, tmp_path)
        assert ids(snapshot) == [("/queue/a", "ID:0"), ("/queue/a", "ID:2"), ("/queue/a", "ID:4")]

    def test_writes_apply_in_the_order_issued(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        # Issued together, without waiting: the remove must see the add.
        pending = [
            store.add("/queue/a", text("ID:1")),
            store.remove("/queue/a", "ID:1"),
            store.add("/queue/a", text("ID:2")),
            store.set_redelivery("/queue/a", "ID:2", 3),
            store.add_durable("durable:c:d", "/topic/t", None),
            store.add("durable:c:d", text("ID:3", destination="/topic/t")),
            store.remove_durable("durable:c:d"),
        ]
        for d in pending:
            reactor.wait(d)
        snapshot = self.restart(store, reactor, tmp_path)
        assert ids(snapshot) == [("/queue/a", "ID:2")]
        assert snapshot.messages[0][1].redelivery_count == 3
        assert snapshot.durables == []

    def test_the_same_message_on_two_keys_is_two_entries(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        shared = text("ID:fan", destination="/topic/t")
        reactor.wait(store.add_durable("durable:c:one", "/topic/t", None))
        reactor.wait(store.add_durable("durable:c:two", "/topic/t", None))
        reactor.wait(store.add_batch([("durable:c:one", shared), ("durable:c:two", shared)]))
        reactor.wait(store.remove("durable:c:one", "ID:fan"))
        snapshot = self.restart(store, reactor, tmp_path)
        assert ids(snapshot) == [("durable:c:two", "ID:fan")]

    def test_duplicate_ids_on_one_queue_are_removed_one_at_a_time(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        reactor.wait(store.add_batch([("/queue/a", text("ID:dup", "first")), ("/queue/a", text("ID:dup", "second"))]))
        reactor.wait(store.remove("/queue/a", "ID:dup"))
        snapshot = self.restart(store, reactor, tmp_path)
        assert [m.text for _, m in snapshot.messages] == ["second"]  # type: ignore[attr-defined]

    def test_redelivery_counts_survive(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        reactor.wait(store.add("/queue/a", text("ID:1")))
        reactor.wait(store.add("/queue/a", text("ID:2")))
        reactor.wait(store.set_redelivery("/queue/a", "ID:1", 1))
        reactor.wait(store.set_redelivery("/queue/a", "ID:1", 4))
        snapshot = self.restart(store, reactor, tmp_path)
        first, second = (message for _, message in snapshot.messages)
        assert (first.redelivery_count, first.redelivered) == (4, True)
        assert (second.redelivery_count, second.redelivered) == (0, False)

    def test_add_batch_stores_every_entry(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        entries = [(f"/queue/{i % 4}", text(f"ID:{i}", destination=f"/queue/{i % 4}")) for i in range(50)]
        reactor.wait(store.add_batch(entries))
        reactor.wait(store.add_batch([]))
        snapshot = self.restart(store, reactor, tmp_path)
        assert ids(snapshot) == [(key, message.message_id) for key, message in entries]

    def test_durable_subscriptions_and_their_backlog_survive(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        reactor.wait(store.add_durable("durable:app:orders", "/topic/orders", "region = 'EU'"))
        reactor.wait(store.add_durable("durable:app:audit", "/topic/audit", None))
        reactor.wait(store.add("durable:app:orders", text("ID:1", destination="/topic/orders")))
        snapshot = self.restart(store, reactor, tmp_path)
        assert snapshot.durables == [
            DurableRecord("durable:app:orders", "/topic/orders", "region = 'EU'"),
            DurableRecord("durable:app:audit", "/topic/audit", None),
        ]
        assert ids(snapshot) == [("durable:app:orders", "ID:1")]

    def test_a_durable_subscription_can_be_redefined(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        reactor.wait(store.add_durable("durable:app:sub", "/topic/a", None))
        reactor.wait(store.add_durable("durable:app:sub", "/topic/b", "x > 1"))
        snapshot = self.restart(store, reactor, tmp_path)
        assert snapshot.durables == [DurableRecord("durable:app:sub", "/topic/b", "x > 1")]

    def test_removing_a_durable_subscription_drops_its_backlog_only(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        reactor.wait(store.add_durable("durable:app:one", "/topic/t", None))
        reactor.wait(store.add_durable("durable:app:two", "/topic/t", None))
        message = text("ID:1", destination="/topic/t")
        reactor.wait(store.add_batch([("durable:app:one", message), ("durable:app:two", message)]))
        reactor.wait(store.add("/queue/a", text("ID:2")))
        reactor.wait(store.remove_durable("durable:app:one"))
        reactor.wait(store.remove_durable("durable:app:never-existed"))
        snapshot = self.restart(store, reactor, tmp_path)
        assert snapshot.durables == [DurableRecord("durable:app:two", "/topic/t", None)]
        assert ids(snapshot) == [("durable:app:two", "ID:1"), ("/queue/a", "ID:2")]

    def test_expired_messages_are_purged_and_counted_at_open(
        self, store: Any, reactor: PumpedReactor, tmp_path: Path
    ) -> None:
        now_ms = int(reactor.now * 1000)
        reactor.wait(store.add("/queue/a", text("ID:gone", expiration=now_ms + 1_000)))
        reactor.wait(store.add("/queue/a", text("ID:kept", expiration=now_ms + 60_000)))
        reactor.wait(store.add("/queue/a", text("ID:forever", expiration=0)))
        reactor.wait(store.add("/queue/b", text("ID:gone-too", expiration=now_ms + 2_000)))
        reactor.now += 10.0
        again, snapshot = self.reopen(store, reactor, tmp_path)
        assert ids(snapshot) == [("/queue/a", "ID:kept"), ("/queue/a", "ID:forever")]
        assert snapshot.expired == 2
        second, snapshot = self.reopen(again, reactor, tmp_path)
        assert snapshot.expired == 0
        assert len(snapshot.messages) == 2
        reactor.wait(second.close())

    def test_restarts_can_follow_each_other(self, store: Any, reactor: PumpedReactor, tmp_path: Path) -> None:
        current = store
        for round_ in range(3):
            reactor.wait(current.add("/queue/a", text(f"ID:{round_}")))
            current, snapshot = self.reopen(current, reactor, tmp_path)
            assert [m.message_id for _, m in snapshot.messages] == [f"ID:{i}" for i in range(round_ + 1)]
        reactor.wait(current.close())


class TestMemoryStore(StoreContract):
    def new_store(self, reactor: PumpedReactor, tmp_path: Path) -> MemoryStore:
        return MemoryStore(reactor)  # type: ignore[arg-type]

    def reopen(self, store: MemoryStore, reactor: PumpedReactor, tmp_path: Path) -> tuple[MemoryStore, Snapshot]:
        reactor.wait(store.close())
        return store, reactor.wait(store.open())


class TestSqliteStore(StoreContract):
    def new_store(self, reactor: PumpedReactor, tmp_path: Path) -> SqliteStore:
        return SqliteStore(str(tmp_path / "var" / "broker.sqlite"), reactor)

    def reopen(self, store: SqliteStore, reactor: PumpedReactor, tmp_path: Path) -> tuple[SqliteStore, Snapshot]:
        reactor.wait(store.close())
        again = SqliteStore(store.path, reactor)
        return again, reactor.wait(again.open())
