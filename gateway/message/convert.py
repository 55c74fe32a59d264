"""STOMP frame <-> JMS message, by the GlassFish STOMP bridge's rules.

SEND -> message: a ``content-length`` header makes a :class:`BytesMessage`,
otherwise the body is decoded (UTF-8, or the charset its ``content-type``
declares) into a :class:`TextMessage`; an
``amq-msg-type: text|bytes`` header overrides the rule (as ActiveMQ allows).
The STOMP headers that are JMS header fields (``correlation-id``,
``reply-to``, ``type``, ``persistent``, ``priority``, ``expires``) fill those
fields; every other non-protocol header becomes a string property.

message -> MESSAGE: headers are UTF-8 text, the body is the stored bytes
(text encoded as UTF-8).  Every MESSAGE carries ``content-length`` (the codec
adds it), so ``amq-msg-type: text|bytes`` tells a subscriber which message it
is (the header ActiveMQ reads on a SEND: a client that resends a MESSAGE as
it came keeps the type).  A redelivered message carries
``JMSXDeliveryCount`` (the JMS property: 2 on the first redelivery) next to
``redelivered: true``.  Only Text and Bytes messages can become frames:
:func:`message_to_frame` refuses the others, the caller applies the rule.
"""

from __future__ import annotations

import codecs
import re
from time import time

from gateway.errors import StompProtocolError
from gateway.message.model import (
    DEFAULT_PRIORITY,
    MESSAGE_COUNT,
    MESSAGE_ID_PREFIX,
    BytesMessage,
    Message,
    PropertyValue,
    TextMessage,
)
from gateway.wire.frame import Frame

PROTOCOL_HEADERS = frozenset(
    {
        "destination",
        "receipt",
        "transaction",
        "content-length",
        "amq-msg-type",
        "transformation",
        "message-id",
        "subscription",
        "ack",
        "redelivered",
        "timestamp",
        "expires",
        "priority",
        "persistent",
        "correlation-id",
        "reply-to",
        "type",
    }
)
"""Headers that are not copied into message properties."""


def _bad(header: str, value: str, expected: str) -> StompProtocolError:
    return StompProtocolError(f"invalid {header} header", f"{header} {value!r} is not {expected}")


_FIELD_HEADERS = frozenset({"amq-msg-type", "correlation-id", "reply-to", "type", "priority", "expires"})
"""The headers besides ``persistent`` that set a field or the message type: most SENDs carry none."""

_new_instance = object.__new__


