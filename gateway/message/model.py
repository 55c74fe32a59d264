"""The JMS-style message model every layer speaks.

A :class:`Message` carries the JMS header fields and typed properties; its
subclasses carry the body: :class:`TextMessage` (a ``str``),
:class:`BytesMessage` (``bytes``), and the other JMS types
(:class:`MapMessage`, :class:`ObjectMessage`, :class:`StreamMessage`) that
connectors and transformers may produce.  The model knows nothing of STOMP
or Kafka; :mod:`gateway.message.convert` owns those mappings.

Messages held by the broker are shared between subscribers: code that wants
to change one must work on :meth:`Message.copy`.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, ClassVar

PropertyValue = str | int | float | bool | bytes | None
"""A JMS property value: String, boolean, numeric (byte..long, float, double) or bytes."""


class DeliveryMode(IntEnum):
    """JMS delivery modes (``javax.jms.DeliveryMode``)."""

    NON_PERSISTENT = 1
    PERSISTENT = 2


DEFAULT_PRIORITY = 4

DUPLICATE_ID = "_AMQ_DUPL_ID"
"""The property carrying a bridge copy's id (Artemis's duplicate detection property): bridges write
it, the connectors' in-doubt probes read it back."""

MESSAGE_ID_PREFIX = f"ID:jmsgw-{os.getpid()}-{int(time.time() * 1000):x}-"
"""What every message id the gateway makes starts with (a decimal count follows)."""
MESSAGE_COUNT = itertools.count(1)
"""The count a message id's number is the next of: :func:`new_message_id` and the SEND conversion
(:func:`gateway.message.convert.frame_to_message`, which makes the id in place) share it."""


def new_message_id() -> str:
    """A process-unique JMS message id (``ID:`` prefix as JMS requires)."""
    return f"{MESSAGE_ID_PREFIX}{next(MESSAGE_COUNT)}"


def now_millis() -> int:
    """Wall-clock time in milliseconds since the epoch (JMSTimestamp units)."""
    return int(time.time() * 1000)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


@dataclass(slots=True, eq=False)
class Message:
    """A JMS message without a body (``javax.jms.Message``).

    :ivar destination: the destination name as the gateway sees it
        (``/queue/a``, ``/topic/b``, ``/temp-queue/c``).
    :ivar message_id: JMSMessageID, unique per message.
    :ivar expiration: JMSExpiration in ms since the epoch; 0 means never.
    :ivar timestamp: JMSTimestamp in ms since the epoch.
    :ivar redelivery_count: how often delivery was tried and not acknowledged
        (``JMSXDeliveryCount`` - 1).
    :ivar properties: user properties; STOMP user headers arrive as strings.
    """

    destination: str = ""
    message_id: str = ""
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None
    persistent: bool = False
    priority: int = DEFAULT_PRIORITY
    expiration: int = 0
    timestamp: int = 0
    redelivered: bool = False
    redelivery_count: int = 0
    properties: dict[str, PropertyValue] = field(default_factory=dict)

    kind: ClassVar[str] = "message"
    """Short name of the JMS type: message, text, bytes, map, object, stream."""

    @property
    def delivery_mode(self) -> DeliveryMode:
        """JMSDeliveryMode derived from :attr:`persistent`."""
        return DeliveryMode.PERSISTENT if self.persistent else DeliveryMode.NON_PERSISTENT

    def is_expired(self, now_ms: int) -> bool:
        """Whether the message's expiration has passed at ``now_ms``."""
        return self.expiration > 0 and self.expiration <= now_ms

    def copy(self) -> Message:
        """A copy whose properties (and mutable body) can be changed freely."""
        cls = type(self)
        names = _FIELD_NAMES.get(cls)
        if names is None:
            names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
        duplicate = object.__new__(cls)
        for name in names:
            object.__setattr__(duplicate, name, getattr(self, name))
        duplicate.properties = dict(self.properties)
        return duplicate

    def body_size(self) -> int:
        """Approximate body size in bytes (for limits and metrics)."""
        return 0


@dataclass(slots=True, eq=False)
class TextMessage(Message):
    """A message whose body is text (``javax.jms.TextMessage``)."""

    text: str | None = None
    kind: ClassVar[str] = "text"

    def body_size(self) -> int:
        return len(self.text) if self.text else 0


@dataclass(slots=True, eq=False)
class BytesMessage(Message):
    """A message whose body is uninterpreted bytes (``javax.jms.BytesMessage``)."""

    body: bytes = b""
    kind: ClassVar[str] = "bytes"

    def body_size(self) -> int:
        return len(self.body)


@dataclass(slots=True, eq=False)
class MapMessage(Message):
    """A message whose body maps names to typed values (``javax.jms.MapMessage``)."""

    map: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = "map"

    def copy(self) -> Message:
        duplicate = Message.copy(self)
        assert isinstance(duplicate, MapMessage)
        duplicate.map = dict(self.map)
        return duplicate


@dataclass(slots=True, eq=False)
class ObjectMessage(Message):
    """A message carrying a serialized object (``javax.jms.ObjectMessage``).

    The gateway never deserializes it; :attr:`payload` holds the bytes and
    :attr:`encoding` says how they were produced (``java-serialized``, ``json``…).
    """

    payload: bytes = b""
    encoding: str = "java-serialized"
    kind: ClassVar[str] = "object"

    def body_size(self) -> int:
        return len(self.payload)


@dataclass(slots=True, eq=False)
class StreamMessage(Message):
    """A message whose body is a sequence of typed values (``javax.jms.StreamMessage``)."""

    items: list[Any] = field(default_factory=list)
    kind: ClassVar[str] = "stream"

    def copy(self) -> Message:
        duplicate = Message.copy(self)
        assert isinstance(duplicate, StreamMessage)
        duplicate.items = list(self.items)
        return duplicate
