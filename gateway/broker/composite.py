"""Composite destinations (ActiveMQ's comma syntax): a SEND to ``/queue/a,/topic/b`` reaches both.

:func:`composite_parts` reads the name (a part without a ``/queue/`` or ``/topic/`` prefix is of
the kind of the part before it, as in ActiveMQ: ``/queue/a,b`` is two queues);
:func:`expand` makes one copy of a message per part, each with its part as destination (what a
consumer of that part sees, as in ActiveMQ).  The broker stores and enqueues the copies as one
batch, so one receipt (or one COMMIT) covers every part.  Pure: no Twisted, no broker.
"""

from __future__ import annotations

from gateway.errors import DestinationError
from gateway.message.model import Message

KINDS = ("/queue/", "/topic/", "/temp-queue/", "/temp-topic/", "/remote-temp-queue/", "/remote-temp-topic/")


def is_composite(destination: str) -> bool:
    return "," in destination


def composite_parts(destination: str) -> list[str]:
    """The destinations a (possibly composite) name stands for, in order, without repeats;
    ``[destination]`` when it has no comma.  DestinationError for an empty part."""
    if "," not in destination:
        return [destination]
    parts: list[str] = []
    kind = ""
    for raw in destination.split(","):
        part = raw.strip()
        if not part:
            raise DestinationError(f"composite destination {destination!r} has an empty part")
        prefix = next((k for k in KINDS if part.startswith(k)), None)
        if prefix is None:
            if not kind or part.startswith("/"):
                raise DestinationError(f"composite destination {destination!r}: {part!r} is neither "
                                       "/queue/ nor /topic/ (nor a name after a part that says which)")
            part = kind + part
        else:
            kind = prefix
        if part not in parts:
            parts.append(part)
    return parts


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
