"""Issue 39: a topic message handed to its subscribers' queues in one pass (``queue.fan_out``).

A topic publish reads the message's conditions (expiration, group) and the broker's memory once
and hands the message to each subscriber queue in the plain state without ``MessageQueue.enqueue``;
every other subscriber queue (paused, full, backlogged, paged, a last-value or shared queue, a
client-ack one without credit) still takes ``enqueue``.  These tests count the calls and check
that each unusual case behaves as before; the last one replays seeded random runs on two brokers,
one with the per-queue ``enqueue`` loop the broker had before, and compares every delivery, count
and byte of memory.  The real embedded broker, in-memory consumers."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.limits import message_size
from gateway.broker.queue import MessageQueue, QueueSubscription
from gateway.broker.settings import BrokerSettings, DestinationLimits
from gateway.interfaces import ISubscription
from gateway.message.model import Message
from tests.unit.test_broker import Refusing, Sink, subscribe, text
from tests.unit.test_store_broker import Run

TOPIC = "/topic/prices"


def _counted(calls: list[str], label: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(label)
        return real(*args, **kwargs)
    return call


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The general path's calls: ``enqueue`` (per queue), ``_hand_over`` and ``take``."""
    return counted_calls(monkeypatch, enqueue=(MessageQueue, "enqueue"), hand_over=(MessageQueue, "_hand_over"),
                         take=(QueueSubscription, "take"))


def counted_calls(monkeypatch: pytest.MonkeyPatch, **targets: tuple[Any, str]) -> list[str]:
    """The labels of the calls to each ``(owner, attribute)`` named, in order (for the test's life)."""
    noted: list[str] = []
    for label, (owner, attribute) in targets.items():
        monkeypatch.setattr(owner, attribute, _counted(noted, label, getattr(owner, attribute)))
    return noted


def make(clock: Clock, **settings: Any) -> EmbeddedBroker:
    broker = EmbeddedBroker(clock, BrokerSettings(**settings))
    broker.start()
    return broker


def bodies(count: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}{n}" for n in range(count)]


def send_all(broker: EmbeddedBroker, names: list[str], **fields: Any) -> None:
    for name in names:
        broker.send(text(TOPIC, name, **fields))


def test_plain_subscribers_get_a_message_without_the_queue_calls(broker: EmbeddedBroker, calls: list[str]) -> None:
    """Ten auto-ack subscribers, 20 messages: no enqueue, _hand_over or take call (200 of each
    before), each subscriber gets all in order with its own tags, and the counts are as before:
    a queue's enqueued and dequeued, the broker's enqueued (per message) and consumed (per delivery)."""
    sinks = [Sink() for _ in range(10)]
    for sink in sinks:
        subscribe(broker, sink, destination=TOPIC)
    consumed = broker.metrics.consumed.count
    send_all(broker, bodies(20))
    assert calls == []
    for sink in sinks:
        assert sink.texts() == bodies(20)
        assert [tag for _, tag in sink.got] == list(range(20)), "each queue's own sequence"
    for queue in broker.topics[TOPIC]:
        assert (queue.enqueued, queue.dequeued, len(queue), queue.memory) == (20, 20, 0, 0)
    assert broker.metrics.enqueued.count == 20 and broker.metrics.consumed.count == consumed + 200
    assert broker.memory.used == 0


def test_a_batch_to_a_topic_is_fanned_out_the_same_way(clock: Clock, broker: EmbeddedBroker,
                                                       calls: list[str]) -> None:
    """A batch (a transaction's COMMIT, a composite destination) reaches the subscribers through
    the broker's _enqueue: the same one pass, an expired message left out and counted, the
    broker's enqueued count per message."""
    sinks = [Sink() for _ in range(3)]
    for sink in sinks:
        subscribe(broker, sink, destination=TOPIC)
    now = broker.now_ms()
    batch: list[Message] = [text(TOPIC, "a"), text(TOPIC, "late", expiration=now - 1), text(TOPIC, "b")]
    broker.send_batch(batch)
    assert calls == [] and all(sink.texts() == ["a", "b"] for sink in sinks)
    assert broker.metrics.enqueued.count == 2 and broker.metrics.expired.count == 1


