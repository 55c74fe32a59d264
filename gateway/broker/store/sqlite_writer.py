"""Group commit: one thread owns one SQLite connection and commits work in groups.

:class:`GroupCommitWriter` takes operations from the reactor thread
(:meth:`~GroupCommitWriter.submit`), runs them on its own thread in the
order they were issued, and wraps everything that piled up while the
previous commit was on disk in one transaction.  Each operation's Deferred
fires on the reactor thread (``reactor.callFromThread``) only after the
commit that covers it.  When a group fails (a full disk, say), it is rolled
back and its operations are retried one transaction each, so one bad write
fails alone and the others keep their outcome.

Operations of one kind issued one after the other (:meth:`~GroupCommitWriter.append`:
the persistent SENDs of a reactor turn) are merged into one while they wait: one
operation, one call, one result for all of them, and each part still reports on its
own (``done(None)`` after the commit, ``done(error)`` when it failed: a merged
operation that fails is retried part by part, so one bad part fails alone).

Producers that each wait for their commit (a RECEIPT per SEND) arrive spread out, so the
writer lingers (``linger``, issue 39): when it wakes with fewer operations queued than its
recent groups held, it waits a bounded time for the rest, never for a lone producer.

The writer knows transactions, threads and Deferreds; what the operations
write is :mod:`gateway.broker.store.sqlite_store`'s business.  Nothing here runs
SQLite on the reactor thread.
"""

from __future__ import annotations

import sqlite3
import threading
import time
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

PartsOperation = Callable[[sqlite3.Connection, list[Any]], None]
"""Work for the writer thread that takes the parts merged into one operation (:meth:`GroupCommitWriter.append`)."""

