"""Group commit: one thread owns one SQLite connection and commits work in groups.

:class:`GroupCommitWriter` takes operations from the reactor thread
(:meth:`~GroupCommitWriter.submit`), runs them on its own thread in the
order they were issued, and wraps everything that piled up while the
previous commit was on disk in one transaction.  Each operation's Deferred
fires on the reactor thread (``reactor.callFromThread``) only after the
commit that covers it.  When a group fails (a full disk, say), it is rolled
back and its operations are retried one transaction each, so one bad write
fails alone and the others keep their outcome.

The writer knows transactions, threads and Deferreds; what the operations
write is :mod:`gateway.broker.store.sqlite_store`'s business.  Nothing here runs
SQLite on the reactor thread.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.errors import StoreError

Operation = Callable[[sqlite3.Connection], Any]
"""Work for the writer thread: gets the connection, returns a result or raises."""

Outcome = tuple[bool, Any]
"""(True, result) or (False, exception)."""


class NoRoom(Exception):
    """A write that would grow the database was refused: too little room left.

    :ivar needed: bytes the refused write was estimated to take.
    :ivar available: bytes it could have had.
    """

    def __init__(self, needed: int, available: int) -> None:
        super().__init__(f"{needed} bytes needed, {max(0, available)} available")
        self.needed = needed
        self.available = available


@dataclass(slots=True)
class _Work:
    run: Operation
    deferred: Deferred[Any]
    transactional: bool = True
    grows: int = 0


class TransactionJournal:
    """Undo for state kept beside the database: operations record how to
    undo their in-memory changes; the writer replays that on a rollback."""

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def record(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def committed(self) -> None:
        self._undo.clear()

    def rolled_back(self) -> None:
        undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()


@dataclass(slots=True)
class WriterStats:
    """What the writer did, for tests, benchmarks and metrics.

    :ivar commits: transactions committed.
    :ivar operations: operations that succeeded inside those transactions.
    :ivar failures: operations that failed (each after a retry on its own).
    :ivar largest_group: most operations one commit covered.
    """

    commits: int = 0
    operations: int = 0
    failures: int = 0
    largest_group: int = 0


class GroupCommitWriter:
    """Runs operations on one connection, on one thread, in issue order.

    :param reactor: provides ``callFromThread``; results come back through it.
    :param connect: opens the connection (called on the writer thread).
    :param describe: turns an exception from SQLite into the error callers
        see (a :class:`StoreError` naming the file).
    :param max_group: at most this many operations share one commit.
    :param room: how many bytes the database may still grow by (asked on
        the writer thread before a group that grows it); writes past that
        fail with :class:`NoRoom` while the others go on.  None: no limit.
    :param journal: told when the operations it saw were committed or
        rolled back (state the operations keep beside the database).
    """

    log = Logger()

    def __init__(
        self,
        reactor: Any,
        connect: Callable[[], sqlite3.Connection],
        describe: Callable[[BaseException], BaseException],
        *,
        name: str = "jmsgateway-store-writer",
        max_group: int = 2000,
        room: Callable[[sqlite3.Connection], int] | None = None,
        journal: TransactionJournal | None = None,
    ) -> None:
        self.reactor = reactor
        self._connect = connect
        self._describe = describe
        self.name = name
        self.max_group = max(1, max_group)
        self._room = room
        self._journal = journal or TransactionJournal()
        self.stats = WriterStats()
        self._pending: deque[_Work] = deque()
        self._wakeup = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._stopped: Deferred[None] | None = None
        self._connection: sqlite3.Connection | None = None

    @property
    def running(self) -> bool:
        """Whether operations are accepted."""
        return self._accepting

    @property
    def alive(self) -> bool:
        """Whether the thread was started and has not reported its end yet."""
        return self._thread is not None

    # -- reactor thread ----------------------------------------------------

    def start(self) -> Deferred[None]:
        """Start the thread and open the connection on it."""
        if self._thread is not None:
            return fail(StoreError(f"{self.name} was already started"))
        started: Deferred[None] = Deferred()
        self._accepting = True
        self._thread = threading.Thread(target=self._main, args=(started,), name=self.name, daemon=True)
        self._thread.start()
        return started

    def submit(self, run: Operation, grows: int = 0) -> Deferred[Any]:
        """Run ``run`` inside a (shared) transaction; fires after its commit.

        ``grows``: about how many bytes it adds to the database (0 for
        writes that do not add: deletes, updates).
        """
        return self._enqueue(run, True, grows)

    def call(self, run: Operation) -> Deferred[Any]:
        """Run ``run`` alone, outside any group (it manages its own transaction)."""
        return self._enqueue(run, False)

    def stop(self) -> Deferred[None]:
        """Finish the operations already submitted, close the connection, end the thread."""
        if self._thread is None:
            return succeed(None)
        if self._stopped is None:
            self._stopped = Deferred()
            with self._wakeup:
                self._accepting = False
                self._wakeup.notify()
        return self._stopped

    def _enqueue(self, run: Operation, transactional: bool, grows: int = 0) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        with self._wakeup:
            if not self._accepting:
                return fail(StoreError(f"{self.name}: the message store is closed"))
            self._pending.append(_Work(run, d, transactional, grows))
            if len(self._pending) == 1:
                self._wakeup.notify()
        return d

    def _fire(self, works: list[_Work], outcomes: list[Outcome]) -> None:
        for work, (ok, value) in zip(works, outcomes, strict=True):
            if ok:
                work.deferred.callback(value)
            else:
                work.deferred.errback(Failure(value))

    def _finished(self) -> None:
        self._thread = None
        if self._stopped is not None:
            self._stopped.callback(None)

    # -- writer thread -----------------------------------------------------

    def _main(self, started: Deferred[None]) -> None:
        try:
            self._connection = self._connect()
        except Exception as error:  # reported to the caller of start()
            with self._wakeup:
                self._accepting = False
                abandoned = list(self._pending)
                self._pending.clear()
            reason = self._describe(error)
            self.reactor.callFromThread(started.errback, Failure(reason))
            self.reactor.callFromThread(self._fire, abandoned, [(False, reason)] * len(abandoned))
            self.reactor.callFromThread(self._finished)
            return
        self.reactor.callFromThread(started.callback, None)
        try:
            while True:
                works = self._take()
                if not works:
                    break
                outcomes = self._run_checked(works) if works[0].transactional else [self._run_alone(works[0])]
                self.reactor.callFromThread(self._fire, works, outcomes)
        finally:
            try:
                self._connection.close()
            except sqlite3.Error as error:
                self.log.warn("closing the message store failed: {error}", error=error)
            self._connection = None
            self.reactor.callFromThread(self._finished)

    def _take(self) -> list[_Work]:
        """The next group: queued transactional operations, or one call; [] to end."""
        with self._wakeup:
            while not self._pending and self._accepting:
                self._wakeup.wait()
            pending = self._pending
            if not pending:
                return []
            first = pending.popleft()
            works = [first]
            if first.transactional:
                limit = self.max_group
                while pending and len(works) < limit and pending[0].transactional:
                    works.append(pending.popleft())
            return works

    def _run_alone(self, work: _Work) -> Outcome:
        connection = self._connection
        assert connection is not None
        try:
            result = work.run(connection)
        except Exception as error:  # handed to the caller's Deferred
            self._rollback(connection)
            self.stats.failures += 1
            return (False, self._describe(error))
        self._journal.committed()
        return (True, result)

    def _run_checked(self, works: list[_Work]) -> list[Outcome]:
        """Refuse the growing writes that do not fit, run the rest as one group."""
        if self._room is None or not any(work.grows for work in works):
            return self._run_group(works)
        assert self._connection is not None
        failure: BaseException | None = None
        try:
            budget = self._room(self._connection)
        except Exception as error:  # the check itself failed: report it on the growing writes
            budget, failure = 0, self._describe(error)
        refused: dict[int, Outcome] = {}
        for index, work in enumerate(works):
            if not work.grows:
                continue
            if work.grows <= budget:
                budget -= work.grows
            else:
                refused[index] = (False, failure or self._describe(NoRoom(work.grows, budget)))
        if not refused:
            return self._run_group(works)
        self.stats.failures += len(refused)
        admitted = [work for index, work in enumerate(works) if index not in refused]
        outcomes = iter(self._run_group(admitted) if admitted else [])
        return [refused[index] if index in refused else next(outcomes) for index in range(len(works))]

    def _run_group(self, works: list[_Work]) -> list[Outcome]:
        connection = self._connection
        assert connection is not None
        try:
            connection.execute("BEGIN IMMEDIATE")
            results = [work.run(connection) for work in works]
            connection.execute("COMMIT")
        except Exception as error:  # retried one by one, then reported
            self._rollback(connection)
            if len(works) == 1:
                self.stats.failures += 1
                return [(False, self._describe(error))]
            self.log.info("a group of {count} store writes failed ({error}); retrying each alone",
                          count=len(works), error=error)
            return [self._run_group([work])[0] for work in works]
        self._journal.committed()
        stats = self.stats
        stats.commits += 1
        stats.operations += len(works)
        if len(works) > stats.largest_group:
            stats.largest_group = len(works)
        return [(True, result) for result in results]

    def _rollback(self, connection: sqlite3.Connection) -> None:
        self._journal.rolled_back()
        if connection.in_transaction:
            try:
                connection.execute("ROLLBACK")
            except sqlite3.Error as error:
                self.log.warn("rollback of the message store failed: {error}", error=error)
