"""Scheduled delivery (ActiveMQ's): a SEND whose message reaches its destination later, or again.

A message with ``AMQ_SCHEDULED_DELAY`` (ms before the first delivery), ``AMQ_SCHEDULED_PERIOD``
(ms between deliveries) and ``AMQ_SCHEDULED_REPEAT`` (deliveries after the first) is not
enqueued: the :class:`Scheduler` records it as a *job* and sends an *occurrence* of it to its
destination when each delivery is due.  An occurrence is the message without those properties
and with ``scheduledJobId`` (ActiveMQ's name); the first keeps the message id, the n-th repeat
gets ``<id>:<n>``.  ``AMQ_SCHEDULED_CRON`` is refused (an ERROR that says so), as are negative
or unreadable values, values past ActiveMQ's (:data:`LONGEST_MS`, :data:`MOST_REPEATS`), a schedule whose last
delivery would be due past :data:`LONGEST_MS` ms since 1970, and a repeat without a period.

Where jobs live: with ``persistence = "sqlite"``, in ``schedule.sqlite`` beside the message store
(:class:`SqliteSchedule`): the RECEIPT of a scheduled SEND comes once the job is on disk, jobs
survive a restart and are due on time after it; memory holds no job and no body, only the time
of the next one (one timer) and, while a window of due jobs is delivered, that window
(:data:`WINDOW`).  With ``persistence = "memory"``, in memory (:class:`MemorySchedule`).

Guarantee: an occurrence is delivered at least once.  A job advances (is deleted, or moves to
its next time) after the broker stored the occurrence; a crash between the two delivers that
occurrence again after the restart (the same message id).  An occurrence the destination
refuses for now (FAIL policy and full, the store failing) is tried again after
:data:`RETRY_MS`; one whose destination cannot exist (a temporary one that is gone) is dropped
with a warning.
"""

from __future__ import annotations

import heapq
import itertools
import os
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from gateway.broker.store.sqlite_records import decode_message, encode_message
from gateway.broker.store.sqlite_store import disk_free
from gateway.deferreds import gather
from gateway.errors import DestinationError, DestinationFull, LimitReached, MessageRefused, StoreError
from gateway.message.destinations import composite_parts
from gateway.message.model import Message

DELAY = "AMQ_SCHEDULED_DELAY"
PERIOD = "AMQ_SCHEDULED_PERIOD"
REPEAT = "AMQ_SCHEDULED_REPEAT"
CRON = "AMQ_SCHEDULED_CRON"
SCHEDULING = frozenset((DELAY, PERIOD, REPEAT, CRON))
JOB_ID = "scheduledJobId"
"""The property an occurrence carries: the id of its job."""

SCHEDULE_DATABASE = "schedule.sqlite"
"""The file of the jobs, under data_dir."""

WINDOW = 1000
"""Due jobs read and delivered at a time."""
RETRY_MS = 1000
"""When an occurrence the destination refused for now is tried again."""

Executor = Callable[[Callable[[], Any]], Deferred[Any]]


def is_scheduled(message: Message) -> bool:
    """Whether ``message`` carries a scheduling property (cheap: the hot path asks)."""
    properties = message.properties
    return bool(properties) and not SCHEDULING.isdisjoint(properties)


LONGEST_MS = 2**63 - 1
"""The largest delay or period (a Java long of ms, as ActiveMQ reads them) and the latest due time a job may
reach (epoch ms in a 64-bit SQLite integer)."""
MOST_REPEATS = 2**31 - 1
"""The largest repeat count (a Java int, as ActiveMQ reads it)."""


def _number(message: Message, name: str) -> int:
    value = message.properties.get(name)
    if value is None:
        return 0
    unit = "deliveries" if name == REPEAT else "ms"
    text = str(value).strip()
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):  # (int() also reads "1_000" and other scripts' digits)
        raise MessageRefused(f"{name} must be a whole number of {unit}, not {value!r}")
    number = int(text)
    if number < 0:
        raise MessageRefused(f"{name} must not be negative (got {number})")
    most = MOST_REPEATS if name == REPEAT else LONGEST_MS
    if number > most:
        raise MessageRefused(f"{name} must be at most {most} {unit} (got {text})")
    return number


