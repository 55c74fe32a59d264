"""A queue the console creates (or names, existing) is recorded in the message store (``configured:`` among
the durable records, as a virtual topic's consumer queue is): after a restart it exists again, empty,
configured (never collected), counted against ``max_destinations`` as before (a start that finds more than
the limit allows keeps them all and says so); the console's delete removes the record.  On the SQLite store
(a restart: a new broker on the same file) and on the memory store shared by two brokers in one process (a
real restart with ``persistence = "memory"`` starts from an empty store: nothing survives it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.operations import QueueOperations
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.memory_store import MemoryStore
from gateway.broker.store.snapshot import DurableRecord, Snapshot, configured_key, configured_queue_of
from gateway.broker.virtual_topics import record_key
from gateway.errors import LimitReached, StoreError
from gateway.security.quotas import LoginLimits, LoginQuotas
from tests.support.log_events import logged
from tests.unit.test_broker_collection import TIMEOUT, collected, subscribe, wait
from tests.unit.test_store_broker import Run, text

__all__ = ["logged"]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path, BrokerSettings(persistence="sqlite"))
    run.start()
    yield run
    run.close()




def records(run: Run) -> list[tuple[str, str, str | None, str | None]]:
    """The durable records in the SQLite file, in stored order."""
    with sqlite3.connect(run.path) as db:
        rows = db.execute("SELECT key, destination, selector, owner FROM durables ORDER BY rowid").fetchall()
    return [tuple(row) for row in rows]


def broker_on(clock: Clock, store: MemoryStore, max_destinations: int = 0, timeout: int = TIMEOUT,
              **logins: LoginLimits) -> EmbeddedBroker:
    broker = EmbeddedBroker(clock, BrokerSettings(persistence="memory", max_destinations=max_destinations,
                                                  inactive_queue_timeout=timeout),
                            store=store, logins=LoginQuotas(logins))
    broker.start()
    return broker


def test_the_record_keys_name_the_queue_and_nothing_else() -> None:
    assert configured_key("/queue/orders") == "configured:/queue/orders"
    assert configured_queue_of("configured:/queue/orders") == "/queue/orders"
    assert configured_queue_of("virtual:/queue/Consumer.A.VirtualTopic.x") is None
    assert configured_queue_of("durable:c:configured:/queue/x") is None


def test_a_created_queue_is_recorded_and_after_a_restart_exists_empty_and_configured(run: Run) -> None:
    assert run.wait(QueueOperations(run.broker).create_queue("/queue/ops.made")) is True  # type: ignore[arg-type]
    assert records(run) == [("configured:/queue/ops.made", "/queue/ops.made", None, None)]
    broker = run.restart()
    assert "/queue/ops.made" in broker.queues and len(broker.queues["/queue/ops.made"]) == 0
    assert "/queue/ops.made" in broker.destinations.configured
    assert broker.quota.count == 1 and broker.status()["queues"]["/queue/ops.made"]["pending"] == 0
    broker = run.restart()  # (and the next time: the record stays until the queue is deleted)
    assert "/queue/ops.made" in broker.destinations.configured


def test_a_queue_the_console_names_when_it_exists_is_recorded_too_with_its_messages(run: Run) -> None:
    run.send(text("/queue/ops.named", "kept"))
    assert run.wait(QueueOperations(run.broker).create_queue("/queue/ops.named")) is False  # type: ignore[arg-type]
    assert [key for key, *_ in records(run)] == ["configured:/queue/ops.named"]
    broker = run.restart()
    assert "/queue/ops.named" in broker.destinations.configured and len(broker.queues["/queue/ops.named"]) == 1


def test_the_consoles_delete_removes_the_record_and_the_queue_stays_gone(run: Run) -> None:
    operations = QueueOperations(run.broker)  # type: ignore[arg-type]
    run.wait(operations.create_queue("/queue/ops.gone"))
    run.wait(operations.create_queue("/queue/ops.kept"))
    assert run.wait(operations.delete_queue("/queue/ops.gone")) == 0
    assert [key for key, *_ in records(run)] == ["configured:/queue/ops.kept"]
    broker = run.restart()
    assert "/queue/ops.gone" not in broker.queues and broker.destinations.configured == {"/queue/ops.kept"}


def test_a_create_answers_once_the_record_is_stored(clock: Clock) -> None:
    """The console's create answers once the record is stored (kill -9 after the answer keeps the queue)."""
    broker = broker_on(clock, MemoryStore(clock))
    held: list[Deferred[None]] = []

    def add_durable(key: str, destination: str, selector: str | None, owner: str | None = None) -> Deferred[None]:
        held.append(Deferred())
        return held[-1]

    broker.store.add_durable = add_durable  # type: ignore[method-assign]
    answers: list[bool] = []
    QueueOperations(broker).create_queue("/queue/ops.slow").addCallback(answers.append)
    assert "/queue/ops.slow" in broker.queues and len(held) == 1
    assert answers == [], "answered before the queue's record was stored"
    held[0].callback(None)
    assert answers == [True]


