"""A connection's subscriptions: the :class:`StompSubscription` a connector delivers to, what a
SUBSCRIBE asks for (:func:`read_subscribe`), and who owns a durable subscription (:class:`DurableClaims`).

The subscription hands each delivery to its :class:`SubscriptionOwner` (the session) and keeps its
pending acknowledgements (:class:`gateway.stomp.ack_ledger.PendingAcks`); nothing here writes a frame.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from gateway.broker.wildcards import is_wildcard
from gateway.errors import SelectorError
from gateway.interfaces import ACK_MODES, Capability, IConnector, IConsumer, IImmediateAcks, ISubscription
from gateway.message.model import Message
from gateway.selector import compile_selector
from gateway.stomp.ack_ledger import PendingAcks
from gateway.stomp.delivery import MessageEncoder
from gateway.stomp.durable_owners import DurableOwners
from gateway.stomp.errors import StompError, required
from gateway.stomp.settings import StompSettings
from gateway.wire.frame import Frame


class SubscriptionOwner(Protocol):
    """What a subscription asks of its session."""

    def deliver(self, subscription: StompSubscription, message: Message, tag: Any) -> bool:
        """Write ``message`` to the client; False when it was not taken."""
        ...

    def fail(self, error: StompError, frame: Frame | None = None) -> None:
        """End the connection with ``error``."""
        ...


@implementer(IConsumer)
class StompSubscription:
    """A client's subscription; receives deliveries from a connector."""

    def __init__(self, session: SubscriptionOwner, sub_id: str, destination: str, ack_mode: str,
                 transformation: str | None = None) -> None:
        self.session = session
        self.id = sub_id
        self.destination = destination
        self.ack_mode = ack_mode
        self.transformation = transformation
        self.subscription: ISubscription | None = None
        self.connector: IConnector | None = None
        """Where the subscription lives (set at SUBSCRIBE)."""
        self.durable_name: str | None = None
        self.acks = PendingAcks()
        """Its deliveries waiting for an ACK or NACK (kept by the session's ack ledger)."""
        self.acknowledge_one: Callable[[Any], Deferred[Any] | None] | None = None
        """Acknowledges one delivery tag at the live subscription without a Deferred when nothing
        is to be waited for (see :meth:`attach`); None for a connector without :class:`IImmediateAcks`."""
        self.closed = False
        self.wildcard = is_wildcard(destination)
        """A wildcard topic or queue subscription: each MESSAGE shows its own destination (as ActiveMQ's do)."""
        self.encoder: MessageEncoder | None = None
        """Writes this subscription's MESSAGE frames (made at the first delivery, for the session's version)."""

    def attach(self, live: ISubscription) -> None:
        """The connector made the subscription: ``live`` takes its acknowledgements from now on."""
        self.subscription = live
        if IImmediateAcks.providedBy(live):
            one = getattr(live, "acknowledge_one", None)  # (the embedded broker's queues: no list)
            if one is None:
                acknowledge = live.acknowledge

                def one(tag: Any) -> Deferred[Any] | None:
                    result: Deferred[Any] | None = acknowledge([tag])
                    return result
            self.acknowledge_one = one

    @property
    def unacked(self) -> dict[str, Any]:
        """Delivery key -> connector tag of each unacknowledged delivery, oldest first."""
        return self.acks.unacked

    def deliver(self, message: Message, tag: Any) -> bool:
        if self.closed:
            return False
        return self.session.deliver(self, message, tag)

    def subscription_failed(self, reason: Exception) -> None:
        if not self.closed:
            self.session.fail(StompError("subscription ended", f"subscription {self.id!r}: {reason}"))

    def close(self, *, delete: bool) -> Deferred[Any]:
        """Stop taking deliveries and close the live subscription (``delete``: a durable one for good)."""
        self.closed = True
        live = self.subscription
        if live is None:
            return succeed(None)
        result: Deferred[Any] = live.unsubscribe() if delete else live.close()
        return result


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """What a SUBSCRIBE frame asks for, its headers checked."""

    sub_id: str
    destination: str
    ack_mode: str
    selector: str | None
    prefetch: int
    transformation: str | None
    durable: str | None
    exclusive: bool
    browser: bool


