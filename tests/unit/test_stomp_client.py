"""StompClientProtocol driven through StringTransport and Clock (no sockets)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from gateway.connectors.stomp_client import BrokerError, StompClientFactory, negotiate_heartbeat, quick_ack_switch
from gateway.errors import ConnectorError, ConnectorUnavailable
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.support.log_events import observer


class Harness:
    """A protocol on a StringTransport, with helpers to read what it wrote."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.protocol = StompClientFactory(self.clock).buildProtocol(None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.reader = FrameDecoder(version="1.2")

    def written(self) -> list[Frame]:
        data = self.transport.value()
        self.transport.clear()
        frames = self.reader.feed(data)
        assert all(isinstance(frame, Frame) for frame in frames), frames
        return frames  # type: ignore[return-value]

    def raw_written(self) -> bytes:
        data = self.transport.value()
        self.transport.clear()
        return bytes(data)

    def receive(self, command: str, headers: dict[str, str], body: bytes = b"", version: str = "1.2") -> None:
        self.protocol.dataReceived(encode_frame(Frame(command, headers, body), version))

    def connect(self, version: str = "1.2", heartbeat: tuple[int, int] = (0, 0), server_beat: str = "0,0") -> Frame:
        connected = self.protocol.connect(login="u", passcode="p", host="vh", heartbeat=heartbeat)
        self.written()
        self.receive("CONNECTED", {"version": version, "heart-beat": server_beat, "server": "Fake/1"})
        frame: Frame = result_of(connected)
        return frame

    def lose(self, reason: Exception | None = None) -> None:
        self.protocol.connectionLost(Failure(reason or ConnectionDone()))


def result_of(deferred: Deferred[Any]) -> Any:
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


def failure_of(deferred: Deferred[Any]) -> Failure:
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "Deferred has not fired"
    assert isinstance(results[0], Failure), f"expected a failure, got {results[0]!r}"
    return results[0]


def pending(deferred: Deferred[Any]) -> bool:
    return not deferred.called


@pytest.fixture
def harness() -> Harness:
    return Harness()


def test_connect_sends_credentials_versions_and_fires_with_connected(harness: Harness) -> None:
    connected = harness.protocol.connect(
        login="alice", passcode="secret", host="vhost", heartbeat=(1000, 2000), headers={"client-id": "gw"}
    )
    (frame,) = harness.written()
    assert frame.command == "CONNECT"
    assert frame.headers == {
        "accept-version": "1.0,1.1,1.2",
        "host": "vhost",
        "login": "alice",
        "passcode": "secret",
        "heart-beat": "1000,2000",
        "client-id": "gw",
    }
    assert pending(connected)
    harness.receive("CONNECTED", {"version": "1.1", "server": "ActiveMQ/5.17.2", "session": "s1"})
    assert result_of(connected).command == "CONNECTED"
    assert harness.protocol.version == "1.1"
    assert harness.protocol.decoder.version == "1.1"
    assert harness.protocol.server == "ActiveMQ/5.17.2"
    assert harness.protocol.ready


def test_error_instead_of_connected_fails_connect_and_closes(harness: Harness) -> None:
    connected = harness.protocol.connect(login="bad", passcode="wrong")
    harness.receive("ERROR", {"message": "User name [bad] or password is invalid."})
    error = failure_of(connected).value
    assert isinstance(error, BrokerError)
    assert "password is invalid" in str(error)
    assert harness.transport.disconnecting


def test_sends_are_pipelined_and_receipts_fire_in_any_order(harness: Harness) -> None:
    harness.connect()
    sends = [harness.protocol.send("/queue/a", f"m{i}".encode(), {"k": str(i)}) for i in range(3)]
    frames = harness.written()
    assert [frame.command for frame in frames] == ["SEND"] * 3
    assert harness.protocol.outstanding_receipts == 3
    receipts = [frame.headers["receipt"] for frame in frames]
    assert len(set(receipts)) == 3
    harness.receive("RECEIPT", {"receipt-id": receipts[2]})
    assert [pending(d) for d in sends] == [True, True, False]
    harness.receive("RECEIPT", {"receipt-id": receipts[0]})
    harness.receive("RECEIPT", {"receipt-id": receipts[1]})
    assert all(result_of(d).command == "RECEIPT" for d in sends)
    assert harness.protocol.outstanding_receipts == 0


def test_text_send_has_no_content_length_and_bytes_send_has_one(harness: Harness) -> None:
    harness.connect()
    harness.protocol.send("/queue/t", "héllo".encode(), {"content-length": "99"}, text=True, receipt=False)
    raw = harness.raw_written()
    assert b"content-length" not in raw
    assert raw.endswith("héllo".encode() + b"\x00")
    harness.protocol.send("/queue/b", b"\x00\x01", receipt=False)
    (frame,) = harness.written()
    assert frame.headers["content-length"] == "2"
    assert frame.body == b"\x00\x01"


