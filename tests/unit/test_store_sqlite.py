"""What the SQLite store does beyond the store contract.

Group commit (one transaction for writes that arrive together, each Deferred
fired only after its commit, the caller never waiting on the disk), a full
disk (simulated with ``max_size``, i.e. ``PRAGMA max_page_count``), and the
clear errors for a corrupt, foreign, newer, locked or unreachable file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gateway.broker.store.sqlite_store import SqliteStore
from gateway.errors import StoreError
from gateway.message.model import BytesMessage, TextMessage
from tests.unit.test_store_contract import PumpedReactor


def message(index: int, size: int = 10) -> BytesMessage:
    return BytesMessage(destination="/queue/a", message_id=f"ID:{index}", persistent=True, body=b"x" * size)


class GatedConnection(sqlite3.Connection):
    """A connection whose COMMIT waits for :attr:`gate` once :attr:`armed` (a slow disk)."""

    armed = False
    gate = threading.Event()
    waiting = threading.Event()

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT" and type(self).armed:
            type(self).waiting.set()
            assert type(self).gate.wait(10)
        return super().execute(sql, *args)


@pytest.fixture
def gated() -> type[GatedConnection]:
    class Gated(GatedConnection):
        armed = False
        gate = threading.Event()
        waiting = threading.Event()

    return Gated


def open_store(reactor: PumpedReactor, path: str, **options: Any) -> SqliteStore:
    store = SqliteStore(path, reactor, **options)
    reactor.wait(store.open())
    return store


def recovered_ids(reactor: PumpedReactor, path: str) -> list[str]:
    store = SqliteStore(path, reactor)
    snapshot = reactor.wait(store.open())
    reactor.wait(store.close())
    return [m.message_id for _, m in snapshot.messages]


def fired(d: Any) -> bool:
    return bool(d.called)


# -- group commit -------------------------------------------------------------


def test_writes_waiting_for_the_disk_share_one_commit(
    reactor: PumpedReactor, path: str, gated: type[GatedConnection]
) -> None:
    store = open_store(reactor, path, connect=lambda p, **kw: sqlite3.connect(p, factory=gated, **kw))
    gated.armed = True
    first = store.add("/queue/a", message(0))
    assert gated.waiting.wait(10), "the first write never reached its commit"
    started = time.monotonic()
    rest = [store.add("/queue/a", message(i)) for i in range(1, 201)]
    assert time.monotonic() - started < 1.0, "submitting writes waited for the disk"
    reactor.run_thread_calls(timeout=0.2)
    assert not fired(first) and not any(map(fired, rest)), "a write was reported before its commit"
    gated.gate.set()
    for d in [first, *rest]:
        reactor.wait(d)
    assert store.stats.commits == 2
    assert store.stats.largest_group == 200
    assert store.stats.operations == 201
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == [f"ID:{i}" for i in range(201)]


def test_a_group_is_capped(reactor: PumpedReactor, path: str, gated: type[GatedConnection]) -> None:
    store = open_store(
        reactor, path, max_group=50, connect=lambda p, **kw: sqlite3.connect(p, factory=gated, **kw)
    )
    gated.armed = True
    writes = [store.add("/queue/a", message(0))]
    assert gated.waiting.wait(10)
    writes += [store.add("/queue/a", message(i)) for i in range(1, 121)]
    gated.gate.set()
    for d in writes:
        reactor.wait(d)
    assert store.stats.largest_group == 50
    assert store.stats.commits == 1 + 3  # 1, then 50 + 50 + 20
    reactor.wait(store.close())


def test_the_writer_is_its_own_thread(reactor: PumpedReactor, path: str) -> None:
    before = set(threading.enumerate())  # (a store another test of this worker left open has its own)
    store = open_store(reactor, path)
    threads = [thread for thread in threading.enumerate()
               if thread.name.startswith("store-writer:") and thread not in before]
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
    reactor.wait(store.close())
    deadline = time.monotonic() + 5
    while threads[0].is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not threads[0].is_alive()


def test_close_finishes_pending_writes(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    writes = [store.add("/queue/a", message(i)) for i in range(100)]
    reactor.wait(store.close())
    assert all(map(fired, writes))
    assert recovered_ids(reactor, path) == [f"ID:{i}" for i in range(100)]


def test_writes_after_close_fail(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    reactor.wait(store.close())
    with pytest.raises(StoreError, match="closed"):
        reactor.wait(store.add("/queue/a", message(1)))


def test_the_file_is_in_wal_mode_with_full_sync(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    reactor.wait(store.close())
    with closing(sqlite3.connect(path)) as db, db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.synchronous == "FULL"


def test_normal_sync_can_be_chosen_and_a_bad_one_cannot(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path, synchronous="normal")
    reactor.wait(store.add("/queue/a", message(1)))
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == ["ID:1"]
    with pytest.raises(StoreError, match="synchronous"):
        SqliteStore(path, reactor, synchronous="sometimes")


def test_a_message_that_cannot_be_stored_fails_its_write(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path)
    unstorable: dict[str, Any] = {"x": object()}  # (outside the model's property types on purpose)
    bad = TextMessage(destination="/queue/a", message_id="ID:bad", persistent=True, properties=unstorable)
    with pytest.raises(StoreError, match="cannot store a value of type object"):
        reactor.wait(store.add("/queue/a", bad))
    reactor.wait(store.close())


# -- a full disk ----------------------------------------------------------------


def fill(reactor: PumpedReactor, store: SqliteStore, size: int = 2000) -> tuple[list[str], StoreError]:
    """Add messages until the store refuses one; the ids stored and the error."""
    stored: list[str] = []
    for index in range(10_000):
        try:
            reactor.wait(store.add("/queue/a", message(index, size)))
        except StoreError as error:
            return stored, error
        stored.append(f"ID:{index}")
    raise AssertionError("the store never filled up")


def test_a_full_store_refuses_writes_and_keeps_what_it_acknowledged(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path, max_size=256 * 1024)
    stored, error = fill(reactor, store)
    assert len(stored) > 20
    assert path in str(error) and "full" in str(error)
    # Still working: acknowledgements and redelivery counts go through...
    for message_id in stored[:30]:
        reactor.wait(store.remove("/queue/a", message_id))
    reactor.wait(store.set_redelivery("/queue/a", stored[30], 2))
    # ...and once space is freed, sends are accepted again.
    reactor.wait(store.add("/queue/a", message(99_999, 2000)))
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == [*stored[30:], "ID:99999"]


def test_a_batch_that_does_not_fit_is_stored_not_at_all(reactor: PumpedReactor, path: str) -> None:
    store = open_store(reactor, path, max_size=128 * 1024)
    reactor.wait(store.add("/queue/a", message(0)))
    with pytest.raises(StoreError, match="full"):
        reactor.wait(store.add_batch([("/queue/a", message(i, 4000)) for i in range(1, 100)]))
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == ["ID:0"]


def test_in_a_group_only_the_write_that_does_not_fit_fails(
    reactor: PumpedReactor, path: str, gated: type[GatedConnection]
) -> None:
    store = open_store(
        reactor, path, max_size=128 * 1024, connect=lambda p, **kw: sqlite3.connect(p, factory=gated, **kw)
    )
    gated.armed = True
    first = store.add("/queue/a", message(0))
    assert gated.waiting.wait(10)
    small = store.add("/queue/a", message(1))
    huge = store.add_batch([("/queue/a", message(i, 4000)) for i in range(100, 200)])
    small_too = store.add("/queue/a", message(2))
    gated.gate.set()
    for d in (first, small, small_too):
        reactor.wait(d)
    with pytest.raises(StoreError, match="full"):
        reactor.wait(huge)
    assert store.stats.failures == 1
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == ["ID:0", "ID:1", "ID:2"]


def test_a_rolled_back_group_leaves_the_row_index_as_it_was(
    reactor: PumpedReactor, path: str, gated: type[GatedConnection]
) -> None:
    store = open_store(
        reactor, path, max_size=128 * 1024, connect=lambda p, **kw: sqlite3.connect(p, factory=gated, **kw)
    )
    reactor.wait(store.add_batch([("/queue/a", message(i)) for i in range(4)]))
    gated.armed = True
    first = store.add("/queue/a", message(4))
    assert gated.waiting.wait(10)
    # One group: removes and a redelivery count around a write that cannot fit.
    group = [
        store.remove("/queue/a", "ID:0"),
        store.add("/queue/a", message(5)),
        store.add_batch([("/queue/a", message(i, 4000)) for i in range(100, 200)]),
        store.set_redelivery("/queue/a", "ID:1", 3),
        store.remove("/queue/a", "ID:2"),
        store.remove("/queue/a", "ID:2"),  # the second time there is nothing left to remove
    ]
    gated.gate.set()
    reactor.wait(first)
    with pytest.raises(StoreError, match="full"):
        reactor.wait(group[2])
    for d in group[:2] + group[3:]:
        reactor.wait(d)
    reactor.wait(store.remove("/queue/a", "ID:5"))
    reactor.wait(store.close())
    again = SqliteStore(path, reactor)
    snapshot = reactor.wait(again.open())
    reactor.wait(again.close())
    assert [(m.message_id, m.redelivery_count) for _, m in snapshot.messages] == [("ID:1", 3), ("ID:3", 0), ("ID:4", 0)]


class SmallDisk:
    """A file system of ``capacity`` bytes holding only the store's files."""

    def __init__(self, path: str, capacity: int) -> None:
        self.files = [path, path + "-wal"]
        self.capacity = capacity

    def __call__(self, directory: str) -> int:
        return self.capacity - sum(os.path.getsize(f) for f in self.files if os.path.exists(f))


