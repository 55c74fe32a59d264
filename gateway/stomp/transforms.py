"""The STOMP session's use of the transformer chains (GlassFish bridge order).

:class:`SessionTransforms` runs the inbound chain on each SEND before
routing and the outbound chain on each delivery before the MESSAGE frame,
and turns the chain's outcomes into what the session does: pass the message
on, consume it (dropped), send it to a dead-letter destination, or fail the
frame with an ERROR.  When no chain entry and no ``transformation`` header
applies, nothing but a cached lookup happens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from gateway.message.model import MapMessage, Message
from gateway.transform import DeadLettered, Deliver, Dropped, Outcome, Rejected, TransformChains, TransformContext
from gateway.transform.builtin import sent_form

if TYPE_CHECKING:  # pragma: no cover
    from gateway.stomp.session import StompSession, StompSubscription
    from gateway.wire.frame import Frame


class SessionTransforms:
    """Adapts :class:`TransformChains` to the session's transformer hook."""

    def __init__(self, chains: TransformChains) -> None:
        self.chains = chains
        self._outbound_idle = chains.passes_through("outbound", None)
        """No chain entry applies to outbound messages (the chains do not change once made)."""
        self._inbound_idle = chains.passes_through("inbound", None)
        """No chain entry applies to inbound messages of a SEND that names no transformation."""

    def check_transformation(self, name: str | None) -> None:
        """Raise TransformError if a SUBSCRIBE names an unknown transformer."""
        self.chains.check_transformation(name)

    def passes_through(self, frame: Frame) -> bool:
        """No inbound chain entry applies and the SEND names no (honoured) ``transformation``."""
        return self.chains.passes_through("inbound", frame.headers.get("transformation"))

    def inbound(self, message: Message, session: StompSession, frame: Frame) -> Message | Deferred[Any] | None:
        transformation = frame.headers.get("transformation")
        if transformation is None and self._inbound_idle:
            return message  # (the usual case, decided without a call; issue 39)
        if self.chains.passes_through("inbound", transformation):
            return message
        context = TransformContext(
            "inbound", frame.headers.get("destination", message.destination), message.destination,
            session.login, transformation=transformation,
        )
        outcome = self.chains.run_now(message, context, owned=True)
        if isinstance(outcome, Deferred):
            return outcome.addCallback(self._inbound_outcome, session)
        return self._inbound_outcome(outcome, session)

    def _inbound_outcome(self, outcome: Outcome, session: StompSession) -> Message | Deferred[Any] | None:
        if isinstance(outcome, Deliver):
            outcome.message.destination = outcome.destination
            return outcome.message
        if isinstance(outcome, Dropped):
            return None
        if isinstance(outcome, DeadLettered):
            return outcome.message  # message.destination is the dead-letter destination
        assert isinstance(outcome, Rejected)
        raise outcome.error

    def outbound(self, message: Message, session: StompSession,
                 subscription: StompSubscription) -> Message | Deferred[Any] | None:
        # A map sent with jms-map-xml / jms-map-json goes to a subscriber that asked for no
        # transformation in the form it was sent, labelled (ActiveMQ does the same); any other
        # map still meets the GlassFish rule in the session.
        if self._outbound_idle and subscription.transformation is None and not isinstance(message, MapMessage):
            return message  # (the usual case, decided without a call)
        transformation = subscription.transformation or sent_form(message)
        if self.chains.passes_through("outbound", transformation):  # (the usual case: nothing to build or run)
            return message
        context = TransformContext(
            "outbound", message.destination, subscription.destination, session.login,
            transformation=transformation,
        )
        outcome = self.chains.run_now(message, context)
        if isinstance(outcome, Deferred):
            return outcome.addCallback(self._outbound_outcome, session)
        return self._outbound_outcome(outcome, session)

    @property
    def outbound_idle(self) -> bool:
        """No chain entry applies to outbound messages: :meth:`outbound` passes on every Text or Bytes
        message of a subscription without a ``transformation`` (the session then skips the call)."""
        return self._outbound_idle

    def _outbound_outcome(self, outcome: Outcome, session: StompSession) -> Message | Deferred[Any] | None:
        if isinstance(outcome, Deliver):
            return outcome.message
        if isinstance(outcome, Dropped):
            return None
        if isinstance(outcome, DeadLettered):
            resolved = session.destinations.resolve(outcome.destination)
            outcome.message.destination = resolved.destination
            sent: Deferred[None] = resolved.connector.send(outcome.message)
            return sent.addCallback(lambda _: None)
        assert isinstance(outcome, Rejected)
        raise outcome.error


