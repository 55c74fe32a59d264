"""A backlog recovered lazily: stored messages read from the message store when needed.

At a restart the SQLite store counts each queue's messages from its
``messages_order`` index (queue, -priority, seq) and reads none of them.
:class:`SqliteBacklog` reads them later, in dispatch order, a few at a time
(keyset pagination on that index) through a read-only connection of its own
on the caller's (the reactor's) thread: the file is in WAL mode, so this reader
never waits for the store's writer thread, nor the writer for it.  Rows read
are handed to the writer thread's row index (:meth:`track`), so acknowledging
them finds their rows; rows never read cost no memory at all.
"""

from __future__ import annotations

import sqlite3

from gateway.broker.store.snapshot import BacklogRow
from gateway.broker.store.sqlite_rows import RowIndex
from gateway.broker.store.sqlite_schema import RECORD
from gateway.broker.store.sqlite_writer import GroupCommitWriter

_READ = (
    f"SELECT rank, seq, message_id, expiration, size, redelivery, {RECORD} FROM messages INDEXED BY messages_order "
    "WHERE queue = ? AND rank = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?"
)
_NEXT_RANK = "SELECT rank FROM messages INDEXED BY messages_order WHERE queue = ? AND rank > ? ORDER BY rank LIMIT 1"
# (one priority at a time: a seq range within a rank never walks the messages stored since the restart)


class SqliteBacklog:
    """:class:`~gateway.broker.store.snapshot.StoredBacklog` on the SQLite store's file at ``path``.

    ``rows`` and ``writer`` are the store's row index and writer thread (rows read are handed there).
    """

    def __init__(self, path: str, rows: RowIndex, writer: GroupCommitWriter, last_seq: int) -> None:
        self.path = path
        self.rows = rows
        self.writer = writer
        self.last_seq = last_seq
        self._db: sqlite3.Connection | None = None
        self.closed = False
        self.rows_read = 0
        """Rows read so far (tests: a restart reads no backlog)."""

    @property
    def db(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            db = self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA query_only = 1")
            db.execute("PRAGMA cache_size = -4096")  # 4 MiB of SQLite page cache
        return db

    def read(self, queue: str, after: tuple[int, int], limit: int) -> list[BacklogRow]:
        if self.closed:  # (the broker stopped: nothing more is delivered)
            return []
        db = self.db
        rank, seq = after
        rows: list[BacklogRow] = []
        while True:
            rows += db.execute(_READ, (queue, rank, seq, self.last_seq, limit - len(rows))).fetchall()
            if len(rows) >= limit:
                break
            following = db.execute(_NEXT_RANK, (queue, rank)).fetchone()
            if following is None:
                break
            rank, seq = following[0], -1
        self.rows_read += len(rows)
        return rows

    def track(self, queue: str, rows: list[BacklogRow]) -> None:
        if not rows:
            return
        index = self.rows  # (lives on the writer thread: loaded there, before any later ack)
        found = [(row[2], row[1]) for row in rows]

        def load(_: sqlite3.Connection) -> None:
            for message_id, seq in found:
                index.load(queue, message_id, seq)

        self.writer.submit(load)

    def close(self) -> None:
        self.closed = True
        if self._db is not None:
            self._db.close()
            self._db = None
