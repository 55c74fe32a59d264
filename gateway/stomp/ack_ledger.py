"""The ack ledger: which deliveries of one connection wait for an ACK or NACK, and what a frame settles.

Owns the delivery keys (the ``ack`` header of a STOMP 1.2 MESSAGE), each subscription's pending
deliveries in delivery order (:class:`PendingAcks`) and the three ack modes' rules: ``client``
settles a delivery and every earlier one, ``client-individual`` one delivery, ``auto`` none;
STOMP 1.0/1.1 acknowledge by ``message-id`` (the latest delivery of that id).  It only says which
connector tags a frame settles; applying them to the connector is :func:`apply_acks`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, Protocol, TypeVar

from twisted.internet.defer import Deferred, succeed

from gateway.interfaces import ISubscription
from gateway.stomp.errors import StompError, required
from gateway.wire.frame import Frame

COVERED_IDS = 4096
"""Message ids a STOMP 1.0/1.1 ``client`` subscription remembers as acknowledged (see
:attr:`PendingAcks.covered_ids`)."""


class PendingAcks:
    """One subscription's unacknowledged deliveries."""

    __slots__ = ("by_message_id", "covered_ids", "message_ids", "unacked")

    def __init__(self) -> None:
        self.unacked: dict[str, Any] = {}
        """Delivery key -> connector tag of each unacknowledged delivery, oldest first.  Every
        delivery has its own key, even when two carry one message id (a redelivery, two Kafka
        records with one ``jms.MessageId``)."""
        self.message_ids: dict[str, str] = {}
        """STOMP 1.0/1.1: delivery key -> the ``message-id`` the client acknowledges it by."""
        self.by_message_id: dict[str, list[str]] = {}
        """STOMP 1.0/1.1: ``message-id`` -> its unacknowledged delivery keys, oldest first (an ACK
        by message-id takes the last)."""
        self.covered_ids: dict[str, None] = {}
        """STOMP 1.0/1.1 ``client`` mode: the last :data:`COVERED_IDS` message ids a cumulative ACK
        acknowledged; an ACK naming one of them again is answered, not refused (the client acks
        each MESSAGE it received, an earlier ACK covered this one)."""

    def clear(self) -> None:
        self.unacked.clear()
        self.message_ids.clear()
        self.by_message_id.clear()
        self.covered_ids.clear()


class Acking(Protocol):
    """A subscription as the ledger sees it."""

    @property
    def ack_mode(self) -> str: ...

    @property
    def acks(self) -> PendingAcks: ...

    @property
    def acknowledge_one(self) -> Callable[[Any], Deferred[Any] | None] | None: ...

    @property
    def subscription(self) -> ISubscription | None: ...


S = TypeVar("S", bound=Acking)


