"""MESSAGE frames for deliveries, written straight from the message.

:class:`MessageEncoder` belongs to one subscription of one connection: its
``destination`` and ``subscription`` lines are escaped and encoded once, for
the connection's version.  :meth:`MessageEncoder.encode` turns a Text or
Bytes message into the bytes ``encode_frame(message_to_frame(...))`` writes
(:mod:`gateway.message.convert`, :mod:`gateway.wire.codec`): the same
headers in the same order, escaped the same way, without building a headers
dict and a :class:`~gateway.wire.frame.Frame` per delivery.  Whatever only
the general encoder handles - a header the version cannot carry (a NUL, a
CR, a line break in 1.0, a lone surrogate), left out and counted there; a
property named like a header field the MESSAGE sets itself - makes it
answer None, and the caller takes the general path.

A message delivered to several subscriptions in a row (a topic's fan-out)
has its header text and body encoded once: the last message's are kept and
used again while the same message object comes back with the same
redelivery marks (the only fields a broker changes on a message it holds;
everything else is changed on a copy, :class:`~gateway.message.model.Message`).
"""

from __future__ import annotations

from gateway.message.convert import property_to_header
from gateway.message.model import MESSAGE_ID_PREFIX, BytesMessage, Message, PropertyValue, TextMessage

RESERVED = frozenset(
    {
        "destination",
        "message-id",
        "correlation-id",
        "reply-to",
        "type",
        "persistent",
        "priority",
        "expires",
        "timestamp",
        "redelivered",
        "content-length",
        "subscription",
        "ack",
        "amq-msg-type",
        "JMSXDeliveryCount",
    }
)
"""Headers a MESSAGE sets itself: a property of one of these names takes the general path (which
keeps its place or leaves it out as :func:`~gateway.message.convert.message_to_frame` says)."""


def _escape(text: str, escaped: bool) -> str | None:
    """``text`` as a header name or value of a MESSAGE; None where only the general encoder knows
    what to do (a NUL, a CR; a line break when nothing is escaped)."""
    if "\\" in text or ":" in text or "\n" in text or "\r" in text or "\x00" in text:
        if "\x00" in text or "\r" in text:
            return None
        if not escaped:
            return None if "\n" in text else text
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    return text


_ID_PREFIX_ESCAPED = _escape(MESSAGE_ID_PREFIX, True) or ""
"""The prefix of the gateway's message ids as a 1.1/1.2 header value (its ``:`` escaped once, here)."""
_ID_PREFIX_LENGTH = len(MESSAGE_ID_PREFIX)


def _name(text: str, escaped: bool) -> str | None:
    """A property name as a header name (in 1.0 a ``:`` cannot be in one)."""
    if not escaped and ":" in text:
        return None
    return _escape(text, escaped)


_last: tuple[Message, str, bool, int, int, bytes, bytes, bytes] | None = None
"""The last message encoded (any subscription): message, version, its redelivery marks and
property count, then the header lines between ``destination`` and ``subscription``, the
``content-length`` line and the body.  A module global, not a class attribute: assigning a class
attribute (once a delivery) makes CPython drop the cached look-ups of every attribute of the class's
instances (``encoder.version``, ``encoder.encode``) in the interpreted code that reads them."""


