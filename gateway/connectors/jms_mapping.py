"""Gateway messages <-> JMS API messages, on a JMS session's own thread.

The mapping is docs/jms.md's table, as the ``stomp://`` connector applies it:

* :class:`TextMessage` -> ``createTextMessage`` (UTF-8 text as a Java String,
  NUL characters kept), :class:`BytesMessage` -> ``createBytesMessage`` with the
  exact bytes; other types are refused (``ConnectorError``, nothing sent);
* ``correlation_id`` -> JMSCorrelationID, ``reply_to`` (``/queue/x``,
  ``/topic/y``) -> JMSReplyTo, ``type`` -> JMSType; ``persistent``,
  ``priority`` and ``expiration`` (absolute, turned into a time to live) are
  the arguments of ``MessageProducer.send``;
* user properties keep their Python type (``bool`` -> boolean, ``int`` -> int or
  long by size, ``float`` -> double, ``str`` -> String); a STOMP client types
  string properties with a ``jmsgateway.types`` header holding JSON such as
  ``{"count": "int", "ratio": "double", "urgent": "boolean"}`` (types: string,
  boolean, byte, short, int, long, float, double), the same header the Kafka
  records use; bytes properties are refused (JMS has none).

From the provider: Text, Bytes, Map, Object (payload not deserialized: empty,
``encoding = "java-serialized"``) and Stream messages, every header field,
JMSXDeliveryCount as :attr:`Message.redelivery_count` and the properties with
their Python types.  A copy the connector returned to a queue in place of an unacknowledged
message (:func:`returned_copy`) is read back as the original: its message id, redelivered.
"""

from __future__ import annotations

import json
from typing import Any, cast

from gateway.connectors.jms_provider import NON_PERSISTENT, PERSISTENT, JmsApi
from gateway.errors import ConnectorError
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    Message,
    ObjectMessage,
    PropertyValue,
    StreamMessage,
    TextMessage,
    now_millis,
)

TYPES_PROPERTY = "jmsgateway.types"
"""The property (a STOMP header) naming the Java types of string properties."""

RETURNED_ID = "JMSGW_ORIGINAL_ID"
"""On a copy the connector sent back to a queue in place of an unacknowledged message (see
:func:`returned_copy`): the original's JMSMessageID, the message id the gateway shows."""
RETURNED_COUNT = "JMSGW_DELIVERY_COUNT"
"""On such a copy: how often the original was delivered (an int)."""

_TYPES = ("string", "boolean", "byte", "short", "int", "long", "float", "double")
_DELIVERY_COUNT = "JMSXDeliveryCount"


def destination_name(destination: Any, api: JmsApi) -> str | None:
    """A JMS destination as the gateway names it (``/queue/x``, ``/topic/y``, ``/temp-queue/z``)."""
    if destination is None:
        return None
    if isinstance(destination, api.TemporaryQueue):
        return f"/temp-queue/{destination.getQueueName()}"
    if isinstance(destination, api.TemporaryTopic):
        return f"/temp-topic/{destination.getTopicName()}"
    if isinstance(destination, api.Queue):
        return f"/queue/{destination.getQueueName()}"
    if isinstance(destination, api.Topic):
        return f"/topic/{destination.getTopicName()}"
    return str(destination.toString())


def typed_properties(message: Message) -> dict[str, PropertyValue]:
    """The message's properties with ``jmsgateway.types`` applied (and removed)."""
    properties = message.properties
    declared = properties.get(TYPES_PROPERTY)
    if declared is None:
        return properties
    try:
        types = json.loads(declared) if isinstance(declared, str | bytes) else None
    except ValueError:
        types = None
    if not isinstance(types, dict):
        raise ConnectorError(f"message {message.message_id}: {TYPES_PROPERTY} must be a JSON object such as "
                             f'{{"count": "int"}}, not {declared!r}')
    result = {name: value for name, value in properties.items() if name != TYPES_PROPERTY}
    for name, kind in types.items():
        if kind not in _TYPES:
            raise ConnectorError(f"message {message.message_id}: {TYPES_PROPERTY} gives property {name!r} the "
                                 f"type {kind!r}; known: {', '.join(_TYPES)}")
        if name not in result:
            continue
        value = result[name]
        if not isinstance(value, str):
            continue
        try:
            parsed = _parse(value, kind)
        except ValueError:
            raise ConnectorError(f"message {message.message_id}: property {name!r} = {value!r} is not a "
                                 f"{kind}") from None
        result[name] = (kind, parsed) if kind in _RANGES or kind == "float" else parsed  # type: ignore[assignment]
    return result


