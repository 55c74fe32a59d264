"""Which factory serves a ``[gateway] listen`` spec: plain STOMP, or STOMP over WebSocket.

A spec is a Twisted endpoint string (``tcp:``, ``ssl:``, ``mtls:``); with a
``ws:`` prefix the endpoint after it serves STOMP over WebSocket
(:mod:`gateway.stomp.websocket`, imported only then: autobahn costs start-up
time a gateway without WebSocket listeners need not pay).

:func:`with_backlog` gives a listening endpoint the gateway's listen backlog
(``[gateway] listen_backlog``, capped at the OS limit by :func:`listen_backlog`)
unless its spec names one: Twisted's own default of 50 makes the kernel drop
the SYNs of a connection storm, which clients then retry a second or more later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IProtocolFactory

from gateway.errors import GatewayError

WEBSOCKET_PREFIX = "ws:"
"""A listener spec starting with this serves STOMP over WebSocket on the endpoint after it."""

SOMAXCONN = "/proc/sys/net/core/somaxconn"
"""Linux's cap on a listen backlog (a larger one is silently cut to it)."""

BACKLOG_KINDS = frozenset({"tcp", "tcp6", "ssl", "mtls", "unix"})
"""Endpoint kinds that take a ``backlog=`` argument."""

_UNESCAPED_COLON = re.compile(r"(?<!\\):")


def os_backlog_limit(path: str = SOMAXCONN) -> int | None:
    """The OS limit on a listen backlog, or None where it cannot be read."""
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def listen_backlog(configured: int, limit: int | None) -> int:
    """The backlog to listen with: ``configured``, capped at the OS ``limit`` when known."""
    return configured if limit is None else max(1, min(configured, limit))


def with_backlog(endpoint: str, backlog: int) -> str:
    """``endpoint`` with ``backlog=`` added, unless it names one or its kind takes none."""
    parts = _UNESCAPED_COLON.split(endpoint)
    if parts[0].lower() not in BACKLOG_KINDS or any(part.startswith("backlog=") for part in parts[1:]):
        return endpoint
    return f"{endpoint}:backlog={backlog}"


@dataclass(frozen=True)
class Listener:
    """How to serve one ``[gateway] listen`` spec."""

    endpoint: str
    """The Twisted endpoint string (the spec without its ``ws:`` prefix)."""
    factory: IProtocolFactory
    description: str


def listener_for(spec: str, stomp_factory: Any, reactor: Any, allowed_origins: list[str] | None = None) -> Listener:
    """The endpoint and factory for ``spec``: plain STOMP, or STOMP over WebSocket for ``ws:<endpoint>``
    whose handshakes must come from ``allowed_origins`` (:mod:`gateway.stomp.origins`; GatewayError
    naming the spec when WebSocket support cannot load)."""
    if spec[: len(WEBSOCKET_PREFIX)].lower() != WEBSOCKET_PREFIX:
        return Listener(spec, stomp_factory, "STOMP")
    try:
        from gateway.stomp.websocket import StompWebSocketFactory
    except ImportError as error:
        raise GatewayError(f"cannot listen on {spec!r}: STOMP over WebSocket needs autobahn "
                           f"(pip install 'autobahn>=26.10'): {error}") from error

    endpoint = spec[len(WEBSOCKET_PREFIX):]
    secure = endpoint.split(":", 1)[0].lower() in ("ssl", "mtls")
    factory = StompWebSocketFactory(stomp_factory, reactor, allowed_origins, secure=secure)
    return Listener(endpoint, factory, "STOMP over WebSocket")
