"""Issue 39: a queue message handed to the queue's only auto-ack consumer in one step.

``MessageQueue.enqueue`` delivers a message to a queue's only consumer, an auto-ack one with credit
and no selector, itself (no ``_hand_over``, no ``QueueSubscription.take``) when nothing is pending
and the message has no expiration or group and fits in memory; every other case keeps the general
path.  These tests count the calls, check that each unusual case behaves as before, and replay
seeded random runs on two brokers, one with the ``enqueue`` the broker had before, comparing every
delivery, count and byte of memory.  The real embedded broker, in-memory consumers."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.limits import message_size
from gateway.broker.queue import MessageQueue, QueueSubscription
from gateway.broker.settings import DestinationLimits
from gateway.message.model import Message
from gateway.stomp.delivery import MessageEncoder
from gateway.stomp.session import StompSession
from tests.unit.test_broker import Refusing, Sink, subscribe, text
from tests.unit.test_session import Peer, connect, make_factory
from tests.unit.test_topic_hand_over import BrokerReplay, _counted, bodies, counted_calls, make

QUEUE = "/queue/work"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The general path's calls: ``_hand_over``, ``take`` and ``dispatch``."""
    return counted_calls(monkeypatch, hand_over=(MessageQueue, "_hand_over"), take=(QueueSubscription, "take"),
                         dispatch=(MessageQueue, "dispatch"))


def send_all(broker: EmbeddedBroker, names: list[str], destination: str = QUEUE, **fields: Any) -> None:
    for name in names:
        broker.send(text(destination, name, **fields))


def test_an_auto_consumer_gets_a_message_without_the_hand_over_calls(broker: EmbeddedBroker,
                                                                     calls: list[str]) -> None:
    """One auto-ack consumer, 20 messages: no _hand_over, take or dispatch call (20 _hand_over and
    20 take before); the consumer gets all in order with the queue's tags, and the counts are as
    before: the queue's enqueued and dequeued, the broker's enqueued and consumed."""
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    calls.clear()  # (the subscription's own dispatch)
    consumed = broker.metrics.consumed.count
    send_all(broker, bodies(20))
    assert calls == []
    assert sink.texts() == bodies(20)
    assert [tag for _, tag in sink.got] == list(range(20))
    queue = broker.queues[QUEUE]
    assert (queue.enqueued, queue.dequeued, len(queue), queue.memory) == (20, 20, 0, 0)
    assert broker.metrics.enqueued.count == 20 and broker.metrics.consumed.count == consumed + 20
    assert broker.memory.used == 0