def read_subscribe(frame: Frame, version: str, settings: StompSettings, held: Collection[str],
                   check_transformation: Callable[[str], None] | None = None) -> SubscribeRequest:
    """Check a SUBSCRIBE's headers (``held``: the ids of the connection's subscriptions;
    ``check_transformation``: refuses an unknown ``transformation``); a :class:`StompError` names
    the first bad one."""
    headers = frame.headers
    destination = required(frame, "destination")
    sub_id = headers.get("id") if version != "1.0" or "id" in headers else destination
    if sub_id is None:
        raise StompError("missing id header", "SUBSCRIBE requires an 'id' header in STOMP 1.1 and 1.2")
    if sub_id in held:
        raise StompError("duplicate subscription id", f"subscription id {sub_id!r} is already in use")
    if len(held) >= settings.max_subscriptions:
        raise StompError("too many subscriptions",
                         f"a connection may hold at most {settings.max_subscriptions} subscriptions")
    ack_mode = headers.get("ack", "auto")
    if ack_mode not in ACK_MODES:
        raise StompError("invalid ack header", f"ack {ack_mode!r} is not one of {', '.join(ACK_MODES)}")
    selector = headers.get("selector")
    if selector is not None and selector.strip():
        try:
            compile_selector(selector)
        except SelectorError as error:
            raise StompError("invalid selector", str(error)) from None
    else:
        selector = None
    prefetch = _prefetch(headers, settings.default_prefetch)
    transformation = headers.get("transformation")
    if transformation is not None and check_transformation is not None:
        check_transformation(transformation)
    return SubscribeRequest(
        sub_id=sub_id,
        destination=destination,
        ack_mode=ack_mode,
        selector=selector,
        prefetch=prefetch,
        transformation=transformation,
        durable=headers.get("activemq.subscriptionName") or headers.get("durable-subscription-name"),
        exclusive=_flag(headers, "activemq.exclusive"),
        browser=_flag(headers, "browser"),
    )


def _prefetch(headers: dict[str, str], default: int) -> int:
    for name in ("activemq.prefetchSize", "prefetch-count"):
        value = headers.get(name)
        if value is not None:
            if not value.isdigit() or int(value) < 1:
                raise StompError(f"invalid {name} header", f"{name} {value!r} is not a positive integer")
            return int(value)
    return default


def _flag(headers: dict[str, str], name: str) -> bool:
    """A SUBSCRIBE header that is ``true`` or ``false`` (absent: false)."""
    value = headers.get(name)
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    raise StompError(f"invalid {name} header", f"{name} {value!r} is neither 'true' nor 'false'")


def check_capabilities(connector: IConnector, request: SubscribeRequest) -> None:
    """Refuse ``activemq.exclusive``, ``browser`` or a wildcard topic or queue where the target cannot honour them."""
    for asked, capability, what in (
        (request.exclusive, Capability.EXCLUSIVE_CONSUMERS, "activemq.exclusive:true"),
        (request.browser, Capability.BROWSE, "browser:true"),
        (is_wildcard(request.destination), Capability.WILDCARD_SUBSCRIPTIONS, "a wildcard destination"),
    ):
        if asked and capability not in connector.capabilities:
            raise StompError(f"{what} is not supported here",
                             f"the {connector.name} connector cannot honour {what}; subscribe without it")


class DurableClaims:
    """Who owns a durable subscription: the one check of SUBSCRIBE and UNSUBSCRIBE.

    The embedded broker keeps its own owners; a connector's are in :class:`DurableOwners` (not
    consulted without a verified login).
    """

    def __init__(self, embedded: IConnector, owners: DurableOwners | None) -> None:
        self.embedded = embedded
        self.owners = owners

    def owner(self, connector: IConnector, client_id: str | None, login: str | None, name: str) -> str | None:
        """The login owning the durable subscription ``name`` of ``client_id`` at ``connector`` (None: nobody's)."""
        if connector is self.embedded:
            if not client_id:
                return None
            owner: str | None = connector.durable_owner(client_id, name)  # type: ignore[attr-defined]
            return owner
        if self.owners is None or login is None:
            return None
        return self.owners.owner(connector.name, client_id or "", name)

    def check(self, connector: IConnector, client_id: str | None, login: str | None, name: str | None) -> None:
        """ERROR when the durable subscription ``name`` at ``connector`` belongs to another login."""
        if not name:
            return
        owner = self.owner(connector, client_id, login, name)
        if owner is not None and owner != login:
            raise StompError(f"durable subscription {name!r} belongs to another login",
                             f"{name!r} of client-id {client_id!r} was created by another login; "
                             "nothing was changed")

    def claim(self, connector: IConnector, client_id: str | None, login: str | None, name: str | None) -> bool:
        """Check ``name`` (SUBSCRIBE) and, at a connector, record ``login`` as its owner when it has
        none; True when recorded now (the embedded broker records its own)."""
        self.check(connector, client_id, login, name)
        if not name or connector is self.embedded or self.owners is None or login is None:
            return False
        return self.owners.claim(connector.name, client_id or "", name, login)

    def release(self, connector: IConnector, client_id: str | None, login: str | None, name: str | None) -> None:
        """Forget the owner of ``name`` at ``connector`` (deleted, or never made)."""
        owners = self.owners
        if (name and connector is not self.embedded and owners is not None and login is not None
                and owners.owner(connector.name, client_id or "", name) == login):
            owners.release(connector.name, client_id or "", name)
