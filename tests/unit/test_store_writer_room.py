"""The store writer's per-commit costs besides the fsync (issue 39): how often it asks how much room
the disk has left, and how it is woken.

A SEND that waits for its RECEIPT is one commit; asking the disk for its free space
(``os.statvfs``) and the file for its free pages before each such commit cost ~9 µs of a
~430 µs round trip. While the last answer left far more room than any group takes
(``room_slack``), :class:`GroupCommitWriter` charges the next groups against it for
``room_every`` seconds; near the limit it asks before every growing group, as before.
The writer waits for work on a token queue, not a condition (see the last test).
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


def test_with_ample_room_the_disk_is_asked_once_for_many_commits() -> None:
    reactor, disk = PumpedReactor(), Disk(room=100 << 30)
    store = writer(reactor, disk, room_slack=1 << 30, room_every=3600)
    for _ in range(20):
        reactor.wait(store.submit(insert, grows=1000))
    assert store.stats.commits == 20
    assert disk.asked == 1
    reactor.wait(store.stop())


def test_near_the_limit_every_growing_commit_asks() -> None:
    reactor, disk = PumpedReactor(), Disk(room=(1 << 30) - 1)
    store = writer(reactor, disk, room_slack=1 << 30, room_every=3600)
    for _ in range(10):
        reactor.wait(store.submit(insert, grows=1000))
    assert disk.asked == 10
    disk.room = (1 << 30) + 2500  # left after the groups charged to it: +1500, +500, -500: then asked again
    for _ in range(6):
        reactor.wait(store.submit(insert, grows=1000))
    assert disk.asked == 10 + 2
    reactor.wait(store.stop())


def test_an_old_answer_is_not_used() -> None:
    reactor, disk = PumpedReactor(), Disk(room=100 << 30)
    store = writer(reactor, disk, room_slack=1 << 30, room_every=0.0)
    for _ in range(5):
        reactor.wait(store.submit(insert, grows=1000))
    assert disk.asked == 5
    reactor.wait(store.stop())


def test_a_disk_that_filled_up_since_is_seen_once_the_answer_is_old() -> None:
    reactor, disk = PumpedReactor(), Disk(room=100 << 30)
    store = writer(reactor, disk, room_slack=1 << 30, room_every=0.0)
    reactor.wait(store.submit(insert, grows=1000))
    disk.room = 10
    failure = store.submit(insert, grows=1000)
    try:
        reactor.wait(failure)
    except NoRoom as error:
        assert error.needed == 1000 and error.available == 10
    else:
        raise AssertionError("the write was stored although the disk had no room")
    reactor.wait(store.stop())


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
