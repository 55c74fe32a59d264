"""The SQLite message store: persistent messages survive crashes and restarts.

:class:`SqliteStore` implements :class:`IMessageStore` on one SQLite file in
WAL mode.  Every write goes through a :class:`GroupCommitWriter` (one thread
of its own, never the reactor's): writes arriving together share one
transaction, and each write's Deferred fires only after the commit that
covers it, so a RECEIPT sent on it means the message is on disk.
:meth:`SqliteStore.open` checks the file (``PRAGMA quick_check``), purges
expired messages and returns a :class:`Snapshot` of everything else, in the
order it was stored (or, recovering lazily, each queue's count and a reader:
:mod:`gateway.broker.store.sqlite_backlog`).  A message stored for several queue keys
in one write (a topic message for its durable subscriptions) is kept once, with
one small row per key (:mod:`gateway.broker.store.sqlite_schema` has the layout).  The
file is locked for this process alone (an advisory lock; the backlog reader
shares the WAL).

Errors are :class:`StoreError` naming the file: a corrupt or foreign
database, one written by a newer version, a full disk (``database or disk
is full``: that write fails, the store keeps working).

Options: ``synchronous`` is ``"FULL"`` (the default: a commit is fsynced
before it is reported, so it survives power loss) or ``"NORMAL"`` (survives
a process crash; the last commits may be lost on power loss);
``max_size`` caps the file in bytes (0: no cap) the way ActiveMQ's store
usage limit does: past it, sends fail; ``min_free`` is disk space kept free
(default 16 MiB): a send that would leave less fails with "full" *before*
SQLite hits the wall, so acknowledgements, redelivery counts and WAL
checkpoints still have room, consumers are still served, and sends are
accepted again once space comes back (acknowledged messages' pages are
reused).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.logger import Logger
from zope.interface import implementer

from gateway.broker.idempotency import SendId, SendIdTable, has_send_id
from gateway.broker.store.snapshot import DurableRecord, Snapshot
from gateway.broker.store.sqlite_backlog import SqliteBacklog
from gateway.broker.store.sqlite_records import decode_message, encode_message
from gateway.broker.store.sqlite_rows import RowIndex
from gateway.broker.store.sqlite_schema import (
    APPLICATION_ID,
    CREATE,
    DELETE,
    DELETE_EXPIRED,
    DELETE_QUEUE,
    DELETE_SEQS,
    DURABLE_OWNER,
    INSERT,
    INSERT_BODY,
    MIGRATE_1_TO_2,
    MIGRATE_2_TO_3,
    RECORD,
    SCHEMA_VERSION,
    SEQS_AT_ONCE,
    SET_REDELIVERY,
    TABLES,
    release,
    share_copies,
)
from gateway.broker.store.sqlite_writer import GroupCommitWriter, NoRoom, TransactionJournal, WriterStats
from gateway.errors import GatewayError, StoreError
from gateway.interfaces import IGroupedWrites, IMessageStore
from gateway.message.model import Message

_SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")
_ROW_OVERHEAD = 256  # cell header, page fill, WAL frame share
DEFAULT_MIN_FREE = 16 * 1024 * 1024
COMMIT_LINGER = 0.0002
"""Seconds a commit may wait for the writes of producers that recently shared commits (200 µs)."""
_CHECKPOINT_MARGIN = 8 * 1024 * 1024  # twice the WAL's auto-checkpoint size (1000 pages)

Row = tuple[str, str, int, int, int, int, int]
"""A message's row for one queue key, before its seq: (queue key, message id, expiration,
redelivery count, -priority, record length, its record's place in the batch)."""


Batch = tuple[list[Row], list[bytes], list[bool], list[SendId]]
"""What one :meth:`SqliteStore.add_batch` writes: its rows, records, which records are shared,
and the idempotency keys of its messages."""


def _rows(entries: list[tuple[str, Message]]) -> tuple[list[Row], list[bytes], list[bool]]:
    """The rows of ``entries``, their records (each message encoded once, however many
    queue keys take it) and which records are shared (kept once, in ``bodies``)."""
    if len(entries) == 1:  # (nearly every SEND: one message for one queue)
        queue, message = entries[0]
        record = encode_message(message)
        return ([(queue, message.message_id, message.expiration, message.redelivery_count, -message.priority,
                  len(record), 0)], [record], [False])
    rows: list[Row] = []
    records: list[bytes] = []
    shared: list[bool] = []
    places: dict[int, int] = {}
    for queue, message in entries:
        place = places.get(id(message))
        if place is None:
            place = places[id(message)] = len(records)
            records.append(encode_message(message))
            shared.append(False)
        else:
            shared[place] = True
        rows.append((queue, message.message_id, message.expiration, message.redelivery_count, -message.priority,
                     len(records[place]), place))
    return rows, records, shared