def test_text_send_with_nul_fails_without_writing(harness: Harness) -> None:
    harness.connect()
    result = harness.protocol.send("/queue/t", b"a\x00b", text=True)
    assert isinstance(failure_of(result).value, ConnectorError)
    assert harness.raw_written() == b""


def test_headers_are_escaped_for_the_negotiated_version(harness: Harness) -> None:
    harness.connect(version="1.2")
    harness.protocol.send("/queue/e", b"", {"odd:name": "line\nbreak"}, receipt=False)
    raw = harness.raw_written()
    assert b"odd\\cname:line\\nbreak" in raw


def test_error_with_receipt_id_fails_only_that_send(harness: Harness) -> None:
    harness.connect()
    first = harness.protocol.send("/queue/a", b"1")
    second = harness.protocol.send("/queue/forbidden", b"2")
    frames = harness.written()
    harness.receive(
        "ERROR",
        {"message": "User is not authorized to write to queue://forbidden", "receipt-id": frames[1].headers["receipt"]},
        b"java.lang.SecurityException ...",
    )
    error = failure_of(second).value
    assert isinstance(error, BrokerError)
    assert "not authorized" in str(error)
    assert "SEND to /queue/forbidden" in str(error)
    assert pending(first)
    assert not harness.transport.disconnecting


def test_error_without_receipt_is_fatal_and_fails_everything(harness: Harness) -> None:
    harness.connect()
    errors: list[BrokerError] = []
    harness.protocol.on_error = errors.append
    outstanding = harness.protocol.send("/queue/a", b"1")
    harness.receive("ERROR", {"message": "boom"})
    assert harness.transport.disconnecting
    assert [str(error) for error in errors] == ["broker ERROR: boom"]
    harness.lose()
    error = failure_of(outstanding).value
    assert isinstance(error, BrokerError) and "boom" in str(error)


def test_lost_connection_fails_outstanding_receipts_as_unavailable(harness: Harness) -> None:
    harness.connect()
    lost_reasons: list[Failure] = []
    harness.protocol.on_lost = lost_reasons.append
    waiter = harness.protocol.when_lost()
    outstanding = [harness.protocol.send("/queue/a", b"x") for _ in range(2)]
    harness.lose(ConnectionLost("reset by peer"))
    for deferred in outstanding:
        error = failure_of(deferred).value
        assert isinstance(error, ConnectorUnavailable)
        assert "reset by peer" in str(error)
    assert result_of(waiter) is None
    assert len(lost_reasons) == 1
    later = harness.protocol.send("/queue/a", b"y")
    assert isinstance(failure_of(later).value, ConnectorUnavailable)


def test_cancelled_receipt_wait_is_forgotten(harness: Harness) -> None:
    harness.connect()
    outstanding = harness.protocol.send("/queue/a", b"x")
    (frame,) = harness.written()
    outstanding.cancel()
    failure_of(outstanding)
    assert harness.protocol.outstanding_receipts == 0
    harness.receive("RECEIPT", {"receipt-id": frame.headers["receipt"]})  # late: ignored


def test_messages_are_dispatched_by_subscription(harness: Harness) -> None:
    harness.connect()
    got_a: list[Frame] = []
    got_b: list[Frame] = []
    subscribed = harness.protocol.subscribe(
        "/queue/a", "s1", got_a.append, ack="client-individual", headers={"selector": "x > 1"}
    )
    harness.protocol.subscribe("/topic/b", "s2", got_b.append, receipt=False)
    frames = harness.written()
    assert frames[0].headers == {
        "selector": "x > 1",
        "destination": "/queue/a",
        "id": "s1",
        "ack": "client-individual",
        "receipt": frames[0].headers["receipt"],
    }
    harness.receive("RECEIPT", {"receipt-id": frames[0].headers["receipt"]})
    result_of(subscribed)
    harness.receive("MESSAGE", {"subscription": "s1", "message-id": "m1", "ack": "a1", "destination": "/queue/a"}, b"A")
    harness.receive("MESSAGE", {"subscription": "s2", "message-id": "m2", "destination": "/topic/b"}, b"B")
    harness.receive("MESSAGE", {"subscription": "nobody", "message-id": "m3"}, b"C")
    assert [frame.body for frame in got_a] == [b"A"]
    assert [frame.body for frame in got_b] == [b"B"]
    harness.protocol.unsubscribe("s1", receipt=False)
    harness.receive("MESSAGE", {"subscription": "s1", "message-id": "m4"}, b"D")
    assert len(got_a) == 1


