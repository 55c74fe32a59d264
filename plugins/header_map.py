"""Shipped plugin ``header_map``: the ``header-map`` transformer renames, sets and
removes message properties (the STOMP user headers).

Options (all optional), applied in this order, in either direction::

    rename = { "X-Old" = "x-new" }   # a present property moves to the new name (overwriting it)
    set_default = { "x-env" = "prod" }  # set only when absent
    set = { "x-gateway" = "gw-1" }   # set, overwriting (string, integer, float or boolean values)
    remove = ["X-Debug"]             # dropped when present

JMS header fields (message id, correlation id, priority …) are not
properties and are not touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zope.interface import implementer

from gateway.interfaces import IConfigurableTransformer, ITransformContext
from gateway.message.model import Message
from gateway.transform import hookimpl
from gateway.transform.config import TransformConfig

_OPTIONS = ("rename", "set_default", "set", "remove")


@implementer(IConfigurableTransformer)
class HeaderMapTransformer:
    """Rename, set and remove message properties."""

    name = "header-map"

    def check_options(self, options: dict[str, Any]) -> None:
        for key in options:
            if key not in _OPTIONS:
                raise ValueError(f"unknown option {key!r}; known: {', '.join(_OPTIONS)}")
        rename = options.get("rename", {})
        if not isinstance(rename, Mapping) or not all(isinstance(v, str) and v for v in rename.values()):
            raise ValueError('rename must be a table of old = "new" names')
        for key in ("set", "set_default"):
            values = options.get(key, {})
            if not isinstance(values, Mapping):
                raise ValueError(f"{key} must be a table of name = value")
            for name, value in values.items():
                if not isinstance(value, str | int | float | bool):
                    raise ValueError(f"{key}.{name} must be a string, number or boolean")
        remove = options.get("remove", [])
        if not isinstance(remove, Sequence) or isinstance(remove, str):
            raise ValueError("remove must be an array of names")

    def transform(self, message: Message, context: ITransformContext) -> Message:
        options: Mapping[str, Any] = context.options
        properties = message.properties
        for old, new in options.get("rename", {}).items():
            if old in properties:
                properties[new] = properties.pop(old)
        for name, value in options.get("set_default", {}).items():
            properties.setdefault(name, value)
        properties.update(options.get("set", {}))
        for name in options.get("remove", ()):
            properties.pop(name, None)
        return message


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> list[IConfigurableTransformer]:
    """Register ``header-map``."""
    return [HeaderMapTransformer()]
