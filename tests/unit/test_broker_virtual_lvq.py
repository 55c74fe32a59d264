"""Virtual topics, last-value queues, per-destination exclusive consumers and groups with paging on the embedded
broker (issue 37): the names, the copies per consumer group, a group's queue kept without
consumers and across restarts, replacement by last-value key (in memory, paged, after a restart)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.last_value import LVQ_HEADER, LastValues
from gateway.broker.operations import QueueOperations
from gateway.broker.paging.page_file import TAIL_ROWS, Entry, PageFile, StoredTail
from gateway.broker.settings import BrokerSettings, DestinationLimits
from gateway.broker.store.memory_store import MemoryStore
from gateway.broker.virtual_topics import VirtualTopicNames, VirtualTopics
from tests.support.messages import text_of
from tests.unit.test_broker import Sink, subscribe, text
from tests.unit.test_page_search import Backlog
from tests.unit.test_store_broker import Run
from tests.unit.test_store_broker import Sink as StoredSink
from tests.unit.test_store_broker import text as stored_text

VT = "/topic/VirtualTopic.orders"


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """Brokers on one SQLite store, one after another; the last is stopped at the end (its writer thread)."""
    runs: list[Run] = []

    def make_one(settings: BrokerSettings, **store_options: Any) -> Run:
        runs.append(Run(tmp_path, settings, **store_options))
        return runs[-1]

    yield make_one
    for run in runs:
        run.close()


def make(clock: Clock, **settings: Any) -> EmbeddedBroker:
    broker = EmbeddedBroker(clock, BrokerSettings(**settings))
    broker.start()
    return broker


# -- names -----------------------------------------------------------------------


@pytest.mark.parametrize(("queue", "topic"), [
    ("/queue/Consumer.A.VirtualTopic.orders", "/topic/VirtualTopic.orders"),
    ("/queue/Consumer.billing.VirtualTopic.orders.eu", "/topic/VirtualTopic.orders.eu"),
    ("/queue/Consumer.A.orders", None),  # (the topic part is not virtual)
    ("/queue/Consumer..VirtualTopic.orders", None),  # (no group)
    ("/queue/Consumers.A.VirtualTopic.orders", None),
    ("/queue/Consumer.A", None),
    ("/topic/Consumer.A.VirtualTopic.orders", None),
], ids=["plain", "dotted-topic", "not-virtual", "no-group", "other-prefix", "short", "a-topic"])
def test_consumer_queue_names(queue: str, topic: str | None) -> None:
    assert VirtualTopicNames().topic_of(queue) == topic


def test_the_prefixes_are_configurable_and_checked() -> None:
    names = VirtualTopicNames("VT.", "Group.*.sub.")
    assert names.is_virtual("/topic/VT.x") and not names.is_virtual("/topic/VirtualTopic.x")
    assert names.topic_of("/queue/Group.g1.sub.VT.x") == "/topic/VT.x"
    assert VirtualTopicNames("", "Consumer.*.").topic_of("/queue/Consumer.A.VirtualTopic.x") is None
    with pytest.raises(ValidationError, match=r"must end with '\.' and have a '\*' segment"):
        BrokerSettings(virtual_topic_consumer_prefix="Consumer.")


def test_the_index_adds_once_and_forgets() -> None:
    index = VirtualTopics(VirtualTopicNames())
    assert index.add("/queue/Consumer.A.VirtualTopic.o") == "/topic/VirtualTopic.o"
    assert index.add("/queue/Consumer.A.VirtualTopic.o") is None, "indexed once"
    assert index.add("/queue/plain") is None and index.queues_of("/topic/VirtualTopic.o") == [
        "/queue/Consumer.A.VirtualTopic.o"]
    assert index.remove("/queue/Consumer.A.VirtualTopic.o") and not index
    assert not index.remove("/queue/Consumer.A.VirtualTopic.o")


# -- virtual topics on the broker -------------------------------------------------


def test_each_consumer_group_gets_every_message_and_its_consumers_share_it(clock: Clock) -> None:
    broker = make(clock)
    a1, a2, b, plain = Sink(), Sink(), Sink(), Sink()
    subscribe(broker, a1, destination="/queue/Consumer.A.VirtualTopic.orders")
    subscribe(broker, a2, destination="/queue/Consumer.A.VirtualTopic.orders")
    subscribe(broker, b, destination="/queue/Consumer.B.VirtualTopic.orders")
    subscribe(broker, plain, destination=VT)
    for i in range(6):
        broker.send(text(VT, f"m{i}"))
    group_a = a1.texts() + a2.texts()
    assert sorted(group_a) == [f"m{i}" for i in range(6)] and a1.texts() and a2.texts(), "shared, each once"
    assert b.texts() == [f"m{i}" for i in range(6)]
    assert plain.texts() == [f"m{i}" for i in range(6)], "the topic's own subscribers as before"
    assert {m.destination for m, _ in b.got} == {VT}


def test_a_group_without_consumers_keeps_its_copies(clock: Clock) -> None:
    broker = make(clock)
    first = Sink()
    subscribe(broker, first, destination="/queue/Consumer.A.VirtualTopic.orders").close()
    broker.send(text(VT, "while away"))
    back = Sink()
    subscribe(broker, back, destination="/queue/Consumer.A.VirtualTopic.orders")
    assert back.texts() == ["while away"]


def test_virtual_topics_can_be_turned_off(clock: Clock) -> None:
    broker = make(clock, virtual_topic_prefix="")
    sink = Sink()
    subscribe(broker, sink, destination="/queue/Consumer.A.VirtualTopic.orders")
    broker.send(text(VT, "m"))
    assert sink.texts() == []


def test_a_deleted_consumer_queue_gets_no_more_copies(clock: Clock) -> None:
    broker = make(clock)
    queue = "/queue/Consumer.A.VirtualTopic.orders"
    subscribe(broker, Sink(), destination=queue).close()
    ops = QueueOperations(broker)
    ops.delete_queue(queue)
    broker.send(text(VT, "m"))
    assert queue not in broker.queues and broker.virtual.queues_of(VT) == []


def test_consumer_queues_are_remembered_across_a_restart(make_run: Callable[..., Run]) -> None:
    run = make_run(BrokerSettings(persistence="sqlite"))
    broker = run.start()
    run.wait(broker.subscribe(_spec("/queue/Consumer.A.VirtualTopic.orders"), StoredSink())).close()
    run.settle()
    broker = run.restart()
    run.send(stored_text(VT, "after the restart"))
    assert [m.text for m in broker.queues["/queue/Consumer.A.VirtualTopic.orders"].messages()] == [  # type: ignore[attr-defined]
        "after the restart"]
    assert broker.status()["queues"]["/queue/Consumer.A.VirtualTopic.orders"]["pending"] == 1
    broker = run.restart()
    sink = StoredSink()
    run.wait(broker.subscribe(_spec("/queue/Consumer.A.VirtualTopic.orders"), sink))
    assert [m.text for m, _ in sink.got] == ["after the restart"], "the copy was stored"  # type: ignore[attr-defined]


def _spec(destination: str) -> Any:
    from gateway.interfaces import SubscriptionSpec

    return SubscriptionSpec(destination=destination)


# -- last-value queues -------------------------------------------------------------


def lvq(key: str, body: str, destination: str = "/queue/prices") -> Any:
    return text(destination, body, properties={LVQ_HEADER: key})


class HeldRecords(MemoryStore):
    """A store whose durable records (a consumer queue's among them) are stored when the test says so."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Deferred[None]] = []

    def add_durable(self, key: str, destination: str, selector: str | None,
                    owner: str | None = None) -> Deferred[None]:
        super().add_durable(key, destination, selector, owner)
        self.held.append(Deferred())
        return self.held[-1]


def test_a_subscribe_that_makes_a_consumer_queue_waits_for_its_record(clock: Clock) -> None:
    """The SUBSCRIBE that makes a virtual topic's consumer queue (and one to it meanwhile) completes, and
    its consumer starts, once the queue's record is stored: its RECEIPT came before, so kill -9 right
    after it could forget the group's queue and the group missed what the topic got (found by
    tests/integration/test_destination_mix_attacks.py at a load average of 6). A queue already recorded is
    subscribed at once."""
    store = HeldRecords()
    broker = EmbeddedBroker(clock, BrokerSettings(), store)
    broker.start()
    queue = "/queue/Consumer.A.VirtualTopic.orders"
    first, second = Sink(), Sink()
    subscribed: list[object] = []
    broker.subscribe(_spec(queue), first).addCallback(subscribed.append)
    broker.subscribe(_spec(queue), second).addCallback(subscribed.append)
    broker.send(text(VT, "early"))
    assert subscribed == [] and first.got == [] and second.got == [] and len(store.held) == 1
    store.held[0].callback(None)
    assert len(subscribed) == 2
    assert first.texts() + second.texts() == ["early"]
    later = Sink()
    broker.subscribe(_spec(queue), later).addCallback(subscribed.append)
    assert len(subscribed) == 3


def test_last_values_index() -> None:
    values = LastValues()
    assert values.replace(lvq("a", "1")) is None
    assert values.replace(lvq("a", "2")) == "ID:1"
    assert values.replace(text("/queue/prices", "nokey")) is None and len(values) == 1


def test_a_newer_message_replaces_the_waiting_one_with_its_key(clock: Clock) -> None:
    broker = make(clock, destinations={"/queue/prices": DestinationLimits(last_value=True)})
    for key, body in [("EUR", "1.10"), ("USD", "1.00"), ("EUR", "1.11"), ("EUR", "1.12")]:
        broker.send(lvq(key, body))
    broker.send(text("/queue/prices", "no key"))
    sink = Sink()
    subscribe(broker, sink, destination="/queue/prices")
    assert sink.texts() == ["1.00", "1.12", "no key"]


def test_other_queues_keep_every_message(clock: Clock) -> None:
    broker = make(clock, destinations={"/queue/prices": DestinationLimits(last_value=True)})
    for body in ("1", "2"):
        broker.send(lvq("EUR", body, destination="/queue/other"))
    sink = Sink()
    subscribe(broker, sink, destination="/queue/other")
    assert sink.texts() == ["1", "2"]


def test_a_message_out_for_acknowledgement_is_not_replaced(clock: Clock) -> None:
    broker = make(clock, destinations={"/queue/prices": DestinationLimits(last_value=True)})
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/prices", ack_mode="client-individual", prefetch=1)
    broker.send(lvq("EUR", "1"))
    broker.send(lvq("EUR", "2"))
    broker.send(lvq("EUR", "3"))
    assert sink.texts() == ["1"]
    subscription.ack([sink.got[0][1]])
    assert sink.texts() == ["1", "3"], "2 was waiting: 3 replaced it"


@pytest.mark.parametrize("mode", ["auto-live", "auto-backlog", "client-individual", "expired", "paged"])
def test_the_key_index_holds_the_waiting_messages_keys_only(clock: Clock, mode: str) -> None:
    """Keys whose messages were delivered, expired or paged and then delivered leave the index (it kept every
    key ever sent: 200,000 distinct keys, all consumed, grew a gateway by 44 MB; found by
    tests/integration/test_lvq_attacks.py); a delivery that comes back unacknowledged is the newest of its
    key again, unless a newer one came meanwhile."""
    broker = make(clock, memory_limit=0, destinations={"/queue/prices": DestinationLimits(
        last_value=True, max_size=1 if mode == "paged" else 0)})
    queue = broker.destinations.queue("/queue/prices")
    sink = Sink()
    ack_mode = "client-individual" if mode == "client-individual" else "auto"
    if mode == "auto-live":
        subscribe(broker, sink, destination="/queue/prices")
    for index in range(100):
        message = lvq(f"k{index}", str(index))
        if mode == "expired":
            message.expiration = broker.now_ms() + 500  # (expired once the clock advances a second)
        broker.send(message)
    assert queue.last_values is not None
    if mode == "expired":
        clock.advance(1)
        queue.purge_expired()
    elif mode != "auto-live":
        subscription = subscribe(broker, sink, destination="/queue/prices", ack_mode=ack_mode)
        assert len(sink.got) == 100
        if mode == "client-individual":
            assert len(queue.last_values) == 0
            subscription.nack([sink.got[0][1]])  # (comes back: the newest of k0 again)
            broker.send(lvq("k0", "newer"))
            assert [text_of(m) for m, _ in sink.got[100:]] in (["0", "newer"], ["newer"]), sink.texts()
            subscription.ack([tag for _, tag in sink.got[1:]])
    assert len(queue.last_values) == 0, len(queue.last_values)


def test_a_paged_message_is_replaced_too(clock: Clock) -> None:
    broker = make(clock, memory_limit=0, destinations={
        "/queue/prices": DestinationLimits(last_value=True, max_size=1)})
    broker.send(lvq("EUR", "1"))
    broker.send(lvq("EUR", "2"))
    assert broker.queues["/queue/prices"].paged >= 1 or len(broker.queues["/queue/prices"]) == 1
    sink = Sink()
    subscribe(broker, sink, destination="/queue/prices")
    assert sink.texts() == ["2"]


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_replacement_holds_after_a_restart_and_the_store_forgets_the_replaced(make_run: Callable[..., Run],
                                                                             lazy: bool) -> None:
    """Recovered eagerly or lazily (left in the store until read: a last-value queue reads its
    backlog back at once, so a newer message finds the one it replaces)."""
    settings = BrokerSettings(persistence="sqlite", destinations={"/queue/prices": DestinationLimits(last_value=True)})
    run = make_run(settings, lazy_recovery=lazy)
    run.start()
    run.send(stored_text("/queue/prices", "1.10", properties={LVQ_HEADER: "EUR"}))
    run.send(stored_text("/queue/prices", "1.11", properties={LVQ_HEADER: "EUR"}))
    run.settle()
    broker = run.restart()
    run.send(stored_text("/queue/prices", "1.12", properties={LVQ_HEADER: "EUR"}))
    run.settle()
    broker = run.restart()
    sink = StoredSink()
    run.wait(broker.subscribe(_spec("/queue/prices"), sink))
    assert [m.text for m, _ in sink.got] == ["1.12"]  # type: ignore[attr-defined]


# -- exclusive by policy -------------------------------------------------------------


def test_a_policy_makes_every_consumer_of_a_queue_exclusive(clock: Clock) -> None:
    broker = make(clock, destinations={"/queue/jobs.>": DestinationLimits(exclusive=True)})
    first, second = Sink(), Sink()
    owner = subscribe(broker, first, destination="/queue/jobs.a")
    subscribe(broker, second, destination="/queue/jobs.a")
    for i in range(3):
        broker.send(text("/queue/jobs.a", f"m{i}"))
    assert first.texts() == ["m0", "m1", "m2"] and second.texts() == []
    owner.close()
    broker.send(text("/queue/jobs.a", "m3"))
    assert second.texts() == ["m3"]


# -- message groups and paging (found by the model test) --------------------------------


def test_a_free_groups_message_paged_out_behind_blocked_groups_is_found(clock: Clock) -> None:
    """Memory holds only messages of a group whose owner has no room; a message of another
    group was paged out behind them: a new consumer with room gets it (it waited until the
    owner acknowledged before)."""
    broker = make(clock, memory_limit=1500)
    owner = Sink()
    subscribe(broker, owner, destination="/queue/g", ack_mode="client", prefetch=1)
    for body, group in [("r0", "red"), ("r1", "red"), ("r2", "red"), ("b0", "blue")]:
        broker.send(text("/queue/g", body * 150, properties={"JMSXGroupID": group}))
    assert [t[:2] for t in owner.texts() if t] == ["r0"]
    assert broker.queues["/queue/g"].paged >= 1, "the blue one is paged out"
    other = Sink()
    subscribe(broker, other, destination="/queue/g", prefetch=1)
    assert [t[:2] for t in other.texts() if t] == ["b0"]


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_recovered_backlog_deeper_than_one_read_is_replaced_whole(make_run: Callable[..., Run], lazy: bool) -> None:
    """A stored backlog holding several values of a key (their removal not yet written when the process died;
    here: stored before the queue became a last-value queue) keeps only each key's last after the restart,
    however deep: lazy recovery reads a stored backlog 200 rows at a time, and a last-value queue read only the
    first 200 back (found by tests/integration/test_lvq_attacks.py: 500 pipelined SENDs of 10 keys, kill -9
    right after their RECEIPTs, 310 messages came back instead of 10)."""
    run = make_run(BrokerSettings(persistence="sqlite"), lazy_recovery=lazy)
    run.start()
    run.send(*[stored_text("/queue/prices", str(index), properties={LVQ_HEADER: f"k{index % 10}"})
               for index in range(500)])
    run.settle()
    run.crash()
    run.settings = BrokerSettings(persistence="sqlite",
                                  destinations={"/queue/prices": DestinationLimits(last_value=True)})
    broker = run.start()
    sink = StoredSink()
    run.wait(broker.subscribe(_spec("/queue/prices"), sink))
    assert sorted(int(m.text) for m, _ in sink.got) == list(range(490, 500))  # type: ignore[attr-defined]


def test_take_all_takes_a_recovered_backlog_deeper_than_one_read() -> None:
    """:meth:`QueuePage.take_all` takes every paged message, a recovered backlog of more than one read's rows
    (:data:`TAIL_ROWS`) included, in order (it took the first read's only)."""
    page = PageFile(None).queue()
    entries: list[Entry] = [(-4, seq, stored_text("/queue/p", str(seq)), 100) for seq in range(2 * TAIL_ROWS + 50)]
    page.attach(StoredTail(Backlog(entries[:-20]), "/queue/p", len(entries) - 20, 0))
    for entry in entries[-20:]:
        page.add(*entry)
    taken = page.take_all()
    assert [seq for _, seq, _, _ in taken] == [seq for _, seq, _, _ in entries]
    assert page.count == 0


def test_a_purge_takes_a_recovered_backlog_deeper_than_one_read(make_run: Callable[..., Run]) -> None:
    """A purge of a queue whose recovered backlog (lazy recovery) is deeper than one read drops all of it,
    from the store too (it dropped the first 200: the rest came back to consumers)."""
    run = make_run(BrokerSettings(persistence="sqlite"), lazy_recovery=True)
    run.start()
    run.send(*[stored_text("/queue/deep", str(index)) for index in range(450)])
    run.settle()
    broker = run.restart()
    assert run.wait(QueueOperations(broker).purge("/queue/deep")) == 450
    broker = run.restart()
    sink = StoredSink()
    run.wait(broker.subscribe(_spec("/queue/deep"), sink))
    assert sink.got == []