@dataclass(frozen=True, slots=True)
class Job:
    """A scheduled message and when its next occurrence is due.

    :ivar due: epoch ms of the next occurrence.
    :ivar occurrence: 0 for the first delivery, n for the n-th repeat.
    :ivar repeats_left: occurrences after the next one.
    """

    job_id: str
    due: int
    period: int
    repeats_left: int
    occurrence: int
    message: Message

    def next(self) -> Job | None:
        """The job after its next occurrence is delivered; None when it was the last."""
        if self.repeats_left <= 0 or self.due + self.period > LONGEST_MS:
            return None  # (a job kept before its schedule was checked at SEND: no due time past a 64-bit one)
        return replace(self, due=self.due + self.period, repeats_left=self.repeats_left - 1,
                       occurrence=self.occurrence + 1)

    def occurrence_message(self) -> Message:
        """What goes to the destination now."""
        copy = self.message.copy()
        copy.properties = {k: v for k, v in copy.properties.items() if k not in SCHEDULING}
        copy.properties[JOB_ID] = self.job_id
        if self.occurrence:
            copy.message_id = f"{self.message.message_id}:{self.occurrence}"
        return copy


def schedule_numbers(message: Message) -> tuple[int, int, int]:
    """``(delay ms, period ms, repeats)`` of a scheduled ``message`` (0 for what it lacks);
    MessageRefused for a negative or unreadable value, or a repeat without a period."""
    delay, period, repeat = _number(message, DELAY), _number(message, PERIOD), _number(message, REPEAT)
    if repeat and not period:
        raise MessageRefused(f"{REPEAT}:{repeat} needs an {PERIOD} above 0 (ms between deliveries)")
    return delay, period, repeat


def job_of(message: Message, now_ms: int) -> Job:
    """The job a scheduled ``message`` makes (MessageRefused for what cannot be scheduled)."""
    if CRON in message.properties:
        raise MessageRefused(f"{CRON} is not supported (use {DELAY}, {PERIOD} and {REPEAT})")
    delay, period, repeat = schedule_numbers(message)
    if now_ms + delay + period * repeat > LONGEST_MS:  # (its due times are stored as 64-bit integers)
        raise MessageRefused(f"the last delivery of {DELAY}:{delay}, {PERIOD}:{period}, {REPEAT}:{repeat} "
                             f"would be due after {LONGEST_MS} ms since 1970")
    return Job(f"ID:job-{uuid.uuid4().hex}", now_ms + delay, period, repeat, 0, message)


class ScheduleStore(Protocol):
    """Where jobs wait."""

    def open(self) -> Deferred[tuple[int, int | None, int]]:
        """(jobs waiting, when the first is due or None, their :func:`job_size` in all)."""

    def add(self, jobs: list[Job]) -> Deferred[None]:
        """Record ``jobs``; fires once they are kept."""

    def due(self, now_ms: int, limit: int) -> Deferred[list[Job]]:
        """At most ``limit`` jobs due by ``now_ms``, the earliest first."""

    def advance(self, done: list[Job], later: list[Job]) -> Deferred[int | None]:
        """``done`` were delivered (each moves to its next time or goes); ``later`` move to the
        ``due`` they carry; fires with when the first job is due now (None: none waits)."""

    def close(self) -> Deferred[None]: ...


