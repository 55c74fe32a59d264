"""How the Kafka -> Kafka transactions engine (gateway.connectors.kafka_transactions) recovers from a
transaction whose outcome it does not know (issue 32: two gateways running one bridge; on Tansu a
fenced producer's commit may time out instead of failing with PRODUCER_FENCED)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.connectors.kafka_transactions import CallHung, KafkaTransactionalCopy
from gateway.errors import BatchRevoked, ConnectorError


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
    copy.attempt, copy._committing = "p1-1", True  # its commit_transaction timed out
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


@pytest.mark.parametrize(("finalized", "outcome"), [
    ({}, "aborted (in doubt; the group's offsets stayed at its start: partition 0: none for 0..20, "
         "partition 1: 100 for 100..120)"),
    ({0: 20, 1: 120}, "committed after all (the group's offsets moved past it: partition 0: 20 for 0..20, "
                      "partition 1: 120 for 100..120)"),
    ({1: 120}, "in doubt (the group's offsets: partition 0: none for 0..20, partition 1: 120 for 100..120)"),
])
def test_a_transaction_in_doubt_over_a_partition_the_group_never_committed(finalized: dict[int, int],
                                                                         outcome: str) -> None:
    """The fault matrix's kafka -> kafka ``slow`` cell (2026-11-29): partition 0's first batch was in the
    transaction whose commit timed out, and after the next producer's init_transactions the group still had no
    offset for it (-1001) and partition 1's at the batch start: it did not commit (it would have committed
    both), yet it was logged ``in doubt`` and its copies counted as committed, 100 duplicates."""
    group = Group(committed={0: -1001, 1: 100}, finalized=finalized)
    copy, consumer, opened = copy_with(group, {0: 0, 1: 100})
    settled = copy.recover(RuntimeError("KafkaError{code=_TIMED_OUT}: 100 message(s) timed out"))
    assert opened == ["init_transactions"]
    assert settled == f"transaction p1-1 (0 copies) {outcome}"
    assert consumer.seeks == [(0, finalized.get(0, 0)), (1, finalized.get(1, 100))], "on from the group's offsets"


# -- which transaction wrote a copy, and what became of a failed one (the log tells its copies apart)

class TransactionalProducer:
    """Records what the copy asks; ``fail_at`` names the call that raises."""

    def __init__(self, fail_at: str = "", abort_fails: bool = False) -> None:
        self.fail_at, self.abort_fails = fail_at, abort_fails
        self.produced: list[tuple[str, Any]] = []

    def _step(self, name: str) -> None:
        if name == self.fail_at:
            raise RuntimeError(f"KafkaError{{code=_FENCED}}: {name}")

    def begin_transaction(self) -> None:
        self._step("begin")

    def produce(self, topic: str, value: Any = None, key: Any = None, headers: Any = None) -> None:
        self._step("produce")
        self.produced.append((topic, headers))

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self._step("offsets")

    def commit_transaction(self, timeout: float) -> None:
        self._step("commit")

    def abort_transaction(self, timeout: float) -> None:
        if self.abort_fails:
            raise RuntimeError("abort failed")


class GroupConsumer(Consumer):
    def consumer_group_metadata(self) -> object:
        return object()


def placed_copy(producer: TransactionalProducer) -> KafkaTransactionalCopy:
    copy = KafkaTransactionalCopy.__new__(KafkaTransactionalCopy)
    copy.source_topic = "src"
    copy.place = lambda message: ("dst", b"k", b"v", [("jms.seq", message.encode())])  # type: ignore[attr-defined]
    copy._batch_start, copy._positions = {0: 3}, {0: 5}
    copy._consumer, copy._producer = GroupConsumer(Group({0: 3}, {})), producer
    copy._producer_tag, copy._serial = "p1", 0
    return copy


def attempts(producer: TransactionalProducer) -> list[str]:
    return [dict(headers)["jmsbridge.txn"].decode() for _, headers in producer.produced]


def test_each_copy_names_the_transaction_that_wrote_it() -> None:
    producer = TransactionalProducer()
    copy = placed_copy(producer)
    copy.commit(["s-1", "s-2"])  # type: ignore[list-item]
    copy.commit(["s-3"])  # type: ignore[list-item]
    assert attempts(producer) == ["p1-1", "p1-1", "p1-2"]
    assert [dict(headers)["jms.seq"] for _, headers in producer.produced] == [b"s-1", b"s-2", b"s-3"]
    assert copy.attempt is None, "none under way between transactions"


@pytest.mark.parametrize(("fail_at", "abort_fails", "settled"), [
    ("offsets", True, "transaction p1-1 (2 copies) aborted"),  # fenced before it asked to commit
    ("commit", False, "transaction p1-1 (2 copies) aborted"),  # its abort succeeded
    # its abort failed: the group's offsets, read once the next producer settled it, say which
    ("commit", True, "transaction p1-1 (2 copies) aborted (in doubt; the group's offsets stayed at its start: "
                     "partition 0: 3 for 3..5)"),
    ("commit-committed", True, "transaction p1-1 (2 copies) committed after all (the group's offsets moved past "
                               "it: partition 0: 5 for 3..5)"),
    ("commit-unsettled", True, "transaction p1-1 (2 copies) in doubt (the group's offsets: partition 0: ? for 3..5)"),
])
def test_a_failed_transaction_is_reported_with_its_copies_and_outcome(fail_at: str, abort_fails: bool,
                                                                      settled: str) -> None:
    fail_at, _, then = fail_at.partition("-")
    producer = TransactionalProducer(fail_at, abort_fails)
    copy = placed_copy(producer)
    group = copy._consumer.group

    def open_producer() -> None:  # settles it: committed after all, or not; or fails
        if then == "unsettled":
            raise RuntimeError("init_transactions timed out")
        if then == "committed":
            group.committed[0] = 5

    copy.open_producer = open_producer  # type: ignore[method-assign]
    with pytest.raises(RuntimeError) as failure:
        copy.commit(["s-1", "s-2"])  # type: ignore[list-item]
    assert copy.recover(failure.value) == settled
    assert copy.recover(RuntimeError("a consume failed")) is None, "no transaction under way"



def test_the_bridge_logs_what_became_of_the_failed_transaction() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.bridges.config import parse_bridge
    from gateway.bridges.metrics import BridgeMetrics
    from gateway.bridges.transactional_copy import TransactionalCopyBridge
    from gateway.message.model import TextMessage

    class Reactor:
        def callFromThread(self, f: Any, *args: Any) -> None:
            f(*args)

    class FailingCopy:
        """One batch whose transaction fails; its recover says what became of it."""

        def __init__(self) -> None:
            self.batches = 1

        def open(self) -> bool:
            return False

        def consume(self, max_count: int, timeout: float) -> list[Any]:
            self.batches -= 1
            return [TextMessage(text="s-1", message_id="ID:1", destination="/queue/src")] if self.batches >= 0 else []

        def commit(self, messages: list[Any]) -> None:
            raise RuntimeError("KafkaError{code=_FENCED}: fenced")

        def recover(self, error: Exception) -> str | None:
            bridge._halt.set()
            return "transaction p1-1 (1 copies) aborted"

        def permanent(self, error: Exception) -> bool:
            return False

        def close(self) -> None:
            pass

    config = parse_bridge({"name": "k2k", "qos": "ONCE_AND_ONLY_ONCE", "failure_retry_interval": 1,
                           "source": {"connector": "embedded", "destination": "/queue/src"},
                           "target": {"connector": "embedded", "destination": "/queue/dst"}}, 0, "t.toml", {"embedded"})
    bridge = TransactionalCopyBridge(config, FailingCopy(), clock=Reactor(),  # type: ignore[arg-type]
                                     metrics=BridgeMetrics(CollectorRegistry()))
    bridge._run()
    assert bridge.last_error == ("kafka transaction failed: KafkaError{code=_FENCED}: fenced; "
                                 "transaction p1-1 (1 copies) aborted")


# -- a partition the group takes away while its records are in the batch (docs/bridges.md, the Kafka -> Kafka
# row: Tansu accepts offsets sent with an old generation, tests/integration/test_tansu_group_generation.py)

class RebalancingConsumer:
    """The source consumer: ``consume`` serves a rebalance first when one is due at that call (as librdkafka
    does, inside poll), then returns that call's records; each rebalance makes a new generation."""

    def __init__(self, reads: list[list[tuple[int, int]]], revoke_at: dict[int, list[int]],
                 committed: dict[int, int]) -> None:
        self.reads, self.revoke_at, self.group = reads, revoke_at, committed
        self.callbacks: dict[str, Any] = {}
        self.generation, self.calls = 1, 0
        self.seeks: list[tuple[int, int]] = []

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def consume(self, max_count: int, timeout: float) -> list[Any]:
        from gateway.connectors.kafka_consumer_host import Record

        call, self.calls = self.calls, self.calls + 1
        if call in self.revoke_at:  # (without a callback librdkafka unassigns on its own: nobody hears of it)
            if "on_revoke" in self.callbacks:
                self.callbacks["on_revoke"](self, [Partition("src", p, -1001) for p in self.revoke_at[call]])
            self.generation += 1
        return [Record("src", p, o, b"k", f"body {p}:{o}".encode(), [("jms.seq", f"{p}:{o}".encode())], (0, 0), None)
                for p, o in (self.reads[call] if call < len(self.reads) else [])]

    def consumer_group_metadata(self) -> str:
        return f"generation {self.generation}"

    def assignment(self) -> list[Partition]:
        return [Partition("src", p, -1001) for p in sorted(self.group)]

    def committed(self, partitions: list[Partition], timeout: float) -> list[Partition]:
        return [Partition("src", tp.partition, self.group.get(tp.partition, -1001)) for tp in partitions]

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.partition, tp.offset))


