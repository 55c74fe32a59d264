"""JMS-style message model and its conversion to and from STOMP frames."""

from gateway.message.model import (
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    ObjectMessage,
    PropertyValue,
    StreamMessage,
    TextMessage,
)

__all__ = [
    "BytesMessage",
    "DeliveryMode",
    "MapMessage",
    "Message",
    "ObjectMessage",
    "PropertyValue",
    "StreamMessage",
    "TextMessage",
]
