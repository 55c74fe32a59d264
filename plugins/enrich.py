"""Shipped plugin ``enrich``: the ``enrich`` transformer stamps messages with
gateway metadata and stops messages that loop between gateways.

Properties set (names start with ``prefix``)::

    JMSGW_GATEWAY    the gateway id, always
    JMSGW_TIMESTAMP  when this gateway handled it, ms since the epoch
    JMSGW_HOPS       how many gateways handled it (a previous value is incremented)
    JMSGW_PATH       comma-separated gateway ids in order
    JMSGW_LOGIN      the STOMP login
    JMSGW_DIRECTION  inbound or outbound

Options::

    gateway_id = "gw-1"   # default: the host name
    prefix = "JMSGW_"
    timestamp = true      # set JMSGW_TIMESTAMP
    hops = true           # set JMSGW_HOPS
    path = false          # set JMSGW_PATH
    login = false         # set JMSGW_LOGIN (when the connection has a login)
    direction = false     # set JMSGW_DIRECTION
    max_hops = 0          # > 0: drop a message that would exceed this many hops
    drop_loops = false    # drop a message whose path already holds this gateway (needs path)

Dropped messages are consumed, counted and logged, not transferred.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from zope.interface import implementer

from gateway.errors import TransformError
from gateway.interfaces import IConfigurableTransformer, ITransformContext
from gateway.message.model import Message
from gateway.transform import Drop, hookimpl
from gateway.transform.config import TransformConfig

_BOOLS = ("timestamp", "hops", "path", "login", "direction", "drop_loops")
_OPTIONS = ("gateway_id", "prefix", "max_hops", *_BOOLS)
_DEFAULT_ON = ("timestamp", "hops")


@implementer(IConfigurableTransformer)
class EnrichTransformer:
    """Add gateway id, timestamp, hop count (and path, login, direction) properties."""

    name = "enrich"

    def __init__(self, clock: Callable[[], float] = time.time, gateway_id: str | None = None) -> None:
        self._clock = clock
        self._gateway_id = gateway_id or socket.gethostname()

    def check_options(self, options: dict[str, Any]) -> None:
        for key in options:
            if key not in _OPTIONS:
                raise ValueError(f"unknown option {key!r}; known: {', '.join(_OPTIONS)}")
        for key in ("gateway_id", "prefix"):
            if key in options and (not isinstance(options[key], str) or not options[key]):
                raise ValueError(f"{key} must be a non-empty string")
        for key in _BOOLS:
            if not isinstance(options.get(key, False), bool):
                raise ValueError(f"{key} must be true or false")
        max_hops = options.get("max_hops", 0)
        if isinstance(max_hops, bool) or not isinstance(max_hops, int) or max_hops < 0:
            raise ValueError("max_hops must be an integer >= 0")
        if options.get("drop_loops") and not options.get("path"):
            raise ValueError("drop_loops needs path = true")

    def transform(self, message: Message, context: ITransformContext) -> Message | Drop:
        options = context.options
        prefix: str = options.get("prefix", "JMSGW_")
        gateway_id: str = options.get("gateway_id", self._gateway_id)
        properties = message.properties

        def wanted(key: str) -> bool:
            return bool(options.get(key, key in _DEFAULT_ON))

        hops = _int_property(properties.get(f"{prefix}HOPS"), f"{prefix}HOPS") + 1
        max_hops: int = options.get("max_hops", 0)
        if max_hops and hops > max_hops:
            return Drop(f"hop limit {max_hops} reached")
        if wanted("path"):
            previous = str(properties.get(f"{prefix}PATH") or "")
            seen = previous.split(",") if previous else []
            if options.get("drop_loops") and gateway_id in seen:
                return Drop(f"loop: {gateway_id} already in path {previous}")
            properties[f"{prefix}PATH"] = ",".join([*seen, gateway_id])
        properties[f"{prefix}GATEWAY"] = gateway_id
        if wanted("timestamp"):
            properties[f"{prefix}TIMESTAMP"] = int(self._clock() * 1000)
        if wanted("hops"):
            properties[f"{prefix}HOPS"] = hops
        if wanted("login") and context.login is not None:
            properties[f"{prefix}LOGIN"] = context.login
        if wanted("direction"):
            properties[f"{prefix}DIRECTION"] = context.direction
        return message


def _int_property(value: Any, name: str) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise TransformError(f"property {name} is not a hop count: {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TransformError(f"property {name} is not a hop count: {value!r}") from None


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> list[IConfigurableTransformer]:
    """Register ``enrich``."""
    return [EnrichTransformer()]