def test_failed_subscribe_forgets_the_handler(harness: Harness) -> None:
    harness.connect()
    got: list[Frame] = []
    subscribed = harness.protocol.subscribe("/queue/x", "s1", got.append)
    (frame,) = harness.written()
    harness.receive("ERROR", {"message": "bad selector", "receipt-id": frame.headers["receipt"]})
    assert isinstance(failure_of(subscribed).value, BrokerError)
    harness.receive("MESSAGE", {"subscription": "s1", "message-id": "m"}, b"x")
    assert got == []


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.2", {"id": "ack-7"}),
        ("1.1", {"message-id": "m7", "subscription": "s1"}),
        ("1.0", {"message-id": "m7"}),
    ],
)
def test_ack_names_the_message_as_the_version_requires(
    harness: Harness, version: str, expected: dict[str, str]
) -> None:
    harness.connect(version=version)
    message = Frame("MESSAGE", {"subscription": "s1", "message-id": "m7", "ack": "ack-7"})
    harness.protocol.ack(message, transaction="tx1")
    harness.reader.version = version
    (frame,) = harness.written()
    assert frame.command == "ACK"
    assert frame.headers == {**expected, "transaction": "tx1"}


def test_nack_needs_stomp_11(harness: Harness) -> None:
    harness.connect(version="1.0")
    result = harness.protocol.nack(Frame("MESSAGE", {"message-id": "m"}))
    assert isinstance(failure_of(result).value, ConnectorError)
    harness.protocol.version = "1.2"
    acked = harness.protocol.nack(Frame("MESSAGE", {"message-id": "m", "ack": "a"}), receipt=True)
    (frame,) = harness.written()
    assert frame.command == "NACK" and frame.headers["id"] == "a"
    harness.receive("RECEIPT", {"receipt-id": frame.headers["receipt"]})
    result_of(acked)


def test_transaction_frames(harness: Harness) -> None:
    harness.connect()
    harness.protocol.begin("tx")
    harness.protocol.send("/queue/a", b"1", transaction="tx", receipt=False)
    committed = harness.protocol.commit("tx")
    frames = harness.written()
    assert [frame.command for frame in frames] == ["BEGIN", "SEND", "COMMIT"]
    assert all(frame.headers["transaction"] == "tx" for frame in frames)
    assert "receipt" not in frames[0].headers and "receipt" in frames[2].headers
    assert pending(committed)
    harness.receive("RECEIPT", {"receipt-id": frames[2].headers["receipt"]})
    result_of(committed)


def test_heartbeats_are_sent_when_idle_and_silence_closes(harness: Harness) -> None:
    harness.connect(heartbeat=(1000, 1000), server_beat="500,2000")
    # We send every max(1000, 2000) = 2 s; we expect every max(1000, 500) = 1 s.
    harness.clock.advance(2.0)
    assert harness.raw_written() == b"\n"
    harness.protocol.send("/queue/a", b"x", receipt=False)
    harness.raw_written()
    harness.protocol.dataReceived(b"\n")  # broker heart-beat
    harness.clock.advance(2.0)
    assert harness.raw_written() == b""  # we wrote a frame during that interval
    assert not harness.transport.disconnecting
    harness.clock.advance(1.0)
    harness.clock.advance(1.0)
    assert harness.transport.disconnecting  # silent for > 3 expected intervals
    harness.lose()
    assert harness.protocol.error is not None and "heart-beat" in str(harness.protocol.error)
    assert not harness.clock.getDelayedCalls()


def test_negotiate_heartbeat() -> None:
    assert negotiate_heartbeat((0, 0), "1000,1000") == (0, 0)
    assert negotiate_heartbeat((1000, 0), "0,3000") == (3000, 0)
    assert negotiate_heartbeat((1000, 1000), "5000,0") == (0, 5000)
    assert negotiate_heartbeat((1000, 1000), "garbage") == (0, 0)


def test_disconnect_waits_for_receipt_then_closes(harness: Harness) -> None:
    harness.connect()
    done = harness.protocol.disconnect()
    (frame,) = harness.written()
    assert frame.command == "DISCONNECT"
    assert not harness.transport.disconnecting
    harness.receive("RECEIPT", {"receipt-id": frame.headers["receipt"]})
    assert harness.transport.disconnecting
    assert pending(done)
    harness.lose()
    result_of(done)


def test_disconnect_gives_up_waiting_after_timeout(harness: Harness) -> None:
    harness.connect()
    done = harness.protocol.disconnect(timeout=3)
    harness.clock.advance(3)
    assert harness.transport.disconnecting
    harness.lose()
    result_of(done)


