"""Shipped plugin ``json_map``: the ``json-map`` transformer turns a JSON object
body into a MapMessage and a MapMessage into a JSON TextMessage.

Options::

    mode = "auto"       # auto: inbound JSON -> map, outbound map -> JSON; or "to-map" / "to-json"
    strict = false      # true: a message of the wrong type fails instead of passing unchanged
    sort_keys = false   # JSON output with sorted keys
    indent = 0          # JSON output indentation (0: compact)

A Text or Bytes (UTF-8) body that is not a JSON object fails the message in
``to-map``; a map value JSON cannot hold fails it in ``to-json`` (``bytes``
values become base64 strings).  The built-in ``jms-map-json`` is the same
conversion without options, under ActiveMQ's name.
"""

from __future__ import annotations

from typing import Any

from zope.interface import implementer

from gateway.errors import TransformError
from gateway.interfaces import IConfigurableTransformer, ITransformContext
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.transform import hookimpl
from gateway.transform.bodies import json_to_map, map_to_json
from gateway.transform.config import TransformConfig

_OPTIONS = ("mode", "strict", "sort_keys", "indent")
_MODES = ("auto", "to-map", "to-json")


@implementer(IConfigurableTransformer)
class JsonMapTransformer:
    """JSON object TextMessage/BytesMessage <-> MapMessage."""

    name = "json-map"

    def check_options(self, options: dict[str, Any]) -> None:
        for key in options:
            if key not in _OPTIONS:
                raise ValueError(f"unknown option {key!r}; known: {', '.join(_OPTIONS)}")
        if options.get("mode", "auto") not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        for key in ("strict", "sort_keys"):
            if not isinstance(options.get(key, False), bool):
                raise ValueError(f"{key} must be true or false")
        indent = options.get("indent", 0)
        if isinstance(indent, bool) or not isinstance(indent, int) or indent < 0:
            raise ValueError("indent must be an integer >= 0")

    def transform(self, message: Message, context: ITransformContext) -> Message:
        options = context.options
        mode = options.get("mode", "auto")
        if mode == "auto":
            mode = "to-map" if context.direction == "inbound" else "to-json"
        strict = options.get("strict", False)
        if mode == "to-map":
            if isinstance(message, TextMessage | BytesMessage):
                return json_to_map(message)
            if strict:
                raise TransformError(f"json-map expected a text or bytes message, got a {message.kind} message")
            return message
        if isinstance(message, MapMessage):
            return map_to_json(message, sort_keys=options.get("sort_keys", False), indent=options.get("indent") or None)
        if strict:
            raise TransformError(f"json-map expected a map message, got a {message.kind} message")
        return message


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> list[IConfigurableTransformer]:
    """Register ``json-map``."""
    return [JsonMapTransformer()]