Done = Callable[[BaseException | None], None]
"""How one part of a merged operation reports: ``done(None)`` once committed, ``done(error)`` when it failed."""


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
    run: Any  # an Operation; a PartsOperation when ``parts`` is set
    deferred: Deferred[Any] | None
    transactional: bool = True
    grows: int = 0
    parts: list[Any] | None = None
    """The parts of a merged operation (:meth:`GroupCommitWriter.append`), else None."""
    each: list[int] | None = None
    """What each part grows the database by."""
    done: list[Done] | None = None
    """How each part reports."""
    errors: list[BaseException | None] | None = None
    """Each part's error once one failed (None: none failed); a failed part is not run again."""

    def live(self) -> list[Any]:
        """The parts not failed yet (of a merged operation)."""
        parts = self.parts
        assert parts is not None
        errors = self.errors
        return parts if errors is None else [part for part, error in zip(parts, errors, strict=True) if error is None]

    def fail_part(self, index: int, error: BaseException) -> None:
        errors = self.errors
        if errors is None:
            assert self.parts is not None
            errors = self.errors = [None] * len(self.parts)
        errors[index] = error

    def size(self) -> int:
        """Operations it stands for (its parts not failed yet, when merged)."""
        if self.parts is None:
            return 1
        return len(self.parts) if self.errors is None else self.errors.count(None)


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
    :ivar lingers: groups the writer held back for more work (:class:`GroupCommitWriter`'s ``linger``).
    """

    commits: int = 0
    operations: int = 0
    failures: int = 0
    largest_group: int = 0
    lingers: int = 0


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
    :param linger: seconds the writer may hold a group back for more work
        (0: never).  It does so only when the group is smaller than the
        largest of the last :attr:`HISTORY` groups, so a lone producer that
        waits for each commit is never held back; it commits as soon as that
        many operations are queued (PostgreSQL's ``commit_delay`` with
        ``commit_siblings``), and only while it expects at most
        :attr:`SIBLINGS` of them.
    """

    HISTORY = 8
    """How many recent groups' sizes say how many operations to expect."""

    SIBLINGS = 64
    """The writer holds a group back only while it expects at most this many operations: producers that
    each wait for their own commit.  Larger groups come from producers that pipeline their writes (they
    fill the next group while the commit is on disk, and waiting would only add to their latency)."""

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
        linger: float = 0.0,
    ) -> None:
        self.reactor = reactor
        self._connect = connect
        self._describe = describe
        self.name = name
        self.max_group = max(1, max_group)
        self._room = room
        self._journal = journal or TransactionJournal()
        self.stats = WriterStats()
        self.linger = max(0.0, linger)
        self._recent: deque[int] = deque(maxlen=self.HISTORY)
        """(the sizes of the last groups committed: the writer thread's own)"""
        self._queued = 0
        """Operations (parts) waiting in ``_pending``."""
        self._lingering = 0
        """While the writer holds a group back: how many queued operations wake it (0: not waiting)."""
        self._skip = 0
        """Groups the writer commits at once after a wait to which nothing came (its own)."""
        self._backoff = 1
        """How many groups the next wait to which nothing comes makes it skip (doubles each time)."""
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

    def append(self, run: PartsOperation, part: Any, grows: int, done: Done) -> None:
        """Add ``part`` to the operation of ``run`` waiting last (or start one): the parts appended
        while the writer is busy run as one operation, ``run(connection, parts)``, inside a shared
        transaction, in the order appended.  ``done(None)`` is called for each part after the commit
        that covers it, ``done(error)`` when it failed: a failing operation is retried part by part,
        each alone, so one bad part fails alone; a part that would grow the database past its room
        (``grows`` bytes) is refused alone.  ``run`` must be the same object for every part of one
        kind (a bound method kept by the caller).  Called for a closed writer, ``done`` gets the
        error at once."""
        with self._wakeup:
            if self._accepting:
                pending = self._pending
                last = pending[-1] if pending else None
                if last is not None and last.run is run and last.parts is not None \
                        and len(last.parts) < self.max_group:
                    last.parts.append(part)
                    last.each.append(grows)  # type: ignore[union-attr]
                    last.done.append(done)  # type: ignore[union-attr]
                    last.grows += grows
                    self._queued += 1
                    if self._lingering and self._queued >= self._lingering:
                        self._wakeup.notify()
                    return
                pending.append(_Work(run, None, True, grows, [part], [grows], [done]))
                self._queued += 1
                if len(pending) == 1 or (self._lingering and self._queued >= self._lingering):
                    self._wakeup.notify()
                return
        done(StoreError(f"{self.name}: the message store is closed"))

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
            self._queued += 1
            if len(self._pending) == 1 or (self._lingering and self._queued >= self._lingering):
                self._wakeup.notify()
        return d

    def _fire(self, works: list[_Work], outcomes: list[Outcome]) -> None:
        for work, (ok, value) in zip(works, outcomes, strict=True):
            deferred = work.deferred
            if deferred is None:
                self._report_parts(work, None if ok else value)
            elif ok:
                deferred.callback(value)
            else:
                deferred.errback(Failure(value))

    def _report_parts(self, work: _Work, error: BaseException | None) -> None:
        """Each part of a merged operation: ``done(None)`` or ``done(its error)`` (``error``: all failed)."""
        assert work.done is not None
        errors = work.errors
        for index, done in enumerate(work.done):
            try:
                done(error if error is not None else None if errors is None else errors[index])
            except Exception:  # (one caller's bug must not keep the others' reports from them)
                self.log.failure("a store write's report failed")

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
                if works[0].transactional:
                    outcomes = self._run_checked(works)
                    self._recent.append(sum(work.size() for work in works))
                else:
                    outcomes = [self._run_alone(works[0])]
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
            pending = self._pending
            while not pending and self._accepting:
                self._wakeup.wait()
            if not pending:
                return []
            if self.linger and pending[0].transactional:
                self._linger()
            first = pending.popleft()
            works = [first]
            taken = first.size()
            if first.transactional:
                limit = self.max_group
                while pending and taken < limit and pending[0].transactional:
                    work = pending.popleft()
                    works.append(work)
                    taken += work.size()
            self._queued -= sum(len(work.parts) if work.parts is not None else 1 for work in works)
            return works

    def _linger(self) -> None:
        """Hold the group back (lock held) while fewer operations are queued than the recent groups
        had, at most :attr:`linger` seconds: producers that each wait for their commit then share it.
        The reactor wakes the writer only once that many are queued (not for each: the GIL).  A wait
        to which nothing came (one producer that pipelines and now waits for its receipt) makes the
        writer commit the next groups at once: 1, 2, 4, ... up to 1024 of them, again 1 after a wait
        that paid."""
        expected = max(self._recent, default=1)
        queued = self._queued
        if queued >= expected or expected > self.SIBLINGS or not self._accepting:
            return
        if self._skip:
            self._skip -= 1
            return
        self.stats.lingers += 1
        deadline = time.monotonic() + self.linger
        self._lingering = expected
        try:
            while self._queued < expected and self._accepting:
                left = deadline - time.monotonic()
                if left <= 0 or not self._wakeup.wait(left):
                    break
        finally:
            self._lingering = 0
        if self._queued == queued:
            self._skip, self._backoff = self._backoff, min(2 * self._backoff, 1024)
        else:
            self._backoff = 1

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
            elif work.each is not None:  # (a merged operation: its parts that fit go on)
                for part, grows in enumerate(work.each):
                    if grows <= budget:
                        budget -= grows
                    else:
                        work.fail_part(part, failure or self._describe(NoRoom(grows, budget)))
                        self.stats.failures += 1
                if not work.size():
                    refused[index] = (True, None)  # (its parts report their own errors)
            else:
                refused[index] = (False, failure or self._describe(NoRoom(work.grows, budget)))
        if not refused:
            return self._run_group(works)
        self.stats.failures += sum(1 for index in refused if works[index].parts is None)
        admitted = [work for index, work in enumerate(works) if index not in refused]
        outcomes = iter(self._run_group(admitted) if admitted else [])
        return [refused[index] if index in refused else next(outcomes) for index in range(len(works))]

    def _run_group(self, works: list[_Work]) -> list[Outcome]:
        connection = self._connection
        assert connection is not None
        try:
            connection.execute("BEGIN IMMEDIATE")
            results = [work.run(connection) if work.parts is None else work.run(connection, work.live())
                       for work in works]
            connection.execute("COMMIT")
        except Exception as error:  # retried one by one, then reported
            self._rollback(connection)
            if len(works) == 1:
                work = works[0]
                if work.parts is None:
                    self.stats.failures += 1
                    return [(False, self._describe(error))]
                if work.size() > 1:
                    return [self._run_parts_alone(work)]
                for index, failed in enumerate(work.errors or [None] * len(work.parts)):
                    if failed is None:
                        work.fail_part(index, self._describe(error))
                self.stats.failures += 1
                return [(True, None)]
            self.log.info("a group of {count} store writes failed ({error}); retrying each alone",
                          count=len(works), error=error)
            return [self._run_group([work])[0] for work in works]
        self._journal.committed()
        stats = self.stats
        stats.commits += 1
        operations = sum(work.size() for work in works)
        stats.operations += operations
        if operations > stats.largest_group:
            stats.largest_group = operations
        return [(True, result) for result in results]

    def _run_parts_alone(self, work: _Work) -> Outcome:
        """A merged operation that failed: each of its parts in a transaction of its own."""
        assert work.parts is not None and work.each is not None
        self.log.info("a merged store write of {count} parts failed; retrying each part alone", count=work.size())
        for index, part in enumerate(work.parts):
            if work.errors is not None and work.errors[index] is not None:
                continue
            alone = _Work(work.run, None, True, work.each[index], [part], [work.each[index]], [])
            self._run_group([alone])
            if alone.errors is not None and alone.errors[0] is not None:
                work.fail_part(index, alone.errors[0])
        return (True, None)

    def _rollback(self, connection: sqlite3.Connection) -> None:
        self._journal.rolled_back()
        if connection.in_transaction:
            try:
                connection.execute("ROLLBACK")
            except sqlite3.Error as error:
                self.log.warn("rollback of the message store failed: {error}", error=error)
