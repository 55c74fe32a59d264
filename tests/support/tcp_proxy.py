"""A WAN-fault TCP proxy for tests: what a slow, stalling or broken link does to a broker connection.

``TcpProxy(target_host, target_port)`` listens on a free port of 127.0.0.1 and
forwards every connection to the target, each direction on its own lane (a reader
and a writer thread), so one direction can be held, slowed or closed alone.

* :meth:`~TcpProxy.cut` resets every open connection (RST, ``SO_LINGER`` 0) and
  refuses new ones (accepted and reset at once, as a broker that went away) until
  :meth:`~TcpProxy.restore`.
* :meth:`~TcpProxy.stall` stops forwarding without any RST: the connections stay
  open and nothing moves.  ``stall()`` holds what clients send (the other direction
  flows: a broker that does not keep up; what they send waits in TCP buffers, then
  in them); ``stall("both")`` holds both directions (a WAN link that stopped passing
  packets); :meth:`~TcpProxy.flow` forwards again, in order, nothing lost.
* :meth:`~TcpProxy.mute` drops what the target sends (requests arrive, their
  answers never: a confirmation lost on the way) until :meth:`~TcpProxy.unmute`.
* :meth:`~TcpProxy.delay` adds latency and jitter per direction (a seeded
  ``random.Random`` per connection and direction: the same seed gives the same
  delays), order kept; :meth:`~TcpProxy.throttle` caps bytes per second per
  direction, shared by all connections (one link).
* :meth:`~TcpProxy.half_close` sends a FIN one way (the other way still flows);
  :meth:`~TcpProxy.vanish` makes the target's side go away silently: the target
  sees its connections close, the client's stay open and nothing ever answers
  (a half-open connection), and new connections are accepted and left silent,
  until :meth:`~TcpProxy.restore`.

``client_buffer`` sets the proxy's receive buffer on the client side, so a stall
backs up into the client sooner.  Plain threads, no Twisted reactor and no event
loop, so any test (or benchmark) can use it.  Buffered data is bounded: a lane
holds at most ``LANE_CHUNKS`` chunks before it stops reading (backpressure).
"""

from __future__ import annotations

import contextlib
import queue
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Literal

Direction = Literal["to_target", "to_client", "both"]
TO_TARGET: Direction = "to_target"
TO_CLIENT: Direction = "to_client"
BOTH: Direction = "both"
LANE_CHUNKS = 512
"""Chunks (of at most 64 KiB) a lane buffers before it stops reading its source."""
_TICK = 0.02


def _directions(direction: Direction) -> tuple[str, ...]:
    if direction == BOTH:
        return (TO_TARGET, TO_CLIENT)
    if direction not in (TO_TARGET, TO_CLIENT):
        raise ValueError(f"direction must be 'to_target', 'to_client' or 'both', not {direction!r}")
    return (direction,)


def jitter_delays(seed: int, stream: str, latency: float, jitter: float) -> Iterator[float]:
    """The delays (seconds) of one lane: ``latency`` plus a uniform draw in ``[-jitter, +jitter]``
    (never below 0) from ``random.Random(f"{seed}:{stream}")``: the same seed and stream, the same delays."""
    draw = random.Random(f"{seed}:{stream}")
    while True:
        yield max(0.0, latency + (draw.uniform(-jitter, jitter) if jitter else 0.0))


class _Bucket:
    """A token bucket shared by the lanes of one direction (bytes per second; None: no cap)."""

    def __init__(self) -> None:
        self.rate: int | None = None
        self._lock = threading.Lock()
        self._free_at = 0.0

    def wait_for(self, size: int) -> float:
        """Reserve ``size`` bytes of the link; how long to wait before sending them."""
        with self._lock:
            if not self.rate:
                return 0.0
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + size / self.rate
            return start - now


