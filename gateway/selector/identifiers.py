"""What a selector identifier means on a :class:`~gateway.message.model.Message`.

JMS header fields are read from the message's attributes (JMS 1.1 3.8.1.1
allows JMSDeliveryMode, JMSPriority, JMSMessageID, JMSTimestamp,
JMSCorrelationID and JMSType; JMSExpiration, JMSRedelivered and
JMSXDeliveryCount are added as ActiveMQ does).  Every other identifier is a
message property; a missing property is NULL.  Identifiers are
case-sensitive.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.message.model import Message
from gateway.selector.values import Value

HeaderGetter = Callable[[Message], Value]


def _delivery_mode(message: Message) -> Value:
    return "PERSISTENT" if message.persistent else "NON_PERSISTENT"


def _priority(message: Message) -> Value:
    return message.priority


def _message_id(message: Message) -> Value:
    return message.message_id or None


def _timestamp(message: Message) -> Value:
    return message.timestamp


def _correlation_id(message: Message) -> Value:
    return message.correlation_id


def _type(message: Message) -> Value:
    return message.type


def _expiration(message: Message) -> Value:
    return message.expiration


def _redelivered(message: Message) -> Value:
    return message.redelivered


def _delivery_count(message: Message) -> Value:
    return message.redelivery_count + 1


HEADER_FIELDS: dict[str, HeaderGetter] = {
    "JMSDeliveryMode": _delivery_mode,
    "JMSPriority": _priority,
    "JMSMessageID": _message_id,
    "JMSTimestamp": _timestamp,
    "JMSCorrelationID": _correlation_id,
    "JMSType": _type,
    "JMSExpiration": _expiration,
    "JMSRedelivered": _redelivered,
    "JMSXDeliveryCount": _delivery_count,
}
"""Identifiers read from message attributes instead of properties."""


def header_getter(name: str) -> HeaderGetter | None:
    """The getter of a header-field identifier, or None for a property."""
    return HEADER_FIELDS.get(name)
