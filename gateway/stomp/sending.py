"""The SEND frame of one connection: from the frame to the connector that takes it.

Owns the checks of a SEND (destination, composite parts, ``write`` permission, the sender's
identity stamp, temporary destinations) and its three ways to a connector, which stay apart
because each is the fastest its case allows and each settles the answer differently:

* **forward** - a connector that takes frames as they are (no transaction, no receipt, no
  transformer change): no message is built; the connector settles the answer slot it is given;
* **immediate** - a message, known at once: a posting connector (no Deferred) settles an answer
  slot, any other answers through the Deferred of :meth:`IConnector.send`; in a transaction the
  message waits in the transaction's buffer;
* **deferred** - an inbound transformer answered with a Deferred: the frame's answer already
  waits on that Deferred, so the send is chained into it (:meth:`IConnector.send`, never a post,
  which has no Deferred to chain).

The RECEIPT or ERROR goes out through the session's :class:`gateway.stomp.receipts.ReceiptLine`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed

from gateway.broker.composite import composite_parts
from gateway.errors import DestinationError
from gateway.flow import Congestion
from gateway.interfaces import Capability, Permission
from gateway.message.convert import PropertyMemo, frame_to_message
from gateway.message.model import Message
from gateway.routing.destination_map import DestinationMap, Resolved
from gateway.stomp.errors import StompError, required
from gateway.stomp.receipts import Answer, ReceiptLine
from gateway.stomp.sender_identity import IDENTITY_HEADERS, stamp_sender
from gateway.stomp.temporaries import CLIENT_PREFIXES, TemporaryDestinations
from gateway.stomp.transactions import Transaction, Transactions
from gateway.wire.frame import Frame

_UNRECEIPTED_SEND = Frame("SEND", {})
"""Stands for a SEND without a receipt when its outcome is an error (only its command is read)."""


class SendingOwner(Protocol):
    """What sending asks of its session."""

    @property
    def verified_login(self) -> str | None:
        """The login the portal verified, stamped on each message."""
        ...

    def authorized(self, frame: Frame, destination: str, permission: Permission) -> bool:
        """Whether the login may ``permission`` ``destination`` (if not, the session answered)."""
        ...

    def refusal(self, frame: Frame, destination: str, permission: Permission) -> Frame | None:
        """None if the login may ``permission`` ``destination``, else the ERROR answering ``frame``
        (the caller places it; the connection stays open)."""
        ...

    def passes_through(self, frame: Frame) -> bool:
        """Whether the inbound transformers leave every message of this SEND untouched."""
        ...

    def transform_inbound(self, message: Message, frame: Frame) -> Any:
        """The inbound transformers' answer: a message, None (consumed) or a Deferred of either."""
        ...

    def hold_for(self, congestion: Congestion) -> None:
        """Stop reading from the client until ``congestion`` clears."""
        ...