def test_auto_acknowledged_copies_are_counted_in_one_call(broker: EmbeddedBroker,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto-ack copies of a non-persistent message are counted once per message
    (auto_consumed_copies), not with an auto_consumed call per subscriber; a persistent message's
    copies still meet auto_consumed each (its store removal); the consumed count is the same."""
    asked: list[str] = []
    monkeypatch.setattr(broker, "auto_consumed", _counted(asked, "one", broker.auto_consumed))
    monkeypatch.setattr(broker, "auto_consumed_copies", _counted(asked, "copies", broker.auto_consumed_copies))
    for _ in range(5):
        subscribe(broker, Sink(), destination=TOPIC)
    before = broker.metrics.consumed.count
    send_all(broker, bodies(3))
    assert asked == ["copies"] * 3 and broker.metrics.consumed.count == before + 15
    asked.clear()
    send_all(broker, ["p"], persistent=True)
    assert asked == ["one"] * 5 and broker.metrics.consumed.count == before + 20


def test_the_targets_read_each_subscriber_filter_in_place(broker: EmbeddedBroker,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Choosing a topic message's subscriber queues asks no accepts() call per queue (its test read
    in place); a subscriber's selector still decides."""
    asked: list[str] = []
    monkeypatch.setattr(MessageQueue, "accepts", _counted(asked, "accepts", MessageQueue.accepts))
    every, even = Sink(), Sink()
    subscribe(broker, every, destination=TOPIC)
    subscribe(broker, even, destination=TOPIC, selector="even = TRUE")
    for n in range(4):
        broker.send(text(TOPIC, f"m{n}", properties={"even": n % 2 == 0}))
    assert asked == [] and every.texts() == bodies(4) and even.texts() == ["m0", "m2"]


def test_a_topic_subscriber_selector_still_filters(broker: EmbeddedBroker, calls: list[str]) -> None:
    """A topic subscriber's selector is its queue's filter (applied when the targets are chosen):
    the subscribers whose selector matches get the message on the plain path, the others nothing."""
    every, even = Sink(), Sink()
    subscribe(broker, every, destination=TOPIC)
    subscribe(broker, even, destination=TOPIC, selector="even = TRUE")
    for n in range(6):
        broker.send(text(TOPIC, f"m{n}", properties={"even": n % 2 == 0}))
    assert every.texts() == bodies(6) and even.texts() == ["m0", "m2", "m4"]
    assert calls.count("enqueue") == 3, "only the odd ones, each for one queue (the one-target path as before)"


def test_client_ack_subscribers_are_served_until_their_credit_runs_out(broker: EmbeddedBroker,
                                                                    calls: list[str]) -> None:
    """A client-ack subscriber is handed each message through take while it has credit; past its
    prefetch the message waits in its queue (enqueue) and comes on its ACK; the auto-ack
    subscriber beside it is not held back."""
    auto, client = Sink(), Sink()
    subscribe(broker, auto, destination=TOPIC)
    held = subscribe(broker, client, destination=TOPIC, ack_mode="client-individual", prefetch=2)
    send_all(broker, bodies(4))
    assert auto.texts() == bodies(4) and client.texts() == bodies(2)
    assert calls.count("take") == 2 and calls.count("enqueue") == 2, "the two past the credit wait"
    queue = broker.topics[TOPIC][1]
    assert len(queue) == 2 and [m.message_id for m in queue.consumers[0].unacked.values()] == ["ID:m0", "ID:m1"]
    held.ack([tag for _, tag in client.got])
    assert client.texts() == bodies(4)


def test_a_paused_subscriber_takes_the_general_path_and_catches_up(broker: EmbeddedBroker,
                                                                   calls: list[str]) -> None:
    """A subscriber whose transport is full refuses a delivery: the message goes back to its queue
    (counted once), that queue takes enqueue from then on while the others are served on the plain
    path; on resume it gets everything in order."""
    fast, slow = Sink(), Refusing()
    subscribe(broker, fast, destination=TOPIC)
    slow_sub = subscribe(broker, slow, destination=TOPIC)
    send_all(broker, ["a"])
    slow.full = True
    send_all(broker, ["b", "c", "d"])
    assert fast.texts() == ["a", "b", "c", "d"] and slow.texts() == ["a"]
    assert calls.count("enqueue") == 2, "after the refused b, c and d wait in the paused queue"
    queue = broker.topics[TOPIC][1]
    assert len(queue) == 3 and queue.enqueued == 4 and queue.dequeued == 1
    slow.full = False
    slow_sub.resume()
    assert slow.texts() == ["a", "b", "c", "d"] and [tag for _, tag in slow.got] == [0, 1, 2, 3]
    assert (queue.enqueued, queue.dequeued, len(queue), queue.memory) == (4, 4, 0, 0)


def test_a_subscriber_paused_by_back_pressure_is_not_handed_messages(broker: EmbeddedBroker,
                                                                     calls: list[str]) -> None:
    """A subscription paused by its transport's back-pressure (``pause``, before any refusal) is
    handed nothing: its messages wait in its queue (enqueue) until ``resume``."""
    fast, slow = Sink(), Sink()
    subscribe(broker, fast, destination=TOPIC)
    slow_sub = subscribe(broker, slow, destination=TOPIC)
    slow_sub.pause()
    send_all(broker, bodies(3))
    assert fast.texts() == bodies(3) and slow.texts() == [] and calls.count("enqueue") == 3
    slow_sub.resume()
    assert slow.texts() == bodies(3)


def test_a_full_memory_sends_every_subscriber_the_general_way(clock: Clock) -> None:
    """A paused subscriber fills the broker's memory: once the limit is reached, every queue takes
    enqueue (the message is paged where it does not fit); nothing is lost or reordered, memory
    stays within its limit (and one message), and the active subscriber keeps receiving."""
    one = message_size(text(TOPIC, "m00"))
    broker = make(clock, memory_limit=5 * one)
    fast, slow = Sink(), Refusing()
    subscribe(broker, fast, destination=TOPIC)
    slow_sub = subscribe(broker, slow, destination=TOPIC)
    slow.full = True
    names = [f"m{n:02}" for n in range(20)]
    send_all(broker, names)
    assert fast.texts() == names and slow.texts() == []
    assert broker.memory.used <= broker.memory.limit + one and broker.topics[TOPIC][1].paged > 0
    slow.full = False
    slow_sub.resume()
    for _ in range(50):
        clock.advance(0)
    assert slow.texts() == names and broker.memory.used == 0


def test_a_subscriber_over_its_max_size_pages(clock: Clock) -> None:
    """A topic's max_size applies to each subscriber queue: a message larger than it is not handed
    over but held and paged by the general path, then delivered."""
    broker = make(clock, destinations={"/topic/prices": DestinationLimits(max_size=50)})
    sinks = [Sink(), Sink()]
    for sink in sinks:
        subscribe(broker, sink, destination=TOPIC)
    send_all(broker, ["x" * 200, "small"])
    for _ in range(10):
        clock.advance(0)
    assert all(sink.texts() == ["x" * 200, "small"] for sink in sinks)


def test_an_expiring_message_takes_the_general_path(clock: Clock, broker: EmbeddedBroker, calls: list[str]) -> None:
    """A message with an expiration goes through enqueue in every queue (its expiry is checked
    there, as before); one expired while waiting in a paused queue is dropped and counted."""
    fast, slow = Sink(), Refusing()
    subscribe(broker, fast, destination=TOPIC)
    slow_sub = subscribe(broker, slow, destination=TOPIC)
    now = broker.now_ms()
    send_all(broker, ["soon"], expiration=now + 1000)
    assert calls.count("enqueue") == 2 and fast.texts() == ["soon"] and slow.texts() == ["soon"]
    slow.full = True
    send_all(broker, ["gone"], expiration=now + 1000)
    clock.advance(2)
    slow.full = False
    slow_sub.resume()
    assert fast.texts() == ["soon", "gone"] and slow.texts() == ["soon"]
    assert broker.topics[TOPIC][1].expired_count == 1


def virtual_topic_with_two_consumers(clock: Clock) -> tuple[EmbeddedBroker, str, tuple[Sink, Sink, Sink]]:
    """A virtual topic with a plain subscriber and one consumer queue that two consumers share."""
    broker = make(clock)
    plain, a1, a2 = Sink(), Sink(), Sink()
    vt = "/topic/VirtualTopic.prices"
    subscribe(broker, plain, destination=vt)
    subscribe(broker, a1, destination="/queue/Consumer.A.VirtualTopic.prices")
    subscribe(broker, a2, destination="/queue/Consumer.A.VirtualTopic.prices")
    return broker, vt, (plain, a1, a2)


def test_a_grouped_message_takes_the_general_path(clock: Clock, calls: list[str]) -> None:
    """A message with a JMSXGroupID goes through enqueue everywhere: a virtual topic's consumer
    queue assigns the group to one of its consumers (JMSXGroupFirstForConsumer on the first)."""
    broker, vt, (plain, a1, a2) = virtual_topic_with_two_consumers(clock)
    for n in range(4):
        broker.send(text(vt, f"g{n}", properties={"JMSXGroupID": "G"}))
    assert calls.count("enqueue") == 8
    assert plain.texts() == bodies(4, "g")
    owner = a1 if a1.got else a2
    assert owner.texts() == bodies(4, "g") and not (a2 if owner is a1 else a1).got, "one consumer owns the group"
    assert owner.got[0][0].properties.get("JMSXGroupFirstForConsumer") is True


def test_a_shared_queue_of_a_virtual_topic_takes_the_general_path(clock: Clock, calls: list[str]) -> None:
    """A virtual topic's consumer queue with two consumers shares its copies in turn (enqueue);
    the topic's own subscriber beside it is served on the plain path."""
    broker, vt, (plain, a1, a2) = virtual_topic_with_two_consumers(clock)
    for n in range(4):
        broker.send(text(vt, f"m{n}"))
    assert calls.count("enqueue") == 4, "the shared queue's only"
    assert plain.texts() == bodies(4) and a1.texts() == ["m0", "m2"] and a2.texts() == ["m1", "m3"]


def test_a_last_value_subscriber_queue_takes_the_general_path(clock: Clock, calls: list[str]) -> None:
    """A topic under a last_value policy: each subscriber queue keeps its last-value index, so
    enqueue; a paused subscriber gets only the newest message of a key on resume."""
    broker = make(clock, destinations={"/topic/prices": DestinationLimits(last_value=True)})
    fast, slow = Sink(), Refusing()
    subscribe(broker, fast, destination=TOPIC)
    slow_sub = subscribe(broker, slow, destination=TOPIC)
    slow.full = True
    for n in range(3):
        broker.send(text(TOPIC, f"v{n}", properties={"_AMQ_LVQ_NAME": "k"}))
    assert calls.count("enqueue") == 6 and fast.texts() == bodies(3, "v")
    slow.full = False
    slow_sub.resume()
    assert slow.texts() == ["v2"]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path, BrokerSettings(persistence="sqlite"), lazy_recovery=True)
    run.start()
    yield run
    run.close()


