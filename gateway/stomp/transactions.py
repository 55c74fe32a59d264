"""STOMP transactions of one connection: BEGIN, COMMIT and ABORT over a buffer of sends and acks.

Owns the open :class:`Transaction` buffers by name and the COMMIT rule (the SENDs stored first,
one batch per connector, then the ACKs and NACKs applied) and the rollback (what was acknowledged
is redelivered).  It writes no frame: the session answers with what :meth:`Transactions.commit`
returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from gateway.deferreds import gather
from gateway.flow import Congestion
from gateway.interfaces import IConnector, IFlowControlled, ITransactionalAcks
from gateway.message.model import Message
from gateway.stomp.ack_ledger import apply_acks
from gateway.stomp.errors import StompError, required
from gateway.stomp.receipts import succeeded_already
from gateway.stomp.subscriptions import StompSubscription
from gateway.wire.frame import Frame

Acks = list[tuple[StompSubscription, list[Any]]]


@dataclass(slots=True)
class Transaction:
    """A client transaction: sends and acks applied only at COMMIT."""

    sends: list[tuple[IConnector, Message]] = field(default_factory=list)
    acks: Acks = field(default_factory=list)
    nacks: Acks = field(default_factory=list)

    def settle(self, subscription: StompSubscription, tags: list[Any], what: str) -> None:
        """An ACK (``what`` = ``"ack"``) or NACK inside the transaction: applied at COMMIT.
        The deliveries stay the transaction's (credit freed, kept if the subscription closes)
        where the connector can."""
        (self.acks if what == "ack" else self.nacks).append((subscription, tags))
        live = subscription.subscription
        if live is not None and ITransactionalAcks.providedBy(live):
            live.hold(tags)


class Transactions:
    """The open transactions of one connection, by name."""

    def __init__(self) -> None:
        self.open: dict[str, Transaction] = {}

    def __len__(self) -> int:
        return len(self.open)

    def begin(self, frame: Frame) -> None:
        """BEGIN: a new, empty transaction."""
        name = required(frame, "transaction")
        if name in self.open:
            raise StompError("transaction already begun", f"transaction {name!r} is already open")
        self.open[name] = Transaction()

    def named(self, frame: Frame) -> Transaction | None:
        """The open transaction ``frame`` belongs to (None: it names none)."""
        name = frame.headers.get("transaction")
        if name is None:
            return None
        transaction = self.open.get(name)
        if transaction is None:
            raise StompError("unknown transaction", f"transaction {name!r} was not begun (or already ended)")
        return transaction

    def end(self, frame: Frame) -> Transaction:
        """COMMIT or ABORT: the transaction it names, no longer open."""
        name = required(frame, "transaction")
        transaction = self.named(frame)
        assert transaction is not None
        del self.open[name]
        return transaction

    def commit(self, transaction: Transaction, answer: Callable[[Deferred[Any]], None],
               hold_for: Callable[[Congestion], None]) -> bool:
        """All or nothing: the SENDs are stored first; only then are the ACKs and NACKs applied.
        A SEND refused (an unknown destination, a full store) fails the COMMIT: nothing was stored
        (one connector stores a batch in one transaction, after checking every destination) and
        the acknowledged messages are redelivered.  (SENDs to several connectors are not atomic
        together: each connector's batch is.)

        ``answer`` gets the Deferred the COMMIT's RECEIPT or ERROR waits for, before a refusal
        rolls back (so nothing more is delivered on this connection); ``hold_for`` a congested
        target.  False when there was nothing to do (the RECEIPT may go now)."""
        sends: list[Deferred[Any]] = []
        batches: dict[int, tuple[IConnector, list[Message]]] = {}
        for connector, message in transaction.sends:
            batches.setdefault(id(connector), (connector, []))[1].append(message)
        for connector, messages in batches.values():
            sends.append(connector.send_batch(messages))
            if IFlowControlled.providedBy(connector) and connector.congestion.congested:
                hold_for(connector.congestion)  # (the transaction's SENDs go out only now)
        if not sends and not transaction.acks and not transaction.nacks:
            return False

        def settle(_: object) -> Deferred[Any]:
            work = [apply_acks(subscription.subscription, tags, "ack") for subscription, tags in transaction.acks]
            work += [apply_acks(subscription.subscription, tags, "nack") for subscription, tags in transaction.nacks]
            return gather(work)

        stored = gather(sends) if sends else succeed(None)
        if succeeded_already(stored):
            answer(settle(None))
            return True
        committed: Deferred[Any] = Deferred()
        answer(committed)

        def refused(failure: Failure) -> None:
            committed.errback(failure)  # ERROR first: nothing more is delivered on this connection
            self.rollback(transaction)

        stored.addCallback(settle).addCallbacks(committed.callback, refused)
        return True

    def rollback(self, transaction: Transaction) -> None:
        """Redeliver what the transaction acknowledged (counted once each)."""
        for subscription, tags in transaction.acks + transaction.nacks:
            live = subscription.subscription
            if live is not None and (ITransactionalAcks.providedBy(live) or not subscription.closed):
                apply_acks(live, tags, "nack")

    def abandon(self) -> None:
        """The connection ended: every open transaction rolls back."""
        for transaction in self.open.values():
            self.rollback(transaction)
        self.open.clear()
