"""Kafka -> Kafka in one Kafka transaction, and what a Kafka topic holds: the Kafka client
code of a ONCE_AND_ONLY_ONCE bridge.

:class:`KafkaTransactionalCopy` (:class:`~gateway.interfaces.ITransactionalCopy`) owns a
confluent-kafka consumer (``read_committed``, no auto commit; in a child process,
:mod:`gateway.connectors.kafka_consumer_host`, so a librdkafka crash on a deleted source
topic is one failed attempt, not the gateway's end; so is a record error saying the source topic
is not there: that consumer is ended and the next attempt subscribes a new one, which finds the
topic once it exists again) and a transactional ``Producer``
(``transactional.id = jmsgateway-bridge-<name>``); the bridge's thread drives it::

    messages = copy.consume(max_batch_size, max_batch_time)
    copy.commit(transformed)   # begin; produce; send_offsets_to_transaction; commit

A crash leaves an open transaction that the next :meth:`~KafkaTransactionalCopy.open`
fences and aborts (``init_transactions``); the consumer then resumes at the committed
offsets.  :meth:`~KafkaTransactionalCopy.recover` aborts a failed transaction and rewinds
the consumer to the group's committed offsets (read after a new producer's ``init_transactions``,
never before: once it fenced the other gateway's producer, the offsets cannot move under it).

A partition's offsets are committed only by the member that owns it: a batch holding records of a
partition the group revoked (or declared lost) while the batch was read is dropped before its
transaction begins (:class:`~gateway.errors.BatchRevoked`; its records are read again by the
partition's owner), so is one whose partitions' committed offsets another member moved past its start
while it was read (a member that was stopped past its session wakes before it hears of the rebalance),
and the offsets go with the group metadata of the generation the batch was
read in, so a broker that checks generations (Kafka, KIP-447) refuses them from a member the
group expelled meanwhile.  Tansu does not check (``tests/integration/test_tansu_group_generation.py``).

Each copy names its transaction (:data:`ATTEMPT_HEADER`) and ``recover`` says what became of a
failed one (its copies, aborted or in doubt) for the bridge's log: a reader that sees aborted
records (Tansu serves them to every reader) tells them from duplicates by that.

:func:`held_record_ids` reads the ``jms.MessageId`` headers of a topic's newest committed
records (the in-doubt probe, :class:`~gateway.interfaces.IHeldMessages`).  Everything here
blocks: call it from a thread, never the reactor's.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Set
from typing import Any

from zope.interface import implementer

from gateway.connectors.kafka_consumer_host import TOPIC_GONE, ConsumerProcess
from gateway.errors import BatchRevoked, ConnectorError
from gateway.interfaces import ITransactionalCopy
from gateway.message.kafka_delivery import REFUSED_CODES
from gateway.message.kafka_records import message_to_record, record_to_message
from gateway.message.model import Message

PlacedRecord = tuple[str, Any, Any, Any]
"""(topic, key, value, headers): one record of a transaction."""

ATTEMPT_HEADER = "jmsbridge.txn"
"""The header naming the transaction that wrote a copy (``<producer>-<n>``: a random id of the
producer instance and the transaction's number in it).  A failed one is logged with its copies
(:meth:`KafkaTransactionalCopy.recover`), so a reader that sees an aborted transaction's records
(Tansu serves them to ``read_committed`` readers too) can tell them from duplicates."""

NO_RETRY_CODES = REFUSED_CODES | {"TOPIC_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
"""Kafka errors about the batch itself (a record too large, not authorised): no retry helps."""

CALL_TIMEOUT = 30.0
"""Seconds ``send_offsets_to_transaction`` and ``commit_transaction`` are given (their own timeout)."""
CALL_GRACE = 5.0
"""Seconds past :data:`CALL_TIMEOUT` after which such a call that has not returned is taken for hung
(:class:`CallHung`)."""


HUNG_LIMIT = 4
"""Producers one copy may give up (each leaves a librdkafka producer and a thread blocked for the
life of the process): at the limit the bridge fails instead of leaking more (:class:`CallHung`)."""


class CallHung(ConnectorError):
    """``send_offsets_to_transaction`` or ``commit_transaction`` did not return in :data:`CALL_TIMEOUT` +
    :data:`CALL_GRACE` seconds.  librdkafka waits for a transactional request's answer without a timeout
    (the coordinator request's timeout is never checked, confluentinc/librdkafka#5456): after a 1 s
    connection reset (the fault matrix's Kafka -> Kafka ``cut-source`` cell, 2026-11-29, librdkafka
    2.16.0) ``send_offsets_to_transaction`` never returned and the bridge stood still with its
    transaction open; ``commit_transaction`` waits on the same kind of request.  The producer is given
    up, never called again (its call stays blocked in a thread of its own); the next producer's
    ``init_transactions`` fences it and settles its transaction: aborted if it never asked to commit,
    else completed or aborted, told by the group's offsets (:meth:`KafkaTransactionalCopy.recover`).
    The :data:`HUNG_LIMIT`-th one a copy gives up is :attr:`permanent`: the bridge fails rather than
    leak producers and threads without bound (restarting the gateway frees them)."""


@implementer(ITransactionalCopy)
class KafkaTransactionalCopy:
    """Records of ``source_topic`` copied to ``target_topic`` with the source offsets in the
    same transaction (see the module docstring).  One thread uses it.

    :param source: the source :class:`~gateway.connectors.kafka.KafkaConnector`.
    :param target: the target one (same cluster).
    :param source_destination: the destination consumed messages are given.
    :param group: the consumer group whose offsets the transactions commit.
    :param from_earliest: where a new group starts.
    :param key_header: the header giving a copy's record key (None: its message id).
    :param place: the record (topic, key, value, headers) a copy becomes, None to leave it out,
        or an exception no retry helps (``[routing]``'s route policies; called on the copy's
        thread); None: every copy goes to ``target_topic``.
    """

    attempt: str | None = None
    """The transaction under way (its :data:`ATTEMPT_HEADER`), None between transactions."""
    attempt_copies = 0
    """The copies the transaction under way produced."""
    open_transaction: str | None = None
    """The transaction begun and not ended yet (its :data:`ATTEMPT_HEADER`): set as it begins, cleared
    when it commits, when its abort succeeds, or when a later producer's ``init_transactions`` settled it
    (that completes or aborts what the previous producer left open).  Unlike :attr:`attempt` it stays
    set after a failure nobody settled yet (the abort failed and no new producer could start): its
    copies may still commit or abort.  The bridge's status shows it (``transaction``); the reactor
    thread reads it while the copy's thread writes it (one attribute, replaced whole)."""
    transactions_begun = 0
    """The transactions this copy began, every producer of it (the bridge's status: ``transactions``)."""
    _committing = False
    """Whether ``commit_transaction`` was called for :attr:`attempt` (before it, it cannot commit)."""
    hung_producers = 0
    """Producers given up with a call hung in librdkafka (:class:`CallHung`), every one still blocked."""
    _producer_tag = ""
    _serial = 0
    _revoked: Set[int] = frozenset()
    """Source partitions the group revoked or declared lost since the batch's first read."""
    _metadata: Any = None
    """The group metadata (generation, member) when the batch's first records were read."""

    def __init__(self, source: Any, target: Any, *, bridge: str, source_destination: str, source_topic: str,
                 target_topic: str, key_header: str | None, group: str, from_earliest: bool,
                 place: Callable[[Message], PlacedRecord | None] | None = None) -> None:
        self.source = source
        self.target = target
        self.bridge = bridge
        self.source_destination = source_destination
        self.source_topic = source_topic
        self.target_topic = target_topic
        self.key_header = key_header
        self.group = group
        self.from_earliest = from_earliest
        self.place = place
        self._producer: Any = None
        self._consumer: Any = None
        self._batch_start: dict[int, int] = {}
        """Partition -> first offset of the batch in its transaction."""
        self._positions: dict[int, int] = {}
        """Partition -> offset after the last record consumed since the last commit."""

    def consumer_config(self) -> dict[str, Any]:
        settings = self.source.settings
        config: dict[str, Any] = dict(settings.consumer)
        config.update({
            "bootstrap.servers": settings.bootstrap,
            "client.id": settings.client_id,
            "group.id": self.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest" if self.from_earliest else "latest",
        })
        return config

    def producer_config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.target.producer_config()
        config["transactional.id"] = f"jmsgateway-bridge-{self.bridge}"
        return config

    def open_producer(self) -> None:
        """A new transactional producer; its ``init_transactions`` fences the previous one of this
        ``transactional.id`` and completes (a commit under way) or aborts what it left open."""
        from confluent_kafka import Producer

        producer = Producer(self.producer_config())
        producer.init_transactions(30)
        self.open_transaction = None  # settled by that init_transactions, if one was open
        self._producer = producer
        self._producer_tag, self._serial = uuid.uuid4().hex[:8], 0

    def open(self) -> bool:
        if self._producer is None:
            self.open_producer()
            if self._consumer is not None:
                # the group's offsets read before this producer fenced the other gateway's could have
                # moved since (its transaction committed them): read them again, now they cannot
                self._rewind({}, {})
        if self._consumer is not None:
            return False
        # in a child process: librdkafka crashes on a deleted source topic (see
        # gateway.connectors.kafka_consumer_host); a crash is a failed attempt here
        consumer = ConsumerProcess(self.consumer_config(), label=f"topic {self.source_topic} (group {self.group})")
        self._consumer = consumer
        # served inside consume(), between transactions: a revoke marks the batch, never a transaction
        consumer.subscribe([self.source_topic], on_revoke=self._taken_away, on_lost=self._taken_away)
        return True

    def _taken_away(self, _consumer: Any, partitions: list[Any]) -> None:
        """The rebalance callback (revoked or lost): the batch's records of these partitions are no
        longer ours to copy (the group gave the partitions, or will give them, to another member)."""
        self._revoked = self._revoked | {tp.partition for tp in partitions if tp.topic == self.source_topic}

    def _rewind(self, firsts: dict[int, int], committed: dict[int, int]) -> None:
        """Every assigned partition back to the group's committed offset, or, where none was committed
        (a new group), to its record in ``firsts`` (a failed batch's first records) if any; each
        committed offset read goes into ``committed`` as it is read (an error part-way leaves those)."""
        from confluent_kafka import TopicPartition

        consumer = self._consumer
        assignment = consumer.assignment()
        if assignment:
            for tp in consumer.committed(assignment, timeout=10):
                committed[tp.partition] = tp.offset
                first = firsts.get(tp.partition)
                if tp.offset >= 0:
                    # the offsets commit with the copies: a transaction that committed after all
                    # (its answer lost) moved them past its batch, one that did not left them there
                    consumer.seek(tp)
                elif first is not None:  # a new group: the failed batch's first record
                    consumer.seek(TopicPartition(tp.topic, tp.partition, first))

    def consume(self, max_count: int, timeout: float) -> list[Message]:
        if not self._positions:  # a new batch: what the group takes away from now on concerns it
            self._revoked, self._metadata = frozenset(), None
        read = self._consumer.consume(max_count, timeout)
        gone = next((error for error in (r.error() for r in read) if error is not None
                     and error.code() in TOPIC_GONE), None)
        if gone is not None:
            self._topic_gone(gone)
        records = [r for r in read if r.error() is None]
        if records and self._metadata is None:
            self._metadata = self._consumer.consumer_group_metadata()
        for record in records:  # where a failed transaction rewinds to (committed offset or not)
            partition, offset = record.partition(), record.offset()
            first = self._batch_start.get(partition)
            if first is None or offset < first:
                self._batch_start[partition] = offset
            self._positions[partition] = max(self._positions.get(partition, -1), offset + 1)
        return [self._message(record) for record in records]

    def _topic_gone(self, error: Any) -> None:
        """The source topic is not there (deleted, or not created yet): this consumer is ended and
        the attempt fails, so the next one subscribes with a new consumer.  librdkafka's consumer
        would not see the topic created (again) before its next metadata refresh, five minutes by
        default (``topic.metadata.refresh.interval.ms``): after a deleted and recreated source topic
        the bridge copied nothing more (the fault matrix's Kafka -> Kafka ``recreate`` cell,
        2026-11-29).  What the batch read of the old topic is dropped with it, uncommitted."""
        consumer, self._consumer = self._consumer, None
        self._forget_batch()
        with contextlib.suppress(Exception):
            consumer.close()
        raise ConnectorError(f"kafka topic {self.source_topic!r} is not there ({error.str()}); the next attempt "
                             f"subscribes group {self.group} to it with a new consumer")

    def _message(self, record: Any) -> Message:
        _, timestamp = record.timestamp()
        return record_to_message(
            record.key(), record.value(), record.headers(),
            text_records=self.source.settings.text_records,
            destination=self.source_destination,
            timestamp=timestamp or 0,
            fallback_id=f"ID:kafka:{record.topic()}:{record.partition()}:{record.offset()}",
        )

    def commit(self, messages: list[Message]) -> None:
        from confluent_kafka import TopicPartition

        revoked = sorted(self._revoked & self._positions.keys())
        if revoked:
            raise BatchRevoked(
                f"partition {', '.join(map(str, revoked))} of topic {self.source_topic} was revoked or lost while "
                f"its records were in the batch (a rebalance): the batch of {len(messages)} is dropped before its "
                "transaction, its records are read again by the partition's owner")
        overtaken = self._overtaken()
        if overtaken:
            raise BatchRevoked(
                f"the group's offsets of topic {self.source_topic} moved past the batch's start "
                f"({overtaken}) while it was read: another member copied those records; the batch of "
                f"{len(messages)} is dropped before its transaction, the partitions rewound")
        outgoing = self._records(messages)
        offsets = [TopicPartition(self.source_topic, p, o) for p, o in self._positions.items()]
        metadata = self._metadata if self._metadata is not None else self._consumer.consumer_group_metadata()
        producer = self._producer
        self._serial += 1
        self.attempt, self.attempt_copies, self._committing = f"{self._producer_tag}-{self._serial}", 0, False
        tag = (ATTEMPT_HEADER, self.attempt.encode("ascii"))
        self.open_transaction = self.attempt
        self.transactions_begun += 1
        producer.begin_transaction()
        for topic, key, value, headers in outgoing:
            producer.produce(topic, value=value, key=key, headers=[*(headers or ()), tag])
            self.attempt_copies += 1
        self._bounded(producer, "send_offsets_to_transaction",
                      lambda: producer.send_offsets_to_transaction(offsets, metadata, CALL_TIMEOUT))
        self._committing = True
        self._bounded(producer, "commit_transaction", lambda: producer.commit_transaction(CALL_TIMEOUT))
        self.attempt = self.open_transaction = None
        self._forget_batch()

    def _overtaken(self) -> str:
        """The batch's partitions whose committed offset is past the batch's first record (``"partition 0:
        1498 for 1448"``), read after this producer's ``init_transactions``; empty when none.

        Only a member that copied those records commits past them.  A member the group expelled while
        it was stopped (SIGSTOP, a frozen VM) can wake holding a batch before its consumer has heard
        of the rebalance, so no revoke marked the batch; a broker that checks generations (Kafka,
        KIP-447) refuses its offsets, Tansu does not, and a transactional producer this member
        opened after the new owner's would commit the copies a second time (a CI run, 2026-11-30:
        20 duplicates).  Offsets committed before this read are seen here; any committed later came
        from a producer that fenced this one, whose commit then fails."""
        from confluent_kafka import TopicPartition

        if not self._batch_start:
            return ""
        asked = [TopicPartition(self.source_topic, p) for p in sorted(self._batch_start)]
        return ", ".join(f"partition {tp.partition}: {tp.offset} for {self._batch_start[tp.partition]}"
                         for tp in self._consumer.committed(asked, timeout=CALL_TIMEOUT)
                         if tp.offset > self._batch_start[tp.partition])

    def _forget_batch(self) -> None:
        """Nothing of a batch is held any more (committed, or dropped with its consumer): its first
        records, read positions, revoked partitions and group metadata."""
        self._batch_start.clear()
        self._positions.clear()
        self._revoked, self._metadata = frozenset(), None

    def _bounded(self, producer: Any, name: str, call: Callable[[], object]) -> None:
        """``call`` (the producer's ``name``) in a thread of its own, waited for at most
        :data:`CALL_TIMEOUT` + :data:`CALL_GRACE` seconds; past that the producer is given up
        (:class:`CallHung`: :attr:`_producer` None, so :meth:`recover` settles the transaction
        through a new producer instead of calling the hung one)."""
        done = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as error:
                failure.append(error)
            finally:
                done.set()

        threading.Thread(target=run, name=f"kafka-{name}", daemon=True).start()
        if not done.wait(CALL_TIMEOUT + CALL_GRACE):
            if self._producer is producer:
                self._producer = None
            self.hung_producers += 1
            hung = CallHung(
                f"{name} did not return in {CALL_TIMEOUT + CALL_GRACE:g} s (librdkafka waits for the transaction "
                "coordinator without a timeout, confluentinc/librdkafka#5456): the producer is given up, the next "
                f"one fences it and settles its transaction ({self.hung_producers} of at most {HUNG_LIMIT} producers "
                "given up, each blocked for the life of the process" + (
                    ": the bridge stops rather than leak more; restarting the gateway frees them)"
                    if self.hung_producers >= HUNG_LIMIT else ")"))
            hung.permanent = self.hung_producers >= HUNG_LIMIT
            raise hung
        if failure:
            raise failure[0]

    def _records(self, messages: list[Message]) -> list[PlacedRecord]:
        """The records of a transaction: through :attr:`place` when given."""
        if self.place is None:
            return [(self.target_topic, *message_to_record(message, self.key_header, self.target.gateway_id))
                    for message in messages]
        return [record for record in map(self.place, messages) if record is not None]

    def recover(self, error: Exception) -> str | None:
        from confluent_kafka import KafkaException

        ends, self._positions = self._positions, {}
        self._revoked, self._metadata = frozenset(), None
        fatal = False
        aborted = not self._committing  # never asked to commit: it cannot have committed
        producer, consumer = self._producer, self._consumer
        if isinstance(error, CallHung) and self.attempt is not None:
            fatal = True  # the hung producer is not called again: a new one settles its transaction
        elif producer is not None and self.attempt is not None:  # (none begun: nothing to abort, no fence)
            kafka_error = error.args[0] if isinstance(error, KafkaException) and error.args else None
            fatal = bool(kafka_error is not None and kafka_error.fatal())
            try:
                if not fatal:
                    producer.abort_transaction(10)
                    aborted = True
                    self.open_transaction = None
            except Exception:
                fatal = True
        settled_by_init = False
        if fatal:
            self._producer = None  # a new producer fences the old one on init_transactions
            if consumer is not None and self._batch_start:
                # the outcome is unknown (a commit that timed out, a fence: Tansu may time a fenced
                # commit out instead of answering PRODUCER_FENCED): the next producer's init_transactions
                # completes or aborts it, so the committed offsets read below are its outcome
                with contextlib.suppress(Exception):
                    self.open_producer()
                    settled_by_init = True
        committed: dict[int, int] = {}
        if consumer is not None:
            try:
                self._rewind(self._batch_start, committed)
                settled = self._settled(aborted, committed if settled_by_init else {}, ends)
                self._batch_start.clear()
                return settled
            except Exception:
                with contextlib.suppress(Exception):
                    consumer.close()
                self._consumer = None
        return self._settled(aborted, committed if settled_by_init else {}, ends)

    def _settled(self, aborted: bool, committed: dict[int, int], ends: dict[int, int]) -> str | None:
        """For the log: the failed transaction, its copies and its outcome (None: none under way)."""
        attempt, self.attempt, self._committing = self.attempt, None, False
        if attempt is None:
            return None
        return f"transaction {attempt} ({self.attempt_copies} copies) " + (
            "aborted" if aborted else self._in_doubt(committed, ends))

    def _in_doubt(self, committed: dict[int, int], ends: dict[int, int]) -> str:
        """What the group's offsets, read after the next producer's init_transactions settled a
        transaction in doubt, say of it: they commit with its copies, so offsets still at the batch's
        start on every partition of it mean aborted (offsets never go back; a partition the group
        never committed an offset of, ``none``, is at its start too: the transaction would have
        committed one); past its end, committed (by it, or by another member that took the partition
        over: counted as committed).  A partition whose offset was not read (``?``) leaves it in doubt."""
        batch = sorted(self._batch_start)

        def offset(p: int) -> str:
            return "?" if p not in committed else "none" if committed[p] < 0 else str(committed[p])

        where = ", ".join(f"partition {p}: {offset(p)} for {self._batch_start[p]}..{ends.get(p, '?')}" for p in batch)
        if batch and all(p in committed and committed[p] <= self._batch_start[p] for p in batch):
            return f"aborted (in doubt; the group's offsets stayed at its start: {where})"
        if batch and all(committed.get(p, -1) >= ends.get(p, 0) > 0 for p in batch):
            return f"committed after all (the group's offsets moved past it: {where})"
        return f"in doubt (the group's offsets: {where or 'not read'})"

    def permanent(self, error: Exception) -> bool:
        from confluent_kafka import KafkaException

        if isinstance(error, KafkaException) and error.args and hasattr(error.args[0], "name"):
            return str(error.args[0].name()) in NO_RETRY_CODES
        return False

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.flush(5)


PROBE_READ = 500
"""Records an in-doubt probe reads per call to its consumer."""


def held_record_ids(settings: Any, topic: str, tail: int) -> set[str]:
    """The ``jms.MessageId`` headers of the last ``tail`` committed records of each partition of
    ``topic`` (blocking; the consumer in a child process)."""
    ids: set[str] = set()

    def collect(record: Any) -> None:
        for name, value in record.headers() or ():
            if name == "jms.MessageId" and value is not None:
                ids.add(value.decode("utf-8", "replace"))

    read_tail(settings, topic, tail, collect)
    return ids


def read_tail(settings: Any, topic: str, tail: int, visit: Callable[[Any], None]) -> None:
    """Call ``visit`` with each of the last ``tail`` committed records of each partition of ``topic``
    (a :class:`~gateway.connectors.kafka_consumer_host.Record`; blocking, the consumer in a child process,
    at most 30 s of reading)."""
    from confluent_kafka import TopicPartition

    config = {key: value for key, value in settings.consumer.items() if key != "group.id"}
    config.update({
        "bootstrap.servers": settings.bootstrap,
        "group.id": f"jmsgateway-probe-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    consumer = ConsumerProcess(config, label=f"topic {topic} (tail reader)")
    try:
        partitions = consumer.partitions(topic, 10)
        if partitions is None:
            return
        ends: dict[int, int] = {}
        assignment = []
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                ends[partition] = high
                assignment.append(TopicPartition(topic, partition, max(low, high - tail)))
        if not assignment:
            return
        consumer.assign(assignment)
        deadline = time.monotonic() + 30
        while ends and time.monotonic() < deadline:
            records = consumer.consume(PROBE_READ, 0.2)  # (one round trip to the child per PROBE_READ records)
            if not records:
                # transaction markers take offsets too: stop a partition once its position reached the end
                for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                    if tp.offset >= ends.get(tp.partition, 0):
                        ends.pop(tp.partition, None)
                continue
            for record in records:
                if record.error() is None:
                    visit(record)
            # (no stop at the reported end: Tansu reports the base offset of the last write batch
            # + 1, and the rest of that batch comes with its first record; a partition stops at the
            # first empty read once its position is past the reported end)
    finally:
        consumer.close()