class Sender:
    """The SEND paths of one connection."""

    def __init__(self, owner: SendingOwner, destinations: DestinationMap, answers: ReceiptLine,
                 transactions: Transactions, temporaries: TemporaryDestinations, *,
                 default_persistent: bool, authorizing: bool, transforming: bool, identifying: bool = False) -> None:
        self.owner = owner
        self.destinations = destinations
        self.answers = answers
        self.transactions = transactions
        self.temporaries = temporaries
        self.default_persistent = default_persistent
        self.authorizing = authorizing
        """Whether each SEND is checked for the ``write`` permission."""
        self.transforming = transforming
        """Whether inbound transformers see each message."""
        self.identifying = identifying
        """Whether logins are verified (each SEND is stamped with its sender's); else a SEND's identity
        headers are only removed, and a SEND without any is left as it is."""
        self._last_name = ""
        self._last_resolved: Resolved | None = None
        """The last destination resolved here and its answer (a producer sends to one destination
        again and again: no call then; :meth:`DestinationMap.resolve` always answers the same)."""
        self._properties = PropertyMemo()
        """The properties of this connection's last SEND with some (a producer sends the same headers)."""

    def send(self, frame: Frame) -> None:
        """Handle a SEND; its answer (RECEIPT or ERROR) goes out in frame order."""
        headers = frame.headers
        owner = self.owner
        destination = headers.get("destination")
        if not destination:
            destination = required(frame, "destination")  # (raises)
        if "," in destination:
            self._check_composite(destination)
        if self.authorizing and not owner.authorized(frame, destination, "write"):
            return
        if self.identifying or not IDENTITY_HEADERS.isdisjoint(headers):  # (else nothing to stamp: no call)
            stamp_sender(headers, owner.verified_login)
        transaction = self.transactions.named(frame) if "transaction" in headers else None
        resolved: Resolved | None = None
        temporary = destination.startswith("/temp-")
        if transaction is None and "receipt" not in headers and not temporary:
            resolved = self._last_resolved
            if resolved is None or destination != self._last_name:
                resolved = self._resolve(destination)
            if (
                resolved.forward is not None
                and not headers.get("reply-to", "").startswith("/temp-")
                and (not self.transforming or owner.passes_through(frame))
                and self._forward(resolved.forward, resolved.destination, frame)
            ):
                if resolved.congestion is not None and resolved.congestion.congested:
                    owner.hold_for(resolved.congestion)
                return
        message = frame_to_message(frame, default_persistent=self.default_persistent, memo=self._properties)
        if temporary:  # (else frame_to_message set it: the destination header)
            message.destination = self.temporaries.server_destination(destination, create=True)
        if message.reply_to is not None and message.reply_to.startswith(CLIENT_PREFIXES):
            message.reply_to = self.temporaries.server_destination(message.reply_to, create=True)
        sending: Message | None = message
        if self.transforming:
            named = self.authorizing and "transformation" in headers
            before = message.destination
            transformed = owner.transform_inbound(message, frame)
            # (a Message or None is the common answer; isinstance against Deferred, an ABC, costs more)
            if transformed is not None and not isinstance(transformed, Message):
                if named:  # (the branch is judged once the transformers have answered)
                    self._send_judged(transformed, frame, before, transaction)
                    return
                transformed.addCallback(self._send_later, transaction)
                self.answers.track(transformed, frame)
                return
            sending = transformed
            if named and sending is not None and sending.destination != before \
                    and not owner.authorized(frame, sending.destination, "write"):
                return  # (a transformer the client named branched it where its login may not write)
        if sending is None or transaction is not None:
            self.answers.track(self._send_later(sending, transaction), frame)
            return
        if resolved is None or sending.destination is not destination:  # (a transformer may have moved it)
            resolved = self._resolve(sending.destination)
        sending.destination = resolved.destination
        post = resolved.post
        if post is not None:
            # Hand it to a posting connector (no Deferred): RECEIPT or ERROR once it settles, in frame
            # order; without a receipt only its command is read to answer an error (the frame is not kept).
            confirm = "receipt" in headers
            answers = self.answers
            answer = Answer(answers, frame if confirm else _UNRECEIPTED_SEND)  # (ReceiptLine.pending)
            try:
                post(sending, answer.settled, confirm)
            except BaseException:  # (an unexpected error before it settled: it never will; ERROR follows)
                answer.settle(None)
                raise
            finally:
                answers.place(answer)
        else:
            self.answers.track(resolved.connector.send(sending), frame)
        if resolved.congestion is not None and resolved.congestion.congested:
            owner.hold_for(resolved.congestion)

    def _resolve(self, destination: str) -> Resolved:
        """:meth:`DestinationMap.resolve`, remembered as the last one."""
        resolved = self._last_resolved = self.destinations.resolve(destination)
        self._last_name = destination
        return resolved

    def _forward(self, forward: Callable[..., bool], destination: str, frame: Frame) -> bool:
        """Offer the SEND to a connector that takes frames as they are (no message
        built); False when it declines and the message path must run."""
        answer = self.answers.later(frame)
        try:
            taken = forward(destination, frame.headers, frame.body, self.default_persistent, answer.settled)
        except BaseException:
            answer.settle(None)  # (the ERROR follows)
            raise
        if not taken:
            answer.settle(None)  # (answered by the message path)
        return taken

    def _send_judged(self, transformed: Deferred[Message | None], frame: Frame, before: str,
                     transaction: Transaction | None) -> None:
        """The deferred path of a SEND that named a ``transformation``: a message the transformers
        branched to another destination goes there only if the login may write it (else the
        refusal's ERROR answers the SEND in its turn, and the connection stays open)."""
        answer = self.answers.later(frame)
        owner = self.owner

        def judged(message: Message | None) -> None:
            if message is not None and message.destination != before:
                refusal = owner.refusal(frame, message.destination, "write")
                if refusal is not None:
                    answer.settle(refusal)
                    return
            self._send_later(message, transaction).addCallbacks(answer.succeeded, answer.failed)

        transformed.addCallback(judged).addErrback(answer.failed)

    def _send_later(self, message: Message | None, transaction: Transaction | None) -> Deferred[None]:
        """The deferred path (and a transaction's SEND, or one a transformer consumed): the
        connector's Deferred, or one already fired."""
        if message is None:  # consumed by a transformer
            return succeed(None)
        resolved = self.destinations.resolve(message.destination)
        message.destination = resolved.destination
        if transaction is not None:
            transaction.sends.append((resolved.connector, message))
            return succeed(None)
        result: Deferred[None] = resolved.connector.send(message)
        return result

    def _check_composite(self, destination: str) -> None:
        """A SEND to ``/queue/a,/topic/b``: every part must go, under its own name, to one connector
        that takes composite destinations (ActiveMQ's comma syntax; gateway/broker/composite.py)."""
        try:
            parts = composite_parts(destination)
        except DestinationError as error:
            raise StompError("invalid composite destination", str(error)) from None
        whole = self.destinations.resolve(destination).connector
        for part in parts:
            resolved = self.destinations.resolve(part)
            if part.startswith(("/temp-", "/remote-temp-")) or resolved.connector is not whole \
                    or resolved.destination != part:
                raise StompError("invalid composite destination",
                                 f"{part!r} of {destination!r} is temporary, renamed or routed to another "
                                 "connector: a composite destination's parts must all go to one connector")
        if Capability.COMPOSITE_DESTINATIONS not in whole.capabilities:
            raise StompError("composite destinations are not supported here",
                             f"the {whole.name} connector cannot send to {destination!r}; send to each part")
