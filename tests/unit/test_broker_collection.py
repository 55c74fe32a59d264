"""Inactive auto-created queues collected (``[broker] inactive_queue_timeout``, gateway/broker/collection.py),
on the embedded broker with a fake clock: what keeps a queue, what is never collected, what a collection gives
back, and the races of a collection with a SEND, a dead letter and a transaction."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.collection import SLICE, sweep_interval
from gateway.broker.operations import QueueOperations
from gateway.broker.settings import BrokerSettings
from gateway.config import parse_config
from gateway.errors import ConfigError, LimitReached
from gateway.interfaces import ISubscription, ITransactionalAcks, SubscriptionSpec
from gateway.message.model import TextMessage
from gateway.security.quotas import LoginLimits, LoginQuotas
from tests.unit.test_broker import Sink
from tests.unit.test_broker_paging import SlowStore as PagingSlowStore

TIMEOUT = 10


def message(destination: str, body: str = "m", login: str | None = None, **fields: Any) -> TextMessage:
    properties: dict[str, Any] = {"JMSXUserID": login} if login is not None else {}
    return TextMessage(destination=destination, message_id=f"ID:{destination}:{body}", text=body,
                       properties={**properties, **fields.pop("properties", {})}, **fields)


def make(clock: Clock, timeout: int = TIMEOUT, store: Any = None, **settings: Any) -> EmbeddedBroker:
    settings.setdefault("persistence", "memory")
    broker = EmbeddedBroker(clock, BrokerSettings(inactive_queue_timeout=timeout, **settings), store=store,
                            logins=LoginQuotas({"eve": LoginLimits(max_queues=2)}))
    broker.start()
    return broker


def subscribe(broker: EmbeddedBroker, sink: Sink | None = None, **spec: Any) -> ISubscription:
    result: list[Any] = []
    broker.subscribe(SubscriptionSpec(**spec), sink or Sink()).addBoth(result.append)
    assert result and not isinstance(result[0], Failure), result
    return cast(ISubscription, result[0])


def wait(clock: Clock, seconds: float) -> None:
    """Let ``seconds`` pass, a tenth of a second at a time (each sweep runs when it is due)."""
    for _ in range(round(seconds * 10)):
        clock.advance(0.1)


def collected(broker: EmbeddedBroker) -> int:
    return broker.metrics.queues_collected.count


@pytest.fixture
def clock() -> Clock:
    return Clock()


# -- what goes ---------------------------------------------------------------------------------------------


def test_an_empty_queue_goes_after_the_timeout_and_gives_its_place_back(clock: Clock) -> None:
    broker = make(clock)
    broker.send(message("/queue/a", login="eve"))
    subscribe(broker, destination="/queue/a", login="eve").close()  # (auto-ack: took the message)
    subscribe(broker, destination="/queue/b", login="eve").close()
    assert broker.quota.held == {"eve": 2}
    with pytest.raises(LimitReached):
        broker.destinations.create_queue("/queue/c", "eve")
    wait(clock, TIMEOUT - 1)
    assert set(broker.queues) == {"/queue/a", "/queue/b"}, "collected before its timeout"
    wait(clock, 1 + 2 * sweep_interval(TIMEOUT) + 0.2)  # (noted idle at the first sweep, gone at the first one
    # a timeout later)
    assert set(broker.queues) == set()
    assert (broker.quota.count, broker.quota.held, collected(broker)) == (0, {}, 2)
    assert "/queue/a" not in broker.status()["queues"]
    broker.destinations.create_queue("/queue/c", "eve")  # (eve's room is back)


def test_activity_starts_the_timeout_again(clock: Clock) -> None:
    broker = make(clock)
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/a")
    subscription.close()
    wait(clock, TIMEOUT * 0.8)
    broker.send(message("/queue/a", "1"))  # (sent, nobody takes it)
    subscribe(broker, sink, destination="/queue/a").close()  # (taken: the queue is empty again)
    assert sink.texts() == ["1"]
    wait(clock, TIMEOUT * 0.8)
    assert "/queue/a" in broker.queues, "collected though a message went through it within the timeout"
    wait(clock, TIMEOUT * 0.5)
    assert "/queue/a" not in broker.queues


def test_a_consumer_that_came_and_went_is_activity(clock: Clock) -> None:
    """A client that subscribes now and then for a moment (a poll), never seen by a sweep: its queue stays."""
    broker = make(clock)
    broker.destinations.create_queue("/queue/polled", None)
    for _ in range(4):
        wait(clock, TIMEOUT * 0.6)
        subscribe(broker, destination="/queue/polled").close()
    assert collected(broker) == 0, "collected between two visits (and made again by the next)"
    wait(clock, TIMEOUT * 1.3)
    assert "/queue/polled" not in broker.queues


def test_a_send_after_the_collection_makes_the_queue_again_and_loses_nothing(clock: Clock) -> None:
    broker = make(clock)
    broker.destinations.create_queue("/queue/a", None)
    wait(clock, TIMEOUT * 1.2)
    assert "/queue/a" not in broker.queues
    broker.send(message("/queue/a", "after"))
    sink = Sink()
    subscribe(broker, sink, destination="/queue/a")
    assert sink.texts() == ["after"]


def test_timeout_zero_collects_nothing_and_a_new_timeout_applies_to_the_next_sweep(clock: Clock) -> None:
    broker = make(clock, timeout=0)
    broker.destinations.create_queue("/queue/a", None)
    wait(clock, 1000)
    assert "/queue/a" in broker.queues
    broker.inactive.set_timeout(TIMEOUT)
    wait(clock, TIMEOUT * 1.2 + 0.1)
    assert "/queue/a" not in broker.queues
    broker.destinations.create_queue("/queue/b", None)
    broker.inactive.set_timeout(0)
    wait(clock, 1000)
    assert "/queue/b" in broker.queues


def test_an_empty_dead_letter_queue_goes_like_any_auto_created_queue(clock: Clock) -> None:
    broker = make(clock, max_redeliveries=0)
    subscription = subscribe(broker, destination="/queue/a", ack_mode="client-individual")
    broker.send(message("/queue/a", "poison"))
    subscription.close()  # (its delivery failed once: past max_redeliveries 0, dead-lettered)
    assert len(broker.queues["/queue/DLQ.a"]) == 1
    subscribe(broker, destination="/queue/DLQ.a").close()
    wait(clock, TIMEOUT * 1.2)
    assert not broker.queues


def test_a_sweep_works_in_slices(clock: Clock) -> None:
    """50,000 queues must not stall the reactor: a sweep looks at SLICE queues a turn."""
    broker = make(clock, max_destinations=0)
    for index in range(SLICE * 2 + 10):
        broker.destinations.create_queue(f"/queue/q{index}", None)
    turns: list[int] = []
    original = broker.inactive._slice

    def counted(*args: Any) -> None:
        turns.append(len(broker.queues))
        original(*args)

    setattr(broker.inactive, "_slice", counted)  # noqa: B010 (counts the turns of each sweep)
    wait(clock, TIMEOUT * 1.2)
    assert not broker.queues
    assert len(turns) >= 6  # (two sweeps that noted them, one that collected them: three turns each)


# -- what keeps a queue ------------------------------------------------------------------------------------


def kept_after_timeout(broker: EmbeddedBroker, clock: Clock, name: str = "/queue/a") -> bool:
    wait(clock, TIMEOUT * 2)
    return name in broker.queues


def test_a_pending_message_keeps_its_queue(clock: Clock) -> None:
    broker = make(clock)
    broker.send(message("/queue/a"))
    assert kept_after_timeout(broker, clock)


def test_a_paged_message_keeps_its_queue(clock: Clock) -> None:
    broker = make(clock, memory_limit=4096)
    for index in range(10):
        broker.send(message("/queue/a", str(index) * 1000))
    queue = broker.queues["/queue/a"]
    assert queue.paged
    assert kept_after_timeout(broker, clock)
    assert len(broker.queues["/queue/a"]) == 10


def test_a_consumer_that_takes_nothing_keeps_its_queue(clock: Clock) -> None:
    broker = make(clock)
    subscribe(broker, destination="/queue/a")
    assert kept_after_timeout(broker, clock)


def test_an_unacknowledged_delivery_keeps_its_queue(clock: Clock) -> None:
    broker = make(clock)
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/a", ack_mode="client")
    broker.send(message("/queue/a", "1"))
    assert kept_after_timeout(broker, clock)
    subscription.close()  # (it goes back to the queue)
    assert len(broker.queues["/queue/a"]) == 1


def test_a_delivery_held_by_an_open_transaction_of_a_closed_subscription_keeps_its_queue(clock: Clock) -> None:
    """ACK inside BEGIN, then the subscriber's connection closes: the transaction holds the delivery until
    COMMIT or ABORT; an ABORT puts it back into the queue, which must still be the broker's."""
    broker = make(clock)
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/a", ack_mode="client")
    broker.send(message("/queue/a", "held"))
    cast(ITransactionalAcks, subscription).hold([sink.got[0][1]])
    subscription.close()
    assert len(broker.queues["/queue/a"]) == 0
    assert kept_after_timeout(broker, clock), "collected while a transaction held one of its deliveries"
    subscription.nack([sink.got[0][1]])  # (ABORT)
    after = Sink()
    subscribe(broker, after, destination="/queue/a")
    assert after.texts() == ["held"]


