"""Twisted glue between a transport and the STOMP session.

:class:`StompServerProtocol` only feeds received bytes to the sans-IO
decoder and hands frames to :class:`StompSession`; it encodes the frames the
session sends for the negotiated version, and turns the transport's
back-pressure into pausing deliveries.  After a protocol error the session
sends ERROR and the protocol closes this connection; others are unaffected.

A client's frames are handled at most :data:`INPUT_FRAMES` frames or
:data:`INPUT_SLICE` bytes of frames per reactor turn, whichever comes first: a
client whose burst fills a 64 KB read does not hold the reactor for the whole
of it.  What is read goes into the decoder's buffer at once; frames are taken
from it until this turn's reach either bound, and the rest waits (reading from
that client paused meanwhile) while the reactor writes what they produced - a
forwarded SEND reaches its broker while the burst is still being read - and
serves the other connections.  A small frame's cost is mostly per frame (the
decode, the session, the broker, the MESSAGE), so the frames are counted; a
large frame's also per byte, so their bytes are too; the part of a large frame
that has arrived costs a turn nothing (a 64 KB body is not handed through eight
turns on its way in).  The
session may also hold reading while a target it sends to is congested
(:meth:`StompServerProtocol.hold_input`, :mod:`gateway.flow`).

Deliveries follow the transport's write buffer: Twisted's reports it full once
it holds more than its ``bufferSize`` (64 KB).  Deliveries go on until
:data:`WRITE_GRACE` bytes (or :data:`WRITE_GRACE_FRAMES` frames) have been
written from the write that filled it, then pause until the transport has
written everything out: one 64 KB message fills Twisted's buffer on its own,
and pausing at each would hand a large-message consumer one message per reactor
turn, each through the queue and a resume.

MESSAGE frames delivered while a client's input is handled (the deliveries a
SEND or an ACK causes, on any connection) are gathered per connection and
handed to its transport in one write when that input slice is
done, or sooner past :data:`OUTPUT_BATCH` bytes: one call into the transport
a slice instead of one per frame.  At the end of the slice a TCP connection
whose transport holds nothing gets them on its socket at once, one ``send()``
(:meth:`StompServerProtocol._send_now`): no writer registration and
unregistration (two ``epoll_ctl``) and no wait for the reactor's next poll,
which before wrote them after the next slice of the same read; behind what
the transport holds they are buffered as before.  A RECEIPT, an ERROR or a
heart-beat to a connection first writes what it has gathered (frames keep
their order).  A WebSocket
transport, whose every write is one WebSocket message, gets its frames one
write each as before.  Deliveries outside an input slice (a timer's, a store
commit's) are written at once.

The protocol also owns the connection's lifecycle at the edge: a connection
past a ``max_connections`` cap (:mod:`gateway.stomp.admission`) gets an ERROR
and is closed at once; one that has not completed CONNECT within
``[stomp] connect_timeout_ms`` gets an ERROR and is closed; and a closing
connection (after ERROR, DISCONNECT, a missed heart-beat) whose peer does not
take what is still buffered is aborted after ``[stomp] close_timeout_ms``, so
the messages it held go back to their queues.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter
from twisted.internet import tcp
from twisted.internet.interfaces import (
    IDelayedCall,
    IHalfCloseableProtocol,
    IPushProducer,
    IReactorTime,
    ISSLTransport,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.broker.settings import BrokerSettings
from gateway.errors import StompProtocolError
from gateway.interfaces import IAuthorizer, ICertificateIdentity
from gateway.routing.destination_map import DestinationMap
from gateway.security.login_throttle import LoginThrottle
from gateway.stomp.admission import ConnectionAdmission
from gateway.stomp.durable_owners import DurableOwners
from gateway.stomp.login_connections import LoginConnections
from gateway.stomp.session import InboundTransformer, StompError, StompSession
from gateway.stomp.settings import StompSettings
from gateway.stomp.traffic import StompTraffic
from gateway.wire.codec import HEARTBEAT, FrameDecoder, Limits, encode_frame
from gateway.wire.frame import Frame

INPUT_FRAMES = 40
"""Frames of one client handled per reactor turn at most: a 64 KB read of 100-byte SENDs is ~9 turns, about
as with the 8 KB slices before (44 frames a turn); of 1 KB SENDs 2 turns, where 8 KB slices made it 9 (7
frames each), each a pass through the reactor and its system calls (~13% of the gateway's CPU a 1 KB
message on the real server).  40 MESSAGE frames of 1 KB bodies stay below a transport's 64 KB write buffer,
so a consumer that keeps up is not paused by one turn's deliveries (:data:`WRITE_GRACE_FRAMES`)."""
INPUT_SLICE = 65536
"""Bytes of one client's frames handled per reactor turn at most (the frame that reaches it is the turn's
last: a large frame takes a turn of its own)."""


