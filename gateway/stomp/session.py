"""The STOMP server session: one client connection's protocol state machine.

It receives decoded :class:`Frame` objects and answers through a
:class:`FrameSink` (the Twisted protocol, or a test double).  The session owns
the frame dispatch, the connection's :class:`SessionState`, CONNECT (version
negotiation, authentication through ``twisted.cred``, the login throttle of
:mod:`gateway.security.login_throttle`), authorization, deliveries and errors; it
delegates to one collaborator per concern:

* :mod:`gateway.stomp.heartbeats` - heart-beats;
* :mod:`gateway.stomp.ack_ledger` - deliveries waiting for ACK/NACK in the three ack modes;
* :mod:`gateway.stomp.transactions` - BEGIN/COMMIT/ABORT buffers;
* :mod:`gateway.stomp.sending` - the SEND paths (RECEIPT only once the connector confirmed);
* :mod:`gateway.stomp.subscriptions` - SUBSCRIBE headers, durable owners;
* :mod:`gateway.stomp.temporaries` - the connection's temporary destinations.

Every failure becomes an ERROR frame (``message`` header, a body saying what
and where, ``receipt-id`` when the frame asked for a receipt) followed by
closing this connection only - except a SEND or SUBSCRIBE that
``[[authorization]]`` refuses: its ERROR leaves the connection open for what
the login may do (as ActiveMQ does).  The session never touches a socket and
takes its clock, connectors and portal as arguments.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from twisted.cred.credentials import Anonymous, UsernamePassword
from twisted.cred.error import LoginFailed, UnauthorizedLogin
from twisted.cred.portal import Portal
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway import __version__
from gateway.broker.composite import composite_parts
from gateway.broker.settings import BrokerSettings
from gateway.errors import GatewayError, LimitReached, StompProtocolError
from gateway.flow import Congestion
from gateway.interfaces import IAuthorizer, IStompUser, ISubscription, Permission, SubscriptionSpec
from gateway.message.convert import message_to_frame
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import CertificateIdentity
from gateway.security.login_throttle import LoginThrottle
from gateway.stomp.ack_ledger import AckLedger, apply_acks
from gateway.stomp.delivery import MessageEncoder
from gateway.stomp.durable_owners import DurableOwners
from gateway.stomp.errors import KEEPS_CONNECTION, StompError, error_title, limit_refusal
from gateway.stomp.heartbeats import HeartBeats, parse_heartbeat
from gateway.stomp.login_connections import LoginConnections
from gateway.stomp.receipts import ReceiptLine, receipt_for
from gateway.stomp.sending import Sender
from gateway.stomp.settings import StompSettings
from gateway.stomp.subscriptions import DurableClaims, StompSubscription, check_capabilities, read_subscribe
from gateway.stomp.temporaries import CLIENT_PREFIXES, SERVER_PREFIXES, TemporaryDestinations
from gateway.stomp.transactions import Transactions
from gateway.wire.codec import unrepresentable
from gateway.wire.frame import VERSIONS, Frame

__all__ = ["FrameSink", "InboundTransformer", "SessionState", "StompError", "StompSession", "StompSubscription"]

SERVER_NAME = f"jmsgateway/{__version__}"

_session_ids = itertools.count(1)
_STOMP_MESSAGES = (TextMessage, BytesMessage)
"""The message types a STOMP client can receive (the GlassFish rule)."""
_STOMP_MESSAGE_TYPES = frozenset(_STOMP_MESSAGES)
"""The same, for an exact type test (a subclass takes the general path)."""


class SessionState(enum.StrEnum):
    """Where a connection is in its life (a ``str``: the console shows it as it is)."""

    NEW = "new"
    """Nothing but CONNECT or STOMP is accepted."""
    CONNECTING = "connecting"
    """The login is being checked; frames that arrive meanwhile wait."""
    CONNECTED = "connected"
    DISCONNECTING = "disconnecting"
    """DISCONNECT received: the earlier frames' answers go out, then the connection closes."""
    CLOSING = "closing"
    """An ERROR went out (or is due): nothing more is read or delivered."""
    CLOSED = "closed"
    """The transport is gone."""


