"""The page file's groups (docs/paging.md): messages paged out in groups of one priority per
row, marshalled; groups never overlap, reads take whole groups (splitting only one larger than
the budget), read groups are deleted in bulk, and a write that fails is rolled back whole."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.limits import message_size
from gateway.broker.paging import page_file as paging
from gateway.broker.paging.page_file import Entry, PageFile, PageWriteFailed, QueuePage
from gateway.broker.paging.page_records import page_record, read_page_record
from gateway.errors import StoreError
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    Message,
    ObjectMessage,
    StreamMessage,
    TextMessage,
)
from tests.support.messages import text_of


def entry(seq: int, priority: int = 4, expiration: int = 0, body: str = "") -> Entry:
    message = TextMessage(destination="/queue/g", message_id=f"ID:{seq}", priority=priority, expiration=expiration,
                          text=body or f"m{seq}")
    return (-priority, seq, message, message_size(message))


def page_out(page: QueuePage, entries: list[Entry]) -> None:
    """Page out ``entries`` one by one, as the queue does."""
    for entry_ in entries:
        page.add(*entry_)


def keys(entries: list[Entry]) -> list[tuple[int, int]]:
    return [(rank, seq) for rank, seq, _, _ in entries]


def drain(page: QueuePage, rows: int = 1000, size: int = 2**62) -> list[Entry]:
    got: list[Entry] = []
    while page.count:
        read = page.read(rows, size)
        assert read, "a read of a page that has messages took none"
        got.extend(read)
    return got


def groups(page: QueuePage) -> list[tuple[int, int, int, int, int]]:
    """The page's groups in key order: (rank, seq, last rank, last seq, count)."""
    return page.file.db.execute(
        "SELECT rank, seq, last_rank, last_seq, count FROM paged WHERE queue = ? ORDER BY rank, seq", (page.id,)
    ).fetchall()


def assert_disjoint(page: QueuePage) -> None:
    found = groups(page)
    for (_, _, last_rank, last_seq, _), (rank, seq, _, _, _) in itertools.pairwise(found):
        assert (last_rank, last_seq) < (rank, seq), found


@pytest.fixture
def page() -> QueuePage:
    return PageFile(None).queue()


# -- records ----------------------------------------------------------------------


# every JSON value, also those outside the model's property types (a list, an object), on purpose
ODD_PROPERTIES: dict[str, Any] = {"s": "x", "i": 2**70, "f": 1.5, "b": True, "n": None, "y": b"\x00", "l": [1, "a"],
                                  "d": {"k": [None]}}
MESSAGES = [
    Message(destination="/queue/a", message_id="ID:1", correlation_id="c", reply_to="/queue/r", type="t",
            persistent=True, priority=9, expiration=5, timestamp=7, redelivered=True, redelivery_count=3,
            properties=ODD_PROPERTIES),
    TextMessage(message_id="ID:2", text="héllo \ud800"),
    TextMessage(message_id="ID:3", text=None),
    BytesMessage(message_id="ID:4", body=b"\x00\xff" * 600),
    MapMessage(message_id="ID:5", map={"a": 1, "b": b"2", "c": [3.0]}),
    ObjectMessage(message_id="ID:6", payload=b"\xac\xed", encoding="json"),
    StreamMessage(message_id="ID:7", items=[1, "two", b"3", None]),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda message: type(message).__name__)
def test_a_page_record_gives_back_the_message_field_for_field(message: Message) -> None:
    again = read_page_record(page_record(message))
    assert type(again) is type(message)
    for field in fields(message):
        assert getattr(again, field.name) == getattr(message, field.name), field.name


def test_a_subclass_is_paged_as_the_model_class_of_its_kind_and_an_unmarshallable_value_is_a_store_error() -> None:
    class Special(TextMessage):
        pass

    again = read_page_record(page_record(Special(message_id="ID:s", text="x")))
    assert type(again) is TextMessage and again.text == "x"
    with pytest.raises(StoreError, match="ID:o"):
        page_record(TextMessage(message_id="ID:o", properties={"o": object()}))  # type: ignore[dict-item]


