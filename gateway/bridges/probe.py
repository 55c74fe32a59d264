"""What a target already holds: the in-doubt check of ONCE_AND_ONLY_ONCE bridges.

A ONCE_AND_ONLY_ONCE bridge gives each message it sends a message id derived
from the source message id (:func:`target_message_id`).  When the bridge
starts, before it consumes anything, it asks the target which of its
messages it still holds (:func:`held_message_ids`) and counts those as
delivered: so a crash after the target stored a batch but before the
bridge's duplicate store recorded it is resolved by looking, not by
resending.

Connectors that can answer provide :class:`~gateway.interfaces.IHeldMessages`
(and declare :attr:`~gateway.interfaces.Capability.HELD_MESSAGE_IDS`): the
embedded broker reads its queues (the queue itself, or every subscriber queue
of a topic, pending and in flight), a JMS broker over STOMP browses a queue
and reads the ``_AMQ_DUPL_ID`` property the bridge sets on its copies (a
topic answers None, and :func:`why_cannot_tell` says so, which makes a
ONCE_AND_ONLY_ONCE bridge into it a configuration error), Kafka reads the
newest records of the target topic (committed ones only; behind
``[routing]``, the topic of the route the destination alone decides).  Other
connectors answer None: for them the window stays open (see
:mod:`gateway.bridges.dedup`).  What a consumer took from the target between
the send and the probe is not held any more: the duplicate store still
answers for what the bridge recorded.  This module knows connectors only
through that interface.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, maybeDeferred, succeed

from gateway.interfaces import IConnector, IHeldMessages


def target_message_id(bridge: str, source_id: str) -> str:
    """The id a ONCE_AND_ONLY_ONCE bridge gives the copy of ``source_id`` it sends."""
    return f"ID:bridge-{bridge}:{source_id}"


def source_id_of(bridge: str, target_id: str) -> str | None:
    """The source id inside a :func:`target_message_id` of ``bridge``, else None."""
    prefix = f"ID:bridge-{bridge}:"
    if not target_id.startswith(prefix):
        return None
    return target_id[len(prefix):] or None


def why_cannot_tell(connector: IConnector, destination: str) -> str | None:
    """Why ``connector`` can never say which messages it holds at ``destination``, when it
    knows so in advance (a topic of a JMS broker over STOMP), else None."""
    holder = IHeldMessages(connector, None)
    if holder is None:
        return None
    reason: str | None = holder.why_cannot_tell(destination)
    return reason


def held_message_ids(connector: IConnector, destination: str, *, tail: int = 1000) -> Deferred[set[str] | None]:
    """Ids of the messages ``connector`` holds at ``destination``, or None if it cannot tell.

    :param tail: for a log (Kafka): how many of the newest records of each
        partition to read; the batches in doubt are among the last a bridge wrote.
    """
    holder = IHeldMessages(connector, None)
    if holder is None:
        return succeed(None)
    result: Deferred[set[str] | None] = maybeDeferred(holder.held_message_ids, destination, tail)
    return result
