"""The WAN-fault proxy itself (tests/support/tcp_proxy.py), against a plain socket server on
127.0.0.1: each fault does what it says and nothing else (a stall is no RST, a cut is one,
latency holds bytes back in order, a cap slows a transfer, a half-open connection answers
nothing), so the fault matrix's rows mean what docs/bridges.md says.  Times are lower bounds
of what a fault must hold back (a loaded host only makes them longer)."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.tcp_proxy import TcpProxy, jitter_delays


class Server:
    """Accepts connections; echoes what each sends back when ``echo``; records what arrived
    and whether the client side closed (EOF) or reset."""

    def __init__(self, *, echo: bool = True) -> None:
        self.echo = echo
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = bytearray()
        self.connections: list[socket.socket] = []
        self.eof = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    self.eof.set()
                    return
                with self.lock:
                    self.received += data
                if self.echo:
                    conn.sendall(data)
        except OSError:
            self.eof.set()

    def close(self) -> None:
        self.listener.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


@pytest.fixture
def proxy(server: Server) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", server.port, seed=7) as p:
        yield p


def connect(proxy: TcpProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.settimeout(5)
    return sock


def read_exactly(sock: socket.socket, size: int, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError(f"EOF after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def nothing_within(sock: socket.socket, seconds: float) -> bool:
    """True when nothing (no data, no EOF, no reset) comes within ``seconds``."""
    sock.settimeout(seconds)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    return False


def test_it_forwards_both_ways(proxy: TcpProxy, server: Server) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        assert read_exactly(sock, 5) == b"hello"
    deadline = time.monotonic() + 5  # counted just after the write
    while proxy.forwarded("both") < 10 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.forwarded("to_target") == 5 and proxy.forwarded("to_client") == 5
    assert proxy.connections == 1


def test_a_stall_of_both_directions_holds_everything_without_a_reset(proxy: TcpProxy, server: Server) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        assert read_exactly(sock, 1) == b"a"
        proxy.stall("both")
        sock.sendall(b"bc")
        assert nothing_within(sock, 0.8), "a stalled link answers nothing and does not close"
        assert bytes(server.received) == b"a", "nothing reached the target while stalled"
        assert not server.eof.is_set(), "the target's connection stays open"
        late = connect(proxy)  # a new connection during a stall is accepted, and stalled too
        late.sendall(b"z")
        assert nothing_within(late, 0.3)
        proxy.flow()
        assert read_exactly(sock, 2) == b"bc", "in order, nothing lost"
        assert read_exactly(late, 1) == b"z"
        late.close()


def test_a_stall_held_at_the_proxy_keeps_target_replies_back(server: Server) -> None:
    """The target answered before the stall; the answer was read by the proxy but is held."""
    with TcpProxy("127.0.0.1", server.port) as proxy, connect(proxy) as sock:
        proxy.stall("to_client")
        sock.sendall(b"ping")
        time.sleep(0.3)
        assert bytes(server.received) == b"ping", "requests still go through"
        assert nothing_within(sock, 0.5), "the reply is held"
        proxy.flow()
        assert read_exactly(sock, 4) == b"ping"


def test_the_default_stall_holds_what_clients_send_only(server: Server) -> None:
    """The existing API: stall() stops reading from clients; the target's data still flows."""
    with TcpProxy("127.0.0.1", server.port) as proxy, connect(proxy) as sock:
        proxy.stall()
        sock.sendall(b"held")
        time.sleep(0.4)
        assert bytes(server.received) == b"", "what the client sends waits"
        server.connections[0].sendall(b"push")
        assert read_exactly(sock, 4) == b"push", "the other direction flows"
        proxy.flow()
        assert read_exactly(sock, 4) == b"held"


def test_latency_holds_each_direction_back_in_order(proxy: TcpProxy) -> None:
    proxy.delay(0.3, jitter=0.1, direction="to_client")
    with connect(proxy) as sock:
        started = time.monotonic()
        for index in range(20):
            sock.sendall(bytes([65 + index]))
            time.sleep(0.01)
        got = read_exactly(sock, 20)
        assert time.monotonic() - started >= 0.2, "the first byte waited at least latency - jitter"
        assert got == bytes(range(65, 85)), "jitter never reorders"
        proxy.delay(0)
        sock.sendall(b"!")
        assert read_exactly(sock, 1) == b"!"


