"""The STOMP connection's lifecycle at the edge, over StringTransport with a Clock: the CONNECT
timeout, the abort of a closing connection that does not drain, the connection caps
(:mod:`gateway.stomp.admission`) and the listen backlog given to listener specs."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from gateway.broker.broker import EmbeddedBroker
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.routing.destination_map import DestinationMap
from gateway.stomp.admission import ConnectionAdmission, automatic_max_connections
from gateway.stomp.listeners import listen_backlog, os_backlog_limit, with_backlog
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.settings import StompSettings
from gateway.wire.codec import FrameDecoder
from tests.support.log_events import logged
from tests.unit.test_session import Peer, connect, make_factory

__all__ = ["logged"]


class AbortableTransport(StringTransport):
    """A StringTransport that records an abort (its loseConnection leaves ``connected`` alone)."""

    aborted = False

    def abortConnection(self) -> None:
        self.aborted = True
        super().abortConnection()


def aborted(peer: Peer) -> bool:
    """Whether the protocol aborted the connection of a :func:`peer_on` peer."""
    assert isinstance(peer.transport, AbortableTransport)
    return peer.transport.aborted


def peer_on(factory: StompServerFactory, host: str = "10.0.0.1") -> Peer:
    peer = Peer.__new__(Peer)
    peer.protocol = factory.buildProtocol(None)
    peer.transport = AbortableTransport(peerAddress=IPv4Address("TCP", host, 40000))
    peer.decoder = FrameDecoder(version="1.2")
    peer.frames = []
    peer.protocol.makeConnection(peer.transport)
    return peer


def edge_calls(clock: Clock) -> list[object]:
    """The protocol's timers (the CONNECT deadline, the abort) among the clock's calls."""
    return [call for call in clock.getDelayedCalls()
            if "_connect_timed_out" in repr(call) or "_abort" in repr(call)]


# -- CONNECT timeout --------------------------------------------------------------------------


def test_a_connection_without_connect_is_closed_after_the_timeout(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = peer_on(make_factory(clock, broker, connect_timeout_ms=2000))
    peer.protocol.dataReceived(b"CONNECT\naccept-version:1.2\n")  # a CONNECT that never ends
    clock.advance(1.9)
    assert not peer.closed
    clock.advance(0.2)
    assert peer.closed
    [error] = peer.received()
    assert (error.command, error.headers["message"]) == ("ERROR", "connect timeout")
    assert b"within 2s ([stomp] connect_timeout_ms)" in error.body


def test_a_connected_client_outlives_the_connect_timeout(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = peer_on(make_factory(clock, broker, connect_timeout_ms=2000, heartbeat_receive_ms=0))
    connect(peer)
    clock.advance(60)
    assert not peer.closed


def test_a_zero_connect_timeout_waits_for_ever(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = peer_on(make_factory(clock, broker, connect_timeout_ms=0))
    clock.advance(3600)
    assert not peer.closed and edge_calls(clock) == []


# -- abort after close_timeout_ms -----------------------------------------------------------------


@pytest.mark.parametrize("how", ["error", "disconnect", "heart-beat"])
def test_a_closing_connection_that_does_not_drain_is_aborted(clock: Clock, broker: EmbeddedBroker,
                                                             how: str) -> None:
    factory = make_factory(clock, broker, close_timeout_ms=3000, heartbeat_receive_ms=1000, heartbeat_grace=1.5)
    peer = peer_on(factory)
    connect(peer, **{"heart-beat": "1000,0" if how == "heart-beat" else "0,0"})
    peer.send("SUBSCRIBE", {"destination": "/queue/held", "id": "s", "ack": "client-individual"})
    producer = peer_on(factory, "10.0.0.9")
    connect(producer)
    producer.send("SEND", {"destination": "/queue/held"}, b"held")
    assert [frame.command for frame in peer.received()] == ["MESSAGE"]
    assert broker.status()["queues"]["/queue/held"]["inflight"] == 1
    if how == "error":
        peer.send("NOT-A-COMMAND")
    elif how == "disconnect":
        peer.send("DISCONNECT", {"receipt": "bye"})
    else:
        clock.advance(1.6)  # no heart-beat for 1.5 x 1 s
    assert peer.closed and not aborted(peer)
    clock.advance(2.9)
    assert not aborted(peer)
    clock.advance(0.2)
    assert aborted(peer)
    peer.protocol.connectionLost()  # what the abort brings
    assert broker.status()["queues"]["/queue/held"]["inflight"] == 0
    assert broker.status()["queues"]["/queue/held"]["pending"] == 1


def test_a_connection_that_goes_in_time_is_not_aborted(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = peer_on(make_factory(clock, broker, close_timeout_ms=3000))
    connect(peer)
    peer.send("DISCONNECT")
    assert peer.closed
    peer.protocol.connectionLost()
    assert edge_calls(clock) == []
    clock.advance(10)
    assert not aborted(peer)


@pytest.mark.parametrize("how", ["error", "disconnect"])
def test_a_closing_connection_is_no_longer_the_transports_producer(clock: Clock, broker: EmbeddedBroker,
                                                                   how: str) -> None:
    """Twisted closes a transport whose buffer drains while a streaming producer it paused is
    registered only once the producer is unregistered: a consumer that stopped reading and then
    DISCONNECTed kept its connection (its message groups, its unacknowledged messages) until the
    abort (tests/integration/test_message_group_stall.py)."""
    peer = peer_on(make_factory(clock, broker, close_timeout_ms=3000))
    connect(peer)
    assert peer.transport.producer is peer.protocol
    peer.protocol.pauseProducing()  # (the transport's buffer is full)
    if how == "error":
        peer.send("NOT-A-COMMAND")
    else:
        peer.send("DISCONNECT", {"receipt": "bye"})
    assert peer.closed and peer.transport.producer is None


# -- connection caps ------------------------------------------------------------------------------


def test_a_connection_past_the_cap_gets_an_error_and_is_closed(clock: Clock, broker: EmbeddedBroker) -> None:
    registry = CollectorRegistry()
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}),
                                 settings=StompSettings(max_connections=2), registry=registry)
    first, second = peer_on(factory), peer_on(factory, "10.0.0.2")
    refused = peer_on(factory, "10.0.0.3")
    assert not first.closed and not second.closed
    assert refused.closed and refused.protocol.session is None
    [error] = refused.received()
    assert (error.command, error.headers["message"]) == ("ERROR", "too many connections")
    assert factory.connections == {first.protocol, second.protocol}
    assert registry.get_sample_value("jmsgateway_stomp_connections_refused_total", {"limit": "total"}) == 1
    assert registry.get_sample_value("jmsgateway_stomp_connections") == 2
    refused.protocol.connectionLost()  # a refused connection was never counted
    first.protocol.connectionLost()
    assert registry.get_sample_value("jmsgateway_stomp_connections") == 1
    assert not peer_on(factory, "10.0.0.3").closed


def test_refusals_are_logged_once_per_episode(logged: list[str]) -> None:
    admission = ConnectionAdmission(max_total=100, max_per_address=2)
    assert admission.admit("a") is None and admission.admit("a") is None
    for _ in range(5):
        refusal = admission.admit("a")
        assert refusal is not None and "max_connections_per_address = 2" in refusal
    assert admission.admit("b") is None  # another address is not capped
    assert [line for line in logged if "refusing" in line] == [
        "refusing STOMP connections from a: 2 open, the limit per client address is 2 "
        "([stomp] max_connections_per_address); logged again when its connections are accepted"]
    admission.release("a")
    assert admission.admit("a") is None
    assert any("from a again (5 refused at max_connections_per_address)" in line for line in logged)
    assert admission.admit("a") is not None  # a new episode, logged again
    assert len([line for line in logged if "refusing" in line]) == 2
    admission.release("a")
    admission.release("a")
    assert admission.per_address == {"b": 1} and admission._refused_from == {}


def test_the_total_cap_episode(logged: list[str]) -> None:
    admission = ConnectionAdmission(max_total=1)
    assert admission.admit("a") is None
    assert admission.admit("b") is not None and admission.admit("c") is not None
    assert len([line for line in logged if "refusing STOMP connections: 1 open, the limit is 1" in line]) == 1
    admission.release("a")
    assert admission.admit("b") is None
    assert any("accepting STOMP connections again (2 refused at max_connections)" in line for line in logged)


def test_the_automatic_cap_follows_the_open_file_limit() -> None:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert ConnectionAdmission().max_total == automatic_max_connections()
    assert automatic_max_connections() == max(100, soft - min(1000, soft // 4))


# -- listen backlog -----------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "expected"), [
    ("tcp:61613:interface=127.0.0.1", "tcp:61613:interface=127.0.0.1:backlog=4096"),
    ("ssl:61614:privateKey=k\\:1.pem", "ssl:61614:privateKey=k\\:1.pem:backlog=4096"),
    ("mtls:61615:caCerts=ca.pem", "mtls:61615:caCerts=ca.pem:backlog=4096"),
    ("tcp:61613:backlog=10", "tcp:61613:backlog=10"),
    ("unix:/tmp/s", "unix:/tmp/s:backlog=4096"),
    ("systemd:domain=INET:index=0", "systemd:domain=INET:index=0"),
])
def test_a_listener_gets_the_backlog_unless_it_names_one(spec: str, expected: str) -> None:
    assert with_backlog(spec, 4096) == expected


def test_the_backlog_is_capped_at_the_os_limit(tmp_path: Path) -> None:
    assert listen_backlog(4096, 128) == 128
    assert listen_backlog(4096, None) == 4096
    assert listen_backlog(100, 4096) == 100
    limit = tmp_path / "somaxconn"
    limit.write_text("512\n")
    assert os_backlog_limit(str(limit)) == 512
    assert os_backlog_limit(str(tmp_path / "missing")) is None


@pytest.mark.parametrize(("raw", "key"), [
    ({"gateway": {"listen_backlog": 0}}, "gateway.listen_backlog"),
    ({"gateway": {"listen_backlog": "big"}}, "gateway.listen_backlog"),
    ({"stomp": {"connect_timeout_ms": -1}}, "stomp.connect_timeout_ms"),
    ({"stomp": {"close_timeout_ms": -1}}, "stomp.close_timeout_ms"),
    ({"stomp": {"max_connections": -1}}, "stomp.max_connections"),
    ({"stomp": {"max_connections_per_address": True}}, "stomp.max_connections_per_address"),
])
def test_bad_limits_name_their_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "x.toml")
    assert key in str(caught.value)


def test_the_defaults() -> None:
    config = parse_config({})
    assert config.listen_backlog == 4096
    settings = config.stomp
    assert (settings.connect_timeout_ms, settings.close_timeout_ms) == (10_000, 5_000)
    assert (settings.max_connections, settings.max_connections_per_address) == (0, 0)