OUTPUT_BATCH = 65536
"""Bytes of MESSAGE frames a connection gathers during an input slice before handing them to its
transport: the transport's buffer (and so its back-pressure, :data:`WRITE_GRACE`) learns of them at most
this late.  As large as the transport's buffer, so a slice of :data:`INPUT_FRAMES` 1 KB MESSAGEs (~48 KB)
reaches the socket in one ``send()`` at the slice's end (:meth:`StompServerProtocol._send_now`) instead of
waiting in the transport, where the next slice's took it past 64 KB and paused the consumer's deliveries
(16 KB before, issue 39)."""

WRITE_GRACE = 192 * 1024
"""Bytes a connection is written from the write that filled its transport's buffer (past its 64 KB) on
before deliveries pause until the buffer is empty.  What one connection holds is at most 64 KB + this + the
frame that crossed it."""
WRITE_GRACE_FRAMES = 4
"""Frames the grace lasts at most, whatever their size: it is for large messages (one fills Twisted's
buffer alone); 192 KB of small MESSAGE frames held for a consumer that falls behind would be
~1,300 messages of latency (tens of milliseconds at full rate)."""

ANSWER_GRACE = WRITE_GRACE
"""Bytes of answers to the client's own frames (RECEIPT, ERROR) written past the full write buffer before
reading from that client stops until the transport wrote everything out.  Deliveries pause by themselves
(:data:`WRITE_GRACE`), but the answers are written whatever the client reads: a client that pipelines
receipted SENDs (or SENDs refused by ``[[authorization]]``, whose ERROR leaves it open) and never reads
would otherwise fill the gateway's memory with them (helper stall: 256 MB offered, 256 MB read, RSS
+253 MB).  MESSAGE frames do not count: a consumer that stops reading is still read (its DISCONNECT, an
ACK, a frame that earns an ERROR and the close)."""


