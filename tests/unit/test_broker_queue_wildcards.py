"""Wildcard queue subscriptions on the embedded broker (issue 37, gateway/broker/queue_wildcards.py)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.limits import message_size
from gateway.broker.settings import BrokerSettings
from gateway.interfaces import IImmediateAcks, ISubscription, ITransactionalAcks
from tests.unit.test_broker import Sink, subscribe, text
from tests.unit.test_store_broker import Run
from tests.unit.test_store_broker import Sink as StoredSink
from tests.unit.test_store_broker import text as stored_text


def shown(sink: Sink) -> list[tuple[str, str]]:
    return [(m.destination, t) for (m, _), t in zip(sink.got, sink.texts(), strict=True)]


def test_a_wildcard_consumes_from_existing_and_later_queues_that_match(broker: EmbeddedBroker) -> None:
    broker.send(text("/queue/orders.eu", "before"))
    broker.send(text("/queue/other.eu", "not"))
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/orders.>")
    verifyObject(ISubscription, subscription)
    assert IImmediateAcks.providedBy(subscription) and ITransactionalAcks.providedBy(subscription)
    broker.send(text("/queue/orders.us.west", "later"))
    broker.send(text("/queue/orders", "bare"))  # (ActiveMQ's orders.> matches orders too)
    broker.send(text("/topic/orders.eu", "a topic"))
    assert sorted(shown(sink)) == [("/queue/orders", "bare"), ("/queue/orders.eu", "before"),
                                   ("/queue/orders.us.west", "later")]
    assert len(broker.queues["/queue/other.eu"]) == 1


def test_one_segment_wildcard(broker: EmbeddedBroker) -> None:
    sink = Sink()
    subscribe(broker, sink, destination="/queue/orders.*.eu")
    for name in ("orders.a.eu", "orders.a.us", "orders.a.b.eu", "orders.eu"):
        broker.send(text(f"/queue/{name}", name))
    assert sink.texts() == ["orders.a.eu"]


def test_each_message_goes_to_one_consumer_of_its_queue(broker: EmbeddedBroker) -> None:
    wild, plain = Sink(), Sink()
    subscribe(broker, wild, destination="/queue/jobs.>")
    subscribe(broker, plain, destination="/queue/jobs.a")
    for i in range(10):
        broker.send(text("/queue/jobs.a", f"a{i}"))
        broker.send(text("/queue/jobs.b", f"b{i}"))
    got = wild.texts() + plain.texts()
    assert sorted(got) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])
    assert len(got) == 20 and plain.texts() and [t for t in wild.texts() if t.startswith("a")]
    assert all(t.startswith("a") for t in plain.texts())


def test_the_prefetch_counts_all_its_queues_together(broker: EmbeddedBroker) -> None:
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/p.>", ack_mode="client-individual", prefetch=2)
    for name in ("p.a", "p.b", "p.c", "p.d"):
        broker.send(text(f"/queue/{name}", name))
    assert len(sink.got) == 2
    subscription.ack([sink.got[0][1]])
    assert len(sink.got) == 3
    subscription.ack([tag for _, tag in sink.got[1:]])
    assert sorted(sink.texts()) == ["p.a", "p.b", "p.c", "p.d"]
    assert all(len(queue) == 0 for queue in broker.queues.values())


def test_nack_and_close_give_messages_back_to_their_own_queue(broker: EmbeddedBroker) -> None:
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/n.>", ack_mode="client-individual", prefetch=10)
    broker.send(text("/queue/n.a", "a"))
    broker.send(text("/queue/n.b", "b"))
    tag_a = next(tag for m, tag in sink.got if m.destination == "/queue/n.a")
    subscription.nack([tag_a])
    again = sink.got[-1][0]
    assert again.destination == "/queue/n.a" and again.redelivered and len(sink.got) == 3
    subscription.close()
    later, plain_b = Sink(), Sink()
    subscribe(broker, later, destination="/queue/n.a")
    subscribe(broker, plain_b, destination="/queue/n.b")
    assert later.texts() == ["a"] and plain_b.texts() == ["b"]
    assert later.got[0][0].redelivered and plain_b.got[0][0].redelivered
    broker.send(text("/queue/n.c", "after close"))
    assert len(sink.got) == 3  # (a closed wildcard does not join new queues)
    assert not broker.destinations.queue_wildcards


def test_a_selector_applies_on_every_queue(broker: EmbeddedBroker) -> None:
    sink = Sink()
    subscribe(broker, sink, destination="/queue/s.>", selector="n > 1")
    for n in range(4):
        broker.send(text(f"/queue/s.q{n % 2}", f"m{n}", properties={"n": n}))
    assert sorted(sink.texts()) == ["m2", "m3"]
    assert len(broker.queues["/queue/s.q0"]) == 1 and len(broker.queues["/queue/s.q1"]) == 1


def test_acks_held_by_a_transaction_free_credit_and_settle_at_commit(broker: EmbeddedBroker) -> None:
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/t.>", ack_mode="client-individual", prefetch=1)
    broker.send(text("/queue/t.a", "a"))
    broker.send(text("/queue/t.b", "b"))
    assert sink.texts() == ["a"]
    assert ITransactionalAcks.providedBy(subscription)
    cast(ITransactionalAcks, subscription).hold([sink.got[0][1]])  # (ACK inside BEGIN ... COMMIT)
    assert sink.texts() == ["a", "b"]
    subscription.close()
    subscription.ack([sink.got[0][1]])  # (the COMMIT after the subscription closed)
    assert len(broker.queues["/queue/t.a"]) == 0 and len(broker.queues["/queue/t.b"]) == 1


def test_a_paged_backlog_drains_to_a_wildcard_consumer(clock: Clock) -> None:
    one = message_size(text("/queue/big.x", "m000"))
    paged = EmbeddedBroker(clock, BrokerSettings(memory_limit=8 * one))
    paged.start()
    for i in range(40):
        paged.send(text(f"/queue/big.q{i % 2}", f"m{i:03}"))
    assert paged.queues["/queue/big.q0"].paged > 5
    sink = Sink()
    subscribe(paged, sink, destination="/queue/big.>")
    assert sorted(sink.texts()) == [f"m{i:03}" for i in range(40)]
    assert all(len(queue) == 0 and queue.paged == 0 for queue in paged.queues.values())


def test_a_deleted_queue_leaves_the_wildcard_working(broker: EmbeddedBroker) -> None:
    sink = Sink()
    subscribe(broker, sink, destination="/queue/d.>")
    broker.send(text("/queue/d.a", "a"))
    broker.delete_destination("/queue/d.a")
    broker.send(text("/queue/d.b", "b"))
    assert sink.texts() == ["a", "b"] and sink.failed == []


def test_persistent_messages_recovered_after_a_restart_drain_and_are_acknowledged(tmp_path: Path) -> None:
    run = Run(tmp_path, BrokerSettings())
    run.start()
    try:
        run.send(*(stored_text(f"/queue/{name}", name) for name in ("r.a", "r.b", "other")))
        run.restart()
        sink = StoredSink()
        subscription = run.subscribe(sink, destination="/queue/r.>", ack_mode="client-individual")
        assert sorted(sink.texts()) == ["r.a", "r.b"]
        run.wait(subscription.ack([tag for _, tag in sink.got]))
        broker = run.restart()
        assert len(broker.destinations.queue("/queue/r.a")) == 0 and len(broker.queues["/queue/other"]) == 1
    finally:
        run.close()


def test_the_expiry_sweep_skips_backlogs_without_expirations_and_still_finds_later_ones(
    broker: EmbeddedBroker, clock: Clock
) -> None:
    for i in range(3):
        broker.send(text("/queue/x.a", f"keep{i}"))
    assert broker.purge_expired() == 0
    now = broker.now_ms()
    broker.send(text("/queue/x.a", "short", expiration=now + 1000))
    sink = Sink()
    subscription = subscribe(broker, sink, destination="/queue/x.>", ack_mode="client-individual", prefetch=1)
    subscription.nack([sink.got[0][1]])  # (a put-back message with an expiration counts too)
    clock.advance(2)  # (the broker's sweep runs every second)
    assert len(broker.queues["/queue/x.a"]) == 2 and broker.queues["/queue/x.a"].expired_count == 1  # (+1 in flight)
    assert "short" not in sink.texts()


def test_a_virtual_topics_copies_show_their_consumer_queue(broker: EmbeddedBroker) -> None:
    """A wildcard consumer of virtual topics' consumer queues is handed each copy under its consumer queue's
    name, as a plain subscription to that queue shows it (the copy named the topic: its MESSAGE showed
    ``/topic/VirtualTopic.…``; found by tests/integration/test_composite_virtual_attacks.py)."""
    for name in ("/queue/Consumer.A.VirtualTopic.one", "/queue/Consumer.A.VirtualTopic.two"):
        broker.destinations.queue(name)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/Consumer.A.VirtualTopic.>", ack_mode="client-individual")
    broker.send(text("/topic/VirtualTopic.one", "1"))
    broker.send(text("/topic/VirtualTopic.two", "2"))
    broker.send(text("/queue/Consumer.A.VirtualTopic.two", "direct"))
    assert sorted(shown(sink)) == [("/queue/Consumer.A.VirtualTopic.one", "1"),
                                   ("/queue/Consumer.A.VirtualTopic.two", "2"),
                                   ("/queue/Consumer.A.VirtualTopic.two", "direct")]