class _Link:
    """The proxy's shared state: what each direction does now."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.stalled: set[str] = set()
        self.muted = False
        self.latency: dict[str, tuple[float, float]] = {TO_TARGET: (0.0, 0.0), TO_CLIENT: (0.0, 0.0)}
        self.buckets: dict[str, _Bucket] = {TO_TARGET: _Bucket(), TO_CLIENT: _Bucket()}
        self.forwarded: dict[str, int] = {TO_TARGET: 0, TO_CLIENT: 0}
        self.lock = threading.Lock()


class _Lane:
    """One direction of one connection: reads ``source``, writes ``sink`` when due."""

    def __init__(self, pair: _Pair, direction: str, source: socket.socket, sink: socket.socket) -> None:
        self.pair, self.direction, self.source, self.sink = pair, direction, source, sink
        self.chunks: queue.Queue[tuple[float, bytes]] = queue.Queue(LANE_CHUNKS)
        self.closed = threading.Event()
        """Set once this direction is finished (EOF passed on, half-closed, or the pair ended)."""
        self._last_due = 0.0
        self._delays: Iterator[float] | None = None
        self._shape: tuple[float, float] = (0.0, 0.0)

    def start(self) -> None:
        name = f"tcp-proxy-{self.pair.proxy.port}-{self.direction}"
        threading.Thread(target=self._read, name=f"{name}-read", daemon=True).start()
        threading.Thread(target=self._write, name=f"{name}-write", daemon=True).start()

    def _delay(self) -> float:
        link = self.pair.proxy.link
        shape = link.latency[self.direction]
        if shape == (0.0, 0.0):
            return 0.0
        if self._delays is None or shape != self._shape:
            self._shape = shape
            self._delays = jitter_delays(link.seed, f"{self.pair.number}:{self.direction}", *shape)
        return next(self._delays)

    def _held(self) -> bool:
        return self.direction in self.pair.proxy.link.stalled

    def _read(self) -> None:
        link = self.pair.proxy.link
        try:
            while not self.pair.ended.is_set() and not self.closed.is_set():
                if self._held():
                    time.sleep(_TICK)
                    continue
                readable, _, _ = select.select([self.source], [], [], 0.1)
                if not readable or self._held():
                    continue
                data = self.source.recv(65536)
                if data and self.direction == TO_CLIENT and (link.muted or self.pair.silent):
                    continue  # the answer is lost on the way
                due = max(self._last_due, time.monotonic() + self._delay())
                self._last_due = due
                while not self.pair.ended.is_set():
                    try:
                        self.chunks.put((due, data), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if not data:
                    return
        except (OSError, ValueError):
            self._broken()

    def _broken(self) -> None:
        """A socket failed: reset the pair, unless it is the target's side of a vanished one."""
        if not (self.pair.silent and (self.direction == TO_CLIENT or self.closed.is_set())):
            self.pair.end(reset=True)

    def _write(self) -> None:
        link = self.pair.proxy.link
        try:
            while not self.pair.ended.is_set():
                try:
                    due, data = self.chunks.get(timeout=0.1)
                except queue.Empty:
                    if self.closed.is_set():
                        return
                    continue
                while not self.pair.ended.is_set() and (self._held() or time.monotonic() < due):
                    time.sleep(min(_TICK, max(0.0, due - time.monotonic())) or _TICK)
                if self.pair.ended.is_set() or self.closed.is_set():
                    return
                if not data:
                    self.closed.set()
                    with contextlib.suppress(OSError):
                        self.sink.shutdown(socket.SHUT_WR)
                    self.pair.lane_done()
                    return
                if self.pair.silent and self.direction == TO_TARGET:
                    continue  # the target is gone: what the client sends goes nowhere
                for start in range(0, len(data), 16384):
                    piece = data[start:start + 16384]
                    wait = link.buckets[self.direction].wait_for(len(piece))
                    if wait:
                        time.sleep(wait)
                    self.sink.sendall(piece)
                    with link.lock:
                        link.forwarded[self.direction] += len(piece)
        except (OSError, ValueError):
            if not (self.pair.silent and self.direction == TO_TARGET):
                self._broken()


