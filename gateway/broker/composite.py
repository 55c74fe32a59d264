"""Composite destinations (ActiveMQ's comma syntax): a SEND to ``/queue/a,/topic/b`` reaches both.

:func:`composite_parts` reads the name (a part without a ``/queue/`` or ``/topic/`` prefix is of
the kind of the part before it, as in ActiveMQ: ``/queue/a,b`` is two queues);
:func:`expand` makes one copy of a message per part, each with its part as destination (what a
consumer of that part sees, as in ActiveMQ).  The broker stores and enqueues the copies as one
batch, so one receipt (or one COMMIT) covers every part.  Pure: no Twisted, no broker.
"""

from __future__ import annotations

from gateway.message.destinations import KINDS, composite_parts, is_composite
from gateway.message.model import Message

__all__ = ["KINDS", "composite_parts", "expand", "is_composite"]


def expand(message: Message) -> list[Message]:
    """``message`` itself when its destination is not composite, else one copy per part."""
    if "," not in message.destination:
        return [message]
    copies = []
    for part in composite_parts(message.destination):
        copy = message.copy()
        copy.destination = part
        copies.append(copy)
    return copies
