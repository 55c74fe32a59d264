"""ONCE_AND_ONLY_ONCE never resends without knowing (issue 32): a send whose outcome is in
doubt, and a start-up check, wait until the target answers what it holds.

The engine with a Clock, the embedded broker and a target whose probe fails (a stalled
or unreachable target) a number of times before it answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, fail
from zope.interface import implementer

from gateway.bridges.in_doubt import MAX_BACKOFF_S
from gateway.bridges.probe import target_message_id
from gateway.errors import ConnectorUnavailable
from gateway.interfaces import IConsumer
from gateway.message.model import Message
from tests.unit.test_bridge import Rig, text


def unanswered_probes(rig: Rig, count: int) -> list[int]:
    """The target's next ``count`` probes fail as a stalled target's do; returns the attempt log."""
    real = rig.target.held_message_ids
    asked: list[int] = []

    def probe(destination: str, tail: int = 0) -> Any:
        asked.append(1)
        if len(asked) <= count:
            return fail(ConnectorUnavailable(f"browse of {destination}: no confirmation within 2.0s (connected)"))
        return real(destination, tail)

    rig.target.held_message_ids = probe  # type: ignore[method-assign]
    return asked


def lose_first_confirmation(rig: Rig) -> None:
    """The target commits the first batch, its confirmation never comes (a stalled link)."""
    real = rig.target.send_batch
    lost = [1]

    def send_batch(messages: list[Message]) -> Any:
        d = real(messages)
        if lost[0]:
            lost[0] -= 1
            return d.addCallback(lambda _: fail(ConnectorUnavailable("transaction of 3 messages: no confirmation")))
        return d

    rig.target.send_batch = send_batch  # type: ignore[method-assign]


def test_a_send_in_doubt_waits_for_an_answer_and_is_never_sent_again_blind() -> None:
    """Before issue 32, the first unanswered probe made the bridge send the batch again."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3)
    lose_first_confirmation(rig)
    rig.bridge.start()
    asked = unanswered_probes(rig, 4)
    rig.publish(text("a"), text("b"), text("c"))
    rig.clock.advance(1.0)  # the retry: the probe goes unanswered
    assert rig.bridge.state == "in_doubt"
    assert rig.bridge.status()["in_doubt"] is True
    assert rig.registry.get_sample_value("jmsgateway_bridge_state",
                                         {"bridge": "b", "jmsgateway_bridge_state": "in_doubt"}) == 1
    rig.publish(text("d"), text("e"), text("f"))
    for _ in range(40):
        rig.clock.advance(0.5)
        if len(asked) > 4:
            break
        assert rig.bodies() == ["a", "b", "c"], "nothing sent again, nothing new sent while in doubt"
        assert rig.bridge.state == "in_doubt"
    assert len(asked) == 5, "asked until it answered"
    rig.clock.advance(0.05)
    assert rig.bodies() == ["a", "b", "c", "d", "e", "f"]
    assert rig.bridge.state == "running"
    assert rig.pending_at_source() == 0


def test_the_questions_back_off_up_to_a_ceiling() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3)
    lose_first_confirmation(rig)
    rig.bridge.start()
    asked = unanswered_probes(rig, 10**6)
    rig.publish(text("a"), text("b"), text("c"))
    rig.clock.advance(1.0)
    assert len(asked) == 1
    rig.clock.advance(1.0)
    assert len(asked) == 2
    rig.clock.advance(1.9)
    assert len(asked) == 2, "the second wait is twice the first"
    rig.clock.advance(0.1)
    assert len(asked) == 3
    for _ in range(40):
        rig.clock.advance(MAX_BACKOFF_S)
    assert 3 + 35 <= len(asked) <= 3 + 40, "never longer than the ceiling"
    assert rig.bridge.state == "in_doubt"
    assert rig.bodies() == ["a", "b", "c"]


