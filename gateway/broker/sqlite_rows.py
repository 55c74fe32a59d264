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

from gateway.broker.sqlite_writer import TransactionJournal


class RowIndex:
    """(queue key, message id) -> row numbers, oldest first."""

    __slots__ = ("_journal", "_queues", "next_seq")

    def __init__(self, journal: TransactionJournal) -> None:
        self._journal = journal
        self._queues: dict[str, dict[str, list[int]]] = {}
        self.next_seq = 1

    def __len__(self) -> int:
        return sum(len(seqs) for ids in self._queues.values() for seqs in ids.values())

    def load(self, queue: str, message_id: str, seq: int) -> None:
        """Record a row found in the file (recovery; rows come in ``seq`` order)."""
        self._queues.setdefault(queue, {}).setdefault(message_id, []).append(seq)
        if seq >= self.next_seq:
            self.next_seq = seq + 1

    def allocate(self, queue: str, message_id: str) -> int:
        """The row number for a new row of ``message_id`` on ``queue``."""
        seq = self.next_seq
        self.next_seq += 1
        self._queues.setdefault(queue, {}).setdefault(message_id, []).append(seq)
        self._journal.record(lambda: self._forget(queue, message_id, seq))
        return seq

    def find(self, queue: str, message_id: str) -> int | None:
        """The oldest row of ``message_id`` on ``queue``, if any."""
        ids = self._queues.get(queue)
        seqs = ids.get(message_id) if ids is not None else None
        return seqs[0] if seqs else None

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
        return [seq for seqs in ids.values() for seq in seqs]

    def _forget(self, queue: str, message_id: str, seq: int) -> None:
        ids = self._queues[queue]
        seqs = ids[message_id]
        seqs.remove(seq)
        if not seqs:
            del ids[message_id]
            if not ids:
                del self._queues[queue]

    def _restore(self, queue: str, message_id: str, seq: int) -> None:
        bisect.insort(self._queues.setdefault(queue, {}).setdefault(message_id, []), seq)