MIB = 1024 * 1024


def test_sends_stop_while_the_disk_still_has_room_for_acknowledgements(reactor: PumpedReactor, path: str) -> None:
    disk = SmallDisk(path, capacity=12 * MIB)
    store = open_store(reactor, path, free_space=disk, min_free=8 * MIB)
    stored, error = fill(reactor, store, size=20_000)
    assert 100 < len(stored) < 4 * MIB // 20_000 + 10  # about 4 MiB of 20 kB messages
    assert path in str(error) and "full" in str(error) and "acknowledgements" in str(error)
    assert disk(os.path.dirname(path)) > 8 * MIB - 64 * 1024, "sends ate into the reserve"
    # Acknowledgements and redelivery counts still go through...
    for message_id in stored[:30]:
        reactor.wait(store.remove("/queue/a", message_id))
    reactor.wait(store.set_redelivery("/queue/a", stored[30], 5))
    # ...and the pages they freed take new messages, without the disk growing.
    reactor.wait(store.add("/queue/a", message(100_000, 20_000)))
    more, _ = fill(reactor, store, size=20_000)
    assert len(more) > 5
    # Once the disk has room again, sends are accepted again.
    disk.capacity += 64 * MIB
    reactor.wait(store.add("/queue/a", message(200_000, 20_000)))
    reactor.wait(store.close())
    recovered = recovered_ids(reactor, path)
    assert recovered[: len(stored) - 30] == stored[30:]
    assert len(recovered) == len(stored) - 30 + 1 + len(more) + 1


