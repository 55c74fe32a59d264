"""The SQLite message store's tables, their versions and the migrations between them.

Layout (schema 3): ``messages`` has one row per stored message *per queue key*
(a queue, or a durable subscription): its place (``queue``, ``rank`` =
-priority, ``seq``), id, expiration, redelivery count and record size.  A
message kept for one queue key carries its record in the row (``record``).  A
message kept for several (a persistent message published to a topic with
several durable subscriptions) is stored once: its record is one row of
``bodies``, and each subscription's row refers to it (``body``; its own
``record`` is empty).  A body is deleted in the transaction that deletes its
last referring row (acknowledgement, expiry, a move to a dead-letter queue, an
unsubscribe): :data:`RELEASE_BODY` looks for another row through the partial
index ``messages_body``, so no reference count has to be kept right, and the
rows of plain queue messages (no ``body``) cost that index nothing.

This module holds SQL only: what runs it, and when, is
:mod:`gateway.broker.store.sqlite_store`'s business.
"""

from __future__ import annotations

import sqlite3

APPLICATION_ID = 0x4A4D5347  # "JMSG": marks a file as a jmsgateway message store
SCHEMA_VERSION = 3
"""2: ``rank`` (-priority) and ``size`` columns and the ``messages_order`` index (lazy recovery).
3: the ``bodies`` table and ``messages.body``: one stored copy of a topic message for all its
durable subscriptions."""

TABLES = {1: {"messages", "durables"}, 2: {"messages", "durables"}, 3: {"messages", "durables", "bodies"}}
"""The tables a store of each schema version has."""

ORDER_INDEX = "CREATE INDEX messages_order ON messages (queue, rank, seq, size)"
"""A queue's messages in dispatch order (lazy recovery reads a backlog from it, and
counts it without reading the records)."""

REDELIVERED_INDEX = "CREATE INDEX messages_redelivered ON messages (seq) WHERE redelivery > 0"
"""The messages delivered before (a restart dead-letters those past max_redeliveries
without reading the others)."""

BODY_INDEX = "CREATE INDEX messages_body ON messages (body) WHERE body IS NOT NULL"
"""The rows that refer to a shared body (only those: a queue message's row is not in it)."""

BODIES = "CREATE TABLE bodies (id INTEGER PRIMARY KEY, record BLOB NOT NULL)"
"""Records stored once for several rows of ``messages``; ``id`` is the ``seq`` of the first row
that refers to it (new rows get larger ``seq``: ids are never reused while a body exists)."""

CREATE = (
    """CREATE TABLE messages (
        seq INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        message_id TEXT NOT NULL,
        expiration INTEGER NOT NULL,
        redelivery INTEGER NOT NULL,
        record BLOB NOT NULL,
        rank INTEGER NOT NULL DEFAULT 0,
        size INTEGER NOT NULL DEFAULT 0,
        body INTEGER
    )""",
    ORDER_INDEX,
    REDELIVERED_INDEX,
    BODIES,
    BODY_INDEX,
    """CREATE TABLE durables (
        key TEXT PRIMARY KEY,
        destination TEXT NOT NULL,
        selector TEXT,
        owner TEXT
    )""",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)
"""A new store."""

DURABLE_OWNER = "ALTER TABLE durables ADD COLUMN owner TEXT"
"""The login that created a durable subscription (added to stores of any schema version that lack it:
earlier versions read the table by column name, so the file stays readable by them)."""

MIGRATE_1_TO_2 = (
    "ALTER TABLE messages ADD COLUMN rank INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE messages ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
    # (the record's fourth byte is the priority, sqlite_records._FIXED)
    "UPDATE messages SET size = length(record), "
    "rank = -(instr('0123456789ABCDEF', substr(hex(substr(record, 4, 1)), 1, 1)) - 1) * 16 "
    "- (instr('0123456789ABCDEF', substr(hex(substr(record, 4, 1)), 2, 1)) - 1)",
    ORDER_INDEX,
    REDELIVERED_INDEX,
    "PRAGMA user_version = 2",
)

MIGRATE_2_TO_3 = (
    "ALTER TABLE messages ADD COLUMN body INTEGER",
    BODIES,
    BODY_INDEX,
)
"""Then :func:`share_copies`, then ``user_version`` 3."""

RECORD = (
    "CASE WHEN messages.body IS NULL THEN messages.record "
    "ELSE coalesce((SELECT bodies.record FROM bodies WHERE bodies.id = messages.body), x'') END"
)
"""A ``messages`` row's record, wherever it is kept (a column expression; an empty record,
which no reader accepts, if its body is missing)."""

INSERT = (
    "INSERT INTO messages (seq, queue, message_id, expiration, redelivery, record, rank, size, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_BODY = "INSERT INTO bodies (id, record) VALUES (?, ?)"
SET_REDELIVERY = "UPDATE messages SET redelivery = ? WHERE seq = ?"
DELETE = "DELETE FROM messages WHERE seq = ? RETURNING body"
DELETE_SEQS = "DELETE FROM messages WHERE seq IN ({}) RETURNING body"
"""Several rows at once: format with as many ``?`` (comma-separated) as rows, at most :data:`SEQS_AT_ONCE`."""
SEQS_AT_ONCE = 500
DELETE_QUEUE = "DELETE FROM messages WHERE queue = ? RETURNING body"
DELETE_EXPIRED = "DELETE FROM messages WHERE expiration > 0 AND expiration <= ? RETURNING body"
RELEASE_BODY = (
    "DELETE FROM bodies WHERE id = ?1 "
    "AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY messages_body WHERE body = ?1)"
)
"""Deletes the body ``?1`` unless a row still refers to it (run after deleting rows)."""


def release(db: sqlite3.Connection, deleted: sqlite3.Cursor) -> int:
    """Delete the bodies that no row refers to any more among those of the rows ``deleted``
    (a ``DELETE ... RETURNING body`` just executed); returns how many rows it deleted."""
    rows = 0
    bodies = set()
    for (body,) in deleted:
        rows += 1
        if body is not None:
            bodies.add(body)
    if bodies:
        db.executemany(RELEASE_BODY, [(body,) for body in bodies])
    return rows


def share_copies(db: sqlite3.Connection) -> int:
    """Migration to schema 3: the copies earlier versions kept of one topic message, one per
    durable subscription (same message id, same record), become one body that their rows
    refer to.  Returns how many rows now share a body."""
    groups = db.execute(
        "SELECT message_id, group_concat(seq) FROM messages WHERE queue GLOB 'durable:*' AND body IS NULL "
        "GROUP BY message_id HAVING count(*) > 1"
    ).fetchall()
    shared = 0
    for _, seqs in groups:
        rows = db.execute(
            f"SELECT seq, record FROM messages WHERE seq IN ({','.join('?' * len(seqs.split(',')))}) ORDER BY seq",
            [int(seq) for seq in seqs.split(",")],
        ).fetchall()
        copies: dict[bytes, list[int]] = {}
        for seq, record in rows:
            copies.setdefault(bytes(record), []).append(seq)
        for record, same in copies.items():
            if len(same) < 2:
                continue
            db.execute(INSERT_BODY, (same[0], record))
            db.executemany("UPDATE messages SET body = ?, record = x'' WHERE seq = ?", [(same[0], seq) for seq in same])
            shared += len(same)
    return shared