@implementer(IPushProducer, IHalfCloseableProtocol)
class StompServerProtocol(Protocol):
    """One STOMP client connection."""

    log = Logger()

    def __init__(self, factory: StompServerFactory) -> None:
        self.factory = factory
        self.decoder = FrameDecoder(factory.limits)
        self.session: StompSession | None = None
        self.version = "1.0"
        self._closing = False
        self._next_slice: Any = None  # the DelayedCall handling the next slice of the frames read (None: none wait)
        self._holds = 0  # congested targets the session waits for (reading paused while > 0)
        self._lost = False
        self._input_ended = False  # the client half-closed: nothing more to read (reading never resumes)
        self.peer = "?"  # the client's host:port
        self._address: str | None = None  # the client address, once admitted
        self._connect_deadline: IDelayedCall | None = None
        self._abort_deadline: IDelayedCall | None = None
        self._dropped: list[str] = []  # headers the last frame could not carry (encode_frame fills it)
        self.connected_at = factory.clock.seconds()
        self.messages_in = 0  # SEND frames read
        self.messages_out = 0  # MESSAGE frames written
        self._over: int | None = None  # bytes written since the transport reported its buffer full (None: not)
        self._over_frames = 0  # frames written since then
        self._full = False  # deliveries paused for the write buffer
        self._answers_over = 0  # bytes of answers (RECEIPT, ERROR) written since the write buffer was full
        self._answers_held = False  # reading held until the transport wrote everything out (ANSWER_GRACE)
        self._out: list[bytes] = []  # MESSAGE frames gathered during an input slice (OUTPUT_BATCH)
        self._out_bytes = 0
        self._coalesce = True  # False: one write per frame (a WebSocket transport: one write, one message)
        self._producing = False  # registered as the transport's producer (until close)

    def connectionMade(self) -> None:
        # Receipts often follow an asynchronous commit: never let Nagle hold them back.
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
        peer = self.transport.getPeer()  # type: ignore[union-attr]
        address = str(getattr(peer, "host", "?"))
        self.peer = f"{address}:{getattr(peer, 'port', '?')}"
        refusal = self.factory.admission.admit(address)
        if refusal is not None:
            self.transport.write(encode_frame(Frame(  # type: ignore[union-attr]
                "ERROR", {"message": "too many connections", "content-type": "text/plain"}, f"{refusal}\n".encode()
            ), self.version))
            self.close()
            return
        self._address = address
        self._coalesce = not getattr(self.transport, "one_message_per_write", False)
        self.factory.connections.add(self)
        self.session = self.factory.new_session(self, self.peer)
        self.transport.registerProducer(self, True)  # type: ignore[union-attr]
        self._producing = True
        timeout = self.factory.settings.connect_timeout_ms
        if timeout:
            self._connect_deadline = self.factory.clock.callLater(timeout / 1000, self._connect_timed_out)

    def _connect_timed_out(self) -> None:
        """No CONNECT completed in time: ERROR and close (a socket must not hold a descriptor for ever)."""
        self._connect_deadline = None
        session = self.session
        if session is not None and session.state in ("new", "connecting"):
            seconds = self.factory.settings.connect_timeout_ms / 1000
            session.fail(StompError("connect timeout", f"no CONNECT completed within {seconds:g}s "
                                                       "([stomp] connect_timeout_ms)"))

    def dataReceived(self, data: bytes) -> None:
        session = self.session
        if session is None:
            return
        session.data_received()
        if self._next_slice is not None:  # frames read before still wait (a transport may deliver what it had)
            self.decoder.push(data)
            return
        self._handle(data)

    def _handle(self, data: bytes, *, sliced: bool = True) -> None:
        """Hand the frames ``data`` completes (with what is buffered) to the session; when ``sliced``,
        only until this turn's reach :data:`INPUT_FRAMES` frames or :data:`INPUT_SLICE` bytes, the rest on
        later turns.  The MESSAGE frames this causes are written when it is done (:data:`OUTPUT_BATCH`)."""
        factory = self.factory
        factory.gathering += 1
        try:
            self._take_frames(data, sliced)
        finally:
            factory.gathering -= 1
            if not factory.gathering and factory.unflushed:
                factory.flush_output()

    def _take_frames(self, data: bytes, sliced: bool) -> None:
        session = self.session
        assert session is not None
        decoder = self.decoder
        # The decoder holds this many bytes once this turn's slice is handled (heart-beats count too).
        rest = decoder.buffered + len(data) - INPUT_SLICE if sliced else -1
        budget = INPUT_FRAMES if sliced else 1 << 62  # frames this turn may still take
        # One frame at a time: CONNECT sets the version the frames behind it are decoded with.
        for item in decoder.frames(data):
            if isinstance(item, StompProtocolError):
                session.protocol_error(item)
                return
            if item.command == "SEND":
                self.messages_in += 1
                self.factory.traffic.received += 1
            session.frame_received(item)
            budget -= 1
            if (budget <= 0 or decoder.buffered <= rest) and not self._closing and decoder.may_hold_frame():
                # (stopping here leaves the rest buffered: the next turn takes it from the same place)
                if self._next_slice is None and not self._holds:
                    self.transport.pauseProducing()  # type: ignore[union-attr]
                self._next_slice = self.factory.clock.callLater(0, self._handle_next_slice)
                return

    def _handle_next_slice(self) -> None:
        """The next slice of the frames read; schedules the one after for the next reactor turn, or
        reads again once none is left."""
        self._next_slice = None
        if self._closing:
            return
        self._handle(b"")
        self._read_again()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._lost = True
        for call in (self._connect_deadline, self._abort_deadline):
            if call is not None and call.active():
                call.cancel()
        self._connect_deadline = self._abort_deadline = None
        if self._next_slice is not None:  # what the client sent before it went is still handled
            self._next_slice.cancel()
            self._next_slice = None
            if not self._closing:
                self._handle(b"", sliced=False)
        if self.session is not None:
            self.session.connection_lost()
        if self._address is not None:
            self.factory.connection_closed(self, self._address)
            self._address = None

    def readConnectionLost(self) -> None:
        """The client half-closed (a FIN: ``shutdown(SHUT_WR)``): it sends nothing more but may still read.
        What it sent is handled, then it is answered as after a DISCONNECT without a receipt: every
        RECEIPT (or ERROR) its frames asked for, in order, then the close
        (:meth:`StompSession.input_ended`).  Before, the FIN ended the connection at once and the
        RECEIPTs that waited for the store's commit were never written (helper stall)."""
        if self._input_ended:
            return
        self._input_ended = True
        if self._next_slice is not None:  # (reading is paused while slices wait: none should, but handle them)
            self._next_slice.cancel()
            self._next_slice = None
            if not self._closing:
                self._handle(b"", sliced=False)
        if self.session is None or self._closing:
            return
        self.session.input_ended()

    def writeConnectionLost(self) -> None:
        """(IHalfCloseableProtocol: the gateway never half-closes its own side.)"""

    def peer_certificate_name(self) -> str | None:
        """The subject CN of the client's verified certificate (``mtls:``, also under ``ws:``), or None."""
        transport = self.transport
        tls = getattr(transport, "tcp", transport)  # (a WebSocket transport adapts the TCP/TLS one beneath)
        if not ISSLTransport.providedBy(tls):
            return None
        certificate: Any = tls.getPeerCertificate()
        if certificate is None:
            return None
        name = certificate.get_subject().commonName
        return str(name) if name else None

    # -- FrameSink ---------------------------------------------------------

    def send_frame(self, frame: Frame) -> None:
        """Write ``frame``.  Inside an input slice (a RECEIPT for a SEND just read, an ERROR) it is gathered
        behind the slice's MESSAGE frames and sent with them at the slice's end, on the socket at once when
        the transport holds nothing (:meth:`flush_output`): no ``EPOLLOUT`` round for a client that waits for
        each RECEIPT (issue 39).  Outside a slice, written now (:meth:`_write_now`)."""
        if not self._closing:
            factory = self.factory
            gather = factory.gathering and self._coalesce
            if self._out and not gather:
                self.flush_output()
            if frame.command == "MESSAGE":
                self.messages_out += 1
                factory.traffic.sent += 1
            dropped = self._dropped
            data = encode_frame(frame, self.version, dropped=dropped)
            if gather:
                self._gather(data)  # (counted against the write buffer when flushed)
            else:
                if factory.gathering or not self._write_now(data):
                    self.transport.write(data)  # type: ignore[union-attr]
                if self._over is not None:
                    self._count_over(len(data))
            if self._over is not None and frame.command != "MESSAGE":
                self._count_answer(len(data))
            if dropped:
                self.factory.headers_dropped(frame, self.version, dropped)
                dropped.clear()

    _sends_at_write_now = -1
    """(``messages_in`` at the last :meth:`_write_now`: one write-now per SEND read at most)"""

    def _write_now(self, data: bytes) -> bool:
        """Send ``data`` on the socket now when the TCP transport holds nothing, instead of Twisted's
        buffered write, which waits for the next poll (``EPOLLOUT`` registered, then written in ``doWrite``:
        two ``epoll_ctl`` and a pass through the reactor): a RECEIPT written from a store commit's report
        leaves in that turn (issue 39).  At most once per SEND read (``messages_in``): a pipelining
        producer's receipts of one commit still go out in one buffered write.  Whatever the socket does
        not take now is buffered behind.  False: not done (TLS, WebSocket, something held, the same SENDs
        answered already, the connection closing): the caller writes it the usual way."""
        if self.messages_in == self._sends_at_write_now or not self._send_now(data):
            return False
        self._sends_at_write_now = self.messages_in
        return True

    def _send_now(self, data: bytes) -> bool:
        """Send ``data`` on the socket now if the TCP transport holds nothing (no writer registration, no
        pass through the reactor: :meth:`_write_now`, :meth:`flush_output`); what the socket does not take is
        buffered behind.  False: not done (TLS, WebSocket, something held, the connection closing)."""
        transport = self.transport
        if type(transport) is not tcp.Server or transport.dataBuffer or transport._tempDataLen \
                or not transport.connected or transport.disconnecting:
            return False
        sent = transport.writeSomeData(data)
        if not isinstance(sent, int) or sent <= 0:  # (a lost connection: the buffered write lets Twisted see it)
            return False
        if sent < len(data):
            transport.write(data[sent:])
        return True

    def send_message(self, data: bytes) -> None:
        if not self._closing:
            self.messages_out += 1
            factory = self.factory
            factory.traffic.sent += 1
            if factory.gathering and self._coalesce:  # (an input slice is being handled: OUTPUT_BATCH)
                self._gather(data)
                return
            self.transport.write(data)  # type: ignore[union-attr]
            if self._over is not None:
                self._count_over(len(data))

    def _gather(self, data: bytes) -> None:
        """Add ``data`` to what this input slice writes at its end (in one write; earlier past
        :data:`OUTPUT_BATCH` bytes, so back-pressure learns of it at most that late)."""
        out = self._out
        if not out:
            self.factory.unflushed.append(self)
        out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= OUTPUT_BATCH:
            self.flush_output()

    def flush_output(self, *, now: bool = False) -> None:
        """Hand the MESSAGE frames gathered so far to the transport, in one write; ``now`` (the end of an
        input slice): sent on the socket at once if the transport holds nothing (:meth:`_send_now`)."""
        out = self._out
        if not out:
            return
        size = self._out_bytes
        self._out = []
        self._out_bytes = 0
        # (one joined write: Twisted's writeSequence checks and measures each part in Python)
        data = out[0] if len(out) == 1 else b"".join(out)
        if not now or not self._send_now(data):
            self.transport.write(data)  # type: ignore[union-attr]
        if self._over is not None:
            self._count_over(size, len(out))

    def _count_over(self, size: int, frames: int = 1) -> None:
        """``frames`` frames of ``size`` bytes written past the full write buffer; pause deliveries past
        :data:`WRITE_GRACE` bytes or :data:`WRITE_GRACE_FRAMES` frames."""
        over = self._over = (self._over or 0) + size
        self._over_frames += frames
        if (over >= WRITE_GRACE or self._over_frames >= WRITE_GRACE_FRAMES) and not self._full:
            self._full = True
            if self.session is not None:
                self.session.pause_deliveries()

    def _count_answer(self, size: int) -> None:
        """An answer of ``size`` bytes (a RECEIPT, an ERROR) written past the full write buffer; past
        :data:`ANSWER_GRACE` bytes of them, stop reading from the client until the transport wrote
        everything out (:meth:`resumeProducing`)."""
        self._answers_over += size
        if self._answers_over >= ANSWER_GRACE and not self._answers_held:
            self._answers_held = True
            self.hold_input()

    def send_heartbeat(self) -> None:
        if not self._closing:
            if self._out:
                self.flush_output()
            self.transport.write(HEARTBEAT)  # type: ignore[union-attr]
            if self._over is not None:
                self._count_over(len(HEARTBEAT))

    def set_version(self, version: str) -> None:
        self.version = version
        self.decoder.version = version

    def hold_input(self) -> None:
        """Stop reading from the client until as many :meth:`release_input` calls came."""
        self._holds += 1
        if self._holds == 1 and not self._lost:
            self.transport.pauseProducing()  # type: ignore[union-attr]

    def release_input(self) -> None:
        """One reason to hold reading is gone; read again when none is left."""
        self._holds -= 1
        self._read_again()

    def _read_again(self) -> None:
        """Read from the client again unless something still holds reading: a slice waiting, a congested
        target or unread answers (:attr:`_holds`), the close, the loss or the end of its input."""
        if not self._holds and self._next_slice is None and not self._closing and not self._lost \
                and not self._input_ended:
            self.transport.resumeProducing()  # type: ignore[union-attr]

    def close(self) -> None:
        """Close after what is buffered is written; abort if the peer has not taken it within
        ``close_timeout_ms`` (a dead peer's socket never drains)."""
        if not self._closing:
            if self._out:
                self.flush_output()
            self._closing = True
            if self._producing:
                # Twisted closes a transport whose buffer drains while it holds a streaming producer it
                # paused only once that producer is unregistered (it asks the producer for more
                # instead): a consumer that stopped reading, then DISCONNECTed and read everything, kept
                # its connection, its message groups and its unacknowledged messages until the abort.
                self._producing = False
                self.transport.unregisterProducer()  # type: ignore[union-attr]
            self.transport.loseConnection()  # type: ignore[union-attr]
            if not self._lost:
                grace = self.factory.settings.close_timeout_ms / 1000
                self._abort_deadline = self.factory.clock.callLater(grace, self._abort)

    def _abort(self) -> None:
        self._abort_deadline = None
        if not self._lost:
            self.log.info("aborting the connection of {peer}: it did not take what was written within "
                          "{grace:g}s of closing ([stomp] close_timeout_ms)", peer=self.peer,
                          grace=self.factory.settings.close_timeout_ms / 1000)
            self.transport.abortConnection()  # type: ignore[union-attr]

    # -- IPushProducer: transport back-pressure ------------------------------

    def pauseProducing(self) -> None:
        """The transport's write buffer is past its size: the grace starts (:data:`WRITE_GRACE`).  (A
        transport may say so once, or again with each write: the bytes written are counted either way.)"""
        if self._over is None:
            self._over = 0

    def resumeProducing(self) -> None:
        """The transport wrote out all it held: deliveries go on, and a client held for its answers
        (:data:`ANSWER_GRACE`) is read again."""
        self._over = None
        self._over_frames = 0
        self._answers_over = 0
        if self._full:
            self._full = False
            if self.session is not None:
                self.session.resume_deliveries()
        if self._answers_held:
            self._answers_held = False
            self.release_input()

    def stopProducing(self) -> None:
        pass


