"""Concurrent producers that each wait for their commit share it (issue 39): the writer's linger.

:class:`GroupCommitWriter` with ``linger`` holds a group back while fewer operations are queued than
the largest of its recent groups had (PostgreSQL's ``commit_delay`` with ``commit_siblings``), at most
``linger`` seconds and until that many are queued.  What must hold: writes that arrive spread out
within the window share one commit once the recent groups were shared; a lone producer (groups of one)
is never held back; the wait is bounded and ends on ``stop``; every report still comes after its commit.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from gateway.app import build_store
from gateway.broker.store.sqlite_store import COMMIT_LINGER, SqliteStore
from gateway.broker.store.sqlite_writer import GroupCommitWriter
from gateway.config import parse_config
from tests.unit.test_store_contract import PumpedReactor

WAIT = 10.0
"""Seconds a test waits for the writer thread (a loaded host is slow; nothing here is a timing target)."""


class ThreadReactor:
    """``callFromThread`` into a queue the test thread drains (the writer's reports arrive there)."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.Queue()

    def callFromThread(self, f: Callable[..., Any], *args: Any) -> None:
        self.calls.put((f, args))

    def pump_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            f, args = self.calls.get(timeout=WAIT)
            f(*args)


def connect() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.execute("CREATE TABLE parts (name TEXT)")
    return db


def insert(db: sqlite3.Connection, parts: list[Any]) -> None:
    db.executemany("INSERT INTO parts VALUES (?)", [(part,) for part in parts])


@pytest.fixture
def reactor() -> ThreadReactor:
    return ThreadReactor()


@pytest.fixture
def open_writer(reactor: ThreadReactor) -> Iterator[Callable[[float], GroupCommitWriter]]:
    writers: list[GroupCommitWriter] = []

    def start(linger: float) -> GroupCommitWriter:
        writer = GroupCommitWriter(reactor, connect, lambda error: error, linger=linger)
        reactor.pump_until(fired(writer.start()))
        writers.append(writer)
        return writer

    yield start
    for writer in writers:
        reactor.pump_until(fired(writer.stop()))


def fired(deferred: Deferred[Any]) -> Callable[[], bool]:
    return lambda: deferred.called


def reached(reports: Reports, count: int) -> Callable[[], bool]:
    return lambda: len(reports.done) >= count


class Reports:
    """The ``done`` reports, in the order they came."""

    def __init__(self) -> None:
        self.done: list[tuple[str, BaseException | None]] = []

    def of(self, name: str) -> Callable[[BaseException | None], None]:
        return lambda error: self.done.append((name, error))


def hold(writer: GroupCommitWriter, reactor: ThreadReactor) -> threading.Event:
    """Keep the writer busy until the returned event is set."""
    gate, busy = threading.Event(), threading.Event()

    def wait(_db: sqlite3.Connection) -> None:
        busy.set()
        assert gate.wait(WAIT)

    writer.call(wait)
    assert busy.wait(WAIT)
    return gate


def shared_group(writer: GroupCommitWriter, reactor: ThreadReactor, reports: Reports, count: int) -> None:
    """``count`` writes that arrive while the writer is busy: committed as one group (the recent history)."""
    gate = hold(writer, reactor)
    for index in range(count):
        writer.append(insert, f"first-{index}", 0, reports.of(f"first-{index}"))
    gate.set()
    reactor.pump_until(reached(reports, count))


def test_writes_that_arrive_spread_out_share_one_commit_once_groups_were_shared(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    writer = open_writer(WAIT)
    reports = Reports()
    shared_group(writer, reactor, reports, 4)
    commits = writer.stats.commits
    for index in range(4):  # (four producers' next SENDs, each arriving after the writer woke)
        writer.append(insert, f"next-{index}", 0, reports.of(f"next-{index}"))
        threading.Event().wait(0.02)
    reactor.pump_until(reached(reports, 8))
    assert writer.stats.commits == commits + 1
    assert writer.stats.lingers == 1
    assert reports.done[4:] == [(f"next-{index}", None) for index in range(4)]


def test_without_linger_the_same_writes_are_committed_apart(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    """(The behaviour before: what the test above would see with ``linger`` 0.)"""
    writer = open_writer(0.0)
    reports = Reports()
    shared_group(writer, reactor, reports, 4)
    commits = writer.stats.commits
    for index in range(4):
        writer.append(insert, f"next-{index}", 0, reports.of(f"next-{index}"))
        reactor.pump_until(reached(reports, 5 + index))
    assert writer.stats.commits == commits + 4
    assert writer.stats.lingers == 0


def test_a_lone_producer_is_never_held_back(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    """Each write waits for its commit before the next comes (a producer with a RECEIPT per SEND): groups of
    one, so the writer never lingers, though the window is far longer than the test may wait."""
    writer = open_writer(60.0)
    reports = Reports()
    for index in range(20):
        writer.append(insert, f"send-{index}", 0, reports.of(f"send-{index}"))
        reactor.pump_until(reached(reports, index + 1))
    assert writer.stats.lingers == 0
    assert writer.stats.commits == 20


def test_the_wait_ends_at_the_window_with_fewer_writes_than_expected(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    """A producer that went away: the writer waits at most ``linger``, then commits what it has.  A wait
    to which nothing came makes it commit the next groups at once, 1, then 2, then 4 (a pipelining
    producer waiting for its receipt is not held back each time); once no remembered group was shared,
    it no longer waits at all."""
    writer = open_writer(0.05)
    reports = Reports()
    shared_group(writer, reactor, reports, 3)
    for index in range(GroupCommitWriter.HISTORY + 3):
        writer.append(insert, f"alone-{index}", 0, reports.of(f"alone-{index}"))
        reactor.pump_until(reached(reports, 4 + index))
    assert writer.stats.lingers == 3  # (the groups 0, 2 and 5; groups 8 on remember no shared one)
    assert [error for _, error in reports.done] == [None] * len(reports.done)


def held_back(writer: GroupCommitWriter, reactor: ThreadReactor, reports: Reports, shared: int, name: str) -> None:
    """After a shared group of `shared` writes, append `name` and wait until the writer holds it back."""
    shared_group(writer, reactor, reports, shared)
    writer.append(insert, name, 0, reports.of(name))
    while not writer._lingering:
        threading.Event().wait(0.001)


def test_stop_ends_a_held_back_group_and_commits_it(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    writer = open_writer(60.0)
    reports = Reports()
    held_back(writer, reactor, reports, 4, "last")
    reactor.pump_until(fired(writer.stop()))
    assert reports.done[-1] == ("last", None)


def test_other_work_queued_meanwhile_ends_the_wait_when_enough_is_queued(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    """Any operation counts (a submit as well as a merged part), each its own outcome."""
    writer = open_writer(60.0)
    reports = Reports()
    held_back(writer, reactor, reports, 2, "part")
    submitted = writer.submit(lambda db: db.execute("SELECT count(*) FROM parts").fetchone()[0])
    reactor.pump_until(lambda: submitted.called and len(reports.done) == 3)
    assert writer.stats.commits == 2
    assert submitted.result == 3


def test_the_store_lingers_by_default() -> None:
    store = SqliteStore(":memory:", PumpedReactor())
    assert store.writer.linger == COMMIT_LINGER > 0
    assert SqliteStore(":memory:", PumpedReactor(), commit_linger=0).writer.linger == 0


def test_after_pipelined_groups_the_writer_does_not_wait(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    """Groups larger than :attr:`GroupCommitWriter.SIBLINGS` come from producers that pipeline their SENDs
    (a receipt every 100): a smaller group after them is their last one before their receipt, and waiting
    would only delay it."""
    writer = open_writer(60.0)
    reports = Reports()
    shared_group(writer, reactor, reports, GroupCommitWriter.SIBLINGS + 1)
    writer.append(insert, "last", 0, reports.of("last"))
    reactor.pump_until(reached(reports, GroupCommitWriter.SIBLINGS + 2))
    assert writer.stats.lingers == 0


def test_a_wait_that_paid_keeps_the_writer_lingering(
        open_writer: Callable[[float], GroupCommitWriter], reactor: ThreadReactor) -> None:
    """Producers that keep sharing commits are held back every time (the back-off is only for waits to
    which nothing came)."""
    writer = open_writer(WAIT)
    reports = Reports()
    shared_group(writer, reactor, reports, 2)
    for turn in range(5):
        writer.append(insert, f"a-{turn}", 0, reports.of(f"a-{turn}"))
        while not writer._lingering:
            threading.Event().wait(0.001)
        writer.append(insert, f"b-{turn}", 0, reports.of(f"b-{turn}"))
        reactor.pump_until(reached(reports, 4 + 2 * turn))
    assert writer.stats.lingers == 5
    assert writer.stats.commits == 6


def test_broker_commit_linger_us_sets_the_stores_linger(tmp_path: Path) -> None:
    def linger(broker: dict[str, Any]) -> float:
        config = parse_config({"gateway": {"data_dir": str(tmp_path)}, "broker": broker})
        store = build_store(config, PumpedReactor())
        assert isinstance(store, SqliteStore)
        return store.writer.linger

    assert linger({}) == pytest.approx(COMMIT_LINGER)
    assert linger({"commit_linger_us": 500}) == pytest.approx(0.0005)
    assert linger({"commit_linger_us": 0}) == 0