def test_in_a_group_writes_are_admitted_while_they_fit(
    reactor: PumpedReactor, path: str, gated: type[GatedConnection]
) -> None:
    disk = SmallDisk(path, capacity=10 * MIB)
    store = open_store(
        reactor, path, free_space=disk, min_free=10 * MIB - 200_000,
        connect=lambda p, **kw: sqlite3.connect(p, factory=gated, **kw),
    )
    gated.armed = True
    first = store.remove("/queue/a", "ID:nothing")
    assert gated.waiting.wait(10)
    writes = [store.add("/queue/a", message(i, 10_000)) for i in range(20)]
    removal = store.remove("/queue/a", "ID:0")
    gated.gate.set()
    reactor.wait(first)
    outcomes = []
    for d in writes:
        try:
            reactor.wait(d)
            outcomes.append(True)
        except StoreError:
            outcomes.append(False)
    reactor.wait(removal)
    admitted = outcomes.count(True)
    assert 0 < admitted < 20 and outcomes == [True] * admitted + [False] * (20 - admitted)
    reactor.wait(store.close())
    assert recovered_ids(reactor, path) == [f"ID:{i}" for i in range(1, admitted)]


# -- files that cannot be used -------------------------------------------------------


def a_store_with_data(reactor: PumpedReactor, path: str, count: int = 2000) -> None:
    store = open_store(reactor, path)
    reactor.wait(store.add_batch([("/queue/a", message(i, 500)) for i in range(count)]))
    reactor.wait(store.close())


