"""What a target already holds: the in-doubt check of ONCE_AND_ONLY_ONCE bridges.

A ONCE_AND_ONLY_ONCE bridge gives each message it sends a message id derived
from the source message id (:func:`target_message_id`).  When the bridge
starts, before it consumes anything, it asks the target which of its
messages it still holds (:func:`held_message_ids`) and counts those as
delivered: so a crash after the target stored a batch but before the
bridge's duplicate store recorded it is resolved by looking, not by
resending.

Connectors that can answer declare
:attr:`~gateway.interfaces.Capability.HELD_MESSAGE_IDS`.  A connector answers
itself if it offers ``held_message_ids(destination) -> Deferred[set[str] |
None]``: a JMS broker over STOMP browses a queue and reads the
``_AMQ_DUPL_ID`` property the bridge sets on its copies
(:mod:`gateway.connectors.stomp_browse`; a topic answers None, and
:func:`why_cannot_tell` says so, which makes a ONCE_AND_ONLY_ONCE bridge into
it a configuration error).  The embedded broker is answered here by reading
its queues (the queue itself, or every subscriber queue of a topic, pending
and in flight) and Kafka by reading the newest records of the target topic
(committed ones only; behind ``[routing]``, the topic of the route the
destination alone decides).  Other connectors answer None: for them the
window stays open (see :mod:`gateway.bridges.dedup`).  What a consumer took
from the target between the send and the probe is not held any more: the
duplicate store still answers for what the bridge recorded.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed

from gateway.interfaces import IConnector


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
    ask = getattr(connector, "why_cannot_tell", None)
    if ask is None:
        return None
    reason: str | None = ask(destination)
    return reason


def held_message_ids(connector: IConnector, destination: str, *, tail: int = 1000) -> Deferred[set[str] | None]:
    """Ids of the messages ``connector`` holds at ``destination``, or None if it cannot tell.

    :param tail: for a log (Kafka): how many of the newest records of each
        partition to read; the batches in doubt are among the last a bridge wrote.
    """
    ask = getattr(connector, "held_message_ids", None)
    if ask is not None:
        result: Deferred[set[str] | None] = maybeDeferred(ask, destination)
        return result
    from gateway.broker.broker import EmbeddedBroker

    if isinstance(connector, EmbeddedBroker):
        return succeed(_embedded_ids(connector, destination))
    from gateway.connectors.kafka import KafkaConnector

    if isinstance(connector, KafkaConnector):
        return _kafka_ids(connector, connector.topic_of(destination), tail)
    from gateway.routing.service import KafkaRouter

    if isinstance(connector, KafkaRouter):
        # [routing] took the Kafka connector's place: the route decides the topic; it can be
        # read only when the destination alone decides the route.
        route = connector.forward_route(destination)
        if route is None:
            return succeed(None)
        return _kafka_ids(connector.connector, route.topic, tail)
    return succeed(None)


def _kafka_ids(connector: Any, topic: str, tail: int) -> Deferred[set[str] | None]:
    """The ``jms.MessageId`` headers of the last ``tail`` committed records of each
    partition of ``topic`` (a thread reads them)."""
    from twisted.internet.threads import deferToThreadPool

    settings = connector.settings

    def read() -> set[str]:
        from confluent_kafka import Consumer, TopicPartition

        config = {key: value for key, value in settings.consumer.items() if key != "group.id"}
        config.update({
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"jmsgateway-probe-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        })
        consumer = Consumer(config)
        ids: set[str] = set()
        try:
            metadata = consumer.list_topics(topic, timeout=10)
            if topic not in metadata.topics or metadata.topics[topic].error is not None:
                return ids
            ends: dict[int, int] = {}
            assignment = []
            for partition in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                if high > low:
                    ends[partition] = high
                    assignment.append(TopicPartition(topic, partition, max(low, high - tail)))
            if not assignment:
                return ids
            consumer.assign(assignment)
            deadline = time.monotonic() + 30
            while ends and time.monotonic() < deadline:
                record: Any = consumer.poll(0.2)
                if record is None:
                    # transaction markers take offsets too: stop a partition once its position reached the end
                    for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                        if tp.offset >= ends.get(tp.partition, 0):
                            ends.pop(tp.partition, None)
                    continue
                if record.error() is not None:
                    continue
                for name, value in record.headers() or ():
                    if name == "jms.MessageId" and value is not None:
                        ids.add(value.decode("utf-8", "replace"))
                if record.offset() + 1 >= ends.get(record.partition(), 0):
                    ends.pop(record.partition(), None)
        finally:
            consumer.close()
        return ids

    result: Deferred[set[str] | None] = deferToThreadPool(connector.reactor, connector.reactor.getThreadPool(), read)
    return result


def _embedded_ids(broker: Any, destination: str) -> set[str]:
    queues = []
    if destination in broker.queues:
        queues.append(broker.queues[destination])
    queues.extend(broker.topics.get(destination, ()))
    ids: set[str] = set()
    for queue in queues:
        ids.update(message.message_id for message in queue.messages())
        for consumer in queue.consumers:
            ids.update(message.message_id for message in consumer.unacked.values())
    return ids