def _parse(value: str, kind: str) -> Any:
    if kind == "string":
        return value
    if kind == "boolean":
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(value)
        return lowered == "true"
    if kind in ("float", "double"):
        return float(value)
    return int(value.strip())


_RANGES = {"byte": 8, "short": 16, "int": 32, "long": 64}


def _set_property(target: Any, name: str, value: Any, api: JmsApi, message_id: str) -> None:
    if isinstance(value, tuple):  # (declared Java type, value)
        kind, number = value
        if kind in _RANGES:
            bits = _RANGES[kind]
            if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
                raise ConnectorError(f"message {message_id}: property {name!r} = {number} does not fit a {kind}")
            setter = {"byte": target.setByteProperty, "short": target.setShortProperty,
                      "int": target.setIntProperty, "long": target.setLongProperty}[kind]
            cast = {"byte": api.JByte, "short": api.JShort, "int": api.JInt, "long": api.JLong}[kind]
            setter(name, cast(number))
        else:  # float
            target.setFloatProperty(name, api.JFloat(number))
        return
    if isinstance(value, str):
        target.setStringProperty(name, value)
    elif isinstance(value, bool):
        target.setBooleanProperty(name, value)
    elif isinstance(value, int):
        if -(2**31) <= value < 2**31:
            target.setIntProperty(name, api.JInt(value))
        else:
            target.setLongProperty(name, api.JLong(value))
    elif isinstance(value, float):
        target.setDoubleProperty(name, api.JDouble(value))
    elif value is None:
        return
    else:
        raise ConnectorError(f"message {message_id}: property {name!r} is {type(value).__name__}, which a JMS "
                             "property cannot hold")


def to_jms(message: Message, session: Any, api: JmsApi, destination_of: Any) -> tuple[Any, int, int, int]:
    """``(jms message, delivery mode, priority, time to live)`` for ``producer.send``.

    :param destination_of: turns a gateway destination name into a JMS destination.
    """
    if isinstance(message, TextMessage):
        jms = session.createTextMessage(message.text or "")
    elif isinstance(message, BytesMessage):
        jms = session.createBytesMessage()
        if message.body:
            jms.writeBytes(api.ByteArray(message.body))
    else:
        raise ConnectorError(f"message {message.message_id} is a {type(message).__name__}; the jms connector "
                             "sends Text and Bytes messages")
    if message.correlation_id is not None:
        jms.setJMSCorrelationID(message.correlation_id)
    if message.reply_to:
        jms.setJMSReplyTo(destination_of(message.reply_to))
    if message.type is not None:
        jms.setJMSType(message.type)
    for name, value in typed_properties(message).items():
        _set_property(jms, name, value, api, message.message_id)
    time_to_live = 0
    if message.expiration:
        time_to_live = max(1, message.expiration - now_millis())
    mode = PERSISTENT if message.persistent else NON_PERSISTENT
    return jms, mode, message.priority, time_to_live


_CONVERTERS: dict[type, Any] = {}


def _converter(value: Any) -> Any:
    name = str(value.getClass().getSimpleName())
    if name == "String":
        return str
    if name == "Boolean":
        return lambda v: bool(v.booleanValue())
    if name in ("Integer", "Long", "Short", "Byte"):
        return lambda v: int(v.longValue())
    if name in ("Double", "Float"):
        return lambda v: float(v.doubleValue())
    if name == "byte[]":
        return bytes
    return lambda v: str(v.toString())


def python_value(value: Any, api: JmsApi) -> PropertyValue:
    """A boxed Java value (String, Boolean, numbers, Character, byte[]) as a Python value."""
    if value is None:
        return None
    kind = type(value)
    convert = _CONVERTERS.get(kind)
    if convert is None:
        if kind in (str, bool, int, float, bytes):  # converted by JPype already
            return cast(PropertyValue, value)
        convert = _CONVERTERS[kind] = _converter(value)
    result: PropertyValue = convert(value)
    return result