class MemorySchedule:
    """Jobs in memory (``persistence = "memory"``)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Job]] = []
        self._seq = itertools.count()

    def open(self) -> Deferred[tuple[int, int | None, int]]:
        return succeed((len(self._heap), self._first(), sum(job_size(job.message) for _, _, job in self._heap)))

    def _first(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def add(self, jobs: list[Job]) -> Deferred[None]:
        for job in jobs:
            heapq.heappush(self._heap, (job.due, next(self._seq), job))
        return succeed(None)

    def due(self, now_ms: int, limit: int) -> Deferred[list[Job]]:
        taken: list[Job] = []
        while self._heap and self._heap[0][0] <= now_ms and len(taken) < limit:
            taken.append(heapq.heappop(self._heap)[2])
        return succeed(taken)

    def advance(self, done: list[Job], later: list[Job]) -> Deferred[int | None]:
        self.add([job for job in (j.next() for j in done) if job is not None] + later)
        return succeed(self._first())

    def close(self) -> Deferred[None]:
        return succeed(None)


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS scheduled (job TEXT PRIMARY KEY, due INTEGER NOT NULL, period INTEGER NOT NULL,"
    " repeats_left INTEGER NOT NULL, occurrence INTEGER NOT NULL, record BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS scheduled_due ON scheduled (due)",
)


class SqliteSchedule:
    """Jobs in an SQLite file of their own, read and written on one worker thread.

    Jobs taken for delivery stay in the file until :meth:`advance`: a crash redelivers them."""

    def __init__(self, path: str, reactor: Any, *, synchronous: str = "FULL", executor: Executor | None = None,
                 min_free: int = 0, free_space: Callable[[str], int] = disk_free) -> None:
        self.path = path
        self.reactor = reactor
        self.synchronous = synchronous
        self.min_free = min_free
        """Disk bytes a write of jobs must leave free (``[broker] min_free``, as the message store keeps)."""
        self._free_space = free_space
        self._executor = executor
        self._pool: ThreadPool | None = None
        self._db: sqlite3.Connection | None = None
        self._adding: list[tuple[list[tuple[Any, ...]], Deferred[None]]] = []
        """Jobs handed to :meth:`add` while a write of jobs is under way: the next write takes them all."""
        self._writing = False

    def _run(self, function: Callable[[sqlite3.Connection], Any]) -> Deferred[Any]:
        if self._executor is None:
            from twisted.internet.threads import deferToThreadPool

            pool = self._pool = ThreadPool(1, 1, name="jmsgateway-schedule")
            pool.start()
            self._executor = lambda f: deferToThreadPool(self.reactor, pool, f)
        return self._executor(lambda: function(self._connection()))

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            for statement in _SCHEMA:
                db.execute(statement)
            self._db = db
        return self._db

    def open(self) -> Deferred[tuple[int, int | None, int]]:
        def read(db: sqlite3.Connection) -> tuple[int, int | None, int]:
            count, first, size = db.execute(
                "SELECT COUNT(*), MIN(due), COALESCE(SUM(LENGTH(record)), 0) FROM scheduled").fetchone()
            return int(count), first, int(size)

        return self._run(read)

    def add(self, jobs: list[Job]) -> Deferred[None]:
        """Write ``jobs``; fires once they are committed.  The jobs added while a write of jobs is under way
        share the next transaction (one commit, one fsync, for a pipelined client's scheduled SENDs: each
        had its own, about 500 a second here, against tens of thousands of plain persistent SENDs)."""
        rows = [(job.job_id, job.due, job.period, job.repeats_left, job.occurrence, encode_message(job.message))
                for job in jobs]
        d: Deferred[None] = Deferred()
        self._adding.append((rows, d))
        if not self._writing:
            self._write_added()
        return d

    def _write_added(self) -> None:
        batch, self._adding = self._adding, []
        rows = [row for part, _ in batch for row in part]
        self._writing = True

        def write(db: sqlite3.Connection) -> None:
            if self.min_free:
                needed = 2 * sum(len(row[5]) + len(row[0]) + 64 for row in rows)  # (the WAL, then the database)
                room = self._free_space(os.path.dirname(os.path.abspath(self.path))) - self.min_free
                if room < needed:
                    raise StoreError(f"scheduled message store {self.path} is full: the disk keeps {self.min_free} "
                                     f"bytes free ([broker] min_free) and these jobs need {needed} more than the "
                                     f"{max(0, room)} left; the SEND was refused")
            with db:
                db.execute("BEGIN")
                db.executemany("INSERT INTO scheduled VALUES (?, ?, ?, ?, ?, ?)", rows)

        def written(result: object) -> None:
            self._writing = False
            for _, d in batch:
                if isinstance(result, Failure):
                    d.errback(result)
                else:
                    d.callback(None)
            if self._adding:
                self._write_added()

        self._run(write).addBoth(written)

    def due(self, now_ms: int, limit: int) -> Deferred[list[Job]]:
        def read(db: sqlite3.Connection) -> list[Job]:
            rows = db.execute("SELECT job, due, period, repeats_left, occurrence, record FROM scheduled "
                              "WHERE due <= ? ORDER BY due LIMIT ?", (now_ms, limit)).fetchall()
            return [Job(job, due, period, left, occurrence, decode_message(record))
                    for job, due, period, left, occurrence, record in rows]

        return self._run(read)

    def advance(self, done: list[Job], later: list[Job]) -> Deferred[int | None]:
        moves = [(job.due, job.repeats_left, job.occurrence, job.job_id)
                 for job in [*(j.next() for j in done), *later] if job is not None]
        gone = [(job.job_id,) for job in done if job.repeats_left <= 0]

        def write(db: sqlite3.Connection) -> int | None:
            with db:
                db.execute("BEGIN")
                db.executemany("DELETE FROM scheduled WHERE job = ?", gone)
                db.executemany("UPDATE scheduled SET due = ?, repeats_left = ?, occurrence = ? WHERE job = ?", moves)
            first: int | None = db.execute("SELECT MIN(due) FROM scheduled").fetchone()[0]
            return first

        return self._run(write)

    def close(self) -> Deferred[None]:
        def shut(db: sqlite3.Connection) -> None:
            db.close()
            self._db = None

        d = self._run(shut) if self._db is not None else succeed(None)

        def stop_pool(result: object) -> object:
            if self._pool is not None:
                self._pool.stop()
                self._pool = None
                self._executor = None
            return result

        return d.addBoth(stop_pool)


def job_size(message: Message) -> int:
    """What a job takes against ``[broker] max_scheduled_size``: its message as the schedule stores it."""
    return len(encode_message(message))


def _parts(destination: str) -> list[str]:
    """The destinations a job's message goes to (a composite name's parts; itself when unreadable)."""
    try:
        return composite_parts(destination)
    except DestinationError:
        return [destination]


class Scheduler:
    """Holds scheduled messages until they are due and sends their occurrences then.

    :param deliver: sends one occurrence (the broker's ``send``: fires once it is stored).
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, store: ScheduleStore, deliver: Callable[[Message], Deferred[None]],
                 now_ms: Callable[[], int]) -> None:
        self.clock = clock
        self.store = store
        self.deliver = deliver
        self.now_ms = now_ms
        self.waiting = 0
        """Jobs waiting (each counts once, whatever its repeats)."""
        self.size = 0
        """The :func:`job_size` of the jobs waiting, in all."""
        self.max_size = 0
        """``[broker] max_scheduled_size``: bytes the jobs waiting may take (0: no cap)."""
        self.refused = 0
        """Scheduled SENDs refused by :attr:`max_size` since the start."""
        self.delivered = 0
        """Occurrences delivered since start."""
        self.on_waiting: Callable[[str, int], None] | None = None
        """Told ``(destination, 1)`` when a job for ``destination`` is kept and ``(destination, -1)`` when it is
        done: the broker keeps a queue that waits for a job (:mod:`gateway.broker.collection`)."""
        self._timer: IDelayedCall | None = None
        self._timer_due: int | None = None
        self._firing = False
        self._stopped = False

    def open(self) -> Deferred[None]:
        def opened(state: tuple[int, int | None, int]) -> None:
            self.waiting, first, self.size = state
            if self.waiting:
                self.log.info("{count} scheduled message(s) waiting, the first due {when}", count=self.waiting,
                              when="now" if first is not None and first <= self.now_ms() else f"at {first}")
            self._arm(first)

        return self.store.open().addCallback(opened)

    def schedule(self, message: Message, *, reserved: bool = False) -> Deferred[None]:
        """Record ``message`` as a job; fires once it is kept (MessageRefused for a bad schedule,
        DestinationFull past :attr:`max_size`).  ``reserved``: its room was taken by :meth:`reserve`."""
        size = job_size(message)
        try:
            job = job_of(message, self.now_ms())
        except MessageRefused as error:
            if reserved:
                self.size -= size
            return fail(error)
        if not reserved:
            try:
                self._admit(message.destination, size)
            except DestinationFull as error:
                return fail(error)
            self.size += size  # (counted at once: SENDs pipelined while the first is written are judged with it)

        def unkept(failure: Failure) -> Failure:
            self.size -= size
            return failure

        def kept(_: object) -> None:
            self.waiting += 1
            if self.on_waiting is not None:
                for destination in _parts(message.destination):  # (a composite destination's parts)
                    self.on_waiting(destination, 1)
            self._arm(job.due)

        return self.store.add([job]).addCallbacks(kept, unkept)

    def reserve(self, messages: list[Message]) -> int:
        """Take the room of ``messages`` (a COMMIT's scheduled SENDs) together, before anything of the batch
        is sent, so that no SEND of another connection takes it meanwhile; :class:`DestinationFull` when they
        do not fit.  Each is then scheduled with ``reserved=True``; :meth:`release` gives the room back when
        the batch fails before.  Returns the bytes taken."""
        size = sum(map(job_size, messages))
        if messages:
            self._admit(messages[0].destination, size)
        self.size += size
        return size

    def release(self, size: int) -> None:
        """Give back the room :meth:`reserve` took for a batch that failed before its jobs were scheduled."""
        self.size = max(0, self.size - size)

    def _admit(self, destination: str, size: int) -> None:
        if self.max_size and self.size + size > self.max_size:
            self.refused += 1
            raise DestinationFull(
                f"scheduled message for {destination} refused: the scheduled messages waiting take {self.size} "
                f"bytes and [broker] max_scheduled_size is {self.max_size}; nothing was stored")

    def _arm(self, due: int | None) -> None:
        if due is None or self._stopped:
            return
        if self._firing:
            return  # (the round under way arms the timer for the first job due when it is done)
        if self._timer is not None and self._timer.active():
            if self._timer_due is not None and self._timer_due <= due:
                return
            self._timer.cancel()
        self._timer_due = due
        self._timer = self.clock.callLater(max(0.0, (due - self.now_ms()) / 1000.0), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_due = None
        if self._firing or self._stopped:
            return
        self._firing = True
        now = self.now_ms()
        due: Deferred[list[Job]] = self.store.due(now, WINDOW)
        advanced: Deferred[int | None] = due.addCallback(self._deliver, now)
        advanced.addCallback(self._advanced).addErrback(self._failed)

    def _deliver(self, jobs: list[Job], now: int) -> Deferred[int | None]:
        done: list[Job] = []
        later: list[Job] = []

        def sent(_: object, job: Job) -> None:
            done.append(job)
            self.delivered += 1
            if job.repeats_left <= 0:
                self.waiting -= 1
                self._done(job)

        def refused(failure: Failure, job: Job) -> None:
            if failure.check(DestinationError) and not failure.check(LimitReached):  # (a limit: for now)
                self.log.warn("scheduled message {id} dropped: {why}", id=job.message.message_id,
                              why=failure.getErrorMessage())
                done.append(replace(job, repeats_left=0))
                self.waiting -= 1
                self._done(job)
            else:
                self.log.warn("scheduled message {id} refused for now ({why}): tried again in {ms} ms",
                              id=job.message.message_id, why=failure.getErrorMessage(), ms=RETRY_MS)
                later.append(replace(job, due=now + RETRY_MS))

        sends = []
        for job in jobs:
            d = self.deliver(job.occurrence_message())
            d.addCallbacks(sent, refused, callbackArgs=(job,), errbackArgs=(job,))
            sends.append(d)
        return gather(sends).addCallback(lambda _: self.store.advance(done, later))

    def _done(self, job: Job) -> None:
        """``job`` has no occurrence left: its destinations wait for it no more, its bytes are free."""
        self.size = max(0, self.size - job_size(job.message))
        if self.on_waiting is not None:
            for destination in _parts(job.message.destination):
                self.on_waiting(destination, -1)

    def _advanced(self, first: int | None) -> None:
        self._firing = False
        self._arm(first)  # (more than a window was due: the next window at once)

    def _failed(self, failure: Failure) -> None:
        self._firing = False
        self.log.failure("the schedule failed; trying again in {ms} ms", failure, ms=RETRY_MS)
        self._arm(self.now_ms() + RETRY_MS)

    def close(self) -> Deferred[None]:
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        return self.store.close()
