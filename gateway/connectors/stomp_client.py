"""A Twisted STOMP client protocol, built on the gateway's own sans-IO codec.

:class:`StompClientProtocol` speaks STOMP 1.2 to a broker (1.1 and 1.0 when
the broker negotiates them): CONNECT with login, passcode, virtual host and
heart-beats; SEND, SUBSCRIBE / UNSUBSCRIBE, ACK / NACK, BEGIN / COMMIT /
ABORT and DISCONNECT, each optionally with a receipt.  Every call that asks
for a receipt returns a Deferred fired by the broker's RECEIPT; receipts are
pipelined (any number outstanding).  An ERROR frame naming a receipt fails
that Deferred with :class:`~gateway.errors.ConnectorError` carrying the
broker's message; an ERROR without one is fatal to the connection, as the
STOMP spec says.  A lost connection fails everything still outstanding with
:class:`~gateway.errors.ConnectorUnavailable`.

MESSAGE frames go to the handler registered for their ``subscription``.
A MESSAGE over the frame limit (``max_frame_size``) whose headers are
within it is skipped, not read: its body is discarded as it arrives, the
connection stays and the MESSAGEs behind it arrive (up to ``max_skipped_size``
bytes: a larger one, or one without ``content-length`` that goes on past it,
ends the connection).  It is NACKed where the
subscription acknowledges and the broker speaks 1.1 or 1.2 (the broker's
redelivery policy decides: ActiveMQ sends it to its dead letter queue),
ACKed (dropped) on a STOMP 1.0 connection, which has no NACK, and merely
dropped for an ``auto`` subscription (the broker already counts it
delivered); see :meth:`StompClientProtocol._skipped`.  A frame whose headers
alone are over the limit, or any other oversized frame, still ends the
connection.
The protocol never blocks, owns no threads and takes its clock as an
argument; reconnecting is the caller's business (see
:mod:`gateway.connectors.stomp_broker`).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, TimeoutError, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.errors import ConnectorError, ConnectorUnavailable, FrameSkipped, StompProtocolError
from gateway.wire.codec import HEARTBEAT, SKIP_LIMIT, FrameDecoder, Limits, encode_frame
from gateway.wire.frame import VERSIONS, Frame

MessageHandler = Callable[[Frame], None]
"""Called with each MESSAGE frame of a subscription (on the reactor thread)."""
OversizedHandler = Callable[[FrameSkipped], None]
"""Called, instead of the protocol's own handling, with each MESSAGE of a subscription skipped for being over
the frame limit (its headers; the body is never read)."""
Settled = Callable[[Exception | None, Any], None]
"""``settled(error, ack)``: the outcome of one unconfirmed SEND (see :meth:`StompClientProtocol.send_unconfirmed`)."""

_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def quick_ack_switch(transport: Any) -> Callable[[], None] | None:
    """A function that makes ``transport``'s socket acknowledge what it receives at once.

    A broker that leaves Nagle's algorithm on - ActiveMQ's ``stomp://``
    connector unless it has ``transport.tcpNoDelay=true`` - holds each small
    frame it writes (a RECEIPT) until the previous one is acknowledged, and
    Linux delays an ACK by up to 40 ms when it has nothing to send with it:
    a burst's receipts would then trickle back 40 ms apart.  ``TCP_QUICKACK``
    (Linux) asks for an immediate ACK but does not stay set, so the protocol
    sets it again after every read.  None when the transport has no TCP socket
    or the system has no such option.
    """
    if _TCP_QUICKACK is None:
        return None
    get_handle = getattr(transport, "getHandle", None)
    handle = get_handle() if get_handle is not None else None
    if not isinstance(handle, socket.socket):
        return None
    setsockopt = handle.setsockopt
    option = _TCP_QUICKACK
    try:
        setsockopt(socket.IPPROTO_TCP, option, 1)
    except OSError:  # not TCP (a UNIX socket)
        return None

    def quick_ack() -> None:
        with contextlib.suppress(OSError):
            setsockopt(socket.IPPROTO_TCP, option, 1)

    return quick_ack


class BrokerError(ConnectorError):
    """The broker answered with an ERROR frame.

    :ivar headers: the ERROR frame's headers.
    :ivar body: its body as text.
    """

    def __init__(self, frame: Frame, context: str = "") -> None:
        message = frame.headers.get("message", "").strip() or "ERROR frame without message"
        body = frame.body.decode("utf-8", "replace").strip()
        text = f"broker ERROR{f' ({context})' if context else ''}: {message}"
        if body and body != message:
            text += f": {body[:500]}"
        super().__init__(text)
        self.headers = dict(frame.headers)
        self.body = body


def negotiate_heartbeat(ours: tuple[int, int], theirs: str | None) -> tuple[int, int]:
    """``(send_every_ms, expect_every_ms)`` from our ``(cx, cy)`` and the broker's ``heart-beat``."""
    cx, cy = ours
    try:
        sx, sy = (int(part) for part in (theirs or "0,0").split(","))
    except ValueError:
        return (0, 0)
    send = max(cx, sy) if cx and sy else 0
    expect = max(cy, sx) if cy and sx else 0
    return (send, expect)