def _growth(rows: list[Row], records: list[bytes]) -> int:
    """Bytes a batch may take on disk: in the WAL, then in the database (a shared record once)."""
    return 2 * (sum(len(record) for record in records)
                + sum(len(row[0]) + len(row[1]) + _ROW_OVERHEAD for row in rows))


def disk_free(directory: str) -> int:
    """Bytes an unprivileged process may still write on ``directory``'s file system."""
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def _insert(index: RowIndex, db: sqlite3.Connection, batches: list[Batch]) -> list[SendId]:
    """Insert the rows of ``batches`` (on the writer thread, in the caller's transaction); their
    idempotency keys, to be recorded."""
    bodies: dict[tuple[int, int], int] = {}
    values: list[tuple[int, str, str, int, int, bytes, int, int, int | None]] = []
    send_ids: list[SendId] = []
    allocate = index.allocate
    for number, (rows, records, shared, ids) in enumerate(batches):
        for queue, message_id, expiration, redelivery, rank, size, place in rows:
            seq = allocate(queue, message_id)
            if shared[place]:
                body = bodies.setdefault((number, place), seq)  # (the first row's seq names the body)
                values.append((seq, queue, message_id, expiration, redelivery, b"", rank, size, body))
            else:
                values.append((seq, queue, message_id, expiration, redelivery, records[place], rank, size, None))
        if ids:
            send_ids.extend(ids)
    if bodies:
        db.executemany(INSERT_BODY, [(body, batches[number][1][place]) for (number, place), body in bodies.items()])
    db.executemany(INSERT, values)
    return send_ids