def test_a_bounded_wait_ends_failed_in_doubt_without_a_resend() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3, max_retries=3)
    lose_first_confirmation(rig)
    rig.bridge.start()
    unanswered_probes(rig, 10**6)
    rig.publish(text("a"), text("b"), text("c"))
    for _ in range(10):
        rig.clock.advance(MAX_BACKOFF_S)
    assert rig.bridge.state == "failed"
    assert rig.bridge.last_error is not None and "in doubt" in rig.bridge.last_error
    assert rig.bodies() == ["a", "b", "c"], "given up, not sent again"


def test_the_start_up_check_waits_for_the_target_before_consuming() -> None:
    """Defect 2: a crash after the target committed a batch, before the duplicate store
    recorded it and the source was acknowledged; the restart finds the target away.  Before
    issue 32 the bridge consumed at once and sent the batch again."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3)
    rig.publish(text("a"), text("b"), text("c"))
    for body in ("a", "b", "c"):  # what the crashed run committed at the target
        copy = text(body)
        copy.message_id = target_message_id("b", f"ID:src-{body}")
        rig.publish(copy, destination="/queue/dst")
    asked = unanswered_probes(rig, 3)
    started = rig.bridge.start()
    assert rig.bridge.state == "in_doubt"
    assert not started.called
    assert rig.source.consumers == [], "nothing consumed while in doubt"
    rig.clock.advance(1.0)
    rig.clock.advance(2.0)
    assert len(asked) == 3 and rig.source.consumers == []
    rig.clock.advance(4.0)
    assert len(asked) == 4
    rig.clock.advance(0.05)
    assert started.called and rig.bridge.state == "running"
    assert rig.bodies() == ["a", "b", "c"], "what the target held was recorded, not sent again"
    assert rig.pending_at_source() == 0
    assert rig.metric("jmsgateway_bridge_duplicates_skipped_total") == 3
    assert not rig.bridge.subscription.paused, "consuming again"
    rig.publish(text("d"), text("e"), text("f"))
    assert rig.bodies() == ["a", "b", "c", "d", "e", "f"]


def test_stop_ends_an_in_doubt_episode() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3)
    unanswered_probes(rig, 10**6)
    started = rig.bridge.start()
    assert rig.bridge.state == "in_doubt"
    stopped = rig.bridge.stop()
    assert stopped.called and started.called
    assert rig.bridge.state == "stopped"
    rig.clock.advance(100)
    assert rig.source.consumers == []


def redelivering(rig: Rig, flagged: Callable[[str], bool]) -> None:
    """The source delivers the messages whose id ``flagged`` accepts as redelivered."""
    real = rig.source.subscribe

    def subscribe(spec: Any, consumer: Any) -> Any:
        @implementer(IConsumer)
        class Redelivering:
            def deliver(self, message: Message, tag: Any) -> Any:
                copy = message.copy()
                copy.redelivered = flagged(message.message_id)
                return consumer.deliver(copy, tag)

            def subscription_failed(self, reason: Exception) -> None:
                consumer.subscription_failed(reason)

        return real(spec, Redelivering())

    rig.source.subscribe = subscribe  # type: ignore[method-assign]


def counted_probes(rig: Rig) -> list[str]:
    """Every question to the target from now on (answered as the target would)."""
    real = rig.target.held_message_ids
    asked: list[str] = []

    def probe(destination: str, tail: int = 0) -> Any:
        asked.append(destination)
        return real(destination, tail)

    rig.target.held_message_ids = probe  # type: ignore[method-assign]
    return asked


def slow_duplicate_store(rig: Rig) -> None:
    """The duplicate store answers in a later reactor turn, as the SQLite one (a thread) does."""
    assert rig.store is not None
    real = rig.store.known

    def known(bridge: str, message_ids: list[str]) -> Deferred[set[str]]:
        answer: Deferred[set[str]] = Deferred()
        rig.clock.callLater(0.01, lambda: real(bridge, message_ids).chainDeferred(answer))
        return answer

    rig.store.known = known  # type: ignore[method-assign]


def settle(rig: Rig) -> None:
    """Let the slow duplicate store and the batches run their course (5 s in small steps)."""
    for _ in range(100):
        rig.clock.advance(0.05)


def test_a_redelivered_backlog_costs_one_question_not_one_per_batch() -> None:
    """After a crash the source redelivers the bridge's whole prefetch, every message flagged.
    Before the fix each batch of 1 asked the target again: to Kafka a question reads the topic's
    tail (seconds), so 300 redelivered messages took minutes and CI saw none bridged for 30 s."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=1)
    redelivering(rig, lambda message_id: True)
    slow_duplicate_store(rig)
    rig.bridge.start()
    rig.clock.advance(0.05)
    sent_by_the_other = text("5")  # a copy the source's earlier consumer committed
    sent_by_the_other.message_id = target_message_id("b", "ID:src-5")
    rig.publish(sent_by_the_other, destination="/queue/dst")
    asked = counted_probes(rig)
    rig.publish(*(text(str(i)) for i in range(20)))  # (all arrive before the first batch is looked at)
    settle(rig)
    assert len(asked) == 1, "one question covers every message that had arrived before it"
    assert sorted(rig.bodies(), key=int) == [str(i) for i in range(20)], "each once; 5 not sent again"
    assert rig.pending_at_source() == 0
    assert rig.metric("jmsgateway_bridge_duplicates_skipped_total") == 1


