"""Back-pressure from a congested target to the STOMP clients sending to it (gateway.flow).

The real StompBrokerConnector on a fake broker endpoint (StringTransport):
its Congestion is the producer registered with the broker connection's
transport, so the test pauses and resumes it as a full / drained write
buffer would.  The STOMP clients are sessions on StringTransports, whose
``producerState`` says whether the gateway reads from them.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure

from gateway.flow import Congestion
from gateway.stomp.protocol import INPUT_FRAMES
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect
from tests.unit.test_session_forward import Setup


def broker_producer(setup: Setup) -> IPushProducer:
    """The producer the broker connection's transport registered (the session's reading side)."""
    transport = setup.broker.transport
    assert transport is not None and transport.producer is not None
    producer: IPushProducer = transport.producer
    return producer


def reading(peer: Peer) -> bool:
    return bool(peer.transport.producerState == "producing")


def test_congestion_releases_each_waiter_once() -> None:
    congestion = Congestion("target")
    calls: list[str] = []
    congestion.when_ready(lambda: calls.append("at once"))
    congestion.pauseProducing()
    congestion.pauseProducing()
    congestion.when_ready(lambda: calls.append("first"))
    congestion.when_ready(lambda: calls.append("second"))
    assert calls == ["at once"] and congestion.congested and congestion.episodes == 1
    congestion.resumeProducing()
    congestion.resumeProducing()
    assert calls == ["at once", "first", "second"] and not congestion.congested
    congestion.pauseProducing()
    congestion.when_ready(lambda: calls.append("after the connection ended"))
    congestion.stopProducing()
    assert calls[-1] == "after the connection ended" and congestion.episodes == 2


def test_the_connector_registers_its_congestion_with_the_broker_connection() -> None:
    setup = Setup()
    assert setup.broker.transport is not None
    assert setup.broker.transport.producer is setup.connector.congestion
    assert setup.broker.transport.streaming


def test_a_congested_broker_stops_reading_from_its_senders_until_it_catches_up() -> None:
    setup = Setup()
    other = Peer(setup.peer.protocol.factory)
    connect(other)
    bystander = Peer(setup.peer.protocol.factory)  # sends only to the embedded broker
    connect(bystander)
    assert setup.broker.transport is not None
    setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"1")
    assert reading(setup.peer)
    broker_producer(setup).pauseProducing()  # the broker connection's write buffer is full
    setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"2")  # forwarded, then reading stops
    setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"3")  # already read: still handled
    other.send("SEND", {"destination": "/queue/jms.b", "receipt": "r"}, b"4")  # the message path holds too
    bystander.send("SEND", {"destination": "/queue/local", "receipt": "local"}, b"5")
    assert not reading(setup.peer) and not reading(other) and reading(bystander)
    assert [frame.headers["receipt-id"] for frame in bystander.received()] == ["local"]
    assert [frame.body for frame in setup.sent()] == [b"1", b"2", b"3", b"4"]
    broker_producer(setup).resumeProducing()  # drained
    assert reading(setup.peer) and reading(other)


def test_a_lost_broker_connection_releases_the_senders() -> None:
    setup = Setup()
    assert setup.broker.transport is not None
    broker_producer(setup).pauseProducing()
    setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"1")
    assert not reading(setup.peer)
    (sent,) = setup.sent()
    setup.broker.answer("RECEIPT", {"receipt-id": sent.headers["receipt"]})  # the broker has it
    setup.broker.drop()
    assert setup.peer.received() == []
    assert reading(setup.peer)  # its next sends wait for the reconnection (send_timeout) as before


def test_a_held_client_is_not_closed_for_heart_beats_the_gateway_did_not_read() -> None:
    setup = Setup()
    beating = Peer(setup.peer.protocol.factory)
    connected = connect(beating, **{"heart-beat": "1000,0"})
    assert connected.headers["heart-beat"].split(",")[1] != "0"  # the gateway expects the client's beats
    assert setup.broker.transport is not None
    broker_producer(setup).pauseProducing()
    beating.send("SEND", {"destination": "/queue/jms.a"}, b"1")
    assert not reading(beating)
    (sent,) = setup.sent()
    setup.broker.answer("RECEIPT", {"receipt-id": sent.headers["receipt"]})  # nothing left to time out
    for _ in range(30):  # 30 s without a byte read from it
        setup.clock.advance(1)
    assert not beating.closed
    broker_producer(setup).resumeProducing()
    assert reading(beating)
    for _ in range(30):  # reading again, the client stays silent: now that counts
        setup.clock.advance(1)
    assert beating.closed
    assert beating.received() == []  # closed for its silence, not for an error


def test_a_client_that_leaves_while_held_is_no_trouble() -> None:
    setup = Setup()
    assert setup.broker.transport is not None
    broker_producer(setup).pauseProducing()
    setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"1")
    setup.peer.protocol.connectionLost(Failure(ConnectionLost("client went")))
    broker_producer(setup).resumeProducing()
    assert not reading(setup.peer)  # nothing resumed a closed connection


def test_input_slices_go_on_while_held_and_reading_waits_for_the_release() -> None:
    setup = Setup()
    assert setup.broker.transport is not None
    broker_producer(setup).pauseProducing()
    frame = encode_frame(Frame("SEND", {"destination": "/queue/jms.a"}, b"x" * 100), "1.2")
    burst = frame * (3 * INPUT_FRAMES)
    setup.peer.protocol.dataReceived(burst)
    for _ in range(5):  # the slices are handled on later turns: what was read is not dropped
        setup.clock.advance(0)
    assert len(setup.sent()) == 3 * INPUT_FRAMES
    assert not reading(setup.peer)  # the last slice did not resume reading: the broker is still behind
    broker_producer(setup).resumeProducing()
    assert reading(setup.peer)


def test_embedded_destinations_are_never_held() -> None:
    setup = Setup()
    for index in range(3):
        setup.peer.send("SEND", {"destination": "/queue/local"}, str(index).encode())
    assert reading(setup.peer)


def test_a_commit_to_a_congested_broker_holds_its_sender() -> None:
    setup = Setup()
    assert setup.broker.transport is not None
    setup.peer.send("BEGIN", {"transaction": "t1"})
    setup.peer.send("SEND", {"destination": "/queue/jms.a", "transaction": "t1"}, b"1")
    broker_producer(setup).pauseProducing()  # full before the COMMIT sends anything
    assert reading(setup.peer), "a SEND inside a transaction goes nowhere before COMMIT"
    setup.peer.send("COMMIT", {"transaction": "t1"})
    assert not reading(setup.peer)
    assert [frame.body for frame in setup.sent() if frame.command == "SEND"] == [b"1"]
    broker_producer(setup).resumeProducing()
    assert reading(setup.peer)
