"""Message groups of a queue (JMS ``JMSXGroupID``, as ActiveMQ keeps them).

Messages with the same ``JMSXGroupID`` go to one consumer of the queue at a time, in order:
the first of a group goes to whichever consumer the queue would pick, and the group sticks to
it (its first delivery there carries ``JMSXGroupFirstForConsumer=true``); a first message
the picked consumer refuses (its transport full) was not delivered and assigns nothing.  A message with
``JMSXGroupSeq = -1`` closes its group once delivered; the groups of a consumer that leaves
are released, so its unacknowledged messages (back at their places, flagged redelivered) and
the rest of the group go to the next consumer picked.  At most :data:`MAX_GROUPS` groups are
remembered (the least recently used is forgotten: its next message is assigned afresh, as
ActiveMQ's cached group map does).  This module only remembers; the queue asks.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from gateway.message.model import Message

GROUP_ID = "JMSXGroupID"
GROUP_SEQ = "JMSXGroupSeq"
FIRST_FOR_CONSUMER = "JMSXGroupFirstForConsumer"
MAX_GROUPS = 65_536
"""Most groups remembered per queue."""

C = TypeVar("C")


def group_of(message: Message) -> str | None:
    """The message's group (None: it has none)."""
    properties = message.properties
    if not properties:
        return None
    group = properties.get(GROUP_ID)
    return None if group is None or group == "" else str(group)


def closes_group(message: Message) -> bool:
    """Whether the message is its group's last (``JMSXGroupSeq = -1``)."""
    seq = message.properties.get(GROUP_SEQ)
    return seq is not None and str(seq).strip() == "-1"


def flagged(message: Message, first: bool) -> Message:
    """``message`` with ``JMSXGroupFirstForConsumer`` set when ``first`` (a copy) and without it
    otherwise (a copy only when a redelivered first message still carries it)."""
    if first:
        copy = message.copy()
        copy.properties[FIRST_FOR_CONSUMER] = True
        return copy
    if FIRST_FOR_CONSUMER in message.properties:
        copy = message.copy()
        del copy.properties[FIRST_FOR_CONSUMER]
        return copy
    return message


class MessageGroups(Generic[C]):
    """Which consumer owns each group of one queue."""

    def __init__(self, limit: int = MAX_GROUPS) -> None:
        self.limit = limit
        self._owners: OrderedDict[str, C] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def owner(self, group: str) -> C | None:
        owner = self._owners.get(group)
        if owner is not None:
            self._owners.move_to_end(group)
        return owner

    def assign(self, group: str, consumer: C) -> None:
        self._owners[group] = consumer
        self._owners.move_to_end(group)
        if len(self._owners) > self.limit:
            self._owners.popitem(last=False)

    def close(self, group: str) -> None:
        self._owners.pop(group, None)

    def consumer_left(self, consumer: C) -> None:
        """Release every group ``consumer`` owned."""
        if self._owners:
            for group in [g for g, owner in self._owners.items() if owner is consumer]:
                del self._owners[group]