class RecordingProducer(TransactionalProducer):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.offsets: list[tuple[list[tuple[int, int]], Any]] = []

    def _step(self, name: str) -> None:
        self.calls.append(name)

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self.calls.append("offsets")
        self.offsets.append(([(tp.partition, tp.offset) for tp in offsets], metadata))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")


def rebalancing_copy(consumer: RebalancingConsumer, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[KafkaTransactionalCopy, RecordingProducer]:
    from types import SimpleNamespace

    import gateway.connectors.kafka_transactions as module

    monkeypatch.setattr(module, "ConsumerProcess", lambda config, label: consumer)
    settings = SimpleNamespace(consumer={}, bootstrap="kafka:9092", client_id="gw", text_records=True)
    copy = KafkaTransactionalCopy(SimpleNamespace(settings=settings), SimpleNamespace(gateway_id="gw"),
                                  bridge="k2k", source_destination="/queue/src", source_topic="src",
                                  target_topic="dst", key_header=None, group="g", from_earliest=True,
                                  place=lambda message: ("dst", b"k", b"v", []))
    producer = RecordingProducer()

    def open_producer() -> None:
        producer.calls.append("init_transactions")
        copy._producer, copy._producer_tag, copy._serial = producer, "p1", 0

    copy.open_producer = open_producer  # type: ignore[method-assign]
    assert copy.open()
    return copy, producer


@pytest.mark.parametrize("revoked_during", ["the batch's second read", "the read that returned its records"])
def test_a_batch_whose_partition_was_revoked_is_dropped_before_its_transaction(
        revoked_during: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 1's records are in the batch when the group revokes it (eager rebalance: every partition;
    the group hands it to the other gateway, which reads it from the committed offset 10).  Committing the
    batch would commit partition 1's offsets from a member that no longer owns it, with its copies: two
    copies of 10..11 once the new owner commits its own (Tansu does not refuse the old generation).  The
    batch is dropped before its transaction begins (no fence, no abort), the partitions rewound."""
    second_read = revoked_during == "the batch's second read"
    consumer = RebalancingConsumer(reads=[[(0, 3), (1, 10)], [(1, 11)]], revoke_at={1 if second_read else 0: [0, 1]},
                                   committed={0: 3, 1: 10})
    copy, producer = rebalancing_copy(consumer, monkeypatch)
    messages = copy.consume(20, 0.05) + copy.consume(20, 0.05)
    with pytest.raises(BatchRevoked, match="partition 0, 1 of topic src was revoked or lost"):
        copy.commit(messages)
    assert producer.calls == ["init_transactions"], "no transaction begun: nothing written, nothing to abort"
    assert copy.recover(BatchRevoked("revoked")) is None
    assert producer.calls == ["init_transactions"], "no abort, no new producer (it would fence the other gateway)"
    assert consumer.seeks == [(0, 3), (1, 10)]
    consumer.reads.append([(0, 3)])  # read again from the committed offsets: a new batch, committed
    copy.commit(copy.consume(20, 0.05))
    assert producer.calls[-2:] == ["offsets", "commit"]
    assert producer.offsets == [([(0, 4)], "generation 2")]


def test_a_batch_another_member_copied_meanwhile_is_dropped_before_its_transaction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The zombie (CI, 2026-11-30): this member read 1448..1449 of partition 0, was stopped past its session,
    and woke before its consumer heard of the rebalance (no revoke marked the batch).  Meanwhile the new owner
    copied those records and committed 1498.  Tansu takes old-generation offsets, and this member's producer,
    opened after the owner's, was not fenced: committing would copy 1448..1449 twice.  The group's offsets,
    read before the transaction begins, say another member is past the batch: it is dropped, rewound."""
    consumer = RebalancingConsumer(reads=[[(0, 1448), (0, 1449)]], revoke_at={}, committed={0: 1448})
    copy, producer = rebalancing_copy(consumer, monkeypatch)
    messages = copy.consume(20, 0.05)
    consumer.group[0] = 1498  # the new owner's transaction committed
    with pytest.raises(BatchRevoked, match=r"moved past the batch's start \(partition 0: 1498 for 1448\)"):
        copy.commit(messages)
    assert producer.calls == ["init_transactions"], "no transaction begun: nothing written, nothing to abort"
    assert copy.recover(BatchRevoked("overtaken")) is None
    assert consumer.seeks == [(0, 1498)], "on from the new owner's offsets"


def test_a_batch_at_the_groups_offsets_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check asks the group once a transaction and lets the ordinary batch through (offsets at its start,
    or none committed yet)."""
    consumer = RebalancingConsumer(reads=[[(0, 7)], [(1, 0)]], revoke_at={}, committed={0: 7, 1: -1001})
    copy, producer = rebalancing_copy(consumer, monkeypatch)
    copy.commit(copy.consume(20, 0.05))
    copy.commit(copy.consume(20, 0.05))
    assert [offsets for offsets, _ in producer.offsets] == [[(0, 8)], [(1, 1)]]
    assert producer.calls.count("commit") == 2


def test_the_offsets_go_with_the_generation_the_batch_was_read_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker that checks generations (Kafka) refuses a batch read in a generation the group left;
    the metadata asked at commit time would carry the new one and pass."""
    consumer = RebalancingConsumer(reads=[[(0, 3)], []], revoke_at={}, committed={0: 3})
    copy, producer = rebalancing_copy(consumer, monkeypatch)
    messages = copy.consume(20, 0.05)
    consumer.generation = 7  # the member rejoined meanwhile (its consumer says so only now)
    messages += copy.consume(20, 0.05)
    copy.commit(messages)
    assert producer.offsets == [([(0, 4)], "generation 1")]


def test_a_revoke_between_batches_drops_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Revoked (and given back) in a read that returned nothing: no record of the old assignment is held."""
    consumer = RebalancingConsumer(reads=[[(0, 3)], [], [(0, 4)]], revoke_at={1: [0]}, committed={0: 3})
    copy, producer = rebalancing_copy(consumer, monkeypatch)
    copy.commit(copy.consume(20, 0.05))
    assert copy.consume(20, 0.05) == []
    copy.commit(copy.consume(20, 0.05))
    assert producer.offsets == [([(0, 4)], "generation 1"), ([(0, 5)], "generation 2")]


def test_a_new_producer_rewinds_the_consumer_after_its_init_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer that failed could not be replaced at once (its successor's init_transactions failed):
    the offsets recover read may move before the next producer fences the other gateway's, so open()
    reads them again after that init."""
    consumer = RebalancingConsumer(reads=[[(0, 3)]], revoke_at={}, committed={0: 3})
    copy, producer = rebalancing_copy(consumer, monkeypatch)
    messages = copy.consume(20, 0.05)
    copy._producer = TransactionalProducer("commit", abort_fails=True)
    with pytest.raises(RuntimeError) as failure:
        copy.commit(messages)

    def fails() -> None:
        raise RuntimeError("init_transactions timed out")

    copy.open_producer = fails  # type: ignore[method-assign]
    copy.recover(failure.value)
    assert copy._producer is None and consumer.seeks == [(0, 3)]
    consumer.group[0] = 23  # the other gateway's transaction committed 3..23 meanwhile

    def open_producer() -> None:
        copy._producer = producer

    copy.open_producer = open_producer  # type: ignore[method-assign]
    assert copy.open() is False
    assert consumer.seeks == [(0, 3), (0, 23)]


def test_the_bridge_drops_a_revoked_batch_without_counting_a_failure() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.bridges.config import parse_bridge
    from gateway.bridges.metrics import BridgeMetrics
    from gateway.bridges.transactional_copy import TransactionalCopyBridge
    from gateway.message.model import TextMessage

    class Reactor:
        def callFromThread(self, f: Any, *args: Any) -> None:
            f(*args)

    class RevokedCopy:
        def __init__(self) -> None:
            self.batches, self.committed, self.recovered = 2, 0, 0

        def open(self) -> bool:
            return False

        def consume(self, max_count: int, timeout: float) -> list[Any]:
            self.batches -= 1
            if self.batches < 0:
                bridge._halt.set()
                return []
            return [TextMessage(text="s-1", message_id="ID:1", destination="/queue/src")]

        def commit(self, messages: list[Any]) -> None:
            if self.batches == 1:
                raise BatchRevoked("partition 1 of topic src was revoked or lost")
            self.committed += 1

        def recover(self, error: Exception) -> str | None:
            self.recovered += 1
            return None

        def permanent(self, error: Exception) -> bool:
            return False

        def close(self) -> None:
            pass

    config = parse_bridge({"name": "k2k", "qos": "ONCE_AND_ONLY_ONCE", "failure_retry_interval": 60000,
                           "max_retries": 0,
                           "source": {"connector": "embedded", "destination": "/queue/src"},
                           "target": {"connector": "embedded", "destination": "/queue/dst"}}, 0, "t.toml", {"embedded"})
    copy = RevokedCopy()
    bridge = TransactionalCopyBridge(config, copy, clock=Reactor(),  # type: ignore[arg-type]
                                     metrics=BridgeMetrics(CollectorRegistry()))
    bridge._run()
    assert (copy.recovered, copy.committed) == (1, 1), "rewound, then the next batch committed at once"
    assert bridge.retries == 0 and bridge.last_error is None and bridge.forwarded == 1


# -- whether a transaction is open (the bridge's status ``transaction``: the fault matrix counts a Kafka target
# only once none is, tests/integration/bridge_fault_run.py)

class InitProducer:
    """confluent_kafka.Producer as the real open_producer makes it: its init_transactions settles what the
    previous producer of the transactional.id left open, or fails (``fails``)."""

    fails = False

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def init_transactions(self, timeout: float) -> None:
        if InitProducer.fails:
            raise RuntimeError("KafkaError{code=_TIMED_OUT}: init_transactions timed out")


def test_a_transaction_is_open_from_its_begin_to_its_commit() -> None:
    seen: list[tuple[str, str | None]] = []

    class Watching(TransactionalProducer):
        def _step(self, name: str) -> None:
            seen.append((name, copy.open_transaction))

    copy = placed_copy(Watching())
    assert copy.open_transaction is None and copy.transactions_begun == 0
    copy.commit(["s-1"])  # type: ignore[list-item]
    assert seen == [("begin", "p1-1"), ("produce", "p1-1"), ("offsets", "p1-1"), ("commit", "p1-1")]
    assert copy.open_transaction is None and copy.transactions_begun == 1
    copy.commit(["s-2"])  # type: ignore[list-item]
    assert seen[-1] == ("commit", "p1-2") and copy.open_transaction is None and copy.transactions_begun == 2


@pytest.mark.parametrize(("fail_at", "abort_fails", "init_fails", "open_after"), [
    ("offsets", False, False, None),  # aborted
    ("commit", False, False, None),  # its commit failed, its abort succeeded
    ("commit", True, False, None),  # its abort failed: the next producer's init_transactions settled it
    ("commit", True, True, "p1-1"),  # and that init failed too: nobody settled it, its copies may still commit
])
def test_a_failed_transaction_stays_open_until_something_ended_it(
        fail_at: str, abort_fails: bool, init_fails: bool, open_after: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Producer", InitProducer)
    monkeypatch.setattr(InitProducer, "fails", init_fails)
    copy = placed_copy(TransactionalProducer(fail_at, abort_fails))
    copy.target, copy.bridge = SimpleNamespace(producer_config=dict), "k2k"
    with pytest.raises(RuntimeError) as failure:
        copy.commit(["s-1", "s-2"])  # type: ignore[list-item]
    assert copy.open_transaction == "p1-1"
    copy.recover(failure.value)
    assert copy.attempt is None, "no transaction under way: the next batch may begin"
    assert copy.open_transaction == open_after and copy.transactions_begun == 1
    if open_after is not None:  # the retry's producer settles it before anything else begins
        monkeypatch.setattr(InitProducer, "fails", False)
        assert copy.open() is False
        assert isinstance(copy._producer, InitProducer) and copy.open_transaction is None


def test_the_bridge_status_names_the_open_transaction() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from gateway.bridges.config import parse_bridge
    from gateway.bridges.metrics import BridgeMetrics
    from gateway.bridges.transactional_copy import TransactionalCopyBridge

    config = parse_bridge({"name": "k2k", "qos": "ONCE_AND_ONLY_ONCE",
                           "source": {"connector": "embedded", "destination": "/queue/src"},
                           "target": {"connector": "embedded", "destination": "/queue/dst"}}, 0, "t.toml", {"embedded"})
    copy = SimpleNamespace(open_transaction="p1-3", transactions_begun=3)
    bridge = TransactionalCopyBridge(config, copy, clock=object(),  # type: ignore[arg-type]
                                     metrics=BridgeMetrics(CollectorRegistry()))
    status = bridge.status()
    assert (status["transaction"], status["transactions"]) == ("p1-3", 3)
    copy.open_transaction = None
    assert bridge.status()["transaction"] is None


class Hanging(TransactionalProducer):
    """A producer whose ``hangs`` call (``offsets`` or ``commit``) waits until ``release`` is set, as librdkafka's
    wait for the transaction coordinator with no timeout (confluentinc/librdkafka#5456); never called after."""

    def __init__(self, hangs: str, release: threading.Event) -> None:
        super().__init__()
        self.hangs, self.release = hangs, release

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        if self.hangs == "offsets":
            self.release.wait(5)

    def commit_transaction(self, timeout: float) -> None:
        if self.hangs == "commit":
            self.release.wait(5)

    def abort_transaction(self, timeout: float) -> None:
        raise AssertionError("the hung producer is called again")


@pytest.fixture
def release(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Hung calls are given 0.1 + 0.1 s (and set free at the test's end); new producers' init_transactions work."""
    import confluent_kafka

    import gateway.connectors.kafka_transactions as module

    monkeypatch.setattr(module, "CALL_TIMEOUT", 0.1)
    monkeypatch.setattr(module, "CALL_GRACE", 0.1)
    monkeypatch.setattr(confluent_kafka, "Producer", InitProducer)
    monkeypatch.setattr(InitProducer, "fails", False)
    event = threading.Event()
    yield event
    event.set()


def hung_copy(hangs: str, release: threading.Event) -> KafkaTransactionalCopy:
    from types import SimpleNamespace

    copy = placed_copy(Hanging(hangs, release))
    copy.target, copy.bridge = SimpleNamespace(producer_config=dict), "k2k"
    return copy


def test_a_send_offsets_to_transaction_that_never_returns_gives_the_producer_up(release: threading.Event) -> None:
    """librdkafka waits for send_offsets_to_transaction's answer without a timeout (confluentinc/librdkafka#5456):
    in the fault matrix's kafka -> kafka cut-source cell (2026-11-29) the bridge thread stood in it for good after a
    1 s connection reset, its transaction open.  Past its timeout and a grace the producer is given up, never called
    again, and a new producer's init_transactions settles the transaction (it never asked to commit: aborted)."""
    copy = hung_copy("offsets", release)
    with pytest.raises(CallHung, match=r"send_offsets_to_transaction did not return in 0\.2 s") as hung:
        copy.commit(["s-1", "s-2"])  # type: ignore[list-item]
    assert copy._producer is None and copy.open_transaction == "p1-1"
    assert copy.recover(hung.value) == "transaction p1-1 (2 copies) aborted"  # it never asked to commit
    assert isinstance(copy._producer, InitProducer) and copy.open_transaction is None
    assert copy._consumer.seeks == [(0, 3)]


@pytest.mark.parametrize(("offsets_after", "verdict"), [
    (3, "aborted (in doubt; the group's offsets stayed at its start: partition 0: 3 for 3..5)"),
    (5, "committed after all (the group's offsets moved past it: partition 0: 5 for 3..5)"),
])
def test_a_commit_transaction_that_never_returns_gives_the_producer_up(
        offsets_after: int, verdict: str, release: threading.Event) -> None:
    """``commit_transaction`` waits on the transaction coordinator as ``send_offsets_to_transaction`` does
    (confluentinc/librdkafka#5456): a commit that never returns would leave the bridge standing with its
    transaction open.  Past its timeout and a grace the producer is given up, never called again; the new
    producer's init_transactions settles the transaction (it asked to commit: either outcome), and the group's
    offsets read after it say which, as for a commit that timed out."""
    copy = hung_copy("commit", release)
    with pytest.raises(CallHung, match=r"commit_transaction did not return in 0\.2 s") as hung:
        copy.commit(["s-1", "s-2"])  # type: ignore[list-item]
    assert copy._producer is None and copy.open_transaction == "p1-1"
    copy._consumer.group.committed[0] = offsets_after  # what the next producer's init_transactions made of it
    assert copy.recover(hung.value) == f"transaction p1-1 (2 copies) {verdict}"
    assert isinstance(copy._producer, InitProducer) and copy.open_transaction is None
    assert copy._consumer.seeks == [(0, offsets_after)], "on from the group's offsets"


def test_producers_given_up_are_bounded(release: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each producer given up keeps its librdkafka producer and a blocked thread for the life of the process: at
    HUNG_LIMIT the hang is permanent (the bridge fails, a ConnectorError no retry helps) instead of leaking more."""
    import gateway.connectors.kafka_transactions as module

    monkeypatch.setattr(module, "HUNG_LIMIT", 2)
    copy = hung_copy("commit", release)
    seen: list[CallHung] = []
    for _ in range(2):
        copy._producer = Hanging("commit", release)  # (the retry's producer hangs too)
        copy._batch_start, copy._positions = {0: 3}, {0: 5}
        with pytest.raises(CallHung) as hung:
            copy.commit(["s-1"])  # type: ignore[list-item]
        copy.recover(hung.value)
        seen.append(hung.value)
    assert [error.permanent for error in seen] == [False, True] and copy.hung_producers == 2
    assert isinstance(seen[0], ConnectorError) and "(1 of at most 2 producers given up" in str(seen[0])
    assert "the bridge stops rather than leak more; restarting the gateway frees them" in str(seen[1])


# -- a source topic deleted and created again (docs/kafka.md "A deleted topic"; the fault matrix's recreate cell)

class TopicConsumer(RebalancingConsumer):
    """A source consumer that answers one read with the error librdkafka gives when the subscribed
    topic is not there (``gone_at``: the read's number), and counts its close."""

    def __init__(self, reads: list[list[tuple[int, int]]], gone_at: int | None, committed: dict[int, int]) -> None:
        super().__init__(reads, {}, committed)
        self.gone_at, self.closed = gone_at, 0

    def consume(self, max_count: int, timeout: float) -> list[Any]:
        from gateway.connectors.kafka_consumer_host import Record, RecordError

        if self.calls == self.gone_at:
            self.calls += 1
            gone = RecordError(3, "UNKNOWN_TOPIC_OR_PART", "Subscribed topic not available: src: Broker: Unknown "
                               "topic or partition", False)
            return [Record("src", 0, 7, b"k", b"old", None, (0, 0), None),  # read before it went
                    Record("src", -1, -1001, None, None, None, (0, 0), gone)]
        return super().consume(max_count, timeout)

    def close(self) -> None:
        self.closed += 1


def test_a_source_topic_not_there_ends_the_consumer_and_the_next_attempt_subscribes_a_new_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The source topic was deleted (the consumer that read it crashed, or says the topic is gone) and
    the next consumer subscribed while it was not there yet: librdkafka gives that consumer one error
    record and does not see the topic created before its next metadata refresh, 5 minutes by default.
    Dropping the error record silently, the Kafka -> Kafka bridge copied nothing of the recreated topic
    (the fault matrix's kafka -> kafka ONCE_AND_ONLY_ONCE recreate cell, 2026-11-29: 300 records left at
    the source).  The error fails the attempt and ends that consumer; the next attempt's consumer, made
    once the topic exists, copies it."""
    import gateway.connectors.kafka_transactions as module
    from gateway.errors import ConnectorError
    from gateway.message.model import TextMessage

    first = TopicConsumer(reads=[], gone_at=0, committed={})
    second = TopicConsumer(reads=[[(0, 0), (1, 0)]], gone_at=None, committed={})
    made = [second]
    copy, producer = rebalancing_copy(first, monkeypatch)
    monkeypatch.setattr(module, "ConsumerProcess", lambda config, label: made.pop(0))
    with pytest.raises(ConnectorError, match=r"kafka topic 'src' is not there .*Unknown topic or partition"):
        copy.consume(20, 0.05)
    assert first.closed == 1, "the consumer that cannot see the topic again is ended"
    assert copy.recover(ConnectorError("gone")) is None, "no transaction was under way"
    assert producer.calls == ["init_transactions"], "nothing begun, nothing to abort, no new producer"
    assert copy.open() is True, "a new consumer is subscribed"
    assert second.callbacks, "subscribed with its rebalance callbacks"
    messages = copy.consume(20, 0.05)
    assert [m.text for m in messages if isinstance(m, TextMessage)] == ["body 0:0", "body 1:0"], (
        "the old topic's record read with the error is gone")
    copy.commit(messages)
    assert producer.offsets[-1][0] == [(0, 1), (1, 1)], "the new topic's offsets, nothing of the old one's"