def frame_to_message(frame: Frame, *, default_persistent: bool = False, now_ms: int | None = None,
                     memo: PropertyMemo | None = None) -> Message:
    """Turn a SEND frame into a Text or Bytes message (no destination checks).

    ``memo`` (one per producing connection, :class:`PropertyMemo`) gives the properties of a SEND whose
    headers are those of the connection's last SEND with properties without reading them again.

    Raises :class:`StompProtocolError` for a body that is not UTF-8 where text
    is required, or a header value of the wrong form (the first of: ``amq-msg-type``,
    the charset, the body, ``persistent``, ``priority``, ``expires``).
    """
    # (issue 39: every SEND's way; a SEND with none of _FIELD_HEADERS reads none of them, and
    # the message's id and timestamp are made in place)
    headers = frame.headers
    usual = _FIELD_HEADERS.isdisjoint(headers)
    if usual:
        text = "content-length" not in headers
    else:
        msg_type = headers.get("amq-msg-type")
        if msg_type is None:
            text = "content-length" not in headers
        elif msg_type == "text" or msg_type == "bytes":
            text = msg_type == "text"
        else:
            raise _bad("amq-msg-type", msg_type, "'text' or 'bytes'")
    message: Message
    charset: str | None = None
    if text:
        content_type = headers.get("content-type")
        if content_type is not None and "charset" in content_type.lower():
            charset = declared_charset(headers)
        text_message: TextMessage = _new_instance(TextMessage)
        if charset is None:
            try:
                text_message.text = frame.body.decode()  # (text_body's UTF-8, in place)
            except UnicodeDecodeError:
                text_body(frame.body)  # (raises the protocol error that says where)
                raise
        else:
            text_message.text = text_body(frame.body, charset)
        message = text_message
    else:
        bytes_message: BytesMessage = _new_instance(BytesMessage)
        bytes_message.body = frame.body
        message = bytes_message
    # (the fields are set in place on a new instance, as Message.copy makes one: ~40% less than the
    # constructor call; every field once, tests/unit/test_send_path_calls.py checks none is missed)
    message.destination = headers.get("destination", "")
    message.message_id = f"{MESSAGE_ID_PREFIX}{next(MESSAGE_COUNT)}"
    message.timestamp = int(time() * 1000) if now_ms is None else now_ms  # (now_millis, in place)
    message.redelivered = False
    message.redelivery_count = 0
    # (the helpers check a header's form; most SENDs carry none of these, or only persistent)
    persistent = headers.get("persistent")
    if persistent is None:
        message.persistent = default_persistent
    elif persistent == "false" or persistent == "true":
        message.persistent = persistent == "true"
    else:
        message.persistent = persistent_header(headers, default_persistent)
    if usual:
        message.correlation_id = message.reply_to = message.type = None
        message.priority = DEFAULT_PRIORITY
        message.expiration = 0
    else:
        message.correlation_id = headers.get("correlation-id")
        message.reply_to = headers.get("reply-to")
        message.type = headers.get("type")
        message.priority = DEFAULT_PRIORITY if "priority" not in headers else _priority(headers)
        message.expiration = 0 if "expires" not in headers else expires_header(headers)
    if PROTOCOL_HEADERS.issuperset(headers):  # (most SENDs carry protocol headers only: one C-level check)
        message.properties = {}
    else:
        properties: dict[str, PropertyValue]
        # (dicts compare equal whatever their order; properties keep the headers' order: with more than
        # one, the order of the headers is compared too)
        if memo is not None and headers == memo.headers and (memo.single or list(headers) == memo.order):
            memo.missed = 0
            properties = memo.properties.copy()
        elif memo is not None:
            properties = memo.read(headers)
        else:
            properties = {}
            for name, value in headers.items():
                if name not in PROTOCOL_HEADERS:
                    properties[name] = value
        message.properties = properties
        if charset is not None and charset != "utf-8":
            # The text is stored (and delivered) as UTF-8 now: say so.
            properties["content-type"] = _CHARSET_PARAM.sub(r"\g<1>utf-8", headers["content-type"])
    return message


class PropertyMemo:
    """The properties of one connection's last SEND that had some, kept with a copy of its headers.

    Issue 39: an application's producer sends the same headers again and again (a ``content-type``
    with each SEND); :func:`frame_to_message` compares a SEND's headers with the kept ones in one
    C-level comparison (their strings are mostly the same objects: the decoder's header-block cache
    hands out copies of one dict), cheaper than reading each header again.  Equal headers (in the same
    order) make equal properties, so a copy of the kept ones is handed out; neither kept dict is ever
    handed out or changed.  A producer whose SENDs differ every time (an id in each) misses
    :data:`MEMO_MISSES` times in a row, and then its next :data:`MEMO_SKIPPED` SENDs are read without
    the comparison and the copies."""

    __slots__ = ("headers", "missed", "order", "properties", "single", "skipped")

    def __init__(self) -> None:
        self.headers: dict[str, str] | None = None
        """A copy of the headers :attr:`properties` were read from (None: nothing kept)."""
        self.properties: dict[str, PropertyValue] = {}
        self.single = False
        """Whether :attr:`properties` holds one property (then the headers' order does not matter)."""
        self.order: list[str] = []
        """The names of :attr:`headers` in order (with more than one property)."""
        self.missed = 0
        self.skipped = 0

    def read(self, headers: dict[str, str]) -> dict[str, PropertyValue]:
        """The properties of ``headers`` that are not the kept ones (a new dict), kept in turn."""
        # (the same loop as frame_to_message's without a memo, written out: the SEND path's Python calls
        # are pinned, tests/unit/test_send_path_calls.py)
        properties: dict[str, PropertyValue] = {}
        for name, value in headers.items():
            if name not in PROTOCOL_HEADERS:
                properties[name] = value
        if self.skipped:
            self.skipped -= 1
            return properties
        self.missed += 1
        if self.missed >= MEMO_MISSES:
            self.missed = 0
            self.skipped = MEMO_SKIPPED
            self.headers = None
        else:
            self.headers = headers.copy()
            self.properties = properties.copy()
            self.single = len(properties) == 1
            self.order = [] if self.single else list(headers)
        return properties


