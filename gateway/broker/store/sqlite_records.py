"""The stored form of a message: a compact, versioned binary record.

:func:`encode_message` turns any :class:`Message` (Text, Bytes, Map, Object,
Stream or a bodiless one) into bytes and :func:`decode_message` turns them
back, field for field: the JMS header fields, typed properties and the body.
Property, map and stream values keep their type (None, bool, int, float, str,
bytes, and lists / string-keyed dicts of those).  The format has a version
byte so a later version can still read older databases.  This module knows
nothing of SQLite; it raises :class:`StoreError` for what it cannot encode or
read.
"""

from __future__ import annotations

import struct
from typing import Any

from gateway.errors import StoreError
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    Message,
    ObjectMessage,
    StreamMessage,
    TextMessage,
)

RECORD_VERSION = 1

_KINDS: dict[str, int] = {"message": 0, "text": 1, "bytes": 2, "map": 3, "object": 4, "stream": 5}
_CLASSES: dict[int, type[Message]] = {
    0: Message,
    1: TextMessage,
    2: BytesMessage,
    3: MapMessage,
    4: ObjectMessage,
    5: StreamMessage,
}

# version, kind, flags, priority, expiration, timestamp, redelivery count
_FIXED = struct.Struct("<BBBBqqI")
_LENGTH = struct.Struct("<I")
_INT64 = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")

_PERSISTENT = 1
_REDELIVERED = 2
_HAS_CORRELATION = 4
_HAS_REPLY_TO = 8
_HAS_TYPE = 16

# value tags
_NONE, _TRUE, _FALSE, _INT, _BIGINT, _FLOAT, _STR, _BYTES, _LIST, _DICT = b"NTFiIdsblm"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def blob(self, data: bytes) -> None:
        self.out += _LENGTH.pack(len(data))
        self.out += data

    def text(self, value: str) -> None:
        self.blob(value.encode("utf-8", "surrogatepass"))

    def value(self, value: Any) -> None:
        out = self.out
        if value is None:
            out.append(_NONE)
        elif value is True:
            out.append(_TRUE)
        elif value is False:
            out.append(_FALSE)
        elif isinstance(value, int):
            if _INT64_MIN <= value <= _INT64_MAX:
                out.append(_INT)
                out += _INT64.pack(value)
            else:
                out.append(_BIGINT)
                self.text(str(value))
        elif isinstance(value, float):
            out.append(_FLOAT)
            out += _DOUBLE.pack(value)
        elif isinstance(value, str):
            out.append(_STR)
            self.text(value)
        elif isinstance(value, bytes | bytearray | memoryview):
            out.append(_BYTES)
            self.blob(bytes(value))
        elif isinstance(value, list | tuple):
            out.append(_LIST)
            out += _LENGTH.pack(len(value))
            for item in value:
                self.value(item)
        elif isinstance(value, dict):
            out.append(_DICT)
            self.mapping(value)
        else:
            raise StoreError(f"cannot store a value of type {type(value).__name__}: {value!r:.60}")

    def mapping(self, values: dict[str, Any]) -> None:
        self.out += _LENGTH.pack(len(values))
        for key, item in values.items():
            if not isinstance(key, str):
                raise StoreError(f"cannot store a map key of type {type(key).__name__}: {key!r:.60}")
            self.text(key)
            self.value(item)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def length(self) -> int:
        (size,) = _LENGTH.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(size)

    def blob(self) -> bytes:
        size = self.length()
        end = self.pos + size
        if end > len(self.data):
            raise ValueError("truncated record")
        chunk = bytes(self.data[self.pos:end])
        self.pos = end
        return chunk

    def text(self) -> str:
        return self.blob().decode("utf-8", "surrogatepass")

    def value(self) -> Any:
        tag = self.data[self.pos]
        self.pos += 1
        if tag == _NONE:
            return None
        if tag == _TRUE:
            return True
        if tag == _FALSE:
            return False
        if tag == _INT:
            (number,) = _INT64.unpack_from(self.data, self.pos)
            self.pos += 8
            return number
        if tag == _BIGINT:
            return int(self.text())
        if tag == _FLOAT:
            (real,) = _DOUBLE.unpack_from(self.data, self.pos)
            self.pos += 8
            return real
        if tag == _STR:
            return self.text()
        if tag == _BYTES:
            return self.blob()
        if tag == _LIST:
            return [self.value() for _ in range(self.length())]
        if tag == _DICT:
            return self.mapping()
        raise ValueError(f"unknown value tag {tag!r}")

    def mapping(self) -> dict[str, Any]:
        return {self.text(): self.value() for _ in range(self.length())}