def test_unreadable_frame_from_broker_is_fatal(harness: Harness) -> None:
    harness.connect()
    outstanding = harness.protocol.send("/queue/a", b"x")
    harness.protocol.dataReceived(b"MESSAGE\nbroken header line\n\n\x00")
    assert harness.transport.disconnecting
    harness.lose()
    assert "unreadable" in str(failure_of(outstanding).value)


# -- unconfirmed SENDs: one broker receipt per burst ---------------------------


class Outcomes:
    """Collects ``settled(error, ack)`` calls of unconfirmed SENDs, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Exception | None]] = []

    def for_(self, name: str) -> Any:
        return lambda error, _ack: self.seen.append((name, error))


def test_a_burst_of_unconfirmed_sends_carries_one_receipt_on_its_last_frame(harness: Harness) -> None:
    harness.connect()
    outcomes = Outcomes()
    counted: list[tuple[int, Exception | None]] = []
    harness.protocol.on_unconfirmed = lambda count, error: counted.append((count, error))
    for n in range(3):
        harness.protocol.send_unconfirmed("/queue/a", f"m{n}".encode(), {"persistent": "true"}, outcomes.for_(f"m{n}"))
    assert [f.body for f in harness.written()] == [b"m0", b"m1"]  # the newest one is held for the receipt
    harness.clock.advance(0)  # end of the reactor turn
    [last] = harness.written()
    assert last.body == b"m2" and "receipt" in last.headers
    assert outcomes.seen == []
    harness.receive("RECEIPT", {"receipt-id": last.headers["receipt"]})
    assert outcomes.seen == [("m0", None), ("m1", None), ("m2", None)]
    assert sum(count for count, _ in counted) == 3 and all(error is None for _, error in counted)


def test_a_receipted_frame_releases_the_held_send_first_and_confirms_it(harness: Harness) -> None:
    harness.connect()
    outcomes = Outcomes()
    harness.protocol.send_unconfirmed("/queue/a", b"plain", None, outcomes.for_("plain"))
    acked = harness.protocol.send("/queue/a", b"with receipt")
    frames = harness.written()
    assert [f.body for f in frames] == [b"plain", b"with receipt"]  # order kept
    assert "receipt" not in frames[0].headers  # the next frame's receipt covers it: no second one
    harness.clock.advance(0)
    assert harness.written() == []  # nothing left to cover
    harness.receive("RECEIPT", {"receipt-id": frames[1].headers["receipt"]})
    assert outcomes.seen == [("plain", None)] and result_of(acked).command == "RECEIPT"


def test_a_refused_receipted_frame_still_confirms_the_sends_before_it(harness: Harness) -> None:
    harness.connect()
    outcomes = Outcomes()
    harness.protocol.send_unconfirmed("/queue/a", b"before", None, outcomes.for_("before"))
    refused = harness.protocol.send("/queue/forbidden", b"x")
    frames = harness.written()
    harness.receive("ERROR", {"receipt-id": frames[1].headers["receipt"], "message": "not authorized"})
    assert outcomes.seen == [("before", None)]  # the broker answers in order: "before" was taken
    assert failure_of(refused).check(ConnectorError)


def test_a_frame_without_receipt_gives_the_held_send_a_receipt_of_its_own(harness: Harness) -> None:
    harness.connect()
    outcomes = Outcomes()
    harness.protocol.send_unconfirmed("/queue/a", b"held", None, outcomes.for_("held"))
    harness.protocol.write_frame(Frame("ACK", {"id": "m-1"}))
    frames = harness.written()
    assert [f.command for f in frames] == ["SEND", "ACK"] and "receipt" in frames[0].headers
    harness.receive("ERROR", {"receipt-id": frames[0].headers["receipt"], "message": "queue full"})
    [(name, error)] = outcomes.seen
    assert name == "held" and isinstance(error, ConnectorError) and "queue full" in str(error)


def test_an_error_without_receipt_fails_every_unconfirmed_send(harness: Harness) -> None:
    harness.connect()
    outcomes = Outcomes()
    harness.protocol.send_unconfirmed("/queue/a", b"1", None, outcomes.for_("1"))
    harness.protocol.send_unconfirmed("/queue/a", b"2", None, outcomes.for_("2"))
    harness.clock.advance(0)
    harness.written()
    harness.receive("ERROR", {"message": "User is not authorized to write to: queue://a"})
    harness.lose()
    assert [name for name, _ in outcomes.seen] == ["1", "2"]
    assert all(isinstance(error, ConnectorError) and "not authorized" in str(error) for _, error in outcomes.seen)


def test_a_lost_connection_fails_held_and_covered_sends(harness: Harness) -> None:
    harness.connect()
    outcomes = Outcomes()
    harness.protocol.send_unconfirmed("/queue/a", b"covered", None, outcomes.for_("covered"))
    harness.clock.advance(0)
    harness.protocol.send_unconfirmed("/queue/a", b"held", None, outcomes.for_("held"))
    harness.lose(ConnectionLost("reset"))
    assert [name for name, _ in outcomes.seen] == ["covered", "held"]
    assert all(isinstance(error, ConnectorUnavailable) for _, error in outcomes.seen)
    harness.clock.advance(0)  # the cover call was cancelled: nothing is written to a dead transport
    late = Outcomes()
    harness.protocol.send_unconfirmed("/queue/a", b"late", None, late.for_("late"))
    assert [name for name, _ in late.seen] == ["late"]


class RecordingSocket(socket.socket):
    """A real TCP socket that records the options set on it."""

    def __init__(self, family: int = socket.AF_INET) -> None:
        super().__init__(family, socket.SOCK_STREAM)
        self.options: list[tuple[int, int, int]] = []

    def setsockopt(self, *args: Any) -> None:
        self.options.append(args)
        super().setsockopt(*args)


class SocketTransport(StringTransport):
    def __init__(self, handle: socket.socket) -> None:
        super().__init__()
        self.handle = handle

    def getHandle(self) -> socket.socket:
        return self.handle


QUICKACK = (socket.IPPROTO_TCP, getattr(socket, "TCP_QUICKACK", -1), 1)


def test_broker_connection_acknowledges_every_read_at_once() -> None:
    """Against a broker that keeps Nagle's algorithm on, our delayed ACK would hold its receipts."""
    assert hasattr(socket, "TCP_QUICKACK"), "the gateway runs on Linux"
    with socket.create_server(("127.0.0.1", 0)) as server, RecordingSocket() as sock:
        sock.connect(server.getsockname())
        protocol = StompClientFactory(Clock()).buildProtocol(None)
        protocol.makeConnection(SocketTransport(sock))
        assert sock.options.count(QUICKACK) == 1
        protocol.connect(login="u", passcode="p", host="vh")
        for _ in range(3):
            protocol.dataReceived(b"\n")  # heart-beats
        assert sock.options.count(QUICKACK) == 4
        sock.close()
        protocol.dataReceived(b"\n")  # a closed socket refuses the option: not an error here