class MessageEncoder:
    """The MESSAGE frames of one subscription, for one STOMP version."""

    __slots__ = ("_escaped", "_lines", "_lines_of", "_lines_order", "_prefix", "_subscription", "destination",
                 "version")

    def __init__(self, subscription_id: str, destination: str, version: str) -> None:
        self.version = version
        self.destination = destination
        """What the ``destination`` line shows (a wildcard subscription's encoder: the last queue or topic)."""
        escaped = self._escaped = version != "1.0"
        shown = _escape(destination, escaped)
        sub_id = _escape(subscription_id, escaped)
        self._prefix: bytes | None = None  # (None: every MESSAGE of this subscription takes the general path)
        self._subscription = b""
        self._lines_of: dict[str, PropertyValue] | None = None
        """A copy of the string properties :attr:`_lines` shows (issue 39: a producer's messages
        usually carry the same ones, e.g. a ``content-type``; an equal dict shows the same lines)."""
        self._lines_order: list[str] = []
        self._lines = ""
        if shown is not None and sub_id is not None:
            try:
                self._subscription = f"subscription:{sub_id}\n".encode()
                self._prefix = f"MESSAGE\ndestination:{shown}\n".encode()
            except UnicodeEncodeError:
                pass

    def encode(self, message: Message, ack: str | None) -> bytes | None:
        """The MESSAGE frame of ``message`` with ``ack`` (1.2, not auto), or None: take the general path."""
        prefix = self._prefix
        if prefix is None:
            return None
        global _last
        last = _last
        if (
            last is not None
            and last[0] is message
            and last[1] == self.version
            and last[2] == message.redelivered
            and last[3] == message.redelivery_count
            and last[4] == len(message.properties)
        ):
            middle, length, body = last[5], last[6], last[7]
        else:
            parts = self._parts(message)
            if parts is None:
                return None
            middle, length, body = parts
            _last = (message, self.version, message.redelivered, message.redelivery_count,
                     len(message.properties), middle, length, body)
        if ack is None:
            return b"".join((prefix, middle, self._subscription, length, body, b"\x00"))
        ack_line: str | None = ack
        if "\\" in ack or ":" in ack or "\n" in ack or "\r" in ack or "\x00" in ack:  # (never in the session's ids)
            ack_line = _escape(ack, self._escaped)
            if ack_line is None:
                return None
        try:
            encoded_ack = f"ack:{ack_line}\n".encode()
        except UnicodeEncodeError:
            return None
        return b"".join((prefix, middle, self._subscription, encoded_ack, length, body, b"\x00"))

    def _parts(self, message: Message) -> tuple[bytes, bytes, bytes] | None:
        """The header lines from ``message-id`` to ``JMSXDeliveryCount``, the ``content-length``
        line with the blank line, and the body; None for the general path."""
        properties = message.properties
        escaped = self._escaped
        if properties:
            # (only string properties are kept: no other value equals them; dicts compare equal whatever
            # their order, the lines do not: one property has one order, more are compared in order)
            if properties == self._lines_of and (len(properties) == 1 or list(properties) == self._lines_order):
                shown_properties = self._lines
            else:
                if not RESERVED.isdisjoint(properties):
                    return None
                lines = _property_lines(properties, escaped)
                if lines is None:
                    return None
                shown_properties = lines
                if len(properties) <= _LINES_KEPT_MAX and all(type(value) is str for value in properties.values()):
                    self._lines_of = properties.copy()
                    self._lines_order = list(properties)
                    self._lines = shown_properties
        else:
            shown_properties = ""
        message_id = message.message_id
        tail = message_id[_ID_PREFIX_LENGTH:]
        shown: str | None
        if message_id.startswith(MESSAGE_ID_PREFIX) and tail.isdigit():  # (the gateway's own ids)
            shown = (_ID_PREFIX_ESCAPED if escaped else MESSAGE_ID_PREFIX) + tail
        else:
            shown = _escape(message_id, escaped)
            if shown is None:
                return None
        fields = ""
        if message.correlation_id is not None or message.reply_to is not None or message.type is not None:
            for name, field in (("correlation-id", message.correlation_id), ("reply-to", message.reply_to),
                                ("type", message.type)):
                if field is not None:
                    text = _escape(field, escaped)
                    if text is None:
                        return None
                    fields += f"{name}:{text}\n"
        if isinstance(message, BytesMessage):
            kind = _BYTES_LINE
            body = message.body
        else:
            assert isinstance(message, TextMessage)
            kind = _TEXT_LINE
            body = message.text.encode("utf-8") if message.text else b""
        count = message.redelivery_count
        try:
            middle = (
                f"message-id:{shown}\n{fields}{_PERSISTENT_LINE if message.persistent else ''}"
                f"priority:{message.priority}\nexpires:{message.expiration}\ntimestamp:{message.timestamp}\n"
                f"{_REDELIVERED_LINE if message.redelivered else ''}{shown_properties}{kind}"
                f"{f'JMSXDeliveryCount:{count + 1}{_LF}' if count > 0 else ''}"
            ).encode()
        except UnicodeEncodeError:
            return None
        return middle, b"content-length:%d\n\n" % len(body), body


_LF = "\n"
_PERSISTENT_LINE = "persistent:true\n"
_REDELIVERED_LINE = "redelivered:true\n"
_BYTES_LINE = "amq-msg-type:bytes\n"
_TEXT_LINE = "amq-msg-type:text\n"

_LINES_KEPT_MAX = 8
"""At most this many string properties are kept with their lines per encoder (:attr:`MessageEncoder._lines_of`)."""

_PROPERTY_LINES: dict[tuple[str, str, bool], str] = {}
"""``name:value`` header lines of string properties seen before (most messages carry the same few, e.g. a
``content-type``), per escaping; cleared when :data:`PROPERTY_LINES_MAX` are kept."""
PROPERTY_LINES_MAX = 4096
_PROPERTY_TEXT_MAX = 256
"""Properties longer than this (name and value) are escaped each time, not kept."""


def _property_lines(properties: dict[str, PropertyValue], escaped: bool) -> str | None:
    """The header lines (each ending in a line feed) of ``properties``; None for the general path."""
    lines = ""
    for name, value in properties.items():
        if type(value) is str:
            key = (name, value, escaped)
            line = _PROPERTY_LINES.get(key)
            if line is None:
                shown_name = _name(name, escaped)
                text = _escape(value, escaped)
                if shown_name is None or text is None:
                    return None
                line = f"{shown_name}:{text}\n"
                if len(line) <= _PROPERTY_TEXT_MAX:
                    if len(_PROPERTY_LINES) >= PROPERTY_LINES_MAX:
                        _PROPERTY_LINES.clear()
                    _PROPERTY_LINES[key] = line
        else:
            shown_name = _name(name, escaped)
            text = _escape(property_to_header(value), escaped)
            if shown_name is None or text is None:
                return None
            line = f"{shown_name}:{text}\n"
        lines += line
    return lines