def durable_backlog(run: Run, durable_spec: dict[str, str], restart: bool) -> tuple[EmbeddedBroker, Sink, Sink]:
    """A durable subscription left with three stored persistent messages (the broker restarted
    or not) and a plain subscriber on the topic; returns the broker, the plain sink and the sink
    for the durable's return."""
    run.subscribe(Sink(), **durable_spec).close()  # type: ignore[arg-type]  # (test_broker's Sink: the same shape)
    run.send(*[text(TOPIC, name, persistent=True) for name in bodies(3, "old")])
    broker = run.restart() if restart else run.broker
    assert broker is not None
    plain, back = Sink(), Sink()
    run.subscribe(plain, destination=TOPIC)  # type: ignore[arg-type]  # (test_broker's Sink: the same shape)
    return broker, plain, back


@pytest.mark.parametrize("restart", [False, True], ids=["held", "paged-after-restart"])
def test_a_durable_subscriber_with_a_backlog_takes_the_general_path(run: Run, calls: list[str],
                                                                    restart: bool) -> None:
    """A durable subscriber that comes back to a stored backlog of persistent messages (in memory,
    or left in the store after a restart, read back as its page): the new (non-persistent) messages
    wait behind it (enqueue, one per message), it gets them all in order; the non-durable
    subscriber beside it is served on the plain path."""
    durable_spec = {"destination": TOPIC, "durable_name": "d", "client_id": "c"}
    broker, plain, back = durable_backlog(run, durable_spec, restart)
    sub = run.subscribe(back, **durable_spec, ack_mode="client-individual", prefetch=1)  # type: ignore[arg-type]  # (test_broker's Sink: the same shape)
    assert back.texts() == ["old0"]
    calls.clear()
    for name in bodies(2, "new"):
        broker.send(text(TOPIC, name))
    assert plain.texts() == bodies(2, "new") and calls.count("enqueue") == 2, "the durable's two"
    for _ in range(6):
        sub.ack([back.got[-1][1]])
        run.settle()
    assert back.texts() == [*bodies(3, "old"), *bodies(2, "new")]


