"""``[stomp]``: the STOMP listeners' protocol limits and timing, declared in the STOMP layer and
composed into the whole configuration by :mod:`gateway.config`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway.schema import NotNegative, Positive, Section


class StompSettings(Section):
    """``[stomp]``: protocol limits and timing."""

    max_frame_size: Positive = 32 * 1024 * 1024
    """Largest frame (headers and body) in bytes."""
    max_headers: Positive = 1000
    """Most headers in one frame."""
    max_header_length: Positive = 64 * 1024
    """Longest header line in bytes."""
    heartbeat_send_ms: NotNegative = 10_000
    """Heart-beat interval the gateway offers to send (0: none)."""
    heartbeat_receive_ms: NotNegative = 10_000
    """Heart-beat interval the gateway asks clients for (0: none)."""
    heartbeat_grace: Annotated[float, Field(ge=1.0, strict=True)] = 1.5
    """Factor on the receive interval before a silent client is dropped."""
    default_prefetch: Positive = 1000
    """Unacknowledged messages per subscription unless the client sets activemq.prefetchSize."""
    max_subscriptions: Positive = 1000
    """Subscriptions one connection may hold."""
    connect_timeout_ms: NotNegative = 10_000
    """A connection without a completed CONNECT by then is closed (0: never)."""
    close_timeout_ms: NotNegative = 5_000
    """A closing connection whose peer does not take what is buffered is then aborted."""
    max_connections: NotNegative = 0
    """Open STOMP connections (0: the open-file limit less a reserve)."""
    max_connections_per_address: NotNegative = 0
    """Connections from one client address (0: no cap)."""