def test_no_quick_acks_without_a_tcp_socket() -> None:
    assert quick_ack_switch(StringTransport()) is None
    with RecordingSocket(socket.AF_UNIX) as unix:
        assert quick_ack_switch(SocketTransport(unix)) is None
    with socket.create_server(("127.0.0.1", 0)) as server, RecordingSocket() as sock:
        sock.connect(server.getsockname())
        switch = quick_ack_switch(SocketTransport(sock))
        assert switch is not None
        switch()
        assert sock.options == [QUICKACK, QUICKACK]


def test_frames_after_a_fatal_error_are_not_read(harness: Harness) -> None:
    """A broker flooding ERROR frames: the first ends the connection; the thousands behind it in the
    same read (and any later read) are neither handled nor logged (before: one warning each)."""
    harness.connect()
    events: list[dict[str, Any]] = []
    harness.protocol.log = Logger(observer=observer(events.append))
    errors: list[BrokerError] = []
    harness.protocol.on_error = errors.append
    flood = encode_frame(Frame("ERROR", {"message": "go away"}, b"no"), "1.2") * 5000
    harness.protocol.dataReceived(flood)
    harness.protocol.dataReceived(flood)
    assert len(errors) == 1
    assert len(events) == 1 and "go away" in events[0]["error"]
    assert harness.transport.disconnecting


def test_a_message_for_an_unknown_subscription_is_logged_once_a_connection(harness: Harness) -> None:
    """Before: at debug level only, so a broker delivering for a subscription never made left no
    trace at the default level; now the first one is at info, the rest at debug, counted."""
    harness.connect()
    events: list[dict[str, Any]] = []
    harness.protocol.log = Logger(observer=observer(events.append))
    for index in range(3):
        harness.receive("MESSAGE", {"subscription": "nope", "message-id": f"m{index}", "destination": "/queue/a"})
    assert [event["log_level"] for event in events] == [LogLevel.info, LogLevel.debug, LogLevel.debug]
    assert events[0]["sub"] == "nope" and events[0]["id"] == "m0"
    assert harness.protocol.stray_messages == 3
    assert not harness.transport.disconnecting