MEMO_MISSES = 8
"""New headers this many SENDs in a row: the producer's headers differ each time (:class:`PropertyMemo`)."""
MEMO_SKIPPED = 256
"""SENDs read without the comparison after :data:`MEMO_MISSES` (as the decoder's header-block cache does)."""


def _priority(headers: dict[str, str]) -> int:
    """``priority_header`` of a SEND that has the header."""
    priority = priority_header(headers)
    assert priority is not None
    return priority


_CHARSET_PARAM = re.compile(r"""(;\s*charset\s*=\s*)("[^"]*"|[^;\s]*)""", re.IGNORECASE)


def declared_charset(headers: dict[str, str]) -> str | None:
    """The ``charset`` parameter of a SEND's ``content-type``, normalised (``latin-1`` for
    ``ISO-8859-1``); None without one.  A charset Python does not know is a protocol error."""
    content_type = headers.get("content-type")
    if content_type is None or "charset" not in content_type.lower():
        return None
    match = _CHARSET_PARAM.search(content_type)
    if match is None:
        return None
    name = match.group(2).strip('"')
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise StompProtocolError(
            "unknown charset",
            f"content-type {content_type!r} declares charset {name!r}, which the gateway does not know",
        ) from None


def foreign_charset(headers: dict[str, str]) -> bool:
    """Whether a text SEND declares a charset other than UTF-8 (its body must be decoded: the
    shortcuts that pass a SEND's bytes on unchanged decline it)."""
    content_type = headers.get("content-type")
    if content_type is None or "charset" not in content_type.lower() or "content-length" in headers:
        return False
    try:
        return declared_charset(headers) not in (None, "utf-8")
    except StompProtocolError:
        return True  # the message path reports it


def text_body(body: bytes, charset: str | None = None) -> str:
    """The text of a SEND without ``content-length`` (a TextMessage): decoded with the charset
    its ``content-type`` declares (UTF-8 without one), or a protocol error."""
    encoding = charset or "utf-8"
    try:
        return body.decode(encoding)
    except UnicodeDecodeError as exc:
        if encoding == "utf-8":
            raise StompProtocolError(
                "invalid UTF-8 body",
                f"a SEND without content-length is a TextMessage and its body must be UTF-8; "
                f"byte {exc.start} is not ({exc.reason}). Add a content-length header to send bytes.",
            ) from None
        raise StompProtocolError(
            "invalid body",
            f"the body is not valid {encoding} (the charset its content-type declares): "
            f"byte {exc.start}: {exc.reason}",
        ) from None


def persistent_header(headers: dict[str, str], default: bool) -> bool:
    """JMSDeliveryMode from ``persistent`` (``true``/``false``, any case), else ``default``."""
    persistent = headers.get("persistent")
    if persistent is None:
        return default
    lowered = persistent.lower()
    if lowered not in ("true", "false"):
        raise _bad("persistent", persistent, "'true' or 'false'")
    return lowered == "true"


