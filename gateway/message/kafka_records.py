"""JMS message <-> Kafka record conversion, in the Confluent JMS-Bridge's convention.

This module owns the mapping only: no Twisted, no confluent-kafka, no I/O, so
the Spark pipeline reuses it as it is.  A record is ``(key, value, headers)``
with ``headers`` a list of ``(name, bytes | None)``.

Mapping (see docs/kafka.md for the full table):

* each JMS header becomes ``jms.<Name>`` (``jms.MessageId``, ``jms.CorrelationId``,
  ``jms.ReplyTo``, ``jms.Type``, ``jms.DeliveryMode``, ``jms.Priority``,
  ``jms.Expiration``, ``jms.Timestamp``, ``jms.Destination``) and the body type
  ``jms.MessageType`` (``text`` / ``bytes``);
* each property becomes ``jms.<name>`` with its value as UTF-8 text; the types
  that are not strings are listed in one ``jmsgateway.types`` header (JSON
  ``{name: "long" | "double" | "boolean" | "bytes"}``) so they survive a round
  trip; a ``None`` value is a header with a null value;
* ``jmsbridge.origin=<gateway id>`` marks records this gateway produced;
* the key is a configured header's value (text or number), else the message id;
* Text bodies are UTF-8, Bytes bodies as they are.

Soft failures (no key, key not alphanumeric, a body that is not Text/Bytes)
raise :class:`SoftFailure`, which the routing layer handles by policy.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.errors import GatewayError
from gateway.message.model import (
    DEFAULT_PRIORITY,
    BytesMessage,
    MapMessage,
    Message,
    ObjectMessage,
    PropertyValue,
    StreamMessage,
    TextMessage,
)

Header = tuple[str, bytes | None]
Record = tuple[bytes, bytes, list[Header]]

JMS_PREFIX = "jms."
ORIGIN_HEADER = "jmsbridge.origin"
"""Kafka header naming the gateway that produced a record (cycle guard)."""
TYPES_HEADER = "jmsgateway.types"
"""JSON object giving the JMS type of every property that is not a string."""
MESSAGE_TYPE_HEADER = "jms.MessageType"
ERROR_HEADER = "jmsbridge.error"
"""On dead-lettered records: why the message could not be routed."""
ROUTE_HEADER = "jmsbridge.route"
"""On dead-lettered records: the route that matched."""
PROPERTY_ESCAPE = "property."
"""Prefix (after ``jms.``) of properties whose name collides with a JMS header name."""

HEADER_NAMES: dict[str, str] = {
    "MessageId": "message_id",
    "CorrelationId": "correlation_id",
    "ReplyTo": "reply_to",
    "Type": "type",
    "DeliveryMode": "persistent",
    "Priority": "priority",
    "Expiration": "expiration",
    "Timestamp": "timestamp",
    "Destination": "destination",
}
"""JMS-Bridge header names (after ``jms.``) -> :class:`Message` field names."""

JMS_HEADER_ALIASES: dict[str, str] = {
    "JMSMessageID": "MessageId",
    "JMSCorrelationID": "CorrelationId",
    "JMSReplyTo": "ReplyTo",
    "JMSType": "Type",
    "JMSDeliveryMode": "DeliveryMode",
    "JMSPriority": "Priority",
    "JMSExpiration": "Expiration",
    "JMSTimestamp": "Timestamp",
    "JMSDestination": "Destination",
}
"""The JMS API's names for the same headers, accepted wherever a header is named."""

RESERVED_NAMES = frozenset(HEADER_NAMES) | {"MessageType"}
"""Names after ``jms.`` that are not properties; a property so named is escaped."""

KEY_SEPARATORS = frozenset("-_.:")
"""Besides letters and digits, a key may contain these separators."""


class SoftFailure(GatewayError):
    """A message cannot be converted to a record (data problem, not Kafka's).

    :ivar reason: ``no-key``, ``key-not-alphanumeric`` or ``unsupported-type``.
    """

    REASONS = ("no-key", "key-not-alphanumeric", "unsupported-type")

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def canonical_header_name(name: str) -> str:
    """``JMSCorrelationID`` -> ``CorrelationId``; other names unchanged."""
    return JMS_HEADER_ALIASES.get(name, name)


def header_value(message: Message, name: str) -> PropertyValue:
    """The value of JMS header or property ``name`` (JMS-Bridge or JMS API name).

    JMS headers are looked up first, then properties; absent gives None.
    """
    canonical = canonical_header_name(name)
    attribute = HEADER_NAMES.get(canonical)
    if attribute is not None:
        value: PropertyValue = getattr(message, attribute)
        if attribute == "persistent":
            return 2 if value else 1
        return value
    return message.properties.get(name)


