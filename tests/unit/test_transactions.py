"""The transaction buffer alone (:mod:`gateway.stomp.transactions`): COMMIT stores the SENDs
before it applies the ACKs, a refused SEND redelivers what was acknowledged (after the answer
failed), ABORT and a lost connection roll back."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail, succeed

from gateway.errors import DestinationFull
from gateway.message.model import TextMessage
from gateway.stomp.errors import StompError
from gateway.stomp.subscriptions import StompSubscription
from gateway.stomp.transactions import Transactions
from gateway.wire.frame import Frame


class Live:
    """A live subscription that records what was settled."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def ack(self, tags: list[Any]) -> Deferred[None]:
        self.log.append(f"ack {tags}")
        return succeed(None)

    def nack(self, tags: list[Any]) -> Deferred[None]:
        self.log.append(f"nack {tags}")
        return succeed(None)


class Target:
    """A connector whose batch is stored when ``stored`` fires."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.stored: Deferred[None] = Deferred()

    def send_batch(self, messages: list[TextMessage]) -> Deferred[None]:
        self.log.append(f"send {[m.text for m in messages]}")
        return self.stored


def subscription(log: list[str]) -> StompSubscription:
    sub = StompSubscription(None, "s", "/queue/a", "client")  # type: ignore[arg-type]
    sub.subscription = Live(log)  # type: ignore[assignment]
    return sub


def frame(command: str, name: str = "tx") -> Frame:
    return Frame(command, {"transaction": name})


def test_commit_applies_the_acks_only_once_the_sends_are_stored() -> None:
    log: list[str] = []
    transactions, target, sub = Transactions(), Target(log), subscription(log)
    transactions.begin(frame("BEGIN"))
    open_one = transactions.named(frame("SEND"))
    assert open_one is not None
    open_one.sends.append((target, TextMessage(text="m1")))  # type: ignore[arg-type]
    open_one.settle(sub, ["t1"], "ack")
    answers: list[Deferred[Any]] = []
    assert transactions.commit(transactions.end(frame("COMMIT")), answers.append, lambda _: None)
    assert log == ["send ['m1']"] and not answers[0].called
    target.stored.callback(None)
    assert log == ["send ['m1']", "ack ['t1']"] and answers[0].called
    assert len(transactions) == 0


def test_a_refused_commit_fails_its_answer_first_then_redelivers() -> None:
    log: list[str] = []
    transactions, target, sub = Transactions(), Target(log), subscription(log)
    transactions.begin(frame("BEGIN"))
    tx = transactions.named(frame("SEND"))
    assert tx is not None
    tx.sends.append((target, TextMessage(text="m1")))  # type: ignore[arg-type]
    tx.settle(sub, ["t1"], "ack")
    answers: list[Deferred[Any]] = []
    transactions.commit(transactions.end(frame("COMMIT")), answers.append, lambda _: None)
    answers[0].addErrback(lambda failure: log.append(f"answer {type(failure.value).__name__}"))
    target.stored.errback(DestinationFull("full"))
    assert log == ["send ['m1']", "answer DestinationFull", "nack ['t1']"]


def test_an_empty_commit_has_nothing_to_wait_for() -> None:
    transactions = Transactions()
    transactions.begin(frame("BEGIN"))
    assert not transactions.commit(transactions.end(frame("COMMIT")), lambda _: None, lambda _: None)


def test_a_commit_stored_at_once_answers_with_the_acks() -> None:
    log: list[str] = []
    transactions, sub = Transactions(), subscription(log)

    class AtOnce:
        def send_batch(self, messages: list[TextMessage]) -> Deferred[None]:
            return fail(DestinationFull("full")) if not messages else succeed(None)

    transactions.begin(frame("BEGIN"))
    tx = transactions.named(frame("ACK"))
    assert tx is not None
    tx.sends.append((AtOnce(), TextMessage(text="m1")))  # type: ignore[arg-type]
    tx.settle(sub, ["t1"], "nack")
    answers: list[Deferred[Any]] = []
    transactions.commit(transactions.end(frame("COMMIT")), answers.append, lambda _: None)
    assert log == ["nack ['t1']"]
    assert answers[0].called


def test_abort_and_abandon_redeliver_what_was_acknowledged() -> None:
    log: list[str] = []
    transactions, sub = Transactions(), subscription(log)
    for name in ("a", "b"):
        transactions.begin(frame("BEGIN", name))
        tx = transactions.named(frame("ACK", name))
        assert tx is not None
        tx.settle(sub, [name], "ack")
    transactions.rollback(transactions.end(frame("ABORT", "a")))
    assert log == ["nack ['a']"]
    transactions.abandon()
    assert log == ["nack ['a']", "nack ['b']"] and len(transactions) == 0


def test_names_are_checked() -> None:
    transactions = Transactions()
    transactions.begin(frame("BEGIN"))
    with pytest.raises(StompError, match="transaction already begun"):
        transactions.begin(frame("BEGIN"))
    with pytest.raises(StompError, match="unknown transaction"):
        transactions.named(frame("SEND", "other"))
    with pytest.raises(StompError, match="missing transaction header"):
        transactions.end(Frame("COMMIT", {}))
    assert transactions.named(Frame("SEND", {})) is None