def test_a_persistent_message_still_meets_auto_consumed(broker: EmbeddedBroker,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A delivered message is consumed through the owner's auto_consumed (a persistent one's store
    removal), once a delivery."""
    asked: list[str] = []
    monkeypatch.setattr(broker, "auto_consumed", _counted(asked, "auto", broker.auto_consumed))
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    send_all(broker, ["a"], persistent=True)
    send_all(broker, ["b"])
    assert asked == ["auto", "auto"] and sink.texts() == ["a", "b"]


def test_a_client_ack_consumer_takes_the_general_path(broker: EmbeddedBroker, calls: list[str]) -> None:
    """A client-ack consumer: _hand_over and take as before, until its prefetch is used."""
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE, ack_mode="client-individual", prefetch=2)
    send_all(broker, bodies(3))
    assert calls.count("hand_over") == 3 and calls.count("take") == 2
    assert sink.texts() == bodies(2) and len(broker.queues[QUEUE]) == 1


def test_a_consumer_selector_takes_the_general_path(broker: EmbeddedBroker, calls: list[str]) -> None:
    """A selector decides in _hand_over (a refused message waits in the queue)."""
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE, selector="k = 1")
    send_all(broker, ["yes"], properties={"k": 1})
    send_all(broker, ["no"], properties={"k": 2})
    assert calls.count("hand_over") == 2 and sink.texts() == ["yes"]
    assert len(broker.queues[QUEUE]) == 1


def test_two_consumers_share_round_robin(broker: EmbeddedBroker) -> None:
    """Two consumers: the dispatch loop, round-robin, as before."""
    first, second = Sink(), Sink()
    subscribe(broker, first, destination=QUEUE)
    subscribe(broker, second, destination=QUEUE)
    send_all(broker, bodies(4))
    assert first.texts() == ["m0", "m2"] and second.texts() == ["m1", "m3"]


def test_an_expiring_message_takes_the_general_path(clock: Clock, broker: EmbeddedBroker, calls: list[str]) -> None:
    """A message with an expiration goes through _add and dispatch (which check it)."""
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    send_all(broker, ["soon"], expiration=broker.now_ms() + 10_000)
    assert "hand_over" in calls and "dispatch" in calls and sink.texts() == ["soon"]


def test_a_grouped_message_takes_the_general_path(broker: EmbeddedBroker, calls: list[str]) -> None:
    """A message with a JMSXGroupID is assigned its group by the dispatch loop, as before."""
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    send_all(broker, ["g"], properties={"JMSXGroupID": "orders"})
    assert "hand_over" in calls and sink.texts() == ["g"]
    assert sink.got[0][0].properties.get("JMSXGroupFirstForConsumer") is True


def test_a_refusing_consumer_gets_the_message_after_resume(broker: EmbeddedBroker, calls: list[str]) -> None:
    """The GlassFish rule: a consumer whose transport is full refuses; the message goes back to its
    place uncounted, the consumer pauses, later messages queue behind it (general path) and all come,
    in order, after resume."""
    sink = Refusing()
    subscription = subscribe(broker, sink, destination=QUEUE)
    calls.clear()  # (the subscription's own dispatch)
    sink.full = True
    send_all(broker, ["a"])
    queue = broker.queues[QUEUE]
    assert calls == ["dispatch"], "refused: put back, then the dispatch a take is followed by"
    assert len(queue) == 1 and queue.dequeued == 0 and queue.consumers[0].paused
    send_all(broker, ["b"])
    assert calls.count("hand_over") == 0 and len(queue) == 2, "behind the held message: no hand-over"
    sink.full = False
    subscription.resume()
    assert sink.texts() == ["a", "b"] and [tag for _, tag in sink.got] == [0, 1]
    assert (queue.enqueued, queue.dequeued, queue.memory, broker.memory.used) == (2, 2, 0, 0)


def test_a_full_memory_keeps_the_general_path(clock: Clock, calls: list[str]) -> None:
    """A message the broker's memory has no room for (another queue holds it) takes _hand_over's
    path: paged out, read back and delivered, as before; nothing is lost or reordered."""
    broker = make(clock, memory_limit=3 * message_size(text(QUEUE, "m0")))
    send_all(broker, bodies(4, "idle"), destination="/queue/idle")
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    calls.clear()
    send_all(broker, bodies(3))
    clock.advance(1)
    queue = broker.queues[QUEUE]
    assert calls.count("hand_over") == 3 and queue.paged_out == 3
    assert sink.texts() == bodies(3) and queue.memory == 0


def test_a_message_over_max_size_is_not_handed_over(clock: Clock, calls: list[str]) -> None:
    """A message larger than the queue's max_size is paged (as _hand_over refuses it), then delivered."""
    broker = make(clock, destinations={QUEUE: DestinationLimits(max_size=100)})
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    send_all(broker, ["x" * 200])
    clock.advance(1)
    assert "hand_over" in calls and sink.texts() == ["x" * 200]