class StompClientProtocol(Protocol):
    """One STOMP connection from the gateway to a broker.

    :param clock: the reactor's time provider (``Clock`` in tests).
    :param limits: frame size limits for what the broker sends.
    :param heartbeat_grace: how many expected heart-beat intervals may pass
        in silence before the connection is considered dead (ActiveMQ checks
        whether to beat once per interval, so it may stay silent for nearly two).
    :param receipt_timeout: seconds a receipt may be outstanding before its
        Deferred fails with :class:`~twisted.internet.defer.TimeoutError`
        (``None``: no limit).  One periodic sweep checks all of them, instead
        of a timer per frame.
    :param max_skipped_size: the largest MESSAGE over the frame limit that is
        skipped (:meth:`_skipped`) rather than ending the connection; 0: none.
    """

    log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        *,
        limits: Limits | None = None,
        heartbeat_grace: float = 3.0,
        receipt_timeout: float | None = None,
        max_skipped_size: int = SKIP_LIMIT,
    ) -> None:
        self.clock = clock
        self.decoder = FrameDecoder(limits, skip_oversized=frozenset({"MESSAGE"}) if max_skipped_size else frozenset(),
                                    skip_limit=max_skipped_size)
        self.heartbeat_grace = heartbeat_grace
        self.receipt_timeout = receipt_timeout
        self.version = "1.0"
        self.server: str | None = None
        self.session: str | None = None
        self.ready = False
        self.closed = False
        self.error: ConnectorError | None = None
        #: MESSAGE frames for a subscription this connection does not have (ignored)
        self.stray_messages = 0
        self.on_lost: Callable[[Failure], None] | None = None
        self.on_error: Callable[[BrokerError], None] | None = None
        self.on_unconfirmed: Callable[[int, Exception | None], None] | None = None
        """Called with (count, error) whenever unconfirmed SENDs settle, for metrics."""
        self.on_skipped: Callable[[FrameSkipped, str, str], None] | None = None
        """Called with (the skipped MESSAGE, its subscription's destination, what was done: ``nacked``,
        ``dropped`` or ``unacknowledged``) for each oversized MESSAGE the protocol handled (for the log and
        metrics; without it, the protocol logs it)."""
        self._receipt_ids = itertools.count(1)
        # receipt id -> (waiting Deferred, what it was for, when it was sent); in sending order.
        self._receipts: dict[str, tuple[Deferred[Frame | None], str, float]] = {}
        self._handlers: dict[str, MessageHandler] = {}
        # subscription id -> (ack mode, destination, its own handler of oversized MESSAGEs)
        self._subscribed: dict[str, tuple[str, str, OversizedHandler | None]] = {}
        self._connecting: Deferred[Frame] | None = None
        self._lost_waiters: list[Deferred[None]] = []
        self._heartbeat: tuple[int, int] = (0, 0)
        self._sender: LoopingCall | None = None
        self._watchdog: LoopingCall | None = None
        self._sweeper: LoopingCall | None = None
        self._last_received = 0.0
        self._wrote = False
        self._held: tuple[Frame, bool, Settled] | None = None
        """The newest unconfirmed SEND (frame, content-length, outcome callback), not written yet:
        it goes out before the next frame, or with a receipt at the end of the reactor turn."""
        self._uncovered: list[Settled] = []
        """Outcome callbacks of unconfirmed SENDs written without a receipt after them yet."""
        self._cover_call: Any = None
        self._quick_ack: Callable[[], None] | None = None
        self._covering: dict[str, list[Settled]] = {}
        """Receipt id -> the unconfirmed SENDs written before that frame, which its answer settles."""

    def unwrap(self) -> StompClientProtocol:
        """This protocol itself (through a wrapper such as ClientService's proxy)."""
        return self

    # -- Twisted glue --------------------------------------------------------

    def connectionMade(self) -> None:
        self._last_received = self.clock.seconds()
        # Receipts and small frames must not wait for Nagle's algorithm.
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            with contextlib.suppress(OSError):  # not a TCP socket
                set_no_delay(True)
        # ... nor wait for our delayed ACK when the broker keeps Nagle's algorithm on.
        self._quick_ack = quick_ack_switch(self.transport)

    def dataReceived(self, data: bytes) -> None:
        if self.error is not None:
            # a fatal ERROR, an unreadable frame or a silent broker: the connection is closing, and
            # nothing the broker wrote after that is read (an ERROR flood is one log line, not one a frame)
            return
        self._last_received = self.clock.seconds()
        if self._quick_ack is not None:
            self._quick_ack()
        for item in self.decoder.frames(data):  # CONNECTED sets the version of what follows
            if isinstance(item, StompProtocolError):
                if isinstance(item, FrameSkipped):  # (a MESSAGE over the limit: not fatal)
                    try:
                        self._skipped(item)
                    except Exception:
                        self.log.failure("error handling a skipped MESSAGE from broker")
                    if self.error is not None:
                        return
                    continue
                self.log.warn(
                    "unreadable frame from broker {peer}: {message}: {detail}",
                    peer=self._peer(),
                    message=item.message,
                    detail=item.detail,
                )
                self._fatal(ConnectorError(f"broker sent an unreadable frame: {item.message}: {item.detail}"))
                return
            try:
                self._frame_received(item)
            except Exception:
                self.log.failure("error handling {command} from broker", command=item.command)
            if self.error is not None:
                return

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.ready = False
        self.closed = True
        self._stop_heartbeats()
        cause: ConnectorError = self.error or ConnectorUnavailable(
            f"connection to the broker lost: {reason.getErrorMessage()}"
        )
        connecting, self._connecting = self._connecting, None
        if connecting is not None:
            connecting.errback(cause)
        receipts, self._receipts = self._receipts, {}
        covering, self._covering = self._covering, {}
        for receipt_id, (waiting, _, _) in receipts.items():
            self._settle_covered(covering.pop(receipt_id, None), cause)
            waiting.errback(cause)
        held, self._held = self._held, None
        if held is not None:
            self._uncovered.append(held[2])
        if self._cover_call is not None and self._cover_call.active():
            self._cover_call.cancel()
        self._cover_call = None
        uncovered, self._uncovered = self._uncovered, []
        self._settle_covered(uncovered, cause)
        waiters, self._lost_waiters = self._lost_waiters, []
        for waiter in waiters:
            waiter.callback(None)
        if self.on_lost is not None:
            self.on_lost(reason)

    # -- frames in -----------------------------------------------------------

    def _frame_received(self, frame: Frame) -> None:
        command = frame.command
        if command == "MESSAGE":
            self._message(frame)
        elif command == "RECEIPT":
            receipt_id = frame.headers.get("receipt-id", "")
            entry = self._receipts.pop(receipt_id, None)
            if entry is None:
                self.log.debug("unexpected RECEIPT {id} from broker", id=receipt_id)
            else:
                if self._covering:
                    self._settle_covered(self._covering.pop(receipt_id, None), None)
                entry[0].callback(frame)
        elif command == "CONNECTED":
            self._connected(frame)
        elif command == "ERROR":
            self._error(frame)
        else:
            self.log.warn("ignoring {command} frame from broker {peer}", command=command, peer=self._peer())

    def _message(self, frame: Frame) -> None:
        subscription = frame.headers.get("subscription", "")
        handler = self._handlers.get(subscription)
        if handler is None:
            # one a connection at info (a subscription just closed may still get one in flight; a
            # broker that sends thousands must not flood the log), the rest at debug, counted
            self.stray_messages += 1
            emit = self.log.info if self.stray_messages == 1 else self.log.debug
            emit(
                "MESSAGE {id} from broker {peer} for unknown subscription {sub} ignored (closed, or never "
                "made); further ones on this connection are logged at debug level",
                id=frame.headers.get("message-id"),
                peer=self._peer(),
                sub=subscription,
            )
            return
        handler(frame)

    def _skipped(self, skipped: FrameSkipped) -> None:
        """A MESSAGE over the frame limit, skipped by the decoder (its body is never read): the
        subscription's own handler takes it, if it gave one; else it is settled with the broker so that
        the subscription goes on:

        * ``client`` or ``client-individual`` on STOMP 1.1/1.2: NACKed (``nacked``), and the broker's
          redelivery policy decides (ActiveMQ: a STOMP NACK sends it to the dead letter queue,
          ``ActiveMQ.DLQ`` by default);
        * ``client-individual`` on STOMP 1.0, which has no NACK: ACKed (``dropped``), else it would hold a
          prefetch slot and come again after each reconnection, skipped again;
        * ``client`` on STOMP 1.0: left unacknowledged (``unacknowledged``: its ACK would acknowledge every
          MESSAGE before it too);
        * ``auto``: nothing to send, the broker counts it delivered (``dropped``).
        """
        headers = skipped.headers
        subscription = headers.get("subscription", "")
        entry = self._subscribed.get(subscription)
        if entry is None:  # (as any MESSAGE for a subscription this connection does not have)
            self.stray_messages += 1
            self.log.info("MESSAGE {id} from broker {peer} for unknown subscription {sub}, over the frame limit, "
                          "ignored", id=headers.get("message-id"), peer=self._peer(), sub=subscription)
            return
        ack, destination, handler = entry
        if handler is not None:
            handler(skipped)
            return
        message = Frame("MESSAGE", headers)
        if ack == "auto":
            outcome = "dropped"
        elif self.version != "1.0":
            self.nack(message)
            outcome = "nacked"
        elif ack == "client-individual":
            self.ack(message)
            outcome = "dropped"
        else:
            outcome = "unacknowledged"
        if self.on_skipped is not None:
            self.on_skipped(skipped, destination, outcome)
            return
        self.log.warn("MESSAGE {id} from {destination} (broker {peer}): {detail}; {outcome}",
                      id=headers.get("message-id"), destination=destination, peer=self._peer(),
                      detail=skipped.detail, outcome=outcome)

    def _connected(self, frame: Frame) -> None:
        version = frame.headers.get("version", "1.0")
        self.version = version if version in VERSIONS else "1.0"
        self.decoder.version = self.version
        self.server = frame.headers.get("server")
        self.session = frame.headers.get("session")
        self.ready = True
        self._wrote = False
        send_ms, expect_ms = negotiate_heartbeat(self._heartbeat, frame.headers.get("heart-beat"))
        self._start_heartbeats(send_ms, expect_ms)
        if self.receipt_timeout is not None:
            self._sweeper = LoopingCall(self._sweep_receipts)
            self._sweeper.clock = self.clock
            self._sweeper.start(max(min(self.receipt_timeout / 10.0, 1.0), 0.01), now=False)
        connecting, self._connecting = self._connecting, None
        if connecting is not None:
            connecting.callback(frame)

    def _error(self, frame: Frame) -> None:
        receipt_id = frame.headers.get("receipt-id")
        entry = self._receipts.pop(receipt_id, None) if receipt_id else None
        error = BrokerError(frame, entry[1] if entry is not None else "")
        if entry is not None:
            self.log.info("broker refused {context}: {error}", context=entry[1] or receipt_id, error=str(error))
            # the broker answers in order: the unconfirmed SENDs before the refused frame were taken
            self._settle_covered(self._covering.pop(receipt_id, None), None)  # type: ignore[arg-type]
            entry[0].errback(error)
            return
        # An ERROR that answers nothing we asked for ends the connection (STOMP spec).
        self.log.warn("ERROR from broker {peer}: {error}", peer=self._peer(), error=str(error))
        if self.on_error is not None:
            self.on_error(error)
        self._fatal(error)

    def broke_protocol(self, error: ConnectorError) -> None:
        """End the connection because the broker broke the protocol: ``error`` is what the sends still
        waiting and the connector's log get; nothing the broker writes after it is read."""
        self._fatal(error)

    def _fatal(self, error: ConnectorError) -> None:
        if self.error is None:
            self.error = error
        connecting, self._connecting = self._connecting, None
        if connecting is not None:
            connecting.errback(error)
        if self.transport is not None and not self.closed:
            self.transport.loseConnection()

    # -- frames out ----------------------------------------------------------

    def write_frame(self, frame: Frame, *, content_length: bool = True) -> None:
        """Encode ``frame`` for the negotiated version and write it (after a held SEND, see
        :meth:`send_unconfirmed`, so frames leave in the order they were given)."""
        if self.closed or self.transport is None:
            raise ConnectorUnavailable("not connected to the broker")
        if self._held is not None:
            self._cover()
        self.transport.write(encode_frame(frame, self.version, add_content_length=content_length))
        self._wrote = True

    def _request(
        self,
        frame: Frame,
        receipt: bool,
        context: str,
        *,
        content_length: bool = True,
    ) -> Deferred[Frame | None]:
        """Write ``frame``; with ``receipt``, return a Deferred fired by its RECEIPT."""
        if self.closed or self.transport is None:
            return fail(self.error or ConnectorUnavailable("not connected to the broker"))
        if not receipt:
            self.write_frame(frame, content_length=content_length)
            return succeed(None)
        receipt_id = f"r-{next(self._receipt_ids)}"
        frame.headers["receipt"] = receipt_id
        waiting: Deferred[Frame | None] = Deferred(self._cancel_receipt)
        # The id travels with the Deferred so cancelling needs no closure per frame.
        waiting.receipt_id = receipt_id  # type: ignore[attr-defined]
        self._receipts[receipt_id] = (waiting, context, self.clock.seconds())
        self._release_held()  # goes first, and this frame's receipt confirms it
        if self._uncovered:
            self._covering[receipt_id], self._uncovered = self._uncovered, []
        self.write_frame(frame, content_length=content_length)
        return waiting

    def _cancel_receipt(self, waiting: Deferred[Frame | None]) -> None:
        receipt_id = getattr(waiting, "receipt_id", None)
        entry = self._receipts.get(receipt_id) if receipt_id is not None else None
        if entry is not None and entry[0] is waiting:
            del self._receipts[receipt_id]  # type: ignore[arg-type]
            self._settle_covered(self._covering.pop(receipt_id, None),  # type: ignore[arg-type]
                                 ConnectorUnavailable(f"{entry[1]}: the wait for the broker's RECEIPT was cancelled"))

    def _sweep_receipts(self) -> None:
        """Fail the receipts outstanding longer than ``receipt_timeout`` (oldest first)."""
        timeout = self.receipt_timeout
        if timeout is None or not self._receipts:
            return
        limit = self.clock.seconds() - timeout
        expired: list[tuple[Deferred[Frame | None], str]] = []
        for receipt_id, (waiting, _, sent) in self._receipts.items():
            if sent > limit:
                break  # in sending order: the rest are younger
            expired.append((waiting, receipt_id))
        for waiting, receipt_id in expired:
            entry = self._receipts.pop(receipt_id, None)
            if entry is None:  # answered or lost meanwhile
                continue
            self.log.warn(
                "no RECEIPT for {context} from broker {peer} within {timeout}s",
                context=entry[1],
                peer=self._peer(),
                timeout=timeout,
            )
            timed_out = TimeoutError(f"{entry[1]}: no RECEIPT within {timeout}s")
            self._settle_covered(self._covering.pop(receipt_id, None), ConnectorUnavailable(str(timed_out)))
            waiting.errback(timed_out)

    @property
    def outstanding_receipts(self) -> int:
        """Frames sent with a receipt that the broker has not answered yet."""
        return len(self._receipts)

    def connect(
        self,
        *,
        login: str | None = None,
        passcode: str | None = None,
        host: str = "/",
        heartbeat: tuple[int, int] = (0, 0),
        headers: dict[str, str] | None = None,
        versions: tuple[str, ...] = VERSIONS,
    ) -> Deferred[Frame]:
        """Send CONNECT; the Deferred fires with the CONNECTED frame.

        Fails with :class:`BrokerError` when the broker answers ERROR (bad
        credentials) or :class:`ConnectorUnavailable` when the connection drops.
        ``heartbeat`` is ``(cx, cy)`` in milliseconds; ``headers`` adds e.g. ``client-id``.
        """
        if self._connecting is not None or self.ready:
            return fail(ConnectorError("CONNECT already sent on this connection"))
        if self.closed or self.transport is None:
            return fail(self.error or ConnectorUnavailable("not connected to the broker"))
        frame_headers = {"accept-version": ",".join(versions), "host": host}
        if login is not None:
            frame_headers["login"] = login
        if passcode is not None:
            frame_headers["passcode"] = passcode
        frame_headers["heart-beat"] = f"{heartbeat[0]},{heartbeat[1]}"
        frame_headers.update(headers or {})
        self._heartbeat = heartbeat

        def cancel(waiting: Deferred[Frame]) -> None:
            if self._connecting is waiting:
                self._connecting = None

        connecting: Deferred[Frame] = Deferred(cancel)
        self._connecting = connecting
        self.write_frame(Frame("CONNECT", frame_headers))
        return connecting

    def send(
        self,
        destination: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        text: bool = False,
        receipt: bool = True,
        transaction: str | None = None,
    ) -> Deferred[Frame | None]:
        """SEND ``body`` to ``destination``.

        :param text: leave out ``content-length``, which brokers such as
            ActiveMQ read as "this is a TextMessage"; a body containing NUL
            cannot be sent that way (:class:`ConnectorError`).
        :param receipt: ask for a RECEIPT and fire the Deferred with it.
        """
        try:
            frame = _send_frame(destination, body, headers, text, transaction)
        except ConnectorError as error:
            return fail(error)
        return self._request(frame, receipt, f"SEND to {destination}", content_length=not text)

    def send_unconfirmed(
        self,
        destination: str,
        body: bytes,
        headers: dict[str, str] | None,
        settled: Settled,
        *,
        text: bool = False,
    ) -> None:
        """SEND without a receipt of its own (the frame takes ``headers`` as they
        are: pass a dict nobody else changes); ``settled(error, None)`` runs once a
        later receipt on this connection covers it, or with the error if the
        connection fails first.

        The broker handles one connection's frames in order, so its RECEIPT
        for a frame means the frames before it were taken too.  The next frame
        written with a receipt confirms the unconfirmed SENDs before it; if
        none comes, the newest unconfirmed SEND is held back until the end of
        the reactor turn and then carries the receipt that confirms the burst:
        one broker receipt per burst instead of one per SEND.
        """
        if self.closed or self.transport is None:
            settled(self.error or ConnectorUnavailable("not connected to the broker"), None)
            return
        try:
            frame = _send_frame(destination, body, headers, text, None, copy=False)
        except ConnectorError as error:
            settled(error, None)
            return
        self._release_held()
        self._held = (frame, not text, settled)
        self._wrote = True
        if self._cover_call is None:
            self._cover_call = self.clock.callLater(0, self._cover)

    def _release_held(self) -> None:
        """Write the held unconfirmed SEND, if any, without a receipt: the next receipt covers it."""
        held, self._held = self._held, None
        if held is not None:
            assert self.transport is not None  # (a frame is held only while connected)
            self.transport.write(encode_frame(held[0], self.version, add_content_length=held[1]))
            self._uncovered.append(held[2])

    def _cover(self) -> None:
        """Write the held SEND with a receipt that confirms every unconfirmed SEND up to it."""
        if self._cover_call is not None and self._cover_call.active():
            self._cover_call.cancel()
        self._cover_call = None
        held, self._held = self._held, None
        if held is None:
            return
        frame, content_length, own = held
        context = f"SEND to {frame.headers['destination']} (confirming {len(self._uncovered) + 1} SENDs)"
        # the receipt settles the SENDs before this one (see _request) and this one itself
        waiting = self._request(frame, True, context, content_length=content_length)
        waiting.addCallbacks(self._settle_own, self._settle_own_failed, callbackArgs=(own,), errbackArgs=(own,))

    def _settle_own(self, _: object, own: Settled) -> None:
        self._settle_covered([own], None)

    def _settle_own_failed(self, failure: Failure, own: Settled) -> None:
        error = failure.value if isinstance(failure.value, Exception) else ConnectorError(str(failure.value))
        self._settle_covered([own], error)

    def _settle_covered(self, covered: list[Settled] | None, error: Exception | None) -> None:
        """Settle unconfirmed SENDs: taken by the broker (``error`` None) or not."""
        if not covered:
            return
        if self.on_unconfirmed is not None:
            self.on_unconfirmed(len(covered), error)
        for settled in covered:
            settled(error, None)

    def subscribe(
        self,
        destination: str,
        subscription_id: str,
        handler: MessageHandler,
        *,
        ack: str = "auto",
        headers: dict[str, str] | None = None,
        receipt: bool = True,
        oversized: OversizedHandler | None = None,
    ) -> Deferred[Frame | None]:
        """SUBSCRIBE; MESSAGE frames of ``subscription_id`` go to ``handler`` from now on, and those over the
        frame limit to ``oversized`` (default: the protocol settles them with the broker, :meth:`_skipped`)."""
        frame_headers = dict(headers or {})
        frame_headers.update({"destination": destination, "id": subscription_id, "ack": ack})
        self._handlers[subscription_id] = handler
        self._subscribed[subscription_id] = (ack, destination, oversized)
        result = self._request(Frame("SUBSCRIBE", frame_headers), receipt, f"SUBSCRIBE to {destination}")
        result.addErrback(self._subscribe_failed, subscription_id)
        return result

    def _subscribe_failed(self, failure: Failure, subscription_id: str) -> Failure:
        self._handlers.pop(subscription_id, None)
        self._subscribed.pop(subscription_id, None)
        return failure

    def unsubscribe(
        self,
        subscription_id: str | None,
        *,
        headers: dict[str, str] | None = None,
        receipt: bool = True,
    ) -> Deferred[Frame | None]:
        """UNSUBSCRIBE (``subscription_id`` None: e.g. only a durable name in ``headers``)."""
        frame_headers = dict(headers or {})
        if subscription_id is not None:
            frame_headers["id"] = subscription_id
            self._handlers.pop(subscription_id, None)
            self._subscribed.pop(subscription_id, None)
        return self._request(Frame("UNSUBSCRIBE", frame_headers), receipt, f"UNSUBSCRIBE {subscription_id}")

    def ack_headers(self, message: Frame) -> dict[str, str]:
        """The ACK/NACK headers naming ``message`` in the negotiated version."""
        headers = message.headers
        message_id = headers.get("message-id", "")
        if self.version == "1.2":
            return {"id": headers.get("ack", message_id)}
        if self.version == "1.1":
            return {"message-id": message_id, "subscription": headers.get("subscription", "")}
        return {"message-id": message_id}

    def ack(
        self,
        message: Frame,
        *,
        transaction: str | None = None,
        receipt: bool = False,
    ) -> Deferred[Frame | None]:
        """Acknowledge the MESSAGE frame ``message``."""
        return self._acknowledge("ACK", message, transaction, receipt)

    def nack(
        self,
        message: Frame,
        *,
        transaction: str | None = None,
        receipt: bool = False,
    ) -> Deferred[Frame | None]:
        """Reject the MESSAGE frame ``message`` (STOMP 1.1 and later)."""
        if self.version == "1.0":
            return fail(ConnectorError("the broker speaks STOMP 1.0, which has no NACK"))
        return self._acknowledge("NACK", message, transaction, receipt)

    def _acknowledge(
        self,
        command: str,
        message: Frame,
        transaction: str | None,
        receipt: bool,
    ) -> Deferred[Frame | None]:
        headers = self.ack_headers(message)
        if transaction is not None:
            headers["transaction"] = transaction
        context = f"{command} of {message.headers.get('message-id')}"
        return self._request(Frame(command, headers), receipt, context)

    def begin(self, transaction: str, *, receipt: bool = False) -> Deferred[Frame | None]:
        """BEGIN a broker transaction."""
        return self._request(Frame("BEGIN", {"transaction": transaction}), receipt, f"BEGIN {transaction}")

    def commit(self, transaction: str, *, receipt: bool = True) -> Deferred[Frame | None]:
        """COMMIT a broker transaction; the receipt means its sends are durable."""
        return self._request(Frame("COMMIT", {"transaction": transaction}), receipt, f"COMMIT {transaction}")

    def abort(self, transaction: str, *, receipt: bool = True) -> Deferred[Frame | None]:
        """ABORT a broker transaction."""
        return self._request(Frame("ABORT", {"transaction": transaction}), receipt, f"ABORT {transaction}")

    def when_lost(self) -> Deferred[None]:
        """A Deferred that fires once the connection is gone."""
        if self.closed:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._lost_waiters.append(waiter)
        return waiter

    def disconnect(self, timeout: float = 5.0) -> Deferred[None]:
        """DISCONNECT politely (waiting for the receipt up to ``timeout`` s), then close."""
        if self.closed or self.transport is None:
            return succeed(None)
        lost = self.when_lost()
        transport = self.transport
        if not self.ready:
            transport.loseConnection()
            return lost
        answered = self._request(Frame("DISCONNECT", {}), True, "DISCONNECT")
        answered.addTimeout(timeout, self.clock)
        answered.addBoth(lambda _: transport.loseConnection())
        return lost

    def abort_connection(self) -> None:
        """Drop the connection at once (no DISCONNECT)."""
        if self.transport is not None and not self.closed:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    # -- heart-beats ---------------------------------------------------------

    def _start_heartbeats(self, send_ms: int, expect_ms: int) -> None:
        if send_ms:
            # Check twice per interval, so a late timer (a busy reactor) never
            # leaves the broker more than one interval without a byte from us.
            self._sender = LoopingCall(self._beat)
            self._sender.clock = self.clock
            self._sender.start(send_ms / 2000.0, now=False)
        if expect_ms:
            limit = expect_ms / 1000.0 * self.heartbeat_grace
            self._watchdog = LoopingCall(self._check_alive, limit)
            self._watchdog.clock = self.clock
            self._watchdog.start(expect_ms / 1000.0, now=False)

    def _stop_heartbeats(self) -> None:
        for loop in (self._sender, self._watchdog, self._sweeper):
            if loop is not None and loop.running:
                loop.stop()
        self._sender = self._watchdog = self._sweeper = None

    def _beat(self) -> None:
        if not self._wrote and self.transport is not None and not self.closed:
            self.transport.write(HEARTBEAT)
        self._wrote = False

    def _check_alive(self, limit: float) -> None:
        silent = self.clock.seconds() - self._last_received
        if silent > limit:
            self.log.warn(
                "no data from broker {peer} for {silent:.1f}s (limit {limit:.1f}s): closing",
                peer=self._peer(),
                silent=silent,
                limit=limit,
            )
            self._stop_heartbeats()
            self.error = ConnectorUnavailable(f"broker silent for {silent:.1f}s (heart-beat timeout)")
            self.abort_connection()

    def _peer(self) -> str:
        if self.transport is None:
            return "?"
        try:
            return str(self.transport.getPeer())
        except Exception:  # pragma: no cover - exotic transports
            return "?"


class StompClientFactory(Factory):
    """Builds :class:`StompClientProtocol` instances sharing a clock and limits."""

    protocol = StompClientProtocol

    def __init__(self, clock: IReactorTime, *, limits: Limits | None = None, **options: Any) -> None:
        self.clock = clock
        self.limits = limits
        self.options = options

    def buildProtocol(self, addr: Any) -> StompClientProtocol:
        protocol = StompClientProtocol(self.clock, limits=self.limits, **self.options)
        protocol.factory = self
        return protocol


def _send_frame(destination: str, body: bytes, headers: dict[str, str] | None, text: bool,
                transaction: str | None, *, copy: bool = True) -> Frame:
    """A SEND frame; a text body may not contain NUL (ConnectorError): it would need content-length.
    Without ``copy`` the frame takes ``headers`` itself (the caller hands over a dict of its own)."""
    frame_headers = dict(headers or {}) if copy or headers is None else headers
    frame_headers["destination"] = destination
    if transaction is not None:
        frame_headers["transaction"] = transaction
    if text:
        if b"\x00" in body:
            raise ConnectorError(f"a text body for {destination} contains NUL; it needs content-length")
        frame_headers.pop("content-length", None)
    return Frame("SEND", frame_headers, body)