@pytest.mark.parametrize("restart", [False, True], ids=["held", "paged-after-restart"])
def test_a_subscriber_whose_backlog_waits_for_the_store_keeps_its_order(run: Run, restart: bool) -> None:
    """An auto-ack durable subscriber with credit whose backlog (in memory, or its page after a
    restart) waits while the store is behind with removals (``removals_held``): a new message is
    not handed over ahead of that backlog but queued behind it, and comes after it once the store
    caught up."""
    durable_spec = {"destination": TOPIC, "durable_name": "d", "client_id": "c"}
    broker, plain, back = durable_backlog(run, durable_spec, restart)
    broker.removals_held = True
    run.subscribe(back, **durable_spec)  # type: ignore[arg-type]  # (test_broker's Sink: the same shape)
    assert back.texts() == []
    broker.send(text(TOPIC, "new"))
    assert plain.texts() == ["new"] and back.texts() == []
    broker.removals_held = False
    broker.durables["durable:c:d"].dispatch()
    assert back.texts() == [*bodies(3, "old"), "new"]


# -- the same outcomes as the per-queue loop, on seeded random runs ---------------------------


def _per_queue(queues: list[MessageQueue], message: Message, size: int) -> None:
    """The broker's fan-out before issue 39's change: one enqueue per subscriber queue."""
    for queue in queues:
        queue.enqueue(message, size)


