"""JMS messages <-> the STOMP frames a JMS broker (ActiveMQ 5) understands.

The common header mapping (correlation-id, reply-to, type, persistent,
priority, expires, user properties) is :mod:`gateway.message.convert`'s;
this module adds what is particular to a JMS broker spoken to over STOMP:

* a :class:`TextMessage` is sent without ``content-length`` (ActiveMQ then
  makes a ``javax.jms.TextMessage``); a text containing NUL needs
  ``content-length`` and so ``amq-msg-type: text`` (ActiveMQ keeps that
  header as a property); a :class:`BytesMessage` is sent with
  ``content-length`` (a ``javax.jms.BytesMessage``);
* a :class:`MapMessage` is sent as ``transformation: jms-map-json`` with
  XStream-style JSON, which ActiveMQ turns into a ``javax.jms.MapMessage``
  (string, int/long, double and boolean values; the broker refuses bytes);
  an :class:`ObjectMessage` whose payload is XStream JSON as
  ``transformation: jms-object-json``;
* MESSAGE frames from the broker: ``transformation: jms-map-json`` becomes a
  :class:`MapMessage`, ``jms-object-json`` an :class:`ObjectMessage` (the
  JSON payload kept as bytes, never deserialized), ``content-length`` a
  :class:`BytesMessage`, anything else a :class:`TextMessage`.  The broker
  only labels Map/Object messages when the subscription asked for
  ``transformation: jms-json`` (see :data:`SUBSCRIBE_TRANSFORMATION`).

Known limit of ActiveMQ 5.17: a ``javax.jms.StreamMessage`` has no STOMP form
and arrives as an empty text; user properties travel as STOMP headers, so
they reach the other side as strings.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import ConnectorError, MessageRefused, StompProtocolError
from gateway.message import convert, xstream
from gateway.message.model import DEFAULT_PRIORITY, BytesMessage, MapMessage, Message, ObjectMessage, TextMessage
from gateway.wire.frame import Frame

SUBSCRIBE_TRANSFORMATION = "jms-json"
"""The SUBSCRIBE ``transformation`` asking ActiveMQ to label Map and Object
messages (``jms-map-json`` / ``jms-object-json``) instead of sending them as
empty texts.  Needs XStream and Jettison on the broker's classpath."""

XSTREAM_JSON = "xstream-json"
""":attr:`ObjectMessage.encoding` of payloads that came as ``jms-object-json``."""

_NOT_ON_SEND = frozenset({"message-id", "redelivered", "destination", "subscription", "ack", "content-length"})


def send_frame_parts(message: Message, *, amq_msg_type: bool = True) -> tuple[dict[str, str], bytes, bool]:
    """Headers (without ``destination``), body and the "text" flag of the SEND for ``message``.

    The flag tells :meth:`StompClientProtocol.send` to leave out
    ``content-length``.  Raises :class:`ConnectorError` for a message the
    broker cannot take over STOMP.

    :param amq_msg_type: the broker understands ``amq-msg-type`` (ActiveMQ).
    """
    headers = convert.message_headers(message)
    for name in _NOT_ON_SEND:
        headers.pop(name, None)
    if message.expiration == 0:
        headers.pop("expires", None)
    if isinstance(message, TextMessage):
        body = message.text.encode("utf-8") if message.text else b""
        if b"\x00" not in body:
            return headers, body, True
        if not amq_msg_type:
            raise MessageRefused(
                f"text message {message.message_id} contains NUL and the broker has no amq-msg-type header"
            )
        headers["amq-msg-type"] = "text"
        return headers, body, False
    if isinstance(message, BytesMessage):
        return headers, message.body, False
    if isinstance(message, MapMessage):
        headers["transformation"] = "jms-map-json"
        return headers, encode_map(message.map, message.message_id).encode("utf-8"), True
    if isinstance(message, ObjectMessage) and message.encoding == XSTREAM_JSON:
        headers["transformation"] = "jms-object-json"
        return headers, message.payload, True
    kind = f"{type(message).__name__}" + (f" ({message.encoding})" if isinstance(message, ObjectMessage) else "")
    raise MessageRefused(f"message {message.message_id} is a {kind}, which cannot be sent to the broker over STOMP")


