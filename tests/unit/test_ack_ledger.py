"""The ack ledger alone (:mod:`gateway.stomp.ack_ledger`): which connector tags an ACK or NACK
settles in each ack mode and STOMP version, without a session or a connector."""

from __future__ import annotations

import pytest

from gateway.stomp.ack_ledger import COVERED_IDS, AckLedger, PendingAcks
from gateway.stomp.errors import StompError
from gateway.wire.frame import Frame


class Sub:
    """A subscription as the ledger sees it."""

    def __init__(self, ack_mode: str) -> None:
        self.ack_mode = ack_mode
        self.acks = PendingAcks()
        self.subscription = None
        self.acked: list[object] = []

    def acknowledge_one(self, tag: object) -> None:
        self.acked.append(tag)


def ack(**headers: str) -> Frame:
    return Frame("ACK", dict(headers))


def test_a_1_2_delivery_gets_its_own_key_and_a_client_ack_settles_every_earlier_one() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub = Sub("client")
    keys = [ledger.delivered(sub, tag, f"m{tag}", "1.2") for tag in (1, 2, 3)]
    assert keys == ["s1-1", "s1-2", "s1-3"]
    assert ledger.settle(ack(id="s1-2"), "1.2", {"s": sub}) == (sub, [1, 2])
    assert list(sub.acks.unacked) == ["s1-3"] and len(ledger) == 1


def test_client_individual_settles_that_delivery_alone() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub = Sub("client-individual")
    for tag in (1, 2, 3):
        ledger.delivered(sub, tag, f"m{tag}", "1.2")
    assert ledger.settle(ack(id="s1-2"), "1.2", {"s": sub}) == (sub, [2])
    assert list(sub.acks.unacked) == ["s1-1", "s1-3"]


def test_the_quick_path_takes_only_what_needs_no_walk() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub = Sub("client")
    for tag in (1, 2):
        ledger.delivered(sub, tag, f"m{tag}", "1.2")
    assert ledger.ack_key("s1-2") is False  # (not the oldest of a client subscription: nothing changed)
    assert list(sub.acks.unacked) == ["s1-1", "s1-2"] and len(ledger) == 2 and sub.acked == []
    assert ledger.ack_key("s1-1") is None
    assert sub.acked == [1] and list(sub.acks.unacked) == ["s1-2"] and len(ledger) == 1
    assert ledger.ack_key("nothing") is False


def test_an_unknown_id_is_refused_and_names_it() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    with pytest.raises(StompError, match="unknown ack id") as refused:
        ledger.settle(ack(id="s1-9"), "1.2", {})
    assert "'s1-9'" in refused.value.detail


def test_1_1_acknowledges_by_message_id_the_latest_delivery_of_it() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub = Sub("client-individual")
    assert ledger.delivered(sub, "first", "m1", "1.1") is None  # (no ack header before 1.2)
    ledger.delivered(sub, "again", "m1", "1.1")
    assert ledger.settle(ack(**{"message-id": "m1", "subscription": "s"}), "1.1", {"s": sub}) == (sub, ["again"])
    assert ledger.settle(ack(**{"message-id": "m1"}), "1.1", {"s": sub}) == (sub, ["first"])
    assert not sub.acks.by_message_id and not sub.acks.message_ids


def test_a_1_1_client_ack_covers_earlier_ids_and_answers_them_again() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub = Sub("client")
    for tag in (1, 2):
        ledger.delivered(sub, tag, f"m{tag}", "1.1")
    assert ledger.settle(ack(**{"message-id": "m2"}), "1.1", {"s": sub}) == (sub, [1, 2])
    assert ledger.settle(ack(**{"message-id": "m1"}), "1.1", {"s": sub}) == (sub, [])  # covered, not refused
    with pytest.raises(StompError, match="unknown nack id"):
        ledger.settle(Frame("NACK", {"message-id": "m1"}), "1.1", {"s": sub})


def test_the_covered_ids_are_bounded() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub = Sub("client")
    for number in range(COVERED_IDS + 10):
        ledger.delivered(sub, number, f"m{number}", "1.0")
    ledger.settle(ack(**{"message-id": f"m{COVERED_IDS + 9}"}), "1.0", {"s": sub})
    assert len(sub.acks.covered_ids) == COVERED_IDS
    assert "m0" not in sub.acks.covered_ids


def test_forget_drops_a_closed_subscriptions_deliveries() -> None:
    ledger: AckLedger[Sub] = AckLedger("s1")
    sub, other = Sub("client"), Sub("client")
    ledger.delivered(sub, 1, "m1", "1.2")
    ledger.delivered(other, 2, "m2", "1.2")
    ledger.forget(sub)
    assert len(ledger) == 1 and not sub.acks.unacked
    with pytest.raises(StompError):
        ledger.settle(ack(id="s1-1"), "1.2", {})
