"""The page file: where queues put the messages that do not fit in memory.

:class:`PageFile` is one SQLite file under ``data_dir`` (``synchronous=OFF``,
no journal): it only ever holds what memory could not, so it is deleted at
start-up and at shutdown; the persistent messages it held are in the message
store too and come back from there after a restart.  Each queue gets a
:class:`QueuePage`: its paged messages in dispatch order (priority, then
arrival), read back from the head in chunks, searched in chunks for a
selector's match (as ActiveMQ's store cursors do), or taken by id or by
expiry.  Rows are keyed by the queue's own sequence numbers, so a paged
message keeps its place in the queue's order.

Operations run on the reactor thread: with no fsync and no journal they
write to the operating system's cache (a slow disk slows the broker down
rather than growing its memory).  Writes of one reactor turn share one
transaction.  This module knows nothing of consumers or policies.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from twisted.logger import Logger

from gateway.broker.sqlite_records import decode_message, encode_message
from gateway.message.model import Message

Entry = tuple[int, int, Message, int]
"""A queue entry: (-priority, queue sequence, message, counted size)."""

Key = tuple[int, int]

CHUNK_ROWS = 500
"""Rows read at once when a selector searches the page."""
WRITE_ROWS = 64
"""Paged-out messages written to the file together ..."""
WRITE_BYTES = 256 * 1024
"""... or fewer when their records take this many bytes."""

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
    :param call_later: schedules the commit of a reactor turn's writes.
    """

    log = Logger()

    def __init__(self, path: str | None, call_later: Callable[..., Any] | None = None) -> None:
        self.path = path
        self._call_later = call_later
        self._db: sqlite3.Connection | None = None
        self._queues = 0
        self._commit_scheduled = False
        self.opened = False
        self.failing = False
        """Whether the last page-out failed (logged once until one succeeds)."""

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
                self.log.warn("page file {path} cannot be deleted: {error}", path=self.path + suffix, error=error)
                return

    def queue(self) -> QueuePage:
        """A new, empty page for one queue."""
        self._queues += 1
        return QueuePage(self, self._queues)

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
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("PRAGMA cache_size = -8192")  # 8 MiB of SQLite page cache
        for statement in _SCHEMA:
            db.execute(statement)
        self.opened = True
        self.log.info("page file {path} opened: queues past their memory limit page here",
                      path=self.path or ":memory:")
        return db

    def write(self) -> sqlite3.Connection:
        """The connection, inside this turn's transaction."""
        db = self.db
        if not db.in_transaction:
            db.execute("BEGIN")
            if self._call_later is not None and not self._commit_scheduled:
                self._commit_scheduled = True
                self._call_later(0, self.commit)
        return db

    def commit(self) -> None:
        self._commit_scheduled = False
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

    __slots__ = ("_unwritten", "_unwritten_size", "count", "file", "head", "id", "size")

    def __init__(self, file: PageFile, id: int) -> None:
        self.file = file
        self.id = id
        self._unwritten: list[tuple[Any, ...]] = []
        self._unwritten_size = 0
        self.count = 0
        self.size = 0
        self.head: Key | None = None

    def __len__(self) -> int:
        return self.count

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
            if self.head is None or key < self.head:
                self.head = key
            self.size += row[4]
        self.count += len(rows)
        if len(unwritten) >= WRITE_ROWS or self._unwritten_size >= WRITE_BYTES:
            self._write()

    def _write(self) -> sqlite3.Connection:
        """The connection, once what waits is written."""
        db = self.file.write()
        if self._unwritten:
            db.executemany(
                "INSERT INTO paged (queue, rank, seq, message_id, expiration, size, redelivery, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                self._unwritten,
            )
            self._unwritten = []
            self._unwritten_size = 0
        return db

    def read(self, rows: int, size: int) -> list[Entry]:
        """Take the first messages (at least one, at most ``rows``, about ``size`` bytes) back."""
        if not self.count:
            return []
        db = self._write()
        found = db.execute(
            "SELECT rank, seq, size, redelivery, record FROM paged WHERE queue = ? ORDER BY rank, seq LIMIT ?",
            (self.id, rows + 1),
        ).fetchall()
        taken: list[Entry] = []
        total = 0
        last = min(len(found), rows)
        for index in range(last):
            rank, seq, counted, redelivery, record = found[index]
            if taken and total + counted > size:
                last = index
                break
            taken.append((rank, seq, _decode(record, redelivery), counted))
            total += counted
        if not taken:  # (cannot happen while count is right; never loop on it)
            self.count = self.size = 0
            self.head = None
            return []
        end = taken[-1]
        db.execute("DELETE FROM paged WHERE queue = ? AND (rank, seq) <= (?, ?)", (self.id, end[0], end[1]))
        self.count -= len(taken)
        self.size -= total
        if last < len(found):
            self.head = (found[last][0], found[last][1])
        else:
            self.count = self.size = 0
            self.head = None
        return taken

    def search(
        self, predicate: Callable[[Message], bool], rows: int, size: int, after: Key | None = None,
        before: Key | None = None,
    ) -> list[Entry]:
        """Take the first messages ``predicate`` accepts (at most ``rows``, about ``size`` bytes),
        reading the page in chunks from its head (or past the key ``after``) up to the key
        ``before``; [] when none does."""
        taken: list[Entry] = []
        ids: list[tuple[int]] = []
        total = 0
        for row_id, rank, seq, counted, redelivery, record in self._scan(after):
            if before is not None and (rank, seq) >= before:
                break
            message = _decode(record, redelivery)
            if predicate(message):
                if taken and total + counted > size:
                    break
                taken.append((rank, seq, message, counted))
                ids.append((row_id,))
                total += counted
                if len(taken) >= rows:
                    break
        self._forget(ids, taken)
        return taken

    def _scan(self, after: Key | None = None) -> Iterator[tuple[int, int, int, int, int, bytes]]:
        if after is None:
            after = (-(2**62), -(2**62))
        db = self._write()
        while True:
            chunk = db.execute(
                "SELECT id, rank, seq, size, redelivery, record FROM paged WHERE queue = ? AND (rank, seq) > (?, ?) "
                "ORDER BY rank, seq LIMIT ?",
                (self.id, after[0], after[1], CHUNK_ROWS),
            ).fetchall()
            yield from chunk
            if len(chunk) < CHUNK_ROWS:
                return
            after = (chunk[-1][1], chunk[-1][2])

    def take_ids(self, message_ids: set[str]) -> list[Entry]:
        """Take the messages with these ids, in order."""
        return self.search(lambda message: message.message_id in message_ids, self.count or 1, 2**62)

    def take_expired(self, now_ms: int) -> list[Entry]:
        """Take the messages expired at ``now_ms``."""
        if not self.count:
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
        ).fetchall()
        return [(rank, seq, _decode(record, redelivery), size) for rank, seq, size, redelivery, record in rows]

    def clear(self) -> None:
        """Forget every paged message."""
        self._unwritten = []
        self._unwritten_size = 0
        if self.count:
            self.file.write().execute("DELETE FROM paged WHERE queue = ?", (self.id,))
        self.count = self.size = 0
        self.head = None

    def _forget(self, ids: list[tuple[int]], taken: list[Entry]) -> None:
        if not ids:
            return
        db = self.file.write()
        db.executemany("DELETE FROM paged WHERE id = ?", ids)
        self.count -= len(taken)
        self.size -= sum(entry[3] for entry in taken)
        if self.count <= 0:
            self.count = self.size = 0
            self.head = None
            return
        row = db.execute(
            "SELECT rank, seq FROM paged WHERE queue = ? ORDER BY rank, seq LIMIT 1", (self.id,)
        ).fetchone()
        self.head = (row[0], row[1]) if row is not None else None


def _decode(record: bytes, redelivery: int) -> Message:
    message = decode_message(record)
    message.redelivery_count = redelivery
    message.redelivered = message.redelivered or redelivery > 0
    return message
