"""The page file's form of a message: :mod:`marshal`, for this process only.

A paged-out message is read back by the process that wrote it (the page file is
deleted at every start), so it needs no stable, versioned format as the message
store's records do (:mod:`gateway.broker.store.sqlite_records`): :func:`page_record` is the
message's class and fields as one marshalled tuple, which C code writes and reads
(about 1 µs each way for a 1 KB message, a quarter of the store's record).  A group
of paged-out messages (one page-file row) is a marshalled list of their queue keys,
counted sizes, expirations and records (:func:`group_record`, :func:`read_group`).

``marshal`` builds values only (it runs no code); the file lives under ``data_dir``
with the message store.  A value it cannot write (a property of a type no connector
makes) is a :class:`StoreError`, as the store's encoder reports one.
"""

from __future__ import annotations

import marshal
from dataclasses import fields
from operator import attrgetter
from typing import Any

from gateway.errors import StoreError
from gateway.message.model import BytesMessage, MapMessage, Message, ObjectMessage, StreamMessage, TextMessage

PageRow = tuple[int, int, int, int, bytes]
"""One paged-out message: (rank, seq, counted size, expiration, :func:`page_record`)."""

_CLASSES: tuple[type[Message], ...] = (Message, TextMessage, BytesMessage, MapMessage, ObjectMessage, StreamMessage)
_CODES: dict[type[Message], int] = {cls: code for code, cls in enumerate(_CLASSES)}
_BY_KIND: dict[str, int] = {cls.kind: code for code, cls in enumerate(_CLASSES)}
_VALUES: tuple[Any, ...] = tuple(attrgetter(*(field.name for field in fields(cls))) for cls in _CLASSES)
"""Per class: its fields' values as a tuple, in the order its constructor takes them."""

_dumps = marshal.dumps
_loads = marshal.loads


def page_record(message: Message) -> bytes:
    """``message`` as the page file keeps it."""
    code = _CODES.get(type(message))
    if code is None:  # (a subclass: kept as the model class of its kind)
        code = _BY_KIND.get(message.kind)
        if code is None:
            raise StoreError(f"cannot page out message {message.message_id}: unknown message kind {message.kind!r}")
    try:
        return _dumps((code, _VALUES[code](message)))
    except ValueError as error:  # (marshal: "unmarshallable object")
        raise StoreError(f"cannot page out message {message.message_id}: {error}") from None


def read_page_record(record: bytes) -> Message:
    """The message :func:`page_record` wrote."""
    code, values = _loads(record)
    message: Message = _CLASSES[code](*values)
    return message


def group_record(rows: list[PageRow]) -> bytes:
    """Paged-out messages (in queue order) as one page-file row."""
    return _dumps(rows, 3)  # (version 3: a list of tuples of bytes in a third of version 4's time)


def read_group(record: bytes) -> list[PageRow]:
    """The paged-out messages of one page-file row, in queue order."""
    rows: list[PageRow] = _loads(record)
    return rows