def test_a_create_whose_record_the_store_refuses_fails_and_leaves_nothing(clock: Clock) -> None:
    """The store refuses the record (full, or closed: a standby before its takeover): the answer is the
    failure, and the queue the create made is gone again (it would not be there after a restart); a queue
    that existed stays, unconfigured as it was."""
    broker = broker_on(clock, MemoryStore(clock))
    broker.destinations.create_queue("/queue/ops.there", None)

    def add_durable(key: str, destination: str, selector: str | None, owner: str | None = None) -> Deferred[None]:
        return fail(StoreError("message store: disk full"))

    broker.store.add_durable = add_durable  # type: ignore[method-assign]
    outcomes: list[Any] = []
    for name in ("/queue/ops.refused", "/queue/ops.there", "/queue/Consumer.A.VirtualTopic.z"):
        QueueOperations(broker).create_queue(name).addBoth(outcomes.append)
    assert [type(outcome.value) for outcome in outcomes] == [StoreError] * 3
    assert set(broker.queues) == {"/queue/ops.there"} and not broker.destinations.configured
    assert broker.quota.count == 1 and not broker.virtual


def test_a_recovered_configured_queue_is_never_collected(clock: Clock) -> None:
    store = MemoryStore(clock)
    first = broker_on(clock, store)
    QueueOperations(first).create_queue("/queue/ops.idle")
    first.destinations.create_queue("/queue/auto", None)  # (an auto-created one, for comparison)
    first.stop()
    broker = broker_on(clock, store)
    assert "/queue/ops.idle" in broker.queues and "/queue/auto" not in broker.queues  # (empty: not remembered)
    broker.destinations.create_queue("/queue/auto", None)
    wait(clock, TIMEOUT * 3)
    assert set(broker.queues) == {"/queue/ops.idle"} and collected(broker) == 1


def test_recovered_queues_count_against_max_destinations_and_a_start_past_it_keeps_them_and_says_so(
        clock: Clock, logged: list[str]) -> None:
    store = MemoryStore(clock)
    first = broker_on(clock, store, max_destinations=5)
    for name in ("a", "b", "c"):
        QueueOperations(first).create_queue(f"/queue/ops.{name}")
    assert first.quota.count == 3
    first.stop()
    same = broker_on(clock, store, max_destinations=5)
    assert same.quota.count == 3 and not [line for line in logged if "max_destinations" in line]
    same.stop()
    lowered = broker_on(clock, store, max_destinations=2)  # (lowered between two starts: all are kept)
    assert set(lowered.queues) == {"/queue/ops.a", "/queue/ops.b", "/queue/ops.c"} and lowered.quota.count == 3
    warnings = [line for line in logged if "max_destinations" in line]
    assert len(warnings) == 1 and "holds 3 destinations (3 queues the console created" in warnings[0], warnings
    with pytest.raises(LimitReached):
        QueueOperations(lowered).create_queue("/queue/ops.d")
    lowered.destinations.create_queue("/queue/ops.a", None)  # (what exists works as before)


def test_a_consumer_queue_the_console_names_keeps_its_makers_login_whatever_the_record_order(clock: Clock) -> None:
    """A virtual topic's consumer queue made by eve's SUBSCRIBE, then named in the console: two records (eve's,
    the console's); recovered in either order the queue is held by eve again (max_queues) and configured."""
    store = MemoryStore(clock)
    first = broker_on(clock, store, eve=LoginLimits(max_queues=3))
    queue = "/queue/Consumer.eve.VirtualTopic.x"
    subscribe(first, destination=queue, login="eve").close()
    QueueOperations(first).create_queue(queue)
    first.stop()
    again = broker_on(clock, store, eve=LoginLimits(max_queues=3))
    assert again.quota.held == {"eve": 1} and queue in again.destinations.configured
    reordered = EmbeddedBroker(clock, BrokerSettings(persistence="memory"),
                               logins=LoginQuotas({"eve": LoginLimits(max_queues=3)}))
    reordered.recover(Snapshot(durables=[DurableRecord(configured_key(queue), queue),
                                         DurableRecord(record_key(queue), "/topic/VirtualTopic.x", None, "eve")]))
    assert reordered.quota.held == {"eve": 1} and queue in reordered.destinations.configured
    assert reordered.virtual.queues_of("/topic/VirtualTopic.x") == [queue]


def test_deleting_a_consumer_queue_in_the_console_removes_both_records(run: Run) -> None:
    queue = "/queue/Consumer.A.VirtualTopic.y"
    operations = QueueOperations(run.broker)  # type: ignore[arg-type]
    run.wait(operations.create_queue(queue))
    assert sorted(key for key, *_ in records(run)) == [configured_key(queue), record_key(queue)]
    run.wait(operations.delete_queue(queue))
    assert records(run) == []
    broker = run.restart()
    assert queue not in broker.queues


def test_with_the_memory_store_a_new_store_starts_without_them(clock: Clock) -> None:
    """``persistence = "memory"``: a restart is a new process with a new, empty memory store."""
    broker = broker_on(clock, MemoryStore(clock))
    QueueOperations(broker).create_queue("/queue/ops.mem")
    broker.stop()
    assert "/queue/ops.mem" not in broker_on(clock, MemoryStore(clock)).queues


@pytest.fixture
def clock() -> Clock:
    return Clock()