def refused(reactor: PumpedReactor, path: str) -> str:
    """Open must fail with a StoreError naming the file; returns its text."""
    store = SqliteStore(path, reactor, lock_timeout=0.1)
    with pytest.raises(StoreError) as caught:
        reactor.wait(store.open())
    text = str(caught.value)
    assert path in text
    assert writer_ended(store), "a store that failed to open left its thread running"
    return text


def writer_ended(store: SqliteStore) -> bool:
    deadline = time.monotonic() + 5
    while store.writer.alive and time.monotonic() < deadline:
        store.reactor.run_thread_calls(timeout=0.1)
    return not store.writer.alive


def test_garbage_is_not_a_database(reactor: PumpedReactor, path: str) -> None:
    Path(path).write_bytes(b"these are not the pages you are looking for\n" * 200)
    assert "corrupt or not an SQLite database" in refused(reactor, path)


def test_a_garbled_header_is_refused(reactor: PumpedReactor, path: str) -> None:
    a_store_with_data(reactor, path)
    with open(path, "r+b") as handle:
        handle.write(b"\x00" * 100)
    assert "corrupt" in refused(reactor, path)


def test_a_truncated_database_is_refused(reactor: PumpedReactor, path: str) -> None:
    a_store_with_data(reactor, path)
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)
    assert "corrupt" in refused(reactor, path)


def test_a_damaged_page_is_refused(reactor: PumpedReactor, path: str) -> None:
    a_store_with_data(reactor, path)
    with open(path, "r+b") as handle:
        handle.seek(3 * 4096)
        handle.write(bytes(range(256)) * 16)
    assert "corrupt" in refused(reactor, path)


def test_an_unreadable_stored_message_is_refused(reactor: PumpedReactor, path: str) -> None:
    a_store_with_data(reactor, path, count=3)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE messages SET record = x'01020304' WHERE message_id = 'ID:1'")
    text = refused(reactor, path)
    assert "stored message" in text and "/queue/a" in text


def test_another_database_is_not_a_message_store(reactor: PumpedReactor, path: str) -> None:
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE invoices (id INTEGER)")
    assert "not a jmsgateway message store" in refused(reactor, path)


def test_a_store_from_a_newer_version_is_refused(reactor: PumpedReactor, path: str) -> None:
    a_store_with_data(reactor, path, count=1)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("PRAGMA user_version = 99")
    assert "newer" in refused(reactor, path)


def test_a_store_in_use_by_another_gateway_is_refused(reactor: PumpedReactor, path: str) -> None:
    first = open_store(reactor, path)
    assert "in use" in refused(reactor, path)
    reactor.wait(first.add("/queue/a", message(1)))
    reactor.wait(first.close())
    assert recovered_ids(reactor, path) == ["ID:1"]


def test_a_path_that_cannot_be_created_is_refused(reactor: PumpedReactor, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    text = refused(reactor, str(blocker / "broker.sqlite"))
    assert "cannot be opened" in text


def test_a_missing_directory_is_created(reactor: PumpedReactor, tmp_path: Path) -> None:
    path = str(tmp_path / "var" / "data" / "broker.sqlite")
    store = open_store(reactor, path)
    reactor.wait(store.close())
    assert os.path.exists(path)


def test_a_directory_in_place_of_the_file_is_refused(reactor: PumpedReactor, tmp_path: Path) -> None:
    path = tmp_path / "broker.sqlite"
    path.mkdir()
    assert "unable to open database file" in refused(reactor, str(path))