def from_jms(jms: Any, api: JmsApi, destination: str) -> Message:
    """The gateway message for a received JMS message (see the module docstring)."""
    message: Message
    if isinstance(jms, api.TextMessage):
        text = jms.getText()
        message = TextMessage(text=None if text is None else str(text))
    elif isinstance(jms, api.BytesMessage):
        length = int(jms.getBodyLength())
        buffer = api.ByteArray(length)
        if length:
            jms.readBytes(buffer)
        message = BytesMessage(body=bytes(buffer))
    elif isinstance(jms, api.MapMessage):
        entries: dict[str, Any] = {}
        names = jms.getMapNames()
        while names.hasMoreElements():
            name = str(names.nextElement())
            entries[name] = python_value(jms.getObject(name), api)
        message = MapMessage(map=entries)
    elif isinstance(jms, api.ObjectMessage):
        message = ObjectMessage(payload=b"", encoding="java-serialized")
    elif isinstance(jms, api.StreamMessage):
        items: list[Any] = []
        jms.reset()
        while True:
            try:
                items.append(python_value(jms.readObject(), api))
            except api.MessageEOFException:
                break
        message = StreamMessage(items=items)
    else:
        message = Message()
    message.destination = destination_name(jms.getJMSDestination(), api) or destination
    message.message_id = str(jms.getJMSMessageID())
    correlation = jms.getJMSCorrelationID()
    message.correlation_id = None if correlation is None else str(correlation)
    message.reply_to = destination_name(jms.getJMSReplyTo(), api)
    kind = jms.getJMSType()
    message.type = None if kind is None else str(kind)
    message.persistent = int(jms.getJMSDeliveryMode()) == PERSISTENT
    message.priority = int(jms.getJMSPriority())
    message.expiration = int(jms.getJMSExpiration())
    message.timestamp = int(jms.getJMSTimestamp())
    message.redelivered = bool(jms.getJMSRedelivered())
    properties = message.properties
    names = jms.getPropertyNames()
    while names.hasMoreElements():
        name = str(names.nextElement())
        if name == _DELIVERY_COUNT:
            continue
        properties[name] = python_value(jms.getObjectProperty(name), api)
    try:
        count = jms.getObjectProperty(_DELIVERY_COUNT)
    except Exception:  # a provider without JMSX properties
        count = None
    if count is not None:
        message.redelivery_count = max(0, int(count.longValue() if hasattr(count, "longValue") else count) - 1)
    original = properties.pop(RETURNED_ID, None)
    earlier = properties.pop(RETURNED_COUNT, None)
    if isinstance(original, str) and original:
        message.message_id = original
        message.redelivered = True
        message.redelivery_count += earlier if isinstance(earlier, int) and earlier > 0 else 1
    return message


def returned_copy(original: Any, api: JmsApi) -> tuple[Any, int, int, int]:
    """``original`` (a message this session received) made ready to be sent back to its queue
    in its place: its headers, body and properties as they are, plus :data:`RETURNED_ID` and
    :data:`RETURNED_COUNT`, which :func:`from_jms` turns back into the original's message id and
    a redelivery.  Returns ``(message, delivery mode, priority, time to live)`` for ``send``."""
    names = original.getPropertyNames()
    kept: list[tuple[str, Any]] = []
    while names.hasMoreElements():
        name = str(names.nextElement())
        if name.startswith("JMSX") and name not in ("JMSXGroupID", "JMSXGroupSeq"):
            continue  # set by the provider
        kept.append((name, original.getObjectProperty(name)))
    first_id = str(original.getJMSMessageID())
    earlier = 0
    for name, value in kept:
        if name == RETURNED_ID and value is not None:
            first_id = str(value)
        elif name == RETURNED_COUNT and value is not None:
            earlier = int(value.longValue() if hasattr(value, "longValue") else value)
    try:
        count = original.getObjectProperty(_DELIVERY_COUNT)
        delivered = int(count.longValue() if hasattr(count, "longValue") else count) if count is not None else 1
    except Exception:  # a provider without JMSX properties
        delivered = 1
    original.clearProperties()  # makes them writable (a received message's are read-only)
    for name, value in kept:
        if name not in (RETURNED_ID, RETURNED_COUNT):
            original.setObjectProperty(name, value)
    original.setStringProperty(RETURNED_ID, first_id)
    original.setIntProperty(RETURNED_COUNT, api.JInt(earlier + max(1, delivered)))
    if isinstance(original, (api.BytesMessage, api.StreamMessage)):
        original.reset()
    expiration = int(original.getJMSExpiration())
    time_to_live = max(1, expiration - now_millis()) if expiration else 0
    return original, int(original.getJMSDeliveryMode()), int(original.getJMSPriority()), time_to_live
