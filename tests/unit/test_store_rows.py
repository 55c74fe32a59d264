"""The SQLite store's in-memory row index and its undo journal."""

from __future__ import annotations

from gateway.broker.store.sqlite_rows import RowIndex
from gateway.broker.store.sqlite_writer import TransactionJournal


def test_rows_are_found_oldest_first_and_taken_once() -> None:
    index = RowIndex(TransactionJournal())
    first = index.allocate("/queue/a", "ID:1")
    second = index.allocate("/queue/a", "ID:1")
    other = index.allocate("/queue/b", "ID:1")
    assert first < second < other
    assert index.find("/queue/a", "ID:1") == first
    assert index.take("/queue/a", "ID:1") == first
    assert index.take("/queue/a", "ID:1") == second
    assert index.take("/queue/a", "ID:1") is None
    assert index.find("/queue/b", "ID:1") == other
    assert len(index) == 1


def test_loaded_rows_set_the_next_row_number() -> None:
    index = RowIndex(TransactionJournal())
    index.load("/queue/a", "ID:1", 7)
    index.load("durable:c:d", "ID:2", 42)
    assert index.allocate("/queue/a", "ID:3") == 43
    assert sorted(index.take_queue("/queue/a")) == [7, 43]
    assert index.take_queue("/queue/a") == []


def test_a_rollback_undoes_every_change_since_the_last_commit() -> None:
    journal = TransactionJournal()
    index = RowIndex(journal)
    kept = index.allocate("/queue/a", "ID:kept")
    twice = [index.allocate("/queue/a", "ID:twice") for _ in range(2)]
    durable = index.allocate("durable:c:d", "ID:d")
    journal.committed()

    index.take("/queue/a", "ID:kept")
    index.take("/queue/a", "ID:twice")
    index.allocate("/queue/a", "ID:new")
    index.take_queue("durable:c:d")
    index.allocate("durable:c:d", "ID:after")
    journal.rolled_back()

    assert index.find("/queue/a", "ID:kept") == kept
    assert index.take("/queue/a", "ID:twice") == twice[0]
    assert index.take("/queue/a", "ID:twice") == twice[1]
    assert index.find("/queue/a", "ID:new") is None
    assert index.take_queue("durable:c:d") == [durable]


def test_committed_changes_stay() -> None:
    journal = TransactionJournal()
    index = RowIndex(journal)
    index.allocate("/queue/a", "ID:1")
    journal.committed()
    index.take("/queue/a", "ID:1")
    journal.committed()
    journal.rolled_back()
    assert index.find("/queue/a", "ID:1") is None
