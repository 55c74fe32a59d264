"""Does the broker refuse a transaction's offsets sent with a consumer group's *old* generation?

A Kafka -> Kafka ONCE_AND_ONLY_ONCE bridge (the transactions engine, docs/bridges.md) commits the
source offsets in its transaction with ``send_offsets_to_transaction(offsets,
consumer.consumer_group_metadata())``.  The metadata carries the group's generation and the member
id; Kafka (KIP-447) refuses a TxnOffsetCommit from a generation the group left behind
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID: an abortable error, the
transaction cannot commit), so a partition's old owner cannot commit its offsets after the group
gave the partition to another member.

These tests put the question to the broker directly, with plain confluent-kafka clients: consumer A
of group G holds both partitions of the source, producer P_A begins a transaction and writes; B
joins G and the group rebalances (one partition each); P_A then sends offsets of the partition B
now owns with A's metadata from *before* the rebalance, and commits.  Two shapes: P_A with a
``transactional.id`` of its own, and P_A with the one ``transactional.id`` both gateways use (B's
producer of that id started first, so P_A's epoch is the newest: only the group generation can
refuse).  Against Tansu (the test broker) the commit is accepted and the group's offset moves: it
does not check the generation, so the bridge must guard itself
(:class:`gateway.connectors.kafka_transactions.KafkaTransactionalCopy` drops the batch of a
partition revoked or lost while it was being copied).  Against a real Kafka
(``JMSGATEWAY_KAFKA_BOOTSTRAP``) the commit must fail and the offset stay.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from tests.support.kafka import BOOTSTRAP_ENV, committed_offsets, create_topics, kafka_bootstrap, unique_topic

__all__ = ["kafka_bootstrap"]

pytestmark = pytest.mark.kafka

STALE_OFFSET = 7
"""The offset the old owner commits (the source has none committed before)."""


def consumer_of(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "auto.offset.reset": "earliest"})


def assigned(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def poll_until(consumers: list[Any], done: Any, timeout: float, what: str) -> None:
    """Poll every consumer (they serve their rebalances inside poll) until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for consumer in consumers:
            consumer.poll(0.1)


def transactional(bootstrap: str, transactional_id: str) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(15)
    return producer


@pytest.mark.parametrize("shape", ["own-transactional-ids", "one-transactional-id"])
def test_an_old_owner_commits_offsets_of_a_partition_the_group_gave_away(kafka_bootstrap: str, shape: str) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    tag = uuid.uuid4().hex[:8]
    source, target, group = unique_topic("gen-src"), unique_topic("gen-dst"), f"gen-{tag}"
    create_topics(kafka_bootstrap, source, partitions=2)
    create_topics(kafka_bootstrap, target)
    first = consumer_of(kafka_bootstrap, group)
    second = consumer_of(kafka_bootstrap, group)
    try:
        first.subscribe([source])
        poll_until([first], lambda: assigned(first) == {0, 1}, 30, "A to own both partitions")
        old_metadata = first.consumer_group_metadata()
        if shape == "one-transactional-id":
            # B's producer of the shared id started first: P_A's init_transactions fenced it, so P_A
            # holds the newest epoch and no producer fence can stop its commit
            transactional(kafka_bootstrap, f"gen-{tag}")
            producer = transactional(kafka_bootstrap, f"gen-{tag}")
        else:
            producer = transactional(kafka_bootstrap, f"gen-{tag}-a")
            transactional(kafka_bootstrap, f"gen-{tag}-b")
        producer.begin_transaction()
        producer.produce(target, value=b"the old owner's copy")
        assert producer.flush(15) == 0

        second.subscribe([source])
        poll_until([first, second], lambda: len(assigned(first)) == 1 and len(assigned(second)) == 1, 60,
                   "the group to give one partition to B")
        (given_away,) = assigned(second)
        assert first.consumer_group_metadata() != old_metadata, "the rebalance made a new generation"
        print(f"\n{shape}: partition {given_away} moved to B; A's old metadata {old_metadata!r}")

        refused: str | None = None
        try:
            producer.send_offsets_to_transaction([TopicPartition(source, given_away, STALE_OFFSET)], old_metadata, 15)
            producer.commit_transaction(15)
        except KafkaException as error:
            refused = str(error)
            producer.abort_transaction(15)
        offsets = committed_offsets(kafka_bootstrap, group, source, partitions=2)
        print(f"{shape}: refused: {refused}; the group's committed offsets: {offsets}")
    finally:
        first.close()
        second.close()

    if os.environ.get(BOOTSTRAP_ENV):
        assert refused is not None, "Kafka refuses offsets of an old generation (KIP-447)"
        assert offsets[given_away] < 0, offsets
    else:
        # Tansu checks neither the generation nor the member: the old owner's offsets commit
        assert refused is None, (
            f"Tansu now refuses offsets of an old generation ({refused}): update docs/bridges.md (the Kafka -> "
            "Kafka row) and this test")
        assert offsets[given_away] == STALE_OFFSET, offsets


@pytest.mark.parametrize("end", ["abort", "commit"])
def test_a_transactions_offsets_wait_for_another_transactional_ids_open_transaction(kafka_bootstrap: str,
                                                                                    end: str) -> None:
    """Tansu resolves a transaction only once no transaction of another ``transactional.id`` is open on a
    partition it wrote: ``commit_transaction`` returns at once, its records count as committed, but its
    offsets reach the group only when the other transaction ends.  A reader of the group's offsets meanwhile
    (a bridge rewinding after a failure, the partition's next owner) starts before records whose copies
    committed: it copies them again.  The bridge uses one ``transactional.id`` (its producers' transactions
    never overlap: ``init_transactions`` aborts the previous one), so only another transactional writer into
    its target's partitions (another bridge, an application) exposes it.  A real Kafka applies the offsets at
    the commit."""
    from confluent_kafka import Consumer, TopicPartition

    tag = uuid.uuid4().hex[:8]
    source, target, group = unique_topic("defer-src"), unique_topic("defer-dst"), f"defer-{tag}"
    create_topics(kafka_bootstrap, source)
    create_topics(kafka_bootstrap, target)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        other = transactional(kafka_bootstrap, f"defer-{tag}-other")
        other.begin_transaction()
        other.produce(target, value=b"another writer's open transaction")
        assert other.flush(15) == 0
        bridge = transactional(kafka_bootstrap, f"defer-{tag}-bridge")
        seen = []
        for offset in (50, 70):
            bridge.begin_transaction()
            bridge.produce(target, value=f"copy up to {offset}".encode())
            bridge.send_offsets_to_transaction([TopicPartition(source, 0, offset)], consumer.consumer_group_metadata(),
                                               15)
            bridge.commit_transaction(15)
            seen.append(committed_offsets(kafka_bootstrap, group, source)[0])
        getattr(other, f"{end}_transaction")(15)
        time.sleep(0.5)
        final = committed_offsets(kafka_bootstrap, group, source)[0]
        print(f"\nthe group's offset after each commit: {seen}; after the other transaction's {end}: {final}")
    finally:
        consumer.close()
    assert final == 70
    if os.environ.get(BOOTSTRAP_ENV):
        assert seen == [50, 70], "Kafka applies a transaction's offsets when it commits"
    else:
        assert seen == [-1001, -1001], (
            f"Tansu now applies a transaction's offsets at its commit ({seen}): update docs/bridges.md and this test")
