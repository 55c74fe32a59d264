"""The page file: where queues put the messages that do not fit in memory.

:class:`PageFile` is one SQLite file under ``data_dir`` (``synchronous=OFF``,
its rollback journal in memory): it only ever holds what memory could not, so
it is deleted at start-up and at shutdown; the persistent messages it held are in the message
store too and come back from there after a restart.  Each queue gets a
:class:`QueuePage`: its paged messages in dispatch order (priority, then
arrival), read back from the head in chunks, searched in chunks for a
selector's match (as ActiveMQ's store cursors do), or taken by id or by
expiry.  Rows are keyed by the queue's own sequence numbers, so a paged
message keeps its place in the queue's order.

Operations run on the reactor thread: with no fsync they write to the
operating system's cache (a slow disk slows the broker down rather than
growing its memory).  Each write is its own transaction, so a write that fails
(a full disk) is rolled back whole: the file stays sound and the messages it
would have paged out are given back to their queue (:class:`PageWriteFailed`);
the file is then not written again for :data:`RETRY_SECONDS`.  This module
knows nothing of consumers or policies.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

from twisted.logger import Logger

from gateway.broker.limits import MESSAGE_OVERHEAD
from gateway.broker.sqlite_records import decode_message, encode_message
from gateway.broker.store import BacklogRow, StoredBacklog
from gateway.message.model import Message

Entry = tuple[int, int, Message, int]
"""A queue entry: (-priority, queue sequence, message, counted size)."""

Key = tuple[int, int]

NotPaged = Callable[[list[Entry], BaseException], None]
"""Takes back the messages of a page-out that failed, with the error."""
ScanRow = tuple[int, int, int | None, int, int, bytes, BacklogRow | None]
"""A paged message met by a search: (rank, seq, page file row id, counted size, redelivery,
record, its stored row when it is still only in the message store)."""

CHUNK_ROWS = 500
"""Rows read at once when a selector searches the page."""
SEARCH_SLICE = 0.02
"""Seconds one search of the page may take before it stops (to go on in a later reactor
turn): a selector's match behind 100,000 others does not stall the reactor."""
SEARCH_CLOCK_EVERY = 32
"""A search looks at the clock once per this many messages."""
WRITE_ROWS = 64
"""Paged-out messages written to the file together ..."""
WRITE_BYTES = 256 * 1024
"""... or fewer when their records take this many bytes."""
RETRY_SECONDS = 1.0
"""After a failed write (or open), the page file is not tried again for this long:
queues keep their messages in memory meanwhile."""


class PageWriteFailed(Exception):
    """A page-out could not be written; the transaction was rolled back.

    :ivar entries: the messages that are therefore not paged out (the ones
        this write took and those waiting to be written with it), for their
        queue to keep in memory.
    """

    def __init__(self, error: BaseException, entries: list[Entry]) -> None:
        super().__init__(str(error))
        self.error = error
        self.entries = entries

_SCHEMA = (
    "CREATE TABLE paged (id INTEGER PRIMARY KEY, queue INTEGER NOT NULL, rank INTEGER NOT NULL, "
    "seq INTEGER NOT NULL, message_id TEXT NOT NULL, expiration INTEGER NOT NULL, size INTEGER NOT NULL, "
    "redelivery INTEGER NOT NULL, record BLOB NOT NULL)",
    "CREATE UNIQUE INDEX paged_order ON paged (queue, rank, seq)",
    "CREATE INDEX paged_expiry ON paged (queue, expiration) WHERE expiration > 0",
)