def test_jitter_is_deterministic_with_a_seed() -> None:
    first = list(itertools.islice(jitter_delays(3, "1:to_client", 0.5, 0.2), 50))
    again = list(itertools.islice(jitter_delays(3, "1:to_client", 0.5, 0.2), 50))
    other = list(itertools.islice(jitter_delays(4, "1:to_client", 0.5, 0.2), 50))
    assert first == again
    assert first != other
    assert all(0.3 <= d <= 0.7 for d in first) and len(set(first)) > 40
    assert set(itertools.islice(jitter_delays(3, "x", 0.5, 0.0), 5)) == {0.5}
    assert min(itertools.islice(jitter_delays(3, "x", 0.05, 0.5), 200)) == 0.0, "never below zero"


def test_a_bandwidth_cap_slows_a_transfer(proxy: TcpProxy) -> None:
    proxy.throttle(100_000, direction="to_target")
    payload = b"x" * 60_000
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        assert read_exactly(sock, len(payload), timeout=20) == payload
        assert time.monotonic() - started >= 0.45, "60 KB at 100 KB/s takes 0.6 s (a 16 KB burst aside)"
        proxy.throttle(None)
        started = time.monotonic()
        sock.sendall(payload)
        assert read_exactly(sock, len(payload), timeout=20) == payload


def test_a_cut_resets_and_refuses_until_restored(proxy: TcpProxy, server: Server) -> None:
    sock = connect(proxy)
    sock.sendall(b"a")
    read_exactly(sock, 1)
    proxy.cut()
    time.sleep(0.2)
    with pytest.raises(ConnectionResetError):
        sock.recv(1)  # a FIN would read as b""
    sock.close()
    with pytest.raises(ConnectionResetError), connect(proxy) as refused:
        time.sleep(0.2)
        refused.recv(1)
    assert server.eof.wait(5), "the target's side was reset too"
    proxy.restore()
    with connect(proxy) as again:
        again.sendall(b"back")
        assert read_exactly(again, 4) == b"back"


def test_mute_drops_the_answers_only(proxy: TcpProxy, server: Server) -> None:
    with connect(proxy) as sock:
        proxy.mute()
        sock.sendall(b"commit")
        time.sleep(0.3)
        assert bytes(server.received) == b"commit", "the request arrives"
        assert nothing_within(sock, 0.5), "its answer never does"
        proxy.unmute()
        sock.sendall(b"x")
        assert read_exactly(sock, 1) == b"x"


def test_half_close_towards_the_client_sends_a_fin_one_way(proxy: TcpProxy, server: Server) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        read_exactly(sock, 1)
        proxy.half_close("to_client")
        sock.settimeout(5)
        assert sock.recv(1) == b"", "the client sees the target close"
        server.echo = False
        sock.sendall(b"still")
        deadline = time.monotonic() + 5
        while bytes(server.received) != b"astill" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bytes(server.received) == b"astill", "the other direction still flows"


def test_vanish_leaves_the_client_half_open(proxy: TcpProxy, server: Server) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        read_exactly(sock, 1)
        proxy.vanish()
        assert server.eof.wait(5), "the target sees its connection go"
        sock.sendall(b"anyone?")
        assert nothing_within(sock, 0.8), "the client sees no EOF, no reset, no answer"
        fresh = connect(proxy)  # accepted, never answered
        fresh.sendall(b"hello?")
        assert nothing_within(fresh, 0.5)
        fresh.close()
        proxy.restore()
        assert nothing_within(sock, 0.3), "a half-open connection stays so"
        with connect(proxy) as again:
            again.sendall(b"ok")
            assert read_exactly(again, 2) == b"ok"


def test_bad_arguments_are_refused(proxy: TcpProxy) -> None:
    with pytest.raises(ValueError, match="direction"):
        proxy.stall("sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        proxy.delay(-1)
    with pytest.raises(ValueError):
        proxy.throttle(0)


def test_heal_ends_every_fault(proxy: TcpProxy) -> None:
    proxy.stall("both")
    proxy.mute()
    proxy.delay(5)
    proxy.throttle(10)
    proxy.heal()
    with connect(proxy) as sock:
        sock.sendall(b"fine")
        assert read_exactly(sock, 4, timeout=3) == b"fine"
