"""The duplicate-detection store of ONCE_AND_ONLY_ONCE bridges: source message ids
already delivered to the target, per bridge, kept for a time window, in SQLite.

This is the "cache of received message ids on disk" the JBoss Messaging and
Artemis manuals describe as the alternative to XA.  A bridge asks
:meth:`DuplicateStore.contains` (memory, no I/O) before it sends a message
and calls :meth:`DuplicateStore.record` as soon as the target confirmed the
batch, *before* it acknowledges at the source; so a crash or a lost
connection between the send and the acknowledgement gives a redelivery that
is skipped, not a duplicate.

What it cannot close, stated plainly:

* the time between the target's confirmation and the commit of the ids here
  (one small SQLite transaction on the store's own thread, about a
  millisecond): a crash of the gateway inside it resends the batch;
* a redelivery arriving after ``duplicate_window`` is sent again;
* a target that applied a send whose confirmation never arrived (the
  connection dropped in between) gets the batch again;
* ``synchronous=NORMAL`` in WAL mode survives a process crash, not a power
  failure of the machine (the last commits may be lost).

Writes never run on the reactor thread: they go to a single worker thread
(an injected ``executor`` in tests).  Memory is bounded: the newest
``cache_size`` ids (over all bridges) stay in memory, recently used first to
stay.  While a bridge's ids all fit, :meth:`DuplicateStore.known` answers from
memory (a dict probe); once some were evicted, the ids memory does not hold
are looked up in SQLite on the worker thread (one indexed query per batch).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from gateway.errors import StoreError

Executor = Callable[[Callable[[], Any]], Deferred[Any]]
"""Runs a blocking function off the reactor thread; the Deferred fires on the reactor thread."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS bridge_delivered ("
    " bridge TEXT NOT NULL, message_id TEXT NOT NULL, recorded INTEGER NOT NULL,"
    " PRIMARY KEY (bridge, message_id)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS bridge_delivered_age ON bridge_delivered (bridge, recorded)",
)


CACHE_SIZE = 100_000
"""Ids kept in memory by default (over all bridges of a store); the rest is read from SQLite."""


def inline_executor(function: Callable[[], Any]) -> Deferred[Any]:
    """An executor that runs the function at once (unit tests; blocks the caller)."""
    try:
        return succeed(function())
    except Exception as exc:
        result: Deferred[Any] = Deferred()
        result.errback(exc)
        return result