def forward_parts(
    headers: dict[str, str], body: bytes, *, default_persistent: bool, now_ms: int
) -> tuple[dict[str, str], bytes, bool] | None:
    """What :func:`send_frame_parts` gives for the message a client SEND makes, without the message.

    ``send_frame_parts(frame_to_message(frame, ...))`` for a SEND with these
    ``headers`` and ``body`` (same headers, body and "text" flag; the same
    :class:`StompProtocolError` for a bad header or body), at a fraction of
    the cost: the STOMP session forwards a plain SEND to a JMS broker this
    way.  None when the SEND needs the message path (an ``amq-msg-type``
    header).  ``tests/unit/test_stomp_forward.py`` holds the two paths equal.
    """
    if "amq-msg-type" in headers or convert.foreign_charset(headers):  # (a charset to decode)
        return None
    text, persistent, priority, expiration = convert.plain_send_fields(headers, body, default_persistent)
    if text and b"\x00" in body:  # (not from the wire: a frame without content-length ends at its NUL)
        return None
    out: dict[str, str] = {}
    value = headers.get("correlation-id")
    if value is not None:
        out["correlation-id"] = value
    value = headers.get("reply-to")
    if value is not None:
        out["reply-to"] = value
    value = headers.get("type")
    if value is not None:
        out["type"] = value
    if persistent:
        out["persistent"] = "true"
    out["priority"] = str(DEFAULT_PRIORITY if priority is None else priority)
    if expiration:
        out["expires"] = str(expiration)
    out["timestamp"] = str(now_ms)
    protocol = convert.PROTOCOL_HEADERS
    for name, value in headers.items():
        if name not in protocol:
            out[name] = value
    return out, body, text


def message_from_frame(frame: Frame) -> Message:
    """The JMS message a broker's MESSAGE frame carries (see the module docstring)."""
    headers = frame.headers
    transformation = headers.get("transformation")
    if transformation in ("jms-map-json", "jms-object-json"):
        base = Frame("MESSAGE", {k: v for k, v in headers.items() if k != "content-length"}, b"")
        message = _with_fields(_header_fields(base), _typed_body(transformation, frame))
    else:
        message = _header_fields(frame)
    return message


def _header_fields(frame: Frame) -> Message:
    headers = frame.headers
    try:
        message = convert.frame_to_message(frame)
    except StompProtocolError as error:
        if "content-length" in headers or error.message != "invalid UTF-8 body":
            raise ConnectorError(f"unreadable MESSAGE from broker: {error.message}: {error.detail}") from None
        # A text that is not UTF-8 cannot come from a JMS TextMessage; keep the bytes.
        message = convert.frame_to_message(Frame(frame.command, {**headers, "amq-msg-type": "bytes"}, frame.body))
    message.message_id = headers.get("message-id", message.message_id)
    timestamp = headers.get("timestamp", "")
    if timestamp.isdigit():
        message.timestamp = int(timestamp)
    message.redelivered = headers.get("redelivered", "false").lower() == "true"
    return message


def _typed_body(transformation: str, frame: Frame) -> Message:
    if transformation == "jms-object-json":
        return ObjectMessage(payload=frame.body, encoding=XSTREAM_JSON)
    try:
        return MapMessage(map=decode_map(frame.body))
    except ValueError as error:
        raise ConnectorError(
            f"MESSAGE {frame.headers.get('message-id')} from broker has an unreadable jms-map-json body: {error}"
        ) from None


def _with_fields(source: Message, target: Message) -> Message:
    """``target`` (a body) with every header field and property of ``source``."""
    for name in (
        "destination",
        "message_id",
        "correlation_id",
        "reply_to",
        "type",
        "persistent",
        "priority",
        "expiration",
        "timestamp",
        "redelivered",
        "redelivery_count",
    ):
        setattr(target, name, getattr(source, name))
    target.properties = source.properties
    return target


# -- XStream JSON maps --------------------------------------------------------
#
# ActiveMQ writes a MapMessage as {"map": {"entry": [ENTRY, ...]}} where an
# entry holding a string value is {"string": [key, value]} and any other is
# {"string": key, "<java type>": value}; one entry is not wrapped in a list
# and an empty map is {"map": ""}.

def decode_map(body: bytes) -> dict[str, Any]:
    """The map an XStream JSON body holds; ValueError if it is not one (:func:`xstream.decode_json`)."""
    return xstream.decode_json(body)


def encode_map(entries: dict[str, Any], message_id: str = "") -> str:
    """XStream JSON for ``entries`` (values: str, int, float, bool); ConnectorError otherwise."""
    encoded: list[dict[str, Any]] = []
    for key, value in entries.items():
        if isinstance(value, str):
            encoded.append({"string": [str(key), value]})
        elif isinstance(value, bool):
            encoded.append({"string": str(key), "boolean": value})
        elif isinstance(value, int):
            encoded.append({"string": str(key), "int" if -(2**31) <= value < 2**31 else "long": value})
        elif isinstance(value, float):
            encoded.append({"string": str(key), "double": value})
        else:
            raise MessageRefused(
                f"map message {message_id}: entry {key!r} is a {type(value).__name__}; the broker's "
                "jms-map-json only takes strings, integers, floats and booleans"
            )
    if not encoded:
        return '{"map":""}'
    return json.dumps({"map": {"entry": encoded}}, separators=(",", ":"), ensure_ascii=False)
