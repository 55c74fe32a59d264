"""A client's SEND frame straight to a Kafka record, without a JMS message in between.

The routing hot path: for a plain SEND (no receipt, no transaction, no
transformer) to a destination that an address-only route takes, the STOMP
session offers the frame to :meth:`KafkaRouter.forward
<gateway.routing.service.KafkaRouter.forward>`, which builds the record here.
:func:`frame_record` gives exactly what ``message_to_record(frame_to_message(
frame))`` gives - the same key, value and headers in the same order, the same
:class:`~gateway.errors.StompProtocolError` for a bad header or body - and
None whenever the message path must decide (an ``amq-msg-type`` header, a
``jmsbridge.origin`` header, a key it cannot take from the frame, a soft
failure).  ``tests/unit/test_frame_records.py`` holds the two equal.

Pure: no Twisted, no confluent-kafka.
"""

from __future__ import annotations

from gateway.message import convert
from gateway.message.kafka_records import (
    HEADER_NAMES,
    JMS_PREFIX,
    ORIGIN_HEADER,
    PROPERTY_ESCAPE,
    RESERVED_NAMES,
    Header,
    Record,
    canonical_header_name,
    is_valid_key,
)
from gateway.message.model import DEFAULT_PRIORITY

_TEXT_FIELDS = {"CorrelationId": "correlation-id", "ReplyTo": "reply-to", "Type": "type"}
"""JMS headers a key may name that a SEND carries as a STOMP header of their own."""
_PRIORITY_BYTES = {priority: str(priority).encode("ascii") for priority in range(10)}
_PROPERTY_HEADERS: dict[str, str] = {}
"""STOMP header name -> its Kafka header name (``jms.x`` or ``jms.property.x``), filled as names are met."""


def property_header(name: str) -> str:
    """The Kafka header a string property ``name`` becomes (escaped when it collides)."""
    header = _PROPERTY_HEADERS.get(name)
    if header is None:
        escaped = name in RESERVED_NAMES or name.startswith(PROPERTY_ESCAPE)
        header = JMS_PREFIX + (PROPERTY_ESCAPE + name if escaped else name)
        if len(_PROPERTY_HEADERS) < 10_000:
            _PROPERTY_HEADERS[name] = header
    return header


def frame_key(headers: dict[str, str], key_name: str | None, message_id: str) -> bytes | None:
    """The record key for a SEND with ``headers``; None when the frame alone cannot give a valid one.

    ``key_name`` is a route's key (``msg.header.X``, ``X``, ``JMSCorrelationID``...)
    or None for the message id.  Only keys a SEND carries as text are taken here:
    the correlation id, reply-to, type and user properties.
    """
    if not key_name:
        return message_id.encode("utf-8")
    name = key_name.removeprefix("msg.header.")
    canonical = canonical_header_name(name)
    if canonical in _TEXT_FIELDS:
        value = headers.get(_TEXT_FIELDS[canonical])
    elif canonical in HEADER_NAMES or name in convert.PROTOCOL_HEADERS:
        return None
    else:
        value = headers.get(name)
    if value is None or not is_valid_key(value):
        return None
    return value.encode("utf-8")


def frame_record(
    headers: dict[str, str],
    body: bytes,
    destination: str,
    *,
    default_persistent: bool,
    message_id: str,
    now_ms: int,
    key_name: str | None,
    origin: str,
) -> Record | None:
    """``message_to_record(frame_to_message(SEND), key_name, origin)`` for a SEND to ``destination``.

    ``destination`` is the name the message would carry (the connector-side
    name); ``message_id`` and ``now_ms`` are what the message would get.
    Raises :class:`StompProtocolError` as :func:`frame_to_message` would;
    None when the message path must run (see the module docstring).
    """
    if "amq-msg-type" in headers or ORIGIN_HEADER in headers or convert.foreign_charset(headers):
        return None
    text, persistent, priority, expiration = convert.plain_send_fields(headers, body, default_persistent)
    key = frame_key(headers, key_name, message_id)
    if key is None:
        return None
    record: list[Header] = [("jms.MessageType", b"text" if text else b"bytes"),
                            ("jms.MessageId", message_id.encode("utf-8"))]
    append = record.append
    value = headers.get("correlation-id")
    if value is not None:
        append(("jms.CorrelationId", value.encode("utf-8")))
    value = headers.get("reply-to")
    if value is not None:
        append(("jms.ReplyTo", value.encode("utf-8")))
    value = headers.get("type")
    if value is not None:
        append(("jms.Type", value.encode("utf-8")))
    append(("jms.DeliveryMode", b"2" if persistent else b"1"))
    append(("jms.Priority", _PRIORITY_BYTES[DEFAULT_PRIORITY if priority is None else priority]))
    if expiration:
        append(("jms.Expiration", str(expiration).encode("ascii")))
    if now_ms:
        append(("jms.Timestamp", str(now_ms).encode("ascii")))
    if destination:
        append(("jms.Destination", destination.encode("utf-8")))
    protocol = convert.PROTOCOL_HEADERS
    for name, value in headers.items():
        if name not in protocol:
            append((property_header(name), value.encode("utf-8")))
    append((ORIGIN_HEADER, origin.encode("utf-8")))
    return key, body, record