def priority_header(headers: dict[str, str]) -> int | None:
    """JMSPriority from ``priority`` (0-9), None without the header."""
    priority = headers.get("priority")
    if priority is None:
        return None
    if not priority.isdigit() or not 0 <= int(priority) <= 9:
        raise _bad("priority", priority, "an integer from 0 to 9")
    return int(priority)


def expires_header(headers: dict[str, str]) -> int:
    """JMSExpiration from ``expires`` (ms since the epoch; empty or absent: 0, never)."""
    expires = headers.get("expires")
    if expires is None or expires == "":
        return 0
    if not expires.isdigit():
        raise _bad("expires", expires, "a time in milliseconds since the epoch")
    return int(expires)


def plain_send_fields(
    headers: dict[str, str], body: bytes, default_persistent: bool
) -> tuple[bool, bool, int | None, int]:
    """``(text, persistent, priority, expiration)`` of a SEND without ``amq-msg-type``, checked
    as :func:`frame_to_message` checks them and in its order (the same StompProtocolError for
    the first bad one): the shortcuts that map a SEND without building its message use this."""
    text = "content-length" not in headers
    if text:
        text_body(body)
    return text, persistent_header(headers, default_persistent), priority_header(headers), expires_header(headers)


def property_to_header(value: PropertyValue) -> str:
    """A property value as STOMP header text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex()
    if value is None:
        return ""
    return str(value)


def message_headers(message: Message) -> dict[str, str]:
    """JMS header fields and properties as STOMP headers (no per-delivery ones)."""
    headers: dict[str, str] = {
        "destination": message.destination,
        "message-id": message.message_id,
    }
    if message.correlation_id is not None:
        headers["correlation-id"] = message.correlation_id
    if message.reply_to is not None:
        headers["reply-to"] = message.reply_to
    if message.type is not None:
        headers["type"] = message.type
    if message.persistent:
        headers["persistent"] = "true"
    headers["priority"] = str(message.priority)
    headers["expires"] = str(message.expiration)
    headers["timestamp"] = str(message.timestamp)
    if message.redelivered:
        headers["redelivered"] = "true"
    for name, value in message.properties.items():
        if name not in headers and name not in ("content-length", "subscription", "ack"):
            headers[name] = property_to_header(value)
    return headers


def message_body(message: Message) -> bytes:
    """The frame body of a Text or Bytes message; TypeError for other types."""
    if isinstance(message, BytesMessage):
        return message.body
    if isinstance(message, TextMessage):
        return message.text.encode("utf-8") if message.text else b""
    raise TypeError(f"a {type(message).__name__} cannot be sent to a STOMP client")


def message_to_frame(message: Message, subscription: str, ack: str | None, destination: str | None = None) -> Frame:
    """The MESSAGE frame for one delivery.

    :param subscription: the STOMP subscription id.
    :param ack: the 1.2 ``ack`` header value, or None for 1.0/1.1.
    :param destination: the destination to show the client, if it differs
        from the message's (a renamed or temporary destination).
    """
    body = message_body(message)
    headers = message_headers(message)
    headers["amq-msg-type"] = "bytes" if isinstance(message, BytesMessage) else "text"
    if message.redelivery_count > 0:
        headers["JMSXDeliveryCount"] = str(message.redelivery_count + 1)
    elif message.properties:
        headers.pop("JMSXDeliveryCount", None)  # (a property a client copied from an earlier MESSAGE)
    headers["subscription"] = subscription
    if destination is not None:
        headers["destination"] = destination
    if ack is not None:
        headers["ack"] = ack
    return Frame("MESSAGE", headers, body)


__all__ = [
    "DEFAULT_PRIORITY",
    "PROTOCOL_HEADERS",
    "declared_charset",
    "expires_header",
    "foreign_charset",
    "frame_to_message",
    "message_body",
    "message_headers",
    "message_to_frame",
    "persistent_header",
    "plain_send_fields",
    "priority_header",
    "property_to_header",
    "text_body",
]
