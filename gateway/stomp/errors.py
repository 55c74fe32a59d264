"""What a STOMP client is told when a frame fails: :class:`StompError` and the header checks.

Owns the error a session answers with an ERROR frame and the titles of the gateway's own errors;
it writes no frame (the session does).
"""

from __future__ import annotations

from gateway.errors import GatewayError, LimitReached, NotOwner
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
    "LimitReached": "destination limit reached",
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


def limit_refusal(error: LimitReached, frame: Frame) -> Frame:
    """The ERROR answering a SEND or SUBSCRIBE that would have created a destination past a limit
    (``max_destinations``, a login's ``max_queues``): like an authorization refusal, it leaves the
    connection open, so it is not a :class:`StompError` (those close it)."""
    headers = {"message": "destination limit reached", "content-type": "text/plain"}
    receipt = frame.headers.get("receipt")
    if receipt is not None:
        headers["receipt-id"] = receipt
    body = f"{frame.command} frame: {error}; nothing was done and the connection stays open\n"
    return Frame("ERROR", headers, body.encode())


KEEPS_CONNECTION = frozenset(("SEND", "SUBSCRIBE"))
"""The frames a :class:`LimitReached` refuses with the connection open (a COMMIT's refusal, which
applies nothing of the transaction, closes it as any failed COMMIT does)."""
