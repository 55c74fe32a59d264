"""The one exception tree of the gateway.

Every error the gateway raises on purpose derives from :class:`GatewayError`,
so callers can tell ours from bugs.  Errors carry a message meant for a
human: what was wrong and where.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelt ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class StompProtocolError(GatewayError):
    """A peer broke the STOMP protocol; the connection gets an ERROR frame.

    :ivar fatal: whether the connection must be closed after the ERROR.
    """

    def __init__(self, message: str, detail: str = "", *, fatal: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.fatal = fatal


class FrameTooLarge(StompProtocolError):
    """A frame, its headers or one header line exceeded a configured limit."""


class FrameSkipped(FrameTooLarge):
    """A frame over ``max_frame_size`` whose headers were within the limits, skipped rather than fatal.

    A decoder told to skip such frames (:attr:`gateway.wire.codec.FrameDecoder.skip_oversized`) yields
    this in the frame's place, with its headers, and discards its body as it arrives; the frames after it
    are read as usual.  Not an error of the connection (``fatal`` is false).

    :ivar command: the frame's command (``MESSAGE``).
    :ivar headers: its headers, as decoded.
    :ivar size: command, headers and body in bytes if ``content-length`` announced the body; else the
        bytes received when the frame went over the limit (``size_known`` false: it is larger).
    :ivar size_known: whether ``size`` is the frame's whole size.
    :ivar limit: the ``max_frame_size`` it exceeded.
    """

    def __init__(self, command: str, headers: dict[str, str], size: int, size_known: bool, limit: int) -> None:
        what = f"{size} bytes" if size_known else f"more than {size} bytes (no content-length)"
        super().__init__("frame too large", f"frame {command} of {what} is larger than the limit of {limit} bytes; "
                                            "skipped", fatal=False)
        self.command = command
        self.headers = headers
        self.size = size
        self.size_known = size_known
        self.limit = limit


class MalformedFrame(StompProtocolError):
    """The bytes received cannot be read as a STOMP frame."""


class ConfigError(GatewayError):
    """A configuration file or value is invalid.

    :ivar path: the file the problem is in (may be empty for ``--set`` values).
    :ivar key: the dotted key that is wrong.
    """

    def __init__(self, problem: str, *, path: str = "", key: str = "") -> None:
        where = ", ".join(part for part in (path, f"key {key!r}" if key else "") if part)
        super().__init__(f"{where}: {problem}" if where else problem)
        self.problem = problem
        self.path = path
        self.key = key


class SelectorError(GatewayError):
    """A JMS selector does not parse; the message names column and token."""

    def __init__(self, message: str, *, selector: str = "", column: int = 0) -> None:
        super().__init__(message)
        self.selector = selector
        self.column = column


class ConnectorError(GatewayError):
    """A connector could not do what was asked (send, subscribe, ack).

    :cvar permanent: whether trying again cannot help (the target refused the
        message itself); a bridge fails (or dead-letters) instead of retrying.
    :cvar in_doubt: whether the target may have applied the request anyway (its
        confirmation was lost); False when it surely did not (never sent, or
        rolled back), so sending again cannot duplicate.
    """

    permanent: bool = False
    in_doubt: bool = True


class MessageRefused(ConnectorError):
    """The target refused a message for good (too large, a type it cannot take,
    not routed); sending it again gives the same answer."""

    permanent = True
    in_doubt = False


class DestinationFull(ConnectorError):
    """The destination reached its memory limit and its ``full_policy`` is FAIL:
    the message was not taken (nothing stored); it may be sent again later."""

    in_doubt = False


class StaleDelivery(ConnectorError):
    """An acknowledgement of a delivery made on a previous connection (or Kafka
    group generation): the source redelivers that message, so it was not acknowledged."""


class BatchRevoked(ConnectorError):
    """The consumer group revoked (or declared lost) a source partition while its records were in
    the batch a log transaction was about to copy: the batch is dropped before its transaction
    begins (nothing written, no offset committed); the partition's owner reads its records again."""

    in_doubt = False


class ConnectorUnavailable(ConnectorError):
    """The connector's target is away (disconnected, retrying)."""


class DestinationError(GatewayError):
    """A destination name is invalid or refers to something not allowed."""


class LimitReached(DestinationError):
    """A destination was not created: the broker's ``max_destinations`` or the login's ``max_queues``
    was reached (its text names the destination and the limit).  Refused like an authorization
    refusal: the frame gets an ERROR and the connection stays open; nothing existing is touched."""


class NotOwner(DestinationError):
    """A durable subscription named by another login than the one that created it (its text is
    the ERROR frame's ``message``)."""


class TransformError(GatewayError):
    """A message transformer failed; carries the plugin name."""

    def __init__(self, message: str, *, transformer: str = "") -> None:
        super().__init__(message)
        self.transformer = transformer


class StoreError(GatewayError):
    """The message store failed (corrupt database, disk full, I/O error)."""
