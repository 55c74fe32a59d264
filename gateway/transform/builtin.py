"""Built-in transformers: the ActiveMQ ``transformation`` header values.

Registered through the same ``jmsgateway_transformers`` hook as every other
plugin (plugin name ``builtin``, blockable like any other), so a STOMP
client written for ActiveMQ works unchanged:

``jms-byte``
    Deliver the body as bytes: a TextMessage becomes a BytesMessage (UTF-8),
    in either direction; other types pass unchanged.
``jms-map-json``
    Inbound, a JSON object body (text or bytes) becomes a MapMessage; a body
    that is not a JSON object rejects the SEND.  Outbound, a MapMessage
    becomes a JSON TextMessage; other types pass unchanged.

This module owns only these two; configurable variants live in ``plugins/``.
"""

from __future__ import annotations

from collections.abc import Sequence

from zope.interface import implementer

from gateway.interfaces import IMessageTransformer, ITransformContext
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.transform.bodies import json_to_map, map_to_json, retype
from gateway.transform.config import TransformConfig
from gateway.transform.hookspecs import hookimpl

PLUGIN_NAME = "builtin"


@implementer(IMessageTransformer)
class JmsByteTransformer:
    """TextMessage → BytesMessage (UTF-8); other types unchanged."""

    name = "jms-byte"

    def transform(self, message: Message, context: ITransformContext) -> Message:
        if isinstance(message, TextMessage):
            return retype(message, BytesMessage, body=(message.text or "").encode("utf-8"))
        return message


@implementer(IMessageTransformer)
class JmsMapJsonTransformer:
    """JSON object → MapMessage inbound, MapMessage → JSON text outbound."""

    name = "jms-map-json"

    def transform(self, message: Message, context: ITransformContext) -> Message:
        if context.direction == "inbound":
            if isinstance(message, MapMessage):
                return message
            return json_to_map(message)
        if isinstance(message, MapMessage):
            return map_to_json(message)
        return message


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> Sequence[IMessageTransformer]:
    """The built-in transformers."""
    return [JmsByteTransformer(), JmsMapJsonTransformer()]
