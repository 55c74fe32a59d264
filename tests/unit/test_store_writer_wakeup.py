"""How the store's writer thread is woken for work (issue 39).

A SEND that waits for its RECEIPT is one commit, and the writer is idle between two of them,
so each SEND wakes it. :class:`GroupCommitWriter` waits for a token (``queue.SimpleQueue``)
with no lock held, not on a ``threading.Condition`` whose woken waiter then waits again for
the lock the reactor thread still holds; a token is put only for a writer that waits.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from gateway.broker.store.sqlite_writer import GroupCommitWriter, NoRoom
from gateway.errors import StoreError
from tests.unit.test_store_contract import PumpedReactor


class Disk:
    """A ``room`` callback that counts how often it is asked."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.asked = 0

    def __call__(self, connection: sqlite3.Connection) -> int:
        self.asked += 1
        return self.room


def writer(reactor: PumpedReactor, disk: Disk, **options: Any) -> GroupCommitWriter:
    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        connection.execute("CREATE TABLE t (x BLOB)")
        return connection

    def describe(error: BaseException) -> BaseException:
        return error if isinstance(error, NoRoom) else StoreError(str(error))

    started = GroupCommitWriter(reactor, connect, describe, room=disk, **options)
    reactor.wait(started.start())
    return started


def insert(connection: sqlite3.Connection) -> None:
    connection.execute("INSERT INTO t VALUES (x'00')")


def test_the_writer_wakes_for_work_without_piling_up_wake_ups() -> None:
    """The writer waits for a token with no lock held (a condition's waiter, once woken, also waits
    for the lock the reactor thread still holds); only a waiting writer gets a token, so a burst
    handed over while it is busy leaves none behind."""
    reactor, disk = PumpedReactor(), Disk(room=100 << 30)
    store = writer(reactor, disk)
    blocked, release = threading.Event(), threading.Event()

    def busy(connection: sqlite3.Connection) -> None:
        blocked.set()
        release.wait(10)

    first = store.submit(busy)
    assert blocked.wait(10)
    burst = [store.submit(insert, grows=100) for _ in range(50)]
    assert store._wakeup.qsize() == 0  # (the writer is busy: nobody to wake)
    release.set()
    for d in [first, *burst]:
        reactor.wait(d)
    assert store.stats.commits == 2
    for _ in range(5):  # idle between writes: one wake-up each, none left over
        reactor.wait(store.submit(insert, grows=100))
        assert store._wakeup.qsize() == 0
    reactor.wait(store.stop())
