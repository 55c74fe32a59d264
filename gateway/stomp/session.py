"""The STOMP server session: one client connection's protocol state machine.

It receives decoded :class:`Frame` objects and answers through a
:class:`FrameSink` (the Twisted protocol, or a test double): CONNECT and
version/heart-beat negotiation, authentication through ``twisted.cred``,
SEND routed to a connector (RECEIPT only once the connector confirmed),
SUBSCRIBE/UNSUBSCRIBE, ACK/NACK in the three ack modes, transactions,
temporary queues and DISCONNECT.  Every failure becomes an ERROR frame
(``message`` header, a body saying what and where, ``receipt-id`` when the
frame asked for a receipt) followed by closing this connection only - except
a SEND or SUBSCRIBE that ``[[authorization]]`` refuses: its ERROR leaves the
connection open for what the login may do (as ActiveMQ does).  A CONNECT from
an address with too many failed logins is refused unchecked
(:mod:`gateway.security.login_throttle`).

The session never touches a socket and takes its clock, connectors and
portal as arguments.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.cred.credentials import Anonymous, UsernamePassword
from twisted.cred.error import LoginFailed, UnauthorizedLogin
from twisted.cred.portal import Portal
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway import __version__
from gateway.broker.composite import composite_parts
from gateway.broker.settings import BrokerSettings
from gateway.broker.wildcards import is_wildcard
from gateway.deferreds import gather
from gateway.errors import DestinationError, GatewayError, NotOwner, SelectorError, StompProtocolError
from gateway.flow import Congestion
from gateway.interfaces import (
    ACK_MODES,
    Capability,
    IAuthorizer,
    IConnector,
    IConsumer,
    IFlowControlled,
    IImmediateAcks,
    IStompUser,
    ISubscription,
    ITransactionalAcks,
    Permission,
    SubscriptionSpec,
)
from gateway.message.convert import frame_to_message, message_to_frame
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.routing.destination_map import DestinationMap, Resolved
from gateway.security.auth import CertificateIdentity
from gateway.security.login_throttle import LoginThrottle
from gateway.stomp.delivery import MessageEncoder
from gateway.stomp.durable_owners import DurableOwners
from gateway.stomp.receipts import ReceiptLine, receipt_for
from gateway.stomp.sender_identity import stamp_sender
from gateway.stomp.settings import StompSettings
from gateway.wire.codec import unrepresentable
from gateway.wire.frame import VERSIONS, Frame

SERVER_NAME = f"jmsgateway/{__version__}"
TEMP_PREFIXES = {"/temp-queue/": "/remote-temp-queue/", "/temp-topic/": "/remote-temp-topic/"}
_TEMP_CLIENT_PREFIXES = tuple(TEMP_PREFIXES)

_session_ids = itertools.count(1)
_STOMP_MESSAGES = (TextMessage, BytesMessage)
"""The message types a STOMP client can receive (the GlassFish rule)."""
_UNSETTLED = (Failure, Deferred)
"""What the result of a Deferred that has not succeeded is (a tuple: ``Failure | Deferred`` builds a union per call)."""
_UNRECEIPTED_SEND = Frame("SEND", {})
"""Stands for a SEND without a receipt when its outcome is an error (only its command is read)."""

COVERED_IDS = 4096
"""Message ids a STOMP 1.0/1.1 ``client`` subscription remembers as acknowledged (see
:attr:`StompSubscription.covered_ids`)."""


class FrameSink(Protocol):
    """What the session writes to: the protocol glue."""

    def send_frame(self, frame: Frame) -> None: ...

    def send_message(self, data: bytes) -> None:
        """Write a MESSAGE frame already encoded for the negotiated version (:mod:`gateway.stomp.delivery`)."""
        ...

    def send_heartbeat(self) -> None: ...

    def set_version(self, version: str) -> None: ...

    def close(self) -> None: ...

    def hold_input(self) -> None:
        """Stop reading from the client (a target is congested)."""
        ...

    def release_input(self) -> None:
        """Read again once every hold was released."""
        ...


class InboundTransformer(Protocol):
    """The inbound/outbound transformer hook (:mod:`gateway.stomp.transforms`).

    Each returns the message to pass on, None to consume it, or a Deferred of
    either; raising fails the frame (inbound) or the connection (outbound).
    """

    def check_transformation(self, name: str | None) -> None: ...

    def passes_through(self, frame: Frame) -> bool:
        """Whether :meth:`inbound` would pass any message of this SEND on untouched."""
        ...

    def inbound(self, message: Message, session: StompSession, frame: Frame) -> Any: ...

    def outbound(self, message: Message, session: StompSession, subscription: StompSubscription) -> Any: ...


class StompError(GatewayError):
    """An error answered with an ERROR frame (and closing the connection)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