class BrokerReplay:
    """One broker driven by the operations of a seeded run (``_steps``): subscribe, send, a consumer
    full or not, ack the oldest unacked, close, time passes. ``patch``, when given, is applied around
    each step (the code before a change, to compare with)."""

    def __init__(self, clock: Clock, broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch,
                 patch: Callable[[pytest.MonkeyPatch], None] | None) -> None:
        self.clock = clock
        self.broker = broker
        self.monkeypatch = monkeypatch
        self.patch = patch
        self.sinks: list[Refusing] = []
        self.subscriptions: list[ISubscription] = []

    def do(self, step: tuple[Any, ...]) -> None:
        if self.patch is not None:
            self.patch(self.monkeypatch)
        try:
            self._do(step)
        finally:
            self.monkeypatch.undo()

    def _do(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind == "subscribe":
            _, destination, spec = step
            sink = Refusing()
            self.sinks.append(sink)
            self.subscriptions.append(subscribe(self.broker, sink, destination=destination, **spec))
        elif kind == "send":
            _, destination, name, fields = step
            self.broker.send(text(destination, name, **fields))
        elif kind == "full":
            _, index, full = step
            self.sinks[index].full = full
            if not full:
                self.subscriptions[index].resume()
        elif kind == "ack":
            unacked = getattr(self.subscriptions[step[1]], "unacked", {})
            if unacked:
                self.subscriptions[step[1]].ack([next(iter(unacked))])
        elif kind == "close":
            self.subscriptions[step[1]].close()
        elif kind == "time":
            self.clock.advance(step[1])


class Replay(BrokerReplay):
    """A topic broker; without ``fan_out``, with the per-queue loop."""

    def __init__(self, fan_out: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        clock = Clock()
        clock.advance(1_000_000)
        broker = make(clock, memory_limit=12 * message_size(text(TOPIC, "m000")),
                      destinations={"/topic/small": DestinationLimits(max_size=300)})
        super().__init__(clock, broker, monkeypatch,
                         None if fan_out else lambda patch: patch.setattr("gateway.broker.broker.fan_out", _per_queue))

    def outcome(self) -> Any:
        deliveries = [[(m.message_id, tag, m.redelivered, dict(m.properties)) for m, tag in s.got] for s in self.sinks]
        queues: list[tuple[Any, ...]]
        queues = sorted((q.name, q.key, q.enqueued, q.dequeued, q.expired_count, len(q), q.memory, q.paged, q.paged_out)
                        for subscribers in self.broker.topics.values() for q in subscribers)
        queues += sorted((q.name, q.enqueued, q.dequeued, len(q), q.memory) for q in self.broker.queues.values())
        metrics = self.broker.metrics
        counts = (metrics.enqueued.count, metrics.consumed.count, self.broker.memory.used)
        return deliveries, queues, counts


def _steps(seed: int, count: int) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    subscribers = 0
    topics = [TOPIC, "/topic/small", "/topic/VirtualTopic.v"]
    for n in range(count):
        roll = rng.random()
        if roll < 0.08 or subscribers < 3:
            topic = rng.choice([*topics, "/queue/Consumer.A.VirtualTopic.v", "/topic/>"])
            spec: dict[str, Any] = {}
            if rng.random() < 0.3:
                spec.update(ack_mode="client-individual", prefetch=rng.randint(1, 3))
            if rng.random() < 0.2 and topic.startswith("/topic/"):
                spec["selector"] = "k <> 0"
            if rng.random() < 0.15 and topic.startswith("/topic/") and ">" not in topic:
                spec.update(durable_name=f"d{n}", client_id="c")
            subscribers += 1
            yield "subscribe", topic, spec
        elif roll < 0.6:
            fields: dict[str, Any] = {"properties": {"k": n % 3}, "priority": rng.choice([4, 4, 4, 7])}
            if rng.random() < 0.1:
                fields["expiration"] = 1_000_000_000 + rng.randint(1, 30)
            if rng.random() < 0.1:
                fields["properties"]["JMSXGroupID"] = rng.choice(["g1", "g2"])
            if rng.random() < 0.05:
                fields["properties"]["_AMQ_LVQ_NAME"] = "k"
            size = "x" * rng.choice([3, 3, 3, 120])
            yield "send", rng.choice(topics), f"m{n:04}{size}", fields
        elif roll < 0.72:
            yield "full", rng.randrange(subscribers), rng.random() < 0.5
        elif roll < 0.9:
            yield "ack", rng.randrange(subscribers)
        elif roll < 0.93:
            yield "close", rng.randrange(subscribers)
        else:
            yield "time", rng.choice([0, 0.005, 0.02])


@pytest.mark.parametrize("seed", range(8))
def test_seeded_runs_match_the_per_queue_loop(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Subscribers come and go (auto and client acks, selectors, durable ones, a wildcard, a virtual
    topic's shared queue), pause and resume, ack; messages with priorities, expirations, groups,
    last-value keys and sizes past a max_size and the memory limit: every delivery (id, tag,
    redelivered flag, properties), every queue's counts and memory, and the broker's counts are
    those of the per-queue enqueue loop."""
    plain = Replay(True, monkeypatch)
    before = Replay(False, monkeypatch)
    for step in _steps(seed, 600):
        plain.do(step)
        before.do(step)
    assert plain.outcome() == before.outcome()
    assert sum(len(sink.got) for sink in plain.sinks) > 300, "the run delivers"