# -- groups -------------------------------------------------------------------------


def test_messages_are_written_in_groups_of_one_priority(page: QueuePage) -> None:
    for seq in range(300):
        page.add(*entry(seq, priority=4 if seq % 10 else 7))
    assert page.count == 300
    page.read(1, 1)  # (writes what waits first)
    found = groups(page)
    assert len(found) < 10, found  # (not one row per message)
    assert all(rank == last_rank for rank, _, last_rank, _, _ in found)
    assert sum(row[4] for row in found) == 300 - 1  # (one message was read back)
    assert_disjoint(page)


def test_a_message_paged_out_into_a_groups_range_is_merged_into_it(page: QueuePage) -> None:
    """A redelivered message goes back at its place: paged out after later ones were, it falls in a
    group's range.  Merged into that group, groups never overlap and reads come in key order (were it a
    group of its own, the first read would take the whole group before it and come out of order)."""
    page_out(page, [entry(seq) for seq in range(2, 201, 2)])
    page.flush()
    assert len(groups(page)) == 1
    page.add(*entry(51))
    page.add(*entry(1))
    page.add(*entry(301))
    got = drain(page, rows=40)
    assert keys(got) == sorted(keys(got)) and len(got) == 103
    assert [seq for _, seq in keys(got)][:3] == [1, 2, 4]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_order_of_page_outs_and_reads_gives_every_message_once_in_key_order(data: st.DataObject) -> None:
    """Page-outs in any order (later ones, redeliveries, priorities) mixed with reads of any budget:
    each read gives the smallest keys paged out, each message once; groups never overlap."""
    page = PageFile(None).queue()
    pending: set[tuple[int, int]] = set()
    seqs = iter(range(10**6))
    taken: list[tuple[int, int]] = []
    for _ in range(data.draw(st.integers(1, 12))):
        count = data.draw(st.integers(0, 150))
        for _ in range(count):
            if taken and data.draw(st.integers(0, 9), label="redelivery when 0") == 0:
                rank, seq = taken.pop(data.draw(st.integers(0, len(taken) - 1)))
                priority = -rank
            else:
                seq = next(seqs)
                priority = data.draw(st.sampled_from([4, 4, 4, 0, 9]))
            page.add(*entry(seq, priority))
            pending.add((-priority, seq))
        rows = data.draw(st.integers(1, 400))
        size = data.draw(st.sampled_from([1, 2000, 50_000, 2**62]))
        read = keys(page.read(rows, size))
        assert read == sorted(pending)[:len(read)]
        assert len(read) <= rows
        pending.difference_update(read)
        taken.extend(read)
        assert page.count == len(pending)
        assert_disjoint(page)
    rest = keys(drain(page))
    assert rest == sorted(pending)


def test_a_group_larger_than_the_budget_is_split_and_the_rest_stays_in_order(page: QueuePage) -> None:
    page_out(page, [entry(seq) for seq in range(100)])
    one = entry(0)[3]
    first = page.read(1000, 3 * one)
    assert keys(first) == [(-4, 0), (-4, 1), (-4, 2)]
    assert groups(page)[0][:2] == (-4, 3)
    assert page.head == (-4, 3) and page.count == 97
    rest = drain(page)
    assert [seq for _, seq in keys(rest)] == list(range(3, 100))