def text_of(value: PropertyValue) -> str:
    """A property value as the text carried in a Kafka header."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def is_valid_key(key: str) -> bool:
    """Whether ``key`` is non-empty and only letters, digits and ``-_.:``."""
    return bool(key) and all(ch.isalnum() or ch in KEY_SEPARATORS for ch in key)


def extract_key(message: Message, key_header: str | None) -> bytes:
    """The record key: ``key_header``'s value (text or numeric), else the message id.

    ``key_header`` may be written ``msg.header.CorrelationId``, ``CorrelationId``
    or ``JMSCorrelationID``.  Raises :class:`SoftFailure` when the header is
    absent, not text/numeric, or not alphanumeric.
    """
    if not key_header:
        return message.message_id.encode("utf-8")
    name = key_header.removeprefix("msg.header.")
    value = header_value(message, name)
    if value is None or value == "":
        raise SoftFailure("no-key", f"message {message.message_id} has no key header {name!r}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SoftFailure(
            "key-not-alphanumeric",
            f"message {message.message_id}: key header {name!r} is a {type(value).__name__}, not text or a number",
        )
    key = str(value)
    if not is_valid_key(key):
        raise SoftFailure(
            "key-not-alphanumeric", f"message {message.message_id}: key {key!r} from {name!r} is not alphanumeric"
        )
    return key.encode("utf-8")


def _property_type(value: PropertyValue) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, bytes):
        return "bytes"
    return None


_PRIORITY_BYTES: dict[int, bytes] = {priority: str(priority).encode("ascii") for priority in range(10)}
"""``jms.Priority`` values of the JMS priorities, encoded once."""
_KIND_BYTES: dict[str, bytes] = {}
"""``jms.MessageType`` values, encoded once per message class."""


def message_headers(message: Message, origin: str | None) -> list[Header]:
    """The Kafka headers carrying ``message``'s JMS headers and properties."""
    kind = message.kind
    kind_bytes = _KIND_BYTES.get(kind)
    if kind_bytes is None:
        kind_bytes = _KIND_BYTES[kind] = kind.encode("ascii")
    headers: list[Header] = [(MESSAGE_TYPE_HEADER, kind_bytes), ("jms.MessageId", message.message_id.encode("utf-8"))]
    append = headers.append
    if message.correlation_id is not None:
        append(("jms.CorrelationId", message.correlation_id.encode("utf-8")))
    if message.reply_to is not None:
        append(("jms.ReplyTo", message.reply_to.encode("utf-8")))
    if message.type is not None:
        append(("jms.Type", message.type.encode("utf-8")))
    append(("jms.DeliveryMode", b"2" if message.persistent else b"1"))
    priority = message.priority
    priority_bytes = _PRIORITY_BYTES.get(priority) if type(priority) is int else None
    append(("jms.Priority", priority_bytes if priority_bytes is not None else str(priority).encode("ascii")))
    if message.expiration:
        append(("jms.Expiration", str(message.expiration).encode("ascii")))
    if message.timestamp:
        append(("jms.Timestamp", str(message.timestamp).encode("ascii")))
    if message.destination:
        append(("jms.Destination", message.destination.encode("utf-8")))
    properties = message.properties
    if properties:
        types: dict[str, str] = {}
        for name, value in properties.items():
            if name == ORIGIN_HEADER:
                continue  # replaced by our own origin below
            escaped = name in RESERVED_NAMES or name.startswith(PROPERTY_ESCAPE)
            header = JMS_PREFIX + (PROPERTY_ESCAPE + name if escaped else name)
            if value is None:
                append((header, None))
                continue
            if type(value) is str:
                append((header, value.encode("utf-8")))
                continue
            kind_name = _property_type(value)
            if kind_name is not None:
                types[name] = kind_name
            append((header, value if isinstance(value, bytes) else text_of(value).encode("utf-8")))
        if types:
            append((TYPES_HEADER, json.dumps(types, separators=(",", ":"), sort_keys=True).encode("utf-8")))
    if origin is not None:
        append((ORIGIN_HEADER, origin.encode("utf-8")))
    elif ORIGIN_HEADER in properties:
        original = properties[ORIGIN_HEADER]
        if original is not None:
            append((ORIGIN_HEADER, text_of(original).encode("utf-8")))
    return headers


def message_value(message: Message) -> bytes:
    """The record value: a Text body as UTF-8, a Bytes body as is.

    Raises :class:`SoftFailure` for any other message type.
    """
    if isinstance(message, TextMessage):
        return (message.text or "").encode("utf-8")
    if isinstance(message, BytesMessage):
        return message.body
    raise SoftFailure(
        "unsupported-type", f"message {message.message_id} is a {message.kind} message; only text and bytes are routed"
    )


def message_to_record(message: Message, key_header: str | None, origin: str | None) -> Record:
    """Convert ``message`` to ``(key, value, headers)``.

    :param key_header: header/property whose value is the key; None uses the message id.
    :param origin: the gateway id put in ``jmsbridge.origin``; None keeps the message's own.
    :raises SoftFailure: no key, key not alphanumeric, body not Text/Bytes.
    """
    value = message_value(message)
    key = extract_key(message, key_header)
    return key, value, message_headers(message, origin)