def test_a_committed_transaction_lets_the_queue_go(clock: Clock) -> None:
    broker = make(clock)
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/a", ack_mode="client")
    broker.send(message("/queue/a", "held"))
    cast(ITransactionalAcks, subscription).hold([sink.got[0][1]])
    subscription.close()
    subscription.ack([sink.got[0][1]])  # (COMMIT)
    assert not kept_after_timeout(broker, clock)


class SlowStore(PagingSlowStore):
    """The paging tests' store whose writes complete only when the test says so, with durable records and
    redelivery counts stored at once."""

    def set_redelivery(self, queue: str, message_id: str, count: int) -> Deferred[None]:
        return succeed(None)

    def add_durable(self, *args: Any) -> Deferred[None]:
        return succeed(None)

    def remove_durable(self, key: str) -> Deferred[None]:
        return succeed(None)


def test_a_send_being_stored_keeps_its_queue(clock: Clock) -> None:
    """A persistent SEND (or a COMMIT naming the queue) is being written when the queue's time is up: were
    the queue collected, the message would be shown in a queue the broker no longer has, and lost."""
    store = SlowStore()
    broker = make(clock, store=store)
    broker.destinations.create_queue("/queue/a", None)
    wait(clock, TIMEOUT * 0.9)
    broker.send_batch([message("/queue/a", "commit", persistent=True)])
    assert kept_after_timeout(broker, clock)
    store.writes[0].callback(None)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/a")
    assert sink.texts() == ["commit"]


