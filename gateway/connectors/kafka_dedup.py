"""Duplicate detection of resent SENDs to Kafka topics: the connector's idempotency window (issue 35).

A SEND carrying ``x-dedup-id`` (or Artemis' ``_AMQ_DUPL_ID``) to a Kafka-backed destination is
produced once per topic and id within a bounded window: a resend with the same id (the client got
no RECEIPT before its gateway died) is acknowledged without a second record.  The window is
:class:`~gateway.broker.idempotency.IdempotentSends`, keyed by *topic* and id (``/queue/kafka.x``
and ``/topic/x`` name the same topic); a key enters it once Kafka acknowledged the record.

The id travels as the record's ``jms.x-dedup-id`` / ``jms._AMQ_DUPL_ID`` header (every property
does), so a gateway rebuilds its window of a topic from the topic's tail (the last
``dedup_tail`` records of each partition) before the first keyed send to that topic after it
started: a resend after a restart is detected too.  What this window does not see: a record a
*live* peer of a fleet produced after this gateway read the tail (see docs/kafka.md).

This module owns the window per connector and the tail reading; it does not produce records.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.broker.idempotency import ARTEMIS_HEADER, DEDUP_HEADER, IdempotentSends, SendId, has_send_id
from gateway.message.kafka_records import JMS_PREFIX
from gateway.message.model import Message

RECORD_HEADERS = {(JMS_PREFIX + DEDUP_HEADER): DEDUP_HEADER, (JMS_PREFIX + ARTEMIS_HEADER): ARTEMIS_HEADER}
"""Record header -> the idempotency property it carries."""

TOPIC_MARK = "kafka:"
"""Prefix of the topic standing for the destination in the window's keys."""


def key_of_record(topic: str, headers: list[tuple[str, bytes | None]] | None) -> str | None:
    """The window's key of a record of ``topic`` with ``headers``, None without an idempotency id
    (``x-dedup-id`` wins over ``_AMQ_DUPL_ID``, as on a SEND)."""
    found: dict[str, str] = {}
    for name, value in headers or ():
        prop = RECORD_HEADERS.get(name)
        if prop is not None and value:
            found[prop] = value.decode("utf-8", "replace")
    sent_id = found.get(DEDUP_HEADER) or found.get(ARTEMIS_HEADER)
    return None if sent_id is None else TOPIC_MARK + topic + "\n" + sent_id


class TopicSendIds:
    """The idempotency window of one Kafka connector.

    :param clock: the reactor.
    :param read_tail: ``read_tail(topic)`` fires with the keys (oldest first, with the
        records' timestamps in ms) of the topic's tail; called once per topic.
    :param size: keys kept (0: no detection).
    :param seconds: longest a key is kept.
    """

    log = Logger()

    def __init__(self, clock: Any, read_tail: Callable[[str], Deferred[list[SendId]]], *, size: int,
                 seconds: int) -> None:
        self.window = IdempotentSends(clock, size, seconds)
        self._read_tail = read_tail
        self._topics: dict[str, Deferred[None] | None] = {}
        """Topic -> its tail reading under way (None once read)."""

    @property
    def enabled(self) -> bool:
        return self.window.size > 0

    def send(self, messages: list[tuple[str, Message]],
             send: Callable[[list[Message]], Deferred[Any]]) -> Deferred[Any]:
        """Send those of ``messages`` (topic, message) whose id is not in the window through ``send``
        (one call, in order); the others are settled at once.  Fires with what ``send``'s Deferred
        fired with (None when every message was a duplicate)."""
        topics = {topic for topic, _ in messages}
        for topic in topics - self._topics.keys():
            self._load(topic)
        readings = [reading for topic in topics if (reading := self._topics[topic]) is not None]
        if readings:
            waiting: Deferred[Any] = Deferred()
            readings[0].addBoth(lambda _: waiting.callback(None))
            return waiting.addCallback(lambda _: self.send(messages, send))
        originals: dict[int, Message] = {}
        stand_ins: list[Message] = []
        for topic, message in messages:
            stand_in = copy.copy(message)  # keyed by the topic: its aliases are one destination
            stand_in.destination = TOPIC_MARK + topic
            originals[id(stand_in)] = message
            stand_ins.append(stand_in)
        result = self.window.send(stand_ins, lambda fresh: send([originals[id(part)] for part in fresh]))
        if result is None:
            done: Deferred[Any] = Deferred()
            done.callback(None)
            return done
        return result

    def _load(self, topic: str) -> None:
        """Read the keys of ``topic``'s tail into the window (``_topics[topic]`` is None once done)."""
        loaded: Deferred[None] = Deferred()
        self._topics[topic] = loaded

        def read(keys: list[SendId]) -> None:
            self.window.recover(keys, quiet=True)  # (not the embedded broker's: this line says whose)
            self.log.info("kafka idempotency window: {count} keys (x-dedup-id) read back from the tail of topic "
                          "{topic}", count=len(keys), topic=topic)

        def unreadable(failure: Any) -> None:
            self.log.warn("kafka idempotency window: cannot read the tail of topic {topic} ({error}); a resend "
                          "of a record stored before this gateway started may be stored again", topic=topic,
                          error=failure.getErrorMessage())

        def done(_: object) -> None:
            self._topics[topic] = None
            loaded.callback(None)

        self._read_tail(topic).addCallbacks(read, unreadable).addBoth(done)


def keyed(messages: list[Message]) -> bool:
    """Whether any of ``messages`` carries an idempotency id (the send path asks this first)."""
    return any(has_send_id(message) for message in messages)