def dead_letter_record(message: Message, reason: str, route: str, origin: str | None) -> Record:
    """The record put on the dead-letter topic for a message that failed a route.

    Never raises for data reasons: the key is the message id, the value the body
    as well as it can be written (Map and Stream bodies as JSON, Object payloads
    as their bytes), and the headers say why (``jmsbridge.error``) and where
    (``jmsbridge.route``).
    """
    value: bytes
    if isinstance(message, TextMessage | BytesMessage):
        value = message_value(message)
    elif isinstance(message, MapMessage):
        value = json.dumps(message.map, default=_json_default, sort_keys=True).encode("utf-8")
    elif isinstance(message, StreamMessage):
        value = json.dumps(message.items, default=_json_default).encode("utf-8")
    elif isinstance(message, ObjectMessage):
        value = message.payload
    else:
        value = b""
    headers = message_headers(message, origin)
    headers.append((ERROR_HEADER, reason.encode("utf-8")))
    headers.append((ROUTE_HEADER, route.encode("utf-8")))
    return message.message_id.encode("utf-8"), value, headers


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _decode_text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def _typed(raw: bytes | None, kind: str | None) -> PropertyValue:
    if raw is None:
        return None
    if kind == "bytes":
        return raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw  # not text: the bytes as they are, as for a Kafka header without the prefix
    try:
        if kind == "long":
            return int(text)
        if kind == "double":
            return float(text)
    except ValueError:
        return text
    if kind == "boolean":
        return text == "true"
    return text


def _int(raw: bytes | None, default: int) -> int:
    try:
        return int(raw.decode("ascii")) if raw is not None else default
    except (UnicodeDecodeError, ValueError):
        return default


def record_to_message(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | Iterable[Header] | None,
    *,
    text_records: bool = True,
    destination: str = "",
    timestamp: int = 0,
    fallback_id: str = "",
) -> Message:
    """Convert a Kafka record back to a message.

    The record becomes a TextMessage when its ``jms.MessageType`` header says
    ``text``, or when it has none and ``text_records`` is set and the value is
    valid UTF-8; otherwise a BytesMessage.  ``jms.*`` headers become JMS
    headers and properties again (typed through ``jmsgateway.types``); other
    Kafka headers become string properties (bytes when not UTF-8).

    :param destination: used when the record carries no ``jms.Destination``.
    :param timestamp: the record's timestamp (ms), used without ``jms.Timestamp``.
    :param fallback_id: the message id when the record carries none
        (e.g. ``kafka:<topic>:<partition>:<offset>``).
    """
    pairs = list(headers or [])
    types: dict[str, str] = {}
    for name, raw in pairs:
        if name == TYPES_HEADER and raw is not None:
            try:
                loaded = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                loaded = {}
            if isinstance(loaded, dict):
                types = {str(k): str(v) for k, v in loaded.items()}
    fields: dict[str, bytes | None] = {}
    properties: dict[str, PropertyValue] = {}
    origin: bytes | None = None
    message_type: str | None = None
    for name, raw in pairs:
        if name == TYPES_HEADER:
            continue
        if name == ORIGIN_HEADER:
            origin = raw
            continue
        if name == MESSAGE_TYPE_HEADER:
            message_type = _decode_text(raw)
            continue
        if name.startswith(JMS_PREFIX):
            short = name[len(JMS_PREFIX) :]
            if short in HEADER_NAMES:
                fields[short] = raw
                continue
            prop = short.removeprefix(PROPERTY_ESCAPE)
            properties[prop] = _typed(raw, types.get(prop))
            continue
        if raw is None:
            properties[name] = None
        else:
            try:
                properties[name] = raw.decode("utf-8")
            except UnicodeDecodeError:
                properties[name] = raw
    if origin is not None:
        properties[ORIGIN_HEADER] = origin.decode("utf-8", "replace")

    body = value or b""
    message: Message
    if message_type == "text":
        message = TextMessage(text=body.decode("utf-8", "replace"))
    elif message_type is None and text_records and _is_utf8(body):
        message = TextMessage(text=body.decode("utf-8"))
    else:
        message = BytesMessage(body=body)
    message.message_id = _decode_text(fields.get("MessageId")) or fallback_id
    message.correlation_id = _decode_text(fields.get("CorrelationId"))
    message.reply_to = _decode_text(fields.get("ReplyTo"))
    message.type = _decode_text(fields.get("Type"))
    message.persistent = _int(fields.get("DeliveryMode"), 2) == 2
    message.priority = _int(fields.get("Priority"), DEFAULT_PRIORITY)
    message.expiration = _int(fields.get("Expiration"), 0)
    message.timestamp = _int(fields.get("Timestamp"), timestamp)
    message.destination = _decode_text(fields.get("Destination")) or destination
    message.properties = properties
    return message


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def origin_of(message: Message) -> str | None:
    """The ``jmsbridge.origin`` a message carries (set when it came from Kafka)."""
    value = message.properties.get(ORIGIN_HEADER)
    return None if value is None else text_of(value)
