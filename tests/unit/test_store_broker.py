"""The embedded broker on the SQLite store: what a restart brings back.

Each test runs a broker on a store file, "stops" it the way a crash does
(the broker stops without closing its subscriptions, and a stopped broker
writes nothing more, so the file holds what a kill -9 would have left), starts a new broker on the
same file and looks at what it recovered: queues in priority order,
durable subscriptions with their backlog, redelivery counts (and the dead
letter rule across restarts), expirations.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher
from zope.interface import implementer

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.errors import StoreError
from gateway.interfaces import IConsumer, ISubscription, SubscriptionSpec
from gateway.message.model import Message, TextMessage
from tests.support.log_events import observer
from tests.support.messages import texts_of
from tests.unit.test_store_contract import NOW, PumpedReactor


class PumpedClock(Clock, PumpedReactor):
    """A Clock (for the broker's timers) that is also the store's reactor."""

    def __init__(self) -> None:
        Clock.__init__(self)
        PumpedReactor.__init__(self)
        self.advance(NOW)

    def seconds(self) -> float:
        return Clock.seconds(self)


@implementer(IConsumer)
class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[Message, Any]] = []

    def deliver(self, message: Message, tag: Any) -> None:
        self.got.append((message, tag))

    def subscription_failed(self, reason: Exception) -> None:
        raise AssertionError(f"subscription failed: {reason}")

    def texts(self) -> list[str]:
        return texts_of(m for m, _ in self.got)


def text(destination: str, body: str, **fields: Any) -> TextMessage:
    fields.setdefault("persistent", True)
    return TextMessage(destination=destination, message_id=f"ID:{body}", text=body, **fields)


class Run:
    """Brokers started one after another on the same store file."""

    def __init__(self, tmp_path: Path, settings: BrokerSettings, **store_options: Any) -> None:
        self.path = str(tmp_path / "broker.sqlite")
        self.settings = settings
        self.store_options = store_options
        self.clock = PumpedClock()
        self.broker: EmbeddedBroker | None = None

    def start(self) -> EmbeddedBroker:
        store = SqliteStore(self.path, self.clock, **self.store_options)
        self.broker = EmbeddedBroker(self.clock, self.settings, store)
        self.wait(self.broker.start())
        return self.broker

    def crash(self) -> None:
        """Stop as a kill would: only what was already handed to the store is written
        (a stopped broker writes nothing more; its subscriptions are left as they were)."""
        assert self.broker is not None
        self.wait(self.broker.stop())
        self.broker = None

    def restart(self) -> EmbeddedBroker:
        self.crash()
        return self.start()

    def close(self) -> None:
        """Stop the broker running on the store, if one is, so that the store's writer thread ends
        (a test's last step: tests/unit/conftest.py fails a test that leaves one running)."""
        if self.broker is not None:
            self.crash()

    def wait(self, d: Deferred[Any]) -> Any:
        return self.clock.wait(d)

    def settle(self) -> None:
        """Let the store finish what was issued (fire-and-forget writes)."""
        assert self.broker is not None
        self.wait(self.broker.store.add_batch([]))

    def send(self, *messages: Message) -> None:
        assert self.broker is not None
        self.wait(self.broker.send_batch(list(messages)))

    def subscribe(self, sink: Sink, **spec: Any) -> ISubscription:
        assert self.broker is not None
        return self.wait(self.broker.subscribe(SubscriptionSpec(**spec), sink))  # type: ignore[no-any-return]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path, BrokerSettings(max_redeliveries=2, persistence="sqlite"))
    run.start()
    yield run
    run.close()


def test_a_persistent_send_completes_only_when_stored(run: Run) -> None:
    assert run.broker is not None
    sent = run.broker.send(text("/queue/a", "one"))
    assert not sent.called, "the send was confirmed before the store wrote it"
    run.wait(sent)
    assert run.broker.status()["queues"]["/queue/a"]["pending"] == 1


def test_a_persistent_post_settles_only_when_stored(run: Run) -> None:
    assert run.broker is not None
    outcomes: list[tuple[Any, Any]] = []
    run.broker.post(text("/queue/a", "one"), lambda error, ack: outcomes.append((error, ack)))
    assert outcomes == [], "the post was settled before the store wrote it"
    run.settle()
    assert outcomes == [(None, None)]
    assert run.broker.status()["queues"]["/queue/a"]["pending"] == 1
    run.restart()
    sink = Sink()
    run.subscribe(sink, destination="/queue/a")
    assert sink.texts() == ["one"]


def test_a_post_the_full_store_refuses_settles_with_the_error(tmp_path: Path) -> None:
    run = Run(tmp_path, BrokerSettings(persistence="sqlite"), max_size=512 * 1024)
    broker = run.start()
    outcomes: list[tuple[Any, Any]] = []
    for index in range(400):
        broker.post(text("/queue/a", f"m{index}-" + "x" * 2000), lambda error, ack: outcomes.append((error, ack)))
        run.settle()
    errors = [error for error, _ in outcomes if error is not None]
    assert len(outcomes) == 400 and errors and isinstance(errors[0], StoreError)
    assert broker.status()["queues"]["/queue/a"]["pending"] == 400 - len(errors)
    run.wait(broker.stop())


def test_queues_come_back_in_priority_then_arrival_order(run: Run) -> None:
    run.send(text("/queue/a", "low", priority=1), text("/queue/a", "high", priority=9))
    run.send(text("/queue/a", "normal"), text("/queue/b", "other"))
    run.send(text("/queue/a", "fleeting", persistent=False))
    run.restart()
    sink = Sink()
    run.subscribe(sink, destination="/queue/a")
    assert sink.texts() == ["high", "normal", "low"]
    other = Sink()
    run.subscribe(other, destination="/queue/b")
    assert other.texts() == ["other"]


def test_acknowledged_messages_stay_gone(run: Run) -> None:
    run.send(*(text("/queue/a", f"m{i}") for i in range(4)))
    sink = Sink()
    sub = run.subscribe(sink, destination="/queue/a", ack_mode="client-individual")
    tags = {m.text: tag for m, tag in sink.got}  # type: ignore[attr-defined]
    run.wait(sub.ack([tags["m0"], tags["m2"]]))
    run.restart()
    again = Sink()
    run.subscribe(again, destination="/queue/a")
    assert again.texts() == ["m1", "m3"]


def test_auto_acknowledged_messages_stay_gone(run: Run) -> None:
    run.send(*(text("/queue/a", f"m{i}") for i in range(3)))
    run.subscribe(Sink(), destination="/queue/a")
    run.settle()
    run.restart()
    again = Sink()
    run.subscribe(again, destination="/queue/a")
    assert again.texts() == []


def test_unacknowledged_deliveries_come_back_redelivered(run: Run) -> None:
    run.send(text("/queue/a", "pending"), text("/queue/a", "never-delivered"))
    sink = Sink()
    run.subscribe(sink, destination="/queue/a", ack_mode="client", prefetch=1)
    assert sink.texts() == ["pending"]
    run.settle()
    run.restart()
    again = Sink()
    run.subscribe(again, destination="/queue/a", ack_mode="client", prefetch=10)
    first, second = (message for message, _ in again.got)
    assert (first.message_id, first.redelivered, first.redelivery_count) == ("ID:pending", True, 1)
    assert (second.message_id, second.redelivered, second.redelivery_count) == ("ID:never-delivered", False, 0)


def test_the_dead_letter_rule_holds_across_restarts(run: Run) -> None:
    # max_redeliveries=2: deliveries with counts 0, 1 and 2 may fail; the next failure dead-letters.
    run.send(text("/queue/orders", "poison"))
    sink = Sink()
    sub = run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual")
    run.wait(sub.nack([sink.got[0][1]]))
    again = sink.got[1][0]
    assert (again.redelivered, again.redelivery_count) == (True, 1)  # NACKed once, delivered at once
    run.settle()
    run.restart()  # with that delivery unanswered
    sink = Sink()
    sub = run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual")
    message, tag = sink.got[0]
    assert (message.redelivered, message.redelivery_count) == (True, 2)
    run.wait(sub.nack([tag]))
    run.settle()
    assert len(sink.got) == 1, "redelivered past the limit"
    broker = run.restart()
    assert "/queue/orders" not in broker.queues
    dead = Sink()
    run.subscribe(dead, destination="/queue/DLQ.orders")
    assert dead.texts() == ["poison"]
    assert dead.got[0][0].properties["dlqDeliveryFailureCause"] == "delivery failed 3 times (limit 2)"


def test_deliveries_cut_short_by_crashes_count_towards_the_dead_letter_rule(run: Run) -> None:
    run.send(text("/queue/orders", "crasher"))
    for attempt in range(3):
        sink = Sink()
        run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual")
        assert sink.got[0][0].redelivery_count == attempt
        run.settle()
        run.restart()  # the consumer never answers: the broker died under it
    dead = Sink()
    run.subscribe(dead, destination="/queue/DLQ.orders")
    assert dead.texts() == ["crasher"]
    assert dead.got[0][0].properties["original-destination"] == "/queue/orders"
    broker = run.restart()
    assert "/queue/orders" not in broker.queues and "/queue/DLQ.orders" not in broker.queues


def test_durable_subscriptions_keep_identity_and_backlog(run: Run) -> None:
    spec = {"destination": "/topic/news", "durable_name": "reader", "client_id": "app", "ack_mode": "client"}
    sub = run.subscribe(Sink(), **spec)
    run.wait(sub.close())
    run.send(text("/topic/news", "while-away-1"), text("/topic/news", "while-away-2"))
    run.send(text("/topic/news", "not-kept", persistent=False))
    run.restart()
    assert run.broker is not None and "durable:app:reader" in run.broker.durables
    sink = Sink()
    run.subscribe(sink, **spec)
    assert sink.texts() == ["while-away-1", "while-away-2"]


def test_a_deleted_durable_subscription_does_not_come_back(run: Run) -> None:
    spec = {"destination": "/topic/news", "durable_name": "reader", "client_id": "app"}
    sub = run.subscribe(Sink(), **spec)
    run.wait(sub.close())
    run.send(text("/topic/news", "kept-for-reader"))
    assert run.broker is not None
    run.wait(run.broker.unsubscribe_durable("app", "reader"))
    run.restart()
    assert run.broker.durables == {}


def test_temporary_queues_are_not_stored(run: Run) -> None:
    assert run.broker is not None
    run.broker.create_temporary("/remote-temp-queue/s1.replies")
    run.send(text("/remote-temp-queue/s1.replies", "reply"))
    run.send(text("/queue/a", "kept"))
    assert run.broker.store.stats.operations == 1  # type: ignore[attr-defined]
    run.restart()
    assert "/remote-temp-queue/s1.replies" not in run.broker.queues


def test_messages_that_expired_while_down_are_purged_and_counted(run: Run) -> None:
    now_ms = int(run.clock.seconds() * 1000)
    run.send(
        text("/queue/a", "short", expiration=now_ms + 5_000), text("/queue/a", "long", expiration=now_ms + 3_600_000)
    )
    run.crash()
    run.clock.advance(60)
    broker = run.start()
    assert broker.metrics.expired.count == 1
    sink = Sink()
    run.subscribe(sink, destination="/queue/a")
    assert sink.texts() == ["long"]


def test_messages_expiring_while_up_are_removed_from_the_store(run: Run) -> None:
    now_ms = int(run.clock.seconds() * 1000)
    run.send(text("/queue/a", "short", expiration=now_ms + 500))
    run.clock.advance(2)  # the broker's expiry check runs
    run.settle()
    broker = run.restart()
    assert "/queue/a" not in broker.queues  # nothing stored for it any more
    assert broker.metrics.expired.count == 0


def test_a_full_store_refuses_sends_and_keeps_serving(tmp_path: Path) -> None:
    run = Run(tmp_path, BrokerSettings(persistence="sqlite"), max_size=512 * 1024)
    broker = run.start()
    sink = Sink()
    sub = run.subscribe(sink, destination="/queue/a", ack_mode="client-individual", prefetch=100_000)
    accepted = 0
    with pytest.raises(StoreError, match="full"):
        for index in range(5_000):
            run.send(text("/queue/a", f"m{index}-" + "x" * 2000))
            accepted += 1
    assert accepted > 10 and len(sink.got) == accepted
    # Consumers are still served: acknowledgements free the store...
    run.wait(sub.ack([tag for _, tag in sink.got]))
    # ...and sends work again.
    run.send(text("/queue/a", "after"))
    assert sink.texts()[-1] == "after"
    run.wait(broker.stop())


def test_deliveries_returned_while_stopping_are_not_written(run: Run) -> None:
    run.send(text("/queue/a", "in-flight"))
    sink = Sink()
    sub = run.subscribe(sink, destination="/queue/a", ack_mode="client-individual")
    other = Sink()
    run.subscribe(other, destination="/queue/a")  # auto ack: would take the returned message
    run.settle()
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(observer(events.append))
    try:
        broker = run.broker
        assert broker is not None
        run.wait(broker.stop())
        run.broker = None
        run.wait(sub.close())  # a connection closing during shutdown
        gc.collect()
    finally:
        globalLogPublisher.removeObserver(observer(events.append))
    assert other.texts() == ["in-flight"]  # handed over in memory...
    assert not [e for e in events if e.get("log_level") == LogLevel.critical], "errors logged while stopping"
    assert any("not removed from the store" in e.get("log_format", "") for e in events)
    run.start()  # ...and, not acknowledged durably, back after the restart
    again = Sink()
    run.subscribe(again, destination="/queue/a")
    assert [(m.message_id, m.redelivered) for m, _ in again.got] == [("ID:in-flight", True)]


def test_a_durable_unsubscribe_completes_once_its_deletion_is_stored(run: Run) -> None:
    sink = Sink()
    sub = run.subscribe(sink, destination="/topic/t", durable_name="d", client_id="c")
    run.send(text("/topic/t", "kept"))
    deleted = sub.unsubscribe()
    assert not deleted.called, "the UNSUBSCRIBE was confirmed before the store deleted the subscription"
    run.wait(deleted)
    run.crash()
    broker = run.start()
    assert broker.durables == {}


def test_a_dead_letter_move_the_disk_reserve_refuses_leaves_the_message_in_its_queue(tmp_path: Path) -> None:
    free = [10**12]
    run = Run(tmp_path, BrokerSettings(max_redeliveries=0, persistence="sqlite"), free_space=lambda _: free[0])
    run.start()
    run.send(text("/queue/a", "poison"))
    sink = Sink()
    sub = run.subscribe(sink, destination="/queue/a", ack_mode="client-individual")
    free[0] = 0  # the disk reserve is reached: the copy to the DLQ is refused
    run.wait(sub.nack([sink.got[0][1]]))
    run.settle()
    assert sink.texts() == ["poison", "poison"], "the message was left nowhere"
    free[0] = 10**12
    run.wait(sub.close())
    run.settle()
    dead = Sink()
    run.subscribe(dead, destination="/queue/DLQ.a")
    assert dead.texts() == ["poison"]
    run.crash()


def test_deliveries_wait_while_the_store_is_behind_with_removals(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """An auto-ack consumer draining a stored backlog faster than the store deletes it: past
    REMOVALS_HELD removals waiting, deliveries of stored queues wait until half of them are
    committed (each waiting removal held memory: ~300 MB for a 300,000-message drain before);
    a non-persistent destination is not held."""
    import gateway.broker.broker as broker_module

    monkeypatch.setattr(broker_module, "REMOVALS_HELD", 5)
    assert run.broker is not None
    run.send(*[text("/queue/a", f"m{i:02}") for i in range(20)])
    sink = Sink()
    run.broker.subscribe(SubscriptionSpec("/queue/a", ack_mode="auto"), sink)  # (not pumped: nothing committed)
    assert len(sink.got) == 6  # (the sixth removal crossed the bound)
    assert run.broker.status()["memory"]["deliveries_held"] is True
    assert run.broker.status()["memory"]["removals_waiting"] == 6
    other = Sink()
    run.broker.subscribe(SubscriptionSpec("/topic/news", ack_mode="auto"), other)
    run.wait(run.broker.send_batch([text("/topic/news", "t", persistent=False)]))
    assert other.texts() == ["t"]  # (not stored: not held)
    run.settle()  # the removals commit: deliveries go on, held again past the bound
    while len(sink.got) < 20:
        before = len(sink.got)
        run.settle()
        assert len(sink.got) > before, f"deliveries stopped at {before} of 20"
    assert sink.texts() == [f"m{i:02}" for i in range(20)]
    run.settle()
    assert run.broker.status()["memory"]["removals_waiting"] == 0
    assert run.broker.status()["memory"]["deliveries_held"] is False
    run.restart()
    assert run.broker.status()["queues"].get("/queue/a", {"pending": 0})["pending"] == 0