def test_a_dead_letter_being_stored_reaches_a_collected_dead_letter_queue(clock: Clock) -> None:
    store = SlowStore()
    broker = make(clock, store=store, max_redeliveries=0)
    broker.destinations.queue("/queue/DLQ.a")  # (an empty dead-letter queue, about to be collected)
    wait(clock, TIMEOUT * 0.95)
    subscription = subscribe(broker, destination="/queue/a", ack_mode="client")
    broker.send(message("/queue/a", "poison", persistent=True))
    store.writes.pop(0).callback(None)
    subscription.close()  # (dead-lettered: its copy is being written to the DLQ)
    wait(clock, TIMEOUT * 0.5)
    assert "/queue/DLQ.a" not in broker.queues  # (collected meanwhile)
    store.writes.pop(0).callback(None)
    assert len(broker.queues["/queue/DLQ.a"]) == 1, "the dead letter went to the collected queue"


def test_a_scheduled_message_keeps_its_queue_until_it_is_delivered(clock: Clock) -> None:
    broker = make(clock)
    broker.destinations.create_queue("/queue/a", None)
    delay = TIMEOUT * 3 * 1000
    broker.send(message("/queue/a", "later", properties={"AMQ_SCHEDULED_DELAY": str(delay)}))
    assert kept_after_timeout(broker, clock)
    wait(clock, TIMEOUT * 2)
    assert len(broker.queues["/queue/a"]) == 1
    assert broker.queues["/queue/a"].scheduled == 0


def test_a_wildcard_subscription_keeps_the_queues_it_consumes_from(clock: Clock) -> None:
    broker = make(clock)
    broker.destinations.create_queue("/queue/orders.a", None)
    subscribe(broker, destination="/queue/orders.>")
    assert kept_after_timeout(broker, clock, "/queue/orders.a")


# -- what is never collected -------------------------------------------------------------------------------


def test_configured_consumer_temporary_and_durable_destinations_are_never_collected(clock: Clock) -> None:
    broker = make(clock)
    QueueOperations(broker).create_queue("/queue/console")
    broker.destinations.create_queue("/queue/auto", None)
    QueueOperations(broker).create_queue("/queue/auto")  # (named by the console: configured from now on)
    subscribe(broker, destination="/queue/Consumer.billing.VirtualTopic.orders").close()
    broker.create_temporary("/remote-temp-queue/t1")
    subscribe(broker, destination="/topic/news", durable_name="d", client_id="c").close()
    broker.destinations.create_queue("/queue/invented", None)
    wait(clock, TIMEOUT * 3)
    assert set(broker.queues) == {"/queue/console", "/queue/auto", "/queue/Consumer.billing.VirtualTopic.orders",
                                  "/remote-temp-queue/t1"}
    assert list(broker.durables) == ["durable:c:d"]
    assert collected(broker) == 1


def test_a_queue_deleted_then_made_again_is_not_configured_any_more(clock: Clock) -> None:
    broker = make(clock)
    operations = QueueOperations(broker)
    operations.create_queue("/queue/a")
    operations.delete_queue("/queue/a")
    broker.destinations.create_queue("/queue/a", None)
    assert not kept_after_timeout(broker, clock)


# -- settings ----------------------------------------------------------------------------------------------


def test_the_default_timeout_and_a_bad_value_names_its_key(tmp_path: Path) -> None:
    assert BrokerSettings().inactive_queue_timeout == 300
    with pytest.raises(ConfigError, match=r"broker\.inactive_queue_timeout"):
        parse_config(tomllib.loads("[broker]\ninactive_queue_timeout = -1\n"), str(tmp_path / "gw.toml"))
    with pytest.raises(ConfigError, match=r"broker\.inactive_queue_timeout"):
        parse_config(tomllib.loads('[broker]\ninactive_queue_timeout = "soon"\n'), str(tmp_path / "gw.toml"))


def test_a_stopped_broker_sweeps_no_more(clock: Clock) -> None:
    broker = make(clock)
    broker.destinations.create_queue("/queue/a", None)
    broker.stop()
    wait(clock, TIMEOUT * 3)
    assert "/queue/a" in broker.queues
    assert not clock.getDelayedCalls()