@implementer(IMessageStore, IGroupedWrites)
class SqliteStore:
    """Persistent messages and durable subscriptions in one SQLite file.

    :param path: the database file (its directory is created if missing).
    :param reactor: provides ``callFromThread`` and ``seconds`` (the clock
        that decides which stored messages expired).
    :param synchronous: ``"FULL"`` (default) or ``"NORMAL"``; see the module docs.
    :param max_size: largest size of the file in bytes; 0 for no limit.
    :param min_free: disk space (bytes) sends must leave free.
    :param max_group: at most this many writes share one commit.
    :param commit_linger: seconds the writer may hold a commit back for the writes of other
        producers that recently shared commits (never for a lone producer; see
        :class:`GroupCommitWriter`'s ``linger``); 0 to commit at once.
    :param lock_timeout: how long to wait, in seconds, for a file another
        process holds before giving up.
    :param connect: opens the connection (tests pass a slow or failing one).
    :param free_space: bytes free on a directory's file system (tests fake a full disk).
    :param lazy_recovery: :meth:`open` gives each queue's count of stored messages and a
        reader of them (:attr:`Snapshot.backlogs`, :attr:`Snapshot.backlog`: a
        :class:`SqliteBacklog`) instead of every message: a restart reads no message, the
        queues read theirs when they reach them (docs/paging.md).
    """

    log = Logger()

    def __init__(
        self,
        path: str,
        reactor: Any,
        *,
        synchronous: str = "FULL",
        max_size: int = 0,
        min_free: int = DEFAULT_MIN_FREE,
        max_group: int = 2000,
        commit_linger: float = COMMIT_LINGER,
        lock_timeout: float = 5.0,
        connect: Callable[..., sqlite3.Connection] | None = None,
        free_space: Callable[[str], int] = disk_free,
        lazy_recovery: bool = False,
        send_ids: SendIdTable | None = None,
    ) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise StoreError(f"message store {path}: synchronous must be one of {', '.join(_SYNCHRONOUS)}")
        self.path = os.fspath(path)
        self.reactor = reactor
        self.synchronous = synchronous.upper()
        self.max_size = max_size
        self.lock_timeout = lock_timeout
        self.min_free = min_free
        self._free_space = free_space
        self.lazy_recovery = lazy_recovery
        self.send_ids = send_ids or SendIdTable()  # (issue 35: the idempotency window, stored with the messages)
        self.backlog: SqliteBacklog | None = None
        self._lock_fd: int | None = None
        self._directory = os.path.dirname(os.path.abspath(self.path))
        self._page_size = 4096
        journal = TransactionJournal()
        self._rows = RowIndex(journal)
        self._sqlite_connect: Callable[..., sqlite3.Connection] = connect or sqlite3.connect
        self.writer = GroupCommitWriter(
            reactor, self._connect, self._describe, name=f"store-writer:{os.path.basename(self.path)}",
            max_group=max_group, room=self._room, journal=journal, linger=commit_linger,
        )
        self._insert_batches = self._write_batches
        """(one bound method for every :meth:`add_then`: the writer merges the parts of the same one)"""
        self._delete_removals = self._delete_rows
        """(the same for :meth:`remove_then`)"""

    @property
    def stats(self) -> WriterStats:
        """Commits and writes so far (group commit at work)."""
        return self.writer.stats

    # -- lifecycle ---------------------------------------------------------

    def open(self) -> Deferred[Snapshot]:
        """Open (or create) the file and recover what it holds."""
        now_ms = int(self.reactor.seconds() * 1000)
        started = self.writer.start()

        def recover(_: object) -> Deferred[Snapshot]:
            result: Deferred[Snapshot] = self.writer.call(lambda db: self._recover(db, now_ms))
            return result

        def opened(snapshot: Snapshot) -> Snapshot:
            self.log.info(
                "message store {path} opened: {messages} messages, {durables} durable subscriptions, "
                "{expired} expired messages purged",
                path=self.path, messages=len(snapshot.messages) + snapshot.stored, durables=len(snapshot.durables),
                expired=snapshot.expired,
            )
            return snapshot

        def failed(failure: Any) -> Any:
            stopped = self.writer.stop().addBoth(self._unlock)
            stopped.addBoth(lambda _: failure)
            return stopped

        return started.addCallback(recover).addCallbacks(opened, failed)

    def close(self) -> Deferred[None]:
        """Write what is pending, then close the file."""
        if self.backlog is not None:
            self.backlog.close()
        return self.writer.stop().addBoth(self._unlock)

    # -- writes ------------------------------------------------------------

    def add(self, queue: str, message: Message) -> Deferred[None]:
        return self.add_batch([(queue, message)])

    def add_batch(self, entries: list[tuple[str, Message]]) -> Deferred[None]:
        try:
            batch = self._batch(entries)
        except GatewayError as error:
            return fail(error)
        index = self._rows

        def insert(db: sqlite3.Connection) -> None:
            self.send_ids.record(db, _insert(index, db, [batch]))  # (issue 35: in the messages' transaction)

        return self.writer.submit(insert, grows=_growth(batch[0], batch[1]))

    def add_then(self, entries: list[tuple[str, Message]], done: Callable[[BaseException | None], None]) -> None:
        """:class:`IGroupedWrites`: :meth:`add_batch` reporting through ``done``: the batches handed over
        before the writer takes them are one operation (one ``executemany``, one report back to the
        reactor thread), each still its own outcome; an entry that cannot be encoded fails at once."""
        try:
            batch = self._batch(entries)
        except GatewayError as error:
            done(error)
            return
        self.writer.append(self._insert_batches, batch, _growth(batch[0], batch[1]), done)

    def _batch(self, entries: list[tuple[str, Message]]) -> Batch:
        rows, records, shared = _rows(entries)
        ids = SendIdTable.rows(entries, int(self.reactor.seconds() * 1000)) \
            if any(has_send_id(message) for _, message in entries) else []  # (issue 35)
        return rows, records, shared, ids

    def _write_batches(self, db: sqlite3.Connection, batches: list[Batch]) -> None:
        """The merged operation of :meth:`add_then` (writer thread)."""
        self.send_ids.record(db, _insert(self._rows, db, batches))

    def remove(self, queue: str, message_id: str) -> Deferred[None]:
        def delete(db: sqlite3.Connection) -> None:
            seq = self._rows.take(queue, message_id)
            if seq is not None:
                release(db, db.execute(DELETE, (seq,)))

        return self.writer.submit(delete)

    def remove_then(self, queue: str, message_id: str, done: Callable[[BaseException | None], None]) -> None:
        """:class:`IGroupedWrites`: :meth:`remove` reporting through ``done``; the removals handed over
        before the writer takes them are one operation (their rows deleted a few hundred at a time)."""
        self.writer.append(self._delete_removals, (queue, message_id), 0, done)

    def _delete_rows(self, db: sqlite3.Connection, removals: list[tuple[str, str]]) -> None:
        """The merged operation of :meth:`remove_then` (writer thread)."""
        take = self._rows.take
        seqs = [seq for queue, message_id in removals if (seq := take(queue, message_id)) is not None]
        for start in range(0, len(seqs), SEQS_AT_ONCE):
            chunk = seqs[start:start + SEQS_AT_ONCE]
            release(db, db.execute(DELETE_SEQS.format(",".join("?" * len(chunk))), chunk))

    def set_redelivery(self, queue: str, message_id: str, count: int) -> Deferred[None]:
        def update(db: sqlite3.Connection) -> None:
            seq = self._rows.find(queue, message_id)
            if seq is not None:
                db.execute(SET_REDELIVERY, (count, seq))

        return self.writer.submit(update)

    def add_durable(self, key: str, destination: str, selector: str | None,
                    owner: str | None = None) -> Deferred[None]:
        def record(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO durables (key, destination, selector, owner) VALUES (?, ?, ?, ?)",
                (key, destination, selector, owner),
            )

        return self.writer.submit(record)

    def remove_durable(self, key: str) -> Deferred[None]:
        def drop(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM durables WHERE key = ?", (key,))
            self._rows.take_queue(key)
            # (by the order index: a backlog recovered lazily is not all in the row index)
            release(db, db.execute(DELETE_QUEUE, (key,)))

        return self.writer.submit(drop)

    # -- writer thread -----------------------------------------------------

    def _lock(self) -> None:
        """Take the file for this store alone (one gateway per file): an advisory lock of
        its own, so the store's reader connection (lazy recovery) can share the file."""
        if self._lock_fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreError(f"message store {self.path} is in use by another process") from None
                time.sleep(0.05)
        self._lock_fd = fd

    def adopt_lock(self, fd: int) -> None:
        """Use ``fd``, an open descriptor of this file that holds its ``flock`` already (taken by
        :mod:`gateway.ha.store_lock` before the store opens), as the store's lock; closed with the store."""
        if self._lock_fd is not None:
            os.close(fd)
            return
        self._lock_fd = fd

    def _unlock(self, result: Any = None) -> Any:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # (after the connections closed: SQLite's own locks are gone with them)
        return result

    def _connect(self) -> sqlite3.Connection:
        os.makedirs(self._directory, exist_ok=True)
        db: sqlite3.Connection = self._sqlite_connect(self.path, isolation_level=None, timeout=self.lock_timeout)
        try:
            self._lock()
            db.execute("PRAGMA journal_mode = WAL").fetchall()
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
            problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise StoreError(
                    f"message store {self.path} is corrupt ({'; '.join(map(str, problems[:5]))}); "
                    "restore it from a backup or move it away to start empty"
                )
            self._check_schema(db)
            self.send_ids.create(db)  # (issue 35)
            self._page_size = db.execute("PRAGMA page_size").fetchone()[0]
            if self.max_size > 0:
                db.execute(f"PRAGMA max_page_count = {max(1, self.max_size // self._page_size)}")
        except BaseException:
            db.close()
            raise
        return db

    def _check_schema(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")  # takes the exclusive lock now: a second gateway fails here
        try:
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if application_id == 0 and not tables:
                for statement in CREATE:
                    db.execute(statement)
            elif application_id != APPLICATION_ID:
                raise StoreError(
                    f"{self.path} is an SQLite database but not a jmsgateway message store "
                    f"(application_id {application_id:#x}, tables {sorted(tables)})"
                )
            elif version > SCHEMA_VERSION:
                raise StoreError(
                    f"message store {self.path} has schema version {version}, written by a newer jmsgateway "
                    f"(this one reads up to {SCHEMA_VERSION})"
                )
            elif not TABLES.get(version, TABLES[1]) <= tables:
                raise StoreError(f"message store {self.path} is damaged: tables {sorted(tables)}")
            else:
                self._migrate(db, version)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _migrate(self, db: sqlite3.Connection, version: int) -> None:
        """Bring a store of schema ``version`` to :data:`SCHEMA_VERSION`, inside the
        caller's transaction (all or nothing)."""
        if "owner" not in {row[1] for row in db.execute("PRAGMA table_info(durables)")}:
            db.execute(DURABLE_OWNER)
        if version < 2:
            self.log.info("message store {path}: adding the dispatch order index (schema version {version} "
                          "to 2, once)", path=self.path, version=version)
            for statement in MIGRATE_1_TO_2:
                db.execute(statement)
        if version < 3:
            for statement in MIGRATE_2_TO_3:
                db.execute(statement)
            shared = share_copies(db)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.log.info("message store {path}: schema version 3 (one stored copy of a topic message for all its "
                          "durable subscriptions); {shared} stored copies now share their record",
                          path=self.path, shared=shared)

    def _recover(self, db: sqlite3.Connection, now_ms: int) -> Snapshot:
        db.execute("BEGIN IMMEDIATE")
        try:
            expired = release(db, db.execute(DELETE_EXPIRED, (now_ms,)))
            durables = [
                DurableRecord(key, destination, selector, owner)
                for key, destination, selector, owner in db.execute(
                    "SELECT key, destination, selector, owner FROM durables ORDER BY rowid"
                )
            ]
            messages = []
            if self.lazy_recovery:
                # (the order index alone: counting a deep backlog reads no record)
                backlogs = {
                    queue: (count, size) for queue, count, size in db.execute(
                        "SELECT queue, count(*), sum(size) FROM messages INDEXED BY messages_order GROUP BY queue"
                    )
                }
                redelivered = [
                    (queue, (rank, seq, message_id, expiration, size, redelivery, record))
                    for queue, rank, seq, message_id, expiration, size, redelivery, record in db.execute(
                        f"SELECT queue, rank, seq, message_id, expiration, size, redelivery, {RECORD} FROM messages "
                        "INDEXED BY messages_redelivered WHERE redelivery > 0 ORDER BY seq"
                    )
                ]
                last = db.execute("SELECT max(seq) FROM messages").fetchone()[0] or 0
                self._rows.next_seq = max(self._rows.next_seq, last + 1, self._last_body(db) + 1)
                send_ids = self.send_ids.load(db, now_ms)  # (issue 35)
                db.execute("COMMIT")
                self.backlog = SqliteBacklog(self.path, self._rows, self.writer, last)
                return Snapshot(durables=durables, expired=max(0, expired),
                                stored=sum(count for count, _ in backlogs.values()), backlogs=backlogs,
                                backlog=self.backlog, redelivered=redelivered, send_ids=send_ids)
            for seq, queue, redelivery, record in db.execute(
                f"SELECT seq, queue, redelivery, {RECORD} FROM messages ORDER BY seq"
            ):
                try:
                    message = decode_message(record)
                except ValueError as error:
                    raise StoreError(
                        f"message store {self.path} is corrupt: stored message {seq} on {queue} "
                        f"cannot be read ({error})"
                    ) from None
                message.redelivery_count = redelivery
                message.redelivered = message.redelivered or redelivery > 0
                messages.append((queue, message))
                self._rows.load(queue, message.message_id, seq)
            self._rows.next_seq = max(self._rows.next_seq, self._last_body(db) + 1)
            send_ids = self.send_ids.load(db, now_ms)  # (issue 35)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return Snapshot(durables=durables, messages=messages, expired=max(0, expired), send_ids=send_ids)

    @staticmethod
    def _last_body(db: sqlite3.Connection) -> int:
        """The largest body id (new rows' seq, which name new bodies, must come after it)."""
        last: int | None = db.execute("SELECT max(id) FROM bodies").fetchone()[0]
        return last or 0

    def _room(self, db: sqlite3.Connection) -> int:
        """Bytes sends may still add: free disk above the reserve, plus pages freed by acknowledgements.

        Close to the limit, the WAL is checkpointed and truncated first: what
        it holds would otherwise grow the database later, out of the reserve,
        and the space it takes (acknowledgements write to it too) comes back.
        """
        room = self._free_space(self._directory) - self.min_free
        if room < _CHECKPOINT_MARGIN:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            room = self._free_space(self._directory) - self.min_free
        free_pages: int = db.execute("PRAGMA freelist_count").fetchone()[0]
        return room + free_pages * self._page_size

    def _describe(self, error: BaseException) -> BaseException:
        """The error callers see for ``error`` raised on the writer thread."""
        if isinstance(error, GatewayError):
            return error
        if isinstance(error, NoRoom):
            return StoreError(
                f"message store {self.path} is full: the disk keeps {self.min_free} bytes free for "
                f"acknowledgements and this write needs {error.needed} more than the "
                f"{max(0, error.available)} left; the write was refused"
            )
        if isinstance(error, sqlite3.Error):
            name = getattr(error, "sqlite_errorname", "")
            if name == "SQLITE_FULL" or "full" in str(error):
                return StoreError(f"message store {self.path} is full ({error}): the write was refused")
            if name in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(error):
                return StoreError(f"message store {self.path} is in use by another process ({error})")
            if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in str(error):
                return StoreError(
                    f"message store {self.path} is corrupt or not an SQLite database ({error}); "
                    "restore it from a backup or move it away to start empty"
                )
            return StoreError(f"message store {self.path}: {error}")
        if isinstance(error, OSError):
            where = f" ({error.filename})" if error.filename and error.filename != self.path else ""
            return StoreError(f"message store {self.path} cannot be opened: {error.strerror or error}{where}")
        return error
