"""What a transformer may return instead of a message: drop it or branch it.

Owns the two decision types of the transformer contract
(:class:`gateway.interfaces.IMessageTransformer`).  A transformer returns
one of:

- a :class:`~gateway.message.model.Message` (the one it was given, changed,
  or a new one of another type): pass it on to the next transformer;
- :class:`Drop`: consume the message and do not transfer it (the SEND is
  still acknowledged with its RECEIPT: the gateway took responsibility and
  decided to discard it);
- :class:`Branch`: send this message to another destination; the rest of
  the chain still runs, and the message is delivered to the branch
  destination instead of the original one;
- a Deferred (or a coroutine) firing with one of the above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from gateway.message.model import Message


@dataclass(slots=True, frozen=True)
class Drop:
    """Consume the message and do not transfer it.

    :ivar reason: why, for logs and metrics (``hop limit reached``).
    """

    reason: str = ""


@dataclass(slots=True, frozen=True)
class Branch:
    """Send ``message`` to ``destination`` instead of where it was going.

    :ivar message: the message to send (the given one, changed, or a new one).
    :ivar destination: the new destination, in the same namespace as the
        original one (``/queue/orders.eu``).
    """

    message: Message
    destination: str