def test_a_message_redelivered_after_the_question_is_asked_about_again() -> None:
    """The answer covers only what had arrived when it was asked, and only for a while."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=1)
    redelivering(rig, lambda message_id: True)
    slow_duplicate_store(rig)
    rig.bridge.start()
    rig.clock.advance(0.05)
    asked = counted_probes(rig)
    rig.publish(text("0"), text("1"))
    settle(rig)
    assert len(asked) == 1
    rig.publish(text("2"))
    settle(rig)
    assert len(asked) == 2, "arrived after the answer: asked anew"
    sent_by_the_other = text("3")
    sent_by_the_other.message_id = target_message_id("b", "ID:src-3")
    rig.publish(sent_by_the_other, destination="/queue/dst")
    rig.publish(text("3"))
    settle(rig)
    assert len(asked) == 3
    assert sorted(rig.bodies()) == ["0", "1", "2", "3"], "3's copy by the other consumer found, not sent again"


def test_a_redelivered_message_another_consumer_sent_is_not_sent_again() -> None:
    """Two gateways run one bridge; the first sent a batch, then its source connection died
    before the acknowledgement: the broker redelivers to the second, whose duplicate store does
    not know the ids.  The second asks the target about redelivered messages first."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=3)
    redelivering(rig, lambda message_id: message_id in ("ID:src-a", "ID:src-b"))
    rig.bridge.start()
    sent_by_the_other = text("a")  # after this bridge's start-up check
    sent_by_the_other.message_id = target_message_id("b", "ID:src-a")
    rig.publish(sent_by_the_other, destination="/queue/dst")
    rig.publish(text("a"), text("b"), text("c"))
    assert sorted(rig.bodies()) == ["a", "b", "c"], "a not sent again; b (redelivered, not held) and c sent"
    assert rig.pending_at_source() == 0
    assert rig.metric("jmsgateway_bridge_duplicates_skipped_total") == 1


def test_two_batches_in_doubt_are_one_episode() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=1)
    real = rig.target.send_batch
    lost = [2]

    def send_batch(messages: list[Message]) -> Any:
        d = real(messages)
        if lost[0]:
            lost[0] -= 1
            return d.addCallback(lambda _: fail(ConnectorUnavailable("no confirmation")))
        return d

    rig.target.send_batch = send_batch  # type: ignore[method-assign]
    rig.bridge.start()
    asked = unanswered_probes(rig, 4)
    rig.publish(text("a"), text("b"))
    rig.clock.advance(1.0)
    assert rig.bridge.state == "in_doubt" and len(asked) == 2
    for _ in range(10):
        rig.clock.advance(1.0)
    assert rig.bridge.in_doubt.episodes == 1, "logged once"
    assert rig.bodies() == ["a", "b"] and rig.bridge.state == "running"