@implementer(IConsumer)
class StompSubscription:
    """A client's subscription; receives deliveries from a connector."""

    def __init__(self, session: StompSession, sub_id: str, destination: str, ack_mode: str,
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
        self.acknowledge: Callable[[list[Any]], Deferred[Any] | None] | None = None
        """The live subscription's :meth:`IImmediateAcks.acknowledge` when it has one."""
        self.closed = False
        self.backlog: list[tuple[Message, Any]] | None = None
        self.wildcard = is_wildcard(destination)
        """A wildcard topic subscription: each MESSAGE shows its own topic (as ActiveMQ's do)."""
        self.encoder: MessageEncoder | None = None
        """Writes this subscription's MESSAGE frames (made at the first delivery, for the session's version)."""

    def deliver(self, message: Message, tag: Any) -> bool:
        if self.closed:
            return False
        return self.session.deliver(self, message, tag)

    def subscription_failed(self, reason: Exception) -> None:
        if not self.closed:
            self.session.fail(StompError("subscription ended", f"subscription {self.id!r}: {reason}"))


@dataclass(slots=True)
class Transaction:
    """A client transaction: sends and acks applied only at COMMIT."""

    sends: list[tuple[IConnector, Message]] = field(default_factory=list)
    acks: list[tuple[StompSubscription, list[Any]]] = field(default_factory=list)
    nacks: list[tuple[StompSubscription, list[Any]]] = field(default_factory=list)


class StompSession:
    """State machine of one STOMP connection (server side)."""

    log = Logger()

    def __init__(
        self,
        sink: FrameSink,
        clock: IReactorTime,
        destinations: DestinationMap,
        *,
        settings: StompSettings | None = None,
        broker_settings: BrokerSettings | None = None,
        portal: Portal | None = None,
        transformer: InboundTransformer | None = None,
        peer: str = "",
        authorizer: IAuthorizer | None = None,
        throttle: LoginThrottle | None = None,
        certificate_name: Callable[[], str | None] | None = None,
        durable_owners: DurableOwners | None = None,
    ) -> None:
        self.sink = sink
        self.clock = clock
        self.destinations = destinations
        self.settings = settings or StompSettings()
        self.default_persistent = (broker_settings or BrokerSettings()).default_persistent
        self.portal = portal
        self.transformer = transformer
        self.peer = peer
        self.authorizer = authorizer
        """Asked before every SEND and SUBSCRIBE (None: everything allowed)."""
        self.throttle = throttle
        self.certificate_name = certificate_name
        """The verified client certificate's subject CN (``mtls:`` listeners), for certificate logins."""
        self.durable_owners = durable_owners
        """Owners of durable subscriptions at connectors (None without [auth]: nothing recorded or checked)."""
        self.session_id = f"jmsgw-{next(_session_ids)}"
        self.state = "new"
        self.version = "1.0"
        self.login: str | None = None
        self.connected_logged = False
        """Whether the connect was logged at info (then the disconnect is too)."""
        self.client_id: str | None = None
        self.subscriptions: dict[str, StompSubscription] = {}
        self.transactions: dict[str, Transaction] = {}
        self.temporaries: set[str] = set()
        self._ack_ids: dict[str, StompSubscription] = {}
        self._ack_seq = itertools.count(1)
        self._backlog: list[Frame] = []
        self._answers = ReceiptLine(self._write, self._close_now, self._error_answer)
        """RECEIPTs and ERRORs, written in the order of the frames they answer (:mod:`gateway.stomp.receipts`)."""
        self._paused = False
        self._held_by: set[Congestion] = set()
        """Congested targets this session stopped reading for (:mod:`gateway.flow`)."""
        self._warned_held_consumer = False
        self.last_received = clock.seconds()
        self.last_sent = clock.seconds()
        self._heartbeat_out: IDelayedCall | None = None
        self._heartbeat_in: IDelayedCall | None = None
        self.out_interval = 0.0
        self.in_interval = 0.0

    @property
    def verified_login(self) -> str | None:
        """The login the portal verified (None without authentication: a CONNECT's ``login`` is its word)."""
        return self.login if self.portal is not None else None

    # -- entry points from the protocol -----------------------------------

    def data_received(self) -> None:
        """Any bytes arrived (frames or heart-beats): the peer is alive."""
        self.last_received = self.clock.seconds()

    def frame_received(self, frame: Frame) -> None:
        """Handle one complete frame from the client."""
        state = self.state
        if state != "connected":
            if state in ("closing", "closed", "disconnecting"):
                return
            if state == "connecting":
                self._backlog.append(frame)
                return
        try:
            handler = self._handlers.get(frame.command)
            if handler is None:
                raise StompError("unknown command", f"{frame.command!r} is not a STOMP client command")
            if state == "new" and frame.command not in ("CONNECT", "STOMP"):
                raise StompError("not connected", f"expected CONNECT or STOMP, got {frame.command}")
            receipt = frame.headers.get("receipt")
            if receipt is not None and unrepresentable("receipt-id", receipt, self.version):
                frame.headers.pop("receipt")  # (the ERROR cannot carry it either)
                raise StompError("invalid receipt header",
                                 f"receipt {receipt!r} cannot be sent back in a STOMP {self.version} RECEIPT")
            handler(self, frame)
        except (StompError, StompProtocolError) as error:
            self.fail(error, frame)
        except GatewayError as error:
            self.fail(StompError(_error_title(error), str(error)), frame)
        except Exception:
            self.log.failure("internal error handling {command} from {peer}", command=frame.command, peer=self.peer)
            self.fail(StompError("internal error", f"the gateway failed to process {frame.command}"), frame)

    def protocol_error(self, error: StompProtocolError) -> None:
        """The codec could not read the client's bytes."""
        self.fail(error)

    def connection_lost(self) -> None:
        """The transport is gone: release everything the connection held."""
        if self.state == "closed":
            return
        if self.connected_logged:
            self.log.info("STOMP disconnect from {peer} (login {login})", peer=self.peer, login=self.login or "-")
        self.state = "closed"
        self._answers.abandon()
        self._cancel_heartbeats()
        # Nothing more is delivered here: what the rollback and the closes
        # return goes to other consumers, each message counted once.
        self._stop_deliveries()
        for transaction in self.transactions.values():
            self._rollback(transaction)
        self.transactions.clear()
        for subscription in list(self.subscriptions.values()):
            self._close_subscription(subscription, delete=False)
        self.subscriptions.clear()
        embedded = self.destinations.embedded
        for destination in self.temporaries:
            embedded.delete_destination(destination)  # type: ignore[attr-defined]
        self.temporaries.clear()

    def _stop_deliveries(self) -> None:
        """The connection is ending: no subscription takes anything more."""
        self.pause_deliveries()

    def pause_deliveries(self) -> None:
        """The transport's buffer is full: stop deliveries until resumed."""
        self._paused = True
        for subscription in self.subscriptions.values():
            if subscription.subscription is not None:
                subscription.subscription.pause()

    def resume_deliveries(self) -> None:
        if self.state in ("closing", "closed"):
            return
        self._paused = False
        for subscription in list(self.subscriptions.values()):
            if self._paused:  # (what the previous ones got filled the transport again)
                return
            if subscription.subscription is not None:
                subscription.subscription.resume()

    # -- errors ------------------------------------------------------------

    def fail(self, error: StompError | StompProtocolError, frame: Frame | None = None) -> None:
        """Stop the connection for ``error``: its ERROR frame goes out after the answers of the
        frames before (:class:`ReceiptLine`), then the connection closes."""
        if self.state in ("closing", "closed"):
            return
        self._answers.now(self._error_frame(error, frame), final=True)

    def _error_frame(self, error: StompError | StompProtocolError, frame: Frame | None) -> Frame:
        """The ERROR frame about ``error``; from now on nothing more is read or delivered."""
        headers = {"message": error.message, "content-type": "text/plain"}
        if frame is not None and "receipt" in frame.headers:
            headers["receipt-id"] = frame.headers["receipt"]
        if isinstance(error, StompError) and error.message == "unsupported protocol version":
            headers["version"] = ",".join(VERSIONS)
        detail = error.detail or error.message
        text = f"{frame.command} frame: {detail}" if frame is not None else detail
        self.log.info("ERROR to {peer}: {message}: {detail}", peer=self.peer, message=error.message, detail=detail)
        if self.state not in ("closing", "closed"):
            self.state = "closing"
            self._stop_deliveries()
        return Frame("ERROR", headers, f"{text}\n".encode())

    def _stomp_error(self, reason: BaseException | Failure, frame: Frame) -> StompError | StompProtocolError:
        """What the client is told about ``reason`` (a frame's failure)."""
        error = reason.value if isinstance(reason, Failure) else reason
        if isinstance(error, StompError | StompProtocolError):
            return error
        if isinstance(error, GatewayError):
            return StompError(_error_title(error), str(error))
        self.log.failure("unexpected error handling {command}",
                         reason if isinstance(reason, Failure) else Failure(reason), command=frame.command)
        return StompError("internal error", f"the gateway failed to process {frame.command}")

    def _error_answer(self, reason: BaseException | Failure, frame: Frame) -> Frame:
        """:class:`ReceiptLine`: the ERROR answering a frame that failed later."""
        return self._error_frame(self._stomp_error(reason, frame), frame)

    def _failure(self, failure: Failure, frame: Frame) -> None:
        self.fail(self._stomp_error(failure, frame), frame)

    def _track(self, d: Deferred[Any], frame: Frame) -> None:
        """Answer ``frame`` when ``d`` fires (RECEIPT, or ERROR and close), in frame order."""
        self._answers.track(d, frame)

    def _receipt(self, frame: Frame) -> None:
        """``frame`` is done: its RECEIPT, if it asked for one, goes out in its turn."""
        if "receipt" in frame.headers:
            self._answers.now(receipt_for(frame))

    def _close_now(self) -> None:
        """:class:`ReceiptLine`: the final answer was written."""
        if self.state != "closed":
            self.state = "closing"
        self.sink.close()

    def _write(self, frame: Frame) -> None:
        self.last_sent = self.clock.seconds()
        self.sink.send_frame(frame)

    # -- CONNECT -----------------------------------------------------------

    def _on_connect(self, frame: Frame) -> None:
        if self.state != "new":
            raise StompError("already connected", f"{frame.command} received on a connected session")
        headers = frame.headers
        accepted = headers.get("accept-version")
        if accepted is None:
            version = "1.0"
        else:
            offered = {part.strip() for part in accepted.split(",")}
            common = [v for v in VERSIONS if v in offered]
            if not common:
                raise StompError(
                    "unsupported protocol version",
                    f"the client accepts {accepted!r}; this server speaks {', '.join(VERSIONS)}",
                )
            version = common[-1]
        heartbeat = self._parse_heartbeat(headers.get("heart-beat", "0,0")) if version != "1.0" else (0, 0)
        self.version = version
        self.sink.set_version(version)
        self.client_id = headers.get("client-id")
        login = headers.get("login")
        passcode = headers.get("passcode", "")
        self.state = "connecting"
        if self.portal is None:
            self.login = login
            self._connected(frame, heartbeat)
            return
        address = self.peer.rsplit(":", 1)[0]
        throttle = self.throttle
        refusal = throttle.admit(address, login) if throttle is not None else None
        if refusal is not None:
            self.state = "new"
            raise StompError("too many failed logins", refusal)
        credentials: Any = UsernamePassword(login.encode(), passcode.encode()) if login is not None else Anonymous()
        common_name = self.certificate_name() if self.certificate_name is not None else None
        if common_name is not None and "passcode" not in headers:
            credentials = CertificateIdentity(common_name, login)
        portal = self.portal
        if throttle is not None:  # (at most a few checks of one address at once)
            d = throttle.check(address, lambda: portal.login(credentials, None, IStompUser))
        else:
            d = portal.login(credentials, None, IStompUser)

        def logged_in(result: tuple[Any, Any, Callable[[], None]]) -> None:
            self.login = result[1].login
            if throttle is not None:
                throttle.settle(address, self.login, True)
            self._connected(frame, heartbeat)

        def refused(failure: Failure) -> None:
            self.state = "new"
            wrong = failure.check(UnauthorizedLogin, LoginFailed) is not None
            if throttle is not None:  # (an error of the check itself is no guess: it only ends the attempt)
                throttle.settle(address, login, False) if wrong else throttle.settle(address, None, True)
            if wrong:
                who = f"login {login!r}" if login is not None else "an anonymous login"
                self.fail(StompError("authentication failed", f"{who} was refused"), frame)
            else:
                self._failure(failure, frame)

        d.addCallbacks(logged_in, refused)

    def _parse_heartbeat(self, value: str) -> tuple[int, int]:
        parts = value.split(",")
        if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
            raise StompError("invalid heart-beat header", f"heart-beat {value!r} is not two integers 'cx,cy'")
        return int(parts[0]), int(parts[1])

    def _connected(self, frame: Frame, heartbeat: tuple[int, int]) -> None:
        client_send, client_receive = heartbeat
        server_send = self.settings.heartbeat_send_ms
        server_receive = self.settings.heartbeat_receive_ms
        headers = {"version": self.version, "server": SERVER_NAME, "session": self.session_id}
        if self.version != "1.0":
            headers["heart-beat"] = f"{server_send},{server_receive}"
            self.out_interval = max(server_send, client_receive) / 1000.0 if server_send and client_receive else 0.0
            self.in_interval = max(client_send, server_receive) / 1000.0 if client_send and server_receive else 0.0
        self.state = "connected"
        self.connected_logged = True
        self.log.info("STOMP {version} connect from {peer} (login {login})", version=self.version, peer=self.peer,
                      login=self.login or "-")
        self._write(Frame("CONNECTED", headers))
        self._start_heartbeats()
        backlog, self._backlog = self._backlog, []
        for queued in backlog:
            self.frame_received(queued)

    # -- heart-beats -------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self.out_interval:
            self._heartbeat_out = self.clock.callLater(self.out_interval, self._send_heartbeat)
        if self.in_interval:
            self.last_received = self.clock.seconds()
            self._heartbeat_in = self.clock.callLater(
                self.in_interval * self.settings.heartbeat_grace, self._check_heartbeat
            )

    def _send_heartbeat(self) -> None:
        if self.state != "connected":
            return
        idle = self.clock.seconds() - self.last_sent
        if idle >= self.out_interval * 0.99:
            self.last_sent = self.clock.seconds()
            self.sink.send_heartbeat()
            idle = 0.0
        self._heartbeat_out = self.clock.callLater(self.out_interval - idle, self._send_heartbeat)

    def _check_heartbeat(self) -> None:
        if self.state != "connected":
            return
        limit = self.in_interval * self.settings.heartbeat_grace
        if self._held_by:  # not reading from the client (a target is congested): its silence says nothing
            self.last_received = self.clock.seconds()
        silent = self.clock.seconds() - self.last_received
        if silent >= limit:
            self.log.info("no heart-beat from {peer} for {silent:.1f}s (limit {limit:.1f}s): closing",
                          peer=self.peer, silent=silent, limit=limit)
            self.state = "closing"
            self.sink.close()
            return
        self._heartbeat_in = self.clock.callLater(limit - silent, self._check_heartbeat)

    def _cancel_heartbeats(self) -> None:
        for call in (self._heartbeat_out, self._heartbeat_in):
            if call is not None and call.active():
                call.cancel()
        self._heartbeat_out = self._heartbeat_in = None

    # -- SEND --------------------------------------------------------------

    def _required(self, frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None or value == "":
            raise StompError(f"missing {name} header", f"{frame.command} requires a {name!r} header")
        return value

    def _transaction(self, frame: Frame) -> Transaction | None:
        name = frame.headers.get("transaction")
        if name is None:
            return None
        transaction = self.transactions.get(name)
        if transaction is None:
            raise StompError("unknown transaction", f"transaction {name!r} was not begun (or already ended)")
        return transaction

    def _on_send(self, frame: Frame) -> None:
        headers = frame.headers
        destination = headers.get("destination")
        if not destination:
            destination = self._required(frame, "destination")  # (raises)
        if "," in destination:
            self._check_composite(destination)
        if self.authorizer is not None and not self._authorized(frame, destination, "write"):
            return
        stamp_sender(headers, self.verified_login)
        transaction = self._transaction(frame) if "transaction" in headers else None
        resolved: Resolved | None = None
        temporary = destination.startswith("/temp-")
        if transaction is None and "receipt" not in headers and not temporary:
            resolved = self.destinations.resolve(destination)  # (cached; only a forwarding target pays more)
            if (
                resolved.forward is not None
                and not headers.get("reply-to", "").startswith("/temp-")
                and (self.transformer is None or self.transformer.passes_through(frame))
                and self._forward(resolved.forward, resolved.destination, frame)
            ):
                if resolved.congestion is not None and resolved.congestion.congested:
                    self._hold_for(resolved.congestion)
                return
        message = frame_to_message(frame, default_persistent=self.default_persistent)
        message.destination = self._server_destination(destination, create=True) if temporary else destination
        if message.reply_to is not None and message.reply_to.startswith(_TEMP_CLIENT_PREFIXES):
            message.reply_to = self._server_destination(message.reply_to, create=True)
        sending: Message | None = message
        if self.transformer is not None:
            transformed = self.transformer.inbound(message, self, frame)
            # (a Message or None is the common answer; isinstance against Deferred, an ABC, costs more)
            if transformed is not None and not isinstance(transformed, Message):
                transformed.addCallback(self._routed_send, frame, transaction)
                self._track(transformed, frame)
                return
            sending = transformed
        if sending is not None and transaction is None:
            if resolved is None or sending.destination is not destination:  # (a transformer may have moved it)
                resolved = self.destinations.resolve(sending.destination)
            sending.destination = resolved.destination
            if resolved.post is not None:
                self._post(resolved.post, sending, frame)
            else:
                self._track(resolved.connector.send(sending), frame)
            if resolved.congestion is not None and resolved.congestion.congested:
                self._hold_for(resolved.congestion)
            return
        self._track(self._routed_send(sending, frame, transaction), frame)

    def _hold_for(self, congestion: Congestion) -> None:
        """Stop reading from the client until ``congestion`` clears (once per target)."""
        if congestion in self._held_by:
            return
        self._held_by.add(congestion)
        self.sink.hold_input()
        self._warn_held_consumer(congestion)

        def ready() -> None:
            self._held_by.discard(congestion)
            self.last_received = self.clock.seconds()  # heart-beats were not read meanwhile
            self.sink.release_input()

        congestion.when_ready(ready)

    def _warn_held_consumer(self, congestion: Congestion) -> None:
        """A connection that is held and consumes with acknowledgements cannot acknowledge
        meanwhile (its frames are not read, in order): warn once per connection."""
        if self._warned_held_consumer:
            return
        acking = next((sub for sub in self.subscriptions.values() if sub.ack_mode != "auto"), None)
        if acking is None:
            return
        self._warned_held_consumer = True
        self.log.warn(
            "connection {peer} (session {session}) is held ({target} is full) while it consumes with "
            "ack:{ack} (subscription {subscription}): its ACKs are not read until the target has room, "
            "so if its own ACKs must make that room it waits for ever; publish and consume on separate "
            "connections",
            peer=self.peer, session=self.session_id, target=congestion.name, ack=acking.ack_mode,
            subscription=acking.id,
        )

    def _forward(self, forward: Callable[..., bool], destination: str, frame: Frame) -> bool:
        """Offer the SEND to a connector that takes frames as they are (no message
        built); False when it declines and the message path must run."""
        answer = self._answers.later(frame)
        try:
            taken = forward(destination, frame.headers, frame.body, self.default_persistent, answer.settled)
        except BaseException:
            answer.settle(None)  # (the ERROR follows)
            raise
        if not taken:
            answer.settle(None)  # (answered by the message path)
        return taken

    def _post(self, post: Callable[..., None], message: Message, frame: Frame) -> None:
        """Hand ``message`` to a posting connector (no Deferred); RECEIPT or ERROR once it settles,
        in frame order."""
        confirm = "receipt" in frame.headers
        # (without a receipt only its command is read to answer an error: the frame is not kept)
        answer = self._answers.pending(frame if confirm else _UNRECEIPTED_SEND)
        try:
            post(message, answer.settled, confirm)
        except BaseException:  # (an unexpected error before it settled: it never will; ERROR follows)
            answer.settle(None)
            raise
        finally:
            self._answers.place(answer)

    def _routed_send(self, message: Message | None, frame: Frame, transaction: Transaction | None) -> Deferred[None]:
        if message is None:  # dropped by a transformer
            return succeed(None)
        resolved = self.destinations.resolve(message.destination)
        message.destination = resolved.destination
        if transaction is not None:
            transaction.sends.append((resolved.connector, message))
            return succeed(None)
        result: Deferred[None] = resolved.connector.send(message)
        return result

    def _server_destination(self, destination: str, *, create: bool) -> str:
        """Map a client's ``/temp-queue/x`` to this connection's private queue."""
        if not destination.startswith("/temp-"):
            return destination
        for prefix, remote in TEMP_PREFIXES.items():
            if destination.startswith(prefix):
                name = f"{remote}{self.session_id}.{destination[len(prefix):]}"
                if create and name not in self.temporaries:
                    self.temporaries.add(name)
                    self.destinations.embedded.create_temporary(name)  # type: ignore[attr-defined]
                return name
        return destination

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

    def _authorized(self, frame: Frame, destination: str, permission: Permission) -> bool:
        """Whether this login holds ``permission`` on ``destination``; if not, an ERROR that
        leaves the connection open (ActiveMQ's answer to a security exception)."""
        assert self.authorizer is not None
        if destination.startswith(tuple(TEMP_PREFIXES)):  # the connection's own temporary destination
            return True
        # The name and every other name of its target (a Kafka topic under /queue/ and /topic/):
        # an entry on one alias alone does not open the target.
        names = (name for part in composite_parts(destination) for name in self.destinations.aliases(part))
        refused = next((name for name in names
                        if not self.authorizer.check(self.login, permission, name, self.peer)), None)
        if refused is None:  # (check logs and counts a refusal)
            return True
        who = f"login {self.login!r}" if self.login is not None else "an anonymous connection"
        headers = {"message": f"not authorized to {permission} {destination}", "content-type": "text/plain"}
        if "receipt" in frame.headers:
            headers["receipt-id"] = frame.headers["receipt"]
        where = destination if refused == destination else f"{refused}, which reaches the same target as {destination}"
        body = (f"{frame.command} frame: {who} does not hold the {permission!r} permission on {where} "
                "([[authorization]]); nothing was done and the connection stays open\n")
        self._answers.now(Frame("ERROR", headers, body.encode()))
        return False

    # -- SUBSCRIBE / UNSUBSCRIBE --------------------------------------------

    def _on_subscribe(self, frame: Frame) -> None:
        headers = frame.headers
        destination = self._required(frame, "destination")
        sub_id = headers.get("id") if self.version != "1.0" or "id" in headers else destination
        if sub_id is None:
            raise StompError("missing id header", "SUBSCRIBE requires an 'id' header in STOMP 1.1 and 1.2")
        if sub_id in self.subscriptions:
            raise StompError("duplicate subscription id", f"subscription id {sub_id!r} is already in use")
        if len(self.subscriptions) >= self.settings.max_subscriptions:
            raise StompError("too many subscriptions",
                             f"a connection may hold at most {self.settings.max_subscriptions} subscriptions")
        ack_mode = headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise StompError("invalid ack header", f"ack {ack_mode!r} is not one of {', '.join(ACK_MODES)}")
        selector = headers.get("selector")
        if selector is not None and selector.strip():
            _check_selector(selector)
        else:
            selector = None
        prefetch = self._prefetch(headers)
        transformation = headers.get("transformation")
        if transformation is not None and self.transformer is not None:
            self.transformer.check_transformation(transformation)
        durable = headers.get("activemq.subscriptionName") or headers.get("durable-subscription-name")
        exclusive, browser = _flag(headers, "activemq.exclusive"), _flag(headers, "browser")
        if self.authorizer is not None:  # durable subscriptions need admin too (as ActiveMQ's creation does)
            if not self._authorized(frame, destination, "read"):
                return
            if durable and not self._authorized(frame, destination, "admin"):
                return
        server_destination = self._server_destination(destination, create=True)
        if server_destination.startswith(tuple(TEMP_PREFIXES.values())) and server_destination not in self.temporaries:
            raise StompError("temporary destination is private",
                             f"{destination!r} belongs to another connection and cannot be consumed here")
        resolved = self.destinations.resolve(server_destination)
        _check_capabilities(resolved.connector, exclusive, browser, is_wildcard(destination))
        claimed = self._claim_durable(resolved.connector, durable)  # (ERROR if another login's)
        spec = SubscriptionSpec(
            destination=resolved.destination,
            selector=selector,
            ack_mode=ack_mode,
            prefetch=prefetch,
            durable_name=durable,
            client_id=self.client_id,
            owner=self.session_id,
            login=self.verified_login,
            exclusive=exclusive,
            browser=browser,
        )
        subscription = StompSubscription(self, sub_id, destination, ack_mode, transformation)
        subscription.connector, subscription.durable_name = resolved.connector, durable
        self.subscriptions[sub_id] = subscription
        d: Deferred[ISubscription] = resolved.connector.subscribe(spec, subscription)

        def subscribed(live: ISubscription) -> None:
            if subscription.closed:
                live.close()
                return
            subscription.subscription = live
            if IImmediateAcks.providedBy(live):
                subscription.acknowledge = live.acknowledge
            if self._paused:
                live.pause()

        def refused(failure: Failure) -> Failure:
            self.subscriptions.pop(sub_id, None)
            subscription.closed = True
            if claimed:  # (nothing was created: the name is free again)
                self._release_durable(resolved.connector, durable)
            return failure

        d.addCallbacks(subscribed, refused)
        self._track(d, frame)

    def _prefetch(self, headers: dict[str, str]) -> int:
        for name in ("activemq.prefetchSize", "prefetch-count"):
            value = headers.get(name)
            if value is not None:
                if not value.isdigit() or int(value) < 1:
                    raise StompError(f"invalid {name} header", f"{name} {value!r} is not a positive integer")
                return int(value)
        return self.settings.default_prefetch

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.headers.get("id")
        if sub_id is None and self.version == "1.0":
            sub_id = frame.headers.get("destination")
        if sub_id is None:
            raise StompError("missing id header", "UNSUBSCRIBE requires an 'id' header")
        # An UNSUBSCRIBE naming a durable subscription of another login (whatever subscription its
        # id names): an ERROR before anything changes.
        name = frame.headers.get("activemq.subscriptionName") or frame.headers.get("durable-subscription-name")
        named = self.subscriptions.get(sub_id)
        self._check_durable_owner(self.destinations.embedded, name)
        if named is not None and named.connector is not None:
            self._check_durable_owner(named.connector, name)
        subscription = self.subscriptions.pop(sub_id, None)
        if subscription is None:
            raise StompError("unknown subscription", f"there is no subscription with id {sub_id!r}")
        delete = "activemq.subscriptionName" in frame.headers or "durable-subscription-name" in frame.headers
        closed = self._close_subscription(subscription, delete=delete)
        if delete and subscription.connector is not None:  # its owner deleted it: the name is free again
            connector, durable = subscription.connector, subscription.durable_name

            def deleted(result: Any) -> Any:
                self._release_durable(connector, durable)
                return result

            closed.addCallback(deleted)
        self._track(closed, frame)

    def _durable_owner(self, connector: IConnector, name: str) -> str | None:
        """The login owning the durable subscription ``name`` of this connection's client-id at
        ``connector`` (None: nobody's): the embedded broker keeps its own owners, a connector's are in
        :attr:`durable_owners` (not consulted without a verified login)."""
        if connector is self.destinations.embedded:
            if not self.client_id:
                return None
            return connector.durable_owner(self.client_id, name)  # type: ignore[attr-defined]
        if self.durable_owners is None or self.verified_login is None:
            return None
        return self.durable_owners.owner(connector.name, self.client_id or "", name)

    def _check_durable_owner(self, connector: IConnector, name: str | None) -> None:
        """ERROR when the durable subscription ``name`` at ``connector`` belongs to another login
        (the one check of SUBSCRIBE and UNSUBSCRIBE, embedded broker and connectors alike)."""
        if not name:
            return
        owner = self._durable_owner(connector, name)
        if owner is not None and owner != self.verified_login:
            raise StompError(f"durable subscription {name!r} belongs to another login",
                             f"{name!r} of client-id {self.client_id!r} was created by another login; "
                             "nothing was changed")

    def _claim_durable(self, connector: IConnector, name: str | None) -> bool:
        """Check the durable subscription ``name`` (SUBSCRIBE) and, at a connector, record this login
        as its owner when it has none; True when recorded now (the embedded broker records its own)."""
        self._check_durable_owner(connector, name)
        if (not name or connector is self.destinations.embedded or self.durable_owners is None
                or self.verified_login is None):
            return False
        return self.durable_owners.claim(connector.name, self.client_id or "", name, self.verified_login)

    def _release_durable(self, connector: IConnector, name: str | None) -> None:
        """Forget the owner of the durable subscription ``name`` at ``connector`` (deleted, or never made)."""
        owners, client_id, login = self.durable_owners, self.client_id or "", self.verified_login
        if (name and connector is not self.destinations.embedded and owners is not None and login is not None
                and owners.owner(connector.name, client_id, name) == login):
            owners.release(connector.name, client_id, name)

    def _close_subscription(self, subscription: StompSubscription, *, delete: bool) -> Deferred[Any]:
        subscription.closed = True
        for key in subscription.unacked:
            self._ack_ids.pop(key, None)
        subscription.unacked.clear()
        subscription.message_ids.clear()
        subscription.by_message_id.clear()
        subscription.covered_ids.clear()
        live = subscription.subscription
        if live is None:
            return succeed(None)
        result: Deferred[Any] = live.unsubscribe() if delete else live.close()
        return result

    # -- deliveries ----------------------------------------------------------

    def deliver(self, subscription: StompSubscription, message: Message, tag: Any) -> bool:
        """A connector hands a message to one of this connection's subscriptions.

        Returns False when the message was not taken (connection closing, or
        refused by the GlassFish rule), so an ``auto`` delivery is not consumed.
        """
        if self.state != "connected":
            return False
        if self._paused and subscription.subscription is None:
            # The backlog dispatched while SUBSCRIBE is handled filled the
            # transport: the rest waits in the broker (the live subscription,
            # known in a moment, is paused then).
            return False
        if self.transformer is not None:
            try:
                transformed = self.transformer.outbound(message, self, subscription)
            except Exception:
                self._outbound_failed(Failure(), subscription, message)
                return False
            if transformed is not message and isinstance(transformed, Deferred):
                transformed.addCallback(self._deliver_transformed, subscription, tag)
                transformed.addErrback(self._outbound_failed, subscription, message)
                return True
            message = transformed
        return self._deliver_transformed(message, subscription, tag)

    def _deliver_transformed(self, message: Message | None, subscription: StompSubscription, tag: Any) -> bool:
        if self.state != "connected" or subscription.closed:
            return False
        if message is None:  # dropped by an outbound transformer: consumed
            if subscription.subscription is not None and subscription.ack_mode != "auto":
                subscription.subscription.ack([tag])
            return True
        if not isinstance(message, _STOMP_MESSAGES):
            # The GlassFish rule: only Text and Bytes messages reach STOMP clients.
            hint = ("; SUBSCRIBE with transformation:jms-map-json or jms-map-xml to receive a map"
                    if isinstance(message, MapMessage) else "")
            self.fail(StompError(
                "message type not supported",
                f"message {message.message_id} on {subscription.destination} is a {type(message).__name__} after "
                f"the outbound transformers; only TextMessage and BytesMessage can be sent over STOMP{hint}",
            ))
            return False
        ack: str | None = None  # (no ``ack`` header on an auto delivery: there is nothing to acknowledge)
        if subscription.ack_mode != "auto":
            key = f"{self.session_id}-{next(self._ack_seq)}"
            subscription.unacked[key] = tag
            if self.version == "1.2":
                ack = key
                self._ack_ids[key] = subscription
            else:  # acknowledged by message-id: the latest delivery of that id answers
                message_id = message.message_id
                subscription.message_ids[key] = message_id
                subscription.by_message_id.setdefault(message_id, []).append(key)
        encoder = subscription.encoder
        if encoder is None or encoder.version != self.version:
            encoder = subscription.encoder = MessageEncoder(subscription.id, subscription.destination, self.version)
        data = encoder.encode(message, ack) if not subscription.wildcard else None
        if data is None:  # (a header only the general encoder writes, or leaves out; a wildcard's topic)
            shown = None if subscription.wildcard else subscription.destination
            self._write(message_to_frame(message, subscription.id, ack, shown))
        else:
            if self.out_interval:  # (read only by the outgoing heart-beat's timer: no clock read without one)
                self.last_sent = self.clock.seconds()
            self.sink.send_message(data)
        return True

    def _outbound_failed(self, failure: Failure, subscription: StompSubscription, message: Message) -> None:
        self.log.failure("outbound transform failed for message {id}", failure, id=message.message_id)
        where = f"message {message.message_id} on {subscription.destination}"
        self.fail(StompError("outbound transform failed", f"{where}: {failure.getErrorMessage()}"))

    # -- ACK / NACK ----------------------------------------------------------

    def _acked(self, frame: Frame) -> tuple[StompSubscription, list[Any]]:
        headers = frame.headers
        subscription: StompSubscription | None
        if self.version == "1.2":
            key = self._required(frame, "id")
            subscription = self._ack_ids.get(key)
        else:
            message_id = self._required(frame, "message-id")
            sub_id = headers.get("subscription")
            if sub_id is not None:
                subscription = self.subscriptions.get(sub_id)
            else:
                subscription = next((s for s in self.subscriptions.values()
                                     if message_id in s.by_message_id or message_id in s.covered_ids), None)
            deliveries = subscription.by_message_id.get(message_id) if subscription is not None else None
            # The latest delivery of that id: a redelivered copy supersedes an earlier one (Kafka
            # redelivers from a NACKed offset on, records still unacknowledged included).
            key = deliveries[-1] if deliveries else message_id
        if subscription is None or key not in subscription.unacked:
            if self.version != "1.2" and subscription is not None and frame.command == "ACK" \
                    and message_id in subscription.covered_ids:
                return subscription, []  # a cumulative ACK covered every delivery of that id already
            shown = key if self.version == "1.2" else message_id
            raise StompError(f"unknown {frame.command.lower()} id",
                             f"{shown!r} names no unacknowledged message of this connection")
        unacked = subscription.unacked
        if subscription.ack_mode == "client":
            keys = []
            for pending in unacked:
                keys.append(pending)
                if pending == key:
                    break
        else:
            keys = [key]
        tags = []
        message_ids = subscription.message_ids
        covered = subscription.covered_ids if subscription.ack_mode == "client" and frame.command == "ACK" else None
        for pending in keys:
            tags.append(unacked.pop(pending))
            self._ack_ids.pop(pending, None)
            delivered_id = message_ids.pop(pending, None)
            if delivered_id is not None:
                same = subscription.by_message_id[delivered_id]
                same.remove(pending)
                if not same:
                    del subscription.by_message_id[delivered_id]
                if covered is not None:
                    covered[delivered_id] = None
                    if len(covered) > COVERED_IDS:
                        del covered[next(iter(covered))]
        return subscription, tags

    def _on_ack(self, frame: Frame) -> None:
        headers = frame.headers
        if len(headers) == 1 and self.version == "1.2":
            # Most ACKs: an id alone (no transaction, no receipt) naming a delivery of a
            # client-individual subscription, or the oldest of a client one: no list of keys to
            # walk, and no Deferred when the subscription can do without.
            key = headers.get("id")
            subscription = self._ack_ids.pop(key, None) if key else None  # (put back below if not taken here)
            if subscription is not None:
                unacked = subscription.unacked
                if key in unacked and (subscription.ack_mode == "client-individual" or next(iter(unacked)) == key):
                    tags = [unacked.pop(key)]
                    acknowledge = subscription.acknowledge
                    if acknowledge is None:
                        self._track(self._apply(subscription, tags, "ack"), frame)
                    else:
                        done = acknowledge(tags)
                        if done is not None:
                            self._track(done, frame)
                    return
                self._ack_ids[key] = subscription  # type: ignore[index]
        transaction = self._transaction(frame)
        subscription, tags = self._acked(frame)
        if transaction is not None:
            transaction.acks.append((subscription, tags))
            self._hold(subscription, tags)
            self._receipt(frame)
            return
        self._track(self._apply(subscription, tags, "ack"), frame)

    def _on_nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise StompError("unknown command", "NACK does not exist in STOMP 1.0")
        transaction = self._transaction(frame)
        subscription, tags = self._acked(frame)
        if transaction is not None:
            transaction.nacks.append((subscription, tags))
            self._hold(subscription, tags)
            self._receipt(frame)
            return
        self._track(self._apply(subscription, tags, "nack"), frame)

    def _hold(self, subscription: StompSubscription, tags: list[Any]) -> None:
        """Deliveries acked or nacked in a transaction stay the transaction's
        (credit freed, kept if the subscription closes) where the connector can."""
        live = subscription.subscription
        if live is not None and ITransactionalAcks.providedBy(live):
            live.hold(tags)

    def _apply(self, subscription: StompSubscription, tags: list[Any], what: str) -> Deferred[Any]:
        live = subscription.subscription
        if live is None or not tags:
            return succeed(None)
        result: Deferred[Any] = live.ack(tags) if what == "ack" else live.nack(tags)
        return result

    # -- transactions --------------------------------------------------------

    def _on_begin(self, frame: Frame) -> None:
        name = self._required(frame, "transaction")
        if name in self.transactions:
            raise StompError("transaction already begun", f"transaction {name!r} is already open")
        self.transactions[name] = Transaction()
        self._receipt(frame)

    def _on_commit(self, frame: Frame) -> None:
        """All or nothing: the SENDs are stored first; only then are the ACKs
        and NACKs applied.  A SEND refused (an unknown destination, a full
        store) fails the COMMIT: nothing was stored (one connector stores a
        batch in one transaction, after checking every destination) and the
        acknowledged messages are redelivered.  (SENDs to several connectors
        are not atomic together: each connector's batch is.)"""
        name = self._required(frame, "transaction")
        transaction = self._transaction(frame)
        assert transaction is not None
        del self.transactions[name]
        sends: list[Deferred[Any]] = []
        batches: dict[int, tuple[IConnector, list[Message]]] = {}
        for connector, message in transaction.sends:
            batches.setdefault(id(connector), (connector, []))[1].append(message)
        for connector, messages in batches.values():
            sends.append(connector.send_batch(messages))
            if IFlowControlled.providedBy(connector) and connector.congestion.congested:
                self._hold_for(connector.congestion)  # (the transaction's SENDs go out only now)
        if not sends and not transaction.acks and not transaction.nacks:
            self._receipt(frame)
            return

        def settle(_: object) -> Deferred[Any]:
            work: list[Deferred[Any]] = []
            for subscription, tags in transaction.acks:
                work.append(self._apply(subscription, tags, "ack"))
            for subscription, tags in transaction.nacks:
                work.append(self._apply(subscription, tags, "nack"))
            return gather(work)

        stored = gather(sends) if sends else succeed(None)
        if stored.called and not isinstance(getattr(stored, "result", None), _UNSETTLED):
            self._track(settle(None), frame)
            return
        committed: Deferred[Any] = Deferred()
        self._track(committed, frame)

        def refused(failure: Failure) -> None:
            committed.errback(failure)  # ERROR first: nothing more is delivered on this connection
            self._rollback(transaction)

        stored.addCallback(settle).addCallbacks(committed.callback, refused)

    def _on_abort(self, frame: Frame) -> None:
        name = self._required(frame, "transaction")
        transaction = self._transaction(frame)
        assert transaction is not None
        del self.transactions[name]
        self._rollback(transaction)
        self._receipt(frame)

    def _rollback(self, transaction: Transaction) -> None:
        """Redeliver what the transaction acknowledged (counted once each)."""
        for subscription, tags in transaction.acks + transaction.nacks:
            live = subscription.subscription
            if live is not None and (ITransactionalAcks.providedBy(live) or not subscription.closed):
                self._apply(subscription, tags, "nack")

    # -- DISCONNECT ----------------------------------------------------------

    def _on_disconnect(self, frame: Frame) -> None:
        # Frames after DISCONNECT are ignored; the work before it still answers (RECEIPT or ERROR),
        # and only when all of it succeeded does the DISCONNECT's own receipt go out (the line
        # drops the answers after an ERROR), then the connection closes.
        self.state = "disconnecting"
        self._answers.now(receipt_for(frame), final=True)

    _handlers: dict[str, Callable[[StompSession, Frame], None]] = {
        "CONNECT": _on_connect,
        "STOMP": _on_connect,
        "SEND": _on_send,
        "SUBSCRIBE": _on_subscribe,
        "UNSUBSCRIBE": _on_unsubscribe,
        "ACK": _on_ack,
        "NACK": _on_nack,
        "BEGIN": _on_begin,
        "COMMIT": _on_commit,
        "ABORT": _on_abort,
        "DISCONNECT": _on_disconnect,
    }


def _flag(headers: dict[str, str], name: str) -> bool:
    """A SUBSCRIBE header that is ``true`` or ``false`` (absent: false)."""
    value = headers.get(name)
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    raise StompError(f"invalid {name} header", f"{name} {value!r} is neither 'true' nor 'false'")


def _check_capabilities(connector: IConnector, exclusive: bool, browser: bool, wildcard: bool) -> None:
    """Refuse ``activemq.exclusive``, ``browser`` or a wildcard topic where the target cannot honour them."""
    for asked, capability, what in ((exclusive, Capability.EXCLUSIVE_CONSUMERS, "activemq.exclusive:true"),
                                    (browser, Capability.BROWSE, "browser:true"),
                                    (wildcard, Capability.WILDCARD_SUBSCRIPTIONS, "a wildcard topic")):
        if asked and capability not in connector.capabilities:
            raise StompError(f"{what} is not supported here",
                             f"the {connector.name} connector cannot honour {what}; subscribe without it")


def _check_selector(selector: str) -> None:
    from gateway.selector import compile_selector

    try:
        compile_selector(selector)
    except SelectorError as error:
        raise StompError("invalid selector", str(error)) from None


def _error_title(error: GatewayError) -> str:
    if isinstance(error, NotOwner):
        return str(error)
    names = {
        "DestinationError": "invalid destination",
        "ConnectorUnavailable": "target unavailable",
        "DestinationFull": "destination full",
        "ConnectorError": "target refused the message",
        "SelectorError": "invalid selector",
        "StoreError": "message store failure",
        "TransformError": "transform failed",
    }
    return names.get(type(error).__name__, "request failed")
