"""Issue 39: the calls a plain SEND → queue → auto-ack consumer makes on the broker's hot path.

Each test pins a call the hot path no longer makes for the usual message (no properties,
non-persistent, one auto-ack consumer, no transformation) and that the unusual one still
takes the full path (so the shortcut changes no outcome)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.groups import group_of
from gateway.broker.idempotency import has_send_id
from gateway.broker.queue import MessageQueue, QueueSubscription
from gateway.broker.scheduler import is_scheduled
from gateway.broker.settings import BrokerSettings
from gateway.message.model import Message, TextMessage
from gateway.stomp.transforms import SessionTransforms
from gateway.wire.frame import Frame
from tests.unit.test_broker import Sink, subscribe, text


@pytest.fixture
def broker() -> EmbeddedBroker:
    clock = Clock()
    clock.advance(1_000_000)
    broker = EmbeddedBroker(clock, BrokerSettings())
    broker.start()
    return broker


def _settled(outcomes: list[Any]) -> Any:
    return lambda error, ack: outcomes.append(error)


def _counted(asked: list[Any], label: Any, real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, noting ``label`` in ``asked`` at each call."""
    def call(*args: Any) -> Any:
        asked.append(label)
        return real(*args)
    return call


def test_a_message_without_special_properties_asks_no_property_check(
        broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """has_send_id and is_scheduled read properties: a message with none of theirs (none at all,
    or a ``content-type`` as issue 39's client sends) skips both calls; one with an idempotency
    key still meets them (and a resend of it is still dropped)."""
    asked: list[str] = []
    monkeypatch.setattr("gateway.broker.broker.has_send_id", _counted(asked, "id", has_send_id))
    monkeypatch.setattr("gateway.broker.broker.is_scheduled", _counted(asked, "when", is_scheduled))
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    outcomes: list[Any] = []
    for n in range(40):
        properties = {"content-type": "text/plain"} if n % 2 else {}
        broker.post(text("/queue/q", f"m{n}", properties=properties), _settled(outcomes), False)
    assert asked == [] and outcomes == [None] * 40 and len(sink.got) == 40
    for body in ("k1", "k1 again"):
        keyed = text("/queue/q", body, properties={"x-dedup-id": "k1"})
        broker.post(keyed, _settled(outcomes), False)
    assert asked.count("id") == 2 and sink.texts()[40:] == ["k1"]


def test_an_auto_acknowledged_non_persistent_message_is_counted_without_consumed(
        broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto_consumed of a non-persistent message counts it and asks consumed() nothing (it has
    nothing to remove); a persistent one still goes through consumed()."""
    calls: list[Message] = []
    real = broker.consumed

    def consumed(queue: MessageQueue, message: Message) -> Any:
        calls.append(message)
        return real(queue, message)

    monkeypatch.setattr(broker, "consumed", consumed)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    before = broker.metrics.consumed.count
    for n in range(40):
        broker.post(text("/queue/q", f"m{n}"), _settled([]), False)
    assert calls == [] and broker.metrics.consumed.count == before + 40 and len(sink.got) == 40
    broker.post(text("/queue/q", "p", persistent=True), _settled([]), False)
    assert [m.message_id for m in calls] == ["ID:p"] and broker.metrics.consumed.count == before + 41


def test_the_hand_over_reads_credit_and_room_without_calls(broker: EmbeddedBroker,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An auto-ack consumer's credit and the memory room are read in place: 40 posts to one
    queue make no has_credit() or full() call, and each message is delivered at once."""
    asked: list[str] = []
    monkeypatch.setattr(QueueSubscription, "has_credit", _counted(asked, "credit", QueueSubscription.has_credit))
    monkeypatch.setattr(MessageQueue, "full", _counted(asked, "full", MessageQueue.full))
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    for n in range(40):
        broker.post(text("/queue/q", f"m{n}"), _settled([]), False)
    assert asked == [] and sink.texts() == [f"m{n}" for n in range(40)]


def test_the_hand_over_still_refuses_what_does_not_fit() -> None:
    """The room read in place is full()'s test: an entry over the memory limit is not handed
    over (it is held and paged by the dispatch loop), one under it is."""
    clock = Clock()
    broker = EmbeddedBroker(clock, BrokerSettings(memory_limit=10_000))
    broker.start()
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    queue = broker.destinations.queues["/queue/q"]
    message = text("/queue/q", "x")
    assert queue.full(20_000) and not queue._hand_over((0, 1, message, 20_000))
    assert not queue.full(100) and queue._hand_over((0, 2, message, 100)) and sink.texts() == ["x"]


def test_a_message_without_a_group_asks_no_group_of(broker: EmbeddedBroker,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-over asks group_of only of a message carrying JMSXGroupID; a grouped one still
    goes to the dispatch loop (which assigns its group)."""
    asked: list[str] = []
    monkeypatch.setattr("gateway.broker.queue.group_of", _counted(asked, "group", group_of))
    sink = Sink()
    subscribe(broker, sink, destination="/queue/q")
    assert broker.destinations.queues["/queue/q"].groups is not None
    for n in range(40):
        broker.post(text("/queue/q", f"m{n}", properties={"content-type": "text/plain"}), _settled([]), False)
    assert asked == [] and len(sink.got) == 40
    broker.post(text("/queue/q", "g", properties={"JMSXGroupID": "a"}), _settled([]), False)
    assert asked and sink.texts()[-1] == "g" and sink.got[-1][0].properties["JMSXGroupID"] == "a"


class _Chains:
    """Counts the passes_through questions (nothing applies to any direction)."""

    def __init__(self) -> None:
        self.asked = 0

    def passes_through(self, direction: str, transformation: str | None) -> bool:
        self.asked += 1
        return True


def test_inbound_without_a_transformation_asks_the_chains_nothing() -> None:
    """A SEND without a ``transformation`` header, when no inbound entry applies, is passed on
    without asking the chains (decided once when the transforms were made)."""
    chains = _Chains()
    transforms = SessionTransforms(chains)  # type: ignore[arg-type]
    made = chains.asked
    message = TextMessage(destination="/queue/q", message_id="ID:1", text="x")
    for _ in range(40):
        assert transforms.inbound(message, None, Frame("SEND", {"destination": "/queue/q"})) is message  # type: ignore[arg-type]
    assert chains.asked == made
    named = Frame("SEND", {"destination": "/queue/q", "transformation": "jms-map-json"})
    assert transforms.inbound(message, None, named) is message  # type: ignore[arg-type]
    assert chains.asked == made + 1