class AckLedger(Generic[S]):
    """The pending acknowledgements of one connection's subscriptions."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._by_key: dict[str, S] = {}
        """STOMP 1.2: delivery key -> its subscription."""
        self._seq = itertools.count(1)

    def __len__(self) -> int:
        """How many STOMP 1.2 delivery keys are outstanding."""
        return len(self._by_key)

    def delivered(self, subscription: S, tag: Any, message_id: str, version: str) -> str | None:
        """Record a delivery that awaits an ACK; the ``ack`` header its MESSAGE carries (STOMP 1.2)."""
        key = f"{self.session_id}-{next(self._seq)}"
        pending = subscription.acks
        pending.unacked[key] = tag
        if version == "1.2":
            self._by_key[key] = subscription
            return key
        # acknowledged by message-id: the latest delivery of that id answers
        pending.message_ids[key] = message_id
        pending.by_message_id.setdefault(message_id, []).append(key)
        return None

    def ack_key(self, key: str) -> Deferred[Any] | Literal[False] | None:
        """The quick path of a STOMP 1.2 ACK with its ``id`` alone (issue 39): the delivery ``key``
        of a ``client-individual`` subscription, or the oldest of a ``client`` one, settled and
        acknowledged at the live subscription in one call.  False (nothing changed) when ``key``
        is anything else (the general :meth:`settle` answers it); None when the acknowledgement
        is complete; otherwise the Deferred to answer the frame by (a store removal, or a
        connector without :class:`IImmediateAcks`)."""
        subscription = self._by_key.get(key)
        if subscription is None:
            return False
        unacked = subscription.acks.unacked
        if subscription.ack_mode != "client-individual" and next(iter(unacked)) != key:
            return False  # (a cumulative ACK past the oldest: the general path)
        del self._by_key[key]
        tag = unacked.pop(key)  # (every key of _by_key is its subscription's: delivered() and settle())
        acknowledge_one = subscription.acknowledge_one
        if acknowledge_one is not None:
            done: Deferred[Any] | None = acknowledge_one(tag)
            return done
        return apply_acks(subscription.subscription, [tag], "ack")

    def settle(self, frame: Frame, version: str, subscriptions: Mapping[str, S]) -> tuple[S, list[Any]]:
        """The subscription and connector tags an ACK or NACK ``frame`` settles (taken off the
        ledger); an unknown id is a :class:`StompError`."""
        subscription: S | None
        message_id = ""
        if version == "1.2":
            key = required(frame, "id")
            subscription = self._by_key.get(key)
        else:
            message_id = required(frame, "message-id")
            sub_id = frame.headers.get("subscription")
            if sub_id is not None:
                subscription = subscriptions.get(sub_id)
            else:
                subscription = next((s for s in subscriptions.values()
                                     if message_id in s.acks.by_message_id or message_id in s.acks.covered_ids), None)
            deliveries = subscription.acks.by_message_id.get(message_id) if subscription is not None else None
            # The latest delivery of that id: a redelivered copy supersedes an earlier one (Kafka
            # redelivers from a NACKed offset on, records still unacknowledged included).
            key = deliveries[-1] if deliveries else message_id
        if subscription is None or key not in subscription.acks.unacked:
            if version != "1.2" and subscription is not None and frame.command == "ACK" \
                    and message_id in subscription.acks.covered_ids:
                return subscription, []  # a cumulative ACK covered every delivery of that id already
            shown = key if version == "1.2" else message_id
            raise StompError(f"unknown {frame.command.lower()} id",
                             f"{shown!r} names no unacknowledged message of this connection")
        pending = subscription.acks
        unacked = pending.unacked
        if subscription.ack_mode == "client":
            keys = []
            for waiting in unacked:
                keys.append(waiting)
                if waiting == key:
                    break
        else:
            keys = [key]
        tags = []
        message_ids = pending.message_ids
        covered = pending.covered_ids if subscription.ack_mode == "client" and frame.command == "ACK" else None
        for waiting in keys:
            tags.append(unacked.pop(waiting))
            self._by_key.pop(waiting, None)
            delivered_id = message_ids.pop(waiting, None)
            if delivered_id is not None:
                same = pending.by_message_id[delivered_id]
                same.remove(waiting)
                if not same:
                    del pending.by_message_id[delivered_id]
                if covered is not None:
                    covered[delivered_id] = None
                    if len(covered) > COVERED_IDS:
                        del covered[next(iter(covered))]
        return subscription, tags

    def forget(self, subscription: S) -> None:
        """The subscription closed: its pending deliveries are the connector's again."""
        pending = subscription.acks
        for key in pending.unacked:
            self._by_key.pop(key, None)
        pending.clear()


def apply_acks(live: ISubscription | None, tags: list[Any], what: str) -> Deferred[Any]:
    """Acknowledge (``what`` = ``"ack"``) or refuse (``"nack"``) ``tags`` at the live subscription."""
    if live is None or not tags:
        return succeed(None)
    result: Deferred[Any] = live.ack(tags) if what == "ack" else live.nack(tags)
    return result