def test_a_group_that_cannot_be_split_on_a_full_disk_is_taken_whole(page: QueuePage,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Splitting a group rewrites its rest: on a disk that paging filled, that write fails ('database or
    disk is full', seen in a CI run: the exception left the dispatch, and the queue stood still with
    29,354 messages paged).  The group is then taken whole, nothing written, and the rest come in order."""
    monkeypatch.setattr(paging, "GROUP_ROWS", 10)
    page_out(page, [entry(seq) for seq in range(30)])
    page.flush()

    @contextlib.contextmanager
    def full() -> Iterator[sqlite3.Connection]:
        raise sqlite3.OperationalError("database or disk is full")
        yield page.file.db  # (unreachable: a generator)

    monkeypatch.setattr(page.file, "transaction", full)
    first = page.read(1000, 3 * entry(0)[3])
    assert [seq for _, seq in keys(first)] == list(range(10))
    assert page.count == 20 and page.head == (-4, 10)
    assert [seq for _, seq in keys(drain(page))] == list(range(10, 30))


def test_read_groups_are_deleted_in_bulk_and_never_read_again(page: QueuePage,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    one = entry(0)[3]
    monkeypatch.setattr(paging, "GROUP_ROWS", 10)
    monkeypatch.setattr(paging, "DELETE_BYTES", 35 * one)
    page_out(page, [entry(seq) for seq in range(100)])
    page.read(10, 2**62)
    assert len(groups(page)) == 10  # (the group read is still in the file ...)
    page.read(20, 2**62)
    assert len(groups(page)) == 10  # (... until DELETE_BYTES were read)
    third = page.read(10, 2**62)
    assert [seq for _, seq in keys(third)] == list(range(30, 40))
    assert len(groups(page)) == 6
    page.read(10, 2**62)
    assert len(groups(page)) == 6
    page.add(*entry(5))  # (a redelivery into the range of a group read, not deleted yet)
    page.flush()  # (its write deletes the groups read first, in the same transaction)
    assert groups(page)[0][:2] == (-4, 5) and len(groups(page)) == 6
    assert [seq for _, seq in keys(drain(page))] == [5, *range(50, 100)]
    assert groups(page) == []


def test_a_write_that_fails_is_rolled_back_whole_and_the_groups_read_stay_read(page: QueuePage) -> None:
    """A page-out that cannot be written (the file is full) gives its messages back, in order, and
    leaves the file sound; the groups read back before it (their deletion was part of the failed
    transaction) are not read again, and the rest comes in order once the file takes writes again."""
    page_out(page, [entry(seq) for seq in range(300)])
    first = page.read(128, 2**62)
    assert [seq for _, seq in keys(first)] == list(range(128))
    assert len(groups(page)) == 3  # (the group read waits to be deleted)
    db = page.file.db
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    later = [entry(seq, body="x" * 8000) for seq in range(300, 400)]
    with pytest.raises(PageWriteFailed) as failed:
        for item in later:
            page.add(*item)
    given_back = failed.value.entries
    assert keys(given_back) == keys(later[:len(given_back)])
    assert [text_of(message) for _, _, message, _ in given_back] == ["x" * 8000] * len(given_back)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert page.count == 300 - 128 and len(groups(page)) == 3
    db.execute("PRAGMA max_page_count = 1073741823")
    assert [seq for _, seq in keys(drain(page))] == list(range(128, 300))


def test_expired_messages_are_taken_from_their_groups_and_the_others_stay_in_order(page: QueuePage) -> None:
    page_out(page, [entry(seq, expiration=1000 if seq % 3 == 0 else 0 if seq % 3 == 1 else 5000) for seq in range(300)])
    expired = page.take_expired(2000)
    assert [seq for _, seq in keys(expired)] == list(range(0, 300, 3))
    assert page.count == 200
    assert_disjoint(page)
    assert [seq for _, seq in keys(drain(page, rows=77))] == [seq for seq in range(300) if seq % 3]


def test_a_search_past_a_key_inside_a_group_takes_its_matches_in_order(page: QueuePage) -> None:
    page_out(page, [entry(seq) for seq in range(300)])

    def even(message: Any) -> bool:
        return int(message.text[1:]) % 2 == 0

    found = page.search(even, 5, 2**62, after=(-4, 100))
    assert [seq for _, seq in keys(found)] == [102, 104, 106, 108, 110]
    assert page.count == 295
    assert_disjoint(page)
    assert page.take_ids({"ID:7", "ID:250"}) and page.count == 293
    rest = [seq for _, seq in keys(drain(page))]
    assert rest == [seq for seq in range(300) if seq not in {7, 250, 102, 104, 106, 108, 110}]
