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
from gateway.broker.paging.page_records import PageRow, group_record, page_record, read_group, read_page_record
from gateway.broker.store.snapshot import BacklogRow, StoredBacklog
from gateway.broker.store.sqlite_records import decode_message
from gateway.message.model import Message

Entry = tuple[int, int, Message, int]
"""A queue entry: (-priority, queue sequence, message, counted size)."""

Key = tuple[int, int]

NotPaged = Callable[[list[Entry], BaseException], None]
"""Takes back the messages of a page-out that failed, with the error."""
ScanRow = tuple[int, int, int | None, int, int, bytes, BacklogRow | None]
"""A paged message met by a search: (rank, seq, page file group id, counted size, redelivery,
record, its stored row when it is still only in the message store: then the record is the
store's, else a :func:`~gateway.broker.paging.page_records.page_record`)."""

TAIL_ROWS = 200
"""Most rows of a recovered backlog (in the message store) one read takes."""
CHUNK_ROWS = 500
"""Rows of a recovered backlog (in the message store) read at once when a selector searches it."""
SCAN_GROUPS = 8
"""Groups (up to :data:`GROUP_ROWS` messages each) read at once when a selector searches the page."""
SEARCH_SLICE = 0.02
"""Seconds one search of the page may take before it stops (to go on in a later reactor
turn): a selector's match behind 100,000 others does not stall the reactor."""
SEARCH_CLOCK_EVERY = 32
"""A search looks at the clock once per this many messages."""
GROUP_ROWS = 128
"""Paged-out messages one page-file row (a group) holds at most ..."""
GROUP_BYTES = 128 * 1024
"""... and about the most counted bytes (a larger message is a group of its own).  A read of
the page takes whole groups while they fit its budget; only a group larger than the whole
budget is split (what stays is written back)."""
PAGE_SIZE = 16384
"""The page file's SQLite page size: a group (:data:`GROUP_BYTES`) is a few pages."""
DELETE_BYTES = 8 * 1024 * 1024
"""Counted bytes of groups read back before they are deleted (one statement for many reads)."""
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
    # one row per group of messages: its first and last message's keys, how many, their counted
    # bytes, the earliest expiration among them (0: none expires), the marshalled group
    "CREATE TABLE paged (id INTEGER PRIMARY KEY, queue INTEGER NOT NULL, rank INTEGER NOT NULL, "
    "seq INTEGER NOT NULL, last_rank INTEGER NOT NULL, last_seq INTEGER NOT NULL, count INTEGER NOT NULL, "
    "size INTEGER NOT NULL, expiration INTEGER NOT NULL, record BLOB NOT NULL)",
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
        db.execute(f"PRAGMA page_size = {PAGE_SIZE}")
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

    The page file keeps them in **groups**: one row holds up to :data:`GROUP_ROWS`
    messages (about :data:`GROUP_BYTES` counted bytes) of one priority, in order, as a
    marshalled list (:mod:`gateway.broker.paging.page_records`), keyed by its first message.
    A queue's groups never overlap (a message paged out into the range of a group is
    merged into it), so groups in key order are messages in key order.  One row per
    group instead of one per message is what makes paging cheap: SQLite's per-row work
    (B-tree cells, index entries, a step of the statement, each releasing the GIL to
    the store's writer thread) is paid once per group.

    :ivar count: messages paged out.
    :ivar size: their counted bytes.
    :ivar head: the (rank, seq) key of the first paged message, None when empty.
    """

    __slots__ = (
        "_fhead", "_last_keys", "_read_size", "_read_upto", "_unwritten", "_unwritten_size", "failures", "fcount",
        "file", "flushes", "fsize", "head", "id", "not_paged", "stopped", "tail",
    )

    def __init__(self, file: PageFile, id: int, not_paged: NotPaged | None = None) -> None:
        self.file = file
        self.id = id
        self.not_paged = not_paged
        self.failures = 0
        """Page-outs that failed (their messages went to :attr:`not_paged`)."""
        self.flushes = 0
        """Page-outs written to the file."""
        self._unwritten: list[PageRow] = []
        """Paged-out messages not yet written: the next group(s)."""
        self._read_upto: Key | None = None
        """The groups up to the one keyed so were read back and are not deleted yet (reads delete
        in bulk, :data:`DELETE_BYTES`); statements but a read's delete them first."""
        self._read_size = 0
        self._unwritten_size = 0
        self._last_keys: dict[int, Key] = {}
        """Per rank, a key at or after the last message of every group written (a write that
        starts after it cannot overlap a group: no statement to look)."""
        self.fcount = 0
        """Messages in the page file (and waiting to be written to it)."""
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

    def add(self, rank: int, seq: int, message: Message, size: int) -> None:
        """Page out one message (queue key ``(rank, seq)``, counted ``size``).  Messages are
        written in groups (:data:`GROUP_ROWS`, :data:`GROUP_BYTES`); a read of the page writes
        what waits first.  :class:`StoreError` (nothing paged out) when it cannot be recorded."""
        record = page_record(message)
        file = self.file
        if file._db is None:
            file.db  # noqa: B018 (opens the file now: a file that cannot be opened fails this write alone)
        unwritten = self._unwritten
        unwritten.append((rank, seq, size, message.expiration, record))
        self._unwritten_size += size
        self.fsize += size
        self.fcount += 1
        head = self._fhead
        if head is None or (rank, seq) < head:
            self._fhead = (rank, seq)
            self._set_head()
        if len(unwritten) >= GROUP_ROWS or self._unwritten_size >= GROUP_BYTES:
            self._write()

    def flush(self) -> None:
        """Write what waits to be written now (:class:`PageWriteFailed` as :meth:`add`)."""
        self._write()

    def _write(self) -> sqlite3.Connection:
        """The connection, once what waits is written.  :class:`PageWriteFailed` when that
        fails: nothing of it is in the file then, and the counts no longer include it."""
        db = self.file.write()
        if self._unwritten:
            unwritten = self._unwritten
            try:
                self.file.check_space(sum(len(row[4]) for row in unwritten))
                overlapped, groups = self._plan(db, unwritten)
                if len(groups) == 1 and not overlapped and self._read_upto is None:
                    db.execute(_INSERT_GROUP, groups[0])  # (one statement: its own transaction)
                else:
                    with self.file.transaction() as db:
                        self._delete_read(db)
                        db.executemany("DELETE FROM paged WHERE id = ?", overlapped)
                        db.executemany(_INSERT_GROUP, groups)
                    self._read_upto = None
                    self._read_size = 0
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

    def _plan(self, db: sqlite3.Connection, rows: list[PageRow]) -> tuple[list[tuple[int]], list[tuple[Any, ...]]]:
        """How to write ``rows``: (the groups to delete, the groups to insert).  Groups are of
        one priority each, merged with the groups whose range they fall in (which are
        deleted), so groups never overlap."""
        if any(rows[index][:2] < rows[index - 1][:2] for index in range(1, len(rows))):
            rows = sorted(rows, key=_row_key)  # (a redelivery or a higher priority came in between)
        overlapped: list[tuple[int]] = []
        groups: list[tuple[Any, ...]] = []
        last_keys = self._last_keys
        start = 0
        while start < len(rows):
            rank = rows[start][0]
            end = start + 1
            while end < len(rows) and rows[end][0] == rank:
                end += 1
            run = rows[start:end]
            known = last_keys.get(rank)
            if known is not None and (run[0][0], run[0][1]) <= known:  # (else after every group)
                run = self._merged(db, run, overlapped)
            groups.extend(self._group(chunk) for chunk in _chunks(run))
            last = (run[-1][0], run[-1][1])
            if known is None or last > known:
                last_keys[rank] = last
            start = end
        return overlapped, groups

    def _merged(self, db: sqlite3.Connection, run: list[PageRow], overlapped: list[tuple[int]]) -> list[PageRow]:
        """``run`` (one priority, in order) with the messages of the groups it overlaps, whose
        ids go to ``overlapped`` (a message paged out behind the head of its priority: a
        redelivery).  Groups read back and not deleted yet do not count."""
        first, last = (run[0][0], run[0][1]), (run[-1][0], run[-1][1])
        after = self._read_upto or _BEFORE_ALL
        found = db.execute(_LAST_AT_OR_BEFORE, (self.id, *last, *after)).fetchone()
        if found is None or (found[1], found[2]) < first:  # (after every group of its priority)
            return run
        merged = list(run)
        cursor = db.execute(_GROUPS_AT_OR_BEFORE, (self.id, *last, *after))
        try:
            for group_id, last_rank, last_seq, record in cursor:
                if (last_rank, last_seq) < first:
                    break
                overlapped.append((group_id,))
                merged.extend(read_group(record))
        finally:
            cursor.close()
        merged.sort(key=_row_key)
        return merged

    def _group(self, rows: list[PageRow]) -> tuple[Any, ...]:
        """The page-file row of ``rows`` (in order)."""
        expirations = [row[3] for row in rows if row[3] > 0]
        return (self.id, rows[0][0], rows[0][1], rows[-1][0], rows[-1][1], len(rows), sum(row[2] for row in rows),
                min(expirations) if expirations else 0, group_record(rows))

    def _rewrite(self, db: sqlite3.Connection, group_id: int, rows: list[PageRow]) -> None:
        """Group ``group_id`` now holds ``rows`` (in order; none: it goes)."""
        if not rows:
            db.execute("DELETE FROM paged WHERE id = ?", (group_id,))
            return
        db.execute(
            "UPDATE paged SET rank = ?, seq = ?, last_rank = ?, last_seq = ?, count = ?, size = ?, expiration = ?, "
            "record = ? WHERE id = ?", (*self._group(rows)[1:], group_id),
        )

    def _delete_read(self, db: sqlite3.Connection) -> None:
        """Delete the groups that were read back (in ``db``'s transaction: the caller forgets
        :attr:`_read_upto` once it is committed)."""
        if self._read_upto is not None:
            db.execute("DELETE FROM paged WHERE queue = ? AND (rank, seq) <= (?, ?)", (self.id, *self._read_upto))

    def _live(self) -> sqlite3.Connection:
        """The connection, once what waits is written and the groups read back are deleted
        (statements that search or change the page file see only what is paged out)."""
        db = self._write()
        if self._read_upto is not None:
            self._delete_read(db)
            self._read_upto = None
            self._read_size = 0
        return db

    def _find_head(self) -> None:
        """:attr:`_fhead` from the file (after messages were taken from it)."""
        if self.fcount <= 0:
            self.fcount = self.fsize = 0
            self._fhead = None
            return
        row = self.file.db.execute(
            "SELECT rank, seq FROM paged WHERE queue = ? AND (rank, seq) > (?, ?) ORDER BY rank, seq LIMIT 1",
            (self.id, *(self._read_upto or _BEFORE_ALL)),
        ).fetchone()
        head = (row[0], row[1]) if row is not None else None
        for row in self._unwritten:
            if head is None or (row[0], row[1]) < head:
                head = (row[0], row[1])
        self._fhead = head
        if head is None:
            self.fcount = self.fsize = 0

    def _give_back(self, rows: list[PageRow]) -> list[Entry]:
        """``rows`` (unwritten) are not paged out after all: forget them, as entries."""
        self._unwritten = []
        self._unwritten_size = 0
        entries = [(rank, seq, read_page_record(record), size) for rank, seq, size, _, record in rows]
        self.fcount -= len(entries)
        self.fsize -= sum(entry[3] for entry in entries)
        with contextlib.suppress(sqlite3.Error):
            self._find_head()
        if self.fcount <= 0:
            self.fcount = self.fsize = 0
            self._fhead = None
        self._set_head()
        return entries

    def read(self, rows: int, size: int) -> list[Entry]:
        """Take the first messages (at least one, at most ``rows``, about ``size`` bytes) back.

        One statement for the page file, most of the time (each releases the GIL, which the
        store's writer thread may then hold for a while): a SELECT of the groups needed (and
        the next, for the new head).  The groups read are deleted together once
        :data:`DELETE_BYTES` of them were read (or the page is empty, or another statement
        comes); a group larger than the whole budget is taken in part and rewritten with the
        rest."""
        if not self.count:
            return []
        groups: list[tuple[Any, ...]] = []
        if self.fcount:
            wanted = min(rows // GROUP_ROWS, size // GROUP_BYTES) + 2
            groups = self._write().execute(
                "SELECT rank, seq, count, size, record, id FROM paged WHERE queue = ? AND (rank, seq) > (?, ?) "
                "ORDER BY rank, seq LIMIT ?",
                (self.id, *(self._read_upto or _BEFORE_ALL), wanted),
            ).fetchall()
        # (the recovered backlog is read in rows, 200 at a time: the read ends where what was
        # read of it ends, unless that is its end)
        stored = self.tail.peek(min(rows, TAIL_ROWS) + 1) if self.tail is not None else []
        stored_end = len(stored) if len(stored) <= min(rows, TAIL_ROWS) else len(stored) - 1
        taken: list[Entry] = []
        total = 0
        index = next_stored = 0
        rest: tuple[int, list[PageRow]] | None = None  # (a group taken in part: its id, what stays)
        from_file = file_size = 0
        while len(taken) < rows:
            group = groups[index] if index < len(groups) else None
            if next_stored == stored_end and stored_end < len(stored):
                break
            if next_stored < len(stored) and (group is None or stored[next_stored][:2] < group[:2]):
                rank, seq, _, _, counted, redelivery, record = stored[next_stored]
                if taken and total + counted > size:
                    break
                taken.append((rank, seq, _decode(record, redelivery), counted))
                total += counted
                next_stored += 1
                continue
            if group is None:
                break
            _, _, count, group_size, record, group_id = group
            members = read_group(record)
            if len(taken) + count <= rows and (total + group_size <= size or (not taken and count == 1)):
                part = count
            elif taken:  # (groups are not split but for the first: a read ends at a group's end)
                break
            else:  # (the part of the group that fits, at least one message)
                part = 0
                budget = total
                while part < count and len(taken) + part < rows and (
                        not (taken or part) or budget + members[part][2] <= size):
                    budget += members[part][2]
                    part += 1
                if not part:
                    break
            for member_rank, member_seq, counted, _, message_record in members[:part]:
                taken.append((member_rank, member_seq, read_page_record(message_record), counted))
                file_size += counted
            total += sum(member[2] for member in members[:part])
            from_file += part
            if part < count:
                rest = (group_id, members[part:])
                break
            index += 1
        if from_file:
            if rest is not None:  # (the first group, split: nothing else was taken from the file)
                try:
                    with self.file.transaction() as db:
                        self._delete_read(db)
                        self._rewrite(db, *rest)
                except sqlite3.Error:
                    # the page file cannot be written (its disk full, as paging may leave it): the
                    # group is taken whole instead, nothing written (one group past the budget)
                    for member_rank, member_seq, counted, _, message_record in rest[1]:
                        taken.append((member_rank, member_seq, read_page_record(message_record), counted))
                        file_size += counted
                    from_file += len(rest[1])
                    rest = None
                    index += 1
                else:
                    self._read_upto = None
                    self._read_size = 0
            if rest is None:
                self._read_upto = (groups[index - 1][0], groups[index - 1][1])
                self._read_size += file_size
                if self._read_size >= DELETE_BYTES or from_file >= self.fcount:
                    with contextlib.suppress(sqlite3.Error):  # (else deleted with the next statement)
                        self._live()
            self.fcount -= from_file
            self.fsize -= file_size
            if rest is not None:
                self._fhead = (rest[1][0][0], rest[1][0][1])
            elif index < len(groups):
                self._fhead = (groups[index][0], groups[index][1])
            else:
                self._find_head()
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
        is spent: :attr:`stopped` is then the key searched up to (None: searched to the end),
        the last one it looked at: it always looks at one message at least, so ``stopped`` is
        past ``after`` and a search resumed there moves on."""
        self.stopped = None
        deadline = time.monotonic() + budget if budget is not None else None
        last: Key | None = None
        taken: list[Entry] = []
        from_groups: dict[int, set[int]] = {}
        stored: list[BacklogRow] = []
        total = 0
        scans: list[Iterator[ScanRow]] = [self._scan(after)]
        if self.tail is not None:
            scans.append(self.tail.scan(after))
        for examined, (rank, seq, group_id, counted, redelivery, record, row) in enumerate(heapq.merge(*scans), 1):
            if before is not None and (rank, seq) >= before:
                break
            if (deadline is not None and last is not None and not examined % SEARCH_CLOCK_EVERY
                    and time.monotonic() > deadline):
                self.stopped = last
                break
            last = (rank, seq)
            message = read_page_record(record) if row is None else _decode(record, redelivery)
            if predicate(message):
                if taken and total + counted > size:
                    break
                taken.append((rank, seq, message, counted))
                if row is None:
                    from_groups.setdefault(group_id or 0, set()).add(seq)
                else:
                    stored.append(row)
                total += counted
                if len(taken) >= rows:
                    break
        if stored:
            assert self.tail is not None
            self.tail.take(stored)
        if from_groups:
            self._take_from_groups(from_groups)
        self._set_head()
        return taken

    def _scan(self, after: Key | None = None) -> Iterator[ScanRow]:
        """Every message of the page file past ``after``, in order, read a few groups at a time."""
        if not self.fcount:
            return
        db = self._live()
        if after is None:
            after = (-(2**62), -(2**62))
        else:  # (the group ``after`` falls in: its messages past it)
            found = db.execute(
                "SELECT id, last_rank, last_seq, record FROM paged WHERE queue = ? AND (rank, seq) <= (?, ?) "
                "ORDER BY rank DESC, seq DESC LIMIT 1", (self.id, *after),
            ).fetchone()
            if found is not None and (found[1], found[2]) > after:
                for rank, seq, counted, _, record in read_group(found[3]):
                    if (rank, seq) > after:
                        yield rank, seq, found[0], counted, 0, record, None
        position = after
        while True:
            chunk = db.execute(
                "SELECT id, rank, seq, record FROM paged WHERE queue = ? AND (rank, seq) > (?, ?) "
                "ORDER BY rank, seq LIMIT ?",
                (self.id, position[0], position[1], SCAN_GROUPS),
            ).fetchall()
            for group_id, _, _, group in chunk:
                for rank, seq, counted, _, record in read_group(group):
                    yield rank, seq, group_id, counted, 0, record, None
            if len(chunk) < SCAN_GROUPS:
                return
            position = (chunk[-1][1], chunk[-1][2])

    def _take_from_groups(self, taken: dict[int, set[int]]) -> None:
        """Take the messages with these seqs out of these groups (group id -> seqs)."""
        count = size = 0
        self._live()
        with self.file.transaction() as db:
            for group_id, seqs in taken.items():
                found = db.execute("SELECT record FROM paged WHERE id = ?", (group_id,)).fetchone()
                if found is None:
                    continue
                keep = []
                for row in read_group(found[0]):
                    if row[1] in seqs:
                        count += 1
                        size += row[2]
                    else:
                        keep.append(row)
                self._rewrite(db, group_id, keep)
        self.fcount -= count
        self.fsize -= size
        self._find_head()

    def take_ids(self, message_ids: set[str]) -> list[Entry]:
        """Take the messages with these ids, in order."""
        return self.search(lambda message: message.message_id in message_ids, self.count or 1, 2**62)

    def take_expired(self, now_ms: int) -> list[Entry]:
        """Take the messages of the page file expired at ``now_ms`` (a recovered backlog's
        expired messages are dropped when they are reached)."""
        if not self.fcount:
            return []
        db = self._live()
        groups = db.execute(
            "SELECT id, record FROM paged WHERE queue = ? AND expiration > 0 AND expiration <= ?", (self.id, now_ms),
        ).fetchall()
        if not groups:
            return []
        taken: list[Entry] = []
        size = 0
        with self.file.transaction() as db:
            for group_id, record in groups:
                keep = []
                for row in read_group(record):
                    if 0 < row[3] <= now_ms:
                        taken.append((row[0], row[1], read_page_record(row[4]), row[2]))
                        size += row[2]
                    else:
                        keep.append(row)
                self._rewrite(db, group_id, keep)
        self.fcount -= len(taken)
        self.fsize -= size
        self._find_head()
        self._set_head()
        taken.sort(key=_row_key)
        return taken

    def take_all(self) -> list[Entry]:
        """Take every paged message, in order (a recovered backlog is read :data:`TAIL_ROWS` at a time:
        read until nothing is left; until 2026-11-29 only the first read was taken)."""
        taken: list[Entry] = []
        while self.count:
            entries = self.read(self.count, 2**62)
            if not entries:
                break
            taken.extend(entries)
        return taken

    def peek(self, limit: int) -> list[Entry]:
        """The first ``limit`` paged messages, left where they are."""
        if not self.count or limit <= 0:
            return []
        rows: list[tuple[int, int, int, Message]] = []
        if self.fcount:
            cursor = self._live().execute(
                "SELECT record FROM paged WHERE queue = ? ORDER BY rank, seq", (self.id,)
            )
            try:
                for (group,) in cursor:
                    rows.extend((rank, seq, counted, read_page_record(record))
                                for rank, seq, counted, _, record in read_group(group))
                    if len(rows) >= limit:
                        break
            finally:
                cursor.close()
            del rows[limit:]
        if self.tail is not None:
            rows.extend((rank, seq, counted, _decode(record, redelivery))
                        for rank, seq, _, _, counted, redelivery, record in self.tail.peek(limit))
            rows.sort(key=lambda row: (row[0], row[1]))
        return [(rank, seq, message, size) for rank, seq, size, message in rows[:limit]]

    def clear(self) -> None:
        """Forget every paged message."""
        self._unwritten = []
        self._unwritten_size = 0
        if self.fcount or self._read_upto is not None:
            self.file.write().execute("DELETE FROM paged WHERE queue = ?", (self.id,))
        self._read_upto = None
        self._read_size = 0
        self._last_keys = {}
        self.fcount = self.fsize = 0
        self._fhead = None
        self.tail = None
        self.head = None


_BEFORE_ALL: Key = (-(2**62), -(2**62))
"""A key before every queue key."""


def _row_key(row: Any) -> tuple[int, int]:
    return row[0], row[1]


def _chunks(rows: list[PageRow]) -> Iterator[list[PageRow]]:
    """``rows`` cut into groups of at most :data:`GROUP_ROWS` messages, each closed once it
    holds :data:`GROUP_BYTES` (the message that passes it is the group's last)."""
    chunk: list[PageRow] = []
    size = 0
    for row in rows:
        chunk.append(row)
        size += row[2]
        if len(chunk) >= GROUP_ROWS or size >= GROUP_BYTES:  # (as a write is due: one group per write)
            yield chunk
            chunk = []
            size = 0
    if chunk:
        yield chunk


_INSERT_GROUP = (
    "INSERT INTO paged (queue, rank, seq, last_rank, last_seq, count, size, expiration, record) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_LAST_AT_OR_BEFORE = (
    "SELECT id, last_rank, last_seq FROM paged WHERE queue = ? AND (rank, seq) <= (?, ?) AND (rank, seq) > (?, ?) "
    "ORDER BY rank DESC, seq DESC LIMIT 1"
)
_GROUPS_AT_OR_BEFORE = (
    "SELECT id, last_rank, last_seq, record FROM paged WHERE queue = ? AND (rank, seq) <= (?, ?) "
    "AND (rank, seq) > (?, ?) ORDER BY rank DESC, seq DESC"
)


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
