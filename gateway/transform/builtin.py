"""Built-in transformers: the ActiveMQ ``transformation`` header values.

Registered through the same ``jmsgateway_transformers`` hook as every other
plugin (plugin name ``builtin``, blockable like any other), so a STOMP
client written for ActiveMQ works unchanged:

``jms-byte``
    Deliver the body as bytes: a TextMessage becomes a BytesMessage (UTF-8),
    in either direction; other types pass unchanged.
``jms-map-xml`` / ``jms-map-json``
    Inbound, a body (text or bytes) in ActiveMQ's XStream XML / JSON map
    form becomes a MapMessage (``jms-map-json`` also takes a plain JSON
    object); a body that is not a map rejects the SEND, naming the
    transformation.  Outbound, a MapMessage becomes a TextMessage in the
    same form, with the MESSAGE header ``transformation`` saying which, as
    ActiveMQ sends it; other types pass unchanged.  The forms are
    :mod:`gateway.message.xstream`'s.
``jms-xml`` / ``jms-json``
    For a SUBSCRIBE, as on ActiveMQ: a MapMessage is delivered as
    ``jms-map-xml`` / ``jms-map-json``; other types pass unchanged (a SEND
    with them passes unchanged too).
``jms-object-xml`` / ``jms-object-json``
    Refused: an ObjectMessage holds a serialized Java object, which the
    gateway (no JVM, no application classes) can neither build nor read.

This module owns only these; configurable variants live in ``plugins/``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from zope.interface import implementer

from gateway.errors import TransformError
from gateway.interfaces import IMessageTransformer, ITransformContext
from gateway.message import xstream
from gateway.message.model import BytesMessage, MapMessage, Message, ObjectMessage, TextMessage
from gateway.transform.bodies import body_text, retype
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


SENT_FORM = "transformation"
"""The property a MapMessage built by ``jms-map-xml`` / ``jms-map-json`` keeps its form in."""

MAP_FORMS = ("jms-map-xml", "jms-map-json")


def sent_form(message: Message) -> str | None:
    """The map form a MapMessage was sent in through a ``transformation`` header, if any."""
    if not isinstance(message, MapMessage):
        return None
    form = message.properties.get(SENT_FORM)
    return form if form in MAP_FORMS else None


def _map_to_text(message: MapMessage, transformation: str) -> TextMessage:
    """The XStream ``transformation`` text of a MapMessage, labelled as ActiveMQ labels it."""
    encode = xstream.encode_xml if transformation == "jms-map-xml" else xstream.encode_json
    try:
        text = encode(message.map)
    except ValueError as error:
        raise TransformError(f"{transformation}: map message {message.message_id} cannot be written: {error}",
                             transformer=transformation) from None
    result = retype(message, TextMessage, text=text)
    result.properties["transformation"] = transformation
    return result


def _decode_json_map(text: str) -> dict[str, Any]:
    """An XStream JSON map, or (the gateway's earlier form) a plain JSON object."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if xstream.is_xstream_json(document):
        return xstream.decode_json_document(document)
    if isinstance(document, dict):
        return document
    raise ValueError(f"JSON body is {type(document).__name__}, a map needs an object")


@implementer(IMessageTransformer)
class JmsMapTransformer:
    """XStream XML or JSON map body -> MapMessage inbound, and back outbound."""

    def __init__(self, name: str) -> None:
        self.name = name

    def transform(self, message: Message, context: ITransformContext) -> Message:
        if context.direction != "inbound":
            return _map_to_text(message, self.name) if isinstance(message, MapMessage) else message
        if isinstance(message, MapMessage):
            return message
        if not isinstance(message, TextMessage | BytesMessage):
            raise TransformError(f"{self.name}: a {message.kind} message has no map body", transformer=self.name)
        try:
            text = body_text(message)
            entries = xstream.decode_xml(text) if self.name == "jms-map-xml" else _decode_json_map(text)
        except (ValueError, TransformError) as error:
            raise TransformError(f"{self.name}: the body is not a map: {error}", transformer=self.name) from None
        result = retype(message, MapMessage, map=entries)
        # Remembered so a subscriber that asks for no transformation gets the map in the
        # form it was sent, labelled, as ActiveMQ hands it back (SessionTransforms.outbound).
        result.properties[SENT_FORM] = self.name
        return result


@implementer(IMessageTransformer)
class JmsSubscriberFormat:
    """``jms-xml`` / ``jms-json``: MapMessages go out as ``jms-map-xml`` / ``jms-map-json``."""

    def __init__(self, name: str, map_transformation: str) -> None:
        self.name = name
        self.map_transformation = map_transformation

    def transform(self, message: Message, context: ITransformContext) -> Message:
        if context.direction == "outbound" and isinstance(message, MapMessage):
            return _map_to_text(message, self.map_transformation)
        return message


@implementer(IMessageTransformer)
class JmsObjectRefusal:
    """``jms-object-xml`` / ``jms-object-json``: object messages are not supported."""

    def __init__(self, name: str) -> None:
        self.name = name

    def transform(self, message: Message, context: ITransformContext) -> Message:
        if context.direction == "outbound" and not isinstance(message, ObjectMessage):
            return message
        raise TransformError(
            f"{self.name}: object messages are not supported: an ObjectMessage holds a serialized Java "
            "object, which the gateway can neither build nor read (it has no JVM and none of the "
            "application's classes); send the fields as a map (jms-map-json, jms-map-xml) or as JSON text",
            transformer=self.name,
        )


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> Sequence[IMessageTransformer]:
    """The built-in transformers."""
    return [
        JmsByteTransformer(),
        JmsMapTransformer("jms-map-json"),
        JmsMapTransformer("jms-map-xml"),
        JmsSubscriberFormat("jms-json", "jms-map-json"),
        JmsSubscriberFormat("jms-xml", "jms-map-xml"),
        JmsObjectRefusal("jms-object-json"),
        JmsObjectRefusal("jms-object-xml"),
    ]
