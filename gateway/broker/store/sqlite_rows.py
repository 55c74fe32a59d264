"""Where each stored message is: the SQLite store's in-memory row index.

The ``messages`` table is keyed by its row number (``seq``, insertion
order) alone.  :class:`RowIndex` remembers which rows hold which
(queue key, message id), so acknowledging, counting a redelivery or
dropping a durable subscription finds its rows without a second B-tree in
the file: each commit writes one page fewer, and the fsync that every
RECEIPT waits for gets shorter.  It lives on the writer thread only; every
change records its undo in the :class:`TransactionJournal`, so a rolled
back transaction leaves the index as it was.  The same message id twice on
one queue (a bridge redelivering, say) is two rows, taken oldest first.
"""

from __future__ import annotations

import bisect

from gateway.broker.store.sqlite_writer import TransactionJournal

Rows = int | list[int]
"""The row of a message id on one queue, or its rows (oldest first) when it is there more than once."""


def _first(rows: Rows) -> int:
    return rows if isinstance(rows, int) else rows[0]


class RowIndex:
    """(queue key, message id) -> row numbers, oldest first.

    A message id held once (nearly always) maps to its row number alone, not a
    list: a deep backlog's index costs the id, the number and a dict slot.
    """

    __slots__ = ("_journal", "_queues", "next_seq")

    def __init__(self, journal: TransactionJournal) -> None:
        self._journal = journal
        self._queues: dict[str, dict[str, Rows]] = {}
        self.next_seq = 1

    def __len__(self) -> int:
        return sum(1 if isinstance(rows, int) else len(rows) for ids in self._queues.values() for rows in ids.values())

    def load(self, queue: str, message_id: str, seq: int) -> None:
        """Record a row found in the file (recovery; rows come in ``seq`` order)."""
        self._add(queue, message_id, seq)
        if seq >= self.next_seq:
            self.next_seq = seq + 1

    def _add(self, queue: str, message_id: str, seq: int) -> None:
        ids = self._queues.get(queue)
        if ids is None:
            ids = self._queues[queue] = {}
        rows = ids.get(message_id)
        if rows is None:
            ids[message_id] = seq
        elif isinstance(rows, int):
            ids[message_id] = sorted((rows, seq))
        else:
            bisect.insort(rows, seq)

    def allocate(self, queue: str, message_id: str) -> int:
        """The row number for a new row of ``message_id`` on ``queue``."""
        seq = self.next_seq
        self.next_seq += 1
        self._add(queue, message_id, seq)
        self._journal.record(lambda: self._forget(queue, message_id, seq))
        return seq

    def find(self, queue: str, message_id: str) -> int | None:
        """The oldest row of ``message_id`` on ``queue``, if any."""
        ids = self._queues.get(queue)
        rows = ids.get(message_id) if ids is not None else None
        return _first(rows) if rows is not None else None

    def take(self, queue: str, message_id: str) -> int | None:
        """Remove and return the oldest row of ``message_id`` on ``queue``."""
        seq = self.find(queue, message_id)
        if seq is not None:
            self._forget(queue, message_id, seq)
            self._journal.record(lambda: self._restore(queue, message_id, seq))
        return seq

    def take_queue(self, queue: str) -> list[int]:
        """Remove and return every row of ``queue``."""
        ids = self._queues.pop(queue, None)
        if ids is None:
            return []

        def restore() -> None:
            self._queues[queue] = ids

        self._journal.record(restore)
        return [seq for rows in ids.values() for seq in ([rows] if isinstance(rows, int) else rows)]

    def _forget(self, queue: str, message_id: str, seq: int) -> None:
        ids = self._queues[queue]
        rows = ids[message_id]
        if isinstance(rows, int):
            del ids[message_id]
        else:
            rows.remove(seq)
            if len(rows) == 1:
                ids[message_id] = rows[0]
        if not ids:
            del self._queues[queue]

    def _restore(self, queue: str, message_id: str, seq: int) -> None:
        self._add(queue, message_id, seq)
