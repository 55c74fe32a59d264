"""Last-value queues (Artemis'): a new message replaces the waiting one with the same key.

A destination whose ``[broker.destinations."PATTERN"]`` policy has ``last_value = true`` keeps, for
each value of a message's :data:`LVQ_HEADER` header, only the newest message not yet delivered: the
one it replaces leaves the queue (and the store) unseen, as in Artemis.  A message out for
acknowledgement is not replaced (it may come back, beside the newer one, if it is not
acknowledged); messages without the header queue as usual.  :class:`LastValues` is the index
key -> message id of the waiting messages the queue keeps; the queue removes what it names.  Pure: no
Twisted, no broker.
"""

from __future__ import annotations

from gateway.message.model import Message

LVQ_HEADER = "_AMQ_LVQ_NAME"
"""The header (message property) whose value is a message's last-value key (Artemis')."""


class LastValues:
    """The id of the newest message of each last-value key."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def replace(self, message: Message) -> str | None:
        """Remember ``message`` as its key's newest; the id of the message it replaces (to take
        out of the queue if it still waits there), None when it has no key or none came before."""
        key = message.properties.get(LVQ_HEADER)
        if key is None:
            return None
        key = str(key)
        previous = self._ids.get(key)
        self._ids[key] = message.message_id
        return previous if previous != message.message_id else None

    def forget(self, message: Message) -> None:
        """``message`` no longer waits (delivered, expired, removed): its key is forgotten unless a newer
        message holds it, so the index holds the keys of waiting messages only (it kept every key ever
        sent: about 220 bytes each, for ever)."""
        key = message.properties.get(LVQ_HEADER)
        if key is not None and self._ids.get(str(key)) == message.message_id:
            del self._ids[str(key)]

    def restore(self, message: Message) -> None:
        """``message`` waits again (it came back unacknowledged): the newest of its key, unless a newer
        one came meanwhile (then it sits beside that one)."""
        key = message.properties.get(LVQ_HEADER)
        if key is not None:
            self._ids.setdefault(str(key), message.message_id)