DROPS_LOGGED = 10
"""Frames whose left-out headers are logged one by one in each :data:`DROP_WINDOW`."""
DROP_WINDOW = 10.0
"""Seconds of that window."""


class StompServerFactory(Factory):
    """Builds a session per connection with the gateway's shared collaborators."""

    protocol = StompServerProtocol
    noisy = False
    log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        destinations: DestinationMap,
        *,
        settings: StompSettings | None = None,
        broker_settings: BrokerSettings | None = None,
        portal: Any = None,
        transformer: InboundTransformer | None = None,
        registry: CollectorRegistry | None = None,
        authorizer: IAuthorizer | None = None,
        throttle: LoginThrottle | None = None,
        durable_owners: DurableOwners | None = None,
        login_connections: LoginConnections | None = None,
    ) -> None:
        self.clock = clock
        self.destinations = destinations
        self.settings = settings or StompSettings()
        self.broker_settings = broker_settings or BrokerSettings()
        self.portal = portal
        self.transformer = transformer
        self.authorizer = authorizer if authorizer is not None and authorizer.enabled else None
        self.throttle = throttle
        self.durable_owners = durable_owners
        """Owners of durable subscriptions at connectors (:mod:`gateway.stomp.durable_owners`; None without [auth])."""
        self.login_connections = login_connections if login_connections is not None else LoginConnections()
        """The connections each verified login holds, against ``[auth.limits]`` max_connections."""
        self.certificate_logins = portal is not None and ICertificateIdentity in portal.checkers
        """Whether ``[auth] certificates`` map client certificates to logins."""
        self.limits = Limits(
            max_frame_size=self.settings.max_frame_size,
            max_headers=self.settings.max_headers,
            max_header_length=self.settings.max_header_length,
        )
        self.connections: set[StompServerProtocol] = set()
        """The admitted connections."""
        self.gathering = 0
        """Input slices being handled (nested): while > 0, MESSAGE frames are gathered (:data:`OUTPUT_BATCH`)."""
        self.unflushed: list[StompServerProtocol] = []
        """Connections with gathered MESSAGE frames (a connection may be listed twice: its second flush is a no-op)."""
        self.traffic = StompTraffic(registry)
        """Messages in and out over all connections (the admin console's rates)."""
        self.admission = ConnectionAdmission(self.settings.max_connections,
                                             self.settings.max_connections_per_address, registry)
        self._drop_window: float | None = None
        self._drops_logged = 0
        self.dropped_headers = Counter(
            "jmsgateway_stomp_headers_dropped",
            "Message headers left out of MESSAGE frames because the client's STOMP version cannot carry them",
            ["version"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

    def headers_dropped(self, frame: Frame, version: str, names: list[str]) -> None:
        """Count and log headers :func:`encode_frame` left out of ``frame`` (logged: the first
        :data:`DROPS_LOGGED` in each :data:`DROP_WINDOW` seconds, then one line saying the rest are
        only counted; a producer's every message could otherwise be a log line)."""
        self.dropped_headers.labels(version).inc(len(names))
        now = self.clock.seconds()
        if self._drop_window is None or now - self._drop_window >= DROP_WINDOW:
            self._drop_window, self._drops_logged = now, 0
        self._drops_logged += 1
        if self._drops_logged > DROPS_LOGGED:
            if self._drops_logged == DROPS_LOGGED + 1:
                self.log.warn(
                    "headers left out of more than {limit} frames within {window:g}s: the others of these "
                    "{window:g}s are counted in jmsgateway_stomp_headers_dropped_total, not logged",
                    limit=DROPS_LOGGED, window=DROP_WINDOW)
            return
        self.log.warn(
            "{command} {id}: header(s) {names} left out: STOMP {version} cannot carry their value "
            "(a NUL, or a line break without escapes)",
            command=frame.command, id=frame.headers.get("message-id", "-"), names=", ".join(map(repr, names)),
            version=version,
        )

    def flush_output(self) -> None:
        """Write every connection's gathered MESSAGE frames (the end of an input slice)."""
        unflushed = self.unflushed
        self.unflushed = []
        for protocol in unflushed:
            protocol.flush_output(now=True)

    def buildProtocol(self, addr: Any) -> StompServerProtocol:
        return StompServerProtocol(self)

    def new_session(self, protocol: StompServerProtocol, peer: str) -> StompSession:
        return StompSession(
            protocol,
            self.clock,
            self.destinations,
            settings=self.settings,
            broker_settings=self.broker_settings,
            portal=self.portal,
            transformer=self.transformer,
            peer=peer,
            authorizer=self.authorizer,
            throttle=self.throttle,
            durable_owners=self.durable_owners,
            login_connections=self.login_connections if self.portal is not None else None,
            certificate_name=protocol.peer_certificate_name if self.certificate_logins else None,
        )

    def connection_closed(self, protocol: StompServerProtocol, address: str) -> None:
        self.connections.discard(protocol)
        self.admission.release(address)
