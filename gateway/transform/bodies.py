"""Body conversions between JMS message types that keep every header and property.

Owns :func:`retype` (a new message of another type, same JMS headers and
properties), :func:`body_text` / :func:`body_bytes` (read a Text or Bytes
body either way) and the plain JSON object ↔ MapMessage mapping used by the
shipped ``json-map`` plugin (the built-in ``jms-map-json`` uses ActiveMQ's
XStream form, :mod:`gateway.message.xstream`).  It never mutates the message
it is given.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from gateway.errors import TransformError
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage

_M = TypeVar("_M", bound=Message)

_HEADER_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Message))


def retype(message: Message, cls: type[_M], **body: Any) -> _M:
    """A new ``cls`` message with ``message``'s JMS headers and a copy of its
    properties; ``body`` gives the new body fields (``text=``, ``body=``, ``map=``)."""
    fields: dict[str, Any] = {name: getattr(message, name) for name in _HEADER_FIELDS}
    fields["properties"] = dict(message.properties)
    fields.update(body)
    return cls(**fields)


def body_text(message: Message, encoding: str = "utf-8") -> str:
    """The body of a TextMessage, or of a BytesMessage decoded with ``encoding``.

    :raises TransformError: for other types or undecodable bytes.
    """
    if isinstance(message, TextMessage):
        return message.text or ""
    if isinstance(message, BytesMessage):
        try:
            return message.body.decode(encoding)
        except UnicodeDecodeError as exc:
            raise TransformError(f"body is not {encoding} text: {exc}") from None
    raise TransformError(f"expected a text or bytes message, got a {message.kind} message")


def body_bytes(message: Message, encoding: str = "utf-8") -> bytes:
    """The body of a BytesMessage, or of a TextMessage encoded with ``encoding``.

    :raises TransformError: for other types.
    """
    if isinstance(message, BytesMessage):
        return message.body
    if isinstance(message, TextMessage):
        return (message.text or "").encode(encoding)
    raise TransformError(f"expected a text or bytes message, got a {message.kind} message")


def json_to_map(message: Message) -> MapMessage:
    """A MapMessage from a Text/Bytes message whose body is a JSON object.

    :raises TransformError: if the body is not JSON or not an object.
    """
    text = body_text(message)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise TransformError(f"body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TransformError(f"JSON body is {type(value).__name__}, a MapMessage needs an object")
    return retype(message, MapMessage, map=value)


def map_to_json(message: MapMessage, *, sort_keys: bool = False, indent: int | None = None) -> TextMessage:
    """A TextMessage whose body is the map as a JSON object.

    ``bytes`` values become base64 strings (JSON has no bytes); other values
    must be JSON-serializable.

    :raises TransformError: for a value JSON cannot hold.
    """
    try:
        text = json.dumps(message.map, sort_keys=sort_keys, indent=indent, ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise TransformError(f"map cannot be written as JSON: {exc}") from None
    return retype(message, TextMessage, text=text)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
