"""Which factory serves a ``[gateway] listen`` spec: plain STOMP, or STOMP over WebSocket.

A spec is a Twisted endpoint string (``tcp:``, ``ssl:``, ``mtls:``); with a
``ws:`` prefix the endpoint after it serves STOMP over WebSocket
(:mod:`gateway.stomp.websocket`, imported only then: autobahn costs start-up
time a gateway without WebSocket listeners need not pay).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IProtocolFactory

from gateway.errors import GatewayError

WEBSOCKET_PREFIX = "ws:"
"""A listener spec starting with this serves STOMP over WebSocket on the endpoint after it."""


@dataclass(frozen=True)
class Listener:
    """How to serve one ``[gateway] listen`` spec."""

    endpoint: str
    """The Twisted endpoint string (the spec without its ``ws:`` prefix)."""
    factory: IProtocolFactory
    description: str


def listener_for(spec: str, stomp_factory: Any, reactor: Any) -> Listener:
    """The endpoint and factory for ``spec``: plain STOMP, or STOMP over WebSocket for ``ws:<endpoint>``
    (GatewayError naming the spec when WebSocket support cannot load)."""
    if spec[: len(WEBSOCKET_PREFIX)].lower() != WEBSOCKET_PREFIX:
        return Listener(spec, stomp_factory, "STOMP")
    try:
        from gateway.stomp.websocket import StompWebSocketFactory
    except ImportError as error:
        raise GatewayError(f"cannot listen on {spec!r}: STOMP over WebSocket needs autobahn "
                           f"(pip install 'autobahn>=26.10'): {error}") from error

    factory = StompWebSocketFactory(stomp_factory, reactor)
    return Listener(spec[len(WEBSOCKET_PREFIX):], factory, "STOMP over WebSocket")
