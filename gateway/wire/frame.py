"""The STOMP frame value and the protocol's constants.

A :class:`Frame` is a command, headers (first occurrence of a repeated
header wins, as the spec says) and a body of bytes.  It knows nothing of
sockets or encodings; :mod:`gateway.wire.codec` reads and writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERSIONS: tuple[str, ...] = ("1.0", "1.1", "1.2")
"""Protocol versions the gateway speaks, oldest first."""

CLIENT_COMMANDS = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS

UNESCAPED_COMMANDS = frozenset({"CONNECT", "CONNECTED"})
"""Frames whose headers are never escaped (spec 1.1/1.2)."""


@dataclass(slots=True)
class Frame:
    """One STOMP frame.

    :ivar command: e.g. ``SEND``; upper case.
    :ivar headers: decoded header names to values (unescaped).
    :ivar body: the raw body bytes.
    """

    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        """Header value or ``default``."""
        return self.headers.get(name, default)

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return f"Frame({self.command!r}, {self.headers!r}, {body!r})"
