"""What a STOMP client is told when a frame fails: :class:`StompError` and the header checks.

Owns the error a session answers with an ERROR frame and the titles of the gateway's own errors;
it writes no frame (the session does).
"""

from __future__ import annotations

from gateway.errors import GatewayError, NotOwner
from gateway.wire.frame import Frame


class StompError(GatewayError):
    """An error answered with an ERROR frame (and closing the connection)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


def required(frame: Frame, name: str) -> str:
    """The value of header ``name``, which ``frame`` must carry (not empty)."""
    value = frame.headers.get(name)
    if value is None or value == "":
        raise StompError(f"missing {name} header", f"{frame.command} requires a {name!r} header")
    return value


_TITLES = {
    "DestinationError": "invalid destination",
    "ConnectorUnavailable": "target unavailable",
    "DestinationFull": "destination full",
    "ConnectorError": "target refused the message",
    "SelectorError": "invalid selector",
    "StoreError": "message store failure",
    "TransformError": "transform failed",
}


def error_title(error: GatewayError) -> str:
    """The ERROR frame's ``message`` header for a gateway error."""
    if isinstance(error, NotOwner):
        return str(error)
    return _TITLES.get(type(error).__name__, "request failed")
