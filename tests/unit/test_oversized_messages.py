"""A MESSAGE over a broker connection's frame limit is skipped, not a poison message.

Before: the decoder refused the frame, the protocol closed the connection to the broker, the
broker put the unacknowledged message back and sent it again on the next connection: for ever,
and the messages behind it in the queue never arrived.  Now the decoder (asked to, for MESSAGE
frames) reports the frame with its headers and discards its body as it streams in, the protocol
NACKs it (ACKs it on STOMP 1.0, drops it for an ``auto`` subscription), the connector logs and
counts it, and the connection goes on.  A frame whose headers alone are over the limit still ends
the connection.  The decoder with fake bytes, the protocol and the connector on StringTransports.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import formatEvent, globalLogPublisher

from gateway.connectors.stomp_client import StompClientFactory, StompClientProtocol
from gateway.errors import FrameSkipped, FrameTooLarge, MalformedFrame, StompProtocolError
from gateway.interfaces import SubscriptionSpec
from gateway.message.model import DUPLICATE_ID
from gateway.wire.codec import FrameDecoder, Limits, encode_frame
from gateway.wire.frame import Frame
from tests.support.log_events import observer
from tests.unit.test_stomp_client_connector import Consumer, FakeBroker, broker, clock, result_of, started

__all__ = ["broker", "clock"]  # (that file's fixtures: a clock at 0, a fake broker)

LIMIT = 4096
SKIP = frozenset({"MESSAGE"})


def message(message_id: str, body: bytes, *, content_length: bool = True, headers: dict[str, str] | None = None
            ) -> bytes:
    frame = Frame("MESSAGE", {"subscription": "1", "message-id": message_id, "ack": f"a-{message_id}",
                              "destination": "/queue/a", **(headers or {})}, body)
    return encode_frame(frame, "1.2", add_content_length=content_length)


def decoder(limit: int = LIMIT, skip: frozenset[str] = SKIP, skip_limit: int = 1 << 30) -> FrameDecoder:
    return FrameDecoder(Limits(max_frame_size=limit), "1.2", skip_oversized=skip, skip_limit=skip_limit)


def fed(decoder: FrameDecoder, data: bytes, chunk: int) -> tuple[list[Frame | StompProtocolError], int]:
    """What ``decoder`` reads from ``data`` fed ``chunk`` bytes at a time, and the most it buffered."""
    out: list[Frame | StompProtocolError] = []
    most = 0
    for start in range(0, len(data), chunk):
        out += decoder.feed(data[start : start + chunk])
        most = max(most, decoder.buffered)
    return out, most


def described(items: list[Frame | StompProtocolError]) -> list[tuple[str, str | None]]:
    shown: list[tuple[str, str | None]] = []
    for item in items:
        if isinstance(item, FrameSkipped):
            shown.append(("skipped", item.headers.get("message-id")))
        elif isinstance(item, Frame):
            shown.append((item.command, item.headers.get("message-id")))
        else:
            shown.append(("error", item.message))
    return shown


# -- the decoder ----------------------------------------------------------------------------------


@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "to-the-NUL"])
@pytest.mark.parametrize("chunk", [1, 7, 100, 1000, 4096, 1 << 20])
def test_an_oversized_message_is_skipped_in_its_place_and_the_frames_after_it_are_read(
        chunk: int, content_length: bool) -> None:
    big = message("big", b"x" * (5 * LIMIT), content_length=content_length)
    stream = message("m1", b"a") + big + b"\n" + message("m2", b"b") + big + message("m3", b"c" * 100)
    out, most = fed(decoder(), stream, chunk)
    assert described(out) == [("MESSAGE", "m1"), ("skipped", "big"), ("MESSAGE", "m2"), ("skipped", "big"),
                              ("MESSAGE", "m3")]
    assert [item.body for item in out if type(item) is Frame] == [b"a", b"b", b"c" * 100]
    # the body is discarded as it comes: never more than the limit and one read buffered
    assert most <= LIMIT + chunk
    if content_length:  # announced: discarded from the header block on
        assert most <= 200 + chunk
    skipped = [item for item in out if isinstance(item, FrameSkipped)]
    assert all(item.limit == LIMIT and item.command == "MESSAGE" and not item.fatal for item in skipped)
    header_bytes = big.index(b"\n\n") + 2
    if content_length:
        assert [(item.size, item.size_known) for item in skipped] == [(header_bytes + 5 * LIMIT, True)] * 2
    else:  # the size is known if it arrived whole, else it is "more than" what came
        assert all(item.size > LIMIT for item in skipped)
        assert all(item.size == header_bytes + 5 * LIMIT for item in skipped if item.size_known)
        assert chunk < len(big) or all(item.size_known for item in skipped)


def test_a_frame_whose_headers_are_over_the_limit_still_ends_the_connection() -> None:
    """No header block within the limit: nothing to NACK, no frame boundary to trust."""
    out, _ = fed(decoder(), message("m1", b"a") + message("big", b"", headers={"x": "h" * LIMIT}) + message("m2", b"b"),
                 100)
    assert described(out) == [("MESSAGE", "m1"), ("error", "frame too large")]
    assert isinstance(out[-1], FrameTooLarge) and not isinstance(out[-1], FrameSkipped)


@pytest.mark.parametrize("skip", [frozenset(), frozenset({"RECEIPT"})], ids=["no-skipping", "other-commands"])
def test_an_oversized_frame_is_fatal_unless_its_command_is_skipped(skip: frozenset[str]) -> None:
    out, _ = fed(decoder(skip=skip), message("m1", b"a") + message("big", b"x" * 2 * LIMIT) + message("m2", b"b"),
                 100)
    assert described(out) == [("MESSAGE", "m1"), ("error", "frame too large")]
    assert out[-1].fatal  # type: ignore[union-attr]


@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "to-the-NUL"])
@pytest.mark.parametrize("chunk", [100, 1 << 20])
def test_a_frame_over_the_skip_limit_is_fatal(chunk: int, content_length: bool) -> None:
    """Announced over it: refused at its headers; without content-length: once that much was discarded
    (a body that never ends is not read for ever)."""
    within = message("within", b"x" * 4 * LIMIT, content_length=content_length)
    beyond = message("beyond", b"x" * 9 * LIMIT, content_length=content_length)
    out, _ = fed(decoder(skip_limit=8 * LIMIT), within + message("m1", b"a") + beyond + message("m2", b"b"), chunk)
    if not content_length and chunk < len(beyond):  # (reported when it went over max_frame_size, then cut off)
        assert described(out) == [("skipped", "within"), ("MESSAGE", "m1"), ("skipped", "beyond"),
                                  ("error", "frame too large")]
        assert "without content-length is larger than 32768 bytes" in out[-1].detail  # type: ignore[union-attr]
    else:
        assert described(out) == [("skipped", "within"), ("MESSAGE", "m1"), ("error", "frame too large")]
    assert out[-1].fatal  # type: ignore[union-attr]


def test_a_skipped_frame_without_its_nul_where_content_length_says_is_malformed() -> None:
    lying = message("big", b"x" * 2 * LIMIT)[:-1] + b"y\x00"
    out, _ = fed(decoder(), lying + message("m2", b"b"), 1000)
    assert described(out) == [("skipped", "big"), ("error", "frame not terminated")]
    assert isinstance(out[-1], MalformedFrame)
    assert decoder().feed(b"") == []


def test_pushed_bytes_of_a_skipped_frame_are_discarded_by_the_next_read() -> None:
    reader = decoder()
    data = message("big", b"x" * 2 * LIMIT) + message("m2", b"b")
    out = reader.feed(data[:300])
    assert described(out) == [("skipped", "big")]
    assert not reader.may_hold_frame()
    reader.push(data[300:])
    assert reader.may_hold_frame()
    assert described(list(reader.frames(b""))) == [("MESSAGE", "m2")]


def test_skipping_changes_nothing_for_frames_within_the_limits() -> None:
    """The same frames, the same errors, at the same places, with skipping on or off (seeded)."""
    rng = random.Random(20261129)
    for _ in range(200):
        frames = [encode_frame(Frame(rng.choice(["MESSAGE", "RECEIPT", "ERROR"]),
                                     {"message-id": str(index), "h": "v" * rng.randrange(50)},
                                     bytes(rng.randrange(97, 100) for _ in range(rng.randrange(LIMIT - 100)))),
                               "1.2", add_content_length=rng.random() < 0.5) for index in range(5)]
        stream = b"\n".join(frames)
        chunk = rng.randrange(1, 2000)
        assert fed(decoder(), stream, chunk)[0] == fed(decoder(skip=frozenset()), stream, chunk)[0]


# -- the protocol ---------------------------------------------------------------------------------


class Connection:
    """A client protocol with a small frame limit on a StringTransport, connected at ``version``."""

    def __init__(self, version: str = "1.2") -> None:
        self.protocol: StompClientProtocol = StompClientFactory(
            Clock(), limits=Limits(max_frame_size=LIMIT)).buildProtocol(IPv4Address("TCP", "127.0.0.1", 61613))
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.reader = FrameDecoder(version="1.2")
        connecting = self.protocol.connect()
        self.receive(encode_frame(Frame("CONNECTED", {"version": version}), version))
        result_of(connecting)
        self.written()
        self.skipped: list[tuple[str | None, str, str]] = []
        self.protocol.on_skipped = lambda item, destination, outcome: self.skipped.append(
            (item.headers.get("message-id"), destination, outcome))

    def receive(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def written(self) -> list[Frame]:
        frames = self.reader.feed(self.transport.value())
        self.transport.clear()
        assert all(isinstance(frame, Frame) for frame in frames)
        return frames  # type: ignore[return-value]


@pytest.mark.parametrize(("version", "ack", "expected", "outcome"), [
    ("1.2", "client-individual", Frame("NACK", {"id": "a-big"}), "nacked"),
    ("1.2", "client", Frame("NACK", {"id": "a-big"}), "nacked"),
    ("1.1", "client-individual", Frame("NACK", {"message-id": "big", "subscription": "1"}), "nacked"),
    ("1.0", "client-individual", Frame("ACK", {"message-id": "big"}), "dropped"),
    ("1.0", "client", None, "unacknowledged"),
    ("1.2", "auto", None, "dropped"),
])
def test_the_protocol_settles_an_oversized_message_with_the_broker_and_reads_on(
        version: str, ack: str, expected: Frame | None, outcome: str) -> None:
    connection = Connection(version)
    received: list[Frame] = []
    connection.protocol.subscribe("/queue/a", "1", received.append, ack=ack, receipt=False)
    connection.written()
    connection.receive(message("m1", b"a") + message("big", b"x" * 2 * LIMIT) + message("m2", b"b"))
    assert [frame.headers["message-id"] for frame in received] == ["m1", "m2"]
    assert connection.written() == ([expected] if expected is not None else [])
    assert connection.skipped == [("big", "/queue/a", outcome)]
    assert not connection.transport.disconnecting and connection.protocol.error is None


def test_a_subscriptions_own_handler_takes_its_oversized_messages() -> None:
    connection = Connection()
    taken: list[FrameSkipped] = []
    connection.protocol.subscribe("/queue/a", "1", lambda frame: None, ack="client-individual", receipt=False,
                                  oversized=taken.append)
    connection.written()
    connection.receive(message("big", b"x" * 2 * LIMIT, headers={"x-dup": "d1"}))
    assert [item.headers["x-dup"] for item in taken] == ["d1"]
    assert connection.written() == [] and connection.skipped == []


def test_without_a_hook_the_protocol_logs_one_warning_naming_the_message() -> None:
    connection = Connection()
    connection.protocol.on_skipped = None
    connection.protocol.subscribe("/queue/a", "1", lambda frame: None, ack="client-individual", receipt=False)
    events: list[dict[str, Any]] = []
    sink = observer(events.append)
    globalLogPublisher.addObserver(sink)
    try:
        connection.receive(message("big", b"x" * 2 * LIMIT))
    finally:
        globalLogPublisher.removeObserver(sink)
    (text,) = [formatEvent(event) for event in events]
    assert "MESSAGE big from /queue/a" in text and f"larger than the limit of {LIMIT} bytes" in text
    assert "nacked" in text


def test_an_oversized_message_for_no_subscription_is_ignored_as_a_stray() -> None:
    connection = Connection()
    connection.receive(message("big", b"x" * 2 * LIMIT) + message("m2", b"b"))
    assert connection.written() == [] and connection.skipped == []
    assert connection.protocol.stray_messages == 2 and not connection.transport.disconnecting


def test_with_skipping_off_an_oversized_message_closes_the_connection() -> None:
    """``connectors.NAME.max_skipped_message_size = 0``: the behaviour before skipping."""
    protocol = StompClientFactory(Clock(), limits=Limits(max_frame_size=LIMIT), max_skipped_size=0).buildProtocol(
        IPv4Address("TCP", "127.0.0.1", 61613))
    transport = StringTransport()
    protocol.makeConnection(transport)
    connecting = protocol.connect()
    protocol.dataReceived(encode_frame(Frame("CONNECTED", {"version": "1.2"}), "1.2"))
    result_of(connecting)
    received: list[Frame] = []
    protocol.subscribe("/queue/a", "1", received.append, ack="client-individual", receipt=False)
    protocol.dataReceived(message("big", b"x" * 2 * LIMIT) + message("m2", b"b"))
    assert transport.disconnecting and received == []
    assert "frame too large" in str(protocol.error)


def test_headers_over_the_limit_still_close_the_connection() -> None:
    connection = Connection()
    connection.protocol.subscribe("/queue/a", "1", lambda frame: None, ack="client-individual", receipt=False)
    connection.receive(message("big", b"", headers={"x": "h" * LIMIT}))
    assert connection.transport.disconnecting and connection.skipped == []
    assert "frame too large" in str(connection.protocol.error)


# -- the connector --------------------------------------------------------------------------------


def test_the_connector_nacks_an_oversized_message_counts_and_logs_it_and_keeps_the_connection(
        broker: FakeBroker, clock: Clock) -> None:
    """Before: the connection was closed, reconnected, the message came again, and again."""
    connector = started(broker, clock, max_frame_size=4096)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a", ack_mode="client-individual"), consumer)
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    sub = subscribe.headers["id"]
    events: list[dict[str, Any]] = []
    sink = observer(events.append)
    globalLogPublisher.addObserver(sink)
    try:
        broker.answer("MESSAGE", {"subscription": sub, "message-id": "ID:big", "ack": "a-big"}, b"x" * 5000)
        broker.answer("MESSAGE", {"subscription": sub, "message-id": "ID:m2", "ack": "a-m2"}, b"small")
    finally:
        globalLogPublisher.removeObserver(sink)
    assert broker.transport is not None and not broker.transport.disconnecting
    assert [message.message_id for message, _ in consumer.deliveries] == ["ID:m2"]
    assert [(frame.command, frame.headers) for frame in broker.frames()] == [("NACK", {"id": "a-big"})]
    assert connector.metrics.oversized.labels("amq", "nacked")._value.get() == 1
    assert connector.metrics.deliveries.labels("amq")._value.get() == 1
    warnings = [formatEvent(event) for event in events if "over the frame limit" in formatEvent(event)]
    assert warnings == [
        "connector amq: MESSAGE ID:big from /queue/a is 5081 bytes, over the frame limit of 4096 bytes "
        "(connectors.amq.max_frame_size): skipped without reading its body, NACKed: the broker's redelivery "
        "policy decides (ActiveMQ: to its dead letter queue, ActiveMQ.DLQ)"]
    clock.advance(60)
    assert broker.attempts == 1 and connector.state == "connected"


def test_a_large_body_streamed_to_the_connector_is_never_buffered(broker: FakeBroker, clock: Clock) -> None:
    """A 40 MiB MESSAGE in 64 KiB reads to a connector with a 1 MiB limit: the decoder holds one read at most."""
    connector = started(broker, clock, max_frame_size=1 << 20)
    consumer = Consumer()
    subscribing = connector.subscribe(SubscriptionSpec("/queue/a"), consumer)
    (subscribe,) = broker.receipt_all()
    result_of(subscribing)
    sub = subscribe.headers["id"]
    assert broker.protocol is not None
    protocol = broker.protocol
    body_size = 40 << 20
    chunk = b"x" * 65536
    for content_length in (True, False):
        head = encode_frame(Frame("MESSAGE", {"subscription": sub, "message-id": "big", "ack": "big"}), "1.2",
                            add_content_length=False)[:-1]
        if content_length:
            head = head[:-1] + f"content-length:{body_size}\n\n".encode()
        protocol.dataReceived(head)
        most = 0
        for _ in range(body_size // len(chunk)):
            protocol.dataReceived(chunk)
            most = max(most, protocol.decoder.buffered)
        protocol.dataReceived(b"\x00" + encode_frame(Frame("MESSAGE", {"subscription": sub, "message-id": "m",
                                                                       "ack": "m"}, b"after"), "1.2"))
        assert most <= (1 << 20) + len(chunk)
        if content_length:
            assert most <= len(chunk)
    assert [message.message_id for message, _ in consumer.deliveries] == ["m", "m"]
    assert broker.transport is not None and not broker.transport.disconnecting
    assert connector.metrics.oversized.labels("amq", "nacked")._value.get() == 2


def test_the_in_doubt_browse_counts_an_oversized_message_by_its_headers(broker: FakeBroker, clock: Clock) -> None:
    """The browse reads only headers (``_AMQ_DUPL_ID``): a copy too large to read is still one the queue holds.
    Before: the browse's MESSAGE closed the connector's connection and the probe failed."""
    connector = started(broker, clock, max_frame_size=4096)
    asking = connector.held_message_ids("/queue/a")
    (subscribe,) = broker.receipt_all()
    assert subscribe.headers["browser"] == "true"
    sub = subscribe.headers["id"]
    broker.answer("MESSAGE", {"subscription": sub, "message-id": "m1", DUPLICATE_ID: "copy-1"}, b"x" * 5000)
    broker.answer("MESSAGE", {"subscription": sub, "message-id": "m2", DUPLICATE_ID: "copy-2"}, b"small")
    broker.answer("MESSAGE", {"subscription": sub, "message-id": "end", "browser": "end"})
    assert result_of(asking) == {"copy-1", "copy-2"}
    assert broker.transport is not None and not broker.transport.disconnecting
    assert [frame.command for frame in broker.frames()] == ["UNSUBSCRIBE"]  # (no NACK: a browse consumes nothing)
    assert connector.metrics.oversized.labels("amq", "nacked")._value.get() == 0