def test_a_send_to_an_existing_queue_asks_no_targets_call(broker: EmbeddedBroker,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker finds an existing queue itself (Destinations.targets' first case); a new queue,
    a topic and an unknown destination still ask targets (which makes the queue, finds the
    subscribers, refuses a destination it does not know)."""
    asked: list[str] = []
    destinations = broker.destinations
    monkeypatch.setattr(destinations, "targets", _counted(asked, "targets", destinations.targets))
    sink = Sink()
    subscribe(broker, sink, destination=QUEUE)
    send_all(broker, bodies(3))
    assert asked == [] and sink.texts() == bodies(3)
    send_all(broker, ["new"], destination="/queue/new")
    send_all(broker, ["t"], destination="/topic/t")
    refused: list[Any] = []
    broker.send(text("/temp-queue/gone", "x")).addErrback(refused.append)
    assert asked == ["targets"] * 3 and len(broker.queues["/queue/new"]) == 1
    assert len(refused) == 1, "refused, as before"

# -- the same outcomes as the enqueue before, on seeded random runs ---------------------------


def _enqueue_before(self: MessageQueue, message: Message, size: int = 0) -> None:
    """``MessageQueue.enqueue`` before issue 39's one-step hand-over."""
    if self.last_values is not None:
        replaced = self.last_values.replace(message)
        if replaced is not None:
            for old in self.remove_pending({replaced}):
                self.owner.replaced(self, old)
    entry = (-message.priority, next(self._seq), message, size or message_size(message))
    self.enqueued += 1
    if len(self.consumers) == 1 and not self._heap and self._hand_over(entry):
        return
    self._add(entry)
    if self.consumers:
        self.dispatch()


QUEUES = [QUEUE, "/queue/small", "/queue/last"]
IDLE = "/queue/idle"
"""A queue no one consumes: its messages hold the broker's memory."""


class Replay(BrokerReplay):
    """A queue broker; without ``one_step``, with the ``enqueue`` before."""

    def __init__(self, one_step: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        clock = Clock()
        clock.advance(1_000_000)
        broker = make(clock, memory_limit=12 * message_size(text(QUEUE, "m000")),
                      destinations={"/queue/small": DestinationLimits(max_size=300),
                                    "/queue/last": DestinationLimits(last_value=True)})
        super().__init__(clock, broker, monkeypatch,
                         None if one_step else lambda patch: patch.setattr(MessageQueue, "enqueue", _enqueue_before))

    def outcome(self) -> Any:
        deliveries = [[(m.message_id, tag, m.redelivered, dict(m.properties)) for m, tag in s.got] for s in self.sinks]
        queues = sorted((q.name, q.enqueued, q.dequeued, q.expired_count, len(q), q.memory, q.paged, q.paged_out)
                        for q in self.broker.queues.values())
        metrics = self.broker.metrics
        counts = (metrics.enqueued.count, metrics.consumed.count, metrics.expired.count, self.broker.memory.used)
        return deliveries, queues, counts


def _steps(seed: int, count: int) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    subscribers = 0
    for n in range(count):
        roll = rng.random()
        if roll < 0.05 or subscribers < 1:
            spec: dict[str, Any] = {}
            if rng.random() < 0.3:
                spec.update(ack_mode=rng.choice(["client", "client-individual"]), prefetch=rng.randint(1, 3))
            if rng.random() < 0.15:
                spec["selector"] = "k <> 0"
            subscribers += 1
            yield "subscribe", rng.choice(QUEUES), spec
        elif roll < 0.65:
            fields: dict[str, Any] = {"properties": {"k": n % 3}, "priority": rng.choice([4, 4, 4, 7])}
            if rng.random() < 0.2:
                fields["persistent"] = True
            if rng.random() < 0.1:
                fields["expiration"] = 1_000_000_000 + rng.randint(1, 30)
            if rng.random() < 0.1:
                fields["properties"]["JMSXGroupID"] = rng.choice(["g1", "g2"])
            if rng.random() < 0.1:
                fields["properties"]["_AMQ_LVQ_NAME"] = rng.choice(["a", "b"])
            size = "x" * rng.choice([3, 3, 3, 120])
            yield "send", rng.choice([*QUEUES, IDLE]), f"m{n:04}{size}", fields
        elif roll < 0.77:
            yield "full", rng.randrange(subscribers), rng.random() < 0.5
        elif roll < 0.92:
            yield "ack", rng.randrange(subscribers)
        elif roll < 0.95:
            yield "close", rng.randrange(subscribers)
        else:
            yield "time", rng.choice([0, 0.005, 0.02, 1.5])


@pytest.mark.parametrize("seed", range(8))
def test_seeded_runs_match_the_enqueue_before(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Consumers come and go (auto and client acks, selectors, several on a queue), pause and resume,
    ack; messages persistent or not, with priorities, expirations, groups, last-value keys and sizes
    past a max_size and the memory limit: every delivery (id, tag, redelivered flag, properties), every
    queue's counts and memory, and the broker's counts are those of the enqueue before."""
    one_step = Replay(True, monkeypatch)
    before = Replay(False, monkeypatch)
    for step in _steps(seed, 600):
        one_step.do(step)
        before.do(step)
    assert one_step.outcome() == before.outcome()
    assert sum(len(sink.got) for sink in one_step.sinks) > 200, "the run delivers"


# -- the MESSAGE side ---------------------------------------------------------------------------


def test_encoding_leaves_the_encoder_class_unchanged() -> None:
    """The last message's encoded parts are kept outside MessageEncoder's class: a class attribute
    assigned once a delivery made CPython drop its cached look-ups of the encoders' attributes
    (the session reads ``encoder.version``, ``encoder.destination``, ``encoder.encode`` each
    delivery).  The parts are still used again for the same message (a topic's fan-out)."""
    before = dict(vars(MessageEncoder))
    first, second = MessageEncoder("s1", QUEUE, "1.2"), MessageEncoder("s2", QUEUE, "1.2")
    message = text(QUEUE, "hello")
    one = first.encode(message, None)
    two = second.encode(message, None)
    assert dict(vars(MessageEncoder)) == before
    assert one is not None and two is not None
    assert one.replace(b"subscription:s1", b"subscription:s2") == two
    assert one.endswith(b"\n\nhello\x00") and one.startswith(b"MESSAGE\ndestination:/queue/work\n")


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session's general MESSAGE writer's calls (``StompSession._write_delivery``)."""
    noted: list[str] = []
    monkeypatch.setattr(StompSession, "_write_delivery",
                        _counted(noted, "write", StompSession._write_delivery))
    return noted


def _session_pair(clock: Clock, broker: EmbeddedBroker, **subscribe_headers: str) -> tuple[Peer, Peer]:
    factory = make_factory(clock, broker)
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer, **{"heart-beat": "0,0"})
    connect(producer)
    consumer.send("SUBSCRIBE", {"destination": QUEUE, "id": "s1", **subscribe_headers})
    return consumer, producer


def test_an_auto_delivery_is_written_without_the_general_writer(clock: Clock, broker: EmbeddedBroker,
                                                                writes: list[str]) -> None:
    """An auto subscription's MESSAGEs after its first (which makes its encoder) are written by
    StompSession.deliver itself: no _write_delivery call; the frames are as before."""
    consumer, producer = _session_pair(clock, broker)
    for body in (b"one", b"two", b"three"):
        producer.send("SEND", {"destination": QUEUE}, body)
    frames = consumer.received()
    assert [(f.command, f.headers["subscription"], f.headers["destination"], f.body) for f in frames] == [
        ("MESSAGE", "s1", QUEUE, body) for body in (b"one", b"two", b"three")]
    assert all("ack" not in f.headers for f in frames)
    assert writes == ["write"], "the first delivery only"


def test_client_ack_and_wildcard_deliveries_keep_the_general_writer(clock: Clock, broker: EmbeddedBroker,
                                                                    writes: list[str]) -> None:
    """A client-ack delivery (its ack header) and a wildcard subscription's (each message's own
    destination) are written by _write_delivery, as before."""
    consumer, producer = _session_pair(clock, broker, ack="client-individual")
    for body in (b"a", b"b"):
        producer.send("SEND", {"destination": QUEUE}, body)
    assert [f.body for f in consumer.received() if "ack" in f.headers] == [b"a", b"b"]
    assert writes == ["write", "write"]
    writes.clear()
    watcher = Peer(make_factory(clock, broker))
    connect(watcher)
    watcher.send("SUBSCRIBE", {"destination": "/topic/prices.>", "id": "w"})
    producer.send("SEND", {"destination": "/topic/prices.eu"}, b"x")
    producer.send("SEND", {"destination": "/topic/prices.us"}, b"y")
    assert [f.headers["destination"] for f in watcher.received()] == ["/topic/prices.eu", "/topic/prices.us"]
    assert writes == ["write", "write"]


def test_an_auto_delivery_still_marks_the_outgoing_heart_beat(clock: Clock, broker: EmbeddedBroker) -> None:
    """With outgoing heart-beats, each MESSAGE written (the direct write too) counts as traffic."""
    factory = make_factory(clock, broker)
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer, **{"heart-beat": "0,1000"})
    connect(producer)
    consumer.send("SUBSCRIBE", {"destination": QUEUE, "id": "s1"})
    session = consumer.protocol.session
    assert session is not None and session.heartbeats.out_interval
    producer.send("SEND", {"destination": QUEUE}, b"first")
    clock.advance(0.5)
    producer.send("SEND", {"destination": QUEUE}, b"second")
    assert session.heartbeats.last_sent == clock.seconds()
    assert [f.body for f in consumer.received() if f.command == "MESSAGE"] == [b"first", b"second"]


def test_a_message_only_the_general_encoder_writes_takes_the_general_path(clock: Clock,
                                                                         broker: EmbeddedBroker) -> None:
    """A property the fast encoder leaves to the general one (a name like a MESSAGE header) still
    reaches the client through message_to_frame."""
    consumer, producer = _session_pair(clock, broker)
    producer.send("SEND", {"destination": QUEUE}, b"plain")
    broker.send(text(QUEUE, "odd", properties={"subscription": "x"}))
    frames = consumer.received()
    assert [f.body for f in frames] == [b"plain", b"odd"]
    assert frames[1].headers["subscription"] == "s1"