class _Pair:
    """A client connection and its upstream connection to the target."""

    def __init__(self, proxy: TcpProxy, number: int, client: socket.socket, upstream: socket.socket | None) -> None:
        self.proxy, self.number, self.client, self.upstream = proxy, number, client, upstream
        self.ended = threading.Event()
        self.silent = upstream is None
        self._done = 0
        self._lock = threading.Lock()
        self.lanes: dict[str, _Lane] = {}
        if upstream is not None:
            self.lanes = {TO_TARGET: _Lane(self, TO_TARGET, client, upstream),
                          TO_CLIENT: _Lane(self, TO_CLIENT, upstream, client)}

    def start(self) -> None:
        if self.silent:
            threading.Thread(target=self._swallow, name=f"tcp-proxy-{self.proxy.port}-silent", daemon=True).start()
        for lane in self.lanes.values():
            lane.start()

    def _swallow(self) -> None:
        """A connection nobody answers: read and drop what the client sends until it leaves."""
        try:
            while not self.ended.is_set():
                readable, _, _ = select.select([self.client], [], [], 0.1)
                if readable and not self.client.recv(65536):
                    break
        except (OSError, ValueError):
            pass
        self.end()

    def lane_done(self) -> None:
        with self._lock:
            self._done += 1
            finished = self._done >= len(self.lanes)
        if finished:
            self.end()

    def half_close(self, direction: str) -> None:
        lane = self.lanes.get(direction)
        if lane is None or lane.closed.is_set():
            return
        lane.closed.set()
        with contextlib.suppress(OSError):
            lane.sink.shutdown(socket.SHUT_WR)
        self.lane_done()

    def vanish(self) -> None:
        """The target's side goes away (it sees a FIN); the client's stays open, unanswered."""
        self.silent = True
        back = self.lanes.get(TO_CLIENT)
        if back is not None and not back.closed.is_set():
            back.closed.set()  # no FIN to the client: it is simply never answered again
            self.lane_done()
        if self.upstream is not None:
            _close(self.upstream)

    def end(self, *, reset: bool = False) -> None:
        with self._lock:
            if self.ended.is_set():
                return
            self.ended.set()
        self.proxy._forget(self)
        for sock in (self.client, self.upstream):
            if sock is not None:
                (_reset if reset else _close)(sock)


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port``, with WAN faults on demand.

    :param seed: seeds the jitter of :meth:`delay` (one stream per connection and direction).
    """

    def __init__(self, target_host: str, target_port: int, port: int = 0, *, client_buffer: int = 0,
                 seed: int = 0) -> None:
        self.target = (target_host, target_port)
        self.client_buffer = client_buffer
        self.link = _Link(seed)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if client_buffer:  # inherited by accepted sockets
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, client_buffer)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[_Pair] = set()
        self._open = True
        self._vanished = False
        self._closed = False
        self.connections = 0
        """How many connections were accepted and forwarded (or held silent) so far (for assertions)."""
        self._acceptor = threading.Thread(target=self._accept, name=f"tcp-proxy-{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        """Connections open now (forwarded or held silent)."""
        with self._lock:
            return len(self._pairs)

    def forwarded(self, direction: Direction) -> int:
        """Bytes written on so far in ``direction`` (``both``: the sum), all connections together."""
        with self.link.lock:
            return sum(self.link.forwarded[d] for d in _directions(direction))

    # -- faults ---------------------------------------------------------------------------

    def cut(self) -> None:
        """Reset (RST) every open connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._open = False
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            pair.end(reset=True)

    def restore(self) -> None:
        """Forward new connections again (after :meth:`cut` or :meth:`vanish`)."""
        with self._lock:
            self._open = True
            self._vanished = False

    def stall(self, direction: Direction = TO_TARGET) -> None:
        """Stop forwarding ``direction`` (default: what clients send; ``"both"``: a link that passes
        nothing); no RST, connections stay open, new ones too, until :meth:`flow`."""
        with self.link.lock:
            self.link.stalled.update(_directions(direction))

    def flow(self) -> None:
        """Forward every direction again after :meth:`stall`, in order, nothing lost."""
        with self.link.lock:
            self.link.stalled.clear()

    def mute(self) -> None:
        """Drop what the target sends (client requests still go through) until :meth:`unmute`."""
        self.link.muted = True

    def unmute(self) -> None:
        """Forward what the target sends again."""
        self.link.muted = False

    def delay(self, latency: float, jitter: float = 0.0, direction: Direction = BOTH) -> None:
        """Hold each chunk of ``direction`` ``latency`` ± ``jitter`` seconds (seeded, order kept);
        ``delay(0)`` ends it for what is read from then on."""
        if latency < 0 or jitter < 0:
            raise ValueError("latency and jitter are seconds >= 0")
        with self.link.lock:
            for d in _directions(direction):
                self.link.latency[d] = (float(latency), float(jitter))

    def throttle(self, bytes_per_second: int | None, direction: Direction = BOTH) -> None:
        """Cap ``direction`` at ``bytes_per_second`` (all connections together); None: no cap."""
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be > 0 (or None for no cap)")
        for d in _directions(direction):
            self.link.buckets[d].rate = bytes_per_second

    def half_close(self, direction: Direction) -> None:
        """Send a FIN in ``direction`` on every open connection (``to_client``: clients see the
        target close; ``to_target``: the target sees the client close); the other way still flows."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            for d in _directions(direction):
                pair.half_close(d)

    def vanish(self) -> None:
        """The target goes away silently: its side of every connection closes, the clients' stay
        open and unanswered (half-open), and new connections are accepted and left silent until
        :meth:`restore` (the half-open ones stay so: a client must notice them itself)."""
        with self._lock:
            self._vanished = True
            pairs = list(self._pairs)
        for pair in pairs:
            pair.vanish()

    def heal(self) -> None:
        """End every fault: restore, flow, unmute, no latency, no cap."""
        self.restore()
        self.flow()
        self.unmute()
        self.delay(0)
        self.throttle(None)

    def close(self) -> None:
        """Stop listening and drop everything."""
        self._closed = True
        self.cut()
        _close(self._listener)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _forget(self, pair: _Pair) -> None:
        with self._lock:
            self._pairs.discard(pair)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refuse, silent = not self._open, self._vanished
            if refuse:
                _reset(client)
                continue
            upstream: socket.socket | None = None
            if not silent:
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    _reset(client)
                    continue
                upstream.settimeout(None)
            with self._lock:
                if not self._open:
                    _reset(client)
                    if upstream is not None:
                        _reset(upstream)
                    continue
                self.connections += 1
                pair = _Pair(self, self.connections, client, upstream)
                self._pairs.add(pair)
            pair.start()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN (``SO_LINGER`` on, timeout 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