_CONNECTED = SessionState.CONNECTED
"""(the hot path's name for it: a module global is read faster than an enum class's member)"""

_IGNORING = (SessionState.CLOSING, SessionState.CLOSED, SessionState.DISCONNECTING)
"""States in which a frame from the client is dropped unread."""
_ENDING = (SessionState.CLOSING, SessionState.CLOSED)


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


class StompSession:
    """State machine of one STOMP connection (server side): frame dispatch and delegation."""

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
        login_connections: LoginConnections | None = None,
    ) -> None:
        self.sink = sink
        self.clock = clock
        self.destinations = destinations
        self.settings = settings or StompSettings()
        self.default_persistent = (broker_settings or BrokerSettings()).default_persistent
        self.portal = portal
        self.transformer = transformer
        self._outbound_idle: bool = transformer is None or getattr(transformer, "outbound_idle", False) is True
        """No outbound transformer applies to a subscription without a ``transformation``: a Text or Bytes
        message is written as it is (a transformer says so with an ``outbound_idle`` of True)."""
        self.peer = peer
        self.authorizer = authorizer
        """Asked before every SEND and SUBSCRIBE (None: everything allowed)."""
        self.throttle = throttle
        self.certificate_name = certificate_name
        """The verified client certificate's subject CN (``mtls:`` listeners), for certificate logins."""
        self.durable_owners = durable_owners
        """Owners of durable subscriptions at connectors (None without [auth]: nothing recorded or checked)."""
        self.login_connections = login_connections
        """The connections each verified login holds, against its max_connections (None: not counted)."""
        self._counted: str | None = None
        """The login this connection is counted for in :attr:`login_connections` (once CONNECTED)."""
        self.session_id = f"jmsgw-{next(_session_ids)}"
        self.state = SessionState.NEW
        self.version = "1.0"
        self.login: str | None = None
        self.connected_logged = False
        """Whether the connect was logged at info (then the disconnect is too)."""
        self.client_id: str | None = None
        self.subscriptions: dict[str, StompSubscription] = {}
        self.acks: AckLedger[StompSubscription] = AckLedger(self.session_id)
        self.transactions = Transactions()
        self.temporaries = TemporaryDestinations(self.session_id, destinations.embedded)
        self.durables = DurableClaims(destinations.embedded, durable_owners)
        self.heartbeats = HeartBeats(clock, self, self.settings.heartbeat_grace)
        self._backlog: list[Frame] = []
        self._answers = ReceiptLine(self._write, self._close_now, self._error_answer)
        """RECEIPTs and ERRORs, written in the order of the frames they answer (:mod:`gateway.stomp.receipts`)."""
        self.sending = Sender(self, destinations, self._answers, self.transactions, self.temporaries,
                              default_persistent=self.default_persistent, authorizing=authorizer is not None,
                              transforming=transformer is not None, identifying=portal is not None)
        self._paused = False
        self._held_by: set[Congestion] = set()
        """Congested targets this session stopped reading for (:mod:`gateway.flow`)."""
        self._warned_held_consumer = False

    @property
    def verified_login(self) -> str | None:
        """The login the portal verified (None without authentication: a CONNECT's ``login`` is its word)."""
        return self.login if self.portal is not None else None

    @property
    def out_interval(self) -> float:
        """Seconds between the heart-beats the server sends (0: none)."""
        return self.heartbeats.out_interval

    @property
    def in_interval(self) -> float:
        """Seconds between the heart-beats the server expects (0: none)."""
        return self.heartbeats.in_interval

    # -- entry points from the protocol -----------------------------------

    def data_received(self) -> None:
        """Any bytes arrived (frames or heart-beats): the peer is alive."""
        self.heartbeats.last_received = self.clock.seconds()

    def frame_received(self, frame: Frame) -> None:
        """Handle one complete frame from the client."""
        state = self.state
        if state is not _CONNECTED:
            if state in _IGNORING:
                return
            if state is SessionState.CONNECTING:
                self._backlog.append(frame)
                return
        try:
            handler: Callable[[StompSession, Frame], None] | None = None
            if state is not _CONNECTED or frame.command != "SEND":  # (a SEND: no look-up, issue 39)
                headers = frame.headers
                if state is _CONNECTED and frame.command == "ACK" and len(headers) == 1 and self.version == "1.2":
                    # Most ACKs: an id alone (no transaction, no receipt) naming a delivery of a
                    # client-individual subscription, or the oldest of a client one: settled and
                    # acknowledged in one call of the ledger, with no handler look-up, no list of
                    # keys and, when the subscription can do without, no Deferred (issue 39).
                    key = headers.get("id")
                    if key is not None:
                        done = self.acks.ack_key(key)
                        if done is not False:
                            if done is not None:
                                self._track(done, frame)
                            return
                handler = self._handlers.get(frame.command)
                if handler is None:
                    raise StompError("unknown command", f"{frame.command!r} is not a STOMP client command")
                if state is SessionState.NEW and frame.command not in ("CONNECT", "STOMP"):
                    raise StompError("not connected", f"expected CONNECT or STOMP, got {frame.command}")
            receipt = frame.headers.get("receipt")
            if receipt is not None and unrepresentable("receipt-id", receipt, self.version):
                frame.headers.pop("receipt")  # (the ERROR cannot carry it either)
                raise StompError("invalid receipt header",
                                 f"receipt {receipt!r} cannot be sent back in a STOMP {self.version} RECEIPT")
            if handler is None:
                self.sending.send(frame)  # (what _on_send does, without its call)
            else:
                handler(self, frame)
        except (StompError, StompProtocolError) as error:
            self.fail(error, frame)
        except LimitReached as error:  # (a temporary destination past a limit: the connection stays open)
            if frame.command not in KEEPS_CONNECTION:
                self.fail(StompError(error_title(error), str(error)), frame)
            else:
                self._answers.now(limit_refusal(error, frame))
        except GatewayError as error:
            self.fail(StompError(error_title(error), str(error)), frame)
        except Exception:
            self.log.failure("internal error handling {command} from {peer}", command=frame.command, peer=self.peer)
            self.fail(StompError("internal error", f"the gateway failed to process {frame.command}"), frame)

    def protocol_error(self, error: StompProtocolError) -> None:
        """The codec could not read the client's bytes."""
        self.fail(error)

    def input_ended(self) -> None:
        """The client half-closed its side: it sends nothing more.  Connected, it is answered as after a
        DISCONNECT without a receipt (every earlier frame's RECEIPT or ERROR, in order, then the close);
        already disconnecting or closing, that goes on; otherwise (no CONNECT done) it is closed now."""
        if self.state is SessionState.CONNECTED:
            self._disconnect(None)
        elif self.state not in (SessionState.DISCONNECTING, *_ENDING):
            self.sink.close()

    def connection_lost(self) -> None:
        """The transport is gone: release everything the connection held."""
        if self.state is SessionState.CLOSED:
            return
        if self.connected_logged:
            self.log.info("STOMP disconnect from {peer} (login {login})", peer=self.peer, login=self.login or "-")
        self.state = SessionState.CLOSED
        if self._counted is not None and self.login_connections is not None:
            self.login_connections.closed(self._counted)
            self._counted = None
        self._answers.abandon()
        self.heartbeats.stop()
        # Nothing more is delivered here: what the rollback and the closes
        # return goes to other consumers, each message counted once.
        self._stop_deliveries()
        self.transactions.abandon()
        for subscription in list(self.subscriptions.values()):
            self._close_subscription(subscription, delete=False)
        self.subscriptions.clear()
        self.temporaries.delete_all()

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
        if self.state in _ENDING:
            return
        self._paused = False
        for subscription in list(self.subscriptions.values()):
            if self._paused:  # (what the previous ones got filled the transport again)
                return
            if subscription.subscription is not None:
                subscription.subscription.resume()

    # -- ports of the collaborators ------------------------------------------

    def beating(self) -> bool:
        """:class:`HeartBeatOwner`: heart-beats run while connected."""
        return self.state is SessionState.CONNECTED

    def reading_held(self) -> bool:
        """:class:`HeartBeatOwner`: whether a congested target holds this connection's input."""
        return bool(self._held_by)

    def send_heartbeat(self) -> None:
        """:class:`HeartBeatOwner`: one heart-beat to the client."""
        self.sink.send_heartbeat()

    def heartbeat_missed(self, silent: float, limit: float) -> None:
        """:class:`HeartBeatOwner`: the client fell silent."""
        self.log.info("no heart-beat from {peer} for {silent:.1f}s (limit {limit:.1f}s): closing",
                      peer=self.peer, silent=silent, limit=limit)
        self.state = SessionState.CLOSING
        self.sink.close()

    def passes_through(self, frame: Frame) -> bool:
        """:class:`SendingOwner`: the inbound transformers leave this SEND's messages untouched."""
        return self.transformer is None or self.transformer.passes_through(frame)

    def transform_inbound(self, message: Message, frame: Frame) -> Any:
        """:class:`SendingOwner`: the inbound transformers' answer about ``message``."""
        assert self.transformer is not None
        return self.transformer.inbound(message, self, frame)

    # -- errors ------------------------------------------------------------

    def fail(self, error: StompError | StompProtocolError, frame: Frame | None = None) -> None:
        """Stop the connection for ``error``: its ERROR frame goes out after the answers of the
        frames before (:class:`ReceiptLine`), then the connection closes."""
        if self.state in _ENDING:
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
        if self.state not in _ENDING:
            self.state = SessionState.CLOSING
            self._stop_deliveries()
        return Frame("ERROR", headers, f"{text}\n".encode())

    def _stomp_error(self, reason: BaseException | Failure, frame: Frame) -> StompError | StompProtocolError:
        """What the client is told about ``reason`` (a frame's failure)."""
        error = reason.value if isinstance(reason, Failure) else reason
        if isinstance(error, StompError | StompProtocolError):
            return error
        if isinstance(error, GatewayError):
            return StompError(error_title(error), str(error))
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
        if self.state is not SessionState.CLOSED:
            self.state = SessionState.CLOSING
        self.sink.close()

    def _write(self, frame: Frame) -> None:
        self.heartbeats.last_sent = self.clock.seconds()
        self.sink.send_frame(frame)

    # -- CONNECT -----------------------------------------------------------

    def _on_connect(self, frame: Frame) -> None:
        if self.state is not SessionState.NEW:
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
        heartbeat = parse_heartbeat(headers.get("heart-beat", "0,0")) if version != "1.0" else (0, 0)
        self.version = version
        self.sink.set_version(version)
        self.client_id = headers.get("client-id")
        login = headers.get("login")
        passcode = headers.get("passcode", "")
        self.state = SessionState.CONNECTING
        if self.portal is None:
            self.login = login
            self._connected(frame, heartbeat)
            return
        address = self.peer.rsplit(":", 1)[0]
        throttle = self.throttle
        refusal = throttle.admit(address, login) if throttle is not None else None
        if refusal is not None:
            self.state = SessionState.NEW
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
            if self.state is not SessionState.CONNECTING:  # (the connection ended during the check: the
                return  # frames pipelined behind the CONNECT are not run, so they make nothing that outlives it)
            connections = self.login_connections
            if connections is not None and self.login is not None:
                refusal = connections.admit(self.login)
                if refusal is not None:
                    self.fail(StompError("connection limit reached", refusal), frame)
                    return
                self._counted = self.login
            self._connected(frame, heartbeat)

        def refused(failure: Failure) -> None:
            wrong = failure.check(UnauthorizedLogin, LoginFailed) is not None
            if throttle is not None:  # (an error of the check itself is no guess: it only ends the attempt)
                throttle.settle(address, login, False) if wrong else throttle.settle(address, None, True)
            if self.state is not SessionState.CONNECTING:  # (the connection ended during the check)
                return
            self.state = SessionState.NEW
            if wrong:
                who = f"login {login!r}" if login is not None else "an anonymous login"
                self.fail(StompError("authentication failed", f"{who} was refused"), frame)
            else:
                self._failure(failure, frame)

        d.addCallbacks(logged_in, refused)

    def _connected(self, frame: Frame, heartbeat: tuple[int, int]) -> None:
        server_send = self.settings.heartbeat_send_ms
        server_receive = self.settings.heartbeat_receive_ms
        headers = {"version": self.version, "server": SERVER_NAME, "session": self.session_id}
        if self.version != "1.0":
            headers["heart-beat"] = f"{server_send},{server_receive}"
            self.heartbeats.negotiate(heartbeat, server_send, server_receive)
        self.state = SessionState.CONNECTED
        self.temporaries.login = self.verified_login
        self.connected_logged = True
        self.log.info("STOMP {version} connect from {peer} (login {login})", version=self.version, peer=self.peer,
                      login=self.login or "-")
        self._write(Frame("CONNECTED", headers))
        self.heartbeats.start()
        backlog, self._backlog = self._backlog, []
        for queued in backlog:
            self.frame_received(queued)

    # -- SEND --------------------------------------------------------------

    def _on_send(self, frame: Frame) -> None:
        self.sending.send(frame)

    def hold_for(self, congestion: Congestion) -> None:
        """Stop reading from the client until ``congestion`` clears (once per target)."""
        if congestion in self._held_by:
            return
        self._held_by.add(congestion)
        self.sink.hold_input()
        self._warn_held_consumer(congestion)

        def ready() -> None:
            self._held_by.discard(congestion)
            self.heartbeats.received()  # heart-beats were not read meanwhile
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

    def authorized(self, frame: Frame, destination: str, permission: Permission) -> bool:
        """Whether this login holds ``permission`` on ``destination``; if not, an ERROR that
        leaves the connection open (ActiveMQ's answer to a security exception)."""
        refusal = self.refusal(frame, destination, permission)
        if refusal is None:
            return True
        self._answers.now(refusal)
        return False

    def refusal(self, frame: Frame, destination: str, permission: Permission) -> Frame | None:
        """None when this login holds ``permission`` on ``destination`` (and every name of its
        target), else the ERROR that answers ``frame`` (not written: the caller places it in the
        frame's turn; the connection stays open).  The refusal is logged and counted here."""
        assert self.authorizer is not None
        if destination.startswith(CLIENT_PREFIXES):  # the connection's own temporary destination
            return None
        # The name and every other name of its target (a Kafka topic under /queue/ and /topic/):
        # an entry on one alias alone does not open the target.
        names = (name for part in composite_parts(destination) for name in self.destinations.aliases(part))
        refused = next((name for name in names
                        if not self.authorizer.check(self.login, permission, name, self.peer)), None)
        if refused is None:  # (check logs and counts a refusal)
            return None
        who = f"login {self.login!r}" if self.login is not None else "an anonymous connection"
        headers = {"message": f"not authorized to {permission} {destination}", "content-type": "text/plain"}
        if "receipt" in frame.headers:
            headers["receipt-id"] = frame.headers["receipt"]
        where = destination if refused == destination else f"{refused}, which reaches the same target as {destination}"
        body = (f"{frame.command} frame: {who} does not hold the {permission!r} permission on {where} "
                "([[authorization]]); nothing was done and the connection stays open\n")
        return Frame("ERROR", headers, body.encode())

    # -- SUBSCRIBE / UNSUBSCRIBE --------------------------------------------

    def _on_subscribe(self, frame: Frame) -> None:
        check = self.transformer.check_transformation if self.transformer is not None else None
        request = read_subscribe(frame, self.version, self.settings, self.subscriptions.keys(), check)
        sub_id, destination, durable = request.sub_id, request.destination, request.durable
        if self.authorizer is not None:  # durable subscriptions need admin too (as ActiveMQ's creation does)
            if not self.authorized(frame, destination, "read"):
                return
            if durable and not self.authorized(frame, destination, "admin"):
                return
        server_destination = self.temporaries.server_destination(destination, create=True)
        if server_destination.startswith(SERVER_PREFIXES) and server_destination not in self.temporaries:
            raise StompError("temporary destination is private",
                             f"{destination!r} belongs to another connection and cannot be consumed here")
        resolved = self.destinations.resolve(server_destination)
        connector = resolved.connector
        check_capabilities(connector, request)
        claimed = self.durables.claim(connector, self.client_id, self.verified_login, durable)  # (ERROR if another's)
        spec = SubscriptionSpec(
            destination=resolved.destination,
            selector=request.selector,
            ack_mode=request.ack_mode,
            prefetch=request.prefetch,
            durable_name=durable,
            client_id=self.client_id,
            owner=self.session_id,
            login=self.verified_login,
            exclusive=request.exclusive,
            browser=request.browser,
        )
        subscription = StompSubscription(self, sub_id, destination, request.ack_mode, request.transformation)
        subscription.connector, subscription.durable_name = connector, durable
        self.subscriptions[sub_id] = subscription
        d: Deferred[ISubscription] = connector.subscribe(spec, subscription)

        def subscribed(live: ISubscription) -> None:
            if subscription.closed:
                live.close()
                return
            subscription.attach(live)
            if self._paused:
                live.pause()

        def refused(failure: Failure) -> Failure:
            self.subscriptions.pop(sub_id, None)
            subscription.closed = True
            if claimed:  # (nothing was created: the name is free again)
                self.durables.release(connector, self.client_id, self.verified_login, durable)
            return failure

        d.addCallbacks(subscribed, refused)
        self._track(d, frame)

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
        client_id, login = self.client_id, self.verified_login
        self.durables.check(self.destinations.embedded, client_id, login, name)
        if named is not None and named.connector is not None:
            self.durables.check(named.connector, client_id, login, name)
        subscription = self.subscriptions.pop(sub_id, None)
        if subscription is None:
            raise StompError("unknown subscription", f"there is no subscription with id {sub_id!r}")
        delete = "activemq.subscriptionName" in frame.headers or "durable-subscription-name" in frame.headers
        closed = self._close_subscription(subscription, delete=delete)
        if delete and subscription.connector is not None:  # its owner deleted it: the name is free again
            connector, durable = subscription.connector, subscription.durable_name

            def deleted(result: Any) -> Any:
                self.durables.release(connector, client_id, login, durable)
                return result

            closed.addCallback(deleted)
        self._track(closed, frame)

    def _close_subscription(self, subscription: StompSubscription, *, delete: bool) -> Deferred[Any]:
        self.acks.forget(subscription)
        return subscription.close(delete=delete)

    # -- deliveries ----------------------------------------------------------

    def deliver(self, subscription: StompSubscription, message: Message, tag: Any) -> bool:
        """A connector hands a message to one of this connection's subscriptions.

        Returns False when the message was not taken (connection closing, or
        refused by the GlassFish rule), so an ``auto`` delivery is not consumed.
        """
        if self.state is not _CONNECTED:
            return False
        if self._paused and subscription.subscription is None:
            # The backlog dispatched while SUBSCRIBE is handled filled the
            # transport: the rest waits in the broker (the live subscription,
            # known in a moment, is paused then).
            return False
        if self._outbound_idle and subscription.transformation is None and type(message) in _STOMP_MESSAGE_TYPES:
            # (the usual delivery, a topic's fan-out above all: nothing to transform, a type a STOMP client
            # takes; written here without the calls of the general path below)
            if subscription.closed:
                return False
            encoder = subscription.encoder
            if (
                encoder is not None and subscription.ack_mode == "auto" and not subscription.wildcard
                and encoder.version == self.version
            ):
                # (issue 39: an auto delivery with the subscription's encoder made: _write_delivery's
                # steps without its call)
                data = encoder.encode(message, None)
                if data is not None:
                    heartbeats = self.heartbeats
                    if heartbeats.out_interval:
                        heartbeats.last_sent = self.clock.seconds()
                    self.sink.send_message(data)
                    return True
            self._write_delivery(message, subscription, tag)
            return True
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
        if self.state is not _CONNECTED or subscription.closed:
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
        self._write_delivery(message, subscription, tag)
        return True

    def _write_delivery(self, message: Message, subscription: StompSubscription, tag: Any) -> None:
        """Write the MESSAGE frame of a Text or Bytes ``message`` for ``subscription``."""
        # (no ``ack`` header on an auto delivery: there is nothing to acknowledge)
        ack = self.acks.delivered(subscription, tag, message.message_id, self.version) \
            if subscription.ack_mode != "auto" else None
        encoder = subscription.encoder
        # (a wildcard subscription shows each message's own queue or topic: its encoder follows it,
        # the header lines after ``destination`` shared with the other subscribers of the message)
        shown = message.destination if subscription.wildcard else subscription.destination
        if encoder is None or encoder.version != self.version or encoder.destination != shown:
            encoder = subscription.encoder = MessageEncoder(subscription.id, shown, self.version)
        data = encoder.encode(message, ack)
        if data is None:  # (a header only the general encoder writes, or leaves out)
            self._write(message_to_frame(message, subscription.id, ack, shown))
        else:
            heartbeats = self.heartbeats
            if heartbeats.out_interval:  # (read only by the outgoing heart-beat's timer: no clock read without one)
                heartbeats.last_sent = self.clock.seconds()
            self.sink.send_message(data)

    def _outbound_failed(self, failure: Failure, subscription: StompSubscription, message: Message) -> None:
        self.log.failure("outbound transform failed for message {id}", failure, id=message.message_id)
        where = f"message {message.message_id} on {subscription.destination}"
        self.fail(StompError("outbound transform failed", f"{where}: {failure.getErrorMessage()}"))

    # -- ACK / NACK ----------------------------------------------------------

    def _on_ack(self, frame: Frame) -> None:
        # (an id-only ACK that names a delivery the quick path settles never comes here: frame_received)
        self._settle(frame, "ack")

    def _on_nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise StompError("unknown command", "NACK does not exist in STOMP 1.0")
        self._settle(frame, "nack")

    def _settle(self, frame: Frame, what: str) -> None:
        """An ACK or NACK: applied now, or at its transaction's COMMIT."""
        transaction = self.transactions.named(frame)
        subscription, tags = self.acks.settle(frame, self.version, self.subscriptions)
        if transaction is not None:
            transaction.settle(subscription, tags, what)
            self._receipt(frame)
            return
        self._track(apply_acks(subscription.subscription, tags, what), frame)

    # -- transactions --------------------------------------------------------

    def _on_begin(self, frame: Frame) -> None:
        self.transactions.begin(frame)
        self._receipt(frame)

    def _on_commit(self, frame: Frame) -> None:
        transaction = self.transactions.end(frame)
        if not self.transactions.commit(transaction, lambda d: self._track(d, frame), self.hold_for):
            self._receipt(frame)

    def _on_abort(self, frame: Frame) -> None:
        self.transactions.rollback(self.transactions.end(frame))
        self._receipt(frame)

    # -- DISCONNECT ----------------------------------------------------------

    def _on_disconnect(self, frame: Frame) -> None:
        # Frames after DISCONNECT are ignored; the work before it still answers (RECEIPT or ERROR),
        # and only when all of it succeeded does the DISCONNECT's own receipt go out (the line
        # drops the answers after an ERROR), then the connection closes.
        self._disconnect(receipt_for(frame))

    def _disconnect(self, receipt: Frame | None) -> None:
        """Read nothing more; answer every earlier frame in order, then ``receipt`` (if any), then close."""
        self.state = SessionState.DISCONNECTING
        self._answers.now(receipt, final=True)

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