class PageFile:
    """The broker's page file (opened at the first page-out).

    :param path: the file; None keeps the pages in SQLite's memory (tests).
    :param call_later: the reactor's ``callLater``: a selector search that ran out of its
        time slice goes on in a later turn (:meth:`later`); writes commit at once.
    """

    log = Logger()

    def __init__(self, path: str | None, call_later: Callable[..., Any] | None = None,
                 clock: Callable[[], float] = time.monotonic, min_free: int = 0) -> None:
        self.path = path
        self._call_later = call_later
        self.min_free = min_free
        """Disk bytes page-outs leave free (``[broker] min_free``, as the store does; 0: no check)."""
        self._clock = clock
        self._db: sqlite3.Connection | None = None
        self._queues = 0
        self._undeletable = False
        self._retry_at = 0.0
        self.opened = False
        self.failing = False
        """Whether the last page-out failed (logged once until one succeeds)."""

    def usable(self) -> bool:
        """Whether a page-out may be tried now: not within :data:`RETRY_SECONDS` of a failed one."""
        return not self.failing or self._clock() >= self._retry_at

    def failed(self) -> bool:
        """A page-out failed: do not try again for a while.  True the first time of an
        episode (to be logged), False while it goes on."""
        self._retry_at = self._clock() + RETRY_SECONDS
        first = not self.failing
        self.failing = True
        return first

    def succeeded(self) -> bool:
        """A page-out was written: True when that ends a failing episode."""
        was, self.failing = self.failing, False
        return was

    def discard_stale(self) -> None:
        """Delete a page file an earlier process left (its messages were not persistent,
        or are in the message store)."""
        if self.path is None:
            return
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                pass
            except OSError as error:
                if not self._undeletable:  # (once per episode: opening is retried per page-out)
                    self._undeletable = True
                    self.log.warn("page file {path} cannot be deleted: {error}", path=self.path + suffix,
                                  error=error)
                return
        self._undeletable = False

    def queue(self, not_paged: NotPaged | None = None) -> QueuePage:
        """A new, empty page for one queue; ``not_paged`` takes back the messages of a
        page-out that failed (else :class:`PageWriteFailed` is raised)."""
        self._queues += 1
        return QueuePage(self, self._queues, not_paged)

    @property
    def db(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            db = self._db = self._open()
        return db

    def _open(self) -> sqlite3.Connection:
        if self.path is not None:
            self.discard_stale()
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        db = sqlite3.connect(self.path or ":memory:", isolation_level=None, check_same_thread=False)
        # (a journal in memory: a write that fails half-way, on a full disk, rolls back and
        # leaves the file sound; without one SQLite cannot roll back and the file is corrupt)
        db.execute("PRAGMA journal_mode = MEMORY")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("PRAGMA cache_size = -8192")  # 8 MiB of SQLite page cache
        for statement in _SCHEMA:
            db.execute(statement)
        self.opened = True
        self.log.info("page file {path} opened: queues past their memory limit page here",
                      path=self.path or ":memory:")
        return db

    def check_space(self, size: int) -> None:
        """OSError (ENOSPC) when writing about ``size`` bytes would leave less than
        :attr:`min_free` free on the page file's disk."""
        if not self.min_free or self.path is None:
            return
        stats = os.statvfs(os.path.dirname(os.path.abspath(self.path)))
        free = stats.f_bavail * stats.f_frsize
        if free - size < self.min_free:
            raise OSError(errno.ENOSPC, f"{free} bytes free on the page file's disk, and min_free keeps "
                                        f"{self.min_free} free")

    def write(self) -> sqlite3.Connection:
        """The connection (each statement commits by itself; see :meth:`transaction`)."""
        return self.db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Statements that commit together or, when one fails, are rolled back together."""
        db = self.db
        db.execute("BEGIN")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise

    def later(self, call: Callable[[], object]) -> bool:
        """Run ``call`` in a later reactor turn; False when there is no reactor to ask."""
        if self._call_later is None:
            return False
        self._call_later(0, call)
        return True

    def commit(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close and delete the file."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        self.discard_stale()


class QueuePage:
    """The paged-out messages of one queue, in dispatch order.

    :ivar count: messages paged out.
    :ivar size: their counted bytes.
    :ivar head: the (rank, seq) key of the first paged message, None when empty.
    """

    __slots__ = (
        "_fhead", "_unwritten", "_unwritten_size", "failures", "fcount", "file", "flushes", "fsize", "head", "id",
        "not_paged", "stopped", "tail",
    )

    def __init__(self, file: PageFile, id: int, not_paged: NotPaged | None = None) -> None:
        self.file = file
        self.id = id
        self.not_paged = not_paged
        self.failures = 0
        """Page-outs that failed (their messages went to :attr:`not_paged`)."""
        self.flushes = 0
        """Page-outs written to the file."""
        self._unwritten: list[tuple[Any, ...]] = []
        self._unwritten_size = 0
        self.fcount = 0
        """Messages in the page file."""
        self.fsize = 0
        self._fhead: Key | None = None
        self.head: Key | None = None
        self.tail: StoredTail | None = None
        """Recovered messages still only in the message store (lazy recovery)."""
        self.stopped: Key | None = None
        """Where the last search with a budget stopped (None: it reached its end)."""

    def __len__(self) -> int:
        return self.count

    @property
    def count(self) -> int:
        tail = self.tail
        return self.fcount + (tail.count if tail is not None else 0)

    @property
    def size(self) -> int:
        tail = self.tail
        return self.fsize + (tail.size if tail is not None else 0)

    def attach(self, tail: StoredTail) -> None:
        """Recovery: ``tail`` comes after what the page holds (nothing, at a restart)."""
        self.tail = tail
        self._set_head()

    def take_stored(self, rows: list[BacklogRow]) -> None:
        """Take these rows of the recovered backlog out of it (rows as :class:`StoredTail` has them)."""
        if self.tail is not None:
            self.tail.take(rows)
            self._set_head()

    def _set_head(self) -> None:
        tail = self.tail
        head = self._fhead
        if tail is not None:
            if not tail.count:
                self.tail = None
            elif tail.head is not None and (head is None or tail.head < head):
                head = tail.head
        self.head = head

    def write(self, entries: list[Entry]) -> None:
        """Page out ``entries``."""
        self.write_rows([
            (rank, seq, message.message_id, message.expiration, size, message.redelivery_count, encode_message(message))
            for rank, seq, message, size in entries
        ])

    def write_rows(self, rows: list[tuple[int, int, str, int, int, int, bytes]]) -> None:
        """Page out stored records as they are: (rank, seq, message id, expiration, counted size,
        redelivery count, record) each (recovery: nothing is decoded).  Rows are written in
        groups (:data:`WRITE_ROWS`); a read of the page writes what waits first."""
        if not rows:
            return
        self.file.db  # noqa: B018 (opens the file now: a file that cannot be opened fails this write alone)
        unwritten = self._unwritten
        page = self.id
        for row in rows:
            unwritten.append((page, *row))
            self._unwritten_size += len(row[6])
            key = (row[0], row[1])
            if self._fhead is None or key < self._fhead:
                self._fhead = key
            self.fsize += row[4]
        self.fcount += len(rows)
        self._set_head()
        if len(unwritten) >= WRITE_ROWS or self._unwritten_size >= WRITE_BYTES:
            self._write()

    def _write(self) -> sqlite3.Connection:
        """The connection, once what waits is written.  :class:`PageWriteFailed` when that
        fails: nothing of it is in the file then, and the counts no longer include it."""
        db = self.file.write()
        if self._unwritten:
            unwritten = self._unwritten
            try:
                self.file.check_space(self._unwritten_size)
                with self.file.transaction() as db:
                    db.executemany(
                        "INSERT INTO paged (queue, rank, seq, message_id, expiration, size, redelivery, record) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        unwritten,
                    )
            except (sqlite3.Error, OSError) as error:
                self.failures += 1
                entries = self._give_back(unwritten)
                if self.not_paged is None:
                    raise PageWriteFailed(error, entries) from error
                self.not_paged(entries, error)
                return self.file.db
            self.flushes += 1
            self._unwritten = []
            self._unwritten_size = 0
        return db

    def _give_back(self, rows: list[tuple[Any, ...]]) -> list[Entry]:
        """``rows`` (unwritten) are not paged out after all: forget them, as entries."""
        self._unwritten = []
        self._unwritten_size = 0
        entries = [(rank, seq, _decode(record, redelivery), size)
                   for _, rank, seq, _, _, size, redelivery, record in rows]
        self.fcount -= len(entries)
        self.fsize -= sum(entry[3] for entry in entries)
        self._fhead = None
        if self.fcount > 0:
            with contextlib.suppress(sqlite3.Error):
                row = self.file.db.execute(
                    "SELECT rank, seq FROM paged WHERE queue = ? ORDER BY rank, seq LIMIT 1", (self.id,)
                ).fetchone()
                self._fhead = (row[0], row[1]) if row is not None else None
        if self._fhead is None:
            self.fcount = self.fsize = 0
        self._set_head()
        return entries

    def read(self, rows: int, size: int) -> list[Entry]:
        """Take the first messages (at least one, at most ``rows``, about ``size`` bytes) back."""
        if not self.count:
            return []
        found: list[tuple[Any, ...]] = []
        if self.fcount:
            found = self._write().execute(
                "SELECT rank, seq, size, redelivery, record FROM paged WHERE queue = ? ORDER BY rank, seq LIMIT ?",
                (self.id, rows + 1),
            ).fetchall()
        stored = self.tail.peek(rows + 1) if self.tail is not None else []
        taken: list[Entry] = []
        total = 0
        index = next_stored = 0
        file_end: Key | None = None
        while len(taken) < rows:
            from_file = index < len(found)
            if next_stored < len(stored) and (not from_file or stored[next_stored][:2] < found[index][:2]):
                rank, seq, _, _, counted, redelivery, record = stored[next_stored]
                from_file = False
            elif from_file:
                rank, seq, counted, redelivery, record = found[index]
            else:
                break
            if taken and total + counted > size:
                break
            taken.append((rank, seq, _decode(record, redelivery), counted))
            total += counted
            if from_file:
                index += 1
                file_end = (rank, seq)
                self.fcount -= 1
                self.fsize -= counted
            else:
                next_stored += 1
        if file_end is not None:
            self.file.write().execute(
                "DELETE FROM paged WHERE queue = ? AND (rank, seq) <= (?, ?)", (self.id, file_end[0], file_end[1])
            )
            if index < len(found):
                self._fhead = (found[index][0], found[index][1])
            else:
                self.fcount = self.fsize = 0
                self._fhead = None
        if next_stored:
            assert self.tail is not None
            self.tail.advance(stored[:next_stored])
        if not taken:  # (cannot happen while the counts are right; never loop on it)
            self.fcount = self.fsize = 0
            self._fhead = None
            self.tail = None
        self._set_head()
        return taken

    def search(
        self, predicate: Callable[[Message], bool], rows: int, size: int, after: Key | None = None,
        before: Key | None = None, budget: float | None = None,
    ) -> list[Entry]:
        """Take the first messages ``predicate`` accepts (at most ``rows``, about ``size`` bytes),
        reading the page in chunks from its head (or past the key ``after``) up to the key
        ``before``; [] when none does.  With a ``budget`` (seconds), the search stops once it
        is spent: :attr:`stopped` is then the key searched up to (None: searched to the end)."""
        self.stopped = None
        deadline = time.monotonic() + budget if budget is not None else None
        last: Key | None = None
        taken: list[Entry] = []
        ids: list[tuple[int]] = []
        stored: list[BacklogRow] = []
        total = 0
        scans: list[Iterator[ScanRow]] = [self._scan(after)]
        if self.tail is not None:
            scans.append(self.tail.scan(after))
        for examined, (rank, seq, row_id, counted, redelivery, record, row) in enumerate(heapq.merge(*scans), 1):
            if before is not None and (rank, seq) >= before:
                break
            if (deadline is not None and last is not None and not examined % SEARCH_CLOCK_EVERY
                    and time.monotonic() > deadline):
                self.stopped = last
                break
            last = (rank, seq)
            message = _decode(record, redelivery)
            if predicate(message):
                if taken and total + counted > size:
                    break
                taken.append((rank, seq, message, counted))
                if row is None:
                    ids.append((row_id or 0,))
                else:
                    stored.append(row)
                total += counted
                if len(taken) >= rows:
                    break
        if stored:
            assert self.tail is not None
            self.tail.take(stored)
        self._forget(ids, [entry for entry in taken if entry[1] not in {row[1] for row in stored}])
        self._set_head()
        return taken

    def _scan(self, after: Key | None = None) -> Iterator[ScanRow]:
        if not self.fcount:
            return
        if after is None:
            after = (-(2**62), -(2**62))
        db = self._write()
        while True:
            chunk = db.execute(
                "SELECT id, rank, seq, size, redelivery, record FROM paged WHERE queue = ? AND (rank, seq) > (?, ?) "
                "ORDER BY rank, seq LIMIT ?",
                (self.id, after[0], after[1], CHUNK_ROWS),
            ).fetchall()
            for row_id, rank, seq, counted, redelivery, record in chunk:
                yield rank, seq, row_id, counted, redelivery, record, None
            if len(chunk) < CHUNK_ROWS:
                return
            after = (chunk[-1][1], chunk[-1][2])

    def take_ids(self, message_ids: set[str]) -> list[Entry]:
        """Take the messages with these ids, in order."""
        return self.search(lambda message: message.message_id in message_ids, self.count or 1, 2**62)

    def take_expired(self, now_ms: int) -> list[Entry]:
        """Take the messages of the page file expired at ``now_ms`` (a recovered backlog's
        expired messages are dropped when they are reached)."""
        if not self.fcount:
            return []
        rows = self._write().execute(
            "SELECT id, rank, seq, size, redelivery, record FROM paged "
            "WHERE queue = ? AND expiration > 0 AND expiration <= ? ORDER BY rank, seq",
            (self.id, now_ms),
        ).fetchall()
        taken = [(rank, seq, _decode(record, redelivery), size) for _, rank, seq, size, redelivery, record in rows]
        self._forget([(row[0],) for row in rows], taken)
        return taken

    def take_all(self) -> list[Entry]:
        """Take every paged message, in order."""
        if not self.count:
            return []
        return self.read(self.count, 2**62)

    def peek(self, limit: int) -> list[Entry]:
        """The first ``limit`` paged messages, left where they are."""
        if not self.count or limit <= 0:
            return []
        rows = self._write().execute(
            "SELECT rank, seq, size, redelivery, record FROM paged WHERE queue = ? ORDER BY rank, seq LIMIT ?",
            (self.id, limit),
        ).fetchall() if self.fcount else []
        if self.tail is not None:
            rows.extend((rank, seq, counted, redelivery, record)
                        for rank, seq, _, _, counted, redelivery, record in self.tail.peek(limit))
            rows.sort(key=lambda row: (row[0], row[1]))
        return [(rank, seq, _decode(record, redelivery), size) for rank, seq, size, redelivery, record in rows[:limit]]

    def clear(self) -> None:
        """Forget every paged message."""
        self._unwritten = []
        self._unwritten_size = 0
        if self.fcount:
            self.file.write().execute("DELETE FROM paged WHERE queue = ?", (self.id,))
        self.fcount = self.fsize = 0
        self._fhead = None
        self.tail = None
        self.head = None

    def _forget(self, ids: list[tuple[int]], taken: list[Entry]) -> None:
        if not ids:
            return
        with self.file.transaction() as db:
            db.executemany("DELETE FROM paged WHERE id = ?", ids)
        self.fcount -= len(taken)
        self.fsize -= sum(entry[3] for entry in taken)
        if self.fcount <= 0:
            self.fcount = self.fsize = 0
            self._fhead = None
            self._set_head()
            return
        row = db.execute(
            "SELECT rank, seq FROM paged WHERE queue = ? ORDER BY rank, seq LIMIT 1", (self.id,)
        ).fetchone()
        self._fhead = (row[0], row[1]) if row is not None else None
        self._set_head()


def _decode(record: bytes, redelivery: int) -> Message:
    message = decode_message(record)
    message.redelivery_count = redelivery
    message.redelivered = message.redelivered or redelivery > 0
    return message


class StoredTail:
    """A queue's recovered backlog still only in the message store (lazy recovery): its
    messages after the key :attr:`after` in dispatch order, read from the store when
    the queue reaches them.  Messages taken from its middle (a selector's match) are
    remembered until the reading passes them.

    Rows are (rank, seq, message id, expiration, counted size, redelivery, record):
    the store's record length plus :data:`MESSAGE_OVERHEAD`.
    """

    __slots__ = ("after", "backlog", "count", "head", "queue", "size", "taken")

    def __init__(self, backlog: StoredBacklog, queue: str, count: int, size: int) -> None:
        self.backlog = backlog
        self.queue = queue
        self.count = count
        self.size = size + count * MESSAGE_OVERHEAD
        self.after: Key = (-(2**62), -(2**62))
        self.taken: dict[int, int] = {}
        """seq -> rank of the rows taken past :attr:`after`."""
        self.head: Key | None = None
        self._find_head()

    def _rows(self, after: Key, limit: int) -> list[BacklogRow]:
        rows = [
            (rank, seq, message_id, expiration, size + MESSAGE_OVERHEAD, redelivery, record)
            for rank, seq, message_id, expiration, size, redelivery, record
            in self.backlog.read(self.queue, after, limit + len(self.taken))
            if seq not in self.taken
        ]
        return rows[:limit]

    def _find_head(self) -> None:
        if self.count <= 0:
            self.count = self.size = 0
            self.head = None
            return
        first = self._rows(self.after, 1)
        self.head = (first[0][0], first[0][1]) if first else None
        if not first:  # (the store holds fewer than counted: acknowledged meanwhile)
            self.count = self.size = 0

    def peek(self, limit: int) -> list[BacklogRow]:
        """The next ``limit`` rows, left where they are."""
        return self._rows(self.after, limit) if self.count else []

    def advance(self, rows: list[BacklogRow]) -> None:
        """``rows``, the first ones, were taken."""
        after = self.after = (rows[-1][0], rows[-1][1])
        if self.taken:
            self.taken = {seq: rank for seq, rank in self.taken.items() if (rank, seq) > after}
        self._took(rows)

    def take(self, rows: list[BacklogRow]) -> None:
        """``rows`` were taken from anywhere."""
        self.taken.update((row[1], row[0]) for row in rows)
        self._took(rows)

    def _took(self, rows: list[BacklogRow]) -> None:
        self.backlog.track(self.queue, rows)
        self.count -= len(rows)
        self.size -= sum(row[4] for row in rows)
        self._find_head()

    def scan(self, after: Key | None) -> Iterator[ScanRow]:
        """Every row past ``after`` (and the cursor), in order, read in chunks."""
        if not self.count:
            return
        position = self.after if after is None or after < self.after else after
        while True:
            chunk = self._rows(position, CHUNK_ROWS)
            for row in chunk:
                yield row[0], row[1], None, row[4], row[5], row[6], row
            if len(chunk) < CHUNK_ROWS:
                return
            position = (chunk[-1][0], chunk[-1][1])
