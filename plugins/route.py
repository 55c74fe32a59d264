"""Shipped plugin ``route``: the ``route`` transformer branches a message to
another destination chosen by one of its properties (content-based routing).

Options::

    property = "region"                      # the property to look at (required)
    routes = { eu = "/queue/orders.eu", us = "/queue/orders.us" }   # value -> destination
    default = "/queue/orders.other"         # when the value has no route (optional)
    unrouted = "pass"                       # no route and no default: pass | drop | fail

The rest of the chain still runs on a branched message; the gateway
delivers it to the branch destination instead of the original one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zope.interface import implementer

from gateway.errors import TransformError
from gateway.interfaces import IConfigurableTransformer, ITransformContext
from gateway.message.model import Message
from gateway.transform import Branch, Drop, hookimpl
from gateway.transform.config import TransformConfig

_OPTIONS = ("property", "routes", "default", "unrouted")
_UNROUTED = ("pass", "drop", "fail")


@implementer(IConfigurableTransformer)
class RouteTransformer:
    """Branch to a destination picked by a property value."""

    name = "route"

    def check_options(self, options: dict[str, Any]) -> None:
        for key in options:
            if key not in _OPTIONS:
                raise ValueError(f"unknown option {key!r}; known: {', '.join(_OPTIONS)}")
        if not isinstance(options.get("property"), str) or not options["property"]:
            raise ValueError("property (the property to route on) is required")
        routes = options.get("routes", {})
        if not isinstance(routes, Mapping) or not all(isinstance(d, str) and d for d in routes.values()):
            raise ValueError('routes must be a table of value = "/destination"')
        if "default" in options and (not isinstance(options["default"], str) or not options["default"]):
            raise ValueError("default must be a destination")
        if options.get("unrouted", "pass") not in _UNROUTED:
            raise ValueError(f"unrouted must be one of {', '.join(_UNROUTED)}")

    def transform(self, message: Message, context: ITransformContext) -> Message | Branch | Drop:
        options = context.options
        value = message.properties.get(options["property"])
        destination = options.get("routes", {}).get(str(value)) if value is not None else None
        destination = destination or options.get("default")
        if destination is not None:
            return Branch(message, destination)
        unrouted = options.get("unrouted", "pass")
        if unrouted == "drop":
            return Drop(f"no route for {options['property']}={value!r}")
        if unrouted == "fail":
            raise TransformError(f"no route for {options['property']}={value!r}")
        return message


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> list[IConfigurableTransformer]:
    """Register ``route``."""
    return [RouteTransformer()]
