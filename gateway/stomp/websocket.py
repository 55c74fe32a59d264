"""STOMP over WebSocket: listeners of the form ``ws:<endpoint>`` (``ws:ssl:...`` for wss).

This module owns the glue between autobahn's Twisted WebSocket server and the
ordinary :class:`~gateway.stomp.protocol.StompServerProtocol`: each WebSocket
message (text or binary) is fed to the protocol as received bytes, and what the
protocol writes goes out as one WebSocket message, text when it is valid
UTF-8, binary otherwise.  :class:`WebSocketTransport` is the transport the
STOMP protocol sees; it maps writes, closing, producer registration and
pausing onto the WebSocket connection and the TCP (or TLS) transport beneath
it, so sessions, auth, heart-beats and flow control work as over TCP.

It must not parse STOMP or WebSocket framing itself (the codec and autobahn
do), and it holds no per-session state beyond the connection it adapts.
:func:`gateway.stomp.listeners.listener_for` builds the factory for a ``ws:`` listener.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny, ConnectionRequest
from twisted.internet.interfaces import IAddress, IConsumer, IPushProducer, ITransport
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway import __version__
from gateway.errors import FrameTooLarge
from gateway.stomp.origins import origin_refusal, parse_allowed
from gateway.stomp.protocol import StompServerFactory, StompServerProtocol

STOMP_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp", "stomp")
"""WebSocket subprotocols for STOMP, preferred first (the highest version a client offers wins)."""

CLOSE_NORMAL = 1000


def choose_subprotocol(offered: Sequence[str]) -> str | None:
    """The subprotocol to answer a client offering ``offered`` with.

    ``None`` when the client offers none (accepted without one); the highest
    STOMP version among those offered otherwise.  A client offering only
    subprotocols other than STOMP's is refused (HTTP 400), as it could not
    talk to us anyway.
    """
    if not offered:
        return None
    for name in STOMP_SUBPROTOCOLS:
        if name in offered:
            return name
    raise ConnectionDeny(
        ConnectionDeny.BAD_REQUEST,
        f"no STOMP subprotocol among {', '.join(offered)}; offer one of {', '.join(STOMP_SUBPROTOCOLS)}",
    )


def is_text(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8, so it can travel as a WebSocket text message."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class MessageChannel(Protocol):
    """What :class:`WebSocketTransport` needs from a WebSocket connection."""

    transport: Any
    """The byte transport under the WebSocket (TCP or TLS)."""

    def can_send_messages(self) -> bool: ...

    def send_stomp_message(self, payload: bytes, *, binary: bool) -> None: ...

    def close_websocket(self) -> None: ...

    def abort_websocket(self) -> None: ...


@implementer(ITransport, IConsumer, IPushProducer)
class WebSocketTransport:
    """The transport a :class:`StompServerProtocol` writes to when its client uses WebSocket.

    One ``write`` is one WebSocket message.  Producer registration and reading
    pause/resume go straight to the TCP/TLS transport: its write buffer pauses
    deliveries, and pausing reading really stops reading from the socket.
    """

    one_message_per_write = True
    """Read by :class:`~gateway.stomp.protocol.StompServerProtocol`: frames are not joined into one write."""

    def __init__(self, channel: MessageChannel) -> None:
        self.channel = channel
        self.disconnecting = False

    @property
    def tcp(self) -> Any:
        return self.channel.transport

    def write(self, data: bytes) -> None:
        if data and not self.disconnecting and self.channel.can_send_messages():
            self.channel.send_stomp_message(data, binary=not is_text(data))

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Close the WebSocket (close handshake), after what was written."""
        if not self.disconnecting:
            self.disconnecting = True
            self.channel.close_websocket()

    def abortConnection(self) -> None:
        self.disconnecting = True
        self.channel.abort_websocket()

    def getPeer(self) -> IAddress:
        peer: IAddress = self.tcp.getPeer()
        return peer

    def getHost(self) -> IAddress:
        host: IAddress = self.tcp.getHost()
        return host

    def setTcpNoDelay(self, enabled: bool) -> None:
        set_no_delay = getattr(self.tcp, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(enabled)

    # -- IConsumer: the STOMP protocol's deliveries follow the socket's write buffer

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.tcp.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self.tcp.unregisterProducer()

    # -- IPushProducer: reading from the client

    def pauseProducing(self) -> None:
        self.tcp.pauseProducing()

    def resumeProducing(self) -> None:
        self.tcp.resumeProducing()

    def stopProducing(self) -> None:
        self.tcp.stopProducing()


class StompWebSocketProtocol(WebSocketServerProtocol):
    """One WebSocket client: a :class:`StompServerProtocol` once the WebSocket is open."""

    factory: StompWebSocketFactory

    stomp: StompServerProtocol | None = None
    _message_size = 0
    _ended = False

    def onConnect(self, request: ConnectionRequest) -> str | None:
        headers = request.headers  # (autobahn lower-cases the names)
        refusal = origin_refusal(headers.get("origin"), headers.get("host"), self.factory.allowed_origins,
                                 self.factory.tls)
        if refusal is not None:
            self.factory.log.warn("refused a WebSocket handshake from {peer}: {reason}", peer=request.peer,
                                  reason=refusal)
            raise ConnectionDeny(ConnectionDeny.FORBIDDEN, refusal)
        return choose_subprotocol(request.protocols)

    def onOpen(self) -> None:
        self.stomp = self.factory.stomp_factory.buildProtocol(self.transport.getPeer())  # type: ignore[union-attr]
        self.stomp.makeConnection(WebSocketTransport(self))

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if self.stomp is not None:
            self.stomp.dataReceived(payload)

    def onMessageBegin(self, isBinary: bool) -> None:
        self._message_size = 0
        super().onMessageBegin(isBinary)

    def onMessageFrameBegin(self, length: int) -> None:
        """Refuse an over-size message with a STOMP ERROR before autobahn fails the WebSocket
        (it checks ``maxMessagePayloadSize`` here too, before any payload is buffered)."""
        self._message_size += length
        limit = self.factory.max_message_size
        if self._message_size > limit and self.stomp is not None and self.stomp.session is not None:
            self.stomp.session.protocol_error(FrameTooLarge(
                "frame too large",
                f"a WebSocket message of {self._message_size} bytes or more is larger than the limit "
                f"of {limit} bytes (max_frame_size)",
            ))
        super().onMessageFrameBegin(length)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        self._end_session(reason)

    def _end_session(self, reason: Failure) -> None:
        """The STOMP protocol learns once that its connection is gone."""
        if self.stomp is not None and not self._ended:
            self._ended = True
            self.stomp.connectionLost(reason)

    # -- MessageChannel ------------------------------------------------------

    def can_send_messages(self) -> bool:
        return bool(self.state == self.STATE_OPEN)

    def send_stomp_message(self, payload: bytes, *, binary: bool) -> None:
        if len(payload) <= self.factory.max_message_size:
            self.sendMessage(payload, isBinary=binary)
            return
        # sendMessage applies the incoming limit to outgoing messages too; a MESSAGE may be larger
        self.beginMessage(isBinary=binary)
        self.sendMessageFrame(payload)
        self.endMessage()

    def close_websocket(self) -> None:
        self.sendClose(CLOSE_NORMAL)

    def abort_websocket(self) -> None:
        self.dropConnection(abort=True)


class StompWebSocketFactory(WebSocketServerFactory):
    """Serves STOMP over WebSocket at any URL path, with the sessions of ``stomp_factory``."""

    protocol = StompWebSocketProtocol  # type: ignore[assignment]
    noisy = False
    log = Logger()

    def __init__(self, stomp_factory: StompServerFactory, reactor: Any, allowed_origins: list[str] | None = None,
                 *, secure: bool = False) -> None:
        super().__init__(server=f"jmsgateway/{__version__}", reactor=reactor)
        self.stomp_factory = stomp_factory
        self.allowed_origins = parse_allowed(allowed_origins or [])
        """``[gateway] allowed_origins`` (empty: same-origin only; None: every origin)."""
        self.tls = secure
        """Whether the listener is TLS (a Host header without a port means 443)."""
        self.max_message_size = stomp_factory.limits.max_frame_size
        """Bytes a client's WebSocket message may have: ``[stomp] max_frame_size``."""
        self.setProtocolOptions(
            maxFramePayloadSize=self.max_message_size,
            maxMessagePayloadSize=self.max_message_size,
            # The STOMP codec judges the bytes (headers must be UTF-8, a TextMessage too); clients
            # such as stomp.py send bodies that are not UTF-8 in text messages.
            utf8validateIncoming=False,
            failByDrop=False,  # close handshake, so an ERROR frame written before reaches the client
            webStatus=False,
            # Origins are judged by onConnect (origin_refusal: 403); autobahn would refuse
            # "Origin: null" itself with a 400 before it.
            allowNullOrigin=True,
        )
