"""The copy a bridge sends: the one place that builds it, for every engine.

A bridge never sends the message it consumed: it sends a copy addressed to the target
destination (or the one a transformer chose), with the redelivery flags cleared, the origin
header of the cycle guard removed and, with ``add_message_id_in_header``, the source id
appended to :data:`MESSAGE_ID_LIST`.  Its id is derived from the source id when the bridge may
have to ask the target whether it holds the copy (:func:`~gateway.bridges.probe.target_message_id`,
also set as :data:`~gateway.message.model.DUPLICATE_ID`), else a new one.
:class:`CopyMaker` runs the bridge's transformer chain first.  It knows no connector and no
quality of service: the strategy says whether ids are derived.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed

from gateway.bridges.probe import target_message_id
from gateway.deferreds import gather
from gateway.message.kafka_records import ORIGIN_HEADER
from gateway.message.model import DUPLICATE_ID, Message, new_message_id
from gateway.transform import DeadLettered, Deliver, Dropped, TransformContext

MESSAGE_ID_LIST = "AMQ_BRIDGE_MSG_ID_LIST"
"""Property listing the source message ids of every hop (the name Artemis uses)."""

KAFKA_FALLBACK_ID = "ID:kafka:"
"""Prefix of the id a Kafka record without ``jms.MessageId`` gets (topic, partition, offset)."""


def source_key(message: Message) -> str:
    """The id a ONCE_AND_ONLY_ONCE bridge remembers a source message by.

    The message id, except for the id made up for a plain Kafka record
    (``ID:kafka:<topic>:<partition>:<offset>``), which a topic deleted and
    created again hands out once more: the record's timestamp is added, so a
    new record at a reused offset is not taken for the old one.
    """
    message_id = message.message_id
    if message_id.startswith(KAFKA_FALLBACK_ID) and message.timestamp:
        return f"{message_id}@{message.timestamp}"
    return message_id


class TransformRejected(Exception):
    """A transformer rejected a message: no retry sends it."""


@dataclass(frozen=True)
class CopyRules:
    """How one bridge builds its copies.

    :ivar bridge: the bridge's name (part of a derived id).
    :ivar source: the source destination (the transformers' context).
    :ivar target: the target destination.
    :ivar derive_ids: give each copy :func:`~gateway.bridges.probe.target_message_id` of its source
        (the target can then be asked whether it holds it); otherwise a new id.
    :ivar add_message_id_in_header: append the source id to :data:`MESSAGE_ID_LIST`.
    """

    bridge: str
    source: str
    target: str
    derive_ids: bool
    add_message_id_in_header: bool


def make_copy(rules: CopyRules, message: Message, original: Message, destination: str) -> Message:
    """The copy of ``message`` (``original`` transformed) a bridge sends to ``destination``."""
    out = message.copy()
    out.destination = destination
    if rules.derive_ids:
        # the in-doubt check finds these copies at the target by their id; a JMS broker over
        # STOMP sets its own message-id, so the id also travels as Artemis's duplicate id
        out.message_id = target_message_id(rules.bridge, source_key(original) or uuid.uuid4().hex)
        out.properties[DUPLICATE_ID] = out.message_id
    else:
        out.message_id = new_message_id()
    out.redelivered = False
    out.redelivery_count = 0
    # The copy is a new message of this gateway: the origin of the source record (maybe this
    # gateway itself) must not make a router take it for one it produced (the cycle guard).
    out.properties.pop(ORIGIN_HEADER, None)
    if rules.add_message_id_in_header and original.message_id:
        previous = out.properties.get(MESSAGE_ID_LIST)
        if isinstance(previous, bytes):
            previous = previous.decode("utf-8", "replace")
        out.properties[MESSAGE_ID_LIST] = f"{previous},{original.message_id}" if previous else original.message_id
    return out


class CopyMaker:
    """Transform then copy a bridge's messages (:func:`make_copy`).

    :param rules: the bridge's :class:`CopyRules`.
    :param chains: its transformer chain (``run(message, context)``), or None.
    :param dropped: called once per message a transformer dropped (the bridge counts it).
    """

    def __init__(self, rules: CopyRules, chains: Any, dropped: Callable[[], None]) -> None:
        self.rules = rules
        self.chains = chains
        self.dropped = dropped

    def context(self) -> TransformContext:
        return TransformContext("inbound", self.rules.source, self.rules.target)

    def copies(self, messages: list[Message]) -> Deferred[list[Message]]:
        """The copies of ``messages`` to send (fails with :class:`TransformRejected`)."""
        if self.chains is None:
            return succeed([make_copy(self.rules, message, message, self.rules.target) for message in messages])
        outcomes = [maybeDeferred(self.chains.run, message, self.context()) for message in messages]
        d = gather(outcomes)
        d.addCallback(lambda found: [copy for copy in map(self.copy_of, found, messages) if copy is not None])
        return d

    def copy_of(self, outcome: Any, original: Message) -> Message | None:
        """The copy a transformer ``outcome`` for ``original`` asks for; None when it dropped it."""
        if isinstance(outcome, Deliver | DeadLettered):
            return make_copy(self.rules, outcome.message, original, outcome.destination)
        if isinstance(outcome, Dropped):
            self.dropped()
            return None
        error = getattr(outcome, "error", outcome)
        raise TransformRejected(f"a transformer rejected message {original.message_id}: {error}")
