"""How the Kafka -> Kafka transactions engine (gateway.connectors.kafka_transactions) recovers from a
transaction whose outcome it does not know (issue 32: two gateways running one bridge; on Tansu a
fenced producer's commit may time out instead of failing with PRODUCER_FENCED)."""

from __future__ import annotations

from typing import Any

from gateway.connectors.kafka_transactions import KafkaTransactionalCopy


class Partition:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


class Group:
    """The source group's committed offsets, as the broker holds them; ``finalized`` moves them
    when the next producer's init_transactions completes the transaction left in doubt."""

    def __init__(self, committed: dict[int, int], finalized: dict[int, int]) -> None:
        self.committed = committed
        self.finalized = finalized


class Consumer:
    def __init__(self, group: Group) -> None:
        self.group = group
        self.seeks: list[tuple[int, int]] = []

    def assignment(self) -> list[Partition]:
        return [Partition("src", p, -1001) for p in sorted(self.group.committed)]

    def committed(self, partitions: list[Partition], timeout: float) -> list[Partition]:
        return [Partition("src", tp.partition, self.group.committed[tp.partition]) for tp in partitions]

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.partition, tp.offset))


class TimedOutProducer:
    """Its commit timed out; aborting it fails too (the broker fenced it, or does not answer)."""

    def abort_transaction(self, timeout: float) -> None:
        raise RuntimeError("abort timed out")


def copy_with(group: Group, batch_start: dict[int, int]) -> tuple[KafkaTransactionalCopy, Consumer, list[str]]:
    copy = KafkaTransactionalCopy.__new__(KafkaTransactionalCopy)
    consumer = Consumer(group)
    opened: list[str] = []

    def open_producer() -> None:  # the new producer's init_transactions settles the open transaction
        opened.append("init_transactions")
        group.committed.update(group.finalized)
        copy._producer = object()

    copy._batch_start, copy._positions = dict(batch_start), {p: o + 20 for p, o in batch_start.items()}
    copy._consumer, copy._producer = consumer, TimedOutProducer()
    copy.open_producer = open_producer  # type: ignore[method-assign]
    return copy, consumer, opened


def test_a_transaction_in_doubt_that_committed_after_all_is_not_copied_again() -> None:
    """The commit timed out, yet the broker committed it (copies and offsets together): rewinding to
    the batch's first record would copy it twice.  The next producer's init_transactions settles it,
    then the consumer goes on from the committed offsets (before issue 32: the batch start, 3)."""
    group = Group(committed={0: 3}, finalized={0: 23})
    copy, consumer, opened = copy_with(group, {0: 3})
    copy.recover(RuntimeError("KafkaError{code=_TIMED_OUT}: commit_transaction timed out"))
    assert opened == ["init_transactions"]
    assert consumer.seeks == [(0, 23)]


def test_a_transaction_in_doubt_that_was_aborted_is_copied_again() -> None:
    group = Group(committed={0: 3, 1: 40}, finalized={})
    copy, consumer, opened = copy_with(group, {0: 3})
    copy.recover(RuntimeError("KafkaError{code=_TIMED_OUT}: commit_transaction timed out"))
    assert opened == ["init_transactions"]
    assert consumer.seeks == [(0, 3), (1, 40)]
    assert copy._batch_start == {} and copy._positions == {}