def encode_message(message: Message) -> bytes:
    """The stored form of ``message`` (StoreError if a value cannot be stored)."""
    kind = _KINDS.get(message.kind)
    if kind is None:
        raise StoreError(f"cannot store message {message.message_id}: unknown message kind {message.kind!r}")
    flags = (
        (_PERSISTENT if message.persistent else 0)
        | (_REDELIVERED if message.redelivered else 0)
        | (_HAS_CORRELATION if message.correlation_id is not None else 0)
        | (_HAS_REPLY_TO if message.reply_to is not None else 0)
        | (_HAS_TYPE if message.type is not None else 0)
    )
    writer = _Writer()
    try:
        writer.out += _FIXED.pack(
            RECORD_VERSION, kind, flags, message.priority, message.expiration, message.timestamp,
            message.redelivery_count,
        )
    except struct.error as error:
        raise StoreError(f"cannot store message {message.message_id}: {error}") from None
    writer.text(message.destination)
    writer.text(message.message_id)
    if message.correlation_id is not None:
        writer.text(message.correlation_id)
    if message.reply_to is not None:
        writer.text(message.reply_to)
    if message.type is not None:
        writer.text(message.type)
    writer.mapping(message.properties)
    if isinstance(message, TextMessage):
        writer.value(message.text)
    elif isinstance(message, BytesMessage):
        writer.blob(message.body)
    elif isinstance(message, MapMessage):
        writer.mapping(message.map)
    elif isinstance(message, ObjectMessage):
        writer.text(message.encoding)
        writer.blob(message.payload)
    elif isinstance(message, StreamMessage):
        writer.value(list(message.items))
    return bytes(writer.out)


def decode_message(record: bytes) -> Message:
    """The message stored as ``record``; ValueError if it is not a valid record."""
    try:
        version, kind, flags, priority, expiration, timestamp, redeliveries = _FIXED.unpack_from(record, 0)
        if version != RECORD_VERSION:
            raise ValueError(f"unknown record version {version}")
        cls = _CLASSES.get(kind)
        if cls is None:
            raise ValueError(f"unknown message kind {kind}")
        reader = _Reader(record, _FIXED.size)
        message = cls(
            destination=reader.text(),
            message_id=reader.text(),
            persistent=bool(flags & _PERSISTENT),
            redelivered=bool(flags & _REDELIVERED),
            priority=priority,
            expiration=expiration,
            timestamp=timestamp,
            redelivery_count=redeliveries,
        )
        if flags & _HAS_CORRELATION:
            message.correlation_id = reader.text()
        if flags & _HAS_REPLY_TO:
            message.reply_to = reader.text()
        if flags & _HAS_TYPE:
            message.type = reader.text()
        message.properties = reader.mapping()
        if isinstance(message, TextMessage):
            message.text = reader.value()
        elif isinstance(message, BytesMessage):
            message.body = reader.blob()
        elif isinstance(message, MapMessage):
            message.map = reader.mapping()
        elif isinstance(message, ObjectMessage):
            message.encoding = reader.text()
            message.payload = reader.blob()
        elif isinstance(message, StreamMessage):
            message.items = reader.value()
        if reader.pos != len(record):
            raise ValueError(f"{len(record) - reader.pos} bytes left over")
        return message
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise ValueError(f"truncated or garbled record: {error}") from None


def record_header(record: bytes) -> tuple[int, int]:
    """(priority, expiration) of the stored ``record``, without decoding the rest
    (ValueError if it is not a record this version reads)."""
    try:
        version, _, _, priority, expiration, _, _ = _FIXED.unpack_from(record, 0)
    except struct.error as error:
        raise ValueError(f"truncated record: {error}") from None
    if version != RECORD_VERSION:
        raise ValueError(f"unknown record version {version}")
    return priority, expiration