class DuplicateStore:
    """Delivered source message ids per bridge (see the module docstring).

    :param path: the SQLite file (``":memory:"`` keeps nothing across restarts).
    :param reactor: results come back to it; its ``seconds()`` is the clock.
    :param executor: runs blocking calls; default a one-thread pool of its own.
    """

    log = Logger()

    def __init__(self, path: str, reactor: Any, *, executor: Executor | None = None,
                 cache_size: int = CACHE_SIZE) -> None:
        self.path = path
        self.reactor = reactor
        self.cache_size = max(1, cache_size)
        self._pool: ThreadPool | None = None
        self._executor = executor
        self._connection: sqlite3.Connection | None = None
        self._windows: dict[str, int] = {}
        self._ids: dict[str, OrderedDict[str, int]] = {}
        self._complete: dict[str, bool] = {}
        """Bridge -> whether memory holds every id of its window (no SQLite lookup needed)."""
        self._evictions: dict[str, int] = {}
        self.opened = False

    # -- lifecycle -----------------------------------------------------------

    def register(self, bridge: str, window_ms: int) -> None:
        """Declare a bridge and how long its ids are kept (before :meth:`open`)."""
        self._windows[bridge] = window_ms
        self._ids.setdefault(bridge, OrderedDict())
        self._complete.setdefault(bridge, True)

    def _run(self, function: Callable[[], Any]) -> Deferred[Any]:
        if self._executor is None:
            from twisted.internet.threads import deferToThreadPool

            if self._pool is None:
                self._pool = ThreadPool(1, 1, name="bridge-dedup")
                self._pool.start()
            pool = self._pool
            self._executor = lambda f: deferToThreadPool(self.reactor, pool, f)
        return self._executor(function)

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def open(self) -> Deferred[None]:
        """Open (create) the database, drop expired ids and load the rest."""
        if self.opened:
            return succeed(None)
        now = self.now_ms()
        windows = dict(self._windows)

        def load() -> dict[str, tuple[list[tuple[str, int]], int]]:
            if self.path != ":memory:":
                directory = os.path.dirname(os.path.abspath(self.path))
                os.makedirs(directory, exist_ok=True)
            try:
                connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
                for statement in _SCHEMA:
                    connection.execute(statement)
                loaded: dict[str, tuple[list[tuple[str, int]], int]] = {}
                share = max(1, self.cache_size // max(1, len(windows)))
                for bridge, window in windows.items():
                    connection.execute(
                        "DELETE FROM bridge_delivered WHERE bridge = ? AND recorded < ?", (bridge, now - window)
                    )
                    total = connection.execute(
                        "SELECT COUNT(*) FROM bridge_delivered WHERE bridge = ?", (bridge,)
                    ).fetchone()[0]
                    rows = connection.execute(
                        "SELECT message_id, recorded FROM bridge_delivered WHERE bridge = ?"
                        " ORDER BY recorded DESC LIMIT ?",
                        (bridge, share),
                    ).fetchall()
                    loaded[bridge] = ([(str(r[0]), int(r[1])) for r in reversed(rows)], int(total))
            except sqlite3.Error as exc:
                raise StoreError(f"bridge duplicate store {self.path}: {exc}") from None
            self._connection = connection
            return loaded

        def loaded(rows: dict[str, tuple[list[tuple[str, int]], int]]) -> None:
            total = 0
            for bridge, (entries, count) in rows.items():
                ids = self._ids.setdefault(bridge, OrderedDict())
                for message_id, recorded in entries:
                    ids[message_id] = recorded
                self._complete[bridge] = len(ids) >= count
                total += count
            self.opened = True
            self.log.info("bridge duplicate store {path} opened with {count} ids ({cached} in memory)",
                          path=self.path, count=total, cached=sum(len(v) for v in self._ids.values()))

        return self._run(load).addCallback(loaded)

    def close(self) -> Deferred[None]:
        """Close the database and the worker thread."""
        connection, self._connection = self._connection, None
        self.opened = False

        def shut() -> None:
            if connection is not None:
                connection.close()

        d = self._run(shut) if connection is not None else succeed(None)

        def stop_pool(_: object) -> None:
            pool, self._pool = self._pool, None
            if pool is not None:
                self._executor = None
                pool.stop()

        return d.addCallback(stop_pool)

    # -- use -------------------------------------------------------------------

    def contains(self, bridge: str, message_id: str) -> bool:
        """Whether memory knows ``message_id`` as delivered by ``bridge`` within its
        window (False may still be in SQLite: :meth:`known` asks it too)."""
        ids = self._ids.get(bridge)
        if not ids:
            return False
        recorded = ids.get(message_id)
        if recorded is None:
            return False
        return recorded >= self.now_ms() - self._windows.get(bridge, 0)

    def known(self, bridge: str, message_ids: list[str]) -> Deferred[set[str]]:
        """Which of ``message_ids`` ``bridge`` delivered within its window: from
        memory, and from SQLite for the ids memory no longer holds."""
        found = {message_id for message_id in message_ids if self.contains(bridge, message_id)}
        ids = self._ids.get(bridge)
        if ids is not None:
            for message_id in found:
                ids.move_to_end(message_id)  # recently used: evicted last
        misses = [message_id for message_id in message_ids if message_id not in found]
        if not misses or self._complete.get(bridge, True):
            return succeed(found)
        since = self.now_ms() - self._windows.get(bridge, 0)

        def look_up() -> list[tuple[str, int]]:
            connection = self._connection
            if connection is None:
                raise StoreError(f"bridge duplicate store {self.path} is closed")
            rows: list[tuple[str, int]] = []
            try:
                for start in range(0, len(misses), 500):
                    chunk = misses[start:start + 500]
                    marks = ",".join("?" * len(chunk))
                    rows.extend(connection.execute(
                        f"SELECT message_id, recorded FROM bridge_delivered WHERE bridge = ? AND recorded >= ?"
                        f" AND message_id IN ({marks})", (bridge, since, *chunk)).fetchall())
            except sqlite3.Error as exc:
                raise StoreError(f"bridge duplicate store {self.path}: {exc}") from None
            return rows

        def add(rows: list[tuple[str, int]]) -> set[str]:
            for message_id, recorded in rows:
                found.add(str(message_id))
                self._remember(bridge, str(message_id), int(recorded))
            return found

        result: Deferred[set[str]] = self._run(look_up).addCallback(add)
        return result

    def _remember(self, bridge: str, message_id: str, recorded: int) -> None:
        ids = self._ids.setdefault(bridge, OrderedDict())
        ids.pop(message_id, None)
        ids[message_id] = recorded
        over = sum(len(v) for v in self._ids.values()) - self.cache_size
        while over > 0:
            largest = max(self._ids, key=lambda name: len(self._ids[name]))
            self._ids[largest].popitem(last=False)
            self._complete[largest] = False
            self._evictions[largest] = self._evictions.get(largest, 0) + 1
            over -= 1

    def record(self, bridge: str, message_ids: list[str]) -> Deferred[None]:
        """Remember ``message_ids`` as delivered; fires once they are committed."""
        if not message_ids:
            return succeed(None)
        now = self.now_ms()
        for message_id in message_ids:
            self._remember(bridge, message_id, now)
        rows = [(bridge, message_id, now) for message_id in message_ids]

        def write() -> None:
            connection = self._connection
            if connection is None:
                raise StoreError(f"bridge duplicate store {self.path} is closed")
            try:
                connection.execute("BEGIN")
                connection.executemany(
                    "INSERT OR REPLACE INTO bridge_delivered (bridge, message_id, recorded) VALUES (?, ?, ?)", rows
                )
                connection.execute("COMMIT")
            except sqlite3.Error as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise StoreError(f"bridge duplicate store {self.path}: {exc}") from None

        result: Deferred[None] = self._run(write)
        return result

    def purge(self) -> Deferred[int]:
        """Forget ids older than their bridge's window (memory and disk)."""
        now = self.now_ms()
        limits = {bridge: now - window for bridge, window in self._windows.items()}
        dropped = 0
        for bridge, limit in limits.items():
            ids = self._ids.get(bridge)
            if not ids:
                continue
            expired = [message_id for message_id, recorded in ids.items() if recorded < limit]
            for message_id in expired:
                del ids[message_id]
            dropped += len(expired)
        # Memory's ids were all written before the count below runs (one worker thread, in order),
        # so as many on disk as memory held here, with no eviction since, means memory holds them all.
        incomplete = {bridge: (len(self._ids.get(bridge, ())), self._evictions.get(bridge, 0))
                      for bridge in limits if not self._complete.get(bridge, True)}

        def delete() -> dict[str, int]:
            connection = self._connection
            if connection is None:
                return {}
            started = time.monotonic()
            for bridge, limit in limits.items():
                connection.execute("DELETE FROM bridge_delivered WHERE bridge = ? AND recorded < ?", (bridge, limit))
            totals = {bridge: int(connection.execute("SELECT COUNT(*) FROM bridge_delivered WHERE bridge = ?",
                                                     (bridge,)).fetchone()[0]) for bridge in incomplete}
            self.log.debug("purged bridge ids in {ms:.1f} ms", ms=(time.monotonic() - started) * 1000)
            return totals

        def settled(totals: dict[str, int]) -> int:
            for bridge, total in totals.items():  # memory holds them all again: no more SQLite lookups
                held, evictions = incomplete[bridge]
                if held >= total and self._evictions.get(bridge, 0) == evictions:
                    self._complete[bridge] = True
            return dropped

        result: Deferred[int] = self._run(delete).addCallback(settled)
        return result

    def count(self, bridge: str) -> int:
        """How many ids ``bridge`` has in memory (tests, status)."""
        return len(self._ids.get(bridge, ()))
