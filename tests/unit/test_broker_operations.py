"""The console's operations on the embedded broker (QueueOperations) on the SQLite store.

Browse consumes nothing; purge and delete take pending messages out of
memory and the store (a restart does not bring them back) and leave
in-flight ones alone; moving dead letters back sends them to their origin
as fresh messages, stored there before they leave the dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker.operations import QueueOperations
from gateway.broker.settings import BrokerSettings
from gateway.errors import DestinationError
from tests.unit.test_store_broker import Run, Sink, text


@pytest.fixture(params=[3])
def run(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Run]:
    """A broker on a SQLite file; ``max_redeliveries`` is the param (0: a NACK dead-letters)."""
    run = Run(tmp_path, BrokerSettings(max_redeliveries=request.param, persistence="sqlite"))
    run.start()
    yield run
    run.close()


def operations(run: Run) -> QueueOperations:
    assert run.broker is not None
    return QueueOperations(run.broker)


def pending(run: Run, queue: str) -> list[str | None]:
    assert run.broker is not None
    return [getattr(m, "text", None) for m in run.broker.queues[queue].messages()] if queue in run.broker.queues \
        else []


def test_browse_consumes_nothing(run: Run) -> None:
    run.send(text("/queue/a", "one"), text("/queue/a", "two", priority=9), text("/queue/a", "three"))
    browsed = operations(run).browse("/queue/a", limit=2)
    assert [m.text for m in browsed] == ["two", "one"]  # type: ignore[attr-defined]
    assert pending(run, "/queue/a") == ["two", "one", "three"]
    with pytest.raises(KeyError):
        operations(run).browse("/queue/none")


def test_purge_empties_the_queue_and_the_store_but_leaves_in_flight(run: Run) -> None:
    run.send(*(text("/queue/a", f"m{i}") for i in range(5)))
    sink = Sink()
    run.subscribe(sink, destination="/queue/a", ack_mode="client-individual", prefetch=1)
    assert sink.texts() == ["m0"]
    assert run.wait(operations(run).purge("/queue/a")) == 4
    assert pending(run, "/queue/a") == []
    run.restart()  # m0 was out for acknowledgement: it comes back, the purged ones do not
    assert pending(run, "/queue/a") == ["m0"]


def test_delete_removes_one_message_for_good(run: Run) -> None:
    run.send(text("/queue/a", "keep"), text("/queue/a", "drop"), text("/queue/a", "volatile", persistent=False))
    assert run.wait(operations(run).remove("/queue/a", "ID:drop")) is True
    assert run.wait(operations(run).remove("/queue/a", "ID:drop")) is False
    assert run.wait(operations(run).remove("/queue/a", "ID:volatile")) is True
    assert pending(run, "/queue/a") == ["keep"]
    run.restart()
    assert pending(run, "/queue/a") == ["keep"]


@pytest.mark.parametrize("run", [0], indirect=True)
def test_dead_letters_move_back_to_their_origin_and_stay_moved(run: Run) -> None:
    run.send(text("/queue/orders", "poison"), text("/queue/orders", "bad"))
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual")
    run.wait(subscription.nack([tag for _, tag in sink.got]))  # max_redeliveries = 0: straight to the DLQ
    run.settle()  # stored in the DLQ,
    run.settle()  # then removed from the queue and made visible
    assert pending(run, "/queue/DLQ.orders") == ["poison", "bad"]
    run.wait(subscription.close())
    ops = operations(run)
    assert ops.is_dead_letter_queue("/queue/DLQ.orders") and not ops.is_dead_letter_queue("/queue/orders")
    assert run.wait(ops.move_to_origin("/queue/DLQ.orders", {"ID:bad"})) == 1
    assert pending(run, "/queue/DLQ.orders") == ["poison"]
    assert pending(run, "/queue/orders") == ["bad"]
    run.restart()
    assert pending(run, "/queue/DLQ.orders") == ["poison"]
    assert pending(run, "/queue/orders") == ["bad"]
    assert run.wait(operations(run).move_to_origin("/queue/DLQ.orders")) == 1
    run.restart()
    assert pending(run, "/queue/DLQ.orders") == []
    again = Sink()
    run.subscribe(again, destination="/queue/orders")
    assert again.texts() == ["bad", "poison"]
    for message, _ in again.got:  # a fresh message: no dead-letter marks, no redelivery count
        assert not message.redelivered and message.redelivery_count == 0
        assert "original-destination" not in message.properties and "dlqDeliveryFailureCause" not in message.properties


def test_a_move_the_broker_refuses_leaves_the_dead_letters_where_they_are(run: Run) -> None:
    run.send(text("/queue/DLQ.x", "orphan"),
             text("/queue/DLQ.x", "from-temp", properties={"original-destination": "/remote-temp-queue/gone"}))
    ops = operations(run)
    with pytest.raises(DestinationError):
        run.wait(ops.move_to_origin("/queue/DLQ.x"))
    assert sorted(pending(run, "/queue/DLQ.x"), key=str) == ["from-temp", "orphan"]
    assert run.wait(ops.move_to_origin("/queue/DLQ.x", {"ID:orphan"})) == 0  # no origin: stays
    run.restart()
    assert sorted(pending(run, "/queue/DLQ.x"), key=str) == ["from-temp", "orphan"]
